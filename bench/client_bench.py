"""What the Python clients cost on top of the engines (issue 3, item 5).

Run from the repository root:

    .venv/bin/python bench/client_bench.py            # ~2 minutes
    .venv/bin/python bench/client_bench.py --quick    # ~40 seconds
    .venv/bin/python bench/client_bench.py --json     # one JSON document instead of the table
    .venv/bin/python bench/client_bench.py --recall-only   # pack recall alone (~20 seconds)

Two comparisons, each measured side by side in one run:

* PostgreSQL: ``MemoryClient.reinforce`` (argument parsing, a pool checkout, the row
  factory building a frozen ``Node``, error translation) against a raw psycopg
  ``SELECT * FROM prme.reinforce(...)`` with tuple rows -- on the same connection:
  the client's pool holds exactly one, and the raw loop borrows it. Target: the
  client costs at most 25 % more, i.e. client/raw throughput >= 0.8. Measured with
  every commit flushed (the server defaults) and with synchronous_commit off, which
  makes the server faster and so the client's share larger; and on replays, the
  cheapest call the server has.
* DuckDB: a pack's ``MemoryClient.reinforce`` (validation, the pack lock, the retry
  loop, dataclasses) against the very same statements (the constants of
  prme_pg.backends.duckdb) run by hand in one DuckDB transaction on a raw connection,
  with no Python in between. Target: >= 0.8 x. And the same call against the same rows
  written by hand as a user would without prme (issue 15, item 4: SELECT the node, build a
  1.2 KB record in Python, UPDATE, INSERT, COMMIT; no validation, no replay check, no
  conflict detection beyond DuckDB's own). Target: >= 0.5 x.

And pack recall (issue 18): ``MemoryClient.recall`` on a pack of 10,000 memories of one
owner, median of single calls. Target: <= 20 ms.

The server is a throwaway cluster from this machine's binaries (prme_pg.testing).
Calls run single-threaded, in rounds that alternate client and raw, so load from
other processes hits both alike. The table gives total calls over total time across the
rounds, and the median (and range) of the rounds' own ratios, which decides the verdict: a
burst of load in one round moves it least. For a stable median use 5 or more rounds, e.g.
``--pack-reinforce-only --rounds 7 --seconds 3``. The Python CPU time per call
(time.process_time) is shown as well: it is what the client adds, and other load disturbs
it much less than wall-clock time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import psycopg
from rich.console import Console
from rich.table import Table

from prme_pg import MemoryClient, testing
from prme_pg.backends import duckdb as pack_sql
from prme_pg.backends.duckdb import PACK_FILE

USER = "bench"
NODES = 200
RAW_REINFORCE = (
    "SELECT * FROM prme.reinforce(node_id => %(node_id)s, user_id => %(user_id)s, "
    "evidence_id => %(evidence_id)s, request_id => %(request_id)s)"
)


@dataclass
class Side:
    calls: int = 0
    seconds: float = 0.0
    cpu: float = 0.0

    @property
    def rate(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu / self.calls if self.calls else 0.0


@dataclass
class Comparison:
    name: str
    raw: Side
    client: Side
    target: float = 0.8
    #: client/raw throughput of each round (the two sides measured back to back).
    round_ratios: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.client.rate / self.raw.rate if self.raw.rate else 0.0

    @property
    def median_ratio(self) -> float:
        return statistics.median(self.round_ratios) if self.round_ratios else self.ratio

    @property
    def ok(self) -> bool:
        return self.median_ratio >= self.target


def measure(side: Side, call: Callable[[], Any], seconds: float) -> float:
    """Run call repeatedly for about `seconds`, adding to side's totals; the calls per second."""
    wall, cpu = time.perf_counter(), time.process_time()
    calls, deadline = 0, wall + seconds
    while True:
        for _ in range(10):
            call()
        calls += 10
        if time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - wall
    side.calls += calls
    side.seconds += elapsed
    side.cpu += time.process_time() - cpu
    return calls / elapsed


def compare(
    name: str, raw: Callable[[], Any], client: Callable[[], Any], rounds: int, seconds: float, target: float = 0.8
) -> Comparison:
    """Alternating rounds of raw and client calls, each side measured back to back."""
    result = Comparison(name, Side(), Side(), target)
    raw(), client()  # warm up: prepared statements, caches
    for i in range(rounds):
        pair = [("raw", result.raw, raw), ("client", result.client, client)]
        rates = {label: measure(side, call, seconds) for label, side, call in (pair if i % 2 == 0 else pair[::-1])}
        result.round_ratios.append(rates["client"] / rates["raw"])
    return result


# -- PostgreSQL --------------------------------------------------------------------------


def postgres_comparisons(rounds: int, seconds: float) -> list[Comparison]:
    cluster = testing.PostgresCluster.create()  # server defaults: every commit flushed
    server = testing.Server(cluster.dsn, cluster)
    try:
        name = testing.create_database(server, prefix="prme_client_bench")
        dsn = server.dsn_for(name)
        testing.install_schema(dsn)
        results = []
        with MemoryClient(dsn, min_size=1, max_size=1) as memory:
            nodes = [memory.add_node(f"memory {i}", user_id=USER).id for i in range(NODES)]
            pool = memory.backend.pool  # type: ignore[attr-defined]
            turn = iter(range(1 << 62))

            def client_fresh() -> None:
                memory.reinforce(nodes[next(turn) % NODES], user_id=USER, request_id=uuid.uuid4())

            def raw_fresh() -> None:
                with pool.connection() as conn:  # the very connection the client uses
                    conn.execute(
                        RAW_REINFORCE,
                        {
                            "node_id": nodes[next(turn) % NODES],
                            "user_id": USER,
                            "evidence_id": None,
                            "request_id": uuid.uuid4(),
                        },
                    ).fetchall()

            results.append(compare("PostgreSQL reinforce, commits flushed", raw_fresh, client_fresh, rounds, seconds))

            with psycopg.connect(server.dsn, autocommit=True) as admin:
                admin.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
            pool.drain()  # new connections pick the setting up
            results.append(
                compare("PostgreSQL reinforce, synchronous_commit off", raw_fresh, client_fresh, rounds, seconds)
            )

            key = uuid.uuid4()
            memory.reinforce(nodes[0], user_id=USER, request_id=key)
            params = {"node_id": nodes[0], "user_id": USER, "evidence_id": None, "request_id": key}

            def client_replay() -> None:
                memory.reinforce(nodes[0], user_id=USER, request_id=key)

            def raw_replay() -> None:
                with pool.connection() as conn:
                    conn.execute(RAW_REINFORCE, params).fetchall()

            results.append(compare("PostgreSQL reinforce replay", raw_replay, client_replay, rounds, seconds))
        return results
    finally:
        server.close()


_compare = compare

# -- DuckDB ------------------------------------------------------------------------------


#: Memories made beforehand for archive_node (a memory is archived once): enough for the rounds.
ARCHIVE_POOL = 6000


def _new_pack(root: Path, label: str) -> tuple[Path, list[uuid.UUID], list[uuid.UUID]]:
    """A pack with NODES memories to write to, and ARCHIVE_POOL more to archive one by one."""
    path = root / label
    with MemoryClient(path, embedder=False) as memory:
        nodes = [memory.add_node(f"memory {i}", user_id=USER).id for i in range(NODES)]
        pool = []
        for start in range(0, ARCHIVE_POOL, 1000):
            items = [{"content": f"to archive {i}"} for i in range(start, start + 1000)]
            pool += [node.id for node in memory.add_nodes(items, user_id=USER)]
    return path, nodes, pool


def duckdb_comparisons(rounds: int, seconds: float, only: str | None = None) -> list[Comparison]:
    """The pack's writes against the same work by hand; ``only``: the comparisons whose name
    holds it."""

    def compare(name: str, raw: Callable[[], Any], client: Callable[[], Any], *args: Any, **kw: Any) -> Comparison:
        if only is not None and only not in name:
            return Comparison(name, Side(), Side(), kw.get("target", 0.8))
        return _compare(name, raw, client, *args, **kw)

    root = Path(tempfile.mkdtemp(prefix="prme-client-bench-"))
    try:
        client_path, client_nodes, client_pool = _new_pack(root, "client")
        raw_path, raw_nodes, raw_pool = _new_pack(root, "raw")
        # Words only: the comparisons are of the engine's writes, not of the embedder.
        memory = MemoryClient(client_path, embedder=False)
        con = duckdb.connect(str(raw_path / PACK_FILE))
        turn = iter(range(1 << 62))

        def client_fresh() -> None:
            memory.reinforce(client_nodes[next(turn) % NODES], user_id=USER, request_id=uuid.uuid4())

        def raw_fresh() -> None:
            # The client's statements, in the client's order, in one transaction.
            node_id, request_id, now = raw_nodes[next(turn) % NODES], uuid.uuid4(), _now()
            con.execute("BEGIN TRANSACTION")
            found = con.execute(pack_sql.CONFIRM_NODE, {"user_id": USER, "node_id": node_id}).fetchone()
            assert found is not None
            node = dict(zip(pack_sql._CONFIRM_NAMES, found, strict=True))
            key = {"user_id": USER, "namespace": node["namespace"], "request_id": request_id}
            con.execute(pack_sql.REINFORCE_KEY, key).fetchone()
            operation_id = uuid.uuid4()
            after, record, checksum = pack_sql.reinforce_entry(node, None, request_id, operation_id, now)
            con.execute(
                pack_sql.UPDATE_NODE,
                {
                    "user_id": USER,
                    "id": node_id,
                    "confidence_base": after["confidence_base"],
                    "reinforcement_boost": after["reinforcement_boost"],
                    "last_reinforced_at": now,
                    "stability": after["stability"],
                    "next_review_at": after["next_review_at"],
                    "lifecycle_state": after["lifecycle_state"],
                    "updated_at": now,
                    "version": after["version"],
                    "last_checksum": checksum,
                    "confirmations": 1,
                },
            )
            con.execute(
                pack_sql.UPDATE_EVIDENCE, {"user_id": USER, "id": node_id, "evidence_refs": after["evidence_refs"]}
            )
            con.execute(
                pack_sql.INSERT_JOURNAL,
                {
                    "user_id": USER,
                    "node_id": node_id,
                    "node_version": after["version"],
                    "op": "reinforce",
                    "operation_id": operation_id,
                    "request_id": request_id,
                    "evidence_id": None,
                    "record": record,
                    "checksum": checksum,
                    "prev_checksum": node["last_checksum"],
                    "recorded_at": now,
                    "key_namespace": node["namespace"],
                },
            )
            con.execute("COMMIT")

        results = [compare("DuckDB pack reinforce", raw_fresh, client_fresh, rounds, seconds)]

        key = uuid.uuid4()
        memory.reinforce(client_nodes[0], user_id=USER, request_id=key)
        replay_key = {"user_id": USER, "namespace": "default", "request_id": key}
        # The raw pack's key: its first confirmation of node 0 (written above) carries it.
        con.execute(
            "UPDATE prme.journal SET request_id = $k, key_namespace = 'default' "
            "WHERE user_id = $u AND node_id = $n AND node_version = 2",
            {"k": key, "u": USER, "n": raw_nodes[0]},
        )

        def client_replay() -> None:
            memory.reinforce(client_nodes[0], user_id=USER, request_id=key)

        def raw_replay() -> None:
            con.execute("BEGIN TRANSACTION")
            con.execute(pack_sql.CONFIRM_NODE, {"user_id": USER, "node_id": raw_nodes[0]}).fetchone()
            con.execute(pack_sql.REINFORCE_KEY, replay_key).fetchone()
            con.execute("COMMIT")

        results.append(compare("DuckDB pack reinforce replay", raw_replay, client_replay, rounds, seconds))
        by_hand = _by_hand(con, raw_nodes)
        # Issue 15, item 4: the pack's confirmation at >= 0.5x the same rows written by hand.
        results.append(compare("DuckDB pack reinforce vs by hand", by_hand, client_fresh, rounds, seconds, target=0.5))
        # Issue 35, item 4: every pack write at >= 0.5x the same rows written by hand.
        turn = iter(range(1 << 62))
        archived = iter(client_pool)
        writes: list[tuple[str, Callable[[], None], Callable[[], Any]]] = [
            (
                "add_node",
                _add_node_by_hand(con),
                lambda: memory.add_node(f"memory {next(turn)} about editors, tabs and habits", user_id=USER),
            ),
            (
                "add_event",
                _add_event_by_hand(con),
                lambda: memory.add_event(f"event {next(turn)}: yes, tabs please", user_id=USER),
            ),
            (
                "record_outcome",
                _record_outcome_by_hand(con, raw_nodes),
                lambda: memory.record_outcome(
                    client_nodes[next(turn) % NODES], "implicit_success", user_id=USER, request_id=uuid.uuid4()
                ),
            ),
            (
                "archive_node",
                _archive_by_hand(con, iter(raw_pool)),
                lambda: memory.archive_node(next(archived), user_id=USER),
            ),
            (
                "mark_reviewed",
                _mark_reviewed_by_hand(con, raw_nodes),
                lambda: memory.mark_reviewed(client_nodes[next(turn) % NODES], user_id=USER),
            ),
        ]
        for name, raw, client in writes:
            results.append(compare(f"DuckDB pack {name} vs by hand", raw, client, rounds, seconds, target=0.5))
        memory.close()
        con.close()
        return results
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _by_hand(con: duckdb.DuckDBPyConnection, nodes: list[uuid.UUID]) -> Callable[[], None]:
    """The same rows written by hand, as a user would without prme: SELECT the node, build a
    reinforce record of the same size in Python (sorted JSON, sha256), UPDATE the node (its
    state, chain link and confirmation count), INSERT the record carrying its key, COMMIT. No
    validation, no replay check, no rules engine."""
    turn = iter(range(1 << 62))

    def call() -> None:
        node_id, request_id, now = nodes[next(turn) % NODES], uuid.uuid4(), _now()
        con.execute("BEGIN TRANSACTION")
        row = con.execute(
            "SELECT version, reinforcement_boost, confidence_base, last_checksum, namespace, content, created_at "
            "FROM prme.nodes WHERE user_id = ? AND id = ?",
            [USER, node_id],
        ).fetchone()
        assert row is not None
        version, boost, confidence, last_checksum, namespace, content, created_at = row
        after_boost = min(boost + Decimal("0.15"), Decimal("0.5"))
        after_confidence = min(confidence + Decimal("0.05"), Decimal("0.95"))
        state = {
            "content": content, "created_at": created_at.isoformat(), "id": str(node_id), "kind": "fact",
            "namespace": namespace, "scope": "personal", "stability": "low", "user_id": USER,
            "decay_profile": "medium", "evidence_refs": [], "lifecycle_state": "active", "next_review_at": None,
            "salience_base": "0.5",
        }  # fmt: skip
        before = {**state, "confidence_base": str(confidence), "reinforcement_boost": str(boost), "version": version}
        after = {
            **state, "confidence_base": str(after_confidence), "reinforcement_boost": str(after_boost),
            "version": version + 1, "last_reinforced_at": now.isoformat(), "updated_at": now.isoformat(),
        }  # fmt: skip
        record = json.dumps(
            {
                "after": after,
                "before": before,
                "evidence_id": None,
                "node_id": str(node_id),
                "op": "reinforce",
                "operation_id": str(uuid.uuid4()),
                "policy": "additive_caps_v1",
                "prev_checksum": last_checksum,
                "recorded_at": now.isoformat(),
                "request_id": str(request_id),
                "user_id": USER,
                "version": 2,
            },
            sort_keys=True,
            separators=(",", ":"),
        )
        checksum = hashlib.sha256(record.encode()).hexdigest()
        con.execute(
            "UPDATE prme.nodes SET reinforcement_boost = ?, confidence_base = ?, last_reinforced_at = ?, "
            "updated_at = ?, version = ?, last_checksum = ?, reinforcements = reinforcements + 1 "
            "WHERE user_id = ? AND id = ?",
            [after_boost, after_confidence, now, now, version + 1, checksum, USER, node_id],
        )
        con.execute(
            "INSERT INTO prme.journal VALUES (?, ?, ?, 2, 'reinforce', ?, ?, NULL, ?, ?, ?, ?, ?)",
            [USER, node_id, version + 1, uuid.uuid4(), request_id, record, checksum, last_checksum, now, namespace],
        )
        con.execute("COMMIT")

    return call


def _add_node_by_hand(con: duckdb.DuckDBPyConnection) -> Callable[[], None]:
    """add_node's rows written by hand, as a user would without prme: the node row, its words
    (lowercased, split on spaces) and a create record of the same size in Python (sorted JSON,
    sha256), one INSERT each, then COMMIT. No validation, no settings lookup, no rules engine."""
    turn = iter(range(1 << 62))

    def call() -> None:
        node_id, operation_id, now = uuid.uuid4(), uuid.uuid4(), _now()
        content = f"memory {next(turn)} about editors, tabs and habits"
        review = (now + timedelta(days=7)).isoformat()
        state = {
            "confidence_base": "0.5", "content": content, "created_at": now.isoformat(), "decay_profile": "medium",
            "evidence_refs": [], "id": str(node_id), "kind": "fact", "last_reinforced_at": None,
            "lifecycle_state": "active", "namespace": "default", "next_review_at": review,
            "reinforcement_boost": "0", "salience_base": "0.5", "scope": "personal", "stability": "low",
            "updated_at": now.isoformat(), "user_id": USER, "version": 1,
        }  # fmt: skip
        record = json.dumps(
            {
                "after": state, "before": None, "evidence_id": None, "node_id": str(node_id), "op": "create",
                "operation_id": str(operation_id), "policy": None, "prev_checksum": None,
                "recorded_at": now.isoformat(), "request_id": None, "user_id": USER, "version": 2,
            },
            sort_keys=True,
            separators=(",", ":"),
        )  # fmt: skip
        checksum = hashlib.sha256(record.encode()).hexdigest()
        con.execute("BEGIN TRANSACTION")
        con.execute(
            "INSERT INTO prme.nodes (id, user_id, namespace, scope, kind, content, confidence_base, salience_base, "
            "reinforcement_boost, last_reinforced_at, evidence_refs, stability, next_review_at, lifecycle_state, "
            "decay_profile, created_at, updated_at, version, last_checksum) "
            "VALUES (?, ?, 'default', 'personal', 'fact', ?, 0.5, 0.5, 0, NULL, [], 'low', ?, 'active', 'medium', "
            "?, ?, 1, ?)",
            [node_id, USER, content, now + timedelta(days=7), now, now, checksum],
        )
        con.execute(
            "INSERT INTO prme.node_words SELECT ?, ?, unnest(string_split(lower(?), ' '))", [USER, node_id, content]
        )
        con.execute(
            "INSERT INTO prme.journal VALUES (?, ?, 1, 2, 'create', ?, NULL, NULL, ?, ?, NULL, ?, NULL)",
            [USER, node_id, operation_id, record, checksum, now],
        )
        con.execute("COMMIT")

    return call


def _record(op: str, node_id: uuid.UUID, before: dict[str, Any] | None, after: dict[str, Any], **fields: Any) -> str:
    """A journal record of the same shape and size as the engine's, as a user would make one:
    sorted JSON of both states and the change's fields (no RFC 8785 care, no validation)."""
    document = {
        "after": after, "before": before, "evidence_id": None, "node_id": str(node_id), "op": op,
        "operation_id": str(uuid.uuid4()), "policy": None, "prev_checksum": None, "recorded_at": _now().isoformat(),
        "request_id": None, "user_id": USER, "version": 2, **fields,
    }  # fmt: skip
    return json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)


# The node's state as a user without prme would read it: every column a record holds.
_STATE = (
    "id, user_id, namespace, scope, kind, content, confidence_base, salience_base, reinforcement_boost, "
    "last_reinforced_at, evidence_refs, stability, next_review_at, lifecycle_state, decay_profile, created_at, "
    "updated_at, version"
)


def _state(con: duckdb.DuckDBPyConnection, node_id: uuid.UUID, extra: str = "") -> tuple[dict[str, Any], list[Any]]:
    cursor = con.execute(
        f"SELECT {_STATE}, last_checksum{extra} FROM prme.nodes WHERE user_id = ? AND id = ?", [USER, node_id]
    )
    row = cursor.fetchone()
    assert row is not None
    names = [column[0] for column in cursor.description or ()]
    return dict(zip(names[:18], row[:18], strict=True)), list(row[18:])


def _add_event_by_hand(con: duckdb.DuckDBPyConnection) -> Callable[[], None]:
    """add_event's row by hand: one INSERT, COMMIT (an event is not journaled)."""
    turn = iter(range(1 << 62))

    def call() -> None:
        now = _now()
        con.execute("BEGIN TRANSACTION")
        con.execute(
            "INSERT INTO prme.events VALUES (?, ?, 'default', 'personal', 'message', ?, '{}', ?, ?)",
            [uuid.uuid4(), USER, f"event {next(turn)}: yes, tabs please", now, now],
        )
        con.execute("COMMIT")

    return call


def _record_outcome_by_hand(con: duckdb.DuckDBPyConnection, nodes: list[uuid.UUID]) -> Callable[[], None]:
    """record_outcome's rows by hand, with a request_id as the client call has: read the node's
    version and namespace, INSERT the key and the outcome row, UPDATE the node's running totals,
    COMMIT (an outcome is not journaled). No validation, no replay check, no evidence check."""
    turn = iter(range(1 << 62))

    def call() -> None:
        node_id, request_id, now = nodes[next(turn) % NODES], uuid.uuid4(), _now()
        con.execute("BEGIN TRANSACTION")
        row = con.execute("SELECT version, namespace FROM prme.nodes WHERE user_id = ? AND id = ?", [USER, node_id])
        version, namespace = row.fetchone() or (1, "default")
        con.execute(
            "INSERT INTO prme.request_keys VALUES (?, ?, ?, 'record_outcome', ?, NULL, ?, ?)",
            [USER, namespace, request_id, node_id, version, now],
        )
        con.execute(
            "INSERT INTO prme.outcomes (user_id, id, node_id, outcome, weight, request_id, recorded_by, node_version, "
            "created_at) VALUES (?, ?, ?, 'implicit_success', 0.2, ?, 'record_outcome', ?, ?)",
            [USER, uuid.uuid4(), node_id, request_id, version, now],
        )
        con.execute(
            "UPDATE prme.nodes SET implicit_successes = implicit_successes + 1, last_outcome_at = ? "
            "WHERE user_id = ? AND id = ?",
            [now, USER, node_id],
        )
        con.execute("COMMIT")

    return call


def _archive_by_hand(con: duckdb.DuckDBPyConnection, pool: Iterator[uuid.UUID]) -> Callable[[], None]:
    """archive_node's rows by hand: read the node's state, build an archive record of the same
    size in Python (both states, sorted JSON, sha256), UPDATE the node, INSERT the record, COMMIT."""

    def call() -> None:
        node_id, now = next(pool), _now()
        con.execute("BEGIN TRANSACTION")
        before, (last_checksum,) = _state(con, node_id)
        after = {**before, "lifecycle_state": "archived", "updated_at": now, "version": before["version"] + 1}
        record = _record("archive", node_id, before, after, prev_checksum=last_checksum)
        checksum = hashlib.sha256(record.encode()).hexdigest()
        con.execute(
            "UPDATE prme.nodes SET lifecycle_state = 'archived', updated_at = ?, version = ?, last_checksum = ? "
            "WHERE user_id = ? AND id = ?",
            [now, after["version"], checksum, USER, node_id],
        )
        con.execute(
            "INSERT INTO prme.journal VALUES (?, ?, ?, 2, 'archive', ?, NULL, NULL, ?, ?, ?, ?, NULL)",
            [USER, node_id, after["version"], uuid.uuid4(), record, checksum, last_checksum, now],
        )
        con.execute("COMMIT")

    return call


def _mark_reviewed_by_hand(con: duckdb.DuckDBPyConnection, nodes: list[uuid.UUID]) -> Callable[[], None]:
    """mark_reviewed's rows by hand: read the node's state and outcome totals, next review one
    week ahead (the default cadence, known to the user), a review record of the same size in
    Python, UPDATE the node (state, chain link, settled totals), INSERT the record, COMMIT."""
    turn = iter(range(1 << 62))

    def call() -> None:
        node_id, now = nodes[next(turn) % NODES], _now()
        con.execute("BEGIN TRANSACTION")
        totals = (
            ", recorded_reinforcements + reinforcements, implicit_successes, neutral_exposures, explicit_corrections"
        )
        before, (last_checksum, er, isx, ne, ec) = _state(con, node_id, totals)
        after = {
            **before,
            "next_review_at": now + timedelta(days=7),
            "updated_at": now,
            "version": before["version"] + 1,
        }
        record = _record("review", node_id, before, after, prev_checksum=last_checksum, policy="maintenance_v1")
        checksum = hashlib.sha256(record.encode()).hexdigest()
        con.execute(
            "UPDATE prme.nodes SET next_review_at = ?, updated_at = ?, version = ?, last_checksum = ?, "
            "reviewed_explicit_reinforcements = ?, reviewed_implicit_successes = ?, reviewed_neutral_exposures = ?, "
            "reviewed_explicit_corrections = ?, reviewed_at = ? WHERE user_id = ? AND id = ?",
            [after["next_review_at"], now, after["version"], checksum, er, isx, ne, ec, now, USER, node_id],
        )
        con.execute(
            "INSERT INTO prme.journal VALUES (?, ?, ?, 2, 'review', ?, NULL, NULL, ?, ?, ?, ?, NULL)",
            [USER, node_id, after["version"], uuid.uuid4(), record, checksum, last_checksum, now],
        )
        con.execute("COMMIT")

    return call


def _now() -> datetime:
    return datetime.now(UTC)


# -- where a pack write's time goes (issue 35, item 4) ---------------------------------


class _TimedConnection:
    """A pack connection whose statements add their CPU time (this process's, DuckDB's threads
    included) to ``costs``, keyed by the statement's first words."""

    def __init__(self, con: duckdb.DuckDBPyConnection, costs: dict[str, float]) -> None:
        self._con, self._costs = con, costs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def execute(self, statement: str, *args: Any) -> Any:
        start = time.process_time()
        try:
            return self._con.execute(statement, *args)
        finally:
            key = " ".join(statement.split())[:48]
            self._costs[key] = self._costs.get(key, 0.0) + time.process_time() - start


def pack_statement_costs(calls: int) -> dict[str, tuple[float, dict[str, float]]]:
    """Each pack write ``calls`` times: CPU ms per call, and per statement (and COMMIT)."""
    from prme_pg.backends.duckdb.connection import PackConnection

    costs: dict[str, float] = {}
    run = PackConnection.run

    def timed_run(self: PackConnection, work: Callable[[duckdb.DuckDBPyConnection], Any]) -> Any:
        def timed(con: duckdb.DuckDBPyConnection) -> Any:
            result = work(_TimedConnection(con, costs))  # type: ignore[arg-type]
            start = time.process_time()
            con.execute("COMMIT")  # timed here; run's own COMMIT then ends an empty transaction
            costs["COMMIT"] = costs.get("COMMIT", 0.0) + time.process_time() - start
            con.execute("BEGIN TRANSACTION")
            return result

        return run(self, timed)

    results: dict[str, tuple[float, dict[str, float]]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="prme_statements_") as tmp,
        MemoryClient(Path(tmp), embedder=False) as memory,
    ):
        nodes = [
            n.id for n in memory.add_nodes([{"content": f"memory {i} about tabs"} for i in range(calls)], user_id=USER)
        ]
        writes: dict[str, Callable[[int], Any]] = {
            "add_node": lambda i: memory.add_node(f"memory {i} about editors, tabs and habits", user_id=USER),
            "add_event": lambda i: memory.add_event(f"event {i}: yes, tabs please", user_id=USER),
            "reinforce": lambda i: memory.reinforce(nodes[i], user_id=USER, request_id=uuid.uuid4()),
            "record_outcome": lambda i: memory.record_outcome(
                nodes[i], "implicit_success", user_id=USER, request_id=uuid.uuid4()
            ),
            "mark_reviewed": lambda i: memory.mark_reviewed(nodes[i], user_id=USER),
            "archive_node": lambda i: memory.archive_node(nodes[i], user_id=USER),
        }
        PackConnection.run = timed_run  # type: ignore[method-assign]
        try:
            for name, write in writes.items():
                costs.clear()
                start = time.process_time()
                for i in range(calls):
                    write(i)
                total = (time.process_time() - start) * 1000 / calls
                results[name] = (total, {key: value * 1000 / calls for key, value in costs.items()})
        finally:
            PackConnection.run = run  # type: ignore[method-assign]
    return results


def statements_report(results: dict[str, tuple[float, dict[str, float]]], console: Console) -> None:
    table = Table(title="Pack writes: CPU ms per call, and per statement")
    for column in ("write", "CPU ms/call", "statement", "ms", "share"):
        table.add_column(column, justify="right" if column in ("CPU ms/call", "ms", "share") else "left")
    for name, (total, statements) in results.items():
        rows = sorted(statements.items(), key=lambda item: -item[1])
        rest = total - sum(statements.values())
        for index, (statement, ms) in enumerate([*rows, ("Python, BEGIN", rest)]):
            table.add_row(
                name if index == 0 else "",
                f"{total:.2f}" if index == 0 else "",
                statement,
                f"{ms:.2f}",
                f"{ms / total:.0%}",
            )
    console.print(table)


# -- pack recall (issue 18, item 3) ---------------------------------------------------

RECALL_MEMORIES = 10_000
RECALL_TARGET_MS = 20.0


@dataclass
class RecallTiming:
    name: str
    calls: int
    median_ms: float
    p95_ms: float
    hits: float


def pack_recall(calls: int) -> list[RecallTiming]:
    """``MemoryClient.recall`` on a pack holding 10,000 memories of one owner (about 10 words each
    from a 2,000-word vocabulary): the median of single calls, with and without a query. The
    memories go in by SQL, and the client's first open indexes their recall words, as it does
    for a pack written before the index existed."""
    import random

    rng = random.Random(18)
    vocabulary = [f"w{n:04d}{rng.choice('abcdefgh')}" for n in range(2000)]
    with tempfile.TemporaryDirectory(prefix="prme_recall_bench_") as tmp:
        pack = Path(tmp) / "memories"
        pack_sql.DuckDBBackend(pack).close()  # creates the pack
        now = _now()
        rows = [
            (
                uuid.UUID(int=rng.getrandbits(128)),
                " ".join(rng.choice(vocabulary) for _ in range(rng.randint(6, 14))),
                Decimal(rng.randint(0, 10000)) / 10000,
                rng.choice(["slow", "medium", "fast"]),
                now - timedelta(days=rng.uniform(0, 365)),
            )
            for _ in range(RECALL_MEMORIES)
        ]
        with duckdb.connect(str(pack / PACK_FILE)) as con:
            # One statement over parallel lists (executemany would plan 10,000 inserts).
            columns = list(zip(*rows, strict=True))
            con.execute(
                "INSERT INTO prme.nodes (id, user_id, content, salience_base, confidence_base, decay_profile, "
                "created_at, updated_at, version, last_checksum) "
                "SELECT unnest($ids), 'bench', unnest($contents), unnest($saliences), 0.5, unnest($profiles), "
                "unnest($times), unnest($times), 1, repeat('0', 64)",
                {
                    "ids": list(columns[0]),
                    "contents": list(columns[1]),
                    "saliences": [float(v) for v in columns[2]],
                    "profiles": list(columns[3]),
                    "times": list(columns[4]),
                },
            )
            con.execute("DELETE FROM prme.pack_info WHERE key = 'recall_words'")
        results = []
        with MemoryClient(pack) as memory:
            for name, make_query in (
                ("two words", lambda: " ".join(rng.sample(vocabulary, 2))),
                ("five words", lambda: " ".join(rng.sample(vocabulary, 5))),
                ("no query (strength only)", lambda: None),
            ):
                times, found = [], 0
                memory.recall(make_query(), user_id=USER)  # warm up
                for _ in range(calls):
                    query = make_query()
                    start = time.perf_counter()
                    hits = memory.recall(query, user_id=USER, max_count=10)
                    times.append((time.perf_counter() - start) * 1000)
                    found += len(hits)
                times.sort()
                results.append(
                    RecallTiming(name, calls, times[len(times) // 2], times[int(len(times) * 0.95)], found / calls)
                )
    return results


def recall_report(results: list[RecallTiming], console: Console) -> None:
    table = Table(title=f"Pack recall over {RECALL_MEMORIES:,} memories of one owner, max_count 10, one run")
    for column in ("query", "calls", "median ms", "p95 ms", "hits/call", "target", ""):
        table.add_column(column, justify="left" if column == "query" else "right")
    for r in results:
        ok = r.median_ms <= RECALL_TARGET_MS
        table.add_row(
            r.name,
            str(r.calls),
            f"{r.median_ms:.2f}",
            f"{r.p95_ms:.2f}",
            f"{r.hits:.1f}",
            f"<= {RECALL_TARGET_MS:g}",
            "[green]ok[/]" if ok else "[red]above[/]",
        )
    console.print(table)


# -- report ----------------------------------------------------------------------------


# -- pack maintenance report (issue 18, item 4) ----------------------------------------

REPORT_MEMORIES = 100_000
REPORT_OUTCOMES = 500_000
REPORT_TARGET_RATIO = 3.0
# One scan of the pack's outcome rows: the columns the report reads, the owner's rows.
OUTCOME_SCAN = (
    "SELECT count(*) FILTER (WHERE outcome = 'explicit_correction'), max(created_at) "
    "FROM prme.outcomes WHERE user_id = $user_id AND recorded_by <> 'reinforce'"
)


@dataclass
class ReportTiming:
    memories: int
    outcomes: int
    rows: int
    scan_ms: float
    #: The report's statements (the check for outcomes after as_of, then the report), counted in
    #: SQL (as bench/maintenance_bench.py measures PostgreSQL's).
    computed_ms: float
    #: MemoryClient.maintenance_report: the statement and a Python object per row.
    report_ms: float

    @property
    def ratio(self) -> float:
        return self.computed_ms / self.scan_ms

    @property
    def client_ratio(self) -> float:
        return self.report_ms / self.scan_ms


def pack_maintenance(runs: int = 5) -> ReportTiming:
    """``MemoryClient.maintenance_report`` on a pack of 100,000 memories of one owner and 500,000
    outcome rows, shaped like bench/maintenance_bench.py's (50/30/20 % low/semi-stable/stable, 40 %
    due between 120 days ago and 60 days ahead, created up to a year ago, a create record each),
    against one scan of those outcome rows in the same run: medians of ``runs``."""
    import random

    rng = random.Random(18)
    kinds = ["implicit_success"] * 6 + ["neutral_exposure"] * 2 + ["explicit_reinforcement", "explicit_correction"]
    with tempfile.TemporaryDirectory(prefix="prme_report_bench_") as tmp:
        pack = Path(tmp) / "memories"
        pack_sql.DuckDBBackend(pack).close()  # creates the pack
        now = _now()
        ids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(REPORT_MEMORIES)]
        created = [now - timedelta(days=rng.uniform(0, 365)) for _ in ids]
        with duckdb.connect(str(pack / PACK_FILE)) as con:
            con.execute(
                "INSERT INTO prme.nodes (id, user_id, content, stability, next_review_at, created_at, updated_at, "
                "version, last_checksum) "
                "SELECT unnest($ids), 'bench', 'memory', unnest($stabilities), unnest($reviews), "
                "unnest($times), unnest($times), 1, repeat('0', 64)",
                {
                    "ids": ids,
                    "stabilities": [rng.choice(["low"] * 5 + ["semi-stable"] * 3 + ["stable"] * 2) for _ in ids],
                    "reviews": [
                        now + timedelta(days=rng.uniform(-120, 60)) if rng.random() < 0.4 else None for _ in ids
                    ],
                    "times": created,
                },
            )
            con.execute(
                "INSERT INTO prme.journal SELECT user_id, id, 1, 2, 'create', uuid(), NULL, NULL, 'x', "
                "repeat('0', 64), NULL, created_at, NULL FROM prme.nodes"
            )
            picks = [rng.randrange(REPORT_MEMORIES) for _ in range(REPORT_OUTCOMES)]
            con.execute(
                "INSERT INTO prme.outcomes SELECT 'bench', uuid(), node_id, o, "
                "CASE o WHEN 'explicit_reinforcement' THEN 1.0 WHEN 'implicit_success' THEN 0.2 "
                "WHEN 'neutral_exposure' THEN 0 ELSE -1.0 END, NULL, NULL, NULL, NULL, NULL, 'record_outcome', 1, t "
                "FROM (SELECT unnest($nodes) AS node_id, unnest($kinds) AS o, unnest($times) AS t)",
                {
                    "nodes": [ids[i] for i in picks],
                    "times": [created[i] + (now - created[i]) * rng.random() for i in picks],
                    "kinds": [rng.choice(kinds) for _ in picks],
                },
            )
            # The outcomes went in by SQL: their running totals on the memories' rows too.
            con.execute(pack_sql.REBUILD_OUTCOME_TOTALS)
        with MemoryClient(pack) as memory:
            con = memory.backend._con
            assert con is not None
            params: dict[str, Any] = {"user_id": USER, "as_of": now}
            for setting in memory.get_maintenance_settings(user_id=USER):
                key = pack_sql._SETTING_KEYS[setting.stability]
                params[f"{key}_us"] = setting.review_cadence // timedelta(microseconds=1)
                params[f"{key}_decay"] = int(setting.decay_per_cycle * 10000)
            scans, computed, reports, rows = [], [], [], 0
            for _ in range(runs):
                start = time.perf_counter()
                con.execute(OUTCOME_SCAN, {"user_id": USER}).fetchall()
                scans.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                # The client's statements: whether outcomes came after as_of, then the report.
                statement = pack_sql.report_statement(con, USER, now)
                con.execute(f"SELECT count(*) FROM ({statement})", params).fetchall()
                computed.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                rows = len(memory.maintenance_report(user_id=USER))
                reports.append((time.perf_counter() - start) * 1000)
    middle = runs // 2
    return ReportTiming(
        REPORT_MEMORIES,
        REPORT_OUTCOMES,
        rows,
        sorted(scans)[middle],
        sorted(computed)[middle],
        sorted(reports)[middle],
    )


def report_report(result: ReportTiming, console: Console) -> None:
    table = Table(title="Pack maintenance report vs one scan of its outcome rows, one run (medians)")
    columns = ("memories", "outcomes", "rows", "scan ms", "report (SQL) ms", "ratio", "client ms", "client ratio")
    for column in (*columns, "target", ""):
        table.add_column(column, justify="right")
    ok = result.ratio <= REPORT_TARGET_RATIO
    table.add_row(
        f"{result.memories:,}",
        f"{result.outcomes:,}",
        f"{result.rows:,}",
        f"{result.scan_ms:.1f}",
        f"{result.computed_ms:.1f}",
        f"{result.ratio:.2f}",
        f"{result.report_ms:.1f}",
        f"{result.client_ratio:.2f}",
        f"<= {REPORT_TARGET_RATIO:.0f}",
        "[green]ok[/]" if ok else "[red]above[/]",
    )
    console.print(table)


def report(results: list[Comparison], console: Console) -> None:
    table = Table(title="Client overhead: throughput of the same call, client vs raw, one run")
    for column in (
        "workload",
        "raw calls/s",
        "client calls/s",
        "client/raw",
        "rounds: median (min-max)",
        "target",
        "",
        "raw CPU ms/call",
        "client CPU ms/call",
    ):
        table.add_column(column, justify="left" if column == "workload" else "right")
    for r in results:
        spread = f"{min(r.round_ratios):.2f}-{max(r.round_ratios):.2f}" if r.round_ratios else ""
        table.add_row(
            r.name,
            f"{r.raw.rate:,.0f}",
            f"{r.client.rate:,.0f}",
            f"{r.ratio:.2f}",
            f"{r.median_ratio:.2f} ({spread}) of {len(r.round_ratios)}",
            f">= {r.target:.2f}",
            "[green]ok[/]" if r.ok else "[red]below[/]",
            f"{r.raw.cpu_ms:.3f}",
            f"{r.client.cpu_ms:.3f}",
        )
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    parser.add_argument("--rounds", type=int, help="rounds per comparison (default 6, quick 2)")
    parser.add_argument("--seconds", type=float, help="seconds per side per round (default 3, quick 2)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument("--recall-only", action="store_true", help="only the pack recall measurement")
    parser.add_argument("--recall-calls", type=int, default=200, help="recall calls per query kind (default 200)")
    parser.add_argument("--report-only", action="store_true", help="only the pack maintenance report measurement")
    parser.add_argument(
        "--pack-reinforce-only",
        "--pack-writes-only",
        action="store_true",
        help="only the pack write comparisons (no PostgreSQL)",
    )
    parser.add_argument(
        "--statements", type=int, metavar="CALLS", help="only: each pack write CALLS times, its CPU per statement"
    )
    parser.add_argument("--only", help="with --pack-writes-only: the comparisons whose name holds this text")
    args = parser.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 6)
    seconds = args.seconds or (2.0 if args.quick else 3.0)

    console = Console(stderr=args.json, width=None if sys.stdout.isatty() else 150)
    if args.statements:
        statements_report(pack_statement_costs(args.statements), console)
        return 0
    if args.pack_reinforce_only:
        with console.status("DuckDB: pack client vs the same statements by hand ..."):
            pack_results = [r for r in duckdb_comparisons(rounds, seconds, args.only) if r.round_ratios]
        report(pack_results, console)
        return 0 if all(r.ok for r in pack_results) else 1
    with console.status(f"DuckDB: pack maintenance report over {REPORT_MEMORIES:,} memories ..."):
        maintenance = pack_maintenance()
    report_ok = maintenance.ratio <= REPORT_TARGET_RATIO
    if args.report_only:
        if args.json:
            print(
                json.dumps(
                    {**asdict(maintenance), "ratio": maintenance.ratio, "client_ratio": maintenance.client_ratio},
                    indent=2,
                )
            )
        else:
            report_report(maintenance, console)
        return 0 if report_ok else 1
    with console.status(f"DuckDB: pack recall over {RECALL_MEMORIES:,} memories ..."):
        recalls = pack_recall(args.recall_calls)
    recall_ok = all(r.median_ms <= RECALL_TARGET_MS for r in recalls)
    if args.recall_only:
        if args.json:
            print(json.dumps([asdict(r) for r in recalls], indent=2))
        else:
            recall_report(recalls, console)
        return 0 if recall_ok else 1
    with console.status("PostgreSQL: client vs raw psycopg ..."):
        results = postgres_comparisons(rounds, seconds)
    with console.status("DuckDB: pack client vs the same statements by hand ..."):
        results += duckdb_comparisons(rounds, seconds)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        **asdict(r),
                        "ratio": r.ratio,
                        "median_ratio": r.median_ratio,
                        "raw_rate": r.raw.rate,
                        "client_rate": r.client.rate,
                    }
                    for r in results
                ],
                indent=2,
            )
        )
    else:
        report(results, console)
        recall_report(recalls, console)
        report_report(maintenance, console)
    return 0 if recall_ok and report_ok and all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
