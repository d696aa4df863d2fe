"""The PL/pgSQL RFC 8785 canonicalizer and uuid v5 agree with Python, byte for byte.

prme.canonical_json is compared with the ``rfc8785`` package on Hypothesis-generated
JSON: unicode keys (astral-plane characters sort by UTF-16 code units, not by code
points), nested objects and arrays, strings with control characters, integers and
floats. jsonb keeps numbers as exact numerics; the canonical form is that of the
nearest IEEE 754 double in ECMAScript's notation. prme.derived_id and the SHA-1
under it are compared with ``uuid.uuid5`` and ``hashlib.sha1``.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from prme_pg import testing

OPERATIONS_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:prme-pg:operations")
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)

# JSON text: any Unicode scalar value but NUL (PostgreSQL text cannot hold it; the
# jsonb cast refuses "\u0000" before prme sees it) and lone surrogates (not JSON).
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
KEYS = st.one_of(
    TEXT,
    # Keys that stress the UTF-16 ordering: BMP private use / specials vs astral.
    st.text(st.sampled_from(["a", "\u00e9", "\ue000", "\uffee", "\ufb33", "\U0001f600", "\U00010000", "\U0010ffff"])),
)
INTEGERS = st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
SCALARS = st.one_of(st.none(), st.booleans(), INTEGERS, FLOATS, TEXT)
JSON = st.recursive(
    SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=5), st.dictionaries(KEYS, children, max_size=5)),
    max_leaves=25,
)


@pytest.fixture(scope="module")
def jcs_conn(pg_server: testing.Server, template_db: str) -> Iterator[psycopg.Connection[Any]]:
    """One clone for the whole module: Hypothesis runs many examples per test."""
    name = testing.create_database(pg_server, template=template_db)
    with psycopg.connect(pg_server.dsn_for(name), autocommit=True) as connection:
        yield connection
    testing.drop_database(pg_server, name)


def canonical(conn: psycopg.Connection[Any], value: Any) -> str:
    row = conn.execute("SELECT prme.canonical_json(%s)", (Jsonb(value),)).fetchone()
    assert row is not None
    return str(row[0])


def canonical_text(conn: psycopg.Connection[Any], json_text: str) -> str:
    row = conn.execute("SELECT prme.canonical_json(%s::jsonb)", (json_text,)).fetchone()
    assert row is not None
    return str(row[0])


@SETTINGS
@given(value=JSON)
def test_canonical_json_agrees_with_rfc8785(jcs_conn: psycopg.Connection[Any], value: Any) -> None:
    assert canonical(jcs_conn, value) == rfc8785.dumps(value).decode("utf-8")


@SETTINGS
@given(value=st.dictionaries(KEYS, SCALARS, min_size=1, max_size=8))
def test_payload_hash_is_sha256_of_rfc8785(jcs_conn: psycopg.Connection[Any], value: dict[str, Any]) -> None:
    row = jcs_conn.execute("SELECT prme.payload_hash(%s)", (Jsonb(value),)).fetchone()
    assert row == (hashlib.sha256(rfc8785.dumps(value)).hexdigest(),)


@SETTINGS
@given(number=FLOATS)
def test_every_double_is_written_as_ecmascript_writes_it(jcs_conn: psycopg.Connection[Any], number: float) -> None:
    # repr() round-trips, so the jsonb numeric is exactly the shortest decimal of the double.
    assert canonical_text(jcs_conn, repr(number)) == rfc8785.dumps(number).decode()


def test_rfc8785_key_order_example(jcs_conn: psycopg.Connection[Any]) -> None:
    """RFC 8785 section 3.2.3: keys sort by UTF-16 code units (U+1F600 before U+FB33)."""
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    text = canonical(jcs_conn, value)
    assert text == rfc8785.dumps(value).decode()
    assert list(json.loads(text)) == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


@pytest.mark.parametrize(
    ("json_text", "expected"),
    [
        # ECMAScript switches to exponent form below 1e-6 and from 1e21 on.
        ("1e-7", "1e-7"),
        ("0.000001", "0.000001"),
        ("1e15", "1000000000000000"),
        ("1e20", "100000000000000000000"),
        ("1e21", "1e+21"),
        ("-2.5e-8", "-2.5e-8"),
        ("1.5e300", "1.5e+300"),
        ("5e-324", "5e-324"),
        ("1.7976931348623157e308", "1.7976931348623157e+308"),
        # Numbers are doubles: the nearest one, in its shortest form.
        ("0.1", "0.1"),
        ("0.30000000000000004", "0.30000000000000004"),
        ("18014398509481984", "18014398509481984"),
        ("10000000000000000000000000", "1e+25"),
        ("1.0", "1"),
        ("-0.0", "0"),
        ("100", "100"),
        ("1E2", "100"),
        # Strings: minimal escapes; DEL, U+2028 and astral characters stay literal.
        (
            '"\\u0001\\b\\t\\n\\f\\r\\"\\\\\\u001f\\u007f\\u2028/"',
            '"\\u0001\\b\\t\\n\\f\\r\\"\\\\\\u001f\u007f\u2028/"',
        ),
        ('"\\ud83d\\ude00"', '"\U0001f600"'),
        ("[]", "[]"),
        ("{}", "{}"),
        ('{"b": [true, false, null], "a": {"d": 1, "c": 2}}', '{"a":{"c":2,"d":1},"b":[true,false,null]}'),
    ],
)
def test_edge_cases(jcs_conn: psycopg.Connection[Any], json_text: str, expected: str) -> None:
    assert canonical_text(jcs_conn, json_text) == expected
    # The same value through Python: rfc8785 of what json parses (floats for non-integers).
    parsed = json.loads(json_text)
    if not (isinstance(parsed, int) and abs(parsed) >= 2**53):
        assert rfc8785.dumps(parsed).decode() == expected


@pytest.mark.parametrize(
    "json_text",
    [
        "0.10000000000000001",
        "0.1000000000000000055511151231257827",
        "123456789012345678",
        "9007199254740993",
        "-1152921504606846977",
        "10000000000000000000000007",
        '{"a": [1, {"b": 2.00000000000000000001}]}',
    ],
)
def test_numbers_without_an_exact_double_form_are_pr422(jcs_conn: psycopg.Connection[Any], json_text: str) -> None:
    """Issue 17 item 9: a number whose canonical text denotes another number would share its
    payload_hash with that number's payload while the executor reads the exact numeric."""
    with pytest.raises(psycopg.Error) as caught:
        canonical_text(jcs_conn, json_text)
    assert caught.value.sqlstate == "PR422"
    assert "no exact IEEE 754 double form" in caught.value.diag.message_primary
    with pytest.raises(psycopg.Error) as caught:
        jcs_conn.execute("SELECT prme.payload_hash(%s::jsonb)", (f'{{"n": {json_text}}}',))
    assert caught.value.sqlstate == "PR422"


def test_integers_beyond_2_53_are_exact_or_refused(jcs_conn: psycopg.Connection[Any]) -> None:
    """rfc8785 refuses Python ints outside +-(2^53 - 1); the database writes a larger integer as its
    double when that double's text is the integer itself, and refuses it otherwise."""
    for value in (2**54, -(10**22), 10**25):
        assert canonical_text(jcs_conn, str(value)) == rfc8785.dumps(float(value)).decode()
    for value in (2**53 + 1, -(2**60) - 1, 10**25 + 7):
        with pytest.raises(psycopg.Error) as caught:
            canonical_text(jcs_conn, str(value))
        assert caught.value.sqlstate == "PR422"
    with pytest.raises(rfc8785.IntegerDomainError):
        rfc8785.dumps(2**53 + 1)


def test_values_nested_deeper_than_32_levels_are_pr422(jcs_conn: psycopg.Connection[Any]) -> None:
    """prme.ledger_limits().max_payload_depth: the value is level 1, each object or array inside one more."""
    assert jcs_conn.execute("SELECT max_payload_depth FROM prme.ledger_limits()").fetchone() == (32,)
    deepest = '{"a": ' + "[" * 31 + "1" + "]" * 31 + "}"  # 32 levels
    assert canonical_text(jcs_conn, deepest) == deepest.replace(" ", "")
    for text in ("[" * 33 + "]" * 33, '{"a": ' + "[" * 32 + "]" * 32 + "}", '{"a": ' + "[" * 800 + "]" * 800 + "}"):
        for call in ("SELECT prme.canonical_json(%s::jsonb)", "SELECT prme.payload_hash(%s::jsonb)"):
            with pytest.raises(psycopg.Error) as caught:
                jcs_conn.execute(call, (text,))
            assert caught.value.sqlstate == "PR422", text[:40]
            assert "32 levels" in caught.value.diag.message_primary


@pytest.mark.parametrize("json_text", ["1e400", "-1e400", '[1, {"x": 1e309}]', "1e-400", "-2e-330"])
def test_numbers_outside_double_range_are_pr422(jcs_conn: psycopg.Connection[Any], json_text: str) -> None:
    with pytest.raises(psycopg.Error) as caught:
        canonical_text(jcs_conn, json_text)
    assert caught.value.sqlstate == "PR422"
    with pytest.raises(psycopg.Error) as caught:
        jcs_conn.execute("SELECT prme.payload_hash(%s::jsonb)", (f'{{"n": {json_text}}}',))
    assert caught.value.sqlstate == "PR422"


def test_nul_is_refused_by_jsonb_before_prme(jcs_conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.UntranslatableCharacter):
        canonical_text(jcs_conn, '"a\\u0000b"')


@SETTINGS
@given(operation_id=st.uuids(), upper=st.booleans())
def test_derived_id_of_a_uuid_is_python_uuid5_of_its_lowercase_text(
    jcs_conn: psycopg.Connection[Any], operation_id: uuid.UUID, upper: bool
) -> None:
    # A UUID id is one id whatever its case (stored lowercase, as when ids were uuid).
    text = str(operation_id).upper() if upper else str(operation_id)
    row = jcs_conn.execute("SELECT prme.derived_id(%s)", (text,)).fetchone()
    assert row == (uuid.uuid5(OPERATIONS_NAMESPACE, str(operation_id)),)


@SETTINGS
@given(operation_id=st.from_regex(r"[A-Za-z0-9._:-]{1,128}", fullmatch=True))
def test_derived_id_of_any_other_id_is_python_uuid5_of_the_id(
    jcs_conn: psycopg.Connection[Any], operation_id: str
) -> None:
    # Only the 8-4-4-4-12 form is read as a UUID (lowercased); any other id is kept as given.
    uuid_form = re.fullmatch(r"[0-9A-Fa-f]{8}(-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}", operation_id)
    expected = uuid.uuid5(OPERATIONS_NAMESPACE, operation_id.lower() if uuid_form else operation_id)
    row = jcs_conn.execute("SELECT prme.derived_id(%s)", (operation_id,)).fetchone()
    assert row == (expected,)


@SETTINGS
@given(namespace=st.uuids(), name=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")))
def test_uuid_v5_of_any_name_is_python_uuid5(
    jcs_conn: psycopg.Connection[Any], namespace: uuid.UUID, name: str
) -> None:
    row = jcs_conn.execute("SELECT prme._uuid_v5(%s, %s)", (namespace, name)).fetchone()
    assert row == (uuid.uuid5(namespace, name),)


def test_sha1_matches_hashlib_across_block_boundaries(jcs_conn: psycopg.Connection[Any]) -> None:
    data = bytes(range(256)) * 2
    lengths = [*range(0, 130), 183, 184, 247, 256, 511, 512]
    rows = jcs_conn.execute(
        "SELECT n, encode(prme._sha1(substr(%s::bytea, 1, n)), 'hex') FROM unnest(%s::integer[]) AS n ORDER BY n",
        (data, lengths),
    ).fetchall()
    assert rows == [(n, hashlib.sha1(data[:n], usedforsecurity=False).hexdigest()) for n in sorted(lengths)]


def test_known_vectors(jcs_conn: psycopg.Connection[Any]) -> None:
    row = jcs_conn.execute(
        "SELECT encode(prme._sha1(''::bytea), 'hex'), encode(prme._sha1('abc'::bytea), 'hex'),"
        " prme._uuid_v5('6ba7b810-9dad-11d1-80b4-00c04fd430c8', 'python.org')"
    ).fetchone()
    assert row == (
        "da39a3ee5e6b4b0d3255bfef95601890afd80709",
        "a9993e364706816aba3e25717850c26c9cd0d89d",
        uuid.UUID("886313e1-3b8a-5372-9b90-0c9aee199e5d"),
    )
    assert uuid.uuid5(uuid.NAMESPACE_DNS, "python.org") == uuid.UUID("886313e1-3b8a-5372-9b90-0c9aee199e5d")
