"""How recall should fuse words and meaning: a study of fusion rules (issue 31, item 7).

Run from the repository root:

    .venv/bin/python bench/fusion_study.py                   # every rule, both halves (~10 s)
    .venv/bin/python bench/fusion_study.py --verify pack     # also: today's rule = the pack's recall
    .venv/bin/python bench/fusion_study.py --verify pack,postgres --json

``bench/recall_quality.py`` measures recall through the real clients; this harness computes
recall's relevance in Python (numpy), from the same data (bench/data/recall_eval.json), the
same embedder and the same words, so that many rules can be compared in seconds. Its
``today`` rule is migration 0022's (sql/postgres/310_recall.sql, docs/RECALL.md):

    candidates = memories sharing a query word | the 100 nearest by cosine (ties by id)
    weight(w)  = ln(1 + (N - df(w) + 0.5) / (df(w) + 0.5))        N candidates, df among them
    share      = Σ weight of the query's words a memory has / Σ weight of all of them
    relevance  = 0.6 · share + 0.4 · max(cosine, 0)

ranked by relevance, ties by node id (every memory has the same strength in the bench, so
the score's strength factor orders nothing). ``--verify`` writes the corpus through
``MemoryClient`` as recall_quality.py does and checks that the engines return exactly the
rankings this harness computes for ``today``, question by question.

Every other rule uses only what recall already has for a query: each candidate's share and
cosine, the words' weights (so how much of the query's weight any candidate matches), the
best share, the nearest's cosines; each can be written the same way in PL/pgSQL and in
DuckDB SQL, and keeps relevance in [0, 1]. Rules with constants are tuned on one half of
the questions (by a hash of the question id) and reported on the other half and on all:
the 22 checks of recall_quality.py (prme >= the best of lexical, dense and rrf on R@10 and
MRR, overall and per kind; same-word questions >= today's ranking before issue 31).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recall_quality as rq

NEAREST = 100  # recall's nearest: greatest(100, max_count)
Floats = NDArray[np.float64]

console = Console(width=None if sys.stdout.isatty() else 160)


# -- what recall knows of one question ----------------------------------------------------


@dataclass
class Query:
    """One question against its owner's memories: every quantity recall has."""

    owner: str
    id: str
    kind: str
    half: int  # 0: tuning, 1: held out
    answers: set[int]
    cosine: Floats  # per memory (float32 inner products, as both engines compute them)
    share: Floats  # per memory: idf-weighted share of the query's words it has (0: none)
    candidate: NDArray[np.bool_]  # matched | nearest
    nearest: NDArray[np.bool_]
    matched_mass: float  # share of the query's weight that some candidate has
    words: int  # the query's distinct recall words
    length: Floats  # per memory: its distinct recall words (length(nodes.search); node_words)
    id_order: NDArray[np.int64]  # each memory's position in node-id order (the tie break)
    baselines: dict[str, list[int]] = field(default_factory=dict)


def half_of(question_id: str) -> int:
    return hashlib.sha256(question_id.encode("utf-8")).digest()[0] & 1


def build_queries(data: Path) -> tuple[list[str], list[rq.Owner], list[Query], str]:
    kinds, owners = rq.load_data(data)
    model_id, embed = rq.default_embedder()
    queries: list[Query] = []
    for owner in owners:
        # recall_quality.py's node ids (a throwaway database: no run prefix)
        owner.node_ids = [uuid.uuid5(uuid.NAMESPACE_URL, f"prme-recall-eval/{m}") for m in owner.memory_ids]
        id_order = np.empty(len(owner.node_ids), dtype=np.int64)
        id_order[sorted(range(len(owner.node_ids)), key=lambda i: owner.node_ids[i])] = np.arange(len(owner.node_ids))
        memory_words = [rq.recall_words(t) for t in owner.texts]
        memory_vectors = embed(owner.texts)
        question_vectors = embed([q["question"] for q in owner.questions])
        # float32 products, as pgvector's <#> and DuckDB's list_inner_product compute them
        similarities = (question_vectors @ memory_vectors.T).astype(np.float64)
        bm25 = rq.BM25(owner.texts)
        index = {memory_id: i for i, memory_id in enumerate(owner.memory_ids)}
        for q, cosine in zip(owner.questions, similarities, strict=True):
            words = sorted(rq.recall_words(q["question"]))
            has = np.array([[w in mw for w in words] for mw in memory_words], dtype=bool).reshape(
                len(owner.texts), len(words)
            )
            matched = has.any(axis=1)
            by_cosine = sorted(range(len(cosine)), key=lambda i: (-cosine[i], owner.node_ids[i]))
            nearest = np.zeros(len(cosine), dtype=bool)
            nearest[by_cosine[:NEAREST]] = True
            candidate = matched | nearest
            n = float(candidate.sum())
            df = (has & candidate[:, None]).sum(axis=0).astype(np.float64)
            weight = np.log(1 + (n - df + 0.5) / (df + 0.5))
            total = weight.sum()
            share = (has.astype(np.float64) @ weight) / total if words else np.zeros(len(cosine))
            lexical = rq.rank_by(bm25.scores(q["question"]), lambda s: s > 0)
            dense = rq.rank_by([float(c) for c in cosine])
            owner_question = Query(
                owner=owner.name,
                id=q["id"],
                kind=q["kind"],
                half=half_of(q["id"]),
                answers={index[a] for a in q["answers"]},
                cosine=cosine,
                share=share,
                candidate=candidate,
                nearest=nearest,
                matched_mass=float(weight[df > 0].sum() / total) if words else 0.0,
                words=len(words),
                length=np.array([len(mw) for mw in memory_words], dtype=np.float64),
                id_order=id_order,
            )
            owner_question.baselines = {
                "lexical": lexical,
                "dense": dense,
                "rrf": rq.rrf(lexical, dense, size=len(owner.texts)),
                "today": rq.today(owner, q["question"]),
            }
            queries.append(owner_question)
    return kinds, owners, queries, model_id


def ranking(q: Query, relevance: Floats) -> list[int]:
    """Candidates by relevance descending, ties by node id; the first 10."""
    order = np.lexsort((q.id_order, -relevance))
    return [int(i) for i in order if q.candidate[i]][: rq.TOP]


# -- the rules ----------------------------------------------------------------------------------
#
# Each rule maps a question to every memory's relevance in [0, 1] (only candidates are ranked).
# Notation: share and cosine as above; c = max(cosine, 0); mass = the share of the query's
# weight that some candidate has (1 when each of its words is in some memory; low when its
# rare words match nothing, which is a question asked in other words).

Rule = Callable[[Query], Floats]
BM25_K1 = 1.2  # BM25's usual saturation, for the length normalisation below


def positive(q: Query) -> Floats:
    return np.maximum(q.cosine, 0.0)


def min_max(q: Query) -> Floats:
    """The cosine min-max scaled over the nearest (the last of them is recall's ceiling)."""
    low, high = float(q.cosine[q.nearest].min()), float(q.cosine[q.nearest].max())
    return np.clip((q.cosine - low) / max(high - low, 1e-12), 0.0, 1.0)


def z_logistic(q: Query) -> Floats:
    """The cosine's z-score over the nearest, through a logistic: in (0, 1)."""
    near = q.cosine[q.nearest]
    z = (q.cosine - near.mean()) / max(float(near.std()), 1e-12)
    out: Floats = 1 / (1 + np.exp(-z))
    return out


def length_factor(q: Query, b: float) -> Floats:
    """BM25's length normalisation of one occurrence, 1 for a memory of the candidates' mean
    length (in distinct words): (k1 + 1) / (1 + k1 · (1 - b + b · length / mean length))."""
    mean = float(q.length[q.candidate].mean())
    return (BM25_K1 + 1) / (1 + BM25_K1 * (1 - b + b * q.length / mean))


def fused(a: float, lexical: Floats, semantic: Floats) -> Floats:
    return a * lexical + (1 - a) * semantic


def linear(w: float) -> Rule:
    """Today's form, w · share + (1 - w) · c; today is w = 0.6."""
    return lambda q: fused(w, q.share, positive(q))


def cosine_min_max(w: float) -> Rule:
    return lambda q: fused(w, q.share, min_max(q))


def cosine_over_best(w: float) -> Rule:
    """The cosine over the best of the nearest's."""
    return lambda q: fused(w, q.share, np.clip(q.cosine / max(float(q.cosine[q.nearest].max()), 1e-12), 0.0, 1.0))


def share_power(w: float, p: float) -> Rule:
    """The share to the power p: a memory with part of the query's words counts less."""
    return lambda q: fused(w, q.share**p, positive(q))


def cosine_z(w: float) -> Rule:
    return lambda q: fused(w, q.share, z_logistic(q))


def length_normalised(w: float, b: float) -> Rule:
    """Today's form with the share scaled by BM25's length factor (clipped to 1)."""
    return lambda q: fused(w, np.minimum(q.share * length_factor(q, b), 1.0), positive(q))


def by_mass(w: float) -> Rule:
    """Lexical weight w · mass: a question whose words all occur somewhere is ranked by both
    signals as today; one whose rare words match nothing leans on meaning."""
    return lambda q: fused(w * q.matched_mass, q.share, positive(q))


def by_root_mass(w: float) -> Rule:
    """Lexical weight w · √mass: by_mass, leaning on meaning less steeply."""
    return lambda q: fused(w * q.matched_mass**0.5, q.share, positive(q))


def by_mass_floor(floor: float, w: float) -> Rule:
    """Lexical weight from floor (nothing matches) to w (everything matches), linear in mass."""
    return lambda q: fused(floor + (w - floor) * q.matched_mass, q.share, positive(q))


def by_root_mass_length(w: float, b: float) -> Rule:
    """by_root_mass with the length-normalised share."""
    return lambda q: fused(w * q.matched_mass**0.5, np.minimum(q.share * length_factor(q, b), 1.0), positive(q))


def by_words(w: float, k: float) -> Rule:
    """Lexical weight w · min(1, words / k): a question of few words leans on meaning."""
    return lambda q: fused(w * min(1.0, q.words / k), q.share, positive(q))


def by_best(w: float) -> Rule:
    """Lexical weight w · (the best candidate's share)."""
    return lambda q: fused(w * float(q.share[q.candidate].max()), q.share, positive(q))


def ranks(values: Floats, q: Query, keep: NDArray[np.bool_]) -> Floats:
    """1-based rank among the kept candidates, ties by node id (row_number() over (...))."""
    order = [int(i) for i in np.lexsort((q.id_order, -values)) if keep[i]]
    out = np.full(len(values), np.inf)
    out[order] = np.arange(1, len(order) + 1)
    return out


def with_rrf(w: float, mix: float) -> Rule:
    """A convex combination of today's form (weight w) and reciprocal rank fusion of the share's
    and the cosine's ranks, scaled to [0, 1]."""

    def rule(q: Query) -> Floats:
        by_share = ranks(q.share, q, q.candidate & (q.share > 0))
        by_cosine = ranks(q.cosine, q, q.candidate)
        rrf = (1 / (rq.RRF_K + by_share) + 1 / (rq.RRF_K + by_cosine)) * (rq.RRF_K + 1) / 2
        return (1 - mix) * fused(w, q.share, positive(q)) + mix * rrf

    return rule


def grid(start: float, stop: float, step: float) -> list[float]:
    return [round(start + i * step, 4) for i in range(round((stop - start) / step) + 1)]


WEIGHTS = grid(0.2, 1.0, 0.05)
FAMILIES: dict[str, tuple[Callable[..., Rule], list[tuple[float, ...]]]] = {
    "linear": (linear, [(w,) for w in WEIGHTS]),
    "cosine_min_max": (cosine_min_max, [(w,) for w in WEIGHTS]),
    "cosine_over_best": (cosine_over_best, [(w,) for w in WEIGHTS]),
    "cosine_z": (cosine_z, [(w,) for w in WEIGHTS]),
    "share_power": (share_power, list(itertools.product(WEIGHTS, (1.5, 2.0, 3.0)))),
    "length_normalised": (length_normalised, list(itertools.product(WEIGHTS, grid(0.1, 0.9, 0.1)))),
    "by_mass": (by_mass, [(w,) for w in WEIGHTS]),
    "by_root_mass": (by_root_mass, [(w,) for w in WEIGHTS]),
    "by_mass_floor": (by_mass_floor, [(f, w) for f in grid(0.0, 0.5, 0.1) for w in WEIGHTS if w > f]),
    "by_root_mass_length": (by_root_mass_length, list(itertools.product(WEIGHTS, grid(0.1, 0.5, 0.1)))),
    "by_words": (by_words, list(itertools.product(WEIGHTS, (2.0, 3.0, 4.0)))),
    "by_best": (by_best, [(w,) for w in WEIGHTS]),
    "with_rrf": (with_rrf, list(itertools.product(grid(0.3, 0.8, 0.1), grid(0.1, 0.9, 0.2)))),
}


def name_of(family: str, constants: tuple[float, ...]) -> str:
    return f"{family}({', '.join(f'{c:g}' for c in constants)})"


# -- metrics and the 22 checks --------------------------------------------------------------


def metrics(kinds: Sequence[str], queries: Sequence[Query], rankings: Sequence[list[int]]) -> dict[str, Any]:
    rows: dict[str, list[dict[str, float]]] = {kind: [] for kind in ["all", *kinds]}
    for q, r in zip(queries, rankings, strict=True):
        result = rq.score(r, q.answers)
        rows["all"].append(result)
        rows[q.kind].append(result)
    return {kind: rq.average(r) for kind, r in rows.items() if r}


def checks(kinds: Sequence[str], table: dict[str, dict[str, Any]], method: str) -> list[dict[str, Any]]:
    """recall_quality.py's 22 checks of ``method`` (its targets, on these questions)."""
    renamed = {m: v for m, v in table.items() if m in (*rq.BASELINES, "today")} | {"prme-rule": table[method]}
    return rq.targets(renamed, kinds)


def passed(found: list[dict[str, Any]]) -> int:
    return sum(c["met"] for c in found)


def margin(found: list[dict[str, Any]]) -> float:
    """The sum of the shortfalls (0 when every check passes): how far from passing."""
    return sum(min(0.0, float(c["value"]) - float(c["bar"])) for c in found)


@dataclass
class Evaluation:
    name: str
    rankings: list[list[int]]
    tables: dict[str, dict[str, Any]]  # half name -> metrics
    found: dict[str, list[dict[str, Any]]]  # half name -> checks


HALVES = {"tuning": (0,), "held-out": (1,), "all": (0, 1)}


def evaluate_all(
    kinds: Sequence[str], queries: Sequence[Query], rules: dict[str, Rule]
) -> tuple[dict[str, Evaluation], dict[str, dict[str, dict[str, Any]]]]:
    baselines: dict[str, dict[str, dict[str, Any]]] = {}
    for half, members in HALVES.items():
        chosen = [q for q in queries if q.half in members]
        baselines[half] = {
            m: metrics(kinds, chosen, [q.baselines[m] for q in chosen]) for m in (*rq.BASELINES, "today")
        }
    evaluations = {}
    for name, rule in rules.items():
        rankings = [ranking(q, rule(q)) for q in queries]
        evaluation = Evaluation(name, rankings, {}, {})
        for half, members in HALVES.items():
            picked = [(q, r) for q, r in zip(queries, rankings, strict=True) if q.half in members]
            table = metrics(kinds, [q for q, _ in picked], [r for _, r in picked])
            evaluation.tables[half] = table
            evaluation.found[half] = checks(kinds, baselines[half] | {name: table}, name)
        evaluations[name] = evaluation
    return evaluations, baselines


# -- verification against the engines ----------------------------------------------------------


def verify(backends: Sequence[str], owners: Sequence[rq.Owner], queries: Sequence[Query], today: Evaluation) -> bool:
    """Today's rule here must give exactly the rankings the engines return (recall_quality.py's
    prme columns): write the corpus through the real clients and compare question by question."""
    mine = {(q.owner, q.id): r for q, r in zip(queries, today.rankings, strict=True)}
    same = True
    for backend in backends:
        engine, _ = rq.run_backend(backend, owners, None, "eval-")
        differ = [
            (owner, qid, mine[(owner, qid)], theirs)
            for owner, per_question in engine.items()
            for qid, theirs in per_question.items()
            if mine[(owner, qid)] != theirs
        ]
        console.print(f"verify {backend}: {len(mine) - len(differ)} of {len(mine)} rankings identical", highlight=False)
        for owner, qid, a, b in differ[:10]:
            console.print(f"  {owner} {qid}: here {a}, {backend} {b}", highlight=False)
        same = same and not differ
    return same


# -- the report --------------------------------------------------------------------------------


def check_table(kinds: Sequence[str], evaluations: Sequence[Evaluation], title: str) -> Table:
    table = Table(title=title)
    table.add_column("check")
    table.add_column("bar (half: tuning / held-out / all)")
    for e in evaluations:
        table.add_column(e.name)
    keys = [(c["kind"], c["metric"], c["against"] == "today") for c in evaluations[0].found["all"]]
    for i, (kind, metric, same_word) in enumerate(keys):
        bars = []
        for half in HALVES:
            c = evaluations[0].found[half][i]
            bars.append(f"{c['against'] if not same_word else 'today'} {c['bar']:.3f}")
        cells = []
        for e in evaluations:
            parts = []
            for half in HALVES:
                c = e.found[half][i]
                value = f"{c['value']:.3f}"
                parts.append(value if c["met"] else f"[red]{value}[/]")
            cells.append(" / ".join(parts))
        table.add_row(f"{kind} {metric}", " / ".join(bars), *cells)
    table.add_section()
    table.add_row(
        "checks passed",
        "",
        *[" / ".join(f"{passed(e.found[h])}/{len(e.found[h])}" for h in HALVES) for e in evaluations],
    )
    return table


def key(e: Evaluation, half: str) -> tuple[int, float, float]:
    """A rule's standing on a half: checks passed, then the smallest shortfall, then MRR overall."""
    return (passed(e.found[half]), margin(e.found[half]), e.tables[half]["all"]["mrr"])


@dataclass
class Family:
    name: str
    tuned: Evaluation  # its best setting on the tuning half
    crossed: int  # checks passed on each half by the setting tuned on the other, summed (of 44)
    crossed_shortfall: float


def families(evaluations: dict[str, Evaluation]) -> list[Family]:
    """Each family tuned on the tuning half, and its two-fold cross-validation: the setting
    tuned on one half scored on the other, both ways. The best family is chosen by that."""
    out = []
    for family, (_, settings) in FAMILIES.items():
        members = [evaluations[name_of(family, c)] for c in settings]
        on_tuning = max(members, key=lambda e: key(e, "tuning"))
        on_held_out = max(members, key=lambda e: key(e, "held-out"))
        out.append(
            Family(
                family,
                on_tuning,
                passed(on_tuning.found["held-out"]) + passed(on_held_out.found["tuning"]),
                margin(on_tuning.found["held-out"]) + margin(on_held_out.found["tuning"]),
            )
        )
    return sorted(out, key=lambda f: (f.crossed, f.crossed_shortfall), reverse=True)


def metrics_table(kinds: Sequence[str], baselines: dict[str, dict[str, Any]], shown: Sequence[Evaluation]) -> Table:
    table = Table(title="all questions: R@1 / R@5 / R@10 / MRR")
    table.add_column("kind (n)")
    methods = [*rq.BASELINES, "today"]
    for name in [*methods, *(e.name for e in shown)]:
        table.add_column(name if name != "today" else "today (before issue 31)")
    for kind in ["all", *kinds]:
        rows = [baselines[m][kind] for m in methods] + [e.tables["all"][kind] for e in shown]
        cells = [" / ".join(f"{row[k]:.3f}" for k in ("r@1", "r@5", "r@10", "mrr")) for row in rows]
        table.add_row(f"{kind} ({rows[0]['n']})", *cells)
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=rq.DATA, help="the labelled questions (default: %(default)s)")
    parser.add_argument("--verify", default="", help="backends (pack,postgres) to check migration 0022's rule on")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the tables")
    args = parser.parse_args(argv)

    kinds, owners, queries, model_id = build_queries(args.data)
    rules: dict[str, Rule] = {"migration 0022": linear(0.6)}
    for family, (make, settings) in FAMILIES.items():
        for constants in settings:
            rules[name_of(family, constants)] = make(*constants)
    evaluations, baselines = evaluate_all(kinds, queries, rules)
    current = evaluations["migration 0022"]

    verified = None
    if args.verify:
        verified = verify([b.strip() for b in args.verify.split(",") if b.strip()], owners, queries, current)

    ranked = families(evaluations)
    chosen = ranked[0].tuned
    passing_all = sorted(e.name for e in evaluations.values() if passed(e.found["all"]) == len(e.found["all"]))
    closest = max(evaluations.values(), key=lambda e: key(e, "all"))
    summary: dict[str, Any] = {
        "questions": {h: sum(q.half in m for q in queries) for h, m in HALVES.items()},
        "embedder": model_id,
        "verified": verified,
        "families": {
            f.name: {
                "tuned": f.tuned.name,
                "cross_validated_checks": f"{f.crossed}/44",
                **{h: f"{passed(f.tuned.found[h])}/22" for h in HALVES},
                "misses_on_all": [f"{c['kind']} {c['metric']}" for c in f.tuned.found["all"] if not c["met"]],
            }
            for f in ranked
        },
        "recommended": chosen.name,
        "checks": {e.name: e.found for e in (current, chosen)},
        "passing_all_22_on_all_questions": passing_all,
        "closest_on_all_questions": closest.name,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0 if verified in (None, True) else 1
    console.print(
        f"{len(queries)} questions ({summary['questions']['tuning']} tuning, "
        f"{summary['questions']['held-out']} held out); dense = {model_id}; {len(rules)} rules",
        highlight=False,
    )
    table = Table(title="families: tuned on the tuning half; chosen by two-fold cross-validation")
    for column in ("family", "tuned", "cross-validated", *(f"{h} /22" for h in HALVES), "missed on all questions"):
        table.add_column(column)
    for f in ranked:
        table.add_row(
            f.name,
            f.tuned.name,
            f"{f.crossed}/44 ({f.crossed_shortfall:.3f})",
            *(str(passed(f.tuned.found[h])) for h in HALVES),
            ", ".join(f"{c['kind']} {c['metric']}" for c in f.tuned.found["all"] if not c["met"]),
        )
    console.print(table)
    shown = [current, chosen] + ([closest] if closest.name not in (current.name, chosen.name) else [])
    console.print(check_table(kinds, shown, "the 22 checks (red: missed)"))
    console.print(metrics_table(kinds, baselines["all"], shown))
    family = ranked[0].name
    console.print(
        f"{family}, every setting (checks passed tuning / held-out / all): "
        + ", ".join(
            f"{', '.join(f'{c:g}' for c in constants)}: "
            + "/".join(str(passed(evaluations[name_of(family, constants)].found[h])) for h in HALVES)
            for constants in FAMILIES[family][1]
        ),
        highlight=False,
    )
    console.print(f"recommended: {chosen.name}", highlight=False)
    console.print(f"closest on all questions (chosen on them, in sample): {closest.name}", highlight=False)
    console.print(f"rules passing all 22 checks on all questions: {', '.join(passing_all) or 'none'}", highlight=False)
    return 0 if verified in (None, True) else 1


if __name__ == "__main__":
    sys.exit(main())
