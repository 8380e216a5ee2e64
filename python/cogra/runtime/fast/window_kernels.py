"""Compiled window enumeration over integer times (two monotone pointers per segment)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _walk(seg_ptr, times, active, size, step, emit, seg_out, start_out, lo_out, hi_out):
    """Counts (``emit`` False) or writes every window; times ascend within a segment.

    An event at ``t`` lies in windows ``k_lo(t) .. t // step``.  ``t // step`` is kept
    with the pane ``[k * step, (k + 1) * step)`` it holds for and recomputed only when an
    event leaves that pane (dense streams divide once per pane, not twice per event);
    when ``step`` divides ``size``, ``k_lo`` follows from it without a division.  The
    count needs no event ranges, so it skips the two range pointers."""
    n = 0
    whole = size % step == 0
    span = size // step
    for s in range(seg_ptr.shape[0] - 1):
        a, b = seg_ptr[s], seg_ptr[s + 1]
        next_k = np.iinfo(np.int64).min
        lo = a
        hi = a
        k_hi = 0
        pane_from = 1
        pane_to = 0  # empty: the first event computes its pane
        for e in range(a, b):
            if not active[e]:
                continue
            t = times[e]
            if t < pane_from or t >= pane_to:
                k_hi = t // step
                pane_from = k_hi * step
                pane_to = pane_from + step
            k_lo = k_hi - span + 1 if whole else (t - size) // step + 1
            k = k_lo if k_lo > next_k else next_k
            if k > k_hi:
                continue
            if not emit:
                n += k_hi - k + 1
                next_k = k_hi + 1
                continue
            while k <= k_hi:
                start = k * step
                while lo < b and times[lo] < start:
                    lo += 1
                if hi < lo:
                    hi = lo
                while hi < b and times[hi] < start + size:
                    hi += 1
                seg_out[n] = s
                start_out[n] = start
                lo_out[n] = lo
                hi_out[n] = hi
                n += 1
                k += 1
            next_k = k_hi + 1
    return n


def enumerate_int_windows(seg_ptr, times, active, size, step):
    empty = np.zeros(0, np.int64)
    n = _walk(seg_ptr, times, active, size, step, False, empty, empty, empty, empty)
    seg, start, lo, hi = (np.empty(n, np.int64) for _ in range(4))
    _walk(seg_ptr, times, active, size, step, True, seg, start, lo, hi)
    return seg, start, lo, hi


@njit(cache=True)
def walk_ordered(seg, key):
    """Segments ascend, and ``key`` (a window's start, or its pane) ascends strictly within
    a segment: the order the window kernels walk (one pass, no temporaries)."""
    for w in range(1, seg.shape[0]):
        if seg[w] < seg[w - 1] or (seg[w] == seg[w - 1] and key[w] <= key[w - 1]):
            return False
    return True


@njit(cache=True)
def may_finish(plays, start_bits, final_bits, lo, hi):
    """Per window ``[lo, hi)``: whether an event in it may play a start variable and an
    event at or after that one a final variable -- a trend's first and last events.  A
    window without both holds no finished trend, so it has no result row under any
    semantics.  One pass over the events each way, then one look-up per window."""
    n = plays.shape[0]
    first_start = np.empty(n + 1, np.int64)  # the first start-capable position >= i
    nxt = n
    first_start[n] = n
    for i in range(n - 1, -1, -1):
        if plays[i] & start_bits:
            nxt = i
        first_start[i] = nxt
    last_final = np.empty(n, np.int64)  # the last final-capable position <= i
    prev = -1
    for i in range(n):
        if plays[i] & final_bits:
            prev = i
        last_final[i] = prev
    keep = np.empty(lo.shape[0], np.bool_)
    for w in range(lo.shape[0]):
        keep[w] = hi[w] > lo[w] and first_start[lo[w]] <= last_final[hi[w] - 1]
    return keep


@njit(cache=True)
def kept_windows(keep, seg, start, lo, hi):
    """``(seg, start, lo, hi)`` of the windows ``keep`` marks, in order: one pass for the
    four arrays (numpy's boolean indexing took ~4x as long, one array at a time)."""
    n = 0
    for w in range(keep.shape[0]):
        n += keep[w]
    out = (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64))
    j = 0
    for w in range(keep.shape[0]):
        if keep[w]:
            out[0][j] = seg[w]
            out[1][j] = start[w]
            out[2][j] = lo[w]
            out[3][j] = hi[w]
            j += 1
    return out
