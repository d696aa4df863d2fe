"""Long memories' parts and their vectors: the executor embeds each part before it is validated.

A long ``add_node`` / ``add_memory`` operation is planned into parts by ``prme.run_operations``
(sql/postgres/450_long_memories.sql, docs/LEDGER.md "Long memories"). Each part carries its
embedding state in ``prme.operation_parts``: ``pending`` until a vector by a model is stored
for it (``embedded``) or the model failed on it (``failed``). ``prme-pg worker`` embeds the
pending parts of the operations in flight before each executor call, a batch at a time, each
batch committed: a restarted worker asks again and embeds only the parts still pending. An
executor that embeds (its session sets ``prme.part_embedding_model``) validates only parts
whose embedding is settled; when every part has a vector by one model, the memory is created
with the normalised mean of its parts' vectors as its one vector (docs/RECALL.md, "Long
memories"), so recall finds it by meaning at once and ranks it like any other memory.

:func:`plan_parts` and :func:`pool` are the SQL planner's and pooling's rules in Python (the
bench measures with them; tests compare them with what the database stored).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg

from .backends.postgres import Float4Array
from .embeddings import Embedder, EmbeddingError, Vectors, embed_texts

__all__ = [
    "PART_EMBEDDING_SETTING",
    "PartsEmbedded",
    "embed_pending_parts",
    "plan_parts",
    "pool",
    "use_part_embeddings",
]

#: The session setting that tells the executor which model embeds parts (and so to wait for it).
PART_EMBEDDING_SETTING = "prme.part_embedding_model"

#: words_v1: whitespace (which belongs to the token after it) then a run of anything else.
_TOKEN = re.compile(r"([\t\n\v\f\r ]*)([^\t\n\v\f\r ]+)")

PENDING_SQL = "SELECT user_id, operation_id, part_no, content FROM prme.pending_part_embeddings(%s)"
STORE_SQL = (
    "SELECT stored FROM prme.store_part_embeddings("
    "%s::text, %s::text[], %s::text[], %s::integer[], %s::real[], %s::text[])"
)
REGISTER_SQL = "SELECT vector_search FROM prme.register_embedding_model(%s, %s)"


def plan_parts(content: str, token_budget: int) -> list[tuple[int, int]]:
    """The character ranges (half-open) of the parts ``prme._plan_parts`` cuts ``content`` into."""
    ends = [match.end() for match in _TOKEN.finditer(content)]
    cuts = ends[token_budget - 1 :: token_budget]
    if not cuts or cuts[-1] != ends[-1]:
        cuts.append(ends[-1])
    cuts[-1] = len(content)  # trailing whitespace belongs to the last part
    return list(zip([0, *cuts[:-1]], cuts, strict=True))


def pool(vectors: Vectors) -> Vectors:
    """The normalised mean of unit vectors (one per row), summed in double precision as SQL does."""
    total = np.asarray(vectors, dtype=np.float64).sum(axis=0)
    norm = float(np.linalg.norm(total))
    pooled: Vectors = (total / norm if norm > 0 else total).astype(np.float32)
    return pooled


def use_part_embeddings(conn: psycopg.Connection[Any], embedder: Embedder) -> None:
    """Register the embedder's model and make this session's executor wait for part vectors by it."""
    conn.execute(REGISTER_SQL, (embedder.model_id, embedder.dimensions))
    conn.execute("SELECT pg_catalog.set_config(%s, %s, false)", (PART_EMBEDDING_SETTING, embedder.model_id))


@dataclass(frozen=True, slots=True)
class PartsEmbedded:
    """What one call of :func:`embed_pending_parts` did."""

    embedded: int = 0
    failed: int = 0


def embed_pending_parts(
    conn: psycopg.Connection[Any], embedder: Embedder, *, max_parts: int = 64, stop: threading.Event | None = None
) -> PartsEmbedded:
    """Embed up to ``max_parts`` pending parts of the long memories in flight and store their vectors.

    ``conn`` is in autocommit: the batch is stored in one statement, so a worker killed
    before it loses only this batch's work, and one killed after keeps it (the next call
    asks for what is still pending). A text the model fails on is stored as that part's
    failure (its memory then gets no pooled vector: the embedding worker embeds its whole
    content later); the others are stored.
    """
    if stop is not None and stop.is_set():
        return PartsEmbedded()
    rows = conn.execute(PENDING_SQL, (max_parts,)).fetchall()
    if not rows:
        return PartsEmbedded()
    texts = [str(row[3]) for row in rows]
    errors: list[str | None] = [None] * len(rows)
    try:
        vectors = embed_texts(embedder, texts)
    except EmbeddingError:
        # One bad text fails alone: each text by itself.
        vectors = np.zeros((len(rows), embedder.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            try:
                vectors[row] = embed_texts(embedder, [text])[0]
            except EmbeddingError as exc:
                errors[row] = str(exc)
    conn.execute(
        STORE_SQL,
        (
            embedder.model_id,
            [str(row[0]) for row in rows],
            [str(row[1]) for row in rows],
            [int(row[2]) for row in rows],
            Float4Array(vectors),  # binary: 256 numbers a part are not formatted as text
            errors,
        ),
    )
    failed = sum(error is not None for error in errors)
    return PartsEmbedded(embedded=len(rows) - failed, failed=failed)
