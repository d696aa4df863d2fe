"""Journal records built in Python: a node's state text (prme._node_state) and the records of
its changes (prme._journal_record_v2), byte for byte PostgreSQL's."""

from __future__ import annotations

import functools
import hashlib
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from json.encoder import encode_basestring
from typing import Any

# -- records: sql/postgres/040 and 060 (_node_state, _journal_record_v2), built in Python --
# A confirmation's record is built here rather than by the pack's SQL macros (which
# the other writes use): the same bytes (tests/test_conformance.py compares them with
# PostgreSQL's), without planning a large macro expansion on every call.


# RFC 8785 strings, as PostgreSQL's to_json(text): \" \\ \b \f \n \r \t, other control
# characters as \u00xx (lowercase), everything else as is. This is what json.dumps(value,
# ensure_ascii=False) returns for a string (it calls the same C function), without building an
# encoder per call: a record has nine strings, and json.dumps cost ~3.6 us each.
_json_text: Callable[[str], str] = encode_basestring


# A batch's records share their times (created_at, updated_at, recorded_at are one transaction's
# now) and their fractions: each text is computed once (an aware datetime's astimezone and
# formatting cost ~8 us). Equal instants and equal numbers hash alike and have one text.
@functools.lru_cache(maxsize=1024)
def _json_time_text(value: datetime | None) -> str:
    if value is None:
        return "null"
    v = value.astimezone(UTC)
    return f'"{v.year:04d}-{v.month:02d}-{v.day:02d}T{v.hour:02d}:{v.minute:02d}:{v.second:02d}.{v.microsecond:06d}Z"'


@functools.lru_cache(maxsize=1024)
def _fraction_text(value: Decimal) -> str:
    # trim_scale(numeric(5, 4))::text: 0.6500 -> 0.65, 1.0000 -> 1, 0.0000 -> 0. A numeric has no
    # negative zero: Decimal("-0") is 0 (adding 0 drops the sign).
    return format((value + 0).normalize(), "f")


def node_state_text(node: Mapping[str, Any]) -> str:
    """prme._node_state: a node's state as RFC 8785 text (every column but derived ones)."""
    refs = ",".join(f'"{ref}"' for ref in node["evidence_refs"])
    return (
        f'{{"confidence_base":{_fraction_text(node["confidence_base"])}'
        f',"content":{_json_text(node["content"])}'
        f',"created_at":{_json_time_text(node["created_at"])}'
        f',"decay_profile":{_json_text(node["decay_profile"])}'
        f',"evidence_refs":[{refs}]'
        f',"id":"{node["id"]}"'
        f',"kind":{_json_text(node["kind"])}'
        f',"last_reinforced_at":{_json_time_text(node["last_reinforced_at"])}'
        f',"lifecycle_state":{_json_text(node["lifecycle_state"])}'
        f',"namespace":{_json_text(node["namespace"])}'
        f',"next_review_at":{_json_time_text(node["next_review_at"])}'
        f',"reinforcement_boost":{_fraction_text(node["reinforcement_boost"])}'
        f',"salience_base":{_fraction_text(node["salience_base"])}'
        f',"scope":{_json_text(node["scope"])}'
        f',"stability":{_json_text(node["stability"])}'
        f',"updated_at":{_json_time_text(node["updated_at"])}'
        f',"user_id":{_json_text(node["user_id"])}'
        f',"version":{node["version"]}}}'
    )


def _uuid_text(value: uuid.UUID | None) -> str:
    return "null" if value is None else f'"{value}"'


def journal_entry(
    op: str,
    policy: str | None,
    node: Mapping[str, Any],
    after: Mapping[str, Any],
    operation_id: uuid.UUID,
    now: datetime,
    *,
    evidence_id: uuid.UUID | None = None,
    request_id: uuid.UUID | None = None,
) -> tuple[str, str]:
    """prme._journal_record_v2 of a change of node into after, and its checksum."""
    prev = node["last_checksum"]
    record = (
        f'{{"after":{node_state_text(after)},"before":{node_state_text(node)}'
        f',"evidence_id":{_uuid_text(evidence_id)},"node_id":"{node["id"]}","op":{_json_text(op)}'
        f',"operation_id":"{operation_id}","policy":{"null" if policy is None else _json_text(policy)}'
        f',"prev_checksum":{"null" if prev is None else f"{chr(34)}{prev}{chr(34)}"}'
        f',"recorded_at":{_json_time_text(now)},"request_id":{_uuid_text(request_id)}'
        f',"user_id":{_json_text(node["user_id"])},"version":2}}'
    )
    return record, hashlib.sha256(record.encode("utf-8")).hexdigest()


def create_entry(state: Mapping[str, Any], operation_id: uuid.UUID) -> tuple[str, str]:
    """prme._journal_record_v2 of a node's creation (080_add_node.sql: no before state, no
    chain link, recorded at its updated_at), and its checksum."""
    record = (
        f'{{"after":{node_state_text(state)},"before":null,"evidence_id":null,"node_id":"{state["id"]}"'
        f',"op":"create","operation_id":"{operation_id}","policy":null,"prev_checksum":null'
        f',"recorded_at":{_json_time_text(state["updated_at"])},"request_id":null'
        f',"user_id":{_json_text(state["user_id"])},"version":2}}'
    )
    return record, hashlib.sha256(record.encode("utf-8")).hexdigest()


def reinforce_entry(
    node: Mapping[str, Any],
    evidence_id: uuid.UUID | None,
    request_id: uuid.UUID | None,
    operation_id: uuid.UUID,
    now: datetime,
) -> tuple[dict[str, Any], str, str]:
    """A confirmation of node at now (policy additive_caps_v1, 110_reinforce.sql): the
    after state, its journal record (prme._journal_record_v2) and the record's checksum."""
    boost, confidence = node["reinforcement_boost"], node["confidence_base"]
    after = dict(node)
    after["reinforcement_boost"] = max(boost, min(boost + Decimal("0.15"), Decimal("0.5")))
    after["confidence_base"] = max(confidence, min(confidence + Decimal("0.05"), Decimal("0.95")))
    after["last_reinforced_at"] = now
    after["updated_at"] = now
    if evidence_id is not None:
        after["evidence_refs"] = [*node["evidence_refs"], evidence_id]
    after["version"] = node["version"] + 1
    prev = node["last_checksum"]
    record = (
        f'{{"after":{node_state_text(after)},"before":{node_state_text(node)}'
        f',"evidence_id":{_uuid_text(evidence_id)},"node_id":"{node["id"]}","op":"reinforce"'
        f',"operation_id":"{operation_id}","policy":"additive_caps_v1"'
        f',"prev_checksum":{"null" if prev is None else f"{chr(34)}{prev}{chr(34)}"}'
        f',"recorded_at":{_json_time_text(now)},"request_id":{_uuid_text(request_id)}'
        f',"user_id":{_json_text(node["user_id"])},"version":2}}'
    )
    return after, record, hashlib.sha256(record.encode("utf-8")).hexdigest()
