"""Slots that only feed an AVG are kept in doubles alone (``Layout.ratio_only``).

An AVG is a double: the quotient of double approximations of its sum and count is within
~1e-15 of the exact one (docs/language.md, Numbers, asks for 1e-9), so the compiled kernels
keep no modular (uint64) channel for them -- nor for a SUM's count of non-null values
(only ever tested for zero), nor for the trend count when ``COUNT(*)`` is not returned.
Such a slot is exact while its |x|-bound proves the doubles never rounded (counts and
integer sums below 2**53) and approximated above; sums are approximated only over values
that are never negative (so they cannot cancel).  Here: which slots, the layout and live channels (q3's kept variable
carries one channel instead of two), and that every compiled path gives the reference's
results -- and for integer data with small counts, the very same doubles.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest

import cogra
from cogra.examples import Q3
from cogra.reference import evaluate_reference
from cogra.runtime.engine import Engine
from cogra.runtime.compiled.finish import by_column
from cogra.runtime.compiled.windows import sliding
from cogra.runtime.compiled.channels import OP_CNT, OP_NN, OP_SUM_FLOAT
from cogra.runtime.compiled.kernel_driver import KernelDriver
from tests.compare import assert_compiled_equals_reference, assert_same_result


def _table(n: int, *, seed: int = 0, negative: bool = False) -> pa.Table:
    """A and B events at times 0.. in two groups; ``x`` integers, ``f`` floats."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-20 if negative else 0, 50, n)
    f = rng.choice([0.1, 1e6, 2.5, 3.25, 0.0] + ([-7.75] if negative else []), n)
    return pa.table({"type": pa.array(np.where(np.arange(n) % 3 == 2, "B", "A")),
                     "time": pa.array(np.arange(n) // 4, pa.int64()),  # two per group and time
                     "g": pa.array(np.arange(n) % 2, pa.int64()), "x": pa.array(x, pa.int64()),
                     "f": pa.array(f, pa.float64())})


def _fast(query: str, table: pa.Table) -> KernelDriver:
    return KernelDriver(Engine(cogra.plan(query, table.schema), table))


def _roles(fast: KernelDriver, slots) -> set[tuple]:
    layout = fast.engine.layout
    return {(layout.slots[i].role, layout.names[layout.slots[i].states[0]]
             if layout.slots[i].states else None, layout.slots[i].attribute) for i in slots}


def test_which_slots_only_feed_a_ratio() -> None:
    table = _table(12)
    avg = _fast("RETURN g, AVG(B.x), AVG(B.f) PATTERN SEQ(A+, B+) WHERE [g] GROUP-BY g", table)
    assert _roles(avg, avg.engine.layout.ratio_only) == {
        ("count", None, None), ("sum", "B", "x"), ("nn", "B", "x"), ("sum", "B", "f"), ("nn", "B", "f")}
    # COUNT(*) and SUM read their slots exactly; a SUM's non-null count is only tested for zero;
    # AVG of the same attribute shares SUM's (exact) sum slot.
    mixed = _fast("RETURN COUNT(*), SUM(B.x), AVG(B.x), COUNT(A), AVG(B.f) PATTERN SEQ(A+, B+)", table)
    assert _roles(mixed, mixed.engine.layout.ratio_only) == {("nn", "B", "x"), ("sum", "B", "f"), ("nn", "B", "f")}
    kinds = dict(zip([mixed.engine.layout.slots[i].role + str(mixed.engine.layout.slots[i].attribute)
                      for i in range(len(mixed.chan.slot_map))], [e[0] for e in mixed.chan.slot_map]))
    assert kinds["countNone"] == "int" and kinds["sumx"] == "isum" and kinds["cntNone"] == "int"
    assert kinds["nnx"] == kinds["nnf"] == "fcount" and kinds["sumf"] == "fapprox"
    # MIN/MAX only: nothing to approximate but the unreturned trend count.
    extremes = _fast("RETURN MIN(A.x), MAX(A.f) PATTERN A+", table)
    assert _roles(extremes, extremes.engine.layout.ratio_only) == {("count", None, None)}


def test_averages_alone_keep_no_live_modular_channel() -> None:
    table = _table(12)
    fast = _fast("RETURN g, AVG(B.x), AVG(B.f) PATTERN SEQ(A+, B+) WHERE [g] GROUP-BY g", table)
    assert fast.chan.n_i == 1  # the count residue every kernel may compute, read by nothing
    assert (fast._live_channels()[0][:, 0] == 0).all()
    # B: the count, two non-null counts, two double sums (never negative: their own bounds).
    assert fast.chan.n_f == 5
    for var, op, attr, s1, s2, s3 in fast.chan.program.tolist():
        assert s1 == -1 and op in (OP_CNT, OP_NN, OP_SUM_FLOAT)
        if op == OP_SUM_FLOAT:
            assert fast.chan.attributes[attr] in ("x", "f") and s3 == -1
    # A sum over signed values stays exact (a double sum may cancel, and the bound would
    # send such windows to the exact path); its count of non-null values needs no residue.
    signed = _fast("RETURN g, AVG(B.x) PATTERN SEQ(A+, B+) WHERE [g] GROUP-BY g", _table(12, negative=True))
    assert [e[0] for e in signed.chan.slot_map] == ["fcount", "isum", "fcount"]
    assert (signed._live_channels()[0][:, 0] >= 1).all()
    # A COUNT(*) next to them brings the modular count back, live in every variable.
    counted = _fast("RETURN g, COUNT(*), AVG(B.x) PATTERN SEQ(A+, B+) WHERE [g] GROUP-BY g", table)
    live_i = counted._live_channels()[0]
    assert (live_i[:, 0] == 1).all() and (live_i[:, 1] == 0).all()


def test_q3s_kept_variable_carries_one_channel() -> None:
    from cogra import datasets

    table = datasets.by_name("stock", 2000, seed=0)
    fast = _fast(Q3, table)
    a = fast.engine.layout.names.index("A")
    assert fast.var_live_i[a, 0] == 0 and fast.var_live_f[a, 0] == 1
    assert fast.live_i[:, 0].max() == 0 and fast.live_f[:, 0].max() == 1  # the Fenwick nodes over A


AVERAGES = "RETURN g, AVG(A.x), AVG(A.f), MAX(A.x) PATTERN A+ SEMANTICS {semantics} WHERE [g] GROUP-BY g"


# With COUNT(*) the modular count is live next to the doubles-only slots: a kernel that
# wrote a missing modular index (-1: the last channel, here the count) would change it.
COUNTED = [False, True]


@pytest.mark.parametrize("counted", COUNTED)
@pytest.mark.parametrize("negative", [False, True])
@pytest.mark.parametrize("semantics", ["skip-till-any-match", "skip-till-next-match", "contiguous"])
@pytest.mark.parametrize("kernel", ["direct", "sharing", "generated sharing"])
def test_type_grained_kernels_equal_the_reference(monkeypatch, kernel: str, semantics: str, negative: bool,
                                                  counted: bool) -> None:
    monkeypatch.setattr(sliding, "MIN_PANES_PER_WINDOW", 1 if kernel != "direct" else 10**9)
    monkeypatch.setattr(sliding, "MIN_EVENTS_PER_WINDOW", 0)
    monkeypatch.setattr(sliding, "SPECIALIZE_MIN_EVENTS", 0 if kernel == "generated sharing" else 10**12)
    query = AVERAGES.format(semantics=semantics) + " WITHIN 8 seconds SLIDE 2 seconds"
    if counted:
        query = query.replace("RETURN g,", "RETURN g, COUNT(*),")
    got = assert_compiled_equals_reference(query, _table(30, negative=negative, seed=1).drop_columns(["type"]).add_column(
        0, "type", pa.array(["A"] * 30)))
    assert got.num_rows > 0


@pytest.mark.parametrize("counted", COUNTED)
@pytest.mark.parametrize("negative", [False, True])
@pytest.mark.parametrize("kernel", ["per window", "ring", "grouped"])
def test_mixed_grained_kernels_equal_the_reference(monkeypatch, kernel: str, negative: bool, counted: bool) -> None:
    # q3's shape: kept A events (a predicate on adjacent ones), B's averages.
    monkeypatch.setattr(sliding, "MIN_PANES_PER_WINDOW", 1 if kernel != "per window" else 10**9)
    monkeypatch.setattr(sliding, "RING", kernel == "ring")
    query = ("RETURN g, AVG(B.x), AVG(B.f) PATTERN SEQ(A+, B+) WHERE [g] AND A.x > NEXT(A).x "
             "GROUP-BY g WITHIN 6 seconds SLIDE 2 seconds")
    if counted:
        query = query.replace("RETURN g,", "RETURN g, COUNT(*),")
    assert_compiled_equals_reference(query, _table(36, negative=negative, seed=5))


def test_streamed_batches_equal_the_whole_table() -> None:
    query = "RETURN g, AVG(A.x), AVG(A.f) PATTERN A+ WHERE [g] GROUP-BY g WITHIN 4 seconds"
    table = _table(40, seed=7).drop_columns(["type"]).add_column(0, "type", pa.array(["A"] * 40))
    # Later batches need a finer float scale (0.1 after 0.5s): the double sums hold raw values.
    table = table.set_column(4, "f", pa.array([0.5] * 20 + [0.1] * 20, pa.float64()))
    whole = cogra.evaluate(query, table, on_overflow="null")
    streamed = cogra.evaluate_batches(query, table.to_batches(max_chunksize=7), on_overflow="null")
    assert_same_result(streamed, whole, context=query)
    assert_same_result(whole, evaluate_reference(query, table, on_overflow="null"), context=query)


@pytest.mark.parametrize("compiled", [True, False])
def test_integer_averages_below_2_53_are_the_correctly_rounded_quotient(monkeypatch, compiled: bool) -> None:
    # Counts and integer sums below 2**53 are exact in doubles, so the average is the
    # exact quotient rounded once -- the very double the Python path gives (not 1e-15 off),
    # through the compiled finish and through the numpy rules.
    monkeypatch.setattr(by_column, "COMPILED", compiled)
    rng = np.random.default_rng(3)
    n = 40
    x = rng.integers(-10**6, 10**6, n)
    table = pa.table({"type": ["A"] * n, "time": pa.array(np.arange(n), pa.int64()),
                      "x": pa.array(x, pa.int64())})
    query = "RETURN AVG(A.x) PATTERN A+ WITHIN 10 seconds SLIDE 5 seconds"
    engine = Engine(cogra.plan(query, table.schema), table)
    result = engine.result_table(on_overflow="null")
    assert engine.stats["windows_exact"] == 0 and result.num_rows >= n // 5
    # A+ under any over a window's k events: each event is in 2**(k-1) of the trends, so
    # the average is the events' mean.
    for row in result.to_pylist():
        xs = [int(v) for t, v in enumerate(x) if row["window_start"] <= t < row["window_end"]]
        assert row["AVG(A.x)"] == float(Fraction(sum(xs), len(xs)))
