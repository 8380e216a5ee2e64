"""Which queries the compiled kernels take, and the word a user gets where they do not:
``cogra.explain`` names the parts known from the query, ``cogra.evaluate`` warns
(:class:`cogra.CograPerformanceWarning`) with the reason, from the query or its data."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest

import cogra
from cogra.reference import evaluate_reference
from tests.compare import assert_same_result


def table(n: int = 60, seed: int = 0, v_type=pa.int64()) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"type": rng.choice(["A", "B"], n), "time": np.sort(rng.integers(0, n, n)),
                     "v": pa.array(rng.integers(0, 5, n), v_type), "w": rng.integers(0, 5, n)})


SLOW = [
    ("RETURN COUNT(*) PATTERN SEQ(A+, B) WHERE A.v < NEXT(A).v AND A.w > NEXT(A).w WITHIN 10 seconds",
     "both read A for its next A"),
    ("RETURN COUNT(*) PATTERN SEQ(A+, B) WHERE A.v + NEXT(B).v > 2 WITHIN 10 seconds",
     "one comparison of its value with the new event's"),
]


@pytest.mark.parametrize(("query", "reason"), SLOW)
def test_explain_names_what_keeps_a_query_off_the_kernels(query: str, reason: str) -> None:
    text = cogra.explain(query)
    assert "kernels    the Python executors" in text and reason in text


def test_explain_says_compiled_where_the_kernels_take_the_query() -> None:
    for query in ("RETURN COUNT(*) PATTERN SEQ(A+, B) WHERE A.v < NEXT(A).v",
                  "RETURN COUNT(*) PATTERN SEQ(A+, B) WHERE (A.v = NEXT(B).v OR NEXT(B).v > 2)",
                  "RETURN COUNT(*) PATTERN SEQ(A+, B, NOT C) WHERE A.v < NEXT(A).v"):
        assert "kernels    compiled" in cogra.explain(query)


@pytest.mark.parametrize(("query", "reason"), SLOW)
def test_evaluate_warns_and_stays_exact(query: str, reason: str) -> None:
    events = table()
    with pytest.warns(cogra.CograPerformanceWarning, match="Python executors"):
        got = cogra.evaluate(query, events)
    assert_same_result(evaluate_reference(query, events), got, query)


def test_a_reason_in_the_data_is_named_when_the_query_runs() -> None:
    # The query alone is compiled; a uint64 column summed is not.
    query = "RETURN SUM(A.v) PATTERN SEQ(A+, B) WITHIN 10 seconds"
    assert "kernels    compiled" in cogra.explain(query)
    events = table(v_type=pa.uint64())
    with pytest.warns(cogra.CograPerformanceWarning, match="v is uint64"):
        got = cogra.evaluate(query, events)
    assert_same_result(evaluate_reference(query, events), got, query)


def test_a_compiled_query_gives_no_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", cogra.CograPerformanceWarning)
        cogra.evaluate("RETURN COUNT(*), SUM(A.v) PATTERN SEQ(A+, B) WHERE (A.v = NEXT(B).v OR NEXT(B).v > 2) "
                       "WITHIN 10 seconds", table())


def compiled_past_8_states(query: str, events: pa.Table) -> None:
    """``query`` (an automaton of more than 8 states) runs every window on the compiled
    kernels, without a performance warning, and equals the Python executors."""
    from cogra.runtime.engine import Engine

    assert "kernels    compiled" in cogra.explain(query), query
    engine = Engine(cogra.plan(query, events.schema), events)
    with warnings.catch_warnings():
        warnings.simplefilter("error", cogra.CograPerformanceWarning)
        got = engine.result_table(on_overflow="null")
    assert len(engine.bound.automaton.names) > 8
    assert engine.stats["windows_fast"] == engine.stats["windows"] > 0
    assert got.num_rows > 0
    assert_same_result(cogra.evaluate(query, events, compiled=False, on_overflow="null"), got, query)


@pytest.mark.parametrize("semantics", ["any", "next", "contiguous"])
def test_automata_past_8_states_without_pair_predicates_run_compiled(semantics: str) -> None:
    events = table(n=3000, seed=3)
    rng = np.random.default_rng(3)
    events = events.append_column("h", pa.array(rng.integers(0, 2, len(events))))
    for query in (f"RETURN COUNT(*), SUM(B.v) PATTERN SEQ(A, B{{9}}) SEMANTICS {semantics} WITHIN 30 seconds",
                  f"RETURN B.h, COUNT(*), MAX(A.w) PATTERN SEQ(A+, (B | A A2){{3,6}}, B B2) SEMANTICS {semantics} "
                  "WHERE [B.h] AND A.v > 1 GROUP-BY B.h WITHIN 30 seconds SLIDE 10 seconds"):
        compiled_past_8_states(query, events)


@pytest.mark.parametrize("semantics", ["any", "next", "contiguous"])
@pytest.mark.parametrize("window", ["WITHIN 30 seconds", "WITHIN 30 seconds SLIDE 10 seconds"])
def test_automata_past_8_states_with_pair_predicates_run_compiled(semantics: str, window: str) -> None:
    # A pair bit per automaton edge (codes.edge_bits): 10-19 states, 9-48 edges.
    events = table(n=3000, seed=5)
    rng = np.random.default_rng(5)
    events = events.append_column("h", pa.array(rng.integers(0, 2, len(events))))
    for query in (f"RETURN COUNT(*), SUM(B.v) PATTERN SEQ(A, B{{9}}) SEMANTICS {semantics} "
                  f"WHERE A.v < NEXT(B).v {window}",
                  f"RETURN COUNT(*), MIN(B.w) PATTERN SEQ(A+, B{{9}}) SEMANTICS {semantics} "
                  f"WHERE NEXT(B).v <> 2 AND A.w + 1 > NEXT(A).w {window}",
                  f"RETURN B.h, COUNT(*), MAX(A.w) PATTERN SEQ(A+, (B | A A2){{3,6}}, B B2) SEMANTICS {semantics} "
                  f"WHERE [B.h] AND A2.v >= NEXT(B).v AND NEXT(B2).v > 0 GROUP-BY B.h {window}",
                  f"RETURN COUNT(*) PATTERN SEQ((A | B){{2,9}}, B B2) SEMANTICS {semantics} "
                  f"WHERE (A.v = NEXT(B).v OR NEXT(B).v > 2) {window}"):
        compiled_past_8_states(query, events)


@pytest.mark.parametrize("semantics", ["any", "next", "contiguous"])
@pytest.mark.parametrize("window", ["WITHIN 30 seconds", "WITHIN 30 seconds SLIDE 10 seconds"])
def test_automata_past_64_edges_run_compiled(semantics: str, window: str) -> None:
    # 25 states, 68 edges: edges 64-67 (into B2) read no pair bit and pass; the predicates
    # reading the earlier event are indexed per pair, past the word or not, and so are
    # those on the new event alone past it (NEXT(B2).v > 2 on A#11 -> B2 and later).
    events = table(n=3000, seed=8)
    for query in (f"RETURN COUNT(*), SUM(B.v) PATTERN SEQ((A | B){{1,12}}, B B2) SEMANTICS {semantics} "
                  f"WHERE A.v < NEXT(B).v {window}",
                  f"RETURN COUNT(*), MIN(A.w) PATTERN SEQ((A | B){{1,12}}, B B2) SEMANTICS {semantics} "
                  f"WHERE NEXT(A).w < 4 AND B.v <= NEXT(B2).v {window}",
                  f"RETURN COUNT(*), MAX(B.w) PATTERN SEQ((A | B){{1,12}}, B B2) SEMANTICS {semantics} "
                  f"WHERE NEXT(A).w < 4 {window}",
                  f"RETURN COUNT(*), AVG(B.v) PATTERN SEQ((A | B){{1,12}}, B B2) SEMANTICS {semantics} "
                  f"WHERE NEXT(B2).v > 2 {window}",
                  f"RETURN COUNT(*), SUM(A.w) PATTERN SEQ((A | B){{1,12}}, B B2) SEMANTICS {semantics} "
                  f"WHERE (B.v = NEXT(B2).v OR NEXT(B2).v > 2) AND NEXT(B2).w <> 1 {window}"):
        compiled_past_8_states(query, events)


@pytest.fixture
def generated_shapes(generated_kernels, monkeypatch) -> list:
    """The shapes whose generated kernels the test's queries ask for, in order."""
    from cogra.runtime.compiled.codegen import kernel_cache

    shapes: list = []
    real = kernel_cache.kernel_for
    monkeypatch.setattr(kernel_cache, "kernel_for", lambda shape: (shapes.append(shape), real(shape))[1])
    return shapes


def generated_equals_python(query: str, events: pa.Table, shapes: list) -> None:
    """``query`` runs every window on a generated kernel past 8 states that checks pair
    bits, and equals the Python executors."""
    from cogra.runtime.engine import Engine

    shapes.clear()
    engine = Engine(cogra.plan(query, events.schema), events)
    got = engine.result_table(on_overflow="null")
    assert shapes and shapes[-1].nv > 8 and shapes[-1].pair_checks
    assert engine.stats["windows_fast"] == engine.stats["windows"] > 0
    assert_same_result(cogra.evaluate(query, events, compiled=False, on_overflow="null"), got, query)


@pytest.mark.parametrize("semantics", ["any", pytest.param("next", marks=pytest.mark.slow),
                                       pytest.param("contiguous", marks=pytest.mark.slow)])
def test_generated_kernels_past_8_states_read_the_edge_bits(semantics: str, generated_shapes: list) -> None:
    events = table(n=3000, seed=6)
    for query in (f"RETURN COUNT(*), SUM(B.v) PATTERN SEQ(A+, B{{9}}) SEMANTICS {semantics} "
                  "WHERE NEXT(B).v <> 2 AND NEXT(A).w < 4 WITHIN 30 seconds",
                  f"RETURN COUNT(*), MAX(A.w) PATTERN SEQ((A | B){{2,9}}, B B2) SEMANTICS {semantics} "
                  "WHERE NEXT(B).v > 1 AND NEXT(A).w < 4 WITHIN 30 seconds SLIDE 10 seconds"):
        generated_equals_python(query, events, generated_shapes)


@pytest.mark.slow  # (two 25-state kernels compile: ~90 s)
def test_generated_kernels_past_64_edges_pass_the_edges_past_the_word(generated_shapes: list) -> None:
    events = table(n=3000, seed=6)
    for query in ("RETURN COUNT(*), MAX(A.w) PATTERN SEQ((A | B){1,12}, B B2) WHERE NEXT(A).w < 4 "
                  "WITHIN 30 seconds SLIDE 10 seconds",
                  "RETURN COUNT(*), SUM(B.v) PATTERN SEQ((A | B){1,12}, B B2) WHERE NEXT(A).w < 4 WITHIN 30 seconds"):
        generated_equals_python(query, events, generated_shapes)
