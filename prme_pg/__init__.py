"""prme-pg: a PostgreSQL-native memory engine for AI agents.

The rules live in PL/pgSQL (schema ``prme``); this package applies the
migrations and offers typed clients, a CLI and an HTTP API around them.
"""

from .aio import AsyncMemoryClient
from .backends.duckdb import PackInUseError
from .client import MemoryClient
from .errors import IdempotencyConflict, InvalidInput, MigrationError, NotFoundError, PrmeError
from .models import Event, JournalIssue, Node, ReplayResult

__all__ = [
    "AsyncMemoryClient",
    "Event",
    "IdempotencyConflict",
    "InvalidInput",
    "JournalIssue",
    "MemoryClient",
    "MigrationError",
    "Node",
    "NotFoundError",
    "PackInUseError",
    "PrmeError",
    "ReplayResult",
]

__version__ = "0.1.0"
