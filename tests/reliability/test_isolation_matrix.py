"""Issue 5, item 7: owners are isolated from each other, and prme_app touches no table.

The API is read from the catalog: every function in schema prme whose name does not
start with '_', that prme_app may EXECUTE and that takes a user_id. A function added
later is covered without editing this file; when it takes an argument the suite has no
value for (reliability_support.SAMPLES / REFERENCES), the matrix fails and says which.
Alice's objects are found in the tables REFERENCES names, so a new kind of object is
covered once the fixture below creates one for her (the matrix fails until it does).

For each function, bob (connected as prme_app) calls it once for each of alice's
objects that each reference argument can name (her active and archived nodes, her event,
request key, API token, maintenance patch, queued operation, correction inbox entry,
snapshot generation), and once with all of them at once. The same call is also made with
a fresh id in place of each of alice's: the *absent twin*. Then:

* the outcome is PR404, an empty result, or a result about bob's own rows only (PR422
  is tolerated where a function calls a missing reference an invalid argument, e.g.
  submit_operation's dependencies, provided the absent twin gets the same);
* it is exactly the absent twin's outcome (same SQLSTATE, same result once ids and
  times are normalised, same number of rows changed per table): alice's objects are
  indistinguishable from objects that do not exist;
* no row of any owner but bob changed (every prme table compared before/after);
  a call that fails changed nothing at all; nothing of alice's (her user_id, her
  content) appears in any result or any row bob's call wrote.

Each call runs in a transaction that is rolled back, so every call starts from the
same data. Finally the role rules of docs/DESIGN.md section 5: prme_app can neither read
nor write any prme table (42501), cannot execute internal helpers, and every API
function is SECURITY DEFINER with a pinned search_path; prme_reader sees the owners bound
to the reading role (never the one a session setting names), prme_auditor every owner.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from reliability_support import (
    OPERATION_PAYLOAD,
    REFERENCES,
    SAMPLES,
    ApiFunction,
    MissingSample,
    add_event,
    add_node,
    api_call,
    api_functions,
    arguments,
    fresh_reference,
    normalise,
    objects_of,
    owned_snapshot,
    prme_tables,
    reinforce,
)

SECRET = "ALICE-SECRET"


@dataclass
class Outcome:
    sqlstate: str | None
    rows: list[dict[str, Any]]
    changed: dict[str, tuple[set[tuple[str | None, str]], set[tuple[str | None, str]]]]


def run_as_app(conn: psycopg.Connection[Any], function: ApiFunction, args: dict[str, Any]) -> Outcome:
    query = api_call(function, args)
    with conn.transaction(force_rollback=True):
        before = owned_snapshot(conn)
        conn.execute("SET LOCAL ROLE prme_app")
        sqlstate = None
        rows: list[dict[str, Any]] = []
        try:
            with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
                rows = cur.execute(query, args).fetchall()
        except psycopg.Error as exc:
            if exc.sqlstate is None:  # a client-side error is a broken test, not an outcome
                raise
            sqlstate = exc.sqlstate
        conn.execute("RESET ROLE")
        after = owned_snapshot(conn)
    changed = {t: (before[t] - after[t], after[t] - before[t]) for t in before if before[t] != after[t]}
    return Outcome(sqlstate, rows, changed)


def mentions_alice(value: Any) -> bool:
    if isinstance(value, dict):
        return any(mentions_alice(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(mentions_alice(item) for item in value)
    return isinstance(value, str) and (value == "alice" or SECRET in value)


@pytest.fixture(scope="module")
def owners_db(module_db: str) -> Iterator[tuple[psycopg.Connection[Any], dict[str, Any]]]:
    """Alice owns one object of every kind REFERENCES knows; bob owns a node and an event."""
    with psycopg.connect(module_db, autocommit=True) as conn:
        event = add_event(conn, "alice", f"{SECRET}: alice said so")
        active = add_node(conn, "alice", f"{SECRET}: prefers tea")
        reinforce(conn, active["id"], "alice", event["id"], uuid.uuid4())
        # A confirmation writes no outcome row (its journal record is the outcome): one of its own.
        conn.execute("SELECT prme.record_outcome('alice', %s, 'implicit_success')", [active["id"]])
        archived = add_node(conn, "alice", f"{SECRET}: lived in Lyon")
        conn.execute("SELECT prme.archive_node('alice', %s)", [archived["id"]])
        token = hashlib.sha256(b"alice's bearer token").hexdigest()
        conn.execute("SELECT prme.create_api_token('alice', %s, %s)", [token, f"{SECRET} laptop"])
        conn.execute("SELECT prme.maintenance_patch('alice')")
        conn.execute(
            "SELECT prme.submit_operation('alice', %s, 2, 'add_event', '{}', %s, %s)",
            [str(uuid.uuid4()), SAMPLES[("payload_hash", "text")], Jsonb(OPERATION_PAYLOAD)],
        )
        conn.execute("SELECT prme.link_correction('alice', %s, '{}')", [f"no, {SECRET} is wrong"])
        conn.execute("SELECT prme.publish_snapshot('alice', 'personal')")
        conn.execute("SELECT prme.set_maintenance_setting('alice', 'low', '3 days', 0.02)")
        add_node(conn, "bob", "bob's memory")
        add_event(conn, "bob", "bob's evidence")
        yield conn, {"alice": objects_of(conn, "alice"), "bob": objects_of(conn, "bob")}


def owner_scoped(functions: list[ApiFunction]) -> list[ApiFunction]:
    return [function for function in functions if any(name == "user_id" for name, _ in function.args)]


def _variants(function: ApiFunction, alice: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """{argument: alice's object} for each reference argument and each of her objects, and all at once."""
    variants: list[dict[str, Any]] = []
    references = [name for name, _ in function.args if name in REFERENCES]
    for name in references:
        assert alice.get(name), f"{function.signature}: alice owns no object for {name}: create one in owners_db"
        variants += [{name: target} for target in alice[name]]
    if len(references) > 1:
        variants.append({name: alice[name][0] for name in references})
    return variants or [{}]


def test_another_owner_sees_not_found_and_changes_nothing(
    owners_db: tuple[psycopg.Connection[Any], dict[str, Any]], figures: Any
) -> None:
    conn, data = owners_db
    functions = owner_scoped(api_functions(conn))
    names = {function.name for function in functions}
    assert {
        "add_node",
        "add_event",
        "get_node",
        "reinforce",
        "archive_node",
        "verify_journal",
        "replay_node",
    } <= names, "the catalog query lost API functions"
    calls = not_found = empty = own_rows = invalid = 0
    for function in functions:
        for targeted in _variants(function, data["alice"]):
            # One fresh value per distinct object of alice's: a call naming her operation both
            # as itself and as its dependency has a twin naming one missing id twice.
            fresh: dict[str, Any] = {}
            twin = {name: fresh.setdefault(str(value), fresh_reference(name)) for name, value in targeted.items()}
            try:
                outcome = run_as_app(conn, function, arguments(function, "bob", data["bob"], targeted))
                absent = run_as_app(conn, function, arguments(function, "bob", data["bob"], twin))
            except MissingSample as exc:
                pytest.fail(str(exc))
            where = f"{function.signature} as bob with alice's {sorted(targeted) or 'nothing'}"
            calls += 2

            # PR422 is accepted only for a reference to a missing object that the function
            # treats as an invalid argument (submit_operation's dependencies), and only when the
            # absent twin gets exactly the same answer (checked below).
            assert outcome.sqlstate in (None, "PR404", "PR422"), f"{where}: {outcome.sqlstate}"
            assert outcome.sqlstate != "PR422" or targeted, f"{where}: bob's own valid call was refused"
            for table, (gone, new) in outcome.changed.items():
                assert all(owner == "bob" for owner, _ in gone | new), f"{where}: changed others' rows in {table}"
                assert not any(SECRET in text for _, text in new), f"{where}: copied alice's data into {table}"
            if outcome.sqlstate is not None:
                assert outcome.changed == {}, f"{where}: failed but changed {sorted(outcome.changed)}"
            assert not mentions_alice(outcome.rows), f"{where}: returned alice's data {outcome.rows}"

            labels = {str(value): f"<{name}>" for name, value in targeted.items()}
            labels |= {str(value): f"<{name}>" for name, value in twin.items()}
            assert outcome.sqlstate == absent.sqlstate, f"{where}: differs from a missing id"
            assert normalise(outcome.rows, labels) == normalise(absent.rows, labels), where
            shape = {t: (len(g), len(n)) for t, (g, n) in outcome.changed.items()}
            assert shape == {t: (len(g), len(n)) for t, (g, n) in absent.changed.items()}, where

            if outcome.sqlstate == "PR404":
                not_found += 1
            elif outcome.sqlstate == "PR422":
                invalid += 1
            elif not outcome.rows or all(not any(row.values()) for row in outcome.rows):
                empty += 1
            else:
                assert all(row.get("user_id", "bob") == "bob" for row in outcome.rows), where
                own_rows += 1
    assert not_found >= 5, "the matrix hardly ever targeted an existing object of alice's"
    figures(
        "7 isolation",
        api_functions=len(functions),
        cross_owner_calls=calls,
        not_found=not_found,
        empty_results=empty,
        own_rows_only=own_rows,
        refused_as_invalid_like_a_missing_id=invalid,
    )


def test_prme_app_cannot_touch_any_table(
    owners_db: tuple[psycopg.Connection[Any], dict[str, Any]], figures: Any
) -> None:
    conn, _ = owners_db
    tables = prme_tables(conn)
    assert {"nodes", "events", "journal", "request_keys", "schema_migrations"} <= set(tables)
    refused = 0
    for table in tables:
        first = conn.execute(
            # The first live column (a migration may have dropped the first one).
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped"
            " ORDER BY attnum LIMIT 1",
            [f"prme.{table}"],
        ).fetchone()[0]
        target = sql.SQL("prme.{}").format(sql.Identifier(table))
        column = sql.Identifier(first)
        statements = {
            "SELECT": sql.SQL("SELECT * FROM {} LIMIT 1").format(target),
            "INSERT": sql.SQL("INSERT INTO {} DEFAULT VALUES").format(target),
            "UPDATE": sql.SQL("UPDATE {} SET {} = {}").format(target, column, column),
            "DELETE": sql.SQL("DELETE FROM {}").format(target),
            "TRUNCATE": sql.SQL("TRUNCATE {}").format(target),
        }
        for privilege, statement in statements.items():
            assert not conn.execute(
                "SELECT has_table_privilege('prme_app', %s, %s)", [f"prme.{table}", privilege]
            ).fetchone()[0]
            with conn.transaction(force_rollback=True):
                conn.execute("SET LOCAL ROLE prme_app")
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement)
            refused += 1
    figures("7 isolation", table_statements_refused=refused)


FUNCTIONS = """
    SELECT p.oid::regprocedure::text, p.proname LIKE '\\_%', p.prosecdef, p.proconfig,
           pg_catalog.has_function_privilege('prme_app', p.oid, 'EXECUTE'),
           pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE'),
           pg_catalog.has_function_privilege('prme_reader', p.oid, 'EXECUTE')
    FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
    WHERE n.nspname = 'prme' ORDER BY 1
"""


def test_api_functions_are_security_definer_with_a_pinned_search_path(
    owners_db: tuple[psycopg.Connection[Any], dict[str, Any]],
) -> None:
    conn, _ = owners_db
    for signature, internal, definer, config, app_may_execute, *_ in conn.execute(FUNCTIONS):
        if app_may_execute and not internal:
            assert definer, f"{signature} is not SECURITY DEFINER"
            assert "search_path=pg_catalog, pg_temp" in (config or []), f"{signature}: search_path {config}"


def test_internal_helpers_are_not_executable_by_prme_app(
    owners_db: tuple[psycopg.Connection[Any], dict[str, Any]],
) -> None:
    """docs/DESIGN.md section 5: helpers starting with '_' are not granted to prme_app."""
    conn, _ = owners_db
    granted = [signature for signature, internal, _, _, app, *_ in conn.execute(FUNCTIONS) if internal and app]
    assert granted == [], f"prme_app may execute internal helpers: {granted}"
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL ROLE prme_app")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT prme._sha256_hex('x')")


def test_no_prme_function_is_executable_by_public_or_prme_reader(
    owners_db: tuple[psycopg.Connection[Any], dict[str, Any]],
) -> None:
    """PUBLIC and prme_reader (which has USAGE on the schema) execute nothing in prme.

    A SECURITY DEFINER function executable by prme_reader lets a read-only role write as
    prme_owner: e.g. register a bearer token for any owner, then act as that owner over HTTP.
    """
    conn, _ = owners_db
    rows = conn.execute(FUNCTIONS).fetchall()
    public = [signature for signature, *_, public_may, _ in rows if public_may]
    reader = [signature for signature, *_, reader_may in rows if reader_may]
    assert (public, reader) == ([], []), f"executable by PUBLIC: {public}; by prme_reader: {reader}"


def test_prme_reader_cannot_mint_a_token_for_another_owner(
    owners_db: tuple[psycopg.Connection[Any], dict[str, Any]],
) -> None:
    conn, _ = owners_db
    forged = hashlib.sha256(b"minted by a reader").hexdigest()
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL ROLE prme_reader")
        conn.execute("SET LOCAL prme.user_id = 'bob'")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT prme.create_api_token('alice', %s, 'reader was here')", [forged])


# What prme_reader may read (each table's grants in sql/postgres): every owner's table but the
# idempotency keys and the API tokens; and its own bindings.
READER_TABLES = {
    "nodes", "events", "journal", "outcomes", "correction_inbox", "maintenance_settings",
    "maintenance_patches", "patch_ops", "snapshot_generations", "snapshot_heads", "snapshot_history",
    "operations", "operation_events", "operation_parts",
}  # fmt: skip


def test_readers_see_their_bound_owners_only_and_write_nothing(
    owners_db: tuple[psycopg.Connection[Any], dict[str, Any]],
) -> None:
    """For every table prme_reader may read: prme_reader itself, with prme.user_id set to any
    owner, sees nothing (a setting any session may change names nobody); a role bound to alice
    sees exactly alice's rows (counted against the superuser's view) whatever prme.user_id
    says, bound to alice and bob both owners' rows; prme_auditor sees every row. None of
    them can change a row."""
    conn, _ = owners_db
    readable = (
        "SELECT c.relname FROM pg_class AS c WHERE c.relnamespace = 'prme'::regnamespace"
        " AND c.relkind IN ('r', 'p') AND has_table_privilege(%s, c.oid, 'SELECT')"
    )
    for role in ("prme_reader", "prme_auditor"):
        assert {row[0] for row in conn.execute(readable, [role])} == READER_TABLES | {"reader_bindings"}, role
    suffix = uuid.uuid4().hex[:8]
    alice_reader, both_reader, auditor = (f"prme_t_{name}_{suffix}" for name in ("a", "ab", "all"))
    seen_by_alice = set()
    with conn.transaction(force_rollback=True):
        for role, group in ((alice_reader, "prme_reader"), (both_reader, "prme_reader"), (auditor, "prme_auditor")):
            conn.execute(sql.SQL("CREATE ROLE {} IN ROLE {}").format(sql.Identifier(role), sql.Identifier(group)))
        conn.execute(
            "INSERT INTO prme.reader_bindings (user_id, reader) VALUES ('alice', %(a)s), ('alice', %(ab)s), "
            "('bob', %(ab)s)",
            {"a": alice_reader, "ab": both_reader},
        )
        for table in sorted(READER_TABLES):
            target = sql.SQL("prme.{}").format(sql.Identifier(table))
            per_owner = sql.SQL("SELECT user_id, count(*) FROM {} GROUP BY user_id").format(target)
            truth = dict(conn.execute(per_owner).fetchall())
            owned = {owner: truth[owner] for owner in ("alice", "bob") if owner in truth}
            for role, setting, expected in (
                ("prme_reader", "alice", {}),
                ("prme_reader", "bob", {}),
                (alice_reader, "bob", {k: v for k, v in owned.items() if k == "alice"}),
                (both_reader, "", owned),
                (auditor, "", truth),
            ):
                with conn.transaction(force_rollback=True):
                    conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
                    conn.execute("SELECT set_config('prme.user_id', %s, true)", [setting])
                    assert dict(conn.execute(per_owner).fetchall()) == expected, f"{table}: {role} ({setting})"
                    with pytest.raises(psycopg.errors.InsufficientPrivilege):
                        conn.execute(sql.SQL("DELETE FROM {}").format(target))
            seen_by_alice |= {table} if "alice" in owned else set()
    # Not vacuous: alice owns rows in (nearly) every table the reader may read.
    assert READER_TABLES - seen_by_alice <= {"operation_events", "operation_parts", "patch_ops"}, seen_by_alice
    for secret in ("request_keys", "api_tokens"):
        for role in ("prme_reader", "prme_auditor"):
            with conn.transaction(force_rollback=True):
                conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier("prme", secret)))


def test_normalise_keeps_what_matters() -> None:
    """The twin comparison must not normalise away a difference in state."""
    labels = {"00000000-0000-0000-0000-000000000001": "<node_id>"}
    row = {"id": uuid.UUID(int=1), "version": 2, "confidence_base": Decimal("0.55"), "replayed": False}
    assert normalise([row], labels) == [
        {"id": "<node_id>", "version": 2, "confidence_base": Decimal("0.55"), "replayed": False}
    ]
    assert normalise([row], labels) != normalise([row | {"replayed": True}], labels)
    assert normalise(["2024-01-02T03:04:05.123456Z"], {}) == ["<time>"]
