"""Windows evaluated in blocks of consecutive starts (cogra.runtime.fast.window_blocks)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cogra
from cogra.errors import AggregateOverflowError
from cogra.datasets import stock
from cogra.runtime.engine import Engine, Windows
from cogra.runtime.fast import window_blocks
from tests.compare import assert_same_result
from tests.engine.test_sliding import blocks_of


@st.composite
def walk_ordered_windows(draw) -> Windows:
    """Windows by segment, starts ascending within each (as the engine enumerates them)."""
    seg, start = [], []
    s = 0
    for _ in range(draw(st.integers(1, 6))):
        s += draw(st.integers(1, 2))  # segments without windows are skipped
        starts = sorted(set(draw(st.lists(st.integers(-50, 50), max_size=40))))
        seg += [s] * len(starts)
        start += starts
    lo = np.arange(len(seg), dtype=np.int64) * 3
    return Windows(np.asarray(seg, np.int64), lo, lo + 7, start=np.asarray(start, np.int64), size=10)


def _tuples(w: Windows) -> list[tuple]:
    return list(zip(w.seg.tolist(), w.start.tolist(), w.lo.tolist(), w.hi.tolist()))


@settings(max_examples=300, deadline=None)
@given(wins=walk_ordered_windows(), block=st.integers(1, 20))
def test_blocks_partition_the_windows_by_start_ranges(wins: Windows, block: int) -> None:
    with blocks_of(block):
        blocks = list(window_blocks.by_start(wins))
    # Every window exactly once, with its own range.
    assert sorted(t for b in blocks for t in _tuples(b)) == sorted(_tuples(wins))
    for b in blocks:
        assert (len(b.seg) or b is wins) and b.size == wins.size
        # Walk order inside a block: by segment, starts ascending within one.
        key = list(zip(b.seg.tolist(), b.start.tolist()))
        assert key == sorted(key) and len(set(key)) == len(key)
    # Blocks follow each other in start order: the result needs no merge.
    for before, after in zip(blocks, blocks[1:]):
        assert before.start.max() < after.start.min()
    if len(wins.seg) >= 2 * block and len(set(wins.start.tolist())) > 1:
        assert len(blocks) > 1
    if len(wins.seg) < 2 * block:  # below MIN_BLOCKS blocks' worth (blocks_of: 2)
        assert len(blocks) == 1 and blocks[0] is wins


def _only(blocks) -> Windows:
    (block,) = list(blocks)
    return block


def test_windows_out_of_walk_order_stay_one_block() -> None:
    seg = np.array([0, 0, 1, 1, 0], np.int64)  # segment 0 again after segment 1
    start = np.arange(5, dtype=np.int64)
    wins = Windows(seg, start, start + 1, start=start, size=4)
    with blocks_of(1):
        assert _only(window_blocks.by_start(wins)) is wins
    wins = Windows(np.zeros(5, np.int64), start, start + 1, start=start[::-1].copy(), size=4)
    with blocks_of(1):
        assert _only(window_blocks.by_start(wins)) is wins


def test_a_start_shared_by_many_windows_is_not_split() -> None:
    # No WITHIN: every segment's one window starts at 0.
    seg = np.arange(50, dtype=np.int64)
    wins = Windows(seg, seg, seg + 1, start=np.zeros(50, np.int64), size=None)
    with blocks_of(4):
        assert _only(window_blocks.by_start(wins)) is wins


@pytest.mark.parametrize("window", ["60 seconds SLIDE 2 seconds", "4 seconds"])
def test_stock_query_in_blocks_equals_one_block(window: str) -> None:
    table = stock(n_events=4_000)  # 400 seconds
    query = ("RETURN company, COUNT(*), AVG(A.price), MIN(A.price), SUM(A.volume) PATTERN Stock A+ "
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

