"""``prme-pg schedule``: the pg_cron jobs that run prme without a worker process.

Three jobs, each a plain call of the API (docs/LEDGER.md, docs/MAINTENANCE.md, docs/RECALL.md):

* ``prme-executor`` runs ``prme.run_operations`` (the ledger's executor) every minute;
* ``prme-vector-index`` runs ``prme.index_embeddings`` for every registered model every five
  minutes: the vectors of owners with many memories move into the HNSW index (vectors are
  computed outside the database; moving them is SQL);
* ``prme-maintenance`` (one job per owner set) writes each owner's maintenance patch and
  applies it in auto mode (decay and the stability increases that need no review), nightly.

pg_cron keeps its jobs in one database (``cron.database_name``) and runs each in the
database it names (``cron.schedule_in_database``, pg_cron 1.4+). Debian 12 ships pg_cron
1.4, whose schedules are cron expressions in minutes (UTC); second-level schedules
(``'5 seconds'``) need pg_cron 1.5, and :func:`check_schedule` refuses them on 1.4.

Owner names are written into the job's command as SQL literals by psycopg
(:class:`psycopg.sql.Literal`), never by string formatting; the jobs are installed with
bound parameters.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .embeddings import INDEX_MIN_VECTORS
from .errors import InvalidInput, PrmeError
from .validation import valid_user_id

__all__ = [
    "EXECUTOR_JOB",
    "INDEX_JOB",
    "MAINTENANCE_JOB",
    "CronJob",
    "ScheduleError",
    "apply",
    "check_schedule",
    "cron_dsn",
    "executor_job",
    "index_job",
    "maintenance_job",
    "render",
    "unschedule",
]

EXECUTOR_JOB = "prme-executor"
INDEX_JOB = "prme-vector-index"
MAINTENANCE_JOB = "prme-maintenance"

#: pg_cron 1.5's interval schedules: '[1-59] seconds'.
SECONDS_SCHEDULE = re.compile(r"^\s*\d+\s+seconds?\s*$")
#: A pg_cron job name is of type name (63 bytes).
MAX_JOB_NAME_BYTES = 63


class ScheduleError(PrmeError):
    """pg_cron is missing, too old for a schedule, or not set up in the database named."""


@dataclass(frozen=True, slots=True)
class CronJob:
    """One pg_cron job: its name, its schedule and the SQL it runs."""

    name: str
    schedule: str
    command: str


def executor_job(*, schedule: str = "* * * * *", batch: int = 1000, worker: str = "pg_cron") -> CronJob:
    """The ledger's executor: up to ``batch`` operations per run, one transaction per run."""
    if not 1 <= batch <= 1000:
        raise InvalidInput("batch must be between 1 and 1000 (prme.run_operations' max_count)")
    command = sql.SQL("SELECT count(*) FROM prme.run_operations({batch}, {worker})").format(
        batch=sql.Literal(batch), worker=sql.Literal(worker)
    )
    return CronJob(EXECUTOR_JOB, schedule, command.as_string(None))


def index_job(*, schedule: str = "*/5 * * * *", min_vectors: int = INDEX_MIN_VECTORS) -> CronJob:
    """The vector index: every registered model's vectors of owners with ``min_vectors`` or more."""
    if not 1 <= min_vectors <= 1_000_000_000:
        raise InvalidInput("--index-min-vectors must be between 1 and 1000000000")
    command = sql.SQL("SELECT indexed FROM prme.index_embeddings(NULL, {min_vectors})").format(
        min_vectors=sql.Literal(min_vectors)
    )
    return CronJob(INDEX_JOB, schedule, command.as_string(None))


def maintenance_job(users: Sequence[str], *, schedule: str = "17 3 * * *", name: str = MAINTENANCE_JOB) -> CronJob:
    """Nightly maintenance in auto mode for a set of owners: one patch per owner, applied in auto mode.

    The set runs as one statement, so as one transaction: split a large set over several jobs.
    """
    if not users:
        raise InvalidInput("maintenance needs at least one owner (--user)")
    for user in users:  # the engine's own rule: a name it refuses would fail the job every night
        try:
            valid_user_id(user)
        except InvalidInput as exc:
            raise InvalidInput(f"--user {user!r}: {exc}") from None
    if len(set(users)) != len(users):
        raise InvalidInput("an owner is named twice")
    owners = sql.SQL(", ").join(sql.Literal(user) for user in users)
    command = sql.SQL(
        "SELECT o.user_id, count(a.op_id) AS applied"
        " FROM unnest(ARRAY[{owners}]::text[]) AS o (user_id)"
        " CROSS JOIN LATERAL prme.maintenance_patch(o.user_id) AS p"
        " LEFT JOIN LATERAL prme.apply_patch(o.user_id, p.patch_id, NULL, 'auto') AS a ON true"
        " GROUP BY o.user_id"
    ).format(owners=owners)
    return CronJob(_job_name(name), schedule, command.as_string(None))


def _job_name(name: str) -> str:
    if not name or len(name.encode("utf-8")) > MAX_JOB_NAME_BYTES:
        raise InvalidInput(f"a pg_cron job name must be 1 to {MAX_JOB_NAME_BYTES} bytes")
    return name


def _dollar_quoted(text: str) -> str:
    """text as a dollar-quoted string whose tag does not occur in it."""
    tag, n = "$cron$", 0
    while tag in text:
        n += 1
        tag = f"$cron{n}$"
    return f"{tag}{text}{tag}"


def render(jobs: Sequence[CronJob], *, database: str, username: str | None = None) -> str:
    """The SQL a DBA runs in pg_cron's database to install the jobs (re-running it updates them)."""
    lines = [
        "-- prme-pg pg_cron jobs: run in the database named by cron.database_name (default postgres).",
        f"-- Each job runs in database {database}"
        + (f" as role {username}." if username else " as the role that runs this script."),
        "-- Schedules are cron expressions in UTC; pg_cron 1.4 (Debian 12) has no second-level schedules.",
    ]
    for job in jobs:
        command = sql.SQL(_dollar_quoted(job.command))  # readable; the tag does not occur in the command
        name, when = sql.Literal(job.name), sql.Literal(job.schedule)
        arguments = sql.SQL(", ").join([name, when, command, sql.Literal(database), sql.Literal(username)])
        lines.append(sql.SQL("SELECT cron.schedule_in_database({});").format(arguments).as_string(None))
    return "\n".join(lines) + "\n"


def render_unschedule(names: Sequence[str], *, database: str) -> str:
    statement = sql.SQL(
        "SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = ANY(ARRAY[{names}]::text[]) AND database = {db};"
    ).format(names=sql.SQL(", ").join(sql.Literal(name) for name in names), db=sql.Literal(database))
    return statement.as_string(None) + "\n"


def cron_dsn(dsn: str) -> tuple[str, str]:
    """(the DSN of pg_cron's database on the same server, the database prme lives in), read from the server."""
    with psycopg.connect(dsn, autocommit=True, application_name="prme-pg schedule") as conn:
        row = conn.execute("SELECT current_database(), current_setting('cron.database_name', true)").fetchone()
    assert row is not None
    database, cron_database = row
    if not cron_database:
        raise ScheduleError(
            "pg_cron is not loaded on this server: add pg_cron to shared_preload_libraries and restart it"
        )
    params = conninfo_to_dict(dsn)
    params["dbname"] = cron_database
    return make_conninfo(**params), str(database)  # type: ignore[arg-type]


def _cron_version(conn: psycopg.Connection[Any]) -> tuple[int, ...]:
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pg_cron'").fetchone()
    if row is None:
        raise ScheduleError(
            f"pg_cron is not installed in database {conn.info.dbname}: run CREATE EXTENSION pg_cron there"
        )
    return tuple(int(part) for part in re.findall(r"\d+", str(row[0])))


def check_schedule(schedule: str, version: tuple[int, ...]) -> None:
    """Refuse a second-level schedule on pg_cron older than 1.5 (it would fail with 'invalid schedule')."""
    if SECONDS_SCHEDULE.match(schedule) and version < (1, 5):
        shown = ".".join(map(str, version))
        raise ScheduleError(
            f"schedule {schedule!r} needs pg_cron 1.5 or later (this server has {shown}): "
            "use a cron expression in minutes, e.g. '* * * * *'"
        )


def apply(dsn: str, jobs: Sequence[CronJob], *, database: str, username: str | None = None) -> list[tuple[str, int]]:
    """Install (or update: pg_cron keys jobs by name and role) the jobs through pg_cron's database at dsn.

    Returns (job name, job id) per job.
    """
    installed: list[tuple[str, int]] = []
    with psycopg.connect(dsn, application_name="prme-pg schedule") as conn, conn.transaction():
        version = _cron_version(conn)
        for job in jobs:
            check_schedule(job.schedule, version)
        for job in jobs:
            row = conn.execute(
                "SELECT cron.schedule_in_database(%s, %s, %s, %s, %s)",
                (job.name, job.schedule, job.command, database, username),
            ).fetchone()
            assert row is not None
            installed.append((job.name, int(row[0])))
    return installed


def unschedule(dsn: str, names: Sequence[str], *, database: str) -> list[str]:
    """Remove the named jobs of database; returns the names of those that existed."""
    with psycopg.connect(dsn, application_name="prme-pg schedule") as conn, conn.transaction():
        _cron_version(conn)
        rows = conn.execute(
            "SELECT jobname, cron.unschedule(jobid) FROM cron.job WHERE jobname = ANY(%s) AND database = %s",
            (list(names), database),
        ).fetchall()
    return [str(row[0]) for row in rows]
