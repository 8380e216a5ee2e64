"""The evaluation's pool of working arrays (cogra.runtime.compiled.scratch)."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from cogra.runtime.compiled import scratch


def test_a_pool_reuses_its_buffer_per_name_and_grows_it() -> None:
    pool: dict = {}
    a = scratch.take(pool, "a", (4, 5), np.int64)
    assert a.shape == (4, 5) and a.dtype == np.int64 and a.flags.c_contiguous and a.flags.writeable
    a[:] = 7
    smaller = scratch.take(pool, "a", (3,), np.int64)
    assert np.shares_memory(a, smaller) and (smaller == 7).all()
    assert not np.shares_memory(a, scratch.take(pool, "a", (3,), np.float64))  # by name and dtype
    assert not np.shares_memory(a, scratch.take(pool, "b", (3,), np.int64))
    larger = scratch.take(pool, "a", (50,), np.int64)
    assert not np.shares_memory(a, larger) and np.shares_memory(larger, scratch.take(pool, "a", (40,), np.int64))
    fresh = scratch.take(None, "a", (6,), np.int64)  # without a pool: a fresh array each time
    assert fresh.shape == (6,) and not np.shares_memory(fresh, scratch.take(None, "a", (6,), np.int64))


@pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="no transparent huge pages here (not Linux)")
def test_large_buffers_are_aligned_to_huge_pages_and_live_as_long_as_a_view(monkeypatch) -> None:
    # From HUGE_MIN_BYTES on, a buffer is mapped on its own, 2 MB-aligned (a huge page can
    # back it only so), and stays valid as long as a view of it does.
    import gc

    monkeypatch.setattr(scratch, "HUGE_PAGES", True)
    n = scratch.HUGE_MIN_BYTES // 8 + 3
    a = scratch.fresh(n, np.int64)
    assert a.shape == (n,) and a.dtype == np.int64 and a.flags.writeable and a.flags.c_contiguous
    assert a.ctypes.data % scratch.HUGE_PAGE == 0
    tail = a[-5:]
    del a
    gc.collect()
    tail[:] = np.arange(5)  # the mapping lives on with its last view
    assert tail.tolist() == [0, 1, 2, 3, 4]
    small = scratch.fresh(100, np.float64)  # below the threshold: the heap's
    assert small.base is None and small.shape == (100,)
    pool: dict = {}
    big = scratch.take(pool, "big", (4, n), np.int32)
    assert big.shape == (4, n) and big.ctypes.data % scratch.HUGE_PAGE == 0
    assert np.shares_memory(big, scratch.take(pool, "big", (n,), np.int32))


def test_without_huge_pages_buffers_come_from_the_heap(monkeypatch) -> None:
    monkeypatch.setattr(scratch, "HUGE_PAGES", False)
    a = scratch.fresh(scratch.HUGE_MIN_BYTES, np.int64)
    assert a.base is None and a.shape == (scratch.HUGE_MIN_BYTES,)


def test_a_failed_mapping_falls_back_to_the_heap(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(scratch, "HUGE_PAGES", True)
    monkeypatch.setattr(scratch.mmap, "mmap", refuse)
    a = scratch.fresh(scratch.HUGE_MIN_BYTES, np.int64)
    assert a.base is None and a.shape == (scratch.HUGE_MIN_BYTES,)
