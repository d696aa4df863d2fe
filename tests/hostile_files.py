"""Hostile files for the pack's queues: JSON nested past any parser, files the worker may not read.

``unreadable_by_workers(path)`` makes a file that a worker process started with
:func:`worker_env` cannot open. As root that takes more than ``chmod 000`` (root reads
any file): the worker is started without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (the
capabilities that let root ignore file permissions), dropped from its bounding set
before exec, so it meets permissions as any user would. Nothing is simulated: the
worker's open() fails with EACCES.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from pathlib import Path

import psycopg

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2


def deep_json(levels: int, leaf: str = "1") -> str:
    """A JSON text nested ``levels`` arrays deep (levels=3: ``[[[1]]]``)."""
    return "[" * levels + leaf + "]" * levels


def deep_object(levels: int) -> dict[str, object]:
    """A JSON object nested ``levels`` objects deep, the innermost {"v": 1} (levels=1)."""
    value: dict[str, object] = {"v": 1}
    for _ in range(levels - 1):
        value = {"v": value}
    return value


def _drop_file_capabilities() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def worker_preexec() -> Callable[[], None] | None:
    """``preexec_fn`` for a worker subprocess that must honour file permissions (root too)."""
    return _drop_file_capabilities if os.geteuid() == 0 else None


def unreadable_by_workers(path: Path) -> None:
    """No read permission for anyone: a worker started with :func:`worker_preexec` gets EACCES."""
    path.chmod(0)


def install_trigger(dsn: str, table: str, body: str) -> str:
    """A BEFORE INSERT trigger on ``table`` of the (throwaway) database running ``body`` (PL/pgSQL
    statements seeing NEW) for each row: a real server-side fault or delay. Returns ``dsn``."""
    name = "test_" + table.rpartition(".")[2]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"CREATE FUNCTION public.{name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body} RETURN NEW; END; $$"
        )
        conn.execute(f"CREATE TRIGGER {name} BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION public.{name}()")
    return dsn
