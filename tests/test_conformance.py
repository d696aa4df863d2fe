"""One suite, two engines: PostgreSQL and the DuckDB memory pack behave alike.

Every rule of docs/DESIGN.md sections 3 (reinforce) and 4 (the journal) is checked here
through the public clients, once per engine (the ``engine`` fixture of
conformance_backends.py), and the PostgreSQL half once more through a PL/Proxy
database (``postgres-proxy``, docs/SCALING.md). The last part compares the engines byte for byte: the
same fixed inputs give the same journal record text and checksum on both, and
Python's own verifier (prme_pg.journal) accepts what either writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from prme_pg import (
    IdempotencyConflict,
    InvalidInput,
    MemoryClient,
    Node,
    NotFoundError,
)
from prme_pg.backends.duckdb import PACK_FILE, DuckDBBackend, node_state_text, reinforce_entry
from prme_pg.journal import canonical_json, checksum, is_canonical, verify_records
from prme_pg.models import JournalIssue

from .conformance_backends import (  # noqa: F401
    Engine,
    SteppingClock,
    counting_ids,
    engine_with_proxy_fixture,
    memory_fixture,
)

ALICE = "alice"
BOB = "bob"
THREADS = 16

boost_cap = Decimal("0.5")
confidence_cap = Decimal("0.95")


def expected_boost(b: Decimal) -> Decimal:
    return max(b, min(b + Decimal("0.15"), boost_cap))


def expected_confidence(c: Decimal) -> Decimal:
    return max(c, min(c + Decimal("0.05"), confidence_cap))


def unchanged(engine: Engine) -> Callable[[], None]:
    """Snapshot the row counts; the returned check asserts nothing was written since."""
    before = engine.counts()

    def check() -> None:
        assert engine.counts() == before

    return check


def fresh(memory: MemoryClient, user_id: str = ALICE, **options: Any) -> Node:
    return memory.add_node("the user prefers dark mode", user_id=user_id, **options)


def assert_journal_verifies(memory: MemoryClient, *users: str) -> None:
    for user_id in users:
        assert memory.verify_journal(user_id=user_id) == []
        assert memory.verify_journal(user_id=user_id, independent=True) == []


# -- creating and reading ---------------------------------------------------------------


def test_add_node_returns_every_column_typed(memory: MemoryClient) -> None:
    node = memory.add_node(
        "likes tea",
        user_id=ALICE,
        scope="work",
        namespace="agent-1",
        kind="preference",
        confidence_base=0.65,
        salience_base=Decimal("0.3"),
        stability="semi-stable",
        decay_profile="slow",
        next_review_at=datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=2))),
    )
    assert isinstance(node.id, uuid.UUID)
    assert (node.user_id, node.namespace, node.scope, node.kind) == (ALICE, "agent-1", "work", "preference")
    assert node.confidence_base == Decimal("0.65") and isinstance(node.confidence_base, Decimal)
    assert node.salience_base == Decimal("0.3")
    assert node.reinforcement_boost == 0
    assert node.last_reinforced_at is None
    assert node.evidence_refs == ()
    assert node.next_review_at == datetime(2030, 1, 2, 1, 4, 5, 678901, tzinfo=UTC)
    assert node.next_review_at.tzinfo is UTC
    assert node.created_at.tzinfo is UTC and node.created_at == node.updated_at
    assert (node.stability, node.lifecycle_state, node.decay_profile) == ("semi-stable", "active", "slow")
    assert node.version == 1 and node.replayed is False
    assert memory.get_node(node.id, user_id=ALICE) == node
    assert memory.get_node(str(node.id), user_id=ALICE) == node


@pytest.mark.parametrize(("stability", "cadence"), [("low", 7), ("semi-stable", 30), ("stable", 90)])
def test_a_new_memory_is_due_one_cadence_after_it_was_created(
    memory: MemoryClient, stability: str, cadence: int
) -> None:
    """No date given: the first review is one review cadence of its stability away (the
    default settings), so decay happens without the caller managing dates."""
    node = fresh(memory, stability=stability)
    assert node.next_review_at == node.created_at + timedelta(days=cadence)
    assert memory.get_node(node.id, user_id=ALICE).next_review_at == node.next_review_at


def test_a_new_memory_with_a_time_or_none_keeps_it(memory: MemoryClient) -> None:
    """A given time is the first review; None, given explicitly, is no review schedule."""
    when = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    assert fresh(memory, next_review_at=when).next_review_at == when
    unscheduled = fresh(memory, next_review_at=None)
    assert unscheduled.next_review_at is None
    assert memory.get_node(unscheduled.id, user_id=ALICE).next_review_at is None


def test_add_node_with_given_id_and_reuse(engine: Engine, memory: MemoryClient) -> None:
    node_id = uuid.uuid4()
    node = fresh(memory, node_id=node_id)
    assert node.id == node_id
    check = unchanged(engine)
    with pytest.raises(IdempotencyConflict):
        fresh(memory, node_id=node_id)
    check()
    # Primary keys lead with user_id: another owner may hold the same id.
    assert fresh(memory, BOB, node_id=node_id).id == node_id


def test_add_event(engine: Engine, memory: MemoryClient) -> None:
    when = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    event = memory.add_event(
        "user: dark mode please", user_id=ALICE, payload={"turn": 3, "text": "é"}, occurred_at=when
    )
    assert event.payload == {"turn": 3, "text": "é"}
    assert event.occurred_at == when and event.created_at.tzinfo is UTC
    assert (event.kind, event.scope, event.namespace) == ("message", "personal", "default")
    default = memory.add_event("no time given", user_id=ALICE)
    assert default.occurred_at == default.created_at and default.payload == {}
    check = unchanged(engine)
    with pytest.raises(IdempotencyConflict):
        memory.add_event("again", user_id=ALICE, event_id=event.id)
    check()


BAD_NODE_ARGUMENTS: list[tuple[str, dict[str, Any]]] = [
    ("empty user", {"user_id": ""}),
    ("null user", {"user_id": None}),
    ("spaced user", {"user_id": " alice"}),
    ("control user", {"user_id": "al\nice"}),
    ("long user", {"user_id": "u" * 257}),
    ("bad scope", {"scope": "Personal"}),
    ("empty scope", {"scope": ""}),
    ("metachar scope", {"scope": "x'; DROP TABLE prme.nodes; --"}),
    ("long namespace", {"namespace": "n" * 64}),
    ("bad kind", {"kind": "1fact"}),
    ("empty content", {"content": ""}),
    ("blank content", {"content": "   "}),
    ("whitespace content", {"content": " \t\n\r\f\v"}),
    ("huge content", {"content": "x" * 65537}),
    ("nul content", {"content": "a\x00b"}),
    ("negative", {"confidence_base": Decimal("-0.0001")}),
    ("above one", {"salience_base": Decimal("1.0001")}),
    ("five places", {"confidence_base": Decimal("0.12345")}),
    ("nan", {"confidence_base": Decimal("NaN")}),
    ("float noise", {"confidence_base": 0.1 + 0.2}),
    ("stability", {"stability": "rock"}),
    ("decay", {"decay_profile": "never"}),
    ("naive time", {"next_review_at": datetime(2030, 1, 1)}),
]


@pytest.mark.parametrize(("case", "arguments"), BAD_NODE_ARGUMENTS, ids=[c for c, _ in BAD_NODE_ARGUMENTS])
def test_invalid_add_node_changes_nothing(
    engine: Engine, memory: MemoryClient, case: str, arguments: dict[str, Any]
) -> None:
    call: dict[str, Any] = {"content": "a memory", "user_id": ALICE, **arguments}
    check = unchanged(engine)
    with pytest.raises(InvalidInput):
        memory.add_node(call.pop("content"), **call)
    check()


def test_content_at_the_limit_is_accepted(memory: MemoryClient) -> None:
    content = "é" * 32768  # 65536 bytes of UTF-8
    assert memory.add_node(content, user_id=ALICE).content == content


@pytest.mark.parametrize("payload", [[1, 2], "text", {"x": "\x00"}, {"big": "x" * 70000}])
def test_invalid_add_event_changes_nothing(engine: Engine, memory: MemoryClient, payload: Any) -> None:
    check = unchanged(engine)
    with pytest.raises(InvalidInput):
        memory.add_event("evidence", user_id=ALICE, payload=payload)
    check()


# -- reinforce: caps ------------------------------------------------------------------

CAP_STARTS = [
    "0",
    "0.0001",
    "0.1",
    "0.3",
    "0.3499",
    "0.35",
    "0.3501",
    "0.4999",
    "0.5",
    "0.5001",
    "0.8",
    "0.8999",
    "0.9",
    "0.9499",
    "0.95",
    "0.9501",
    "0.99",
    "1",
]


@pytest.mark.parametrize("start", CAP_STARTS)
def test_caps_from_any_starting_value(engine: Engine, memory: MemoryClient, start: str) -> None:
    value = Decimal(start)
    node = fresh(memory, confidence_base=value, salience_base=Decimal("0.42"))
    engine.force_node(node.id, reinforcement_boost=value)
    after = memory.reinforce(node.id, user_id=ALICE)
    assert after.reinforcement_boost == expected_boost(value)
    assert after.confidence_base == expected_confidence(value)
    assert after.reinforcement_boost >= value and after.confidence_base >= value  # never reduced
    assert after.salience_base == Decimal("0.42")
    assert after.version == 2


fractions = st.integers(min_value=0, max_value=10000).map(lambda n: Decimal(n).scaleb(-4))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(boost=fractions, confidence=fractions, times=st.integers(min_value=1, max_value=4))
def test_caps_property(engine: Engine, memory: MemoryClient, boost: Decimal, confidence: Decimal, times: int) -> None:
    node = fresh(memory, confidence_base=confidence)
    engine.force_node(node.id, reinforcement_boost=boost)
    b, c = boost, confidence
    for _ in range(times):
        after = memory.reinforce(node.id, user_id=ALICE)
        b, c = expected_boost(b), expected_confidence(c)
        assert (after.reinforcement_boost, after.confidence_base) == (b, c)
    assert after.version == 1 + times


def test_reinforce_sets_times_evidence_and_version(memory: MemoryClient) -> None:
    node = fresh(memory)
    first = memory.add_event("once", user_id=ALICE)
    second = memory.add_event("twice", user_id=ALICE)
    a = memory.reinforce(node.id, first.id, user_id=ALICE)
    b = memory.reinforce(node.id, first.id, user_id=ALICE)
    c = memory.reinforce(node.id, second.id, user_id=ALICE)
    d = memory.reinforce(node.id, user_id=ALICE)
    # Appended in order, never de-duplicated; no evidence appends nothing.
    assert d.evidence_refs == (first.id, first.id, second.id)
    assert [n.version for n in (a, b, c, d)] == [2, 3, 4, 5]
    assert a.last_reinforced_at == a.updated_at and a.updated_at >= node.updated_at
    assert d.created_at == node.created_at
    assert memory.get_node(node.id, user_id=ALICE) == d
    assert_journal_verifies(memory, ALICE)


# -- reinforce: idempotency -------------------------------------------------------------


def test_replay_returns_current_node_without_changes(engine: Engine, memory: MemoryClient) -> None:
    node = fresh(memory)
    evidence = memory.add_event("yes", user_id=ALICE)
    key = uuid.uuid4()
    first = memory.reinforce(node.id, evidence.id, user_id=ALICE, request_id=key)
    assert first.replayed is False and first.version == 2
    later = memory.reinforce(node.id, user_id=ALICE)  # another confirmation, no key
    check = unchanged(engine)
    retry = memory.reinforce(node.id, evidence.id, user_id=ALICE, request_id=str(key))
    check()
    assert retry.replayed is True
    # The current node (showing the later change), not a copy of the first answer.
    assert retry == Node(**{**_fields(later), "replayed": True})
    assert memory.get_node(node.id, user_id=ALICE) == later
    assert_journal_verifies(memory, ALICE)


def _fields(node: Node) -> dict[str, Any]:
    return {name: getattr(node, name) for name in Node.__dataclass_fields__}


def test_calls_without_request_id_count_separately(memory: MemoryClient) -> None:
    node = fresh(memory)
    results = [memory.reinforce(node.id, user_id=ALICE) for _ in range(3)]
    assert [r.version for r in results] == [2, 3, 4]
    assert not any(r.replayed for r in results)


def test_concurrent_same_key_threads_count_once(engine: Engine) -> None:
    memory = engine.client()
    node = fresh(memory)
    evidence = memory.add_event("yes", user_id=ALICE)
    key = uuid.uuid4()
    barrier = threading.Barrier(THREADS)
    results: list[Node | BaseException] = []
    lock = threading.Lock()

    def confirm() -> None:
        barrier.wait(30)
        try:
            result: Node | BaseException = memory.reinforce(node.id, evidence.id, user_id=ALICE, request_id=key)
        except BaseException as exc:  # recorded for the assertions
            result = exc
        with lock:
            results.append(result)

    threads = [threading.Thread(target=confirm) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    nodes = [r for r in results if isinstance(r, Node)]
    assert len(nodes) == THREADS, results
    assert sum(not n.replayed for n in nodes) == 1
    final = memory.get_node(node.id, user_id=ALICE)
    assert final.version == 2 and final.reinforcement_boost == Decimal("0.15")
    assert final.evidence_refs == (evidence.id,)
    assert engine.count("journal", ALICE) == 2 and engine.keys(ALICE) == 1
    assert_journal_verifies(memory, ALICE)


def test_concurrent_distinct_keys_threads_all_count(engine: Engine) -> None:
    memory = engine.client()
    node = fresh(memory)
    barrier = threading.Barrier(THREADS)

    def confirm() -> None:
        barrier.wait(30)
        memory.reinforce(node.id, user_id=ALICE, request_id=uuid.uuid4())

    threads = [threading.Thread(target=confirm) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    final = memory.get_node(node.id, user_id=ALICE)
    assert final.version == 1 + THREADS
    assert (final.reinforcement_boost, final.confidence_base) == (boost_cap, confidence_cap)
    assert engine.keys(ALICE) == THREADS
    assert_journal_verifies(memory, ALICE)


def test_concurrent_same_key_asyncio_tasks_count_once(engine: Engine) -> None:
    async def scenario() -> tuple[list[Node], Node]:
        async with engine.aclient() as memory:
            node = await memory.add_node("async memory", user_id=ALICE)
            key = uuid.uuid4()
            results = await asyncio.gather(
                *(memory.reinforce(node.id, user_id=ALICE, request_id=key) for _ in range(THREADS))
            )
            assert await memory.verify_journal(user_id=ALICE) == []
            assert await memory.verify_journal(user_id=ALICE, independent=True) == []
            return results, await memory.get_node(node.id, user_id=ALICE)

    results, final = asyncio.run(scenario())
    assert sum(not r.replayed for r in results) == 1
    assert final.version == 2 and final.reinforcement_boost == Decimal("0.15")
    assert engine.count("journal", ALICE) == 2


def test_conflicting_reuse_raises_and_changes_nothing(engine: Engine, memory: MemoryClient) -> None:
    node = fresh(memory)
    other = fresh(memory)
    evidence = memory.add_event("one", user_id=ALICE)
    second = memory.add_event("two", user_id=ALICE)
    key = uuid.uuid4()
    memory.reinforce(node.id, evidence.id, user_id=ALICE, request_id=key)
    check = unchanged(engine)
    with pytest.raises(IdempotencyConflict):
        memory.reinforce(other.id, evidence.id, user_id=ALICE, request_id=key)  # other node
    with pytest.raises(IdempotencyConflict):
        memory.reinforce(node.id, second.id, user_id=ALICE, request_id=key)  # other evidence
    with pytest.raises(IdempotencyConflict):
        memory.reinforce(node.id, user_id=ALICE, request_id=key)  # no evidence
    check()
    assert memory.get_node(other.id, user_id=ALICE).version == 1
    assert memory.get_node(node.id, user_id=ALICE).version == 2
    assert_journal_verifies(memory, ALICE)


def test_keys_are_scoped_by_owner_and_namespace(engine: Engine, memory: MemoryClient) -> None:
    key = uuid.uuid4()
    alice = fresh(memory, ALICE)
    bob = fresh(memory, BOB)
    elsewhere = fresh(memory, ALICE, namespace="other")
    a = memory.reinforce(alice.id, user_id=ALICE, request_id=key)
    # Bob's identical UUID is his own key: it counts, and says nothing about Alice's.
    b = memory.reinforce(bob.id, user_id=BOB, request_id=key)
    # So is Alice's in another namespace.
    c = memory.reinforce(elsewhere.id, user_id=ALICE, request_id=key)
    assert [r.replayed for r in (a, b, c)] == [False, False, False]
    assert [r.version for r in (a, b, c)] == [2, 2, 2]
    assert memory.reinforce(bob.id, user_id=BOB, request_id=key).replayed is True
    assert engine.keys() == 3


def test_another_owners_node_is_not_found(engine: Engine, memory: MemoryClient) -> None:
    node = fresh(memory, ALICE)
    key = uuid.uuid4()
    memory.reinforce(node.id, user_id=ALICE, request_id=key)
    check = unchanged(engine)
    with pytest.raises(NotFoundError):
        memory.get_node(node.id, user_id=BOB)
    with pytest.raises(NotFoundError):
        memory.reinforce(node.id, user_id=BOB)
    with pytest.raises(NotFoundError):
        memory.reinforce(node.id, user_id=BOB, request_id=key)  # even with Alice's key
    with pytest.raises(NotFoundError):
        memory.archive_node(node.id, user_id=BOB)
    with pytest.raises(NotFoundError):
        memory.replay_node(node.id, user_id=BOB)
    with pytest.raises(NotFoundError):
        memory.reinforce(uuid.uuid4(), user_id=ALICE)  # missing altogether
    check()
    assert memory.list_nodes(user_id=BOB) == []
    assert memory.get_node(node.id, user_id=ALICE).version == 2


@pytest.mark.parametrize("where", ["other owner", "other scope", "missing"])
def test_evidence_from_another_owner_or_scope_is_not_found(engine: Engine, memory: MemoryClient, where: str) -> None:
    node = fresh(memory, ALICE, scope="personal")
    if where == "other owner":
        evidence_id = memory.add_event("bob's words", user_id=BOB, scope="personal").id
    elif where == "other scope":
        evidence_id = memory.add_event("work talk", user_id=ALICE, scope="work").id
    else:
        evidence_id = uuid.uuid4()
    key = uuid.uuid4()
    check = unchanged(engine)
    with pytest.raises(NotFoundError):
        memory.reinforce(node.id, evidence_id, user_id=ALICE, request_id=key)
    check()  # an aborted call leaves no change and no reserved key
    good = memory.add_event("alice's words", user_id=ALICE, scope="personal")
    counted = memory.reinforce(node.id, good.id, user_id=ALICE, request_id=key)
    assert counted.replayed is False and counted.evidence_refs == (good.id,)


def test_replay_after_archive_restores_nothing(engine: Engine, memory: MemoryClient) -> None:
    node = fresh(memory)
    key = uuid.uuid4()
    memory.reinforce(node.id, user_id=ALICE, request_id=key)
    archived = memory.archive_node(node.id, user_id=ALICE)
    assert archived.lifecycle_state == "archived" and archived.version == 3
    check = unchanged(engine)
    retry = memory.reinforce(node.id, user_id=ALICE, request_id=key)
    check()
    assert retry.replayed is True
    assert (retry.lifecycle_state, retry.version) == ("archived", 3)
    with pytest.raises(NotFoundError):
        memory.reinforce(node.id, user_id=ALICE)
    with pytest.raises(NotFoundError):
        memory.reinforce(node.id, user_id=ALICE, request_id=uuid.uuid4())
    with pytest.raises(NotFoundError):
        memory.archive_node(node.id, user_id=ALICE)
    check()
    assert memory.get_node(node.id, user_id=ALICE) == archived  # still readable by its owner
    assert_journal_verifies(memory, ALICE)


def test_retry_after_reopen_is_a_no_op(engine: Engine) -> None:
    key = uuid.uuid4()
    with MemoryClient(engine.dsn) as first:
        node = fresh(first)
        counted = first.reinforce(node.id, user_id=ALICE, request_id=key)
    assert first.closed
    with MemoryClient(engine.dsn) as second:  # a new pool, or the pack reopened
        retry = second.reinforce(node.id, user_id=ALICE, request_id=key)
        assert retry.replayed is True and retry.version == counted.version == 2
        assert second.get_node(node.id, user_id=ALICE).reinforcement_boost == Decimal("0.15")
        assert_journal_verifies(second, ALICE)


def test_cancelled_async_call_that_committed_is_replayed(engine: Engine) -> None:
    """The caller gives up on a confirmation after it committed; the retry counts nothing.

    On PostgreSQL the task is cancelled once the key is visible from another
    connection (committed); whether the client had read the answer yet, it is lost.
    On a pack, a gated clock stops the call inside its transaction, the task is
    cancelled there, and the call still runs to completion under the pack lock:
    the retry waits for it and is answered from its key.
    """
    inside, go = threading.Event(), threading.Event()
    armed = False

    def gated_clock() -> datetime:
        if armed:
            inside.set()
            go.wait(30)
        return datetime.now(UTC)

    options: dict[str, Any] = {"clock": gated_clock} if engine.name == "duckdb" else {}

    async def scenario() -> tuple[bool, Node, Node]:
        nonlocal armed
        async with engine.aclient(**options) as memory:
            node = await memory.add_node("cancel me", user_id=ALICE)
            key = uuid.uuid4()
            armed = True
            task = asyncio.create_task(memory.reinforce(node.id, user_id=ALICE, request_id=key))
            if engine.name == "duckdb":
                assert await asyncio.to_thread(inside.wait, 30)  # mid-transaction
            else:
                while not await asyncio.to_thread(engine.key_committed, ALICE, key):
                    await asyncio.sleep(0.001)
            task.cancel()
            armed = False
            go.set()
            cancelled = False
            try:
                await task
            except asyncio.CancelledError:
                cancelled = True
            retry = await memory.reinforce(node.id, user_id=ALICE, request_id=key)
            return cancelled, retry, await memory.get_node(node.id, user_id=ALICE)

    cancelled, retry, final = asyncio.run(scenario())
    if engine.name == "duckdb":
        assert cancelled  # the caller saw a cancellation, yet the call committed
    assert retry.replayed is True
    assert retry.version == final.version == 2
    assert engine.count("journal", ALICE) == 2 and engine.keys(ALICE) == 1


def test_cancelled_async_call_before_commit_counts_once_with_retry(engine: Engine) -> None:
    """Cancelled while it waits (PostgreSQL: on the row lock; pack: on the pack lock):
    whether or not it went on to commit, call plus retry count exactly once."""

    async def scenario() -> Node:
        async with engine.aclient() as memory:
            node = await memory.add_node("cancel me early", user_id=ALICE)
            key = uuid.uuid4()
            release = threading.Event()
            held = threading.Event()

            def hold() -> None:
                if engine.name == "postgres":
                    with psycopg.connect(engine.target) as conn:
                        conn.execute("SELECT 1 FROM prme.nodes WHERE id = %s FOR UPDATE", [node.id])
                        held.set()
                        release.wait(30)
                else:
                    backend = engine.client().backend
                    assert isinstance(backend, DuckDBBackend)
                    with backend.lock:
                        held.set()
                        release.wait(30)

            holder = threading.Thread(target=hold)
            holder.start()
            await asyncio.to_thread(held.wait, 30)
            task = asyncio.create_task(memory.reinforce(node.id, user_id=ALICE, request_id=key))
            await asyncio.sleep(0.2)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            release.set()
            await asyncio.to_thread(holder.join, 30)
            retry = await memory.reinforce(node.id, user_id=ALICE, request_id=key)
            assert retry.version == 2
            return await memory.get_node(node.id, user_id=ALICE)

    final = asyncio.run(scenario())
    assert final.version == 2 and final.reinforcement_boost == Decimal("0.15")
    assert engine.keys(ALICE) == 1


# -- the journal ------------------------------------------------------------------------


def _workload(memory: MemoryClient, key: uuid.UUID | None = None) -> list[Node]:
    texts = ("plain", 'quote " and \\ backslash', "tab\tnew\nline \x01 é 日本 😀 \u2028")
    nodes = [memory.add_node(text, user_id=ALICE) for text in texts]
    evidence = memory.add_event("evidence", user_id=ALICE)
    key = key or uuid.uuid4()
    memory.reinforce(nodes[0].id, evidence.id, user_id=ALICE, request_id=key)
    memory.reinforce(nodes[0].id, evidence.id, user_id=ALICE, request_id=key)  # replay
    memory.reinforce(nodes[1].id, user_id=ALICE)
    memory.reinforce(nodes[1].id, evidence.id, user_id=ALICE)
    memory.archive_node(nodes[2].id, user_id=ALICE)
    fresh(memory, BOB)
    return nodes


def test_journal_verifies_and_replays(memory: MemoryClient) -> None:
    nodes = _workload(memory)
    assert_journal_verifies(memory, ALICE, BOB)
    records, heads = memory.journal_records(user_id=ALICE)
    assert len(records) == 3 + 1 + 2 + 1
    assert len(heads) == 3
    for record in records:
        assert record.checksum == checksum(record.record)
        assert is_canonical(record.record)
    for node in nodes:
        replay = memory.replay_node(node.id, user_id=ALICE)
        current = memory.get_node(node.id, user_id=ALICE)
        assert replay.matches is True and replay.problem is None
        assert replay.records == current.version
        assert replay.stored == replay.replayed
        assert replay.stored is not None and replay.stored["version"] == current.version
        assert replay.stored["confidence_base"] == current.confidence_base


def test_journal_records_follow_the_format(memory: MemoryClient) -> None:
    node = fresh(memory)
    evidence = memory.add_event("e", user_id=ALICE)
    key = uuid.uuid4()
    memory.reinforce(node.id, evidence.id, user_id=ALICE, request_id=key)
    records, _ = memory.journal_records(user_id=ALICE)
    create, confirm = sorted(records, key=lambda r: r.node_version)
    doc = json.loads(confirm.record)
    assert sorted(doc) == [
        "after",
        "before",
        "evidence_id",
        "node_id",
        "op",
        "operation_id",
        "policy",
        "prev_checksum",
        "recorded_at",
        "request_id",
        "user_id",
        "version",
    ]
    assert (doc["op"], doc["policy"], doc["version"]) == ("reinforce", "additive_caps_v1", 2)
    assert doc["request_id"] == str(key) and doc["evidence_id"] == str(evidence.id)
    assert doc["prev_checksum"] == create.checksum == confirm.prev_checksum
    assert doc["before"] == json.loads(create.record)["after"]
    assert '"confidence_base":0.55,' in confirm.record and '"reinforcement_boost":0.15,' in confirm.record
    assert doc["recorded_at"].endswith("Z") and len(doc["recorded_at"]) == len("2024-01-01T00:00:00.000000Z")
    assert "last_checksum" not in doc["after"]
    assert json.loads(create.record)["before"] is None and create.prev_checksum is None


def _problems(issues: list[Any]) -> list[tuple[int, str]]:
    return sorted((i.node_version, i.problem) for i in issues)


def test_verify_reports_a_tampered_record(engine: Engine, memory: MemoryClient) -> None:
    node = fresh(memory)
    memory.reinforce(node.id, user_id=ALICE)
    memory.reinforce(node.id, user_id=ALICE)
    records, _ = memory.journal_records(user_id=ALICE)
    second = next(r for r in records if r.node_version == 2)
    engine.set_record(node.id, 2, second.record.replace('"reinforcement_boost":0.15', '"reinforcement_boost":0.5'))
    expected = [(2, "checksum_mismatch"), (3, "continuity_break")]
    assert _problems(memory.verify_journal(user_id=ALICE)) == expected
    assert _problems(memory.verify_journal(user_id=ALICE, independent=True)) == expected
    replay = memory.replay_node(node.id, user_id=ALICE)
    assert replay.matches is False and replay.records == 2
    assert replay.problem == "record 2: after does not follow from before under additive_caps_v1"


def test_verify_reports_a_deleted_newest_record(engine: Engine, memory: MemoryClient) -> None:
    node = fresh(memory)
    memory.reinforce(node.id, user_id=ALICE)
    engine.delete_record(node.id, 2)
    expected = [(2, "head_mismatch")]
    assert _problems(memory.verify_journal(user_id=ALICE)) == expected
    assert _problems(memory.verify_journal(user_id=ALICE, independent=True)) == expected
    replay = memory.replay_node(node.id, user_id=ALICE)
    assert (replay.matches, replay.records, replay.problem) == (False, 1, "stored row differs from replay")


def test_verify_reports_a_deleted_node(engine: Engine, memory: MemoryClient) -> None:
    """A node row deleted with its journal left behind: the chain still verifies, so the
    missing row is the one thing to report; the export keeps the records, without a head."""
    kept, gone = fresh(memory), fresh(memory)
    memory.reinforce(gone.id, user_id=ALICE)
    engine.delete_node(gone.id)
    expected = [JournalIssue(gone.id, 2, "node_missing", "no node row for its 2 journal record(s)")]
    assert memory.verify_journal(user_id=ALICE) == expected
    assert memory.verify_journal(user_id=ALICE, independent=True) == expected
    records, heads = memory.journal_records(user_id=ALICE)
    assert sorted((r.node_id == gone.id, r.node_version) for r in records) == [(False, 1), (True, 1), (True, 2)]
    assert [head.node_id for head in heads] == [kept.id]
    assert verify_records(records) == [], "without heads, the records alone verify"


def test_verify_reports_garbage_and_a_broken_chain(engine: Engine, memory: MemoryClient) -> None:
    node = fresh(memory)
    for _ in range(3):
        memory.reinforce(node.id, user_id=ALICE)
    engine.set_record(node.id, 2, "not json at all")
    issues = memory.verify_journal(user_id=ALICE)
    assert _problems(issues) == [(2, "checksum_mismatch"), (2, "malformed_record"), (3, "continuity_break")]
    independent = memory.verify_journal(user_id=ALICE, independent=True)
    assert _problems(independent) == _problems(issues)
    replay = memory.replay_node(node.id, user_id=ALICE)
    assert (replay.matches, replay.records, replay.problem) == (False, 2, "record 2 is not valid JSON")


def test_replay_reports_a_row_changed_behind_the_journal(engine: Engine, memory: MemoryClient) -> None:
    node = fresh(memory)
    memory.reinforce(node.id, user_id=ALICE)
    engine.force_node(node.id, confidence_base=Decimal("0.9"))
    replay = memory.replay_node(node.id, user_id=ALICE)
    assert (replay.matches, replay.records, replay.problem) == (False, 2, "stored row differs from replay")
    assert replay.stored is not None and replay.stored["confidence_base"] == Decimal("0.9")
    assert replay.replayed is not None and replay.replayed["confidence_base"] == Decimal("0.55")


def test_a_v1_record_verifies_and_v2_chains_onto_it(engine: Engine, memory: MemoryClient) -> None:
    """A version 1 record (no request_id, no prev_checksum), written as an older release
    left it, verifies under its own checksum on both engines and in Python; the next
    record links to it."""
    created = "2024-05-06T07:08:09.123456Z"
    node_id = uuid.UUID("00000000-0000-4000-8000-0000000000b1")
    state = {
        "confidence_base": 0.6, "content": "prefers tabs", "created_at": created, "decay_profile": "medium",
        "evidence_refs": [], "id": str(node_id), "kind": "fact", "last_reinforced_at": None,
        "lifecycle_state": "active", "namespace": "default", "next_review_at": None, "reinforcement_boost": 0,
        "salience_base": 0.5, "scope": "personal", "stability": "low", "updated_at": created,
        "user_id": ALICE, "version": 1,
    }  # fmt: skip
    record = canonical_json({
        "version": 1, "op": "create", "policy": None, "operation_id": "00000000-0000-4000-8000-0000000000a1",
        "user_id": ALICE, "node_id": str(node_id), "evidence_id": None, "before": None, "after": state,
        "recorded_at": created,
    })  # fmt: skip
    node_sql = (
        "INSERT INTO prme.nodes (id, user_id, content, confidence_base, created_at, updated_at, version, "
        "last_checksum) VALUES ({p}, 'alice', 'prefers tabs', 0.6, {p}, {p}, 1, {p})"
    )
    journal_sql = (
        "INSERT INTO prme.journal (user_id, node_id, node_version, record_version, op, operation_id, record, "
        "checksum, recorded_at) VALUES ('alice', {p}, 1, 1, 'create', '00000000-0000-4000-8000-0000000000a1', "
        "{p}, {p}, {p})"
    )
    when = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    engine._sql(node_sql.format(p="%s"), node_sql.format(p="?"), [node_id, when, when, checksum(record)])
    engine._sql(journal_sql.format(p="%s"), journal_sql.format(p="?"), [node_id, record, checksum(record), when])
    assert_journal_verifies(memory, ALICE)
    after = memory.reinforce(node_id, user_id=ALICE, request_id=uuid.uuid4())
    assert after.version == 2 and after.confidence_base == Decimal("0.65")
    records, _ = memory.journal_records(user_id=ALICE)
    first, second = sorted(records, key=lambda r: r.node_version)
    assert (first.record_version, first.record, first.prev_checksum) == (1, record, None)
    assert second.record_version == 2 and second.prev_checksum == checksum(record)
    assert json.loads(second.record)["before"] == state
    assert_journal_verifies(memory, ALICE)
    assert memory.replay_node(node_id, user_id=ALICE).matches


def test_iter_nodes_pages_by_id(memory: MemoryClient) -> None:
    made = {fresh(memory).id for _ in range(23)} | {fresh(memory, namespace="b").id for _ in range(4)}
    fresh(memory, BOB)
    every = list(memory.iter_nodes(user_id=ALICE, page_size=5))
    assert [n.id for n in every] == sorted(made)
    assert len(list(memory.iter_nodes(user_id=ALICE, namespace="b", page_size=2))) == 4
    page = memory.list_nodes(user_id=ALICE, after_node_id=every[9].id, max_count=3)
    assert [n.id for n in page] == [n.id for n in every[10:13]]
    with pytest.raises(InvalidInput):
        memory.list_nodes(user_id=ALICE, max_count=0)


# -- byte identity across the engines -------------------------------------------------------
# The pure builders of both engines, fed the same fixed values, must agree byte for byte.

_NODE_COLUMNS = [
    "id",
    "user_id",
    "namespace",
    "scope",
    "kind",
    "content",
    "confidence_base",
    "salience_base",
    "reinforcement_boost",
    "last_reinforced_at",
    "evidence_refs",
    "stability",
    "next_review_at",
    "lifecycle_state",
    "decay_profile",
    "created_at",
    "updated_at",
    "version",
]
_PG_TYPES = [
    "uuid",
    "text",
    "text",
    "text",
    "text",
    "text",
    "numeric",
    "numeric",
    "numeric",
    "timestamptz",
    "uuid[]",
    "text",
    "timestamptz",
    "text",
    "text",
    "timestamptz",
    "timestamptz",
    "bigint",
]
_DUCK_TYPES = [
    "UUID",
    "VARCHAR",
    "VARCHAR",
    "VARCHAR",
    "VARCHAR",
    "VARCHAR",
    "DECIMAL(5,4)",
    "DECIMAL(5,4)",
    "DECIMAL(5,4)",
    "TIMESTAMPTZ",
    "UUID[]",
    "VARCHAR",
    "TIMESTAMPTZ",
    "VARCHAR",
    "VARCHAR",
    "TIMESTAMPTZ",
    "TIMESTAMPTZ",
    "BIGINT",
]
# json (not jsonb) keeps each value's text, so numeric scale survives the trip into the row;
# populating by name keeps working when derived columns are added to prme.nodes.
_PG_NODE_STATE = (
    "SELECT prme._node_state(json_populate_record(NULL::prme.nodes, json_build_object("
    + ", ".join(f"'{c}', %s::{t}" for c, t in zip(_NODE_COLUMNS, _PG_TYPES, strict=True))
    + ", 'last_checksum', repeat('0', 64))))"
)
_DUCK_NODE_STATE = (
    "SELECT prme.node_state({"
    + ", ".join(f"'{c}': CAST(? AS {t})" for c, t in zip(_NODE_COLUMNS, _DUCK_TYPES, strict=True))
    + "})"
)
_PG_RECORD = (
    "SELECT prme._journal_record_v2(%s, %s, %s::uuid, %s::uuid, %s, %s::uuid, %s::uuid, %s, %s, %s, %s::timestamptz)"
)
_DUCK_RECORD = (
    "SELECT prme.journal_record_v2(?, ?, CAST(? AS UUID), CAST(? AS UUID), ?, CAST(? AS UUID), "
    "CAST(? AS UUID), ?, ?, ?, CAST(? AS TIMESTAMPTZ))"
)

T0 = datetime(2024, 3, 1, 12, 0, 0, 0, tzinfo=UTC)
ID = uuid.UUID("0188f3a0-1c2b-7d4e-8f90-a1b2c3d4e5f6")
E1 = uuid.UUID("11111111-2222-4333-8444-555555555555")
E2 = uuid.UUID("aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee")


def _state(**changes: Any) -> list[Any]:
    base: dict[str, Any] = {
        "id": ID,
        "user_id": "alice",
        "namespace": "default",
        "scope": "personal",
        "kind": "fact",
        "content": "the user prefers dark mode",
        "confidence_base": Decimal("0.5"),
        "salience_base": Decimal("0.5"),
        "reinforcement_boost": Decimal("0"),
        "last_reinforced_at": None,
        "evidence_refs": [],
        "stability": "low",
        "next_review_at": None,
        "lifecycle_state": "active",
        "decay_profile": "medium",
        "created_at": T0,
        "updated_at": T0,
        "version": 1,
    }
    base.update(changes)
    return [base[c] for c in _NODE_COLUMNS]


STATES = {
    "created": _state(),
    "numbers": _state(
        confidence_base=Decimal("0.6500"), salience_base=Decimal("1.0000"), reinforcement_boost=Decimal("0.0001")
    ),
    "zeros": _state(confidence_base=Decimal("0"), salience_base=Decimal("0.0000"), reinforcement_boost=Decimal("1")),
    "reinforced": _state(
        confidence_base=Decimal("0.55"),
        reinforcement_boost=Decimal("0.15"),
        last_reinforced_at=T0 + timedelta(microseconds=1),
        evidence_refs=[E1, E2, E1],
        updated_at=T0 + timedelta(microseconds=1),
        version=2,
    ),
    "times": _state(
        created_at=datetime(1, 1, 1, tzinfo=UTC),
        updated_at=datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        next_review_at=datetime(2030, 6, 1, 8, 0, tzinfo=timezone(timedelta(hours=-7))),
    ),
    "escapes": _state(
        content='quote " backslash \\ slash / tab \t newline \n cr \r ff \f bs \b '
        "bell \x07 unit \x1f del \x7f nbsp \xa0 é 日本語 😀 \u2028 \u2029 \ufeff",
        user_id='o\'brien "quoted"',
        kind="a-b_c",
        scope="s1",
        namespace="n-2",
    ),
    "archived": _state(
        lifecycle_state="archived", stability="stable", decay_profile="permanent", version=9_007_199_254_740_993
    ),
}


@pytest.fixture
def duck() -> Any:
    """A throwaway pack's DuckDB connection (the macros installed)."""
    with duckdb.connect() as con:
        for script in sorted((Path(__file__).parent.parent / "sql" / "duckdb").glob("*.sql")):
            con.execute(script.read_text())
        yield con


@pytest.mark.parametrize("name", list(STATES))
def test_node_state_is_byte_identical(conn: psycopg.Connection[Any], duck: Any, name: str) -> None:
    values = STATES[name]
    pg = conn.execute(_PG_NODE_STATE.encode(), values).fetchone()[0]  # type: ignore[index]
    dk = duck.execute(_DUCK_NODE_STATE, values).fetchone()[0]
    assert pg.encode() == dk.encode()
    # The pack's Python builder of a confirmation's states (issue 15), too.
    assert node_state_text(dict(zip(_NODE_COLUMNS, values, strict=True))).encode() == pg.encode()
    if name != "archived":  # 2**53 + 1 is no ECMAScript number: JCS cannot round-trip it
        assert is_canonical(pg)


RECORDS = {
    "create": ("create", None, None, None, None, None, "created"),
    "reinforce": ("reinforce", "additive_caps_v1", uuid.UUID(int=7), E1, None, "created", "reinforced"),
    "escaped op": ('re"in\\force', "pol\ticy", None, None, "0" * 64, "escapes", "numbers"),
    "archive": ("archive", None, None, None, "f" * 64, "reinforced", "times"),
}


@pytest.mark.parametrize("name", list(RECORDS))
def test_journal_record_is_byte_identical(conn: psycopg.Connection[Any], duck: Any, name: str) -> None:
    op, policy, request_id, evidence_id, prev, before_name, after_name = RECORDS[name]

    def state(state_name: str | None) -> str | None:
        if state_name is None:
            return None
        return conn.execute(_PG_NODE_STATE.encode(), STATES[state_name]).fetchone()[0]  # type: ignore[index, no-any-return]

    before, after = state(before_name), state(after_name)
    args = [
        op,
        policy,
        uuid.UUID(int=42),
        request_id,
        "alice",
        ID,
        evidence_id,
        before,
        after,
        prev,
        T0 + timedelta(microseconds=123456),
    ]
    pg = conn.execute(_PG_RECORD.encode(), args).fetchone()[0]  # type: ignore[index]
    dk = duck.execute(_DUCK_RECORD, args).fetchone()[0]
    assert pg.encode("utf-8") == dk.encode("utf-8")
    pg_sum = conn.execute("SELECT prme._sha256_hex(%s)", [pg]).fetchone()[0]  # type: ignore[index]
    dk_sum = duck.execute("SELECT sha256(?)", [dk]).fetchone()[0]
    assert pg_sum == dk_sum == hashlib.sha256(pg.encode("utf-8")).hexdigest()
    assert is_canonical(pg)


@pytest.mark.parametrize("name", ["created", "numbers", "zeros", "reinforced", "escapes"])
@pytest.mark.parametrize("evidence_id", [None, E1])
def test_pack_confirmation_record_is_byte_identical(
    conn: psycopg.Connection[Any], name: str, evidence_id: uuid.UUID | None
) -> None:
    """The pack builds a confirmation's after state and record in Python (issue 15): the same
    bytes as PostgreSQL's caps, _node_state and _journal_record_v2 for the same node."""
    node = {**dict(zip(_NODE_COLUMNS, STATES[name], strict=True)), "last_checksum": "a" * 64}
    now = T0 + timedelta(days=1, microseconds=7)
    after, record, digest = reinforce_entry(node, evidence_id, uuid.UUID(int=9), uuid.UUID(int=42), now)
    caps = conn.execute(
        "SELECT prme._reinforced_boost(%s), prme._reinforced_confidence(%s)",
        [node["reinforcement_boost"], node["confidence_base"]],
    ).fetchone()
    assert caps == (after["reinforcement_boost"], after["confidence_base"])
    states = [
        conn.execute(_PG_NODE_STATE.encode(), [state[c] for c in _NODE_COLUMNS]).fetchone()[0]  # type: ignore[index]
        for state in (node, after)
    ]
    args = [
        "reinforce", "additive_caps_v1", uuid.UUID(int=42), uuid.UUID(int=9), node["user_id"], node["id"],
        evidence_id, states[0], states[1], "a" * 64, now,
    ]  # fmt: skip
    pg = conn.execute(_PG_RECORD.encode(), args).fetchone()[0]  # type: ignore[index]
    assert record.encode("utf-8") == pg.encode("utf-8")
    assert digest == hashlib.sha256(pg.encode("utf-8")).hexdigest()


TRICKY = st.text(
    alphabet=st.sampled_from(["\\", '"', "u", "0", "1", "b", "F", "\x1f", "\x0b", "\x08", "\n", "é", "😀"]),
    min_size=1,
)
ANY_TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.one_of(ANY_TEXT, TRICKY))
@example(content="\\\x1f")
@example(content="\\u001F \\\\u001f \x1f\x1f")
def test_any_text_escapes_identically(conn: psycopg.Connection[Any], duck: Any, content: str) -> None:
    values = _state(content=content, user_id=content[:256])
    pg = conn.execute(_PG_NODE_STATE.encode(), values).fetchone()[0]  # type: ignore[index]
    dk = duck.execute(_DUCK_NODE_STATE, values).fetchone()[0]
    assert pg == dk
    assert node_state_text(dict(zip(_NODE_COLUMNS, values, strict=True))) == pg
    assert is_canonical(pg)


def test_every_fraction_is_spelled_identically(conn: psycopg.Connection[Any], duck: Any) -> None:
    pg = conn.execute(
        "SELECT array_agg(trim_scale((n / 10000.0)::numeric(5,4))::text ORDER BY n) FROM generate_series(0, 10000) n"
    ).fetchone()[0]  # type: ignore[index]
    states = duck.execute(
        "SELECT list(prme.node_state({'confidence_base': CAST(CAST(n AS DECIMAL(9,0)) / 10000 AS DECIMAL(5,4)), "
        "'content': 'c', 'created_at': TIMESTAMPTZ '2024-01-01 00:00:00+00', 'decay_profile': 'medium', "
        "'evidence_refs': CAST([] AS UUID[]), 'id': uuid(), 'kind': 'fact', 'last_reinforced_at': NULL, "
        "'lifecycle_state': 'active', 'namespace': 'default', 'next_review_at': NULL, "
        "'reinforcement_boost': 0, 'salience_base': 1, 'scope': 'personal', 'stability': 'low', "
        "'updated_at': TIMESTAMPTZ '2024-01-01 00:00:00+00', 'user_id': 'u', 'version': 1}) ORDER BY n) "
        "FROM range(0, 10001) t(n)"
    ).fetchone()[0]
    assert [json.loads(state, parse_float=str)["confidence_base"] for state in states] == [
        text if "." in text else int(text) for text in pg
    ]
    assert all(f'{{"confidence_base":{text},' in state for text, state in zip(pg, states, strict=True))
    # The Python verifier's float round trip keeps each of them canonical.
    assert all(is_canonical(f'{{"x":{text}}}') for text in pg)


def _rebuild_on_postgres(conn: psycopg.Connection[Any], record: str) -> str:
    """A record rebuilt from its own fields by PostgreSQL's pure builders."""
    doc = json.loads(record)

    def state(value: Any) -> str | None:
        if value is None:
            return None
        row = conn.execute(
            "SELECT prme._node_state(json_populate_record(NULL::prme.nodes, %s::json))",
            [json.dumps({**value, "last_checksum": "0" * 64})],
        ).fetchone()
        return row[0]  # type: ignore[index]

    return conn.execute(
        _PG_RECORD.encode(),
        [  # type: ignore[index, no-any-return]
            doc["op"],
            doc["policy"],
            doc["operation_id"],
            doc["request_id"],
            doc["user_id"],
            doc["node_id"],
            doc["evidence_id"],
            state(doc["before"]),
            state(doc["after"]),
            doc["prev_checksum"],
            doc["recorded_at"],
        ],
    ).fetchone()[0]


def _rebuild_on_duckdb(duck: Any, record: str) -> str:
    """A record rebuilt from its own fields by the DuckDB macros."""
    doc = json.loads(record)

    def state(value: Any) -> str | None:
        if value is None:
            return None
        return duck.execute("SELECT prme.node_state(prme.parse_state(?))", [json.dumps(value)]).fetchone()[0]

    return duck.execute(
        _DUCK_RECORD,
        [  # type: ignore[no-any-return]
            doc["op"],
            doc["policy"],
            doc["operation_id"],
            doc["request_id"],
            doc["user_id"],
            doc["node_id"],
            doc["evidence_id"],
            state(doc["before"]),
            state(doc["after"]),
            doc["prev_checksum"],
            doc["recorded_at"],
        ],
    ).fetchone()[0]


def test_each_engine_rebuilds_the_others_records(
    conn: psycopg.Connection[Any], db_dsn: str, duck: Any, tmp_path: Path
) -> None:
    """Real journals, not just the builders: each engine's records, rebuilt field by field
    by the other engine, come out byte-identical; Python's verifier accepts both."""
    pack = MemoryClient(tmp_path / "memories", clock=SteppingClock(T0), new_id=counting_ids())
    server = MemoryClient(db_dsn)
    with pack, server:
        for memory in (pack, server):
            _workload(memory)
        for memory, rebuild in (
            (pack, lambda r: _rebuild_on_postgres(conn, r)),
            (server, lambda r: _rebuild_on_duckdb(duck, r)),
        ):
            records, heads = memory.journal_records(user_id=ALICE)
            assert len(records) == 7
            assert verify_records(records, heads) == []
            for entry in records:
                assert rebuild(entry.record).encode() == entry.record.encode()


def test_injected_clock_and_ids_make_a_pack_reproducible(tmp_path: Path) -> None:
    journals = []
    for run in ("a", "b"):
        with MemoryClient(tmp_path / run, clock=SteppingClock(T0), new_id=counting_ids()) as memory:
            _workload(memory, key=uuid.UUID(int=99))
            records, _ = memory.journal_records(user_id=ALICE)
            journals.append([(r.record, r.checksum) for r in records])
    assert journals[0] == journals[1]
    assert (tmp_path / "a" / PACK_FILE).exists()


@pytest.mark.parametrize("zero", [Decimal("-0"), Decimal("-0.0000"), "-0.0", -0.0])
def test_negative_zero_is_zero_in_the_record(engine: Engine, memory: MemoryClient, zero: Any) -> None:
    """A numeric has no negative zero: the create record says 0 on both engines (the pack built
    "-0", which is not RFC 8785, once its records were built in Python)."""
    node = memory.add_node("a memory", user_id=ALICE, confidence_base=zero, salience_base=zero)
    assert (node.confidence_base, node.salience_base) == (Decimal("0"), Decimal("0"))
    assert memory.verify_journal(user_id=ALICE, independent=True) == []
    assert memory.verify_journal(user_id=ALICE) == []
