"""The embedding worker: vectors for the memories that have none by the configured model.

A memory written without a vector (from psql, by the operations ledger's executor, before
a model change) is recalled by its words at once and by meaning once this has passed. One
pass pages through every owner's recallable memories lacking a vector by the client's
embedder, in batches: embed the batch, store it, go on. It is restartable by construction
(it asks the engine what is still missing) and writes nothing else: a vector is derived
state, never journaled (docs/RECALL.md). A text the model fails on is recorded as a failure
for that memory and the pass goes on; ``retry_failed`` tries those again. Then the vectors
of owners with many are moved into the engine's vector index (PostgreSQL's HNSW index, by
``prme.index_embeddings``; a pack has none), so that their recall does not scan them all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

import numpy as np

from .backends import IndexEmbeddings, ListPendingEmbeddings, RegisterEmbeddingModel, StoreEmbeddings
from .client import MemoryClient
from .embeddings import INDEX_MIN_VECTORS, Embedder, EmbeddingError, Vectors, embed_texts
from .errors import InvalidInput
from .models import EmbeddingStatus, PendingEmbedding

__all__ = ["DEFAULT_BATCH", "INDEX_MIN_VECTORS", "EmbedSummary", "embed_pending", "embedding_status", "index_vectors"]

DEFAULT_BATCH = 1000


@dataclass(frozen=True, slots=True)
class EmbedSummary:
    """What one pass did: vectors stored, failures recorded, what still awaits a vector."""

    model_id: str
    embedded: int
    failed: int
    batches: int
    seconds: float
    pending: int | None  # None when the pass was asked not to count (counting reads every memory)
    vector_search: bool | None
    indexed: int = 0  # vectors moved into the engine's vector index


def _embedder(client: MemoryClient) -> Embedder:
    embedder = client.embedder
    if embedder is None:
        raise InvalidInput("no embedder is configured (PRME_EMBEDDER=none): nothing to embed with")
    return embedder


def embedding_status(client: MemoryClient) -> EmbeddingStatus:
    """The engine's answer for the client's embedder: vector search, registration, pending and failed counts."""
    _embedder(client)
    status = client.embedding_status()
    assert status is not None
    return status


def _vectors(embedder: Embedder, batch: list[PendingEmbedding]) -> tuple[Vectors, list[str | None]]:
    """The batch's vectors; when the model fails on the batch, each text alone, so that one bad text fails alone."""
    texts = [item.content for item in batch]
    try:
        return embed_texts(embedder, texts), [None] * len(batch)
    except EmbeddingError:
        pass
    vectors = np.zeros((len(batch), embedder.dimensions), dtype=np.float32)
    errors: list[str | None] = []
    for row, text in enumerate(texts):
        try:
            vectors[row] = embed_texts(embedder, [text])[0]
            errors.append(None)
        except EmbeddingError as exc:
            errors.append(str(exc))
    return vectors, errors


def index_vectors(
    client: MemoryClient, *, min_vectors: int = INDEX_MIN_VECTORS, stop: threading.Event | None = None
) -> int:
    """Move the vectors by the client's embedder of every owner with ``min_vectors`` or more into the
    engine's vector index, call after call until none is left; how many moved (a pack: none)."""
    model_id = _embedder(client).model_id
    indexed = 0
    while stop is None or not stop.is_set():
        moved = client.backend.execute(IndexEmbeddings(model_id=model_id, min_vectors=min_vectors))
        if not moved:
            break
        indexed += moved
    return indexed


def embed_pending(
    client: MemoryClient,
    *,
    batch_size: int = DEFAULT_BATCH,
    retry_failed: bool = False,
    progress: Callable[[int, int], None] | None = None,
    stop: threading.Event | None = None,
    count: bool = True,
    index: bool = True,
    index_min_vectors: int = INDEX_MIN_VECTORS,
) -> EmbedSummary:
    """One pass over every memory awaiting a vector by the client's embedder; ``progress(done, total)`` per batch.

    ``count=False`` skips counting what awaits a vector before and after (a read of every
    memory: the worker, which passes after each batch it commits, does without).
    ``index=False`` leaves the vector index alone (the worker moves vectors into it less
    often than it embeds); otherwise the vectors of owners with ``index_min_vectors`` or more
    are moved into it after the pass."""
    if not 1 <= batch_size <= 10000:
        raise InvalidInput(f"batch_size must be between 1 and 10000, got {batch_size}")
    if not 1 <= index_min_vectors <= 1_000_000_000:
        raise InvalidInput(f"index_min_vectors must be between 1 and 1000000000, got {index_min_vectors}")
    embedder = _embedder(client)
    started = time.perf_counter()
    backend = client.backend
    backend.execute(RegisterEmbeddingModel(model_id=embedder.model_id, dimensions=embedder.dimensions))
    total = 0
    if count:
        status = embedding_status(client)
        total = status.pending + (status.failed if retry_failed else 0)
    embedded = failed = batches = 0
    after: tuple[str, UUID] | None = None
    while stop is None or not stop.is_set():
        batch = backend.execute(
            ListPendingEmbeddings(
                model_id=embedder.model_id, max_count=batch_size, retry_failed=retry_failed, after=after
            )
        )
        if not batch:
            break
        vectors, errors = _vectors(embedder, batch)
        backend.execute(
            StoreEmbeddings(
                model_id=embedder.model_id,
                dimensions=embedder.dimensions,
                items=tuple((item.user_id, item.node_id) for item in batch),
                vectors=vectors,
                errors=tuple(errors),
            )
        )
        failures = sum(error is not None for error in errors)
        embedded += len(batch) - failures
        failed += failures
        batches += 1
        after = (batch[-1].user_id, batch[-1].node_id)
        if progress is not None:
            progress(embedded + failed, max(total, embedded + failed))
    indexed = index_vectors(client, min_vectors=index_min_vectors, stop=stop) if index else 0
    remaining = embedding_status(client) if count else None
    return EmbedSummary(
        model_id=embedder.model_id,
        embedded=embedded,
        failed=failed,
        batches=batches,
        seconds=time.perf_counter() - started,
        pending=None if remaining is None else remaining.pending,
        vector_search=None if remaining is None else remaining.vector_search,
        indexed=indexed,
    )
