"""What one request, and one owner, may cost the server (issue 17; docs/HTTP.md, "Limits").

* **Header bytes** (``max_header_bytes``, default 16 KiB: the request line and every
  header). Enforced by the HTTP protocol itself while the head is still arriving:
  :class:`LimitedHttpToolsProtocol` (uvicorn's httptools protocol, which has no such
  bound of its own) counts a head's bytes as they come and answers 431 as soon as they
  pass the limit, then closes the connection; the parser never sees them. A request
  pipelined behind another is measured by :class:`~.gate.OwnerGate` from its parsed
  headers and answered 431 the same way.
* **Body bytes** (``max_body_bytes``, default 2 MiB: a 1 MiB ledger payload in its
  envelope, with room for whitespace), enforced by :class:`~.gate.OwnerGate`: 413 before
  a byte is read when Content-Length says more (before authentication: it costs
  nothing), and as soon as a chunked body passes the limit otherwise.
* **Authentication before the body** (:class:`OwnerGate`): a request without a live
  token is answered 401 from its headers alone; its body is never read.
* **Concurrent requests per owner** (``max_requests_per_owner``; default half the
  connection pool, at least 1) and **concurrent event streams per owner**
  (``max_streams_per_owner``, default 4, counted apart: a stream holds no connection
  between its polls). A request past its owner's limit waits up to
  ``slot_wait_seconds`` (1 s) for a slot, so a burst (a page loading its parts) is
  absorbed; as many may wait as may run, and one more than that, or one that waited in
  vain, is 429 with ``Retry-After: 1``. A stream past its limit is 429 at once. So one
  owner's flood leaves the rest of the pool to everyone else; each call is bounded in
  time by the client's ``statement_timeout``.
* **Token re-check on streams** (``token_recheck_seconds``, default 5): a stream ends
  within that long after its token is revoked.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .problems import ERROR_TYPE, PROBLEM_JSON

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_HEADER_BYTES",
    "LimitedHttpToolsProtocol",
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
    #: A request of an owner whose slots are all busy waits this long for one, then is 429
    #: (as many may wait as may run; any more are 429 at once). Streams never wait.
    slot_wait_seconds: float = 1.0
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
        if not 0 <= self.slot_wait_seconds <= 60:
            raise ValueError("slot_wait_seconds must be in [0, 60] seconds")
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


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (the fast one) with a bound on the request head: bytes of a
    request line and headers past ``max_head_bytes`` are answered 431 (problem+json) and the
    connection is closed, before the parser sees them.

    httptools itself has no bound (it would buffer a 100 MB header value whole), so the
    bytes are counted here as they arrive, up to the blank line that ends the head.
    Requests pipelined behind another on one connection are measured by the owner gate
    instead, from their parsed headers.
    """

    def __init__(self, *args: Any, max_head_bytes: int = DEFAULT_MAX_HEADER_BYTES, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_head_bytes = max_head_bytes
        self._in_head, self._head_bytes, self._tail = True, 0, b""

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            window = self._tail + data
            end = window.find(b"\r\n\r\n")
            if end < 0:
                self._head_bytes += len(data)
                self._tail = window[-3:]
            else:
                self._head_bytes += end + 4 - len(self._tail)
                self._in_head, self._tail = False, b""
            if self._head_bytes > self.max_head_bytes:
                self._refuse_head()
                return
        super().data_received(data)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_bytes, self._tail = True, 0, b""

    def _refuse_head(self) -> None:
        detail = f"the request line and headers must be at most {self.max_head_bytes} bytes"
        body = _problem_bytes(431, "http-431", "Request Header Fields Too Large", detail)
        head = (
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            + b"content-type: "
            + PROBLEM_JSON.encode("ascii")
            + b"\r\n"
            + b"content-length: "
            + str(len(body)).encode("ascii")
            + b"\r\n"
            + b"connection: close\r\n\r\n"
        )
        self.transport.write(head + body)
        self.transport.close()


def uvicorn_options(limits: Limits) -> dict[str, Any]:
    """Options for ``uvicorn.run`` / ``uvicorn.Config`` that enforce ``limits.max_header_bytes``."""
    return {"http": functools.partial(LimitedHttpToolsProtocol, max_head_bytes=limits.max_header_bytes)}
