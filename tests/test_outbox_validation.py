"""Enqueue refuses a payload the executor could never apply, naming the field (issue 20, item 12).

The outbox's table of payload fields (prme_pg.outbox.PAYLOAD_FIELDS) is held to the
executor itself: every payload enqueue refuses, the ledger rejects as an invalid payload
when it is submitted anyway; every payload enqueue accepts, the ledger does not reject
for its shape (it may still find no such node: that is the engine's to judge).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from prme_pg import InvalidInput, MemoryClient
from prme_pg.outbox import LEDGER_KINDS, PAYLOAD_FIELDS, PAYLOAD_REQUIRED, Outbox

ALICE = "alice"
NODE = str(uuid.uuid4())

#: (kind, payload, the field the refusal names)
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("add_node", {}, "content"),
    ("add_node", {"content": None}, "content"),
    ("add_node", {"content": 5}, "content"),
    ("add_node", {"content": "x", "colour": "red"}, "colour"),
    ("add_node", {"content": "x", "confidence_base": "0.7"}, "confidence_base"),
    ("add_node", {"content": "x", "next_review_at": "2030-01-01T00:00:00"}, "next_review_at"),
    ("add_node", {"content": "x", "next_review_at": "soon"}, "next_review_at"),
    ("add_node", {"content": "x", "token_budget": 1.5}, "token_budget"),
    ("add_node", {"content": "x", "token_budget": None}, "token_budget"),
    ("add_node", {"content": "x", "confidence_base": None}, "confidence_base"),
    ("add_event", {"content": "x", "payload": None}, "payload"),
    ("add_node", {"content": "x", "scope": ["work"]}, "scope"),
    ("add_event", {"content": "x", "payload": [1]}, "payload"),
    ("add_event", {"content": "x", "occurred_at": 1700000000}, "occurred_at"),
    ("reinforce", {"node_id": "abc"}, "node_id"),
    ("reinforce", {"node_id": "{" + NODE + "}"}, "node_id"),
    ("reinforce", {"node_id": NODE.replace("-", "")}, "node_id"),
    ("reinforce", {"node_id": NODE, "evidence_id": 5}, "evidence_id"),
    ("reinforce", {"evidence_id": NODE}, "node_id"),
    ("archive_node", {"node_id": NODE, "reason": "old"}, "reason"),
    ("record_outcome", {"node_id": NODE}, "outcome"),
    ("record_outcome", {"node_id": NODE, "outcome": "implicit_success", "notes": 3}, "notes"),
    ("link_correction", {"message": "m", "candidate_node_ids": NODE}, "candidate_node_ids"),
    ("link_correction", {"message": "m", "candidate_node_ids": ["x"]}, "candidate_node_ids"),
    ("link_correction", {"candidate_node_ids": [NODE]}, "message"),
]

ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("add_node", {"content": "x"}),
    (
        "add_node",
        {
            "content": "x",
            "scope": "work",
            "confidence_base": 0.7,
            "stability": "stable",
            "next_review_at": "2030-01-01T00:00:00Z",
            "token_budget": 512,
        },
    ),
    ("add_node", {"content": "x", "next_review_at": "2030-01-01 10:00:00.5+02:00", "token_budget": 64.0}),
    ("add_node", {"content": "x", "next_review_at": None, "scope": None}),
    ("add_event", {"content": "said", "payload": {"a": 1}, "occurred_at": "2030-01-01T00:00:00+02:00"}),
    ("reinforce", {"node_id": NODE}),
    ("reinforce", {"node_id": NODE.upper(), "evidence_id": None}),
    ("archive_node", {"node_id": NODE}),
    ("record_outcome", {"node_id": NODE, "outcome": "implicit_success", "notes": "ok"}),
    ("link_correction", {"message": "no, I prefer spaces", "candidate_node_ids": [NODE]}),
    ("link_correction", {"message": "no", "candidate_node_ids": [], "thread_id": None}),
]


def test_every_ledger_kind_has_a_payload_table() -> None:
    assert set(PAYLOAD_FIELDS) == set(LEDGER_KINDS) == set(PAYLOAD_REQUIRED)
    for kind, required in PAYLOAD_REQUIRED.items():
        assert set(required) <= set(PAYLOAD_FIELDS[kind]), kind


@pytest.mark.parametrize(
    ("kind", "payload", "field"), REFUSED, ids=[f"{k}-{f}-{i}" for i, (k, _, f) in enumerate(REFUSED)]
)
def test_enqueue_refuses_and_names_the_field(tmp_path: Path, kind: str, payload: dict[str, Any], field: str) -> None:
    outbox = Outbox(tmp_path / "memories")
    with pytest.raises(InvalidInput, match=field):
        outbox.enqueue(kind, payload, user_id=ALICE)
    assert outbox.counts()["pending"][0] == 0, "a refused payload stores nothing"


def _ledger_verdicts(dsn: str, cases: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Submit each payload to the real ledger, run the executor, return each receipt's error (None: no error)."""
    ids = [uuid.uuid4() for _ in cases]
    with MemoryClient(dsn) as memory:
        for operation_id, (kind, payload) in zip(ids, cases, strict=True):
            memory.submit_operation(operation_id, kind, payload, user_id=ALICE)
        with psycopg.connect(dsn, autocommit=True) as conn:
            while conn.execute("SELECT count(*) FROM prme.run_operations(max_count => 100)").fetchone() != (0,):
                pass
        receipts = [memory.get_receipt(operation_id, user_id=ALICE) for operation_id in ids]
    assert all(r.state in ("committed", "rejected") for r in receipts), [r.state for r in receipts]
    return [r.error for r in receipts]


def test_what_enqueue_refuses_the_executor_rejects_as_an_invalid_payload(db_dsn: str) -> None:
    errors = _ledger_verdicts(db_dsn, [(kind, payload) for kind, payload, _ in REFUSED])
    for (kind, payload, _), error in zip(REFUSED, errors, strict=True):
        assert error is not None and error.get("reason") == "invalid_payload", (kind, payload, error)


def test_what_enqueue_accepts_the_executor_does_not_reject_for_its_shape(db_dsn: str, tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "memories")
    for kind, payload in ACCEPTED:
        outbox.enqueue(kind, payload, user_id=ALICE)
    errors = _ledger_verdicts(db_dsn, ACCEPTED)
    for (kind, payload), error in zip(ACCEPTED, errors, strict=True):
        assert error is None or error.get("reason") != "invalid_payload", (kind, payload, error)


def test_cli_enqueue_exits_2_naming_the_field(tmp_path: Path) -> None:
    pack = tmp_path / "memories"
    result = subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", "enqueue", "reinforce", "--user", ALICE, "--pack", str(pack)],
        input='{"node_id": "not-a-node"}',
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2, result
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "payload field node_id of reinforce must be a UUID" in lines[0], result.stderr
    assert not (pack / "outbox" / "pending").exists() or not any((pack / "outbox" / "pending").iterdir())
