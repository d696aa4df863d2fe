"""Memories and events: add_node, add_event, get_node, list_nodes, reinforce and archive_node
(sql/postgres/080 to 120), and their statements."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import duckdb
import numpy as np

from ...embeddings import Vector
from ...errors import IdempotencyConflict, InvalidInput, NotFoundError
from ...models import (
    Event,
    Node,
    ReviewSchedule,
)
from ...validation import valid_user_id
from .. import (
    MAX_BATCH_ITEMS,
    AddEvent,
    AddNode,
    AddNodes,
    ArchiveNode,
    GetNode,
    ListNodes,
    NodeItem,
    Reinforce,
)
from .connection import PackConnection, _Retry
from .embeddings import INSERT_EMBEDDING, _model_dimensions, register_first_vector, valid_embedding, vector_rows
from .maintenance import _review_cadences, _setting
from .records import create_entry, journal_entry, reinforce_entry
from .rows import _CONFIRM_NAMES, _NODE_COLUMNS, _event, _fetch_dicts, _node, _node_from_values
from .validation import (
    _DECAY_PROFILES,
    _STABILITIES,
    valid_content,
    valid_fraction,
    valid_name,
    valid_payload,
    valid_timestamp,
)
from .writes import REINFORCE_KEY, _require_live_node_and_evidence, _write_node

GET_NODE = f"SELECT {_NODE_COLUMNS} FROM prme.nodes WHERE user_id = $user_id AND id = $node_id"

LIST_NODES = (
    f"SELECT {_NODE_COLUMNS} FROM prme.nodes "
    "WHERE user_id = $user_id "
    "AND (CAST($namespace AS VARCHAR) IS NULL OR namespace = CAST($namespace AS VARCHAR)) "
    "AND (CAST($after_node_id AS UUID) IS NULL OR id > CAST($after_node_id AS UUID)) "
    "ORDER BY id LIMIT $max_count"
)

# Stored nodes among a transaction's node ids (replays), of any of its owners: one query for
# every owner's batch; the caller keeps the (owner, id) pairs it asked for.
GET_NODES = (
    f"SELECT {_NODE_COLUMNS} FROM prme.nodes "
    "WHERE user_id IN (SELECT unnest(CAST($user_ids AS VARCHAR []))) "
    "AND id IN (SELECT unnest(CAST($node_ids AS UUID [])))"
)

# New nodes, their words, create records and vectors: one statement per table for any
# number of memories, each column a list (DuckDB's unnest of several lists zips them, in
# order). add_node's former path -- the record built by the rules' SQL macros, then
# INSERT OR IGNORE ... RETURNING, one row at a time -- cost about 3x these statements
# (docs/PERFORMANCE.md, "The pack's add_node").
_NEW_NODE_COLUMNS = (
    "id",
    "user_id",
    "namespace",
    "scope",
    "kind",
    "content",
    "confidence_base",
    "salience_base",
    "stability",
    "next_review_at",
    "decay_profile",
    "created_at",
    "updated_at",
)
INSERT_NODES = (
    "INSERT INTO prme.nodes (id, user_id, namespace, scope, kind, content, confidence_base, salience_base, "
    "reinforcement_boost, last_reinforced_at, evidence_refs, stability, next_review_at, lifecycle_state, "
    "decay_profile, created_at, updated_at, version, last_checksum) "
    "SELECT unnest(CAST(? AS UUID [])), unnest(CAST(? AS VARCHAR [])), unnest(CAST(? AS VARCHAR [])), "
    "unnest(CAST(? AS VARCHAR [])), unnest(CAST(? AS VARCHAR [])), unnest(CAST(? AS VARCHAR [])), "
    "unnest(CAST(? AS DECIMAL(5, 4) [])), unnest(CAST(? AS DECIMAL(5, 4) [])), 0, NULL, CAST([] AS UUID []), "
    "unnest(CAST(? AS VARCHAR [])), unnest(CAST(? AS TIMESTAMPTZ [])), 'active', unnest(CAST(? AS VARCHAR [])), "
    "unnest(CAST(? AS TIMESTAMPTZ [])), unnest(CAST(? AS TIMESTAMPTZ [])), 1, unnest(CAST(? AS VARCHAR []))"
)
INSERT_WORDS_BATCH = (
    "INSERT INTO prme.node_words SELECT n.user_id, n.node_id, unnest(prme.recall_words(n.content)) "
    "FROM (SELECT unnest(CAST(? AS VARCHAR [])) AS user_id, unnest(CAST(? AS UUID [])) AS node_id, "
    "unnest(CAST(? AS VARCHAR [])) AS content) AS n"
)
INSERT_JOURNAL_CREATES = (
    "INSERT INTO prme.journal SELECT unnest(CAST(? AS VARCHAR [])), unnest(CAST(? AS UUID [])), 1, 2, 'create', "
    "unnest(CAST(? AS UUID [])), NULL, NULL, unnest(CAST(? AS VARCHAR [])), unnest(CAST(? AS VARCHAR [])), NULL, "
    "CAST(? AS TIMESTAMPTZ), NULL"
)
# The vectors come from a registered array (embeddings.vector_rows), the rest as lists.
INSERT_EMBEDDINGS_BATCH = (
    "INSERT INTO prme.node_embeddings (user_id, node_id, model_id, embedding, error, embedded_at) "
    "SELECT k.user_ids[v.i + 1], k.node_ids[v.i + 1], k.model_id, v.embedding, NULL, k.now "
    "FROM (SELECT CAST(? AS VARCHAR []) AS user_ids, CAST(? AS UUID []) AS node_ids, CAST(? AS VARCHAR) AS model_id, "
    "CAST(? AS TIMESTAMPTZ) AS now) AS k, ({vectors}) AS v ORDER BY v.i"
)
_SCALE = Decimal("0.0001")
_ZERO = Decimal("0.0000")


def _valid_item_embedding(
    con: duckdb.DuckDBPyConnection,
    dimensions: dict[str, int],
    model_id: str | None,
    embedding: Vector | None,
    now: datetime,
) -> Vector | None:
    """valid_embedding, each model's dimensions read once per batch."""
    if embedding is None:
        return None
    if model_id is None:
        raise InvalidInput("an embedding needs its embedding_model")
    if model_id not in dimensions:
        register_first_vector(con, model_id, embedding, now)
        dimensions[model_id] = _model_dimensions(con, model_id)
    vector = np.asarray(embedding, dtype=np.float32)
    if vector.ndim != 1 or vector.size != dimensions[model_id]:
        raise InvalidInput(f"embedding must have {dimensions[model_id]} dimensions for model '{model_id}'")
    if not np.isfinite(vector).all():
        raise InvalidInput("embedding must hold finite numbers (no NULL, NaN or infinity)")
    return vector


# A confirmation reads only the node's state and chain link, as plain columns (a row as a
# STRUCT of every column, bookkeeping too, costs about 0.3 ms more to return).
CONFIRM_NODE = f"SELECT {_NODE_COLUMNS}, last_checksum FROM prme.nodes WHERE user_id = $user_id AND id = $node_id"


# A plain INSERT: a taken id is its ConstraintException (INSERT OR IGNORE ... RETURNING, the
# former statement, cost about twice as much to plan and run).
INSERT_EVENT = (
    "INSERT INTO prme.events VALUES ($id, $user_id, $namespace, $scope, $kind, $content, "
    "CAST($payload AS JSON), $occurred_at, $created_at)"
)


def _node_params(request: AddNode | NodeItem, user_id: str) -> dict[str, Any]:
    """add_node's checks (sql/postgres/080_add_node.sql), before any I/O."""
    params: dict[str, Any] = {
        "user_id": user_id,
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
    params.update(
        stability=request.stability,
        decay_profile=request.decay_profile,
        next_review_at=(
            None
            if isinstance(request.next_review_at, ReviewSchedule)
            else valid_timestamp("next_review_at", request.next_review_at)
        ),
        by_cadence=request.next_review_at is ReviewSchedule.BY_CADENCE,
    )
    return params


# An item of a batch after add_node's checks: its parameters, node_id, created_at, the item.
_CheckedItem = tuple[dict[str, Any], UUID | None, datetime | None, NodeItem]


def _checked_batch(request: AddNodes) -> tuple[str, list[_CheckedItem]]:
    """add_nodes' checks of every item, before any I/O: the owner and the checked items."""
    user_id = valid_user_id(request.user_id)
    if len(request.items) > MAX_BATCH_ITEMS:
        raise InvalidInput(f"items must hold at most {MAX_BATCH_ITEMS} memories")
    checked: list[_CheckedItem] = []
    seen: dict[UUID, int] = {}
    for index, item in enumerate(request.items):
        try:
            params = _node_params(item, user_id)
            created_at = valid_timestamp("created_at", item.created_at)
            if item.node_id is not None and seen.setdefault(item.node_id, index) != index:
                raise InvalidInput("node_id repeats another item's")
        except InvalidInput as exc:
            raise InvalidInput(f"items[{index}]: {exc}") from None
        checked.append((params, item.node_id, created_at, item))
    return user_id, checked


class NodeOperations(PackConnection):
    def _new_state(
        self, params: dict[str, Any], node_id: UUID | None, now: Any, created_at: Any, cadence: timedelta | None
    ) -> dict[str, Any]:
        """The new node's row, as add_node makes it, and its create record's operation_id;
        ``cadence`` is the owner's review cadence for its stability (None: not on one)."""
        operation_id = self._new_id()  # before the node's id, as add_node always drew them
        review = params["next_review_at"]
        if params["by_cadence"]:
            # On a review schedule from the start: one cadence of its stability ahead.
            assert cadence is not None
            review = now + cadence
        return {
            "operation_id": operation_id,
            "id": node_id or self._new_id(),
            "user_id": params["user_id"],
            "namespace": params["namespace"],
            "scope": params["scope"],
            "kind": params["kind"],
            "content": params["content"],
            "confidence_base": params["confidence_base"].quantize(_SCALE),
            "salience_base": params["salience_base"].quantize(_SCALE),
            "reinforcement_boost": _ZERO,
            "last_reinforced_at": None,
            "evidence_refs": [],
            "stability": params["stability"],
            "next_review_at": review,
            "lifecycle_state": "active",
            "decay_profile": params["decay_profile"],
            "created_at": created_at,
            "updated_at": now,
            "version": 1,
        }

    def _write_new(
        self,
        con: duckdb.DuckDBPyConnection,
        states: list[dict[str, Any]],
        vectors: list[tuple[str | None, Vector | None]],
        now: Any,
    ) -> None:
        """New nodes with their create records, words and vectors: one statement per table,
        whatever the count (add_node's one, add_nodes' batch). The records are built here,
        byte for byte prme._journal_record_v2's (records.py)."""
        operation_ids = [state["operation_id"] for state in states]
        entries = [create_entry(state, operation_id) for state, operation_id in zip(states, operation_ids, strict=True)]
        columns = {name: [state[name] for state in states] for name in _NEW_NODE_COLUMNS}
        try:
            con.execute(INSERT_NODES, [*columns.values(), [checksum for _, checksum in entries]])
        except duckdb.ConstraintException:
            if len(states) == 1:
                raise IdempotencyConflict("a node with this node_id already exists") from None
            # Another call created one of these node ids after this one looked: a retry of
            # the batch answers it as a replay (as prme.add_nodes).
            raise IdempotencyConflict("a concurrent call created one of these node_ids: retry the batch") from None
        con.execute(INSERT_WORDS_BATCH, [columns["user_id"], columns["id"], columns["content"]])
        con.execute(
            INSERT_JOURNAL_CREATES,
            [
                columns["user_id"],
                columns["id"],
                operation_ids,
                [record for record, _ in entries],
                [checksum for _, checksum in entries],
                now,
            ],
        )
        models: dict[str, list[tuple[dict[str, Any], Vector]]] = {}
        for state, (model, vector) in zip(states, vectors, strict=True):
            if model is not None and vector is not None:
                models.setdefault(model, []).append((state, vector))
        for model, rows in models.items():
            if len(rows) == 1:  # one vector (add_node): bound as it is, no array to register
                state, vector = rows[0]
                con.execute(
                    INSERT_EMBEDDING,
                    {"user_id": state["user_id"], "node_id": state["id"], "model_id": model, "embedding": vector,
                     "now": now},
                )  # fmt: skip
                continue
            with vector_rows(con, np.stack([vector for _, vector in rows])) as query:
                con.execute(
                    INSERT_EMBEDDINGS_BATCH.format(vectors=query),
                    [[state["user_id"] for state, _ in rows], [state["id"] for state, _ in rows], model, now],
                )

    def add_node(self, request: AddNode) -> Node:
        params = _node_params(request, valid_user_id(request.user_id))

        def work(con: duckdb.DuckDBPyConnection) -> Node:
            now = self._clock()
            register_first_vector(con, request.embedding_model, request.embedding, now)
            vector = valid_embedding(con, request.embedding_model, request.embedding)
            cadence = _setting(con, params["user_id"], params["stability"])[0] if params["by_cadence"] else None
            state = self._new_state(params, request.node_id, now, now, cadence)
            self._write_new(con, [state], [(request.embedding_model, vector)], now)
            return _node(state)

        return self.run(work)

    def add_nodes(self, request: AddNodes) -> list[Node]:
        """prme.add_nodes (sql/postgres/085_add_nodes.sql): every item checked first, then one
        transaction of one statement per table for the whole batch; an item whose node_id is
        stored with the same content, scope, namespace and kind is a replay."""
        batch = _checked_batch(request)
        return self.run(lambda con: self._write_batches(con, [batch])[0])

    def add_nodes_together(self, requests: Sequence[AddNodes]) -> list[list[Node]]:
        """Several owners' :meth:`add_nodes` batches in ONE transaction (a bulk import's): each
        batch exactly what add_nodes makes of it, all of them or nothing. A pack's commit and
        its statements cost the same for one owner's memories as for many (one DuckDB file),
        so an import of many owners' memories writes them in shared transactions
        (docs/PERFORMANCE.md). A refusal is add_nodes' own error for the batch it is about,
        naming the item (``items[N]``), not the batch: a caller that needs to know which
        batch writes them one by one (prme_pg.bulk does, after a refusal)."""
        batches = [_checked_batch(request) for request in requests]
        owners = [user_id for user_id, _ in batches]
        if len(set(owners)) != len(owners):
            raise InvalidInput("each batch of add_nodes_together must be of another owner")
        if sum(len(items) for _, items in batches) > MAX_BATCH_ITEMS:
            raise InvalidInput(f"batches must hold at most {MAX_BATCH_ITEMS} memories together")
        try:
            return self.run(lambda con: self._write_batches(con, batches))
        except UnicodeEncodeError as exc:  # as DuckDBBackend.execute answers it for add_nodes
            raise InvalidInput(f"text is not valid Unicode: {exc.reason}") from exc

    def _write_batches(
        self, con: duckdb.DuckDBPyConnection, batches: list[tuple[str, list[_CheckedItem]]]
    ) -> list[list[Node]]:
        """Checked batches of distinct owners in the transaction: each one's nodes (replays
        answered from the stored rows), the new ones written with one statement per table.
        The stored nodes and the owners' review cadences are read with one query each."""
        now = self._clock()
        owners = [user_id for user_id, _ in batches]
        wanted = [(user_id, item[1]) for user_id, checked in batches for item in checked if item[1] is not None]
        stored: dict[tuple[str, UUID], dict[str, Any]] = {}
        if wanted:
            rows = _fetch_dicts(
                con.execute(GET_NODES, {"user_ids": owners, "node_ids": [node_id for _, node_id in wanted]})
            )
            stored = {(row["user_id"], row["id"]): row for row in rows}
        cadences = {}
        if any(item[0]["by_cadence"] for _, checked in batches for item in checked):
            cadences = _review_cadences(con, owners)
        dimensions: dict[str, int] = {}
        results: list[list[Node]] = []
        states: list[dict[str, Any]] = []
        vectors: list[tuple[str | None, Vector | None]] = []
        for user_id, checked in batches:
            nodes: list[Node] = []
            for index, (params, node_id, created_at, item) in enumerate(checked):
                if created_at is not None and created_at > now:
                    raise InvalidInput(f"items[{index}]: created_at must not be in the future (got {created_at})")
                row = stored.get((user_id, node_id)) if node_id is not None else None
                if row is not None:
                    same = (row["content"], row["scope"], row["namespace"], row["kind"]) == (
                        params["content"],
                        params["scope"],
                        params["namespace"],
                        params["kind"],
                    )
                    if not same:
                        raise IdempotencyConflict(
                            f"items[{index}]: a node with this node_id already exists with other content, "
                            f"scope, namespace or kind (node_id {node_id})"
                        )
                    nodes.append(_node(row, replayed=True))
                    continue
                try:
                    vector = _valid_item_embedding(con, dimensions, item.embedding_model, item.embedding, now)
                except InvalidInput as exc:
                    raise InvalidInput(f"items[{index}]: {exc}") from None
                cadence = cadences[user_id, params["stability"]] if params["by_cadence"] else None
                state = self._new_state(params, node_id, now, created_at or now, cadence)
                states.append(state)
                vectors.append((item.embedding_model, vector))
                nodes.append(_node(state))
            results.append(nodes)
        if states:
            self._write_new(con, states, vectors, now)
        return results

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
            row = {
                **params,
                "id": request.event_id or self._new_id(),
                "occurred_at": occurred_at or now,
                "created_at": now,
            }
            try:
                con.execute(INSERT_EVENT, row)
            except duckdb.ConstraintException as exc:
                if "duplicate key" not in str(exc).lower():
                    raise
                raise IdempotencyConflict("an event with this event_id already exists") from None
            return _event(row)

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
                _write_node(
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
            now = self._clock()
            found = con.execute(CONFIRM_NODE, {"user_id": user_id, "node_id": request.node_id}).fetchone()
            if found is None or found[_CONFIRM_NAMES.index("lifecycle_state")] == "archived":
                raise NotFoundError("node not found")
            node = dict(zip(_CONFIRM_NAMES, found, strict=True))
            # prme.archive_node's change (sql/postgres/120), its record built here as a
            # confirmation's is: the rules' SQL macros cost about half of the call to plan.
            after = {**node, "lifecycle_state": "archived", "updated_at": now, "version": node["version"] + 1}
            record, checksum = journal_entry("archive", None, node, after, operation_id, now)
            _write_node(con, node, after, "archive", operation_id, record, checksum)
            return _node(after)

        return self.run(work)
