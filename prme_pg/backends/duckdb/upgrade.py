"""Pack format upgrades: a pack of an older format brought to the current layout when opened."""

from __future__ import annotations

import duckdb

from .connection import sql_directory
from .outcomes import REBUILD_OUTCOME_TOTALS

#: Layout version of the tables in a pack; a newer pack is refused, not misread. 2: a
#: confirmation's idempotency key is its journal record (journal.key_namespace). 3: the
#: maintenance bookkeeping is on the memory's row (nodes), table node_maintenance is gone.
#: 4: the CHECKs of nodes' names and checksum without regular expressions (same rules).
FORMAT_VERSION = 4


# Format 2's prme.node_maintenance: what reviews settled and decay did, one row per memory
# reviewed or decayed, moved onto the memory's row.
_MOVE_NODE_MAINTENANCE = """
UPDATE prme.nodes AS n SET
    reviewed_explicit_reinforcements = k.reviewed_explicit_reinforcements,
    reviewed_implicit_successes = k.reviewed_implicit_successes,
    reviewed_neutral_exposures = k.reviewed_neutral_exposures,
    reviewed_explicit_corrections = k.reviewed_explicit_corrections,
    reviewed_at = k.reviewed_at, decay_anchor = k.decay_anchor, decay_cycles = k.decay_cycles
FROM prme.node_maintenance AS k
WHERE k.user_id = n.user_id AND k.node_id = n.id
"""


def _table_definition(table: str) -> str:
    """The CREATE TABLE statement of prme.<table> in 010_tables.sql."""
    text = (sql_directory() / "010_tables.sql").read_text(encoding="utf-8")
    start = text.index(f"CREATE TABLE IF NOT EXISTS prme.{table} (")
    return text[start : text.index("\n);", start) + 3]


def _upgrade_pack(con: duckdb.DuckDBPyConnection, version: int) -> None:
    """Bring a pack of format ``version`` (older than FORMAT_VERSION) to the current layout, in
    the opening transaction. Format 1 to 2 is done by 010_tables.sql (idempotent statements).
    To 3: the bookkeeping goes onto the memory's row, its totals counted once from the
    outcome rows and the journal, and node_maintenance's review and decay state moved over.
    To 4: prme.nodes is created again with its current CHECKs (DuckDB cannot alter a CHECK)
    and its rows copied over by column name; columns an older format lacked (format 3's
    bookkeeping) start at their defaults."""
    if version < 4:
        con.execute("ALTER TABLE prme.nodes RENAME TO nodes_before_format_4")
        con.execute(_table_definition("nodes"))
        con.execute("INSERT INTO prme.nodes BY NAME SELECT * FROM prme.nodes_before_format_4")
        con.execute("DROP TABLE prme.nodes_before_format_4")
    if version < 3:
        con.execute(REBUILD_OUTCOME_TOTALS)
        if con.execute(
            "SELECT 1 FROM duckdb_tables() WHERE schema_name = 'prme' AND table_name = 'node_maintenance'"
        ).fetchone():
            con.execute(_MOVE_NODE_MAINTENANCE)
            con.execute("DROP TABLE prme.node_maintenance")
