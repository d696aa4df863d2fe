"""A maildir-style spool: durable named JSON documents in a folder, moved between state folders.

Why a folder of files and not a table in the pack's DuckDB file: DuckDB allows one
writing process per database file, and an agent's stop hook must never wait for the
sync worker (or another client) that holds the pack open. Plain files need no such
lock, so any number of processes can add documents at once while one worker moves them.

Layout (every folder mode 0700, every file 0600)::

    <root>/tmp/               documents being written (never read as data)
    <root>/<state>/<name>.json  one document per name, in exactly one state folder
    <root>/.lock              serialises the short "check, then rename" steps

How each step stays safe:

- ``put`` writes ``tmp/``, flushes and fsyncs the file, then renames it into the
  state folder and fsyncs that folder. A reader never sees a torn file: ``rename`` is
  atomic, so a file in a state folder is always complete.
- Names are unique across all states. ``put`` and ``move`` take an exclusive
  ``flock`` on ``.lock`` only around "check every state, then rename" (microseconds;
  the fsyncs happen outside it), so two concurrent ``put`` calls of one name cannot
  both win, and a name moving between two folders is never missed by the check.
- ``move`` is a rename from one state folder to another. If the name is no longer in
  ``from_state`` (someone else moved it) it raises :class:`StateMismatch`, so of two
  movers exactly one wins. A rewritten document is first written to ``tmp/`` and
  fsynced, then renamed over the old file in ``from_state``, then the file is renamed
  into ``to_state``. After a crash between those two renames the record sits in its
  old state with its new content: the document runs ahead of its state, never behind,
  so a caller whose state handlers are idempotent simply redoes the transition.
- Reads take no lock; ``get`` retries under the lock only when a lock-free pass found
  nothing (the name may have been between folders).
- Only regular files named like documents are documents: ``names`` and ``counts`` skip
  anything else in a state folder (``._x.json`` from a file manager, a folder, a
  symlink), and reads open with ``O_NOFOLLOW``, so a symlink planted in a state folder
  is never followed (a symlinked "document" reads as unreadable, never as its target).
  The spool's own folders must be directories, not symlinks (checked with ``lstat`` when
  the spool is opened), and ``.lock`` is opened with ``O_NOFOLLOW``: a symlink planted in
  place of either is :class:`UnsafeSpoolPath`, never a write outside the spool.
- A document that does not parse (not UTF-8, not a JSON object, nested too deeply for
  the parser) raises ValueError; one the process may not read raises the OSError
  (PermissionError ...). Callers set the first aside and skip the second: neither
  stops a worker.

Names should start with a time-ordered id (see :func:`time_ordered_uuid`) so that
sorting by name is enqueue order.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import stat
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prme_pg.errors import PrmeError

__all__ = ["Spool", "StateMismatch", "decode_document", "process_alive", "time_ordered_uuid"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_STATE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_RESERVED_STATES = frozenset({"tmp"})
_SUFFIX = ".json"
_WRITERS = 16  # threads writing (and fsyncing) the documents of one move_many


class UnsafeSpoolPath(PrmeError):
    """A spool folder or lock file is a symlink (or not a folder): it would lead writes out of
    the pack, so the spool refuses it (issue 32, item 8)."""


def check_real_folder(folder: Path) -> None:
    """:class:`UnsafeSpoolPath` unless ``folder`` is missing or a directory itself (lstat: a
    symlink to a directory is refused)."""
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        what = "a symlink" if stat.S_ISLNK(mode) else "not a directory"
        raise UnsafeSpoolPath(
            f"{folder} is {what}, not a folder of its own: prme-pg writes only inside the pack -- "
            "move it away (the folder is made again) or put the pack where it belongs"
        )


def open_lock_file(path: Path) -> int:
    """``path`` opened for a lock (created 0600), never through a symlink: :class:`UnsafeSpoolPath`."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise UnsafeSpoolPath(
            f"{path} is a symlink: prme-pg does not follow a lock file out of the pack -- remove it"
        ) from None


class StateMismatch(PrmeError, LookupError):
    """A spool document is not in the state a mover expected (someone else moved it, or it never existed)."""

    def __init__(self, name: str, expected: str, actual: str | None) -> None:
        where = f"in state {actual!r}" if actual is not None else "absent"
        super().__init__(f"spool document {name!r} is not in state {expected!r} (it is {where})")
        self.name = name
        self.expected = expected
        self.actual = actual


_uuid_lock = threading.Lock()
_uuid_last_ms = 0
_uuid_counter = 0


def time_ordered_uuid() -> uuid.UUID:
    """A UUIDv7 (RFC 9562): 48-bit Unix milliseconds, then a 12-bit counter and 62 random bits.

    Ids made by one process sort in creation order even within one millisecond (the
    counter, seeded randomly each millisecond, breaks ties); ids from different processes
    sort by millisecond.
    """
    global _uuid_last_ms, _uuid_counter
    with _uuid_lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms > _uuid_last_ms:
            _uuid_last_ms = now_ms
            _uuid_counter = secrets.randbits(11)  # leave headroom for increments
        else:
            _uuid_counter += 1
            if _uuid_counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                _uuid_last_ms += 1
                _uuid_counter = 0
        ms, counter = _uuid_last_ms, _uuid_counter
    value = (ms & (2**48 - 1)) << 80
    value |= 0x7 << 76  # version 7
    value |= counter << 64
    value |= 0b10 << 62  # RFC 4122 variant
    value |= secrets.randbits(62)
    return uuid.UUID(int=value)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _encode(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


class Spool:
    """Durable named JSON documents, each in exactly one state folder, moved by atomic renames.

    Safe for several processes (and threads) at once. See the module docstring for the design.
    """

    def __init__(self, root: str | Path, states: Sequence[str], *, create: bool = True) -> None:
        """``create=False`` opens the spool read-only: no folder is made, and a missing one reads as empty."""
        self.root = Path(root)
        self.states: tuple[str, ...] = tuple(states)
        if not self.states:
            raise ValueError("a spool needs at least one state")
        for state in self.states:
            if not _STATE.match(state) or state in _RESERVED_STATES:
                raise ValueError(f"invalid spool state name: {state!r}")
        if len(set(self.states)) != len(self.states):
            raise ValueError("spool state names must be distinct")
        self._tmp = self.root / "tmp"
        # Each folder is checked before and after it is made: a planted symlink (outbox/pending
        # -> elsewhere) would otherwise take every document out of the pack.
        for folder in (self.root, self._tmp, *(self.root / s for s in self.states)):
            check_real_folder(folder)
            if create:
                folder.mkdir(mode=0o700, parents=True, exist_ok=True)
                check_real_folder(folder)
        self._lock_path = self.root / ".lock"
        self._thread_lock = threading.Lock()  # flock is per open file; serialise this object's threads too

    # -- paths and locking ---------------------------------------------------------

    def _path(self, name: str, state: str) -> Path:
        return self.root / state / (name + _SUFFIX)

    def _check_name(self, name: str) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"invalid spool document name: {name!r}")

    def _check_state(self, state: str) -> None:
        if state not in self.states:
            raise ValueError(f"unknown spool state {state!r}; states are {', '.join(self.states)}")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._thread_lock:
            fd = open_lock_file(self._lock_path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # closing releases the flock

    def _write_tmp(self, name: str, document: Mapping[str, Any]) -> Path:
        """Write a complete, fsynced copy of the document under tmp/ and return its path."""
        data = _encode(document)
        path = self._tmp / f"{name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        os.close(fd)
        return path

    def _state_of(self, name: str) -> str | None:
        for state in self.states:
            if self._path(name, state).exists():
                return state
        return None

    # -- public API ----------------------------------------------------------------

    def put(self, name: str, document: Mapping[str, Any], state: str) -> None:
        """Add a new document in ``state``; durable when this returns.

        Raises FileExistsError if ``name`` exists in any state (also when another
        process puts the same name at the same moment: exactly one of them wins).
        """
        self._check_name(name)
        self._check_state(state)
        tmp = self._write_tmp(name, document)
        try:
            with self._locked():
                existing = self._state_of(name)
                if existing is not None:
                    raise FileExistsError(f"spool document {name!r} already exists in state {existing!r}")
                os.rename(tmp, self._path(name, state))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.root / state)

    def get(self, name: str) -> tuple[str, dict[str, Any]] | None:
        """The document's (state, content), or None if no state holds ``name``."""
        self._check_name(name)
        found = self._read_any(name)
        if found is None:
            # Lock-free reads can miss a document that moves between folders mid-scan.
            with self._locked():
                found = self._read_any(name)
        return found

    def _read_any(self, name: str) -> tuple[str, dict[str, Any]] | None:
        for state in self.states:
            try:
                data = _read_regular(self._path(name, state))
            except FileNotFoundError:
                continue
            return state, decode_document(name, data)
        return None

    def move(
        self, name: str, from_state: str, to_state: str, document: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Move ``name`` from ``from_state`` to ``to_state``, optionally rewriting it; durable on return.

        Returns the document now stored. Raises :class:`StateMismatch` if ``name`` is
        not in ``from_state`` (for example another process moved it first).
        """
        self._check_name(name)
        self._check_state(from_state)
        self._check_state(to_state)
        source, target = self._path(name, from_state), self._path(name, to_state)
        tmp = self._write_tmp(name, document) if document is not None else None
        try:
            with self._locked():
                if not source.exists():
                    raise StateMismatch(name, from_state, self._state_of(name))
                if tmp is not None:
                    os.rename(tmp, source)  # new content first: the document may run ahead of its state
                if source != target:
                    os.rename(source, target)
        except BaseException:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.root / to_state)
        if from_state != to_state:
            _fsync_dir(self.root / from_state)
        if document is not None:
            return dict(document)
        return decode_document(name, _read_regular(target))

    def move_many(self, moves: Sequence[tuple[str, Mapping[str, Any] | None]], from_state: str, to_state: str) -> None:
        """Move several documents at once, like :meth:`move`, with one fsync per folder for the batch.

        All or nothing up front: if any name is not in ``from_state``, :class:`StateMismatch`
        is raised before anything moves. Durable when this returns.
        """
        self._check_state(from_state)
        self._check_state(to_state)
        for name, _ in moves:
            self._check_name(name)
        if len({name for name, _ in moves}) != len(moves):
            raise ValueError("move_many got the same name twice")
        tmps: list[Path | None] = [None] * len(moves)
        try:
            rewrites = [(i, name, document) for i, (name, document) in enumerate(moves) if document is not None]
            if len(rewrites) == 1:
                i, name, document = rewrites[0]
                tmps[i] = self._write_tmp(name, document)
            elif rewrites:
                # fsync waits for the disk and releases the GIL; concurrent fsyncs share the
                # file system's journal commits, so a batch costs a few flushes, not one each.
                with ThreadPoolExecutor(max_workers=min(_WRITERS, len(rewrites))) as pool:
                    futures = [(i, pool.submit(self._write_tmp, name, doc)) for i, name, doc in rewrites]
                failed = [error for _, f in futures if (error := f.exception()) is not None]
                for i, future in futures:
                    if future.exception() is None:
                        tmps[i] = future.result()
                if failed:
                    raise failed[0]
            with self._locked():
                for name, _ in moves:
                    if not self._path(name, from_state).exists():
                        raise StateMismatch(name, from_state, self._state_of(name))
                for (name, _), tmp in zip(moves, tmps, strict=True):
                    source = self._path(name, from_state)
                    if tmp is not None:
                        os.rename(tmp, source)
                    if from_state != to_state:
                        os.rename(source, self._path(name, to_state))
        except BaseException:
            for tmp in tmps:
                if tmp is not None:
                    tmp.unlink(missing_ok=True)
            raise
        if moves:
            _fsync_dir(self.root / to_state)
            if from_state != to_state:
                _fsync_dir(self.root / from_state)

    def path(self, name: str, state: str) -> Path:
        """Where ``name`` lives when it is in ``state`` (for reading a document that does not parse)."""
        self._check_name(name)
        self._check_state(state)
        return self._path(name, state)

    def read_bytes(self, name: str, state: str) -> bytes:
        """The raw bytes of ``name`` in ``state`` (for a document that does not parse), never through a symlink.

        FileNotFoundError if it is not there; ValueError if it is not a regular file.
        """
        return _read_regular(self.path(name, state))

    def _entries(self, state: str) -> list[os.DirEntry[str]]:
        """The documents of ``state``: regular files (not symlinks) named ``<valid name>.json``."""
        try:
            with os.scandir(self.root / state) as entries:
                return [
                    e
                    for e in entries
                    if e.name.endswith(_SUFFIX) and _NAME.match(e.name[: -len(_SUFFIX)]) and _is_file(e)
                ]
        except FileNotFoundError:  # a read-only spool whose folder was never made
            return []

    def names(self, state: str) -> list[str]:
        """Names in ``state``, sorted (enqueue order when names start with a time-ordered id).

        Anything else in the folder (other names, folders, symlinks) is not a document and is skipped.
        """
        self._check_state(state)
        return sorted(e.name[: -len(_SUFFIX)] for e in self._entries(state))

    def counts(self) -> dict[str, tuple[int, datetime | None]]:
        """Per state: how many documents, and the oldest file modification time (UTC) or None."""
        result: dict[str, tuple[int, datetime | None]] = {}
        for state in self.states:
            count, oldest = 0, None
            for entry in self._entries(state):
                try:
                    mtime = entry.stat(follow_symlinks=False).st_mtime
                except FileNotFoundError:  # moved away since the listing
                    continue
                count += 1
                oldest = mtime if oldest is None else min(oldest, mtime)
            result[state] = (count, datetime.fromtimestamp(oldest, UTC) if oldest is not None else None)
        return result

    def sweep_tmp(self) -> int:
        """Remove leftovers in tmp/ from writers that died mid-write; returns how many were removed.

        A tmp file's name carries its writer's pid; files of live processes are left alone.
        """
        removed = 0
        with os.scandir(self._tmp) as entries:
            for entry in entries:
                parts = entry.name.rsplit(".", 3)
                if len(parts) != 4 or not parts[1].isdigit():
                    continue
                pid = int(parts[1])
                if pid == os.getpid() or process_alive(pid):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                    removed += 1
        return removed


def decode_document(name: str, data: bytes) -> dict[str, Any]:
    """A stored document's content; ValueError for anything that is not a UTF-8 JSON object.

    That includes text nested too deeply for the JSON parser (its RecursionError): a
    file in a state folder may be anything, and reading one must never crash a worker.
    """
    try:
        document = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError(f"spool document {name!r} is nested too deeply to parse") from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(f"spool document {name!r} is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ValueError(f"spool document {name!r} is not a JSON object")
    return document


def _is_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _read_regular(path: Path) -> bytes:
    """Read a file without following a symlink: ValueError if ``path`` is a symlink or not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError(f"{path.name} is a symlink, not a spool document") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path.name} is not a regular file")
        with os.fdopen(os.dup(fd), "rb") as file:
            return file.read()
    finally:
        os.close(fd)


def process_alive(pid: int) -> bool:
    """Whether a process with this id exists on this host (signal 0; one we may not signal counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
