"""Recall and snapshots through every surface: both clients, the CLI and the HTTP API
(real PostgreSQL; HTTP over a real socket). The SQL itself is tested in
tests/pgtap/test_snapshots.sql, tests/test_snapshots.py and the recall tests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import psycopg
import pytest

from prme_pg import (
    AssembledPrompt,
    AsyncMemoryClient,
    IdempotencyConflict,
    IntegrityError,
    InvalidInput,
    MemoryClient,
    NotFoundError,
    PublishResult,
    RecallHit,
    Snapshot,
    cli,
)
from tests.test_http import Api, _problem

from .live_server import serve


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _seed(dsn: str) -> None:
    with MemoryClient(dsn) as memory:
        memory.add_node("Prefers tabs over spaces", user_id="alice", salience_base="0.9", confidence_base="0.9")
        memory.add_node("Lives in Berlin", user_id="alice")
        memory.add_node("Deploys are frozen on Fridays", user_id="alice", scope="work")
        memory.add_node("Bob prefers spaces", user_id="bob")


@pytest.fixture
def api(db_dsn: str) -> Iterator[Api]:
    _seed(db_dsn)
    with MemoryClient(db_dsn) as memory:
        alice = memory.create_api_token("alice")
        bob = memory.create_api_token("bob")
    with serve(db_dsn, max_size=4) as base:
        yield Api(base, db_dsn, alice, bob)


def _tamper(dsn: str, user_id: str, scope: str) -> None:
    """What only a superuser past the triggers and the CHECK could do (as in test_snapshots.sql)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE prme.snapshot_generations DISABLE TRIGGER snapshot_generations_append_only")
        conn.execute("ALTER TABLE prme.snapshot_generations DROP CONSTRAINT snapshot_generations_content_addressed")
        conn.execute(
            "UPDATE prme.snapshot_generations SET document = replace(document, 'Berlin', 'Paris') "
            "WHERE user_id = %s AND scope = %s",
            (user_id, scope),
        )


# -- the sync client --------------------------------------------------------------


def test_sync_client_recall_publish_read_and_assemble(db_dsn: str) -> None:
    _seed(db_dsn)
    with MemoryClient(db_dsn) as memory:
        hits = memory.recall("tabs", user_id="alice")
        assert hits and isinstance(hits[0], RecallHit)
        assert hits[0].rank == 1
        assert hits[0].content == "Prefers tabs over spaces"
        assert hits[0].relevance >= 0.6  # every word of the query (0.6), and meaning (up to 0.4 more)
        assert memory.with_embedder(False).recall("tabs", user_id="alice")[0].relevance == 1.0  # words only
        assert hits[0].created_at.utcoffset() is not None
        everything = memory.recall(user_id="alice", max_count=10)
        assert len(everything) == 3
        assert [h.rank for h in everything] == [1, 2, 3]
        assert [h.score for h in everything] == sorted((h.score for h in everything), reverse=True)
        assert {h.scope for h in memory.recall(None, user_id="alice", scopes=["work"])} == {"work"}
        assert {h.scope for h in memory.recall(None, user_id="alice", scopes="work")} == {"work"}
        assert len(memory.recall("", user_id="alice", max_count=1)) == 1
        assert all(h.content != "Bob prefers spaces" for h in memory.recall("spaces", user_id="alice"))
        with pytest.raises(InvalidInput):
            memory.recall("x", user_id="alice", max_count=0)
        with pytest.raises(InvalidInput):
            memory.recall("x", user_id="alice", as_of=datetime(2026, 1, 1))  # naive

        with pytest.raises(NotFoundError):
            memory.current_snapshot("personal", user_id="alice")
        first = memory.publish_snapshot("personal", user_id="alice", expected_generation_id="none")
        assert isinstance(first, PublishResult)
        assert first.advanced and first.seq == 1 and first.item_count == 2
        assert first.previous_generation_id is None
        again = memory.publish_snapshot("personal", user_id="alice", expected_generation_id=first.generation_id)
        assert not again.advanced and again.generation_id == first.generation_id and again.seq == 1
        with pytest.raises(IdempotencyConflict):
            memory.publish_snapshot("personal", user_id="alice", expected_generation_id="none")
        with pytest.raises(IdempotencyConflict):
            memory.publish_snapshot("personal", user_id="alice", expected_generation_id="a" * 64)
        with pytest.raises(InvalidInput):
            memory.publish_snapshot("personal", user_id="alice", max_items=0)

        current = memory.current_snapshot("personal", user_id="alice")
        assert isinstance(current, Snapshot)
        assert current.generation_id == first.generation_id == _sha256(current.document)
        assert current.byte_size == len(current.document.encode())
        assert [item["content"] for item in json.loads(current.document)["items"]] == [
            "Prefers tabs over spaces",
            "Lives in Berlin",
        ]
        assert memory.get_snapshot("personal", first.generation_id, user_id="alice") == current
        with pytest.raises(InvalidInput):
            memory.get_snapshot("personal", "not-hex", user_id="alice")

        memory.publish_snapshot("work", user_id="alice")
        prompt = memory.assemble_prompt(["personal", "work", "never"], user_id="alice", budget_bytes=4096)
        assert isinstance(prompt, AssembledPrompt)
        assert prompt.prompt == (
            "[personal]\n- Prefers tabs over spaces\n- Lives in Berlin\n\n[work]\n- Deploys are frozen on Fridays\n"
        )
        assert prompt.byte_size == len(prompt.prompt.encode()) and prompt.item_count == 3 and not prompt.truncated
        assert prompt.generation_scopes == ("personal", "work", "never")
        assert prompt.generation_ids[0] == first.generation_id and prompt.generation_ids[2] is None
        small = memory.assemble_prompt("personal", user_id="alice", budget_bytes=40)
        assert small.truncated and small.byte_size <= 40
        with pytest.raises(InvalidInput):
            memory.assemble_prompt([], user_id="alice", budget_bytes=100)

        # Another owner sees none of it, even by id.
        with pytest.raises(NotFoundError):
            memory.current_snapshot("personal", user_id="bob")
        with pytest.raises(NotFoundError):
            memory.get_snapshot("personal", first.generation_id, user_id="bob")
        assert memory.assemble_prompt(["personal"], user_id="bob", budget_bytes=4096).prompt == ""


def test_a_tampered_generation_raises_integrity_error(db_dsn: str) -> None:
    _seed(db_dsn)
    with MemoryClient(db_dsn) as memory:
        memory.publish_snapshot("personal", user_id="alice")
        _tamper(db_dsn, "alice", "personal")
        with pytest.raises(IntegrityError) as raised:
            memory.current_snapshot("personal", user_id="alice")
        assert raised.value.sqlstate == "XX001" and raised.value.http_status == 500
        with pytest.raises(IntegrityError):
            memory.assemble_prompt(["personal"], user_id="alice", budget_bytes=4096)


# -- the async client --------------------------------------------------------------


def test_async_client_matches_the_sync_client(db_dsn: str) -> None:
    _seed(db_dsn)

    async def run() -> None:
        async with AsyncMemoryClient(db_dsn) as memory:
            hits = await memory.recall("berlin", user_id="alice", scopes=["personal"], max_count=5)
            assert hits[0].content == "Lives in Berlin"
            published = await memory.publish_snapshot("personal", user_id="alice", max_items=1, max_bytes=4096)
            assert published.advanced and published.item_count == 1
            current = await memory.current_snapshot("personal", user_id="alice")
            assert current.generation_id == published.generation_id
            assert await memory.get_snapshot("personal", published.generation_id, user_id="alice") == current
            prompt = await memory.assemble_prompt(["personal"], user_id="alice", budget_bytes=4096)
            assert prompt.prompt == "[personal]\n- Prefers tabs over spaces\n"
            with pytest.raises(IdempotencyConflict):
                await memory.publish_snapshot("personal", user_id="alice", expected_generation_id="none")
            with pytest.raises(NotFoundError):
                await memory.current_snapshot("personal", user_id="bob")

    asyncio.run(run())


# -- memory packs refuse clearly ------------------------------------------------------


def test_memory_packs_recall_publish_and_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with MemoryClient(tmp_path / "pack") as memory:
        memory.add_node("prefers tabs", user_id="alice")
        assert [h.content for h in memory.recall("tabs", user_id="alice")] == ["prefers tabs"]
        # The review search too (tests/test_conformance_recall.py runs it on both engines).
        assert [n.content for n in memory.find_nodes("tabs", user_id="alice")] == ["prefers tabs"]

    async def run() -> None:
        async with AsyncMemoryClient(tmp_path / "pack") as memory:
            assert [h.rank for h in await memory.recall("tab", user_id="alice")] == [1]
            published = await memory.publish_snapshot("personal", user_id="alice")
            assert published.item_count == 1
            prompt = await memory.assemble_prompt(["personal"], user_id="alice", budget_bytes=100)
            assert prompt.prompt == "[personal]\n- prefers tabs\n"

    asyncio.run(run())
    # The CLI's recall and snapshot commands take --pack too.
    pack = str(tmp_path / "pack")
    assert cli.main(["recall", "tabs", "--pack", pack, "--user", "alice", "--json"]) == 0
    assert [h["content"] for h in json.loads(capsys.readouterr().out)["hits"]] == ["prefers tabs"]
    assert cli.main(["snapshot", "publish", "--pack", pack, "--user", "alice", "--scope", "personal", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["advanced"] is False, "already current"
    assert cli.main(["snapshot", "show", "--pack", pack, "--user", "alice", "--scope", "personal", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["document"]["items"][0]["content"] == "prefers tabs"


# -- the CLI ------------------------------------------------------------------------


def test_cli_recall_and_snapshot(db_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    _seed(db_dsn)
    assert cli.main(["recall", "tabs", "--user", "alice", "--dsn", db_dsn, "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert hits[0]["content"] == "Prefers tabs over spaces" and hits[0]["rank"] == 1
    assert cli.main(["recall", "", "--user", "alice", "--scope", "work", "--limit", "5", "--dsn", db_dsn]) == 0
    out = capsys.readouterr().out
    assert "Deploys are frozen on Fridays" in out and "Berlin" not in out

    assert cli.main(["snapshot", "show", "--user", "alice", "--scope", "personal", "--dsn", db_dsn]) == 1
    assert "no snapshot has been published" in capsys.readouterr().err
    publish = ["snapshot", "publish", "--user", "alice", "--scope", "personal", "--dsn", db_dsn]
    assert cli.main([*publish, "--expect", "none", "--json"]) == 0
    published = json.loads(capsys.readouterr().out)
    assert published["advanced"] is True and published["item_count"] == 2
    assert cli.main(publish) == 0
    assert "unchanged" in capsys.readouterr().out
    assert cli.main([*publish, "--expect", "none"]) == 1
    assert published["generation_id"] in capsys.readouterr().err

    show = ["snapshot", "show", "--user", "alice", "--scope", "personal", "--dsn", db_dsn]
    assert cli.main([*show, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["generation_id"] == published["generation_id"]
    assert [i["content"] for i in shown["document"]["items"]] == ["Prefers tabs over spaces", "Lives in Berlin"]
    assert cli.main(show) == 0
    assert "- Lives in Berlin" in capsys.readouterr().out
    assert cli.main(["snapshot", "show", "--user", "bob", "--scope", "personal", "--dsn", db_dsn]) == 1
    capsys.readouterr()


def test_cli_usage_errors(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("PRME_DSN", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    for argv in (
        ["snapshot"],
        ["recall", "x", "--user", "a"],
        ["recall", "x"],
        ["snapshot", "publish", "--user", "a"],
        ["snapshot", "show", "--user", "a", "--scope", "s"],
    ):
        assert cli.main(argv) == 2, argv
    capsys.readouterr()


# -- HTTP --------------------------------------------------------------------------


def test_http_recall(api: Api) -> None:
    with api.client(api.alice) as alice, api.client(None) as anonymous:
        response = alice.get("/v1/recall", params={"q": "tabs"})
        assert response.status_code == 200, response.text
        hits = response.json()["hits"]
        assert hits[0]["content"] == "Prefers tabs over spaces" and hits[0]["rank"] == 1
        assert hits[0]["confidence_base"] == 0.9
        assert all(h["content"] != "Bob prefers spaces" for h in alice.get("/v1/recall?q=spaces").json()["hits"])
        work = alice.get("/v1/recall", params={"scope": ["work"], "limit": 5}).json()["hits"]
        assert [h["content"] for h in work] == ["Deploys are frozen on Fridays"]
        assert len(alice.get("/v1/recall", params={"limit": 1}).json()["hits"]) == 1
        _problem(alice.get("/v1/recall", params={"limit": 0}), 422, "PR422")
        _problem(alice.get("/v1/recall", params={"scope": "Not A Scope"}), 422, "PR422")
        _problem(anonymous.get("/v1/recall"), 401, "unauthorized")


def test_http_snapshots_and_prompt(api: Api) -> None:
    with api.client(api.alice) as alice, api.client(api.bob) as bob, api.client(None) as anonymous:
        _problem(alice.get("/v1/snapshots/personal"), 404, "PR404")
        _problem(anonymous.post("/v1/snapshots/personal"), 401, "unauthorized")

        published = alice.post("/v1/snapshots/personal", headers={"If-Match": "none"})
        assert published.status_code == 200, published.text
        body = published.json()
        generation_id = body["generation_id"]
        assert body["advanced"] is True and body["seq"] == 1 and body["previous_generation_id"] is None
        assert published.headers["etag"] == f'"{generation_id}"'

        # If-Match takes the ETag as given (quoted) or the bare id; a stale one is 409.
        again = alice.post("/v1/snapshots/personal", headers={"If-Match": published.headers["etag"]})
        assert again.status_code == 200 and again.json()["advanced"] is False
        assert alice.post("/v1/snapshots/personal", headers={"If-Match": generation_id}).status_code == 200
        conflict = _problem(alice.post("/v1/snapshots/personal", headers={"If-Match": "none"}), 409, "PR409")
        assert generation_id in conflict["detail"]
        _problem(alice.post("/v1/snapshots/personal", headers={"If-Match": '"' + "b" * 64 + '"'}), 409, "PR409")
        _problem(alice.post("/v1/snapshots/personal", headers={"If-Match": "junk"}), 422, "PR422")
        _problem(alice.post("/v1/snapshots/personal", json={"max_items": 0}), 422, "PR422")
        _problem(alice.post("/v1/snapshots/personal", json={"other": 1}), 422, "PR422")
        _problem(alice.post("/v1/snapshots/Not%20A%20Scope"), 422, "PR422")
        limited = alice.post("/v1/snapshots/work", json={"max_items": 1, "max_bytes": 4096})
        assert limited.status_code == 200 and limited.json()["item_count"] == 1

        current = alice.get("/v1/snapshots/personal")
        assert current.status_code == 200, current.text
        snapshot = current.json()
        assert snapshot["generation_id"] == generation_id == _sha256(snapshot["document"])
        assert current.headers["etag"] == f'"{generation_id}"'
        assert snapshot["item_count"] == 2 and snapshot["seq"] == 1

        # Owner isolation: bob cannot read alice's snapshot, and his own publish is his own.
        _problem(bob.get("/v1/snapshots/personal"), 404, "PR404")
        _problem(bob.post("/v1/snapshots/personal", headers={"If-Match": generation_id}), 409, "PR409")
        bobs = bob.post("/v1/snapshots/personal").json()
        assert bobs["generation_id"] != generation_id and bobs["seq"] == 1
        assert alice.get("/v1/snapshots/personal").json()["generation_id"] == generation_id

        prompt = alice.get("/v1/prompt", params={"scope": ["personal", "work", "never"], "budget_bytes": 4096})
        assert prompt.status_code == 200, prompt.text
        assembled = prompt.json()
        assert assembled["prompt"] == (
            "[personal]\n- Prefers tabs over spaces\n- Lives in Berlin\n\n[work]\n- Deploys are frozen on Fridays\n"
        )
        assert assembled["generation_scopes"] == ["personal", "work", "never"]
        assert assembled["generation_ids"][0] == generation_id and assembled["generation_ids"][2] is None
        assert assembled["truncated"] is False and assembled["item_count"] == 3
        tight = alice.get("/v1/prompt", params={"scope": "personal", "budget_bytes": 40}).json()
        assert tight["truncated"] is True and tight["byte_size"] <= 40
        assert bob.get("/v1/prompt", params={"scope": "personal", "budget_bytes": 4096}).json()["prompt"] == (
            "[personal]\n- Bob prefers spaces\n"
        )
        _problem(alice.get("/v1/prompt", params={"budget_bytes": 10}), 422, "PR422")
        _problem(alice.get("/v1/prompt", params={"scope": "personal", "budget_bytes": 0}), 422, "PR422")
        _problem(alice.get("/v1/prompt", params={"scope": "personal"}), 422, "PR422")


def test_http_tampered_snapshot_is_a_500_problem(api: Api) -> None:
    with api.client(api.alice) as alice:
        assert alice.post("/v1/snapshots/personal").status_code == 200
        _tamper(api.dsn, "alice", "personal")
        _problem(alice.get("/v1/snapshots/personal"), 500, "XX001")
