"""Bulk import and export of memories as JSON Lines (docs/IMPORT.md).

One memory per line. :func:`parse_line` reads a line of one of the formats -- prme's own
(``prme``, what :func:`export_lines` writes), LangGraph store items (``langgraph``) and
mem0's exported memories (``mem0``) -- into an :class:`ImportLine`: the owner, a
:class:`~prme_pg.backends.NodeItem` and its external id. :func:`import_lines` streams
them into a client in ``add_nodes`` batches (one transaction each), so memory stays
bounded whatever the file's size, and a run again after an interruption writes only
what is missing: each node id derives from the line's external id, and an item whose
node id is stored already is a replay.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import IO, Any, LiteralString, Protocol, TypeVar

from .backends import MAX_BATCH_ITEMS, AddNodes, NodeItem, SyncBackend
from .backends.duckdb import DuckDBBackend
from .backends.postgres import ADD_NODES, PostgresBackend, statement, translate_errors
from .client import NODE_ITEM_FIELDS, add_nodes_request, node_item
from .embeddings import Embedder
from .errors import IdempotencyConflict, InvalidInput
from .journal import canonical_json
from .models import JournalRecord, Node
from .validation import UUID_TEXT, loads_strict, valid_user_id

T = TypeVar("T")

__all__ = [
    "FORMATS",
    "IMPORT_NAMESPACE",
    "MAX_LINE_BYTES",
    "ImportLine",
    "ImportSummary",
    "LineError",
    "export_line",
    "export_lines",
    "import_lines",
    "node_id_for",
    "parse_line",
    "read_lines",
]

FORMATS = ("prme", "langgraph", "mem0")

#: The namespace of the version 5 UUIDs that turn external ids that are not UUIDs into node ids.
IMPORT_NAMESPACE = uuid.UUID("5b0a3f52-6c1e-4f0e-9d57-7072696d6531")

#: A line holds one memory: content is at most 64 KiB, an exported journal adds its records.
MAX_LINE_BYTES = 16 * 1024 * 1024

#: Memories held in buffers at most, over all owners, before the largest buffer is written.
MAX_BUFFERED = 10 * MAX_BATCH_ITEMS

#: A line of the prme format: a batch item's fields, the external id, the owner, and what an
#: export adds (state, journal), which an import ignores.
_PRME_FIELDS = NODE_ITEM_FIELDS - {"node_id"} | {"id", "user_id", "state", "journal"}
_SLUG = re.compile(r"[a-z][a-z0-9_-]{0,62}")


class LineError(InvalidInput):
    """A line that cannot be imported: its number (1-based) and why."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.reason = message


@dataclass(frozen=True, slots=True)
class ImportLine:
    line: int
    user_id: str
    external_id: str
    item: NodeItem


@dataclass
class ImportSummary:
    """What an import did: lines read, memories created and replayed (stored by an earlier
    run), and the lines skipped with ``skip_invalid`` (line number and reason)."""

    format: str
    lines: int = 0
    created: int = 0
    replayed: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    owners: set[str] = field(default_factory=set)
    seconds: float = 0.0

    def to_document(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "lines": self.lines,
            "created": self.created,
            "replayed": self.replayed,
            "skipped": self.skipped,
            "owners": len(self.owners),
            "seconds": round(self.seconds, 3),
            "memories_per_second": round((self.created + self.replayed) / self.seconds, 1) if self.seconds else None,
        }


def node_id_for(external_id: str) -> uuid.UUID:
    """The node id of an external id: the id itself when it is a UUID (an exported memory, a
    mem0 id), else a version 5 UUID of it in :data:`IMPORT_NAMESPACE` -- the same every run."""
    if UUID_TEXT.fullmatch(external_id):
        return uuid.UUID(external_id)
    return uuid.uuid5(IMPORT_NAMESPACE, external_id)


def _time(name: str, value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a time as ISO 8601 text")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"{name} must be a time as ISO 8601 text, got {value[:40]!r}") from None
    if parsed.utcoffset() is None:
        raise InvalidInput(f"{name} must have a time zone (Z or +hh:mm), got {value[:40]!r}")
    return parsed


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string")
    return value


def _slug_or(value: object, default: str) -> str:
    """value when it is a valid scope/namespace/kind, else the default (adapters only)."""
    return value if isinstance(value, str) and _SLUG.fullmatch(value) else default


def _prme(doc: Mapping[str, Any], default_user: str | None) -> tuple[str | None, str, dict[str, Any]]:
    unknown = sorted(set(doc) - _PRME_FIELDS)
    if unknown:
        raise InvalidInput(f"unknown field {unknown[0]!r}")
    content = _text("content", doc.get("content"))
    external = doc.get("id")
    if external is None:
        # No id: the memory's own words and place stand for it, so a run again still replays it.
        external = "content:" + canonical_json([content, doc.get("scope"), doc.get("namespace"), doc.get("kind")])
    item: dict[str, Any] = {"content": content}
    for name in ("scope", "namespace", "kind", "stability", "decay_profile"):
        if doc.get(name) is not None:
            item[name] = doc[name]
    for name in ("confidence_base", "salience_base"):
        if doc.get(name) is not None:
            item[name] = doc[name]
    if "next_review_at" in doc:  # null: no review schedule; absent: one cadence ahead
        item["next_review_at"] = _time("next_review_at", doc["next_review_at"])
    item["created_at"] = _time("created_at", doc.get("created_at"))
    return doc.get("user_id", default_user), _text("id", external), item


def _langgraph_content(value: object) -> str:
    """A store item's text: value.content (LangMem keeps {"content": {"content": ...}}), else
    value.memory or value.text, else the whole value as RFC 8785 JSON (nothing is lost)."""
    if isinstance(value, Mapping):
        content = value.get("content")
        if isinstance(content, Mapping) and isinstance(content.get("content"), str):
            return str(content["content"])
        for name in ("content", "memory", "text"):
            if isinstance(value.get(name), str):
                return str(value[name])
    return canonical_json(value)


def _langgraph(doc: Mapping[str, Any], default_user: str | None) -> tuple[str | None, str, dict[str, Any]]:
    namespace, key = doc.get("namespace"), doc.get("key")
    if not isinstance(namespace, list) or not all(isinstance(part, str) for part in namespace):
        raise InvalidInput("namespace must be a list of strings (a LangGraph store item)")
    key = _text("key", key)
    if "value" not in doc:
        raise InvalidInput("value is missing (a LangGraph store item)")
    item: dict[str, Any] = {
        "content": _langgraph_content(doc["value"]),
        "namespace": _slug_or(namespace[0] if namespace else None, "default"),
        "created_at": _time("created_at", doc.get("created_at")),
    }
    return default_user, "langgraph:" + canonical_json([namespace, key]), item


def _mem0(doc: Mapping[str, Any], default_user: str | None) -> tuple[str | None, str, dict[str, Any]]:
    item: dict[str, Any] = {
        "content": _text("memory", doc.get("memory")),
        "created_at": _time("created_at", doc.get("created_at")),
    }
    _time("updated_at", doc.get("updated_at"))  # checked; the import's own time is the memory's updated_at
    return doc.get("user_id") or default_user, _text("id", doc.get("id")), item


_ADAPTERS: dict[str, Callable[[Mapping[str, Any], str | None], tuple[str | None, str, dict[str, Any]]]] = {
    "prme": _prme,
    "langgraph": _langgraph,
    "mem0": _mem0,
}


def parse_line(text: str | bytes, line: int, format: str = "prme", default_user: str | None = None) -> ImportLine:
    """One line of ``format`` as a memory to import, or :class:`LineError` naming the line."""
    try:
        doc = loads_strict(text, "the line")
        if not isinstance(doc, dict):
            raise InvalidInput("the line must be one JSON object")
        user_id, external_id, fields = _ADAPTERS[format](doc, default_user)
        if user_id is None:
            raise InvalidInput("no owner: the line has no user_id and --user is not given")
        user_id = valid_user_id(user_id)
        fields["node_id"] = node_id_for(external_id)
        item = node_item(fields)
    except InvalidInput as exc:
        raise LineError(line, str(exc)) from None
    return ImportLine(line, user_id, external_id, item)


class LineSource(Protocol):
    def readline(self, size: int = -1, /) -> bytes: ...


def read_lines(stream: LineSource | IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of every line that is not blank; a line longer than
    :data:`MAX_LINE_BYTES` is a :class:`LineError`. Reads one line at a time."""
    for number, line in enumerate(iter(lambda: stream.readline(MAX_LINE_BYTES + 1), b""), start=1):
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            raise LineError(number, f"longer than {MAX_LINE_BYTES} bytes")
        if line.strip():
            yield number, line


class _Client(Protocol):
    def add_nodes(self, items: Iterable[Mapping[str, Any] | NodeItem], *, user_id: str) -> list[Node]: ...

    @property
    def embedder(self) -> Embedder | None: ...

    @property
    def backend(self) -> SyncBackend: ...


def _item_index(exc: Exception) -> int | None:
    """The index N of an engine error about items[N]."""
    message = str(exc)
    if message.startswith("items[") and "]" in message:
        number = message[len("items[") : message.index("]")]
        if number.isdigit():
            return int(number)
    return None


#: A unit of work of an import: one or more owners' batches, each of one owner, up to
#: ``batch_size`` memories in all; a pack writes a unit in one transaction, PostgreSQL each
#: batch in its own.
_Unit = list[tuple[str, list[ImportLine]]]

#: Units handed on and not yet written, at most: parsing, embedding and writing overlap.
IN_FLIGHT = 2


class _Stopped(Exception):
    """A unit after one that failed: not written."""


@dataclass
class _Written:
    created: int
    replayed: int
    owners: list[str]
    skipped: list[tuple[int, str]]

    def add(self, nodes: list[Node]) -> None:
        replayed = sum(node.replayed for node in nodes)
        self.created += len(nodes) - replayed
        self.replayed += replayed


class _Pipeline:
    """Units flow from the caller's thread (reading and parsing lines) to a thread that embeds
    their contents and a thread that writes them, in order, at most :data:`IN_FLIGHT` units
    ahead of the caller. Parsing holds the GIL, while the model's tokenizer and DuckDB's or
    psycopg's statements do not: on two cores the three overlap (docs/PERFORMANCE.md).

    A unit that fails stops every later one before it starts (none of them is written), and
    its error is raised in the caller's thread by :meth:`send` or :meth:`drain`, in file order.
    """

    def __init__(self, embed: Callable[[_Unit], list[AddNodes]], write: Callable[[_Unit, list[AddNodes]], _Written]):
        self._embed, self._write = embed, write
        self._embedding = ThreadPoolExecutor(1, thread_name_prefix="prme-import-embed")
        self._writing = ThreadPoolExecutor(1, thread_name_prefix="prme-import-write")
        self._pending: deque[Future[_Written]] = deque()
        self._sent = 0
        self._failed = 1 << 62  # the first unit that failed: no later unit starts
        self._guard = threading.Lock()

    def _run(self, number: int, step: Callable[[], T]) -> T:
        if number > self._failed:
            raise _Stopped
        try:
            return step()
        except BaseException:
            with self._guard:
                self._failed = min(self._failed, number)
            raise

    def send(self, unit: _Unit) -> list[_Written]:
        """Hand on a unit; return what finished meanwhile (in order), waiting while
        more than :data:`IN_FLIGHT` units are unfinished."""
        number, self._sent = self._sent, self._sent + 1
        embedded = self._embedding.submit(self._run, number, lambda: self._embed(unit))
        self._pending.append(self._writing.submit(self._run, number, lambda: self._write(unit, embedded.result())))
        done = []
        while self._pending and (len(self._pending) > IN_FLIGHT or self._pending[0].done()):
            done.append(self._pending.popleft().result())
        return done

    def drain(self) -> list[_Written]:
        """Wait for every unit handed on; what they wrote, in order (or the first one's error;
        none after a unit whose error was raised already: they were not written)."""
        done = []
        while self._pending:
            try:
                done.append(self._pending.popleft().result())
            except _Stopped:
                break
        return done

    def close(self) -> None:
        """Start no unit that has not started; wait for the one being written."""
        with self._guard:
            self._failed = -1
        for executor in (self._embedding, self._writing):
            executor.shutdown(wait=True, cancel_futures=True)


#: prme.add_nodes answering only how many of the batch it created and replayed: an import
#: needs no more, and 1,000 node rows made, sent and read back cost the client about a tenth
#: of its time (docs/IMPORT.md, "Speed on PostgreSQL").
ADD_NODES_COUNTED: LiteralString = (
    "SELECT count(*) FILTER (WHERE NOT n.replayed), count(*) FILTER (WHERE n.replayed) FROM (" + ADD_NODES + ") AS n"
)


def _writes_counted(client: _Client) -> Callable[[AddNodes], tuple[int, int]] | None:
    """PostgreSQL's write of one batch (its own transaction), answering (created, replayed);
    None elsewhere (HTTP, a pack): there ``client.add_nodes``' nodes are counted."""
    backend = getattr(client, "backend", None)
    if not isinstance(backend, PostgresBackend):
        return None
    pool = backend.pool

    def write(request: AddNodes) -> tuple[int, int]:
        params = statement(request).params  # what client.add_nodes sends
        with translate_errors(), pool.connection() as conn:
            row = conn.execute(ADD_NODES_COUNTED, params).fetchone()
        assert row is not None  # an aggregate answers one row
        return int(row[0]), int(row[1])

    return write


def _writes_together(client: _Client) -> Callable[[list[AddNodes]], tuple[int, int]] | None:
    """A memory pack's write of several owners' batches in one transaction, answering
    (created, replayed); None elsewhere."""
    backend = getattr(client, "backend", None)
    if not isinstance(backend, DuckDBBackend):
        return None
    pack = backend

    def write(requests: list[AddNodes]) -> tuple[int, int]:
        written = _Written(0, 0, [], [])
        for nodes in pack.add_nodes_together(requests):
            written.add(nodes)
        return written.created, written.replayed

    return write


def import_lines(
    client: _Client,
    lines: Iterable[tuple[int, str | bytes]],
    *,
    format: str = "prme",
    default_user: str | None = None,
    skip_invalid: bool = False,
    batch_size: int = MAX_BATCH_ITEMS,
    on_progress: Callable[[ImportSummary], None] | None = None,
) -> ImportSummary:
    """Import numbered lines of ``format`` through ``client.add_nodes``, one owner's batch of
    up to ``batch_size`` memories per transaction; on a memory pack, each ``batch_size``
    lines in one transaction, whatever their owners (each owner's part an add_nodes batch).

    A bad line raises :class:`LineError` before the batches it would have joined are written
    (those already written stay: a run again replays them), unless ``skip_invalid``, which
    records it in the summary's ``skipped`` and goes on. At most :data:`MAX_BUFFERED`
    memories are held at once (``batch_size`` on a pack), and :data:`IN_FLIGHT` units of
    ``batch_size`` being embedded and written, whatever the file's size.
    """
    if format not in _ADAPTERS:
        raise InvalidInput(f"format must be one of {', '.join(FORMATS)}")
    if not 1 <= batch_size <= MAX_BATCH_ITEMS:
        raise InvalidInput(f"batch_size must be between 1 and {MAX_BATCH_ITEMS}")
    summary = ImportSummary(format)
    started = time.perf_counter()
    embedder = client.embedder
    together = _writes_together(client)
    counted = _writes_counted(client)
    buffers: dict[str, list[ImportLine]] = {}
    buffered = 0

    def embed(unit: _Unit) -> list[AddNodes]:
        # The client's own request (client.add_nodes makes the same), for the whole unit at
        # once: one call of its model per unit, whatever the number of owners.
        request = add_nodes_request([entry.item for _, batch in unit for entry in batch], unit[0][0], embedder)
        requests, start = [], 0
        for user_id, batch in unit:
            requests.append(AddNodes(user_id=user_id, items=request.items[start : start + len(batch)]))
            start += len(batch)
        return requests

    def write_batch(user_id: str, batch: list[ImportLine], request: AddNodes, written: _Written) -> None:
        items: list[NodeItem] = list(request.items)  # with their vectors
        while items:  # (every line of the batch skipped: nothing to write)
            try:
                if counted is not None:
                    created, replayed = counted(AddNodes(user_id=user_id, items=tuple(items)))
                    written.created += created
                    written.replayed += replayed
                else:
                    written.add(client.add_nodes(items, user_id=user_id))
            except (InvalidInput, IdempotencyConflict) as exc:
                index = _item_index(exc)
                if index is None or index >= len(batch):
                    raise
                reason = str(exc).split(": ", 1)[1]
                if not skip_invalid:
                    raise LineError(batch[index].line, reason) from None
                written.skipped.append((batch[index].line, reason))
                del batch[index], items[index]  # the whole batch was rolled back: send the rest again
                continue
            written.owners.append(user_id)
            return

    def write(unit: _Unit, requests: list[AddNodes]) -> _Written:
        if together is not None and len(unit) > 1:
            try:
                created, replayed = together(requests)
                return _Written(created, replayed, [user_id for user_id, _ in unit], [])
            except (InvalidInput, IdempotencyConflict):
                pass  # nothing was written: batch by batch, the refused one names its line
        written = _Written(0, 0, [], [])
        for (user_id, batch), request in zip(unit, requests, strict=True):
            write_batch(user_id, batch, request, written)
        return written

    def take(*owners: str) -> _Unit:
        nonlocal buffered
        unit = [(owner, buffers.pop(owner)) for owner in owners]
        buffered -= sum(len(batch) for _, batch in unit)
        return unit

    def largest() -> str:
        return max(buffers, key=lambda owner: len(buffers[owner]))

    def account(done: list[_Written]) -> None:
        for written in done:
            for line, reason in written.skipped:
                summary.skipped.append({"line": line, "error": reason})
            summary.created += written.created
            summary.replayed += written.replayed
            summary.owners.update(written.owners)
            if on_progress is not None:
                on_progress(summary)

    pipeline = _Pipeline(embed, write)
    try:
        try:
            for number, text in lines:
                summary.lines += 1
                try:
                    entry = parse_line(text, number, format, default_user)
                except LineError as exc:
                    if not skip_invalid:
                        raise
                    summary.skipped.append({"line": exc.line, "error": exc.reason})
                    continue
                batch = buffers.setdefault(entry.user_id, [])
                batch.append(entry)
                buffered += 1
                if together is not None:
                    # A pack: the next batch_size memories, whatever their owners, in one transaction.
                    if buffered >= batch_size:
                        account(pipeline.send(take(*buffers)))
                elif len(batch) >= batch_size:
                    account(pipeline.send(take(entry.user_id)))
                elif buffered >= MAX_BUFFERED:
                    account(pipeline.send(take(largest())))
        except LineError:
            account(pipeline.drain())  # what was handed on before the bad line is written first
            raise
        while buffers:
            account(pipeline.send(take(*buffers) if together is not None else take(largest())))
        account(pipeline.drain())
    finally:
        pipeline.close()
    summary.seconds = time.perf_counter() - started
    if on_progress is not None:
        on_progress(summary)
    return summary


# -- export ----------------------------------------------------------------------------


def _json_time(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _number(value: Decimal) -> float | int:
    # At most 4 decimals in [0, 1]: a double's shortest form is exactly these digits.
    return int(value) if value == value.to_integral_value() else float(value)


def export_line(node: Node, records: Iterable[JournalRecord] = ()) -> dict[str, Any]:
    """One memory as a line of the ``prme`` format: what an import reads back (its id,
    owner, content, place, numbers, schedule and first date), then its whole state and
    journal (each record's text exactly as hashed), which an import ignores."""
    return {
        "id": str(node.id),
        "user_id": node.user_id,
        "content": node.content,
        "scope": node.scope,
        "namespace": node.namespace,
        "kind": node.kind,
        "confidence_base": _number(node.confidence_base),
        "salience_base": _number(node.salience_base),
        "stability": node.stability,
        "decay_profile": node.decay_profile,
        "created_at": _json_time(node.created_at),
        "next_review_at": _json_time(node.next_review_at),
        "state": {
            "reinforcement_boost": _number(node.reinforcement_boost),
            "last_reinforced_at": _json_time(node.last_reinforced_at),
            "evidence_refs": [str(ref) for ref in node.evidence_refs],
            "lifecycle_state": node.lifecycle_state,
            "updated_at": _json_time(node.updated_at),
            "version": node.version,
        },
        "journal": [{"record": r.record, "checksum": r.checksum} for r in records],
    }


class _ExportClient(Protocol):
    def iter_nodes(self, *, user_id: str, namespace: str | None = None, page_size: int = 100) -> Iterator[Node]: ...

    def journal_records(self, *, user_id: str) -> tuple[list[JournalRecord], Any]: ...


def export_lines(
    client: _ExportClient, user_id: str, *, include_archived: bool = False, journal: bool = True
) -> Iterator[str]:
    """The memories of ``user_id`` in id order, one JSON line each (no newline). Archived
    memories only with ``include_archived`` (an import creates every memory active)."""
    chains: dict[uuid.UUID, list[JournalRecord]] = {}
    if journal:
        records, _ = client.journal_records(user_id=user_id)
        for record in records:
            chains.setdefault(record.node_id, []).append(record)
    for node in client.iter_nodes(user_id=user_id, page_size=1000):
        if node.lifecycle_state == "archived" and not include_archived:
            continue
        yield json.dumps(export_line(node, chains.pop(node.id, ())), ensure_ascii=False, separators=(",", ":"))
