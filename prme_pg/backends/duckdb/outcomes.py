"""Outcomes (sql/postgres/210_outcomes.sql, 215_node_outcomes.sql): record_outcome,
outcome_summary and node_outcomes, the running totals on the memory's row, and their rules."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, cast

import duckdb

from ...errors import IdempotencyConflict, InvalidInput, NotFoundError
from ...models import (
    Outcome,
    OutcomeSummary,
)
from ...validation import valid_user_id
from .. import (
    GetOutcomeSummary,
    ListNodeOutcomes,
    RecordOutcome,
)
from .connection import PackConnection
from .rows import NODE_EXISTS, _fetch_dicts, _utc
from .validation import _MAX_TEXT_BYTES, _no_nul, _quote_literal, _valid_max_count
from .writes import REINFORCE_KEY, TOUCH_EVIDENCE, _require_live_node_and_evidence

_OUTCOME_WEIGHTS = {
    "explicit_reinforcement": Decimal("1.00"),
    "implicit_success": Decimal("0.20"),
    "neutral_exposure": Decimal("0.00"),
    "explicit_correction": Decimal("-1.00"),
}
_OUTCOME_COLUMNS = (
    "id, user_id, node_id, outcome, weight, evidence_id, profile_id, thread_id, notes, request_id, "
    "recorded_by, node_version, created_at"
)
INSERT_OUTCOME = (
    "INSERT INTO prme.outcomes (user_id, id, node_id, outcome, weight, evidence_id, profile_id, thread_id, "
    "notes, request_id, recorded_by, node_version, created_at) VALUES ($user_id, $id, $node_id, $outcome, "
    "$weight, $evidence_id, $profile_id, $thread_id, $notes, $request_id, $recorded_by, $node_version, $created_at)"
)
INSERT_REQUEST_KEY = (
    "INSERT INTO prme.request_keys VALUES ($user_id, $namespace, $request_id, $operation, $node_id, "
    "$evidence_id, $node_version, $created_at)"
)
# What record_outcome reads of the memory: its key's namespace, the evidence's scope, whether it
# is archived, the version the outcome is of (every column, bookkeeping too, costs more).
OUTCOME_NODE = (
    "SELECT namespace, scope, lifecycle_state, version FROM prme.nodes WHERE user_id = $user_id AND id = $node_id"
)
OUTCOME_BY_KEY = (
    f"SELECT {_OUTCOME_COLUMNS} FROM prme.outcomes "
    "WHERE user_id = $user_id AND node_id = $node_id AND request_id = $request_id"
)
# prme.outcome_summary's inputs, all on the memory's row: the totals of its outcome rows,
# and its confirmations (journal records of op reinforce) with its last_reinforced_at.
OUTCOME_TOTALS = (
    "SELECT recorded_reinforcements, implicit_successes, neutral_exposures, explicit_corrections, "
    "last_outcome_at, reinforcements, last_reinforced_at FROM prme.nodes WHERE user_id = $user_id AND id = $node_id"
)
# prme._add_outcome's running totals: one outcome row more of its kind, a statement per kind
# (the column it counts in is fixed; one statement choosing it by CASTs cost more to plan).
_TOTAL_COLUMNS = {
    "explicit_reinforcement": "recorded_reinforcements",
    "implicit_success": "implicit_successes",
    "neutral_exposure": "neutral_exposures",
    "explicit_correction": "explicit_corrections",
}
ADD_TO_TOTALS = {
    outcome: f"UPDATE prme.nodes SET {column} = {column} + 1, "
    "last_outcome_at = greatest(coalesce(last_outcome_at, $created_at), $created_at) "
    "WHERE user_id = $user_id AND id = $id"
    for outcome, column in _TOTAL_COLUMNS.items()
}
# The totals on every memory's row recomputed from its outcome rows and its confirmations'
# journal records (prme._rebuild_outcome_totals): what an upgraded pack starts from.
REBUILD_OUTCOME_TOTALS = """
UPDATE prme.nodes AS n SET
    reinforcements = t.reinforcements,
    recorded_reinforcements = t.er, implicit_successes = t.isx, neutral_exposures = t.ne,
    explicit_corrections = t.ec, last_outcome_at = t.last_outcome_at
FROM (
    SELECT n.user_id, n.id, coalesce(c.confirmations, 0) AS reinforcements,
        coalesce(o.er, 0) AS er, coalesce(o.isx, 0) AS isx, coalesce(o.ne, 0) AS ne, coalesce(o.ec, 0) AS ec,
        o.last_outcome_at
    FROM prme.nodes AS n
    LEFT JOIN (
        SELECT user_id, node_id, count(*) AS confirmations FROM prme.journal WHERE op = 'reinforce'
        GROUP BY user_id, node_id
    ) AS c ON c.user_id = n.user_id AND c.node_id = n.id
    LEFT JOIN (
        SELECT user_id, node_id,
            count(*) FILTER (WHERE outcome = 'explicit_reinforcement') AS er,
            count(*) FILTER (WHERE outcome = 'implicit_success') AS isx,
            count(*) FILTER (WHERE outcome = 'neutral_exposure') AS ne,
            count(*) FILTER (WHERE outcome = 'explicit_correction') AS ec,
            max(created_at) AS last_outcome_at
        FROM prme.outcomes WHERE recorded_by <> 'reinforce'
        GROUP BY user_id, node_id
    ) AS o ON o.user_id = n.user_id AND o.node_id = n.id
) AS t
WHERE t.user_id = n.user_id AND t.id = n.id
"""
# prme.node_outcomes: outcome rows and confirmations (an outcome per journal record of op
# reinforce, its id the record's operation_id), newest first.
NODE_OUTCOMES = f"""
SELECT * FROM (
    SELECT {_OUTCOME_COLUMNS} FROM prme.outcomes
    WHERE user_id = $user_id AND node_id = $node_id AND recorded_by <> 'reinforce'
    UNION ALL
    SELECT operation_id, user_id, node_id, 'explicit_reinforcement', CAST(1.0 AS DECIMAL(3, 2)), evidence_id,
        NULL, NULL, NULL, request_id, 'reinforce', node_version, recorded_at
    FROM prme.journal WHERE user_id = $user_id AND node_id = $node_id AND op = 'reinforce'
) AS u
ORDER BY created_at DESC, id DESC
LIMIT $max_count
"""
_REF_CONTROL = re.compile(r"[\x01-\x1f\x7f-\x9f]")


def _valid_outcome(outcome: object) -> str:
    if not isinstance(outcome, str) or outcome not in _OUTCOME_WEIGHTS:
        shown = _quote_literal(outcome[:80]) if isinstance(outcome, str) else "NULL"
        raise InvalidInput(
            "outcome must be explicit_reinforcement, implicit_success, neutral_exposure or explicit_correction "
            f"(got {shown})"
        )
    return outcome


def _valid_ref(argument: str, value: str | None) -> str | None:
    """prme._valid_ref: 1 to 256 characters, no control characters or surrounding spaces."""
    if value is not None and (
        not isinstance(value, str)
        or not 1 <= len(value) <= 256
        or _REF_CONTROL.search(value)
        or value != value.strip(" ")
    ):
        raise InvalidInput(f"{argument} must be 1 to 256 characters without control characters or surrounding spaces")
    return None if value is None else _no_nul(argument, value)


def _valid_notes(notes: str | None) -> str | None:
    if notes is None:
        return None
    size = len(notes.encode("utf-8", "surrogatepass"))
    if size > _MAX_TEXT_BYTES:
        raise InvalidInput(f"notes must be at most 65536 bytes (got {size} bytes)")
    return _no_nul("notes", notes)


def _outcome_score(er: int, isx: int, ne: int, ec: int) -> Decimal:
    # numeric arithmetic of prme.outcome_summary: er * 1.0 + is * 0.2 + ne * 0 - ec * 1.0 (scale 1).
    return er * Decimal("1.0") + isx * Decimal("0.2") + ne * Decimal("0") - ec * Decimal("1.0")


def _stability_by_outcomes(er: int, isx: int, ne: int, ec: int) -> str:
    """prme._stability_by_outcomes: low on any correction or a negative score; stable only from
    two explicit reinforcements; otherwise semi-stable."""
    if ec > 0 or _outcome_score(er, isx, ne, ec) < 0:
        return "low"
    return "stable" if er >= 2 else "semi-stable"


def _outcome(row: Mapping[str, Any], *, replayed: bool) -> Outcome:
    return Outcome(
        id=row["id"],
        user_id=row["user_id"],
        node_id=row["node_id"],
        outcome=row["outcome"],
        weight=row["weight"],
        evidence_id=row["evidence_id"],
        profile_id=row["profile_id"],
        thread_id=row["thread_id"],
        notes=row["notes"],
        request_id=row["request_id"],
        recorded_by=row["recorded_by"],
        node_version=row["node_version"],
        created_at=cast(datetime, _utc(row["created_at"])),
        replayed=replayed,
    )


def _add_outcome(con: duckdb.DuckDBPyConnection, new_id: Callable[[], uuid.UUID], **values: Any) -> dict[str, Any]:
    """prme._add_outcome: append one outcome row (the caller validated everything)."""
    row = {"id": new_id(), "weight": _OUTCOME_WEIGHTS[values["outcome"]], **values}
    con.execute(INSERT_OUTCOME, row)
    # The running totals on the memory's row; evidence_refs written too, as _write_node does,
    # so that DuckDB detects a concurrent write of the row of either kind.
    key = {"user_id": row["user_id"], "id": row["node_id"]}
    con.execute(ADD_TO_TOTALS[row["outcome"]], {**key, "created_at": row["created_at"]})
    con.execute(TOUCH_EVIDENCE, key)
    return row


class OutcomeOperations(PackConnection):
    def record_outcome(self, request: RecordOutcome) -> Outcome:
        user_id = valid_user_id(request.user_id)
        outcome = _valid_outcome(request.outcome)
        profile_id = _valid_ref("profile_id", request.profile_id)
        thread_id = _valid_ref("thread_id", request.thread_id)
        notes = _valid_notes(request.notes)
        if request.node_id is None:
            raise InvalidInput("node_id must not be null")

        def work(con: duckdb.DuckDBPyConnection) -> Outcome:
            found = con.execute(OUTCOME_NODE, {"user_id": user_id, "node_id": request.node_id}).fetchone()
            if found is None:
                raise NotFoundError("node not found")
            node = dict(zip(("namespace", "scope", "lifecycle_state", "version"), found, strict=True))
            # A key bound to this same call is a replay, even of an archived node.
            if request.request_id is not None:
                key = con.execute(
                    REINFORCE_KEY,
                    {"user_id": user_id, "namespace": node["namespace"], "request_id": request.request_id},
                ).fetchone()
                if key is not None:
                    if key != ("record_outcome", request.node_id, request.evidence_id):
                        raise IdempotencyConflict(
                            "request_id was already used for another request "
                            "(an idempotency key is bound to one operation, node and evidence)"
                        )
                    stored = _fetch_dicts(
                        con.execute(
                            OUTCOME_BY_KEY,
                            {"user_id": user_id, "node_id": request.node_id, "request_id": request.request_id},
                        )
                    )[0]
                    if (stored["outcome"], stored["profile_id"], stored["thread_id"], stored["notes"]) != (
                        outcome,
                        profile_id,
                        thread_id,
                        notes,
                    ):
                        raise IdempotencyConflict(
                            "request_id was already used for another request "
                            "(this key recorded another outcome, profile_id, thread_id or notes)"
                        )
                    return _outcome(stored, replayed=True)
            _require_live_node_and_evidence(con, user_id, node, request.evidence_id)
            now = self._clock()
            if request.request_id is not None:
                con.execute(
                    INSERT_REQUEST_KEY,
                    {
                        "user_id": user_id,
                        "namespace": node["namespace"],
                        "request_id": request.request_id,
                        "operation": "record_outcome",
                        "node_id": request.node_id,
                        "evidence_id": request.evidence_id,
                        "node_version": node["version"],
                        "created_at": now,
                    },
                )
            row = _add_outcome(
                con,
                self._new_id,
                user_id=user_id,
                node_id=request.node_id,
                outcome=outcome,
                evidence_id=request.evidence_id,
                profile_id=profile_id,
                thread_id=thread_id,
                notes=notes,
                request_id=request.request_id,
                recorded_by="record_outcome",
                node_version=node["version"],
                created_at=now,
            )
            return _outcome(row, replayed=False)

        return self.run(work)

    def outcome_summary(self, request: GetOutcomeSummary) -> OutcomeSummary:
        user_id = valid_user_id(request.user_id)
        if request.node_id is None:
            raise InvalidInput("node_id must not be null")

        def work(con: duckdb.DuckDBPyConnection) -> OutcomeSummary:
            row = con.execute(OUTCOME_TOTALS, {"user_id": user_id, "node_id": request.node_id}).fetchone()
            if row is None:
                raise NotFoundError("node not found")
            er, isx, ne, ec, last_row, confirmations, last_reinforced_at = row
            # Confirmations are their journal records, counted apart from outcome rows.
            er += confirmations
            last = [t for t in (last_row, last_reinforced_at if confirmations > 0 else None) if t is not None]
            return OutcomeSummary(
                explicit_reinforcements=er,
                implicit_successes=isx,
                neutral_exposures=ne,
                explicit_corrections=ec,
                outcomes=er + isx + ne + ec,
                score=_outcome_score(er, isx, ne, ec),
                stability_by_outcomes=_stability_by_outcomes(er, isx, ne, ec),
                last_outcome_at=_utc(max(last)) if last else None,
            )

        return self.run(work)

    def node_outcomes(self, request: ListNodeOutcomes) -> list[Outcome]:
        user_id = valid_user_id(request.user_id)
        if request.node_id is None:
            raise InvalidInput("node_id must not be null")
        max_count = _valid_max_count(request.max_count)

        def work(con: duckdb.DuckDBPyConnection) -> list[Outcome]:
            if con.execute(NODE_EXISTS, {"user_id": user_id, "node_id": request.node_id}).fetchone() is None:
                raise NotFoundError("node not found")
            params = {"user_id": user_id, "node_id": request.node_id, "max_count": max_count}
            return [_outcome(row, replayed=False) for row in _fetch_dicts(con.execute(NODE_OUTCOMES, params))]

        return self.run(work)
