"""Typed errors shared by every layer.

PostgreSQL raises them with their own SQLSTATE (``PR404``, ``PR409``, ``PR422``);
the DuckDB port raises the same Python classes; the HTTP API maps them to 404, 409
and 422. One table, here, is the source of that mapping.
"""

from __future__ import annotations

__all__ = [
    "SQLSTATE_ERRORS",
    "IdempotencyConflict",
    "IntegrityError",
    "InvalidInput",
    "MigrationError",
    "NotFoundError",
    "NotOnPack",
    "PrmeError",
    "SchemaMissing",
]


class PrmeError(Exception):
    """Base class of every error prme-pg raises on purpose."""

    sqlstate: str = ""
    http_status: int = 500


class NotFoundError(PrmeError, LookupError, ValueError):
    """A node, event or operation is missing, archived, or another owner's (PR404).

    A :class:`LookupError`, and also a :class:`ValueError`: code written for PRME catches
    ``ValueError`` for "not found", and an argument naming nothing this owner has is a
    bad value as much as a failed lookup.
    """

    sqlstate = "PR404"
    http_status = 404


class IdempotencyConflict(PrmeError, ValueError):
    """A request_id or operation id was already used for something else (PR409)."""

    sqlstate = "PR409"
    http_status = 409


class InvalidInput(PrmeError, ValueError):
    """An argument is malformed or out of range (PR422)."""

    sqlstate = "PR422"
    http_status = 422


class IntegrityError(PrmeError):
    """Stored data does not verify, e.g. a snapshot generation whose sha256 is not its id (XX001)."""

    sqlstate = "XX001"
    http_status = 500


class NotOnPack(PrmeError):
    """A server capability a memory pack does not have (the operations ledger, say): HTTP 501."""

    http_status = 501


class MigrationError(PrmeError):
    """The database and the migration files disagree, or a migration file is damaged."""


class SchemaMissing(MigrationError):
    """The database lacks (part of) this release's ``prme`` schema: a missing schema, function
    or table (SQLSTATE 3F000, 42883, 42P01). The message says to run ``prme-pg migrate``."""

    #: What the message adds to PostgreSQL's own words.
    HINT = "this database lacks this release's prme schema: run prme-pg migrate; prme-pg status shows it"


SQLSTATE_ERRORS: dict[str, type[PrmeError]] = {
    cls.sqlstate: cls for cls in (NotFoundError, IdempotencyConflict, InvalidInput, IntegrityError)
}
