"""prme-pg operations ledger benchmark (issue 6, item 8).

Run from the repository root:

    .venv/bin/python bench/ledger_bench.py            # ~8 minutes
    .venv/bin/python bench/ledger_bench.py --quick    # ~3 minutes

It starts its own throwaway cluster from this machine's PostgreSQL binaries with the
server defaults (fsync on, synchronous_commit on: every commit waits for its WAL
flush), applies the migrations and measures, in one run:

* submits per second: ``prme.submit_operation`` of a new add_node operation (the
  database checks the request, stores the operation with its accepted event inside,
  notifies; the payload's RFC 8785 hash is the executor's to check), by pgbench at 8
  clients with prepared statements, against the floor of the core benchmark: one
  single-row INSERT per commit (bench/pgbench/single_insert.sql), in alternating
  rounds. Target: >= 0.5x.
* the same submit on a database at an earlier schema (``--baseline``, default the
  migration before the last), side by side in the same cluster and the same
  alternating rounds, so a change to submit is quoted as a ratio measured in one run;
* WAL bytes per commit of each pgbench workload (the server's WAL position before and
  after the round, over the transactions pgbench completed): with synchronous_commit on,
  commits wait for their WAL flush, and a flush takes longer the more bytes it writes;
* where the clients' time goes: pg_stat_activity of the round's backends sampled every
  5 ms, as the average number of backends in each wait event (CPU: running, no wait;
  client: idle, waiting for pgbench's next statement);
* the no-logic limit: the same row (the operation, its accepted event inside) written
  by one statement without validation, idempotency or NOTIFY, for context;
* resubmits per second: the same call with an operation id that is already stored
  (the retry after a lost response: the stored receipt, nothing written). Target:
  >= 1.5x the single INSERT.
* drain rate: operations committed per second by ``prme-pg worker`` executors
  (prme_pg.worker.run_worker, batches of 100) emptying a backlog of add_node and
  reinforce operations (alternating), at 2 workers and, for context, at 1; against the
  same calls made directly (prme.add_node, prme.reinforce) by 2 threads, 100 per
  transaction. Target: the drain at 2 workers >= 0.5x the direct calls.

Every figure is the median of the rounds (5 by default), rounds alternating in order.
Quote ratios, not absolute numbers: they depend on the machine. Results are printed
as a table and written as JSON to bench/results/ (git-ignored).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import rfc8785
from rich.console import Console
from rich.table import Table

from prme_pg import migrations, testing
from prme_pg import worker as ledger_worker

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
SINGLE_INSERT = BENCH_DIR / "pgbench" / "single_insert.sql"
OWNERS = 100
TARGET = 0.5
RESUBMIT_TARGET = 1.5

console = Console(width=None if sys.stdout.isatty() else 150)

PAYLOAD = {
    "content": "The user prefers short answers with code examples and works in Europe/Berlin",
    "scope": "personal",
    "kind": "preference",
    "confidence_base": 0.7,
    "salience_base": 0.5,
}

# pgbench scripts. Variables come from -D; with --protocol=prepared they are parameters.
SUBMIT_SCRIPT = """\
-- A new operation: a fresh id from a random owner, the payload and its hash computed by the client.
\\set u random(0, :owners - 1)
SELECT created FROM prme.submit_operation(
    'user_' || :u::text, bench.operation_id(NULL), 2, 'add_node', '{}', :hash, :payload::jsonb
);
"""

RESUBMIT_SCRIPT = """\
-- The retry of a stored operation: operation i of owner i % owners, id md5('op:' || i).
\\set i random(1, :stored)
\\set u :i % :owners
SELECT created FROM prme.submit_operation(
    'user_' || :u::text, bench.operation_id('op:' || :i::text), 2, 'add_node', '{}', :hash, :payload::jsonb
);
"""

NO_LOGIC_SCRIPT = """\
-- The same row as a new submit (the operation, its accepted event inside), written by
-- one statement with no logic at all: no validation, no hash check, no idempotency, no
-- NOTIFY (the limit for this data).
\\set u random(0, :owners - 1)
INSERT INTO prme.operations (
    user_id, operation_id, schema_version, kind, dependencies, payload_hash, payload, state, blocked_by,
    attempts, next_attempt_at, last_event_seq, created_at, updated_at, accepted_seq
) VALUES (
    'user_' || :u::text, gen_random_uuid(), 2, 'add_node', '{}', :hash, :payload::jsonb, 'accepted', '{}',
    0, now(), 1, now(), now(), pg_current_xact_id()::text::bigint << 20
);
"""

SINGLE_INSERT_FALLBACK = """\
\\set u random(0, :owners - 1)
INSERT INTO bench.single_rows (user_id, id, content)
VALUES ('user_' || :u::text, gen_random_uuid(), 'Benchmark row: the user prefers short answers with code examples');
"""

# Operation ids in the ledger's type: uuid before migration 0017_reference_protocol, text
# after (a UUID's text). The scripts name ids through it, so one script runs on both schemas.
OPERATION_ID_SQL = """
CREATE SCHEMA IF NOT EXISTS bench;
DO $$
DECLARE
    v_type text := (
        SELECT format_type(a.atttypid, NULL) FROM pg_attribute AS a
        WHERE a.attrelid = 'prme.operations'::regclass AND a.attname = 'operation_id'
    );
BEGIN
    EXECUTE format(
        'CREATE FUNCTION bench.operation_id(seed text) RETURNS %1$s LANGUAGE sql VOLATILE AS '
        '$f$ SELECT (CASE WHEN seed IS NULL THEN gen_random_uuid() ELSE md5(seed)::uuid END)::%1$s $f$',
        v_type
    );
END;
$$;
"""

SETUP_SQL = """
CREATE SCHEMA IF NOT EXISTS bench;
CREATE TABLE bench.single_rows (
    user_id text NOT NULL,
    id uuid NOT NULL,
    content text NOT NULL,
    PRIMARY KEY (user_id, id)
);
"""

# The drain's work: n operations, add_node and reinforce alternating. Node j (owner
# user_<j % owners>, id md5('drain-node:' || tag || j)) exists beforehand for reinforce i = 2j.
DRAIN_NODES_SQL = """
SELECT count(prme.add_node(
    user_id => 'user_' || (j %% %(owners)s), content => 'Drain target ' || j,
    node_id => md5('drain-node:' || %(tag)s || j)::uuid
))
FROM generate_series(1, %(n)s / 2) AS j
"""

DRAIN_CALLS_SQL = """
CREATE TABLE bench.drain_calls AS
SELECT i, 'user_' || (CASE WHEN i %% 2 = 0 THEN i / 2 ELSE i END %% %(owners)s) AS user_id,
       CASE WHEN i %% 2 = 0 THEN 'reinforce' ELSE 'add_node' END AS kind,
       CASE WHEN i %% 2 = 0
            THEN jsonb_build_object('node_id', md5('drain-node:' || %(tag)s || (i / 2))::uuid)
            ELSE jsonb_build_object('content', 'Backlog memory ' || i || ' ' || %(tag)s)
       END AS payload
FROM generate_series(1, %(n)s) AS i
"""

# The backlog: each call submitted as an operation, set-based.
BACKLOG_SQL = """
SELECT count(prme.submit_operation(
    c.user_id, bench.operation_id(NULL), 2, c.kind, '{}', prme.payload_hash(c.payload), c.payload
))
FROM bench.drain_calls AS c
"""

# The same calls made directly, a batch of 100 per transaction as the executor's batches.
DIRECT_BATCH_SQL = """
SELECT count(CASE c.kind
    WHEN 'add_node' THEN (prme.add_node(user_id => c.user_id, content => c.payload ->> 'content')).id
    ELSE (prme.reinforce(node_id => (c.payload ->> 'node_id')::uuid, user_id => c.user_id,
                         request_id => gen_random_uuid())).id
END)
FROM bench.drain_calls AS c
WHERE c.i > %(start)s AND c.i <= %(start)s + 100
"""


STORED_SQL = """
SELECT count(prme.submit_operation(
    'user_' || (i %% %(owners)s), bench.operation_id('op:' || i), 2, 'add_node', '{}', %(hash)s, %(payload)s::jsonb
))
FROM generate_series(1, %(n)s) AS i
"""


WAIT_SAMPLE_SQL = """
SELECT CASE
    WHEN wait_event_type = 'Client' OR (wait_event IS NULL AND state <> 'active') THEN 'client'
    WHEN wait_event IS NULL THEN 'CPU'
    ELSE wait_event_type || ':' || wait_event
END
FROM pg_stat_activity
WHERE backend_type = 'client backend' AND datname = %(database)s AND pid <> pg_backend_pid()
"""


class WaitSampler(threading.Thread):
    """Samples the wait events of one database's client backends every 5 ms while a round runs."""

    def __init__(self, dsn: str, database: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.database = database
        self.stop = threading.Event()
        self.counts: collections.Counter[str] = collections.Counter()
        self.samples = 0

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                for (event,) in conn.execute(WAIT_SAMPLE_SQL, {"database": self.database}):
                    self.counts[event] += 1
                self.samples += 1
                time.sleep(0.005)

    def average_backends(self) -> dict[str, float]:
        """Average number of backends in each wait event over the samples taken."""
        return {event: n / max(1, self.samples) for event, n in self.counts.most_common()}


def install_up_to(dsn: str, version: int) -> None:
    """Apply the migrations up to and including `version` (the baseline schema)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrations.migrate(conn, [m for m in migrations.load_migrations() if m.version <= version])


class Bench:
    def __init__(self, cluster: testing.PostgresCluster, database: str, workdir: Path) -> None:
        self.cluster = cluster
        self.database = database
        self.dsn = testing.Server(cluster.dsn).dsn_for(database)
        self.workdir = workdir
        self.payload_text = json.dumps(PAYLOAD)
        self.hash = hashlib.sha256(rfc8785.dumps(PAYLOAD)).hexdigest()

    def execute(self, statement: str, params: dict[str, Any] | None = None) -> Any:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(statement, params)  # type: ignore[arg-type]
            return cur.fetchone() if cur.description else None

    def script(self, name: str, text: str) -> Path:
        path = self.workdir / name
        path.write_text(text)
        return path

    def pgbench(
        self, script: Path, clients: int, seconds: int, variables: dict[str, str], database: str | None = None
    ) -> tuple[float, float, dict[str, float]]:
        """One pgbench round: transactions per second, WAL bytes per transaction, backends per wait event."""
        start_lsn = self.execute("SELECT pg_current_wal_lsn()::text")[0]
        command = [
            str(self.cluster.bindir / "pgbench"),
            "-h", "127.0.0.1", "-p", str(self.cluster.port), "-U", "postgres",
            "--no-vacuum", "--protocol=prepared",
            "-c", str(clients), "-j", str(min(clients, os.cpu_count() or 1)),
            "-T", str(seconds), "-f", str(script),
        ]  # fmt: skip
        for name, value in {"owners": str(OWNERS), "rtt": "0", **variables}.items():
            command += ["-D", f"{name}={value}"]
        command.append(database or self.database)
        sampler = WaitSampler(self.dsn, database or self.database)
        sampler.start()
        try:
            result = subprocess.run(command, capture_output=True, text=True, check=False)
        finally:
            sampler.stop.set()
            sampler.join()
        out = result.stdout + result.stderr
        if result.returncode != 0 or "aborted" in out:
            raise RuntimeError(f"pgbench {script.name} failed ({result.returncode}):\n{out}")
        match = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
        processed = re.search(r"number of transactions actually processed: ([0-9]+)", out)
        if match is None or processed is None:
            raise RuntimeError(f"pgbench output lacks tps:\n{out}")
        wal = self.execute("SELECT pg_current_wal_lsn() - %(start)s::pg_lsn", {"start": start_lsn})[0]
        return float(match.group(1)), float(wal) / max(1, int(processed.group(1))), sampler.average_backends()

    def prepare_drain(self, backlog: int, tag: str) -> None:
        """The drain's targets and calls (bench.drain_calls), written before anything is timed."""
        self.execute(OPERATION_ID_SQL)
        row = self.execute(DRAIN_NODES_SQL, {"owners": OWNERS, "n": backlog, "tag": tag})
        assert row is not None and row[0] == backlog // 2
        self.execute(DRAIN_CALLS_SQL, {"owners": OWNERS, "n": backlog, "tag": tag})

    def drain(self, workers: int, backlog: int) -> tuple[float, float]:
        """Submit bench.drain_calls as operations, then time `workers` executors emptying it: (ops/s, seconds)."""
        row = self.execute(BACKLOG_SQL)
        assert row is not None and row[0] == backlog
        self.execute("VACUUM ANALYZE")
        self.execute("CHECKPOINT")
        done: list[int] = []
        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                done.append(
                    ledger_worker.run_worker(
                        self.dsn, worker=f"bench-{i}", batch=100, until_idle=True, install_signal_handlers=False
                    )
                )
            except BaseException as exc:  # reported below
                errors.append(exc)

        elapsed = self._timed(workers, run)
        if errors:
            raise errors[0]
        left = self.execute("SELECT count(*) FROM prme.operations WHERE state <> 'committed'")
        if sum(done) != backlog or (left is not None and left[0] != 0):
            raise RuntimeError(f"drain incomplete: finished {sum(done)} of {backlog}, {left} not committed")
        return backlog / elapsed, elapsed

    def direct(self, workers: int, backlog: int) -> tuple[float, float]:
        """The same calls as the drain's, made directly by `workers` threads, 100 per transaction."""
        self.execute("VACUUM ANALYZE")
        self.execute("CHECKPOINT")
        batches = iter(range(0, backlog, 100))
        lock = threading.Lock()
        errors: list[BaseException] = []

        def run(_: int) -> None:
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    while True:
                        with lock:
                            start = next(batches, None)
                        if start is None:
                            return
                        conn.execute(DIRECT_BATCH_SQL, {"start": start})
            except BaseException as exc:  # reported below
                errors.append(exc)

        elapsed = self._timed(workers, run)
        if errors:
            raise errors[0]
        return backlog / elapsed, elapsed

    @staticmethod
    def _timed(workers: int, target: Any) -> float:
        threads = [threading.Thread(target=target, args=(i,)) for i in range(workers)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="shorter rounds and a smaller backlog")
    parser.add_argument("--clients", type=int, default=8, help="pgbench clients for submits (8)")
    parser.add_argument("--seconds", type=int, default=None, help="seconds per pgbench round (10; quick: 4)")
    parser.add_argument(
        "--rounds", type=int, default=None, help="rounds of each workload, drains included; medians (5; quick: 3)"
    )
    parser.add_argument("--backlog", type=int, default=None, help="operations per drain (10000; quick: 2000)")
    parser.add_argument(
        "--baseline",
        type=int,
        default=max(m.version for m in migrations.load_migrations()) - 1,
        help="also measure submit at the schema of this migration (default: the one before the last; 0: skip)",
    )
    args = parser.parse_args(argv)
    seconds = args.seconds or (4 if args.quick else 10)
    rounds = args.rounds or (3 if args.quick else 5)
    drain_rounds = rounds
    backlog = args.backlog or (2000 if args.quick else 10000)

    console.print("starting a throwaway cluster (fsync on, synchronous_commit on)...")
    cluster = testing.PostgresCluster.create({"max_wal_size": "4GB", "checkpoint_timeout": "30min"})
    try:
        server = testing.Server(cluster.dsn)
        database = testing.create_database(server, prefix="prme_ledger_bench")
        testing.install_schema(server.dsn_for(database))
        baseline = None
        if args.baseline:
            baseline = testing.create_database(server, prefix=f"prme_ledger_bench_{args.baseline:04d}")
            install_up_to(server.dsn_for(baseline), args.baseline)
            with psycopg.connect(server.dsn_for(baseline), autocommit=True) as conn:
                conn.execute(OPERATION_ID_SQL)
        with tempfile.TemporaryDirectory(prefix="prme-ledger-bench-") as tmp:
            bench = Bench(cluster, database, Path(tmp))
            bench.execute(OPERATION_ID_SQL)
            bench.execute(SETUP_SQL)
            stored = 10000
            bench.execute(
                STORED_SQL, {"owners": OWNERS, "n": stored, "hash": bench.hash, "payload": bench.payload_text}
            )
            single = (
                SINGLE_INSERT if SINGLE_INSERT.exists() else bench.script("single_insert.sql", SINGLE_INSERT_FALLBACK)
            )
            submit = bench.script("submit_operation.sql", SUBMIT_SCRIPT)
            resubmit = bench.script("resubmit_operation.sql", RESUBMIT_SCRIPT)
            no_logic = bench.script("no_logic_submit.sql", NO_LOGIC_SCRIPT)
            variables = {"hash": bench.hash, "payload": bench.payload_text, "stored": str(stored)}

            # (name, script, database): the baseline's submit runs on its own database.
            order: list[tuple[str, Path, str]] = [
                ("single_insert", single, database),
                ("submit", submit, database),
                ("no_logic", no_logic, database),
                ("resubmit", resubmit, database),
            ]
            if baseline is not None:
                order.insert(2, ("submit_baseline", submit, baseline))
            tps: dict[str, list[float]] = {name: [] for name, _, _ in order}
            wal_per_commit: dict[str, list[float]] = {name: [] for name, _, _ in order}
            waits: dict[str, collections.Counter[str]] = {name: collections.Counter() for name, _, _ in order}
            for round_ in range(rounds):
                for name, script, target in order if round_ % 2 == 0 else list(reversed(order)):
                    bench.execute("CHECKPOINT")
                    console.print(f"round {round_ + 1}/{rounds}: {name} ({args.clients} clients, {seconds} s)")
                    rate, wal_bytes, backends = bench.pgbench(script, args.clients, seconds, variables, target)
                    waits[name].update({event: n / rounds for event, n in backends.items()})
                    tps[name].append(rate)
                    wal_per_commit[name].append(wal_bytes)

            # Each drain on a fresh database (the pgbench rounds left their operations
            # behind), against the same calls made directly on another fresh one.
            drains: dict[str, list[tuple[float, float]]] = {"drain x2": [], "direct x2": [], "drain x1": []}
            for round_ in range(drain_rounds):
                for label in drains if round_ % 2 == 0 else list(reversed(drains)):
                    workers = int(label[-1])
                    console.print(f"round {round_ + 1}/{drain_rounds}: {label}, {backlog} add_node and reinforce")
                    fresh = testing.create_database(server, prefix="prme_ledger_drain")
                    testing.install_schema(server.dsn_for(fresh))
                    fresh_bench = Bench(cluster, fresh, Path(tmp))
                    fresh_bench.prepare_drain(backlog, f"r{round_}")
                    run = fresh_bench.direct if label.startswith("direct") else fresh_bench.drain
                    drains[label].append(run(workers, backlog))
                    testing.drop_database(server, fresh)
    finally:
        cluster.destroy()

    mean = {name: statistics.median(values) for name, values in tps.items()}
    wal = {name: f"{statistics.median(values):,.0f}" for name, values in wal_per_commit.items()}
    drain_rate = {label: statistics.median(rate for rate, _ in runs) for label, runs in drains.items()}
    ratio = mean["submit"] / mean["single_insert"]
    table = Table(
        title=f"prme-pg operations ledger: pgbench -M prepared, {args.clients} clients, synchronous_commit on, "
        f"median of {rounds} x {seconds} s rounds; {os.cpu_count()} CPUs"
    )
    table.add_column("workload")
    table.add_column("what", overflow="fold")
    table.add_column("per second", justify="right")
    table.add_column("vs single INSERT", justify="right")
    table.add_column("target", justify="right")
    table.add_column("WAL B/commit", justify="right")
    table.add_row(
        "single_insert",
        "one single-row INSERT per commit (the floor)",
        f"{mean['single_insert']:,.0f}",
        "1.00x",
        "",
        wal["single_insert"],
    )
    table.add_row(
        "submit",
        "prme.submit_operation, new id: hash check, one row (its accepted event inside), throttled NOTIFY",
        f"{mean['submit']:,.0f}",
        f"{ratio:.2f}x",
        f">= {TARGET:.1f}x {'ok' if ratio >= TARGET else 'MISSED'}",
        wal["submit"],
    )
    if "submit_baseline" in mean:
        table.add_row(
            "submit_baseline",
            f"the same submit on the schema of migration {args.baseline:04d}, same cluster, same rounds",
            f"{mean['submit_baseline']:,.0f}",
            f"{mean['submit_baseline'] / mean['single_insert']:.2f}x",
            f"submit = {mean['submit'] / mean['submit_baseline']:.2f}x of it",
            wal["submit_baseline"],
        )
    table.add_row(
        "no_logic",
        "the same row in one statement, no checks: the limit for this data",
        f"{mean['no_logic']:,.0f}",
        f"{mean['no_logic'] / mean['single_insert']:.2f}x",
        f"submit = {mean['submit'] / mean['no_logic']:.2f}x of it",
        wal["no_logic"],
    )
    resubmit_ratio = mean["resubmit"] / mean["single_insert"]
    table.add_row(
        "resubmit",
        "prme.submit_operation, stored id: the receipt, nothing written",
        f"{mean['resubmit']:,.0f}",
        f"{resubmit_ratio:.2f}x",
        f">= {RESUBMIT_TARGET:.1f}x {'ok' if resubmit_ratio >= RESUBMIT_TARGET else 'MISSED'}",
        wal["resubmit"],
    )
    drain_ratio = drain_rate["drain x2"] / drain_rate["direct x2"]
    table.add_row(
        "direct x2",
        f"the drain's calls made directly: 2 threads, 100 per transaction ({backlog} add_node and reinforce)",
        f"{drain_rate['direct x2']:,.0f}",
        "",
        "",
        "",
    )
    for label, what in (("drain x2", "2 executors"), ("drain x1", "1 executor, for context")):
        table.add_row(
            label,
            f"the same operations committed by {what}, batches of 100",
            f"{drain_rate[label]:,.0f}",
            "",
            f">= {TARGET:.1f}x direct: {drain_ratio:.2f}x {'ok' if drain_ratio >= TARGET else 'MISSED'}"
            if label == "drain x2"
            else "",
            "",
        )
    console.print(table)

    wait_table = Table(
        title=f"where the {args.clients} clients' backends are: average number in each state, sampled every 5 ms"
    )
    wait_table.add_column("workload")
    wait_table.add_column("backends by wait event (CPU: running; client: waiting for pgbench)", overflow="fold")
    for name, events in waits.items():
        wait_table.add_row(name, ", ".join(f"{event} {n:.2f}" for event, n in events.most_common(5)))
    console.print(wait_table)

    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS_DIR / f"ledger-{stamp}.json"
    out.write_text(
        json.dumps(
            {
                "clients": args.clients,
                "seconds": seconds,
                "rounds": rounds,
                "tps": tps,
                "wal_bytes_per_commit": wal_per_commit,
                "backends_by_wait_event": waits,
                "submit_vs_single_insert": ratio,
                "submit_vs_no_logic": mean["submit"] / mean["no_logic"],
                "baseline_migration": args.baseline or None,
                "submit_vs_baseline": mean["submit"] / mean["submit_baseline"] if "submit_baseline" in mean else None,
                "drain": {
                    label: {"ops_per_s": [r for r, _ in runs], "backlog": backlog} for label, runs in drains.items()
                },
                "drain_vs_direct": drain_ratio,
                "cpus": os.cpu_count(),
            },
            indent=2,
        )
        + "\n"
    )
    console.print(f"results written to {out.relative_to(BENCH_DIR.parent)}")
    met = ratio >= TARGET and resubmit_ratio >= RESUBMIT_TARGET and drain_ratio >= TARGET
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
