"""HTTP reinforce route against the Python client calling the same database directly.

    .venv/bin/python bench/http_bench.py [--seconds 15] [--connections 16]

Starts its own PostgreSQL (durability on: synchronous_commit and fsync as shipped),
applies the migrations, creates owners, memories and a token, then measures, side by
side in one run, for the same duration and concurrency:

* direct: ``AsyncMemoryClient.reinforce`` with fresh request ids, 16 tasks on a pool of 16;
* http:   ``PUT /v1/nodes/{id}/reinforce`` with fresh ``Idempotency-Key``s, 16 concurrent
  connections from wrk (apt-get install wrk; a Lua script picks the node, the owner's
  token and a new key per request), against ``prme-pg serve`` in its own process.

A Python load generator (httpx) tops out near 500 requests/s on this machine by itself,
which would measure the client, not the API; wrk is written in C.

Target (issue 4): HTTP costs at most 2x the direct call per request, i.e. http/direct
throughput >= 0.5. The load generator shares the machine's two cores with the server and
PostgreSQL, so the ratio is a conservative one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from prme_pg import AsyncMemoryClient, MemoryClient, testing

ROOT = Path(__file__).resolve().parent.parent
OWNERS = 20
NODES_PER_OWNER = 50


async def _direct(dsn: str, nodes: list[tuple[str, uuid.UUID]], seconds: float, connections: int) -> int:
    done = 0
    async with AsyncMemoryClient(dsn, min_size=connections, max_size=connections) as memory:
        deadline = time.monotonic() + seconds

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < deadline:
                user_id, node_id = random.choice(nodes)
                await memory.reinforce(node_id, user_id=user_id, request_id=uuid.uuid4())
                done += 1

        await asyncio.gather(*(worker() for _ in range(connections)))
    return done


WRK_SCRIPT = """
math.randomseed(os.time())
local targets = {%s}
local function uuid4()
  return (string.gsub("xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx", "[xy]", function(c)
    local v = (c == "x") and math.random(0, 15) or math.random(8, 11)
    return string.format("%%x", v)
  end))
end
request = function()
  local t = targets[math.random(#targets)]
  return wrk.format("PUT", "/v1/nodes/" .. t[1] .. "/reinforce",
    {["Authorization"] = "Bearer " .. t[2], ["Idempotency-Key"] = uuid4()})
end
done = function(summary, latency, requests)
  io.write(string.format("WRK %%d %%d %%d\\n", summary.requests,
    summary.errors.status + summary.errors.connect + summary.errors.read
      + summary.errors.write + summary.errors.timeout,
    summary.duration))
end
"""


def _http(
    base: str,
    token_of: dict[str, str],
    nodes: list[tuple[str, uuid.UUID]],
    seconds: float,
    connections: int,
    workdir: Path,
) -> int:
    wrk = shutil.which("wrk")
    if wrk is None:
        raise SystemExit("wrk is needed for the HTTP side: apt-get install wrk")
    targets = ",".join(f'{{"{node_id}","{token_of[user_id]}"}}' for user_id, node_id in nodes)
    script = workdir / "reinforce.lua"
    script.write_text(WRK_SCRIPT % targets)
    out = subprocess.run(
        [wrk, "-t", "2", "-c", str(connections), "-d", f"{int(seconds)}s", "-s", str(script), base],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("WRK "))
    requests, errors, _ = (int(v) for v in line.split()[1:])
    if errors:
        raise SystemExit(f"wrk saw {errors} failed requests:\n{out}")
    return requests


def _wait_ready(base: str, token: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"prme-pg serve exited with {server.returncode}")
        try:
            if httpx.get(f"{base}/ready", headers={"Authorization": f"Bearer {token}"}).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit("prme-pg serve did not become ready")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of each workload")
    args = parser.parse_args()
    console = Console()

    console.print("starting a throwaway PostgreSQL (durability on) ...")
    cluster = testing.PostgresCluster.create({"max_connections": "100"})
    server_process: subprocess.Popen[bytes] | None = None
    try:
        server = testing.Server(cluster.dsn, cluster)
        dsn = server.dsn_for(testing.create_database(server, prefix="prme_bench_http"))
        testing.install_schema(dsn)
        nodes: list[tuple[str, uuid.UUID]] = []
        token_of: dict[str, str] = {}
        with MemoryClient(dsn) as memory:
            for i in range(OWNERS):
                user_id = f"owner-{i:03d}"
                token_of[user_id] = memory.create_api_token(user_id)
                nodes += [(user_id, memory.add_node(f"memory {j}", user_id=user_id).id) for j in range(NODES_PER_OWNER)]

        port = testing.free_port()
        base = f"http://127.0.0.1:{port}"
        server_process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "prme_pg.cli",
                "serve",
                "--dsn",
                dsn,
                "--port",
                str(port),
                "--pool-size",
                str(args.connections),
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env={**os.environ},
            stdout=subprocess.DEVNULL,
        )
        _wait_ready(base, next(iter(token_of.values())), server_process)

        totals = {"direct": 0, "http": 0}
        for round_no in range(args.rounds):
            console.print(f"round {round_no + 1}/{args.rounds}: direct client ...")
            totals["direct"] += asyncio.run(_direct(dsn, nodes, args.seconds, args.connections))
            console.print(f"round {round_no + 1}/{args.rounds}: HTTP route ...")
            totals["http"] += _http(base, token_of, nodes, args.seconds, args.connections, cluster.root)

        elapsed = args.seconds * args.rounds
        direct, http = totals["direct"] / elapsed, totals["http"] / elapsed
        table = Table(title=f"reinforce with fresh keys, {args.connections} connections, {elapsed:.0f} s each")
        for column in ("workload", "requests/s", "ratio vs direct", "target", "result"):
            table.add_column(column)
        table.add_row("direct AsyncMemoryClient.reinforce", f"{direct:,.0f}", "1.00", "", "")
        ratio = http / direct
        table.add_row(
            "HTTP PUT /v1/nodes/{id}/reinforce",
            f"{http:,.0f}",
            f"{ratio:.2f}",
            ">= 0.50",
            "[green]pass[/green]" if ratio >= 0.5 else "[red]fail[/red]",
        )
        console.print(table)
        return 0
    finally:
        if server_process is not None:
            server_process.send_signal(signal.SIGINT)
            try:
                server_process.wait(30)
            except subprocess.TimeoutExpired:
                server_process.kill()
        cluster.destroy()


if __name__ == "__main__":
    sys.exit(main())
