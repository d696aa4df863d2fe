"""Argument checks that run in Python before any I/O, shared by every client-side layer.

They mirror the engine's own checks (``sql/postgres/030_validation.sql``) where the
engine is not there to make them: the DuckDB port, the pack's outbox and learning
queue, and the clients' argument parsing. Kept free of heavy imports, so an agent's
stop hook that only enqueues does not load a database driver to validate a user id.
"""

from __future__ import annotations

import re
from uuid import UUID

from .errors import InvalidInput

__all__ = ["parse_uuid", "require_utf8", "valid_user_id"]

# Unicode's control characters (category Cc), as prme._valid_user_id spells them out.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def parse_uuid(argument: str, value: object) -> UUID:
    """A UUID from a UUID or its text; :class:`InvalidInput` otherwise, before any I/O."""
    if isinstance(value, UUID):
        return value
    if isinstance(value, str):
        try:
            return UUID(value)
        except ValueError:
            pass
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    raise InvalidInput(f"{argument} must be a UUID, got {shown}")


def require_utf8(argument: str, value: str) -> str:
    """``value`` if it has a UTF-8 form; a lone surrogate is :class:`InvalidInput`, typed."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{argument} is not valid Unicode: {exc.reason}") from exc
    return value


def valid_user_id(user_id: object) -> str:
    """The engine's rule (prme._valid_user_id): 1-256 characters, no controls, no surrounding spaces."""
    if user_id is None:
        raise InvalidInput("user_id must not be null")
    if (
        not isinstance(user_id, str)
        or not 1 <= len(user_id) <= 256
        or CONTROL_CHARACTERS.search(user_id)
        or user_id != user_id.strip(" ")
    ):
        raise InvalidInput("user_id must be 1 to 256 characters without control characters or surrounding spaces")
    return require_utf8("user_id", user_id)
