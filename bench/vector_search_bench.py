"""Where recall by meaning spends its time on PostgreSQL, and what an HNSW index, halfvec or fewer
dimensions would save (issue 31, item 4).

Run from the repository root:

    .venv/bin/python bench/vector_search_bench.py              # ~3 minutes
    .venv/bin/python bench/vector_search_bench.py --calls 30   # fewer calls per variant

A throwaway cluster (prme_pg.testing, shared_buffers = 256MB, pgvector required) holds
10,000 memories of one owner (bench/semantic_bench.py's texts) with their vectors by
wordllama 256 (prme.node_embeddings, stored by embed_pending), and, in side tables of
the same shape, by wordllama-128 and -64 (the same weights cut: Matryoshka) and as halfvec.
It adds the partial HNSW index and prme.recall_hnsw of bench/proposals/04_recall_hnsw.sql,
then times, side by side, interleaved call by call: the nearest-100 query of 310_recall.sql
and its variants, and whole recalls (exact, HNSW, words only). Quality: the overlap of each
variant's 100 nearest with the exact 256-dim ones (recall@100) and of whole recalls'
top 10 with the exact recall's (ties make the overlap of the nearest sets slightly below 1
even for exact variants: many memories share a sentence).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
import semantic_bench as sb

from prme_pg import MemoryClient, testing
from prme_pg.backends.postgres import Float4Array
from prme_pg.embedding_worker import embed_pending
from prme_pg.embeddings import load_embedder

PROPOSAL = Path(__file__).resolve().parent / "proposals" / "04_recall_hnsw.sql"
MODEL = "wordllama-l2_supercat-256"
SIDE_TABLES = """
CREATE SCHEMA bench;
CREATE TABLE bench.e256 AS SELECT user_id, node_id, embedding::vector(256) AS embedding FROM prme.node_embeddings;
CREATE TABLE bench.half AS SELECT user_id, node_id, embedding::halfvec(256) AS embedding FROM prme.node_embeddings;
CREATE TABLE bench.e128 AS
    SELECT user_id, node_id, l2_normalize(subvector(embedding, 1, 128))::vector(128) AS embedding
    FROM prme.node_embeddings;
CREATE TABLE bench.e64 AS
    SELECT user_id, node_id, l2_normalize(subvector(embedding, 1, 64))::vector(64) AS embedding
    FROM prme.node_embeddings;
"""
_JOINED = """SELECT e.node_id FROM prme.node_embeddings e
JOIN prme.nodes n ON n.user_id = e.user_id AND n.id = e.node_id
WHERE e.user_id = 'bench' AND e.model_id = %(m)s AND e.embedding IS NOT NULL
  AND n.lifecycle_state NOT IN ('archived', 'deprecated')"""
NEAREST = {
    "exact 256 (310_recall.sql: join, tie-break)": (
        256, f"{_JOINED} ORDER BY e.embedding <#> %(v)s::real[]::vector, e.node_id LIMIT 100"),
    "exact 256, the vectors alone (no join)": (
        256, "SELECT node_id FROM bench.e256 ORDER BY embedding <#> %(v)s::real[]::vector(256) LIMIT 100"),
    "HNSW 256, ef_search 100": (
        256, f"SET LOCAL hnsw.ef_search = 100; {_JOINED} "
        "ORDER BY e.embedding::vector(256) <#> %(v)s::real[]::vector(256) LIMIT 100"),
    "HNSW 256, ef_search 200 (the proposal)": (
        256, f"SET LOCAL hnsw.ef_search = 200; {_JOINED} "
        "ORDER BY e.embedding::vector(256) <#> %(v)s::real[]::vector(256) LIMIT 100"),
    "exact halfvec(256), the vectors alone": (
        256, "SELECT node_id FROM bench.half ORDER BY embedding <#> %(v)s::real[]::halfvec(256) LIMIT 100"),
    "exact 128 (wordllama-128), the vectors alone": (
        128, "SELECT node_id FROM bench.e128 ORDER BY embedding <#> %(v)s::real[]::vector(128) LIMIT 100"),
    "exact 64 (wordllama-64), the vectors alone": (
        64, "SELECT node_id FROM bench.e64 ORDER BY embedding <#> %(v)s::real[]::vector(64) LIMIT 100"),
}  # fmt: skip
RECALL = (
    "SELECT id FROM {fn}('bench', %(q)s, max_count => 10, query_embedding => %(v)s::real[], embedding_model => %(m)s)"
)


def proposal_as(name: str) -> str:
    """bench/proposals/04_recall_hnsw.sql's function under another name, beside prme.recall."""
    text = PROPOSAL.read_text()
    function = text[text.index("CREATE OR REPLACE FUNCTION prme.recall(") :]
    function = function.replace("CREATE OR REPLACE FUNCTION prme.recall(", f"CREATE FUNCTION prme.{name}(", 1)
    return function.replace("recall.", f"{name}.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=120, help="calls per variant")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    args = parser.parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 150)
    rng = random.Random(2031)
    texts = sb.memory_texts(sb.MEMORIES, rng)
    questions = sb.question_texts(64, random.Random(5))
    embedders = {d: load_embedder(f"wordllama-{d}") for d in (256, 128, 64)}
    # Sent as the client sends them: binary float4[], no float formatted as text.
    vectors = {d: {q: Float4Array(e.embed([q])[0]) for q in questions} for d, e in embedders.items()}
    cluster = testing.PostgresCluster.create(sb.SETTINGS)
    try:
        server = testing.Server(cluster.dsn, cluster)
        dsn = server.dsn_for(testing.create_database(server, prefix="prme_vector_search"))
        testing.install_schema(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for start in range(0, len(texts), 1000):
                conn.execute(
                    "SELECT count(prme.add_node(user_id => 'bench', content => c, salience_base => s::numeric(5, 4)))"
                    " FROM unnest(%s::text[], %s::float8[]) AS t (c, s)",
                    (texts[start : start + 1000], [round(rng.random(), 4) for _ in range(1000)]),
                )
            with MemoryClient(dsn) as memory:
                embed_pending(memory)
            conn.execute(SIDE_TABLES)
            index = PROPOSAL.read_text()
            index = index[index.index("CREATE INDEX") : index.index(";", index.index("CREATE INDEX")) + 1]
            conn.execute(index)
            conn.execute(proposal_as("recall_hnsw"))
            conn.execute("VACUUM ANALYZE")
        conn = psycopg.connect(dsn)

        def nearest(sql: str, dims: int, q: str) -> list[Any]:
            *settings, query = sql.split(";")
            with conn.transaction():
                for setting in settings:
                    conn.execute(setting)  # type: ignore[arg-type]
                return [r[0] for r in conn.execute(query, {"m": MODEL, "v": vectors[dims][q]}).fetchall()]  # type: ignore[arg-type]

        def recall(fn: str, hybrid: bool) -> Callable[[str], list[Any]]:
            def call(q: str) -> list[Any]:
                params = {"q": q, "v": vectors[256][q] if hybrid else None, "m": MODEL if hybrid else None}
                with conn.transaction():
                    return [r[0] for r in conn.execute(RECALL.format(fn=fn), params).fetchall()]  # type: ignore[arg-type]

            return call

        def bound(sql: str, dims: int) -> Callable[[str], list[Any]]:
            return lambda q: nearest(sql, dims, q)

        calls: dict[str, Callable[[str], list[Any]]] = {name: bound(sql, dims) for name, (dims, sql) in NEAREST.items()}
        calls["whole prme.recall, hybrid (exact)"] = recall("prme.recall", True)
        calls["whole recall, hybrid, HNSW (the proposal)"] = recall("prme.recall_hnsw", True)
        calls["whole prme.recall, words only"] = recall("prme.recall", False)
        exact_near = {q: calls["exact 256 (310_recall.sql: join, tie-break)"](q) for q in questions}
        exact_top = {q: calls["whole prme.recall, hybrid (exact)"](q) for q in questions}
        quality = {}
        for name, call in calls.items():
            base, k = (exact_top, 10) if name.startswith("whole") else (exact_near, 100)
            quality[name] = statistics.mean(len(set(call(q)) & set(base[q])) / k for q in questions)

        def numbered(call: Callable[[str], list[Any]]) -> Callable[[int], list[Any]]:
            return lambda i: call(questions[i % len(questions)])

        samples = sb.interleave({name: numbered(call) for name, call in calls.items()}, args.calls)
        conn.close()
    finally:
        cluster.destroy()
    load = sb.load_average()
    result = {
        n: {"p50": round(sb.p50(s), 2), "p95": round(sb.p95(s), 2), "overlap_with_exact": round(quality[n], 3)}
        for n, s in samples.items()
    }
    if args.json:
        print(json.dumps({"load_average": load, "results": result}, indent=2))
        return 0
    table = Table(
        title=f"recall by meaning on PostgreSQL, 10,000 memories of one owner; load {load} on {os.cpu_count()} cores"
    )
    for column in ("query", "p50 ms", "p95 ms", "overlap with exact (nearest: @100, whole: top 10)"):
        table.add_column(column, justify="left" if column == "query" else "right")
    for name, r in result.items():
        table.add_row(name, f"{r['p50']:.2f}", f"{r['p95']:.2f}", f"{r['overlap_with_exact']:.3f}")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
