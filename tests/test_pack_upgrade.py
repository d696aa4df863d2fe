"""A memory pack written in an older layout opens in the current one with nothing lost.

Format 3 keeps the maintenance bookkeeping on the memory's row (prme.nodes: confirmations,
running totals of outcome rows, what the last review settled, decay), as PostgreSQL does
since migration 0018_report_on_the_memory_row; format 2 counted outcomes at report time and
kept review and decay state in prme.node_maintenance. The test fills a pack through the
client, takes it back to format 2's tables exactly (the bookkeeping columns dropped,
node_maintenance as format 2 defined and filled it), and opens it again: the report at
several times, every outcome summary and outcome list, the journal and a new patch read
the same as before.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from prme_pg import MemoryClient
from prme_pg.backends.duckdb import FORMAT_VERSION, PACK_FILE, _table_definition

ALICE = "alice"
T0 = datetime(2026, 1, 1, tzinfo=UTC)

# Format 2's table (sql/duckdb/010_tables.sql before format 3), and which rows it held: a
# memory had one once it was reviewed or decayed.
FORMAT_2_NODE_MAINTENANCE = """
CREATE TABLE prme.node_maintenance (
    user_id VARCHAR NOT NULL,
    node_id UUID NOT NULL,
    reviewed_explicit_reinforcements BIGINT NOT NULL DEFAULT 0 CHECK (reviewed_explicit_reinforcements >= 0),
    reviewed_implicit_successes BIGINT NOT NULL DEFAULT 0 CHECK (reviewed_implicit_successes >= 0),
    reviewed_neutral_exposures BIGINT NOT NULL DEFAULT 0 CHECK (reviewed_neutral_exposures >= 0),
    reviewed_explicit_corrections BIGINT NOT NULL DEFAULT 0 CHECK (reviewed_explicit_corrections >= 0),
    reviewed_at TIMESTAMPTZ,
    decay_anchor TIMESTAMPTZ,
    decay_cycles INTEGER NOT NULL DEFAULT 0 CHECK (decay_cycles >= 0),
    updated_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (user_id, node_id)
)
"""
BOOKKEEPING = (
    "reinforcements",
    "recorded_reinforcements",
    "implicit_successes",
    "neutral_exposures",
    "explicit_corrections",
    "last_outcome_at",
    "reviewed_explicit_reinforcements",
    "reviewed_implicit_successes",
    "reviewed_neutral_exposures",
    "reviewed_explicit_corrections",
    "reviewed_at",
    "decay_anchor",
    "decay_cycles",
)


class Clock:
    """Seven hours on per call: outcomes spread over weeks, so reports as of the past
    leave the later ones out."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(hours=7)
        return self.now


def fill(memory: MemoryClient, clock: Clock) -> None:
    """Memories of each stability with outcomes of each kind, confirmations, reviews, a
    correction after a review, an applied patch (decay and stability) and outcomes after it."""
    kinds = ("explicit_reinforcement", "implicit_success", "neutral_exposure", "explicit_correction")
    nodes = [
        memory.add_node(f"memory {i} about tabs", user_id=ALICE, stability=("low", "semi-stable", "stable")[i % 3])
        for i in range(12)
    ]
    for i, node in enumerate(nodes):
        for j in range(i % 7):
            memory.record_outcome(node.id, kinds[(i + j) % 4] if i % 2 else "implicit_success", user_id=ALICE)
        for j in range(i % 3):
            memory.reinforce(node.id, user_id=ALICE, request_id=uuid.UUID(int=(i << 8) | j))
    memory.mark_reviewed(nodes[5].id, user_id=ALICE)
    memory.mark_reviewed(nodes[6].id, user_id=ALICE)
    memory.record_outcome(nodes[5].id, "explicit_correction", user_id=ALICE)
    patch = memory.maintenance_patch(user_id=ALICE, as_of=clock.now)
    assert {op["op"] for op in patch.ops} >= {"decay_confidence", "update_stability"}
    memory.apply_patch(patch.patch_id, mode="auto", user_id=ALICE)
    for node in nodes[:4]:
        memory.record_outcome(node.id, "implicit_success", user_id=ALICE)


def readings(memory: MemoryClient) -> dict[str, Any]:
    """What the bookkeeping feeds: reports now and as of earlier times, each memory's summary
    and outcome list, and the journal's verdict."""
    nodes = sorted(memory.list_nodes(user_id=ALICE), key=lambda n: n.id)
    result: dict[str, Any] = {
        f"report as of {as_of}": sorted(memory.maintenance_report(user_id=ALICE, as_of=as_of), key=lambda r: r.node_id)
        for as_of in (T0 + timedelta(days=12), T0 + timedelta(days=30), T0 + timedelta(days=400))
    }
    result["summaries"] = [memory.outcome_summary(n.id, user_id=ALICE) for n in nodes]
    result["outcomes"] = [memory.node_outcomes(n.id, user_id=ALICE) for n in nodes]
    result["verify"] = memory.verify_journal(user_id=ALICE)
    return result


# Format 3's CHECKs of prme.nodes' names and checksum (010_tables.sql before format 4).
FORMAT_3_CHECKS = {
    "namespace": "regexp_full_match(namespace, '[a-z][a-z0-9_-]{0,62}')",
    "scope": "regexp_full_match(scope, '[a-z][a-z0-9_-]{0,62}')",
    "kind": "regexp_full_match(kind, '[a-z][a-z0-9_-]{0,62}')",
    "last_checksum": "regexp_full_match(last_checksum, '[0-9a-f]{64}')",
}


def node_checks(con: duckdb.DuckDBPyConnection) -> list[str]:
    rows = con.execute(
        "SELECT constraint_text FROM duckdb_constraints() "
        "WHERE schema_name = 'prme' AND table_name = 'nodes' AND constraint_type = 'CHECK' ORDER BY 1"
    ).fetchall()
    return [text for (text,) in rows]


def back_to_format_3(file: Path) -> None:
    """prme.nodes as format 3 created it: the same columns, its names and checksum checked by
    regular expressions."""
    definition, count = re.subn(
        r"CHECK \(\n\s+strlen\((\w+)\).*?\n    \)",
        lambda m: f"CHECK ({FORMAT_3_CHECKS[m[1]]})",
        _table_definition("nodes"),
        flags=re.DOTALL,
    )
    assert count == len(FORMAT_3_CHECKS)
    with duckdb.connect(str(file)) as con:
        con.execute("ALTER TABLE prme.nodes RENAME TO nodes_format_4")
        con.execute(definition)
        con.execute("INSERT INTO prme.nodes BY NAME SELECT * FROM prme.nodes_format_4")
        con.execute("DROP TABLE prme.nodes_format_4")
        con.execute("UPDATE prme.pack_info SET value = '3' WHERE key = 'format_version'")
        assert sum("regexp_full_match" in text for text in node_checks(con)) == len(FORMAT_3_CHECKS)


def back_to_format_2(file: Path) -> None:
    back_to_format_3(file)
    with duckdb.connect(str(file)) as con:
        con.execute(FORMAT_2_NODE_MAINTENANCE)
        con.execute(
            "INSERT INTO prme.node_maintenance SELECT user_id, id, reviewed_explicit_reinforcements, "
            "reviewed_implicit_successes, reviewed_neutral_exposures, reviewed_explicit_corrections, reviewed_at, "
            "decay_anchor, decay_cycles, coalesce(reviewed_at, decay_anchor) FROM prme.nodes "
            "WHERE reviewed_at IS NOT NULL OR decay_anchor IS NOT NULL"
        )
        for column in BOOKKEEPING:
            con.execute(f"ALTER TABLE prme.nodes DROP COLUMN {column}")
        con.execute("UPDATE prme.pack_info SET value = '2' WHERE key = 'format_version'")


def test_a_format_2_pack_reports_the_same_after_opening(tmp_path: Path) -> None:
    path = tmp_path / "memories"
    clock = Clock()
    counter = iter(range(1, 1 << 32))
    with MemoryClient(path, clock=clock, new_id=lambda: uuid.UUID(int=next(counter))) as memory:
        fill(memory, clock)
        before = readings(memory)
        at = clock.now
    assert any(before[key] for key in before if key.startswith("report"))
    assert before["verify"] == []
    back_to_format_2(path / PACK_FILE)
    with duckdb.connect(str(path / PACK_FILE)) as con:
        reviewed = con.execute("SELECT count(*), sum(decay_cycles) FROM prme.node_maintenance").fetchone()
        assert reviewed is not None and reviewed[0] >= 3 and reviewed[1] >= 1  # reviews and a decay to move

    with MemoryClient(path, clock=clock, new_id=lambda: uuid.UUID(int=next(counter))) as memory:
        assert readings(memory) == before
        # A patch proposed now sees what the old one settled: the same ops as a pack never downgraded.
        proposed = memory.maintenance_patch(user_id=ALICE, as_of=at)
    with duckdb.connect(str(path / PACK_FILE)) as con:
        assert con.execute("SELECT value FROM prme.pack_info WHERE key = 'format_version'").fetchone() == (
            str(FORMAT_VERSION),
        )
        assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'node_maintenance'").fetchone() == (
            0,
        )
    assert FORMAT_VERSION == 4
    assert [op["op"] for op in proposed.ops] == [op["op"] for op in _fresh_patch(tmp_path, at)]


def _fresh_patch(tmp_path: Path, at: datetime) -> tuple[dict[str, Any], ...]:
    """The patch the same calls propose on a pack that never changed format."""
    clock = Clock()
    counter = iter(range(1, 1 << 32))
    with MemoryClient(tmp_path / "fresh", clock=clock, new_id=lambda: uuid.UUID(int=next(counter))) as memory:
        fill(memory, clock)
        readings(memory)
        return memory.maintenance_patch(user_id=ALICE, as_of=at).ops


def test_an_upgraded_pack_keeps_counting(tmp_path: Path) -> None:
    """After the upgrade the totals on the row are live: new outcomes and confirmations count,
    and a review settles them."""
    path = tmp_path / "memories"
    with MemoryClient(path) as memory:
        node = memory.add_node("prefers tabs", user_id=ALICE)
        memory.record_outcome(node.id, "explicit_correction", user_id=ALICE)
        memory.reinforce(node.id, user_id=ALICE)
    back_to_format_2(path / PACK_FILE)
    with MemoryClient(path) as memory:
        summary = memory.outcome_summary(node.id, user_id=ALICE)
        assert (summary.explicit_reinforcements, summary.explicit_corrections) == (1, 1)
        memory.reinforce(node.id, user_id=ALICE)
        memory.record_outcome(node.id, "implicit_success", user_id=ALICE)
        summary = memory.outcome_summary(node.id, user_id=ALICE)
        assert (summary.explicit_reinforcements, summary.implicit_successes, summary.outcomes) == (2, 1, 4)
        (row,) = memory.maintenance_report(user_id=ALICE)
        assert (row.explicit_reinforcements, row.explicit_corrections) == (2, 1)
        memory.mark_reviewed(node.id, user_id=ALICE)
        assert memory.maintenance_report(user_id=ALICE) == []


def test_a_format_3_pack_gets_the_current_checks(tmp_path: Path) -> None:
    """Format 4 checks nodes' names and checksum without regular expressions: an older pack's
    prme.nodes is created again with them, every row and reading kept, and the same rules
    still refuse a bad value written behind the client's back."""
    path = tmp_path / "memories"
    clock = Clock()
    counter = iter(range(1, 1 << 32))
    with MemoryClient(path, clock=clock, new_id=lambda: uuid.UUID(int=next(counter))) as memory:
        fill(memory, clock)
        before = readings(memory)
    with duckdb.connect(str(path / PACK_FILE)) as con:
        current = node_checks(con)
        rows = con.execute("SELECT * FROM prme.nodes ORDER BY id").fetchall()
    assert not any("regexp" in text for text in current)
    back_to_format_3(path / PACK_FILE)

    with MemoryClient(path, clock=clock, new_id=lambda: uuid.UUID(int=next(counter))) as memory:
        assert readings(memory) == before
        node = memory.list_nodes(user_id=ALICE)[0]
        assert memory.reinforce(node.id, user_id=ALICE).version == node.version + 1
    with duckdb.connect(str(path / PACK_FILE)) as con:
        assert node_checks(con) == current
        assert con.execute("SELECT value FROM prme.pack_info WHERE key = 'format_version'").fetchone() == ("4",)
        assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE 'nodes_%'").fetchone() == (0,)
        after = con.execute("SELECT * FROM prme.nodes ORDER BY id").fetchall()
        assert [row for row in after if row[0] != node.id] == [row for row in rows if row[0] != node.id]
        for column, bad in (("namespace", "Default"), ("scope", "a" * 64), ("kind", "_x"), ("last_checksum", "F" * 64)):
            with pytest.raises(duckdb.ConstraintException):
                con.execute(f"UPDATE prme.nodes SET {column} = ? WHERE id = ?", [bad, node.id])
