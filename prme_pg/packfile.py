"""A memory pack's folder, created private (issue 32, item 7; docs/DUCKDB.md).

A pack holds one owner's memories, so a pack folder prme-pg creates is 0700 whatever the
process's umask (``mkdir``'s mode is narrowed by the umask, never widened, so it is set
again). An existing folder's mode is left as it is. The pack's ``pack.duckdb`` is made 0600
by the pack's opening code (``backends/duckdb/connection.py``).

This module imports no DuckDB: the outbox creates the same folder (``prme-pg enqueue`` in an
agent's stop hook, before any pack file exists) and must stay cheap to import.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import PrmeError

__all__ = ["PACK_DIR_MODE", "PACK_FILE_MODE", "pack_folder"]

PACK_DIR_MODE = 0o700
PACK_FILE_MODE = 0o600


def pack_folder(path: str | os.PathLike[str], *, create: bool = True) -> Path:
    """The pack folder as an absolute path; created 0700 (its parents as usual) if ``create``
    and it does not exist yet. :class:`PrmeError` if the path is something other than a folder."""
    folder = Path(path).expanduser().absolute()
    if folder.exists():
        if not folder.is_dir():
            raise PrmeError(f"{folder} is not a folder; a memory pack is a folder")
    elif create:
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir(mode=PACK_DIR_MODE)
        except FileExistsError:  # another process made it first: its mode is its creator's
            return pack_folder(folder, create=False)
        folder.chmod(PACK_DIR_MODE)
    return folder
