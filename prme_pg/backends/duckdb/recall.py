"""Recall (sql/postgres/310_recall.sql): the word index of the pack's memories, the ranking,
and their statements."""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np

from ...errors import InvalidInput
from ...models import RecallHit
from ...validation import valid_user_id
from .. import Recall, recall_hit
from .connection import PackConnection
from .embeddings import VECTOR_STATE, OwnerVectors, VectorCache, valid_embedding
from .validation import _MAX_TEXT_BYTES, _no_nul, _valid_scopes, valid_timestamp

INSERT_WORDS = "INSERT INTO prme.node_words SELECT $user_id, $node_id, unnest(prme.recall_words($content))"


def _prepare_recall(con: duckdb.DuckDBPyConnection) -> None:
    """What recall needs of a pack, when it is opened: the word index and vectors stored plain."""
    _index_recall_words(con)
    _store_vectors_plain(con)


def _index_recall_words(con: duckdb.DuckDBPyConnection) -> None:
    """Index the recall words of every memory of a pack written before prme.node_words existed
    (or by another version of the words): once, when the pack is opened."""
    row = con.execute("SELECT value FROM prme.pack_info WHERE key = 'recall_words'").fetchone()
    if row is not None and row[0] == RECALL_WORDS_VERSION:
        return
    con.execute("DELETE FROM prme.node_words")
    con.execute("INSERT INTO prme.node_words SELECT user_id, id, unnest(prme.recall_words(content)) FROM prme.nodes")
    con.execute("INSERT OR REPLACE INTO prme.pack_info VALUES ('recall_words', $v)", {"v": RECALL_WORDS_VERSION})


#: DuckDB's compressions of floats. Recall reads every vector of an owner and model when it
#: first holds them in memory: decoding them took more time than the inner products
#: (docs/PERFORMANCE.md, issue 31); stored plain, they take about a tenth more room in the file.
_FLOAT_COMPRESSIONS = ("alp", "alprd")
_COMPRESSED_VECTORS = (
    "SELECT 1 FROM pragma_storage_info('prme.node_embeddings') "
    "WHERE segment_type = 'FLOAT' AND lower(compression) IN ('alp', 'alprd') LIMIT 1"
)


def _store_vectors_plain(con: duckdb.DuckDBPyConnection) -> None:
    """Have DuckDB store floats uncompressed in this pack from now on (a setting of the open
    database, not of the file), and rewrite the vectors it stored compressed: those of a pack
    written before, or by a client without the setting. The same values, bit for bit."""
    if con.execute("SELECT 1 FROM duckdb_settings() WHERE name = 'disabled_compression_methods'").fetchone() is None:
        return  # a DuckDB without the setting: vectors stay compressed, recall only slower
    con.execute(f"SET disabled_compression_methods = '{','.join(_FLOAT_COMPRESSIONS)}'")
    if con.execute(_COMPRESSED_VECTORS).fetchone() is not None:
        con.execute("UPDATE prme.node_embeddings SET embedding = embedding WHERE embedding IS NOT NULL")


#: The version of prme.recall_words the pack's node_words were built with.
RECALL_WORDS_VERSION = "1"

# Which of the owner's memories recall may return: not archived or deprecated, in $scopes (NULL: all).
_RECALLABLE = (
    "n.user_id = $user_id AND n.lifecycle_state NOT IN ('archived', 'deprecated') "
    "AND (CAST($scopes AS VARCHAR []) IS NULL OR list_contains(CAST($scopes AS VARCHAR []), n.scope))"
)
# Virtual decay at $as_of (prme.recall's inner level): a memory's age in days, then from it
# (a level of its own: computed once per row) its effective salience and confidence; and the
# score, relevance * (0.5 + 0.25 salience + 0.25 confidence).
_AGE = "prme.age_days(coalesce(n.last_reinforced_at, n.created_at), CAST($as_of AS TIMESTAMPTZ)) AS age_days"
_STRENGTH = (
    "prme.effective_salience(n.salience_base, n.reinforcement_boost, n.decay_profile, n.age_days) "
    "AS effective_salience, "
    "prme.effective_confidence(n.confidence_base, n.decay_profile, n.age_days) AS effective_confidence"
)
_SCORE = (
    "d.relevance * (CAST(0.5 AS DOUBLE) + CAST(0.25 AS DOUBLE) * d.effective_salience "
    "+ CAST(0.25 AS DOUBLE) * d.effective_confidence) AS score"
)
# A hit's columns after its scores (recall_hit).
_HIT_COLUMNS = (
    "id", "namespace", "scope", "kind", "content", "lifecycle_state", "decay_profile", "confidence_base",
    "salience_base", "reinforcement_boost", "last_reinforced_at", "created_at", "updated_at", "version",
)  # fmt: skip
_HIT = ", ".join(f"n.{column}" for column in _HIT_COLUMNS)
# Without a query every recallable memory has relevance 1: the ranking reads the few columns
# it needs, and the rest of each hit's columns are read for the max_count best only. Best
# first, ties by id; the rank is the row's position (recall_hits), not a window.
RECALL_ALL = f"""
SELECT r.score, r.relevance, r.effective_salience, r.effective_confidence, {_HIT}
FROM (
    SELECT d.*, {_SCORE}
    FROM (
        SELECT n.id, CAST(1.0 AS DOUBLE) AS relevance, {_STRENGTH}
        FROM (
            SELECT n.id, n.salience_base, n.reinforcement_boost, n.confidence_base, n.decay_profile, {_AGE}
            FROM prme.nodes AS n
            WHERE {_RECALLABLE}
        ) AS n
    ) AS d
    ORDER BY score DESC, d.id
    LIMIT $max_count
) AS r
JOIN prme.nodes AS n ON n.user_id = $user_id AND n.id = r.id
ORDER BY r.score DESC, r.id
"""
# The contenders ($ids with their $relevances: those that can reach the top, see relevances)
# ranked alike; they are few, so each is read whole at once.
RECALL_CONTENDERS = f"""
SELECT d.score, d.relevance, d.effective_salience, d.effective_confidence, {", ".join(f"d.{c}" for c in _HIT_COLUMNS)}
FROM (
    SELECT d.*, {_SCORE}
    FROM (
        SELECT n.*, {_STRENGTH}
        FROM (
            SELECT c.relevance, {_HIT}, {_AGE}
            FROM (SELECT unnest(CAST($ids AS UUID [])) AS id, unnest(CAST($relevances AS DOUBLE [])) AS relevance) AS c
            JOIN prme.nodes AS n ON n.id = c.id
            WHERE {_RECALLABLE}
        ) AS n
    ) AS d
) AS d
ORDER BY d.score DESC, d.id
LIMIT $max_count
"""
# What recall needs to find its candidates (prme.recall): the owner's memories having any of
# the query's $words (the pack's word index), once with each such word, and those of the owner's
# memories it may not return (archived, deprecated, other scopes), with no word. Two scans
# and no join: those are taken out in Python (_candidates).
CANDIDATES = f"""
SELECT CAST(w.node_id AS VARCHAR), w.word
FROM prme.node_words AS w
WHERE w.user_id = $user_id AND list_contains(CAST($words AS VARCHAR []), w.word)
UNION ALL
SELECT CAST(n.id AS VARCHAR), NULL
FROM prme.nodes AS n
WHERE n.user_id = $user_id AND NOT ({_RECALLABLE})
"""


def _query_facts(
    con: duckdb.DuckDBPyConnection, user_id: str, query: str | None, blank: bool, model_id: str | None
) -> tuple[list[str], int | None, dict[str, int]]:
    """The query's words (none for a blank query; InvalidInput past 1024), the registered
    dimensions of model_id (None: not registered, or no model) and the owner's VECTOR_STATE
    of the model, in one statement."""
    row = con.execute(
        "SELECT prme.recall_words($query), (SELECT m.dimensions FROM prme.embedding_models AS m "
        f"WHERE m.user_id = '*' AND m.model_id = $model_id), {VECTOR_STATE}",
        {"query": None if blank else query, "model_id": model_id, "user_id": user_id},
    ).fetchone()
    assert row is not None
    words: list[str] = row[0] or []
    if len(words) > 1024:
        raise InvalidInput(f"query must have at most 1024 distinct search terms (got {len(words)})")
    return words, None if row[1] is None else int(row[1]), row[2]


def _candidates(
    con: duckdb.DuckDBPyConnection,
    params: dict[str, Any],
    words: list[str],
    vectors: OwnerVectors | None,
    cosines: np.ndarray,
    wanted: int,
) -> tuple[list[tuple[str, str]], list[int]]:
    """The recallable memories having the query's words, each with each such word, and the rows
    of the ``wanted`` recallable memories nearest by inner product (the vectors are unit
    length: the cosine), nearest first, ties by id (prme.recall)."""
    rows = con.execute(
        CANDIDATES, {"user_id": params["user_id"], "scopes": params["scopes"], "words": words}
    ).fetchall()
    left_out = {node_id for node_id, word in rows if word is None}
    matched = [(node_id, word) for node_id, word in rows if word is not None and node_id not in left_out]
    if vectors is None:
        return matched, []
    recallable = cosines.copy()
    recallable[[row for node_id in left_out if (row := vectors.rows.get(node_id)) is not None]] = -np.inf
    return matched, [row for row in vectors.closest(recallable, wanted) if recallable[row] != -np.inf]


def relevances(
    words: list[str],
    matched: list[tuple[str, str]],
    nearest: set[str],
    cosine: Callable[[str], float] | None,
    max_count: int,
) -> dict[str, float]:
    """Recall's relevance of each candidate that can be among the ``max_count`` best
    (prme.recall, sql/postgres/310_recall.sql; docs/RECALL.md, "The score").

    The candidates are the ``matched`` memories (each with each of the query's ``words`` it
    has) and the ``nearest`` by meaning. A word's weight is BM25's idf among the
    candidates; a memory's lexical share is the weight of the query's words it has over the
    weight of all of them; with a query vector (``cosine`` gives any memory's, 0 without a
    vector) relevance = 0.6 lexical + 0.4 max(cosine, 0), else the share alone. A score lies
    between half its relevance and all of it, so a candidate whose relevance is below half
    the ``max_count``-th best cannot be returned: it is left out."""
    candidates = {node_id for node_id, _ in matched} | nearest
    having = Counter(word for _, word in matched)
    weights = {w: math.log(1 + (len(candidates) - having[w] + 0.5) / (having[w] + 0.5)) for w in words}
    total = sum(weights.values())
    shared: dict[str, float] = defaultdict(float)
    for node_id, word in matched:
        shared[node_id] += weights[word]
    relevance: dict[str, float] = {}
    for node_id in candidates:
        share = shared[node_id] / total if node_id in shared else 0.0
        relevance[node_id] = share if cosine is None else 0.6 * share + 0.4 * max(cosine(node_id), 0.0)
    if len(relevance) < max_count:
        return relevance
    floor = 0.5 * heapq.nlargest(max_count, relevance.values())[-1]
    return {node_id: value for node_id, value in relevance.items() if value >= floor}


def recall_hits(rows: list[tuple[Any, ...]]) -> list[RecallHit]:
    """Recall's rows, best first, as hits ranked 1, 2, ... (prme.recall's row_number)."""
    return [recall_hit((rank, *row)) for rank, row in enumerate(rows, 1)]


class RecallOperations(PackConnection):
    _owner_vectors: VectorCache | None = None

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
            model_id = request.embedding_model
            # A model no memory has a vector of yet is not registered (dimensions None): nothing
            # to compare, so words.
            words, dimensions, vector_state = (
                ([], None, {}) if blank and model_id is None else _query_facts(con, user_id, query, blank, model_id)
            )
            vector = None
            if model_id is None or dimensions is not None:
                vector = valid_embedding(con, model_id, request.query_embedding, dimensions)
            if blank:
                return recall_hits(con.execute(RECALL_ALL, params).fetchall())
            if vector is None and not words:
                return []  # only stop words and punctuation, and no vector: nothing can match
            vectors = None
            cosines = np.empty(0, np.float32)
            cosine: Callable[[str], float] | None = None
            if vector is not None:
                assert model_id is not None and dimensions is not None
                vectors = self._vector_cache().vectors(con, user_id, model_id, dimensions, vector_state)
                # einsum, not a BLAS product: OpenBLAS's threads spun on cores DuckDB was using.
                cosines = np.einsum("ij,j->i", vectors.matrix, vector)
                positions = vectors.rows

                def similarity(node_id: str) -> float:
                    row = positions.get(node_id)
                    return 0.0 if row is None else float(cosines[row])

                cosine = similarity
            matched, nearest_rows = _candidates(con, params, words, vectors, cosines, max(100, request.max_count))
            nearest = set() if vectors is None else {vectors.ids[row] for row in nearest_rows}
            contenders = relevances(words, matched, nearest, cosine, request.max_count)
            if not contenders:
                return []
            ranked = con.execute(
                RECALL_CONTENDERS, {**params, "ids": list(contenders), "relevances": list(contenders.values())}
            ).fetchall()
            return recall_hits(ranked)

        # Three statements: the query's words, the model's dimensions and the state of the
        # owner's vectors; the memories having the query's words and those recall may not
        # return; the decay and ranking of those that can reach the top. The nearest are
        # found in memory in between.
        return self.read(work)

    def close(self) -> None:
        super().close()
        self._owner_vectors = None  # up to 256 MB of vectors go with the connection

    def _vector_cache(self) -> VectorCache:
        """This connection's copy of the owners' vectors (embeddings.VectorCache)."""
        if self._owner_vectors is None:
            self._owner_vectors = VectorCache()
        return self._owner_vectors
