"""Recall, snapshots and prompts: find memories, publish and read a scope's
generations (with ETag and If-Match), assemble a prompt from them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Header, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from ..errors import InvalidInput
from ..models import AssembledPrompt, PublishResult, RecallHit, Snapshot
from .dependencies import Client, Owner
from .fields import Number
from .problems import problem_responses
from .strict_json import StrictJSONRoute

__all__ = ["router"]

router = APIRouter(route_class=StrictJSONRoute)

_ETAG_HEADER = {"ETag": {"schema": {"type": "string"}, "description": "the generation id, quoted"}}


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


@router.get("/v1/recall", response_model=RecallOut, tags=["recall"], responses=problem_responses(401, 422, 503))
async def recall(
    user_id: Owner,
    client: Client,
    query: Annotated[str | None, Query(description="words to look for; absent or blank ranks by strength")] = None,
    scope: Annotated[list[str] | None, Query(description="only these scopes (repeat; default all)")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="at most this many hits")] = 10,
    q: Annotated[str | None, Query(description="the same as query (an alias)")] = None,
) -> RecallOut:
    """The token owner's memories matching query, best first (docs/RECALL.md)."""
    if query is not None and q is not None and query != q:
        raise InvalidInput("pass query or its alias q, not both")
    hits = await client.recall(query if query is not None else q, user_id=user_id, scopes=scope, max_count=limit)
    return RecallOut(hits=[RecallHitOut.of(hit) for hit in hits])


@router.post(
    "/v1/snapshots/{scope}",
    response_model=PublishOut,
    tags=["snapshots"],
    responses={
        **problem_responses(
            401, 409, 422, 503, s409="If-Match names a generation that is not current (nothing was published)"
        ),
        200: {
            "description": "the current generation after the call (advanced: false when it was already current)",
            "headers": _ETAG_HEADER,
        },
    },
)
async def publish_snapshot(
    scope: str,
    user_id: Owner,
    client: Client,
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


@router.get(
    "/v1/snapshots/{scope}",
    response_model=SnapshotOut,
    tags=["snapshots"],
    responses={
        **problem_responses(401, 404, 422, 503, s404="the scope was never published by the token's owner"),
        200: {"description": "the current generation, verified against its id", "headers": _ETAG_HEADER},
    },
)
async def current_snapshot(scope: str, user_id: Owner, client: Client, response: Response) -> SnapshotOut:
    """The current generation of one of the token owner's scopes."""
    snapshot = await client.current_snapshot(scope, user_id=user_id)
    response.headers["ETag"] = _etag(snapshot.generation_id)
    return SnapshotOut.of(snapshot)


@router.get("/v1/prompt", response_model=PromptOut, tags=["snapshots"], responses=problem_responses(401, 422, 503))
async def assemble_prompt(
    user_id: Owner,
    client: Client,
    scope: Annotated[list[str], Query(min_length=1, max_length=100, description="scopes, most important first")],
    budget_bytes: Annotated[int, Query(ge=1, le=16777216, description="the prompt's size limit in bytes")],
) -> PromptOut:
    """Prompt text from the current generation of each scope, within budget_bytes."""
    return PromptOut.of(await client.assemble_prompt(scope, user_id=user_id, budget_bytes=budget_bytes))
