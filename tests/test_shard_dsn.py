"""Issue 32, item 6: ``prme-pg shard init --shard postgresql://...`` writes a cluster that works.

PL/Proxy appends ``user='...'`` to a partition's connect string, which a URL cannot take;
the shard's URL is stored in key=value form, and the proxy answers through it.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from prme_pg import MemoryClient, cli, shard, testing
from prme_pg.errors import InvalidInput


def _url(dsn: str) -> str:
    """The same server and database as a postgresql:// URL (a socket folder percent-encoded)."""
    params = conninfo_to_dict(dsn)
    host = quote(str(params.get("host", "127.0.0.1")), safe="")
    user = quote(str(params.get("user", "postgres")), safe="")
    return f"postgresql://{user}@{host}:{params.get('port', 5432)}/{params['dbname']}"


@pytest.fixture
def databases(pg_server: testing.Server, template_db: str, proxy_template: str) -> Iterator[tuple[str, str]]:
    shard_db = testing.create_database(pg_server, template=template_db, prefix="prme_urlshard")
    proxy_db = testing.create_database(pg_server, template=proxy_template, prefix="prme_urlproxy")
    try:
        yield pg_server.dsn_for(proxy_db), pg_server.dsn_for(shard_db)
    finally:
        testing.drop_database(pg_server, proxy_db)
        testing.drop_database(pg_server, shard_db)


def test_url_form_shards_are_stored_as_key_value_and_the_proxy_works(databases: tuple[str, str]) -> None:
    proxy_dsn, shard_dsn = databases
    url = _url(shard_dsn)
    assert cli.main(["shard", "init", "--dsn", proxy_dsn, "--shard", url, "--partitions", "2"]) == 0
    with MemoryClient(proxy_dsn, max_size=1) as memory:
        node = memory.add_node("routed through a URL-form shard", user_id="alice")
        assert memory.get_node(node.id, user_id="alice").content == "routed through a URL-form shard"
    # Its stored form is key=value, and `shard move --to` accepts the URL the user typed.
    stored = shard.shard_conninfo(url)
    assert not stored.startswith("postgresql://") and conninfo_to_dict(stored) == conninfo_to_dict(url)
    with psycopg.connect(proxy_dsn, autocommit=True) as conn, pytest.raises(InvalidInput, match="already on"):
        shard.move_owner(conn, "alice", url)
