"""The pack's file, lock and transactions: opening a pack, and running one call as one
DuckDB transaction under the pack's lock, retried on write conflicts."""

from __future__ import annotations

import contextlib
import re
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import duckdb

from ...errors import PrmeError

T = TypeVar("T")

DEFAULT_PATH = "./memories"
PACK_FILE = "pack.duckdb"
#: How long one call keeps retrying while another connection conflicts with it.
CONFLICT_TIMEOUT = 10.0


class PackInUseError(PrmeError):
    """Another process has the memory pack open (DuckDB allows one writer process)."""

    def __init__(self, path: Path, detail: str) -> None:
        pid = re.search(r"PID (\d+)", detail)
        holder = f"process {pid.group(1)}" if pid else "another process"
        super().__init__(
            f"the memory pack at {path} is in use by {holder}; a pack can be open in one "
            f"process at a time: close it there, or use another folder ({detail})"
        )
        self.path = path


class PackClosedError(PrmeError):
    """The client was closed; open a new one."""


def sql_directory() -> Path:
    """``sql/duckdb``: the checkout's, or the copy inside the wheel."""
    package = Path(__file__).resolve().parents[2]  # prme_pg/backends/duckdb/connection.py
    for candidate in (package.parent / "sql" / "duckdb", package / "_sql" / "sql" / "duckdb"):
        if candidate.is_dir():
            return candidate
    raise PrmeError(f"no sql/duckdb folder found next to {package}")


class _Retry(Exception):
    """Another connection changed what this call read; run the call again."""


_PACK_LOCKS: dict[Path, threading.Lock] = {}
_PACK_LOCKS_GUARD = threading.Lock()


def _pack_lock(file: Path) -> threading.Lock:
    # One lock per pack file in this process: two clients of one pack share DuckDB's
    # database instance, and their calls must not interleave either.
    with _PACK_LOCKS_GUARD:
        return _PACK_LOCKS.setdefault(file, threading.Lock())


def _utc_now() -> datetime:
    return datetime.now(UTC)


class PackConnection:
    """A memory pack's DuckDB connection and lock; every capability's work runs through
    :meth:`run` (one transaction) or :meth:`read` (one statement). :class:`DuckDBBackend`
    installs the pack's tables and rules on it (:meth:`_install`)."""

    def __init__(
        self,
        path: str | Path = DEFAULT_PATH,
        *,
        clock: Callable[[], datetime] | None = None,
        new_id: Callable[[], uuid.UUID] | None = None,
    ) -> None:
        self.path = Path(path).expanduser().absolute()
        self.file = self.path / PACK_FILE
        self._clock = clock or _utc_now
        self._new_id = new_id or uuid.uuid4
        if self.path.exists() and not self.path.is_dir():
            raise PrmeError(f"{self.path} is not a folder; a memory pack is a folder")
        self.path.mkdir(parents=True, exist_ok=True)
        self.lock = _pack_lock(self.file.resolve())
        try:
            self._con: duckdb.DuckDBPyConnection | None = duckdb.connect(str(self.file))
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise PackInUseError(self.path, str(exc)) from exc
            # Not a DuckDB file, unreadable, a newer DuckDB's format: the pack is unavailable.
            raise PrmeError(f"cannot open the memory pack file {self.file}: {exc}") from exc
        try:
            # This connection's own setting: no progress bar (it would print to the terminal
            # during a long statement, and watching for one costs every statement time: a
            # confirmation ran about 20 % faster without it on the loaded test machine).
            self._con.execute("SET enable_progress_bar = false")
            self._install()
        except BaseException:
            self.close()
            raise

    def _install(self) -> None:
        """Create or upgrade the pack's tables and rules, on opening: :class:`DuckDBBackend`'s,
        which knows every capability."""

    def close(self) -> None:
        with self.lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    @property
    def closed(self) -> bool:
        return self._con is None

    # -- transactions --

    def run(self, work: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Run ``work`` as one transaction under the pack lock; retry it on write conflicts.

        The lock is held until COMMIT or ROLLBACK completes, so a call that started
        always finishes: nothing (not even an async caller's cancellation) can leave
        it half done.
        """
        with self.lock:
            con = self._con
            if con is None:
                raise PackClosedError(f"the memory pack at {self.path} is closed")
            delay, deadline = 0.001, time.monotonic() + CONFLICT_TIMEOUT
            while True:
                con.execute("BEGIN TRANSACTION")
                try:
                    result = work(con)
                    con.execute("COMMIT")
                    return result
                except (duckdb.TransactionException, _Retry) as exc:
                    self._rollback(con)
                    if not isinstance(exc, _Retry) and "onflict" not in str(exc):
                        raise  # a transaction error that is not a write conflict
                    if time.monotonic() >= deadline:
                        raise PrmeError(
                            f"another connection kept writing the same rows of the memory pack at "
                            f"{self.path} for {CONFLICT_TIMEOUT:g} s; nothing was changed"
                        ) from exc
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
                except BaseException:
                    self._rollback(con)
                    raise

    def read(self, work: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Run ``work``, which reads with one statement, under the pack lock, without BEGIN and
        COMMIT (the statement is its own transaction): recall's hot path."""
        with self.lock:
            con = self._con
            if con is None:
                raise PackClosedError(f"the memory pack at {self.path} is closed")
            return work(con)

    @staticmethod
    def _rollback(con: duckdb.DuckDBPyConnection) -> None:
        with contextlib.suppress(duckdb.Error):  # a failed COMMIT has already rolled back
            con.execute("ROLLBACK")
