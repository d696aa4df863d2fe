"""Result types: frozen dataclasses, one per thing the engine returns.

Field names are the SQL column names. Numbers are :class:`~decimal.Decimal` (the
engine stores ``numeric(5,4)``: caps must hold exactly), times are timezone-aware
UTC :class:`~datetime.datetime`, ids are :class:`~uuid.UUID`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

__all__ = [
    "AppliedOp",
    "AssembledPrompt",
    "CorrectionInboxEntry",
    "CorrectionLink",
    "CorrectionMatch",
    "EmbeddingStatus",
    "Event",
    "JournalIssue",
    "JournalRecord",
    "LedgerStatus",
    "MaintenancePatch",
    "MaintenanceRecommendation",
    "MaintenanceSetting",
    "Node",
    "NodeHead",
    "OperationEvent",
    "Outcome",
    "OutcomeSummary",
    "PendingEmbedding",
    "PublishResult",
    "RecallHit",
    "Receipt",
    "ReplayResult",
    "ReviewSchedule",
    "Snapshot",
]


class ReviewSchedule(enum.Enum):
    """How ``add_node`` schedules a memory's first review when no time is given."""

    #: One review cadence of its stability after creation (the owner's setting): the default.
    BY_CADENCE = "by_cadence"


@dataclass(frozen=True, slots=True)
class Node:
    """A memory: every column of ``prme.node_view``.

    ``replayed`` is true only on a :meth:`reinforce` result that was answered from
    its idempotency key (a retry of a call that already counted).
    """

    id: UUID
    user_id: str
    namespace: str
    scope: str
    kind: str
    content: str
    confidence_base: Decimal
    salience_base: Decimal
    reinforcement_boost: Decimal
    last_reinforced_at: datetime | None
    evidence_refs: tuple[UUID, ...]
    stability: str
    next_review_at: datetime | None
    lifecycle_state: str
    decay_profile: str
    created_at: datetime
    updated_at: datetime
    version: int
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class Event:
    """Immutable evidence (a row of ``prme.events``). Not hashable: ``payload`` is a dict."""

    id: UUID
    user_id: str
    namespace: str
    scope: str
    kind: str
    content: str
    payload: dict[str, Any]
    occurred_at: datetime
    created_at: datetime


@dataclass(frozen=True, slots=True)
class JournalIssue:
    """One problem found in the journal (a row of ``prme.verify_journal``)."""

    node_id: UUID
    node_version: int
    problem: str
    detail: str


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """A node rebuilt from its journal and compared with the stored row.

    ``stored`` and ``replayed`` are node states as JSON objects, numbers parsed as
    :class:`~decimal.Decimal`; ``replayed`` is ``None`` when no record could be replayed.
    """

    records: int
    matches: bool
    problem: str | None
    stored: dict[str, Any] | None
    replayed: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """A stored journal row, as the independent verifier (:mod:`prme_pg.journal`) reads it."""

    user_id: str
    node_id: UUID
    node_version: int
    record_version: int
    op: str
    operation_id: UUID
    request_id: UUID | None
    evidence_id: UUID | None
    record: str
    checksum: str
    prev_checksum: str | None


@dataclass(frozen=True, slots=True)
class NodeHead:
    """Where a node's chain must end: its version and the checksum it points at."""

    node_id: UUID
    version: int
    last_checksum: str


@dataclass(frozen=True, slots=True)
class RecallHit:
    """One memory found by ``prme.recall``, best first (a row of its result).

    ``score`` = 0.5 * ``relevance`` + 0.25 * ``effective_salience`` + 0.25 *
    ``effective_confidence``, at the ``as_of`` of the call (floats). The rest are the
    memory's own columns (``prme.recall`` returns these, not the whole ``node_view``).
    """

    rank: int
    score: float
    relevance: float
    effective_salience: float
    effective_confidence: float
    id: UUID
    namespace: str
    scope: str
    kind: str
    content: str
    lifecycle_state: str
    decay_profile: str
    confidence_base: Decimal
    salience_base: Decimal
    reinforcement_boost: Decimal
    last_reinforced_at: datetime | None
    created_at: datetime
    updated_at: datetime
    version: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A published generation as read back (``prme.snapshot_view``), verified against its id.

    ``document`` is the RFC 8785 JSON text exactly as hashed: ``generation_id`` is its sha256.
    """

    generation_id: str
    seq: int
    document: str
    item_count: int
    byte_size: int
    created_at: datetime
    advanced_at: datetime


@dataclass(frozen=True, slots=True)
class PublishResult:
    """What ``prme.publish_snapshot`` did: the current generation after the call.

    ``advanced`` is false when the content was already current (nothing written;
    ``previous_generation_id == generation_id``). ``previous_generation_id`` is ``None``
    on a scope's first publish.
    """

    generation_id: str
    seq: int
    previous_generation_id: str | None
    item_count: int
    byte_size: int
    advanced: bool


@dataclass(frozen=True, slots=True)
class AssembledPrompt:
    """A prompt laid out by ``prme.assemble_prompt`` within a byte budget.

    ``generation_scopes`` are the requested scopes (deduplicated, in order) and
    ``generation_ids`` the generation read for each (``None``: never published).
    """

    prompt: str
    byte_size: int
    item_count: int
    truncated: bool
    generation_scopes: tuple[str, ...]
    generation_ids: tuple[str | None, ...]


@dataclass(frozen=True, slots=True)
class Outcome:
    """An outcome event as ``prme.record_outcome`` returns it (``prme.outcome_view``).

    ``replayed`` is true when a retry with the same ``request_id`` was answered from
    its idempotency key (nothing was written).
    """

    id: UUID
    user_id: str
    node_id: UUID
    outcome: str
    weight: Decimal
    evidence_id: UUID | None
    profile_id: str | None
    thread_id: str | None
    notes: str | None
    request_id: UUID | None
    recorded_by: str
    node_version: int
    created_at: datetime
    replayed: bool


@dataclass(frozen=True, slots=True)
class OutcomeSummary:
    """A memory's outcome counts, score and suggested stability (``prme.outcome_summary``)."""

    explicit_reinforcements: int
    implicit_successes: int
    neutral_exposures: int
    explicit_corrections: int
    outcomes: int
    score: Decimal
    stability_by_outcomes: str
    last_outcome_at: datetime | None


@dataclass(frozen=True, slots=True)
class MaintenanceRecommendation:
    """One row of ``prme.maintenance_report``: what maintenance recommends for a memory."""

    node_id: UUID
    recommendations: tuple[str, ...]
    lifecycle_state: str
    stability: str
    suggested_stability: str | None
    confidence_base: Decimal
    suggested_confidence: Decimal | None
    next_review_at: datetime | None
    overdue_cycles: int | None
    decayed_cycles: int | None
    explicit_reinforcements: int
    implicit_successes: int
    explicit_corrections: int


@dataclass(frozen=True, slots=True)
class MaintenancePatch:
    """A stored maintenance patch (``prme.patch_view``); ``ops`` are the JSON objects of
    its ops (op_id, op, recommendation, target, updates, reason, risk, requires_review,
    default_selected, status, applied_at, applied_mode), in op order."""

    patch_id: UUID
    created_at: datetime
    as_of: datetime
    ops: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class CorrectionMatch:
    """A candidate memory a correction message overlaps (overlap >= 0.45, 4 decimals)."""

    node_id: UUID
    overlap: Decimal


@dataclass(frozen=True, slots=True)
class CorrectionLink:
    """What ``prme.link_correction`` did with a correction message: ``status`` linked
    (``node_id`` and ``outcome_id`` of the explicit_correction appended), or unmatched /
    ambiguous (``inbox_id`` of the inbox entry; nothing appended). ``matches`` lists the
    matching candidates, best first."""

    status: str
    node_id: UUID | None
    outcome_id: UUID | None
    inbox_id: UUID | None
    matches: tuple[CorrectionMatch, ...]


@dataclass(frozen=True, slots=True)
class CorrectionInboxEntry:
    """A correction that matched zero or several memories (``prme.correction_inbox``):
    ``reason`` no_match or ambiguous; ``resolution`` None (open), linked or dismissed."""

    id: UUID
    user_id: str
    message: str
    thread_id: str | None
    candidate_node_ids: tuple[UUID, ...]
    matched_node_ids: tuple[UUID, ...]
    reason: str
    created_at: datetime
    resolution: str | None
    resolved_node_id: UUID | None
    outcome_id: UUID | None
    resolved_at: datetime | None


@dataclass(frozen=True, slots=True)
class MaintenanceSetting:
    """An effective maintenance setting for one stability (``prme.maintenance_setting_view``):
    ``source`` is owner (an override) or default."""

    stability: str
    review_cadence: timedelta
    decay_per_cycle: Decimal
    source: str


@dataclass(frozen=True, slots=True)
class AppliedOp:
    """What ``prme.apply_patch`` did with one op: ``status`` is applied, already_applied or
    stale (``detail`` says why)."""

    op_id: str
    op: str
    node_id: UUID
    status: str
    detail: str | None
    node_version: int | None


@dataclass(frozen=True, slots=True)
class Receipt:
    """The receipt of a ledger operation (``prme.submit_operation`` / ``prme.get_receipt``).

    ``state`` is accepted, blocked, processing, committed or rejected (the last two are
    terminal). ``created`` is true only for the submit that accepted the operation.
    Operation ids are strings (a UUID id in its lowercase form; docs/LEDGER.md);
    ``dependencies`` are in the order submitted, ``blocked_by`` sorted. ``progress_seq``
    is the ``operation_seq`` of the operation's newest event: it advances with each one.
    """

    operation_id: str
    kind: str
    payload_hash: str
    dependencies: tuple[str, ...]
    state: str
    blocked_by: tuple[str, ...]
    result: Any
    error: Any
    attempts: int
    created_at: datetime
    updated_at: datetime
    created: bool
    progress_seq: int


@dataclass(frozen=True, slots=True)
class OperationEvent:
    """One state change of a ledger operation (``prme.operation_events``).

    ``seq`` orders an owner's stream (pass the last one seen as ``after_seq`` to resume);
    ``operation_seq`` numbers the events of one operation from 1.
    """

    seq: int
    operation_id: str
    operation_seq: int
    state: str
    detail: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class LedgerStatus:
    """The ledger's readiness across owners (``prme.ledger_status``).

    ``accepting``: this server accepts submits; ``ready``, ``blocked``, ``processing``: the
    executor's backlog; ``oldest_ready_at`` / ``oldest_ready_age``: the oldest unfinished
    claimable operation (None when there is none).
    """

    accepting: bool
    ready: int
    blocked: int
    processing: int
    oldest_ready_at: datetime | None
    oldest_ready_age: timedelta | None


@dataclass(frozen=True, slots=True)
class PendingEmbedding:
    """A memory that recall may return and that has no vector by the model asked about yet."""

    user_id: str
    node_id: UUID
    content: str


@dataclass(frozen=True, slots=True)
class EmbeddingStatus:
    """``prme.embedding_status``: can the engine search by meaning, and what awaits a vector by ``model_id``.

    ``pending`` counts every owner's recallable memories without a vector by the model;
    ``failed`` the memories whose last attempt failed (``prme-pg embed --retry-failed``).
    """

    model_id: str
    vector_search: bool
    registered: bool
    dimensions: int | None
    pending: int
    failed: int
