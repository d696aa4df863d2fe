"""Issue 33: the first hour of a new user, second pass. Each test failed before its fix."""

from __future__ import annotations

import fractions
import json
import os
import re
import shlex
import subprocess
import sys
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from prme_pg import InvalidInput, MemoryClient, SchemaMissing, __version__, testing

from .live_server import serve
from .test_maintenance_surfaces import _seed as _seed_maintenance

RFC3339_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")


def _prme_pg(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("PRME_DSN", "DATABASE_URL")}
    return subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**environment, **(env or {})},
        timeout=120,
        cwd=cwd,
    )


def test_version() -> None:
    result = _prme_pg("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"prme-pg {__version__}"


@pytest.mark.parametrize(
    "argv",
    [["recall", "tabs"], ["curate", str(uuid.uuid4())], ["maintain"], ["snapshot", "show", "--scope", "personal"]],
)
def test_a_command_that_runs_on_a_pack_says_so_when_given_no_target(argv: list[str]) -> None:
    result = _prme_pg(*argv, "--user", "alice")
    assert result.returncode == 2
    assert "pass --pack DIR (a memory pack) or --dsn URL" in result.stderr, result.stderr


def _hint(stdout: str) -> str | None:
    lines = [line for line in stdout.splitlines() if line.startswith("written for review")]
    return lines[0].split("apply with: ", 1)[1] if lines else None


def test_maintain_prints_a_curate_command_that_runs_as_printed(tmp_path: Path) -> None:
    pack = tmp_path / "memories"
    _seed_maintenance(pack)
    written = _prme_pg("maintain", "--pack", str(pack), "--user", "alice", "--json")
    ops = json.loads(written.stdout)["patch"]["ops"]
    printed = _prme_pg("maintain", "--pack", str(pack), "--user", "alice")
    assert printed.returncode == 0, printed.stderr
    command = _hint(printed.stdout)
    assert command is not None, printed.stdout
    words = shlex.split(command)
    assert words[:2] == ["prme-pg", "curate"] and ["--pack", str(pack)] == words[5:7], command
    selected = words[words.index("--select") + 1].split(",")
    assert selected == [op["op_id"] for op in ops if op["default_selected"]], "the ops the review selects"
    applied = _prme_pg(*words[1:])
    assert applied.returncode == 0, applied.stderr
    assert f"{len(selected)} applied" in applied.stdout

    empty = tmp_path / "empty"
    none = _prme_pg("maintain", "--pack", str(empty), "--user", "alice")
    assert none.returncode == 0 and _hint(none.stdout) is None and "0 ops" in none.stdout


def test_maintain_names_the_dsn_it_was_given(db_dsn: str) -> None:
    _seed_maintenance(db_dsn)
    printed = _prme_pg("maintain", "--dsn", db_dsn, "--user", "alice")
    command = _hint(printed.stdout)
    assert command is not None and f"--dsn {shlex.quote(db_dsn)}" in command, printed.stdout
    assert _prme_pg(*shlex.split(command)[1:]).returncode == 0


def test_clients_on_a_database_without_the_schema_say_to_migrate(pg_server: testing.Server) -> None:
    name = testing.create_database(pg_server, prefix="prme_empty")
    try:
        with MemoryClient(pg_server.dsn_for(name)) as memory, pytest.raises(SchemaMissing) as caught:
            memory.add_node("alice prefers tabs", user_id="alice")
        assert 'schema "prme" does not exist' in str(caught.value)
        assert "run prme-pg migrate" in str(caught.value)
    finally:
        testing.drop_database(pg_server, name)


def test_a_fraction_with_an_exact_decimal_form_is_accepted(tmp_path: Path) -> None:
    with MemoryClient(tmp_path / "memories") as memory:
        settings = memory.set_maintenance_setting(
            "low", user_id="alice", review_cadence=timedelta(days=3), decay_per_cycle=fractions.Fraction(1, 20)
        )
        assert {s.stability: s.decay_per_cycle for s in settings}["low"] == Decimal("0.05")
        node = memory.add_node("tabs", user_id="alice", confidence_base=fractions.Fraction(3, 4))
        assert node.confidence_base == Decimal("0.75")
        with pytest.raises(InvalidInput, match="exact decimal"):
            memory.add_node("tabs", user_id="alice", confidence_base=fractions.Fraction(1, 3))


def test_recall_takes_query_and_unknown_parameters_are_refused(tmp_path: Path) -> None:
    pack = tmp_path / "memories"
    with MemoryClient(pack) as memory:
        token = memory.create_api_token("alice")
        memory.add_node("alice prefers tabs", user_id="alice")
        memory.add_node("alice lives in Berlin", user_id="alice")
    with serve(pack) as base, httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as http:
        for name in ("query", "q"):
            hits = http.get("/v1/recall", params={name: "tabs"}).json()["hits"]
            assert [hit["content"] for hit in hits] == ["alice prefers tabs"], name
        assert http.get("/v1/recall", params={"query": "tabs", "q": "berlin"}).status_code == 422
        for path, params in (
            ("/v1/recall", {"qurey": "tabs"}),
            ("/v1/nodes", {"limit": "5", "colour": "red"}),
            ("/v1/maintenance/report", {"all": "1"}),
        ):
            refused = http.get(path, params=params)
            assert refused.status_code == 422, (path, refused.text)
            assert refused.headers["content-type"].startswith("application/problem+json")
            assert "unknown parameter" in refused.json()["detail"], refused.text
        # The console's pages keep their query strings (the browser's, not the API's).
        assert httpx.get(f"{base}/ui/memories?q=tabs").status_code == 200


@pytest.mark.parametrize("backend", ["pack", "postgres"])
def test_add_stores_a_memory_and_recall_shows_its_id(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = (
        ["--pack", str(tmp_path / "memories")] if backend == "pack" else ["--dsn", request.getfixturevalue("db_dsn")]
    )
    added = _prme_pg("add", "alice prefers tabs", "--user", "alice", "--evidence", "yes, tabs please", *target)
    assert added.returncode == 0, added.stderr
    node_id = uuid.UUID(added.stdout.strip())
    document = json.loads(_prme_pg("add", "alice lives in Berlin", "--user", "alice", "--json", *target).stdout)
    assert document["node"]["content"] == "alice lives in Berlin"
    assert RFC3339_Z.match(document["node"]["created_at"]), "the HTTP API's form of a time"
    recalled = _prme_pg("recall", "tabs", "--user", "alice", *target)
    assert str(node_id) in recalled.stdout.splitlines()[2].split("\t"), recalled.stdout
    hits = json.loads(_prme_pg("recall", "tabs", "--user", "alice", "--json", *target).stdout)["hits"]
    assert hits[0]["id"] == str(node_id) and hits[0]["reinforcement_boost"] == "0.1500"
    assert RFC3339_Z.match(hits[0]["last_reinforced_at"])
