"""Real concurrency for tests: each call on its own connection, released together."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

T = TypeVar("T")


def race(dsn: str, calls: list[Callable[[psycopg.Connection[Any]], T]]) -> list[T | BaseException]:
    """Run each call on its own autocommit connection, all released at once by a barrier.

    Returns each call's result or the exception it raised, in call order. A call that
    hangs for two minutes fails the test.
    """
    results: list[T | BaseException] = [RuntimeError("did not run")] * len(calls)
    barrier = threading.Barrier(len(calls))

    def worker(i: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            barrier.wait(30)
            try:
                results[i] = calls[i](conn)
            except BaseException as exc:  # recorded for the assertions
                results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a racing call hung"
    return results
