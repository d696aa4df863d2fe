"""The learning queue: records on disk, the built-in extractor, derived ids, reclaiming, plugins.

The end-to-end runs (hook -> sync -> ledger -> snapshots, crashes at every state) are
in tests/test_learning_sync.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from prme_pg import AsyncMemoryClient, MemoryClient
from prme_pg.errors import InvalidInput, NotFoundError, PrmeError
from prme_pg.extractors import (
    LEARNING_NAMESPACE,
    BuiltinExtractor,
    ExtractorContext,
    LearningRecord,
    PlannedOperation,
    about_the_user,
    derive_operation_id,
    load_extractor,
    remembered_facts,
)
from prme_pg.learning import (
    FinishedOperation,
    LearningQueue,
    LearningSync,
    LearningWorker,
    correction_detector,
    record_from_document,
)
from prme_pg.outbox import Outbox, OutboxSyncer
from prme_pg.spool import time_ordered_uuid

ALICE = "alice"
SHOWN_TABS = "11111111-1111-4111-8111-111111111111"
SHOWN_BERLIN = "22222222-2222-4222-8222-222222222222"


def session_items() -> list[dict[str, Any]]:
    """A scripted session: a remember, a confirmation of a shown memory, a correction, a tool success."""
    return [
        {
            "type": "shown",
            "memories": [
                {"node_id": SHOWN_TABS, "content": "Prefers tabs for indentation"},
                {"node_id": SHOWN_BERLIN, "content": "Lives in Berlin"},
            ],
        },
        {"type": "message", "role": "user", "text": "Remember that I deploy on Fridays. Thanks!"},
        {"type": "message", "role": "assistant", "text": "Noted. Remember: I am an assistant."},
        {"type": "confirmation", "node_id": SHOWN_BERLIN},
        {"type": "message", "role": "user", "text": "No, I prefer spaces for indentation now."},
        {"type": "tool_result", "success": True, "used_node_ids": [SHOWN_TABS, SHOWN_TABS], "tool": "editor"},
        {"type": "tool_result", "success": False, "used_node_ids": [SHOWN_BERLIN]},
        {"type": "confirmation", "node_id": "33333333-3333-4333-8333-333333333333"},
    ]


def test_facts_are_stored_as_statements_about_the_user() -> None:
    """Issue 33: "remember that I prefer tabs" is alice's memory "The user prefers tabs", not "I prefer tabs"."""
    assert about_the_user("I prefer tabs") == "The user prefers tabs"
    assert about_the_user("I'm vegan and my editor is vim") == "The user is vegan and the user's editor is vim"
    assert about_the_user("I always watch films") == "The user always watches films"
    assert about_the_user("I don't fly") == "The user doesn't fly"
    assert about_the_user("alice likes tea") == "alice likes tea"


def test_remembered_facts() -> None:
    assert remembered_facts("Remember that I use tabs.") == ["The user uses tabs"]
    assert remembered_facts("please remember: my cat is Tom! And you?") == ["The user's cat is Tom"]
    assert remembered_facts("Hi. Remember I deploy on Fridays") == ["The user deploys on Fridays"]
    assert remembered_facts("Remember x.y is fine. Also remember that z") == ["x.y is fine", "z"]
    assert remembered_facts("Do you remember the thing?") == []
    assert remembered_facts("remember") == []


def test_operation_ids_are_uuid5_of_record_item_kind_part() -> None:
    assert uuid.uuid5(uuid.NAMESPACE_URL, "urn:prme-pg:learning") == LEARNING_NAMESPACE
    record_id = uuid.UUID("018f0000-0000-7000-8000-000000000001")
    expected = uuid.uuid5(LEARNING_NAMESPACE, f"{record_id}/3/reinforce/0")
    assert derive_operation_id(record_id, 3, "reinforce") == expected
    assert derive_operation_id(str(record_id).upper(), 3, "reinforce", 0) == expected
    assert derive_operation_id(record_id, 3, "reinforce", 1) != expected
    assert derive_operation_id(record_id, 4, "reinforce") != expected
    assert derive_operation_id(record_id, 3, "add_node") != expected
    assert PlannedOperation("reinforce", {}, 3).operation_id(record_id) == expected


def test_builtin_extractor_plans_the_scripted_session(tmp_path: Path, conn: psycopg.Connection[Any]) -> None:
    queue = LearningQueue(tmp_path / "pack")
    record = queue.enqueue("session-1", session_items(), user_id=ALICE, scope="project-x")
    detector = correction_detector(lambda: conn)
    planned = load_extractor("builtin", ExtractorContext(is_correction=detector)).extract(record)
    assert planned == [
        PlannedOperation("add_node", {"content": "The user deploys on Fridays", "scope": "project-x"}, 1),
        PlannedOperation("reinforce", {"node_id": SHOWN_BERLIN}, 3),
        PlannedOperation(
            "link_correction",
            {
                "message": "No, I prefer spaces for indentation now.",
                "candidate_node_ids": [SHOWN_TABS, SHOWN_BERLIN],
                "thread_id": "session-1",
            },
            4,
        ),
        PlannedOperation(
            "record_outcome", {"node_id": SHOWN_TABS, "outcome": "implicit_success", "thread_id": "session-1"}, 5
        ),
    ]
    # Deterministic: the same record plans the same operations again.
    assert BuiltinExtractor(ExtractorContext(is_correction=detector)).extract(record) == planned


def test_correction_detector_asks_the_database(conn: psycopg.Connection[Any]) -> None:
    detector = correction_detector(lambda: conn)
    assert detector(["No, I use spaces.", "Thanks, that helped", "Actually it is Munich."]) == [True, False, True]
    assert detector([]) == []


def test_extraction_without_a_correction_detector_is_rejected_not_guessed(tmp_path: Path) -> None:
    from prme_pg.extractors import ExtractionError

    record = LearningQueue(tmp_path).enqueue("s", session_items(), user_id=ALICE)
    with pytest.raises(ExtractionError, match="correction detector"):
        BuiltinExtractor().extract(record)
    # Without shown memories there is nothing to link against, so no question is asked.
    plain = LearningQueue(tmp_path).enqueue(
        "s", [{"type": "message", "role": "user", "text": "remember that I like tea"}], user_id=ALICE
    )
    assert BuiltinExtractor().extract(plain) == [
        PlannedOperation("add_node", {"content": "The user likes tea", "scope": "personal"}, 0)
    ]


def test_enqueue_stores_one_durable_pending_record(tmp_path: Path) -> None:
    queue = LearningQueue(tmp_path / "pack")
    record = queue.enqueue("session-1", session_items(), user_id=ALICE)
    state, document = queue.get(record.record_id)
    assert state == "pending"
    assert document["record_id"] == str(record.record_id) and record.record_id.version == 7
    assert document["items"] == session_items()
    assert document["attempts"] == 0 and document["format"] == 1
    assert record_from_document(document) == record
    files = list((tmp_path / "pack" / "learning" / "pending").iterdir())
    assert [f.name for f in files] == [f"{record.record_id}.json"]
    assert queue.counts()["pending"][0] == 1
    with pytest.raises(NotFoundError):
        queue.get(uuid.uuid4())


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "must be a JSON object"),
        ({"session_id": "s", "user_id": ALICE}, "needs session_id and items"),
        ({"session_id": "s", "user_id": ALICE, "items": []}, "items must be a non-empty list"),
        ({"session_id": "", "user_id": ALICE, "items": [{"type": "shown", "memories": []}]}, "session_id"),
        ({"session_id": "s", "items": [{"type": "shown", "memories": []}]}, "no user_id"),
        ({"session_id": "s", "user_id": " a", "items": [{"type": "shown", "memories": []}]}, "user_id"),
        ({"session_id": "s", "user_id": ALICE, "scope": "Bad", "items": [{"type": "shown", "memories": []}]}, "scope"),
        ({"session_id": "s", "user_id": ALICE, "items": [{"type": "mood"}]}, r"items\[0\].type"),
        ({"session_id": "s", "user_id": ALICE, "items": [{"type": "message", "role": "user"}]}, "lacks text"),
        (
            {"session_id": "s", "user_id": ALICE, "items": [{"type": "message", "role": "bot", "text": "x"}]},
            r"items\[0\].role",
        ),
        ({"session_id": "s", "user_id": ALICE, "items": [{"type": "confirmation", "node_id": "nope"}]}, "UUID"),
        ({"session_id": "s", "user_id": ALICE, "items": [{"type": "message", "role": "user", "text": "a\x00"}]}, "NUL"),
        (
            {"session_id": "s", "user_id": ALICE, "items": [{"type": "tool_result", "success": "yes"}]},
            "true or false",
        ),
        ({"session_id": "s", "user_id": ALICE, "extra": 1, "items": []}, "unknown field"),
        (
            {
                "session_id": "s",
                "user_id": ALICE,
                "items": [{"type": "shown", "memories": [{"node_id": SHOWN_TABS, "x": 1}]}],
            },
            "unknown field",
        ),
    ],
)
def test_invalid_documents_are_refused_and_nothing_is_stored(tmp_path: Path, document: Any, message: str) -> None:
    queue = LearningQueue(tmp_path)
    with pytest.raises(InvalidInput, match=message):
        queue.enqueue_document(document)
    assert {state: count for state, (count, _) in queue.counts().items()} == dict.fromkeys(
        ("pending", "processing", "completed", "rejected"), 0
    )
    assert list((tmp_path / "learning" / "tmp").iterdir()) == []


def test_user_id_flag_must_agree_with_the_document(tmp_path: Path) -> None:
    queue = LearningQueue(tmp_path)
    items = [{"type": "message", "role": "user", "text": "hi"}]
    assert queue.enqueue_document({"session_id": "s", "items": items}, user_id=ALICE).user_id == ALICE
    with pytest.raises(InvalidInput, match="differs"):
        queue.enqueue_document({"session_id": "s", "user_id": "bob", "items": items}, user_id=ALICE)


def test_stale_and_orphaned_claims_are_reclaimed(tmp_path: Path) -> None:
    queue = LearningQueue(tmp_path, stale_after=timedelta(minutes=10))
    items = [{"type": "message", "role": "user", "text": "hi"}]
    fresh, stale, orphan = (queue.enqueue("s", items, user_id=ALICE) for _ in range(3))
    now = datetime.now(UTC)
    for record in (fresh, stale, orphan):
        assert queue.claim(str(record.record_id), now=now) is not None
    assert queue.claim(str(fresh.record_id)) is None  # already claimed

    # "stale" was claimed 11 minutes ago; "orphan" by a process that has exited.
    name = str(stale.record_id)
    document = queue.get(name)[1]
    queue.records.move(name, "processing", "processing", document | {"claimed_at": "2000-01-01T00:00:00.000000Z"})
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    name = str(orphan.record_id)
    document = queue.get(name)[1]
    host = document["claimed_by"].rpartition(":")[0]
    queue.records.move(name, "processing", "processing", document | {"claimed_by": f"{host}:{int(dead.stdout)}"})

    assert sorted(queue.reclaim(now=now + timedelta(minutes=1))) == sorted(
        [str(stale.record_id), str(orphan.record_id)]
    )
    assert queue.get(fresh.record_id)[0] == "processing"
    for record in (stale, orphan):
        state, document = queue.get(record.record_id)
        assert state == "pending" and document["claimed_at"] is None and document["attempts"] == 1
    # The fresh claim goes stale after the limit.
    assert queue.reclaim(now=now + timedelta(minutes=11)) == [str(fresh.record_id)]


def test_enqueue_works_while_another_process_holds_the_pack(tmp_path: Path) -> None:
    """The hook needs no DuckDB lock: a process keeps the pack open and the hook still stores."""
    pack = tmp_path / "pack"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from prme_pg import MemoryClient; c = MemoryClient(sys.argv[1]); "
            "print('open', flush=True); sys.stdin.read()",
            str(pack),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        with MemoryClient(pack) as memory:
            record = memory.enqueue_learning("s", [{"type": "message", "role": "user", "text": "hi"}], user_id=ALICE)
            with pytest.raises(InvalidInput, match="session_id"):
                memory.enqueue_learning("", [{"type": "message", "role": "user", "text": "hi"}], user_id=ALICE)

        async def from_async() -> LearningRecord:
            client = AsyncMemoryClient(pack)  # not opened: the learning queue needs no DuckDB file
            try:
                items = [{"type": "message", "role": "user", "text": "yo"}]
                return await client.enqueue_learning("s2", items, user_id=ALICE)
            finally:
                await client.close()

        second = asyncio.run(from_async())
        assert LearningQueue(pack).get(record.record_id)[0] == "pending"
        assert LearningQueue(pack).get(second.record_id)[0] == "pending"
        assert LearningQueue(pack).counts()["pending"][0] == 2
    finally:
        holder.communicate("")


def test_a_plugin_extractor_is_found_through_its_entry_point(tmp_path: Path) -> None:
    site = make_plugin(tmp_path)
    script = textwrap.dedent(
        """
        import json, sys
        from prme_pg.extractors import available_extractors, load_extractor
        from prme_pg.learning import LearningQueue
        record = LearningQueue(sys.argv[1]).enqueue(
            "s", [{"type": "message", "role": "user", "text": "hello"}], user_id="alice")
        ops = load_extractor("shout").extract(record)
        print(json.dumps({"available": available_extractors(), "ops": [[o.kind, dict(o.payload)] for o in ops]}))
        """
    )
    env = os.environ | {"PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "pack")], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert "shout" in result["available"] and "builtin" in result["available"]
    assert result["ops"] == [["add_node", {"content": "HELLO", "scope": "personal"}]]
    with pytest.raises(InvalidInput, match="no extractor named 'shout'"):
        load_extractor("shout")  # not on this process's path


PLUGIN = '''
"""A test extractor: every user message becomes a memory, upper-cased."""
from prme_pg.extractors import ExtractionError, Message, PlannedOperation


class ShoutExtractor:
    def __init__(self, context):
        self.context = context

    def extract(self, record):
        planned = []
        for item in record.items:
            if isinstance(item, Message) and item.role == "user":
                if "reject me" in item.text:
                    raise ExtractionError("shout cannot handle this record")
                payload = {"content": item.text.upper(), "scope": record.scope}
                planned.append(PlannedOperation("add_node", payload, item.index))
        return planned
'''


def make_plugin(tmp_path: Path) -> Path:
    """A tiny installed distribution on a path of its own: a module and its *.dist-info/entry_points.txt."""
    site = tmp_path / "site"
    dist_info = site / "shout_extractor-1.0.dist-info"
    dist_info.mkdir(parents=True)
    (site / "shout_extractor.py").write_text(PLUGIN)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: shout-extractor\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text("[prme_pg.extractors]\nshout = shout_extractor:ShoutExtractor\n")
    return site


class _Flaky:
    """An extractor whose failures are chosen by the test (a plugin with a bug, say)."""

    def __init__(self, error: Exception | None = None, planned: list[PlannedOperation] | None = None) -> None:
        self.error, self.planned = error, planned or []

    def extract(self, record: Any) -> list[PlannedOperation]:
        if self.error is not None:
            raise self.error
        return self.planned


def _worker(tmp_path: Path, extractor: Any, max_attempts: int = 3) -> tuple[LearningQueue, Outbox, LearningWorker]:
    queue, outbox = LearningQueue(tmp_path), Outbox(tmp_path)
    return queue, outbox, LearningWorker(queue, extractor, outbox, max_attempts=max_attempts)


HELLO = [{"type": "message", "role": "user", "text": "hello"}]


def test_failing_extraction_is_retried_then_rejected_with_the_reason(tmp_path: Path) -> None:
    queue, outbox, worker = _worker(tmp_path, _Flaky(RuntimeError("model timed out")), max_attempts=2)
    record = queue.enqueue("s", HELLO, user_id=ALICE)
    stats = worker.extract_pending()
    assert (stats.retried, stats.rejected) == (1, 0)
    state, document = queue.get(record.record_id)
    assert state == "pending" and document["last_error"] == "RuntimeError: model timed out"
    stats = worker.extract_pending()
    state, document = queue.get(record.record_id)
    assert state == "rejected" and document["reason"] == "attempts_exhausted: RuntimeError: model timed out"
    assert outbox.counts()["pending"][0] == 0


def test_a_record_that_keeps_killing_the_worker_is_rejected(tmp_path: Path) -> None:
    queue, _, worker = _worker(tmp_path, _Flaky(), max_attempts=2)
    name = str(queue.enqueue("s", HELLO, user_id=ALICE).record_id)
    queue.records.move(name, "pending", "pending", queue.get(name)[1] | {"attempts": 2})  # two claims died
    assert worker.extract_pending().rejected == 1
    state, document = queue.get(name)
    assert state == "rejected" and document["reason"] == "attempts_exhausted: claimed 3 times without finishing"


@pytest.mark.parametrize(
    ("planned", "reason"),
    [
        ([PlannedOperation("forget_everything", {}, 0)], "unknown operation kind 'forget_everything'"),
        ([PlannedOperation("add_node", {"content": "x"}, 7)], "item 7, which does not exist"),
        ([PlannedOperation("add_node", {"content": "x"}, 0)] * 2, "two operations with the same id"),
        ([PlannedOperation("add_node", {"content": float("nan")}, 0)], "invalid add_node payload"),
        (
            [PlannedOperation("add_node", {"content": "x"}, 0, dependencies=tuple(uuid.uuid4() for _ in range(101)))],
            "at most 100 dependencies",
        ),
        ([PlannedOperation("add_node", {"content": "x"}, 0, dependencies=("no-uuid",))], "must be a UUID"),
    ],
)
def test_plans_that_cannot_be_delivered_reject_the_record_and_enqueue_nothing(
    tmp_path: Path, planned: list[PlannedOperation], reason: str
) -> None:
    queue, outbox, worker = _worker(
        tmp_path, _Flaky(planned=[PlannedOperation("add_node", {"content": "ok"}, 0, 9), *planned])
    )
    record = queue.enqueue("s", HELLO, user_id=ALICE)
    assert worker.extract_pending().rejected == 1
    state, document = queue.get(record.record_id)
    assert state == "rejected" and reason in document["reason"]
    assert outbox.counts()["pending"][0] == 0


def test_re_extraction_reuses_the_outbox_records(tmp_path: Path) -> None:
    planned = [
        PlannedOperation("add_node", {"content": "tea"}, 0),
        PlannedOperation("add_node", {"content": "x"}, 0, 1),
    ]
    queue, outbox, worker = _worker(tmp_path, _Flaky(planned=planned))
    record = queue.enqueue("s", HELLO, user_id=ALICE)
    name = str(record.record_id)
    outbox.enqueue(
        "add_node", {"content": "tea"}, user_id=ALICE, operation_id=planned[0].operation_id(record.record_id)
    )
    assert worker.extract_pending().completed == 1
    assert [r.payload for r in outbox.records("pending")] == [{"content": "tea"}, {"content": "x"}]
    assert queue.get(name)[1]["operation_ids"] == [str(p.operation_id(record.record_id)) for p in planned]
    # A different plan under an id already used rejects the record instead of guessing.
    other = queue.enqueue("s", HELLO, user_id=ALICE)
    outbox.enqueue(
        "add_node", {"content": "coffee"}, user_id=ALICE, operation_id=planned[0].operation_id(other.record_id)
    )
    assert worker.extract_pending().rejected == 1
    assert "re-extraction planned a different operation" in queue.get(other.record_id)[1]["reason"]


def test_one_scope_failing_to_publish_does_not_block_the_others(tmp_path: Path) -> None:
    queue, _, worker = _worker(tmp_path, _Flaky())
    ops = {
        uuid.uuid4(): FinishedOperation(uuid.uuid4(), "add_node", {"content": "a", "scope": "work"}, "completed", None),
        uuid.uuid4(): FinishedOperation(uuid.uuid4(), "add_node", {"content": "b"}, "completed", None),
        uuid.uuid4(): FinishedOperation(uuid.uuid4(), "add_node", {"content": "c", "scope": "gone"}, "rejected", None),
        uuid.uuid4(): FinishedOperation(uuid.uuid4(), "record_outcome", {"node_id": SHOWN_TABS}, "completed", None),
    }
    ids = list(ops)
    queue.publications.put("r1", {"user_id": ALICE, "operation_ids": [str(i) for i in ids[:2]]}, "waiting")
    queue.publications.put("r2", {"user_id": ALICE, "operation_ids": [str(i) for i in ids[1:]]}, "waiting")
    queue.publications.put("r3", {"user_id": ALICE, "operation_ids": [str(uuid.uuid4())]}, "waiting")  # not delivered
    published: list[str] = []
    broken = {"work"}

    def publish(user_id: str, scope: str) -> str:
        if scope in broken:
            raise RuntimeError(f"{scope} is locked")
        published.append(scope)
        return f"gen-{scope}"

    stats = worker.publish_ready(ops.get, lambda user, node: None, publish)
    assert published == ["personal"]
    assert stats.publish_failures == [(ALICE, "work", "RuntimeError: work is locked")]
    assert queue.publications.names("waiting") == ["r1", "r3"]
    assert queue.publications.get("r2") == (
        "published",
        {"user_id": ALICE, "operation_ids": [str(i) for i in ids[1:]], "scopes": [f"{ALICE}/personal"]},
    )
    broken.clear()
    worker.publish_ready(ops.get, lambda user, node: None, publish)
    assert published == ["personal", "personal", "work"]
    assert queue.publications.names("waiting") == ["r3"]


def test_enqueue_learning_needs_a_pack(db_dsn: str) -> None:
    with MemoryClient(db_dsn) as memory, pytest.raises(PrmeError, match="memory pack"):
        memory.enqueue_learning("s", HELLO, user_id=ALICE)


def test_the_builtin_extractor_is_registered_in_pyproject() -> None:
    import importlib
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    target = project["entry-points"]["prme_pg.extractors"]["builtin"]
    module, _, name = target.partition(":")
    assert getattr(importlib.import_module(module), name) is BuiltinExtractor


def test_a_hook_retried_with_its_record_id_stores_one_record(tmp_path: Path) -> None:
    from prme_pg.errors import IdempotencyConflict

    queue = LearningQueue(tmp_path)
    record_id = "018f0000-0000-7000-8000-0000000000aa"
    document = {"record_id": record_id, "session_id": "s", "user_id": ALICE, "items": HELLO}
    first = queue.enqueue_document(document)
    assert str(first.record_id) == record_id
    queue.claim(record_id)  # the worker took it meanwhile
    assert queue.enqueue_document(dict(document)) == first
    assert queue.get(record_id)[0] == "processing"
    with pytest.raises(IdempotencyConflict, match="other content"):
        queue.enqueue_document(document | {"items": [{"type": "message", "role": "user", "text": "bye"}]})
    with pytest.raises(InvalidInput, match="record_id must be a UUID"):
        queue.enqueue_document(document | {"record_id": "42"})
    assert sum(count for count, _ in queue.counts().values()) == 1


def test_hooks_in_several_processes_at_once_each_store_their_records(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        from prme_pg.learning import LearningQueue
        queue = LearningQueue(sys.argv[1])
        for n in range(25):
            record = queue.enqueue(sys.argv[2], [{"type": "message", "role": "user", "text": f"m{n}"}], user_id="alice")
            print(record.record_id)
        """
    )
    writers = [
        subprocess.Popen([sys.executable, "-c", script, str(tmp_path), f"s{w}"], stdout=subprocess.PIPE, text=True)
        for w in range(4)
    ]
    printed = [line for w in writers for line in w.communicate(timeout=120)[0].split()]
    assert all(w.returncode == 0 for w in writers)
    queue = LearningQueue(tmp_path)
    names = queue.records.names("pending")
    assert sorted(printed) == names and len(set(names)) == 100
    sessions = [queue.get(name)[1]["session_id"] for name in names]
    assert {s: sessions.count(s) for s in set(sessions)} == {f"s{w}": 25 for w in range(4)}
    assert list((tmp_path / "learning" / "tmp").iterdir()) == []


def test_damaged_and_stray_files_neither_block_the_queue_nor_count(tmp_path: Path) -> None:
    """A torn record is rejected with its reason (its bytes not copied); strays and symlinks are left alone."""
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-API-KEY-123")
    queue, _, worker = _worker(tmp_path / "pack", _Flaky(planned=[PlannedOperation("add_node", {"content": "ok"}, 0)]))
    torn_pending, torn_processing = time_ordered_uuid(), time_ordered_uuid()
    good = queue.enqueue("s", HELLO, user_id=ALICE)
    learning = tmp_path / "pack" / "learning"
    (learning / "pending" / f"{torn_pending}.json").write_text("{torn SECRET")
    (learning / "processing" / f"{torn_processing}.json").write_text("[]")
    (learning / "pending" / f"._{good.record_id}.json").write_text("resource fork")
    (learning / "pending" / f"{time_ordered_uuid()}.json").symlink_to(secret)
    assert queue.counts()["pending"][0] == 2  # the good one and the torn one; no stray, no symlink

    stats = worker.extract_pending()
    assert (stats.completed, stats.rejected) == (1, 2)
    assert queue.get(good.record_id)[0] == "completed"
    for name, reason in ((torn_pending, "does not parse"), (torn_processing, "not a JSON object")):
        state, document = queue.get(name)
        assert state == "rejected" and reason in document["reason"]
    assert queue.get(torn_pending)[1]["size"] == len("{torn SECRET")
    assert {s: c for s, (c, _) in queue.counts().items()} == {
        "pending": 0,
        "processing": 0,
        "completed": 1,
        "rejected": 2,
    }
    leaked = [p for p in learning.rglob("*") if p.is_file() and not p.is_symlink() and b"SECRET" in p.read_bytes()]
    assert leaked == []


def test_a_damaged_publication_intent_is_set_aside_with_its_reason(tmp_path: Path) -> None:
    queue, _, worker = _worker(tmp_path, _Flaky())
    done = FinishedOperation(uuid.uuid4(), "add_node", {"content": "a"}, "completed", None)
    queue.publications.put("r1", {"user_id": ALICE}, "waiting")  # no operation_ids
    queue.publications.put("r2", {"user_id": ALICE, "operation_ids": ["not-a-uuid"]}, "waiting")
    queue.publications.put("r3", {"user_id": ALICE, "operation_ids": [str(done.operation_id)]}, "waiting")
    published: list[str] = []

    def publish(user_id: str, scope: str) -> str:
        published.append(scope)
        return f"gen-{scope}"

    worker.publish_ready({done.operation_id: done}.get, lambda user, node: None, publish)
    assert published == ["personal"]
    assert queue.publications.names("waiting") == []
    assert queue.publications.names("rejected") == ["r1", "r2"]
    assert "operation_ids" in queue.publications.get("r1")[1]["reason"]


def test_under_the_sync_lock_every_claim_of_another_process_is_reclaimed(tmp_path: Path, db_dsn: str) -> None:
    """The sync lock proves no other worker runs: a claim left by a worker on another host is not waited for."""
    queue = LearningQueue(tmp_path)
    record = queue.enqueue("s", HELLO, user_id=ALICE)
    name = str(record.record_id)
    document = queue.claim(name)
    assert document is not None
    queue.records.move(name, "processing", "processing", document | {"claimed_by": "old-hostname:1"})
    assert queue.reclaim() == []  # without the lock: a fresh claim from another host is respected
    learning = LearningSync(tmp_path)
    with OutboxSyncer(tmp_path, db_dsn, stages=[learning.stage]) as syncer:
        syncer.run_cycle()
    state, document = queue.get(name)
    assert state == "completed" and document["attempts"] == 2


def test_a_database_error_puts_the_record_back_without_counting_the_attempt(tmp_path: Path) -> None:
    """Any psycopg.Error is the database's trouble (a missing grant, say), not the record's: never rejected for it."""
    error = psycopg.errors.InsufficientPrivilege("permission denied for function is_correction")
    queue, outbox, worker = _worker(tmp_path, _Flaky(error), max_attempts=2)
    record = queue.enqueue("s", HELLO, user_id=ALICE)
    for _ in range(4):  # more than max_attempts
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            worker.extract_pending()
    state, document = queue.get(record.record_id)
    assert state == "pending" and document["attempts"] == 0
    assert document["last_error"] == "InsufficientPrivilege: permission denied for function is_correction"
    assert outbox.counts()["pending"][0] == 0


def test_a_database_refusing_the_records_data_is_charged_then_rejected(tmp_path: Path) -> None:
    """DataError and IntegrityError are about the record's own data: retried, then rejected,
    so one such record cannot hold up the learning queue for good; the next one goes on."""
    error = psycopg.errors.InvalidTextRepresentation("invalid input syntax for type uuid")
    flaky = _Flaky(error)
    queue, outbox, worker = _worker(tmp_path, flaky, max_attempts=2)
    record = queue.enqueue("s", HELLO, user_id=ALICE)
    stats = worker.extract_pending()
    assert (stats.retried, stats.rejected) == (1, 0)
    state, document = queue.get(record.record_id)
    assert state == "pending" and document["attempts"] == 1
    assert document["last_error"] == "InvalidTextRepresentation: invalid input syntax for type uuid"
    worker.extract_pending()
    state, document = queue.get(record.record_id)
    assert state == "rejected"
    assert document["reason"] == "attempts_exhausted: InvalidTextRepresentation: invalid input syntax for type uuid"
    flaky.error = None  # the records behind it are extracted
    later = queue.enqueue("s", HELLO, user_id=ALICE)
    worker.extract_pending()
    assert queue.get(later.record_id)[0] == "completed"
    assert outbox.counts()["pending"][0] == 0
