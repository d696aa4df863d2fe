"""prme-pg import and export (docs/IMPORT.md): JSON Lines, resumable, bad lines named by
number, the LangGraph and mem0 adapters, and a round trip between a pack and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from prme_pg import MemoryClient, testing
from prme_pg.bulk import IMPORT_NAMESPACE, import_lines, node_id_for, parse_line
from prme_pg.errors import InvalidInput


def _prme_pg(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it: a real process, output piped."""
    return subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PRME_DSN": ""},
        timeout=300,
    )


def _write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def _memories(count: int, owner: str = "alice") -> list[dict[str, Any]]:
    return [
        {"id": f"note-{i}", "user_id": owner, "content": f"memory {i}: alice likes item {i}", "kind": "preference"}
        for i in range(count)
    ]


@pytest.fixture
def memory(db_dsn: str) -> Iterator[MemoryClient]:
    with MemoryClient(db_dsn) as client:
        yield client


def test_import_is_resumable_and_a_run_again_writes_nothing(tmp_path: Path, db_dsn: str, memory: MemoryClient) -> None:
    lines = _memories(25)
    half = _write(tmp_path / "half.jsonl", lines[:12])  # as if the first run stopped there
    whole = _write(tmp_path / "whole.jsonl", lines)
    first = _prme_pg("import", str(half), "--dsn", db_dsn, "--batch-size", "5", "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["created"] == 12
    second = _prme_pg("import", str(whole), "--dsn", db_dsn, "--batch-size", "5", "--json")
    summary = json.loads(second.stdout)
    assert (summary["lines"], summary["created"], summary["replayed"], summary["skipped"]) == (25, 13, 12, [])
    third = _prme_pg("import", str(whole), "--dsn", db_dsn)
    assert third.returncode == 0 and "0 memories created, 25 already there" in third.stdout
    nodes = memory.list_nodes(user_id="alice", max_count=100)
    assert len(nodes) == 25 and {n.id for n in nodes} == {node_id_for(f"note-{i}") for i in range(25)}
    assert memory.verify_journal(user_id="alice", independent=True) == []


def test_a_bad_line_is_named_and_its_batch_is_not_written(tmp_path: Path, db_dsn: str, memory: MemoryClient) -> None:
    lines: list[Any] = _memories(8)
    lines[5] = {**lines[5], "confidence_base": 7}  # refused by the engine's rule
    lines.insert(2, "")  # blank lines are skipped, still counted
    path = _write(tmp_path / "bad.jsonl", lines)
    result = _prme_pg("import", str(path), "--dsn", db_dsn, "--batch-size", "3")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: line 7: confidence_base must be a number in [0, 1] with at most 4 decimal places (got 7)"
    ]
    # Lines 1-4 went in as a batch of 3 and ...; the batch with line 7 in it did not.
    stored = {n.content for n in memory.list_nodes(user_id="alice", max_count=100)}
    assert stored == {f"memory {i}: alice likes item {i}" for i in range(3)}

    not_json = _write(tmp_path / "broken.jsonl", [*_memories(2), '{"content": "half a line'])
    result = _prme_pg("import", str(not_json), "--dsn", db_dsn, "--user", "bob")
    assert result.returncode == 2 and result.stderr.startswith("error: line 3: the line is not one JSON document")
    assert memory.list_nodes(user_id="bob") == []


def test_skip_invalid_reports_each_line_and_imports_the_rest(tmp_path: Path, db_dsn: str, memory: MemoryClient) -> None:
    lines: list[Any] = _memories(6)
    lines[1] = {**lines[1], "scope": "Not A Scope"}  # the engine refuses it, mid-batch
    lines[4] = {"id": "x", "content": "no owner"}  # Python refuses it before any I/O
    path = _write(tmp_path / "mixed.jsonl", lines)
    result = _prme_pg("import", str(path), "--dsn", db_dsn, "--skip-invalid", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["created"] == 4
    assert [s["line"] for s in summary["skipped"]] == [5, 2]
    assert summary["skipped"][1]["error"].startswith("scope must match")
    result = _prme_pg("import", str(path), "--dsn", db_dsn, "--skip-invalid")
    assert "skipped: line 5: no owner" in result.stderr and "skipped: line 2: scope must match" in result.stderr
    assert len(memory.list_nodes(user_id="alice")) == 4


def test_a_reused_external_id_with_other_content_is_a_conflict_on_its_line(
    tmp_path: Path, db_dsn: str, memory: MemoryClient
) -> None:
    _prme_pg("import", str(_write(tmp_path / "a.jsonl", _memories(3))), "--dsn", db_dsn)
    changed = _memories(3)
    changed[2]["content"] = "something else"
    result = _prme_pg("import", str(_write(tmp_path / "b.jsonl", changed)), "--dsn", db_dsn)
    assert result.returncode == 2
    assert result.stderr.startswith("error: line 3: a node with this node_id already exists with other content")


def test_langgraph_store_items(tmp_path: Path, db_dsn: str, memory: MemoryClient) -> None:
    # What BaseStore.search()/get() return, Item.dict() per line (langgraph.store.base.Item).
    items = [
        {
            "namespace": ["memories", "alice"],
            "key": "3f1c",
            "value": {"content": "alice prefers tabs", "context": "editor settings"},
            "created_at": "2025-01-02T03:04:05.000006+00:00",
            "updated_at": "2025-01-03T00:00:00+00:00",
        },
        {  # LangMem's manage-memory tool: {"kind": "Memory", "content": {"content": ...}}
            "namespace": ["memories", "alice"],
            "key": "9b2e",
            "value": {"kind": "Memory", "content": {"content": "alice lives in Lisbon"}},
            "created_at": "2025-02-01T00:00:00+00:00",
            "updated_at": "2025-02-01T00:00:00+00:00",
        },
        {
            "namespace": ["User Profile"],
            "key": "profile",
            "value": {"name": "Alice", "languages": ["pt", "en"]},
            "created_at": "2025-03-01T12:00:00Z",
            "updated_at": "2025-03-01T12:00:00Z",
        },
    ]
    path = _write(tmp_path / "store.jsonl", items)
    result = _prme_pg("import", str(path), "--dsn", db_dsn, "--format", "langgraph", "--user", "alice", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["created"] == 3
    nodes = {n.content: n for n in memory.list_nodes(user_id="alice")}
    tabs = nodes["alice prefers tabs"]
    assert tabs.namespace == "memories" and tabs.kind == "fact" and tabs.scope == "personal"
    assert tabs.created_at == datetime(2025, 1, 2, 3, 4, 5, 6, UTC)
    assert tabs.id == uuid.uuid5(IMPORT_NAMESPACE, 'langgraph:[["memories","alice"],"3f1c"]')
    assert "alice lives in Lisbon" in nodes
    profile = nodes['{"languages":["pt","en"],"name":"Alice"}']  # a value without text: its JSON
    assert profile.namespace == "default"
    without_owner = _prme_pg("import", str(path), "--dsn", db_dsn, "--format", "langgraph")
    assert without_owner.returncode == 2 and "line 1: no owner" in without_owner.stderr


def test_mem0_exported_memories(tmp_path: Path, db_dsn: str, memory: MemoryClient) -> None:
    # Memory.get_all(user_id=...)["results"], one memory per line.
    ids = [str(uuid.uuid4()), str(uuid.uuid4())]
    rows = [
        {
            "id": ids[0],
            "memory": "Likes to play cricket on weekends",
            "hash": "285d07801ae42054732314853e9eadd7",
            "metadata": {"category": "hobbies"},
            "created_at": "2024-07-26T10:29:36.630547-07:00",
            "updated_at": None,
            "user_id": "alex",
        },
        {
            "id": ids[1],
            "memory": "Is a vegetarian",
            "hash": "0fa3a5b9a8c44b9e1d7f0e6d1c2b3a49",
            "metadata": None,
            "created_at": "2024-07-26T10:30:00.000000-07:00",
            "updated_at": "2024-07-27T08:00:00.000000-07:00",
            "user_id": "alex",
        },
    ]
    path = _write(tmp_path / "mem0.jsonl", rows)
    result = _prme_pg("import", str(path), "--dsn", db_dsn, "--format", "mem0", "--json")
    assert result.returncode == 0, result.stderr
    nodes = memory.list_nodes(user_id="alex")
    assert sorted(str(n.id) for n in nodes) == sorted(ids)
    cricket = next(n for n in nodes if n.id == uuid.UUID(ids[0]))
    assert cricket.content == "Likes to play cricket on weekends"
    assert cricket.created_at == datetime(2024, 7, 26, 17, 29, 36, 630547, UTC)


def test_parse_line_and_import_lines_in_python() -> None:
    entry = parse_line(b'{"content": "x", "confidence_base": 0.65, "next_review_at": null}', 4, default_user="al")
    assert entry.user_id == "al" and entry.item.confidence_base == Decimal("0.65")
    assert entry.item.next_review_at is None and entry.line == 4
    with pytest.raises(InvalidInput, match=r"^line 9: unknown field 'colour'"):
        parse_line('{"content": "x", "colour": 1}', 9, default_user="al")
    with pytest.raises(InvalidInput, match="created_at must have a time zone"):
        parse_line('{"content": "x", "created_at": "2024-01-01T00:00:00"}', 1, default_user="al")
    # Without an id, the memory's words and place stand for it: the same line, the same node.
    again = parse_line('{"content": "x", "confidence_base": 0.5}', 5, default_user="al")
    assert again.item.node_id == entry.item.node_id
    with pytest.raises(InvalidInput, match="format must be one of"):
        import_lines(None, [], format="csv")  # type: ignore[arg-type]


def _same_memories(nodes: list[Any]) -> list[tuple[Any, ...]]:
    return sorted(
        (
            n.id,
            n.content,
            n.scope,
            n.namespace,
            n.kind,
            n.confidence_base,
            n.salience_base,
            n.stability,
            n.decay_profile,
            n.created_at,
            n.next_review_at,
        )
        for n in nodes
    )


def test_export_then_import_into_another_database(
    tmp_path: Path, db_dsn: str, memory: MemoryClient, pg_server: testing.Server, template_db: str
) -> None:
    made = memory.add_nodes(
        [
            {"content": "alice prefers tabs", "confidence_base": "0.65", "stability": "stable"},
            {"content": "no schedule", "next_review_at": None, "scope": "work", "salience_base": 1},
            {"content": "gone", "namespace": "old"},
        ],
        user_id="alice",
    )
    memory.reinforce(made[0].id, user_id="alice")
    memory.archive_node(made[2].id, user_id="alice")
    exported = tmp_path / "alice.jsonl"
    result = _prme_pg("export", "--dsn", db_dsn, "--user", "alice", "--output", str(exported), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["memories"] == 2
    first = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    tabs = next(line for line in first if line["content"] == "alice prefers tabs")
    assert [json.loads(r["record"])["op"] for r in tabs["journal"]] == ["create", "reinforce"]
    assert tabs["state"]["version"] == 2 and tabs["confidence_base"] == 0.7
    again = _prme_pg("export", "--dsn", db_dsn, "--user", "alice", "--output", str(exported))
    assert again.returncode == 1 and "exists" in again.stderr

    other = testing.create_database(pg_server, template=template_db)
    try:
        other_dsn = pg_server.dsn_for(other)
        result = _prme_pg("import", str(exported), "--dsn", other_dsn, "--json")
        assert json.loads(result.stdout)["created"] == 2
        with MemoryClient(other_dsn) as second:
            kept = [n for n in memory.list_nodes(user_id="alice") if n.lifecycle_state != "archived"]
            assert _same_memories(second.list_nodes(user_id="alice")) == _same_memories(kept)
            assert second.verify_journal(user_id="alice", independent=True) == []
    finally:
        testing.drop_database(pg_server, other)
