"""Issue 17, item 5 (client side): every pooled call runs under a statement_timeout the client sets.

Before: the pools' connections ran with the server's default (no timeout), so one owner's
call that took 42 s of database CPU held its connection for 42 s. Now each new pool
connection gets ``statement_timeout`` (30 s by default, configurable, None for the
server's setting). A call that runs longer is cancelled by the server: 57014
(``psycopg.errors.QueryCanceled``), nothing written, the connection usable again.

The slow call is real: a trigger on the test clone's ``prme.nodes`` sleeps for a content
that asks for it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest

from prme_pg import AsyncMemoryClient, MemoryClient
from prme_pg.backends.postgres import DEFAULT_STATEMENT_TIMEOUT
from prme_pg.sqlstate import database_unavailable
from tests.hostile_files import install_trigger


@pytest.fixture
def slow_dsn(db_dsn: str) -> str:
    """The clone, where adding a memory whose content is ``sleep N`` takes N seconds."""
    sleep = "IF NEW.content LIKE 'sleep %' THEN PERFORM pg_sleep(split_part(NEW.content, ' ', 2)::float8); END IF;"
    return install_trigger(db_dsn, "prme.nodes", sleep)


def _count(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM prme.nodes").fetchone()
    assert row is not None
    return int(row[0])


def _setting(client: MemoryClient) -> str:
    pool: Any = getattr(client.backend, "pool")  # noqa: B009 - the PostgreSQL backend's pool
    with pool.connection() as conn:
        return str(conn.execute("SHOW statement_timeout").fetchone()[0])


def test_pool_connections_get_the_default_statement_timeout(db_dsn: str) -> None:
    assert DEFAULT_STATEMENT_TIMEOUT == 30.0
    with MemoryClient(db_dsn, min_size=2, max_size=2) as memory:
        assert _setting(memory) == "30s"
    with MemoryClient(db_dsn, max_size=1, statement_timeout=2.5) as memory:
        assert _setting(memory) == "2500ms"
    with psycopg.connect(db_dsn) as conn:
        server = conn.execute("SHOW statement_timeout").fetchone()
    with MemoryClient(db_dsn, max_size=1, statement_timeout=None) as memory:
        assert server is not None and _setting(memory) == server[0]


@pytest.mark.parametrize("bad", [0, -1, 86401, "30s", True])
def test_a_statement_timeout_that_is_not_a_duration_is_refused(db_dsn: str, bad: Any) -> None:
    with pytest.raises(ValueError, match="statement_timeout"):
        MemoryClient(db_dsn, statement_timeout=bad)


def test_a_call_running_past_the_timeout_is_cancelled_and_writes_nothing(slow_dsn: str) -> None:
    with MemoryClient(slow_dsn, max_size=1, statement_timeout=0.3) as memory:
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled) as caught:
            memory.add_node("sleep 5", user_id="alice")
        assert time.monotonic() - started < 3  # cancelled, not waited for
        assert database_unavailable(caught.value)  # retry later: not the caller's input
        assert _count(slow_dsn) == 0
        node = memory.add_node("quick", user_id="alice")  # the connection is usable again
        assert memory.get_node(node.id, user_id="alice").content == "quick"
    with MemoryClient(slow_dsn, max_size=1, statement_timeout=5) as memory:
        memory.add_node("sleep 0.5", user_id="alice")  # within its bound
    assert _count(slow_dsn) == 2


def test_the_async_client_sets_it_too(slow_dsn: str) -> None:
    async def run() -> None:
        async with AsyncMemoryClient(slow_dsn, max_size=1, statement_timeout=0.3) as memory:
            with pytest.raises(psycopg.errors.QueryCanceled):
                await memory.add_node("sleep 5", user_id="alice")
            await memory.add_node("quick", user_id="alice")

    asyncio.run(run())
    assert _count(slow_dsn) == 1
