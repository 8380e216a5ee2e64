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
