"""Issue 5, item 6: tampering with the journal is evident.

A superuser can get past the journal's append-only triggers (ALTER TABLE ... DISABLE
TRIGGER, or SET session_replication_role = replica). Each case below edits, deletes,
reorders, truncates, forges or transplants journal rows that way, inside a transaction
that is rolled back afterwards, and asserts the exact set of problems
prme.verify_journal reports, each naming the record (node_id, node_version) and the kind
of break (checksum_mismatch, chain_break, continuity_break, version_gap,
column_mismatch, head_mismatch, malformed_record, node_missing), and which nodes
prme.replay_node no longer matches. What no check inside the database can see (a node and
its whole chain deleted, a chain rewritten consistently) a journal head taken before
(prme_pg.journal.JournalHead, kept outside) reveals: the last test.

Fixture data (owner alice unless noted), versions in brackets:
  A: create [1], reinforce with evidence and key [2], reinforce with key [3], reinforce [4]
  B: create [1], reinforce [2], archive [3]
  C: create [1]
  D (bob): create [1], reinforce [2]
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from reliability_support import add_event, add_node, journal_count, journal_problems, reinforce, replay_all

from prme_pg.backends import journal_rows
from prme_pg.journal import JournalHead, journal_head, verify_against, verify_records
from prme_pg.models import JournalRecord, NodeHead

# A node-state edit that breaks additive_caps_v1: confidence_base jumps to 0.9.
EDIT_AFTER = 'regexp_replace(record, \'^\\{"after":\\{"confidence_base":[0-9.]+\', \'{"after":{"confidence_base":0.9\')'
REHASH = "encode(sha256(convert_to({}, 'UTF8')), 'hex')"
REWRITE = "replace(record, 'never archived', 'rewritten')"


@dataclass(frozen=True)
class Case:
    name: str
    statements: list[str]
    problems: set[tuple[str, int, str]]
    replay_fails: set[str]
    bob_problems: set[tuple[str, int, str]] = field(default_factory=set)
    disable: str = "replication_role"  # or "trigger": ALTER TABLE ... DISABLE TRIGGER USER


J = "prme.journal"
AT = "user_id = %(alice)s AND node_id = %(A)s AND node_version = {}"

CASES = [
    Case(
        "edit record text (journal triggers disabled with ALTER TABLE)",
        [f"UPDATE {J} SET record = {EDIT_AFTER} WHERE {AT.format(2)}"],
        {("A", 2, "checksum_mismatch"), ("A", 3, "continuity_break")},
        {"A"},
        disable="trigger",
    ),
    Case(
        "edit record text and recompute its checksum",
        [f"UPDATE {J} SET record = {EDIT_AFTER}, checksum = {REHASH.format(EDIT_AFTER)} WHERE {AT.format(2)}"],
        {("A", 3, "chain_break"), ("A", 3, "continuity_break")},
        {"A"},
    ),
    Case(
        "edit the newest record and recompute its checksum",
        [f"UPDATE {J} SET record = {EDIT_AFTER}, checksum = {REHASH.format(EDIT_AFTER)} WHERE {AT.format(4)}"],
        {("A", 4, "head_mismatch")},
        {"A"},
    ),
    Case(
        "edit the checksum column only",
        [f"UPDATE {J} SET checksum = {REHASH.format(repr('forged'))} WHERE {AT.format(2)}"],
        {("A", 2, "checksum_mismatch"), ("A", 3, "chain_break")},
        set(),  # the record texts still replay to the stored row: only verify_journal sees this
    ),
    Case(
        "edit an indexed column (request_id) so the row disagrees with its record",
        [f"UPDATE {J} SET request_id = gen_random_uuid() WHERE {AT.format(2)}"],
        {("A", 2, "column_mismatch")},
        set(),
    ),
    Case(
        "edit an indexed column (op)",
        [f"UPDATE {J} SET op = 'create' WHERE {AT.format(3)}"],
        {("A", 3, "column_mismatch")},
        set(),
    ),
    Case(
        "delete a middle record",
        [f"DELETE FROM {J} WHERE {AT.format(2)}"],
        {("A", 3, "version_gap"), ("A", 3, "chain_break"), ("A", 3, "continuity_break")},
        {"A"},
    ),
    Case(
        "delete the newest record",
        [f"DELETE FROM {J} WHERE {AT.format(4)}"],
        {("A", 4, "head_mismatch")},
        {"A"},
    ),
    Case(
        "delete the create record",
        [f"DELETE FROM {J} WHERE {AT.format(1)}"],
        {("A", 2, "version_gap"), ("A", 2, "chain_break"), ("A", 2, "continuity_break")},
        {"A"},
    ),
    Case(
        "truncate the journal",
        ["TRUNCATE prme.journal CASCADE"],  # request_keys, and whatever else cites records, go too
        {("A", 4, "head_mismatch"), ("B", 3, "head_mismatch"), ("C", 1, "head_mismatch")},
        {"A", "B", "C", "D"},
        bob_problems={("D", 2, "head_mismatch")},
    ),
    Case(
        "reorder two records (swap their node_version)",
        [
            f"UPDATE {J} SET node_version = 1000 WHERE {AT.format(2)}",
            f"UPDATE {J} SET node_version = 2 WHERE {AT.format(3)}",
            f"UPDATE {J} SET node_version = 3 WHERE {AT.format(1000)}",
        ],
        {
            ("A", 2, "column_mismatch"),
            ("A", 2, "continuity_break"),
            ("A", 2, "chain_break"),
            ("A", 3, "column_mismatch"),
            ("A", 3, "continuity_break"),
            ("A", 3, "chain_break"),
            ("A", 4, "continuity_break"),
            ("A", 4, "chain_break"),
        },
        {"A"},
    ),
    Case(
        "transplant a record onto another node",
        [f"UPDATE {J} SET node_id = %(C)s, node_version = 2 WHERE {AT.format(4)}"],
        {
            ("A", 4, "head_mismatch"),
            ("C", 2, "column_mismatch"),
            ("C", 2, "continuity_break"),
            ("C", 2, "chain_break"),
            ("C", 1, "head_mismatch"),
        },
        {"A", "C"},
    ),
    Case(
        "replace a record with text that is not JSON (checksum recomputed)",
        [f"UPDATE {J} SET record = 'not json', checksum = {REHASH.format(repr('not json'))} WHERE {AT.format(2)}"],
        {("A", 2, "malformed_record"), ("A", 3, "chain_break"), ("A", 3, "continuity_break")},
        {"A"},
    ),
    Case(
        "replace a record with a JSON array (checksum recomputed)",
        [f"UPDATE {J} SET record = '[1]', checksum = {REHASH.format(repr('[1]'))} WHERE {AT.format(2)}"],
        {("A", 2, "malformed_record"), ("A", 3, "chain_break"), ("A", 3, "continuity_break")},
        {"A"},
    ),
    Case(
        "append a forged, correctly chained and hashed record",
        [
            f"""INSERT INTO {J} (user_id, node_id, node_version, record_version, op, operation_id, record,
                checksum, prev_checksum, recorded_at)
            SELECT j.user_id, j.node_id, 5, 2, 'archive', f.operation_id, f.record,
                encode(sha256(convert_to(f.record, 'UTF8')), 'hex'), j.checksum, j.recorded_at
            FROM {J} AS j,
            LATERAL (SELECT gen_random_uuid() AS operation_id) AS o,
            LATERAL (SELECT jsonb_build_object(
                'version', 2, 'op', 'archive', 'policy', NULL, 'operation_id', o.operation_id,
                'request_id', NULL, 'user_id', j.user_id, 'node_id', j.node_id, 'evidence_id', NULL,
                'before', j.record::jsonb -> 'after',
                'after', (j.record::jsonb -> 'after') || '{{"version": 5, "lifecycle_state": "archived"}}',
                'prev_checksum', j.checksum, 'recorded_at', j.record::jsonb -> 'recorded_at')::text AS record,
                o.operation_id) AS f
            WHERE j.{AT.format(4)}"""
        ],
        {("A", 4, "head_mismatch")},
        {"A"},
    ),
    Case(
        "edit the node row, not the journal",
        ["UPDATE prme.nodes SET confidence_base = 0.95 WHERE user_id = %(alice)s AND id = %(A)s"],
        set(),  # verify_journal checks records and heads; the row's state is replay_node's job
        {"A"},
    ),
    Case(
        "delete a node row (its journal stays)",
        ["DELETE FROM prme.nodes WHERE user_id = %(alice)s AND id = %(A)s"],
        {("A", 4, "node_missing")},
        set(),  # A is gone, so not replayed; the others are untouched
    ),
    Case(
        "delete a node row and its journal together",
        [
            f"DELETE FROM {J} WHERE user_id = %(alice)s AND node_id = %(C)s",
            "DELETE FROM prme.nodes WHERE user_id = %(alice)s AND id = %(C)s",
        ],
        set(),  # nothing inside is left to disagree: an anchored head catches it (test below)
        set(),
    ),
    Case(
        "LIMIT: rewrite a chain's tail and the node row consistently",
        [
            f"UPDATE {J} SET record = {REWRITE}, checksum = {REHASH.format(REWRITE)} "
            "WHERE user_id = %(alice)s AND node_id = %(C)s",
            "UPDATE prme.nodes AS n SET content = 'rewritten', last_checksum = j.checksum FROM prme.journal AS j "
            "WHERE n.user_id = %(alice)s AND n.id = %(C)s AND j.user_id = n.user_id AND j.node_id = n.id",
        ],
        set(),  # undetectable from inside the database: an anchored head catches it (test below)
        set(),
    ),
]


@pytest.fixture(scope="module")
def journal_db(module_db: str) -> Iterator[tuple[psycopg.Connection[Any], dict[str, Any]]]:
    with psycopg.connect(module_db, autocommit=True) as conn:
        ids: dict[str, Any] = {"alice": "alice", "bob": "bob"}
        event = add_event(conn, "alice", "the user said it twice")
        ids["A"] = add_node(conn, "alice", "prefers tea")["id"]
        reinforce(conn, ids["A"], "alice", event["id"], uuid.uuid4())
        reinforce(conn, ids["A"], "alice", None, uuid.uuid4())
        reinforce(conn, ids["A"], "alice")
        ids["B"] = add_node(conn, "alice", "lives in Lyon")["id"]
        reinforce(conn, ids["B"], "alice")
        conn.execute("SELECT prme.archive_node('alice', %s)", [ids["B"]])
        ids["C"] = add_node(conn, "alice", "never archived")["id"]
        ids["D"] = add_node(conn, "bob", "bob's own")["id"]
        reinforce(conn, ids["D"], "bob")
        yield conn, ids


def _labelled(problems: list[tuple[Any, ...]], labels: dict[Any, str]) -> set[tuple[str, int, str]]:
    return {(labels[node_id], int(version), problem) for _, node_id, version, problem, _ in problems}


def test_journal_refuses_changes_while_its_triggers_are_on(
    journal_db: tuple[psycopg.Connection[Any], dict[str, Any]],
) -> None:
    conn, ids = journal_db
    for statement in (
        f"UPDATE {J} SET op = op WHERE {AT.format(1)}",
        f"DELETE FROM {J} WHERE {AT.format(1)}",
        "TRUNCATE prme.journal CASCADE",
    ):
        with pytest.raises(psycopg.Error) as error:
            conn.execute(statement, ids)
        assert error.value.sqlstate == "PR422", statement
    assert journal_problems(conn) == []


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_tampering_is_named(
    journal_db: tuple[psycopg.Connection[Any], dict[str, Any]], case: Case, figures: Any
) -> None:
    conn, ids = journal_db
    labels = {ids[label]: label for label in "ABCD"}
    assert journal_problems(conn) == []
    _, records, bad = replay_all(conn)
    assert bad == []

    with conn.transaction(force_rollback=True):
        if case.disable == "trigger":
            conn.execute("ALTER TABLE prme.journal DISABLE TRIGGER USER")
        else:
            conn.execute("SET LOCAL session_replication_role = replica")
        for statement in case.statements:
            assert conn.execute(statement, ids).rowcount != 0, statement  # -1: TRUNCATE
        conn.execute("SET LOCAL session_replication_role = origin")

        alice = journal_problems(conn, ["alice"])
        bob = journal_problems(conn, ["bob"])
        replays = {
            labels[node_id]: conn.execute(
                "SELECT matches, problem FROM prme.replay_node(%s, %s)", [user, node_id]
            ).fetchone()
            for user, node_id in conn.execute("SELECT user_id, id FROM prme.nodes")
        }
        tampered_records = journal_count(conn)

    assert _labelled(alice, labels) == case.problems
    assert _labelled(bob, labels) == case.bob_problems
    assert all(detail for *_, detail in alice + bob), "every problem explains itself"
    failing = {label for label, (matches, _) in replays.items() if not matches}
    assert failing == case.replay_fails, replays
    for label in failing:
        assert replays[label][1], f"replay of {label} fails without saying why"

    # Rolled back: the journal verifies again.
    assert journal_problems(conn) == []
    figures(
        "6 tamper evidence",
        tampering_cases=1,
        problems_named=len(alice) + len(bob),
        replays_refused=len(failing),
        records_verified=records + tampered_records,
    )


ANCHORED = {  # case name: what verify_against reports for alice, labelled
    "delete a node row (its journal stays)": set(),
    "delete a node row and its journal together": {("C", 1, "anchor_missing")},
    "LIMIT: rewrite a chain's tail and the node row consistently": {("C", 1, "anchor_mismatch")},
    "delete the newest record": {("A", 4, "anchor_missing")},
}


def _journal(conn: psycopg.Connection[Any], user_id: str) -> tuple[list[JournalRecord], list[NodeHead]]:
    rows = conn.execute("SELECT * FROM prme.journal_records(%s)", [user_id]).fetchall()
    return journal_rows(user_id, rows)


@pytest.mark.parametrize("name", list(ANCHORED))
def test_a_head_taken_before_reveals_what_the_database_cannot(
    journal_db: tuple[psycopg.Connection[Any], dict[str, Any]], name: str
) -> None:
    """The head is taken from the untouched journal and kept outside (a document); after the
    tampering, the independent verifier and the head together name every loss."""
    conn, ids = journal_db
    labels = {ids[label]: label for label in "ABCD"}
    records, nodes = _journal(conn, "alice")
    assert verify_records(records, nodes) == []
    kept = json.dumps(journal_head("alice", records).to_document())
    case = next(case for case in CASES if case.name == name)
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL session_replication_role = replica")
        for statement in case.statements:
            conn.execute(statement, ids)
        records, nodes = _journal(conn, "alice")
        independent = verify_records(records, nodes)
        anchored = verify_against(JournalHead.from_document(json.loads(kept)), records)
    assert {(labels[i.node_id], i.node_version, i.problem) for i in independent} == case.problems
    assert {(labels[i.node_id], i.node_version, i.problem) for i in anchored} == ANCHORED[name]
    if name.startswith("delete a node row ("):  # the chain is exported without its node
        assert {r.node_id for r in records} >= {ids["A"]} and ids["A"] not in {n.node_id for n in nodes}
