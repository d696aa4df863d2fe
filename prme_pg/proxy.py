"""The PL/Proxy tier: one proxy function per API function, generated from a shard's catalog.

A proxy database holds no data. For every function of schema ``prme`` that is granted
to ``prme_app`` on a shard (a database built from ``sql/postgres``), the proxy has a
function with the same name, arguments, defaults, result and COMMENT, written in
PL/Proxy, which runs it on the shard that holds the owner (docs/SCALING.md):

* functions with a ``user_id`` argument run on ``prme.route(user_id)``: the owner's
  entry in ``prme.owner_routes`` (an owner moved by ``prme-pg shard move``), else
  :func:`owner_hash` of ``user_id``, which PL/Proxy masks to a partition
  (``hash & (partitions - 1)``; a NULL ``user_id`` hashes to 0, so the shard's own
  PR422 answers it);
* ``prme.readiness()`` and ``prme.ledger_status()`` answer one row per shard, and a
  shard that does not answer gives a row saying it cannot take writes instead of
  failing the whole call;
* ``prme.run_operations`` and the embedding worker's calls run on every shard (``RUN ON ALL``);
* every other function (pure ones such as ``prme.payload_hash``) runs on any shard.

The composite types these functions return are created in the proxy with the
shards' columns. The partitions are the options ``p0`` ... of the SQL/MED server
``prme_cluster`` that ``prme-pg shard init`` writes. The generated file,
``sql/proxy/prme_proxy.sql``, is checked in; ``prme-pg shard generate`` rewrites it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg

__all__ = [
    "CLUSTER",
    "ApiFunction",
    "CompositeType",
    "api_functions",
    "composite_types",
    "generate",
    "owner_hash",
    "partition_of",
    "render",
]

#: The PL/Proxy cluster (a SQL/MED server of the ``plproxy`` wrapper) every proxy function names.
CLUSTER = "prme_cluster"

#: Functions that answer per shard on the proxy (a shard that is down is a row, not an error).
PER_SHARD = frozenset({"readiness", "ledger_status"})
#: Functions that run on every shard.
# Every shard: the executor, and the embedding worker's calls (a model is registered on
# every shard; each shard lists and stores the vectors of its own owners' memories and of
# its long memories' parts), and turning vector search on.
ON_ALL = frozenset(
    {
        "run_operations",
        "pending_part_embeddings",
        "store_part_embeddings",
        "register_embedding_model",
        "pending_embeddings",
        "store_embeddings",
        "embedding_status",
        "index_embeddings",
        "enable_vector_search",
    }
)


def owner_hash(user_id: str | None) -> int:
    """The routing hash of an owner: the first 4 bytes of md5(user_id) as a signed int32; 0 for None.

    Equal to ``prme.owner_hash(user_id)`` in the proxy database, on every PostgreSQL
    version (md5 of the UTF-8 text, unlike ``hashtext``, is fixed).
    """
    if user_id is None:
        return 0
    digest = hashlib.md5(user_id.encode("utf-8"), usedforsecurity=False).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


def partition_of(user_id: str | None, partitions: int) -> int:
    """The logical partition of an owner among ``partitions`` (a power of two), as PL/Proxy picks it."""
    if partitions < 1 or partitions & (partitions - 1):
        raise ValueError("the number of partitions must be a power of two")
    return owner_hash(user_id) & (partitions - 1)


@dataclass(frozen=True)
class ApiFunction:
    """One function of schema prme granted to prme_app, as the catalog describes it."""

    name: str
    identity: str  # name(argument types), as regprocedure prints it
    arguments: str  # pg_get_function_arguments: names, types, defaults
    result: str  # pg_get_function_result
    comment: str | None
    argument_names: tuple[str, ...]  # the input arguments'

    @property
    def routing(self) -> str:
        """The PL/Proxy RUN clause of the proxy function."""
        if self.name in ON_ALL:
            return "RUN ON ALL;"
        if "user_id" in self.argument_names:
            return "RUN ON prme.route(user_id);"
        return "RUN ON ANY;"


@dataclass(frozen=True)
class CompositeType:
    """A composite type (or a table's row type) of schema prme that an API function returns."""

    name: str
    columns: tuple[tuple[str, str], ...]
    comment: str | None


_FUNCTIONS_SQL = """
SELECT p.proname, p.oid::regprocedure::text, pg_catalog.pg_get_function_arguments(p.oid),
       pg_catalog.pg_get_function_result(p.oid),
       pg_catalog.obj_description(p.oid, 'pg_proc'),
       ARRAY(
           SELECT a.name
           FROM unnest(p.proargnames, coalesce(p.proargmodes::text[], array_fill('i'::text, ARRAY[p.pronargs])))
               AS a (name, mode)
           WHERE a.mode IN ('i', 'b', 'v'))
FROM pg_catalog.pg_proc AS p
JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
WHERE n.nspname = 'prme'
  AND EXISTS (
      SELECT FROM pg_catalog.aclexplode(p.proacl) AS a
      WHERE a.grantee = 'prme_app'::regrole AND a.privilege_type = 'EXECUTE')
ORDER BY p.proname, p.oid::regprocedure::text
"""

_TYPES_SQL = """
SELECT DISTINCT t.oid, t.typname
FROM pg_catalog.pg_proc AS p
JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
JOIN pg_catalog.pg_type AS t ON t.oid = p.prorettype
JOIN pg_catalog.pg_namespace AS tn ON tn.oid = t.typnamespace
WHERE n.nspname = 'prme' AND tn.nspname = 'prme' AND t.typrelid <> 0
  AND EXISTS (
      SELECT FROM pg_catalog.aclexplode(p.proacl) AS a
      WHERE a.grantee = 'prme_app'::regrole AND a.privilege_type = 'EXECUTE')
ORDER BY t.typname
"""

_COLUMNS_SQL = """
SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), tn.nspname
FROM pg_catalog.pg_type AS t
JOIN pg_catalog.pg_attribute AS a ON a.attrelid = t.typrelid
JOIN pg_catalog.pg_type AS at ON at.oid = a.atttypid
JOIN pg_catalog.pg_namespace AS tn ON tn.oid = at.typnamespace
WHERE t.oid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


def api_functions(conn: psycopg.Connection[Any]) -> list[ApiFunction]:
    """Every function of schema prme that prme_app may execute, in a stable order."""
    return [
        ApiFunction(
            name=row[0],
            identity=row[1],
            arguments=row[2],
            result=row[3],
            comment=row[4],
            argument_names=tuple(row[5]),
        )
        for row in conn.execute(_FUNCTIONS_SQL).fetchall()
    ]


def composite_types(conn: psycopg.Connection[Any]) -> list[CompositeType]:
    """The prme composite types the API functions return, with their columns."""
    types = []
    for oid, name in conn.execute(_TYPES_SQL).fetchall():
        columns = []
        for column, type_name, namespace in conn.execute(_COLUMNS_SQL, (oid,)).fetchall():
            if namespace == "prme":
                raise ValueError(f"prme.{name}.{column} has the prme type {type_name}: the generator cannot copy it")
            columns.append((str(column), str(type_name)))
        comment = conn.execute("SELECT pg_catalog.obj_description(%s::oid, 'pg_type')", (oid,)).fetchone()
        types.append(CompositeType(str(name), tuple(columns), comment[0] if comment else None))
    return types


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


HEADER = """\
-- =============================================================================
-- prme-pg: the PL/Proxy tier (GENERATED by `prme-pg shard generate` from the
-- catalog of a database built from sql/postgres; do not edit by hand).
--
-- One PL/Proxy function per API function of the shards, with the same name,
-- arguments, defaults, result and COMMENT. Per-owner functions run on the shard
-- of prme.route(user_id); readiness and ledger_status answer per shard; pure
-- functions run on any shard; run_operations runs on all (docs/SCALING.md).
--
-- Install in the proxy database as a superuser, after the plproxy package:
--     psql -1 -v ON_ERROR_STOP=1 -d PROXYDB -f sql/proxy/prme_proxy.sql
-- then define the cluster with `prme-pg shard init` (the SQL/MED server
-- prme_cluster, partitions p0..pN-1). Re-running the file replaces every
-- function (the schema is dropped and created again; prme.owner_routes is kept).
-- =============================================================================

SET client_min_messages = warning;

CREATE EXTENSION IF NOT EXISTS plproxy;

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'prme_app') THEN
        CREATE ROLE prme_app NOLOGIN;
    END IF;
END;
$$;

-- Owners moved off their hash partition (prme-pg shard move): kept across re-installs.
CREATE SCHEMA IF NOT EXISTS prme_routing;
REVOKE ALL ON SCHEMA prme_routing FROM public;
CREATE TABLE IF NOT EXISTS prme_routing.owner_routes (
    user_id text PRIMARY KEY,
    partition_no integer CHECK (partition_no >= 0),  -- NULL: being moved, calls wait (55006)
    moved_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE prme_routing.owner_routes IS
'Owners that live on another partition than their hash says, or (partition_no NULL) are being moved '
'(prme-pg shard move); read by prme.route.';

DROP SCHEMA IF EXISTS prme CASCADE;
CREATE SCHEMA prme;
COMMENT ON SCHEMA prme IS
'prme-pg proxy tier: PL/Proxy functions that run the API on the shard of each owner (docs/SCALING.md).';
GRANT USAGE ON SCHEMA prme TO prme_app;

CREATE FUNCTION prme.owner_hash(user_id text)
RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(('x' || substr(md5(user_id), 1, 8))::bit(32)::integer, 0);
$$;
COMMENT ON FUNCTION prme.owner_hash(text) IS
'The routing hash of an owner: the first 4 bytes of md5(user_id) as a signed int32, 0 for NULL '
'(so that the shard answers a NULL user_id with its own PR422). PL/Proxy takes hash & (partitions - 1).';
REVOKE ALL ON FUNCTION prme.owner_hash(text) FROM public;
GRANT EXECUTE ON FUNCTION prme.owner_hash(text) TO prme_app;

CREATE FUNCTION prme.route(user_id text)
RETURNS integer
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_partition integer;
BEGIN
    SELECT r.partition_no INTO v_partition FROM prme_routing.owner_routes AS r WHERE r.user_id = route.user_id;
    IF NOT FOUND THEN
        RETURN prme.owner_hash(route.user_id);
    END IF;
    IF v_partition IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = '55006',
            MESSAGE = 'this owner is being moved to another shard; retry shortly';
    END IF;
    RETURN v_partition;
END;
$$;
COMMENT ON FUNCTION prme.route(text) IS
'The partition hash of an owner: its prme_routing.owner_routes entry when it was moved, else prme.owner_hash; '
'55006 (retry) while prme-pg shard move copies it.';
REVOKE ALL ON FUNCTION prme.route(text) FROM public;
GRANT EXECUTE ON FUNCTION prme.route(text) TO prme_app;

CREATE FUNCTION prme.shard_partitions()
RETURNS TABLE (partition_no integer, shard text)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT substr(o.option_name, 2)::integer, o.option_value
    FROM pg_catalog.pg_foreign_server AS s,
         LATERAL pg_catalog.pg_options_to_table(s.srvoptions) AS o
    WHERE s.srvname = 'prme_cluster' AND o.option_name ~ '^p[0-9]+$'
    ORDER BY 1;
$$;
COMMENT ON FUNCTION prme.shard_partitions() IS
'The partitions of the cluster prme_cluster and the connection string each maps to.';
REVOKE ALL ON FUNCTION prme.shard_partitions() FROM public;

CREATE FUNCTION prme._first_partitions()
RETURNS SETOF integer
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT min(p.partition_no) FROM prme.shard_partitions() AS p GROUP BY p.shard ORDER BY 1;
$$;
COMMENT ON FUNCTION prme._first_partitions() IS
'Internal: one partition of each shard (the lowest), so that a per-shard call reaches each shard once.';
REVOKE ALL ON FUNCTION prme._first_partitions() FROM public;
"""

_PER_SHARD_FALLBACK = {
    "readiness": "false, NULL::text[]",
    "ledger_status": "false, NULL::bigint, NULL::bigint, NULL::bigint, NULL::timestamptz, NULL::interval",
}


def _proxy_function(function: ApiFunction) -> str:
    if function.name in PER_SHARD:
        return _per_shard_function(function)
    body = f"    CLUSTER '{CLUSTER}';\n    {function.routing}\n"
    return _with_acl(
        function,
        f"CREATE FUNCTION prme.{function.name}({function.arguments})\n"
        f"RETURNS {function.result}\n"
        "LANGUAGE plproxy\n"
        f"AS $$\n{body}$$;\n",
    )


def _per_shard_function(function: ApiFunction) -> str:
    """A function without arguments answered by every shard, a down shard as a row of its own."""
    if function.arguments:
        raise ValueError(f"prme.{function.name} takes arguments: a per-shard answer is for argument-free functions")
    shard_call = (
        f"CREATE FUNCTION prme._shard_{function.name}(partition_no integer)\n"
        f"RETURNS {function.result}\n"
        "LANGUAGE plproxy\n"
        f"AS $$\n    CLUSTER '{CLUSTER}';\n    RUN ON partition_no;\n    SELECT * FROM prme.{function.name}();\n$$;\n"
        f"COMMENT ON FUNCTION prme._shard_{function.name}(integer) IS\n"
        f"'Internal: prme.{function.name}() of the shard of one partition.';\n"
        f"REVOKE ALL ON FUNCTION prme._shard_{function.name}(integer) FROM public;\n"
    )
    fallback = _PER_SHARD_FALLBACK[function.name]
    wrapper = (
        f"CREATE FUNCTION prme.{function.name}()\n"
        f"RETURNS {function.result}\n"
        "LANGUAGE plpgsql\n"
        "SECURITY DEFINER\n"
        "SET search_path = pg_catalog, pg_temp\n"
        "AS $$\n"
        "DECLARE\n"
        "    v_partition integer;\n"
        "BEGIN\n"
        "    -- One row per shard; a shard that does not answer is a row that takes no writes.\n"
        "    FOR v_partition IN SELECT f FROM prme._first_partitions() AS f LOOP\n"
        "        BEGIN\n"
        f"            RETURN QUERY SELECT * FROM prme._shard_{function.name}(v_partition);\n"
        "        EXCEPTION WHEN OTHERS THEN\n"
        f"            RETURN QUERY SELECT {fallback};\n"
        "        END;\n"
        "    END LOOP;\n"
        "END;\n"
        "$$;\n"
    )
    return shard_call + "\n" + _with_acl(function, wrapper)


def _with_acl(function: ApiFunction, definition: str) -> str:
    identity = function.identity
    lines = [definition.rstrip("\n")]
    if function.comment is not None:
        lines.append(f"COMMENT ON FUNCTION {identity} IS\n{_literal(function.comment)};")
    lines.append(f"REVOKE ALL ON FUNCTION {identity} FROM public;")
    lines.append(f"GRANT EXECUTE ON FUNCTION {identity} TO prme_app;")
    return "\n".join(lines) + "\n"


def _composite(type_: CompositeType) -> str:
    columns = ",\n".join(f"    {name} {type_name}" for name, type_name in type_.columns)
    text = f"CREATE TYPE prme.{type_.name} AS (\n{columns}\n);\n"
    if type_.comment is not None:
        text += f"COMMENT ON TYPE prme.{type_.name} IS\n{_literal(type_.comment)};\n"
    return text


def render(functions: Iterable[ApiFunction], types: Iterable[CompositeType]) -> str:
    """The proxy installation script for these functions and types."""
    parts = [HEADER, "-- Result types: the shards' columns.\n"]
    parts += [_composite(t) for t in types]
    parts.append("-- The API.\n")
    parts += [_proxy_function(f) for f in functions]
    return "\n".join(parts)


def generate(conn: psycopg.Connection[Any]) -> str:
    """The proxy installation script for the shard schema of this connection's database."""
    return render(api_functions(conn), composite_types(conn))
