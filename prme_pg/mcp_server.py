"""``prme-pg mcp``: the memory engine as a Model Context Protocol server.

Seven tools, named for what an agent does (remember, recall, confirm, correct,
record_outcome, review, prompt), and one resource template (the owner's current
snapshot of a scope), over stdio or streamable HTTP, on PostgreSQL or a memory pack.
Every tool is a thin call of :class:`~prme_pg.AsyncMemoryClient`; the rules stay in
the engine. See docs/MCP.md.

Retries. An agent (or its host) may send the same tool call again after a lost
answer. ``remember``, ``confirm`` and ``record_outcome`` therefore derive their keys
from the call itself: :func:`call_key` is a uuid v5 of the owner, the tool and the
arguments (RFC 8785 JSON), so the same call is the same ``request_id`` (and the same
``node_id`` / ``event_id``), and the engine answers the repeat as a replay.

Errors come back as MCP tool errors (``isError``) whose text starts with the
SQLSTATE and its meaning (``PR404 not found: ...``); nothing raises through to the
SDK, so no traceback reaches the agent.

Limits (issue 32; docs/MCP.md, docs/HTTP.md "Limits"): the HTTP transport runs on the HTTP
API's protocol (:func:`prme_pg.http.uvicorn_options`: the request-head limit, the head and
body deadlines, the connection caps), and each owner's tool calls take the HTTP API's
owner slots (:class:`prme_pg.http.gate.Slots`): past them a call is the tool error
``429 too many requests: ...``, so one owner's flood leaves the pool to the others.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal
from uuid import NAMESPACE_URL, UUID, uuid5

import psycopg
import rfc8785
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp_types import ToolAnnotations
from pydantic import Field, ValidationError
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as ASGIScope

from .aio import AsyncMemoryClient
from .backends.postgres import is_dsn
from .errors import IdempotencyConflict, NotFoundError, PrmeError
from .http.gate import Slots, SlotsFull
from .http.limits import Limits
from .tokens import parse_token
from .validation import is_loopback

__all__ = [
    "MCP_NAMESPACE",
    "TOOL_NAMES",
    "BearerOwner",
    "call_key",
    "create_server",
    "http_app",
    "is_loopback",
    "run",
]

log = logging.getLogger(__name__)

#: The uuid v5 namespace of keys derived from tool calls: uuid5(NAMESPACE_URL, "urn:prme-pg:mcp").
MCP_NAMESPACE = uuid5(NAMESPACE_URL, "urn:prme-pg:mcp")

TOOL_NAMES = ("remember", "recall", "confirm", "correct", "record_outcome", "review", "prompt")

#: Where BearerOwner leaves the token's owner for the tools: the request's ASGI state.
OWNER_STATE = "prme_user_id"

MEANINGS = {
    "PR404": "not found (missing, archived, or not this owner's)",
    "PR409": "conflict (the key or id was already used for something else)",
    "PR422": "invalid input",
    "XX001": "integrity failure (stored data does not verify)",
}

INSTRUCTIONS = (
    "Long-term memory of the user. Before answering, recall what you know (recall, or prompt for a "
    "budgeted digest). When the user states a durable fact or preference, remember it with their words as "
    "evidence. When the user affirms a memory you used, confirm it; when they correct one, call correct with "
    "their message and the ids of the memories you showed. Ids come from remember and recall."
)

# -- argument types: JSON schema with bounds and descriptions an LLM can act on --

Content = Annotated[str, Field(min_length=1, max_length=65536, description="the memory, one self-contained statement")]
Evidence = Annotated[
    str | None,
    Field(min_length=1, max_length=65536, description="the user's own words that support it"),
]
NodeId = Annotated[UUID, Field(description="a memory id, as returned by remember or recall")]
ScopeName = Annotated[
    str,
    Field(
        default="personal",
        pattern=r"^[a-z][a-z0-9_-]{0,62}$",
        description="which part of the user's life it belongs to (e.g. personal, work)",
    ),
]
Scopes = Annotated[
    list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,62}$")]],
    Field(min_length=1, max_length=64, description="scopes in priority order"),
]
ThreadId = Annotated[str | None, Field(min_length=1, max_length=256, description="the conversation's id, if known")]
OutcomeKind = Literal["explicit_reinforcement", "implicit_success", "neutral_exposure", "explicit_correction"]


def call_key(user_id: str, tool: str, arguments: Mapping[str, Any]) -> UUID:
    """The request id of a tool call: uuid v5 of the owner, the tool and the arguments (RFC 8785).

    The same call made again (a retry) is the same key; any other argument is another key.
    """
    document: dict[str, Any] = {"tool": tool, "user_id": user_id, "arguments": dict(arguments)}
    return uuid5(MCP_NAMESPACE, rfc8785.dumps(document).decode("utf-8"))


def _jsonable(value: Any) -> Any:
    """Results as plain JSON: UUIDs and times as text, exact decimals as numbers, durations in seconds."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _jsonable(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


@contextlib.contextmanager
def _tool_errors() -> Iterator[None]:
    """Turn what the engine and the database raise into a ToolError the agent can read."""
    try:
        yield
    except ToolError:
        raise
    except PrmeError as exc:
        meaning = MEANINGS.get(exc.sqlstate)
        raise ToolError(f"{exc.sqlstate} {meaning}: {exc}" if meaning else str(exc)) from exc
    except psycopg.OperationalError as exc:
        raise ToolError(f"the database is unavailable: {str(exc).strip()}") from exc
    except psycopg.Error as exc:
        raise ToolError(f"database error {exc.sqlstate or ''}: {str(exc).strip()}".replace("  ", " ")) from exc


def _node(node: Any) -> dict[str, Any]:
    """What an agent needs of a memory (the whole node_view would be noise in its context)."""
    keep = (
        "id",
        "content",
        "scope",
        "namespace",
        "kind",
        "lifecycle_state",
        "stability",
        "confidence_base",
        "reinforcement_boost",
        "last_reinforced_at",
        "version",
    )
    document: dict[str, Any] = {name: _jsonable(getattr(node, name)) for name in keep}
    document["node_id"] = document.pop("id")
    return document


OwnerFn = Callable[[Context], str]


def _owner_resolver(user_id: str | None) -> OwnerFn:
    """The owner of a call: the server's --user, else the bearer token's owner (streamable HTTP)."""

    def owner(ctx: Context) -> str:
        if user_id is not None:
            return user_id
        request = ctx.request_context.request
        scope = getattr(request, "scope", None) or {}
        owner_id = (scope.get("state") or {}).get(OWNER_STATE)
        if not isinstance(owner_id, str):
            raise ToolError("no owner: start the server with --user, or call it over HTTP with a bearer token")
        return owner_id

    return owner


class _Server(MCPServer):
    """MCPServer whose argument errors read as one line per field, without pydantic's
    "For further information visit https://errors.pydantic.dev/..." (noise for a model)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if not isinstance(cause, ValidationError):
                raise
            fields = "; ".join(
                f"{'.'.join(str(part) for part in error['loc']) or 'arguments'}: {error['msg']}"
                for error in cause.errors(include_url=False)
            )
            raise ToolError(f"Error executing tool {name}: invalid arguments: {fields}") from cause


def create_server(client: AsyncMemoryClient, *, user_id: str | None = None, limits: Limits | None = None) -> MCPServer:
    """The MCP server over an open client, for one owner (``user_id``) or the token's owner per
    request; ``limits``: the calls of one owner at once (default half the pool, at least 1)."""
    server: MCPServer = _Server("prme-pg", instructions=INSTRUCTIONS, log_level="WARNING")
    owner = _owner_resolver(user_id)
    limits = limits or Limits()
    pool = getattr(client.backend, "pool", None)
    slots = Slots(limits.requests_per_owner(pool and pool.max_size), limits.slot_wait_seconds)

    @contextlib.asynccontextmanager
    async def call(ctx: Context) -> AsyncIterator[str]:
        """A tool call: its owner, holding one of the owner's slots; errors as tool errors."""
        with _tool_errors():
            user = owner(ctx)
            try:
                async with slots.slot(user):
                    yield user
            except SlotsFull:
                raise ToolError(
                    f"429 too many requests: at most {slots.limit} calls of one owner run at once; "
                    "retry after the ones in flight"
                ) from None

    writes = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)
    reads = ToolAnnotations(read_only_hint=True, idempotent_hint=True)

    async def add_evidence(
        user: str, content: str, *, event_id: UUID, scope: str, namespace: str, **payload: str
    ) -> None:
        with contextlib.suppress(IdempotencyConflict):  # a retried call recorded it already
            await client.add_event(
                content, user_id=user, scope=scope, namespace=namespace, payload=payload, event_id=event_id
            )

    @server.tool(
        description="Remember a durable fact or preference of the user, with their words as evidence. "
        "Returns the memory's node_id. Calling it again with the same arguments returns the same memory.",
        annotations=writes,
    )
    async def remember(
        ctx: Context,
        content: Content,
        evidence: Evidence = None,
        scope: ScopeName = "personal",
        kind: Annotated[str, Field(min_length=1, max_length=64, description="e.g. fact")] = "fact",
    ) -> dict[str, Any]:
        async with call(ctx) as user:
            key = call_key(user, "remember", {"content": content, "evidence": evidence, "scope": scope, "kind": kind})
            try:
                node = await client.add_node(content, user_id=user, scope=scope, kind=kind, node_id=key)
                replayed = False
            except IdempotencyConflict:  # the memory this call made before
                try:
                    node = await client.get_node(key, user_id=user)
                except NotFoundError:
                    raise ToolError("this memory was remembered before and has been archived since") from None
                replayed = True
            evidence_id = None
            if evidence is not None:
                evidence_id = uuid5(key, "evidence")
                await add_evidence(
                    user, evidence, event_id=evidence_id, scope=scope, namespace=node.namespace, remembers=str(node.id)
                )
        return {**_node(node), "evidence_id": _jsonable(evidence_id), "replayed": replayed}

    @server.tool(
        description="Find what you know about the user that matches a query, best first (blank query: "
        "the strongest memories). Use it before answering.",
        annotations=reads,
    )
    async def recall(
        ctx: Context,
        query: Annotated[str | None, Field(max_length=4096, description="words to look for")] = None,
        scopes: Annotated[list[str] | None, Field(max_length=64, description="only these")] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="at most this many")] = 10,
    ) -> dict[str, Any]:
        async with call(ctx) as user:
            hits = await client.recall(query, user_id=user, scopes=scopes, max_count=limit)
        return {
            "hits": [
                {
                    "node_id": str(hit.id),
                    "content": hit.content,
                    "scope": hit.scope,
                    "kind": hit.kind,
                    "rank": hit.rank,
                    "score": round(hit.score, 4),
                    "confidence": round(hit.effective_confidence, 4),
                    "lifecycle_state": hit.lifecycle_state,
                }
                for hit in hits
            ]
        }

    @server.tool(
        description="Confirm a memory the user just affirmed, with their words (evidence) or an event id "
        "(evidence_id). It counts once per memory and evidence: retrying the same call is answered as a "
        "replay and changes nothing.",
        annotations=writes,
    )
    async def confirm(
        ctx: Context,
        node_id: NodeId,
        evidence: Evidence = None,
        evidence_id: Annotated[
            UUID | None, Field(description="an event id returned by remember, instead of evidence")
        ] = None,
    ) -> dict[str, Any]:
        if evidence is not None and evidence_id is not None:
            raise ToolError("PR422 invalid input: pass evidence or evidence_id, not both")
        async with call(ctx) as user:
            key = call_key(
                user,
                "confirm",
                {"node_id": str(node_id), "evidence": evidence, "evidence_id": _jsonable(evidence_id)},
            )
            if evidence is not None:
                shown = await client.get_node(node_id, user_id=user)  # evidence shares the memory's scope
                evidence_id = uuid5(key, "evidence")
                await add_evidence(
                    user,
                    evidence,
                    event_id=evidence_id,
                    scope=shown.scope,
                    namespace=shown.namespace,
                    confirms=str(node_id),
                )
            node = await client.reinforce(node_id, evidence_id, user_id=user, request_id=key)
        return {**_node(node), "evidence_id": _jsonable(evidence_id), "request_id": str(key), "replayed": node.replayed}

    @server.tool(
        description="The user corrected something you said: pass their message and the ids of the memories "
        "you had shown. The engine links it to the memory it contradicts, or files it for review.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False),
    )
    async def correct(
        ctx: Context,
        message: Annotated[str, Field(min_length=1, max_length=65536, description="the user's correcting message")],
        shown_node_ids: Annotated[
            list[UUID], Field(max_length=1000, description="ids of the memories shown to the user before it")
        ],
        thread_id: ThreadId = None,
    ) -> dict[str, Any]:
        async with call(ctx) as user:
            link = await client.link_correction(message, shown_node_ids, user_id=user, thread_id=thread_id)
        return {str(key): value for key, value in _jsonable(link).items()}

    @server.tool(
        description="Record how a memory fared: explicit_reinforcement (the user said it is right), "
        "implicit_success (it helped), neutral_exposure (shown, no signal) or explicit_correction (it was "
        "wrong). A retry of the same call counts once.",
        annotations=writes,
    )
    async def record_outcome(
        ctx: Context,
        node_id: NodeId,
        outcome: Annotated[OutcomeKind, Field(description="what happened")],
        notes: Annotated[str | None, Field(min_length=1, max_length=4096, description="why")] = None,
        thread_id: ThreadId = None,
        evidence_id: Annotated[UUID | None, Field(description="an event that shows it")] = None,
    ) -> dict[str, Any]:
        async with call(ctx) as user:
            arguments = {"node_id": str(node_id), "outcome": outcome, "notes": notes, "thread_id": thread_id}
            key = call_key(user, "record_outcome", {**arguments, "evidence_id": _jsonable(evidence_id)})
            recorded = await client.record_outcome(
                node_id,
                outcome,
                user_id=user,
                evidence_id=evidence_id,
                thread_id=thread_id,
                notes=notes,
                request_id=key,
            )
        document = _jsonable(recorded)
        return {name: document[name] for name in ("id", "node_id", "outcome", "weight", "node_version", "replayed")}

    @server.tool(
        description="Review the memories that need attention (overdue, contested, decaying): the maintenance "
        "report. Read only; it changes nothing.",
        annotations=reads,
    )
    async def review(
        ctx: Context,
        limit: Annotated[int, Field(ge=1, le=1000, description="at most this many")] = 50,
    ) -> dict[str, Any]:
        async with call(ctx) as user:
            rows = await client.maintenance_report(user_id=user)
        return {"total": len(rows), "recommendations": [_jsonable(row) for row in rows[:limit]]}

    @server.tool(
        description="The user's memories of the given scopes as one prompt text within budget_bytes, "
        "scopes in priority order. Use it to load context at the start of a conversation. Each scope's "
        "current memories are published as its snapshot first (nothing new is written when unchanged).",
        annotations=writes,
    )
    async def prompt(
        ctx: Context,
        scopes: Scopes,
        budget_bytes: Annotated[int, Field(ge=1, le=1_048_576, description="UTF-8 bytes at most")] = 8192,
    ) -> dict[str, Any]:
        async with call(ctx) as user:
            # Published on demand: a snapshot no one published would make the prompt empty. A publish
            # of unchanged memories keeps the current generation (content-addressed, docs/SNAPSHOTS.md).
            for scope in dict.fromkeys(scopes):
                await client.publish_snapshot(scope, user_id=user)
            assembled = await client.assemble_prompt(scopes, user_id=user, budget_bytes=budget_bytes)
        return dict(_jsonable(assembled))

    @server.resource(
        "prme://snapshots/{scope}",
        name="snapshot",
        description="The current published snapshot generation of one of the user's scopes (JSON, verified).",
        mime_type="application/json",
    )
    async def snapshot(scope: str, ctx: Context) -> str:
        try:
            async with call(ctx) as user:
                current = await client.current_snapshot(scope, user_id=user)
        except ToolError as exc:
            if isinstance(exc.__cause__, NotFoundError):
                raise ResourceNotFoundError(f"no snapshot of scope {scope!r} was published") from exc
            raise ResourceError(str(exc)) from exc
        document = {**_jsonable(current), "document": json.loads(current.document)}
        return json.dumps(document, ensure_ascii=False)

    return server


# -- streamable HTTP: bearer tokens name the owner per request --


class BearerOwner:
    """ASGI middleware: a prme bearer token (docs/HTTP.md) names the owner of each HTTP request.

    A missing, malformed, unknown or revoked token is 401 with ``WWW-Authenticate: Bearer``,
    before the MCP transport sees the request.
    """

    def __init__(self, app: ASGIApp, authenticate: Callable[[str, str], Awaitable[bool]]) -> None:
        self.app = app
        self.authenticate = authenticate

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scheme, _, credentials = (Headers(scope=scope).get("authorization") or "").partition(" ")
        parsed = parse_token(credentials.strip()) if scheme.lower() == "bearer" else None
        if parsed is None or not await self.authenticate(parsed.user_id, parsed.sha256):
            response = JSONResponse(
                {"error": "unauthorized", "detail": "a valid bearer token is required (prme-pg token create)"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})[OWNER_STATE] = parsed.user_id
        await self.app(scope, receive, send)


def http_app(client: AsyncMemoryClient, *, user_id: str | None, host: str, limits: Limits | None = None) -> ASGIApp:
    """The streamable HTTP app at ``/mcp``: stateless, JSON answers; tokens unless ``user_id`` is fixed."""
    app = create_server(client, user_id=user_id, limits=limits).streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True, host=host
    )
    return app if user_id is not None else BearerOwner(app, client.authenticate_api_token)


async def run(
    target: str,
    *,
    user_id: str | None,
    transport: Literal["stdio", "http"],
    host: str = "127.0.0.1",
    port: int = 8765,
    pool_size: int = 4,
    log_level: str = "warning",
    limits: Limits | None = None,
    sock: socket.socket | None = None,
) -> None:
    """Open the client, serve until stdin closes (stdio) or SIGTERM/SIGINT (HTTP), close the client.

    ``sock``: the HTTP transport's socket, already bound (``prme-pg mcp`` binds before it says
    it is serving); else ``host``:``port`` is bound here."""
    options: dict[str, Any] = {"max_size": pool_size} if is_dsn(target) else {}
    limits = limits or Limits()
    async with AsyncMemoryClient(target, **options) as client:
        try:
            await client.warm_up()  # the model loaded and registered before the first tool call
        except (PrmeError, psycopg.Error) as exc:
            logging.getLogger("prme_pg.mcp").warning("the embedder could not be warmed up: %s", exc)
        if transport == "stdio":
            if user_id is None:
                raise ValueError("stdio serves one owner: pass --user")
            await create_server(client, user_id=user_id, limits=limits).run_stdio_async()
            return
        app = http_app(client, user_id=user_id, host=host, limits=limits)
        if sock is None:
            from .http.listen import listen_tcp

            sock = listen_tcp(host, port)
        await _http_server(app, log_level=log_level, limits=limits).serve(sockets=[sock])


def _http_server(app: ASGIApp, *, log_level: str, limits: Limits) -> Any:
    import uvicorn

    from .http.limits import uvicorn_options

    class GracefulServer(uvicorn.Server):
        """uvicorn raises SIGTERM/SIGINT again after its graceful shutdown, which would end the
        process before the client closes its pool or pack; here the shutdown returns instead."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                try:
                    yield
                finally:
                    self._captured_signals.clear()

    return GracefulServer(uvicorn.Config(app, log_level=log_level, lifespan="on", **uvicorn_options(limits)))
