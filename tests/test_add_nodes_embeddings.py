"""add_nodes with vectors (issue 35: "a bulk load embeds in batches with the configured model"):
the client embeds a batch in one call of its model, an item's own vector is stored as given,
a batch's vectors are add_node's one by one, and a bad vector in any item refuses the whole
batch, naming it, at every layer. Both engines; the real bundled model."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
import pytest

from prme_pg import InvalidInput
from prme_pg.backends import AddNodes, RegisterEmbeddingModel
from prme_pg.bulk import import_lines
from prme_pg.client import node_item
from prme_pg.embeddings import Embedder, default_embedder

from .conformance_backends import Engine, engine_fixture  # noqa: F401

ALICE = "alice"
BOB = "bob"
FACTS = [
    "Bob drives a Tesla Model 3",
    "Alice is allergic to peanuts",
    "Alice has a golden retriever named Max",
    "Alice works as a nurse at the city hospital",
]


class CountingEmbedder:
    """The bundled model, counting its calls and the texts of each."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimensions = inner.dimensions
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> Any:
        self.calls.append(len(texts))
        return self.inner.embed(texts)


def vector_rows(engine: Engine) -> int:
    count = "SELECT count(*) FROM prme.node_embeddings"
    return int(engine._sql(count, count, [])[0][0])


def stored_vectors(engine: Engine, user_id: str) -> dict[str, tuple[str, np.ndarray]]:
    """content -> (model id, vector) of the owner's memories."""
    rows = engine._sql(
        "SELECT n.content, e.model_id, e.embedding::real[] FROM prme.node_embeddings AS e "
        "JOIN prme.nodes AS n ON n.user_id = e.user_id AND n.id = e.node_id WHERE e.user_id = %s",
        "SELECT n.content, e.model_id, e.embedding FROM prme.node_embeddings AS e "
        "JOIN prme.nodes AS n ON n.user_id = e.user_id AND n.id = e.node_id WHERE e.user_id = ?",
        [user_id],
    )
    return {row[0]: (row[1], np.asarray(row[2], dtype=np.float32)) for row in rows}


def test_a_batch_stores_what_add_node_stores_one_by_one_from_one_call_of_the_model(engine: Engine) -> None:
    embedder = CountingEmbedder(default_embedder())
    memory = engine.client(embedder=embedder)
    given = np.linspace(-1, 1, embedder.dimensions, dtype=np.float32)
    items: list[dict[str, Any]] = [{"content": fact} for fact in FACTS]
    items.append({"content": "a vector of its own", "embedding": given.tolist()})
    nodes = memory.add_nodes(items, user_id=ALICE)
    assert len(nodes) == len(items)
    # One call of the model for the batch (after none to register it), with every text
    # but the one that brought its vector.
    assert embedder.calls == [len(FACTS)]
    for item in items:
        memory.add_node(item["content"], user_id=BOB, embedding=item.get("embedding"))
    batch, one_by_one = stored_vectors(engine, ALICE), stored_vectors(engine, BOB)
    assert set(batch) == {item["content"] for item in items}
    for content, (model, vector) in batch.items():
        assert model == embedder.model_id == one_by_one[content][0]
        assert np.array_equal(vector, one_by_one[content][1]), content
    assert np.array_equal(batch["a vector of its own"][1], given)
    # A retried batch is a replay: nothing written, its vectors included.
    again = [{**item, "node_id": node.id} for item, node in zip(items, nodes, strict=True)]
    assert all(node.replayed for node in memory.add_nodes(again, user_id=ALICE))
    assert vector_rows(engine) == 2 * len(items)


def test_an_import_stores_vectors(engine: Engine) -> None:
    memory = engine.client()
    lines = [(n, f'{{"id": "m{n}", "user_id": "alice", "content": "{fact}"}}') for n, fact in enumerate(FACTS, 1)]
    summary = import_lines(memory, lines)
    assert summary.created == len(FACTS)
    assert set(stored_vectors(engine, ALICE)) == set(FACTS)


@pytest.mark.parametrize(
    ("vector", "message"),
    [
        ([0.1] * 255, "items[2]: embedding must have 256 dimensions"),
        ([float("nan")] + [0.0] * 255, "items[2]: embedding must hold finite numbers"),
        ([0.0] * 255 + [float("-inf")], "items[2]: embedding must hold finite numbers"),
    ],
)
def test_a_bad_vector_refuses_the_whole_batch_naming_its_item(engine: Engine, vector: Any, message: str) -> None:
    memory = engine.client()
    items: list[dict[str, Any]] = [{"content": fact} for fact in FACTS]
    items[2]["embedding"] = vector
    # The client's check.
    with pytest.raises(InvalidInput, match=message.replace("[", r"\[")):
        memory.add_nodes(items, user_id=ALICE)
    # The engine's own, past the client: every other item carries the model's vector.
    embedder = memory.embedder
    assert embedder is not None
    good = [node_item({"content": fact}, embedder) for fact in FACTS]
    vectors = embedder.embed(FACTS)
    good = [
        dataclasses.replace(item, embedding=np.asarray(v, dtype=np.float32), embedding_model=embedder.model_id)
        for item, v in zip(good, vectors, strict=True)
    ]
    good[2] = dataclasses.replace(good[2], embedding=np.asarray(vector, dtype=np.float32))
    with pytest.raises(InvalidInput, match=message.replace("[", r"\[")):
        memory._backend.execute(AddNodes(user_id=ALICE, items=tuple(good)))
    # A model's first vector registers it with its dimensions; a vector of a model registered
    # with other dimensions is refused.
    memory._backend.execute(RegisterEmbeddingModel(model_id="eight-dims", dimensions=8))
    good[2] = dataclasses.replace(good[2], embedding=vectors[2], embedding_model="eight-dims")
    with pytest.raises(InvalidInput, match=r"items\[2\]: embedding must have 8 dimensions for model 'eight-dims'"):
        memory._backend.execute(AddNodes(user_id=ALICE, items=tuple(good)))
    good[2] = dataclasses.replace(good[2], embedding_model=None)
    with pytest.raises(InvalidInput, match=r"items\[2\]: an embedding needs its embedding_model"):
        memory._backend.execute(AddNodes(user_id=ALICE, items=tuple(good)))
    assert memory.list_nodes(user_id=ALICE) == []
    assert engine.count("journal") == 0
    assert vector_rows(engine) == 0
    # Without an embedder, a vector has no model to be by.
    words_only = engine.client(embedder=False)
    with pytest.raises(InvalidInput, match=r"items\[0\]: embedding needs an embedder"):
        words_only.add_nodes([{"content": "x", "embedding": [0.0] * 256}], user_id=ALICE)


def test_the_sql_function_checks_the_flat_vectors(db_dsn: str) -> None:
    def add_nodes(items: str, embeddings: str | None) -> None:
        conn.execute("SELECT * FROM prme.add_nodes('alice', %s::jsonb, %s::real[])", [items, embeddings])

    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("SELECT prme.register_embedding_model('m3', 3)")
        two = '[{"content": "a", "embedding_model": "m3"}, {"content": "b"}, {"content": "c", "embedding_model": "m3"}]'
        for embeddings, message in [
            ("{1,0,0,0,1}", r"items\[2\]: embedding must have 3 dimensions for model 'm3'"),
            (None, r"items\[0\]: embedding must have 3 dimensions"),
            ("{1,0,0,0,1,NaN}", r"items\[2\]: embedding must hold finite numbers"),
            ("{1,NULL,0,0,1,0}", r"items\[0\]: embedding must hold finite numbers"),
            ("{1,0,0,0,1,0,7}", "embeddings must hold exactly the numbers of the items' vectors"),
            ("{{1,0,0},{0,1,0}}", "embeddings must be a one-dimensional array"),
        ]:
            with pytest.raises(psycopg.Error, match=message) as caught:
                add_nodes(two, embeddings)
            assert caught.value.sqlstate == "PR422"
        with pytest.raises(psycopg.Error, match=r"items\[0\]: embedding must have 3 dimensions for model 'm3'"):
            add_nodes('[{"content": "a", "embedding_model": "m3", "embedding_dimensions": 2}]', "{1,0}")
        with pytest.raises(psycopg.Error, match=r"items\[1\]: unknown embedding model 'mX'"):
            add_nodes('[{"content": "a"}, {"content": "b", "embedding_model": "mX"}]', "{1,0,0}")
        assert conn.execute("SELECT count(*) FROM prme.nodes").fetchone() == (0,)
        add_nodes(two, "{1,0,0,0,1,0}")
        rows = conn.execute(
            "SELECT n.content, e.embedding::real[] FROM prme.node_embeddings AS e "
            "JOIN prme.nodes AS n ON n.id = e.node_id ORDER BY n.content"
        ).fetchall()
        assert rows == [("a", [1.0, 0.0, 0.0]), ("c", [0.0, 1.0, 0.0])]
