"""prme-pg core benchmark: prme.reinforce against the same writes done without it.

Run from the repository root:

    .venv/bin/python bench/run.py              # ~8 minutes: 4 rounds x 10 s, 1M-node scale test
    .venv/bin/python bench/run.py --quick      # ~2 minutes: 2 rounds x 4 s, 250k-node scale test
    .venv/bin/python bench/run.py --no-scale --compare bench/proposals/03_reinforce_fewer_statements.sql

It starts its own throwaway cluster from this machine's PostgreSQL binaries with the
server defaults (fsync on, synchronous_commit on: every commit waits for its WAL
flush), creates a database, applies the migrations, loads data and drives pgbench
with the custom scripts in bench/pgbench/ (extended protocol with prepared statements,
-M prepared: every workload gets its plans cached, the client-side ones included).

Workloads run in rounds, alternately forward and backward; TPS, latency and CPU are
means over the rounds, and every ratio is the median of the per-round ratios, so load
from other processes on a shared machine hits both sides of a ratio alike: quote the
ratios, not the absolute numbers. Besides TPS and latency, each run measures the
server CPU time per transaction (all processes of the cluster, from /proc), which
other load on the machine disturbs much less.

Before measuring, it checks that the comparisons write what reinforce writes (rows per
table per transaction, from pg_stat_user_tables) and says so loudly when they do not.

See docs/PERFORMANCE.md for what each workload is and why it is the fair comparison.
Results are printed as a table and written as JSON to bench/results/ (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from prme_pg import migrations, testing

BENCH_DIR = Path(__file__).resolve().parent
SCRIPTS_DIR = BENCH_DIR / "pgbench"
RESULTS_DIR = BENCH_DIR / "results"

console = Console(width=None if sys.stdout.isatty() else 150)

# --------------------------------------------------------------------------------------
# Data. Node i (1..N) belongs to owner 'user_' || (i % owners) and has the id
# md5('node:' || i)::uuid: random-looking, so the primary-key index sees random keys
# as it would with gen_random_uuid(), yet every pgbench script can name a node from
# one random integer without a lookup table.
# --------------------------------------------------------------------------------------

OWNERS = 100
NODES = 10_000

# Valid rows, set-based: the create records are built by the engine's own
# prme._journal_entry (canonical text, checksum), and nodes.last_checksum points at them.
LOAD_NODES_SQL = """
WITH src AS (
    SELECT jsonb_populate_record(NULL::prme.nodes, jsonb_build_object(
        'id', md5('node:' || i)::uuid,
        'user_id', 'user_' || (i %% %(owners)s),
        'namespace', 'default', 'scope', 'personal', 'kind', 'fact',
        'content', 'Benchmark memory ' || i
            || ': the user prefers short answers with code examples and works in Europe/Berlin',
        'confidence_base', 0.5, 'salience_base', 0.5, 'reinforcement_boost', 0,
        'evidence_refs', '{}'::uuid[], 'stability', 'low', 'lifecycle_state', 'active',
        'decay_profile', 'medium', 'created_at', now(), 'updated_at', now(), 'version', 1
    )) AS n
    FROM generate_series(%(lo)s::integer, %(hi)s::integer) AS i
), entries AS MATERIALIZED (
    SELECT n, prme._journal_entry('create', NULL, gen_random_uuid(), NULL, NULL, NULL, n) AS j
    FROM src
), new_nodes AS (
    INSERT INTO prme.nodes (
        id, user_id, namespace, scope, kind, content, confidence_base, salience_base,
        reinforcement_boost, last_reinforced_at, evidence_refs, stability, next_review_at,
        lifecycle_state, decay_profile, created_at, updated_at, version, last_checksum, search
    )
    SELECT (n).id, (n).user_id, (n).namespace, (n).scope, (n).kind, (n).content,
           (n).confidence_base, (n).salience_base, (n).reinforcement_boost,
           (n).last_reinforced_at, (n).evidence_refs, (n).stability, (n).next_review_at,
           (n).lifecycle_state, (n).decay_profile, (n).created_at, (n).updated_at,
           (n).version, (j).checksum, array_to_tsvector(prme._owner_lexemes((n).user_id, (n).content))
    FROM entries
)
INSERT INTO prme.journal SELECT (j).* FROM entries
"""

# Keys for reinforce_replay: node i reinforced once with request_id md5('key:' || i).
PRELOAD_KEYS_SQL = """
SELECT count(prme.reinforce(
    node_id => md5('node:' || i)::uuid,
    user_id => 'user_' || (i %% %(owners)s),
    request_id => md5('key:' || i)::uuid
))
FROM generate_series(%(lo)s::integer, %(hi)s::integer) AS i
"""

SETUP_TABLES_SQL = """
CREATE SCHEMA bench;
-- single_insert's table: an owner, a uuid and a text, keyed like every prme table.
CREATE TABLE bench.single_rows (
    user_id text NOT NULL,
    id uuid NOT NULL,
    content text NOT NULL,
    PRIMARY KEY (user_id, id)
);
"""

# record_floor's function (bench/pgbench/record_floor.sql).
RECORD_FLOOR_SQL = """
-- record_floor's function (bench/pgbench/record_floor.sql): what the journal's rule
-- adds to function_floor, and nothing else. The record must be built in the transaction
-- from the state the node had (docs/DESIGN.md, "The journal"): read the node, build both
-- states, the record and its checksum with the engine's own builder (prme._journal_entry),
-- write both rows if the node is still that version. No validation, no key lock or key
-- check, no evidence check, no retry loop: reinforce is this plus those.
CREATE FUNCTION bench.read_build_write(node_id uuid, user_id text)
RETURNS prme.node_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_node prme.nodes;
    v_after prme.nodes;
    v_entry prme.journal;
    v_now timestamptz := now();
BEGIN
    SELECT n.* INTO v_node FROM prme.nodes AS n
    WHERE n.user_id = read_build_write.user_id AND n.id = read_build_write.node_id;
    v_after := v_node;
    v_after.reinforcement_boost := prme._reinforced_boost(v_node.reinforcement_boost);
    v_after.confidence_base := prme._reinforced_confidence(v_node.confidence_base);
    v_after.last_reinforced_at := v_now;
    v_after.updated_at := v_now;
    v_after.version := v_node.version + 1;
    v_entry := prme._journal_entry(
        'reinforce', 'additive_caps_v1', gen_random_uuid(), gen_random_uuid(), NULL, v_node, v_after
    );
    WITH updated AS (
        UPDATE prme.nodes AS n SET
            reinforcement_boost = v_after.reinforcement_boost,
            confidence_base = v_after.confidence_base,
            last_reinforced_at = v_after.last_reinforced_at,
            updated_at = v_after.updated_at,
            version = v_after.version,
            last_checksum = v_entry.checksum,
            reinforcements = n.reinforcements + 1
        WHERE n.user_id = read_build_write.user_id AND n.id = read_build_write.node_id AND n.version = v_node.version
        RETURNING n.reinforcements
    )
    INSERT INTO prme.journal SELECT v_entry.* FROM updated;
    RETURN prme._node_view(v_after, FALSE);
END;
$$;
-- Owned like the API's functions, which run as prme_owner: a superuser skips the
-- privilege checks every function call of an expression makes for anyone else.
ALTER FUNCTION bench.read_build_write(uuid, text) OWNER TO prme_owner;
"""

# no_logic_limit's statement as its script has it, and what each of its pgbench
# variables becomes in function_floor's function.
NO_LOGIC_ARGUMENTS = (
    (":checksum", "two_writes.checksum"),
    (":record", "two_writes.record"),
    ("'user_' || :u::text", "two_writes.user_id"),
    ("md5('node:' || :i::text)::uuid", "two_writes.node_id"),
    ("SELECT n.*, FALSE AS replayed FROM n;", "SELECT n.*, FALSE INTO v_view FROM n;"),
)


def function_floor_sql() -> str:
    """function_floor's function, bench.two_writes: no_logic_limit's statement, taken from
    its script so that the two cannot drift apart, as the body of a function made the way
    the API's are (PL/pgSQL, SECURITY DEFINER, search_path pinned, owned by prme_owner),
    its record and checksum handed to it."""
    script = (SCRIPTS_DIR / "no_logic_limit.sql").read_text()
    statement = script[script.index("WITH n AS (") :].strip()
    for variable, argument in NO_LOGIC_ARGUMENTS:
        if variable not in statement:
            raise RuntimeError(f"no_logic_limit.sql no longer has {variable!r}: update NO_LOGIC_ARGUMENTS")
        statement = statement.replace(variable, argument)
    return (
        "CREATE FUNCTION bench.two_writes(node_id uuid, user_id text, record text, checksum text)\n"
        "RETURNS prme.node_view LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp\n"
        "AS $$\n#variable_conflict use_column\nDECLARE\n    v_view prme.node_view;\nBEGIN\n"
        f"{statement}\n    RETURN v_view;\nEND;\n$$;\n"
        "ALTER FUNCTION bench.two_writes(uuid, text, text, text) OWNER TO prme_owner;\n"
    )


SETUP_SQL = SETUP_TABLES_SQL + function_floor_sql() + RECORD_FLOOR_SQL

# --------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    name: str
    script: str
    summary: str


WORKLOADS: tuple[Workload, ...] = (
    Workload(
        "reinforce_fresh",
        "reinforce_fresh.sql",
        "SELECT * FROM prme.reinforce(...) with a new request_id",
    ),
    Workload(
        "reinforce_replay",
        "reinforce_replay.sql",
        "prme.reinforce retried with an already committed request_id",
    ),
    Workload(
        "client_side",
        "client_side.sql",
        "BEGIN; SELECT FOR UPDATE; UPDATE node; INSERT journal record with its key; COMMIT",
    ),
    Workload(
        "no_logic_limit",
        "no_logic_limit.sql",
        "the same writes in one data-modifying CTE, precomputed record: the limit",
    ),
    Workload(
        "function_floor",
        "function_floor.sql",
        "no_logic_limit's statement in a SECURITY DEFINER PL/pgSQL function: the floor of any API function",
    ),
    Workload(
        "record_floor",
        "record_floor.sql",
        "function_floor plus reading the node and building its record: the floor of any design",
    ),
    Workload("single_insert", "single_insert.sql", "one single-row INSERT per commit"),
)
BY_NAME = {w.name: w for w in WORKLOADS}
CONTROL = Path("control")  # label of the unchanged copy that --compare measures proposals against

# --------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------


def _proc_stat(pid: int) -> tuple[int, list[str]]:
    """(ppid, fields after the command name) of /proc/<pid>/stat."""
    text = Path(f"/proc/{pid}/stat").read_text()
    rest = text[text.rindex(")") + 2 :].split()
    return int(rest[1]), rest


def cluster_cpu_seconds(postmaster_pid: int) -> float:
    """CPU time of the whole cluster: the postmaster, its live children, and the
    children it has reaped (counted in its cutime/cstime)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    _, fields = _proc_stat(postmaster_pid)
    total += sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid, fields = _proc_stat(int(entry))
        except (OSError, ValueError):
            continue  # exited meanwhile
        if ppid == postmaster_pid:
            total += int(fields[11]) + int(fields[12])
    return total / ticks


def wait_for_quiet(postmaster_pid: int, timeout: float = 10.0) -> None:
    """Wait until the cluster has no client backends and no unreaped children, so
    every finished backend's CPU time has landed in the postmaster's cutime/cstime
    (reading during a reap would lose or double-count it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = False
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                ppid, fields = _proc_stat(int(entry))
                if ppid != postmaster_pid:
                    continue
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except (OSError, ValueError):
                continue
            if fields[0] == "Z" or b"127.0.0.1(" in cmdline or b"[local]" in cmdline:
                busy = True
                break
        if not busy:
            break
        time.sleep(0.02)


def settled_cpu_seconds(postmaster_pid: int) -> float:
    """cluster_cpu_seconds once no backend is exiting. An exited child can vanish
    from /proc a moment before the kernel adds its times to the parent's cutime,
    so read until two readings 50 ms apart agree."""
    wait_for_quiet(postmaster_pid)
    last = cluster_cpu_seconds(postmaster_pid)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = cluster_cpu_seconds(postmaster_pid)
        if now == last:
            break
        last = now
    return last


@dataclass
class Run:
    """One pgbench run."""

    workload: str
    database: str
    clients: int
    duration: float
    transactions: int
    failed: int
    tps: float
    latency_ms: float
    server_cpu_us: float  # per transaction, all cluster processes
    client_cpu_us: float  # per transaction, pgbench itself


@dataclass
class Aggregate:
    """Runs of one workload on one database, combined."""

    workload: str
    database: str
    runs: list[Run] = field(default_factory=list)

    @property
    def transactions(self) -> int:
        return sum(r.transactions for r in self.runs)

    @property
    def tps(self) -> float:
        return sum(r.tps for r in self.runs) / len(self.runs)

    @property
    def latency_ms(self) -> float:
        return sum(r.latency_ms * r.transactions for r in self.runs) / max(self.transactions, 1)

    @property
    def server_cpu_us(self) -> float:
        return sum(r.server_cpu_us * r.transactions for r in self.runs) / max(self.transactions, 1)

    def as_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "database": self.database,
            "tps": round(self.tps, 1),
            "latency_ms": round(self.latency_ms, 3),
            "server_cpu_us_per_txn": round(self.server_cpu_us, 1),
            "transactions": self.transactions,
            "runs": [asdict(r) for r in self.runs],
        }


class Bench:
    def __init__(self, cluster: testing.PostgresCluster) -> None:
        self.cluster = cluster
        self.server = testing.Server(cluster.dsn, cluster)
        self.postmaster_pid = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
        self.variables: dict[str, str] = {"owners": str(OWNERS)}
        self.scratch = Path(tempfile.mkdtemp(prefix="prme-bench-scripts-"))

    def script(self, workload: Workload) -> Path:
        """The workload's script with `\\if :outcomes ... \\else ... \\endif` resolved here.

        pgbench -M prepared prepares every statement of a script before running it,
        including those in an \\if branch it will not take, so a branch that names a
        table this schema does not have (yet) would fail; the runner keeps only the
        branch that applies and runs that copy."""
        outcomes = self.variables.get("outcomes") == "1"
        kept: list[str] = []
        keep = [True]
        for line in (SCRIPTS_DIR / workload.script).read_text().splitlines():
            word = line.strip()
            if word == "\\if :outcomes":
                keep.append(keep[-1] and outcomes)
            elif word == "\\else" and len(keep) > 1:
                keep[-1] = keep[-2] and not keep[-1]
            elif word == "\\endif" and len(keep) > 1:
                keep.pop()
            elif keep[-1]:
                kept.append(line)
        path = self.scratch / workload.script
        path.write_text("\n".join(kept) + "\n")
        return path

    def dsn(self, database: str) -> str:
        return self.server.dsn_for(database)

    def execute(self, database: str, statement: str, params: dict[str, Any] | None = None) -> Any:
        with psycopg.connect(self.dsn(database), autocommit=True) as conn:
            cur = conn.execute(statement, params)  # type: ignore[arg-type]
            return cur.fetchone() if cur.description else None

    def checkpoint(self, database: str) -> None:
        self.execute(database, "CHECKPOINT")

    def pgbench(
        self,
        workload: Workload,
        database: str,
        clients: int,
        duration: float,
        variables: dict[str, str],
        transactions: int | None = None,
    ) -> Run:
        """Run one workload; with transactions, a fixed count per client instead of -T."""
        length = ["-t", str(transactions)] if transactions else ["-T", str(int(duration))]
        command = [
            str(self.cluster.bindir / "pgbench"),
            "-h", "127.0.0.1", "-p", str(self.cluster.port), "-U", "postgres",
            "--no-vacuum", "--protocol=prepared",
            "-c", str(clients), "-j", str(min(clients, os.cpu_count() or 1)),
            *length,
            "-f", str(self.script(workload)),
        ]  # fmt: skip
        for name, value in {**self.variables, **variables}.items():
            command += ["-D", f"{name}={value}"]
        command.append(database)
        cpu_before = settled_cpu_seconds(self.postmaster_pid)
        usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        usage_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_after = settled_cpu_seconds(self.postmaster_pid)
        out = result.stdout + result.stderr
        if result.returncode != 0 or "aborted" in out:
            raise RuntimeError(f"pgbench {workload.name} failed ({result.returncode}):\n{out}")

        def number(pattern: str) -> float:
            match = re.search(pattern, out)
            if match is None:
                raise RuntimeError(f"pgbench output lacks {pattern!r}:\n{out}")
            return float(match.group(1))

        transactions = int(number(r"number of transactions actually processed: (\d+)"))
        failed_match = re.search(r"number of failed transactions: (\d+)", out)
        client_cpu = (usage_after.ru_utime - usage_before.ru_utime) + (usage_after.ru_stime - usage_before.ru_stime)
        return Run(
            workload=workload.name,
            database=database,
            clients=clients,
            duration=duration,
            transactions=transactions,
            failed=int(failed_match.group(1)) if failed_match else 0,
            tps=number(r"tps = ([\d.]+) \(without initial connection time\)"),
            latency_ms=number(r"latency average = ([\d.]+) ms"),
            server_cpu_us=(cpu_after - cpu_before) / max(transactions, 1) * 1e6,
            client_cpu_us=client_cpu / max(transactions, 1) * 1e6,
        )

    # ----------------------------------------------------------------------------------
    # Databases
    # ----------------------------------------------------------------------------------

    def create_database(self, prefix: str) -> str:
        name = testing.create_database(self.server, prefix=prefix)
        testing.install_schema(self.dsn(name))
        self.execute(name, SETUP_SQL)
        return name

    def load_nodes(self, database: str, first: int, last: int, *, batch: int = 25_000, workers: int = 2) -> None:
        """Nodes first..last with their create records, in parallel batches. Secondary
        indexes of nodes and journal (not those behind constraints) are dropped for the
        load and built again after it, as a bulk import would do."""
        batches = [(lo, min(lo + batch - 1, last)) for lo in range(first, last + 1, batch)]
        lock = threading.Lock()
        errors: list[BaseException] = []
        with psycopg.connect(self.dsn(database), autocommit=True) as conn:
            indexes = conn.execute(
                "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index AS i "
                "WHERE i.indrelid IN ('prme.nodes'::regclass, 'prme.journal'::regclass) "
                "AND NOT EXISTS (SELECT FROM pg_constraint AS c WHERE c.conindid = i.indexrelid)"
            ).fetchall()
            for name, _ in indexes:
                conn.execute(sql.SQL("DROP INDEX {}").format(sql.SQL(name)))

        def worker() -> None:
            try:
                with psycopg.connect(self.dsn(database), autocommit=True) as conn:
                    while True:
                        with lock:
                            if not batches or errors:
                                return
                            lo, hi = batches.pop(0)
                        conn.execute(LOAD_NODES_SQL, {"lo": lo, "hi": hi, "owners": OWNERS})
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        with psycopg.connect(self.dsn(database), autocommit=True) as conn:
            for _, ddl in indexes:
                conn.execute(ddl)
        if errors:
            raise errors[0]

    def preload_keys(self, database: str, count: int) -> None:
        for lo in range(1, count + 1, 5_000):
            hi = min(lo + 4_999, count)
            self.execute(database, PRELOAD_KEYS_SQL, {"lo": lo, "hi": hi, "owners": OWNERS})

    def settle(self, database: str) -> None:
        self.execute(database, "VACUUM (ANALYZE) prme.nodes, prme.journal, prme.request_keys")
        self.checkpoint(database)

    def clone(self, template: str, prefix: str) -> str:
        return testing.create_database(self.server, template=template, prefix=prefix)

    def apply_sql_file(self, database: str, path: Path) -> None:
        command = [
            str(self.cluster.bindir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
            "-h", "127.0.0.1", "-p", str(self.cluster.port), "-U", "postgres",
            "-d", database, "-1", "-f", str(path),
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"applying {path} failed:\n{result.stdout}{result.stderr}")

    def sample_record(self, database: str) -> tuple[str, str]:
        """A real reinforce journal record and its checksum (the size the others write)."""
        row = self.execute(
            database,
            "SELECT record, checksum FROM prme.journal WHERE op = 'reinforce' ORDER BY node_id, node_version LIMIT 1",
        )
        assert row is not None
        return str(row[0]), str(row[1])

    def table_writes(self, database: str) -> dict[str, int]:
        """Rows inserted + updated + deleted so far, per prme table (cumulative statistics)."""
        with psycopg.connect(self.dsn(database), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT relname, n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE schemaname = 'prme'"
            ).fetchall()
        return {str(name): int(count) for name, count in rows}

    def writes_per_transaction(self, database: str, workload: Workload, transactions: int = 40) -> dict[str, float]:
        """Rows each table gets per transaction of a workload: the proof that the
        comparisons write what reinforce writes (the schema keeps growing)."""
        before = self.table_writes(database)
        self.pgbench(workload, database, 1, 0, {}, transactions=transactions)
        wait_for_quiet(self.postmaster_pid)  # a backend flushes its statistics as it exits
        after = self.table_writes(database)
        return {
            table: round((after.get(table, 0) - before.get(table, 0)) / transactions, 2)
            for table in sorted(after)
            if after.get(table, 0) != before.get(table, 0)
        }

    def fingerprint(self, database: str) -> str:
        """md5 over what reinforce computes for 200 nodes with fixed ids and times:
        equal fingerprints mean a proposal writes byte-identical records and views."""
        row = self.execute(
            database,
            """
            SELECT md5(string_agg(
                e.record || e.checksum || prme._node_view(aft.a, FALSE)::text
                || prme._reinforced_boost(n.reinforcement_boost)::text
                || prme._reinforced_confidence(n.confidence_base)::text, '|' ORDER BY n.id))
            FROM prme.nodes AS n
            CROSS JOIN LATERAL (
                SELECT jsonb_populate_record(n, jsonb_build_object(
                    'content', 'é "q" \\ ' || chr(10) || n.content,
                    'confidence_base', 0.9999, 'reinforcement_boost', 0.5,
                    'last_reinforced_at', '2024-02-29 23:59:59.000001+00',
                    'updated_at', '2024-02-29 23:59:59.000001+00',
                    'evidence_refs', ARRAY[n.id], 'stability', 'stable', 'version', n.version + 1
                )) AS a
            ) AS aft
            CROSS JOIN LATERAL (
                SELECT (prme._journal_entry(
                    'reinforce', 'additive_caps_v1', '00000000-0000-4000-8000-000000000001',
                    md5('fingerprint' || n.id::text)::uuid, NULL, n, aft.a
                )).*
            ) AS e
            WHERE n.id IN (SELECT md5('node:' || i)::uuid FROM generate_series(1, 200) AS i)
            """,
        )
        assert row is not None
        return str(row[0])

    def verify_owners(self, database: str, owners: Sequence[str]) -> int:
        problems = 0
        for owner in owners:
            row = self.execute(database, "SELECT count(*) FROM prme.verify_journal(%(o)s)", {"o": owner})
            problems += int(row[0]) if row else 0
        return problems


# --------------------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------------------


def round_order(items: Sequence[Any], round_no: int) -> list[Any]:
    """Forward in even rounds, backward in odd ones: over two rounds every workload
    has the same mean position (the journal grows and the machine's load drifts)."""
    return list(items) if round_no % 2 == 0 else list(reversed(items))


def machine_info() -> dict[str, Any]:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "memory_gib": round(mem_kib / 2**20, 1),
        "kernel": platform.release(),
        "loadavg_at_start": os.getloadavg(),
    }


def server_info(bench: Bench, database: str) -> dict[str, str]:
    info: dict[str, str] = {}
    with psycopg.connect(bench.dsn(database), autocommit=True) as conn:
        info["version"] = str(conn.execute("SELECT version()").fetchone()[0])  # type: ignore[index]
        for name in (
            "fsync",
            "synchronous_commit",
            "wal_sync_method",
            "full_page_writes",
            "shared_buffers",
            "max_wal_size",
            "checkpoint_timeout",
        ):
            query = sql.SQL("SHOW {}").format(sql.Identifier(name))
            info[name] = str(conn.execute(query).fetchone()[0])  # type: ignore[index]
    return info


def schema_info() -> dict[str, Any]:
    """Which schema was measured: the git commit, whether the tree had changes, and
    the sha256 of every migration applied."""

    def git(*args: str) -> str:
        result = subprocess.run(["git", *args], capture_output=True, text=True, check=False, cwd=BENCH_DIR)
        return result.stdout.strip()

    return {
        "git_head": git("rev-parse", "HEAD"),
        "git_dirty_paths": len(git("status", "--porcelain").splitlines()),
        "migrations": {m.filename: m.sha256 for m in migrations.load_migrations()},
    }


def print_writes(writes: dict[str, dict[str, float]]) -> None:
    tables = sorted({table for rows in writes.values() for table in rows})
    table = Table(title="rows written per transaction (inserted + updated + deleted, pg_stat_user_tables)")
    table.add_column("workload")
    for name in tables:
        table.add_column(name, justify="right")
    for workload, rows in writes.items():
        table.add_row(workload, *(f"{rows.get(name, 0):g}" for name in tables))
    console.print(table)


def fmt_ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 4 s, 250k-node scale test (~2 min)")
    parser.add_argument("--clients", type=int, default=8, help="pgbench clients for throughput (8)")
    parser.add_argument("--duration", type=float, help="seconds per run (10; --quick 4)")
    parser.add_argument("--rounds", type=int, help="rounds over all workloads (4; --quick 2)")
    parser.add_argument(
        "--scale-nodes", type=int, help="nodes for the latency-at-scale test (1,000,000; --quick 250,000)"
    )
    parser.add_argument(
        "--latency-duration", type=float, help="seconds of 1-client latency per node count (20; --quick 6)"
    )
    parser.add_argument("--no-scale", action="store_true", help="skip the latency-at-scale test")
    parser.add_argument(
        "--compare",
        type=Path,
        action="append",
        default=[],
        metavar="SQL",
        help="also run reinforce on a copy of the database with this SQL applied (repeatable)",
    )
    parser.add_argument("--only", action="append", default=[], help="run only these workloads (repeatable)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a server setting for the cluster, e.g. shared_buffers=4GB (repeatable; default: none, "
        "the server defaults; durability settings are refused)",
    )
    parser.add_argument(
        "--rtt-us",
        type=int,
        default=0,
        help="emulate a network round trip of this many microseconds before every statement "
        "(pgbench \\sleep on the client; 0 = plain loopback, the default)",
    )
    args = parser.parse_args(argv)

    duration = args.duration or (4.0 if args.quick else 10.0)
    rounds = args.rounds or (2 if args.quick else 4)
    scale_nodes = args.scale_nodes or (250_000 if args.quick else 1_000_000)
    latency_duration = args.latency_duration or (6.0 if args.quick else 20.0)
    workloads = [BY_NAME[name] for name in args.only] if args.only else list(WORKLOADS)

    started = time.monotonic()
    stamp = datetime.now(UTC)
    console.print(f"[bold]prme-pg bench[/] {stamp:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores")
    settings = dict(item.split("=", 1) for item in args.set)
    refused = {"fsync", "synchronous_commit", "full_page_writes", "wal_sync_method"} & set(settings)
    if refused:
        parser.error(f"the benchmark measures durable commits; not settable: {', '.join(sorted(refused))}")
    with console.status("starting a throwaway cluster (server defaults: fsync on, synchronous_commit on)"):
        cluster = testing.PostgresCluster.create(settings)
    try:
        return run_all(cluster, args, workloads, duration, rounds, scale_nodes, latency_duration, stamp, started)
    finally:
        cluster.destroy()


def run_all(
    cluster: testing.PostgresCluster,
    args: argparse.Namespace,
    workloads: list[Workload],
    duration: float,
    rounds: int,
    scale_nodes: int,
    latency_duration: float,
    stamp: datetime,
    started: float,
) -> int:
    bench = Bench(cluster)
    bench.variables.update(rtt=str(args.rtt_us), outcomes="0")
    try:
        return measure(bench, args, workloads, duration, rounds, scale_nodes, latency_duration, stamp, started)
    finally:
        shutil.rmtree(bench.scratch, ignore_errors=True)


def measure(
    bench: Bench,
    args: argparse.Namespace,
    workloads: list[Workload],
    duration: float,
    rounds: int,
    scale_nodes: int,
    latency_duration: float,
    stamp: datetime,
    started: float,
) -> int:

    def step(message: str) -> None:
        console.print(f"[dim]{time.monotonic() - started:6.1f}s[/] {escape(message)}")

    # ---- main database: 10,000 nodes of 100 owners, 10,000 committed keys ------------
    main_db = bench.create_database("prme_bench")
    step(f"database {main_db}: migrations applied")
    bench.load_nodes(main_db, 1, NODES)
    bench.preload_keys(main_db, NODES)
    bench.settle(main_db)
    record, checksum = bench.sample_record(main_db)
    bench.variables.update(nodes=str(NODES), replay_keys=str(NODES), record=record, checksum=checksum)
    step(f"loaded {NODES:,} nodes of {OWNERS} owners, {NODES:,} committed keys; record {len(record)} chars")
    server = server_info(bench, main_db)

    proposals: list[tuple[Path, str]] = []
    baseline_fingerprint = bench.fingerprint(main_db) if args.compare else ""
    if args.compare:
        # The control: an unchanged copy that runs only what the proposals run, so a
        # proposal is compared with a database of the same size and history (the main
        # database also takes the other workloads' writes).
        proposals.append((CONTROL, bench.clone(main_db, "prme_control")))
    for path in args.compare:
        db = bench.clone(main_db, "prme_proposal")
        bench.apply_sql_file(db, path)
        same = bench.fingerprint(db) == baseline_fingerprint
        step(f"proposal {path.name} -> {db}: records byte-identical to baseline: {same}")
        if not same:
            raise SystemExit(f"{path}: the proposal changes what reinforce writes; refusing to compare")
        proposals.append((path, db))

    # ---- what each workload writes, per transaction ----------------------------------
    writes = {"reinforce_fresh": bench.writes_per_transaction(main_db, BY_NAME["reinforce_fresh"])}
    reference = writes["reinforce_fresh"]
    write_problems: list[str] = []
    for name in ("reinforce_replay", "client_side", "no_logic_limit", "function_floor", "record_floor"):
        try:
            writes[name] = bench.writes_per_transaction(main_db, BY_NAME[name])
        except RuntimeError as exc:
            # A comparison script that no longer fits the schema: say which, skip it.
            error = next((line for line in str(exc).splitlines() if "ERROR" in line), str(exc)[-300:])
            write_problems.append(f"{name} fails on this schema and is skipped: {error.strip()}")
            workloads = [w for w in workloads if w.name != name]
    write_problems += [
        f"{name} writes {rows} per transaction, reinforce_fresh writes {reference}"
        for name, rows in writes.items()
        if name in ("client_side", "no_logic_limit", "function_floor", "record_floor") and rows != reference
    ]
    if writes["reinforce_replay"]:
        write_problems.append(f"reinforce_replay writes {writes['reinforce_replay']}: a replay must write nothing")
    print_writes(writes)
    for problem in write_problems:
        console.print(f"[bold red]comparison is not like for like:[/] {problem}")

    # ---- throughput: rounds over all workloads, forward then backward----------------------------
    jobs: list[tuple[Workload, str, str]] = [(w, main_db, w.name) for w in workloads]
    for path, db in proposals:
        for name in ("reinforce_fresh", "reinforce_replay"):
            jobs.append((BY_NAME[name], db, f"{name} [{path.stem}]"))
    results: dict[str, Aggregate] = {}
    for round_no in range(rounds):
        for workload, db, label in round_order(jobs, round_no):
            bench.checkpoint(db)
            run = bench.pgbench(workload, db, args.clients, duration, {})
            results.setdefault(label, Aggregate(workload.name, db)).runs.append(run)
            step(
                f"round {round_no + 1}/{rounds} {label:<44} {run.tps:9.0f} tps "
                f"{run.latency_ms:7.3f} ms {run.server_cpu_us:7.0f} us cpu/txn"
            )

    # ---- latency at scale: 1 client, 10k nodes vs scale_nodes, alternating ------------
    latency: dict[str, Aggregate] = {}
    if not args.no_scale:
        small_db = bench.create_database("prme_small")
        bench.load_nodes(small_db, 1, NODES)
        bench.settle(small_db)
        large_db = bench.create_database("prme_large")
        step(f"loading {scale_nodes:,} nodes into {large_db} ...")
        bench.load_nodes(large_db, 1, scale_nodes)
        bench.settle(large_db)
        size = bench.execute(large_db, "SELECT pg_size_pretty(pg_database_size(current_database()))")
        step(f"loaded {scale_nodes:,} nodes ({size[0] if size else '?'})")
        fresh = BY_NAME["reinforce_fresh"]
        targets = [("10k", small_db, NODES), ("scale", large_db, scale_nodes)]
        for db, count in ((small_db, NODES), (large_db, scale_nodes)):  # warm the caches
            bench.pgbench(fresh, db, 1, 3, {"nodes": str(count)})
        alternations = 2 if args.quick else 4
        for round_no in range(alternations):
            for key, db, count in round_order(targets, round_no):
                bench.checkpoint(db)
                seconds = max(2.0, latency_duration / alternations)
                run = bench.pgbench(fresh, db, 1, seconds, {"nodes": str(count)})
                latency.setdefault(key, Aggregate(fresh.name, db)).runs.append(run)
                step(
                    f"latency {count:>9,} nodes, 1 client: {run.latency_ms:.3f} ms, {run.server_cpu_us:.0f} us cpu/txn"
                )
        for db in (small_db, large_db):
            testing.drop_database(bench.server, db)

    # ---- checks on the proposals -------------------------------------------------------
    proposal_checks: dict[str, int] = {}
    for path, db in proposals:
        proposal_checks[path.stem] = bench.verify_owners(db, [f"user_{i}" for i in range(0, OWNERS, 10)])

    report(
        results,
        latency,
        scale_nodes,
        args,
        duration,
        rounds,
        server,
        proposals,
        proposal_checks,
        stamp,
        started,
        writes,
        write_problems,
    )
    return 0


def paired(a: Aggregate | None, b: Aggregate | None, attr: str) -> float | None:
    """Median over rounds of a's value / b's value in the same round: both ran within
    the same minute, so drifting load from other processes cancels out."""
    if a is None or b is None:
        return None
    values = [getattr(x, attr) / getattr(y, attr) for x, y in zip(a.runs, b.runs, strict=False) if getattr(y, attr)]
    return statistics.median(values) if values else None


# The floors: functions that do part of what reinforce must do, and nothing else. A
# confirmation can do no better against a comparison than the floor that does less.
FLOORS = {
    "function_floor": "floor: any API function",
    "record_floor": "floor: + the journal's rule",
}


def floor_bounds(results: dict[str, Aggregate]) -> dict[str, Any]:
    """What the floors show about the targets: the most a confirmation could reach
    against each comparison, medians of per-round ratios like the targets.
    function_floor makes the two writes in an API-style function and nothing else;
    record_floor also reads the node and builds its record, as the journal's rule
    requires of any design; reinforce does that and validates and checks the key."""
    limit, client, insert = results.get("no_logic_limit"), results.get("client_side"), results.get("single_insert")
    bounds: dict[str, Any] = {}
    lines = []
    for name in FLOORS:
        floor = results.get(name)
        if floor is None:
            continue
        found = {
            "vs_no_logic_limit": paired(floor, limit, "tps"),
            "vs_no_logic_limit_cpu": paired(limit, floor, "server_cpu_us"),
            "vs_client_side": paired(floor, client, "tps"),
            "vs_client_side_cpu": paired(client, floor, "server_cpu_us"),
            "cpu_vs_single_insert": paired(floor, insert, "server_cpu_us"),
        }
        bounds[name] = found
        parts = [
            f"{fmt_ratio(found[key])} {label}"
            for key, label in (
                ("vs_no_logic_limit", "of no_logic_limit (target for fresh >= 0.9x)"),
                ("vs_client_side", "of client_side (>= 1.2x loopback, 1.8x at 0.5 ms)"),
                ("cpu_vs_single_insert", "the CPU of a single INSERT (<= 3x)"),
            )
            if found[key] is not None  # that comparison ran (see --only)
        ]
        if parts:
            lines.append(f"{name}: " + ", ".join(parts))
    if lines:
        lines.insert(0, "the most a confirmation could reach, by what it must do at least (ratios in TPS):")
    bounds["lines"] = lines
    return bounds


def report(
    results: dict[str, Aggregate],
    latency: dict[str, Aggregate],
    scale_nodes: int,
    args: argparse.Namespace,
    duration: float,
    rounds: int,
    server: dict[str, str],
    proposals: list[tuple[Path, str]],
    proposal_checks: dict[str, int],
    stamp: datetime,
    started: float,
    writes: dict[str, dict[str, float]],
    write_problems: list[str],
) -> None:
    targets: list[dict[str, Any]] = []

    def target(name: str, measured: float | None, op: str, bound: float, **extra: Any) -> dict[str, Any]:
        ok = None if measured is None else (measured >= bound if op == ">=" else measured <= bound)
        entry = {"target": name, "measured": measured, "op": op, "bound": bound, "pass": ok, **extra}
        targets.append(entry)
        return entry

    def verdict(entry: dict[str, Any] | None) -> str:
        if entry is None or entry["pass"] is None:
            return ""
        return "[green]PASS[/]" if entry["pass"] else "[red]FAIL[/]"

    rtt = f", {args.rtt_us} us emulated RTT per statement" if args.rtt_us else ""
    rtt += "".join(f", {item}" for item in args.set)
    table = Table(
        title=f"prme-pg core: pgbench -M prepared, {args.clients} clients, synchronous_commit on{rtt}, "
        f"{rounds} rounds x {duration:.0f} s per workload, {os.cpu_count()} cores"
    )
    for column, justify in (
        ("workload", "left"),
        ("TPS", "right"),
        ("mean latency", "right"),
        ("server CPU/txn", "right"),
        ("ratio (TPS)", "right"),
        ("ratio (CPU)", "right"),
        ("target", "left"),
        ("result", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]

    def row(label: str, agg: Aggregate, *cells: str) -> None:
        table.add_row(label, f"{agg.tps:,.0f}", f"{agg.latency_ms:.3f} ms", f"{agg.server_cpu_us:,.0f} us", *cells)

    fresh = results.get("reinforce_fresh")
    for name, agg in results.items():
        if "[" in name:
            continue
        if name == "reinforce_fresh":
            row(name, agg, "", "", "reference", "")
        elif name == "reinforce_replay":
            r, cpu = paired(agg, fresh, "tps"), paired(fresh, agg, "server_cpu_us")
            entry = target("replay / fresh", r, ">=", 3.0, cpu_ratio=cpu)
            row(name, agg, f"{fmt_ratio(r)} fresh", f"{fmt_ratio(cpu)} fresh", "replay >= 3x fresh", verdict(entry))
        else:
            # Against the client's statements: 1.8x at an emulated 0.5 ms round trip, 1.2x on loopback.
            client_bound = 1.8 if args.rtt_us >= 500 else 1.2
            bound = {"client_side": client_bound, "no_logic_limit": 0.9}.get(name)
            r, cpu = paired(fresh, agg, "tps"), paired(agg, fresh, "server_cpu_us")
            if name == "single_insert":
                # Server CPU per fresh reinforce against one single-row INSERT commit.
                cpu_times = paired(fresh, agg, "server_cpu_us")
                entry = target("fresh CPU / single_insert CPU", cpu_times, "<=", 3.0)
                row(
                    name, agg, f"fresh = {fmt_ratio(r)}", f"fresh = {fmt_ratio(cpu_times)}", "fresh CPU <= 3x",
                    verdict(entry),
                )  # fmt: skip
            elif name in FLOORS:
                row(name, agg, f"fresh = {fmt_ratio(r)}", f"= {fmt_ratio(cpu)}", FLOORS[name], "")
            elif bound is None:
                row(name, agg, f"fresh = {fmt_ratio(r)}", f"= {fmt_ratio(cpu)}", "context", "")
            else:
                entry = target(f"fresh / {name}", r, ">=", bound, cpu_ratio=cpu)
                row(name, agg, f"fresh = {fmt_ratio(r)}", f"= {fmt_ratio(cpu)}", f"fresh >= {bound}x", verdict(entry))

    if latency:
        small, large = latency["10k"], latency["scale"]
        table.add_section()
        row(f"reinforce_fresh, {NODES:,} nodes, 1 client", small, "", "", "reference", "")
        r, cpu = paired(large, small, "latency_ms"), paired(large, small, "server_cpu_us")
        entry = target(f"latency {scale_nodes:,} / {NODES:,} nodes", r, "<=", 1.25, cpu_ratio=cpu)
        note = "" if scale_nodes >= 1_000_000 else " (reduced scale)"
        row(
            f"reinforce_fresh, {scale_nodes:,} nodes, 1 client{note}",
            large,
            f"{fmt_ratio(r)} latency",
            f"{fmt_ratio(cpu)} CPU",
            "<= 1.25x",
            verdict(entry),
        )

    console.print(table)
    console.print(
        "TPS, latency and CPU are means over the rounds; ratios are medians of the per-round ratios. "
        "ratio (TPS) decides a target; ratio (CPU) is the same comparison in server CPU time per "
        "transaction (all cluster processes), which other load on the machine disturbs much less."
    )
    for problem in write_problems:
        console.print(f"[bold red]comparison is not like for like:[/] {problem}")
    bounds = floor_bounds(results)
    for line in bounds.get("lines", []):
        console.print(line)

    if proposals:
        ptable = Table(title="proposals (bench/proposals/), each on its own copy of the loaded database")
        for column in (
            "proposal",
            "fresh TPS",
            "fresh CPU/txn",
            "vs control (TPS / CPU)",
            "fresh / client_side (TPS / CPU)",
            "fresh / no_logic_limit (TPS / CPU)",
            "replay vs control (TPS / CPU)",
            "journal",
        ):
            ptable.add_column(column, justify="left" if column in ("proposal", "journal") else "right")
        client, limit = results.get("client_side"), results.get("no_logic_limit")
        replay = results.get("reinforce_replay")

        def pair(a: float | None, b: float | None) -> str:
            return f"{fmt_ratio(a)} / {fmt_ratio(b)}"

        base_fresh = results.get(f"reinforce_fresh [{CONTROL.stem}]", fresh)
        base_replay = results.get(f"reinforce_replay [{CONTROL.stem}]", replay)
        for path, _db in proposals:
            pf = results.get(f"reinforce_fresh [{path.stem}]")
            pr = results.get(f"reinforce_replay [{path.stem}]")
            if pf is None:
                continue
            vs_client = paired(pf, client, "tps")
            vs_limit = paired(pf, limit, "tps")
            target(f"fresh [{path.stem}] / client_side", vs_client, ">=", 1.8,
                   cpu_ratio=paired(client, pf, "server_cpu_us"))  # fmt: skip
            target(f"fresh [{path.stem}] / no_logic_limit", vs_limit, ">=", 0.9,
                   cpu_ratio=paired(limit, pf, "server_cpu_us"))  # fmt: skip
            problems = proposal_checks.get(path.stem, 0)
            ptable.add_row(
                path.stem,
                f"{pf.tps:,.0f}",
                f"{pf.server_cpu_us:,.0f} us",
                pair(paired(pf, base_fresh, "tps"), paired(base_fresh, pf, "server_cpu_us")),
                pair(vs_client, paired(client, pf, "server_cpu_us")),
                pair(vs_limit, paired(limit, pf, "server_cpu_us")),
                pair(paired(pr, base_replay, "tps"), paired(base_replay, pr, "server_cpu_us")) if pr else "",
                "verifies" if problems == 0 else f"[red]{problems} problems[/]",
            )
        console.print(ptable)
        console.print(
            "control: an unchanged copy of the database, run alongside the proposals. journal: "
            "prme.verify_journal over 10 owners of each copy after its runs; before the runs, each "
            "proposal's records were checked byte-identical to the baseline's."
        )

    baseline_targets = [t for t in targets if "[" not in t["target"]]
    passed = sum(1 for t in baseline_targets if t["pass"])
    console.print(f"targets passed: {passed}/{len(baseline_targets)}")

    RESULTS_DIR.mkdir(exist_ok=True)
    out = RESULTS_DIR / f"{stamp:%Y%m%dT%H%M%SZ}.json"
    document = {
        "date": stamp.isoformat(),
        "elapsed_s": round(time.monotonic() - started, 1),
        "machine": machine_info(),
        "server": server,
        "schema": schema_info(),
        "settings": {
            "clients": args.clients,
            "duration_s": duration,
            "rounds": rounds,
            "protocol": "prepared",
            "rtt_us": args.rtt_us,
            "server_settings": dict(item.split("=", 1) for item in args.set),
            "nodes": NODES,
            "owners": OWNERS,
            "scale_nodes": scale_nodes,
        },
        "throughput": {name: agg.as_dict() for name, agg in results.items()},
        "latency": {key: agg.as_dict() for key, agg in latency.items()},
        "targets": targets,
        "floor_bounds": {k: v for k, v in bounds.items() if k != "lines"},
        "rows_written_per_transaction": writes,
        "write_problems": write_problems,
        "proposals": [
            {"file": str(path), "verify_journal_problems": proposal_checks.get(path.stem, 0)} for path, _ in proposals
        ],
    }
    out.write_text(json.dumps(document, indent=2) + "\n")
    console.print(f"results: {out.relative_to(BENCH_DIR.parent)} ({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
