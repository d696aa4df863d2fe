"""Issue 32, item 9 and its completion: a broken schema is a generic 500, an unavailable database a generic 503
(/ready and the event stream too), a limit a generic 422, each with a correlation id, never
PostgreSQL's words."""

from __future__ import annotations

import json
import logging
import uuid

import httpx
import psycopg
import pytest

from prme_pg import AsyncMemoryClient, MemoryClient
from prme_pg.http import ops

from .live_server import serve


def test_a_missing_function_is_a_generic_500_with_an_incident_id(db_dsn: str) -> None:
    with MemoryClient(db_dsn) as memory:
        token = memory.create_api_token("alice")
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("ALTER FUNCTION prme.get_node RENAME TO get_node_gone")
    with serve(db_dsn) as base, httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as http:
        answer = http.get(f"/v1/nodes/{uuid.uuid4()}")
    assert answer.status_code == 500, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body = answer.json()
    assert "prme." not in body["detail"] and "42883" not in body["detail"] and "get_node" not in body["detail"]
    assert answer.headers["x-incident-id"] in body["detail"]


# -- issue 32, item 9 completed: /ready, the event stream and limit errors say no database text either ------

SECRET = 'connection to server at "10.1.2.3", port 5432 failed: FATAL: password authentication failed for user "prme_x"'


def _leaks(text: str) -> bool:
    return "10.1.2.3" in text or "prme_x" in text or "password" in text


def test_ready_says_unavailable_with_an_incident_id_not_the_database_text(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def fails(_: object) -> None:
        raise psycopg.OperationalError(SECRET)

    monkeypatch.setattr(ops, "_capabilities", fails)
    with caplog.at_level(logging.WARNING), serve(db_dsn) as base:
        answer = httpx.get(f"{base}/ready")
    assert answer.status_code == 503, answer.text
    detail = answer.json()["detail"]
    assert not _leaks(detail) and "unavailable" in detail, detail
    incident = answer.headers["x-incident-id"]
    assert incident in detail and any(
        incident in r.getMessage() and "10.1.2.3" in r.getMessage() for r in caplog.records
    )


def test_the_event_stream_says_unavailable_with_an_incident_id_not_the_database_text(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with MemoryClient(db_dsn) as memory:
        token = memory.create_api_token("alice")

    async def fails(*_: object, **__: object) -> None:
        raise psycopg.OperationalError(SECRET)

    monkeypatch.setattr(AsyncMemoryClient, "operation_events", fails)
    with caplog.at_level(logging.WARNING), serve(db_dsn) as base:
        answer = httpx.get(f"{base}/api/v2/events", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    error = json.loads(next(line for line in answer.text.splitlines() if line.startswith("data:"))[5:])
    assert error["status"] == 503 and not _leaks(error["detail"]), error
    incident = error["detail"].rsplit("incident ", 1)[1].rstrip(")")
    assert any(incident in r.getMessage() and "10.1.2.3" in r.getMessage() for r in caplog.records)


def test_a_database_limit_is_422_without_the_databases_words(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A limit error's message can name internals (an index here), so it is logged, not sent."""
    with MemoryClient(db_dsn) as memory:
        token = memory.create_api_token("alice")
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE t (x text); CREATE INDEX internal_name_idx ON t (x)")
        with pytest.raises(psycopg.Error) as raised:
            conn.execute("INSERT INTO t SELECT string_agg(md5(i::text), '') FROM generate_series(1, 200) AS i")
    limit = raised.value
    assert limit.sqlstate is not None and limit.sqlstate.startswith("54") and "internal_name_idx" in str(limit)

    async def fails(*_: object, **__: object) -> None:
        raise limit

    monkeypatch.setattr(AsyncMemoryClient, "get_node", fails)
    with caplog.at_level(logging.WARNING), serve(db_dsn) as base:
        answer = httpx.get(f"{base}/v1/nodes/{uuid.uuid4()}", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 422 and answer.json()["type"].endswith(limit.sqlstate), answer.text
    detail = answer.json()["detail"]
    assert "internal_name_idx" not in detail and "database limit" in detail, detail
    incident = answer.headers["x-incident-id"]
    assert incident in detail and any(incident in r.getMessage() for r in caplog.records)
