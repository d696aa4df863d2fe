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
    assert str(report[old.id].suggested_confidence) == "0", "nothing left: PostgreSQL's integer 0"
    exact = memory.add_node(
        "exactly used up", user_id=ALICE, confidence_base="0.3", next_review_at=now - timedelta(days=10)
    )
    assert str(_report(memory, as_of=now)[exact.id].suggested_confidence) == "0.0000", "two cycles of 0.15: scale 4"
    assert report[old.id].overdue_cycles == (now - datetime(1900, 1, 1, tzinfo=UTC)) // timedelta(days=7) + 1
    assert contested.id not in report, "its outcomes came after as_of"
    report = _report(memory)
    assert report[contested.id].recommendations == ("review_memory", "decrease_stability")
    assert report[contested.id].lifecycle_state == "contested"
    with pytest.raises(InvalidInput):
        memory.maintenance_report(user_id=" alice")


# -- patches: sql/postgres/260_patches.sql --------------------------------------------


def _scenario(memory: MemoryClient) -> dict[str, Any]:
    """An overdue memory (2 cycles), a memory confirmed twice, one corrected twice and one
    used five times: every kind of op."""
    now = datetime.now(UTC)
    nodes = {
        "overdue": memory.add_node(
            "overdue", user_id=ALICE, confidence_base="0.5", next_review_at=now - timedelta(days=10)
        ),
        "confirmed": memory.add_node("confirmed " + "x" * 300, user_id=ALICE),
        "corrected": memory.add_node("corrected", user_id=ALICE, stability="stable"),
        "used": memory.add_node("used", user_id=ALICE),
    }
    memory.reinforce(nodes["confirmed"].id, user_id=ALICE)
    memory.record_outcome(nodes["confirmed"].id, "explicit_reinforcement", user_id=ALICE)
    for _ in range(2):
        memory.record_outcome(nodes["corrected"].id, "explicit_correction", user_id=ALICE)
    for _ in range(5):
        memory.record_outcome(nodes["used"].id, "implicit_success", user_id=ALICE)
    memory.record_outcome(nodes["used"].id, "neutral_exposure", user_id=ALICE)
    return nodes


def _op_shapes(patch_ops: tuple[dict[str, Any], ...]) -> list[tuple[Any, ...]]:
    return [
        (
            o["op"],
            o["recommendation"],
            o["updates"],
            o["risk"],
            o["requires_review"],
            o["default_selected"],
            o["status"],
        )
        for o in patch_ops
    ]


def test_a_patch_proposes_each_op_as_postgresql_does(memory: MemoryClient) -> None:
    nodes = _scenario(memory)
    patch = memory.maintenance_patch(user_id=ALICE)
    assert patch.as_of == patch.created_at
    assert [o["op_id"] for o in patch.ops] == [f"op_{n:03d}" for n in range(1, len(patch.ops) + 1)]
    # Ops come in memory (id) order, each memory's in decay, stability, contested order.
    order = sorted(nodes, key=lambda name: nodes[name].id)
    by_node: dict[str, list[dict[str, Any]]] = {name: [] for name in nodes}
    for o in patch.ops:
        name = next(n for n in nodes if str(nodes[n].id) == o["target"]["node_id"])
        by_node[name].append(o)
    assert [name for name in order for _ in by_node[name]] == [
        next(n for n in nodes if str(nodes[n].id) == o["target"]["node_id"]) for o in patch.ops
    ]
    assert _op_shapes(tuple(by_node["overdue"])) == [
        (
            "decay_confidence",
            "decay_confidence",
            {"confidence_base": {"from": 0.5, "to": 0.2}, "decay_cycles": {"from": 0, "to": 2}},
            "low",
            False,
            True,
            "pending",
        )
    ]
    assert by_node["overdue"][0]["reason"].startswith("overdue for review since ")
    assert by_node["overdue"][0]["reason"].endswith(": cycles 1 to 2 of 7 days decayed at -0.15 each")
    assert _op_shapes(tuple(by_node["confirmed"])) == [
        (
            "update_stability",
            "increase_stability",
            {"stability": {"from": "low", "to": "semi-stable"}},
            "low",
            False,
            True,
            "pending",
        )
    ]
    confirmed = by_node["confirmed"][0]
    assert confirmed["target"] == {
        "node_id": str(nodes["confirmed"].id),
        "version": 2,
        "content": ("confirmed " + "x" * 300)[:200],
    }
    assert confirmed["reason"] == "2 explicit reinforcements and no correction since the last review"
    assert (confirmed["applied_at"], confirmed["applied_mode"]) == (None, None)
    assert _op_shapes(tuple(by_node["corrected"])) == [
        (
            "update_stability",
            "decrease_stability",
            {"stability": {"from": "stable", "to": "semi-stable"}},
            "medium",
            True,
            True,
            "pending",
        ),
        (
            "mark_contested",
            "mark_contested",
            {"lifecycle_state": {"from": "active", "to": "contested"}},
            "high",
            True,
            False,
            "pending",
        ),
    ]
    assert by_node["corrected"][0]["reason"] == "2 explicit correction(s) since the last review"
    assert _op_shapes(tuple(by_node["used"])) == [
        (
            "update_stability",
            "flag_for_review",
            {"stability": {"from": "low", "to": "semi-stable"}},
            "medium",
            True,
            False,
            "pending",
        )
    ]
    assert memory.get_patch(patch.patch_id, user_id=ALICE) == patch
    with pytest.raises(NotFoundError, match="patch not found"):
        memory.get_patch(patch.patch_id, user_id=BOB)


def test_applying_a_patch_auto_then_manual_once_each(memory: MemoryClient) -> None:
    nodes = _scenario(memory)
    patch = memory.maintenance_patch(user_id=ALICE)
    ids = {o["recommendation"]: o["op_id"] for o in patch.ops}
    auto = memory.apply_patch(patch.patch_id, user_id=ALICE, mode="auto")
    assert sorted((a.op_id, a.op, a.status, a.detail, a.node_version) for a in auto) == sorted(
        [
            (ids["decay_confidence"], "decay_confidence", "applied", None, 2),
            (ids["increase_stability"], "update_stability", "applied", None, 3),
        ]
    )
    overdue = memory.get_node(nodes["overdue"].id, user_id=ALICE)
    assert (overdue.confidence_base, overdue.version) == (Decimal("0.2000"), 2)
    confirmed = memory.get_node(nodes["confirmed"].id, user_id=ALICE)
    assert confirmed.stability == "semi-stable"
    assert confirmed.next_review_at == confirmed.updated_at + timedelta(days=30)
    again = memory.apply_patch(patch.patch_id, user_id=ALICE, mode="auto")
    assert {a.status for a in again} == {"already_applied"}
    assert all(
        a.detail is not None and a.detail.endswith(" in auto mode") and a.detail.startswith("applied at ")
        for a in again
    )
    manual = memory.apply_patch(patch.patch_id, [ids["mark_contested"], ids["decrease_stability"]], user_id=ALICE)
    assert [(a.op_id, a.status) for a in manual] == sorted(
        [(ids["decrease_stability"], "applied"), (ids["mark_contested"], "applied")]
    )
    corrected = memory.get_node(nodes["corrected"].id, user_id=ALICE)
    assert (corrected.stability, corrected.lifecycle_state, corrected.version) == ("semi-stable", "contested", 3)
    stored = memory.get_patch(patch.patch_id, user_id=ALICE)
    applied = {o["op_id"]: (o["status"], o["applied_mode"]) for o in stored.ops}
    assert applied[ids["decay_confidence"]] == ("applied", "auto")
    assert applied[ids["mark_contested"]] == ("applied", "manual")
    assert applied[ids["flag_for_review"]] == ("pending", None)
    assert all(o["applied_at"] is None or o["applied_at"].endswith("+00:00") for o in stored.ops)
    # The decay is charged once: a new patch proposes no decay for the same cycles, and the
    # settled corrections and confirmations call for nothing more.
    later = memory.maintenance_patch(user_id=ALICE)
    assert [o["recommendation"] for o in later.ops] == ["flag_for_review"]
    journal, _ = memory.node_journal(nodes["corrected"].id, user_id=ALICE)
    assert [r.op for r in journal] == ["create", "update_stability", "mark_contested"]
    assert memory.verify_journal(user_id=ALICE) == []
    assert memory.verify_journal(user_id=ALICE, independent=True) == []


def test_an_op_whose_memory_changed_is_stale(engine: Engine, memory: MemoryClient) -> None:
    nodes = _scenario(memory)
    patch = memory.maintenance_patch(user_id=ALICE)
    ids = {o["recommendation"]: o["op_id"] for o in patch.ops}
    engine.force_node(nodes["overdue"].id, confidence_base=Decimal("0.45"))
    engine.force_node(nodes["used"].id, stability="stable")
    memory.archive_node(nodes["corrected"].id, user_id=ALICE)
    memory.mark_reviewed(nodes["confirmed"].id, user_id=ALICE)
    applied = memory.apply_patch(patch.patch_id, sorted(ids.values()), user_id=ALICE)
    assert {a.op_id: (a.status, a.detail) for a in applied} == {
        ids["decay_confidence"]: ("stale", "confidence_base is 0.45 now, the patch expected 0.5"),
        ids["increase_stability"]: ("applied", None),
        ids["decrease_stability"]: ("stale", "the memory is archived"),
        ids["mark_contested"]: ("stale", "the memory is archived"),
        ids["flag_for_review"]: ("stale", "stability is stable now, the patch expected low"),
    }
    again = memory.apply_patch(patch.patch_id, [ids["decay_confidence"]], user_id=ALICE)
    assert [a.status for a in again] == ["stale"], "a stale op stays pending"


def test_decay_is_charged_once_per_cycle(memory: MemoryClient) -> None:
    now = datetime.now(UTC)
    node = memory.add_node("overdue", user_id=ALICE, confidence_base="0.9", next_review_at=now - timedelta(days=15))
    first = memory.maintenance_patch(user_id=ALICE, as_of=now - timedelta(days=10))
    assert [o["updates"] for o in first.ops] == [
        {"confidence_base": {"from": 0.9, "to": 0.75}, "decay_cycles": {"from": 0, "to": 1}}
    ]
    assert [a.status for a in memory.apply_patch(first.patch_id, user_id=ALICE, mode="auto")] == ["applied"]
    second = memory.maintenance_patch(user_id=ALICE)
    # Two more cycles have begun since (15 days overdue, a 7-day cadence): only they decay.
    assert [o["updates"] for o in second.ops] == [
        {"confidence_base": {"from": 0.75, "to": 0.45}, "decay_cycles": {"from": 1, "to": 3}}
    ]
    memory.apply_patch(second.patch_id, user_id=ALICE, mode="auto")
    assert memory.get_node(node.id, user_id=ALICE).confidence_base == Decimal("0.4500")
    assert memory.maintenance_patch(user_id=ALICE).ops == ()
    assert memory.maintenance_report(user_id=ALICE)[0].recommendations == ("review_due",)


BAD_APPLY: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("bad mode", {"mode": "all"}, InvalidInput, "mode must be manual or auto"),
    ("manual without ids", {"op_ids": None}, InvalidInput, "op_ids must list them"),
    ("auto with ids", {"mode": "auto"}, InvalidInput, "op_ids must be null"),
    ("long id", {"op_ids": ["op_" + "1" * 62]}, InvalidInput, "at most 64 characters"),
    ("unknown ids", {"op_ids": ["op_001", "op_999", "x"]}, NotFoundError, r"unknown op_ids: op_999, x\)"),
    ("foreign", {"user_id": BOB}, NotFoundError, "patch not found"),
]


@pytest.mark.parametrize(("case", "change", "error", "message"), BAD_APPLY, ids=[c for c, _, _, _ in BAD_APPLY])
def test_invalid_apply_changes_nothing(
    memory: MemoryClient, case: str, change: dict[str, Any], error: type[Exception], message: str
) -> None:
    _scenario(memory)
    patch = memory.maintenance_patch(user_id=ALICE)
    call: dict[str, Any] = {"op_ids": ["op_001"], "user_id": ALICE, "mode": "manual", **change}
    with pytest.raises(error, match=message):
        memory.apply_patch(patch.patch_id, call.pop("op_ids"), **call)
    assert memory.get_patch(patch.patch_id, user_id=ALICE) == patch


def test_a_patch_cannot_be_for_the_future(memory: MemoryClient) -> None:
    with pytest.raises(
        InvalidInput, match=r"as_of of a patch must not be in the future \(got 2999-01-01 00:00:00\+00\)"
    ):
        memory.maintenance_patch(user_id=ALICE, as_of=datetime(2999, 1, 1, tzinfo=UTC))
