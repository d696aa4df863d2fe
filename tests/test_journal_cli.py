"""prme-pg journal head / verify: anchoring a journal outside the database (issue 17, item 6).

What no check inside the database can see — a node row deleted together with its whole
chain, a chain rewritten consistently — a head written before reveals: ``journal verify
--against HEAD`` reports every anchored record that is gone or changed. On PostgreSQL and
on a memory pack.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest

from prme_pg import MemoryClient, cli
from prme_pg.backends.duckdb import PACK_FILE
from prme_pg.journal import HEAD_FORMAT, JournalHead, journal_head


def _fill(target: str | Path) -> list[Any]:
    with MemoryClient(target) as memory:
        nodes = [memory.add_node(text, user_id="alice") for text in ("likes tea", "lives in Lyon")]
        memory.reinforce(nodes[0].id, user_id="alice")
        memory.add_node("bob's own", user_id="bob")
        return [node.id for node in nodes]


def _delete_chain_and_node(dsn: str, node_id: Any) -> None:
    """As a superuser would: past the append-only triggers and the foreign keys."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("DELETE FROM prme.journal WHERE node_id = %s", [node_id])
        conn.execute("DELETE FROM prme.nodes WHERE id = %s", [node_id])


def test_a_head_catches_a_node_deleted_with_its_journal(
    db_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = _fill(db_dsn)
    head = tmp_path / "alice.head.json"
    assert cli.main(["journal", "head", "--dsn", db_dsn, "--user", "alice", "--output", str(head)]) == 0
    out = capsys.readouterr().out
    document = json.loads(head.read_text())
    assert document["format"] == HEAD_FORMAT and document["records"] == 3 and len(document["chains"]) == 2
    assert document["digest"] in out and str(head) in out

    with MemoryClient(db_dsn) as memory:  # the journal grows: still fine
        memory.reinforce(nodes[1], user_id="alice")
    assert cli.main(["journal", "verify", "--dsn", db_dsn, "--user", "alice", "--against", str(head)]) == 0
    assert "holds every record the head" in capsys.readouterr().out

    _delete_chain_and_node(db_dsn, nodes[0])
    assert cli.main(["journal", "verify", "--dsn", db_dsn, "--user", "alice"]) == 0, "invisible from inside"
    capsys.readouterr()
    argv = ["journal", "verify", "--dsn", db_dsn, "--user", "alice", "--against", str(head), "--json"]
    assert cli.main(argv) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["verifies"] is False
    assert [(p["source"], p["node_id"], p["node_version"], p["problem"]) for p in report["problems"]] == [
        ("anchor", str(nodes[0]), 2, "anchor_missing")
    ]


def test_head_refuses_a_journal_that_does_not_verify(
    db_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = _fill(db_dsn)
    with psycopg.connect(db_dsn, autocommit=True) as conn:  # the node row goes, its journal stays
        conn.execute("SET session_replication_role = replica")
        conn.execute("DELETE FROM prme.nodes WHERE id = %s", [nodes[0]])
    head = tmp_path / "head.json"
    assert cli.main(["journal", "head", "--dsn", db_dsn, "--user", "alice", "--output", str(head)]) == 1
    captured = capsys.readouterr()
    assert "node_missing" in captured.out and "does not verify" in captured.err
    assert not head.exists()
    assert cli.main(["journal", "verify", "--dsn", db_dsn, "--user", "alice"]) == 1
    out = capsys.readouterr().out
    assert out.count("node_missing") == 2, "engine and independent verifier both name it"


def test_a_head_is_never_overwritten(db_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fill(db_dsn)
    head = tmp_path / "head.json"
    head.write_text("an older anchor")
    assert cli.main(["journal", "head", "--dsn", db_dsn, "--user", "alice", "--output", str(head)]) == 1
    assert "exists" in capsys.readouterr().err
    assert head.read_text() == "an older anchor"
    nowhere = tmp_path / "no such folder" / "head.json"
    assert cli.main(["journal", "head", "--dsn", db_dsn, "--user", "alice", "--output", str(nowhere)]) == 1
    assert "cannot write" in capsys.readouterr().err


def test_a_damaged_or_foreign_head_is_refused_in_one_line(
    db_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fill(db_dsn)
    head = tmp_path / "head.json"
    assert cli.main(["journal", "head", "--dsn", db_dsn, "--user", "alice", "--output", str(head)]) == 0
    capsys.readouterr()
    document = json.loads(head.read_text())
    cases = {
        "edited.json": json.dumps({**document, "records": document["records"] - 1}),
        "dropped-chain.json": json.dumps({**document, "chains": document["chains"][1:]}),
        "not-json.json": "{not json",
        "not-a-head.json": json.dumps({"format": "something else"}),
        "bad-chain.json": json.dumps({**document, "chains": [["not a uuid", 1, "0" * 64]]}),
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        assert (
            cli.main(["journal", "verify", "--dsn", db_dsn, "--user", "alice", "--against", str(tmp_path / name)]) == 1
        )
        err = " ".join(capsys.readouterr().err.split())
        assert err.startswith("error: ") and "journal head" in err and "Traceback" not in err, (name, err)
    assert cli.main(["journal", "verify", "--dsn", db_dsn, "--user", "bob", "--against", str(head)]) == 1
    assert "anchors the journal of alice" in capsys.readouterr().err
    assert cli.main(["journal", "verify", "--dsn", db_dsn, "--user", "alice", "--against", str(tmp_path / "nope")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_a_head_of_a_memory_pack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pack = tmp_path / "memories"
    nodes = _fill(pack)
    head = tmp_path / "head.json"
    assert cli.main(["journal", "head", "--pack", str(pack), "--user", "alice", "--output", str(head)]) == 0
    assert cli.main(["journal", "verify", "--pack", str(pack), "--user", "alice", "--against", str(head)]) == 0
    capsys.readouterr()
    with duckdb.connect(str(pack / PACK_FILE)) as con:  # a node row deleted with its whole chain
        con.execute("DELETE FROM prme.journal WHERE node_id = ?", [nodes[1]])
        con.execute("DELETE FROM prme.nodes WHERE id = ?", [nodes[1]])
    assert cli.main(["journal", "verify", "--pack", str(pack), "--user", "alice", "--against", str(head)]) == 1
    assert "anchor_missing" in capsys.readouterr().out


def test_journal_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["journal"],
        ["journal", "head"],
        ["journal", "verify", "--pack", "p", "--dsn", "postgresql://x", "--user", "alice"],
    ):
        assert cli.main(argv) == 2, argv
    capsys.readouterr()


def test_the_digest_seals_the_document_and_ignores_when_it_was_taken(db_dsn: str) -> None:
    _fill(db_dsn)
    with MemoryClient(db_dsn) as memory:
        records, _ = memory.journal_records(user_id="alice")
    first, second = journal_head("alice", records), journal_head("alice", list(reversed(records)))
    assert first.digest == second.digest and first.records == 3
    assert JournalHead.from_document(first.to_document()) == first
    assert journal_head("alice", records[:-1]).digest != first.digest
