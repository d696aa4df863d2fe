"""``prme-pg schedule``: pg_cron jobs for the executor and nightly maintenance, for real.

The end-to-end test starts its own cluster with ``shared_preload_libraries = pg_cron``
(Debian's postgresql-15-cron, pg_cron 1.4: minute schedules only), installs the jobs with
the CLI and waits for the next minute: the scheduled jobs alone commit a ledger operation
and apply a maintenance patch. It waits up to a minute and a bit, once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from prme_pg import MemoryClient, cli, schedule, testing

CRON_SETTINGS = {
    **testing.FAST_SETTINGS,
    "shared_preload_libraries": "pg_cron",
    "cron.database_name": "postgres",
    # Jobs run in background workers: no libpq connection, so no authentication to set up.
    "cron.use_background_workers": "on",
    "max_worker_processes": "16",
}


@pytest.fixture(scope="module")
def cron_server() -> Iterator[testing.Server]:
    try:
        cluster = testing.PostgresCluster.create(CRON_SETTINGS)
    except testing.NoPostgresError as exc:
        pytest.fail(f"{exc}\n(pg_cron: apt-get install postgresql-15-cron; scripts/install-system-deps does)")
    server = testing.Server(cluster.dsn, cluster)
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_cron")
    yield server
    server.close()


def _words(text: str) -> str:
    """rich wraps long lines at the terminal's width; compare the words."""
    return " ".join(text.split())


def _jobs(server: testing.Server) -> dict[str, tuple[int, str, str, str]]:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT jobname, jobid, schedule, command, database FROM cron.job").fetchall()
    return {row[0]: (row[1], row[2], row[3], row[4]) for row in rows}


def test_prints_the_jobs_with_owners_as_literals(capsys: pytest.CaptureFixture[str]) -> None:
    owners = ["alice", "o'brien", "$cron$"]
    argv = ["schedule", "--dsn", "postgresql://app@db.internal/memories", "--maintenance-schedule", "0 2 * * *"]
    assert cli.main([*argv, *(arg for owner in owners for arg in ("--user", owner))]) == 0
    out = capsys.readouterr().out
    assert "cron.schedule_in_database('prme-executor', '* * * * *', $cron$SELECT count(*) FROM " in out
    assert "prme.run_operations(1000, 'pg_cron')$cron$, 'memories', NULL);" in out
    # The quote is doubled by psycopg; the dollar tag is one that no owner contains.
    assert "ARRAY['alice', 'o''brien', '$cron$']::text[]" in out
    assert "$cron1$SELECT o.user_id" in out and "'0 2 * * *'" in out
    assert "('prme-vector-index', '*/5 * * * *', $cron$SELECT indexed FROM prme.index_embeddings(NULL, 5000)" in out

    assert cli.main(["schedule", "--database", "prme", "--json"]) == 0
    document = capsys.readouterr().out
    assert '"name": "prme-executor"' in document and "prme-maintenance" not in document


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["schedule"], "--database NAME, or --dsn URL"),
        (["schedule", "--database", "prme", "--batch", "0"], "batch must be between 1 and 1000"),
        (["schedule", "--database", "prme", "--index-min-vectors", "0"], "--index-min-vectors must be between 1"),
        (["schedule", "--database", "prme", "--user", "a", "--user", "a"], "an owner is named twice"),
        (["schedule", "--database", "prme", "--user", "a", "--maintenance-job", "x" * 64], "job name"),
    ],
)
def test_usage_errors_are_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    err = _words(capsys.readouterr().err)
    assert message in err and "Traceback" not in err


def test_apply_without_pg_cron_loaded_says_so(db_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["schedule", "--dsn", db_dsn, "--apply"]) == 1
    assert "add pg_cron to shared_preload_libraries" in _words(capsys.readouterr().err)


def _wait_for(what: str, check: Any, seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.5)
    pytest.fail(f"{what} did not happen within {seconds:.0f} s")


@pytest.mark.slow
def test_scheduled_jobs_alone_run_the_ledger_and_maintenance(
    cron_server: testing.Server, capsys: pytest.CaptureFixture[str]
) -> None:
    name = testing.create_database(cron_server, prefix="prme_cron")
    dsn = cron_server.dsn_for(name)
    testing.install_schema(dsn)
    operation_id = uuid.uuid4()
    with MemoryClient(dsn) as memory:
        overdue = memory.add_node(
            "Uses vim",
            user_id="alice",
            confidence_base="0.9",
            stability="stable",
            next_review_at=datetime.now(UTC) - timedelta(days=100),
        )
        bobs = memory.add_node(
            "Uses emacs", user_id="bob", confidence_base="0.9", next_review_at=datetime.now(UTC) - timedelta(days=100)
        )
        memory.submit_operation(operation_id, "add_node", {"content": "prefers tea"}, user_id="alice")
        for fact in ("Carol plays the cello", "Carol lives in Lyon", "Carol is vegetarian"):
            memory.add_node(fact, user_id="carol")  # with its vector: carol's three go into the index

    # pg_cron 1.4 has no second-level schedules: refused before anything is installed.
    assert cli.main(["schedule", "--dsn", dsn, "--apply", "--executor-schedule", "5 seconds"]) == 1
    assert "needs pg_cron 1.5 or later (this server has 1.4" in _words(capsys.readouterr().err)
    assert _jobs(cron_server) == {}

    argv = ["schedule", "--dsn", dsn, "--user", "alice", "--maintenance-schedule", "* * * * *", "--apply"]
    argv += ["--index-schedule", "* * * * *", "--index-min-vectors", "3"]
    assert cli.main(argv) == 0
    assert cli.main(argv) == 0, "installing again updates the jobs"
    jobs = _jobs(cron_server)
    assert set(jobs) == {"prme-executor", "prme-maintenance", "prme-vector-index"}
    assert {job[3] for job in jobs.values()} == {name}
    assert "prme-executor" in capsys.readouterr().out

    # Nothing else runs the executor or maintenance: only the next minute's jobs can.
    with MemoryClient(dsn) as memory:

        def committed() -> bool:
            return memory.get_receipt(operation_id, user_id="alice").state == "committed"

        def decayed() -> bool:
            return memory.get_node(overdue.id, user_id="alice").confidence_base < Decimal("0.9")

        def indexed() -> bool:
            with psycopg.connect(dsn) as conn:
                row = conn.execute("SELECT count(*) FROM prme.node_embeddings WHERE indexed").fetchone()
            return row == (3,)

        _wait_for("the executor job", committed, 75)
        _wait_for("the maintenance job", decayed, 15)
        _wait_for("the vector index job", indexed, 15)
        processing = [
            event
            for event in memory.operation_events(user_id="alice", operation_id=operation_id)
            if event.state == "processing"
        ]
        assert [event.detail["worker"] for event in processing] == ["pg_cron"]
        assert memory.get_node(bobs.id, user_id="bob").confidence_base == Decimal("0.9"), "bob is not in the set"

    with psycopg.connect(cron_server.dsn, autocommit=True) as conn:
        runs = conn.execute(
            "SELECT j.jobname, d.status FROM cron.job_run_details d JOIN cron.job j USING (jobid)"
        ).fetchall()
    assert {job for job, status in runs if status == "succeeded"} == {
        "prme-executor",
        "prme-maintenance",
        "prme-vector-index",
    }

    assert cli.main(["schedule", "--dsn", dsn, "--remove", "--apply"]) == 0
    assert _jobs(cron_server) == {}
    testing.drop_database(cron_server, name)


def test_seconds_schedules_need_pg_cron_1_5() -> None:
    schedule.check_schedule("5 seconds", (1, 5))
    schedule.check_schedule("* * * * *", (1, 4))
    with pytest.raises(schedule.ScheduleError, match=r"needs pg_cron 1\.5"):
        schedule.check_schedule("30 seconds", (1, 4))
