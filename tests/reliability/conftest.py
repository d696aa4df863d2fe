"""Fixtures of the reliability suite, and the figures it reports.

Each test records what it exercised (requests acknowledged, crashes survived, inputs
tried, records verified) with the ``figures`` fixture. The totals are printed at the
end of the run and, when PRME_RELIABILITY_FIGURES names a file, written there as JSON
(docs/RELIABILITY.md's table comes from that file).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from prme_pg import testing

sys.path.insert(0, str(Path(__file__).resolve().parent))

FIGURES: dict[str, dict[str, int]] = {}

Recorder = Callable[..., None]


@pytest.fixture(scope="session")
def figures() -> Recorder:
    """figures(area, name=count, ...): add counts to the run's figures for an area."""

    def record(area: str, **counts: int) -> None:
        bucket = FIGURES.setdefault(area, {})
        for name, value in counts.items():
            bucket[name] = bucket.get(name, 0) + int(value)

    return record


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FIGURES:
        return
    terminalreporter.section("prme-pg reliability figures")
    for area in sorted(FIGURES):
        counts = ", ".join(f"{name}={value}" for name, value in FIGURES[area].items())
        terminalreporter.write_line(f"{area}: {counts}")
    if target := os.environ.get("PRME_RELIABILITY_FIGURES"):
        Path(target).write_text(json.dumps(FIGURES, indent=2, sort_keys=True) + "\n")


@pytest.fixture(scope="module")
def module_db(pg_server: testing.Server, template_db: str) -> Iterator[str]:
    """DSN of a clone of the template shared by one module (its tests roll back or add only)."""
    name = testing.create_database(pg_server, template=template_db, prefix="prme_rel")
    yield pg_server.dsn_for(name)
    testing.drop_database(pg_server, name)


@pytest.fixture
def superuser(db_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        yield conn
