"""Issue 17, items 3, 4, 5 (the HTTP half), 8, 10 and 11: the HTTP server under hostile requests.

Everything runs against a real server over loopback: ``prme-pg serve`` in its own process
where the server's memory or its protocol options matter (the 200 MB body, the 100 MB
header), the test suite's in-process uvicorn (tests/live_server.py, started with the
same options) elsewhere; a real PostgreSQL clone behind both. Each test names what
happened before the fix.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from http_support import ServeProcess, chunks, raw_request, status_of

from prme_pg import MemoryClient, testing
from prme_pg.http import Limits
from prme_pg.validation import MAX_JSON_DEPTH
from tests.hostile_files import install_trigger
from tests.live_server import serve

ROOT = Path(__file__).resolve().parents[2]
PROBLEM_JSON = "application/problem+json"


def _problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON), response.headers
    body: dict[str, Any] = response.json()
    assert body["type"] == f"urn:prme-pg:error:{code}" and body["status"] == status, body
    return body


@pytest.fixture
def tokens(db_dsn: str) -> dict[str, str]:
    with MemoryClient(db_dsn, max_size=1) as memory:
        return {owner: memory.create_api_token(owner) for owner in ("alice", "bob")}


@pytest.fixture
def base(db_dsn: str) -> Iterator[str]:
    with serve(db_dsn, max_size=6) as url:
        yield url


def _http(base: str, token: str | None) -> httpx.Client:
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=30)


def _count(dsn: str, table: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(f"SELECT count(*) FROM prme.{table}").fetchone()
    assert row is not None
    return int(row[0])


# -- item 3: sizes, and authentication before the body ----------------------------------------------


@pytest.fixture
def served(db_dsn: str) -> Iterator[ServeProcess]:
    server = ServeProcess(db_dsn)
    yield server
    server.close()


def test_a_200_mb_body_without_a_token_is_refused_before_it_is_read(served: ServeProcess) -> None:
    """Before: the server grew from 99 MB to 651 MB reading it, then answered 401. Now a body that
    says it is too large is 413 at once (that costs nothing, not even the token lookup), and one
    that does not say (chunked) is 401 from the headers alone; neither is read."""
    before = served.peak_rss_kib()
    started = time.monotonic()
    json_type = b"Content-Type: application/json\r\n"
    declared = b"POST /v1/nodes HTTP/1.1\r\nHost: x\r\n" + json_type + b"Content-Length: 209715200\r\n\r\n"
    answer = raw_request(served.port, declared, chunks(200 << 20))
    assert status_of(answer) == 413, answer[:300]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["type"] == "urn:prme-pg:error:http-413"
    chunked = b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + json_type + b"Transfer-Encoding: chunked\r\n\r\n"
    answer = raw_request(served.port, chunked, (b"100000\r\n" + b"x" * 0x100000 + b"\r\n" for _ in range(200)))
    assert status_of(answer) == 401, answer[:300]
    assert time.monotonic() - started < 10
    assert served.peak_rss_kib() - before < 20 * 1024, "the server read the body"


def test_bodies_over_the_limit_are_413_with_a_token_too(served: ServeProcess, tokens: dict[str, str]) -> None:
    auth = f"Authorization: Bearer {tokens['alice']}\r\n".encode()
    before = served.peak_rss_kib()
    declared = b"POST /v1/nodes HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 209715200\r\n"
    answer = raw_request(served.port, declared + b"Content-Type: application/json\r\n\r\n", chunks(200 << 20))
    assert status_of(answer) == 413, answer[:300]  # from Content-Length, before the body
    chunked = b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + auth + b"Transfer-Encoding: chunked\r\n"
    pieces = (b"100000\r\n" + b"x" * 0x100000 + b"\r\n" for _ in range(200))
    answer = raw_request(served.port, chunked + b"Content-Type: application/json\r\n\r\n", pieces)
    assert status_of(answer) == 413, answer[:300]  # as soon as it passed 2 MiB
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["type"] == "urn:prme-pg:error:http-413"
    assert served.peak_rss_kib() - before < 30 * 1024
    # A body within the limit still works.
    with _http(f"http://127.0.0.1:{served.port}", tokens["alice"]) as http:
        assert http.post("/v1/events", json={"content": "x" * 60000}).status_code == 201


def test_a_100_mb_header_is_431_as_soon_as_it_passes_the_limit(served: ServeProcess) -> None:
    """Before: the server read a 100 MB header for 22 s."""
    started = time.monotonic()
    head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Padding: "
    sent = 0

    def padding() -> Iterator[bytes]:
        nonlocal sent
        for chunk in chunks(100 << 20, 64 << 10):
            sent += len(chunk)
            yield chunk

    answer = raw_request(served.port, head, padding())
    assert status_of(answer) == 431, answer[:300]
    assert b"application/problem+json" in answer and b"at most 16384 bytes" in answer
    assert time.monotonic() - started < 5
    assert sent < 8 << 20, f"the server kept reading: {sent} bytes sent"
    ok = httpx.get(f"http://127.0.0.1:{served.port}/health", headers={"X-Padding": "p" * 8000}, timeout=10)
    assert ok.status_code == 200  # a head within the limit


def test_serve_takes_its_limits_from_flags(db_dsn: str, tokens: dict[str, str]) -> None:
    server = ServeProcess(db_dsn, "--max-body-bytes", "1000", "--max-header-bytes", "4096")
    try:
        with _http(f"http://127.0.0.1:{server.port}", tokens["alice"]) as http:
            _problem(http.post("/v1/events", json={"content": "x" * 2000}), 413, "http-413")
            assert http.post("/v1/events", json={"content": "x" * 500}).status_code == 201
            assert http.get("/health", headers={"X-Padding": "p" * 5000}).status_code == 431
    finally:
        server.close()
    bad = subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", "serve", "--dsn", db_dsn, "--max-requests-per-owner", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert bad.returncode == 2 and "--max-requests-per-owner must be at least 1" in bad.stderr


# -- items 4 and 8: the body's JSON ------------------------------------------------------------------


def _nested(levels: int) -> str:
    return '{"v": ' * levels + "1" + "}" * levels


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH + 1, 300, 990, 100_000])
def test_a_payload_nested_past_the_limit_is_422_before_anything_is_written(
    base: str, db_dsn: str, tokens: dict[str, str], levels: int
) -> None:
    """Before: 300-990 levels were stored, then the response failed to serialise (500), and a
    retry stored the event again."""
    body = '{"content": "deep", "payload": ' + _nested(levels) + "}"
    with _http(base, tokens["alice"]) as http:
        for _ in range(2):  # a retry changes nothing either
            response = http.post("/v1/events", content=body, headers={"Content-Type": "application/json"})
            assert f"at most {MAX_JSON_DEPTH} levels deep" in _problem(response, 422, "PR422")["detail"]
    assert _count(db_dsn, "events") == 0


def test_a_payload_exactly_at_the_limit_is_stored_and_answered(base: str, tokens: dict[str, str]) -> None:
    body = '{"content": "deep", "payload": ' + _nested(MAX_JSON_DEPTH) + "}"  # the payload is level 1
    with _http(base, tokens["alice"]) as http:
        response = http.post("/v1/events", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 201, response.text
    assert json.dumps(response.json()["payload"], separators=(",", ":")) == _nested(MAX_JSON_DEPTH).replace(" ", "")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"content": "x", "payload": {"v": NaN}}', "NaN is not a JSON number"),
        ('{"content": "x", "payload": {"v": Infinity}}', "Infinity is not a JSON number"),
        ('{"content": "x", "payload": {"v": -Infinity}}', "-Infinity is not a JSON number"),
        ('{"content": "x", "payload": {"v": 1e400}}', "number 1e400 is out of range"),
        ('{"content": "x", "payload": {"v": 0.10000000000000000001}}', "has no exact double form"),
        ('{"content": "x", "content": "y"}', "duplicate key 'content'"),
        ('{"content": "x", "payload": {"a": 1, "a": 2}}', "duplicate key 'a'"),
        ('{"content": "x", "payload": {"v": 1' + "0" * 5000 + "}}", "is too long"),
    ],
)
def test_json_a_server_cannot_keep_exactly_is_422(
    base: str, db_dsn: str, tokens: dict[str, str], text: str, reason: str
) -> None:
    """Before: NaN, Infinity and 1e400 were 500s; a duplicate key kept its last value; a number
    with more digits than a double holds was stored rounded."""
    with _http(base, tokens["alice"]) as http:
        response = http.post("/v1/events", content=text, headers={"Content-Type": "application/json"})
        assert reason in _problem(response, 422, "PR422")["detail"]
        node = http.post(
            "/v1/nodes", content=text.replace('"payload"', '"kind_x"'), headers={"Content-Type": "application/json"}
        )
        assert node.status_code == 422
    assert _count(db_dsn, "events") == 0


def test_numbers_are_stored_exactly(base: str, db_dsn: str, tokens: dict[str, str]) -> None:
    big = "123456789012345678901234567890"
    text = '{"content": "x", "payload": {"big": ' + big + ', "tenth": 0.1, "tiny": 5e-324, "exp": 1E5, "neg": -0.0}}'
    with _http(base, tokens["alice"]) as http:
        response = http.post("/v1/events", content=text, headers={"Content-Type": "application/json"})
    assert response.status_code == 201, response.text
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT payload->>'big', payload->>'tenth', (payload->>'tiny')::float8, (payload->>'exp')::numeric "
            "FROM prme.events"
        ).fetchone()
    assert row is not None and row[0] == big and row[1] == "0.1" and row[2] == 5e-324 and row[3] == 100000


def test_a_database_error_is_answered_by_its_sqlstate_class(base: str, db_dsn: str, tokens: dict[str, str]) -> None:
    """Before: every OperationalError was 503 (a payload's stack overflow, 54001, included) and
    any other psycopg error a 500 text/plain."""
    install_trigger(
        db_dsn,
        "prme.events",
        "IF NEW.content LIKE 'raise %' THEN RAISE EXCEPTION USING ERRCODE = split_part(NEW.content, ' ', 2); END IF;",
    )
    with _http(base, tokens["alice"]) as http:
        detail = _problem(http.post("/v1/events", json={"content": "raise 54001"}), 422, "54001")["detail"]
        assert "exceeds a database limit" in detail
        for sqlstate in ("53200", "57014", "40001"):
            unavailable = http.post("/v1/events", json={"content": f"raise {sqlstate}"})
            assert _problem(unavailable, 503, "unavailable") and unavailable.headers["retry-after"] == "1"
        _problem(http.post("/v1/events", json={"content": "raise P0001"}), 500, "internal")
        assert http.post("/v1/events", json={"content": "fine"}).status_code == 201


def test_a_client_chosen_id_makes_a_retry_after_a_lost_response_harmless(
    base: str, db_dsn: str, tokens: dict[str, str]
) -> None:
    event_id, node_id = str(uuid.uuid4()), str(uuid.uuid4())
    with _http(base, tokens["alice"]) as http:
        first = http.post("/v1/events", json={"content": "said once", "event_id": event_id})
        assert first.status_code == 201 and first.json()["id"] == event_id
        _problem(http.post("/v1/events", json={"content": "said once", "event_id": event_id}), 409, "PR409")
        created = http.post("/v1/nodes", json={"content": "remembered once", "node_id": node_id})
        assert created.status_code == 201 and created.json()["id"] == node_id
        _problem(http.post("/v1/nodes", json={"content": "remembered once", "node_id": node_id}), 409, "PR409")
        assert http.get(f"/v1/nodes/{node_id}").json()["content"] == "remembered once"
    with _http(base, tokens["bob"]) as http:  # another owner's id is just another id
        assert http.post("/v1/events", json={"content": "bob's", "event_id": event_id}).status_code == 201
    assert (_count(db_dsn, "events"), _count(db_dsn, "nodes")) == (2, 1)


# -- item 5: one owner cannot starve another ---------------------------------------------------------


def test_one_owner_past_its_concurrency_limit_gets_429_and_another_owner_is_served(
    db_dsn: str, tokens: dict[str, str]
) -> None:
    """Before: no per-owner limit; one owner's slow calls took every pooled connection and another
    owner's GET failed with 503 after 30 s."""
    install_trigger(db_dsn, "prme.nodes", "IF NEW.content = 'slow' THEN PERFORM pg_sleep(3); END IF;")
    with serve(db_dsn, max_size=4, limits=Limits(max_requests_per_owner=2)) as url:
        results: list[httpx.Response] = []

        def slow() -> None:
            with _http(url, tokens["alice"]) as http:
                results.append(http.post("/v1/nodes", json={"content": "slow"}))

        threads = [threading.Thread(target=slow) for _ in range(5)]
        for thread in threads:
            thread.start()
        time.sleep(1.0)  # alice's two slots are busy sleeping
        with _http(url, tokens["bob"]) as http:
            started = time.monotonic()
            assert http.post("/v1/nodes", json={"content": "bob's"}).status_code == 201
            assert time.monotonic() - started < 2
        for thread in threads:
            thread.join(60)
    statuses = sorted(r.status_code for r in results)
    assert statuses == [201, 201, 429, 429, 429]
    refused = next(r for r in results if r.status_code == 429)
    assert refused.headers["retry-after"] == "1" and refused.headers["content-type"].startswith(PROBLEM_JSON)


def test_the_per_owner_limit_defaults_to_half_the_pool() -> None:
    assert Limits().requests_per_owner(10) == 5
    assert Limits().requests_per_owner(1) == 1
    assert Limits(max_requests_per_owner=7).requests_per_owner(10) == 7
    with pytest.raises(ValueError, match="max_body_bytes"):
        Limits(max_body_bytes=0)


# -- item 10: a stream ends soon after its token is revoked ------------------------------------------


def test_an_event_stream_ends_within_five_seconds_of_its_token_being_revoked(base: str, db_dsn: str) -> None:
    """Before: a stream opened before the revoke went on for up to 300 s."""
    with MemoryClient(db_dsn, max_size=1) as memory:
        token = memory.create_api_token("carol")
        with _http(base, token) as http, http.stream("GET", "/api/v2/events", params={"max_seconds": 60}) as stream:
            assert stream.status_code == 200
            lines = stream.iter_lines()
            assert next(lines).startswith(":")
            assert memory.revoke_api_token(token)
            revoked_at = time.monotonic()
            received = list(lines)
            ended_after = time.monotonic() - revoked_at
    assert ended_after < 5 + 1.5, f"the stream went on for {ended_after:.1f} s"
    assert "event: error" in received
    data = json.loads(next(line for line in received if line.startswith("data: "))[6:])
    assert data == {"status": 401, "detail": "the bearer token was revoked"}


# -- item 11: /ready ------------------------------------------------------------------------------


def test_ready_needs_no_token_and_shows_no_owner(base: str, tokens: dict[str, str]) -> None:
    """Before: 401 without a token, and with any token every owner's ledger backlog."""
    with _http(base, None) as http:
        response = http.get("/ready")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ready",
        "capabilities": {
            "storage": True,
            "ledger": True,
            "executor": True,
            "model_executor": True,
            "search_index": True,
        },
        "ingestion_ready": True,
        "search_ready": True,
        "detail": "ready",
    }


def test_ready_is_503_with_the_reason_on_a_database_without_the_schema(pg_server: testing.Server) -> None:
    """Before: 500 text/plain (the missing function was not an OperationalError)."""
    name = testing.create_database(pg_server)  # no template: no prme schema
    try:
        with serve(pg_server.dsn_for(name)) as url, _http(url, None) as http:
            response = http.get("/ready")
    finally:
        testing.drop_database(pg_server, name)
    assert response.status_code == 503
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {
        "status": "not_ready",
        "capabilities": {"storage": False, "ledger": False, "executor": False},
        "ingestion_ready": False,
        "search_ready": False,
        "detail": "the database has no prme schema (run prme-pg migrate)",
    }


def test_executor_is_false_while_accepted_work_waits_for_it(base: str, db_dsn: str, tokens: dict[str, str]) -> None:
    with MemoryClient(db_dsn, max_size=1) as memory:
        memory.submit_operation(uuid.uuid4(), "add_node", {"content": "waits"}, user_id="alice")
    with psycopg.connect(db_dsn, autocommit=True) as conn:  # as if it had been accepted two minutes ago
        conn.execute("UPDATE prme.operations SET created_at = now() - interval '2 minutes'")
    with _http(base, None) as http:
        response = http.get("/ready")
    assert response.status_code == 200  # informative: submits are still taken
    assert response.json()["capabilities"] == {
        "storage": True,
        "ledger": True,
        "executor": False,
        "model_executor": True,
        "search_index": True,
    }
