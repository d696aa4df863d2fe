"""Journal records checked from outside PostgreSQL, with Python's own RFC 8785.

These tests do not trust the database's verifier: they re-canonicalise each
stored record with the ``rfc8785`` package and re-hash it with hashlib.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

import psycopg
import rfc8785

ALICE_NODE = uuid.UUID("00000000-0000-4000-8000-000000000001")
EVIDENCE = uuid.UUID("00000000-0000-4000-8000-0000000000e1")


def _canonical(text: str) -> str:
    return rfc8785.dumps(json.loads(text)).decode("utf-8")


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_records_are_rfc8785_canonical_and_hashed_as_stored(conn: psycopg.Connection[Any]) -> None:
    # Content that stresses string escaping: quotes, backslash, control chars, non-ASCII, emoji.
    content = 'tabs "not" spaces \\ \t\n\x01 ünïcode \u2028 \U0001f600 \u05d0\u05d1'
    conn.execute("SET TIME ZONE 'America/St_Johns'")
    conn.execute("SET DateStyle = 'SQL, DMY'")
    conn.execute("SET extra_float_digits = 3")
    conn.execute(
        "SELECT prme.add_node(user_id => 'alice', content => %s, node_id => %s, confidence_base => 0.7,"
        " next_review_at => '2027-01-02 03:04:05.5+02')",
        (content, ALICE_NODE),
    )
    conn.execute("SELECT prme.add_event(user_id => 'alice', content => 'yes', event_id => %s)", (EVIDENCE,))
    for _ in range(3):
        conn.execute(
            "SELECT prme.reinforce(node_id => %s, user_id => 'alice', evidence_id => %s, request_id => %s)",
            (ALICE_NODE, EVIDENCE, uuid.uuid4()),
        )
    conn.execute("SELECT prme.archive_node('alice', %s)", (ALICE_NODE,))

    rows = conn.execute(
        "SELECT record, checksum, prev_checksum FROM prme.journal WHERE node_id = %s ORDER BY node_version",
        (ALICE_NODE,),
    ).fetchall()
    assert [json.loads(r[0])["op"] for r in rows] == [
        "create",
        "reinforce",
        "reinforce",
        "reinforce",
        "archive",
    ]
    previous = None
    for record, checksum, prev_checksum in rows:
        assert _canonical(record) == record
        assert _sha256(record) == checksum
        assert prev_checksum == previous == json.loads(record)["prev_checksum"]
        previous = checksum
    last = json.loads(rows[-1][0])["after"]
    assert last["content"] == content
    assert last["next_review_at"] == "2027-01-02T01:04:05.500000Z"
    assert last["confidence_base"] == 0.85 and last["reinforcement_boost"] == 0.45
    assert last["evidence_refs"] == [str(EVIDENCE)] * 3


def _v1_record(created: str, state: dict[str, Any]) -> str:
    """A version 1 record as an older release wrote it: no request_id, no prev_checksum."""
    return rfc8785.dumps(
        {
            "version": 1,
            "op": "create",
            "policy": None,
            "operation_id": "00000000-0000-4000-8000-0000000000a1",
            "user_id": "alice",
            "node_id": str(ALICE_NODE),
            "evidence_id": None,
            "before": None,
            "after": state,
            "recorded_at": created,
        }
    ).decode("utf-8")


def test_v1_record_stays_verifiable_and_v2_chains_onto_it(conn: psycopg.Connection[Any]) -> None:
    created = "2024-05-06T07:08:09.123456Z"
    state = {
        "confidence_base": 0.6,
        "content": "prefers tabs",
        "created_at": created,
        "decay_profile": "medium",
        "evidence_refs": [],
        "id": str(ALICE_NODE),
        "kind": "fact",
        "last_reinforced_at": None,
        "lifecycle_state": "active",
        "namespace": "default",
        "next_review_at": None,
        "reinforcement_boost": 0,
        "salience_base": 0.5,
        "scope": "personal",
        "stability": "low",
        "updated_at": created,
        "user_id": "alice",
        "version": 1,
    }
    record = _v1_record(created, state)
    checksum = _sha256(record)
    # Written directly, in the v1 layout, as the older release left it.
    conn.execute(
        "INSERT INTO prme.nodes (id, user_id, content, confidence_base, created_at, updated_at, version, last_checksum)"
        " VALUES (%s, 'alice', 'prefers tabs', 0.6, %s, %s, 1, %s)",
        (ALICE_NODE, created, created, checksum),
    )
    conn.execute(
        "INSERT INTO prme.journal (user_id, node_id, node_version, record_version, op, operation_id, record,"
        " checksum, recorded_at) VALUES ('alice', %s, 1, 1, 'create', '00000000-0000-4000-8000-0000000000a1',"
        " %s, %s, %s)",
        (ALICE_NODE, record, checksum, created),
    )
    assert conn.execute("SELECT * FROM prme.verify_journal('alice')").fetchall() == []

    conn.execute(
        "SELECT prme.reinforce(node_id => %s, user_id => 'alice', request_id => %s)",
        (ALICE_NODE, uuid.uuid4()),
    )
    rows = conn.execute(
        "SELECT record_version, record, checksum, prev_checksum FROM prme.journal ORDER BY node_version"
    ).fetchall()
    assert rows[0] == (1, record, checksum, None), "the v1 record is untouched"
    assert rows[1][0] == 2 and rows[1][3] == checksum, "the first v2 record links to the v1 checksum"
    assert json.loads(rows[1][1])["before"] == state
    assert conn.execute("SELECT * FROM prme.verify_journal('alice')").fetchall() == []
    assert conn.execute("SELECT matches FROM prme.replay_node('alice', %s)", (ALICE_NODE,)).fetchone() == (True,)

    # A v1 record whose text changed is still caught by its own checksum.
    conn.execute("ALTER TABLE prme.journal DISABLE TRIGGER journal_append_only")
    conn.execute("UPDATE prme.journal SET record = replace(record, '0.6', '0.7') WHERE record_version = 1")
    problems = {r[2] for r in conn.execute("SELECT * FROM prme.verify_journal('alice')").fetchall()}
    assert "checksum_mismatch" in problems
