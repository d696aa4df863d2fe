"""What the clients add on top of the engines: argument parsing before any I/O,
opening and closing, pools, the pack's single-process lock and its write-conflict
retries, paging. The engines' own rules are in test_conformance.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed, PoolTimeout
from rich.console import Console

from prme_pg import (
    AsyncMemoryClient,
    IdempotencyConflict,
    InvalidInput,
    MemoryClient,
    NotFoundError,
    PackInUseError,
    PrmeError,
    migrations,
    testing,
)
from prme_pg.backends import Request
from prme_pg.backends.duckdb import FORMAT_VERSION, PACK_FILE, PackClosedError
from prme_pg.backends.postgres import is_dsn
from prme_pg.demo import run_demo

from .conformance_backends import Engine, engine_fixture, memory_fixture  # noqa: F401

ALICE = "alice"


class NoIO:
    """A backend that fails the test if anything reaches it."""

    def execute(self, request: Request[Any]) -> Any:
        raise AssertionError(f"I/O attempted: {request!r}")

    def close(self) -> None:
        pass


@contextmanager
def no_io(client: Any) -> Iterator[None]:
    """Swap the client's backend for NoIO for the duration."""
    original = client._backend
    client._backend = NoIO()
    try:
        yield
    finally:
        client._backend = original


BAD_IDS = ["not-a-uuid", "", "1234", 42, b"0" * 16, 1.5, object()]


@pytest.mark.parametrize("bad", BAD_IDS, ids=[repr(b)[:20] for b in BAD_IDS])
@pytest.mark.parametrize("argument", ["node_id", "evidence_id", "request_id"])
def test_a_malformed_id_raises_value_error_before_any_io(memory: MemoryClient, argument: str, bad: Any) -> None:
    ids: dict[str, Any] = {"node_id": uuid.uuid4(), "evidence_id": None, "request_id": None, argument: bad}
    with no_io(memory), pytest.raises(ValueError, match=f"{argument} must be a UUID") as raised:
        memory.reinforce(ids["node_id"], ids["evidence_id"], user_id=ALICE, request_id=ids["request_id"])
    assert isinstance(raised.value, InvalidInput)


def test_not_found_is_a_lookup_error_and_a_value_error(memory: MemoryClient) -> None:
    """Code written for PRME catches ValueError for "not found"; LookupError keeps working too."""
    for caught in (ValueError, LookupError, NotFoundError):
        with pytest.raises(caught):
            memory.get_node(uuid.uuid4(), user_id=ALICE)


def test_malformed_ids_and_times_fail_before_io_everywhere(memory: MemoryClient) -> None:
    with no_io(memory):
        _call_badly(memory)


def _call_badly(memory: MemoryClient) -> None:
    with pytest.raises(InvalidInput):
        memory.get_node("nope", user_id=ALICE)
    with pytest.raises(InvalidInput):
        memory.archive_node("nope", user_id=ALICE)
    with pytest.raises(InvalidInput):
        memory.replay_node("nope", user_id=ALICE)
    with pytest.raises(InvalidInput):
        memory.add_node("x", user_id=ALICE, node_id="nope")
    with pytest.raises(InvalidInput):
        memory.add_event("x", user_id=ALICE, event_id="nope")
    with pytest.raises(InvalidInput):
        memory.list_nodes(user_id=ALICE, after_node_id="nope")
    with pytest.raises(InvalidInput, match="timezone-aware"):
        memory.add_node("x", user_id=ALICE, next_review_at=datetime(2030, 1, 1))
    with pytest.raises(InvalidInput, match="timezone-aware"):
        memory.add_event("x", user_id=ALICE, occurred_at=datetime(2030, 1, 1))
    with pytest.raises(InvalidInput):
        memory.add_node("x", user_id=ALICE, confidence_base="lots")
    with pytest.raises(InvalidInput):
        memory.add_node("x", user_id=ALICE, confidence_base=True)
    with pytest.raises(InvalidInput):
        list(memory.iter_nodes(user_id=ALICE, page_size=0))


def test_async_client_parses_before_io(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with AsyncMemoryClient(tmp_path / "memories") as memory:
            with no_io(memory), pytest.raises(InvalidInput, match="request_id must be a UUID"):
                await memory.reinforce(uuid.uuid4(), user_id=ALICE, request_id="nope")

    asyncio.run(scenario())


def test_ids_as_text_and_floats_as_shortest_decimals(memory: MemoryClient) -> None:
    node = memory.add_node("x", user_id=ALICE, node_id=str(uuid.UUID(int=5)), confidence_base=0.65, salience_base=1)
    assert node.id == uuid.UUID(int=5)
    assert node.confidence_base == Decimal("0.65") and node.salience_base == 1
    evidence = memory.add_event("e", user_id=ALICE)
    key = uuid.uuid4()
    first = memory.reinforce(str(node.id).upper(), str(evidence.id), user_id=ALICE, request_id=str(key))
    again = memory.reinforce(node.id, evidence.id, user_id=ALICE, request_id="{" + str(key) + "}")
    assert (first.replayed, again.replayed) == (False, True)


# -- opening and closing ------------------------------------------------------------------


def test_targets() -> None:
    assert is_dsn("postgresql://u@h/db") and is_dsn("postgres://h/db")
    assert is_dsn("host=localhost dbname=prme")
    assert not is_dsn("./memories") and not is_dsn("memories") and not is_dsn("a=b")
    assert not is_dsn(Path("dbname=x"))  # a PathLike is always a pack folder
    with pytest.raises(TypeError, match="memory packs"):
        MemoryClient("postgresql://nowhere/db", clock=datetime.now)


def test_default_pack_is_memories_in_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with MemoryClient() as memory:
        memory.add_node("hello", user_id=ALICE)
        assert "pack" in repr(memory) and "open" in repr(memory)
    assert (tmp_path / "memories" / PACK_FILE).is_file()
    assert "closed" in repr(memory)


def test_context_manager_closes_and_close_is_idempotent(engine: Engine) -> None:
    with MemoryClient(engine.target) as memory:
        node = memory.add_node("x", user_id=ALICE)
    assert memory.closed
    memory.close()
    with pytest.raises((PackClosedError, PoolClosed)):
        memory.get_node(node.id, user_id=ALICE)


def test_async_context_manager(engine: Engine) -> None:
    async def scenario() -> None:
        async with AsyncMemoryClient(engine.target) as memory:
            node = await memory.add_node("async", user_id=ALICE)
            assert (await memory.get_node(node.id, user_id=ALICE)).id == node.id
            ids = [n.id async for n in memory.iter_nodes(user_id=ALICE, page_size=1)]
            assert ids == [node.id]
            assert (await memory.replay_node(node.id, user_id=ALICE)).matches
        assert memory.closed
        await memory.close()

    asyncio.run(scenario())


def test_a_folder_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a pack")
    with pytest.raises(PrmeError, match="not a folder"):
        MemoryClient(tmp_path / "file")


def test_a_pack_from_a_newer_prme_pg_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "memories"
    with MemoryClient(path) as memory:  # the pack file is made by the first call that needs it
        memory.list_nodes(user_id=ALICE)
    with duckdb.connect(str(path / PACK_FILE)) as con:
        con.execute("UPDATE prme.pack_info SET value = '99' WHERE key = 'format_version'")
    with pytest.raises(PrmeError, match="format 99"):
        MemoryClient(path).list_nodes(user_id=ALICE)


def test_a_format_1_pack_keeps_its_keys_in_format_2(tmp_path: Path) -> None:
    """A pack written before issue 15 kept a confirmation's key in request_keys; opening it
    moves each key into the journal record it names (format 2): every key still replays and
    still conflicts, the journal verifies, and an older prme-pg would now refuse the pack."""
    path = tmp_path / "memories"
    with MemoryClient(path) as memory:
        node = memory.add_node("prefers tea", user_id=ALICE)
        other = memory.add_node("prefers coffee", user_id=ALICE)
        key = uuid.uuid4()
        memory.reinforce(node.id, user_id=ALICE, request_id=key)
    with duckdb.connect(str(path / PACK_FILE)) as con:  # back to format 1: the key as a row
        con.execute("DROP INDEX prme.journal_request_key")
        con.execute(
            "INSERT INTO prme.request_keys SELECT user_id, key_namespace, request_id, 'reinforce', node_id,"
            " evidence_id, node_version, recorded_at FROM prme.journal WHERE request_id IS NOT NULL"
        )
        con.execute("ALTER TABLE prme.journal DROP COLUMN key_namespace")
        con.execute("UPDATE prme.pack_info SET value = '1' WHERE key = 'format_version'")
    with MemoryClient(path) as memory:
        assert memory.reinforce(node.id, user_id=ALICE, request_id=key).replayed
        with pytest.raises(IdempotencyConflict):
            memory.reinforce(other.id, user_id=ALICE, request_id=key)
        assert memory.verify_journal(user_id=ALICE) == []
    with duckdb.connect(str(path / PACK_FILE)) as con:
        assert con.execute("SELECT count(*) FROM prme.request_keys").fetchone() == (0,)
        assert con.execute("SELECT key_namespace FROM prme.journal WHERE request_id = ?", [key]).fetchall() == [
            ("default",)
        ]
        assert con.execute("SELECT value FROM prme.pack_info WHERE key = 'format_version'").fetchone() == (
            str(FORMAT_VERSION),
        )


_HOLDER = """
import sys
from prme_pg import MemoryClient
memory = MemoryClient(sys.argv[1])
memory.list_nodes(user_id="alice")  # opens the pack (a client opens it on the first call needing it)
print("ready", flush=True)
sys.stdin.read()
memory.close()
"""


def test_a_pack_in_use_by_another_process_says_so(tmp_path: Path) -> None:
    path = tmp_path / "memories"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(PackInUseError, match="in use by process") as raised:
            MemoryClient(path).list_nodes(user_id=ALICE)
        assert str(path) in str(raised.value) and str(holder.pid) in str(raised.value)
        assert raised.value.path == path
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)
    with MemoryClient(path) as memory:  # free again once the other process is gone
        assert memory.list_nodes(user_id=ALICE) == []


def test_a_second_process_gets_pack_in_use(tmp_path: Path) -> None:
    path = tmp_path / "memories"
    with MemoryClient(path) as memory:
        memory.list_nodes(user_id=ALICE)  # opens the pack
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys\nfrom prme_pg import MemoryClient, PackInUseError\n"
                "try:\n    MemoryClient(sys.argv[1]).list_nodes(user_id='alice')\n"
                "except PackInUseError as exc:\n    print(exc)\n",
                str(path),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    assert "is in use by process" in probe.stdout and str(path) in probe.stdout


# -- the pack's lock and conflicts ---------------------------------------------------------


def test_two_clients_of_one_pack_in_one_process_share_its_lock(tmp_path: Path) -> None:
    path = tmp_path / "memories"
    with MemoryClient(path) as first, MemoryClient(path) as second:
        node = first.add_node("shared", user_id=ALICE)
        key = uuid.uuid4()
        barrier = threading.Barrier(16)
        results: list[bool] = []

        def confirm(client: MemoryClient) -> None:
            barrier.wait(30)
            results.append(client.reinforce(node.id, user_id=ALICE, request_id=key).replayed)

        threads = [threading.Thread(target=confirm, args=(first if i % 2 else second,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(results) == [False] + [True] * 15
        assert second.get_node(node.id, user_id=ALICE).version == 2


FOREIGN_WRITES = {
    "scalar": ("UPDATE prme.nodes SET salience_base = 0.9 WHERE id = ?", "salience_base", Decimal("0.9")),
    "list": (
        "UPDATE prme.nodes SET stability = 'stable', evidence_refs = list_append(evidence_refs, uuid()) WHERE id = ?",
        "stability",
        "stable",
    ),
}


@pytest.mark.parametrize("with_evidence", [False, True], ids=["no evidence", "evidence"])
@pytest.mark.parametrize("foreign", list(FOREIGN_WRITES))
def test_write_conflicts_are_retried_not_lost(tmp_path: Path, foreign: str, with_evidence: bool) -> None:
    """Another connection holds an uncommitted change of the node: the client's call
    conflicts, rolls back and retries until that transaction ends, then counts; both
    changes survive (DuckDB alone would lose one when a LIST column is involved)."""
    statement, column, value = FOREIGN_WRITES[foreign]
    path = tmp_path / "memories"
    with MemoryClient(path) as memory:
        node = memory.add_node("contended", user_id=ALICE)
        evidence_id = memory.add_event("e", user_id=ALICE).id if with_evidence else None
        other = duckdb.connect(str(path / PACK_FILE))  # same process: shares the database
        other.execute("BEGIN TRANSACTION")
        other.execute(statement, [node.id])
        result: list[Any] = []
        worker = threading.Thread(target=lambda: result.append(memory.reinforce(node.id, evidence_id, user_id=ALICE)))
        worker.start()
        time.sleep(0.3)
        assert worker.is_alive()  # retrying, not failed and not done
        other.execute("COMMIT")
        other.close()
        worker.join(30)
        final = memory.get_node(node.id, user_id=ALICE)
        assert result and result[0].version == 2
        assert (final.version, final.reinforcement_boost) == (2, Decimal("0.15"))
        assert getattr(final, column) == value  # the other connection's change is kept too
        if with_evidence:
            assert final.evidence_refs[-1] == evidence_id


def test_async_pack_close_waits_for_a_call_in_flight(tmp_path: Path) -> None:
    gate, inside = threading.Event(), threading.Event()
    armed = False

    def clock() -> datetime:
        if armed:
            inside.set()
            gate.wait(30)
        return datetime.now().astimezone()

    async def scenario() -> int:
        nonlocal armed
        memory = await AsyncMemoryClient(tmp_path / "memories", clock=clock).open()
        node = await memory.add_node("slow", user_id=ALICE)
        armed = True
        call = asyncio.create_task(memory.reinforce(node.id, user_id=ALICE))
        await asyncio.to_thread(inside.wait, 30)
        closing = asyncio.create_task(memory.close())
        await asyncio.sleep(0.1)
        assert not closing.done()  # the call is still committing
        gate.set()
        result = await call
        await closing
        return result.version

    assert asyncio.run(scenario()) == 2
    with MemoryClient(tmp_path / "memories") as memory:
        assert memory.list_nodes(user_id=ALICE)[0].version == 2


# -- PostgreSQL pools and roles ---------------------------------------------------------------


def test_a_borrowed_pool_is_used_not_closed(db_dsn: str) -> None:
    with ConnectionPool(db_dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True) as pool:
        with MemoryClient.from_pool(pool) as memory:
            node = memory.add_node("pooled", user_id=ALICE)
        assert not pool.closed
        with pool.connection() as conn:
            assert conn.execute("SELECT count(*) FROM prme.nodes WHERE id = %s", [node.id]).fetchone() == (1,)


def test_a_borrowed_async_pool(db_dsn: str) -> None:
    async def scenario() -> None:
        async with AsyncConnectionPool(db_dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False) as pool:
            async with AsyncMemoryClient.from_pool(pool) as memory:
                node = await memory.add_node("pooled", user_id=ALICE)
                assert (await memory.reinforce(node.id, user_id=ALICE)).version == 2
            assert not pool.closed

    asyncio.run(scenario())


def test_pool_size_bounds_connections(db_dsn: str) -> None:
    with MemoryClient(db_dsn, min_size=1, max_size=3) as memory:
        node = memory.add_node("x", user_id=ALICE)
        threads = [
            threading.Thread(target=memory.reinforce, args=(node.id,), kwargs={"user_id": ALICE}) for _ in range(12)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        pool = memory.backend.pool  # type: ignore[attr-defined]
        assert pool.get_stats()["pool_max"] == 3
        assert memory.get_node(node.id, user_id=ALICE).version == 13


def test_the_api_needs_only_prme_app(pg_server: testing.Server, db_dsn: str) -> None:
    """A login in prme_app (EXECUTE on the API, no table access) runs the whole client API,
    the independent verifier included (it reads through prme.journal_records)."""
    role = f"prme_test_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN IN ROLE prme_app")
    try:
        with MemoryClient(make_conninfo(db_dsn, user=role)) as memory:
            node = memory.add_node("least privilege", user_id=ALICE)
            evidence = memory.add_event("e", user_id=ALICE)
            assert memory.reinforce(node.id, evidence.id, user_id=ALICE, request_id=uuid.uuid4()).version == 2
            assert memory.verify_journal(user_id=ALICE) == []
            assert memory.replay_node(node.id, user_id=ALICE).matches
            assert [n.id for n in memory.iter_nodes(user_id=ALICE)] == [node.id]
            memory.archive_node(node.id, user_id=ALICE)
            assert memory.verify_journal(user_id=ALICE, independent=True) == []
        with (
            psycopg.connect(make_conninfo(db_dsn, user=role)) as conn,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            conn.execute("SELECT 1 FROM prme.journal")
    finally:
        with psycopg.connect(pg_server.dsn, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


def test_data_exceptions_are_invalid_input(db_dsn: str) -> None:
    with MemoryClient(db_dsn) as memory, pytest.raises(InvalidInput):
        memory.list_nodes(user_id=ALICE, max_count=2**40)  # integer out of range: SQLSTATE 22003


def test_token_authentication_and_readiness(db_dsn: str, tmp_path: Path) -> None:
    """The two calls the HTTP API makes besides the memory API."""
    token_sha256 = hashlib.sha256(b"secret token").hexdigest()
    with psycopg.connect(db_dsn, autocommit=True) as admin:
        admin.execute("SELECT prme.create_api_token(%s, %s)", [ALICE, token_sha256])
    with MemoryClient(db_dsn) as memory:
        assert memory.authenticate_api_token(ALICE, token_sha256) is True
        assert memory.authenticate_api_token("bob", token_sha256) is False
        assert memory.authenticate_api_token(ALICE, "0" * 64) is False
        accepts_writes, applied = memory.readiness()
        assert accepts_writes is True
        assert applied == [f"{m.version}:{m.sha256}" for m in migrations.load_migrations()]
    with MemoryClient(tmp_path / "memories") as pack:
        # A pack has no migrations: it is ready (accepts writes) once open (serve --pack).
        assert pack.readiness() == (True, [])


def test_the_demo_counts_the_retry_once_and_verifies(tmp_path: Path) -> None:
    for _run in (1, 2):  # a second run reuses the pack, and still verifies all of it
        output = io.StringIO()
        assert run_demo(str(tmp_path / "memories"), Console(file=output, width=200)) == 0
        text = output.getvalue()
        assert "counted once" in text and "replayed = yes" in text
        # Its own memory's records (issue 20: not the whole pack's). The demo is idempotent (keyed ids):
        # a second run finds the same memory, so the pack holds nothing from earlier runs.
        assert "This memory has 2 records" in text
        assert "more from earlier runs" not in text
        assert "found 0 problem(s)" in text and "gives exactly the stored memory" in text


def test_the_demo_explains_a_pack_in_use(tmp_path: Path) -> None:
    path = tmp_path / "memories"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        output = io.StringIO()
        assert run_demo(str(path), Console(file=output, width=300)) == 1
        assert "is in use by process" in output.getvalue()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)


def test_an_unreachable_server_fails_the_constructor_and_leaves_nothing_running() -> None:
    before = threading.active_count()
    with pytest.raises(PoolTimeout):
        MemoryClient("postgresql://prme@127.0.0.1:1/prme", timeout=1.0, connect_kwargs={"connect_timeout": 1})
    time.sleep(0.2)
    assert threading.active_count() == before
