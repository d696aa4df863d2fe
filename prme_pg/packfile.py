"""Opening a memory pack's file: its permissions when created, and every DuckDB error at open
as one :class:`~prme_pg.errors.PrmeError` (issue 32, items 5 and 7; docs/DUCKDB.md).

* A pack holds one owner's memories, so a pack created here is private: its folder 0700,
  its ``pack.duckdb`` 0600, whatever the process's umask (the outbox inside it was already
  0700/0600). An existing pack's modes are left as they are.
* DuckDB raises several error types at open (``IOException`` for a lock or an unreadable
  file, a bare ``duckdb.Error`` for "Corrupt database file", others for a newer format):
  each is :class:`PackUnreadable`, one line naming the file and what to do, never a
  traceback. :class:`~prme_pg.errors.PackInUseError` (another process has it) stays itself.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from .errors import PrmeError

if TYPE_CHECKING:
    from .backends.duckdb import DuckDBBackend

__all__ = ["PACK_DIR_MODE", "PACK_FILE_MODE", "PackUnreadable", "open_pack", "prepare_pack_folder"]

PACK_DIR_MODE = 0o700
PACK_FILE_MODE = 0o600
_PACK_FILE = "pack.duckdb"


class PackUnreadable(PrmeError):
    """The pack's DuckDB file cannot be opened: damaged, not a pack, or a newer DuckDB's."""


def prepare_pack_folder(path: str | os.PathLike[str]) -> Path:
    """The pack folder as an absolute path, created 0700 if it does not exist yet."""
    folder = Path(path).expanduser().absolute()
    if not folder.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(mode=PACK_DIR_MODE, exist_ok=True)
        folder.chmod(PACK_DIR_MODE)  # mkdir's mode is narrowed by the umask, never widened
    return folder


def open_pack(path: str | os.PathLike[str], **options: Any) -> DuckDBBackend:
    """:class:`DuckDBBackend` over the pack at ``path`` (created private if new), or one line why not."""
    from .backends.duckdb import DuckDBBackend

    folder = prepare_pack_folder(path)
    file = folder / _PACK_FILE
    new = not file.exists()
    try:
        backend = DuckDBBackend(folder, **options)
    except duckdb.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PackUnreadable(
            f"cannot open the memory pack file {file}: {reason} -- it is damaged or not a memory pack: "
            "restore it from a backup, or move it away to start an empty pack"
        ) from None
    if new and file.exists():
        file.chmod(PACK_FILE_MODE)
    return backend
