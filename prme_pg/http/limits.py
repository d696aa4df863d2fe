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
* **Slow and idle connections** (issue 32): a request head must arrive whole within
  ``request_head_timeout`` seconds of its first byte (or of the connection's opening), and
  its body within ``request_body_timeout`` seconds of the head, else 408 and the
  connection is closed (uvicorn bounds only the idle time between requests:
  ``keep_alive_timeout``, its ``timeout_keep_alive``). At most ``max_connections`` are open
  at once and ``max_connections_per_peer`` from one peer address (the unix socket's peers
  have none: only the total applies); a connection past either is closed as soon as it is
  accepted, before a byte of it is read, so one client cannot use up the process's file
  descriptors. :class:`LimitedHttpToolsProtocol` enforces them.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections import Counter
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
DEFAULT_REQUEST_HEAD_TIMEOUT = 10.0
DEFAULT_REQUEST_BODY_TIMEOUT = 60.0
DEFAULT_KEEP_ALIVE_TIMEOUT = 5.0
DEFAULT_MAX_CONNECTIONS = 512
DEFAULT_MAX_CONNECTIONS_PER_PEER = 64


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
    #: Seconds a request head may take to arrive whole, and its body after it (else 408, closed).
    request_head_timeout: float = DEFAULT_REQUEST_HEAD_TIMEOUT
    request_body_timeout: float = DEFAULT_REQUEST_BODY_TIMEOUT
    #: Seconds an idle connection stays open between requests (uvicorn's timeout_keep_alive).
    keep_alive_timeout: float = DEFAULT_KEEP_ALIVE_TIMEOUT
    #: Connections open at once, in all and from one peer address; one past either is closed.
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_peer: int = DEFAULT_MAX_CONNECTIONS_PER_PEER

    def __post_init__(self) -> None:
        for name in (
            "max_body_bytes",
            "max_header_bytes",
            "max_streams_per_owner",
            "max_connections",
            "max_connections_per_peer",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        per_owner = self.max_requests_per_owner
        if per_owner is not None and (isinstance(per_owner, bool) or not isinstance(per_owner, int) or per_owner < 1):
            raise ValueError(f"max_requests_per_owner must be a positive integer or None, got {per_owner!r}")
        if not 0 <= self.slot_wait_seconds <= 60:
            raise ValueError("slot_wait_seconds must be in [0, 60] seconds")
        for name in (
            "token_recheck_seconds",
            "ready_timeout_seconds",
            "request_head_timeout",
            "request_body_timeout",
            "keep_alive_timeout",
        ):
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


class Connections:
    """The connections one server has open, in all and per peer address (shared by its protocols)."""

    def __init__(self, total: int, per_peer: int) -> None:
        self.total, self.per_peer = total, per_peer
        self.open = 0
        self.peers: Counter[str] = Counter()

    def admit(self, peer: str | None) -> bool:
        if self.open >= self.total or (peer is not None and self.peers[peer] >= self.per_peer):
            return False
        self.open += 1
        if peer is not None:
            self.peers[peer] += 1
        return True

    def release(self, peer: str | None) -> None:
        self.open -= 1
        if peer is not None:
            self.peers[peer] -= 1
            if self.peers[peer] <= 0:
                del self.peers[peer]


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (the fast one) with bounds on the request head, on the time a
    request may take to arrive, and on the connections open at once (module docstring).

    Bytes of a request line and headers past ``max_head_bytes`` are answered 431
    (problem+json) and the connection is closed, before the parser sees them: httptools
    itself has no bound (it would buffer a 100 MB header value whole), so the bytes are
    counted here as they arrive, up to the blank line that ends the head. Requests
    pipelined behind another on one connection are measured by the owner gate instead,
    from their parsed headers.

    A head not whole within ``head_timeout`` seconds of its first byte (or of the
    connection's opening), or a body not whole within ``body_timeout`` seconds of its head,
    is answered 408 (unless a response has started) and the connection is closed: uvicorn
    times only the idle gap between requests. A connection past ``connections``' limits is
    closed as soon as it is accepted.
    """

    def __init__(
        self,
        *args: Any,
        max_head_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        head_timeout: float = DEFAULT_REQUEST_HEAD_TIMEOUT,
        body_timeout: float = DEFAULT_REQUEST_BODY_TIMEOUT,
        connections: Connections | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.max_head_bytes = max_head_bytes
        self.head_timeout, self.body_timeout = head_timeout, body_timeout
        self.connection_limits = connections
        self._in_head, self._head_bytes, self._tail = True, 0, b""
        self._deadline: asyncio.TimerHandle | None = None
        self._admitted = False
        self._peer: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._peer = self.client[0] if self.client else None
        if self.connection_limits is not None and not self.connection_limits.admit(self._peer):
            transport.abort()  # past the limits: the descriptor is freed at once, nothing is read
            return
        self._admitted = True
        self._start_deadline(self.head_timeout, "the request head")

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_deadline()
        if self._admitted and self.connection_limits is not None:
            self._admitted = False
            self.connection_limits.release(self._peer)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            if self._deadline is None:  # the first byte of a request after an idle keep-alive gap
                self._start_deadline(self.head_timeout, "the request head")
            window = self._tail + data
            end = window.find(b"\r\n\r\n")
            if end < 0:
                self._head_bytes += len(data)
                self._tail = window[-3:]
            else:
                self._head_bytes += end + 4 - len(self._tail)
                self._in_head, self._tail = False, b""
            if self._head_bytes > self.max_head_bytes:
                self._stop_deadline()
                self._refuse_head()
                return
            if not self._in_head:
                self._start_deadline(self.body_timeout, "the request body")
        super().data_received(data)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._stop_deadline()
        self._in_head, self._head_bytes, self._tail = True, 0, b""

    def _start_deadline(self, seconds: float, what: str) -> None:
        self._stop_deadline()
        self._deadline = self.loop.call_later(seconds, self._too_slow, seconds, what)

    def _stop_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self, seconds: float, what: str) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if self._in_head or (cycle is not None and not cycle.response_started):
            detail = f"{what} did not arrive within {seconds:g} seconds"
            self._write_problem(408, b"Request Timeout", "http-408", detail)
            if cycle is not None and not self._in_head:
                cycle.response_started = cycle.response_complete = True  # the app's answer is dropped
        self.transport.close()

    def _refuse_head(self) -> None:
        detail = f"the request line and headers must be at most {self.max_head_bytes} bytes"
        self._write_problem(431, b"Request Header Fields Too Large", "http-431", detail)
        self.transport.close()

    def _write_problem(self, status: int, reason: bytes, code: str, detail: str) -> None:
        body = _problem_bytes(status, code, reason.decode("ascii"), detail)
        head = (
            b"HTTP/1.1 "
            + str(status).encode("ascii")
            + b" "
            + reason
            + b"\r\n"
            + b"content-type: "
            + PROBLEM_JSON.encode("ascii")
            + b"\r\n"
            + b"content-length: "
            + str(len(body)).encode("ascii")
            + b"\r\n"
            + b"connection: close\r\n\r\n"
        )
        self.transport.write(head + body)


def uvicorn_options(limits: Limits) -> dict[str, Any]:
    """Options for ``uvicorn.Config`` that enforce ``limits``' head size, read deadlines and
    connection caps (one :class:`Connections` per call: call it once per server)."""
    protocol = functools.partial(
        LimitedHttpToolsProtocol,
        max_head_bytes=limits.max_header_bytes,
        head_timeout=limits.request_head_timeout,
        body_timeout=limits.request_body_timeout,
        connections=Connections(limits.max_connections, limits.max_connections_per_peer),
    )
    return {"http": protocol, "timeout_keep_alive": limits.keep_alive_timeout}
