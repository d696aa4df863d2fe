"""The local outbox (issue #9): enqueue in a memory pack, deliver to the ledger with receipts.

Real PostgreSQL (tests/conftest.py), real pack folders, real subprocesses: the CLI is run
as ``python -m prme_pg.cli``, crashes are ``os._exit`` at named points of the sync code
(PRME_SYNC_CRASH_AT), and "ledger down" is a port with nothing listening.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import rfc8785
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from prme_pg import AsyncMemoryClient, IdempotencyConflict, InvalidInput, MemoryClient, PackInUseError
from prme_pg.outbox import (
    CRASH_EXIT_CODE,
    LEDGER_KINDS,
    LedgerUnavailable,
    Outbox,
    OutboxRecord,
    OutboxSyncer,
    SyncContext,
    SyncLock,
    SyncLockHeld,
    backoff_delay,
    canonical_payload,
)
from prme_pg.spool import time_ordered_uuid

ALICE = "alice"
OPERATIONS = uuid.uuid5(uuid.NAMESPACE_URL, "urn:prme-pg:operations")
ROOT = Path(__file__).resolve().parent.parent


def _hash(payload: dict[str, Any]) -> str:
    return hashlib.sha256(rfc8785.dumps(payload)).hexdigest()


def _cli(*args: str, env: dict[str, str] | None = None, stdin: str | None = None, timeout: float = 120) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        cwd=ROOT,
        check=False,
    )


def _run_operations(dsn: str) -> int:
    """Execute everything the ledger accepted (as prme-pg worker would); return how many finished."""
    finished = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            rows = conn.execute(
                "SELECT outcome FROM prme.run_operations(max_count => 500, worker => 'test')"
            ).fetchall()
            if not rows:
                return finished
            finished += sum(1 for (outcome,) in rows if outcome in ("committed", "rejected"))


def _ledger(dsn: str, sql: str, params: Any = None) -> list[Any]:
    """Rows of a query on the ledger; operation ids (text since 0017_reference_protocol) that are
    UUIDs come back as UUIDs, as the outbox names them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql, None if params is None else [str(p) if isinstance(p, uuid.UUID) else p for p in params]
        )
        return [tuple(_uuid_or_value(v) for v in row) for row in rows.fetchall()]


def _uuid_or_value(value: Any) -> Any:
    if isinstance(value, str) and len(value) == 36:
        try:
            return uuid.UUID(value)
        except ValueError:
            return value
    return value


def _counts(pack: Path) -> dict[str, int]:
    return {state: n for state, (n, _) in Outbox(pack).counts().items()}


# -- enqueue -------------------------------------------------------------------------------


def test_enqueue_stores_a_durable_record_with_a_time_ordered_id(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "memories")
    dep_b, dep_a = uuid.UUID(int=2), uuid.UUID(int=1)
    first = outbox.enqueue("add_node", {"content": "prefers tea", "scope": "personal"}, user_id=ALICE)
    second = outbox.enqueue("reinforce", {"node_id": str(dep_a)}, user_id=ALICE, dependencies=[dep_b, dep_a, dep_b])
    assert first.operation_id.version == 7 and str(first.operation_id) < str(second.operation_id)
    assert first.state == "pending" and first.attempts == 0 and first.receipt is None and first.reason is None
    assert first.payload_hash == _hash({"content": "prefers tea", "scope": "personal"})
    assert first.schema_version == 2 and first.kind == "add_node" and first.user_id == ALICE
    assert second.dependencies == (dep_a, dep_b)  # a sorted set, as the ledger stores it
    stored = json.loads((tmp_path / "memories" / "outbox" / "pending" / f"{first.operation_id}.json").read_text())
    assert stored["payload_hash"] == first.payload_hash and stored["state"] == "pending"
    assert outbox.get(first.operation_id) == first
    assert [r.operation_id for r in outbox.records("pending")] == [first.operation_id, second.operation_id]
    assert not any((tmp_path / "memories").glob("*.duckdb"))  # the pack's DuckDB file is not needed


def test_an_explicit_operation_id_makes_enqueue_idempotent(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path)
    op = uuid.uuid4()
    first = outbox.enqueue("add_node", {"content": "x"}, user_id=ALICE, operation_id=op)
    again = outbox.enqueue("add_node", {"content": "x"}, user_id=ALICE, operation_id=str(op))
    assert again == first
    for kind, payload, user, deps in [
        ("add_node", {"content": "y"}, ALICE, ()),
        ("add_event", {"content": "x"}, ALICE, ()),
        ("add_node", {"content": "x"}, "bob", ()),
        ("add_node", {"content": "x"}, ALICE, (uuid.uuid4(),)),
    ]:
        with pytest.raises(IdempotencyConflict, match="already used"):
            outbox.enqueue(kind, payload, user_id=user, dependencies=deps, operation_id=op)
    assert _counts(tmp_path)["pending"] == 1
    assert outbox.get(op) == first


@pytest.mark.parametrize(
    ("kind", "payload", "user_id", "extra", "message"),
    [
        ("drop_table", {"content": "x"}, ALICE, {}, "kind must be one of"),
        ("add_node", ["not", "an", "object"], ALICE, {}, "JSON object"),
        ("add_node", {"n": float("nan")}, ALICE, {}, "RFC 8785"),
        ("add_node", {"n": 2**60}, ALICE, {}, "RFC 8785"),
        ("add_node", {"content": "x" * (1024 * 1024)}, ALICE, {}, "1 MiB"),
        ("add_node", {"content": "x"}, " alice", {}, "user_id"),
        ("add_node", {"content": "x"}, "", {}, "user_id"),
        ("add_node", {"content": "x"}, "a\x07b", {}, "user_id"),
        ("add_node", {"content": "x"}, ALICE, {"dependencies": ["nope"]}, "UUID"),
        ("add_node", {"content": "x"}, ALICE, {"dependencies": "0b0a7f52-6a4e-4a0c-9a8c-2a1d6d0f3e11"}, "list"),
        ("add_node", {"content": "x"}, ALICE, {"dependencies": [uuid.uuid4() for _ in range(101)]}, "at most 100"),
        ("add_node", {"content": "x"}, ALICE, {"operation_id": "not-a-uuid"}, "UUID"),
    ],
)
def test_enqueue_refuses_what_the_ledger_would_and_stores_nothing(
    tmp_path: Path, kind: str, payload: Any, user_id: str, extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        Outbox(tmp_path).enqueue(kind, payload, user_id=user_id, **extra)
    assert sum(_counts(tmp_path).values()) == 0
    assert os.listdir(tmp_path / "outbox" / "tmp") == []


def test_an_operation_cannot_depend_on_itself(tmp_path: Path) -> None:
    op = uuid.uuid4()
    with pytest.raises(InvalidInput, match="itself"):
        Outbox(tmp_path).enqueue("add_node", {"content": "x"}, user_id=ALICE, dependencies=[op], operation_id=op)


def test_every_ledger_kind_is_accepted(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path)
    node = str(uuid.uuid4())
    smallest = {  # the required fields of each kind (tests/test_outbox_validation.py has the rest)
        "add_node": {"content": "x"},
        "add_event": {"content": "x"},
        "reinforce": {"node_id": node},
        "archive_node": {"node_id": node},
        "record_outcome": {"node_id": node, "outcome": "implicit_success"},
        "link_correction": {"message": "x", "candidate_node_ids": [node]},
        "add_memory": {"content": "x"},
    }
    for kind in LEDGER_KINDS:
        assert outbox.enqueue(kind, smallest[kind], user_id=ALICE).kind == kind
    assert {"record_outcome", "link_correction"} <= set(LEDGER_KINDS)


def _enqueue_many(pack: str, worker: int, shared: list[str], queue: Any) -> None:
    outbox = Outbox(pack)
    ids = []
    for i in range(150):
        ids.append(str(outbox.enqueue("add_node", {"content": f"w{worker} n{i}"}, user_id=ALICE).operation_id))
    for op in shared:  # every worker enqueues the same explicit ids: each is stored once
        ids.append(str(outbox.enqueue("add_event", {"content": op}, user_id=ALICE, operation_id=op).operation_id))
    queue.put(ids)


def test_concurrent_enqueue_from_several_processes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    shared = [str(uuid.uuid4()) for _ in range(20)]
    procs = [ctx.Process(target=_enqueue_many, args=(str(tmp_path), w, shared, queue)) for w in range(4)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    unique = [op for ids in results for op in ids[:150]]
    assert len(set(unique)) == 600
    assert all(ids[150:] == shared for ids in results)
    assert _counts(tmp_path)["pending"] == 620
    assert os.listdir(tmp_path / "outbox" / "tmp") == []


_HOLDER = """
import sys
from prme_pg import MemoryClient
memory = MemoryClient(sys.argv[1])
memory.list_nodes(user_id="alice")  # opens the pack's DuckDB file and keeps it
print("ready", flush=True)
sys.stdin.read()
memory.close()
"""


def test_client_enqueue_works_while_another_process_holds_the_pack(tmp_path: Path) -> None:
    path = tmp_path / "memories"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with MemoryClient(path) as memory:
            record = memory.enqueue("add_node", {"content": "from the hook"}, user_id=ALICE)
            with pytest.raises(PackInUseError, match=str(holder.pid)):
                memory.list_nodes(user_id=ALICE)  # the DuckDB file is still the other process's

        async def from_async() -> OutboxRecord:
            client = AsyncMemoryClient(path)  # not opened: enqueue does not need the DuckDB file
            try:
                return await client.enqueue("add_event", {"content": "async"}, user_id=ALICE)
            finally:
                await client.close()

        second = asyncio.run(from_async())
        cli = _cli("enqueue", "add_node", "--user-id", ALICE, "--pack", str(path), stdin='{"content": "cli"}')
        assert cli.returncode == 0, cli.stderr
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(30) == 0
    pending = Outbox(path).records("pending")
    assert [r.operation_id for r in pending[:2]] == [record.operation_id, second.operation_id]
    assert len(pending) == 3 and str(pending[2].operation_id) == cli.stdout.strip()


def test_enqueue_on_a_postgres_client_is_refused(db_dsn: str) -> None:
    with MemoryClient(db_dsn) as memory, pytest.raises(Exception, match="memory pack's outbox"):
        memory.enqueue("add_node", {"content": "x"}, user_id=ALICE)


def test_cli_enqueue(tmp_path: Path) -> None:
    pack = str(tmp_path / "memories")
    op = str(uuid.uuid4())
    first = _cli("enqueue", "add_node", "--user-id", ALICE, "--pack", pack, "--payload", '{"content": "a"}')
    assert first.returncode == 0, first.stderr
    assert uuid.UUID(first.stdout.strip()).version == 7
    dep = first.stdout.strip()
    args = ("enqueue", "reinforce", "--user-id", ALICE, "--pack", pack, "--operation-id", op, "--depends-on", dep)
    second = _cli(*args, "--json", stdin=json.dumps({"node_id": str(uuid.uuid5(OPERATIONS, dep))}))
    assert second.returncode == 0, second.stderr
    document = json.loads(second.stdout)
    assert document["operation_id"] == op and document["dependencies"] == [dep] and document["state"] == "pending"
    replay = _cli(*args, "--json", stdin=json.dumps({"node_id": str(uuid.uuid5(OPERATIONS, dep))}))
    assert json.loads(replay.stdout)["created_at"] == document["created_at"]
    conflict = _cli(*args, stdin='{"node_id": "0b0a7f52-6a4e-4a0c-9a8c-2a1d6d0f3e11"}')
    assert conflict.returncode == 1 and "already used" in conflict.stderr
    assert _cli("enqueue", "add_node", "--user-id", ALICE, "--pack", pack, stdin="{not json").returncode == 2
    assert _cli("enqueue", "add_node", "--user-id", ALICE, "--pack", pack, stdin="[1]").returncode == 2
    assert _cli("enqueue", "nope", "--user-id", ALICE, "--pack", pack, stdin="{}").returncode == 2
    assert _cli("enqueue", "add_node", "--user-id", " x", "--pack", pack, stdin='{"content": "x"}').returncode == 2
    assert _counts(Path(pack))["pending"] == 2


# -- delivery ----------------------------------------------------------------------------


def test_sync_delivers_follows_receipts_and_runs_the_extension_points(tmp_path: Path, db_dsn: str) -> None:
    pack = tmp_path / "memories"
    outbox = Outbox(pack)
    add = outbox.enqueue("add_node", {"content": "prefers tea"}, user_id=ALICE)
    node_id = uuid.uuid5(OPERATIONS, str(add.operation_id))
    confirm = outbox.enqueue("reinforce", {"node_id": str(node_id)}, user_id=ALICE, dependencies=[add.operation_id])
    seen: list[tuple[str, Any]] = []

    def extract(context: SyncContext) -> int:
        # A stage runs first in each cycle: what it enqueues is delivered in the same cycle.
        assert context.outbox.pack == pack.absolute() and context.dsn == db_dsn and not context.stop_requested
        assert context.connection.execute("SELECT 1").fetchone() == (1,)
        if not seen:
            context.outbox.enqueue("add_event", {"content": "from a stage"}, user_id=ALICE)
        seen.append(("stage", None))
        return 1

    def published(context: SyncContext, records: list[OutboxRecord]) -> None:
        seen.append(("after_commit", sorted(r.kind for r in records)))

    with OutboxSyncer(pack, db_dsn, stages=[extract], after_commit=[published]) as syncer:
        first = syncer.run_cycle()
        assert (first.submitted, first.accepted, first.completed, first.stage_items) == (3, 3, 0, 1)
        assert _counts(pack)["accepted"] == 3
        receipt = outbox.get(add.operation_id)
        assert receipt is not None and receipt.receipt is not None and receipt.receipt["state"] == "accepted"
        assert receipt.attempts == 1
        assert _run_operations(db_dsn) == 3
        second = syncer.run_cycle()
        assert (second.submitted, second.completed) == (0, 3)
    assert _counts(pack) == {"pending": 0, "submitting": 0, "accepted": 0, "completed": 3, "rejected": 0}
    done = outbox.get(confirm.operation_id)
    assert done is not None and done.state == "completed" and done.receipt is not None
    assert done.receipt["state"] == "committed" and done.receipt["result"]["node_id"] == str(node_id)
    assert seen == [("stage", None), ("stage", None), ("after_commit", ["add_event", "add_node", "reinforce"])]
    version = _ledger(db_dsn, "SELECT version FROM prme.nodes WHERE id = %s", [node_id])
    assert version == [(2,)]  # created, then confirmed once


def test_a_failing_after_commit_callback_is_called_again_until_it_succeeds(tmp_path: Path, db_dsn: str) -> None:
    outbox = Outbox(tmp_path)
    record = outbox.enqueue("add_node", {"content": "x"}, user_id=ALICE)
    calls: list[list[uuid.UUID]] = []

    def flaky(context: SyncContext, records: list[OutboxRecord]) -> None:
        calls.append([r.operation_id for r in records])
        if len(calls) == 1:
            raise RuntimeError("snapshot store unavailable")

    with OutboxSyncer(tmp_path, db_dsn, after_commit=[flaky]) as syncer:
        syncer.run_cycle()
        _run_operations(db_dsn)
        assert syncer.run_cycle().completed == 0
        assert _counts(tmp_path)["accepted"] == 1  # not completed while its callback failed
        assert syncer.run_cycle().completed == 1
    assert calls == [[record.operation_id], [record.operation_id]]
    assert _counts(tmp_path)["completed"] == 1


def test_a_dependency_enqueued_later_is_delivered_first(tmp_path: Path, db_dsn: str) -> None:
    outbox = Outbox(tmp_path)
    parent = uuid.uuid4()
    payload = {"node_id": str(uuid.uuid5(OPERATIONS, str(parent)))}
    child = outbox.enqueue("archive_node", payload, user_id=ALICE, dependencies=[parent])
    outbox.enqueue("add_node", {"content": "later"}, user_id=ALICE, operation_id=parent)
    with OutboxSyncer(tmp_path, db_dsn) as syncer:
        first = syncer.run_cycle()
        assert (first.accepted, first.deferred) == (1, 1)
        assert syncer.run_cycle().accepted == 1
    _run_operations(db_dsn)
    record = _ledger(db_dsn, "SELECT state FROM prme.get_receipt(%s, %s)", [ALICE, child.operation_id])
    assert record == [("committed",)]


def test_a_tampered_record_is_rejected_with_its_reason_and_never_submitted(tmp_path: Path, db_dsn: str) -> None:
    outbox = Outbox(tmp_path)
    honest = outbox.enqueue("add_node", {"content": "honest"}, user_id=ALICE)
    tampered = outbox.enqueue("add_node", {"content": "original"}, user_id=ALICE)
    path = tmp_path / "outbox" / "pending" / f"{tampered.operation_id}.json"
    document = json.loads(path.read_text())
    document["payload"]["content"] = "changed on disk"
    path.write_text(json.dumps(document))
    garbage = tmp_path / "outbox" / "pending" / f"{uuid.uuid4()}.json"
    garbage.write_text("{torn")
    with OutboxSyncer(tmp_path, db_dsn) as syncer:
        report = syncer.run_cycle()
    assert (report.accepted, report.rejected) == (1, 2)
    rejected = outbox.get(tampered.operation_id)
    assert rejected is not None and rejected.state == "rejected"
    assert rejected.reason is not None and "does not match its payload_hash" in rejected.reason
    assert rejected.payload["content"] == "changed on disk"  # kept as found, nothing overwritten
    unreadable = json.loads((tmp_path / "outbox" / "rejected" / garbage.name).read_text())
    assert "does not parse" in unreadable["reason"] and "raw" not in unreadable
    assert unreadable["size"] == 5 and unreadable["sha256"] == hashlib.sha256(b"{torn").hexdigest()
    ops = _ledger(db_dsn, "SELECT operation_id FROM prme.operations")
    assert ops == [(honest.operation_id,)]


def test_a_receipt_for_another_operation_rejects_the_local_record(tmp_path: Path, db_dsn: str) -> None:
    taken, lost = uuid.uuid4(), uuid.uuid4()
    with MemoryClient(db_dsn) as memory:
        for op in (taken, lost):
            memory.submit_operation(op, "add_node", {"content": "the ledger's"}, user_id=ALICE)
    outbox = Outbox(tmp_path)
    # 1. submit answers PR409: the id is taken by another operation.
    outbox.enqueue("add_node", {"content": "the pack's"}, user_id=ALICE, operation_id=taken)
    # 2. a record left in submitting (a crash) whose receipt is another operation's.
    outbox.enqueue("add_event", {"content": "the pack's"}, user_id=ALICE, operation_id=lost)
    outbox.spool.move(str(lost), "pending", "submitting")
    with OutboxSyncer(tmp_path, db_dsn) as syncer:
        report = syncer.run_cycle()
    assert (report.rejected, report.accepted) == (2, 0)
    first, second = outbox.get(taken), outbox.get(lost)
    assert first is not None and first.state == "rejected" and first.reason is not None
    assert "another operation under this operation_id" in first.reason
    assert second is not None and second.state == "rejected" and second.reason is not None
    assert "differs from the local record in kind (ledger add_node, local add_event), payload_hash" in second.reason
    assert second.receipt is not None and second.receipt["kind"] == "add_node"
    assert second.payload == {"content": "the pack's"}
    stored = _ledger(db_dsn, "SELECT payload->>'content' FROM prme.operations ORDER BY 1")
    assert stored == [("the ledger's",), ("the ledger's",)]  # the ledger untouched


def test_a_receipt_rejected_by_the_executor_rejects_the_record(tmp_path: Path, db_dsn: str) -> None:
    outbox = Outbox(tmp_path)
    bad = outbox.enqueue("reinforce", {"node_id": str(uuid.uuid4())}, user_id=ALICE)
    with OutboxSyncer(tmp_path, db_dsn) as syncer:
        syncer.run_cycle()
        _run_operations(db_dsn)
        assert syncer.run_cycle().rejected == 1
    record = outbox.get(bad.operation_id)
    assert record is not None and record.state == "rejected" and record.reason is not None
    assert "not_found" in record.reason and record.receipt is not None and record.receipt["state"] == "rejected"


def test_backoff_is_exponential_with_a_cap() -> None:
    assert [backoff_delay(n, base=0.5, cap=8.0) for n in range(8)] == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert backoff_delay(10_000, base=1.0, cap=30.0) == 30.0


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _with_port(dsn: str, port: int) -> str:
    params = conninfo_to_dict(dsn)
    params.update(host="127.0.0.1", port=str(port))
    return make_conninfo(**params)  # type: ignore[arg-type]


def test_an_unreachable_ledger_raises_then_delivers_when_back(tmp_path: Path, db_dsn: str) -> None:
    outbox = Outbox(tmp_path)
    record = outbox.enqueue("add_node", {"content": "x"}, user_id=ALICE)
    with OutboxSyncer(tmp_path, _with_port(db_dsn, _dead_port()), connect_timeout=2) as syncer:
        with pytest.raises(LedgerUnavailable, match="cannot connect"):
            syncer.run_cycle()
        assert _counts(tmp_path)["pending"] == 1
        syncer.dsn = db_dsn
        assert syncer.run_cycle().accepted == 1
    assert _ledger(db_dsn, "SELECT count(*) FROM prme.operations WHERE operation_id = %s", [record.operation_id]) == [
        (1,)
    ]


class _Proxy:
    """A TCP forwarder on a fixed port: started late, the ledger "comes up"; with
    ``cut_after_commit`` set, it drops the connection instead of passing on the server's
    answer to the next COMMIT -- a response lost after the ledger committed."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self.server = socket.create_server(("127.0.0.1", port))
        self.target = target
        self.closed = False
        self.cut_after_commit = False
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b, a is upstream), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, from_server: bool) -> None:
        try:
            while data := src.recv(65536):
                if from_server and self.cut_after_commit and b"COMMIT\x00" in data:  # CommandComplete "COMMIT"
                    self.cut_after_commit = False
                    self.cuts += 1
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.closed = True
        self.server.close()


def _wait(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_response_lost_after_commit_is_resolved_by_the_receipts(tmp_path: Path, db_dsn: str) -> None:
    outbox = Outbox(tmp_path)
    ids = [outbox.enqueue("add_node", {"content": f"m{i}"}, user_id=ALICE).operation_id for i in range(3)]
    params = conninfo_to_dict(db_dsn)
    port = _dead_port()
    proxy = _Proxy(port, ("127.0.0.1", int(params.get("port") or 5432)))
    try:
        with OutboxSyncer(tmp_path, _with_port(db_dsn, port)) as syncer:
            proxy.cut_after_commit = True  # the batch commits in the ledger; its answer never arrives
            with pytest.raises(LedgerUnavailable, match="the ledger failed"):
                syncer.run_cycle()
            assert proxy.cuts == 1
            assert _counts(tmp_path)["submitting"] == 3
            assert len(_ledger(db_dsn, "SELECT 1 FROM prme.operations")) == 3  # it did commit
            report = syncer.run_cycle()  # a new connection: the receipts tell what happened
            assert (report.submitted, report.accepted) == (0, 3)
    finally:
        proxy.close()
    assert _counts(tmp_path)["accepted"] == 3
    assert sorted(op for (op,) in _ledger(db_dsn, "SELECT operation_id FROM prme.operations")) == sorted(ids)
    record = outbox.get(ids[0])
    assert record is not None and record.receipt is not None and record.receipt["created"] is False


def test_ledger_down_then_up_delivers_everything_and_sigterm_stops_the_worker(tmp_path: Path, db_dsn: str) -> None:
    outbox = Outbox(tmp_path)
    ids = [outbox.enqueue("add_node", {"content": f"m{i}"}, user_id=ALICE).operation_id for i in range(20)]
    port = _dead_port()
    params = conninfo_to_dict(db_dsn)
    target = (str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
    if target[0].startswith("/"):
        target = ("127.0.0.1", target[1])
    log = (tmp_path / "sync.log").open("w+")
    dead_dsn = _with_port(db_dsn, port)
    command = ["sync", "--pack", str(tmp_path), "--dsn", dead_dsn, "--poll-interval", "0.1"]
    worker = subprocess.Popen(
        [sys.executable, "-m", "prme_pg.cli", *command],
        stdout=subprocess.DEVNULL,
        stderr=log,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )
    proxy = None
    try:
        _wait(lambda: (tmp_path / "sync.log").read_text().count("retrying in") >= 2, "two failed attempts")
        text = (tmp_path / "sync.log").read_text()
        assert "retrying in 0.5 s" in text and "retrying in 1.0 s" in text  # the backoff schedule
        assert _counts(tmp_path)["pending"] == 20
        proxy = _Proxy(port, target)  # the ledger comes up
        _wait(lambda: _counts(tmp_path)["accepted"] == 20, "delivery")
        _run_operations(db_dsn)
        _wait(lambda: _counts(tmp_path)["completed"] == 20, "completion")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
        if proxy is not None:
            proxy.close()
    assert "reachable again" in (tmp_path / "sync.log").read_text()
    delivered = _ledger(db_dsn, "SELECT operation_id FROM prme.operations WHERE state = 'committed'")
    assert sorted(op for (op,) in delivered) == sorted(ids)


@pytest.mark.parametrize("point", ["after_submitting", "after_submit", "after_accepted", "after_receipt"])
def test_killed_at_every_state_then_restarted_delivers_each_record_exactly_once(
    tmp_path: Path, db_dsn: str, point: str
) -> None:
    outbox = Outbox(tmp_path)
    adds = [outbox.enqueue("add_node", {"content": f"memory {i}"}, user_id=ALICE) for i in range(5)]
    confirm = outbox.enqueue(
        "reinforce",
        {"node_id": str(uuid.uuid5(OPERATIONS, str(adds[0].operation_id)))},
        user_id=ALICE,
        dependencies=[adds[0].operation_id],
    )
    sync = ("sync", "--once", "--pack", str(tmp_path), "--dsn", db_dsn, "--batch", "2")
    if point == "after_receipt":  # records must be accepted and committed before the poll can die
        assert _cli(*sync).returncode == 0
        _run_operations(db_dsn)
    crashed = _cli(*sync, env={"PRME_SYNC_CRASH_AT": point})
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr
    states = _counts(tmp_path)
    expected_left = {"after_submitting": "submitting", "after_submit": "submitting", "after_accepted": "accepted"}
    if point in expected_left:
        assert states[expected_left[point]] == 2  # the first batch, frozen where the worker died
    else:
        assert states["accepted"] == 6
    for _ in range(3):  # restart until everything is final
        restarted = _cli(*sync)
        assert restarted.returncode == 0, restarted.stderr
        _run_operations(db_dsn)
    assert _counts(tmp_path) == {"pending": 0, "submitting": 0, "accepted": 0, "completed": 6, "rejected": 0}
    ops = _ledger(db_dsn, "SELECT operation_id, state FROM prme.operations")
    assert sorted(str(op) for op, _ in ops) == sorted(str(r.operation_id) for r in [*adds, confirm])
    assert {state for _, state in ops} == {"committed"}
    nodes = _ledger(db_dsn, "SELECT count(*), sum(version) FROM prme.nodes WHERE user_id = %s", [ALICE])
    assert nodes == [(5, 6)]  # five memories, one confirmed once


def test_a_second_worker_is_refused_with_the_holders_pid(tmp_path: Path, db_dsn: str) -> None:
    outbox = Outbox(tmp_path)
    outbox.enqueue("add_node", {"content": "x"}, user_id=ALICE)
    with SyncLock(outbox):
        refused = _cli("sync", "--once", "--pack", str(tmp_path), "--dsn", db_dsn)
        assert refused.returncode == 1
        assert f"already being synced by process {os.getpid()}" in refused.stderr.replace("\n", " ")
        with pytest.raises(SyncLockHeld), OutboxSyncer(tmp_path, db_dsn):
            pass
    assert _counts(tmp_path)["pending"] == 1  # the refused worker touched nothing
    done = _cli("sync", "--once", "--pack", str(tmp_path), "--dsn", db_dsn, "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["report"]["accepted"] == 1 and document["outbox"]["accepted"]["count"] == 1


def test_sync_once_with_the_ledger_down_exits_1(tmp_path: Path, db_dsn: str) -> None:
    Outbox(tmp_path).enqueue("add_node", {"content": "x"}, user_id=ALICE)
    down = _cli("sync", "--once", "--pack", str(tmp_path), "--dsn", _with_port(db_dsn, _dead_port()))
    assert down.returncode == 1 and "cannot connect to the ledger" in down.stderr
    assert _counts(tmp_path)["pending"] == 1


@pytest.mark.slow
def test_ten_thousand_records_through_the_cli_with_a_progress_bar(tmp_path: Path, db_dsn: str) -> None:
    pack = tmp_path / "memories"
    outbox = Outbox(pack)
    ids = set()
    now = datetime.now(UTC)
    for i in range(10_000):
        # The records enqueue would write, without its fsyncs (this test is about delivery).
        payload, digest = canonical_payload({"content": f"e{i}"})
        record = OutboxRecord(
            time_ordered_uuid(), ALICE, "add_event", 2, (), payload, digest, "pending", None, None, 0, now, now
        )
        (pack / "outbox" / "pending" / f"{record.name}.json").write_text(json.dumps(record.document()))
        ids.add(record.operation_id)
    assert outbox.records("pending")[0].payload == {"content": "e0"}
    started = time.monotonic()
    run = _cli("sync", "--once", "--pack", str(pack), "--dsn", db_dsn, "--batch", "500", timeout=300)
    elapsed = time.monotonic() - started
    assert run.returncode == 0, run.stderr
    assert "submitting pending" in run.stderr and "10000/10000" in run.stderr  # the progress bar
    assert "accepted 10000" in run.stdout
    assert _counts(pack) == {"pending": 0, "submitting": 0, "accepted": 10_000, "completed": 0, "rejected": 0}
    delivered = _ledger(db_dsn, "SELECT operation_id FROM prme.operations WHERE user_id = %s", [ALICE])
    assert len(delivered) == 10_000 and {op for (op,) in delivered} == ids
    print(f"10,000 records delivered in {elapsed:.1f} s")


# -- robustness: a dependency that arrives late, stray or damaged files --------------------------


def test_a_dependency_enqueued_during_a_cycle_waits_instead_of_being_rejected(tmp_path: Path, db_dsn: str) -> None:
    """The worker lists A (depending on B) before B lands: A waits for B, it is not rejected by a PR404."""
    outbox = Outbox(tmp_path)
    parent = uuid.uuid4()
    payload = {"node_id": str(uuid.uuid5(OPERATIONS, str(parent)))}
    child = outbox.enqueue("archive_node", payload, user_id=ALICE, dependencies=[parent])
    with OutboxSyncer(tmp_path, db_dsn) as syncer:
        first = syncer.run_cycle()  # B is neither in the outbox nor in the ledger yet
        assert (first.submitted, first.rejected, first.deferred) == (0, 0, 1)
        outbox.enqueue("add_node", {"content": "arrives late"}, user_id=ALICE, operation_id=parent)
        assert syncer.run_cycle().accepted == 1  # B; A still waits for B to leave pending
        assert syncer.run_cycle().accepted == 1  # A
    _run_operations(db_dsn)
    record = _ledger(db_dsn, "SELECT state FROM prme.get_receipt(%s, %s)", [ALICE, child.operation_id])
    assert record == [("committed",)]


def test_a_dependency_already_in_the_ledger_is_not_waited_for(tmp_path: Path, db_dsn: str) -> None:
    parent = uuid.uuid4()
    with MemoryClient(db_dsn) as memory:
        memory.submit_operation(parent, "add_node", {"content": "from elsewhere"}, user_id=ALICE)
    payload = {"node_id": str(uuid.uuid5(OPERATIONS, str(parent)))}
    Outbox(tmp_path).enqueue("archive_node", payload, user_id=ALICE, dependencies=[parent])
    with OutboxSyncer(tmp_path, db_dsn) as syncer:
        report = syncer.run_cycle()
    assert (report.accepted, report.deferred, report.rejected) == (1, 0, 0)


def test_stray_files_in_state_folders_are_ignored(tmp_path: Path, db_dsn: str) -> None:
    """An editor's or a file manager's leftovers (``._<id>.json``, a folder) neither crash sync nor count."""
    outbox = Outbox(tmp_path)
    record = outbox.enqueue("add_node", {"content": "x"}, user_id=ALICE)
    pending = tmp_path / "outbox" / "pending"
    (pending / f"._{record.operation_id}.json").write_bytes(b"\x00\x05\x16\x07 resource fork")
    (pending / f"{uuid.uuid4()}.json").mkdir()
    run = _cli("sync", "--once", "--pack", str(tmp_path), "--dsn", db_dsn)
    assert run.returncode == 0, run.stderr
    assert _counts(tmp_path) == {"pending": 0, "submitting": 0, "accepted": 1, "completed": 0, "rejected": 0}
    assert (pending / f"._{record.operation_id}.json").exists()  # left alone


def test_a_naive_created_at_rejects_that_record_only(tmp_path: Path, db_dsn: str) -> None:
    outbox = Outbox(tmp_path)
    good = outbox.enqueue("add_node", {"content": "good"}, user_id=ALICE)
    naive = outbox.enqueue("add_node", {"content": "naive"}, user_id=ALICE)
    path = tmp_path / "outbox" / "pending" / f"{naive.operation_id}.json"
    document = json.loads(path.read_text())
    document["created_at"] = "2026-01-01T00:00:00"  # no time zone
    path.write_text(json.dumps(document))
    with OutboxSyncer(tmp_path, db_dsn) as syncer:
        report = syncer.run_cycle()
    assert (report.accepted, report.rejected) == (1, 1)
    rejected = json.loads((tmp_path / "outbox" / "rejected" / path.name).read_text())
    assert "time zone" in rejected["reason"]
    assert _ledger(db_dsn, "SELECT operation_id FROM prme.operations") == [(good.operation_id,)]


def test_a_record_whose_user_the_ledger_refuses_is_rejected_and_the_others_complete(
    tmp_path: Path, db_dsn: str
) -> None:
    outbox = Outbox(tmp_path)
    first = outbox.enqueue("add_node", {"content": "one"}, user_id=ALICE)
    second = outbox.enqueue("add_node", {"content": "two"}, user_id=ALICE)
    third = outbox.enqueue("add_node", {"content": "three"}, user_id=ALICE)
    with OutboxSyncer(tmp_path, db_dsn) as syncer:
        assert syncer.run_cycle().accepted == 3
    _run_operations(db_dsn)
    outbox.spool.move(str(third.operation_id), "accepted", "submitting")  # as after a crash
    for record, state in ((first, "accepted"), (third, "submitting")):
        path = tmp_path / "outbox" / state / f"{record.operation_id}.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | {"user_id": " bob"}))
    for _ in range(2):  # every run, not only the first
        run = _cli("sync", "--once", "--pack", str(tmp_path), "--dsn", db_dsn)
        assert run.returncode == 0, run.stderr
    assert _counts(tmp_path) == {"pending": 0, "submitting": 0, "accepted": 0, "completed": 1, "rejected": 2}
    done = outbox.get(second.operation_id)
    assert done is not None and done.state == "completed"
    for record in (first, third):
        refused = outbox.get(record.operation_id)
        assert refused is not None and refused.reason is not None and "user_id" in refused.reason


def test_a_symlink_in_a_state_folder_is_never_followed(tmp_path: Path, db_dsn: str) -> None:
    """A symlink planted in pending/ must not copy its target (a secret) into the pack."""
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-API-KEY-123")
    pack = tmp_path / "pack"
    Outbox(pack).enqueue("add_node", {"content": "x"}, user_id=ALICE)
    (pack / "outbox" / "pending" / f"{uuid.uuid4()}.json").symlink_to(secret)
    torn = pack / "outbox" / "pending" / f"{uuid.uuid4()}.json"
    torn.write_text("{torn SECRET-API-KEY-123")
    with OutboxSyncer(pack, db_dsn) as syncer:
        report = syncer.run_cycle()
    assert (report.accepted, report.rejected) == (1, 1)
    leaked = [p for p in pack.rglob("*") if p.is_file() and not p.is_symlink() and b"SECRET" in p.read_bytes()]
    assert leaked == []  # neither the symlink's target nor the torn file's bytes are copied
    unreadable = json.loads((pack / "outbox" / "rejected" / torn.name).read_text())
    assert unreadable["size"] == len(b"{torn SECRET-API-KEY-123") and "raw" not in unreadable
    assert unreadable["sha256"] == hashlib.sha256(b"{torn SECRET-API-KEY-123").hexdigest()


# -- issue 32, item 8: the outbox never follows a symlink out of the pack --------------------------


@pytest.mark.parametrize("planted", ["outbox", "outbox/pending", "outbox/tmp", "learning/pending"])
def test_a_symlinked_state_folder_is_refused(tmp_path: Path, planted: str) -> None:
    from prme_pg.learning import LearningQueue
    from prme_pg.spool import UnsafeSpoolPath

    pack, elsewhere = tmp_path / "pack", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (pack / planted).parent.mkdir(parents=True)
    (pack / planted).symlink_to(elsewhere, target_is_directory=True)
    opener = LearningQueue if planted.startswith("learning") else Outbox
    for create in (True, False):
        with pytest.raises(UnsafeSpoolPath, match="not a folder of its own") as raised:
            opener(pack, create=create)
        assert str(pack / planted) in str(raised.value)
    assert list(elsewhere.iterdir()) == []  # nothing written outside the pack


@pytest.mark.parametrize("lock", [".lock", "sync.lock"])
def test_a_symlinked_lock_file_is_refused(tmp_path: Path, lock: str) -> None:
    from prme_pg.spool import UnsafeSpoolPath

    pack, target = tmp_path / "pack", tmp_path / "elsewhere" / "planted"
    target.parent.mkdir()
    outbox = Outbox(pack)
    (outbox.root / lock).symlink_to(target)
    take: Callable[[], object] = (
        (lambda: outbox.enqueue("add_memory", {"user_id": "u", "content": "x"}, user_id="u"))
        if lock == ".lock"
        else SyncLock(outbox).acquire
    )
    with pytest.raises(UnsafeSpoolPath, match="symlink") as raised:
        take()
    assert str(outbox.root / lock) in str(raised.value)
    assert not target.exists()  # not created through the link
