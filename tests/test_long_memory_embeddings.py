"""Long memories' parts carry their embedding state; the executor embeds them before it validates them.

On a real PostgreSQL with the real default embedder (WordLlama): each part is pending until the
worker stores its vector (embedded) or the model's failure (failed); a worker interrupted in the
middle of a long memory and started again embeds only the parts still pending; the memory is
created, once every part is validated, with the normalised mean of its parts' vectors, equal to
what prme_pg.long_memories.pool computes; an executor that does not embed (pg_cron, psql)
validates as before. Bad vectors for parts are refused with PR422 and change nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg.rows import dict_row

from prme_pg import worker as ledger_worker
from prme_pg.embeddings import Embedder, Vectors, WordLlamaEmbedder, load_embedder
from prme_pg.long_memories import (
    embed_pending_parts,
    plan_parts,
    pool,
    use_part_embeddings,
)

from .conftest import ROOT
from .test_ledger import USER, derived_id, node, receipt, run, submit

CONTENT = " ".join(
    f"Paragraph {i}: the {word} trip notes mention train {i}, a ryokan near the temple, and ramen."
    for i, word in enumerate(["first", "second", "third", "fourth", "fifth", "sixth", "seventh"])
)
BUDGET = 8


@pytest.fixture(scope="module")
def model() -> Embedder:
    return load_embedder("wordllama")


class Interrupted(BaseException):
    """The worker's process dies here (not an error it handles)."""


class Recording:
    """The real model, recording what it is asked to embed; it can die after some calls or refuse a text."""

    def __init__(self, inner: Embedder, *, die_after_calls: int | None = None, refuse: str | None = None) -> None:
        self.inner = inner
        self.texts: list[str] = []
        self.calls = 0
        self.die_after_calls = die_after_calls
        self.refuse = refuse

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    def embed(self, texts: Sequence[str]) -> Vectors:
        if self.die_after_calls is not None and self.calls >= self.die_after_calls:
            raise Interrupted
        self.calls += 1
        if self.refuse is not None and any(self.refuse in t for t in texts):
            raise ValueError("this model cannot embed that")
        self.texts.extend(texts)
        return self.inner.embed(texts)


class Slow:
    """The real model, a second a call: long enough to kill the worker between two batches."""

    def __init__(self) -> None:
        self.inner = WordLlamaEmbedder()  # not load_embedder: this factory runs inside it

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    def embed(self, texts: Sequence[str]) -> Vectors:
        time.sleep(1.0)
        return self.inner.embed(texts)


def part_texts(content: str, budget: int) -> list[str]:
    return [content[a:b] for a, b in plan_parts(content, budget)]


def parts(conn: psycopg.Connection[Any], op: uuid.UUID | str) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT p.*, q.embedding FROM prme.operation_parts(%s, %s) AS p"
            " JOIN prme.operation_parts AS q ON q.user_id = %s AND q.operation_id = %s AND q.part_no = p.part_no",
            (USER, str(op), USER, str(op)),
        ).fetchall()


def node_vector(conn: psycopg.Connection[Any], op: uuid.UUID | str) -> tuple[str, list[float]] | None:
    row = conn.execute(
        "SELECT model_id, embedding::real[] FROM prme.node_embeddings WHERE node_id = %s", (derived_id(op),)
    ).fetchone()
    return None if row is None else (row[0], row[1])


def work(dsn: str, embedder: Embedder | None, max_parts: int) -> int:
    return ledger_worker.run_worker(
        dsn,
        worker="test",
        max_parts=max_parts,
        until_idle=True,
        install_signal_handlers=False,
        poll_interval=0.05,
        settle=0.01,
        embedder=embedder,
    )


def test_prme_pg_worker_embeds_the_parts_with_the_configured_model(
    conn: psycopg.Connection[Any], db_dsn: str, model: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prme_pg import cli

    monkeypatch.setenv("PRME_EMBEDDER", "wordllama")
    op = submit(conn, "add_node", node(CONTENT, token_budget=BUDGET))["operation_id"]
    assert cli.main(["worker", "--dsn", db_dsn, "--until-idle", "--json"]) == 0
    assert {p["embedding_state"] for p in parts(conn, op)} == {"embedded"}
    found = node_vector(conn, op)
    assert found is not None
    np.testing.assert_allclose(np.asarray(found[1]), pool(model.embed(part_texts(CONTENT, BUDGET))), atol=1e-6)


def test_python_plan_is_the_executors_plan(conn: psycopg.Connection[Any]) -> None:
    content = "  lead\tand " + " ".join(f"w{i}" for i in range(30)) + " \n\n"
    op = submit(conn, "add_node", node(content, token_budget=7))["operation_id"]
    run(conn)
    assert [(p["char_start"], p["char_end"]) for p in parts(conn, op)] == plan_parts(content, 7)


def test_every_part_is_embedded_before_it_is_validated_and_the_memory_gets_their_pooled_vector(
    conn: psycopg.Connection[Any], db_dsn: str, model: Embedder
) -> None:
    op = submit(conn, "add_node", node(CONTENT, token_budget=BUDGET))["operation_id"]
    texts = part_texts(CONTENT, BUDGET)
    assert len(texts) >= 10, "not vacuous: a memory of many parts"

    # Planned by an executor that embeds: every part pending, none validated before its vector.
    with psycopg.connect(db_dsn, autocommit=True) as executor:
        use_part_embeddings(executor, model)
        assert [r["outcome"] for r in run(executor)] == ["progress"]
        planned = parts(conn, op)
        assert {(p["state"], p["embedding_state"]) for p in planned} == {("planned", "pending")}
        assert {p["embedding_model"] for p in planned} == {None}
        # Called again before any vector: nothing to do, nothing written.
        events = receipt(conn, op)["progress_seq"]
        assert [r["outcome"] for r in run(executor)] == ["skipped"]
        assert receipt(conn, op)["progress_seq"] == events
        # Four parts embedded: only those four can be validated.
        assert embed_pending_parts(executor, model, max_parts=4).embedded == 4
        assert [r["outcome"] for r in run(executor, max_parts=100)] == ["progress"]
        states = [(p["state"], p["embedding_state"]) for p in parts(conn, op)]
        assert states[:4] == [("validated", "embedded")] * 4
        assert set(states[4:]) == {("planned", "pending")}

    recording = Recording(model)
    assert work(db_dsn, recording, max_parts=3) == 1
    assert recording.texts == texts[4:], "the worker embedded exactly the parts still pending, in order"
    stored = parts(conn, op)
    assert {(p["state"], p["embedding_state"], p["embedding_model"]) for p in stored} == {
        ("validated", "embedded", model.model_id)
    }
    assert receipt(conn, op)["state"] == "committed"
    vectors = np.asarray([p["embedding"] for p in stored], dtype=np.float32)
    np.testing.assert_allclose(vectors, model.embed(texts), atol=1e-6)
    found = node_vector(conn, op)
    assert found is not None and found[0] == model.model_id
    np.testing.assert_allclose(np.asarray(found[1], dtype=np.float32), pool(vectors), atol=1e-6)
    assert abs(float(np.linalg.norm(found[1])) - 1.0) < 1e-5


def test_an_interrupted_worker_restarts_with_the_parts_still_pending(
    conn: psycopg.Connection[Any], db_dsn: str, model: Embedder
) -> None:
    op = submit(conn, "add_node", node(CONTENT, token_budget=BUDGET))["operation_id"]
    texts = part_texts(CONTENT, BUDGET)
    # Dies in its third call of the model: two batches of three parts were stored.
    dying = Recording(model, die_after_calls=2)
    with pytest.raises(Interrupted):
        work(db_dsn, dying, max_parts=3)
    assert dying.texts == texts[:6]
    states = [p["embedding_state"] for p in parts(conn, op)]
    assert states == ["embedded"] * 6 + ["pending"] * (len(texts) - 6)
    assert receipt(conn, op)["state"] == "processing"
    assert node_vector(conn, op) is None

    restarted = Recording(model)
    assert work(db_dsn, restarted, max_parts=3) == 1
    assert restarted.texts == texts[6:], "a restart skips the parts already embedded"
    assert receipt(conn, op)["state"] == "committed"
    found = node_vector(conn, op)
    assert found is not None
    np.testing.assert_allclose(np.asarray(found[1]), pool(model.embed(texts)), atol=1e-6)


def test_a_killed_prme_pg_worker_keeps_the_parts_it_embedded_and_its_successor_skips_them(
    conn: psycopg.Connection[Any], db_dsn: str, model: Embedder
) -> None:
    content = " ".join(f"part {i}: notes on the renovation of room {i}." for i in range(40))  # 360 words
    op = submit(conn, "add_node", node(content, token_budget=3))["operation_id"]
    texts = part_texts(content, 3)
    assert len(texts) == 120, "two batches of 64 parts"
    env = {**os.environ, "PRME_EMBEDDER": "tests.test_long_memory_embeddings:Slow", "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "prme_pg.cli", "worker", "--dsn", db_dsn, "--json"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        embedded = 0
        while embedded < 64 and time.monotonic() < deadline:
            time.sleep(0.05)
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE embedding_state = 'embedded') FROM prme.operation_parts"
            ).fetchone()
            embedded = int(row[0]) if row else 0
        worker.send_signal(signal.SIGKILL)  # while it embeds the second batch (a second a call)
    finally:
        worker.kill()
        worker.wait(timeout=30)
    assert embedded == 64, worker.stderr.read().decode() if worker.stderr else "no output"
    assert receipt(conn, op)["state"] == "processing"
    assert [p["embedding_state"] for p in parts(conn, op)] == ["embedded"] * 64 + ["pending"] * 56

    restarted = Recording(model)
    assert work(db_dsn, restarted, max_parts=64) == 1
    assert restarted.texts == texts[64:], "the restarted worker embedded only the parts still pending"
    found = node_vector(conn, op)
    assert found is not None
    np.testing.assert_allclose(np.asarray(found[1]), pool(model.embed(texts)), atol=1e-6)


def test_a_part_the_model_fails_on_is_recorded_and_the_memory_commits_without_a_pooled_vector(
    conn: psycopg.Connection[Any], db_dsn: str, model: Embedder
) -> None:
    op = submit(conn, "add_node", node(CONTENT, token_budget=BUDGET))["operation_id"]
    refusing = Recording(model, refuse="Paragraph 3:")
    assert work(db_dsn, refusing, max_parts=64) == 1
    stored = parts(conn, op)
    failed = [p for p in stored if p["embedding_state"] == "failed"]
    assert len(failed) == 1 and "Paragraph 3:" in CONTENT[failed[0]["char_start"] : failed[0]["char_end"]]
    assert "cannot embed that" in failed[0]["embedding_error"] and failed[0]["embedding"] is None
    assert {p["embedding_state"] for p in stored if p is not failed[0]} == {"embedded"}
    assert receipt(conn, op)["state"] == "committed", "a failed part does not hold the memory back"
    assert node_vector(conn, op) is None, "no pooled vector from some parts: the embedding worker embeds the text"


def test_an_executor_that_does_not_embed_validates_as_before(conn: psycopg.Connection[Any], model: Embedder) -> None:
    op = submit(conn, "add_node", node(CONTENT, token_budget=BUDGET))["operation_id"]
    assert [r["outcome"] for r in run(conn)] == ["committed"]
    assert {(p["state"], p["embedding_state"]) for p in parts(conn, op)} == {("validated", "pending")}
    assert node_vector(conn, op) is None
    # Parts of a committed memory are no longer asked for.
    use_part_embeddings(conn, model)
    assert embed_pending_parts(conn, model).embedded == 0


def test_parts_by_two_models_give_no_pooled_vector(conn: psycopg.Connection[Any], model: Embedder) -> None:
    small = load_embedder("wordllama-64")
    op = submit(conn, "add_node", node(CONTENT, token_budget=BUDGET))["operation_id"]
    use_part_embeddings(conn, small)
    run(conn)
    assert embed_pending_parts(conn, small, max_parts=2).embedded == 2
    # A worker restarted with another model embeds only the parts still pending.
    use_part_embeddings(conn, model)
    assert embed_pending_parts(conn, model, max_parts=1000).embedded == len(part_texts(CONTENT, BUDGET)) - 2
    models = [p["embedding_model"] for p in parts(conn, op)]
    assert models[:2] == [small.model_id] * 2 and set(models[2:]) == {model.model_id}
    assert [r["outcome"] for r in run(conn)] == ["committed"]
    assert node_vector(conn, op) is None, "no mean of vectors by two models"


STORE = "SELECT * FROM prme.store_part_embeddings(%s::text, %s::text[], %s::text[], %s::integer[], %s::real[])"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda v: v[:-1], "must hold 2 vectors of 256 numbers"),
        (lambda v: [*v, 0.0], "must hold 2 vectors of 256 numbers"),
        (lambda v: [float("nan"), *v[1:]], "finite numbers"),
        (lambda v: [*v[:-1], float("inf")], "finite numbers"),
        (lambda v: [None, *v[1:]], "finite numbers"),
    ],
)
def test_a_bad_part_vector_is_refused_and_changes_nothing(
    conn: psycopg.Connection[Any], model: Embedder, change: Any, message: str
) -> None:
    op = submit(conn, "add_node", node(CONTENT, token_budget=BUDGET))["operation_id"]
    use_part_embeddings(conn, model)
    run(conn)
    before = parts(conn, op)
    good = model.embed(part_texts(CONTENT, BUDGET)[:2]).reshape(-1).tolist()
    args = (model.model_id, [USER, USER], [str(op), str(op)], [1, 2])
    with pytest.raises(psycopg.Error) as refused:
        conn.execute(STORE, (*args, change(good)))
    assert refused.value.sqlstate == "PR422" and message in str(refused.value)
    assert parts(conn, op) == before
    assert conn.execute(STORE, (*args, good)).fetchone() == (2,)
    assert conn.execute(STORE, (*args, [0.5] * len(good))).fetchone() == (0,), "a stored vector is kept"
    kept = np.asarray([p["embedding"] for p in parts(conn, op)[:2]], dtype=np.float32)
    assert (kept.reshape(-1) == np.asarray(good, dtype=np.float32)).all()


def test_unknown_model_and_bad_arguments_are_refused(conn: psycopg.Connection[Any]) -> None:
    op = submit(conn, "add_node", node(CONTENT, token_budget=BUDGET))["operation_id"]
    run(conn)
    before = parts(conn, op)
    cases = [
        (STORE, ("no-such-model", [USER], [str(op)], [1], [0.5])),
        (STORE, ("wordllama-l2_supercat-256", [USER, USER], [str(op)], [1], [0.5])),
        (STORE, ("wordllama-l2_supercat-256", [USER], [str(op)], [1], None)),
        ("SELECT * FROM prme.pending_part_embeddings(%s)", (0,)),
        ("SELECT * FROM prme.pending_part_embeddings(%s)", (10001,)),
    ]
    conn.execute("SELECT prme.register_embedding_model('wordllama-l2_supercat-256', 256)")
    for statement, params in cases:
        with pytest.raises(psycopg.Error) as refused:
            conn.execute(statement, params)
        assert refused.value.sqlstate == "PR422", statement
    assert parts(conn, op) == before


def test_the_worker_stops_between_batches_of_parts(conn: psycopg.Connection[Any], model: Embedder) -> None:
    op = submit(conn, "add_node", node(CONTENT, token_budget=BUDGET))["operation_id"]
    use_part_embeddings(conn, model)
    run(conn)
    stop = threading.Event()
    stop.set()
    assert embed_pending_parts(conn, model, stop=stop).embedded == 0
    assert {p["embedding_state"] for p in parts(conn, op)} == {"pending"}


def test_the_quality_bench_runs_on_its_data() -> None:
    """bench/long_memory_quality.py's data is well formed and the bench reports every way of matching."""
    import importlib.util
    import json
    from pathlib import Path

    bench = Path(__file__).resolve().parent.parent / "bench" / "long_memory_quality.py"
    spec = importlib.util.spec_from_file_location("prme_bench_long_memory_quality", bench)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    data = json.loads(module.DATA.read_text(encoding="utf-8"))
    memories = {m["id"]: m["paragraphs"] for m in data["memories"]}
    assert len(memories) == len(data["memories"]) >= 10
    for question in data["questions"]:
        assert 0 <= question["paragraph"] < len(memories[question["memory"]]), question["id"]
    report = module.run([64])
    table = report["budgets"]["64"]["metrics"]
    assert set(table) == {"whole", "pooled", "best_part", "paragraph"}
    assert all(0 <= table[m]["mrr"] <= table[m]["r@10"] <= 1 for m in table)
    assert report["budgets"]["64"]["parts_per_memory"] > 1, "the memories are long at this budget"
