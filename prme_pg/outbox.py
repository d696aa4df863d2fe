"""The local outbox: enqueue operations in a memory pack, deliver them to the ledger with receipts.

An agent's stop hook must return at once -- no network, no database, no DuckDB lock -- and
still never lose or duplicate a memory. :meth:`Outbox.enqueue` writes one durable record
into ``<pack>/outbox/`` (a :class:`~prme_pg.spool.Spool`: fsynced files moved by atomic
renames, safe for many processes at once) and returns its stable operation id.
:class:`OutboxSyncer` (``prme-pg sync``) delivers the records to PostgreSQL's operations
ledger (``prme.submit_operation``) and follows their receipts::

    pending -> submitting -> accepted -> completed
       |           |            |
       +-----------+------------+-----> rejected (with a reason)

Every transition is durable in the pack before the next step. The ledger's receipt is the
only proof of delivery: a record in ``submitting`` (the worker died, or the response to a
submit was lost) is resolved by looking its receipt up by operation id
(``prme.get_receipt``) and, if the ledger has none, submitting the same id and hash again
-- the ledger makes that idempotent. A receipt whose id, kind, hash or dependencies differ
from the local record rejects the local record with the reason; nothing is overwritten.
See docs/OUTBOX.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import itertools
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import psycopg
import rfc8785

from . import migrations
from .backends import GetLedgerStatus, GetReadiness, GetReceipt, Request, SubmitOperation
from .backends.postgres import (
    DEFAULT_STATEMENT_TIMEOUT,
    SET_STATEMENT_TIMEOUT,
    statement,
    statement_timeout_setting,
    translate_errors,
)
from .errors import IdempotencyConflict, InvalidInput, NotFoundError, PrmeError, SchemaMissing
from .models import Receipt
from .spool import Spool, StateMismatch, decode_document, time_ordered_uuid
from .sqlstate import database_unavailable, describe
from .validation import (
    LEDGER_KINDS,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    UUID_TEXT,
    check_json_depth,
    json_depth_exceeds,
    parse_uuid,
    valid_user_id,
)
from .worker import stop_on_signals

__all__ = [
    "LEDGER_KINDS",
    "STATES",
    "AfterCommit",
    "LedgerUnavailable",
    "MalformedRecord",
    "Outbox",
    "OutboxRecord",
    "OutboxSyncer",
    "Stage",
    "SyncContext",
    "SyncLock",
    "SyncLockHeld",
    "SyncProgress",
    "SyncReport",
    "backoff_delay",
    "receipt_mismatch",
    "run_request",
    "validate_dependencies",
    "validate_payload",
]

log = logging.getLogger("prme_pg.outbox")

T = TypeVar("T")

SCHEMA_VERSION = 2
#: The ledger refuses payloads over 1 MiB; the outbox measures the RFC 8785 text.
MAX_PAYLOAD_BYTES = MAX_JSON_BYTES
#: ... and payloads nested deeper than this (prme_pg.validation.MAX_JSON_DEPTH).
MAX_PAYLOAD_DEPTH = MAX_JSON_DEPTH
MAX_DEPENDENCIES = 100
STATES = ("pending", "submitting", "accepted", "completed", "rejected")
#: Receipt states after which nothing changes.
TERMINAL_RECEIPT_STATES = frozenset({"committed", "rejected"})
#: Fault injection for tests: the syncer calls os._exit(CRASH_EXIT_CODE) at this named point.
CRASH_ENV = "PRME_SYNC_CRASH_AT"
CRASH_POINTS = ("after_submitting", "after_submit", "after_accepted", "after_receipt")
CRASH_EXIT_CODE = 86


# -- records -------------------------------------------------------------------------


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _now() -> datetime:
    return datetime.now(UTC)


def canonical_payload(payload: object) -> tuple[dict[str, Any], str]:
    """The payload as plain JSON and the sha256 hex of its RFC 8785 form (what the ledger recomputes)."""
    if not isinstance(payload, Mapping):
        raise InvalidInput(f"payload must be a JSON object, got {type(payload).__name__}")
    check_json_depth("payload", payload, MAX_PAYLOAD_DEPTH)  # before rfc8785, which recurses
    try:
        canonical = rfc8785.dumps(payload)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise InvalidInput(f"payload has no RFC 8785 form: {exc}") from None
    if len(canonical) > MAX_PAYLOAD_BYTES:
        raise InvalidInput("payload must be at most 1 MiB")
    plain: dict[str, Any] = json.loads(canonical)
    return plain, hashlib.sha256(canonical).hexdigest()


# -- payloads, checked at enqueue as the executor will read them -----------------------------

# An explicit offset is required, as prme._payload_time requires it.
_TIME_TEXT = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?(Z|z|[+-][0-9]{2}(:?[0-9]{2})?)"
)


def _is_text(value: object) -> bool:
    return isinstance(value, str)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: object) -> bool:  # JSON has one number type: 512 and 512.0 are both integers
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())


_FIELD_CHECKS: dict[str, tuple[Callable[[object], bool], str]] = {
    "text": (_is_text, "a string"),
    "number": (_is_number, "a number"),
    "integer": (_is_integer, "an integer"),
    "uuid": (lambda v: isinstance(v, str) and UUID_TEXT.fullmatch(v) is not None, "a UUID (8-4-4-4-12 hex digits)"),
    "uuids": (
        lambda v: isinstance(v, list) and all(isinstance(e, str) and UUID_TEXT.fullmatch(e) for e in v),
        "an array of UUIDs (8-4-4-4-12 hex digits)",
    ),
    "time": (
        lambda v: isinstance(v, str) and _TIME_TEXT.fullmatch(v) is not None,
        "an ISO 8601 time with a UTC offset",
    ),
    "object": (lambda v: isinstance(v, dict), "a JSON object"),
    "texts": (lambda v: isinstance(v, list) and all(isinstance(e, str) for e in v), "an array of strings"),
}

#: Shapes the executor reads as text, where a JSON null is as good as leaving the field out;
#: a null number or object is refused (it has no numeric value, no fields).
_NULL_MEANS_ABSENT = frozenset({"text", "uuid", "uuids", "time", "texts"})

#: Each kind's payload fields and their JSON shapes, required ones first: what the executor
#: (prme._apply_operation, sql/postgres/440_run_operations.sql) accepts. Values (ranges, scope
#: syntax, outcome names) stay the engine's to judge; tests/test_outbox_validation.py holds
#: this table and the executor to the same verdicts.
PAYLOAD_FIELDS: dict[str, dict[str, str]] = {
    "add_node": {
        "content": "text",
        "scope": "text",
        "namespace": "text",
        "kind": "text",
        "confidence_base": "number",
        "salience_base": "number",
        "stability": "text",
        "decay_profile": "text",
        "next_review_at": "time",
        "token_budget": "integer",
    },
    "add_event": {
        "content": "text",
        "scope": "text",
        "namespace": "text",
        "kind": "text",
        "payload": "object",
        "occurred_at": "time",
    },
    "reinforce": {"node_id": "uuid", "evidence_id": "uuid"},
    "archive_node": {"node_id": "uuid"},
    "record_outcome": {
        "node_id": "uuid",
        "outcome": "text",
        "evidence_id": "uuid",
        "profile_id": "text",
        "thread_id": "text",
        "notes": "text",
    },
    "link_correction": {"message": "text", "candidate_node_ids": "uuids", "thread_id": "text"},
    "add_memory": {
        "content": "text",
        "user_id": "text",
        "agent_id": "text",
        "session_id": "text",
        "categories": "texts",
    },
}
PAYLOAD_REQUIRED: dict[str, tuple[str, ...]] = {
    "add_node": ("content",),
    "add_event": ("content",),
    "reinforce": ("node_id",),
    "archive_node": ("node_id",),
    "record_outcome": ("node_id", "outcome"),
    "link_correction": ("message", "candidate_node_ids"),
    "add_memory": ("content",),
}


def validate_payload(kind: str, payload: Mapping[str, Any]) -> None:
    """:class:`InvalidInput` naming the field, for a payload the executor could never apply.

    ``payload`` is plain JSON (as :func:`canonical_payload` returns it). Unknown fields,
    missing required ones (null counts as missing) and fields of the wrong shape are
    refused here, at enqueue, rather than by the worker long after the hook returned.
    """
    fields = PAYLOAD_FIELDS[kind]
    unknown = sorted(set(payload) - set(fields))
    if unknown:
        raise InvalidInput(f"unknown payload field for {kind}: {', '.join(unknown)} (allowed: {', '.join(fields)})")
    missing = [name for name in PAYLOAD_REQUIRED[kind] if payload.get(name) is None]
    if missing:
        raise InvalidInput(f"missing payload field for {kind}: {', '.join(missing)}")
    for name, value in payload.items():
        check, shape = _FIELD_CHECKS[fields[name]]
        if value is None and fields[name] in _NULL_MEANS_ABSENT:
            continue
        if not check(value):
            shown = json.dumps(value)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise InvalidInput(f"payload field {name} of {kind} must be {shape}, got {shown}")


def validate_dependencies(dependencies: Iterable[UUID | str], operation_id: UUID) -> tuple[UUID, ...]:
    if isinstance(dependencies, str | UUID):
        raise InvalidInput("dependencies must be a list of operation ids")
    try:
        parsed = {parse_uuid("dependencies", d) for d in dependencies}
    except TypeError:
        raise InvalidInput(f"dependencies must be a list of operation ids, got {dependencies!r:.80}") from None
    if len(parsed) > MAX_DEPENDENCIES:
        raise InvalidInput(f"an operation may have at most {MAX_DEPENDENCIES} dependencies")
    if operation_id in parsed:
        raise InvalidInput("an operation cannot depend on itself")
    return tuple(sorted(parsed, key=str))  # the ledger's order: uuid order is lowercase-hex order


class MalformedRecord(PrmeError, ValueError):
    """An outbox file is not a valid record (edited by hand, or from an unknown version)."""


def _aware(text: str) -> datetime:
    """A stored time; one without a time zone is refused (it cannot be ordered against the others)."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"time {text!r} has no time zone")
    return moment


@dataclass(frozen=True, slots=True)
class OutboxRecord:
    """One operation in the outbox. ``state`` is the folder the record is in (the truth);
    ``receipt`` is the last ledger receipt seen, as a JSON object; ``reason`` says why a
    record was rejected; ``attempts`` counts submits that reached the ledger."""

    operation_id: UUID
    user_id: str
    kind: str
    schema_version: int
    dependencies: tuple[UUID, ...]
    payload: dict[str, Any]
    payload_hash: str
    state: str
    reason: str | None
    receipt: dict[str, Any] | None
    attempts: int
    created_at: datetime
    updated_at: datetime

    @property
    def name(self) -> str:
        return str(self.operation_id)

    def document(self) -> dict[str, Any]:
        return {
            "operation_id": str(self.operation_id),
            "user_id": self.user_id,
            "kind": self.kind,
            "schema_version": self.schema_version,
            "dependencies": [str(d) for d in self.dependencies],
            "payload": self.payload,
            "payload_hash": self.payload_hash,
            "state": self.state,
            "reason": self.reason,
            "receipt": self.receipt,
            "attempts": self.attempts,
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any], state: str) -> OutboxRecord:
        """A record from its stored document; ``state`` is the folder it was found in."""
        try:
            payload = document["payload"]
            receipt = document.get("receipt")
            if not isinstance(payload, dict) or not (receipt is None or isinstance(receipt, dict)):
                raise TypeError("payload and receipt must be JSON objects")
            if json_depth_exceeds(payload, MAX_PAYLOAD_DEPTH):
                raise ValueError(f"the payload nests deeper than {MAX_PAYLOAD_DEPTH} levels")
            reason = document.get("reason")
            created_at = _aware(document["created_at"])
            updated_at = _aware(document["updated_at"])
            return cls(
                operation_id=UUID(document["operation_id"]),
                user_id=str(document["user_id"]),
                kind=str(document["kind"]),
                schema_version=int(document["schema_version"]),
                dependencies=tuple(UUID(d) for d in document["dependencies"]),
                payload=payload,
                payload_hash=str(document["payload_hash"]),
                state=state,
                reason=None if reason is None else str(reason),
                receipt=receipt,
                attempts=int(document.get("attempts", 0)),
                created_at=created_at,
                updated_at=updated_at,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise MalformedRecord(f"not an outbox record: {exc!r}") from None

    def with_changes(self, state: str, **changes: Any) -> OutboxRecord:
        """A copy in ``state`` with ``changes`` and a new updated_at."""
        return dataclasses.replace(self, state=state, updated_at=_now(), **changes)

    def payload_matches_hash(self) -> bool:
        try:
            return canonical_payload(self.payload)[1] == self.payload_hash
        except InvalidInput:
            return False


def receipt_document(receipt: Receipt) -> dict[str, Any]:
    """A ledger receipt as a JSON object (ids and times as text)."""
    return {
        "operation_id": str(receipt.operation_id),
        "kind": receipt.kind,
        "payload_hash": receipt.payload_hash,
        "dependencies": [str(d) for d in receipt.dependencies],
        "state": receipt.state,
        "blocked_by": [str(d) for d in receipt.blocked_by],
        "result": receipt.result,
        "error": receipt.error,
        "attempts": receipt.attempts,
        "created_at": _iso(receipt.created_at),
        "updated_at": _iso(receipt.updated_at),
        "created": receipt.created,
    }


def receipt_mismatch(record: OutboxRecord, receipt: Receipt) -> str | None:
    """Why ``receipt`` is not the receipt of ``record`` (None when it is)."""
    differs = []
    if receipt.operation_id != str(record.operation_id):
        differs.append(f"operation_id (ledger {receipt.operation_id}, local {record.operation_id})")
    if receipt.kind != record.kind:
        differs.append(f"kind (ledger {receipt.kind}, local {record.kind})")
    if receipt.payload_hash != record.payload_hash:
        differs.append(f"payload_hash (ledger {receipt.payload_hash}, local {record.payload_hash})")
    if sorted(receipt.dependencies) != sorted(str(d) for d in record.dependencies):
        differs.append("dependencies")
    if not differs:
        return None
    return "the ledger's receipt differs from the local record in " + ", ".join(differs)


# -- the outbox ------------------------------------------------------------------------


class Outbox:
    """The outbox of a memory pack: ``<pack>/outbox/``, one file per operation (see module docstring).

    Needs neither the pack's DuckDB file nor a database: any number of processes may
    enqueue at once, also while the pack is open elsewhere.
    """

    def __init__(self, pack: str | os.PathLike[str], *, create: bool = True) -> None:
        """``create=False`` opens the outbox read-only (for counting): no folder is made."""
        self.pack = Path(pack).expanduser().absolute()
        if self.pack.exists() and not self.pack.is_dir():
            raise PrmeError(f"{self.pack} is not a folder; a memory pack is a folder")
        self.root = self.pack / "outbox"
        self.spool = Spool(self.root, STATES, create=create)

    def enqueue(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        user_id: str,
        dependencies: Iterable[UUID | str] = (),
        operation_id: UUID | str | None = None,
    ) -> OutboxRecord:
        """Store one operation for delivery; durable when this returns. Returns its record.

        Validated as ``prme.submit_operation`` would at submit time (kind, a JSON object of at
        most 1 MiB with an RFC 8785 form, user_id, at most 100 dependencies), and the payload's
        fields as the executor will read them (:func:`validate_payload`); the payload hash is
        computed here. Without ``operation_id`` a time-ordered UUIDv7 is chosen. With one,
        enqueue is idempotent: the same id with the same operation returns the stored record
        (in whatever state it reached); with another user, kind, payload or dependencies it
        raises :class:`IdempotencyConflict`. Operation ids are unique per pack.
        """
        if not isinstance(kind, str) or kind not in LEDGER_KINDS:
            raise InvalidInput(f"kind must be one of {', '.join(LEDGER_KINDS)}, got {kind!r:.80}")
        user_id = valid_user_id(user_id)
        plain, payload_hash = canonical_payload(payload)
        validate_payload(kind, plain)
        op_id = time_ordered_uuid() if operation_id is None else parse_uuid("operation_id", operation_id)
        now = _now()
        record = OutboxRecord(
            operation_id=op_id,
            user_id=user_id,
            kind=kind,
            schema_version=SCHEMA_VERSION,
            dependencies=validate_dependencies(dependencies, op_id),
            payload=plain,
            payload_hash=payload_hash,
            state="pending",
            reason=None,
            receipt=None,
            attempts=0,
            created_at=now,
            updated_at=now,
        )
        try:
            self.spool.put(record.name, record.document(), "pending")
        except FileExistsError:
            return self._replayed(record)
        return record

    def _replayed(self, record: OutboxRecord) -> OutboxRecord:
        try:
            existing = self.get(record.operation_id)
        except (MalformedRecord, OSError) as exc:
            raise IdempotencyConflict(f"operation_id {record.operation_id} is taken by an unreadable record") from exc
        if existing is None:  # pragma: no cover - records are never deleted
            raise IdempotencyConflict(f"operation_id {record.operation_id} is taken")
        differs = [
            name
            for name in ("user_id", "kind", "schema_version", "payload_hash", "dependencies")
            if getattr(existing, name) != getattr(record, name)
        ]
        if differs:
            raise IdempotencyConflict(
                f"operation_id {record.operation_id} was already used for another operation "
                f"(it differs in {', '.join(differs)})"
            )
        return existing

    def get(self, operation_id: UUID | str) -> OutboxRecord | None:
        """The record with this operation id, or None. :class:`MalformedRecord` if it does not parse."""
        name = str(parse_uuid("operation_id", operation_id))
        try:
            found = self.spool.get(name)
        except ValueError as exc:
            raise MalformedRecord(f"outbox record {name} does not parse: {exc}") from exc
        return None if found is None else OutboxRecord.from_document(found[1], found[0])

    def load(self, name: str, state: str) -> OutboxRecord | None:
        """The record ``name`` if it is (still) in ``state``; :class:`MalformedRecord` if it does not parse.

        A file this process may not read raises its OSError (e.g. PermissionError).
        """
        try:
            data = self.spool.read_bytes(name, state)
        except FileNotFoundError:
            return None
        except ValueError as exc:  # a symlink or a folder under a record's name
            raise MalformedRecord(f"outbox record {name} is not readable: {exc}") from exc
        try:
            document = decode_document(name, data)
        except ValueError as exc:
            raise MalformedRecord(f"outbox record {name} does not parse: {exc}") from exc
        record = OutboxRecord.from_document(document, state)
        if record.name != name:
            raise MalformedRecord(f"outbox record {name} names another operation_id ({record.name})")
        return record

    def records(self, state: str) -> list[OutboxRecord]:
        """Readable records in ``state``, oldest first (by created_at, then id)."""
        found = []
        for name in self.spool.names(state):
            with contextlib.suppress(MalformedRecord, OSError):
                record = self.load(name, state)
                if record is not None:
                    found.append(record)
        return sorted(found, key=lambda r: (r.created_at, r.name))

    def counts(self) -> dict[str, tuple[int, datetime | None]]:
        """Per state: (records, oldest file time)."""
        return self.spool.counts()

    def transition(self, moves: Sequence[tuple[OutboxRecord, OutboxRecord]]) -> None:
        """Durably move records (old, new) from old.state to new.state, rewriting them; one batch
        per (from, to) pair, each with one fsync per folder."""
        groups: dict[tuple[str, str], list[tuple[str, Mapping[str, Any] | None]]] = {}
        for old, new in moves:
            groups.setdefault((old.state, new.state), []).append((old.name, new.document()))
        for (from_state, to_state), batch in groups.items():
            self.spool.move_many(batch, from_state, to_state)


# -- delivery ------------------------------------------------------------------------


class LedgerUnavailable(PrmeError):
    """The ledger cannot be reached, or is not ready to ingest; the syncer backs off and retries."""


class SyncLockHeld(PrmeError):
    """Another process is already syncing this pack's outbox."""

    def __init__(self, path: Path, holder: int | None) -> None:
        who = f"process {holder}" if holder else "another process"
        super().__init__(
            f"the outbox of {path.parent.parent} is already being synced by {who} (lock {path}); "
            "one sync worker per pack: stop that one first, or let it deliver"
        )
        self.holder = holder


class SyncLock:
    """An exclusive ``flock`` on ``<pack>/outbox/sync.lock``, held until :meth:`release` (or process exit).

    The file holds the holder's pid, so a refused second worker can name it. The kernel
    drops the lock when the holder dies, even by SIGKILL: no stale locks.
    """

    def __init__(self, outbox: Outbox) -> None:
        self.path = outbox.root / "sync.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            raise SyncLockHeld(self.path, int(text) if text.isdigit() else None) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> SyncLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def backoff_delay(failures: int, *, base: float = 0.5, cap: float = 30.0) -> float:
    """Seconds to wait after ``failures`` consecutive failures: base, 2*base, 4*base, ... at most cap."""
    if failures < 1:
        return 0.0
    return float(min(cap, base * 2.0 ** min(failures - 1, 62)))


def _crash_point(name: str) -> None:
    """Test hook: die here, as abruptly as SIGKILL, when PRME_SYNC_CRASH_AT names this point."""
    if os.environ.get(CRASH_ENV) == name:
        os._exit(CRASH_EXIT_CODE)


@dataclass
class SyncContext:
    """What a sync stage or after-commit callback gets (see :class:`OutboxSyncer`)."""

    pack: Path
    outbox: Outbox
    dsn: str
    #: The syncer's autocommit connection, open for the cycle.
    connection: psycopg.Connection[Any]
    stop: threading.Event

    @property
    def stop_requested(self) -> bool:
        """SIGTERM/SIGINT (or :meth:`OutboxSyncer.stop`) asked the worker to stop: finish the current item."""
        return self.stop.is_set()

    def execute(self, request: Request[T]) -> T:
        """Run a prme_pg backend request (e.g. PublishSnapshot) on the cycle's connection."""
        return run_request(self.connection, request)


def run_request(conn: psycopg.Connection[Any], request: Request[T]) -> T:
    """One backend request on one connection: the SQL is prme_pg.backends.postgres's."""
    call = statement(request)
    with translate_errors():
        cur = conn.cursor(row_factory=call.row_factory)
        cur.execute(call.query, call.params)
        return call.result(cur.fetchall())


@dataclass(frozen=True)
class SyncProgress:
    """Progress of the current cycle's phase: ``submit`` (pending records) or ``poll`` (accepted ones)."""

    phase: str
    done: int
    total: int


@dataclass
class SyncReport:
    """What one or more cycles did (transitions made, by target state)."""

    cycles: int = 0
    stage_items: int = 0
    submitted: int = 0
    accepted: int = 0
    completed: int = 0
    rejected: int = 0
    deferred: int = 0
    #: Record files the worker may not read (left in place, see OutboxSyncer._skip_unreadable).
    skipped: int = 0
    failures: int = 0
    completed_records: list[OutboxRecord] = field(default_factory=list, repr=False)
    #: Records accepted in this cycle: their receipt is fresh, the poll skips them.
    accepted_ids: set[UUID] = field(default_factory=set, repr=False)

    def add(self, other: SyncReport) -> None:
        for name in ("cycles", "stage_items", "submitted", "accepted", "completed", "rejected", "deferred", "skipped"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def summary(self) -> dict[str, int]:
        return {
            name: getattr(self, name)
            for name in (
                "cycles",
                "stage_items",
                "submitted",
                "accepted",
                "completed",
                "rejected",
                "deferred",
                "skipped",
                "failures",
            )
        }


Stage = Callable[[SyncContext], int]
AfterCommit = Callable[[SyncContext, list[OutboxRecord]], None]


class OutboxSyncer:
    """Delivers a pack's outbox to the PostgreSQL ledger (``prme-pg sync``). One per pack.

    One cycle (:meth:`run_cycle`):

    1. The ledger's readiness to ingest is checked first -- the checks of ``GET /ready``:
       it accepts writes, has exactly this release's migrations, and its ledger accepts
       submits. Not ready: :class:`LedgerUnavailable`, no stage runs, nothing changes.
    2. ``stages`` run in order, each ``stage(context) -> int`` (items it handled; e.g. the
       learning queue's extraction, which enqueues operations into this outbox). A stage
       that raises is logged and skipped for this cycle; a lost connection ends the cycle.
    3. Records left in ``submitting`` (a crash, a lost response) are resolved by their
       receipt (``prme.get_receipt``); those the ledger does not know are submitted again
       with the same id and hash.
    4. ``pending`` records, oldest first, in batches of ``batch_size``: a record whose
       payload does not match its hash (a tampered file) or that does not parse is
       rejected with the reason, never submitted; one whose dependency is not yet
       delivered (pending here, or neither here nor in the ledger) waits; the rest move
       to ``submitting`` (durable), are submitted in one transaction, and move to
       ``accepted`` with their receipt. A receipt that is not
       the record's (id, kind, hash, dependencies) -- or a PR409 -- rejects the record.
    5. ``accepted`` records from earlier cycles are polled (``prme.get_receipt``); a
       rejected receipt moves the record to ``rejected``, a committed one to ``completed``
       -- after the ``after_commit`` callbacks.

    Extension points, for other capabilities (the learning queue) to add work without
    touching this loop:

    * ``stages``: ``stage(context) -> int``, run at the start of every cycle (step 1).
    * ``after_commit``: ``callback(context, records)`` with a batch of records whose
      operations the ledger committed, *before* they move to ``completed`` (e.g. publish
      the affected snapshots). A callback that raises leaves the batch in ``accepted``, so
      the next cycle calls the callbacks with it again: at-least-once, make them idempotent.

    Both get a :class:`SyncContext`: the pack path, the :class:`Outbox`, the DSN, the
    cycle's autocommit psycopg connection (``context.execute(request)`` runs any prme_pg
    backend request on it) and ``stop_requested`` (long stages check it between items).
    Both run under the pack's sync lock, never beside another worker of the same pack.

    :meth:`run` repeats cycles until stopped -- SIGTERM/SIGINT stop it between records
    (at most one batch, which is one transaction) -- backing off exponentially
    (:func:`backoff_delay`) while the ledger is unavailable. Call :meth:`acquire` (or use
    ``with``) first: it takes ``<pack>/outbox/sync.lock`` or raises :class:`SyncLockHeld`.
    """

    def __init__(
        self,
        pack: str | os.PathLike[str],
        dsn: str,
        *,
        stages: Sequence[Stage] = (),
        after_commit: Sequence[AfterCommit] = (),
        batch_size: int = 100,
        poll_interval: float = 1.0,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        connect_timeout: int = 5,
        statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT,
        on_progress: Callable[[SyncProgress], None] | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        if not 1 <= batch_size <= 1000:
            raise ValueError("batch_size must be between 1 and 1000")
        self.outbox = Outbox(pack)
        self.dsn = dsn
        self.stages = list(stages)
        self.after_commit = list(after_commit)
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.connect_timeout = connect_timeout
        self._statement_timeout = statement_timeout_setting(statement_timeout)
        self.on_progress = on_progress
        self.stop_event = stop or threading.Event()
        self.lock = SyncLock(self.outbox)
        self._conn: psycopg.Connection[Any] | None = None
        self._context: SyncContext | None = None  # of the cycle running
        self._skipped: set[tuple[str, str]] = set()  # (state, name) of unreadable files already logged
        self._expected_migrations = [f"{m.version}:{m.sha256}" for m in migrations.load_migrations()]

    # -- lifecycle --

    def acquire(self) -> None:
        self.lock.acquire()
        self.outbox.spool.sweep_tmp()  # leftovers of writers that died mid-write

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            self._conn = None
        self.lock.release()

    def __enter__(self) -> OutboxSyncer:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stop(self) -> None:
        """Ask the worker to stop after the current record."""
        self.stop_event.set()

    # -- the ledger --

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            try:
                self._conn = psycopg.connect(
                    self.dsn, autocommit=True, connect_timeout=self.connect_timeout, application_name="prme-pg sync"
                )
            except psycopg.OperationalError as exc:
                raise LedgerUnavailable(f"cannot connect to the ledger: {exc}".strip()) from exc
            if self._statement_timeout is not None:  # as on the clients' pool connections (docs/CLIENTS.md)
                self._conn.execute(SET_STATEMENT_TIMEOUT, [self._statement_timeout])
        return self._conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
        self._conn = None

    def readiness_problem(self, conn: psycopg.Connection[Any]) -> str | None:
        """Why the ledger cannot ingest now (None when it can): the checks of ``GET /ready``."""
        try:
            accepts_writes, applied = run_request(conn, GetReadiness())
        except (psycopg.errors.InvalidSchemaName, psycopg.errors.UndefinedFunction, SchemaMissing):
            return "the database has no prme schema (run prme-pg migrate)"
        if not accepts_writes:
            return "the database does not accept writes"
        if list(applied) != self._expected_migrations:
            first = next(a or e for a, e in itertools.zip_longest(applied, self._expected_migrations) if a != e)
            return (
                f"migrations differ: database has {len(applied)}, this prme-pg has {len(self._expected_migrations)}; "
                f"first difference at {first.split(':')[0]} (run prme-pg migrate, or upgrade prme-pg)"
            )
        if not run_request(conn, GetLedgerStatus()).accepting:
            return "the ledger does not accept submits"
        return None

    # -- one cycle --

    def run_cycle(self) -> SyncReport:
        """One cycle (see the class docstring). Raises :class:`LedgerUnavailable` when the
        ledger cannot be reached or is not ready; whatever was done so far is durable."""
        report = SyncReport(cycles=1)
        try:
            conn = self._connection()
            # Before the stages too: a stage (the learning queue's extraction) uses the database,
            # and a database that is not ready must cost its records nothing.
            problem = self.readiness_problem(conn)
            if problem is not None:
                raise LedgerUnavailable(f"the ledger is not ready to ingest: {problem}")
            context = SyncContext(self.outbox.pack, self.outbox, self.dsn, conn, self.stop_event)
            for stage in self.stages:
                if self.stop_event.is_set():
                    return report
                try:
                    report.stage_items += stage(context)
                except Exception as exc:
                    if database_unavailable(exc):
                        raise
                    log.exception("sync stage %s failed; delivery goes on", getattr(stage, "__name__", stage))
            self._context = context
            self._resolve_submitting(conn, report)
            self._submit_pending(conn, report)
            self._poll_accepted(conn, report)
        except psycopg.Error as exc:
            # Lost connection, server shutting down, a serialization failure ...: whatever
            # was submitted is resolved by its receipt in the next cycle.
            self._drop_connection()
            raise LedgerUnavailable(f"the ledger failed: {describe(exc)}") from exc
        finally:
            self._context = None
        return report

    def _progress(self, phase: str, done: int, total: int) -> None:
        if self.on_progress is not None:
            self.on_progress(SyncProgress(phase, done, total))

    def _readable(self, names: Iterable[str], state: str, report: SyncReport) -> list[OutboxRecord]:
        """Load records. One that does not parse is moved to rejected with the reason (never
        submitted); one this process may not read (PermissionError ...) is skipped, and stays
        where it is for when it can be read."""
        found = []
        for name in names:
            try:
                record = self.outbox.load(name, state)
            except MalformedRecord as exc:
                self._reject_unreadable(name, state, str(exc), report)
                continue
            except OSError as exc:
                self._skip_unreadable(name, state, exc, report)
                continue
            if record is not None:
                found.append(record)
        return sorted(found, key=lambda r: (r.created_at, r.name))

    def _skip_unreadable(self, name: str, state: str, error: OSError, report: SyncReport) -> None:
        """A record file the worker may not read: it cannot be judged, so it is neither submitted nor
        rejected. Logged once per worker and file (not every cycle); counted in every cycle."""
        report.skipped += 1
        if (state, name) not in self._skipped:
            self._skipped.add((state, name))
            log.warning(
                "outbox record %s in %s/ is not readable, skipped until it is: %s: %s",
                name,
                state,
                type(error).__name__,
                error.strerror or error,
            )

    def _reject_unreadable(self, name: str, state: str, reason: str, report: SyncReport) -> None:
        """Set an unreadable file aside in rejected/. Its bytes are not copied (it may be anything, even
        a secret): the replacement keeps their sha256 and size, enough to match it with a backup."""
        try:
            raw = self.outbox.spool.read_bytes(name, state)
        except (OSError, ValueError):
            return  # moved away meanwhile, or not a regular file: not a record, left alone
        document = {
            "operation_id": name,
            "state": "rejected",
            "reason": reason,
            "sha256": hashlib.sha256(raw).hexdigest(),
            "size": len(raw),
            "updated_at": _iso(_now()),
        }
        with contextlib.suppress(StateMismatch):
            self.outbox.spool.move(name, state, "rejected", document)
            report.rejected += 1
            log.warning("outbox record %s rejected: %s", name, reason)

    def _accept(
        self, records: Sequence[OutboxRecord], receipts: Sequence[Receipt | str], report: SyncReport
    ) -> list[OutboxRecord]:
        """Move submitting records to accepted (their receipt) or rejected (a reason); returns the accepted."""
        moves, accepted = [], []
        for record, outcome in zip(records, receipts, strict=True):
            if isinstance(outcome, str):
                moves.append((record, record.with_changes("rejected", reason=outcome, attempts=record.attempts + 1)))
                continue
            mismatch = receipt_mismatch(record, outcome)
            changes = {"receipt": receipt_document(outcome), "attempts": record.attempts + 1}
            if mismatch is not None:
                moves.append((record, record.with_changes("rejected", reason=mismatch, **changes)))
            else:
                new = record.with_changes("accepted", **changes)
                moves.append((record, new))
                accepted.append(new)
        self.outbox.transition(moves)
        for old, new in moves:
            if new.state == "rejected":
                report.rejected += 1
                log.warning("outbox record %s rejected: %s", old.name, new.reason)
        report.accepted += len(accepted)
        report.accepted_ids.update(r.operation_id for r in accepted)
        return accepted

    def _resolve_submitting(self, conn: psycopg.Connection[Any], report: SyncReport) -> None:
        """Records left in submitting: the receipt decides; unknown to the ledger -> submit again."""
        leftovers = self._readable(self.outbox.spool.names("submitting"), "submitting", report)
        known: list[OutboxRecord] = []
        receipts: list[Receipt | str] = []
        unknown: list[OutboxRecord] = []
        for record in leftovers:
            if self.stop_event.is_set():
                return
            try:
                receipts.append(
                    run_request(conn, GetReceipt(user_id=record.user_id, operation_id=str(record.operation_id)))
                )
                known.append(record)
            except NotFoundError:
                unknown.append(record)
            except InvalidInput as exc:  # e.g. a user_id edited on disk: this record only, never the cycle
                receipts.append(f"the ledger refused the receipt lookup ({exc.sqlstate}): {exc}")
                known.append(record)
            except psycopg.Error as exc:
                receipts.append(_record_failure("the receipt lookup", exc))
                known.append(record)
        if known:
            log.info("resolved %d record(s) left in submitting by their receipts", len(known))
            self._finish_terminal(self._accept(known, receipts, report), report)
        for start in range(0, len(unknown), self.batch_size):
            if self.stop_event.is_set():
                return
            batch = unknown[start : start + self.batch_size]
            self._finish_terminal(self._accept(batch, self._submit(conn, batch, report), report), report)

    def _submit_pending(self, conn: psycopg.Connection[Any], report: SyncReport) -> None:
        pending = self._readable(self.outbox.spool.names("pending"), "pending", report)
        total, done = len(pending), 0
        self._progress("submit", 0, total)
        local_states = self._local_dependency_states(pending)
        missing = self._missing_dependencies(conn, pending, local_states)
        for start in range(0, len(pending), self.batch_size):
            if self.stop_event.is_set():
                return
            batch: list[OutboxRecord] = []
            in_batch: set[UUID] = set()
            rejects: list[tuple[OutboxRecord, OutboxRecord]] = []
            for record in pending[start : start + self.batch_size]:
                verdict = self._check_pending(record, local_states, in_batch, missing)
                if verdict == "ok":
                    batch.append(record)
                    in_batch.add(record.operation_id)
                elif verdict == "wait":
                    report.deferred += 1
                else:
                    rejects.append((record, record.with_changes("rejected", reason=verdict)))
                    local_states[record.operation_id] = "rejected"
            if rejects:
                self.outbox.transition(rejects)
                report.rejected += len(rejects)
                for old, new in rejects:
                    log.warning("outbox record %s rejected: %s", old.name, new.reason)
            if batch:
                self.outbox.spool.move_many([(r.name, None) for r in batch], "pending", "submitting")
                submitting = [r.with_changes("submitting") for r in batch]
                _crash_point("after_submitting")
                outcomes = self._submit(conn, submitting, report)
                _crash_point("after_submit")
                accepted = self._accept(submitting, outcomes, report)
                for record in accepted:
                    local_states[record.operation_id] = "accepted"
                _crash_point("after_accepted")
                self._finish_terminal(accepted, report)
            done += len(pending[start : start + self.batch_size])
            self._progress("submit", done, total)

    def _local_dependency_states(self, pending: Sequence[OutboxRecord]) -> dict[UUID, str]:
        """The local state of every dependency that is in this outbox (for the others, ask the ledger)."""
        states: dict[UUID, str] = {r.operation_id: "pending" for r in pending}
        wanted = {d for r in pending for d in r.dependencies} - states.keys()
        for dependency in wanted:
            with contextlib.suppress(ValueError, OSError):  # unreadable: its own turn decides
                found = self.outbox.spool.get(str(dependency))
                if found is not None:
                    states[dependency] = found[0]
        return states

    @staticmethod
    def _missing_dependencies(
        conn: psycopg.Connection[Any], pending: Sequence[OutboxRecord], local_states: Mapping[UUID, str]
    ) -> set[tuple[str, UUID]]:
        """(user, dependency) pairs neither in this outbox nor in the ledger: the dependency may still be
        on its way into the outbox (enqueued after its dependent was listed), so its dependents wait."""
        missing = set()
        asked = {(r.user_id, d) for r in pending for d in r.dependencies if d not in local_states}
        for user_id, dependency in asked:
            try:
                run_request(conn, GetReceipt(user_id=user_id, operation_id=str(dependency)))
            except NotFoundError:
                missing.add((user_id, dependency))
            except InvalidInput:
                pass  # a user_id the ledger refuses: the submit says so, for that record
            except psycopg.Error as exc:
                _record_failure("the dependency lookup", exc)  # the same: the submit says so
        return missing

    @staticmethod
    def _check_pending(
        record: OutboxRecord,
        local_states: Mapping[UUID, str],
        in_batch: set[UUID],
        missing: set[tuple[str, UUID]],
    ) -> str:
        """ "ok" to submit, "wait" for a dependency not yet delivered, or the reason to reject it."""
        if record.kind not in LEDGER_KINDS or record.schema_version != SCHEMA_VERSION:
            return f"not a deliverable operation (kind {record.kind!r}, schema_version {record.schema_version})"
        if not record.payload_matches_hash():
            return "the payload does not match its payload_hash (the record was changed after enqueue); not submitted"
        for dependency in record.dependencies:
            state = local_states.get(dependency)
            if state == "rejected":
                return f"dependency {dependency} was rejected"
            if state in ("pending", "submitting") and dependency not in in_batch:
                return "wait"
            if state is None and (record.user_id, dependency) in missing:
                return "wait"
        return "ok"

    def _submit(
        self, conn: psycopg.Connection[Any], records: Sequence[OutboxRecord], report: SyncReport
    ) -> list[Receipt | str]:
        """Submit records (already durable in submitting): one transaction for the batch; if the
        ledger refuses one, each on its own to find which. Returns a receipt or a reject reason each."""
        report.submitted += len(records)
        try:
            with conn.transaction():
                return [run_request(conn, _submit_request(r)) for r in records]
        except (IdempotencyConflict, InvalidInput, NotFoundError):
            pass  # the batch rolled back: submit one by one
        except psycopg.Error as exc:
            if database_unavailable(exc):
                raise
            # About one record (a program limit, say): the batch rolled back, find which.
        outcomes: list[Receipt | str] = []
        for record in records:
            try:
                outcomes.append(run_request(conn, _submit_request(record)))
            except IdempotencyConflict as exc:
                outcomes.append(f"the ledger holds another operation under this operation_id: {exc}")
            except (InvalidInput, NotFoundError) as exc:
                outcomes.append(f"the ledger refused the operation ({exc.sqlstate}): {exc}")
            except psycopg.Error as exc:
                outcomes.append(_record_failure("the operation", exc))
        return outcomes

    def _finish_terminal(self, accepted: Sequence[OutboxRecord], report: SyncReport) -> None:
        """Accepted records whose last receipt is already terminal move on at once."""
        terminal = [r for r in accepted if (r.receipt or {}).get("state") in TERMINAL_RECEIPT_STATES]
        if terminal:
            self._complete(terminal, report)

    def _complete(self, records: Sequence[OutboxRecord], report: SyncReport) -> None:
        """Records (in accepted) with a terminal receipt: rejected ones move to rejected; committed
        ones go to the after-commit callbacks, then to completed. A callback that raises leaves
        them in accepted, so the next cycle's poll hands them to the callbacks again."""
        committed = [r for r in records if (r.receipt or {}).get("state") == "committed"]
        rejected = []
        for record in records:
            if (record.receipt or {}).get("state") != "committed":
                error = (record.receipt or {}).get("error") or {}
                reason = f"the ledger rejected the operation: {json.dumps(error, sort_keys=True)}"
                rejected.append((record, record.with_changes("rejected", reason=reason)))
        if rejected:
            self.outbox.transition(rejected)
            report.rejected += len(rejected)
        if committed and self._context is not None:
            for callback in self.after_commit:
                try:
                    callback(self._context, list(committed))
                except Exception as exc:
                    if database_unavailable(exc):
                        raise
                    log.exception(
                        "after-commit callback %s failed; %d record(s) stay accepted and are retried",
                        getattr(callback, "__name__", callback),
                        len(committed),
                    )
                    return
        if committed:
            moves = [(r, r.with_changes("completed")) for r in committed]
            self.outbox.transition(moves)
            report.completed += len(moves)
            report.completed_records.extend(new for _, new in moves)

    def _poll_accepted(self, conn: psycopg.Connection[Any], report: SyncReport) -> None:
        """Accepted records from earlier cycles (this cycle's have a fresh receipt): a terminal
        receipt moves them on."""
        names = self.outbox.spool.names("accepted")
        fresh = {str(op) for op in report.accepted_ids}
        accepted = self._readable([n for n in names if n not in fresh], "accepted", report)
        total = len(accepted)
        self._progress("poll", 0, total)
        for start in range(0, total, self.batch_size):
            terminal, mismatched, lost = [], [], []
            for record in accepted[start : start + self.batch_size]:
                if self.stop_event.is_set():
                    break
                try:
                    receipt = run_request(
                        conn, GetReceipt(user_id=record.user_id, operation_id=str(record.operation_id))
                    )
                except NotFoundError:
                    lost.append((record, record.with_changes("submitting")))
                    continue
                except InvalidInput as exc:  # e.g. a user_id edited on disk: this record only, never the cycle
                    reason = f"the ledger refused the receipt lookup ({exc.sqlstate}): {exc}"
                    mismatched.append((record, record.with_changes("rejected", reason=reason)))
                    continue
                except psycopg.Error as exc:
                    reason = _record_failure("the receipt lookup", exc)
                    mismatched.append((record, record.with_changes("rejected", reason=reason)))
                    continue
                mismatch = receipt_mismatch(record, receipt)
                if mismatch is not None:
                    mismatched.append(
                        (record, record.with_changes("rejected", reason=mismatch, receipt=receipt_document(receipt)))
                    )
                elif receipt.state in TERMINAL_RECEIPT_STATES:
                    terminal.append(record.with_changes("accepted", receipt=receipt_document(receipt)))
            if terminal or mismatched or lost:
                _crash_point("after_receipt")
            if lost:
                # The ledger no longer knows an operation it accepted (e.g. restored from an
                # older backup): back to submitting, so the next cycle delivers it again.
                log.warning("%d accepted record(s) are unknown to the ledger; delivering them again", len(lost))
                self.outbox.transition(lost)
            if mismatched:
                self.outbox.transition(mismatched)
                report.rejected += len(mismatched)
                for old, new in mismatched:
                    log.warning("outbox record %s rejected: %s", old.name, new.reason)
            if terminal:
                self._complete(terminal, report)
            self._progress("poll", min(start + self.batch_size, total), total)
            if self.stop_event.is_set():
                return

    # -- the loop --

    def run(self, *, once: bool = False, install_signal_handlers: bool = True) -> SyncReport:
        """Cycle until stopped (or one cycle with ``once``); back off while the ledger is unavailable.

        With ``once``, an unavailable ledger raises :class:`LedgerUnavailable`. Otherwise the
        worker waits ``backoff_delay(failures)`` and tries again, logging each failure, and
        sleeps ``poll_interval`` between cycles that found nothing to do.
        """
        total = SyncReport()
        failures = 0
        with stop_on_signals(self.stop_event, install_signal_handlers, unit="record"):
            while not self.stop_event.is_set():
                try:
                    report = self.run_cycle()
                except LedgerUnavailable as exc:
                    if once:
                        raise
                    failures += 1
                    total.failures += 1
                    delay = backoff_delay(failures, base=self.backoff_base, cap=self.backoff_cap)
                    log.warning("%s; retrying in %.1f s (failure %d)", exc, delay, failures)
                    self.stop_event.wait(delay)
                    continue
                if failures:
                    log.info("the ledger is reachable again after %d failure(s)", failures)
                failures = 0
                total.add(report)
                if once:
                    break
                busy = report.submitted or report.completed or report.stage_items
                if not busy:
                    self.stop_event.wait(self.poll_interval)
        return total


def _record_failure(what: str, exc: psycopg.Error) -> str:
    """The reason to charge one record with a database error; re-raises one that means the
    ledger is unavailable (prme_pg.sqlstate), which fails the cycle instead."""
    if database_unavailable(exc):
        raise exc
    return f"the ledger failed on {what} ({describe(exc)})"


def _submit_request(record: OutboxRecord) -> SubmitOperation:
    return SubmitOperation(
        user_id=record.user_id,
        operation_id=str(record.operation_id),
        schema_version=record.schema_version,
        kind=record.kind,
        dependencies=tuple(str(d) for d in record.dependencies),
        payload_hash=record.payload_hash,
        payload=record.payload,
    )
