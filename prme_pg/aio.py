"""The asyncio client, :class:`AsyncMemoryClient`: the same API as :class:`~prme_pg.MemoryClient`.

On PostgreSQL it runs on a :class:`psycopg_pool.AsyncConnectionPool`. On a memory
pack each call runs in a worker thread under an :class:`asyncio.Lock` and always
runs to completion: a call cancelled by its caller may already have committed (or
commit a moment later), and a retry with the same ``request_id`` is then a replay::

    async with AsyncMemoryClient("postgresql://app@db/prme") as memory:
        node = await memory.reinforce(node_id, user_id="alice", request_id=key)
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from types import TracebackType
from typing import Any, Self
from uuid import UUID

import psycopg
from psycopg_pool import AsyncConnectionPool

from .backends import (
    ArchiveNode,
    AsyncBackend,
    AuthenticateApiToken,
    CreateApiToken,
    CreateMaintenancePatch,
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
    ListCorrectionInbox,
    ListNodeEvidence,
    ListNodeOutcomes,
    NodeItem,
    PublishSnapshot,
    RegisterEmbeddingModel,
    ReplayNode,
    ResetMaintenanceSettings,
    RevokeApiToken,
    VerifyJournal,
)
from .backends.duckdb import DEFAULT_PATH, AsyncDuckDBBackend, PackClosedError
from .backends.postgres import DEFAULT_STATEMENT_TIMEOUT, AsyncPostgresBackend, is_dsn
from .client import (
    ClientEmbeddings,
    Fraction,
    Target,
    add_event_request,
    add_node_request,
    add_nodes_request,
    apply_patch_request,
    assemble_prompt_request,
    check_pack_options,
    check_page_size,
    find_nodes_request,
    link_correction_request,
    list_nodes_request,
    mark_reviewed_request,
    no_embedder,
    operation_events_request,
    parse_time,
    recall_request,
    record_outcome_request,
    reinforce_request,
    resolve_correction_request,
    set_maintenance_setting_request,
    submit_operation_request,
)
from .embeddings import Embedder, Vector
from .errors import PrmeError
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
from .validation import parse_operation_id, parse_uuid

__all__ = ["AsyncMemoryClient"]


class AsyncMemoryClient:
    """Asynchronous prme-pg client over PostgreSQL or a DuckDB memory pack.

    Options are those of :class:`~prme_pg.MemoryClient`. Open it with ``async with``
    or ``await client.open()``; close it with :meth:`close`. Share one client
    between tasks.
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
        self._backend: AsyncBackend
        if is_dsn(target):  # a str DSN; every PathLike is a pack
            self._backend = AsyncPostgresBackend.create(
                self.target,
                min_size=min_size,
                max_size=max_size,
                timeout=timeout,
                statement_timeout=statement_timeout,
                **(connect_kwargs or {}),
            )
        else:
            self._backend = AsyncDuckDBBackend(self.target, clock=clock, new_id=new_id)
        self._owns_backend = True
        self._closed = False

    @classmethod
    def from_pool(
        cls, pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]], *, embedder: Embedder | str | bool | None = None
    ) -> Self:
        """A client over an open pool you configure and own (it is not closed with the client)."""
        client = cls.__new__(cls)
        client.target = str(pool.conninfo)
        client._embeddings = ClientEmbeddings(embedder)
        client._backend = AsyncPostgresBackend(pool)
        client._owns_backend = False
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
    def backend(self) -> AsyncBackend:
        """The backend executing requests: PostgreSQL's or the memory pack's (:mod:`prme_pg.backends`)."""
        return self._backend

    async def open(self) -> Self:
        """Open the pool (waiting for its first connection) or the pack."""
        if self._owns_backend:
            await self._backend.open()
        return self

    async def close(self) -> None:
        """Close the pool or the pack. Idempotent.

        On a pack it waits for a call still finishing in its worker thread.
        """
        if not self._closed:
            self._closed = True
            if self._owns_backend:
                await self._backend.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        kind = "postgres" if isinstance(self._backend, AsyncPostgresBackend) else "pack"
        return f"<{type(self).__name__} {kind} {state}>"

    # -- the API: MemoryClient's, awaited (tests/test_client_parity.py holds the two equal) --

    async def add_node(
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
        vector, model = await self._content_vector(content, embedding)
        return await self._backend.execute(dataclasses.replace(request, embedding=vector, embedding_model=model))

    @property
    def embedder(self) -> Embedder | None:
        """The embedder this client runs before it writes and recalls (None: words only); loaded on first use."""
        return self._embeddings.embedder()

    @property
    def embedder_loaded(self) -> bool:
        """Whether the embedder has been loaded (the first write or recall loads it)."""
        return self._embeddings.loaded

    async def warm_up(self) -> None:
        """Load the embedder and register its model now, as a server does when it starts: the first
        request then neither loads the model nor waits on another request's first vector."""
        embedder = await asyncio.to_thread(self._embeddings.embedder)
        if embedder is not None:
            await self._backend.execute(
                RegisterEmbeddingModel(model_id=embedder.model_id, dimensions=embedder.dimensions)
            )

    async def embedding_status(self) -> EmbeddingStatus | None:
        """For the client's embedder (None without one): whether the engine searches by meaning, and how
        many memories of every owner await a vector (``prme.embedding_status``; docs/RECALL.md)."""
        embedder = await self._loaded_embedder()
        if embedder is None:
            return None
        return await self._backend.execute(GetEmbeddingStatus(model_id=embedder.model_id))

    async def _loaded_embedder(self) -> Embedder | None:
        # Loading the model reads 16 MB from disk: in a thread, off the event loop. No call to
        # the engine: a model's first vector registers it (prme.add_node).
        return await asyncio.to_thread(self._embeddings.embedder)

    async def _content_vector(self, content: str, embedding: object) -> tuple[Vector | None, str | None]:
        embedder = await self._loaded_embedder()
        if embedder is None:
            if embedding is not None:
                raise no_embedder("embedding")
            return None, None
        vector = await asyncio.to_thread(self._embeddings.content_vector, embedder, content, embedding)
        return vector, None if vector is None else embedder.model_id

    async def add_nodes(self, items: Iterable[Mapping[str, Any] | NodeItem], *, user_id: str) -> list[Node]:
        """Create up to 1000 memories in one transaction, each exactly as :meth:`add_node` would
        (its create record included); all or nothing. Each item is a mapping of add_node's
        keyword arguments, plus ``created_at`` (when it was first made elsewhere). Returns one
        node per item, in order; an item whose ``node_id`` is stored already with the same
        content, scope, namespace and kind is ``replayed`` (nothing written), so a retried batch
        writes only what is missing. A bad item raises InvalidInput (a taken node_id
        IdempotencyConflict) whose message starts with ``items[N]``. As add_node, the client's
        embedder embeds each item's content (an item's ``embedding``, a vector by that model, is
        stored as given), the whole batch in one call of the model. See docs/IMPORT.md."""
        embedder = await self._loaded_embedder()
        # The model runs once for the batch, in a thread, off the event loop.
        request = await asyncio.to_thread(add_nodes_request, items, user_id, embedder)
        return await self._backend.execute(request)

    async def add_event(
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
        return await self._backend.execute(
            add_event_request(content, user_id, scope, namespace, kind, payload, occurred_at, event_id)
        )

    async def get_node(self, node_id: UUID | str, *, user_id: str) -> Node:
        """One memory of ``user_id`` (any lifecycle state). :class:`NotFoundError` otherwise."""
        return await self._backend.execute(GetNode(user_id=user_id, node_id=parse_uuid("node_id", node_id)))

    async def list_nodes(
        self,
        *,
        user_id: str,
        namespace: str | None = None,
        after_node_id: UUID | str | None = None,
        max_count: int = 100,
    ) -> list[Node]:
        """One page of memories in id order, after ``after_node_id``."""
        return await self._backend.execute(list_nodes_request(user_id, namespace, after_node_id, max_count))

    async def iter_nodes(
        self, *, user_id: str, namespace: str | None = None, page_size: int = 100
    ) -> AsyncIterator[Node]:
        """Every memory of ``user_id`` in id order, fetched in keyset pages of ``page_size``."""
        page_size = check_page_size(page_size)
        after: UUID | None = None
        while True:
            page = await self.list_nodes(user_id=user_id, namespace=namespace, after_node_id=after, max_count=page_size)
            for node in page:
                yield node
            if len(page) < page_size:
                return
            after = page[-1].id

    async def reinforce(
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
        return await self._backend.execute(reinforce_request(node_id, evidence_id, user_id, request_id))

    async def archive_node(self, node_id: UUID | str, *, user_id: str) -> Node:
        """Retire a memory: it stays readable but can no longer be confirmed."""
        return await self._backend.execute(ArchiveNode(user_id=user_id, node_id=parse_uuid("node_id", node_id)))

    async def verify_journal(self, *, user_id: str, independent: bool = False) -> list[JournalIssue]:
        """Problems in the journal of ``user_id``; an empty list means it verifies.

        By default the engine checks itself (``prme.verify_journal``). With
        ``independent=True`` the records are read and checked by Python's own verifier
        (:func:`prme_pg.journal.verify_records`: sha256, RFC 8785 form, chain,
        continuity, heads, records without their node), read through
        ``prme.journal_records``.
        """
        if independent:
            records, heads = await self.journal_records(user_id=user_id)
            return verify_records(records, heads)
        return await self._backend.execute(VerifyJournal(user_id=user_id))

    async def replay_node(self, node_id: UUID | str, *, user_id: str) -> ReplayResult:
        """Rebuild a memory from its journal and compare it with the stored row."""
        return await self._backend.execute(ReplayNode(user_id=user_id, node_id=parse_uuid("node_id", node_id)))

    async def journal_records(self, *, user_id: str) -> tuple[list[JournalRecord], list[NodeHead]]:
        """The stored journal of ``user_id`` and each node's head, as the verifier reads them."""
        return await self._backend.execute(GetJournalRecords(user_id=user_id))

    async def node_journal(
        self, node_id: UUID | str, *, user_id: str, max_count: int = 1000
    ) -> tuple[list[JournalRecord], NodeHead]:
        """The oldest ``max_count`` (1..10000) journal records of one memory and its head, as the
        verifier reads them (``verify_records(records, [head])`` once the chain is complete)."""
        return await self._backend.execute(
            GetNodeJournal(user_id=user_id, node_id=parse_uuid("node_id", node_id), max_count=max_count)
        )

    async def node_evidence(self, node_id: UUID | str, *, user_id: str, max_count: int = 100) -> list[Event]:
        """The events a memory cites in ``evidence_refs``, each once, oldest first."""
        return await self._backend.execute(
            ListNodeEvidence(user_id=user_id, node_id=parse_uuid("node_id", node_id), max_count=max_count)
        )

    async def authenticate_api_token(self, user_id: str, token_sha256: str) -> bool:
        """Whether ``token_sha256`` is a live bearer token of ``user_id``."""
        return await self._backend.execute(AuthenticateApiToken(user_id=user_id, token_sha256=token_sha256))

    async def create_api_token(self, user_id: str, *, label: str = "") -> str:
        """Mint a bearer token for ``user_id``; only its sha256 is stored, so show it once."""
        token = new_token(user_id)
        await self._backend.execute(CreateApiToken(user_id=user_id, token_sha256=token_sha256(token), label=label))
        return token

    async def revoke_api_token(self, token: str) -> bool:
        """Revoke a bearer token; false when it is malformed, unknown or already revoked."""
        parsed = parse_token(token)
        if parsed is None:
            return False
        return await self._backend.execute(RevokeApiToken(user_id=parsed.user_id, token_sha256=parsed.sha256))

    async def readiness(self) -> tuple[bool, list[str]]:
        """Whether the database accepts writes, and its applied migrations as ``version:sha256``."""
        return await self._backend.execute(GetReadiness())

    # -- recall and snapshots (docs/SNAPSHOTS.md) --

    async def recall(
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
        embedder = await self._loaded_embedder()
        if embedder is None:
            if query_embedding is not None:
                raise no_embedder("query_embedding")
            return await self._backend.execute(request)
        vector = await asyncio.to_thread(self._embeddings.query_vector, embedder, query, query_embedding)
        model = None if vector is None else embedder.model_id
        return await self._backend.execute(dataclasses.replace(request, query_embedding=vector, embedding_model=model))

    async def find_nodes(
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
        embedder = await self._loaded_embedder() if by_meaning else None
        # Embedding the question is CPU work: in a thread, off the event loop.
        searched = await asyncio.to_thread(self._embeddings.by_meaning, request, embedder, query_embedding, by_meaning)
        return await self._backend.execute(searched)

    async def publish_snapshot(
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
        return await self._backend.execute(
            PublishSnapshot(
                user_id=user_id,
                scope=scope,
                max_items=max_items,
                max_bytes=max_bytes,
                expected_generation_id=expected_generation_id,
            )
        )

    async def current_snapshot(self, scope: str, *, user_id: str) -> Snapshot:
        """The current generation of ``scope``, verified; :class:`NotFoundError` if never published."""
        return await self._backend.execute(GetCurrentSnapshot(user_id=user_id, scope=scope))

    async def get_snapshot(self, scope: str, generation_id: str, *, user_id: str) -> Snapshot:
        """One generation of ``scope`` by id, current or not, verified."""
        return await self._backend.execute(GetSnapshot(user_id=user_id, scope=scope, generation_id=generation_id))

    async def assemble_prompt(self, scopes: str | Iterable[str], *, user_id: str, budget_bytes: int) -> AssembledPrompt:
        """Prompt text from the current generation of each scope, within ``budget_bytes``
        (``prme.assemble_prompt``)."""
        return await self._backend.execute(assemble_prompt_request(scopes, user_id, budget_bytes))

    # -- outcomes and maintenance --

    async def record_outcome(
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
        return await self._backend.execute(
            record_outcome_request(node_id, outcome, user_id, evidence_id, profile_id, thread_id, notes, request_id)
        )

    async def outcome_summary(self, node_id: UUID | str, *, user_id: str) -> OutcomeSummary:
        """Outcome counts, score and suggested stability of a memory."""
        return await self._backend.execute(GetOutcomeSummary(user_id=user_id, node_id=parse_uuid("node_id", node_id)))

    async def node_outcomes(self, node_id: UUID | str, *, user_id: str, max_count: int = 100) -> list[Outcome]:
        """The outcome events of a memory, newest first, at most ``max_count`` (1..10000)."""
        return await self._backend.execute(
            ListNodeOutcomes(user_id=user_id, node_id=parse_uuid("node_id", node_id), max_count=max_count)
        )

    async def maintenance_report(
        self, *, user_id: str, as_of: datetime | None = None
    ) -> list[MaintenanceRecommendation]:
        """What maintenance recommends for the memories of ``user_id``; changes nothing
        (``prme.maintenance_report``)."""
        return await self._backend.execute(GetMaintenanceReport(user_id=user_id, as_of=parse_time("as_of", as_of)))

    async def maintenance_patch(self, *, user_id: str, as_of: datetime | None = None) -> MaintenancePatch:
        """Store the actionable recommendations as a patch for review; changes no memory
        (``prme.maintenance_patch``)."""
        return await self._backend.execute(CreateMaintenancePatch(user_id=user_id, as_of=parse_time("as_of", as_of)))

    async def get_patch(self, patch_id: UUID | str, *, user_id: str) -> MaintenancePatch:
        """A stored patch with each op's status; :class:`NotFoundError` for another owner's."""
        return await self._backend.execute(GetPatch(user_id=user_id, patch_id=parse_uuid("patch_id", patch_id)))

    async def apply_patch(
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
        return await self._backend.execute(apply_patch_request(patch_id, op_ids, user_id, mode))

    async def link_correction(
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
        return await self._backend.execute(link_correction_request(message, candidate_node_ids, user_id, thread_id))

    async def is_correction(self, message: str) -> bool:
        """Does ``message`` use explicit correction phrasing ("don't …", "no, …", "actually …")?
        Reads nothing (``prme.is_correction``)."""
        return await self._backend.execute(IsCorrection(message=message))

    async def list_correction_inbox(
        self, *, user_id: str, include_resolved: bool = False, max_count: int = 100
    ) -> list[CorrectionInboxEntry]:
        """The corrections of ``user_id`` that matched zero or several memories, oldest first:
        open ones, or all with ``include_resolved``."""
        return await self._backend.execute(
            ListCorrectionInbox(user_id=user_id, include_resolved=include_resolved, max_count=max_count)
        )

    async def resolve_correction(
        self, inbox_id: UUID | str, node_id: UUID | str | None = None, *, user_id: str
    ) -> CorrectionInboxEntry:
        """Link an inbox entry to a memory (appending its explicit_correction), or dismiss it
        (``node_id=None``). The same resolution again returns the entry; another one raises
        :class:`IdempotencyConflict`."""
        return await self._backend.execute(resolve_correction_request(inbox_id, node_id, user_id))

    async def mark_reviewed(self, node_id: UUID | str, *, user_id: str, next_review_at: datetime | None = None) -> Node:
        """Record a review: ``next_review_at`` (default: one cadence of its stability from now)
        and every outcome so far counts as seen (``prme.mark_reviewed``)."""
        return await self._backend.execute(mark_reviewed_request(node_id, user_id, next_review_at))

    async def get_maintenance_settings(self, *, user_id: str) -> list[MaintenanceSetting]:
        """The effective review cadence and decay per overdue cycle of ``user_id`` for each
        stability."""
        return await self._backend.execute(GetMaintenanceSettings(user_id=user_id))

    async def set_maintenance_setting(
        self, stability: str, *, user_id: str, review_cadence: timedelta, decay_per_cycle: Fraction
    ) -> list[MaintenanceSetting]:
        """Override the review cadence (1 hour to 3650 days, whole seconds) and decay per
        overdue cycle ([0, 1]) of one stability for ``user_id``; returns the effective
        settings."""
        return await self._backend.execute(
            set_maintenance_setting_request(stability, user_id, review_cadence, decay_per_cycle)
        )

    async def reset_maintenance_settings(self, *, user_id: str) -> list[MaintenanceSetting]:
        """Remove the overrides of ``user_id``: the defaults apply again."""
        return await self._backend.execute(ResetMaintenanceSettings(user_id=user_id))

    # -- the operations ledger (PostgreSQL only; docs/LEDGER.md) --

    async def submit_operation(
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
        return await self._backend.execute(
            submit_operation_request(operation_id, kind, payload, user_id, dependencies, payload_hash, schema_version)
        )

    async def get_receipt(self, operation_id: UUID | str, *, user_id: str) -> Receipt:
        """The receipt of an operation as it stands now; :class:`NotFoundError` when unknown to
        this owner (PostgreSQL only)."""
        return await self._backend.execute(
            GetReceipt(user_id=user_id, operation_id=parse_operation_id("operation_id", operation_id))
        )

    async def operation_events(
        self,
        *,
        user_id: str,
        after_seq: int = 0,
        operation_id: UUID | str | None = None,
        max_count: int = 100,
    ) -> list[OperationEvent]:
        """Events of the owner's operations (or of one) with ``seq > after_seq``, in order; pass
        the last ``seq`` seen to resume without gap or duplicate (PostgreSQL only)."""
        return await self._backend.execute(operation_events_request(user_id, after_seq, operation_id, max_count))

    async def ledger_status(self) -> LedgerStatus:
        """Whether the ledger accepts submits, and the executor's backlog (PostgreSQL only)."""
        return await self._backend.execute(GetLedgerStatus())

    # -- the outbox (memory packs only; docs/OUTBOX.md) --

    async def enqueue(
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

        Needs no :meth:`open`; the fsynced writes run in a worker thread.
        """
        if not isinstance(self._backend, AsyncDuckDBBackend):
            raise PrmeError("enqueue writes to a memory pack's outbox; on PostgreSQL, call submit_operation")
        if self._closed:
            raise PackClosedError(f"the memory pack at {self.target} is closed")

        def enqueue() -> OutboxRecord:
            return Outbox(self.target).enqueue(
                kind, payload, user_id=user_id, dependencies=dependencies, operation_id=operation_id
            )

        return await asyncio.to_thread(enqueue)

    async def enqueue_learning(
        self, session_id: str, items: Iterable[Mapping[str, Any]], *, user_id: str, scope: str = "personal"
    ) -> LearningRecord:
        """Store one learning record (a session's items) for ``prme-pg sync`` to learn from (docs/LEARNING.md).

        Validates the items (:class:`InvalidInput` naming the first bad field; nothing is
        stored) and returns the durable record at once: no inference, no database, not the
        pack's DuckDB file, so it works while another process has the pack open. Packs only.

        Needs no :meth:`open`; the fsynced writes run in a worker thread.
        """
        if not isinstance(self._backend, AsyncDuckDBBackend):
            raise PrmeError("enqueue_learning writes to a memory pack's learning queue; open the client on a pack")
        if self._closed:
            raise PackClosedError(f"the memory pack at {self.target} is closed")
        queue, listed = LearningQueue(self.target), list(items)
        return await asyncio.to_thread(queue.enqueue, session_id, listed, user_id=user_id, scope=scope)
