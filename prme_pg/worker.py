"""The operations executor as a long-running process (``prme-pg worker``).

Every rule lives in PostgreSQL: this module only calls ``prme.run_operations``
in a loop. Each call is one transaction that claims a batch (``FOR UPDATE SKIP
LOCKED``, so several workers share the queue) and applies it exactly once. The
worker

* runs batches back to back while there is work;
* otherwise waits on ``LISTEN prme_operations`` for new work (payload ``ready``:
  an operation was accepted or released). Submits notify at most once per
  ``prme.notify_interval_ms`` (50 ms by default), so after any activity the
  worker looks once more ``settle`` seconds later (the trailing edge of that
  throttle), and it polls every ``poll_interval`` seconds in any case (retries
  whose backoff expired, transactions that committed after a look);
* stops gracefully: ``stop.set()``, SIGTERM or SIGINT let the current batch finish
  (it is one transaction: it commits or rolls back whole), then return;
* reconnects after a lost connection (a batch in flight rolls back and is
  claimed again), except on the first connection, where an error is raised.

Given an embedder, the worker embeds the parts of long memories before the executor
validates them (:mod:`prme_pg.long_memories`): before each call it stores the vectors of up
to ``max_parts`` pending parts, and its session tells the executor to wait for them, so a
long memory is created with the pooled vector of its parts.

pg_cron can call ``SELECT * FROM prme.run_operations(100, 'pg_cron')`` instead.

Behind a PL/Proxy tier (docs/SCALING.md) each shard has its own ledger and its own
notifications, which the proxy never hears: :func:`run_shard_workers` runs one
executor per shard, each connected to (and listening on) its shard, and keeps the
others working while one shard is down.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import psycopg

from .embeddings import Embedder
from .long_memories import embed_pending_parts, use_part_embeddings

__all__ = [
    "CHANNEL",
    "BatchResult",
    "WorkerStats",
    "default_worker_name",
    "main",
    "run_batch",
    "run_shard_workers",
    "run_worker",
    "stop_on_signals",
]

log = logging.getLogger("prme_pg.worker")

#: The channel prme's ledger notifies: payload ``ready`` (claimable work) or ``events``.
CHANNEL = "prme_operations"

LISTEN_SQL = "LISTEN prme_operations"
RUN_OPERATIONS_SQL = (
    "SELECT outcome FROM prme.run_operations(max_count => %(batch)s, worker => %(worker)s, max_parts => %(max_parts)s)"
)

_OUTCOMES = ("committed", "rejected", "blocked", "retry", "progress", "skipped")


@dataclass(frozen=True)
class BatchResult:
    """What one ``prme.run_operations`` call did, by outcome."""

    claimed: int = 0
    committed: int = 0
    rejected: int = 0
    blocked: int = 0
    retry: int = 0
    progress: int = 0
    skipped: int = 0

    @classmethod
    def from_outcomes(cls, outcomes: Sequence[str]) -> BatchResult:
        counts = dict.fromkeys(_OUTCOMES, 0)
        for outcome in outcomes:
            if outcome in counts:
                counts[outcome] += 1
        return cls(claimed=len(outcomes), **counts)

    @property
    def finished(self) -> int:
        """Operations that reached a terminal state (committed or rejected) in this batch."""
        return self.committed + self.rejected

    @property
    def moved(self) -> bool:
        """True when the batch changed something (anything but skipped operations)."""
        return self.claimed > self.skipped


@dataclass
class WorkerStats:
    """Running totals of a worker, passed to ``on_progress`` after every batch."""

    batches: int = 0
    committed: int = 0
    rejected: int = 0
    blocked: int = 0
    retry: int = 0
    progress: int = 0
    skipped: int = 0
    reconnects: int = 0
    started_at: float = field(default_factory=time.monotonic)
    last: BatchResult = field(default_factory=BatchResult)

    def add(self, batch: BatchResult) -> None:
        self.batches += 1
        self.committed += batch.committed
        self.rejected += batch.rejected
        self.blocked += batch.blocked
        self.retry += batch.retry
        self.progress += batch.progress
        self.skipped += batch.skipped
        self.last = batch

    @property
    def finished(self) -> int:
        return self.committed + self.rejected


def default_worker_name() -> str:
    """``host:pid``: what receipts show as the worker of an operation."""
    return f"{socket.gethostname()}:{os.getpid()}"


def run_batch(
    conn: psycopg.Connection[Any], *, batch: int = 100, worker: str | None = None, max_parts: int = 64
) -> BatchResult:
    """One call of ``prme.run_operations`` on an autocommit connection."""
    params = {"batch": batch, "worker": worker or default_worker_name(), "max_parts": max_parts}
    rows = conn.execute(RUN_OPERATIONS_SQL, params).fetchall()
    return BatchResult.from_outcomes([str(row[0]) for row in rows])


#: Seconds a (re)connection may take: a server that does not answer is "lost", not waited for.
CONNECT_TIMEOUT = 5


def _connect(dsn: str, embedder: Embedder | None = None) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True, application_name="prme-pg worker", connect_timeout=CONNECT_TIMEOUT)
    conn.execute(LISTEN_SQL)
    if embedder is not None:
        use_part_embeddings(conn, embedder)
    return conn


def _wait_for_work(conn: psycopg.Connection[Any], stop: threading.Event, timeout: float) -> bool:
    """Wait up to timeout seconds for a ``ready`` notification; True if one came."""
    deadline = time.monotonic() + timeout
    while not stop.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        # Short slices, so that stop is noticed promptly.
        for notify in conn.notifies(timeout=min(remaining, 0.25)):
            if notify.channel == CHANNEL and notify.payload == "ready":
                return True
    return False


def _drain_backlog(conn: psycopg.Connection[Any]) -> bool:
    """Consume notifications that arrived during the last batch; True if one announced work."""
    ready = False
    for notify in conn.notifies(timeout=0):
        ready = ready or (notify.channel == CHANNEL and notify.payload == "ready")
    return ready


@contextmanager
def stop_on_signals(stop: threading.Event, install: bool, unit: str = "batch") -> Iterator[None]:
    """SIGTERM and SIGINT set ``stop`` while the block runs (main thread only), so a worker
    ends between units of work; the previous handlers come back afterwards."""
    if not install or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        log.info("signal %s: stopping after the current %s", signal.Signals(signum).name, unit)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_worker(
    dsn: str,
    *,
    worker: str | None = None,
    batch: int = 100,
    max_parts: int = 64,
    poll_interval: float = 1.0,
    settle: float = 0.1,
    stop: threading.Event | None = None,
    on_progress: Callable[[WorkerStats], None] | None = None,
    until_idle: bool = False,
    install_signal_handlers: bool = True,
    reconnect_delay: float = 1.0,
    after_commit: Callable[[], object] | None = None,
    embedder: Embedder | None = None,
) -> int:
    """Run the executor until stopped; return how many operations it finished.

    ``worker`` names this process in receipts (default ``host:pid``); ``batch`` is
    ``max_count`` of each ``prme.run_operations`` call and ``max_parts`` the parts
    of long memories validated per call. When idle it waits for a notification,
    ``settle`` seconds after activity and ``poll_interval`` seconds otherwise.
    ``until_idle`` returns as soon as a batch finds nothing to do (for scripts and
    tests). ``on_progress`` is called with the running totals after every batch
    that claimed something. ``stop`` (or SIGTERM/SIGINT, when
    ``install_signal_handlers`` and on the main thread) ends the loop after the
    current batch. ``after_commit`` runs once at the start and after every batch that
    committed something (``prme-pg worker`` embeds the memories it wrote with it).
    ``embedder`` embeds the parts of long memories before they are validated (up to
    ``max_parts`` before each call), so that each is created with its parts' pooled vector.
    """
    if batch < 1 or batch > 1000:
        raise ValueError("batch must be between 1 and 1000")
    stop = stop or threading.Event()
    name = worker or default_worker_name()
    stats = WorkerStats()
    active = True  # the next idle wait is the short one
    with stop_on_signals(stop, install_signal_handlers):
        conn: psycopg.Connection[Any] | None = _connect(dsn, embedder)
        if after_commit is not None:
            after_commit()
        try:
            while not stop.is_set():
                try:
                    if conn is None:
                        conn = _connect(dsn, embedder)
                        stats.reconnects += 1
                        log.info("reconnected")
                    if embedder is not None:
                        # Each batch of part vectors is stored before the executor looks: a
                        # restart embeds only the parts still pending.
                        embed_pending_parts(conn, embedder, max_parts=max_parts, stop=stop)
                    result = run_batch(conn, batch=batch, worker=name, max_parts=max_parts)
                except psycopg.OperationalError as exc:
                    # The server went away or ended this backend: whatever the batch
                    # did rolled back and will be claimed again.
                    log.warning("connection lost (%s); reconnecting in %.1fs", exc, reconnect_delay)
                    if conn is not None:
                        conn.close()
                    conn = None
                    stop.wait(reconnect_delay)
                    continue
                if result.claimed:
                    stats.add(result)
                    if on_progress is not None:
                        on_progress(stats)
                if result.moved and after_commit is not None:
                    after_commit()
                if (result.claimed >= batch and result.moved) or result.progress:
                    continue  # more is waiting, or a long memory has parts left
                if until_idle and not result.moved:
                    break
                if not result.moved and result.claimed:
                    # Only contention: give the other executor a moment.
                    stop.wait(0.05)
                    continue
                timeout = min(settle, poll_interval) if (active or result.moved) else poll_interval
                try:
                    # Work announced while the batch ran is not waited for.
                    active = _drain_backlog(conn) or _wait_for_work(conn, stop, timeout)
                except psycopg.OperationalError:
                    conn.close()
                    conn = None
        finally:
            if conn is not None:
                conn.close()
    return stats.finished


def run_shard_workers(
    dsns: Sequence[str],
    *,
    stop: threading.Event | None = None,
    until_idle: bool = False,
    install_signal_handlers: bool = True,
    reconnect_delay: float = 1.0,
    per_shard: Mapping[str, Mapping[str, Any]] | None = None,
    **options: Any,
) -> int:
    """One executor per shard, each in its own thread; return how many operations they finished.

    Each thread runs :func:`run_worker` on its shard (``options`` are its keyword
    arguments, and ``per_shard[dsn]`` those of that shard alone, such as its
    ``after_commit``). A shard that does not accept a connection is retried every
    ``reconnect_delay`` seconds while the others work; with ``until_idle`` it is
    skipped instead (logged), so a script over a partly down cluster still ends.
    """
    if not dsns:
        raise ValueError("at least one shard DSN is needed")
    stop = stop or threading.Event()
    finished: list[int] = []
    lock = threading.Lock()

    def work(dsn: str) -> None:
        while not stop.is_set():
            try:
                done = run_worker(
                    dsn,
                    stop=stop,
                    until_idle=until_idle,
                    install_signal_handlers=False,
                    reconnect_delay=reconnect_delay,
                    **{**options, **(per_shard or {}).get(dsn, {})},
                )
            except psycopg.OperationalError as exc:
                log.warning("shard %s does not answer (%s)", _safe_dsn(dsn), str(exc).strip().splitlines()[0])
                if until_idle:
                    return
                stop.wait(reconnect_delay)
                continue
            with lock:
                finished.append(done)
            return

    threads = [threading.Thread(target=work, args=(dsn,), name=f"prme-worker-{n}") for n, dsn in enumerate(dsns)]
    with stop_on_signals(stop, install_signal_handlers):
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.25)  # short joins: the main thread keeps handling signals
    return sum(finished)


def _safe_dsn(dsn: str) -> str:
    """A DSN for a log line: without its password."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(unparsable DSN)"
    params.pop("password", None)
    return psycopg.conninfo.make_conninfo(**params)  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m prme_pg.worker --dsn URL``: run the executor until SIGTERM."""
    parser = argparse.ArgumentParser(prog="prme-pg worker", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", default=os.environ.get("PRME_DSN") or os.environ.get("DATABASE_URL"))
    parser.add_argument("--worker", default=None, help="name shown in receipts (default host:pid)")
    parser.add_argument("--batch", type=int, default=100, help="operations per transaction (1..1000)")
    parser.add_argument("--max-parts", type=int, default=64, help="long-memory parts validated per transaction")
    parser.add_argument("--poll-interval", type=float, default=1.0, help="seconds between polls when idle")
    parser.add_argument("--until-idle", action="store_true", help="exit when there is nothing left to do")
    args = parser.parse_args(argv)
    if not args.dsn:
        parser.error("--dsn is required (or set PRME_DSN or DATABASE_URL)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        finished = run_worker(
            args.dsn,
            worker=args.worker,
            batch=args.batch,
            max_parts=args.max_parts,
            poll_interval=args.poll_interval,
            until_idle=args.until_idle,
        )
    except (psycopg.Error, ValueError) as exc:
        print(f"prme-pg worker: {exc}", file=sys.stderr)
        return 1
    log.info("stopped after finishing %d operations", finished)
    return 0


if __name__ == "__main__":
    sys.exit(main())
