"""A kept variable's totals shared between the sub-streams that hold its events
(compiled/kept_totals.py).

In q3 the sub-streams (a, a), (a, b) of a sector hold the same events for A, whose kept
states cost the Fenwick-tree work.  With tumbling windows (or none) they are computed once
per group, on a representative whose events play A only, and every sub-stream loads A's
totals per batch -- with the generic mixed kernel, or the type-grained kernel generated
for the query's shape.  Results must equal every sub-stream computing its own (the
mixed kernel as before) and the exact Python executor, which the property tests tie to
the two-step reference: across rescaled windows (counts beyond 2**600), values of any
sign, ties in time between the sub-stream's variables, keyless and keyed variables.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cogra
from cogra.datasets import stock
from cogra.examples import Q3
from cogra.runtime.compiled.codegen import kernel_cache
from cogra.runtime.compiled.aggregators import mixed_grained
from cogra.runtime.compiled.windows import mixed_one_pass
from cogra.runtime.compiled.sharing import kept_totals
from tests.compare import assert_same_result
from tests.engine.test_sliding import forced

OPS = ["<", "<=", ">", ">=", "=", "<>"]
CROSSINGS = ["A.v {op} NEXT(A).v", "(A.v {op} NEXT(A).v OR NEXT(A).v > 1)", "NOT (A.v {op} NEXT(A).v)",
             "(A.v {op} NEXT(A).v AND NEXT(A).w >= 1)"]
"""Predicates that read the earlier A around one comparison: per event the comparison,
its complement, every earlier A, or none (compiled/crossing_predicates.py)."""


@contextlib.contextmanager
def watched():
    """Yields a dict counting the runs: ``shared`` (kept_totals.run_raw returned a result),
    ``generated`` (its loading run used the generated kernel), ``ring`` (kept_totals.run_ring
    returned a result), ``ring_generated`` (a ring loading run called the generated one,
    pane_loading), ``ring_generic`` (the generic ring kernel ran a loading run: the
    generated one was not used or handed it back), ``saving_generated`` and
    ``saving_generic`` (the same for the ring's representatives' runs)."""
    seen = {"shared": 0, "generated": 0, "ring": 0, "ring_generated": 0, "ring_generic": 0,
            "saving_generated": 0, "saving_generic": 0}
    real_run, real_ring, real_loading = kept_totals.run_raw, kept_totals.run_ring, kernel_cache.kernel_loading_for
    real_ring_loading, real_mixed_ring = kernel_cache.ring_loading_for, mixed_one_pass.run_mixed_ring
    real_ring_saving = kernel_cache.ring_saving_for

    def run(*args):
        out = real_run(*args)
        seen["shared"] += out is not None
        return out

    def ring(*args):
        out = real_ring(*args)
        seen["ring"] += out is not None
        return out

    def counting(factory, key):
        def kernel_for(shape):
            kernel = factory(shape)

            def counted(*args):
                seen[key] += 1
                return kernel(*args)
            return counted
        return kernel_for

    def mixed(*args):
        share_mode = args[-1][1]  # (the share tuple's: var, mode, ...)
        seen["ring_generic"] += share_mode == mixed_grained.SHARE_TAKE
        seen["saving_generic"] += share_mode == mixed_grained.SHARE_SAVE
        return real_mixed_ring(*args)

    kept_totals.run_raw, kept_totals.run_ring = run, ring
    kernel_cache.kernel_loading_for = counting(real_loading, "generated")
    kernel_cache.ring_loading_for = counting(real_ring_loading, "ring_generated")
    kernel_cache.ring_saving_for = counting(real_ring_saving, "saving_generated")
    mixed_one_pass.run_mixed_ring = mixed
    try:
        yield seen
    finally:
        kept_totals.run_raw, kept_totals.run_ring, kernel_cache.kernel_loading_for = real_run, real_ring, real_loading
        kernel_cache.ring_loading_for, mixed_one_pass.run_mixed_ring = real_ring_loading, real_mixed_ring
        kernel_cache.ring_saving_for = real_ring_saving


def evaluate(query: str, table: pa.Table, *, compiled: bool = True, share: bool = True) -> pa.Table:
    old = kept_totals.ENABLED
    kept_totals.ENABLED = share
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cogra.CograDataWarning)
            return cogra.evaluate(query, table, compiled=compiled, on_overflow="null")
    finally:
        kept_totals.ENABLED = old


def shared_equals_unshared_and_exact(query: str, table: pa.Table, exact: bool = True) -> dict:
    with watched() as seen:
        got = evaluate(query, table)
    assert_same_result(got, evaluate(query, table, share=False), context=f"(unshared)\n{query}")
    if exact:
        assert_same_result(got, evaluate(query, table, compiled=False), context=f"(exact)\n{query}")
    return seen


def keyed_stream(seed: int, n: int, distinct: int, n_keys: int = 3, n_groups: int = 2) -> pa.Table:
    """Types A, B and the irrelevant X, ties in time, a variable key ``k`` and a plain key
    ``g``; ``v`` integers of both signs, ``w`` halves."""
    rng = np.random.default_rng(seed)
    return pa.table({
        "type": pa.array(rng.choice(["A", "B", "X"], n, p=[0.5, 0.4, 0.1])),
        "time": pa.array(np.sort(rng.integers(-n // 4, max(2, n // 2), n))),
        "k": pa.array(rng.integers(0, n_keys, n)),
        "g": pa.array(rng.integers(0, n_groups, n)),
        "v": pa.array(rng.integers(-distinct, distinct + 1, n)),
        "w": pa.array(rng.integers(0, distinct, n) * 0.5),
    })


def sliding_stream(seed: int, n: int, distinct: int, times: str) -> pa.Table:
    """:func:`keyed_stream` with its times ``"dense"``, with ``"gaps"`` longer than a
    window (the ring empties between a total's save and its load) or ``"negative"`` (panes
    below zero: ring slots by floor modulo)."""
    table = keyed_stream(seed, n, distinct)
    if times == "gaps":
        steps = np.random.default_rng(seed).choice([0, 1, 60], n, p=[0.3, 0.6, 0.1])
        table = table.set_column(1, "time", pa.array(np.cumsum(steps)))
    elif times == "negative":
        table = table.set_column(1, "time", pa.array(table.column("time").to_numpy() - 1000))
    return table


def test_q3_tumbling_shares_and_equals_exact() -> None:
    query = Q3.replace(" SLIDE 10 seconds", "")
    seen = shared_equals_unshared_and_exact(query, stock(3000, rate=2.0))
    assert seen["shared"] == 1


@pytest.mark.parametrize("query", [
    Q3.replace(" SLIDE 10 seconds", ""),
    # keyless kept variable (every sub-stream of a sector holds all of its A events),
    # MIN/MAX and sums over both variables, a selective predicate on B alone
    "RETURN g, B.k, COUNT(*), SUM(B.v), MIN(A.w), MAX(B.w), AVG(A.v) PATTERN SEQ(A+, B+) "
    "WHERE [B.k] AND A.v <= NEXT(A).v AND B.w > 1 GROUP-BY g, B.k WITHIN 20 seconds",
])
def test_generated_loading_kernel(query, generated_kernels) -> None:
    table = stock(3000, rate=2.0) if "Stock" in query else keyed_stream(7, 3000, 40)
    seen = shared_equals_unshared_and_exact(query, table)
    assert seen["shared"] == 1 and seen["generated"] == 1


def test_rescaled_windows_share_exactly(generated_kernels, monkeypatch) -> None:
    # ~1000 A events per group in one window: counts pass 2**600, the representative's
    # floats are rescaled, and the loading run (whose own bound differs) must bring them
    # to one exponent with its own.
    n = 4000
    rng = np.random.default_rng(3)
    table = pa.table({
        "type": pa.array(np.where(np.arange(n) % 2 == 0, "A", "B")),
        "time": pa.array(np.arange(n) // 3),
        "k": pa.array(rng.integers(0, 2, n)),
        "v": pa.array(rng.integers(-5, 6, n)),
    })
    caches = []
    real = kept_totals.Share.cache.__func__

    def recorded(cls, *args, **kwargs):
        caches.append(real(cls, *args, **kwargs))
        return caches[-1]

    monkeypatch.setattr(kept_totals.Share, "cache", classmethod(recorded))
    query = ("RETURN A.k, B.k, COUNT(*), AVG(B.v), SUM(A.v) PATTERN SEQ(A+, B+) "
             "WHERE [A.k] AND [B.k] AND A.v <> NEXT(A).v GROUP-BY A.k, B.k")
    seen = shared_equals_unshared_and_exact(query, table)
    assert seen["shared"] == 1 and seen["generated"] == 1
    assert caches[0].ce.max() >= 600


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    op=st.sampled_from(OPS),
    pattern=st.sampled_from(["SEQ(A+, B+)", "SEQ(A+, B)", "SEQ(A+, X, B+)"]),
    keys=st.sampled_from(["[A.k] AND [B.k]", "[B.k]", "[A.k]"]),
    window=st.sampled_from(["", " WITHIN 7 seconds", " WITHIN 2 seconds"]),
    n=st.integers(1, 200),
    distinct=st.sampled_from([2, 30]),
    crossing=st.sampled_from(CROSSINGS),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_queries_share_exactly(op, pattern, keys, window, n, distinct, crossing, seed) -> None:
    # The generic mixed kernel loading the totals (small inputs: no generated kernel).
    table = keyed_stream(seed, n, distinct)
    group = ", ".join(k.strip("[]") for k in keys.split(" AND "))
    query = (f"RETURN g, {group}, COUNT(*), SUM(B.v), MIN(A.w), AVG(A.v), MAX(B.w) PATTERN {pattern} "
             f"WHERE {keys} AND {crossing.format(op=op)} GROUP-BY g, {group}{window}")
    shared_equals_unshared_and_exact(query, table)


@pytest.mark.parametrize("query", [
    # B reads an earlier event: B is kept too
    "RETURN A.k, B.k, COUNT(*) PATTERN SEQ(A+, B+) WHERE [A.k] AND [B.k] AND B.v < NEXT(B).v GROUP-BY A.k, B.k",
    # sliding windows below the ring kernel's panes: an event's state differs per window
    "RETURN A.k, B.k, COUNT(*) PATTERN SEQ(A+, B+) WHERE [A.k] AND [B.k] AND A.v < NEXT(A).v "
    "GROUP-BY A.k, B.k WITHIN 10 seconds SLIDE 2 seconds",
    # one sub-stream per A key: nothing to share
    "RETURN A.k, COUNT(*) PATTERN SEQ(A+, B+) WHERE [A.k] AND A.v < NEXT(A).v GROUP-BY A.k",
])
def test_sharing_stays_off_where_it_does_not_apply(query) -> None:
    seen = shared_equals_unshared_and_exact(query, keyed_stream(5, 120, 10))
    assert seen["shared"] == 0 and seen["ring"] == 0


def test_save_and_load_helpers_round_trip() -> None:
    # The cache holds a variable's live channels only; loading scales floats by a power
    # of two and leaves the other channels of the total alone.
    si = np.zeros((2, 3), np.uint64)
    sf = np.zeros((2, 4), np.float64)
    sx = np.zeros((2, 1), np.int64)
    sr = np.zeros(2, np.bool_)
    si[1] = [5, 6, 7]
    sf[1] = [1.5, -2.0, 3.0, 8.0]
    sx[1] = [42]
    sr[1] = True
    li, lf, lx = np.array([2, 0, 2]), np.array([2, 1, 3]), np.array([1, 0])
    ci, cf, cx = np.zeros((1, 2), np.uint64), np.zeros((1, 2), np.float64), np.zeros((1, 1), np.int64)
    ce, cr = np.zeros(1, np.int64), np.zeros(1, np.bool_)
    mixed_grained._save_total.py_func(ci, cf, cx, ce, cr, 0, si, sf, sx, sr, 1, 600, li, lf, lx)
    assert ci.tolist() == [[5, 7]] and cf.tolist() == [[-2.0, 8.0]] and cx.tolist() == [[42]]
    assert ce.tolist() == [600] and cr.tolist() == [True]
    ti, tf, tx, tr = np.zeros_like(si), np.full_like(sf, 9.0), np.zeros_like(sx), np.zeros_like(sr)
    big = mixed_grained._load_total.py_func(ti, tf, tx, tr, 0, ci, cf, cx, cr, 0, 0.25, li, lf, lx)
    assert ti[0].tolist() == [5, 0, 7] and tf[0].tolist() == [9.0, -0.5, 9.0, 2.0]
    assert tx[0].tolist() == [42] and tr[0] and big == 2.0


# -- the ring kernel (sliding windows) ----------------------------------------------------


def test_q3_as_printed_shares_in_the_ring() -> None:
    seen = shared_equals_unshared_and_exact(Q3, stock(1500, rate=2.0))
    assert seen["ring"] == 1


SLIDING_CASES = dict(
    op=st.sampled_from(OPS),
    pattern=st.sampled_from(["SEQ(A+, B+)", "SEQ(A+, B)", "SEQ(A+, X, B+)"]),
    keys=st.sampled_from(["[A.k] AND [B.k]", "[B.k]"]),
    n=st.integers(1, 200),
    distinct=st.sampled_from([2, 30]),
    slide=st.integers(1, 4),
    panes=st.integers(1, 12),
    times=st.sampled_from(["dense", "gaps", "negative"]),
    batch_bytes=st.sampled_from([1, kept_totals.CACHE_BATCH_BYTES]),
    crossing=st.sampled_from(CROSSINGS),
    seed=st.integers(0, 2**32 - 1),
)
"""Random sliding-window queries whose sub-streams share a kept variable's rows."""


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**SLIDING_CASES)
def test_random_sliding_queries_share_exactly(op, pattern, keys, n, distinct, slide, panes, times, batch_bytes,
                                              crossing, seed) -> None:
    # Gaps longer than a window empty the ring between a total's save and its load;
    # negative times put panes below zero (ring slots by floor modulo).  Batches of one
    # group each (batch_bytes 1) or of all groups here (the default, for these sizes).
    table = sliding_stream(seed, n, distinct, times)
    group = ", ".join(k.strip("[]") for k in keys.split(" AND "))
    query = (f"RETURN g, {group}, COUNT(*), SUM(B.v), AVG(A.v), AVG(B.w) PATTERN {pattern} "
             f"WHERE {keys} AND {crossing.format(op=op)} GROUP-BY g, {group} "
             f"WITHIN {slide * panes} seconds SLIDE {slide} seconds")
    with forced(), batches_of(batch_bytes):
        shared_equals_unshared_and_exact(query, table)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**SLIDING_CASES)
def test_random_sliding_queries_share_exactly_many(op, pattern, keys, n, distinct, slide, panes, times,
                                                   batch_bytes, crossing, seed) -> None:
    test_random_sliding_queries_share_exactly.hypothesis.inner_test(op, pattern, keys, n, distinct, slide, panes,
                                                                    times, batch_bytes, crossing, seed)


@contextlib.contextmanager
def batches_of(batch_bytes: int):
    """kept_totals.CACHE_BATCH_BYTES set for the block (hypothesis runs a test's examples
    within one function-scoped fixture, so no monkeypatch)."""
    old = kept_totals.CACHE_BATCH_BYTES
    kept_totals.CACHE_BATCH_BYTES = batch_bytes
    try:
        yield
    finally:
        kept_totals.CACHE_BATCH_BYTES = old


def test_ring_batches_groups_by_cache_bytes(monkeypatch) -> None:
    # Consecutive groups until their cache rows pass the budget (a larger group alone);
    # one batch of all where the segments' groups are not ordered (a batch's loading
    # positions must form one range).
    def batches(rep_sizes, group, budget):
        g = kept_totals.Groups(0, np.uint64(1), np.asarray(group), None, None, None,
                               np.concatenate([[0], np.cumsum(rep_sizes)]), None, None)
        monkeypatch.setattr(kept_totals, "CACHE_BATCH_BYTES", budget)
        return kept_totals._batches(g, row_bytes=10)

    assert batches([3, 3, 3, 3], [0, 0, 1, 2, 3], 60) == [(0, 2), (2, 4)]
    assert batches([3, 9, 1, 1], [0, 1, 2, 3], 60) == [(0, 1), (1, 2), (2, 4)]
    assert batches([3, 3, 3], [0, 1, 2], 1) == [(0, 1), (1, 2), (2, 3)]
    assert batches([3, 3, 3], [0, 1, 2], 10**9) == [(0, 3)]
    assert batches([3, 3, 3], [0, 2, 1, 0], 1) == [(0, 3)]


def test_q3_runs_a_batch_per_group_and_equals_one_batch(monkeypatch) -> None:
    # In a Spark call two of q3's groups (a sector's companies as A) exceed the default
    # budget together: a batch each (here forced) -- the runs' results equal one batch's,
    # and the exact executor's.
    # Whether the generated runs repay compiling is decided on the whole run, not on a
    # batch: here every batch is below the size that does, all of them together not.
    from cogra.runtime.compiled import kernel_driver

    table = stock(3000, rate=2.0)
    calls = []
    real = kept_totals._batches
    monkeypatch.setattr(kept_totals, "_batches", lambda *a: calls.append(real(*a)) or calls[-1])
    monkeypatch.setattr(kernel_driver, "SPECIALIZE_MIN_EVENTS", table.num_rows)  # (the ring's runs use it)
    with batches_of(1):
        per_group = shared_equals_unshared_and_exact(Q3, table)
        per_group_result = evaluate(Q3, table)
    n_batches = len(calls[0])
    with batches_of(10**12):
        one = evaluate(Q3, table)
    assert per_group["ring"] == 1 and n_batches > 1 and len(calls[-1]) == 1
    assert per_group["saving_generated"] == per_group["ring_generated"] == n_batches
    assert per_group["saving_generic"] == per_group["ring_generic"] == 0
    assert_same_result(one, per_group_result, context="(one batch)")
    assert per_group_result.num_rows > 100


def test_ring_shares_nothing_past_its_budgets(monkeypatch) -> None:
    # A cache over the budget, or a representative whose counts pass 2**600 (its totals
    # stop there): the ring runs every sub-stream on its own, and the results stay exact.
    query = Q3
    monkeypatch.setattr(kept_totals, "RING_CACHE_MAX_BYTES", 0)
    seen = shared_equals_unshared_and_exact(query, stock(800, rate=2.0))
    assert seen["ring"] == 0
    monkeypatch.undo()

    n = 1400
    table = pa.table({"type": pa.array(np.where(np.arange(n) % 2 == 0, "A", "B")),
                      "time": pa.array(np.arange(n), pa.int64()),
                      "k": pa.array(np.where(np.arange(n) % 4 == 3, 1, 0)),  # A's all 0: 700 per window
                      "v": pa.array(np.arange(n))})
    query = ("RETURN A.k, B.k, COUNT(*), AVG(B.v) PATTERN SEQ(A+, B+) WHERE [A.k] AND [B.k] "
             "AND A.v < NEXT(A).v GROUP-BY A.k, B.k WITHIN 1400 seconds SLIDE 100 seconds")
    with forced():
        seen = shared_equals_unshared_and_exact(query, table, exact=False)
    # (The representatives ran -- generated if an earlier test here lowered the threshold.)
    assert seen["ring"] == 0 and seen["saving_generic"] + seen["saving_generated"] == 1


def test_ring_budget_is_the_representatives_trees(monkeypatch) -> None:
    # Sharing, only the representatives keep Fenwick trees: their span decides whether the
    # ring fits RING_MAX_BYTES (the sub-streams' spans are larger -- (a, b) holds a's A
    # events and b's B events -- and are never computed then).
    from cogra.runtime.compiled.windows import sliding

    table = stock(1500, rate=2.0)
    spans = []
    real_bytes = mixed_one_pass.tree_bytes
    monkeypatch.setattr(mixed_one_pass, "tree_bytes", lambda *a: spans.append(a[-1]) or real_bytes(*a))
    with forced(), watched() as seen:
        want = evaluate(Q3, table)
    assert seen["ring"] == 1 and len(spans) == 1
    rep_span = spans.pop()
    with forced():
        assert_same_result(want, evaluate(Q3, table, share=False))
    assert len(spans) == 1 and spans[0] > rep_span  # the sub-streams' own span, computed unshared

    budget = real_bytes(1, 1, 60, rep_span)  # q3: one pair, A's float count, 60 panes
    monkeypatch.setattr(sliding, "RING_MAX_BYTES", budget)
    with forced(), watched() as seen:
        assert evaluate(Q3, table).equals(want)
    assert seen["ring"] == 1
    monkeypatch.setattr(sliding, "RING_MAX_BYTES", budget - 1)
    grouped = []
    real_grouped = sliding.mixed_grouped.run_mixed_sliding
    monkeypatch.setattr(sliding.mixed_grouped, "run_mixed_sliding",
                        lambda *a: grouped.append(1) or real_grouped(*a))
    with forced(), watched() as seen:
        assert_same_result(evaluate(Q3, table), want)
    assert seen["ring"] == 0 and seen["saving_generated"] + seen["saving_generic"] == 0 and grouped


def test_groups_follow_key_codes_not_values() -> None:
    # 0.0 and -0.0 compare equal but are two plain keys (two sub-streams each): a group by
    # values would hand one's representative totals to the other's sub-streams.
    table = keyed_stream(11, 300, 10)
    g = table.column("g").to_numpy()
    table = table.set_column(3, "g", pa.array(np.where(g == 0, 0.0, -0.0)))
    query = ("RETURN g, A.k, B.k, COUNT(*), SUM(B.v), AVG(A.v) PATTERN SEQ(A+, B+) "
             "WHERE [A.k] AND [B.k] AND A.v < NEXT(A).v GROUP-BY g, A.k, B.k WITHIN 20 seconds")
    seen = shared_equals_unshared_and_exact(query, table)
    assert seen["shared"] == 1
