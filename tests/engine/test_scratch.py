"""The evaluation's pool of working arrays (cogra.runtime.fast.scratch)."""

from __future__ import annotations

import numpy as np

from cogra.runtime.fast import scratch


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
