"""prme-pg as LangGraph's long-term memory store: :class:`PrmeStore` and :class:`AsyncPrmeStore`.

Both implement ``langgraph.store.base.BaseStore`` over a :class:`~prme_pg.MemoryClient` /
:class:`~prme_pg.AsyncMemoryClient`, on PostgreSQL or a memory pack alike::

    with PrmeStore.from_conn_string("./memories", user_id="alice") as store:
        store.setup()
        store.put(("prefs",), "editor", {"indent": "tabs"})
        store.get(("prefs",), "editor").value          # {'indent': 'tabs'}

An item is a memory (docs/LANGGRAPH.md has the design and its reasons): each value a
key holds is one node whose content is the item's JSON document, in the store's own
node namespace and scope (``langgraph``); a put of a new value creates the next
version's node and archives the previous one, a delete archives, and every one of
those writes is a journal record. Node ids are derived from (owner, namespace, key,
version), so two writers racing for one key cannot both create the same version: the
engine's primary key decides, and the loser moves on to the next version.

Install with ``pip install 'prme-pg[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, Self, TypeVar, cast

import numpy as np
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path, tokenize_path

from .aio import AsyncMemoryClient
from .backends.postgres import is_dsn
from .client import MAX_TEXT_BYTES, MemoryClient, Target
from .embeddings import MAX_DIMENSIONS, EmbeddingError, Vector, Vectors, embed_texts
from .errors import IdempotencyConflict, InvalidInput, NotFoundError
from .migrations import load_migrations
from .models import Node, RecallHit
from .validation import MAX_JSON_DEPTH, json_depth_exceeds

__all__ = [
    "LANGMEM_OWNER",
    "MAX_ITEM_BYTES",
    "AsyncPrmeStore",
    "OwnerError",
    "OwnerRule",
    "PrmeStore",
]

#: LangMem's convention: memories live in ``("memories", "{user_id}")``; the second label is the owner.
LANGMEM_OWNER: tuple[str, ...] = ("memories", "{user_id}")
#: The largest item document (namespace, key, value and bookkeeping as JSON): a memory's content limit.
MAX_ITEM_BYTES = 65536
#: The node namespace and scope of store items: they never mix with the owner's other memories.
DEFAULT_NODE_NAMESPACE = "langgraph"
#: The node kind of store items.
ITEM_KIND = "item"
#: Memories find_nodes and recall return per call (their max_count bound).
_PAGE = 1000
#: An item document's field holding the lookup words (hashes of its key and namespace prefixes).
_REFS = "refs"
#: Items whose last version a store remembers (then it starts over).
_KNOWN_MAX = 100_000
_ID_SPACE = uuid.UUID("6a0c1f5e-7d44-5b52-9a0e-2f7c8c3e1a34")

OwnerRule = tuple[str, ...] | Callable[[tuple[str, ...]], str | None]


class OwnerError(InvalidInput):
    """An operation whose namespace names no owner, or a search/list that would span owners."""


# -- the item document ---------------------------------------------------------------


def _digest(*parts: object) -> str:
    text = json.dumps(parts, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def key_ref(namespace: tuple[str, ...], key: str) -> str:
    """The word that finds every version of one item (a hash, so recall never ranks by it)."""
    return "k" + _digest(list(namespace), key)


def prefix_ref(prefix: tuple[str, ...]) -> str:
    """The word every item under ``prefix`` carries (one per prefix of its namespace, the empty one too)."""
    return "p" + _digest(list(prefix))


def node_id_for(owner: str, namespace: tuple[str, ...], key: str, version: int) -> uuid.UUID:
    """The node of version ``version`` of an item: derived, so one version is created at most once."""
    return uuid.uuid5(_ID_SPACE, json.dumps([owner, list(namespace), key, version], ensure_ascii=False))


def dump_json(value: object, argument: str = "value") -> str:
    """Compact JSON with sorted keys (key order is not part of a value): the form items are stored in."""
    if json_depth_exceeds(value, MAX_JSON_DEPTH):
        raise InvalidInput(f"{argument} must nest at most {MAX_JSON_DEPTH} levels deep")
    stack: list[object] = [value]
    while stack:  # json.dumps would turn a key 1 into "1": such a value would not come back as it went in
        node = stack.pop()
        if isinstance(node, Mapping):
            bad = next((k for k in node if not isinstance(k, str)), None)
            if bad is not None:
                raise InvalidInput(f"{argument} is not JSON: object keys must be strings, got {bad!r}")
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            f"{argument} is not JSON (objects with string keys, lists, strings, finite numbers, "
            f"booleans and null): {exc}"
        ) from None
    return text


@dataclass(frozen=True, slots=True)
class Version:
    """One stored version of an item: a node and the document in its content."""

    node_id: uuid.UUID
    namespace: tuple[str, ...]
    key: str
    version: int
    value: dict[str, Any]
    index: list[str] | Literal[False] | None
    active: bool
    created_at: datetime
    updated_at: datetime
    first_created_at: datetime

    @property
    def value_json(self) -> str:
        """The value as it is stored (dump_json): what a put compares; computed when asked, as a search never asks."""
        return dump_json(self.value)


def item_content(
    namespace: tuple[str, ...],
    key: str,
    value_json: str,
    version: int,
    created_at: str | None,
    index: list[str] | Literal[False] | None,
) -> str:
    """The memory content of one version: a JSON object with sorted keys."""
    refs = [key_ref(namespace, key)] + [prefix_ref(namespace[:n]) for n in range(len(namespace) + 1)]
    document: dict[str, Any] = {
        "key": key,
        "namespace": list(namespace),
        _REFS: " ".join(refs),
        "version": version,
    }
    if created_at is not None:  # the item's first version's time, carried so history keeps it
        document["created_at"] = created_at
    if index is not None:
        document["index"] = index
    head = json.dumps(document, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    # "value" sorts last: splice its text in unchanged (it is already sorted, compact JSON).
    content = head[:-1] + ',"value":' + value_json + "}"
    size = len(content.encode("utf-8", "surrogatepass"))
    if size > MAX_ITEM_BYTES:
        raise InvalidInput(
            f"the item is {size} bytes as JSON (namespace, key and value); at most {MAX_ITEM_BYTES} are stored"
        )
    try:
        content.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput("value, key and namespace must be valid Unicode text (no lone surrogates)") from None
    return content


def parse_version(
    node_id: uuid.UUID, content: str, lifecycle_state: str, created: datetime, updated: datetime
) -> Version | None:
    """The item version a store node holds; None for content that is not an item document."""
    try:
        document = json.loads(content)
        namespace = tuple(document["namespace"])
        key = document["key"]
        version = int(document["version"])
        value = document["value"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(value, dict) or not isinstance(key, str):
        return None
    first = document.get("created_at")
    return Version(
        node_id=node_id,
        namespace=namespace,
        key=key,
        version=version,
        value=value,
        index=document.get("index"),
        active=lifecycle_state not in ("archived", "deprecated", "superseded"),
        created_at=created,
        updated_at=updated,
        first_created_at=datetime.fromisoformat(first) if isinstance(first, str) else created,
    )


def version_of(node: Node | RecallHit) -> Version | None:
    return parse_version(node.id, node.content, node.lifecycle_state, node.created_at, node.updated_at)


def as_item(version: Version, score: float | None = None, search: bool = False) -> Item:
    if search:
        return SearchItem(
            namespace=version.namespace,
            key=version.key,
            value=version.value,
            created_at=version.first_created_at,
            updated_at=version.updated_at,
            score=score,
        )
    return Item(
        namespace=version.namespace,
        key=version.key,
        value=version.value,
        created_at=version.first_created_at,
        updated_at=version.updated_at,
    )


def latest(versions: Iterable[Version]) -> dict[tuple[tuple[str, ...], str], Version]:
    """The newest active version of each item (while a put runs, its old version is still active briefly)."""
    newest: dict[tuple[tuple[str, ...], str], Version] = {}
    for v in versions:
        if not v.active:
            continue
        slot = (v.namespace, v.key)
        if slot not in newest or newest[slot].version < v.version:
            newest[slot] = v
    return newest


# -- filters -------------------------------------------------------------------------

_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def check_filter(filter: Mapping[str, Any] | None) -> None:
    if filter is None:
        return
    if not isinstance(filter, Mapping):
        raise InvalidInput(f"filter must be a mapping of field to value, got {type(filter).__name__}")
    for field, condition in filter.items():
        if isinstance(condition, Mapping) and any(str(k).startswith("$") for k in condition):
            for operator in condition:
                if operator not in _OPERATORS:
                    raise InvalidInput(
                        f"filter on {field!r}: unsupported operator {operator!r}; use one of " + ", ".join(_OPERATORS)
                    )


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compare(operator: str, have: Any, want: Any) -> bool:
    if operator == "$eq":
        return bool(have == want) and _number(have) == _number(want)
    if operator == "$ne":
        return not _compare("$eq", have, want)
    if _number(have) and _number(want):
        pair: tuple[Any, Any] = (have, want)
    elif isinstance(have, str) and isinstance(want, str):
        pair = (have, want)
    else:
        return False  # an ordering between a number and a text, or of anything else, holds for no item
    a, b = pair
    if operator == "$gt":
        return bool(a > b)
    if operator == "$gte":
        return bool(a >= b)
    if operator == "$lt":
        return bool(a < b)
    return bool(a <= b)


def matches(value: Any, condition: Any) -> bool:
    """Whether a value satisfies a filter condition, as LangGraph's stores read it (operators, nesting)."""
    if isinstance(condition, Mapping):
        if any(str(k).startswith("$") for k in condition):
            return all(_compare(op, value, want) for op, want in condition.items())
        return isinstance(value, dict) and all(matches(value.get(k), v) for k, v in condition.items())
    if isinstance(condition, list | tuple):
        return (
            isinstance(value, list)
            and len(value) == len(condition)
            and all(matches(a, b) for a, b in zip(value, condition, strict=True))
        )
    return _compare("$eq", value, condition)


def passes(version: Version, filter: Mapping[str, Any] | None) -> bool:
    return not filter or all(matches(version.value.get(field), cond) for field, cond in filter.items())


def namespace_matches(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[len(namespace) - len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


# -- owners --------------------------------------------------------------------------


def owner_from(rule: OwnerRule, namespace: tuple[str, ...]) -> str | None:
    """The owner a namespace (or a prefix) names under ``rule``: a template such as
    ``("memories", "{user_id}")`` (literal labels must match; ``"*"`` names no one) or a callable."""
    if callable(rule):
        return rule(namespace)
    if len(namespace) < len(rule):
        return None
    owner: str | None = None
    for want, have in zip(rule, namespace, strict=False):
        if want == "{user_id}":
            if have == "*":
                return None
            owner = have
        elif want != have:
            return None
    return owner


# -- the index ----------------------------------------------------------------------


@dataclass(frozen=True)
class Index:
    """A parsed LangGraph ``index`` config: the embeddings and the fields to embed."""

    dims: int
    embeddings: Any  # langchain_core.embeddings.Embeddings
    fields: tuple[str, ...]
    model_id: str

    @classmethod
    def parse(cls, config: IndexConfig | None) -> Index | None:
        if config is None:
            return None
        if not isinstance(config, Mapping) or "dims" not in config or "embed" not in config:
            raise InvalidInput("index must be a mapping with dims and embed (and optionally fields)")
        dims = config["dims"]
        if isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= MAX_DIMENSIONS:
            raise InvalidInput(f"index dims must be an integer from 1 to {MAX_DIMENSIONS}, got {dims!r}")
        embed = config["embed"]
        if isinstance(embed, str):
            name = embed
        else:
            name = getattr(embed, "model", None) or getattr(embed, "model_name", None) or type(embed).__name__
            if inspect.isfunction(embed) or inspect.ismethod(embed):
                name = f"{embed.__module__}.{embed.__qualname__}"
        fields = tuple(config.get("fields") or ("$",))
        for path in fields:
            tokenize_path(path)  # raises on a malformed path
        return cls(dims=dims, embeddings=ensure_embeddings(embed), fields=fields, model_id=f"langgraph:{name}:{dims}")

    def texts(self, value: dict[str, Any], index: list[str] | Literal[False] | None) -> list[str]:
        """The texts of the fields an item is indexed by, as LangGraph extracts them (``index=False``: none)."""
        if index is False:
            return []
        return fields_text(value, self.fields if index is None else tuple(index))


def fields_text(value: dict[str, Any], paths: Sequence[str]) -> list[str]:
    """The texts at ``paths`` of a value (LangGraph's ``get_text_at_path``; ``"$"``: the value as JSON)."""
    texts: list[str] = []
    for path in paths:
        texts.extend(t for t in get_text_at_path(value, path) if t.strip())
    return texts


def value_text(value: Any) -> str:
    """What a store without an index config embeds: the value's strings (at any depth, keys in sorted
    order), one a line. Not its JSON: braces, quotes and field names every item shares would pull
    every item's vector the same way (the default model averages its tokens)."""
    texts: list[str] = []
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if node.strip():
                texts.append(node)
        elif isinstance(node, Mapping):
            stack.extend(node[k] for k in sorted(node, reverse=True))
        elif isinstance(node, list | tuple):
            stack.extend(reversed(node))
    return "\n".join(texts)


class IndexEmbedder:
    """A LangGraph index's embeddings as a prme :class:`~prme_pg.embeddings.Embedder`.

    Its ``model_id`` (``langgraph:<model>:<dims>``) is what recall compares vectors by: a
    store's vectors never meet another model's. A store writes and recalls through a copy of
    its client with this embedder (``with_embedder``), always passing the vectors it computed
    from the indexed fields and the query, so the client never embeds an item's document.
    """

    def __init__(self, index: Index) -> None:
        self._index = index

    @property
    def model_id(self) -> str:
        return self._index.model_id

    @property
    def dimensions(self) -> int:
        return self._index.dims

    def embed(self, texts: Sequence[str]) -> Vectors:
        rows = [unit_mean([vector], self._index.dims) for vector in self._index.embeddings.embed_documents(list(texts))]
        return np.asarray(rows, dtype=np.float32).reshape(len(rows), self._index.dims)


def unit_mean(vectors: Sequence[Sequence[float]], dims: int) -> Vector:
    """One unit vector for an item from its fields' vectors (prme keeps one vector per memory):
    the mean of their directions."""
    try:
        rows = np.asarray(vectors, dtype=np.float64).reshape(len(vectors), -1)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(f"the index's embed returned something other than vectors of numbers: {exc}") from exc
    if rows.shape[1] != dims:
        raise EmbeddingError(f"the index's embed returned vectors of {rows.shape[1]} dimensions, not {dims}")
    if not np.isfinite(rows).all():
        raise EmbeddingError("the index's embed returned NaN or infinite components")
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    total = (rows / norms).sum(axis=0)
    norm = float(np.linalg.norm(total)) or 1.0
    unit: Vector = (total / norm).astype(np.float32)
    return unit


# -- the store's logic, written once for both clients ---------------------------------
#
# Each operation is a generator that yields client calls, (method name, args, kwargs),
# and receives their results (or has their error thrown in). PrmeStore runs it with a
# MemoryClient, AsyncPrmeStore awaits each call on an AsyncMemoryClient.

Call = tuple[str, tuple[Any, ...], dict[str, Any]]
Plan = Generator[Call, Any, Any]


def _call(name: str, *args: Any, **kwargs: Any) -> Call:
    return (name, args, kwargs)


@dataclass
class _Embedding:
    """A put's vector: computed from its indexed text the first time the put writes a node."""

    value: dict[str, Any]
    index: list[str] | Literal[False] | None
    vector: Vector | None = None
    computed: bool = False


class _Logic:
    """What both stores do, independent of how a client call is made."""

    def __init__(
        self,
        *,
        user_id: str | None,
        owner_rule: OwnerRule,
        index: Index | None,
        node_namespace: str,
    ) -> None:
        if user_id is not None and not isinstance(user_id, str):
            raise InvalidInput(f"user_id must be a string, got {type(user_id).__name__}")
        if not callable(owner_rule) and list(owner_rule).count("{user_id}") != 1:
            raise InvalidInput('owner_rule must be a callable or a tuple of labels with exactly one "{user_id}"')
        self.user_id = user_id
        self.owner_rule = owner_rule
        self.index = index
        self.node_namespace = node_namespace
        #: The version of each item this store wrote or read last: where get and put look first.
        self._known: dict[tuple[str, tuple[str, ...], str], Version] = {}

    # owners

    def owner(self, namespace: tuple[str, ...], what: str) -> str:
        if self.user_id is not None:
            return self.user_id
        owner = owner_from(self.owner_rule, namespace)
        if not owner:
            raise OwnerError(
                f"{what} {namespace!r} names no owner: with no user_id bound, the owner is taken from the namespace "
                f"by the rule {self.owner_rule!r}; give a namespace that names one, or bind user_id"
            )
        return owner

    # reads

    def _versions(self, owner: str, ref: str, states: Sequence[str] | None) -> Plan:
        # The key's word alone: memories near it by meaning are other keys.
        nodes: list[Node] = yield _call(
            "find_nodes",
            ref,
            user_id=owner,
            scopes=[self.node_namespace],
            lifecycle_states=states,
            max_count=_PAGE,
            by_meaning=False,
        )
        versions = [v for n in nodes if n.namespace == self.node_namespace and (v := version_of(n)) is not None]
        return versions, len(nodes) >= _PAGE

    def read_item(self, owner: str, namespace: tuple[str, ...], key: str, states: Sequence[str] | None) -> Plan:
        versions, _ = yield from self._versions(owner, key_ref(namespace, key), states)
        return [v for v in versions if v.namespace == namespace and v.key == key]

    def get(self, op: GetOp) -> Plan:
        owner = self.owner(op.namespace, "namespace")
        slot = (owner, tuple(op.namespace), op.key)
        known = self._known.get(slot)
        if known is not None:  # the version this store saw last: still current while it is active
            with contextlib.suppress(NotFoundError):
                node = yield _call("get_node", known.node_id, user_id=owner)
                fresh = version_of(node)
                if fresh is not None and fresh.active:
                    return as_item(fresh)
        versions = yield from self.read_item(owner, op.namespace, op.key, ["active"])
        current = latest(versions).get((op.namespace, op.key))
        if current is None:
            self._known.pop(slot, None)
            return None
        self._known[slot] = current
        return as_item(current)

    def items_under(self, owner: str, prefix: tuple[str, ...]) -> Plan:
        """Every item's newest active version under ``prefix``, newest change first."""
        versions, full = yield from self._versions(owner, prefix_ref(prefix), ["active"])
        if full:  # more than one call returns: read them all, in pages
            versions = []
            after: uuid.UUID | None = None
            while True:
                page: list[Node] = yield _call(
                    "list_nodes", user_id=owner, namespace=self.node_namespace, after_node_id=after, max_count=10000
                )
                versions.extend(v for n in page if (v := version_of(n)) is not None)
                if len(page) < 10000:
                    break
                after = page[-1].id
        chosen = [v for v in latest(versions).values() if v.namespace[: len(prefix)] == prefix]
        chosen.sort(key=lambda v: (v.updated_at, v.node_id), reverse=True)
        return chosen

    def search(self, op: SearchOp) -> Plan:
        check_filter(op.filter)
        if isinstance(op.limit, bool) or not isinstance(op.limit, int) or op.limit < 0:
            raise InvalidInput(f"limit must be a non-negative integer, got {op.limit!r}")
        if isinstance(op.offset, bool) or not isinstance(op.offset, int) or op.offset < 0:
            raise InvalidInput(f"offset must be a non-negative integer, got {op.offset!r}")
        prefix = tuple(op.namespace_prefix)
        owner = self.owner(prefix, "namespace_prefix")
        if not op.query:
            items = yield from self.items_under(owner, prefix)
            chosen = [v for v in items if passes(v, op.filter)]
            return [as_item(v, search=True) for v in chosen[op.offset : op.offset + op.limit]]
        # The query's vector by the store's model (the index's embed, else the client's
        # embedder): recall ranks by words and meaning. None (no embedder): by words.
        vector = yield _call("_embed_query", op.query)
        kwargs: dict[str, Any] = {} if vector is None else {"query_embedding": vector}
        # Ask recall for twice the page first (each row costs the engine a read and the store
        # a parse), then four times as many each time the prefix and filter left too few, up
        # to all it can give (1,000).
        wanted = op.offset + op.limit
        count = min(_PAGE, max(10, 2 * wanted))
        while True:
            hits: list[RecallHit] = yield _call(
                "recall", op.query, user_id=owner, scopes=[self.node_namespace], max_count=count, **kwargs
            )
            ranked = self._ranked(hits, prefix, op.filter)
            if len(ranked) >= wanted or len(hits) < count or count == _PAGE:
                break
            count = min(_PAGE, 4 * count)
        return ranked[op.offset : op.offset + op.limit]

    def _ranked(self, hits: list[RecallHit], prefix: tuple[str, ...], filter: Mapping[str, Any] | None) -> list[Item]:
        seen: set[tuple[tuple[str, ...], str]] = set()
        ranked: list[Item] = []
        for hit in hits:
            version = version_of(hit) if hit.namespace == self.node_namespace else None
            if version is None or version.namespace[: len(prefix)] != prefix or not passes(version, filter):
                continue
            if (version.namespace, version.key) in seen:
                continue
            seen.add((version.namespace, version.key))
            ranked.append(as_item(version, score=hit.score, search=True))
        return ranked

    def list_namespaces(self, op: ListNamespacesOp) -> Plan:
        conditions = tuple(op.match_conditions or ())
        prefix: tuple[str, ...] = ()
        for condition in conditions:
            if condition.match_type == "prefix":
                lead = []
                for label in condition.path:
                    if label == "*":
                        break
                    lead.append(label)
                if len(lead) > len(prefix):
                    prefix = tuple(lead)
        if self.user_id is None:
            full = next((c for c in conditions if c.match_type == "prefix"), None)
            self.owner(tuple(full.path) if full else (), "list_namespaces prefix")
        owner = self.owner(prefix, "list_namespaces prefix")
        items = yield from self.items_under(owner, prefix)
        found = {v.namespace for v in items if all(namespace_matches(v.namespace, c) for c in conditions)}
        if op.max_depth is not None:
            found = {ns[: op.max_depth] for ns in found}
        return sorted(found)[op.offset : op.offset + op.limit]

    # writes

    def put(self, op: PutOp) -> Plan:
        if op.ttl is not None:
            raise NotImplementedError(_TTL_REFUSED)
        if not isinstance(op.key, str) or not op.key:
            raise InvalidInput(f"key must be a non-empty string, got {op.key!r}")
        namespace = tuple(op.namespace)
        owner = self.owner(namespace, "namespace")
        if op.value is None:
            return (yield from self.delete(owner, namespace, op.key))
        if not isinstance(op.value, Mapping):
            raise InvalidInput(f"value must be a dict (a JSON object), got {type(op.value).__name__}")
        index = op.index
        if index is not None and index is not False:
            if isinstance(index, str) or not all(isinstance(p, str) for p in index):
                raise InvalidInput("index must be False, None or a list of field paths")
            index = list(index)
            for path in index:
                tokenize_path(path)
        value_json = dump_json(dict(op.value))
        item_content(namespace, op.key, value_json, 1, None, index)  # size and text checked before any I/O
        slot = (owner, namespace, op.key)
        embedding = _Embedding(dict(op.value), index)
        known = self._known.get(slot)
        # Fast paths, each of which falls back to the full one when the guess was wrong: a key
        # this store has not seen is tried as version 1; a key it wrote or read last as version n
        # is tried as n + 1. The derived node id makes a wrong guess a conflict, never an overwrite.
        if known is None or known.value_json != value_json or known.index != index:
            try:
                created_at = None if known is None else known.first_created_at.isoformat()
                version = 1 if known is None else known.version + 1
                node = yield from self._add(owner, namespace, op.key, value_json, version, created_at, index, embedding)
            except IdempotencyConflict:
                pass
            else:
                if known is not None:
                    yield from self._archive(owner, known.node_id)
                self._remember(slot, node)
                return None
        versions = yield from self.read_item(owner, namespace, op.key, None)
        current = latest(versions).get((namespace, op.key))
        if current is not None and current.value_json == value_json and current.index == index:
            self._known[slot] = current
            return None  # the same value again (a retry): nothing changes
        version = max((v.version for v in versions), default=0) + 1
        created_at = current.first_created_at.isoformat() if current is not None else None
        older = {v.node_id for v in versions if v.active}
        while True:
            try:
                node = yield from self._add(owner, namespace, op.key, value_json, version, created_at, index, embedding)
                break
            except IdempotencyConflict:
                # Another writer created this version first. The same value: the same put,
                # made concurrently (a retry), and it is done; otherwise ours comes after it.
                node_id = node_id_for(owner, namespace, op.key, version)
                theirs = version_of((yield _call("get_node", node_id, user_id=owner)))
                if theirs is not None and theirs.value_json == value_json and theirs.index == index:
                    return None
                older.add(node_id)
                version += 1
        for old in older:
            yield from self._archive(owner, old)
        self._remember(slot, node)
        return None

    def _add(
        self,
        owner: str,
        namespace: tuple[str, ...],
        key: str,
        value_json: str,
        version: int,
        created_at: str | None,
        index: list[str] | Literal[False] | None,
        embedding: _Embedding,
    ) -> Plan:
        content = item_content(namespace, key, value_json, version, created_at, index)
        if not embedding.computed:  # once per put, and only when it writes
            embedding.vector = yield _call("_embed_value", embedding.value, embedding.index)
            embedding.computed = True
        kwargs: dict[str, Any] = {} if embedding.vector is None else {"embedding": embedding.vector}
        node: Node = yield _call(
            "add_node",
            content,
            user_id=owner,
            scope=self.node_namespace,
            namespace=self.node_namespace,
            kind=ITEM_KIND,
            node_id=node_id_for(owner, namespace, key, version),
            **kwargs,
        )
        return node

    def _remember(self, slot: tuple[str, tuple[str, ...], str], node: Node | None) -> None:
        version = None if node is None else version_of(node)
        if version is None or not version.active:
            self._known.pop(slot, None)
            return
        if len(self._known) >= _KNOWN_MAX:
            self._known.clear()
        self._known[slot] = version

    def delete(self, owner: str, namespace: tuple[str, ...], key: str) -> Plan:
        self._known.pop((owner, namespace, key), None)
        versions = yield from self.read_item(owner, namespace, key, ["active"])
        for v in versions:
            yield from self._archive(owner, v.node_id)
        return None

    def _archive(self, owner: str, node_id: uuid.UUID) -> Plan:
        with contextlib.suppress(NotFoundError):  # archived already (by a concurrent put or delete)
            yield _call("archive_node", node_id, user_id=owner)
        return None

    def plan(self, op: Op) -> Plan:
        validate_op_namespace(op)
        if isinstance(op, GetOp):
            return self.get(op)
        if isinstance(op, PutOp):
            return self.put(op)
        if isinstance(op, SearchOp):
            return self.search(op)
        if isinstance(op, ListNamespacesOp):
            return self.list_namespaces(op)
        raise InvalidInput(f"unknown store operation {type(op).__name__}")


_TTL_REFUSED = (
    "prme-pg stores do not expire items on a clock: a memory is forgotten by decay and a reviewed, journaled "
    "archive, never by a background delete (docs/LANGGRAPH.md, TTL)"
)


def _check_ttl(ttl: TTLConfig | None) -> None:
    if ttl is not None:
        raise NotImplementedError(_TTL_REFUSED)


def _check_query(query: str) -> None:
    """A query recall would refuse is refused before any model runs on it."""
    size = len(query.encode("utf-8", "surrogatepass"))
    if size > MAX_TEXT_BYTES:
        raise InvalidInput(f"query must be at most {MAX_TEXT_BYTES} bytes (got {size} bytes)")


def _migrations_pending(applied: Sequence[str]) -> bool:
    have = set(applied)
    return any(f"{m.version}:{m.sha256}" not in have for m in load_migrations())


def _apply_migrations(dsn: str) -> None:
    import psycopg

    from .migrations import migrate

    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)


def _advance(plan: Plan, result: Any, error: Exception | None) -> tuple[bool, Any]:
    """Send a call's result (or throw its error) into a plan: (True, its next call) or (False, its result)."""
    try:
        return True, (plan.send(result) if error is None else plan.throw(error))
    except StopIteration as done:
        return False, done.value


ClientT = TypeVar("ClientT", MemoryClient, AsyncMemoryClient)


class _Store(BaseStore, Generic[ClientT]):
    """What both stores hold: the client, the owner rule, the index."""

    supports_ttl = False

    def __init__(
        self,
        client: ClientT,
        *,
        user_id: str | None = None,
        owner_rule: OwnerRule = LANGMEM_OWNER,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        node_namespace: str = DEFAULT_NODE_NAMESPACE,
    ) -> None:
        _check_ttl(ttl)
        self.client: ClientT = client
        self.index_config = index
        self._index = Index.parse(index)
        self._logic = _Logic(
            user_id=user_id,
            owner_rule=owner_rule,
            index=self._index,
            node_namespace=node_namespace,
        )
        # Two views of the client, over its connections: one whose model names the store's
        # vectors (the index's embeddings, or the client's own embedder), for the writes and
        # recalls that pass a vector the store computed; one with no embedder for every other
        # call, so a client never embeds an item's document (its lookup hashes, its JSON).
        self._vectors: ClientT = client if self._index is None else client.with_embedder(IndexEmbedder(self._index))
        self._plain: ClientT = client.with_embedder(False)

    def _client_for(self, kwargs: dict[str, Any]) -> ClientT:
        return self._vectors if "embedding" in kwargs or "query_embedding" in kwargs else self._plain

    def _value_vector(self, value: dict[str, Any], index: list[str] | Literal[False] | None) -> Vector | None:
        """A put's vector by the client's own embedder (no index config); None: none to store."""
        if index is False or (embedder := self.client.embedder) is None:
            return None
        text = value_text(value) if index is None else "\n".join(fields_text(value, index))
        if not text.strip():
            return None
        return cast(Vector, embed_texts(embedder, [text])[0])

    def _query_vector(self, query: str) -> Vector | None:
        """A query's vector by the client's own embedder (no index config); None without one."""
        embedder = self.client.embedder
        if embedder is None or not query.strip():
            return None
        _check_query(query)
        return cast(Vector, embed_texts(embedder, [query])[0])


class PrmeStore(_Store[MemoryClient]):
    """LangGraph's ``BaseStore`` over a :class:`~prme_pg.MemoryClient` (PostgreSQL or a memory pack).

    ``user_id`` binds every namespace to one owner; without it the owner is read from the
    namespace by ``owner_rule`` (default LangMem's ``("memories", "{user_id}")``), and an
    operation whose namespace names none is refused (:class:`OwnerError`). ``index`` is
    LangGraph's index config (``dims``, ``embed``, ``fields``). TTL is refused.
    """

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(
        cls,
        target: Target,
        *,
        user_id: str | None = None,
        owner_rule: OwnerRule = LANGMEM_OWNER,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        node_namespace: str = DEFAULT_NODE_NAMESPACE,
        **client_options: Any,
    ) -> Iterator[Self]:
        """A store over a new client on ``target`` (a PostgreSQL URL or a pack folder), closed on exit."""
        _check_ttl(ttl)
        Index.parse(index)  # a bad config is refused before connecting
        with MemoryClient(target, **client_options) as client:
            yield cls(client, user_id=user_id, owner_rule=owner_rule, index=index, node_namespace=node_namespace)

    def setup(self) -> None:
        """Apply prme-pg's pending migrations (PostgreSQL; a superuser or a member of prme_owner) or open
        the pack (created or upgraded on open). Idempotent: with nothing pending it changes nothing."""
        target = self.client.target
        if is_dsn(target):
            _ready, applied = self.client.readiness()
            if _migrations_pending(applied):
                _apply_migrations(target)
        else:
            assert self.client.backend is not None

    def _dispatch(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        index = self._index
        if name == "_embed_query":
            (query,) = args
            if index is None:
                return self._query_vector(query)
            _check_query(query)
            return unit_mean([index.embeddings.embed_query(query)], index.dims)
        if name == "_embed_value":
            if index is None:
                return self._value_vector(*args)
            texts = index.texts(*args)
            return unit_mean(index.embeddings.embed_documents(texts), index.dims) if texts else None
        return getattr(self._client_for(kwargs), name)(*args, **kwargs)

    def _run(self, plan: Plan) -> Any:
        going, value = _advance(plan, None, None)
        while going:
            try:
                result, error = self._dispatch(*value), None
            except Exception as exc:
                result, error = None, exc
            going, value = _advance(plan, result, error)
        return value

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in the order given; one result per operation."""
        return [self._run(self._logic.plan(op)) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread (the client is thread-safe)."""
        return await asyncio.to_thread(self.batch, list(ops))


class AsyncPrmeStore(_Store[AsyncMemoryClient]):
    """LangGraph's ``BaseStore`` over an :class:`~prme_pg.AsyncMemoryClient`; the same rules as :class:`PrmeStore`.

    The sync methods (``get``, ``put``, ...) work from threads other than the event loop's,
    as LangGraph's own async stores do.
    """

    def __init__(self, client: AsyncMemoryClient, **options: Any) -> None:
        super().__init__(client, **options)
        self._loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(
        cls,
        target: Target,
        *,
        user_id: str | None = None,
        owner_rule: OwnerRule = LANGMEM_OWNER,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        node_namespace: str = DEFAULT_NODE_NAMESPACE,
        **client_options: Any,
    ) -> AsyncIterator[Self]:
        """A store over a new async client on ``target``, closed on exit."""
        _check_ttl(ttl)
        Index.parse(index)
        async with AsyncMemoryClient(target, **client_options) as client:
            yield cls(client, user_id=user_id, owner_rule=owner_rule, index=index, node_namespace=node_namespace)

    async def setup(self) -> None:
        """As :meth:`PrmeStore.setup`."""
        target = self.client.target
        if is_dsn(target):
            _ready, applied = await self.client.readiness()
            if _migrations_pending(applied):
                await asyncio.to_thread(_apply_migrations, target)
        else:
            await self.client.open()  # opens (creates, upgrades) the pack

    async def _dispatch(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        index = self._index
        if name == "_embed_query":  # the model runs in a thread: the event loop goes on meanwhile
            (query,) = args
            if index is None:
                return await asyncio.to_thread(self._query_vector, query)
            _check_query(query)
            return unit_mean([await index.embeddings.aembed_query(query)], index.dims)
        if name == "_embed_value":
            if index is None:
                return await asyncio.to_thread(self._value_vector, *args)
            texts = index.texts(*args)
            return unit_mean(await index.embeddings.aembed_documents(texts), index.dims) if texts else None
        return await getattr(self._client_for(kwargs), name)(*args, **kwargs)

    async def _run(self, plan: Plan) -> Any:
        going, value = _advance(plan, None, None)
        while going:
            try:
                result, error = await self._dispatch(*value), None
            except Exception as exc:
                result, error = None, exc
            going, value = _advance(plan, result, error)
        return value

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in the order given; one result per operation."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return [await self._run(self._logic.plan(op)) for op in ops]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`abatch` on the store's event loop, from another thread."""
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if self._loop is None or running is self._loop:
            raise asyncio.InvalidStateError(
                "AsyncPrmeStore's sync methods must be called from a thread other than its event loop's; "
                "use the async ones (aget, aput, asearch, ...) there"
            )
        return asyncio.run_coroutine_threadsafe(self.abatch(list(ops)), self._loop).result()
