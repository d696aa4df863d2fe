"""The memory pack's backend: :class:`DuckDBBackend` opens a pack, installs its tables and
rules, and dispatches each request to its capability (one module each);
:class:`AsyncDuckDBBackend` runs it from asyncio."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import duckdb

from ...errors import InvalidInput, NotOnPack, PrmeError
from .. import (
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
    IndexEmbeddings,
    IsCorrection,
    LinkCorrection,
    ListCorrectionInbox,
    ListNodeEvidence,
    ListNodeOutcomes,
    ListNodes,
    ListOperationEvents,
    ListPendingEmbeddings,
    MarkReviewed,
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
    StoreEmbeddings,
    SubmitOperation,
    VerifyJournal,
)
from .connection import DEFAULT_PATH, PackClosedError, sql_directory
from .corrections import CorrectionOperations, is_correction_text
from .embeddings import EmbeddingOperations
from .find_nodes import FindNodesOperations
from .journal import JournalOperations
from .maintenance import MaintenanceOperations
from .nodes import NodeOperations
from .outcomes import OutcomeOperations
from .patches import PatchOperations
from .recall import RecallOperations, _prepare_recall
from .snapshots import SnapshotOperations
from .tokens import TokenOperations
from .upgrade import FORMAT_VERSION, _upgrade_pack

T = TypeVar("T")


class DuckDBBackend(
    NodeOperations,
    JournalOperations,
    OutcomeOperations,
    CorrectionOperations,
    MaintenanceOperations,
    PatchOperations,
    RecallOperations,
    FindNodesOperations,
    EmbeddingOperations,
    TokenOperations,
    SnapshotOperations,
):
    """Runs requests on a memory pack, each as one DuckDB transaction under the pack lock.

    ``clock`` and ``new_id`` replace the wall clock and :func:`uuid.uuid4` (for node,
    event and operation ids): reproducible packs for tests and examples. The clock is
    read once per call, as PostgreSQL's ``now()`` is fixed for a transaction.

    The operations are those of its bases, one per capability module (nodes.py,
    outcomes.py, ...); their connection, lock and transactions are
    :class:`~.connection.PackConnection`'s.
    """

    # -- lifecycle --

    def _install(self) -> None:
        scripts = sorted(sql_directory().glob("*.sql"))

        def install(con: duckdb.DuckDBPyConnection) -> None:
            for script in scripts:
                con.execute(script.read_text(encoding="utf-8"))
            row = con.execute("SELECT value FROM prme.pack_info WHERE key = 'format_version'").fetchone()
            if row is None:
                con.execute("INSERT INTO prme.pack_info VALUES ('format_version', $v)", {"v": str(FORMAT_VERSION)})
            elif int(row[0]) > FORMAT_VERSION:
                raise PrmeError(
                    f"the memory pack at {self.path} has format {row[0]}, newer than this prme-pg "
                    f"(format {FORMAT_VERSION}): upgrade prme-pg to open it"
                )
            elif int(row[0]) < FORMAT_VERSION:
                # The scripts above and _upgrade_pack bring it up to date; an older prme-pg
                # then refuses it.
                _upgrade_pack(con, int(row[0]))
                con.execute(
                    "UPDATE prme.pack_info SET value = $v WHERE key = 'format_version'", {"v": str(FORMAT_VERSION)}
                )

        self.run(install)
        self.run(_prepare_recall)

    # -- requests --

    def execute(self, request: Request[T]) -> T:
        try:
            result: Any = self._dispatch(request)
        except UnicodeEncodeError as exc:
            raise InvalidInput(f"text is not valid Unicode: {exc.reason}") from exc
        return cast(T, result)

    def _dispatch(self, request: Request[Any]) -> Any:
        match request:
            case Reinforce():
                return self.reinforce(request)
            case GetNode():
                return self.get_node(request)
            case AddNode():
                return self.add_node(request)
            case AddNodes():
                return self.add_nodes(request)
            case AddEvent():
                return self.add_event(request)
            case ListNodes():
                return self.list_nodes(request)
            case ArchiveNode():
                return self.archive_node(request)
            case VerifyJournal():
                return self.verify_journal(request)
            case ReplayNode():
                return self.replay_node(request)
            case GetJournalRecords():
                return self.journal_records(request)
            case GetNodeJournal():
                return self.node_journal(request)
            case ListNodeEvidence():
                return self.node_evidence(request)
            case AuthenticateApiToken():
                return self.authenticate_api_token(request)
            case CreateApiToken():
                return self.create_api_token(request)
            case RevokeApiToken():
                return self.revoke_api_token(request)
            case GetReadiness():
                # A pack has no migrations: it is ready once open (docs/DUCKDB.md).
                return self.run(lambda con: (True, []))
            case PublishSnapshot():
                return self.publish_snapshot(request)
            case GetCurrentSnapshot():
                return self.current_snapshot(request)
            case GetSnapshot():
                return self.get_snapshot(request)
            case AssemblePrompt():
                return self.assemble_prompt(request)
            case Recall():
                return self.recall(request)
            case FindNodes():
                return self.find_nodes(request)
            case RecordOutcome():
                return self.record_outcome(request)
            case GetOutcomeSummary():
                return self.outcome_summary(request)
            case ListNodeOutcomes():
                return self.node_outcomes(request)
            case LinkCorrection():
                return self.link_correction(request)
            case IsCorrection():
                return is_correction_text(request.message)
            case ListCorrectionInbox():
                return self.list_correction_inbox(request)
            case ResolveCorrection():
                return self.resolve_correction(request)
            case GetMaintenanceSettings():
                return self.maintenance_settings(request)
            case SetMaintenanceSetting():
                return self.set_maintenance_setting(request)
            case ResetMaintenanceSettings():
                return self.reset_maintenance_settings(request)
            case MarkReviewed():
                return self.mark_reviewed(request)
            case GetMaintenanceReport():
                return self.maintenance_report(request)
            case CreateMaintenancePatch():
                return self.maintenance_patch(request)
            case GetPatch():
                return self.get_patch(request)
            case ApplyPatch():
                return self.apply_patch(request)
            case RegisterEmbeddingModel():
                return self.register_embedding_model(request)
            case ListPendingEmbeddings():
                return self.pending_embeddings(request)
            case StoreEmbeddings():
                return self.store_embeddings(request)
            case IndexEmbeddings():
                return self.index_embeddings(request)
            case GetEmbeddingStatus():
                return self.embedding_status(request)
            case SubmitOperation() | GetReceipt() | ListOperationEvents() | GetLedgerStatus():
                raise NotOnPack(
                    f"{type(request).__name__} needs PostgreSQL: a memory pack has no operations ledger "
                    "(open the client with a postgresql:// DSN)"
                )
            case _:
                raise TypeError(f"not a prme_pg request: {request!r}")


class AsyncDuckDBBackend:
    """A memory pack for asyncio: each call runs in a worker thread, to completion.

    The call is shielded: cancelling the awaiting task does not stop the thread, and
    this backend's :class:`asyncio.Lock` stays held until the thread has committed or
    rolled back. So the next call (a retry, say) starts only after the cancelled one
    finished, and finds its key: a replay, never a second count. The threads also
    take the pack lock of :class:`DuckDBBackend`, so asyncio and thread callers mix.
    """

    def __init__(
        self,
        path: str | Path = DEFAULT_PATH,
        *,
        clock: Callable[[], datetime] | None = None,
        new_id: Callable[[], uuid.UUID] | None = None,
    ) -> None:
        self.path = path
        self._options: dict[str, Any] = {"clock": clock, "new_id": new_id}
        self._sync: DuckDBBackend | None = None
        self._lock = asyncio.Lock()

    @property
    def sync(self) -> DuckDBBackend:
        """The underlying synchronous backend (opened by :meth:`open`)."""
        if self._sync is None:
            raise PackClosedError(f"the memory pack at {self.path} is not open")
        return self._sync

    async def open(self) -> None:
        if self._sync is None:
            self._sync = await asyncio.to_thread(DuckDBBackend, self.path, **self._options)

    async def execute(self, request: Request[T]) -> T:
        return await self.run_in_thread(self.sync.execute, request)

    async def run_in_thread(self, function: Callable[..., T], *args: Any) -> T:
        """Run ``function(*args)`` in a thread under the lock, to completion even if cancelled."""
        await self._lock.acquire()
        try:
            task = asyncio.ensure_future(asyncio.to_thread(function, *args))
        except BaseException:
            self._lock.release()
            raise
        task.add_done_callback(self._finished)
        return await asyncio.shield(task)

    def _finished(self, task: asyncio.Future[Any]) -> None:
        self._lock.release()
        if not task.cancelled():
            task.exception()  # retrieved here, in case the caller was cancelled and left

    async def close(self) -> None:
        async with self._lock:  # waits for a call still finishing in its thread
            if self._sync is not None:
                sync, self._sync = self._sync, None
                await asyncio.to_thread(sync.close)
