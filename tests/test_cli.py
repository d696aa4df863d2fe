"""The prme-pg command line beyond migrations: demo, token, worker, serve usage."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from prme_pg import MemoryClient, cli
from prme_pg.tokens import parse_token


def test_demo_runs_twice_on_the_same_pack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pack = tmp_path / "memories"
    assert cli.main(["demo", str(pack)]) == 0
    out = capsys.readouterr().out
    assert "The confirmation counted once" in out
    assert "the journal verifies" in out
    assert cli.main(["demo", str(pack)]) == 0, "reopening the pack keeps working"


def test_token_create_and_revoke(
    db_dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli.main(["token", "create", "--dsn", db_dsn, "--user", "alice", "--label", "laptop"]) == 0
    token = capsys.readouterr().out.strip()
    parsed = parse_token(token)
    assert parsed is not None
    assert parsed.user_id == "alice"
    with MemoryClient(db_dsn) as memory:
        assert memory.authenticate_api_token("alice", parsed.sha256)
        assert not memory.authenticate_api_token("bob", parsed.sha256)
    monkeypatch.setattr(sys, "stdin", io.StringIO(token))  # never on the command line (issue 17)
    assert cli.main(["token", "revoke", "--dsn", db_dsn]) == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO(token))
    assert cli.main(["token", "revoke", "--dsn", db_dsn, "--json"]) == 1
    assert '"revoked": false' in capsys.readouterr().out
    with MemoryClient(db_dsn) as memory:
        assert not memory.authenticate_api_token("alice", parsed.sha256)


def test_token_create_refuses_a_bad_owner(db_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["token", "create", "--dsn", db_dsn, "--user", " alice"]) == 1
    assert "user_id" in capsys.readouterr().err


def test_worker_until_idle_exits(db_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["worker", "--dsn", db_dsn, "--until-idle", "--json"]) == 0
    assert '"finished": 0' in capsys.readouterr().out


def test_commands_without_a_database_are_usage_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PRME_DSN", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    for argv in (["serve"], ["worker"], ["token", "create", "--user", "a"], ["token"]):
        assert cli.main(argv) == 2, argv
    capsys.readouterr()
