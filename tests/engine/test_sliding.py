"""Sliding windows through pane sharing (cogra.runtime.compiled.windows.sliding).

The sharing kernel must return exactly what the per-window kernel and the two-step
reference return.  ``forced`` lowers the panes-per-window threshold to 1 so that every
integer window query whose slide divides its size takes the sharing path (tumbling
windows included), and counts the kernel's calls to prove that it did.
"""

from __future__ import annotations

import contextlib
import warnings

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cogra
from cogra.datasets import events, stock
from cogra.reference import evaluate_reference
from cogra.runtime.compiled.windows import sliding
from cogra.runtime.compiled.windows import pane_maps
from cogra.runtime.compiled.windows import blockwise
from tests.compare import assert_same_result
from tests.strategies import cases, queries, streams

COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@contextlib.contextmanager
def forced(panes_per_window: int = 1):
    """Use the sharing kernel from ``panes_per_window`` panes on (whatever the events per
    window); yields a call counter."""
    calls = []
    real = pane_maps.run_sliding
    old = sliding.MIN_PANES_PER_WINDOW, sliding.MIN_EVENTS_PER_WINDOW

    def counted(*args):
        calls.append(1)
        return real(*args)

    sliding.MIN_PANES_PER_WINDOW, sliding.MIN_EVENTS_PER_WINDOW = panes_per_window, 0
    pane_maps.run_sliding = counted
    try:
        yield calls
    finally:
        sliding.MIN_PANES_PER_WINDOW, sliding.MIN_EVENTS_PER_WINDOW = old
        pane_maps.run_sliding = real


@contextlib.contextmanager
def disabled():
    old = sliding.MIN_PANES_PER_WINDOW
    sliding.MIN_PANES_PER_WINDOW = 10**18
    try:
        yield
    finally:
        sliding.MIN_PANES_PER_WINDOW = old


def evaluate(query: str, table: pa.Table, **kw) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        return cogra.evaluate(query, table, on_overflow="null", **kw)


@contextlib.contextmanager
def blocks_of(windows: int):
    """Evaluate windows in blocks of about ``windows`` (cogra.runtime.compiled.windows.blockwise),
    from two blocks' worth on."""
    old = blockwise.BLOCK_WINDOWS, blockwise.MIN_BLOCKS
    blockwise.BLOCK_WINDOWS, blockwise.MIN_BLOCKS = windows, 2
    try:
        yield
    finally:
        blockwise.BLOCK_WINDOWS, blockwise.MIN_BLOCKS = old


def shared_equals_direct(query: str, table: pa.Table, *, reference: bool = True) -> tuple[pa.Table, int]:
    """The sharing path's result (checked against the per-window path and the reference,
    and against both evaluated in blocks of a few windows) and how often the sharing
    kernel ran."""
    with forced() as calls:
        got = evaluate(query, table)
    n_calls = len(calls)
    with forced(), blocks_of(2):
        blocked = evaluate(query, table)
    with disabled():
        direct = evaluate(query, table)
    with disabled(), blocks_of(3):
        direct_blocked = evaluate(query, table)
    context = f"\nquery:\n{query}\nstream:\n{table.to_pylist()}"
    assert_same_result(got, direct, context=context)
    assert_same_result(blocked, direct, context=context + "\n(sharing kernel, blocks of 2 windows)")
    assert_same_result(direct_blocked, direct, context=context + "\n(per-window kernel, blocks of 3 windows)")
    if reference:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cogra.CograDataWarning)
            want = evaluate_reference(query, table, on_overflow="null")
        assert_same_result(got, want, context=context)
    return got, n_calls


def rows(table: pa.Table) -> list[tuple]:
    return list(zip(*(table.column(c).to_pylist() for c in table.schema.names)))


# ---------------------------------------------------------------------------
# Random queries
# ---------------------------------------------------------------------------


@settings(max_examples=600, **COMMON)
@given(case=cases(max_events=12))
def test_sharing_equals_direct_and_reference(case) -> None:
    q, table = case
    shared_equals_direct(q.text, table)


@st.composite
def sliding_cases(draw):
    """Longer streams (no reference: it enumerates trends) with many panes per window."""
    q = draw(queries())
    text = q.text.split("\nWITHIN")[0]
    slide = draw(st.integers(1, 3))
    text += f"\nWITHIN {slide * draw(st.integers(1, 12))} seconds SLIDE {slide} seconds"
    table = draw(streams(max_events=60, types=q.event_types))
    spread = draw(st.sampled_from([1, 3, 10]))  # 10: gaps of many empty windows
    table = table.set_column(1, "time", pa.array(
        [None if t is None else t * spread for t in table.column("time").to_pylist()], pa.int64()))
    return text, table


@settings(max_examples=300, **COMMON)
@given(case=sliding_cases())
def test_sharing_equals_direct_on_longer_streams(case) -> None:
    shared_equals_direct(*case, reference=False)


# ---------------------------------------------------------------------------
# Hand-checked cases
# ---------------------------------------------------------------------------


def test_any_counts_per_window() -> None:
    # WITHIN 4 SLIDE 2, A+ under any: 2^n - 1 trends over the n events of a window.
    got, calls = shared_equals_direct("RETURN COUNT(*) PATTERN A+ WITHIN 4 seconds SLIDE 2 seconds",
                                      events("a-3 a-1 a0 a2"))
    assert calls == 1
    assert rows(got) == [(1, -6, -2), (3, -4, 0), (3, -2, 2), (3, 0, 4), (1, 2, 6)]


def test_next_with_ties() -> None:
    # Under next, A+ over a0 a1 a1' : a1 and a1' (a tie) both extend a0 only.
    # Window [0, 3): a0, a1, a1', a0a1, a0a1' = 5; [1, 4): a1, a1' = 2; [-1, 2), [-2, 1): 5 and 1.
    got, calls = shared_equals_direct(
        "RETURN COUNT(*) PATTERN A+ SEMANTICS skip-till-next-match WITHIN 3 seconds SLIDE 1 second",
        events("a0 a1 a1"))
    assert calls == 1
    assert rows(got) == [(1, -2, 1), (5, -1, 2), (5, 0, 3), (2, 1, 4)]


def test_contiguous_broken_by_an_irrelevant_event() -> None:
    # SEQ(A, B) contiguous: x2 separates a1 from b3; a4 b5 is contiguous.
    got, calls = shared_equals_direct(
        "RETURN COUNT(*) PATTERN SEQ(A, B) SEMANTICS contiguous WITHIN 4 seconds SLIDE 1 second",
        events("a1 x2 b3 a4 b5"))
    assert calls == 1
    assert rows(got) == [(1, 2, 6), (1, 3, 7), (1, 4, 8)]


def test_min_max_sum_avg_per_window() -> None:
    # A+ under next over a0(5) a2(1) a4(7): windows of size 4 sliding by 2.
    table = events("a0 a2 a4", v=[5, 1, 7])
    got, _ = shared_equals_direct(
        "RETURN COUNT(*), MIN(A.v), MAX(A.v), SUM(A.v), AVG(A.v) PATTERN A+ "
        "SEMANTICS skip-till-next-match WITHIN 4 seconds SLIDE 2 seconds", table)
    # [0,4): a0, a2, a0a2 -> min 1, max 5, sum 5+1+6 = 12, avg 12/4 = 3.0
    assert rows(got)[1] == (3, 1, 5, 12, 3.0, 0, 4)
    # [2,6): a2, a4, a2a4 -> min 1, max 7, sum 1+7+8 = 16
    assert rows(got)[2] == (3, 1, 7, 16, 4.0, 2, 6)


def test_extremes_of_events_that_only_extend_earlier_trends() -> None:
    # B never starts a trend, so in [0, 4) the keys of b2 and b3 (later panes) reach the
    # result only through trends that a0 (an earlier pane) started.
    table = events("a0 b2 b3 a5 b6", v=[9, 5, 1, 9, 7])
    got, _ = shared_equals_direct(
        "RETURN COUNT(*), MIN(B.v), MAX(B.v) PATTERN SEQ(A, B) WITHIN 4 seconds SLIDE 1 second", table)
    by_start = {r[3]: r[:3] for r in rows(got)}
    assert by_start[0] == (2, 1, 5)  # a0 b2, a0 b3
    assert 2 not in by_start  # [2, 6): b2 b3 a5
    assert by_start[3] == by_start[4] == (1, 7, 7)  # a5 b6


def test_empty_panes_and_long_gaps() -> None:
    # Panes of 1 second, windows of 8: most panes are empty, and a gap of ~1000 seconds
    # leaves about a thousand panes without events between the two bursts.
    table = events("a0 b3 a5 b7 a1000 a1001 b1007")
    got, calls = shared_equals_direct(
        "RETURN COUNT(*) PATTERN SEQ(A+, B) WITHIN 8 seconds SLIDE 1 second", table)
    assert calls == 1
    by_start = {r[1]: r[0] for r in rows(got)}
    # [0, 8): a0 b3, a0 b7, a5 b7, a0 a5 b7.  [1000, 1008): a1000 b7, a1001 b7, a1000 a1001 b7.
    assert by_start[0] == 4 and by_start[1000] == 3 and by_start[1001] == 1
    assert by_start[-4] == 1 and by_start[3] == 1  # [-4, 4): a0 b3;  [3, 11): a5 b7


@pytest.mark.parametrize("generated", [False, True], ids=["generic", "generated"])
def test_huge_counts_are_rescaled(monkeypatch, generated) -> None:
    # 2^n - 1 trends per window: the floats pass 2^1000 and are kept with exponents
    # (no fallback to the per-window kernel); COUNT overflows int64 (NULL), AVG does not.
    # Both the generic sharing kernel and the one generated for the query's shape.
    from cogra.runtime.compiled.kernel_driver import KernelDriver

    generated_runs = []
    if generated:
        from cogra.runtime.compiled.codegen import kernel_cache
        from cogra.runtime.compiled import kernel_driver

        # as the generated_kernels fixture, for this test only (that one is per module)
        monkeypatch.setattr(sliding, "SPECIALIZE_MIN_EVENTS", 0)
        monkeypatch.setattr(kernel_driver, "SPECIALIZE_MIN_EVENTS", 0)
        real_for = kernel_cache.sliding_for
        monkeypatch.setattr(kernel_cache, "sliding_for", lambda shape: generated_runs.append(1) or real_for(shape))
    direct_runs = []
    real = KernelDriver.run_raw
    monkeypatch.setattr(KernelDriver, "run_raw", lambda self, *a: direct_runs.append(1) or real(self, *a))
    n = 1200
    table = pa.table({"type": ["A"] * n, "time": pa.array(range(n), pa.int64()),
                      "v": pa.array([i % 7 for i in range(n)], pa.int64())})
    query = "RETURN COUNT(*), AVG(A.v), MIN(A.v) PATTERN A+ WITHIN 1100 seconds SLIDE 10 seconds"
    got, calls = shared_equals_direct(query, table, reference=False)
    direct_runs.clear()
    with forced():
        evaluate(query, table)
    # the sharing kernel (the generic one or the generated one) ran and never fell back
    assert (bool(generated_runs), calls) == ((True, 0) if generated else (False, 1)) and not direct_runs
    assert got.num_rows == len(range(-1090, 1200, 10))
    assert got.column("COUNT(*)").to_pylist()[0] == 2**10 - 1  # [-1090, 10) holds 0..9
    assert got.column("COUNT(*)").to_pylist()[60] is None  # [-490, 610): 610 events
    assert got.column("AVG(A.v)").to_pylist()[60] is not None


def test_only_when_it_pays_off() -> None:
    table = events("a0 a1 a2 a3")
    with forced(panes_per_window=8) as calls:
        evaluate("RETURN COUNT(*) PATTERN A+ WITHIN 4 seconds SLIDE 1 second", table)  # 4 panes
        evaluate("RETURN COUNT(*) PATTERN A+ WITHIN 9 seconds SLIDE 2 seconds", table)  # 2 does not divide 9
        assert not calls
        evaluate("RETURN COUNT(*) PATTERN A+ WITHIN 8 seconds SLIDE 1 second", table)
        assert len(calls) == 1
        sliding.MIN_EVENTS_PER_WINDOW = 5  # these windows hold 1 to 4 events
        evaluate("RETURN COUNT(*) PATTERN A+ WITHIN 8 seconds SLIDE 1 second", table)
        assert len(calls) == 1


@pytest.mark.parametrize("semantics", ["skip-till-any-match", "skip-till-next-match", "contiguous"])
def test_stock_sliding_equals_direct(semantics: str) -> None:
    table = stock(n_events=3_000)
    query = (f"RETURN company, COUNT(*), AVG(A.price), MIN(A.price), MAX(A.volume) PATTERN Stock A+ "
             f"SEMANTICS {semantics} WHERE [company] GROUP-BY company WITHIN 60 seconds SLIDE 2 seconds")
    shared_equals_direct(query, table, reference=False)


def test_windows_with_the_same_events_copy_the_previous_result() -> None:
    # Sparse events under a sliding window: runs of consecutive windows hold the same
    # events, and the per-window kernel copies the previous window's result for them.
    from cogra.runtime.engine import Engine

    table = events("a0 b1 a2 x9 a20 b21 b25 a40", v=[1, 2, 3, 4, 5, 6, 7, 8])
    query = ("RETURN COUNT(*), SUM(B.v), MIN(A.v) PATTERN SEQ(A+, B) "
             "WITHIN 10 seconds SLIDE 1 second")
    engine = Engine(cogra.plan(query, table.schema), table)
    wins = engine.window_ranges(engine.substreams())
    same = (wins.lo[1:] == wins.lo[:-1]) & (wins.hi[1:] == wins.hi[:-1])
    assert same.sum() >= 10 and (~same).sum() >= 10
    with disabled():
        got = evaluate(query, table)
    assert_same_result(got, evaluate_reference(query, table, on_overflow="null"))
    by_start = {r[3]: r[:3] for r in rows(got)}
    # [-8, 2) .. [-7, 3): a0 b1 (and a2 from -7: no B after it); [12, 22) .. [15, 25): a20 b21
    assert by_start[-8] == (1, 2, 1) and by_start[-7] == (1, 2, 1)
    assert all(by_start[k] == (1, 6, 5) for k in range(12, 16))
    assert by_start[16] == (2, 13, 5)  # [16, 26): a20 b21, a20 b25


def test_repeated_windows_run_once_in_the_sharing_kernel(monkeypatch) -> None:
    # Windows over the same events as their predecessor run once in the sharing kernel;
    # they share its row of channels (KernelOut.row_first).
    table = events("a0 b1 a2 x9 a20 b21 b25 a40", v=[1, 2, 3, 4, 5, 6, 7, 8])
    query = ("RETURN COUNT(*), SUM(B.v), MIN(A.v) PATTERN SEQ(A+, B) "
             "WITHIN 10 seconds SLIDE 1 second")
    seen = []
    real = sliding._distinct_windows

    def spy(pool, seg, start, lo, hi, slide):
        found = real(pool, seg, start, lo, hi, slide)
        seen.append((len(seg), len(found[1])))
        return found

    monkeypatch.setattr(sliding, "_distinct_windows", spy)
    with forced() as calls:
        got = evaluate(query, table)
    assert calls and seen and all(distinct < windows for windows, distinct in seen)
    assert_same_result(got, evaluate_reference(query, table, on_overflow="null"))


def distinct_by_hand(seg, start, lo, hi, slide):
    """What sliding._distinct_in_walk_order computes, spelled out (None: not in walk order)."""
    keep, of = [], []
    for w in range(len(seg)):
        if w and (seg[w] < seg[w - 1] or (seg[w] == seg[w - 1] and start[w] // slide <= start[w - 1] // slide)):
            return None
        if w and seg[w] == seg[w - 1] and lo[w] == lo[w - 1] and hi[w] == hi[w - 1]:
            of.append(len(keep) - 1)
        else:
            keep.append(w)
            of.append(len(keep) - 1)
    return keep, of


@settings(max_examples=300, deadline=None)
@given(data=st.data(), slide=st.integers(1, 4))
def test_distinct_windows_and_their_spread(data, slide: int) -> None:
    import numpy as np

    from cogra.runtime.compiled.channels import KernelOut

    n = data.draw(st.integers(0, 30))
    seg = sorted(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    steps = data.draw(st.lists(st.sampled_from([1, 1, 1, 2, 0]), min_size=n, max_size=n))  # 0: out of order
    start, lo, hi = [], [], []
    for w in range(n):
        first = w == 0 or seg[w] != seg[w - 1]
        start.append((data.draw(st.integers(-3, 3)) if first else start[-1] // slide + steps[w]) * slide)
        a = data.draw(st.integers(0, 5)) if first else lo[-1] + data.draw(st.sampled_from([0, 0, 1]))
        lo.append(a)
        hi.append(max(a, (hi[-1] if not first else a) + data.draw(st.sampled_from([0, 0, 1, 2]))))
    arrays = [np.array(x, np.int64) for x in (seg, start, lo, hi)]
    found = sliding._distinct_windows(None, *arrays, slide)
    want = distinct_by_hand(seg, start, lo, hi, slide)
    if want is None:
        assert found is None
        return
    keep, of = want
    row_first, row_k = found
    assert row_first.tolist() == keep + [n] and row_k.tolist() == [start[w] // slide for w in keep]
    # Each window's row is its distinct window's (KernelOut.rows_of_windows).
    out = KernelOut(np.zeros((len(keep), 1), np.uint64), np.zeros((len(keep), 1)), np.zeros((len(keep), 0), np.int64),
                    np.arange(len(keep)), np.ones(len(keep), bool), row_first)
    assert out.windows == n and out.rows_of_windows().tolist() == of
    assert out.per_window().e.tolist() == of
    assert [out.window_of_row(d) for d in range(len(keep))] == keep
