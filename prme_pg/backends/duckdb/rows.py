"""A memory's and an event's columns, and the models built from their rows."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import duckdb

from ...models import (
    Event,
    Node,
)

# Node columns as returned to callers: every column but the derived last_checksum.
_NODE_COLUMNS = (
    "id, user_id, namespace, scope, kind, content, confidence_base, salience_base, "
    "reinforcement_boost, last_reinforced_at, evidence_refs, stability, next_review_at, "
    "lifecycle_state, decay_profile, created_at, updated_at, version"
)


NODE_EXISTS = "SELECT 1 FROM prme.nodes WHERE user_id = $user_id AND id = $node_id"


# -- rows ----------------------------------------------------------------------------


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def _node(row: Mapping[str, Any], replayed: bool = False) -> Node:
    return Node(
        id=row["id"],
        user_id=row["user_id"],
        namespace=row["namespace"],
        scope=row["scope"],
        kind=row["kind"],
        content=row["content"],
        confidence_base=row["confidence_base"],
        salience_base=row["salience_base"],
        reinforcement_boost=row["reinforcement_boost"],
        last_reinforced_at=_utc(row["last_reinforced_at"]),
        evidence_refs=tuple(row["evidence_refs"]),
        stability=row["stability"],
        next_review_at=_utc(row["next_review_at"]),
        lifecycle_state=row["lifecycle_state"],
        decay_profile=row["decay_profile"],
        created_at=cast(datetime, _utc(row["created_at"])),
        updated_at=cast(datetime, _utc(row["updated_at"])),
        version=row["version"],
        replayed=replayed,
    )


_NODE_NAMES = tuple(name.strip() for name in _NODE_COLUMNS.split(","))
_CONFIRM_NAMES = (*_NODE_NAMES, "last_checksum")


def _node_from_values(values: Sequence[Any]) -> Node:
    return _node(dict(zip(_NODE_NAMES, values, strict=True)))


def _fetch_dicts(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    names = [column[0] for column in cursor.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _event(row: dict[str, Any]) -> Event:
    return Event(
        id=row["id"],
        user_id=row["user_id"],
        namespace=row["namespace"],
        scope=row["scope"],
        kind=row["kind"],
        content=row["content"],
        payload=json.loads(row["payload"]),
        occurred_at=row["occurred_at"].astimezone(UTC),
        created_at=row["created_at"].astimezone(UTC),
    )
