"""Prometheus metrics, scraped for real and parsed with prometheus-client's own parsers.

``prme-pg sync --metrics-textfile`` writes the pack's queue depths for node_exporter's
textfile collector; ``prme-pg serve --metrics-port`` serves ``/metrics`` on its own bind.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from prme_pg import cli
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
