"""Backends: the bottom layer, where calls become SQL.

A client turns each method call into a *request* (a frozen dataclass below, its
arguments already parsed and typed) and hands it to a backend's ``execute``. One
backend per engine owns every SQL statement sent to it:

* :mod:`prme_pg.backends.postgres` -- one ``SELECT * FROM prme.<function>(...)``
  per request; the rules run in PL/pgSQL;
* :mod:`prme_pg.backends.duckdb` -- a memory pack; each request is one DuckDB
  transaction whose rules are the macros of ``sql/duckdb`` (a package, one module per
  capability).

Requests are shared by the sync and async clients, so both build exactly the same
calls; backends never import from the client layer above them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Generic, Protocol, TypeVar
from uuid import UUID

from ..embeddings import INDEX_MIN_VECTORS, Vector, Vectors
from ..models import (
    AppliedOp,
    AssembledPrompt,
    CorrectionInboxEntry,
    CorrectionLink,
    EmbeddingStatus,
    Event,
    JournalIssue,
    JournalRecord,
    LedgerStatus,
    MaintenancePatch,
    MaintenanceRecommendation,
    MaintenanceSetting,
    Node,
    NodeHead,
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

__all__ = [
    "MAX_BATCH_ITEMS",
    "AddEvent",
    "AddNode",
    "AddNodes",
    "ApplyPatch",
    "ArchiveNode",
    "AssemblePrompt",
    "AsyncBackend",
    "AuthenticateApiToken",
    "CreateApiToken",
    "CreateMaintenancePatch",
    "FindNodes",
    "GetCurrentSnapshot",
    "GetEmbeddingStatus",
    "GetJournalRecords",
    "GetLedgerStatus",
    "GetMaintenanceReport",
    "GetMaintenanceSettings",
    "GetNode",
    "GetNodeJournal",
    "GetOutcomeSummary",
    "GetPatch",
    "GetReadiness",
    "GetReceipt",
    "GetSnapshot",
    "IndexEmbeddings",
    "IsCorrection",
    "LinkCorrection",
    "ListCorrectionInbox",
    "ListNodeEvidence",
    "ListNodeOutcomes",
    "ListNodes",
    "ListOperationEvents",
    "ListPendingEmbeddings",
    "MarkReviewed",
    "NodeItem",
    "PublishSnapshot",
    "Recall",
    "RecordOutcome",
    "RegisterEmbeddingModel",
    "Reinforce",
    "ReplayNode",
    "Request",
    "ResetMaintenanceSettings",
    "ResolveCorrection",
    "RevokeApiToken",
    "SetMaintenanceSetting",
    "StoreEmbeddings",
    "SubmitOperation",
    "SyncBackend",
    "VerifyJournal",
    "journal_rows",
    "node_journal_rows",
    "recall_hit",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Request(Generic[T_co]):
    """A call to the engine whose result is a ``T_co``."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class AddNode(Request[Node]):
    user_id: str
    content: str
    scope: str
    namespace: str
    kind: str
    confidence_base: Decimal
    salience_base: Decimal
    stability: str
    decay_profile: str
    # A time; ReviewSchedule.BY_CADENCE (one cadence of its stability after creation); or
    # None, no review schedule (PostgreSQL: 'infinity').
    next_review_at: datetime | ReviewSchedule | None
    node_id: UUID | None
    # The content's vector by embedding_model (derived state beside the memory, not journaled).
    embedding: Vector | None = field(default=None, hash=False, repr=False, compare=False)
    embedding_model: str | None = None


#: The most memories one AddNodes request (prme.add_nodes) writes in one transaction.
MAX_BATCH_ITEMS = 1000


@dataclass(frozen=True, slots=True)
class NodeItem:
    """One memory of an :class:`AddNodes` batch: AddNode's fields (its vector too), and
    ``created_at``, the time it was first made elsewhere (an import; None: now)."""

    content: str
    scope: str
    namespace: str
    kind: str
    confidence_base: Decimal
    salience_base: Decimal
    stability: str
    decay_profile: str
    next_review_at: datetime | ReviewSchedule | None
    node_id: UUID | None
    created_at: datetime | None
    # The content's vector by embedding_model (add_node's rules; derived state, not journaled).
    embedding: Vector | None = field(default=None, hash=False, repr=False, compare=False)
    embedding_model: str | None = None


@dataclass(frozen=True, slots=True)
class AddNodes(Request[list[Node]]):
    """Up to :data:`MAX_BATCH_ITEMS` memories of user_id in one transaction, all or nothing;
    one node per item, in order, ``replayed`` for an item whose node_id was already stored."""

    user_id: str
    items: tuple[NodeItem, ...]


@dataclass(frozen=True, slots=True)
class AddEvent(Request[Event]):
    user_id: str
    content: str
    scope: str
    namespace: str
    kind: str
    payload: dict[str, Any] = field(hash=False)
    occurred_at: datetime | None
    event_id: UUID | None


@dataclass(frozen=True, slots=True)
class GetNode(Request[Node]):
    user_id: str
    node_id: UUID


@dataclass(frozen=True, slots=True)
class ListNodes(Request[list[Node]]):
    user_id: str
    namespace: str | None
    after_node_id: UUID | None
    max_count: int


@dataclass(frozen=True, slots=True)
class Reinforce(Request[Node]):
    node_id: UUID
    user_id: str
    evidence_id: UUID | None
    request_id: UUID | None


@dataclass(frozen=True, slots=True)
class ArchiveNode(Request[Node]):
    user_id: str
    node_id: UUID


@dataclass(frozen=True, slots=True)
class VerifyJournal(Request[list[JournalIssue]]):
    user_id: str


@dataclass(frozen=True, slots=True)
class ReplayNode(Request[ReplayResult]):
    user_id: str
    node_id: UUID


@dataclass(frozen=True, slots=True)
class GetJournalRecords(Request[tuple[list[JournalRecord], list[NodeHead]]]):
    """The raw journal of one owner and each node's head, for the independent verifier."""

    user_id: str


@dataclass(frozen=True, slots=True)
class GetNodeJournal(Request[tuple[list[JournalRecord], NodeHead]]):
    """The oldest ``max_count`` journal records of one node and its head, for the verifier."""

    user_id: str
    node_id: UUID
    max_count: int


@dataclass(frozen=True, slots=True)
class ListNodeEvidence(Request[list[Event]]):
    """The events a node cites in evidence_refs, each once, oldest first."""

    user_id: str
    node_id: UUID
    max_count: int


@dataclass(frozen=True, slots=True)
class ListNodeOutcomes(Request[list[Outcome]]):
    """The outcome events of one node, newest first."""

    user_id: str
    node_id: UUID
    max_count: int


@dataclass(frozen=True, slots=True)
class FindNodes(Request[list[Node]]):
    """Memories in any lifecycle state by recall's word matching, meaning when a query vector
    is given, and filters."""

    user_id: str
    query: str | None
    scopes: tuple[str, ...] | None
    stabilities: tuple[str, ...] | None
    lifecycle_states: tuple[str, ...] | None
    max_count: int
    query_embedding: Vector | None = field(default=None, hash=False, repr=False, compare=False)
    embedding_model: str | None = None


def recall_hit(row: Sequence[Any]) -> RecallHit:
    """A row of recall's result (both backends select the same columns in the same order),
    its times as UTC."""
    (
        rank,
        score,
        relevance,
        salience,
        confidence,
        id_,
        namespace,
        scope,
        kind,
        content,
        state,
        decay,
        confidence_base,
        salience_base,
        boost,
        last,
        created,
        updated,
        version,
    ) = row
    return RecallHit(
        rank=rank,
        score=score,
        relevance=relevance,
        effective_salience=salience,
        effective_confidence=confidence,
        id=id_,
        namespace=namespace,
        scope=scope,
        kind=kind,
        content=content,
        lifecycle_state=state,
        decay_profile=decay,
        confidence_base=confidence_base,
        salience_base=salience_base,
        reinforcement_boost=boost,
        last_reinforced_at=None if last is None else last.astimezone(UTC),
        created_at=created.astimezone(UTC),
        updated_at=updated.astimezone(UTC),
        version=version,
    )


def node_journal_rows(user_id: str, rows: Sequence[Sequence[Any]]) -> tuple[list[JournalRecord], NodeHead]:
    """Rows of the one-node journal query: its records and its head (the query always returns a row)."""
    records, heads = journal_rows(user_id, rows)
    return records, heads[0]


def journal_rows(user_id: str, rows: Sequence[Sequence[Any]]) -> tuple[list[JournalRecord], list[NodeHead]]:
    """Split rows of the journal-with-heads query (both backends run the same one)
    into records and one head per node.

    Each row is ``(node id, node version, last_checksum, journal columns...)``; a
    node without records has NULL journal columns, a record whose node row is gone
    NULL node columns (no head: the verifier reports it as ``node_missing``).
    """
    records: list[JournalRecord] = []
    heads: dict[UUID, NodeHead] = {}
    for (
        node_id,
        version,
        last_checksum,
        node_version,
        record_version,
        op,
        operation_id,
        request_id,
        evidence_id,
        record,
        checksum,
        prev_checksum,
    ) in rows:
        if version is not None:
            heads.setdefault(node_id, NodeHead(node_id, version, last_checksum))
        if node_version is not None:
            records.append(
                JournalRecord(
                    user_id,
                    node_id,
                    node_version,
                    record_version,
                    op,
                    operation_id,
                    request_id,
                    evidence_id,
                    record,
                    checksum,
                    prev_checksum,
                )
            )
    return records, list(heads.values())


@dataclass(frozen=True, slots=True)
class AuthenticateApiToken(Request[bool]):
    """Whether token_sha256 is a live bearer token of user_id."""

    user_id: str
    token_sha256: str


@dataclass(frozen=True, slots=True)
class CreateApiToken(Request[datetime]):
    """Register the sha256 of a new bearer token of user_id; returns its creation time."""

    user_id: str
    token_sha256: str
    label: str


@dataclass(frozen=True, slots=True)
class RevokeApiToken(Request[bool]):
    """Revoke a live bearer token of user_id by its sha256; false when none matched."""

    user_id: str
    token_sha256: str


@dataclass(frozen=True, slots=True)
class GetReadiness(Request[tuple[bool, list[str]]]):
    """Whether the database accepts writes, and its applied migrations as version:sha256."""


@dataclass(frozen=True, slots=True)
class Recall(Request[list[RecallHit]]):
    """Recall over the memories of user_id: words, and meaning when a query vector is given."""

    user_id: str
    query: str | None
    scopes: tuple[str, ...] | None
    max_count: int
    as_of: datetime | None
    query_embedding: Vector | None = field(default=None, hash=False, repr=False, compare=False)
    embedding_model: str | None = None


@dataclass(frozen=True, slots=True)
class RegisterEmbeddingModel(Request[bool]):
    """Register an embedding model (idempotent); True when the engine can search by meaning."""

    model_id: str
    dimensions: int


@dataclass(frozen=True, slots=True)
class ListPendingEmbeddings(Request[list[PendingEmbedding]]):
    """Recallable memories of every owner without a vector by model_id, in (user_id, node_id) order."""

    model_id: str
    max_count: int
    retry_failed: bool = False
    after: tuple[str, UUID] | None = None  # (user_id, node_id): the page after it


@dataclass(frozen=True, slots=True)
class StoreEmbeddings(Request[int]):
    """Vectors (or per memory the error of a failed attempt) by model_id; returns the rows written."""

    model_id: str
    dimensions: int
    items: tuple[tuple[str, UUID], ...]
    # One row per item, the model's dimensions each; a failed item's row is ignored.
    vectors: Vectors = field(hash=False, repr=False, compare=False)
    errors: tuple[str | None, ...] = field(hash=False)


@dataclass(frozen=True, slots=True)
class IndexEmbeddings(Request[int]):
    """Move vectors by model_id of owners with at least min_vectors into the engine's vector index; returns how many.

    Engines without a vector index (the pack, a server without pgvector) move none."""

    model_id: str
    min_vectors: int = INDEX_MIN_VECTORS
    max_count: int = 2000


@dataclass(frozen=True, slots=True)
class GetEmbeddingStatus(Request[EmbeddingStatus]):
    """Whether the engine searches by meaning, and the memories awaiting a vector by model_id."""

    model_id: str


@dataclass(frozen=True, slots=True)
class PublishSnapshot(Request[PublishResult]):
    """Publish the current generation of (user_id, scope)."""

    user_id: str
    scope: str
    max_items: int
    max_bytes: int
    expected_generation_id: str | None


@dataclass(frozen=True, slots=True)
class GetCurrentSnapshot(Request[Snapshot]):
    """The current generation of (user_id, scope), verified."""

    user_id: str
    scope: str


@dataclass(frozen=True, slots=True)
class GetSnapshot(Request[Snapshot]):
    """One generation of (user_id, scope) by id, verified."""

    user_id: str
    scope: str
    generation_id: str


@dataclass(frozen=True, slots=True)
class AssemblePrompt(Request[AssembledPrompt]):
    """Prompt text from the current generations of scopes within budget_bytes."""

    user_id: str
    scopes: tuple[str, ...]
    budget_bytes: int


@dataclass(frozen=True, slots=True)
class RecordOutcome(Request[Outcome]):
    """Append an outcome event to a memory of user_id."""

    user_id: str
    node_id: UUID
    outcome: str
    evidence_id: UUID | None
    profile_id: str | None
    thread_id: str | None
    notes: str | None
    request_id: UUID | None


@dataclass(frozen=True, slots=True)
class GetOutcomeSummary(Request[OutcomeSummary]):
    """Outcome counts, score and suggested stability of a memory."""

    user_id: str
    node_id: UUID


@dataclass(frozen=True, slots=True)
class GetMaintenanceReport(Request[list[MaintenanceRecommendation]]):
    """Maintenance recommendations for the memories of user_id; changes nothing."""

    user_id: str
    as_of: datetime | None


@dataclass(frozen=True, slots=True)
class CreateMaintenancePatch(Request[MaintenancePatch]):
    """Store the actionable recommendations as a patch for review."""

    user_id: str
    as_of: datetime | None


@dataclass(frozen=True, slots=True)
class GetPatch(Request[MaintenancePatch]):
    """A stored maintenance patch of user_id with each op's status."""

    user_id: str
    patch_id: UUID


@dataclass(frozen=True, slots=True)
class ApplyPatch(Request[list[AppliedOp]]):
    """Apply ops of a patch: manual (exactly op_ids) or auto (op_ids None)."""

    user_id: str
    patch_id: UUID
    op_ids: tuple[str, ...] | None
    mode: str


@dataclass(frozen=True, slots=True)
class LinkCorrection(Request[CorrectionLink]):
    """Link a correction message to the one candidate memory it overlaps, or put it in the
    correction inbox."""

    user_id: str
    message: str
    candidate_node_ids: tuple[UUID, ...]
    thread_id: str | None


@dataclass(frozen=True, slots=True)
class IsCorrection(Request[bool]):
    """Does a message use explicit correction phrasing? Reads nothing."""

    message: str


@dataclass(frozen=True, slots=True)
class ListCorrectionInbox(Request[list[CorrectionInboxEntry]]):
    """The correction inbox of user_id, oldest first."""

    user_id: str
    include_resolved: bool
    max_count: int


@dataclass(frozen=True, slots=True)
class ResolveCorrection(Request[CorrectionInboxEntry]):
    """Link an inbox entry to a memory (appending the correction), or dismiss it with
    node_id None."""

    user_id: str
    inbox_id: UUID
    node_id: UUID | None


@dataclass(frozen=True, slots=True)
class MarkReviewed(Request[Node]):
    """Record a review of a memory: a new next_review_at, outcomes so far settled."""

    user_id: str
    node_id: UUID
    next_review_at: datetime | None


@dataclass(frozen=True, slots=True)
class GetMaintenanceSettings(Request[list[MaintenanceSetting]]):
    """The effective review cadence and decay of user_id per stability."""

    user_id: str


@dataclass(frozen=True, slots=True)
class SetMaintenanceSetting(Request[list[MaintenanceSetting]]):
    """Override the review cadence and decay of one stability for user_id."""

    user_id: str
    stability: str
    review_cadence: timedelta
    decay_per_cycle: Decimal


@dataclass(frozen=True, slots=True)
class ResetMaintenanceSettings(Request[list[MaintenanceSetting]]):
    """Remove user_id's overrides: the defaults apply again."""

    user_id: str


@dataclass(frozen=True, slots=True)
class SubmitOperation(Request[Receipt]):
    """Durably accept an operation of user_id into the ledger (PostgreSQL only)."""

    user_id: str
    operation_id: str
    schema_version: int
    kind: str
    dependencies: tuple[str, ...]
    payload_hash: str
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class GetReceipt(Request[Receipt]):
    """The receipt of an operation of user_id as it stands now (PostgreSQL only)."""

    user_id: str
    operation_id: str


@dataclass(frozen=True, slots=True)
class ListOperationEvents(Request[list[OperationEvent]]):
    """Events of user_id's operations (or one operation) after after_seq, in seq order (PostgreSQL only)."""

    user_id: str
    after_seq: int
    operation_id: str | None
    max_count: int


@dataclass(frozen=True, slots=True)
class GetLedgerStatus(Request[LedgerStatus]):
    """The ledger's readiness and the executor's backlog across owners (PostgreSQL only)."""


class SyncBackend(Protocol):
    def execute(self, request: Request[T]) -> T: ...

    def close(self) -> None: ...


class AsyncBackend(Protocol):
    async def open(self) -> None: ...

    async def execute(self, request: Request[T]) -> T: ...

    async def close(self) -> None: ...
