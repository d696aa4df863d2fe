"""Prometheus metrics of ``prme-pg serve`` and ``prme-pg sync`` (prometheus-client).

:class:`ServiceMetrics` holds the HTTP API's metrics in a registry of its own (one per
app, never the process-wide default): requests by route template and status, latency
histograms, the connection pool (in use, idle, waiting) and the ledger's backlog, read
with ``prme.ledger_status()`` at scrape time — counts and an age across every owner,
never an owner name. The ASGI side (middleware and the ``/metrics`` route) is in
``prme_pg.http``. :func:`queue_registry` describes a memory pack's outbox and learning
queue for ``prme-pg sync --metrics-textfile`` (the node_exporter textfile collector).
See docs/HTTP.md ("Metrics") and docs/OUTBOX.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, write_to_textfile
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .aio import AsyncMemoryClient
from .backends.postgres import AsyncPostgresBackend
from .errors import PrmeError
from .learning import queue_status
from .models import LedgerStatus

__all__ = ["ServiceMetrics", "TextfileWriter", "queue_registry"]

#: Latency buckets in seconds: most calls are one SQL function (a millisecond or two);
#: the event streams run for up to max_seconds and land in the top buckets.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

#: How long a scrape waits for the ledger's counts before reporting prme_ledger_up 0.
LEDGER_TIMEOUT = 5.0


class _PoolCollector(Collector):
    """The psycopg pool's state at collect time (get_stats reads counters, no I/O)."""

    def __init__(self, backend: AsyncPostgresBackend) -> None:
        self.backend = backend

    def collect(self) -> Iterable[Metric]:
        stats = self.backend.pool.get_stats()
        size, available = stats.get("pool_size", 0), stats.get("pool_available", 0)
        connections = GaugeMetricFamily(
            "prme_pool_connections", "Database connections of the pool, by state", labels=["state"]
        )
        connections.add_metric(["in_use"], size - available)
        connections.add_metric(["idle"], available)
        yield connections
        yield GaugeMetricFamily("prme_pool_max_connections", "The pool's maximum size", value=stats.get("pool_max", 0))
        yield GaugeMetricFamily(
            "prme_pool_requests_waiting", "Requests waiting for a connection", value=stats.get("requests_waiting", 0)
        )


class _LedgerCollector(Collector):
    """The last ledger status read by :meth:`ServiceMetrics.refresh` (cluster-wide counts, no owners)."""

    def __init__(self) -> None:
        self.status: LedgerStatus | None = None

    def collect(self) -> Iterable[Metric]:
        status = self.status
        yield GaugeMetricFamily(
            "prme_ledger_up", "1 if this scrape could read the ledger's backlog", value=int(status is not None)
        )
        if status is None:
            return
        operations = GaugeMetricFamily(
            "prme_ledger_operations", "Operations not yet finished, every owner together, by state", labels=["state"]
        )
        for state in ("ready", "blocked", "processing"):
            operations.add_metric([state], getattr(status, state))
        yield operations
        age = status.oldest_ready_age.total_seconds() if status.oldest_ready_age is not None else 0.0
        yield GaugeMetricFamily(
            "prme_ledger_oldest_ready_age_seconds", "Age of the oldest ready operation (0: none is ready)", value=age
        )
        yield GaugeMetricFamily(
            "prme_ledger_accepting", "1 if the database accepts submits (not a standby)", value=int(status.accepting)
        )


class ServiceMetrics:
    """The HTTP API's metrics over one client (its pool and the ledger it serves)."""

    def __init__(self, client: AsyncMemoryClient) -> None:
        self.client = client
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "prme_http_requests",
            "HTTP requests answered, by method, route template and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "prme_http_request_duration_seconds",
            "Time to answer an HTTP request (to the end of its body), by method and route template",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge("prme_http_requests_in_flight", "HTTP requests being answered", registry=self.registry)
        self._ledger = _LedgerCollector()
        self.registry.register(self._ledger)
        if isinstance(client.backend, AsyncPostgresBackend):
            self.registry.register(_PoolCollector(client.backend))

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    async def refresh(self) -> None:
        """Read the ledger's backlog for this scrape; on failure the scrape reports prme_ledger_up 0."""
        try:
            self._ledger.status = await asyncio.wait_for(self.client.ledger_status(), LEDGER_TIMEOUT)
        except (psycopg.Error, PrmeError, TimeoutError):
            self._ledger.status = None

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition the scraper asked for (OpenMetrics when Accept names it), and its content type."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


class _QueueCollector(Collector):
    """A pack's queues at collect time: records and the oldest record's age per queue and state."""

    def __init__(self, pack: str | os.PathLike[str]) -> None:
        self.pack = pack

    def collect(self) -> Iterable[Metric]:
        status = queue_status(self.pack)
        now = datetime.now(UTC)
        records = GaugeMetricFamily(
            "prme_queue_records", "Records in a memory pack's queue, by queue and state", labels=["queue", "state"]
        )
        ages = GaugeMetricFamily(
            "prme_queue_oldest_record_age_seconds",
            "Age of the oldest record (last written) by queue and state (0: none)",
            labels=["queue", "state"],
        )
        for queue, states in status.items():
            for state, (count, oldest) in states.items():
                records.add_metric([queue, state], count)
                ages.add_metric([queue, state], max(0.0, (now - oldest).total_seconds()) if oldest else 0.0)
        yield records
        yield ages


def queue_registry(pack: str | os.PathLike[str]) -> CollectorRegistry:
    """A registry that describes the pack's outbox and learning queue when collected."""
    registry = CollectorRegistry()
    registry.register(_QueueCollector(pack))
    return registry


class TextfileWriter:
    """Writes a registry to a textfile every ``interval`` seconds in a thread, and once more on stop.

    ``write_to_textfile`` writes a temporary file and renames it, so a collector never
    reads half a file.
    """

    def __init__(self, path: str | os.PathLike[str], registry: CollectorRegistry, *, interval: float = 15.0) -> None:
        self.path = Path(path)
        self.registry = registry
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prme-metrics-textfile", daemon=True)

    def write(self) -> None:
        write_to_textfile(str(self.path), self.registry)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(OSError, PrmeError):  # a full disk or a moved pack must not stop sync
                self.write()

    @contextlib.contextmanager
    def running(self) -> Iterator[TextfileWriter]:
        """Write every interval while the block runs, and once more at its end."""
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(self.interval + 5)
            self.write()
