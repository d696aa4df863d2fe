"""Issue 17, item 12: the API answers the same whatever standard_conforming_strings a caller sets.

A session may run with ``standard_conforming_strings = off`` (old drivers and
applications still do). PL/pgSQL parses each statement of a function body when it
first runs it, in the caller's session, so a plain literal like ``'[\\x01-\\x1f]'``
in a body means one thing with the setting on and another with it off (the backslash
becomes an escape), and ``U&'...'`` literals are refused outright. Functions write
such literals as ``E'...'`` with doubled backslashes instead, whose value is the same
under either setting (a SET clause per function would pin it too, at a cost on every
call of the hot functions).

* a catalog check: no string literal in any prme function body has a backslash unless
  it is an E'' literal, and none is a U&'' literal (so functions added later are held
  to it too);
* the suite's core calls: every API function, called with valid arguments, and the
  calls that reach each formerly affected literal (owner and label validation,
  correction phrasing, recall's query, RFC 8785 key order and numbers, uuid v5 ids,
  ledger times and long memories), answer the same in a session started with the
  setting off as in two sessions with it on, once ids, times and checksums that
  differ between the two normal sessions are set aside; the session with the setting
  off gets no warning about backslashes.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
import rfc8785
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from reliability_support import (
    MissingSample,
    add_event,
    add_node,
    api_call,
    api_functions,
    arguments,
    normalise,
    objects_of,
    reinforce,
)

LEGACY_STRINGS = "-c standard_conforming_strings=off -c escape_string_warning=on"

_DOLLAR_QUOTE = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")


def string_literals(source: str) -> Iterator[tuple[str, str]]:
    """(prefix, body) of every quoted string literal in SQL or PL/pgSQL text: prefix is
    what is glued to the opening quote (``E``, ``U&``, ``B``, ...), body the text between
    the quotes as written. Comments and quoted identifiers are skipped; dollar-quoted
    strings are scanned too (they hold the SQL of EXECUTE)."""
    i, end = 0, len(source)
    while i < end:
        if source.startswith("--", i):
            newline = source.find("\n", i)
            i = end if newline < 0 else newline + 1
        elif source.startswith("/*", i):
            depth, i = 1, i + 2
            while i < end and depth:
                depth += 1 if source.startswith("/*", i) else -1 if source.startswith("*/", i) else 0
                i += 2 if source.startswith(("/*", "*/"), i) else 1
        elif source[i] == '"':
            i = source.index('"', i + 1)
            while source.startswith('""', i):
                i = source.index('"', i + 2)
            i += 1
        elif (tag := _DOLLAR_QUOTE.match(source, i)) and not (i and (source[i - 1].isalnum() or source[i - 1] == "_")):
            close = source.index(tag.group(0), tag.end())
            yield from string_literals(source[tag.end() : close])
            i = close + len(tag.group(0))
        elif source[i] == "'":
            start = i
            while start and (source[start - 1].isalnum() or source[start - 1] == "&"):
                start -= 1
            prefix, escapes, j = source[start:i], source[start:i].upper() == "E", i + 1
            while True:
                if (escapes and source[j] == "\\") or source.startswith("''", j):
                    j += 2
                elif source[j] == "'":
                    break
                else:
                    j += 1
            yield prefix, source[i + 1 : j]
            i = j + 1
        else:
            i += 1


def setting_dependent(source: str) -> list[str]:
    """The literals of source whose value depends on standard_conforming_strings."""
    return [
        f"{prefix}'{body}'"
        for prefix, body in string_literals(source)
        if prefix.upper().startswith("U&") or (prefix.upper() != "E" and "\\" in body)
    ]


def test_the_literal_scanner_finds_what_matters() -> None:
    source = (
        "-- a comment with '\\x01'\n/* and /* nested */ '\\s' */ \"odd\"\"name\" "
        "x ~ '[\\x01]' OR y ~ E'\\\\s+' OR z = E'it\\'s' OR w = U&'\\0041' OR v = 'don''t' "
        "EXECUTE $q$SELECT '\\d'$q$; SELECT $1"
    )
    assert setting_dependent(source) == ["'[\\x01]'", "U&'\\0041'", "'\\d'"]
    assert [body for prefix, body in string_literals(source) if prefix == "E"] == ["\\\\s+", "it\\'s"]


def test_no_function_body_depends_on_standard_conforming_strings(superuser: psycopg.Connection[Any]) -> None:
    functions = superuser.execute(
        "SELECT p.oid::regprocedure::text, p.prosrc FROM pg_catalog.pg_proc AS p "
        "WHERE p.pronamespace = 'prme'::regnamespace ORDER BY 1"
    ).fetchall()
    assert len(functions) > 50
    found = {signature: literals for signature, source in functions if (literals := setting_dependent(source))}
    assert found == {}, "write these as E'' literals with doubled backslashes:\n" + "\n".join(
        f"{signature}: {', '.join(literals)}" for signature, literals in found.items()
    )


# -- the same calls in sessions with the setting on and off -------------------------------


@dataclass
class Sessions:
    normal: psycopg.Connection[Any]
    again: psycopg.Connection[Any]
    legacy: psycopg.Connection[Any]
    warnings: list[str]
    alice: dict[str, list[Any]]


@pytest.fixture(scope="module")
def sessions(module_db: str) -> Iterator[Sessions]:
    """Alice owns one object of each kind; three sessions, the last with the setting off from its start
    (PL/pgSQL keeps what a session parsed, so one session must never see both settings)."""
    with psycopg.connect(module_db, autocommit=True) as setup:
        event = add_event(setup, "alice", "alice said she prefers green tea")
        node = add_node(setup, "alice", "alice prefers green tea over coffee")
        reinforce(setup, node["id"], "alice", event["id"], uuid.uuid4())
        setup.execute("SELECT prme.create_api_token('alice', %s, 'laptop')", [hashlib.sha256(b"t").hexdigest()])
        setup.execute("SELECT prme.maintenance_patch('alice')")
        payload = {"content": "queued evidence"}
        setup.execute(
            "SELECT prme.submit_operation('alice', %s, 2, 'add_event', '{}', %s, %s)",
            [str(uuid.uuid4()), hashlib.sha256(rfc8785.dumps(payload)).hexdigest(), Jsonb(payload)],
        )
        setup.execute("SELECT prme.link_correction('alice', 'no, something else entirely', '{}')")
        setup.execute("SELECT prme.publish_snapshot('alice', 'personal')")
        alice = objects_of(setup, "alice")
    legacy_dsn = make_conninfo(**{**conninfo_to_dict(module_db), "options": LEGACY_STRINGS})  # type: ignore[arg-type]
    with (
        psycopg.connect(module_db, autocommit=True) as normal,
        psycopg.connect(module_db, autocommit=True) as again,
        psycopg.connect(legacy_dsn, autocommit=True) as legacy,
    ):
        assert legacy.execute("SHOW standard_conforming_strings").fetchone() == ("off",)
        warnings: list[str] = []
        legacy.add_notice_handler(lambda notice: warnings.append(str(notice.message_primary)))
        yield Sessions(normal, again, legacy, warnings, alice)


Outcome = tuple[str | None, Any]


def run(conn: psycopg.Connection[Any], statements: list[tuple[Any, Any]]) -> Outcome:
    """The statements as prme_app in one transaction, rolled back: (None, every result) or (SQLSTATE, message)."""
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL ROLE prme_app")
        try:
            with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
                return None, [cur.execute(query, params).fetchall() for query, params in statements]
        except psycopg.Error as exc:
            if exc.sqlstate is None:  # a client-side error is a broken test, not an outcome
                raise
            return exc.sqlstate, exc.diag.message_primary


def agree(first: Any, second: Any, legacy: Any, where: str) -> None:
    """legacy equals first wherever the two normal sessions (first, second) agree; where they
    do not (new ids, now(), checksums over them), it equals first once those are normalised."""
    if first == second:
        assert legacy == first, f"{where}: {legacy!r:.400} with the setting off, {first!r:.400} with it on"
    elif isinstance(first, dict) and isinstance(second, dict) and first.keys() == second.keys():
        assert isinstance(legacy, dict) and legacy.keys() == first.keys(), where
        for key in first:
            agree(first[key], second[key], legacy[key], f"{where}.{key}")
    elif isinstance(first, list | tuple) and isinstance(second, list | tuple) and len(first) == len(second):
        assert isinstance(legacy, list | tuple) and len(legacy) == len(first), where
        for position, (one, two, three) in enumerate(zip(first, second, legacy, strict=True)):
            agree(one, two, three, f"{where}[{position}]")
    else:
        assert normalise(legacy, {}) == normalise(first, {}), f"{where}: {legacy!r:.400} against {first!r:.400}"


def answers_alike(sessions: Sessions, statements: list[tuple[Any, Any]], where: str) -> Outcome:
    sessions.warnings.clear()
    first, second = run(sessions.normal, statements), run(sessions.again, statements)
    legacy = run(sessions.legacy, statements)
    agree(first, second, legacy, where)
    assert [w for w in sessions.warnings if "escape" in w or "\\" in w] == [], where
    return first


def test_every_api_function_answers_alike_with_the_setting_off(sessions: Sessions) -> None:
    functions = api_functions(sessions.normal)
    assert len(functions) > 40
    succeeded = 0
    for function in functions:
        try:
            args = arguments(function, "alice", sessions.alice)
        except MissingSample as exc:
            pytest.fail(str(exc))
        sqlstate, _ = answers_alike(sessions, [(api_call(function, args), args)], function.signature)
        succeeded += sqlstate is None
    assert succeeded > 0.8 * len(functions), "most calls get past validation to the data"


def _ledger_calls() -> list[tuple[Any, Any]]:
    """An event with a fractional ISO time, and a memory longer than its token budget (cut
    into parts at ASCII whitespace, vertical tab included), run by the executor."""
    payloads = {
        "add_event": {"content": "said at a precise time", "occurred_at": "2024-05-06T07:08:09.123456+02:00"},
        "add_node": {"content": "one\vtwo\tthree\fFour five six seven", "token_budget": 2},
    }
    ids = {kind: str(uuid.uuid5(uuid.NAMESPACE_URL, f"urn:test:{kind}")) for kind in payloads}
    submit = "SELECT state FROM prme.submit_operation('alice', %s, 2, %s, '{}', %s, %s)"
    receipt = "SELECT kind, state, result, error FROM prme.get_receipt('alice', %s)"
    return [
        *[
            (submit, [ids[kind], kind, hashlib.sha256(rfc8785.dumps(payload)).hexdigest(), Jsonb(payload)])
            for kind, payload in payloads.items()
        ],
        *[("SELECT * FROM prme.run_operations(10, 'settings-test', 100)", None)] * 3,
        *[(receipt, [ids[kind]]) for kind in payloads],
        ("SELECT * FROM prme.operation_parts('alice', %s)", [ids["add_node"]]),
    ]


MESSAGES = [
    "Actually, I prefer tabs",
    "no, I use spaces now",
    "please don't\tdo that again",
    "I prefer tea over coffee",
    "you should   never deploy on Fridays",
    "that's wrong",
    "I told you so.",
    "sure, sounds good",
    "sss ssss",
]

TARGETED: dict[str, list[tuple[Any, Any]]] = {
    "a user_id with a control character is refused": [("SELECT * FROM prme.add_node(%s, 'x')", ["al\x01ice"])],
    "a user_id with a C1 control character is refused": [("SELECT * FROM prme.add_node(%s, 'x')", ["al\x9fice"])],
    "a token label with a control character is refused": [
        ("SELECT prme.create_api_token('alice', %s, %s)", [hashlib.sha256(b"u").hexdigest(), "lap\x07top"])
    ],
    "a profile_id with a control character is refused": [
        (
            "SELECT outcome FROM prme.record_outcome('alice', "
            "(SELECT id FROM prme.list_nodes('alice') LIMIT 1), 'neutral_exposure', profile_id => %s)",
            ["p\x01"],
        )
    ],
    "correction phrasing": [
        ("SELECT m, prme.is_correction(m) FROM unnest(%s::text[]) WITH ORDINALITY AS t (m, n) ORDER BY n", [MESSAGES])
    ],
    "recall with a query": [
        ("SELECT rank, content, relevance FROM prme.recall('alice', %s)", ["green tea, back\\slash"])
    ],
    "RFC 8785 key order and numbers": [
        (
            "SELECT prme.canonical_json(%(v)s), prme.payload_hash(%(v)s)",
            {"v": Jsonb({"\ue000": 1, "\U0001f600": 2, "\U0010ffff": 3, "a": 1.5, "b": 1e21, "c": 0.000001, "d": 3})},
        )
    ],
    "uuid v5 ids": [("SELECT prme.derived_id('6f1c7c52-8d54-4a6e-9d7b-0d3c8e1f2a3b')", None)],
    "ledger times and long memories": _ledger_calls(),
}


def _expected(name: str, results: list[list[dict[str, Any]]]) -> None:
    """What the targeted calls must answer (so that agreeing is not agreeing on a failure)."""
    if name == "correction phrasing":
        assert [row["is_correction"] for row in results[0]] == [True] * 7 + [False] * 2, results
    elif name == "recall with a query":
        assert [row["content"] for row in results[0]] == ["alice prefers green tea over coffee"], results
    elif name == "ledger times and long memories":
        receipts, parts = results[-3:-1], results[-1]
        assert [(r[0]["kind"], r[0]["state"]) for r in receipts] == [
            ("add_event", "committed"),
            ("add_node", "committed"),
        ]
        # seven words at two per part: VT, TAB and FF separate words as spaces do
        assert [(p["token_start"], p["token_end"]) for p in parts] == [(0, 2), (2, 4), (4, 6), (6, 7)], parts


@pytest.mark.parametrize("name", list(TARGETED))
def test_calls_that_reach_backslash_literals_answer_alike(sessions: Sessions, name: str) -> None:
    sqlstate, result = answers_alike(sessions, TARGETED[name], name)
    if "refused" in name:
        assert sqlstate == "PR422", result
    else:
        assert sqlstate is None, result
        _expected(name, result)
