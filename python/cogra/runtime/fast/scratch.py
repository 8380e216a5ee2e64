"""Working arrays reused block after block of windows, within one evaluation.

A sliding query's windows go through the kernels and the finish in blocks
(:mod:`cogra.runtime.fast.window_blocks`), and each block needs the same working arrays:
the kernel's channels, the decode's slots.  Allocated afresh, they were page faults the
heap did not spare -- the result's own arrays, allocated in between and kept, take its
holes.  A *pool* (a dict the engine keeps for one evaluation) hands out one buffer per
name, grown as needed, so a block's working set is faulted in once.

Nothing taken from a pool may outlive the call that took it: a result column must copy
out of it (the next block overwrites it).

The buffers come from Arrow's memory pool (mimalloc or jemalloc), as the result columns
do (:func:`finish.arrow_backed`): it keeps freed memory for the next allocation, where the
C heap hands large freed blocks back to the OS (``malloc_trim``, or glibc's mmapped
blocks) and the next evaluation faults them in again, page by page.  A sliding query of
100k events at 10/s (one block of 199k windows) took 36 -> 28 ms evaluation after
evaluation (page faults 7.9k -> 3.7k); with 1M events the pool's buffers serve 15 blocks,
and the difference is lost in the noise.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa


def take(pool: dict | None, name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape``: the pool's buffer ``name`` where
    it is large enough (else a larger one, kept for next time); a fresh array without a
    pool."""
    size = math.prod(shape)  # (np.prod: ~7 us a call, ten calls a block)
    if pool is None:
        return _fresh(size, dtype).reshape(shape)
    key = (name, np.dtype(dtype).str)
    buf = pool.get(key)
    if buf is None or buf.size < size:
        buf = pool[key] = _fresh(size, dtype)
    return buf[:size].reshape(shape)


def _fresh(size: int, dtype: Any) -> np.ndarray:
    """An uninitialised array of ``size`` values in Arrow's memory pool."""
    dtype = np.dtype(dtype)
    return np.frombuffer(pa.allocate_buffer(max(1, size * dtype.itemsize)), dtype, size)


__all__ = ["take"]
