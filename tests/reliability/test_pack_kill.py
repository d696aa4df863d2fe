"""Issue 5, item 3: a DuckDB memory pack whose process is SIGKILLed mid-call loses nothing acknowledged.

A child process opens the pack with prme_pg.MemoryClient and reinforces random memories
in a loop, each call with a fresh request id (half with evidence). It writes the request
to its ledger (flushed and fsynced) BEFORE the call and its acknowledgement (the version
returned) AFTER. The parent SIGKILLs it after a random number of acknowledgements, several
rounds. After every kill the pack reopens and:

* prme.verify_journal (the engine) and the independent Python verifier report nothing;
* every node equals its replay, and its version is 1 plus its reinforce records;
* every acknowledged request has exactly one journal record, at the version acknowledged;
  no request has two; no record names a request that was never sent.

At the end every recorded request (acknowledged or not) is retried with its key: the ones
that committed are replays, the others apply now, and each request then has exactly one
record; a second retry of everything is all replays and writes nothing.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from prme_pg import MemoryClient

USER = "alice"
ROUNDS = 4

CHILD = textwrap.dedent(
    """
    import os, random, sys, uuid
    from prme_pg import MemoryClient

    pack, ledger_path, targets_path = sys.argv[1:4]
    targets = [line.split() for line in open(targets_path).read().splitlines()]
    rng = random.Random()
    with MemoryClient(pack) as memory, open(ledger_path, "a", buffering=1) as ledger:
        ledger.write("OPEN\\n"); ledger.flush(); os.fsync(ledger.fileno())
        while True:
            node_id, evidence_id = rng.choice(targets)
            evidence = evidence_id if rng.random() < 0.5 else "-"
            request_id = uuid.uuid4()
            ledger.write(f"REQ {request_id} {node_id} {evidence}\\n")
            ledger.flush(); os.fsync(ledger.fileno())
            node = memory.reinforce(
                node_id, None if evidence == "-" else evidence, user_id="alice", request_id=request_id
            )
            ledger.write(f"ACK {request_id} {node.version}\\n")
            ledger.flush()
    """
)


def read_ledger(path: Path) -> tuple[dict[uuid.UUID, tuple[uuid.UUID, uuid.UUID | None]], dict[uuid.UUID, int]]:
    """(requests sent: request -> (node, evidence), acknowledged: request -> version).

    A line cut by the kill (no newline) is ignored: a REQ line is complete before the call."""
    sent: dict[uuid.UUID, tuple[uuid.UUID, uuid.UUID | None]] = {}
    acked: dict[uuid.UUID, int] = {}
    text = path.read_text() if path.exists() else ""
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            continue
        parts = line.split()
        if parts[0] == "REQ":
            sent[uuid.UUID(parts[1])] = (uuid.UUID(parts[2]), None if parts[3] == "-" else uuid.UUID(parts[3]))
        elif parts[0] == "ACK":
            acked[uuid.UUID(parts[1])] = int(parts[2])
    return sent, acked


def in_call(path: Path) -> bool:
    """Whether the child's last complete ledger line is a request (a call in flight)."""
    lines = path.read_text().splitlines(keepends=True)
    complete = [line for line in lines if line.endswith("\n")]
    return bool(complete) and complete[-1].startswith("REQ ")


def check_pack(memory: MemoryClient, sent: dict[uuid.UUID, Any], acked: dict[uuid.UUID, int]) -> int:
    """The checks after a reopen; returns the number of journal records verified."""
    assert memory.verify_journal(user_id=USER) == []
    assert memory.verify_journal(user_id=USER, independent=True) == []
    records, heads = memory.journal_records(user_id=USER)
    reinforces = Counter(r.node_id for r in records if r.op == "reinforce")
    for head in heads:
        replay = memory.replay_node(head.node_id, user_id=USER)
        assert replay.matches, (head.node_id, replay.problem)
        assert memory.get_node(head.node_id, user_id=USER).version == 1 + reinforces[head.node_id]
    keyed = Counter(r.request_id for r in records if r.request_id is not None)
    assert [key for key, count in keyed.items() if count > 1] == [], "a request counted twice"
    assert set(keyed) <= set(sent), "a journal record names a request that was never sent"
    versions = {r.request_id: r.node_version for r in records if r.request_id is not None}
    for request_id, version in acked.items():
        assert keyed[request_id] == 1, f"acknowledged request {request_id} is lost"
        assert versions[request_id] == version
    return len(records)


def test_pack_killed_mid_call_loses_nothing_and_retries_count_once(tmp_path: Path, figures: Any) -> None:
    pack, ledger, targets = tmp_path / "pack", tmp_path / "ledger.txt", tmp_path / "targets.txt"
    with MemoryClient(pack) as memory:
        lines = []
        for index in range(6):
            namespace = "default" if index < 4 else "work"
            scope = "personal" if index % 2 == 0 else "team"
            node = memory.add_node(f"memory {index}", user_id=USER, namespace=namespace, scope=scope)
            event = memory.add_event(f"evidence {index}", user_id=USER, namespace=namespace, scope=scope)
            lines.append(f"{node.id} {event.id}\n")
    targets.write_text("".join(lines))

    rng = random.Random()
    kills = verified = 0
    for _ in range(ROUNDS):
        before = len(read_ledger(ledger)[1])
        want = before + rng.randint(20, 120)
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(pack), str(ledger), str(targets)])
        try:
            deadline = time.monotonic() + 60
            while len(read_ledger(ledger)[1]) < want or not in_call(ledger):
                assert child.poll() is None, f"the child exited with {child.returncode}"
                assert time.monotonic() < deadline, "the child made no progress"
                time.sleep(0.002)
            os.kill(child.pid, signal.SIGKILL)  # a call is in flight: its REQ is the last line
        finally:
            child.kill()
            child.wait(30)
        assert child.returncode == -signal.SIGKILL
        kills += 1
        sent, acked = read_ledger(ledger)
        with MemoryClient(pack) as memory:  # the pack opens after the kill (DuckDB replays its WAL)
            verified += check_pack(memory, sent, acked)

    sent, acked = read_ledger(ledger)
    assert len(acked) >= ROUNDS * 20
    in_flight = set(sent) - set(acked)
    # Each kill lands while a call is in flight (or just after it returned, before its ACK).
    assert 0 < len(in_flight) <= ROUNDS
    with MemoryClient(pack) as memory:
        records, _ = memory.journal_records(user_id=USER)
        committed = {r.request_id for r in records if r.request_id is not None}
        requests = list(sent.items())
        rng.shuffle(requests)
        applied = replayed = 0
        for request_id, (node_id, evidence_id) in requests:
            node = memory.reinforce(node_id, evidence_id, user_id=USER, request_id=request_id)
            assert node.replayed == (request_id in committed), request_id
            applied += not node.replayed
            replayed += node.replayed
        assert applied == len(in_flight - committed)
        check_pack(memory, sent, acked)
        records, _ = memory.journal_records(user_id=USER)
        keyed = Counter(r.request_id for r in records if r.request_id is not None)
        assert keyed == Counter(set(sent)), "after the retries every request counts exactly once"
        total = len(records)
        for request_id, (node_id, evidence_id) in requests:
            assert memory.reinforce(node_id, evidence_id, user_id=USER, request_id=request_id).replayed
        assert len(memory.journal_records(user_id=USER)[0]) == total, "a replay wrote a record"
        verified += check_pack(memory, sent, acked)

    figures(
        "3 DuckDB pack killed (SIGKILL)",
        kills_survived=kills,
        requests_acknowledged=len(acked),
        requests_in_flight_at_kill=len(in_flight),
        in_flight_that_had_committed=len(in_flight & committed),
        retries=2 * len(sent),
        records_verified=verified,
    )
