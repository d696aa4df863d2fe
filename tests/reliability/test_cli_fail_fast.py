"""Issue 17, items 13 and 14: the CLI fails fast against a database that does not answer, and
``prme-pg token revoke`` never takes the secret on the command line.

Item 14. Before: ``prme-pg serve`` against an unreachable database waited 30 s, logged
five connection errors and a 20-line traceback; token create, recall, snapshot,
maintain and curate waited 30 s too (their pools retried for the whole pool timeout).
Now every command that needs the database opens one connection first, with a 5 s
connect timeout, and ends with one line and exit 1. Two real failures: a port with
nothing listening (refused at once) and a listener that accepts and never answers (the
connect timeout decides).

Item 13. Before: ``prme-pg token revoke TOKEN`` showed the secret in ``ps`` and the shell's
history. Now it reads the token from stdin (without echo on a terminal) or from
``--token-file``, or revokes by the token's owner and id (its sha256, which
``token create`` prints); a token given as an argument is a usage error, not echoed.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from prme_pg import MemoryClient, cli
from prme_pg.tokens import parse_token

ROOT = Path(__file__).resolve().parents[2]
PATCH = "00000000-0000-4000-8000-000000000001"
#: Every command that needs the database, with the rest of its arguments.
COMMANDS = [
    ["status"],
    ["migrate"],
    ["migrate", "--sql"],
    ["token", "create", "--user", "alice"],
    ["recall", "tabs", "--user", "alice"],
    ["snapshot", "publish", "--user", "alice", "--scope", "personal"],
    ["snapshot", "show", "--user", "alice", "--scope", "personal"],
    ["maintain", "--user", "alice"],
    ["curate", PATCH, "--user", "alice"],
    ["worker", "--until-idle"],
]


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """rich wraps at the terminal's width: count lines as printed, not as wrapped."""
    monkeypatch.setenv("COLUMNS", "300")


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port whose listener accepts connections and never says a word (a hung server)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(listener.getsockname()[1])
    stop.set()
    thread.join(5)
    for sock in accepted:
        sock.close()
    listener.close()


def _dsn(port: int) -> str:
    return f"postgresql://nobody@127.0.0.1:{port}/prme"


def _one_line_failure(code: int, err: str, elapsed: float, bound: float) -> None:
    assert code == 1, err
    assert "Traceback" not in err and "WARNING" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert "cannot connect to the database" in err, err
    assert elapsed < bound, f"took {elapsed:.1f} s"


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_every_database_command_fails_fast_in_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    code = cli.main([*argv, "--dsn", _dsn(_dead_port())])
    _one_line_failure(code, capsys.readouterr().err, time.monotonic() - started, 3)


@pytest.mark.parametrize("argv", [COMMANDS[0], COMMANDS[3], COMMANDS[4]], ids=["status", "token", "recall"])
def test_a_server_that_never_answers_is_given_up_after_the_connect_timeout(
    argv: list[str], silent_server: int, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    code = cli.main([*argv, "--dsn", _dsn(silent_server)])
    elapsed = time.monotonic() - started
    _one_line_failure(code, capsys.readouterr().err, elapsed, cli.CONNECT_TIMEOUT + 4)
    assert elapsed >= cli.CONNECT_TIMEOUT - 1  # it did wait for the server, that long and no longer


@pytest.mark.parametrize("server", ["dead", "silent"])
def test_serve_against_an_unreachable_database_exits_1_in_one_line(server: str, silent_server: int) -> None:
    port = _dead_port() if server == "dead" else silent_server
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", "serve", "--dsn", _dsn(port), "--port", str(_dead_port())],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "300"},
        check=False,
    )
    _one_line_failure(run.returncode, run.stderr, time.monotonic() - started, cli.CONNECT_TIMEOUT + 6)
    assert "serving" not in run.stdout  # it never started


# -- token revoke --------------------------------------------------------------------------------


def _create(dsn: str, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    assert cli.main(["token", "create", "--dsn", dsn, "--user", "alice", "--json"]) == 0
    created: dict[str, str] = json.loads(capsys.readouterr().out)
    parsed = parse_token(created["token"])
    assert parsed is not None and created["id"] == parsed.sha256
    return created


def _live(dsn: str, token_id: str) -> bool:
    with MemoryClient(dsn, max_size=1) as memory:
        return memory.authenticate_api_token("alice", token_id)


def test_token_revoke_reads_the_token_from_stdin(
    db_dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    created = _create(db_dsn, capsys)
    monkeypatch.setattr(sys, "stdin", io.StringIO(created["token"] + "\n"))
    assert cli.main(["token", "revoke", "--dsn", db_dsn]) == 0
    assert not _live(db_dsn, created["id"])
    assert capsys.readouterr().out == "revoked\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(created["token"]))
    assert cli.main(["token", "revoke", "--dsn", db_dsn, "--json"]) == 1  # already revoked
    assert json.loads(capsys.readouterr().out) == {"revoked": False}


def test_token_revoke_reads_the_token_from_a_file(
    db_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    created = _create(db_dsn, capsys)
    secret = tmp_path / "token"
    secret.write_text(created["token"] + "\n")
    assert cli.main(["token", "revoke", "--dsn", db_dsn, "--token-file", str(secret)]) == 0
    assert not _live(db_dsn, created["id"])
    assert cli.main(["token", "revoke", "--dsn", db_dsn, "--token-file", str(tmp_path / "missing")]) == 2


def test_token_revoke_by_owner_and_id(db_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    created = _create(db_dsn, capsys)
    assert cli.main(["token", "revoke", "--dsn", db_dsn, "--user", "bob", "--id", created["id"]]) == 1
    assert _live(db_dsn, created["id"])  # another owner's id revokes nothing
    assert cli.main(["token", "revoke", "--dsn", db_dsn, "--user", "alice", "--id", created["id"]]) == 0
    assert not _live(db_dsn, created["id"])
    capsys.readouterr()
    assert cli.main(["token", "revoke", "--dsn", db_dsn, "--user", "alice", "--id", "not-hex"]) == 2
    assert "64 lowercase hex digits" in capsys.readouterr().err


def test_a_token_on_the_command_line_is_refused_and_not_echoed(db_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    created = _create(db_dsn, capsys)
    assert cli.main(["token", "revoke", "--dsn", db_dsn, created["token"]]) == 2
    captured = capsys.readouterr()
    assert "not taken on the command line" in captured.err
    assert created["token"] not in captured.err + captured.out
    assert _live(db_dsn, created["id"])  # nothing revoked


def test_token_revoke_with_nothing_on_stdin_is_a_usage_error(
    db_dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert cli.main(["token", "revoke", "--dsn", db_dsn]) == 2
    assert "no token given" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.StringIO("one\ntwo\n"))
    assert cli.main(["token", "revoke", "--dsn", db_dsn]) == 2
