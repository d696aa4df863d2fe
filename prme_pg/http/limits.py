"""What one request, and one owner, may cost the server (issue 17; docs/HTTP.md, "Limits").

* **Header bytes** (``max_header_bytes``, default 16 KiB: the request line and every
  header). Enforced by the HTTP protocol itself while the head is still arriving: uvicorn
  runs with h11 (httptools has no such bound) and :class:`LimitedH11Protocol` answers
  431 as soon as an incomplete head passes the limit, then closes the connection; a
  head that arrived whole in one read (h11 parses it before it counts) is measured by
  :class:`~.gate.OwnerGate` and answered 431 the same way.
* **Body bytes** (``max_body_bytes``, default 2 MiB: a 1 MiB ledger payload in its
  envelope, with room for whitespace), enforced by :class:`~.gate.OwnerGate`: 413 before
  a byte is read when Content-Length says more (before authentication: it costs
  nothing), and as soon as a chunked body passes the limit otherwise.
* **Authentication before the body** (:class:`OwnerGate`): a request without a live
  token is answered 401 from its headers alone; its body is never read.
* **Concurrent requests per owner** (``max_requests_per_owner``; default half the
  connection pool, at least 1) and **concurrent event streams per owner**
  (``max_streams_per_owner``, default 4, counted apart: a stream holds no connection
  between its polls). One more is 429 with ``Retry-After: 1``, at once: it does not
  queue. So one owner's flood leaves the rest of the pool to everyone else; each call
  is bounded in time by the client's ``statement_timeout``.
* **Token re-check on streams** (``token_recheck_seconds``, default 5): a stream ends
  within that long after its token is revoked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .problems import ERROR_TYPE, PROBLEM_JSON

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_HEADER_BYTES",
    "LimitedH11Protocol",
    "Limits",
    "uvicorn_options",
]

DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024
DEFAULT_MAX_HEADER_BYTES = 16 * 1024


@dataclass(frozen=True)
class Limits:
    """The server's limits (module docstring). ``max_requests_per_owner=None``: half the pool."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_requests_per_owner: int | None = None
    max_streams_per_owner: int = 4
    token_recheck_seconds: float = 5.0
    #: /ready answers 503 when the database does not answer within this many seconds.
    ready_timeout_seconds: float = 5.0

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_header_bytes", "max_streams_per_owner"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        per_owner = self.max_requests_per_owner
        if per_owner is not None and (isinstance(per_owner, bool) or not isinstance(per_owner, int) or per_owner < 1):
            raise ValueError(f"max_requests_per_owner must be a positive integer or None, got {per_owner!r}")
        for name in ("token_recheck_seconds", "ready_timeout_seconds"):
            if not 0 < getattr(self, name) <= 3600:
                raise ValueError(f"{name} must be in (0, 3600] seconds")

    def requests_per_owner(self, pool_size: int | None) -> int:
        """The per-owner limit for a pool of ``pool_size`` connections (half of it, at least 1)."""
        if self.max_requests_per_owner is not None:
            return self.max_requests_per_owner
        return max(1, (pool_size or 8) // 2)


def _problem_bytes(status: int, code: str, title: str, detail: str) -> bytes:
    body = {"type": ERROR_TYPE + code, "title": title, "status": status, "detail": detail}
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, answering a request head past ``h11_max_incomplete_event_size``
    with 431 (problem+json) instead of uvicorn's generic 400.

    h11 refuses to buffer more than that many bytes of an incomplete event (a request head
    still arriving) and raises; uvicorn then calls :meth:`send_400_response`. Whether it
    was the size is read from h11's own buffer, which still holds the oversized head.
    """

    def send_400_response(self, msg: str) -> None:
        limit = self.config.h11_max_incomplete_event_size
        if limit is None or len(self.conn.trailing_data[0]) <= limit:
            super().send_400_response(msg)
            return
        body = _problem_bytes(
            431,
            "http-431",
            "Request Header Fields Too Large",
            f"the request line and headers must be at most {limit} bytes",
        )
        headers = [
            (b"content-type", PROBLEM_JSON.encode("ascii")),
            (b"content-length", str(len(body)).encode("ascii")),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=431, headers=headers, reason=b"Request Header Fields Too Large"),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()


def uvicorn_options(limits: Limits) -> dict[str, Any]:
    """Options for ``uvicorn.run`` / ``uvicorn.Config`` that enforce ``limits.max_header_bytes``."""
    return {"http": LimitedH11Protocol, "h11_max_incomplete_event_size": limits.max_header_bytes}
