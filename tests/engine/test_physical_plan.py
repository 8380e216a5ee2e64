"""The physical plan (cogra.runtime.physical): what it names is what the engine runs, on
data large enough to reach each run, and ``cogra.explain`` prints it."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest

import cogra
from cogra.runtime.compiled.windows import chunked, sliding
from cogra.runtime.physical import WindowRun, physical_plan
from tests.compare import assert_same_result


def _table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"type": rng.choice(["A", "B", "X"], n, p=[0.6, 0.3, 0.1]), "time": np.arange(n) // 4,
                     "g": rng.integers(0, 4, n), "x": rng.integers(1, 100, n).astype(np.float64)})


def _runs(query: str, schema: pa.Schema) -> list[WindowRun]:
    return [choice.run for choice in physical_plan(cogra.plan(query, schema)).windows.runs]


def _sole_run(query: str, schema: pa.Schema, run: WindowRun) -> str:
    """Asserts the plan offers ``run`` alone; returns why no chunks or shared run apply."""
    strategy = physical_plan(cogra.plan(query, schema)).windows
    assert [choice.run for choice in strategy.runs] == [run]
    return strategy.why_no_sharing


@pytest.fixture
def spies(monkeypatch) -> dict:
    """Which window runs the engine took during a call."""
    took = {"chunks": 0, "panes": 0, "lanes": 0}
    original_run, original_plan, original_mixed = chunked._run, sliding.plan, sliding._run_mixed

    def run(*args):
        took["chunks"] += 1
        return original_run(*args)

    def plan(*args):
        found = original_plan(*args)
        took["panes"] += found is not None
        return found

    def mixed(*args):
        found = original_mixed(*args)
        took["lanes"] += found is not None
        return found

    monkeypatch.setattr(chunked, "_run", run)
    monkeypatch.setattr(sliding, "plan", plan)
    monkeypatch.setattr(sliding, "_run_mixed", mixed)
    return took


def _evaluate(query: str, table: pa.Table) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograPerformanceWarning)
        got = cogra.evaluate(query, table, on_overflow="null")
    return got


def test_one_window_over_a_large_table_runs_in_chunks(spies) -> None:
    table = _table(chunked.MIN_ROWS + 10_000)
    query = "RETURN COUNT(*), AVG(A.x) PATTERN SEQ(A+, B) SEMANTICS next"
    assert _runs(query, table.schema) == [WindowRun.CHUNKS, WindowRun.ONE_PASS]
    got = _evaluate(query, table)
    assert spies["chunks"] == 1
    assert_same_result(got, cogra.evaluate(query, table, compiled=False, on_overflow="null"))


@pytest.mark.parametrize(("query", "why"), [
    ("RETURN g, COUNT(*) PATTERN SEQ(A+, B) SEMANTICS next WHERE [g] GROUP-BY g", "keys"),
    ("RETURN COUNT(*) PATTERN SEQ(A+, B) SEMANTICS next WHERE A.x < NEXT(A).x", "kept events"),
    ("RETURN COUNT(*) PATTERN SEQ(A+, NOT X, B) SEMANTICS next", "a negation"),
])
def test_what_the_plan_rules_out_the_engine_does_not_run(spies, query: str, why: str) -> None:
    table = _table(chunked.MIN_ROWS + 10_000)
    assert _sole_run(query, table.schema, WindowRun.ONE_PASS).startswith(why)
    _evaluate(query, table)
    assert spies["chunks"] == 0


def test_sliding_windows_share_panes_where_the_plan_offers_them(spies) -> None:
    table = _table(60_000)
    query = ("RETURN g, COUNT(*), SUM(A.x) PATTERN SEQ(A+, B) SEMANTICS next WHERE [g] GROUP-BY g "
             "WITHIN 800 seconds SLIDE 100 seconds")
    assert _runs(query, table.schema) == [WindowRun.SHARED_PANES, WindowRun.EACH_WINDOW]
    got = _evaluate(query, table)
    assert spies["panes"] > 0
    assert_same_result(got, cogra.evaluate(query, table, compiled=False, on_overflow="null"))


def test_kept_events_under_any_share_lanes_and_min_max_there_do_not(spies) -> None:
    table = _table(20_000)
    lanes = ("RETURN g, COUNT(*), SUM(A.x) PATTERN SEQ(A+, B) WHERE [g] AND A.x < NEXT(A).x GROUP-BY g "
             "WITHIN 800 seconds SLIDE 100 seconds")
    assert _runs(lanes, table.schema)[0] is WindowRun.SHARED_LANES
    _evaluate(lanes, table)
    assert spies["lanes"] > 0
    each = lanes.replace("SUM(A.x)", "MIN(A.x)")
    assert "MIN/MAX" in _sole_run(each, table.schema, WindowRun.EACH_WINDOW)
    spies["lanes"] = 0
    _evaluate(each, table)
    assert spies["lanes"] == 0


def test_absence_evaluates_each_window_on_its_own(spies) -> None:
    table = _table(60_000)
    query = ("RETURN g, COUNT(*) PATTERN SEQ(A+, B, NOT X) SEMANTICS next WHERE [g] GROUP-BY g "
             "WITHIN 800 seconds SLIDE 100 seconds")
    assert "absence" in _sole_run(query, table.schema, WindowRun.EACH_WINDOW)
    _evaluate(query, table)
    assert spies["panes"] == 0


def test_explain_prints_the_physical_plan() -> None:
    schema = _table(10).schema
    text = cogra.explain("RETURN COUNT(*), AVG(A.x), VARIANCE(A.x) PATTERN SEQ(A+, B) "
                         "WITHIN 10 seconds SLIDE 1 second", schema)
    physical = text[text.index("physical plan"):].splitlines()
    assert physical[1:3] == ["  windows        sliding, WITHIN 10 seconds SLIDE 1 second",
                             "  runs           windows share their panes' work (windows/sliding.py)"]
    exact = "   (exact at any size: past the kernels' integers, the window re-runs exactly)"
    slots = [line[17:] for line in physical if line.startswith("  slots") or line.startswith(" " * 17)]
    assert slots[-4:] == ["sum A.x" + exact, "inf A.x", "nn A.x" + exact, "sq A.x" + exact]
    ratio = cogra.explain("RETURN COUNT(*), AVG(A.x) PATTERN SEQ(A+, B) WITHIN 10 seconds", schema)
    assert "  windows        tumbling, WITHIN 10 seconds" in ratio
    assert "  else           each window from its own events" in ratio  # (a tumbling window is one pane)
    assert "                 sum A.x   (a ratio's part: may be kept in doubles)" in ratio
    trailing = cogra.explain("RETURN COUNT(*) PATTERN SEQ(A+, B, NOT X) WITHIN 10 seconds SLIDE 1 second", schema)
    assert "(no chunks or shared run: an absence: each window's own cut-offs)" in trailing
