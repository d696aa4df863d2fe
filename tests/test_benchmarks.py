"""The benchmarks still fit the schema.

A benchmark is run by hand, long after the change that broke it: the maintenance
benchmark's floor and 0003 report stopped running when 0021_row_rules_on_types made the
columns domains, and nobody measured until a session wanted the numbers. These tests run
the cheap parts on every CI run: the maintenance benchmark end to end at a tiny size, and
bench/run.py's floor functions once each, checked to write what a confirmation writes.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _bench_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"prme_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_maintenance_bench_runs_every_statement_on_the_current_schema(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench_module("maintenance_bench")
    code = bench.main(["--nodes", "2000", "--runs", "1", "--previous", "--floor", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code in (0, 1)  # 1: the target missed at this size, which is not what is tested here
    # The report found work (the data shape asks for it in about half the memories), and the
    # report as 0003 released it agreed row for row (main() asserts it) and the floor ran.
    assert result["memories"] == 2000
    assert 0 < result["report_rows"] < 2000
    assert result["previous_ratio_wall"] is not None
    assert result["floor_ratio_wall"] is not None
