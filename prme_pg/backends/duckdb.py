"""The DuckDB backend: a memory pack, the engine embedded in a folder.

A pack is a folder (``./memories`` by default) holding one DuckDB file,
``pack.duckdb``, with the tables of ``sql/duckdb/010_tables.sql`` -- the same
tables and columns as PostgreSQL -- and the rules as DuckDB macros
(``020_rules.sql``, ``030_checks.sql``) that produce byte-identical journal
records. It is created on first open; the macros are recreated on every open.

Every call is one DuckDB transaction (BEGIN, statements, COMMIT; ROLLBACK on any
exception) run while holding the pack's lock, so calls never interleave: the
lock is what PostgreSQL's row lock and key claim are to ``prme.reinforce``.
Because the work runs to completion once started, an async call cancelled by
its caller may still commit, and a retry with the same ``request_id`` is then a
replay. Write-write conflicts (another connection writing the same rows
outside this module) are retried, never reported as lost data.

Validation and errors are PostgreSQL's (``sql/postgres/030_validation.sql``):
the same checks, messages and error classes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar, cast

import duckdb

from ..errors import IdempotencyConflict, IntegrityError, InvalidInput, NotFoundError, NotOnPack, PrmeError
from ..journal import canonical_json
from ..models import (
    AppliedOp,
    AssembledPrompt,
    CorrectionInboxEntry,
    CorrectionLink,
    CorrectionMatch,
    Event,
    JournalIssue,
    JournalRecord,
    MaintenancePatch,
    MaintenanceRecommendation,
    MaintenanceSetting,
    Node,
    NodeHead,
    Outcome,
    OutcomeSummary,
    PublishResult,
    RecallHit,
    ReplayResult,
    ReviewSchedule,
    Snapshot,
)
from ..validation import require_utf8, valid_user_id
from . import (
    AddEvent,
    AddNode,
    ApplyPatch,
    ArchiveNode,
    AssemblePrompt,
    AuthenticateApiToken,
    CreateApiToken,
    CreateMaintenancePatch,
    FindNodes,
    GetCurrentSnapshot,
    GetJournalRecords,
    GetLedgerStatus,
    GetMaintenanceReport,
    GetMaintenanceSettings,
    GetNode,
    GetNodeJournal,
    GetOutcomeSummary,
    GetPatch,
    GetReadiness,
    GetReceipt,
    GetSnapshot,
    IsCorrection,
    LinkCorrection,
    ListCorrectionInbox,
    ListNodeEvidence,
    ListNodeOutcomes,
    ListNodes,
    ListOperationEvents,
    MarkReviewed,
    PublishSnapshot,
    Recall,
    RecordOutcome,
    Reinforce,
    ReplayNode,
    Request,
    ResetMaintenanceSettings,
    ResolveCorrection,
    RevokeApiToken,
    SetMaintenanceSetting,
    SubmitOperation,
    VerifyJournal,
    journal_rows,
    node_journal_rows,
    recall_hit,
)

__all__ = [
    "DEFAULT_PATH",
    "FORMAT_VERSION",
    "PACK_FILE",
    "AsyncDuckDBBackend",
    "DuckDBBackend",
    "PackClosedError",
    "PackInUseError",
    "sql_directory",
]

T = TypeVar("T")

DEFAULT_PATH = "./memories"
PACK_FILE = "pack.duckdb"
#: Layout version of the tables in a pack; a newer pack is refused, not misread. 2: a
#: confirmation's idempotency key is its journal record (journal.key_namespace). 3: the
#: maintenance bookkeeping is on the memory's row (nodes), table node_maintenance is gone.
#: 4: the CHECKs of nodes' names and checksum without regular expressions (same rules).
FORMAT_VERSION = 4
#: How long one call keeps retrying while another connection conflicts with it.
CONFLICT_TIMEOUT = 10.0


class PackInUseError(PrmeError):
    """Another process has the memory pack open (DuckDB allows one writer process)."""

    def __init__(self, path: Path, detail: str) -> None:
        pid = re.search(r"PID (\d+)", detail)
        holder = f"process {pid.group(1)}" if pid else "another process"
        super().__init__(
            f"the memory pack at {path} is in use by {holder}; a pack can be open in one "
            f"process at a time: close it there, or use another folder ({detail})"
        )
        self.path = path


class PackClosedError(PrmeError):
    """The client was closed; open a new one."""


def sql_directory() -> Path:
    """``sql/duckdb``: the checkout's, or the copy inside the wheel."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package.parent / "sql" / "duckdb", package / "_sql" / "sql" / "duckdb"):
        if candidate.is_dir():
            return candidate
    raise PrmeError(f"no sql/duckdb folder found next to {package}")


# -- statements ----------------------------------------------------------------
# Node columns as returned to callers: every column but the derived last_checksum.
_NODE_COLUMNS = (
    "id, user_id, namespace, scope, kind, content, confidence_base, salience_base, "
    "reinforcement_boost, last_reinforced_at, evidence_refs, stability, next_review_at, "
    "lifecycle_state, decay_profile, created_at, updated_at, version"
)

GET_NODE = f"SELECT {_NODE_COLUMNS} FROM prme.nodes WHERE user_id = $user_id AND id = $node_id"

LIST_NODES = (
    f"SELECT {_NODE_COLUMNS} FROM prme.nodes "
    "WHERE user_id = $user_id "
    "AND (CAST($namespace AS VARCHAR) IS NULL OR namespace = CAST($namespace AS VARCHAR)) "
    "AND (CAST($after_node_id AS UUID) IS NULL OR id > CAST($after_node_id AS UUID)) "
    "ORDER BY id LIMIT $max_count"
)

# The new node and its create record, built by the rules' macros.
CREATE_ENTRY = """
SELECT q.state, q.record, sha256(q.record) AS checksum
FROM (
    SELECT s.state, prme.journal_record_v2(
        'create', NULL, CAST($operation_id AS UUID), NULL, s.state.user_id, s.state.id, NULL,
        NULL, prme.node_state_unfixed(s.state), NULL, s.state.updated_at
    ) AS record
    FROM (
        SELECT {
            'id': CAST($node_id AS UUID),
            'user_id': CAST($user_id AS VARCHAR),
            'namespace': CAST($namespace AS VARCHAR),
            'scope': CAST($scope AS VARCHAR),
            'kind': CAST($kind AS VARCHAR),
            'content': CAST($content AS VARCHAR),
            'confidence_base': CAST($confidence_base AS DECIMAL(5, 4)),
            'salience_base': CAST($salience_base AS DECIMAL(5, 4)),
            'reinforcement_boost': CAST(0 AS DECIMAL(5, 4)),
            'last_reinforced_at': CAST(NULL AS TIMESTAMPTZ),
            'evidence_refs': CAST([] AS UUID []),
            'stability': CAST($stability AS VARCHAR),
            'next_review_at': CAST($next_review_at AS TIMESTAMPTZ),
            'lifecycle_state': 'active',
            'decay_profile': CAST($decay_profile AS VARCHAR),
            'created_at': CAST($now AS TIMESTAMPTZ),
            'updated_at': CAST($now AS TIMESTAMPTZ),
            'version': CAST(1 AS BIGINT)
        } AS state
    ) AS s
) AS q
"""

INSERT_NODE = (
    "INSERT OR IGNORE INTO prme.nodes (id, user_id, namespace, scope, kind, content, confidence_base, "
    "salience_base, reinforcement_boost, last_reinforced_at, evidence_refs, stability, next_review_at, "
    "lifecycle_state, decay_profile, created_at, updated_at, version, last_checksum) "
    "VALUES ($id, $user_id, $namespace, $scope, $kind, $content, "
    "$confidence_base, $salience_base, $reinforcement_boost, $last_reinforced_at, $evidence_refs, "
    "$stability, $next_review_at, $lifecycle_state, $decay_profile, $created_at, $updated_at, $version, "
    "$last_checksum) RETURNING id"
)

# What decides a reinforce: the node (by primary key), its key (scoped to the node's
# owner and namespace) and whether the evidence shares the node's owner and scope;
# each a point lookup on a primary key or the journal's key index. A replay, a
# conflict or "not found" is answered from these alone. A confirmation's key is its
# journal record (journal_request_key); any other call's key is a request_keys row.
REINFORCE_NODE = "SELECT n AS node FROM prme.nodes AS n WHERE n.user_id = $user_id AND n.id = $node_id"
# A confirmation reads only the node's state and chain link, as plain columns (a row as a
# STRUCT of every column, bookkeeping too, costs about 0.3 ms more to return).
CONFIRM_NODE = f"SELECT {_NODE_COLUMNS}, last_checksum FROM prme.nodes WHERE user_id = $user_id AND id = $node_id"
REINFORCE_KEY = (
    "SELECT op, node_id, evidence_id FROM prme.journal "
    "WHERE user_id = $user_id AND key_namespace = $namespace AND request_id = $request_id "
    "UNION ALL "
    "SELECT operation, node_id, evidence_id FROM prme.request_keys "
    "WHERE user_id = $user_id AND namespace = $namespace AND request_id = $request_id"
)
REINFORCE_EVIDENCE = "SELECT 1 FROM prme.events WHERE user_id = $user_id AND id = $evidence_id AND scope = $scope"

ARCHIVE_READ = """
SELECT q.*, sha256(q.record) AS checksum
FROM (
    SELECT r.*, prme.journal_record_v2(
        'archive', NULL, CAST($operation_id AS UUID), NULL, r.node.user_id, r.node.id, NULL,
        prme.node_state_unfixed(r.node), prme.node_state_unfixed(r.after), r.node.last_checksum,
        CAST($now AS TIMESTAMPTZ)
    ) AS record
    FROM (
        SELECT n AS node, prme.archived(n, CAST($now AS TIMESTAMPTZ)) AS after
        FROM prme.nodes AS n
        WHERE n.user_id = $user_id AND n.id = $node_id
    ) AS r
) AS q
"""

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

UPDATE_EVIDENCE = "UPDATE prme.nodes SET evidence_refs = $evidence_refs WHERE user_id = $user_id AND id = $id"

INSERT_JOURNAL = (
    "INSERT INTO prme.journal VALUES ($user_id, $node_id, $node_version, 2, $op, $operation_id, "
    "$request_id, $evidence_id, $record, $checksum, $prev_checksum, $recorded_at, $key_namespace)"
)

INSERT_EVENT = (
    "INSERT OR IGNORE INTO prme.events VALUES ($id, $user_id, $namespace, $scope, $kind, $content, "
    "CAST($payload AS JSON), $occurred_at, $created_at) "
    "RETURNING id, user_id, namespace, scope, kind, content, payload, occurred_at, created_at"
)

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
NODE_EXISTS = "SELECT 1 FROM prme.nodes WHERE user_id = $user_id AND id = $node_id"
# prme._maintenance_setting: the owner's row for the stability, else the default ('*').
MAINTENANCE_SETTING = (
    "SELECT review_cadence, decay_per_cycle FROM prme.maintenance_settings "
    "WHERE user_id IN ($user_id, '*') AND stability = $stability ORDER BY user_id = '*' LIMIT 1"
)


# -- records: sql/postgres/040 and 060 (_node_state, _journal_record_v2), built in Python --
# A confirmation's record is built here rather than by the pack's SQL macros (which
# the other writes use): the same bytes (tests/test_conformance.py compares them with
# PostgreSQL's), without planning a large macro expansion on every call.


def _json_text(value: str) -> str:
    # RFC 8785 strings, as PostgreSQL's to_json(text): \" \\ \b \f \n \r \t, other control
    # characters as \u00xx (lowercase), everything else as is.
    return json.dumps(value, ensure_ascii=False)


def _json_time_text(value: datetime | None) -> str:
    if value is None:
        return "null"
    v = value.astimezone(UTC)
    return f'"{v.year:04d}-{v.month:02d}-{v.day:02d}T{v.hour:02d}:{v.minute:02d}:{v.second:02d}.{v.microsecond:06d}Z"'


def _fraction_text(value: Decimal) -> str:
    # trim_scale(numeric(5, 4))::text: 0.6500 -> 0.65, 1.0000 -> 1, 0.0000 -> 0.
    return format(value.normalize(), "f")


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


# -- validation: sql/postgres/030_validation.sql, same checks and messages ----------

_NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_STABILITIES = ("low", "semi-stable", "stable")
_DECAY_PROFILES = ("permanent", "slow", "medium", "fast", "rapid")
_MAX_TEXT_BYTES = 65536


def _quote_literal(value: str) -> str:
    # PostgreSQL's quote_literal, for error details that read the same on both engines.
    quoted = "'" + value.replace("'", "''").replace("\\", "\\\\") + "'"
    return "E" + quoted if "\\" in value else quoted


def valid_name(argument: str, value: object) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        shown = _quote_literal(value[:80]) if isinstance(value, str) else "NULL"
        raise InvalidInput(f"{argument} must match ^[a-z][a-z0-9_-]{{0,62}}$ (got {shown})")
    return value


def _no_nul(argument: str, value: str) -> str:
    # PostgreSQL text cannot hold NUL; psycopg refuses to send it. Same outcome here.
    if "\x00" in value:
        raise InvalidInput(f"{argument} must not contain NUL (0x00) characters")
    return require_utf8(argument, value)


def valid_content(content: object) -> str:
    if not isinstance(content, str) or content.strip(" \t\n\r\f\v") == "":
        raise InvalidInput("content must not be empty")
    size = len(content.encode("utf-8", "surrogatepass"))
    if size > _MAX_TEXT_BYTES:
        raise InvalidInput(f"content must be at most 65536 bytes (got {size} bytes)")
    return _no_nul("content", content)


def valid_fraction(argument: str, value: object) -> Decimal:
    if isinstance(value, Decimal) and value.is_finite():
        exponent = value.as_tuple().exponent
        scale = -exponent if isinstance(exponent, int) and exponent < 0 else 0
        if 0 <= value <= 1 and scale <= 4:
            return value
    shown = "NULL" if value is None else str(value)
    raise InvalidInput(f"{argument} must be a number in [0, 1] with at most 4 decimal places (got {shown})")


def valid_timestamp(argument: str, value: datetime | None) -> datetime | None:
    if value is None:
        return None
    try:
        return value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise InvalidInput(f"{argument} must be a finite time between years 1 and 9999 (got {value})") from None


def valid_payload(payload: object) -> str:
    if not isinstance(payload, Mapping):
        raise InvalidInput("payload must be a JSON object")
    try:
        # jsonb's text form has the same separators, so the size limit reads alike.
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"payload must be a JSON object ({exc})") from exc
    if len(require_utf8("payload", text).encode("utf-8")) > _MAX_TEXT_BYTES:
        raise InvalidInput("payload must be at most 65536 bytes of JSON")
    if "\\u0000" in text:
        # jsonb refuses \u0000 (SQLSTATE 22P05); keep the engines alike.
        raise InvalidInput("payload must not contain \\u0000")
    return text


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


def _parse_state(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    value = json.loads(text, parse_float=Decimal)
    return value if isinstance(value, dict) else None


# Format 2's prme.node_maintenance: what reviews settled and decay did, one row per memory
# reviewed or decayed, moved onto the memory's row.
_MOVE_NODE_MAINTENANCE = """
UPDATE prme.nodes AS n SET
    reviewed_explicit_reinforcements = k.reviewed_explicit_reinforcements,
    reviewed_implicit_successes = k.reviewed_implicit_successes,
    reviewed_neutral_exposures = k.reviewed_neutral_exposures,
    reviewed_explicit_corrections = k.reviewed_explicit_corrections,
    reviewed_at = k.reviewed_at, decay_anchor = k.decay_anchor, decay_cycles = k.decay_cycles
FROM prme.node_maintenance AS k
WHERE k.user_id = n.user_id AND k.node_id = n.id
"""


def _table_definition(table: str) -> str:
    """The CREATE TABLE statement of prme.<table> in 010_tables.sql."""
    text = (sql_directory() / "010_tables.sql").read_text(encoding="utf-8")
    start = text.index(f"CREATE TABLE IF NOT EXISTS prme.{table} (")
    return text[start : text.index("\n);", start) + 3]


def _upgrade_pack(con: duckdb.DuckDBPyConnection, version: int) -> None:
    """Bring a pack of format ``version`` (older than FORMAT_VERSION) to the current layout, in
    the opening transaction. Format 1 to 2 is done by 010_tables.sql (idempotent statements).
    To 3: the bookkeeping goes onto the memory's row, its totals counted once from the
    outcome rows and the journal, and node_maintenance's review and decay state moved over.
    To 4: prme.nodes is created again with its current CHECKs (DuckDB cannot alter a CHECK)
    and its rows copied over by column name; columns an older format lacked (format 3's
    bookkeeping) start at their defaults."""
    if version < 4:
        con.execute("ALTER TABLE prme.nodes RENAME TO nodes_before_format_4")
        con.execute(_table_definition("nodes"))
        con.execute("INSERT INTO prme.nodes BY NAME SELECT * FROM prme.nodes_before_format_4")
        con.execute("DROP TABLE prme.nodes_before_format_4")
    if version < 3:
        con.execute(REBUILD_OUTCOME_TOTALS)
        if con.execute(
            "SELECT 1 FROM duckdb_tables() WHERE schema_name = 'prme' AND table_name = 'node_maintenance'"
        ).fetchone():
            con.execute(_MOVE_NODE_MAINTENANCE)
            con.execute("DROP TABLE prme.node_maintenance")


class _Retry(Exception):
    """Another connection changed what this call read; run the call again."""


# -- the backend ---------------------------------------------------------------------

_PACK_LOCKS: dict[Path, threading.Lock] = {}
_PACK_LOCKS_GUARD = threading.Lock()


def _pack_lock(file: Path) -> threading.Lock:
    # One lock per pack file in this process: two clients of one pack share DuckDB's
    # database instance, and their calls must not interleave either.
    with _PACK_LOCKS_GUARD:
        return _PACK_LOCKS.setdefault(file, threading.Lock())


def _utc_now() -> datetime:
    return datetime.now(UTC)


class DuckDBBackend:
    """Runs requests on a memory pack, each as one DuckDB transaction under the pack lock.

    ``clock`` and ``new_id`` replace the wall clock and :func:`uuid.uuid4` (for node,
    event and operation ids): reproducible packs for tests and examples. The clock is
    read once per call, as PostgreSQL's ``now()`` is fixed for a transaction.
    """

    def __init__(
        self,
        path: str | Path = DEFAULT_PATH,
        *,
        clock: Callable[[], datetime] | None = None,
        new_id: Callable[[], uuid.UUID] | None = None,
    ) -> None:
        self.path = Path(path).expanduser().absolute()
        self.file = self.path / PACK_FILE
        self._clock = clock or _utc_now
        self._new_id = new_id or uuid.uuid4
        if self.path.exists() and not self.path.is_dir():
            raise PrmeError(f"{self.path} is not a folder; a memory pack is a folder")
        self.path.mkdir(parents=True, exist_ok=True)
        self.lock = _pack_lock(self.file.resolve())
        try:
            self._con: duckdb.DuckDBPyConnection | None = duckdb.connect(str(self.file))
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise PackInUseError(self.path, str(exc)) from exc
            # Not a DuckDB file, unreadable, a newer DuckDB's format: the pack is unavailable.
            raise PrmeError(f"cannot open the memory pack file {self.file}: {exc}") from exc
        try:
            # This connection's own setting: no progress bar (it would print to the terminal
            # during a long statement, and watching for one costs every statement time: a
            # confirmation ran about 20 % faster without it on the loaded test machine).
            self._con.execute("SET enable_progress_bar = false")
            self._install()
        except BaseException:
            self.close()
            raise

    # -- lifecycle --

    def _install(self) -> None:
        scripts = sorted(sql_directory().glob("*.sql"))

        def install(con: duckdb.DuckDBPyConnection) -> None:
            for script in scripts:
                con.execute(script.read_text(encoding="utf-8"))
            row = con.execute("SELECT value FROM prme.pack_info WHERE key = 'format_version'").fetchone()
            if row is None:
                con.execute("INSERT INTO prme.pack_info VALUES ('format_version', $v)", {"v": str(FORMAT_VERSION)})
            elif int(row[0]) > FORMAT_VERSION:
                raise PrmeError(
                    f"the memory pack at {self.path} has format {row[0]}, newer than this prme-pg "
                    f"(format {FORMAT_VERSION}): upgrade prme-pg to open it"
                )
            elif int(row[0]) < FORMAT_VERSION:
                # The scripts above and _upgrade_pack bring it up to date; an older prme-pg
                # then refuses it.
                _upgrade_pack(con, int(row[0]))
                con.execute(
                    "UPDATE prme.pack_info SET value = $v WHERE key = 'format_version'", {"v": str(FORMAT_VERSION)}
                )

        self.run(install)
        self.run(_index_recall_words)

    def close(self) -> None:
        with self.lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    @property
    def closed(self) -> bool:
        return self._con is None

    # -- transactions --

    def run(self, work: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Run ``work`` as one transaction under the pack lock; retry it on write conflicts.

        The lock is held until COMMIT or ROLLBACK completes, so a call that started
        always finishes: nothing (not even an async caller's cancellation) can leave
        it half done.
        """
        with self.lock:
            con = self._con
            if con is None:
                raise PackClosedError(f"the memory pack at {self.path} is closed")
            delay, deadline = 0.001, time.monotonic() + CONFLICT_TIMEOUT
            while True:
                con.execute("BEGIN TRANSACTION")
                try:
                    result = work(con)
                    con.execute("COMMIT")
                    return result
                except (duckdb.TransactionException, _Retry) as exc:
                    self._rollback(con)
                    if not isinstance(exc, _Retry) and "onflict" not in str(exc):
                        raise  # a transaction error that is not a write conflict
                    if time.monotonic() >= deadline:
                        raise PrmeError(
                            f"another connection kept writing the same rows of the memory pack at "
                            f"{self.path} for {CONFLICT_TIMEOUT:g} s; nothing was changed"
                        ) from exc
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
                except BaseException:
                    self._rollback(con)
                    raise

    def read(self, work: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Run ``work``, which reads with one statement, under the pack lock, without BEGIN and
        COMMIT (the statement is its own transaction): recall's hot path."""
        with self.lock:
            con = self._con
            if con is None:
                raise PackClosedError(f"the memory pack at {self.path} is closed")
            return work(con)

    @staticmethod
    def _rollback(con: duckdb.DuckDBPyConnection) -> None:
        with contextlib.suppress(duckdb.Error):  # a failed COMMIT has already rolled back
            con.execute("ROLLBACK")

    def execute(self, request: Request[T]) -> T:
        try:
            result: Any = self._dispatch(request)
        except UnicodeEncodeError as exc:
            raise InvalidInput(f"text is not valid Unicode: {exc.reason}") from exc
        return cast(T, result)

    def _dispatch(self, request: Request[Any]) -> Any:
        match request:
            case Reinforce():
                return self.reinforce(request)
            case GetNode():
                return self.get_node(request)
            case AddNode():
                return self.add_node(request)
            case AddEvent():
                return self.add_event(request)
            case ListNodes():
                return self.list_nodes(request)
            case ArchiveNode():
                return self.archive_node(request)
            case VerifyJournal():
                return self.verify_journal(request)
            case ReplayNode():
                return self.replay_node(request)
            case GetJournalRecords():
                return self.journal_records(request)
            case GetNodeJournal():
                return self.node_journal(request)
            case ListNodeEvidence():
                return self.node_evidence(request)
            case AuthenticateApiToken():
                return self.authenticate_api_token(request)
            case CreateApiToken():
                return self.create_api_token(request)
            case RevokeApiToken():
                return self.revoke_api_token(request)
            case GetReadiness():
                # A pack has no migrations: it is ready once open (docs/DUCKDB.md).
                return self.run(lambda con: (True, []))
            case PublishSnapshot():
                return self.publish_snapshot(request)
            case GetCurrentSnapshot():
                return self.current_snapshot(request)
            case GetSnapshot():
                return self.get_snapshot(request)
            case AssemblePrompt():
                return self.assemble_prompt(request)
            case Recall():
                return self.recall(request)
            case FindNodes():
                return self.find_nodes(request)
            case RecordOutcome():
                return self.record_outcome(request)
            case GetOutcomeSummary():
                return self.outcome_summary(request)
            case ListNodeOutcomes():
                return self.node_outcomes(request)
            case LinkCorrection():
                return self.link_correction(request)
            case IsCorrection():
                return is_correction_text(request.message)
            case ListCorrectionInbox():
                return self.list_correction_inbox(request)
            case ResolveCorrection():
                return self.resolve_correction(request)
            case GetMaintenanceSettings():
                return self.maintenance_settings(request)
            case SetMaintenanceSetting():
                return self.set_maintenance_setting(request)
            case ResetMaintenanceSettings():
                return self.reset_maintenance_settings(request)
            case MarkReviewed():
                return self.mark_reviewed(request)
            case GetMaintenanceReport():
                return self.maintenance_report(request)
            case CreateMaintenancePatch():
                return self.maintenance_patch(request)
            case GetPatch():
                return self.get_patch(request)
            case ApplyPatch():
                return self.apply_patch(request)
            case SubmitOperation() | GetReceipt() | ListOperationEvents() | GetLedgerStatus():
                raise NotOnPack(
                    f"{type(request).__name__} needs PostgreSQL: a memory pack has no operations ledger "
                    "(open the client with a postgresql:// DSN)"
                )
            case _:
                raise TypeError(f"not a prme_pg request: {request!r}")

    # -- operations --

    def add_node(self, request: AddNode) -> Node:
        params = {
            "user_id": valid_user_id(request.user_id),
            "namespace": valid_name("namespace", request.namespace),
            "scope": valid_name("scope", request.scope),
            "kind": valid_name("kind", request.kind),
            "content": valid_content(request.content),
            "confidence_base": valid_fraction("confidence_base", request.confidence_base),
            "salience_base": valid_fraction("salience_base", request.salience_base),
        }
        if request.stability not in _STABILITIES:
            raise InvalidInput("stability must be low, semi-stable or stable")
        if request.decay_profile not in _DECAY_PROFILES:
            raise InvalidInput("decay_profile must be permanent, slow, medium, fast or rapid")
        by_cadence = request.next_review_at is ReviewSchedule.BY_CADENCE
        params.update(
            stability=request.stability,
            decay_profile=request.decay_profile,
            next_review_at=(
                None
                if isinstance(request.next_review_at, ReviewSchedule)
                else valid_timestamp("next_review_at", request.next_review_at)
            ),
        )

        def work(con: duckdb.DuckDBPyConnection) -> Node:
            operation_id = self._new_id()
            now = self._clock()
            review = params["next_review_at"]
            if by_cadence:
                # On a review schedule from the start: one cadence of its stability ahead.
                review = now + self._setting(con, str(params["user_id"]), request.stability)[0]
            entry = con.execute(
                CREATE_ENTRY,
                {
                    **params,
                    "next_review_at": review,
                    "node_id": request.node_id or self._new_id(),
                    "operation_id": operation_id,
                    "now": now,
                },
            ).fetchone()
            assert entry is not None
            state, record, checksum = entry
            if con.execute(INSERT_NODE, {**state, "last_checksum": checksum}).fetchone() is None:
                raise IdempotencyConflict("a node with this node_id already exists")
            con.execute(
                INSERT_WORDS, {"user_id": state["user_id"], "node_id": state["id"], "content": state["content"]}
            )
            self._append(con, state, "create", operation_id, record, checksum, prev_checksum=None)
            return _node(state)

        return self.run(work)

    @staticmethod
    def _setting(con: duckdb.DuckDBPyConnection, user_id: str, stability: str) -> tuple[timedelta, Decimal]:
        """prme._maintenance_setting: the owner's review cadence and decay per cycle for a
        stability, else the default's."""
        row = con.execute(MAINTENANCE_SETTING, {"user_id": user_id, "stability": stability}).fetchone()
        assert row is not None  # the defaults are rows of the pack
        return row[0], row[1]

    def add_event(self, request: AddEvent) -> Event:
        params = {
            "user_id": valid_user_id(request.user_id),
            "namespace": valid_name("namespace", request.namespace),
            "scope": valid_name("scope", request.scope),
            "kind": valid_name("kind", request.kind),
            "content": valid_content(request.content),
            "payload": valid_payload(request.payload),
        }
        occurred_at = valid_timestamp("occurred_at", request.occurred_at)

        def work(con: duckdb.DuckDBPyConnection) -> Event:
            now = self._clock()
            rows = _fetch_dicts(
                con.execute(
                    INSERT_EVENT,
                    {
                        **params,
                        "id": request.event_id or self._new_id(),
                        "occurred_at": occurred_at or now,
                        "created_at": now,
                    },
                )
            )
            if not rows:
                raise IdempotencyConflict("an event with this event_id already exists")
            return _event(rows[0])

        return self.run(work)

    def get_node(self, request: GetNode) -> Node:
        params = {"user_id": valid_user_id(request.user_id), "node_id": request.node_id}

        def work(con: duckdb.DuckDBPyConnection) -> Node:
            row = con.execute(GET_NODE, params).fetchone()
            if row is None:
                raise NotFoundError("node not found")
            return _node_from_values(row)

        return self.run(work)

    def list_nodes(self, request: ListNodes) -> list[Node]:
        user_id = valid_user_id(request.user_id)
        if request.namespace is not None:
            valid_name("namespace", request.namespace)
        if not isinstance(request.max_count, int) or not 1 <= request.max_count <= 10000:
            raise InvalidInput("max_count must be between 1 and 10000")
        params = {
            "user_id": user_id,
            "namespace": request.namespace,
            "after_node_id": request.after_node_id,
            "max_count": request.max_count,
        }
        return self.run(lambda con: [_node_from_values(row) for row in con.execute(LIST_NODES, params).fetchall()])

    def reinforce(self, request: Reinforce) -> Node:
        user_id = valid_user_id(request.user_id)

        def work(con: duckdb.DuckDBPyConnection) -> Node:
            found = con.execute(CONFIRM_NODE, {"user_id": user_id, "node_id": request.node_id}).fetchone()
            if found is None:
                raise NotFoundError("node not found")
            node = dict(zip(_CONFIRM_NAMES, found, strict=True))
            # docs/DESIGN.md section 3, in prme.reinforce's order: a key bound to this same
            # call is a replay (even of an archived node: it restores nothing).
            if request.request_id is not None:
                key = con.execute(
                    REINFORCE_KEY,
                    {"user_id": user_id, "namespace": node["namespace"], "request_id": request.request_id},
                ).fetchone()
                if key is not None:
                    if key == ("reinforce", request.node_id, request.evidence_id):
                        return _node(node, replayed=True)
                    raise IdempotencyConflict(
                        "request_id was already used for another request "
                        "(an idempotency key is bound to one operation, node and evidence)"
                    )
            _require_live_node_and_evidence(con, user_id, node, request.evidence_id)
            now, operation_id = self._clock(), self._new_id()
            after, record, checksum = reinforce_entry(node, request.evidence_id, request.request_id, operation_id, now)
            # The journal record carries the key (as prme.reinforce's does): no key row.
            try:
                self._write(
                    con,
                    node,
                    after,
                    "reinforce",
                    operation_id,
                    record,
                    checksum,
                    request_id=request.request_id,
                    evidence_id=request.evidence_id,
                )
            except duckdb.ConstraintException as exc:
                if request.request_id is None:
                    raise
                # The key was committed by another connection since this transaction
                # began: run again, and the key is then found (a replay or a conflict).
                raise _Retry from exc
            return _node(after)

        return self.run(work)

    def archive_node(self, request: ArchiveNode) -> Node:
        user_id = valid_user_id(request.user_id)

        def work(con: duckdb.DuckDBPyConnection) -> Node:
            operation_id = self._new_id()
            rows = _fetch_dicts(
                con.execute(
                    ARCHIVE_READ,
                    {
                        "user_id": user_id,
                        "node_id": request.node_id,
                        "operation_id": operation_id,
                        "now": self._clock(),
                    },
                )
            )
            if not rows or rows[0]["node"]["lifecycle_state"] == "archived":
                raise NotFoundError("node not found")
            row = rows[0]
            self._write(con, row["node"], row["after"], "archive", operation_id, row["record"], row["checksum"])
            return _node(row["after"])

        return self.run(work)

    # -- outcomes: sql/postgres/210_outcomes.sql, 215_node_outcomes.sql --

    def record_outcome(self, request: RecordOutcome) -> Outcome:
        user_id = valid_user_id(request.user_id)
        outcome = _valid_outcome(request.outcome)
        profile_id = _valid_ref("profile_id", request.profile_id)
        thread_id = _valid_ref("thread_id", request.thread_id)
        notes = _valid_notes(request.notes)
        if request.node_id is None:
            raise InvalidInput("node_id must not be null")

        def work(con: duckdb.DuckDBPyConnection) -> Outcome:
            node = self._node_row(con, user_id, request.node_id)
            if node is None:
                raise NotFoundError("node not found")
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
            row = self._add_outcome(
                con,
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

    def _add_outcome(self, con: duckdb.DuckDBPyConnection, **values: Any) -> dict[str, Any]:
        """prme._add_outcome: append one outcome row (the caller validated everything)."""
        row = {"id": self._new_id(), "weight": _OUTCOME_WEIGHTS[values["outcome"]], **values}
        con.execute(INSERT_OUTCOME, row)
        # The running totals on the memory's row; evidence_refs written too, as _write does,
        # so that DuckDB detects a concurrent write of the row of either kind.
        key = {"user_id": row["user_id"], "id": row["node_id"]}
        con.execute(ADD_TO_TOTALS, {**key, "outcome": row["outcome"], "created_at": row["created_at"]})
        con.execute(TOUCH_EVIDENCE, key)
        return row

    @staticmethod
    def _node_row(con: duckdb.DuckDBPyConnection, user_id: str, node_id: uuid.UUID) -> dict[str, Any] | None:
        found = con.execute(REINFORCE_NODE, {"user_id": user_id, "node_id": node_id}).fetchone()
        return None if found is None else cast(dict[str, Any], found[0])

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

    # -- corrections: sql/postgres/220_correction_linking.sql --

    def link_correction(self, request: LinkCorrection) -> CorrectionLink:
        user_id = valid_user_id(request.user_id)
        message = valid_content(request.message)
        thread_id = _valid_ref("thread_id", request.thread_id)
        if len(request.candidate_node_ids) > 1000 or any(c is None for c in request.candidate_node_ids):
            raise InvalidInput("candidate_node_ids must be an array of at most 1000 non-null ids")
        # A candidate listed twice counts once: the distinct ids, in the order first listed.
        candidates = list(dict.fromkeys(request.candidate_node_ids))

        def work(con: duckdb.DuckDBPyConnection) -> CorrectionLink:
            rows = con.execute(ACTIVE_CANDIDATES, {"user_id": user_id, "ids": candidates}).fetchall()
            size = sum(len(content.encode("utf-8")) for _, content, _ in rows)
            if size > 1048576:
                raise InvalidInput(
                    f"the candidates' content must be at most 1 MiB in all: pass fewer candidates (got {size} bytes)"
                )
            tokens = correction_tokens(message)
            scored: list[tuple[Fraction, uuid.UUID, int]] = []
            for node_id, content, version in rows:
                theirs = correction_tokens(content)
                smaller = min(len(theirs), len(tokens))
                shared = len(theirs & tokens)
                if smaller > 0 and 100 * shared >= 45 * smaller:
                    scored.append((Fraction(shared, smaller), node_id, version))
            scored.sort(key=lambda s: (-s[0], s[1]))
            now = self._clock()
            if len(scored) == 1:
                _, node_id, version = scored[0]
                row = self._add_outcome(
                    con,
                    user_id=user_id,
                    node_id=node_id,
                    outcome="explicit_correction",
                    evidence_id=None,
                    profile_id=None,
                    thread_id=thread_id,
                    notes=message,
                    request_id=None,
                    recorded_by="link_correction",
                    node_version=version,
                    created_at=now,
                )
                return CorrectionLink("linked", node_id, row["id"], None, (_match(scored[0]),))
            matched = [node_id for _, node_id, _ in scored]
            inbox_id = self._new_id()
            con.execute(
                INSERT_INBOX,
                {
                    "user_id": user_id,
                    "id": inbox_id,
                    "message": message,
                    "thread_id": thread_id,
                    "candidates": candidates,
                    "matched": matched,
                    "reason": "ambiguous" if len(matched) >= 2 else "no_match",
                    "created_at": now,
                },
            )
            status = "ambiguous" if len(matched) >= 2 else "unmatched"
            return CorrectionLink(status, None, None, inbox_id, tuple(_match(s) for s in scored))

        return self.run(work)

    def list_correction_inbox(self, request: ListCorrectionInbox) -> list[CorrectionInboxEntry]:
        user_id = valid_user_id(request.user_id)
        max_count = _valid_max_count(request.max_count)
        params = {"user_id": user_id, "all": bool(request.include_resolved), "max_count": max_count}
        return self.run(lambda con: [_inbox_entry(row) for row in _fetch_dicts(con.execute(LIST_INBOX, params))])

    def resolve_correction(self, request: ResolveCorrection) -> CorrectionInboxEntry:
        user_id = valid_user_id(request.user_id)
        if request.inbox_id is None:
            raise InvalidInput("inbox_id must not be null")

        def work(con: duckdb.DuckDBPyConnection) -> CorrectionInboxEntry:
            found = _fetch_dicts(con.execute(GET_INBOX, {"user_id": user_id, "id": request.inbox_id}))
            if not found:
                raise NotFoundError("inbox entry not found")
            entry = found[0]
            # Resolving again the same way returns the entry; any other way is a conflict.
            if entry["resolution"] is not None:
                if entry["resolved_node_id"] == request.node_id:
                    return _inbox_entry(entry)
                raise IdempotencyConflict(
                    f"inbox entry was already resolved otherwise (resolution {entry['resolution']})"
                )
            now = self._clock()
            if request.node_id is not None:
                node = self._node_row(con, user_id, request.node_id)
                if node is None or node["lifecycle_state"] == "archived":
                    raise NotFoundError("node not found")
                row = self._add_outcome(
                    con,
                    user_id=user_id,
                    node_id=request.node_id,
                    outcome="explicit_correction",
                    evidence_id=None,
                    profile_id=None,
                    thread_id=entry["thread_id"],
                    notes=entry["message"],
                    request_id=None,
                    recorded_by="resolve_correction",
                    node_version=node["version"],
                    created_at=now,
                )
                entry.update(resolution="linked", resolved_node_id=request.node_id, outcome_id=row["id"])
            else:
                entry["resolution"] = "dismissed"
            entry["resolved_at"] = now
            con.execute(
                RESOLVE_INBOX,
                {k: entry[k] for k in ("user_id", "id", "resolution", "resolved_node_id", "outcome_id", "resolved_at")},
            )
            return _inbox_entry(entry)

        return self.run(work)

    # -- maintenance: sql/postgres/230 (settings), 240 (reviews), 250 (the report) --

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
            node = self._node_row(con, user_id, request.node_id)
            if node is None or node["lifecycle_state"] == "archived":
                raise NotFoundError("node not found")
            after = dict(node)
            after["next_review_at"] = given or now + self._setting(con, user_id, node["stability"])[0]
            after["updated_at"] = now
            after["version"] = node["version"] + 1
            operation_id = self._new_id()
            record, checksum = journal_entry("review", "maintenance_v1", node, after, operation_id, now)
            self._write(con, node, after, "review", operation_id, record, checksum)
            # The review covers every outcome and confirmation so far: the totals on the row.
            con.execute(
                SETTLE_OUTCOMES,
                {
                    "user_id": user_id,
                    "node_id": request.node_id,
                    "er": node["recorded_reinforcements"] + node["reinforcements"],
                    "isx": node["implicit_successes"],
                    "ne": node["neutral_exposures"],
                    "ec": node["explicit_corrections"],
                    "now": now,
                },
            )
            return _node(after)

        return self.run(work)

    def maintenance_report(self, request: GetMaintenanceReport) -> list[MaintenanceRecommendation]:
        user_id = valid_user_id(request.user_id)
        as_of = valid_timestamp("as_of", request.as_of)

        def work(con: duckdb.DuckDBPyConnection) -> list[MaintenanceRecommendation]:
            return _report(con, user_id, as_of or self._clock())

        return self.run(work)

    # -- maintenance patches: sql/postgres/260_patches.sql --

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
        node = self._node_row(con, op["user_id"], op["node_id"])
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
            after["next_review_at"] = now + self._setting(con, op["user_id"], op["stability_to"])[0]
        else:
            if node["lifecycle_state"] != op["lifecycle_from"]:
                return (
                    f"lifecycle_state is {node['lifecycle_state']} now, the patch expected {op['lifecycle_from']}"
                ), None
            after["lifecycle_state"] = op["lifecycle_to"]
        after["updated_at"] = now
        after["version"] = node["version"] + 1
        record, checksum = journal_entry(op["op"], "maintenance_v1", node, after, op["operation_id"], now)
        self._write(con, node, after, op["op"], op["operation_id"], record, checksum)
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

    def _write(
        self,
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
    ) -> None:
        updated = con.execute(
            UPDATE_NODE,
            {
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
        con.execute(
            UPDATE_EVIDENCE,
            {
                "user_id": after["user_id"],
                "id": after["id"],
                "evidence_refs": after["evidence_refs"],
            },
        )
        self._append(
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

    @staticmethod
    def _append(
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

    # -- recall (sql/postgres/310_recall.sql) --

    def recall(self, request: Recall) -> list[RecallHit]:
        user_id = valid_user_id(request.user_id)
        scopes = None if request.scopes is None else list(_valid_scopes(request.scopes))
        as_of = valid_timestamp("as_of", request.as_of)
        if not isinstance(request.max_count, int) or not 1 <= request.max_count <= 1000:
            raise InvalidInput("max_count must be between 1 and 1000")
        query = request.query
        if query is not None:
            size = len(_no_nul("query", query).encode("utf-8"))
            if size > _MAX_TEXT_BYTES:
                raise InvalidInput("query must be at most 65536 bytes")
        blank = query is None or query.strip(" \t\n\r\f\v") == ""

        def work(con: duckdb.DuckDBPyConnection) -> list[RecallHit]:
            params: dict[str, Any] = {
                "user_id": user_id,
                "scopes": scopes,
                "as_of": as_of or self._clock(),
                "max_count": request.max_count,
            }
            if blank:
                rows = con.execute(RECALL_ALL, params).fetchall()
            else:
                found = con.execute("SELECT prme.recall_words($query)", {"query": query}).fetchone()
                words = found[0] if found is not None else []
                if len(words) > 1024:
                    raise InvalidInput(f"query must have at most 1024 distinct search terms (got {len(words)})")
                if not words:
                    return []  # only stop words and punctuation: nothing can match
                statement = RECALL_FEW_WORDS if len(words) < 5 else RECALL_WORDS
                rows = con.execute(statement, {**params, "words": words, "word_count": len(words)}).fetchall()
            return recall_hits(rows)

        # Two statements, but the first (the query's words) reads no table.
        return self.read(work)

    def find_nodes(self, request: FindNodes) -> list[Node]:
        """prme.find_nodes: memories in any lifecycle state by recall's words and filters."""
        user_id = valid_user_id(request.user_id)
        scopes = None if request.scopes is None else list(_valid_scopes(request.scopes))
        if not isinstance(request.max_count, int) or not 1 <= request.max_count <= 1000:
            raise InvalidInput("max_count must be between 1 and 1000")
        query = request.query
        if query is not None:
            size = len(_no_nul("query", query).encode("utf-8"))
            if size > _MAX_TEXT_BYTES:
                raise InvalidInput(f"query must be at most 65536 bytes (got {size} bytes)")
        stabilities = request.stabilities
        if stabilities is not None and (
            not 1 <= len(stabilities) <= 100 or any(s not in _STABILITIES for s in stabilities)
        ):
            raise InvalidInput("stabilities must be NULL or a list (of at most 100) of low, semi-stable and stable")
        states = request.lifecycle_states
        if states is not None and (not 1 <= len(states) <= 100 or any(s not in _LIFECYCLE_STATES for s in states)):
            raise InvalidInput(
                "lifecycle_states must be NULL or a list (of at most 100) of active, contested, superseded, "
                "deprecated and archived"
            )
        params: dict[str, Any] = {
            "user_id": user_id,
            "scopes": scopes,
            "stabilities": None if stabilities is None else list(stabilities),
            "states": None if states is None else list(states),
            "max_count": request.max_count,
        }

        def work(con: duckdb.DuckDBPyConnection) -> list[Node]:
            if query is None or query.strip(" \t\n\r\f\v") == "":
                return [_node_from_values(row) for row in con.execute(FIND_ALL, params).fetchall()]
            found = con.execute("SELECT prme.recall_words($query)", {"query": query}).fetchone()
            words = found[0] if found is not None else []
            if len(words) > 1024:
                raise InvalidInput(f"query must have at most 1024 distinct search terms (got {len(words)})")
            if not words:
                return []  # only stop words and punctuation: nothing can match
            rows = con.execute(FIND_WORDS, {**params, "words": words}).fetchall()
            return [_node_from_values(row) for row in rows]

        return self.read(work)

    # -- API tokens (sql/postgres/140_api_tokens.sql) --

    def create_api_token(self, request: CreateApiToken) -> datetime:
        params = {
            "user_id": valid_user_id(request.user_id),
            "token_sha256": _valid_token_sha256(request.token_sha256),
            "label": _valid_label(request.label),
        }

        def work(con: duckdb.DuckDBPyConnection) -> datetime:
            row = con.execute(INSERT_BEARER_HASH, {**params, "created_at": self._clock()}).fetchone()
            if row is None:
                raise IdempotencyConflict("this token is already registered")
            return cast(datetime, _utc(row[0]))

        return self.run(work)

    def revoke_api_token(self, request: RevokeApiToken) -> bool:
        params = {
            "user_id": valid_user_id(request.user_id),
            "token_sha256": _valid_token_sha256(request.token_sha256),
        }

        def work(con: duckdb.DuckDBPyConnection) -> bool:
            row = con.execute(REVOKE_BEARER_HASH, {**params, "now": self._clock()}).fetchone()
            return row is not None and row[0] > 0

        return self.run(work)

    def authenticate_api_token(self, request: AuthenticateApiToken) -> bool:
        # Malformed input is simply not a live token: authentication answers yes or no.
        params = {"user_id": str(request.user_id), "token_sha256": str(request.token_sha256)}
        return self.run(lambda con: con.execute(LIVE_BEARER_HASH, params).fetchone() is not None)

    # -- snapshots (sql/postgres/320_snapshots.sql) and prompts (330_assemble_prompt.sql) --

    def publish_snapshot(self, request: PublishSnapshot) -> PublishResult:
        user_id = valid_user_id(request.user_id)
        scope = valid_name("scope", request.scope)
        if not isinstance(request.max_items, int) or not 1 <= request.max_items <= 10000:
            raise InvalidInput("max_items must be between 1 and 10000")
        if not isinstance(request.max_bytes, int) or not 1 <= request.max_bytes <= _MAX_DOCUMENT_BYTES:
            raise InvalidInput("max_bytes must be between 1 and 16777216")
        expected = request.expected_generation_id
        if expected is not None and expected != "none" and not _SHA256_HEX.fullmatch(expected):
            raise InvalidInput(
                "expected_generation_id must be 64 lowercase hex digits, or 'none' for a scope never published"
            )
        head_text, tail_text = _snapshot_envelope(user_id, scope)
        empty_bytes = _octets(head_text) + _octets(tail_text)
        if empty_bytes > request.max_bytes:
            raise InvalidInput("max_bytes is too small for even an empty generation of this scope")

        def work(con: duckdb.DuckDBPyConnection) -> PublishResult:
            now = self._clock()
            head = con.execute(SNAPSHOT_HEAD, {"user_id": user_id, "scope": scope}).fetchone()
            current, seq = (head[0], head[1]) if head is not None else (None, 0)
            if expected is not None and (current or "none") != expected:
                raise IdempotencyConflict("the current snapshot is not the expected generation")
            items = _select_items(
                con.execute(SNAPSHOT_CANDIDATES, {"user_id": user_id, "scope": scope, "now": now}),
                budget=request.max_bytes - empty_bytes,
                max_items=request.max_items,
            )
            document = head_text + ",".join(items) + tail_text
            generation_id = hashlib.sha256(document.encode("utf-8")).hexdigest()
            size = _octets(document)
            if current == generation_id:
                # The current generation already has exactly this content: nothing to write.
                return PublishResult(generation_id, seq, current, len(items), size, advanced=False)
            params = {"user_id": user_id, "scope": scope, "now": now}
            con.execute(
                INSERT_GENERATION,
                {**params, "generation_id": generation_id, "document": document, "items": len(items), "size": size},
            )
            moved = con.execute(
                ADVANCE_HEAD if head is not None else INSERT_HEAD,
                {**params, "generation_id": generation_id, "seq": seq + 1},
            ).fetchone()
            if moved is None or moved[0] != 1:
                raise _Retry  # another connection advanced the head since it was read
            con.execute(
                INSERT_HISTORY,
                {**params, "seq": seq + 1, "generation_id": generation_id, "previous": current},
            )
            return PublishResult(generation_id, seq + 1, current, len(items), size, advanced=True)

        return self.run(work)

    def current_snapshot(self, request: GetCurrentSnapshot) -> Snapshot:
        params = {"user_id": valid_user_id(request.user_id), "scope": valid_name("scope", request.scope)}

        def work(con: duckdb.DuckDBPyConnection) -> Snapshot:
            row = con.execute(CURRENT_SNAPSHOT, params).fetchone()
            if row is None:
                raise NotFoundError("no snapshot has been published for this scope")
            return _snapshot(params["user_id"], params["scope"], row)

        return self.run(work)

    def get_snapshot(self, request: GetSnapshot) -> Snapshot:
        params = {"user_id": valid_user_id(request.user_id), "scope": valid_name("scope", request.scope)}
        if not isinstance(request.generation_id, str) or not _SHA256_HEX.fullmatch(request.generation_id):
            raise InvalidInput("generation_id must be 64 lowercase hex digits")
        params["generation_id"] = request.generation_id

        def work(con: duckdb.DuckDBPyConnection) -> Snapshot:
            row = con.execute(GET_SNAPSHOT, params).fetchone()
            if row is None:
                raise NotFoundError("snapshot generation not found")
            return _snapshot(params["user_id"], params["scope"], row)

        return self.run(work)

    def assemble_prompt(self, request: AssemblePrompt) -> AssembledPrompt:
        user_id = valid_user_id(request.user_id)
        scopes = _valid_scopes(request.scopes)
        budget = request.budget_bytes
        if not isinstance(budget, int) or not 1 <= budget <= _MAX_DOCUMENT_BYTES:
            raise InvalidInput("budget_bytes must be between 1 and 16777216")

        def work(con: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
            # One statement reads every head and its generation, as prme.assemble_prompt does.
            return con.execute(PROMPT_GENERATIONS, {"user_id": user_id, "scopes": list(scopes)}).fetchall()

        return _lay_out_prompt(user_id, scopes, self.run(work), budget)


# -- outcomes: statements and rules (sql/postgres/210_outcomes.sql) -------------------

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
# prme._add_outcome's running totals: one outcome row more of its kind.
ADD_TO_TOTALS = """
UPDATE prme.nodes SET
    recorded_reinforcements = recorded_reinforcements + CAST($outcome = 'explicit_reinforcement' AS INTEGER),
    implicit_successes = implicit_successes + CAST($outcome = 'implicit_success' AS INTEGER),
    neutral_exposures = neutral_exposures + CAST($outcome = 'neutral_exposure' AS INTEGER),
    explicit_corrections = explicit_corrections + CAST($outcome = 'explicit_correction' AS INTEGER),
    last_outcome_at = greatest(coalesce(last_outcome_at, $created_at), $created_at)
WHERE user_id = $user_id AND id = $id
"""
TOUCH_EVIDENCE = "UPDATE prme.nodes SET evidence_refs = evidence_refs WHERE user_id = $user_id AND id = $id"
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


# -- corrections: sql/postgres/220_correction_linking.sql, the same rules in Python ----
# DuckDB's regular expressions (RE2) have no lookahead and no \m / \M, so the pack runs
# prme.is_correction's expressions with Python's re, translated one for one: \m is
# (?<!\w)(?=\w), \M is (?<=\w)(?!\w), [[:alnum:]] is [^\W_]. tests/test_conformance_corrections.py
# holds both engines to the same answer for every phrase of docs/MAINTENANCE.md's table.

_WORD_START = r"(?<!\w)(?=\w)"
_WORD_END = r"(?<=\w)(?!\w)"
_ALNUM = r"[^\W_]"
# The start of the message, or of a line, sentence or clause within it.
_START = r"(^|\n|[.!?;:,] ?)\s*"
# The rest of a sentence: no line break, and no . ! ? ; ending one (os.path does not end it).
_SAME_SENTENCE = r"(?:[^\n.!?;]|\.\S)*"
_CORRECTION_RULES = tuple(
    re.compile(rule)
    for rule in (
        _START + rf"(please )?(don'?t|do not|never|always|stop|quit){_WORD_END}(?! ?mind{_WORD_END})"
        rf"(?! worry{_WORD_END})",
        _START + rf"(no|nope|nah)([,.!:;]+| -|\n)\s*{_ALNUM}",
        _START + rf"(well,? )?actually{_WORD_END}",
        rf"{_WORD_START}prefers? (?!to{_WORD_END})\S{_SAME_SENTENCE}{_WORD_START}(over|instead of|rather than|to)"
        rf"{_WORD_END}",
        rf"{_WORD_START}favou?rs? \S{_SAME_SENTENCE}{_WORD_START}over{_WORD_END}",
        rf"{_WORD_START}use \S{_SAME_SENTENCE}{_WORD_START}instead{_WORD_END}",
        _START + rf"(going forward(,| -|:)|from now on(,| -|:)?) ?{_ALNUM}",
        rf"{_WORD_START}(you|i|we)( should| must| will)? (never|always){_WORD_END}",
        rf"{_WORD_START}(that|this|it)('s| is| was) (wrong|incorrect|not (right|true|correct)){_WORD_END}",
        _START + rf"i (already )?(said|told you){_WORD_END}",
    )
)
_LINE_BREAKS = re.compile("[\n\r\u2028\u2029]+")
_BLANKS = re.compile(r"\s+")
_APOSTROPHES = str.maketrans("\u2019\u2018`", "'''")


def is_correction_text(message: str | None) -> bool:
    """prme.is_correction: does the message use explicit correction phrasing?"""
    if message is not None:
        size = len(message.encode("utf-8", "surrogatepass"))
        if size > _MAX_TEXT_BYTES:
            raise InvalidInput(f"message must be at most 65536 bytes (got {size} bytes)")
    lines = _LINE_BREAKS.split((message or "").translate(_APOSTROPHES).lower())
    text = "\n".join(_BLANKS.sub(" ", line).strip(" ") for line in lines)
    return any(rule.search(text) for rule in _CORRECTION_RULES)


_TOKEN_SPLIT = re.compile(r"[^A-Za-z0-9]+")


def correction_tokens(text: str) -> frozenset[str]:
    """prme._correction_tokens: distinct lower-cased runs of [A-Za-z0-9] longer than 3 characters."""
    return frozenset(token.lower() for token in _TOKEN_SPLIT.split(text) if len(token) > 3)


ACTIVE_CANDIDATES = (
    "SELECT id, content, version FROM prme.nodes "
    "WHERE user_id = $user_id AND list_contains(CAST($ids AS UUID []), id) AND lifecycle_state = 'active'"
)
INSERT_INBOX = (
    "INSERT INTO prme.correction_inbox VALUES ($user_id, $id, $message, $thread_id, CAST($candidates AS UUID []), "
    "CAST($matched AS UUID []), $reason, $created_at, NULL, NULL, NULL, NULL)"
)
_INBOX_COLUMNS = (
    "id, user_id, message, thread_id, candidate_node_ids, matched_node_ids, reason, created_at, resolution, "
    "resolved_node_id, outcome_id, resolved_at"
)
LIST_INBOX = (
    f"SELECT {_INBOX_COLUMNS} FROM prme.correction_inbox "
    "WHERE user_id = $user_id AND (resolution IS NULL OR $all) ORDER BY created_at, id LIMIT $max_count"
)
GET_INBOX = f"SELECT {_INBOX_COLUMNS} FROM prme.correction_inbox WHERE user_id = $user_id AND id = $id"
RESOLVE_INBOX = (
    "UPDATE prme.correction_inbox SET resolution = $resolution, resolved_node_id = $resolved_node_id, "
    "outcome_id = $outcome_id, resolved_at = $resolved_at WHERE user_id = $user_id AND id = $id"
)


def _match(scored: tuple[Fraction, uuid.UUID, int]) -> CorrectionMatch:
    # round(shared::numeric / smaller, 4): half away from zero.
    overlap, node_id, _ = scored
    exact = Decimal(overlap.numerator) / Decimal(overlap.denominator)
    return CorrectionMatch(node_id, exact.quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP))


def _inbox_entry(row: Mapping[str, Any]) -> CorrectionInboxEntry:
    return CorrectionInboxEntry(
        id=row["id"],
        user_id=row["user_id"],
        message=row["message"],
        thread_id=row["thread_id"],
        candidate_node_ids=tuple(row["candidate_node_ids"]),
        matched_node_ids=tuple(row["matched_node_ids"]),
        reason=row["reason"],
        created_at=cast(datetime, _utc(row["created_at"])),
        resolution=row["resolution"],
        resolved_node_id=row["resolved_node_id"],
        outcome_id=row["outcome_id"],
        resolved_at=_utc(row["resolved_at"]),
    )


# -- maintenance: statements and rules (sql/postgres/230, 240, 250) -------------------

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


# -- maintenance patches: statements and rules (sql/postgres/260_patches.sql) ---------

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


def _valid_max_count(max_count: int) -> int:
    if not isinstance(max_count, int) or not 1 <= max_count <= 10000:
        raise InvalidInput("max_count must be between 1 and 10000")
    return max_count


# -- recall: statements and rows (sql/postgres/310_recall.sql) -----------------------

INSERT_WORDS = "INSERT INTO prme.node_words SELECT $user_id, $node_id, unnest(prme.recall_words($content))"


def _index_recall_words(con: duckdb.DuckDBPyConnection) -> None:
    """Index the recall words of every memory of a pack written before prme.node_words existed
    (or by another version of the words): once, when the pack is opened."""
    row = con.execute("SELECT value FROM prme.pack_info WHERE key = 'recall_words'").fetchone()
    if row is not None and row[0] == RECALL_WORDS_VERSION:
        return
    con.execute("DELETE FROM prme.node_words")
    con.execute("INSERT INTO prme.node_words SELECT user_id, id, unnest(prme.recall_words(content)) FROM prme.nodes")
    con.execute("INSERT OR REPLACE INTO prme.pack_info VALUES ('recall_words', $v)", {"v": RECALL_WORDS_VERSION})


#: The version of prme.recall_words the pack's node_words were built with.
RECALL_WORDS_VERSION = "1"

# Each memory that may be recalled, with its virtual decay at $as_of (prme.recall's inner
# level): its id and scores only. {nodes} is prme.nodes, or for a query the memories its
# words match joined first, so that only those are read and decayed.
_RECALL_SCORES = """
SELECT n.id, {relevance} AS relevance,
    prme.effective_salience(n.salience_base, n.reinforcement_boost, n.decay_profile, n.age_days)
        AS effective_salience,
    prme.effective_confidence(n.confidence_base, n.decay_profile, n.age_days) AS effective_confidence
FROM (
    SELECT n.id, n.salience_base, n.reinforcement_boost, n.confidence_base, n.decay_profile, {shared}
        prme.age_days(coalesce(n.last_reinforced_at, n.created_at), CAST($as_of AS TIMESTAMPTZ)) AS age_days
    FROM {nodes}
    WHERE n.user_id = $user_id
      AND n.lifecycle_state NOT IN ('archived', 'deprecated')
      AND (CAST($scopes AS VARCHAR []) IS NULL OR list_contains(CAST($scopes AS VARCHAR []), n.scope))
) AS n
"""
# score = relevance * (0.5 + 0.25 salience + 0.25 confidence), best first, ties by id. The
# ranking reads the few columns it needs; the rest of each hit's columns are read for the
# max_count best only. The rank is the row's position (recall_hits), not a window.
_RECALL = """
SELECT r.score, r.relevance, r.effective_salience, r.effective_confidence, n.id, n.namespace, n.scope,
    n.kind, n.content, n.lifecycle_state, n.decay_profile, n.confidence_base, n.salience_base,
    n.reinforcement_boost, n.last_reinforced_at, n.created_at, n.updated_at, n.version
FROM (
    SELECT d.*, d.relevance * (CAST(0.5 AS DOUBLE) + CAST(0.25 AS DOUBLE) * d.effective_salience
        + CAST(0.25 AS DOUBLE) * d.effective_confidence) AS score
    FROM ({scores}) AS d
    ORDER BY score DESC, d.id
    LIMIT $max_count
) AS r
JOIN prme.nodes AS n ON n.user_id = $user_id AND n.id = r.id
ORDER BY r.score DESC, r.id
"""
RECALL_ALL = _RECALL.format(
    scores=_RECALL_SCORES.format(relevance="CAST(1.0 AS DOUBLE)", shared="", nodes="prme.nodes AS n")
)
# The share of the query's words a memory has: its matching rows in node_words, found by
# {has_word}. DuckDB turns a list of five or more words into a join marking every row of
# node_words, then a filter; a semi join with the words is about 1 ms faster from
# five words on, the list's filter faster below (bench/client_bench.py --recall-only).
_RECALL_WORDS = _RECALL.format(
    scores=_RECALL_SCORES.format(
        relevance="CAST(n.shared AS DOUBLE) / CAST($word_count AS DOUBLE)",
        shared="m.shared,",
        nodes="""(
        SELECT w.node_id, count(*) AS shared FROM prme.node_words AS w
        WHERE w.user_id = $user_id AND {has_word}
        GROUP BY w.node_id
    ) AS m
    JOIN prme.nodes AS n ON n.user_id = $user_id AND n.id = m.node_id""",
    )
)
RECALL_FEW_WORDS = _RECALL_WORDS.format(has_word="list_contains(CAST($words AS VARCHAR []), w.word)")
RECALL_WORDS = _RECALL_WORDS.format(has_word="w.word IN (SELECT unnest(CAST($words AS VARCHAR [])))")


def recall_hits(rows: list[tuple[Any, ...]]) -> list[RecallHit]:
    """Recall's rows, best first, as hits ranked 1, 2, ... (prme.recall's row_number)."""
    return [recall_hit((rank, *row)) for rank, row in enumerate(rows, 1)]


# prme.find_nodes: the owner's memories in any lifecycle state, filtered; with words, the
# ones having any of them, most of the query's words first; then the newest change first.
_FIND_FILTERS = (
    "n.user_id = $user_id "
    "AND (CAST($scopes AS VARCHAR []) IS NULL OR list_contains(CAST($scopes AS VARCHAR []), n.scope)) "
    "AND (CAST($stabilities AS VARCHAR []) IS NULL OR list_contains(CAST($stabilities AS VARCHAR []), n.stability)) "
    "AND (CAST($states AS VARCHAR []) IS NULL OR list_contains(CAST($states AS VARCHAR []), n.lifecycle_state))"
)
FIND_ALL = (
    f"SELECT {_NODE_COLUMNS} FROM prme.nodes AS n WHERE {_FIND_FILTERS} "
    "ORDER BY n.updated_at DESC, n.id LIMIT $max_count"
)
FIND_WORDS = (
    f"SELECT {', '.join('n.' + c for c in _NODE_NAMES)} FROM ("
    "SELECT w.node_id, count(*) AS shared FROM prme.node_words AS w "
    "WHERE w.user_id = $user_id AND list_contains(CAST($words AS VARCHAR []), w.word) GROUP BY w.node_id"
    f") AS m JOIN prme.nodes AS n ON n.user_id = $user_id AND n.id = m.node_id WHERE {_FIND_FILTERS} "
    "ORDER BY m.shared DESC, n.updated_at DESC, n.id LIMIT $max_count"
)
_LIFECYCLE_STATES = ("active", "contested", "superseded", "deprecated", "archived")


# -- API tokens, snapshots and prompts: statements and rules -------------------------

INSERT_BEARER_HASH = (
    "INSERT OR IGNORE INTO prme.api_tokens VALUES ($user_id, $token_sha256, $label, $created_at, NULL) "
    "RETURNING created_at"
)
REVOKE_BEARER_HASH = (
    "UPDATE prme.api_tokens SET revoked_at = $now "
    "WHERE user_id = $user_id AND token_sha256 = $token_sha256 AND revoked_at IS NULL"
)
LIVE_BEARER_HASH = (
    "SELECT 1 FROM prme.api_tokens WHERE user_id = $user_id AND token_sha256 = $token_sha256 AND revoked_at IS NULL"
)

SNAPSHOT_HEAD = "SELECT generation_id, seq FROM prme.snapshot_heads WHERE user_id = $user_id AND scope = $scope"
# A scope's active memories, strongest first (effective salience plus effective
# confidence now, then id), as prme.publish_snapshot orders them.
SNAPSHOT_CANDIDATES = """
SELECT n.id, n.kind, n.content
FROM (
    SELECT n.*, prme.age_days(coalesce(n.last_reinforced_at, n.created_at), CAST($now AS TIMESTAMPTZ)) AS age_days
    FROM prme.nodes AS n
    WHERE n.user_id = $user_id AND n.scope = $scope AND n.lifecycle_state = 'active'
) AS n
ORDER BY prme.effective_salience(n.salience_base, n.reinforcement_boost, n.decay_profile, n.age_days)
    + prme.effective_confidence(n.confidence_base, n.decay_profile, n.age_days) DESC, n.id
"""
INSERT_GENERATION = (
    "INSERT OR IGNORE INTO prme.snapshot_generations VALUES "
    "($user_id, $scope, $generation_id, $document, $items, $size, $now)"
)
INSERT_HEAD = "INSERT INTO prme.snapshot_heads VALUES ($user_id, $scope, $generation_id, $seq, $now)"
ADVANCE_HEAD = (
    "UPDATE prme.snapshot_heads SET generation_id = $generation_id, seq = $seq, advanced_at = $now "
    "WHERE user_id = $user_id AND scope = $scope AND seq = $seq - 1"
)
INSERT_HISTORY = "INSERT INTO prme.snapshot_history VALUES ($user_id, $scope, $seq, $generation_id, $previous, $now)"
_SNAPSHOT_COLUMNS = "g.generation_id, {seq}, g.document, g.item_count, g.byte_size, g.created_at, {advanced_at}"
CURRENT_SNAPSHOT = (
    f"SELECT {_SNAPSHOT_COLUMNS.format(seq='h.seq', advanced_at='h.advanced_at')} "
    "FROM prme.snapshot_heads AS h JOIN prme.snapshot_generations AS g "
    "ON g.user_id = h.user_id AND g.scope = h.scope AND g.generation_id = h.generation_id "
    "WHERE h.user_id = $user_id AND h.scope = $scope"
)
# seq and advanced_at of the latest time the generation became current.
GET_SNAPSHOT = (
    f"SELECT {_SNAPSHOT_COLUMNS.format(seq='s.seq', advanced_at='s.advanced_at')} "
    "FROM prme.snapshot_generations AS g JOIN ("
    "SELECT generation_id, max(seq) AS seq, arg_max(advanced_at, seq) AS advanced_at FROM prme.snapshot_history "
    "WHERE user_id = $user_id AND scope = $scope AND generation_id = $generation_id GROUP BY generation_id"
    ") AS s ON s.generation_id = g.generation_id "
    "WHERE g.user_id = $user_id AND g.scope = $scope AND g.generation_id = $generation_id"
)
PROMPT_GENERATIONS = (
    "SELECT s.scope, g.generation_id, g.document "
    "FROM (SELECT unnest($scopes) AS scope, unnest(range(1, len($scopes) + 1)) AS position) AS s "
    "LEFT JOIN prme.snapshot_heads AS h ON h.user_id = $user_id AND h.scope = s.scope "
    "LEFT JOIN prme.snapshot_generations AS g "
    "ON g.user_id = h.user_id AND g.scope = h.scope AND g.generation_id = h.generation_id "
    "ORDER BY s.position"
)

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_MAX_DOCUMENT_BYTES = 16777216
_LABEL_CONTROL = re.compile(r"[\x01-\x1f\x7f-\x9f]")


def _valid_token_sha256(value: object) -> str:
    if not isinstance(value, str) or not _SHA256_HEX.fullmatch(value):
        raise InvalidInput("token_sha256 must be 64 lowercase hex digits")
    return value


def _valid_label(label: object) -> str:
    if not isinstance(label, str) or len(label) > 200 or _LABEL_CONTROL.search(label):
        raise InvalidInput("label must be at most 200 characters, no control characters")
    return _no_nul("label", label)


def _valid_scopes(scopes: Sequence[str] | None) -> tuple[str, ...]:
    """prme._valid_scopes (non-null): 1..100 valid names, duplicates dropped in first-seen order."""
    if scopes is None:
        raise InvalidInput("scopes must not be null")
    if not 1 <= len(scopes) <= 100:
        raise InvalidInput("scopes must be a one-dimensional array of 1 to 100 scopes")
    return tuple(dict.fromkeys(valid_name("scope", scope) for scope in scopes))


def _octets(text: str) -> int:
    return len(text.encode("utf-8"))


def _snapshot_envelope(user_id: str, scope: str) -> tuple[str, str]:
    """prme._snapshot_envelope: the document's text before and after its items (RFC 8785 key order)."""
    return '{"items":[', f'],"scope":{canonical_json(scope)},"user_id":{canonical_json(user_id)},"version":1}}'


def _snapshot_item(node_id: uuid.UUID, kind: str, content: str) -> str:
    """prme._snapshot_item: {"content":...,"id":...,"kind":...} in RFC 8785 form."""
    return canonical_json({"content": content, "id": str(node_id), "kind": kind})


_MIN_ITEM_BYTES = _octets(_snapshot_item(uuid.UUID(int=0), "a", ""))


def _select_items(rows: duckdb.DuckDBPyConnection, *, budget: int, max_items: int) -> list[str]:
    """publish_snapshot's selection: take each ranked memory that still fits in budget bytes (a long
    one that does not is skipped; shorter ones after it may fit), up to max_items."""
    items: list[str] = []
    used = 0
    while batch := rows.fetchmany(256):
        for node_id, kind, content in batch:
            item = _snapshot_item(node_id, kind, content)
            cost = _octets(item) + (1 if items else 0)
            if used + cost <= budget:
                items.append(item)
                used += cost
                if len(items) >= max_items:
                    return items
            if used + _MIN_ITEM_BYTES + 1 > budget:
                return items
    return items


def _verified_document(user_id: str, scope: str, generation_id: str, document: str) -> dict[str, Any]:
    """prme._verified_document: the parsed document once its sha256 is its id and it names this
    owner, scope and format version 1; :class:`IntegrityError` (XX001) otherwise."""
    if hashlib.sha256(document.encode("utf-8")).hexdigest() != generation_id:
        raise IntegrityError("snapshot generation does not verify: sha256 of its document differs from its id")
    parsed = json.loads(document)
    if (
        not isinstance(parsed, dict)
        or parsed.get("user_id") != user_id
        or parsed.get("scope") != scope
        or parsed.get("version") != 1
        or not isinstance(parsed.get("items"), list)
    ):
        raise IntegrityError("snapshot generation does not verify: its document names another owner, scope or format")
    return parsed


def _snapshot(user_id: str, scope: str, row: Sequence[Any]) -> Snapshot:
    generation_id, seq, document, item_count, byte_size, created_at, advanced_at = row
    _verified_document(user_id, scope, generation_id, document)
    return Snapshot(
        generation_id,
        seq,
        document,
        item_count,
        byte_size,
        cast(datetime, _utc(created_at)),
        cast(datetime, _utc(advanced_at)),
    )


def _lay_out_prompt(
    user_id: str, scopes: tuple[str, ...], generations: Sequence[Sequence[Any]], budget: int
) -> AssembledPrompt:
    """prme.assemble_prompt's layout: a "[scope]" line and one "- content" line per item (a newline
    in content continues on a line indented by two spaces), sections apart by an empty line; an
    item that does not fit with its section's header is skipped (truncated)."""
    parts: list[str] = []
    used = items = 0
    truncated = False
    ids: list[str | None] = []
    for scope, generation_id, document in generations:
        ids.append(generation_id)
        if generation_id is None:
            continue  # never published: contributes nothing
        parsed = _verified_document(user_id, scope, generation_id, document)
        header = ("\n" if used > 0 else "") + f"[{scope}]\n"
        section_open = False
        for item in parsed["items"]:
            line = "- " + str(item["content"]).replace("\n", "\n  ") + "\n"
            cost = _octets(line) + (0 if section_open else _octets(header))
            if used + cost <= budget:
                if not section_open:
                    parts.append(header)
                    section_open = True
                parts.append(line)
                used += cost
                items += 1
            else:
                truncated = True
    prompt = "".join(parts)
    return AssembledPrompt(prompt, _octets(prompt), items, truncated, scopes, tuple(ids))


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


class AsyncDuckDBBackend:
    """A memory pack for asyncio: each call runs in a worker thread, to completion.

    The call is shielded: cancelling the awaiting task does not stop the thread, and
    this backend's :class:`asyncio.Lock` stays held until the thread has committed or
    rolled back. So the next call (a retry, say) starts only after the cancelled one
    finished, and finds its key: a replay, never a second count. The threads also
    take the pack lock of :class:`DuckDBBackend`, so asyncio and thread callers mix.
    """

    def __init__(
        self,
        path: str | Path = DEFAULT_PATH,
        *,
        clock: Callable[[], datetime] | None = None,
        new_id: Callable[[], uuid.UUID] | None = None,
    ) -> None:
        self.path = path
        self._options: dict[str, Any] = {"clock": clock, "new_id": new_id}
        self._sync: DuckDBBackend | None = None
        self._lock = asyncio.Lock()

    @property
    def sync(self) -> DuckDBBackend:
        """The underlying synchronous backend (opened by :meth:`open`)."""
        if self._sync is None:
            raise PackClosedError(f"the memory pack at {self.path} is not open")
        return self._sync

    async def open(self) -> None:
        if self._sync is None:
            self._sync = await asyncio.to_thread(DuckDBBackend, self.path, **self._options)

    async def execute(self, request: Request[T]) -> T:
        return await self.run_in_thread(self.sync.execute, request)

    async def run_in_thread(self, function: Callable[..., T], *args: Any) -> T:
        """Run ``function(*args)`` in a thread under the lock, to completion even if cancelled."""
        await self._lock.acquire()
        try:
            task = asyncio.ensure_future(asyncio.to_thread(function, *args))
        except BaseException:
            self._lock.release()
            raise
        task.add_done_callback(self._finished)
        return await asyncio.shield(task)

    def _finished(self, task: asyncio.Future[Any]) -> None:
        self._lock.release()
        if not task.cancelled():
            task.exception()  # retrieved here, in case the caller was cancelled and left

    async def close(self) -> None:
        async with self._lock:  # waits for a call still finishing in its thread
            if self._sync is not None:
                sync, self._sync = self._sync, None
                await asyncio.to_thread(sync.close)
