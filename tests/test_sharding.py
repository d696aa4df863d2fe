"""Scale-out end to end: three real clusters (a PL/Proxy database and two shards), pgbouncer between.

The proxy reaches each shard through one pgbouncer (session pooling), as
docs/SCALING.md deploys it. Clients talk to the proxy only; the worker runs one
executor per shard, connected to the shards. The last test stops a shard.
"""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from prme_pg import MemoryClient, cli, proxy, shard, testing
from prme_pg import worker as ledger_worker
from prme_pg.errors import IdempotencyConflict, InvalidInput, NotFoundError
from prme_pg.sqlstate import error_message

from .live_server import serve

PARTITIONS = 16


@dataclass
class Deployment:
    proxy: testing.PostgresCluster
    shards: list[testing.PostgresCluster]
    bouncer: testing.PgBouncer

    @property
    def proxy_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.proxy.port}/prme"

    def shard_dsn(self, number: int) -> str:
        """The shard itself (what the worker and a DBA connect to)."""
        return f"postgresql://postgres@127.0.0.1:{self.shards[number].port}/prme"

    def routed_dsn(self, number: int) -> str:
        """The shard as the proxy reaches it: through pgbouncer (the cluster definition's connstring)."""
        return self.bouncer.dsn(f"shard{number}")

    def shard_of(self, user_id: str) -> int:
        return shard_number(self, proxy.partition_of(user_id, PARTITIONS))


def shard_number(deployment: Deployment, partition: int) -> int:
    return partition % len(deployment.shards)


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    clusters: list[testing.PostgresCluster] = []
    bouncer: testing.PgBouncer | None = None
    try:
        for _ in range(3):
            clusters.append(testing.PostgresCluster.create(testing.FAST_SETTINGS))
        for cluster in clusters:
            with psycopg.connect(cluster.dsn, autocommit=True) as conn:
                conn.execute("CREATE DATABASE prme ENCODING 'UTF8' TEMPLATE template0")
        bouncer = testing.PgBouncer(
            {f"shard{n}": f"host=127.0.0.1 port={c.port} dbname=prme user=postgres" for n, c in enumerate(clusters[1:])}
        )
        bouncer.start()
        result = Deployment(clusters[0], clusters[1:], bouncer)
        with psycopg.connect(result.proxy_dsn, autocommit=True) as conn:
            # prme_app and the proxy functions come with the proxy script, installed by migrate.
            shard.init_cluster(conn, [result.routed_dsn(0), result.routed_dsn(1)], PARTITIONS)
            shard.migrate_cluster(conn)
        yield result
    finally:
        if bouncer is not None:
            bouncer.stop()
        for cluster in clusters:
            cluster.destroy()


@pytest.fixture
def memory(deployment: Deployment) -> Iterator[MemoryClient]:
    with MemoryClient(deployment.proxy_dsn, max_size=4) as client:
        yield client


def _owners(deployment: Deployment, per_shard: int = 2) -> list[str]:
    """Owners spread over both shards (found by the documented hash, not by trial on the server)."""
    found: dict[int, list[str]] = {0: [], 1: []}
    n = 0
    while min(len(v) for v in found.values()) < per_shard:
        user = f"owner-{uuid.uuid4().hex[:8]}-{n}"
        found[deployment.shard_of(user)].append(user)
        n += 1
    return found[0][:per_shard] + found[1][:per_shard]


def _shard_count(deployment: Deployment, number: int, table: str, user_id: str) -> int:
    with psycopg.connect(deployment.shard_dsn(number)) as conn:
        row = conn.execute(f"SELECT count(*) FROM prme.{table} WHERE user_id = %s", (user_id,)).fetchone()
    assert row is not None
    return int(row[0])


def test_the_memory_client_works_unchanged_through_the_proxy(deployment: Deployment, memory: MemoryClient) -> None:
    for user in _owners(deployment):
        node = memory.add_node(f"{user} prefers green tea", user_id=user)
        event = memory.add_event("said so", user_id=user)
        request = uuid.uuid4()
        first = memory.reinforce(node.id, user_id=user, evidence_id=event.id, request_id=request)
        again = memory.reinforce(node.id, user_id=user, evidence_id=event.id, request_id=request)
        assert again.version == first.version == 2, "a retried reinforce counts once"
        assert again.replayed
        assert memory.get_node(node.id, user_id=user).reinforcement_boost == first.reinforcement_boost
        assert [hit.id for hit in memory.recall("green tea", user_id=user)] == [node.id]
        assert memory.verify_journal(user_id=user) == []
        home = deployment.shard_of(user)
        assert _shard_count(deployment, home, "nodes", user) == 1
        assert _shard_count(deployment, 1 - home, "nodes", user) == 0
        # The shard's own errors, typed and in the shard's words.
        with pytest.raises(NotFoundError, match=r"^node not found$"):
            memory.get_node(uuid.uuid4(), user_id=user)
        with pytest.raises(InvalidInput, match=r"^scope must match .*\(got 'BAD'\)$"):
            memory.add_node("x", user_id=user, scope="BAD")
        with pytest.raises(IdempotencyConflict):
            memory.reinforce(node.id, user_id=user, evidence_id=uuid.uuid4(), request_id=request)


HOSTILE = [
    ("NULL user_id", "SELECT * FROM prme.get_node(NULL, gen_random_uuid())", (), "user_id must not be null"),
    ("empty user_id", "SELECT * FROM prme.add_node('', 'x')", (), "user_id must be 1 to 256"),
    ("control characters", "SELECT * FROM prme.add_node(%s, 'x')", ("a\x01b",), "user_id must be 1 to 256"),
    ("too long", "SELECT * FROM prme.add_node(%s, 'x')", ("u" * 257,), "user_id must be 1 to 256"),
    ("injection", "SELECT * FROM prme.add_node(%s, 'x', scope => %s)", ("x'); --", "a'; DROP"), "scope must"),
    ("bad page", "SELECT * FROM prme.list_nodes('alice', max_count => -1)", (), "max_count"),
    ("huge content", "SELECT * FROM prme.add_node('alice', repeat('x', 10000000))", (), "content"),
]


@pytest.mark.parametrize(("case", "query", "params", "message"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_input_through_the_proxy_gets_the_shards_pr422(
    deployment: Deployment, case: str, query: str, params: tuple[Any, ...], message: str
) -> None:
    with psycopg.connect(deployment.proxy_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(query.encode(), params)
        assert caught.value.sqlstate == "PR422", (case, caught.value)
        error = error_message(caught.value)
        assert message in error, (case, error)
        assert "REMOTE ERROR" not in error
        assert "Hash function returned NULL" not in str(caught.value)
        # The connection is usable afterwards: the proxy kept no broken state.
        assert conn.execute("SELECT count(*) FROM prme.readiness()").fetchone() == (2,)


def test_the_ledger_runs_end_to_end_with_a_worker_per_shard(deployment: Deployment, memory: MemoryClient) -> None:
    owners = _owners(deployment)
    submitted = []
    for user in owners:
        for n in range(3):
            operation = uuid.uuid4()
            receipt = memory.submit_operation(operation, "add_node", {"content": f"{user} fact {n}"}, user_id=user)
            assert receipt.created
            submitted.append((user, operation))
    status = memory.ledger_status()
    assert status.accepting and status.ready >= len(submitted)
    finished = ledger_worker.run_shard_workers(
        [deployment.shard_dsn(0), deployment.shard_dsn(1)], until_idle=True, install_signal_handlers=False
    )
    assert finished >= len(submitted)
    for user, operation in submitted:
        assert memory.get_receipt(operation, user_id=user).state == "committed"
    for user in owners:
        states = [e.state for e in memory.operation_events(user_id=user)]
        assert states.count("committed") == 3, states
        assert _shard_count(deployment, deployment.shard_of(user), "operations", user) == 3
    assert memory.ledger_status().ready == 0


def test_remote_errors_reuse_pooled_shard_connections(deployment: Deployment) -> None:
    """PL/Proxy drops its connection after a remote error; pgbouncer keeps the shard's session."""

    def sessions(number: int) -> int:
        with psycopg.connect(deployment.shard_dsn(number)) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute("SELECT sessions FROM pg_stat_database WHERE datname = 'prme'").fetchone()
        assert row is not None
        return int(row[0])

    user = _owners(deployment, per_shard=1)[0]
    home = deployment.shard_of(user)
    with psycopg.connect(deployment.proxy_dsn, autocommit=True) as conn:
        conn.execute("SELECT * FROM prme.list_nodes(%s)", (user,))  # a pooled session exists
        time.sleep(0.6)  # pg_stat_database is flushed at most every 500 ms
        before = sessions(home)
        for _ in range(20):
            with pytest.raises(psycopg.Error) as caught:
                conn.execute("SELECT * FROM prme.get_node(%s, gen_random_uuid())", (user,))
            assert caught.value.sqlstate == "PR404"
        conn.execute("SELECT * FROM prme.list_nodes(%s)", (user,))
    time.sleep(0.6)
    # Our own probes are sessions too, and pgbouncer may open one while it resets another;
    # without it, each of the 20 errors would be a new shard session (bench/proxy_bench.py).
    assert sessions(home) - before < 10


def test_only_prme_app_may_call_the_proxy(deployment: Deployment) -> None:
    """EXECUTE is granted to prme_app and revoked from PUBLIC on the proxy, as on the shards."""
    with psycopg.connect(deployment.proxy_dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS prme_t_service; CREATE ROLE prme_t_service LOGIN IN ROLE prme_app")
        conn.execute("DROP ROLE IF EXISTS prme_t_stranger; CREATE ROLE prme_t_stranger LOGIN")
    base = deployment.proxy_dsn.replace("postgres@", "{}@")
    user = _owners(deployment, per_shard=1)[0]
    with MemoryClient(base.format("prme_t_service"), max_size=1) as memory:
        assert memory.add_node("through a service role", user_id=user).user_id == user
    with psycopg.connect(base.format("prme_t_stranger"), autocommit=True) as conn:
        for call in ("SELECT * FROM prme.get_node('x', gen_random_uuid())", "SELECT prme.route('x')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(call)


def test_http_through_the_proxy_answers_in_the_shards_words(deployment: Deployment) -> None:
    user = _owners(deployment, per_shard=1)[1]
    with MemoryClient(deployment.proxy_dsn, max_size=2) as memory:
        token = memory.create_api_token(user, label="proxy")
    with (
        serve(deployment.proxy_dsn, max_size=4) as base,
        httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
    ):
        assert http.get("/ready").status_code == 200
        created = http.post("/v1/nodes", json={"content": "served through the proxy"})
        assert created.status_code == 201, created.text
        assert http.get(created.headers["location"]).json()["content"] == "served through the proxy"
        missing = http.get(f"/v1/nodes/{uuid.uuid4()}")
        assert missing.status_code == 404
        assert missing.json()["detail"] == "node not found"
        invalid = http.post("/v1/nodes", json={"content": "x", "scope": "BAD SCOPE"})
        assert invalid.status_code == 422, invalid.text
        assert "REMOTE" not in invalid.text and "scope must match" in invalid.json()["detail"]


def test_shard_status_and_locate_commands(deployment: Deployment, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["shard", "status", "--dsn", deployment.proxy_dsn, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [s["up"] for s in document["shards"]] == [True, True]
    assert document["defaults_agree"]
    assert {len(s["migrations"]) for s in document["shards"]} == {len(list(Path("migrations").glob("*.sql")))}
    user = _owners(deployment, per_shard=1)[1]
    assert cli.main(["shard", "locate", "--dsn", deployment.proxy_dsn, "--user", user, "--json"]) == 0
    located = json.loads(capsys.readouterr().out)
    assert located["partition"] == proxy.partition_of(user, PARTITIONS)
    assert located["shard"] == deployment.routed_dsn(deployment.shard_of(user))
    # Migrating again applies nothing and reinstalls the same proxy.
    assert cli.main(["shard", "migrate", "--dsn", deployment.proxy_dsn, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["applied"] == {
        deployment.routed_dsn(0): [],
        deployment.routed_dsn(1): [],
    }


def _older_transaction_ids_on(deployment: Deployment, number: int, than: int) -> None:
    """Make shard ``than`` use larger transaction ids than shard ``number``: the case a move must handle."""

    def xid(n: int) -> int:
        with psycopg.connect(deployment.shard_dsn(n), autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
        assert row is not None
        return int(row[0])

    gap = xid(number) - xid(than) + 200
    with psycopg.connect(deployment.shard_dsn(than), autocommit=True) as conn:
        for _ in range(max(gap, 0)):
            conn.execute("SELECT pg_current_xact_id()")


def _retrying(call: Any) -> Any:
    """A call through the proxy, retried while its owner is being moved (55006)."""
    while True:
        try:
            return call()
        except psycopg.Error as exc:
            if exc.sqlstate != "55006":
                raise
            time.sleep(0.02)


def test_an_owner_moves_under_load_and_its_reader_sees_no_gap_and_no_duplicate(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    user = _owners(deployment, per_shard=1)[0]
    source, target = deployment.shard_of(user), 1 - deployment.shard_of(user)
    stop_workers, stop_writer, stop_reader = threading.Event(), threading.Event(), threading.Event()
    submitted: list[uuid.UUID] = []
    seen: list[Any] = []
    streamed: list[int] = []  # seq of every operation event the SSE stream sent
    failures: list[BaseException] = []
    with MemoryClient(deployment.proxy_dsn, max_size=1) as memory:
        token = memory.create_api_token(user, label="sse")

    def writer(memory: MemoryClient) -> None:
        n = 0
        while not stop_writer.is_set():
            operation, payload = uuid.uuid4(), {"content": f"fact {n}"}
            _retrying(functools.partial(memory.submit_operation, operation, "add_node", payload, user_id=user))
            submitted.append(operation)
            n += 1
            time.sleep(0.01)

    def reader(memory: MemoryClient) -> None:
        after = 0
        while True:
            done = stop_reader.is_set()
            page = _retrying(functools.partial(memory.operation_events, user_id=user, after_seq=after, max_count=50))
            seen.extend(page)
            if page:
                after = page[-1].seq
            elif done:
                return
            time.sleep(0.01)

    def sse_reader(base: str) -> None:
        """GET /api/v2/events through the proxy, reconnecting with Last-Event-ID, as a browser does."""
        last = "0"
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            while True:
                done = stop_reader.is_set()
                before = len(streamed)
                params = {"max_seconds": 2}
                with http.stream("GET", "/api/v2/events", params=params, headers={"Last-Event-ID": last}) as response:
                    assert response.status_code == 200, response.read()
                    event_id, kind = None, None
                    for line in response.iter_lines():
                        if line.startswith("id: "):
                            event_id = line[4:]
                        elif line.startswith("event: "):
                            kind = line[7:]
                        elif line == "" and event_id is not None:
                            assert kind == "operation_state", (kind, event_id)
                            streamed.append(int(event_id))
                            last, event_id, kind = event_id, None, None
                if done and len(streamed) == before:
                    return

    def guarded(function: Any, *args: Any) -> Any:
        def run() -> None:
            try:
                function(*args)
            except BaseException as exc:  # reported by the test below
                failures.append(exc)

        return threading.Thread(target=run, daemon=True)

    with MemoryClient(deployment.proxy_dsn, max_size=4) as memory:
        workers = guarded(
            lambda: ledger_worker.run_shard_workers(
                [deployment.shard_dsn(0), deployment.shard_dsn(1)],
                stop=stop_workers,
                install_signal_handlers=False,
                poll_interval=0.2,
            )
        )
        server = serve(deployment.proxy_dsn, max_size=4)
        base = server.__enter__()
        threads = [workers, guarded(writer, memory), guarded(reader, memory), guarded(sse_reader, base)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(1.0)
            _older_transaction_ids_on(deployment, target, than=source)
            moved_at = len(submitted)
            command = ["shard", "move", "--dsn", deployment.proxy_dsn, "--user", user]
            assert cli.main([*command, "--to", deployment.routed_dsn(target), "--json"]) == 0
            moved = json.loads(capsys.readouterr().out)
            time.sleep(1.0)
            stop_writer.set()
            threads[1].join(10)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                status = memory.ledger_status()
                if not status.ready + status.processing:
                    break
                time.sleep(0.1)
            time.sleep(0.3)
        finally:
            stop_writer.set()
            stop_reader.set()
            threads[2].join(20)
            threads[3].join(30)
            server.__exit__(None, None, None)
            stop_workers.set()
            threads[0].join(20)
        assert not failures, failures
        assert moved_at > 0 and len(submitted) > moved_at, "submits ran before and after the move"
        assert moved["events"] > 0
        assert moved["seq_offset"] > 0, "the target's own seqs were below the stream's: the offset lifted them"
        # The reader saw every event once, in order, across the move.
        whole = []
        after = 0
        while page := memory.operation_events(user_id=user, after_seq=after, max_count=1000):
            whole += page
            after = page[-1].seq
        seqs = [event.seq for event in seen]
        assert seqs == sorted(set(seqs)), "no duplicate, never backwards"
        assert seen == whole, "no gap: the reader saw the whole stream"
        assert streamed == [event.seq for event in whole], "the SSE stream too, through the move"
        committed = {e.operation_id for e in whole if e.state == "committed"}
        assert committed == {str(operation) for operation in submitted}
        for operation in submitted:
            assert memory.get_receipt(operation, user_id=user).state == "committed"
        assert memory.verify_journal(user_id=user) == []
    assert cli.main(["shard", "locate", "--dsn", deployment.proxy_dsn, "--user", user, "--json"]) == 0
    located = json.loads(capsys.readouterr().out)
    assert located["shard"] == deployment.routed_dsn(target) and located["moved"]
    for table in ("nodes", "operations", "operation_events", "journal"):
        assert _shard_count(deployment, source, table, user) == 0, table
    assert _shard_count(deployment, target, "operations", user) == len(submitted)


def test_the_cli_worker_per_shard_embeds_what_the_ledger_wrote(
    deployment: Deployment, memory: MemoryClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """`prme-pg worker --shard ... --shard ...` gives each shard's executor what a single
    worker has: the memories the ledger wrote (in SQL, without vectors) are embedded on their
    shard after the worker commits them, and recall finds them by meaning through the proxy."""
    owners = _owners(deployment)
    for user in owners:
        operation = uuid.uuid4()
        payload = {"content": f"{user} keeps a golden retriever called Biscuit"}
        assert memory.submit_operation(operation, "add_node", payload, user_id=user).created
    argv = ["worker", "--shard", deployment.shard_dsn(0), "--shard", deployment.shard_dsn(1), "--until-idle", "--json"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["finished"] >= len(owners), out
    for user in owners:
        assert _shard_count(deployment, deployment.shard_of(user), "node_embeddings", user) >= 1
        hits = memory.recall("which pets do they have?", user_id=user)
        assert hits and "golden retriever" in hits[0].content


def test_a_stopped_shard_leaves_the_other_owners_working(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs last in this module: it stops shard 1, then starts it again."""
    alive, down = _owners(deployment, per_shard=1)
    deployment.shards[1].stop("fast")
    try:
        with MemoryClient(deployment.proxy_dsn, max_size=2) as memory:
            node = memory.add_node("still here", user_id=alive)
            assert memory.get_node(node.id, user_id=alive).content == "still here"
            with pytest.raises(psycopg.Error):
                memory.add_node("nowhere to go", user_id=down)
            accepts, _ = memory.readiness()
            assert not accepts, "the service is not ready while a shard is down"
            assert not memory.ledger_status().accepting
        with psycopg.connect(deployment.proxy_dsn, autocommit=True) as conn:
            rows = conn.execute("SELECT accepts_writes FROM prme.readiness()").fetchall()
        assert rows == [(True,), (False,)], "readiness answers per shard"
        assert cli.main(["shard", "status", "--dsn", deployment.proxy_dsn, "--json"]) == 1
        document = json.loads(capsys.readouterr().out)
        assert [s["up"] for s in document["shards"]] == [True, False]
        assert document["shards"][1]["error"]
        # The worker keeps working on the shard that is up.
        with MemoryClient(deployment.proxy_dsn, max_size=2) as memory:
            operation = uuid.uuid4()
            memory.submit_operation(operation, "add_node", {"content": "queued"}, user_id=alive)
            ledger_worker.run_shard_workers(
                [deployment.shard_dsn(0), deployment.shard_dsn(1)], until_idle=True, install_signal_handlers=False
            )
            assert memory.get_receipt(operation, user_id=alive).state == "committed"
    finally:
        deployment.shards[1].start()
    with MemoryClient(deployment.proxy_dsn, max_size=2) as memory:
        deadline = time.monotonic() + 15
        while True:  # pgbouncer tries the shard again after server_login_retry
            try:
                assert memory.add_node("back again", user_id=down).user_id == down
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        assert memory.readiness()[0]
