"""find_nodes (sql/postgres/315_find_nodes.sql): the reviewer's search over the pack's memories in
every lifecycle state, by words and, given a query vector, meaning."""

from __future__ import annotations

from typing import Any

import duckdb

from ...errors import InvalidInput
from ...models import Node
from ...validation import valid_user_id
from .. import FindNodes
from .connection import PackConnection
from .embeddings import valid_embedding
from .recall import _query_facts
from .rows import _NODE_COLUMNS, _NODE_NAMES, _node_from_values
from .validation import _MAX_TEXT_BYTES, _STABILITIES, _no_nul, _valid_scopes

# prme.find_nodes: the owner's memories in any lifecycle state, filtered; with words, the
# ones having any of them, most of the query's words first; then the newest change first.
# With a query vector also the max_count nearest by meaning among the memories the filters
# keep (inner products of unit vectors: the cosine), and between the number of words and the
# newest change, the closest first (a memory without a vector last).
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
FIND_HYBRID = f"""
WITH matched AS (
    SELECT w.node_id AS id, count(*) AS shared FROM prme.node_words AS w
    WHERE w.user_id = $user_id AND list_contains(CAST($words AS VARCHAR []), w.word) GROUP BY w.node_id
),
scores AS MATERIALIZED (
    SELECT e.node_id AS id, list_inner_product(e.embedding, CAST($vector AS FLOAT [])) AS cosine
    FROM prme.node_embeddings AS e
    WHERE e.user_id = $user_id AND e.model_id = $model_id AND e.embedding IS NOT NULL
),
nearest AS (
    SELECT s.id FROM scores AS s JOIN prme.nodes AS n ON n.user_id = $user_id AND n.id = s.id
    WHERE {_FIND_FILTERS}
    ORDER BY s.cosine DESC, s.id
    LIMIT $max_count
),
candidates AS (SELECT id FROM matched UNION SELECT id FROM nearest)
SELECT {", ".join("n." + c for c in _NODE_NAMES)}
FROM candidates AS c
JOIN prme.nodes AS n ON n.user_id = $user_id AND n.id = c.id
LEFT JOIN matched AS m ON m.id = c.id
LEFT JOIN scores AS s ON s.id = c.id
WHERE {_FIND_FILTERS}
ORDER BY coalesce(m.shared, 0) DESC, s.cosine DESC NULLS LAST, n.updated_at DESC, n.id
LIMIT $max_count
"""
_LIFECYCLE_STATES = ("active", "contested", "superseded", "deprecated", "archived")


class FindNodesOperations(PackConnection):
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

        blank = query is None or query.strip(" \t\n\r\f\v") == ""

        def work(con: duckdb.DuckDBPyConnection) -> list[Node]:
            model_id = request.embedding_model
            # As recall: a model no memory has a vector of yet is not registered (dimensions
            # None): nothing to compare, so words.
            words, dimensions, _ = (
                ([], None, {}) if blank and model_id is None else _query_facts(con, user_id, query, blank, model_id)
            )
            vector = None
            if model_id is None or dimensions is not None:
                vector = valid_embedding(con, model_id, request.query_embedding, dimensions)
            if blank:
                rows = con.execute(FIND_ALL, params).fetchall()
            elif vector is not None:
                hybrid = {**params, "words": words, "model_id": model_id, "vector": vector.tolist()}
                rows = con.execute(FIND_HYBRID, hybrid).fetchall()
            elif words:
                rows = con.execute(FIND_WORDS, {**params, "words": words}).fetchall()
            else:
                return []  # only stop words and punctuation, and no vector: nothing can match
            return [_node_from_values(row) for row in rows]

        return self.read(work)
