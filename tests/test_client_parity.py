"""MemoryClient and AsyncMemoryClient are one API: every public method of one is on the
other with the same parameters (names, kinds, defaults, annotations up to the async
counterparts of types) and the same docstring, awaited where the sync one returns.

The async client is written by hand rather than generated from the sync one (as psycopg
does): the two differ where it matters (opening, closing, packs in worker threads, the
outbox off the event loop), and this test is what keeps the rest equal.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest

from prme_pg import AsyncMemoryClient, MemoryClient

# What the async client has instead of a sync type, in annotations (word for word).
ASYNC_TYPES = {
    "Iterator": "AsyncIterator",
    "ConnectionPool": "AsyncConnectionPool",
    "Connection": "AsyncConnection",
    "SyncBackend": "AsyncBackend",
}
# Special methods of one protocol and their counterparts in the other.
COUNTERPARTS = {"__init__": "__init__", "__enter__": "__aenter__", "__exit__": "__aexit__"}
# Only the async client needs opening (the sync one is opened by its constructor).
ASYNC_ONLY = {"open"}
# Methods that make no call (a copy of the client): plain methods on both.
NO_IO = {"with_embedder"}


def _public(cls: type) -> set[str]:
    return {name for name in vars(cls) if not name.startswith("_")}


def _as_async(annotation: str) -> str:
    return re.sub(r"\b(\w+)\b", lambda m: ASYNC_TYPES.get(m[1], m[1]), annotation)


def _unwrap(cls: type, name: str) -> Callable[..., Any]:
    member = inspect.getattr_static(cls, name)
    if isinstance(member, property):
        assert member.fget is not None
        return member.fget
    if isinstance(member, classmethod | staticmethod):
        return member.__func__
    assert callable(member), f"{cls.__name__}.{name} is not a method"
    return member


def _pairs() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(_public(MemoryClient))] + list(COUNTERPARTS.items())


def test_the_clients_have_the_same_public_methods() -> None:
    sync, aio = _public(MemoryClient), _public(AsyncMemoryClient)
    assert len(sync) > 40  # the lookup found them
    assert sync - aio == set(), "on MemoryClient only"
    assert aio - sync == ASYNC_ONLY, "on AsyncMemoryClient only"


@pytest.mark.parametrize(("sync_name", "async_name"), _pairs())
def test_each_method_has_the_same_kind_and_signature(sync_name: str, async_name: str) -> None:
    sync_static = inspect.getattr_static(MemoryClient, sync_name)
    async_static = inspect.getattr_static(AsyncMemoryClient, async_name)
    assert type(sync_static) is type(async_static), "one is a property, classmethod or method and the other not"
    sync, aio = _unwrap(MemoryClient, sync_name), _unwrap(AsyncMemoryClient, async_name)
    if (
        isinstance(sync_static, property)
        or sync_name == "__init__"
        or isinstance(sync_static, classmethod)
        or sync_name in NO_IO
    ):
        assert not inspect.iscoroutinefunction(aio)
    elif inspect.isgeneratorfunction(sync):
        assert inspect.isasyncgenfunction(aio), f"{async_name} must be an async generator"
    else:
        assert inspect.iscoroutinefunction(aio), f"{async_name} must be a coroutine function (async def)"
    sync_signature, async_signature = inspect.signature(sync), inspect.signature(aio)
    expected = [(p.name, p.kind, p.default, _as_async(str(p.annotation))) for p in sync_signature.parameters.values()]
    actual = [(p.name, p.kind, p.default, str(p.annotation)) for p in async_signature.parameters.values()]
    assert actual == expected
    assert str(async_signature.return_annotation) == _as_async(str(sync_signature.return_annotation))


@pytest.mark.parametrize("name", sorted(_public(MemoryClient)))
def test_each_method_has_the_same_docstring(name: str) -> None:
    """The async docstring is the sync one; it may add a last paragraph on what differs when awaited."""
    sync_doc = inspect.getdoc(_unwrap(MemoryClient, name))
    async_doc = inspect.getdoc(_unwrap(AsyncMemoryClient, name))
    assert sync_doc, f"MemoryClient.{name} has no docstring"
    assert async_doc is not None and (async_doc == sync_doc or async_doc.startswith(sync_doc + "\n\n")), (
        f"AsyncMemoryClient.{name}'s docstring is not MemoryClient.{name}'s:\n{async_doc}\n---\n{sync_doc}"
    )
