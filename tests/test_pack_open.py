"""Issue 32, items 5, 7 and 12: opening a memory pack (docs/DUCKDB.md, docs/SECURITY.md).

A damaged pack file is one line, exit 1, from every command that opens it; a new pack is
private (folder 0700, file 0600) whatever the umask; a mistyped URL is never a pack folder,
and a read-only command never creates the pack it was pointed at.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from prme_pg import AsyncMemoryClient, InvalidInput, MemoryClient


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


def _damaged_pack(folder: Path) -> Path:
    with MemoryClient(folder) as memory:
        memory.add_node("tabs, not spaces", user_id="u")
    file = folder / "pack.duckdb"
    with file.open("r+b") as handle:  # a few bytes of each database header
        for offset in (4096 + 8, 8192 + 8):
            handle.seek(offset)
            handle.write(bytes(range(7, 71)))
    return file


@pytest.mark.parametrize("command", ["recall", "serve"])
def test_a_damaged_pack_is_one_line_exit_1(tmp_path: Path, command: str) -> None:
    file = _damaged_pack(tmp_path / "pack")
    args = ("recall", "--pack", str(file.parent), "--user", "u", "tabs")
    if command == "serve":
        args = ("serve", "--pack", str(file.parent), "--port", "1")
    result = _cli(*args)
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert str(file) in lines[0] and "restore it from a backup" in lines[0], lines[0]


def test_a_new_pack_is_private_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        with MemoryClient(tmp_path / "deep" / "pack") as memory:
            memory.add_node("mine alone", user_id="u")
    finally:
        os.umask(previous)
    folder = tmp_path / "deep" / "pack"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "pack.duckdb").stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "target", ["postgresql+psycopg://u@localhost/db", "postgress://u@localhost/db", "http://localhost/db"]
)
def test_a_url_that_is_not_postgresql_is_invalid_input(
    tmp_path: Path, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInput, match="not a PostgreSQL URL"):
        MemoryClient(target)
    with pytest.raises(InvalidInput, match="not a PostgreSQL URL"):
        AsyncMemoryClient(target)
    assert list(tmp_path.iterdir()) == []  # no folder named after the URL


def test_a_read_only_command_refuses_a_pack_that_does_not_exist(tmp_path: Path) -> None:
    typo = tmp_path / "typo" / "path"
    result = _cli("recall", "--pack", str(typo), "--user", "u", "anything")
    assert result.returncode == 1, result
    assert "no memory pack at" in result.stderr and "0 memories" not in result.stdout
    assert not typo.exists() and not typo.parent.exists()


@pytest.mark.parametrize("user", ["f\ng", " alice", "", "x" * 257])
def test_schedule_refuses_an_owner_the_engine_refuses(user: str) -> None:
    """Issue 32, item 11: a job for an owner name the engine refuses would fail every night."""
    result = _cli("schedule", "--database", "prme", "--user", "alice", "--user", user)
    assert result.returncode == 2, result
    assert "user_id must be 1 to 256 characters" in result.stderr and "cron.schedule" not in result.stdout
