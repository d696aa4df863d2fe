"""The migration runner, the CLI around it, and the sql/ == migrations/ rule."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

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
    assert found, f"psql is needed: apt-get install postgresql-client-{testing.pg_major()}"
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


# -- 0011_hostile_callers: the upgrade from the release before it loses nothing ----------

FILL_BEFORE = """
SELECT prme.add_event('alice', 'alice said so', event_id => 'eeeeeeee-0000-4000-8000-000000000001');
SELECT prme.add_node('alice', 'alice prefers green tea over coffee', node_id => 'aaaaaaaa-0000-4000-8000-000000000001');
SELECT prme.add_node('alice', 'alice lives in Lyon', node_id => 'aaaaaaaa-0000-4000-8000-000000000002');
SELECT prme.add_node('bob', 'bob runs on Sundays', node_id => 'bbbbbbbb-0000-4000-8000-000000000001');
SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice', 'eeeeeeee-0000-4000-8000-000000000001',
                      'cccccccc-0000-4000-8000-000000000001');
SELECT prme.record_outcome('alice', 'aaaaaaaa-0000-4000-8000-000000000002', 'implicit_success');
SELECT prme.link_correction('alice', 'no, I prefer black tea over coffee',
                            ARRAY['aaaaaaaa-0000-4000-8000-000000000001']::uuid[]);
SELECT prme.link_correction('alice', 'actually something else', '{}');
SELECT prme.archive_node('alice', 'aaaaaaaa-0000-4000-8000-000000000002');
SELECT prme.maintenance_patch('alice');
SELECT prme.publish_snapshot('alice', 'personal');
SELECT prme.create_api_token('alice', repeat('a', 64), 'laptop');
SELECT prme.set_maintenance_setting('alice', 'low', '3 days', 0.02);
"""


@contextmanager
def filled_before(
    pg_server: testing.Server, migration: str
) -> Iterator[tuple[psycopg.Connection[Any], list[migrations.Migration], int]]:
    """A new database migrated to the release before ``migration`` and filled through its
    functions (FILL_BEFORE): the connection, every migration, and ``migration``'s version.
    The database is dropped afterwards."""
    every = migrations.load_migrations()
    target = next(m.version for m in every if m.name == migration)
    name = testing.create_database(pg_server, prefix="prme_upgrade")
    try:
        with psycopg.connect(pg_server.dsn_for(name), autocommit=True) as conn:
            migrations.migrate(conn, [m for m in every if m.version < target])
            conn.execute(FILL_BEFORE.encode())
            yield conn, every, target
    finally:
        testing.drop_database(pg_server, name)


def _rows(conn: psycopg.Connection[Any]) -> dict[str, list[str]]:
    """Every row of every prme table (but the migration log) as text, sorted."""
    tables = conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = 'prme'::regnamespace AND relkind IN ('r', 'p')"
        " AND relname <> 'schema_migrations' ORDER BY 1"
    ).fetchall()
    query = sql.SQL("SELECT t::text FROM {} AS t ORDER BY 1")
    return {t: [r[0] for r in conn.execute(query.format(sql.Identifier("prme", t)))] for (t,) in tables}


def _rows_kept(conn: psycopg.Connection[Any], before: dict[str, list[str]]) -> dict[str, list[str]]:
    """:func:`_rows` of the tables in ``before`` (and reader_bindings); the tables later migrations
    add must be empty."""
    rows = _rows(conn)
    added = {t: v for t, v in rows.items() if t not in before and t != "reader_bindings"}
    assert not any(added.values()), f"tables added by later migrations hold rows: {added}"
    return {t: v for t, v in rows.items() if t not in added}


def _reader_sees(conn: psycopg.Connection[Any], role: str, setting: str = "") -> dict[str, int]:
    with conn.transaction(force_rollback=True):
        conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
        conn.execute("SELECT set_config('prme.user_id', %s, true)", [setting])
        return dict(conn.execute("SELECT user_id, count(*) FROM prme.nodes GROUP BY 1").fetchall())


def test_upgrading_to_hostile_callers_loses_nothing(pg_server: testing.Server) -> None:
    """A database filled through the release before 0011 upgrades with every row kept as it
    was, its journals clean, its keys still replaying, and readers bound from then on."""
    with filled_before(pg_server, "hostile_callers") as (conn, every, target):
        conn.execute(
            "SELECT prme.submit_operation('alice', 'dddddddd-0000-4000-8000-000000000001', 2, 'add_event', '{}',"
            ' prme.payload_hash(\'{"content": "queued"}\'), \'{"content": "queued"}\')'
        )
        conn.execute("SELECT * FROM prme.run_operations(10, 'upgrade-test')")
        report = "SELECT r::text FROM prme.maintenance_report('alice', '2030-01-01') AS r ORDER BY 1"
        before, before_report = _rows(conn), conn.execute(report).fetchall()
        filled = ("nodes", "journal", "outcomes", "correction_inbox", "maintenance_patches", "snapshot_heads")
        assert all(before[table] for table in (*filled, "operations", "api_tokens")), "not vacuous"
        assert _reader_sees(conn, "prme_reader", "bob") == {"bob": 1}, "the hole 0011 closes"

        # Up to its own target only: later migrations move rows on purpose (each has its own test).
        assert [m.version for m in migrations.migrate(conn, [m for m in every if m.version <= target])] == [target]
        after = _rows(conn)
        assert after.pop("reader_bindings") == []
        assert after == before
        assert conn.execute(report).fetchall() == before_report
        for owner in ("alice", "bob"):
            assert conn.execute("SELECT * FROM prme.verify_journal(%s)", [owner]).fetchall() == []
        replay = "SELECT r.matches FROM prme.nodes AS n, LATERAL prme.replay_node(n.user_id, n.id) AS r"
        assert {row[0] for row in conn.execute(replay)} == {True}
        key = conn.execute(
            "SELECT replayed FROM prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice',"
            " 'eeeeeeee-0000-4000-8000-000000000001', 'cccccccc-0000-4000-8000-000000000001')"
        ).fetchone()
        assert key == (True,), "a key stored before the upgrade still replays"
        assert _rows_kept(conn, before) == before | {"reader_bindings": []}, "and the replay wrote nothing"

        assert _reader_sees(conn, "prme_reader", "bob") == {}
        assert _reader_sees(conn, "prme_auditor") == {"alice": 2, "bob": 1}
        with conn.transaction(force_rollback=True):
            conn.execute("CREATE ROLE prme_t_upgrade_reader IN ROLE prme_reader")
            conn.execute("INSERT INTO prme.reader_bindings (user_id, reader) VALUES ('alice', 'prme_t_upgrade_reader')")
            assert _reader_sees(conn, "prme_t_upgrade_reader", "bob") == {"alice": 2}


# -- ledger_fast_submit: operations accepted before it run and resubmit as before -----------

LEDGER_BEFORE = """
SELECT * FROM prme.submit_operation('alice', 'dddddddd-0000-4000-8000-0000000000%(n)s', 2, 'add_node', '{}',
                                    prme.payload_hash('{"content": "queued %(n)s"}'), '{"content": "queued %(n)s"}')
"""


def test_upgrading_to_ledger_fast_submit_loses_nothing(pg_server: testing.Server) -> None:
    """Operations committed and still queued before the migration keep every row; the queued ones
    commit afterwards (the executor's first look checks their hash, which submit had checked), and
    a resubmit of either answers with the stored receipt."""
    with filled_before(pg_server, "ledger_fast_submit") as (conn, every, target):
        conn.execute(LEDGER_BEFORE % {"n": "01"})
        conn.execute("SELECT * FROM prme.run_operations(10, 'upgrade-test')")
        conn.execute(LEDGER_BEFORE % {"n": "02"})
        events = "SELECT e::text FROM prme.operation_events('alice', 0) AS e ORDER BY 1"
        before, before_events = _rows(conn), conn.execute(events).fetchall()
        assert len(before["operations"]) == 2 and before["nodes"], "not vacuous"
        constraints = "SELECT count(*) FROM pg_constraint WHERE conrelid = 'prme.operations'::regclass"
        checks_before = conn.execute(constraints + " AND contype = 'c'").fetchone()

        # Up to its own target only: later migrations move rows on purpose (each has its own test).
        assert [m.version for m in migrations.migrate(conn, [m for m in every if m.version <= target])] == [target]
        assert _rows_kept(conn, before) == before
        assert conn.execute(events).fetchall() == before_events
        assert checks_before is not None
        assert conn.execute(constraints + " AND contype = 'c'").fetchone() == (checks_before[0] - 2,)
        for n in ("01", "02"):
            assert conn.execute(f"SELECT created FROM ({LEDGER_BEFORE % {'n': n}}) AS r").fetchone() == (False,)
        outcomes = conn.execute("SELECT outcome FROM prme.run_operations(10, 'upgrade-test')").fetchall()
        assert outcomes == [("committed",)]
        states = "SELECT state FROM prme.operations ORDER BY operation_id"
        assert conn.execute(states).fetchall() == [("committed",), ("committed",)]


# -- owner_streams: the upgrade from the release before it loses nothing ------------


def test_upgrading_to_owner_streams_keeps_every_stream(pg_server: testing.Server) -> None:
    """A ledger filled before owner_streams reads the same stream after it, and goes on after it."""
    stream = "SELECT seq, operation_id, operation_seq, state, detail FROM prme.operation_events('alice') ORDER BY seq"
    with filled_before(pg_server, "owner_streams") as (conn, every, target):
        for n in range(3):
            conn.execute(
                "SELECT prme.submit_operation('alice', %s, 2, 'add_event', '{}', prme.payload_hash(%s), %s)",
                [f"dddddddd-0000-4000-8000-00000000000{n}", f'{{"content": "e{n}"}}', f'{{"content": "e{n}"}}'],
            )
        conn.execute("SELECT * FROM prme.run_operations(10, 'upgrade-test')")
        before, before_stream = _rows(conn), conn.execute(stream).fetchall()
        assert len(before_stream) >= 9, "not vacuous: accepted, processing, committed per operation"

        # Up to its own target only: later migrations move rows on purpose (each has its own test).
        assert [m.version for m in migrations.migrate(conn, [m for m in every if m.version <= target])] == [target]
        assert _rows_kept(conn, before) == before
        assert conn.execute(stream).fetchall() == before_stream
        assert conn.execute("SELECT count(*) FROM prme.owner_streams").fetchone() == (0,)
        conn.execute(
            "SELECT prme.submit_operation('alice', 'dddddddd-0000-4000-8000-0000000000ff', 2, 'add_event', '{}',"
            ' prme.payload_hash(\'{"content": "after"}\'), \'{"content": "after"}\')'
        )
        after = conn.execute(stream).fetchall()
        assert after[: len(before_stream)] == before_stream and len(after) == len(before_stream) + 1


FILL_HOT_PATH = """
SELECT prme.add_event('carol', 'carol said so', event_id => 'eeeeeeee-0000-4000-8000-000000000012');
SELECT prme.add_node('carol', 'carol drinks tea', node_id => 'cccccccc-1200-4000-8000-000000000001',
                     next_review_at => '2029-01-01');
SELECT prme.add_node('carol', 'carol cycles to work', node_id => 'cccccccc-1200-4000-8000-000000000002');
SELECT prme.add_node('carol', 'carol reads at night', namespace => 'books',
                     node_id => 'cccccccc-1200-4000-8000-000000000003');
SELECT prme.reinforce('cccccccc-1200-4000-8000-000000000001', 'carol', 'eeeeeeee-0000-4000-8000-000000000012',
                      'a0000000-1200-4000-8000-000000000001');
SELECT prme.reinforce('cccccccc-1200-4000-8000-000000000001', 'carol', NULL, 'a0000000-1200-4000-8000-000000000002');
SELECT prme.reinforce('cccccccc-1200-4000-8000-000000000001', 'carol');
SELECT prme.reinforce('cccccccc-1200-4000-8000-000000000002', 'carol', NULL, 'a0000000-1200-4000-8000-000000000003');
SELECT prme.reinforce('cccccccc-1200-4000-8000-000000000003', 'carol', NULL, 'a0000000-1200-4000-8000-000000000003');
SELECT prme.record_outcome('carol', 'cccccccc-1200-4000-8000-000000000002', 'explicit_reinforcement',
                           request_id => 'b0000000-1200-4000-8000-000000000001');
SELECT prme.record_outcome('carol', 'cccccccc-1200-4000-8000-000000000002', 'implicit_success');
SELECT prme.mark_reviewed('carol', 'cccccccc-1200-4000-8000-000000000002', '2029-06-01');
SELECT prme.reinforce('cccccccc-1200-4000-8000-000000000002', 'carol');
SELECT prme.reinforce('cccccccc-1200-4000-8000-000000000002', 'carol');
SELECT prme.record_outcome('carol', 'cccccccc-1200-4000-8000-000000000001', 'explicit_correction');
"""
CAROL_NODES = [f"cccccccc-1200-4000-8000-00000000000{n}" for n in (1, 2, 3)]


def _outcome_reads(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Everything outcome readers answer for carol's memories, as text."""
    return {
        node: (
            conn.execute("SELECT s::text FROM prme.outcome_summary('carol', %s) AS s", [node]).fetchall(),
            conn.execute("SELECT o::text FROM prme.node_outcomes('carol', %s) AS o", [node]).fetchall(),
        )
        for node in CAROL_NODES
    }


def _sqlstate(conn: psycopg.Connection[Any], statement: str) -> str | None:
    try:
        with conn.transaction():
            conn.execute(statement)
    except psycopg.Error as error:
        return error.sqlstate
    return None


def test_upgrading_to_hot_path_loses_nothing(pg_server: testing.Server) -> None:
    """A database filled through the release before 0014_hot_path upgrades with every key still
    replaying and conflicting, every outcome still counted and listed, the same maintenance
    report, a clean journal, and confirmations that from then on write only node and journal."""
    with filled_before(pg_server, "hot_path") as (conn, every, target):
        conn.execute(FILL_HOT_PATH.encode())
        reports = {
            owner: conn.execute(
                "SELECT r::text FROM prme.maintenance_report(%s, %s) AS r ORDER BY 1", [owner, as_of]
            ).fetchall()
            for owner in ("alice", "carol")
            for as_of in ("2030-01-01",)
        }
        past = "SELECT r::text FROM prme.maintenance_report('carol', now() - interval '1 hour') AS r ORDER BY 1"
        before, before_reads, before_past = _rows(conn), _outcome_reads(conn), conn.execute(past).fetchall()
        assert any(r != ([], []) for r in before_reads.values()), "not vacuous"
        assert any(rows for rows in reports.values()), "not vacuous"
        keys_before = conn.execute("SELECT operation, count(*) FROM prme.request_keys GROUP BY 1 ORDER BY 1")
        assert keys_before.fetchall() == [("record_outcome", 1), ("reinforce", 5)]

        assert [m.version for m in migrations.migrate(conn, [m for m in every if m.version <= target])] == [target]
        after = _rows(conn)
        # The rows that moved: reinforce keys went into their journal records, confirmation
        # counts onto their nodes; nothing else changed.
        for table in ("nodes", "journal", "request_keys", "node_maintenance"):
            after.pop(table), before.pop(table)
        assert after == before, "outcome rows (old confirmations' included) and all else kept"
        assert conn.execute("SELECT operation FROM prme.request_keys").fetchall() == [("record_outcome",)]
        assert conn.execute(
            "SELECT count(*) FROM prme.journal WHERE request_id IS NOT NULL AND key_namespace IS NOT NULL"
        ).fetchone() == (5,)
        assert _outcome_reads(conn) == before_reads, "summaries and outcome lists (ids too) unchanged"
        for (owner, as_of), rows in zip(
            [(o, a) for o in ("alice", "carol") for a in ("2030-01-01",)], reports.values(), strict=True
        ):
            assert (
                conn.execute(
                    "SELECT r::text FROM prme.maintenance_report(%s, %s) AS r ORDER BY 1", [owner, as_of]
                ).fetchall()
                == rows
            )
        assert conn.execute(past).fetchall() == before_past
        for owner in ("alice", "bob", "carol"):
            assert conn.execute("SELECT * FROM prme.verify_journal(%s)", [owner]).fetchall() == []
        replay = "SELECT r.matches FROM prme.nodes AS n, LATERAL prme.replay_node(n.user_id, n.id) AS r"
        assert {row[0] for row in conn.execute(replay)} == {True}

        # Every stored key still replays, writing nothing ...
        stored = _rows(conn)
        replays = [
            "SELECT replayed FROM prme.reinforce('cccccccc-1200-4000-8000-000000000001', 'carol',"
            " 'eeeeeeee-0000-4000-8000-000000000012', 'a0000000-1200-4000-8000-000000000001')",
            "SELECT replayed FROM prme.reinforce('cccccccc-1200-4000-8000-000000000003', 'carol', NULL,"
            " 'a0000000-1200-4000-8000-000000000003')",
            "SELECT replayed FROM prme.record_outcome('carol', 'cccccccc-1200-4000-8000-000000000002',"
            " 'explicit_reinforcement', request_id => 'b0000000-1200-4000-8000-000000000001')",
            "SELECT replayed FROM prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice',"
            " 'eeeeeeee-0000-4000-8000-000000000001', 'cccccccc-0000-4000-8000-000000000001')",
        ]
        for statement in replays:
            assert conn.execute(statement).fetchone() == (True,), statement
        assert _rows(conn) == stored, "replays wrote nothing"
        # ... and still conflicts with any other use, whichever kind of call stored it.
        conflicts = [
            "SELECT prme.reinforce('cccccccc-1200-4000-8000-000000000002', 'carol', NULL,"
            " 'a0000000-1200-4000-8000-000000000001')",
            "SELECT prme.reinforce('cccccccc-1200-4000-8000-000000000001', 'carol', NULL,"
            " 'a0000000-1200-4000-8000-000000000001')",
            "SELECT prme.record_outcome('carol', 'cccccccc-1200-4000-8000-000000000001', 'implicit_success',"
            " request_id => 'a0000000-1200-4000-8000-000000000002')",
            "SELECT prme.reinforce('cccccccc-1200-4000-8000-000000000002', 'carol', NULL,"
            " 'b0000000-1200-4000-8000-000000000001')",
            "SELECT prme.record_outcome('carol', 'cccccccc-1200-4000-8000-000000000002', 'implicit_success',"
            " request_id => 'b0000000-1200-4000-8000-000000000001')",
        ]
        for statement in conflicts:
            assert _sqlstate(conn, statement) == "PR409", statement
        assert _rows(conn) == stored, "conflicts wrote nothing"

        # A fresh confirmation now writes its node and one journal record, nothing else,
        # and counts as an outcome.
        conn.execute(
            "SELECT prme.reinforce('cccccccc-1200-4000-8000-000000000003', 'carol', NULL,"
            " 'a0000000-1200-4000-8000-000000000099')"
        )
        fresh = _rows(conn)
        changed = {t for t in fresh if fresh[t] != stored[t]}
        assert changed == {"nodes", "journal"}
        assert len(fresh["journal"]) == len(stored["journal"]) + 1
        summary = "SELECT explicit_reinforcements FROM prme.outcome_summary('carol', %s)"
        assert conn.execute(summary, [CAROL_NODES[2]]).fetchone() == (2,)


def test_upgrading_to_recall_words_recomputes_search_and_loses_nothing(pg_server: testing.Server) -> None:
    """A database filled through the release before recall_words upgrades with every row
    kept as it was but nodes.search, which now holds the recall words of each memory (so old
    memories match as new ones do), and nothing journaled."""
    with filled_before(pg_server, "recall_words") as (conn, every, target):
        conn.execute("SELECT prme.add_node('alice', 'Classes of coffee: espresso-based drinks')")
        old_words = "SELECT tsvector_to_array(search) FROM prme.nodes WHERE content LIKE 'Classes%'"
        assert any(w.endswith("/espresso-bas") for w in conn.execute(old_words).fetchone()[0]), "english stems"

        def without_search() -> dict[str, list[str]]:
            rows = _rows(conn)
            rows["nodes"] = [
                r[0]
                for r in conn.execute(
                    "SELECT (to_jsonb(n) - 'search')::text FROM prme.nodes AS n ORDER BY 1"
                ).fetchall()
            ]
            return rows

        before = without_search()
        migrations.migrate(conn, [m for m in every if m.version <= target])
        assert without_search() == before
        stale = conn.execute(
            "SELECT count(*) FROM prme.nodes WHERE search <> array_to_tsvector(prme._owner_lexemes(user_id, content))"
        ).fetchone()
        assert stale == (0,)
        key = conn.execute("SELECT left(encode(sha256('alice'::bytea), 'hex'), 16)").fetchone()[0]
        assert sorted(conn.execute(old_words).fetchone()[0]) == sorted(
            f"{key}/{w}" for w in ("classe", "coffee", "drink", "espresso", "based")
        )
        hits = conn.execute("SELECT content FROM prme.recall('alice', 'coffee drinks')").fetchall()
        assert [h[0] for h in hits] == [
            "Classes of coffee: espresso-based drinks",
            "alice prefers green tea over coffee",
        ]
        for owner in ("alice", "bob"):
            assert conn.execute("SELECT * FROM prme.verify_journal(%s)", [owner]).fetchall() == []


def test_upgrading_to_correction_phrases_keeps_the_inbox_and_changes_the_rules(pg_server: testing.Server) -> None:
    """A database filled through the release before correction_phrases upgrades with every row
    kept as it was (an inbox entry that listed a candidate twice keeps both), and the new rules
    answer from then on: a bare "No." is no correction, "use X instead" is one, and a candidate
    listed twice is stored once."""
    with filled_before(pg_server, "correction_phrases") as (conn, every, target):
        lyon = "aaaaaaaa-0000-4000-8000-000000000002"
        twice = "SELECT inbox_id FROM prme.link_correction('alice', 'Stop that', ARRAY[%s, %s]::uuid[])"
        old_entry = conn.execute(twice, [lyon, lyon]).fetchone()[0]
        detect = "SELECT prme.is_correction(m) FROM unnest(%s::text[]) AS t (m)"
        messages = ["No.", "Don't worry about it", "Use pathlib instead", "Looks good\ndon't push to main"]
        assert [r[0] for r in conn.execute(detect, [messages])] == [True, True, False, False]

        before = _rows(conn)
        migrations.migrate(conn, [m for m in every if m.version <= target])
        assert _rows_kept(conn, before) == before
        stored = "SELECT candidate_node_ids::text[] FROM prme.correction_inbox WHERE user_id = 'alice' AND id = %s"
        assert conn.execute(stored, [old_entry]).fetchone()[0] == [lyon, lyon]
        assert [r[0] for r in conn.execute(detect, [messages])] == [False, False, True, True]
        new_entry = conn.execute(twice, [lyon, lyon]).fetchone()[0]
        assert conn.execute(stored, [new_entry]).fetchone()[0] == [lyon]
        for owner in ("alice", "bob"):
            assert conn.execute("SELECT * FROM prme.verify_journal(%s)", [owner]).fetchall() == []


# -- reference_protocol: operation ids become text, nothing else changes -------------------------


def test_upgrading_to_reference_protocol_keeps_receipts_events_and_derived_ids(pg_server: testing.Server) -> None:
    """Operations accepted while ids were uuid keep their receipts, events, dependencies (in their
    stored order) and the ids derived from them; a retry with the same UUID still finds its
    operation, and a blocked one is released by its dependency's commit after the upgrade."""
    ids = {name: f"dddddddd-0000-4000-8000-0000000017{n:02d}" for n, name in enumerate("abcdefg")}
    submit = (
        "SELECT created FROM prme.submit_operation('alice', %s::uuid, 2, %s, %s::uuid[], prme.payload_hash(%s), %s)"
    )
    with filled_before(pg_server, "reference_protocol") as (conn, every, target):

        def op(name: str, kind: str, payload: str, deps: tuple[str, ...] = ()) -> None:
            conn.execute(submit, [ids[name], kind, [ids[d] for d in deps], payload, payload])

        op("a", "add_node", '{"content": "alice keeps bees"}')
        op("b", "add_event", '{"content": "alice said so"}')
        node_a = "SELECT prme.derived_id(%s::uuid)"
        reinforce = json.dumps({"node_id": str(conn.execute(node_a, [ids["a"]]).fetchone()[0])})
        op("c", "reinforce", reinforce, ("b", "a"))
        conn.execute("SELECT * FROM prme.run_operations(10, 'upgrade-test')")
        conn.execute("SELECT * FROM prme.run_operations(10, 'upgrade-test')")
        op("d", "add_node", '{"content": "waits for e"}')
        op("e", "add_node", '{"content": "not run yet"}')
        op("f", "add_node", '{"content": "after d and e"}', ("e", "d"))
        # Only f runs: it blocks on d and e (both accepted, not committed).
        conn.execute("UPDATE prme.operations SET next_attempt_at = now() + interval '1 hour' WHERE kind = 'add_node'")
        conn.execute("UPDATE prme.operations SET next_attempt_at = now() WHERE operation_id = %s::uuid", [ids["f"]])
        conn.execute("SELECT * FROM prme.run_operations(10, 'upgrade-test')")
        conn.execute("UPDATE prme.operations SET next_attempt_at = now() WHERE state = 'accepted'")

        # The receipt's fields of before (it gains progress_seq), as text.
        receipts = (
            "SELECT (r.operation_id, r.kind, r.payload_hash, r.dependencies, r.state, r.blocked_by, r.result,"
            " r.error, r.attempts, r.created_at, r.updated_at, r.created)::text"
            " FROM prme.operations AS o, prme.get_receipt(o.user_id, o.operation_id) AS r ORDER BY 1"
        )
        stream = "SELECT e::text FROM prme.operation_events('alice') AS e ORDER BY e.seq"
        derived = "SELECT o.operation_id::text, prme.derived_id(o.operation_id) FROM prme.operations AS o ORDER BY 1"
        before_receipts = [r[0] for r in conn.execute(receipts)]
        before_stream = [r[0] for r in conn.execute(stream)]
        before_derived = conn.execute(derived).fetchall()
        states = "SELECT operation_id::text, state, dependencies::text[] FROM prme.operations ORDER BY 1"
        before_states = conn.execute(states).fetchall()
        assert [s for _, s, _ in before_states] == ["committed"] * 3 + ["accepted", "accepted", "blocked"]
        assert {i: d for i, _, d in before_states}[ids["c"]] == sorted([ids["a"], ids["b"]])
        before = _rows(conn)

        migrations.migrate(conn, [m for m in every if m.version <= target])
        after = _rows_kept(conn, before)
        # Every row as it was (ids now text, printed the same), but the blocked operation's next
        # look, which the upgrade set (its dependency wait).
        for table in before:
            if table != "operations":
                assert after[table] == before[table], table
        blocked_row = [r for r in before["operations"] if ids["f"] in r.split(",")[1]]
        assert sorted(set(before["operations"]) - set(blocked_row)) == sorted(
            r for r in after["operations"] if ids["f"] not in r.split(",")[1]
        )
        assert [r[0] for r in conn.execute(receipts)] == before_receipts
        assert [r[0] for r in conn.execute(stream)] == before_stream
        assert conn.execute(derived).fetchall() == before_derived
        assert conn.execute(states).fetchall() == before_states
        # A retry of an old operation, by its UUID in any case, finds it.
        retry = (
            "SELECT created, progress_seq"
            " FROM prme.submit_operation('alice', %s, 2, 'add_node', '{}', prme.payload_hash(%s), %s)"
        )
        payload = '{"content": "alice keeps bees"}'
        assert conn.execute(retry, [ids["a"].upper(), payload, payload]).fetchone() == (False, 3)
        # The executor goes on: d and e commit, f is released and commits.
        for _ in range(3):
            conn.execute("SELECT * FROM prme.run_operations(10, 'upgrade-test')")
        done = "SELECT count(*) FROM prme.operations WHERE state = 'committed'"
        assert conn.execute(done).fetchone() == (6,)
        node = "SELECT count(*) FROM prme.nodes WHERE id = prme.derived_id(%s)"
        assert conn.execute(node, [ids["f"]]).fetchone() == (1,)
        for owner in ("alice", "bob"):
            assert conn.execute("SELECT * FROM prme.verify_journal(%s)", [owner]).fetchall() == []


FILL_REPORT_ON_THE_MEMORY_ROW = """
SELECT prme.add_node('dave', 'dave walks the dog', node_id => 'dddddddd-1700-4000-8000-000000000001',
                     next_review_at => now() - interval '20 days', stability => 'semi-stable');
SELECT prme.add_node('dave', 'dave bakes bread', node_id => 'dddddddd-1700-4000-8000-000000000002',
                     next_review_at => now() - interval '3 days');
SELECT prme.record_outcome('dave', 'dddddddd-1700-4000-8000-000000000002', 'implicit_success')
FROM generate_series(1, 6);
SELECT prme.record_outcome('dave', 'dddddddd-1700-4000-8000-000000000002', 'neutral_exposure',
                           request_id => 'd0000000-1700-4000-8000-000000000001');
SELECT prme.reinforce('dddddddd-1700-4000-8000-000000000001', 'dave', NULL, 'd0000000-1700-4000-8000-000000000002');
SELECT prme.apply_patch('dave', (prme.maintenance_patch('dave')).patch_id, NULL, 'auto');
SELECT prme.record_outcome('dave', 'dddddddd-1700-4000-8000-000000000001', 'explicit_correction');
"""
BOOKKEEPING_COLUMNS = [
    "implicit_successes",
    "neutral_exposures",
    "explicit_corrections",
    "last_outcome_at",
    "reviewed_explicit_reinforcements",
    "reviewed_implicit_successes",
    "reviewed_neutral_exposures",
    "reviewed_explicit_corrections",
    "reviewed_at",
    "decay_anchor",
    "decay_cycles",
]


def test_upgrading_to_report_on_the_memory_row_loses_nothing(pg_server: testing.Server) -> None:
    """A database filled through the release before report_on_the_memory_row (outcomes, keyed
    confirmations, reviews, applied decay and stability ops) upgrades with the bookkeeping rows
    moved onto their memories and nothing else changed: the same maintenance reports (as of
    now, the past and the future), outcome summaries and lists, every key still replaying and
    conflicting, a clean journal; and the writers keep the bookkeeping on the memory from then on."""
    with filled_before(pg_server, "report_on_the_memory_row") as (conn, every, target):
        conn.execute(FILL_HOT_PATH.encode())
        conn.execute(FILL_REPORT_ON_THE_MEMORY_ROW.encode())
        as_of = conn.execute("SELECT now()").fetchone()[0]
        times = [as_of, "2030-01-01", "2026-01-01", str(as_of - timedelta(days=2))]
        owners = ("alice", "bob", "carol", "dave")

        def reports() -> dict[tuple[str, str], list[Any]]:
            return {
                (owner, str(at)): conn.execute(
                    "SELECT r::text FROM prme.maintenance_report(%s, %s) AS r ORDER BY 1", [owner, at]
                ).fetchall()
                for owner in owners
                for at in times
            }

        def summaries() -> list[Any]:
            return conn.execute(
                "SELECT n.id, s::text, (SELECT array_agg(o::text ORDER BY o.created_at, o.id)"
                " FROM prme.node_outcomes(n.user_id, n.id) AS o)"
                " FROM prme.nodes AS n, LATERAL prme.outcome_summary(n.user_id, n.id) AS s ORDER BY 1"
            ).fetchall()

        before_reports, before_summaries = reports(), summaries()
        assert sum(len(rows) for rows in before_reports.values()) > 10, "not vacuous"
        bookkeeping = conn.execute(
            "SELECT node_id, explicit_reinforcements AS recorded_reinforcements, "
            + ", ".join(BOOKKEEPING_COLUMNS)
            + " FROM prme.node_maintenance ORDER BY 1"
        ).fetchall()
        assert {row[-1] for row in bookkeeping} > {0}, "decay bookkeeping in the data"
        assert any(row[10] is not None for row in bookkeeping), "reviews in the data"
        before = _rows(conn)
        nodes_state = "SELECT (to_jsonb(n) - %s::text[])::text FROM prme.nodes AS n ORDER BY 1"
        new_columns = ["recorded_reinforcements", *BOOKKEEPING_COLUMNS]
        before_nodes = conn.execute(nodes_state, [new_columns]).fetchall()

        assert [m.version for m in migrations.migrate(conn, [m for m in every if m.version <= target])] == [target]

        after = _rows(conn)
        assert "node_maintenance" not in after
        before.pop("node_maintenance"), before.pop("nodes"), after.pop("nodes")
        assert after == before, "every other row kept as it was"
        assert conn.execute(nodes_state, [new_columns]).fetchall() == before_nodes, "memories kept as they were"
        moved = conn.execute(
            "SELECT id, "
            + ", ".join(new_columns)
            + " FROM prme.nodes WHERE user_id IN ('alice', 'bob', 'carol', 'dave')"
            " ORDER BY 1"
        ).fetchall()
        assert moved == bookkeeping, "each bookkeeping row is on its memory"
        assert reports() == before_reports
        assert summaries() == before_summaries
        for owner in owners:
            assert conn.execute("SELECT * FROM prme.verify_journal(%s)", [owner]).fetchall() == []
            assert conn.execute("SELECT prme._rebuild_outcome_totals(%s)", [owner]).fetchone() == (0,)
        replay = "SELECT r.matches FROM prme.nodes AS n, LATERAL prme.replay_node(n.user_id, n.id) AS r"
        assert {row[0] for row in conn.execute(replay)} == {True}

        # Every stored key still replays, writing nothing, and conflicts with any other use.
        stored = _rows(conn)
        replays = [
            "SELECT replayed FROM prme.reinforce('cccccccc-1200-4000-8000-000000000001', 'carol',"
            " 'eeeeeeee-0000-4000-8000-000000000012', 'a0000000-1200-4000-8000-000000000001')",
            "SELECT replayed FROM prme.record_outcome('carol', 'cccccccc-1200-4000-8000-000000000002',"
            " 'explicit_reinforcement', request_id => 'b0000000-1200-4000-8000-000000000001')",
            "SELECT replayed FROM prme.record_outcome('dave', 'dddddddd-1700-4000-8000-000000000002',"
            " 'neutral_exposure', request_id => 'd0000000-1700-4000-8000-000000000001')",
            "SELECT replayed FROM prme.reinforce('dddddddd-1700-4000-8000-000000000001', 'dave', NULL,"
            " 'd0000000-1700-4000-8000-000000000002')",
        ]
        for statement in replays:
            assert conn.execute(statement).fetchone() == (True,), statement
        conflicts = [
            "SELECT prme.reinforce('dddddddd-1700-4000-8000-000000000002', 'dave', NULL,"
            " 'd0000000-1700-4000-8000-000000000001')",
            "SELECT prme.record_outcome('dave', 'dddddddd-1700-4000-8000-000000000001', 'implicit_success',"
            " request_id => 'd0000000-1700-4000-8000-000000000002')",
        ]
        for statement in conflicts:
            assert _sqlstate(conn, statement) == "PR409", statement
        assert _rows(conn) == stored, "replays and conflicts wrote nothing"

        # From then on an outcome adds to its memory's totals, and a review settles them there.
        node = "dddddddd-1700-4000-8000-000000000002"
        conn.execute("SELECT prme.record_outcome('dave', %s, 'explicit_correction')", [node])
        totals = "SELECT explicit_corrections, reviewed_explicit_corrections FROM prme.nodes WHERE id = %s"
        assert conn.execute(totals, [node]).fetchone() == (1, 0)
        conn.execute("SELECT prme.mark_reviewed('dave', %s)", [node])
        assert conn.execute(totals, [node]).fetchone() == (1, 1)
        assert conn.execute("SELECT prme._rebuild_outcome_totals('dave')").fetchone() == (0,)


def test_upgrading_to_review_from_start_keeps_old_memories_and_schedules_new_ones(pg_server: testing.Server) -> None:
    """A database filled through the release before review_from_start upgrades with every row kept
    as it was (a memory created without next_review_at stays unscheduled), and from then on a new
    memory is due one cadence of its stability (the owner's setting) after it was created, unless a
    time or 'infinity' (no schedule) is given."""
    with filled_before(pg_server, "review_from_start") as (conn, every, target):
        add = "SELECT next_review_at - created_at FROM prme.add_node('alice', 'x', stability => %s)"
        assert conn.execute(add, ["semi-stable"]).fetchone()[0] is None, "unscheduled before"
        unscheduled = conn.execute("SELECT count(*) FROM prme.nodes WHERE next_review_at IS NULL").fetchone()[0]

        before = _rows(conn)
        migrations.migrate(conn, [m for m in every if m.version <= target])
        assert _rows_kept(conn, before) == before
        assert conn.execute("SELECT count(*) FROM prme.nodes WHERE next_review_at IS NULL").fetchone()[0] == unscheduled
        # alice's own low cadence is 3 days (FILL_BEFORE); semi-stable is the default's 30 days.
        assert conn.execute(add, ["low"]).fetchone()[0] == timedelta(days=3)
        assert conn.execute(add, ["semi-stable"]).fetchone()[0] == timedelta(days=30)
        never = "SELECT next_review_at FROM prme.add_node('alice', 'x', next_review_at => 'infinity')"
        assert conn.execute(never).fetchone()[0] is None
        for owner in ("alice", "bob"):
            assert conn.execute("SELECT * FROM prme.verify_journal(%s)", [owner]).fetchall() == []


def test_upgrading_to_stability_by_outcomes_renames_the_column_and_keeps_every_summary(
    pg_server: testing.Server,
) -> None:
    """outcome_summary answers the same values after the upgrade, its verdict under the new name,
    and prme_app may still call it (the function is dropped and created again)."""
    summaries = "SELECT s.* FROM prme.nodes AS n, prme.outcome_summary(n.user_id, n.id) AS s ORDER BY n.user_id, n.id"
    with filled_before(pg_server, "stability_by_outcomes") as (conn, every, target):
        before_rows = _rows(conn)
        cur = conn.execute(summaries)
        before = cur.fetchall()
        assert "suggested_stability" in [c.name for c in cur.description or []]
        assert before, "the fill records outcomes"
        migrations.migrate(conn, [m for m in every if m.version <= target])
        assert _rows_kept(conn, before_rows) == before_rows
        cur = conn.execute(summaries)
        assert cur.fetchall() == before
        assert [c.name for c in cur.description or []][6] == "stability_by_outcomes"
        node = conn.execute("SELECT user_id, id FROM prme.nodes LIMIT 1").fetchone()
        assert node is not None
        conn.execute("SET ROLE prme_app")
        conn.execute("SELECT * FROM prme.outcome_summary(%s, %s)", list(node))
        conn.execute("RESET ROLE")


# -- 0021_row_rules_on_types: the rules move onto the columns' types, nothing else changes --

REWRITE_WITNESS = """
SELECT c.relname, pg_relation_filenode(c.oid) FROM pg_class AS c
WHERE c.relnamespace = 'prme'::regnamespace
  AND (c.oid IN ('prme.nodes'::regclass, 'prme.journal'::regclass)
       OR c.oid IN (SELECT i.indexrelid FROM pg_index AS i
                    WHERE i.indrelid IN ('prme.nodes'::regclass, 'prme.journal'::regclass)))
ORDER BY 1
"""

TYPED_READERS = [
    "SELECT r::text FROM prme.verify_journal(%(owner)s) AS r ORDER BY 1",
    "SELECT r::text FROM prme.journal_records(%(owner)s) AS r ORDER BY 1",
    "SELECT r::text FROM prme.nodes AS n, prme.node_journal(n.user_id, n.id) AS r WHERE n.user_id = %(owner)s"
    " ORDER BY 1",
    "SELECT r::text FROM prme.effective_nodes(%(owner)s, '2030-01-01') AS r ORDER BY 1",
    "SELECT r::text FROM prme.recall(%(owner)s, '', as_of => '2030-01-01') AS r ORDER BY 1",
    "SELECT r::text FROM prme.recall(%(owner)s, 'tea dog bread', as_of => '2030-01-01') AS r ORDER BY 1",
    "SELECT r::text FROM prme.maintenance_report(%(owner)s, '2030-01-01') AS r ORDER BY 1",
]


def test_upgrading_to_row_rules_on_types_rewrites_nothing_and_keeps_every_rule(pg_server: testing.Server) -> None:
    """The value rules of nodes and journal move from table CHECK constraints to the columns'
    domains without rewriting a table or rebuilding an index: every row and every reader's answer
    is the same after the upgrade, every stored key still replays and conflicts, the journal
    verifies, and every rule (the counters' new one included) still refuses a bad value."""
    with filled_before(pg_server, "row_rules_on_types") as (conn, every, target):
        conn.execute(FILL_HOT_PATH.encode())
        conn.execute(FILL_REPORT_ON_THE_MEMORY_ROW.encode())
        owners = ("alice", "bob", "carol", "dave")

        def answers() -> list[Any]:
            return [conn.execute(query, {"owner": owner}).fetchall() for query in TYPED_READERS for owner in owners]

        before_rows, before_answers = _rows(conn), answers()
        assert sum(map(len, before_answers)) > 40, "not vacuous"
        files = conn.execute(REWRITE_WITNESS).fetchall()
        checks = "SELECT conrelid::regclass::text, count(*) FROM pg_constraint WHERE contype = 'c' AND conrelid IN"
        checks += " ('prme.nodes'::regclass, 'prme.journal'::regclass) GROUP BY 1 ORDER BY 1"
        assert conn.execute(checks).fetchall() == [("prme.journal", 6), ("prme.nodes", 13)]

        assert [m.version for m in migrations.migrate(conn, [m for m in every if m.version <= target])] == [target]

        assert conn.execute(REWRITE_WITNESS).fetchall() == files, "no table rewritten, no index rebuilt"
        assert conn.execute(checks).fetchall() == [("prme.journal", 3)]
        assert _rows(conn) == before_rows, "every row kept as it was"
        assert answers() == before_answers, "every reader answers as before"
        for owner in owners:
            assert conn.execute("SELECT * FROM prme.verify_journal(%s)", [owner]).fetchall() == []
        replay = "SELECT r.matches FROM prme.nodes AS n, LATERAL prme.replay_node(n.user_id, n.id) AS r"
        assert {row[0] for row in conn.execute(replay)} == {True}

        # Every stored key still replays, writing nothing, and conflicts with any other use.
        replays = [
            "SELECT replayed FROM prme.reinforce('cccccccc-1200-4000-8000-000000000001', 'carol',"
            " 'eeeeeeee-0000-4000-8000-000000000012', 'a0000000-1200-4000-8000-000000000001')",
            "SELECT replayed FROM prme.record_outcome('carol', 'cccccccc-1200-4000-8000-000000000002',"
            " 'explicit_reinforcement', request_id => 'b0000000-1200-4000-8000-000000000001')",
            "SELECT replayed FROM prme.record_outcome('dave', 'dddddddd-1700-4000-8000-000000000002',"
            " 'neutral_exposure', request_id => 'd0000000-1700-4000-8000-000000000001')",
            "SELECT replayed FROM prme.reinforce('dddddddd-1700-4000-8000-000000000001', 'dave', NULL,"
            " 'd0000000-1700-4000-8000-000000000002')",
        ]
        for statement in replays:
            assert conn.execute(statement).fetchone() == (True,), statement
        conflicts = [
            "SELECT prme.reinforce('dddddddd-1700-4000-8000-000000000002', 'dave', NULL,"
            " 'd0000000-1700-4000-8000-000000000001')",
            "SELECT prme.record_outcome('dave', 'dddddddd-1700-4000-8000-000000000001', 'implicit_success',"
            " request_id => 'd0000000-1700-4000-8000-000000000002')",
        ]
        for statement in conflicts:
            assert _sqlstate(conn, statement) == "PR409", statement
        assert _rows(conn) == before_rows, "replays and conflicts wrote nothing"

        # The rules hold on the types: a bad value written straight into a table is refused.
        node = "WHERE id = 'dddddddd-1700-4000-8000-000000000001'"
        for assignment in (
            "namespace = 'Not a name'",
            "kind = ''",
            "confidence_base = 1.5",
            "evidence_refs = ARRAY[NULL]::uuid[]",
            "stability = 'firm'",
            "lifecycle_state = 'gone'",
            "decay_profile = 'never'",
            "version = 0",
            "last_checksum = upper(last_checksum)",
            "last_checksum = left(last_checksum, 63)",
            "reinforcements = -1",
            "implicit_successes = -1",
        ):
            assert _sqlstate(conn, f"UPDATE prme.nodes SET {assignment} {node}") == "23514", assignment
        record = "SELECT * FROM prme.journal WHERE node_id = 'dddddddd-1700-4000-8000-000000000001' LIMIT 1"
        for column, value in (("node_version", "0"), ("checksum", "'x'"), ("prev_checksum", "repeat('g', 64)")):
            changed = (
                f"jsonb_populate_record(NULL::prme.journal, to_jsonb(j) || jsonb_build_object('{column}', {value}))"
            )
            statement = f"INSERT INTO prme.journal SELECT ({changed}).* FROM ({record}) AS j"
            assert _sqlstate(conn, statement) == "23514", column

        # A confirmation after the upgrade counts once and extends a verifying chain.
        confirm = (
            "SELECT version, replayed FROM prme.reinforce('dddddddd-1700-4000-8000-000000000002', 'dave', NULL,"
            " 'd0000000-2100-4000-8000-000000000001')"
        )
        first = conn.execute(confirm).fetchone()
        assert first is not None and first[1] is False
        assert conn.execute(confirm).fetchone() == (first[0], True)
        assert conn.execute("SELECT * FROM prme.verify_journal('dave')").fetchall() == []


def test_upgrading_to_recall_by_vector_index_keeps_every_vector_and_every_answer(pg_server: testing.Server) -> None:
    """0025 adds `indexed` to node_embeddings (false for every stored vector), two partial
    indexes and prme.index_embeddings, and rewrites recall: every row and vector is kept,
    every recall by words and by meaning answers as before, and an owner's vectors can then
    be moved into the HNSW index with the same answers."""
    with filled_before(pg_server, "recall_by_vector_index") as (conn, every, target):
        rng = random.Random(25)
        conn.execute("SELECT prme.register_embedding_model('unit-8', 8)")
        for owner, count in (("big", 40), ("alice", 6)):
            for i in range(count):
                vector = [rng.uniform(-1, 1) for _ in range(8)]
                norm = sum(x * x for x in vector) ** 0.5
                conn.execute(
                    "SELECT prme.add_node(%s, %s, embedding => %s::real[], embedding_model => 'unit-8')",
                    [
                        owner,
                        f"{owner} note {i} about {rng.choice(['tea', 'trains', 'rivers'])}",
                        [x / norm for x in vector],
                    ],
                )
        queries = [[rng.uniform(-1, 1) for _ in range(8)] for _ in range(4)]
        recall = (
            "SELECT id, score, relevance FROM prme.recall(%s, %s, as_of => '2030-01-01', query_embedding => %s::real[],"
            " embedding_model => 'unit-8')"
        )

        def answers() -> list[Any]:
            return [
                conn.execute(recall, [owner, words, vector]).fetchall()
                for owner in ("big", "alice")
                for words in ("tea", "trains please", "nothing shared")
                for vector in (*queries, None)
            ]

        vectors = "SELECT user_id, node_id, model_id, embedding::text, error, embedded_at FROM prme.node_embeddings"
        vectors += " ORDER BY 1, 2"
        before_rows = {t: v for t, v in _rows(conn).items() if t != "node_embeddings"}
        before_vectors, before_answers = conn.execute(vectors).fetchall(), answers()
        assert len(before_vectors) == 46 and sum(map(len, before_answers)) > 60, "not vacuous"

        assert [m.version for m in migrations.migrate(conn, [m for m in every if m.version <= target])] == [target]

        assert {t: v for t, v in _rows(conn).items() if t != "node_embeddings"} == before_rows
        assert conn.execute(vectors).fetchall() == before_vectors
        assert conn.execute("SELECT count(*) FROM prme.node_embeddings WHERE indexed").fetchone() == (0,)
        assert answers() == before_answers, "every recall answers as before"
        assert conn.execute("SELECT indexed FROM prme.index_embeddings('unit-8', min_vectors => 20)").fetchone() == (
            40,
        )
        assert answers() == before_answers, "and as before once big's vectors are in the index"


# -- 0026_set_based_add_nodes: add_nodes' batches written before replay after ----------------

BATCH_BEFORE = """
SELECT prme.register_embedding_model('m3', 3);
SELECT count(*) FROM prme.add_nodes('carol', '[
    {"content": "carol prefers tabs", "node_id": "cccccccc-2500-4000-8000-000000000001"},
    {"content": "carol uses vim at work", "scope": "work", "kind": "preference", "confidence_base": 0.65,
     "node_id": "cccccccc-2500-4000-8000-000000000002", "embedding_model": "m3"},
    {"content": "from mem0", "created_at": "2024-03-01T12:00:00Z", "next_review_at": "infinity",
     "node_id": "cccccccc-2500-4000-8000-000000000003", "embedding_model": "m3"}
]', '{0.1, 0.2, 0.3, 0.4, 0.5, 0.6}');
"""


def test_upgrading_to_set_based_add_nodes_keeps_every_batch_and_replays_it(pg_server: testing.Server) -> None:
    """Memories written by 0024's add_nodes keep every row through the upgrade; the same batch
    sent again afterwards is answered from them (replayed, nothing written), a changed one is
    refused naming its item, and a new batch writes rows whose journal verifies."""
    with filled_before(pg_server, "set_based_add_nodes") as (conn, every, target):
        conn.execute(BATCH_BEFORE.encode())
        before = _rows(conn)
        assert len([r for r in before["nodes"] if "carol" in r]) == 3, "not vacuous"
        assert len(before["node_embeddings"]) == 2, "not vacuous"

        assert [m.version for m in migrations.migrate(conn, [m for m in every if m.version <= target])] == [target]
        assert _rows(conn) == before, "every row kept as it was"
        batch = BATCH_BEFORE.split(";", 1)[1].replace("SELECT count(*) FROM", "SELECT replayed FROM")
        assert conn.execute(batch.encode()).fetchall() == [(True,)] * 3
        assert _rows(conn) == before, "the replay wrote nothing"
        changed = batch.replace("carol prefers tabs", "carol prefers spaces")
        assert _sqlstate(conn, changed) == "PR409"
        conn.execute(batch.replace("-000000000003", "-000000000004").encode())
        for owner in ("alice", "bob", "carol"):
            assert conn.execute("SELECT * FROM prme.verify_journal(%s)", [owner]).fetchall() == []
        replay = "SELECT r.matches FROM prme.nodes AS n, LATERAL prme.replay_node(n.user_id, n.id) AS r"
        assert {row[0] for row in conn.execute(replay)} == {True}
        new = conn.execute(
            "SELECT count(*), bool_and(search = array_to_tsvector(prme._owner_lexemes(user_id, content)))"
            " FROM prme.nodes WHERE id = 'cccccccc-2500-4000-8000-000000000004'"
        ).fetchone()
        assert new == (1, True)
        assert conn.execute(
            "SELECT count(*) FROM prme.node_embeddings WHERE node_id = 'cccccccc-2500-4000-8000-000000000004'"
        ).fetchone() == (1,)


# -- 0027_recall_thresholds: the same answers with fewer candidates read -----------------------


def recall_corpus(conn: psycopg.Connection[Any], seed: int) -> Callable[[], list[Any]]:
    """Two owners' memories with random 8-dimension unit vectors, varied strength, some
    confirmed and some archived ("big" 120, "alice" 15); returns a function answering every
    recall over them: by words and by meaning, each max_count and scope."""
    rng = random.Random(seed)
    conn.execute("SELECT prme.register_embedding_model('unit-8', 8)")
    words = ["tea", "trains", "rivers", "coffee", "maps", "jazz"]
    for owner, count in (("big", 120), ("alice", 15)):
        for i in range(count):
            vector = [rng.uniform(-1, 1) for _ in range(8)]
            norm = sum(x * x for x in vector) ** 0.5
            node = conn.execute(
                "SELECT id FROM prme.add_node(%s, %s, scope => %s, salience_base => %s::numeric,"
                " confidence_base => %s::numeric, decay_profile => %s, embedding => %s::real[],"
                " embedding_model => 'unit-8')",
                [
                    owner,
                    f"{owner} {' '.join(rng.sample(words, rng.randint(1, 3)))} note {i % 7}",
                    rng.choice(["personal", "work"]),
                    round(rng.random(), 4),
                    round(rng.random(), 4),
                    rng.choice(["permanent", "slow", "medium", "fast"]),
                    [x / norm for x in vector],
                ],
            ).fetchone()[0]  # type: ignore[index]
            if i % 9 == 0:
                reinforce = "SELECT prme.reinforce(node_id => %s, user_id => %s, request_id => %s)"
                conn.execute(reinforce, [node, owner, uuid.uuid4()])
            if i % 13 == 0:
                conn.execute("SELECT prme.archive_node(user_id => %s, node_id => %s)", [owner, node])
    queries = [[rng.uniform(-1, 1) for _ in range(8)] for _ in range(3)]
    recall = (
        "SELECT * FROM prme.recall(%s, %s, scopes => %s, max_count => %s, as_of => '2027-03-01',"
        " query_embedding => %s::real[], embedding_model => 'unit-8')"
    )

    def answers() -> list[Any]:
        return [
            conn.execute(recall, [owner, text, scopes, max_count, vector]).fetchall()
            for owner in ("big", "alice")
            for text in ("tea", "trains jazz please", "coffee maps rivers tea", "nothing shared")
            for scopes in (None, ["work"])
            for max_count in (1, 3, 10, 50)
            for vector in (*queries, None)
        ]

    return answers


def assert_same_answers(before: list[Any], after: list[Any], tolerance: Callable[[int], float]) -> None:
    """recall_corpus's answers alike: the same memories in the same order, the i-th recall's
    scores within tolerance(i), every other column equal."""
    for i, (old, new) in enumerate(zip(before, after, strict=True)):
        assert [(r[0], r[5]) for r in new] == [(r[0], r[5]) for r in old], "same memories, same order"
        for old_row, new_row in zip(old, new, strict=True):
            assert new_row[1:5] == pytest.approx(old_row[1:5], abs=tolerance(i))
            assert new_row[5:] == old_row[5:]


def test_upgrading_to_recall_thresholds_answers_every_recall_as_before(pg_server: testing.Server) -> None:
    """0027 prunes recall's candidates harder (a strength ceiling per candidate, and a
    threshold from a few candidates scored exactly): every recall, by words and by meaning,
    for every max_count and scope, with archived memories and memories of varied strength,
    answers exactly as 0026's did, for an owner whose vectors are scanned and for one whose
    are indexed (120: few enough for the index to find the nearest exactly). The index
    built before takes ef_construction 200 for its later inserts."""
    with filled_before(pg_server, "recall_thresholds") as (conn, every, target):
        answers = recall_corpus(conn, 27)

        # big's vectors go into the HNSW index first (recall's approximate path); alice's are
        # scanned exactly (the path whose threshold 0027 tightens).
        assert conn.execute("SELECT indexed FROM prme.index_embeddings('unit-8', min_vectors => 50)").fetchone() == (
            120,
        )
        before = answers()
        assert sum(map(len, before)) > 1500 and len({len(a) for a in before}) > 3, "not vacuous"
        assert [m.version for m in migrations.migrate(conn, [m for m in every if m.version <= target])] == [target]
        assert answers() == before, "every recall answers as before"
        options = "SELECT reloptions FROM pg_class WHERE relname = prme._vector_index('unit-8')"
        assert conn.execute(options).fetchone() == (["ef_construction=200"],), "big's index builds on with 200"


# -- 0028_long_memory_part_embeddings: parts planned before it keep their plan and finish ------

LONG_BEFORE = """
SELECT prme.submit_operation('alice', %(op)s, 2, 'add_node', '{}', prme.payload_hash(p), p)
FROM (SELECT jsonb_build_object('content', %(content)s::text, 'token_budget', 6)) AS v (p);
"""
PART_COLUMNS = (
    "SELECT (user_id, operation_id, part_no, tokenizer, token_start, token_end, char_start, char_end, sha256, state,"
    " planned_at, validated_at)::text FROM prme.operation_parts ORDER BY 1"
)


def test_upgrading_to_long_memory_part_embeddings_keeps_every_plan_and_finishes_it_with_vectors(
    pg_server: testing.Server,
) -> None:
    """Parts planned (and partly validated) before 0028 keep every column and become pending;
    after the upgrade a worker with an embedder embeds them and the memory is created with the
    pooled vector; a memory committed before keeps its parts and gets no vector from them."""
    import numpy as np

    from prme_pg import worker as ledger_worker
    from prme_pg.embeddings import load_embedder
    from prme_pg.long_memories import plan_parts, pool

    in_flight = " ".join(f"alice wrote note {i} about the kitchen" for i in range(6))
    done = " ".join(f"bob planned trip {i} to Kyoto" for i in range(4))
    with filled_before(pg_server, "long_memory_part_embeddings") as (conn, every, target):
        conn.execute(LONG_BEFORE, {"op": "long-done", "content": done})
        conn.execute("SELECT * FROM prme.run_operations(10, 'before', 64)")
        conn.execute(LONG_BEFORE, {"op": "long-in-flight", "content": in_flight})
        conn.execute("SELECT * FROM prme.run_operations(10, 'before', 2)")  # 2 of its parts validated
        state = dict(conn.execute("SELECT operation_id, state FROM prme.operations").fetchall())
        assert state == {"long-in-flight": "processing", "long-done": "committed"}, "not vacuous"
        assert conn.execute("SELECT count(*) FROM prme.operation_parts WHERE state = 'validated'").fetchone() == (
            len(plan_parts(done, 6)) + 2,
        )
        parts_before = [r[0] for r in conn.execute(PART_COLUMNS)]
        before = {t: rows for t, rows in _rows(conn).items() if t != "operation_parts"}

        assert [m.version for m in migrations.migrate(conn, [m for m in every if m.version <= target])] == [target]
        assert [r[0] for r in conn.execute(PART_COLUMNS)] == parts_before, "every part kept as it was"
        assert {t: rows for t, rows in _rows(conn).items() if t != "operation_parts"} == before
        assert conn.execute("SELECT DISTINCT embedding_state FROM prme.operation_parts").fetchall() == [("pending",)]

        model = load_embedder("wordllama")
        dsn = conn.info.dsn
        assert (
            ledger_worker.run_worker(
                dsn, worker="after", until_idle=True, install_signal_handlers=False, embedder=model
            )
            == 1
        )
        assert conn.execute("SELECT state FROM prme.operations WHERE operation_id = 'long-in-flight'").fetchone() == (
            "committed",
        )
        row = conn.execute(
            "SELECT n.content, e.model_id, e.embedding::real[] FROM prme.nodes AS n"
            " JOIN prme.node_embeddings AS e ON e.user_id = n.user_id AND e.node_id = n.id"
            " WHERE n.id = prme.derived_id('long-in-flight')"
        ).fetchone()
        assert row is not None and row[0] == in_flight and row[1] == model.model_id
        expected = pool(model.embed([in_flight[a:b] for a, b in plan_parts(in_flight, 6)]))
        np.testing.assert_allclose(np.asarray(row[2], dtype=np.float32), expected, atol=1e-6)
        assert conn.execute(
            "SELECT embedding_state, count(*) FROM prme.operation_parts GROUP BY 1 ORDER BY 1"
        ).fetchall() == [("embedded", len(plan_parts(in_flight, 6))), ("pending", len(plan_parts(done, 6)))]


# -- 0029_find_nodes_by_meaning: the review search by words answers as before -----------------


def test_upgrading_to_find_nodes_by_meaning_keeps_every_row_and_every_answer_by_words(
    pg_server: testing.Server,
) -> None:
    """0029 replaces prme.find_nodes with a signature that takes a query vector: every row is
    kept, every search by words (the old call, by name) answers as before, and a query vector
    then finds a memory that shares no word with the query."""
    with filled_before(pg_server, "find_nodes_by_meaning") as (conn, every, target):
        rng = random.Random(29)
        conn.execute("SELECT prme.register_embedding_model('unit-8', 8)")
        topics = ["tea", "trains", "rivers"]
        for i in range(30):
            vector = [rng.uniform(-1, 1) for _ in range(8)]
            norm = sum(x * x for x in vector) ** 0.5
            conn.execute(
                "SELECT prme.add_node('dora', %s, embedding => %s::real[], embedding_model => 'unit-8')",
                [f"dora note {i} about {topics[i % 3]}", [x / norm for x in vector]],
            )
        conn.execute(
            "SELECT prme.archive_node('dora', id) FROM prme.nodes WHERE user_id = 'dora' AND content LIKE '%%rivers'"
        )
        find = (
            "SELECT id, lifecycle_state, version FROM prme.find_nodes(user_id => %s, query => %s, "
            "lifecycle_states => %s::text[], max_count => %s)"
        )

        def answers() -> list[Any]:
            return [
                conn.execute(find, [owner, words, states, count]).fetchall()
                for owner in ("dora", "alice")
                for words in ("tea", "dora trains", "nothing shared", None)
                for states in (None, ["archived"])
                for count in (5, 50)
            ]

        before_rows, before_answers = _rows(conn), answers()
        assert sum(map(len, before_answers)) > 100, "not vacuous"

        assert [m.version for m in migrations.migrate(conn, [m for m in every if m.version <= target])] == [target]

        assert _rows(conn) == before_rows, "every row kept as it was"
        assert answers() == before_answers, "every search by words answers as before"
        # One stored vector as the query: its memory is found by meaning, sharing no word.
        node_id, vector = conn.execute(
            "SELECT node_id, embedding::text FROM prme.node_embeddings WHERE user_id = 'dora' ORDER BY node_id LIMIT 1"
        ).fetchone()
        found = conn.execute(
            "SELECT id FROM prme.find_nodes('dora', 'nothing shared', query_embedding => %s::real[], "
            "embedding_model => 'unit-8', max_count => 1)",
            [vector.replace("[", "{").replace("]", "}")],
        ).fetchall()
        assert found == [(node_id,)]


# -- 0030_recall_plan_kept: recall's statement made static answers as before --------------------


def test_upgrading_to_recall_plan_kept_answers_every_recall_as_before(pg_server: testing.Server) -> None:
    """0030 makes recall's main statement static (its plan kept) and reads a finalist's cosine
    in double precision instead of pgvector's single: every recall, by words and by meaning,
    for an owner whose vectors are scanned and for one whose are indexed, returns the same
    memories in the same order, each score within 1e-6 of 0029's (by words within 1e-9: a
    kept plan may add a memory's word weights in another order). The statement is run often
    enough after the upgrade for PostgreSQL to switch to a kept plan."""
    with filled_before(pg_server, "recall_plan_kept") as (conn, every, target):
        answers = recall_corpus(conn, 30)
        conn.execute("SELECT prme.index_embeddings('unit-8', min_vectors => 50)")
        before = answers()
        assert sum(map(len, before)) > 1500 and len({len(a) for a in before}) > 3, "not vacuous"
        assert [m.version for m in migrations.migrate(conn, [m for m in every if m.version <= target])] == [target]
        for after in (answers(), answers()):  # the second pass runs on PostgreSQL's kept plan
            # Every fourth recall is by words alone.
            assert_same_answers(before, after, lambda i: 1e-9 if i % 4 == 3 else 1e-6)


def test_upgrading_to_recall_lighter_keeps_every_word_and_answer(pg_server: testing.Server) -> None:
    """0031 makes prme._owner_lexemes PL/pgSQL (its plans kept) and searches a small HNSW graph
    with a shorter candidate list: the words of every kind of text are keyed as before (what
    nodes.search holds and recall looks up), no row changes, and every recall, by words and by
    meaning, scanned and through the index (120 vectors: found exactly either way), answers
    as before."""
    texts = [
        "Alice prefers TABS; she's tried spaces (twice)!",
        "ponies, buses, glasses & the churches' bells",
        "Ünïcode wörds — with dashes… and 「CJK」 punctuation\ufeff",
        "the a an of",  # stop words only
        "",
        "x" * 101 + " short",
    ]
    lexemes = "SELECT prme._owner_lexemes(o, t) FROM unnest(%s::text[]) AS t, unnest(ARRAY['alice', 'ünï', '']) AS o"
    with filled_before(pg_server, "recall_lighter") as (conn, every, target):
        answers = recall_corpus(conn, 31)
        conn.execute("SELECT prme.index_embeddings('unit-8', min_vectors => 50)")
        words_before = conn.execute(lexemes, [texts]).fetchall()
        rows_before = _rows(conn)
        before = answers()
        assert sum(map(len, before)) > 1500 and len({len(a) for a in before}) > 3, "not vacuous"
        assert any(len(w[0]) > 3 for w in words_before) and ([],) in words_before, "not vacuous"
        assert [m.version for m in migrations.migrate(conn, [m for m in every if m.version <= target])] == [target]
        assert conn.execute(lexemes, [texts]).fetchall() == words_before
        assert _rows(conn) == rows_before
        for after in (answers(), answers()):  # the second pass on PostgreSQL's kept plans
            assert_same_answers(before, after, lambda i: 1e-9)


# -- 0032_recall_bounded_pending_words: few words wait for the index; recall as before -----------


def test_upgrading_to_recall_bounded_pending_words_merges_and_bounds_pending_words(pg_server: testing.Server) -> None:
    """0032 keeps at most 256 kB of words in the word index's pending list (every recall reads
    it through) and makes prme._hnsw_ef_search PL/pgSQL: the words waiting before it are
    merged by the upgrade; a burst of writes after it leaves at most 256 kB waiting (before
    it, 4 MB could); no row changes; every recall, by words and by meaning, scanned and
    through the index, answers as before."""
    pending = "SELECT pending_pages FROM pgstatginindex('prme.nodes_search_idx')"
    burst = (
        "SELECT prme.add_node('alice', 'alice keeps bees ' || n || ' ' || md5(n::text) || ' hive' || n %% 97 || "
        " ' field' || n %% 89 || ' honey' || n %% 83) FROM generate_series(%s::integer, %s::integer) AS n"
    )
    with filled_before(pg_server, "recall_bounded_pending_words") as (conn, every, target):
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        answers = recall_corpus(conn, 32)
        conn.execute("SELECT prme.index_embeddings('unit-8', min_vectors => 50)")
        conn.execute(burst, [1, 1500])
        assert conn.execute(pending).fetchone()[0] > 40, "a burst of writes waits in a long list"  # type: ignore[index]
        rows_before = _rows(conn)
        before = answers()
        assert sum(map(len, before)) > 1500 and len({len(a) for a in before}) > 3, "not vacuous"
        assert [m.version for m in migrations.migrate(conn, [m for m in every if m.version <= target])] == [target]
        assert conn.execute(pending).fetchone() == (0,)
        assert _rows(conn) == rows_before
        for after in (answers(), answers()):  # the second pass on PostgreSQL's kept plans
            assert_same_answers(before, after, lambda i: 1e-9)
        conn.execute(burst, [1501, 3000])
        waiting = conn.execute(pending).fetchone()[0]  # type: ignore[index]
        assert 0 < waiting <= 33, "at most 256 kB (32 pages) and the page it overflows"
        bees = "SELECT count(*) FROM prme.recall('alice', 'bees', max_count => 1000) WHERE content LIKE 'alice keeps%'"
        assert conn.execute(bees).fetchone() == (1000,)
