"""Recall by meaning (issue 31): the embedders, vectors as derived state, the embedding worker,
bad input at every layer, and a server without pgvector. Real PostgreSQL, real packs, the real
bundled model (it loads from the installed wheel, offline)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import psycopg
import pytest

from prme_pg import InvalidInput, MemoryClient, migrations, testing
from prme_pg.embedding_worker import embed_pending
from prme_pg.embeddings import (
    EmbeddingError,
    WordLlamaEmbedder,
    embed_texts,
    load_embedder,
)

from .conformance_backends import Engine, engine_fixture  # noqa: F401

ALICE = "alice"
FACTS = [
    "Bob drives a Tesla Model 3",
    "Alice is allergic to peanuts",
    "Alice has a golden retriever named Max",
    "Alice's husband is called Tom",
    "Alice works as a nurse at the city hospital",
]


class BrokenEmbedder:
    """An embedder that fails on texts containing "boom" and returns a wrong shape for "shape"."""

    model_id = "test-broken-8"
    dimensions = 8

    def embed(self, texts: Sequence[str]) -> Any:
        if any("boom" in text for text in texts):
            raise RuntimeError("the model fell over")
        if any("shape" in text for text in texts):
            return np.ones((len(texts), 3), dtype=np.float32)
        rows = np.ones((len(texts), 8), dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def vector_rows(engine: Engine) -> int:
    count = "SELECT count(*) FROM prme.node_embeddings"
    return int(engine._sql(count, count, [])[0][0])


# -- the embedder ---------------------------------------------------------------------------


def test_the_bundled_model_loads_from_the_wheel_offline_and_normalises() -> None:
    # No network and no hub: the process has neither, and the loader asks for neither.
    code = (
        "import socket, sys\n"
        "def refuse(*a, **k): raise OSError('no network in this test')\n"
        "socket.socket.connect = refuse\n"
        "from prme_pg.embeddings import load_embedder, embed_texts\n"
        "e = load_embedder('wordllama')\n"
        "v = embed_texts(e, ['alice prefers tabs', ''])\n"
        "import logging; print(e.model_id, e.dimensions, round(float((v[0] ** 2).sum()), 5), float(abs(v[1]).sum()),"
        " logging.getLogger().handlers == [])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["wordllama-l2_supercat-256", "256", "1.0", "0.0", "True"]


class Wrapped:
    """A plugin built on another embedder: its factory loads that one by name."""

    def __init__(self) -> None:
        self.inner = load_embedder("wordllama-64")
        self.model_id, self.dimensions = "wrapped-wordllama-64", self.inner.dimensions

    def embed(self, texts: Sequence[str]) -> Any:
        return self.inner.embed(texts)


def test_an_embedder_factory_may_load_another_embedder() -> None:
    loaded: list[Any] = []
    loading = threading.Thread(target=lambda: loaded.append(load_embedder(f"{__name__}:Wrapped")), daemon=True)
    loading.start()
    loading.join(60)
    assert not loading.is_alive(), "load_embedder waited on itself"
    assert loaded[0].model_id == "wrapped-wordllama-64"
    assert loaded[0].inner is load_embedder("wordllama-64")


def test_other_embedders_plug_in_by_name_and_have_their_own_model_id() -> None:
    small = load_embedder("wordllama-64")
    assert (small.model_id, small.dimensions) == ("wordllama-l2_supercat-64", 64)
    assert load_embedder("tests.test_embeddings:BrokenEmbedder").model_id == "test-broken-8"
    with pytest.raises(InvalidInput, match="no embedder named 'nonsense'"):
        load_embedder("nonsense")
    with pytest.raises(InvalidInput, match="dimensions must be one of"):
        WordLlamaEmbedder(100)
    # Meaning: the question about a car is nearer the memory about a car than the one about peanuts.
    vectors = embed_texts(load_embedder("wordllama"), ["what car does bob own", FACTS[0], FACTS[1]])
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


def embed_by_reduceat(embedder: WordLlamaEmbedder, texts: list[str]) -> np.ndarray:
    """The bundled model's vectors as its first release computed them: encode_batch, then
    each text's token rows summed by np.add.reduceat (the reference for the faster sums)."""
    from prme_pg.embeddings import _BATCH, MAX_TOKENS

    table, tokenizer = embedder._table, embedder._tokenizer
    out = np.zeros((len(texts), embedder.dimensions), dtype=np.float32)
    for start in range(0, len(texts), _BATCH):
        chunk = texts[start : start + _BATCH]
        encodings = tokenizer.encode_batch(chunk, add_special_tokens=False)
        lengths = np.array([min(len(e.ids), MAX_TOKENS) for e in encodings], dtype=np.int64)
        if not lengths.any():
            continue
        ids = np.concatenate([np.asarray(e.ids[:MAX_TOKENS], dtype=np.int64) for e in encodings])
        np.clip(ids, 0, table.shape[0] - 1, out=ids)
        offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        present = lengths > 0
        sums = np.add.reduceat(table[ids], offsets[present], axis=0)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        out[start : start + len(chunk)][present] = sums / norms
    return out


def test_the_bundled_models_vectors_are_those_of_its_first_release() -> None:
    # Short and long runs of tokens (past MAX_TOKENS cut), empty and blank texts, other
    # scripts, and more texts than one chunk, in an order that mixes lengths within a chunk:
    # the sums are added in another order than reduceat's, so within float32 rounding.
    words = [
        "alice",
        "prefers",
        "tabs",
        "over",
        "spaces,",
        "Bob's",
        "café",
        "sells",
        "crêpes;",
        "東京",
        "に",
        "住む",
        "😀",
        "0123",
        "naïve",
    ]
    texts = ["", " ", "\n", "tabs", *FACTS]
    texts += [" ".join(words[i % len(words)] for i in range(count)) for count in range(1, 300, 7)]
    texts += ["x" * 5000, "word " * 9000, "é" * 20000]
    texts += [f"memory {i:07d} about editors, tabs and habits of an owner {'y' * (i % 40)}" for i in range(600)]
    for name in ("wordllama", "wordllama-64"):
        embedder = load_embedder(name)
        assert isinstance(embedder, WordLlamaEmbedder)
        expected = embed_by_reduceat(embedder, texts)
        vectors = embedder.embed(texts)
        assert vectors.dtype == np.float32 and vectors.shape == expected.shape
        assert np.abs(vectors - expected).max() <= 1e-6
        assert (np.linalg.norm(vectors, axis=1) == 0).tolist() == (np.linalg.norm(expected, axis=1) == 0).tolist()
        # One text alone is summed apart from a batch's texts: the same bits, empty and cut ones too.
        for i in (0, 3, 7, len(texts) - 602, len(texts) - 1):
            alone = embedder.embed(texts[i : i + 1])
            assert alone.tobytes() == vectors[i : i + 1].tobytes(), "a text's vector is its own"
        assert embedder.embed(texts).tobytes() == vectors.tobytes(), "and the same each time"


def test_a_failing_or_misshapen_embedder_is_an_embedding_error() -> None:
    broken = BrokenEmbedder()
    with pytest.raises(EmbeddingError, match="failed: RuntimeError: the model fell over"):
        embed_texts(broken, ["boom"])
    with pytest.raises(EmbeddingError, match=r"returned shape \(1, 3\), expected \(1, 8\)"):
        embed_texts(broken, ["shape"])


# -- vectors as derived state, both engines -------------------------------------------------------


def test_add_node_stores_its_vector_and_recall_finds_it_by_meaning(engine: Engine) -> None:
    memory = engine.client()
    nodes = [memory.add_node(fact, user_id=ALICE) for fact in FACTS]
    assert vector_rows(engine) == len(FACTS)
    assert memory.recall("what car does bob own", user_id=ALICE)[0].id == nodes[0].id
    assert memory.recall("does she have pets?", user_id=ALICE)[0].id == nodes[2].id
    # Words alone cannot: "car", "own", "pets" are in no memory.
    words_only = engine.client(embedder=False)
    assert [h.id for h in words_only.recall("does she have pets?", user_id=ALICE)] == []
    # Another owner's vectors are never compared.
    assert memory.recall("what car does bob own", user_id="bob") == []


def test_confirmations_outcomes_and_archives_never_write_vectors(engine: Engine) -> None:
    memory = engine.client()
    node = memory.add_node(FACTS[1], user_id=ALICE)
    said = memory.add_event("yes, peanuts", user_id=ALICE)
    before = engine._sql(
        "SELECT embedding::text, embedded_at FROM prme.node_embeddings",
        "SELECT CAST(embedding AS VARCHAR), embedded_at FROM prme.node_embeddings",
        [],
    )
    memory.reinforce(node.id, said.id, user_id=ALICE)
    memory.record_outcome(node.id, "implicit_success", user_id=ALICE)
    memory.archive_node(node.id, user_id=ALICE)
    after = engine._sql(
        "SELECT embedding::text, embedded_at FROM prme.node_embeddings",
        "SELECT CAST(embedding AS VARCHAR), embedded_at FROM prme.node_embeddings",
        [],
    )
    assert after == before
    # And no journal record names a vector.
    records, _ = memory.journal_records(user_id=ALICE)
    assert records and all("embedding" not in record.record for record in records)
    assert memory.verify_journal(user_id=ALICE, independent=True) == []


@pytest.mark.parametrize(
    ("embedding", "message"),
    [
        ([0.1] * 255, "embedding must have 256 dimensions"),
        ([float("nan")] + [0.0] * 255, "finite numbers"),
        ([float("inf")] + [0.0] * 255, "finite numbers"),
        ([1e39] + [0.0] * 255, "fit in 32 bits"),
        ("not a vector", "sequence of numbers"),
        # Float arrays and lists of floats are converted at once: the same refusals.
        (np.array([np.nan] + [0.0] * 255), "finite numbers"),
        (np.array([0.0] * 255 + [1e39]), "fit in 32 bits"),
        (np.zeros((256, 2)), "numbers only"),
        (np.array([True] * 256), "numbers only"),
        ([0.0] * 255 + [True], "numbers only"),
        ([0.0] * 255 + ["1"], "numbers only"),
    ],
)
def test_bad_vectors_are_refused_and_nothing_is_written(engine: Engine, embedding: Any, message: str) -> None:
    memory = engine.client()
    with pytest.raises(InvalidInput, match=message):
        memory.add_node("alice prefers tabs", user_id=ALICE, embedding=embedding)
    with pytest.raises(InvalidInput, match=message.replace("embedding", "query_embedding")):
        memory.recall("tabs", user_id=ALICE, query_embedding=embedding)
    assert memory.list_nodes(user_id=ALICE) == []
    assert vector_rows(engine) == 0


def test_a_huge_query_is_refused_before_the_model_runs(engine: Engine) -> None:
    memory = engine.client(embedder=BrokenEmbedder())
    with pytest.raises(InvalidInput, match="query must be at most 65536 bytes"):
        memory.recall("boom " * 2_000_000, user_id=ALICE)  # 10 MB: the model would fail on it


def test_an_embedder_that_fails_writes_nothing(engine: Engine) -> None:
    memory = engine.client(embedder=BrokenEmbedder())
    with pytest.raises(EmbeddingError):
        memory.add_node("boom", user_id=ALICE)
    with pytest.raises(EmbeddingError):
        memory.add_node("wrong shape", user_id=ALICE)
    assert memory.list_nodes(user_id=ALICE) == []


def test_the_sql_engine_refuses_what_the_client_would(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("SELECT prme.register_embedding_model('m3', 3)")
        for vector, message in [
            ("{1,0}", "embedding must have 3 dimensions"),
            ("{1,0,NaN}", "finite numbers"),
            ("{{1,0,0}}", "embedding must have 3 dimensions"),
        ]:
            with pytest.raises(psycopg.Error, match=message) as caught:
                conn.execute(
                    "SELECT prme.add_node('alice', 'x', embedding => %s::real[], embedding_model => 'm3')", [vector]
                )
            assert caught.value.sqlstate == "PR422"
        # A model's first vector registers it with its dimensions; the next must fit them.
        conn.execute("SELECT prme.add_node('alice', 'x', embedding => '{1,0,0,0}', embedding_model => 'm4')")
        with pytest.raises(psycopg.Error, match="embedding must have 4 dimensions for model 'm4'"):
            conn.execute("SELECT prme.add_node('alice', 'y', embedding => '{1,0,0}', embedding_model => 'm4')")
        with pytest.raises(psycopg.Error, match="registered with 3 dimensions, not 4") as conflict:
            conn.execute("SELECT prme.register_embedding_model('m3', 4)")
        assert conflict.value.sqlstate == "PR409"
        assert conn.execute("SELECT count(*) FROM prme.nodes").fetchone() == (1,)  # m4's first


# -- the embedding worker ----------------------------------------------------------------------


def test_the_worker_embeds_what_has_no_vector_and_goes_on_past_failures(engine: Engine) -> None:
    words_only = engine.client(embedder=False)
    nodes = [words_only.add_node(fact, user_id=ALICE) for fact in FACTS]
    failing = words_only.add_node("boom goes the dynamite", user_id="zed")
    assert vector_rows(engine) == 0
    memory = engine.client(embedder=BrokenEmbedder())
    seen: list[tuple[int, int]] = []
    summary = embed_pending(memory, batch_size=2, progress=lambda done, total: seen.append((done, total)))
    assert (summary.embedded, summary.failed, summary.pending) == (len(FACTS), 1, 0)
    assert seen[-1] == (len(FACTS) + 1, len(FACTS) + 1) and len(seen) == 3
    status = memory.embedding_status()
    assert status is not None and (status.pending, status.failed) == (0, 1)
    # Run again: nothing left; with retry_failed the failure is tried again (and fails again).
    assert embed_pending(memory).embedded == 0
    again = embed_pending(memory, retry_failed=True)
    assert (again.embedded, again.failed) == (0, 1)
    # Every memory of both owners has a row; the good ones a vector.
    stored = engine._sql(
        "SELECT node_id, embedding IS NOT NULL FROM prme.node_embeddings",
        "SELECT node_id, embedding IS NOT NULL FROM prme.node_embeddings",
        [],
    )
    assert dict(stored) == {**{n.id: True for n in nodes}, failing.id: False}


def test_memories_written_by_sql_are_found_by_meaning_after_prme_pg_embed(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        for fact in FACTS:
            conn.execute("SELECT prme.add_node('alice', %s)", [fact])
    with MemoryClient(db_dsn) as memory:
        assert memory.recall("does she have pets?", user_id=ALICE) == []  # no vector yet, no shared word
    out = subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", "embed", "--dsn", db_dsn, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert (summary["embedded"], summary["failed"], summary["pending"], summary["vector_search"]) == (5, 0, 0, True)
    with MemoryClient(db_dsn) as memory:
        assert memory.recall("does she have pets?", user_id=ALICE)[0].content == FACTS[2]
    status = subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", "status", "--dsn", db_dsn],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "recall by meaning: model wordllama-l2_supercat-256 (256 dimensions), loaded" in status.stdout
    assert "0 memories await a vector" in status.stdout


def test_the_async_client_embeds_too(engine: Engine) -> None:
    async def scenario() -> None:
        async with engine.aclient() as memory:
            node = await memory.add_node(FACTS[0], user_id=ALICE)
            hits = await memory.recall("what car does bob own", user_id=ALICE)
            assert hits[0].id == node.id
            status = await memory.embedding_status()
            assert status is not None and status.pending == 0

    asyncio.run(scenario())


# -- a server without pgvector ------------------------------------------------------------------


@pytest.fixture
def without_pgvector(pg_server: testing.Server) -> Iterator[str]:
    """A database migrated with prme.vector_search = off: what a server without pgvector gets."""
    name = testing.create_database(pg_server, prefix="prme_novector")
    dsn = pg_server.dsn_for(name)
    try:
        with psycopg.connect(dsn, autocommit=True, options="-c prme.vector_search=off") as conn:
            migrations.migrate(conn)
            assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'vector'").fetchone() == (0,)
        yield dsn
    finally:
        testing.drop_database(pg_server, name)


def test_without_pgvector_everything_works_and_recall_matches_words(without_pgvector: str) -> None:
    with MemoryClient(without_pgvector) as memory:
        node = memory.add_node("alice prefers tabs", user_id=ALICE)
        memory.reinforce(node.id, user_id=ALICE)
        assert [h.id for h in memory.recall("tabs please", user_id=ALICE)] == [node.id]
        assert memory.recall("how does she indent?", user_id=ALICE) == []  # no meaning without pgvector
        status = memory.embedding_status()
        assert status is not None and not status.vector_search and status.pending == 0
    out = subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", "status", "--dsn", without_pgvector],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0
    assert "no pgvector on the server: recall matches words" in out.stdout


def test_pgvector_added_later_turns_recall_by_meaning_on(without_pgvector: str) -> None:
    with MemoryClient(without_pgvector) as memory:
        memory.add_node(FACTS[2], user_id=ALICE)
        memory.add_node("alice likes long walks", user_id=ALICE)
    with psycopg.connect(without_pgvector, autocommit=True) as conn:
        with pytest.raises(psycopg.Error, match="pgvector is not installed") as refused:
            conn.execute("SELECT prme.enable_vector_search()")
        assert refused.value.sqlstate == "PR422"
        assert "CREATE EXTENSION vector" in (refused.value.diag.message_hint or "")
        conn.execute("CREATE EXTENSION vector")  # the two statements docs/RECALL.md gives
        assert conn.execute("SELECT * FROM prme.enable_vector_search()").fetchall() == [(True,)]
        assert conn.execute("SELECT * FROM prme.enable_vector_search()").fetchall() == [(True,)], "idempotent"
        helpers = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc AS p WHERE p.proname IN ('_inner_product', '_query_vector')"
            " AND p.pronamespace = 'prme'::regnamespace ORDER BY 1"
        ).fetchall()
        assert helpers == [("prme._inner_product(vector,vector)",), ("prme._query_vector(real[])",)]
        # The memory stored before keeps its vector; the helpers now compute with pgvector's.
        assert conn.execute("SELECT count(*) FROM prme.node_embeddings WHERE embedding IS NOT NULL").fetchone() == (2,)
        body = conn.execute("SELECT pg_get_functiondef('prme._inner_product(vector, vector)'::regprocedure)").fetchone()
        assert body is not None and "RETURN inner_product(stored, query)" in body[0]
    with MemoryClient(without_pgvector) as memory:
        assert memory.recall("does she have pets?", user_id=ALICE)[0].content == FACTS[2]


def test_prme_embedder_none_turns_embedding_off(db_dsn: str) -> None:
    env = {**os.environ, "PRME_EMBEDDER": "none"}
    code = (
        "import sys; from prme_pg import MemoryClient\n"
        "with MemoryClient(sys.argv[1]) as m:\n"
        "    m.add_node('alice prefers tabs', user_id='alice'); print(m.embedder, m.embedding_status())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, db_dsn], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["None", "None"]
    with psycopg.connect(db_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM prme.node_embeddings").fetchone() == (0,)
    bad = subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", "recall", "tabs", "--user", "alice", "--dsn", db_dsn],
        env={**os.environ, "PRME_EMBEDDER": "nonsense"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2  # a configuration the user gave: a usage error
    assert bad.stderr.count("\n") == 1 and "no embedder named 'nonsense'" in bad.stderr
    assert "Traceback" not in bad.stderr


# -- the vector index (PostgreSQL's HNSW index for owners with many vectors) -------------------

WORDS = ["tea", "coffee", "garden", "train", "piano", "river", "winter", "market", "letter", "bicycle"]


def _corpus(conn: psycopg.Connection[Any], owner: str, count: int, rng: np.random.Generator) -> list[str]:
    """count memories of owner, a few words each, with random unit vectors of model unit-16."""
    vectors = rng.normal(size=(count, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = []
    for row in vectors:
        words = " ".join(rng.choice(WORDS, size=3, replace=False))
        node = conn.execute(
            "SELECT id FROM prme.add_node(%s, %s, embedding => %s::real[], embedding_model => 'unit-16')",
            [owner, f"{owner} likes {words}", row.tolist()],
        ).fetchone()
        assert node is not None
        ids.append(str(node[0]))
    return ids


def _recall(conn: psycopg.Connection[Any], owner: str, query: str, vector: Any, count: int = 10) -> list[Any]:
    return conn.execute(
        "SELECT id, score FROM prme.recall(%s, %s, max_count => %s, as_of => '2030-01-01', "
        "query_embedding => %s::real[], embedding_model => 'unit-16')",
        [owner, query, count, vector.tolist()],
    ).fetchall()


def _index_scans(conn: psycopg.Connection[Any]) -> int:
    conn.execute("SELECT pg_stat_force_next_flush()")
    row = conn.execute(
        "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE indexrelname = prme._vector_index('unit-16')"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_recall_of_an_indexed_owner_goes_through_the_index_and_finds_what_the_scan_found(conn: Any) -> None:
    rng = np.random.default_rng(31)
    conn.execute("SELECT prme.register_embedding_model('unit-16', 16)")
    _corpus(conn, "big", 150, rng)  # fewer than recall asks the index for: it returns them all
    huge = _corpus(conn, "huge", 300, rng)
    _corpus(conn, "small", 20, rng)
    queries = rng.normal(size=(6, 16)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    # Archive huge's 150 memories nearest the first query: the first 200 candidates of its
    # search then hold fewer than the 100 recall wants, and it searches again for more.
    vectors = np.array(
        conn.execute(
            "SELECT array_agg(embedding::real[] ORDER BY node_id::text) FROM prme.node_embeddings"
            " WHERE user_id = 'huge'"
        ).fetchone()[0]
    )
    order = np.argsort(-(vectors @ queries[0]))
    for index in order[:150]:
        conn.execute("SELECT prme.archive_node('huge', %s)", [sorted(huge)[index]])
    cases = [(owner, f"{WORDS[i]} {WORDS[i + 3]}", queries[i]) for owner in ("big", "huge") for i in range(6)]
    before = [_recall(conn, owner, text, vector) for owner, text, vector in cases]
    assert all(before)

    assert conn.execute("SELECT indexed FROM prme.index_embeddings('unit-16', min_vectors => 100)").fetchone() == (450,)
    moved = conn.execute(
        "SELECT user_id, count(*) FILTER (WHERE indexed), count(*) FROM prme.node_embeddings GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert moved == [("big", 150, 150), ("huge", 300, 300), ("small", 0, 20)]
    assert conn.execute("SELECT indexed FROM prme.index_embeddings('unit-16', min_vectors => 100)").fetchone() == (0,)
    options = "SELECT reloptions FROM pg_class WHERE relname = prme._vector_index('unit-16')"
    assert conn.execute(options).fetchone() == (["m=16", "ef_construction=200"],), "a graph that finds the nearest"

    after = [_recall(conn, owner, text, vector) for owner, text, vector in cases]
    assert after == before
    # With so few vectors the planner may sort them rather than search the graph; without
    # sorts it searches the graph, and finds the same.
    scans = _index_scans(conn)
    conn.execute("SET enable_sort = off")
    after = [_recall(conn, owner, text, vector) for owner, text, vector in cases]
    conn.execute("RESET enable_sort")
    assert _index_scans(conn) >= scans + len(cases)
    assert after == before
    # The small owner is below the threshold: scanned, as before.
    small = queries[1]
    assert _recall(conn, "small", "tea", small) == _recall(conn, "small", "tea", small)

    # A vector stored since is found by the scan of the unindexed ones, and moved next time.
    new = conn.execute(
        "SELECT id FROM prme.add_node('big', 'nothing in common', embedding => %s::real[],"
        " embedding_model => 'unit-16')",
        [queries[2].tolist()],
    ).fetchone()[0]
    assert _recall(conn, "big", "zzz", queries[2], 1)[0][0] == new
    assert conn.execute("SELECT indexed FROM prme.index_embeddings('unit-16', min_vectors => 100)").fetchone() == (1,)
    assert _recall(conn, "big", "zzz", queries[2], 1)[0][0] == new


def test_recall_puts_the_callers_hnsw_settings_back(conn: Any) -> None:
    rng = np.random.default_rng(7)
    conn.execute("SELECT prme.register_embedding_model('unit-16', 16)")
    _corpus(conn, "big", 30, rng)
    conn.execute("SELECT prme.index_embeddings('unit-16', min_vectors => 10)")
    conn.execute("SET hnsw.ef_search = 77")
    assert _recall(conn, "big", "tea", np.ones(16, dtype=np.float32) / 4)
    assert conn.execute("SHOW hnsw.ef_search").fetchone() == ("77",)
    assert conn.execute("SHOW hnsw.iterative_scan").fetchone() == ("off",)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("prme.index_embeddings('unit-16', min_vectors => 0)", "min_vectors must be between 1 and 1000000000"),
        ("prme.index_embeddings('unit-16', max_count => 100001)", "max_count must be between 1 and 100000"),
        ("prme.index_embeddings('unit-16', max_count => NULL)", "max_count must be between 1 and 100000"),
        ("prme.index_embeddings('no-such-model')", "unknown embedding model 'no-such-model'"),
    ],
)
def test_index_embeddings_refuses_bad_arguments_and_moves_nothing(conn: Any, call: str, message: str) -> None:
    conn.execute("SELECT prme.register_embedding_model('unit-16', 16)")
    _corpus(conn, "big", 5, np.random.default_rng(3))
    with pytest.raises(psycopg.Error, match=message) as caught:
        conn.execute(f"SELECT * FROM {call}")
    assert caught.value.sqlstate == "PR422"
    assert conn.execute("SELECT count(*) FROM prme.node_embeddings WHERE indexed").fetchone() == (0,)


def test_the_embedding_pass_moves_large_owners_into_the_index(engine: Engine) -> None:
    words_only = engine.client(embedder=False)
    for fact in FACTS:
        words_only.add_node(fact, user_id=ALICE)
    words_only.add_node("Bob drives a Tesla Model 3", user_id="bob")
    memory = engine.client()
    with pytest.raises(InvalidInput, match="index_min_vectors must be between 1 and 1000000000"):
        embed_pending(memory, index_min_vectors=0)
    summary = embed_pending(memory, index_min_vectors=len(FACTS))
    # PostgreSQL moves alice's five (bob has one); a pack has no vector index and scans.
    assert summary.indexed == (len(FACTS) if engine.name == "postgres" else 0)
    assert memory.recall("does she have pets?", user_id=ALICE)[0].content == FACTS[2]
    assert memory.recall("what car does bob own", user_id="bob")[0].content == FACTS[0]


def test_without_pgvector_there_is_nothing_to_index(without_pgvector: str) -> None:
    with psycopg.connect(without_pgvector, autocommit=True) as conn:
        conn.execute("SELECT prme.register_embedding_model('unit-16', 16)")
        conn.execute(
            "SELECT prme.add_node('alice', 'x', embedding => %s::real[], embedding_model => 'unit-16')", [[0.25] * 16]
        )
        assert conn.execute("SELECT indexed FROM prme.index_embeddings('unit-16', min_vectors => 1)").fetchone() == (0,)
