"""The ring kernel's loading run generated per query shape (fast/codegen_ring.py).

Sliding windows with a shared kept variable: every sub-stream loads that variable's lane
totals from the representatives' cache and updates its type-grained variables batch by
batch.  The generated run must give what the generic ring kernel gives (the same sums in
the same order: identical rows), what every sub-stream computing its own gives, and the
exact Python executor -- and hand the batches it does not take (two variables played at
once, a non-finite value) back to the generic kernel rather than guess.
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
from cogra.runtime.fast import codegen
from tests.compare import assert_same_result
from tests.engine.test_shared_rows import evaluate, keyed_stream, sliding_stream, watched
from tests.engine.test_sliding import forced


@contextlib.contextmanager
def generic_only():
    """The generic ring kernel for every loading run (the generated one's size threshold
    out of reach)."""
    from cogra.runtime.fast import executor

    old = executor.SPECIALIZE_MIN_EVENTS
    executor.SPECIALIZE_MIN_EVENTS = 10**12
    try:
        yield
    finally:
        executor.SPECIALIZE_MIN_EVENTS = old


def generated_equals_generic(query: str, table: pa.Table, exact: bool = True) -> dict:
    """Evaluate with the generated loading run and check it against the generic kernel
    (identical rows), unshared sub-streams and, if ``exact``, the Python executor; returns
    the loading runs ``{"generated": .., "generic": ..}`` (see ``watched``)."""
    with forced(), watched() as runs:
        got = evaluate(query, table)
    seen = {"generated": runs["ring_generated"], "generic": runs["ring_generic"]}
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
# variable (B starts trends too: a start in the current pane's lane).
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
]


@pytest.mark.parametrize("query", QUERIES)
def test_each_shape_runs_generated(query, generated_kernels) -> None:
    # Without ties in time every batch is one event: the generated run takes them all.
    table = keyed_stream(3, 600, 20)
    table = table.set_column(1, "time", pa.array(np.arange(600)))
    seen = generated_equals_generic(query.format(size=12, slide=3), table)
    assert seen == {"generated": 1, "generic": 0}


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
def test_generated_loading_run_equals_generic_and_exact(query, n, distinct, slide, panes, times, seed,
                                                        generated_kernels) -> None:
    table = sliding_stream(seed, n, distinct, times)
    seen = generated_equals_generic(query.format(size=slide * panes, slide=slide), table)
    assert seen["generic"] <= seen["generated"]  # the generic runs only where handed back


def test_q3_as_printed_runs_generated(generated_kernels) -> None:
    seen = generated_equals_generic(Q3, stock(2500, rate=2.0))
    assert seen == {"generated": 1, "generic": 0}


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
    assert seen == {"generated": 1, "generic": 1}


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
    assert seen == {"generated": 1, "generic": 1}


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
    assert seen["ring_generated"] == 1 and seen["ring_generic"] == 1


def test_the_generated_source_unrolls_the_shape() -> None:
    # One lane loop per variable, over constants: q3's B updates its three float channels
    # in one loop reading A's loaded count and its own, with no live-channel lists.
    from cogra.runtime.fast.codegen import Shape

    shape = Shape(mode=0, nv=2, preds=((0,), (0, 1)), start=(0,), final=(1,),
                  ops=((1, 2, 0, -1, 1, -1), (1, 3, 0, -1, 2, -1)), n_i=1, n_f=3, x_is_min=(),
                  pair_checks=(), loads=(0, (), (0,), ()), live=(((), ()), ((0,), (0, 1, 2))))
    text = codegen.generate(shape)
    start = text.index("def ring_loading(")
    body = text[start:text.index("@njit", start)]
    assert "cnt_f = s0_f0[ln] + s1_f0[ln]" in body
    assert "new_f1 = keep_f * s1_f1[ln] + c1_f1 * cnt_f" in body
    assert "var_live" not in body and "s1_i" not in body
