"""The HTTP API: FastAPI over :class:`~prme_pg.AsyncMemoryClient`.

Every route but ``/health`` needs ``Authorization: Bearer <token>``; a token acts
for exactly one owner (see :mod:`prme_pg.tokens`), so no route takes a user_id.
Errors are RFC 9457 problem+json whose ``type`` names the SQLSTATE. A retried
confirmation with the same ``Idempotency-Key`` counts once and is answered with
``Idempotent-Replayed: true``. Install with the ``http`` extra; serve with
``prme-pg serve``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any
from uuid import UUID

import psycopg
from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from psycopg_pool import PoolTimeout
from pydantic import BaseModel, ConfigDict, Field, PlainSerializer
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import __version__, migrations
from .aio import AsyncMemoryClient
from .errors import IdempotencyConflict, IntegrityError, InvalidInput, NotFoundError, PrmeError
from .models import AssembledPrompt, Event, Node, PublishResult, RecallHit, Snapshot
from .tokens import parse_token

__all__ = ["create_app"]

PROBLEM_JSON = "application/problem+json"
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


class Health(BaseModel):
    status: str
    version: str


class Readiness(BaseModel):
    ready: bool
    accepts_writes: bool
    migrations_current: bool
    detail: str


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
        return Readiness(
            ready=not problems,
            accepts_writes=accepts_writes,
            migrations_current=current,
            detail="; ".join(problems) or "ready",
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

    return app
