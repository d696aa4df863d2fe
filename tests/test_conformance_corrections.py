"""Corrections on both engines: is_correction, link_correction, the inbox and resolve.

The pack evaluates prme.is_correction's expressions in Python (DuckDB's regular expressions
have no lookahead and no word boundaries), so every phrase of docs/MAINTENANCE.md's table,
and variations of each, must get the same answer from both engines (sql/postgres/220).
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from pathlib import Path

import pytest

from prme_pg import IdempotencyConflict, InvalidInput, MemoryClient, NotFoundError
from prme_pg.models import CorrectionMatch

from .conformance_backends import Engine, engine_fixture, memory_fixture  # noqa: F401
from .correction_phrases import phrases

ALICE = "alice"
BOB = "bob"


def _variations(message: str) -> list[str]:
    """The message as written, shouting, with typographic apostrophes, padded with blanks, after
    another sentence or clause, inside a word, and split over lines."""
    return [
        message,
        message.upper(),
        message.replace("'", "\u2019"),
        f"  {message}\t ",
        f"Fine. {message}",
        f"ok, {message}",
        f"x{message}",
        message.replace(" ", "\n", 1),
        message.replace(" ", "\r\n  ", 1),
        f"{message}\u2028and more",
    ]


def test_every_phrase_of_the_table_is_answered_as_listed(memory: MemoryClient) -> None:
    for message, expected in phrases():
        assert memory.is_correction(message) is expected, message


def test_both_engines_answer_every_variation_alike(db_dsn: str, tmp_path: Path) -> None:
    messages = [v for message, _ in phrases() for v in _variations(message)]
    messages += [
        "",
        " ",
        "no",
        "No.\n",
        "nope",
        "Never",
        "don't",
        "use it",
        "prefer to",
        "i said",
        "\uff2e\uff4f, \uff58",
    ]
    with MemoryClient(db_dsn) as postgres, MemoryClient(tmp_path / "pack") as pack:
        differ = [(m, a) for m in messages if (a := postgres.is_correction(m)) != pack.is_correction(m)]
    assert differ == []
    assert len(messages) > 400


def test_is_correction_refuses_a_message_over_64_kib(memory: MemoryClient) -> None:
    assert memory.is_correction("x" * 65536) is False
    with pytest.raises(InvalidInput, match="message must be at most 65536 bytes"):
        memory.is_correction("x" * 65537)


def test_one_match_is_linked_and_counted(engine: Engine, memory: MemoryClient) -> None:
    tabs = memory.add_node("alice indents code with tabs", user_id=ALICE)
    tea = memory.add_node("alice drinks green tea every morning", user_id=ALICE)
    link = memory.link_correction(
        "No, alice indents code with spaces now", [tabs.id, tea.id, tabs.id], user_id=ALICE, thread_id="t1"
    )
    assert (link.status, link.node_id, link.inbox_id) == ("linked", tabs.id, None)
    assert link.matches == (CorrectionMatch(tabs.id, Decimal("0.8000")),)
    [outcome] = memory.node_outcomes(tabs.id, user_id=ALICE)
    assert (outcome.id, outcome.outcome, outcome.recorded_by, outcome.thread_id) == (
        link.outcome_id,
        "explicit_correction",
        "link_correction",
        "t1",
    )
    assert outcome.notes == "No, alice indents code with spaces now" and outcome.node_version == 1
    summary = memory.outcome_summary(tabs.id, user_id=ALICE)
    assert (summary.explicit_corrections, summary.stability_by_outcomes) == (1, "low")
    assert memory.list_correction_inbox(user_id=ALICE) == []


def test_no_match_or_several_go_to_the_inbox(memory: MemoryClient) -> None:
    tabs = memory.add_node("alice indents code with tabs", user_id=ALICE)
    also = memory.add_node("alice indents python code with tabs", user_id=ALICE)
    archived = memory.add_node("alice indents code with tabs", user_id=ALICE)
    memory.archive_node(archived.id, user_id=ALICE)
    foreign = memory.add_node("alice indents code with tabs", user_id=BOB)
    both = memory.link_correction(
        "no, alice indents code with spaces", [also.id, tabs.id, tabs.id, archived.id, foreign.id], user_id=ALICE
    )
    assert both.status == "ambiguous" and both.node_id is None and both.outcome_id is None
    # 4 of 5 words each: equal overlaps, ties by id.
    tied = sorted([tabs.id, also.id])
    assert both.matches == tuple(CorrectionMatch(node_id, Decimal("0.8000")) for node_id in tied)
    none = memory.link_correction("Actually I moved to Berlin", [tabs.id], user_id=ALICE)
    assert (none.status, none.matches) == ("unmatched", ())
    empty = memory.link_correction("Actually I moved", [], user_id=ALICE)
    assert empty.status == "unmatched"
    inbox = memory.list_correction_inbox(user_id=ALICE)
    assert [e.id for e in inbox] == [both.inbox_id, none.inbox_id, empty.inbox_id]
    first = inbox[0]
    # A candidate listed twice is kept once, in the order first listed.
    assert first.candidate_node_ids == (also.id, tabs.id, archived.id, foreign.id)
    assert first.matched_node_ids == tuple(tied)
    assert (first.reason, first.resolution, first.thread_id) == ("ambiguous", None, None)
    assert (inbox[1].reason, inbox[1].matched_node_ids) == ("no_match", ())
    assert memory.list_correction_inbox(user_id=BOB) == []
    assert memory.list_correction_inbox(user_id=ALICE, max_count=1) == [first]
    for kept in (tabs, also):
        assert memory.outcome_summary(kept.id, user_id=ALICE).outcomes == 0


def test_resolving_links_or_dismisses_once(memory: MemoryClient) -> None:
    tabs = memory.add_node("alice indents code with tabs", user_id=ALICE)
    entry = memory.link_correction("Actually I moved to Berlin", [tabs.id], user_id=ALICE, thread_id="t")
    other = memory.link_correction("Actually I moved to Paris", [], user_id=ALICE)
    assert entry.inbox_id is not None and other.inbox_id is not None
    with pytest.raises(NotFoundError, match="inbox entry not found"):
        memory.resolve_correction(entry.inbox_id, tabs.id, user_id=BOB)
    with pytest.raises(NotFoundError, match="node not found"):
        memory.resolve_correction(entry.inbox_id, uuid.UUID(int=5), user_id=ALICE)
    linked = memory.resolve_correction(entry.inbox_id, tabs.id, user_id=ALICE)
    assert (linked.resolution, linked.resolved_node_id) == ("linked", tabs.id)
    assert linked.outcome_id is not None and linked.resolved_at is not None
    [outcome] = memory.node_outcomes(tabs.id, user_id=ALICE)
    assert (outcome.id, outcome.recorded_by, outcome.notes, outcome.thread_id) == (
        linked.outcome_id,
        "resolve_correction",
        "Actually I moved to Berlin",
        "t",
    )
    assert memory.resolve_correction(entry.inbox_id, tabs.id, user_id=ALICE) == linked, "the same again: a no-op"
    with pytest.raises(IdempotencyConflict, match="already resolved otherwise"):
        memory.resolve_correction(entry.inbox_id, None, user_id=ALICE)
    dismissed = memory.resolve_correction(other.inbox_id, None, user_id=ALICE)
    assert (dismissed.resolution, dismissed.resolved_node_id, dismissed.outcome_id) == ("dismissed", None, None)
    assert memory.list_correction_inbox(user_id=ALICE) == []
    assert memory.list_correction_inbox(user_id=ALICE, include_resolved=True) == [linked, dismissed]
    assert len(memory.node_outcomes(tabs.id, user_id=ALICE)) == 1


def test_invalid_link_correction_changes_nothing(memory: MemoryClient) -> None:
    tabs = memory.add_node("alice indents code with tabs", user_id=ALICE)
    with pytest.raises(InvalidInput):
        memory.link_correction("  ", [tabs.id], user_id=ALICE)
    with pytest.raises(InvalidInput):
        memory.link_correction("no, spaces", [uuid.uuid4() for _ in range(1001)], user_id=ALICE)
    with pytest.raises(InvalidInput):
        memory.link_correction("no, spaces", [tabs.id], user_id=ALICE, thread_id=" t")
    big = [memory.add_node("tabs " + "x" * 60000, user_id=ALICE).id for _ in range(18)]
    with pytest.raises(InvalidInput, match="at most 1 MiB"):
        memory.link_correction("no, spaces", big, user_id=ALICE)
    with pytest.raises(InvalidInput):
        memory.list_correction_inbox(user_id=ALICE, max_count=0)
    assert memory.list_correction_inbox(user_id=ALICE, include_resolved=True) == []
    assert memory.outcome_summary(tabs.id, user_id=ALICE).outcomes == 0
