"""Outcomes on both engines: record_outcome, its key, the summary and a memory's outcome events.

PostgreSQL's model since migration 0014 on both: a confirmation writes no outcome row, its
explicit_reinforcement outcome is its journal record (sql/postgres/210, 215). Each test runs
on PostgreSQL and on a memory pack (the ``engine`` fixture of conformance_backends.py) and
asserts the same rows, counts and errors; ids and times are compared where the test fixes them.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import pytest

from prme_pg import IdempotencyConflict, InvalidInput, MemoryClient, NotFoundError, Outcome

from .conformance_backends import Engine, engine_fixture, memory_fixture  # noqa: F401

ALICE = "alice"
BOB = "bob"

_COMPARED = ("user_id", "outcome", "weight", "evidence_id", "profile_id", "thread_id", "notes", "request_id")


def _shape(outcome: Outcome) -> dict[str, Any]:
    return {name: getattr(outcome, name) for name in (*_COMPARED, "recorded_by", "node_version", "replayed")}


def _outcome_rows(engine: Engine) -> int:
    return int(engine._sql("SELECT count(*) FROM prme.outcomes", "SELECT count(*) FROM prme.outcomes", [])[0][0])


def test_record_outcome_returns_the_row_typed(memory: MemoryClient) -> None:
    node = memory.add_node("prefers tabs", user_id=ALICE)
    event = memory.add_event("user: tabs please", user_id=ALICE)
    key = uuid.uuid4()
    recorded = memory.record_outcome(
        node.id,
        "implicit_success",
        user_id=ALICE,
        evidence_id=event.id,
        profile_id="agent-7",
        thread_id="thread 12",
        notes="used it é",
        request_id=key,
    )
    assert _shape(recorded) == {
        "user_id": ALICE,
        "outcome": "implicit_success",
        "weight": Decimal("0.20"),
        "evidence_id": event.id,
        "profile_id": "agent-7",
        "thread_id": "thread 12",
        "notes": "used it é",
        "request_id": key,
        "recorded_by": "record_outcome",
        "node_version": 1,
        "replayed": False,
    }
    assert isinstance(recorded.id, uuid.UUID) and recorded.node_id == node.id
    assert recorded.created_at.tzinfo is not None
    weights = {
        kind: memory.record_outcome(node.id, kind, user_id=ALICE).weight
        for kind in ("explicit_reinforcement", "neutral_exposure", "explicit_correction")
    }
    assert weights == {
        "explicit_reinforcement": Decimal("1.00"),
        "neutral_exposure": Decimal("0.00"),
        "explicit_correction": Decimal("-1.00"),
    }
    # An outcome never changes its memory.
    assert memory.get_node(node.id, user_id=ALICE) == node


def test_a_key_replays_its_outcome_and_refuses_anything_else(engine: Engine, memory: MemoryClient) -> None:
    node = memory.add_node("prefers tabs", user_id=ALICE)
    other = memory.add_node("prefers vim", user_id=ALICE)
    key = uuid.uuid4()
    first = memory.record_outcome(node.id, "implicit_success", user_id=ALICE, notes="n", request_id=key)
    again = memory.record_outcome(node.id, "implicit_success", user_id=ALICE, notes="n", request_id=key)
    assert again.replayed and again.id == first.id and again.created_at == first.created_at
    assert _outcome_rows(engine) == 1
    for change in ({"outcome": "explicit_correction"}, {"notes": "m"}, {"profile_id": "p"}, {"thread_id": "t"}):
        call: dict[str, Any] = {"outcome": "implicit_success", "notes": "n", **change}
        with pytest.raises(IdempotencyConflict, match="another outcome, profile_id, thread_id or notes"):
            memory.record_outcome(node.id, call.pop("outcome"), user_id=ALICE, request_id=key, **call)
    with pytest.raises(IdempotencyConflict, match="one operation, node and evidence"):
        memory.record_outcome(other.id, "implicit_success", user_id=ALICE, notes="n", request_id=key)
    # One key space with confirmations: a confirmation's key is its journal record.
    with pytest.raises(IdempotencyConflict):
        memory.reinforce(node.id, user_id=ALICE, request_id=key)
    confirmed = uuid.uuid4()
    memory.reinforce(node.id, user_id=ALICE, request_id=confirmed)
    with pytest.raises(IdempotencyConflict):
        memory.record_outcome(node.id, "implicit_success", user_id=ALICE, request_id=confirmed)
    assert _outcome_rows(engine) == 1
    # A replay is answered even once the memory is archived; a new outcome is not.
    memory.archive_node(node.id, user_id=ALICE)
    assert memory.record_outcome(node.id, "implicit_success", user_id=ALICE, notes="n", request_id=key).replayed
    with pytest.raises(NotFoundError):
        memory.record_outcome(node.id, "implicit_success", user_id=ALICE)


BAD_OUTCOMES: list[tuple[str, dict[str, Any], type[Exception]]] = [
    ("unknown outcome", {"outcome": "liked"}, InvalidInput),
    ("empty profile", {"profile_id": ""}, InvalidInput),
    ("long profile", {"profile_id": "p" * 257}, InvalidInput),
    ("spaced thread", {"thread_id": " t"}, InvalidInput),
    ("control thread", {"thread_id": "t\x85"}, InvalidInput),
    ("huge notes", {"notes": "x" * 65537}, InvalidInput),
    ("bad user", {"user_id": " alice"}, InvalidInput),
    ("foreign node", {"user_id": BOB}, NotFoundError),
    ("missing node", {"node_id": uuid.UUID(int=7)}, NotFoundError),
    ("missing evidence", {"evidence_id": uuid.UUID(int=8)}, NotFoundError),
]


@pytest.mark.parametrize(("case", "change", "error"), BAD_OUTCOMES, ids=[c for c, _, _ in BAD_OUTCOMES])
def test_invalid_record_outcome_changes_nothing(
    engine: Engine, memory: MemoryClient, case: str, change: dict[str, Any], error: type[Exception]
) -> None:
    node = memory.add_node("prefers tabs", user_id=ALICE)
    call: dict[str, Any] = {"node_id": node.id, "outcome": "implicit_success", "user_id": ALICE, **change}
    before = (engine.counts(), _outcome_rows(engine))
    with pytest.raises(error):
        memory.record_outcome(call.pop("node_id"), call.pop("outcome"), request_id=uuid.uuid4(), **call)
    assert (engine.counts(), _outcome_rows(engine)) == before


def test_evidence_must_share_the_memorys_owner_and_scope(memory: MemoryClient) -> None:
    node = memory.add_node("prefers tabs", user_id=ALICE, scope="work")
    elsewhere = memory.add_event("said so at home", user_id=ALICE, scope="personal")
    foreign = memory.add_event("said so", user_id=BOB, scope="work")
    for event in (elsewhere, foreign):
        with pytest.raises(NotFoundError, match="evidence not found"):
            memory.record_outcome(node.id, "implicit_success", user_id=ALICE, evidence_id=event.id)


def test_summary_counts_outcome_rows_and_confirmations(memory: MemoryClient) -> None:
    node = memory.add_node("prefers tabs", user_id=ALICE)
    empty = memory.outcome_summary(node.id, user_id=ALICE)
    assert (empty.outcomes, empty.score, empty.stability_by_outcomes, empty.last_outcome_at) == (
        0,
        Decimal("0"),
        "semi-stable",
        None,
    )
    for _ in range(3):
        memory.record_outcome(node.id, "implicit_success", user_id=ALICE)
    memory.record_outcome(node.id, "neutral_exposure", user_id=ALICE)
    confirmed = memory.reinforce(node.id, user_id=ALICE)
    summary = memory.outcome_summary(node.id, user_id=ALICE)
    assert (
        summary.explicit_reinforcements,
        summary.implicit_successes,
        summary.neutral_exposures,
        summary.explicit_corrections,
        summary.outcomes,
    ) == (1, 3, 1, 0, 5)
    assert summary.score == Decimal("1.6") and summary.stability_by_outcomes == "semi-stable"
    assert summary.last_outcome_at == confirmed.last_reinforced_at
    memory.record_outcome(node.id, "explicit_reinforcement", user_id=ALICE)
    assert memory.outcome_summary(node.id, user_id=ALICE).stability_by_outcomes == "stable"
    corrected = memory.record_outcome(node.id, "explicit_correction", user_id=ALICE)
    summary = memory.outcome_summary(node.id, user_id=ALICE)
    assert (summary.explicit_corrections, summary.score, summary.stability_by_outcomes) == (1, Decimal("1.6"), "low")
    assert summary.last_outcome_at == corrected.created_at
    with pytest.raises(NotFoundError):
        memory.outcome_summary(node.id, user_id=BOB)


def test_node_outcomes_lists_rows_and_confirmations_newest_first(memory: MemoryClient) -> None:
    node = memory.add_node("prefers tabs", user_id=ALICE)
    event = memory.add_event("yes, tabs", user_id=ALICE)
    first = memory.record_outcome(node.id, "implicit_success", user_id=ALICE)
    key = uuid.uuid4()
    memory.reinforce(node.id, user_id=ALICE, evidence_id=event.id, request_id=key)
    last = memory.record_outcome(node.id, "explicit_correction", user_id=ALICE, thread_id="t")
    listed = memory.node_outcomes(node.id, user_id=ALICE)
    assert [(o.outcome, o.recorded_by, o.node_version) for o in listed] == [
        ("explicit_correction", "record_outcome", 2),
        ("explicit_reinforcement", "reinforce", 2),
        ("implicit_success", "record_outcome", 1),
    ]
    assert listed[0] == last and listed[2] == first
    confirmation = listed[1]
    assert (confirmation.weight, confirmation.evidence_id, confirmation.request_id) == (Decimal("1.00"), event.id, key)
    assert confirmation.profile_id is None and confirmation.notes is None and not confirmation.replayed
    assert memory.node_outcomes(node.id, user_id=ALICE, max_count=1) == [last]
    with pytest.raises(InvalidInput):
        memory.node_outcomes(node.id, user_id=ALICE, max_count=0)
    with pytest.raises(NotFoundError):
        memory.node_outcomes(node.id, user_id=BOB)
