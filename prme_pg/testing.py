"""Real PostgreSQL for tests and benchmarks: find one, or start a throwaway cluster.

Resolution order (DESIGN.md section 7):

1. ``PRME_TEST_DSN``: a superuser DSN of a server you run;
2. a throwaway cluster from this machine's PostgreSQL binaries (``initdb`` run as
   the ``postgres`` user when we are root);
3. testcontainers, when a Docker engine answers;
4. otherwise :class:`NoPostgresError`, which says what to install. Nothing skips.

Databases made here get random names and are dropped again: the server may be
shared with other runs.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from . import migrations

__all__ = [
    "FAST_SETTINGS",
    "NoPostgresError",
    "PostgresCluster",
    "Server",
    "create_database",
    "drop_database",
    "find_pg_bindir",
    "resolve_server",
]

INSTALL_HINT = (
    "prme-pg tests need a real PostgreSQL 15+ with pgTAP and plpgsql_check. Either set "
    "PRME_TEST_DSN=postgresql://USER@HOST:PORT/DB (a superuser), or install the server binaries: "
    "apt-get install postgresql-15 postgresql-15-pgtap postgresql-15-plpgsql-check postgresql-15-cron "
    "(see README.md, 'Running the tests')."
)

#: Settings for a cluster whose data may be lost: tests that do not crash the server.
FAST_SETTINGS: Mapping[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


class NoPostgresError(RuntimeError):
    """No PostgreSQL could be found or started; the message says what to install."""


@dataclass
class Server:
    """A PostgreSQL server reachable with a superuser DSN."""

    dsn: str
    cluster: PostgresCluster | None = None

    def dsn_for(self, dbname: str) -> str:
        params = conninfo_to_dict(self.dsn)
        params["dbname"] = dbname
        return make_conninfo(**params)  # type: ignore[arg-type]

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.destroy()


def find_pg_bindir() -> Path | None:
    """The directory of initdb/pg_ctl: $PG_BINDIR, pg_config's, or Debian's newest."""
    if env := os.environ.get("PG_BINDIR"):
        return Path(env)
    if pg_config := shutil.which("pg_config"):
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        candidate = Path(out.stdout.strip())
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    for candidate in reversed(debian):
        if (candidate / "initdb").exists():
            return candidate
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresCluster:
    """A throwaway PostgreSQL cluster in a temporary directory, on a free port.

    ``settings`` become ``-c name=value`` server options; pass :data:`FAST_SETTINGS`
    when durability does not matter, nothing when it does (crash tests, benchmarks).
    """

    bindir: Path
    settings: Mapping[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="prme-pg-cluster-")))

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def logfile(self) -> Path:
        return self.root / "server.log"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            # initdb and postgres refuse to run as root.
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            log = self.logfile.read_text(errors="replace")[-2000:] if self.logfile.exists() else ""
            raise NoPostgresError(
                f"{args[0]} failed ({result.returncode}): {result.stderr.strip()}\n{log}\n{INSTALL_HINT}"
            )
        return result

    def init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            postgres = pwd.getpwnam("postgres")
            os.chown(self.root, postgres.pw_uid, postgres.pw_gid)
        self._run(
            "initdb",
            "-D",
            str(self.datadir),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )

    def start(self) -> None:
        options = [f"-p {self.port}", f"-k {self.root}", "-c listen_addresses=127.0.0.1"]
        options += [f"-c {name}={value}" for name, value in self.settings.items()]
        self._run(
            "pg_ctl",
            "-D",
            str(self.datadir),
            "-l",
            str(self.logfile),
            "-w",
            "-t",
            "60",
            "-o",
            " ".join(options),
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "stop")

    def is_running(self) -> bool:
        pidfile = self.datadir / "postmaster.pid"
        return pidfile.exists()

    def destroy(self) -> None:
        with contextlib.suppress(NoPostgresError):
            if self.is_running():
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    @classmethod
    def create(cls, settings: Mapping[str, str] | None = None) -> PostgresCluster:
        bindir = find_pg_bindir()
        if bindir is None:
            raise NoPostgresError(f"no PostgreSQL server binaries found. {INSTALL_HINT}")
        cluster = cls(bindir=bindir, settings=dict(settings or {}))
        try:
            cluster.init()
            cluster.start()
        except BaseException:
            cluster.destroy()
            raise
        return cluster


def _docker_answers() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    result = subprocess.run([docker, "info"], capture_output=True, check=False, timeout=20)
    return result.returncode == 0


def resolve_server(settings: Mapping[str, str] | None = None) -> Server:
    """Find or start the PostgreSQL that tests use, or raise :class:`NoPostgresError`."""
    if dsn := os.environ.get("PRME_TEST_DSN"):
        try:
            psycopg.connect(dsn, connect_timeout=10).close()
        except psycopg.OperationalError as exc:
            raise NoPostgresError(f"PRME_TEST_DSN is set but does not connect: {exc}") from exc
        return Server(dsn)
    if find_pg_bindir() is not None:
        cluster = PostgresCluster.create(settings)
        return Server(cluster.dsn, cluster)
    if _docker_answers():
        try:
            from testcontainers.postgres import PostgresContainer  # type: ignore[import-not-found]
        except ImportError as exc:
            raise NoPostgresError(f"a Docker engine answers but testcontainers is missing. {INSTALL_HINT}") from exc
        container = PostgresContainer("postgres:15", driver=None).start()
        return Server(container.get_connection_url())
    raise NoPostgresError(f"no PostgreSQL found. {INSTALL_HINT}")


def create_database(server: Server, *, template: str | None = None, prefix: str = "prme_test") -> str:
    """Create a UTF8 database with a random name (optionally cloning a template); return its name."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} ENCODING 'UTF8' TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template or "template0")
            )
        )
    return name


def drop_database(server: Server, name: str) -> None:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def install_schema(dsn: str) -> list[migrations.Migration]:
    """Apply every migration to the database at dsn."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return migrations.migrate(conn)
