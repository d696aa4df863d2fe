"""The PostgreSQL backend: every SQL statement prme_pg sends to PostgreSQL.

Each request is one ``SELECT`` of one ``prme`` function, in named notation, on an
autocommit connection from a pool: the function's own transaction is the call's
transaction, so there is exactly one round trip per call and no business rule in
Python. Results are built by psycopg row factories into the frozen dataclasses of
:mod:`prme_pg.models`; errors raised with the engine's SQLSTATEs (PR404, PR409,
PR422, and XX001 for stored data that does not verify) become
:class:`~prme_pg.errors.NotFoundError`, :class:`~prme_pg.errors.IdempotencyConflict`,
:class:`~prme_pg.errors.InvalidInput` and :class:`~prme_pg.errors.IntegrityError`.

:func:`statement` is the only place a request turns into SQL; the sync
:class:`PostgresBackend` and the async :class:`AsyncPostgresBackend` only run it.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Generic, LiteralString, TypeVar, cast
from uuid import UUID

import numpy as np
import psycopg
from psycopg import pq
from psycopg.adapt import Dumper
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import RowFactory, RowMaker
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ..embeddings import Vector
from ..errors import SQLSTATE_ERRORS, InvalidInput, SchemaMissing
from ..models import (
    AppliedOp,
    AssembledPrompt,
    CorrectionInboxEntry,
    CorrectionLink,
    CorrectionMatch,
    EmbeddingStatus,
    Event,
    JournalIssue,
    LedgerStatus,
    MaintenancePatch,
    MaintenanceRecommendation,
    MaintenanceSetting,
    Node,
    OperationEvent,
    Outcome,
    OutcomeSummary,
    PendingEmbedding,
    PublishResult,
    RecallHit,
    Receipt,
    ReplayResult,
    ReviewSchedule,
    Snapshot,
)
from ..sqlstate import error_detail, error_message
from . import (
    AddEvent,
    AddNode,
    AddNodes,
    ApplyPatch,
    ArchiveNode,
    AssemblePrompt,
    AuthenticateApiToken,
    CreateApiToken,
    CreateMaintenancePatch,
    FindNodes,
    GetCurrentSnapshot,
    GetEmbeddingStatus,
    GetJournalRecords,
    GetLedgerStatus,
    GetMaintenanceReport,
    GetMaintenanceSettings,
    GetNode,
    GetNodeJournal,
    GetOutcomeSummary,
    GetPatch,
    GetReadiness,
    GetReceipt,
    GetSnapshot,
    IndexEmbeddings,
    IsCorrection,
    LinkCorrection,
    ListCorrectionInbox,
    ListNodeEvidence,
    ListNodeOutcomes,
    ListNodes,
    ListOperationEvents,
    ListPendingEmbeddings,
    MarkReviewed,
    NodeItem,
    PublishSnapshot,
    Recall,
    RecordOutcome,
    RegisterEmbeddingModel,
    Reinforce,
    ReplayNode,
    Request,
    ResetMaintenanceSettings,
    ResolveCorrection,
    RevokeApiToken,
    SetMaintenanceSetting,
    StoreEmbeddings,
    SubmitOperation,
    VerifyJournal,
    journal_rows,
    node_journal_rows,
    recall_hit,
)

FLOAT4_OID = 700
FLOAT4_ARRAY_OID = 1021


class Float4Array:
    """Vectors sent as one flat ``real[]`` in PostgreSQL's binary array format: no number is formatted as text.

    Formatting 256 floats per vector as text, and parsing them back, cost more than the
    rest of an ``add_node`` (measured: about 5 ms a call for psycopg's list adaptation).
    """

    __slots__ = ("values",)

    def __init__(self, values: Vector) -> None:
        self.values = np.ascontiguousarray(values, dtype=np.float32).ravel()


class Float4ArrayDumper(Dumper):
    format = pq.Format.BINARY
    oid = FLOAT4_ARRAY_OID

    def dump(self, obj: Float4Array) -> bytes:
        count = int(obj.values.size)
        if count == 0:
            return struct.pack(">iiI", 0, 0, FLOAT4_OID)
        # Header (one dimension, no NULLs, float4 elements; its length, lower bound 1), then
        # each element as its length (4) and its big-endian bytes.
        elements = np.empty(count, dtype=[("length", ">i4"), ("value", ">f4")])
        elements["length"] = 4
        elements["value"] = obj.values
        return struct.pack(">iiIii", 1, 0, FLOAT4_OID, count, 1) + elements.tobytes()


psycopg.adapters.register_dumper(Float4Array, Float4ArrayDumper)


def _json_dumps(value: object) -> str:
    # ensure_ascii=False: text goes as UTF-8, so a lone surrogate fails to encode and is
    # refused, instead of travelling as a \ud800 escape that jsonb would reinterpret.
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


__all__ = [
    "ADD_EVENT",
    "ADD_NODE",
    "ADD_NODES",
    "ADD_NODE_EMBEDDED",
    "ARCHIVE_NODE",
    "ASSEMBLE_PROMPT",
    "AUTHENTICATE_API_TOKEN",
    "CREATE_API_TOKEN",
    "CURRENT_SNAPSHOT",
    "DEFAULT_STATEMENT_TIMEOUT",
    "EMBEDDING_STATUS",
    "GET_NODE",
    "GET_SNAPSHOT",
    "JOURNAL_RECORDS",
    "LIST_NODES",
    "PENDING_EMBEDDINGS",
    "PUBLISH_SNAPSHOT",
    "READINESS",
    "RECALL",
    "RECALL_EMBEDDED",
    "REGISTER_EMBEDDING_MODEL",
    "REINFORCE",
    "REPLAY_NODE",
    "REVOKE_API_TOKEN",
    "SET_STATEMENT_TIMEOUT",
    "STORE_EMBEDDINGS",
    "VERIFY_JOURNAL",
    "AsyncPostgresBackend",
    "Call",
    "PostgresBackend",
    "is_dsn",
    "statement",
    "statement_timeout_setting",
    "translate_error",
    "translate_errors",
]

T = TypeVar("T")

# -- statements ----------------------------------------------------------------

ADD_NODE: LiteralString = (
    "SELECT * FROM prme.add_node(user_id => %(user_id)s, content => %(content)s, scope => %(scope)s, "
    "namespace => %(namespace)s, kind => %(kind)s, confidence_base => %(confidence_base)s, "
    "salience_base => %(salience_base)s, stability => %(stability)s, decay_profile => %(decay_profile)s, "
    "next_review_at => %(next_review_at)s, node_id => %(node_id)s)"
)
# With its vector (migration 0022 on): a call without one stays the call every release takes.
ADD_NODE_EMBEDDED: LiteralString = (
    "SELECT * FROM prme.add_node(user_id => %(user_id)s, content => %(content)s, scope => %(scope)s, "
    "namespace => %(namespace)s, kind => %(kind)s, confidence_base => %(confidence_base)s, "
    "salience_base => %(salience_base)s, stability => %(stability)s, decay_profile => %(decay_profile)s, "
    "next_review_at => %(next_review_at)s, node_id => %(node_id)s, embedding => %(embedding)s::real[], "
    "embedding_model => %(embedding_model)s::text)"
)
# One jsonb array of items (docs/IMPORT.md): one round trip and one transaction per batch.
# The items' vectors go as one flat real[] in binary, each item naming its model (docs/IMPORT.md).
ADD_NODES: LiteralString = (
    "SELECT * FROM prme.add_nodes(user_id => %(user_id)s, items => %(items)s, embeddings => %(embeddings)s::real[])"
)
ADD_EVENT: LiteralString = (
    "SELECT * FROM prme.add_event(user_id => %(user_id)s, content => %(content)s, scope => %(scope)s, "
    "namespace => %(namespace)s, kind => %(kind)s, payload => %(payload)s, occurred_at => %(occurred_at)s, "
    "event_id => %(event_id)s)"
)
GET_NODE: LiteralString = "SELECT * FROM prme.get_node(user_id => %(user_id)s, node_id => %(node_id)s)"
LIST_NODES: LiteralString = (
    "SELECT * FROM prme.list_nodes(user_id => %(user_id)s, namespace => %(namespace)s, "
    "after_node_id => %(after_node_id)s, max_count => %(max_count)s::integer)"
)
REINFORCE: LiteralString = (
    "SELECT * FROM prme.reinforce(node_id => %(node_id)s, user_id => %(user_id)s, "
    "evidence_id => %(evidence_id)s, request_id => %(request_id)s)"
)
ARCHIVE_NODE: LiteralString = "SELECT * FROM prme.archive_node(user_id => %(user_id)s, node_id => %(node_id)s)"
VERIFY_JOURNAL: LiteralString = (
    "SELECT node_id, node_version, problem, detail FROM prme.verify_journal(user_id => %(user_id)s)"
)
# jsonb as text: parsed here with exact Decimals (psycopg's jsonb loader would give floats).
REPLAY_NODE: LiteralString = (
    "SELECT records, matches, problem, stored::text AS stored, replayed::text AS replayed "
    "FROM prme.replay_node(user_id => %(user_id)s, node_id => %(node_id)s)"
)
# The independent verifier reads the raw journal through this API function (prme_app has
# no table access). Nodes without records still appear (journal columns NULL): their head
# is checked too; records whose node row is gone appear with NULL node columns.
JOURNAL_RECORDS: LiteralString = (
    "SELECT node_id, version, last_checksum, node_version, record_version, op, operation_id, "
    "request_id, evidence_id, record, checksum, prev_checksum FROM prme.journal_records(user_id => %(user_id)s)"
)

NODE_JOURNAL: LiteralString = (
    "SELECT id, version, last_checksum, node_version, record_version, op, operation_id, request_id, evidence_id, "
    "record, checksum, prev_checksum "
    "FROM prme.node_journal(user_id => %(user_id)s, node_id => %(node_id)s, max_count => %(max_count)s::integer)"
)
NODE_EVIDENCE: LiteralString = (
    "SELECT * FROM prme.node_evidence(user_id => %(user_id)s, node_id => %(node_id)s, "
    "max_count => %(max_count)s::integer)"
)
NODE_OUTCOMES: LiteralString = (
    "SELECT * FROM prme.node_outcomes(user_id => %(user_id)s, node_id => %(node_id)s, "
    "max_count => %(max_count)s::integer)"
)
FIND_NODES: LiteralString = (
    "SELECT * FROM prme.find_nodes(user_id => %(user_id)s, query => %(query)s::text, scopes => %(scopes)s::text[], "
    "stabilities => %(stabilities)s::text[], lifecycle_states => %(lifecycle_states)s::text[], "
    "max_count => %(max_count)s::integer)"
)
FIND_NODES_EMBEDDED: LiteralString = (
    "SELECT * FROM prme.find_nodes(user_id => %(user_id)s, query => %(query)s::text, scopes => %(scopes)s::text[], "
    "stabilities => %(stabilities)s::text[], lifecycle_states => %(lifecycle_states)s::text[], "
    "max_count => %(max_count)s::integer, query_embedding => %(query_embedding)s::real[], "
    "embedding_model => %(embedding_model)s::text)"
)


_CONNINFO = re.compile(r"^\s*[A-Za-z_]+\s*=")
AUTHENTICATE_API_TOKEN: LiteralString = (
    "SELECT prme.authenticate_api_token(user_id => %(user_id)s, token_sha256 => %(token_sha256)s)"  # noqa: S105
)
CREATE_API_TOKEN: LiteralString = (
    "SELECT prme.create_api_token(user_id => %(user_id)s, token_sha256 => %(token_sha256)s, label => %(label)s)"  # noqa: S105
)
REVOKE_API_TOKEN: LiteralString = (
    "SELECT prme.revoke_api_token(user_id => %(user_id)s, token_sha256 => %(token_sha256)s)"  # noqa: S105
)
READINESS: LiteralString = "SELECT accepts_writes, applied_migrations FROM prme.readiness()"
# as_of NULL means now inside prme.recall, so the default needs no special case.
RECALL: LiteralString = (
    "SELECT rank, score, relevance, effective_salience, effective_confidence, id, namespace, scope, kind, "
    "content, lifecycle_state, decay_profile, confidence_base, salience_base, reinforcement_boost, "
    "last_reinforced_at, created_at, updated_at, version "
    "FROM prme.recall(user_id => %(user_id)s, query => %(query)s::text, scopes => %(scopes)s::text[], "
    "max_count => %(max_count)s::integer, as_of => %(as_of)s::timestamptz)"
)
RECALL_EMBEDDED: LiteralString = (
    "SELECT rank, score, relevance, effective_salience, effective_confidence, id, namespace, scope, kind, "
    "content, lifecycle_state, decay_profile, confidence_base, salience_base, reinforcement_boost, "
    "last_reinforced_at, created_at, updated_at, version "
    "FROM prme.recall(user_id => %(user_id)s, query => %(query)s::text, scopes => %(scopes)s::text[], "
    "max_count => %(max_count)s::integer, as_of => %(as_of)s::timestamptz, "
    "query_embedding => %(query_embedding)s::real[], embedding_model => %(embedding_model)s::text)"
)
REGISTER_EMBEDDING_MODEL: LiteralString = (
    "SELECT vector_search FROM prme.register_embedding_model("
    "model_id => %(model_id)s, dimensions => %(dimensions)s::integer)"
)
PENDING_EMBEDDINGS: LiteralString = (
    "SELECT user_id, node_id, content FROM prme.pending_embeddings(model_id => %(model_id)s, "
    "max_count => %(max_count)s::integer, retry_failed => %(retry_failed)s::boolean, "
    "after_user_id => %(after_user_id)s::text, after_node_id => %(after_node_id)s::uuid)"
)
STORE_EMBEDDINGS: LiteralString = (
    "SELECT stored FROM prme.store_embeddings(model_id => %(model_id)s, user_ids => %(user_ids)s::text[], "
    "node_ids => %(node_ids)s::uuid[], embeddings => %(embeddings)s::real[], errors => %(errors)s::text[])"
)
INDEX_EMBEDDINGS: LiteralString = (
    "SELECT indexed FROM prme.index_embeddings(model_id => %(model_id)s, min_vectors => %(min_vectors)s::integer, "
    "max_count => %(max_count)s::integer)"
)
EMBEDDING_STATUS: LiteralString = (
    "SELECT vector_search, registered, dimensions, pending, failed FROM prme.embedding_status(model_id => %(model_id)s)"
)
PUBLISH_SNAPSHOT: LiteralString = (
    "SELECT generation_id, seq, previous_generation_id, item_count, byte_size, advanced "
    "FROM prme.publish_snapshot(user_id => %(user_id)s, scope => %(scope)s, max_items => %(max_items)s::integer, "
    "max_bytes => %(max_bytes)s::integer, expected_generation_id => %(expected_generation_id)s::text)"
)
_SNAPSHOT_COLUMNS: LiteralString = "generation_id, seq, document, item_count, byte_size, created_at, advanced_at"
CURRENT_SNAPSHOT: LiteralString = (
    "SELECT " + _SNAPSHOT_COLUMNS + " FROM prme.current_snapshot(user_id => %(user_id)s, scope => %(scope)s)"
)
GET_SNAPSHOT: LiteralString = (
    "SELECT " + _SNAPSHOT_COLUMNS + " FROM prme.get_snapshot(user_id => %(user_id)s, scope => %(scope)s, "
    "generation_id => %(generation_id)s::text)"
)
ASSEMBLE_PROMPT: LiteralString = (
    "SELECT prompt, byte_size, item_count, truncated, generation_scopes, generation_ids "
    "FROM prme.assemble_prompt(user_id => %(user_id)s, scopes => %(scopes)s::text[], "
    "budget_bytes => %(budget_bytes)s::integer)"
)
RECORD_OUTCOME: LiteralString = (
    "SELECT id, user_id, node_id, outcome, weight, evidence_id, profile_id, thread_id, notes, request_id, "
    "recorded_by, node_version, created_at, replayed "
    "FROM prme.record_outcome(user_id => %(user_id)s, node_id => %(node_id)s::uuid, outcome => %(outcome)s::text, "
    "evidence_id => %(evidence_id)s::uuid, profile_id => %(profile_id)s::text, thread_id => %(thread_id)s::text, "
    "notes => %(notes)s::text, request_id => %(request_id)s::uuid)"
)
OUTCOME_SUMMARY: LiteralString = (
    "SELECT explicit_reinforcements, implicit_successes, neutral_exposures, explicit_corrections, outcomes, "
    "score, stability_by_outcomes, last_outcome_at "
    "FROM prme.outcome_summary(user_id => %(user_id)s, node_id => %(node_id)s::uuid)"
)
MAINTENANCE_REPORT: LiteralString = (
    "SELECT node_id, recommendations, lifecycle_state, stability, suggested_stability, confidence_base, "
    "suggested_confidence, next_review_at, overdue_cycles, decayed_cycles, explicit_reinforcements, "
    "implicit_successes, explicit_corrections "
    "FROM prme.maintenance_report(user_id => %(user_id)s, as_of => %(as_of)s::timestamptz)"
)
MAINTENANCE_PATCH: LiteralString = (
    "SELECT patch_id, created_at, as_of, ops "
    "FROM prme.maintenance_patch(user_id => %(user_id)s, as_of => %(as_of)s::timestamptz)"
)
_PATCH_COLUMNS: LiteralString = "patch_id, created_at, as_of, ops"
GET_PATCH: LiteralString = (
    "SELECT " + _PATCH_COLUMNS + " FROM prme.get_patch(user_id => %(user_id)s, patch_id => %(patch_id)s::uuid)"
)
APPLY_PATCH: LiteralString = (
    "SELECT op_id, op, node_id, status, detail, node_version "
    "FROM prme.apply_patch(user_id => %(user_id)s, patch_id => %(patch_id)s::uuid, op_ids => %(op_ids)s::text[], "
    "mode => %(mode)s::text)"
)
# matches as text: parsed here with exact Decimal overlaps.
LINK_CORRECTION: LiteralString = (
    "SELECT status, node_id, outcome_id, inbox_id, matches::text AS matches "
    "FROM prme.link_correction(user_id => %(user_id)s, message => %(message)s::text, "
    "candidate_node_ids => %(candidate_node_ids)s::uuid[], thread_id => %(thread_id)s::text)"
)
IS_CORRECTION: LiteralString = "SELECT prme.is_correction(message => %(message)s::text)"
_INBOX_COLUMNS: LiteralString = (
    "id, user_id, message, thread_id, candidate_node_ids, matched_node_ids, reason, created_at, resolution, "
    "resolved_node_id, outcome_id, resolved_at"
)
LIST_CORRECTION_INBOX: LiteralString = (
    "SELECT " + _INBOX_COLUMNS + " FROM prme.list_correction_inbox(user_id => %(user_id)s, "
    "include_resolved => %(include_resolved)s::boolean, max_count => %(max_count)s::integer)"
)
RESOLVE_CORRECTION: LiteralString = (
    "SELECT " + _INBOX_COLUMNS + " FROM prme.resolve_correction(user_id => %(user_id)s, "
    "inbox_id => %(inbox_id)s::uuid, node_id => %(node_id)s::uuid)"
)
MARK_REVIEWED: LiteralString = (
    "SELECT * FROM prme.mark_reviewed(user_id => %(user_id)s, node_id => %(node_id)s::uuid, "
    "next_review_at => %(next_review_at)s::timestamptz)"
)
_SETTING_COLUMNS: LiteralString = "stability, review_cadence, decay_per_cycle, source"
GET_MAINTENANCE_SETTINGS: LiteralString = (
    "SELECT " + _SETTING_COLUMNS + " FROM prme.get_maintenance_settings(user_id => %(user_id)s)"
)
SET_MAINTENANCE_SETTING: LiteralString = (
    "SELECT " + _SETTING_COLUMNS + " FROM prme.set_maintenance_setting(user_id => %(user_id)s, "
    "stability => %(stability)s::text, review_cadence => %(review_cadence)s::interval, "
    "decay_per_cycle => %(decay_per_cycle)s::numeric)"
)
RESET_MAINTENANCE_SETTINGS: LiteralString = (
    "SELECT " + _SETTING_COLUMNS + " FROM prme.reset_maintenance_settings(user_id => %(user_id)s)"
)

_RECEIPT_COLUMNS: LiteralString = (
    "operation_id, kind, payload_hash, dependencies, state, blocked_by, result, error, attempts, created_at, "
    "updated_at, created, progress_seq"
)
SUBMIT_OPERATION: LiteralString = (
    "SELECT " + _RECEIPT_COLUMNS + " FROM prme.submit_operation(user_id => %(user_id)s, "
    "operation_id => %(operation_id)s::text, schema_version => %(schema_version)s::integer, kind => %(kind)s::text, "
    "dependencies => %(dependencies)s::text[], payload_hash => %(payload_hash)s::text, payload => %(payload)s::jsonb)"
)
GET_RECEIPT: LiteralString = (
    "SELECT "
    + _RECEIPT_COLUMNS
    + " FROM prme.get_receipt(user_id => %(user_id)s, operation_id => %(operation_id)s::text)"
)
OPERATION_EVENTS: LiteralString = (
    "SELECT seq, operation_id, operation_seq, state, detail, created_at "
    "FROM prme.operation_events(user_id => %(user_id)s, after_seq => %(after_seq)s::bigint, "
    "operation_id => %(operation_id)s::text, max_count => %(max_count)s::integer)"
)
LEDGER_STATUS: LiteralString = (
    "SELECT accepting, ready, blocked, processing, oldest_ready_at, oldest_ready_age FROM prme.ledger_status()"
)


def is_dsn(target: object) -> bool:
    """Whether a client target names a PostgreSQL server rather than a pack folder.

    A URL (``postgresql://``, ``postgres://``) or a libpq ``key=value`` string is a
    DSN; anything else, and every :class:`os.PathLike`, is a pack folder.
    """
    if not isinstance(target, str):
        return False
    if target.startswith(("postgresql://", "postgres://")):
        return True
    if not _CONNINFO.match(target):
        return False
    try:
        return bool(conninfo_to_dict(target))
    except psycopg.ProgrammingError:
        return False


# -- row factories ---------------------------------------------------------------


def utc(value: datetime) -> datetime:
    """A timestamptz as UTC: psycopg returns the session time zone, results promise UTC."""
    return value.astimezone(UTC)


def _names(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> list[str]:
    # From the result itself, as psycopg's own dict_row does: cursor.description
    # would build a Column object per column on every call.
    result = cursor.pgresult
    if result is None:
        return []
    return [result.fname(i).decode() for i in range(result.nfields)]  # type: ignore[union-attr]


_NODE_FIELDS = (
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
    "replayed",
)


# Column positions per result shape: node_view rarely changes, results are many.
_NODE_POSITIONS: dict[tuple[str, ...], tuple[int, ...]] = {}


def node_row(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> RowMaker[Node]:
    """Row factory for ``prme.node_view`` rows (columns found by name, once per result)."""
    names = tuple(_names(cursor))
    if not names:
        return _no_row
    positions = _NODE_POSITIONS.get(names)
    if positions is None:
        positions = _NODE_POSITIONS[names] = tuple(names.index(field) for field in _NODE_FIELDS)
    (
        i_id,
        i_user,
        i_ns,
        i_scope,
        i_kind,
        i_content,
        i_conf,
        i_sal,
        i_boost,
        i_last,
        i_refs,
        i_stab,
        i_review,
        i_state,
        i_decay,
        i_created,
        i_updated,
        i_version,
        i_replayed,
    ) = positions

    def make(values: Sequence[Any]) -> Node:
        last, review = values[i_last], values[i_review]
        return Node(
            id=values[i_id],
            user_id=values[i_user],
            namespace=values[i_ns],
            scope=values[i_scope],
            kind=values[i_kind],
            content=values[i_content],
            confidence_base=values[i_conf],
            salience_base=values[i_sal],
            reinforcement_boost=values[i_boost],
            last_reinforced_at=None if last is None else last.astimezone(UTC),
            evidence_refs=tuple(values[i_refs]),
            stability=values[i_stab],
            next_review_at=None if review is None else review.astimezone(UTC),
            lifecycle_state=values[i_state],
            decay_profile=values[i_decay],
            created_at=values[i_created].astimezone(UTC),
            updated_at=values[i_updated].astimezone(UTC),
            version=values[i_version],
            replayed=bool(values[i_replayed]),
        )

    return make


def _no_row(values: Sequence[Any]) -> Any:
    raise AssertionError("a statement without a result returned a row")  # pragma: no cover


def event_row(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> RowMaker[Event]:
    """Row factory for ``prme.events`` rows."""
    names = _names(cursor)

    def make(values: Sequence[Any]) -> Event:
        row = dict(zip(names, values, strict=True))
        return Event(
            id=row["id"],
            user_id=row["user_id"],
            namespace=row["namespace"],
            scope=row["scope"],
            kind=row["kind"],
            content=row["content"],
            payload=row["payload"],
            occurred_at=utc(row["occurred_at"]),
            created_at=utc(row["created_at"]),
        )

    return make


def issue_row(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> RowMaker[JournalIssue]:
    def make(values: Sequence[Any]) -> JournalIssue:
        node_id, node_version, problem, detail = values
        return JournalIssue(node_id, node_version, problem, detail)

    return make


def parse_state(text: str | None) -> dict[str, Any] | None:
    """A node state (JSON text) with exact Decimal numbers."""
    if text is None:
        return None
    value = json.loads(text, parse_float=Decimal)
    return value if isinstance(value, dict) else None


def replay_row(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> RowMaker[ReplayResult]:
    def make(values: Sequence[Any]) -> ReplayResult:
        records, matches, problem, stored, replayed = values
        return ReplayResult(records, bool(matches), problem, parse_state(stored), parse_state(replayed))

    return make


def tuple_row(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> RowMaker[tuple[Any, ...]]:
    def make(values: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(values)

    return make


def recall_row(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> RowMaker[RecallHit]:
    """Row factory for :data:`RECALL` (columns in the order it selects them)."""
    return recall_hit


def publish_row(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> RowMaker[PublishResult]:
    def make(values: Sequence[Any]) -> PublishResult:
        generation_id, seq, previous, item_count, byte_size, advanced = values
        return PublishResult(generation_id, seq, previous, item_count, byte_size, bool(advanced))

    return make


def snapshot_row(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> RowMaker[Snapshot]:
    def make(values: Sequence[Any]) -> Snapshot:
        generation_id, seq, document, item_count, byte_size, created_at, advanced_at = values
        return Snapshot(generation_id, seq, document, item_count, byte_size, utc(created_at), utc(advanced_at))

    return make


def prompt_row(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> RowMaker[AssembledPrompt]:
    def make(values: Sequence[Any]) -> AssembledPrompt:
        prompt, byte_size, item_count, truncated, scopes, ids = values
        return AssembledPrompt(prompt, byte_size, item_count, bool(truncated), tuple(scopes), tuple(ids))

    return make


def _dataclass_row(cls: Callable[..., T]) -> Callable[[psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]], RowMaker[T]]:
    """Row factory: the columns by name into ``cls``; times as UTC, arrays as tuples."""

    def factory(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> RowMaker[T]:
        names = _names(cursor)

        def make(values: Sequence[Any]) -> T:
            fields: dict[str, Any] = {}
            for name, value in zip(names, values, strict=True):
                if isinstance(value, datetime):
                    value = utc(value)
                elif isinstance(value, list):
                    value = tuple(value)
                fields[name] = value
            return cls(**fields)

        return make

    return factory


outcome_row = _dataclass_row(Outcome)
outcome_summary_row = _dataclass_row(OutcomeSummary)
recommendation_row = _dataclass_row(MaintenanceRecommendation)
applied_op_row = _dataclass_row(AppliedOp)
inbox_row = _dataclass_row(CorrectionInboxEntry)
setting_row = _dataclass_row(MaintenanceSetting)

receipt_row = _dataclass_row(Receipt)
operation_event_row = _dataclass_row(OperationEvent)
ledger_status_row = _dataclass_row(LedgerStatus)


def patch_row(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> RowMaker[MaintenancePatch]:
    def make(values: Sequence[Any]) -> MaintenancePatch:
        patch_id, created_at, as_of, ops = values
        return MaintenancePatch(patch_id, utc(created_at), utc(as_of), tuple(ops or ()))

    return make


def correction_link_row(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> RowMaker[CorrectionLink]:
    def make(values: Sequence[Any]) -> CorrectionLink:
        status, node_id, outcome_id, inbox_id, matches = values
        found = json.loads(matches or "[]", parse_float=Decimal)
        return CorrectionLink(
            status,
            node_id,
            outcome_id,
            inbox_id,
            tuple(CorrectionMatch(UUID(m["node_id"]), Decimal(m["overlap"])) for m in found),
        )

    return make


# -- requests as calls -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One statement, its parameters, and how its rows become the request's result."""

    query: LiteralString
    params: dict[str, Any]
    row_factory: RowFactory[Any]
    # Turns the fetched rows into the result; None means "exactly one row, as is".
    finish: Callable[[list[Any]], T] | None = None

    def result(self, rows: list[Any]) -> T:
        if self.finish is not None:
            return self.finish(rows)
        return cast(T, rows[0])


def readiness_of_shards(rows: list[Any]) -> tuple[bool, list[str]]:
    """``prme.readiness()`` rows as one answer: a server gives one row, a PL/Proxy tier one per
    shard (docs/SCALING.md). Writes are accepted when every shard accepts them (a shard that is
    down answers false); the migrations are those every shard has applied."""
    accepts = bool(rows) and all(bool(row[0]) for row in rows)
    applied = [list(row[1] or []) for row in rows]
    common = [m for m in applied[0] if all(m in other for other in applied[1:])] if applied else []
    return accepts, common


def ledger_status_of_shards(rows: list[LedgerStatus]) -> LedgerStatus:
    """``prme.ledger_status()`` rows as one answer: the sums of the shards' backlogs, the oldest
    of their oldest operations; accepting when every shard accepts (a down shard does not)."""
    if len(rows) == 1:
        return rows[0]
    oldest = [row for row in rows if row.oldest_ready_at is not None]
    first = min(oldest, key=lambda row: row.oldest_ready_at or 0) if oldest else None
    return LedgerStatus(
        accepting=bool(rows) and all(row.accepting for row in rows),
        ready=sum(row.ready or 0 for row in rows),
        blocked=sum(row.blocked or 0 for row in rows),
        processing=sum(row.processing or 0 for row in rows),
        oldest_ready_at=None if first is None else first.oldest_ready_at,
        oldest_ready_age=None if first is None else first.oldest_ready_age,
    )


def _time_text(value: datetime) -> str:
    return value.isoformat()


def _json_number(value: Decimal) -> int | float:
    # An integral value as an integer (7, not 7.0, in an error's "got"); else its float,
    # whose shortest repr is the Decimal's own digits for the 4 decimals a fraction has.
    return int(value) if value == value.to_integral_value() else float(value)


def node_item_json(item: NodeItem) -> dict[str, Any]:
    """One item of prme.add_nodes' array: only the fields that differ from its defaults,
    fractions as JSON numbers (a float's shortest repr is the Decimal's own digits)."""
    doc: dict[str, Any] = {"content": item.content}
    if item.scope != "personal":
        doc["scope"] = item.scope
    if item.namespace != "default":
        doc["namespace"] = item.namespace
    if item.kind != "fact":
        doc["kind"] = item.kind
    if item.confidence_base != Decimal("0.5"):
        doc["confidence_base"] = _json_number(item.confidence_base)
    if item.salience_base != Decimal("0.5"):
        doc["salience_base"] = _json_number(item.salience_base)
    if item.stability != "low":
        doc["stability"] = item.stability
    if item.decay_profile != "medium":
        doc["decay_profile"] = item.decay_profile
    # prme.add_nodes: absent is one cadence ahead, 'infinity' no schedule (as prme.add_node).
    if item.next_review_at is None:
        doc["next_review_at"] = "infinity"
    elif isinstance(item.next_review_at, datetime):
        doc["next_review_at"] = _time_text(item.next_review_at)
    if item.node_id is not None:
        doc["node_id"] = str(item.node_id)
    if item.created_at is not None:
        doc["created_at"] = _time_text(item.created_at)
    if item.embedding is not None:
        doc["embedding_model"] = item.embedding_model
        doc["embedding_dimensions"] = int(np.size(item.embedding))  # a wrong size names this item
    return doc


def batch_embeddings(items: Sequence[NodeItem]) -> Float4Array | None:
    """prme.add_nodes' embeddings: the items' vectors end to end, in item order (None: none)."""
    vectors = []
    for index, item in enumerate(items):
        if item.embedding is not None:
            if item.embedding_model is None:
                raise InvalidInput(f"items[{index}]: an embedding needs its embedding_model")
            vectors.append(np.asarray(item.embedding, dtype=np.float32).ravel())
    return Float4Array(np.concatenate(vectors)) if vectors else None


def _all(rows: list[Any]) -> list[Any]:
    return rows


def embedding_status(model_id: str, rows: list[Any]) -> EmbeddingStatus:
    """prme.embedding_status's row, or behind PL/Proxy one per shard added up."""
    return EmbeddingStatus(
        model_id=model_id,
        vector_search=all(row[0] for row in rows),
        registered=all(row[1] for row in rows),
        dimensions=next((row[2] for row in rows if row[2] is not None), None),
        pending=sum(int(row[3]) for row in rows),
        failed=sum(int(row[4]) for row in rows),
    )


def _list_or_none(values: tuple[str, ...] | None) -> list[str] | None:
    return None if values is None else list(values)


def statement(request: Request[T]) -> Call[T]:
    """The one SQL call that carries out ``request`` on PostgreSQL."""
    call: Call[Any]
    match request:
        case Reinforce():
            call = Call(
                REINFORCE,
                {
                    "node_id": request.node_id,
                    "user_id": request.user_id,
                    "evidence_id": request.evidence_id,
                    "request_id": request.request_id,
                },
                node_row,
            )
        case GetNode():
            call = Call(GET_NODE, {"user_id": request.user_id, "node_id": request.node_id}, node_row)
        case AddNode():
            call = Call(
                ADD_NODE if request.embedding is None else ADD_NODE_EMBEDDED,
                {
                    "user_id": request.user_id,
                    "content": request.content,
                    "scope": request.scope,
                    "namespace": request.namespace,
                    "kind": request.kind,
                    "confidence_base": request.confidence_base,
                    "salience_base": request.salience_base,
                    "stability": request.stability,
                    "decay_profile": request.decay_profile,
                    # prme.add_node: NULL is one cadence ahead, 'infinity' no schedule.
                    "next_review_at": (
                        None
                        if request.next_review_at is ReviewSchedule.BY_CADENCE
                        else "infinity"
                        if request.next_review_at is None
                        else request.next_review_at
                    ),
                    "node_id": request.node_id,
                    "embedding": None if request.embedding is None else Float4Array(request.embedding),
                    "embedding_model": request.embedding_model,
                },
                node_row,
            )
        case AddNodes():
            call = Call(
                ADD_NODES,
                {
                    "user_id": request.user_id,
                    "items": Jsonb([node_item_json(item) for item in request.items], dumps=_json_dumps),
                    "embeddings": batch_embeddings(request.items),
                },
                node_row,
                _all,
            )
        case AddEvent():
            call = Call(
                ADD_EVENT,
                {
                    "user_id": request.user_id,
                    "content": request.content,
                    "scope": request.scope,
                    "namespace": request.namespace,
                    "kind": request.kind,
                    "payload": Jsonb(request.payload, dumps=_json_dumps),
                    "occurred_at": request.occurred_at,
                    "event_id": request.event_id,
                },
                event_row,
            )
        case ListNodes():
            call = Call(
                LIST_NODES,
                {
                    "user_id": request.user_id,
                    "namespace": request.namespace,
                    "after_node_id": request.after_node_id,
                    "max_count": request.max_count,
                },
                node_row,
                _all,
            )
        case ArchiveNode():
            call = Call(ARCHIVE_NODE, {"user_id": request.user_id, "node_id": request.node_id}, node_row)
        case VerifyJournal():
            call = Call(VERIFY_JOURNAL, {"user_id": request.user_id}, issue_row, _all)
        case ReplayNode():
            call = Call(REPLAY_NODE, {"user_id": request.user_id, "node_id": request.node_id}, replay_row)
        case GetJournalRecords():
            user_id = request.user_id
            call = Call(JOURNAL_RECORDS, {"user_id": user_id}, tuple_row, lambda rows: journal_rows(user_id, rows))
        case GetNodeJournal():
            owner = request.user_id
            call = Call(
                NODE_JOURNAL,
                {"user_id": owner, "node_id": request.node_id, "max_count": request.max_count},
                tuple_row,
                lambda rows: node_journal_rows(owner, rows),
            )
        case ListNodeEvidence():
            call = Call(
                NODE_EVIDENCE,
                {"user_id": request.user_id, "node_id": request.node_id, "max_count": request.max_count},
                event_row,
                _all,
            )
        case ListNodeOutcomes():
            call = Call(
                NODE_OUTCOMES,
                {"user_id": request.user_id, "node_id": request.node_id, "max_count": request.max_count},
                outcome_row,
                _all,
            )
        case FindNodes():
            call = Call(
                FIND_NODES if request.query_embedding is None else FIND_NODES_EMBEDDED,
                {
                    "user_id": request.user_id,
                    "query": request.query,
                    "scopes": _list_or_none(request.scopes),
                    "stabilities": _list_or_none(request.stabilities),
                    "lifecycle_states": _list_or_none(request.lifecycle_states),
                    "max_count": request.max_count,
                    "query_embedding": (
                        None if request.query_embedding is None else Float4Array(request.query_embedding)
                    ),
                    "embedding_model": request.embedding_model,
                },
                node_row,
                _all,
            )
        case AuthenticateApiToken():
            call = Call(
                AUTHENTICATE_API_TOKEN,
                {
                    "user_id": request.user_id,
                    "token_sha256": request.token_sha256,
                },
                tuple_row,
                lambda rows: bool(rows[0][0]),
            )
        case CreateApiToken():
            call = Call(
                CREATE_API_TOKEN,
                {"user_id": request.user_id, "token_sha256": request.token_sha256, "label": request.label},
                tuple_row,
                lambda rows: rows[0][0],
            )
        case RevokeApiToken():
            call = Call(
                REVOKE_API_TOKEN,
                {"user_id": request.user_id, "token_sha256": request.token_sha256},
                tuple_row,
                lambda rows: bool(rows[0][0]),
            )
        case GetReadiness():
            call = Call(READINESS, {}, tuple_row, readiness_of_shards)
        case Recall():
            call = Call(
                RECALL if request.query_embedding is None else RECALL_EMBEDDED,
                {
                    "user_id": request.user_id,
                    "query": request.query,
                    "scopes": None if request.scopes is None else list(request.scopes),
                    "max_count": request.max_count,
                    "as_of": request.as_of,
                    "query_embedding": (
                        None if request.query_embedding is None else Float4Array(request.query_embedding)
                    ),
                    "embedding_model": request.embedding_model,
                },
                recall_row,
                _all,
            )
        case RegisterEmbeddingModel():
            call = Call(
                REGISTER_EMBEDDING_MODEL,
                {"model_id": request.model_id, "dimensions": request.dimensions},
                tuple_row,
                lambda rows: all(row[0] for row in rows),  # a row per shard behind PL/Proxy
            )
        case ListPendingEmbeddings():
            call = Call(
                PENDING_EMBEDDINGS,
                {
                    "model_id": request.model_id,
                    "max_count": request.max_count,
                    "retry_failed": request.retry_failed,
                    "after_user_id": None if request.after is None else request.after[0],
                    "after_node_id": None if request.after is None else request.after[1],
                },
                tuple_row,
                lambda rows: [PendingEmbedding(*row) for row in rows],
            )
        case StoreEmbeddings():
            call = Call(
                STORE_EMBEDDINGS,
                {
                    "model_id": request.model_id,
                    "user_ids": [user_id for user_id, _ in request.items],
                    "node_ids": [node_id for _, node_id in request.items],
                    "embeddings": Float4Array(request.vectors),
                    "errors": list(request.errors),
                },
                tuple_row,
                lambda rows: sum(int(row[0]) for row in rows),
            )
        case IndexEmbeddings():
            call = Call(
                INDEX_EMBEDDINGS,
                {"model_id": request.model_id, "min_vectors": request.min_vectors, "max_count": request.max_count},
                tuple_row,
                lambda rows: sum(int(row[0]) for row in rows),
            )
        case GetEmbeddingStatus():
            model_id = request.model_id
            call = Call(
                EMBEDDING_STATUS,
                {"model_id": model_id},
                tuple_row,
                lambda rows: embedding_status(model_id, rows),
            )
        case PublishSnapshot():
            call = Call(
                PUBLISH_SNAPSHOT,
                {
                    "user_id": request.user_id,
                    "scope": request.scope,
                    "max_items": request.max_items,
                    "max_bytes": request.max_bytes,
                    "expected_generation_id": request.expected_generation_id,
                },
                publish_row,
            )
        case GetCurrentSnapshot():
            call = Call(CURRENT_SNAPSHOT, {"user_id": request.user_id, "scope": request.scope}, snapshot_row)
        case GetSnapshot():
            call = Call(
                GET_SNAPSHOT,
                {"user_id": request.user_id, "scope": request.scope, "generation_id": request.generation_id},
                snapshot_row,
            )
        case AssemblePrompt():
            call = Call(
                ASSEMBLE_PROMPT,
                {"user_id": request.user_id, "scopes": list(request.scopes), "budget_bytes": request.budget_bytes},
                prompt_row,
            )
        case RecordOutcome():
            call = Call(
                RECORD_OUTCOME,
                {
                    "user_id": request.user_id,
                    "node_id": request.node_id,
                    "outcome": request.outcome,
                    "evidence_id": request.evidence_id,
                    "profile_id": request.profile_id,
                    "thread_id": request.thread_id,
                    "notes": request.notes,
                    "request_id": request.request_id,
                },
                outcome_row,
            )
        case GetOutcomeSummary():
            call = Call(OUTCOME_SUMMARY, {"user_id": request.user_id, "node_id": request.node_id}, outcome_summary_row)
        case GetMaintenanceReport():
            call = Call(
                MAINTENANCE_REPORT, {"user_id": request.user_id, "as_of": request.as_of}, recommendation_row, _all
            )
        case CreateMaintenancePatch():
            call = Call(MAINTENANCE_PATCH, {"user_id": request.user_id, "as_of": request.as_of}, patch_row)
        case GetPatch():
            call = Call(GET_PATCH, {"user_id": request.user_id, "patch_id": request.patch_id}, patch_row)
        case ApplyPatch():
            call = Call(
                APPLY_PATCH,
                {
                    "user_id": request.user_id,
                    "patch_id": request.patch_id,
                    "op_ids": None if request.op_ids is None else list(request.op_ids),
                    "mode": request.mode,
                },
                applied_op_row,
                _all,
            )
        case LinkCorrection():
            call = Call(
                LINK_CORRECTION,
                {
                    "user_id": request.user_id,
                    "message": request.message,
                    "candidate_node_ids": list(request.candidate_node_ids),
                    "thread_id": request.thread_id,
                },
                correction_link_row,
            )
        case IsCorrection():
            call = Call(IS_CORRECTION, {"message": request.message}, tuple_row, lambda rows: bool(rows[0][0]))
        case ListCorrectionInbox():
            call = Call(
                LIST_CORRECTION_INBOX,
                {
                    "user_id": request.user_id,
                    "include_resolved": request.include_resolved,
                    "max_count": request.max_count,
                },
                inbox_row,
                _all,
            )
        case ResolveCorrection():
            call = Call(
                RESOLVE_CORRECTION,
                {"user_id": request.user_id, "inbox_id": request.inbox_id, "node_id": request.node_id},
                inbox_row,
            )
        case MarkReviewed():
            call = Call(
                MARK_REVIEWED,
                {"user_id": request.user_id, "node_id": request.node_id, "next_review_at": request.next_review_at},
                node_row,
            )
        case GetMaintenanceSettings():
            call = Call(GET_MAINTENANCE_SETTINGS, {"user_id": request.user_id}, setting_row, _all)
        case SetMaintenanceSetting():
            call = Call(
                SET_MAINTENANCE_SETTING,
                {
                    "user_id": request.user_id,
                    "stability": request.stability,
                    "review_cadence": request.review_cadence,
                    "decay_per_cycle": request.decay_per_cycle,
                },
                setting_row,
                _all,
            )
        case ResetMaintenanceSettings():
            call = Call(RESET_MAINTENANCE_SETTINGS, {"user_id": request.user_id}, setting_row, _all)
        case SubmitOperation():
            call = Call(
                SUBMIT_OPERATION,
                {
                    "user_id": request.user_id,
                    "operation_id": request.operation_id,
                    "schema_version": request.schema_version,
                    "kind": request.kind,
                    "dependencies": list(request.dependencies),
                    "payload_hash": request.payload_hash,
                    "payload": Jsonb(request.payload, dumps=_json_dumps),
                },
                receipt_row,
            )
        case GetReceipt():
            call = Call(GET_RECEIPT, {"user_id": request.user_id, "operation_id": request.operation_id}, receipt_row)
        case ListOperationEvents():
            call = Call(
                OPERATION_EVENTS,
                {
                    "user_id": request.user_id,
                    "after_seq": request.after_seq,
                    "operation_id": request.operation_id,
                    "max_count": request.max_count,
                },
                operation_event_row,
                _all,
            )
        case GetLedgerStatus():
            call = Call(LEDGER_STATUS, {}, ledger_status_row, ledger_status_of_shards)
        case _:
            raise TypeError(f"not a prme_pg request: {request!r}")
    return cast(Call[T], call)


# -- errors ----------------------------------------------------------------------


def translate_error(exc: psycopg.Error | UnicodeEncodeError) -> Exception:
    """The prme_pg error to raise for a psycopg error (or the error itself).

    PR404/PR409/PR422 map through :data:`~prme_pg.errors.SQLSTATE_ERRORS`; PostgreSQL's
    data exceptions (class 22, e.g. an out-of-range number) and values psycopg refuses
    to send (a NUL byte in text, a lone surrogate) are invalid input too. Anything else
    is returned as is, to be re-raised.
    """
    if isinstance(exc, UnicodeEncodeError):
        return InvalidInput(f"text is not valid Unicode: {exc.reason}")
    sqlstate = exc.sqlstate or ""
    message = error_message(exc)  # through PL/Proxy too: the shard's own words (docs/SCALING.md)
    if detail := error_detail(exc):
        message = f"{message} ({detail})"
    error = SQLSTATE_ERRORS.get(sqlstate)
    if error is not None:
        return error(message)
    if sqlstate.startswith("22") or (not sqlstate and isinstance(exc, psycopg.DataError)):
        return InvalidInput(message)
    if sqlstate in _MISSING_SCHEMA and "prme" in message:
        return SchemaMissing(f"{message} ({SchemaMissing.HINT})")
    return exc


#: SQLSTATEs that mean the database lacks (part of) the prme schema: invalid_schema_name,
#: undefined_function, undefined_table.
_MISSING_SCHEMA = ("3F000", "42883", "42P01")


@contextmanager
def translate_errors() -> Iterator[None]:
    """Raise the engine's own errors as prme_pg's typed errors (see :func:`translate_error`)."""
    try:
        yield
    except (psycopg.Error, UnicodeEncodeError) as exc:
        error = translate_error(exc)
        if error is exc:
            raise
        raise error from exc


# -- executors -------------------------------------------------------------------

_CONNECTION_KWARGS: dict[str, Any] = {
    # Each statement is its own transaction: prme functions are atomic on their own.
    "autocommit": True,
}

#: Seconds any one call may run on a pooled connection before the server cancels it
#: (57014, ``psycopg.errors.QueryCanceled``): one owner's expensive call cannot hold a
#: connection, and the database's CPU, for longer (docs/CLIENTS.md). None: the server's own.
DEFAULT_STATEMENT_TIMEOUT = 30.0
SET_STATEMENT_TIMEOUT: LiteralString = "SELECT pg_catalog.set_config('statement_timeout', %s, false)"


def statement_timeout_setting(seconds: float | None) -> str | None:
    """The setting's text for a timeout in seconds (None: leave the server's setting)."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds <= 86400:
        raise ValueError(f"statement_timeout must be a number of seconds in (0, 86400] or None, got {seconds!r}")
    return f"{max(1, round(seconds * 1000))}ms"


def _configure_sync(setting: str | None) -> Callable[[psycopg.Connection[Any]], None] | None:
    """The pool's ``configure`` callback: each new connection gets the statement_timeout, once
    (a session setting: one round trip per connection, none per call)."""
    if setting is None:
        return None

    def configure(conn: psycopg.Connection[Any]) -> None:
        conn.execute(SET_STATEMENT_TIMEOUT, [setting])

    return configure


def _configure_async(setting: str | None) -> Callable[[psycopg.AsyncConnection[Any]], Any] | None:
    if setting is None:
        return None

    async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(SET_STATEMENT_TIMEOUT, [setting])

    return configure


class PostgresBackend:
    """Runs requests on a :class:`psycopg_pool.ConnectionPool`."""

    def __init__(self, pool: ConnectionPool[psycopg.Connection[Any]]) -> None:
        self.pool = pool

    @classmethod
    def connect(
        cls,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT,
        **kwargs: Any,
    ) -> PostgresBackend:
        pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            kwargs={**_CONNECTION_KWARGS, **kwargs},
            configure=_configure_sync(statement_timeout_setting(statement_timeout)),
            open=False,
            name="prme-pg",
        )
        try:
            pool.open(wait=True, timeout=timeout)
        except BaseException:
            pool.close()  # or its workers would keep trying to connect
            raise
        return cls(pool)

    def execute(self, request: Request[T]) -> T:
        call = statement(request)
        with translate_errors(), self.pool.connection() as conn:
            cur = conn.cursor(row_factory=call.row_factory)
            cur.execute(call.query, call.params)
            return call.result(cur.fetchall())

    def close(self) -> None:
        self.pool.close()


class AsyncPostgresBackend:
    """Runs requests on a :class:`psycopg_pool.AsyncConnectionPool`."""

    def __init__(self, pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]]) -> None:
        self.pool = pool
        self._timeout = 30.0

    @classmethod
    def create(
        cls,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT,
        **kwargs: Any,
    ) -> AsyncPostgresBackend:
        pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            kwargs={**_CONNECTION_KWARGS, **kwargs},
            configure=_configure_async(statement_timeout_setting(statement_timeout)),
            open=False,
            name="prme-pg",
        )
        backend = cls(pool)
        backend._timeout = timeout
        return backend

    async def open(self) -> None:
        try:
            await self.pool.open(wait=True, timeout=self._timeout)
        except BaseException:
            await self.pool.close()
            raise

    async def execute(self, request: Request[T]) -> T:
        call = statement(request)
        with translate_errors():
            async with self.pool.connection() as conn:
                cur = conn.cursor(row_factory=call.row_factory)
                await cur.execute(call.query, call.params)
                return call.result(await cur.fetchall())

    async def close(self) -> None:
        await self.pool.close()
