"""prme-pg recall and snapshot benchmark (issue 8, item 7).

Run from the repository root:

    .venv/bin/python bench/recall_bench.py              # 10,000 then 1,000,000 memories (~4 minutes)
    .venv/bin/python bench/recall_bench.py --scale 0.1  # 10,000 then 100,000 memories (~1 minute)

Question: does recall for one owner with 1,000 memories cost the same when the
database holds 10,000 memories (10 owners) as when it holds 1,000,000 (1,000
owners)? Target: within 1.5x. The GIN index over nodes.search, whose keys all start
with the owner's key, should make the cost follow the owner's memories, not the table.

It starts its own throwaway cluster from this machine's PostgreSQL binaries (server
defaults but shared_buffers = 1GB, and pg_prewarm loads the table and its indexes after
each load, so both sizes are measured from a warm cache),
applies the migrations, and loads memories set-based with generate_series straight
into prme.nodes (content of eight pseudo-words from a 2,000-word vocabulary, skewed
so a few words are common and most are rare; random salience, confidence, boost,
decay profile and ages; no journal rows: recall does not read them). The GIN index
is dropped during each bulk load and rebuilt after it, as a DBA would.

Measured, per call, from a client on the same machine (one connection, the round
trip included): prme.recall for four kinds of query, for owners loaded with the
first 10,000 memories and, at the large size, also for owners whose memories are
spread across the whole table; then, for a scope of 1,000 memories:
prme.publish_snapshot (each call a new generation of all 1,000), a republish of
unchanged content, prme.current_snapshot and prme.assemble_prompt.
Numbers are medians (p50) and 95th percentiles in milliseconds. Quote the ratios:
absolute numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from prme_pg import testing

MEMORIES_PER_OWNER = 1_000
SMALL_OWNERS = 10
LARGE_OWNERS = 1_000
CHUNK = 100_000
SETTINGS = {"shared_buffers": "1GB", "max_wal_size": "8GB", "checkpoint_timeout": "30min"}

console = Console(width=None if sys.stdout.isatty() else 140)

# Word k of the vocabulary (k = 0 is the most common): five letters, distinct for k < 2000.
WORD_SQL = """
CREATE FUNCTION pg_temp.word(k integer) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT substr('bcdfgklmnprstvz', 1 + k % 15, 1) || substr('aeiou', 1 + (k / 15) % 5, 1)
        || substr('bcdfgklmnprstvz', 1 + (k / 75) % 15, 1) || substr('aeiou', 1 + (k / 1125) % 5, 1) || 'x'
$$;
CREATE FUNCTION pg_temp.skewed_word() RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT pg_temp.word(floor(2000 * random() ^ 2)::integer)
$$;
"""

# Memory g (0-based) belongs to owner 'owner_' || owner_of(g); %(owner)s is that expression.
LOAD_SQL = """
INSERT INTO prme.nodes (
    id, user_id, scope, content, confidence_base, salience_base, reinforcement_boost, decay_profile,
    last_reinforced_at, created_at, updated_at, version, last_checksum
)
SELECT md5('bench:' || g)::uuid, 'owner_' || ({owner}), 'personal',
    concat_ws(' ', pg_temp.skewed_word(), pg_temp.skewed_word(), pg_temp.skewed_word(), pg_temp.skewed_word(),
                   pg_temp.skewed_word(), pg_temp.skewed_word(), pg_temp.skewed_word(), pg_temp.skewed_word()),
    round(random()::numeric, 4), round(random()::numeric, 4), round((random() * 0.5)::numeric, 4),
    (ARRAY['permanent', 'slow', 'medium', 'fast', 'rapid'])[1 + g %% 5],
    CASE WHEN g %% 3 = 0 THEN now() - random() * interval '30 days' END,
    now() - interval '30 days' - random() * interval '335 days', now(), 1, md5('a' || g) || md5('b' || g)
FROM generate_series(%(lo)s::integer, %(hi)s::integer) AS g
"""

INDEX_SQL = "CREATE INDEX nodes_search_idx ON prme.nodes USING gin (search)"


def word(k: int) -> str:
    consonants, vowels = "bcdfgklmnprstvz", "aeiou"
    return consonants[k % 15] + vowels[(k // 15) % 5] + consonants[(k // 75) % 15] + vowels[(k // 1125) % 5] + "x"


# Word k is in about 1 - (1 - (sqrt((k + 1) / 2000) - sqrt(k / 2000))) ** 8 of all memories:
# word 0 in 17%, word 3 in 5%, word 10 in 2.7%, word 100 in 0.9%, word 1500 in 0.2%.
QUERIES: dict[str, list[str | None]] = {
    "1 very common word (5-17%)": [word(i % 4) for i in range(20)],
    "2 words, common + medium": [f"{word(4 + i)} {word(200 + 37 * i)}" for i in range(20)],
    "3 words, medium": [f"which {word(50 + i)} and {word(300 + i)} or {word(700 + i)}?" for i in range(20)],
    "1 rare word (0.2%)": [word(1500 + 23 * i) for i in range(20)],
    "no query (strength only)": [None],
}


def load(conn: psycopg.Connection[Any], lo: int, hi: int, owner_sql: str, label: str) -> float:
    """Insert memories lo..hi (inclusive) in chunks, without the GIN index; rebuild it. Returns seconds."""
    started = time.perf_counter()
    conn.execute("DROP INDEX IF EXISTS prme.nodes_search_idx")
    for start in range(lo, hi + 1, CHUNK):
        end = min(hi, start + CHUNK - 1)
        conn.execute(LOAD_SQL.format(owner=owner_sql), {"lo": start, "hi": end})
        console.print(f"  {label}: {end + 1 - lo:,} of {hi + 1 - lo:,} memories", highlight=False)
    conn.execute(INDEX_SQL)
    conn.execute("VACUUM (ANALYZE) prme.nodes")
    # Measure from a warm cache: the bulk load went through a small ring buffer.
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
    conn.execute(
        "SELECT pg_prewarm(c.oid) FROM pg_class AS c"
        " WHERE c.relnamespace = 'prme'::regnamespace"
        " AND c.relname IN ('nodes', 'nodes_pkey', 'nodes_search_idx')"
    )
    return time.perf_counter() - started


def timed(call: Callable[[], Any], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def p50(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def p95(samples: Sequence[float]) -> float:
    return sorted(samples)[max(0, round(0.95 * len(samples)) - 1)]


def recall_once(conn: psycopg.Connection[Any], owner: str, query: str | None) -> float:
    started = time.perf_counter()
    rows = conn.execute("SELECT * FROM prme.recall(%s, %s, max_count => 10)", (owner, query)).fetchall()
    elapsed = (time.perf_counter() - started) * 1000
    if query is None:
        assert len(rows) == 10, f"no result for {owner}"
    return elapsed


def measure_recall(
    targets: dict[str, tuple[psycopg.Connection[Any], Sequence[str]]], calls: int, rounds: int = 6
) -> dict[str, dict[str, list[float]]]:
    """Recall latencies per target and query kind, the targets measured in alternating rounds.

    Alternating (forward, then backward) spreads any load from other processes on
    the machine over every target alike, so the ratios stay meaningful.
    """
    samples: dict[str, dict[str, list[float]]] = {label: {kind: [] for kind in QUERIES} for label in targets}
    for conn, owners in targets.values():  # warm the caches and the plans
        for queries in QUERIES.values():
            for i in range(20):
                recall_once(conn, owners[i % len(owners)], queries[i % len(queries)])
    per_round = max(1, calls // rounds)
    for r in range(rounds):
        order = list(targets) if r % 2 == 0 else list(reversed(targets))
        for label in order:
            conn, owners = targets[label]
            for kind, queries in QUERIES.items():
                for i in range(r * per_round, (r + 1) * per_round):
                    samples[label][kind].append(recall_once(conn, owners[i % len(owners)], queries[i % len(queries)]))
    return samples


def index_evidence(conn: psycopg.Connection[Any], owner: str) -> tuple[str, int]:
    """The plan of recall's match for one owner: the index it uses and the buffers it touches."""
    row = conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT n.id FROM prme.nodes AS n"
        " WHERE n.search @@ prme._any_lexeme_query(prme._owner_lexemes(%s, %s))",
        (owner, f"{word(3)} {word(240)}"),
    ).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]

    def indexes(node: dict[str, Any]) -> list[str]:
        found = [node["Index Name"]] if "Index Name" in node else []
        for child in node.get("Plans", []):
            found += indexes(child)
        return found

    return ", ".join(indexes(plan)) or "none", int(plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0))


def measure_snapshots(conn: psycopg.Connection[Any], owner: str, calls: int) -> dict[str, list[float]]:
    sizes = iter(range(1000, 0, -1))

    def publish_new() -> None:
        # max_items one lower each time: every call writes a new generation of ~1,000 memories.
        row = conn.execute(
            "SELECT advanced, item_count FROM prme.publish_snapshot(%s, 'personal', %s, 16777216)",
            (owner, next(sizes)),
        ).fetchone()
        assert row is not None and row[0], row

    def publish_same() -> None:
        row = conn.execute(
            "SELECT advanced FROM prme.publish_snapshot(%s, 'personal', 1, 16777216)", (owner,)
        ).fetchone()
        assert row == (False,), row

    def current() -> None:
        conn.execute("SELECT * FROM prme.current_snapshot(%s, 'personal')", (owner,)).fetchone()

    def assemble() -> None:
        conn.execute("SELECT * FROM prme.assemble_prompt(%s, ARRAY['personal'], 16384)", (owner,)).fetchone()

    results = {"publish (new generation of 1,000)": timed(publish_new, calls)}
    conn.execute("SELECT prme.publish_snapshot(%s, 'personal', 1, 16777216)", (owner,))
    results["publish (unchanged: no write)"] = timed(publish_same, calls)
    conn.execute("SELECT prme.publish_snapshot(%s, 'personal', 1000, 16777216)", (owner,))
    results["current_snapshot (1,000 items)"] = timed(current, calls)
    results["assemble_prompt (16 KiB budget)"] = timed(assemble, calls)
    return results


def prepare(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT setseed(0.42)")
    conn.execute(WORD_SQL)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the 1,000 owners of the large size")
    parser.add_argument("--calls", type=int, default=300, help="recall calls per query kind and target")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    args = parser.parse_args(argv)
    large_owners = max(SMALL_OWNERS * 2, round(LARGE_OWNERS * args.scale))
    small_total, large_total = SMALL_OWNERS * MEMORIES_PER_OWNER, large_owners * MEMORIES_PER_OWNER
    extra = large_owners - SMALL_OWNERS
    old_owners = [f"owner_{i}" for i in range(SMALL_OWNERS)]
    new_owners = [f"owner_{SMALL_OWNERS + (i * 97) % extra}" for i in range(SMALL_OWNERS)]

    cluster = testing.PostgresCluster.create(SETTINGS)
    try:
        server = testing.Server(cluster.dsn, cluster)
        small_db = testing.create_database(server, prefix="prme_recall_small")
        large_db = testing.create_database(server, prefix="prme_recall_large")
        for db in (small_db, large_db):
            testing.install_schema(server.dsn_for(db))
        with (
            psycopg.connect(server.dsn_for(small_db), autocommit=True) as small,
            psycopg.connect(server.dsn_for(large_db), autocommit=True) as large,
        ):
            version = small.execute("SHOW server_version").fetchone()
            console.print(f"PostgreSQL {version[0] if version else '?'}, cluster {cluster.datadir}", highlight=False)
            prepare(small)
            prepare(large)
            # Both databases start with the same 10 owners x 1,000 memories, interleaved
            # (memory g belongs to owner g % 10); the large one then gets 990 more owners
            # x 1,000 memories, interleaved over the rest of the table.
            load_small = load(small, 0, small_total - 1, f"g %% {SMALL_OWNERS}", f"{small_total:,} database")
            load(large, 0, small_total - 1, f"g %% {SMALL_OWNERS}", f"{large_total:,} database")
            load_large = load(
                large, small_total, large_total - 1, f"{SMALL_OWNERS} + g %% {extra}", f"{large_total:,} database"
            )
            recall = measure_recall(
                {
                    "small": (small, old_owners),
                    "large_same": (large, old_owners),
                    "large_spread": (large, new_owners),
                },
                args.calls,
            )
            small_index = index_evidence(small, "owner_3")
            large_index = index_evidence(large, new_owners[3])
            snapshots = measure_snapshots(large, new_owners[0], max(20, args.calls // 10))
            table_size = large.execute("SELECT pg_size_pretty(pg_total_relation_size('prme.nodes'))").fetchone()
    finally:
        cluster.destroy()

    small_s, same_s, spread_s = recall["small"], recall["large_same"], recall["large_spread"]
    ratios = {kind: p50(spread_s[kind]) / p50(small_s[kind]) for kind in QUERIES}
    summary: dict[str, Any] = {
        "scale": args.scale,
        "memories": {"small": small_total, "large": large_total},
        "owners": {"small": SMALL_OWNERS, "large": large_owners},
        "load_seconds": {"small": round(load_small, 1), "large": round(load_large, 1)},
        "nodes_size_large": table_size[0] if table_size else None,
        "recall_ms": {
            kind: {
                "small_p50": round(p50(small_s[kind]), 3),
                "small_p95": round(p95(small_s[kind]), 3),
                "large_same_owners_p50": round(p50(same_s[kind]), 3),
                "large_spread_owners_p50": round(p50(spread_s[kind]), 3),
                "large_spread_owners_p95": round(p95(spread_s[kind]), 3),
                "ratio_p50": round(ratios[kind], 3),
            }
            for kind in QUERIES
        },
        "index": {
            "small": small_index[0],
            "large": large_index[0],
            "buffers_small": small_index[1],
            "buffers_large": large_index[1],
        },
        "snapshot_ms": {name: {"p50": round(p50(s), 3), "p95": round(p95(s), 3)} for name, s in snapshots.items()},
        "target": "large / small recall p50 <= 1.5",
        "met": all(r <= 1.5 for r in ratios.values()),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0

    table = Table(
        title=f"prme.recall, one owner with 1,000 memories: {small_total:,} vs {large_total:,} in the database"
    )
    table.add_column("query")
    table.add_column(f"{small_total:,}\np50 / p95 ms", justify="right")
    table.add_column(f"{large_total:,}, same owners\np50 ms", justify="right")
    table.add_column(f"{large_total:,}, spread owners\np50 / p95 ms", justify="right")
    table.add_column("ratio\n(spread / small)", justify="right")
    for kind in QUERIES:
        ratio = ratios[kind]
        table.add_row(
            kind,
            f"{p50(small_s[kind]):.2f} / {p95(small_s[kind]):.2f}",
            f"{p50(same_s[kind]):.2f}",
            f"{p50(spread_s[kind]):.2f} / {p95(spread_s[kind]):.2f}",
            f"[{'green' if ratio <= 1.5 else 'red'}]{ratio:.2f}x[/]",
        )
    console.print(table)
    console.print(
        f"index used for the match: {small_index[0]} ({small_index[1]} buffers) at {small_total:,}; "
        f"{large_index[0]} ({large_index[1]} buffers) at {large_total:,}. "
        f"Load: {load_small:.0f} s and {load_large:.0f} s; "
        f"prme.nodes at {large_total:,}: {summary['nodes_size_large']}.",
        highlight=False,
    )
    snap = Table(title=f"snapshots of a scope with 1,000 memories (database of {large_total:,})")
    snap.add_column("call")
    snap.add_column("p50 ms", justify="right")
    snap.add_column("p95 ms", justify="right")
    for name, samples in snapshots.items():
        snap.add_row(name, f"{p50(samples):.2f}", f"{p95(samples):.2f}")
    console.print(snap)
    console.print(f"target (recall p50 within 1.5x): {'met' if summary['met'] else 'NOT met'}", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
