"""The operations ledger (/api/v2, docs/LEDGER.md): submit an operation, read its
receipt, follow operation events as Server-Sent Events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from psycopg_pool import PoolTimeout
from pydantic import BaseModel, ConfigDict, Field

from ..aio import AsyncMemoryClient
from ..models import LedgerStatus, OperationEvent, Receipt
from ..sqlstate import describe
from ..tokens import ParsedToken
from .dependencies import Client, Owner, Token
from .fields import LOCATION_HEADER
from .problems import problem_responses
from .sse import EVENT_STREAM, After, LastEventId, MaxSeconds, event_stream, message, resume_after
from .strict_json import StrictJSONRoute

__all__ = ["router"]

router = APIRouter(route_class=StrictJSONRoute)

# A stream polls for new events every POLL_SECONDS, STREAM_BATCH events per query.
POLL_SECONDS = 0.5
STREAM_BATCH = 1000

_STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    **problem_responses(401, 404, 422, 503, s404="no such operation of the token's owner"),
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


class LedgerBacklog(BaseModel):
    """The ledger's backlog across owners: counts and one age, nothing of any one owner (docs/LEDGER.md)."""

    accepting: bool = Field(description="this server accepts submits (not a read-only standby)")
    ready: int = Field(description="accepted operations waiting for the executor")
    blocked: int = Field(description="operations waiting for their dependencies")
    processing: int = Field(description="operations claimed or being retried")
    pending: int = Field(description="ready + blocked + processing")
    oldest_ready_at: datetime | None
    oldest_ready_age_seconds: float | None = Field(description="age of the oldest unfinished claimable operation")

    @classmethod
    def of(cls, status: LedgerStatus) -> LedgerBacklog:
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


def _message(event: OperationEvent) -> str:
    """One operation event as a Server-Sent Events message."""
    data = {
        "seq": event.seq,
        "operation_id": str(event.operation_id),
        "operation_seq": event.operation_seq,
        "state": event.state,
        "detail": event.detail,
        "created_at": event.created_at.isoformat(),
    }
    return message(event.seq, "operation", data)


async def _poll(
    client: AsyncMemoryClient,
    token: ParsedToken,
    operation_id: UUID | None,
    after_seq: int,
    max_seconds: float,
    recheck_seconds: float,
) -> AsyncIterator[str]:
    """History after after_seq, then new events as they are polled, until max_seconds have passed.

    The token is checked again every ``recheck_seconds``: a stream opened before its token
    was revoked ends within that long, with an ``error`` event (status 401) as its last."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_seconds
    recheck_at = loop.time() + recheck_seconds
    yield ": prme-pg operation events\n\n"
    try:
        while True:
            try:
                events = await client.operation_events(
                    user_id=token.user_id, after_seq=after_seq, operation_id=operation_id, max_count=STREAM_BATCH
                )
            except psycopg.errors.ObjectInUse:
                # 55006 from a PL/Proxy tier: the owner is being moved to another shard
                # (docs/SCALING.md). The stream waits for the move and goes on from there.
                events = []
            for event in events:
                yield _message(event)
                after_seq = event.seq
            now = loop.time()
            if now >= recheck_at:
                recheck_at = now + recheck_seconds
                if not await client.authenticate_api_token(token.user_id, token.sha256):
                    yield message(after_seq, "error", {"status": 401, "detail": "the bearer token was revoked"})
                    return
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            if len(events) < STREAM_BATCH:
                await asyncio.sleep(min(POLL_SECONDS, remaining, max(0.0, recheck_at - loop.time())))
    except (psycopg.Error, PoolTimeout) as exc:  # the response has started: say so in the stream, then end it
        detail = f"the database is unavailable: {describe(exc)}"
        yield message(after_seq, "error", {"status": 503, "detail": detail})


@router.post(
    "/api/v2/operations",
    status_code=202,
    response_model=ReceiptOut,
    tags=["ledger"],
    responses={
        **problem_responses(
            401,
            404,
            409,
            422,
            503,
            s404="a dependency is not an operation of the token's owner (nothing stored)",
            s409="operation_id was already used for another operation (nothing changed)",
        ),
        202: {
            "description": "accepted: the operation is durably in the ledger (created: true); Location is its receipt",
            "headers": LOCATION_HEADER,
        },
        200: {"description": "the same operation was submitted before: its stored receipt", "model": ReceiptOut},
    },
)
async def submit_operation(body: OperationIn, user_id: Owner, client: Client, response: Response) -> ReceiptOut:
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
    if receipt.created:
        response.headers["Location"] = f"/api/v2/operations/{receipt.operation_id}"
    else:
        response.status_code = 200
    return ReceiptOut.of(receipt)


@router.get(
    "/api/v2/operations/{operation_id}",
    response_model=ReceiptOut,
    tags=["ledger"],
    responses=problem_responses(401, 404, 422, 503, s404="no such operation of the token's owner"),
)
async def get_receipt(operation_id: UUID, user_id: Owner, client: Client) -> ReceiptOut:
    """The receipt of an operation as it stands now."""
    return ReceiptOut.of(await client.get_receipt(operation_id, user_id=user_id))


@router.get(
    "/api/v2/operations/{operation_id}/events",
    response_class=StreamingResponse,
    tags=["ledger"],
    responses=_STREAM_RESPONSES,
)
async def operation_events(
    operation_id: UUID,
    token: Token,
    client: Client,
    request: Request,
    after: After = 0,
    max_seconds: MaxSeconds = 30,
    last_event_id: LastEventId = None,
) -> StreamingResponse:
    """The events of one operation as Server-Sent Events (docs/LEDGER.md)."""
    start = resume_after(last_event_id, after)
    await client.get_receipt(operation_id, user_id=token.user_id)  # 404 before the stream starts
    recheck = request.app.state.limits.token_recheck_seconds
    return event_stream(_poll(client, token, operation_id, start, max_seconds, recheck))


@router.get("/api/v2/events", response_class=StreamingResponse, tags=["ledger"], responses=_STREAM_RESPONSES)
async def events(
    token: Token,
    client: Client,
    request: Request,
    after: After = 0,
    max_seconds: MaxSeconds = 30,
    last_event_id: LastEventId = None,
) -> StreamingResponse:
    """The events of all the token owner's operations as Server-Sent Events, in seq order."""
    recheck = request.app.state.limits.token_recheck_seconds
    return event_stream(_poll(client, token, None, resume_after(last_event_id, after), max_seconds, recheck))


@router.get("/api/v2/ledger", response_model=LedgerBacklog, tags=["ledger"], responses=problem_responses(401, 503))
async def ledger_backlog(_: Owner, client: Client) -> LedgerBacklog:
    """The executor's backlog across owners (counts and one age; no owner's operations): what
    GET /ready showed before it answered without a token."""
    return LedgerBacklog.of(await client.ledger_status())
