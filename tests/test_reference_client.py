"""A client written to the reference protocol's contract delivers to prme-pg unchanged.

The reference is Prometheus's Durable Memory v2 protocol: its server (surreal-memory-server,
``src/operations.rs`` and ``openapi/surreal-memory-v2.openapi.json``) and its learning worker
(prometheus-knowledge-rs, ``pk-learning-worker``). The client below follows that worker's
delivery: GET the receipt by id (no token) -> on 404, GET /ready and require
``capabilities.ledger == true`` -> POST -> parse the receipt strictly -> check id, kind, hash
and dependencies (in the order submitted) against its own record -> map the state
(committed -> completed, rejected -> rejected, anything else -> accepted). Requests, receipts,
events and readiness are checked against the reference's JSON Schemas (written out below from
its OpenAPI document; prme's own additions are named, so anything else still fails).

Everything is real: ``prme-pg serve --trusted-loopback`` and ``prme-pg worker`` run as
processes over a clone of the test database, and the client speaks HTTP over a socket.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import rfc8785

from prme_pg import testing

OWNER = "project:alpha"
OPERATIONS_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:prme-pg:operations")

# -- the reference's JSON Schemas (its OpenAPI 3.1 components), and prme's named additions ------

_ANY = {"type": ["object", "array", "string", "number", "boolean", "null"]}
_UINT = {"type": "integer", "minimum": 0}
_KINDS = ["add_memory", "create_task_stream", "add_task_step", "complete_step"]
_STATES = ["accepted", "validated", "blocked", "planned", "processing", "indexed", "committed", "rejected"]

REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["operation_id", "schema_version", "kind", "payload_hash", "payload"],
    "properties": {
        "operation_id": {"type": "string", "minLength": 1},
        "schema_version": {"const": 2},
        "kind": {"enum": _KINDS},
        "dependencies": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "payload_hash": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "payload": {"type": "object"},
    },
    "additionalProperties": False,
}
ADD_MEMORY_PAYLOAD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["content"],
    "properties": {
        "content": {"type": "string"},
        "user_id": {"type": ["string", "null"]},
        "agent_id": {"type": ["string", "null"]},
        "session_id": {"type": ["string", "null"]},
        "categories": {"type": ["array", "null"], "items": {"type": "string"}},
    },
}
_RECEIPT_PROPERTIES: dict[str, Any] = {
    "operation_id": {"type": "string"},
    "schema_version": {"const": 2},
    "kind": {"enum": _KINDS},
    "payload_hash": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    "dependencies": {"type": "array", "items": {"type": "string"}},
    "state": {"enum": _STATES},
    "blocked_by": {"type": "array", "items": {"type": "string"}},
    "result": _ANY,
    "error": {"type": ["string", "null"]},
    "executor_generation": _UINT,
    "executor_progress_seq": _UINT,
    "executor_exit_count": _UINT,
    "executor_last_exit": {"type": ["string", "null"]},
    "executor_error": {"type": ["string", "null"]},
    "progress_seq": _UINT,
    "created_at": {"type": "string", "format": "date-time"},
    "updated_at": {"type": "string", "format": "date-time"},
}
#: prme's own receipt fields (docs/LEDGER.md, "Compatibility").
_PRME_RECEIPT_PROPERTIES: dict[str, Any] = {
    "error_detail": {"type": ["object", "null"]},
    "attempts": _UINT,
    "created": {"type": "boolean"},
}
RECEIPT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": list(_RECEIPT_PROPERTIES),
    "properties": {**_RECEIPT_PROPERTIES, **_PRME_RECEIPT_PROPERTIES},
    "additionalProperties": False,
}
EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["operation_id", "sequence", "from_state", "to_state", "detail", "executor_generation", "occurred_at"],
    "properties": {
        "operation_id": {"type": "string"},
        "sequence": _UINT,
        "from_state": {"type": ["string", "null"]},
        "to_state": {"type": "string"},
        "detail": _ANY,
        "executor_generation": _UINT,
        "occurred_at": {"type": "string", "format": "date-time"},
        "seq": _UINT,  # prme: the owner's stream position
    },
    "additionalProperties": False,
}
#: The reference's readiness; its capabilities list model-side ones (coordinator, tokenizer,
#: model_executor, search_index) prme has no counterpart for: the two a client reads are required.
READINESS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["status", "capabilities", "ingestion_ready", "search_ready"],
    "properties": {
        "status": {"enum": ["ready", "not_ready"]},
        "capabilities": {
            "type": "object",
            "required": ["ledger", "storage"],
            "additionalProperties": {"type": "boolean"},
        },
        "ingestion_ready": {"type": "boolean"},
        "search_ready": {"type": "boolean"},
        "detail": {"type": "string"},  # prme: why not ready
    },
    "additionalProperties": False,
}
_FORMATS = jsonschema.FormatChecker()


def _valid(instance: Any, schema: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(schema, format_checker=_FORMATS).validate(instance)


# -- the reference client -------------------------------------------------------------------------


def canonical_hash(payload: dict[str, Any]) -> str:
    """The reference's payload hash: sha256 of the compact JSON with sorted keys (for these
    payloads, strings and arrays of strings, the same bytes as RFC 8785)."""
    compact = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert compact == rfc8785.dumps(payload), "the payloads here have one canonical form"
    return hashlib.sha256(compact).hexdigest()


@dataclass
class Receipt:
    """The receipt as the reference worker parses it: these fields, these types, or a failure."""

    operation_id: str
    schema_version: int
    kind: str
    payload_hash: str
    dependencies: list[str]
    state: str
    blocked_by: list[str]
    result: Any
    error: str | None
    executor_generation: int
    progress_seq: int
    created_at: str
    updated_at: str

    @classmethod
    def parse(cls, document: Any) -> Receipt:
        _valid(document, RECEIPT_SCHEMA)
        fields = {name: document[name] for name in cls.__dataclass_fields__}
        for name in ("schema_version", "executor_generation", "progress_seq"):
            assert type(fields[name]) is int and fields[name] >= 0, name
        assert fields["error"] is None or isinstance(fields["error"], str)
        return cls(**fields)


@dataclass
class Operation:
    """A local record of the worker: what it delivers and what it last saw."""

    operation_id: str
    kind: str
    payload: dict[str, Any]
    dependencies: list[str] = field(default_factory=list)
    state: str = "pending"
    receipt: Receipt | None = None

    @property
    def payload_hash(self) -> str:
        return canonical_hash(self.payload)

    def request(self) -> dict[str, Any]:
        body = {
            "operation_id": self.operation_id,
            "schema_version": 2,
            "kind": self.kind,
            "dependencies": self.dependencies,
            "payload_hash": self.payload_hash,
            "payload": self.payload,
        }
        _valid(body, REQUEST_SCHEMA)
        _valid(self.payload, ADD_MEMORY_PAYLOAD_SCHEMA)
        return body


class ReferenceClient:
    """The learning worker's delivery, over HTTP, without a token."""

    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=30)

    def close(self) -> None:
        self.http.close()

    def reconcile(self, op: Operation) -> str:
        """One delivery step: look the operation up, submit it when the server has none, apply the receipt."""
        found = self.http.get(f"/api/v2/operations/{op.operation_id}")
        if found.status_code == 404:
            self.ensure_ready()
            submitted = self.http.post("/api/v2/operations", json=op.request())
            assert submitted.status_code in (200, 202), submitted.text
            receipt = Receipt.parse(submitted.json())
        else:
            assert found.status_code == 200, found.text
            receipt = Receipt.parse(found.json())
        return self.apply(op, receipt)

    def ensure_ready(self) -> None:
        ready = self.http.get("/ready")
        body = ready.json()
        _valid(body, READINESS_SCHEMA)
        assert ready.status_code == 200 and body["capabilities"]["ledger"] is True, body

    @staticmethod
    def apply(op: Operation, receipt: Receipt) -> str:
        assert receipt.schema_version == 2
        assert receipt.operation_id == op.operation_id
        assert receipt.kind == op.kind
        assert receipt.payload_hash == op.payload_hash
        assert receipt.dependencies == op.dependencies, "dependencies in the order submitted"
        op.receipt = receipt
        op.state = {"committed": "completed", "rejected": "rejected"}.get(receipt.state, "accepted")
        return op.state

    def deliver(self, op: Operation, timeout: float = 60) -> Receipt:
        """Reconcile until the operation is terminal, backing off while nothing changes."""
        deadline = time.monotonic() + timeout
        delay = 0.05
        last: tuple[str, int] | None = None
        while self.reconcile(op) == "accepted":
            assert op.receipt is not None
            seen = (op.receipt.state, op.receipt.progress_seq)
            delay = min(delay * 2, 1.0) if seen == last else 0.05
            last = seen
            assert time.monotonic() < deadline, f"{op.operation_id} is still {op.receipt.state}"
            time.sleep(delay)
        assert op.receipt is not None
        return op.receipt

    def events(self, operation_id: str, headers: dict[str, str] | None = None, **params: Any) -> list[dict[str, Any]]:
        """One operation's Server-Sent Events: [{id, event, data}], each data checked."""
        found: list[dict[str, Any]] = []
        with self.http.stream(
            "GET",
            f"/api/v2/operations/{operation_id}/events",
            params={"max_seconds": 0, **params},
            headers=headers or {},
        ) as response:
            assert response.status_code == 200
            current: dict[str, str] = {}
            for line in response.iter_lines():
                if line == "":
                    if "data" in current:
                        data = json.loads(current["data"])
                        assert current.get("event") == "operation_state", current
                        _valid(data, EVENT_SCHEMA)
                        assert current.get("id") == str(data["sequence"]), "the SSE id is the event sequence"
                        found.append({"id": current["id"], "data": data})
                    current = {}
                elif not line.startswith(":"):
                    name, _, value = line.partition(":")
                    current[name] = value[1:] if value.startswith(" ") else value
        return found


# -- the processes ------------------------------------------------------------------------------


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "prme_pg.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _stop(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    return process.stdout.read() if process.stdout else ""


@pytest.fixture
def server(db_dsn: str) -> Iterator[str]:
    """``prme-pg serve --trusted-loopback`` on a free loopback port: its base URL."""
    port = testing.free_port()
    serve = _spawn(
        "serve",
        "--dsn",
        db_dsn,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--trusted-loopback",
        "--default-user",
        OWNER,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert serve.poll() is None, _stop(serve)
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "prme-pg serve did not start"
            time.sleep(0.1)
        yield base
    finally:
        _stop(serve)


@pytest.fixture
def worker(db_dsn: str) -> Iterator[subprocess.Popen[str]]:
    """``prme-pg worker``: the executor, as a process."""
    process = _spawn("worker", "--dsn", db_dsn, "--worker", "reference-test")
    try:
        yield process
    finally:
        _stop(process)


@pytest.fixture
def client(server: str) -> Iterator[ReferenceClient]:
    reference = ReferenceClient(server)
    try:
        yield reference
    finally:
        reference.close()


def _memory(name: str, dependencies: list[str] | None = None) -> Operation:
    """An add_memory operation as the learning worker builds it: a 64-hex id, its payload fields."""
    return Operation(
        operation_id=hashlib.sha256(name.encode()).hexdigest(),
        kind="add_memory",
        payload={
            "content": f"Session record {name}: receipts are the acknowledgement boundary.",
            "user_id": OWNER,
            "agent_id": "@project",
            "session_id": f"session-{name}",
            "categories": ["karpathy", "session-learning"],
        },
        dependencies=dependencies or [],
    )


# -- the deliveries -------------------------------------------------------------------------------


def test_one_memory_is_delivered(client: ReferenceClient, worker: subprocess.Popen[str]) -> None:
    op = _memory("one")
    receipt = client.deliver(op)
    assert op.state == "completed" and receipt.error is None
    assert receipt.result["node_id"] == str(uuid.uuid5(OPERATIONS_NAMESPACE, op.operation_id))
    assert receipt.result["categories"] == ["karpathy", "session-learning"]
    assert receipt.executor_generation == 1
    states = [e["data"]["to_state"] for e in client.events(op.operation_id)]
    assert states == ["accepted", "processing", "committed"]
    assert receipt.progress_seq == len(states), "progress_seq advances with every event"


def test_a_chain_submitted_dependent_first_commits_in_order(
    client: ReferenceClient, worker: subprocess.Popen[str]
) -> None:
    first = _memory("chain-1")
    second = _memory("chain-2", [first.operation_id])
    third = _memory("chain-3", [second.operation_id, first.operation_id])
    for op in (third, second):  # dependents first: accepted (and blocked), not refused
        assert client.reconcile(op) == "accepted"
    time.sleep(1.0)  # the worker looks at them: they wait
    client.reconcile(third)
    assert third.receipt is not None and third.receipt.state == "blocked"
    assert third.receipt.blocked_by == sorted([second.operation_id, first.operation_id])
    for op in (first, second, third):
        assert client.deliver(op).state == "committed"
    committed_at = {}
    for op in (first, second, third):
        events = client.events(op.operation_id)
        assert [e["data"]["sequence"] for e in events] == list(range(1, len(events) + 1))
        committed_at[op.operation_id] = events[-1]["data"]["seq"]
    assert committed_at[first.operation_id] < committed_at[second.operation_id] < committed_at[third.operation_id]
    blocked = [e["data"] for e in client.events(third.operation_id) if e["data"]["to_state"] == "blocked"]
    assert blocked and blocked[0]["from_state"] == "accepted"


def test_a_lost_response_is_reconciled_by_id_without_a_second_write(
    client: ReferenceClient, worker: subprocess.Popen[str], db_dsn: str
) -> None:
    op = _memory("lost")
    # The POST reaches the server; its response never reaches the client.
    with (
        httpx.Client(base_url=str(client.http.base_url)) as http,
        http.stream("POST", "/api/v2/operations", json=op.request()) as response,
    ):
        assert response.status_code == 202
    assert op.receipt is None and op.state == "pending"
    # The worker's next run: GET by id finds it (no second submit), then it completes.
    found = client.http.get(f"/api/v2/operations/{op.operation_id}")
    assert found.status_code == 200
    client.apply(op, Receipt.parse(found.json()))
    assert client.deliver(op).state == "committed"
    # A replay of the same request is answered with the stored receipt (200), nothing written.
    replay = client.http.post("/api/v2/operations", json=op.request())
    assert replay.status_code == 200
    assert Receipt.parse(replay.json()) == op.receipt
    import psycopg

    with psycopg.connect(db_dsn) as conn:
        nodes = conn.execute(
            "SELECT count(*) FROM prme.nodes WHERE id = %s", [uuid.uuid5(OPERATIONS_NAMESPACE, op.operation_id)]
        ).fetchone()
        operations = conn.execute("SELECT count(*) FROM prme.operations").fetchone()
    assert nodes == (1,) and operations == (1,)


def test_the_same_id_with_another_hash_is_409_and_the_original_is_kept(
    client: ReferenceClient, worker: subprocess.Popen[str]
) -> None:
    original = _memory("conflict")
    client.deliver(original)
    impostor = Operation(original.operation_id, "add_memory", {**original.payload, "content": "Something else."})
    conflict = client.http.post("/api/v2/operations", json=impostor.request())
    assert conflict.status_code == 409
    kept = Receipt.parse(client.http.get(f"/api/v2/operations/{original.operation_id}").json())
    assert kept.payload_hash == original.payload_hash and kept.state == "committed"


def test_events_resume_by_last_event_id_and_after_without_gap_or_duplicate(
    client: ReferenceClient, worker: subprocess.Popen[str]
) -> None:
    op = _memory("resume")
    client.deliver(op)
    history = client.events(op.operation_id)
    assert [e["data"]["to_state"] for e in history] == ["accepted", "processing", "committed"]
    assert [e["data"]["from_state"] for e in history] == [None, "accepted", "processing"]
    assert [e["data"]["executor_generation"] for e in history] == [0, 1, 1]
    # A reconnect after the first event: Last-Event-ID, or the reference's ?after=.
    assert client.events(op.operation_id, headers={"Last-Event-ID": "1"}) == history[1:]
    assert client.events(op.operation_id, after=1) == history[1:]
    assert client.events(op.operation_id, after=2) == history[2:]
    assert client.events(op.operation_id, headers={"Last-Event-ID": "3"}) == []


def test_without_trusted_mode_a_token_is_required(db_dsn: str) -> None:
    """Token auth stays the default: the reference client's first GET is 401 there."""
    from .live_server import serve

    with serve(db_dsn) as base, httpx.Client(base_url=base) as http:
        assert http.get(f"/api/v2/operations/{_memory('x').operation_id}").status_code == 401
        assert http.post("/api/v2/operations", json=_memory("x").request()).status_code == 401


def test_trusted_mode_is_loopback_only_and_opens_the_ledger_alone(server: str, db_dsn: str) -> None:
    """serve refuses --trusted-loopback on any other bind; in trusted mode every route but the
    ledger's still needs a token, and an add_memory payload names its owner."""
    for host in ("0.0.0.0", "192.0.2.1", "::"):  # noqa: S104 (each is refused, never bound)
        refused = subprocess.run(
            [sys.executable, "-m", "prme_pg.cli", "serve", "--dsn", db_dsn, "--host", host, "--trusted-loopback"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert refused.returncode != 0 and "loopback" in refused.stderr, refused.stderr
    with httpx.Client(base_url=server) as http:
        assert http.get("/api/v2/ledger").status_code == 401
        assert http.post("/api/v1/nodes", json={"content": "x"}).status_code in (401, 404)
        other = Operation("other-owner", "add_memory", {"content": "bob's", "user_id": "bob"})
        accepted = http.post("/api/v2/operations", json=other.request())
        assert accepted.status_code == 202, accepted.text
        # Read back: the default owner has no such operation; bob's is found by naming him.
        assert http.get("/api/v2/operations/other-owner").status_code == 404
        assert http.get("/api/v2/operations/other-owner", params={"user_id": "bob"}).status_code == 200
        # A token still works, and then names the owner itself.
        assert http.get("/api/v2/operations/other-owner", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_trusted_mode_on_a_unix_socket(db_dsn: str, tmp_path: Path) -> None:
    """serve --uds --trusted-loopback: peers of the socket (which have no address) deliver to the
    ledger without a token; every other route still needs one."""
    socket_path = tmp_path / "prme.sock"
    serve = _spawn("serve", "--dsn", db_dsn, "--uds", str(socket_path), "--trusted-loopback", "--default-user", OWNER)
    try:
        transport = httpx.HTTPTransport(uds=str(socket_path))
        with httpx.Client(transport=transport, base_url="http://prme") as http:
            deadline = time.monotonic() + 60
            while True:
                assert serve.poll() is None, _stop(serve)
                try:
                    if http.get("/health", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "prme-pg serve --uds did not start"
                time.sleep(0.1)
            op = _memory("over the socket")
            accepted = http.post("/api/v2/operations", json=op.request())
            assert accepted.status_code == 202, accepted.text
            assert http.get(f"/api/v2/operations/{op.operation_id}").json()["operation_id"] == op.operation_id
            assert http.get("/api/v2/ledger").status_code == 401
            assert http.post("/v1/nodes", json={"content": "x"}).status_code == 401
    finally:
        _stop(serve)
