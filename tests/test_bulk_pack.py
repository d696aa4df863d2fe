"""A bulk import into a memory pack (issue 35, item 5): several owners' batches in one
transaction, each exactly add_nodes' (journal byte for byte, vectors bit for bit), all or
nothing; the import's stages overlapping without changing what is written or when a bad line
stops it; memory bounded by the batch size whatever the file's length. Real packs, the real
bundled model where vectors matter."""

from __future__ import annotations

import dataclasses
import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

from prme_pg import MemoryClient
from prme_pg.backends import AddNodes
from prme_pg.backends.duckdb import PACK_FILE
from prme_pg.bulk import IN_FLIGHT, ImportSummary, LineError, import_lines, node_id_for
from prme_pg.client import add_nodes_request, node_item
from prme_pg.errors import IdempotencyConflict, InvalidInput

T0 = datetime(2025, 5, 1, 12, 0, 0, tzinfo=UTC)


def _ids() -> Callable[[], uuid.UUID]:
    counter = itertools.count(1)
    return lambda: uuid.UUID(int=next(counter))


def _batch(owner: str, count: int, **fields: Any) -> list[dict[str, Any]]:
    return [
        {
            "content": f"{owner} memory {i} about tabs",
            "node_id": uuid.uuid5(uuid.NAMESPACE_URL, f"{owner}/{i}"),
            **fields,
        }
        for i in range(count)
    ]


def _rows(pack: Path, sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(pack / PACK_FILE), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_owners_together_write_what_add_nodes_writes_owner_by_owner(tmp_path: Path) -> None:
    owners = {"alice": _batch("alice", 3), "bob": _batch("bob", 2, stability="stable"), "carol": _batch("carol", 1)}
    owners["bob"][1]["created_at"] = datetime(2024, 1, 1, tzinfo=UTC)
    with MemoryClient(tmp_path / "together", clock=lambda: T0, new_id=_ids()) as together:
        embedder = together.embedder
        requests = [add_nodes_request(items, owner, embedder) for owner, items in owners.items()]
        nodes = together.backend.add_nodes_together(requests)  # type: ignore[attr-defined]
    with MemoryClient(tmp_path / "apart", clock=lambda: T0, new_id=_ids()) as apart:
        expected = [apart.add_nodes(items, user_id=owner) for owner, items in owners.items()]
    assert [[n.id for n in batch] for batch in nodes] == [[n.id for n in batch] for batch in expected]
    assert nodes == expected  # the same nodes, field by field (times and review dates too)
    journal = "SELECT user_id, node_id, operation_id, record, checksum FROM prme.journal ORDER BY ALL"
    assert _rows(tmp_path / "together", journal) == _rows(tmp_path / "apart", journal)
    vectors = "SELECT user_id, node_id, model_id, embedding FROM prme.node_embeddings ORDER BY ALL"
    assert _rows(tmp_path / "together", vectors) == _rows(tmp_path / "apart", vectors)
    assert len(_rows(tmp_path / "together", vectors)) == 6
    words = "SELECT * FROM prme.node_words ORDER BY ALL"
    assert _rows(tmp_path / "together", words) == _rows(tmp_path / "apart", words)
    with MemoryClient(tmp_path / "together") as reopened:
        for owner in owners:
            assert reopened.verify_journal(user_id=owner, independent=True) == []
        # A retry is a replay for every owner: nothing new.
        again = reopened.backend.add_nodes_together(  # type: ignore[attr-defined]
            [add_nodes_request(items, owner) for owner, items in owners.items()]
        )
        assert all(node.replayed for batch in again for node in batch)


def test_owners_together_are_all_or_nothing(tmp_path: Path) -> None:
    with MemoryClient(tmp_path / "pack", embedder=False) as memory:
        pack = memory.backend
        good = add_nodes_request(_batch("alice", 3), "alice")
        future = add_nodes_request(_batch("bob", 2, created_at=datetime.now(UTC) + timedelta(days=1)), "bob")
        with pytest.raises(InvalidInput, match=r"^items\[0\]: created_at must not be in the future"):
            pack.add_nodes_together([good, future])  # type: ignore[attr-defined]
        memory.add_nodes([{"content": "taken", "node_id": _batch("carol", 1)[0]["node_id"]}], user_id="carol")
        taken = add_nodes_request(_batch("carol", 1), "carol")
        with pytest.raises(IdempotencyConflict, match=r"^items\[0\]: a node with this node_id already exists"):
            pack.add_nodes_together([good, taken])  # type: ignore[attr-defined]
        with pytest.raises(InvalidInput, match="each batch of add_nodes_together must be of another owner"):
            pack.add_nodes_together([good, good])  # type: ignore[attr-defined]
        many = [add_nodes_request([{"content": f"m{i}"}] * 1, f"owner-{i}") for i in range(1001)]
        with pytest.raises(InvalidInput, match="at most 1000 memories together"):
            pack.add_nodes_together(many)  # type: ignore[attr-defined]
        assert memory.list_nodes(user_id="alice") == []
        assert [n.content for n in memory.list_nodes(user_id="carol")] == ["taken"]
    assert _rows(tmp_path / "pack", "SELECT count(*) FROM prme.journal") == [(1,)]


def test_vectors_of_two_models_in_one_transaction_are_stored_bit_for_bit(tmp_path: Path) -> None:
    """The vectors reach DuckDB as one registered array per model (not value by value): each
    stored vector is its item's, every bit (signed zeros, the smallest and largest floats)."""
    with MemoryClient(tmp_path / "pack") as memory:
        embedder = memory.embedder
        assert embedder is not None
        rng = np.random.default_rng(35)
        small = rng.standard_normal((5, 8)).astype(np.float32)
        small[0] = [-0.0, 0.0, np.finfo(np.float32).tiny, -np.finfo(np.float32).max, 1e-45, 1.0, -1.0, 3.5]
        large = rng.standard_normal((4, embedder.dimensions)).astype(np.float32)
        items = [node_item({"content": f"eight {i}"}) for i in range(5)]
        items = [
            dataclasses.replace(item, embedding=vector, embedding_model="eight-dims")
            for item, vector in zip(items, small, strict=True)
        ]
        items += [node_item({"content": f"model {i}", "embedding": v.tolist()}, embedder) for i, v in enumerate(large)]
        items = [items[i] for i in (5, 0, 6, 1, 2, 7, 3, 8, 4)]  # the models interleaved
        memory.backend.execute(AddNodes(user_id="alice", items=tuple(items)))
        other = [node_item({"content": "bob's", "embedding": large[0].tolist()}, embedder)]
        memory.backend.add_nodes_together(  # type: ignore[attr-defined]
            [AddNodes(user_id="bob", items=tuple(other)), AddNodes(user_id="carol", items=(items[1],))]
        )
    stored = _rows(
        tmp_path / "pack",
        "SELECT e.user_id, n.content, e.model_id, e.embedding FROM prme.node_embeddings AS e "
        "JOIN prme.nodes AS n ON n.user_id = e.user_id AND n.id = e.node_id",
    )
    assert len(stored) == 11
    given = {item.content: item for item in [*items, *other]}
    for _user_id, content, model, vector in stored:
        assert model == given[content].embedding_model
        expected = np.asarray(given[content].embedding, dtype=np.float32)
        assert np.asarray(vector, dtype=np.float32).tobytes() == expected.tobytes(), content


def _lines(rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(number, json.dumps(row)) for number, row in enumerate(rows, 1)]


def _owners_rows(count: int, owners: int) -> list[dict[str, Any]]:
    return [
        {"id": f"m-{i}", "user_id": f"owner-{i % owners}", "content": f"memory {i} of owner {i % owners}"}
        for i in range(count)
    ]


def test_a_pack_import_shares_transactions_between_owners(tmp_path: Path) -> None:
    rows = _owners_rows(50, 7)
    with MemoryClient(tmp_path / "pack", embedder=False) as memory:
        summary = import_lines(memory, _lines(rows), batch_size=10)
        assert (summary.created, summary.replayed, len(summary.owners)) == (50, 0, 7)
        again = import_lines(memory, _lines(rows), batch_size=10)
        assert (again.created, again.replayed) == (0, 50)
        for owner in range(7):
            nodes = memory.list_nodes(user_id=f"owner-{owner}", max_count=100)
            assert {n.id for n in nodes} == {node_id_for(r["id"]) for r in rows if r["user_id"] == f"owner-{owner}"}
            assert memory.verify_journal(user_id=f"owner-{owner}", independent=True) == []
    # Five transactions of ten lines each wrote them: every create record of a transaction
    # has its time, and the ten lines of each are the file's next ten.
    times = _rows(tmp_path / "pack", "SELECT recorded_at, count(*) FROM prme.journal GROUP BY 1 ORDER BY 1")
    assert [count for _, count in times] == [10] * 5


def test_a_bad_line_stops_a_pack_import_before_its_transaction_and_every_later_one(tmp_path: Path) -> None:
    rows = _owners_rows(40, 3)
    rows[14]["confidence_base"] = 7  # the engine refuses it: line 15, in the second transaction
    with MemoryClient(tmp_path / "pack", embedder=False) as memory:
        with pytest.raises(LineError, match=r"^line 15: confidence_base must be a number in \[0, 1\]"):
            import_lines(memory, _lines(rows), batch_size=10)
        stored = {n.content for owner in range(3) for n in memory.list_nodes(user_id=f"owner-{owner}", max_count=100)}
        # The first transaction's ten lines; of the second, refused as a whole, the owners'
        # batches before the refused line's, written one by one as add_nodes would: owners in
        # the order of their first line there, owner-1 (line 11), then owner-2 (line 12, whose
        # line 15 is refused), then owner-0 (never written, nor anything after).
        second = {r["content"] for r in rows[10:20] if r["user_id"] == "owner-1"}
        assert stored == {r["content"] for r in rows[:10]} | second

        skipped = import_lines(memory, _lines(rows), batch_size=10, skip_invalid=True)
        assert skipped.skipped == [{"line": 15, "error": skipped.skipped[0]["error"]}]
        assert skipped.created + skipped.replayed == 39
        assert sum(len(memory.list_nodes(user_id=f"owner-{o}", max_count=100)) for o in range(3)) == 39


def test_the_import_holds_at_most_a_few_batches_whatever_the_file(tmp_path: Path) -> None:
    """Streaming: lines are read only as far ahead of what is written as the buffers and the
    units in flight allow, whatever the file's length."""
    read = 0

    def lines() -> Iterator[tuple[int, str]]:
        nonlocal read
        for number, text in _lines(_owners_rows(600, 5)):
            read += 1
            yield number, text

    ahead: list[int] = []

    def progress(summary: ImportSummary) -> None:
        ahead.append(read - summary.created - summary.replayed - len(summary.skipped))

    with MemoryClient(tmp_path / "pack", embedder=False) as memory:
        summary = import_lines(memory, lines(), batch_size=20, on_progress=progress)
    assert summary.created == 600
    assert len(ahead) > 20
    assert max(ahead) <= (IN_FLIGHT + 1) * 20


def test_an_owner_whose_every_line_is_skipped_is_not_counted(tmp_path: Path) -> None:
    rows = _owners_rows(6, 2)
    rows.insert(
        3, {"id": "lonely", "user_id": "owner-9", "content": "x", "confidence_base": 7}
    )  # the engine refuses it
    with MemoryClient(tmp_path / "pack", embedder=False) as memory:
        summary = import_lines(memory, _lines(rows), batch_size=10, skip_invalid=True)
        assert (summary.created, len(summary.owners), [s["line"] for s in summary.skipped]) == (6, 2, [4])
        assert memory.list_nodes(user_id="owner-9") == []
