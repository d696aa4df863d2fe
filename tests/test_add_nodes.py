"""add_nodes: a batch of memories in one transaction, each exactly as add_node writes it
(docs/IMPORT.md). PostgreSQL here; the pack's batch in tests/test_add_nodes_pack.py."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prme_pg import MemoryClient, migrations, testing
from prme_pg.errors import IdempotencyConflict, InvalidInput

from .conftest import ROOT

ALICE = "alice"


@pytest.fixture
def memory(db_dsn: str) -> Iterator[MemoryClient]:
    with MemoryClient(db_dsn) as client:
        yield client


def _items(count: int, **extra: Any) -> list[dict[str, Any]]:
    return [
        {"content": f"memory number {i} about tabs", "node_id": uuid.UUID(int=i + 1), **extra} for i in range(count)
    ]


def _records(dsn: str, user_id: str) -> dict[uuid.UUID, tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT node_id, record, checksum FROM prme.journal WHERE user_id = %s AND node_version = 1", [user_id]
        ).fetchall()
    return {row[0]: (row[1], row[2]) for row in rows}


def test_a_batch_journals_what_add_node_journals_one_by_one(
    memory: MemoryClient, db_dsn: str, pg_server: testing.Server, template_db: str
) -> None:
    items = [
        {"content": "alice prefers tabs", "node_id": uuid.uuid4()},
        {
            "content": 'quotes " and \\ and ünïcödé',
            "scope": "work",
            "namespace": "editor",
            "kind": "preference",
            "confidence_base": Decimal("0.65"),
            "salience_base": 0.7,
            "stability": "semi-stable",
            "decay_profile": "slow",
            "node_id": uuid.uuid4(),
        },
        {"content": "no review", "next_review_at": None, "node_id": uuid.uuid4()},
        {"content": "reviewed then", "next_review_at": datetime(2031, 1, 2, 3, 4, 5, 6, UTC), "node_id": uuid.uuid4()},
    ]
    nodes = memory.add_nodes(items, user_id=ALICE)
    assert [n.id for n in nodes] == [i["node_id"] for i in items] and not any(n.replayed for n in nodes)
    batch = _records(db_dsn, ALICE)

    other = testing.create_database(pg_server, template=template_db)
    try:
        other_dsn = pg_server.dsn_for(other)
        with MemoryClient(other_dsn) as single:
            for item in items:
                single.add_node(item.pop("content"), user_id=ALICE, **item)
        one_by_one = _records(other_dsn, ALICE)
    finally:
        testing.drop_database(pg_server, other)

    assert batch.keys() == one_by_one.keys()
    for node_id, (record, checksum) in batch.items():
        single_record, _ = one_by_one[node_id]
        # A fresh operation id per mutation, and the transaction's time: the only differences.
        ours, theirs = json.loads(record), json.loads(single_record)
        expected = single_record.replace(theirs["operation_id"], ours["operation_id"])
        for field in ("created_at", "updated_at", "next_review_at"):
            if theirs["after"][field] is not None:
                expected = expected.replace(theirs["after"][field], ours["after"][field])
        assert record == expected
        assert checksum == hashlib.sha256(record.encode()).hexdigest()
    assert memory.verify_journal(user_id=ALICE) == []
    assert memory.verify_journal(user_id=ALICE, independent=True) == []
    assert all(memory.replay_node(n.id, user_id=ALICE).matches for n in nodes)
    # The derived search vector is add_node's too (computed with the owner's key once per batch).
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute(
            "SELECT bool_and(search = array_to_tsvector(prme._owner_lexemes(user_id, content))), count(*) "
            "FROM prme.nodes WHERE user_id = %s",
            [ALICE],
        ).fetchone()
    assert row == (True, len(items))


def test_a_retried_batch_writes_nothing_and_reports_replays(memory: MemoryClient, db_dsn: str) -> None:
    first = memory.add_nodes(_items(3), user_id=ALICE)
    memory.reinforce(first[0].id, user_id=ALICE)  # changed since: still the same memory
    before = _records(db_dsn, ALICE)
    again = memory.add_nodes(_items(4), user_id=ALICE)
    assert [n.replayed for n in again] == [True, True, True, False]
    assert again[0].version == 2 and again[1] == dataclasses.replace(first[1], replayed=True)
    after = _records(db_dsn, ALICE)
    assert len(after) == 4 and all(after[k] == v for k, v in before.items())
    assert memory.add_nodes(_items(4), user_id=ALICE)[3].replayed


def test_a_taken_node_id_with_other_content_is_a_conflict_naming_the_item(memory: MemoryClient) -> None:
    memory.add_nodes(_items(1), user_id=ALICE)
    items = _items(3)
    items[0]["content"] = "something else"
    with pytest.raises(IdempotencyConflict, match=r"^items\[0\]: a node with this node_id already exists"):
        memory.add_nodes(items, user_id=ALICE)
    assert len(memory.list_nodes(user_id=ALICE)) == 1


@pytest.mark.parametrize(
    ("index", "change", "message"),
    [
        (2, {"content": "  "}, "content must not be empty"),
        (1, {"scope": "Bad Scope"}, "scope must match"),
        (3, {"confidence_base": Decimal("1.5")}, "confidence_base must be a number in"),
        (0, {"stability": "rock"}, "stability must be low"),
        (4, {"decay_profile": "never"}, "decay_profile must be"),
        (2, {"created_at": datetime.now(UTC) + timedelta(days=2)}, "created_at must not be in the future"),
        (1, {"node_id": "not-a-uuid"}, "node_id must be a UUID"),
        (3, {"colour": "red"}, "unknown field colour"),
    ],
)
def test_a_bad_item_is_named_and_nothing_is_written(
    memory: MemoryClient, index: int, change: dict[str, Any], message: str
) -> None:
    items = _items(5)
    items[index].update(change)
    with pytest.raises(InvalidInput, match=rf"^items\[{index}\]: {message}"):
        memory.add_nodes(items, user_id=ALICE)
    assert memory.list_nodes(user_id=ALICE) == []


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ('{"content": "x"}', "items must be a JSON array"),
        ('[{"content": "x"}, 5]', r"items\[1\]: must be a JSON object"),
        ('[{"content": "x", "colour": 1}]', r"items\[0\]: unknown field colour"),
        ('[{"content": 5}]', r"items\[0\]: content must be a string"),
        ('[{"content": "x", "confidence_base": "0.5"}]', r"items\[0\]: confidence_base must be a number"),
        ('[{"content": "x", "node_id": "nope"}]', r"items\[0\]: node_id must be a UUID"),
        (
            '[{"content": "x", "node_id": "0c4bd2a2-7a31-4d0c-9a0b-58b54f8e8e01"}, '
            '{"content": "y", "node_id": "0C4BD2A2-7A31-4D0C-9A0B-58B54F8E8E01"}]',
            r"items\[0\]: node_id repeats another item's",
        ),
        ('[{"content": "x", "created_at": "yesterday-ish"}]', r"items\[0\]: invalid input syntax"),
        ('[{"content": "x"}, {"content": "y", "kind": "NO"}]', r"items\[1\]: kind must match"),
    ],
)
def test_the_sql_function_names_the_bad_item(db_dsn: str, items: str, message: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        conn.execute("SET ROLE prme_app")
        with pytest.raises(psycopg.Error, match=message) as caught:
            conn.execute("SELECT * FROM prme.add_nodes(user_id => 'alice', items => %s::jsonb)", [items])
        assert caught.value.sqlstate == "PR422"


def test_the_batch_limit_and_an_empty_batch(memory: MemoryClient, db_dsn: str) -> None:
    assert memory.add_nodes([], user_id=ALICE) == []
    with pytest.raises(InvalidInput, match="at most 1000"):
        memory.add_nodes(_items(1001), user_id=ALICE)
    with psycopg.connect(db_dsn) as conn, pytest.raises(psycopg.Error, match="at most 1000"):
        conn.execute(
            "SELECT * FROM prme.add_nodes('alice', (SELECT jsonb_agg(jsonb_build_object('content', 'x')) "
            "FROM generate_series(1, 1001)))"
        )
    assert len(memory.add_nodes(_items(1000), user_id=ALICE)) == 1000


def test_created_at_is_kept_and_the_journal_verifies(memory: MemoryClient) -> None:
    then = datetime(2024, 3, 1, 12, 0, 0, 123456, UTC)
    (node,) = memory.add_nodes([{"content": "from mem0", "created_at": then}], user_id=ALICE)
    assert node.created_at == then and node.updated_at > then and node.version == 1
    assert memory.verify_journal(user_id=ALICE, independent=True) == []
    assert memory.replay_node(node.id, user_id=ALICE).matches


def test_items_are_parsed_before_any_io(memory: MemoryClient) -> None:
    with pytest.raises(InvalidInput, match=r"^items\[1\]: confidence_base must be a number"):
        memory.add_nodes([{"content": "a"}, {"content": "b", "confidence_base": "lots"}], user_id=ALICE)
    with pytest.raises(InvalidInput, match=r"^items\[0\]: created_at must be a timezone-aware"):
        memory.add_nodes([{"content": "a", "created_at": datetime(2024, 1, 1)}], user_id=ALICE)
    with pytest.raises(InvalidInput, match=r"^items\[0\]: confidence_base must be a finite"):
        memory.add_nodes([{"content": "a", "confidence_base": "NaN"}], user_id=ALICE)


# -- the set-based prme.add_nodes (migration 0026) against 0024's item-by-item one -------
#
# 0026 checks and writes a batch in one statement and names a refused batch's bad item with
# 0024's checks run item by item (prme._add_nodes_refusal). The release before it is the
# oracle: every batch below, good or bad, must get the same answer from both -- the same
# rows, or the same error (SQLSTATE, message naming items[N], detail, hint) -- and write the
# same rows.

STORED = uuid.UUID(int=900)


def _oracle_batch() -> tuple[list[dict[str, Any]], list[float | None]]:
    items: list[dict[str, Any]] = [
        {"content": "alice prefers tabs", "node_id": str(uuid.UUID(int=801))},
        {
            "content": "with a vector",
            "node_id": str(uuid.UUID(int=802)),
            "embedding_model": "m3",
            "embedding_dimensions": 3,
        },
        {
            "content": "at work",
            "scope": "work",
            "namespace": "editor",
            "kind": "preference",
            "confidence_base": 0.65,
            "salience_base": 0.7,
            "stability": "semi-stable",
            "decay_profile": "slow",
            "node_id": str(uuid.UUID(int=803)),
        },
        {
            "content": "from before",
            "created_at": "2024-03-01T12:00:00.123456Z",
            "next_review_at": "2031-01-02T03:04:05Z",
        },
        {"content": "never reviewed", "next_review_at": "infinity", "embedding_model": "m3", "stability": "stable"},
        {"content": "stored before", "node_id": str(STORED)},
    ]
    return items, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]


def _set(index: int, **fields: Any) -> Any:
    def change(items: list[dict[str, Any]], numbers: list[float | None]) -> None:
        items[index].update(fields)

    return change


def _numbers(new: list[float | None]) -> Any:
    def change(items: list[dict[str, Any]], numbers: list[float | None]) -> None:
        numbers[:] = new

    return change


ORACLE_CASES: dict[str, list[Any]] = {
    "a good batch": [],
    "bad namespace": [_set(0, namespace="Not A Name")],
    "bad scope": [_set(2, scope="")],
    "bad kind": [_set(3, kind="k" * 64)],
    "blank content": [_set(4, content=" \t\n")],
    "no content": [_set(0, content=None)],
    "content too long": [_set(1, content="é" * 32769)],
    "confidence above 1": [_set(2, confidence_base=1.5)],
    "confidence with 5 decimals": [_set(0, confidence_base=0.12345)],
    "salience below 0": [_set(3, salience_base=-0.1)],
    "unknown stability": [_set(4, stability="rock")],
    "unknown decay profile": [_set(1, decay_profile="never")],
    "created_at in the future": [_set(3, created_at="2999-01-01T00:00:00Z")],
    "created_at not a time": [_set(0, created_at="yesterday-ish")],
    "created_at past year 9999": [_set(2, created_at="10000-01-01T00:00:00Z")],
    "created_at infinity": [_set(1, created_at="infinity")],
    "next_review_at Infinity": [_set(0, next_review_at="Infinity")],
    "next_review_at not a time": [_set(2, next_review_at="soon")],
    "next_review_at before year 1": [_set(5, next_review_at="0001-01-01T00:00:00Z BC")],
    "an unknown model without dimensions": [_set(0, embedding_model="m9")],
    "a model's first vector registers it": [
        _set(0, embedding_model="m2", embedding_dimensions=2),
        _numbers([1.0, 2.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]),
    ],
    "registered dimensions but another count": [_set(4, embedding_dimensions=4)],
    "a first vector of 0 dimensions": [_set(0, embedding_model="m0", embedding_dimensions=0)],
    "a model id with a control character": [_set(3, embedding_model="m\x07", embedding_dimensions=2)],
    "too few numbers": [_numbers([0.1, 0.2, 0.3, 0.4])],
    "too many numbers": [_numbers([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])],
    "too many numbers, the extra one NaN": [_numbers([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, float("nan")])],
    "NaN in the second vector": [_numbers([0.1, 0.2, 0.3, 0.4, float("nan"), 0.6])],
    "infinity in the first vector": [_numbers([0.1, float("inf"), 0.3, 0.4, 0.5, 0.6])],
    "NULL in the first vector": [_numbers([None, 0.2, 0.3, 0.4, 0.5, 0.6])],
    "a replay": [],  # item 5 is stored with the same content: replayed in every case
    "a replay with a vector": [_set(5, embedding_model="m3"), _numbers([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])],
    "a taken node_id with other content": [_set(5, content="something else")],
    "a taken node_id in another scope": [_set(5, scope="work")],
    "the earlier of two bad items: a rule, then a helper": [_set(1, stability="rock"), _set(3, scope="Bad")],
    "the earlier of two bad items: a helper, then a rule": [_set(1, kind="Bad"), _set(3, decay_profile="x")],
    "a bad kind before a NaN": [_set(2, kind="Bad"), _numbers([float("nan"), 0.2, 0.3, 0.4, 0.5, 0.6])],
    "a bad decay profile before a conflict": [_set(3, decay_profile="x"), _set(5, content="other")],
    "a conflict before a bad decay profile": [
        _set(0, node_id=str(STORED)),
        _set(5, node_id=None),
        _set(3, decay_profile="x"),
    ],
    "a bad item after a registering one": [
        _set(0, embedding_model="m2", embedding_dimensions=2),
        _set(4, namespace="BAD"),
        _numbers([1.0, 2.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]),
    ],
}

ORACLE_SETUP = """
SELECT prme.register_embedding_model('m3', 3);
SELECT prme.add_node('alice', 'stored before', node_id => '00000000-0000-0000-0000-000000000384');
SELECT prme.set_maintenance_setting('alice', 'semi-stable', '12 days', 0.05);
"""

ORACLE_WRITTEN = """
SELECT
    array(SELECT concat_ws(' | ', n.namespace, n.scope, n.kind, n.content, n.confidence_base, n.salience_base,
                           n.stability, n.decay_profile, n.lifecycle_state, n.version,
                           CASE WHEN n.created_at = now() THEN 'now' ELSE n.created_at::text END, n.updated_at = now(),
                           CASE
                               WHEN n.next_review_at IS NULL THEN 'never'
                               WHEN n.created_at = now() THEN (n.next_review_at - now())::text
                               ELSE n.next_review_at::text
                           END,
                           n.search, n.last_checksum = j.checksum, j.op, j.node_version, j.prev_checksum IS NULL)
          FROM prme.nodes AS n JOIN prme.journal AS j ON j.user_id = n.user_id AND j.node_id = n.id
          WHERE n.user_id = 'alice' AND n.id <> %(stored)s
          ORDER BY n.content),
    array(SELECT concat_ws(' | ', n.content, e.model_id, e.embedding::text)
          FROM prme.node_embeddings AS e JOIN prme.nodes AS n ON n.user_id = e.user_id AND n.id = e.node_id
          ORDER BY n.content),
    array(SELECT m.model_id || ':' || m.dimensions FROM prme.embedding_models AS m ORDER BY 1)
"""


def _oracle_answer(conn: psycopg.Connection[Any], items: list[dict[str, Any]], numbers: list[float | None]) -> Any:
    """What add_nodes answers for the batch and what it wrote, times relative to now; rolled back."""
    with conn.transaction(force_rollback=True):
        try:
            with conn.transaction():
                rows = conn.execute(
                    "SELECT r.*, r.created_at = now(), r.next_review_at - now()"
                    " FROM prme.add_nodes('alice', %s, %s::real[]) AS r",
                    [psycopg.types.json.Jsonb(items), numbers],
                ).fetchall()
        except psycopg.Error as exc:
            if exc.sqlstate is None:  # the client's error, not an answer of the server's
                raise
            return (exc.sqlstate, exc.diag.message_primary, exc.diag.message_detail, exc.diag.message_hint)
        # Times as what they mean: a stored node's are the setup's; a new one's created now
        # is due a cadence from now; an imported one's are its own.
        answer = [
            (
                row[0] if any(i.get("node_id") == str(row[0]) for i in items) else "random",
                *row[1:12],
                *row[13:15],
                *row[17:19],
                ("stored",) if row[18] else ("now", row[20]) if row[19] else (row[15], row[12]),
            )
            for row in rows
        ]
        return answer, conn.execute(ORACLE_WRITTEN, {"stored": STORED}).fetchone()


@pytest.fixture(scope="module")
def release_0024(pg_server: testing.Server) -> Iterator[str]:
    """A database at the release before the set-based add_nodes (0024, bulk_add_nodes)."""
    every = migrations.load_migrations()
    target = next(m.version for m in every if m.name == "bulk_add_nodes")
    name = testing.create_database(pg_server, prefix="prme_0024")
    with psycopg.connect(pg_server.dsn_for(name), autocommit=True) as conn:
        migrations.migrate(conn, [m for m in every if m.version <= target])
        conn.execute(ORACLE_SETUP)
    yield pg_server.dsn_for(name)
    testing.drop_database(pg_server, name)


def test_every_batch_gets_the_answer_of_the_release_before(release_0024: str, db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as new, psycopg.connect(release_0024, autocommit=True) as old:
        new.execute(ORACLE_SETUP)
        assert "_add_nodes_refusal" not in str(
            old.execute("SELECT prosrc FROM pg_proc WHERE proname = 'add_nodes'").fetchone()
        )
        kinds = set()
        for case, changes in ORACLE_CASES.items():
            items, numbers = _oracle_batch()
            for change in changes:
                change(items, numbers)
            expected = _oracle_answer(old, items, numbers)
            assert _oracle_answer(new, items, numbers) == expected, case
            kinds.add(expected[0] if isinstance(expected[0], str) else "ok")
    assert kinds == {"ok", "PR422", "PR409"}, "not vacuous: answers of every kind"


@pytest.mark.parametrize("model", [None, "m3"])
def test_a_dimensions_count_that_is_no_integer_names_its_item(db_dsn: str, model: str | None) -> None:
    """0024 read embedding_dimensions as an integer while fetching the items, ten at a time,
    so its error named no item (items[-1]); now it names the item that brought it."""
    items = [
        {"content": "x"},
        {"content": "y"},
        {"content": "z", "embedding_model": model, "embedding_dimensions": 3.5},
    ]
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("SELECT prme.register_embedding_model('m3', 3)")
        with pytest.raises(psycopg.Error, match=r'^items\[2\]: invalid input syntax for type integer: "3.5"') as caught:
            conn.execute("SELECT * FROM prme.add_nodes('alice', %s)", [psycopg.types.json.Jsonb(items)])
        assert caught.value.sqlstate == "PR422"
        assert conn.execute("SELECT count(*) FROM prme.nodes").fetchone() == (0,)


# Recall's words, computed by add_nodes in one pass (not by prme._recall_words per memory):
# the same search vector as add_node's for text that exercises every rule of the words.
HOSTILE_TEXTS = [
    "Tabs, TABS and tabs; the Editor's TABLES",
    "flies ties eies aies species berries: STUDIES of buses, gases, does, toes, shoes, bees, peas",
    "us bus gas glass class boss status virus axes taxes analyses",
    "a an the THE I me MY what's don't can't won't should've",
    "ÉCOLE Éclair ÜBER straße ΣΊΣΥΦΟΣ İstanbul ǅemal ﬁne Ⅻ",
    "em—dash en–dash “quotes” ‘single’ «guillemets» ¡hola! ¿qué? ×÷ §¶ ©®",  # noqa: RUF001
    "CJK、句読点。「括弧」 日本語の文章 中文，标点！",  # noqa: RUF001
    "zero\u200bwidth non\u00a0breaking\ufeffbom soft\u00adhyphen line\u2028sep",
    "tab\there new\nline cr\rlf form\ffeed vt\x0bvt bell\x07ring del\x7fdel c1\x85nel",
    "emoji 😀 tokens 👩‍👩‍👧 flags 🇫🇷 and e\u0301 combining",
    "digits 123 4567 3.14 1,000 v2.0 x86_64 a-b_c user@example.com https://x.io/a?b=c#d",
    "w" * 100 + " " + "v" * 101 + " " + "ies" + " " + "sss" + " ses" + " s",
    "   leading and trailing   ",
    "the of and to",  # stop words only: no words
    "...!!!???",  # punctuation only: no words
]


def _search_matches_add_node(conn: psycopg.Connection[Any], user_id: str, texts: list[str]) -> list[tuple[Any, ...]]:
    """The texts through add_nodes (rolled back): per text, whether its search vector is add_node's."""
    with conn.transaction(force_rollback=True):
        conn.execute(
            "SELECT count(*) FROM prme.add_nodes(%s, %s)",
            [user_id, psycopg.types.json.Jsonb([{"content": text} for text in texts])],
        )
        return conn.execute(
            "SELECT content, search = array_to_tsvector(prme._owner_lexemes(user_id, content)), length(search) "
            "FROM prme.nodes WHERE user_id = %s",
            [user_id],
        ).fetchall()


def test_a_batch_computes_recall_words_as_add_node_does(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        rows = _search_matches_add_node(conn, "Ünïcode owner", HOSTILE_TEXTS)
    assert len(rows) == len(HOSTILE_TEXTS) and all(row[1] for row in rows), [r[0] for r in rows if not r[1]]
    lengths = {row[0]: row[2] for row in rows}
    assert lengths["the of and to"] == lengths["...!!!???"] == 0
    assert sum(lengths.values()) > 100, "not vacuous"


_WORDS_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8", exclude_characters="\x00"),
        st.sampled_from(list("abcdefgh ABC tabs uses flies classes does the of, .-'\n\t")),
    ),
    max_size=80,
).filter(lambda text: text.strip(" \t\n\r\f\v") != "")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(_WORDS_TEXT, min_size=1, max_size=10))
def test_a_batch_computes_the_words_of_any_text_as_add_node_does(db_dsn: str, texts: list[str]) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        rows = _search_matches_add_node(conn, "alice", texts)
    assert len(rows) == len(texts) and all(row[1] for row in rows), [r[0] for r in rows if not r[1]]


def test_the_schema_cost_benchmark_batch_writes_its_memories(db_dsn: str) -> None:
    """bench/schema_cost_bench.py --workload add_nodes runs this script: it fits the schema."""
    script = (ROOT / "bench" / "pgbench" / "add_nodes_fresh.sql").read_text(encoding="utf-8")
    statement = script[script.index("SELECT") :].replace(":u::text", "'7'")
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        assert conn.execute(statement).fetchone() == (100,)
        assert conn.execute(statement).fetchone() == (100,)
        written = conn.execute(
            "SELECT count(*), count(DISTINCT e.node_id) FROM prme.nodes AS n"
            " JOIN prme.node_embeddings AS e ON (e.user_id, e.node_id) = (n.user_id, n.id) WHERE n.user_id = 'user_7'"
        ).fetchone()
        assert written == (200, 200)
        assert conn.execute("SELECT * FROM prme.verify_journal('user_7')").fetchall() == []


def test_a_node_id_another_call_creates_meanwhile_is_a_conflict_to_retry(db_dsn: str) -> None:
    """A batch that looked before another call committed one of its node ids waits for that
    call, then refuses with PR409 (nothing written); the retry answers that item as a replay."""
    raced, other = uuid.UUID(int=71), uuid.UUID(int=72)
    batch = psycopg.types.json.Jsonb(
        [{"content": "raced", "node_id": str(raced)}, {"content": "other", "node_id": str(other)}]
    )
    outcome: dict[str, Any] = {}

    def second() -> None:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            try:
                conn.execute("SELECT * FROM prme.add_nodes('alice', %s)", [batch])
            except psycopg.Error as exc:
                outcome["error"] = exc

    with psycopg.connect(db_dsn) as first, psycopg.connect(db_dsn, autocommit=True) as watcher:
        first.execute(
            "SELECT * FROM prme.add_nodes('alice', %s)",
            [psycopg.types.json.Jsonb([{"content": "raced", "node_id": str(raced)}])],
        )
        thread = threading.Thread(target=second)
        thread.start()
        waiting = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        deadline = time.monotonic() + 30
        while watcher.execute(waiting).fetchone() != (1,):
            assert time.monotonic() < deadline, "the second batch never waited for the first"
            time.sleep(0.05)
        first.commit()
        thread.join(30)
    error = outcome["error"]
    assert error.sqlstate == "PR409"
    assert error.diag.message_primary == "a concurrent call created one of these node_ids: retry the batch"
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM prme.nodes WHERE id = %s", [other]).fetchone() == (0,)
        retried = conn.execute("SELECT id, replayed FROM prme.add_nodes('alice', %s)", [batch]).fetchall()
        assert retried == [(raced, True), (other, False)]
        assert conn.execute("SELECT * FROM prme.verify_journal('alice')").fetchall() == []
