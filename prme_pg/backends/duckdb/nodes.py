"""Memories and events: add_node, add_event, get_node, list_nodes, reinforce and archive_node
(sql/postgres/080 to 120), and their statements."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import duckdb

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
from .embeddings import INSERT_EMBEDDING, valid_embedding
from .maintenance import _setting
from .recall import INSERT_WORDS
from .records import reinforce_entry
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
from .writes import REINFORCE_KEY, _append_record, _require_live_node_and_evidence, _write_node

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
            'created_at': CAST($created_at AS TIMESTAMPTZ),
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


# A confirmation reads only the node's state and chain link, as plain columns (a row as a
# STRUCT of every column, bookkeeping too, costs about 0.3 ms more to return).
CONFIRM_NODE = f"SELECT {_NODE_COLUMNS}, last_checksum FROM prme.nodes WHERE user_id = $user_id AND id = $node_id"


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


INSERT_EVENT = (
    "INSERT OR IGNORE INTO prme.events VALUES ($id, $user_id, $namespace, $scope, $kind, $content, "
    "CAST($payload AS JSON), $occurred_at, $created_at) "
    "RETURNING id, user_id, namespace, scope, kind, content, payload, occurred_at, created_at"
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


class NodeOperations(PackConnection):
    def _create(
        self, con: duckdb.DuckDBPyConnection, params: dict[str, Any], node_id: UUID | None, now: Any, created_at: Any
    ) -> Node:
        """The node and its create record, written: add_node's transaction, one item of add_nodes'."""
        operation_id = self._new_id()
        review = params["next_review_at"]
        if params["by_cadence"]:
            # On a review schedule from the start: one cadence of its stability ahead.
            review = now + _setting(con, str(params["user_id"]), params["stability"])[0]
        values = {name: value for name, value in params.items() if name != "by_cadence"}
        entry = con.execute(
            CREATE_ENTRY,
            {
                **values,
                "next_review_at": review,
                "node_id": node_id or self._new_id(),
                "operation_id": operation_id,
                "now": now,
                "created_at": created_at,
            },
        ).fetchone()
        assert entry is not None
        state, record, checksum = entry
        if con.execute(INSERT_NODE, {**state, "last_checksum": checksum}).fetchone() is None:
            raise IdempotencyConflict("a node with this node_id already exists")
        con.execute(INSERT_WORDS, {"user_id": state["user_id"], "node_id": state["id"], "content": state["content"]})
        _append_record(con, state, "create", operation_id, record, checksum, prev_checksum=None)
        return _node(state)

    @staticmethod
    def _store_vector(
        con: duckdb.DuckDBPyConnection, node: Node, model_id: str | None, vector: Vector | None, now: Any
    ) -> None:
        """The memory's vector by model_id beside it (derived state, not journaled); None: none."""
        if vector is not None:
            con.execute(
                INSERT_EMBEDDING,
                {
                    "user_id": node.user_id,
                    "node_id": node.id,
                    "model_id": model_id,
                    "embedding": vector.tolist(),
                    "now": now,
                },
            )

    def add_node(self, request: AddNode) -> Node:
        params = _node_params(request, valid_user_id(request.user_id))

        def work(con: duckdb.DuckDBPyConnection) -> Node:
            now = self._clock()
            node = self._create(con, params, request.node_id, now, now)
            vector = valid_embedding(con, request.embedding_model, request.embedding)
            self._store_vector(con, node, request.embedding_model, vector, now)
            return node

        return self.run(work)

    def add_nodes(self, request: AddNodes) -> list[Node]:
        """prme.add_nodes (sql/postgres/085_add_nodes.sql): every item checked first, then one
        transaction; an item whose node_id is stored with the same content, scope, namespace and
        kind is a replay."""
        user_id = valid_user_id(request.user_id)
        if len(request.items) > MAX_BATCH_ITEMS:
            raise InvalidInput(f"items must hold at most {MAX_BATCH_ITEMS} memories")
        checked = []
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

        def work(con: duckdb.DuckDBPyConnection) -> list[Node]:
            now = self._clock()
            nodes = []
            for index, (params, node_id, created_at, item) in enumerate(checked):
                if created_at is not None and created_at > now:
                    raise InvalidInput(f"items[{index}]: created_at must not be in the future (got {created_at})")
                if node_id is not None:
                    rows = _fetch_dicts(con.execute(GET_NODE, {"user_id": user_id, "node_id": node_id}))
                    if rows:
                        stored = _node(rows[0])
                        same = (stored.content, stored.scope, stored.namespace, stored.kind) == (
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
                        nodes.append(_node(rows[0], replayed=True))
                        continue
                try:
                    vector = valid_embedding(con, item.embedding_model, item.embedding)
                except InvalidInput as exc:
                    raise InvalidInput(f"items[{index}]: {exc}") from None
                node = self._create(con, params, node_id, now, created_at or now)
                self._store_vector(con, node, item.embedding_model, vector, now)
                nodes.append(node)
            return nodes

        return self.run(work)

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
            _write_node(con, row["node"], row["after"], "archive", operation_id, row["record"], row["checksum"])
            return _node(row["after"])

        return self.run(work)
