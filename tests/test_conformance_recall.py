"""Recall with virtual decay, one suite over both engines (issue 18, item 3; issue 31).

Both engines split text into the same words (``prme._recall_words`` on PostgreSQL,
``prme.recall_words`` on a pack; docs/RECALL.md, "Words") and rank with the same double
operations, so the same memories and ``as_of`` give the same hits in the same order, with
scores equal within ``TOLERANCE`` (the engines may add a memory's word weights in another
order). The ``engine`` tests pin each engine to scores computed here with ``math.log`` and
``math.exp``, by words alone (a client without an embedder); the last tests run both engines
side by side on random text and corpora, by words and by words and meaning.
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prme_pg import InvalidInput, MemoryClient
from prme_pg.backends.duckdb import sql_directory

from .conformance_backends import Engine, engine_fixture  # noqa: F401

ALICE = "alice"
#: How far the engines' scores may differ: float sums in another order (docs/RECALL.md).
TOLERANCE = 1e-9
AS_OF = datetime(2025, 1, 11, tzinfo=UTC)
T0 = datetime(2025, 1, 1, tzinfo=UTC)
RATES = {"permanent": 0.0, "slow": 0.005, "medium": 0.02, "fast": 0.07, "rapid": 0.2}


def nid(n: int) -> uuid.UUID:
    return uuid.UUID(int=(0xA1 << 96) | n)


def decayed(salience: str, boost: str, confidence: str, profile: str, age_days: float) -> tuple[float, float]:
    rate = RATES[profile]

    def factor(r: float) -> float:
        return 0.0 if r * age_days >= 700.0 else math.exp(-(r * age_days))

    s = min(1.0, max(0.0, float(Decimal(salience)) * factor(rate) + float(Decimal(boost)) * factor(0.10)))
    c = min(1.0, max(0.0, float(Decimal(confidence)) * factor(rate / 2.0)))
    return s, c


# id, content, decay profile, salience, boost, confidence, lifecycle, scope
CORPUS = [
    (1, "Prefers tabs over spaces in the code editor", "medium", "0.8", "0.2", "0.9", "active", "personal"),
    (2, "Uses vim as the main editor", "slow", "0.5", "0", "0.5", "active", "personal"),
    (3, "Lives in Berlin with two cats", "permanent", "0.5", "0", "0.5", "active", "personal"),
    (4, "Editor theme is solarized dark", "rapid", "0.9", "0", "0.9", "active", "personal"),
    (5, "Tabs are rendered four spaces wide in the editor", "medium", "0.5", "0", "0.5", "archived", "personal"),
    (6, "Editor font is Fira Code", "medium", "0.5", "0", "0.5", "deprecated", "personal"),
    (7, "Old editor was emacs", "medium", "0.5", "0", "0.5", "superseded", "personal"),
    (8, "Editor keybindings follow vim", "medium", "0.5", "0", "0.5", "active", "work"),
    (9, "Likes the editor to autosave", "medium", "0.5", "0", "0.5", "contested", "personal"),
]


def seed(engine: Engine, memory: MemoryClient) -> None:
    for n, content, profile, salience, boost, confidence, state, scope in CORPUS:
        node = memory.add_node(
            content,
            user_id=ALICE,
            node_id=nid(n),
            scope=scope,
            decay_profile=profile,
            salience_base=Decimal(salience),
            confidence_base=Decimal(confidence),
        )
        engine.force_node(
            node.id,
            reinforcement_boost=Decimal(boost),
            created_at=T0,
            last_reinforced_at=None,
            lifecycle_state=state,
        )
    memory.add_node("Prefers tabs in the editor, always tabs", user_id="bob")


def expected(matches: dict[int, set[str]], query: list[str], as_of: datetime = AS_OF) -> list[tuple[Any, ...]]:
    """Recall by words of ``query``: ``matches`` maps a memory to the query's words it has."""
    age = (as_of - T0).total_seconds() / 86400.0
    states = {n: state for n, *_, state, _ in CORPUS}
    candidates = [n for n in matches if states[n] not in ("archived", "deprecated")]
    # BM25's idf of each query word among the candidates; relevance is a memory's share.
    weight = {}
    for word in query:
        df = sum(word in matches[n] for n in candidates)
        weight[word] = math.log(1 + (len(candidates) - df + 0.5) / (df + 0.5))
    rows = []
    for n, _, profile, salience, boost, confidence, _state, _ in CORPUS:
        if n not in candidates:
            continue
        s, c = decayed(salience, boost, confidence, profile, age)
        relevance = sum(weight[word] for word in matches[n]) / sum(weight.values())
        rows.append((relevance * (0.5 + 0.25 * s + 0.25 * c), relevance, s, c, nid(n)))
    rows.sort(key=lambda row: (-row[0], row[4]))
    return rows


def same_hits(found: list[tuple[Any, ...]], wanted: list[tuple[Any, ...]]) -> bool:
    """The same memories in the same order, every number equal within TOLERANCE."""
    return len(found) == len(wanted) and all(
        f[-1] == w[-1]
        and all(math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE) for a, b in zip(f[:-1], w[:-1], strict=True))
        for f, w in zip(found, wanted, strict=True)
    )


@pytest.fixture(name="memory")
def lexical_memory_fixture(engine: Engine) -> MemoryClient:
    """A client on the engine under test that recalls by words alone (no embedder)."""
    return engine.client(embedder=False)


def hits(memory: MemoryClient, query: str | None, **options: Any) -> list[tuple[Any, ...]]:
    found = memory.recall(query, user_id=ALICE, as_of=options.pop("as_of", AS_OF), **options)
    assert [h.rank for h in found] == list(range(1, len(found) + 1))
    return [(h.score, h.relevance, h.effective_salience, h.effective_confidence, h.id) for h in found]


def test_recall_ranks_with_virtual_decay_and_weighted_words(engine: Engine, memory: MemoryClient) -> None:
    seed(engine, memory)
    editor_tabs = {1: {"editor", "tab"}, 2: {"editor"}, 4: {"editor"}, 7: {"editor"}, 8: {"editor"}, 9: {"editor"}}
    # "editor tabs" -> editor, tab: 1 has both; editor is in every candidate, so weighs little.
    assert same_hits(hits(memory, "editor tabs"), expected(editor_tabs, ["editor", "tab"]))
    # Stop words dropped, plural endings removed: "Which editor do I use?" -> editor, use.
    which = {1: {"editor"}, 2: {"editor", "use"}, 4: {"editor"}, 7: {"editor"}, 8: {"editor"}, 9: {"editor"}}
    assert same_hits(hits(memory, "Which editor do I use?"), expected(which, ["editor", "use"]))
    # No query: every recallable memory by strength alone (relevance 1).
    everything = hits(memory, None, max_count=100)
    assert [row[1] for row in everything] == [1.0] * 7
    assert everything == hits(memory, " \t\n", max_count=100)
    # At T0 nothing has faded: the rapid memory (4) ranks first of the editor-only ones.
    at_t0 = [row[4] for row in hits(memory, "editor tabs", as_of=T0)]
    assert at_t0 == [nid(1), nid(4), nid(2), nid(7), nid(8), nid(9)]
    assert at_t0 == [row[4] for row in expected(editor_tabs, ["editor", "tab"], as_of=T0)]


def test_recall_filters_alike(engine: Engine, memory: MemoryClient) -> None:
    seed(engine, memory)
    assert [row[4] for row in hits(memory, "vim", scopes=["work"])] == [nid(8)]
    assert [row[4] for row in hits(memory, "editor", max_count=2)] == [nid(1), nid(2)]
    assert hits(memory, "the of it ...") == [], "only stop words and punctuation: nothing matches"
    assert same_hits(hits(memory, "berlin CATS"), expected({3: {"berlin", "cat"}}, ["berlin", "cat"]))
    bob = memory.recall("tabs", user_id="bob")
    assert [h.content for h in bob] == ["Prefers tabs in the editor, always tabs"]
    assert all(h.id != nid(5) for h in memory.recall("tabs", user_id=ALICE, max_count=1000))


def test_recall_errors_are_the_same_on_both_engines(memory: MemoryClient) -> None:
    with pytest.raises(InvalidInput, match="max_count must be between 1 and 1000"):
        memory.recall("x", user_id=ALICE, max_count=1001)
    with pytest.raises(InvalidInput, match="query must be at most 65536 bytes"):
        memory.recall("x" * 65537, user_id=ALICE)
    with pytest.raises(InvalidInput, match="query must have at most 1024 distinct search terms"):
        memory.recall(" ".join(f"w{i}" for i in range(1025)), user_id=ALICE)
    with pytest.raises(InvalidInput, match="scope must match"):
        memory.recall("x", user_id=ALICE, scopes=["Bad Scope"])
    assert memory.recall(" ".join(f"w{i}" for i in range(1024)), user_id=ALICE) == []


# -- both engines side by side ---------------------------------------------------------

_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8", exclude_characters="\x00"),
        st.sampled_from(list("abcdefgh ABC tabs uses flies classes does the of, .-'\n\t")),
    ),
    max_size=80,
)


@pytest.fixture(scope="module")
def pack_words() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for script in sorted(sql_directory().glob("*.sql")):
        con.execute(script.read_text(encoding="utf-8"))
    return con


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TEXT)
def test_both_engines_split_text_into_the_same_words(
    text: str, db_dsn: str, pack_words: duckdb.DuckDBPyConnection
) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT prme._recall_words(%s)", [text]).fetchone()
    assert row is not None
    found = pack_words.execute("SELECT prme.recall_words($t)", {"t": text}).fetchone()
    assert found is not None
    assert found[0] == row[0]


def test_both_engines_recall_a_random_corpus_identically(db_dsn: str, tmp_path: Path) -> None:
    import random

    rng = random.Random(18)
    vocabulary = [
        "editor",
        "tabs",
        "tab",
        "spaces",
        "vim",
        "emacs",
        "theme",
        "dark",
        "light",
        "cats",
        "Berlin",
        "uses",
        "use",
        "coffee",
        "tea",
    ]
    created: list[tuple[datetime, uuid.UUID]] = []
    with MemoryClient(db_dsn, embedder=False) as server, MemoryClient(tmp_path / "memories", embedder=False) as pack:
        for n in range(300):
            content = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 6)))
            options: dict[str, Any] = {
                "node_id": nid(1000 + n),
                "decay_profile": rng.choice(list(RATES)),
                "salience_base": Decimal(rng.randint(0, 10000)) / 10000,
                "confidence_base": Decimal(rng.randint(0, 10000)) / 10000,
                "scope": rng.choice(["personal", "work"]),
            }
            server.add_node(content, user_id=ALICE, **options)
            pack.add_node(content, user_id=ALICE, **options)
            created.append((T0 + timedelta(microseconds=rng.randint(0, 30 * 86400 * 10**6)), nid(1000 + n)))
        # The same creation times on both (each engine read its own clock), as a DBA would set them.
        with psycopg.connect(db_dsn, autocommit=True) as conn, conn.cursor() as cur:
            cur.executemany("UPDATE prme.nodes SET created_at = %s WHERE id = %s", created)
        with duckdb.connect(str(tmp_path / "memories" / "pack.duckdb")) as con:
            con.executemany("UPDATE prme.nodes SET created_at = ? WHERE id = ?", created)
        # Up to 9 words: the pack matches fewer than five distinct words and five or more
        # with different statements.
        for _ in range(30):
            query = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 9)))
            as_of = T0 + timedelta(microseconds=rng.randint(0, 400 * 86400 * 10**6))
            for scopes in (None, ["work"]):
                theirs = server.recall(query, user_id=ALICE, as_of=as_of, scopes=scopes, max_count=1000)
                ours = pack.recall(query, user_id=ALICE, as_of=as_of, scopes=scopes, max_count=1000)
                assert_same_ranking(theirs, ours, TOLERANCE)


def assert_same_ranking(theirs: list[Any], ours: list[Any], tolerance: float) -> None:
    """The same hits, scores equal within ``tolerance``; two memories may trade places only where
    their scores are that close (a near-tie that float arithmetic could order either way)."""
    assert len(theirs) == len(ours)
    for a, b in zip(theirs, ours, strict=True):
        assert a.rank == b.rank
        for field in ("score", "relevance", "effective_salience", "effective_confidence"):
            assert math.isclose(getattr(a, field), getattr(b, field), rel_tol=tolerance, abs_tol=tolerance), field
    for a, b in zip(theirs, ours, strict=True):
        if a.id != b.id:
            near = {h.id for h in theirs if abs(h.score - a.score) <= 2 * tolerance}
            assert near == {h.id for h in ours if abs(h.score - a.score) <= 2 * tolerance}
            assert b.id in near, "only a near-tie may change places"
    assert {h.id for h in theirs} == {h.id for h in ours}


#: Scores by meaning may differ more: the engines add float32 products in another order.
VECTOR_TOLERANCE = 1e-6

SENTENCES = [
    "Bob drives a Tesla Model 3",
    "Alice is allergic to peanuts",
    "Alice has a golden retriever named Max",
    "Alice's husband is called Tom",
    "Alice prefers tabs over spaces",
    "Alice drinks coffee every morning",
    "Alice lives in Lyon near the river",
    "Alice works as a nurse at the city hospital",
    "Her sister Emma studies law in Paris",
    "She runs ten kilometres on Sundays",
    "The kids go to the Montessori school",
    "Alice booked a flight to Lisbon for March",
]
QUESTIONS = [
    "what car does bob own",
    "what food should I avoid cooking for alice?",
    "pets",
    "is alice married",
    "Alice drinking coffee",
    "where does she live",
    "her job",
    "exercise habits",
    "travel plans",
    "family",
    "the",
    "",
]


def test_both_engines_recall_by_meaning_alike(db_dsn: str, tmp_path: Path) -> None:
    """Words and meaning with the default embedder: the same hits and order on both engines."""
    with MemoryClient(db_dsn) as server, MemoryClient(tmp_path / "memories") as pack:
        assert server.embedder is not None and pack.embedder is not None
        for n, sentence in enumerate(SENTENCES):
            for client in (server, pack):
                client.add_node(sentence, user_id="carol", node_id=nid(5000 + n))
        for question in QUESTIONS:
            theirs = server.recall(question, user_id="carol", as_of=AS_OF, max_count=12)
            ours = pack.recall(question, user_id="carol", as_of=AS_OF, max_count=12)
            assert_same_ranking(theirs, ours, VECTOR_TOLERANCE)
        # Meaning finds what shares no word with the question, on both.
        for client in (server, pack):
            assert client.recall("what car does bob own", user_id="carol")[0].content == SENTENCES[0]
            assert client.recall("pets", user_id="carol")[0].content == SENTENCES[2]


def test_a_pack_written_before_the_word_index_is_indexed_when_opened(tmp_path: Path) -> None:
    pack = tmp_path / "memories"
    with MemoryClient(pack) as memory:
        node = memory.add_node("Prefers tabs over spaces", user_id=ALICE)
    # As a pack of an earlier prme-pg: no word rows, no version of the words.
    with duckdb.connect(str(pack / "pack.duckdb")) as con:
        con.execute("DELETE FROM prme.node_words")
        con.execute("DELETE FROM prme.pack_info WHERE key = 'recall_words'")
    with MemoryClient(pack) as memory:
        assert [h.id for h in memory.recall("tab", user_id=ALICE)] == [node.id]
    with duckdb.connect(str(pack / "pack.duckdb")) as con:
        words = con.execute("SELECT list(word ORDER BY word) FROM prme.node_words").fetchone()
        version = con.execute("SELECT value FROM prme.pack_info WHERE key = 'recall_words'").fetchone()
    assert words == (["prefer", "space", "tab"],)
    assert version == ("1",)


# -- find_nodes: the review search (sql/postgres/315_find_nodes.sql) ----------------------


def test_find_nodes_matches_words_in_any_state_and_filters(engine: Engine, memory: MemoryClient) -> None:
    tabs = memory.add_node("alice indents with tabs", user_id="alice", scope="work", stability="stable")
    both = memory.add_node("tabs and spaces, alice mixes them", user_id="alice")
    archived = memory.add_node("spaces only", user_id="alice")
    memory.archive_node(archived.id, user_id="alice")
    memory.add_node("bob uses tabs", user_id="bob")
    found = memory.find_nodes("tabs spaces", user_id="alice")
    # Most of the query's words first (both has two), then the newest change.
    assert [n.id for n in found] == [both.id, archived.id, tabs.id]
    assert found[1].lifecycle_state == "archived" and found[0] == memory.get_node(both.id, user_id="alice")
    assert [n.id for n in memory.find_nodes("tabs", user_id="alice", scopes=["work"])] == [tabs.id]
    assert [n.id for n in memory.find_nodes("tabs", user_id="alice", stabilities=["stable"])] == [tabs.id]
    archived_only = memory.find_nodes(None, user_id="alice", lifecycle_states=["archived"])
    assert [n.id for n in archived_only] == [archived.id]
    assert [n.id for n in memory.find_nodes(" ", user_id="alice", max_count=2)] == [archived.id, both.id]
    assert memory.find_nodes("the and of", user_id="alice") == [], "only stop words"
    for bad in ({"stabilities": ["rock"]}, {"lifecycle_states": ["gone"]}, {"max_count": 0}, {"scopes": ["Work"]}):
        with pytest.raises(InvalidInput):
            memory.find_nodes("tabs", user_id="alice", **bad)
    with pytest.raises(InvalidInput, match="at most 1024 distinct search terms"):
        memory.find_nodes(" ".join(f"word{n}x" for n in range(1100)), user_id="alice")
