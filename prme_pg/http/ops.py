"""Operations: liveness (``/health``) and readiness (``/ready``)."""

from __future__ import annotations

from datetime import datetime
from functools import cache

import psycopg
from fastapi import APIRouter, Response
from psycopg_pool import PoolTimeout
from pydantic import BaseModel, Field

from .. import __version__, migrations
from ..errors import PrmeError
from ..models import LedgerStatus
from .dependencies import Client, Owner
from .problems import problem_responses

__all__ = ["router"]

router = APIRouter()


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


@cache
def release_migrations() -> tuple[str, ...]:
    """This release's migrations as version:sha256, as ``prme.readiness()`` lists the applied ones."""
    return tuple(f"{m.version}:{m.sha256}" for m in migrations.load_migrations())


@router.get("/health", response_model=Health, tags=["operations"])
async def health() -> Health:
    """The process is alive. Needs no token and touches no database."""
    return Health(status="ok", version=__version__)


@router.get(
    "/ready",
    response_model=Readiness,
    tags=["operations"],
    responses={**problem_responses(401), 503: {"model": Readiness, "description": "cannot ingest"}},
)
async def ready(_: Owner, client: Client, response: Response) -> Readiness:
    """Whether the database accepts writes and has exactly this release's migrations."""
    try:
        accepts_writes, applied = await client.readiness()
    except (psycopg.OperationalError, PoolTimeout) as exc:
        response.status_code = 503
        return Readiness(
            ready=False, accepts_writes=False, migrations_current=False, detail=f"database unavailable: {exc}"
        )
    expected = release_migrations()
    current = tuple(applied) == expected
    problems = [] if accepts_writes else ["the database does not accept writes"]
    if not current:
        problems.append(f"migrations differ: database has {len(applied)}, release has {len(expected)}")
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
