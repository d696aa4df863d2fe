"""prme.reinforce under real concurrency, and transactions that abort.

Each thread has its own connection: the races below are PostgreSQL's row lock,
the journal's key index (journal_request_key) and the key's advisory lock at
work, not anything in Python.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from .racing import race

THREADS = 16


def _add_node(conn: psycopg.Connection[Any], user_id: str = "alice", **kwargs: Any) -> uuid.UUID:
    columns = ", ".join(f"{k} => %({k})s" for k in kwargs)
    row = conn.execute(
        f"SELECT id FROM prme.add_node(user_id => %(user_id)s, content => 'prefers tabs'"
        f"{', ' if columns else ''}{columns})",
        {"user_id": user_id, **kwargs},
    ).fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


def _reinforce(
    node_id: uuid.UUID, request_id: uuid.UUID | None, user_id: str = "alice"
) -> Callable[[psycopg.Connection[Any]], dict[str, Any]]:
    def call(conn: psycopg.Connection[Any]) -> dict[str, Any]:
        with conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(
                "SELECT * FROM prme.reinforce(node_id => %s, user_id => %s, request_id => %s)",
                (node_id, user_id, request_id),
            ).fetchone()
        assert row is not None
        return row

    return call


def _counts(conn: psycopg.Connection[Any], node_id: uuid.UUID) -> tuple[int, int, int]:
    row = conn.execute(
        "SELECT (SELECT version FROM prme.nodes WHERE id = %(n)s),"
        " (SELECT count(*) FROM prme.journal WHERE node_id = %(n)s AND op = 'reinforce'),"
        " (SELECT count(*) FROM prme.journal WHERE node_id = %(n)s AND request_id IS NOT NULL)",
        {"n": node_id},
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def _assert_journal_sound(conn: psycopg.Connection[Any], node_id: uuid.UUID) -> None:
    assert conn.execute("SELECT * FROM prme.verify_journal('alice')").fetchall() == []
    replay = conn.execute("SELECT matches, problem FROM prme.replay_node('alice', %s)", (node_id,)).fetchone()
    assert replay == (True, None)


def test_same_key_from_16_connections_counts_once(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    node_id = _add_node(conn)
    key = uuid.uuid4()
    results = race(db_dsn, [_reinforce(node_id, key)] * THREADS)

    assert all(isinstance(r, dict) for r in results), results
    rows = [r for r in results if isinstance(r, dict)]
    assert sum(not r["replayed"] for r in rows) == 1
    assert {(r["version"], r["reinforcement_boost"], r["confidence_base"]) for r in rows} == {
        (2, Decimal("0.1500"), Decimal("0.5500"))
    }
    assert _counts(conn, node_id) == (2, 1, 1)
    _assert_journal_sound(conn, node_id)


def test_distinct_keys_from_16_connections_all_count_within_caps(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    node_id = _add_node(conn, confidence_base=Decimal("0.3"))
    results = race(db_dsn, [_reinforce(node_id, uuid.uuid4()) for _ in range(THREADS)])

    assert all(isinstance(r, dict) and not r["replayed"] for r in results), results
    node = conn.execute(
        "SELECT version, reinforcement_boost, confidence_base FROM prme.nodes WHERE id = %s",
        (node_id,),
    ).fetchone()
    # 16 confirmations: boost 0 -> capped at 0.5, confidence 0.3 -> capped at 0.95.
    assert node == (1 + THREADS, Decimal("0.5000"), Decimal("0.9500"))
    assert _counts(conn, node_id) == (1 + THREADS, THREADS, THREADS)
    versions = sorted(r["version"] for r in results if isinstance(r, dict))
    assert versions == list(range(2, 2 + THREADS))
    _assert_journal_sound(conn, node_id)


def test_calls_without_key_always_count(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    node_id = _add_node(conn)
    results = race(db_dsn, [_reinforce(node_id, None)] * THREADS)
    assert all(isinstance(r, dict) for r in results), results
    assert _counts(conn, node_id) == (1 + THREADS, THREADS, 0)
    _assert_journal_sound(conn, node_id)


def test_one_key_raced_onto_different_nodes_binds_to_exactly_one(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    nodes = [_add_node(conn) for _ in range(THREADS)]
    key = uuid.uuid4()
    results = race(db_dsn, [_reinforce(n, key) for n in nodes])

    winners = [r for r in results if isinstance(r, dict)]
    losers = [r for r in results if not isinstance(r, dict)]
    assert len(winners) == 1 and not winners[0]["replayed"]
    assert all(isinstance(e, psycopg.Error) and e.sqlstate == "PR409" for e in losers), losers
    assert conn.execute("SELECT count(*) FROM prme.journal WHERE request_id = %s", [key]).fetchone() == (1,)
    assert conn.execute("SELECT count(*) FROM prme.journal WHERE op = 'reinforce'").fetchone() == (1,)


def _record_outcome(node_id: uuid.UUID, request_id: uuid.UUID) -> Callable[[psycopg.Connection[Any]], dict[str, Any]]:
    def call(conn: psycopg.Connection[Any]) -> dict[str, Any]:
        with conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(
                "SELECT * FROM prme.record_outcome('alice', %s, 'implicit_success', request_id => %s)",
                (node_id, request_id),
            ).fetchone()
        assert row is not None
        return row

    return call


def test_one_key_raced_by_reinforce_and_record_outcome_binds_to_exactly_one(
    conn: psycopg.Connection[Any], db_dsn: str
) -> None:
    """A confirmation's key is its journal record, record_outcome's a request_keys row: two
    places, one key space. The key's advisory lock lets exactly one kind of call have it."""
    for _ in range(4):
        nodes = [_add_node(conn) for _ in range(THREADS)]
        key = uuid.uuid4()
        calls = [_reinforce(n, key) if i % 2 else _record_outcome(n, key) for i, n in enumerate(nodes)]
        results = race(db_dsn, calls)

        winners = [r for r in results if isinstance(r, dict)]
        losers = [r for r in results if not isinstance(r, dict)]
        assert len(winners) == 1 and not winners[0]["replayed"], results
        assert all(isinstance(e, psycopg.Error) and e.sqlstate == "PR409" for e in losers), losers
        written = conn.execute(
            "SELECT (SELECT count(*) FROM prme.journal WHERE request_id = %(k)s)"
            " + (SELECT count(*) FROM prme.request_keys WHERE request_id = %(k)s)",
            {"k": key},
        ).fetchone()
        assert written == (1,)


def test_aborted_transaction_leaves_no_key(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    node_id = _add_node(conn)
    key = uuid.uuid4()
    with psycopg.connect(db_dsn) as tx:
        row = _reinforce(node_id, key)(tx)
        assert row["version"] == 2 and not row["replayed"]
        tx.rollback()
    assert _counts(conn, node_id) == (1, 0, 0)

    retry = _reinforce(node_id, key)(conn)
    assert retry["version"] == 2 and not retry["replayed"], "the key must not survive the rollback"
    assert _reinforce(node_id, key)(conn)["replayed"]
    assert _counts(conn, node_id) == (2, 1, 1)


def test_failed_call_inside_a_transaction_leaves_nothing(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    """An error after the key was claimed (here: foreign evidence) rolls the claim back."""
    node_id = _add_node(conn)
    foreign_event = conn.execute("SELECT id FROM prme.add_event('bob', 'yes')").fetchone()
    assert foreign_event is not None
    key = uuid.uuid4()
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(
            "SELECT * FROM prme.reinforce(node_id => %s, user_id => 'alice', evidence_id => %s, request_id => %s)",
            (node_id, foreign_event[0], key),
        )
    assert caught.value.sqlstate == "PR404"
    assert _counts(conn, node_id) == (1, 0, 0)


def test_a_change_between_read_and_write_makes_the_call_read_again(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    """reinforce reads the node without a lock and writes it only if it is still the version it
    read. Here another confirmation holds the node's row (uncommitted) while the call reads it:
    the call's write waits for that commit, sees a newer version, writes nothing, and starts again
    from the new version, so both count and its record chains to the other's."""
    node_id = _add_node(conn)
    holder = psycopg.connect(db_dsn)
    try:
        holder.execute("SELECT prme.reinforce(%s, 'alice')", (node_id,))  # version 2, not committed
        waiting: dict[str, Any] = {}

        def call() -> None:
            with psycopg.connect(db_dsn, autocommit=True) as other:
                waiting["pid"] = other.info.backend_pid
                waiting["row"] = _reinforce(node_id, uuid.uuid4())(other)

        thread = threading.Thread(target=call)
        thread.start()
        # The call has read version 1 and waits for the holder's row lock with its UPDATE.
        for _ in range(200):
            pid = waiting.get("pid")
            if pid and conn.execute(
                "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone() == (True,):
                break
            threading.Event().wait(0.05)
        else:
            pytest.fail("the call never waited for the holder's row lock")
        holder.commit()
        thread.join(timeout=30)
    finally:
        holder.close()
    assert waiting["row"]["version"] == 3 and waiting["row"]["replayed"] is False
    assert waiting["row"]["reinforcement_boost"] == Decimal("0.3")
    assert _counts(conn, node_id) == (3, 2, 1)
    chain = conn.execute(
        "SELECT node_version, prev_checksum = lag(checksum) OVER (ORDER BY node_version)"
        " FROM prme.journal WHERE node_id = %s ORDER BY node_version",
        (node_id,),
    ).fetchall()
    assert chain == [(1, None), (2, True), (3, True)]
    _assert_journal_sound(conn, node_id)
