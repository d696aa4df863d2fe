"""``prme-pg mcp`` driven by the MCP SDK's own client, over stdio and streamable HTTP,
against a real PostgreSQL clone and a real memory pack.

Each server is the real CLI in a subprocess (``python -m prme_pg.cli mcp ...``): stdio
through the SDK's stdio transport, HTTP over a socket on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextResourceContents

from prme_pg import AsyncMemoryClient, MemoryClient, PrmeError, cli, testing
from prme_pg.mcp_server import MCP_NAMESPACE, TOOL_NAMES, call_key

SERVER = [sys.executable, "-m", "prme_pg.cli", "mcp"]


def _stdio(*args: str) -> Client:
    return Client(StdioServerParameters(command=SERVER[0], args=[*SERVER[1:], *args]), read_timeout_seconds=60)


@contextlib.contextmanager
def _http_server(*args: str) -> Iterator[str]:
    """The CLI serving streamable HTTP on a free port; yields the /mcp URL; SIGTERM on exit."""
    port = testing.free_port()
    process = subprocess.Popen([*SERVER, "--transport", "http", "--port", str(port), *args])
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"prme-pg mcp exited with {process.returncode}"
            assert time.monotonic() < deadline, "prme-pg mcp did not listen"
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        assert process.wait(30) == 0, "SIGTERM ends the server cleanly"


def _http(url: str, token: str | None = None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=60))
    return Client(transport)


def _ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def _error(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    text = " ".join(block.text for block in result.content if block.type == "text")
    assert "Traceback" not in text
    return text


async def _list_tools(client: Client) -> None:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == set(TOOL_NAMES)
    for tool in tools.values():
        assert tool.description and len(tool.description) > 40, tool.name
        assert tool.input_schema["type"] == "object"
        for name, schema in tool.input_schema.get("properties", {}).items():
            assert schema.get("description"), f"{tool.name}.{name} has no description"
    assert tools["confirm"].input_schema["required"] == ["node_id"]
    assert tools["recall"].annotations is not None and tools["recall"].annotations.read_only_hint


async def _remember_and_confirm(client: Client, *, user: str) -> dict[str, Any]:
    """remember twice (one memory), confirm twice (one confirmation); returns the memory."""
    remembered = _ok(await client.call_tool("remember", {"content": "Prefers green tea", "evidence": "I love tea"}))
    again = _ok(await client.call_tool("remember", {"content": "Prefers green tea", "evidence": "I love tea"}))
    assert (remembered["replayed"], again["replayed"]) == (False, True)
    assert again["node_id"] == remembered["node_id"] and again["evidence_id"] == remembered["evidence_id"]
    assert remembered["node_id"] == str(call_key(user, "remember", _remember_args("Prefers green tea", "I love tea")))

    arguments = {"node_id": remembered["node_id"], "evidence": "yes, green tea"}
    first = _ok(await client.call_tool("confirm", arguments))
    retried = _ok(await client.call_tool("confirm", arguments))
    assert first["replayed"] is False and retried["replayed"] is True, "a retried confirm counts once"
    assert first["request_id"] == retried["request_id"]
    assert retried["version"] == first["version"] == remembered["version"] + 1
    assert retried["reinforcement_boost"] == 0.15 and retried["confidence_base"] == 0.55

    other = _ok(await client.call_tool("confirm", {"node_id": remembered["node_id"], "evidence": "still tea"}))
    assert other["replayed"] is False and other["version"] == first["version"] + 1, "new evidence counts again"
    return first


def _remember_args(content: str, evidence: str | None) -> dict[str, Any]:
    return {"content": content, "evidence": evidence, "scope": "personal", "kind": "fact"}


async def _bad_input(client: Client, foreign_node: uuid.UUID) -> None:
    assert "PR404 not found" in _error(await client.call_tool("confirm", {"node_id": str(foreign_node)}))
    assert "PR404" in _error(await client.call_tool("confirm", {"node_id": str(foreign_node), "evidence": "yes"}))
    assert "node_id" in _error(await client.call_tool("confirm", {"node_id": "not-a-uuid"}))
    assert "PR422 invalid input" in _error(await client.call_tool("remember", {"content": " \t"}))
    assert "pattern" in _error(await client.call_tool("remember", {"content": "x", "scope": "Not A Scope"}))
    both = {"node_id": str(foreign_node), "evidence": "yes", "evidence_id": str(uuid.uuid4())}
    assert "not both" in _error(await client.call_tool("confirm", both))


async def _postgres_tools(client: Client, memory: dict[str, Any], foreign_node: uuid.UUID) -> None:
    """recall, correct, record_outcome, review, prompt and the snapshot resource on PostgreSQL."""
    hits = _ok(await client.call_tool("recall", {"query": "green tea"}))["hits"]
    assert [hit["node_id"] for hit in hits] == [memory["node_id"]]
    emacs = _ok(await client.call_tool("recall", {"query": "emacs"}))["hits"]  # another owner's words
    assert str(foreign_node) not in [hit["node_id"] for hit in emacs], "another owner's memory"
    assert [hit["node_id"] for hit in emacs] in ([], [memory["node_id"]])  # only this owner's, by meaning

    outcome = {"node_id": memory["node_id"], "outcome": "implicit_success", "notes": "helped pick a drink"}
    recorded = _ok(await client.call_tool("record_outcome", outcome))
    retried = _ok(await client.call_tool("record_outcome", outcome))
    assert (recorded["replayed"], retried["replayed"]) == (False, True) and retried["id"] == recorded["id"]
    foreign = {"node_id": str(foreign_node), "outcome": "implicit_success"}
    assert "PR404" in _error(await client.call_tool("record_outcome", foreign))
    assert "outcome" in _error(await client.call_tool("record_outcome", {**outcome, "outcome": "delighted"}))

    link = _ok(
        await client.call_tool(
            "correct",
            {"message": "No, actually I prefer green coffee now", "shown_node_ids": [memory["node_id"]]},
        )
    )
    assert (link["status"], link["node_id"], link["inbox_id"]) == ("linked", memory["node_id"], None)
    assert link["outcome_id"] and link["matches"] == [{"node_id": memory["node_id"], "overlap": 0.5}]
    assert "PR422" in _error(await client.call_tool("correct", {"message": " ", "shown_node_ids": []}))

    review = _ok(await client.call_tool("review", {}))
    assert review["total"] == 1 and len(review["recommendations"]) == 1
    row = review["recommendations"][0]
    assert (row["node_id"], row["recommendations"]) == (memory["node_id"], ["review_memory"])
    counts = (row["explicit_reinforcements"], row["implicit_successes"], row["explicit_corrections"])
    assert counts == (2, 1, 1), "two confirmations, one outcome (its retry did not count), one correction"

    # Nobody ran snapshot publish: the prompt tool publishes on demand (issue 33), so it is not empty.
    fresh = _ok(await client.call_tool("prompt", {"scopes": ["personal"], "budget_bytes": 4096}))
    assert "Prefers green tea" in fresh["prompt"] and fresh["generation_ids"][0] is not None
    bad = _error(await client.call_tool("remember", {"content": "x", "scope": "Not A Scope"}))
    assert "pydantic" not in bad and bad.startswith("Error executing tool remember: invalid arguments: scope: ")


async def _published_prompt(client: Client) -> None:
    prompt = _ok(await client.call_tool("prompt", {"scopes": ["personal"], "budget_bytes": 4096}))
    assert "Prefers green tea" in prompt["prompt"] and prompt["byte_size"] <= 4096
    templates = (await client.list_resource_templates()).resource_templates
    assert [template.uri_template for template in templates] == ["prme://snapshots/{scope}"]
    contents = (await client.read_resource("prme://snapshots/personal")).contents
    assert isinstance(contents[0], TextResourceContents)
    snapshot = json.loads(contents[0].text)
    assert snapshot["generation_id"] == prompt["generation_ids"][0]
    assert [item["content"] for item in snapshot["document"]["items"]] == ["Prefers green tea"]


def _seed_bob(target: str) -> uuid.UUID:
    with MemoryClient(target) as memory:
        return memory.add_node("Bob uses emacs", user_id="bob").id


def _confirmed_once(target: str, node_id: str) -> None:
    """Checked with the Python client after the server: two confirmations (two evidences), journal intact."""
    with MemoryClient(target) as memory:
        node = memory.get_node(node_id, user_id="alice")
        assert node.version == 3 and node.reinforcement_boost == Decimal("0.3")
        assert len(node.evidence_refs) == 2
        assert memory.verify_journal(user_id="alice", independent=True) == []


def test_stdio_on_postgres(db_dsn: str) -> None:
    bobs = _seed_bob(db_dsn)

    async def scenario() -> dict[str, Any]:
        async with _stdio("--dsn", db_dsn, "--user", "alice") as client:
            await _list_tools(client)
            memory = await _remember_and_confirm(client, user="alice")
            await _bad_input(client, bobs)
            await _postgres_tools(client, memory, bobs)
            with MemoryClient(db_dsn) as direct:
                direct.publish_snapshot("personal", user_id="alice")
            await _published_prompt(client)
            with pytest.raises(MCPError, match="no snapshot of scope 'work' was published"):
                await client.read_resource("prme://snapshots/work")
            return memory

    memory = anyio.run(scenario)
    _confirmed_once(db_dsn, memory["node_id"])


async def _pack_capability(call: Callable[[AsyncMemoryClient], Awaitable[object]], pack: Path) -> str | None:
    """None if the pack serves the call directly, else the PrmeError it raises ("... needs PostgreSQL")."""
    async with AsyncMemoryClient(pack) as memory:
        try:
            await call(memory)
        except PrmeError as exc:
            if exc.sqlstate:
                return None  # the pack has the capability and refused the arguments
            return str(exc)
    return None


def test_stdio_on_a_pack(tmp_path: Path) -> None:
    pack = tmp_path / "memories"
    bobs = _seed_bob(str(pack))
    # What the pack cannot do yet (docs/MCP.md): the MCP tool must say exactly that, as a tool error.
    node = str(uuid.uuid4())
    probes: dict[str, tuple[Callable[[AsyncMemoryClient], Awaitable[object]], dict[str, Any]]] = {
        "recall": (lambda m: m.recall("tea", user_id="alice"), {"query": "tea"}),
        "record_outcome": (
            lambda m: m.record_outcome(node, "implicit_success", user_id="alice"),
            {"node_id": node, "outcome": "implicit_success"},
        ),
        "correct": (
            lambda m: m.link_correction("No, coffee", [], user_id="alice"),
            {"message": "No, coffee", "shown_node_ids": []},
        ),
        "review": (lambda m: m.maintenance_report(user_id="alice"), {}),
        "prompt": (
            lambda m: m.assemble_prompt(["personal"], user_id="alice", budget_bytes=100),
            {"scopes": ["personal"]},
        ),
    }
    missing = {name: anyio.run(_pack_capability, call, pack) for name, (call, _) in probes.items()}

    async def scenario() -> dict[str, Any]:
        async with _stdio("--pack", str(pack), "--user", "alice") as client:
            await _list_tools(client)
            memory = await _remember_and_confirm(client, user="alice")
            await _bad_input(client, bobs)
            for name, (_, arguments) in probes.items():
                result = await client.call_tool(name, arguments)
                if missing[name] is None:
                    assert not result.is_error or "PR404" in _error(result), name
                else:
                    assert _error(result) == f"Error executing tool {name}: {missing[name]}"
            # A second server on the same pack (DuckDB has one writer process) exits at once, in one message.
            second = subprocess.run(
                [*SERVER, "--pack", str(pack), "--user", "alice"], input="", capture_output=True, text=True, timeout=60
            )
            assert second.returncode == 1
            assert f"the memory pack at {pack} is in use by process" in " ".join(second.stderr.split())
            assert "Traceback" not in second.stderr
            return memory

    memory = anyio.run(scenario)
    _confirmed_once(str(pack), memory["node_id"])


def test_http_with_bearer_tokens_per_owner(db_dsn: str) -> None:
    with MemoryClient(db_dsn) as memory:
        alice, bob = memory.create_api_token("alice"), memory.create_api_token("bob")
    bobs = _seed_bob(db_dsn)

    with _http_server("--dsn", db_dsn) as url:
        for token in (None, "nonsense", alice[:-2] + "xx"):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            refused = httpx.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"

        async def scenario() -> dict[str, Any]:
            async with _http(url, alice) as as_alice, _http(url, bob) as as_bob:
                await _list_tools(as_alice)
                memory = await _remember_and_confirm(as_alice, user="alice")
                await _bad_input(as_alice, bobs)
                await _postgres_tools(as_alice, memory, bobs)
                # bob's token: alice's ids are not found, his own memory is his.
                assert "PR404" in _error(await as_bob.call_tool("confirm", {"node_id": memory["node_id"]}))
                hits = _ok(await as_bob.call_tool("recall", {"query": "emacs"}))["hits"]
                assert [hit["node_id"] for hit in hits] == [str(bobs)]
                return memory

        memory = anyio.run(scenario)
    _confirmed_once(db_dsn, memory["node_id"])


def test_http_on_a_pack_for_one_owner(tmp_path: Path) -> None:
    pack = tmp_path / "memories"
    bobs = _seed_bob(str(pack))
    with _http_server("--pack", str(pack), "--user", "alice") as url:

        async def scenario() -> dict[str, Any]:
            async with _http(url) as client:
                await _list_tools(client)
                memory = await _remember_and_confirm(client, user="alice")
                await _bad_input(client, bobs)
                return memory

        memory = anyio.run(scenario)
    _confirmed_once(str(pack), memory["node_id"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["mcp"], "pass --pack DIR (a memory pack) or --dsn URL"),
        (["mcp", "--pack", "x", "--dsn", "postgresql://h/db", "--user", "a"], "not both"),
        (["mcp", "--pack", "x"], "stdio serves one owner: pass --user"),
        (["mcp", "--pack", "x", "--user", "a", "--transport", "http", "--host", "192.0.2.10"], "bind a loopback"),
    ],
)
def test_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PRME_DSN", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert cli.main(argv) == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_call_keys_are_uuid5_of_the_canonical_call() -> None:
    arguments = {"node_id": "6f1b0c3e-4b0c-4a2f-9f7e-1d2c3b4a5e6f", "evidence": "yes", "evidence_id": None}
    key = call_key("alice", "confirm", arguments)
    assert key.version == 5
    assert key == call_key("alice", "confirm", dict(reversed(arguments.items()))), "key order does not matter"
    assert key != call_key("bob", "confirm", arguments) != call_key("alice", "confirm", {**arguments, "evidence": "y"})
    canonical = '{"arguments":{"evidence":"yes","evidence_id":null,"node_id":"6f1b0c3e-4b0c-4a2f-9f7e-1d2c3b4a5e6f"},'
    assert key == uuid.uuid5(MCP_NAMESPACE, canonical + '"tool":"confirm","user_id":"alice"}')


def test_http_on_a_pack_with_the_packs_bearer_tokens(tmp_path: Path) -> None:
    pack = tmp_path / "memories"
    with MemoryClient(pack) as memory:
        alice = memory.create_api_token("alice")
    with _http_server("--pack", str(pack)) as url:
        refused = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert refused.status_code == 401

        async def scenario() -> dict[str, Any]:
            async with _http(url, alice) as as_alice:
                memory = await _remember_and_confirm(as_alice, user="alice")
                hits = _ok(await as_alice.call_tool("recall", {"query": "tea"}))["hits"]
                assert [hit["node_id"] for hit in hits] == [memory["node_id"]]
                return memory

        memory = anyio.run(scenario)
    _confirmed_once(str(pack), memory["node_id"])
