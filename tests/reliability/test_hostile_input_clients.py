"""Issue 5, item 5 (Python client): hostile input through MemoryClient, on PostgreSQL and on a DuckDB pack.

The strategies are those of test_hostile_input_sql.py (text with RTL, combining marks,
emoji, controls, NUL, lone surrogates, SQL injection strings, 64 KiB and 1 MiB strings;
numbers as Decimal, float and text: NaN, sNaN, +-inf, -0, 1e308, subnormals, five
decimals; UUID-like junk), plus Python values of the wrong type. They go through the
public client API, argument by argument. Every input ends one of two ways:

* a typed error -- InvalidInput (a ValueError), NotFoundError or IdempotencyConflict --
  and no row of any table changed;
* or success, the value stored and read back exactly (get_node, or the row returned by
  the engine), the owner's journal verifying (engine and independent verifier), the node
  replaying, and only the expected tables changed by the expected number of rows.

Anything else (TypeError, a psycopg or duckdb exception, an internal error) fails.
HTTP hostile input is covered by the schemathesis test of tests/test_http.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg import sql
from reliability_support import CORE_TABLES, prme_tables
from test_hostile_input_sql import (
    DECIMALS,
    FLOATS,
    MODEL,
    NUMBER_ARGS,
    NUMERIC_TEXT,
    TEXT_ARGS,
    UUID_JUNK,
    _valid_fraction,
    hostile_text,
)

from prme_pg import MemoryClient
from prme_pg.errors import IdempotencyConflict, InvalidInput, NotFoundError
from prme_pg.validation import MAX_JSON_DEPTH

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
TYPED = (InvalidInput, NotFoundError, IdempotencyConflict, ValueError)
BACKENDS = ["postgres", "duckdb"]
TRIED: dict[tuple[str, str], dict[str, int]] = {}

State = dict[str, tuple[int, str]]


class Target:
    """A client on one backend, the ids of a few existing objects, and a row-level state probe."""

    def __init__(self, backend: str, client: MemoryClient, state: Callable[[], State]) -> None:
        self.backend = backend
        self.client = client
        self.state = state
        self.node = client.add_node("alice's memory", user_id="alice")
        self.event = client.add_event("alice's evidence", user_id="alice")
        client.add_node("bob's memory", user_id="bob")

    def tried(self, test: str, outcome: str) -> None:
        counts = TRIED.setdefault((self.backend, test), {})
        counts[outcome] = counts.get(outcome, 0) + 1


def _postgres_state(dsn: str) -> tuple[psycopg.Connection[Any], Callable[[], State]]:
    conn = psycopg.connect(dsn, autocommit=True)
    tables = prme_tables(conn)
    query = sql.SQL(" UNION ALL ").join(
        sql.SQL(
            "SELECT {}, count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM prme.{} AS t"
        ).format(sql.Literal(table), sql.Identifier(table))
        for table in tables
    )
    return conn, lambda: {str(t): (int(n), str(h)) for t, n, h in conn.execute(query)}


def _duckdb_state(client: MemoryClient) -> Callable[[], State]:
    backend: Any = client.backend

    def read(con: Any) -> State:
        tables = [
            r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'prme'").fetchall()
        ]
        state: State = {}
        for table in tables:
            n, h = con.execute(
                f"SELECT count(*), md5(coalesce(string_agg(CAST(t AS VARCHAR), '|' ORDER BY CAST(t AS VARCHAR)), "
                f"'')) FROM prme.{table} AS t"
            ).fetchone()
            state[table] = (int(n), str(h))
        return state

    return lambda: backend.run(read)


@pytest.fixture(scope="module", params=BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    if request.param == "postgres":
        dsn: str = request.getfixturevalue("module_db")
        conn, state = _postgres_state(dsn)
        with conn, MemoryClient(dsn, min_size=1, max_size=2) as client:
            yield Target("postgres", client, state)
    else:
        pack: Path = tmp_path_factory.mktemp("hostile_pack")
        with MemoryClient(pack) as client:
            yield Target("duckdb", client, _duckdb_state(client))


@pytest.fixture(scope="module", autouse=True)
def _report(figures: Any) -> Iterator[None]:
    yield
    for (backend, _test), counts in sorted(TRIED.items()):
        total = sum(counts.values())
        refused = sum(v for k, v in counts.items() if k.startswith("refused "))
        figures(
            f"5 hostile input (Python client, {backend})",
            inputs_tried=total,
            refused_typed=refused,
            stored_read_back_exactly=total - refused,
        )


def changed(before: State, after: State) -> dict[str, int]:
    """Per core table that changed (nodes, events, journal, request_keys): the difference in rows.

    Other tables (such as the outcome rows) may only gain rows."""
    for table in after:
        assert after[table][0] >= before.get(table, (0, ""))[0], f"{table} lost rows"
    return {t: after[t][0] - before.get(t, (0, ""))[0] for t in after if t in CORE_TABLES and after[t] != before.get(t)}


def attempt(target: Target, test: str, call: Callable[[], Any]) -> tuple[bool, Any, State]:
    """(refused?, result, state before). A refusal must be typed and change nothing."""
    before = target.state()
    refusal: str | None = None
    try:
        result = call()
    except TYPED as exc:
        refusal, result = f"refused {type(exc).__name__}", exc
    if refusal is not None:
        assert target.state() == before, f"{refusal}: {result} -- but rows changed"
        target.tried(test, refusal)
        return True, result, before
    target.tried(test, "stored")
    return False, result, before


def check_owner(client: MemoryClient, user_id: str, node_id: uuid.UUID) -> None:
    assert client.verify_journal(user_id=user_id) == []
    assert client.verify_journal(user_id=user_id, independent=True) == []
    replay = client.replay_node(node_id, user_id=user_id)
    assert replay.matches, replay.problem


# -- text ------------------------------------------------------------------------------


@SETTINGS
@given(argument=st.sampled_from(TEXT_ARGS), value=hostile_text())
@example(argument="content", value="a\x00b")
@example(argument="content", value="x\udfffy")
@example(argument="user_id", value="alice'; DROP TABLE prme.nodes; --")
def test_hostile_text_in_add_node(target: Target, argument: str, value: str) -> None:
    args: dict[str, Any] = {"content": "a memory", "user_id": "carol", argument: value}
    content = args.pop("content")
    refused, node, before = attempt(target, "add_node text", lambda: target.client.add_node(content, **args))
    if refused:
        assert MODEL[argument](value) is not True, f"{argument}={value!r} is valid but was refused: {node}"
        return
    assert MODEL[argument](value) is not False, f"{argument}={value!r} is invalid but was stored"
    assert getattr(node, argument) == value
    stored = target.client.get_node(node.id, user_id=node.user_id)
    assert getattr(stored, argument) == value, f"{argument} not read back exactly"
    assert changed(before, target.state()) == {"nodes": 1, "journal": 1}
    check_owner(target.client, node.user_id, node.id)


@SETTINGS
@given(argument=st.sampled_from(["content", "user_id", "scope", "namespace", "kind", "payload"]), value=hostile_text())
def test_hostile_text_in_add_event(target: Target, argument: str, value: str) -> None:
    args: dict[str, Any] = {"content": "evidence", "user_id": "carol"}
    if argument == "payload":
        args["payload"] = {"text": value, value: [value, 1], "nested": {"v": value}}
    else:
        args[argument] = value
    content = args.pop("content")
    refused, event, before = attempt(target, "add_event text", lambda: target.client.add_event(content, **args))
    if refused:
        if argument != "payload":
            assert MODEL.get(argument, MODEL["content"])(value) is not True, f"{argument}={value!r}: {event}"
        return
    if argument == "payload":
        assert event.payload == args["payload"], "payload not read back exactly"
    else:
        assert getattr(event, argument) == value
    assert changed(before, target.state()) == {"events": 1}


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH, 800, 100_000])
def test_a_payload_nested_past_the_limit_is_refused_before_any_write(target: Target, levels: int) -> None:
    """Issue 17, item 1: before, PostgreSQL stored an 800-level payload (and HTTP then failed to
    serialise it); 100,000 levels overflowed the client's own recursion. The payload is level 1."""
    payload: dict[str, Any] = {"v": 1}
    for _ in range(levels):
        payload = {"v": payload}
    refused, error, _ = attempt(
        target, "add_event depth", lambda: target.client.add_event("e", user_id="erin", payload=payload)
    )
    assert refused and isinstance(error, InvalidInput) and f"at most {MAX_JSON_DEPTH} levels" in str(error)
    shallow: dict[str, Any] = {"v": 1}
    for _ in range(MAX_JSON_DEPTH - 1):
        shallow = {"v": shallow}
    assert target.client.add_event("e", user_id="erin", payload=shallow).payload == shallow


@pytest.mark.parametrize("argument", ["content", "user_id"])
def test_lone_surrogate_is_invalid_input_on_duckdb(tmp_path: Path, argument: str) -> None:
    args: dict[str, Any] = {"content": "a memory", "user_id": "carol", argument: "x\udfffy"}
    with MemoryClient(tmp_path / "pack") as client, pytest.raises(InvalidInput):
        client.add_node(args.pop("content"), **args)


def test_surrogate_pair_in_payload_is_refused_on_postgres(module_db: str) -> None:
    with MemoryClient(module_db, min_size=1, max_size=1) as client:
        try:
            event = client.add_event("evidence", user_id="dave", payload={"v": "\ud800\udc00"})
        except InvalidInput:
            return
        assert event.payload == {"v": "\ud800\udc00"}, f"stored altered: {event.payload!r}"


# -- numbers ---------------------------------------------------------------------------


def _expected(value: Any) -> Decimal | None:
    """What the client sends for a fraction (its documented parsing), or None if it refuses."""
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, float):
            return Decimal(repr(value))
        return Decimal(value)
    except (InvalidOperation, TypeError, ValueError):
        return None


@SETTINGS
@given(
    argument=st.sampled_from(NUMBER_ARGS),
    value=st.one_of(
        DECIMALS,
        FLOATS,
        NUMERIC_TEXT,
        st.integers(min_value=-(10**400), max_value=10**400),
        st.sampled_from([True, False, None, [], {}, b"0.5", 1j]),
    ),
)
def test_hostile_numbers(target: Target, argument: str, value: Any) -> None:
    refused, node, before = attempt(
        target, "numbers", lambda: target.client.add_node("a memory", user_id="carol", **{argument: value})
    )
    expected = _expected(value)
    if refused:
        assert expected is None or not _valid_fraction(expected), f"{argument}={value!r} is valid but refused"
        return
    assert expected is not None and _valid_fraction(expected), f"{argument}={value!r} is invalid but stored"
    assert getattr(node, argument) == expected
    assert getattr(target.client.get_node(node.id, user_id="carol"), argument) == expected
    assert changed(before, target.state()) == {"nodes": 1, "journal": 1}
    check_owner(target.client, "carol", node.id)


# -- uuid-like junk --------------------------------------------------------------------

UUID_TARGETS = [
    "add_node.node_id",
    "add_event.event_id",
    "get_node.node_id",
    "archive_node.node_id",
    "replay_node.node_id",
    "reinforce.node_id",
    "reinforce.evidence_id",
    "reinforce.request_id",
    "list_nodes.after_node_id",
]


def _as_uuid(value: Any) -> uuid.UUID | None:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            return None
    return None


@SETTINGS
@given(
    where=st.sampled_from(UUID_TARGETS),
    junk=st.one_of(UUID_JUNK, st.sampled_from([0, 1.5, b"\x00" * 16, ["a"], object()])),
)
def test_uuid_like_junk(target: Target, where: str, junk: Any) -> None:
    client, node, event = target.client, target.node.id, target.event.id
    calls: dict[str, Callable[[], Any]] = {
        "add_node.node_id": lambda: client.add_node("a memory", user_id="carol", node_id=junk),
        "add_event.event_id": lambda: client.add_event("evidence", user_id="carol", event_id=junk),
        "get_node.node_id": lambda: client.get_node(junk, user_id="alice"),
        "archive_node.node_id": lambda: client.archive_node(junk, user_id="alice"),
        "replay_node.node_id": lambda: client.replay_node(junk, user_id="alice"),
        "reinforce.node_id": lambda: client.reinforce(junk, user_id="alice"),
        "reinforce.evidence_id": lambda: client.reinforce(node, junk, user_id="alice"),
        "reinforce.request_id": lambda: client.reinforce(node, event, user_id="alice", request_id=junk),
        "list_nodes.after_node_id": lambda: client.list_nodes(user_id="alice", after_node_id=junk),
    }
    parsed = _as_uuid(junk)
    version = client.get_node(node, user_id="alice").version
    refused, result, before = attempt(target, "uuid junk", calls[where])
    if parsed is None:
        assert refused and isinstance(result, InvalidInput), f"{where}={junk!r} is no UUID but got {result!r}"
        return
    after = target.state()
    if refused:
        # A well-formed id that names nothing of the caller's (or, for a new id, one taken).
        assert isinstance(result, NotFoundError | IdempotencyConflict), (where, junk, result)
        return
    if where == "add_node.node_id":
        assert result.id == parsed and changed(before, after) == {"nodes": 1, "journal": 1}
        check_owner(client, "carol", parsed)
    elif where == "add_event.event_id":
        assert result.id == parsed and changed(before, after) == {"events": 1}
    elif where == "reinforce.request_id":
        if result.replayed:
            assert after == before
        else:
            assert result.version == version + 1 and list(result.evidence_refs)[-1] == event
            assert set(changed(before, after)) == {"nodes", "journal"}  # the record carries the key
            check_owner(client, "alice", node)
    else:
        assert where in ("list_nodes.after_node_id", "replay_node.node_id"), (where, junk, result)
        assert after == before
