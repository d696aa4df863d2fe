"""What a route can ask for: the app's client (``Client``) and the owner its bearer
token acts for (``Owner``), both as FastAPI dependencies; and ``json_body``, which every
route has (415 for a body that is not JSON)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..aio import AsyncMemoryClient
from ..tokens import ParsedToken, parse_token

__all__ = [
    "GATE_STATE_KEY",
    "Client",
    "Owner",
    "Token",
    "Unauthorized",
    "UnsupportedMediaType",
    "current_owner",
    "current_token",
    "json_body",
    "known_query",
    "memory_client",
    "token_of",
]

bearer = HTTPBearer(auto_error=False, description="prme.<owner>.<secret>, from `prme-pg token create`")


#: Where the owner gate (:mod:`.gate`) leaves the token it authenticated: ``request.state``.
GATE_STATE_KEY = "prme_token"


def token_of(state: Any) -> ParsedToken | None:
    """The token the owner gate authenticated for this request, if it ran."""
    token = getattr(state, GATE_STATE_KEY, None)
    return token if isinstance(token, ParsedToken) else None


class Unauthorized(Exception):
    """No valid bearer token: answered 401 (see :mod:`prme_pg.http.problems`)."""


class UnsupportedMediaType(Exception):
    """A request body that is not JSON: answered 415 (see :mod:`prme_pg.http.problems`)."""


def _is_json(content_type: str) -> bool:
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == "application/json" or (media_type.startswith("application/") and media_type.endswith("+json"))


async def json_body(request: Request) -> None:
    """415 unless a request's body, when it has one, says it is JSON: every body this API reads is.

    A request without a body passes (the routes whose body is optional take none); so does
    every GET. Without this, FastAPI would read a form or a body without a Content-Type
    as something else and answer 422 with a message about the wrong thing.
    """
    if request.method in ("GET", "HEAD", "OPTIONS", "DELETE") or not await request.body():
        return
    content_type = request.headers.get("content-type", "")
    if not _is_json(content_type):
        shown = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
        raise UnsupportedMediaType(f"the request body must be JSON (Content-Type: application/json), not {shown}")


def _query_names(dependant: Dependant) -> set[str]:
    """The query parameters a route reads, its dependencies' included."""
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def known_query(request: Request) -> None:
    """422 for a query parameter the route does not take: a misspelt filter (``?query=`` where a
    route took ``?q=``, say) would otherwise be ignored and the answer look plausible. The
    console's pages (``/ui/``, no parameters of their own) keep theirs for the browser."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not request.query_params or route.path.startswith("/ui"):
        return
    known = _query_names(route.dependant)
    unknown = [name for name in dict.fromkeys(request.query_params.keys()) if name not in known]
    if unknown:
        expected = ", ".join(sorted(known)) or "none"
        raise RequestValidationError(
            [
                {
                    "type": "extra_forbidden",
                    "loc": ("query", name),
                    "msg": f"unknown parameter (this route takes: {expected})",
                }
                for name in unknown
            ]
        )


def memory_client(request: Request) -> AsyncMemoryClient:
    """The client the app was created over (:func:`prme_pg.http.create_app`)."""
    client: AsyncMemoryClient = request.app.state.client
    return client


Client = Annotated[AsyncMemoryClient, Depends(memory_client)]


async def current_token(
    request: Request, client: Client, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> ParsedToken:
    """The live bearer token of the request, or 401. The owner gate (:mod:`.gate`) has already
    checked it before the body was read and left it in the request's state; the check here
    is for an app run without the gate."""
    checked = token_of(request.state)
    if checked is not None:
        return checked
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("an Authorization: Bearer token is required")
    parsed = parse_token(credentials.credentials)
    if parsed is None or not await client.authenticate_api_token(parsed.user_id, parsed.sha256):
        raise Unauthorized("the bearer token is not valid")
    return parsed


Token = Annotated[ParsedToken, Depends(current_token)]


async def current_owner(token: Token) -> str:
    """The user_id the bearer token acts for, or 401."""
    return token.user_id


Owner = Annotated[str, Depends(current_owner)]
