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
* :func:`locate` names the partition and shard of an owner;
* :func:`move_owner` moves an owner to another shard, its event stream going on
  without gap or duplicate.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import Jsonb

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
    "move_owner",
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


def shard_conninfo(dsn: str) -> str:
    """A shard's connection string as PL/Proxy can use it: ``key=value`` form.

    PL/Proxy appends `` user='...'`` to a partition's connect string, which a URL cannot take
    (``database "prme  user='postgres'" does not exist``), so a URL (``postgresql://``,
    ``postgres://``) is converted by psycopg's conninfo helpers; a ``key=value`` string is kept
    exactly as given (so ``shard move --to`` matches what ``shard init`` stored). Anything
    libpq cannot parse is InvalidInput.
    """
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise InvalidInput(f"{dsn!r} is not a connection string: {str(exc).strip().splitlines()[0]}") from None
    if dsn.startswith(("postgresql://", "postgres://")):
        return make_conninfo("", **params)
    return dsn


def init_cluster(proxy_conn: psycopg.Connection[Any], shards: Sequence[str], partitions: int = 16) -> ClusterDefinition:
    """Write the cluster definition: ``partitions`` logical partitions spread round-robin over ``shards``.

    Replaces a previous definition. Refused (InvalidInput) unless ``partitions`` is a power
    of two at least as large as the number of shards, and the shards are distinct. URL-form
    shards are stored in ``key=value`` form (:func:`shard_conninfo`).
    """
    shards = [shard_conninfo(dsn) for dsn in shards]
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
        create = sql.SQL("CREATE SERVER prme_cluster FOREIGN DATA WRAPPER plproxy OPTIONS ({})")
        proxy_conn.execute(create.format(options))
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
                    f"shards {first} and {shard} have the same migrations but a different API; "
                    "the proxy was not changed"
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


# -- moving an owner ------------------------------------------------------------------

#: Tables whose rows are not copied as they are: the stream is exported through
#: prme.operation_events() and imported with its seq; the offset is computed anew.
_STREAM_TABLES = ("operation_events", "imported_operation_events", "owner_streams")

_OWNER_TABLES_SQL = """
SELECT c.relname,
       array_agg(a.attname::text ORDER BY a.attnum) FILTER (WHERE a.attgenerated = '')
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = 'prme' AND c.relkind = 'r'
  AND EXISTS (SELECT FROM pg_catalog.pg_attribute AS u
              WHERE u.attrelid = c.oid AND u.attname = 'user_id' AND NOT u.attisdropped)
GROUP BY c.relname
ORDER BY c.relname
"""

#: Seconds a move waits for calls already routed to the source to finish.
MOVE_DRAIN_TIMEOUT = 30.0


@dataclass(frozen=True)
class MoveResult:
    """What ``prme-pg shard move`` did."""

    user_id: str
    source: str
    target: str
    partition: int
    rows: dict[str, int]
    events: int
    last_seq: int
    seq_offset: int


def _owner_tables(conn: psycopg.Connection[Any]) -> dict[str, list[str]]:
    return {str(name): list(columns) for name, columns in conn.execute(_OWNER_TABLES_SQL).fetchall()}


def _wait(predicate: Any, what: str, timeout: float = MOVE_DRAIN_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise MigrationError(f"gave up after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def _set_route(proxy_conn: psycopg.Connection[Any], user_id: str, partition: int | None, *, delete: bool) -> None:
    if delete:
        proxy_conn.execute("DELETE FROM prme_routing.owner_routes WHERE user_id = %s", (user_id,))
        return
    proxy_conn.execute(
        "INSERT INTO prme_routing.owner_routes (user_id, partition_no) VALUES (%s, %s) "
        "ON CONFLICT (user_id) DO UPDATE SET partition_no = EXCLUDED.partition_no, moved_at = now()",
        (user_id, partition),
    )


def _drain_proxy(proxy_conn: psycopg.Connection[Any]) -> None:
    """Wait until no call that started on this proxy before now is still running."""
    row = proxy_conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    frozen_at = row[0]
    query = (
        "SELECT NOT EXISTS (SELECT FROM pg_catalog.pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND state <> 'idle' AND query_start <= %s)"
    )

    def drained() -> bool:
        proxy_conn.execute("SELECT pg_stat_clear_snapshot()")
        found = proxy_conn.execute(query, (frozen_at,)).fetchone()
        return bool(found and found[0])

    _wait(drained, "the calls already routed through the proxy")


def _quiesce(conn: psycopg.Connection[Any]) -> None:
    """Wait until every transaction running on this server now has ended."""
    row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()
    assert row is not None
    xmax = int(row[0])

    def ended() -> bool:
        found = conn.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint").fetchone()
        return found is not None and int(found[0]) >= xmax

    _wait(ended, "the transactions running on the source shard")


def _export_events(conn: psycopg.Connection[Any], user_id: str) -> list[tuple[Any, ...]]:
    events: list[tuple[Any, ...]] = []
    after = 0
    while True:
        page = conn.execute(
            "SELECT seq, operation_id, operation_seq, state, detail, created_at "
            "FROM prme.operation_events(%s, %s, NULL, 10000)",
            (user_id, after),
        ).fetchall()
        if not page:
            return events
        events += page
        after = int(page[-1][0])


def _copy_rows(
    source: psycopg.Connection[Any], target: psycopg.Connection[Any], table: str, columns: list[str], user_id: str
) -> int:
    """COPY one owner's rows of a table from source to target; operations lose accepted_seq (imported)."""
    selected = sql.SQL(", ").join(
        sql.SQL("NULL::bigint") if (table, column) == ("operations", "accepted_seq") else sql.Identifier(column)
        for column in columns
    )
    names = sql.SQL(", ").join(sql.Identifier(column) for column in columns)
    out_query = sql.SQL("COPY (SELECT {} FROM prme.{} WHERE user_id = {}) TO STDOUT (FORMAT binary)").format(
        selected, sql.Identifier(table), sql.Literal(user_id)
    )
    in_query = sql.SQL("COPY prme.{} ({}) FROM STDIN (FORMAT binary)").format(sql.Identifier(table), names)
    chunks: list[bytes] = []
    with source.cursor().copy(out_query) as out:
        chunks.extend(bytes(chunk) for chunk in out)
    with target.cursor().copy(in_query) as into:
        for chunk in chunks:
            into.write(chunk)
    row = target.execute(
        sql.SQL("SELECT count(*) FROM prme.{} WHERE user_id = %s").format(sql.Identifier(table)), (user_id,)
    ).fetchone()
    return int(row[0]) if row else 0


def _counts(conn: psycopg.Connection[Any], tables: Sequence[str], user_id: str) -> dict[str, int]:
    counts = {}
    for table in tables:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM prme.{} WHERE user_id = %s").format(sql.Identifier(table)), (user_id,)
        ).fetchone()
        counts[table] = int(row[0]) if row else 0
    return counts


def move_owner(proxy_conn: psycopg.Connection[Any], user_id: str, target: str) -> MoveResult:
    """Move an owner to another shard, its event stream continuing without gap or duplicate.

    1. routing freezes the owner (calls get 55006, retry) and the move waits for calls
       already routed, and for every transaction running on the source, to end;
    2. the owner's unfinished ledger operations must finish on the source (a worker runs
       there), within MOVE_DRAIN_TIMEOUT;
    3. one transaction on the target: the owner's rows, its events with the seq readers
       saw (prme.imported_operation_events) and an offset above the last one
       (prme.owner_streams); the journal must verify and the stream read back equal,
       else it rolls back;
    4. routing switches to the target, then the source's rows are removed.

    Until step 4 any failure unfreezes the owner where it was.
    """
    definition = cluster_definition(proxy_conn)
    target = shard_conninfo(target)
    if target not in definition.shards:
        raise InvalidInput(f"{target} is not a shard of this cluster: {definition.shards}")
    _number, source, _moved = locate(proxy_conn, user_id)
    if source == target:
        raise InvalidInput(f"{user_id} is already on {target}")
    home = proxy.partition_of(user_id, len(definition.partitions))
    partition = home if definition.partitions[home] == target else definition.partitions_of(target)[0]
    previous = proxy_conn.execute(
        "SELECT partition_no FROM prme_routing.owner_routes WHERE user_id = %s", (user_id,)
    ).fetchone()
    _set_route(proxy_conn, user_id, None, delete=False)  # frozen: calls get 55006
    switched = False
    try:
        _drain_proxy(proxy_conn)
        with _connect(source, application_name="prme-pg shard move") as src, _connect(target) as dst:

            def finished() -> bool:
                row = src.execute(
                    "SELECT NOT EXISTS (SELECT FROM prme.operations WHERE user_id = %s "
                    "AND state NOT IN ('committed', 'rejected'))",
                    (user_id,),
                ).fetchone()
                return bool(row and row[0])

            # No new submits reach the source now; the executor finishes what it has.
            _wait(finished, f"the executor on {source} to finish {user_id}'s operations (is a worker running?)")
            _quiesce(src)
            tables = {t: c for t, c in _owner_tables(src).items() if t not in _STREAM_TABLES}
            with src.transaction():
                src.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                events = _export_events(src, user_id)
                with dst.transaction():
                    rows = _import(src, dst, tables, user_id, events)
            source_counts = _counts(src, list(tables), user_id)
            _set_route(proxy_conn, user_id, partition, delete=partition == home)
            switched = True
            if source_counts != rows:
                raise MigrationError(
                    f"{user_id}'s rows on {source} changed during the move; the target has the copy and the "
                    "routing points there; the source rows were left for you to inspect"
                )
            _remove_owner(src, user_id, [*tables, *_STREAM_TABLES])
    except BaseException:
        if not switched:
            if previous is None:
                _set_route(proxy_conn, user_id, None, delete=True)
            else:
                _set_route(proxy_conn, user_id, previous[0], delete=False)
        raise
    last = int(events[-1][0]) if events else 0
    offset_row = _offset(target, user_id)
    return MoveResult(user_id, source, target, partition, rows, len(events), last, offset_row)


def _import(
    src: psycopg.Connection[Any],
    dst: psycopg.Connection[Any],
    tables: dict[str, list[str]],
    user_id: str,
    events: list[tuple[Any, ...]],
) -> dict[str, int]:
    """Copy the owner into the target in the caller's transaction; verify; return the row counts."""
    dst.execute("SET LOCAL session_replication_role = replica")  # no mirror or append-only triggers
    present = _counts(dst, [*tables, *_STREAM_TABLES], user_id)
    if any(present.values()):
        raise InvalidInput(f"{user_id} already has rows on the target: {present}")
    rows = {table: _copy_rows(src, dst, table, columns, user_id) for table, columns in tables.items()}
    with dst.cursor() as cur:
        cur.executemany(
            "INSERT INTO prme.imported_operation_events "
            "(user_id, seq, operation_id, operation_seq, state, detail, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            [(user_id, seq, op, number, state, Jsonb(detail), at) for seq, op, number, state, detail, at in events],
        )
    last = int(events[-1][0]) if events else 0
    # Events written here from now on get seq >= (a later transaction id) << 20, plus this offset.
    dst.execute(
        "INSERT INTO prme.owner_streams (user_id, seq_offset, imported_through) "
        "SELECT %(user_id)s, greatest(0, %(last)s - (pg_current_xact_id()::text::bigint << 20) + 1), %(last)s",
        {"user_id": user_id, "last": last},
    )
    dst.execute("SET LOCAL session_replication_role = origin")
    problems = dst.execute("SELECT problem, detail FROM prme.verify_journal(%s)", (user_id,)).fetchall()
    if problems:
        raise MigrationError(f"{user_id}'s journal does not verify on the target: {problems[:3]}")
    if _export_events(dst, user_id) != events:
        raise MigrationError(f"{user_id}'s event stream reads back differently on the target")
    return rows


def _remove_owner(conn: psycopg.Connection[Any], user_id: str, tables: Sequence[str]) -> None:
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")  # past the append-only triggers
        for table in tables:
            conn.execute(sql.SQL("DELETE FROM prme.{} WHERE user_id = %s").format(sql.Identifier(table)), (user_id,))


def _offset(dsn: str, user_id: str) -> int:
    with _connect(dsn) as conn:
        row = conn.execute("SELECT seq_offset FROM prme.owner_streams WHERE user_id = %s", (user_id,)).fetchone()
    return int(row[0]) if row else 0
