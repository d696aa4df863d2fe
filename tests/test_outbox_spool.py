"""The maildir-style spool under the outbox: atomic puts and moves, safe across processes."""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from prme_pg.errors import PrmeError
from prme_pg.spool import Spool, StateMismatch, time_ordered_uuid

STATES = ("pending", "done", "failed")


def test_put_get_move_and_names(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s", STATES)
    assert stat.S_IMODE((tmp_path / "s" / "pending").stat().st_mode) == 0o700
    spool.put("b", {"n": 2, "text": "żółw"}, "pending")
    spool.put("a", {"n": 1}, "pending")
    assert spool.names("pending") == ["a", "b"]
    assert spool.get("b") == ("pending", {"n": 2, "text": "żółw"})
    assert spool.get("missing") is None
    assert stat.S_IMODE((tmp_path / "s" / "pending" / "a.json").stat().st_mode) == 0o600

    assert spool.move("a", "pending", "done") == {"n": 1}
    assert spool.move("b", "pending", "failed", {"n": 2, "reason": "x"}) == {"n": 2, "reason": "x"}
    assert spool.get("b") == ("failed", {"n": 2, "reason": "x"})
    assert spool.names("pending") == []
    counts = spool.counts()
    assert counts["pending"] == (0, None)
    assert counts["done"][0] == 1 and counts["done"][1] is not None
    assert list((tmp_path / "s" / "tmp").iterdir()) == []


def test_names_are_unique_across_states(tmp_path: Path) -> None:
    spool = Spool(tmp_path, STATES)
    spool.put("x", {}, "pending")
    spool.move("x", "pending", "done")
    with pytest.raises(FileExistsError):
        spool.put("x", {"other": True}, "failed")
    assert spool.get("x") == ("done", {})
    assert list((tmp_path / "tmp").iterdir()) == []


def test_move_from_the_wrong_state_raises_and_changes_nothing(tmp_path: Path) -> None:
    spool = Spool(tmp_path, STATES)
    spool.put("x", {"v": 1}, "pending")
    spool.move("x", "pending", "done")
    with pytest.raises(StateMismatch) as caught:
        spool.move("x", "pending", "failed", {"v": 2})
    assert isinstance(caught.value, PrmeError)
    assert caught.value.actual == "done"
    assert spool.get("x") == ("done", {"v": 1})
    with pytest.raises(StateMismatch):
        spool.move("never", "pending", "done")


def test_invalid_names_and_states_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="state"):
        Spool(tmp_path, ("tmp",))
    spool = Spool(tmp_path, STATES)
    for bad in ("../x", "a/b", "", ".hidden"):
        with pytest.raises(ValueError, match="name"):
            spool.put(bad, {}, "pending")
    with pytest.raises(ValueError, match="unknown spool state"):
        spool.put("ok", {}, "nope")


def test_time_ordered_uuids_sort_in_creation_order() -> None:
    ids = [time_ordered_uuid() for _ in range(5000)]
    assert ids == sorted(ids, key=str)
    assert len(set(ids)) == len(ids)
    assert all(i.version == 7 for i in ids)


def _put_same_names(root: str, worker: int, queue: multiprocessing.Queue[tuple[int, int]]) -> None:
    spool = Spool(root, STATES)
    won = 0
    for i in range(200):
        try:
            spool.put(f"n{i:04d}", {"worker": worker}, "pending")
            won += 1
        except FileExistsError:
            pass
    queue.put((worker, won))


def _move_all(root: str, queue: multiprocessing.Queue[tuple[int, int]], worker: int) -> None:
    spool = Spool(root, STATES)
    won = 0
    for name in spool.names("pending"):
        try:
            spool.move(name, "pending", "done", {"mover": worker})
            won += 1
        except StateMismatch:
            pass
    queue.put((worker, won))


def test_concurrent_puts_and_moves_from_processes_each_win_once(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[tuple[int, int]] = ctx.Queue()
    procs = [ctx.Process(target=_put_same_names, args=(str(tmp_path), w, queue)) for w in range(4)]
    for p in procs:
        p.start()
    wins = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sum(won for _, won in wins) == 200
    spool = Spool(tmp_path, STATES)
    assert len(spool.names("pending")) == 200

    procs = [ctx.Process(target=_move_all, args=(str(tmp_path), queue, w)) for w in range(4)]
    for p in procs:
        p.start()
    wins = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sum(won for _, won in wins) == 200
    assert spool.counts()["done"][0] == 200
    assert spool.names("pending") == []
    assert os.listdir(tmp_path / "tmp") == []


def test_sweep_tmp_removes_only_dead_writers_files(tmp_path: Path) -> None:
    spool = Spool(tmp_path, STATES)
    ctx = multiprocessing.get_context("fork")
    dead = ctx.Process(target=lambda: None)
    dead.start()
    dead.join()
    assert dead.pid is not None
    (tmp_path / "tmp" / f"x.{dead.pid}.abcdef.tmp").write_text("{")
    (tmp_path / "tmp" / f"y.{os.getpid()}.abcdef.tmp").write_text("{")
    assert spool.sweep_tmp() == 1
    assert os.listdir(tmp_path / "tmp") == [f"y.{os.getpid()}.abcdef.tmp"]


def test_move_many_is_all_or_nothing_up_front(tmp_path: Path) -> None:
    spool = Spool(tmp_path, STATES)
    for name in ("a", "b", "c"):
        spool.put(name, {"n": name}, "pending")
    spool.move("c", "pending", "failed")
    with pytest.raises(StateMismatch) as caught:
        spool.move_many([("a", {"n": "a2"}), ("c", None)], "pending", "done")
    assert caught.value.actual == "failed"
    assert spool.get("a") == ("pending", {"n": "a"})  # nothing moved, nothing rewritten
    assert os.listdir(tmp_path / "tmp") == []
    spool.move_many([("a", {"n": "a2"}), ("b", {"n": "b2"})], "pending", "done")
    assert spool.get("a") == ("done", {"n": "a2"}) and spool.get("b") == ("done", {"n": "b2"})
    assert spool.names("pending") == []


def test_only_regular_files_with_document_names_are_documents(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s", ["a", "b"])
    spool.put("x1", {"n": 1}, "a")
    folder = tmp_path / "s" / "a"
    (folder / "._x1.json").write_text("{}")  # a file manager's shadow file
    (folder / "dir.json").mkdir()
    (folder / "link.json").symlink_to(folder / "x1.json")
    assert spool.names("a") == ["x1"] and spool.counts()["a"][0] == 1
    with pytest.raises(ValueError, match="symlink"):
        spool.get("link")  # never read through a symlink
    with pytest.raises(ValueError, match="not a regular file"):
        spool.read_bytes("dir", "a")
    assert spool.read_bytes("x1", "a") == b'{"n":1}'


def test_a_read_only_spool_creates_nothing_and_counts_missing_folders_as_empty(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "none", ["a", "b"], create=False)
    assert spool.names("a") == [] and spool.counts() == {"a": (0, None), "b": (0, None)}
    assert not (tmp_path / "none").exists()
