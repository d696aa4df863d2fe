"""Snapshot generations and prompt assembly, one suite over both engines (issue 18, item 2).

Each test runs on PostgreSQL and on a memory pack (the ``engine`` fixture of
conformance_backends.py). Fixed node ids and content give the same generation
documents and ids on both, byte for byte, and both equal the document built here
independently from docs/SNAPSHOTS.md (RFC 8785 via the ``rfc8785`` package, ranking by
effective salience plus effective confidence computed with ``math.exp``).
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from prme_pg import IdempotencyConflict, InvalidInput, MemoryClient, NotFoundError
from prme_pg.journal import canonical_json

from .conformance_backends import Engine, engine_fixture, memory_fixture  # noqa: F401

ALICE = "alice"
RATES = {"permanent": 0.0, "slow": 0.005, "medium": 0.02, "fast": 0.07, "rapid": 0.2}


def nid(n: int) -> uuid.UUID:
    return uuid.UUID(int=(0x5A << 96) | n)


def document(user_id: str, scope: str, items: list[tuple[uuid.UUID, str, str]]) -> str:
    body = ",".join(canonical_json({"content": c, "id": str(i), "kind": k}) for i, k, c in items)
    return (
        '{"items":['
        + body
        + '],"scope":'
        + canonical_json(scope)
        + ',"user_id":'
        + canonical_json(user_id)
        + ',"version":1}'
    )


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def strength(salience: float, boost: float, confidence: float, profile: str, age_days: float) -> float:
    rate = RATES[profile]

    def factor(r: float) -> float:
        return 0.0 if r * age_days >= 700.0 else math.exp(-(r * age_days))

    eff_salience = min(1.0, max(0.0, salience * factor(rate) + boost * factor(0.10)))
    eff_confidence = min(1.0, max(0.0, confidence * factor(rate / 2.0)))
    return eff_salience + eff_confidence


def test_same_memories_give_the_same_generation_on_both_engines(memory: MemoryClient) -> None:
    # Salience decides the order here; ids break the tie of the last two.
    specs = [
        (nid(3), "0.3", "lives in Berlin"),
        (nid(1), "0.9", 'prefers tabs, "always"\n(and\ttabs)'),
        (nid(2), "0.6", "ünïcödé ☕ \u001f control"),
        (nid(5), "0.2", "b"),
        (nid(4), "0.2", "a"),
    ]
    for node_id, salience, content in specs:
        memory.add_node(content, user_id=ALICE, node_id=node_id, salience_base=Decimal(salience))
    memory.add_node("another scope", user_id=ALICE, scope="work")
    memory.add_node("another owner", user_id="bob")
    archived = memory.add_node("archived", user_id=ALICE, salience_base=Decimal("1"))
    memory.archive_node(archived.id, user_id=ALICE)

    expected = document(
        ALICE,
        "personal",
        [
            (nid(1), "fact", specs[1][2]),
            (nid(2), "fact", specs[2][2]),
            (nid(3), "fact", specs[0][2]),
            (nid(4), "fact", "a"),
            (nid(5), "fact", "b"),
        ],
    )
    result = memory.publish_snapshot("personal", user_id=ALICE)
    assert (result.generation_id, result.seq, result.previous_generation_id) == (sha(expected), 1, None)
    assert (result.item_count, result.byte_size, result.advanced) == (5, len(expected.encode()), True)
    current = memory.current_snapshot("personal", user_id=ALICE)
    assert current.document == expected
    assert (current.generation_id, current.seq, current.item_count) == (sha(expected), 1, 5)
    assert memory.get_snapshot("personal", sha(expected), user_id=ALICE).document == expected

    # The same content again writes nothing; a change advances the pointer by one.
    again = memory.publish_snapshot("personal", user_id=ALICE)
    assert (again.advanced, again.seq, again.previous_generation_id) == (False, 1, sha(expected))
    memory.archive_node(nid(4), user_id=ALICE)
    moved = memory.publish_snapshot("personal", user_id=ALICE, expected_generation_id=sha(expected))
    assert (moved.advanced, moved.seq, moved.previous_generation_id, moved.item_count) == (
        True,
        2,
        sha(expected),
        4,
    )
    old = memory.get_snapshot("personal", sha(expected), user_id=ALICE)
    assert (old.seq, old.document) == (1, expected), "an older generation stays readable, immutable"


def test_ranking_with_virtual_decay_is_the_same_on_both_engines(engine: Engine, memory: MemoryClient) -> None:
    now = datetime.now(UTC)
    cases = []
    for n, (profile, days, salience, boost, confidence) in enumerate(
        [
            ("permanent", 400.0, "0.5", "0", "0.5"),
            ("rapid", 1.5, "0.9", "0.3", "0.9"),
            ("fast", 10.25, "0.8", "0", "0.7"),
            ("medium", 30.0, "0.6", "0.5", "0.6"),
            ("slow", 3650.0, "1", "0", "1"),
            ("rapid", 4000.0, "1", "1", "1"),  # e^-800: exactly 0, not an underflow
            ("medium", -5.0, "0.4", "0", "0.4"),  # a reference after now counts as age 0
        ],
        start=1,
    ):
        node = memory.add_node(
            f"memory {n}",
            user_id=ALICE,
            node_id=nid(n),
            decay_profile=profile,
            salience_base=Decimal(salience),
            confidence_base=Decimal(confidence),
        )
        reference = now - timedelta(days=days)
        engine.force_node(node.id, reinforcement_boost=Decimal(boost), last_reinforced_at=reference)
        cases.append((nid(n), strength(float(salience), float(boost), float(confidence), profile, max(days, 0.0))))
    expected_order = [i for i, _ in sorted(cases, key=lambda case: (-case[1], case[0]))]
    memory.publish_snapshot("personal", user_id=ALICE)
    doc = memory.current_snapshot("personal", user_id=ALICE).document
    assert [uuid.UUID(item["id"]) for item in json.loads(doc)["items"]] == expected_order


def test_budgets_bound_the_selection_alike(memory: MemoryClient) -> None:
    for n, (salience, content) in enumerate([("0.9", "x" * 120), ("0.8", "short"), ("0.7", "tiny")], start=1):
        memory.add_node(content, user_id=ALICE, node_id=nid(n), salience_base=Decimal(salience))
    empty = len(document(ALICE, "personal", []).encode())
    item = len(canonical_json({"content": "short", "id": str(nid(2)), "kind": "fact"}).encode())
    # The long first memory does not fit; the shorter ones after it still may.
    result = memory.publish_snapshot("personal", user_id=ALICE, max_bytes=empty + item)
    assert result.item_count == 1
    assert result.generation_id == sha(document(ALICE, "personal", [(nid(2), "fact", "short")]))
    capped = memory.publish_snapshot("personal", user_id=ALICE, max_items=2)
    assert capped.item_count == 2
    assert capped.generation_id == sha(
        document(ALICE, "personal", [(nid(1), "fact", "x" * 120), (nid(2), "fact", "short")])
    )
    empty_other = len(document(ALICE, "other", []).encode())
    nothing = memory.publish_snapshot("other", user_id=ALICE, max_bytes=empty_other)
    assert (nothing.item_count, nothing.byte_size) == (0, empty_other)
    with pytest.raises(InvalidInput, match="max_bytes is too small for even an empty generation"):
        memory.publish_snapshot("personal", user_id=ALICE, max_bytes=empty - 1)


def test_errors_are_the_same_on_both_engines(memory: MemoryClient) -> None:
    with pytest.raises(NotFoundError, match="no snapshot has been published for this scope"):
        memory.current_snapshot("personal", user_id=ALICE)
    with pytest.raises(NotFoundError, match="snapshot generation not found"):
        memory.get_snapshot("personal", "0" * 64, user_id=ALICE)
    with pytest.raises(InvalidInput, match="generation_id must be 64 lowercase hex digits"):
        memory.get_snapshot("personal", "A" * 64, user_id=ALICE)
    with pytest.raises(InvalidInput, match="max_items must be between 1 and 10000"):
        memory.publish_snapshot("personal", user_id=ALICE, max_items=0)
    with pytest.raises(InvalidInput, match="max_bytes must be between 1 and 16777216"):
        memory.publish_snapshot("personal", user_id=ALICE, max_bytes=16777217)
    with pytest.raises(InvalidInput, match="expected_generation_id must be 64 lowercase hex digits"):
        memory.publish_snapshot("personal", user_id=ALICE, expected_generation_id="nope")
    with pytest.raises(InvalidInput, match="scope must match"):
        memory.publish_snapshot("Not A Scope", user_id=ALICE)
    first = memory.publish_snapshot("personal", user_id=ALICE, expected_generation_id="none")
    with pytest.raises(IdempotencyConflict, match="the current snapshot is not the expected generation"):
        memory.publish_snapshot("personal", user_id=ALICE, expected_generation_id="none")
    with pytest.raises(InvalidInput, match="budget_bytes must be between 1 and 16777216"):
        memory.assemble_prompt(["personal"], user_id=ALICE, budget_bytes=0)
    with pytest.raises(NotFoundError):
        memory.get_snapshot("personal", first.generation_id, user_id="bob")


def test_prompts_are_assembled_alike_within_the_budget(memory: MemoryClient) -> None:
    memory.add_node("prefers tabs", user_id=ALICE, node_id=nid(1), salience_base=Decimal("0.9"))
    memory.add_node("lives in\nBerlin", user_id=ALICE, node_id=nid(2), salience_base=Decimal("0.8"))
    memory.add_node("Fridays are frozen", user_id=ALICE, node_id=nid(3), scope="work")
    personal = memory.publish_snapshot("personal", user_id=ALICE)
    work = memory.publish_snapshot("work", user_id=ALICE)

    full = "[personal]\n- prefers tabs\n- lives in\n  Berlin\n\n[work]\n- Fridays are frozen\n"
    prompt = memory.assemble_prompt(["personal", "never", "work", "personal"], user_id=ALICE, budget_bytes=1000)
    assert prompt.prompt == full
    assert (prompt.byte_size, prompt.item_count, prompt.truncated) == (len(full), 3, False)
    assert prompt.generation_scopes == ("personal", "never", "work")
    assert prompt.generation_ids == (personal.generation_id, None, work.generation_id)

    # 30 bytes: the header and the first line (26 bytes); "- lives in\n  Berlin\n" does not fit, nor does
    # the work section with its header.
    cut = memory.assemble_prompt(["personal", "work"], user_id=ALICE, budget_bytes=30)
    assert cut.prompt == "[personal]\n- prefers tabs\n"
    assert (cut.byte_size, cut.item_count, cut.truncated) == (26, 1, True)
