"""Shared fixtures: one real PostgreSQL per session, one template database built
from the migrations, and a fresh clone of it for every test that asks.

See prme_pg/testing.py for how the server is found (PRME_TEST_DSN, a throwaway
cluster, testcontainers) and for the loud failure when there is none.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from prme_pg import shard, testing

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def pg_server() -> Iterator[testing.Server]:
    try:
        server = testing.resolve_server(testing.FAST_SETTINGS)
    except testing.NoPostgresError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.close()


def _install_test_extensions(dsn: str) -> None:
    """pgTAP and plpgsql_check in the template: test tooling, never in the migrations."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pgtap")
        except psycopg.errors.FeatureNotSupported:
            pass
        except psycopg.Error:
            script = os.environ.get("PGTAP_SQL")
            if not script or not Path(script).exists():
                pytest.fail(
                    f"the server has no pgtap extension: install postgresql-{testing.pg_major()}-pgtap, or set "
                    "PGTAP_SQL to the distribution's pgtap.sql",
                    pytrace=False,
                )
            conn.execute(Path(script).read_text().encode())
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS plpgsql_check")
        except psycopg.Error as exc:
            pytest.fail(
                f"the server has no plpgsql_check extension ({exc}): "
                f"install postgresql-{testing.pg_major()}-plpgsql-check",
                pytrace=False,
            )


@pytest.fixture(scope="session")
def template_db(pg_server: testing.Server) -> Iterator[str]:
    """Name of a database with every migration applied; tests clone it."""
    name = testing.create_database(pg_server, prefix="prme_tpl")
    dsn = pg_server.dsn_for(name)
    testing.install_schema(dsn)
    _install_test_extensions(dsn)
    yield name
    testing.drop_database(pg_server, name)


@pytest.fixture
def db_dsn(pg_server: testing.Server, template_db: str) -> Iterator[str]:
    """DSN of a fresh clone of the template, dropped after the test."""
    name = testing.create_database(pg_server, template=template_db)
    yield pg_server.dsn_for(name)
    testing.drop_database(pg_server, name)


@pytest.fixture
def conn(db_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit superuser connection to a fresh clone."""
    with psycopg.connect(db_dsn, autocommit=True) as connection:
        yield connection


@pytest.fixture(scope="session")
def pgtap_connection(pg_server: testing.Server, template_db: str) -> Iterator[psycopg.Connection[Any]]:
    """pytest-pgtap's connection: one clone for every tests/pgtap file (each rolls back)."""
    name = testing.create_database(pg_server, template=template_db)
    with psycopg.connect(pg_server.dsn_for(name)) as connection:
        yield connection
    testing.drop_database(pg_server, name)


@pytest.fixture(scope="session")
def proxy_template(pg_server: testing.Server) -> Iterator[str]:
    """A database with the checked-in PL/Proxy script installed and no cluster yet (the
    conformance suite's ``postgres-proxy`` engine clones it; docs/SCALING.md)."""
    name = testing.create_database(pg_server, prefix="prme_proxy_tpl")
    with psycopg.connect(pg_server.dsn_for(name), autocommit=True) as conn:
        shard.install_proxy(conn, (ROOT / "sql" / "proxy" / "prme_proxy.sql").read_text(encoding="utf-8"))
    yield name
    testing.drop_database(pg_server, name)
