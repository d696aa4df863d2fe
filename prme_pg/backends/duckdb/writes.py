"""What every write of a memory shares: reading its row, its idempotency key and evidence,
and writing the changed row with its journal record."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import duckdb

from ...errors import NotFoundError
from .connection import _Retry

# What decides a reinforce: the node (by primary key), its key (scoped to the node's
# owner and namespace) and whether the evidence shares the node's owner and scope;
# each a point lookup on a primary key or the journal's key index. A replay, a
# conflict or "not found" is answered from these alone. A confirmation's key is its
# journal record (journal_request_key); any other call's key is a request_keys row.
# Every column, as plain columns: the row as one STRUCT (SELECT n) costs more to bind and return.
REINFORCE_NODE = "SELECT * FROM prme.nodes WHERE user_id = $user_id AND id = $node_id"
REINFORCE_KEY = (
    "SELECT op, node_id, evidence_id FROM prme.journal "
    "WHERE user_id = $user_id AND key_namespace = $namespace AND request_id = $request_id "
    "UNION ALL "
    "SELECT operation, node_id, evidence_id FROM prme.request_keys "
    "WHERE user_id = $user_id AND namespace = $namespace AND request_id = $request_id"
)
REINFORCE_EVIDENCE = "SELECT 1 FROM prme.events WHERE user_id = $user_id AND id = $evidence_id AND scope = $scope"


# Writing a node takes two statements on purpose. DuckDB stores an update of a
# LIST column as delete + insert of the row, and misses write-write conflicts
# between such an update and a concurrent update of the row's other columns (one
# of the two is then silently lost). Writing every scalar column first (the
# unchanged ones to themselves), then evidence_refs (changed or not) in its own
# statement, conflicts with every kind of concurrent change of the row; measured
# in tests/test_clients.py. No RETURNING either: DuckDB skips conflict detection
# for UPDATE ... RETURNING. The version test turns a write that lost a race into
# a retry instead of a lost update.
UPDATE_NODE = (
    "UPDATE prme.nodes SET namespace = namespace, scope = scope, kind = kind, content = content, "
    "confidence_base = $confidence_base, salience_base = salience_base, "
    "reinforcement_boost = $reinforcement_boost, last_reinforced_at = $last_reinforced_at, "
    "stability = $stability, next_review_at = $next_review_at, lifecycle_state = $lifecycle_state, "
    "decay_profile = decay_profile, created_at = created_at, updated_at = $updated_at, version = $version, "
    "last_checksum = $last_checksum, reinforcements = reinforcements + $confirmations "
    "WHERE user_id = $user_id AND id = $id AND version = $version - 1"
)

# A review's write (mark_reviewed): the same statement, which also settles on the row the
# outcome totals the review saw (counts only grow, so greatest() makes settling idempotent):
# one statement fewer than settling apart, the same rows.
UPDATE_NODE_REVIEWED = UPDATE_NODE.replace(
    " WHERE ",
    ", reviewed_explicit_reinforcements = greatest(reviewed_explicit_reinforcements, $er), "
    "reviewed_implicit_successes = greatest(reviewed_implicit_successes, $isx), "
    "reviewed_neutral_exposures = greatest(reviewed_neutral_exposures, $ne), "
    "reviewed_explicit_corrections = greatest(reviewed_explicit_corrections, $ec), reviewed_at = $updated_at WHERE ",
)

UPDATE_EVIDENCE = "UPDATE prme.nodes SET evidence_refs = $evidence_refs WHERE user_id = $user_id AND id = $id"
TOUCH_EVIDENCE = "UPDATE prme.nodes SET evidence_refs = evidence_refs WHERE user_id = $user_id AND id = $id"

INSERT_JOURNAL = (
    "INSERT INTO prme.journal VALUES ($user_id, $node_id, $node_version, 2, $op, $operation_id, "
    "$request_id, $evidence_id, $record, $checksum, $prev_checksum, $recorded_at, $key_namespace)"
)


def _node_row(con: duckdb.DuckDBPyConnection, user_id: str, node_id: uuid.UUID) -> dict[str, Any] | None:
    """The node's row, every column (bookkeeping too), or None."""
    cursor = con.execute(REINFORCE_NODE, {"user_id": user_id, "node_id": node_id})
    found = cursor.fetchone()
    if found is None:
        return None
    return dict(zip([column[0] for column in cursor.description or ()], found, strict=True))


def _require_live_node_and_evidence(
    con: duckdb.DuckDBPyConnection, user_id: str, node: Mapping[str, Any], evidence_id: uuid.UUID | None
) -> None:
    """What a confirmation and an outcome both require: the memory is not archived, and the
    evidence they cite (if any) is the owner's, in the memory's scope. NotFoundError otherwise."""
    if node["lifecycle_state"] == "archived":
        raise NotFoundError("node not found")
    if evidence_id is not None and (
        con.execute(
            REINFORCE_EVIDENCE, {"user_id": user_id, "evidence_id": evidence_id, "scope": node["scope"]}
        ).fetchone()
        is None
    ):
        raise NotFoundError("evidence not found")


def _write_node(
    con: duckdb.DuckDBPyConnection,
    node: Mapping[str, Any],
    after: Mapping[str, Any],
    op: str,
    operation_id: uuid.UUID,
    record: str,
    checksum: str,
    *,
    request_id: uuid.UUID | None = None,
    evidence_id: uuid.UUID | None = None,
    reviewed: Mapping[str, int] | None = None,
) -> None:
    """Write the node's new state (two statements, above) and append its record. ``reviewed``:
    the outcome totals a review settles (er, isx, ne, ec), written by the same statement."""
    updated = con.execute(
        UPDATE_NODE if reviewed is None else UPDATE_NODE_REVIEWED,
        {
            **(reviewed or {}),
            "user_id": after["user_id"],
            "id": after["id"],
            "confidence_base": after["confidence_base"],
            "reinforcement_boost": after["reinforcement_boost"],
            "last_reinforced_at": after["last_reinforced_at"],
            "stability": after["stability"],
            "next_review_at": after["next_review_at"],
            "lifecycle_state": after["lifecycle_state"],
            "updated_at": after["updated_at"],
            "version": after["version"],
            "last_checksum": checksum,
            # A confirmation counts as an explicit_reinforcement outcome on its own row.
            "confirmations": 1 if op == "reinforce" else 0,
        },
    ).fetchone()
    if updated is None or updated[0] != 1:
        raise _Retry  # the node moved on since it was read
    key = {"user_id": after["user_id"], "id": after["id"]}
    if list(after["evidence_refs"]) == list(node["evidence_refs"]):
        con.execute(TOUCH_EVIDENCE, key)  # the list to itself: no list to bind
    else:
        con.execute(UPDATE_EVIDENCE, {**key, "evidence_refs": after["evidence_refs"]})
    _append_record(
        con,
        after,
        op,
        operation_id,
        record,
        checksum,
        prev_checksum=node["last_checksum"],
        request_id=request_id,
        evidence_id=evidence_id,
    )


def _append_record(
    con: duckdb.DuckDBPyConnection,
    after: Mapping[str, Any],
    op: str,
    operation_id: uuid.UUID,
    record: str,
    checksum: str,
    *,
    prev_checksum: str | None,
    request_id: uuid.UUID | None = None,
    evidence_id: uuid.UUID | None = None,
) -> None:
    con.execute(
        INSERT_JOURNAL,
        {
            "user_id": after["user_id"],
            "node_id": after["id"],
            "node_version": after["version"],
            "op": op,
            "operation_id": operation_id,
            "request_id": request_id,
            "evidence_id": evidence_id,
            "record": record,
            "checksum": checksum,
            "prev_checksum": prev_checksum,
            "recorded_at": after["updated_at"],
            "key_namespace": None if request_id is None else after["namespace"],
        },
    )
