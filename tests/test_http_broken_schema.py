"""Issue 32, item 9: a broken schema is a generic 500 with a correlation id, never PostgreSQL's words."""

from __future__ import annotations

import uuid

import httpx
import psycopg

from prme_pg import MemoryClient

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
