"""The review search by words and meaning (prme.find_nodes, migration 0029; issue 31, item 4).

A question in other words finds its memory on both engines (and behind PL/Proxy), in every
lifecycle state, through the sync and async clients and HTTP (tests/test_console.py: the
console's search). The order
is the documented one (docs/RECALL.md, "The review search"): the number of the query's words
first, then closeness in meaning, then the newest change; computed here from the engine's
words and the embedder's vectors and compared with both engines'.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest

from prme_pg import AsyncMemoryClient, InvalidInput, MemoryClient, Node
from prme_pg.embeddings import default_embedder

from .conformance_backends import Engine, engine_with_proxy_fixture  # noqa: F401
from .live_server import serve
from .test_embeddings import without_pgvector  # noqa: F401

CAROL = "carol"
SENTENCES = [
    "Bob drives a Tesla Model 3",
    "Carol is allergic to peanuts",
    "Carol has a golden retriever named Max",
    "Carol's husband is called Tom",
    "Carol prefers tabs over spaces",
    "Carol drinks coffee every morning",
    "Carol lives in Lyon near the river",
    "Carol works as a nurse at the city hospital",
]
QUESTIONS = ["what car does bob own", "pets", "is carol married", "carol tabs", "where does she live", "the", ""]
RETRIEVER = 2


def seed(memory: MemoryClient) -> list[Node]:
    nodes = [memory.add_node(s, user_id=CAROL, scope="work" if n % 2 else "personal") for n, s in enumerate(SENTENCES)]
    memory.archive_node(nodes[RETRIEVER].id, user_id=CAROL)  # the review search still finds it
    memory.add_node("Dave has a cat and a dog", user_id="dave")
    return nodes


def contents(nodes: list[Node]) -> list[str]:
    return [n.content for n in nodes]


def test_a_question_in_other_words_finds_its_memory_on_both_engines(engine: Engine) -> None:
    memory = engine.client()
    assert memory.embedder is not None
    seed(memory)

    def found(query: str | None, **options: Any) -> list[str]:
        return contents(memory.find_nodes(query, user_id=CAROL, **options))

    # No word shared with the memory: meaning finds it, first.
    assert found("what car does bob own")[0] == SENTENCES[0]
    assert found("pets")[0] == SENTENCES[RETRIEVER]  # archived, and found
    assert found("is carol married", max_count=3)[0] == SENTENCES[3]
    # Exact word matches first: both words, then one word ordered by meaning.
    assert found("carol tabs")[0] == SENTENCES[4]
    assert SENTENCES[0] not in found("carol tabs")[: len(SENTENCES) - 1], "no word of the query: last"
    # Filters hold for what meaning finds too; another owner's memories never appear.
    assert SENTENCES[RETRIEVER] not in found("pets", lifecycle_states=["active"])
    assert set(found("pets", scopes=["work"])) <= set(SENTENCES[1::2])
    assert all("Dave" not in c for q in QUESTIONS for c in found(q))
    assert len(found("pets", max_count=2)) == 2
    # Words alone when asked, or without an embedder: what find_nodes did before.
    assert found("pets", by_meaning=False) == []
    assert found("carol tabs", by_meaning=False)[0] == SENTENCES[4]
    words_only = engine.client(embedder=False)
    assert contents(words_only.find_nodes("pets", user_id=CAROL)) == []
    assert contents(words_only.find_nodes("what car does bob own", user_id=CAROL)) == [SENTENCES[0]]  # bob


def test_the_order_is_words_then_meaning_then_newest_alike_on_both_engines(db_dsn: str, tmp_path: Path) -> None:
    embedder = default_embedder()
    with MemoryClient(db_dsn) as server, MemoryClient(tmp_path / "pack") as pack:
        for client in (server, pack):
            for n, sentence in enumerate(SENTENCES):
                client.add_node(sentence, user_id=CAROL, node_id=uuid.UUID(int=n + 1))
            client.archive_node(uuid.UUID(int=RETRIEVER + 1), user_id=CAROL)
        with psycopg.connect(db_dsn) as conn:
            words = [set(conn.execute("SELECT prme._recall_words(%s)", [s]).fetchone()[0]) for s in SENTENCES]
        vectors = embedder.embed(SENTENCES)
        for question in QUESTIONS[:-1]:
            with psycopg.connect(db_dsn) as conn:
                asked = set(conn.execute("SELECT prme._recall_words(%s)", [question]).fetchone()[0])
            cosine = vectors @ embedder.embed([question])[0]
            for max_count in (3, 8):
                nearest = sorted(range(len(SENTENCES)), key=lambda n: (-cosine[n], n))[:max_count]
                candidates = {n for n in range(len(SENTENCES)) if words[n] & asked} | set(nearest)
                order = sorted(candidates, key=lambda n: (-len(words[n] & asked), -cosine[n], n))
                wanted = [SENTENCES[n] for n in order][:max_count]
                for client in (server, pack):
                    assert contents(client.find_nodes(question, user_id=CAROL, max_count=max_count)) == wanted


def test_the_async_client_and_http_search_by_meaning(engine: Engine) -> None:
    memory = engine.client()
    seed(memory)
    token = memory.create_api_token(CAROL)
    memory.close()  # a pack is opened by one client at a time

    async def run() -> list[str]:
        async with AsyncMemoryClient(engine.dsn) as client:
            assert contents(await client.find_nodes("pets", user_id=CAROL, by_meaning=False)) == []
            return contents(await client.find_nodes("pets", user_id=CAROL))

    assert asyncio.run(run())[0] == SENTENCES[RETRIEVER]
    target = Path(engine.dsn) if engine.name == "duckdb" else engine.dsn
    with (
        serve(target, max_size=2) as base,
        httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
    ):
        nodes = http.get("/v1/nodes", params={"q": "what car does bob own"}).json()["nodes"]
        assert nodes[0]["content"] == SENTENCES[0]
        bad = http.get("/v1/nodes", params={"q": "pets", "limit": 0})
        assert bad.status_code == 422 and bad.headers["content-type"].startswith("application/problem+json")


def test_a_vector_that_does_not_fit_is_refused_alike(engine: Engine) -> None:
    memory = engine.client()
    seed(memory)
    dimensions = memory.embedder.dimensions if memory.embedder else 0
    for bad in ([0.1] * (dimensions - 1), [float("nan")] * dimensions, [[0.1] * dimensions]):
        with pytest.raises(InvalidInput):
            memory.find_nodes("pets", user_id=CAROL, query_embedding=bad)
    with pytest.raises(InvalidInput, match="without by_meaning=False"):
        memory.find_nodes("pets", user_id=CAROL, query_embedding=[0.1] * dimensions, by_meaning=False)
    with pytest.raises(InvalidInput, match="needs an embedder"):
        engine.client(embedder=False).find_nodes("pets", user_id=CAROL, query_embedding=[0.1] * dimensions)
    # A vector computed elsewhere by the client's model is used as given.
    vector = np.asarray(memory.embedder.embed(["golden retriever"])[0]) if memory.embedder else None
    given = memory.find_nodes("zzz", user_id=CAROL, query_embedding=vector, max_count=1)
    assert contents(given) == [SENTENCES[RETRIEVER]]


def test_the_sql_function_refuses_bad_vectors_with_pr422(db_dsn: str) -> None:
    with MemoryClient(db_dsn) as memory:
        seed(memory)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("SELECT prme.register_embedding_model('m3', 3)")
        for vector, model, message in [
            ("{1,0}", "m3", "embedding must have 3 dimensions"),
            ("{1,0,NaN}", "m3", "finite numbers"),
            ("{1,0,Infinity}", "m3", "finite numbers"),
            ("{{1,0,0}}", "m3", "embedding must have 3 dimensions"),
            ("{1,0,0}", None, "an embedding needs its embedding_model"),
        ]:
            with pytest.raises(psycopg.Error, match=message) as caught:
                conn.execute(
                    "SELECT * FROM prme.find_nodes('carol', 'pets', query_embedding => %s::real[], "
                    "embedding_model => %s)",
                    [vector, model],
                )
            assert caught.value.sqlstate == "PR422"
        # A model no memory has a vector of is not registered: nothing to compare, so words.
        rows = conn.execute(
            "SELECT content FROM prme.find_nodes('carol', 'tabs', query_embedding => '{1,0}', embedding_model => 'x')"
        ).fetchall()
        assert rows == [(SENTENCES[4],)]


def test_without_pgvector_the_search_matches_words(without_pgvector: str) -> None:  # noqa: F811
    with MemoryClient(without_pgvector) as memory:
        seed(memory)
        assert contents(memory.find_nodes("pets", user_id=CAROL)) == []
        assert contents(memory.find_nodes("carol tabs", user_id=CAROL))[0] == SENTENCES[4]
