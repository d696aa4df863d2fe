"""Embeddings (sql/postgres/305_embeddings.sql): the registered models, each memory's vector per
model as derived state, and the embedding worker's reads and writes, with the same rules and
messages. Vectors are DuckDB FLOAT lists; recall compares them in memory (OwnerVectors)."""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from ...embeddings import MAX_DIMENSIONS, MAX_MODEL_ID_LENGTH, Vector, Vectors
from ...errors import IdempotencyConflict, InvalidInput
from ...models import EmbeddingStatus, PendingEmbedding
from .. import GetEmbeddingStatus, IndexEmbeddings, ListPendingEmbeddings, RegisterEmbeddingModel, StoreEmbeddings
from .connection import PackConnection

_MAX_ERROR_LENGTH = 2000

INSERT_EMBEDDING = (
    "INSERT INTO prme.node_embeddings (user_id, node_id, model_id, embedding, error, embedded_at) "
    "VALUES ($user_id, $node_id, $model_id, CAST($embedding AS FLOAT []), NULL, $now)"
)
# A memory the recall may return and with no vector by the model (with retry_failed, or only
# a recorded failure), in (user_id, node_id) order after the given one.
_PENDING = """
SELECT n.user_id, n.id, n.content
FROM prme.nodes AS n
WHERE ($after_user_id IS NULL OR (n.user_id, n.id) > ($after_user_id, CAST($after_node_id AS UUID)))
  AND n.lifecycle_state NOT IN ('archived', 'deprecated')
  AND NOT EXISTS (
      SELECT 1 FROM prme.node_embeddings AS e
      WHERE e.user_id = n.user_id AND e.model_id = $model_id AND e.node_id = n.id
        AND (e.embedding IS NOT NULL OR NOT $retry_failed)
  )
ORDER BY n.user_id, n.id
LIMIT $max_count
"""
_BATCH = """
SELECT unnest(CAST($user_ids AS VARCHAR [])) AS user_id, unnest(CAST($node_ids AS UUID [])) AS node_id,
    unnest(CAST($vectors AS FLOAT [] [])) AS embedding, unnest(CAST($errors AS VARCHAR [])) AS error
"""
_FORGET_FAILURES = f"""
DELETE FROM prme.node_embeddings AS e
USING ({_BATCH}) AS i
WHERE e.user_id = i.user_id AND e.node_id = i.node_id AND e.model_id = $model_id AND e.embedding IS NULL
"""
# The batch's memories that exist and have no vector yet, each once.
_STORE = f"""
INSERT INTO prme.node_embeddings (user_id, node_id, model_id, embedding, error, embedded_at)
SELECT i.user_id, i.node_id, $model_id, CASE WHEN i.error IS NULL THEN i.embedding END, i.error, $now
FROM ({_BATCH}) AS i
WHERE EXISTS (SELECT 1 FROM prme.nodes AS n WHERE n.user_id = i.user_id AND n.id = i.node_id)
  AND NOT EXISTS (
      SELECT 1 FROM prme.node_embeddings AS e
      WHERE e.user_id = i.user_id AND e.model_id = $model_id AND e.node_id = i.node_id
  )
QUALIFY row_number() OVER (PARTITION BY i.user_id, i.node_id) = 1
"""
_STATUS = """
SELECT
    (SELECT count(*) FROM prme.nodes AS n
     WHERE n.lifecycle_state NOT IN ('archived', 'deprecated')
       AND NOT EXISTS (
           SELECT 1 FROM prme.node_embeddings AS e
           WHERE e.user_id = n.user_id AND e.model_id = $model_id AND e.node_id = n.id
       )),
    (SELECT count(*) FROM prme.node_embeddings AS e WHERE e.model_id = $model_id AND e.error IS NOT NULL)
"""


# A batch's vectors reach DuckDB as one registered NumPy array, not as Python lists: DuckDB's
# Python binding converts a list of lists value by value (1,000 vectors of 256 floats: ~0.4 s
# to bind), while it scans an array's columns as they are. DuckDB reads a 2-D array as one
# column per row of the array, so the array is three rows long: each component's vector
# (its row in the batch), its place in the vector, and its value -- all exact in float32 up
# to 2**24 -- and SQL gathers each vector's components in order. 100 vectors of 256 floats:
# ~7 ms; 1,000: ~30 ms. (One column per component, gathered by a list of 256 column names,
# measured ~15 ms for 100 vectors: a longer statement to bind.)
_VECTORS_VIEW = "prme_batch_vectors"
_VECTORS_QUERY = (
    "SELECT CAST(column0 AS INTEGER) AS i, list(column2 ORDER BY column1) AS embedding "
    f"FROM {_VECTORS_VIEW} GROUP BY column0"
)


@contextlib.contextmanager
def vector_rows(con: duckdb.DuckDBPyConnection, vectors: Vectors) -> Iterator[str]:
    """``vectors`` (one float32 row each) as a query of ``(i, embedding)``: ``i`` the vector's
    row (0-based), ``embedding`` its ``FLOAT[]``, for the length of the ``with`` block."""
    count, dimensions = vectors.shape
    if max(count, dimensions) > 1 << 24:
        raise InvalidInput("too many vectors or dimensions in one batch")
    columns = np.empty((3, count * dimensions), dtype=np.float32)
    columns[0] = np.repeat(np.arange(count, dtype=np.float32), dimensions)
    columns[1] = np.tile(np.arange(dimensions, dtype=np.float32), count)
    columns[2] = vectors.ravel()
    con.register(_VECTORS_VIEW, columns)
    try:
        yield _VECTORS_QUERY
    finally:
        # After a failed statement the transaction's ROLLBACK drops the view.
        with contextlib.suppress(duckdb.Error):
            con.unregister(_VECTORS_VIEW)


# -- an owner's vectors in memory, for recall -----------------------------------------------
#
# Recall compares the question with every vector of the owner and model. Read from DuckDB on
# every call, that cost more than the rest of the ranking (issue 31); the pack keeps them in
# memory instead, one float32 matrix per owner and model, as long as the connection is open.
#
# What makes the copy safe to reuse: a stored vector is never changed or deleted (a memory's
# content never changes; store_embeddings keeps a vector and replaces only a recorded failure;
# nothing deletes a memory of a pack). So an owner's set of vectors only grows, every vector
# the copy holds is still stored, and when the copy holds as many as the table, it holds them
# all. Each recall reads that count and the last rowid (VECTOR_STATE, in the statement it
# needs anyway) and reads only the vectors stored since, whoever wrote them: no write path has
# to tell the copy anything.

#: The number and the last rowid of an owner's vectors of a model ($user_id, $model_id).
VECTOR_STATE = (
    "(SELECT {'count': count(*), 'last_rowid': coalesce(max(e.rowid), -1)} FROM prme.node_embeddings AS e "
    "WHERE e.user_id = $user_id AND e.model_id = $model_id AND e.embedding IS NOT NULL)"
)
_VECTORS_AFTER = (
    "SELECT CAST(e.node_id AS VARCHAR) AS node_id, e.embedding FROM prme.node_embeddings AS e "
    "WHERE e.user_id = $user_id AND e.model_id = $model_id AND e.embedding IS NOT NULL AND e.rowid > $after"
)
#: Memory the copies may take (all owners and models of one connection); the owner asked
#: last is kept whatever its size. 4 bytes a dimension: 10 MB for 10,000 vectors of 256.
VECTOR_CACHE_BYTES = 256 << 20


@dataclass
class OwnerVectors:
    """One owner's vectors of one model: ``matrix[i]`` is the vector of memory ``ids[i]``
    (ids as DuckDB writes UUIDs: lower-case hex, whose order is the UUIDs' order)."""

    dimensions: int
    ids: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    buffer: np.ndarray = field(init=False)
    last_rowid: int = -1

    def __post_init__(self) -> None:
        self.buffer = np.empty((0, self.dimensions), np.float32)

    @property
    def matrix(self) -> np.ndarray:
        return self.buffer[: len(self.ids)]

    @property
    def nbytes(self) -> int:
        return int(self.buffer.nbytes)

    def add(self, ids: list[str], vectors: np.ndarray) -> None:
        """Append the vectors of memories not held yet (in place, the buffer doubling)."""
        new = [i for i, node_id in enumerate(ids) if node_id not in self.rows]
        count = len(self.ids)
        if count + len(new) > len(self.buffer):
            grown = np.empty((max(count + len(new), 2 * len(self.buffer)), self.dimensions), np.float32)
            grown[:count] = self.matrix
            self.buffer = grown
        self.buffer[count : count + len(new)] = vectors[new]
        for offset, i in enumerate(new):
            self.rows[ids[i]] = count + offset
            self.ids.append(ids[i])

    def closest(self, cosines: np.ndarray, count: int) -> list[int]:
        """The rows of the ``count`` largest ``cosines``, largest first, ties by id."""
        if count < len(cosines):
            kth = np.partition(cosines, len(cosines) - count)[len(cosines) - count]
            rows = np.flatnonzero(cosines >= kth)  # more than count on a tie at the last place
        else:
            rows = np.arange(len(cosines))
        ranked = sorted(zip((-cosines[rows]).tolist(), (self.ids[row] for row in rows), rows.tolist(), strict=True))
        return [row for _, _, row in ranked[:count]]


class VectorCache:
    """Each owner's vectors of each model, in memory while the pack is open (the note above)."""

    def __init__(self, max_bytes: int = VECTOR_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._owners: OrderedDict[tuple[str, str], OwnerVectors] = OrderedDict()

    def vectors(
        self, con: duckdb.DuckDBPyConnection, user_id: str, model_id: str, dimensions: int, state: dict[str, int]
    ) -> OwnerVectors:
        """The owner's vectors as stored now; ``state`` is VECTOR_STATE read by the caller."""
        key = (user_id, model_id)
        owner = self._owners.pop(key, None)
        if owner is None or owner.dimensions != dimensions or len(owner.ids) > state["count"]:
            owner = OwnerVectors(dimensions)
        if len(owner.ids) < state["count"] or owner.last_rowid != state["last_rowid"]:
            _read_vectors(con, owner, user_id, model_id, owner.last_rowid)
            if len(owner.ids) != state["count"]:
                # Rows renumbered (DuckDB compacts a table with deletions when it checkpoints):
                # read them all again.
                owner = OwnerVectors(dimensions)
                _read_vectors(con, owner, user_id, model_id, -1)
            owner.last_rowid = state["last_rowid"]
        self._owners[key] = owner
        while len(self._owners) > 1 and sum(o.nbytes for o in self._owners.values()) > self.max_bytes:
            self._owners.popitem(last=False)
        return owner


def _read_vectors(con: duckdb.DuckDBPyConnection, owner: OwnerVectors, user_id: str, model_id: str, after: int) -> None:
    rows = con.execute(_VECTORS_AFTER, {"user_id": user_id, "model_id": model_id, "after": after}).fetchnumpy()
    if len(rows["node_id"]):
        owner.add(list(rows["node_id"]), np.stack(list(rows["embedding"])).astype(np.float32, copy=False))


def _model_dimensions(con: duckdb.DuckDBPyConnection, model_id: str) -> int:
    row = con.execute(
        "SELECT dimensions FROM prme.embedding_models WHERE user_id = '*' AND model_id = $model_id",
        {"model_id": model_id},
    ).fetchone()
    if row is None:
        raise InvalidInput(
            f"unknown embedding model '{model_id[:MAX_MODEL_ID_LENGTH]}': register it first with "
            "register_embedding_model(model_id, dimensions)"
        )
    return int(row[0])


def register_first_vector(
    con: duckdb.DuckDBPyConnection, model_id: str | None, embedding: Vector | None, now: object
) -> None:
    """A model's first vector registers it with its dimensions (prme.add_node does the same)."""
    if embedding is None or model_id is None:
        return
    known = con.execute(
        "SELECT 1 FROM prme.embedding_models WHERE user_id = '*' AND model_id = $model_id", {"model_id": model_id}
    ).fetchone()
    if known is None:
        dimensions = int(np.size(embedding))
        if not 1 <= dimensions <= MAX_DIMENSIONS:
            raise InvalidInput(f"embedding dimensions must be between 1 and {MAX_DIMENSIONS}")
        con.execute(
            "INSERT INTO prme.embedding_models (user_id, model_id, dimensions, created_at) "
            "VALUES ('*', $model_id, $dimensions, $now)",
            {"model_id": _valid_model_id(model_id), "dimensions": dimensions, "now": now},
        )


def valid_embedding(
    con: duckdb.DuckDBPyConnection, model_id: str | None, embedding: Vector | None, dimensions: int | None = None
) -> Vector | None:
    """prme._valid_embedding: the vector if it fits its registered model, else InvalidInput; None stays None.
    ``dimensions``: the model's, when the caller has read them already."""
    if embedding is None:
        return None
    if model_id is None:
        raise InvalidInput("an embedding needs its embedding_model")
    if dimensions is None:
        dimensions = _model_dimensions(con, model_id)
    vector = np.asarray(embedding, dtype=np.float32)
    if vector.ndim != 1 or vector.size != dimensions:
        raise InvalidInput(f"embedding must have {dimensions} dimensions for model '{model_id}'")
    if not np.isfinite(vector).all():
        raise InvalidInput("embedding must hold finite numbers (no NULL, NaN or infinity)")
    return vector


def _valid_model_id(model_id: object) -> str:
    if (
        not isinstance(model_id, str)
        or not 1 <= len(model_id) <= MAX_MODEL_ID_LENGTH
        or any(not character.isprintable() for character in model_id)
    ):
        raise InvalidInput(f"embedding model id must be 1 to {MAX_MODEL_ID_LENGTH} characters, no control characters")
    return model_id


class EmbeddingOperations(PackConnection):
    def register_embedding_model(self, request: RegisterEmbeddingModel) -> bool:
        model_id = _valid_model_id(request.model_id)
        dimensions = request.dimensions
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or not 1 <= dimensions <= MAX_DIMENSIONS:
            raise InvalidInput(f"embedding dimensions must be between 1 and {MAX_DIMENSIONS}")

        def work(con: duckdb.DuckDBPyConnection) -> bool:
            con.execute(
                "INSERT INTO prme.embedding_models (user_id, model_id, dimensions, created_at) "
                "VALUES ('*', $model_id, $dimensions, $now) ON CONFLICT DO NOTHING",
                {"model_id": model_id, "dimensions": dimensions, "now": self._clock()},
            )
            registered = _model_dimensions(con, model_id)
            if registered != dimensions:
                raise IdempotencyConflict(
                    f"embedding model '{model_id}' is registered with {registered} dimensions, not {dimensions}"
                )
            return True  # a pack always searches by meaning

        return self.run(work)

    def pending_embeddings(self, request: ListPendingEmbeddings) -> list[PendingEmbedding]:
        if not isinstance(request.max_count, int) or not 1 <= request.max_count <= 10000:
            raise InvalidInput("max_count must be between 1 and 10000")
        params: dict[str, Any] = {
            "model_id": request.model_id,
            "max_count": request.max_count,
            "retry_failed": bool(request.retry_failed),
            "after_user_id": None if request.after is None else request.after[0],
            "after_node_id": None if request.after is None else request.after[1],
        }
        rows = self.read(lambda con: con.execute(_PENDING, params).fetchall())
        return [PendingEmbedding(*row) for row in rows]

    def store_embeddings(self, request: StoreEmbeddings) -> int:
        count = len(request.items)
        if count > 10000:
            raise InvalidInput("at most 10000 embeddings per call")
        if len(request.errors) != count:
            raise InvalidInput("errors must have one entry per node_id")

        def work(con: duckdb.DuckDBPyConnection) -> int:
            dimensions = _model_dimensions(con, request.model_id)
            if count == 0:
                return 0
            vectors = np.asarray(request.vectors, dtype=np.float32)
            if vectors.shape != (count, dimensions):
                raise InvalidInput(f"embeddings must hold {count} vectors of {dimensions} numbers, one after another")
            if not np.isfinite(vectors).all():
                raise InvalidInput("embeddings must hold finite numbers (no NULL, NaN or infinity)")
            batch = {
                "model_id": request.model_id,
                "user_ids": [user_id for user_id, _ in request.items],
                "node_ids": [node_id for _, node_id in request.items],
                "vectors": vectors.tolist(),
                "errors": [None if error is None else error[:_MAX_ERROR_LENGTH] for error in request.errors],
                "now": self._clock(),
            }
            # A recorded failure is replaced (delete, then insert: DuckDB stores an update of a
            # LIST column that way anyway); a vector is kept (its content never changes).
            con.execute(_FORGET_FAILURES, {key: value for key, value in batch.items() if key != "now"})
            row = con.execute(_STORE, batch).fetchone()
            return 0 if row is None else int(row[0])

        return self.run(work)

    def embedding_status(self, request: GetEmbeddingStatus) -> EmbeddingStatus:
        def work(con: duckdb.DuckDBPyConnection) -> EmbeddingStatus:
            model = con.execute(
                "SELECT dimensions FROM prme.embedding_models WHERE user_id = '*' AND model_id = $model_id",
                {"model_id": request.model_id},
            ).fetchone()
            counts = con.execute(_STATUS, {"model_id": request.model_id}).fetchone()
            assert counts is not None
            return EmbeddingStatus(
                model_id=request.model_id,
                vector_search=True,
                registered=model is not None,
                dimensions=None if model is None else int(model[0]),
                pending=int(counts[0]),
                failed=int(counts[1]),
            )

        return self.read(work)

    def index_embeddings(self, request: IndexEmbeddings) -> int:
        """A pack has no vector index (its recall compares every vector of the owner, in memory): the
        arguments are checked as PostgreSQL checks them, and nothing moves."""
        if not 1 <= request.min_vectors <= 1_000_000_000:
            raise InvalidInput("min_vectors must be between 1 and 1000000000")
        if not 1 <= request.max_count <= 100_000:
            raise InvalidInput("max_count must be between 1 and 100000")
        self.read(lambda con: _model_dimensions(con, request.model_id))
        return 0
