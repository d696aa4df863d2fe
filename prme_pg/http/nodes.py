"""Memories and evidence: create and read nodes, record events, reinforce."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from ..backends import MAX_BATCH_ITEMS
from ..models import Event, Node
from .dependencies import Client, Owner
from .fields import LOCATION_HEADER, REPLAYED_HEADER, IdempotencyKey, Number
from .problems import problem_responses
from .strict_json import StrictJSONRoute

__all__ = ["NodeOut", "router"]

router = APIRouter(route_class=StrictJSONRoute)


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
    next_review_at: datetime | None = Field(
        default=None,
        description="the first review; omitted: one review cadence of its stability from now; null: no review schedule",
    )
    node_id: UUID | None = Field(
        default=None,
        description="chosen by the client, so that a retry after a lost response cannot store the memory twice: "
        "the retry is 409 and GET /v1/nodes/{node_id} reads what the first attempt stored",
    )


class BatchNodeIn(NodeIn):
    created_at: datetime | None = Field(
        default=None, description="when the memory was first made elsewhere (an import); omitted: now"
    )
    node_id: UUID | None = Field(
        default=None,
        description="chosen by the client: an item whose node_id is stored already with the same content, scope, "
        "namespace and kind is answered as replayed and writes nothing, so a retried batch writes only what is missing",
    )


class NodesIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[BatchNodeIn] = Field(max_length=MAX_BATCH_ITEMS, description=f"1 to {MAX_BATCH_ITEMS} memories")


class BatchItemOut(BaseModel):
    status: str = Field(description="created, or replayed (stored by an earlier request; nothing written)")
    node: NodeOut


class NodesOut(BaseModel):
    created: int
    replayed: int
    items: list[BatchItemOut] = Field(description="one per item, in the request's order")


class EventIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str
    scope: str = "personal"
    namespace: str = "default"
    kind: str = "message"
    payload: dict[str, Any] = Field(default_factory=dict)
    occurred_at: datetime | None = None
    event_id: UUID | None = Field(
        default=None,
        description="chosen by the client, so that a retry after a lost response cannot record the evidence "
        "twice: the retry is 409 (the evidence is stored under this id)",
    )


class ReinforceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    evidence_id: UUID | None = None


@router.post(
    "/v1/nodes",
    status_code=201,
    response_model=NodeOut,
    tags=["memories"],
    responses={
        **problem_responses(401, 409, 415, 422, 503, s409="a memory with this node_id exists (a retry, or a reuse)"),
        201: {"description": "the new memory", "headers": LOCATION_HEADER},
    },
)
async def add_node(body: NodeIn, user_id: Owner, client: Client, response: Response) -> NodeOut:
    """Create a memory for the token's owner; ``Location`` is its URL."""
    # An omitted next_review_at is the client's default (one cadence ahead); null is no schedule.
    exclude = {"content"} if "next_review_at" in body.model_fields_set else {"content", "next_review_at"}
    node = await client.add_node(body.content, user_id=user_id, **body.model_dump(exclude=exclude))
    response.headers["Location"] = f"/v1/nodes/{node.id}"
    return NodeOut.of(node)


@router.post(
    "/v1/nodes:batch",
    response_model=NodesOut,
    tags=["memories"],
    responses=problem_responses(
        401,
        409,
        413,
        415,
        422,
        503,
        s409="an item's node_id is stored with other content (the detail names it: items[N])",
        s422="an item is invalid (the detail names it: items[N]); nothing was written",
    ),
)
async def add_nodes(body: NodesIn, user_id: Owner, client: Client) -> NodesOut:
    """Create up to 1000 memories for the token's owner in one transaction, all or nothing, each
    exactly as ``POST /v1/nodes`` would; a retried batch reports each stored item as replayed."""
    items = []
    for item in body.items:
        # As POST /v1/nodes: an omitted next_review_at is one cadence ahead; null is no schedule.
        exclude = set() if "next_review_at" in item.model_fields_set else {"next_review_at"}
        items.append(item.model_dump(exclude=exclude))
    nodes = await client.add_nodes(items, user_id=user_id)
    replayed = sum(node.replayed for node in nodes)
    return NodesOut(
        created=len(nodes) - replayed,
        replayed=replayed,
        items=[BatchItemOut(status="replayed" if n.replayed else "created", node=NodeOut.of(n)) for n in nodes],
    )


@router.get(
    "/v1/nodes/{node_id}", response_model=NodeOut, tags=["memories"], responses=problem_responses(401, 404, 422, 503)
)
async def get_node(node_id: UUID, user_id: Owner, client: Client) -> NodeOut:
    """One memory of the token's owner (404 for another owner's)."""
    return NodeOut.of(await client.get_node(node_id, user_id=user_id))


@router.post(
    "/v1/events",
    status_code=201,
    response_model=EventOut,
    tags=["evidence"],
    responses=problem_responses(401, 409, 422, 503, s409="evidence with this event_id exists (a retry, or a reuse)"),
)
async def add_event(body: EventIn, user_id: Owner, client: Client) -> EventOut:
    """Record immutable evidence for the token's owner."""
    return EventOut.of(await client.add_event(body.content, user_id=user_id, **body.model_dump(exclude={"content"})))


@router.put(
    "/v1/nodes/{node_id}/reinforce",
    response_model=NodeOut,
    tags=["memories"],
    responses={
        **problem_responses(401, 404, 409, 422, 503),
        200: {
            "description": "the current node; on a replay also the header Idempotent-Replayed: true",
            "headers": REPLAYED_HEADER,
        },
    },
)
async def reinforce(
    node_id: UUID,
    user_id: Owner,
    client: Client,
    response: Response,
    body: ReinforceIn | None = None,
    idempotency_key: IdempotencyKey = None,
) -> NodeOut:
    """Confirm a memory. With an Idempotency-Key, a retry counts once and is answered as a replay."""
    node = await client.reinforce(
        node_id, body.evidence_id if body else None, user_id=user_id, request_id=idempotency_key
    )
    if node.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return NodeOut.of(node)
