"""prme-pg recall quality benchmark (issue 31, item 7).

Run from the repository root:

    .venv/bin/python bench/recall_quality.py                 # pack and a throwaway PostgreSQL (~1 minute)
    .venv/bin/python bench/recall_quality.py --backends pack # the memory pack only
    .venv/bin/python bench/recall_quality.py --check         # exit 1 when a target is not met

Question: does recall find the memory that answers a question when the question does
not use the memory's words? The data is bench/data/recall_eval.json: four owners, each
with a corpus of 70-odd agent memories (preferences, facts, relationships, dated events,
conversation lines with speaker names) and questions labelled with their kind and the
memories that answer them (tests/test_recall_quality_data.py checks the file).

Each owner's corpus is written through the real clients, ``MemoryClient(pack_dir)`` and
``MemoryClient(dsn)`` (``--dsn`` or ``PRME_DSN``; else a throwaway cluster, as the tests
start one), then every question is asked with ``client.recall(question, user_id=owner,
max_count=10, as_of=<before the writes>)``: every memory has its base strength (none has
started to fade), so strength breaks no tie differently between runs. The same corpus
and questions go through baselines computed here, in Python:

- ``lexical``: Okapi BM25 (k1 = 1.2, b = 0.75) over lower-cased words, English stop
  words dropped (recall's list), no stemming; only memories sharing a word are ranked.
- ``dense``: cosine between the question's and each memory's vector from the default
  embedder (``prme_pg.embeddings``, WordLlama).
- ``rrf``: reciprocal rank fusion of the two, 1 / (60 + rank) summed.
- ``today``: recall's ranking before issue 31: the share of the question's distinct
  recall words (docs/RECALL.md, "Words") the memory has, ties by strength (all equal
  here), then by id.

Metrics over the first 10 results, averaged over the questions of a kind: recall@k is
the share of a question's labelled memories among the first k, MRR the reciprocal rank
of the first labelled memory (0 when none is in the first 10).

Targets (issue 31): prme's recall >= the best of lexical, dense and rrf on recall@10 and
MRR, overall and for every kind; on same_word questions prme loses nothing against
today (recall@1, @5, @10 and MRR). The bench reports and exits 0; with --check it exits
1 when a target is not met.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from rich.console import Console
from rich.table import Table

from prme_pg import MemoryClient, testing
from prme_pg.embeddings import embed_texts, load_embedder

BENCH_DIR = Path(__file__).resolve().parent
DATA = BENCH_DIR / "data" / "recall_eval.json"
RULES_SQL = BENCH_DIR.parent / "sql" / "duckdb" / "020_rules.sql"
TOP = 10
KS = (1, 5, 10)
BM25_K1, BM25_B = 1.2, 0.75
RRF_K = 60
BASELINES = ("lexical", "dense", "rrf")
BACKENDS = ("pack", "postgres")
EPSILON = 1e-9

console = Console(width=None if sys.stdout.isatty() else 150)
progress = Console(stderr=True)


# -- data ---------------------------------------------------------------------------------


@dataclass
class Owner:
    name: str
    memory_ids: list[str]
    texts: list[str]
    questions: list[dict[str, Any]]
    node_ids: list[uuid.UUID] = field(default_factory=list)


def load_data(path: Path) -> tuple[list[str], list[Owner]]:
    document = json.loads(path.read_text(encoding="utf-8"))
    owners = [
        Owner(
            name=o["owner"],
            memory_ids=[m["id"] for m in o["memories"]],
            texts=[m["text"] for m in o["memories"]],
            questions=o["questions"],
        )
        for o in document["owners"]
    ]
    return list(document["kinds"]), owners


# -- words ----------------------------------------------------------------------------------


def stop_words() -> frozenset[str]:
    """Recall's English stop words, read from the pack's rules (the same list as PostgreSQL's)."""
    found = re.search(r"MACRO prme\.stop_words\(\) AS \[(.*?)\];", RULES_SQL.read_text(encoding="utf-8"), re.S)
    assert found, f"no prme.stop_words() in {RULES_SQL}"
    return frozenset(re.findall(r"'([^']*)'", found.group(1)))


STOP_WORDS = stop_words()
_SEPARATORS = re.compile("[\x01-\x2f\x3a-\x40\x5b-\x60\x7b-\xbf\xd7\xf7\u2000-\u206f\u3000-\u303f\ufeff]+")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _stem(token: str) -> str:
    if len(token) < 4:
        return token
    if token.endswith("ies") and not token.endswith(("eies", "aies")):
        return token[:-3] + "y"
    if token.endswith("es") and not token.endswith(("aes", "ees", "oes")):
        return token[:-1]
    if token.endswith("s") and not token.endswith(("us", "ss")):
        return token[:-1]
    return token


def recall_words(text: str) -> set[str]:
    """prme.recall_words / prme._recall_words in Python (docs/RECALL.md, "Words")."""
    tokens = _SEPARATORS.split(text.translate(_ASCII_LOWER))
    return {_stem(t) for t in tokens if t and len(t) <= 100 and t not in STOP_WORDS}


def plain_words(text: str) -> list[str]:
    """A simple tokenizer for BM25: lower-cased runs of letters and digits, stop words dropped."""
    return [t for t in re.findall(r"[^\W_]+", text.lower()) if t not in STOP_WORDS]


# -- baselines ------------------------------------------------------------------------------

Ranking = list[int]  # memory indexes, best first


def rank_by(scores: Sequence[float], keep: Callable[[float], bool] = lambda s: True) -> Ranking:
    """Indexes by score descending, ties by index (the order the memories were written)."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return [i for i in order if keep(scores[i])][:TOP]


class BM25:
    def __init__(self, texts: Sequence[str]) -> None:
        self.docs = [Counter(plain_words(t)) for t in texts]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.average = sum(self.lengths) / len(self.docs)
        df = Counter(word for d in self.docs for word in d)
        n = len(self.docs)
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}

    def scores(self, query: str) -> list[float]:
        words = set(plain_words(query))
        out = []
        for doc, length in zip(self.docs, self.lengths, strict=True):
            score = 0.0
            for w in words:
                tf = doc.get(w, 0)
                if tf:
                    norm = BM25_K1 * (1 - BM25_B + BM25_B * length / self.average)
                    score += self.idf[w] * tf * (BM25_K1 + 1) / (tf + norm)
            out.append(score)
        return out


def rrf(*rankings: Ranking, size: int) -> Ranking:
    fused = [0.0] * size
    for ranking in rankings:
        for position, index in enumerate(ranking, start=1):
            fused[index] += 1 / (RRF_K + position)
    return rank_by(fused, lambda s: s > 0)


def today(owner: Owner, query: str) -> Ranking:
    """Recall's ranking before issue 31: coverage of the query's words; equal strength; then id."""
    words = recall_words(query)
    if not words:
        return []
    covered = [len(words & recall_words(t)) / len(words) for t in owner.texts]
    order = sorted(range(len(covered)), key=lambda i: (-covered[i], owner.node_ids[i]))
    return [i for i in order if covered[i] > 0][:TOP]


# -- the embedder -----------------------------------------------------------------------------

Vectors = NDArray[np.float32]


def default_embedder() -> tuple[str, Callable[[Sequence[str]], Vectors]]:
    """The default embedder's model id and a checked ``embed``."""
    embedder = load_embedder("wordllama")
    return embedder.model_id, lambda texts: embed_texts(embedder, texts)


# -- metrics ----------------------------------------------------------------------------------


def score(ranking: Sequence[int], answers: set[int]) -> dict[str, float]:
    out = {f"r@{k}": len(answers & set(ranking[:k])) / len(answers) for k in KS}
    first = next((position for position, i in enumerate(ranking[:TOP], start=1) if i in answers), None)
    out["mrr"] = 1 / first if first else 0.0
    return out


def average(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    return {key: sum(r[key] for r in rows) / len(rows) for key in rows[0]} | {"n": len(rows)}


# -- the real clients ---------------------------------------------------------------------------


def write_corpus(client: MemoryClient, owners: Sequence[Owner], user_prefix: str, label: str) -> float:
    started = time.perf_counter()
    for owner in owners:
        for i, (text, node_id) in enumerate(zip(owner.texts, owner.node_ids, strict=True)):
            node = client.add_node(text, user_id=user_prefix + owner.name, node_id=node_id)
            assert node.id == owner.node_ids[i], (node.id, owner.node_ids[i])
        progress.print(f"  {label}: wrote {len(owner.texts)} memories of {owner.name}", highlight=False)
    return time.perf_counter() - started


def ask(
    client: MemoryClient, owner: Owner, user_prefix: str, as_of: datetime
) -> tuple[dict[str, Ranking], list[float]]:
    position = {node_id: i for i, node_id in enumerate(owner.node_ids)}
    rankings: dict[str, Ranking] = {}
    latencies = []
    for question in owner.questions:
        started = time.perf_counter()
        hits = client.recall(question["question"], user_id=user_prefix + owner.name, max_count=TOP, as_of=as_of)
        latencies.append((time.perf_counter() - started) * 1000)
        rankings[question["id"]] = [position[hit.id] for hit in hits]
    return rankings, latencies


def run_backend(
    backend: str, owners: Sequence[Owner], dsn: str | None, user_prefix: str
) -> tuple[dict[str, dict[str, Ranking]], dict[str, float]]:
    """Write every corpus and ask every question on one backend: rankings per owner, timings."""
    server: testing.Server | None = None
    database: str | None = None
    scratch: tempfile.TemporaryDirectory[str] | None = None
    try:
        if backend == "pack":
            scratch = tempfile.TemporaryDirectory(prefix="prme_recall_quality_")
            target = os.path.join(scratch.name, "pack")
        elif dsn:
            target = dsn
        else:
            server = testing.resolve_server()
            database = testing.create_database(server, prefix="prme_recall_quality")
            target = server.dsn_for(database)
            testing.install_schema(target)
        as_of = datetime.now(UTC)
        results: dict[str, dict[str, Ranking]] = {}
        latencies: list[float] = []
        with MemoryClient(target) as client:
            write_seconds = write_corpus(client, owners, user_prefix, backend)
            for owner in owners:
                results[owner.name], owner_latencies = ask(client, owner, user_prefix, as_of)
                latencies += owner_latencies
            progress.print(f"  {backend}: asked {len(latencies)} questions", highlight=False)
        return results, {
            "write_seconds": round(write_seconds, 2),
            "recall_ms_p50": round(float(np.median(latencies)), 2),
        }
    finally:
        if server is not None:
            if database is not None and server.cluster is None:
                testing.drop_database(server, database)
            server.close()
        if scratch is not None:
            scratch.cleanup()


# -- the report -------------------------------------------------------------------------------


def evaluate(
    kinds: Sequence[str], owners: Sequence[Owner], rankings: dict[str, dict[str, dict[str, Ranking]]]
) -> dict[str, dict[str, dict[str, float]]]:
    """Averages per method and kind ('all' = every question): method -> kind -> metric."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    for method, per_owner in rankings.items():
        rows: dict[str, list[dict[str, float]]] = {kind: [] for kind in ["all", *kinds]}
        for owner in owners:
            index = {memory_id: i for i, memory_id in enumerate(owner.memory_ids)}
            for question in owner.questions:
                answers = {index[a] for a in question["answers"]}
                result = score(per_owner[owner.name][question["id"]], answers)
                rows["all"].append(result)
                rows[question["kind"]].append(result)
        table[method] = {kind: average(r) for kind, r in rows.items()}
    return table


def targets(metrics: dict[str, dict[str, dict[str, float]]], kinds: Sequence[str]) -> list[dict[str, Any]]:
    checks = []
    for method in metrics:
        if not method.startswith("prme-"):
            continue
        for kind in ["all", *kinds]:
            for metric in ("r@10", "mrr"):
                best = max(BASELINES, key=lambda b: metrics[b][kind][metric])
                value, bar = metrics[method][kind][metric], metrics[best][kind][metric]
                checks.append(
                    {
                        "method": method,
                        "kind": kind,
                        "metric": metric,
                        "against": best,
                        "value": round(value, 4),
                        "bar": round(bar, 4),
                        "met": value >= bar - EPSILON,
                    }
                )
        for metric in ("r@1", "r@5", "r@10", "mrr"):
            value, bar = metrics[method]["same_word"][metric], metrics["today"]["same_word"][metric]
            checks.append(
                {
                    "method": method,
                    "kind": "same_word",
                    "metric": metric,
                    "against": "today",
                    "value": round(value, 4),
                    "bar": round(bar, 4),
                    "met": value >= bar - EPSILON,
                }
            )
    return checks


def print_report(
    metrics: dict[str, dict[str, dict[str, float]]],
    kinds: Sequence[str],
    checks: list[dict[str, Any]],
    title: str,
    caption: str,
) -> None:
    table = Table(title=title)
    table.add_column("kind")
    table.add_column("n", justify="right")
    table.add_column("method")
    for key in ("R@1", "R@5", "R@10", "MRR"):
        table.add_column(key, justify="right")
    for kind in ["all", *kinds]:
        best = {key: max(m[kind][key] for m in metrics.values()) for key in ("r@1", "r@5", "r@10", "mrr")}
        for i, (method, per_kind) in enumerate(metrics.items()):
            row = per_kind[kind]
            cells = [
                f"[bold]{row[key]:.3f}[/]" if row[key] >= best[key] - EPSILON else f"{row[key]:.3f}"
                for key in ("r@1", "r@5", "r@10", "mrr")
            ]
            table.add_row(kind if i == 0 else "", str(row["n"]) if i == 0 else "", method, *cells)
        table.add_section()
    console.print(table)
    console.print(caption, highlight=False)
    failed = [c for c in checks if not c["met"]]
    for method in sorted({c["method"] for c in checks}):
        mine = [c for c in checks if c["method"] == method]
        misses = [c for c in failed if c["method"] == method]
        verdict = "[green]met[/]" if not misses else f"[red]NOT met ({len(misses)} of {len(mine)} checks)[/]"
        console.print(f"{method}: targets {verdict}")
        for c in misses:
            console.print(
                f"  {c['kind']} {c['metric']}: {c['value']:.3f} < {c['against']} {c['bar']:.3f}", highlight=False
            )


def print_misses(owners: Sequence[Owner], rankings: dict[str, dict[str, dict[str, Ranking]]]) -> None:
    """The questions each prme method answers with none of their memories in the first 10."""
    for method, per_owner in rankings.items():
        if not method.startswith("prme-"):
            continue
        console.print(f"[bold]{method}: questions with no labelled memory in the first {TOP}[/]")
        for owner in owners:
            for q in owner.questions:
                found = [owner.memory_ids[i] for i in per_owner[owner.name][q["id"]]]
                if not set(found) & set(q["answers"]):
                    first = owner.texts[owner.memory_ids.index(found[0])] if found else "(nothing)"
                    console.print(
                        f"  {q['id']} {q['kind']}: {q['question']!r} wants {', '.join(q['answers'])}; first: {first!r}",
                        highlight=False,
                    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the labelled questions (default: %(default)s)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: pack, postgres")
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PRME_DSN"),
        help="a PostgreSQL database with prme's schema (default: PRME_DSN, else a throwaway cluster); "
        "the memories are written under owners eval-<run>-<name> and left there",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument("--misses", action="store_true", help="also list the questions prme answers wrongly")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is not met")
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or any(b not in BACKENDS for b in backends):
        parser.error(f"--backends takes {', '.join(BACKENDS)}")

    kinds, owners = load_data(args.data)
    # The same node ids on both backends and in every run, so ties (broken by id) fall alike
    # and "today" breaks them as recall does; a database of one's own gets ids of this run.
    run = f"{uuid.uuid4().hex[:8]}/" if args.dsn and "postgres" in backends else ""
    user_prefix = f"eval-{run.rstrip('/')}-" if run else "eval-"
    for owner in owners:
        owner.node_ids = [uuid.uuid5(uuid.NAMESPACE_URL, f"prme-recall-eval/{run}{m}") for m in owner.memory_ids]
    questions = sum(len(o.questions) for o in owners)
    progress.print(f"{len(owners)} owners, {sum(len(o.texts) for o in owners)} memories, {questions} questions")

    started = time.perf_counter()
    model_id, embed = default_embedder()
    rankings: dict[str, dict[str, dict[str, Ranking]]] = {m: {} for m in ("lexical", "dense", "rrf", "today")}
    for owner in owners:
        bm25 = BM25(owner.texts)
        memory_vectors = embed(owner.texts)
        question_vectors = embed([q["question"] for q in owner.questions])
        similarities = question_vectors @ memory_vectors.T
        for q, cosines in zip(owner.questions, similarities, strict=True):
            lexical = rank_by(bm25.scores(q["question"]), lambda s: s > 0)
            dense = rank_by([float(c) for c in cosines])
            for method, ranking in (
                ("lexical", lexical),
                ("dense", dense),
                ("rrf", rrf(lexical, dense, size=len(owner.texts))),
                ("today", today(owner, q["question"])),
            ):
                rankings[method].setdefault(owner.name, {})[q["id"]] = ranking
    progress.print(f"  baselines ({model_id}): {time.perf_counter() - started:.1f} s", highlight=False)

    timings: dict[str, dict[str, float]] = {}
    skipped: dict[str, str] = {}
    for backend in backends:
        try:
            rankings[f"prme-{backend}"], timings[backend] = run_backend(backend, owners, args.dsn, user_prefix)
        except testing.NoPostgresError as exc:
            skipped[backend] = str(exc)
            progress.print(f"  {backend}: skipped ({exc})", highlight=False)

    metrics = evaluate(kinds, owners, rankings)
    checks = targets(metrics, kinds)
    met = bool(checks) and all(c["met"] for c in checks)
    summary = {
        "data": str(args.data),
        "owners": len(owners),
        "memories": sum(len(o.texts) for o in owners),
        "questions": questions,
        "embedder": model_id,
        "metrics": {
            m: {k: {key: round(v, 4) for key, v in row.items()} for k, row in per.items()} for m, per in metrics.items()
        },
        "timings": timings,
        "skipped": skipped,
        "targets": checks,
        "met": met,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print_report(
            metrics,
            kinds,
            checks,
            f"recall quality: {questions} questions, {summary['memories']} memories, {len(owners)} owners",
            f"first {TOP} results; dense = {model_id}; the best of a kind in bold",
        )
        if args.misses:
            print_misses(owners, rankings)
        for backend, t in timings.items():
            console.print(
                f"{backend}: wrote the corpus in {t['write_seconds']:.1f} s, recall p50 {t['recall_ms_p50']:.2f} ms",
                highlight=False,
            )
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
