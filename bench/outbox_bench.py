"""The local outbox (issue #9): enqueue latency from several processes, and delivery throughput.

Run from the repository root:

    .venv/bin/python bench/outbox_bench.py            # ~1-2 minutes
    .venv/bin/python bench/outbox_bench.py --quick    # ~30 seconds
    .venv/bin/python bench/outbox_bench.py --json     # one JSON document instead of the table

Enqueue: 4 processes at once each call ``Outbox.enqueue`` (a durable record: write a
file in tmp/, fsync it, rename it into pending/, fsync the folder), 10,000 calls in
all; the latency of every call is kept and p50/p99/max reported. Target: p99 < 10 ms.
Side by side, in alternating rounds on the same disk, the same 4 processes do the
least a durable file costs: (a) open, write the same bytes, fsync, close; (b) that plus
the rename and the folder fsync that make it appear atomically (what the spool adds
beyond (b) is its lock, the name check across states and the JSON/RFC 8785 work).

Delivery: a pack with a backlog of add_event records is synced to the ledger by
``OutboxSyncer.run_cycle`` (pending -> submitting -> accepted, every transition durable
in the pack, one submit transaction per batch). Side by side: the same number of
``prme.submit_operation`` calls in the same batches on a raw connection, with no
outbox (the ledger alone). The server is a throwaway cluster with fsync and
synchronous_commit on. Quote the ratios: this machine is shared.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from prme_pg import testing
from prme_pg.backends import SubmitOperation
from prme_pg.outbox import Outbox, OutboxSyncer, canonical_payload, run_request

USER = "bench"
PROCESSES = 4


def _payload(i: int) -> dict[str, Any]:
    return {"content": f"the user prefers option {i} when the build is slow", "scope": "personal"}


# -- enqueue latency -----------------------------------------------------------------


def _enqueue_worker(kind: str, root: str, count: int, start: Any, out: Any) -> None:
    folder = Path(root)
    outbox = Outbox(folder) if kind == "enqueue" else None
    data = json.dumps({"payload": _payload(0), "padding": "x" * 300}).encode()
    (folder / "plain").mkdir(parents=True, exist_ok=True)
    latencies = []
    start.wait()
    for i in range(count):
        t0 = time.perf_counter_ns()
        if outbox is not None:
            outbox.enqueue("add_node", _payload(i), user_id=USER)
        else:
            name = f"{os.getpid()}-{i}"
            path = folder / "plain" / f"{name}.tmp"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, data)
            os.fsync(fd)
            os.close(fd)
            if kind == "file+rename":
                os.rename(path, folder / "plain" / f"{name}.json")
                dfd = os.open(folder / "plain", os.O_RDONLY | os.O_DIRECTORY)
                os.fsync(dfd)
                os.close(dfd)
        latencies.append(time.perf_counter_ns() - t0)
    out.put(latencies)


def enqueue_round(kind: str, root: Path, per_process: int) -> tuple[list[int], float]:
    """PROCESSES processes at once; returns every call's latency (ns) and the wall time."""
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_enqueue_worker, args=(kind, str(root), per_process, start, out)) for _ in range(4)]
    for p in procs:
        p.start()
    time.sleep(0.3)
    t0 = time.perf_counter()
    start.set()
    latencies = [ns for _ in procs for ns in out.get(timeout=600)]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join(60)
    return latencies, wall


def percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6


# -- delivery ------------------------------------------------------------------------


def delivery(dsn: str, root: Path, count: int, batch: int) -> dict[str, float]:
    pack = root / f"pack-{uuid.uuid4().hex[:6]}"
    outbox = Outbox(pack)
    for i in range(count):
        outbox.enqueue("add_event", _payload(i), user_id=USER)
    with OutboxSyncer(pack, dsn, batch_size=batch) as syncer:
        t0 = time.perf_counter()
        report = syncer.run_cycle()
        synced = time.perf_counter() - t0
    assert report.accepted == count, report

    requests = []
    for i in range(count):
        plain, digest = canonical_payload(_payload(i))
        requests.append(SubmitOperation(USER, uuid.uuid4(), 2, "add_event", (), digest, plain))
    with psycopg.connect(dsn, autocommit=True) as conn:
        t0 = time.perf_counter()
        for start in range(0, count, batch):
            with conn.transaction():
                for request in requests[start : start + batch]:
                    run_request(conn, request)
        raw = time.perf_counter() - t0
    shutil.rmtree(pack)
    return {"outbox_per_s": count / synced, "raw_per_s": count / raw}


# -- main ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer calls (for a smoke run)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    console = Console(stderr=args.json, width=130)
    total = 2000 if args.quick else 10_000
    rounds = 2
    per_process = total // (PROCESSES * rounds)
    kinds = ("enqueue", "file", "file+rename")
    latencies: dict[str, list[int]] = {k: [] for k in kinds}
    walls: dict[str, float] = dict.fromkeys(kinds, 0.0)

    work = Path(tempfile.mkdtemp(prefix="prme-outbox-bench-", dir=os.environ.get("BENCH_DIR")))
    try:
        for r in range(rounds):
            order = kinds if r % 2 == 0 else tuple(reversed(kinds))
            for kind in order:
                console.print(f"round {r + 1}: {kind}, {PROCESSES} x {per_process} calls")
                values, wall = enqueue_round(kind, work / f"{kind}-{r}", per_process)
                latencies[kind] += values
                walls[kind] += wall

        console.print("starting a throwaway cluster (fsync on, synchronous_commit on)...")
        cluster = testing.PostgresCluster.create({})
        try:
            server = testing.Server(cluster.dsn)
            database = testing.create_database(server, prefix="prme_outbox_bench")
            dsn = server.dsn_for(database)
            testing.install_schema(dsn)
            count = 1000 if args.quick else 5000
            deliveries = [delivery(dsn, work, count, 100) for _ in range(2)]
        finally:
            cluster.destroy()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    enqueue = {
        kind: {
            "calls": len(values),
            "p50_ms": percentile(values, 0.50),
            "p99_ms": percentile(values, 0.99),
            "max_ms": max(values) / 1e6,
            "mean_ms": statistics.fmean(values) / 1e6,
            "calls_per_s": len(values) / walls[kind],
        }
        for kind, values in latencies.items()
    }
    outbox_rate = sum(d["outbox_per_s"] for d in deliveries) / len(deliveries)
    raw_rate = sum(d["raw_per_s"] for d in deliveries) / len(deliveries)
    result = {
        "enqueue": enqueue,
        "delivery": {"records": count, "batch": 100, "outbox_per_s": outbox_rate, "raw_submit_per_s": raw_rate},
        "target_met": enqueue["enqueue"]["p99_ms"] < 10.0,
    }
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return 0
    report(result, console)
    return 0


def report(result: dict[str, Any], console: Console) -> None:
    labels: dict[str, str] = {
        "enqueue": "Outbox.enqueue",
        "file": "a: write + fsync",
        "file+rename": "b: a + rename + dir fsync",
    }
    table = Table(title=f"Enqueue latency, {PROCESSES} processes at once, one run")
    for column in ("what", "calls", "p50 ms", "p99 ms", "max ms", "calls/s", "p50 vs b", "p99 vs b"):
        table.add_column(column, justify="left" if column == "what" else "right")
    base = result["enqueue"]["file+rename"]
    for kind, row in result["enqueue"].items():
        table.add_row(
            labels[kind],
            str(row["calls"]),
            f"{row['p50_ms']:.2f}",
            f"{row['p99_ms']:.2f}",
            f"{row['max_ms']:.1f}",
            f"{row['calls_per_s']:,.0f}",
            f"{row['p50_ms'] / base['p50_ms']:.2f}x",
            f"{row['p99_ms'] / base['p99_ms']:.2f}x",
        )
    console.print(table)
    verdict = "met" if result["target_met"] else "NOT met"
    console.print(f"target p99 < 10 ms: {verdict} ({result['enqueue']['enqueue']['p99_ms']:.2f} ms)")
    d = result["delivery"]
    delivery_table = Table(title=f"Delivery of {d['records']:,} records, batches of {d['batch']}, one run")
    for column in ("what", "records/s", "vs raw"):
        delivery_table.add_column(column, justify="left" if column == "what" else "right")
    rows: list[tuple[str, float]] = [
        ("OutboxSyncer.run_cycle: pending -> accepted", d["outbox_per_s"]),
        ("raw prme.submit_operation, same batches", d["raw_submit_per_s"]),
    ]
    for label, rate in rows:
        delivery_table.add_row(label, f"{rate:,.0f}", f"{rate / d['raw_submit_per_s']:.2f}x")
    console.print(delivery_table)


if __name__ == "__main__":
    sys.exit(main())
