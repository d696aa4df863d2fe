"""What a route can ask for: the app's client (``Client``) and the owner its bearer
token acts for (``Owner``), both as FastAPI dependencies."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..aio import AsyncMemoryClient
from ..tokens import ParsedToken, parse_token

__all__ = [
    "GATE_STATE_KEY",
    "Client",
    "Owner",
    "Token",
    "Unauthorized",
    "current_owner",
    "current_token",
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
