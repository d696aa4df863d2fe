"""The learning queue under hostile input (issue 17, items 1 and 2): nothing stops the stage.

* ``prme-pg hook`` refuses a document nested past the limit with one line (before: a
  200,000-level document was a RecursionError traceback).
* A file in ``learning/pending/`` that does not parse (200,000 levels deep) is rejected
  with the reason; one the worker may not read is skipped with a logged reason, and
  delivered once it can be read; every other record is extracted and delivered (before:
  the stage failed at that file in every cycle and nothing behind it was extracted).
* A database error is charged by SQLSTATE class: a program limit (54001, which psycopg
  reports as an OperationalError) is the record's, retried then rejected; an unavailable
  database (57014, a statement timeout) is not the record's.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from prme_pg.learning import LearningQueue, LearningWorker
from prme_pg.outbox import Outbox
from prme_pg.spool import time_ordered_uuid
from prme_pg.validation import MAX_JSON_DEPTH

from .hostile_files import deep_json, unreadable_by_workers, worker_preexec
from .test_learning_sync import ALICE, HELLO, execute_ledger, hook, sync_command

ROOT = Path(__file__).resolve().parent.parent


def _sync(pack: Path, dsn: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        sync_command(pack, dsn, "builtin"),
        env=os.environ | {"COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        preexec_fn=worker_preexec(),
        check=False,
    )


def _states(queue: LearningQueue) -> dict[str, int]:
    return {state: n for state, (n, _) in queue.counts().items()}


def _remembered(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT content FROM prme.nodes ORDER BY content").fetchall()
    return [content for (content,) in rows]


def _session(text: str) -> dict[str, Any]:
    return {"session_id": "s1", "user_id": ALICE, "items": [{"type": "message", "role": "user", "text": text}]}


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH + 1, 200_000])
def test_hook_refuses_a_document_nested_past_the_limit_in_one_line(tmp_path: Path, levels: int) -> None:
    document = '{"session_id": "s1", "user_id": "alice", "items": ' + deep_json(levels) + "}"
    run = hook(tmp_path, document)
    assert run.returncode == 2, run.stderr
    assert f"the hook document must nest at most {MAX_JSON_DEPTH} levels deep" in " ".join(run.stderr.split())
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert _states(LearningQueue(tmp_path))["pending"] == 0


def test_a_pending_file_nested_200000_levels_deep_is_rejected_and_the_rest_extracted(
    tmp_path: Path, db_dsn: str
) -> None:
    queue = LearningQueue(tmp_path)
    deep = queue.root / "pending" / f"{time_ordered_uuid()}.json"  # first in line
    deep.write_text(deep_json(200_000))
    assert hook(tmp_path, _session("remember that I prefer tabs")).returncode == 0
    run = _sync(tmp_path, db_dsn)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    execute_ledger(db_dsn)
    assert _states(queue) == {"pending": 0, "processing": 0, "completed": 1, "rejected": 1}
    set_aside = json.loads((queue.root / "rejected" / deep.name).read_text())
    assert "nested too deeply" in set_aside["reason"] and set_aside["size"] == 400_001
    assert _remembered(db_dsn) == ["The user prefers tabs"]


def test_a_pending_file_nested_past_the_limit_is_rejected(tmp_path: Path, db_dsn: str) -> None:
    """One that parses (a few hundred levels: no RecursionError) but nests deeper than any record can."""
    queue = LearningQueue(tmp_path)
    name = str(time_ordered_uuid())
    queue.records.put(name, {"format": 1, "record_id": name, "items": json.loads(deep_json(300))}, "pending")
    run = _sync(tmp_path, db_dsn)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert _states(queue)["rejected"] == 1
    reason = json.loads((queue.root / "rejected" / f"{name}.json").read_text())["reason"]
    assert f"nests deeper than {MAX_JSON_DEPTH} levels" in reason


def test_a_pending_file_the_worker_may_not_read_is_skipped_then_extracted_once_readable(
    tmp_path: Path, db_dsn: str
) -> None:
    queue = LearningQueue(tmp_path)
    locked = queue.enqueue_document(_session("remember that I prefer tea"))
    assert hook(tmp_path, _session("remember that I prefer tabs")).returncode == 0
    path = queue.root / "pending" / f"{locked.record_id}.json"
    unreadable_by_workers(path)
    run = _sync(tmp_path, db_dsn)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert f"learning record {locked.record_id} in pending/ is not readable" in " ".join(run.stderr.split())
    execute_ledger(db_dsn)
    assert _states(queue) == {"pending": 1, "processing": 0, "completed": 1, "rejected": 0}
    assert _remembered(db_dsn) == ["The user prefers tabs"]
    path.chmod(0o600)
    assert _sync(tmp_path, db_dsn).returncode == 0
    execute_ledger(db_dsn)
    assert _states(queue)["completed"] == 2
    assert _remembered(db_dsn) == ["The user prefers tabs", "The user prefers tea"]


class _Raises:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def extract(self, record: Any) -> list[Any]:
        raise self.error


def _server_error(dsn: str, sqlstate: str) -> psycopg.Error:
    """A real error from the server with this SQLSTATE."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute(f"DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '{sqlstate}'; END $$")
        except psycopg.Error as exc:
            return exc
    raise AssertionError("no error")


def test_a_program_limit_is_the_records_trouble_not_the_databases(tmp_path: Path, db_dsn: str) -> None:
    """Before: 54001 is an OperationalError, so it was taken for a database outage: the record went
    back uncharged in every cycle, for good, and was never rejected."""
    error = _server_error(db_dsn, "54001")
    assert isinstance(error, psycopg.OperationalError)
    queue, outbox = LearningQueue(tmp_path), Outbox(tmp_path)
    worker = LearningWorker(queue, _Raises(error), outbox, max_attempts=2)
    record = queue.enqueue("s", HELLO, user_id=ALICE)
    later = queue.enqueue("s", HELLO, user_id=ALICE, record_id=uuid.uuid4())
    stats = worker.extract_pending()
    assert stats.retried == 1  # charged (a retry waits for the next cycle, as for any failure)
    for _ in range(3):
        worker.extract_pending()
    for r in (record, later):
        state, document = queue.get(r.record_id)
        assert state == "rejected" and document["reason"].startswith("attempts_exhausted: StatementTooComplex")


def test_a_statement_timeout_is_the_databases_trouble(tmp_path: Path, db_dsn: str) -> None:
    error = _server_error(db_dsn, "57014")
    queue, outbox = LearningQueue(tmp_path), Outbox(tmp_path)
    worker = LearningWorker(queue, _Raises(error), outbox, max_attempts=1)
    record = queue.enqueue("s", HELLO, user_id=ALICE)
    for _ in range(3):
        with pytest.raises(psycopg.errors.QueryCanceled):
            worker.extract_pending()
    state, document = queue.get(record.record_id)
    assert state == "pending" and document["attempts"] == 0
