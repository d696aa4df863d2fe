"""The reads a reviewer needs (the review console, docs/CONSOLE.md): find memories in
any lifecycle state, and one memory's journal verified record by record, its evidence
and its outcome events."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from ..journal import parse_record, verify_records
from ..models import JournalIssue, JournalRecord
from .dependencies import Client, Owner
from .fields import Number
from .maintenance import OutcomeOut
from .nodes import EventOut, NodeOut
from .problems import problem_responses
from .strict_json import StrictJSONRoute

__all__ = ["router"]

router = APIRouter(route_class=StrictJSONRoute)

Stability = Literal["low", "semi-stable", "stable"]
LifecycleState = Literal["active", "contested", "superseded", "deprecated", "archived"]
# A journal page's size: the verifier reads the chain from its first record on.
MAX_JOURNAL_RECORDS = 5000


class NodesOut(BaseModel):
    nodes: list[NodeOut]


class JournalProblemOut(BaseModel):
    node_version: int
    problem: str = Field(description="as prme.verify_journal names it, or non_canonical (docs/JOURNAL.md)")
    detail: str


class RecordProblemOut(BaseModel):
    problem: str
    detail: str


class JournalRecordOut(BaseModel):
    node_version: int
    record_version: int
    op: str
    operation_id: UUID
    request_id: UUID | None
    evidence_id: UUID | None
    checksum: str
    prev_checksum: str | None
    record: str = Field(description="the stored record text, exactly as hashed")
    recorded_at: str | None = Field(description="from the record; null when the text does not parse")
    confidence_base: Number | None = Field(description="after the mutation; null when the text does not parse")
    reinforcement_boost: Number | None = Field(description="after the mutation; null when the text does not parse")
    verified: bool = Field(description="no problem names this record")
    problems: list[RecordProblemOut]


class JournalOut(BaseModel):
    node_id: UUID
    version: int = Field(description="the memory's version (its newest record, when the chain is whole)")
    last_checksum: str = Field(description="the checksum the memory points at")
    complete: bool = Field(description="every record up to the memory's version is included (else: the oldest)")
    verified: bool = Field(description="the included chain verifies (and, when complete, ends where the memory points)")
    problems: list[JournalProblemOut] = Field(description="every problem, the head's included")
    records: list[JournalRecordOut] = Field(description="oldest first")


def _after(record: str) -> dict[str, Any]:
    """The record's after state and time, for the chart; empty when the text does not parse."""
    try:
        doc = parse_record(record)
    except ValueError:
        return {}
    after = doc.get("after") if isinstance(doc, dict) else None
    return after if isinstance(after, dict) else {}


def _record_out(record: JournalRecord, issues: list[JournalIssue]) -> JournalRecordOut:
    after = _after(record.record)
    mine = [
        RecordProblemOut(problem=i.problem, detail=i.detail) for i in issues if i.node_version == record.node_version
    ]
    return JournalRecordOut(
        node_version=record.node_version,
        record_version=record.record_version,
        op=record.op,
        operation_id=record.operation_id,
        request_id=record.request_id,
        evidence_id=record.evidence_id,
        checksum=record.checksum,
        prev_checksum=record.prev_checksum,
        record=record.record,
        recorded_at=after.get("updated_at") if isinstance(after.get("updated_at"), str) else None,
        confidence_base=after.get("confidence_base"),
        reinforcement_boost=after.get("reinforcement_boost"),
        verified=not mine,
        problems=mine,
    )


@router.get("/v1/nodes", response_model=NodesOut, tags=["review"], responses=problem_responses(401, 422, 503))
async def find_nodes(
    client: Client,
    user_id: Owner,
    q: Annotated[str | None, Query(description="words, matched as recall matches them; absent: every memory")] = None,
    scope: Annotated[list[str] | None, Query(max_length=100, description="only these scopes (repeat)")] = None,
    stability: Annotated[list[Stability] | None, Query(max_length=3, description="only these (repeat)")] = None,
    lifecycle_state: Annotated[list[LifecycleState] | None, Query(max_length=5, description="only these")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="at most this many")] = 50,
) -> NodesOut:
    """The token owner's memories in any lifecycle state: most query words first, then newest change."""
    nodes = await client.find_nodes(
        q, user_id=user_id, scopes=scope, stabilities=stability, lifecycle_states=lifecycle_state, max_count=limit
    )
    return NodesOut(nodes=[NodeOut.of(node) for node in nodes])


@router.get(
    "/v1/nodes/{node_id}/journal",
    response_model=JournalOut,
    tags=["review"],
    responses=problem_responses(401, 404, 422, 503),
)
async def node_journal(
    client: Client,
    node_id: UUID,
    user_id: Owner,
    limit: Annotated[int, Query(ge=1, le=MAX_JOURNAL_RECORDS, description="at most this many, oldest first")] = 1000,
) -> JournalOut:
    """One memory's journal, each record verified by Python's own verifier (prme_pg.journal)."""
    records, head = await client.node_journal(node_id, user_id=user_id, max_count=limit + 1)
    complete = len(records) <= limit
    records = records[:limit]
    # The head is checked only against a whole chain: a page's newest record is not the head.
    issues = verify_records(records, [head] if complete else None)
    return JournalOut(
        node_id=head.node_id,
        version=head.version,
        last_checksum=head.last_checksum,
        complete=complete,
        verified=not issues,
        problems=[JournalProblemOut(node_version=i.node_version, problem=i.problem, detail=i.detail) for i in issues],
        records=[_record_out(record, issues) for record in records],
    )


class EvidenceOut(BaseModel):
    events: list[EventOut]


@router.get(
    "/v1/nodes/{node_id}/evidence",
    response_model=EvidenceOut,
    tags=["review"],
    responses=problem_responses(401, 404, 422, 503),
)
async def node_evidence(
    client: Client,
    node_id: UUID,
    user_id: Owner,
    limit: Annotated[int, Query(ge=1, le=10000, description="at most this many, oldest first")] = 100,
) -> EvidenceOut:
    """The events a memory cites in evidence_refs, each once."""
    events = await client.node_evidence(node_id, user_id=user_id, max_count=limit)
    return EvidenceOut(events=[EventOut.of(event) for event in events])


class OutcomesOut(BaseModel):
    outcomes: list[OutcomeOut]


@router.get(
    "/v1/nodes/{node_id}/outcomes",
    response_model=OutcomesOut,
    tags=["review"],
    responses=problem_responses(401, 404, 422, 503),
)
async def node_outcomes(
    client: Client,
    node_id: UUID,
    user_id: Owner,
    limit: Annotated[int, Query(ge=1, le=10000, description="at most this many, newest first")] = 100,
) -> OutcomesOut:
    """A memory's outcome events, newest first."""
    outcomes = await client.node_outcomes(node_id, user_id=user_id, max_count=limit)
    return OutcomesOut(outcomes=[OutcomeOut.of(outcome) for outcome in outcomes])
