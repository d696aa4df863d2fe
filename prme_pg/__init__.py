"""prme-pg: a PostgreSQL-native memory engine for AI agents.

The rules live in PL/pgSQL (schema ``prme``); this package applies the
migrations and offers typed clients, a CLI and an HTTP API around them.

The public names are imported on first use (PEP 562): a short-lived process that
needs one module -- an agent's stop hook running ``prme-pg hook`` or ``prme-pg
enqueue`` -- does not pay for DuckDB, asyncio and psycopg's pool.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .aio import AsyncMemoryClient
    from .backends.duckdb import PackInUseError
    from .client import MemoryClient
    from .errors import (
        IdempotencyConflict,
        IntegrityError,
        InvalidInput,
        MigrationError,
        NotFoundError,
        PrmeError,
        SchemaMissing,
    )
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
        ReviewSchedule,
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
    "ReviewSchedule",
    "SchemaMissing",
    "Snapshot",
]

__version__ = "0.1.0"

# The module of each public name that is not a model (models are in .models).
_MODULE_OF = {
    "AsyncMemoryClient": ".aio",
    "MemoryClient": ".client",
    "PackInUseError": ".backends.duckdb",
    **dict.fromkeys(
        (
            "IdempotencyConflict",
            "IntegrityError",
            "InvalidInput",
            "MigrationError",
            "NotFoundError",
            "PrmeError",
            "SchemaMissing",
        ),
        ".errors",
    ),
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULE_OF.get(name, ".models"), __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
