"""What a schema change costs a write path: prme.reinforce (or a ledger submit, or an add_nodes batch) on two schemas.

Run from the repository root:

    .venv/bin/python bench/schema_cost_bench.py                      # the last migration vs the one before
    .venv/bin/python bench/schema_cost_bench.py --old 6 --new 7 --extra-sql FILE   # FILE run on top of --new
    .venv/bin/python bench/schema_cost_bench.py --workload submit --old 12 --new 12 --extra-sql FILE
    .venv/bin/python bench/schema_cost_bench.py --workload add_node_embedded   # add_node with a vector
    .venv/bin/python bench/schema_cost_bench.py --workload add_nodes --old 25 --new 26
    .venv/bin/python bench/schema_cost_bench.py --workload long_memory --old 27 --new 28

It starts a throwaway cluster (synchronous_commit off: this measures server work, not
the disk), builds four databases -- old, new, and a second copy of each as the noise
control -- loads the same memories into each, and runs bench/pgbench/reinforce_fresh.sql
(a confirmation with a fresh idempotency key on a random memory) against them in
alternating rounds. It prints the median rate of each and its ratio to the old schema;
the two copies of one schema show how far apart identical databases measure.

Used for migration 0007: three generated columns on prme.node_maintenance (which every
confirmation writes) made reinforce 0.82x as fast, so they were not shipped; and for 0008,
which keeps the same three values as plain columns set by the statements that already
write the row: 0.98x to 1.00x, inside the noise (docs/MAINTENANCE.md, "Scale"). With
--workload submit, for the ledger migration ledger_fast_submit: the CHECK constraints it
dropped, put back by --extra-sql (docs/PERFORMANCE.md). With --workload add_nodes, for
0026_set_based_add_nodes: batches of 100 new memories with vectors (pgbench/add_nodes_fresh.sql;
compare schemas from 24 on, where prme.add_nodes takes vectors). With --workload long_memory,
for 0028_long_memory_part_embeddings: a long memory submitted and executed (planned into 13
parts, validated, committed) by an executor that does not embed (pgbench/long_memory_fresh.sql).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
from pathlib import Path

import psycopg
from rich.console import Console
from rich.table import Table

from prme_pg import migrations, testing

BENCH_DIR = Path(__file__).resolve().parent
WORKLOADS = {
    "reinforce": BENCH_DIR / "pgbench" / "reinforce_fresh.sql",
    "submit": BENCH_DIR / "pgbench" / "submit_fresh.sql",
    "add_node_embedded": BENCH_DIR / "pgbench" / "add_node_embedded.sql",
    "add_nodes": BENCH_DIR / "pgbench" / "add_nodes_fresh.sql",
    "long_memory": BENCH_DIR / "pgbench" / "long_memory_fresh.sql",
}
TITLES = {
    "reinforce": "prme.reinforce, fresh keys",
    "submit": "prme.submit_operation, new ids",
    "add_node_embedded": "prme.add_node with a 256-dimension vector",
    "add_nodes": "prme.add_nodes, batches of 100 new memories (rate: batches)",
    "long_memory": "a long memory submitted and executed in 13 parts (rate: submit + executor call)",
}
NODES, OWNERS = 10_000, 100


def build(server: testing.Server, version: int, extra_sql: str) -> str:
    """A new database at migration ``version`` (+ ``extra_sql``) holding the same memories; its name."""
    name = testing.create_database(server, prefix="schema_cost")
    with psycopg.connect(server.dsn_for(name), autocommit=True) as conn:
        migrations.migrate(conn, [m for m in migrations.load_migrations() if m.version <= version])
        if extra_sql:
            conn.execute(extra_sql.encode())
        conn.execute(
            "SELECT prme.add_node(user_id => 'user_' || (i %% %s)::text, content => 'memory ' || i, "
            "node_id => md5('node:' || i)::uuid) FROM generate_series(1, %s) AS i",
            (OWNERS, NODES),
        )
        conn.execute("VACUUM ANALYZE")
    return name


def rate(cluster: testing.PostgresCluster, database: str, seconds: int, script: Path) -> float:
    output = subprocess.run(
        [
            str(cluster.bindir / "pgbench"),
            "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres",
            "-n", "-M", "prepared", "-c", "4", "-j", "2", "-T", str(seconds),
            "-D", f"nodes={NODES}", "-D", f"owners={OWNERS}", "-D", "rtt=0",
            "-f", str(script), database,
        ],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    found = re.search(r"tps = ([0-9.]+)", output)
    if found is None:
        raise RuntimeError(f"pgbench printed no rate:\n{output}")
    return float(found.group(1))


def main(argv: list[str] | None = None) -> int:
    latest = max(m.version for m in migrations.load_migrations())
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=int, default=latest - 1, help="migration version of the old schema")
    parser.add_argument("--new", type=int, default=latest, help="migration version of the new schema")
    parser.add_argument("--extra-sql", type=Path, help="SQL run on the new schema after its migrations")
    parser.add_argument("--rounds", type=int, default=6, help="measured rounds (one warm-up round is added)")
    parser.add_argument("--seconds", type=int, default=5, help="seconds per database per round")
    parser.add_argument(
        "--workload",
        choices=sorted(WORKLOADS),
        default="reinforce",
        help="reinforce: a fresh confirmation (pgbench/reinforce_fresh.sql); submit: a new ledger operation "
        "(pgbench/submit_fresh.sql; the executor's hash check is not run); add_node_embedded: a new memory "
        "with its vector (pgbench/add_node_embedded.sql); add_nodes: a batch of 100 new memories with "
        "vectors (pgbench/add_nodes_fresh.sql); long_memory: a long memory submitted and executed "
        "(pgbench/long_memory_fresh.sql)",
    )
    args = parser.parse_args(argv)
    extra = args.extra_sql.read_text() if args.extra_sql else ""
    console = Console()
    schemas = {
        "old": (args.old, ""),
        "new": (args.new, extra),
        "old, copy": (args.old, ""),
        "new, copy": (args.new, extra),
    }
    cluster = testing.PostgresCluster.create({"synchronous_commit": "off"})
    try:
        server = testing.Server(cluster.dsn)
        names: dict[str, str] = {}
        for label, (version, sql) in schemas.items():
            console.print(f"building {label} (migration {version}{' + extra SQL' if sql else ''})")
            names[label] = build(server, version, sql)
        rates: dict[str, list[float]] = {label: [] for label in schemas}
        order = list(schemas)
        for round_number in range(args.rounds + 1):
            for label in order if round_number % 2 == 0 else order[::-1]:
                measured = rate(cluster, names[label], args.seconds, WORKLOADS[args.workload])
                if round_number:  # round 0 warms the caches
                    rates[label].append(measured)
            console.print(f"round {round_number} done")
    finally:
        cluster.destroy()
    base = statistics.median(rates["old"])
    table = Table(title=f"{TITLES[args.workload]}, 4 clients: migration {args.old} vs {args.new}, one run")
    for column in ("schema", "per second (median)", "vs old"):
        table.add_column(column, justify="left" if column == "schema" else "right")
    for label, (version, sql) in schemas.items():
        median = statistics.median(rates[label])
        table.add_row(f"{label}: {version}{' + extra' if sql else ''}", f"{median:,.0f}", f"{median / base:.3f}x")
    console.print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
