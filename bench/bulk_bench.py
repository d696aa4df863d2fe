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
memories per second (created, end to end: file read, parse, engine), and the process's
peak RSS growth over the import, for the file and for one five times its size -- the import
streams, so the second should not be larger. The same file is imported into a new memory
pack too. The client embeds every batch with its default embedder (one model call per
batch, the vectors stored beside the memories), as ``prme-pg import`` does; ``--no-embedder``
measures words only. Targets: >= 5,000/s into PostgreSQL, >= 2,000/s into a pack.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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
    options: dict[str, object] = {} if isinstance(target, Path) else {"max_size": 1}
    options["embedder"] = None if embedder else False
    with MemoryClient(target, **options) as memory, path.open("rb") as stream:  # type: ignore[arg-type]
        started = time.perf_counter()
        summary = import_lines(memory, read_lines(stream))
        seconds = time.perf_counter() - started
    return {"created": summary.created, "seconds": round(seconds, 3), "per_second": round(summary.created / seconds)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-embedder", action="store_true", help="words only: no vectors")
    parser.add_argument("--pack-only", action="store_true", help="only the memory pack import")
    args = parser.parse_args()
    embed = not args.no_embedder
    results: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as folder:
        for owners in (1, 100):
            path = Path(folder) / f"bench-{owners}.jsonl"
            write_file(path, args.count, owners)
            result = run_import(Path(folder) / f"pack-{owners}", path, embed)
            results.append({"engine": "pack", "owners": owners, "memories": args.count, "embedder": embed, **result})
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
            for path in (small, large):
                name = testing.create_database(server, prefix="prme_bulk_bench")
                testing.install_schema(server.dsn_for(name))
                before = peak_rss_mb()
                run_import(server.dsn_for(name), path, embed)
                growth.append(round(peak_rss_mb() - before, 1))
            results.append(
                {"engine": "postgres", "rss_growth_mb": {"file": growth[0], "file_x5": growth[1]}, "lines": args.count}
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
