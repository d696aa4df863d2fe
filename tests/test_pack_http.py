"""`prme-pg serve --pack`: the HTTP API over a memory pack, exercised over a real socket.

Tokens live in the pack (sha256 only, one owner each), minted by `prme-pg token create
--pack`; the routes answer as they do over PostgreSQL; what a pack does not have (the
operations ledger) is 501 problem+json, never a 500.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from prme_pg import IdempotencyConflict, InvalidInput, MemoryClient, cli, testing
from prme_pg.tokens import parse_token, token_sha256

from .live_server import serve

PROBLEM_JSON = "application/problem+json"


@dataclass
class PackApi:
    base: str
    pack: Path
    alice: str
    bob: str

    def client(self, token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=30)


@pytest.fixture
def pack_api(tmp_path: Path) -> Iterator[PackApi]:
    pack = tmp_path / "memories"
    with MemoryClient(pack) as memory:
        alice = memory.create_api_token("alice", label="laptop")
        bob = memory.create_api_token("bob")
    with serve(pack) as base:
        yield PackApi(base, pack, alice, bob)


def _problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    body: dict[str, Any] = response.json()
    assert body["type"] == f"urn:prme-pg:error:{code}"
    assert body["detail"]
    return body


def test_tokens_in_a_pack_store_only_their_sha256(tmp_path: Path) -> None:
    pack = tmp_path / "memories"
    with MemoryClient(pack) as memory:
        token = memory.create_api_token("alice", label="laptop")
        parsed = parse_token(token)
        assert parsed is not None and parsed.user_id == "alice"
        assert memory.backend.execute(_authenticate("alice", token))
        assert not memory.backend.execute(_authenticate("bob", token)), "a token acts for its one owner"
        with pytest.raises(InvalidInput, match="label"):
            memory.create_api_token("alice", label="x" * 201)
        with pytest.raises(InvalidInput, match="label"):
            memory.create_api_token("alice", label="tab\there")
        assert memory.revoke_api_token(token)
        assert not memory.revoke_api_token(token), "already revoked"
        assert not memory.backend.execute(_authenticate("alice", token))
    import duckdb

    with duckdb.connect(str(pack / "pack.duckdb")) as con:
        rows = con.execute("SELECT user_id, token_sha256, label FROM prme.api_tokens").fetchall()
    assert rows == [("alice", token_sha256(token), "laptop")]
    assert token not in (pack / "pack.duckdb").read_bytes().decode("latin-1"), "the token itself is never stored"


def test_registering_a_hash_twice_is_a_conflict(tmp_path: Path) -> None:
    from prme_pg.backends import CreateApiToken

    with MemoryClient(tmp_path / "memories") as memory:
        request = CreateApiToken(user_id="alice", token_sha256="a" * 64, label="")
        memory.backend.execute(request)
        with pytest.raises(IdempotencyConflict, match="already registered"):
            memory.backend.execute(request)
        with pytest.raises(InvalidInput, match="token_sha256"):
            memory.backend.execute(CreateApiToken(user_id="alice", token_sha256="A" * 64, label=""))


def _authenticate(user_id: str, token: str) -> Any:
    from prme_pg.backends import AuthenticateApiToken

    return AuthenticateApiToken(user_id=user_id, token_sha256=token_sha256(token))


def test_health_and_ready_over_a_pack(pack_api: PackApi) -> None:
    with pack_api.client(None) as anonymous:
        assert anonymous.get("/health").json()["status"] == "ok"
        ready = anonymous.get("/ready")
        assert ready.status_code == 200, ready.text
        assert ready.json()["status"] == "ready"
        assert ready.json()["capabilities"] == {
            "storage": True,
            "ledger": False,
            "executor": False,
            "model_executor": True,
            "search_index": True,
        }
        _problem(anonymous.get("/v1/nodes"), 401, "unauthorized")
    with pack_api.client("prme.YWxpY2U." + "x" * 43) as forged:
        _problem(forged.get("/v1/nodes"), 401, "unauthorized")


def test_confirmations_over_a_pack_count_once_per_key_and_owners_are_isolated(pack_api: PackApi) -> None:
    with pack_api.client(pack_api.alice) as alice, pack_api.client(pack_api.bob) as bob:
        created = alice.post("/v1/nodes", json={"content": "alice prefers tabs", "confidence_base": 0.6})
        assert created.status_code == 201, created.text
        assert created.headers["location"].endswith(created.json()["id"])
        node_id = created.json()["id"]
        key = str(uuid.uuid4())
        first = alice.put(f"/v1/nodes/{node_id}/reinforce", headers={"Idempotency-Key": key})
        assert first.status_code == 200, first.text
        assert first.json()["version"] == 2
        replay = alice.put(f"/v1/nodes/{node_id}/reinforce", headers={"Idempotency-Key": key})
        assert replay.headers["idempotent-replayed"] == "true"
        assert replay.json()["version"] == 2
        _problem(bob.get(f"/v1/nodes/{node_id}"), 404, "PR404")
        _problem(bob.put(f"/v1/nodes/{node_id}/reinforce"), 404, "PR404")
        _problem(alice.put("/v1/nodes/not-a-uuid/reinforce"), 422, "PR422")
        assert alice.get(f"/v1/nodes/{node_id}").json()["version"] == 2


def test_a_new_memory_over_http_is_scheduled_unless_null_is_sent(pack_api: PackApi) -> None:
    """next_review_at omitted: one review cadence of its stability ahead; null: no schedule;
    a time: that time."""
    with pack_api.client(pack_api.alice) as alice:
        scheduled = alice.post("/v1/nodes", json={"content": "x", "stability": "semi-stable"}).json()
        created = datetime.fromisoformat(scheduled["created_at"])
        assert datetime.fromisoformat(scheduled["next_review_at"]) - created == timedelta(days=30)
        assert alice.post("/v1/nodes", json={"content": "x", "next_review_at": None}).json()["next_review_at"] is None
        given = alice.post("/v1/nodes", json={"content": "x", "next_review_at": "2031-01-02T03:04:05Z"}).json()
        assert datetime.fromisoformat(given["next_review_at"]) == datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_outcomes_over_a_pack(pack_api: PackApi) -> None:
    """record_outcome (201, a replay 200), the summary, and owners isolated, as over PostgreSQL."""
    with pack_api.client(pack_api.alice) as alice, pack_api.client(pack_api.bob) as bob:
        node_id = alice.post("/v1/nodes", json={"content": "prefers tabs"}).json()["id"]
        key = {"Idempotency-Key": str(uuid.uuid4())}
        first = alice.post(f"/v1/nodes/{node_id}/outcomes", json={"outcome": "implicit_success"}, headers=key)
        assert first.status_code == 201, first.text
        again = alice.post(f"/v1/nodes/{node_id}/outcomes", json={"outcome": "implicit_success"}, headers=key)
        assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
        assert again.json()["id"] == first.json()["id"]
        _problem(alice.post(f"/v1/nodes/{node_id}/outcomes", json={"outcome": "liked"}), 422, "PR422")
        _problem(bob.post(f"/v1/nodes/{node_id}/outcomes", json={"outcome": "implicit_success"}), 404, "PR404")
        summary = alice.get(f"/v1/nodes/{node_id}/outcomes/summary")
        assert summary.status_code == 200, summary.text
        assert (summary.json()["implicit_successes"], summary.json()["outcomes"]) == (1, 1)


def test_corrections_and_maintenance_over_a_pack(pack_api: PackApi) -> None:
    """Correction detection and linking, the report, a patch applied, reviews and settings, as
    over PostgreSQL; owners isolated."""
    overdue = (datetime.now(UTC) - timedelta(days=10)).isoformat()
    with pack_api.client(pack_api.alice) as alice, pack_api.client(pack_api.bob) as bob:
        node = alice.post("/v1/nodes", json={"content": "alice indents code with tabs", "next_review_at": overdue})
        node_id = node.json()["id"]
        detect = alice.post("/v1/corrections/detect", json={"message": "No, spaces"})
        assert detect.status_code == 200 and detect.json() == {"is_correction": True}
        link = alice.post(
            "/v1/corrections", json={"message": "no, alice indents code with spaces", "candidate_node_ids": [node_id]}
        )
        assert link.status_code == 201, link.text
        assert (link.json()["status"], link.json()["node_id"]) == ("linked", node_id)
        report = alice.get("/v1/maintenance/report")
        assert report.status_code == 200, report.text
        [row] = report.json()["recommendations"]
        assert row["recommendations"] == ["decay_confidence", "review_due", "review_memory"]
        assert bob.get("/v1/maintenance/report").json()["recommendations"] == []
        patch = alice.post("/v1/maintenance/patches", json={})
        assert patch.status_code == 201, patch.text
        patch_id = patch.json()["patch_id"]
        _problem(bob.get(f"/v1/maintenance/patches/{patch_id}"), 404, "PR404")
        applied = alice.post(f"/v1/maintenance/patches/{patch_id}/apply", json={"mode": "auto"})
        assert applied.status_code == 200, applied.text
        assert [r["status"] for r in applied.json()["results"]] == ["applied"]
        reviewed = alice.post(f"/v1/nodes/{node_id}/review", json={})
        assert reviewed.status_code == 200, reviewed.text
        assert alice.get("/v1/maintenance/report").json()["recommendations"] == []
        settings = alice.get("/v1/maintenance/settings")
        assert settings.status_code == 200, settings.text


def test_recall_snapshots_and_prompts_over_a_pack(pack_api: PackApi) -> None:
    with pack_api.client(pack_api.alice) as alice:
        alice.post("/v1/nodes", json={"content": "prefers tabs", "scope": "personal", "salience_base": 0.9})
        published = alice.post("/v1/snapshots/personal", json={})
        assert published.status_code == 200, published.text
        assert published.json()["advanced"] is True
        current = alice.get("/v1/snapshots/personal")
        assert current.status_code == 200, current.text
        assert current.headers["etag"] == published.headers["etag"]
        prompt = alice.get("/v1/prompt", params={"scope": ["personal"], "budget_bytes": 100})
        assert prompt.json()["prompt"] == "[personal]\n- prefers tabs\n"
        _problem(alice.get("/v1/snapshots/work"), 404, "PR404")
        recalled = alice.get("/v1/recall", params={"q": "tabs"})
        assert recalled.status_code == 200, recalled.text
        assert [hit["content"] for hit in recalled.json()["hits"]] == ["prefers tabs"]


def test_what_a_pack_lacks_is_501_not_a_500(pack_api: PackApi) -> None:
    with pack_api.client(pack_api.alice) as alice:
        _problem(alice.get("/api/v2/ledger"), 501, "not-on-pack")


def test_revoked_token_is_refused_by_the_served_pack(tmp_path: Path) -> None:
    pack = tmp_path / "memories"
    with MemoryClient(pack) as memory:
        token = memory.create_api_token("alice")
    with serve(pack) as base, httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as alice:
        _problem(alice.get("/v1/snapshots/personal"), 404, "PR404")
        # The served process holds the pack: a client in the same process shares it.
        with MemoryClient(pack) as memory:
            assert memory.revoke_api_token(token)
        _problem(alice.get("/v1/snapshots/personal"), 401, "unauthorized")


def test_cli_token_create_then_serve_pack_over_a_real_socket(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pack = tmp_path / "memories"
    assert cli.main(["token", "create", "--pack", str(pack), "--user", "alice", "--json"]) == 0
    token = json.loads(capsys.readouterr().out)["token"]
    port = testing.free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PRME_DSN", "DATABASE_URL")}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "prme_pg.cli",
            "serve",
            "--pack",
            str(pack),
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, server.communicate()
            try:
                if httpx.get(base + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "prme-pg serve --pack did not start"
            time.sleep(0.1)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as alice:
            created = alice.post("/v1/nodes", json={"content": "served from a pack"})
            assert created.status_code == 201, created.text
            assert alice.get(f"/v1/nodes/{created.json()['id']}").json()["content"] == "served from a pack"
        # The serving process holds the pack: another process is refused in one line.
        assert cli.main(["token", "create", "--pack", str(pack), "--user", "bob"]) == 1
        assert "in use by process" in capsys.readouterr().err
    finally:
        server.terminate()
        server.wait(30)


def test_serve_refuses_pack_and_dsn_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", "--pack", str(tmp_path), "--dsn", "postgresql://x/y"]) == 2
    assert "not both" in capsys.readouterr().err
