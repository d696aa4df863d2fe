"""Errors as RFC 9457 problem+json: the document, its OpenAPI description, and the
exception handlers that turn every error a route can raise into one."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import psycopg
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import IdempotencyConflict, IntegrityError, InvalidInput, NotFoundError, NotOnPack, PrmeError
from ..sqlstate import database_unavailable, describe
from .dependencies import Unauthorized, UnsupportedMediaType

__all__ = [
    "ERROR_TYPE",
    "EXCEPTION_HANDLERS",
    "MISSING_SCHEMA",
    "PROBLEM_JSON",
    "RETRY_SOON",
    "Problem",
    "problem",
    "problem_responses",
    "server_failed",
    "unavailable",
]

log = logging.getLogger("prme_pg.http")

PROBLEM_JSON = "application/problem+json"
ERROR_TYPE = "urn:prme-pg:error:"
#: A 503 or 429 may be retried unchanged, after this long.
RETRY_SOON = {"Retry-After": "1"}

# The problem each status means unless a route words it for itself (problem_responses).
_DESCRIBED = {
    401: "missing, malformed, unknown or revoked bearer token",
    404: "not found (missing, archived, or another owner's)",
    409: "idempotency key already used for another node or evidence",
    413: "the request body is larger than the server's limit",
    415: "the request body is not JSON (Content-Type: application/json)",
    422: "invalid input",
    429: "the token's owner has as many requests in flight as the server allows; retry after Retry-After",
    503: "the database is unavailable (or did not answer in time); retry after Retry-After",
}

_TITLES: dict[type[PrmeError], str] = {
    NotFoundError: "Not Found",
    IdempotencyConflict: "Conflict",
    InvalidInput: "Invalid Input",
    IntegrityError: "Data Corrupted",
}


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    type: str = Field(examples=["urn:prme-pg:error:PR404"])
    title: str
    status: int
    detail: str


def problem(status: int, code: str, title: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """A problem+json response whose type is ``urn:prme-pg:error:<code>``."""
    body = Problem(type=ERROR_TYPE + code, title=title, status=status, detail=detail)
    return JSONResponse(body.model_dump(), status_code=status, media_type=PROBLEM_JSON, headers=headers)


def problem_responses(*statuses: int, **overrides: str) -> dict[int | str, dict[str, Any]]:
    """Documented problem responses; ``overrides`` (``s404="..."``) reword one status."""
    return {
        status: {
            "model": Problem,
            "description": overrides.get(f"s{status}", _DESCRIBED[status]),
            "content": {PROBLEM_JSON: {}},
        }
        for status in statuses
    }


async def _unauthorized(_: Request, exc: Exception) -> JSONResponse:
    return problem(401, "unauthorized", "Unauthorized", str(exc), {"WWW-Authenticate": "Bearer"})


async def _unsupported_media_type(_: Request, exc: Exception) -> JSONResponse:
    return problem(415, "unsupported-media-type", "Unsupported Media Type", str(exc))


async def _engine_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PrmeError)
    title = _TITLES.get(type(exc))
    if title is not None:
        return problem(exc.http_status, exc.sqlstate, title, str(exc))
    if isinstance(exc, NotOnPack):
        # serve --pack: a server capability the pack does not have (docs/DUCKDB.md).
        return problem(501, "not-on-pack", "Not Implemented", str(exc))
    return problem(500, "internal", "Internal Server Error", str(exc))


async def _invalid_request(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = "; ".join(_validation_detail(error) for error in exc.errors())
    return problem(422, InvalidInput.sqlstate, "Invalid Input", details or "invalid request")


def _validation_detail(error: Any) -> str:
    if error.get("type") == "json_invalid":  # the strict body parser's reason (prme_pg.http.strict_json)
        return str(error.get("ctx", {}).get("error") or error.get("msg", "invalid JSON"))
    return f"{'.'.join(str(p) for p in error.get('loc', ()))}: {error.get('msg', 'invalid')}"


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return problem(exc.status_code, f"http-{exc.status_code}", str(exc.detail), str(exc.detail))


#: This server's schema is not what this release needs (not migrated, or damaged): ours, never
#: "unavailable" (a retry cannot help), and never shown to the client in PostgreSQL's words.
MISSING_SCHEMA = ("3F000", "42883", "42P01", "42703")


def server_failed(exc: BaseException, what: str = "the database failed") -> JSONResponse:
    """500 with a correlation id; the detail (a raw PostgreSQL message) goes to the server's log only."""
    incident = uuid.uuid4().hex
    log.error("incident %s: %s: %s", incident, what, describe(exc))
    detail = f"{what}; the server's log has the details under incident {incident}"
    return problem(500, "internal", "Internal Server Error", detail, {"X-Incident-Id": incident})


async def _unavailable(_: Request, exc: Exception) -> JSONResponse:
    return unavailable(exc)


def unavailable(exc: BaseException) -> JSONResponse:
    """503 with a correlation id; the reason goes to the server's log only."""
    incident = uuid.uuid4().hex
    log.warning("incident %s: the database is unavailable: %s", incident, describe(exc))
    detail = f"the database is unavailable; retry later (incident {incident})"
    return problem(503, "unavailable", "Service Unavailable", detail, {**RETRY_SOON, "X-Incident-Id": incident})


async def _database_error(request: Request, exc: Exception) -> JSONResponse:
    """By SQLSTATE class, not by psycopg's exception type (prme_pg.sqlstate): a lost connection or
    a statement timeout is 503; a program limit the request ran into (54001 stack depth, say,
    which psycopg calls an OperationalError) is the request's, 422; a schema this release does
    not find (42883, 42P01, 3F000) and anything else is ours, 500. The 503 and 500 bodies are
    generic with a correlation id; PostgreSQL's message is logged, never sent (issue 32)."""
    assert isinstance(exc, psycopg.Error)
    if exc.sqlstate in MISSING_SCHEMA:
        return server_failed(exc, "the server's database schema is not this release's")
    if database_unavailable(exc):
        return await _unavailable(request, exc)
    if exc.sqlstate is not None and exc.sqlstate.startswith("54"):
        detail = f"the request exceeds a database limit: {describe(exc)}"
        return problem(422, exc.sqlstate, "Invalid Input", detail)
    return server_failed(exc)


# Every error a route raises, as the problem it answers with (FastAPI(exception_handlers=...)).
EXCEPTION_HANDLERS: dict[int | type[Exception], Callable[[Request, Any], Coroutine[Any, Any, Response]]] = {
    Unauthorized: _unauthorized,
    UnsupportedMediaType: _unsupported_media_type,
    PrmeError: _engine_error,
    RequestValidationError: _invalid_request,
    StarletteHTTPException: _http_error,
    psycopg.Error: _database_error,
    PoolTimeout: _unavailable,
}
