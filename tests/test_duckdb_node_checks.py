"""Pack format 4 checks prme.nodes' names and checksum without regular expressions; the rules
are still PostgreSQL's (sql/postgres: '^[a-z][a-z0-9_-]{0,62}$' for namespace, scope and kind,
'^[0-9a-f]{64}$' for last_checksum). Each CHECK of a new pack, as DuckDB stores it, accepts
exactly the values the regular expression accepts."""

from __future__ import annotations

import string
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prme_pg.backends.duckdb import PACK_FILE, DuckDBBackend

NAME = "[a-z][a-z0-9_-]{0,62}"
CHECKSUM = "[0-9a-f]{64}"
RULES = {"namespace": NAME, "scope": NAME, "kind": NAME, "last_checksum": CHECKSUM}

EDGES = [
    "", "a", "z", "a" * 63, "a" * 64, "a-b_c9", "0abc", "_a", "-a", "A", "aB", "a b", " a", "a\n", "\na",
    "é", "aé", "\uff41", "a\u0301", "a\x00", "{", "`", "a.b", "a" * 62 + "é",
    "0" * 64, "f" * 64, "0123456789abcdef" * 4,
    "F" * 64, "g" * 64, "0" * 63, "0" * 65, "0" * 63 + "é", "0" * 63 + " ", "x" * 64,
]  # fmt: skip
# Mostly characters the rules allow, so that long valid values come up too.
TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(string.ascii_lowercase + string.digits + "_-"),
        st.sampled_from(string.ascii_uppercase + " .\n\t{`/:@[^\x7f"),
        st.characters(codec="utf-8"),
    ),
    max_size=70,
)


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> Iterator[duckdb.DuckDBPyConnection]:
    path: Path = tmp_path_factory.mktemp("checks") / "memories"
    DuckDBBackend(path).close()
    with duckdb.connect(str(path / PACK_FILE)) as connection:
        yield connection


def checks(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    rows = con.execute(
        "SELECT constraint_column_names[1], expression FROM duckdb_constraints() "
        "WHERE schema_name = 'prme' AND table_name = 'nodes' AND constraint_type = 'CHECK'"
    ).fetchall()
    return {column: expression for column, expression in rows if column in RULES}


def agree(con: duckdb.DuckDBPyConnection, value: str) -> None:
    for column, expression in checks(con).items():
        passes, rule = con.execute(
            f"SELECT coalesce({expression}, TRUE), regexp_full_match({column}, $rule) FROM (SELECT $v AS {column})",
            {"v": value, "rule": RULES[column]},
        ).fetchone()  # type: ignore[misc]
        assert passes == rule, (column, value)


def test_the_checks_are_free_of_regular_expressions(con: duckdb.DuckDBPyConnection) -> None:
    found = checks(con)
    assert sorted(found) == sorted(RULES)
    assert not any("regexp" in expression for expression in found.values())


@pytest.mark.parametrize("value", EDGES)
def test_edge_values(con: duckdb.DuckDBPyConnection, value: str) -> None:
    agree(con, value)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=TEXT)
def test_any_text(con: duckdb.DuckDBPyConnection, value: str) -> None:
    agree(con, value)


def test_a_null_passes_as_before(con: duckdb.DuckDBPyConnection) -> None:
    # NOT NULL refuses it on these columns; the CHECK itself, like the regex, does not.
    for column, expression in checks(con).items():
        row = con.execute(f"SELECT {expression} FROM (SELECT CAST(NULL AS VARCHAR) AS {column})").fetchone()
        assert row is not None and row[0] is not False
