"""Real PostgreSQL for tests and benchmarks: find one, or start a throwaway cluster.

Resolution order (docs/DESIGN.md section 7):

1. ``PRME_TEST_DSN``: a superuser DSN of a server you run;
2. a throwaway cluster from this machine's PostgreSQL binaries (``initdb`` run as
   the ``postgres`` user when we are root): ``$PG_BINDIR``, else those of ``$PG_MAJOR``
   (``/usr/lib/postgresql/$PG_MAJOR/bin``, and nothing else when it is set), else
   pg_config's, else Debian's newest;
3. testcontainers (the ``test`` extra), when a Docker engine answers: the image
   ``$PRME_TEST_IMAGE``, default ``postgres:$PG_MAJOR`` (15); the tests need pgTAP and
   plpgsql_check in it (tests/docker/Dockerfile builds one);
4. otherwise :class:`NoPostgresError`, which says what to install. Nothing skips.

Databases made here get random names and are dropped again: the server may be
shared with other runs.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from . import migrations

__all__ = [
    "FAST_SETTINGS",
    "NoPostgresError",
    "PgBouncer",
    "PostgresCluster",
    "Server",
    "create_database",
    "drop_database",
    "find_pg_bindir",
    "resolve_server",
]

DEFAULT_PG_MAJOR = "15"


def pg_major() -> str:
    """The PostgreSQL major the harness looks for: ``$PG_MAJOR``, else 15."""
    return os.environ.get("PG_MAJOR") or DEFAULT_PG_MAJOR


def install_hint() -> str:
    major = pg_major()
    return (
        f"prme-pg tests need a real PostgreSQL {major} with pgTAP and plpgsql_check. Either set "
        "PRME_TEST_DSN=postgresql://USER@HOST:PORT/DB (a superuser), or install the server binaries: "
        f"apt-get install postgresql-{major} postgresql-{major}-pgtap postgresql-{major}-plpgsql-check "
        f"postgresql-{major}-cron "
        "(scripts/install-system-deps; another major than the system's needs PostgreSQL's apt "
        "repository: see README.md, 'Set up and run the tests')."
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
    #: A testcontainers container to stop on close (anything with ``stop()``).
    container: Any = None

    def dsn_for(self, dbname: str) -> str:
        params = conninfo_to_dict(self.dsn)
        params["dbname"] = dbname
        return make_conninfo(**params)  # type: ignore[arg-type]

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.destroy()
        if self.container is not None:
            self.container.stop()


def find_pg_bindir() -> Path | None:
    """The directory of initdb/pg_ctl: $PG_BINDIR; $PG_MAJOR's (only it, when set); pg_config's; Debian's newest."""
    if env := os.environ.get("PG_BINDIR"):
        return Path(env)
    if major := os.environ.get("PG_MAJOR"):
        named = Path("/usr/lib/postgresql") / major / "bin"
        return named if (named / "initdb").exists() else None
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
                f"{args[0]} failed ({result.returncode}): {result.stderr.strip()}\n{log}\n{install_hint()}"
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
            raise NoPostgresError(f"no PostgreSQL server binaries found. {install_hint()}")
        cluster = cls(bindir=bindir, settings=dict(settings or {}))
        try:
            cluster.init()
            cluster.start()
        except BaseException:
            cluster.destroy()
            raise
        return cluster


@dataclass
class PgBouncer:
    """A throwaway pgbouncer (session pooling) in front of databases: name -> libpq connstring.

    Used between a PL/Proxy database and its shards (docs/SCALING.md): PL/Proxy drops its
    connection after every remote error, and reconnecting to a local pgbouncer costs a
    fraction of a new server session. ``auth_type = any`` and the user in each connstring:
    for tests and benchmarks only.
    """

    databases: Mapping[str, str]
    port: int = field(default_factory=free_port)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="prme-pg-bouncer-")))
    process: subprocess.Popen[bytes] | None = None

    def dsn(self, name: str, user: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} dbname={name} user={user}"

    def start(self) -> None:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(binary).exists():
            raise NoPostgresError("pgbouncer is not installed: apt-get install pgbouncer (scripts/install-system-deps)")
        entries = "\n".join(f"{name} = {connstring}" for name, connstring in self.databases.items())
        config = self.root / "pgbouncer.ini"
        config.write_text(
            f"[databases]\n{entries}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {self.port}\n"
            "unix_socket_dir =\nauth_type = any\npool_mode = session\nmax_client_conn = 500\n"
            "default_pool_size = 20\nserver_login_retry = 1\nquery_wait_timeout = 3\n"
            f"logfile = {self.root / 'pgbouncer.log'}\npidfile = {self.root / 'pgbouncer.pid'}\n"
        )
        command = [binary, str(config)]
        if os.geteuid() == 0:  # pgbouncer refuses to run as root
            postgres = pwd.getpwnam("postgres")
            for path in (self.root, config):
                os.chown(path, postgres.pw_uid, postgres.pw_gid)
            command = ["runuser", "-u", "postgres", "--", *command]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        first = next(iter(self.databases))
        deadline = time.monotonic() + 10
        while True:
            try:
                psycopg.connect(self.dsn(first), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    error = self.process.stderr.read() if self.process.stderr else b""
                    self.stop()
                    raise NoPostgresError(f"pgbouncer did not start: {error.decode(errors='replace')}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)


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
    if os.environ.get("PG_MAJOR") and not _docker_answers():
        raise NoPostgresError(
            f"PG_MAJOR={pg_major()} but /usr/lib/postgresql/{pg_major()}/bin has no initdb. {install_hint()}"
        )
    if _docker_answers():
        return _container_server(settings)
    raise NoPostgresError(f"no PostgreSQL found. {install_hint()}")


def _container_server(settings: Mapping[str, str] | None) -> Server:
    """A PostgreSQL container through testcontainers (the ``test`` extra), stopped by :meth:`Server.close`."""
    for name in ("testcontainers.community.postgres", "testcontainers.postgres"):  # newer, then older releases
        try:
            module = importlib.import_module(name)
            break
        except ImportError:
            continue
    else:
        raise NoPostgresError(
            "a Docker engine answers but testcontainers is missing: pip install -e '.[test]'. " + install_hint()
        )
    image = os.environ.get("PRME_TEST_IMAGE") or f"postgres:{pg_major()}"
    container = module.PostgresContainer(image, driver=None)
    if settings:
        container = container.with_command(" ".join(f"-c {name}={value}" for name, value in settings.items()))
    container.start()
    return Server(container.get_connection_url(), container=container)


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
