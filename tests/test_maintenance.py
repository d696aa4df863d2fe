"""Outcomes, correction linking and maintenance patches under real concurrency.

Each racing call runs on its own connection, released together by a barrier:
what is tested is PostgreSQL's row locks, the request_keys primary key and the
op row locks of prme.apply_patch, not anything in Python. The rules themselves
are proven by tests/pgtap/test_outcomes.sql and test_maintenance.sql.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.rows import dict_row

from prme_pg import migrations, testing

from .correction_phrases import phrases
from .racing import race

THREADS = 16
Row = dict[str, Any]


def _rows(conn: psycopg.Connection[Any], query: str, *args: Any) -> list[Row]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query, args).fetchall()


def _one(conn: psycopg.Connection[Any], query: str, *args: Any) -> Any:
    row = conn.execute(query, args).fetchone()
    assert row is not None
    return row[0]


def _add_node(
    conn: psycopg.Connection[Any], user_id: str = "alice", content: str = "prefers tabs", **kw: Any
) -> uuid.UUID:
    named = "".join(f", {k} => %({k})s" for k in kw)
    row = conn.execute(
        f"SELECT id FROM prme.add_node(user_id => %(user_id)s, content => %(content)s{named})",
        {"user_id": user_id, "content": content, **kw},
    ).fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


def _record(
    node_id: uuid.UUID, outcome: str, request_id: uuid.UUID | None = None, notes: str | None = None
) -> Callable[[psycopg.Connection[Any]], Row]:
    def call(conn: psycopg.Connection[Any]) -> Row:
        return _rows(
            conn,
            "SELECT * FROM prme.record_outcome(user_id => 'alice', node_id => %s, outcome => %s, notes => %s,"
            " request_id => %s)",
            node_id,
            outcome,
            notes,
            request_id,
        )[0]

    return call


def _reinforce(node_id: uuid.UUID, request_id: uuid.UUID | None) -> Callable[[psycopg.Connection[Any]], Row]:
    def call(conn: psycopg.Connection[Any]) -> Row:
        return _rows(conn, "SELECT * FROM prme.reinforce(%s, 'alice', request_id => %s)", node_id, request_id)[0]

    return call


def _apply(patch_id: uuid.UUID, op_ids: list[str] | None, mode: str) -> Callable[[psycopg.Connection[Any]], list[Row]]:
    def call(conn: psycopg.Connection[Any]) -> list[Row]:
        return _rows(conn, "SELECT * FROM prme.apply_patch('alice', %s, %s, %s)", patch_id, op_ids, mode)

    return call


def _assert_sound(conn: psycopg.Connection[Any], user_id: str = "alice") -> None:
    """Journal verifies, every node replays, the bookkeeping equals a rebuild from nodes and events."""
    assert _rows(conn, "SELECT * FROM prme.verify_journal(%s)", user_id) == []
    assert (
        _rows(
            conn,
            "SELECT n.id FROM prme.nodes AS n, LATERAL prme.replay_node(n.user_id, n.id) AS r"
            " WHERE n.user_id = %s AND NOT r.matches",
            user_id,
        )
        == []
    )
    # A set-based rebuild of the bookkeeping (mirror and running totals) from the
    # nodes and the outcome events finds nothing to change.
    with conn.transaction(force_rollback=True):
        assert _one(conn, "SELECT prme._rebuild_outcome_totals(%s)", user_id) == 0


# ---------------------------------------------------------------------------
# record_outcome idempotency
# ---------------------------------------------------------------------------


def test_same_key_from_16_connections_records_once(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    node_id = _add_node(conn)
    key = uuid.uuid4()
    results = race(db_dsn, [_record(node_id, "implicit_success", key)] * THREADS)

    rows = [r for r in results if isinstance(r, dict)]
    assert len(rows) == THREADS, results
    assert sum(not r["replayed"] for r in rows) == 1
    assert len({r["id"] for r in rows}) == 1, "every replay returns the one stored outcome"
    assert _one(conn, "SELECT count(*) FROM prme.outcomes WHERE node_id = %s", node_id) == 1
    assert _one(conn, "SELECT implicit_successes FROM prme.nodes WHERE id = %s", node_id) == 1
    assert _one(conn, "SELECT count(*) FROM prme.request_keys WHERE request_id = %s", key) == 1
    _assert_sound(conn)


def test_same_key_raced_with_different_arguments_binds_one(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    node_id = _add_node(conn)
    key = uuid.uuid4()
    calls = [_record(node_id, "implicit_success", key, notes=f"variant {i % 2}") for i in range(THREADS)]
    results = race(db_dsn, calls)

    stored = _rows(conn, "SELECT id, notes FROM prme.outcomes WHERE node_id = %s", node_id)
    assert len(stored) == 1
    winner_notes = stored[0]["notes"]
    for i, result in enumerate(results):
        if f"variant {i % 2}" == winner_notes:
            assert isinstance(result, dict), result
            assert result["id"] == stored[0]["id"]
        else:
            assert isinstance(result, psycopg.Error) and result.sqlstate == "PR409", result
    assert sum(isinstance(r, dict) and not r["replayed"] for r in results) == 1


def test_reinforce_and_record_outcome_share_one_key_space(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    node_id = _add_node(conn)
    key = uuid.uuid4()
    calls: list[Callable[[psycopg.Connection[Any]], Row]] = [
        _reinforce(node_id, key) if i % 2 else _record(node_id, "explicit_reinforcement", key) for i in range(THREADS)
    ]
    results = race(db_dsn, calls)

    # A confirmation's key is its journal record, record_outcome's a request_keys row.
    operation = _one(
        conn,
        "SELECT coalesce((SELECT op FROM prme.journal WHERE request_id = %s),"
        " (SELECT operation FROM prme.request_keys WHERE request_id = %s))",
        key,
        key,
    )
    winners = [i for i, r in enumerate(results) if isinstance(r, dict) and not r["replayed"]]
    assert len(winners) == 1
    for i, result in enumerate(results):
        same_operation = (i % 2 == 1) == (operation == "reinforce")
        if same_operation:
            assert isinstance(result, dict), result
        else:
            assert isinstance(result, psycopg.Error) and result.sqlstate == "PR409", result
    # Either way the key produced exactly one explicit_reinforcement event.
    events = _rows(conn, "SELECT outcome, recorded_by FROM prme.node_outcomes('alice', %s)", node_id)
    assert events == [{"outcome": "explicit_reinforcement", "recorded_by": operation}]
    assert _one(conn, "SELECT version FROM prme.nodes WHERE id = %s", node_id) == (2 if operation == "reinforce" else 1)
    _assert_sound(conn)


def test_distinct_keys_all_count(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    node_id = _add_node(conn)
    outcomes = ["explicit_reinforcement", "implicit_success", "neutral_exposure", "explicit_correction"]
    calls = [_record(node_id, outcomes[i % 4], uuid.uuid4()) for i in range(THREADS)]
    results = race(db_dsn, calls)

    assert all(isinstance(r, dict) and not r["replayed"] for r in results), results
    summary = _rows(conn, "SELECT * FROM prme.outcome_summary('alice', %s)", node_id)[0]
    assert (summary["explicit_reinforcements"], summary["implicit_successes"]) == (4, 4)
    assert (summary["neutral_exposures"], summary["explicit_corrections"]) == (4, 4)
    assert summary["score"] == Decimal("0.8")
    assert summary["stability_by_outcomes"] == "low"
    _assert_sound(conn)


def test_reinforce_appends_one_outcome_per_applied_call(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    node_id = _add_node(conn)
    key = uuid.uuid4()
    race(db_dsn, [_reinforce(node_id, key)] * THREADS)
    outcomes = "SELECT node_version FROM prme.node_outcomes('alice', %s) ORDER BY 1"
    assert len(_rows(conn, outcomes, node_id)) == 1
    assert _one(conn, "SELECT count(*) FROM prme.outcomes WHERE node_id = %s", node_id) == 0, "its journal record"

    race(db_dsn, [_reinforce(node_id, uuid.uuid4()) for _ in range(THREADS)])
    versions = [r["node_version"] for r in _rows(conn, outcomes, node_id)]
    assert versions == list(range(2, 2 + 1 + THREADS)), "one event per applied reinforce, at the version it made"
    _assert_sound(conn)


def test_aborted_record_outcome_leaves_no_key_and_no_event(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    node_id = _add_node(conn)
    key = uuid.uuid4()
    with psycopg.connect(db_dsn) as tx:
        assert not _record(node_id, "implicit_success", key)(tx)["replayed"]
        tx.rollback()
    assert _one(conn, "SELECT count(*) FROM prme.outcomes WHERE node_id = %s", node_id) == 0
    assert _one(conn, "SELECT implicit_successes FROM prme.nodes WHERE id = %s", node_id) == 0
    assert not _record(node_id, "implicit_success", key)(conn)["replayed"], "the key must not survive the rollback"


# ---------------------------------------------------------------------------
# Patches
# ---------------------------------------------------------------------------


def _maintenance_fixture(conn: psycopg.Connection[Any], nodes: int = 6) -> list[uuid.UUID]:
    """Memories that each get a decay op, a stability op and (stable ones) mark_contested."""
    ids = []
    for i in range(nodes):
        stability = ["low", "semi-stable", "stable"][i % 3]
        node_id = _add_node(
            conn,
            content=f"memory {i}",
            stability=stability,
            confidence_base=Decimal("0.9"),
            next_review_at=conn.execute("SELECT now() - interval '100 days'").fetchone()[0],  # type: ignore[index]
        )
        outcome = "explicit_correction" if i % 2 else "explicit_reinforcement"
        for _ in range(2):
            _record(node_id, outcome)(conn)
        ids.append(node_id)
    return ids


def _patch(conn: psycopg.Connection[Any], as_of: str = "now()") -> tuple[uuid.UUID, list[dict[str, Any]]]:
    row = _rows(conn, f"SELECT patch_id, ops FROM prme.maintenance_patch('alice', {as_of})")[0]
    return row["patch_id"], row["ops"]


def test_one_patch_applied_16_times_concurrently_applies_each_op_once(
    conn: psycopg.Connection[Any], db_dsn: str
) -> None:
    _maintenance_fixture(conn)
    patch_id, ops = _patch(conn)
    op_ids = [op["op_id"] for op in ops]
    assert {op["op"] for op in ops} == {"decay_confidence", "update_stability", "mark_contested"}
    versions_before = dict(conn.execute("SELECT id, version FROM prme.nodes WHERE user_id = 'alice'").fetchall())

    # Half the callers select every op by hand, half run auto mode.
    calls = [_apply(patch_id, op_ids, "manual") if i % 2 else _apply(patch_id, None, "auto") for i in range(THREADS)]
    results = race(db_dsn, calls)
    assert all(isinstance(r, list) for r in results), results

    applied = Counter(row["op_id"] for r in results if isinstance(r, list) for row in r if row["status"] == "applied")
    assert applied == Counter(op_ids), "each op applied exactly once across 16 concurrent applies"
    assert all(row["status"] in ("applied", "already_applied") for r in results if isinstance(r, list) for row in r), (
        "no op was stale: ops of one memory do not invalidate each other"
    )

    per_node = Counter(op["target"]["node_id"] for op in ops)
    versions_after = dict(conn.execute("SELECT id, version FROM prme.nodes WHERE user_id = 'alice'").fetchall())
    for node_id, before in versions_before.items():
        assert versions_after[node_id] == before + per_node[str(node_id)], "one version (one record) per op"
    maintenance_records = _one(
        conn, "SELECT count(*) FROM prme.journal WHERE user_id = 'alice' AND op <> 'create' AND op <> 'reinforce'"
    )
    assert maintenance_records == len(op_ids)
    assert _one(conn, "SELECT count(*) FROM prme.patch_ops WHERE patch_id = %s AND applied_at IS NULL", patch_id) == 0
    _assert_sound(conn)


def test_two_patches_of_one_cycle_applied_concurrently_decay_once(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    ids = _maintenance_fixture(conn, nodes=4)
    first, first_ops = _patch(conn)
    second, second_ops = _patch(conn)
    decays = [op for op in first_ops if op["op"] == "decay_confidence"]
    assert len(decays) == len(ids)
    assert [op["updates"] for op in decays] == [op["updates"] for op in second_ops if op["op"] == "decay_confidence"], (
        "both patches propose the same decay for this cycle"
    )

    results = race(db_dsn, [_apply(first if i % 2 else second, None, "auto") for i in range(THREADS)])
    assert all(isinstance(r, list) for r in results), results

    # Each memory decayed by exactly one proposal: the other is stale or already applied.
    for op in decays:
        node_id = op["target"]["node_id"]
        expected = Decimal(str(op["updates"]["confidence_base"]["to"]))
        assert _one(conn, "SELECT confidence_base FROM prme.nodes WHERE id = %s", node_id) == expected
        assert (
            _one(conn, "SELECT count(*) FROM prme.journal WHERE node_id = %s AND op = 'decay_confidence'", node_id) == 1
        )
    statuses = Counter(row["status"] for r in results if isinstance(r, list) for row in r)
    assert statuses["applied"] == len(decays) + sum(op["recommendation"] == "increase_stability" for op in first_ops)
    third, third_ops = _patch(conn)
    assert [op for op in third_ops if op["op"] == "decay_confidence"] == [], "nothing left to decay this cycle"
    assert _rows(conn, "SELECT * FROM prme.apply_patch('alice', %s, NULL, 'auto')", third) == []
    _assert_sound(conn)


def test_decay_is_charged_once_per_cycle_as_time_passes(conn: psycopg.Connection[Any]) -> None:
    """Patches as of earlier times stand in for maintenance runs in the past."""
    node_id = _add_node(
        conn,
        confidence_base=Decimal("0.9"),
        next_review_at=conn.execute("SELECT now() - interval '20 days'").fetchone()[0],  # type: ignore[index]
    )
    due = _one(conn, "SELECT next_review_at FROM prme.nodes WHERE id = %s", node_id)

    def run(offset: str) -> list[tuple[str, str]]:
        patch_id = _rows(conn, "SELECT patch_id FROM prme.maintenance_patch('alice', %s + %s::interval)", due, offset)[
            0
        ]["patch_id"]
        return [(r["op"], r["status"]) for r in _apply(patch_id, None, "auto")(conn)]

    def confidence() -> Decimal:
        return Decimal(_one(conn, "SELECT confidence_base FROM prme.nodes WHERE id = %s", node_id))

    # low: 7-day cycles, the first due at next_review_at.
    assert run("0") == [("decay_confidence", "applied")]  # cycle 1
    assert confidence() == Decimal("0.75")
    assert run("1 day") == []  # still cycle 1
    assert run("7 days -1 microsecond") == []  # a microsecond short of cycle 2
    assert run("7 days") == [("decay_confidence", "applied")]  # cycle 2
    assert run("0") == []  # an older run decays nothing
    assert run("20 days") == [("decay_confidence", "applied")]  # cycle 3 (20 days = 2 full cadences)
    assert run("20 days") == []
    assert confidence() == Decimal("0.45")
    assert _one(conn, "SELECT decay_cycles FROM prme.nodes WHERE id = %s", node_id) == 3
    assert _one(conn, "SELECT count(*) FROM prme.journal WHERE node_id = %s AND op = 'decay_confidence'", node_id) == 3

    # A review resets the cadence: nothing more is due.
    conn.execute("SELECT prme.mark_reviewed('alice', %s)", (node_id,))
    assert run("20 days") == []
    _assert_sound(conn)


def test_aborted_apply_leaves_the_op_pending(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    _maintenance_fixture(conn, nodes=1)
    patch_id, ops = _patch(conn)
    with psycopg.connect(db_dsn) as tx:
        rows = _apply(patch_id, [ops[0]["op_id"]], "manual")(tx)
        assert rows[0]["status"] == "applied"
        tx.rollback()
    assert (
        _one(conn, "SELECT count(*) FROM prme.patch_ops WHERE patch_id = %s AND applied_at IS NOT NULL", patch_id) == 0
    )
    assert _apply(patch_id, [ops[0]["op_id"]], "manual")(conn)[0]["status"] == "applied"
    _assert_sound(conn)


def test_review_and_outcomes_racing_leave_consistent_state(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    """mark_reviewed settles exactly the outcomes committed before it: the report counts the rest."""
    node_id = _add_node(conn, stability="stable")

    def review(c: psycopg.Connection[Any]) -> Row:
        return _rows(c, "SELECT * FROM prme.mark_reviewed('alice', %s)", node_id)[0]

    calls: list[Callable[[psycopg.Connection[Any]], Row]] = [
        review if i % 4 == 0 else _record(node_id, "explicit_correction") for i in range(THREADS)
    ]
    results = race(db_dsn, calls)
    assert all(isinstance(r, dict) for r in results), results

    total, settled = conn.execute(
        "SELECT explicit_corrections, reviewed_explicit_corrections FROM prme.nodes WHERE id = %s",
        (node_id,),
    ).fetchone() or (None, None)
    assert total == THREADS - THREADS // 4
    report = _rows(conn, "SELECT * FROM prme.maintenance_report('alice') WHERE 'review_memory' = ANY(recommendations)")
    assert [r["explicit_corrections"] for r in report] == ([total - settled] if total > settled else [])
    _assert_sound(conn)


# ---------------------------------------------------------------------------
# Correction linking: the SQL definition against a Python reference
# ---------------------------------------------------------------------------


def _tokens(text: str) -> set[str]:
    return {t.lower() for t in re.split(r"[^A-Za-z0-9]+", text) if len(t) > 3}


WORDS = st.sampled_from(["tabs", "spaces", "python", "alice", "Coffee", "morning", "the", "in", "x1234", "uses"])
TEXTS = st.lists(WORDS, min_size=0, max_size=8).map(" ".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(message=TEXTS, contents=st.lists(TEXTS.filter(lambda s: s.strip() != ""), min_size=1, max_size=4))
def test_link_correction_follows_its_definition(
    conn: psycopg.Connection[Any], message: str, contents: list[str]
) -> None:
    message = message + " !"  # never blank
    user = f"hyp_{uuid.uuid4().hex[:8]}"
    ids = [_add_node(conn, user_id=user, content=c) for c in contents]
    a = _tokens(message)
    expected = [
        node_id
        for node_id, content in zip(ids, contents, strict=True)
        if (b := _tokens(content)) and a and 100 * len(a & b) >= 45 * min(len(a), len(b))
    ]
    row = _rows(conn, "SELECT * FROM prme.link_correction(%s, %s, %s)", user, message, ids)[0]
    assert sorted(uuid.UUID(m["node_id"]) for m in row["matches"]) == sorted(expected)
    if len(expected) == 1:
        assert row["status"] == "linked" and row["node_id"] == expected[0]
    else:
        assert row["status"] == ("ambiguous" if expected else "unmatched")
        assert row["inbox_id"] is not None
    events = _one(conn, "SELECT count(*) FROM prme.outcomes WHERE user_id = %s", user)
    assert events == (1 if len(expected) == 1 else 0)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Don't put my meetings before 10", True),
        ("no, the flight is on Tuesday", True),
        ("Actually it's Sam, not Samuel", True),
        ("I prefer aisle seats over window seats", True),
        ("stop summarising my emails", True),
        ("Always cc my assistant", True),
        ("Book the usual hotel please", False),
        ("What did I say about the budget?", False),
        ("Nothing else for today", False),
    ],
)
def test_is_correction(conn: psycopg.Connection[Any], message: str, expected: bool) -> None:
    assert _one(conn, "SELECT prme.is_correction(%s)", message) is expected


@pytest.mark.parametrize(("message", "expected"), phrases())
def test_is_correction_phrase_table(conn: psycopg.Connection[Any], message: str, expected: bool) -> None:
    """Every row of the table of phrases in docs/MAINTENANCE.md, corrections and not."""
    assert _one(conn, "SELECT prme.is_correction(%s)", message) is expected


def test_link_correction_counts_a_candidate_listed_twice_once(conn: psycopg.Connection[Any]) -> None:
    user = f"dup_{uuid.uuid4().hex[:8]}"
    tabs = _add_node(conn, user_id=user, content="alice indents python code with tabs")
    other = _add_node(conn, user_id=user, content="alice drinks green tea every morning")
    linked = _rows(
        conn, "SELECT * FROM prme.link_correction(%s, %s, %s)", user, "No, python code uses spaces", [tabs, tabs]
    )[0]
    assert linked["status"] == "linked" and linked["node_id"] == tabs
    assert [m["node_id"] for m in linked["matches"]] == [str(tabs)]
    assert _one(conn, "SELECT count(*) FROM prme.outcomes WHERE user_id = %s", user) == 1
    unmatched = _rows(
        conn, "SELECT * FROM prme.link_correction(%s, %s, %s)", user, "Stop it", [other, tabs, other, tabs]
    )[0]
    assert unmatched["status"] == "unmatched"
    stored = _one(
        conn,
        "SELECT candidate_node_ids FROM prme.correction_inbox WHERE user_id = %s AND id = %s",
        user,
        unmatched["inbox_id"],
    )
    assert stored == [other, tabs]


# ---------------------------------------------------------------------------
# maintenance_report: the cheaper query of 0007 returns what 0003 returned
# ---------------------------------------------------------------------------

FIRST_RELEASE = Path(__file__).resolve().parent.parent / "migrations" / "0003_outcomes_and_maintenance.sql"

# 3,000 memories of two owners in every state the report distinguishes (stabilities,
# lifecycle states, decay profiles, confidence 0 to 1, due or not, decayed cycles
# against the current or an old schedule, reviewed or not) with 0 to 14 outcome events
# each over the last ten days, inserted as a bulk load would be (the bookkeeping is
# rebuilt set-based, then given review and decay states).
VARIED_MEMORIES = """
INSERT INTO prme.nodes (
    id, user_id, namespace, scope, kind, content, confidence_base, salience_base, reinforcement_boost,
    evidence_refs, stability, next_review_at, lifecycle_state, decay_profile, created_at, updated_at, version,
    last_checksum
)
SELECT
    ('30000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid,
    CASE WHEN i % 7 = 0 THEN 'bob' ELSE 'alice' END, 'default', 'personal', 'fact', 'memory ' || i,
    (h % 101) / 100.0, 0.5, 0, '{}',
    (ARRAY['low', 'semi-stable', 'stable'])[1 + h % 3],
    CASE WHEN h % 4 > 0 THEN now() + ((h % 400) - 300) * interval '1 day' + (h % 86400) * interval '1 second' END,
    (ARRAY['active', 'active', 'active', 'contested', 'superseded', 'archived'])[1 + (h / 3) % 6],
    (ARRAY['slow', 'medium', 'fast', 'permanent'])[1 + (h / 5) % 4],
    now() - interval '2 years', now() - interval '1 day', 1, repeat('0', 64)
FROM generate_series(1, 3000) AS i
CROSS JOIN LATERAL (SELECT (i::bigint * 2654435761) % 4294967291 AS h) AS x
"""
VARIED_OUTCOMES = """
INSERT INTO prme.outcomes (user_id, id, node_id, outcome, weight, recorded_by, node_version, created_at)
SELECT
    n.user_id, gen_random_uuid(), n.id, k.outcome, k.weight, 'record_outcome', 1,
    now() - ((j * 7919 + i) % 14400) * interval '1 minute'
FROM generate_series(1, 3000) AS i
JOIN prme.nodes AS n ON n.id = ('30000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid
CROSS JOIN LATERAL generate_series(1, (i * 31) % 15) AS j
-- Every fifth memory hears only silent successes (flag_for_review, at low stability).
CROSS JOIN LATERAL (SELECT CASE WHEN i % 5 = 0 THEN 50 ELSE ((i * 31 + j * 17) * 2654435761) % 100 END AS r) AS q
CROSS JOIN LATERAL (
    SELECT
        CASE WHEN q.r < 20 THEN 'explicit_reinforcement' WHEN q.r < 70 THEN 'implicit_success'
             WHEN q.r < 85 THEN 'neutral_exposure' ELSE 'explicit_correction' END AS outcome,
        CASE WHEN q.r < 20 THEN 1.0 WHEN q.r < 70 THEN 0.2 WHEN q.r < 85 THEN 0 ELSE -1.0 END AS weight
) AS k
"""
# The review and decay states of VARIED_STATES as of 0006 (bookkeeping rows); since
# 0018_report_on_the_memory_row they live on the memory's row (VARIED_STATES_ON_NODES).
VARIED_STATES = """
UPDATE prme.node_maintenance AS k SET
    reviewed_explicit_reinforcements = k.explicit_reinforcements / 2,
    reviewed_implicit_successes = k.implicit_successes / 2,
    reviewed_neutral_exposures = k.neutral_exposures / 2,
    reviewed_explicit_corrections = k.explicit_corrections / 2,
    reviewed_at = now() - interval '3 days',
    decay_anchor = CASE WHEN x.h % 3 = 0 THEN k.next_review_at - interval '1 day' ELSE k.next_review_at END,
    decay_cycles = x.h % 4
FROM (SELECT node_id, ('x' || substr(md5(node_id::text), 1, 8))::bit(32)::integer & 1023 AS h
      FROM prme.node_maintenance) AS x
WHERE x.node_id = k.node_id AND x.h % 3 > 0
"""
VARIED_STATES_ON_NODES = """
UPDATE prme.nodes AS n SET
    reviewed_explicit_reinforcements = n.recorded_reinforcements / 2,
    reviewed_implicit_successes = n.implicit_successes / 2,
    reviewed_neutral_exposures = n.neutral_exposures / 2,
    reviewed_explicit_corrections = n.explicit_corrections / 2,
    reviewed_at = now() - interval '3 days',
    decay_anchor = CASE WHEN x.h % 3 = 0 THEN n.next_review_at - interval '1 day' ELSE n.next_review_at END,
    decay_cycles = x.h % 4
FROM (SELECT id, ('x' || substr(md5(id::text), 1, 8))::bit(32)::integer & 1023 AS h FROM prme.nodes) AS x
WHERE x.id = n.id AND x.h % 3 > 0
"""
# The first release read a bookkeeping row per memory (0003): the same columns, from the
# memory's row. The data here has no confirmations, so the outcome rows are all of them.
# The columns with 0003's node_maintenance types (since 0021 the memory's are domains over them).
FIRST_RELEASE_BOOKKEEPING = (
    "(SELECT n.user_id, n.id AS node_id, n.stability::text, n.lifecycle_state::text, n.next_review_at,"
    " n.decay_profile::text, n.confidence_base::numeric(5, 4),"
    " n.recorded_reinforcements::bigint AS explicit_reinforcements, n.implicit_successes::bigint,"
    " n.neutral_exposures::bigint, n.explicit_corrections::bigint, n.last_outcome_at,"
    " n.reviewed_explicit_reinforcements::bigint, n.reviewed_implicit_successes::bigint,"
    " n.reviewed_neutral_exposures::bigint, n.reviewed_explicit_corrections::bigint,"
    " n.decay_anchor, n.decay_cycles FROM prme.nodes AS n) AS k"
)


def test_report_returns_what_its_first_release_returned(conn: psycopg.Connection[Any]) -> None:
    text = FIRST_RELEASE.read_text()
    start = text.index("CREATE FUNCTION prme.maintenance_report(")
    first = text[start : text.index("$$;", start) + 3]
    conn.execute("CREATE SCHEMA first_release")
    # The same body under another name: its qualified references (maintenance_report.user_id)
    # still name the function, which is called maintenance_report in either schema.
    first = first.replace("prme.node_maintenance AS k", FIRST_RELEASE_BOOKKEEPING)
    conn.execute(first.replace("prme.maintenance_report(", "first_release.maintenance_report(").encode())
    conn.execute("SET session_replication_role = replica")  # a bulk load, as the benchmark does
    conn.execute(VARIED_MEMORIES.encode())
    conn.execute(VARIED_OUTCOMES.encode())
    conn.execute("RESET session_replication_role")
    for owner in ("alice", "bob"):
        assert _one(conn, "SELECT prme._rebuild_outcome_totals(%s)", owner) > 0
    conn.execute(VARIED_STATES_ON_NODES.encode())
    pending = (
        "SELECT count(*) FILTER (WHERE prme._maintenance_moves(stability, lifecycle_state,"
        " recorded_reinforcements - reviewed_explicit_reinforcements,"
        " implicit_successes - reviewed_implicit_successes,"
        " explicit_corrections - reviewed_explicit_corrections) > 0) FROM prme.nodes"
    )
    assert _one(conn, pending) > 500
    assert _one(conn, "SELECT sum(reinforcements) FROM prme.nodes") == 0
    # bob's own cadences and decay (one of them 0) against alice's defaults.
    conn.execute(
        "INSERT INTO prme.maintenance_settings (user_id, stability, review_cadence, decay_per_cycle) VALUES"
        " ('bob', 'low', interval '36 hours', 0.3333), ('bob', 'stable', interval '400 days', 0)"
    )
    kinds: Counter[str] = Counter()
    for owner in ("alice", "bob"):
        for as_of in ("now()", "now() - interval '3 days'", "now() + interval '45 days'", "now() - interval '1 year'"):
            # Compared as text: every value and its scale (0.7000 is not 0.7 here).
            new = Counter(
                r[0] for r in conn.execute(f"SELECT r::text FROM prme.maintenance_report(%s, {as_of}) AS r", (owner,))
            )
            old = Counter(
                r[0]
                for r in conn.execute(
                    f"SELECT r::text FROM first_release.maintenance_report(%s, {as_of}) AS r", (owner,)
                )
            )
            assert new == old, f"{owner} as of {as_of}: {len(new - old)} new rows differ, {len(old - new)} old ones"
            kinds.update(
                k
                for (k,) in conn.execute(
                    f"SELECT unnest(recommendations) FROM prme.maintenance_report(%s, {as_of})", (owner,)
                )
            )
    # The data reaches every recommendation, so the comparison covers every branch.
    assert set(kinds) == {
        "decay_confidence",
        "review_due",
        "review_memory",
        "decrease_stability",
        "increase_stability",
        "flag_for_review",
        "mark_contested",
    }, kinds


def _moves(row: Row) -> int:
    """docs/MAINTENANCE.md §5 in Python: what a memory's outcomes since its last review call for."""
    er = row["explicit_reinforcements"] - row["reviewed_explicit_reinforcements"]
    isx = row["implicit_successes"] - row["reviewed_implicit_successes"]
    ec = row["explicit_corrections"] - row["reviewed_explicit_corrections"]
    active, low = row["lifecycle_state"] == "active", row["stability"] == "low"
    if row["lifecycle_state"] not in ("active", "contested"):
        return 0
    if ec >= 1:
        return (1 if low else 2) + (2 if ec >= 2 and active else 0)
    if not active:
        return 0
    if er >= 2:
        return 0 if row["stability"] == "stable" else 5
    return 6 if isx >= 5 and low else 0


# The columns 0008 added to prme.node_maintenance (0014_hot_path dropped pending_moves and
# confidence_ten_thousandths again): the upgrade tests of 0008 below stop at 0008.
REPORT_COLUMNS = {"pending_moves", "review_due_at", "confidence_ten_thousandths"}


def _assert_report_columns(rows: list[Row]) -> None:
    """Every bookkeeping row's 0008 report columns agree with its other columns (as JSON rows)."""
    for row in rows:
        due_at = row["next_review_at"] if row["lifecycle_state"] in ("active", "contested") else None
        assert (row["pending_moves"], row["review_due_at"]) == (_moves(row), due_at), row
        assert row["confidence_ten_thousandths"] == round(Decimal(str(row["confidence_base"])) * 10000), row


def test_every_writer_keeps_the_bookkeeping(conn: psycopg.Connection[Any]) -> None:
    """The bookkeeping on each memory's row stays right after each kind of write (add_node,
    outcomes, reinforce, mark_reviewed, every patch op, archive): its totals are what a rebuild
    from the outcome rows computes, and what the outcomes since the last review call for,
    counted over outcome rows and the confirmations on the node, reaches every code."""
    bookkeeping = (
        "SELECT to_jsonb(n) || jsonb_build_object('explicit_reinforcements',"
        " n.recorded_reinforcements + n.reinforcements) FROM prme.nodes AS n WHERE n.user_id = 'alice'"
    )
    seen: set[int] = set()

    def check() -> None:
        with conn.transaction(force_rollback=True):
            assert _one(conn, "SELECT prme._rebuild_outcome_totals('alice')") == 0
        seen.update(_moves(r[0]) for r in conn.execute(bookkeeping))

    ids = _maintenance_fixture(conn)  # add_node, then corrections or reinforcements
    for stability in ("low", "semi-stable"):
        _record(_add_node(conn, content=f"corrected once, {stability}", stability=stability), "explicit_correction")(
            conn
        )
    check()
    low = _add_node(conn, content="silent successes", stability="low", confidence_base=Decimal("0.5"))
    for _ in range(5):
        _record(low, "implicit_success")(conn)
    _reinforce(ids[0], None)(conn)
    check()
    patch_id, ops = _patch(conn)
    assert {op["op"] for op in ops} == {"decay_confidence", "update_stability", "mark_contested"}
    _apply(patch_id, [op["op_id"] for op in ops], "manual")(conn)  # settles, decays, contests
    check()
    for node_id in ids[:2]:
        _record(node_id, "explicit_correction")(conn)
        conn.execute("SELECT prme.mark_reviewed('alice', %s)", (node_id,))
        check()
    conn.execute("SELECT prme.archive_node('alice', %s)", (ids[2],))
    check()
    assert seen == set(range(7)), seen
    _assert_sound(conn)


def test_decay_of_a_memory_overdue_for_centuries_floors_at_zero(conn: psycopg.Connection[Any]) -> None:
    """Millions of hourly cycles overdue: the decay (integer ten-thousandths) does not
    overflow; the suggestion is 0, as greatest(confidence - cycles * decay, 0) says."""
    conn.execute("SELECT prme.set_maintenance_setting('alice', 'low', interval '1 hour', 0.15)")
    due = _one(conn, "SELECT now() - interval '200 years'")
    node_id = _add_node(conn, stability="low", confidence_base=Decimal("0.9"), next_review_at=due)
    row = _rows(conn, "SELECT * FROM prme.maintenance_report('alice')")[0]
    assert (row["node_id"], row["recommendations"][:2]) == (node_id, ["decay_confidence", "review_due"])
    assert row["overdue_cycles"] > 1_700_000 and row["suggested_confidence"] == 0
    _, ops = _patch(conn)
    assert [(op["op"], op["updates"]["confidence_base"]["to"]) for op in ops] == [("decay_confidence", 0)]


def test_upgrading_to_0008_waits_for_a_writer_between_its_memory_and_its_bookkeeping(
    pg_server: testing.Server,
) -> None:
    """0008 rebuilds prme.node_maintenance, whose foreign key needs a lock on prme.nodes:
    it takes that lock first, so a writer that changed a memory and has yet to write the
    bookkeeping row finishes, and the upgrade follows (no deadlock, nothing lost)."""
    name = testing.create_database(pg_server, prefix="prme_upgrade")
    try:
        dsn = pg_server.dsn_for(name)
        every = migrations.load_migrations()
        with psycopg.connect(dsn, autocommit=True) as admin, psycopg.connect(dsn) as writer:
            migrations.migrate(admin, [m for m in every if m.version < 8])
            node_id = _add_node(admin)
            # The writer changes the memory (a column the mirror does not copy) ...
            writer.execute("UPDATE prme.nodes SET updated_at = now() WHERE id = %s", (node_id,))
            errors: list[BaseException] = []

            def upgrade() -> None:
                try:
                    with psycopg.connect(dsn, autocommit=True) as runner:
                        migrations.migrate(runner, [m for m in every if m.version <= 8])
                except BaseException as exc:  # reported below
                    errors.append(exc)

            thread = threading.Thread(target=upgrade)
            thread.start()
            deadline = time.monotonic() + 30
            waiting = "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'prme.nodes'::regclass"
            while _one(admin, waiting) == 0:
                assert time.monotonic() < deadline and thread.is_alive(), errors
                time.sleep(0.05)
            # ... and, while 0008 waits for it, writes the bookkeeping row: no deadlock.
            writer.execute("SELECT prme.record_outcome('alice', %s, 'explicit_correction')", (node_id,))
            writer.commit()
            thread.join(60)
            assert not thread.is_alive() and errors == []
            row = _one(admin, "SELECT to_jsonb(k) FROM prme.node_maintenance AS k WHERE node_id = %s", node_id)
            assert row["explicit_corrections"] == 1
            _assert_report_columns([row])
            assert _one(admin, "SELECT max(version) FROM prme.schema_migrations") == 8
    finally:
        testing.drop_database(pg_server, name)


def test_upgrading_from_0006_keeps_the_report(pg_server: testing.Server) -> None:
    """A database at 0006 with bookkeeping in every state upgrades to 0007 and 0008: the
    same bookkeeping plus 0008's report columns, right for every row, the same report as
    of the same time, and the bookkeeping (report columns too) still kept up."""
    name = testing.create_database(pg_server, prefix="prme_upgrade")
    try:
        with psycopg.connect(pg_server.dsn_for(name), autocommit=True) as conn:
            every = migrations.load_migrations()
            migrations.migrate(conn, [m for m in every if m.version < 7])
            conn.execute("SET session_replication_role = replica")
            conn.execute(VARIED_MEMORIES.encode())
            conn.execute(VARIED_OUTCOMES.encode())
            conn.execute("RESET session_replication_role")
            for owner in ("alice", "bob"):
                conn.execute("SELECT prme._rebuild_node_maintenance(%s)", (owner,))
            conn.execute(VARIED_STATES.encode())
            as_of = _one(conn, "SELECT now()")
            bookkeeping = "SELECT node_id, to_jsonb(k) FROM prme.node_maintenance AS k"
            report = "SELECT r::text FROM prme.maintenance_report(%s, %s) AS r"
            before = dict(conn.execute(bookkeeping).fetchall())
            before_report = Counter(r[0] for r in conn.execute(report, ("alice", as_of)))

            upto_0008 = [m for m in every if m.version <= 8]
            assert [m.version for m in migrations.migrate(conn, upto_0008)] == [7, 8]
            after = dict(conn.execute(bookkeeping).fetchall())
            assert {n: {k: v for k, v in row.items() if k not in REPORT_COLUMNS} for n, row in after.items()} == before
            _assert_report_columns(list(after.values()))
            assert {row["pending_moves"] for row in after.values()} == set(range(7))
            assert Counter(r[0] for r in conn.execute(report, ("alice", as_of))) == before_report
            assert len(before) == 3000 and sum(before_report.values()) > 500
            # Kept up after the upgrade: an outcome adds to its memory's totals, a review settles.
            node_id = _one(
                conn,
                "SELECT min(node_id::text)::uuid FROM prme.node_maintenance"
                " WHERE user_id = 'alice' AND lifecycle_state = 'active'",
            )
            conn.execute("SELECT prme.record_outcome('alice', %s, 'explicit_correction')", (node_id,))
            totals = _one(conn, "SELECT explicit_corrections FROM prme.node_maintenance WHERE node_id = %s", node_id)
            assert totals == before[node_id]["explicit_corrections"] + 1
            row = _one(conn, "SELECT to_jsonb(k) FROM prme.node_maintenance AS k WHERE node_id = %s", node_id)
            assert _moves(row) >= 1  # a correction calls for review_memory at least
            _assert_report_columns([row])
            with conn.transaction(force_rollback=True):
                assert _one(conn, "SELECT prme._rebuild_node_maintenance('alice')") == 0
    finally:
        testing.drop_database(pg_server, name)
