"""The labelled questions of bench/recall_quality.py (issue 31, item 7) are well formed.

A wrong label makes the benchmark blame recall for a question it answered: every label
must name a memory of the question's own owner. Fast, no database.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parent.parent / "bench" / "data" / "recall_eval.json"
KINDS = {"paraphrase", "synonym", "hypernym", "name_and_place", "date", "negation", "conversation", "same_word"}
CONVERSATION_LINE = re.compile(r"^\[\d{4}-\d{2}-\d{2}\] [^:\]]+: \S")


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    return document


def test_kinds_are_the_issue_s_and_balanced(data: dict[str, Any]) -> None:
    assert set(data["kinds"]) == KINDS and len(data["kinds"]) == len(KINDS)
    counts = Counter(q["kind"] for o in data["owners"] for q in o["questions"])
    assert set(counts) == KINDS, counts
    assert sum(counts.values()) >= 330, counts
    assert min(counts.values()) >= 35, counts
    for owner in data["owners"]:  # every owner asks every kind
        assert {q["kind"] for q in owner["questions"]} == KINDS, owner["owner"]


def test_ids_are_unique(data: dict[str, Any]) -> None:
    owners = [o["owner"] for o in data["owners"]]
    ids = [m["id"] for o in data["owners"] for m in o["memories"]] + [
        q["id"] for o in data["owners"] for q in o["questions"]
    ]
    assert len(owners) == len(set(owners)) >= 3
    assert [i for i, n in Counter(ids).items() if n > 1] == []


def test_every_label_names_a_memory_of_the_same_owner(data: dict[str, Any]) -> None:
    for owner in data["owners"]:
        memories = {m["id"]: m["text"] for m in owner["memories"]}
        assert 60 <= len(memories) <= 120, owner["owner"]
        for q in owner["questions"]:
            assert q["answers"] and len(q["answers"]) == len(set(q["answers"])), q
            missing = [a for a in q["answers"] if a not in memories]
            assert missing == [], (owner["owner"], q["id"], missing)
            if q["kind"] == "conversation":  # answered by a dated line with its speaker's name
                assert any(CONVERSATION_LINE.match(memories[a]) for a in q["answers"]), q


def test_texts_are_distinct_and_questions_are_not_memories(data: dict[str, Any]) -> None:
    for owner in data["owners"]:
        texts = [m["text"].strip() for m in owner["memories"]]
        questions = [q["question"].strip() for q in owner["questions"]]
        assert all(texts) and all(questions)
        assert len(texts) == len(set(texts)), owner["owner"]
        assert len(questions) == len(set(questions)), owner["owner"]
        assert set(texts).isdisjoint(questions), owner["owner"]
