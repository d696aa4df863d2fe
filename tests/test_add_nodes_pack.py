"""add_nodes on a memory pack: the journal of add_node one by one, byte for byte (a fixed
clock and ids make both runs reproducible), and the round trip pack -> PostgreSQL -> pack."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from prme_pg import MemoryClient
from prme_pg.errors import IdempotencyConflict, InvalidInput

from .test_import_export import _same_memories

T0 = datetime(2025, 5, 1, 12, 0, 0, tzinfo=UTC)


def _ids() -> Callable[[], uuid.UUID]:
    counter = itertools.count(1)
    return lambda: uuid.UUID(int=next(counter))


def _items() -> list[dict[str, Any]]:
    return [
        {"content": "alice prefers tabs", "node_id": uuid.UUID(int=1000)},
        {"content": "work thing", "scope": "work", "confidence_base": "0.65", "stability": "stable"},
        {"content": "no review", "next_review_at": None, "created_at": datetime(2024, 1, 1, tzinfo=UTC)},
    ]


def test_a_pack_batch_journals_what_add_node_journals_byte_for_byte(tmp_path: Path) -> None:
    with MemoryClient(tmp_path / "batch", clock=lambda: T0, new_id=_ids()) as batch:
        nodes = batch.add_nodes(_items(), user_id="alice")
        batch_records, _ = batch.journal_records(user_id="alice")
        assert batch.verify_journal(user_id="alice", independent=True) == []
    with MemoryClient(tmp_path / "single", clock=lambda: T0, new_id=_ids()) as single:
        for item in _items():
            created_at = item.pop("created_at", None)
            node = single.add_node(item.pop("content"), user_id="alice", **item)
            assert created_at is None or node.content == "no review"
        single_records, _ = single.journal_records(user_id="alice")
    # The third item's created_at is its own; every other byte is add_node's.
    batch_texts = [r.record for r in batch_records]
    later = '"content":"no review","created_at":"2025-05-01T12:00:00.000000Z"'
    kept = '"content":"no review","created_at":"2024-01-01T00:00:00.000000Z"'
    single_texts = [r.record.replace(later, kept) for r in single_records]
    assert sorted(batch_texts) == sorted(single_texts)
    assert [n.replayed for n in nodes] == [False, False, False]


def test_a_pack_batch_replays_and_refuses_like_postgres(tmp_path: Path) -> None:
    with MemoryClient(tmp_path / "pack") as memory:
        first = memory.add_nodes([{"content": f"m{i}", "node_id": uuid.UUID(int=i + 1)} for i in range(3)], user_id="a")
        again = memory.add_nodes([{"content": f"m{i}", "node_id": uuid.UUID(int=i + 1)} for i in range(4)], user_id="a")
        assert [n.replayed for n in again] == [True, True, True, False] and again[0].id == first[0].id
        with pytest.raises(IdempotencyConflict, match=r"^items\[1\]: a node with this node_id already exists"):
            memory.add_nodes([{"content": "new"}, {"content": "other", "node_id": uuid.UUID(int=1)}], user_id="a")
        with pytest.raises(InvalidInput, match=r"^items\[1\]: content must not be empty"):
            memory.add_nodes([{"content": "fine"}, {"content": " "}], user_id="a")
        assert len(memory.list_nodes(user_id="a")) == 4


def _prme_pg(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PRME_DSN": ""},
        timeout=300,
    )


def test_round_trip_pack_postgres_pack(tmp_path: Path, db_dsn: str) -> None:
    with MemoryClient(tmp_path / "first") as first:
        made = first.add_nodes(_items(), user_id="alice")
        first.reinforce(made[0].id, user_id="alice")
        original = first.list_nodes(user_id="alice")
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    assert (
        _prme_pg("export", "--pack", str(tmp_path / "first"), "--user", "alice", "--output", str(one)).returncode == 0
    )
    assert json.loads(_prme_pg("import", str(one), "--dsn", db_dsn, "--json").stdout)["created"] == 3
    assert _prme_pg("export", "--dsn", db_dsn, "--user", "alice", "--output", str(two)).returncode == 0
    assert json.loads(_prme_pg("import", str(two), "--pack", str(tmp_path / "last"), "--json").stdout)["created"] == 3

    with MemoryClient(db_dsn) as postgres, MemoryClient(tmp_path / "last") as last:
        assert (
            _same_memories(postgres.list_nodes(user_id="alice"))
            == _same_memories(original)
            == _same_memories(last.list_nodes(user_id="alice"))
        )
        for memory in (postgres, last):
            assert memory.verify_journal(user_id="alice", independent=True) == []
    assert _prme_pg("journal", "verify", "--pack", str(tmp_path / "last"), "--user", "alice").returncode == 0
