"""The synchronous client, :class:`MemoryClient`, and the argument handling both clients share.

A client is opened from a PostgreSQL DSN (``postgresql://`` or ``postgres://``;
a :mod:`psycopg_pool` pool of autocommit connections) or from a folder path (a
DuckDB memory pack, created on first open; ``./memories`` by default)::

    with MemoryClient("./memories") as memory:
        node = memory.add_node("prefers dark mode", user_id="alice")
        memory.reinforce(node.id, user_id="alice", request_id=key)

Arguments are named as in SQL. Ids are :class:`uuid.UUID` or their text; anything
else raises :class:`~prme_pg.errors.InvalidInput` (a :class:`ValueError`) before
any I/O. Fractions are :class:`~decimal.Decimal` (a float is taken by its shortest
repr, so ``0.65`` means ``Decimal("0.65")``); times must be timezone-aware. The
engine validates everything else, with the same rules on both backends.
"""

from __future__ import annotations

import copy
import dataclasses
import fractions
import hashlib
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar, cast
from uuid import UUID

import psycopg
import rfc8785
from psycopg_pool import ConnectionPool

from .backends import (
    MAX_BATCH_ITEMS,
    AddEvent,
    AddNode,
    AddNodes,
    ApplyPatch,
    ArchiveNode,
    AssemblePrompt,
    AuthenticateApiToken,
    CreateApiToken,
    CreateMaintenancePatch,
    FindNodes,
    GetCurrentSnapshot,
    GetEmbeddingStatus,
    GetJournalRecords,
    GetLedgerStatus,
    GetMaintenanceReport,
    GetMaintenanceSettings,
    GetNode,
    GetNodeJournal,
    GetOutcomeSummary,
    GetPatch,
    GetReadiness,
    GetReceipt,
    GetSnapshot,
    IsCorrection,
    LinkCorrection,
    ListCorrectionInbox,
    ListNodeEvidence,
    ListNodeOutcomes,
    ListNodes,
    ListOperationEvents,
    MarkReviewed,
    NodeItem,
    PublishSnapshot,
    Recall,
    RecordOutcome,
    RegisterEmbeddingModel,
    Reinforce,
    ReplayNode,
    Request,
    ResetMaintenanceSettings,
    ResolveCorrection,
    RevokeApiToken,
    SetMaintenanceSetting,
    SubmitOperation,
    SyncBackend,
    VerifyJournal,
)
from .backends.duckdb import DEFAULT_PATH, DuckDBBackend, PackClosedError
from .backends.postgres import DEFAULT_STATEMENT_TIMEOUT, PostgresBackend, is_dsn
from .embeddings import Embedder, Vector, check_vector, embed_texts, resolve_embedder
from .errors import InvalidInput, PrmeError
from .extractors import LearningRecord
from .journal import verify_records
from .learning import LearningQueue
from .models import (
    AppliedOp,
    AssembledPrompt,
    CorrectionInboxEntry,
    CorrectionLink,
    EmbeddingStatus,
    Event,
    JournalIssue,
    JournalRecord,
    LedgerStatus,
    MaintenancePatch,
    MaintenanceRecommendation,
    MaintenanceSetting,
    Node,
    NodeHead,
    OperationEvent,
    Outcome,
    OutcomeSummary,
    PublishResult,
    RecallHit,
    Receipt,
    ReplayResult,
    ReviewSchedule,
    Snapshot,
)
from .outbox import Outbox, OutboxRecord
from .tokens import new_token, parse_token, token_sha256
from .validation import check_json_depth, parse_operation_id, parse_uuid

__all__ = ["ClientEmbeddings", "MemoryClient", "Target"]

Target = str | os.PathLike[str]
T = TypeVar("T")
#: A number in [0, 1] as the engine takes it: exact decimals. A :class:`fractions.Fraction`
#: is taken when it has an exact decimal form (1/20 is 0.05; 1/3 is refused).
Fraction = Decimal | float | int | str | fractions.Fraction

# -- argument parsing shared by MemoryClient and AsyncMemoryClient -------------------


def parse_optional_uuid(argument: str, value: object) -> UUID | None:
    return None if value is None else parse_uuid(argument, value)


def parse_fraction(argument: str, value: Fraction) -> Decimal:
    """A Decimal; floats by their shortest repr (0.65 -> Decimal('0.65'), not 0.6500000000000000222)."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool):
        raise InvalidInput(f"{argument} must be a number, got {value!r}")
    try:
        if isinstance(value, float):
            return Decimal(repr(value))
        if isinstance(value, int | str):
            return Decimal(value)
        if isinstance(value, fractions.Fraction):
            exact = Decimal(value.numerator) / Decimal(value.denominator)
            if exact * value.denominator == value.numerator:  # 1/20 divides exactly, 1/3 does not
                return exact
            raise InvalidInput(f"{argument} must be an exact decimal, got {value} (no exact decimal form)")
    except InvalidOperation:
        pass
    raise InvalidInput(f"{argument} must be a number, got {value!r}")


def parse_time(argument: str, value: datetime | None) -> datetime | None:
    """A timezone-aware datetime (a naive one would be read in some server's time zone)."""
    if value is None:
        return None
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidInput(f"{argument} must be a timezone-aware datetime, got {value!r}")
    return value


def add_node_request(
    content: str,
    user_id: str,
    scope: str,
    namespace: str,
    kind: str,
    confidence_base: Fraction,
    salience_base: Fraction,
    stability: str,
    decay_profile: str,
    next_review_at: datetime | ReviewSchedule | None,
    node_id: UUID | str | None,
    embedding: Vector | None = None,
    embedding_model: str | None = None,
) -> AddNode:
    return AddNode(
        user_id=user_id,
        content=content,
        scope=scope,
        namespace=namespace,
        kind=kind,
        confidence_base=parse_fraction("confidence_base", confidence_base),
        salience_base=parse_fraction("salience_base", salience_base),
        stability=stability,
        decay_profile=decay_profile,
        next_review_at=(
            next_review_at
            if isinstance(next_review_at, ReviewSchedule)
            else parse_time("next_review_at", next_review_at)
        ),
        node_id=parse_optional_uuid("node_id", node_id),
        embedding=embedding,
        embedding_model=embedding_model,
    )


#: The fields of one memory of an add_nodes batch: add_node's arguments and created_at.
NODE_ITEM_FIELDS = frozenset(
    {
        "content",
        "scope",
        "namespace",
        "kind",
        "confidence_base",
        "salience_base",
        "stability",
        "decay_profile",
        "next_review_at",
        "node_id",
        "created_at",
        "embedding",
    }
)


def node_item(item: Mapping[str, Any] | NodeItem, embedder: Embedder | None = None) -> NodeItem:
    """One memory of a batch: a NodeItem as is, or a mapping with add_node's keyword
    arguments (and ``created_at``), absent ones taking add_node's defaults; its ``embedding``,
    as add_node's, is a vector by ``embedder``'s model (checked here: dimensions, finite)."""
    if isinstance(item, NodeItem):
        return item
    if not isinstance(item, Mapping):
        raise InvalidInput(f"must be a mapping of add_node's arguments, got {type(item).__name__}")
    unknown = sorted(set(item) - NODE_ITEM_FIELDS)
    if unknown:
        raise InvalidInput(f"unknown field {unknown[0]}")
    if not isinstance(item.get("content"), str):
        raise InvalidInput("content must be a string")
    request = add_node_request(
        item["content"],
        "-",
        item.get("scope", "personal"),
        item.get("namespace", "default"),
        item.get("kind", "fact"),
        item.get("confidence_base", Decimal("0.5")),
        item.get("salience_base", Decimal("0.5")),
        item.get("stability", "low"),
        item.get("decay_profile", "medium"),
        item.get("next_review_at", ReviewSchedule.BY_CADENCE),
        item.get("node_id"),
    )
    for name in ("confidence_base", "salience_base"):
        if not getattr(request, name).is_finite():
            raise InvalidInput(f"{name} must be a finite number")
    vector, model = None, None
    if item.get("embedding") is not None:
        if embedder is None:
            raise no_embedder("embedding")
        vector, model = check_vector(item["embedding"], embedder.dimensions), embedder.model_id
    return NodeItem(
        content=request.content,
        scope=request.scope,
        namespace=request.namespace,
        kind=request.kind,
        confidence_base=request.confidence_base,
        salience_base=request.salience_base,
        stability=request.stability,
        decay_profile=request.decay_profile,
        next_review_at=request.next_review_at,
        node_id=request.node_id,
        created_at=parse_time("created_at", item.get("created_at")),
        embedding=vector,
        embedding_model=model,
    )


def add_nodes_request(
    items: Iterable[Mapping[str, Any] | NodeItem], user_id: str, embedder: Embedder | None = None
) -> AddNodes:
    """The batch request; a bad item is InvalidInput naming it (``items[3]: ...``), before any I/O.
    With ``embedder``, every item without a vector gets its content's, all of them from ONE
    ``embed_texts`` call (the model runs once per batch, not once per memory)."""
    parsed: list[NodeItem] = []
    for index, item in enumerate(items):
        if index >= MAX_BATCH_ITEMS:
            raise InvalidInput(f"items must hold at most {MAX_BATCH_ITEMS} memories")
        try:
            parsed.append(node_item(item, embedder))
        except InvalidInput as exc:
            raise InvalidInput(f"items[{index}]: {exc}") from None
    if embedder is not None:
        # As add_node: content the engine refuses (not text, too long) gets no vector, and
        # the engine answers it with its own message, naming the item.
        missing = [
            index
            for index, item in enumerate(parsed)
            if item.embedding is None
            and isinstance(item.content, str)
            and len(item.content.encode("utf-8", "surrogatepass")) <= MAX_TEXT_BYTES
        ]
        vectors = embed_texts(embedder, [parsed[index].content for index in missing])
        for row, index in enumerate(missing):
            parsed[index] = dataclasses.replace(
                parsed[index], embedding=vectors[row], embedding_model=embedder.model_id
            )
    return AddNodes(user_id=user_id, items=tuple(parsed))


def add_event_request(
    content: str,
    user_id: str,
    scope: str,
    namespace: str,
    kind: str,
    payload: Mapping[str, Any] | None,
    occurred_at: datetime | None,
    event_id: UUID | str | None,
) -> AddEvent:
    check_json_depth("payload", payload)  # before anything recurses into it (json, jsonb, HTTP)
    return AddEvent(
        user_id=user_id,
        content=content,
        scope=scope,
        namespace=namespace,
        kind=kind,
        # A non-object payload goes on as is: the engine answers it with InvalidInput.
        payload=dict(payload) if isinstance(payload, Mapping) else cast(dict[str, Any], payload or {}),
        occurred_at=parse_time("occurred_at", occurred_at),
        event_id=parse_optional_uuid("event_id", event_id),
    )


def reinforce_request(
    node_id: UUID | str, evidence_id: UUID | str | None, user_id: str, request_id: UUID | str | None
) -> Reinforce:
    return Reinforce(
        node_id=parse_uuid("node_id", node_id),
        user_id=user_id,
        evidence_id=parse_optional_uuid("evidence_id", evidence_id),
        request_id=parse_optional_uuid("request_id", request_id),
    )


def list_nodes_request(
    user_id: str, namespace: str | None, after_node_id: UUID | str | None, max_count: int
) -> ListNodes:
    return ListNodes(
        user_id=user_id,
        namespace=namespace,
        after_node_id=parse_optional_uuid("after_node_id", after_node_id),
        max_count=max_count,
    )


def parse_scopes(argument: str, scopes: str | Iterable[str]) -> tuple[str, ...]:
    """Names as a tuple; one string is one name (not its characters)."""
    if isinstance(scopes, str):
        return (scopes,)
    try:
        return tuple(scopes)
    except TypeError:
        raise InvalidInput(f"{argument} must be a list of names, got {scopes!r}") from None


def _names(argument: str, values: str | Iterable[str] | None) -> tuple[str, ...] | None:
    return None if values is None else parse_scopes(argument, values)


def find_nodes_request(
    query: str | None,
    user_id: str,
    scopes: str | Iterable[str] | None,
    stabilities: str | Iterable[str] | None,
    lifecycle_states: str | Iterable[str] | None,
    max_count: int,
) -> FindNodes:
    return FindNodes(
        user_id=user_id,
        query=query,
        scopes=_names("scopes", scopes),
        stabilities=_names("stabilities", stabilities),
        lifecycle_states=_names("lifecycle_states", lifecycle_states),
        max_count=max_count,
    )


def recall_request(
    query: str | None,
    user_id: str,
    scopes: str | Iterable[str] | None,
    max_count: int,
    as_of: datetime | None,
    query_embedding: Vector | None = None,
    embedding_model: str | None = None,
) -> Recall:
    return Recall(
        user_id=user_id,
        query=query,
        scopes=None if scopes is None else parse_scopes("scopes", scopes),
        max_count=max_count,
        as_of=parse_time("as_of", as_of),
        query_embedding=query_embedding,
        embedding_model=embedding_model,
    )


# -- embeddings: what the clients embed before they call (docs/RECALL.md) -----------------

#: The engine refuses longer content and queries (PR422); the clients refuse them before
#: running the model on them.
MAX_TEXT_BYTES = 65536


class ClientEmbeddings:
    """A client's embedder (loaded on first use) and the models it has registered with its engine.

    Shared by :class:`MemoryClient` and :class:`~prme_pg.aio.AsyncMemoryClient`: they embed a
    memory's content before ``add_node`` and a question before ``recall``, so a memory is
    searchable by meaning when ``add_node`` returns, in one round trip.
    """

    def __init__(self, choice: Embedder | str | bool | None) -> None:
        self._choice = choice
        self._embedder: Embedder | None = None
        self._resolved = False
        self._lock = threading.Lock()

    def embedder(self) -> Embedder | None:
        """The embedder, loaded now if it was not yet; None when embedding is off."""
        if not self._resolved:
            with self._lock:
                if not self._resolved:
                    self._embedder = resolve_embedder(self._choice)
                    self._resolved = True
        return self._embedder

    @property
    def loaded(self) -> bool:
        return self._resolved and self._embedder is not None

    def content_vector(self, embedder: Embedder, content: str, embedding: object) -> Vector | None:
        """``embedding`` checked against the model, else the content embedded; None for content the engine refuses."""
        if embedding is not None:
            return check_vector(embedding, embedder.dimensions)
        if not _embeddable(content):
            return None  # the engine refuses it with its own message
        vectors: Vector = embed_texts(embedder, [content])
        return cast(Vector, vectors[0])

    def query_vector(self, embedder: Embedder, query: str | None, embedding: object) -> Vector | None:
        """The question's vector (``embedding`` checked, or the query embedded); None without a query."""
        if embedding is not None:
            return check_vector(embedding, embedder.dimensions, argument="query_embedding")
        if query is None or not isinstance(query, str) or not query.strip():
            return None
        size = len(query.encode("utf-8", "surrogatepass"))
        if size > MAX_TEXT_BYTES:
            raise InvalidInput(f"query must be at most {MAX_TEXT_BYTES} bytes (got {size} bytes)")
        if not _embeddable(query):
            return None  # the engine refuses it with its own message
        vectors: Vector = embed_texts(embedder, [query])
        return cast(Vector, vectors[0])

    def by_meaning(
        self, request: FindNodes, embedder: Embedder | None, query_embedding: object, by_meaning: bool
    ) -> FindNodes:
        """``request`` with the question's vector by ``embedder`` (``query_embedding`` checked, or
        the query embedded); unchanged without an embedder, where a given vector is refused."""
        if embedder is None:
            if query_embedding is not None:
                raise no_embedder("query_embedding") if by_meaning else words_only("query_embedding")
            return request
        vector = self.query_vector(embedder, request.query, query_embedding)
        model = None if vector is None else embedder.model_id
        return dataclasses.replace(request, query_embedding=vector, embedding_model=model)


def _embeddable(text: object) -> bool:
    """Text the engine would take: a str of valid UTF-8 (no lone surrogate), no NUL, at most 64 KiB."""
    if not isinstance(text, str) or "\x00" in text:
        return False
    try:
        return len(text.encode("utf-8")) <= MAX_TEXT_BYTES
    except UnicodeEncodeError:
        return False


def no_embedder(argument: str) -> InvalidInput:
    return InvalidInput(f"{argument} needs an embedder (its model names the vector): this client has none")


def words_only(argument: str) -> InvalidInput:
    return InvalidInput(f"{argument} is a search by meaning: pass it without by_meaning=False")


def assemble_prompt_request(scopes: str | Iterable[str], user_id: str, budget_bytes: int) -> AssemblePrompt:
    return AssemblePrompt(user_id=user_id, scopes=parse_scopes("scopes", scopes), budget_bytes=budget_bytes)


def record_outcome_request(
    node_id: UUID | str,
    outcome: str,
    user_id: str,
    evidence_id: UUID | str | None,
    profile_id: str | None,
    thread_id: str | None,
    notes: str | None,
    request_id: UUID | str | None,
) -> RecordOutcome:
    return RecordOutcome(
        user_id=user_id,
        node_id=parse_uuid("node_id", node_id),
        outcome=outcome,
        evidence_id=parse_optional_uuid("evidence_id", evidence_id),
        profile_id=profile_id,
        thread_id=thread_id,
        notes=notes,
        request_id=parse_optional_uuid("request_id", request_id),
    )


def apply_patch_request(
    patch_id: UUID | str, op_ids: str | Iterable[str] | None, user_id: str, mode: str
) -> ApplyPatch:
    ids: tuple[str, ...] | None = None
    if op_ids is not None:
        if isinstance(op_ids, str):
            ids = tuple(part.strip() for part in op_ids.split(",") if part.strip())
        else:
            try:
                ids = tuple(op_ids)
            except TypeError:
                raise InvalidInput(f"op_ids must be a list of op ids, got {op_ids!r}") from None
    return ApplyPatch(user_id=user_id, patch_id=parse_uuid("patch_id", patch_id), op_ids=ids, mode=mode)


def link_correction_request(
    message: str, candidate_node_ids: Iterable[UUID | str], user_id: str, thread_id: str | None
) -> LinkCorrection:
    if isinstance(candidate_node_ids, str | UUID):
        raise InvalidInput("candidate_node_ids must be a list of node ids")
    try:
        ids = tuple(parse_uuid("candidate_node_ids", node_id) for node_id in candidate_node_ids)
    except TypeError:
        raise InvalidInput(f"candidate_node_ids must be a list of node ids, got {candidate_node_ids!r}") from None
    return LinkCorrection(user_id=user_id, message=message, candidate_node_ids=ids, thread_id=thread_id)


def resolve_correction_request(inbox_id: UUID | str, node_id: UUID | str | None, user_id: str) -> ResolveCorrection:
    return ResolveCorrection(
        user_id=user_id,
        inbox_id=parse_uuid("inbox_id", inbox_id),
        node_id=parse_optional_uuid("node_id", node_id),
    )


def mark_reviewed_request(node_id: UUID | str, user_id: str, next_review_at: datetime | None) -> MarkReviewed:
    return MarkReviewed(
        user_id=user_id,
        node_id=parse_uuid("node_id", node_id),
        next_review_at=parse_time("next_review_at", next_review_at),
    )


def set_maintenance_setting_request(
    stability: str, user_id: str, review_cadence: timedelta, decay_per_cycle: Fraction
) -> SetMaintenanceSetting:
    if not isinstance(review_cadence, timedelta):
        raise InvalidInput(f"review_cadence must be a timedelta, got {review_cadence!r}")
    return SetMaintenanceSetting(
        user_id=user_id,
        stability=stability,
        review_cadence=review_cadence,
        decay_per_cycle=parse_fraction("decay_per_cycle", decay_per_cycle),
    )


def payload_hash_of(payload: Mapping[str, Any]) -> str:
    """sha256 hex of the RFC 8785 canonical form of ``payload`` (what the ledger's executor recomputes)."""
    try:
        canonical = rfc8785.dumps(payload)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise InvalidInput(f"payload has no RFC 8785 form: {exc}") from None
    return hashlib.sha256(canonical).hexdigest()


def submit_operation_request(
    operation_id: UUID | str,
    kind: str,
    payload: Mapping[str, Any],
    user_id: str,
    dependencies: Iterable[UUID | str],
    payload_hash: str | None,
    schema_version: int,
) -> SubmitOperation:
    if not isinstance(payload, Mapping):
        raise InvalidInput(f"payload must be a JSON object, got {type(payload).__name__}")
    if isinstance(dependencies, str | UUID):
        raise InvalidInput("dependencies must be a list of operation ids")
    try:
        deps = tuple(parse_operation_id("dependencies", d) for d in dependencies)
    except TypeError:
        raise InvalidInput(f"dependencies must be a list of operation ids, got {dependencies!r}") from None
    # The database takes a declared hash as given and its executor rejects a wrong one
    # later (payload_hash_mismatch, docs/LEDGER.md "What a 202 proves"); a client that
    # holds the payload checks it here, in its own process, and says so at once.
    computed = payload_hash_of(payload)
    if payload_hash is not None and payload_hash != computed:
        raise InvalidInput(
            f"payload_hash does not match the payload: the sha256 of its RFC 8785 form is {computed}, "
            f"got {str(payload_hash)[:80]!r}"
        )
    return SubmitOperation(
        user_id=user_id,
        operation_id=parse_operation_id("operation_id", operation_id),
        schema_version=schema_version,
        kind=kind,
        dependencies=deps,
        payload_hash=computed,
        payload=dict(payload),
    )


def operation_events_request(
    user_id: str, after_seq: int, operation_id: UUID | str | None, max_count: int
) -> ListOperationEvents:
    return ListOperationEvents(
        user_id=user_id,
        after_seq=after_seq,
        operation_id=None if operation_id is None else parse_operation_id("operation_id", operation_id),
        max_count=max_count,
    )


def check_page_size(page_size: int) -> int:
    if isinstance(page_size, bool) or not isinstance(page_size, int) or not 1 <= page_size <= 10000:
        raise InvalidInput("page_size must be between 1 and 10000")
    return page_size


#: ``scheme://`` at the start of a target: a URL, never a pack folder's name.
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def check_pack_options(target: object, clock: object, new_id: object) -> None:
    """Refuse a target that is neither a PostgreSQL DSN nor a pack folder, and pack options on a DSN.

    A string that starts with ``scheme://`` is a URL: only ``postgresql://`` and ``postgres://``
    are served, and any other (``postgresql+psycopg://``, ``postgress://``) is InvalidInput, not
    a pack folder of that name (issue 32, item 12)."""
    if isinstance(target, str) and not is_dsn(target) and _URL_SCHEME.match(target):
        scheme = target.split("://", 1)[0]
        raise InvalidInput(
            f"{scheme}:// is not a PostgreSQL URL: use postgresql:// (or postgres://), or a pack folder's path"
        )
    if is_dsn(target) and (clock is not None or new_id is not None):
        raise TypeError("clock and new_id apply to memory packs; PostgreSQL uses its own clock and ids")


# -- the client ----------------------------------------------------------------------


class MemoryClient:
    """Synchronous prme-pg client over PostgreSQL or a DuckDB memory pack.

    ``target`` is a DSN (``postgresql://...``) or a pack folder (default
    ``./memories``). PostgreSQL options: ``min_size``, ``max_size`` and ``timeout``
    of the connection pool, ``statement_timeout`` (seconds any one call may run before
    the server cancels it with ``psycopg.errors.QueryCanceled``; default 30, None for the
    server's setting), and ``connect_kwargs`` for each connection. Pack
    options: ``clock`` and ``new_id`` (reproducible packs). The client is opened
    by the constructor; use it as a context manager, or call :meth:`close`.
    Thread-safe: share one client between threads.
    """

    def __init__(
        self,
        target: Target = DEFAULT_PATH,
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT,
        connect_kwargs: Mapping[str, Any] | None = None,
        clock: Callable[[], datetime] | None = None,
        new_id: Callable[[], UUID] | None = None,
        embedder: Embedder | str | bool | None = None,
    ) -> None:
        check_pack_options(target, clock, new_id)
        self.target = os.fspath(target)
        self._embeddings = ClientEmbeddings(embedder)
        self._backend: SyncBackend
        if is_dsn(target):  # a str DSN; every PathLike is a pack
            self._backend = PostgresBackend.connect(
                self.target,
                min_size=min_size,
                max_size=max_size,
                timeout=timeout,
                statement_timeout=statement_timeout,
                **(connect_kwargs or {}),
            )
        else:
            self._backend = _LazyPack(self.target, clock=clock, new_id=new_id)  # opened by the first call needing it
        self._owns_backend = True
        self._closed = False

    @classmethod
    def from_pool(
        cls, pool: ConnectionPool[psycopg.Connection[Any]], *, embedder: Embedder | str | bool | None = None
    ) -> Self:
        """A client over an open pool you configure and own (it is not closed with the client)."""
        client = cls.__new__(cls)
        client.target = str(pool.conninfo)
        client._embeddings = ClientEmbeddings(embedder)
        client._backend = _BorrowedPool(pool)
        client._owns_backend = True  # _BorrowedPool's close leaves the pool open
        client._closed = False
        return client

    def with_embedder(self, embedder: Embedder | str | bool | None) -> Self:
        """This client's pool or pack with another embedder (``False``: none, words only).

        The copy shares the connections and is not their owner: closing it closes nothing,
        closing this client closes both. How one caller writes and recalls with a model of its
        own, or with none, beside the client's (the LangGraph store, docs/LANGGRAPH.md).
        """
        client = copy.copy(self)  # the same backend object, so the same pool or pack
        client._embeddings, client._owns_backend, client._closed = ClientEmbeddings(embedder), False, False
        return client

    @property
    def backend(self) -> SyncBackend:
        """The backend executing requests: PostgreSQL's or the memory pack's (:mod:`prme_pg.backends`)."""
        if isinstance(self._backend, _LazyPack):
            return self._backend.opened()
        return self._backend

    def close(self) -> None:
        """Close the pool or the pack. Idempotent."""
        if not self._closed:
            self._closed = True
            if self._owns_backend:
                self._backend.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        kind = "postgres" if isinstance(self._backend, PostgresBackend | _BorrowedPool) else "pack"
        return f"<{type(self).__name__} {kind} {state}>"

    # -- the API --

    def add_node(
        self,
        content: str,
        *,
        user_id: str,
        scope: str = "personal",
        namespace: str = "default",
        kind: str = "fact",
        confidence_base: Fraction = Decimal("0.5"),
        salience_base: Fraction = Decimal("0.5"),
        stability: str = "low",
        decay_profile: str = "medium",
        next_review_at: datetime | ReviewSchedule | None = ReviewSchedule.BY_CADENCE,
        node_id: UUID | str | None = None,
        embedding: Iterable[float] | None = None,
    ) -> Node:
        """Create a memory (journaled as a create record). Its first review is one cadence of its
        stability away unless ``next_review_at`` gives a time, or ``None`` (no review schedule).
        ``node_id`` may be given (PR409 if taken). The client's embedder embeds ``content``
        (or ``embedding``, a vector by that model, is stored as given): recall finds the memory
        by meaning as soon as this returns."""
        request = add_node_request(
            content,
            user_id,
            scope,
            namespace,
            kind,
            confidence_base,
            salience_base,
            stability,
            decay_profile,
            next_review_at,
            node_id,
        )
        # Arguments are checked before the model runs or the engine is asked anything.
        vector, model = self._content_vector(content, embedding)
        return self._backend.execute(dataclasses.replace(request, embedding=vector, embedding_model=model))

    @property
    def embedder(self) -> Embedder | None:
        """The embedder this client runs before it writes and recalls (None: words only); loaded on first use."""
        return self._embeddings.embedder()

    @property
    def embedder_loaded(self) -> bool:
        """Whether the embedder has been loaded (the first write or recall loads it)."""
        return self._embeddings.loaded

    def warm_up(self) -> None:
        """Load the embedder and register its model now, as a server does when it starts: the first
        request then neither loads the model nor waits on another request's first vector."""
        embedder = self._embeddings.embedder()
        if embedder is not None:
            self._backend.execute(RegisterEmbeddingModel(model_id=embedder.model_id, dimensions=embedder.dimensions))

    def embedding_status(self) -> EmbeddingStatus | None:
        """For the client's embedder (None without one): whether the engine searches by meaning, and how
        many memories of every owner await a vector (``prme.embedding_status``; docs/RECALL.md)."""
        embedder = self.embedder
        if embedder is None:
            return None
        return self._backend.execute(GetEmbeddingStatus(model_id=embedder.model_id))

    def _content_vector(self, content: str, embedding: object) -> tuple[Vector | None, str | None]:
        embedder = self.embedder
        if embedder is None:
            if embedding is not None:
                raise no_embedder("embedding")
            return None, None
        vector = self._embeddings.content_vector(embedder, content, embedding)
        return vector, None if vector is None else embedder.model_id

    def add_nodes(self, items: Iterable[Mapping[str, Any] | NodeItem], *, user_id: str) -> list[Node]:
        """Create up to 1000 memories in one transaction, each exactly as :meth:`add_node` would
        (its create record included); all or nothing. Each item is a mapping of add_node's
        keyword arguments, plus ``created_at`` (when it was first made elsewhere). Returns one
        node per item, in order; an item whose ``node_id`` is stored already with the same
        content, scope, namespace and kind is ``replayed`` (nothing written), so a retried batch
        writes only what is missing. A bad item raises InvalidInput (a taken node_id
        IdempotencyConflict) whose message starts with ``items[N]``. As add_node, the client's
        embedder embeds each item's content (an item's ``embedding``, a vector by that model, is
        stored as given), the whole batch in one call of the model. See docs/IMPORT.md."""
        return self._backend.execute(add_nodes_request(items, user_id, self.embedder))

    def add_event(
        self,
        content: str,
        *,
        user_id: str,
        scope: str = "personal",
        namespace: str = "default",
        kind: str = "message",
        payload: Mapping[str, Any] | None = None,
        occurred_at: datetime | None = None,
        event_id: UUID | str | None = None,
    ) -> Event:
        """Record immutable evidence; ``occurred_at`` defaults to now."""
        return self._backend.execute(
            add_event_request(content, user_id, scope, namespace, kind, payload, occurred_at, event_id)
        )

    def get_node(self, node_id: UUID | str, *, user_id: str) -> Node:
        """One memory of ``user_id`` (any lifecycle state). :class:`NotFoundError` otherwise."""
        return self._backend.execute(GetNode(user_id=user_id, node_id=parse_uuid("node_id", node_id)))

    def list_nodes(
        self,
        *,
        user_id: str,
        namespace: str | None = None,
        after_node_id: UUID | str | None = None,
        max_count: int = 100,
    ) -> list[Node]:
        """One page of memories in id order, after ``after_node_id``."""
        return self._backend.execute(list_nodes_request(user_id, namespace, after_node_id, max_count))

    def iter_nodes(self, *, user_id: str, namespace: str | None = None, page_size: int = 100) -> Iterator[Node]:
        """Every memory of ``user_id`` in id order, fetched in keyset pages of ``page_size``."""
        page_size = check_page_size(page_size)
        after: UUID | None = None
        while True:
            page = self.list_nodes(user_id=user_id, namespace=namespace, after_node_id=after, max_count=page_size)
            yield from page
            if len(page) < page_size:
                return
            after = page[-1].id

    def reinforce(
        self,
        node_id: UUID | str,
        evidence_id: UUID | str | None = None,
        *,
        user_id: str,
        request_id: UUID | str | None = None,
    ) -> Node:
        """Confirm a memory (docs/DESIGN.md section 3).

        With ``request_id``, a retry of the same call returns the current node with
        ``replayed=True`` and changes nothing; reusing it for another node or evidence
        raises :class:`IdempotencyConflict`.
        """
        return self._backend.execute(reinforce_request(node_id, evidence_id, user_id, request_id))

    def archive_node(self, node_id: UUID | str, *, user_id: str) -> Node:
        """Retire a memory: it stays readable but can no longer be confirmed."""
        return self._backend.execute(ArchiveNode(user_id=user_id, node_id=parse_uuid("node_id", node_id)))

    def verify_journal(self, *, user_id: str, independent: bool = False) -> list[JournalIssue]:
        """Problems in the journal of ``user_id``; an empty list means it verifies.

        By default the engine checks itself (``prme.verify_journal``). With
        ``independent=True`` the records are read and checked by Python's own verifier
        (:func:`prme_pg.journal.verify_records`: sha256, RFC 8785 form, chain,
        continuity, heads, records without their node), read through
        ``prme.journal_records``.
        """
        if independent:
            records, heads = self.journal_records(user_id=user_id)
            return verify_records(records, heads)
        return self._backend.execute(VerifyJournal(user_id=user_id))

    def replay_node(self, node_id: UUID | str, *, user_id: str) -> ReplayResult:
        """Rebuild a memory from its journal and compare it with the stored row."""
        return self._backend.execute(ReplayNode(user_id=user_id, node_id=parse_uuid("node_id", node_id)))

    def journal_records(self, *, user_id: str) -> tuple[list[JournalRecord], list[NodeHead]]:
        """The stored journal of ``user_id`` and each node's head, as the verifier reads them."""
        return self._backend.execute(GetJournalRecords(user_id=user_id))

    def node_journal(
        self, node_id: UUID | str, *, user_id: str, max_count: int = 1000
    ) -> tuple[list[JournalRecord], NodeHead]:
        """The oldest ``max_count`` (1..10000) journal records of one memory and its head, as the
        verifier reads them (``verify_records(records, [head])`` once the chain is complete)."""
        return self._backend.execute(
            GetNodeJournal(user_id=user_id, node_id=parse_uuid("node_id", node_id), max_count=max_count)
        )

    def node_evidence(self, node_id: UUID | str, *, user_id: str, max_count: int = 100) -> list[Event]:
        """The events a memory cites in ``evidence_refs``, each once, oldest first."""
        return self._backend.execute(
            ListNodeEvidence(user_id=user_id, node_id=parse_uuid("node_id", node_id), max_count=max_count)
        )

    def authenticate_api_token(self, user_id: str, token_sha256: str) -> bool:
        """Whether ``token_sha256`` is a live bearer token of ``user_id``."""
        return self._backend.execute(AuthenticateApiToken(user_id=user_id, token_sha256=token_sha256))

    def create_api_token(self, user_id: str, *, label: str = "") -> str:
        """Mint a bearer token for ``user_id``; only its sha256 is stored, so show it once."""
        token = new_token(user_id)
        self._backend.execute(CreateApiToken(user_id=user_id, token_sha256=token_sha256(token), label=label))
        return token

    def revoke_api_token(self, token: str) -> bool:
        """Revoke a bearer token; false when it is malformed, unknown or already revoked."""
        parsed = parse_token(token)
        if parsed is None:
            return False
        return self._backend.execute(RevokeApiToken(user_id=parsed.user_id, token_sha256=parsed.sha256))

    def readiness(self) -> tuple[bool, list[str]]:
        """Whether the database accepts writes, and its applied migrations as ``version:sha256``."""
        return self._backend.execute(GetReadiness())

    # -- recall and snapshots (docs/RECALL.md, docs/SNAPSHOTS.md) --

    def recall(
        self,
        query: str | None = None,
        *,
        user_id: str,
        scopes: str | Iterable[str] | None = None,
        max_count: int = 10,
        as_of: datetime | None = None,
        query_embedding: Iterable[float] | None = None,
    ) -> list[RecallHit]:
        """Memories of ``user_id`` matching ``query`` by words and meaning, best first (``prme.recall``).

        The client's embedder embeds the query (or ``query_embedding``, a vector by that model, is
        used as given). A ``None`` or blank query ranks every memory by strength alone; ``scopes``
        (``None`` = all) filters; ``max_count`` is 1..1000; ``as_of`` defaults to now.
        """
        request = recall_request(query, user_id, scopes, max_count, as_of)
        embedder = self.embedder
        if embedder is None:
            if query_embedding is not None:
                raise no_embedder("query_embedding")
            return self._backend.execute(request)
        vector = self._embeddings.query_vector(embedder, query, query_embedding)
        model = None if vector is None else embedder.model_id
        return self._backend.execute(dataclasses.replace(request, query_embedding=vector, embedding_model=model))

    def find_nodes(
        self,
        query: str | None = None,
        *,
        user_id: str,
        scopes: str | Iterable[str] | None = None,
        stabilities: str | Iterable[str] | None = None,
        lifecycle_states: str | Iterable[str] | None = None,
        max_count: int = 50,
        query_embedding: Iterable[float] | None = None,
        by_meaning: bool = True,
    ) -> list[Node]:
        """Memories of ``user_id`` in any lifecycle state for review (``prme.find_nodes``).

        ``query`` matches words as recall does and, with the client's embedder, meaning: the
        ``max_count`` memories nearest to the embedded query join those sharing a word
        (``query_embedding``, a vector by that model, is used as given; ``by_meaning=False``:
        words alone). ``None`` or blank: every memory. The filters (``None`` = any) narrow.
        Most query words first, then closest by meaning, then newest change first;
        ``max_count`` is 1..1000.
        """
        request = find_nodes_request(query, user_id, scopes, stabilities, lifecycle_states, max_count)
        embedder = self.embedder if by_meaning else None
        return self._backend.execute(self._embeddings.by_meaning(request, embedder, query_embedding, by_meaning))

    def publish_snapshot(
        self,
        scope: str,
        *,
        user_id: str,
        max_items: int = 100,
        max_bytes: int = 65536,
        expected_generation_id: str | None = None,
    ) -> PublishResult:
        """Publish the current generation of ``scope`` (``prme.publish_snapshot``).

        With ``expected_generation_id`` (or ``"none"`` for a never-published scope), a
        different current generation raises :class:`IdempotencyConflict` (PR409).
        """
        return self._backend.execute(
            PublishSnapshot(
                user_id=user_id,
                scope=scope,
                max_items=max_items,
                max_bytes=max_bytes,
                expected_generation_id=expected_generation_id,
            )
        )

    def current_snapshot(self, scope: str, *, user_id: str) -> Snapshot:
        """The current generation of ``scope``, verified; :class:`NotFoundError` if never published."""
        return self._backend.execute(GetCurrentSnapshot(user_id=user_id, scope=scope))

    def get_snapshot(self, scope: str, generation_id: str, *, user_id: str) -> Snapshot:
        """One generation of ``scope`` by id, current or not, verified."""
        return self._backend.execute(GetSnapshot(user_id=user_id, scope=scope, generation_id=generation_id))

    def assemble_prompt(self, scopes: str | Iterable[str], *, user_id: str, budget_bytes: int) -> AssembledPrompt:
        """Prompt text from the current generation of each scope, within ``budget_bytes``
        (``prme.assemble_prompt``)."""
        return self._backend.execute(assemble_prompt_request(scopes, user_id, budget_bytes))

    # -- outcomes and maintenance (docs/MAINTENANCE.md) --

    def record_outcome(
        self,
        node_id: UUID | str,
        outcome: str,
        *,
        user_id: str,
        evidence_id: UUID | str | None = None,
        profile_id: str | None = None,
        thread_id: str | None = None,
        notes: str | None = None,
        request_id: UUID | str | None = None,
    ) -> Outcome:
        """Append an outcome event (explicit_reinforcement, implicit_success, neutral_exposure or
        explicit_correction) to a memory (``prme.record_outcome``).

        With ``request_id``, a retry with the same arguments returns the stored outcome with
        ``replayed=True``; reuse with anything else raises :class:`IdempotencyConflict`.
        """
        return self._backend.execute(
            record_outcome_request(node_id, outcome, user_id, evidence_id, profile_id, thread_id, notes, request_id)
        )

    def outcome_summary(self, node_id: UUID | str, *, user_id: str) -> OutcomeSummary:
        """Outcome counts, score and suggested stability of a memory."""
        return self._backend.execute(GetOutcomeSummary(user_id=user_id, node_id=parse_uuid("node_id", node_id)))

    def node_outcomes(self, node_id: UUID | str, *, user_id: str, max_count: int = 100) -> list[Outcome]:
        """The outcome events of a memory, newest first, at most ``max_count`` (1..10000)."""
        return self._backend.execute(
            ListNodeOutcomes(user_id=user_id, node_id=parse_uuid("node_id", node_id), max_count=max_count)
        )

    def maintenance_report(self, *, user_id: str, as_of: datetime | None = None) -> list[MaintenanceRecommendation]:
        """What maintenance recommends for the memories of ``user_id``; changes nothing
        (``prme.maintenance_report``)."""
        return self._backend.execute(GetMaintenanceReport(user_id=user_id, as_of=parse_time("as_of", as_of)))

    def maintenance_patch(self, *, user_id: str, as_of: datetime | None = None) -> MaintenancePatch:
        """Store the actionable recommendations as a patch for review; changes no memory
        (``prme.maintenance_patch``)."""
        return self._backend.execute(CreateMaintenancePatch(user_id=user_id, as_of=parse_time("as_of", as_of)))

    def get_patch(self, patch_id: UUID | str, *, user_id: str) -> MaintenancePatch:
        """A stored patch with each op's status; :class:`NotFoundError` for another owner's."""
        return self._backend.execute(GetPatch(user_id=user_id, patch_id=parse_uuid("patch_id", patch_id)))

    def apply_patch(
        self,
        patch_id: UUID | str,
        op_ids: str | Iterable[str] | None = None,
        *,
        user_id: str,
        mode: str = "manual",
    ) -> list[AppliedOp]:
        """Apply ops of a patch (``prme.apply_patch``).

        ``mode="manual"`` applies exactly ``op_ids`` (a list, or one comma-separated
        string); ``mode="auto"`` (``op_ids=None``) applies decay ops and stability increases
        that need no review. Each op applies at most once: applied, already_applied or stale.
        """
        return self._backend.execute(apply_patch_request(patch_id, op_ids, user_id, mode))

    def link_correction(
        self,
        message: str,
        candidate_node_ids: Iterable[UUID | str],
        *,
        user_id: str,
        thread_id: str | None = None,
    ) -> CorrectionLink:
        """Link a correction message to the one active candidate memory it overlaps, appending
        an explicit_correction (``status="linked"``); with zero or several matches the message
        goes to the correction inbox instead (``unmatched`` / ``ambiguous``, ``inbox_id``)
        (``prme.link_correction``)."""
        return self._backend.execute(link_correction_request(message, candidate_node_ids, user_id, thread_id))

    def is_correction(self, message: str) -> bool:
        """Does ``message`` use explicit correction phrasing ("don't …", "no, …", "actually …")?
        Reads nothing (``prme.is_correction``)."""
        return self._backend.execute(IsCorrection(message=message))

    def list_correction_inbox(
        self, *, user_id: str, include_resolved: bool = False, max_count: int = 100
    ) -> list[CorrectionInboxEntry]:
        """The corrections of ``user_id`` that matched zero or several memories, oldest first:
        open ones, or all with ``include_resolved``."""
        return self._backend.execute(
            ListCorrectionInbox(user_id=user_id, include_resolved=include_resolved, max_count=max_count)
        )

    def resolve_correction(
        self, inbox_id: UUID | str, node_id: UUID | str | None = None, *, user_id: str
    ) -> CorrectionInboxEntry:
        """Link an inbox entry to a memory (appending its explicit_correction), or dismiss it
        (``node_id=None``). The same resolution again returns the entry; another one raises
        :class:`IdempotencyConflict`."""
        return self._backend.execute(resolve_correction_request(inbox_id, node_id, user_id))

    def mark_reviewed(self, node_id: UUID | str, *, user_id: str, next_review_at: datetime | None = None) -> Node:
        """Record a review: ``next_review_at`` (default: one cadence of its stability from now)
        and every outcome so far counts as seen (``prme.mark_reviewed``)."""
        return self._backend.execute(mark_reviewed_request(node_id, user_id, next_review_at))

    def get_maintenance_settings(self, *, user_id: str) -> list[MaintenanceSetting]:
        """The effective review cadence and decay per overdue cycle of ``user_id`` for each
        stability."""
        return self._backend.execute(GetMaintenanceSettings(user_id=user_id))

    def set_maintenance_setting(
        self, stability: str, *, user_id: str, review_cadence: timedelta, decay_per_cycle: Fraction
    ) -> list[MaintenanceSetting]:
        """Override the review cadence (1 hour to 3650 days, whole seconds) and decay per
        overdue cycle ([0, 1]) of one stability for ``user_id``; returns the effective
        settings."""
        return self._backend.execute(
            set_maintenance_setting_request(stability, user_id, review_cadence, decay_per_cycle)
        )

    def reset_maintenance_settings(self, *, user_id: str) -> list[MaintenanceSetting]:
        """Remove the overrides of ``user_id``: the defaults apply again."""
        return self._backend.execute(ResetMaintenanceSettings(user_id=user_id))

    # -- the operations ledger (PostgreSQL only; docs/LEDGER.md) --

    def submit_operation(
        self,
        operation_id: UUID | str,
        kind: str,
        payload: Mapping[str, Any],
        *,
        user_id: str,
        dependencies: Iterable[UUID | str] = (),
        payload_hash: str | None = None,
        schema_version: int = 2,
    ) -> Receipt:
        """Durably accept an operation into the ledger (``prme.submit_operation``; PostgreSQL only).

        ``payload_hash`` defaults to the sha256 hex of the payload's RFC 8785 form; one that
        is given must be it (:class:`InvalidInput` otherwise, before any I/O). A new
        ``operation_id`` returns the receipt with ``created=True``; the same id with the same
        operation returns the stored receipt (``created=False``); the same id with anything
        else raises :class:`IdempotencyConflict`.
        """
        return self._backend.execute(
            submit_operation_request(operation_id, kind, payload, user_id, dependencies, payload_hash, schema_version)
        )

    def get_receipt(self, operation_id: UUID | str, *, user_id: str) -> Receipt:
        """The receipt of an operation as it stands now; :class:`NotFoundError` when unknown to
        this owner (PostgreSQL only)."""
        return self._backend.execute(
            GetReceipt(user_id=user_id, operation_id=parse_operation_id("operation_id", operation_id))
        )

    def operation_events(
        self,
        *,
        user_id: str,
        after_seq: int = 0,
        operation_id: UUID | str | None = None,
        max_count: int = 100,
    ) -> list[OperationEvent]:
        """Events of the owner's operations (or of one) with ``seq > after_seq``, in order; pass
        the last ``seq`` seen to resume without gap or duplicate (PostgreSQL only)."""
        return self._backend.execute(operation_events_request(user_id, after_seq, operation_id, max_count))

    def ledger_status(self) -> LedgerStatus:
        """Whether the ledger accepts submits, and the executor's backlog (PostgreSQL only)."""
        return self._backend.execute(GetLedgerStatus())

    # -- the outbox (memory packs only; docs/OUTBOX.md) --

    def enqueue(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        user_id: str,
        dependencies: Iterable[UUID | str] = (),
        operation_id: UUID | str | None = None,
    ) -> OutboxRecord:
        """Store an operation in the pack's outbox for ``prme-pg sync`` to deliver to the ledger.

        Durable when it returns, with its stable ``operation_id`` (a time-ordered UUIDv7
        unless given; a given id makes it idempotent: the same operation returns the stored
        record, another raises :class:`IdempotencyConflict`). Needs no database and not the
        pack's DuckDB file, so it works while another process has the pack open. Packs only.
        """
        if not isinstance(self._backend, _LazyPack):
            raise PrmeError("enqueue writes to a memory pack's outbox; on PostgreSQL, call submit_operation")
        return self._backend.outbox().enqueue(
            kind, payload, user_id=user_id, dependencies=dependencies, operation_id=operation_id
        )

    def enqueue_learning(
        self, session_id: str, items: Iterable[Mapping[str, Any]], *, user_id: str, scope: str = "personal"
    ) -> LearningRecord:
        """Store one learning record (a session's items) for ``prme-pg sync`` to learn from (docs/LEARNING.md).

        Validates the items (:class:`InvalidInput` naming the first bad field; nothing is
        stored) and returns the durable record at once: no inference, no database, not the
        pack's DuckDB file, so it works while another process has the pack open. Packs only.
        """
        if not isinstance(self._backend, _LazyPack):
            raise PrmeError("enqueue_learning writes to a memory pack's learning queue; open the client on a pack")
        return LearningQueue(self._backend.path).enqueue(session_id, list(items), user_id=user_id, scope=scope)


class _LazyPack:
    """A memory pack whose DuckDB file is opened by the first call that needs it.

    DuckDB lets one process at a time open the file. :meth:`MemoryClient.enqueue` needs
    only the pack's outbox folder, so a client made to enqueue (an agent's stop hook)
    never takes the file from, or waits for, the process that has it open
    (docs/OUTBOX.md). Every other call opens the pack (``PackInUseError`` if another
    process holds it) and keeps it open until :meth:`close`.
    """

    def __init__(self, path: str, *, clock: Callable[[], datetime] | None, new_id: Callable[[], UUID] | None) -> None:
        self.path = Path(path).expanduser().absolute()
        if self.path.exists() and not self.path.is_dir():
            raise PrmeError(f"{self.path} is not a folder; a memory pack is a folder")
        self._clock, self._new_id = clock, new_id
        self._guard = threading.Lock()
        self._pack: DuckDBBackend | None = None
        self._outbox: Outbox | None = None
        self._closed = False

    def opened(self) -> DuckDBBackend:
        with self._guard:
            if self._closed:
                raise PackClosedError(f"the memory pack at {self.path} is closed")
            if self._pack is None:
                self._pack = DuckDBBackend(self.path, clock=self._clock, new_id=self._new_id)
            return self._pack

    def outbox(self) -> Outbox:
        with self._guard:
            if self._closed:
                raise PackClosedError(f"the memory pack at {self.path} is closed")
            if self._outbox is None:
                self._outbox = Outbox(self.path)
            return self._outbox

    def execute(self, request: Request[T]) -> T:
        return self.opened().execute(request)

    def close(self) -> None:
        with self._guard:
            self._closed = True
            pack, self._pack = self._pack, None
        if pack is not None:
            pack.close()


class _BorrowedPool(PostgresBackend):
    """A caller's pool: used, never closed."""

    def close(self) -> None:
        pass
