"""Snapshot generations and prompt assembly under real concurrency, checked from outside.

What pgTAP cannot show: readers racing publishers on their own connections, many
publishers racing on one pointer with compare-and-set, and the documents checked by
an independent implementation (Python's ``rfc8785`` and ``hashlib``). The budget
tests re-derive the selection and the prompt layout in Python and demand the same
bytes (docs/SNAPSHOTS.md describes both).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import psycopg
import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.rows import dict_row

from .racing import race

BLANKS = " \t\n\r\f\v"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _add_node(conn: psycopg.Connection[Any], user_id: str, content: str, scope: str = "personal", **kw: Any) -> str:
    params = {"user_id": user_id, "content": content, "scope": scope, **kw}
    for key, value in params.items():
        if isinstance(value, float):  # numeric(5,4) columns: pass exact decimals
            params[key] = Decimal(f"{value:.4f}")
    named = ", ".join(f"{k} => %({k})s" for k in params)
    row = conn.execute(f"SELECT id FROM prme.add_node({named})", params).fetchone()
    assert row is not None
    return str(row[0])


def _publish(conn: psycopg.Connection[Any], user_id: str, scope: str, **kw: Any) -> dict[str, Any]:
    params = {"user_id": user_id, "scope": scope, **kw}
    named = ", ".join(f"{k} => %({k})s" for k in params)
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(f"SELECT * FROM prme.publish_snapshot({named})", params).fetchone()
    assert row is not None
    return row


def _current(conn: psycopg.Connection[Any], user_id: str, scope: str) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM prme.current_snapshot(%s, %s)", (user_id, scope)).fetchone()
    assert row is not None
    return row


def _get(conn: psycopg.Connection[Any], user_id: str, scope: str, generation_id: str) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM prme.get_snapshot(%s, %s, %s)", (user_id, scope, generation_id)).fetchone()
    assert row is not None
    return row


def _assemble(conn: psycopg.Connection[Any], user_id: str, scopes: Sequence[str], budget: int) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM prme.assemble_prompt(%s, %s, %s)", (user_id, list(scopes), budget)).fetchone()
    assert row is not None
    return row


def _check_generation(row: dict[str, Any], user_id: str, scope: str) -> list[dict[str, str]]:
    """A generation as a reader must see it: complete, canonical, hashed as stored. Returns its items."""
    document: str = row["document"]
    assert _sha256(document) == row["generation_id"], "the document does not hash to its id"
    assert rfc8785.dumps(json.loads(document)).decode("utf-8") == document, "the document is not RFC 8785 canonical"
    parsed = json.loads(document)
    assert parsed["user_id"] == user_id and parsed["scope"] == scope and parsed["version"] == 1
    assert set(parsed) == {"items", "scope", "user_id", "version"}
    items: list[dict[str, str]] = parsed["items"]
    assert all(set(item) == {"content", "id", "kind"} for item in items)
    assert row["item_count"] == len(items)
    assert row["byte_size"] == len(document.encode("utf-8"))
    return items


def _render(sections: Sequence[tuple[str, Sequence[str]]], budget: int) -> tuple[str, int, bool]:
    """The prompt layout of docs/SNAPSHOTS.md, independently: (prompt, items taken, truncated)."""
    parts: list[str] = []
    used = 0
    taken = 0
    truncated = False
    for scope, contents in sections:
        header = ("\n" if used else "") + f"[{scope}]\n"
        opened = False
        for content in contents:
            line = "- " + content.replace("\n", "\n  ") + "\n"
            cost = len(line.encode("utf-8")) + (0 if opened else len(header.encode("utf-8")))
            if used + cost <= budget:
                if not opened:
                    parts.append(header)
                    opened = True
                parts.append(line)
                used += cost
                taken += 1
            else:
                truncated = True
    return "".join(parts), taken, truncated


def _assert_history_is_a_forward_chain(
    conn: psycopg.Connection[Any], user_id: str, scope: str
) -> list[tuple[Any, ...]]:
    rows = conn.execute(
        "SELECT seq, generation_id, previous_generation_id FROM prme.snapshot_history"
        " WHERE user_id = %s AND scope = %s ORDER BY seq",
        (user_id, scope),
    ).fetchall()
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1)), "seq must run 1, 2, 3, ... without gaps"
    previous = None
    for _, generation_id, previous_generation_id in rows:
        assert previous_generation_id == previous, "an advance must replace exactly the generation before it"
        assert generation_id != previous
        previous = generation_id
    head = conn.execute(
        "SELECT seq, generation_id FROM prme.snapshot_heads WHERE user_id = %s AND scope = %s", (user_id, scope)
    ).fetchone()
    assert head == (len(rows), previous), "the head is the last advance"
    return rows


# ---------------------------------------------------------------------------
# Canonical documents
# ---------------------------------------------------------------------------

TRICKY = [
    'tabs "not" spaces \\ \t\n\x01\x1f\x7f',
    "ünïcode \u2028 \u2029 \U0001f600 \u05d0\u05d1 \ufeff",
    "</script> & <b>' -- ; DROP TABLE prme.nodes",
    "\U0001d11e clef and \uffff and \ue000",
    "x",
]


def test_generation_documents_are_rfc8785_canonical_and_hashed_as_stored(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET TIME ZONE 'America/St_Johns'")
    conn.execute("SET extra_float_digits = 3")
    ids = {
        _add_node(conn, "alice", content, decay_profile="permanent", salience_base=1 - i / 10): content
        for i, content in enumerate(TRICKY)
    }
    published = _publish(conn, "alice", "personal")
    current = _current(conn, "alice", "personal")
    assert current["generation_id"] == published["generation_id"]
    items = _check_generation(current, "alice", "personal")
    assert [item["content"] for item in items] == TRICKY, "strongest first, content byte for byte"
    assert {item["id"]: item["content"] for item in items} == ids
    assert all(item["kind"] == "fact" for item in items)

    again = _publish(conn, "alice", "personal")
    assert (again["generation_id"], again["seq"], again["advanced"]) == (published["generation_id"], 1, False)


# ---------------------------------------------------------------------------
# Concurrency
# ---------------------------------------------------------------------------


def test_readers_racing_publishers_always_see_one_complete_verified_generation(
    conn: psycopg.Connection[Any], db_dsn: str
) -> None:
    for i in range(20):
        _add_node(conn, "alice", f"seed memory {i}\nwith a second line", salience_base=i / 20)
    _add_node(conn, "alice", "work memory", scope="work")
    _publish(conn, "alice", "personal")
    _publish(conn, "alice", "work")

    writers, rounds, readers = 4, 15, 6
    done = threading.Event()
    errors: list[BaseException] = []
    reads = itertools.count()

    def write(w: int) -> None:
        with psycopg.connect(db_dsn, autocommit=True) as c:
            for r in range(rounds):
                scope = "personal" if r % 3 else "work"
                _add_node(c, "alice", f"writer {w} round {r}: " + "é" * (r * 7), scope=scope, salience_base=0.9)
                _publish(c, "alice", scope, max_items=1 + (w + r) % 25, max_bytes=300 + 97 * r)

    def read() -> None:
        last_seq = {"personal": 0, "work": 0}
        with psycopg.connect(db_dsn, autocommit=True) as c:
            while not done.is_set():
                for scope in ("personal", "work"):
                    row = _current(c, "alice", scope)
                    _check_generation(row, "alice", scope)
                    assert row["seq"] >= last_seq[scope], "a reader saw the pointer move backward"
                    last_seq[scope] = row["seq"]
                budget = 64 + next(reads) % 700
                prompt = _assemble(c, "alice", ["work", "personal"], budget)
                assert prompt["generation_scopes"] == ["work", "personal"]
                sections = []
                for scope, generation_id in zip(prompt["generation_scopes"], prompt["generation_ids"], strict=True):
                    generation = _get(c, "alice", scope, generation_id)
                    items = _check_generation(generation, "alice", scope)
                    sections.append((scope, [item["content"] for item in items]))
                expected, taken, truncated = _render(sections, budget)
                assert prompt["prompt"] == expected, "the prompt is not exactly those generations within the budget"
                assert (prompt["item_count"], prompt["truncated"]) == (taken, truncated)
                assert len(prompt["prompt"].encode("utf-8")) == prompt["byte_size"] <= budget

    def guarded(fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # surfaced below
            errors.append(exc)
            done.set()

    read_threads = [threading.Thread(target=guarded, args=(read,)) for _ in range(readers)]
    write_threads = [threading.Thread(target=guarded, args=(write, w)) for w in range(writers)]
    for t in read_threads + write_threads:
        t.start()
    for t in write_threads:
        t.join(180)
    time.sleep(0.2)  # let readers see the final state too
    done.set()
    for t in read_threads:
        t.join(60)
    assert not any(t.is_alive() for t in read_threads + write_threads), "a thread hung"
    assert not errors, errors
    assert next(reads) > readers, "the readers did read"

    personal = _assert_history_is_a_forward_chain(conn, "alice", "personal")
    work = _assert_history_is_a_forward_chain(conn, "alice", "work")
    assert len(personal) + len(work) > writers * rounds // 2
    stored = conn.execute(
        "SELECT scope, generation_id FROM prme.snapshot_generations WHERE user_id = 'alice' ORDER BY 1, 2"
    ).fetchall()
    for scope, generation_id in stored:
        _check_generation(_get(conn, "alice", scope, generation_id), "alice", scope)


def test_identical_content_published_by_16_connections_is_one_generation(
    conn: psycopg.Connection[Any], db_dsn: str
) -> None:
    for i in range(30):
        _add_node(conn, "alice", f"memory {i}", decay_profile="permanent", salience_base=i / 30)
    results = race(db_dsn, [lambda c: _publish(c, "alice", "personal")] * 16)

    assert all(isinstance(r, dict) for r in results), results
    rows = [r for r in results if isinstance(r, dict)]
    assert len({r["generation_id"] for r in rows}) == 1, "identical content must give the identical generation"
    assert sum(r["advanced"] for r in rows) == 1, "only the first publish advances the pointer"
    assert {r["seq"] for r in rows} == {1}
    counts = conn.execute(
        "SELECT (SELECT count(*) FROM prme.snapshot_generations), (SELECT count(*) FROM prme.snapshot_history)"
    ).fetchone()
    assert counts == (1, 1)
    _check_generation(_current(conn, "alice", "personal"), "alice", "personal")

    # A different owner with the same memories has a generation of its own.
    for i in range(30):
        _add_node(conn, "bob", f"memory {i}", decay_profile="permanent", salience_base=i / 30)
    assert _publish(conn, "bob", "personal")["generation_id"] != rows[0]["generation_id"]


def test_compare_and_set_publishers_never_move_the_pointer_backward(conn: psycopg.Connection[Any], db_dsn: str) -> None:
    _add_node(conn, "alice", "the first memory")
    _publish(conn, "alice", "personal")
    threads, wins_per_thread = 12, 3
    conflicts = itertools.count()

    def publisher(t: int) -> Callable[[psycopg.Connection[Any]], list[tuple[str, str, int]]]:
        def run(c: psycopg.Connection[Any]) -> list[tuple[str, str, int]]:
            wins: list[tuple[str, str, int]] = []
            attempt = 0
            while len(wins) < wins_per_thread:
                attempt += 1
                assert attempt < 500, "a publisher never got through"
                expected = _current(c, "alice", "personal")["generation_id"]
                # New content for every attempt, so every successful publish advances.
                _add_node(c, "alice", f"publisher {t} attempt {attempt}")
                try:
                    row = _publish(c, "alice", "personal", expected_generation_id=expected)
                except psycopg.Error as exc:
                    if exc.sqlstate != "PR409":
                        raise
                    next(conflicts)
                    continue
                assert row["advanced"] and row["previous_generation_id"] == expected
                wins.append((expected, row["generation_id"], row["seq"]))
            return wins

        return run

    results = race(db_dsn, [publisher(t) for t in range(threads)])
    assert all(isinstance(r, list) for r in results), results
    wins = [w for r in results if isinstance(r, list) for w in r]

    history = _assert_history_is_a_forward_chain(conn, "alice", "personal")
    assert len(history) == 1 + threads * wins_per_thread
    by_seq = {seq: (previous, generation_id) for seq, generation_id, previous in history}
    for expected, generation_id, seq in wins:
        assert by_seq[seq] == (expected, generation_id), "each win replaced exactly what it expected"
    assert len({seq for _, _, seq in wins}) == len(wins)
    # Whatever the interleaving, a stale expectation is refused and changes nothing.
    with pytest.raises(psycopg.Error) as caught:
        _publish(conn, "alice", "personal", expected_generation_id=history[0][1])
    assert caught.value.sqlstate == "PR409"
    assert _current(conn, "alice", "personal")["seq"] == len(history)
    print(f"compare-and-set: {len(wins)} advances, {next(conflicts)} conflicts retried")


# ---------------------------------------------------------------------------
# Budgets, to the byte
# ---------------------------------------------------------------------------

_owners = itertools.count()
CONTENT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=60
).filter(lambda s: s.strip(BLANKS) != "")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    contents=st.lists(CONTENT, min_size=1, max_size=12),
    max_bytes_extra=st.integers(min_value=0, max_value=900),
    max_items=st.integers(min_value=1, max_value=12),
    budget=st.integers(min_value=1, max_value=700),
)
def test_budgets_hold_to_the_byte_and_match_an_independent_selection(
    conn: psycopg.Connection[Any], contents: list[str], max_bytes_extra: int, max_items: int, budget: int
) -> None:
    user_id = f"budget-{next(_owners)}"
    for i, content in enumerate(contents):
        # Permanent and without boost: the ranking does not move while the test runs.
        _add_node(conn, user_id, content, decay_profile="permanent", salience_base=(i * 37 % 100) / 100)

    # Everything, in rank order: the reference for the bounded selections.
    full = _publish(conn, user_id, "personal", max_items=10000, max_bytes=16777216)
    ranked = _check_generation(_current(conn, user_id, "personal"), user_id, "personal")
    assert len(ranked) == len(contents) == full["item_count"]

    envelope = len(f'{{"items":[],"scope":"personal","user_id":{json.dumps(user_id)},"version":1}}'.encode())
    max_bytes = envelope + max_bytes_extra
    bounded = _publish(conn, user_id, "personal", max_items=max_items, max_bytes=max_bytes)
    current = _current(conn, user_id, "personal")
    got = _check_generation(current, user_id, "personal")
    assert current["byte_size"] <= max_bytes and len(got) <= max_items
    assert bounded["byte_size"] == current["byte_size"]

    expected: list[dict[str, str]] = []
    used = envelope
    for item in ranked:
        cost = len(rfc8785.dumps(item)) + (1 if expected else 0)
        if used + cost <= max_bytes:
            expected.append(item)
            used += cost
            if len(expected) == max_items:
                break
    assert got == expected, "the bounded generation is the greedy selection over the ranking"
    assert current["byte_size"] == used

    prompt = _assemble(conn, user_id, ["personal"], budget)
    text, taken, truncated = _render([("personal", [item["content"] for item in got])], budget)
    assert prompt["prompt"] == text
    assert (prompt["item_count"], prompt["truncated"]) == (taken, truncated)
    assert len(text.encode("utf-8")) == prompt["byte_size"] <= budget
    assert prompt["generation_ids"] == [current["generation_id"]]


def test_scopes_and_owners_publish_independently(conn: psycopg.Connection[Any]) -> None:
    _add_node(conn, "alice", "personal one")
    _add_node(conn, "alice", "work one", scope="work")
    _add_node(conn, "bob", "personal one")
    a = _publish(conn, "alice", "personal")
    w = _publish(conn, "alice", "work")
    b = _publish(conn, "bob", "personal")
    assert len({a["generation_id"], w["generation_id"], b["generation_id"]}) == 3
    assert (a["seq"], w["seq"], b["seq"]) == (1, 1, 1)
    with pytest.raises(psycopg.Error) as caught:
        _get(conn, "bob", "personal", a["generation_id"])
    assert caught.value.sqlstate == "PR404"
    with pytest.raises(psycopg.Error) as caught:
        _current(conn, "bob", "work")
    assert caught.value.sqlstate == "PR404"
    prompt = _assemble(conn, "bob", ["work", "personal"], 1000)
    assert prompt["prompt"] == "[personal]\n- personal one\n"
    assert prompt["generation_ids"] == [None, b["generation_id"]]
    assert uuid.UUID(json.loads(_current(conn, "bob", "personal")["document"])["items"][0]["id"])
