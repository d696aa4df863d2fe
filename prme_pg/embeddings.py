"""Embedders: the models that turn a memory's text into a vector for recall by meaning.

An embedding is derived state (docs/DESIGN.md section 10): computed from a memory's
immutable content by a named model, stored beside the memory with that model's id, never
part of the journaled node. The model runs here, in the client, before the call: the
database only stores and compares vectors.

An :class:`Embedder` has a ``model_id`` (what recall compares: vectors of one model only),
``dimensions`` and ``embed(texts)``, which returns one L2-normalised float32 row per text.
The default is WordLlama's ``l2_supercat`` model, whose weights and tokenizer ship inside
the ``wordllama`` wheel; it is loaded from the wheel's files and never downloads anything.

Other embedders plug in by name (``PRME_EMBEDDER`` or the clients' ``embedder=``): an entry
point in the group ``prme_pg.embedders`` (a factory taking no arguments), or a dotted path
``package.module:factory``. ``wordllama-64`` and ``wordllama-128`` are the same weights cut
to fewer dimensions (the model is Matryoshka-trained): a different model id.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import threading
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from .errors import InvalidInput, PrmeError

__all__ = [
    "DEFAULT_EMBEDDER",
    "EMBEDDER_ENV",
    "ENTRY_POINT_GROUP",
    "MAX_DIMENSIONS",
    "MAX_MODEL_ID_LENGTH",
    "Embedder",
    "EmbedderUnavailable",
    "EmbeddingError",
    "Vector",
    "Vectors",
    "WordLlamaEmbedder",
    "check_model",
    "check_vector",
    "check_vectors",
    "default_embedder",
    "embed_texts",
    "load_embedder",
    "resolve_embedder",
]

ENTRY_POINT_GROUP = "prme_pg.embedders"
EMBEDDER_ENV = "PRME_EMBEDDER"
DEFAULT_EMBEDDER = "wordllama"
#: Bounds of a stored vector and its model's name, the same in SQL (prme._valid_embedding).
MAX_DIMENSIONS = 4096
MAX_MODEL_ID_LENGTH = 200
#: An owner's vectors go into the engine's vector index from this many on: below it, recall's
#: exact scan of them costs about what a search of the index does (docs/RECALL.md, "Scale").
INDEX_MIN_VECTORS = 5000

#: A vector, and vectors one per row: float32, as every backend stores them.
Vector = NDArray[np.float32]
Vectors = NDArray[np.float32]


class EmbeddingError(PrmeError):
    """An embedder failed or returned something that is not one finite vector per text."""

    http_status = 502


class EmbedderUnavailable(PrmeError):
    """The configured embedder cannot be loaded (a package or file is missing)."""

    http_status = 503


@runtime_checkable
class Embedder(Protocol):
    """A model that embeds texts; recall compares only vectors with the same ``model_id``."""

    @property
    def model_id(self) -> str: ...

    @property
    def dimensions(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised float32 row per text, shape ``(len(texts), dimensions)``."""
        ...


# -- the bundled model ----------------------------------------------------------------------

_WORDLLAMA_CONFIG = "l2_supercat"
_WORDLLAMA_DIMENSIONS = (64, 128, 256)
#: Tokens averaged per text: a longer text is represented by its first 8,192 tokens, so one
#: huge text costs bounded memory (a token's row is 1 KB).
MAX_TOKENS = 8192
_BATCH = 256


def _wordllama_files() -> tuple[Path, Path]:
    """The weights and tokenizer inside the installed wheel, found without importing it.

    Importing ``wordllama`` configures the root logger (``logging.basicConfig``) and its
    loader falls back to a download when a file is not where it looks; prme-pg reads the
    two files itself and so does neither.
    """
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise EmbedderUnavailable(
            "the default embedder needs the wordllama package (a dependency of prme-pg): pip install wordllama "
            "(or set PRME_EMBEDDER=none for recall by words only)"
        )
    root = Path(next(iter(spec.submodule_search_locations)))
    weights = root / "weights" / f"{_WORDLLAMA_CONFIG}_256.safetensors"
    tokenizer = root / "tokenizers" / f"{_WORDLLAMA_CONFIG}_tokenizer_config.json"
    for path in (weights, tokenizer):
        if not path.is_file():
            raise EmbedderUnavailable(f"the wordllama package has no {path.name} (looked in {path.parent})")
    return weights, tokenizer


class WordLlamaEmbedder:
    """WordLlama ``l2_supercat``: token embeddings averaged, then L2-normalised.

    About 30,000 texts of 100 characters a second on one core; thread-safe (the tokenizer is only read).
    """

    def __init__(self, dimensions: int = 256) -> None:
        if dimensions not in _WORDLLAMA_DIMENSIONS:
            raise InvalidInput(f"wordllama dimensions must be one of {_WORDLLAMA_DIMENSIONS}, got {dimensions!r}")
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        weights_file, tokenizer_file = _wordllama_files()
        table = load_file(str(weights_file))["embedding.weight"][:, :dimensions]
        self._table: NDArray[np.float32] = np.ascontiguousarray(table, dtype=np.float32)
        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self._dimensions = dimensions

    @property
    def model_id(self) -> str:
        return f"wordllama-{_WORDLLAMA_CONFIG}-{self._dimensions}"

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self._dimensions), dtype=np.float32)
        last = self._table.shape[0] - 1
        # Without character offsets (not needed here): the same ids, in two thirds of the time.
        encode_batch = getattr(self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch)
        for start in range(0, len(texts), _BATCH):
            chunk = list(texts[start : start + _BATCH])
            encodings = encode_batch(chunk, add_special_tokens=False)
            lengths = np.array([min(len(e.ids), MAX_TOKENS) for e in encodings], dtype=np.int64)
            if not lengths.any():
                continue
            ids = np.concatenate([np.asarray(e.ids[:MAX_TOKENS], dtype=np.int64) for e in encodings])
            np.clip(ids, 0, last, out=ids)
            # The mean's direction is the sum's, so no division by the length is needed.
            sums = _token_sums(self._table, ids, lengths)
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
            norms[norms == 0] = 1.0
            out[start : start + len(chunk)] = sums / norms
        return out


def _token_sums(table: NDArray[np.float32], ids: NDArray[np.int64], lengths: NDArray[np.int64]) -> Vectors:
    """Each text's token rows of ``table`` summed (``ids`` end to end, ``lengths`` per text; no
    token: zeros). Texts of one length are summed together, one (texts, length, dimensions)
    gather and one numpy sum: several times faster than np.add.reduceat, which goes one column
    of one text at a time. The order of the additions differs from reduceat's, so a vector may
    differ from the first release's in its last bits (within 1e-6), never in its direction."""
    if len(lengths) == 1 and lengths[0] > 0:  # one text (a question, one memory): its rows summed, the same way
        return cast(Vectors, table[ids].sum(axis=0, keepdims=True))
    sums = np.zeros((len(lengths), table.shape[1]), dtype=np.float32)
    starts = np.cumsum(lengths) - lengths
    for length in np.unique(lengths[lengths > 0]):
        texts = np.flatnonzero(lengths == length)
        sums[texts] = table[ids[starts[texts][:, None] + np.arange(length)]].sum(axis=1)
    return sums


# -- finding an embedder by name ----------------------------------------------------------

_BUILTIN: dict[str, Callable[[], Embedder]] = {
    "wordllama": WordLlamaEmbedder,
    "wordllama-256": WordLlamaEmbedder,
    "wordllama-128": lambda: WordLlamaEmbedder(128),
    "wordllama-64": lambda: WordLlamaEmbedder(64),
}
_loaded: dict[str, Embedder] = {}
_loading = threading.RLock()  # a factory may load another embedder


def load_embedder(name: str) -> Embedder:
    """The embedder named ``name``: built in, an entry point, or ``module:factory``; loaded once."""
    with _loading:
        if name in _loaded:
            return _loaded[name]
        factory: Callable[[], Any]
        matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
        if name in _BUILTIN:
            factory = _BUILTIN[name]
        elif matches:
            factory = matches[0].load()
        elif ":" in name:
            module_name, _, attribute = name.partition(":")
            try:
                factory = getattr(importlib.import_module(module_name), attribute)
            except (ImportError, AttributeError) as exc:
                raise EmbedderUnavailable(f"embedder {name!r} cannot be loaded: {exc}") from exc
        else:
            known = sorted({*_BUILTIN, *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))})
            raise InvalidInput(
                f"no embedder named {name!r} (built in or in entry point group {ENTRY_POINT_GROUP}: "
                f"{', '.join(known)}; or module:factory; or none)"
            )
        embedder = factory()
        if not isinstance(embedder, Embedder):
            raise InvalidInput(f"embedder {name!r} ({factory!r}) has no model_id, dimensions and embed(texts)")
        check_model(embedder.model_id, embedder.dimensions)
        _loaded[name] = embedder
        return embedder


def default_embedder() -> Embedder:
    """The embedder ``PRME_EMBEDDER`` names, else the bundled WordLlama model."""
    embedder = resolve_embedder(None)
    if embedder is None:
        raise EmbedderUnavailable(f"{EMBEDDER_ENV}=none: no embedder is configured")
    return embedder


def resolve_embedder(choice: Embedder | str | bool | None) -> Embedder | None:
    """What the clients' ``embedder=`` means: an embedder, a name, ``False`` (none), ``None`` (configured)."""
    if choice is False:
        return None
    if choice is None or choice is True:
        name = os.environ.get(EMBEDDER_ENV, "").strip() or DEFAULT_EMBEDDER
        return None if name.lower() == "none" else load_embedder(name)
    if isinstance(choice, str):
        return None if choice.lower() == "none" else load_embedder(choice)
    if not isinstance(choice, Embedder):
        raise InvalidInput(f"embedder must be an Embedder, a name, None or False, got {type(choice).__name__}")
    check_model(choice.model_id, choice.dimensions)
    return choice


# -- checking vectors: the same rules as prme._valid_embedding (sql/postgres) -----------------


def check_model(model_id: object, dimensions: object) -> None:
    if not isinstance(model_id, str) or not 1 <= len(model_id) <= MAX_MODEL_ID_LENGTH or not model_id.isprintable():
        raise InvalidInput(f"embedding model id must be 1 to {MAX_MODEL_ID_LENGTH} printable characters")
    if not isinstance(dimensions, int) or isinstance(dimensions, bool) or not 1 <= dimensions <= MAX_DIMENSIONS:
        raise InvalidInput(f"embedding dimensions must be between 1 and {MAX_DIMENSIONS}, got {dimensions!r}")


def check_vector(vector: object, dimensions: int, *, argument: str = "embedding") -> Vector:
    """``vector`` as float32 of ``dimensions`` finite components, else InvalidInput."""
    if isinstance(vector, str | bytes) or not isinstance(vector, Sequence | np.ndarray):
        raise InvalidInput(f"{argument} must be a sequence of numbers")
    if len(vector) != dimensions:
        raise InvalidInput(f"{argument} must have {dimensions} dimensions, got {len(vector)}")
    # What embedders return, a float array or a list of floats, converted at once (a
    # loop over a question's components cost a quarter of a millisecond); anything else
    # component by component, so that a bad one is named.
    if isinstance(vector, np.ndarray) and vector.ndim == 1 and vector.dtype.kind in "fiu":
        values: Sequence[float] | np.ndarray = vector
    elif isinstance(vector, list) and set(map(type, vector)) <= {float}:
        values = vector
    else:
        values = _checked_components(vector, argument)
    with np.errstate(over="ignore"):  # too large for float32 becomes infinity, refused below
        array = np.asarray(values, dtype=np.float32)
    if not np.isfinite(array).all():
        if not np.isfinite(np.asarray(values, dtype=np.float64)).all():
            raise InvalidInput(f"{argument} must hold finite numbers (no NaN or infinity)")
        raise InvalidInput(f"{argument} must hold numbers that fit in 32 bits (no overflow to infinity)")
    return array


def _checked_components(vector: Sequence[object] | np.ndarray, argument: str) -> list[float]:
    values: list[float] = []
    for component in vector:
        if isinstance(component, bool) or not isinstance(component, int | float | np.floating | np.integer):
            raise InvalidInput(f"{argument} must hold numbers only")
        value = float(component)
        if not math.isfinite(value):
            raise InvalidInput(f"{argument} must hold finite numbers (no NaN or infinity)")
        values.append(value)
    return values


def check_vectors(embedder: Embedder, texts: Sequence[str], vectors: object) -> Vectors:
    """What ``embedder.embed(texts)`` returned, checked: one finite row per text, else EmbeddingError."""
    try:
        array = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(f"embedder {embedder.model_id!r} returned no array of numbers: {exc}") from exc
    if array.shape != (len(texts), embedder.dimensions):
        raise EmbeddingError(
            f"embedder {embedder.model_id!r} returned shape {array.shape}, "
            f"expected ({len(texts)}, {embedder.dimensions})"
        )
    if not np.isfinite(array).all():
        raise EmbeddingError(f"embedder {embedder.model_id!r} returned NaN or infinite components")
    return array


def embed_texts(embedder: Embedder, texts: Sequence[str]) -> Vectors:
    """``embedder.embed(texts)``, checked; any failure of the model is an EmbeddingError."""
    if not texts:
        return np.zeros((0, embedder.dimensions), dtype=np.float32)
    try:
        vectors = embedder.embed(list(texts))
    except PrmeError:
        raise
    except Exception as exc:
        raise EmbeddingError(f"embedder {embedder.model_id!r} failed: {type(exc).__name__}: {exc}") from exc
    return check_vectors(embedder, texts, vectors)
