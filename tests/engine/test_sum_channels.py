"""Integer sums over values that are never negative keep no |x|-bound channel.

Such a sum's bound is the same products of the same values as its approximation, bit
for bit, so :func:`channels.channel_layout` names the approximation as the slot's bound
and gives the op the bound index -1, which every kernel skips; a split float sum's low
limb is never negative whatever the data.  :class:`KernelDriver` decides it per table
(none when streaming: later batches are unseen).  Here: the layout, the decision, and
that every compiled path -- direct, sliding sharing (generic and generated), mixed
ring, streamed -- gives the reference's results with the channels dropped and kept.
"""

from __future__ import annotations


import numpy as np
import pyarrow as pa
import pytest

import cogra
from cogra.runtime.engine import Engine
from cogra.runtime.compiled.codegen import kernel_cache
from cogra.runtime.compiled.windows import mixed_one_pass
from cogra.runtime.compiled.windows import mixed_grouped
from cogra.runtime.compiled.windows import sliding
from cogra.runtime.compiled.windows import pane_maps
from cogra.runtime.compiled.channels import OP_SUM_INT, channel_layout
from cogra.runtime.compiled.kernel_driver import KernelDriver
from tests.compare import assert_compiled_equals_reference, assert_same_result

QUERY = ("RETURN g, COUNT(*), SUM(A.x), AVG(A.x), SUM(A.f), AVG(A.f) PATTERN A+ "
         "WHERE [g] GROUP-BY g")


def _table(n: int, *, negative: bool, seed: int = 0) -> pa.Table:
    """Events of A at times 0.. in two groups; ``x`` integers, ``f`` floats wide enough
    to be split into two limbs (1e6 at 2**-k scale); a negative value of each only if
    ``negative``."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 50, n)
    f = rng.choice([0.1, 1e6, 2.5, 3.25, 0.0], n)
    if negative:
        x[n // 2] = -7
        f[n // 3] = -1e6
    return pa.table({"type": ["A"] * n, "time": pa.array(np.arange(n) // 2, pa.int64()),
                     "g": pa.array(np.arange(n) % 2, pa.int64()), "x": pa.array(x, pa.int64()),
                     "f": pa.array(f, pa.float64())})


def _fast(query: str, table: pa.Table, **kw) -> KernelDriver:
    return KernelDriver(Engine(cogra.plan(query, table.schema), table), **kw)


def _sum_entries(fast: KernelDriver) -> dict[str, tuple]:
    """Slot-map entries of the sums by attribute."""
    out = {}
    for slot, entry in zip(fast.engine.layout.slots, fast.chan.slot_map):
        if slot.role == "sum":
            out[slot.attribute] = entry
    return out


def test_never_negative_sums_alias_their_bound_and_drop_the_op_bound() -> None:
    kept = _fast(QUERY, _table(40, negative=True))
    dropped = _fast(QUERY, _table(40, negative=False))
    assert kept.split == dropped.split == frozenset({"f"})
    k, d = _sum_entries(kept), _sum_entries(dropped)
    # x (isum): (kind, i, approx f, bound f) -- distinct with a negative value, one without.
    assert k["x"][0] == d["x"][0] == "isum"
    assert k["x"][2] != k["x"][3] and d["x"][2] == d["x"][3]
    # f (fsplit): the low limb's bound is its approximation either way; the high limb's
    # only without negative values.
    assert k["f"][0] == "fsplit" and k["f"][5] == k["f"][6] and k["f"][2] != k["f"][3]
    assert d["f"][5] == d["f"][6] and d["f"][2] == d["f"][3]
    assert kept.chan.n_f - dropped.chan.n_f == 2
    bounds = {tuple(op[3:]) : op[5] for op in dropped.chan.program.tolist() if op[1] == OP_SUM_INT}
    assert bounds and all(b == -1 for b in bounds.values())
    assert sorted(op[5] for op in kept.chan.program.tolist() if op[1] == OP_SUM_INT).count(-1) == 1


def test_the_decision_reads_the_table_and_never_a_stream() -> None:
    table = _table(20, negative=False)
    engine = Engine(cogra.plan(QUERY, table.schema), table)
    assert KernelDriver._never_negative_sums(engine) == {"x", "f"}
    assert KernelDriver._never_negative_sums(engine, streaming=True) == frozenset()
    # Nulls are skipped, -0.0 is not negative, a column of nulls has nothing negative.
    odd = table.set_column(4, "f", pa.array([None, -0.0] * 10, pa.float64()))
    odd = odd.set_column(3, "x", pa.array([None] * 20, pa.int64()))
    assert KernelDriver._never_negative_sums(Engine(cogra.plan(QUERY, odd.schema), odd)) == {"x", "f"}
    one_negative = table.set_column(3, "x", pa.array([5] * 19 + [-1], pa.int64()))
    assert KernelDriver._never_negative_sums(Engine(cogra.plan(QUERY, table.schema), one_negative)) == {"f"}
    # The layout without the set keeps every bound (what streaming uses, bar the low limb).
    lay = channel_layout(engine.layout, table.schema, frozenset({"f"}))
    assert [op[5] >= 0 for op in lay.program.tolist() if op[1] == OP_SUM_INT] == [True, True, False]


@pytest.mark.parametrize("negative", [False, True])
@pytest.mark.parametrize("semantics", ["skip-till-any-match", "skip-till-next-match", "contiguous"])
def test_direct_kernels_equal_the_reference(semantics: str, negative: bool) -> None:
    query = QUERY.replace("PATTERN A+", f"PATTERN A+ SEMANTICS {semantics}") + " WITHIN 6 seconds SLIDE 3 seconds"
    assert_compiled_equals_reference(query, _table(14, negative=negative))


@pytest.mark.parametrize("negative", [False, True])
@pytest.mark.parametrize("generated", [False, True])
def test_sliding_sharing_kernels_equal_the_reference(monkeypatch, generated: bool, negative: bool) -> None:
    calls = []
    real = pane_maps.run_sliding
    monkeypatch.setattr(sliding, "MIN_PANES_PER_WINDOW", 1)
    monkeypatch.setattr(sliding, "MIN_EVENTS_PER_WINDOW", 0)
    monkeypatch.setattr(sliding, "SPECIALIZE_MIN_EVENTS", 0 if generated else 10**12)
    if generated:
        real_for = kernel_cache.sliding_for

        def counted_for(shape):
            kernel = real_for(shape)
            return lambda *a: (calls.append(1), kernel(*a))[1]

        monkeypatch.setattr(kernel_cache, "sliding_for", counted_for)
    else:
        monkeypatch.setattr(pane_maps, "run_sliding", lambda *a: (calls.append(1), real(*a))[1])
    query = (QUERY.replace("SUM(A.f), ", "") + " WITHIN 8 seconds SLIDE 2 seconds")
    assert_compiled_equals_reference(query, _table(24, negative=negative, seed=3))
    assert calls


@pytest.mark.parametrize("negative", [False, True])
@pytest.mark.parametrize("ring", [True, False])
def test_mixed_grained_sliding_kernels_equal_the_reference(monkeypatch, ring: bool, negative: bool) -> None:
    # A predicate on adjacent events keeps A's events (mixed-grained); its sliding windows
    # take the ring kernel or the grouped one, whose B side sums B.x and B.f.
    query = ("RETURN COUNT(*), SUM(B.x), AVG(B.f) PATTERN SEQ(A+, B+) "
             "WHERE A.x > NEXT(A).x WITHIN 6 seconds SLIDE 2 seconds")
    table = _table(30, negative=negative, seed=5)
    types = np.where(np.arange(30) % 3 == 0, "B", "A")
    module, name = (mixed_one_pass, "run_mixed_ring") if ring else (mixed_grouped, "run_mixed_sliding")
    calls = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a: (calls.append(1), real(*a))[1])
    monkeypatch.setattr(sliding, "MIN_PANES_PER_WINDOW", 1)
    monkeypatch.setattr(sliding, "RING", ring)
    assert_compiled_equals_reference(query, table.set_column(0, "type", pa.array(types)))
    assert calls


HUGE = ("RETURN COUNT(*), AVG(A.x), AVG(A.f) PATTERN A+ SEMANTICS {semantics} "
        "WITHIN 160 seconds SLIDE {slide} seconds")


@pytest.mark.parametrize("negative", [False, True])
@pytest.mark.parametrize("kernel", ["direct", "sharing", "generated sharing"])
def test_huge_counts_read_the_approximations(monkeypatch, kernel: str, negative: bool) -> None:
    # 2**80 trends and more per window: COUNT overflows and the averages come from the
    # float approximations, so a kernel that wrote a dropped bound into another channel
    # (index -1 is the last one) would change them.  The Python executors are the oracle
    # (the reference cannot enumerate them).
    monkeypatch.setattr(sliding, "MIN_PANES_PER_WINDOW", 1 if kernel != "direct" else 10**9)
    monkeypatch.setattr(sliding, "MIN_EVENTS_PER_WINDOW", 0)
    monkeypatch.setattr(sliding, "SPECIALIZE_MIN_EVENTS", 0 if kernel == "generated sharing" else 10**12)
    table = _table(400, negative=negative, seed=11).drop_columns(["g"])
    table = table.set_column(1, "time", pa.array(np.arange(400), pa.int64()))
    for semantics, slide in (("skip-till-any-match", 80), ("skip-till-next-match", 40)):
        query = HUGE.format(semantics=semantics, slide=slide)
        engine = Engine(cogra.plan(query, table.schema), table)
        got = engine.result_table(on_overflow="null")
        want = cogra.evaluate(query, table, compiled=False, on_overflow="null")
        assert_same_result(got, want, context=query)
        assert engine.stats["windows_exact"] == 0
        if semantics == "skip-till-any-match":
            assert got.column("COUNT(*)").null_count == got.num_rows  # 2**80 and more: past int64


@pytest.mark.parametrize("negative", [False, True])
@pytest.mark.parametrize("kernel", ["per window", "ring", "grouped"])
def test_huge_counts_in_the_mixed_grained_kernels(monkeypatch, kernel: str, negative: bool) -> None:
    # As above for kept events: A.x >= NEXT(A).x holds for every pair (x is constant), so
    # A's trends number 2**(As) and B's sums come from their approximations.
    monkeypatch.setattr(sliding, "MIN_PANES_PER_WINDOW", 1 if kernel != "per window" else 10**9)
    monkeypatch.setattr(sliding, "RING", kernel == "ring")
    n = 300
    table = _table(n, negative=negative, seed=13).drop_columns(["g"])
    table = table.set_column(0, "type", pa.array(np.where(np.arange(n) % 3 == 2, "B", "A")))
    table = table.set_column(1, "time", pa.array(np.arange(n), pa.int64()))
    table = table.set_column(2, "x", pa.array(np.full(n, -5 if negative else 5), pa.int64()))
    query = ("RETURN COUNT(*), AVG(B.x), AVG(B.f) PATTERN SEQ(A+, B+) WHERE A.x >= NEXT(A).x "
             "WITHIN 160 seconds SLIDE 80 seconds")
    engine = Engine(cogra.plan(query, table.schema), table)
    got = engine.result_table(on_overflow="null")
    assert_same_result(got, cogra.evaluate(query, table, compiled=False, on_overflow="null"), context=query)
    assert engine.stats["windows_exact"] == 0
    assert got.column("COUNT(*)").null_count >= got.num_rows - 2  # all but the two half-full windows


@pytest.mark.parametrize("negative", [False, True])
def test_streamed_batches_equal_the_whole_table(negative: bool) -> None:
    table = _table(40, negative=negative, seed=7)
    query = QUERY + " WITHIN 4 seconds"
    whole = cogra.evaluate(query, table, on_overflow="null")
    streamed = cogra.evaluate_batches(query, table.to_batches(max_chunksize=7), on_overflow="null")
    assert_same_result(streamed, whole, context=query)
