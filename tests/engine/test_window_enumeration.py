"""The compiled window enumeration (enumeration._walk) against a direct one.

Every (segment, window) pair holding an active event, in segment then start order, with
the range of the segment's events inside the window -- for negative times, sizes that
the step does or does not divide, steps longer than the size (gaps between windows),
inactive events, ties and empty segments.
"""

from __future__ import annotations

import bisect

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cogra.runtime.compiled.windows.enumeration import enumerate_int_windows


def direct(seg_ptr, times, active, size, step):
    out = []
    for s in range(len(seg_ptr) - 1):
        a, b = seg_ptr[s], seg_ptr[s + 1]
        ts = times[a:b].tolist()
        ks = set()
        for e in range(a, b):
            if active[e]:
                t = int(times[e])
                ks.update(range((t - size) // step + 1, t // step + 1))
        for k in sorted(ks):
            start = k * step
            out.append((s, start, a + bisect.bisect_left(ts, start), a + bisect.bisect_left(ts, start + size)))
    return out


@st.composite
def walk_inputs(draw, max_segments: int = 4, span: int = 40, max_events: int = 12):
    """``(seg_ptr, times, active, size, step)``: segments of sorted times (ties, negative
    times, empty segments), some events inactive, sizes the step does or does not divide."""
    step = draw(st.integers(1, 7))
    size = draw(st.integers(1, 5)) * step + (draw(st.integers(0, 6)) if draw(st.booleans()) else 0)
    parts, seg_ptr = [], [0]
    for _ in range(draw(st.integers(1, max_segments))):
        ts = sorted(draw(st.lists(st.integers(-span, span), max_size=max_events)))
        parts.append(ts)
        seg_ptr.append(seg_ptr[-1] + len(ts))
    times = np.array([t for p in parts for t in p], np.int64)
    active = np.array(draw(st.lists(st.booleans(), min_size=len(times), max_size=len(times))), bool)
    return np.array(seg_ptr, np.int64), times, active, size, step


@settings(max_examples=300, deadline=None)
@given(inputs=walk_inputs())
def test_compiled_enumeration_equals_direct(inputs) -> None:
    seg_ptr, times, active, size, step = inputs
    got = list(zip(*(a.tolist() for a in enumerate_int_windows(seg_ptr, times, active, size, step))))
    assert got == direct(seg_ptr, times, active, size, step)


def test_large_microsecond_times() -> None:
    # q2's shape: microsecond timestamps, 10-minute windows sliding every 30 s, sparse events.
    rng = np.random.default_rng(1)
    times = np.sort(rng.integers(0, 3_600_000_000, 300)).astype(np.int64)
    active = rng.random(300) < 0.7
    seg_ptr = np.array([0, 120, 300], np.int64)
    times[:120].sort()
    times[120:].sort()
    got = list(zip(*(a.tolist() for a in enumerate_int_windows(seg_ptr, times, active, 600_000_000, 30_000_000))))
    assert got == direct(seg_ptr, times, active, 600_000_000, 30_000_000)
    assert len(got) > 100  # both segments, most of their 120 slides


@settings(max_examples=300, deadline=None)
@given(inputs=walk_inputs())
def test_window_bound_is_a_bound(inputs) -> None:
    """The one-pass enumeration writes into arrays of window_bound's size: never fewer than
    the windows there are."""
    from cogra.runtime.compiled.windows.enumeration import window_bound

    seg_ptr, times, active, size, step = inputs
    assert window_bound(seg_ptr, times, size, step) >= len(direct(seg_ptr, times, active, size, step))



@settings(max_examples=300, deadline=None)
@given(inputs=walk_inputs(), cuts=st.lists(st.integers(-12, 12), min_size=1, max_size=4))
def test_block_bound_is_a_bound_from_any_walk_state(inputs, cuts) -> None:
    """bound_windows (which sizes a block's arrays without walking its events) is never
    below the windows a walk from the same state passes, block after block of starts, and
    the walk reports them all as walked (written or not)."""
    from cogra.runtime.compiled.windows import enumeration as wk

    seg_ptr, times, active, size, step = inputs
    state = wk.walk_state(seg_ptr)
    written = []
    for k_to in sorted(cuts) + [wk.LAST_WINDOW]:
        bound = wk.bound_windows(seg_ptr, times, size, step, k_to, state)
        count = wk.count_windows(seg_ptr, times, active, size, step, k_to, state)
        assert bound >= count
        block, walked = wk.write_windows(seg_ptr, times, active, size, step, k_to, state, max(bound, 1))
        assert walked == count == len(block[0])
        written += list(zip(*(a.tolist() for a in block)))
    assert sorted(written) == direct(seg_ptr, times, active, size, step)  # each window once



@st.composite
def pane_walk_inputs(draw):
    """Windows of many panes (the walk by panes): dense and sparse segments, bursts, ties,
    negative times, inactive events."""
    step = draw(st.integers(1, 4))
    span = draw(st.integers(4, 12))
    parts, seg_ptr = [], [0]
    for _ in range(draw(st.integers(1, 4))):
        gaps = draw(st.lists(st.one_of(st.integers(0, 3 * step), st.integers(0, 60 * step)), max_size=30))
        t0 = draw(st.integers(-50, 50))
        ts = list(np.cumsum([t0] + gaps)) if draw(st.booleans()) else []
        parts.append([int(t) for t in ts])
        seg_ptr.append(seg_ptr[-1] + len(ts))
    times = np.array([t for p in parts for t in p], np.int64)
    active = np.array(draw(st.lists(st.booleans(), min_size=len(times), max_size=len(times))), bool)
    return np.array(seg_ptr, np.int64), times, active, span * step, step


@settings(max_examples=300, deadline=None)
@given(inputs=pane_walk_inputs(), cuts=st.lists(st.integers(-30, 150), max_size=4))
def test_walk_by_panes_equals_direct(inputs, cuts) -> None:
    """The walk by panes (windows of at least PANE_WALK_MIN_SPAN panes) writes what the
    direct enumeration does, whole and block after block, and leaves a state the next
    block (by panes or by events, for sparse segments) continues from."""
    from cogra.runtime.compiled.windows import enumeration as wk

    seg_ptr, times, active, size, step = inputs
    want = direct(seg_ptr, times, active, size, step)
    whole = list(zip(*(a.tolist() for a in enumerate_int_windows(seg_ptr, times, active, size, step))))
    assert whole == want
    state = wk.walk_state(seg_ptr)
    written = []
    for k_to in sorted(cuts) + [wk.LAST_WINDOW]:
        bound = wk.bound_windows(seg_ptr, times, size, step, k_to, state)
        block, walked = wk.write_windows(seg_ptr, times, active, size, step, k_to, state, max(bound, 1))
        assert walked == len(block[0])
        written += list(zip(*(a.tolist() for a in block)))
    assert sorted(written) == want


def test_dense_windows_are_walked_by_panes() -> None:
    """A dense stream with long sliding windows is walked by panes (its count scratch is
    filled: the last segment's events per pane) and gives what the walk by events gives
    (no scratch: by events only)."""
    from cogra.runtime.compiled.windows import enumeration as wk

    rng = np.random.default_rng(5)
    times = np.sort(rng.integers(0, 5_000, 3_000)).astype(np.int64)
    seg_ptr, active = np.array([0, 1_000, 3_000], np.int64), rng.random(3_000) < 0.9
    times[:1_000].sort()
    times[1_000:].sort()
    results = []
    for counts in (wk._pane_scratch(10_000, 600, 10), (np.zeros(0, np.int64),) * 2):
        for c in counts:
            c.fill(-1)
        out = tuple(np.empty(10_000, np.int64) for _ in range(4))
        n, walked = wk._walk(seg_ptr, times, active, 600, 10, wk.LAST_WINDOW, True, wk.walk_state(seg_ptr),
                             *out, *wk.NO_ENDS, *counts)
        results.append([a[:n].tolist() for a in out])
        if len(counts[0]):  # the second segment's events and active events, per pane
            assert counts[0][counts[0] >= 0].sum() == 2_000
            assert counts[1][counts[1] >= 0].sum() == active[1_000:].sum()
    assert results[0] == results[1]
    assert list(zip(*results[0])) == direct(seg_ptr, times, active, 600, 10)


def test_sparse_events_in_long_windows_are_counted_first() -> None:
    # Two events far apart, windows of 10^4 steps: a bound of 2 * 10^4 windows -- too many
    # to allocate blindly for two events, so the windows are counted, then written.
    from cogra.runtime.compiled.windows import enumeration

    seg_ptr = np.array([0, 2, 3], np.int64)
    times = np.array([0, 10**9, 5], np.int64)
    active = np.array([True, True, False])
    limit = enumeration.WALK_ONCE_WINDOWS_PER_EVENT * len(times) + 4096
    assert enumeration.window_bound(seg_ptr, times, 10**4, 1) > limit
    got = list(zip(*(a.tolist() for a in enumerate_int_windows(seg_ptr, times, active, 10**4, 1))))
    assert got == direct(seg_ptr, times, active, 10**4, 1)
    assert len(got) == 2 * 10**4


def test_a_few_windows_per_event_are_written_in_one_walk(monkeypatch) -> None:
    """q2's shape (~4 windows per event, a tight bound) walks once, no count; where the
    bound is loose (events in bursts), the windows come back without the bound's slack."""
    from cogra.runtime.compiled.windows import enumeration

    def no_count(*args):
        raise AssertionError("counted first")

    monkeypatch.setattr(enumeration, "count_windows", no_count)
    rng = np.random.default_rng(3)
    n = 3000
    times = np.cumsum(rng.integers(30, 70, n)).astype(np.int64)  # sparse: 4 windows each
    seg_ptr, active = np.array([0, n], np.int64), np.ones(n, bool)
    bound = enumeration.window_bound(seg_ptr, times, 40, 10)
    assert 2 * n + 4096 < bound <= enumeration.WALK_ONCE_WINDOWS_PER_EVENT * n + 4096
    got = enumerate_int_windows(seg_ptr, times, active, 40, 10)
    assert list(zip(*(a.tolist() for a in got))) == direct(seg_ptr, times, active, 40, 10)
    assert all(a.base is not None and a.base.size == bound for a in got)  # views of the bound's arrays

    bursts = np.array([0, 1, 2, 3, 10**6, 10**6 + 1], np.int64)  # by events: 8 windows each, 12 used
    seg_ptr, active = np.array([0, 6], np.int64), np.ones(6, bool)
    assert enumeration.window_bound(seg_ptr, bursts, 8, 1) >= 2 * 12 + 1
    got = enumerate_int_windows(seg_ptr, bursts, active, 8, 1)
    assert list(zip(*(a.tolist() for a in got))) == direct(seg_ptr, bursts, active, 8, 1)
    assert all(a.base is None for a in got)  # copied out of the loose bound's arrays


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_may_finish_equals_a_direct_search(data) -> None:
    """enumeration.may_finish: some event may play a start variable and one at or after
    it a final variable, inside the window."""
    from cogra.runtime.compiled.windows.enumeration import may_finish, trend_ends

    n = data.draw(st.integers(0, 30))
    plays = np.asarray(data.draw(st.lists(st.integers(0, 7), min_size=n, max_size=n)), np.uint64)
    start_bits, final_bits = data.draw(st.integers(1, 7)), data.draw(st.integers(1, 7))
    bounds = [sorted(data.draw(st.tuples(st.integers(0, n), st.integers(0, n)))) for _ in range(data.draw(st.integers(0, 12)))]
    lo = np.asarray([b[0] for b in bounds], np.int64)
    hi = np.asarray([b[1] for b in bounds], np.int64)
    got = may_finish(*trend_ends(plays, np.uint64(start_bits), np.uint64(final_bits)), lo, hi)
    want = [any(int(plays[i]) & start_bits and any(int(plays[j]) & final_bits for j in range(i, b))
                for i in range(a, b)) for a, b in bounds]
    assert got.tolist() == want


def test_kept_windows_keeps_the_marked_windows_in_order() -> None:
    from cogra.runtime.compiled.windows.enumeration import kept_windows

    rng = np.random.default_rng(7)
    seg, start, lo, hi = (rng.integers(-50, 50, 40) for _ in range(4))
    keep = rng.random(40) < 0.4
    got = kept_windows(keep, seg, start, lo, hi)
    for mine, theirs in zip(got, (seg, start, lo, hi)):
        assert mine.tolist() == theirs[keep].tolist()


@settings(max_examples=300, deadline=None)
@given(inputs=walk_inputs(), starts=st.data())
def test_a_filtered_walk_keeps_exactly_the_windows_that_may_finish(inputs, starts) -> None:
    """Windows are filtered as they are written (q2: 1.16M of 2.68M kept) -- the same
    windows as filtering all of them afterwards (may_finish, kept_windows)."""
    from cogra.runtime.compiled.windows.enumeration import kept_windows, may_finish, trend_ends

    seg_ptr, times, active, size, step = inputs
    n = len(times)
    plays = np.array(starts.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.uint64)
    ends = trend_ends(plays, np.uint64(1), np.uint64(2))  # variable 0 starts, 1 finishes
    every = enumerate_int_windows(seg_ptr, times, active, size, step)
    want = kept_windows(may_finish(*ends, every[2], every[3]), *every)
    got = enumerate_int_windows(seg_ptr, times, active, size, step, ends)
    assert [a.tolist() for a in got] == [a.tolist() for a in want]
