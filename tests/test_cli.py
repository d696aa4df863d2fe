"""The prme-pg command line beyond migrations: demo, token, worker, serve usage."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from prme_pg import MemoryClient, cli, testing
from prme_pg.tokens import parse_token

from .test_maintenance_surfaces import _seed as _seed_maintenance


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
    # A value the engine refuses is a usage error, said in the flag the user typed.
    assert cli.main(["token", "create", "--dsn", db_dsn, "--user", " alice"]) == 2
    err = capsys.readouterr().err
    assert "--user must be" in err and "user_id" not in err


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


# -- issue 20: the first hour of a new user ------------------------------------------------


def _prme_pg(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed command, as a user runs it: a real process, output piped."""
    command = [sys.executable, "-m", "prme_pg.cli", *args]
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, check=False, env=environment, timeout=120
    )


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_messages_keep_square_brackets(tmp_path: Path, db_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """User input and hints reach the user verbatim: rich markup never eats [x] or [bold]."""
    pack = tmp_path / "[x]" / "memories"
    assert cli.main(["demo", str(pack)]) == 0
    assert f"Opened the memory pack at {pack}" in capsys.readouterr().out
    assert cli.main(["curate", "--dsn", db_dsn, "--user", "alice", "[bold]abc"]) == 2
    assert "got '[bold]abc'" in capsys.readouterr().err
    assert cli.main(["enqueue", "add_node", "--user", "alice", "--pack", str(pack), "--payload", '{"[red]x": 1}']) == 2
    assert "unknown payload field for add_node: [red]x" in capsys.readouterr().err
    with MemoryClient(db_dsn) as memory:
        memory.add_node("[bold]tabs[/bold] over [spaces]", user_id="alice")
    assert cli.main(["recall", "tabs", "--dsn", db_dsn, "--user", "alice"]) == 0
    assert "[bold]tabs[/bold] over [spaces]" in capsys.readouterr().out


def test_serve_without_the_http_extra_names_it(tmp_path: Path) -> None:
    """The advice keeps its brackets: pip install '.[http]'."""
    blocker = tmp_path / "uvicorn.py"
    blocker.write_text("raise ImportError('No module named uvicorn')\n")
    result = _prme_pg("serve", "--dsn", "postgresql://nobody@127.0.0.1:1/x", env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 2
    assert "pip install '.[http]'" in _one_error_line(result)


def test_no_traceback_for_an_unavailable_pack(tmp_path: Path) -> None:
    missing = _prme_pg("demo", "/proc/nope")
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert "Could not open the memory pack at /proc/nope: No such file or directory" in missing.stdout
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "pack.duckdb").write_text("not a database")
    result = _prme_pg("demo", str(damaged))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "cannot open the memory pack file" in result.stdout
    enqueue = _prme_pg("enqueue", "add_node", "--user", "a", "--pack", "/proc/nope/memories", stdin='{"content": "x"}')
    assert enqueue.returncode == 1
    assert "/proc/nope" in _one_error_line(enqueue)


def test_errors_speak_in_flags(db_dsn: str) -> None:
    limit = _prme_pg("recall", "x", "--dsn", db_dsn, "--user", "alice", "--limit", "0")
    assert limit.returncode == 2
    assert _one_error_line(limit) == "error: --limit must be between 1 and 1000"
    items = _prme_pg("snapshot", "publish", "--dsn", db_dsn, "--user", "alice", "--scope", "work", "--max-items", "0")
    assert items.returncode == 2 and "--max-items" in _one_error_line(items)
    batch = _prme_pg("worker", "--dsn", db_dsn, "--batch", "0")
    assert batch.returncode == 2
    assert "argument --batch: must be between 1 and 1000, got 0" in _one_error_line(batch)
    missing = _prme_pg("recall", "x", "--dsn", db_dsn)
    assert missing.returncode == 2
    assert "the following arguments are required: --user" in _one_error_line(missing)


def test_one_owner_flag_with_a_deprecated_alias(tmp_path: Path) -> None:
    parser = cli.build_parser()
    helps = _every_help(parser)
    assert all("--user-id" not in text for text in helps.values())
    owner_commands = [name for name, text in helps.items() if "--user USER" in text]
    assert {"enqueue", "hook", "recall", "maintain", "curate", "token create", "snapshot publish"} <= set(
        owner_commands
    )
    pack = str(tmp_path / "memories")
    old = _prme_pg("enqueue", "add_node", "--user-id", "alice", "--pack", pack, stdin='{"content": "x"}')
    assert old.returncode == 0, old.stderr
    assert "--user-id is deprecated; use --user" in old.stderr
    hook = '{"session_id": "s1", "items": [{"type": "message", "role": "user", "text": "I prefer tabs"}]}'
    assert _prme_pg("hook", "--user-id", "alice", "--pack", pack, stdin=hook).returncode == 0
    both = _prme_pg("enqueue", "add_node", "--user", "a", "--user-id", "a", "--pack", pack, stdin='{"content": "x"}')
    assert both.returncode == 2


def _every_help(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, str]:
    """Each (sub)command's --help text, by command path ("" is prme-pg itself)."""
    found = {prefix: parser.format_help()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found.update(_every_help(child, f"{prefix} {name}".strip()))
    return found


def _every_option(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _every_option(child, f"{prefix} {name}".strip())
        elif action.option_strings and action.help != argparse.SUPPRESS:
            required = action.required or any(
                group.required and action in group._group_actions for group in parser._mutually_exclusive_groups
            )
            if not required:  # a required option has no default to show
                yield prefix, action


def test_every_option_says_its_default_in_help() -> None:
    parser = cli.build_parser()
    formatter = cli._HelpFormatter("prme-pg")
    checked = 0
    for command, action in _every_option(parser):
        if isinstance(
            action,
            argparse._HelpAction | argparse._VersionAction | argparse._StoreTrueAction | argparse._StoreFalseAction,
        ):
            continue  # an on/off flag is off unless given
        text = formatter._get_help_string(action) or ""
        assert "default" in text, f"prme-pg {command} {action.option_strings[0]}: {text!r}"
        checked += 1
    assert checked > 20
    serve = _every_help(parser)["serve"]
    assert "(default: 127.0.0.1)" in serve and "(default: 8080)" in serve


def test_status_fails_while_migrations_are_pending(pg_server: testing.Server, db_dsn: str) -> None:
    name = testing.create_database(pg_server, prefix="prme_empty")
    try:
        empty = pg_server.dsn_for(name)
        pending = _prme_pg("status", "--dsn", empty)
        assert pending.returncode == 1, pending.stderr
        assert "migration(s) pending: run prme-pg migrate" in pending.stdout
        recall = _prme_pg("recall", "x", "--dsn", empty, "--user", "alice")
        assert recall.returncode == 1
        line = _one_error_line(recall)
        assert 'schema "prme" does not exist' in line and "run prme-pg migrate" in line
    finally:
        testing.drop_database(pg_server, name)
    current = _prme_pg("status", "--dsn", db_dsn)
    assert current.returncode == 0 and "schema is current" in current.stdout


def test_piped_tables_are_plain_lines_with_whole_ids(db_dsn: str) -> None:
    ids = _seed_maintenance(db_dsn)
    with MemoryClient(db_dsn) as memory:
        memory.add_node("alice prefers tabs " * 12, user_id="alice")
    result = _prme_pg("recall", "tabs", "--dsn", db_dsn, "--user", "alice", "--limit", "5")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[:2] == ["recall for alice", "rank\tscore\tid\tscope\tcontent"]
    assert ("alice prefers tabs " * 12).strip() in [line.split("\t")[4] for line in lines[2:-1]]
    report = _prme_pg("maintain", "--report", "--dsn", db_dsn, "--user", "alice")
    assert report.returncode == 0 and "…" not in report.stdout
    rows = report.stdout.splitlines()[2:-1]
    assert {uuid.UUID(line.split("\t")[0]) for line in rows} == {ids["tabs"], ids["berlin"], ids["overdue"]}


def test_narrow_terminal_never_cuts_ids(db_dsn: str) -> None:
    """At 80 columns a table that cannot show its ids whole falls back to plain lines."""
    terminal = {"TTY_COMPATIBLE": "1", "COLUMNS": "80", "NO_COLOR": "1"}
    ids = _seed_maintenance(db_dsn)
    report = _prme_pg("maintain", "--report", "--dsn", db_dsn, "--user", "alice", env=terminal)
    assert report.returncode == 0, report.stderr
    assert "…" not in report.stdout, report.stdout
    assert all(str(ids[name]) in report.stdout for name in ("tabs", "berlin", "overdue")), report.stdout
    patch = _prme_pg("maintain", "--dsn", db_dsn, "--user", "alice", env=terminal)
    assert patch.returncode == 0, patch.stderr
    assert "…" not in patch.stdout and "update_stability\tPrefers tabs over spaces" in patch.stdout, patch.stdout
    hint = next(line for line in patch.stdout.splitlines() if line.startswith("written for review"))
    assert " --select op_" in hint and hint.split()[-2] == "--select", "the command to copy is on one line"
    uuid.UUID(hint.split("prme-pg curate ")[1].split()[0])
    status = _prme_pg("status", "--dsn", db_dsn, env={**terminal, "COLUMNS": "120"})
    assert "0001_initial.sql" in status.stdout and "┃" in status.stdout, "a table that fits stays a table"
    assert "…" not in status.stdout, status.stdout


def test_queue_status_lists_rejected_records_with_reasons(db_dsn: str, tmp_path: Path) -> None:
    pack = tmp_path / "memories"
    node_id = str(uuid.uuid4())  # a node that does not exist: the worker rejects it as not found
    queued = _prme_pg(
        "enqueue", "reinforce", "--user", "alice", "--pack", str(pack), stdin=json.dumps({"node_id": node_id})
    )
    assert queued.returncode == 0, queued.stderr
    operation_id = queued.stdout.strip()
    assert _prme_pg("sync", "--once", "--pack", str(pack), "--dsn", db_dsn).returncode == 0
    assert _prme_pg("worker", "--until-idle", "--dsn", db_dsn).returncode == 0
    synced = _prme_pg("sync", "--once", "--pack", str(pack), "--dsn", db_dsn)
    assert synced.returncode == 0, synced.stderr
    assert "polling accepted: 1/1" in synced.stderr, "piped, sync still says what it does"
    listed = _prme_pg("queue", "status", "--rejected", "--pack", str(pack))
    assert listed.returncode == 0
    row = next(line.split("\t") for line in listed.stdout.splitlines() if operation_id in line)
    assert row[:4] == ["outbox", operation_id, "alice", "reinforce"]
    assert "not_found" in row[5]
    document = json.loads(_prme_pg("queue", "status", "--rejected", "--json", "--pack", str(pack)).stdout)
    assert [r["record_id"] for r in document["rejected"]] == [operation_id]


def test_the_second_demo_narrates_its_own_memory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pack = tmp_path / "memories"
    assert cli.main(["demo", str(pack)]) == 0
    first = capsys.readouterr().out
    assert "This memory has 2 records, one per change" in first and "earlier runs" not in first
    assert cli.main(["demo", str(pack)]) == 0
    second = capsys.readouterr().out
    assert "This memory has 2 records, one per change" in second
    assert "earlier runs" not in second, "the demo is idempotent: a second run adds nothing (issue 33)"
    with MemoryClient(pack) as memory:
        assert len(memory.recall(None, user_id="demo")) == 1
    assert "rebuilding this memory from its 2 journal records" in second
