"""prme-pg's LangGraph store against LangGraph's own PostgresStore, side by side (issue 34, item 6).

Run from the repository root (needs pgvector on this machine's PostgreSQL: scripts/install-system-deps):

    .venv/bin/python bench/langgraph_bench.py                  # 10,000 items, ~5 minutes
    .venv/bin/python bench/langgraph_bench.py --items 2000     # quicker
    .venv/bin/python bench/langgraph_bench.py --json

One throwaway cluster (prme_pg.testing), two databases on it: one with prme-pg's schema
for ``PrmeStore``, one with ``PostgresStore.setup()`` (pgvector, an HNSW index). Both
stores get the same index config (256 dimensions, prme's bundled WordLlama model wrapped as
LangGraph's ``embed`` callable, ``fields=["text"]``) and the same items: ``--items`` short texts in one
namespace, put one by one. Then, alternating between the stores in rounds so load from
other processes hits both alike:

* ``put``: a new value for an existing key (PostgresStore: one upsert; prme: find the key's
  versions, create the next version's node with its journal record, archive the old one
  with its record);
* ``get`` of a random key;
* ``search`` with a query (two vocabulary words), limit 10, in the items' namespace.

After the load, prme's vectors go into its HNSW index (``prme.index_embeddings()``, what
the ``prme-vector-index`` job, ``prme-pg embed`` or the worker runs), as PostgresStore's go
into its HNSW index on insert.

Reported: calls per second of each and prme's time per call over PostgresStore's (the
targets' measure), and the server CPU per call of each store's one connection (from /proc),
which load from other processes, stretching wall time, leaves mostly alone. Targets: get and
search at most 1.5x, put at most 2x (prme writes journal records that PostgresStore does not).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg
from langgraph.store.postgres import PostgresStore
from semantic_bench import server_cpu_seconds

from prme_pg import testing
from prme_pg.embeddings import WordLlamaEmbedder
from prme_pg.langgraph import PrmeStore

DIMS = 256
NS = ("memories", "bench")
TARGETS = {"put": 2.0, "get": 1.5, "search": 1.5}


_MODEL = WordLlamaEmbedder(DIMS)


def embed(texts: list[str]) -> list[list[float]]:
    """prme's default model as LangGraph's ``embed`` callable: the same vectors for both stores."""
    vectors: list[list[float]] = _MODEL.embed(texts).tolist()
    return vectors


def words(rng: random.Random, vocabulary: list[str], n: int) -> str:
    return " ".join(rng.choice(vocabulary) for _ in range(n))


def timed(calls: list[Callable[[], Any]], pid: int) -> tuple[float, float]:
    """Wall seconds of the calls, and CPU seconds of the server process ``pid`` meanwhile."""
    cpu = server_cpu_seconds(pid)
    start = time.perf_counter()
    for call in calls:
        call()
    return time.perf_counter() - start, server_cpu_seconds(pid) - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=10000)
    parser.add_argument("--calls", type=int, default=300, help="calls of each kind per store per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    rng = random.Random(34)
    vocabulary = [f"w{n}" for n in range(3000)] + ["tea", "coffee", "tabs", "spaces", "dark", "light"]
    texts = [words(rng, vocabulary, 8) for _ in range(args.items)]
    index: Any = {"dims": DIMS, "embed": embed, "fields": ["text"]}

    cluster = testing.PostgresCluster.create()
    server = testing.Server(cluster.dsn, cluster)
    results: dict[str, dict[str, float]] = {}
    try:
        prme_db = testing.create_database(server, prefix="prme_lg_bench")
        lg_db = testing.create_database(server, prefix="lg_bench")
        testing.install_schema(server.dsn_for(prme_db))
        with (
            PrmeStore.from_conn_string(server.dsn_for(prme_db), index=index, max_size=1) as prme,
            psycopg.connect(server.dsn_for(lg_db), autocommit=True) as conn,
        ):
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            lg = PostgresStore(conn, index=index)
            prme.setup()
            lg.setup()
            stores: dict[str, Any] = {"prme": prme, "postgres_store": lg}
            # Each store's one server connection (prme's pool holds one), for its CPU per call.
            with prme.client.backend.pool.connection() as held:  # type: ignore[attr-defined]
                pids = {"prme": held.info.backend_pid, "postgres_store": conn.info.backend_pid}
            load: dict[str, float] = {}
            for name, store in stores.items():
                load[name], _ = timed(
                    [lambda s=store, n=n: s.put(NS, f"k{n}", {"text": texts[n], "n": n}) for n in range(args.items)],
                    pids[name],
                )
            # Both databases vacuumed and analyzed, as autovacuum does soon after a load of this
            # size: planned from the empty tables' estimates, prme's recall joins vectors per
            # candidate (seconds), and its word index would search the load's pending entries.
            for db in (prme_db, lg_db):
                with psycopg.connect(server.dsn_for(db), autocommit=True) as analyze:
                    analyze.execute("VACUUM ANALYZE")
            # The owner's vectors into the HNSW index, as the prme-vector-index job (or prme-pg
            # embed, or the worker) does within minutes of a load; then its statistics.
            with psycopg.connect(server.dsn_for(prme_db), autocommit=True) as conn_prme:
                indexed = 0
                while moved := conn_prme.execute("SELECT indexed FROM prme.index_embeddings()").fetchone()[0]:  # type: ignore[index]
                    indexed += moved
                assert indexed >= args.items, indexed
                conn_prme.execute("VACUUM ANALYZE prme.node_embeddings")
            kinds: dict[str, dict[str, list[float]]] = {k: {name: [] for name in stores} for k in TARGETS}
            server_cpu: dict[str, dict[str, list[float]]] = {k: {name: [] for name in stores} for k in TARGETS}
            for round_no in range(args.rounds):
                keys = [rng.randrange(args.items) for _ in range(args.calls)]
                queries = [words(rng, vocabulary[:3000], 2) for _ in range(args.calls)]
                fresh = [words(rng, vocabulary, 8) for _ in range(args.calls)]
                order = list(stores.items()) if round_no % 2 == 0 else list(reversed(stores.items()))
                for name, s in order:
                    ops: dict[str, list[Callable[[], Any]]] = {
                        "put": [
                            lambda s=s, k=k, t=t, r=round_no: s.put(NS, f"k{k}", {"text": t, "n": k, "r": r})
                            for k, t in zip(keys, fresh, strict=True)
                        ],
                        "get": [lambda s=s, k=k: s.get(NS, f"k{k}") for k in keys],
                        "search": [lambda s=s, q=q: s.search(NS, query=q, limit=10) for q in queries],
                    }
                    for kind, calls in ops.items():
                        wall, cpu = timed(calls, pids[name])
                        kinds[kind][name].append(wall)
                        server_cpu[kind][name].append(cpu)
            for kind, sides in kinds.items():
                prme_s = sum(sides["prme"])
                lg_s = sum(sides["postgres_store"])
                calls = args.calls * args.rounds
                ratios = [p / q for p, q in zip(sides["prme"], sides["postgres_store"], strict=True)]
                spent = server_cpu[kind]
                results[kind] = {
                    "prme_per_s": calls / prme_s,
                    "postgres_store_per_s": calls / lg_s,
                    "ratio": statistics.median(ratios),
                    "target": TARGETS[kind],
                    "prme_server_ms": 1000 * sum(spent["prme"]) / calls,
                    "postgres_store_server_ms": 1000 * sum(spent["postgres_store"]) / calls,
                }
            results["load"] = {
                "prme_per_s": args.items / load["prme"],
                "postgres_store_per_s": args.items / load["postgres_store"],
                "ratio": load["prme"] / load["postgres_store"],
                "target": TARGETS["put"],
            }
            results["meta"] = {
                "items": args.items,
                "calls": args.calls,
                "rounds": args.rounds,
            }
    finally:
        server.close()  # destroys the cluster

    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    meta = results.pop("meta")
    print(
        f"{int(meta['items'])} items, {int(meta['calls'])} calls x {int(meta['rounds'])} rounds; "
        f"both embed with WordLlama ({DIMS} dimensions); prme ranks by words and vectors"
    )
    print(
        f"{'op':8} {'prme/s':>10} {'PostgresStore/s':>16} {'prme time x':>12} {'target':>7}      "
        f"{'server CPU ms/call: prme':>25} {'PostgresStore':>14}"
    )
    for kind, row in results.items():
        verdict = "ok" if row["ratio"] <= row["target"] else "MISS"
        cpu_text = (
            f"{row['prme_server_ms']:25.2f} {row['postgres_store_server_ms']:14.2f}" if "prme_server_ms" in row else ""
        )
        print(
            f"{kind:8} {row['prme_per_s']:10.0f} {row['postgres_store_per_s']:16.0f} "
            f"{row['ratio']:12.2f} {row['target']:6.1f}x {verdict:4} {cpu_text}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
