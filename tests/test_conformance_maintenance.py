"""Maintenance on both engines: per-owner settings, reviews and the maintenance report.

Each test runs on PostgreSQL and on a memory pack (the ``engine`` fixture of
conformance_backends.py) and asserts the same rows and errors (sql/postgres/230, 240, 250).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from prme_pg import InvalidInput, MaintenanceRecommendation, MaintenanceSetting, MemoryClient, NotFoundError

from .conformance_backends import Engine, engine_fixture, memory_fixture  # noqa: F401

ALICE = "alice"
BOB = "bob"
DEFAULTS = [
    MaintenanceSetting("low", timedelta(days=7), Decimal("0.1500"), "default"),
    MaintenanceSetting("semi-stable", timedelta(days=30), Decimal("0.1500"), "default"),
    MaintenanceSetting("stable", timedelta(days=90), Decimal("0.0500"), "default"),
]


def test_settings_default_override_and_reset(memory: MemoryClient) -> None:
    assert memory.get_maintenance_settings(user_id=ALICE) == DEFAULTS
    changed = memory.set_maintenance_setting(
        "low", user_id=ALICE, review_cadence=timedelta(hours=12), decay_per_cycle="0.02"
    )
    assert changed == [MaintenanceSetting("low", timedelta(hours=12), Decimal("0.0200"), "owner"), *DEFAULTS[1:]]
    again = memory.set_maintenance_setting("low", user_id=ALICE, review_cadence=timedelta(days=3), decay_per_cycle=0)
    assert again[0] == MaintenanceSetting("low", timedelta(days=3), Decimal("0.0000"), "owner")
    assert memory.get_maintenance_settings(user_id=BOB) == DEFAULTS, "an owner's override is theirs alone"
    # A new memory's first review follows the owner's cadence.
    node = memory.add_node("x", user_id=ALICE)
    assert node.next_review_at == node.created_at + timedelta(days=3)
    assert memory.reset_maintenance_settings(user_id=ALICE) == DEFAULTS


BAD_SETTINGS: list[tuple[str, dict[str, Any], str]] = [
    ("defaults owner", {"user_id": "*"}, "names the defaults"),
    ("stability", {"stability": "rock"}, "stability must be"),
    ("too short", {"review_cadence": timedelta(minutes=59)}, r"review_cadence must be .*\(got 00:59:00\)"),
    ("too long", {"review_cadence": timedelta(days=3651)}, r"\(got 3651 days\)"),
    ("fraction of a second", {"review_cadence": timedelta(days=1, microseconds=500000)}, r"\(got 1 day 00:00:00.5\)"),
    ("decay above one", {"decay_per_cycle": Decimal("1.5")}, "decay_per_cycle must be"),
    ("decay places", {"decay_per_cycle": Decimal("0.12345")}, "decay_per_cycle must be"),
]


@pytest.mark.parametrize(("case", "change", "message"), BAD_SETTINGS, ids=[c for c, _, _ in BAD_SETTINGS])
def test_invalid_settings_change_nothing(memory: MemoryClient, case: str, change: dict[str, Any], message: str) -> None:
    call: dict[str, Any] = {
        "stability": "low",
        "user_id": ALICE,
        "review_cadence": timedelta(days=1),
        "decay_per_cycle": Decimal("0.1"),
        **change,
    }
    with pytest.raises(InvalidInput, match=message):
        memory.set_maintenance_setting(call.pop("stability"), **call)
    assert memory.get_maintenance_settings(user_id=ALICE) == DEFAULTS
    if case == "defaults owner":
        with pytest.raises(InvalidInput, match="names the defaults"):
            memory.reset_maintenance_settings(user_id="*")


def test_mark_reviewed_moves_the_schedule_and_settles_outcomes(memory: MemoryClient) -> None:
    node = memory.add_node("alice uses tabs", user_id=ALICE, stability="semi-stable")
    memory.record_outcome(node.id, "explicit_correction", user_id=ALICE)
    [row] = memory.maintenance_report(user_id=ALICE)
    assert row.recommendations == ("review_memory", "decrease_stability")
    reviewed = memory.mark_reviewed(node.id, user_id=ALICE)
    assert reviewed.version == 2 and reviewed.updated_at > node.updated_at
    assert reviewed.next_review_at == reviewed.updated_at + timedelta(days=30)
    assert memory.maintenance_report(user_id=ALICE) == [], "the review settled the correction"
    memory.record_outcome(node.id, "explicit_correction", user_id=ALICE)
    [row] = memory.maintenance_report(user_id=ALICE)
    assert row.explicit_corrections == 1, "only outcomes since the review count"
    when = datetime.now(UTC) + timedelta(days=400)
    assert memory.mark_reviewed(node.id, user_id=ALICE, next_review_at=when).next_review_at == when
    assert memory.get_node(node.id, user_id=ALICE).next_review_at == when
    journal, _ = memory.node_journal(node.id, user_id=ALICE)
    assert [r.op for r in journal] == ["create", "review", "review"]
    assert memory.verify_journal(user_id=ALICE) == []
    assert memory.verify_journal(user_id=ALICE, independent=True) == []


def test_mark_reviewed_refuses_the_past_and_missing_memories(memory: MemoryClient) -> None:
    node = memory.add_node("alice uses tabs", user_id=ALICE)
    with pytest.raises(InvalidInput, match=r"next_review_at must be in the future \(got 2020-01-02 03:04:05.5\+00\)"):
        memory.mark_reviewed(node.id, user_id=ALICE, next_review_at=datetime(2020, 1, 2, 3, 4, 5, 500000, tzinfo=UTC))
    with pytest.raises(NotFoundError):
        memory.mark_reviewed(node.id, user_id=BOB)
    with pytest.raises(NotFoundError):
        memory.mark_reviewed(uuid.uuid4(), user_id=ALICE)
    memory.archive_node(node.id, user_id=ALICE)
    with pytest.raises(NotFoundError):
        memory.mark_reviewed(node.id, user_id=ALICE)
    assert memory.get_node(node.id, user_id=ALICE).version == 2


def _report(memory: MemoryClient, **options: Any) -> dict[uuid.UUID, MaintenanceRecommendation]:
    return {row.node_id: row for row in memory.maintenance_report(user_id=ALICE, **options)}


def test_report_recommends_from_outcomes_and_schedule(memory: MemoryClient) -> None:
    now = datetime.now(UTC)
    add = memory.add_node
    quiet = add("nothing happened to this one", user_id=ALICE)
    overdue = add("overdue low", user_id=ALICE, confidence_base="0.5", next_review_at=now - timedelta(days=10))
    permanent = add(
        "overdue, permanent", user_id=ALICE, decay_profile="permanent", next_review_at=now - timedelta(days=1)
    )
    corrected = add("corrected twice", user_id=ALICE, stability="stable")
    confirmed = add("confirmed twice", user_id=ALICE)
    used = add("used five times", user_id=ALICE)
    unscheduled = add("never due", user_id=ALICE, next_review_at=None)
    foreign = add("bob's", user_id=BOB, next_review_at=now - timedelta(days=10))
    for _ in range(2):
        memory.record_outcome(corrected.id, "explicit_correction", user_id=ALICE)
    memory.reinforce(confirmed.id, user_id=ALICE)
    memory.record_outcome(confirmed.id, "explicit_reinforcement", user_id=ALICE)
    for _ in range(5):
        memory.record_outcome(used.id, "implicit_success", user_id=ALICE)
        memory.record_outcome(unscheduled.id, "neutral_exposure", user_id=ALICE)
    report = _report(memory)
    assert set(report) == {overdue.id, permanent.id, corrected.id, confirmed.id, used.id}
    assert quiet.id not in report and foreign.id not in report
    assert report[overdue.id] == MaintenanceRecommendation(
        node_id=overdue.id,
        recommendations=("decay_confidence", "review_due"),
        lifecycle_state="active",
        stability="low",
        suggested_stability=None,
        confidence_base=Decimal("0.5000"),
        suggested_confidence=Decimal("0.2000"),
        next_review_at=overdue.next_review_at,
        overdue_cycles=2,
        decayed_cycles=0,
        explicit_reinforcements=0,
        implicit_successes=0,
        explicit_corrections=0,
    )
    assert (report[permanent.id].recommendations, report[permanent.id].suggested_confidence) == (("review_due",), None)
    assert report[permanent.id].overdue_cycles == 1
    row = report[corrected.id]
    assert row.recommendations == ("review_memory", "decrease_stability", "mark_contested")
    assert (row.suggested_stability, row.explicit_corrections, row.overdue_cycles, row.decayed_cycles) == (
        "semi-stable",
        2,
        0,
        0,
    )
    row = report[confirmed.id]
    assert (row.recommendations, row.suggested_stability, row.explicit_reinforcements) == (
        ("increase_stability",),
        "semi-stable",
        2,
    )
    row = report[used.id]
    assert (row.recommendations, row.suggested_stability, row.implicit_successes) == (
        ("flag_for_review",),
        "semi-stable",
        5,
    )
    # As of before any outcome: only the schedule speaks.
    assert set(_report(memory, as_of=now - timedelta(days=5))) == {overdue.id}
    assert _report(memory, as_of=now - timedelta(days=5))[overdue.id].overdue_cycles == 1


def test_report_of_a_contested_memory_and_a_centuries_old_schedule(engine: Engine, memory: MemoryClient) -> None:
    now = datetime.now(UTC)
    old = memory.add_node(
        "due since 1900", user_id=ALICE, confidence_base="0.9", next_review_at=datetime(1900, 1, 1, tzinfo=UTC)
    )
    contested = memory.add_node("contested", user_id=ALICE, stability="semi-stable")
    engine.force_node(contested.id, lifecycle_state="contested")
    for _ in range(2):
        memory.record_outcome(contested.id, "explicit_correction", user_id=ALICE)
        memory.record_outcome(contested.id, "explicit_reinforcement", user_id=ALICE)
    report = _report(memory, as_of=now)
    assert report[old.id].suggested_confidence == Decimal(0)
    assert report[old.id].overdue_cycles == (now - datetime(1900, 1, 1, tzinfo=UTC)) // timedelta(days=7) + 1
    assert contested.id not in report, "its outcomes came after as_of"
    report = _report(memory)
    assert report[contested.id].recommendations == ("review_memory", "decrease_stability")
    assert report[contested.id].lifecycle_state == "contested"
    with pytest.raises(InvalidInput):
        memory.maintenance_report(user_id=" alice")
