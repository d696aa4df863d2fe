"""The pack's recall by meaning past its nearest 100, and how the pack stores vectors for it
(issue 31, item 8; prme_pg/backends/duckdb/recall.py and embeddings.py).

Recall's candidates are the memories sharing a word with the question and the 100 (or
max_count) nearest recallable vectors, exact, ties by id (sql/postgres/310_recall.sql): with
more vectors than that, and archived memories and other scopes among the nearest, both engines
must still pick the same ones. A pack compares the question with the owner's vectors held in
memory while it is open: whatever writes a vector (add_node, add_nodes, the embedding worker,
an import, another client of the pack), the next recall ranks as a pack opened afresh does.
A pack stores its vectors plain (no float compression): a pack written before has them
rewritten when opened, bit for bit.
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

from prme_pg import InvalidInput, MemoryClient
from prme_pg.backends import StoreEmbeddings
from prme_pg.backends.duckdb import PACK_FILE
from prme_pg.backends.duckdb.embeddings import VectorCache
from prme_pg.bulk import import_lines
from prme_pg.client import recall_request
from prme_pg.embedding_worker import embed_pending

from .test_conformance_recall import TOLERANCE, VECTOR_TOLERANCE, assert_same_ranking

AS_OF = datetime(2026, 1, 1, tzinfo=UTC)
PEOPLE = ["sister", "brother", "manager", "dentist", "neighbour", "cousin"]
CITIES = ["Berlin", "Lisbon", "Oslo", "Vienna", "Porto", "Krakow"]
THINGS = ["sushi", "green tea", "falafel", "Rust", "Docker", "chess", "sailing", "yoga", "the cello"]
TEMPLATES = [
    "My {person} lives in {city} and visits on weekends.",
    "Likes {thing} a lot and talks about it with the {person}.",
    "Moved to {city} last year; misses {thing}.",
    "The {person} recommended {thing} before the trip to {city}.",
    "Avoids {thing} since the doctor said so.",
]
QUESTIONS = ["where does my family live", "favourite food", "hobbies", "programming tools", "travel", "health"]


def corpus(count: int, rng: random.Random) -> list[dict[str, Any]]:
    return [
        {
            "content": rng.choice(TEMPLATES).format(
                person=rng.choice(PEOPLE), city=rng.choice(CITIES), thing=rng.choice(THINGS)
            ),
            "node_id": uuid.UUID(int=(0xB2 << 96) | n),
            "scope": rng.choice(["personal", "personal", "work"]),
            "salience_base": rng.randint(0, 10000) / 10000,
            "decay_profile": rng.choice(["slow", "medium", "fast"]),
        }
        for n in range(count)
    ]


def test_both_engines_pick_the_same_nearest_among_many_vectors(db_dsn: str, tmp_path: Path) -> None:
    """300 memories with vectors, a tenth archived: the nearest 100 (or max_count) are the same
    on both engines with and without a scope, by words and meaning and by meaning alone."""
    rng = random.Random(31)
    items = corpus(300, rng)
    archived = [item["node_id"] for item in rng.sample(items, 30)]
    with MemoryClient(db_dsn) as server, MemoryClient(tmp_path / "memories") as pack:
        for client in (server, pack):
            client.add_nodes(items, user_id="dana")
            for node_id in archived:
                client.archive_node(node_id, user_id="dana")
        for question in QUESTIONS:
            for scopes in (None, ["work"]):
                for max_count in (10, 150):
                    theirs = server.recall(question, user_id="dana", as_of=AS_OF, scopes=scopes, max_count=max_count)
                    ours = pack.recall(question, user_id="dana", as_of=AS_OF, scopes=scopes, max_count=max_count)
                    assert ours, question
                    assert_same_ranking(theirs, ours, VECTOR_TOLERANCE)
                    assert not {h.id for h in ours} & set(archived)
                    assert scopes is None or {h.scope for h in ours} == {"work"}
        # Past the nearest 100: a question whose words no memory has finds by meaning alone,
        # and with max_count 150 the 150 nearest recallable ones (all candidates score > 0).
        theirs = server.recall("hobbies", user_id="dana", as_of=AS_OF, max_count=150)
        ours = pack.recall("hobbies", user_id="dana", as_of=AS_OF, max_count=150)
        assert len(ours) == 150
        assert_same_ranking(theirs, ours, VECTOR_TOLERANCE)


def test_nearest_vectors_that_tie_are_taken_by_id_as_on_postgresql(db_dsn: str, tmp_path: Path) -> None:
    """130 memories with one content (one vector) and the question's words in none: the 100
    nearest are a tie, broken by id on both engines, so both rank the same 100 by strength."""
    rng = random.Random(5)
    items = [
        {
            "content": "Keeps a small herb garden on the balcony",
            "node_id": uuid.UUID(int=(0xC3 << 96) | rng.getrandbits(64)),
            "salience_base": rng.randint(0, 10000) / 10000,
        }
        for _ in range(130)
    ]
    with MemoryClient(db_dsn) as server, MemoryClient(tmp_path / "memories") as pack:
        for client in (server, pack):
            client.add_nodes(items, user_id="gil")
        theirs = server.recall("plants", user_id="gil", as_of=AS_OF, max_count=20)
        ours = pack.recall("plants", user_id="gil", as_of=AS_OF, max_count=20)
    nearest = sorted(item["node_id"] for item in items)[:100]
    assert {h.id for h in ours} <= set(nearest)
    assert_same_ranking(theirs, ours, VECTOR_TOLERANCE)


def same_as_a_fresh_pack(memory: MemoryClient, root: Path, questions: list[str]) -> list[list[Any]]:
    """Each question's hits from ``memory`` (its vectors held in memory since earlier calls),
    checked against a client opening the pack now (reading every vector); the hits."""
    with MemoryClient(root) as fresh:
        results = []
        for question in questions:
            for max_count in (5, 120):
                ours = memory.recall(question, user_id="hal", as_of=AS_OF, max_count=max_count)
                theirs = fresh.recall(question, user_id="hal", as_of=AS_OF, max_count=max_count)
                assert_same_ranking(theirs, ours, TOLERANCE)
                results.append(ours)
    return results


def test_the_vectors_held_in_memory_follow_every_write(tmp_path: Path) -> None:
    root = tmp_path / "memories"
    questions = ["who teaches the violin", "hobbies", "where does my family live"]
    with MemoryClient(root) as memory, MemoryClient(root) as other, MemoryClient(root, embedder=False) as plain:
        assert memory.embedder is not None
        model = memory.embedder.model_id
        memory.add_nodes(corpus(200, random.Random(12)), user_id="hal")
        same_as_a_fresh_pack(memory, root, questions)  # the owner's vectors are now held

        def top(question: str) -> str:
            return memory.recall(question, user_id="hal", as_of=AS_OF, max_count=5)[0].content

        # add_node: the new memory is found by meaning at once.
        violin = memory.add_node("Ursula gives violin lessons on Thursdays", user_id="hal")
        same_as_a_fresh_pack(memory, root, questions)
        assert top("who teaches the violin") == violin.content
        # archive_node: the held vector stays, the memory is no longer recalled.
        memory.archive_node(violin.id, user_id="hal")
        same_as_a_fresh_pack(memory, root, questions)
        assert violin.id not in {h.id for h in memory.recall("violin lessons", user_id="hal", max_count=50)}
        # add_nodes, by another client of the same pack (its own connection).
        other.add_nodes([{"content": "Takes cello lessons from Viktor every Monday"}], user_id="hal")
        same_as_a_fresh_pack(memory, root, questions)
        assert top("lessons with Viktor") == "Takes cello lessons from Viktor every Monday"
        # A memory written without a vector, then the embedding worker's store_embeddings,
        # after a recorded failure of the model that the worker replaces.
        flute = plain.add_node("Practises the flute before breakfast", user_id="hal")
        memory.backend.execute(
            StoreEmbeddings(model, 256, (("hal", flute.id),), np.zeros((1, 256), np.float32), ("model failed",))
        )
        same_as_a_fresh_pack(memory, root, questions)
        assert embed_pending(memory, retry_failed=True).embedded == 1
        same_as_a_fresh_pack(memory, root, questions)
        # All of the question's words (0.6) and now a cosine with the question's vector too.
        hit = memory.recall("flute", user_id="hal", as_of=AS_OF, max_count=1)[0]
        assert (hit.id, hit.relevance > 0.6 + 0.4 * 0.2) == (flute.id, True)
        # An import (several add_nodes batches in one transaction).
        lines = [
            (1, '{"id": "imported-1", "user_id": "hal", "content": "Sings in a choir on Wednesday evenings"}'),
            (2, '{"id": "imported-2", "user_id": "hal", "content": "Bought a second-hand piano last month"}'),
        ]
        assert import_lines(memory, lines).created == 2
        same_as_a_fresh_pack(memory, root, [*questions, "singing in a group"])
        assert top("singing in a group") == "Sings in a choir on Wednesday evenings"
        # Every vector rewritten in place (new rowids, as when a pack stored compressed is
        # opened), and compacted by a checkpoint: the same vectors, read again.
        con = other.backend._con  # type: ignore[attr-defined]
        con.execute("UPDATE prme.node_embeddings SET embedding = embedding WHERE embedding IS NOT NULL")
        con.execute("CHECKPOINT")
        same_as_a_fresh_pack(memory, root, questions)
        # Rows renumbered below the last one read (DuckDB may compact a table with deletions
        # when it checkpoints): the new vector is not past it, the count tells, all are read again.
        for held in memory.backend._vector_cache()._owners.values():  # type: ignore[attr-defined]
            held.last_rowid += 1_000_000
        memory.add_node("Repairs old bicycles in the garage", user_id="hal")
        same_as_a_fresh_pack(memory, root, [*questions, "fixing bikes"])
        assert top("fixing bikes") == "Repairs old bicycles in the garage"


def test_owners_past_the_memory_bound_are_read_again_when_asked(tmp_path: Path) -> None:
    """With room for one owner's vectors only, asking for owners in turn reads each again: the
    same hits as a pack opened afresh, and the copies held stay within the bound (but the last)."""
    root = tmp_path / "memories"
    with MemoryClient(root) as memory:
        for owner, seed in (("hal", 21), ("ivy", 22)):
            memory.add_nodes(corpus(120, random.Random(seed)), user_id=owner)
        held = VectorCache(max_bytes=1)
        memory.backend._owner_vectors = held  # type: ignore[attr-defined]
        with MemoryClient(root) as fresh:
            for owner in ("hal", "ivy", "hal", "ivy"):
                for question in QUESTIONS[:3]:
                    ours = memory.recall(question, user_id=owner, as_of=AS_OF, max_count=20)
                    theirs = fresh.recall(question, user_id=owner, as_of=AS_OF, max_count=20)
                    assert_same_ranking(theirs, ours, TOLERANCE)
                assert [key[0] for key in held._owners] == [owner]


def test_the_vectors_held_go_when_the_pack_is_closed(tmp_path: Path) -> None:
    """The copy of the owners' vectors (up to 256 MB) is the connection's: closing the pack
    frees it, even while the client object is still referenced."""
    memory = MemoryClient(tmp_path / "memories")
    with memory:
        memory.add_nodes(corpus(30, random.Random(23)), user_id="hal")
        assert memory.recall(QUESTIONS[0], user_id="hal", as_of=AS_OF)
        backend = memory.backend
        assert backend._vector_cache()._owners  # type: ignore[attr-defined]
    assert backend._owner_vectors is None  # type: ignore[attr-defined]


def float_compressions(file: Path) -> set[str]:
    with duckdb.connect(str(file)) as con:
        rows = con.execute(
            "SELECT DISTINCT lower(compression) FROM pragma_storage_info('prme.node_embeddings') "
            "WHERE segment_type = 'FLOAT'"
        ).fetchall()
    return {row[0] for row in rows}


def test_a_pack_with_compressed_vectors_is_stored_plain_when_opened_and_loses_nothing(tmp_path: Path) -> None:
    root = tmp_path / "memories"
    rng = random.Random(8)
    with MemoryClient(root) as memory:
        memory.add_nodes(corpus(200, rng), user_id="erin")
        before = [memory.recall(q, user_id="erin", as_of=AS_OF, max_count=20) for q in QUESTIONS]
    file = root / PACK_FILE
    # As a pack written before (or by a client without the setting): DuckDB's default
    # compression of floats, and a recorded embedding failure beside the vectors.
    with duckdb.connect(str(file)) as con:
        con.execute(
            "INSERT INTO prme.node_embeddings SELECT user_id, node_id, 'other-model', NULL, 'model failed', now() "
            "FROM prme.node_embeddings LIMIT 1"
        )
        con.execute("UPDATE prme.node_embeddings SET embedding = embedding WHERE embedding IS NOT NULL")
        con.execute("CHECKPOINT")
        stored = con.execute("SELECT * FROM prme.node_embeddings ORDER BY ALL").fetchall()
    assert "alprd" in float_compressions(file) or "alp" in float_compressions(file)
    with MemoryClient(root) as memory:
        assert [memory.recall(q, user_id="erin", as_of=AS_OF, max_count=20) for q in QUESTIONS] == before
        memory.add_node("A new memory about sailing in Oslo", user_id="erin")
    assert float_compressions(file) == {"uncompressed"}
    with duckdb.connect(str(file)) as con:
        now_stored = con.execute("SELECT * FROM prme.node_embeddings ORDER BY ALL").fetchall()
        count = con.execute("SELECT count(*) FROM prme.node_embeddings").fetchone()
    assert count == (len(stored) + 1,)
    assert [row for row in now_stored if row in stored] == stored, "every vector and failure kept, bit for bit"


@pytest.mark.parametrize("query", [None, " ", "sushi"])
def test_the_query_vector_is_checked_as_before_whatever_the_query(tmp_path: Path, query: str | None) -> None:
    """Recall reads the query's words and the model's dimensions in one statement: a vector of a
    model no memory has one of is ignored (words, or strength alone), one of a registered model
    is checked, one without a model refused, blank query or not."""
    with MemoryClient(tmp_path / "memories") as memory:
        memory.add_nodes(corpus(5, random.Random(3)), user_id="fay")
        assert memory.embedder is not None
        model = memory.embedder.model_id
        backend = memory.backend
        expected = backend.execute(recall_request(query, "fay", None, 10, AS_OF, None, None))
        ignored = backend.execute(recall_request(query, "fay", None, 10, AS_OF, np.ones(3, np.float32), "unknown"))
        assert ignored == expected
        with pytest.raises(InvalidInput, match=f"embedding must have 256 dimensions for model '{model}'"):
            backend.execute(recall_request(query, "fay", None, 10, AS_OF, np.ones(3, np.float32), model))
        with pytest.raises(InvalidInput, match="embedding must hold finite numbers"):
            backend.execute(recall_request(query, "fay", None, 10, AS_OF, np.full(256, np.nan, np.float32), model))
        with pytest.raises(InvalidInput, match="an embedding needs its embedding_model"):
            backend.execute(recall_request(query, "fay", None, 10, AS_OF, np.ones(256, np.float32), None))
        if query is None or not query.strip():
            assert [h.relevance for h in expected] == [1.0] * 5
        else:
            assert [h.content for h in expected] == [
                i["content"] for i in corpus(5, random.Random(3)) if "sushi" in i["content"]
            ]
