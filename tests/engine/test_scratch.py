"""The evaluation's pool of working arrays (cogra.runtime.fast.scratch)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

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


def test_buffers_come_from_arrows_memory_pool() -> None:
    # Kept by Arrow's allocator for the next evaluation, where the C heap would hand them
    # back to the OS (scratch's docstring).
    before = pa.total_allocated_bytes()
    held = [scratch.take({}, "x", (1 << 20,), np.float64), scratch.take(None, "y", (1 << 20,), np.int32)]
    assert pa.total_allocated_bytes() - before >= (8 + 4) << 20
    held[0][:] = 1.5
    held[1][:] = -3
    assert held[0].sum() == 1.5 * (1 << 20) and held[1].min() == -3
    assert scratch.take(None, "z", (0,), np.int8).shape == (0,)
