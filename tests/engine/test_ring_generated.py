"""The ring kernel's runs generated per query shape (compiled/codegen/pane_loading.py).

Sliding windows with a shared kept variable: the representatives compute that variable's
lane totals (its Fenwick trees) and save them after each batch; every sub-stream loads
them and updates its type-grained variables batch by batch.  Both generated runs must give
what the generic ring kernel gives (the same sums in the same order: identical rows), what
every sub-stream computing its own gives, and the exact Python executor -- and the loading
run must hand the batches it does not take (two variables played at once, a non-finite
value) back to the generic kernel rather than guess.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cogra.datasets import stock
from cogra.examples import Q3
from cogra.runtime.compiled.codegen import window_kernel
from tests.compare import assert_same_result
from tests.engine.test_shared_rows import evaluate, keyed_stream, sliding_stream, watched
from tests.engine.test_sliding import forced


@contextlib.contextmanager
def generic_only():
    """The generic ring kernel for every run (the generated runs' size threshold out of reach)."""
    from cogra.runtime.compiled import kernel_driver

    old = kernel_driver.SPECIALIZE_MIN_EVENTS
    kernel_driver.SPECIALIZE_MIN_EVENTS = 10**12
    try:
        yield
    finally:
        kernel_driver.SPECIALIZE_MIN_EVENTS = old


def generated_equals_generic(query: str, table: pa.Table, exact: bool = True) -> dict:
    """Evaluate with the generated runs and check them against the generic kernel
    (identical rows), unshared sub-streams and, if ``exact``, the Python executor; returns
    the runs ``{"generated": .., "generic": ..}`` (loading) and ``{"saving": ..,
    "saving_generic": ..}`` (the representatives'; see ``watched``)."""
    with forced(), watched() as runs:
        got = evaluate(query, table)
    seen = {"generated": runs["ring_generated"], "generic": runs["ring_generic"],
            "saving": runs["saving_generated"], "saving_generic": runs["saving_generic"]}
    with forced():
        assert_same_result(got, evaluate(query, table, share=False), context=f"(unshared)\n{query}")
        if exact:
            assert_same_result(got, evaluate(query, table, compiled=False), context=f"(exact)\n{query}")
        with generic_only():
            want = evaluate(query, table)
    assert got.equals(want), f"generated and generic rows differ\n{query}"
    return seen


# Shapes: q3's (a float AVG: approximate channels only); exact integer channels (COUNT(*),
# SUM of integers of both signs); a third type between the shared variable and the last;
# a single variable after the shared one and a predicate on the new event gating X+'s
# self-loop (a pair check: events of one batch may differ in it); an optional shared
# variable (B starts trends too: a start in the current pane's lane); aggregates over the
# shared variable itself (its rows carry sums: the representatives' contributions) and an
# equality (its own tree, one node per query).
QUERIES = [
    "RETURN g, A.k, B.k, AVG(B.w) PATTERN SEQ(A+, B+) WHERE [A.k] AND [B.k] AND A.v > NEXT(A).v "
    "GROUP-BY g, A.k, B.k WITHIN {size} seconds SLIDE {slide} seconds",
    "RETURN g, B.k, COUNT(*), SUM(B.v), AVG(B.w) PATTERN SEQ(A+, B+) WHERE [B.k] AND A.v <= NEXT(A).v "
    "GROUP-BY g, B.k WITHIN {size} seconds SLIDE {slide} seconds",
    "RETURN g, B.k, COUNT(*), SUM(B.v) PATTERN SEQ(A+, X, B+) WHERE [A.k] AND [B.k] AND A.v < NEXT(A).v "
    "GROUP-BY g, B.k WITHIN {size} seconds SLIDE {slide} seconds",
    "RETURN g, B.k, COUNT(*), SUM(X.w) PATTERN SEQ(A+, B, X+) WHERE [B.k] AND A.v <> NEXT(A).v "
    "AND NEXT(X).v > 0 GROUP-BY g, B.k WITHIN {size} seconds SLIDE {slide} seconds",
    "RETURN g, B.k, COUNT(*), SUM(B.v) PATTERN SEQ(A*, B+) WHERE [B.k] AND A.v < NEXT(A).v "
    "GROUP-BY g, B.k WITHIN {size} seconds SLIDE {slide} seconds",
    "RETURN g, B.k, COUNT(*), SUM(A.v), AVG(A.w), COUNT(A) PATTERN SEQ(A+, B+) WHERE [B.k] "
    "AND A.v = NEXT(A).v GROUP-BY g, B.k WITHIN {size} seconds SLIDE {slide} seconds",
]


@pytest.mark.parametrize("query", QUERIES)
def test_each_shape_runs_generated(query, generated_kernels) -> None:
    # Without ties in time every batch is one event: the generated run takes them all.
    table = keyed_stream(3, 600, 20)
    table = table.set_column(1, "time", pa.array(np.arange(600)))
    seen = generated_equals_generic(query.format(size=12, slide=3), table)
    assert seen == {"generated": 1, "generic": 0, "saving": 1, "saving_generic": 0}


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(1, 300),
    distinct=st.sampled_from([2, 30]),
    slide=st.integers(1, 3),
    panes=st.integers(1, 8),
    times=st.sampled_from(["dense", "gaps", "negative"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_generated_runs_equal_generic_and_exact(query, n, distinct, slide, panes, times, seed,
                                                generated_kernels) -> None:
    table = sliding_stream(seed, n, distinct, times)
    seen = generated_equals_generic(query.format(size=slide * panes, slide=slide), table)
    assert seen["generic"] <= seen["generated"]  # the generic runs only where handed back
    assert seen["saving_generic"] == 0 and seen["saving"] >= seen["generated"]


def test_q3_as_printed_runs_generated(generated_kernels) -> None:
    seen = generated_equals_generic(Q3, stock(2500, rate=2.0))
    assert seen == {"generated": 1, "generic": 0, "saving": 1, "saving_generic": 0}


def test_batches_it_does_not_take_go_to_the_generic_kernel(generated_kernels) -> None:
    # Events that play two variables after the shared one (all three of one type): the
    # generated run hands the sub-streams back, the generic kernel takes them event by event.
    rng = np.random.default_rng(5)
    n = 400
    table = pa.table({"type": pa.array(["S"] * n), "time": pa.array(np.sort(rng.integers(0, 150, n))),
                      "k": pa.array(rng.integers(0, 2, n)), "v": pa.array(rng.integers(0, 9, n))})
    query = ("RETURN A.k, C.k, COUNT(*), SUM(C.v) PATTERN SEQ(S A+, S B, S C+) WHERE [A.k] AND [C.k] "
             "AND A.v < NEXT(A).v GROUP-BY A.k, C.k WITHIN 20 seconds SLIDE 5 seconds")
    seen = generated_equals_generic(query, table)
    assert seen == {"generated": 1, "generic": 1, "saving": 1, "saving_generic": 0}


def test_a_batch_whose_events_differ_in_a_pair_check_goes_to_the_generic_kernel(generated_kernels) -> None:
    # X+'s self-loop is gated by NEXT(X).v > 0: two X events at one time with values of
    # both signs follow the earlier X's differently -- not one update for the batch.
    rows = []
    for t0 in range(0, 200, 10):
        rows += [("A", t0, 0, 5), ("A", t0 + 1, 0, 3), ("B", t0 + 2, 0, 1), ("B", t0 + 2, 1, 1)]
        rows += [("X", t0 + 3, 0, 1), ("X", t0 + 4, 0, 2), ("X", t0 + 4, 0, -2), ("X", t0 + 5, 0, 4)]
    table = pa.table({"type": [r[0] for r in rows], "time": [r[1] for r in rows], "k": [r[2] for r in rows],
                      "v": [r[3] for r in rows], "w": [0.5 * r[3] for r in rows], "g": [0] * len(rows)})
    seen = generated_equals_generic(QUERIES[3].format(size=20, slide=5), table)
    assert seen == {"generated": 1, "generic": 1, "saving": 1, "saving_generic": 0}


def test_counts_past_the_rescale_bound_are_handed_back(generated_kernels) -> None:
    # Few A events but ~700 B events per window: the sub-streams' counts pass 2**600 (not
    # the representatives'), the generated run stops there, and so does the generic one:
    # the sub-streams run unshared, with the per-window kernel's rescaling.
    n = 1600
    table = pa.table({"type": pa.array(np.where(np.arange(n) % 8 == 0, "A", "B")),
                      "time": pa.array(np.arange(n), pa.int64()),
                      "k": pa.array(np.arange(n) // 8 % 2),  # sub-streams (0, 0), (0, 1), (1, 0), (1, 1)
                      "v": pa.array(np.arange(n))})
    query = ("RETURN A.k, B.k, COUNT(*), AVG(B.v) PATTERN SEQ(A+, B+) WHERE [A.k] AND [B.k] "
             "AND A.v < NEXT(A).v GROUP-BY A.k, B.k WITHIN 1600 seconds SLIDE 100 seconds")
    with forced(), watched() as seen:
        got = evaluate(query, table)
    with forced(), generic_only():
        assert_same_result(got, evaluate(query, table, share=False))
    assert seen["ring_generated"] == 1 and seen["ring_generic"] == 1 and seen["saving_generated"] == 1


def test_representatives_past_the_rescale_bound_share_nothing(generated_kernels) -> None:
    # ~750 A events per window with rising values: A's own counts pass 2**600 in the
    # representatives' run, which flags its windows as the generic kernel does -- and then
    # nothing is shared, every sub-stream runs its own.  (The B events all come early, so
    # no loaded total is that large: only the representatives' watch can tell.)
    n = 1600
    is_b = (np.arange(n) % 16 == 0) & (np.arange(n) < 160)
    table = pa.table({"type": pa.array(np.where(is_b, "B", "A")),
                      "time": pa.array(np.arange(n), pa.int64()),
                      "k": pa.array(np.arange(n) // 16 % 2),
                      "v": pa.array(np.arange(n))})
    query = ("RETURN A.k, B.k, COUNT(*), AVG(B.v) PATTERN SEQ(A+, B+) WHERE [A.k] AND [B.k] "
             "AND A.v < NEXT(A).v GROUP-BY A.k, B.k WITHIN 1600 seconds SLIDE 100 seconds")
    with forced(), watched() as seen:
        got = evaluate(query, table)
    assert seen["saving_generated"] == 1 and seen["ring"] == 0 and seen["saving_generic"] == 0
    with forced(), generic_only(), watched() as generic:
        assert got.equals(evaluate(query, table))
    assert generic["saving_generic"] == 1 and generic["ring"] == 0
    with forced():
        assert_same_result(got, evaluate(query, table, share=False))


@pytest.mark.parametrize("query", [QUERIES[0], QUERIES[5]])
def test_events_without_the_compared_value(query, generated_kernels) -> None:
    # A NULL v: the event's row takes no tree query (no NEXT side) and enters no tree (no
    # earlier side), in the generated representatives' run as in the generic kernel.
    table = keyed_stream(7, 400, 5)
    v = table.column("v").to_numpy()
    table = table.set_column(4, "v", pa.array(v, mask=np.arange(len(v)) % 5 == 2))
    seen = generated_equals_generic(query.format(size=12, slide=3), table)
    assert seen["saving"] == 1 and seen["saving_generic"] == 0


def test_the_generated_source_unrolls_the_shape() -> None:
    # One lane loop per variable, over constants: q3's B updates its three float channels
    # in one loop reading A's loaded count and its own, with no live-channel lists.
    from cogra.runtime.compiled.codegen.query_shape import Shape

    shape = Shape(mode=0, nv=2, preds=((0,), (0, 1)), start=(0,), final=(1,),
                  ops=((1, 2, 0, -1, 1, -1), (1, 3, 0, -1, 2, -1)), n_i=1, n_f=3, x_is_min=(),
                  pair_checks=(), loads=(0, (), (0,), ()), live=(((), ()), ((0,), (0, 1, 2))))
    text = window_kernel.generate(shape)
    start = text.index("def ring_loading(")
    body = text[start:text.index("@njit", start)]
    assert "cnt_f = s0_f0[ln] + s1_f0[ln]" in body  # the loaded row copied (lanes expired since)
    assert "cnt_f = cf[c, 0, ln] + s1_f0[ln]" in body  # or read in place (current)
    assert "new_f1 = keep_f * s1_f1[ln] + c1_f1 * cnt_f" in body
    assert "var_live" not in body and "s1_i" not in body


def test_the_generated_representatives_run_unrolls_the_shape() -> None:
    # q3's representatives: A's float count is its one live channel and the suffix tree
    # (prices above the new one) its one tree -- constants, not lists read per lane.
    from cogra.runtime.compiled.codegen.query_shape import Shape

    shape = Shape(mode=0, nv=2, preds=((0,), (0, 1)), start=(0,), final=(1,),
                  ops=((1, 2, 0, -1, 1, -1), (1, 3, 0, -1, 2, -1)), n_i=1, n_f=3, x_is_min=(),
                  pair_checks=(), loads=(0, (), (0,), ()), live=(((), ()), ((0,), (0, 1, 2))),
                  saves=(0, 2, (), (0,)))
    text = window_kernel.generate(shape)
    start = text.index("def ring_saving_loop(")
    end = text.find("@njit", start)
    body = text[start:end if end >= 0 else len(text)]
    # The suffix tree's query and insert, its node's expired lanes masked (read as zero).
    assert "node_f = tf[0, 1, a, 0, ln]" in body
    assert "bf[nb, 0, ln] += (0.0 if lane_age[ln] < n_exp else node_f)" in body
    assert "tf[0, 1, a, 0, ln] = (0.0 if lane_age[ln] < n_exp else node_f) + bf[k, 0, ln]" in body
    assert "tf[0, 0," not in body and "tf[0, 2," not in body and "ti[0," not in body
    assert "var_live" not in body and "pred_idx" not in body and "bi[" not in body
