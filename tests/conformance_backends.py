"""The two engines behind the conformance suite, and the fixtures that choose them.

Each test that takes ``engine`` runs twice: on PostgreSQL (a fresh clone of the
template database per test, see conftest.py) and on a DuckDB memory pack in a
temporary folder. The conformance suite (``engine_with_proxy_fixture``) runs a third
time, ``postgres-proxy``: the clients talk to a PL/Proxy database built from
sql/proxy/prme_proxy.sql whose one partition is the clone (docs/SCALING.md). Clients
are the public ones; the few operations no client offers (forcing a column, tampering
with the journal, counting rows) go through a superuser connection or the pack's own DuckDB connection, as a DBA would.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest

from prme_pg import AsyncMemoryClient, MemoryClient, shard, testing
from prme_pg.backends.duckdb import PACK_FILE

ENGINES = ["postgres", "duckdb"]
#: The conformance suite proper (tests/test_conformance.py) runs on the proxy too.
ENGINES_WITH_PROXY = ["postgres", "postgres-proxy", "duckdb"]
_TABLES = ("nodes", "events", "journal", "request_keys")


@dataclass
class Engine:
    """One engine under test: how to open clients on it and reach under them."""

    name: str
    target: str
    clients: list[MemoryClient] = field(default_factory=list)
    #: Where the clients connect when it is not ``target``: a PL/Proxy database in front of it.
    client_target: str | None = None

    @property
    def dsn(self) -> str:
        """What the clients connect to."""
        return self.client_target or self.target

    # -- clients --

    def client(self, **options: Any) -> MemoryClient:
        if self.name == "postgres":
            options.setdefault("max_size", 20)
        client = MemoryClient(self.dsn, **options)
        self.clients.append(client)
        # A pack's DuckDB file is opened by the first call that needs it; open it now, as the
        # tests reach under the client (e.g. count rows after a call refused before any I/O).
        assert client.backend is not None
        return client

    def aclient(self, **options: Any) -> AsyncMemoryClient:
        if self.name == "postgres":
            options.setdefault("max_size", 20)
        return AsyncMemoryClient(self.dsn, **options)

    def close(self) -> None:
        for client in self.clients:
            client.close()

    # -- under the clients --

    def _sql(self, postgres: str, duck: str, params: list[Any]) -> list[tuple[Any, ...]]:
        if self.name == "postgres":
            with psycopg.connect(self.target, autocommit=True) as conn:
                # Bypass the append-only triggers, as only a superuser could.
                conn.execute("SET session_replication_role = replica")
                cur = conn.execute(postgres.encode(), params)
                return cur.fetchall() if cur.description else []
        # Same process as the clients: DuckDB shares the open database instance.
        with duckdb.connect(str(Path(self.target) / PACK_FILE)) as con:
            return con.execute(duck, params).fetchall()

    def count(self, table: str, user_id: str | None = None) -> int:
        assert table in _TABLES
        where = "" if user_id is None else " WHERE user_id = {}"
        pg = f"SELECT count(*) FROM prme.{table}" + where.format("%s")
        dk = f"SELECT count(*) FROM prme.{table}" + where.format("?")
        return int(self._sql(pg, dk, [] if user_id is None else [user_id])[0][0])

    def keys(self, user_id: str | None = None) -> int:
        """Committed idempotency keys: journal records that carry one (a confirmation's key
        is its record) and request_keys rows (keys of calls that journal nothing)."""
        where = "" if user_id is None else " AND user_id = {}"
        pg = (
            "SELECT (SELECT count(*) FROM prme.journal WHERE request_id IS NOT NULL{w})"
            " + (SELECT count(*) FROM prme.request_keys WHERE TRUE{w})"
        )
        params = [] if user_id is None else [user_id, user_id]
        return int(self._sql(pg.format(w=where.format("%s")), pg.format(w=where.format("?")), params)[0][0])

    def counts(self) -> dict[str, int]:
        return {table: self.count(table) for table in _TABLES}

    def force_node(self, node_id: uuid.UUID, **values: Any) -> None:
        """Set columns of a node directly, past every rule (to start from any state)."""
        names = list(values)
        pg = "UPDATE prme.nodes SET " + ", ".join(f"{n} = %s" for n in names) + " WHERE id = %s"
        dk = "UPDATE prme.nodes SET " + ", ".join(f"{n} = ?" for n in names) + " WHERE id = ?"
        self._sql(pg, dk, [*values.values(), node_id])

    def set_record(self, node_id: uuid.UUID, node_version: int, record: str) -> None:
        self._sql(
            "UPDATE prme.journal SET record = %s WHERE node_id = %s AND node_version = %s",
            "UPDATE prme.journal SET record = ? WHERE node_id = ? AND node_version = ?",
            [record, node_id, node_version],
        )

    def delete_record(self, node_id: uuid.UUID, node_version: int) -> None:
        self._sql(
            "DELETE FROM prme.journal WHERE node_id = %s AND node_version = %s",
            "DELETE FROM prme.journal WHERE node_id = ? AND node_version = ?",
            [node_id, node_version],
        )

    def delete_node(self, node_id: uuid.UUID) -> None:
        """Delete a node row and nothing else (its journal stays), past the foreign keys."""
        self._sql("DELETE FROM prme.nodes WHERE id = %s", "DELETE FROM prme.nodes WHERE id = ?", [node_id])

    def key_committed(self, user_id: str, request_id: uuid.UUID) -> bool:
        rows = self._sql(
            "SELECT 1 FROM prme.journal WHERE user_id = %s AND request_id = %s",
            "SELECT 1 FROM prme.journal WHERE user_id = ? AND request_id = ?",
            [user_id, request_id],
        )
        return bool(rows)


@pytest.fixture(name="engine", params=ENGINES)
def engine_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    yield from _engine(request, tmp_path)


@pytest.fixture(name="engine", params=ENGINES_WITH_PROXY)
def engine_with_proxy_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    yield from _engine(request, tmp_path)


def _engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "duckdb":
        eng = Engine(request.param, str(tmp_path / "memories"))
        yield eng
        eng.close()
        return
    # The PostgreSQL half asks for a server (and a fresh clone of the template).
    target = request.getfixturevalue("db_dsn")
    if request.param == "postgres":
        eng = Engine("postgres", target)
        yield eng
        eng.close()
        return
    server: testing.Server = request.getfixturevalue("pg_server")
    proxy_db = testing.create_database(server, template=request.getfixturevalue("proxy_template"), prefix="prme_px")
    try:
        with psycopg.connect(server.dsn_for(proxy_db), autocommit=True) as conn:
            shard.init_cluster(conn, [target], 1)
        eng = Engine("postgres", target, client_target=server.dsn_for(proxy_db))
        yield eng
        eng.close()
    finally:
        testing.drop_database(server, proxy_db)


@pytest.fixture(name="memory")
def memory_fixture(engine: Engine) -> MemoryClient:
    """An open client on the engine under test."""
    return engine.client()


class SteppingClock:
    """A clock for packs that moves one millisecond per reading, from a fixed start."""

    def __init__(self, start: datetime) -> None:
        self.now = start
        self.step = 1000

    def __call__(self) -> datetime:
        from datetime import timedelta

        value = self.now
        self.now = value + timedelta(microseconds=self.step)
        return value


def counting_ids(prefix: int = 0) -> Callable[[], uuid.UUID]:
    """Ids 00000000-...-000000000001, ...-0002, ... (with a prefix in the top bits)."""
    counter = iter(range(1, 1 << 32))
    return lambda: uuid.UUID(int=(prefix << 96) | next(counter))
