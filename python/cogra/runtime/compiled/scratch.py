"""Working arrays reused block after block of windows, within one evaluation.

A sliding query's windows go through the kernels and the finish in blocks
(:mod:`cogra.runtime.compiled.windows.blockwise`), and each block needs the same working arrays:
the kernel's channels, the decode's slots.  Allocated afresh, they were page faults the
heap did not spare -- the result's own arrays, allocated in between and kept, take its
holes.  A *pool* (a dict the engine keeps for one evaluation) hands out one buffer per
name, grown as needed, so a block's working set is faulted in once.

Its buffers of :data:`HUGE_MIN_BYTES` or more are backed by transparent huge pages where
the OS offers them (:func:`fresh`): a page fault costs ~2 us on this project's VMs, a
2 MB huge page's ~100 us -- a fifth per byte.  A sliding query over 100k events is one
block of ~200k windows, its ~15 MB of working arrays fresh every call: ~3.7k faults, a
quarter of its time.  (numpy asks for huge pages itself from 4 MB on.)

Nothing taken from a pool may outlive the call that took it: a result column must copy
out of it (the next block overwrites it).
"""

from __future__ import annotations

import math
import mmap
from pathlib import Path
from typing import Any

import numpy as np

HUGE_PAGE = 2 << 20
HUGE_MIN_BYTES = 1 << 19
"""Buffers from this size on (:func:`fresh`) are mapped on their own, 2 MB-aligned, with
huge pages asked for (``MADV_HUGEPAGE``); smaller ones come from the heap (``np.empty``).
A huge page's fault costs about fifty small ones': from 512 kB on, one is cheaper than the
faults of the small pages it replaces, spare bytes included."""


def _huge_pages_offered() -> bool:
    """Linux with transparent huge pages not turned off (``always`` or ``madvise``)."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        setting = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False
    return "[never]" not in setting


HUGE_PAGES = _huge_pages_offered()
"""Whether :func:`fresh` maps large buffers with huge pages (tests turn it off and on)."""


def fresh(size: int, dtype: Any) -> np.ndarray:
    """An uninitialised 1-d array: from huge pages where it is large and they are offered.
    Its mapping is 2 MB-aligned and a page longer than needed (the spare parts are never
    touched, so they take no memory), and unmapped with the array's last view."""
    dtype = np.dtype(dtype)
    nbytes = size * dtype.itemsize
    if not HUGE_PAGES or nbytes < HUGE_MIN_BYTES:
        return np.empty(size, dtype)
    length = -(-nbytes // HUGE_PAGE) * HUGE_PAGE + HUGE_PAGE
    try:
        region = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError:  # (out of mappings, say: the heap's, as below the threshold)
        return np.empty(size, dtype)
    try:
        region.madvise(mmap.MADV_HUGEPAGE)
    except OSError:  # (a kernel without THP for anonymous maps: plain pages, as np.empty)
        pass
    raw = np.frombuffer(region, np.uint8)
    skip = (-raw.ctypes.data) % HUGE_PAGE
    return raw[skip:skip + nbytes].view(dtype)


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
        buf = pool[key] = fresh(size, dtype)
    return buf[:size].reshape(shape)


__all__ = ["HUGE_MIN_BYTES", "HUGE_PAGES", "fresh", "take"]
