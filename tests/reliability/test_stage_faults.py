"""Issue 5, item 2: faults at each stage of prme.reinforce, and a response lost after commit.

A backend running reinforce is terminated (pg_terminate_backend, from another
connection) at each stage of the call, held there by a real lock of another session:

* ``row_lock``: waiting for the node's row lock (a superuser holds SELECT ... FOR UPDATE):
  reinforce reads without a lock, so it is its one writing statement (the node's UPDATE and
  the journal INSERT) that waits, holding both tables' RowExclusiveLock and no RowShareLock;
* ``key_claim``: the row locked and updated, waiting to claim its request key with its
  journal record (another transaction has an uncommitted journal record of another node
  carrying the same key: the unique index journal_request_key makes the call wait);
* ``journal_insert``: the node row already UPDATEd, waiting to insert its journal record
  (another transaction has an uncommitted INSERT of the same journal primary key, made
  with session_replication_role = replica so its foreign-key check takes no row lock);

The key is claimed by the journal record itself (no key row): each blocker conflicts with
exactly one statement.
* ``before_commit``: the whole call done inside an explicit transaction, not committed.

Each time the stage is proven from pg_locks (which relation locks the victim holds, and
that it waits for the blocker's transaction id), and afterwards: no change at all (every
prme table compared row by row), no key; the same call retried applies exactly once and
a second retry replays.

Then the response is lost after commit: a TCP proxy between psycopg and the server drops
the server's answer (whole, or after half of it has been delivered) and closes the
connection, so the client sees an error for a call that committed. The retry with the
same key is a replay (replayed = true) and the node counts the confirmation once. A
request cut in flight (delivered, then the connection closed before any answer) is the
indeterminate case: whichever way it went, the retry makes it count exactly once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from reliability_support import (
    Background,
    add_event,
    add_node,
    awaited_xid,
    backend_state,
    backend_xid,
    core_shape,
    cutting_proxy,
    journal_problems,
    reinforce,
    relation_locks,
    replay_all,
    snapshot,
    snapshot_diff,
    terminate,
    wait_until,
)

STAGES = ["row_lock", "key_claim", "journal_insert", "before_commit"]
#: The relation locks the victim held when it was terminated, per stage (printed with -s).
STAGE_LOCKS: dict[str, list[tuple[str, str]]] = {}


def _setup(conn: psycopg.Connection[Any]) -> tuple[uuid.UUID, uuid.UUID]:
    node = add_node(conn, "alice", "likes strong tea", scope="personal")
    event = add_event(conn, "alice", "said so again", scope="personal")
    reinforce(conn, node["id"], "alice", None, uuid.uuid4())  # a chain longer than one record
    add_node(conn, "bob", "bystander")
    return node["id"], event["id"]


def _expect_stage(
    watcher: psycopg.Connection[Any], pid: int, blocker_pid: int | None, holds: set[str], lacks: set[str]
) -> None:
    """Wait until the victim waits on the blocker's transaction holding exactly the stage's locks."""

    def at_stage() -> bool:
        if blocker_pid is None:
            if backend_state(watcher, pid) != "idle in transaction":
                return False
        elif awaited_xid(watcher, pid) is None or awaited_xid(watcher, pid) != backend_xid(watcher, blocker_pid):
            return False
        locks = relation_locks(watcher, pid)
        return all(lock in locks for lock in _locks(holds)) and not any(lock in locks for lock in _locks(lacks))

    wait_until(at_stage, what=f"backend {pid} to reach the stage (holding {holds}, not {lacks})")


def _locks(names: set[str]) -> set[tuple[str, str]]:
    mode = {"nodes_row_lock": ("nodes", "RowShareLock")}
    return {mode.get(name, (name, "RowExclusiveLock")) for name in names}


@pytest.mark.parametrize("stage", STAGES)
def test_terminated_backend_leaves_nothing_and_retry_counts_once(
    db_dsn: str, superuser: psycopg.Connection[Any], stage: str, figures: Any
) -> None:
    node_id, event_id = _setup(superuser)
    request_id = uuid.uuid4()
    before = snapshot(superuser)
    version = int(superuser.execute("SELECT version FROM prme.nodes WHERE id = %s", [node_id]).fetchone()[0])

    blocker = psycopg.connect(db_dsn)  # a transaction of its own, holding what the stage waits on
    victim = psycopg.connect(db_dsn, autocommit=stage != "before_commit")
    victim.execute("SET ROLE prme_app")
    if stage == "before_commit":
        victim.commit()
    pid = victim.info.backend_pid
    call: Callable[[], Any] = lambda: reinforce(victim, node_id, "alice", event_id, request_id)  # noqa: E731
    try:
        if stage == "row_lock":
            blocker.execute("SELECT * FROM prme.nodes WHERE user_id = 'alice' AND id = %s FOR UPDATE", [node_id])
            running = Background(call)
            _expect_stage(superuser, pid, blocker.info.backend_pid, {"nodes", "journal"}, {"nodes_row_lock"})
        elif stage == "key_claim":
            # A record of another node carrying the key, not committed: the victim's record waits on it.
            blocker.execute("SET LOCAL session_replication_role = replica")
            blocker.execute(
                "INSERT INTO prme.journal (user_id, node_id, node_version, record_version, op, operation_id, "
                "request_id, record, checksum, recorded_at, key_namespace) "
                "VALUES ('alice', %s, 1, 2, 'blocker', %s, %s, '{}', %s, now(), 'default')",
                [uuid.uuid4(), uuid.uuid4(), request_id, "0" * 64],
            )
            running = Background(call)
            _expect_stage(superuser, pid, blocker.info.backend_pid, {"nodes", "journal"}, {"nodes_row_lock"})
        elif stage == "journal_insert":
            blocker.execute("SET LOCAL session_replication_role = replica")
            blocker.execute(
                "INSERT INTO prme.journal (user_id, node_id, node_version, record_version, op, operation_id, "
                "record, checksum, recorded_at) VALUES ('alice', %s, %s, 2, 'blocker', %s, '{}', %s, now())",
                [node_id, version + 1, uuid.uuid4(), "0" * 64],
            )
            running = Background(call)
            # Holding RowExclusiveLock on nodes: the UPDATE has run, the journal INSERT waits.
            _expect_stage(superuser, pid, blocker.info.backend_pid, {"nodes", "journal"}, set())
        else:
            row = call()  # the call completes inside the victim's open transaction
            assert row["version"] == version + 1 and not row["replayed"]
            running = None
            _expect_stage(superuser, pid, None, {"nodes", "journal"}, {"request_keys"})
            assert (
                superuser.execute("SELECT count(*) FROM prme.journal WHERE request_id = %s", [request_id]).fetchone()[0]
                == 0
            )

        STAGE_LOCKS[stage] = sorted(relation_locks(superuser, pid))
        terminate(superuser, pid)
        if running is not None:
            running.join()
            assert isinstance(running.error, psycopg.OperationalError), running.error
        else:
            with pytest.raises(psycopg.OperationalError):
                victim.commit()
    finally:
        blocker.rollback()
        blocker.close()
        victim.close()

    # No change, no key: every row of every prme table as before.
    assert snapshot_diff(before, snapshot(superuser)) == {}

    first = reinforce(superuser, node_id, "alice", event_id, request_id)
    assert (first["version"], first["replayed"]) == (version + 1, False)
    assert first["evidence_refs"][-1] == event_id
    applied = snapshot(superuser)
    again = reinforce(superuser, node_id, "alice", event_id, request_id)
    assert (again["version"], again["replayed"]) == (version + 1, True)
    assert snapshot(superuser) == applied, "a replay wrote something"
    diff = snapshot_diff(before, applied)
    assert core_shape(diff) == {"nodes": (1, 1), "journal": (0, 1)}  # the record carries the key
    assert superuser.execute("SELECT count(*) FROM prme.journal WHERE request_id = %s", [request_id]).fetchone()[0] == 1
    assert journal_problems(superuser) == []
    _, records, bad = replay_all(superuser)
    assert bad == []
    print(f"\nstage {stage}: victim held {STAGE_LOCKS[stage]}")
    figures("2 stage faults", backends_terminated=1, retries_counted_once=1, records_verified=records)


@pytest.mark.parametrize("mode", ["response", "response_partial"])
@pytest.mark.parametrize("transaction", ["autocommit", "explicit"])
def test_response_lost_after_commit_retry_is_a_replay(
    db_dsn: str, superuser: psycopg.Connection[Any], mode: str, transaction: str, figures: Any
) -> None:
    node_id, event_id = _setup(superuser)
    request_id = uuid.uuid4()
    version = int(superuser.execute("SELECT version FROM prme.nodes WHERE id = %s", [node_id]).fetchone()[0])
    before = snapshot(superuser)

    with cutting_proxy(db_dsn) as proxy:
        client = psycopg.connect(proxy.dsn, autocommit=transaction == "autocommit")
        client.execute("SET ROLE prme_app")
        if transaction == "explicit":
            client.commit()
        try:
            if transaction == "autocommit":
                proxy.arm(mode)  # the answer to the call itself is lost; the call commits first
                with pytest.raises(psycopg.OperationalError):
                    reinforce(client, node_id, "alice", event_id, request_id)
            else:
                assert reinforce(client, node_id, "alice", event_id, request_id)["version"] == version + 1
                proxy.arm(mode)  # the answer to COMMIT is lost
                with pytest.raises(psycopg.OperationalError):
                    client.commit()
            assert proxy.fired.wait(5)
            assert proxy.dropped, "the proxy cut before the server answered"
        finally:
            client.close()

    # The client saw an error, yet the call committed: its key is there, counted once.
    assert superuser.execute(
        "SELECT node_version FROM prme.journal WHERE request_id = %s", [request_id]
    ).fetchall() == [(version + 1,)]
    committed = snapshot(superuser)
    retry = reinforce(superuser, node_id, "alice", event_id, request_id)
    assert retry["replayed"] is True
    assert retry["version"] == version + 1
    assert retry["evidence_refs"].count(event_id) == 1
    assert snapshot(superuser) == committed, "the replay wrote something"
    assert core_shape(snapshot_diff(before, committed)) == {"nodes": (1, 1), "journal": (0, 1)}
    assert journal_problems(superuser) == []
    assert replay_all(superuser)[2] == []
    figures("2 stage faults", responses_lost_after_commit=1, retries_replayed=1)


def test_request_cut_in_flight_counts_exactly_once(
    db_dsn: str, superuser: psycopg.Connection[Any], figures: Any
) -> None:
    """The request reaches the server (whole, or half of it), the connection dies before any
    answer: the client cannot know the outcome, and the retry makes it count once either way."""
    node_id, event_id = _setup(superuser)
    version = int(superuser.execute("SELECT version FROM prme.nodes WHERE id = %s", [node_id]).fetchone()[0])
    committed = 0
    attempts = 6
    with cutting_proxy(db_dsn) as proxy:
        for attempt in range(attempts):
            request_id = uuid.uuid4()
            client = psycopg.connect(proxy.dsn, autocommit=True)
            try:
                proxy.arm("request" if attempt % 2 else "request_partial")
                with pytest.raises(psycopg.OperationalError):
                    reinforce(client, node_id, "alice", event_id, request_id)
            finally:
                client.close()
            # The server may still be finishing the call: wait until its backend is gone.
            wait_until(
                lambda: (
                    superuser.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
                    ).fetchone()[0]
                    == 0
                ),
                what="the cut backend to exit",
            )
            was_committed = (
                superuser.execute("SELECT count(*) FROM prme.journal WHERE request_id = %s", [request_id]).fetchone()[0]
                == 1
            )
            committed += was_committed
            retry = reinforce(superuser, node_id, "alice", event_id, request_id)
            assert retry["replayed"] is was_committed
            version += 1
            assert retry["version"] == version
            assert reinforce(superuser, node_id, "alice", event_id, request_id)["replayed"] is True
    assert superuser.execute(
        "SELECT count(*) FROM prme.journal WHERE node_id = %s AND op = 'reinforce'", [node_id]
    ).fetchone()[0] == (attempts + 1)
    assert journal_problems(superuser) == []
    assert replay_all(superuser)[2] == []
    assert 0 < committed < attempts, "both outcomes (whole request: committed; half: not) were exercised"
    figures("2 stage faults", requests_cut_in_flight=attempts, cut_requests_found_committed=committed)
