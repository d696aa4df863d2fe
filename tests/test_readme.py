"""Every fenced example in README.md runs as written (issue 20, item 2).

The blocks are found, not listed: a block added to the README is run by the next test run.
A fence's info string is its language and then attributes, space-separated (GitHub shows
the first word as the language and ignores the rest):

- ``python``: run twice with the virtual environment's Python, in a fresh copy of the
  repository: once with no ``PRME_DSN`` (the example then uses a memory pack in the copy)
  and once with ``PRME_DSN`` naming a migrated throwaway PostgreSQL database;
  ``backend=pack`` or ``backend=postgres`` runs only one of the two;
- ``sql``: run by ``psql -X -v ON_ERROR_STOP=1 -f`` on a migrated throwaway database
  (psql variables such as ``\\gset`` work as they do for a reader);
- ``sh``: run by ``bash -e -u -o pipefail`` in a fresh copy of the repository, with the
  virtual environment first on PATH (what ``. .venv/bin/activate`` does) and ``PRME_DSN``
  naming a migrated throwaway database (``db=empty``: a database with nothing in it); the
  one change made to the text is that port 8080 becomes a free port, since the machine may
  be shared; whatever the block leaves running is stopped afterwards;
- ``text``: shown, never run;
- ``norun`` (an attribute): the block is the set-up itself (``make demo``, ``make check``,
  an install, an agent's configuration); such blocks are counted against :data:`NOT_RUN`, so one more needs a
  deliberate change here.

A copy of the repository is "a fresh clone": the files git knows (committed or not,
ignored ones left out), so a pack or ``.venv`` of the working tree is not there.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from prme_pg import testing

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
VENV_BIN = Path(sys.executable).parent

RUNNABLE = ("python", "sql", "sh")
INERT = ("text",)
#: The first line of every block marked norun: the set-up commands the rest assumes.
NOT_RUN = {
    "make demo",
    "make check",
    "python3 -m venv .venv && .venv/bin/pip install '.[http]'",
    "pip install '.[mcp]'",  # installs, then servers an agent starts and talks to over stdio
}
TIMEOUT = 300

_FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    line: int
    language: str
    attributes: frozenset[str]
    body: str

    @property
    def first_line(self) -> str:
        return re.sub(r"\s+#.*$", "", self.body.strip().splitlines()[0]).strip()

    @property
    def name(self) -> str:
        return f"README.md:{self.line}:{self.language}"

    def attribute(self, key: str) -> str | None:
        prefix = f"{key}="
        return next((a[len(prefix) :] for a in self.attributes if a.startswith(prefix)), None)


def readme_blocks(text: str | None = None) -> list[Block]:
    text = README.read_text(encoding="utf-8") if text is None else text
    blocks = []
    for match in _FENCE.finditer(text):
        words = match["info"].split()
        line = text.count("\n", 0, match.start()) + 1
        blocks.append(Block(line, words[0] if words else "", frozenset(words[1:]), match["body"]))
    return blocks


def _runnable(language: str) -> list[Block]:
    return [b for b in readme_blocks() if b.language == language and "norun" not in b.attributes]


def test_the_extractor_reads_languages_and_attributes() -> None:
    blocks = readme_blocks("intro\n```sh norun db=empty\nmake demo  # set up\n```\n\n```text\nx\n```\n")
    assert [(b.line, b.language, sorted(b.attributes)) for b in blocks] == [
        (2, "sh", ["db=empty", "norun"]),
        (6, "text", []),
    ]
    assert blocks[0].first_line == "make demo" and blocks[0].attribute("db") == "empty"


def test_every_block_has_a_known_language_and_the_norun_ones_are_the_set_up() -> None:
    blocks = readme_blocks()
    unknown = [b.name for b in blocks if b.language not in RUNNABLE + INERT]
    assert not unknown, f"give these blocks a language this test runs or shows ({RUNNABLE + INERT}): {unknown}"
    assert {b.first_line for b in blocks if "norun" in b.attributes} == NOT_RUN
    assert sum("norun" in b.attributes for b in blocks) == len(NOT_RUN)
    assert len([b for b in blocks if b.language in RUNNABLE and "norun" not in b.attributes]) >= 6


# -- what a reader has: a fresh copy, the virtual environment, a database -------------------


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """The repository as a fresh clone has it (the files git tracks or would, not the ignored)."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    target = tmp_path / "prme-pg"
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet staged is listed too
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.fixture
def empty_dsn(pg_server: testing.Server) -> Iterator[str]:
    name = testing.create_database(pg_server, prefix="prme_readme")
    yield pg_server.dsn_for(name)
    testing.drop_database(pg_server, name)


def _environment(dsn: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PRME_DSN", "DATABASE_URL", "VIRTUAL_ENV")}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(VENV_BIN.parent)
    if dsn is not None:
        env["PRME_DSN"] = dsn
    return env


def _run(command: list[str], cwd: Path, env: dict[str, str], block: Block) -> None:
    """Run a block's command in its own process group; stop whatever it leaves behind.

    Output goes to a file, not a pipe: a server the block started with ``&`` keeps a pipe
    open after the block has failed, and reading it would wait for the server.
    """
    log = cwd / "readme_example.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            output.write(f"\n(timed out after {TIMEOUT} s)\n")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)  # a server started with & in the block
            process.wait()
    text = log.read_text(errors="replace")
    assert process.returncode == 0, f"{block.name} failed as written (exit {process.returncode}):\n{text}"


def _name(block: Block) -> str:
    return f"line{block.line}"


_PYTHON_RUNS = [
    pytest.param(block, backend, id=f"{_name(block)}-{backend}")
    for block in _runnable("python")
    for backend in ("pack", "postgres")
    if block.attribute("backend") in (None, backend)
]


@pytest.mark.parametrize(("block", "backend"), _PYTHON_RUNS)
def test_python_example(block: Block, backend: str, clone: Path, db_dsn: str) -> None:
    script = clone / "readme_example.py"
    script.write_text(block.body, encoding="utf-8")
    _run([sys.executable, str(script)], clone, _environment(db_dsn if backend == "postgres" else None), block)
    if backend == "pack":
        assert (clone / "memories" / "pack.duckdb").exists(), "the example without PRME_DSN used a memory pack"


@pytest.mark.parametrize("block", _runnable("sql"), ids=_name)
def test_sql_example(block: Block, clone: Path, db_dsn: str) -> None:
    script = clone / "readme_example.sql"
    script.write_text(block.body, encoding="utf-8")
    for _ in range(2):  # as a reader may: the block runs again on the same database (issue 33)
        _run(["psql", "-X", "-v", "ON_ERROR_STOP=1", "-f", str(script), db_dsn], clone, _environment(db_dsn), block)


@pytest.mark.parametrize("block", _runnable("sh"), ids=_name)
def test_shell_example(block: Block, clone: Path, db_dsn: str, empty_dsn: str) -> None:
    dsn = {"empty": empty_dsn, None: db_dsn}[block.attribute("db")]
    body = block.body.replace("8080", str(testing.free_port()))
    _run(["bash", "-e", "-u", "-o", "pipefail", "-c", body], clone, _environment(dsn), block)
