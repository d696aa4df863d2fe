"""prme-pg scale-out benchmark: the per-call cost of the PL/Proxy tier (issue 19, item 6).

Run from the repository root:

    .venv/bin/python bench/proxy_bench.py            # ~1 minute
    .venv/bin/python bench/proxy_bench.py --calls 300 # shorter

It starts two throwaway clusters from this machine's PostgreSQL binaries (a shard and
a proxy; FAST_SETTINGS, as latency not durability is measured), a pgbouncer in front
of the shard, migrates the shard and installs the proxy twice: one proxy database
reaching the shard directly, one through pgbouncer. Then, one client, in one run and
in alternating rounds:

* ``prme.reinforce`` of a node of its own each call: direct, through the proxy with
  pgbouncer (``proxy``), and through the proxy straight to the shard (``proxy_no_pool``);
* ``prme.recall`` over 200 memories, the same three ways;
* a PR404 (``prme.get_node`` of an unknown id): direct, through the proxy straight to the
  shard (PL/Proxy drops its connection after every remote error: a new shard session per
  error), and through the proxy with pgbouncer between (a new pgbouncer client, the
  shard session reused).

Milliseconds per call (median and mean). Results are printed as a table and written as
JSON to bench/results/ (git-ignored). Quote differences, not absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prme_pg import shard, testing  # noqa: E402

USER = "bench-owner"


def _timed(call: Callable[[], Any], calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return times


def _expect_404(conn: psycopg.Connection[Any]) -> Callable[[], None]:
    def call() -> None:
        try:
            conn.execute("SELECT * FROM prme.get_node(%s, %s)", (USER, uuid.uuid4()))
        except psycopg.Error as exc:
            if exc.sqlstate != "PR404":
                raise
        else:
            raise AssertionError("expected PR404")

    return call


def _fill(dsn: str, count: int) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """200 memories to recall over, and ``count`` (node, evidence) pairs: each reinforce
    confirms a node of its own, so that every call does the same work."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for n in range(200):
            conn.execute("SELECT prme.add_node(%s, %s)", (USER, f"memory {n} about tea and coffee {n % 7}"))
        rows = conn.execute(
            "SELECT (prme.add_node(%(u)s, 'confirmed ' || g)).id, (prme.add_event(%(u)s, 'said so ' || g)).id "
            "FROM generate_series(1, %(n)s) AS g",
            {"u": USER, "n": count},
        ).fetchall()
    return [(row[0], row[1]) for row in rows]


def _swap(pair: tuple[uuid.UUID, uuid.UUID]) -> tuple[uuid.UUID, str, uuid.UUID]:
    return pair[0], USER, pair[1]


def measure(calls: int, rounds: int) -> dict[str, dict[str, float]]:
    shard_cluster = testing.PostgresCluster.create(testing.FAST_SETTINGS)
    proxy_cluster = testing.PostgresCluster.create(testing.FAST_SETTINGS)
    bouncer: testing.PgBouncer | None = None
    try:
        with psycopg.connect(shard_cluster.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE prme")
        with psycopg.connect(proxy_cluster.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE proxy_direct")
            conn.execute("CREATE DATABASE proxy_bouncer")
        shard_dsn = f"host=127.0.0.1 port={shard_cluster.port} dbname=prme user=postgres"
        bouncer = testing.PgBouncer({"shard0": shard_dsn})
        bouncer.start()
        testing.install_schema(shard_dsn)
        proxies = {}
        for name, routed in (("proxy_direct", shard_dsn), ("proxy_bouncer", bouncer.dsn("shard0"))):
            proxies[name] = f"host=127.0.0.1 port={proxy_cluster.port} dbname={name} user=postgres"
            with psycopg.connect(proxies[name], autocommit=True) as conn:
                shard.init_cluster(conn, [routed], 1)
                shard.migrate_cluster(conn)
        pairs = iter(_fill(shard_dsn, calls * rounds * 3))
        samples: dict[str, list[float]] = {}
        targets = {"direct": shard_dsn, "proxy": proxies["proxy_bouncer"], "proxy_no_pool": proxies["proxy_direct"]}
        connections = {name: psycopg.connect(dsn, autocommit=True) for name, dsn in targets.items()}
        try:
            for _ in range(rounds):
                for via in ("direct", "proxy", "proxy_no_pool"):
                    conn = connections[via]
                    samples.setdefault(f"reinforce/{via}", []).extend(
                        _timed(
                            lambda conn=conn: conn.execute(
                                "SELECT * FROM prme.reinforce(node_id => %s, user_id => %s, evidence_id => %s)",
                                (*_swap(next(pairs)),),
                            ).fetchall(),
                            calls,
                        )
                    )
                    samples.setdefault(f"recall/{via}", []).extend(
                        _timed(
                            lambda conn=conn: conn.execute(
                                "SELECT * FROM prme.recall(user_id => %s, query => 'tea coffee', max_count => 10)",
                                (USER,),
                            ).fetchall(),
                            calls,
                        )
                    )
                for via, label in (("direct", "direct"), ("proxy_no_pool", "proxy"), ("proxy", "proxy+pgbouncer")):
                    samples.setdefault(f"PR404/{label}", []).extend(
                        _timed(_expect_404(connections[via]), max(calls // 5, 20))
                    )
        finally:
            for conn in connections.values():
                conn.close()
        return {
            name: {"calls": len(values), "median_ms": statistics.median(values), "mean_ms": statistics.fmean(values)}
            for name, values in samples.items()
        }
    finally:
        if bouncer is not None:
            bouncer.stop()
        proxy_cluster.destroy()
        shard_cluster.destroy()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=1000, help="calls per workload and round (default 1000)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (default 2)")
    args = parser.parse_args()
    results = measure(args.calls, args.rounds)
    table = Table(title="per-call latency, one client (ms)")
    for column in ("workload", "calls", "median", "mean"):
        table.add_column(column)
    for name, row in results.items():
        table.add_row(name, str(row["calls"]), f"{row['median_ms']:.3f}", f"{row['mean_ms']:.3f}")
    Console().print(table)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    (out / f"proxy-{stamp}.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
