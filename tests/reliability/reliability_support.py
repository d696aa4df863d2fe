"""Helpers shared by the reliability suite (issue 5): snapshots, checks, waits, a TCP proxy.

Everything here talks to a real PostgreSQL. Nothing is mocked: the proxy is a real
socket pair between psycopg and the server, the waits read pg_stat_activity and
pg_locks, and the checks call prme.verify_journal and prme.replay_node.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
import rfc8785
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

# -- data ---------------------------------------------------------------------------


def add_node(conn: psycopg.Connection[Any], user_id: str, content: str = "a memory", **kwargs: Any) -> dict[str, Any]:
    named = "".join(f", {name} => %({name})s" for name in kwargs)
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            f"SELECT * FROM prme.add_node(user_id => %(user_id)s, content => %(content)s{named})",
            {"user_id": user_id, "content": content, **kwargs},
        ).fetchone()
    assert row is not None
    return row


def add_event(conn: psycopg.Connection[Any], user_id: str, content: str = "evidence", **kwargs: Any) -> dict[str, Any]:
    named = "".join(f", {name} => %({name})s" for name in kwargs)
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            f"SELECT * FROM prme.add_event(user_id => %(user_id)s, content => %(content)s{named})",
            {"user_id": user_id, "content": content, **kwargs},
        ).fetchone()
    assert row is not None
    return row


def reinforce(
    conn: psycopg.Connection[Any],
    node_id: uuid.UUID,
    user_id: str,
    evidence_id: uuid.UUID | None = None,
    request_id: uuid.UUID | None = None,
) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "SELECT * FROM prme.reinforce(node_id => %s, user_id => %s, evidence_id => %s, request_id => %s)",
            [node_id, user_id, evidence_id, request_id],
        ).fetchone()
    assert row is not None
    return row


# -- the API, read from the catalog ------------------------------------------------------


@dataclass(frozen=True)
class ApiFunction:
    """An API function: in schema prme, not starting with '_', executable by prme_app."""

    name: str
    signature: str
    args: list[tuple[str, str]]  # (name, type) of the input arguments, in order
    required: int  # how many leading arguments have no default


def api_functions(conn: psycopg.Connection[Any]) -> list[ApiFunction]:
    rows = conn.execute(
        """
        SELECT p.proname, p.oid::regprocedure::text, p.proargnames, p.proargmodes,
               p.proargtypes::regtype[]::text[], p.pronargs, p.pronargdefaults
        FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
        WHERE n.nspname = 'prme' AND p.prokind = 'f' AND p.proname NOT LIKE '\\_%'
          AND pg_catalog.has_function_privilege('prme_app', p.oid, 'EXECUTE')
        ORDER BY 2
        """
    ).fetchall()
    functions = []
    for name, signature, names, modes, types, nargs, ndefaults in rows:
        modes = modes or ["i"] * len(names)
        inputs = [arg for arg, mode in zip(names, modes, strict=True) if mode in ("i", "b", "v")]
        assert len(inputs) == nargs == len(types), signature
        functions.append(ApiFunction(name, signature, list(zip(inputs, types, strict=True)), nargs - ndefaults))
    return functions


def api_call(function: ApiFunction, args: dict[str, Any]) -> sql.Composed:
    """SELECT * FROM prme.f(name => %(name)s, ...): named notation, as docs/DESIGN.md promises."""
    named = sql.SQL(", ").join(sql.SQL("{} => {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in args)
    return sql.SQL("SELECT * FROM prme.{}({})").format(sql.Identifier(function.name), named)


# -- arguments for any API function ------------------------------------------------------

#: Arguments that name an existing object of the caller: the table and column it lives in
#: (every such table is keyed by user_id first). An array argument names several.
REFERENCES: dict[str, tuple[str, str]] = {
    "node_id": ("nodes", "id"),
    "candidate_node_ids": ("nodes", "id"),
    "node_ids": ("nodes", "id"),
    "evidence_id": ("events", "id"),
    "event_id": ("events", "id"),
    "request_id": ("journal", "request_id"),
    "token_sha256": ("api_tokens", "token_sha256"),
    "patch_id": ("maintenance_patches", "id"),
    "operation_id": ("operations", "operation_id"),
    "dependencies": ("operations", "operation_id"),
    "inbox_id": ("correction_inbox", "id"),
    "generation_id": ("snapshot_generations", "generation_id"),
}
#: uuid arguments that are positions in an ordering, not references (left at their default).
CURSORS = {"after_node_id"}

OPERATION_PAYLOAD = {"content": "queued evidence"}

#: Values for required arguments that are not references, by (name, type).
SAMPLES: dict[tuple[str, str], Any] = {
    ("content", "text"): "a note of the caller's own",
    ("message", "text"): "no, I prefer coffee over tea",
    ("outcome", "text"): "neutral_exposure",
    ("scope", "text"): "personal",
    ("scopes", "text[]"): ["personal"],
    ("namespace", "text"): "default",
    ("kind", "text"): "add_event",
    ("stability", "text"): "low",
    ("budget_bytes", "integer"): 4000,
    ("schema_version", "integer"): 2,
    ("review_cadence", "interval"): dt.timedelta(days=7),
    ("decay_per_cycle", "numeric"): Decimal("0.01"),
    ("payload", "jsonb"): OPERATION_PAYLOAD,
    ("payload_hash", "text"): hashlib.sha256(rfc8785.dumps(OPERATION_PAYLOAD)).hexdigest(),
    ("value", "jsonb"): {"b": 1, "a": [1.5, "x"]},
    ("items", "jsonb"): [{"content": "a batch's note of the caller's own"}],
    ("model_id", "text"): "test-model-3",
    ("dimensions", "integer"): 3,
    ("user_ids", "text[]"): [],
    ("operation_ids", "text[]"): [],
    ("part_nos", "integer[]"): [],
    ("embeddings", "real[]"): [],
}


#: Optional arguments set so that a call gets past argument validation to the data.
OPTIONAL: dict[tuple[str, str], Any] = {
    ("apply_patch", "mode"): "auto",  # manual mode needs op_ids, which are per patch
}


class MissingSample(LookupError):
    """An API function needs an argument this suite has no value for: extend the tables above."""


def objects_of(conn: psycopg.Connection[Any], owner: str) -> dict[str, list[Any]]:
    """For each reference argument, the owner's existing objects it can name (oldest first)."""
    existing = set(prme_tables(conn))
    found: dict[str, list[Any]] = {}
    for name, (table, column) in REFERENCES.items():
        if table in existing:
            # IS NOT NULL: a journal record without a key names no key.
            query = sql.SQL(
                "SELECT DISTINCT {0} FROM prme.{1} WHERE user_id = %s AND {0} IS NOT NULL ORDER BY 1"
            ).format(sql.Identifier(column), sql.Identifier(table))
            found[name] = [row[0] for row in conn.execute(query, [owner])]
    return found


def fresh_reference(name: str) -> Any:
    """A value that names nothing: a new uuid, 64 new hex digits for text keys, or a new
    uuid's text for operation ids (text since 0017_reference_protocol)."""
    if name in ("token_sha256", "generation_id"):
        return hashlib.sha256(uuid.uuid4().bytes).hexdigest()
    if name in ("operation_id", "dependencies"):
        return str(uuid.uuid4())
    return uuid.uuid4()


def as_argument(type_: str, value: Any) -> Any:
    if type_ in ("json", "jsonb") and not isinstance(value, Jsonb):
        return Jsonb(value)
    return [value] if type_.endswith("[]") and not isinstance(value, list) else value


def arguments(
    function: ApiFunction, user_id: str, own: dict[str, list[Any]], given: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Named arguments for a call: the given ones, then every required one (user_id, the
    caller's own objects for references, SAMPLES for the rest); optional ones keep their
    defaults. Raises MissingSample, naming what to add, for an argument it cannot fill."""
    given = given or {}
    args: dict[str, Any] = {}
    for position, (name, type_) in enumerate(function.args):
        if name in given:
            args[name] = as_argument(type_, given[name])
        elif (function.name, name) in OPTIONAL:
            args[name] = OPTIONAL[(function.name, name)]
        elif position >= function.required:
            continue
        elif name == "user_id":
            args[name] = user_id
        elif name in REFERENCES:
            mine = own.get(name) or []
            args[name] = (
                [] if name == "dependencies" else as_argument(type_, mine[0] if mine else fresh_reference(name))
            )
        elif (name, type_) in SAMPLES:
            args[name] = as_argument(type_, SAMPLES[(name, type_)])
        else:
            raise MissingSample(
                f"{function.signature}: no value for required argument {name} {type_}: add it to SAMPLES "
                f"(or REFERENCES, if it names an object of the caller) in {__file__}"
            )
    for name, type_ in function.args:
        if type_ in ("uuid", "uuid[]") and name not in REFERENCES and name not in CURSORS:
            raise MissingSample(
                f"{function.signature}: uuid argument {name!r} is in neither REFERENCES nor CURSORS of {__file__}"
            )
    return args


# -- snapshots ------------------------------------------------------------------------


def prme_tables(conn: psycopg.Connection[Any]) -> list[str]:
    """Every ordinary table in schema prme, from the catalog (new tables are covered)."""
    return [
        str(row[0])
        for row in conn.execute(
            "SELECT c.relname FROM pg_catalog.pg_class AS c "
            "JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'prme' AND c.relkind IN ('r', 'p') ORDER BY 1"
        )
    ]


def snapshot(conn: psycopg.Connection[Any]) -> dict[str, list[str]]:
    """Every row of every prme table as text, sorted: equal snapshots mean nothing changed."""
    tables: dict[str, list[str]] = {}
    for table in prme_tables(conn):
        query = sql.SQL("SELECT t::text FROM prme.{} AS t ORDER BY 1").format(sql.Identifier(table))
        tables[table] = [str(row[0]) for row in conn.execute(query)]
    return tables


def owned_snapshot(conn: psycopg.Connection[Any]) -> dict[str, set[tuple[str | None, str]]]:
    """Every row of every prme table as (owner, row text); owner is None for tables without user_id.

    Two round trips: the table list from the catalog, then one UNION ALL over the tables."""
    tables = conn.execute(
        "SELECT c.relname, EXISTS (SELECT FROM pg_catalog.pg_attribute AS a WHERE a.attrelid = c.oid "
        "AND a.attname = 'user_id' AND NOT a.attisdropped) "
        "FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'prme' AND c.relkind IN ('r', 'p') ORDER BY 1"
    ).fetchall()
    result: dict[str, set[tuple[str | None, str]]] = {str(table): set() for table, _ in tables}
    query = sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT {}::text, {}, t::text FROM prme.{} AS t").format(
            sql.Literal(table), sql.SQL("t.user_id") if has_owner else sql.SQL("NULL::text"), sql.Identifier(table)
        )
        for table, has_owner in tables
    )
    for table, owner, row in conn.execute(query):
        result[table].add((owner, row))
    return result


def snapshot_diff(before: dict[str, list[str]], after: dict[str, list[str]]) -> dict[str, tuple[list[str], list[str]]]:
    """Per table, (rows gone, rows new); tables without change are left out."""
    diff: dict[str, tuple[list[str], list[str]]] = {}
    for table in sorted(set(before) | set(after)):
        old, new = set(before.get(table, [])), set(after.get(table, []))
        if old != new:
            diff[table] = (sorted(old - new), sorted(new - old))
    return diff


CATALOG_FINGERPRINT = """
SELECT md5(concat_ws('|',
    (SELECT string_agg(concat_ws(',', n.nspname, c.relname, c.relkind, c.relacl::text, c.relrowsecurity), ';'
                       ORDER BY n.nspname, c.relname)
     FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
     WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
       AND n.nspname NOT LIKE 'pg_temp%' AND n.nspname NOT LIKE 'pg_toast_temp%'),
    (SELECT string_agg(concat_ws(',', rolname, rolsuper, rolcanlogin, rolcreaterole, rolbypassrls), ';'
                       ORDER BY rolname) FROM pg_catalog.pg_roles),
    (SELECT string_agg(concat_ws(',', p.oid::regprocedure::text, p.proacl::text, md5(p.prosrc)), ';'
                       ORDER BY p.oid::regprocedure::text)
     FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
     WHERE n.nspname = 'prme'),
    (SELECT string_agg(concat_ws(',', tgrelid::regclass::text, tgname, tgenabled), ';' ORDER BY 1)
     FROM pg_catalog.pg_trigger WHERE NOT tgisinternal),
    (SELECT string_agg(concat_ws(',', n.nspname, n.nspacl::text), ';' ORDER BY n.nspname)
     FROM pg_catalog.pg_namespace AS n)
))
"""


#: The tables of docs/DESIGN.md section 2 whose changes the tests count exactly. Tables that later
#: capabilities add (outcomes, summaries, ledger ...) are held to "only the caller's own rows
#: change" and "a replay changes nothing" instead, so the suite keeps working as they land.
CORE_TABLES = ("nodes", "events", "journal", "request_keys")


def core_shape(diff: dict[str, tuple[list[str], list[str]]]) -> dict[str, tuple[int, int]]:
    """(rows gone, rows new) per core table that changed."""
    return {table: (len(gone), len(new)) for table, (gone, new) in diff.items() if table in CORE_TABLES}


def changed_owners(
    before: dict[str, set[tuple[str | None, str]]], after: dict[str, set[tuple[str | None, str]]]
) -> set[str | None]:
    """The owners of every row that changed (appeared, disappeared or was rewritten), any table."""
    return {
        owner for table in set(before) | set(after) for owner, _ in before.get(table, set()) ^ after.get(table, set())
    }


def catalog_fingerprint(conn: psycopg.Connection[Any]) -> str:
    """One hash over relations of every schema, roles, prme functions, triggers and schemas:
    what an injected DDL statement would change."""
    row = conn.execute(CATALOG_FINGERPRINT).fetchone()
    assert row is not None
    return str(row[0])


# -- comparing results --------------------------------------------------------------

UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
HEX64_RE = re.compile(r"\b[0-9a-f]{64}\b")
TIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}(:?\d{2})?)?")


def normalise(value: Any, targets: dict[str, str]) -> Any:
    """Replace ids, times and checksums by placeholders; targeted ids by their argument's name."""
    if isinstance(value, uuid.UUID):
        value = str(value)
    if isinstance(value, str) and value in targets:
        return targets[value]
    if isinstance(value, dict):
        return {key: normalise(item, targets) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [normalise(item, targets) for item in value]
    if isinstance(value, dt.datetime | dt.date | dt.timedelta):
        return "<time>"
    if isinstance(value, float):  # derived from the clock (ages, decayed scores); state is numeric
        return "<float>"
    if isinstance(value, str):
        value = UUID_RE.sub(lambda m: targets.get(m.group(0), "<uuid>"), value)
        value = HEX64_RE.sub(lambda m: targets.get(m.group(0), "<sha256>"), value)
        return TIME_RE.sub("<time>", value)
    return value


# -- checks ---------------------------------------------------------------------------


def owners(conn: psycopg.Connection[Any]) -> list[str]:
    return [
        str(row[0])
        for row in conn.execute(
            "SELECT user_id FROM prme.nodes UNION SELECT user_id FROM prme.journal "
            "UNION SELECT user_id FROM prme.request_keys ORDER BY 1"
        )
    ]


def journal_problems(conn: psycopg.Connection[Any], users: list[str] | None = None) -> list[tuple[Any, ...]]:
    """Every row prme.verify_journal reports, for every owner (or the ones given)."""
    problems: list[tuple[Any, ...]] = []
    for user in users if users is not None else owners(conn):
        problems += [
            (user, *row)
            for row in conn.execute(
                "SELECT node_id, node_version, problem, detail FROM prme.verify_journal(%s)", [user]
            )
        ]
    return problems


def replay_all(conn: psycopg.Connection[Any]) -> tuple[int, int, list[tuple[Any, ...]]]:
    """Replay every node: (nodes replayed, records replayed, the ones that do not match)."""
    nodes = conn.execute("SELECT user_id, id FROM prme.nodes ORDER BY 1, 2").fetchall()
    records = 0
    bad: list[tuple[Any, ...]] = []
    for user, node_id in nodes:
        row = conn.execute("SELECT records, matches, problem FROM prme.replay_node(%s, %s)", [user, node_id]).fetchone()
        assert row is not None
        records += int(row[0])
        if not row[1]:
            bad.append((user, node_id, row[0], row[2]))
    return len(nodes), records, bad


def journal_count(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM prme.journal").fetchone()
    assert row is not None
    return int(row[0])


# -- waiting on the server ------------------------------------------------------------


def wait_until(predicate: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def relation_locks(conn: psycopg.Connection[Any], pid: int) -> set[tuple[str, str]]:
    """(table, mode) of every relation lock the backend holds."""
    return {
        (str(row[0]), str(row[1]))
        for row in conn.execute(
            "SELECT c.relname, l.mode FROM pg_catalog.pg_locks AS l "
            "JOIN pg_catalog.pg_class AS c ON c.oid = l.relation "
            "WHERE l.pid = %s AND l.granted AND l.locktype = 'relation'",
            [pid],
        )
    }


def awaited_xid(conn: psycopg.Connection[Any], pid: int) -> str | None:
    """The transaction id the backend is waiting for, if it waits on one."""
    row = conn.execute(
        "SELECT l.transactionid::text FROM pg_catalog.pg_locks AS l "
        "WHERE l.pid = %s AND NOT l.granted AND l.locktype = 'transactionid'",
        [pid],
    ).fetchone()
    return None if row is None else str(row[0])


def backend_xid(conn: psycopg.Connection[Any], pid: int) -> str | None:
    row = conn.execute("SELECT backend_xid::text FROM pg_catalog.pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def backend_state(conn: psycopg.Connection[Any], pid: int) -> str | None:
    row = conn.execute("SELECT state FROM pg_catalog.pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    return None if row is None else str(row[0])


def terminate(conn: psycopg.Connection[Any], pid: int) -> None:
    """pg_terminate_backend, waiting (up to 10 s) until the backend has exited."""
    row = conn.execute("SELECT pg_catalog.pg_terminate_backend(%s, 10000)", [pid]).fetchone()
    assert row is not None and row[0] is True, f"backend {pid} was not terminated"


class Background:
    """Run one call in a thread; join() returns its result or its exception."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.result = call()
        except BaseException as exc:  # handed to the test
            self.error = exc

    def join(self, timeout: float = 30.0) -> Background:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "a background call did not finish"
        return self


# -- a TCP proxy that loses messages on purpose --------------------------------------


def with_params(dsn: str, **params: Any) -> str:
    values = conninfo_to_dict(dsn)
    values.update(params)
    return make_conninfo(**values)  # type: ignore[arg-type]


class CuttingProxy:
    """A TCP proxy on 127.0.0.1 between psycopg and PostgreSQL that can drop a connection.

    ``arm("response")``: the next bytes the server sends are not delivered; both sides are
    closed instead (a response lost after the server committed). ``arm("response_partial")``:
    half of that chunk is delivered, then both sides are closed (the response started to
    flow). ``arm("request")``: the next bytes the client sends are delivered to the server,
    then both sides are closed before any answer (an outcome the client cannot know);
    ``arm("request_partial")``: only the first half of them is delivered.
    """

    def __init__(self, dsn: str) -> None:
        params = conninfo_to_dict(dsn)
        host = str(params.get("host") or "/var/run/postgresql")
        port = int(params.get("port") or 5432)
        if host.startswith("/"):
            self._upstream: tuple[int, Any] = (socket.AF_UNIX, os.path.join(host, f".s.PGSQL.{port}"))
        else:
            self._upstream = (socket.AF_INET, (host, port))
        self._dsn = dsn
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._armed: str | None = None
        self.fired = threading.Event()
        self.dropped: bytes = b""
        self._sockets: list[socket.socket] = []
        self._closing = threading.Event()
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    @property
    def dsn(self) -> str:
        """The server's DSN, pointed at the proxy (no TLS, no GSS: plain protocol bytes)."""
        return with_params(self._dsn, host="127.0.0.1", port=str(self.port), sslmode="disable", gssencmode="disable")

    def arm(self, mode: str) -> None:
        assert mode in {"response", "response_partial", "request", "request_partial"}
        with self._lock:
            self._armed = mode
            self.fired.clear()
            self.dropped = b""

    def _take(self, direction: str) -> str | None:
        with self._lock:
            mode = self._armed
            if mode is None or (direction == "c2s") != mode.startswith("request"):
                return None
            self._armed = None
            return mode

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            family, address = self._upstream
            server = socket.socket(family, socket.SOCK_STREAM)
            server.connect(address)
            self._sockets += [client, server]
            pair = (client, server)
            deaf = threading.Event()  # set: nothing more reaches the client on this pair
            threading.Thread(target=self._pump, args=(pair, "c2s", deaf), daemon=True).start()
            threading.Thread(target=self._pump, args=(pair, "s2c", deaf), daemon=True).start()

    @staticmethod
    def _cut(pair: tuple[socket.socket, socket.socket]) -> None:
        for sock in pair:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _pump(self, pair: tuple[socket.socket, socket.socket], direction: str, deaf: threading.Event) -> None:
        source, sink = pair if direction == "c2s" else (pair[1], pair[0])
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if not data:
                self._cut(pair)
                return
            if direction == "s2c" and deaf.is_set():
                self.dropped += data
                continue
            mode = self._take(direction)
            try:
                if mode is None:
                    sink.sendall(data)
                    continue
                if mode == "request":
                    deaf.set()
                    sink.sendall(data)  # the server gets the whole call ...
                    time.sleep(0.05)  # ... and starts on it; the client never hears back
                elif mode == "request_partial":
                    deaf.set()
                    sink.sendall(data[: len(data) // 2])  # the server gets half a message
                elif mode == "response_partial":
                    sink.sendall(data[: len(data) // 2])
                    self.dropped = data[len(data) // 2 :]
                else:
                    self.dropped = data
            except OSError:
                pass
            self.fired.set()
            self._cut(pair)
            return

    def close(self) -> None:
        self._closing.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()
        self._acceptor.join(5)


@contextlib.contextmanager
def cutting_proxy(dsn: str) -> Iterator[CuttingProxy]:
    proxy = CuttingProxy(dsn)
    try:
        yield proxy
    finally:
        proxy.close()
