"""Recall by meaning (issue 31): what the embedder and the vectors cost, through the real client.

Run from the repository root:

    .venv/bin/python bench/semantic_bench.py            # ~4 minutes on a loaded 2-core machine
    .venv/bin/python bench/semantic_bench.py --quick    # fewer calls (~2 minutes)
    .venv/bin/python bench/semantic_bench.py --json     # one JSON document instead of the tables

On PostgreSQL (a throwaway cluster from this machine's binaries, prme_pg.testing, server
defaults but shared_buffers = 256MB; pgvector when installed) and on a memory pack:

1. Backfill: 10,000 memories of ONE owner go in without vectors (PostgreSQL: prme.add_node
   called set-based from SQL, 1,000 per statement; pack: one INSERT, as bench/client_bench.py
   loads its recall pack), then ``embed_pending`` (what ``prme-pg embed`` runs) gives each its
   vector with the default model. Its rate: target >= 5,000 memories/s on PostgreSQL.
   On PostgreSQL the owner's vectors then go into the HNSW index (``prme.index_embeddings``,
   as ``prme-pg embed`` does after its pass): its time, and how much of the exact scan's
   top 10 recall through the index keeps, over the questions below.
2. Recall over those 10,000: ``MemoryClient.recall`` with the default embedder (the question
   embedded, then hybrid prme.recall) against a client with ``embedder=False`` (words only),
   and the split of the hybrid call: the embedding of the question alone, the client's call
   with the vector given, and the engine's call alone (psycopg's ``SELECT * FROM
   prme.recall(...)``; on the pack, the backend's request without the client). Targets: hybrid
   p50 <= 10 ms on PostgreSQL, <= 20 ms on a pack. With ``--baseline REV`` (a git revision,
   e.g. ``--baseline 1debbda``), the pack's recall of that revision runs in the same loop on a
   copy of the pack whose vectors are stored as that revision stores them (DuckDB's float
   compression before the pack stored them plain): before and after side by side.
3. ``MemoryClient.add_node`` with its embedding against ``embedder=False``: client-observed
   p50, target <= 1.5x. On PostgreSQL with every commit flushed (server defaults) and with
   synchronous_commit off (the server's share smallest, so the embedder's largest).

Memories are ~100-character sentences from 16 templates over a small vocabulary (people,
places, foods, tools, habits); questions are a few words ("where does my sister live").
Every comparison interleaves its variants call by call, in an order that turns, so load
from other processes, which comes and goes within seconds, hits each side alike: quote
the ratios; absolute numbers depend on the load (printed with ``uptime``'s load average).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import psycopg
from rich.console import Console
from rich.table import Table

from prme_pg import MemoryClient, testing
from prme_pg.backends import RegisterEmbeddingModel
from prme_pg.backends import duckdb as pack_sql
from prme_pg.backends.duckdb import PACK_FILE
from prme_pg.backends.duckdb.connection import PackConnection
from prme_pg.backends.postgres import Float4Array
from prme_pg.client import recall_request
from prme_pg.embedding_worker import embed_pending, index_vectors
from prme_pg.embeddings import Embedder, Vector, load_embedder

USER = "bench"
WRITER = "writer"
MEMORIES = 10_000
SETTINGS = {"shared_buffers": "256MB"}
RECALL_TARGET_MS = {"PostgreSQL": 10.0, "pack": 20.0}
ADD_TARGET = 1.5
BACKFILL_TARGET = 5000.0

console = Console(width=None if sys.stdout.isatty() else 150)

# -- realistic texts ---------------------------------------------------------------------

PEOPLE = ["sister", "brother", "mother", "father", "wife", "husband", "manager", "colleague", "friend", "son",
          "daughter", "landlord", "dentist", "neighbour", "cousin", "grandmother"]  # fmt: skip
NAMES = ["Anna", "Ben", "Clara", "David", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kemal", "Lena",
         "Marta", "Nils", "Olga", "Pedro", "Rosa", "Sami", "Tara", "Viktor"]  # fmt: skip
CITIES = ["Berlin", "Lisbon", "Madrid", "Oslo", "Vienna", "Munich", "Hamburg", "Prague", "Milan", "Lyon",
          "Dublin", "Warsaw", "Zurich", "Porto", "Krakow", "Seville"]  # fmt: skip
FOODS = ["sushi", "spicy ramen", "vegetarian curry", "pizza with anchovies", "oat milk lattes", "green tea",
         "dark chocolate", "falafel", "black coffee", "sourdough bread", "pad thai", "goat cheese"]  # fmt: skip
TOOLS = ["Python", "Rust", "TypeScript", "PostgreSQL", "Kubernetes", "vim", "VS Code", "Terraform", "Go",
         "DuckDB", "React", "Docker"]  # fmt: skip
HOBBIES = ["bouldering", "running half marathons", "playing the cello", "baking bread", "sailing", "chess",
           "birdwatching", "cycling to work", "learning Japanese", "gardening", "photography", "yoga"]  # fmt: skip
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
THINGS = ["short answers with code examples", "detailed explanations", "bullet points", "metric units",
          "British spelling", "morning meetings", "asynchronous updates", "dark mode", "plain text emails",
          "weekly summaries"]  # fmt: skip
ALLERGIES = ["peanuts", "shellfish", "gluten", "lactose", "cats", "pollen", "penicillin"]
PROJECTS = ["billing migration", "search rewrite", "mobile app launch", "data warehouse", "onboarding flow",
            "security audit", "pricing page", "API gateway"]  # fmt: skip

TEMPLATES = [
    "My {person} {name} lives in {city} and usually visits us on {day} afternoons with the kids.",
    "The user prefers {thing} and gets impatient with long preambles in replies.",
    "Allergic to {allergy}: avoid suggesting recipes or restaurants that involve it, ever.",
    "Favourite food is {food}; orders it every {day} from the small place near the office.",
    "Works mostly in {tool} on the {project}, and reviews pull requests before lunch.",
    "Spends weekends {hobby} with {name}, and is training for an event in {city} this spring.",
    "Has a standing call with the {person} every {day} at nine to plan the {project}.",
    "Moved from {city} to {city2} last year and still misses the {food} there.",
    "Dislikes {tool} after a painful outage on the {project}; suggest {tool2} instead.",
    "Their {person} {name} is allergic to {allergy}, so birthday dinners avoid {food}.",
    "Drinks {food} in the morning and does not want meetings before ten on {day}.",
    "Is learning {tool} in the evenings and asked for exercises about error handling.",
    "The {project} deadline moved to the end of the quarter; {name} owns the rollout plan.",
    "Takes the train to {city} on {day}s for the {project} workshop with the {person}.",
    "Started {hobby} after a doctor's advice and tracks progress in a spreadsheet.",
    "Writes notes in {tool} and wants summaries of long threads as {thing}.",
]
QUESTIONS = [
    "where does my {person} live",
    "what food do I like",
    "which allergies should I remember",
    "how do I like answers",
    "what am I working on",
    "weekend hobbies",
    "when is the call with my {person}",
    "which city did I move to",
    "what tool should I avoid",
    "morning coffee habits",
    "{project} deadline",
    "who is {name}",
    "trip to {city}",
    "learning a programming language",
    "favourite restaurant",
    "sports and exercise",
]


def _fill(template: str, rng: random.Random) -> str:
    return template.format(
        person=rng.choice(PEOPLE), name=rng.choice(NAMES), city=rng.choice(CITIES), city2=rng.choice(CITIES),
        food=rng.choice(FOODS), tool=rng.choice(TOOLS), tool2=rng.choice(TOOLS), hobby=rng.choice(HOBBIES),
        day=rng.choice(DAYS), thing=rng.choice(THINGS), allergy=rng.choice(ALLERGIES), project=rng.choice(PROJECTS),
    )  # fmt: skip


TAILS = ["", " Mentioned on {day}.", " Confirmed again last week.", " Said so twice.", " Noted at the {day} check-in."]


def memory_texts(count: int, rng: random.Random) -> list[str]:
    return [_fill(rng.choice(TEMPLATES) + rng.choice(TAILS), rng) for _ in range(count)]


def question_texts(count: int, rng: random.Random) -> list[str]:
    return [_fill(QUESTIONS[i % len(QUESTIONS)], rng) for i in range(count)]


# -- timing ------------------------------------------------------------------------------


def p50(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def p95(samples: Sequence[float]) -> float:
    return sorted(samples)[max(0, round(0.95 * len(samples)) - 1)]


def interleave(variants: dict[str, Callable[[int], Any]], calls: int, warmup: int = 20) -> dict[str, list[float]]:
    """Milliseconds per call of each variant (called with the call's number), interleaved: call i
    of every variant runs before call i + 1 of any, in an order that turns each time, so load
    from other processes, which comes and goes within seconds, hits every variant alike."""
    names = list(variants)
    for call in variants.values():
        for i in range(warmup):
            call(i)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(calls):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            started = time.perf_counter()
            variants[name](i)
            samples[name].append((time.perf_counter() - started) * 1000)
    return samples


def recall_variants(
    hybrid: MemoryClient,
    words: MemoryClient,
    questions: list[str],
    vectors: dict[str, Vector],
    engine: Callable[[str, Vector | None], Any],
    engine_label: str,
) -> dict[str, Callable[[int], Any]]:
    """The recall calls compared on one engine: the clients, and the split of the hybrid call."""
    embedder = hybrid.embedder
    assert embedder is not None

    def q(i: int) -> str:
        return questions[i % len(questions)]

    return {
        "hybrid (client, default embedder)": lambda i: hybrid.recall(q(i), user_id=USER, max_count=10),
        "words only (client, embedder=False)": lambda i: words.recall(q(i), user_id=USER, max_count=10),
        "  embed the question alone": lambda i: embedder.embed([q(i)]),
        "  hybrid, vector given (client)": lambda i: hybrid.recall(
            q(i), user_id=USER, max_count=10, query_embedding=vectors[q(i)]
        ),
        f"  hybrid, {engine_label}": lambda i: engine(q(i), vectors[q(i)]),
        f"  words only, {engine_label}": lambda i: engine(q(i), None),
    }


def server_cpu_seconds(pid: int) -> float:
    """Seconds of CPU (user + system) the server process ``pid`` has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu_ms(pid: int, call: Callable[[str], Any], questions: list[str], calls: int) -> float:
    """CPU milliseconds the server process ``pid`` spends per call (user + system, from /proc):
    what load from other processes, which stretches wall time, leaves alone."""
    started = server_cpu_seconds(pid)
    for i in range(calls):
        call(questions[i % len(questions)])
    return (server_cpu_seconds(pid) - started) * 1000 / calls


def load_memories(conn: psycopg.Connection[Any], texts: list[str], rng: random.Random) -> None:
    """``texts`` as memories of USER, prme.add_node called set-based from SQL, 1,000 per
    statement, each with a random salience and confidence 0.5."""
    for start in range(0, len(texts), 1000):
        chunk = texts[start : start + 1000]
        conn.execute(
            "SELECT count(prme.add_node(user_id => %s, content => c, salience_base => s::numeric(5, 4), "
            "confidence_base => 0.5)) FROM unnest(%s::text[], %s::float8[]) AS t (c, s)",
            (USER, chunk, [round(rng.random(), 4) for _ in chunk]),
        )


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


# -- PostgreSQL --------------------------------------------------------------------------

RAW_RECALL = (
    "SELECT * FROM prme.recall(user_id => %s, query => %s, max_count => 10, "
    "query_embedding => %s::real[], embedding_model => %s)"
)


def postgres(texts: list[str], questions: list[str], calls: int, adds: int) -> dict[str, Any]:
    embedder = load_embedder("wordllama")
    vectors = {q: embedder.embed([q])[0] for q in questions}
    rng = random.Random(31)
    cluster = testing.PostgresCluster.create(SETTINGS)
    try:
        server = testing.Server(cluster.dsn, cluster)
        name = testing.create_database(server, prefix="prme_semantic")
        dsn = server.dsn_for(name)
        testing.install_schema(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
            pgvector = row[0] if row else None
            started = time.perf_counter()
            load_memories(conn, texts, rng)
            load_seconds = time.perf_counter() - started
            conn.execute("VACUUM ANALYZE")
        with (
            MemoryClient(dsn, min_size=1, max_size=1) as hybrid,
            MemoryClient(dsn, min_size=1, max_size=1, embedder=False) as words,
            MemoryClient(
                dsn, min_size=1, max_size=1, connect_kwargs={"options": "-c synchronous_commit=off"}
            ) as hybrid_async,
            MemoryClient(
                dsn,
                min_size=1,
                max_size=1,
                embedder=False,
                connect_kwargs={"options": "-c synchronous_commit=off"},
            ) as words_async,
            psycopg.connect(dsn, autocommit=True) as raw,
        ):
            summary = embed_pending(hybrid, index=False)
            assert summary.pending == 0 and summary.vector_search, summary
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE prme.node_embeddings")
            model = embedder.model_id
            assert hybrid.recall(questions[0], user_id=USER), "no hit"
            # The owner's 10,000 vectors go into the HNSW index (prme-pg embed does this after
            # its pass): its build time, and how many of the exact top 10 the index path keeps.
            exact = {q: [h.id for h in hybrid.recall(q, user_id=USER, query_embedding=vectors[q])] for q in vectors}
            started = time.perf_counter()
            indexed = index_vectors(hybrid)
            index_seconds = time.perf_counter() - started
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE prme.node_embeddings")
            shared = [
                len(set(exact[q]) & {h.id for h in hybrid.recall(q, user_id=USER, query_embedding=vectors[q])})
                / max(1, len(exact[q]))
                for q in vectors
            ]

            def engine(query: str, vector: Vector | None) -> Any:
                # The client's binary float4[] (prme_pg.backends.postgres): no float formatted as text.
                arguments = (USER, query, None, None) if vector is None else (USER, query, Float4Array(vector), model)
                return raw.execute(RAW_RECALL, arguments).fetchall()

            recall = interleave(
                recall_variants(hybrid, words, questions, vectors, engine, "prme.recall alone (psycopg)"), calls
            )
            backend_pid = raw.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            server_cpu = {
                "hybrid": server_cpu_ms(backend_pid, lambda q: engine(q, vectors[q]), questions, calls),
                "words only": server_cpu_ms(backend_pid, lambda q: engine(q, None), questions, calls),
            }
            new_texts = memory_texts(4 * adds + 200, random.Random(7))
            add = interleave(
                {
                    "add_node with embedding (flushed commits)": lambda i: hybrid.add_node(
                        new_texts[i], user_id=WRITER
                    ),
                    "add_node, embedder=False (flushed commits)": lambda i: words.add_node(
                        new_texts[adds + 50 + i], user_id=WRITER
                    ),
                    "add_node with embedding (synchronous_commit off)": lambda i: hybrid_async.add_node(
                        new_texts[2 * adds + 100 + i], user_id=WRITER
                    ),
                    "add_node, embedder=False (synchronous_commit off)": lambda i: words_async.add_node(
                        new_texts[3 * adds + 150 + i], user_id=WRITER
                    ),
                },
                adds,
                warmup=0,
            )
    finally:
        cluster.destroy()
    return {
        "pgvector": pgvector,
        "load_seconds": load_seconds,
        "backfill": {"embedded": summary.embedded, "seconds": summary.seconds},
        "index": {"vectors": indexed, "seconds": index_seconds, "top10_shared": statistics.mean(shared)},
        "server_cpu_ms": server_cpu,
        "recall": recall,
        "add_node": add,
    }


# -- pack --------------------------------------------------------------------------------


def pack(texts: list[str], questions: list[str], calls: int, adds: int, baseline: str | None) -> dict[str, Any]:
    embedder = load_embedder("wordllama")
    vectors = {q: embedder.embed([q])[0] for q in questions}
    rng = random.Random(31)
    with tempfile.TemporaryDirectory(prefix="prme_semantic_bench_") as tmp:
        root = Path(tmp) / "memories"
        pack_sql.DuckDBBackend(root).close()  # creates the pack
        now = datetime.now(UTC)
        times = [now - timedelta(days=rng.uniform(0, 365)) for _ in texts]
        started = time.perf_counter()
        with duckdb.connect(str(root / PACK_FILE)) as con:
            con.execute(
                "INSERT INTO prme.nodes (id, user_id, content, salience_base, confidence_base, decay_profile, "
                "created_at, updated_at, version, last_checksum) "
                "SELECT unnest($ids), $user, unnest($contents), unnest($saliences), 0.5, 'medium', "
                "unnest($times), unnest($times), 1, repeat('0', 64)",
                {
                    "ids": [uuid.UUID(int=rng.getrandbits(128)) for _ in texts],
                    "user": USER,
                    "contents": texts,
                    "saliences": [round(rng.random(), 4) for _ in texts],
                    "times": times,
                },
            )
            con.execute("DELETE FROM prme.pack_info WHERE key = 'recall_words'")
        with MemoryClient(root) as hybrid:
            try:
                summary = embed_pending(hybrid)  # the first call opens the pack: it indexes the words
                backfill: dict[str, Any] = {"embedded": summary.embedded, "seconds": summary.seconds}
                assert summary.pending == 0, summary
            except duckdb.InvalidInputException as exc:
                # wip-31's pack store_embeddings passes $now to a statement without it: the
                # backfill fails; store the same vectors by SQL so that recall can be measured.
                backfill = {"error": str(exc).splitlines()[0]}
                store_by_sql(hybrid, embedder)
            load_seconds = time.perf_counter() - started - backfill.get("seconds", 0.0)
            model = embedder.model_id
            words = MemoryClient(root, embedder=False)
            words._backend = hybrid._backend  # one pack, one connection: the same backend
            backend = hybrid.backend

            def engine(query: str, vector: Vector | None, as_of: datetime | None = None) -> Any:
                model_id = None if vector is None else model
                return backend.execute(recall_request(query, USER, None, 10, as_of, vector, model_id))

            variants = recall_variants(hybrid, words, questions, vectors, engine, "the pack's recall alone (backend)")
            if baseline is not None:
                before = baseline_pack(hybrid, Path(tmp) / "before", baseline)

                def engine_before(query: str, vector: Vector | None, as_of: datetime | None = None) -> Any:
                    model_id = None if vector is None else model
                    return before.recall(recall_request(query, USER, None, 10, as_of, vector, model_id))

                # The same hits at the same instant (each call's default is its own now).
                for q in questions:
                    for vector in (vectors[q], None):
                        ours, theirs = engine(q, vector, now), engine_before(q, vector, now)
                        tolerance = 1e-9 if vector is None else 1e-6
                        assert same_hits(ours, theirs, tolerance), f"{baseline}: {q!r} differs"
                variants[f"  hybrid, {baseline}'s recall (backend)"] = lambda i: engine_before(
                    questions[i % len(questions)], vectors[questions[i % len(questions)]]
                )
                variants[f"  words only, {baseline}'s recall (backend)"] = lambda i: engine_before(
                    questions[i % len(questions)], None
                )
            recall = interleave(variants, calls)
            if baseline is not None:
                before.close()
            new_texts = memory_texts(2 * adds + 100, random.Random(7))
            add = interleave(
                {
                    "add_node with embedding": lambda i: hybrid.add_node(new_texts[i], user_id=WRITER),
                    "add_node, embedder=False": lambda i: words.add_node(new_texts[adds + 50 + i], user_id=WRITER),
                },
                adds,
                warmup=0,
            )
    return {"load_seconds": load_seconds, "backfill": backfill, "recall": recall, "add_node": add}


def same_hits(ours: list[Any], theirs: list[Any], tolerance: float) -> bool:
    """The same memories in the same order, scores equal within ``tolerance`` (docs/RECALL.md:
    1e-9 by words, 1e-6 with vectors); two memories whose scores are that close may trade places."""
    return len(ours) == len(theirs) and all(
        abs(a.score - b.score) <= tolerance
        and (a.id == b.id or {a.id, b.id} <= {h.id for h in theirs if abs(h.score - a.score) <= 2 * tolerance})
        for a, b in zip(ours, theirs, strict=True)
    )


def baseline_pack(client: MemoryClient, root: Path, revision: str) -> Any:
    """A copy of the client's pack opened with the pack recall of git ``revision``, its vectors
    stored as that revision stored them (DuckDB's default float compression before the pack
    stored them plain)."""
    source = subprocess.run(
        ["git", "show", f"{revision}:prme_pg/backends/duckdb/recall.py"], capture_output=True, text=True, check=True
    ).stdout
    root.mkdir()
    (root / "recall.py").write_text(source, encoding="utf-8")
    # A module of the pack's package, so that its relative imports are today's modules.
    spec = importlib.util.spec_from_file_location("prme_pg.backends.duckdb._baseline_recall", root / "recall.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    client.backend._con.execute("CHECKPOINT")  # type: ignore[attr-defined]
    shutil.copy(Path(client.backend.path) / PACK_FILE, root / PACK_FILE)  # type: ignore[attr-defined]
    if "disabled_compression_methods" not in source:
        with duckdb.connect(str(root / PACK_FILE)) as con:  # default settings: compressed floats
            con.execute("UPDATE prme.node_embeddings SET embedding = embedding WHERE embedding IS NOT NULL")
            con.execute("CHECKPOINT")
    baseline = type("BaselineRecall", (module.RecallOperations, PackConnection), {})
    return baseline(root)  # a PackConnection installs nothing: the copy stays as it is


def store_by_sql(client: MemoryClient, embedder: Embedder) -> None:
    """The pack's vectors written as embed_pending would store them, by one INSERT (the fallback)."""
    backend = client.backend
    backend.execute(RegisterEmbeddingModel(model_id=embedder.model_id, dimensions=embedder.dimensions))
    con = backend._con  # type: ignore[attr-defined]
    rows = con.execute("SELECT user_id, id, content FROM prme.nodes").fetchall()
    vectors = embedder.embed([row[2] for row in rows])
    con.execute(
        "INSERT INTO prme.node_embeddings (user_id, node_id, model_id, embedding, error, embedded_at) "
        "SELECT unnest($users), unnest($ids), $model, unnest(CAST($vectors AS FLOAT [] [])), NULL, now()",
        {"users": [r[0] for r in rows], "ids": [r[1] for r in rows], "model": embedder.model_id,
         "vectors": vectors.tolist()},
    )  # fmt: skip


# -- report ------------------------------------------------------------------------------


def summarise(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"load_average": load_average(), "memories": MEMORIES}
    for engine, res in results.items():
        recall = res["recall"]
        lexical = p50(recall["words only (client, embedder=False)"])
        add = res["add_node"]
        add_ratios = {}
        for name, samples in add.items():
            if "with embedding" in name:
                other = name.replace(" with embedding", ", embedder=False")
                add_ratios[name] = p50(samples) / p50(add[other])
        hybrid = recall["hybrid (client, default embedder)"]
        out[engine] = {
            "pgvector": res.get("pgvector"),
            "load_seconds": round(res["load_seconds"], 2),
            "backfill_per_second": (
                round(res["backfill"]["embedded"] / res["backfill"]["seconds"])
                if "seconds" in res["backfill"]
                else None
            ),
            "backfill_error": res["backfill"].get("error"),
            "recall_ms": {
                name: {"p50": round(p50(s), 3), "p95": round(p95(s), 3), "vs_words": round(p50(s) / lexical, 2)}
                for name, s in recall.items()
            },
            "recall_target_ms": RECALL_TARGET_MS[engine],
            "recall_met": p50(hybrid) <= RECALL_TARGET_MS[engine],
            "add_node_ms": {name: {"p50": round(p50(s), 3), "p95": round(p95(s), 3)} for name, s in add.items()},
            "add_node_ratio": {name: round(r, 3) for name, r in add_ratios.items()},
            "add_node_met": all(r <= ADD_TARGET for r in add_ratios.values()),
        }
        if engine == "PostgreSQL":
            out[engine]["backfill_met"] = out[engine]["backfill_per_second"] >= BACKFILL_TARGET
            out[engine]["server_cpu_ms_per_recall"] = {k: round(v, 2) for k, v in res["server_cpu_ms"].items()}
            out[engine]["index"] = {
                "vectors": res["index"]["vectors"],
                "seconds": round(res["index"]["seconds"], 2),
                "top10_shared_with_exact": round(res["index"]["top10_shared"], 3),
            }
    return out


def report(summary: dict[str, Any]) -> None:
    console.print(f"load average (1, 5, 15 min) at the end: {summary['load_average']} on {os.cpu_count()} cores")
    for engine in ("PostgreSQL", "pack"):
        if engine not in summary:
            continue
        s = summary[engine]
        extra = f", pgvector {s['pgvector']}" if s.get("pgvector") else ""
        table = Table(
            title=f"{engine}{extra}: recall over {MEMORIES:,} memories of one owner, max_count 10, "
            f"target hybrid p50 <= {s['recall_target_ms']:g} ms"
        )
        for column in ("call", "p50 ms", "p95 ms", "vs words only (p50)"):
            table.add_column(column, justify="left" if column == "call" else "right")
        for name, r in s["recall_ms"].items():
            table.add_row(name, f"{r['p50']:.2f}", f"{r['p95']:.2f}", f"{r['vs_words']:.2f}x")
        console.print(table)
        table = Table(title=f"{engine}: MemoryClient.add_node, client-observed, target <= {ADD_TARGET}x")
        for column in ("call", "p50 ms", "p95 ms", "with / without embedding (p50)"):
            table.add_column(column, justify="left" if column == "call" else "right")
        for name, r in s["add_node_ms"].items():
            ratio = s["add_node_ratio"].get(name)
            table.add_row(name, f"{r['p50']:.2f}", f"{r['p95']:.2f}", "" if ratio is None else f"{ratio:.2f}x")
        console.print(table)
        rate = s["backfill_per_second"]
        backfill = f"backfill (embed_pending, default model): {rate:,} memories/s" if rate else "backfill FAILED"
        if s["backfill_error"]:
            backfill += f" ({s['backfill_error']}; vectors stored by SQL instead)"
        if engine == "PostgreSQL":
            backfill += f" (target >= {BACKFILL_TARGET:,.0f}/s: {'met' if s['backfill_met'] else 'NOT met'})"
        console.print(f"{backfill}; memories loaded without vectors in {s['load_seconds']:.1f} s", highlight=False)
        if "server_cpu_ms_per_recall" in s:
            cpu = s["server_cpu_ms_per_recall"]
            console.print(
                f"server CPU per prme.recall (from /proc, unmoved by load): hybrid {cpu['hybrid']:.2f} ms, "
                f"words only {cpu['words only']:.2f} ms",
                highlight=False,
            )
        if "index" in s:
            index = s["index"]
            console.print(
                f"HNSW index: {index['vectors']:,} vectors moved and indexed in {index['seconds']:.1f} s; recall's "
                f"top 10 through it shares {index['top10_shared_with_exact']:.3f} with the exact scan's",
                highlight=False,
            )
        console.print(
            f"targets: recall {'met' if s['recall_met'] else 'NOT met'}, "
            f"add_node {'met' if s['add_node_met'] else 'NOT met'}",
            highlight=False,
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="120 recall calls and 60 add_node calls per variant")
    parser.add_argument("--calls", type=int, help="recall calls per variant (300; --quick 120)")
    parser.add_argument("--adds", type=int, help="add_node calls per variant (150; --quick 60)")
    parser.add_argument("--only", choices=("postgres", "pack"), help="one engine only")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    parser.add_argument(
        "--baseline", metavar="REV", help="also run the pack's recall of this git revision, on vectors stored as it did"
    )
    args = parser.parse_args(argv)
    calls = args.calls or (120 if args.quick else 300)
    adds = args.adds or (60 if args.quick else 150)
    rng = random.Random(2031)
    texts = memory_texts(MEMORIES, rng)
    questions = question_texts(64, rng)
    results: dict[str, dict[str, Any]] = {}
    if args.only != "pack":
        with console.status("PostgreSQL: load, backfill, recall, add_node ..."):
            results["PostgreSQL"] = postgres(texts, questions, calls, adds)
    if args.only != "postgres":
        with console.status("pack: load, backfill, recall, add_node ..."):
            results["pack"] = pack(texts, questions, calls, adds, args.baseline)
    summary = summarise(results)
    summary["mean_memory_chars"] = round(float(np.mean([len(t) for t in texts])), 1)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        report(summary)
    met = all(
        s.get("recall_met", True) and s.get("add_node_met", True) for s in summary.values() if isinstance(s, dict)
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
