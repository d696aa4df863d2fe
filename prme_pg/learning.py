"""The learning queue: hooks hand over what a session taught, a worker turns it into memory operations.

Two halves (docs/LEARNING.md):

* **Enqueue** (:class:`LearningQueue`, ``prme-pg hook``): validate a hook document
  and store it as one *learning record* in ``<pack>/learning/`` -- a
  :class:`~prme_pg.spool.Spool` of plain files, so it needs no database, no network
  and no DuckDB lock, works while another process holds the pack, and is durable
  when it returns. States: ``pending -> processing -> completed | rejected``.
* **Work** (:class:`LearningWorker`, run by ``prme-pg sync``): claim pending records,
  extract planned operations with the configured extractor
  (:mod:`prme_pg.extractors`), hand them to the outbox with ids derived from
  (record id, item index, kind, part) -- so re-extraction after a crash plans the
  same ids and the outbox's idempotent enqueue drops the repeats -- and, once the
  ledger committed them, publish the snapshots of the scopes whose memories changed.

Crash safety: a record is moved to ``processing`` with a ``claimed_at`` stamp and the
claimant's ``host:pid``. A record in ``processing`` whose claimant process is gone
(same host) or whose claim is older than ``stale_after`` -- or, inside ``prme-pg sync``,
whose claimant is any other process (the sync lock proves none runs) -- is reclaimed
to ``pending`` and extracted again. Publishing is driven by a second spool,
``<pack>/learning/publications/`` (``waiting -> published``), written before the
record completes, so a publish lost to a crash is redone on the next cycle.

Fault injection for tests: ``PRME_LEARNING_FAULT=<point>`` makes the process
``os._exit(FAULT_EXIT_CODE)`` at that point (see :data:`FAULT_POINTS`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO
from uuid import UUID

import psycopg
import rfc8785

from .backends import GetNode, PublishSnapshot
from .errors import IdempotencyConflict, InvalidInput, NotFoundError
from .extractors import (
    ExtractionError,
    Extractor,
    ExtractorContext,
    LearningRecord,
    PlannedOperation,
    item_document,
    load_extractor,
    parse_items,
    validate_scope,
    validate_uuid,
)
from .outbox import (
    LEDGER_KINDS,
    MalformedRecord,
    Outbox,
    OutboxRecord,
    SyncContext,
    canonical_payload,
    validate_dependencies,
    validate_payload,
)
from .packfile import pack_folder
from .spool import Spool, StateMismatch, process_alive, time_ordered_uuid
from .sqlstate import database_unavailable
from .validation import MAX_JSON_DEPTH, json_depth_exceeds, loads_bounded, valid_user_id

__all__ = [
    "DEFAULT_STALE_AFTER",
    "FAULT_ENV",
    "FAULT_POINTS",
    "LEARNING_STATES",
    "LearningQueue",
    "LearningSync",
    "LearningWorker",
    "RejectedRecord",
    "correction_detector",
    "queue_status",
    "read_hook_document",
    "record_from_document",
    "rejected_records",
]

log = logging.getLogger("prme_pg.learning")

LEARNING_STATES = ("pending", "processing", "completed", "rejected")
PUBLICATION_STATES = ("waiting", "published", "rejected")
DEFAULT_STALE_AFTER = timedelta(minutes=10)
RECORD_FORMAT = 1
#: A hook document may be at most this big (JSON text).
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024

FAULT_ENV = "PRME_LEARNING_FAULT"
FAULT_EXIT_CODE = 75
#: Where PRME_LEARNING_FAULT can stop the worker: after a claim, after the first
#: operation reached the outbox, after the publication intent was written, after the
#: record completed, and between the publishes of two scopes.
FAULT_POINTS = ("claimed", "enqueued", "intent", "completed", "published_one")


def fault(point: str) -> None:
    """Exit the process at once (no cleanup, like SIGKILL) when PRME_LEARNING_FAULT names ``point``."""
    if os.environ.get(FAULT_ENV) == point:
        os._exit(FAULT_EXIT_CODE)


def _now() -> datetime:
    return datetime.now(UTC)


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_stamp(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def _claimant() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _claimant_gone(claimed_by: object) -> bool:
    """True when the claim was made on this host by a process that no longer exists."""
    if not isinstance(claimed_by, str) or ":" not in claimed_by:
        return False
    host, _, pid = claimed_by.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not process_alive(int(pid))


def record_from_document(document: Mapping[str, Any]) -> LearningRecord:
    """The :class:`LearningRecord` stored in a spool document (InvalidInput if it is damaged)."""
    if document.get("format") != RECORD_FORMAT:
        raise InvalidInput(f"learning record format {document.get('format')!r} is not {RECORD_FORMAT}")
    created_at = _parse_stamp(document.get("created_at"))
    if created_at is None:
        raise InvalidInput("learning record has no valid created_at")
    try:
        record_id = UUID(str(document["record_id"]))
    except (KeyError, ValueError):
        raise InvalidInput("learning record has no valid record_id") from None
    return LearningRecord(
        record_id=record_id,
        user_id=valid_user_id(document.get("user_id")),
        session_id=_session_id(document.get("session_id")),
        scope=validate_scope(document.get("scope")),
        created_at=created_at,
        items=parse_items(document.get("items")),
    )


def _session_id(value: object) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 256 or value != value.strip():
        raise InvalidInput("session_id must be a string of 1..256 characters without surrounding spaces")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in value):
        raise InvalidInput("session_id must not contain control characters")
    return value


def read_hook_document(stream: BinaryIO) -> object:
    """Read one JSON document (at most MAX_DOCUMENT_BYTES) from ``stream``; InvalidInput if it is not one."""
    data = stream.read(MAX_DOCUMENT_BYTES + 1)
    if len(data) > MAX_DOCUMENT_BYTES:
        raise InvalidInput(f"the hook document must be at most {MAX_DOCUMENT_BYTES} bytes")
    if not data.strip():
        raise InvalidInput("stdin is empty; expected one JSON document")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"stdin is not one JSON document: {exc}") from None
    return loads_bounded(text, "the hook document")


# -- the queue ---------------------------------------------------------------------------------


class LearningQueue:
    """Learning records of one pack, in ``<pack>/learning/``. Safe for many processes at once."""

    def __init__(
        self,
        pack: str | os.PathLike[str] = "./memories",
        *,
        stale_after: timedelta = DEFAULT_STALE_AFTER,
        create: bool = True,
    ):
        """``create=False`` opens the queue read-only (for counting): no folder is made."""
        if stale_after <= timedelta(0):
            raise InvalidInput("stale_after must be positive")
        self.pack = pack_folder(pack, create=create)  # a new pack folder is 0700, as the pack's own
        self.root = self.pack / "learning"
        self.stale_after = stale_after
        self.records = Spool(self.root, LEARNING_STATES, create=create)
        self.publications = Spool(self.root / "publications", PUBLICATION_STATES, create=create)
        self._skipped: set[tuple[str, str]] = set()  # (state, name) of unreadable files already logged

    # -- enqueue --

    def enqueue(
        self,
        session_id: str,
        items: Sequence[Mapping[str, Any]],
        *,
        user_id: str,
        scope: str = "personal",
        record_id: UUID | str | None = None,
    ) -> LearningRecord:
        """Validate and store one learning record (``pending``); durable when this returns.

        Raises :class:`~prme_pg.errors.InvalidInput` naming the first bad field; then
        nothing is stored. Without ``record_id`` a time-ordered UUIDv7 is chosen. With
        one, a retried hook is idempotent: the same record again returns the stored one
        (in whatever state it reached), different content raises
        :class:`~prme_pg.errors.IdempotencyConflict`.
        """
        record = LearningRecord(
            record_id=time_ordered_uuid() if record_id is None else validate_uuid(str(record_id), "record_id"),
            user_id=valid_user_id(user_id),
            session_id=_session_id(session_id),
            scope=validate_scope(scope),
            created_at=_now(),
            items=parse_items(list(items) if isinstance(items, tuple) else items),
        )
        document: dict[str, Any] = {
            "format": RECORD_FORMAT,
            "record_id": str(record.record_id),
            "user_id": record.user_id,
            "session_id": record.session_id,
            "scope": record.scope,
            "created_at": _stamp(record.created_at),
            "items": [item_document(item) for item in record.items],
            "attempts": 0,
        }
        if len(rfc8785.dumps(document)) > MAX_DOCUMENT_BYTES:
            raise InvalidInput(f"a learning record must be at most {MAX_DOCUMENT_BYTES} bytes of JSON")
        try:
            self.records.put(str(record.record_id), document, "pending")
        except FileExistsError:
            stored = record_from_document(self.get(record.record_id)[1])
            if (stored.user_id, stored.session_id, stored.scope, stored.items) != (
                record.user_id,
                record.session_id,
                record.scope,
                record.items,
            ):
                raise IdempotencyConflict(f"learning record {record.record_id} was stored with other content") from None
            return stored
        return record

    def enqueue_document(self, document: object, *, user_id: str | None = None) -> LearningRecord:
        """Store a hook document ``{session_id, user_id?, scope?, items}`` (``user_id`` fills a missing one)."""
        if not isinstance(document, dict):
            raise InvalidInput("the hook document must be a JSON object")
        unknown = sorted(set(document) - {"record_id", "session_id", "user_id", "scope", "items"})
        if unknown:
            raise InvalidInput(f"the hook document has unknown field(s) {', '.join(unknown)}")
        if "session_id" not in document or "items" not in document:
            raise InvalidInput("the hook document needs session_id and items")
        owner = document.get("user_id", user_id)
        if user_id is not None and owner != user_id:
            raise InvalidInput(f"the document's user_id {owner!r} differs from --user {user_id!r}")
        if owner is None:
            raise InvalidInput("no user_id: put it in the document or pass --user")
        return self.enqueue(
            document["session_id"],
            document["items"],
            user_id=owner,
            scope=document.get("scope", "personal"),
            record_id=document.get("record_id"),
        )

    # -- inspect --

    def get(self, record_id: UUID | str) -> tuple[str, dict[str, Any]]:
        """(state, document) of a record; NotFoundError if there is none."""
        found = self.records.get(str(record_id))
        if found is None:
            raise NotFoundError(f"no learning record {record_id}")
        return found

    def counts(self) -> dict[str, tuple[int, datetime | None]]:
        """Per state: how many records, and when the oldest one was last written."""
        return self.records.counts()

    # -- the worker's moves --

    def reclaim(
        self, *, now: datetime | None = None, exclusive: bool = False, rejected: list[str] | None = None
    ) -> list[str]:
        """Move abandoned ``processing`` records back to ``pending``; returns their names.

        Abandoned: claimed longer ago than ``stale_after``, or claimed on this host by
        a process that has exited -- or, with ``exclusive`` (the caller holds the pack's
        sync lock, so no other worker runs), claimed by any process but this one. A
        record that does not parse is moved to ``rejected`` and its name appended to
        ``rejected``.
        """
        now = now or _now()
        reclaimed = []
        for name in self.records.names("processing"):
            try:
                found = self.records.get(name)
                if found is not None and json_depth_exceeds(found[1]):
                    raise ValueError(f"learning record {name} nests deeper than {MAX_JSON_DEPTH} levels")
            except ValueError as exc:
                if self.reject_unreadable(name, "processing", exc) and rejected is not None:
                    rejected.append(name)
                continue
            except OSError as exc:
                self.skip_unreadable(name, "processing", exc)
                continue
            if found is None or found[0] != "processing":
                continue
            document = found[1]
            claimed_at = _parse_stamp(document.get("claimed_at"))
            stale = claimed_at is None or now - claimed_at > self.stale_after
            foreign = exclusive and document.get("claimed_by") != _claimant()
            if not (stale or foreign or _claimant_gone(document.get("claimed_by"))):
                continue
            document = dict(document) | {"claimed_at": None, "claimed_by": None, "reclaimed_at": _stamp(now)}
            try:
                self.records.move(name, "processing", "pending", document)
            except StateMismatch:
                continue  # its claimant finished it meanwhile
            log.warning("reclaimed learning record %s (claimed %s by %s)", name, claimed_at, found[1].get("claimed_by"))
            reclaimed.append(name)
        return reclaimed

    def claim(self, name: str, *, now: datetime | None = None) -> dict[str, Any] | None:
        """Move a pending record to ``processing``, stamped; None if someone else took it.

        ValueError if the stored record does not parse (see :meth:`reject_unreadable`), or
        nests deeper than any record can; the OSError if this process may not read it.
        """
        found = self.records.get(name)
        if found is None or found[0] != "pending":
            return None
        if json_depth_exceeds(found[1]):
            raise ValueError(f"learning record {name} nests deeper than {MAX_JSON_DEPTH} levels")
        try:
            attempts = int(found[1].get("attempts", 0))
        except (TypeError, ValueError):
            raise ValueError(f"learning record {name} has no valid attempts count") from None
        document = dict(found[1]) | {
            "claimed_at": _stamp(now or _now()),
            "claimed_by": _claimant(),
            "attempts": attempts + 1,
        }
        try:
            return self.records.move(name, "pending", "processing", document)
        except StateMismatch:
            return None

    def reject_unreadable(self, name: str, state: str, error: Exception) -> bool:
        """Move a record that does not parse from ``state`` to ``rejected``; False if it is gone or not a file.

        Its bytes are not copied (a file in a state folder may be anything): the rejected
        document keeps their sha256 and size, and the reason.
        """
        try:
            raw = self.records.read_bytes(name, state)
        except (OSError, ValueError):
            return False
        reason = f"the stored record does not parse: {error}"
        document = {
            "record_id": name,
            "reason": reason,
            "sha256": hashlib.sha256(raw).hexdigest(),
            "size": len(raw),
            "finished_at": _stamp(_now()),
        }
        try:
            self.records.move(name, state, "rejected", document)
        except StateMismatch:
            return False
        log.warning("learning record %s rejected: %s", name, reason)
        return True

    def skip_unreadable(self, name: str, state: str, error: OSError) -> None:
        """A record this process may not read (PermissionError ...) cannot be judged: it stays where
        it is, for when it can be read. Logged once per queue object and record, not every cycle."""
        if (state, name) in self._skipped:
            return
        self._skipped.add((state, name))
        log.warning(
            "learning record %s in %s/ is not readable, skipped until it is: %s: %s",
            name,
            state,
            type(error).__name__,
            error.strerror or error,
        )

    def finish(self, name: str, document: Mapping[str, Any], state: str, **fields: Any) -> dict[str, Any]:
        """Move a ``processing`` record to ``state`` (completed, rejected, or pending for a retry)."""
        updated = dict(document) | fields | {"claimed_at": None, "claimed_by": None}
        if state in ("completed", "rejected"):
            updated["finished_at"] = _stamp(_now())
        return self.records.move(name, "processing", state, updated)


# -- the worker --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FinishedOperation:
    """An operation of a learning record as the outbox last saw it."""

    operation_id: UUID
    kind: str
    payload: Mapping[str, Any]
    state: str  # the outbox state: terminal ones are "completed" and "rejected"
    result: Mapping[str, Any] | None


@dataclass
class CycleStats:
    """What one worker cycle did."""

    reclaimed: int = 0
    completed: int = 0
    rejected: int = 0
    retried: int = 0
    #: Records this process may not read (left where they are, see LearningQueue.skip_unreadable).
    skipped: int = 0
    operations: int = 0
    published: list[tuple[str, str, str]] = field(default_factory=list)  # (user_id, scope, generation_id)
    publish_failures: list[tuple[str, str, str]] = field(default_factory=list)  # (user_id, scope, error)


def correction_detector(connection: Callable[[], psycopg.Connection[Any]]) -> Callable[[Sequence[str]], list[bool]]:
    """``is_correction(messages)`` answered by ``prme.is_correction``, one query per call.

    ``connection()`` returns an open psycopg connection (the sync cycle's). The rule
    lives in SQL (sql/postgres/220_correction_linking.sql); this only asks it.
    """

    def is_correction(messages: Sequence[str]) -> list[bool]:
        if not messages:
            return []
        row = (
            connection()
            .execute(
                "SELECT coalesce(array_agg(prme.is_correction(t.message) ORDER BY t.n), '{}') "
                "FROM unnest(%s::text[]) WITH ORDINALITY AS t (message, n)",
                (list(messages),),
            )
            .fetchone()
        )
        assert row is not None
        return [bool(flag) for flag in row[0]]

    return is_correction


def check_planned(record: LearningRecord, planned: Iterable[PlannedOperation]) -> list[PlannedOperation]:
    """Refuse (ExtractionError) plans the ledger could never accept or whose ids would collide."""
    checked, seen = [], set()
    for op in planned:
        if not isinstance(op, PlannedOperation):
            raise ExtractionError(f"the extractor returned {type(op).__name__}, not a PlannedOperation")
        if op.kind not in LEDGER_KINDS:
            raise ExtractionError(f"the extractor planned an unknown operation kind {op.kind!r}")
        if not 0 <= op.item_index < len(record.items):
            raise ExtractionError(f"the extractor planned an operation for item {op.item_index}, which does not exist")
        try:
            # What the outbox will check, before anything is enqueued.
            validate_payload(op.kind, canonical_payload(op.payload)[0])
        except InvalidInput as exc:
            raise ExtractionError(f"the extractor planned an invalid {op.kind} payload: {exc}") from None
        try:
            validate_dependencies(op.dependencies, op.operation_id(record.record_id))
        except InvalidInput as exc:
            raise ExtractionError(f"the extractor planned invalid {op.kind} dependencies: {exc}") from None
        key = (op.item_index, op.kind, op.part)
        if key in seen:
            raise ExtractionError(f"the extractor planned two operations with the same id {key}")
        seen.add(key)
        checked.append(op)
    return checked


class LearningWorker:
    """Extracts pending learning records into the outbox and publishes what the ledger committed.

    ``lookup(operation_id)`` returns the outbox's view of one operation (None if the
    outbox has no such record); ``publish(user_id, scope)`` publishes a snapshot and
    returns its generation id; ``node_scope(user_id, node_id)`` names a memory's scope
    (None if it is not there). :class:`LearningSync` wires these to the outbox and to
    the sync cycle's connection.
    """

    def __init__(
        self,
        queue: LearningQueue,
        extractor: Extractor,
        outbox: Outbox,
        *,
        max_attempts: int = 5,
    ) -> None:
        self.queue = queue
        self.extractor = extractor
        self.outbox = outbox
        self.max_attempts = max_attempts

    # -- extraction --

    def extract_pending(
        self, *, stop: Callable[[], bool] = lambda: False, stats: CycleStats | None = None, exclusive: bool = False
    ) -> CycleStats:
        """Reclaim abandoned records, then extract every pending one (oldest first) until ``stop()``.

        A ``psycopg.Error`` (the database went away or failed) puts the record back
        without counting the attempt and is raised, except ``DataError`` and
        ``IntegrityError``: the database refused the record's own data, an attempt
        charged like a plugin's failure. ``exclusive``: the caller holds the
        pack's sync lock, so every claim but this process's is abandoned.
        """
        stats = stats or CycleStats()
        unreadable: list[str] = []
        stats.reclaimed += len(self.queue.reclaim(exclusive=exclusive, rejected=unreadable))
        for name in self.queue.records.names("pending"):
            if stop():
                break
            try:
                document = self.queue.claim(name)
            except ValueError as exc:
                if self.queue.reject_unreadable(name, "pending", exc):
                    unreadable.append(name)
                continue
            except OSError as exc:
                self.queue.skip_unreadable(name, "pending", exc)
                stats.skipped += 1
                continue
            if document is None:
                continue
            fault("claimed")
            if int(document["attempts"]) > self.max_attempts:
                # Claimed that often without finishing: it keeps killing the worker.
                reason = f"attempts_exhausted: claimed {document['attempts']} times without finishing"
                self._reject(name, document, reason, stats)
                continue
            if not self._extract_one(name, document, stats):
                break  # a transient failure: try again next cycle
        stats.rejected += len(unreadable)
        return stats

    def _reject(self, name: str, document: dict[str, Any], reason: str, stats: CycleStats) -> None:
        log.warning("learning record %s rejected: %s", name, reason)
        self.queue.finish(name, document, "rejected", reason=reason)
        stats.rejected += 1

    def _retry_or_reject(self, name: str, document: dict[str, Any], exc: Exception, stats: CycleStats) -> bool:
        """Charge a failed attempt: back to pending to retry next cycle, or rejected at max_attempts."""
        error = f"{type(exc).__name__}: {exc}"
        if int(document["attempts"]) >= self.max_attempts:
            self._reject(name, document, f"attempts_exhausted: {error}", stats)
            return True
        log.warning("learning record %s: extraction failed, will retry: %s", name, error)
        self.queue.finish(name, document, "pending", last_error=error)
        stats.retried += 1
        return False

    def _extract_one(self, name: str, document: dict[str, Any], stats: CycleStats) -> bool:
        try:
            record = record_from_document(document)
            planned = check_planned(record, self.extractor.extract(record))
        except (ExtractionError, InvalidInput) as exc:
            self._reject(name, document, str(exc), stats)
            return True
        except psycopg.Error as exc:
            if not database_unavailable(exc):
                # The database refused this record's data (a data exception, a program limit
                # ...: prme_pg.sqlstate): the record's trouble, charged like any failure, or
                # it would hold up the queue.
                return self._retry_or_reject(name, document, exc, stats)
            attempts = int(document["attempts"]) - 1  # the database's trouble, not the record's
            self.queue.finish(name, document, "pending", attempts=attempts, last_error=f"{type(exc).__name__}: {exc}")
            raise
        except Exception as exc:  # a bug in a plugin, say: retry, then give up
            return self._retry_or_reject(name, document, exc, stats)
        operation_ids = []
        for op in planned:
            operation_id = op.operation_id(record.record_id)
            try:
                self.outbox.enqueue(
                    op.kind, op.payload, user_id=record.user_id, dependencies=op.dependencies, operation_id=operation_id
                )
            except IdempotencyConflict as exc:
                # Only a non-deterministic extractor plans something else under an id it planned before.
                self._reject(name, document, f"re-extraction planned a different operation: {exc}", stats)
                return True
            except InvalidInput as exc:  # check_planned should have caught it; never leave the record stuck
                self._reject(name, document, f"the outbox refused a planned operation: {exc}", stats)
                return True
            operation_ids.append(str(operation_id))
            fault("enqueued")
        # The publication intent before the record completes: a crash in between leaves
        # the record to be reclaimed and extracted again, never an unpublished change.
        if operation_ids:
            intent = {"record_id": str(record.record_id), "user_id": record.user_id, "operation_ids": operation_ids}
            # FileExistsError: written before a crash; the same intent (same record, same ids).
            with contextlib.suppress(FileExistsError):
                self.queue.publications.put(name, intent, "waiting")
        fault("intent")
        self.queue.finish(name, document, "completed", operation_ids=operation_ids)
        fault("completed")
        stats.completed += 1
        stats.operations += len(operation_ids)
        return True

    # -- publishing --

    def publish_ready(
        self,
        lookup: Callable[[UUID], FinishedOperation | None],
        node_scope: Callable[[str, UUID], str | None],
        publish: Callable[[str, str], str],
        *,
        stats: CycleStats | None = None,
    ) -> CycleStats:
        """Publish the affected scopes of every intent whose operations have all finished.

        Scopes are published one by one, each on its own: a failing scope is logged
        and retried next cycle, and does not keep the others from publishing. An
        intent is marked published once all of its scopes published.
        """
        stats = stats or CycleStats()
        ready: dict[str, tuple[dict[str, Any], set[tuple[str, str]]]] = {}
        for name in self.queue.publications.names("waiting"):
            try:
                found = self.queue.publications.get(name)
                if found is None or found[0] != "waiting":
                    continue
                intent = found[1]
                user_id = valid_user_id(intent.get("user_id"))
                operation_ids = [UUID(op) for op in intent["operation_ids"]]
            except (ValueError, TypeError, KeyError, AttributeError, InvalidInput) as exc:
                self._reject_intent(name, exc)
                continue
            except OSError as exc:
                self.queue.skip_unreadable(name, "publications/waiting", exc)
                continue
            operations = [lookup(op) for op in operation_ids]
            if any(op is None or op.state not in ("completed", "rejected") for op in operations):
                continue  # still on its way through the outbox and the ledger
            scopes = set()
            for op in operations:
                assert op is not None
                scope = self._affected_scope(user_id, op, node_scope)
                if scope is not None:
                    scopes.add((user_id, scope))
            ready[name] = (intent, scopes)

        done: dict[tuple[str, str], bool] = {}
        for user_id, scope in sorted(set().union(*(s for _, s in ready.values()))):
            try:
                generation_id = publish(user_id, scope)
            except Exception as exc:  # one scope failing must not block the others
                log.warning("publishing %s/%s failed: %s", user_id, scope, exc)
                stats.publish_failures.append((user_id, scope, f"{type(exc).__name__}: {exc}"))
                done[(user_id, scope)] = False
                continue
            done[(user_id, scope)] = True
            stats.published.append((user_id, scope, generation_id))
            fault("published_one")
        for name, (intent, scopes) in ready.items():
            if all(done.get(key, False) for key in scopes):
                published = sorted(f"{user}/{scope}" for user, scope in scopes)
                self.queue.publications.move(name, "waiting", "published", intent | {"scopes": published})
        return stats

    def _reject_intent(self, name: str, error: Exception) -> None:
        """Set a damaged publication intent aside (publications/rejected/) with the reason; its bytes
        are not copied. Its operations are delivered anyway; only the snapshot is not republished."""
        try:
            raw = self.queue.publications.read_bytes(name, "waiting")
        except (OSError, ValueError):
            return
        reason = f"the publication intent does not parse: {type(error).__name__}: {error}"
        document = {"record_id": name, "reason": reason, "sha256": hashlib.sha256(raw).hexdigest(), "size": len(raw)}
        with contextlib.suppress(StateMismatch):
            self.queue.publications.move(name, "waiting", "rejected", document)
            log.warning("publication intent %s rejected: %s", name, reason)

    @staticmethod
    def _affected_scope(
        user_id: str, op: FinishedOperation, node_scope: Callable[[str, UUID], str | None]
    ) -> str | None:
        """The scope whose snapshot an operation changed, if any.

        Snapshots hold active memories ranked by strength: add_node and reinforce
        change them; outcomes and correction links only add evidence (maintenance acts
        on it later), and rejected operations change nothing. (A plugin's archive_node
        changes one too, but an archived memory's scope can no longer be read through
        the API: it is not republished here.)
        """
        if op.state != "completed":
            return None
        if op.kind == "add_node":
            return str(op.payload.get("scope", "personal"))
        if op.kind == "reinforce":
            return node_scope(user_id, UUID(str(op.payload["node_id"])))
        return None


# -- prme-pg sync ------------------------------------------------------------------------------


class LearningSync:
    """The learning queue's part of ``prme-pg sync``: a stage and an after-commit callback.

    ``stage`` (start of every cycle) reclaims abandoned records, extracts the pending
    ones into the outbox, and publishes intents left over from a crash; ``after_commit``
    publishes the intents whose operations the cycle completed. Both run under the
    pack's sync lock, on the cycle's connection::

        learning = LearningSync(pack, extractor="builtin")
        OutboxSyncer(pack, dsn, stages=[learning.stage], after_commit=[learning.after_commit])
    """

    def __init__(
        self,
        pack: str | os.PathLike[str],
        *,
        extractor: str = "builtin",
        options: Mapping[str, str] | None = None,
        stale_after: timedelta = DEFAULT_STALE_AFTER,
        max_attempts: int = 5,
        max_items: int = 100,
        max_bytes: int = 65536,
    ) -> None:
        self.queue = LearningQueue(pack, stale_after=stale_after)
        self.extractor_name = extractor
        self.options = dict(options or {})
        self.max_attempts = max_attempts
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._context: SyncContext | None = None
        # Load the extractor now: a misspelt --extractor fails at start, not in a cycle.
        self._worker: LearningWorker | None = None
        self._extractor = load_extractor(
            extractor, ExtractorContext(is_correction=correction_detector(self._connection), options=self.options)
        )

    def _connection(self) -> psycopg.Connection[Any]:
        if self._context is None:
            raise ExtractionError("the correction detector runs only inside a sync cycle")
        return self._context.connection

    def _worker_for(self, context: SyncContext) -> LearningWorker:
        self._context = context
        if self._worker is None or self._worker.outbox is not context.outbox:
            self._worker = LearningWorker(self.queue, self._extractor, context.outbox, max_attempts=self.max_attempts)
        return self._worker

    def stage(self, context: SyncContext) -> int:
        """Reclaim, extract pending records into the outbox, publish intents that are ready."""
        worker = self._worker_for(context)
        # The stage runs under the pack's sync lock: no other worker can be extracting.
        stats = worker.extract_pending(stop=lambda: context.stop_requested, exclusive=True)
        self._publish(context, worker, stats)
        if stats.rejected or stats.retried or stats.publish_failures:
            log.warning("learning: %s", stats)
        return stats.completed + stats.rejected + len(stats.published)

    def after_commit(self, context: SyncContext, records: list[OutboxRecord]) -> None:
        """Publish the snapshots the committed operations changed.

        The outbox calls this before it moves ``records`` to ``completed`` (and calls it
        again with them if the process dies first), so they count as finished here.
        """
        self._publish(context, self._worker_for(context), committed=records)

    def _publish(
        self,
        context: SyncContext,
        worker: LearningWorker,
        stats: CycleStats | None = None,
        committed: Sequence[OutboxRecord] = (),
    ) -> CycleStats:
        just_committed = {record.operation_id: record for record in committed}

        def lookup(operation_id: UUID) -> FinishedOperation | None:
            try:
                record = just_committed.get(operation_id) or context.outbox.get(operation_id)
            except MalformedRecord:
                return FinishedOperation(operation_id, "", {}, "rejected", None)
            if record is None:
                return None
            state = "completed" if operation_id in just_committed else record.state
            result = (record.receipt or {}).get("result")
            return FinishedOperation(record.operation_id, record.kind, record.payload, state, result)

        def node_scope(user_id: str, node_id: UUID) -> str | None:
            try:
                return context.execute(GetNode(user_id=user_id, node_id=node_id)).scope
            except NotFoundError:
                return None

        def publish(user_id: str, scope: str) -> str:
            request = PublishSnapshot(user_id, scope, self.max_items, self.max_bytes, None)
            return context.execute(request).generation_id

        return worker.publish_ready(lookup, node_scope, publish, stats=stats)


def queue_status(pack: str | os.PathLike[str]) -> dict[str, dict[str, tuple[int, datetime | None]]]:
    """Per queue of a pack (``learning``, ``outbox``): per state, the count and the oldest record's time."""
    if not Path(pack).expanduser().is_dir():
        raise NotFoundError(f"no memory pack at {pack}")
    # Read-only: counting creates nothing, and a queue whose folders are missing counts 0.
    return {"learning": LearningQueue(pack, create=False).counts(), "outbox": Outbox(pack, create=False).counts()}


@dataclass(frozen=True)
class RejectedRecord:
    """A record a pack's queues set aside, with the reason (``prme-pg queue status --rejected``).

    ``queue`` is ``learning``, ``publications`` or ``outbox``; ``kind`` is the operation kind of
    an outbox record (None otherwise); ``rejected_at`` is when its file was last written.
    """

    queue: str
    record_id: str
    user_id: str | None
    kind: str | None
    reason: str
    rejected_at: datetime


def rejected_records(pack: str | os.PathLike[str]) -> list[RejectedRecord]:
    """Every rejected record of a pack's queues, oldest first; read-only, like :func:`queue_status`."""
    if not Path(pack).expanduser().is_dir():
        raise NotFoundError(f"no memory pack at {pack}")
    learning = LearningQueue(pack, create=False)
    spools = {
        "learning": learning.records,
        "publications": learning.publications,
        "outbox": Outbox(pack, create=False).spool,
    }
    found = []
    for queue, spool in spools.items():
        for name in spool.names("rejected"):
            try:
                raw = spool.read_bytes(name, "rejected")
                written = datetime.fromtimestamp(spool.path(name, "rejected").stat().st_mtime, UTC)
            except (FileNotFoundError, ValueError):  # moved away since the listing, or not a file
                continue
            try:
                document = loads_bounded(raw, "a rejected record")
            except InvalidInput:
                document = None
            if not isinstance(document, dict):
                document = {"reason": "the rejected file itself does not parse"}
            user_id, kind = document.get("user_id"), document.get("kind") if queue == "outbox" else None
            found.append(
                RejectedRecord(
                    queue=queue,
                    record_id=name,
                    user_id=user_id if isinstance(user_id, str) else None,
                    kind=kind if isinstance(kind, str) else None,
                    reason=str(document.get("reason") or "no reason recorded"),
                    rejected_at=written,
                )
            )
    return sorted(found, key=lambda r: (r.rejected_at, r.queue, r.record_id))
