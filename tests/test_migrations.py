"""The migration runner, the CLI around it, and the sql/ == migrations/ rule."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from prme_pg import cli, migrations, testing
from prme_pg.errors import MigrationError

from .catalog import snapshot
from .conftest import ROOT


@pytest.fixture
def empty_dsn(pg_server: testing.Server) -> Iterator[str]:
    """A new, empty UTF8 database (no template, no schema)."""
    name = testing.create_database(pg_server, prefix="prme_empty")
    yield pg_server.dsn_for(name)
    testing.drop_database(pg_server, name)


def _has_schema(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT to_regnamespace('prme') IS NOT NULL").fetchone()
        return bool(row and row[0])


def _psql() -> str:
    bindir = testing.find_pg_bindir()
    candidate = bindir / "psql" if bindir else None
    found = str(candidate) if candidate and candidate.exists() else shutil.which("psql")
    assert found, "psql is needed: apt-get install postgresql-client-15"
    return found


def test_every_migration_file_is_sealed_and_numbered() -> None:
    loaded = migrations.load_migrations()
    assert [m.version for m in loaded] == list(range(1, len(loaded) + 1))
    assert all(m.sql.rstrip().endswith(f"'{m.sha256}');") for m in loaded)


def test_migrate_applies_once_and_status_reports_it(empty_dsn: str) -> None:
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        before = migrations.status(conn)
        assert before and not any(s.applied for s in before)
        applied = migrations.migrate(conn)
        assert [m.version for m in applied] == [s.version for s in before]
        assert migrations.migrate(conn) == []
        assert all(s.applied for s in migrations.status(conn))
        rows = conn.execute("SELECT version, name, sha256 FROM prme.schema_migrations ORDER BY 1").fetchall()
    assert rows == [(m.version, m.name, m.sha256) for m in migrations.load_migrations()]


def test_psql_applied_migrations_are_recognised(empty_dsn: str) -> None:
    for migration in migrations.load_migrations():
        subprocess.run(
            [
                _psql(),
                "-X",
                "-q",
                "-1",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                empty_dsn,
                "-f",
                str(migration.path),
            ],
            check=True,
            capture_output=True,
        )
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert all(s.applied for s in migrations.status(conn))
        assert migrations.migrate(conn) == []


def test_concurrent_runners_apply_each_migration_once(empty_dsn: str) -> None:
    results: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        try:
            with psycopg.connect(empty_dsn, autocommit=True) as conn:
                barrier.wait()
                results.append(len(migrations.migrate(conn)))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert sorted(results) == [0, 0, 0, len(migrations.load_migrations())]


def test_drift_is_refused_naming_the_file(empty_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        migrations.migrate(conn)
        conn.execute("UPDATE prme.schema_migrations SET sha256 = repeat('0', 64) WHERE version = 1")
        with pytest.raises(MigrationError, match=r"drift: 0001_initial\.sql"):
            migrations.migrate(conn)
    assert cli.main(["status", "--dsn", empty_dsn]) == 1
    assert "0001_initial.sql" in capsys.readouterr().err


def test_database_newer_than_code_is_refused(empty_dsn: str) -> None:
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        migrations.migrate(conn)
        conn.execute(
            "INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (999, 'future', repeat('a', 64))"
        )
        with pytest.raises(MigrationError, match="0999_future"):
            migrations.status(conn)


def test_edited_file_is_refused(tmp_path: Path) -> None:
    source = migrations.load_migrations()[0]
    copy = tmp_path / source.filename
    copy.write_text(source.sql.replace("CREATE TABLE prme.nodes", "CREATE TABLE prme.nodes /* edited */", 1))
    with pytest.raises(MigrationError, match="edited after it was sealed"):
        migrations.load_migrations(tmp_path)


def test_seal_and_failed_migration_rolls_back(tmp_path: Path, empty_dsn: str) -> None:
    shutil.copy(migrations.load_migrations()[0].path, tmp_path)
    broken = tmp_path / "0002_broken.sql"
    broken.write_text("SET LOCAL ROLE prme_owner;\nCREATE TABLE prme.half_done (user_id text);\nSELECT 1/0;\n")
    sealed = migrations.seal(broken)
    assert sealed.version == 2 and sealed.name == "broken"
    with pytest.raises(MigrationError, match="already sealed"):
        migrations.seal(broken)
    loaded = migrations.load_migrations(tmp_path)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        with pytest.raises(MigrationError, match=r"0002_broken\.sql failed and was rolled back"):
            migrations.migrate(conn, loaded)
        versions = conn.execute("SELECT array_agg(version) FROM prme.schema_migrations").fetchone()
        half = conn.execute("SELECT to_regclass('prme.half_done')").fetchone()
    assert versions == ([1],)
    assert half == (None,)


def test_gaps_in_versions_are_refused(tmp_path: Path) -> None:
    shutil.copy(migrations.load_migrations()[0].path, tmp_path)
    gap = tmp_path / "0003_gap.sql"
    gap.write_text("SELECT 1;\n")
    migrations.seal(gap)
    with pytest.raises(MigrationError, match="without gaps"):
        migrations.load_migrations(tmp_path)


def test_cli_migrate_sql_prints_pending_and_changes_nothing(empty_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["migrate", "--dsn", empty_dsn, "--sql"]) == 0
    out = capsys.readouterr().out
    assert "-- 0001_initial.sql" in out and "CREATE FUNCTION prme.reinforce(" in out
    assert not _has_schema(empty_dsn)


def test_cli_migrate_status_and_json(empty_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["migrate", "--dsn", empty_dsn]) == 0
    assert "applying 0001_initial.sql" in capsys.readouterr().out
    assert cli.main(["status", "--dsn", empty_dsn, "--json"]) == 0
    assert '"current": true' in capsys.readouterr().out
    assert cli.main(["migrate", "--dsn", empty_dsn, "--sql"]) == 0
    assert capsys.readouterr().out == "-- nothing to apply\n"


def test_cli_usage_errors_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("PRME_DSN", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert cli.main(["status"]) == 2
    assert "--dsn" in capsys.readouterr().err
    assert cli.main(["no-such-command"]) == 2
    assert cli.main([]) == 2


def test_cli_unreachable_database_exits_1(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # rich wraps at the terminal's width: count printed lines
    assert cli.main(["status", "--dsn", "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"]) == 1
    err = capsys.readouterr().err
    assert "cannot connect to the database" in err and len(err.strip().splitlines()) == 1  # one line (issue 17)


def test_migrations_and_sql_directory_build_the_same_catalog(pg_server: testing.Server, empty_dsn: str) -> None:
    """sql/postgres/ (the readable definition) and migrations/ (the upgrade path) agree."""
    testing.install_schema(empty_dsn)
    other = testing.create_database(pg_server, prefix="prme_sqldir")
    try:
        with psycopg.connect(pg_server.dsn_for(other)) as conn:
            for path in sorted((ROOT / "sql" / "postgres").glob("*.sql")):
                conn.execute(path.read_bytes())
            conn.commit()
            from_sql = snapshot(conn)
        with psycopg.connect(empty_dsn) as conn:
            from_migrations = snapshot(conn)
    finally:
        testing.drop_database(pg_server, other)
    for part in from_sql:
        assert from_migrations[part] == from_sql[part], f"catalog part {part!r} differs"
    assert from_sql["functions"], "snapshot must not be empty"
