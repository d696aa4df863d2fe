"""Whose failure is a database error: the database's (retry later) or the request's (refuse it)?

Decided by SQLSTATE class, never by psycopg's exception type: psycopg reports a PL/pgSQL
stack overflow caused by one payload (54001) as an ``OperationalError``, the type it also
uses for a lost connection, and a worker that read that as "the database is down" would
hold that payload, and every good one behind it, forever.

*Unavailable* means the same request could succeed later, unchanged, and would fail now
for any request: the connection, the server, its resources, its configuration for this
role, a conflict with a concurrent transaction. Everything else -- PR404/PR409/PR422, data
exceptions (22), integrity violations (23), program limits (54), a plain RAISE (P0001)
-- is about the request itself and is answered for that request alone.
"""

from __future__ import annotations

import re

import psycopg

__all__ = ["UNAVAILABLE_CLASSES", "database_unavailable", "describe", "error_detail", "error_message"]

#: What PL/Proxy puts before a shard's own message (``prme.get_node(2): [shard_db] REMOTE ERROR: ``)
#: and detail (``Remote detail: ``): the caller of the proxy is shown the shard's words alone.
_REMOTE_MESSAGE = re.compile(r"^[\w.]+\(\d+\): \[[^\]]*\] REMOTE ERROR: ")
_REMOTE_DETAIL = re.compile(r"^Remote detail: ")


def error_message(exc: psycopg.Error) -> str:
    """The server's primary message, as the shard wrote it when the error came through PL/Proxy."""
    return _REMOTE_MESSAGE.sub("", exc.diag.message_primary or str(exc), count=1)


def error_detail(exc: psycopg.Error) -> str | None:
    """The server's detail, as the shard wrote it when the error came through PL/Proxy."""
    detail = exc.diag.message_detail
    return _REMOTE_DETAIL.sub("", detail, count=1) if detail else None


#: SQLSTATE classes (or full codes) that say nothing about the request (PostgreSQL, Appendix A).
UNAVAILABLE_CLASSES = (
    "08",  # connection exception
    "25006",  # read-only SQL transaction: a standby, or default_transaction_read_only
    "28",  # invalid authorization specification
    "3D",  # invalid catalog name: the database is gone
    "3F",  # invalid schema name: no prme schema (not migrated)
    "40",  # transaction rollback: serialization failure, deadlock -- retry
    "42501",  # insufficient privilege: the role's grants, not the request
    "42883",  # undefined function: a schema older than this client
    "53",  # insufficient resources: disk full, out of memory, too many connections
    "55",  # object not in prerequisite state: lock_timeout (55P03), object in use
    "57",  # operator intervention: statement_timeout/cancel (57014), shutdown, crash (57P..)
    "58",  # system error: I/O
    "XX",  # internal error: the server's, not the request's
)


def database_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` means the database cannot serve any request now (retry later, unchanged).

    A psycopg error without a SQLSTATE is unavailable when it is a connection failure
    (``OperationalError``, ``InterfaceError``: no server answered), and the request's
    otherwise (a value psycopg refuses to send). Anything that is not a psycopg error is
    the request's.
    """
    if not isinstance(exc, psycopg.Error):
        return False
    sqlstate = exc.sqlstate
    if not sqlstate:
        return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
    return sqlstate.startswith(UNAVAILABLE_CLASSES)


def describe(exc: BaseException) -> str:
    """One line for a log or a rejection reason: ``SQLSTATE: message`` (or the exception's type)."""
    if isinstance(exc, psycopg.Error):
        text = error_message(exc)
        message = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        return f"{exc.sqlstate or type(exc).__name__}: {message}"
    return f"{type(exc).__name__}: {exc}"
