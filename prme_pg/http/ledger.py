"""The operations ledger (/api/v2, docs/LEDGER.md): submit an operation, read its
receipt, follow operation events as Server-Sent Events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

import psycopg
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials
from psycopg_pool import PoolTimeout
from pydantic import BaseModel, ConfigDict, Field

from ..aio import AsyncMemoryClient
from ..errors import InvalidInput, NotFoundError
from ..models import LedgerStatus, OperationEvent, Receipt
from ..tokens import ParsedToken
from ..validation import LEDGER_KINDS, OPERATION_ID_PATTERN
from .dependencies import Client, Owner, bearer, current_token
from .fields import LOCATION_HEADER
from .gate import trusted_of
from .problems import problem_responses, unavailable_detail
from .sse import EVENT_STREAM, After, LastEventId, MaxSeconds, event_stream, message, resume_after
from .strict_json import StrictJSONRoute

__all__ = ["router"]

router = APIRouter(route_class=StrictJSONRoute)

# A stream polls for new events every POLL_SECONDS, STREAM_BATCH events per query.
POLL_SECONDS = 0.5
STREAM_BATCH = 1000

#: The reference protocol's event name (docs/LEDGER.md, "Compatibility").
EVENT_NAME = "operation_state"

OperationId = Annotated[
    str,
    Field(
        pattern=OPERATION_ID_PATTERN,
        description="1 to 128 characters of A-Z a-z 0-9 . _ : - (a UUID is one; stored in lowercase)",
    ),
]

_EVENT_DATA = (
    "`data:` a JSON object {operation_id, sequence, from_state, to_state, detail, executor_generation, "
    "occurred_at, seq} (the reference protocol's event, plus seq, the owner's stream position)"
)
_STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    **problem_responses(401, 404, 422, 503, s404="no such operation of the caller's owner"),
    200: {
        "description": (
            "Server-Sent Events, one per state change: `event: operation_state`, `id:` the operation's "
            f"event sequence, {_EVENT_DATA}. History first, then live events, until max_seconds have passed. "
            "Reconnect with Last-Event-ID (or ?after=) to resume with no gap and no duplicate."
        ),
        "content": {EVENT_STREAM: {"schema": {"type": "string"}}},
    },
}
_OWNER_STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    **_STREAM_RESPONSES,
    200: {
        "description": (
            "Server-Sent Events of all the owner's operations, in seq order: `event: operation_state`, `id:` "
            f"the event's seq (the owner's stream position), {_EVENT_DATA}. Resume with Last-Event-ID (or ?after=)."
        ),
        "content": {EVENT_STREAM: {"schema": {"type": "string"}}},
    },
}


class OperationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    operation_id: OperationId = Field(description="caller-generated and stable: a retry reuses it")
    schema_version: int = Field(ge=-(2**31), le=2**31 - 1, description="must be 2")
    kind: str = Field(
        description="one of the operation kinds (docs/LEDGER.md)", json_schema_extra={"enum": list(LEDGER_KINDS)}
    )
    dependencies: list[OperationId] = Field(
        default_factory=list, description="operations this one waits for (submitted before it or not)"
    )
    payload_hash: str = Field(description="sha256 hex of the payload's RFC 8785 canonical form")
    payload: dict[str, Any]


class ReceiptOut(BaseModel):
    """The reference protocol's receipt (docs/LEDGER.md, "Compatibility"), and prme's own fields
    after it: error_detail, attempts, created."""

    operation_id: str
    schema_version: Literal[2] = 2
    kind: str
    payload_hash: str
    dependencies: list[str] = Field(description="in the order submitted")
    state: str = Field(description="accepted, blocked, processing, committed or rejected")
    blocked_by: list[str] = Field(description="sorted")
    result: Any = Field(default=None, description="set once committed")
    error: str | None = Field(
        default=None,
        description="the reason code once rejected, and while a transient failure is retried (else null)",
    )
    executor_generation: int = Field(description="the executor's tries of this operation so far (attempts)")
    executor_progress_seq: int = Field(description="progress_seq: prme's executor has no sequence of its own")
    executor_exit_count: int = Field(default=0, description="always 0: prme's executor runs in the database")
    executor_last_exit: str | None = Field(default=None, description="always null (as executor_exit_count)")
    executor_error: str | None = Field(default=None, description="always null (as executor_exit_count)")
    progress_seq: int = Field(description="the sequence of the operation's newest event: advances with each")
    created_at: datetime
    updated_at: datetime
    error_detail: dict[str, Any] | None = Field(
        default=None, description="prme: the error in full (reason, message, sqlstate, detail, ...)"
    )
    attempts: int = Field(description="prme: the executor's tries")
    created: bool = Field(description="prme: true only for the submit that accepted the operation")

    @classmethod
    def of(cls, receipt: Receipt) -> ReceiptOut:
        error = receipt.error if isinstance(receipt.error, dict) else None
        reason = error.get("reason") if error is not None else None
        return cls(
            operation_id=receipt.operation_id,
            kind=receipt.kind,
            payload_hash=receipt.payload_hash,
            dependencies=list(receipt.dependencies),
            state=receipt.state,
            blocked_by=list(receipt.blocked_by),
            result=receipt.result,
            error=reason if isinstance(reason, str) else None if error is None else "error",
            executor_generation=receipt.attempts,
            executor_progress_seq=receipt.progress_seq,
            progress_seq=receipt.progress_seq,
            created_at=receipt.created_at,
            updated_at=receipt.updated_at,
            error_detail=error,
            attempts=receipt.attempts,
            created=receipt.created,
        )


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


# -- who asks: a token's owner, or (trusted loopback mode) the payload's or the default ---------


@dataclass(frozen=True, slots=True)
class Caller:
    """The owner a ledger request acts for; ``token`` is None in trusted loopback mode."""

    user_id: str
    token: ParsedToken | None


async def _caller(
    request: Request,
    client: Client,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    user_id: Annotated[
        str | None,
        Query(description="trusted loopback mode only: the owner to read for (default: --default-user)"),
    ] = None,
) -> Caller:
    trusted = trusted_of(request.state)
    if trusted is None:
        if user_id is not None:
            raise InvalidInput("user_id is taken in trusted loopback mode only: a token names its owner")
        token = await current_token(request, client, credentials)
        return Caller(token.user_id, token)
    owner = user_id if user_id is not None else trusted.default_user
    if owner is None:
        raise NotFoundError("operation not found: no owner named (?user_id=) and the server has no --default-user")
    return Caller(owner, None)


LedgerCaller = Annotated[Caller, Depends(_caller)]


def _submitter(request: Request, body: OperationIn, owner: str | None) -> str:
    """Who a submit acts for: the token's owner; in trusted mode the payload's user_id (add_memory)
    or the default owner."""
    if owner is not None:
        return owner
    trusted = trusted_of(request.state)
    named = body.payload.get("user_id") if body.kind == "add_memory" else None
    if isinstance(named, str):
        return named
    if trusted is not None and trusted.default_user is not None:
        return trusted.default_user
    raise InvalidInput("the payload names no owner (user_id) and the server has no --default-user")


# -- events in the reference protocol's shape ------------------------------------------------------


@dataclass(slots=True)
class _Seen:
    """What a stream knows of one operation: its state and executor generation after its last event."""

    state: str | None = None
    generation: int = 0
    operation_seq: int = 0


def _advance(seen: _Seen, event: OperationEvent) -> dict[str, Any]:
    """The reference protocol's data of ``event`` (from_state from what came before it)."""
    if event.state == "processing" and isinstance(event.detail.get("attempt"), int):
        seen.generation = event.detail["attempt"]
    data = {
        "operation_id": event.operation_id,
        "sequence": event.operation_seq,
        "from_state": seen.state,
        "to_state": event.state,
        "detail": event.detail,
        "executor_generation": seen.generation,
        "occurred_at": event.created_at.isoformat(),
        "seq": event.seq,
    }
    seen.state, seen.operation_seq = event.state, event.operation_seq
    return data


async def _history(client: AsyncMemoryClient, user_id: str, operation_id: str, before: int) -> _Seen:
    """What a stream that starts in the middle of an operation's events knows of its earlier ones."""
    seen = _Seen()
    for event in await client.operation_events(user_id=user_id, operation_id=operation_id, max_count=10000):
        if event.operation_seq >= before:
            break
        _advance(seen, event)
    return seen


async def _poll(
    client: AsyncMemoryClient,
    caller: Caller,
    operation_id: str | None,
    after: int,
    max_seconds: float,
    recheck_seconds: float,
) -> AsyncIterator[str]:
    """History after ``after``, then new events as they are polled, until max_seconds have passed.

    One operation's stream counts ``after`` and ids in its event sequence (1, 2, 3, ...), as the
    reference protocol does; the owner's stream in seq. A token is checked again every
    ``recheck_seconds``: a stream opened before its token was revoked ends within that long,
    with an ``error`` event (status 401) as its last."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_seconds
    recheck_at = loop.time() + recheck_seconds
    seen: dict[str, _Seen] = {}
    after_seq = 0 if operation_id is not None else after
    last_id = after
    yield ": prme-pg operation events\n\n"
    try:
        while True:
            try:
                events = await client.operation_events(
                    user_id=caller.user_id, after_seq=after_seq, operation_id=operation_id, max_count=STREAM_BATCH
                )
            except psycopg.errors.ObjectInUse:
                # 55006 from a PL/Proxy tier: the owner is being moved to another shard
                # (docs/SCALING.md). The stream waits for the move and goes on from there.
                events = []
            for event in events:
                after_seq = event.seq
                known = seen.get(event.operation_id)
                if known is None:
                    known = seen[event.operation_id] = (
                        _Seen()
                        if operation_id is not None or event.operation_seq == 1
                        else await _history(client, caller.user_id, event.operation_id, event.operation_seq)
                    )
                data = _advance(known, event)
                if operation_id is not None:
                    if event.operation_seq <= after:
                        continue
                    last_id = event.operation_seq
                else:
                    last_id = event.seq
                yield message(last_id, EVENT_NAME, data)
            now = loop.time()
            if now >= recheck_at:
                recheck_at = now + recheck_seconds
                token = caller.token
                if token is not None and not await client.authenticate_api_token(token.user_id, token.sha256):
                    yield message(last_id, "error", {"status": 401, "detail": "the bearer token was revoked"})
                    return
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            if len(events) < STREAM_BATCH:
                await asyncio.sleep(min(POLL_SECONDS, remaining, max(0.0, recheck_at - loop.time())))
    except (psycopg.Error, PoolTimeout) as exc:  # the response has started: say so in the stream, then end it
        detail, _ = unavailable_detail(exc)  # the reason is logged under the incident id, not sent
        yield message(last_id, "error", {"status": 503, "detail": detail})


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
            s404="the operation names itself as a dependency (nothing stored)",
            s409="operation_id was already used for another operation (nothing changed)",
        ),
        202: {
            "description": "accepted: the operation is durably in the ledger (created: true); Location is its receipt",
            "headers": LOCATION_HEADER,
        },
        200: {"description": "the same operation was submitted before: its stored receipt", "model": ReceiptOut},
    },
)
async def submit_operation(
    body: OperationIn,
    client: Client,
    request: Request,
    response: Response,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> ReceiptOut:
    """Hand a write to the ledger (docs/LEDGER.md). A retry with the same operation_id and
    payload_hash is answered with the stored receipt."""
    owner = (
        None if trusted_of(request.state) is not None else (await current_token(request, client, credentials)).user_id
    )
    user_id = _submitter(request, body, owner)
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
    responses=problem_responses(401, 404, 422, 503, s404="no such operation of the caller's owner"),
)
async def get_receipt(operation_id: str, caller: LedgerCaller, client: Client) -> ReceiptOut:
    """The receipt of an operation as it stands now."""
    return ReceiptOut.of(await client.get_receipt(operation_id, user_id=caller.user_id))


@router.get(
    "/api/v2/operations/{operation_id}/events",
    response_class=StreamingResponse,
    tags=["ledger"],
    responses=_STREAM_RESPONSES,
)
async def operation_events(
    operation_id: str,
    caller: LedgerCaller,
    client: Client,
    request: Request,
    after: After = 0,
    max_seconds: MaxSeconds = 30,
    last_event_id: LastEventId = None,
) -> StreamingResponse:
    """The events of one operation as Server-Sent Events (docs/LEDGER.md): ids and ``after``
    count the operation's event sequence."""
    start = resume_after(last_event_id, after)
    receipt = await client.get_receipt(operation_id, user_id=caller.user_id)  # 404 before the stream starts
    recheck = request.app.state.limits.token_recheck_seconds
    return event_stream(_poll(client, caller, receipt.operation_id, start, max_seconds, recheck))


@router.get("/api/v2/events", response_class=StreamingResponse, tags=["ledger"], responses=_OWNER_STREAM_RESPONSES)
async def events(
    caller: LedgerCaller,
    client: Client,
    request: Request,
    after: After = 0,
    max_seconds: MaxSeconds = 30,
    last_event_id: LastEventId = None,
) -> StreamingResponse:
    """The events of all the caller owner's operations as Server-Sent Events, in seq order."""
    recheck = request.app.state.limits.token_recheck_seconds
    return event_stream(_poll(client, caller, None, resume_after(last_event_id, after), max_seconds, recheck))


@router.get("/api/v2/ledger", response_model=LedgerBacklog, tags=["ledger"], responses=problem_responses(401, 503))
async def ledger_backlog(_: Owner, client: Client) -> LedgerBacklog:
    """The executor's backlog across owners (counts and one age; no owner's operations): what
    GET /ready showed before it answered without a token."""
    return LedgerBacklog.of(await client.ledger_status())
