"""The pack's recall by meaning past its nearest 100, and how the pack stores vectors for it
(issue 31, item 8; prme_pg/backends/duckdb/recall.py).

Recall's candidates are the memories sharing a word with the question and the 100 (or
max_count) nearest recallable vectors, exact (sql/postgres/310_recall.sql): with more vectors
than that, and archived memories and other scopes among the nearest, both engines must still
pick the same ones. A pack stores its vectors plain (no float compression, which recall's scan
of every vector paid for): a pack written before has them rewritten when opened, bit for bit.
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
from prme_pg.backends.duckdb import PACK_FILE
from prme_pg.client import recall_request

from .test_conformance_recall import VECTOR_TOLERANCE, assert_same_ranking

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
