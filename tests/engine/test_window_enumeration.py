"""The compiled window enumeration (window_kernels._walk) against a direct one.

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

from cogra.runtime.fast.window_kernels import enumerate_int_windows


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


@settings(max_examples=300, deadline=None)
@given(data=st.data(), step=st.integers(1, 7), size_steps=st.integers(1, 5), odd=st.integers(0, 6),
       segments=st.integers(1, 4))
def test_compiled_enumeration_equals_direct(data, step, size_steps, odd, segments) -> None:
    size = size_steps * step + (odd if data.draw(st.booleans()) else 0)
    parts, seg_ptr = [], [0]
    for _ in range(segments):
        ts = sorted(data.draw(st.lists(st.integers(-40, 40), max_size=12)))
        parts.append(ts)
        seg_ptr.append(seg_ptr[-1] + len(ts))
    times = np.array([t for p in parts for t in p], np.int64)
    active = np.array(data.draw(st.lists(st.booleans(), min_size=len(times), max_size=len(times))), bool)
    seg_ptr = np.array(seg_ptr, np.int64)
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
