"""Operating a sharded deployment: one PL/Proxy database in front of several shards.

The cluster definition lives in the proxy database, as the SQL/MED server
``prme_cluster`` of the ``plproxy`` wrapper: options ``p0`` ... ``pN-1`` (N a power
of two) are the connection strings of the shards the logical partitions map to
(docs/SCALING.md). Everything here reads it from there:

* :func:`init_cluster` writes it (partitions spread round-robin over the shards);
* :func:`migrate_cluster` migrates every shard, refuses to go on when they do not end
  up with the same migrations and API, then installs the proxy functions generated
  from the shards' catalog;
* :func:`cluster_status` asks every shard on its own, so one shard that is down is a
  row saying so, not a failure of the whole report;
* :func:`locate` names the partition and shard of an owner.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from . import migrations, proxy
from .errors import InvalidInput, MigrationError

__all__ = [
    "ClusterDefinition",
    "ShardStatus",
    "cluster_definition",
    "cluster_status",
    "init_cluster",
    "install_proxy",
    "locate",
    "migrate_cluster",
]

#: Seconds a shard may take to accept a connection before it is reported down.
CONNECT_TIMEOUT = 3


@dataclass(frozen=True)
class ClusterDefinition:
    """Partitions (index = partition number) and the shard connection string of each."""

    partitions: tuple[str, ...]

    @property
    def shards(self) -> list[str]:
        """The distinct shards, in the order of their first partition."""
        return list(dict.fromkeys(self.partitions))

    def partitions_of(self, shard: str) -> list[int]:
        return [number for number, dsn in enumerate(self.partitions) if dsn == shard]


@dataclass
class ShardStatus:
    """What one shard says about itself, or why it said nothing."""

    shard: str
    partitions: list[int]
    up: bool
    error: str | None = None
    accepts_writes: bool | None = None
    migrations: list[str] = field(default_factory=list)
    ready: int | None = None
    blocked: int | None = None
    processing: int | None = None
    oldest_ready_age_seconds: float | None = None
    defaults_digest: str | None = None

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _connect(dsn: str, **kwargs: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT, **kwargs)


def init_cluster(proxy_conn: psycopg.Connection[Any], shards: Sequence[str], partitions: int = 16) -> ClusterDefinition:
    """Write the cluster definition: ``partitions`` logical partitions spread round-robin over ``shards``.

    Replaces a previous definition. Refused (InvalidInput) unless ``partitions`` is a power
    of two at least as large as the number of shards, and the shards are distinct.
    """
    if not shards:
        raise InvalidInput("a cluster needs at least one shard")
    if len(set(shards)) != len(shards):
        raise InvalidInput("the same shard is named twice")
    if partitions < len(shards) or partitions & (partitions - 1) or partitions > 1024:
        raise InvalidInput("partitions must be a power of two, at least the number of shards and at most 1024")
    definition = ClusterDefinition(tuple(shards[number % len(shards)] for number in range(partitions)))
    write_definition(proxy_conn, definition)
    return definition


def write_definition(proxy_conn: psycopg.Connection[Any], definition: ClusterDefinition) -> None:
    """Replace the SQL/MED server ``prme_cluster`` with this definition, in one transaction."""
    options = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(f"p{number}"), sql.Literal(dsn))
        for number, dsn in enumerate(definition.partitions)
    )
    with proxy_conn.transaction():
        proxy_conn.execute("CREATE EXTENSION IF NOT EXISTS plproxy")
        proxy_conn.execute("DROP SERVER IF EXISTS prme_cluster CASCADE")
        proxy_conn.execute(sql.SQL("CREATE SERVER prme_cluster FOREIGN DATA WRAPPER plproxy OPTIONS ({})").format(options))
        proxy_conn.execute("CREATE USER MAPPING FOR PUBLIC SERVER prme_cluster")
        proxy_conn.execute(
            "DO $$ BEGIN IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'prme_app') THEN "
            "GRANT USAGE ON FOREIGN SERVER prme_cluster TO prme_app; END IF; END $$"
        )


def cluster_definition(proxy_conn: psycopg.Connection[Any]) -> ClusterDefinition:
    """The definition the proxy database holds (InvalidInput when there is none)."""
    rows = proxy_conn.execute(
        "SELECT substr(o.option_name, 2)::integer, o.option_value "
        "FROM pg_catalog.pg_foreign_server AS s, LATERAL pg_catalog.pg_options_to_table(s.srvoptions) AS o "
        "WHERE s.srvname = 'prme_cluster' AND o.option_name ~ '^p[0-9]+$' ORDER BY 1"
    ).fetchall()
    if not rows:
        raise InvalidInput("this database has no cluster definition: run prme-pg shard init first")
    return ClusterDefinition(tuple(str(row[1]) for row in rows))


def install_proxy(proxy_conn: psycopg.Connection[Any], script: str) -> None:
    """Install (or replace) the proxy functions in one transaction; the cluster definition stays."""
    with proxy_conn.transaction():
        proxy_conn.execute(script.encode("utf-8"))
        proxy_conn.execute(
            "DO $$ BEGIN IF EXISTS (SELECT FROM pg_catalog.pg_foreign_server WHERE srvname = 'prme_cluster') THEN "
            "GRANT USAGE ON FOREIGN SERVER prme_cluster TO prme_app; END IF; END $$"
        )


def _applied(conn: psycopg.Connection[Any]) -> list[str]:
    return [f"{s.version:04d}_{s.name}" for s in migrations.status(conn) if s.applied]


def migrate_cluster(
    proxy_conn: psycopg.Connection[Any], *, on_shard: Any = None
) -> dict[str, list[migrations.Migration]]:
    """Migrate every shard, check that they agree, then install the proxy generated from them.

    Every shard must answer before anything is applied. After migrating, the shards
    must hold the same migrations and generate the same proxy script; otherwise
    MigrationError names the shards that disagree and the proxy is left as it was.
    """
    definition = cluster_definition(proxy_conn)
    connections: dict[str, psycopg.Connection[Any]] = {}
    try:
        for shard in definition.shards:
            try:
                connections[shard] = _connect(shard)
            except psycopg.OperationalError as exc:
                raise MigrationError(f"shard {shard} does not answer; nothing was migrated ({exc})") from exc
        applied: dict[str, list[migrations.Migration]] = {}
        for shard, conn in connections.items():
            if on_shard is not None:
                on_shard(shard)
            applied[shard] = migrations.migrate(conn)
        states = {shard: _applied(conn) for shard, conn in connections.items()}
        scripts = {shard: proxy.generate(conn) for shard, conn in connections.items()}
        first = definition.shards[0]
        for shard in definition.shards[1:]:
            if states[shard] != states[first]:
                raise MigrationError(
                    f"shards disagree: {first} has {states[first][-1:]} and {shard} has {states[shard][-1:]}; "
                    "the proxy was not changed"
                )
            if scripts[shard] != scripts[first]:
                raise MigrationError(
                    f"shards {first} and {shard} have the same migrations but a different API; the proxy was not changed"
                )
        install_proxy(proxy_conn, scripts[first])
        return applied
    finally:
        for conn in connections.values():
            conn.close()


def _defaults_digest(conn: psycopg.Connection[Any]) -> str:
    rows = conn.execute(
        "SELECT stability, review_cadence::text, decay_per_cycle::text FROM prme.maintenance_settings "
        "WHERE user_id = '*' ORDER BY stability"
    ).fetchall()
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


def shard_status(shard: str, partitions: list[int]) -> ShardStatus:
    """Ask one shard for its migrations, readiness, ledger backlog and '*' defaults."""
    status = ShardStatus(shard=shard, partitions=partitions, up=True)
    try:
        with _connect(shard, application_name="prme-pg shard status") as conn:
            status.migrations = _applied(conn)
            row = conn.execute("SELECT accepts_writes FROM prme.readiness()").fetchone()
            status.accepts_writes = bool(row[0]) if row else None
            ledger = conn.execute(
                "SELECT ready, blocked, processing, extract(epoch FROM oldest_ready_age)::float8 "
                "FROM prme.ledger_status()"
            ).fetchone()
            if ledger is not None:
                status.ready, status.blocked, status.processing, status.oldest_ready_age_seconds = ledger
            status.defaults_digest = _defaults_digest(conn)
    except psycopg.Error as exc:
        status.up = False  # through a pooler the connection may open and the first query fail
        status.error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return status


def cluster_status(proxy_conn: psycopg.Connection[Any]) -> list[ShardStatus]:
    """One :class:`ShardStatus` per shard of the proxy's cluster definition."""
    definition = cluster_definition(proxy_conn)
    return [shard_status(shard, definition.partitions_of(shard)) for shard in definition.shards]


def locate(proxy_conn: psycopg.Connection[Any], user_id: str) -> tuple[int, str, bool]:
    """(partition, shard, moved) of an owner: where the proxy sends its calls."""
    definition = cluster_definition(proxy_conn)
    row = proxy_conn.execute(
        "SELECT prme.route(%s), EXISTS (SELECT FROM prme_routing.owner_routes AS r WHERE r.user_id = %s)",
        (user_id, user_id),
    ).fetchone()
    assert row is not None
    number = int(row[0]) & (len(definition.partitions) - 1)
    return number, definition.partitions[number], bool(row[1])
