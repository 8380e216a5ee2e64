"""Working arrays reused block after block of windows, within one evaluation.

A sliding query's windows go through the kernels and the finish in blocks
(:mod:`cogra.runtime.fast.window_blocks`), and each block needs the same working arrays:
the kernel's channels, the decode's slots.  Allocated afresh, they were page faults the
heap did not spare -- the result's own arrays, allocated in between and kept, take its
holes.  A *pool* (a dict the engine keeps for one evaluation) hands out one buffer per
name, grown as needed, so a block's working set is faulted in once.

Nothing taken from a pool may outlive the call that took it: a result column must copy
out of it (the next block overwrites it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def take(pool: dict | None, name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape``: the pool's buffer ``name`` where
    it is large enough (else a larger one, kept for next time); a fresh array without a
    pool."""
    if pool is None:
        return np.empty(shape, dtype)
    size = math.prod(shape)  # (np.prod: ~7 us a call, ten calls a block)
    key = (name, np.dtype(dtype).str)
    buf = pool.get(key)
    if buf is None or buf.size < size:
        buf = pool[key] = np.empty(size, dtype)
    return buf[:size].reshape(shape)


__all__ = ["take"]
