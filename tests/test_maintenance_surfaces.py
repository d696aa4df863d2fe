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
    CorrectionInboxEntry,
    CorrectionLink,
    CorrectionMatch,
    IdempotencyConflict,
    InvalidInput,
    MaintenancePatch,
    MaintenanceRecommendation,
    MaintenanceSetting,
    MemoryClient,
    NotFoundError,
    Outcome,
    OutcomeSummary,
    cli,
)
from tests.test_http import Api, _problem

from .live_server import serve


def _seed(dsn: str | Path) -> dict[str, uuid.UUID]:
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
        assert summary.score == Decimal("2.2") and summary.stability_by_outcomes == "stable"
        assert memory.outcome_summary(ids["berlin"], user_id="alice").stability_by_outcomes == "low"
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


def test_memory_packs_answer_outcomes_and_maintenance_async(tmp_path: Path) -> None:
    """The async client on a pack runs outcomes, reports and patches like the sync one
    (tests/test_conformance_maintenance.py holds both engines equal)."""
    node_id = uuid.uuid4()

    async def run() -> None:
        async with AsyncMemoryClient(tmp_path / "pack") as memory:
            with pytest.raises(NotFoundError):
                await memory.record_outcome(node_id, "implicit_success", user_id="alice")
            assert await memory.maintenance_report(user_id="alice") == []
            patch = await memory.maintenance_patch(user_id="alice")
            assert patch.ops == ()
            assert await memory.apply_patch(patch.patch_id, user_id="alice", mode="auto") == []
            with pytest.raises(NotFoundError):
                await memory.get_patch(node_id, user_id="alice")

    asyncio.run(run())


# -- the CLI ------------------------------------------------------------------------


@pytest.fixture(params=["postgres", "pack"])
def cli_target(request: pytest.FixtureRequest, db_dsn: str, tmp_path: Path) -> tuple[str | Path, list[str]]:
    """Where the CLI's maintenance commands act: a database (--dsn) or a memory pack (--pack)."""
    if request.param == "postgres":
        return db_dsn, ["--dsn", db_dsn]
    return tmp_path / "pack", ["--pack", str(tmp_path / "pack")]


def test_cli_maintain_and_curate(
    cli_target: tuple[str | Path, list[str]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # wide tables: no wrapped cells to search
    db_dsn, where = cli_target
    ids = _seed(db_dsn)
    base = ["--user", "alice", *where]

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
    assert cli.main(["curate", patch["patch_id"], "--user", "bob", *where]) == 1
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
        ["maintain", "--user", "a", "--pack", "./p", "--dsn", db_dsn],
    ):
        assert cli.main(argv) == 2, argv
    capsys.readouterr()
    # A value the engine refuses is a usage error too, named by the CLI's own terms.
    assert cli.main(["curate", "not-a-uuid", "--user", "a", "--dsn", db_dsn]) == 2
    assert "PATCH_ID must be a UUID" in capsys.readouterr().err


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


# -- correction linking, reviews and settings -----------------------------------------


def _seed_corrections(dsn: str) -> dict[str, uuid.UUID]:
    """alice: tabs and python (both overlap "No, I prefer spaces over tabs" at 0.75), berlin
    (overlaps nothing); bob: a memory with the same words."""
    with MemoryClient(dsn) as memory:
        return {
            "tabs": memory.add_node("Prefers tabs over spaces", user_id="alice").id,
            "python": memory.add_node("Prefers spaces over tabs in Python", user_id="alice").id,
            "berlin": memory.add_node("Lives in Berlin", user_id="alice", stability="semi-stable").id,
            "bob": memory.add_node("Prefers tabs over spaces", user_id="bob").id,
        }


CORRECTION = "No, I prefer spaces over tabs now"


def test_sync_client_correction_linking_and_inbox(db_dsn: str) -> None:
    ids = _seed_corrections(db_dsn)
    with MemoryClient(db_dsn) as memory:
        linked = memory.link_correction(CORRECTION, [ids["tabs"], ids["berlin"]], user_id="alice", thread_id="t-1")
        assert isinstance(linked, CorrectionLink)
        assert (linked.status, linked.node_id, linked.inbox_id) == ("linked", ids["tabs"], None)
        assert linked.matches == (CorrectionMatch(ids["tabs"], Decimal("0.75")),)
        assert isinstance(linked.matches[0].overlap, Decimal) and linked.outcome_id is not None
        assert memory.outcome_summary(ids["tabs"], user_id="alice").explicit_corrections == 1

        ambiguous = memory.link_correction(CORRECTION, [str(ids["tabs"]), ids["python"]], user_id="alice")
        assert (ambiguous.status, ambiguous.node_id, ambiguous.outcome_id) == ("ambiguous", None, None)
        assert {m.node_id for m in ambiguous.matches} == {ids["tabs"], ids["python"]}
        # Another owner's memory is no candidate (and not revealed): nothing matches.
        unmatched = memory.link_correction(CORRECTION, [ids["bob"], ids["berlin"]], user_id="alice")
        assert (unmatched.status, unmatched.matches) == ("unmatched", ())
        assert memory.outcome_summary(ids["tabs"], user_id="alice").explicit_corrections == 1, "no event for either"

        inbox = memory.list_correction_inbox(user_id="alice")
        assert all(isinstance(entry, CorrectionInboxEntry) for entry in inbox)
        assert [(e.id, e.reason) for e in inbox] == [
            (ambiguous.inbox_id, "ambiguous"),
            (unmatched.inbox_id, "no_match"),
        ]
        assert inbox[0].candidate_node_ids == (ids["tabs"], ids["python"]) and inbox[0].message == CORRECTION
        assert inbox[0].resolution is None and inbox[0].created_at.utcoffset() is not None
        assert memory.list_correction_inbox(user_id="bob") == [], "one owner's inbox is not another's"
        assert len(memory.list_correction_inbox(user_id="alice", max_count=1)) == 1

        # Another owner can neither resolve nor learn of an entry; a foreign memory is not found.
        with pytest.raises(NotFoundError):
            memory.resolve_correction(ambiguous.inbox_id, ids["bob"], user_id="bob")
        with pytest.raises(NotFoundError):
            memory.resolve_correction(ambiguous.inbox_id, None, user_id="bob")
        with pytest.raises(NotFoundError):
            memory.resolve_correction(ambiguous.inbox_id, ids["bob"], user_id="alice")
        assert memory.list_correction_inbox(user_id="alice")[0].resolution is None, "nothing changed"

        resolved = memory.resolve_correction(ambiguous.inbox_id, ids["python"], user_id="alice")
        assert (resolved.resolution, resolved.resolved_node_id) == ("linked", ids["python"])
        assert resolved.outcome_id is not None and resolved.resolved_at is not None
        assert memory.outcome_summary(ids["python"], user_id="alice").explicit_corrections == 1
        assert memory.resolve_correction(str(ambiguous.inbox_id), ids["python"], user_id="alice") == resolved
        with pytest.raises(IdempotencyConflict):
            memory.resolve_correction(ambiguous.inbox_id, None, user_id="alice")
        dismissed = memory.resolve_correction(unmatched.inbox_id, user_id="alice")
        assert (dismissed.resolution, dismissed.outcome_id) == ("dismissed", None)
        assert memory.outcome_summary(ids["python"], user_id="alice").explicit_corrections == 1

        assert memory.list_correction_inbox(user_id="alice") == []
        everything = memory.list_correction_inbox(user_id="alice", include_resolved=True)
        assert [e.resolution for e in everything] == ["linked", "dismissed"]

        with pytest.raises(InvalidInput):
            memory.link_correction(CORRECTION, ["not-a-uuid"], user_id="alice")
        with pytest.raises(InvalidInput):
            memory.link_correction(CORRECTION, str(ids["tabs"]), user_id="alice")
        with pytest.raises(InvalidInput):
            memory.link_correction("   ", [ids["tabs"]], user_id="alice")
        with pytest.raises(InvalidInput):
            memory.list_correction_inbox(user_id="alice", max_count=0)
        with pytest.raises(InvalidInput):
            memory.resolve_correction("nope", user_id="alice")
        with pytest.raises(NotFoundError):
            memory.resolve_correction(uuid.uuid4(), user_id="alice")

        for message in ("Don't use tabs", "No, I live in Hamburg", "Actually, it's Tuesday", "Stop suggesting vim"):
            assert memory.is_correction(message) is True, message
        for message in ("I prefer to travel by train", "Can you stop by the office?", "Don Quixote is a novel"):
            assert memory.is_correction(message) is False, message
        assert memory.verify_journal(user_id="alice") == []


def _defaults() -> list[MaintenanceSetting]:
    return [
        MaintenanceSetting("low", timedelta(days=7), Decimal("0.15"), "default"),
        MaintenanceSetting("semi-stable", timedelta(days=30), Decimal("0.15"), "default"),
        MaintenanceSetting("stable", timedelta(days=90), Decimal("0.05"), "default"),
    ]


def test_sync_client_reviews_and_settings(db_dsn: str) -> None:
    ids = _seed(db_dsn)
    with MemoryClient(db_dsn) as memory:
        assert memory.get_maintenance_settings(user_id="alice") == _defaults()
        settings = memory.set_maintenance_setting(
            "stable", user_id="alice", review_cadence=timedelta(days=20), decay_per_cycle=0.1
        )
        assert settings[2] == MaintenanceSetting("stable", timedelta(days=20), Decimal("0.1"), "owner")
        assert settings[:2] == _defaults()[:2]
        assert memory.get_maintenance_settings(user_id="alice") == settings
        assert memory.get_maintenance_settings(user_id="bob") == _defaults(), "an override is the owner's alone"
        for stability, cadence, decay in [
            ("rock", timedelta(days=7), "0.1"),
            ("low", timedelta(minutes=30), "0.1"),
            ("low", timedelta(days=7, microseconds=5), "0.1"),
            ("low", timedelta(days=7), "1.5"),
            ("low", timedelta(days=7), "0.12345"),
        ]:
            with pytest.raises(InvalidInput):
                memory.set_maintenance_setting(
                    stability, user_id="alice", review_cadence=cadence, decay_per_cycle=decay
                )
        with pytest.raises(InvalidInput):
            memory.set_maintenance_setting("low", user_id="*", review_cadence=timedelta(days=7), decay_per_cycle=0)
        with pytest.raises(InvalidInput):
            memory.set_maintenance_setting("low", user_id="alice", review_cadence="P7D", decay_per_cycle=0)  # type: ignore[arg-type]
        assert memory.get_maintenance_settings(user_id="alice") == settings, "refused calls change nothing"

        # The overdue memory (stable): a review moves it one cadence (the owner's 20 days) ahead.
        before = memory.get_node(ids["overdue"], user_id="alice")
        reviewed = memory.mark_reviewed(ids["overdue"], user_id="alice")
        assert reviewed.version == before.version + 1 and reviewed.next_review_at is not None
        ahead = reviewed.next_review_at - datetime.now(UTC)
        assert timedelta(days=19, hours=23) < ahead <= timedelta(days=20)
        # berlin's two corrections are settled by its review: the report no longer lists either.
        chosen = datetime.now(UTC) + timedelta(days=3)
        assert memory.mark_reviewed(str(ids["berlin"]), user_id="alice", next_review_at=chosen).next_review_at == chosen
        assert {row.node_id for row in memory.maintenance_report(user_id="alice")} == {ids["tabs"]}

        with pytest.raises(NotFoundError):
            memory.mark_reviewed(ids["bob"], user_id="alice")
        with pytest.raises(InvalidInput):
            memory.mark_reviewed(ids["tabs"], user_id="alice", next_review_at=datetime.now(UTC) - timedelta(days=1))
        with pytest.raises(InvalidInput):
            memory.mark_reviewed(ids["tabs"], user_id="alice", next_review_at=datetime(2030, 1, 1))  # naive
        assert memory.get_node(ids["tabs"], user_id="alice").version == 1, "refused reviews change nothing"

        assert memory.reset_maintenance_settings(user_id="alice") == _defaults()
        assert memory.verify_journal(user_id="alice") == []


def test_async_client_corrections_reviews_and_settings(db_dsn: str) -> None:
    ids = _seed_corrections(db_dsn)

    async def run() -> None:
        async with AsyncMemoryClient(db_dsn) as memory:
            linked = await memory.link_correction(CORRECTION, [ids["tabs"]], user_id="alice")
            assert (linked.status, linked.node_id) == ("linked", ids["tabs"])
            ambiguous = await memory.link_correction(CORRECTION, [ids["tabs"], ids["python"]], user_id="alice")
            assert [e.id for e in await memory.list_correction_inbox(user_id="alice")] == [ambiguous.inbox_id]
            assert await memory.list_correction_inbox(user_id="bob") == []
            with pytest.raises(NotFoundError):
                await memory.resolve_correction(ambiguous.inbox_id, user_id="bob")
            entry = await memory.resolve_correction(ambiguous.inbox_id, ids["tabs"], user_id="alice")
            assert entry.resolution == "linked"
            assert await memory.is_correction("Actually, I moved to Hamburg") is True
            assert await memory.is_correction("The result is actually good") is False
            node = await memory.mark_reviewed(ids["tabs"], user_id="alice")
            assert node.version == 2 and node.next_review_at is not None
            assert await memory.maintenance_report(user_id="alice") == [], "the review settled both corrections"
            assert await memory.get_maintenance_settings(user_id="alice") == _defaults()
            changed = await memory.set_maintenance_setting(
                "low", user_id="alice", review_cadence=timedelta(hours=12), decay_per_cycle="0"
            )
            assert changed[0] == MaintenanceSetting("low", timedelta(hours=12), Decimal("0"), "owner")
            assert await memory.reset_maintenance_settings(user_id="alice") == _defaults()

    asyncio.run(run())


def test_http_corrections_and_inbox(api: Api) -> None:
    ids = _seed_corrections(api.dsn)
    with api.client(api.alice) as alice, api.client(api.bob) as bob, api.client(None) as anonymous:
        linked = alice.post("/v1/corrections", json={"message": CORRECTION, "candidate_node_ids": [str(ids["tabs"])]})
        assert linked.status_code == 201, linked.text
        body = linked.json()
        assert (body["status"], body["node_id"], body["inbox_id"]) == ("linked", str(ids["tabs"]), None)
        assert body["matches"] == [{"node_id": str(ids["tabs"]), "overlap": 0.75}]

        candidates = [str(ids["tabs"]), str(ids["python"])]
        ambiguous = alice.post("/v1/corrections", json={"message": CORRECTION, "candidate_node_ids": candidates})
        assert ambiguous.status_code == 201 and ambiguous.json()["status"] == "ambiguous"
        inbox_id = ambiguous.json()["inbox_id"]
        # bob names alice's memories: they are not his, so nothing matches and his inbox gets the entry.
        bobs = bob.post("/v1/corrections", json={"message": CORRECTION, "candidate_node_ids": candidates})
        assert bobs.status_code == 201 and bobs.json()["status"] == "unmatched"

        entries = alice.get("/v1/corrections/inbox").json()["entries"]
        assert [(e["id"], e["reason"], e["candidate_node_ids"]) for e in entries] == [
            (inbox_id, "ambiguous", candidates)
        ]
        assert [e["id"] for e in bob.get("/v1/corrections/inbox").json()["entries"]] == [bobs.json()["inbox_id"]]

        resolve = f"/v1/corrections/inbox/{inbox_id}/resolve"
        _problem(bob.post(resolve, json={"node_id": str(ids["bob"])}), 404, "PR404")
        _problem(bob.post(resolve), 404, "PR404")
        _problem(alice.post(resolve, json={"node_id": str(ids["bob"])}), 404, "PR404")
        _problem(alice.post(f"/v1/corrections/inbox/{bobs.json()['inbox_id']}/resolve"), 404, "PR404")
        _problem(anonymous.get("/v1/corrections/inbox"), 401, "unauthorized")
        _problem(
            anonymous.post("/v1/corrections", json={"message": CORRECTION, "candidate_node_ids": []}),
            401,
            "unauthorized",
        )

        done = alice.post(resolve, json={"node_id": str(ids["python"])})
        assert done.status_code == 200, done.text
        assert (done.json()["resolution"], done.json()["resolved_node_id"]) == ("linked", str(ids["python"]))
        assert alice.post(resolve, json={"node_id": str(ids["python"])}).json() == done.json()
        _problem(alice.post(resolve), 409, "PR409")
        assert alice.get("/v1/corrections/inbox").json()["entries"] == []
        everything = alice.get("/v1/corrections/inbox", params={"include_resolved": "true"}).json()["entries"]
        assert [e["resolution"] for e in everything] == ["linked"]
        assert bob.get("/v1/corrections/inbox").json()["entries"][0]["resolution"] is None, "bob's entry is untouched"
        summary = alice.get(f"/v1/nodes/{ids['python']}/outcomes/summary").json()
        assert summary["explicit_corrections"] == 1

        _problem(alice.post("/v1/corrections", json={"message": "", "candidate_node_ids": []}), 422, "PR422")
        _problem(alice.post("/v1/corrections", json={"message": CORRECTION, "candidate_node_ids": ["x"]}), 422, "PR422")
        _problem(alice.post("/v1/corrections", json={"message": CORRECTION}), 422, "PR422")
        _problem(alice.get("/v1/corrections/inbox", params={"max_count": 0}), 422, "PR422")
        _problem(alice.post("/v1/corrections/inbox/not-a-uuid/resolve"), 422, "PR422")

        detect = alice.post("/v1/corrections/detect", json={"message": "Don't call me before nine"})
        assert detect.status_code == 200 and detect.json() == {"is_correction": True}
        assert alice.post("/v1/corrections/detect", json={"message": "I prefer trains"}).json() == {
            "is_correction": False
        }
        _problem(anonymous.post("/v1/corrections/detect", json={"message": "Don't"}), 401, "unauthorized")


def test_http_reviews_and_settings(api: Api) -> None:
    ids = _seed(api.dsn)
    with api.client(api.alice) as alice, api.client(api.bob) as bob, api.client(None) as anonymous:
        review = f"/v1/nodes/{ids['berlin']}/review"
        _problem(bob.post(review), 404, "PR404")
        _problem(anonymous.post(review), 401, "unauthorized")
        _problem(alice.post(review, json={"next_review_at": "2001-01-01T00:00:00Z"}), 422, "PR422")
        reviewed = alice.post(review, json={"next_review_at": "2099-01-01T00:00:00Z"})
        assert reviewed.status_code == 200, reviewed.text
        assert reviewed.json()["next_review_at"] == "2099-01-01T00:00:00Z" and reviewed.json()["version"] == 2
        default = alice.post(f"/v1/nodes/{ids['overdue']}/review")
        assert default.status_code == 200 and default.json()["version"] == 2
        rows = alice.get("/v1/maintenance/report").json()["recommendations"]
        assert [row["node_id"] for row in rows] == [str(ids["tabs"])], "reviews settled berlin and the overdue one"

        settings = alice.get("/v1/maintenance/settings")
        assert settings.status_code == 200, settings.text
        assert settings.json()["settings"][0] == {
            "stability": "low",
            "review_cadence": 7 * 86400,
            "decay_per_cycle": 0.15,
            "source": "default",
        }
        put = alice.put(
            "/v1/maintenance/settings/semi-stable", json={"review_cadence": "PT36H", "decay_per_cycle": 0.2}
        )
        assert put.status_code == 200, put.text
        assert put.json()["settings"][1] == {
            "stability": "semi-stable",
            "review_cadence": 36 * 3600,
            "decay_per_cycle": 0.2,
            "source": "owner",
        }
        assert bob.get("/v1/maintenance/settings").json()["settings"][1]["source"] == "default"
        seconds = alice.put("/v1/maintenance/settings/stable", json={"review_cadence": 3600, "decay_per_cycle": "0.01"})
        assert seconds.status_code == 200, seconds.text
        assert seconds.json()["settings"][2]["review_cadence"] == 3600
        # 422 days: whole days of elapsed time, never "1 year" (a year has no fixed length).
        long = alice.put("/v1/maintenance/settings/stable", json={"review_cadence": "P422D", "decay_per_cycle": 0})
        assert long.json()["settings"][2]["review_cadence"] == 422 * 86400
        _problem(
            alice.put("/v1/maintenance/settings/rock", json={"review_cadence": "P7D", "decay_per_cycle": 0}),
            422,
            "PR422",
        )
        _problem(
            alice.put("/v1/maintenance/settings/low", json={"review_cadence": "PT5M", "decay_per_cycle": 0}),
            422,
            "PR422",
        )
        _problem(
            alice.put("/v1/maintenance/settings/low", json={"review_cadence": "P7D", "decay_per_cycle": 2}),
            422,
            "PR422",
        )
        _problem(anonymous.get("/v1/maintenance/settings"), 401, "unauthorized")
        reset = alice.delete("/v1/maintenance/settings")
        assert reset.status_code == 200 and {s["source"] for s in reset.json()["settings"]} == {"default"}
