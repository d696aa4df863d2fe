"""An HTTP server for the reliability suite in its own process: ``prme-pg serve``, as deployed.

Tests whose subject is the server process itself (its memory, its protocol options, its
latency while the load generator runs in the test process) use it rather than the
in-process server of tests/live_server.py.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from prme_pg import testing

ROOT = Path(__file__).resolve().parents[2]


class ServeProcess:
    """``prme-pg serve`` in its own process: its memory (VmHWM, the peak RSS) can be read."""

    def __init__(self, dsn: str, *extra: str) -> None:
        """``extra`` flags come after the defaults (``--pool-size 4 --log-level warning``) and win."""
        self.dsn = dsn
        self.port = testing.free_port()
        # A file, not a pipe: a server that logs more than a pipe holds would block on it.
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        command = [sys.executable, "-m", "prme_pg.cli", "serve", "--dsn", dsn, "--port", str(self.port)]
        self.proc = subprocess.Popen(
            [*command, "--pool-size", "4", "--log-level", "warning", *extra],
            cwd=ROOT,
            env={**os.environ, "COLUMNS": "200"},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, self.output()
            assert time.monotonic() < deadline, "prme-pg serve did not start"
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        """What the server printed so far."""
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def peak_rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def raw_request(port: int, head: bytes, body_chunks: Iterator[bytes] | None = None, read_timeout: float = 10) -> bytes:
    """Send a request head (and body chunks while the server reads them) over a raw socket; return
    what the server answered before it closed. Sending stops as soon as an answer arrives."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as sock:
        sock.sendall(head)
        answer = b""
        for chunk in body_chunks or iter(()):
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
        deadline = time.monotonic() + read_timeout
        while time.monotonic() < deadline:
            readable, _, _ = select.select([sock], [], [], deadline - time.monotonic())
            if not readable:
                break
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            answer += data
            if b"\r\n\r\n" in answer and answer.split(b"\r\n\r\n", 1)[1].rstrip().endswith(b"}"):
                break
        return answer


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer.split(b" ", 2)[1])


def chunks(total: int, size: int = 1 << 20) -> Iterator[bytes]:
    block = b"x" * size
    for _ in range(total // size):
        yield block
