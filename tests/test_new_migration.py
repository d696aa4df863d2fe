"""scripts/new-migration: a migration that replaces functions, reviewed as what changed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest

from prme_pg import migrations, testing

from .conftest import ROOT

#: The cap of reinforcement_boost in prme._reinforced_boost, whatever its indentation.
BOOST = "RETURN greatest(boost, least(boost + 0.15, 0.5));"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of what the script reads and writes: sql/, migrations/, scripts/ and the package."""
    for part in ("sql", "migrations", "scripts", "prme_pg"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


@pytest.fixture
def empty_dsn(pg_server: testing.Server) -> Iterator[str]:
    name = testing.create_database(pg_server, prefix="prme_newmig")
    yield pg_server.dsn_for(name)
    testing.drop_database(pg_server, name)


def _run(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(checkout / "scripts" / "new-migration"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_changed_line_is_reviewed_as_that_line_and_the_migration_applies(checkout: Path, empty_dsn: str) -> None:
    reinforce = checkout / "sql" / "postgres" / "110_reinforce.sql"
    lines = [line for line in reinforce.read_text().splitlines() if line.strip() == BOOST]
    assert len(lines) == 1, "the boost's cap is one line of 110_reinforce.sql"
    boost_line = lines[0]
    reinforce.write_text(reinforce.read_text().replace(boost_line, boost_line.replace("0.5))", "0.6))")))
    next_version = max(m.version for m in migrations.load_migrations(checkout / "migrations")) + 1

    run = _run(checkout, "wider_cap", "_reinforced_boost", "prme.reinforce")

    assert run.returncode == 0, run.stderr
    changed = [line for line in run.stdout.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed == [f"-{boost_line}", f"+{boost_line.replace('0.5))', '0.6))')}"]
    assert "prme.reinforce(node_id uuid, user_id text, evidence_id uuid, request_id uuid): unchanged" in run.stdout
    written = checkout / "migrations" / f"{next_version:04d}_wider_cap.sql"
    text = written.read_text()
    assert text.count("CREATE OR REPLACE FUNCTION prme._reinforced_boost(") == 1
    assert text.count("CREATE OR REPLACE FUNCTION prme.reinforce(") == 1
    assert "COMMENT ON FUNCTION prme.reinforce(uuid, text, uuid, uuid) IS" in text

    migrations.seal(written)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        applied = migrations.migrate(conn, migrations.load_migrations(checkout / "migrations"))
        assert applied[-1].version == next_version
        assert conn.execute("SELECT prme._reinforced_boost(0.5)").fetchone() == (Decimal("0.6"),)


def test_an_unknown_function_or_a_bad_name_writes_nothing(checkout: Path) -> None:
    before = sorted(p.name for p in (checkout / "migrations").iterdir())
    unknown = _run(checkout, "some_change", "reinforce", "no_such_function")
    assert unknown.returncode == 2 and "no function prme.no_such_function in sql/postgres/" in unknown.stderr
    assert _run(checkout, "Bad-Name", "reinforce").returncode == 2
    assert _run(checkout, "no_functions").returncode == 2
    assert sorted(p.name for p in (checkout / "migrations").iterdir()) == before


def test_a_function_with_out_arguments_keeps_its_comment(checkout: Path) -> None:
    # COMMENT ON FUNCTION names input types only: ledger_limits' comment is found although
    # its CREATE lists OUT max_payload_bytes and max_payload_depth.
    created = _run(checkout, "keep_comments", "ledger_limits")
    assert created.returncode == 0, created.stderr
    (migration,) = [p for p in (checkout / "migrations").iterdir() if p.name.endswith("_keep_comments.sql")]
    text = migration.read_text(encoding="utf-8")
    assert "CREATE OR REPLACE FUNCTION prme.ledger_limits(" in text
    assert "COMMENT ON FUNCTION prme.ledger_limits() IS" in text
