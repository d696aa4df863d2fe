"""What a change to prme.recall costs: this tree's recall against a baseline revision's, on one database.

Run from the repository root:

    .venv/bin/python bench/recall_cost_bench.py --baseline main      # ~2 minutes
    .venv/bin/python bench/recall_cost_bench.py --baseline 0123abc --memories 20000 --calls 384

The schema cost bench (bench/schema_cost_bench.py) measures write paths on two databases;
a read path is better measured on one: the same rows, the same cache. This starts a
throwaway cluster (prme_pg.testing, shared_buffers = 256MB, pgvector when installed),
applies this tree's schema, loads ``--memories`` memories of ONE owner with their vectors
(bench/semantic_bench.py's corpus and default model) and creates the baseline revision's
prme.recall, taken from ``git show REV:sql/postgres/310_recall.sql``, as ``baseline.recall``
(same body, another schema; the helpers it calls are this tree's, so change only recall
between the two). Both run the same questions, interleaved call by call on two connections,
first while the owner's vectors are scanned exactly, then after prme.index_embeddings has
moved them into the HNSW index, with a query vector (hybrid) and without (words only).

Then, over 200 questions, how close the index comes: the share of the exact 100 nearest
among the index's 100 nearest, and of the exact scan's top 10 in recall's top 10 by the index.

Reported per variant: the server's CPU per call, from /proc, which load from other
processes disturbs far less than wall time (quote the ratio), the p50 round trip, and
how many questions the two answered differently (memories, order, or a score by more than
1e-6, the tolerance recall's results are defined by): on the exact
scan a change meant to be pure speed must show "same"; by the index, whose answers are
approximate, the agreement with the exact scan (above) says more.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from semantic_bench import (
    SETTINGS,
    USER,
    load_average,
    load_memories,
    memory_texts,
    question_texts,
    server_cpu_seconds,
)

from prme_pg import MemoryClient, testing
from prme_pg.backends.postgres import Float4Array
from prme_pg.embedding_worker import embed_pending, index_vectors
from prme_pg.embeddings import load_embedder

ROOT = Path(__file__).resolve().parent.parent
RECALL_FILE = "sql/postgres/310_recall.sql"
CALL = "SELECT id, score FROM {}(%s, %s, NULL, 10, '2026-12-07T00:00:00Z', %s, %s)"


def baseline_recall(revision: str) -> str:
    """The baseline revision's CREATE FUNCTION prme.recall, renamed baseline.recall."""
    source = subprocess.run(
        ["git", "show", f"{revision}:{RECALL_FILE}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    start = source.index("CREATE FUNCTION prme.recall(")
    end = source.index("COMMENT ON FUNCTION prme.recall(")
    return source[start:end].replace("CREATE FUNCTION prme.recall(", "CREATE FUNCTION baseline.recall(", 1)


def same_answer(ours: list[Any], theirs: list[Any]) -> bool:
    """The same memories in the same order, each score within 1e-6 (recall's tolerance: a
    cosine may be summed in another precision, word weights in another order)."""
    return [r[0] for r in ours] == [r[0] for r in theirs] and all(
        abs(a[1] - b[1]) <= 1e-6 for a, b in zip(ours, theirs, strict=True)
    )


def compare(dsn: str, questions: list[str], vectors: dict[str, Float4Array], model: str, calls: int) -> list[Any]:
    """Rows (variant, function, cpu ms, p50 ms, questions answered differently) for hybrid and
    words-only calls."""
    rows: list[Any] = []
    functions = ("prme.recall", "baseline.recall")
    with psycopg.connect(dsn, autocommit=True) as a, psycopg.connect(dsn, autocommit=True) as b:
        conns = dict(zip(functions, (a, b), strict=True))
        pids = {f: c.execute("SELECT pg_backend_pid()").fetchone()[0] for f, c in conns.items()}  # type: ignore[index]
        for variant in ("hybrid", "words only"):

            def call(function: str, question: str, variant: str = variant) -> list[Any]:
                vector, name = (vectors[question], model) if variant == "hybrid" else (None, None)
                return conns[function].execute(CALL.format(function), (USER, question, vector, name)).fetchall()

            differ = sum(not same_answer(call(functions[0], q), call(functions[1], q)) for q in questions)
            started = {f: server_cpu_seconds(pids[f]) for f in functions}
            samples: dict[str, list[float]] = {f: [] for f in functions}
            for i in range(calls):
                for function in functions if i % 2 == 0 else functions[::-1]:
                    began = time.perf_counter()
                    call(function, questions[i % len(questions)])
                    samples[function].append((time.perf_counter() - began) * 1000)
            for function in functions:
                cpu = (server_cpu_seconds(pids[function]) - started[function]) * 1000 / calls
                rows.append((variant, function, cpu, statistics.median(samples[function]), differ))
    return rows


def answers(dsn: str, questions: list[str], vectors: dict[str, Float4Array], model: str) -> list[set[Any]]:
    """The ids of this tree's hybrid top 10, question by question."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        call = CALL.format("prme.recall")
        return [{row[0] for row in conn.execute(call, (USER, q, vectors[q], model))} for q in questions]


def index_recall(dsn: str, questions: list[str], vectors: dict[str, Float4Array], model: str) -> list[float]:
    """Per question, the share of the exact 100 nearest that the HNSW index returns among its
    100 nearest, searched as prme.recall searches it (prme._hnsw_ef_search; iterative scan)."""
    shares = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        dimensions = conn.execute("SELECT dimensions FROM prme.embedding_models WHERE model_id = %s", (model,))
        cast = f"vector({dimensions.fetchone()[0]})"  # type: ignore[index]
        ef_search = conn.execute(
            "SELECT prme._hnsw_ef_search(100, to_regclass('prme.' || prme._vector_index(%s)))", (model,)
        ).fetchone()[0]  # type: ignore[index]
        conn.execute(f"SET hnsw.ef_search = {int(ef_search)}")
        conn.execute("SET hnsw.iterative_scan = strict_order")
        for q in questions:
            exact = conn.execute(
                "SELECT node_id FROM prme.node_embeddings WHERE user_id = %s AND model_id = %s"
                " ORDER BY embedding <#> %s::vector LIMIT 100",
                (USER, model, vectors[q]),
            ).fetchall()
            found = conn.execute(
                f"SELECT node_id FROM prme.node_embeddings AS v WHERE v.model_id = %s AND v.indexed AND v.user_id = %s"
                f" ORDER BY (v.embedding::{cast}) <#> %s::{cast} LIMIT 100",
                (model, USER, vectors[q]),
            ).fetchall()
            shares.append(len(set(exact) & set(found)) / max(1, len(exact)))
    return shares


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="git revision whose prme.recall is the baseline")
    parser.add_argument("--memories", type=int, default=10_000, help="memories of the one owner (10,000)")
    parser.add_argument("--calls", type=int, default=256, help="calls per function and variant (256)")
    args = parser.parse_args(argv)

    console = Console()
    baseline = baseline_recall(args.baseline)
    embedder = load_embedder("wordllama")
    questions = question_texts(64, random.Random(2))
    agreement_questions = question_texts(200, random.Random(5))
    vectors = {q: Float4Array(embedder.embed([q])[0]) for q in {*questions, *agreement_questions}}
    texts = memory_texts(args.memories, random.Random(1))
    cluster = testing.PostgresCluster.create(SETTINGS)
    try:
        server = testing.Server(cluster.dsn, cluster)
        dsn = server.dsn_for(testing.create_database(server, prefix="prme_recall_cost"))
        testing.install_schema(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            load_memories(conn, texts, random.Random(31))
            conn.execute("CREATE SCHEMA baseline")
            conn.execute(baseline)  # type: ignore[arg-type]  # a whole statement from the repository
        with MemoryClient(dsn, min_size=1, max_size=1) as client:
            embed_pending(client, index=False)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
            rows = [("exact scan", *row) for row in compare(dsn, questions, vectors, embedder.model_id, args.calls)]
            exact = answers(dsn, agreement_questions, vectors, embedder.model_id)
            started = time.perf_counter()
            moved = index_vectors(client, min_vectors=1)
            index_seconds = time.perf_counter() - started
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE prme.node_embeddings")
            rows += [("HNSW index", *row) for row in compare(dsn, questions, vectors, embedder.model_id, args.calls)]
            indexed = answers(dsn, agreement_questions, vectors, embedder.model_id)
            nearest = index_recall(dsn, agreement_questions, vectors, embedder.model_id)
    finally:
        cluster.destroy()

    table = Table(
        title=f"prme.recall (this tree) vs {args.baseline}'s, {args.memories:,} memories of one owner, "
        f"{args.calls} calls each (load {load_average()})"
    )
    for column in ("vectors", "call", "function", "server CPU ms/call", "ratio", "p50 ms", "results"):
        table.add_column(column)
    for i in range(0, len(rows), 2):
        ours, theirs = rows[i], rows[i + 1]
        for row in (ours, theirs):
            ratio = f"{row[3] / theirs[3]:.2f}x" if row is ours else "1.00x"
            function = "this tree" if row is ours else args.baseline
            results = f"{row[5]} of {len(questions)} differ" if row[5] else "same"
            table.add_row(row[0], row[1], function, f"{row[3]:.2f}", ratio, f"{row[4]:.2f}", results)
    console.print(table)
    shared = [len(a & b) / max(1, len(a)) for a, b in zip(exact, indexed, strict=True)]
    console.print(
        f"HNSW index: {moved:,} vectors moved into it in {index_seconds:.1f} s; over {len(agreement_questions)}"
        f" questions its 100 nearest hold {statistics.mean(nearest):.3f} of the"
        f" exact 100 (least {min(nearest):.2f}); recall's top 10 through it shares {statistics.mean(shared):.4f} of"
        f" the exact scan's memories (least {min(shared):.1f}; the corpus repeats sentences, which tie)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
