"""The test harness finds the PostgreSQL it is told to (issue 20, item 3): PG_MAJOR names the binaries."""

from __future__ import annotations

from pathlib import Path

import pytest

from prme_pg import testing


def test_pg_major_names_the_binaries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PG_BINDIR", raising=False)
    installed = sorted(p.parent.parent.name for p in Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    assert installed, "the machine running the tests has a PostgreSQL (scripts/install-system-deps)"
    monkeypatch.setenv("PG_MAJOR", installed[0])
    assert testing.find_pg_bindir() == Path("/usr/lib/postgresql") / installed[0] / "bin"


def test_a_pg_major_that_is_not_installed_is_not_replaced_by_another(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PG_BINDIR", raising=False)
    monkeypatch.delenv("PRME_TEST_DSN", raising=False)
    monkeypatch.setenv("PG_MAJOR", "99")
    assert testing.find_pg_bindir() is None
    monkeypatch.setattr(testing, "_docker_answers", lambda: False)  # this machine's Docker, not the database
    with pytest.raises(testing.NoPostgresError) as raised:
        testing.resolve_server()
    message = str(raised.value)
    assert "PG_MAJOR=99" in message and "postgresql-99-pgtap" in message and "apt repository" in message


def test_without_pg_major_the_default_is_15(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PG_MAJOR", raising=False)
    assert testing.pg_major() == "15"
    assert "postgresql-15-plpgsql-check" in testing.install_hint()
