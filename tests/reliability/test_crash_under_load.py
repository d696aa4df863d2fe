"""Issue 5, item 1: the server crashes under load and nothing acknowledged is lost.

A throwaway cluster of this test's own, with durability on (fsync, synchronous_commit,
full_page_writes at their defaults), takes reinforce calls from WORKERS threads, each on
its own connection, each call with a fresh request_id (and now and then a retry of one
already acknowledged). Mid-load the server is stopped with ``pg_ctl stop -m immediate``
(no checkpoint, no shutdown: what a power cut leaves, short of the disk lying) and
restarted, ROUNDS times. Then, from what the clients saw:

* every acknowledged confirmation is present exactly once: one journal record carrying its
  request_id (its key), at the version the client was told;
* no request, acknowledged or not, is present twice; nothing was invented;
* prme.verify_journal reports nothing for any owner; every node equals its replay and
  its version is 1 + its reinforce records;
* retrying every request with its key applies each at most once: acknowledged ones
  replay, in-flight ones that committed replay, in-flight ones that did not apply now;
  a second retry of everything replays and writes nothing.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from reliability_support import (
    add_event,
    add_node,
    journal_problems,
    reinforce,
    replay_all,
    snapshot,
)

from prme_pg import testing

WORKERS = 8
ROUNDS = 3
LOAD_SECONDS = (1.0, 2.0)
OWNERS = {"alice": "default", "bob": "default", "carol": "work"}  # owner -> namespace
NODES_PER_OWNER = 5


@dataclass(frozen=True)
class Request:
    user_id: str
    node_id: uuid.UUID
    evidence_id: uuid.UUID | None
    request_id: uuid.UUID


@dataclass
class Ledger:
    """What the clients saw: every request sent, and the version each acknowledged one got."""

    attempts: dict[uuid.UUID, Request]
    acked: dict[uuid.UUID, int]
    replays_during_load: int = 0
    interrupted: int = 0
    errors: list[BaseException] | None = None

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.errors = []


@pytest.fixture(scope="module")
def durable_cluster() -> Iterator[testing.PostgresCluster]:
    cluster = testing.PostgresCluster.create()  # durability ON: no fast settings
    try:
        yield cluster
    finally:
        cluster.destroy()


def _worker(dsn: str, targets: list[tuple[str, uuid.UUID, uuid.UUID]], ledger: Ledger, seed: int) -> None:
    rng = random.Random(seed)
    mine: list[Request] = []
    try:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError:
        return
    with conn:
        while True:
            if mine and rng.random() < 0.1:
                request = rng.choice(mine)  # a retry of an acknowledged request, under load
                retry = True
            else:
                user_id, node_id, event_id = rng.choice(targets)
                evidence = event_id if rng.random() < 0.5 else None
                request = Request(user_id, node_id, evidence, uuid.uuid4())
                retry = False
                with ledger.lock:
                    ledger.attempts[request.request_id] = request  # recorded before it is sent
            try:
                row = reinforce(conn, request.node_id, request.user_id, request.evidence_id, request.request_id)
            except psycopg.OperationalError:
                with ledger.lock:
                    ledger.interrupted += 1
                return  # the server went away mid-call: this request's outcome is unknown
            except psycopg.Error as exc:
                assert ledger.errors is not None
                ledger.errors.append(exc)
                return
            with ledger.lock:
                if retry:
                    ledger.replays_during_load += 1
                    if not row["replayed"] or row["version"] < ledger.acked[request.request_id]:
                        assert ledger.errors is not None
                        ledger.errors.append(AssertionError(f"retry of {request} answered {row}"))
                        return
                else:
                    if row["replayed"]:
                        assert ledger.errors is not None
                        ledger.errors.append(AssertionError(f"fresh request {request} replayed"))
                        return
                    ledger.acked[request.request_id] = int(row["version"])
                    mine.append(request)


def _check_acknowledged(conn: psycopg.Connection[Any], ledger: Ledger) -> None:
    keys = {
        row[0]: row[1:]
        for row in conn.execute(
            "SELECT request_id, user_id, node_id, evidence_id, node_version FROM prme.journal"
            " WHERE request_id IS NOT NULL"
        )
    }
    per_request = Counter(
        row[0] for row in conn.execute("SELECT request_id FROM prme.journal WHERE request_id IS NOT NULL")
    )
    missing = [rid for rid in ledger.acked if rid not in keys or per_request[rid] != 1]
    assert not missing, f"{len(missing)} acknowledged confirmations lost after a crash: {missing[:5]}"
    for rid, version in ledger.acked.items():
        request = ledger.attempts[rid]
        assert keys[rid] == (request.user_id, request.node_id, request.evidence_id, version), rid
    twice = [rid for rid, count in per_request.items() if count > 1]
    assert not twice, f"requests applied twice: {twice[:5]}"
    invented = [rid for rid in per_request if rid not in ledger.attempts]
    assert not invented, f"journal records for requests never sent: {invented[:5]}"
    assert set(keys) == set(per_request), "every key has one journal record and every keyed record a key"


def _check_consistent(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    assert journal_problems(conn) == []
    nodes, records, bad = replay_all(conn)
    assert bad == []
    wrong = conn.execute(
        "SELECT n.user_id, n.id, n.version, count(j.*) FROM prme.nodes AS n "
        "JOIN prme.journal AS j ON j.user_id = n.user_id AND j.node_id = n.id "
        "GROUP BY 1, 2, 3 HAVING n.version <> count(j.*) "
        "OR n.version <> 1 + count(j.*) FILTER (WHERE j.op = 'reinforce')"
    ).fetchall()
    assert wrong == [], "node versions disagree with their journal"
    return nodes, records


@pytest.mark.slow
def test_crash_under_load_loses_nothing_acknowledged(durable_cluster: testing.PostgresCluster, figures: Any) -> None:
    cluster = durable_cluster
    server = testing.Server(cluster.dsn)
    dsn = server.dsn_for(testing.create_database(server, prefix="prme_crash"))
    testing.install_schema(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings "
                "WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes')"
            ).fetchall()
        )
        assert settings == {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
        targets = []
        for user_id, namespace in OWNERS.items():
            for i in range(NODES_PER_OWNER):
                scope = "personal" if i % 2 else "team"
                node = add_node(conn, user_id, f"{user_id} memory {i}", scope=scope, namespace=namespace)
                event = add_event(conn, user_id, f"{user_id} saw {i}", scope=scope, namespace=namespace)
                targets.append((user_id, node["id"], event["id"]))

    ledger = Ledger(attempts={}, acked={})
    rng = random.Random(5)
    crashes = 0
    for round_no in range(ROUNDS):
        acked_before, interrupted_before = len(ledger.acked), ledger.interrupted
        threads = [
            threading.Thread(target=_worker, args=(dsn, targets, ledger, round_no * 100 + i), daemon=True)
            for i in range(WORKERS)
        ]
        for thread in threads:
            thread.start()
        time.sleep(rng.uniform(*LOAD_SECONDS))
        cluster.stop("immediate")  # mid-load: no checkpoint, backends killed, clients cut off
        crashes += 1
        for thread in threads:
            thread.join(30)
            assert not thread.is_alive(), "a client worker hung after the crash"
        assert ledger.errors == [], ledger.errors
        cluster.start()  # crash recovery replays the WAL
        assert len(ledger.acked) > acked_before, f"round {round_no}: no load was acknowledged"
        assert ledger.interrupted > interrupted_before, f"round {round_no}: the crash cut no call in flight"
        with psycopg.connect(dsn, autocommit=True) as conn:
            _check_acknowledged(conn, ledger)

    with psycopg.connect(dsn, autocommit=True) as conn:
        _check_acknowledged(conn, ledger)
        nodes, records = _check_consistent(conn)
        committed = {row[0] for row in conn.execute("SELECT request_id FROM prme.journal WHERE request_id IS NOT NULL")}
        in_flight = [rid for rid in ledger.attempts if rid not in ledger.acked]
        in_flight_committed = [rid for rid in in_flight if rid in committed]

        # Retry everything with its key, in random order: each applies at most once.
        order = list(ledger.attempts.values())
        rng.shuffle(order)
        replayed = applied = 0
        for request in order:
            row = reinforce(conn, request.node_id, request.user_id, request.evidence_id, request.request_id)
            if request.request_id in committed:
                assert row["replayed"], f"committed request {request} applied again"
                replayed += 1
            else:
                assert not row["replayed"], f"request {request} replayed but was never committed"
                applied += 1
        per_request = Counter(
            row[0] for row in conn.execute("SELECT request_id FROM prme.journal WHERE request_id IS NOT NULL")
        )
        assert set(per_request) == set(ledger.attempts)
        assert set(per_request.values()) == {1}, "a retried request counted twice"
        _check_consistent(conn)

        # A second retry of everything is all replays and writes nothing.
        before = snapshot(conn)
        for request in order:
            assert reinforce(conn, request.node_id, request.user_id, request.evidence_id, request.request_id)[
                "replayed"
            ]
        assert snapshot(conn) == before
        nodes, records = _check_consistent(conn)

    figures(
        "1 crash under load",
        crashes_survived=crashes,
        requests_sent=len(ledger.attempts),
        requests_acknowledged=len(ledger.acked),
        replays_during_load=ledger.replays_during_load,
        calls_cut_by_crash=ledger.interrupted,
        in_flight_found_committed=len(in_flight_committed),
        retries_replayed=replayed + len(order),
        retries_applied=applied,
        nodes_replayed=nodes,
        records_verified=records,
    )
