"""prme-pg: a PostgreSQL-native memory engine for AI agents.

The rules live in PL/pgSQL (schema ``prme``); this package applies the
migrations and offers typed clients, a CLI and an HTTP API around them.
"""

from .errors import IdempotencyConflict, InvalidInput, MigrationError, NotFoundError, PrmeError

__all__ = [
    "IdempotencyConflict",
    "InvalidInput",
    "MigrationError",
    "NotFoundError",
    "PrmeError",
]

__version__ = "0.1.0"
