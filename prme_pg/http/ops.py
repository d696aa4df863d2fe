"""Operations: liveness (``/health``) and readiness (``/ready``)."""

from __future__ import annotations

import asyncio
from functools import cache
from typing import Literal

import psycopg
from fastapi import APIRouter, Request, Response
from psycopg_pool import PoolTimeout
from pydantic import BaseModel, ConfigDict, Field

from .. import __version__, migrations
from ..aio import AsyncMemoryClient
from ..backends.duckdb import AsyncDuckDBBackend
from ..errors import PrmeError, SchemaMissing
from .dependencies import Client
from .problems import unavailable_detail
from .strict_json import StrictJSONRoute

__all__ = ["router"]

router = APIRouter(route_class=StrictJSONRoute)

#: An accepted operation waiting longer than this for the executor: ``executor`` is false.
EXECUTOR_STALL_SECONDS = 60


#: What ``/health`` names this service (the reference protocol's health shape carries it).
SERVICE = "prme-pg"


class Health(BaseModel):
    status: str
    version: str
    service: str = Field(description=f"always {SERVICE!r}")


class Capabilities(BaseModel):
    """What the server can do now, each true or false; more may be added (clients ignore unknown ones).

    ``model_executor`` (the embedding model is loaded) and ``search_index`` (the engine compares
    vectors) come with ``embedding``; they are informative and never make the server unready."""

    model_config = ConfigDict(extra="allow")

    storage: bool = Field(description="the database answers, accepts writes and has exactly this release's migrations")
    ledger: bool = Field(description="the operations ledger accepts submits (POST /api/v2/operations)")
    executor: bool = Field(
        description=(
            "accepted operations are being executed: none has waited for the executor (prme-pg worker or "
            f"pg_cron) longer than {EXECUTOR_STALL_SECONDS} s. Informative: it does not make the server unready"
        )
    )


class Readiness(BaseModel):
    status: Literal["ready", "not_ready"] = Field(
        description="ready when storage and ledger are (on a memory pack, which has no ledger: when storage is)"
    )
    capabilities: Capabilities
    ingestion_ready: bool = Field(description="writes and ledger submits are taken now (storage and ledger)")
    search_ready: bool = Field(
        description=(
            "recall answers now (storage): its indexes are kept by every write, and this request has loaded the "
            "embedding model"
        )
    )
    detail: str = Field(description="ready, or why not")


@cache
def release_migrations() -> tuple[str, ...]:
    """This release's migrations as version:sha256, as ``prme.readiness()`` lists the applied ones."""
    return tuple(f"{m.version}:{m.sha256}" for m in migrations.load_migrations())


@router.get("/health", response_model=Health, tags=["operations"])
async def health() -> Health:
    """The process is alive. Needs no token and touches no database."""
    return Health(status="ok", version=__version__, service=SERVICE)


@router.get(
    "/ready",
    response_model=Readiness,
    tags=["operations"],
    responses={503: {"model": Readiness, "description": "not ready: the reason is in detail"}},
)
async def ready(client: Client, request: Request, response: Response) -> Readiness:
    """Whether the server can take writes: no token (a readiness probe has none) and nothing of
    any owner. 503 with the reason when it cannot; the ledger's backlog is GET /api/v2/ledger."""
    timeout = request.app.state.limits.ready_timeout_seconds
    try:
        async with asyncio.timeout(timeout):
            capabilities, problems = await _capabilities(client)
    except TimeoutError:
        capabilities, problems = _NOTHING, [f"the database did not answer within {timeout:g} s"]
    except (psycopg.errors.InvalidSchemaName, psycopg.errors.UndefinedFunction, SchemaMissing):
        capabilities, problems = _NOTHING, ["the database has no prme schema (run prme-pg migrate)"]
    except (psycopg.Error, PoolTimeout) as exc:
        # A probe has no token: it gets the incident id, the server's log the reason (issue 32).
        detail, incident = unavailable_detail(exc)
        capabilities, problems = _NOTHING, [detail]
        response.headers["X-Incident-Id"] = incident
    on_pack = isinstance(client.backend, AsyncDuckDBBackend)
    ready = capabilities.storage and (capabilities.ledger or on_pack)
    if capabilities.storage:
        loaded, vector_search, problem = await _embedding(client, timeout)
        if problem:
            problems.append(problem)
        capabilities = capabilities.model_copy(update={"model_executor": loaded, "search_index": vector_search})
    if not ready:
        response.status_code = 503
    return Readiness(
        status="ready" if ready else "not_ready",
        capabilities=capabilities,
        ingestion_ready=ready,
        search_ready=capabilities.storage,
        detail="; ".join(problems) or "ready",
    )


async def _embedding(client: AsyncMemoryClient, timeout: float) -> tuple[bool, bool, str | None]:
    """Whether the embedding model is loaded (a probe loads it: the model's warm-up) and the engine
    compares vectors; a problem to report, if any. The backlog is `prme-pg status`'s to count."""
    try:
        async with asyncio.timeout(timeout):
            status = await client.embedding_status()
    except (PrmeError, psycopg.Error, TimeoutError) as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
        return client.embedder_loaded, False, f"recall by meaning unavailable ({reason}): recall matches words"
    if status is None:
        return False, False, None  # PRME_EMBEDDER=none: recall by words, by choice
    if not status.vector_search:
        return True, False, "no pgvector on the server: recall matches words only (docs/RECALL.md)"
    return True, True, None


_NOTHING = Capabilities(storage=False, ledger=False, executor=False)


async def _capabilities(client: AsyncMemoryClient) -> tuple[Capabilities, list[str]]:
    accepts_writes, applied = await client.readiness()
    if isinstance(client.backend, AsyncDuckDBBackend):
        # serve --pack: a pack has no migrations and no ledger (a server capability); it is
        # ready once open, and says so with ledger and executor false.
        return Capabilities(storage=accepts_writes, ledger=False, executor=False), []
    expected = release_migrations()
    problems = [] if accepts_writes else ["the database does not accept writes"]
    if tuple(applied) != expected:
        problems.append(f"migrations differ: database has {len(applied)}, release has {len(expected)}")
    if problems:
        return Capabilities(storage=False, ledger=False, executor=False), problems
    status = await client.ledger_status()
    if not status.accepting:
        problems.append("the ledger does not accept submits")
    age = status.oldest_ready_age
    executing = status.accepting and (age is None or age.total_seconds() <= EXECUTOR_STALL_SECONDS)
    return Capabilities(storage=True, ledger=status.accepting, executor=executing), problems
