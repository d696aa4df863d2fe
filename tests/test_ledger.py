"""The operations ledger under real concurrency and real faults.

Receipts (new, same, conflicting submits), 32 connections racing one operation id,
dependency chains with release and transitive rejection, an executor killed in
the middle of a batch (its backend terminated, or its process SIGKILLed) and
restarted, event streams resumed by after_seq while new events arrive, and long
memories whose stored plan survives a restart. Each thread has its own
connection; faults are injected with test-only triggers on the cloned database.
"""

from __future__ import annotations

import hashlib
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import rfc8785
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg.types.string import StrDumperUnknown

from prme_pg import migrations, testing
from prme_pg import worker as ledger_worker

from .conftest import ROOT
from .racing import race

USER = "alice"
OPERATIONS_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:prme-pg:operations")
SUBMIT = (
    "SELECT * FROM prme.submit_operation(user_id => %(user_id)s, operation_id => %(operation_id)s::text::{id},"
    " schema_version => %(schema_version)s, kind => %(kind)s, dependencies => %(dependencies)s::text[]::{id}[],"
    " payload_hash => %(payload_hash)s, payload => %(payload)s)"
)
TERMINAL = {"committed", "rejected"}


# -----------------------------------------------------------------------------
# Helpers
# -----------------------------------------------------------------------------


def derived_id(operation_id: uuid.UUID) -> uuid.UUID:
    return uuid.uuid5(OPERATIONS_NAMESPACE, str(operation_id))


def payload_hash(payload: dict[str, Any]) -> str:
    return hashlib.sha256(rfc8785.dumps(payload)).hexdigest()


def submit(
    conn: psycopg.Connection[Any],
    kind: str,
    payload: dict[str, Any],
    *,
    operation_id: uuid.UUID | str | None = None,
    dependencies: list[uuid.UUID] | list[str] | tuple[uuid.UUID, ...] = (),
    user_id: str = USER,
    schema_version: int | None = 2,
    hash_: str | None = None,
    id_type: str = "text",
) -> dict[str, Any]:
    """``id_type``: uuid for a ledger of before 0017_reference_protocol."""
    params = {
        "user_id": user_id,
        "operation_id": str(uuid.uuid4() if operation_id is None else operation_id),
        "schema_version": schema_version,
        "kind": kind,
        "dependencies": [str(d) for d in dependencies],
        "payload_hash": hash_ if hash_ is not None else payload_hash(payload),
        "payload": Jsonb(payload),
    }
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(SUBMIT.replace("{id}", "uuid" if id_type == "uuid" else "text"), params).fetchone()
    assert row is not None
    return as_uuids(row)


def _uuid_or_text(value: str) -> uuid.UUID | str:
    try:
        return uuid.UUID(value) if len(value) == 36 else value
    except ValueError:
        return value


def as_uuids(row: dict[str, Any]) -> dict[str, Any]:
    """A ledger row with its text operation ids as UUIDs where they are UUIDs (these tests
    name operations by UUID; ids are text since 0017_reference_protocol)."""
    out = dict(row)
    for key in ("operation_id",):
        if isinstance(out.get(key), str):
            out[key] = _uuid_or_text(out[key])
    for key in ("dependencies", "blocked_by"):
        if isinstance(out.get(key), list):
            out[key] = [_uuid_or_text(v) for v in out[key]]
    return out


def run(conn: psycopg.Connection[Any], max_count: int = 100, max_parts: int = 64) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT * FROM prme.run_operations(max_count => %s, worker => 'test', max_parts => %s)",
            (max_count, max_parts),
        ).fetchall()
    return [as_uuids(r) for r in rows]


def drain(conn: psycopg.Connection[Any], max_parts: int = 64, rounds: int = 200) -> None:
    """Run the executor until a call changes nothing (contention only: call again)."""
    for _ in range(rounds):
        rows = run(conn, max_parts=max_parts)
        if not rows:
            return
        if all(r["outcome"] == "skipped" for r in rows):
            time.sleep(0.01)
    raise AssertionError("the executor did not settle")


def receipt(conn: psycopg.Connection[Any], operation_id: uuid.UUID | str, user_id: str = USER) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM prme.get_receipt(%s, %s)", (user_id, str(operation_id))).fetchone()
    assert row is not None
    return as_uuids(row)


def events(
    conn: psycopg.Connection[Any],
    after: int = 0,
    operation_id: uuid.UUID | str | None = None,
    max_count: int = 10000,
    user_id: str = USER,
) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT * FROM prme.operation_events(user_id => %s, after_seq => %s, operation_id => %s::text,"
            " max_count => %s)",
            (user_id, after, None if operation_id is None else str(operation_id), max_count),
        ).fetchall()
    return [as_uuids(r) for r in rows]


def states(conn: psycopg.Connection[Any], operation_id: uuid.UUID) -> list[str]:
    return [e["state"] for e in events(conn, operation_id=operation_id)]


def sqlstate(call: Callable[[], object]) -> str | None:
    try:
        call()
    except psycopg.Error as exc:
        return exc.sqlstate
    return None


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def count(conn: psycopg.Connection[Any], query: str, *params: Any) -> int:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return int(row[0])


# Every event as stored, visible or not: an operation's accepted event lives in its row
# (accepted_seq), every later one in prme.operation_events.
ALL_EVENTS = (
    "(SELECT user_id, seq, operation_id, operation_seq, state, detail FROM prme.operation_events"
    " UNION ALL SELECT user_id, accepted_seq, operation_id, 1, 'accepted', '{}'::jsonb FROM prme.operations"
    " WHERE accepted_seq IS NOT NULL) AS e"
)


def node(content: str, **fields: Any) -> dict[str, Any]:
    return {"content": content, **fields}


def words(n: int, prefix: str = "w") -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


class _UuidAsUnknown(StrDumperUnknown):
    """Sends a uuid.UUID as an untyped literal: the server takes it as text where an operation
    id is expected (ids are text since 0017_reference_protocol) and as uuid elsewhere."""

    def dump(self, obj: Any) -> bytes:
        return str(obj).encode()


def connect(dsn: str, **kwargs: Any) -> psycopg.Connection[Any]:
    connection = psycopg.connect(dsn, **kwargs)
    connection.adapters.register_dumper(uuid.UUID, _UuidAsUnknown)
    return connection


@pytest.fixture
def conn(db_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit superuser connection to a fresh clone (UUIDs sent untyped)."""
    with connect(db_dsn, autocommit=True) as connection:
        yield connection


@pytest.fixture
def faults(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """Test-only fault injection on prme.nodes (this clone only), driven by the content:

    * ``block:...``  waits for advisory lock 4242 (hold it to freeze the executor);
    * ``poison:...`` raises PR422 (an invalid memory found only when it is created);
    * ``flaky:...``  raises a transient error while sequence fault_budget lasts;
    * ``slow:...``   sleeps 3 ms.
    """
    conn.execute("CREATE SEQUENCE public.fault_budget MAXVALUE 1000000")
    conn.execute("SELECT setval('public.fault_budget', 1000000)")  # exhausted until a test sets it
    conn.execute(
        """
        CREATE FUNCTION public.node_faults() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
        BEGIN
            IF NEW.content LIKE 'block:%' THEN
                PERFORM pg_advisory_lock_shared(4242);
                PERFORM pg_advisory_unlock_shared(4242);
            ELSIF NEW.content LIKE 'poison:%' THEN
                RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'poisoned memory';
            ELSIF NEW.content LIKE 'flaky:%' THEN
                BEGIN
                    PERFORM nextval('public.fault_budget');
                    RAISE EXCEPTION USING ERRCODE = '57P03', MESSAGE = 'simulated transient failure';
                EXCEPTION WHEN sequence_generator_limit_exceeded THEN
                    NULL;  -- budget spent: succeed
                END;
            ELSIF NEW.content LIKE 'slow:%' THEN
                PERFORM pg_sleep(0.003);
            END IF;
            RETURN NEW;
        END;
        $$
        """
    )
    conn.execute(
        "CREATE TRIGGER node_faults BEFORE INSERT ON prme.nodes FOR EACH ROW EXECUTE FUNCTION public.node_faults()"
    )
    return conn


def flaky_failures(conn: psycopg.Connection[Any], n: int) -> None:
    """The next n flaky inserts fail (the sequence is not transactional)."""
    conn.execute("SELECT setval('public.fault_budget', %s, false)", (1000000 - n + 1,))
    if n == 0:
        conn.execute("SELECT setval('public.fault_budget', 1000000)")


def retry_now(conn: psycopg.Connection[Any]) -> None:
    """Skip the retry backoff (tests only)."""
    conn.execute("UPDATE prme.operations SET next_attempt_at = now() - interval '1 second' WHERE state = 'accepted'")


# -----------------------------------------------------------------------------
# Receipts
# -----------------------------------------------------------------------------


def test_new_operation_is_accepted_with_a_receipt(conn: psycopg.Connection[Any]) -> None:
    a, b = uuid.UUID(int=2), uuid.UUID(int=1)
    submit(conn, "add_node", node("a"), operation_id=a)
    submit(conn, "add_node", node("b"), operation_id=b)
    op = uuid.uuid4()
    payload = {"node_id": str(derived_id(a)), "evidence_id": None}
    r = submit(conn, "reinforce", payload, operation_id=op, dependencies=[a, b, a])
    assert r["created"] is True
    assert r["operation_id"] == op and r["kind"] == "reinforce" and r["state"] == "accepted"
    assert r["payload_hash"] == payload_hash(payload)
    assert r["dependencies"] == [a, b], "dependencies in the order given, each once"
    assert (r["blocked_by"], r["result"], r["error"], r["attempts"]) == ([], None, None, 0)
    assert r["created_at"] == r["updated_at"]
    assert [(e["state"], e["operation_seq"]) for e in events(conn, operation_id=op)] == [("accepted", 1)]
    assert receipt(conn, op) == {**r, "created": False}


def test_same_id_and_hash_returns_the_stored_receipt_as_it_stands_now(conn: psycopg.Connection[Any]) -> None:
    op = uuid.uuid4()
    first = submit(conn, "add_node", node("prefers tea"), operation_id=op)
    drain(conn)
    again = submit(conn, "add_node", node("prefers tea"), operation_id=op)
    assert again["created"] is False
    assert again["state"] == "committed" and again["attempts"] == 1
    assert again["result"] == {"node_id": str(derived_id(op)), "node_version": 1}
    assert again["created_at"] == first["created_at"] and again["updated_at"] > first["updated_at"]
    assert count(conn, "SELECT count(*) FROM prme.nodes") == 1
    assert count(conn, f"SELECT count(*) FROM {ALL_EVENTS} WHERE state = 'accepted'") == 1


def test_same_id_with_anything_else_is_pr409_and_the_original_is_untouched(conn: psycopg.Connection[Any]) -> None:
    dep = submit(conn, "add_node", node("dependency"))["operation_id"]
    op = uuid.uuid4()
    submit(conn, "add_node", node("prefers tea"), operation_id=op)
    before = conn.execute("SELECT o::text FROM prme.operations AS o WHERE operation_id = %s", (op,)).fetchone()
    attempts: list[Callable[[], object]] = [
        lambda: submit(conn, "add_node", node("prefers coffee"), operation_id=op),
        lambda: submit(conn, "add_event", node("prefers tea"), operation_id=op),
        lambda: submit(conn, "add_node", node("prefers tea"), operation_id=op, dependencies=[dep]),
    ]
    for call in attempts:
        assert sqlstate(call) == "PR409"
    after = conn.execute("SELECT o::text FROM prme.operations AS o WHERE operation_id = %s", (op,)).fetchone()
    assert after == before
    assert len(events(conn, operation_id=op)) == 1


def test_a_wrong_declared_hash_is_accepted_then_rejected_and_never_applied(conn: psycopg.Connection[Any]) -> None:
    """Issue 16: a 202 proves durable acceptance; the executor checks the hash before it applies."""
    op, after = uuid.uuid4(), uuid.uuid4()
    wrong = payload_hash(node("something else"))
    r = submit(conn, "add_node", node("prefers tea"), operation_id=op, hash_=wrong)
    assert (r["created"], r["state"], r["payload_hash"]) == (True, "accepted", wrong)
    # A dependent waits for it, and goes down with it.
    submit(conn, "add_node", node("depends on it"), operation_id=after, dependencies=[op])
    drain(conn)
    rejected = receipt(conn, op)
    assert rejected["state"] == "rejected" and rejected["result"] is None and rejected["attempts"] == 0
    assert rejected["error"]["reason"] == "payload_hash_mismatch"
    assert payload_hash(node("prefers tea")) in rejected["error"]["detail"]
    assert [e["state"] for e in events(conn, operation_id=op)] == ["accepted", "rejected"]
    assert events(conn, operation_id=op)[-1]["detail"] == {"error": rejected["error"]}
    assert receipt(conn, after)["error"]["reason"] == "dependency_rejected"
    assert count(conn, "SELECT count(*) FROM prme.nodes") == 0, "never applied"
    # The same request again: the stored receipt; the right hash with it: another operation.
    assert submit(conn, "add_node", node("prefers tea"), operation_id=op, hash_=wrong) == {**rejected, "created": False}
    with pytest.raises(psycopg.Error) as caught:
        submit(conn, "add_node", node("prefers tea"), operation_id=op)
    assert caught.value.sqlstate == "PR409" and caught.value.diag.message_detail == (
        "the stored operation differs in payload_hash"
    )


def test_a_payload_without_an_exact_hash_is_accepted_then_rejected_as_invalid(conn: psycopg.Connection[Any]) -> None:
    """Issue 17 item 9: 0.1 and 0.10000000000000000001 have one RFC 8785 form; only the first commits."""
    exact, inexact = uuid.uuid4(), uuid.uuid4()
    declared = payload_hash(node("x", confidence_base=0.1))
    for op, number in ((exact, "0.1"), (inexact, "0.10000000000000000001")):
        conn.execute(
            "SELECT prme.submit_operation('alice', %s, 2, 'add_node', '{}', %s, %s::jsonb)",
            (op, declared, f'{{"content": "x", "confidence_base": {number}}}'),
        )
    drain(conn)
    assert receipt(conn, exact)["state"] == "committed"
    error = receipt(conn, inexact)["error"]
    assert (error["reason"], error["sqlstate"]) == ("invalid_payload", "PR422")
    assert "no exact IEEE 754 double form" in error["message"]
    assert count(conn, "SELECT count(*) FROM prme.nodes") == 1
    # A resubmit canonicalises nothing it need not: the same request, the stored receipt.
    assert (
        sqlstate(
            lambda: conn.execute(
                "SELECT prme.submit_operation('alice', %s, 2, 'add_node', '{}', %s, %s::jsonb)",
                (inexact, declared, '{"confidence_base": 0.10000000000000000001, "content": "x"}'),
            )
        )
        is None
    )


def test_a_resubmit_compares_the_payload_as_a_json_value(conn: psycopg.Connection[Any]) -> None:
    """Member order, spacing and number spelling do not make another operation; another value does."""
    op = uuid.uuid4()
    payload = {"content": "\u00e9t\u00e9 \U0001f600", "confidence_base": 0.7, "salience_base": 0.25}
    first = submit(conn, "add_node", payload, operation_id=op)
    assert first["payload_hash"] == hashlib.sha256(rfc8785.dumps(payload)).hexdigest()
    again = conn.execute(
        "SELECT created FROM prme.submit_operation('alice', %s, 2, 'add_node', '{}', %s, %s::jsonb)",
        (
            op,
            first["payload_hash"],
            r'{ "salience_base": 2.5e-1, "confidence_base": 0.70, "content": "\u00e9t\u00e9 \ud83d\ude00" }',
        ),
    ).fetchone()
    assert again == (False,)
    with pytest.raises(psycopg.Error) as caught:
        submit(conn, "add_node", {**payload, "confidence_base": 0.8}, operation_id=op, hash_=first["payload_hash"])
    assert caught.value.sqlstate == "PR409" and caught.value.diag.message_detail == (
        "the stored operation differs in payload"
    )


def test_payloads_nested_deeper_than_32_levels_are_pr422_at_submit(conn: psycopg.Connection[Any]) -> None:
    """Issue 17 item 1 in SQL: refused with PR422 before anything recurses, never 54001."""
    deepest = {"content": "x", "a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}  # 32 levels
    assert submit(conn, "add_node", deepest)["created"] is True
    for depth in (33, 800):
        payload_text = '{"content": "x", "a": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(
                "SELECT prme.submit_operation('alice', %s, 2, 'add_node', '{}', repeat('0', 64), %s::jsonb)",
                (uuid.uuid4(), payload_text),
            )
        assert caught.value.sqlstate == "PR422"
        assert caught.value.diag.message_primary == "payload must nest at most 32 levels deep"
    assert count(conn, "SELECT count(*) FROM prme.operations") == 1


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"schema_version": 1}, "schema_version 1"),
        ({"schema_version": None}, "schema_version null"),
        ({"kind": "delete_everything"}, "unknown kind"),
        ({"kind": None}, "null kind"),
        ({"hash_": "ABC"}, "malformed hash"),
        ({"hash_": "0" * 63 + "G"}, "hash not hex"),
        ({"hash_": "0" * 65}, "hash too long"),
        ({"user_id": " alice"}, "user_id with spaces"),
    ],
)
def test_invalid_submits_are_pr422_and_store_nothing(
    conn: psycopg.Connection[Any], changes: dict[str, Any], why: str
) -> None:
    args: dict[str, Any] = {"kind": "add_node", "payload": node("x"), **changes}
    kind, payload = args.pop("kind"), args.pop("payload")
    assert sqlstate(lambda: submit(conn, kind, payload, **args)) == "PR422", why
    assert count(conn, "SELECT count(*) FROM prme.operations") == 0


def test_a_dependency_not_submitted_yet_blocks_until_it_commits(conn: psycopg.Connection[Any]) -> None:
    """Submitted dependent-first (as the reference protocol allows): accepted, blocked on the id
    not submitted yet, released when that one is submitted and commits."""
    first, second = "chain-1", "chain-2"
    r = submit(conn, "add_memory", {"content": "second"}, operation_id=second, dependencies=[first])
    assert r["state"] == "accepted" and r["dependencies"] == [first]
    assert [x["outcome"] for x in run(conn)] == ["blocked"]
    blocked = receipt(conn, second)
    assert blocked["state"] == "blocked" and blocked["blocked_by"] == [first]
    submit(conn, "add_memory", {"content": "first"}, operation_id=first)
    drain(conn)
    assert [receipt(conn, op)["state"] for op in (first, second)] == ["committed", "committed"]
    states = [e["state"] for e in events(conn, operation_id=second)]
    assert states == ["accepted", "blocked", "accepted", "processing", "committed"]


def test_a_dependency_never_submitted_is_rejected_after_the_wait(conn: psycopg.Connection[Any]) -> None:
    """Never forever: once prme.dependency_wait_seconds have passed, dependency_missing, and what
    waits for the rejected operation is rejected with it."""
    waiting = submit(conn, "add_node", node("waits"), operation_id="w-1", dependencies=["never"])["operation_id"]
    after = submit(conn, "add_node", node("after"), operation_id="w-2", dependencies=[waiting])["operation_id"]
    assert sorted(x["outcome"] for x in run(conn)) == ["blocked", "blocked"]
    due = "SELECT next_attempt_at - created_at FROM prme.operations WHERE operation_id = 'w-1'"
    assert conn.execute(due).fetchone() == (timedelta(days=1),), "the default wait is one day"
    assert run(conn) == [], "nothing is due before the wait is over"
    conn.execute("SET prme.dependency_wait_seconds = 0")
    conn.execute("UPDATE prme.operations SET next_attempt_at = now() WHERE state = 'blocked'")
    drain(conn)
    missing = receipt(conn, waiting)
    assert missing["state"] == "rejected" and missing["error"]["reason"] == "dependency_missing"
    assert missing["error"]["dependency"] == "never"
    dependent = receipt(conn, after)
    assert dependent["state"] == "rejected" and dependent["error"]["reason"] == "dependency_rejected"


def test_a_dependency_cycle_is_rejected_after_the_wait(conn: psycopg.Connection[Any]) -> None:
    submit(conn, "add_node", node("a"), operation_id="cyc-a", dependencies=["cyc-b"])
    submit(conn, "add_node", node("b"), operation_id="cyc-b", dependencies=["cyc-a"])
    drain(conn)
    assert [receipt(conn, op)["state"] for op in ("cyc-a", "cyc-b")] == ["blocked", "blocked"]
    conn.execute("UPDATE prme.operations SET next_attempt_at = now() WHERE state = 'blocked'")
    drain(conn)
    reasons = sorted(receipt(conn, op)["error"]["reason"] for op in ("cyc-a", "cyc-b"))
    assert reasons == ["dependency_cycle", "dependency_rejected"]


def test_operation_ids_are_text_of_a_safe_alphabet(conn: psycopg.Connection[Any]) -> None:
    hex64 = hashlib.sha256(b"event").hexdigest()
    for op in (hex64, "a", "x" * 128, "rekey-2026-10-04", "memory:release_20260803.v2"):
        assert submit(conn, "add_event", {"content": op}, operation_id=op)["operation_id"] == op
    for bad in ("", "x" * 129, "has space", "slash/inside", "é", "new\nline"):
        assert sqlstate(lambda b=bad: submit(conn, "add_event", {"content": "x"}, operation_id=b)) == "PR422"
        assert sqlstate(lambda b=bad: submit(conn, "add_event", {"content": "x"}, dependencies=[b])) == "PR422"
    # A UUID is one id whatever its case: stored and found in lowercase.
    upper = "AAAAAAAA-0000-4000-8000-00000000000A"
    stored = submit(conn, "add_event", {"content": "u"}, operation_id=upper)["operation_id"]
    assert stored == uuid.UUID(upper.lower())
    again = submit(conn, "add_event", {"content": "u"}, operation_id=upper.lower())
    assert again["created"] is False
    assert receipt(conn, upper)["operation_id"] == uuid.UUID(upper.lower())
    derived = conn.execute("SELECT prme.derived_id(%s), prme.derived_id(%s)", (upper, hex64)).fetchone()
    assert derived == (derived_id(uuid.UUID(upper.lower())), uuid.uuid5(OPERATIONS_NAMESPACE, hex64))
    drain(conn)
    assert count(conn, "SELECT count(*) FROM prme.operations WHERE state = 'committed'") == 6


def test_every_uuid_text_form_is_one_operation(conn: psycopg.Connection[Any]) -> None:
    """Issue 32, item 10: a UUID without hyphens, or as a urn:uuid: URN, in any case, is the same
    operation as its 8-4-4-4-12 form -- in SQL (every caller) and in the Python clients."""
    from prme_pg.validation import parse_operation_id

    canonical = "0f8fad5b-d9cb-469f-a165-70867728950e"
    forms = (
        "0F8FAD5BD9CB469FA16570867728950E",
        "0f8fad5bd9cb469fa16570867728950e",
        "urn:uuid:0f8fad5b-d9cb-469f-a165-70867728950e",
        "URN:UUID:0F8FAD5BD9CB469FA16570867728950E",
    )
    first = submit(conn, "add_event", {"content": "once"}, operation_id=forms[0])
    assert first["created"] is True and first["operation_id"] == uuid.UUID(canonical)
    for form in (canonical, *forms):
        assert parse_operation_id("operation_id", form) == canonical
        assert submit(conn, "add_event", {"content": "once"}, operation_id=form)["created"] is False
        assert receipt(conn, form)["operation_id"] == uuid.UUID(canonical)
        (derived,) = conn.execute("SELECT prme.derived_id(%s)", (form,)).fetchone()
        assert derived == derived_id(uuid.UUID(canonical))
    dependent = submit(conn, "add_event", {"content": "after"}, operation_id="after-it", dependencies=list(forms))
    (dependencies,) = conn.execute(
        "SELECT dependencies FROM prme.operations WHERE operation_id = %s", (dependent["operation_id"],)
    ).fetchone()
    assert dependencies == [canonical]
    assert count(conn, "SELECT count(*) FROM prme.operations WHERE operation_id <> 'after-it'") == 1
    # Not a UUID form: stays as given (odd hyphens, 31 or 33 digits, a urn of something else).
    for other in ("0f8fad5bd9cb-469f-a165-70867728950e", "0f8fad5bd9cb469fa16570867728950", "urn:uuid:x"):
        assert parse_operation_id("operation_id", other) == other
        assert submit(conn, "add_event", {"content": other}, operation_id=other)["operation_id"] == other


def test_operation_kinds_are_written_once(conn: psycopg.Connection[Any]) -> None:
    """Python's one copy of the kinds (prme_pg.validation, which the outbox, the CLI and the HTTP
    API's schema use) equals the database's one list (prme._operation_kinds())."""
    from prme_pg import outbox, validation

    (kinds,) = conn.execute("SELECT prme._operation_kinds()").fetchone()
    assert tuple(kinds) == validation.LEDGER_KINDS
    assert outbox.LEDGER_KINDS is validation.LEDGER_KINDS
    assert sqlstate(lambda: submit(conn, "add_thing", {})) == "PR422"


def test_add_memory_takes_the_reference_payload(conn: psycopg.Connection[Any]) -> None:
    payload = {
        "content": "Receipts are the acknowledgement boundary.",
        "user_id": USER,
        "agent_id": "@project",
        "session_id": "s-1",
        "categories": ["karpathy", "session-learning"],
    }
    op = hashlib.sha256(b"job").hexdigest()
    submit(conn, "add_memory", payload, operation_id=op)
    drain(conn)
    r = receipt(conn, op)
    assert r["state"] == "committed", r["error"]
    node_id = uuid.uuid5(OPERATIONS_NAMESPACE, op)
    assert r["result"] == {
        "node_id": str(node_id),
        "node_version": 1,
        "agent_id": "@project",
        "session_id": "s-1",
        "categories": ["karpathy", "session-learning"],
    }
    row = conn.execute("SELECT user_id, namespace, scope, kind, content FROM prme.nodes WHERE id = %s", (node_id,))
    assert row.fetchone() == (USER, "default", "personal", "fact", payload["content"])
    # The owner named in the payload must be the operation's: nothing stored otherwise.
    other = dict(payload, user_id="bob")
    assert sqlstate(lambda: submit(conn, "add_memory", other, operation_id="other")) == "PR422"
    for bad in ({"content": "x", "categories": "one"}, {"content": "x", "categories": [1]}, {"content": "x", "tag": 1}):
        rejected = submit(conn, "add_memory", bad)["operation_id"]
        drain(conn)
        assert receipt(conn, rejected)["error"]["reason"] == "invalid_payload", bad


def test_more_invalid_submits(conn: psycopg.Connection[Any]) -> None:
    op = uuid.uuid4()
    for payload_sql in ("'[1, 2]'::jsonb", "'\"text\"'::jsonb", "NULL::jsonb"):
        assert (
            sqlstate(
                lambda p=payload_sql: conn.execute(
                    f"SELECT prme.submit_operation('alice', %s, 2, 'add_node', '{{}}', repeat('0', 64), {p})", (op,)
                )
            )
            == "PR422"
        )
    # Depending on itself: PR404, as for an id unknown to this owner.
    assert sqlstate(lambda: submit(conn, "add_node", node("x"), operation_id=op, dependencies=[op])) == "PR404"
    assert (
        sqlstate(
            lambda: conn.execute(
                "SELECT prme.submit_operation('alice', %s, 2, 'add_node', '{NULL}', %s, %s)",
                (op, payload_hash(node("x")), Jsonb(node("x"))),
            )
        )
        == "PR422"
    )
    assert (
        sqlstate(
            lambda: conn.execute(
                "SELECT prme.submit_operation('alice', NULL, 2, 'add_node', '{}', %s, %s)",
                (payload_hash(node("x")), Jsonb(node("x"))),
            )
        )
        == "PR422"
    )
    big = node("x" * 10, padding="y" * 2_000_000)
    assert sqlstate(lambda: submit(conn, "add_node", big)) == "PR422"
    assert count(conn, "SELECT count(*) FROM prme.operations") == 0


def test_operation_ids_are_scoped_by_owner(conn: psycopg.Connection[Any]) -> None:
    op = uuid.uuid4()
    submit(conn, "add_node", node("alice's"), operation_id=op)
    bob = submit(conn, "add_node", node("bob's, different"), operation_id=op, user_id="bob")
    assert bob["created"] is True
    assert sqlstate(lambda: receipt(conn, op, user_id="carol")) == "PR404"
    assert sqlstate(lambda: events(conn, operation_id=op, user_id="carol")) == "PR404"
    assert sqlstate(lambda: receipt(conn, uuid.uuid4())) == "PR404"
    # alice's operation that names bob's as a dependency waits for one of her own by that id:
    # bob's commit does not release it.
    bobs_only = submit(conn, "add_node", node("bob only"), user_id="bob")["operation_id"]
    waiting = submit(conn, "add_node", node("y"), dependencies=[bobs_only])["operation_id"]
    drain(conn)
    assert receipt(conn, waiting)["state"] == "blocked"
    assert {n for (n,) in conn.execute("SELECT user_id || ':' || content FROM prme.nodes").fetchall()} == {
        "alice:alice's",
        "bob:bob's, different",
        "bob:bob only",
    }


def test_32_concurrent_submits_of_one_id_make_one_operation(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    op = uuid.uuid4()
    results = race(db_dsn, [lambda c: submit(c, "add_node", node("raced"), operation_id=op)] * 32)
    assert all(isinstance(r, dict) for r in results), results
    assert sum(r["created"] for r in results) == 1
    assert len({(r["operation_id"], r["created_at"], r["payload_hash"]) for r in results}) == 1
    assert count(conn, "SELECT count(*) FROM prme.operations") == 1
    assert count(conn, f"SELECT count(*) FROM {ALL_EVENTS}") == 1
    # A submit writes one row: its accepted event is kept in the operation row.
    assert count(conn, "SELECT count(*) FROM prme.operation_events") == 0
    drain(conn)
    assert count(conn, "SELECT count(*) FROM prme.nodes") == 1


def test_32_concurrent_submits_of_one_id_with_two_payloads(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    op = uuid.uuid4()
    calls = [lambda c, i=i: submit(c, "add_node", node(f"payload {i % 2}"), operation_id=op) for i in range(32)]
    results = race(db_dsn, calls)
    winners = [r for r in results if isinstance(r, dict) and r["created"]]
    assert len(winners) == 1
    stored = winners[0]["payload_hash"]
    for i, r in enumerate(results):
        if payload_hash(node(f"payload {i % 2}")) == stored:
            assert isinstance(r, dict) and r["payload_hash"] == stored
        else:
            assert isinstance(r, psycopg.Error) and r.sqlstate == "PR409", r
    assert count(conn, "SELECT count(*) FROM prme.operations") == 1


# -----------------------------------------------------------------------------
# Execution
# -----------------------------------------------------------------------------


def test_each_kind_is_applied_exactly_once_through_the_api(conn: psycopg.Connection[Any]) -> None:
    add = uuid.uuid4()
    evidence = uuid.uuid4()
    confirm = uuid.uuid4()
    archive = uuid.uuid4()
    nid, eid = derived_id(add), derived_id(evidence)
    submit(
        conn, "add_node", node("prefers tea", scope="work", confidence_base=0.7, kind="preference"), operation_id=add
    )
    submit(conn, "add_event", {"content": "said so", "scope": "work", "payload": {"turn": 3}}, operation_id=evidence)
    submit(
        conn,
        "reinforce",
        {"node_id": str(nid), "evidence_id": str(eid)},
        operation_id=confirm,
        dependencies=[add, evidence],
    )
    submit(conn, "archive_node", {"node_id": str(nid)}, operation_id=archive, dependencies=[confirm])
    drain(conn)

    assert receipt(conn, add)["result"] == {"node_id": str(nid), "node_version": 1}
    assert receipt(conn, evidence)["result"] == {"event_id": str(eid)}
    assert receipt(conn, confirm)["result"] == {"node_id": str(nid), "node_version": 2, "replayed": False}
    assert receipt(conn, archive)["result"] == {"node_id": str(nid), "node_version": 3}
    row = conn.execute(
        "SELECT scope, kind, confidence_base::text, evidence_refs, lifecycle_state, version FROM prme.nodes"
        " WHERE user_id = 'alice' AND id = %s",
        (nid,),
    ).fetchone()
    assert row == ("work", "preference", "0.7500", [eid], "archived", 3)
    # reinforce ran with request_id = the operation id: its journal record carries the key.
    keyed = "SELECT request_id, node_id FROM prme.journal WHERE request_id IS NOT NULL"
    assert conn.execute(keyed).fetchall() == [(confirm, nid)]
    assert conn.execute("SELECT payload FROM prme.events WHERE id = %s", (eid,)).fetchone() == ({"turn": 3},)
    assert conn.execute("SELECT * FROM prme.verify_journal('alice')").fetchall() == []
    for op in (add, evidence, confirm, archive):
        assert states(conn, op)[-2:] == ["processing", "committed"]
        assert receipt(conn, op)["attempts"] == 1
    # Nothing left, nothing applied twice.
    assert run(conn) == []
    assert count(conn, "SELECT count(*) FROM prme.journal") == 3


@pytest.mark.parametrize(
    ("kind", "payload", "reason"),
    [
        ("add_node", {"content": "x", "bogus": 1}, "invalid_payload"),
        ("add_node", {"scope": "work"}, "invalid_payload"),
        ("add_node", {"content": 42}, "invalid_payload"),
        ("add_node", {"content": "   "}, "invalid_payload"),
        ("add_node", {"content": "x", "scope": "Not A Scope"}, "invalid_payload"),
        ("add_node", {"content": "x", "confidence_base": 1.5}, "invalid_payload"),
        ("add_node", {"content": "x", "next_review_at": "2030-01-01 10:00"}, "invalid_payload"),
        ("add_node", {"content": "x", "token_budget": 0.5}, "invalid_payload"),
        ("add_event", {"content": "x", "payload": [1]}, "invalid_payload"),
        ("reinforce", {"node_id": "not-a-uuid"}, "invalid_payload"),
        ("reinforce", {"node_id": str(uuid.UUID(int=99))}, "not_found"),
        ("archive_node", {"node_id": str(uuid.UUID(int=99))}, "not_found"),
        ("record_outcome", {"node_id": str(uuid.UUID(int=99)), "outcome": "implicit_success"}, "not_found"),
        ("record_outcome", {"node_id": str(uuid.UUID(int=99))}, "invalid_payload"),
        ("record_outcome", {"node_id": str(uuid.UUID(int=99)), "outcome": "great"}, "invalid_payload"),
        (
            "record_outcome",
            {"node_id": str(uuid.UUID(int=99)), "outcome": "neutral_exposure", "x": 1},
            "invalid_payload",
        ),
        (
            "record_outcome",
            {"node_id": str(uuid.UUID(int=99)), "outcome": "neutral_exposure", "notes": 5},
            "invalid_payload",
        ),
        ("record_outcome", {"node_id": 99, "outcome": "neutral_exposure"}, "invalid_payload"),
        ("link_correction", {"message": "no, tea", "candidate_node_ids": str(uuid.UUID(int=99))}, "invalid_payload"),
        ("link_correction", {"message": "no, tea", "candidate_node_ids": ["not-a-uuid"]}, "invalid_payload"),
        ("link_correction", {"message": "no, tea", "candidate_node_ids": [99]}, "invalid_payload"),
        ("link_correction", {"message": "no, tea"}, "invalid_payload"),
        ("link_correction", {"message": " ", "candidate_node_ids": []}, "invalid_payload"),
        ("link_correction", {"message": "no, tea", "candidate_node_ids": [], "thread": "t"}, "invalid_payload"),
        ("link_correction", {"message": "no", "candidate_node_ids": [], "thread_id": " t"}, "invalid_payload"),
    ],
)
def test_invalid_payloads_are_rejected_with_a_reason(
    conn: psycopg.Connection[Any], kind: str, payload: dict[str, Any], reason: str
) -> None:
    op = submit(conn, kind, payload)["operation_id"]
    good = submit(conn, "add_node", node("fine"))["operation_id"]
    rows = run(conn)
    assert {r["operation_id"]: r["outcome"] for r in rows} == {op: "rejected", good: "committed"}
    r = receipt(conn, op)
    assert r["state"] == "rejected" and r["error"]["reason"] == reason and r["error"]["message"]
    assert r["result"] is None
    assert states(conn, op) == ["accepted", "rejected"]
    assert count(conn, "SELECT count(*) FROM prme.nodes") == 1


def outcomes(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT * FROM prme.outcomes WHERE recorded_by <> 'reinforce' ORDER BY created_at, recorded_by DESC, id"
        ).fetchall()


def test_record_outcome_and_link_correction_are_applied_exactly_once(conn: psycopg.Connection[Any]) -> None:
    tea, coffee = uuid.uuid4(), uuid.uuid4()
    submit(conn, "add_node", node("prefers green tea in the morning"), operation_id=tea)
    submit(conn, "add_node", node("drinks coffee after lunch"), operation_id=coffee)
    drain(conn)
    tea_id, coffee_id = derived_id(tea), derived_id(coffee)

    used = uuid.uuid4()
    used_payload = {"node_id": str(tea_id), "outcome": "implicit_success", "thread_id": "t-7", "notes": "it helped"}
    linked, unmatched = uuid.uuid4(), uuid.uuid4()
    linked_payload = {
        "message": "no, I stopped drinking green tea in the morning",
        "candidate_node_ids": [str(coffee_id), str(tea_id), str(uuid.UUID(int=5))],
        "thread_id": "t-7",
    }
    unmatched_payload = {"message": "actually the weather is nicer today", "candidate_node_ids": [str(tea_id)]}
    submit(conn, "record_outcome", used_payload, operation_id=used)
    submit(conn, "link_correction", linked_payload, operation_id=linked)
    submit(conn, "link_correction", unmatched_payload, operation_id=unmatched)
    rows = run(conn)
    assert {r["operation_id"]: (r["kind"], r["outcome"]) for r in rows} == {
        used: ("record_outcome", "committed"),
        linked: ("link_correction", "committed"),
        unmatched: ("link_correction", "committed"),
    }

    stored = outcomes(conn)
    assert [(o["recorded_by"], o["node_id"], o["outcome"], o["request_id"]) for o in stored] == [
        ("record_outcome", tea_id, "implicit_success", used),
        ("link_correction", tea_id, "explicit_correction", None),
    ]
    assert (stored[0]["thread_id"], stored[0]["notes"]) == ("t-7", "it helped")
    assert receipt(conn, used)["result"] == {
        "outcome_id": str(stored[0]["id"]),
        "node_id": str(tea_id),
        "node_version": 1,
        "replayed": False,
    }
    result = receipt(conn, linked)["result"]
    assert result["status"] == "linked" and result["node_id"] == str(tea_id) and result["inbox_id"] is None
    assert result["outcome_id"] == str(stored[1]["id"])
    assert [m["node_id"] for m in result["matches"]] == [str(tea_id)]
    inbox = conn.execute("SELECT id, message, reason FROM prme.correction_inbox").fetchall()
    result = receipt(conn, unmatched)["result"]
    assert result["status"] == "unmatched" and result["node_id"] is None and result["outcome_id"] is None
    assert inbox == [(uuid.UUID(result["inbox_id"]), unmatched_payload["message"], "no_match")]
    for op in (used, linked, unmatched):
        assert states(conn, op) == ["accepted", "processing", "committed"]

    # A retry after a lost response: the stored receipt, nothing applied again.
    again = submit(conn, "record_outcome", used_payload, operation_id=used)
    assert again["created"] is False and again["state"] == "committed"
    assert submit(conn, "link_correction", linked_payload, operation_id=linked)["created"] is False
    assert sqlstate(lambda: submit(conn, "link_correction", unmatched_payload, operation_id=linked)) == "PR409"
    assert run(conn) == []
    assert len(outcomes(conn)) == 2
    assert count(conn, "SELECT count(*) FROM prme.correction_inbox") == 1


def test_record_outcome_replays_a_direct_call_with_the_operation_id_as_request_id(
    conn: psycopg.Connection[Any],
) -> None:
    add = uuid.uuid4()
    submit(conn, "add_node", node("likes jazz"), operation_id=add)
    drain(conn)
    nid = derived_id(add)
    # The same write already made directly with request_id = the operation id (a hook that
    # wrote first and handed over later): the operation is its replay, not a second outcome.
    op = uuid.uuid4()
    conn.execute(
        "SELECT prme.record_outcome(user_id => 'alice', node_id => %s, outcome => 'neutral_exposure',"
        " request_id => %s)",
        (nid, op),
    )
    submit(conn, "record_outcome", {"node_id": str(nid), "outcome": "neutral_exposure"}, operation_id=op)
    # The same key with another outcome is a conflict, never a second write.
    clash = uuid.uuid4()
    conn.execute(
        "SELECT prme.record_outcome(user_id => 'alice', node_id => %s, outcome => 'implicit_success',"
        " request_id => %s)",
        (nid, clash),
    )
    submit(conn, "record_outcome", {"node_id": str(nid), "outcome": "explicit_correction"}, operation_id=clash)
    drain(conn)
    assert receipt(conn, op)["result"]["replayed"] is True
    assert receipt(conn, clash)["error"]["reason"] == "conflict"
    assert [o["outcome"] for o in outcomes(conn)] == ["neutral_exposure", "implicit_success"]


def test_record_outcome_after_its_memory_is_archived_is_not_found(conn: psycopg.Connection[Any]) -> None:
    add, archive, outcome = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    nid = str(derived_id(add))
    submit(conn, "add_node", node("short lived"), operation_id=add)
    submit(conn, "archive_node", {"node_id": nid}, operation_id=archive, dependencies=[add])
    submit(
        conn,
        "record_outcome",
        {"node_id": nid, "outcome": "implicit_success"},
        operation_id=outcome,
        dependencies=[archive],
    )
    drain(conn)
    r = receipt(conn, outcome)
    assert (r["state"], r["error"]["reason"], r["error"]["sqlstate"]) == ("rejected", "not_found", "PR404")
    assert outcomes(conn) == []


def test_a_taken_derived_id_is_a_conflict(conn: psycopg.Connection[Any]) -> None:
    op = uuid.uuid4()
    conn.execute("SELECT prme.add_node(user_id => 'alice', content => 'direct', node_id => %s)", (derived_id(op),))
    submit(conn, "add_node", node("via ledger"), operation_id=op)
    drain(conn)
    assert receipt(conn, op)["error"]["reason"] == "conflict"


def test_transient_failures_are_retried_with_backoff(faults: psycopg.Connection[Any]) -> None:
    conn = faults
    op = submit(conn, "add_node", node("flaky: prefers tea"))["operation_id"]
    flaky_failures(conn, 2)
    assert [r["outcome"] for r in run(conn)] == ["retry"]
    r = receipt(conn, op)
    assert (r["state"], r["attempts"], r["error"]["reason"], r["error"]["sqlstate"]) == (
        "accepted",
        1,
        "transient",
        "57P03",
    )
    assert run(conn) == [], "backoff: not claimable before next_attempt_at"
    retry_now(conn)
    assert [r["outcome"] for r in run(conn)] == ["retry"]
    retry_now(conn)
    assert [r["outcome"] for r in run(conn)] == ["committed"]
    r = receipt(conn, op)
    assert (r["state"], r["attempts"], r["error"]) == ("committed", 3, None)
    evs = events(conn, operation_id=op)
    assert [e["state"] for e in evs] == ["accepted", "accepted", "accepted", "processing", "committed"]
    assert [e["detail"].get("attempt") for e in evs[1:3]] == [1, 2]
    assert count(conn, "SELECT count(*) FROM prme.nodes") == 1


def test_transient_failures_end_after_five_attempts(faults: psycopg.Connection[Any]) -> None:
    conn = faults
    op = submit(conn, "add_node", node("flaky: never works"))["operation_id"]
    flaky_failures(conn, 100)
    outcomes = []
    for _ in range(5):
        outcomes += [r["outcome"] for r in run(conn)]
        retry_now(conn)
    assert outcomes == ["retry"] * 4 + ["rejected"]
    r = receipt(conn, op)
    assert (r["state"], r["attempts"], r["error"]["reason"]) == ("rejected", 5, "attempts_exhausted")
    assert r["error"]["last_error"]["sqlstate"] == "57P03"
    assert count(conn, "SELECT count(*) FROM prme.nodes") == 0


# -----------------------------------------------------------------------------
# Dependencies
# -----------------------------------------------------------------------------


def test_dependency_chain_blocks_and_is_released_in_order(conn: psycopg.Connection[Any]) -> None:
    # A long memory stays processing across calls (one part per call), so what
    # depends on it is evaluated while it is not committed yet.
    a = submit(conn, "add_node", node(words(40), token_budget=10))["operation_id"]
    b = submit(conn, "reinforce", {"node_id": str(derived_id(a))}, dependencies=[a])["operation_id"]
    c = submit(conn, "archive_node", {"node_id": str(derived_id(a))}, dependencies=[b])["operation_id"]
    rows = run(conn, max_parts=1)
    assert {r["operation_id"]: r["outcome"] for r in rows} == {a: "progress", b: "blocked", c: "blocked"}
    assert receipt(conn, b)["blocked_by"] == [a] and receipt(conn, c)["blocked_by"] == [b]
    for _ in range(20):
        run(conn, max_parts=1)
    assert [receipt(conn, x)["state"] for x in (a, b, c)] == ["committed"] * 3
    assert states(conn, b) == ["accepted", "blocked", "accepted", "processing", "committed"]
    assert events(conn, operation_id=b)[2]["detail"] == {"released_by": str(a)}
    version = conn.execute("SELECT version, lifecycle_state FROM prme.nodes").fetchone()
    assert version == (3, "archived")


def test_blocked_by_is_sorted_and_shrinks_as_dependencies_commit(conn: psycopg.Connection[Any]) -> None:
    x = uuid.UUID("f" * 32)
    y = uuid.UUID("1" * 32)
    submit(conn, "add_node", node(words(30), token_budget=10), operation_id=x)  # 3 parts
    submit(conn, "add_node", node(words(300), token_budget=10), operation_id=y)  # 30 parts
    d = submit(conn, "add_node", node("after both"), dependencies=[x, y])["operation_id"]
    run(conn, max_parts=1)  # x and y validate one part each, d is blocked
    assert receipt(conn, d)["blocked_by"] == [y, x]
    run(conn, max_parts=1)
    run(conn, max_parts=1)
    assert receipt(conn, x)["state"] == "committed"
    r = receipt(conn, d)
    assert (r["state"], r["blocked_by"]) == ("blocked", [y])
    drain(conn)
    assert receipt(conn, d)["state"] == "committed"


def test_rejection_propagates_transitively(faults: psycopg.Connection[Any]) -> None:
    conn = faults
    a = submit(conn, "add_node", node("poison: " + words(30), token_budget=10))["operation_id"]
    b = submit(conn, "reinforce", {"node_id": str(derived_id(a))}, dependencies=[a])["operation_id"]
    c = submit(conn, "archive_node", {"node_id": str(derived_id(a))}, dependencies=[b])["operation_id"]
    other = submit(conn, "add_node", node("unrelated"))["operation_id"]
    run(conn, max_parts=1)
    assert [receipt(conn, x)["state"] for x in (a, b, c)] == ["processing", "blocked", "blocked"]
    drain(conn, max_parts=1)
    ra, rb, rc = (receipt(conn, x) for x in (a, b, c))
    assert (ra["state"], ra["error"]["reason"]) == ("rejected", "invalid_payload")
    assert (rb["state"], rb["error"]["reason"], rb["error"]["dependency"]) == (
        "rejected",
        "dependency_rejected",
        str(a),
    )
    assert (rc["state"], rc["error"]["reason"], rc["error"]["dependency"]) == (
        "rejected",
        "dependency_rejected",
        str(b),
    )
    assert rb["blocked_by"] == [] and rc["blocked_by"] == []
    assert receipt(conn, other)["state"] == "committed"
    # Submitted after the rejection: rejected when evaluated, never blocked.
    late = submit(conn, "add_node", node("too late"), dependencies=[c])["operation_id"]
    drain(conn)
    assert receipt(conn, late)["error"]["reason"] == "dependency_rejected"
    assert states(conn, late) == ["accepted", "rejected"]


def test_random_dependency_graph_with_three_executors_never_blocks_forever(
    faults: psycopg.Connection[Any], db_dsn: str
) -> None:
    conn = faults
    rnd = random.Random(20240601)
    ops: list[uuid.UUID] = []
    deps: dict[uuid.UUID, list[uuid.UUID]] = {}
    poisoned: set[uuid.UUID] = set()
    for i in range(150):
        chosen = rnd.sample(ops, k=min(len(ops), rnd.randint(0, 3)))
        content = f"memory {i}"
        if rnd.random() < 0.08:
            content = f"poison: {content}"
        elif rnd.random() < 0.2:
            content = words(25, prefix=f"m{i}-")
        op = submit(conn, "add_node", node(content, token_budget=10), dependencies=chosen)["operation_id"]
        if content.startswith("poison"):
            poisoned.add(op)
        ops.append(op)
        deps[op] = chosen

    stop = threading.Event()
    errors: list[BaseException] = []

    def executor(name: str) -> None:
        try:
            ledger_worker.run_worker(
                db_dsn, worker=name, batch=7, max_parts=3, poll_interval=0.1, stop=stop, install_signal_handlers=False
            )
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=executor, args=(f"x{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        wait_for(
            lambda: (
                count(conn, "SELECT count(*) FROM prme.operations WHERE state NOT IN ('committed', 'rejected')") == 0
            ),
            timeout=120,
            what="every operation to finish",
        )
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors
    # The graph did exercise the rules: operations were blocked, released and rejected in cascade.
    assert count(conn, "SELECT count(*) FROM prme.operation_events WHERE state = 'blocked'") > 0
    assert count(conn, "SELECT count(*) FROM prme.operation_events WHERE detail ? 'released_by'") > 0
    assert count(conn, "SELECT count(*) FROM prme.operations WHERE error ->> 'reason' = 'dependency_rejected'") > 0

    final = {op: receipt(conn, op) for op in ops}
    for op in ops:
        r = final[op]
        dep_states = [final[d]["state"] for d in deps[op]]
        if "rejected" in dep_states:
            assert r["state"] == "rejected" and r["error"]["reason"] == "dependency_rejected", r
            assert final[uuid.UUID(r["error"]["dependency"])]["state"] == "rejected"
        elif op in poisoned:
            assert r["state"] == "rejected" and r["error"]["reason"] == "invalid_payload"
        else:
            assert r["state"] == "committed", r
    committed = [op for op in ops if final[op]["state"] == "committed"]
    assert count(conn, "SELECT count(*) FROM prme.nodes") == len(committed)
    # The stream shows a dependency's outcome before anything that waited for it.
    seq = {
        (e["operation_id"], e["state"]): e["seq"]
        for e in events(conn)
        if e["state"] in ("processing", "committed", "rejected")
    }
    for op in committed:
        for d in deps[op]:
            assert seq[(d, "committed")] < seq[(op, "processing")]
    assert conn.execute("SELECT * FROM prme.verify_journal('alice')").fetchall() == []


# -----------------------------------------------------------------------------
# Killed executors
# -----------------------------------------------------------------------------


def _waiting_on_4242(conn: psycopg.Connection[Any]) -> int | None:
    row = conn.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted LIMIT 1"
    ).fetchone()
    return None if row is None else int(row[0])


def _assert_exactly_once(conn: psycopg.Connection[Any], ops: list[uuid.UUID]) -> None:
    assert count(conn, "SELECT count(*) FROM prme.operations WHERE state <> 'committed'") == 0
    assert {row[0] for row in conn.execute("SELECT id FROM prme.nodes").fetchall()} == {derived_id(o) for o in ops}
    assert count(conn, "SELECT count(*) FROM prme.nodes") == len(ops)
    per_op = Counter(
        row[0] for row in conn.execute("SELECT operation_id FROM prme.operation_events WHERE state = 'committed'")
    )
    assert per_op == Counter(str(o) for o in ops)
    assert conn.execute("SELECT * FROM prme.verify_journal('alice')").fetchall() == []


def test_executor_backend_terminated_mid_batch_then_restarted(faults: psycopg.Connection[Any], db_dsn: str) -> None:
    conn = faults
    ops = [
        submit(conn, "add_node", node(("block: " if i == 12 else "") + f"memory {i}"))["operation_id"]
        for i in range(25)
    ]
    conn.execute("SELECT pg_advisory_lock(4242)")
    stop = threading.Event()
    done: list[int] = []
    thread = threading.Thread(
        target=lambda: done.append(
            ledger_worker.run_worker(
                db_dsn,
                worker="victim",
                batch=100,
                poll_interval=0.1,
                stop=stop,
                install_signal_handlers=False,
                reconnect_delay=0.1,
            )
        )
    )
    thread.start()
    try:
        wait_for(lambda: _waiting_on_4242(conn) is not None, what="the executor to block mid-batch")
        # Twelve operations are applied inside the open transaction, none is visible.
        assert count(conn, "SELECT count(*) FROM prme.nodes") == 0
        assert count(conn, "SELECT count(*) FROM prme.operations WHERE state = 'committed'") == 0
        pid = _waiting_on_4242(conn)
        assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        wait_for(lambda: _waiting_on_4242(conn) not in (None, pid), what="the worker to reconnect and block again")
        assert count(conn, "SELECT count(*) FROM prme.nodes") == 0
        conn.execute("SELECT pg_advisory_unlock(4242)")
        wait_for(lambda: count(conn, "SELECT count(*) FROM prme.operations WHERE state = 'committed'") == 25)
    finally:
        conn.execute("SELECT pg_advisory_unlock_all()")
        stop.set()
        thread.join(30)
    assert done == [25]
    _assert_exactly_once(conn, ops)
    # The killed attempts left no trace: one attempt, one processing event each.
    assert {receipt(conn, o)["attempts"] for o in ops} == {1}
    assert count(conn, "SELECT count(*) FROM prme.operation_events WHERE state = 'processing'") == 25


def _worker_process(dsn: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "prme_pg.worker", "--dsn", dsn, "--poll-interval", "0.1", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _worker_backends(conn: psycopg.Connection[Any]) -> int:
    return count(
        conn,
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name = 'prme-pg worker' AND datname = current_database()",
    )


def test_worker_process_sigkilled_mid_drain_then_restarted(faults: psycopg.Connection[Any], db_dsn: str) -> None:
    conn = faults
    ops = [submit(conn, "add_node", node(f"slow: memory {i}"))["operation_id"] for i in range(300)]
    committed = "SELECT count(*) FROM prme.operations WHERE state = 'committed'"
    for round_ in range(2):
        proc = _worker_process(db_dsn, "--batch", "20", "--worker", f"victim-{round_}")
        try:
            target = 40 * (round_ + 1)
            wait_for(lambda t=target: count(conn, committed) >= t, what="some batches to commit")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        # The orphaned backend finishes or aborts its batch on its own: all or nothing.
        wait_for(lambda: _worker_backends(conn) == 0, what="the orphaned backend to end")
    assert count(conn, committed) < 300
    finished = ledger_worker.run_worker(
        db_dsn, worker="restart", batch=50, until_idle=True, install_signal_handlers=False
    )
    assert finished == 300 - count(conn, "SELECT count(*) FROM prme.operations WHERE worker <> 'restart'")
    _assert_exactly_once(conn, ops)


def test_worker_stops_gracefully_on_sigterm(faults: psycopg.Connection[Any], db_dsn: str) -> None:
    conn = faults
    for i in range(200):
        submit(conn, "add_node", node(f"slow: memory {i}"))
    proc = _worker_process(db_dsn, "--batch", "10")
    try:
        wait_for(lambda: count(conn, "SELECT count(*) FROM prme.operations WHERE state = 'committed'") >= 20)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert "stopping after the current batch" in stderr
    assert _worker_backends(conn) == 0
    # Stopped between batches: nothing half-done, the rest is still claimable.
    assert count(conn, "SELECT count(*) FROM prme.operations WHERE state NOT IN ('accepted', 'committed')") == 0
    assert count(conn, "SELECT count(*) FROM prme.operations WHERE state = 'committed'") % 10 == 0
    assert count(conn, "SELECT count(*) FROM prme.nodes") == count(
        conn, "SELECT count(*) FROM prme.operations WHERE state = 'committed'"
    )


def test_worker_wakes_on_notify(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    stop = threading.Event()
    thread = threading.Thread(
        target=ledger_worker.run_worker,
        args=(db_dsn,),
        kwargs={"worker": "listener", "poll_interval": 30.0, "stop": stop, "install_signal_handlers": False},
    )
    thread.start()
    try:
        time.sleep(0.3)  # idle, waiting on LISTEN with a 30 s poll
        op = submit(conn, "add_node", node("wake up"))["operation_id"]
        wait_for(lambda: receipt(conn, op)["state"] == "committed", timeout=5, what="the notified worker")
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


# -----------------------------------------------------------------------------
# Events
# -----------------------------------------------------------------------------


def test_events_resume_by_after_seq_without_gap_or_duplicate(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    stop_reader = threading.Event()
    stop_worker = threading.Event()
    seen: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            with connect(db_dsn, autocommit=True) as c:
                after = 0
                while True:
                    page = events(c, after=after, max_count=7)
                    seen.extend(page)
                    if page:
                        after = page[-1]["seq"]
                    elif stop_reader.is_set():
                        return
                    else:
                        time.sleep(0.005)
        except BaseException as exc:
            errors.append(exc)

    def writer(n: int) -> None:
        try:
            with connect(db_dsn, autocommit=True) as c:
                for i in range(40):
                    submit(c, "add_node", node(f"writer {n} memory {i}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader)] + [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    executor = threading.Thread(
        target=ledger_worker.run_worker,
        args=(db_dsn,),
        kwargs={"batch": 5, "poll_interval": 0.05, "stop": stop_worker, "install_signal_handlers": False},
    )
    for t in [*threads, executor]:
        t.start()
    for t in threads[1:]:
        t.join(60)
    wait_for(lambda: count(conn, "SELECT count(*) FROM prme.operations WHERE state = 'committed'") == 160)
    stop_worker.set()
    executor.join(30)
    wait_for(lambda: len(seen) >= 480, what="the reader to catch up")
    stop_reader.set()
    threads[0].join(30)
    assert not errors, errors

    everything = events(conn)
    assert len(everything) == 480
    assert [e["seq"] for e in seen] == [e["seq"] for e in everything], "no gap, no duplicate, same order"
    assert seen == everything
    per_op: dict[uuid.UUID, list[int]] = {}
    for e in everything:
        per_op.setdefault(e["operation_id"], []).append(e["operation_seq"])
    assert all(v == [1, 2, 3] for v in per_op.values())


def test_events_of_a_late_committing_transaction_are_not_skipped(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    """A transaction that started writing first but commits last keeps its place in the stream."""
    with connect(db_dsn) as slow:  # not autocommit: stays open
        first = submit(slow, "add_node", node("written first, committed last"))["operation_id"]
        second = submit(conn, "add_node", node("written second, committed first"))["operation_id"]
        # The committed event is in the table, with a larger seq than the open one's...
        assert count(conn, f"SELECT count(*) FROM {ALL_EVENTS}") == 1
        # ...but a reader does not see it yet: it would resume past the open one.
        assert events(conn) == []
        slow.commit()
    page = events(conn)
    assert [e["operation_id"] for e in page] == [first, second]
    assert page[0]["seq"] < page[1]["seq"]


def test_positions_within_one_transaction_survive_a_rolled_back_savepoint(
    conn: psycopg.Connection[Any], db_dsn: str
) -> None:
    """Submits and execution in one transaction, across owners, with a savepoint rolled back:
    every event gets its own position, in the order written, and the stream shows each once."""
    with connect(db_dsn) as tx:
        a = submit(tx, "add_node", node("a"))["operation_id"]
        b = submit(tx, "add_node", node("b"), user_id="bob")["operation_id"]
        tx.execute("SAVEPOINT s")
        submit(tx, "add_node", node("undone"))
        tx.execute("ROLLBACK TO SAVEPOINT s")
        c = submit(tx, "add_node", node("c"))["operation_id"]
        run(tx)
        tx.commit()
    alice = events(conn)
    # Written in this order: the two accepted events, then each operation's execution.
    assert [(e["operation_id"], e["state"]) for e in alice[:2]] == [(a, "accepted"), (c, "accepted")]
    assert sorted((e["operation_id"], e["operation_seq"], e["state"]) for e in alice[2:]) == sorted(
        [(a, 2, "processing"), (a, 3, "committed"), (c, 2, "processing"), (c, 3, "committed")]
    )
    seqs = [e["seq"] for e in alice]
    assert seqs == sorted(set(seqs))
    assert {seq >> 20 for seq in seqs} == {seqs[0] >> 20}  # one transaction
    assert [e["state"] for e in events(conn, user_id="bob")] == ["accepted", "processing", "committed"]
    assert count(conn, "SELECT count(*) FROM prme.operations") == 3
    # Resuming after any position returns exactly the rest.
    for i, seq in enumerate(seqs):
        assert events(conn, after=seq) == alice[i + 1 :]
    assert receipt(conn, b, user_id="bob")["state"] == "committed"


def test_events_written_before_migration_0006_stay_in_the_stream(pg_server: testing.Server) -> None:
    """Upgrading moves no data: operations accepted before 0006 keep their accepted event in
    prme.operation_events, newer ones in their row, and the stream merges both by position."""
    name = testing.create_database(pg_server, prefix="prme_ledger_upgrade")
    try:
        dsn = pg_server.dsn_for(name)
        with connect(dsn, autocommit=True) as old:
            migrations.migrate(old, [m for m in migrations.load_migrations() if m.version <= 5])
            before = submit(old, "add_node", node("accepted before the upgrade"), id_type="uuid")["operation_id"]
            waiting = submit(old, "add_node", node("still waiting"), id_type="uuid")["operation_id"]
            run(old, max_count=1)
            migrations.migrate(old)
            after = submit(old, "add_node", node("accepted after the upgrade"), dependencies=[waiting])["operation_id"]
            drain(old)
            stream = events(old)
            assert [
                (e["operation_id"], e["operation_seq"], e["state"]) for e in stream if e["state"] == "accepted"
            ] == [
                (before, 1, "accepted"),
                (waiting, 1, "accepted"),
                (after, 1, "accepted"),
            ]
            assert [e["seq"] for e in stream] == sorted({e["seq"] for e in stream})
            for op in (before, waiting, after):
                assert states(old, op) == ["accepted", "processing", "committed"]
            assert count(old, "SELECT count(*) FROM prme.operations WHERE accepted_seq IS NULL") == 2
    finally:
        testing.drop_database(pg_server, name)


def test_events_of_one_operation_and_paging(conn: psycopg.Connection[Any]) -> None:
    a = submit(conn, "add_node", node("a"))["operation_id"]
    b = submit(conn, "add_node", node("b"))["operation_id"]
    drain(conn)
    only_a = events(conn, operation_id=a)
    assert [e["state"] for e in only_a] == ["accepted", "processing", "committed"]
    assert [e["operation_seq"] for e in only_a] == [1, 2, 3]
    assert only_a[-1]["detail"] == {"result": {"node_id": str(derived_id(a)), "node_version": 1}}
    assert events(conn, after=only_a[0]["seq"], operation_id=a) == only_a[1:]
    all_events = events(conn)
    pages: list[dict[str, Any]] = []
    after = 0
    while page := events(conn, after=after, max_count=2):
        pages += page
        after = page[-1]["seq"]
    assert pages == all_events and len(all_events) == 6
    assert {e["operation_id"] for e in all_events} == {a, b}
    for bad in (0, 10001, None):
        assert sqlstate(lambda m=bad: events(conn, max_count=m)) == "PR422"
    assert sqlstate(lambda: events(conn, after=-1)) == "PR422"


def test_notify_on_acceptance_is_throttled(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    with connect(db_dsn, autocommit=True) as listener:
        listener.execute("LISTEN prme_operations")

        def heard(timeout: float = 0.5) -> list[tuple[str, str]]:
            return [(n.channel, n.payload) for n in listener.notifies(timeout=timeout)]

        submit(conn, "add_node", node("hello"))
        assert heard() == [("prme_operations", "ready")]
        # Within prme.notify_interval_ms of the last notification, a submit stays quiet...
        conn.execute("SET prme.notify_interval_ms = 60000")
        submit(conn, "add_node", node("quiet"))
        assert heard() == []
        # ...and with 0 every submit notifies.
        conn.execute("SET prme.notify_interval_ms = 0")
        submit(conn, "add_node", node("loud"))
        submit(conn, "add_node", node("louder"))
        assert heard() == [("prme_operations", "ready")] * 2
        # The executor notifies once per batch (identical notifications collapse).
        drain(conn)
        assert set(heard()) == {("prme_operations", "events")}


# -----------------------------------------------------------------------------
# Long memories
# -----------------------------------------------------------------------------

WHITESPACE = re.compile(r"[^\t\n\x0b\x0c\r ]+")


def plan(content: str, budget: int) -> list[tuple[int, int, int, int, str]]:
    """The words_v1 plan, independently: (token_start, token_end, char_start, char_end, sha256)."""
    ends = [m.end() for m in WHITESPACE.finditer(content)]
    parts = []
    for start in range(0, len(ends), budget):
        stop = min(start + budget, len(ends))
        char_start = 0 if start == 0 else ends[start - 1]
        char_end = len(content) if stop == len(ends) else ends[stop - 1]
        text = content[char_start:char_end]
        parts.append((start, stop, char_start, char_end, hashlib.sha256(text.encode()).hexdigest()))
    return parts


def parts_of(conn: psycopg.Connection[Any], op: uuid.UUID) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM prme.operation_parts('alice', %s)", (op,)).fetchall()


def test_long_memory_is_planned_into_parts_and_committed_as_one(conn: psycopg.Connection[Any]) -> None:
    content = "  " + "\t".join(f"w\u00e9{i} \U0001f600" for i in range(25)) + "\n\n"
    op = submit(conn, "add_node", node(content, token_budget=8))["operation_id"]
    assert [r["outcome"] for r in run(conn)] == ["committed"]
    stored = parts_of(conn, op)
    expected = plan(content, 8)
    assert len(expected) == 7  # 50 tokens: 6 parts of 8, one of 2
    assert [(p["token_start"], p["token_end"], p["char_start"], p["char_end"], p["sha256"]) for p in stored] == expected
    assert {(p["tokenizer"], p["state"]) for p in stored} == {("words_v1", "validated")}
    row = conn.execute("SELECT id, content FROM prme.nodes").fetchone()
    assert row == (derived_id(op), content), "one memory, assembled exactly"
    assert receipt(conn, op)["result"] == {"node_id": str(derived_id(op)), "node_version": 1, "parts": 7}
    # A memory within its budget is not planned.
    short = submit(conn, "add_node", node(words(8), token_budget=8))["operation_id"]
    drain(conn)
    assert parts_of(conn, short) == []


def test_long_memory_plan_and_finished_parts_survive_a_killed_executor(
    conn: psycopg.Connection[Any], db_dsn: str
) -> None:
    content = words(100)
    op = submit(conn, "add_node", node(content, token_budget=10))["operation_id"]
    assert [r["outcome"] for r in run(conn, max_parts=3)] == ["progress"]
    first = parts_of(conn, op)
    assert [p["state"] for p in first] == ["validated"] * 3 + ["planned"] * 7
    assert receipt(conn, op)["state"] == "processing"
    assert count(conn, "SELECT count(*) FROM prme.nodes") == 0

    # Freeze the next executor call after it validated parts 4 and 5, then kill it.
    conn.execute(
        """
        CREATE FUNCTION public.part_gate() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
        BEGIN
            IF NEW.part_no = 6 THEN
                PERFORM pg_advisory_lock_shared(4242);
                PERFORM pg_advisory_unlock_shared(4242);
            END IF;
            RETURN NEW;
        END;
        $$
        """
    )
    conn.execute(
        "CREATE TRIGGER part_gate BEFORE UPDATE ON prme.operation_parts"
        " FOR EACH ROW EXECUTE FUNCTION public.part_gate()"
    )
    conn.execute("SELECT pg_advisory_lock(4242)")
    failure: list[BaseException] = []

    def doomed() -> None:
        try:
            with connect(db_dsn, autocommit=True) as c:
                run(c, max_parts=5)
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=doomed)
    thread.start()
    wait_for(lambda: _waiting_on_4242(conn) is not None, what="the executor to reach part 6")
    conn.execute("SELECT pg_terminate_backend(%s)", (_waiting_on_4242(conn),))
    thread.join(30)
    conn.execute("SELECT pg_advisory_unlock(4242)")
    assert failure and isinstance(failure[0], psycopg.OperationalError)
    assert parts_of(conn, op) == first, "the stored plan and its finished parts are as they were"

    # Restarted: the same plan, parts 1-3 untouched, the rest validated, one memory.
    for _ in range(10):
        if not run(conn, max_parts=3):
            break
    final = parts_of(conn, op)
    assert [p["planned_at"] for p in final] == [p["planned_at"] for p in first]
    assert [p["validated_at"] for p in final[:3]] == [p["validated_at"] for p in first[:3]]
    assert all(p["state"] == "validated" for p in final)
    assert conn.execute("SELECT content FROM prme.nodes").fetchall() == [(content,)]
    r = receipt(conn, op)
    assert (r["state"], r["attempts"]) == ("committed", 1)
    progress = [e["detail"] for e in events(conn, operation_id=op) if e["state"] == "processing"]
    assert progress[0] == {"attempt": 1, "worker": "test"}
    assert progress[1:] == [
        {"parts": 10, "parts_validated": 3},
        {"parts": 10, "parts_validated": 6},
        {"parts": 10, "parts_validated": 9},
    ]


# -----------------------------------------------------------------------------
# Privileges and status
# -----------------------------------------------------------------------------


def test_prme_app_uses_the_ledger_only_through_functions(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET ROLE prme_app")
    try:
        op = submit(conn, "add_node", node("via app"))["operation_id"]
        assert [r["outcome"] for r in run(conn)] == ["committed"]
        assert receipt(conn, op)["state"] == "committed"
        assert len(events(conn, operation_id=op)) == 3
        assert conn.execute("SELECT prme.derived_id(%s)", (op,)).fetchone() == (derived_id(op),)
        assert conn.execute("SELECT accepting FROM prme.ledger_status()").fetchone() == (True,)
        for forbidden in (
            "SELECT * FROM prme.operations",
            "SELECT * FROM prme.operation_events",
            "SELECT * FROM prme.operation_parts",
            "SELECT prme._jcs('{}')",
            "SELECT prme._uuid_v5(gen_random_uuid(), 'x')",
        ):
            assert sqlstate(lambda q=forbidden: conn.execute(q)) == "42501", forbidden
    finally:
        conn.execute("RESET ROLE")


def test_ledger_status_reports_the_backlog(conn: psycopg.Connection[Any]) -> None:
    a = submit(conn, "add_node", node(words(40), token_budget=10))["operation_id"]
    submit(conn, "add_node", node("b"), dependencies=[a])
    submit(conn, "add_node", node("c"))
    with conn.cursor(row_factory=dict_row) as cur:
        status = cur.execute("SELECT * FROM prme.ledger_status()").fetchone()
        assert status is not None
        assert (status["accepting"], status["ready"], status["blocked"], status["processing"]) == (True, 3, 0, 0)
        assert status["oldest_ready_at"] is not None
        run(conn, max_parts=1)
        status = cur.execute("SELECT * FROM prme.ledger_status()").fetchone()
        assert status is not None
        assert (status["ready"], status["blocked"], status["processing"]) == (0, 1, 1)
        drain(conn, max_parts=1)
        status = cur.execute("SELECT * FROM prme.ledger_status()").fetchone()
        assert status is not None
        assert (status["ready"], status["blocked"], status["processing"], status["oldest_ready_at"]) == (0, 0, 0, None)


def test_ledger_status_reveals_counts_only(conn: psycopg.Connection[Any]) -> None:
    """Granted to prme_app and shown by /ready to any token: a backlog across owners, as
    counts and one age; no owner, operation id, kind or payload (docs/LEDGER.md, Readiness)."""
    submit(conn, "add_node", node("alice's secret"))
    submit(conn, "add_event", {"content": "bob's secret"}, user_id="bob")
    conn.execute("SET ROLE prme_app")
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute("SELECT * FROM prme.ledger_status()").fetchall()
    conn.execute("RESET ROLE")
    assert len(rows) == 1
    assert list(rows[0]) == ["accepting", "ready", "blocked", "processing", "oldest_ready_at", "oldest_ready_age"]
    assert (rows[0]["ready"], rows[0]["blocked"], rows[0]["processing"]) == (2, 0, 0)
    assert "secret" not in repr(rows) and "alice" not in repr(rows) and "bob" not in repr(rows)
