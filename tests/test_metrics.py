"""Prometheus metrics, scraped for real and parsed with prometheus-client's own parsers.

``prme-pg sync --metrics-textfile`` writes the pack's queue depths for node_exporter's
textfile collector; ``prme-pg serve --metrics-port`` serves ``/metrics`` on its own bind.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from prme_pg import AsyncMemoryClient, MemoryClient, cli, testing
from prme_pg.metrics import ServiceMetrics
from prme_pg.outbox import Outbox


def _samples(
    text: str, parse: Any = text_string_to_metric_families
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample as {(name, sorted labels): value}."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in parse(text)
        for sample in family.samples
    }


def test_sync_writes_the_queue_depths_to_a_textfile(tmp_path: Path, db_dsn: str) -> None:
    pack = tmp_path / "memories"
    outbox = Outbox(pack)
    for i in range(3):
        outbox.enqueue("add_node", {"content": f"memory {i}"}, user_id="alice")
    textfile = tmp_path / "prme_sync.prom"
    argv = ["sync", "--once", "--pack", str(pack), "--dsn", db_dsn, "--metrics-textfile", str(textfile)]
    assert cli.main(argv) == 0
    samples = _samples(textfile.read_text())
    # No executor ran: the three were accepted by the ledger and wait for it.
    assert samples[("prme_queue_records", (("queue", "outbox"), ("state", "accepted")))] == 3
    assert samples[("prme_queue_records", (("queue", "outbox"), ("state", "pending")))] == 0
    assert samples[("prme_queue_oldest_record_age_seconds", (("queue", "outbox"), ("state", "accepted")))] > 0
    assert samples[("prme_queue_oldest_record_age_seconds", (("queue", "outbox"), ("state", "pending")))] == 0
    assert {labels for name, labels in samples if name == "prme_queue_records" and ("queue", "learning") in labels}
    assert not list(tmp_path.glob("*.tmp*")), "written through a temporary file and a rename"


def test_sync_refuses_an_unwritable_textfile(tmp_path: Path, db_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / str(uuid.uuid4()) / "prme.prom"
    argv = ["sync", "--once", "--pack", str(tmp_path), "--dsn", db_dsn, "--metrics-textfile", str(missing)]
    assert cli.main(argv) == 2
    assert "--metrics-textfile: cannot write" in " ".join(capsys.readouterr().err.split())


def _listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, f"prme-pg serve exited with {process.returncode}"
        assert time.monotonic() < deadline, f"nothing listens on port {port}"
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        time.sleep(0.1)


@contextlib.contextmanager
def _serve(dsn: str) -> Iterator[tuple[str, str]]:
    """prme-pg serve with --metrics-port, in a subprocess: yields (the API's URL, the metrics URL)."""
    api, metrics = testing.free_port(), testing.free_port()
    argv = ["serve", "--dsn", dsn, "--port", str(api), "--pool-size", "3", "--metrics-port", str(metrics)]
    process = subprocess.Popen([sys.executable, "-m", "prme_pg.cli", *argv, "--log-level", "warning"])
    try:
        _listening(api, process)
        _listening(metrics, process)
        yield f"http://127.0.0.1:{api}", f"http://127.0.0.1:{metrics}/metrics"
    finally:
        process.terminate()
        process.wait(30)


def test_serve_metrics_on_their_own_bind(db_dsn: str) -> None:
    with MemoryClient(db_dsn) as memory:
        token = memory.create_api_token("alice")
        memory.submit_operation(uuid.uuid4(), "add_node", {"content": "waits for the executor"}, user_id="alice")
    with _serve(db_dsn) as (base, metrics_url):
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            assert http.get("/health").status_code == 200
            created = http.post("/v1/nodes", json={"content": "prefers tea"})
            assert created.status_code == 201
            for _ in range(2):
                assert http.get(f"/v1/nodes/{created.json()['id']}").status_code == 200
            assert http.get(f"/v1/nodes/{uuid.uuid4()}").status_code == 404
            assert http.get("/nowhere").status_code == 404
            assert http.get("/metrics").status_code == 404, "not on the API's port"
        assert httpx.get(f"{base}/api/v2/ledger").status_code == 401  # refused by the owner gate, before routing

        scrape = httpx.get(metrics_url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        assert scrape.status_code == 200
        assert scrape.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
        assert scrape.text.endswith("# EOF\n")
        samples = _samples(scrape.text, openmetrics_families)
        plain = httpx.get(metrics_url)  # no Accept: the Prometheus text format 0.0.4
        assert plain.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert {name for name, _ in _samples(plain.text)} >= {"prme_http_requests_total", "prme_ledger_up"}

    def requests(method: str, route: str, status: int) -> float:
        labels = (("method", method), ("route", route), ("status", str(status)))
        return samples.get(("prme_http_requests_total", labels), 0)

    node = "/v1/nodes/{node_id}"
    assert requests("GET", node, 200) == 2 and requests("GET", node, 404) == 1
    assert requests("POST", "/v1/nodes", 201) == 1 and requests("GET", "/health", 200) == 1
    assert requests("GET", "/api/v2/ledger", 401) == 1
    assert requests("GET", "unmatched", 404) == 2, "/nowhere and /metrics, without their paths as labels"
    assert samples[("prme_http_request_duration_seconds_count", (("method", "GET"), ("route", node)))] == 3
    assert samples[("prme_pool_max_connections", ())] == 3
    pool = [samples[("prme_pool_connections", (("state", state),))] for state in ("in_use", "idle")]
    assert sum(pool) >= 1 and pool[0] == 0, "between requests no connection is in use"
    assert samples[("prme_ledger_up", ())] == 1 and samples[("prme_ledger_accepting", ())] == 1
    assert samples[("prme_ledger_operations", (("state", "ready"),))] == 1
    assert samples[("prme_ledger_operations", (("state", "blocked"),))] == 0
    assert samples[("prme_ledger_oldest_ready_age_seconds", ())] > 0
    assert "alice" not in scrape.text, "cluster-wide counts, no owner names"


def test_a_scrape_that_cannot_read_the_ledger_says_so(db_dsn: str) -> None:
    async def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        client = AsyncMemoryClient(db_dsn)  # never opened: every call fails like a lost database
        metrics = ServiceMetrics(client)
        await metrics.refresh()
        body, content_type = metrics.render("application/openmetrics-text; version=1.0.0")
        assert content_type.startswith("application/openmetrics-text")
        return _samples(body.decode(), openmetrics_families)

    samples = asyncio.run(scrape())
    assert samples[("prme_ledger_up", ())] == 0
    assert not [name for name, _ in samples if name.startswith("prme_ledger_operations")]
    assert samples[("prme_pool_max_connections", ())] == 10
