"""What embedding long memories' parts costs the executor (issue 31, item 5).

Run from the repository root:

    .venv/bin/python bench/long_memory_executor_bench.py              # 200 memories of 13 parts, 3 rounds
    .venv/bin/python bench/long_memory_executor_bench.py --memories 50 --rounds 1

It starts a throwaway cluster (synchronous_commit off: server work, not the disk), and per
round, on fresh databases, submits ``--memories`` long add_node operations (260 words,
token_budget 20: 13 parts each) and has them executed and given a vector the two ways
``prme-pg worker`` can:

- ``parts``: ``run_worker(embedder=...)``: each part embedded before it is validated, the
  memory created with the pooled vector (migration 0028);
- ``whole``: ``run_worker()`` without an embedder, then one pass of the embedding worker
  (``embed_pending``), which embeds each memory's whole content: what the worker did before
  0028, and still does for an executor that does not embed. Run on the schema before 0028
  too (``whole, 27``).

It prints, per memory, the server's CPU (the cluster's processes, exited backends
included, from /proc), this process's CPU (the model, the driver) and the wall time, the
median of the rounds. The load average is printed: the machine is shared.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import rfc8785
from psycopg.types.json import Jsonb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prme_pg import migrations, testing  # noqa: E402
from prme_pg.client import MemoryClient  # noqa: E402
from prme_pg.embedding_worker import embed_pending  # noqa: E402
from prme_pg.embeddings import load_embedder  # noqa: E402
from prme_pg.worker import run_worker  # noqa: E402

CONTENT = " ".join(f"the user wrote line {i} of a long meeting note about the roadmap" for i in range(20))
PAYLOAD: dict[str, Any] = {"content": CONTENT, "token_budget": 20}
SUBMIT = "SELECT created FROM prme.submit_operation(%s, %s, 2, 'add_node', '{}', %s, %s)"


def cluster_cpu_seconds(postmaster: int) -> float:
    """User + system CPU of the postmaster, its exited children (reaped) and its live ones."""
    tick = os.sysconf("SC_CLK_TCK")

    def fields(pid: int) -> list[str]:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()

    own = fields(postmaster)
    total = sum(int(v) for v in own[11:15])  # utime, stime, cutime, cstime
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(postmaster):
            try:
                stat = fields(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):
                continue
            if stat[1] == str(postmaster):  # ppid
                total += int(stat[11]) + int(stat[12])
    return total / tick


def build(server: testing.Server, version: int, memories: int) -> str:
    name = testing.create_database(server, prefix="long_exec")
    dsn = server.dsn_for(name)
    digest = hashlib.sha256(rfc8785.dumps(PAYLOAD)).hexdigest()
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrations.migrate(conn, [m for m in migrations.load_migrations() if m.version <= version])
        with conn.transaction():
            for i in range(memories):
                conn.execute(SUBMIT, (f"user_{i % 10}", str(uuid.uuid4()), digest, Jsonb(PAYLOAD)))
        conn.execute("VACUUM ANALYZE")
    return dsn


def measure(dsn: str, postmaster: int, way: str) -> dict[str, float]:
    embedder = load_embedder("wordllama")
    server0, client0, wall0 = cluster_cpu_seconds(postmaster), time.process_time(), time.perf_counter()
    if way == "parts":
        finished = run_worker(dsn, worker="bench", until_idle=True, install_signal_handlers=False, embedder=embedder)
    else:
        finished = run_worker(dsn, worker="bench", until_idle=True, install_signal_handlers=False)
        with MemoryClient(dsn, embedder=embedder, min_size=1, max_size=1) as client:
            embed_pending(client, count=False, index=False)
    wall = time.perf_counter() - wall0
    client_cpu = time.process_time() - client0
    time.sleep(0.2)  # the backends exit and are reaped: their CPU moves to the postmaster's children
    server = cluster_cpu_seconds(postmaster) - server0
    with psycopg.connect(dsn) as conn:
        vectors = conn.execute("SELECT count(*) FROM prme.node_embeddings").fetchone()
    assert vectors is not None and vectors[0] == finished, (vectors, finished)
    return {
        "server_ms": server * 1000 / finished,
        "client_ms": client_cpu * 1000 / finished,
        "wall_ms": wall * 1000 / finished,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    latest = max(m.version for m in migrations.load_migrations())
    ways = {"parts": latest, "whole": latest, f"whole, {latest - 1}": latest - 1}
    results: dict[str, list[dict[str, float]]] = {way: [] for way in ways}
    cluster = testing.PostgresCluster.create({"synchronous_commit": "off"})
    try:
        server = testing.Server(cluster.dsn)
        postmaster = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
        for round_number in range(args.rounds):
            order = list(ways) if round_number % 2 == 0 else list(ways)[::-1]
            for way in order:
                dsn = build(server, ways[way], args.memories)
                results[way].append(measure(dsn, postmaster, way.split(",")[0]))
            print(
                f"round {round_number + 1} done (load {' '.join(f'{v:.2f}' for v in os.getloadavg())})", file=sys.stderr
            )
    finally:
        cluster.destroy()
    report: dict[str, Any] = {
        way: {key: statistics.median(r[key] for r in rows) for key in rows[0]} for way, rows in results.items()
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{args.memories} long memories of 13 parts (260 words), median of {args.rounds} rounds, per memory:")
    print(f"  {'way':<10} {'server CPU ms':>14} {'client CPU ms':>14} {'wall ms':>9}")
    for way, row in report.items():
        print(f"  {way:<10} {row['server_ms']:>14.2f} {row['client_ms']:>14.2f} {row['wall_ms']:>9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
