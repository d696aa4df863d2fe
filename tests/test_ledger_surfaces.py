"""The operations ledger through both clients and the HTTP API (real PostgreSQL; HTTP over
a real socket): submit and receipt rules, owner isolation, the ledger's backlog, and the
Server-Sent Events streams with resume. The SQL itself is tested in the ledger's own tests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import rfc8785

from prme_pg import (
    AsyncMemoryClient,
    IdempotencyConflict,
    InvalidInput,
    LedgerStatus,
    MemoryClient,
    NotFoundError,
    OperationEvent,
    PrmeError,
    Receipt,
)
from tests.test_http import Api, _problem

from .live_server import serve


def _hash(payload: dict[str, Any]) -> str:
    return hashlib.sha256(rfc8785.dumps(payload)).hexdigest()


def _body(payload: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    payload = {"content": "Prefers tabs"} if payload is None else payload
    body: dict[str, Any] = {
        "operation_id": str(uuid.uuid4()),
        "schema_version": 2,
        "kind": "add_node",
        "dependencies": [],
        "payload_hash": _hash(payload),
        "payload": payload,
    }
    body.update(overrides)
    return body


@pytest.fixture
def api(db_dsn: str) -> Iterator[Api]:
    with MemoryClient(db_dsn) as memory:
        alice = memory.create_api_token("alice")
        bob = memory.create_api_token("bob")
    with serve(db_dsn, max_size=4) as base:
        yield Api(base, db_dsn, alice, bob)


# -- the clients ----------------------------------------------------------------------


def test_sync_client_submit_receipt_events_and_status(db_dsn: str) -> None:
    payload = {"content": "Lives in Berlin", "scope": "personal"}
    op = uuid.uuid4()
    with MemoryClient(db_dsn) as memory:
        first = memory.submit_operation(op, "add_node", payload, user_id="alice")
        assert isinstance(first, Receipt)
        assert first.created and first.state == "accepted" and first.operation_id == str(op)
        assert first.progress_seq == 1
        assert first.payload_hash == _hash(payload)
        assert first.dependencies == () and first.blocked_by == () and first.attempts == 0
        assert first.created_at.utcoffset() is not None
        again = memory.submit_operation(str(op), "add_node", payload, user_id="alice", payload_hash=_hash(payload))
        assert not again.created and again.operation_id == str(op) and again.created_at == first.created_at
        with pytest.raises(IdempotencyConflict):
            memory.submit_operation(op, "add_node", {"content": "Lives in Paris"}, user_id="alice")
        assert memory.get_receipt(op, user_id="alice").payload_hash == first.payload_hash

        child = memory.submit_operation(uuid.uuid4(), "reinforce", {"x": 1}, user_id="alice", dependencies=[op])
        assert child.dependencies == (str(op),)

        with pytest.raises(NotFoundError):
            memory.get_receipt(op, user_id="bob")
        with pytest.raises(NotFoundError):
            memory.get_receipt(uuid.uuid4(), user_id="alice")
        with pytest.raises(InvalidInput):
            memory.get_receipt("not an id", user_id="alice")
        with pytest.raises(NotFoundError):
            memory.get_receipt("not-a-uuid", user_id="alice")
        with pytest.raises(InvalidInput):
            memory.submit_operation(uuid.uuid4(), "add_node", payload, user_id="alice", payload_hash="0" * 64)
        with pytest.raises(InvalidInput):
            memory.submit_operation(uuid.uuid4(), "add_node", payload, user_id="alice", schema_version=1)
        with pytest.raises(InvalidInput):
            memory.submit_operation(uuid.uuid4(), "drop_everything", payload, user_id="alice")
        with pytest.raises(NotFoundError):  # an operation cannot depend on itself
            memory.submit_operation("self", "add_node", payload, user_id="alice", dependencies=["self"])
        with pytest.raises(InvalidInput):
            memory.submit_operation("has space", "add_node", payload, user_id="alice")
        with pytest.raises(InvalidInput):
            memory.submit_operation(uuid.uuid4(), "add_node", [1], user_id="alice")  # type: ignore[arg-type]

        events = memory.operation_events(user_id="alice")
        assert all(isinstance(e, OperationEvent) for e in events)
        assert [(e.operation_id, e.operation_seq, e.state) for e in events] == [
            (str(op), 1, "accepted"),
            (child.operation_id, 1, "accepted"),
        ]
        assert memory.operation_events(user_id="alice", after_seq=events[0].seq) == events[1:]
        assert memory.operation_events(user_id="alice", operation_id=op) == events[:1]
        assert memory.operation_events(user_id="alice", max_count=1) == events[:1]
        assert memory.operation_events(user_id="bob") == []
        with pytest.raises(NotFoundError):
            memory.operation_events(user_id="bob", operation_id=op)
        with pytest.raises(InvalidInput):
            memory.operation_events(user_id="alice", max_count=0)

        status = memory.ledger_status()
        assert isinstance(status, LedgerStatus)
        assert status.accepting and status.ready == 2 and status.blocked == 0 and status.processing == 0
        assert status.oldest_ready_at == first.created_at
        assert status.oldest_ready_age is not None and status.oldest_ready_age.total_seconds() >= 0


def test_async_client_submit_receipt_events_and_status(db_dsn: str) -> None:
    async def scenario() -> None:
        op = uuid.uuid4()
        async with AsyncMemoryClient(db_dsn) as memory:
            first = await memory.submit_operation(op, "add_event", {"content": "hi"}, user_id="alice")
            assert first.created and first.kind == "add_event"
            again = await memory.submit_operation(op, "add_event", {"content": "hi"}, user_id="alice")
            assert not again.created
            with pytest.raises(IdempotencyConflict):
                await memory.submit_operation(op, "add_event", {"content": "bye"}, user_id="alice")
            assert (await memory.get_receipt(op, user_id="alice")).state == "accepted"
            with pytest.raises(NotFoundError):
                await memory.get_receipt(op, user_id="bob")
            events = await memory.operation_events(user_id="alice", operation_id=op)
            assert [(e.operation_seq, e.state) for e in events] == [(1, "accepted")]
            status = await memory.ledger_status()
            assert status.accepting and status.ready == 1

    asyncio.run(scenario())


def test_pack_refuses_the_ledger(tmp_path: Path) -> None:
    op = uuid.uuid4()
    with MemoryClient(tmp_path / "pack") as memory:
        for call in (
            lambda: memory.submit_operation(op, "add_node", {"content": "x"}, user_id="alice"),
            lambda: memory.get_receipt(op, user_id="alice"),
            lambda: memory.operation_events(user_id="alice"),
            lambda: memory.ledger_status(),
        ):
            with pytest.raises(PrmeError, match="needs PostgreSQL"):
                call()

    async def scenario() -> None:
        async with AsyncMemoryClient(tmp_path / "pack2") as memory:
            with pytest.raises(PrmeError, match="needs PostgreSQL"):
                await memory.submit_operation(op, "add_node", {"content": "x"}, user_id="alice")
            with pytest.raises(PrmeError, match="needs PostgreSQL"):
                await memory.get_receipt(op, user_id="alice")
            with pytest.raises(PrmeError, match="needs PostgreSQL"):
                await memory.operation_events(user_id="alice")
            with pytest.raises(PrmeError, match="needs PostgreSQL"):
                await memory.ledger_status()

    asyncio.run(scenario())


# -- HTTP: submit and receipt ----------------------------------------------------------


def test_http_submit_status_matrix(api: Api) -> None:
    body = _body()
    with api.client(api.alice) as http:
        created = http.post("/api/v2/operations", json=body)
        assert created.status_code == 202, created.text
        receipt = created.json()
        assert receipt["created"] is True and receipt["state"] == "accepted"
        assert receipt["operation_id"] == body["operation_id"] and receipt["payload_hash"] == body["payload_hash"]

        replay = http.post("/api/v2/operations", json=body)
        assert replay.status_code == 200, replay.text
        assert replay.json() == {**receipt, "created": False}

        other = _body({"content": "Prefers spaces"}, operation_id=body["operation_id"])
        _problem(http.post("/api/v2/operations", json=other), 409, "PR409")
        assert http.get(f"/api/v2/operations/{body['operation_id']}").json() == {**receipt, "created": False}

        for invalid in (
            _body(payload_hash="0" * 64),
            _body(payload_hash="not hex"),
            _body(schema_version=1),
            _body(schema_version=2**40),
            _body(kind="drop_everything"),
            _body(payload=[1]),
            _body(operation_id="no pe"),
            _body(operation_id="x" * 129),
            _body(dependencies=["a/b"]),
            _body(surprise=True),
            {"operation_id": str(uuid.uuid4())},
        ):
            _problem(http.post("/api/v2/operations", json=invalid), 422, "PR422")
        _problem(
            http.post("/api/v2/operations", content=b"{", headers={"content-type": "application/json"}), 422, "PR422"
        )
        # An operation cannot depend on itself: not found, and nothing stored.
        itself = _body(operation_id="itself", dependencies=["itself"])
        _problem(http.post("/api/v2/operations", json=itself), 404, "PR404")
        _problem(http.get("/api/v2/operations/itself"), 404, "PR404")
        # One not submitted yet is waited for (docs/LEDGER.md).
        early = http.post("/api/v2/operations", json=_body(dependencies=["not-yet"]))
        assert early.status_code == 202 and early.json()["dependencies"] == ["not-yet"], early.text

        dependent = _body(dependencies=[body["operation_id"]])
        response = http.post("/api/v2/operations", json=dependent)
        assert response.status_code == 202, response.text
        assert response.json()["dependencies"] == [body["operation_id"]]

        _problem(http.get(f"/api/v2/operations/{uuid.uuid4()}"), 404, "PR404")
        _problem(http.get("/api/v2/operations/not-a-uuid"), 404, "PR404")
        _problem(http.get("/api/v2/operations/not%20an%20id"), 422, "PR422")

    with api.client(None) as anonymous:
        _problem(anonymous.post("/api/v2/operations", json=_body()), 401, "unauthorized")
        _problem(anonymous.get(f"/api/v2/operations/{body['operation_id']}"), 401, "unauthorized")


def test_http_owners_are_isolated(api: Api) -> None:
    body = _body()
    with api.client(api.alice) as alice, api.client(api.bob) as bob:
        assert alice.post("/api/v2/operations", json=body).status_code == 202
        _problem(bob.get(f"/api/v2/operations/{body['operation_id']}"), 404, "PR404")
        _problem(bob.get(f"/api/v2/operations/{body['operation_id']}/events?max_seconds=0"), 404, "PR404")
        # Ids are scoped by owner: bob's operation with alice's id is his own, new operation.
        mine = bob.post("/api/v2/operations", json={**body, "payload": {"c": 1}, "payload_hash": _hash({"c": 1})})
        assert mine.status_code == 202, mine.text
        with bob.stream("GET", "/api/v2/events", params={"max_seconds": 0}) as response:
            events = _read_events(response)
        assert [e["data"]["operation_id"] for e in events] == [body["operation_id"]]
        assert alice.get(f"/api/v2/operations/{body['operation_id']}").json()["payload_hash"] == body["payload_hash"]
        # A dependency is the same owner's operation: alice's waits for one of her own by that id.
        bobs_only = _body()
        assert bob.post("/api/v2/operations", json=bobs_only).status_code == 202
        waiting = alice.post("/api/v2/operations", json=_body(dependencies=[bobs_only["operation_id"]]))
        assert waiting.status_code == 202, waiting.text


def test_the_ledger_backlog_is_an_authenticated_route(api: Api) -> None:
    """GET /api/v2/ledger (a token): what /ready showed before it answered without one (issue 17)."""
    with api.client(api.alice) as http:
        before = http.get("/api/v2/ledger")
        assert before.status_code == 200, before.text
        assert before.json() == {
            "accepting": True,
            "ready": 0,
            "blocked": 0,
            "processing": 0,
            "pending": 0,
            "oldest_ready_at": None,
            "oldest_ready_age_seconds": None,
        }
        assert http.post("/api/v2/operations", json=_body()).status_code == 202
        ledger = http.get("/api/v2/ledger").json()
        assert ledger["ready"] == 1 and ledger["pending"] == 1
        assert ledger["oldest_ready_at"] is not None and ledger["oldest_ready_age_seconds"] >= 0


# -- HTTP: Server-Sent Events ------------------------------------------------------------


def _read_events(response: httpx.Response) -> list[dict[str, Any]]:
    """Parse a text/event-stream body into [{id, event, data}] (comments skipped)."""
    assert response.status_code == 200, response.read()
    assert response.headers["content-type"].startswith("text/event-stream")
    events: list[dict[str, Any]] = []
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line == "":
            if "data" in fields:
                events.append(
                    {"id": fields.get("id"), "event": fields.get("event"), "data": json.loads(fields["data"])}
                )
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
    return events


def _submit(http: httpx.Client, count: int) -> list[str]:
    ids = []
    for _ in range(count):
        body = _body()
        assert http.post("/api/v2/operations", json=body).status_code == 202
        ids.append(body["operation_id"])
    return ids


def test_sse_history_then_resume_with_last_event_id_has_no_gap_or_duplicate(api: Api) -> None:
    with api.client(api.alice) as http:
        ids = _submit(http, 5)
        with http.stream("GET", "/api/v2/events", params={"max_seconds": 0}) as response:
            assert response.headers["cache-control"] == "no-cache"
            history = _read_events(response)
        assert [e["data"]["operation_id"] for e in history] == ids
        assert all(e["event"] == "operation_state" and e["data"]["to_state"] == "accepted" for e in history)
        assert all(e["data"]["from_state"] is None and e["data"]["sequence"] == 1 for e in history)
        seqs = [int(e["id"]) for e in history]
        assert seqs == sorted(set(seqs)) and [e["data"]["seq"] for e in history] == seqs

        # A client that lost its connection after the second event resumes from it.
        with http.stream(
            "GET", "/api/v2/events", params={"max_seconds": 0}, headers={"Last-Event-ID": str(seqs[1])}
        ) as response:
            rest = _read_events(response)
        assert rest == history[2:]
        # Last-Event-ID wins over ?after= (the URL keeps the first connection's position).
        with http.stream(
            "GET", "/api/v2/events", params={"max_seconds": 0, "after": 0}, headers={"Last-Event-ID": str(seqs[3])}
        ) as response:
            assert _read_events(response) == history[4:]
        with http.stream("GET", "/api/v2/events", params={"max_seconds": 0, "after": seqs[-1]}) as response:
            assert _read_events(response) == []

        # One operation's stream: ids are its event sequence (the reference protocol's).
        with http.stream("GET", f"/api/v2/operations/{ids[2]}/events", params={"max_seconds": 0}) as response:
            one = _read_events(response)
        assert [e["data"] for e in one] == [history[2]["data"]] and one[0]["id"] == "1"
        with http.stream(
            "GET", f"/api/v2/operations/{ids[2]}/events", params={"max_seconds": 0}, headers={"Last-Event-ID": "1"}
        ) as response:
            assert _read_events(response) == []

        _problem(http.get("/api/v2/events", headers={"Last-Event-ID": "abc"}), 422, "PR422")
        for seconds in ("1000000", "-1", "nan", "inf"):
            _problem(http.get("/api/v2/events", params={"max_seconds": seconds}), 422, "PR422")
        _problem(http.get("/api/v2/events", params={"after": -1}), 422, "PR422")
        _problem(http.get(f"/api/v2/operations/{uuid.uuid4()}/events", params={"max_seconds": 0}), 404, "PR404")
    with api.client(None) as anonymous:
        _problem(anonymous.get("/api/v2/events", params={"max_seconds": 0}), 401, "unauthorized")


def test_sse_delivers_live_events_after_history_then_ends(api: Api) -> None:
    with api.client(api.alice) as http:
        before = _submit(http, 2)
        later: list[str] = []

        def submit_later() -> None:
            time.sleep(0.8)
            with api.client(api.alice) as other:
                later.extend(_submit(other, 3))

        writer = threading.Thread(target=submit_later)
        started = time.monotonic()
        writer.start()
        with http.stream("GET", "/api/v2/events", params={"max_seconds": 3}) as response:
            first = _read_events(response)
        writer.join(10)
        assert 2.5 <= time.monotonic() - started < 15
        assert [e["data"]["operation_id"] for e in first] == before + later

        # A reconnect after everything gets nothing twice; after the first live event, exactly the rest.
        seqs = [int(e["id"]) for e in first]
        with http.stream(
            "GET", "/api/v2/events", params={"max_seconds": 0}, headers={"Last-Event-ID": str(seqs[2])}
        ) as response:
            assert _read_events(response) == first[3:]
