"""Maintenance: outcomes, the report, patches, corrections and their inbox, reviews
and settings (docs/MAINTENANCE.md)."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from ..models import (
    AppliedOp,
    CorrectionInboxEntry,
    CorrectionLink,
    MaintenancePatch,
    MaintenanceRecommendation,
    MaintenanceSetting,
    Outcome,
    OutcomeSummary,
)
from .dependencies import Client, Owner
from .fields import LOCATION_HEADER, REPLAYED_HEADER, IdempotencyKey, Number
from .nodes import NodeOut
from .problems import problem_responses
from .strict_json import StrictJSONRoute

__all__ = ["router"]

router = APIRouter(route_class=StrictJSONRoute)


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
    stability_by_outcomes: str
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


@router.post(
    "/v1/nodes/{node_id}/outcomes",
    status_code=201,
    response_model=OutcomeOut,
    tags=["maintenance"],
    responses={
        **problem_responses(401, 404, 409, 422, 503),
        201: {"description": "the outcome was recorded"},
        200: {
            "description": "a replay: the Idempotency-Key already recorded this outcome (nothing written)",
            "model": OutcomeOut,
            "headers": REPLAYED_HEADER,
        },
    },
)
async def record_outcome(
    node_id: UUID,
    body: OutcomeIn,
    user_id: Owner,
    client: Client,
    response: Response,
    idempotency_key: IdempotencyKey = None,
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


@router.get(
    "/v1/nodes/{node_id}/outcomes/summary",
    response_model=OutcomeSummaryOut,
    tags=["maintenance"],
    responses=problem_responses(401, 404, 422, 503),
)
async def outcome_summary(node_id: UUID, user_id: Owner, client: Client) -> OutcomeSummaryOut:
    """A memory's outcome counts, score and suggested stability."""
    return OutcomeSummaryOut.of(await client.outcome_summary(node_id, user_id=user_id))


@router.get(
    "/v1/maintenance/report",
    response_model=ReportOut,
    tags=["maintenance"],
    responses=problem_responses(401, 422, 503),
)
async def maintenance_report(
    user_id: Owner,
    client: Client,
    as_of: Annotated[datetime | None, Query(description="compute as of this time (default now)")] = None,
) -> ReportOut:
    """What maintenance recommends for the token owner's memories; changes nothing."""
    rows = await client.maintenance_report(user_id=user_id, as_of=as_of)
    return ReportOut(recommendations=[RecommendationOut.of(row) for row in rows])


@router.post(
    "/v1/maintenance/patches",
    status_code=201,
    response_model=PatchOut,
    tags=["maintenance"],
    responses={
        **problem_responses(401, 415, 422, 503),
        201: {"description": "the stored patch", "headers": LOCATION_HEADER},
    },
)
async def maintenance_patch(
    user_id: Owner, client: Client, response: Response, body: PatchIn | None = None
) -> PatchOut:
    """Store the actionable recommendations as a patch for review; changes no memory. ``Location`` is its URL."""
    patch = await client.maintenance_patch(user_id=user_id, as_of=body.as_of if body else None)
    response.headers["Location"] = f"/v1/maintenance/patches/{patch.patch_id}"
    return PatchOut.of(patch)


@router.get(
    "/v1/maintenance/patches/{patch_id}",
    response_model=PatchOut,
    tags=["maintenance"],
    responses=problem_responses(401, 404, 422, 503, s404="no such patch of the token's owner"),
)
async def get_patch(patch_id: UUID, user_id: Owner, client: Client) -> PatchOut:
    """A stored patch with each op's status."""
    return PatchOut.of(await client.get_patch(patch_id, user_id=user_id))


@router.post(
    "/v1/maintenance/patches/{patch_id}/apply",
    response_model=ApplyOut,
    tags=["maintenance"],
    responses=problem_responses(
        401, 404, 422, 503, s404="no such patch of the token's owner, or an op id not in the patch"
    ),
)
async def apply_patch(patch_id: UUID, user_id: Owner, client: Client, body: ApplyIn | None = None) -> ApplyOut:
    """Apply ops of a patch: manual (exactly op_ids) or auto (decay and unreviewed increases); each op once."""
    options = body or ApplyIn()
    results = await client.apply_patch(patch_id, options.op_ids, user_id=user_id, mode=options.mode)
    return ApplyOut(patch_id=patch_id, results=[AppliedOpOut.of(row) for row in results])


@router.post(
    "/v1/corrections",
    status_code=201,
    response_model=CorrectionLinkOut,
    tags=["maintenance"],
    responses={**problem_responses(401, 422, 503), 201: {"description": "linked, or put in the correction inbox"}},
)
async def link_correction(body: CorrectionIn, user_id: Owner, client: Client) -> CorrectionLinkOut:
    """Link a correction message to the one active candidate memory it overlaps (an explicit_correction
    is appended), or put it in the correction inbox when it matches none or several."""
    link = await client.link_correction(
        body.message, body.candidate_node_ids, user_id=user_id, thread_id=body.thread_id
    )
    return CorrectionLinkOut.of(link)


@router.post(
    "/v1/corrections/detect",
    response_model=DetectOut,
    tags=["maintenance"],
    responses=problem_responses(401, 422, 503),
)
async def is_correction(body: DetectIn, user_id: Owner, client: Client) -> DetectOut:
    """Does a message use explicit correction phrasing ("don't …", "no, …", "actually …")? Reads nothing."""
    return DetectOut(is_correction=await client.is_correction(body.message))


@router.get(
    "/v1/corrections/inbox",
    response_model=InboxOut,
    tags=["maintenance"],
    responses=problem_responses(401, 422, 503),
)
async def list_correction_inbox(
    user_id: Owner,
    client: Client,
    include_resolved: Annotated[bool, Query(description="also the linked and dismissed entries")] = False,
    max_count: Annotated[int, Query(description="1 to 10000")] = 100,
) -> InboxOut:
    """The token owner's corrections that matched no memory or several, oldest first."""
    entries = await client.list_correction_inbox(
        user_id=user_id, include_resolved=include_resolved, max_count=max_count
    )
    return InboxOut(entries=[InboxEntryOut.of(entry) for entry in entries])


@router.post(
    "/v1/corrections/inbox/{inbox_id}/resolve",
    response_model=InboxEntryOut,
    tags=["maintenance"],
    responses=problem_responses(
        401,
        404,
        409,
        422,
        503,
        s404="no such inbox entry of the token's owner, or the memory is unavailable",
        s409="the entry was already resolved otherwise",
    ),
)
async def resolve_correction(
    inbox_id: UUID, user_id: Owner, client: Client, body: ResolveIn | None = None
) -> InboxEntryOut:
    """Link an inbox entry to a memory (appending its explicit_correction), or dismiss it (node_id null)."""
    node_id = body.node_id if body else None
    return InboxEntryOut.of(await client.resolve_correction(inbox_id, node_id, user_id=user_id))


@router.post(
    "/v1/nodes/{node_id}/review",
    response_model=NodeOut,
    tags=["maintenance"],
    responses=problem_responses(401, 404, 422, 503),
)
async def mark_reviewed(node_id: UUID, user_id: Owner, client: Client, body: ReviewIn | None = None) -> NodeOut:
    """Record a review: a new next_review_at (resets decay) and every outcome so far counts as seen."""
    next_review_at = body.next_review_at if body else None
    return NodeOut.of(await client.mark_reviewed(node_id, user_id=user_id, next_review_at=next_review_at))


@router.get(
    "/v1/maintenance/settings",
    response_model=SettingsOut,
    tags=["maintenance"],
    responses=problem_responses(401, 422, 503),
)
async def get_maintenance_settings(user_id: Owner, client: Client) -> SettingsOut:
    """The effective review cadence and decay per overdue cycle for each stability."""
    settings = await client.get_maintenance_settings(user_id=user_id)
    return SettingsOut(settings=[SettingOut.of(s) for s in settings])


@router.put(
    "/v1/maintenance/settings/{stability}",
    response_model=SettingsOut,
    tags=["maintenance"],
    responses=problem_responses(401, 422, 503),
)
async def set_maintenance_setting(
    stability: Literal["low", "semi-stable", "stable"], body: SettingIn, user_id: Owner, client: Client
) -> SettingsOut:
    """Override the review cadence and decay of one stability for the token owner."""
    settings = await client.set_maintenance_setting(
        stability, user_id=user_id, review_cadence=body.review_cadence, decay_per_cycle=body.decay_per_cycle
    )
    return SettingsOut(settings=[SettingOut.of(s) for s in settings])


@router.delete(
    "/v1/maintenance/settings",
    response_model=SettingsOut,
    tags=["maintenance"],
    responses=problem_responses(401, 422, 503),
)
async def reset_maintenance_settings(user_id: Owner, client: Client) -> SettingsOut:
    """Remove the token owner's overrides: the defaults apply again."""
    settings = await client.reset_maintenance_settings(user_id=user_id)
    return SettingsOut(settings=[SettingOut.of(s) for s in settings])
