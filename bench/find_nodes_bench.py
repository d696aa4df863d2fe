"""The review search by meaning (prme.find_nodes, migration 0029): what the query vector costs.

Run from the repository root:

    .venv/bin/python bench/find_nodes_bench.py            # ~3 minutes on a loaded 2-core machine
    .venv/bin/python bench/find_nodes_bench.py --json     # one JSON document instead of the table

10,000 memories of ONE owner (bench/semantic_bench.py's sentences, written by
``MemoryClient.add_nodes`` in batches of 1,000 with their vectors by the default model), on
PostgreSQL (a throwaway cluster, prme_pg.testing, shared_buffers = 256MB, pgvector) and on a
memory pack. The questions are semantic_bench's. Compared call by call, interleaved:

- ``find_nodes`` through the client with the default embedder (the question embedded, then
  words and meaning) and with ``by_meaning=False`` (words alone, what find_nodes was before);
- the engine alone with and without the vector (psycopg's ``SELECT * FROM prme.find_nodes``;
  on a pack, the backend's request), and ``recall`` by words and meaning as a reference;
- on PostgreSQL, the server's CPU per engine call (from /proc, what other load leaves alone).

max_count is the console's 100. Quote the ratios; absolute numbers depend on the load.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from prme_pg import MemoryClient, testing
from prme_pg.backends.postgres import Float4Array
from prme_pg.client import find_nodes_request
from prme_pg.embeddings import Vector

sys.path.insert(0, str(Path(__file__).resolve().parent))
from semantic_bench import interleave, load_average, memory_texts, question_texts, server_cpu_ms

USER = "bench"
MEMORIES = 10_000
MAX_COUNT = 100
SETTINGS = {"shared_buffers": "256MB"}
RAW_FIND = (
    "SELECT * FROM prme.find_nodes(user_id => %s, query => %s, max_count => %s, "
    "query_embedding => %s::real[], embedding_model => %s)"
)

console = Console(width=None if sys.stdout.isatty() else 150)


def fill(client: MemoryClient, texts: list[str]) -> None:
    for start in range(0, len(texts), 1000):
        client.add_nodes([{"content": t} for t in texts[start : start + 1000]], user_id=USER)


def variants(
    client: MemoryClient, questions: list[str], vectors: dict[str, Vector], engine: Callable[[str, Vector | None], Any]
) -> dict[str, Callable[[int], Any]]:
    """The calls compared on one engine; "the engine alone" is psycopg's statement on
    PostgreSQL and the backend's request on a pack."""

    def q(i: int) -> str:
        return questions[i % len(questions)]

    return {
        "find_nodes, words and meaning (client)": lambda i: client.find_nodes(q(i), user_id=USER, max_count=MAX_COUNT),
        "find_nodes, words only (client, by_meaning=False)": lambda i: client.find_nodes(
            q(i), user_id=USER, max_count=MAX_COUNT, by_meaning=False
        ),
        "  find_nodes with the vector (the engine alone)": lambda i: engine(q(i), vectors[q(i)]),
        "  find_nodes without a vector (the engine alone)": lambda i: engine(q(i), None),
        "recall, words and meaning (client, reference)": lambda i: client.recall(q(i), user_id=USER, max_count=10),
    }


def postgres(texts: list[str], questions: list[str], calls: int) -> dict[str, Any]:
    cluster = testing.PostgresCluster.create(SETTINGS)
    try:
        server = testing.Server(cluster.dsn, cluster)
        name = testing.create_database(server, prefix="prme_find_bench")
        dsn = server.dsn_for(name)
        testing.install_schema(dsn)
        with MemoryClient(dsn, min_size=1, max_size=1) as client, psycopg.connect(dsn, autocommit=True) as raw:
            assert client.embedder is not None
            fill(client, texts)
            raw.execute("VACUUM ANALYZE")
            model = client.embedder.model_id
            vectors = {q: client.embedder.embed([q])[0] for q in questions}

            def engine(query: str, vector: Vector | None) -> Any:
                arguments = (
                    (USER, query, MAX_COUNT, None, None)
                    if vector is None
                    else (USER, query, MAX_COUNT, Float4Array(vector), model)
                )
                return raw.execute(RAW_FIND, arguments).fetchall()

            assert engine(questions[0], vectors[questions[0]]), "no hit"
            timings = interleave(variants(client, questions, vectors, engine), calls)
            pid = raw.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            cpu = {
                "with the vector": server_cpu_ms(pid, lambda q: engine(q, vectors[q]), questions, calls),
                "without a vector": server_cpu_ms(pid, lambda q: engine(q, None), questions, calls),
            }
    finally:
        cluster.destroy()
    return {"timings": timings, "server_cpu_ms": cpu}


def pack(texts: list[str], questions: list[str], calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="prme_find_bench_") as tmp, MemoryClient(Path(tmp) / "pack") as client:
        assert client.embedder is not None
        fill(client, texts)
        model = client.embedder.model_id
        vectors = {q: client.embedder.embed([q])[0] for q in questions}
        backend = client.backend

        def engine(query: str, vector: Vector | None) -> Any:
            request = find_nodes_request(query, USER, None, None, None, MAX_COUNT)
            if vector is not None:
                request = dataclasses.replace(request, query_embedding=vector, embedding_model=model)
            return backend.execute(request)

        assert engine(questions[0], vectors[questions[0]]), "no hit"
        timings = interleave(variants(client, questions, vectors, engine), calls)
    return {"timings": timings}


def summarise(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"memories": MEMORIES, "max_count": MAX_COUNT, "load_average": load_average()}
    for engine, result in results.items():
        out[engine] = {
            name: {"p50_ms": round(statistics.median(s), 2), "p95_ms": round(sorted(s)[int(0.95 * len(s)) - 1], 2)}
            for name, s in result["timings"].items()
        }
        if "server_cpu_ms" in result:
            out[engine]["server_cpu_ms_per_call"] = {k: round(v, 2) for k, v in result["server_cpu_ms"].items()}
    return out


def report(summary: dict[str, Any]) -> None:
    table = Table(title=f"find_nodes over {MEMORIES:,} memories of one owner, max_count {MAX_COUNT}")
    table.add_column("call")
    for engine in ("PostgreSQL", "pack"):
        table.add_column(f"{engine} p50 ms", justify="right")
        table.add_column(f"{engine} p95 ms", justify="right")
    for name in (n for n in summary["PostgreSQL"] if n != "server_cpu_ms_per_call"):
        row = [name]
        for engine in ("PostgreSQL", "pack"):
            row += [f"{summary[engine][name]['p50_ms']:.2f}", f"{summary[engine][name]['p95_ms']:.2f}"]
        table.add_row(*row)
    console.print(table)
    cpu = summary["PostgreSQL"]["server_cpu_ms_per_call"]
    console.print(
        f"PostgreSQL server CPU per find_nodes: {cpu['with the vector']:.2f} ms with the vector, "
        f"{cpu['without a vector']:.2f} ms without (x{cpu['with the vector'] / cpu['without a vector']:.2f}); "
        f"load average {summary['load_average']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100, help="timed calls per variant (default 100)")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    args = parser.parse_args(argv)
    rng = random.Random(31)
    texts = memory_texts(MEMORIES, rng)
    questions = question_texts(32, rng)
    results = {"PostgreSQL": postgres(texts, questions, args.calls), "pack": pack(texts, questions, args.calls)}
    summary = summarise(results)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        report(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
