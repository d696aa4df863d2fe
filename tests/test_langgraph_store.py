"""LangGraph's store contract on prme-pg (prme_pg/langgraph.py, docs/LANGGRAPH.md), on both backends.

Each test that takes ``engine`` runs on PostgreSQL (a fresh clone of the template) and on a
DuckDB memory pack. The journal is read through the public client, as an auditor would.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, ListNamespacesOp, MatchCondition, PutOp, SearchOp

from prme_pg import InvalidInput, MemoryClient
from prme_pg.embeddings import EmbeddingError
from prme_pg.langgraph import MAX_ITEM_BYTES, AsyncPrmeStore, OwnerError, PrmeStore

from .conformance_backends import Engine, engine_fixture  # noqa: F401

ALICE = "alice"


@pytest.fixture
def store(engine: Engine) -> Iterator[PrmeStore]:
    with PrmeStore.from_conn_string(engine.target, user_id=ALICE) as s:
        s.setup()
        yield s


def journal_ops(client: MemoryClient, user_id: str = ALICE) -> list[tuple[str, dict[str, Any]]]:
    """The store's journal records of ``user_id``: (op, the node state after it), oldest first."""
    records, _heads = client.journal_records(user_id=user_id)
    out = []
    for r in sorted(records, key=lambda r: json.loads(r.record)["recorded_at"]):
        out.append((r.op, json.loads(r.record)["after"]))
    return out


def values_in_journal(client: MemoryClient, key: str, user_id: str = ALICE) -> list[Any]:
    return [
        json.loads(after["content"])["value"]
        for op, after in journal_ops(client, user_id)
        if op == "create" and json.loads(after["content"])["key"] == key
    ]


# -- values, history, retries ----------------------------------------------------------

VALUES: list[dict[str, Any]] = [
    {"text": "plain"},
    {"int": 1, "float": 1.0, "neg": -0.0, "big": 2**70, "tiny": 5e-324, "t": True, "f": False, "none": None},
    {"ünïcødé": "日本語のテキスト 🎉", "rtl": "שלום", "esc": 'quote " backslash \\ tab \t nul \u0000'},
    {"nested": {"a": [1, [2, [3, {"b": []}]], {}], "c": {"d": {"e": "deep"}}}},
    {},
]


def test_values_round_trip_exactly(store: PrmeStore) -> None:
    for n, value in enumerate(VALUES):
        store.put(("docs", "types"), f"k{n}", value)
    for n, value in enumerate(VALUES):
        item = store.get(("docs", "types"), f"k{n}")
        assert item is not None
        assert item.value == value
        # types survive: 1 stays an int, 1.0 a float, True a bool
        assert json.dumps(item.value, sort_keys=True) == json.dumps(value, sort_keys=True)
        assert item.namespace == ("docs", "types") and item.key == f"k{n}"
        assert item.created_at == item.updated_at
    assert store.get(("docs", "types"), "missing") is None
    assert store.get(("docs",), "k0") is None  # namespaces are exact


def test_new_value_keeps_history_and_retry_changes_nothing(store: PrmeStore) -> None:
    ns = ("prefs",)
    store.put(ns, "editor", {"indent": "tabs"})
    first = store.get(ns, "editor")
    store.put(ns, "editor", {"indent": "spaces"})
    second = store.get(ns, "editor")
    assert first is not None and second is not None
    assert second.value == {"indent": "spaces"}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    before = len(journal_ops(store.client))
    store.put(ns, "editor", {"indent": "spaces"})  # a retry: same namespace, key and value
    store.put(ns, "editor", dict(reversed(list({"indent": "spaces"}.items()))))
    assert len(journal_ops(store.client)) == before
    assert store.get(ns, "editor") == second
    store.put(ns, "editor", {"indent": "tabs"})  # back to an older value: a change again
    assert values_in_journal(store.client, "editor") == [{"indent": "tabs"}, {"indent": "spaces"}, {"indent": "tabs"}]
    ops = [op for op, _ in journal_ops(store.client)]
    assert ops == ["create", "create", "archive", "create", "archive"]
    assert store.client.verify_journal(user_id=ALICE, independent=True) == []


def test_delete_archives_and_put_after_delete(store: PrmeStore) -> None:
    ns = ("notes",)
    store.delete(ns, "never")  # nothing to delete: nothing written
    assert journal_ops(store.client) == []
    store.put(ns, "n1", {"text": "first"})
    store.delete(ns, "n1")
    assert store.get(ns, "n1") is None
    assert store.search(ns) == []
    assert [op for op, _ in journal_ops(store.client)] == ["create", "archive"]
    assert journal_ops(store.client)[-1][1]["lifecycle_state"] == "archived"
    store.delete(ns, "n1")  # again: nothing more
    assert len(journal_ops(store.client)) == 2
    store.put(ns, "n1", {"text": "second"})
    item = store.get(ns, "n1")
    assert item is not None and item.value == {"text": "second"}
    assert values_in_journal(store.client, "n1") == [{"text": "first"}, {"text": "second"}]


def test_batch_runs_every_op_type_in_order(store: PrmeStore) -> None:
    results = store.batch(
        [
            PutOp(("a", "b"), "k", {"v": 1}),
            GetOp(("a", "b"), "k"),
            PutOp(("a", "b"), "k", {"v": 2}),
            GetOp(("a", "b"), "k"),
            SearchOp(("a",), filter={"v": 2}),
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("a",)),)),
            PutOp(("a", "b"), "k", None),
            GetOp(("a", "b"), "k"),
            SearchOp(("a",)),
        ]
    )
    assert len(results) == 9
    assert results[0] is None and results[2] is None and results[6] is None
    assert results[1].value == {"v": 1}
    assert results[3].value == {"v": 2}
    assert [i.key for i in results[4]] == ["k"]
    assert results[5] == [("a", "b")]
    assert results[7] is None
    assert results[8] == []


# -- search ----------------------------------------------------------------------------


def test_search_filters_order_and_pages(store: PrmeStore) -> None:
    ns = ("docs",)
    for n in range(12):
        store.put(ns, f"d{n:02}", {"n": n, "parity": "even" if n % 2 == 0 else "odd", "meta": {"tag": f"t{n % 3}"}})
    store.put(("docs", "sub"), "s", {"n": 100, "parity": "even"})
    store.put(("other",), "o", {"n": 5})
    everything = store.search(ns, limit=100)
    assert len(everything) == 13  # the prefix takes in ("docs", "sub")
    assert [i.updated_at for i in everything] == sorted((i.updated_at for i in everything), reverse=True)
    assert all(i.score is None for i in everything)
    page1 = store.search(ns, limit=5)
    page2 = store.search(ns, limit=5, offset=5)
    page3 = store.search(ns, limit=5, offset=10)
    assert [i.key for i in page1 + page2 + page3] == [i.key for i in everything]
    assert len(page3) == 3 and store.search(ns, offset=13) == []

    def keys(**f: Any) -> set[str]:
        return {i.key for i in store.search(ns, filter=f, limit=100)}

    assert keys(parity="odd") == {f"d{n:02}" for n in range(1, 12, 2)}
    assert keys(n={"$eq": 3}) == {"d03"}
    assert keys(n={"$ne": 3}, parity="odd") == {"d01", "d05", "d07", "d09", "d11"}
    # numbers compare as numbers: 10 > 9 (as text "10" < "9")
    assert keys(n={"$gt": 9}) == {"d10", "d11", "s"}
    assert keys(n={"$gte": 9, "$lt": 11}) == {"d09", "d10"}
    assert keys(n={"$lte": 1}) == {"d00", "d01"}
    assert keys(meta={"tag": "t2"}) == {"d02", "d05", "d08", "d11"}
    assert keys(n={"$gt": "9"}) == set()  # a number is never ordered against a text
    assert keys(missing="x") == set()
    assert {i.key for i in store.search(("docs", "sub"))} == {"s"}
    assert {i.namespace for i in store.search((), limit=100)} == {("docs",), ("docs", "sub"), ("other",)}
    with pytest.raises(InvalidInput, match=r"\$regex"):
        store.search(ns, filter={"n": {"$regex": "1"}})


def test_search_with_a_query_ranks_matches_with_a_score(store: PrmeStore) -> None:
    ns = ("memories",)
    store.put(ns, "1", {"text": "alice prefers dark mode in every editor"})
    store.put(ns, "2", {"text": "alice drinks green tea"})
    store.put(ns, "3", {"text": "dark chocolate is her favourite"})
    store.put(("elsewhere",), "4", {"text": "dark mode everywhere"})
    hits = store.search(ns, query="dark mode editor")
    # Words and meaning: every word first, then one word; "2" shares none and comes back by
    # meaning alone (every item under the prefix has a vector), last. Never one outside it.
    assert [h.key for h in hits] == ["1", "3", "2"]
    scores = [h.score for h in hits]
    assert all(s is not None for s in scores)
    assert scores == sorted(scores, reverse=True) and scores[0] > scores[1]  # type: ignore[type-var]
    assert [
        h.key for h in store.search(ns, query="dark mode editor", filter={"text": {"$ne": "x"}}, limit=1, offset=1)
    ] == ["3"]
    # No shared word: meaning alone, which weighs at most 0.4 of a score (docs/RECALL.md)
    unmatched = store.search(ns, query="文字 nothing-matches-this")
    assert {h.key for h in unmatched} <= {"1", "2", "3"}
    assert all(h.score is not None and 0 <= h.score <= 0.4 for h in unmatched)
    words_only = PrmeStore(store.client.with_embedder(False), user_id=ALICE)  # recall by words: nothing
    assert words_only.search(ns, query="文字 nothing-matches-this") == []
    assert [h.key for h in words_only.search(ns, query="dark mode editor")] == ["1", "3"]
    store.put(ns, "5", {"text": "日本語 テキスト"})
    assert [h.key for h in store.search(ns, query="テキスト")][:1] == ["5"]
    assert [h.key for h in words_only.search(ns, query="テキスト")] == ["5"]


# -- namespaces ------------------------------------------------------------------------


def test_list_namespaces(store: PrmeStore) -> None:
    for ns in [("a", "b", "c"), ("a", "b", "d"), ("a", "e"), ("x", "b", "c"), ("x", "y")]:
        store.put(ns, "k", {"v": 1})
    store.put(("gone",), "k", {"v": 1})
    store.delete(("gone",), "k")
    assert store.list_namespaces() == [("a", "b", "c"), ("a", "b", "d"), ("a", "e"), ("x", "b", "c"), ("x", "y")]
    assert store.list_namespaces(prefix=("a",)) == [("a", "b", "c"), ("a", "b", "d"), ("a", "e")]
    assert store.list_namespaces(prefix=("a", "b")) == [("a", "b", "c"), ("a", "b", "d")]
    assert store.list_namespaces(suffix=("c",)) == [("a", "b", "c"), ("x", "b", "c")]
    assert store.list_namespaces(prefix=("*", "b")) == [("a", "b", "c"), ("a", "b", "d"), ("x", "b", "c")]
    assert store.list_namespaces(prefix=("a",), suffix=("d",)) == [("a", "b", "d")]
    assert store.list_namespaces(max_depth=1) == [("a",), ("x",)]
    assert store.list_namespaces(max_depth=2) == [("a", "b"), ("a", "e"), ("x", "b"), ("x", "y")]
    assert store.list_namespaces(limit=2) == [("a", "b", "c"), ("a", "b", "d")]
    assert store.list_namespaces(limit=2, offset=3) == [("x", "b", "c"), ("x", "y")]
    assert store.list_namespaces(prefix=("nothing",)) == []


# -- owners ----------------------------------------------------------------------------


def test_owners_never_see_each_other(engine: Engine) -> None:
    with PrmeStore.from_conn_string(engine.target, user_id="alice") as alice:
        bob = PrmeStore(alice.client, user_id="bob")  # a store over an existing client
        alice.put(("prefs",), "k", {"who": "alice"})
        bob.put(("prefs",), "k", {"who": "bob"})
        assert alice.get(("prefs",), "k").value == {"who": "alice"}
        assert bob.get(("prefs",), "k").value == {"who": "bob"}
        assert [i.value for i in bob.search(())] == [{"who": "bob"}]
        # alice's item shares the query's word and its meaning; bob's own comes back by
        # meaning alone, alice's never (recall reads one owner's words and vectors)
        assert [i.value for i in bob.search((), query="alice")] == [{"who": "bob"}]
        assert [i.value for i in alice.search((), query="bob", limit=100)] == [{"who": "alice"}]
        bob.delete(("prefs",), "k")
        assert alice.get(("prefs",), "k").value == {"who": "alice"}
        assert bob.list_namespaces() == []
        assert alice.list_namespaces() == [("prefs",)]


def test_owner_from_the_namespace(engine: Engine) -> None:
    with PrmeStore.from_conn_string(engine.target) as store:  # LangMem's ("memories", "{user_id}")
        store.put(("memories", "alice"), "m", {"content": "alice likes tea"})
        store.put(("memories", "bob", "work"), "m", {"content": "bob likes coffee"})
        assert store.client.list_nodes(user_id="alice")[0].content.count("alice likes tea") == 1
        assert store.client.list_nodes(user_id="bob")[0].content.count("bob likes coffee") == 1
        assert [i.value["content"] for i in store.search(("memories", "alice"))] == ["alice likes tea"]
        assert store.list_namespaces(prefix=("memories", "bob")) == [("memories", "bob", "work")]
        for refused in (
            lambda: store.put(("notes", "alice"), "m", {"x": 1}),
            lambda: store.get(("memories",), "m"),
            lambda: store.search(("memories",)),
            lambda: store.search(()),
            lambda: store.list_namespaces(),
            lambda: store.list_namespaces(suffix=("alice",)),
            lambda: store.list_namespaces(prefix=("memories", "*")),
            lambda: store.delete(("x",), "m"),
        ):
            with pytest.raises(OwnerError, match="names no owner"):
                refused()
    rule = PrmeStore(store.client, owner_rule=("tenants", "{user_id}", "memories"))
    assert rule._logic.owner(("tenants", "t1", "memories", "x"), "namespace") == "t1"
    with pytest.raises(OwnerError):
        rule._logic.owner(("tenants", "t1", "other"), "namespace")


# -- bad input -------------------------------------------------------------------------


def test_bad_input_is_refused_before_any_write(store: PrmeStore) -> None:
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(40):
        inner["d"] = {}
        inner = inner["d"]
    cases: list[tuple[type[Exception], str, Any]] = [
        (InvalidInput, "JSON", {"nan": float("nan")}),
        (InvalidInput, "JSON", {"set": {1, 2}}),
        (InvalidInput, "JSON", {1: "int key"}),
        (InvalidInput, "levels deep", deep),
        (InvalidInput, "bytes", {"big": "x" * MAX_ITEM_BYTES}),
        (InvalidInput, "Unicode", {"s": "\ud800"}),
        (InvalidInput, "dict", ["not", "an", "object"]),
    ]
    for error, message, value in cases:
        with pytest.raises(error, match=message):
            store.batch([PutOp(("bad",), "k", value)])
    with pytest.raises(InvalidInput, match="key"):
        store.put(("bad",), "", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.put(("has.period",), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(("has.period",), "k")])
    with pytest.raises(NotImplementedError, match="TTL"):
        store.put(("bad",), "k", {"v": 1}, ttl=5)
    with pytest.raises(NotImplementedError, match="TTL"):
        PrmeStore(store.client, user_id=ALICE, ttl={"default_ttl": 1})
    with pytest.raises(InvalidInput, match="limit"):
        store.search(("bad",), limit=-1)
    store.put(("ok",), "k", {"big": "x" * (MAX_ITEM_BYTES - 300)})  # just under the limit
    assert [op for op, _ in journal_ops(store.client)] == ["create"]


def test_setup_is_idempotent(engine: Engine) -> None:
    with PrmeStore.from_conn_string(engine.target, user_id=ALICE) as store:
        store.setup()
        store.setup()
        store.put(("x",), "k", {"v": 1})
        store.setup()
        assert store.get(("x",), "k") is not None


# -- concurrency -----------------------------------------------------------------------


def test_concurrent_puts_of_one_key_from_threads(store: PrmeStore) -> None:
    writers = 8
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            barrier.wait()
            store.put(("race",), "key", {"writer": n})
            store.put(("race",), "same", {"value": "identical"})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    final = store.get(("race",), "key")
    assert final is not None
    # no lost update: every put is a version in the journal; the last version is the value
    values = values_in_journal(store.client, "key")
    assert sorted(v["writer"] for v in values) == list(range(writers))
    assert final.value == values[-1] or final.value in values
    assert values_in_journal(store.client, "same") == [{"value": "identical"}]  # concurrent retries: one record
    # one item, one active version
    active = [n for n in store.client.list_nodes(user_id=ALICE) if n.lifecycle_state == "active"]
    assert len(active) == 2
    ops = [op for op, _ in journal_ops(store.client)]
    assert ops.count("create") == writers + 1 and ops.count("archive") == writers - 1
    assert store.client.verify_journal(user_id=ALICE, independent=True) == []


def test_async_store_and_concurrent_tasks(engine: Engine) -> None:
    async def scenario() -> tuple[Any, ...]:
        async with AsyncPrmeStore.from_conn_string(engine.target, user_id=ALICE) as store:
            await store.setup()
            await asyncio.gather(*(store.aput(("race",), "key", {"task": n}) for n in range(6)))
            await asyncio.gather(*(store.aput(("race",), "same", {"v": 1}) for _ in range(4)))
            item = await store.aget(("race",), "key")
            found = await store.asearch(("race",), filter={"v": 1})
            names = await store.alist_namespaces()
            # the sync API from another thread, as LangGraph's async stores allow
            from_thread = await asyncio.to_thread(store.get, ("race",), "same")
            with pytest.raises(asyncio.InvalidStateError):
                store.get(("race",), "same")
            await store.adelete(("race",), "same")
            gone = await store.aget(("race",), "same")
            return item, found, names, from_thread, gone

    item, found, names, from_thread, gone = asyncio.run(scenario())
    assert item is not None and item.value["task"] in range(6)
    assert [i.key for i in found] == ["same"]
    assert names == [("race",)]
    assert from_thread is not None and from_thread.value == {"v": 1}
    assert gone is None
    with MemoryClient(engine.target) as client:
        assert sorted(v["task"] for v in values_in_journal(client, "key")) == list(range(6))
        assert values_in_journal(client, "same") == [{"v": 1}]
        assert client.verify_journal(user_id=ALICE, independent=True) == []


# -- LangMem ---------------------------------------------------------------------------


def test_langmem_tools_over_a_prme_store(engine: Engine) -> None:
    from langmem import create_manage_memory_tool, create_search_memory_tool

    with PrmeStore.from_conn_string(engine.target) as store:
        store.setup()
        manage = create_manage_memory_tool(namespace=("memories", "{langgraph_user_id}"), store=store)
        search = create_search_memory_tool(namespace=("memories", "{langgraph_user_id}"), store=store)
        config = {"configurable": {"langgraph_user_id": "alice"}}
        created = manage.invoke({"content": "alice prefers tabs over spaces", "action": "create"}, config=config)
        memory_id = created.split()[-1]
        manage.invoke({"content": "alice prefers spaces now", "action": "update", "id": memory_id}, config=config)
        found = search.invoke({"query": "spaces"}, config=config)
        assert "alice prefers spaces now" in found
        bob = {"configurable": {"langgraph_user_id": "bob"}}
        assert "alice" not in search.invoke({"query": "spaces"}, config=bob)
        manage.invoke({"action": "delete", "id": memory_id}, config=config)
        assert "alice prefers" not in search.invoke({"query": "spaces"}, config=config)
        history = values_in_journal(store.client, memory_id, "alice")
        assert [v["content"] for v in history] == ["alice prefers tabs over spaces", "alice prefers spaces now"]


# -- an index config (LangGraph's dims / embed / fields) ---------------------------------


class ConceptEmbeddings:
    """A LangChain-style ``Embeddings`` (embed_documents / embed_query and their async forms):
    one dimension per concept, so "kitten" is near "cat" though no word is shared."""

    CONCEPTS = (("cat", "kitten", "feline"), ("tea", "matcha", "earl"), ("editor", "vim", "emacs"))

    def __init__(self) -> None:
        self.documents: list[str] = []

    def _vector(self, text: str) -> list[float]:
        words = text.lower().split()
        return [float(sum(w.strip('.,"') in c for w in words)) for c in self.CONCEPTS] + [0.01]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents.extend(texts)
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)


def test_search_with_an_index_config(engine: Engine) -> None:
    """The index's embed computes each item's vector from its indexed fields (LangChain's
    embed_documents) and the query's (embed_query); recall fuses them with the words."""
    from langchain_core.embeddings import Embeddings

    class Fake(ConceptEmbeddings, Embeddings):
        pass

    embeddings = Fake()
    index = {"dims": 4, "embed": embeddings, "fields": ["text"]}
    with PrmeStore.from_conn_string(engine.target, user_id=ALICE, index=index) as store:  # type: ignore[arg-type]
        store.setup()
        ns = ("notes",)
        store.put(ns, "pet", {"text": "a small cat sleeps", "other": "matcha"})
        store.put(ns, "drink", {"text": "earl grey tea", "other": "vim"})
        store.put(ns, "tool", {"text": "nothing here", "title": "vim editor"}, index=["title"])
        store.put(ns, "pet", {"text": "a small cat sleeps", "other": "matcha"})  # a retry: nothing embedded
        # Only the indexed fields' text is embedded: never another field, the item's document or its hashes
        assert embeddings.documents == ["a small cat sleeps", "earl grey tea", "vim editor"]
        # No query word is in any item: the fake's vectors rank, one concept each
        for query, best in (("kitten", "pet"), ("emacs", "tool")):
            hits = store.search(ns, query=query)
            assert hits[0].key == best, query
            assert hits[0].score is not None and hits[0].score > 0.25 > max(h.score or 0 for h in hits[1:])
        # Words and meaning fused: a word of one item's unindexed field, the meaning of another's indexed one
        assert {h.key for h in store.search(ns, query="vim", limit=2)} == {"drink", "tool"}
        assert {h.key for h in store.search(ns, query="matcha", limit=2)} == {"pet", "drink"}
        # The vectors are the index model's, registered with its dims (recall compares only them)
        model = store._vectors.embedder
        assert model is not None and (model.model_id, model.dimensions) == ("langgraph:Fake:4", 4)
        with pytest.raises(InvalidInput, match="dims"):
            PrmeStore(store.client, user_id=ALICE, index={"dims": 0, "embed": embeddings})  # type: ignore[typeddict-item]
        with pytest.raises(EmbeddingError, match="dimensions"):
            PrmeStore(store.client, user_id=ALICE, index={"dims": 3, "embed": embeddings}).put(ns, "x", {"text": "cat"})


def test_index_false_is_found_by_words_and_filters_never_by_meaning(engine: Engine) -> None:
    """``index=False`` stores no vector: the item is found by a filter and by its words, never by meaning alone.
    With no index config the client's own embedder (the bundled model) embeds the value's text."""
    with PrmeStore.from_conn_string(engine.target, user_id=ALICE) as store:
        ns = ("people",)
        store.put(ns, "indexed", {"text": "Bob drives a Tesla Model 3", "tag": "a"})
        store.put(ns, "hidden", {"text": "Bob drives a Tesla Model 3", "tag": "b"}, index=False)
        store.put(ns, "numbers", {"n": 3})  # no text: no vector
        assert [i.key for i in store.search(ns, filter={"tag": "b"})] == ["hidden"]
        by_meaning = [h.key for h in store.search(ns, query="which automobile")]  # no shared word
        assert by_meaning == ["indexed"]
        assert {h.key for h in store.search(ns, query="tesla")} == {"indexed", "hidden"}
        # one vector per item that has one, by the client's model, none of the documents' hashes
        recalled = store.client.recall("which automobile", user_id=ALICE, max_count=10)
        assert [json.loads(h.content)["key"] for h in recalled] == ["indexed"]


def test_two_stores_see_each_others_writes(store: PrmeStore) -> None:
    """A store remembers the version it saw last (get and put look there first); another
    writer's change is never hidden by it."""
    other = PrmeStore(store.client, user_id=ALICE)
    ns = ("shared",)
    store.put(ns, "k", {"v": 1})
    assert store.get(ns, "k").value == {"v": 1}
    other.put(ns, "k", {"v": 2})
    assert store.get(ns, "k").value == {"v": 2}
    store.put(ns, "k", {"v": 3})  # its guess of the next version is still right
    other.put(ns, "k", {"v": 4})  # other's guess is stale: a conflict, then the full path
    assert store.get(ns, "k").value == {"v": 4} and other.get(ns, "k").value == {"v": 4}
    other.delete(ns, "k")
    assert store.get(ns, "k") is None
    store.put(ns, "k", {"v": 4})  # same value as it last saw, but deleted meanwhile: a new version
    assert other.get(ns, "k").value == {"v": 4}
    assert values_in_journal(store.client, "k") == [{"v": 1}, {"v": 2}, {"v": 3}, {"v": 4}, {"v": 4}]
    active = [n for n in store.client.list_nodes(user_id=ALICE) if n.lifecycle_state == "active"]
    assert len(active) == 1


def test_async_store_embeds_with_the_index_and_the_default_model(engine: Engine) -> None:
    from langchain_core.embeddings import Embeddings

    class Fake(ConceptEmbeddings, Embeddings):
        pass

    embeddings = Fake()
    index = {"dims": 4, "embed": embeddings, "fields": ["text"]}

    async def scenario() -> tuple[list[str], list[str], list[str]]:
        async with AsyncPrmeStore.from_conn_string(engine.target, user_id=ALICE, index=index) as store:  # type: ignore[arg-type]
            await store.aput(("n",), "pet", {"text": "a small cat"})
            await store.aput(("n",), "tool", {"text": "vim"})
            await store.aput(("n",), "hidden", {"text": "feline feline"}, index=False)
            by_index = [h.key for h in await store.asearch(("n",), query="kitten")]
        async with AsyncPrmeStore.from_conn_string(engine.target, user_id="bob") as store:  # the default model
            await store.aput(("n",), "car", {"text": "Bob drives a Tesla Model 3"})
            await store.aput(("n",), "hidden", {"text": "Bob drives a Tesla Model 3"}, index=False)
            by_default = [h.key for h in await store.asearch(("n",), query="which automobile")]
            by_words = [h.key for h in await store.asearch(("n",), query="tesla")]
        return by_index, by_default, by_words

    by_index, by_default, by_words = asyncio.run(scenario())
    assert by_index[0] == "pet" and "hidden" not in by_index
    assert embeddings.documents == ["a small cat", "vim"]
    assert by_default == ["car"] and sorted(by_words) == ["car", "hidden"]
