"""How recall should match a long memory by meaning: pooled parts, best part, or whole text (issue 31, item 5).

Run from the repository root:

    .venv/bin/python bench/long_memory_quality.py                  # token budgets 32, 64 and 128
    .venv/bin/python bench/long_memory_quality.py --budgets 64 --json

A long memory is executed in parts of at most ``token_budget`` words (docs/LEDGER.md, "Long
memories"), and each part gets a vector (docs/RECALL.md, "Long memories"). Recall keeps one
vector per memory; the question is which. The data is bench/data/long_memory_eval.json: 12
long memories of five paragraphs each (trip notes, a renovation log, a family history, …)
and 60 questions, each asking in other words about one paragraph; its answer is the whole
memory. The 286 short memories of bench/data/recall_eval.json are the other memories in
the corpus (one owner's memories compete, long and short).

Each question is embedded by the default embedder (WordLlama) and every memory scored by
cosine, with the long memories represented as:

- ``whole``: the vector of the whole text, as the embedding worker computes it for a memory
  written without one;
- ``pooled``: the normalised mean of its parts' vectors (``prme_pg.long_memories.pool``),
  the one vector the executor stores;
- ``best_part``: the best cosine among its parts' vectors (recall would then need to search
  every part's vector);
- ``paragraph`` (for reference): the best cosine among its paragraphs, cut by a person.

The other way round, the 395 questions of recall_eval.json ask for short memories over the same
corpus (``short_questions``): a long memory matched by its best part holds a lottery ticket per
part, and this shows how much it then crowds out the short memories that answer.

Parts are cut as the executor cuts them (``prme_pg.long_memories.plan_parts``): they do not
follow paragraphs. Metrics over the first 10: recall@1/5/10 (the share of questions whose
memory is among the first k) and MRR (0 when not in the first 10). Dense scores only:
recall's lexical evidence is the same for every representation.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prme_pg.embeddings import default_embedder, embed_texts  # noqa: E402
from prme_pg.long_memories import plan_parts, pool  # noqa: E402

DATA = ROOT / "bench" / "data" / "long_memory_eval.json"
DISTRACTORS = ROOT / "bench" / "data" / "recall_eval.json"
METHODS = ("whole", "pooled", "best_part", "paragraph")


def metrics(ranks: Sequence[int | None]) -> dict[str, float]:
    """ranks: the 1-based rank of each question's memory, None when below 10."""
    n = len(ranks)
    return {
        "r@1": sum(r is not None and r <= 1 for r in ranks) / n,
        "r@5": sum(r is not None and r <= 5 for r in ranks) / n,
        "r@10": sum(r is not None and r <= 10 for r in ranks) / n,
        "mrr": sum(1 / r for r in ranks if r is not None) / n,
    }


def rank_of(scores: np.ndarray, target: int) -> int | None:
    """1-based rank of target among scores (ties: the lower index first, as recall breaks ties by id)."""
    better = int((scores > scores[target]).sum() + (scores[:target] == scores[target]).sum())
    return better + 1 if better < 10 else None


def run(budgets: Sequence[int]) -> dict[str, object]:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    owners = json.loads(DISTRACTORS.read_text("utf-8"))["owners"]
    distractors = [m["text"] for owner in owners for m in owner["memories"]]
    short_index = {m["id"]: i for i, m in enumerate(m for owner in owners for m in owner["memories"])}
    short_questions = [q for owner in owners for q in owner["questions"]]
    embedder = default_embedder()
    longs = data["memories"]
    texts = ["\n\n".join(m["paragraphs"]) for m in longs]
    index = {m["id"]: i for i, m in enumerate(longs)}
    questions = data["questions"]
    queries = embed_texts(embedder, [q["question"] for q in questions])
    short = embed_texts(embedder, distractors)
    short_scores = queries @ short.T  # (questions, distractors)

    def ranks(long_scores: np.ndarray) -> list[int | None]:
        # long_scores: (questions, long memories); the long memories come first in the corpus.
        scores = np.concatenate([long_scores, short_scores], axis=1)
        return [rank_of(scores[q], index[question["memory"]]) for q, question in enumerate(questions)]

    # Short questions: the same corpus, the short memories' answers (the first labelled one ranked).
    short_queries = embed_texts(embedder, [q["question"] for q in short_questions])
    short_to_short = short_queries @ short.T

    def short_ranks(long_vectors_scores: np.ndarray) -> list[int | None]:
        scores = np.concatenate([long_vectors_scores, short_to_short], axis=1)
        out: list[int | None] = []
        for q, question in enumerate(short_questions):
            found = [rank_of(scores[q], long_vectors_scores.shape[1] + short_index[a]) for a in question["answers"]]
            out.append(min((r for r in found if r is not None), default=None))
        return out

    whole_vectors = embed_texts(embedder, texts)
    whole = queries @ whole_vectors.T
    paragraph = np.stack([(queries @ embed_texts(embedder, m["paragraphs"]).T).max(axis=1) for m in longs], axis=1)
    report: dict[str, object] = {
        "model": embedder.model_id,
        "long_memories": len(longs),
        "words_per_memory": round(float(np.mean([len(t.split()) for t in texts])), 1),
        "questions": len(questions),
        "short_questions": len(short_questions),
        "distractors": len(distractors),
        "budgets": {},
    }
    for budget in budgets:
        pooled_columns, best_columns, counts = [], [], []
        short_pooled, short_best = [], []
        for text in texts:
            parts = embed_texts(embedder, [text[a:b] for a, b in plan_parts(text, budget)])
            counts.append(len(parts))
            pooled_columns.append(queries @ pool(parts))
            best_columns.append((queries @ parts.T).max(axis=1))
            short_pooled.append(short_queries @ pool(parts))
            short_best.append((short_queries @ parts.T).max(axis=1))
        table = {
            "whole": metrics(ranks(whole)),
            "pooled": metrics(ranks(np.stack(pooled_columns, axis=1))),
            "best_part": metrics(ranks(np.stack(best_columns, axis=1))),
            "paragraph": metrics(ranks(paragraph)),
        }
        short_table = {
            "whole": metrics(short_ranks(short_queries @ whole_vectors.T)),
            "pooled": metrics(short_ranks(np.stack(short_pooled, axis=1))),
            "best_part": metrics(short_ranks(np.stack(short_best, axis=1))),
            "none": metrics(short_ranks(np.zeros((len(short_questions), 0)))),
        }
        report["budgets"][str(budget)] = {  # type: ignore[index]
            "parts_per_memory": round(float(np.mean(counts)), 1),
            "metrics": table,
            "short_questions": short_table,
        }
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", default="32,64,128", help="token budgets (words per part), comma-separated")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    args = parser.parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    report = run(budgets)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"{report['long_memories']} long memories ({report['words_per_memory']} words each), "
        f"{report['questions']} questions, {report['distractors']} short memories, model {report['model']}"
    )
    for budget, row in report["budgets"].items():  # type: ignore[attr-defined]
        print(f"\ntoken_budget {budget}: {row['parts_per_memory']} parts per memory")
        print(f"  {'method':<10} {'r@1':>6} {'r@5':>6} {'r@10':>6} {'mrr':>6}")
        for method in METHODS:
            m = row["metrics"][method]
            print(f"  {method:<10} {m['r@1']:>6.3f} {m['r@5']:>6.3f} {m['r@10']:>6.3f} {m['mrr']:>6.3f}")
        print(f"  short questions ({report['short_questions']}), long memories represented as:")
        for method, m in row["short_questions"].items():
            print(f"  {method:<10} {m['r@1']:>6.3f} {m['r@5']:>6.3f} {m['r@10']:>6.3f} {m['mrr']:>6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
