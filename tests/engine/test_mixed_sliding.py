"""Mixed-grained sliding windows: all windows in one pass over a ring of lanes by start
pane (compiled/mixed_one_pass.py), or a group of windows per pass (compiled/mixed_grouped.py).

Both kernels keep every state as lanes by start pane and read a window from the lanes
that started inside it.  They must return exactly what the exact Python executor returns
(which the property tests tie to the two-step reference): the ring kernel across rank
blocks (re-ranked and rebuilt as the events move on), gaps longer than a window and
negative times; the grouped kernel for any group size -- small groups put many windows
in the "started later" lane.  Both fall back to the per-window kernel where counts pass
2**600.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cogra
from cogra.datasets import stock
from cogra.examples import Q3
from cogra.runtime.compiled.windows import mixed_one_pass
from cogra.runtime.compiled.windows import mixed_grouped
from cogra.runtime.compiled.windows import sliding
from tests.compare import assert_same_result
from tests.engine.test_mixed_kernel import random_stream
from tests.engine.test_sliding import forced

OPS = ["<", "<=", ">", ">=", "=", "<>"]


RING = 0
"""``lanes`` value that selects the ring kernel."""


@contextlib.contextmanager
def grouped(lanes: int):
    """The grouped kernel with groups of ``lanes`` windows, or the ring kernel if ``lanes``
    is :data:`RING`; yields the list of calls of the chosen kernel."""
    calls = []
    module, name = (mixed_one_pass, "run_mixed_ring") if lanes == RING else (mixed_grouped, "run_mixed_sliding")
    real = getattr(module, name)
    old = sliding.GROUP_LANES, sliding.RING

    def counted(*args):
        calls.append(1)
        return real(*args)

    setattr(module, name, counted)
    sliding.GROUP_LANES, sliding.RING = max(lanes, 1), lanes == RING
    try:
        yield calls
    finally:
        setattr(module, name, real)
        sliding.GROUP_LANES, sliding.RING = old


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
    lanes=st.sampled_from([RING, RING, 1, 2, 3, 16]),
    grouping=st.booleans(),
    times=st.sampled_from(["dense", "gaps", "negative"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_shared_windows_equal_python(op, pattern, kept, n, distinct, slide, panes, lanes, grouping, times,
                                     seed) -> None:
    if kept == "B" and "B" not in pattern:
        kept = "A"
    if kept == "A" and pattern == "SEQ(A, B+)":
        kept = "B"  # A is not under a Kleene plus there: it cannot follow itself
    table = random_stream(seed, n, distinct)
    if times == "gaps":  # silences longer than any window (48 s): the ring empties
        rng = np.random.default_rng(seed)
        steps = rng.choice([0, 1, 60], n, p=[0.3, 0.6, 0.1])
        table = table.set_column(1, "time", pa.array(np.cumsum(steps)))
    elif times == "negative":  # panes below zero: ring slots by floor modulo
        table = table.set_column(1, "time", pa.array(table.column("time").to_numpy() - 1000))
    returns = "COUNT(*), SUM(A.v), AVG(A.w)" + (", SUM(B.w)" if "B" in pattern else "")
    query = (f"RETURN {'g, ' if grouping else ''}{returns} PATTERN {pattern} "
             f"WHERE {kept}.v {op} NEXT({kept}).v "
             + ("GROUP-BY g " if grouping else "")
             + f"WITHIN {slide * panes} seconds SLIDE {slide} seconds")
    with forced(), grouped(lanes) as calls:
        got = compiled(query, table)
    assert_same_result(got, exact(query, table), context=f"\n{query}\n{table.to_pylist()}")
    assert calls or got.num_rows == 0


@pytest.mark.parametrize("lanes", [RING, 3, 16])
def test_q3_shared_equals_per_window_kernel(lanes) -> None:
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


@pytest.mark.parametrize("lanes", [RING, 16])
def test_huge_counts_fall_back_per_window(monkeypatch, lanes) -> None:
    # Strictly increasing values: every subset is a trend, 2**n per window -- past 2**600
    # the group is redone window by window (COUNT overflows to NULL, AVG stays exact).
    from cogra.runtime.compiled.kernel_driver import KernelDriver

    redone = []
    real = KernelDriver.run_raw
    monkeypatch.setattr(KernelDriver, "run_raw", lambda self, subs, lo, hi: redone.append(len(lo))
                        or real(self, subs, lo, hi))
    n = 700
    table = pa.table({"type": ["A"] * n, "time": pa.array(range(n), pa.int64()),
                      "v": pa.array(range(n), pa.int64())})
    query = ("RETURN COUNT(*), AVG(A.v) PATTERN A+ WHERE A.v < NEXT(A).v "
             "WITHIN 680 seconds SLIDE 20 seconds")
    with grouped(lanes) as calls:
        got = compiled(query, table)
    assert calls and redone
    counts = [r["COUNT(*)"] for r in got.to_pylist()]
    assert None in counts and 2**20 - 1 in counts  # full windows overflow int64; the last has 20 events
    assert_same_result(got, exact(query, table))


def test_ring_over_budget_uses_groups(monkeypatch) -> None:
    # Where the ring's trees would not fit RING_MAX_BYTES, the grouped kernel runs instead.
    table = stock(1500, rate=2.0)
    ring_calls = []
    monkeypatch.setattr(mixed_one_pass, "run_mixed_ring", lambda *args: ring_calls.append(1))
    monkeypatch.setattr(sliding, "RING_MAX_BYTES", 0)
    with grouped(16) as group_calls:
        sliding.RING = True  # grouped() turned it off; only the budget may now rule the ring out
        got = compiled(Q3, table)
    assert group_calls and not ring_calls
    assert_same_result(got, exact(Q3, table))


def test_ring_rebuilds_across_rank_blocks() -> None:
    # A long segment with short windows: the rank block (twice the live span) is passed
    # many times, so live kept events are re-ranked and their stored lanes re-inserted,
    # with the lanes of expired panes dropped.
    rng = np.random.default_rng(7)
    n = 3000
    table = pa.table({"type": ["A"] * n, "time": pa.array(np.arange(n) // 3),
                      "v": pa.array(rng.integers(0, 40, n))})
    query = ("RETURN COUNT(*), AVG(A.v) PATTERN A+ WHERE A.v > NEXT(A).v "
             "WITHIN 12 seconds SLIDE 2 seconds")
    blocks = []
    real = sliding._max_live_span

    def spy(*args):
        blocks.append(real(*args))
        return blocks[-1]

    sliding._max_live_span = spy
    try:
        with forced(), grouped(RING) as calls:
            got = compiled(query, table)
    finally:
        sliding._max_live_span = real
    assert calls and blocks and n > 10 * 2 * blocks[0]
    assert got.num_rows > 400
    assert_same_result(got, exact(query, table))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.tuples(st.sampled_from(OPS), st.sampled_from(OPS)),
    where=st.sampled_from(["both", "cross"]),
    n=st.integers(1, 120),
    distinct=st.sampled_from([3, 40]),
    slide=st.integers(1, 3),
    panes=st.integers(2, 10),
    lanes=st.sampled_from([RING, RING, 3]),
    seed=st.integers(0, 2**32 - 1),
)
def test_several_kept_pairs_equal_python(ops, where, n, distinct, slide, panes, lanes, seed) -> None:
    # Two indexed pairs (A after A and B after B, each with its own trees), or one pair
    # across variables (an A read by the B that follows it).
    table = random_stream(seed, n, distinct)
    condition = (f"A.v {ops[0]} NEXT(A).v AND B.w {ops[1]} NEXT(B).w" if where == "both"
                 else f"A.v {ops[0]} NEXT(B).v")
    query = (f"RETURN COUNT(*), SUM(B.v) PATTERN SEQ(A+, B+) WHERE {condition} "
             f"WITHIN {slide * panes} seconds SLIDE {slide} seconds")
    with forced(), grouped(lanes) as calls:
        got = compiled(query, table)
    assert_same_result(got, exact(query, table), context=f"\n{query}\n{table.to_pylist()}")
    assert calls or got.num_rows == 0


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 30), min_size=1, max_size=4), per_window=st.integers(1, 10),
       seed=st.integers(0, 2**32 - 1))
def test_live_span_is_the_most_positions_in_a_window_of_panes(sizes, per_window, seed) -> None:
    # The ring kernel's trees are sized by it: for every event, the positions of its
    # segment in the per_window panes that end at its pane.
    rng = np.random.default_rng(seed)
    seg_ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    pane = np.concatenate([np.sort(rng.integers(-20, 20, z)) for z in sizes]).astype(np.int64)
    want = 1
    for a, z in zip(seg_ptr[:-1], seg_ptr[1:]):
        for e in range(a, z):
            want = max(want, int(np.sum((pane[a:z] > pane[e] - per_window) & (pane[a:z] <= pane[e]))))
    assert sliding._max_live_span(pane, seg_ptr, per_window) == want
