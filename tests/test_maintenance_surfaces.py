"""Outcomes and maintenance through every surface: both clients, the CLI and the HTTP
API (real PostgreSQL; HTTP over a real socket). The SQL itself is tested in
tests/test_maintenance.py and the pgTAP files.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from prme_pg import (
    AppliedOp,
    AsyncMemoryClient,
    IdempotencyConflict,
    InvalidInput,
    MaintenancePatch,
    MaintenanceRecommendation,
    MemoryClient,
    NotFoundError,
    Outcome,
    OutcomeSummary,
    PrmeError,
    cli,
)
from tests.test_http import Api, _problem

from .live_server import serve


def _seed(dsn: str) -> dict[str, uuid.UUID]:
    """alice: tabs (2 confirmations: increase_stability), berlin (2 corrections: decrease
    and mark_contested), overdue (a decay); bob: one corrected memory."""
    past = datetime.now(UTC) - timedelta(days=100)
    with MemoryClient(dsn) as memory:
        tabs = memory.add_node("Prefers tabs over spaces", user_id="alice").id
        berlin = memory.add_node("Lives in Berlin", user_id="alice", stability="semi-stable").id
        overdue = memory.add_node(
            "Uses vim", user_id="alice", confidence_base="0.9", stability="stable", next_review_at=past
        ).id
        bobs = memory.add_node("Bob prefers spaces", user_id="bob").id
        for _ in range(2):
            memory.record_outcome(tabs, "explicit_reinforcement", user_id="alice")
            memory.record_outcome(berlin, "explicit_correction", user_id="alice")
        memory.record_outcome(bobs, "explicit_correction", user_id="bob")
    return {"tabs": tabs, "berlin": berlin, "overdue": overdue, "bob": bobs}


def _ops(patch: MaintenancePatch, node_id: uuid.UUID) -> dict[str, dict[str, Any]]:
    """The ops of one memory by recommendation."""
    return {op["recommendation"]: op for op in patch.ops if op["target"]["node_id"] == str(node_id)}


@pytest.fixture
def api(db_dsn: str) -> Iterator[Api]:
    with MemoryClient(db_dsn) as memory:
        alice = memory.create_api_token("alice")
        bob = memory.create_api_token("bob")
    with serve(db_dsn, max_size=4) as base:
        yield Api(base, db_dsn, alice, bob)


# -- the sync client --------------------------------------------------------------


def test_sync_client_outcomes_replay_and_conflict(db_dsn: str) -> None:
    ids = _seed(db_dsn)
    key = uuid.uuid4()
    with MemoryClient(db_dsn) as memory:
        first = memory.record_outcome(ids["tabs"], "implicit_success", user_id="alice", notes="used", request_id=key)
        assert isinstance(first, Outcome)
        assert not first.replayed and first.weight == Decimal("0.2") and first.recorded_by == "record_outcome"
        assert first.request_id == key and first.created_at.utcoffset() is not None
        again = memory.record_outcome(ids["tabs"], "implicit_success", user_id="alice", notes="used", request_id=key)
        assert again.replayed and again.id == first.id
        with pytest.raises(IdempotencyConflict):
            memory.record_outcome(ids["tabs"], "neutral_exposure", user_id="alice", notes="used", request_id=key)
        with pytest.raises(IdempotencyConflict):
            memory.record_outcome(ids["berlin"], "implicit_success", user_id="alice", notes="used", request_id=key)
        with pytest.raises(InvalidInput):
            memory.record_outcome(ids["tabs"], "delighted", user_id="alice")
        with pytest.raises(InvalidInput):
            memory.record_outcome("not-a-uuid", "implicit_success", user_id="alice")
        with pytest.raises(NotFoundError):
            memory.record_outcome(ids["bob"], "implicit_success", user_id="alice")

        summary = memory.outcome_summary(ids["tabs"], user_id="alice")
        assert isinstance(summary, OutcomeSummary)
        assert (summary.explicit_reinforcements, summary.implicit_successes, summary.outcomes) == (2, 1, 3)
        assert summary.score == Decimal("2.2") and summary.suggested_stability == "stable"
        assert memory.outcome_summary(ids["berlin"], user_id="alice").suggested_stability == "low"
        with pytest.raises(NotFoundError):
            memory.outcome_summary(ids["bob"], user_id="alice")


def test_sync_client_report_patch_and_apply(db_dsn: str) -> None:
    ids = _seed(db_dsn)
    with MemoryClient(db_dsn) as memory:
        report = {row.node_id: row for row in memory.maintenance_report(user_id="alice")}
        assert all(isinstance(row, MaintenanceRecommendation) for row in report.values())
        assert set(report) == {ids["tabs"], ids["berlin"], ids["overdue"]}
        assert "increase_stability" in report[ids["tabs"]].recommendations
        assert {"review_memory", "decrease_stability", "mark_contested"} <= set(report[ids["berlin"]].recommendations)
        assert "decay_confidence" in report[ids["overdue"]].recommendations
        assert isinstance(report[ids["tabs"]].recommendations, tuple)
        assert memory.get_node(ids["tabs"], user_id="alice").stability == "low", "the report changes nothing"

        patch = memory.maintenance_patch(user_id="alice")
        assert isinstance(patch, MaintenancePatch) and patch.created_at.utcoffset() is not None
        assert [op["op_id"] for op in patch.ops] == [f"op_{i:03d}" for i in range(1, len(patch.ops) + 1)]
        assert all(op["status"] == "pending" for op in patch.ops)
        assert memory.get_patch(str(patch.patch_id), user_id="alice") == patch
        decrease = _ops(patch, ids["berlin"])["decrease_stability"]
        assert decrease["updates"] == {"stability": {"from": "semi-stable", "to": "low"}}

        applied = memory.apply_patch(patch.patch_id, [decrease["op_id"]], user_id="alice")
        assert applied == [
            AppliedOp(decrease["op_id"], "update_stability", ids["berlin"], "applied", None, applied[0].node_version)
        ]
        assert memory.get_node(ids["berlin"], user_id="alice").stability == "low"
        twice = memory.apply_patch(patch.patch_id, decrease["op_id"], user_id="alice")
        assert [row.status for row in twice] == ["already_applied"]

        with pytest.raises(NotFoundError):
            memory.apply_patch(patch.patch_id, ["op_999"], user_id="alice")
        with pytest.raises(InvalidInput):
            memory.apply_patch(patch.patch_id, None, user_id="alice")
        with pytest.raises(InvalidInput):
            memory.apply_patch(patch.patch_id, ["op_001"], user_id="alice", mode="auto")
        with pytest.raises(NotFoundError):
            memory.get_patch(patch.patch_id, user_id="bob")
        with pytest.raises(NotFoundError):
            memory.apply_patch(patch.patch_id, user_id="bob", mode="auto")

        auto = {row.node_id: row for row in memory.apply_patch(patch.patch_id, user_id="alice", mode="auto")}
        assert set(auto) == {ids["tabs"], ids["overdue"]}, "auto never decreases or contests"
        assert all(row.status == "applied" for row in auto.values())
        assert memory.get_node(ids["tabs"], user_id="alice").stability == "semi-stable"
        assert memory.get_node(ids["overdue"], user_id="alice").confidence_base < Decimal("0.9")
        assert memory.get_node(ids["berlin"], user_id="alice").lifecycle_state == "active"
        statuses = {op["op_id"]: op["status"] for op in memory.get_patch(patch.patch_id, user_id="alice").ops}
        assert statuses[_ops(patch, ids["berlin"])["mark_contested"]["op_id"]] == "pending"
        assert memory.verify_journal(user_id="alice") == []


# -- the async client --------------------------------------------------------------


def test_async_client_matches_the_sync_client(db_dsn: str) -> None:
    ids = _seed(db_dsn)

    async def run() -> None:
        async with AsyncMemoryClient(db_dsn) as memory:
            key = uuid.uuid4()
            first = await memory.record_outcome(ids["tabs"], "neutral_exposure", user_id="alice", request_id=key)
            assert not first.replayed and first.weight == 0
            assert (
                await memory.record_outcome(ids["tabs"], "neutral_exposure", user_id="alice", request_id=key)
            ).replayed
            with pytest.raises(IdempotencyConflict):
                await memory.record_outcome(ids["tabs"], "implicit_success", user_id="alice", request_id=key)
            summary = await memory.outcome_summary(ids["tabs"], user_id="alice")
            assert summary.neutral_exposures == 1
            report = await memory.maintenance_report(user_id="alice")
            assert {row.node_id for row in report} == {ids["tabs"], ids["berlin"], ids["overdue"]}
            patch = await memory.maintenance_patch(user_id="alice")
            assert await memory.get_patch(patch.patch_id, user_id="alice") == patch
            applied = await memory.apply_patch(patch.patch_id, user_id="alice", mode="auto")
            assert {row.node_id for row in applied} == {ids["tabs"], ids["overdue"]}
            with pytest.raises(NotFoundError):
                await memory.get_patch(patch.patch_id, user_id="bob")

    asyncio.run(run())


# -- memory packs refuse clearly ------------------------------------------------------


def test_memory_packs_refuse_outcomes_and_maintenance(tmp_path: Path) -> None:
    node_id = uuid.uuid4()
    with MemoryClient(tmp_path / "pack") as memory:
        calls = [
            lambda: memory.record_outcome(node_id, "implicit_success", user_id="alice"),
            lambda: memory.outcome_summary(node_id, user_id="alice"),
            lambda: memory.maintenance_report(user_id="alice"),
            lambda: memory.maintenance_patch(user_id="alice"),
            lambda: memory.get_patch(node_id, user_id="alice"),
            lambda: memory.apply_patch(node_id, ["op_001"], user_id="alice"),
        ]
        for call in calls:
            with pytest.raises(PrmeError, match="needs PostgreSQL") as raised:
                call()
            assert type(raised.value) is PrmeError

    async def run() -> None:
        async with AsyncMemoryClient(tmp_path / "pack2") as memory:
            with pytest.raises(PrmeError, match="RecordOutcome needs PostgreSQL"):
                await memory.record_outcome(node_id, "implicit_success", user_id="alice")
            with pytest.raises(PrmeError, match="MaintenanceReport needs PostgreSQL"):
                await memory.maintenance_report(user_id="alice")

    asyncio.run(run())


# -- the CLI ------------------------------------------------------------------------


def test_cli_maintain_and_curate(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # wide tables: no wrapped cells to search
    ids = _seed(db_dsn)
    base = ["--user", "alice", "--dsn", db_dsn]

    assert cli.main(["maintain", "--report", *base, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["recommendations"]
    assert {row["node_id"] for row in rows} == {str(i) for i in (ids["tabs"], ids["berlin"], ids["overdue"])}
    assert cli.main(["maintain", "--report", *base]) == 0
    out = capsys.readouterr().out
    assert "decrease_stability" in out and "nothing changed" in out

    assert cli.main(["maintain", *base]) == 0
    out = capsys.readouterr().out
    assert "op_001" in out and "written for review" in out and "prme-pg curate" in out
    assert cli.main(["maintain", *base, "--json"]) == 0
    patch = json.loads(capsys.readouterr().out)["patch"]
    assert "applied" not in patch and all(op["status"] == "pending" for op in patch["ops"])
    with MemoryClient(db_dsn) as memory:
        assert memory.get_node(ids["tabs"], user_id="alice").stability == "low", "maintain only proposes"

    contested = next(op["op_id"] for op in patch["ops"] if op["op"] == "mark_contested")
    curate = ["curate", patch["patch_id"], *base]
    assert cli.main([*curate, "--select", contested, "--json"]) == 0
    applied = json.loads(capsys.readouterr().out)["applied"]
    assert [(row["op_id"], row["status"]) for row in applied] == [(contested, "applied")]
    assert cli.main([*curate, "--select", f"{contested},"]) == 0
    assert "already applied" in capsys.readouterr().out
    assert cli.main(curate) == 0
    assert "applied" in capsys.readouterr().out
    assert cli.main([*curate, "--select", "op_999"]) == 1
    assert "not found" in capsys.readouterr().err
    assert cli.main(["curate", patch["patch_id"], "--user", "bob", "--dsn", db_dsn]) == 1
    capsys.readouterr()
    with MemoryClient(db_dsn) as memory:
        assert memory.get_node(ids["berlin"], user_id="alice").lifecycle_state == "contested"

    assert cli.main(["maintain", "--mode=auto", *base, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {row["node_id"] for row in document["applied"]} == {str(ids["tabs"]), str(ids["overdue"])}
    assert all(row["status"] == "applied" for row in document["applied"])
    assert cli.main(["maintain", "--mode", "auto", *base]) == 0
    assert "applied in auto mode" in capsys.readouterr().out
    with MemoryClient(db_dsn) as memory:
        assert memory.get_node(ids["tabs"], user_id="alice").stability == "semi-stable"


def test_cli_usage_errors(db_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("PRME_DSN", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    patch_id = str(uuid.uuid4())
    for argv in (
        ["maintain"],
        ["maintain", "--user", "a"],
        ["maintain", "--user", "a", "--mode", "sometimes", "--dsn", db_dsn],
        ["maintain", "--user", "a", "--report", "--mode", "auto", "--dsn", db_dsn],
        ["curate", "--user", "a", "--dsn", db_dsn],
        ["curate", patch_id, "--user", "a"],
        ["curate", patch_id, "--user", "a", "--select", ",", "--dsn", db_dsn],
    ):
        assert cli.main(argv) == 2, argv
    assert cli.main(["curate", "not-a-uuid", "--user", "a", "--dsn", db_dsn]) == 1
    capsys.readouterr()


# -- HTTP --------------------------------------------------------------------------


def test_http_outcomes(api: Api) -> None:
    ids = _seed(api.dsn)
    key = str(uuid.uuid4())
    url = f"/v1/nodes/{ids['tabs']}/outcomes"
    with api.client(api.alice) as alice, api.client(api.bob) as bob, api.client(None) as anonymous:
        created = alice.post(url, json={"outcome": "implicit_success", "notes": "ok"}, headers={"Idempotency-Key": key})
        assert created.status_code == 201, created.text
        body = created.json()
        assert body["weight"] == 0.2 and body["request_id"] == key and "replayed" not in body
        assert "idempotent-replayed" not in created.headers
        replay = alice.post(url, json={"outcome": "implicit_success", "notes": "ok"}, headers={"Idempotency-Key": key})
        assert replay.status_code == 200 and replay.headers["idempotent-replayed"] == "true"
        assert replay.json() == body
        _problem(
            alice.post(url, json={"outcome": "explicit_correction"}, headers={"Idempotency-Key": key}), 409, "PR409"
        )
        _problem(alice.post(url, json={"outcome": "delighted"}), 422, "PR422")
        _problem(alice.post(url, json={"outcome": "implicit_success", "extra": 1}), 422, "PR422")
        _problem(alice.post(url, json={"outcome": "implicit_success"}, headers={"Idempotency-Key": "x"}), 422, "PR422")
        _problem(bob.post(url, json={"outcome": "implicit_success"}), 404, "PR404")
        _problem(anonymous.post(url, json={"outcome": "implicit_success"}), 401, "unauthorized")
        assert alice.post(url, json={"outcome": "explicit_reinforcement"}).status_code == 201

        summary = alice.get(f"{url}/summary")
        assert summary.status_code == 200, summary.text
        assert summary.json()["explicit_reinforcements"] == 3 and summary.json()["score"] == 3.2
        _problem(bob.get(f"{url}/summary"), 404, "PR404")


def test_http_report_and_patches(api: Api) -> None:
    ids = _seed(api.dsn)
    with api.client(api.alice) as alice, api.client(api.bob) as bob, api.client(None) as anonymous:
        report = alice.get("/v1/maintenance/report")
        assert report.status_code == 200, report.text
        rows = {row["node_id"]: row for row in report.json()["recommendations"]}
        assert set(rows) == {str(i) for i in (ids["tabs"], ids["berlin"], ids["overdue"])}
        assert [row["node_id"] for row in bob.get("/v1/maintenance/report").json()["recommendations"]] == [
            str(ids["bob"])
        ]
        _problem(alice.get("/v1/maintenance/report", params={"as_of": "2026-01-01T00:00:00"}), 422, "PR422")
        _problem(anonymous.get("/v1/maintenance/report"), 401, "unauthorized")

        created = alice.post("/v1/maintenance/patches")
        assert created.status_code == 201, created.text
        patch = created.json()
        patch_id = patch["patch_id"]
        assert alice.get(f"/v1/maintenance/patches/{patch_id}").json() == patch
        _problem(bob.get(f"/v1/maintenance/patches/{patch_id}"), 404, "PR404")
        _problem(alice.get(f"/v1/maintenance/patches/{uuid.uuid4()}"), 404, "PR404")
        _problem(alice.get("/v1/maintenance/patches/not-a-uuid"), 422, "PR422")
        _problem(anonymous.post("/v1/maintenance/patches"), 401, "unauthorized")
        _problem(alice.post("/v1/maintenance/patches", json={"as_of": "2999-01-01T00:00:00Z"}), 422, "PR422")

        apply = f"/v1/maintenance/patches/{patch_id}/apply"
        _problem(bob.post(apply, json={"op_ids": ["op_001"]}), 404, "PR404")
        _problem(alice.post(apply, json={"op_ids": ["op_999"]}), 404, "PR404")
        _problem(alice.post(apply), 422, "PR422")
        _problem(alice.post(apply, json={"mode": "sometimes"}), 422, "PR422")
        _problem(alice.post(apply, json={"op_ids": ["op_001"], "mode": "auto"}), 422, "PR422")

        decrease = next(op for op in patch["ops"] if op["recommendation"] == "decrease_stability")
        manual = alice.post(apply, json={"op_ids": [decrease["op_id"]], "mode": "manual"})
        assert manual.status_code == 200, manual.text
        assert manual.json()["patch_id"] == patch_id
        assert [(r["op_id"], r["status"]) for r in manual.json()["results"]] == [(decrease["op_id"], "applied")]
        again = alice.post(apply, json={"op_ids": [decrease["op_id"]]}).json()["results"]
        assert [r["status"] for r in again] == ["already_applied"]

        auto = alice.post(apply, json={"mode": "auto"})
        assert auto.status_code == 200, auto.text
        assert {r["node_id"] for r in auto.json()["results"]} == {str(ids["tabs"]), str(ids["overdue"])}
        ops = {op["op_id"]: op for op in alice.get(f"/v1/maintenance/patches/{patch_id}").json()["ops"]}
        assert ops[decrease["op_id"]]["status"] == "applied" and ops[decrease["op_id"]]["applied_mode"] == "manual"
        assert alice.get(f"/v1/nodes/{ids['tabs']}").json()["stability"] == "semi-stable"
