"""add_nodes: a batch of memories in one transaction, each exactly as add_node writes it
(docs/IMPORT.md). PostgreSQL here; the pack's batch in tests/test_add_nodes_pack.py."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from prme_pg import MemoryClient, testing
from prme_pg.errors import IdempotencyConflict, InvalidInput

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
