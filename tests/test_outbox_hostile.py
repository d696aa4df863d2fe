"""The outbox under hostile input (issue 17, items 1 and 2): nothing stops delivery.

* Enqueue bounds a payload's nesting depth and size (prme_pg.validation), so an 800-level
  payload never reaches the ledger.
* A database error is charged by SQLSTATE class (prme_pg.sqlstate), not by psycopg's
  exception type: a record the ledger fails on (a program limit, 54001, which psycopg
  reports as an OperationalError) is rejected with the reason and the others go on; an
  unavailable database (53, 57, 40 ...) keeps every record for the next cycle.
* A file in ``outbox/pending/`` that does not parse (nested 200,000 levels deep) is
  rejected with the reason; one the worker may not read is skipped with a logged reason;
  the rest is delivered.

The ledger's failures are real server errors: a trigger installed on the test clone's
``prme.operations`` raises the SQLSTATE an add_node payload's kind names
(``{"kind": "fault 54001"}``): a field enqueue accepts, so the fault reaches the ledger.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from prme_pg import InvalidInput
from prme_pg.outbox import LedgerUnavailable, Outbox, OutboxSyncer
from prme_pg.sqlstate import database_unavailable
from prme_pg.validation import MAX_JSON_DEPTH

from .hostile_files import deep_json, deep_object, install_trigger, unreadable_by_workers, worker_preexec

ALICE = "alice"
ROOT = Path(__file__).resolve().parent.parent

FAULT = """
    IF NEW.payload->>'kind' = 'fault sleep' THEN
        PERFORM pg_sleep(5);
    ELSIF NEW.payload->>'kind' LIKE 'fault %' THEN
        RAISE EXCEPTION USING ERRCODE = substr(NEW.payload->>'kind', 7), MESSAGE = 'injected fault';
    END IF;
"""


@pytest.fixture
def faulty_dsn(db_dsn: str) -> str:
    """The clone, with submits of a payload whose kind is ``fault SQLSTATE`` failing with that
    SQLSTATE (or sleeping)."""
    return install_trigger(db_dsn, "prme.operations", FAULT)


def _counts(pack: Path) -> dict[str, int]:
    return {state: n for state, (n, _) in Outbox(pack).counts().items()}


def _operations(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT payload->>'content' FROM prme.operations ORDER BY 1").fetchall()
    return [content for (content,) in rows]


def _sync_once(pack: Path, dsn: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", "sync", "--once", "--pack", str(pack), "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
        cwd=ROOT,
        check=False,
        **kwargs,
    )


# -- bounds at enqueue ------------------------------------------------------------------------


def test_enqueue_refuses_a_payload_nested_deeper_than_the_limit_and_stores_nothing(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path)
    deepest = outbox.enqueue("add_event", {"content": "x", "payload": deep_object(MAX_JSON_DEPTH - 1)}, user_id=ALICE)
    assert deepest.state == "pending"  # exactly the limit: the payload is level 1
    for levels in (MAX_JSON_DEPTH, 800, 5000):
        with pytest.raises(InvalidInput, match=f"payload must nest at most {MAX_JSON_DEPTH} levels deep"):
            outbox.enqueue("add_event", {"content": "x", "payload": deep_object(levels)}, user_id=ALICE)
    assert _counts(tmp_path)["pending"] == 1


def test_enqueue_refuses_a_payload_that_contains_itself(tmp_path: Path) -> None:
    payload: dict[str, Any] = {"content": "x"}
    payload["self"] = payload
    with pytest.raises(InvalidInput, match="levels deep"):
        Outbox(tmp_path).enqueue("add_node", payload, user_id=ALICE)


@pytest.mark.parametrize("levels", [800, 200_000])
def test_cli_enqueue_of_a_deep_payload_is_one_line_and_stores_nothing(tmp_path: Path, levels: int) -> None:
    payload = '{"content": "x", "payload": {"v": ' + deep_json(levels) + "}}"
    run = subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", "enqueue", "add_event", "--user", ALICE, "--pack", str(tmp_path)],
        input=payload,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert run.returncode in (1, 2), run.stderr
    assert "levels deep" in run.stderr and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    assert _counts(tmp_path)["pending"] == 0


# -- database errors by SQLSTATE class -----------------------------------------------------------

RECORD_STATES = ["54001", "54000", "22023", "P0001", "0A000", "2F005"]
UNAVAILABLE_STATES = ["53200", "53100", "57014", "57P01", "40001", "40P01", "55P03", "58030", "08006", "XX000"]


def test_sqlstate_classes_decide_whose_failure_it_is(db_dsn: str) -> None:
    """Real server errors (not constructed ones), each raised by the server with its SQLSTATE."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        for sqlstate in RECORD_STATES + UNAVAILABLE_STATES:
            with pytest.raises(psycopg.Error) as caught:
                conn.execute(f"DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '{sqlstate}'; END $$")
            assert caught.value.sqlstate == sqlstate
            assert database_unavailable(caught.value) is (sqlstate in UNAVAILABLE_STATES), sqlstate
    # psycopg calls a stack overflow an OperationalError: the type must not decide.
    assert issubclass(psycopg.errors.StatementTooComplex, psycopg.OperationalError)
    # A connection the server ended, and one that never opened: no SQLSTATE, unavailable.
    with psycopg.connect(db_dsn, autocommit=True) as victim, psycopg.connect(db_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [victim.info.backend_pid])
        with pytest.raises(psycopg.OperationalError) as caught:
            victim.execute("SELECT 1")
        assert database_unavailable(caught.value)
    with pytest.raises(psycopg.OperationalError) as caught:
        psycopg.connect("postgresql://nobody@127.0.0.1:9/none", connect_timeout=2)
    assert database_unavailable(caught.value)


@pytest.mark.parametrize("sqlstate", ["54001", "P0001", "0A000"])
def test_a_record_the_ledger_fails_on_is_rejected_and_the_others_delivered(
    tmp_path: Path, faulty_dsn: str, sqlstate: str
) -> None:
    """Before: the batch rolled back, the cycle counted as "ledger unavailable" and every record,
    good ones included, stayed in submitting for good."""
    outbox = Outbox(tmp_path)
    outbox.enqueue("add_node", {"content": "before"}, user_id=ALICE)
    bad = outbox.enqueue("add_node", {"content": "bad", "kind": f"fault {sqlstate}"}, user_id=ALICE)
    outbox.enqueue("add_node", {"content": "after"}, user_id=ALICE)
    with OutboxSyncer(tmp_path, faulty_dsn) as syncer:
        report = syncer.run_cycle()
        assert (report.accepted, report.rejected) == (2, 1)
        assert syncer.run_cycle().rejected == 0  # run after run, nothing more to reject
    rejected = outbox.get(bad.operation_id)
    assert rejected is not None and rejected.state == "rejected" and rejected.reason is not None
    assert f"({sqlstate}: injected fault)" in rejected.reason
    assert _counts(tmp_path) == {"pending": 0, "submitting": 0, "accepted": 2, "completed": 0, "rejected": 1}
    assert _operations(faulty_dsn) == ["after", "before"]


@pytest.mark.parametrize("sqlstate", ["53200", "57014", "40001", "55P03"])
def test_an_unavailable_database_keeps_every_record_for_the_next_cycle(
    tmp_path: Path, faulty_dsn: str, sqlstate: str
) -> None:
    outbox = Outbox(tmp_path)
    outbox.enqueue("add_node", {"content": "good"}, user_id=ALICE)
    flaky = outbox.enqueue("add_node", {"content": "flaky", "kind": f"fault {sqlstate}"}, user_id=ALICE)
    with OutboxSyncer(tmp_path, faulty_dsn) as syncer:
        with pytest.raises(LedgerUnavailable, match=sqlstate):
            syncer.run_cycle()
        assert _counts(tmp_path)["rejected"] == 0  # nobody's fault: nothing rejected
        assert _counts(tmp_path)["submitting"] == 2
        with psycopg.connect(faulty_dsn, autocommit=True) as conn:
            conn.execute("DROP TRIGGER test_operations ON prme.operations")  # the database recovers
        report = syncer.run_cycle()
    assert (report.accepted, report.rejected) == (2, 0)
    record = outbox.get(flaky.operation_id)
    assert record is not None and record.state == "accepted"
    assert _operations(faulty_dsn) == ["flaky", "good"]


# -- files that do not parse, files that cannot be read -------------------------------------------


def test_a_pending_file_nested_200000_levels_deep_is_rejected_and_the_rest_delivered(
    tmp_path: Path, db_dsn: str
) -> None:
    """Before: RecursionError crashed prme-pg sync on every start."""
    outbox = Outbox(tmp_path)
    outbox.enqueue("add_node", {"content": "good"}, user_id=ALICE)
    deep = tmp_path / "outbox" / "pending" / f"{uuid.uuid4()}.json"
    deep.write_text(deep_json(200_000))
    # A record that parses, whose payload nests past the limit (written by hand, or by an older release).
    record = outbox.enqueue("add_node", {"content": "deep"}, user_id=ALICE)
    path = tmp_path / "outbox" / "pending" / f"{record.operation_id}.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"payload": deep_object(500)}))
    for _ in range(2):
        run = _sync_once(tmp_path, db_dsn)
        assert run.returncode == 0, run.stderr
        assert "Traceback" not in run.stderr
    assert _counts(tmp_path) == {"pending": 0, "submitting": 0, "accepted": 1, "completed": 0, "rejected": 2}
    set_aside = json.loads((tmp_path / "outbox" / "rejected" / deep.name).read_text())
    assert "nested too deeply" in set_aside["reason"] and set_aside["size"] == 400_001
    refused = json.loads((tmp_path / "outbox" / "rejected" / path.name).read_text())
    assert f"nests deeper than {MAX_JSON_DEPTH} levels" in refused["reason"]
    assert _operations(db_dsn) == ["good"]


def test_a_pending_file_the_worker_may_not_read_is_skipped_and_the_rest_delivered(tmp_path: Path, db_dsn: str) -> None:
    """Before: PermissionError crashed prme-pg sync on every start. The file is left in place
    (it may be a good record whose permissions were changed by mistake), logged, counted."""
    outbox = Outbox(tmp_path)
    outbox.enqueue("add_node", {"content": "good"}, user_id=ALICE)
    locked = outbox.enqueue("add_node", {"content": "locked"}, user_id=ALICE)
    path = tmp_path / "outbox" / "pending" / f"{locked.operation_id}.json"
    unreadable_by_workers(path)
    run = _sync_once(tmp_path, db_dsn, preexec_fn=worker_preexec())
    assert run.returncode == 0, run.stderr
    assert f"outbox record {locked.operation_id} in pending/ is not readable" in " ".join(run.stderr.split())
    assert "Traceback" not in run.stderr
    assert _counts(tmp_path) == {"pending": 1, "submitting": 0, "accepted": 1, "completed": 0, "rejected": 0}
    assert _operations(db_dsn) == ["good"]
    path.chmod(0o600)  # fixed by the operator: delivered by the next cycle
    run = _sync_once(tmp_path, db_dsn, preexec_fn=worker_preexec())
    assert run.returncode == 0, run.stderr
    assert _operations(db_dsn) == ["good", "locked"]


def test_the_sync_connection_runs_under_a_statement_timeout(tmp_path: Path, faulty_dsn: str) -> None:
    """A submit the server takes too long over is cancelled (57014: unavailable, retried), not waited for."""
    outbox = Outbox(tmp_path)
    outbox.enqueue("add_node", {"content": "slow", "kind": "fault sleep"}, user_id=ALICE)
    with OutboxSyncer(tmp_path, faulty_dsn, statement_timeout=0.3) as syncer:
        started = time.monotonic()
        with pytest.raises(LedgerUnavailable, match="57014"):
            syncer.run_cycle()
        assert time.monotonic() - started < 4
    assert _counts(tmp_path) == {"pending": 0, "submitting": 1, "accepted": 0, "completed": 0, "rejected": 0}
