"""Maintenance patches (sql/postgres/260_patches.sql): a patch proposed from the report, read
back as its document, and applied op by op."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, cast

import duckdb

from ...errors import InvalidInput, NotFoundError
from ...models import (
    AppliedOp,
    MaintenancePatch,
    MaintenanceRecommendation,
    MaintenanceSetting,
)
from ...validation import valid_user_id
from .. import (
    ApplyPatch,
    CreateMaintenancePatch,
    GetPatch,
)
from .connection import PackConnection
from .maintenance import SETTLE_OUTCOMES, _interval_text, _report, _setting, _settings, _timestamptz_text
from .records import _fraction_text, journal_entry
from .rows import _fetch_dicts, _utc
from .validation import valid_timestamp
from .writes import _node_row, _write_node

# recommendation -> (order within a memory, op, risk, requires_review, default_selected)
_OP_KINDS: dict[str, tuple[int, str, str, bool, bool]] = {
    "decay_confidence": (1, "decay_confidence", "low", False, True),
    "increase_stability": (2, "update_stability", "low", False, True),
    "decrease_stability": (2, "update_stability", "medium", True, True),
    "flag_for_review": (2, "update_stability", "medium", True, False),
    "mark_contested": (3, "mark_contested", "high", True, False),
}
# What a review applying an op has seen: the node's version, what its last review
# settled and its neutral exposures so far.
PATCH_SEEN = (
    "SELECT version, reviewed_explicit_reinforcements, reviewed_implicit_successes, reviewed_explicit_corrections, "
    "neutral_exposures FROM prme.nodes WHERE user_id = $user_id AND id = $node_id"
)
PATCH_EXISTS = "SELECT as_of, created_at FROM prme.maintenance_patches WHERE user_id = $user_id AND id = $patch_id"
PATCH_OPS = "SELECT * FROM prme.patch_ops WHERE user_id = $user_id AND patch_id = $patch_id ORDER BY op_no"
PATCH_OPS_WITH_CONTENT = (
    "SELECT o.*, left(n.content, 200) AS content FROM prme.patch_ops AS o "
    "JOIN prme.nodes AS n ON n.user_id = o.user_id AND n.id = o.node_id "
    "WHERE o.user_id = $user_id AND o.patch_id = $patch_id ORDER BY o.op_no"
)
MARK_OP_APPLIED = (
    "UPDATE prme.patch_ops SET applied_at = $now, applied_mode = $mode, applied_version = $version "
    "WHERE user_id = $user_id AND patch_id = $patch_id AND op_no = $op_no"
)
RECORD_DECAY = (
    "UPDATE prme.nodes SET decay_anchor = $anchor, decay_cycles = $cycles WHERE user_id = $user_id AND id = $node_id"
)


def _op_reason(recommendation: str, row: MaintenanceRecommendation, setting: MaintenanceSetting) -> str:
    if recommendation == "decay_confidence":
        assert row.next_review_at is not None and row.decayed_cycles is not None
        return (
            f"overdue for review since {row.next_review_at.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}: cycles "
            f"{row.decayed_cycles + 1} to {row.overdue_cycles} of {_interval_text(setting.review_cadence)} "
            f"decayed at -{_fraction_text(setting.decay_per_cycle)} each"
        )
    if recommendation == "increase_stability":
        return f"{row.explicit_reinforcements} explicit reinforcements and no correction since the last review"
    if recommendation == "flag_for_review":
        return (
            f"{row.implicit_successes} implicit successes and no correction since the last review: semi-stable at "
            "most, stable needs explicit confirmation"
        )
    return f"{row.explicit_corrections} explicit correction(s) since the last review"


def _json_number(value: Decimal) -> float | int:
    # trim_scale(numeric) in jsonb, as the PostgreSQL client reads it back.
    text = _fraction_text(value)
    return float(text) if "." in text else int(text)


def _jsonb_time(value: datetime | None) -> str | None:
    # A timestamptz in jsonb (session TimeZone UTC): 2026-01-02T03:04:05.5+00:00.
    if value is None:
        return None
    v = value.astimezone(UTC)
    fraction = f".{v.microsecond:06d}".rstrip("0") if v.microsecond else ""
    return f"{v:%Y-%m-%dT%H:%M:%S}{fraction}+00:00"


def _patch_document(con: duckdb.DuckDBPyConnection, user_id: str, patch_id: uuid.UUID) -> MaintenancePatch:
    params = {"user_id": user_id, "patch_id": patch_id}
    found = con.execute(PATCH_EXISTS, params).fetchone()
    if found is None:
        raise NotFoundError("patch not found")
    as_of, created_at = found
    ops = []
    for o in _fetch_dicts(con.execute(PATCH_OPS_WITH_CONTENT, params)):
        updates: dict[str, Any]
        if o["op"] == "update_stability":
            updates = {"stability": {"from": o["stability_from"], "to": o["stability_to"]}}
        elif o["op"] == "decay_confidence":
            updates = {
                "confidence_base": {"from": _json_number(o["confidence_from"]), "to": _json_number(o["confidence_to"])},
                "decay_cycles": {"from": o["decay_cycles_from"], "to": o["decay_cycles_to"]},
            }
        else:
            updates = {"lifecycle_state": {"from": o["lifecycle_from"], "to": o["lifecycle_to"]}}
        ops.append(
            {
                "op_id": o["op_id"],
                "op": o["op"],
                "recommendation": o["recommendation"],
                "target": {"node_id": str(o["node_id"]), "version": o["node_version"], "content": o["content"]},
                "updates": updates,
                "reason": o["reason"],
                "risk": o["risk"],
                "requires_review": o["requires_review"],
                "default_selected": o["default_selected"],
                "status": "pending" if o["applied_at"] is None else "applied",
                "applied_at": _jsonb_time(o["applied_at"]),
                "applied_mode": o["applied_mode"],
            }
        )
    return MaintenancePatch(patch_id, cast(datetime, _utc(created_at)), cast(datetime, _utc(as_of)), tuple(ops))


class PatchOperations(PackConnection):
    def maintenance_patch(self, request: CreateMaintenancePatch) -> MaintenancePatch:
        user_id = valid_user_id(request.user_id)
        given = valid_timestamp("as_of", request.as_of)

        def work(con: duckdb.DuckDBPyConnection) -> MaintenancePatch:
            now = self._clock()
            as_of = given or now
            # A patch for the future would decay cycles that have not begun yet.
            if as_of > now:
                raise InvalidInput(f"as_of of a patch must not be in the future (got {_timestamptz_text(as_of)})")
            patch_id = self._new_id()
            con.execute(
                "INSERT INTO prme.maintenance_patches VALUES ($user_id, $id, $as_of, $now)",
                {"user_id": user_id, "id": patch_id, "as_of": as_of, "now": now},
            )
            settings = {s.stability: s for s in _settings(con, user_id)}
            proposals = [
                (row.node_id, _OP_KINDS[recommendation][0], recommendation, row)
                for row in _report(con, user_id, as_of)
                for recommendation in row.recommendations
                if recommendation in _OP_KINDS
            ]
            proposals.sort(key=lambda p: (p[0], p[1]))
            ops = []
            for op_no, (node_id, _, recommendation, row) in enumerate(proposals, start=1):
                seen = con.execute(PATCH_SEEN, {"user_id": user_id, "node_id": node_id}).fetchone()
                assert seen is not None
                version, reviewed_er, reviewed_isx, reviewed_ec, neutral = seen
                op, risk, requires_review, default_selected = _OP_KINDS[recommendation][1:]
                setting = settings[row.stability]
                ops.append(
                    {
                        "user_id": user_id,
                        "patch_id": patch_id,
                        "op_no": op_no,
                        "op_id": f"op_{op_no:03d}",
                        "op": op,
                        "recommendation": recommendation,
                        "node_id": node_id,
                        "node_version": version,
                        "reason": _op_reason(recommendation, row, setting),
                        "risk": risk,
                        "requires_review": requires_review,
                        "default_selected": default_selected,
                        "stability_from": row.stability if op == "update_stability" else None,
                        "stability_to": row.suggested_stability if op == "update_stability" else None,
                        "confidence_from": row.confidence_base if op == "decay_confidence" else None,
                        "confidence_to": row.suggested_confidence if op == "decay_confidence" else None,
                        "lifecycle_from": row.lifecycle_state if op == "mark_contested" else None,
                        "lifecycle_to": "contested" if op == "mark_contested" else None,
                        "decay_anchor": row.next_review_at if op == "decay_confidence" else None,
                        "decay_cycles_from": row.decayed_cycles if op == "decay_confidence" else None,
                        "decay_cycles_to": row.overdue_cycles if op == "decay_confidence" else None,
                        # What a review applying this op has seen: every outcome up to as_of.
                        "seen_explicit_reinforcements": reviewed_er + row.explicit_reinforcements,
                        "seen_implicit_successes": reviewed_isx + row.implicit_successes,
                        "seen_neutral_exposures": neutral,
                        "seen_explicit_corrections": reviewed_ec + row.explicit_corrections,
                        "operation_id": self._new_id(),
                    }
                )
            if ops:
                columns = list(ops[0])
                con.execute(
                    f"INSERT INTO prme.patch_ops ({', '.join(columns)}) SELECT "
                    + ", ".join(f"unnest(${c})" for c in columns),
                    {c: [op[c] for op in ops] for c in columns},
                )
            return _patch_document(con, user_id, patch_id)

        return self.run(work)

    def get_patch(self, request: GetPatch) -> MaintenancePatch:
        user_id = valid_user_id(request.user_id)
        if request.patch_id is None:
            raise InvalidInput("patch_id must not be null")
        return self.run(lambda con: _patch_document(con, user_id, request.patch_id))

    def apply_patch(self, request: ApplyPatch) -> list[AppliedOp]:
        user_id = valid_user_id(request.user_id)
        if request.patch_id is None:
            raise InvalidInput("patch_id must not be null")
        if request.mode not in ("manual", "auto"):
            raise InvalidInput("mode must be manual or auto")
        ids: list[str] = []
        if request.mode == "manual":
            if request.op_ids is None or any(i is None for i in request.op_ids):
                raise InvalidInput("manual mode applies the selected ops: op_ids must list them")
            if len(request.op_ids) > 10000 or any(len(i) > 64 for i in request.op_ids):
                raise InvalidInput("op_ids must list at most 10000 op ids of at most 64 characters")
            ids = sorted(set(request.op_ids))
        elif request.op_ids is not None:
            raise InvalidInput("auto mode chooses its ops: op_ids must be null")

        def work(con: duckdb.DuckDBPyConnection) -> list[AppliedOp]:
            params = {"user_id": user_id, "patch_id": request.patch_id}
            if con.execute(PATCH_EXISTS, params).fetchone() is None:
                raise NotFoundError("patch not found")
            ops = _fetch_dicts(con.execute(PATCH_OPS, params))
            if request.mode == "manual":
                known = {op["op_id"] for op in ops}
                missing = [i for i in ids if i not in known]
                if missing:
                    more = f" and {len(missing) - 20} more" if len(missing) > 20 else ""
                    raise NotFoundError(
                        f"operation not found in this patch (unknown op_ids: {', '.join(missing[:20])}{more})"
                    )
                chosen = [op for op in ops if op["op_id"] in set(ids)]
            else:
                chosen = [
                    op
                    for op in ops
                    if op["op"] == "decay_confidence"
                    or (op["recommendation"] == "increase_stability" and not op["requires_review"])
                ]
            results = []
            for op in chosen:
                if op["applied_at"] is not None:
                    done = f"applied at {_timestamptz_text(op['applied_at'])} in {op['applied_mode']} mode"
                    results.append(
                        AppliedOp(op["op_id"], op["op"], op["node_id"], "already_applied", done, op["applied_version"])
                    )
                    continue
                now = self._clock()
                detail, version = self._apply_patch_op(con, op, now)
                if version is not None:
                    con.execute(
                        MARK_OP_APPLIED,
                        {**params, "op_no": op["op_no"], "now": now, "mode": request.mode, "version": version},
                    )
                status = "applied" if version is not None else "stale"
                results.append(AppliedOp(op["op_id"], op["op"], op["node_id"], status, detail, version))
            return results

        return self.run(work)

    def _apply_patch_op(
        self, con: duckdb.DuckDBPyConnection, op: Mapping[str, Any], now: datetime
    ) -> tuple[str | None, int | None]:
        """prme._apply_patch_op: (None, the new version) once applied, or (why, None) when stale."""
        node = _node_row(con, op["user_id"], op["node_id"])
        if node is None or node["lifecycle_state"] not in ("active", "contested"):
            return f"the memory is {node['lifecycle_state'] if node else 'gone'}", None
        after = dict(node)
        if op["op"] == "decay_confidence":
            anchor, cycles = node["decay_anchor"], node["decay_cycles"]
            done = cycles if anchor is not None and anchor == node["next_review_at"] else 0
            if node["next_review_at"] != op["decay_anchor"]:
                return "the review schedule changed since the patch was proposed", None
            if done != op["decay_cycles_from"]:
                return f"{done} overdue cycles are decayed already, the patch expected {op['decay_cycles_from']}", None
            if node["confidence_base"] != op["confidence_from"]:
                return (
                    f"confidence_base is {_fraction_text(node['confidence_base'])} now, "
                    f"the patch expected {_fraction_text(op['confidence_from'])}"
                ), None
            after["confidence_base"] = op["confidence_to"]
        elif op["op"] == "update_stability":
            if node["stability"] != op["stability_from"]:
                return f"stability is {node['stability']} now, the patch expected {op['stability_from']}", None
            if (
                op["recommendation"] in ("increase_stability", "flag_for_review")
                and node["lifecycle_state"] != "active"
            ):
                return (f"the memory is {node['lifecycle_state']}: stability is raised for active memories only"), None
            # A stability change is a review: the cadence restarts from now.
            after["stability"] = op["stability_to"]
            after["next_review_at"] = now + _setting(con, op["user_id"], op["stability_to"])[0]
        else:
            if node["lifecycle_state"] != op["lifecycle_from"]:
                return (
                    f"lifecycle_state is {node['lifecycle_state']} now, the patch expected {op['lifecycle_from']}"
                ), None
            after["lifecycle_state"] = op["lifecycle_to"]
        after["updated_at"] = now
        after["version"] = node["version"] + 1
        record, checksum = journal_entry(op["op"], "maintenance_v1", node, after, op["operation_id"], now)
        _write_node(con, node, after, op["op"], op["operation_id"], record, checksum)
        if op["op"] == "decay_confidence":
            con.execute(
                RECORD_DECAY,
                {
                    "user_id": op["user_id"],
                    "node_id": op["node_id"],
                    "anchor": op["decay_anchor"],
                    "cycles": op["decay_cycles_to"],
                },
            )
        else:
            # Stability changes and mark_contested are reviewed decisions: what the
            # proposal saw is settled.
            con.execute(
                SETTLE_OUTCOMES,
                {
                    "user_id": op["user_id"],
                    "node_id": op["node_id"],
                    "er": op["seen_explicit_reinforcements"],
                    "isx": op["seen_implicit_successes"],
                    "ne": op["seen_neutral_exposures"],
                    "ec": op["seen_explicit_corrections"],
                    "now": now,
                },
            )
        return None, after["version"]
