"""Snapshots (sql/postgres/320_snapshots.sql) and prompts (330_assemble_prompt.sql): a scope's
memories published as a verified document, and prompts laid out from the current ones."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

import duckdb

from ...errors import IdempotencyConflict, IntegrityError, InvalidInput, NotFoundError
from ...journal import canonical_json
from ...models import (
    AssembledPrompt,
    PublishResult,
    Snapshot,
)
from ...validation import valid_user_id
from .. import (
    AssemblePrompt,
    GetCurrentSnapshot,
    GetSnapshot,
    PublishSnapshot,
)
from .connection import PackConnection, _Retry
from .rows import _utc
from .validation import _SHA256_HEX, _valid_scopes, valid_name

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


_MAX_DOCUMENT_BYTES = 16777216


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


class SnapshotOperations(PackConnection):
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
