"""The owner gate: bound the body, authenticate from the headers before any body is read, then
hold one of the owner's request slots while the request runs (issue 17, items 3 and 5; see
:mod:`.limits`).

An ASGI middleware, because FastAPI reads and parses a body before it solves a route's
dependencies: a token check done as a dependency let a 200 MB body without a token be
read into memory before its 401. The gate answers 401 from the ``Authorization`` header
alone; the body of a refused request is never read (the server closes the connection
rather than drain it).

It then counts the owner's requests in flight (event streams apart); one past the limit
is 429 with ``Retry-After``. The authenticated token is left in the request's state
(``prme_token``) for the ``Owner`` dependency, so a request still costs one token lookup.

Trusted loopback mode (:class:`TrustedLoopback`, ``prme-pg serve --trusted-loopback``; off by
default; docs/SECURITY.md): a ledger request (``/api/v2/operations...``, ``/api/v2/events``)
from a loopback peer without an ``Authorization`` header passes without a token, marked
trusted in the request's state (``prme_trusted``); the ledger's routes then take the owner
from the payload's ``user_id`` or the configured default. A request with a token is checked
as always; every other route still needs one.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import psycopg
from psycopg_pool import PoolTimeout
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..sqlstate import database_unavailable
from ..tokens import parse_token
from ..validation import is_loopback
from .dependencies import GATE_STATE_KEY
from .limits import Limits
from .problems import MISSING_SCHEMA, RETRY_SOON, problem, server_failed, unavailable

__all__ = [
    "PUBLIC_PATHS",
    "PUBLIC_PREFIX",
    "STREAM_PATH",
    "TRUSTED_PATH",
    "TRUSTED_STATE_KEY",
    "OwnerGate",
    "Slots",
    "SlotsFull",
    "TrustedLoopback",
    "is_loopback",
    "is_public",
    "trusted_of",
]

#: Answered without a token: liveness, readiness (probes have no owner token) and the API's description.
PUBLIC_PATHS = frozenset({"/health", "/ready", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
#: ... and the review console's pages under /ui (docs/CONSOLE.md: the app in the browser asks for a token).
PUBLIC_PREFIX = "/ui"


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path == PUBLIC_PREFIX or path.startswith(PUBLIC_PREFIX + "/")


@dataclass(frozen=True, slots=True)
class TrustedLoopback:
    """Trusted loopback mode: the ledger's routes answer loopback peers without a token, for the
    owner named in the payload (``user_id``) or ``default_user``. ``unix_socket``: the server
    listens on a unix socket only (``serve --uds``), whose peers have no address and are all
    on this machine, behind the socket file's permissions.

    ``host`` and ``port``: the loopback address the server is bound to. A tokenless request
    must name it (or ``localhost``) with that port in its ``Host`` header, else 421, and an
    ``Origin`` header, if any, must be that same origin, else 403: a web page on this machine
    whose DNS name was rebound to 127.0.0.1 names its own host, and a browser adds its own
    origin to what the page sends (issue 32). On a unix socket, which no browser reaches,
    any ``Origin`` is refused."""

    default_user: str | None = None
    unix_socket: bool = False
    host: str | None = None
    port: int | None = None

    def allowed_hosts(self) -> frozenset[str]:
        """The ``Host`` values a tokenless request may carry (TCP only; lowercase)."""
        if self.host is None or self.port is None:
            return frozenset()
        names = {self.host.lower(), "localhost"}
        if self.host == "localhost":
            names |= {"127.0.0.1", "::1"}
        bracketed = {f"[{name}]" if ":" in name else name for name in names}
        return frozenset(f"{name}:{self.port}" for name in bracketed)

    def refusal(self, headers: Headers) -> tuple[int, str] | None:
        """Why a tokenless request with these headers is refused (status, detail), or None."""
        origin = headers.get("origin")
        if self.unix_socket:
            if origin is not None:
                return 403, "a request with an Origin (a browser's) needs a token on this server"
            return None
        hosts = self.allowed_hosts()
        if headers.get("host", "").lower() not in hosts:
            return 421, "without a token, the Host header must name this server: " + ", ".join(sorted(hosts))
        if origin is not None and origin.lower() not in {f"http://{host}" for host in hosts}:
            return 403, "without a token, a request from another origin is refused"
        return None


#: The routes trusted loopback mode opens: the ledger's.
TRUSTED_PATH = re.compile(r"^/api/v2/(events|operations(/[^/]+(/events)?)?)$")
#: Where the gate leaves the :class:`TrustedLoopback` of a request it let pass without a token.
TRUSTED_STATE_KEY = "prme_trusted"
#: The slots of trusted requests: one pool, whatever owner their payloads name.
_TRUSTED_SLOTS = "\x00trusted"


def trusted_of(state: object) -> TrustedLoopback | None:
    """The trusted mode a request passed the gate under without a token, if it did."""
    trusted = getattr(state, TRUSTED_STATE_KEY, None)
    return trusted if isinstance(trusted, TrustedLoopback) else None


_ROUTES_KEY = "prme_pg.gate.routes"
#: Server-Sent Events routes: long-lived, counted against max_streams_per_owner instead.
STREAM_PATH = re.compile(r"^/api/v2/(events|operations/[^/]+/events)$")


class SlotsFull(Exception):
    """An owner has no free slot and no room to wait for one."""


class Slots:
    """At most ``limit`` requests of one owner run at once; up to ``limit`` more wait for a slot,
    each at most ``wait`` seconds (a burst, such as a page loading its parts, is absorbed); any
    more are refused at once. Per owner state exists only while the owner has requests in."""

    def __init__(self, limit: int, wait: float) -> None:
        self.limit, self.wait = limit, wait
        self._users: Counter[str] = Counter()
        self._semaphores: dict[str, asyncio.Semaphore] = {}

    def full(self, owner: str) -> bool:
        """No slot and no room to wait for one: checked before the token lookup too."""
        return self._users[owner] >= (2 * self.limit if self.wait > 0 else self.limit)

    @contextlib.asynccontextmanager
    async def slot(self, owner: str) -> AsyncIterator[None]:
        if self.full(owner):
            raise SlotsFull
        self._users[owner] += 1
        semaphore = self._semaphores.setdefault(owner, asyncio.Semaphore(self.limit))
        try:
            if semaphore.locked() and self.wait <= 0:
                raise SlotsFull
            try:
                await asyncio.wait_for(semaphore.acquire(), self.wait if self.wait > 0 else None)
            except TimeoutError:
                raise SlotsFull from None
            try:
                yield
            finally:
                semaphore.release()
        finally:
            self._users[owner] -= 1
            if self._users[owner] <= 0:
                del self._users[owner]
                del self._semaphores[owner]


class OwnerGate:
    """ASGI middleware: 401 before the body, then at most N requests (and M streams) per owner."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limits: Limits,
        requests_per_owner: int,
        routes: Sequence[BaseRoute] = (),
        trusted: TrustedLoopback | None = None,
    ) -> None:
        """``routes``: the app's routes, to name the one a refused request was meant for;
        ``trusted``: trusted loopback mode (module docstring), off when None."""
        self.app = app
        self.limits = limits
        self.trusted = trusted
        self.routes = tuple(routes)
        self._requests = Slots(requests_per_owner, limits.slot_wait_seconds)
        self._streams = Slots(limits.max_streams_per_owner, 0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[_ROUTES_KEY] = self.routes
        if _head_bytes(scope) > self.limits.max_header_bytes:
            # One the protocol did not measure (pipelined behind another request on its connection).
            detail = f"the request line and headers must be at most {self.limits.max_header_bytes} bytes"
            await _refuse(problem(431, "http-431", "Request Header Fields Too Large", detail), scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limits.max_body_bytes:
            await _too_large(self.limits.max_body_bytes, scope, receive, send)  # before a byte of it is read
            return
        receive = _limited(receive, self.limits.max_body_bytes)
        if is_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        credentials = _bearer(scope)
        if credentials is None and self._trusts(scope):
            await self._pass_trusted(scope, receive, send)
            return
        if credentials is None:
            await _unauthorized("an Authorization: Bearer token is required", scope, receive, send)
            return
        token = parse_token(credentials)
        if token is None:
            await _unauthorized("the bearer token is not valid", scope, receive, send)
            return
        stream = STREAM_PATH.match(scope["path"]) is not None
        slots, what = (self._streams, "event streams") if stream else (self._requests, "requests")
        owner = token.user_id  # as the token names it: checked below, before it takes a slot
        if slots.full(owner):
            # Before the token lookup, so a flood past its limit costs the database nothing. Only
            # authenticated requests take slots, so a forged token cannot use up another owner's.
            await _too_many(slots.limit, what, scope, receive, send)
            return
        try:
            live = await scope["app"].state.client.authenticate_api_token(token.user_id, token.sha256)
        except (psycopg.Error, PoolTimeout) as exc:
            await _database_failed(exc, scope, receive, send)
            return
        if not live:
            await _unauthorized("the bearer token is not valid", scope, receive, send)
            return
        scope.setdefault("state", {})[GATE_STATE_KEY] = token
        try:
            async with slots.slot(owner):
                await self.app(scope, receive, send)
        except SlotsFull:
            await _too_many(slots.limit, what, scope, receive, send)

    def _trusts(self, scope: Scope) -> bool:
        """Trusted mode is on, the request is the ledger's and its peer is on loopback (or on the
        unix socket the server listens on alone)."""
        if self.trusted is None or TRUSTED_PATH.match(scope["path"]) is None:
            return False
        peer = scope.get("client")
        local = self.trusted.unix_socket if peer is None else is_loopback(str(peer[0]))
        return local and "authorization" not in Headers(scope=scope)

    async def _pass_trusted(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.trusted is not None
        refused = self.trusted.refusal(Headers(scope=scope))
        if refused is not None:
            status, detail = refused
            title = "Misdirected Request" if status == 421 else "Forbidden"
            await _refuse(problem(status, f"http-{status}", title, detail), scope, receive, send)
            return
        stream = STREAM_PATH.match(scope["path"]) is not None
        slots, what = (self._streams, "event streams") if stream else (self._requests, "requests")
        scope.setdefault("state", {})[TRUSTED_STATE_KEY] = self.trusted
        try:
            async with slots.slot(_TRUSTED_SLOTS):
                await self.app(scope, receive, send)
        except SlotsFull:
            await _too_many(slots.limit, what, scope, receive, send)


async def _refuse(response: Response, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer a request the gate refuses, with the route it was meant for in ``scope["route"]``
    (what the router would have set: the gate runs before routing), so that metrics count
    it under its route template."""
    for route in scope.get(_ROUTES_KEY, ()):
        match, _ = route.matches(scope)
        if match is Match.FULL:
            scope["route"] = route
            break
    await response(scope, receive, send)


def _head_bytes(scope: Scope) -> int:
    """The size of the request line and headers as they came (CRLFs and separators included)."""
    line = len(scope["method"]) + len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") + 12
    return line + sum(len(name) + len(value) + 4 for name, value in scope["headers"]) + 2


def _content_length(scope: Scope) -> int | None:
    value = Headers(scope=scope).get("content-length")
    return int(value) if value is not None and value.isdigit() else None  # the parser refuses a malformed one


def _limited(receive: Receive, limit: int) -> Receive:
    """``receive`` that raises 413 (an HTTPException, answered as problem+json by the app's
    handlers) as soon as the body passes ``limit`` bytes: a chunked body has no Content-Length
    to check first. FastAPI's own ``max_body_size`` is not used: it answers text/plain, and
    replaces any response to a request whose Content-Length is too large, a 401 included."""
    received = 0

    async def receive_within_limit() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise HTTPException(413, _too_large_detail(limit))
        return message

    return receive_within_limit


def _too_large_detail(limit: int) -> str:
    return f"the request body must be at most {limit} bytes"


async def _too_large(limit: int, scope: Scope, receive: Receive, send: Send) -> None:
    await _refuse(problem(413, "http-413", "Content Too Large", _too_large_detail(limit)), scope, receive, send)


def _bearer(scope: Scope) -> str | None:
    """The credentials of ``Authorization: Bearer <credentials>``, or None."""
    scheme, _, credentials = Headers(scope=scope).get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return None
    return credentials.strip()


async def _too_many(limit: int, what: str, scope: Scope, receive: Receive, send: Send) -> None:
    detail = f"at most {limit} {what} of one owner run at once; retry after the ones in flight"
    await _refuse(problem(429, "http-429", "Too Many Requests", detail, RETRY_SOON), scope, receive, send)


async def _unauthorized(detail: str, scope: Scope, receive: Receive, send: Send) -> None:
    response = problem(401, "unauthorized", "Unauthorized", detail, {"WWW-Authenticate": "Bearer"})
    await _refuse(response, scope, receive, send)


async def _database_failed(exc: BaseException, scope: Scope, receive: Receive, send: Send) -> None:
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate not in MISSING_SCHEMA and (isinstance(exc, PoolTimeout) or database_unavailable(exc)):
        await _refuse(unavailable(exc), scope, receive, send)
        return
    await _refuse(server_failed(exc, "the token lookup failed"), scope, receive, send)
