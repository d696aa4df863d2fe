"""prme-pg: a PostgreSQL-native memory engine for AI agents.

The rules live in PL/pgSQL (schema ``prme``); this package applies the
migrations and offers typed clients, a CLI and an HTTP API around them.
"""

from .aio import AsyncMemoryClient
from .backends.duckdb import PackInUseError
from .client import MemoryClient
from .errors import IdempotencyConflict, IntegrityError, InvalidInput, MigrationError, NotFoundError, PrmeError
from .models import (
    AppliedOp,
    AssembledPrompt,
    CorrectionInboxEntry,
    CorrectionLink,
    CorrectionMatch,
    Event,
    JournalIssue,
    LedgerStatus,
    MaintenancePatch,
    MaintenanceRecommendation,
    MaintenanceSetting,
    Node,
    OperationEvent,
    Outcome,
    OutcomeSummary,
    PublishResult,
    RecallHit,
    Receipt,
    ReplayResult,
    Snapshot,
)

__all__ = [
    "AppliedOp",
    "AssembledPrompt",
    "AsyncMemoryClient",
    "CorrectionInboxEntry",
    "CorrectionLink",
    "CorrectionMatch",
    "Event",
    "IdempotencyConflict",
    "IntegrityError",
    "InvalidInput",
    "JournalIssue",
    "LedgerStatus",
    "MaintenancePatch",
    "MaintenanceRecommendation",
    "MaintenanceSetting",
    "MemoryClient",
    "MigrationError",
    "Node",
    "NotFoundError",
    "OperationEvent",
    "Outcome",
    "OutcomeSummary",
    "PackInUseError",
    "PrmeError",
    "PublishResult",
    "RecallHit",
    "Receipt",
    "ReplayResult",
    "Snapshot",
]

__version__ = "0.1.0"
