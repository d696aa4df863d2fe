"""Bulk import speed and memory (issue 35, item 5).

Run from the repository root:

    .venv/bin/python bench/bulk_bench.py               # 10,000 memories, one owner and 100 owners
    .venv/bin/python bench/bulk_bench.py --count 2000  # quicker
    .venv/bin/python bench/bulk_bench.py --json

Each case writes a JSON Lines file of ``--count`` memories of 100 characters (prme's own
format, an external id per line), then imports it with ``prme_pg.bulk.import_lines`` as
``prme-pg import`` does: read line by line, parsed and checked in Python, written in
``add_nodes`` batches of 1,000 (one transaction each). PostgreSQL is a throwaway cluster
from this machine's binaries with the server defaults (every commit flushed). Reported:
memories per second (created, end to end: file read, parse, engine; the model loaded before,
``warm_up_seconds`` apart, as a server loads it once when it starts), CPU µs a memory of the
importing process and of the PostgreSQL backend (the load average beside), and the peak RSS
growth over the import, for the file and for one five times its size, each imported by a
process of its own (so neither inherits the other's peak) -- the import streams, so the
second should not be larger. The same files are imported into new memory packs too. The
client embeds every batch with its default embedder (one model call per batch, the vectors
stored beside the memories), as ``prme-pg import`` does; ``--no-embedder`` measures words
only. Targets: >= 5,000/s into PostgreSQL, >= 2,000/s into a pack.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from semantic_bench import server_cpu_ms

from prme_pg import MemoryClient, testing
from prme_pg.bulk import import_lines, read_lines


def write_file(path: Path, count: int, owners: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i in range(count):
            content = f"memory {i:07d} of the bulk benchmark, about editors, tabs and habits of an owner"
            content = (content + " " + "x" * 100)[:100]
            line = {"id": f"bench-{i}", "user_id": f"owner-{i % owners:03d}", "content": content}
            out.write(json.dumps(line) + "\n")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_import(target: str | Path, path: Path, embedder: bool = True) -> dict[str, float]:
    """Memories a second, and CPU µs a memory of this process (every thread) and, on
    PostgreSQL, of the server backend that writes them (from /proc): what load from other
    processes, which stretches wall time, leaves mostly alone. The model is loaded first and
    timed apart (``warm_up_seconds``): once per process, whatever the file's size."""
    options: dict[str, object] = {} if isinstance(target, Path) else {"max_size": 1}
    options["embedder"] = None if embedder else False
    with MemoryClient(target, **options) as memory, path.open("rb") as stream:  # type: ignore[arg-type]
        warm_up = time.perf_counter()
        memory.warm_up()
        warm_up = time.perf_counter() - warm_up
        backend_pid = os.getpid()  # a pack: the server is this process (not reported)
        if not isinstance(target, Path):
            with memory.backend.pool.connection() as conn:  # type: ignore[attr-defined]
                backend_pid = conn.info.backend_pid  # the pool's one connection
        started, client_before = time.perf_counter(), time.process_time()
        done = []
        server_ms = server_cpu_ms(backend_pid, lambda _: done.append(import_lines(memory, read_lines(stream))), [""], 1)
        summary = done[0]
        seconds, client = time.perf_counter() - started, time.process_time() - client_before
        server = None if isinstance(target, Path) else server_ms / 1000
    return {
        "created": summary.created,
        "seconds": round(seconds, 3),
        "per_second": round(summary.created / seconds),
        "warm_up_seconds": round(warm_up, 3),
        "client_cpu_us": round(client * 1e6 / summary.created),
        **({} if server is None else {"server_cpu_us": round(server * 1e6 / summary.created)}),
        "load": round(os.getloadavg()[0], 2),
    }


#: The pack's DuckDB cache limit while its memory is measured (``--pack-memory-limit``): DuckDB
#: keeps the blocks it wrote cached up to its memory_limit (by default 80 % of RAM), the pack's
#: data rather than the import's; bounded, it shows what the import itself holds.
PACK_MEMORY_LIMIT = "64MB"


def rss_growth(engine: str, target: str | Path, path: Path, embedder: bool, limit: str | None = None) -> float:
    """The peak RSS growth (MB) of importing ``path`` into ``target``, in a process of its own."""
    command = [sys.executable, __file__, "--rss-child", engine, str(target), str(path)]
    if limit:
        command += ["--pack-memory-limit", limit]
    if not embedder:
        command.append("--no-embedder")
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def rss_child(engine: str, target: str, path: Path, embedder: bool, limit: str | None) -> None:
    with MemoryClient(Path(target) if engine == "pack" else target, embedder=None if embedder else False) as memory:
        if embedder:
            memory.warm_up()  # the model's own memory is not the import's
        if limit:
            memory.backend._con.execute(f"SET memory_limit = '{limit}'")  # type: ignore[attr-defined]
        before = peak_rss_mb()
        with path.open("rb") as stream:
            import_lines(memory, read_lines(stream))
    print(round(peak_rss_mb() - before, 1))


def pack_memory(folder: Path, count: int, embed: bool) -> list[dict[str, object]]:
    small, large = folder / "rss-small.jsonl", folder / "rss-large.jsonl"
    write_file(small, count, 100)
    write_file(large, 5 * count, 100)
    rows: list[dict[str, object]] = []
    for limit in (None, PACK_MEMORY_LIMIT):
        growth = [
            rss_growth("pack", folder / f"rss-pack-{path.stem}-{limit}", path, embed, limit) for path in (small, large)
        ]
        rows.append(
            {
                "engine": "pack",
                "duckdb_memory_limit": limit or "default",
                "rss_growth_mb": {"file": growth[0], "file_x5": growth[1]},
                "lines": count,
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-embedder", action="store_true", help="words only: no vectors")
    parser.add_argument("--pack-only", action="store_true", help="only the memory pack import")
    parser.add_argument("--no-memory", action="store_true", help="no RSS measurement (the 5x file)")
    parser.add_argument("--rss-child", nargs=3, metavar=("ENGINE", "TARGET", "FILE"), help=argparse.SUPPRESS)
    parser.add_argument("--pack-memory-limit", help=argparse.SUPPRESS)
    args = parser.parse_args()
    embed = not args.no_embedder
    if args.rss_child:
        engine, target, file = args.rss_child
        rss_child(engine, target, Path(file), embed, args.pack_memory_limit)
        return 0
    results: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as folder:
        for owners in (1, 100):
            path = Path(folder) / f"bench-{owners}.jsonl"
            write_file(path, args.count, owners)
            result = run_import(Path(folder) / f"pack-{owners}", path, embed)
            results.append({"engine": "pack", "owners": owners, "memories": args.count, "embedder": embed, **result})
        if not args.no_memory:
            results += pack_memory(Path(folder), args.count, embed)
    if args.pack_only:
        for row in results:
            print(json.dumps(row) if args.json else "  ".join(f"{key}={value}" for key, value in row.items()))
        return 0
    cluster = testing.PostgresCluster.create()
    server = testing.Server(cluster.dsn, cluster)
    try:
        with tempfile.TemporaryDirectory() as folder:
            for owners in (1, 100):
                path = Path(folder) / f"bench-{owners}.jsonl"
                write_file(path, args.count, owners)
                name = testing.create_database(server, prefix="prme_bulk_bench")
                testing.install_schema(server.dsn_for(name))
                result = run_import(server.dsn_for(name), path, embed)
                results.append(
                    {"engine": "postgres", "owners": owners, "memories": args.count, "embedder": embed, **result}
                )
            # Memory: the same import of a file five times larger must not need more memory.
            small, large = Path(folder) / "small.jsonl", Path(folder) / "large.jsonl"
            write_file(small, args.count, 100)
            write_file(large, 5 * args.count, 100)
            growth = []
            for path in [] if args.no_memory else [small, large]:
                name = testing.create_database(server, prefix="prme_bulk_bench")
                testing.install_schema(server.dsn_for(name))
                growth.append(rss_growth("postgres", server.dsn_for(name), path, embed))
            if growth:
                results.append(
                    {
                        "engine": "postgres",
                        "rss_growth_mb": {"file": growth[0], "file_x5": growth[1]},
                        "lines": args.count,
                    }
                )
    finally:
        server.close()
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for row in results:
            print("  ".join(f"{key}={value}" for key, value in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
