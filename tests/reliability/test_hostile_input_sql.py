"""Issue 5, item 5 (SQL layer): hostile input through SQL gets a typed error or is kept exactly.

Hypothesis generates text (RTL and bidi controls, combining marks, emoji and ZWJ
sequences, BOM, line separators, control characters, SQL injection strings, strings
around and far beyond the 64 KiB content limit), numbers (NaN, sNaN, +-Infinity, -0,
1e308, subnormals, five decimals, trailing zeros; sent as numeric, as float8 cast to
numeric, and as text), UUID-like junk and JSON payloads, and sends them through psycopg
to the API functions, each argument in turn. Every input must end one of two ways:

* a typed error and no change at all: PR422 (validation), PR404, PR409, 22P02 (not a valid
  uuid/numeric/json), 22P05 (\\u0000 in json), 22021 (bytes that are not UTF-8), 22003
  (a numeric literal beyond numeric's range), 54000 (NUL built on the server), or a
  refusal before anything is sent: psycopg.DataError for NUL, UnicodeEncodeError for
  lone surrogates (a UTF-8 database cannot hold them);
* or success, with the value stored and read back exactly, the node's journal record
  canonical (RFC 8785, checked independently with the rfc8785 package) and verifying,
  its replay matching, and exactly the expected rows added (nothing else changed).

Anything else (a CHECK constraint catching what validation missed, a syntax error,
an internal error, a changed catalog) fails. Each generated call runs in a transaction
that is rolled back; one test commits a curated set and reads it back on a new connection.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest
import rfc8785
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from reliability_support import (
    MissingSample,
    add_event,
    add_node,
    api_call,
    api_functions,
    arguments,
    catalog_fingerprint,
    changed_owners,
    core_shape,
    journal_problems,
    objects_of,
    owned_snapshot,
    replay_all,
    snapshot,
    snapshot_diff,
)

TYPED_SQLSTATES = {"PR422", "PR404", "PR409", "22P02", "22P05", "22021", "22003", "54000"}
CONTENT_LIMIT = 65536  # bytes of UTF-8

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

#: SQL injection strings: every one goes into every text argument of every API function.
INJECTIONS = [
    "'; DROP TABLE prme.nodes; --",
    "' OR '1'='1",
    "alice' --",
    "alice'; UPDATE prme.nodes SET content = 'pwned'; --",
    "'; SELECT pg_sleep(10); --",
    "$$; DROP SCHEMA prme CASCADE; $$",
    "'||(SELECT string_agg(content, ',') FROM prme.nodes)||'",
    "' UNION SELECT * FROM prme.request_keys --",
    '"; DROP TABLE prme.journal; --',
    "';\nDELETE FROM prme.journal;--",
    "1; COMMIT; DROP TABLE prme.events",
    "'); GRANT ALL ON ALL TABLES IN SCHEMA prme TO public; --",
    "personal' OR scope LIKE '%",
    "%s",
    "\\'; DROP TABLE prme.nodes; --",
]
#: Other metacharacters (format strings, escapes, comment markers, markup), drawn by Hypothesis.
METACHARACTERS = [
    "$x$ || (SELECT string_agg(content, ',') FROM prme.nodes) || $x$",
    "%(user_id)s",
    "{}",
    "{0}",
    "\\",
    "\\\\",
    "\\N",
    "\\x27",
    "E'\\x00'",
    "NULL",
    "null",
    "None",
    "true",
    "-- ",
    "/*",
    "*/",
    "'",
    "''",
    '"',
    "set_config('role', 'postgres', false)",
    "${jndi:ldap://example.invalid/a}",
    "<script>alert(1)</script>",
    "../../etc/passwd",
]
UNICODE = [
    "\u200f",
    "\u202e",
    "\u202dabc\u202c",
    "\u2066x\u2069",  # RTL mark, RLO, LRO, isolates
    "e\u0301",
    "\u0301",
    "a" + "\u0301" * 200,
    "Z\u0351\u0352\u0353\u0354\u0355",  # combining (zalgo)
    "\U0001f600",
    "\U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
    "\U0001f1eb\U0001f1f7",
    "\ufeff",
    "\u2028",
    "\u2029",
    "\x7f",
    "\x85",
    "\x9b",
    "\u00a0",
    "\u3000",
    "\x1b[31mred",
    "\ufdfa",
    "\u2126",
    "\u03a9",
    "\u01c5",
    "\U0010ffff",
    "\ufffd",
    "\ufffe",
    "\t",
    "\n",
    "\r\n",
    " ",
    "",
    "a" * 256,
    "a" * 257,
    " alice",
    "alice ",
]
CLIENT_REFUSED = ["a\x00b", "\x00", "\ud800", "x\udfffy", "\ud83d"]  # NUL; lone surrogates


def _big() -> st.SearchStrategy[str]:
    """Strings around and beyond the 64 KiB content limit, in 1- to 4-byte characters."""
    units = st.sampled_from(["a", "\u00e9", "\u20ac", "\U0001f600", "\u202e"])
    sizes = st.sampled_from([-2, -1, 0, 1, 2, 4096, 1 << 20])
    return st.builds(
        lambda unit, extra: (
            unit * max(1, (CONTENT_LIMIT + extra) // len(unit.encode()))
            + "a" * max(0, (CONTENT_LIMIT + extra) % len(unit.encode()))
        ),
        units,
        sizes,
    )


def hostile_text() -> st.SearchStrategy[str]:
    pieces = st.sampled_from(INJECTIONS + METACHARACTERS + UNICODE + CLIENT_REFUSED)
    return st.one_of(
        pieces,
        st.lists(pieces, min_size=2, max_size=5).map("".join),
        st.text(max_size=40),  # Hypothesis' own alphabet: every plane, no surrogates
        st.text(alphabet=st.characters(categories=["Cc", "Cf", "Mn", "Zs", "Zl", "Zp", "So"]), max_size=20),
        st.text(alphabet=st.characters(categories=["Cs"]), min_size=1, max_size=3),
        st.from_regex(r"[a-z][a-z0-9_-]{0,70}", fullmatch=True),  # near-valid names
        _big(),
    )


class Tried:
    """Counts what was sent, per outcome (stored, accepted, or the refusal), for the figures."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.counts: dict[str, int] = {}
        TRIED.append(self)

    def add(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def refused(self) -> int:
        return self.total - self.counts.get("stored", 0) - self.counts.get("accepted", 0)


TRIED: list[Tried] = []
TRIED_TEXT = Tried("add_node text")
TRIED_EVENTS = Tried("add_event text and payload")
TRIED_ANY = Tried("any text argument")
TRIED_INJECTION = Tried("injection corpus")
TRIED_NUMBERS = Tried("numbers")
TRIED_UUIDS = Tried("uuid junk")


@pytest.fixture(scope="module", autouse=True)
def _report_tried(figures: Any) -> Iterator[None]:
    yield
    for tried in TRIED:
        if tried.total:
            figures(
                "5 hostile input (SQL)",
                inputs_tried=tried.total,
                refused_typed=tried.refused,
                stored_read_back_exactly=tried.counts.get("stored", 0),
                accepted_own_rows_only=tried.counts.get("accepted", 0),
            )


@pytest.fixture(scope="module")
def hostile_db(module_db: str) -> Iterator[tuple[psycopg.Connection[Any], dict[str, Any]]]:
    with psycopg.connect(module_db, autocommit=True) as conn:
        node = add_node(conn, "alice", "alice's memory")
        event = add_event(conn, "alice", "alice's evidence")
        token = hashlib.sha256(b"alice token").hexdigest()
        conn.execute("SELECT prme.create_api_token('alice', %s, 'laptop')", [token])
        add_node(conn, "bob", "bob's memory")
        yield conn, {"node": node["id"], "event": event["id"], "token": token}


def attempt(conn: psycopg.Connection[Any], call: Callable[[], Any]) -> tuple[str | None, Any]:
    """Run call in a savepoint: (None, result) or (what refused it, None); untyped errors raise."""
    try:
        with conn.transaction():
            return None, call()
    except psycopg.DataError as exc:
        if exc.sqlstate is None and "NUL" in str(exc):  # refused by psycopg before sending
            return "client:NUL", None
        if exc.sqlstate in TYPED_SQLSTATES:
            return exc.sqlstate, None
        raise
    except UnicodeEncodeError as exc:
        if "surrogates not allowed" in str(exc):
            return "client:surrogate", None
        raise
    except psycopg.Error as exc:
        if exc.sqlstate in TYPED_SQLSTATES:
            return exc.sqlstate, None
        raise


def check_node_record(conn: psycopg.Connection[Any], user_id: str, node_id: uuid.UUID) -> None:
    """The node's journal verifies, replays, and its record is RFC 8785 canonical with a true sha256."""
    assert journal_problems(conn, [user_id]) == []
    row = conn.execute("SELECT matches, problem FROM prme.replay_node(%s, %s)", [user_id, node_id]).fetchone()
    assert row is not None and row[0], row
    for record, checksum in conn.execute(
        "SELECT record, checksum FROM prme.journal WHERE user_id = %s AND node_id = %s", [user_id, node_id]
    ):
        data = record.encode("utf-8")
        assert rfc8785.dumps(json.loads(record)) == data, "journal record is not RFC 8785 canonical"
        assert hashlib.sha256(data).hexdigest() == checksum


def as_decimal_json(value: Any) -> Any:
    return json.loads(json.dumps(value), parse_float=Decimal, parse_int=Decimal)


TEXT_ARGS = ["user_id", "content", "scope", "namespace", "kind", "stability", "decay_profile"]
NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}", re.ASCII)
BLANKS = " \t\n\r\f\v"  # ASCII whitespace: Python's \v is the vertical tab, U+000B


def _encodable(value: str) -> bool:
    return "\x00" not in value and not any(0xD800 <= ord(c) <= 0xDFFF for c in value)


def _valid_user_id(value: str) -> bool | None:
    """None where docs/DESIGN.md leaves it to the server's notion of a control character."""
    if not _encodable(value) or not 1 <= len(value) <= 256 or value != value.strip(" "):
        return False
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
        return False
    return True if all(c.isprintable() for c in value) else None


#: When an add_node text argument is valid, per docs/DESIGN.md section 2 and the validation module.
MODEL: dict[str, Callable[[str], bool | None]] = {
    "user_id": _valid_user_id,
    "content": lambda v: _encodable(v) and v.strip(BLANKS) != "" and len(v.encode()) <= CONTENT_LIMIT,
    "scope": lambda v: NAME.fullmatch(v) is not None,
    "namespace": lambda v: NAME.fullmatch(v) is not None,
    "kind": lambda v: NAME.fullmatch(v) is not None,
    "stability": lambda v: v in ("low", "semi-stable", "stable"),
    "decay_profile": lambda v: v in ("permanent", "slow", "medium", "fast", "rapid"),
}


@SETTINGS
@given(argument=st.sampled_from(TEXT_ARGS), value=hostile_text())
@example(argument="content", value="v")  # found by hand: E'\v' in a blank set is the letter v
@example(argument="content", value="\x0b")
def test_hostile_text_in_add_node_is_refused_or_kept_exactly(
    hostile_db: tuple[psycopg.Connection[Any], dict[str, Any]], argument: str, value: str
) -> None:
    conn, _ = hostile_db
    args: dict[str, Any] = {"user_id": "carol", "content": "a memory", argument: value}
    with conn.transaction(force_rollback=True):
        before, owned_before = snapshot(conn), owned_snapshot(conn)
        refused, row = attempt(conn, lambda: add_node(conn, **args))
        after, owned_after = snapshot(conn), owned_snapshot(conn)
        if refused is not None:
            TRIED_TEXT.add(refused)
            assert after == before, f"{argument}={value!r} was refused ({refused}) but changed rows"
            assert refused.startswith("client:") or MODEL[argument](value) is not True, (
                f"{argument}={value!r} is valid (docs/DESIGN.md) but was refused with {refused}"
            )
            return
        TRIED_TEXT.add("stored")
        assert MODEL[argument](value) is not False, f"{argument}={value!r} is invalid but was stored"
        assert row[argument] == value
        with conn.cursor(row_factory=dict_row) as cur:
            stored = cur.execute("SELECT * FROM prme.get_node(%s, %s)", [row["user_id"], row["id"]]).fetchone()
        assert stored is not None and stored[argument] == value, f"{argument} not read back exactly"
        assert core_shape(snapshot_diff(before, after)) == {"nodes": (0, 1), "journal": (0, 1)}
        assert changed_owners(owned_before, owned_after) == {row["user_id"]}
        check_node_record(conn, row["user_id"], row["id"])


@SETTINGS
@given(
    argument=st.sampled_from(["user_id", "content", "scope", "namespace", "kind"]),
    value=hostile_text(),
    payload=st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats()
        | st.text(max_size=20)
        | st.sampled_from(INJECTIONS + UNICODE + CLIENT_REFUSED),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(st.text(max_size=10) | st.sampled_from(INJECTIONS + CLIENT_REFUSED), children, max_size=3)
        ),
        max_leaves=6,
    )
    | st.sampled_from([{"big": "x" * CONTENT_LIMIT}, {"n": 10**400}, {"n": 1e308}, {"n": -0.0}, [], "{}", 1]),
)
def test_hostile_text_and_payload_in_add_event_are_refused_or_kept_exactly(
    hostile_db: tuple[psycopg.Connection[Any], dict[str, Any]], argument: str, value: str, payload: Any
) -> None:
    conn, _ = hostile_db
    args: dict[str, Any] = {"user_id": "carol", "content": "evidence", argument: value, "payload": Jsonb(payload)}
    with conn.transaction(force_rollback=True):
        before, owned_before = snapshot(conn), owned_snapshot(conn)
        refused, row = attempt(conn, lambda: add_event(conn, **args))
        after, owned_after = snapshot(conn), owned_snapshot(conn)
        if refused is not None:
            TRIED_EVENTS.add(refused)
            assert after == before
            return
        TRIED_EVENTS.add("stored")
        assert row[argument] == value
        assert isinstance(payload, dict), "only a JSON object is a valid payload"
        with conn.cursor(row_factory=dict_row) as cur:
            stored = cur.execute(
                "SELECT * FROM prme.events WHERE user_id = %s AND id = %s", [row["user_id"], row["id"]]
            ).fetchone()
        assert stored is not None and stored[argument] == value
        # jsonb keeps a number's decimal value (6.033221550578201e+16 comes back as the integer
        # 60332215505782010): compare decimal values, not Python floats.
        assert as_decimal_json(stored["payload"]) == as_decimal_json(payload)
        assert core_shape(snapshot_diff(before, after)) == {"events": (0, 1)}
        assert changed_owners(owned_before, owned_after) == {row["user_id"]}


@pytest.fixture(scope="module")
def text_targets(hostile_db: tuple[psycopg.Connection[Any], dict[str, Any]]) -> list[tuple[Any, str, dict[str, Any]]]:
    """(function, text argument, valid arguments as alice) for every text and text[] argument of
    every API function (an array argument gets the hostile value as its one element)."""
    conn, _ = hostile_db
    own = objects_of(conn, "alice")
    targets = []
    for function in api_functions(conn):
        try:
            valid = arguments(function, "alice", own)
        except MissingSample as exc:
            pytest.fail(str(exc))
        targets += [(function, name, valid) for name, type_ in function.args if type_ in ("text", "text[]")]
    return targets


@SETTINGS
@given(data=st.data())
def test_hostile_text_in_every_text_argument_changes_nothing_else(
    hostile_db: tuple[psycopg.Connection[Any], dict[str, Any]],
    text_targets: list[tuple[Any, str, dict[str, Any]]],
    data: st.DataObject,
) -> None:
    conn, _ = hostile_db
    function, argument, valid = data.draw(st.sampled_from(text_targets), label="target")
    value = data.draw(hostile_text(), label="value")
    _refused_or_own_change(
        conn, function, {**valid, argument: _typed(function, argument, value)}, TRIED_ANY, baseline(conn)
    )


def test_injection_strings_in_every_text_argument(
    hostile_db: tuple[psycopg.Connection[Any], dict[str, Any]],
    text_targets: list[tuple[Any, str, dict[str, Any]]],
) -> None:
    """Every injection string in every text argument of every API function, exhaustively."""
    conn, _ = hostile_db
    base = baseline(conn)
    for function, argument, valid in text_targets:
        for value in INJECTIONS:
            _refused_or_own_change(
                conn, function, {**valid, argument: _typed(function, argument, value)}, TRIED_INJECTION, base
            )
    assert baseline(conn) == base


def _typed(function: Any, argument: str, value: str) -> Any:
    return [value] if dict(function.args)[argument] == "text[]" else value


Baseline = tuple[dict[str, set[tuple[str | None, str]]], str]


def baseline(conn: psycopg.Connection[Any]) -> Baseline:
    """Rows and catalog of the module's database; every generated call is rolled back to it."""
    return owned_snapshot(conn), catalog_fingerprint(conn)


def _refused_or_own_change(
    conn: psycopg.Connection[Any], function: Any, args: dict[str, Any], tried: Tried, base: Baseline
) -> None:
    """Call as prme_app: typed refusal and no change, or success changing only the caller's own rows.

    The state before every call is base (each call is rolled back), so only the state after
    the call, still inside its transaction, is read."""
    before, catalog = base
    query = api_call(function, args)
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL ROLE prme_app")
        refused, _ = attempt(conn, lambda: conn.execute(query, args).fetchall())
        conn.execute("RESET ROLE")
        after = owned_snapshot(conn)
        assert catalog_fingerprint(conn) == catalog, f"{function.signature} {args}: the catalog changed"
    tried.add(refused or "accepted")
    where = f"{function.signature} with {args!r:.300}"
    if refused is not None:
        assert after == before, f"{where}: refused ({refused}) but changed rows"
        return
    for table in before:
        for owner, row in before[table] ^ after[table]:  # a changed row must be the caller's own
            if function.name == "register_embedding_model" and table == "embedding_models":
                # Registering a model is cluster-wide by design (rows of '*'): it may add the one
                # model it was given, which names no owner's data (docs/RECALL.md).
                added = after[table] - before[table]
                assert owner == "*" and len(added) == 1 and not before[table] - after[table], where
                continue
            assert owner == args.get("user_id"), f"{where}: changed a row of {owner!r} in {table}: {row:.200}"


NUMBER_ARGS = ["confidence_base", "salience_base"]
#: What numeric_in parses as a finite number (ASCII digits and blanks only).
NUMERIC_SYNTAX = re.compile(r"[ \t\n\r\f\v]*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[ \t\n\r\f\v]*")


def _valid_fraction(value: Decimal) -> bool:
    """docs/DESIGN.md: a number in [0, 1] with at most 4 decimals (numeric(5,4) holds it exactly)."""
    if not value.is_finite():
        return False
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    return Decimal(0) <= value <= Decimal(1) and max(0, -exponent) <= 4


DECIMALS = st.one_of(
    st.sampled_from(
        [
            Decimal(x)
            for x in (
                "NaN",
                "sNaN",
                "-NaN",
                "Infinity",
                "-Infinity",
                "-0",
                "-0.0000",
                "0",
                "1",
                "1.0000",
                "1.00000",
                "0.5",
                "0.50000",
                "0.12345",
                "0.9999",
                "1.0001",
                "-0.0001",
                "0E-7",
                "5E-1",
                "1E+1",
                "1e308",
                "1e-308",
                "0.0001",
                "0.00001",
            )
        ]
    ),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.decimals(min_value=-1, max_value=2, places=4),
    st.decimals(min_value=0, max_value=1),
)
FLOATS = st.one_of(
    st.sampled_from(
        [float("nan"), float("inf"), float("-inf"), -0.0, 1e308, 5e-324, 0.1, 0.30000000000000004, 0.12345, 1.0, 0.5]
    ),
    st.floats(),
    st.floats(min_value=0, max_value=1),
)
NUMERIC_TEXT = st.one_of(
    st.sampled_from(
        [
            "NaN",
            "nan",
            "Infinity",
            "-inf",
            "+inf",
            "-0",
            " 0.5 ",
            "1e-400",
            "0x1",
            "1_0",
            "1,5",
            "\u0660\u066b\u0665",
            "\uff10.\uff15",
            "",
            " ",
            "0.5; DROP TABLE prme.nodes",
            ".5",
            "5.",
            "+0.25",
            "1e0",
            "0.5e0",
            "50e-2",
            "5000e-4",
            "0.50000",
        ]
    ),
    st.from_regex(r"[+-]?[0-9]{0,3}(\.[0-9]{0,6})?([eE][+-]?[0-9]{1,3})?", fullmatch=True),
)


@SETTINGS
@given(
    argument=st.sampled_from(NUMBER_ARGS),
    sent=st.one_of(
        st.tuples(st.just("numeric"), DECIMALS),
        st.tuples(st.just("float8::numeric"), FLOATS),
        st.tuples(st.just("text"), NUMERIC_TEXT),
    ),
)
def test_hostile_numbers_are_refused_or_kept_exactly(
    hostile_db: tuple[psycopg.Connection[Any], dict[str, Any]], argument: str, sent: tuple[str, Any]
) -> None:
    conn, _ = hostile_db
    how, value = sent
    placeholder = "%s::numeric" if how == "float8::numeric" else "%s"
    query = f"SELECT * FROM prme.add_node(user_id => 'carol', content => 'n', {argument} => {placeholder})"
    with conn.transaction(force_rollback=True):
        before = snapshot(conn)
        with conn.cursor(row_factory=dict_row) as cur:
            refused, row = attempt(conn, lambda: cur.execute(query, [value]).fetchone())
        after = snapshot(conn)
    # What PostgreSQL makes of the value before prme sees it: a float8 becomes numeric with
    # 15 significant digits (float8_numeric); text is parsed by numeric_in.
    if how == "numeric":
        expected: Decimal | None = value
    elif how == "float8::numeric":
        expected = Decimal(f"{value:.15g}") if value == value and abs(value) != float("inf") else Decimal("NaN")
    else:
        try:
            expected = Decimal(value.strip()) if NUMERIC_SYNTAX.fullmatch(value) else None
        except ArithmeticError:
            expected = None
    if refused is not None:
        TRIED_NUMBERS.add(refused)
        assert after == before
        assert expected is None or not _valid_fraction(expected), f"{how} {value!r} is valid but was refused"
        return
    TRIED_NUMBERS.add("stored")
    assert expected is not None and _valid_fraction(expected), f"{how} {value!r} was accepted"
    assert row[argument] == expected, f"{how} {value!r} stored as {row[argument]}"


UUID_ARGS = [
    ("add_node", "node_id"),
    ("add_event", "event_id"),
    ("get_node", "node_id"),
    ("archive_node", "node_id"),
    ("replay_node", "node_id"),
    ("reinforce", "node_id"),
    ("reinforce", "evidence_id"),
    ("reinforce", "request_id"),
    ("list_nodes", "after_node_id"),
]
UUID_JUNK = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "null",
            "NULL",
            "{}",
            "0",
            "00000000-0000-0000-0000-00000000000",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
            "A0EEBC999C0B4EF8BB6D6BB9BD380A11",
            "a0ee-bc99-9c0b4ef8-bb6d6bb9-bd380a11",
            " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11; DROP TABLE prme.nodes",
            "g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-",
            "urn:uuid:a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "\uff41" + "0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "a0eebc99\u200b-9c0b-4ef8-bb6d-6bb9bd380a11",
        ]
    ),
    st.uuids()
    .map(str)
    .flatmap(
        lambda u: st.sampled_from(
            [
                u.upper(),
                u.replace("-", ""),
                "{" + u + "}",
                u[:-1],
                u + "0",
                u[:8] + "--" + u[9:],
                u.replace("-", "_"),
            ]
        )
    ),
    st.text(alphabet="0123456789abcdefABCDEF-{}", max_size=40),
    hostile_text(),
)


@SETTINGS
@given(target=st.sampled_from(UUID_ARGS), junk=UUID_JUNK)
def test_uuid_like_junk_never_reaches_a_table(
    hostile_db: tuple[psycopg.Connection[Any], dict[str, Any]], target: tuple[str, str], junk: str
) -> None:
    conn, ids = hostile_db
    function, argument = target
    args: dict[str, Any] = {"user_id": "alice"}
    if function in ("add_node", "add_event"):
        args["content"] = "x"
    if function in ("get_node", "archive_node", "replay_node", "reinforce"):
        args["node_id"] = ids["node"]
    args[argument] = junk  # str: sent untyped, so the server parses it as uuid
    named = ", ".join(f"{name} => %({name})s" for name in args)
    with conn.transaction(force_rollback=True):
        before = snapshot(conn)
        refused, rows = attempt(conn, lambda: conn.execute(f"SELECT * FROM prme.{function}({named})", args).fetchall())
        after = snapshot(conn)
    hex_digits = re.sub(r"[{}-]", "", junk).lower()
    well_formed = re.fullmatch(r"\{?[0-9a-fA-F]{4}(-?[0-9a-fA-F]{4}){7}\}?", junk) is not None and (
        junk.startswith("{") == junk.endswith("}")
    )
    if refused is not None:
        TRIED_UUIDS.add(refused)
        assert after == before
        assert refused != "22P02" or not well_formed, f"{junk!r} is a well-formed uuid but was refused"
        return
    TRIED_UUIDS.add("accepted")
    assert well_formed, f"{junk!r} was accepted as a uuid"
    canonical = str(uuid.UUID(hex_digits))
    for table, (_, new) in snapshot_diff(before, after).items():
        for row in new:
            assert junk == canonical or junk not in row, f"the raw text {junk!r} reached {table}: {row:.200}"
    if function in ("add_node", "add_event"):
        assert rows[0][0] == uuid.UUID(hex_digits), "the stored id is not the one sent"


def test_nul_and_surrogates_are_refused_before_or_at_the_server(
    hostile_db: tuple[psycopg.Connection[Any], dict[str, Any]], figures: Any
) -> None:
    """psycopg refuses NUL (DataError) and lone surrogates (UnicodeEncodeError) before sending;
    built on the server, NUL is 54000, a surrogate code point 54000 or 42601, bad UTF-8 22021,
    and \\u0000 in JSON 22P05. Nothing is stored in any case."""
    conn, _ = hostile_db
    before = snapshot(conn)
    with pytest.raises(psycopg.DataError, match="NUL"):
        conn.execute("SELECT prme.add_node('carol', %s)", ["a\x00b"])
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):
        conn.execute("SELECT prme.add_node('carol', %s)", ["\ud800"])
    server_side = {
        "SELECT prme.add_node('carol', 'a' || chr(0))": "54000",
        "SELECT prme.add_node('carol', chr(55296))": "54000",
        "SELECT prme.add_node('carol', U&'\\D800')": "42601",
        "SELECT prme.add_node('carol', convert_from('\\xff'::bytea, 'UTF8'))": "22021",
        "SELECT prme.add_event('carol', 'x', payload => '{\"a\": \"\\u0000\"}')": "22P05",
        "SELECT prme.add_event('carol', 'x', payload => '{\"a\": \"\\ud800\"}')": "22P02",
    }
    for statement, sqlstate in server_side.items():
        with pytest.raises(psycopg.Error) as error:
            conn.execute(statement)
        assert error.value.sqlstate == sqlstate, statement
    assert snapshot(conn) == before
    figures("5 hostile input (SQL)", inputs_tried=2 + len(server_side), refused_typed=2 + len(server_side))


CURATED = [*UNICODE, *INJECTIONS, *METACHARACTERS, "\x01\x02\x1f", "tab\there", "line\nbreak", 'quote"back\\slash']


def test_curated_hostile_values_survive_commit_and_a_new_connection(db_dsn: str, figures: Any) -> None:
    """Committed, then read back on another connection: content and user_id byte for byte."""
    stored: list[tuple[str, str, uuid.UUID]] = []
    refused = 0
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        for i, value in enumerate(CURATED):
            for user_id, content in ((value, f"memory {i}"), ("carol", value)):
                outcome, node = attempt(conn, lambda u=user_id, c=content: add_node(conn, u, c))
                if outcome is None:
                    stored.append((user_id, content, node["id"]))
                else:
                    assert outcome == "PR422", (user_id, content, outcome)
                    refused += 1
        boundary = "\u00e9" * (CONTENT_LIMIT // 2)  # exactly 65536 bytes
        stored.append(("carol", boundary, add_node(conn, "carol", boundary)["id"]))
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        for user_id, content, node_id in stored:
            row = conn.execute("SELECT user_id, content FROM prme.get_node(%s, %s)", [user_id, node_id]).fetchone()
            assert row == (user_id, content)
            check_node_record(conn, user_id, node_id)
        _, records, bad = replay_all(conn)
        assert bad == []
        assert journal_problems(conn) == []
    figures(
        "5 hostile input (SQL)",
        inputs_tried=2 * len(CURATED) + 1,
        refused_typed=refused,
        stored_read_back_exactly=len(stored),
        records_verified=records,
    )


def test_content_limit_is_exactly_64_kib_of_utf8(conn: psycopg.Connection[Any]) -> None:
    for unit in ("a", "\u00e9", "\u20ac", "\U0001f600"):
        width = len(unit.encode())
        fits = unit * (CONTENT_LIMIT // width)
        assert add_node(conn, "carol", fits)["content"] == fits
        with pytest.raises(psycopg.Error) as error:
            add_node(conn, "carol", fits + unit)
        assert error.value.sqlstate == "PR422"
    with pytest.raises(psycopg.Error) as error:
        add_node(conn, "carol", "a" * (1 << 20))
    assert error.value.sqlstate == "PR422"


@pytest.mark.parametrize("blank", [" ", "   ", "\t", "\n", "\r\n", "\x0b", "\x0c", " \t\n\r\x0b\x0c"])
def test_blank_content_is_refused(conn: psycopg.Connection[Any], blank: str) -> None:
    """_valid_content promises non-blank content; ' ' is refused, so must '\\t' and '\\n' be."""
    with pytest.raises(psycopg.Error) as error:
        add_node(conn, "carol", blank)
    assert error.value.sqlstate == "PR422", f"{blank!r} was stored as content"


@pytest.mark.parametrize("content", ["v", "vv", " v ", "\tv\n", "f", "\\v"])
def test_content_that_is_not_blank_is_kept(conn: psycopg.Connection[Any], content: str) -> None:
    """The blank set must be whitespace only. E'\\v' is not an escape in PostgreSQL: it is the
    letter v, so btrim(content, E' \\t\\n\\r\\f\\v') = '' refuses a memory that says "v"."""
    assert add_node(conn, "carol", content)["content"] == content
