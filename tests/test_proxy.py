"""The PL/Proxy artifact: generated from sql/postgres, checked in, with the shards' signatures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from prme_pg import cli, proxy, testing

ROOT = Path(__file__).resolve().parent.parent
ARTIFACT = ROOT / "sql" / "proxy" / "prme_proxy.sql"
#: Functions only the proxy has, granted to prme_app (routing).
PROXY_ONLY = {"owner_hash", "route"}


@pytest.fixture(scope="module")
def sql_dir_dsn(pg_server: testing.Server) -> Iterator[str]:
    """A database built from sql/postgres/, the readable definition the artifact follows."""
    name = testing.create_database(pg_server, prefix="prme_proxy_src")
    with psycopg.connect(pg_server.dsn_for(name)) as conn:
        for path in sorted((ROOT / "sql" / "postgres").glob("*.sql")):
            conn.execute(path.read_bytes())
        conn.commit()
    yield pg_server.dsn_for(name)
    testing.drop_database(pg_server, name)


def test_checked_in_proxy_is_what_the_generator_writes(sql_dir_dsn: str) -> None:
    """A schema change must regenerate sql/proxy/prme_proxy.sql (prme-pg shard generate)."""
    with psycopg.connect(sql_dir_dsn) as conn:
        generated = proxy.generate(conn)
    assert ARTIFACT.read_text(encoding="utf-8") == generated, (
        "sql/proxy/prme_proxy.sql is stale: run scripts/generate-proxy"
    )


def test_proxy_functions_have_the_shards_signatures_results_and_comments(
    pg_server: testing.Server, sql_dir_dsn: str
) -> None:
    name = testing.create_database(pg_server, prefix="prme_proxy")
    try:
        with psycopg.connect(pg_server.dsn_for(name), autocommit=True) as conn:
            conn.execute(ARTIFACT.read_bytes())
            on_proxy = {f.identity: f for f in proxy.api_functions(conn) if f.name not in PROXY_ONLY}
            public = conn.execute(
                "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = 'prme' AND has_function_privilege('public', p.oid, 'EXECUTE')"
            ).fetchall()
            types = {t.name: t for t in proxy.composite_types(conn)}
        with psycopg.connect(sql_dir_dsn) as conn:
            on_shard = {f.identity: f for f in proxy.api_functions(conn)}
            shard_types = {t.name: t for t in proxy.composite_types(conn)}
    finally:
        testing.drop_database(pg_server, name)
    assert sorted(on_proxy) == sorted(on_shard)
    for identity, function in on_shard.items():
        assert on_proxy[identity].arguments == function.arguments, identity
        assert on_proxy[identity].result == function.result, identity
        assert on_proxy[identity].comment == function.comment, identity
    assert public == [], "EXECUTE is revoked from PUBLIC on every proxy function"
    assert {n: t.columns for n, t in types.items()} == {n: t.columns for n, t in shard_types.items()}


def test_python_and_sql_owner_hash_agree(pg_server: testing.Server) -> None:
    owners = ["alice", "bob", "*", "Ünïcødé 👋", "x" * 256, "", None]
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        for owner in owners:
            row = conn.execute(
                "SELECT coalesce(('x' || substr(md5(%s::text), 1, 8))::bit(32)::integer, 0)", (owner,)
            ).fetchone()
            assert row is not None
            assert row[0] == proxy.owner_hash(owner), owner
    assert proxy.owner_hash(None) == 0
    assert proxy.partition_of(None, 16) == 0
    assert {proxy.partition_of(f"user-{n}", 4) for n in range(64)} == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="power of two"):
        proxy.partition_of("alice", 6)


def test_the_sql_hash_is_the_one_in_the_artifact() -> None:
    """The test above checks this expression; the artifact must use the same one."""
    assert "coalesce(('x' || substr(md5(user_id), 1, 8))::bit(32)::integer, 0)" in ARTIFACT.read_text()


def test_shard_commands_refuse_bad_input_in_one_line(
    pg_server: testing.Server, capsys: pytest.CaptureFixture[str]
) -> None:
    name = testing.create_database(pg_server, prefix="prme_proxy_cli")
    dsn = pg_server.dsn_for(name)
    try:
        assert cli.main(["shard", "init", "--dsn", dsn, "--shard", "dbname=a", "--partitions", "6"]) == 2
        assert "power of two" in capsys.readouterr().err
        assert cli.main(["shard", "init", "--dsn", dsn, "--shard", "dbname=a", "--shard", "dbname=a"]) == 2
        assert "named twice" in capsys.readouterr().err
        for command in (["locate", "--user", "alice"], ["status"], ["migrate"], ["move", "--user", "a", "--to", "x"]):
            assert cli.main(["shard", command[0], "--dsn", dsn, *command[1:]]) == 2, command
            error = capsys.readouterr().err
            assert "prme-pg shard init first" in error and len(error.strip().splitlines()) == 1, error
        assert cli.main(["shard", "init", "--dsn", dsn, "--shard", "dbname=a", "--shard", "dbname=b"]) == 0
        capsys.readouterr()
        assert cli.main(["shard", "move", "--dsn", dsn, "--user", "alice", "--to", "dbname=c"]) == 2
        assert "is not a shard of this cluster" in capsys.readouterr().err
    finally:
        testing.drop_database(pg_server, name)
