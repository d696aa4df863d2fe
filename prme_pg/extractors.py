"""What a learning extractor sees and returns, how one is found, and the built-in one.

A *learning record* is what an agent's stop hook handed over (see docs/LEARNING.md):
a session's items -- messages, the memories shown per turn, confirmations of shown
memories, tool results -- for one owner. An *extractor* turns one record into
:class:`PlannedOperation` s; the learning worker (:mod:`prme_pg.learning`) gives each
a deterministic operation id and hands it to the outbox.

Extractors are plugins: the entry point group ``prme_pg.extractors`` maps a name to
a factory, ``factory(context) -> Extractor`` (a class taking an
:class:`ExtractorContext` is such a factory). prme-pg registers its own as ``builtin``::

    [project.entry-points."prme_pg.extractors"]
    builtin = "prme_pg.extractors:BuiltinExtractor"

This module does no I/O of its own: the built-in extractor asks the database whether
a message is a correction through ``context.is_correction`` (``prme.is_correction``,
the rule lives in SQL), and the caller supplies that function.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib.metadata import entry_points
from typing import Any, Literal, Protocol, runtime_checkable
from uuid import NAMESPACE_URL, UUID, uuid5

from .errors import InvalidInput, PrmeError

__all__ = [
    "ENTRY_POINT_GROUP",
    "LEARNING_NAMESPACE",
    "BuiltinExtractor",
    "Confirmation",
    "ExtractionError",
    "Extractor",
    "ExtractorContext",
    "Item",
    "LearningRecord",
    "Message",
    "PlannedOperation",
    "Shown",
    "ShownMemory",
    "ToolResult",
    "available_extractors",
    "derive_operation_id",
    "item_document",
    "load_extractor",
    "parse_items",
    "remembered_facts",
    "validate_scope",
    "validate_uuid",
]

#: The entry point group extractors are registered in.
ENTRY_POINT_GROUP = "prme_pg.extractors"

#: uuid5 namespace of operation ids derived from learning records:
#: ``uuid5(NAMESPACE_URL, "urn:prme-pg:learning")``.
LEARNING_NAMESPACE = uuid5(NAMESPACE_URL, "urn:prme-pg:learning")


MAX_ITEMS = 10_000
MAX_TEXT_BYTES = 65_536
_SCOPE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


class ExtractionError(PrmeError):
    """An extractor cannot handle a record: the record is rejected with this reason (never retried)."""


# -- the record --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Message:
    """A message of the session. Only ``user`` messages teach the built-in extractor anything."""

    index: int
    role: Literal["user", "assistant", "system", "tool"]
    text: str
    type: Literal["message"] = "message"


@dataclass(frozen=True, slots=True)
class ShownMemory:
    node_id: UUID
    content: str | None = None


@dataclass(frozen=True, slots=True)
class Shown:
    """The memories shown to the agent at the start of a turn; they stay "shown" until the next ``shown`` item."""

    index: int
    memories: tuple[ShownMemory, ...]
    type: Literal["shown"] = "shown"


@dataclass(frozen=True, slots=True)
class Confirmation:
    """The owner explicitly confirmed a memory (e.g. a thumbs-up on it)."""

    index: int
    node_id: UUID
    evidence_id: UUID | None = None
    type: Literal["confirmation"] = "confirmation"


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool call finished; ``used_node_ids`` are the memories the call relied on."""

    index: int
    success: bool
    used_node_ids: tuple[UUID, ...] = ()
    tool: str | None = None
    type: Literal["tool_result"] = "tool_result"


Item = Message | Shown | Confirmation | ToolResult


@dataclass(frozen=True, slots=True)
class LearningRecord:
    """One hook delivery: the owner, the session and its items, in order."""

    record_id: UUID
    user_id: str
    session_id: str
    scope: str
    created_at: datetime
    items: tuple[Item, ...]


def _fail(path: str, message: str) -> InvalidInput:
    return InvalidInput(f"{path} {message}")


def _text(value: object, path: str, *, limit: int = MAX_TEXT_BYTES) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, "must be a non-empty string")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise _fail(path, "must be valid Unicode (no lone surrogates)") from None
    if size > limit:
        raise _fail(path, f"must be at most {limit} bytes of UTF-8 (got {size})")
    if "\x00" in value:  # PostgreSQL text and jsonb cannot hold it
        raise _fail(path, "must not contain NUL characters")
    return value


def validate_uuid(value: object, path: str) -> UUID:
    if not isinstance(value, str) or not _UUID.match(value):
        raise _fail(path, "must be a UUID (8-4-4-4-12 hex)")
    return UUID(value)


def _object(value: object, path: str, required: Sequence[str], optional: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path, "must be a JSON object")
    missing = [key for key in required if key not in value]
    if missing:
        raise _fail(path, f"lacks {', '.join(missing)}")
    unknown = sorted(set(value) - set(required) - set(optional))
    if unknown:
        raise _fail(path, f"has unknown field(s) {', '.join(unknown)}")
    return value


def validate_scope(value: object, path: str = "scope") -> str:
    if not isinstance(value, str) or not _SCOPE.match(value):
        raise _fail(path, "must match ^[a-z][a-z0-9_-]{0,62}$")
    return value


def _parse_item(raw: object, index: int) -> Item:
    path = f"items[{index}]"
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise _fail(path, "must be an object with a type (message, shown, confirmation or tool_result)")
    kind = raw["type"]
    if kind == "message":
        item = _object(raw, path, ("type", "role", "text"), ())
        if item["role"] not in ("user", "assistant", "system", "tool"):
            raise _fail(f"{path}.role", "must be user, assistant, system or tool")
        return Message(index, item["role"], _text(item["text"], f"{path}.text"))
    if kind == "shown":
        item = _object(raw, path, ("type", "memories"), ())
        if not isinstance(item["memories"], list) or len(item["memories"]) > 1000:
            raise _fail(f"{path}.memories", "must be a list of at most 1000 memories")
        memories = []
        for n, memory in enumerate(item["memories"]):
            m = _object(memory, f"{path}.memories[{n}]", ("node_id",), ("content",))
            content = None if m.get("content") is None else _text(m["content"], f"{path}.memories[{n}].content")
            memories.append(ShownMemory(validate_uuid(m["node_id"], f"{path}.memories[{n}].node_id"), content))
        return Shown(index, tuple(memories))
    if kind == "confirmation":
        item = _object(raw, path, ("type", "node_id"), ("evidence_id",))
        evidence = item.get("evidence_id")
        return Confirmation(
            index,
            validate_uuid(item["node_id"], f"{path}.node_id"),
            None if evidence is None else validate_uuid(evidence, f"{path}.evidence_id"),
        )
    if kind == "tool_result":
        item = _object(raw, path, ("type", "success"), ("used_node_ids", "tool"))
        if not isinstance(item["success"], bool):
            raise _fail(f"{path}.success", "must be true or false")
        used = item.get("used_node_ids", [])
        if not isinstance(used, list) or len(used) > 1000:
            raise _fail(f"{path}.used_node_ids", "must be a list of at most 1000 UUIDs")
        tool = item.get("tool")
        return ToolResult(
            index,
            item["success"],
            tuple(validate_uuid(u, f"{path}.used_node_ids[{n}]") for n, u in enumerate(used)),
            None if tool is None else _text(tool, f"{path}.tool", limit=256),
        )
    raise _fail(f"{path}.type", f"is {kind!r}; expected message, shown, confirmation or tool_result")


def parse_items(items: object) -> tuple[Item, ...]:
    """Validate the items of a hook document (InvalidInput naming the first bad field)."""
    if not isinstance(items, list) or not items:
        raise _fail("items", "must be a non-empty list")
    if len(items) > MAX_ITEMS:
        raise _fail("items", f"must hold at most {MAX_ITEMS} items (got {len(items)})")
    return tuple(_parse_item(raw, index) for index, raw in enumerate(items))


def item_document(item: Item) -> dict[str, Any]:
    """The JSON form of an item, as stored in the record (the inverse of ``parse_items``)."""
    if isinstance(item, Message):
        return {"type": "message", "role": item.role, "text": item.text}
    if isinstance(item, Shown):
        return {
            "type": "shown",
            "memories": [
                {"node_id": str(m.node_id)} | ({} if m.content is None else {"content": m.content})
                for m in item.memories
            ],
        }
    if isinstance(item, Confirmation):
        return {"type": "confirmation", "node_id": str(item.node_id)} | (
            {} if item.evidence_id is None else {"evidence_id": str(item.evidence_id)}
        )
    return {"type": "tool_result", "success": item.success, "used_node_ids": [str(u) for u in item.used_node_ids]} | (
        {} if item.tool is None else {"tool": item.tool}
    )


# -- what an extractor returns -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlannedOperation:
    """An operation for the ledger, planned from item ``item_index`` of a record.

    The worker derives its id (:func:`derive_operation_id`) from the record id,
    ``item_index``, ``kind`` and ``part`` (the n-th operation of that kind from that
    item), so re-extracting a record after a crash plans the same ids.
    ``dependencies`` are ids of other operations (derive them the same way).
    """

    kind: str
    payload: Mapping[str, Any]
    item_index: int
    part: int = 0
    dependencies: tuple[UUID, ...] = ()

    def operation_id(self, record_id: UUID) -> UUID:
        return derive_operation_id(record_id, self.item_index, self.kind, self.part)


def derive_operation_id(record_id: UUID | str, item_index: int, kind: str, part: int = 0) -> UUID:
    """``uuid5(LEARNING_NAMESPACE, "<record id>/<item index>/<kind>/<part>")``."""
    return uuid5(LEARNING_NAMESPACE, f"{str(record_id).lower()}/{item_index}/{kind}/{part}")


# -- the interface -----------------------------------------------------------------------------


def _no_correction_detector(messages: Sequence[str]) -> list[bool]:
    raise ExtractionError("this extractor needs a correction detector (run the worker with a database)")


@dataclass(frozen=True)
class ExtractorContext:
    """What the worker gives an extractor factory.

    ``is_correction(messages)`` answers ``prme.is_correction`` for each message, in one
    database round trip; ``options`` are the ``--extractor-option KEY=VALUE`` pairs.
    """

    is_correction: Callable[[Sequence[str]], list[bool]] = _no_correction_detector
    options: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class Extractor(Protocol):
    """Turns one learning record into planned operations; raises :class:`ExtractionError` to reject it.

    It must be deterministic for a record (the worker may extract a record again
    after a crash) and must not write anywhere: the worker delivers what it returns.
    Any other exception is treated as transient: the record is retried later.
    """

    def extract(self, record: LearningRecord) -> list[PlannedOperation]: ...


ExtractorFactory = Callable[[ExtractorContext], Extractor]


def available_extractors() -> list[str]:
    """Names registered in the ``prme_pg.extractors`` entry point group (``builtin`` is always there)."""
    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)} | {"builtin"})


def load_extractor(name: str, context: ExtractorContext | None = None) -> Extractor:
    """Instantiate the extractor registered as ``name`` with ``context``.

    ``builtin`` resolves to :class:`BuiltinExtractor` even when prme-pg runs from a
    source tree whose package metadata has not been (re)installed.
    """
    context = context or ExtractorContext()
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    factory: Any
    if matches:
        factory = matches[0].load()
    elif name == "builtin":
        factory = BuiltinExtractor
    else:
        raise InvalidInput(
            f"no extractor named {name!r} in entry point group {ENTRY_POINT_GROUP} "
            f"(available: {', '.join(available_extractors())})"
        )
    extractor = factory(context)
    if not isinstance(extractor, Extractor):
        raise InvalidInput(f"extractor {name!r} ({factory!r}) did not return an object with extract(record)")
    return extractor


# -- the built-in, deterministic extractor -----------------------------------------------------

# "Remember that X." / "Please remember: X" / "remember X" opening the message or a
# sentence; X runs to the end of its sentence (., ! or ? followed by a blank or the end).
_REMEMBER = re.compile(
    r"(?:^|(?<=[.!?])\s+|\n)\s*(?:(?:please|ok(?:ay)?|also|and)[,]?\s+)?remember"
    r"(?:\s*[:,]\s*|\s+that\s+|\s+)(?P<fact>.+?)\s*(?=[.!?](?:\s|$)|\n|$)",
    re.IGNORECASE,
)


def remembered_facts(text: str) -> list[str]:
    """The facts a message explicitly asks to remember, in order, each as a statement about
    the user (:func:`about_the_user`)."""
    return [about_the_user(m.group("fact").strip()) for m in _REMEMBER.finditer(text) if m.group("fact").strip()]


# The user's own words are first person ("I prefer tabs"); a memory is read later by an agent,
# about the user, so it is stored in the third person ("The user prefers tabs").
_FIRST_PERSON = re.compile(r"\b(I'm|I've|I'd|I'll|I|me|my|mine|myself)\b(?:\s+(\w+(?:'t)?))?(?:\s+(\w+(?:'t)?))?")
_CONTRACTIONS = {"I'm": "the user is", "I've": "the user has", "I'd": "the user would", "I'll": "the user will"}
_POSSESSIVE = {"me": "the user", "my": "the user's", "mine": "the user's", "myself": "themself"}
_IRREGULAR = {"am": "is", "have": "has", "do": "does", "don't": "doesn't", "was": "was", "wasn't": "wasn't"}
_UNCHANGED = {"can", "can't", "could", "couldn't", "will", "won't", "would", "wouldn't", "should", "shouldn't"}
_UNCHANGED |= {"must", "may", "might", "shall", "did", "didn't", "had"}
_ADVERBS = {"always", "never", "usually", "often", "sometimes", "really", "also", "mostly", "generally", "still"}
_ADVERBS |= {"just", "only", "rarely", "now", "mainly"}


def _third_person(verb: str) -> str:
    lower = verb.lower()
    if lower in _IRREGULAR:
        return _IRREGULAR[lower]
    if lower in _UNCHANGED or not lower.isalpha():
        return verb
    if lower.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if len(lower) > 1 and lower.endswith("y") and lower[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def about_the_user(fact: str) -> str:
    """A fact in the user's words as a statement about the user: ``I prefer tabs`` becomes
    ``The user prefers tabs``, ``my editor is vim`` ``The user's editor is vim``. Text with no
    first person is kept as it is."""

    def replace(match: re.Match[str]) -> str:
        word, first, second = match.group(1), match.group(2), match.group(3)
        rest = [w for w in (first, second) if w]
        if word in _CONTRACTIONS:
            return " ".join([_CONTRACTIONS[word], *rest])
        if word in _POSSESSIVE:
            return " ".join([_POSSESSIVE[word], *rest])
        if first is None:  # "I" ends the text
            return "the user"
        if first.lower() in _ADVERBS and second:
            return f"the user {first} {_third_person(second)}"
        return " ".join(["the user", _third_person(first), *rest[1:]])

    text = _FIRST_PERSON.sub(replace, fact)
    return text[0].upper() + text[1:] if text.startswith("the user") else text


class BuiltinExtractor:
    """Deterministic rules (docs/LEARNING.md):

    * a ``user`` message with "remember X" -> ``add_node`` ``{content: X, scope}``;
    * a confirmation of a memory shown earlier in the record -> ``reinforce``
      (its request id is the operation id, so a retry is a replay);
    * a ``user`` message that ``prme.is_correction`` flags -> ``link_correction``
      against the memories of the latest ``shown`` item (none shown: nothing);
    * a successful tool result -> ``record_outcome`` ``implicit_success`` for each
      memory it used.

    The session id is the ``thread_id`` of corrections and outcomes.
    """

    def __init__(self, context: ExtractorContext | None = None) -> None:
        self.context = context or ExtractorContext()

    def extract(self, record: LearningRecord) -> list[PlannedOperation]:
        thread_id = record.session_id[:256]
        # Which user messages are corrections: one question to the database per record,
        # only for messages that have shown memories to be linked against.
        candidates: dict[int, tuple[UUID, ...]] = {}
        turn: tuple[UUID, ...] = ()
        for item in record.items:
            if isinstance(item, Shown):
                turn = tuple(dict.fromkeys(m.node_id for m in item.memories))
            elif isinstance(item, Message) and item.role == "user" and turn:
                candidates[item.index] = turn
        messages = [item for item in record.items if isinstance(item, Message) and item.index in candidates]
        flags = self.context.is_correction([m.text for m in messages]) if messages else []
        if len(flags) != len(messages):
            raise ExtractionError("the correction detector answered for a different number of messages")
        corrections = {m.index for m, flagged in zip(messages, flags, strict=True) if flagged}

        planned: list[PlannedOperation] = []
        shown: set[UUID] = set()
        for item in record.items:
            if isinstance(item, Shown):
                shown.update(m.node_id for m in item.memories)
            elif isinstance(item, Message) and item.role == "user":
                for part, fact in enumerate(remembered_facts(item.text)):
                    planned.append(
                        PlannedOperation("add_node", {"content": fact, "scope": record.scope}, item.index, part)
                    )
                if item.index in corrections:
                    payload = {
                        "message": item.text,
                        "candidate_node_ids": [str(n) for n in candidates[item.index]],
                        "thread_id": thread_id,
                    }
                    planned.append(PlannedOperation("link_correction", payload, item.index))
            elif isinstance(item, Confirmation) and item.node_id in shown:
                payload = {"node_id": str(item.node_id)}
                if item.evidence_id is not None:
                    payload["evidence_id"] = str(item.evidence_id)
                planned.append(PlannedOperation("reinforce", payload, item.index))
            elif isinstance(item, ToolResult) and item.success:
                for part, node_id in enumerate(dict.fromkeys(item.used_node_ids)):
                    payload = {"node_id": str(node_id), "outcome": "implicit_success", "thread_id": thread_id}
                    planned.append(PlannedOperation("record_outcome", payload, item.index, part))
        return planned
