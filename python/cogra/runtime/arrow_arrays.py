"""Arrow arrays as numpy sees them: one array per column without a copy, and the large
per-row working arrays allocated from Arrow's memory pool.

``ChunkedArray.combine_chunks()`` copies even a column of a single chunk (pyarrow 26:
3M doubles, ~1.3 ms warm and 20-60 ms where the memory pool must first map the pages), and
a table built from arrays, read from one file or handed over by Spark is mostly one chunk.

The per-row arrays of one evaluation (row positions, play bits, the kernels' attribute
matrices, gathered times: ~100 MB for 3M rows) are allocated, written once and freed
when the call returns.  glibc gives such blocks back to the operating system on free, so
every call pays their page faults again: ~8 ms of a ~40 ms call over 3M events.  Arrow's
pool (mimalloc or jemalloc) keeps freed pages for the next allocation; numpy reads its
buffers without a copy.  Why not a pool of our own: arrays handed to Arrow tables
without a copy (results) must never be written by a later call, and the allocator
already knows which blocks are free.  (The working arrays that blocks of windows reuse
within one call are :mod:`cogra.runtime.compiled.scratch`'s.)
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

POOLED_BYTES = 1 << 20
"""Smaller arrays come from numpy (glibc keeps small freed blocks anyway)."""


def one_array(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """``col`` as one array: its only chunk as it is, or its chunks concatenated."""
    if isinstance(col, pa.ChunkedArray):
        return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    return col


def empty(shape: int | tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """``numpy.empty(shape, dtype)`` (C order, writable), from Arrow's memory pool where
    it is large (see the module docstring)."""
    dtype = np.dtype(dtype)
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    count = math.prod(dims)
    if count * dtype.itemsize < POOLED_BYTES:
        return np.empty(dims, dtype)
    return pooled(count, dtype).reshape(dims)


def pooled(n: int, dtype: np.dtype | type) -> np.ndarray:
    """An uninitialised, writable array of ``n`` values in Arrow's memory pool, whatever
    its size: also a result column's, handed to Arrow without a copy (the sliding
    benchmark's 1.92M result rows are ~75 MB of columns).  (numpy asks for huge pages for
    its own arrays from 4 MB on; asking the same for these made no difference beyond this
    machine's noise, first calls included.)"""
    dtype = np.dtype(dtype)
    return np.frombuffer(pa.allocate_buffer(max(1, n * dtype.itemsize)), dtype, n)


def take(values: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``values[positions]`` into an array of :func:`empty`; ``positions`` are in range
    (numpy buffers ``out`` where it must check them: twice the time)."""
    out = empty(len(positions), values.dtype)
    np.take(values, positions, out=out, mode="clip")
    return out


__all__ = ["empty", "one_array", "pooled", "take"]
