"""Evaluate many windows in blocks of consecutive start times.

A sliding query has ``WITHIN / SLIDE`` windows per sub-stream and instant (1.9M for
the stock benchmark's ``WITHIN 10 minutes SLIDE 1 second`` over 1M events).  Evaluated
at once, every per-window array -- the kernel's channels (~90 bytes a window), the
output keys, the decoded slots -- is a fresh allocation of tens or hundreds of MB that
the kernel clears page by page (glibc maps blocks that large anew on every call).  In
blocks of :data:`BLOCK_WINDOWS` windows each block's arrays are small enough for the
heap to reuse from block to block: the benchmark query's peak memory fell from
515-608 MB to 288-377 MB, and the system time of its page faults from 0.06-0.9 s per
run to 0.04-0.15 s.  Its time moved within the machine's noise: in the benchmark's
harness (a fresh process, nine runs) 0.67-0.71 s against 0.68-0.73 s in one block, in a
process that returns its free memory before each call 0.65 s against 0.80-0.93 s; the
blocks' own cost -- cutting and copying the window ranges, a fresh start of the
sharing kernel's stacks per segment and block, the finish's per-call overhead -- is
~0.03 s of user time for 1.9M windows.

Blocks split the windows by *start time*, not by segment: the result is ordered by
(window start, group), so the blocks' tables follow each other in output order and no
merge is needed.  A block holds, for every segment, the run of its windows that start
in the block's range -- still by segment with ascending starts, the order both window
kernels walk.  The sliding kernel restarts its stacks at each segment's first window
of a block (one window's panes, re-read once per block and segment).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from numba import njit

from cogra.runtime.fast.window_kernels import walk_ordered

BLOCK_WINDOWS = 1 << 17
"""Windows per block, about: the kernel's channels of one block are ~12 MB for the
benchmark's query (below glibc's largest mmap threshold, so the heap reuses them)."""
MIN_BLOCKS = 4
"""Fewer windows than this many blocks' worth stay one block: splitting copies each
window's range (~5 ns a window; q2's 8 Spark partitions of ~400k windows each took 0.206
-> 0.232 s in blocks, as a reused worker's heap clears no pages anyway), and below ~50 MB
of kernel channels there is little memory to save."""
QUANTILE_SAMPLE = 1 << 16
"""Starts sampled for the block boundaries (a full partition of 2M starts took 14 ms)."""


def by_start(wins: Any) -> Iterator[Any]:
    """``wins`` (an ``engine.Windows`` with integral starts) as blocks of windows whose
    starts lie in consecutive ranges, in that order; ``wins`` itself when it is small
    (:data:`MIN_BLOCKS`), not by segment with ascending starts, or all its windows start
    together."""
    n = len(wins.seg)
    if wins.start is None or n < MIN_BLOCKS * BLOCK_WINDOWS:
        yield wins
        return
    seg = np.asarray(wins.seg, np.int64)
    start = np.asarray(wins.start, np.int64)
    lo = np.asarray(wins.lo, np.int64)
    hi = np.asarray(wins.hi, np.int64)
    # The block boundaries: start values at the quantiles of a sample (a start shared by
    # more windows than a block stays in one block).
    blocks = -(-n // BLOCK_WINDOWS)
    sample = start[::max(1, n // QUANTILE_SAMPLE)]
    kth = np.arange(1, blocks, dtype=np.int64) * len(sample) // blocks
    bounds = np.unique(np.partition(sample, kth)[kth])
    if not walk_ordered(seg, start):  # a block would not be in the order the kernels walk
        yield wins
        return
    cuts = _block_cuts(seg, start, bounds)
    sizes = (cuts[:, 1:] - cuts[:, :-1]).sum(axis=0)
    if np.count_nonzero(sizes) <= 1:  # one block anyway
        yield wins
        return
    for b, size in enumerate(sizes.tolist()):
        if size:
            part = [np.empty(size, np.int64) for _ in range(4)]
            _take_block(cuts, b, seg, start, lo, hi, *part)
            yield type(wins)(part[0], part[2], part[3], start=part[1], size=wins.size)


@njit(cache=True)
def _block_cuts(seg, start, bounds):
    """Per run of one segment's windows ``r`` and block ``b``, where the run's windows of
    block ``b`` begin (``cuts[r, b]``; ``cuts[r, nb]`` is the run's end): block ``b`` holds
    the starts in ``[bounds[b-1], bounds[b])``, open at either end.  The windows are in
    walk order (:func:`window_kernels.walk_ordered`)."""
    n = seg.shape[0]
    nb = bounds.shape[0] + 1
    runs = 1
    for w in range(1, n):
        runs += seg[w] != seg[w - 1]
    cuts = np.empty((runs, nb + 1), np.int64)
    r = -1
    b = 0
    for w in range(n):
        if w == 0 or seg[w] != seg[w - 1]:
            if r >= 0:
                while b < nb:
                    b += 1
                    cuts[r, b] = w
            r += 1
            b = 0
            cuts[r, 0] = w
        while b < nb - 1 and start[w] >= bounds[b]:
            b += 1
            cuts[r, b] = w
    while b < nb:
        b += 1
        cuts[r, b] = n
    return cuts


@njit(cache=True)
def _take_block(cuts, b, seg, start, lo, hi, seg_out, start_out, lo_out, hi_out):
    """Block ``b``'s windows, run after run (slices: sequential copies)."""
    j = 0
    for r in range(cuts.shape[0]):
        for w in range(cuts[r, b], cuts[r, b + 1]):
            seg_out[j] = seg[w]
            start_out[j] = start[w]
            lo_out[j] = lo[w]
            hi_out[j] = hi[w]
            j += 1


__all__ = ["BLOCK_WINDOWS", "MIN_BLOCKS", "by_start"]
