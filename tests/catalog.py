"""A comparable snapshot of everything in schema prme, read from the catalog.

Two databases built different ways (all migrations vs sql/postgres/) must give
equal snapshots: tables, columns, constraints, indexes, functions with bodies,
types, triggers, grants, row-level security, policies, comments and owners.
"""

from __future__ import annotations

from typing import Any

import psycopg

QUERIES: dict[str, str] = {
    "relations": """
        SELECT c.relname, c.relkind, pg_get_userbyid(c.relowner), c.relacl::text,
               c.relrowsecurity, c.relforcerowsecurity, obj_description(c.oid, 'pg_class'),
               c.reloptions::text
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'prme' ORDER BY 1""",
    "columns": """
        -- Position among the live columns: a column dropped by a migration leaves a gap in attnum.
        SELECT c.relname, row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum), a.attname,
               format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), col_description(c.oid, a.attnum)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = 'prme' AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, 2""",
    "constraints": """
        SELECT c.relname, k.conname, pg_get_constraintdef(k.oid, true)
        FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'prme' ORDER BY 1, 2""",
    "indexes": """
        SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'prme' ORDER BY 1""",
    "functions": """
        SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), p.proacl::text,
               pg_get_userbyid(p.proowner), obj_description(p.oid, 'pg_proc')
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'prme' ORDER BY 1""",
    "types": """
        SELECT t.typname, t.typtype, pg_get_userbyid(t.typowner), obj_description(t.oid, 'pg_type')
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = 'prme' ORDER BY 1""",
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid, true), t.tgenabled
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'prme' AND NOT t.tgisinternal ORDER BY 1, 2""",
    "policies": """
        SELECT tablename, policyname, permissive, roles::text, cmd, qual, with_check
        FROM pg_policies WHERE schemaname = 'prme' ORDER BY 1, 2""",
    "schema": """
        SELECT n.nspname, pg_get_userbyid(n.nspowner), n.nspacl::text, obj_description(n.oid, 'pg_namespace')
        FROM pg_namespace n WHERE n.nspname = 'prme'""",
    "default_privileges": """
        SELECT pg_get_userbyid(d.defaclrole), d.defaclobjtype, d.defaclacl::text
        FROM pg_default_acl d JOIN pg_namespace n ON n.oid = d.defaclnamespace
        WHERE n.nspname = 'prme' ORDER BY 1, 2""",
}


def snapshot(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[Any, ...]]]:
    return {name: conn.execute(query).fetchall() for name, query in QUERIES.items()}
