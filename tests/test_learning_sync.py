"""The learning queue end to end: hook -> sync (extraction, delivery, publishing) -> ledger -> snapshots.

Real PostgreSQL, real pack folders, real subprocesses: the hook is ``prme-pg hook``; the
sync worker runs in its own process, one cycle at a time (the ledger's executor runs in
between, as ``prme-pg worker`` would), and is killed with ``os._exit`` at every named
point of the learning worker and of the outbox; restarting it must reach the same end
state with no operation applied twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from prme_pg import MemoryClient, testing
from prme_pg.extractors import derive_operation_id
from prme_pg.learning import FAULT_ENV, FAULT_EXIT_CODE, FAULT_POINTS, LearningQueue
from prme_pg.outbox import CRASH_ENV, CRASH_EXIT_CODE, CRASH_POINTS, Outbox

from .test_learning import make_plugin

ALICE = "alice"
HELLO = [{"type": "message", "role": "user", "text": "hello"}]
OPERATIONS = uuid.uuid5(uuid.NAMESPACE_URL, "urn:prme-pg:operations")


def sync_command(pack: Path, dsn: str, extractor: str) -> list[str]:
    """One cycle of ``prme-pg sync``: extraction, delivery, publishing."""
    return [
        sys.executable,
        "-m",
        "prme_pg.cli",
        "sync",
        "--once",
        "--json",
        "--pack",
        str(pack),
        "--dsn",
        dsn,
        "--extractor",
        extractor,
    ]


def sync_once(pack: Path, dsn: str, *, extractor: str = "builtin", env: dict[str, str] | None = None) -> int:
    done = subprocess.run(
        sync_command(pack, dsn, extractor),
        env=os.environ | (env or {}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, FAULT_EXIT_CODE, CRASH_EXIT_CODE), done.stderr
    return done.returncode


def execute_ledger(dsn: str) -> int:
    """Run the ledger's executor until it has nothing left (what prme-pg worker does)."""
    total = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            rows = conn.execute("SELECT outcome FROM prme.run_operations(100, 'test')").fetchall()
            if not rows:
                return total
            total += len(rows)


def hook(pack: Path, document: object, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", "hook", "--pack", str(pack), *extra],
        input=document if isinstance(document, str) else json.dumps(document),
        capture_output=True,
        text=True,
        timeout=60,
    )


def settled(pack: Path) -> bool:
    learning = LearningQueue(pack)
    counts = learning.counts()
    outbox = Outbox(pack).counts()
    return (
        counts["pending"][0] == counts["processing"][0] == 0
        and outbox["pending"][0] == outbox["submitting"][0] == outbox["accepted"][0] == 0
        and learning.publications.counts()["waiting"][0] == 0
    )


def drive(pack: Path, dsn: str, *, env: dict[str, str] | None = None, extractor: str = "builtin") -> list[int]:
    """Sync and execute until everything settled; ``env`` (a fault) applies until the first crash."""
    exits = []
    for _ in range(12):
        exits.append(sync_once(pack, dsn, env=env, extractor=extractor))
        if exits[-1] != 0:
            env = None
        execute_ledger(dsn)
        if settled(pack):
            return exits
    raise AssertionError(f"the pack did not settle: {exits}")


def seed(dsn: str) -> tuple[uuid.UUID, uuid.UUID]:
    """Alice's memories before the session, each scope published once."""
    with MemoryClient(dsn) as memory:
        tabs = memory.add_node("Prefers tabs for indentation", user_id=ALICE, scope="project-x").id
        berlin = memory.add_node("Lives in Berlin", user_id=ALICE).id
        memory.publish_snapshot("project-x", user_id=ALICE)
        memory.publish_snapshot("personal", user_id=ALICE)
    return tabs, berlin


def session(tabs: uuid.UUID, berlin: uuid.UUID) -> dict[str, Any]:
    return {
        "session_id": "session-7",
        "user_id": ALICE,
        "items": [
            {
                "type": "shown",
                "memories": [
                    {"node_id": str(tabs), "content": "Prefers tabs for indentation"},
                    {"node_id": str(berlin), "content": "Lives in Berlin"},
                ],
            },
            {"type": "message", "role": "user", "text": "Remember that I deploy on Fridays."},
            {"type": "confirmation", "node_id": str(berlin)},
            {"type": "message", "role": "user", "text": "No, I prefer spaces for indentation, not tabs."},
            {"type": "tool_result", "success": True, "used_node_ids": [str(tabs)], "tool": "editor"},
        ],
    }


def end_state(dsn: str) -> dict[str, Any]:
    """Everything the session may change, without ids or times that differ between runs."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        nodes = conn.execute(
            "SELECT id::text, scope, content, version, confidence_base::text, reinforcement_boost::text "
            "FROM prme.nodes WHERE user_id = %s ORDER BY content",
            (ALICE,),
        ).fetchall()
        outcomes = conn.execute(
            # Through node_outcomes: a confirmation's outcome is its journal record, not a row.
            "SELECT n.content, o.outcome, o.recorded_by, o.thread_id FROM prme.nodes AS n "
            "CROSS JOIN LATERAL prme.node_outcomes(n.user_id, n.id) AS o "
            "WHERE n.user_id = %s ORDER BY 1, 2",
            (ALICE,),
        ).fetchall()
        operations = conn.execute(
            "SELECT operation_id::text, kind, state FROM prme.operations WHERE user_id = %s ORDER BY 1", (ALICE,)
        ).fetchall()
        heads = conn.execute(
            "SELECT scope, seq, generation_id FROM prme.snapshot_heads WHERE user_id = %s ORDER BY scope", (ALICE,)
        ).fetchall()
        inbox = conn.execute("SELECT count(*) FROM prme.correction_inbox WHERE user_id = %s", (ALICE,)).fetchone()
    return {"nodes": nodes, "outcomes": outcomes, "operations": operations, "heads": heads, "inbox": inbox}


def test_a_scripted_session_ends_with_exactly_the_expected_memories(tmp_path: Path, db_dsn: str) -> None:
    tabs, berlin = seed(db_dsn)
    pack = tmp_path / "pack"
    with MemoryClient(db_dsn) as memory:
        before = {scope: memory.current_snapshot(scope, user_id=ALICE) for scope in ("personal", "project-x")}

    stored = hook(pack, session(tabs, berlin))
    assert stored.returncode == 0, stored.stderr
    record_id = uuid.UUID(stored.stdout.strip())
    assert LearningQueue(pack).get(record_id)[0] == "pending"

    # Cycle 1 extracts and submits; the executor commits; cycle 2 sees the receipts and publishes.
    assert sync_once(pack, db_dsn) == 0
    assert LearningQueue(pack).get(record_id)[0] == "completed"
    assert {r.state for s in ("accepted",) for r in Outbox(pack).records(s)} == {"accepted"}
    assert execute_ledger(db_dsn) == 4
    assert sync_once(pack, db_dsn) == 0
    assert settled(pack)

    ids = {
        kind: derive_operation_id(record_id, index, kind)
        for index, kind in [(1, "add_node"), (2, "reinforce"), (3, "link_correction"), (4, "record_outcome")]
    }
    assert LearningQueue(pack).get(record_id)[1]["operation_ids"] == [
        str(ids[k]) for k in ("add_node", "reinforce", "link_correction", "record_outcome")
    ]
    fridays = uuid.uuid5(OPERATIONS, str(ids["add_node"]))

    end = end_state(db_dsn)
    assert end["operations"] == sorted((str(i), k, "committed") for k, i in ids.items())
    assert [(n[1], n[2], n[3], n[4], n[5]) for n in end["nodes"]] == [
        ("personal", "Lives in Berlin", 2, "0.5500", "0.1500"),
        ("project-x", "Prefers tabs for indentation", 1, "0.5000", "0.0000"),
        # "remember that I deploy on Fridays", stored as a statement about the user (issue 33)
        ("personal", "The user deploys on Fridays", 1, "0.5000", "0.0000"),
    ]
    assert next(n[0] for n in end["nodes"] if n[2] == "The user deploys on Fridays") == str(fridays)
    assert end["outcomes"] == [
        ("Lives in Berlin", "explicit_reinforcement", "reinforce", None),
        ("Prefers tabs for indentation", "explicit_correction", "link_correction", "session-7"),
        ("Prefers tabs for indentation", "implicit_success", "record_outcome", "session-7"),
    ]
    assert end["inbox"] == (0,)
    # personal changed (a new memory, a reinforcement): exactly one new generation.
    # project-x only gained outcomes: not republished.
    heads = {scope: (seq, generation) for scope, seq, generation in end["heads"]}
    assert heads["project-x"] == (1, before["project-x"].generation_id)
    assert heads["personal"][0] == 2
    with MemoryClient(db_dsn) as memory:
        personal = memory.current_snapshot("personal", user_id=ALICE)
    assert personal.generation_id == heads["personal"][1] != before["personal"].generation_id
    assert [item["content"] for item in json.loads(personal.document)["items"]] == [
        "Lives in Berlin",
        "The user deploys on Fridays",
    ]
    published = LearningQueue(pack).publications.get(str(record_id))
    assert published == ("published", {**published[1], "scopes": [f"{ALICE}/personal"]})

    # Nothing left to do: another cycle changes nothing.
    assert sync_once(pack, db_dsn) == 0
    assert end_state(db_dsn) == end


@pytest.mark.parametrize("fault", [f"learning:{p}" for p in FAULT_POINTS] + [f"outbox:{p}" for p in CRASH_POINTS])
def test_a_worker_killed_at_any_point_restarts_to_the_same_end_state(
    tmp_path: Path, pg_server: Any, template_db: str, fault: str
) -> None:
    from prme_pg import testing

    where, point = fault.split(":")
    env = {FAULT_ENV: point} if where == "learning" else {CRASH_ENV: point}
    states = []
    for crash in (False, True):
        name = testing.create_database(pg_server, template=template_db)
        dsn = pg_server.dsn_for(name)
        try:
            tabs, berlin = seed(dsn)
            pack = tmp_path / f"pack-{crash}"
            assert hook(pack, session(tabs, berlin)).returncode == 0
            exits = drive(pack, dsn, env=env if crash else None)
            if crash:
                assert exits.count(FAULT_EXIT_CODE if where == "learning" else CRASH_EXIT_CODE) == 1, exits
            state = end_state(dsn)
            # Node and operation ids derive from the record id, which differs between the two packs.
            state["nodes"] = [n[1:] for n in state["nodes"]]
            state["operations"] = sorted((k, s) for _, k, s in state["operations"])
            with MemoryClient(dsn) as memory:
                state["heads"] = [
                    (scope, seq, json.loads(memory.current_snapshot(scope, user_id=ALICE).document)["items"])
                    for scope, seq, _ in state["heads"]
                ]
            for _scope, _, items in state["heads"]:
                for item in items:
                    item.pop("id")
            state["learning"] = {s: c for s, (c, _) in LearningQueue(pack).counts().items()}
            state["outbox"] = {s: c for s, (c, _) in Outbox(pack).counts().items()}
            states.append(state)
        finally:
            testing.drop_database(pg_server, name)
    clean, crashed = states
    assert crashed == clean
    assert clean["operations"] == sorted(
        [
            ("add_node", "committed"),
            ("reinforce", "committed"),
            ("link_correction", "committed"),
            ("record_outcome", "committed"),
        ]
    )
    assert clean["learning"] == {"pending": 0, "processing": 0, "completed": 1, "rejected": 0}
    assert clean["outbox"]["completed"] == 4 and clean["outbox"]["rejected"] == 0


def test_a_plugin_extractor_drives_sync_and_rejections_keep_their_reason(tmp_path: Path, db_dsn: str) -> None:
    site = make_plugin(tmp_path)
    pack = tmp_path / "pack"
    kept = hook(
        pack, {"session_id": "s", "user_id": ALICE, "items": [{"type": "message", "role": "user", "text": "hello"}]}
    )
    refused = hook(
        pack, {"session_id": "s", "user_id": ALICE, "items": [{"type": "message", "role": "user", "text": "reject me"}]}
    )
    env = {"PYTHONPATH": str(site)}
    for _ in range(2):
        done = subprocess.run(
            sync_command(pack, db_dsn, "shout"),
            env=os.environ | env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        execute_ledger(db_dsn)
    queue = LearningQueue(pack)
    assert queue.get(kept.stdout.strip())[0] == "completed"
    state, document = queue.get(refused.stdout.strip())
    assert state == "rejected" and document["reason"] == "shout cannot handle this record"
    with MemoryClient(db_dsn) as memory:
        assert [n.content for n in memory.list_nodes(user_id=ALICE)] == ["HELLO"]
    # Without the plugin on the path, sync refuses to start with the name it could not find.
    done = subprocess.run(sync_command(pack, db_dsn, "shout"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no extractor named 'shout'" in done.stderr


def test_invalid_hook_input_exits_2_and_stores_nothing(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    for document, message in [
        ("not json", "not one JSON document"),
        ("", "stdin is empty"),
        (
            {"session_id": "s", "user_id": ALICE, "items": [{"type": "confirmation", "node_id": "x"}]},
            "items[0].node_id",
        ),
        ({"session_id": "s", "items": [{"type": "message", "role": "user", "text": "x"}]}, "no user_id"),
    ]:
        done = hook(pack, document)
        assert done.returncode == 2, (document, done.stdout, done.stderr)
        assert message in done.stderr and done.stdout == ""
    assert {s: c for s, (c, _) in LearningQueue(pack).counts().items()} == {
        "pending": 0,
        "processing": 0,
        "completed": 0,
        "rejected": 0,
    }
    done = hook(
        pack, {"session_id": "s", "items": [{"type": "message", "role": "user", "text": "x"}]}, "--user-id", "bob"
    )
    assert done.returncode == 0, done.stderr
    assert LearningQueue(pack).get(done.stdout.strip())[1]["user_id"] == "bob"


def test_queue_status_shows_both_queues(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    for _ in range(2):
        assert (
            hook(pack, {"session_id": "s", "user_id": ALICE, "items": [{"type": "shown", "memories": []}]}).returncode
            == 0
        )
    Outbox(pack).enqueue("add_node", {"content": "tea"}, user_id=ALICE)
    status = subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", "queue", "status", "--pack", str(pack), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    document = json.loads(status.stdout)
    assert {s: v["count"] for s, v in document["learning"].items()} == {
        "pending": 2,
        "processing": 0,
        "completed": 0,
        "rejected": 0,
    }
    assert document["learning"]["pending"]["oldest"] is not None and document["learning"]["rejected"]["oldest"] is None
    assert document["outbox"]["pending"]["count"] == 1 and document["outbox"]["completed"]["count"] == 0
    table = subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", "queue", "status", "--pack", str(pack)],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"COLUMNS": "160"},
    )
    assert table.returncode == 0 and "learning" in table.stdout and "outbox" in table.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", "queue", "status", "--pack", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1 and "no memory pack" in missing.stderr
    assert not (tmp_path / "nope").exists()


def test_sigterm_stops_sync_between_records(tmp_path: Path, db_dsn: str) -> None:
    """SIGTERM mid-extraction: sync exits 0, no record is left half-done, and the next run finishes the rest."""
    pack = tmp_path / "pack"
    queue = LearningQueue(pack)
    for n in range(60):
        queue.enqueue(f"s{n}", [{"type": "message", "role": "user", "text": f"remember that fact {n}"}], user_id=ALICE)
    command = sync_command(pack, db_dsn, "builtin")
    command.remove("--once")
    sync = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while queue.counts()["completed"][0] == 0 and sync.poll() is None:
            time.sleep(0.005)
        sync.send_signal(signal.SIGTERM)
        _, stderr = sync.communicate(timeout=60)
    finally:
        if sync.poll() is None:
            sync.kill()
    assert sync.returncode == 0, stderr
    counts = {s: c for s, (c, _) in queue.counts().items()}
    assert counts["processing"] == 0 and counts["rejected"] == 0
    assert counts["completed"] + counts["pending"] == 60
    assert counts["pending"] > 0  # it stopped between records, not after all of them
    assert (
        Outbox(pack).counts()["pending"][0] + sum(Outbox(pack).counts()[s][0] for s in ("accepted", "completed"))
        == (counts["completed"])
    )
    drive(pack, db_dsn)
    with MemoryClient(db_dsn) as memory:
        assert len(memory.list_nodes(user_id=ALICE, max_count=100)) == 60


def test_sync_refuses_a_stale_limit_that_is_not_positive(tmp_path: Path, db_dsn: str) -> None:
    done = subprocess.run(
        [*sync_command(tmp_path / "pack", db_dsn, "builtin"), "--stale-after", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--stale-after must be positive" in done.stderr


def test_a_database_without_migrations_changes_nothing_in_the_learning_queue(
    tmp_path: Path, pg_server: testing.Server
) -> None:
    """Not ready to ingest: every `sync --once` is exit 1 and the record is untouched, however often it runs."""
    name = testing.create_database(pg_server, prefix="prme_bare")  # no migrations: no prme schema
    try:
        pack = tmp_path / "pack"
        document = {
            "session_id": "s",
            "user_id": ALICE,
            "items": [
                {"type": "shown", "memories": [{"node_id": str(uuid.uuid4())}]},
                {"type": "message", "role": "user", "text": "No, that is wrong."},
            ],
        }
        record_id = hook(pack, document).stdout.strip()
        before = LearningQueue(pack).get(record_id)
        for _ in range(7):  # more than max_attempts
            done = subprocess.run(
                sync_command(pack, pg_server.dsn_for(name), "builtin"), capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 1 and "not ready to ingest" in done.stderr, done.stderr
        assert LearningQueue(pack).get(record_id) == before  # still pending, no attempt counted
    finally:
        testing.drop_database(pg_server, name)


def test_queue_status_counts_without_creating_anything(tmp_path: Path) -> None:
    """A pack with only a learning queue: the outbox counts 0, and no folder or file is created."""
    pack = tmp_path / "pack"
    assert hook(pack, {"session_id": "s", "user_id": ALICE, "items": HELLO}).returncode == 0
    for leftover in (pack / "learning" / "publications", pack / "learning" / "rejected"):
        for path in sorted(leftover.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        leftover.rmdir()
    (pack / "learning" / "pending" / "._stray.json").write_text("{}")  # not a record
    before = sorted(pack.rglob("*"))
    status = subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", "queue", "status", "--pack", str(pack), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    document = json.loads(status.stdout)
    assert {s: v["count"] for s, v in document["learning"].items()} == {
        "pending": 1,
        "processing": 0,
        "completed": 0,
        "rejected": 0,
    }
    assert {v["count"] for v in document["outbox"].values()} == {0}
    assert sorted(pack.rglob("*")) == before
