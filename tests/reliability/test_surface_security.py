"""Issue 32: the newer surfaces under attack, for real (docs/SECURITY.md, docs/RELIABILITY.md).

Every server here is ``prme-pg serve`` (or ``prme-pg mcp``) in its own process, spoken to over
real sockets; the second local user is the OS user ``nobody`` (``setpriv``).
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from prme_pg import testing

ROOT = Path(__file__).resolve().parents[2]


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "prme_pg.cli", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
    )


def _stop(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    return process.stdout.read() if process.stdout else ""


def _wait_ready(process: subprocess.Popen[str], http: httpx.Client) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, _stop(process)
        try:
            if http.get("/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.1)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder every local user may enter (0755), so only a socket's own mode keeps them out."""
    folder = Path(tempfile.mkdtemp(prefix="prme-uds-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _connect_as_nobody(path: Path) -> subprocess.CompletedProcess[str]:
    """Try to connect to the unix socket at path as the OS user nobody: exit 0 if it could."""
    script = "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print('connected')"
    nobody = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"]
    return subprocess.run(
        [*nobody, "/usr/bin/python3", "-c", script, str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


# -- item 1: the unix socket's mode ------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_unix_socket_is_0600_and_another_user_cannot_connect(module_db: str, open_dir: Path) -> None:
    """serve --uds --trusted-loopback: the socket is 0600 whatever the umask; nobody cannot connect."""
    assert _connect_as_nobody(Path("/nonexistent.sock")).returncode != 0
    path = open_dir / "prme.sock"
    serve = _spawn("serve", "--dsn", module_db, "--uds", str(path), "--trusted-loopback", "--default-user", "alice")
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), base_url="http://prme") as http:
            _wait_ready(serve, http)
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            refused = _connect_as_nobody(path)
            assert refused.returncode != 0 and "PermissionError" in refused.stderr, refused
            assert http.get("/api/v2/operations/x").status_code == 404  # the server's own user still connects
    finally:
        _stop(serve)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_uds_mode_opens_a_group_and_never_everyone(module_db: str, open_dir: Path) -> None:
    """--uds-mode 660 is set as given; a mode with any bit for other users is a usage error."""
    wide_mode = ("--uds-mode", "666")
    wide = subprocess.run(
        [sys.executable, "-m", "prme_pg.cli", "serve", "--dsn", module_db, "--uds", str(open_dir / "s"), *wide_mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert wide.returncode == 2 and "every local user" in wide.stderr and "Traceback" not in wide.stderr
    path = open_dir / "group.sock"
    serve = _spawn("serve", "--dsn", module_db, "--uds", str(path), "--uds-mode", "660")
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), base_url="http://prme") as http:
            _wait_ready(serve, http)
        assert stat.S_IMODE(path.stat().st_mode) == 0o660
        assert _connect_as_nobody(path).returncode != 0  # nobody is not in root's group
    finally:
        _stop(serve)


# -- serve on a busy port: bind first, then announce ----------------------------------------------


def test_serve_on_a_busy_port_fails_in_one_line_before_announcing(module_db: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "prme_pg.cli", "serve", "--dsn", module_db, "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 1, result
    assert "serving" not in result.stdout, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0], result.stderr
    assert "Errno" not in lines[0]


# -- item 2: trusted loopback answers only its own Host and Origin --------------------------------


@pytest.fixture
def trusted_server(module_db: str) -> Iterator[tuple[str, int]]:
    port = testing.free_port()
    serve = _spawn("serve", "--dsn", module_db, "--port", str(port), "--trusted-loopback", "--default-user", "alice")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
            _wait_ready(serve, http)
        yield f"http://127.0.0.1:{port}", port
    finally:
        _stop(serve)


def test_trusted_loopback_refuses_a_rebound_host_and_a_foreign_origin(trusted_server: tuple[str, int]) -> None:
    base, port = trusted_server
    submit = {
        "operation_id": "rebound",
        "schema_version": 2,
        "kind": "add_memory",
        "payload_hash": "0" * 64,
        "payload": {"content": "x", "user_id": "alice"},
    }
    with httpx.Client(base_url=base) as http:
        # A page whose DNS name now points at 127.0.0.1: the browser sends the page's own Host.
        rebound = {"Host": f"attacker.example:{port}"}
        for method, path, body in (
            ("GET", "/api/v2/operations/x", None),
            ("POST", "/api/v2/operations", submit),
            ("GET", "/api/v2/events", None),
        ):
            answer = http.request(method, path, json=body, headers=rebound)
            assert answer.status_code == 421, (path, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
        foreign = {"Origin": "http://attacker.example"}
        assert http.get("/api/v2/operations/x", headers=foreign).status_code == 403
        assert http.post("/api/v2/operations", json=submit, headers={"Origin": "null"}).status_code == 403
        # The server's own names, with or without its own Origin, pass (404: no such operation).
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
            assert http.get("/api/v2/operations/x", headers={"Host": host}).status_code == 404, host
        own = {"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}"}
        assert http.get("/api/v2/operations/x", headers=own).status_code == 404
        assert http.get("/api/v2/operations/x", headers={"Host": "127.0.0.1:1"}).status_code == 421  # another port
        # A token is checked as always, whatever the Host: a bad one is 401, not 421.
        token = {"Authorization": "Bearer nope", **rebound}
        assert http.get("/api/v2/operations/x", headers=token).status_code == 401


# -- item 3: slow and idle connections are closed; connections are capped --------------------------


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> bytes | None:
    """What the server sent before it closed the connection, or None if it is still open."""
    sock.settimeout(seconds)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return received


def test_slow_heads_and_bodies_are_cut_and_connections_capped(module_db: str) -> None:
    port = testing.free_port()
    serve = _spawn(
        "serve",
        "--dsn",
        module_db,
        "--port",
        str(port),
        "--request-head-timeout",
        "2",
        "--request-body-timeout",
        "2",
        "--max-connections",
        "6",
        "--max-connections-per-peer",
        "3",
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
            _wait_ready(serve, http)
        started = time.monotonic()
        idle = _connect(port)  # sends nothing at all
        half = _connect(port)
        half.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # a head never finished
        body = _connect(port)
        body.sendall(b"POST /api/v2/operations HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        # A fourth connection from the same peer is closed at once, before it sends a byte.
        fourth = _connect(port)
        assert _closed_within(fourth, 5) is not None
        # Another peer (127.0.0.2 is loopback too) is served; it and a third peer reach the total.
        others = [_connect(port, "127.0.0.2"), _connect(port, "127.0.0.2")]
        others[0].sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert b"200 OK" in others[0].recv(65536)
        third_peer = _connect(port, "127.0.0.3")
        assert _closed_within(third_peer, 5) is not None  # 6 open: past the total
        for sock in (idle, half):
            answer = _closed_within(sock, 10)
            assert answer is not None, "a slow connection was left open"
            assert answer.startswith(b"HTTP/1.1 408"), answer
        # The body's request was answered (401: no token) and its connection closed, body unread.
        assert _closed_within(body, 10) is not None, "a connection with a body never finished was left open"
        assert time.monotonic() - started < 15
        for sock in (idle, half, body, fourth, third_peer, *others):
            sock.close()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
            assert http.get("/health").status_code == 200  # the slots are free again
    finally:
        _stop(serve)


# -- item 4: the MCP HTTP transport's head limit and per-owner slots --------------------------------


def test_mcp_http_bounds_heads_and_each_owners_calls(module_db: str) -> None:
    """Real MCP SDK client: a head past 16 KiB is 431; one owner's burst past its slots gets tool
    errors that say 429, and the calls that ran are answered."""
    import anyio
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    from prme_pg import MemoryClient

    with MemoryClient(module_db) as memory:
        token = memory.create_api_token("mcp-flood")
    port = testing.free_port()
    server_args = ("--max-requests-per-owner", "1")
    server = _spawn("mcp", "--transport", "http", "--dsn", module_db, "--port", str(port), *server_args)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, _stop(server)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "prme-pg mcp did not listen"
                time.sleep(0.1)
        huge = httpx.post(url, headers={"X-Grow": "a" * 32768, "Authorization": f"Bearer {token}"}, json={})
        assert huge.status_code == 431, huge.text

        async def burst() -> list[str]:
            headers = {"Authorization": f"Bearer {token}"}
            transport = streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=60))
            errors: list[str] = []
            async with Client(transport) as client:

                async def one(index: int) -> None:
                    arguments = {"message": f"no, it is tabs {index}", "shown_node_ids": []}
                    result = await client.call_tool("correct", arguments)
                    if result.is_error:
                        errors.append(" ".join(block.text for block in result.content if block.type == "text"))

                async with anyio.create_task_group() as group:
                    for index in range(40):
                        group.start_soon(one, index)
                after = await client.call_tool("correct", {"message": "no, spaces", "shown_node_ids": []})
                assert not after.is_error, after.content
            return errors

        errors = anyio.run(burst)
        assert errors, "40 concurrent calls of one owner were all accepted past a limit of 1"
        assert all("429 too many requests" in text for text in errors), errors
        assert len(errors) < 40
    finally:
        _stop(server)
