"""The DuckDB backend: a memory pack, the engine embedded in a folder.

A pack is a folder (``./memories`` by default) holding one DuckDB file,
``pack.duckdb``, with the tables of ``sql/duckdb/010_tables.sql`` -- the same
tables and columns as PostgreSQL -- and the rules as DuckDB macros
(``020_rules.sql``, ``030_checks.sql``) that produce byte-identical journal
records. It is created on first open; the macros are recreated on every open.

Every call is one DuckDB transaction (BEGIN, statements, COMMIT; ROLLBACK on any
exception) run while holding the pack's lock, so calls never interleave: the
lock is what PostgreSQL's row lock and key claim are to ``prme.reinforce``.
Because the work runs to completion once started, an async call cancelled by
its caller may still commit, and a retry with the same ``request_id`` is then a
replay. Write-write conflicts (another connection writing the same rows
outside this package) are retried, never reported as lost data.

Validation and errors are PostgreSQL's (``sql/postgres/030_validation.sql``):
the same checks, messages and error classes.

The code is split by capability, as ``sql/postgres`` is; a module imports from those
listed before it only:

* :mod:`.connection` -- the pack's file, lock and transactions;
* :mod:`.records`, :mod:`.validation`, :mod:`.rows` -- journal record text, the checks,
  the models built from rows;
* :mod:`.writes` -- what every write of a memory shares (its row, key, evidence, record);
* :mod:`.recall`, :mod:`.journal`, :mod:`.maintenance`, :mod:`.nodes`, :mod:`.outcomes`,
  :mod:`.corrections`, :mod:`.patches`, :mod:`.tokens`, :mod:`.snapshots` -- each
  capability's statements, rules and operations;
* :mod:`.upgrade` -- pack format upgrades;
* :mod:`.backend` -- :class:`DuckDBBackend` (installing a pack, dispatching requests)
  and :class:`AsyncDuckDBBackend`.
"""

# The public names (__all__); and, re-exported as "X as X", the names tests/ and
# bench/client_bench.py import from this package, as they did before the split.
from .backend import AsyncDuckDBBackend, DuckDBBackend
from .connection import DEFAULT_PATH, PACK_FILE, PackClosedError, PackInUseError, sql_directory
from .maintenance import _SETTING_KEYS as _SETTING_KEYS
from .maintenance import report_statement as report_statement
from .nodes import CONFIRM_NODE as CONFIRM_NODE
from .outcomes import REBUILD_OUTCOME_TOTALS as REBUILD_OUTCOME_TOTALS
from .records import node_state_text as node_state_text
from .records import reinforce_entry as reinforce_entry
from .rows import _CONFIRM_NAMES as _CONFIRM_NAMES
from .upgrade import FORMAT_VERSION
from .upgrade import _table_definition as _table_definition
from .writes import INSERT_JOURNAL as INSERT_JOURNAL
from .writes import REINFORCE_KEY as REINFORCE_KEY
from .writes import UPDATE_EVIDENCE as UPDATE_EVIDENCE
from .writes import UPDATE_NODE as UPDATE_NODE

__all__ = [
    "DEFAULT_PATH",
    "FORMAT_VERSION",
    "PACK_FILE",
    "AsyncDuckDBBackend",
    "DuckDBBackend",
    "PackClosedError",
    "PackInUseError",
    "sql_directory",
]
