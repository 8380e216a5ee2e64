"""Compiled window enumeration over integer times (two monotone pointers per segment)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _walk(seg_ptr, times, active, size, step, emit, seg_out, start_out, lo_out, hi_out):
    n = 0
    for s in range(seg_ptr.shape[0] - 1):
        a, b = seg_ptr[s], seg_ptr[s + 1]
        next_k = np.iinfo(np.int64).min
        lo = a
        hi = a
        for e in range(a, b):
            if not active[e]:
                continue
            t = times[e]
            k_lo = (t - size) // step + 1
            k_hi = t // step
            k = k_lo if k_lo > next_k else next_k
            while k <= k_hi:
                start = k * step
                while lo < b and times[lo] < start:
                    lo += 1
                if hi < lo:
                    hi = lo
                while hi < b and times[hi] < start + size:
                    hi += 1
                if emit:
                    seg_out[n] = s
                    start_out[n] = start
                    lo_out[n] = lo
                    hi_out[n] = hi
                n += 1
                k += 1
            if k_hi + 1 > next_k:
                next_k = k_hi + 1
    return n


def enumerate_int_windows(seg_ptr, times, active, size, step):
    empty = np.zeros(0, np.int64)
    n = _walk(seg_ptr, times, active, size, step, False, empty, empty, empty, empty)
    seg, start, lo, hi = (np.empty(n, np.int64) for _ in range(4))
    _walk(seg_ptr, times, active, size, step, True, seg, start, lo, hi)
    return seg, start, lo, hi
