"""The journal's reads: verify_journal, replay_node, journal_records, node_journal and
node_evidence (sql/postgres/060, 130, 160, 165, 095)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import duckdb

from ...errors import NotFoundError
from ...models import (
    Event,
    JournalIssue,
    JournalRecord,
    NodeHead,
    ReplayResult,
)
from ...validation import valid_user_id
from .. import (
    GetJournalRecords,
    GetNodeJournal,
    ListNodeEvidence,
    ReplayNode,
    VerifyJournal,
    journal_rows,
    node_journal_rows,
)
from .connection import PackConnection
from .rows import NODE_EXISTS, _event, _fetch_dicts
from .validation import _valid_max_count

VERIFY_JOURNAL = "SELECT node_id, node_version, problem, detail FROM prme.verify_journal($user_id)"

REPLAY_NODE = (
    "SELECT records, matches, problem, CAST(stored AS VARCHAR), CAST(replayed AS VARCHAR) "
    "FROM prme.replay_node($user_id, $node_id)"
)

# As prme.journal_records: every node with its records, then records whose node row is gone.
JOURNAL_RECORDS = (
    "SELECT n.id, n.version, n.last_checksum, j.node_version, j.record_version, j.op, j.operation_id, "
    "j.request_id, j.evidence_id, j.record, j.checksum, j.prev_checksum "
    "FROM prme.nodes AS n LEFT JOIN prme.journal AS j ON j.user_id = n.user_id AND j.node_id = n.id "
    "WHERE n.user_id = $user_id "
    "UNION ALL "
    "SELECT j.node_id, NULL, NULL, j.node_version, j.record_version, j.op, j.operation_id, "
    "j.request_id, j.evidence_id, j.record, j.checksum, j.prev_checksum "
    "FROM prme.journal AS j WHERE j.user_id = $user_id "
    "AND NOT EXISTS (SELECT 1 FROM prme.nodes AS n WHERE n.user_id = j.user_id AND n.id = j.node_id) "
    "ORDER BY 1, 4"
)

# prme.node_journal: one node's oldest $max_count records with its head.
NODE_JOURNAL = (
    "SELECT n.id, n.version, n.last_checksum, j.node_version, j.record_version, j.op, j.operation_id, "
    "j.request_id, j.evidence_id, j.record, j.checksum, j.prev_checksum "
    "FROM prme.nodes AS n LEFT JOIN LATERAL ("
    "SELECT * FROM prme.journal AS r WHERE r.user_id = n.user_id AND r.node_id = n.id "
    "ORDER BY r.node_version LIMIT $max_count) AS j ON TRUE "
    "WHERE n.user_id = $user_id AND n.id = $node_id ORDER BY j.node_version"
)
# prme.node_evidence: the events named in evidence_refs, each once, oldest first.
NODE_EVIDENCE = (
    "SELECT e.id, e.user_id, e.namespace, e.scope, e.kind, e.content, e.payload, e.occurred_at, e.created_at "
    "FROM prme.events AS e WHERE e.user_id = $user_id AND e.id IN ("
    "SELECT unnest(n.evidence_refs) FROM prme.nodes AS n WHERE n.user_id = $user_id AND n.id = $node_id) "
    "ORDER BY e.occurred_at, e.id LIMIT $max_count"
)


def _parse_state(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    value = json.loads(text, parse_float=Decimal)
    return value if isinstance(value, dict) else None


class JournalOperations(PackConnection):
    def verify_journal(self, request: VerifyJournal) -> list[JournalIssue]:
        params = {"user_id": valid_user_id(request.user_id)}
        return self.run(
            lambda con: [
                JournalIssue(node_id, node_version, problem, detail)
                for node_id, node_version, problem, detail in con.execute(VERIFY_JOURNAL, params).fetchall()
            ]
        )

    def replay_node(self, request: ReplayNode) -> ReplayResult:
        params = {"user_id": valid_user_id(request.user_id), "node_id": request.node_id}

        def work(con: duckdb.DuckDBPyConnection) -> ReplayResult:
            row = con.execute(REPLAY_NODE, params).fetchone()
            if row is None:
                raise NotFoundError("node not found")
            records, matches, problem, stored, replayed = row
            return ReplayResult(records, bool(matches), problem, _parse_state(stored), _parse_state(replayed))

        return self.run(work)

    def journal_records(self, request: GetJournalRecords) -> Any:
        user_id = valid_user_id(request.user_id)
        return self.run(
            lambda con: journal_rows(user_id, con.execute(JOURNAL_RECORDS, {"user_id": user_id}).fetchall())
        )

    def node_journal(self, request: GetNodeJournal) -> tuple[list[JournalRecord], NodeHead]:
        user_id = valid_user_id(request.user_id)
        params = {"user_id": user_id, "node_id": request.node_id, "max_count": _valid_max_count(request.max_count)}

        def work(con: duckdb.DuckDBPyConnection) -> tuple[list[JournalRecord], NodeHead]:
            rows = con.execute(NODE_JOURNAL, params).fetchall()
            if not rows:
                raise NotFoundError("node not found")
            return node_journal_rows(user_id, rows)

        return self.run(work)

    def node_evidence(self, request: ListNodeEvidence) -> list[Event]:
        params = {
            "user_id": valid_user_id(request.user_id),
            "node_id": request.node_id,
            "max_count": _valid_max_count(request.max_count),
        }

        def work(con: duckdb.DuckDBPyConnection) -> list[Event]:
            exists = con.execute(NODE_EXISTS, {"user_id": params["user_id"], "node_id": params["node_id"]})
            if exists.fetchone() is None:
                raise NotFoundError("node not found")
            return [_event(row) for row in _fetch_dicts(con.execute(NODE_EVIDENCE, params))]

        return self.run(work)
