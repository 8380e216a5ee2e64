"""Mixed-grained sliding windows, a group of windows per pass (fast/mixed_sliding.py).

The kernel keeps every state as lanes by start pane and reads a window from the lanes
that started inside it.  It must return exactly what the exact Python executor returns
(which the property tests tie to the two-step reference), for any group size -- small
groups put many windows in the "started later" lane -- and fall back to the per-window
kernel where counts pass 2**600.
"""

from __future__ import annotations

import contextlib
import warnings

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cogra
from cogra.datasets import stock
from cogra.examples import Q3
from cogra.runtime.fast import mixed_sliding, sliding
from tests.compare import assert_same_result
from tests.engine.test_mixed_kernel import random_stream
from tests.engine.test_sliding import forced

OPS = ["<", "<=", ">", ">=", "=", "<>"]


@contextlib.contextmanager
def grouped(lanes: int):
    """Groups of ``lanes`` windows; yields the list of kernel calls."""
    calls = []
    real = mixed_sliding.run_mixed_sliding
    old = sliding.GROUP_LANES

    def counted(*args):
        calls.append(1)
        return real(*args)

    mixed_sliding.run_mixed_sliding, sliding.GROUP_LANES = counted, lanes
    try:
        yield calls
    finally:
        mixed_sliding.run_mixed_sliding, sliding.GROUP_LANES = real, old


def exact(query: str, table: pa.Table) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        return cogra.evaluate(query, table, compiled=False, on_overflow="null")


def compiled(query: str, table: pa.Table) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        return cogra.evaluate(query, table, compiled=True, on_overflow="null")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    op=st.sampled_from(OPS),
    pattern=st.sampled_from(["SEQ(A+, B*)", "SEQ(A+, B+)", "A+", "SEQ(A, B+)"]),
    kept=st.sampled_from(["A", "B"]),
    n=st.integers(1, 150),
    distinct=st.sampled_from([3, 50]),
    slide=st.integers(1, 4),
    panes=st.integers(1, 12),
    lanes=st.sampled_from([1, 2, 3, 16]),
    grouping=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_grouped_windows_equal_python(op, pattern, kept, n, distinct, slide, panes, lanes, grouping,
                                      seed) -> None:
    if kept == "B" and "B" not in pattern:
        kept = "A"
    if kept == "A" and pattern == "SEQ(A, B+)":
        kept = "B"  # A is not under a Kleene plus there: it cannot follow itself
    table = random_stream(seed, n, distinct)
    returns = "COUNT(*), SUM(A.v), AVG(A.w)" + (", SUM(B.w)" if "B" in pattern else "")
    query = (f"RETURN {'g, ' if grouping else ''}{returns} PATTERN {pattern} "
             f"WHERE {kept}.v {op} NEXT({kept}).v "
             + ("GROUP-BY g " if grouping else "")
             + f"WITHIN {slide * panes} seconds SLIDE {slide} seconds")
    with forced(), grouped(lanes) as calls:
        got = compiled(query, table)
    assert_same_result(got, exact(query, table), context=f"\n{query}\n{table.to_pylist()}")
    assert calls or got.num_rows == 0


@pytest.mark.parametrize("lanes", [3, 16])
def test_q3_grouped_equals_per_window_kernel(lanes) -> None:
    table = stock(4000, rate=2.0)
    with grouped(lanes) as calls:
        got = compiled(Q3, table)
    assert calls
    per_window = sliding._run_mixed
    try:
        sliding._run_mixed = lambda *args: None
        want = compiled(Q3, table)
    finally:
        sliding._run_mixed = per_window
    assert got.num_rows > 100
    assert_same_result(got, want)


def test_huge_counts_fall_back_per_window(monkeypatch) -> None:
    # Strictly increasing values: every subset is a trend, 2**n per window -- past 2**600
    # the group is redone window by window (COUNT overflows to NULL, AVG stays exact).
    from cogra.runtime.fast.executor import FastExecutor

    redone = []
    real = FastExecutor.run_raw
    monkeypatch.setattr(FastExecutor, "run_raw", lambda self, subs, lo, hi: redone.append(len(lo))
                        or real(self, subs, lo, hi))
    n = 700
    table = pa.table({"type": ["A"] * n, "time": pa.array(range(n), pa.int64()),
                      "v": pa.array(range(n), pa.int64())})
    query = ("RETURN COUNT(*), AVG(A.v) PATTERN A+ WHERE A.v < NEXT(A).v "
             "WITHIN 680 seconds SLIDE 20 seconds")
    with grouped(16) as calls:
        got = compiled(query, table)
    assert calls and redone
    counts = [r["COUNT(*)"] for r in got.to_pylist()]
    assert None in counts and 2**20 - 1 in counts  # full windows overflow int64; the last has 20 events
    assert_same_result(got, exact(query, table))
