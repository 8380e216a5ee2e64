"""Windows enumerated and evaluated in blocks of consecutive starts (cogra.runtime.compiled.windows.blockwise)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cogra
from cogra.errors import AggregateOverflowError
from cogra.datasets import stock
from cogra.reference import evaluate_reference
from cogra.runtime.engine import Engine
from cogra.runtime.compiled.windows import blockwise
from cogra.runtime.compiled.windows.enumeration import enumerate_int_windows
from tests.engine.test_window_enumeration import walk_inputs
from tests.compare import assert_same_result
from tests.engine.test_sliding import blocks_of


@settings(max_examples=300, deadline=None)
@given(inputs=walk_inputs(max_segments=5, span=60, max_events=25), block=st.integers(1, 20),
       pooled=st.booleans())
def test_blocks_partition_the_windows_by_start_ranges(inputs, block, pooled: bool) -> None:
    # Pooled (as the engine runs them), each block is written over the one before it:
    # read here before the next is asked for, as the engine does.
    seg_ptr, times, active, size, step = inputs
    every = list(zip(*(a.tolist() for a in enumerate_int_windows(seg_ptr, times, active, size, step))))
    with blocks_of(block):
        if blockwise.too_few(seg_ptr, times, size, step):  # a bound: never too few wrongly
            assert len(every) < 2 * block
        blocks = blockwise.blocks(seg_ptr, times, active, size, step, pool={} if pooled else None)
        if len(every) < 2 * block:  # below MIN_BLOCKS blocks' worth (blocks_of: 2)
            assert blocks is None
            return
        blocks = [list(zip(*(a.tolist() for a in b))) for b in blocks]
    # Every window exactly once, with its own range; blocks are never empty.
    assert sorted(t for b in blocks for t in b) == every and all(blocks)
    for b in blocks:
        assert b == sorted(b)  # walk order: by segment, starts ascending within one
        starts = {t[1] for t in b}
        # At most twice the block size, unless one start holds more windows than that.
        assert len(b) <= 2 * block or len(starts) == 1
    # Blocks follow each other in start order: the result needs no merge.
    for before, after in zip(blocks, blocks[1:]):
        assert max(t[1] for t in before) < min(t[1] for t in after)


@settings(max_examples=200, deadline=None)
@given(inputs=walk_inputs(max_segments=5, span=60, max_events=25), block=st.integers(1, 20), data=st.data())
def test_filtered_blocks_hold_the_windows_that_may_finish(inputs, block, data) -> None:
    from cogra.runtime.compiled.windows.enumeration import trend_ends

    seg_ptr, times, active, size, step = inputs
    n = len(times)
    plays = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.uint64)
    ends = trend_ends(plays, np.uint64(1), np.uint64(2))
    want = list(zip(*(a.tolist() for a in enumerate_int_windows(seg_ptr, times, active, size, step, ends))))
    with blocks_of(block):
        blocks = blockwise.blocks(seg_ptr, times, active, size, step, ends)
        if blocks is None:
            return
        blocks = [list(zip(*(a.tolist() for a in b))) for b in blocks]
    assert sorted(t for b in blocks for t in b) == want  # (walk order: by segment, then start)


@settings(max_examples=200, deadline=None)
@given(inputs=walk_inputs(max_segments=12, span=60, max_events=40), enough=st.integers(0, 200))
def test_windows_are_counted_exactly_below_enough(inputs, enough) -> None:
    # Whether to go by blocks needs the exact count only below the threshold: beyond it
    # the count stops early and extrapolates, never below the threshold.
    from cogra.runtime.compiled.windows import enumeration as wk

    seg_ptr, times, active, size, step = inputs
    state = wk.walk_state(seg_ptr)
    exact = wk.count_windows(seg_ptr, times, active, size, step, wk.LAST_WINDOW, state)
    about = blockwise._windows_about(seg_ptr, times, active, size, step, state, enough)
    assert about == exact if exact < enough else about >= enough
    assert np.array_equal(state, wk.walk_state(seg_ptr))  # a count leaves the walk's state alone


def test_a_start_shared_by_many_windows_is_not_split() -> None:
    # 50 segments with one event each at time 0: each start's windows (one per segment)
    # are more than a block and stay together.
    seg_ptr = np.arange(51, dtype=np.int64)
    times = np.zeros(50, np.int64)
    with blocks_of(4):
        blocks = list(blockwise.blocks(seg_ptr, times, np.ones(50, bool), 6, 2))
    assert [sorted(set(b[1].tolist())) for b in blocks] == [[-4], [-2], [0]]
    assert [len(b[0]) for b in blocks] == [50, 50, 50]


def test_blocks_drop_the_windows_that_cannot_finish() -> None:
    # SEQ(A, B): the filter runs per block, on per-event bounds computed once.
    rng = np.random.default_rng(3)
    n = 400
    table = pa.table({"type": rng.choice(["A", "B", "C"], n, p=[0.2, 0.2, 0.6]),
                      "time": pa.array(np.sort(rng.integers(0, 600, n)), pa.int64()),
                      "v": pa.array(rng.integers(0, 9, n), pa.int64())})
    query = "RETURN COUNT(*), SUM(B.v) PATTERN SEQ(A, B+) WITHIN 20 seconds SLIDE 1 second"
    whole = Engine(cogra.plan(query, table.schema), table)
    want = whole.result_table(on_overflow="null")
    enumerated = len(whole.window_ranges(whole.substreams()).seg)
    with blocks_of(30):
        engine = Engine(cogra.plan(query, table.schema), table)
        got = engine.result_table(on_overflow="null")
    assert got.column("COUNT(*)").num_chunks > 3
    assert_same_result(got, want)
    assert_same_result(got, evaluate_reference(query, table, on_overflow="null"))
    assert engine.stats["windows"] == whole.stats["windows"] < enumerated


@pytest.mark.parametrize("items", ["COUNT(*), AVG(A.price), MIN(A.price), SUM(A.volume)", "COUNT(*)"])
@pytest.mark.parametrize("window", ["60 seconds SLIDE 2 seconds", "4 seconds"])
def test_stock_query_in_blocks_equals_one_block(window: str, items: str) -> None:
    # COUNT(*) alone: its column would be a view of the decode's one-slot buffer, which
    # the next block reuses (finish.scratch) -- it must be copied out.
    table = stock(n_events=4_000)  # 400 seconds
    query = (f"RETURN company, {items} PATTERN Stock A+ "
             f"WHERE [company] GROUP-BY company WITHIN {window}")
    engine = Engine(cogra.plan(query, table.schema), table)
    whole = engine.result_table(on_overflow="null")
    assert whole.column("COUNT(*)").num_chunks == 1
    with blocks_of(97):
        engine = Engine(cogra.plan(query, table.schema), table)
        blocked = engine.result_table(on_overflow="null")
    n_blocks = blocked.column("COUNT(*)").num_chunks
    assert n_blocks > 3  # one chunk per block, in output order
    assert_same_result(blocked, whole)
    assert engine.stats["windows"] > 97 * n_blocks // 2
    assert engine.stats["windows_fast"] + engine.stats["windows_exact"] == engine.stats["windows"]


def test_overflow_to_report_in_a_later_block_raises() -> None:
    # COUNT(*) passes 2**63 only in the last windows: the row path reports it.
    times = list(range(0, 40)) + list(range(1000, 1080))
    table = stock(n_events=120).set_column(1, "time", pa.array(times, pa.int64()))
    query = "RETURN COUNT(*) PATTERN Stock A+ WITHIN 100 seconds SLIDE 1 second"
    with blocks_of(5):
        assert cogra.evaluate(query, table, on_overflow="null").num_rows > 20
        with pytest.raises(AggregateOverflowError, match="COUNT"):
            cogra.evaluate(query, table, on_overflow="error")

