"""plpgsql_check over every PL/pgSQL function in schema prme.

sqlfluff cannot see inside dollar-quoted bodies; plpgsql_check compiles each body
against the real catalog and reports errors and suspicious code (unused or
shadowed variables, dead code, implicit casts that may fail).
"""

from __future__ import annotations

from typing import Any

import psycopg

FUNCTIONS = """
    SELECT p.oid::regprocedure::text, t.tgrelid::regclass::text
    FROM pg_proc p
    JOIN pg_namespace n ON n.oid = p.pronamespace
    JOIN pg_language l ON l.oid = p.prolang
    LEFT JOIN LATERAL (
        SELECT tgrelid FROM pg_trigger WHERE tgfoid = p.oid AND NOT tgisinternal LIMIT 1
    ) t ON TRUE
    WHERE n.nspname = 'prme' AND l.lanname = 'plpgsql'
    ORDER BY 1
"""


def test_every_plpgsql_function_passes_plpgsql_check(conn: psycopg.Connection[Any]) -> None:
    functions = conn.execute(FUNCTIONS).fetchall()
    assert len(functions) >= 15
    problems: dict[str, list[str]] = {}
    for signature, trigger_table in functions:
        rows = conn.execute(
            "SELECT * FROM plpgsql_check_function(%s::regprocedure, coalesce(%s::regclass, 0), "
            "extra_warnings => true, performance_warnings => false, security_warnings => true)",
            (signature, trigger_table),
        ).fetchall()
        if rows:
            problems[signature] = [r[0] for r in rows]
    assert not problems, "\n".join(f"{fn}:\n  " + "\n  ".join(lines) for fn, lines in problems.items())
