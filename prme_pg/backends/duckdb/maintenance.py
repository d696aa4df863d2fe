"""Maintenance (sql/postgres/230 settings, 240 reviews, 250 the report): the owner's settings,
mark_reviewed, and the maintenance report as one set-based query."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import duckdb

from ...errors import InvalidInput, NotFoundError
from ...models import (
    MaintenanceRecommendation,
    MaintenanceSetting,
    Node,
)
from ...validation import valid_user_id
from .. import (
    GetMaintenanceReport,
    GetMaintenanceSettings,
    MarkReviewed,
    ResetMaintenanceSettings,
    SetMaintenanceSetting,
)
from .connection import PackConnection
from .records import journal_entry
from .rows import _node
from .validation import _STABILITIES, valid_fraction, valid_timestamp
from .writes import _node_row, _write_node

# prme._maintenance_setting: the owner's row for the stability, else the default ('*'). Both rows
# are read and the choice made in Python: ORDER BY ... LIMIT 1 doubled the statement's cost, and
# add_node and mark_reviewed run it on every call.
MAINTENANCE_SETTING = (
    "SELECT user_id, review_cadence, decay_per_cycle FROM prme.maintenance_settings "
    "WHERE user_id IN ($user_id, '*') AND stability = $stability"
)


def _setting(con: duckdb.DuckDBPyConnection, user_id: str, stability: str) -> tuple[timedelta, Decimal]:
    """prme._maintenance_setting: the owner's review cadence and decay per cycle for a
    stability, else the default's."""
    rows = con.execute(MAINTENANCE_SETTING, {"user_id": user_id, "stability": stability}).fetchall()
    assert rows  # the defaults are rows of the pack
    _, cadence, decay = min(rows, key=lambda row: row[0] == "*")  # the owner's first
    return cadence, decay


# The same for several owners at once (a batch of many owners' memories): each owner's
# review cadence per stability, its own row else the default's.
REVIEW_CADENCES = (
    "SELECT DISTINCT ON (o.user_id, s.stability) o.user_id, s.stability, s.review_cadence "
    "FROM (SELECT unnest(CAST($user_ids AS VARCHAR [])) AS user_id) AS o "
    "JOIN prme.maintenance_settings AS s ON s.user_id = o.user_id OR s.user_id = '*' "
    "ORDER BY o.user_id, s.stability, s.user_id = '*'"
)


def _review_cadences(con: duckdb.DuckDBPyConnection, user_ids: list[str]) -> dict[tuple[str, str], timedelta]:
    """(owner, stability) -> review cadence, as :func:`_setting` gives it, for every stability."""
    rows = con.execute(REVIEW_CADENCES, {"user_ids": user_ids}).fetchall()
    return {(user_id, stability): cadence for user_id, stability, cadence in rows}


SETTINGS = (
    "SELECT DISTINCT ON (stability) stability, review_cadence, decay_per_cycle, "
    "CASE WHEN user_id = '*' THEN 'default' ELSE 'owner' END AS source "
    "FROM prme.maintenance_settings WHERE user_id IN ($user_id, '*') ORDER BY stability, user_id = '*'"
)
UPSERT_SETTING = (
    "INSERT OR REPLACE INTO prme.maintenance_settings VALUES ($user_id, $stability, $cadence, $decay, $now)"
)
# A review settles what it saw on the memory's row: counts only grow, so greatest()
# makes settling idempotent.
SETTLE_OUTCOMES = """
UPDATE prme.nodes SET
    reviewed_explicit_reinforcements = greatest(reviewed_explicit_reinforcements, $er),
    reviewed_implicit_successes = greatest(reviewed_implicit_successes, $isx),
    reviewed_neutral_exposures = greatest(reviewed_neutral_exposures, $ne),
    reviewed_explicit_corrections = greatest(reviewed_explicit_corrections, $ec),
    reviewed_at = $now
WHERE user_id = $user_id AND id = $node_id
"""
# Whether the owner has outcomes (rows or confirmations) recorded after as_of: never when
# as_of is now, and then the report joins nothing. The filters on created_at and
# recorded_at skip every block of rows older than as_of.
LATER_OUTCOMES = """
SELECT EXISTS (
    SELECT 1 FROM prme.outcomes WHERE user_id = $user_id AND created_at > $as_of AND recorded_by <> 'reinforce'
) OR EXISTS (
    SELECT 1 FROM prme.journal WHERE user_id = $user_id AND recorded_at > $as_of AND op = 'reinforce'
)
"""
# The counts of outcomes recorded after as_of, per memory.
_LATER_CTE = """
later AS (
    SELECT node_id,
        count(*) FILTER (WHERE outcome = 'explicit_reinforcement' AND NOT confirmation) AS er,
        count(*) FILTER (WHERE confirmation) AS confirmations,
        count(*) FILTER (WHERE outcome = 'implicit_success') AS isx,
        count(*) FILTER (WHERE outcome = 'explicit_correction') AS ec
    FROM (
        SELECT node_id, outcome, false AS confirmation FROM prme.outcomes
        WHERE user_id = $user_id AND created_at > $as_of AND recorded_by <> 'reinforce'
        UNION ALL
        SELECT node_id, 'explicit_reinforcement', true FROM prme.journal
        WHERE user_id = $user_id AND recorded_at > $as_of AND op = 'reinforce'
    )
    GROUP BY node_id
),
"""
# prme.maintenance_report as one query over the owner's memories, reading one row per
# memory (the bookkeeping on it): counts are the totals less what the last review settled
# less what came after as_of. REPORT_AS_OF_PAST joins the outcomes after as_of (l);
# REPORT, for when there are none, has l's counts as NULL and joins nothing (a join would
# keep the filter from the scan: measured 2x slower). The rules (prme._maintenance_moves,
# _cycles_due, the decay) are computed here, set-based. The settings come as parameters:
# a cadence in microseconds and a decay in ten-thousandths per stability.
_REPORT = """
WITH {later_cte}counted AS (
    -- One level: every value computed once per memory. The filter is what the counts call
    -- for (greatest(x, 0) >= k is x >= k): due, a correction, or (active) two
    -- reinforcements below stable or five implicit successes at low.
    SELECT n.id, n.lifecycle_state, n.stability, n.next_review_at,
        coalesce(n.next_review_at <= $as_of, false) AS due,
        greatest(n.recorded_reinforcements + n.reinforcements - n.reviewed_explicit_reinforcements
            - coalesce(l.er + least(n.reinforcements, l.confirmations), 0), 0) AS er,
        greatest(n.implicit_successes - n.reviewed_implicit_successes - coalesce(l.isx, 0), 0) AS isx,
        greatest(n.explicit_corrections - n.reviewed_explicit_corrections - coalesce(l.ec, 0), 0) AS ec,
        CASE WHEN n.decay_anchor = n.next_review_at THEN n.decay_cycles ELSE 0 END AS cycles_done,
        CAST(n.confidence_base * 10000 AS BIGINT) AS confidence_units,
        -- Overdue cycles begun by as_of (prme._cycles_due), due memories only.
        CASE WHEN n.next_review_at <= $as_of
            THEN (epoch_us(CAST($as_of AS TIMESTAMPTZ)) - epoch_us(n.next_review_at))
                // CASE n.stability WHEN 'low' THEN $low_us WHEN 'semi-stable' THEN $semi_us ELSE $stable_us END + 1
            ELSE 0
        END AS cycles_due,
        -- Decay per cycle in ten-thousandths; 0 for memories that do not decay.
        CASE WHEN n.confidence_base > 0 AND n.decay_profile <> 'permanent' THEN
            CASE n.stability WHEN 'low' THEN $low_decay WHEN 'semi-stable' THEN $semi_decay ELSE $stable_decay END
        ELSE 0 END AS per_cycle
    FROM prme.nodes AS n
    {later}
    WHERE n.user_id = $user_id AND n.lifecycle_state IN ('active', 'contested')
      AND (n.next_review_at <= $as_of
           OR n.explicit_corrections - n.reviewed_explicit_corrections - coalesce(l.ec, 0) >= 1
           OR (n.lifecycle_state = 'active' AND (
               (n.recorded_reinforcements + n.reinforcements - n.reviewed_explicit_reinforcements
                   - coalesce(l.er + least(n.reinforcements, l.confirmations), 0) >= 2 AND n.stability <> 'stable')
               OR (n.implicit_successes - n.reviewed_implicit_successes - coalesce(l.isx, 0) >= 5
                   AND n.stability = 'low'))))
)
-- Plain numbers where Python would convert slowly: the recommendations as (decays, due,
-- moves), confidences in ten-thousandths (-1: PostgreSQL's integer 0, nothing left), the
-- schedule in epoch microseconds; _report turns them into the same values.
SELECT c.id, c.cycles_due > c.cycles_done AND c.per_cycle > 0 AS decays, c.due,
    -- prme._maintenance_moves
    CASE
        WHEN c.ec >= 1 THEN CASE WHEN c.stability = 'low' THEN 1 ELSE 2 END
            + CASE WHEN c.ec >= 2 AND c.lifecycle_state = 'active' THEN 2 ELSE 0 END
        WHEN c.lifecycle_state <> 'active' THEN 0
        WHEN c.er >= 2 THEN CASE WHEN c.stability = 'stable' THEN 0 ELSE 5 END
        WHEN c.isx >= 5 AND c.stability = 'low' THEN 6
        ELSE 0
    END,
    c.lifecycle_state, c.stability, c.confidence_units,
    CASE WHEN c.cycles_due > c.cycles_done AND c.per_cycle > 0
        THEN greatest(c.confidence_units - (c.cycles_due - c.cycles_done) * c.per_cycle, -1)
    END,
    epoch_us(c.next_review_at), c.cycles_due, c.cycles_done, c.er, c.isx, c.ec
FROM counted AS c
"""
REPORT = _REPORT.format(
    later_cte="",
    later="CROSS JOIN (SELECT CAST(NULL AS BIGINT) AS er, CAST(NULL AS BIGINT) AS confirmations, "
    "CAST(NULL AS BIGINT) AS isx, CAST(NULL AS BIGINT) AS ec) AS l",
)
REPORT_AS_OF_PAST = _REPORT.format(later_cte=_LATER_CTE.lstrip(), later="LEFT JOIN later AS l ON l.node_id = n.id")


def report_statement(con: duckdb.DuckDBPyConnection, user_id: str, as_of: datetime) -> str:
    """The report's statement for the owner at as_of: REPORT_AS_OF_PAST if outcomes were
    recorded after as_of, else REPORT."""
    later = con.execute(LATER_OUTCOMES, {"user_id": user_id, "as_of": as_of}).fetchone()
    return REPORT_AS_OF_PAST if later is not None and later[0] else REPORT


def _report(con: duckdb.DuckDBPyConnection, user_id: str, as_of: datetime) -> list[MaintenanceRecommendation]:
    params: dict[str, Any] = {"user_id": user_id, "as_of": as_of}
    for setting in _settings(con, user_id):
        key = _SETTING_KEYS[setting.stability]
        params[f"{key}_us"] = setting.review_cadence // timedelta(microseconds=1)
        params[f"{key}_decay"] = int(setting.decay_per_cycle * 10000)
    fractions: dict[int, Decimal] = {-1: Decimal(0)}

    def fraction(units: int) -> Decimal:
        # numeric(5, 4) from ten-thousandths, each value built once.
        value = fractions.get(units)
        if value is None:
            value = fractions[units] = Decimal(units).scaleb(-4)
        return value

    result: list[MaintenanceRecommendation] = []
    rows = con.execute(report_statement(con, user_id, as_of), params)
    while batch := rows.fetchmany(8192):
        for node_id, decays, due, moves, state, stability, units, left, due_us, *counts in batch:
            result.append(
                MaintenanceRecommendation(
                    node_id,
                    _RECOMMENDATIONS[decays, due, moves],
                    state,
                    stability,
                    _SUGGESTED_STABILITY[moves, stability],
                    fraction(units),
                    None if left is None else fraction(left),
                    None if due_us is None else _EPOCH + timedelta(microseconds=due_us),
                    *counts,
                )
            )
    return result


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The recommendations of a memory by (decays, due, moves): PostgreSQL's order, decay first.
_MOVES: dict[int, tuple[str, ...]] = {
    0: (),
    1: ("review_memory",),
    2: ("review_memory", "decrease_stability"),
    3: ("review_memory", "mark_contested"),
    4: ("review_memory", "decrease_stability", "mark_contested"),
    5: ("increase_stability",),
    6: ("flag_for_review",),
}
_RECOMMENDATIONS = {
    (decays, due, moves): (("decay_confidence",) if decays else ()) + (("review_due",) if due else ()) + listed
    for decays in (False, True)
    for due in (False, True)
    for moves, listed in _MOVES.items()
}
# Decreases go one step down, increases one step up, a flag at most to semi-stable.
_SUGGESTED_STABILITY: dict[tuple[int, str], str | None] = {
    (moves, stability): (
        ("semi-stable" if stability == "low" else "stable")
        if moves == 5
        else "semi-stable"
        if moves == 6
        else ("semi-stable" if stability == "stable" else "low")
        if moves in (2, 4)
        else None
    )
    for moves in _MOVES
    for stability in _STABILITIES
}
_SETTING_KEYS = {"low": "low", "semi-stable": "semi", "stable": "stable"}


def _settings(con: duckdb.DuckDBPyConnection, user_id: str) -> list[MaintenanceSetting]:
    return [MaintenanceSetting(*row) for row in con.execute(SETTINGS, {"user_id": user_id}).fetchall()]


def _owner_not_defaults(user_id: str) -> str:
    if user_id == "*":
        raise InvalidInput("user_id '*' names the defaults, which only the database owner changes")
    return user_id


def _timestamptz_text(value: datetime) -> str:
    """PostgreSQL's text of a timestamptz in UTC (2030-01-02 03:04:05.5+00)."""
    v = value.astimezone(UTC)
    text = v.strftime("%Y-%m-%d %H:%M:%S")
    if v.microsecond:
        text += f".{v.microsecond:06d}".rstrip("0")
    return text + "+00"


def _interval_text(value: timedelta) -> str:
    """PostgreSQL's text of an interval of days and time (1 day 02:03:04.5)."""
    days, rest = value.days, value - timedelta(days=value.days)
    seconds, micro = divmod(rest.seconds, 1), rest.microseconds
    hours, remainder = divmod(seconds[0], 3600)
    minutes, secs = divmod(remainder, 60)
    time = f"{hours:02d}:{minutes:02d}:{secs:02d}" + (f".{micro:06d}".rstrip("0") if micro else "")
    if days == 0:
        return time
    prefix = f"{days} day" + ("" if days in (1, -1) else "s")
    return prefix if time == "00:00:00" else f"{prefix} {time}"


class MaintenanceOperations(PackConnection):
    def maintenance_settings(self, request: GetMaintenanceSettings) -> list[MaintenanceSetting]:
        user_id = valid_user_id(request.user_id)
        return self.run(lambda con: _settings(con, user_id))

    def set_maintenance_setting(self, request: SetMaintenanceSetting) -> list[MaintenanceSetting]:
        user_id = _owner_not_defaults(valid_user_id(request.user_id))
        decay = valid_fraction("decay_per_cycle", request.decay_per_cycle)
        if request.stability not in _STABILITIES:
            raise InvalidInput("stability must be low, semi-stable or stable")
        cadence = request.review_cadence
        if (
            not isinstance(cadence, timedelta)
            or not timedelta(hours=1) <= cadence <= timedelta(days=3650)
            or cadence.microseconds != 0
        ):
            shown = _interval_text(cadence) if isinstance(cadence, timedelta) else "NULL"
            raise InvalidInput(
                "review_cadence must be between 1 hour and 3650 days, in whole days, hours, minutes or seconds "
                f"(got {shown})"
            )

        def work(con: duckdb.DuckDBPyConnection) -> list[MaintenanceSetting]:
            con.execute(
                UPSERT_SETTING,
                {
                    "user_id": user_id,
                    "stability": request.stability,
                    "cadence": cadence,
                    "decay": decay,
                    "now": self._clock(),
                },
            )
            return _settings(con, user_id)

        return self.run(work)

    def reset_maintenance_settings(self, request: ResetMaintenanceSettings) -> list[MaintenanceSetting]:
        user_id = _owner_not_defaults(valid_user_id(request.user_id))

        def work(con: duckdb.DuckDBPyConnection) -> list[MaintenanceSetting]:
            con.execute("DELETE FROM prme.maintenance_settings WHERE user_id = $user_id", {"user_id": user_id})
            return _settings(con, user_id)

        return self.run(work)

    def mark_reviewed(self, request: MarkReviewed) -> Node:
        user_id = valid_user_id(request.user_id)
        given = valid_timestamp("next_review_at", request.next_review_at)
        if request.node_id is None:
            raise InvalidInput("node_id must not be null")

        def work(con: duckdb.DuckDBPyConnection) -> Node:
            now = self._clock()
            if given is not None and given <= now:
                raise InvalidInput(f"next_review_at must be in the future (got {_timestamptz_text(given)})")
            node = _node_row(con, user_id, request.node_id)
            if node is None or node["lifecycle_state"] == "archived":
                raise NotFoundError("node not found")
            after = dict(node)
            after["next_review_at"] = given or now + _setting(con, user_id, node["stability"])[0]
            after["updated_at"] = now
            after["version"] = node["version"] + 1
            operation_id = self._new_id()
            record, checksum = journal_entry("review", "maintenance_v1", node, after, operation_id, now)
            # The review covers every outcome and confirmation so far: the totals on the row,
            # settled by the node's own write.
            reviewed = {
                "er": node["recorded_reinforcements"] + node["reinforcements"],
                "isx": node["implicit_successes"],
                "ne": node["neutral_exposures"],
                "ec": node["explicit_corrections"],
            }
            _write_node(con, node, after, "review", operation_id, record, checksum, reviewed=reviewed)
            return _node(after)

        return self.run(work)

    def maintenance_report(self, request: GetMaintenanceReport) -> list[MaintenanceRecommendation]:
        user_id = valid_user_id(request.user_id)
        as_of = valid_timestamp("as_of", request.as_of)

        def work(con: duckdb.DuckDBPyConnection) -> list[MaintenanceRecommendation]:
            return _report(con, user_id, as_of or self._clock())

        return self.run(work)
