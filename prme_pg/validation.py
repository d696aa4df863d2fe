"""Argument checks that run in Python before any I/O, shared by every client-side layer.

They mirror the engine's own checks (``sql/postgres/030_validation.sql``) where the
engine is not there to make them: the DuckDB port, the pack's outbox and learning
queue, and the clients' argument parsing. Kept free of heavy imports, so an agent's
stop hook that only enqueues does not load a database driver to validate a user id.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any
from uuid import UUID

from .errors import InvalidInput

__all__ = [
    "LEDGER_KINDS",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "UUID_TEXT",
    "JSONTooDeep",
    "check_json_depth",
    "is_loopback",
    "json_depth_exceeds",
    "loads_bounded",
    "loads_strict",
    "parse_uuid",
    "require_utf8",
    "valid_user_id",
]

#: The deepest nesting of a JSON document any entry accepts: the document itself is level
#: 1, and each object or array inside it one more (``{"a": [1]}`` is 2 deep). The same
#: number and counting as the engine's ``prme.ledger_limits().max_payload_depth``, whose
#: canonicaliser refuses deeper payloads with PR422: one bound, every layer
#: (docs/RELIABILITY.md, "Bounds"). Recursive code (json, rfc8785, PL/pgSQL) stays far
#: from its stack limit at this depth; no memory written by an agent nests deeper.
MAX_JSON_DEPTH = 32
#: The largest JSON payload any entry accepts (its RFC 8785 text): the ledger's limit.
MAX_JSON_BYTES = 1024 * 1024

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


#: The operation kinds the ledger accepts: ``prme._operation_kinds()`` (sql/postgres/410_operations.sql),
#: in its order; tests/test_ledger.py holds the two equal. The outbox, the CLI and the HTTP API use this copy.
LEDGER_KINDS = (
    "add_node",
    "add_event",
    "reinforce",
    "archive_node",
    "record_outcome",
    "link_correction",
    "add_memory",
)

#: An operation id (docs/LEDGER.md, "Compatibility"): as ``prme._operation_id`` checks it.
OPERATION_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
_OPERATION_ID = re.compile(OPERATION_ID_PATTERN)
#: A UUID in its 8-4-4-4-12 text form, any case (fullmatch it).
UUID_TEXT = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
#: Every UUID text form the id alphabet allows (prme._operation_id): 8-4-4-4-12 or 32 hex digits,
#: with or without ``urn:uuid:``, any case; each is stored as its lowercase 8-4-4-4-12 form.
_UUID_OPERATION_ID = re.compile(
    r"(?:urn:uuid:)?([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})", re.IGNORECASE
)


def parse_operation_id(argument: str, value: object) -> str:
    """An operation id as the ledger stores it: a UUID (object, or text 8-4-4-4-12 or 32 hex
    digits, with or without ``urn:uuid:``, any case) as lowercase 8-4-4-4-12, any other id of 1
    to 128 characters of ``A-Z a-z 0-9 . _ : -`` as given; :class:`InvalidInput` otherwise,
    before any I/O."""
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, str) and _OPERATION_ID.fullmatch(value):
        found = _UUID_OPERATION_ID.fullmatch(value)
        return str(UUID(found.group(1))) if found else value
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    raise InvalidInput(
        f"{argument} must be an operation id: 1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-' "
        f"(or a UUID), got {shown}"
    )


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


class JSONTooDeep(InvalidInput):
    """A JSON document nests deeper than a limit (an :class:`InvalidInput`, PR422)."""


def json_depth_exceeds(value: object, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` (plain JSON data: dicts, lists, scalars) nests deeper than ``max_depth``.

    Iterative, so a document nested a million levels deep (or one that contains itself)
    is answered without recursion: it stops at the first container below ``max_depth``.
    """
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, Mapping | list | tuple))
    return False


def check_json_depth(argument: str, value: object, max_depth: int = MAX_JSON_DEPTH) -> None:
    """:class:`InvalidInput` when ``value`` nests deeper than ``max_depth`` levels (see MAX_JSON_DEPTH)."""
    if json_depth_exceeds(value, max_depth):
        raise JSONTooDeep(f"{argument} must nest at most {max_depth} levels deep")


def loads_bounded(data: bytes | str, argument: str = "the document", max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON text; anything that is not JSON nested at most ``max_depth`` deep is :class:`InvalidInput`.

    ``json.loads`` recurses: a document nested deeper than the interpreter's recursion
    limit raises RecursionError, which is turned into InvalidInput here like any other
    parse failure, so no reader of untrusted text has to know about it.
    """
    try:
        document = json.loads(data)
    except RecursionError:
        raise JSONTooDeep(f"{argument} must nest at most {max_depth} levels deep") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidInput(f"{argument} is not one JSON document: {exc}") from None
    check_json_depth(argument, document, max_depth)
    return document


class _Refused(ValueError):
    """Raised by loads_strict's parser hooks; json.loads passes it on unchanged."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise _Refused(f"duplicate key {key[:80]!r}")
        document[key] = value
    return document


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number")


def _exact_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"number {text[:40]} is out of range")
    if Decimal(repr(value)) != Decimal(text):
        raise _Refused(f"number {text[:40]} has no exact double form (send it as a string to keep every digit)")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # more digits than int() parses (sys.get_int_max_str_digits)
        raise _Refused(f"integer {text[:40]}... is too long") from None


def loads_strict(data: bytes | str, argument: str = "the body", max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON text as strictly as an API must, or raise :class:`InvalidInput` saying why.

    Beyond :func:`loads_bounded`: text must be UTF-8; ``NaN``, ``Infinity`` and numbers out of
    double range (``1e400``) are refused, not turned into floats nobody can store; an
    object with a duplicate key is refused, not kept with its last value; and a number
    with a fraction or exponent must have an exact double form (its shortest double
    reads back as the same decimal: ``0.1`` yes, ``0.10000000000000000001`` no), so that
    what is stored is what was sent. Integers are exact at any size.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        document = json.loads(
            text,
            object_pairs_hook=_unique_keys,
            parse_constant=_no_constant,
            parse_float=_exact_float,
            parse_int=_integer,
        )
    except _Refused as exc:
        raise InvalidInput(f"{argument} is refused: {exc}") from None
    except RecursionError:
        raise JSONTooDeep(f"{argument} must nest at most {max_depth} levels deep") from None
    except ValueError as exc:  # UnicodeDecodeError, JSONDecodeError
        raise InvalidInput(f"{argument} is not one JSON document: {exc}") from None
    check_json_depth(argument, document, max_depth)
    return document


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address or a peer's) is a loopback address: what the HTTP API's
    trusted mode and the MCP server's one-owner HTTP mode are allowed to bind."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
