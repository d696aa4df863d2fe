"""Recall (sql/postgres/310_recall.sql): the word index of the pack's memories, the ranking,
and their statements."""

from __future__ import annotations

from typing import Any

import duckdb

from ...errors import InvalidInput
from ...models import RecallHit
from ...validation import valid_user_id
from .. import Recall, recall_hit
from .connection import PackConnection
from .embeddings import valid_embedding
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


#: DuckDB's compressions of floats. Recall reads every vector of the owner and model: decoding
#: them took more time than the inner products (docs/PERFORMANCE.md, issue 31); stored plain,
#: the vectors take about a tenth more room in the file.
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
# Hybrid relevance (prme.recall, sql/postgres/310_recall.sql): the candidates are the memories
# sharing a word with the query (node_words) and, given a query vector, the 100 (or max_count)
# nearest by inner product (unit vectors: the cosine), ties by id. A word's weight is BM25's idf
# among the candidates; lexical relevance is the weight of the query's words a memory has over
# the weight of all of them; with a vector, relevance = 0.6 lexical + 0.4 max(cosine, 0).
# {vectors} defines nearest, and with a vector the inner product of each of the owner's vectors
# of the model (scores: read once, for the nearest and for every candidate's similarity).
# Every candidate's strength is computed: pruning by relevance first (a score lies between half
# its relevance and all of it) measured no faster here, even with thousands of candidates.
_HYBRID = """
WITH matched AS (
    SELECT w.node_id AS id, w.word
    FROM prme.node_words AS w
    JOIN prme.nodes AS n ON n.user_id = $user_id AND n.id = w.node_id
    WHERE w.user_id = $user_id AND list_contains(CAST($words AS VARCHAR []), w.word)
      AND n.lifecycle_state NOT IN ('archived', 'deprecated')
      AND (CAST($scopes AS VARCHAR []) IS NULL OR list_contains(CAST($scopes AS VARCHAR []), n.scope))
),
{vectors},
candidates AS (SELECT id FROM matched UNION SELECT id FROM nearest),
weights AS (
    SELECT q.word,
        ln(1 + (CAST((SELECT count(*) FROM candidates) AS DOUBLE) - count(m.id) + 0.5)
            / (CAST(count(m.id) AS DOUBLE) + 0.5)) AS weight
    FROM (SELECT unnest(CAST($words AS VARCHAR [])) AS word) AS q
    LEFT JOIN matched AS m ON m.word = q.word
    GROUP BY q.word
),
lexical AS (
    SELECT m.id, sum(w.weight) / (SELECT sum(a.weight) FROM weights AS a) AS share
    FROM matched AS m JOIN weights AS w ON w.word = m.word
    GROUP BY m.id
),
scored AS (
    SELECT c.id, {relevance} AS relevance
    FROM candidates AS c
    LEFT JOIN lexical AS l ON l.id = c.id{similarity}
)
SELECT r.score, r.relevance, r.effective_salience, r.effective_confidence, n.id, n.namespace, n.scope,
    n.kind, n.content, n.lifecycle_state, n.decay_profile, n.confidence_base, n.salience_base,
    n.reinforcement_boost, n.last_reinforced_at, n.created_at, n.updated_at, n.version
FROM (
    SELECT d.*, d.relevance * (CAST(0.5 AS DOUBLE) + CAST(0.25 AS DOUBLE) * d.effective_salience
        + CAST(0.25 AS DOUBLE) * d.effective_confidence) AS score
    FROM (
        SELECT n.id, CAST(m.relevance AS DOUBLE) AS relevance,
            prme.effective_salience(n.salience_base, n.reinforcement_boost, n.decay_profile, n.age_days)
                AS effective_salience,
            prme.effective_confidence(n.confidence_base, n.decay_profile, n.age_days) AS effective_confidence
        FROM scored AS m
        JOIN (
            SELECT n.id, n.salience_base, n.reinforcement_boost, n.confidence_base, n.decay_profile,
                prme.age_days(coalesce(n.last_reinforced_at, n.created_at), CAST($as_of AS TIMESTAMPTZ)) AS age_days
            FROM prme.nodes AS n
            WHERE n.user_id = $user_id
        ) AS n ON n.id = m.id
    ) AS d
    ORDER BY score DESC, d.id
    LIMIT $max_count
) AS r
JOIN prme.nodes AS n ON n.user_id = $user_id AND n.id = r.id
ORDER BY r.score DESC, r.id
"""
RECALL_WORDS = _HYBRID.format(
    vectors="nearest AS (SELECT CAST(NULL AS UUID) AS id WHERE false)",
    relevance="coalesce(l.share, 0)",
    similarity="",
)
RECALL_HYBRID = _HYBRID.format(
    vectors="""scores AS MATERIALIZED (
    SELECT e.node_id AS id, list_inner_product(e.embedding, CAST($vector AS FLOAT [])) AS cosine
    FROM prme.node_embeddings AS e
    WHERE e.user_id = $user_id AND e.model_id = $model_id AND e.embedding IS NOT NULL
),
nearest AS (
    SELECT s.id
    FROM scores AS s
    WHERE s.id IN (
        SELECT n.id FROM prme.nodes AS n
        WHERE n.user_id = $user_id AND n.lifecycle_state NOT IN ('archived', 'deprecated')
          AND (CAST($scopes AS VARCHAR []) IS NULL OR list_contains(CAST($scopes AS VARCHAR []), n.scope))
    )
    ORDER BY s.cosine DESC, s.id
    LIMIT greatest(100, $max_count)
)""",
    relevance="CAST(0.6 AS DOUBLE) * coalesce(l.share, 0) "
    "+ CAST(0.4 AS DOUBLE) * greatest(coalesce(CAST(s.cosine AS DOUBLE), 0), 0)",
    similarity="\n    LEFT JOIN scores AS s ON s.id = c.id",
)


def _query_facts(
    con: duckdb.DuckDBPyConnection, query: str | None, blank: bool, model_id: str | None
) -> tuple[list[str], int | None]:
    """The query's words (none for a blank query; InvalidInput past 1024) and the registered
    dimensions of model_id (None: not registered, or no model), in one statement."""
    row = con.execute(
        "SELECT prme.recall_words($query), (SELECT m.dimensions FROM prme.embedding_models AS m "
        "WHERE m.user_id = '*' AND m.model_id = $model_id)",
        {"query": None if blank else query, "model_id": model_id},
    ).fetchone()
    assert row is not None
    words: list[str] = row[0] or []
    if len(words) > 1024:
        raise InvalidInput(f"query must have at most 1024 distinct search terms (got {len(words)})")
    return words, None if row[1] is None else int(row[1])


def recall_hits(rows: list[tuple[Any, ...]]) -> list[RecallHit]:
    """Recall's rows, best first, as hits ranked 1, 2, ... (prme.recall's row_number)."""
    return [recall_hit((rank, *row)) for rank, row in enumerate(rows, 1)]


class RecallOperations(PackConnection):
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
            words, dimensions = ([], None) if blank and model_id is None else _query_facts(con, query, blank, model_id)
            vector = None
            if model_id is None or dimensions is not None:
                vector = valid_embedding(con, model_id, request.query_embedding, dimensions)
            if blank:
                rows = con.execute(RECALL_ALL, params).fetchall()
            elif vector is not None:
                params.update(model_id=model_id, vector=vector.tolist())
                rows = con.execute(RECALL_HYBRID, {**params, "words": words}).fetchall()
            elif words:
                rows = con.execute(RECALL_WORDS, {**params, "words": words}).fetchall()
            else:
                return []  # only stop words and punctuation, and no vector: nothing can match
            return recall_hits(rows)

        # The query's words and the model's dimensions (one statement that reads no large
        # table), then one ranking statement.
        return self.read(work)
