"""The HTTP API: FastAPI over :class:`~prme_pg.AsyncMemoryClient`.

Every route but ``/health`` needs ``Authorization: Bearer <token>``; a token acts
for exactly one owner (see :mod:`prme_pg.tokens`), so no route takes a user_id.
Errors are RFC 9457 problem+json whose ``type`` names the SQLSTATE. A retried
confirmation with the same ``Idempotency-Key`` counts once and is answered with
``Idempotent-Replayed: true``. Install with the ``http`` extra; serve with
``prme-pg serve``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal
from uuid import UUID

import psycopg
from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from psycopg_pool import PoolTimeout
from pydantic import BaseModel, ConfigDict, Field, PlainSerializer
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import __version__, migrations
from .aio import AsyncMemoryClient
from .errors import IdempotencyConflict, IntegrityError, InvalidInput, NotFoundError, PrmeError
from .models import (
    AppliedOp,
    AssembledPrompt,
    CorrectionInboxEntry,
    CorrectionLink,
    Event,
    LedgerStatus,
    MaintenancePatch,
    MaintenanceRecommendation,
    MaintenanceSetting,
    Node,
    OperationEvent,
    Outcome,
    OutcomeSummary,
    PublishResult,
    RecallHit,
    Receipt,
    Snapshot,
)
from .tokens import parse_token

__all__ = ["create_app"]

PROBLEM_JSON = "application/problem+json"
EVENT_STREAM = "text/event-stream"
# Server-Sent Events: history first, then new events by polling every POLL_SECONDS, until
# max_seconds have passed (so every client and test ends); a reconnect resumes from Last-Event-ID.
POLL_SECONDS = 0.5
STREAM_BATCH = 1000
MAX_STREAM_SECONDS = 300
ERROR_TYPE = "urn:prme-pg:error:"

# Decimals go out as JSON numbers (0.65, not "0.65"); they are numeric(5,4), so a
# double holds each exactly enough to print the same shortest form.
Number = Annotated[Decimal, PlainSerializer(float, return_type=float, when_used="json")]


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    type: str = Field(examples=["urn:prme-pg:error:PR404"])
    title: str
    status: int
    detail: str


class NodeOut(BaseModel):
    id: UUID
    user_id: str
    namespace: str
    scope: str
    kind: str
    content: str
    confidence_base: Number
    salience_base: Number
    reinforcement_boost: Number
    last_reinforced_at: datetime | None
    evidence_refs: list[UUID]
    stability: str
    next_review_at: datetime | None
    lifecycle_state: str
    decay_profile: str
    created_at: datetime
    updated_at: datetime
    version: int

    @classmethod
    def of(cls, node: Node) -> NodeOut:
        fields = {name: getattr(node, name) for name in cls.model_fields}
        fields["evidence_refs"] = list(node.evidence_refs)
        return cls(**fields)


class EventOut(BaseModel):
    id: UUID
    user_id: str
    namespace: str
    scope: str
    kind: str
    content: str
    payload: dict[str, Any]
    occurred_at: datetime
    created_at: datetime

    @classmethod
    def of(cls, event: Event) -> EventOut:
        return cls(**{name: getattr(event, name) for name in cls.model_fields})


class NodeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str
    scope: str = "personal"
    namespace: str = "default"
    kind: str = "fact"
    confidence_base: Decimal = Decimal("0.5")
    salience_base: Decimal = Decimal("0.5")
    stability: str = "low"
    decay_profile: str = "medium"
    next_review_at: datetime | None = None


class EventIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str
    scope: str = "personal"
    namespace: str = "default"
    kind: str = "message"
    payload: dict[str, Any] = Field(default_factory=dict)
    occurred_at: datetime | None = None


class ReinforceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    evidence_id: UUID | None = None


class RecallHitOut(BaseModel):
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
    confidence_base: Number
    salience_base: Number
    reinforcement_boost: Number
    last_reinforced_at: datetime | None
    created_at: datetime
    updated_at: datetime
    version: int

    @classmethod
    def of(cls, hit: RecallHit) -> RecallHitOut:
        return cls(**{name: getattr(hit, name) for name in cls.model_fields})


class RecallOut(BaseModel):
    hits: list[RecallHitOut]


class SnapshotOut(BaseModel):
    generation_id: str = Field(description="sha256 (hex) of document")
    seq: int
    document: str = Field(description="the RFC 8785 JSON document exactly as hashed")
    item_count: int
    byte_size: int
    created_at: datetime
    advanced_at: datetime

    @classmethod
    def of(cls, snapshot: Snapshot) -> SnapshotOut:
        return cls(**{name: getattr(snapshot, name) for name in cls.model_fields})


class PublishIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_items: int = Field(default=100, ge=1, le=10000)
    max_bytes: int = Field(default=65536, ge=1, le=16777216)


class PublishOut(BaseModel):
    generation_id: str
    seq: int
    previous_generation_id: str | None
    item_count: int
    byte_size: int
    advanced: bool

    @classmethod
    def of(cls, result: PublishResult) -> PublishOut:
        return cls(**{name: getattr(result, name) for name in cls.model_fields})


class PromptOut(BaseModel):
    prompt: str
    byte_size: int
    item_count: int
    truncated: bool
    generation_scopes: list[str]
    generation_ids: list[str | None]

    @classmethod
    def of(cls, prompt: AssembledPrompt) -> PromptOut:
        return cls(
            prompt=prompt.prompt,
            byte_size=prompt.byte_size,
            item_count=prompt.item_count,
            truncated=prompt.truncated,
            generation_scopes=list(prompt.generation_scopes),
            generation_ids=list(prompt.generation_ids),
        )


class OutcomeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    outcome: Literal["explicit_reinforcement", "implicit_success", "neutral_exposure", "explicit_correction"]
    evidence_id: UUID | None = None
    profile_id: str | None = None
    thread_id: str | None = None
    notes: str | None = None


class OutcomeOut(BaseModel):
    id: UUID
    user_id: str
    node_id: UUID
    outcome: str
    weight: Number
    evidence_id: UUID | None
    profile_id: str | None
    thread_id: str | None
    notes: str | None
    request_id: UUID | None
    recorded_by: str
    node_version: int
    created_at: datetime

    @classmethod
    def of(cls, outcome: Outcome) -> OutcomeOut:
        return cls(**{name: getattr(outcome, name) for name in cls.model_fields})


class OutcomeSummaryOut(BaseModel):
    explicit_reinforcements: int
    implicit_successes: int
    neutral_exposures: int
    explicit_corrections: int
    outcomes: int
    score: float
    suggested_stability: str
    last_outcome_at: datetime | None

    @classmethod
    def of(cls, summary: OutcomeSummary) -> OutcomeSummaryOut:
        return cls(**{name: getattr(summary, name) for name in cls.model_fields})


class RecommendationOut(BaseModel):
    node_id: UUID
    recommendations: list[str]
    lifecycle_state: str
    stability: str
    suggested_stability: str | None
    confidence_base: float
    suggested_confidence: float | None
    next_review_at: datetime | None
    overdue_cycles: int | None
    decayed_cycles: int | None
    explicit_reinforcements: int
    implicit_successes: int
    explicit_corrections: int

    @classmethod
    def of(cls, row: MaintenanceRecommendation) -> RecommendationOut:
        fields = {name: getattr(row, name) for name in cls.model_fields}
        fields["recommendations"] = list(row.recommendations)
        return cls(**fields)


class ReportOut(BaseModel):
    recommendations: list[RecommendationOut]


class PatchOpOut(BaseModel):
    op_id: str
    op: str
    recommendation: str
    target: dict[str, Any] = Field(description="node_id, version and the first 200 characters of content")
    updates: dict[str, Any] = Field(description="each changed field as {from, to}")
    reason: str
    risk: str
    requires_review: bool
    default_selected: bool
    status: str = Field(description="pending or applied")
    applied_at: datetime | None = None
    applied_mode: str | None = None


class PatchOut(BaseModel):
    patch_id: UUID
    created_at: datetime
    as_of: datetime
    ops: list[PatchOpOut]

    @classmethod
    def of(cls, patch: MaintenancePatch) -> PatchOut:
        return cls(
            patch_id=patch.patch_id,
            created_at=patch.created_at,
            as_of=patch.as_of,
            ops=[PatchOpOut.model_validate(op) for op in patch.ops],
        )


class PatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    as_of: datetime | None = Field(default=None, description="compute as of this time (default now; not future)")


class ApplyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    op_ids: list[str] | None = Field(default=None, description="manual: the ops to apply; auto: null")
    mode: Literal["manual", "auto"] = "manual"


class AppliedOpOut(BaseModel):
    op_id: str
    op: str
    node_id: UUID
    status: str = Field(description="applied, already_applied or stale")
    detail: str | None
    node_version: int | None

    @classmethod
    def of(cls, row: AppliedOp) -> AppliedOpOut:
        return cls(**{name: getattr(row, name) for name in cls.model_fields})


class ApplyOut(BaseModel):
    patch_id: UUID
    results: list[AppliedOpOut]


class CorrectionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str
    candidate_node_ids: list[UUID] = Field(description="the memories the message may correct (at most 1000)")
    thread_id: str | None = None


class CorrectionMatchOut(BaseModel):
    node_id: UUID
    overlap: Number


class CorrectionLinkOut(BaseModel):
    status: str = Field(description="linked, unmatched or ambiguous")
    node_id: UUID | None = Field(description="linked: the corrected memory")
    outcome_id: UUID | None = Field(description="linked: the explicit_correction appended")
    inbox_id: UUID | None = Field(description="unmatched or ambiguous: the inbox entry")
    matches: list[CorrectionMatchOut]

    @classmethod
    def of(cls, link: CorrectionLink) -> CorrectionLinkOut:
        return cls(
            status=link.status,
            node_id=link.node_id,
            outcome_id=link.outcome_id,
            inbox_id=link.inbox_id,
            matches=[CorrectionMatchOut(node_id=m.node_id, overlap=m.overlap) for m in link.matches],
        )


class DetectIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str


class DetectOut(BaseModel):
    is_correction: bool


class InboxEntryOut(BaseModel):
    id: UUID
    message: str
    thread_id: str | None
    candidate_node_ids: list[UUID]
    matched_node_ids: list[UUID]
    reason: str = Field(description="no_match or ambiguous")
    created_at: datetime
    resolution: str | None = Field(description="null (open), linked or dismissed")
    resolved_node_id: UUID | None
    outcome_id: UUID | None
    resolved_at: datetime | None

    @classmethod
    def of(cls, entry: CorrectionInboxEntry) -> InboxEntryOut:
        fields = {name: getattr(entry, name) for name in cls.model_fields}
        fields["candidate_node_ids"] = list(entry.candidate_node_ids)
        fields["matched_node_ids"] = list(entry.matched_node_ids)
        return cls(**fields)


class InboxOut(BaseModel):
    entries: list[InboxEntryOut]


class ResolveIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node_id: UUID | None = Field(default=None, description="link to this memory; null dismisses the entry")


class ReviewIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    next_review_at: datetime | None = Field(
        default=None, description="the next review (future); default: one cadence of its stability from now"
    )


class SettingOut(BaseModel):
    stability: str
    # Whole seconds: cadences are elapsed time (a day is 86400 s), which an ISO 8601
    # duration with years or months would misstate.
    review_cadence: int = Field(description="seconds (a day is 86400)")
    decay_per_cycle: Number
    source: str = Field(description="owner (an override) or default")

    @classmethod
    def of(cls, setting: MaintenanceSetting) -> SettingOut:
        fields = {name: getattr(setting, name) for name in cls.model_fields}
        fields["review_cadence"] = int(setting.review_cadence.total_seconds())
        return cls(**fields)


class SettingsOut(BaseModel):
    settings: list[SettingOut]


class SettingIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    review_cadence: timedelta = Field(description="ISO 8601 duration (P7D, PT12H) or seconds; 1 hour to 3650 days")
    decay_per_cycle: Decimal = Field(description="confidence lost per overdue cycle, in [0, 1], 4 decimals at most")


class OperationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    operation_id: UUID = Field(description="caller-generated and stable: a retry reuses it")
    schema_version: int = Field(ge=-(2**31), le=2**31 - 1, description="must be 2")
    kind: str = Field(
        description="add_node, add_event, reinforce, archive_node, record_outcome or link_correction (docs/LEDGER.md)"
    )
    dependencies: list[UUID] = Field(default_factory=list, description="operations this one waits for")
    payload_hash: str = Field(description="sha256 hex of the payload's RFC 8785 canonical form")
    payload: dict[str, Any]


class ReceiptOut(BaseModel):
    operation_id: UUID
    kind: str
    payload_hash: str
    dependencies: list[UUID]
    state: str = Field(description="accepted, blocked, processing, committed or rejected")
    blocked_by: list[UUID]
    result: Any = Field(default=None, description="set once committed")
    error: Any = Field(default=None, description="set once rejected, and while a transient failure is retried")
    attempts: int
    created_at: datetime
    updated_at: datetime
    created: bool = Field(description="true only for the submit that accepted the operation")

    @classmethod
    def of(cls, receipt: Receipt) -> ReceiptOut:
        fields = {name: getattr(receipt, name) for name in cls.model_fields}
        fields["dependencies"] = list(receipt.dependencies)
        fields["blocked_by"] = list(receipt.blocked_by)
        return cls(**fields)


class LedgerReadiness(BaseModel):
    accepting: bool = Field(description="this server accepts submits (not a read-only standby)")
    ready: int = Field(description="accepted operations waiting for the executor")
    blocked: int = Field(description="operations waiting for their dependencies")
    processing: int = Field(description="operations claimed or being retried")
    pending: int = Field(description="ready + blocked + processing")
    oldest_ready_at: datetime | None
    oldest_ready_age_seconds: float | None = Field(description="age of the oldest unfinished claimable operation")

    @classmethod
    def of(cls, status: LedgerStatus) -> LedgerReadiness:
        age = status.oldest_ready_age
        return cls(
            accepting=status.accepting,
            ready=status.ready,
            blocked=status.blocked,
            processing=status.processing,
            pending=status.ready + status.blocked + status.processing,
            oldest_ready_at=status.oldest_ready_at,
            oldest_ready_age_seconds=None if age is None else age.total_seconds(),
        )


class Health(BaseModel):
    status: str
    version: str


class Readiness(BaseModel):
    ready: bool
    accepts_writes: bool
    migrations_current: bool
    detail: str
    ledger: LedgerReadiness | None = Field(
        default=None, description="the operations ledger's backlog; null when it cannot be read"
    )


def _problem(status: int, code: str, title: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = Problem(type=ERROR_TYPE + code, title=title, status=status, detail=detail)
    return JSONResponse(body.model_dump(), status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _responses(*statuses: int, **overrides: str) -> dict[int | str, dict[str, Any]]:
    """Documented problem responses; ``overrides`` (``s404="..."``) reword one status."""
    described = {
        401: "missing, malformed, unknown or revoked bearer token",
        404: "not found (missing, archived, or another owner's)",
        409: "idempotency key already used for another node or evidence",
        422: "invalid input",
        503: "the database is unavailable",
    }
    return {
        status: {
            "model": Problem,
            "description": overrides.get(f"s{status}", described[status]),
            "content": {PROBLEM_JSON: {}},
        }
        for status in statuses
    }


def _sse(event: OperationEvent) -> str:
    """One event as a Server-Sent Events message: id is the stream position (seq)."""
    data = {
        "seq": event.seq,
        "operation_id": str(event.operation_id),
        "operation_seq": event.operation_seq,
        "state": event.state,
        "detail": event.detail,
        "created_at": event.created_at.isoformat(),
    }
    return f"id: {event.seq}\nevent: operation\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


def _resume_after(last_event_id: str | None, after: int) -> int:
    """Where a stream starts: Last-Event-ID (a reconnect) wins over ?after=."""
    if last_event_id is None or not last_event_id.strip():
        return after
    text = last_event_id.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19 or int(text) > 2**63 - 1:
        raise InvalidInput(f"Last-Event-ID must be an event seq (a non-negative integer), got {last_event_id[:40]!r}")
    return int(text)


def _stream_responses() -> dict[int | str, dict[str, Any]]:
    return {
        **_responses(401, 404, 422, 503, s404="no such operation of the token's owner"),
        200: {
            "description": (
                "Server-Sent Events, one per state change: `id:` is the event's seq, `event: operation`, "
                "`data:` a JSON object {seq, operation_id, operation_seq, state, detail, created_at}. "
                "History first, then live events, until max_seconds have passed. Reconnect with "
                "Last-Event-ID (or ?after=) to resume with no gap and no duplicate."
            ),
            "content": {EVENT_STREAM: {"schema": {"type": "string"}}},
        },
    }


def _etag(generation_id: str) -> str:
    return f'"{generation_id}"'


def _if_match(value: str | None) -> str | None:
    """The generation id an If-Match header expects (an ETag is the id in quotes; W/ is ignored)."""
    if value is None:
        return None
    value = value.strip()
    if value.startswith("W/"):
        value = value[2:]
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return value


bearer = HTTPBearer(auto_error=False, description="prme.<owner>.<secret>, from `prme-pg token create`")


class Unauthorized(Exception):
    pass


async def current_owner(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> str:
    """The user_id the bearer token acts for, or 401."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("an Authorization: Bearer token is required")
    parsed = parse_token(credentials.credentials)
    client: AsyncMemoryClient = request.app.state.client
    if parsed is None or not await client.authenticate_api_token(parsed.user_id, parsed.sha256):
        raise Unauthorized("the bearer token is not valid")
    return parsed.user_id


Owner = Annotated[str, Depends(current_owner)]


After = Annotated[int, Query(ge=0, le=2**63 - 1, description="resume after this seq (Last-Event-ID wins)")]
MaxSeconds = Annotated[float, Query(ge=0, le=MAX_STREAM_SECONDS, description="end the stream after this many seconds")]
LastEventId = Annotated[str | None, Header(alias="Last-Event-ID", description="the last seq received; resume after it")]


def create_app(client: AsyncMemoryClient) -> FastAPI:
    """The ASGI app over an (unopened) client; the app opens and closes it."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with client:
            yield

    app = FastAPI(
        title="prme-pg",
        version=__version__,
        description="A memory engine for AI agents: confirm, correct and audit memories.",
        lifespan=lifespan,
    )
    app.state.client = client
    expected_migrations = [f"{m.version}:{m.sha256}" for m in migrations.load_migrations()]

    @app.exception_handler(Unauthorized)
    async def unauthorized(_: Request, exc: Unauthorized) -> JSONResponse:
        return _problem(401, "unauthorized", "Unauthorized", str(exc), {"WWW-Authenticate": "Bearer"})

    @app.exception_handler(PrmeError)
    async def engine_error(_: Request, exc: PrmeError) -> JSONResponse:
        titles = {
            NotFoundError: "Not Found",
            IdempotencyConflict: "Conflict",
            InvalidInput: "Invalid Input",
            IntegrityError: "Data Corrupted",
        }
        if type(exc) in titles:
            return _problem(exc.http_status, exc.sqlstate, titles[type(exc)], str(exc))
        return _problem(500, "internal", "Internal Server Error", str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = "; ".join(
            f"{'.'.join(str(p) for p in error.get('loc', ()))}: {error.get('msg', 'invalid')}" for error in exc.errors()
        )
        return _problem(422, InvalidInput.sqlstate, "Invalid Input", details or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _problem(exc.status_code, f"http-{exc.status_code}", str(exc.detail), str(exc.detail))

    @app.exception_handler(psycopg.OperationalError)
    @app.exception_handler(PoolTimeout)
    async def unavailable(_: Request, exc: Exception) -> JSONResponse:
        return _problem(503, "unavailable", "Service Unavailable", f"the database is unavailable: {exc}")

    @app.get("/health", response_model=Health, tags=["operations"])
    async def health() -> Health:
        """The process is alive. Needs no token and touches no database."""
        return Health(status="ok", version=__version__)

    @app.get(
        "/ready",
        response_model=Readiness,
        tags=["operations"],
        responses={**_responses(401), 503: {"model": Readiness, "description": "cannot ingest"}},
    )
    async def ready(_: Owner, response: Response) -> Readiness:
        """Whether the database accepts writes and has exactly this release's migrations."""
        try:
            accepts_writes, applied = await client.readiness()
        except (psycopg.OperationalError, PoolTimeout) as exc:
            response.status_code = 503
            return Readiness(
                ready=False, accepts_writes=False, migrations_current=False, detail=f"database unavailable: {exc}"
            )
        current = list(applied) == expected_migrations
        problems = [] if accepts_writes else ["the database does not accept writes"]
        if not current:
            problems.append(f"migrations differ: database has {len(applied)}, release has {len(expected_migrations)}")
        if problems:
            response.status_code = 503
        ledger: LedgerReadiness | None = None
        try:
            ledger = LedgerReadiness.of(await client.ledger_status())
        except (psycopg.Error, PoolTimeout, PrmeError):
            ledger = None  # e.g. a database without the ledger's migrations: readiness says so already
        return Readiness(
            ready=not problems,
            accepts_writes=accepts_writes,
            migrations_current=current,
            detail="; ".join(problems) or "ready",
            ledger=ledger,
        )

    @app.post(
        "/v1/nodes", status_code=201, response_model=NodeOut, tags=["memories"], responses=_responses(401, 422, 503)
    )
    async def add_node(body: NodeIn, user_id: Owner) -> NodeOut:
        """Create a memory for the token's owner."""
        return NodeOut.of(await client.add_node(body.content, user_id=user_id, **body.model_dump(exclude={"content"})))

    @app.get("/v1/nodes/{node_id}", response_model=NodeOut, tags=["memories"], responses=_responses(401, 404, 422, 503))
    async def get_node(node_id: UUID, user_id: Owner) -> NodeOut:
        """One memory of the token's owner (404 for another owner's)."""
        return NodeOut.of(await client.get_node(node_id, user_id=user_id))

    @app.post(
        "/v1/events", status_code=201, response_model=EventOut, tags=["evidence"], responses=_responses(401, 422, 503)
    )
    async def add_event(body: EventIn, user_id: Owner) -> EventOut:
        """Record immutable evidence for the token's owner."""
        return EventOut.of(
            await client.add_event(body.content, user_id=user_id, **body.model_dump(exclude={"content"}))
        )

    @app.put(
        "/v1/nodes/{node_id}/reinforce",
        response_model=NodeOut,
        tags=["memories"],
        responses={
            **_responses(401, 404, 409, 422, 503),
            200: {
                "description": "the current node; on a replay also the header Idempotent-Replayed: true",
                "headers": {"Idempotent-Replayed": {"schema": {"type": "string", "enum": ["true"]}}},
            },
        },
    )
    async def reinforce(
        node_id: UUID,
        user_id: Owner,
        response: Response,
        body: ReinforceIn | None = None,
        idempotency_key: Annotated[
            UUID | None, Header(alias="Idempotency-Key", description="a UUID; becomes the request_id")
        ] = None,
    ) -> NodeOut:
        """Confirm a memory. With an Idempotency-Key, a retry counts once and is answered as a replay."""
        node = await client.reinforce(
            node_id, body.evidence_id if body else None, user_id=user_id, request_id=idempotency_key
        )
        if node.replayed:
            response.headers["Idempotent-Replayed"] = "true"
        return NodeOut.of(node)

    @app.get("/v1/recall", response_model=RecallOut, tags=["recall"], responses=_responses(401, 422, 503))
    async def recall(
        user_id: Owner,
        q: Annotated[str | None, Query(description="words to look for; absent or blank ranks by strength")] = None,
        scope: Annotated[list[str] | None, Query(description="only these scopes (repeat; default all)")] = None,
        limit: Annotated[int, Query(ge=1, le=1000, description="at most this many hits")] = 10,
    ) -> RecallOut:
        """The token owner's memories matching q, best first (docs/RECALL.md)."""
        hits = await client.recall(q, user_id=user_id, scopes=scope, max_count=limit)
        return RecallOut(hits=[RecallHitOut.of(hit) for hit in hits])

    @app.post(
        "/v1/snapshots/{scope}",
        response_model=PublishOut,
        tags=["snapshots"],
        responses={
            **_responses(
                401, 409, 422, 503, s409="If-Match names a generation that is not current (nothing was published)"
            ),
            200: {
                "description": "the current generation after the call (advanced: false when it was already current)",
                "headers": {"ETag": {"schema": {"type": "string"}, "description": "the generation id, quoted"}},
            },
        },
    )
    async def publish_snapshot(
        scope: str,
        user_id: Owner,
        response: Response,
        body: PublishIn | None = None,
        if_match: Annotated[
            str | None,
            Header(alias="If-Match", description="publish only if this generation id (or none) is current"),
        ] = None,
    ) -> PublishOut:
        """Publish the current generation of one of the token owner's scopes (docs/SNAPSHOTS.md)."""
        options = body or PublishIn()
        result = await client.publish_snapshot(
            scope,
            user_id=user_id,
            max_items=options.max_items,
            max_bytes=options.max_bytes,
            expected_generation_id=_if_match(if_match),
        )
        response.headers["ETag"] = _etag(result.generation_id)
        return PublishOut.of(result)

    @app.get(
        "/v1/snapshots/{scope}",
        response_model=SnapshotOut,
        tags=["snapshots"],
        responses={
            **_responses(401, 404, 422, 503, s404="the scope was never published by the token's owner"),
            200: {
                "description": "the current generation, verified against its id",
                "headers": {"ETag": {"schema": {"type": "string"}, "description": "the generation id, quoted"}},
            },
        },
    )
    async def current_snapshot(scope: str, user_id: Owner, response: Response) -> SnapshotOut:
        """The current generation of one of the token owner's scopes."""
        snapshot = await client.current_snapshot(scope, user_id=user_id)
        response.headers["ETag"] = _etag(snapshot.generation_id)
        return SnapshotOut.of(snapshot)

    @app.get("/v1/prompt", response_model=PromptOut, tags=["snapshots"], responses=_responses(401, 422, 503))
    async def assemble_prompt(
        user_id: Owner,
        scope: Annotated[list[str], Query(min_length=1, max_length=100, description="scopes, most important first")],
        budget_bytes: Annotated[int, Query(ge=1, le=16777216, description="the prompt's size limit in bytes")],
    ) -> PromptOut:
        """Prompt text from the current generation of each scope, within budget_bytes."""
        return PromptOut.of(await client.assemble_prompt(scope, user_id=user_id, budget_bytes=budget_bytes))

    @app.post(
        "/v1/nodes/{node_id}/outcomes",
        status_code=201,
        response_model=OutcomeOut,
        tags=["maintenance"],
        responses={
            **_responses(401, 404, 409, 422, 503),
            201: {"description": "the outcome was recorded"},
            200: {
                "description": "a replay: the Idempotency-Key already recorded this outcome (nothing written)",
                "model": OutcomeOut,
                "headers": {"Idempotent-Replayed": {"schema": {"type": "string", "enum": ["true"]}}},
            },
        },
    )
    async def record_outcome(
        node_id: UUID,
        body: OutcomeIn,
        user_id: Owner,
        response: Response,
        idempotency_key: Annotated[
            UUID | None, Header(alias="Idempotency-Key", description="a UUID; becomes the request_id")
        ] = None,
    ) -> OutcomeOut:
        """Record what happened when a memory was used (docs/MAINTENANCE.md); the memory is not changed."""
        outcome = await client.record_outcome(
            node_id,
            body.outcome,
            user_id=user_id,
            evidence_id=body.evidence_id,
            profile_id=body.profile_id,
            thread_id=body.thread_id,
            notes=body.notes,
            request_id=idempotency_key,
        )
        if outcome.replayed:
            response.status_code = 200
            response.headers["Idempotent-Replayed"] = "true"
        return OutcomeOut.of(outcome)

    @app.get(
        "/v1/nodes/{node_id}/outcomes/summary",
        response_model=OutcomeSummaryOut,
        tags=["maintenance"],
        responses=_responses(401, 404, 422, 503),
    )
    async def outcome_summary(node_id: UUID, user_id: Owner) -> OutcomeSummaryOut:
        """A memory's outcome counts, score and suggested stability."""
        return OutcomeSummaryOut.of(await client.outcome_summary(node_id, user_id=user_id))

    @app.get(
        "/v1/maintenance/report",
        response_model=ReportOut,
        tags=["maintenance"],
        responses=_responses(401, 422, 503),
    )
    async def maintenance_report(
        user_id: Owner,
        as_of: Annotated[datetime | None, Query(description="compute as of this time (default now)")] = None,
    ) -> ReportOut:
        """What maintenance recommends for the token owner's memories; changes nothing."""
        rows = await client.maintenance_report(user_id=user_id, as_of=as_of)
        return ReportOut(recommendations=[RecommendationOut.of(row) for row in rows])

    @app.post(
        "/v1/maintenance/patches",
        status_code=201,
        response_model=PatchOut,
        tags=["maintenance"],
        responses=_responses(401, 422, 503),
    )
    async def maintenance_patch(user_id: Owner, body: PatchIn | None = None) -> PatchOut:
        """Store the actionable recommendations as a patch for review; changes no memory."""
        return PatchOut.of(await client.maintenance_patch(user_id=user_id, as_of=body.as_of if body else None))

    @app.get(
        "/v1/maintenance/patches/{patch_id}",
        response_model=PatchOut,
        tags=["maintenance"],
        responses=_responses(401, 404, 422, 503, s404="no such patch of the token's owner"),
    )
    async def get_patch(patch_id: UUID, user_id: Owner) -> PatchOut:
        """A stored patch with each op's status."""
        return PatchOut.of(await client.get_patch(patch_id, user_id=user_id))

    @app.post(
        "/v1/maintenance/patches/{patch_id}/apply",
        response_model=ApplyOut,
        tags=["maintenance"],
        responses=_responses(
            401, 404, 422, 503, s404="no such patch of the token's owner, or an op id not in the patch"
        ),
    )
    async def apply_patch(patch_id: UUID, user_id: Owner, body: ApplyIn | None = None) -> ApplyOut:
        """Apply ops of a patch: manual (exactly op_ids) or auto (decay and unreviewed increases); each op once."""
        options = body or ApplyIn()
        results = await client.apply_patch(patch_id, options.op_ids, user_id=user_id, mode=options.mode)
        return ApplyOut(patch_id=patch_id, results=[AppliedOpOut.of(row) for row in results])

    @app.post(
        "/v1/corrections",
        status_code=201,
        response_model=CorrectionLinkOut,
        tags=["maintenance"],
        responses={**_responses(401, 422, 503), 201: {"description": "linked, or put in the correction inbox"}},
    )
    async def link_correction(body: CorrectionIn, user_id: Owner) -> CorrectionLinkOut:
        """Link a correction message to the one active candidate memory it overlaps (an explicit_correction
        is appended), or put it in the correction inbox when it matches none or several."""
        link = await client.link_correction(
            body.message, body.candidate_node_ids, user_id=user_id, thread_id=body.thread_id
        )
        return CorrectionLinkOut.of(link)

    @app.post(
        "/v1/corrections/detect",
        response_model=DetectOut,
        tags=["maintenance"],
        responses=_responses(401, 422, 503),
    )
    async def is_correction(body: DetectIn, user_id: Owner) -> DetectOut:
        """Does a message use explicit correction phrasing ("don't …", "no, …", "actually …")? Reads nothing."""
        return DetectOut(is_correction=await client.is_correction(body.message))

    @app.get(
        "/v1/corrections/inbox",
        response_model=InboxOut,
        tags=["maintenance"],
        responses=_responses(401, 422, 503),
    )
    async def list_correction_inbox(
        user_id: Owner,
        include_resolved: Annotated[bool, Query(description="also the linked and dismissed entries")] = False,
        max_count: Annotated[int, Query(description="1 to 10000")] = 100,
    ) -> InboxOut:
        """The token owner's corrections that matched no memory or several, oldest first."""
        entries = await client.list_correction_inbox(
            user_id=user_id, include_resolved=include_resolved, max_count=max_count
        )
        return InboxOut(entries=[InboxEntryOut.of(entry) for entry in entries])

    @app.post(
        "/v1/corrections/inbox/{inbox_id}/resolve",
        response_model=InboxEntryOut,
        tags=["maintenance"],
        responses=_responses(
            401,
            404,
            409,
            422,
            503,
            s404="no such inbox entry of the token's owner, or the memory is unavailable",
            s409="the entry was already resolved otherwise",
        ),
    )
    async def resolve_correction(inbox_id: UUID, user_id: Owner, body: ResolveIn | None = None) -> InboxEntryOut:
        """Link an inbox entry to a memory (appending its explicit_correction), or dismiss it (node_id null)."""
        node_id = body.node_id if body else None
        return InboxEntryOut.of(await client.resolve_correction(inbox_id, node_id, user_id=user_id))

    @app.post(
        "/v1/nodes/{node_id}/review",
        response_model=NodeOut,
        tags=["maintenance"],
        responses=_responses(401, 404, 422, 503),
    )
    async def mark_reviewed(node_id: UUID, user_id: Owner, body: ReviewIn | None = None) -> NodeOut:
        """Record a review: a new next_review_at (resets decay) and every outcome so far counts as seen."""
        next_review_at = body.next_review_at if body else None
        return NodeOut.of(await client.mark_reviewed(node_id, user_id=user_id, next_review_at=next_review_at))

    @app.get(
        "/v1/maintenance/settings",
        response_model=SettingsOut,
        tags=["maintenance"],
        responses=_responses(401, 422, 503),
    )
    async def get_maintenance_settings(user_id: Owner) -> SettingsOut:
        """The effective review cadence and decay per overdue cycle for each stability."""
        settings = await client.get_maintenance_settings(user_id=user_id)
        return SettingsOut(settings=[SettingOut.of(s) for s in settings])

    @app.put(
        "/v1/maintenance/settings/{stability}",
        response_model=SettingsOut,
        tags=["maintenance"],
        responses=_responses(401, 422, 503),
    )
    async def set_maintenance_setting(
        stability: Literal["low", "semi-stable", "stable"], body: SettingIn, user_id: Owner
    ) -> SettingsOut:
        """Override the review cadence and decay of one stability for the token owner."""
        settings = await client.set_maintenance_setting(
            stability, user_id=user_id, review_cadence=body.review_cadence, decay_per_cycle=body.decay_per_cycle
        )
        return SettingsOut(settings=[SettingOut.of(s) for s in settings])

    @app.delete(
        "/v1/maintenance/settings",
        response_model=SettingsOut,
        tags=["maintenance"],
        responses=_responses(401, 422, 503),
    )
    async def reset_maintenance_settings(user_id: Owner) -> SettingsOut:
        """Remove the token owner's overrides: the defaults apply again."""
        settings = await client.reset_maintenance_settings(user_id=user_id)
        return SettingsOut(settings=[SettingOut.of(s) for s in settings])

    @app.post(
        "/api/v2/operations",
        status_code=202,
        response_model=ReceiptOut,
        tags=["ledger"],
        responses={
            **_responses(
                401,
                404,
                409,
                422,
                503,
                s404="a dependency is not an operation of the token's owner (nothing stored)",
                s409="operation_id was already used for another operation (nothing changed)",
            ),
            202: {"description": "accepted: the operation is durably in the ledger (created: true)"},
            200: {"description": "the same operation was submitted before: its stored receipt", "model": ReceiptOut},
        },
    )
    async def submit_operation(body: OperationIn, user_id: Owner, response: Response) -> ReceiptOut:
        """Hand a write to the ledger (docs/LEDGER.md). A retry with the same operation_id and
        payload_hash is answered with the stored receipt."""
        receipt = await client.submit_operation(
            body.operation_id,
            body.kind,
            body.payload,
            user_id=user_id,
            dependencies=body.dependencies,
            payload_hash=body.payload_hash,
            schema_version=body.schema_version,
        )
        if not receipt.created:
            response.status_code = 200
        return ReceiptOut.of(receipt)

    @app.get(
        "/api/v2/operations/{operation_id}",
        response_model=ReceiptOut,
        tags=["ledger"],
        responses=_responses(401, 404, 422, 503, s404="no such operation of the token's owner"),
    )
    async def get_receipt(operation_id: UUID, user_id: Owner) -> ReceiptOut:
        """The receipt of an operation as it stands now."""
        return ReceiptOut.of(await client.get_receipt(operation_id, user_id=user_id))

    async def _stream(
        user_id: str, operation_id: UUID | None, after_seq: int, max_seconds: float
    ) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_seconds
        yield ": prme-pg operation events\n\n"
        while True:
            events = await client.operation_events(
                user_id=user_id, after_seq=after_seq, operation_id=operation_id, max_count=STREAM_BATCH
            )
            for event in events:
                yield _sse(event)
                after_seq = event.seq
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            if len(events) < STREAM_BATCH:
                await asyncio.sleep(min(POLL_SECONDS, remaining))

    def _event_stream(user_id: str, operation_id: UUID | None, after_seq: int, max_seconds: float) -> StreamingResponse:
        return StreamingResponse(
            _stream(user_id, operation_id, after_seq, max_seconds),
            media_type=EVENT_STREAM,
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.get(
        "/api/v2/operations/{operation_id}/events",
        response_class=StreamingResponse,
        tags=["ledger"],
        responses=_stream_responses(),
    )
    async def operation_events(
        operation_id: UUID,
        user_id: Owner,
        after: After = 0,
        max_seconds: MaxSeconds = 30,
        last_event_id: LastEventId = None,
    ) -> StreamingResponse:
        """The events of one operation as Server-Sent Events (docs/LEDGER.md)."""
        start = _resume_after(last_event_id, after)
        await client.get_receipt(operation_id, user_id=user_id)  # 404 before the stream starts
        return _event_stream(user_id, operation_id, start, max_seconds)

    @app.get("/api/v2/events", response_class=StreamingResponse, tags=["ledger"], responses=_stream_responses())
    async def events(
        user_id: Owner,
        after: After = 0,
        max_seconds: MaxSeconds = 30,
        last_event_id: LastEventId = None,
    ) -> StreamingResponse:
        """The events of all the token owner's operations as Server-Sent Events, in seq order."""
        return _event_stream(user_id, None, _resume_after(last_event_id, after), max_seconds)

    return app
