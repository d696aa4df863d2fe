"""What a route can ask for: the app's client (``Client``) and the owner its bearer
token acts for (``Owner``), both as FastAPI dependencies."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..aio import AsyncMemoryClient
from ..tokens import parse_token

__all__ = ["Client", "Owner", "Unauthorized", "current_owner", "memory_client"]

bearer = HTTPBearer(auto_error=False, description="prme.<owner>.<secret>, from `prme-pg token create`")


class Unauthorized(Exception):
    """No valid bearer token: answered 401 (see :mod:`prme_pg.http.problems`)."""


def memory_client(request: Request) -> AsyncMemoryClient:
    """The client the app was created over (:func:`prme_pg.http.create_app`)."""
    client: AsyncMemoryClient = request.app.state.client
    return client


Client = Annotated[AsyncMemoryClient, Depends(memory_client)]


async def current_owner(
    client: Client, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> str:
    """The user_id the bearer token acts for, or 401."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("an Authorization: Bearer token is required")
    parsed = parse_token(credentials.credentials)
    if parsed is None or not await client.authenticate_api_token(parsed.user_id, parsed.sha256):
        raise Unauthorized("the bearer token is not valid")
    return parsed.user_id


Owner = Annotated[str, Depends(current_owner)]
