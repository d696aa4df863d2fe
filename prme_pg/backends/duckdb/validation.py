"""The checks of sql/postgres/030_validation.sql, with the same messages, and those every
capability shares."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal

from ...errors import InvalidInput
from ...validation import require_utf8

# -- validation: sql/postgres/030_validation.sql, same checks and messages ----------

_NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_STABILITIES = ("low", "semi-stable", "stable")
_DECAY_PROFILES = ("permanent", "slow", "medium", "fast", "rapid")
_MAX_TEXT_BYTES = 65536


def _quote_literal(value: str) -> str:
    # PostgreSQL's quote_literal, for error details that read the same on both engines.
    quoted = "'" + value.replace("'", "''").replace("\\", "\\\\") + "'"
    return "E" + quoted if "\\" in value else quoted


def valid_name(argument: str, value: object) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        shown = _quote_literal(value[:80]) if isinstance(value, str) else "NULL"
        raise InvalidInput(f"{argument} must match ^[a-z][a-z0-9_-]{{0,62}}$ (got {shown})")
    return value


def _no_nul(argument: str, value: str) -> str:
    # PostgreSQL text cannot hold NUL; psycopg refuses to send it. Same outcome here.
    if "\x00" in value:
        raise InvalidInput(f"{argument} must not contain NUL (0x00) characters")
    return require_utf8(argument, value)


def valid_content(content: object) -> str:
    if not isinstance(content, str) or content.strip(" \t\n\r\f\v") == "":
        raise InvalidInput("content must not be empty")
    size = len(content.encode("utf-8", "surrogatepass"))
    if size > _MAX_TEXT_BYTES:
        raise InvalidInput(f"content must be at most 65536 bytes (got {size} bytes)")
    return _no_nul("content", content)


def valid_fraction(argument: str, value: object) -> Decimal:
    if isinstance(value, Decimal) and value.is_finite():
        exponent = value.as_tuple().exponent
        scale = -exponent if isinstance(exponent, int) and exponent < 0 else 0
        if 0 <= value <= 1 and scale <= 4:
            return value
    shown = "NULL" if value is None else str(value)
    raise InvalidInput(f"{argument} must be a number in [0, 1] with at most 4 decimal places (got {shown})")


def valid_timestamp(argument: str, value: datetime | None) -> datetime | None:
    if value is None:
        return None
    try:
        return value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise InvalidInput(f"{argument} must be a finite time between years 1 and 9999 (got {value})") from None


def valid_payload(payload: object) -> str:
    if not isinstance(payload, Mapping):
        raise InvalidInput("payload must be a JSON object")
    try:
        # jsonb's text form has the same separators, so the size limit reads alike.
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"payload must be a JSON object ({exc})") from exc
    if len(require_utf8("payload", text).encode("utf-8")) > _MAX_TEXT_BYTES:
        raise InvalidInput("payload must be at most 65536 bytes of JSON")
    if "\\u0000" in text:
        # jsonb refuses \u0000 (SQLSTATE 22P05); keep the engines alike.
        raise InvalidInput("payload must not contain \\u0000")
    return text


def _valid_max_count(max_count: int) -> int:
    if not isinstance(max_count, int) or not 1 <= max_count <= 10000:
        raise InvalidInput("max_count must be between 1 and 10000")
    return max_count


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def _valid_scopes(scopes: Sequence[str] | None) -> tuple[str, ...]:
    """prme._valid_scopes (non-null): 1..100 valid names, duplicates dropped in first-seen order."""
    if scopes is None:
        raise InvalidInput("scopes must not be null")
    if not 1 <= len(scopes) <= 100:
        raise InvalidInput("scopes must be a one-dimensional array of 1 to 100 scopes")
    return tuple(dict.fromkeys(valid_name("scope", scope) for scope in scopes))
