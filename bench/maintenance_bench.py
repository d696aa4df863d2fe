"""prme-pg maintenance benchmark (issue 7, item 7): the report against one scan of the outcomes.

Run from the repository root:

    .venv/bin/python bench/maintenance_bench.py               # 1,000,000 memories, 5,000,000 outcome events
    .venv/bin/python bench/maintenance_bench.py --scale 0.1   # 100,000 and 500,000 (a quick look)
    .venv/bin/python bench/maintenance_bench.py --patch       # also time maintenance_patch (stores every op)
    .venv/bin/python bench/maintenance_bench.py --previous    # also time the report as first released (0003)
    .venv/bin/python bench/maintenance_bench.py --floor       # also time returning the rows without computing them
    .venv/bin/python bench/maintenance_bench.py --best-layout # also time both over the best layout of the row

It starts its own throwaway cluster from this machine's PostgreSQL binaries (durability
off: the data is generated, and the measured statements only read), applies the
migrations, and generates one owner's data set-based with generate_series:

* memories: 50 % low, 30 % semi-stable, 20 % stable; 40 % with a next_review_at between
  120 days ago and 60 days ahead, the rest unscheduled (due one cadence after their last
  confirmation or creation); 3 % contested, 2 % archived; created up to a year ago;
* outcome events, 1 to 9 per memory (5 on average, exactly 5 x memories in total):
  10 % explicit_reinforcement, 60 % implicit_success, 25 % neutral_exposure,
  5 % explicit_correction, all recorded before now;
* the outcome totals on each memory rebuilt set-based from the events
  (prme._rebuild_outcome_totals: the bulk load bypasses prme._add_outcome, which keeps them
  during normal writes; the memories' table is then compacted with VACUUM FULL, as a
  load that wrote the totals with the memories would have left it), and a review state
  for every tenth memory (with what it leaves pending, as a review sets it).

The generator inserts rows directly, as a bulk load would, with foreign-key triggers
off (session_replication_role = replica); the rows are consistent by construction. No
journal records are generated: neither statement measured here reads the journal.

Measured warm, the statements interleaved round by round (so load from other
processes hits each alike), median of --runs, as wall time and as server CPU time (the
backend plus any parallel workers, from /proc: robust on a shared machine):

* one sequential scan of the outcome table, SELECT count(*) FROM prme.outcomes, in a
  single process (max_parallel_workers_per_gather = 0): the baseline of the target;
* the same scan with the server's parallel workers, for reference;
* SELECT count(*) FROM prme.maintenance_report('bench'), in a single process like the
  baseline (the same max_parallel_workers_per_gather = 0; JIT is whatever the server
  decides for the scan, and off inside the report, which sets jit = off itself);
* with --previous, the report as migration 0003 released it, created under another name
  from that file's text, measured in the same rounds: before and after side by side;
* with --floor, a function that does only what no report can avoid: a scan of the
  memories (prme.nodes, which holds their bookkeeping since 0018_report_on_the_memory_row)
  with 0003's first cut on the raw counts, and its rows (same columns) into the function's
  result, nothing computed. What the report costs beyond it is its rules.
* with --best-layout, the report and the floor (their current text) over the best layout
  the memory's row could have, to show what a report on that row can reach at all: a
  copy of the memories with the columns the report reads first (the fixed-width counters,
  version and timestamps, then the short text columns it compares; content, recall's
  words and the rest last, so a row is taken apart no further than it must), and
  PostgreSQL's JIT compiling their expressions and the row's deforming (without LLVM's
  optimization and inlining passes, which cost more than they save here).

Both sides read warm pages from shared buffers: the run ends by checking, with EXPLAIN
(BUFFERS), that the baseline scan read no page from outside them, and says so in red if
it did (a table over a quarter of shared_buffers is scanned through a small ring of
buffers, which would make the baseline slower than the report's reads).

The target is report <= 3 x the single-process scan; the ratio against the parallel scan is
printed too. Exit status 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from rich.console import Console
from rich.table import Table

from prme_pg import testing

console = Console(width=None if sys.stdout.isatty() else 150)
# Progress goes to stderr, so that --json prints one JSON document and nothing else.
progress = Console(stderr=True)

TARGET_RATIO = 3.0
USER = "bench"
REPORT_SQL = "SELECT count(*) FROM prme.maintenance_report('bench')"
PREVIOUS_SQL = "SELECT count(*) FROM prme_bench.maintenance_report_0003('bench')"
PREVIOUS_MIGRATION = Path(__file__).resolve().parent.parent / "migrations" / "0003_outcomes_and_maintenance.sql"
FLOOR_SQL = "SELECT count(*) FROM prme_bench.report_floor('bench')"
FLOOR_FUNCTION = """
CREATE FUNCTION prme_bench.report_floor(user_id text)
RETURNS TABLE (
    node_id uuid, recommendations text[], lifecycle_state text, stability text, suggested_stability text,
    confidence_base numeric, suggested_confidence numeric, next_review_at timestamptz, overdue_cycles integer,
    decayed_cycles integer, explicit_reinforcements bigint, implicit_successes bigint, explicit_corrections bigint
)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_as_of timestamptz := now();
BEGIN
    RETURN QUERY
    SELECT n.id, '{review_due}'::text[], n.lifecycle_state::text, n.stability::text, NULL::text,
        n.confidence_base::numeric, n.confidence_base::numeric, n.next_review_at, 1, 0,
        n.recorded_reinforcements + n.reinforcements,
        n.implicit_successes::bigint, n.explicit_corrections::bigint
    FROM prme.nodes AS n
    WHERE n.user_id = report_floor.user_id
      AND n.lifecycle_state IN ('active', 'contested')
      AND (n.next_review_at <= v_as_of
           OR n.explicit_corrections > n.reviewed_explicit_corrections
           OR n.recorded_reinforcements + n.reinforcements >= n.reviewed_explicit_reinforcements + 2
           OR n.implicit_successes >= n.reviewed_implicit_successes + 5);
END;
$$
"""

# The columns the report reads, in the order it reads them: fixed-width first (their
# offsets are cached), nullable timestamps next, then the text it compares. Every other
# column of prme.nodes follows, in the table's order (_install_best_layout).
BEST_LAYOUT_FIRST = (
    "id", "reinforcements", "recorded_reinforcements", "implicit_successes", "neutral_exposures",
    "explicit_corrections", "reviewed_explicit_reinforcements", "reviewed_implicit_successes",
    "reviewed_neutral_exposures", "reviewed_explicit_corrections", "version", "created_at", "updated_at",
    "decay_cycles", "next_review_at", "last_outcome_at", "last_reinforced_at", "reviewed_at", "decay_anchor",
    "user_id", "lifecycle_state", "stability", "decay_profile", "confidence_base",
)  # fmt: skip
BEST_LAYOUT_JIT = (
    "SET jit TO 'on' SET jit_above_cost TO '0' SET jit_optimize_above_cost TO '-1' SET jit_inline_above_cost TO '-1'"
)
BEST_REPORT_SQL = "SELECT count(*) FROM prme_bench.report_best('bench')"
BEST_FLOOR_SQL = "SELECT count(*) FROM prme_bench.floor_best('bench')"

SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "2GB",
    "work_mem": "256MB",  # the report's result set stays in memory
    "maintenance_work_mem": "1GB",
    "max_wal_size": "16GB",
    "checkpoint_timeout": "1h",
    "autovacuum": "off",
}

NODES_SQL = """
INSERT INTO prme.nodes (
    id, user_id, namespace, scope, kind, content, confidence_base, salience_base, reinforcement_boost,
    last_reinforced_at, evidence_refs, stability, next_review_at, lifecycle_state, decay_profile,
    created_at, updated_at, version, last_checksum
)
SELECT
    ('10000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid,
    'bench', 'default', 'personal', 'fact',
    'memory ' || i || ': the owner prefers ' || (ARRAY['tabs', 'spaces', 'tea', 'coffee', 'trains'])[1 + h % 5],
    0.5 + (h % 45) / 100.0,
    0.5,
    0,
    CASE WHEN h % 4 = 0 THEN now() - (h % 200) * interval '1 day' END,
    '{}',
    CASE WHEN h % 10 < 5 THEN 'low' WHEN h % 10 < 8 THEN 'semi-stable' ELSE 'stable' END,
    CASE WHEN h % 5 < 2 THEN now() + ((h % 180) - 120) * interval '1 day' END,
    CASE WHEN h % 100 < 95 THEN 'active' WHEN h % 100 < 98 THEN 'contested' ELSE 'archived' END,
    (ARRAY['slow', 'medium', 'medium', 'fast', 'permanent'])[1 + (h / 7) % 5],
    now() - (200 + h % 165) * interval '1 day',
    now() - (h % 200) * interval '1 day',
    1,
    repeat('0', 64)
FROM generate_series(1, {nodes}) AS i
CROSS JOIN LATERAL (SELECT (i::bigint * 2654435761) % 4294967291 AS h) AS x
"""

# 1..9 events per memory in pairs that sum to 10: exactly 5 x memories events in all.
OUTCOMES_SQL = """
INSERT INTO prme.outcomes (user_id, id, node_id, outcome, weight, recorded_by, node_version, created_at)
SELECT
    'bench',
    ('20000000-0000-4000-8000-' || lpad(to_hex(i * 16 + j), 12, '0'))::uuid,
    ('10000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid,
    k.outcome,
    k.weight,
    'record_outcome',
    1,
    now() - ((i + j) % 10000) * interval '1 minute'
FROM generate_series(1, {nodes}) AS i
CROSS JOIN LATERAL (SELECT ((i + 1) / 2 * 2654435761) % 9 AS h) AS p
CROSS JOIN LATERAL generate_series(1, CASE WHEN i % 2 = 1 THEN 1 + p.h ELSE 9 - p.h END) AS j
CROSS JOIN LATERAL (SELECT ((i * 31 + j * 17) * 2654435761) % 100 AS r) AS q
CROSS JOIN LATERAL (
    SELECT
        CASE WHEN q.r < 10 THEN 'explicit_reinforcement' WHEN q.r < 70 THEN 'implicit_success'
             WHEN q.r < 95 THEN 'neutral_exposure' ELSE 'explicit_correction' END AS outcome,
        CASE WHEN q.r < 10 THEN 1.0 WHEN q.r < 70 THEN 0.2 WHEN q.r < 95 THEN 0 ELSE -1.0 END AS weight
) AS k
"""

STATE_SQL = """
UPDATE prme.nodes AS n SET
    reviewed_explicit_reinforcements = n.recorded_reinforcements / 2,
    reviewed_implicit_successes = n.implicit_successes / 2,
    reviewed_neutral_exposures = n.neutral_exposures / 2,
    reviewed_explicit_corrections = n.explicit_corrections / 2,
    reviewed_at = now() - interval '10 days',
    decay_anchor = n.next_review_at,
    decay_cycles = CASE WHEN n.next_review_at < now() THEN 1 ELSE 0 END
WHERE n.user_id = 'bench' AND ('x' || substr(md5(n.id::text), 1, 8))::bit(32)::integer % 10 = 0
"""


def _proc_times(pid: int) -> tuple[int, int]:
    """(utime + stime, cutime + cstime) of a process, in clock ticks."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


class CpuMeter:
    """Server CPU time of one connection's statements: its backend, plus the parallel
    workers it started (reaped by the postmaster, so counted in its cutime/cstime)."""

    def __init__(self, postmaster_pid: int, backend_pid: int) -> None:
        self.postmaster_pid = postmaster_pid
        self.backend_pid = backend_pid
        self.tick = os.sysconf("SC_CLK_TCK")

    def read(self) -> float:
        own, _ = _proc_times(self.backend_pid)
        _, children = _proc_times(self.postmaster_pid)
        return (own + children) / self.tick


@dataclass
class Measure:
    """Wall and CPU seconds of the runs of one statement."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    value: Any = None

    @property
    def wall_median(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)


def _run(conn: psycopg.Connection[Any], meter: CpuMeter, query: str, setup: str, measure: Measure) -> None:
    conn.execute(setup)
    time.sleep(0.2)  # let the workers of the previous statement be reaped
    cpu = meter.read()
    start = time.perf_counter()
    row = conn.execute(query).fetchone()
    wall = time.perf_counter() - start
    time.sleep(0.3)
    measure.cpu.append(meter.read() - cpu)
    measure.wall.append(wall)
    measure.value = row[0] if row else None


def _times(part: float, whole: float) -> float | None:
    """part / whole to two places, or None when whole measured zero (CPU time is read in
    clock ticks of 10 ms: a small run's scan can take none)."""
    return round(part / whole, 2) if whole > 0 else None


def _step(label: str, work: Callable[[], Any]) -> float:
    with progress.status(label):
        start = time.perf_counter()
        work()
        seconds = time.perf_counter() - start
    progress.print(f"  {label}: {seconds:.1f} s")
    return seconds


def _load(conn: psycopg.Connection[Any], nodes: int) -> dict[str, float]:
    conn.execute("SET session_replication_role = replica")  # bulk load: triggers off
    load = {
        "memories": _step("memories", lambda: conn.execute(NODES_SQL.replace("{nodes}", str(nodes)).encode())),
        "outcomes": _step("outcome events", lambda: conn.execute(OUTCOMES_SQL.replace("{nodes}", str(nodes)).encode())),
    }
    conn.execute("RESET session_replication_role")
    load["bookkeeping"] = _step(
        "bookkeeping (set-based rebuild)", lambda: conn.execute("SELECT prme._rebuild_outcome_totals(%s)", (USER,))
    )
    load["review_state"] = _step("review state", lambda: conn.execute(STATE_SQL.encode()))
    # The rebuild wrote every memory once more: compact the table as a load that wrote the
    # totals with the memories would have left it (fillfactor 90 kept).
    load["compact"] = _step("vacuum full memories", lambda: conn.execute("VACUUM (FULL) prme.nodes"))
    load["vacuum"] = _step("vacuum analyze", lambda: conn.execute("VACUUM (ANALYZE, FREEZE)"))
    return load


def _install_previous(conn: psycopg.Connection[Any]) -> None:
    """The report as migration 0003 released it, as prme_bench.maintenance_report_0003."""
    text = PREVIOUS_MIGRATION.read_text()
    start = text.index("CREATE FUNCTION prme.maintenance_report(")
    body = text[start : text.index("$$;", start) + 3]
    body = body.replace("prme.maintenance_report(", "prme_bench.maintenance_report_0003(")
    # It read a bookkeeping row per memory: the same columns, from the memory's row since
    # 0018_report_on_the_memory_row (this data has no confirmations: the outcome rows are all).
    body = body.replace(
        "prme.node_maintenance AS k",
        # (as the base types: RETURN QUERY needs the exact types, and since
        # 0021_row_rules_on_types the columns are domains over them).
        "(SELECT n.user_id, n.id AS node_id, n.stability::text AS stability,"
        " n.lifecycle_state::text AS lifecycle_state, n.next_review_at, n.decay_profile::text AS decay_profile,"
        " n.confidence_base::numeric(5, 4) AS confidence_base,"
        " n.recorded_reinforcements::bigint AS explicit_reinforcements,"
        " n.implicit_successes::bigint AS implicit_successes,"
        " n.neutral_exposures::bigint AS neutral_exposures, n.explicit_corrections::bigint AS explicit_corrections,"
        " n.last_outcome_at, n.reviewed_explicit_reinforcements::bigint AS reviewed_explicit_reinforcements,"
        " n.reviewed_implicit_successes::bigint AS reviewed_implicit_successes,"
        " n.reviewed_neutral_exposures::bigint AS reviewed_neutral_exposures,"
        " n.reviewed_explicit_corrections::bigint AS reviewed_explicit_corrections,"
        " n.decay_anchor, n.decay_cycles FROM prme.nodes AS n) AS k",
    )
    conn.execute("CREATE SCHEMA IF NOT EXISTS prme_bench")
    conn.execute(body.replace("maintenance_report.", "maintenance_report_0003.").encode())


def _same_rows(conn: psycopg.Connection[Any], other: str) -> bool:
    """Whether the report function other returns exactly prme.maintenance_report's rows."""
    report, copy = "prme.maintenance_report('bench')", f"{other}('bench')"
    row = conn.execute(
        f"SELECT NOT EXISTS (SELECT * FROM {report} EXCEPT ALL SELECT * FROM {copy})"
        f" AND NOT EXISTS (SELECT * FROM {copy} EXCEPT ALL SELECT * FROM {report})"
    ).fetchone()
    return row is not None and bool(row[0])


def _copy_function(conn: psycopg.Connection[Any], source: str, name: str) -> None:
    """Create prme_bench.<name>: the function source as it is defined now, over the
    best-layout copy of the memories, with JIT on (BEST_LAYOUT_JIT)."""
    text = str(conn.execute("SELECT pg_get_functiondef(%s::regprocedure)", (source,)).fetchone()[0])  # type: ignore[index]
    old_name = source.split("(")[0]
    for old, new in (
        (f"FUNCTION {old_name}(", f"FUNCTION prme_bench.{name}("),
        (f"{old_name.split('.')[1]}.", f"{name}."),  # parameters qualified by the function's name
        ("FROM prme.nodes AS n", "FROM prme_bench.nodes_best_layout AS n"),
        ("SET jit TO 'off'", BEST_LAYOUT_JIT),
    ):
        if old not in text:  # the function changed shape: this benchmark must follow it
            raise RuntimeError(f"{source} has no {old!r} to replace")
        text = text.replace(old, new)
    conn.execute(text.encode())


def _install_best_layout(conn: psycopg.Connection[Any]) -> None:
    """The memories copied with the report's columns first; the report and the floor over it
    (prme_bench.report_floor must exist)."""
    rest = [
        str(name)
        for (name,) in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'prme.nodes'::regclass AND attnum > 0"
            " AND NOT attisdropped AND attname <> ALL(%s) ORDER BY attnum",
            (list(BEST_LAYOUT_FIRST),),
        )
    ]
    columns = sql.SQL(", ").join(sql.Identifier(name) for name in (*BEST_LAYOUT_FIRST, *rest))
    conn.execute(sql.SQL("CREATE TABLE prme_bench.nodes_best_layout AS SELECT {} FROM prme.nodes").format(columns))
    conn.execute("VACUUM (ANALYZE, FREEZE) prme_bench.nodes_best_layout")
    _copy_function(conn, "prme.maintenance_report(text, timestamptz)", "report_best")
    _copy_function(conn, "prme_bench.report_floor(text)", "floor_best")


def _measure(
    conn: psycopg.Connection[Any], meter: CpuMeter, runs: int, previous: bool, floor: bool, best_layout: bool
) -> dict[str, Measure]:
    single = "SET max_parallel_workers_per_gather = 0"
    statements = {
        "scan": (single, "SELECT count(*) FROM prme.outcomes"),
        "scan_parallel": ("RESET max_parallel_workers_per_gather", "SELECT count(*) FROM prme.outcomes"),
        "report": (single, REPORT_SQL),
    }
    if previous:
        statements["previous"] = (single, PREVIOUS_SQL)
    if floor:
        statements["floor"] = (single, FLOOR_SQL)
    if best_layout:
        statements["report_best"] = (single, BEST_REPORT_SQL)
        statements["floor_best"] = (single, BEST_FLOOR_SQL)
    measures = {name: Measure() for name in statements}
    with progress.status("measuring"):
        for setup, query in statements.values():  # warm the cache and the plans
            _run(conn, meter, query, setup, Measure())
        for _ in range(runs):
            for name, (setup, query) in statements.items():
                _run(conn, meter, query, setup, measures[name])
    return measures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1_000_000, help="memories at scale 1 (default 1,000,000)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the data size (default 1)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per statement (default 5)")
    parser.add_argument("--patch", action="store_true", help="also time one maintenance_patch (stores every op)")
    parser.add_argument("--previous", action="store_true", help="also time the report as migration 0003 released it")
    parser.add_argument("--floor", action="store_true", help="also time returning the rows without computing them")
    parser.add_argument(
        "--best-layout",
        action="store_true",
        help="also time the report and the floor over the best layout of the memory's row, with JIT",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    args = parser.parse_args(argv)
    nodes = max(2, round(args.nodes * args.scale / 2) * 2)  # even: events come in pairs of memories

    cluster = testing.PostgresCluster.create(SERVER_SETTINGS)
    try:
        server = testing.Server(cluster.dsn)
        dsn = server.dsn_for(testing.create_database(server, prefix="prme_bench"))
        testing.install_schema(dsn)
        postmaster_pid = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
        with psycopg.connect(dsn, autocommit=True) as conn:
            version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
            progress.print(f"PostgreSQL {version}: {nodes:,} memories, {5 * nodes:,} outcome events")
            load = _load(conn, nodes)
            outcomes = int(conn.execute("SELECT count(*) FROM prme.outcomes").fetchone()[0])  # type: ignore[index]
            sizes = conn.execute(
                "SELECT pg_relation_size('prme.outcomes') / 1048576, pg_relation_size('prme.nodes') / 1048576"
            ).fetchone()
            assert sizes is not None
            meter = CpuMeter(postmaster_pid, int(conn.execute("SELECT pg_backend_pid()").fetchone()[0]))  # type: ignore[index]
            if args.previous:
                _install_previous(conn)
                same = _same_rows(conn, "prme_bench.maintenance_report_0003")
                assert same, "the report and its 0003 release disagree"
            if args.floor or args.best_layout:
                conn.execute("CREATE SCHEMA IF NOT EXISTS prme_bench")
                conn.execute(FLOOR_FUNCTION.encode())
            if args.best_layout:
                _install_best_layout(conn)
                assert _same_rows(conn, "prme_bench.report_best"), "the report over the best layout disagrees"
            measures = _measure(conn, meter, args.runs, args.previous, args.floor, args.best_layout)
            # Fairness: the baseline must read its pages from shared buffers, as the report
            # reads prme.nodes, not from the kernel's cache (a table over a quarter
            # of shared_buffers is scanned through a small ring of buffers).
            conn.execute("SET max_parallel_workers_per_gather = 0")
            explained = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT count(*) FROM prme.outcomes")
            scan_plan = explained.fetchone()[0][0]["Plan"]  # type: ignore[index]
            scan_buffers = (int(scan_plan["Shared Hit Blocks"]), int(scan_plan["Shared Read Blocks"]))
            kinds: dict[str, int] = dict(
                conn.execute(
                    "SELECT k, count(*) FROM prme.maintenance_report('bench'), unnest(recommendations) AS k"
                    " GROUP BY 1 ORDER BY 1"
                ).fetchall()
            )
            patch: tuple[float, Any] | None = None
            if args.patch:
                start = time.perf_counter()
                ops = conn.execute("SELECT jsonb_array_length(ops) FROM prme.maintenance_patch('bench')").fetchone()
                patch = (time.perf_counter() - start, ops[0] if ops else None)
    finally:
        cluster.destroy()

    scan, parallel, report = measures["scan"], measures["scan_parallel"], measures["report"]
    ratio = report.wall_median / scan.wall_median
    result = {
        "server_version": version,
        "settings": SERVER_SETTINGS,
        "memories": nodes,
        "outcomes": outcomes,
        "table_mb": {"outcomes": int(sizes[0]), "nodes": int(sizes[1])},
        "load_seconds": {k: round(v, 1) for k, v in load.items()},
        "report_rows": report.value,
        "recommendations": kinds,
        **{
            f"{name}_{unit}": [round(x, 4) for x in getattr(m, unit)]
            for name, m in measures.items()
            for unit in ("wall", "cpu")
        },
        "ratio_wall": round(ratio, 2),
        "ratio_cpu": _times(report.cpu_median, scan.cpu_median),
        "ratio_wall_vs_parallel_scan": _times(report.wall_median, parallel.wall_median),
        # Each optional statement against the scan; None when it was not run.
        **{
            f"{name}_ratio_{unit}": (
                _times(getattr(measures[name], f"{unit}_median"), getattr(scan, f"{unit}_median"))
                if name in measures
                else None
            )
            for name in ("previous", "floor", "report_best", "floor_best")
            for unit in ("wall", "cpu")
        },
        "target_ratio": TARGET_RATIO,
        "passed": ratio <= TARGET_RATIO,
        "scan_shared_hit_blocks": scan_buffers[0],
        "scan_shared_read_blocks": scan_buffers[1],
        "patch_seconds": None if patch is None else round(patch[0], 2),
        "patch_ops": None if patch is None else patch[1],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0 if result["passed"] else 1

    table = Table(title=f"maintenance_report over {nodes:,} memories and {outcomes:,} outcome events")
    table.add_column("statement (median of runs)")
    table.add_column("wall", justify="right")
    table.add_column("x scan", justify="right")
    table.add_column("server CPU", justify="right")
    table.add_column("x scan", justify="right")
    rows = [
        ("seq scan of prme.outcomes, 1 process (baseline)", scan),
        ("seq scan of prme.outcomes, parallel workers", parallel),
        (f"maintenance_report ({report.value:,} rows)", report),
    ]
    if "previous" in measures:
        previous = measures["previous"]
        rows.append((f"maintenance_report as released in 0003 ({previous.value:,} rows)", previous))
    if "floor" in measures:
        floor = measures["floor"]
        rows.append((f"floor: first cut's rows returned, nothing computed ({floor.value:,} rows)", floor))
    if "report_best" in measures:
        rows.append(("maintenance_report, the row's best layout, JIT", measures["report_best"]))
        rows.append(("floor, the row's best layout, JIT", measures["floor_best"]))
    for label, m in rows:
        table.add_row(
            label,
            f"{m.wall_median:.3f} s",
            f"{_times(m.wall_median, scan.wall_median) or ''}",
            f"{m.cpu_median:.3f} s",
            f"{_times(m.cpu_median, scan.cpu_median) or ''}",
        )
    if patch is not None:
        table.add_row(f"maintenance_patch ({patch[1]:,} ops, once)", f"{patch[0]:.3f} s", "", "", "")
    console.print(table)
    console.print(
        f"baseline scan: {scan_buffers[0]:,} shared-buffer hits, {scan_buffers[1]:,} reads"
        + ("" if scan_buffers[1] == 0 else " [red](not all in shared buffers: the comparison is unfair)[/]")
    )
    console.print(
        f"tables: outcomes {sizes[0]} MB, nodes {sizes[1]} MB; recommendations: "
        + ", ".join(f"{k} {v:,}" for k, v in kinds.items())
    )
    verdict = "[green]PASS[/]" if result["passed"] else "[red]FAIL[/]"
    console.print(
        f"target: report <= {TARGET_RATIO:g} x one sequential scan of the outcome table: {ratio:.2f} {verdict} "
        f"(CPU {result['ratio_cpu']}; against the parallel scan {result['ratio_wall_vs_parallel_scan']})"
    )
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
