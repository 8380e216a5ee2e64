"""Enumerate and evaluate many windows in blocks of consecutive start times.

A sliding query has ``WITHIN / SLIDE`` windows per sub-stream and instant (1.9M for
the stock benchmark's ``WITHIN 10 minutes SLIDE 1 second`` over 1M events).  Evaluated
at once, every per-window array -- the window ranges (32 bytes a window), the kernel's
channels (~70), the output keys, the decoded slots -- is a fresh allocation of tens or
hundreds of MB that the kernel clears page by page (glibc maps blocks that large anew on
every call).  In blocks of :data:`BLOCK_WINDOWS` windows each block's arrays are small
enough for the heap to reuse from block to block: the benchmark query's peak memory fell
from 515-608 MB to 288-377 MB when the kernels and the finish went by blocks (eleventh
session), and the window ranges themselves are enumerated block by block too
(:func:`blocks`: one resumable walk over the events, :func:`enumeration._walk`), so
that the full window arrays, their copies per block and the check of their order
(~25 ms and ~120 MB for 1.9M windows) are gone as well.

Blocks split the windows by *start time*, not by segment: the result is ordered by
(window start, group), so the blocks' tables follow each other in output order and no
merge is needed.  A block holds, for every segment, the run of its windows that start
in the block's range -- by segment with ascending starts, the order both window kernels
walk.  The sliding kernel restarts its stacks at each segment's first window of a block
(one window's panes, re-read once per block and segment).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from cogra.runtime.compiled.windows import enumeration

BLOCK_WINDOWS = 1 << 17
"""Windows per block, about: the kernel's channels of one block are ~9 MB for the
benchmark's query (below glibc's largest mmap threshold, so the heap reuses them)."""
MIN_BLOCKS = 4
"""Fewer windows than this many blocks' worth stay one block: a block costs ~1.5 ms of
numpy and Arrow overhead in the finish, and the sliding kernel re-reads a window's panes
per segment and block (q2's 8 Spark partitions of ~400k windows each took 0.206 -> 0.232
s in blocks, as a reused worker's heap clears no pages anyway); below ~50 MB of kernel
channels there is little memory to save."""

LARGE = 1 << 62
"""Beyond any time (``np.min``'s initial value over no active event)."""


def too_few(seg_ptr: np.ndarray, times: np.ndarray, size: int, step: int) -> bool:
    """Whether a bound of the windows, without walking the events, is below
    :data:`MIN_BLOCKS` blocks' worth: a segment's windows lie between its first event's
    first window and its last event's last one (a tumbling query skips the count)."""
    seg_ptr = np.asarray(seg_ptr, np.int64)
    filled = seg_ptr[1:] > seg_ptr[:-1]
    first = times[seg_ptr[:-1][filled]]
    last = times[seg_ptr[1:][filled] - 1]
    bound = int(np.sum(last // step - (first - size) // step))
    return bound < MIN_BLOCKS * BLOCK_WINDOWS


def blocks(seg_ptr: np.ndarray, times: np.ndarray, active: np.ndarray, size: int, step: int,
           ends: tuple[np.ndarray, np.ndarray] | None = None, pool: dict | None = None,
           ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None:
    """The windows of :func:`enumeration.enumerate_int_windows` as blocks ``(seg,
    start, lo, hi)`` whose starts lie in consecutive ranges, in that order, each in walk
    order; None when there are fewer than :data:`MIN_BLOCKS` blocks' worth.  ``ends``
    (:func:`enumeration.trend_ends`): only the windows that may finish are written
    (blocks are sized by all windows; a block left without any is not yielded).
    ``pool``: the blocks' arrays are working arrays, overwritten by the next block
    (:mod:`cogra.runtime.compiled.scratch`; fresh arrays were ~1k page faults per 1M events of
    the sliding benchmark, ~2 ms).

    A block spans ``width`` window indices ``k``, first the whole span's average for a
    block of :data:`BLOCK_WINDOWS`, then scaled by the last block's count of windows
    walked (bursts and gaps); a block bounded and counted at more than twice that is
    halved before it is written."""
    seg_ptr = np.asarray(seg_ptr, np.int64)
    times = np.asarray(times, np.int64)
    state = enumeration.walk_state(seg_ptr)
    total = _windows_about(seg_ptr, times, active, size, step, state, MIN_BLOCKS * BLOCK_WINDOWS)
    if total < MIN_BLOCKS * BLOCK_WINDOWS:
        return None
    first_k = (int(np.min(times, where=active, initial=LARGE)) - size) // step + 1
    last_k = int(np.max(times, where=active, initial=-LARGE)) // step
    width = max(1, (last_k - first_k + 1) * BLOCK_WINDOWS // total)

    def walk() -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        nonlocal width
        k_from = first_k
        while k_from <= last_k:
            # A bound sizes the block's arrays (O(segments)); only a bound past two blocks'
            # worth is checked by a count, which walks the events (a second pass over
            # them: ~7 of ~40 ms of the sliding benchmark's enumeration).
            n = enumeration.bound_windows(seg_ptr, times, size, step, k_from + width, state)
            if n > 2 * BLOCK_WINDOWS:
                n = enumeration.count_windows(seg_ptr, times, active, size, step, k_from + width, state)
                while n > 2 * BLOCK_WINDOWS and width > 1:
                    width //= 2
                    n = enumeration.count_windows(seg_ptr, times, active, size, step, k_from + width, state)
            k_to = k_from + width
            walked = 0
            if n:
                block, walked = enumeration.write_windows(seg_ptr, times, active, size, step, k_to, state, n, ends,
                                                          pool)
                if len(block[0]):
                    yield block
            k_from = k_to
            width = max(1, min(4 * width, width * BLOCK_WINDOWS // max(walked, 1)))

    return walk()


COUNT_CHUNKS = 8
""":func:`_windows_about` counts the segments' windows in this many chunks of segments."""


def _windows_about(seg_ptr: np.ndarray, times: np.ndarray, active: np.ndarray, size: int, step: int,
                   state: np.ndarray, enough: int) -> int:
    """The windows of every segment, counted exactly where fewer than ``enough``; else
    about as many -- counted over the first chunks of segments until ``enough`` are, then
    extrapolated by the events those chunks hold.  The count is a walk over the events
    (~6 ms per 1M events): where only the number's order matters (whether to go by blocks;
    the first block's width, which later blocks correct by their own counts) it stops
    early, ~2/3 of it for the sliding benchmark."""
    n_seg = len(seg_ptr) - 1
    chunk = max(1, -(-n_seg // COUNT_CHUNKS))
    counted = 0
    for a in range(0, n_seg, chunk):
        b = min(n_seg, a + chunk)
        counted += enumeration.count_windows(seg_ptr[a:b + 1], times, active, size, step,
                                             enumeration.LAST_WINDOW, state[a:b])
        if counted >= enough and b < n_seg:
            events = int(seg_ptr[b] - seg_ptr[0])
            return counted * int(seg_ptr[-1] - seg_ptr[0]) // max(1, events)
    return counted


__all__ = ["BLOCK_WINDOWS", "MIN_BLOCKS", "blocks", "too_few"]
