"""The benchmark's baselines (GRETA-style, A-Seq-style) equal the two-step reference.

Both baselines compute in float64, so results are compared as the property tests
compare the engine: same schema and rows, floats to a relative 1e-9 (the small random
streams keep every count far below 2**53, where float64 is exact).
"""

from __future__ import annotations

import re
import warnings

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cogra.baselines import BaselineLimitExceeded, NotSupported, aseq, greta
from cogra.datasets import events
from cogra.errors import AggregateOverflowError
from cogra.language.ast import Plus, Seq, Var
from cogra.reference import evaluate_reference
from tests.compare import assert_same_result
from tests.strategies import _SPAN, TYPES, cases, render, streams

COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                    HealthCheck.filter_too_much])


def as_any(text: str) -> str:
    """The same query under skip-till-any-match (the only semantics both baselines support)."""
    return re.sub(r"SEMANTICS \S+", "SEMANTICS skip-till-any-match", text)


def reference(text: str, table: pa.Table) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return evaluate_reference(text, table, on_overflow="null")


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# ---------------------------------------------------------------------------
# The report's worked examples (docs/language.md, Worked examples: the skip-till-any-match column)
# ---------------------------------------------------------------------------

WORKED = [
    ("(SEQ(A+, B))+", "a1 b2 a3 a4 c5 b6 a7 b8", 43),
    ("SEQ(A, B)", "a1 a2 b3", 2),
    ("SEQ(A, B)", "a1 b2 b3", 2),
    ("A+", "a1 a2 a3", 7),
    ("SEQ(A+, B)", "a1 b2 b3 x4", 2),
    ("SEQ(A, B+, C)", "a1 b2 x3 b4 c5 c6", 6),
]


@pytest.mark.parametrize("pattern,stream,count", WORKED)
def test_greta_worked_examples(pattern: str, stream: str, count: int) -> None:
    q = f"RETURN COUNT(*) PATTERN {pattern}"
    for use_numba in (None, False):
        got = greta.evaluate(q, events(stream), use_numba=use_numba)
        assert got.column("COUNT(*)").to_pylist() == [count]


@pytest.mark.parametrize("pattern,stream,count", [w for w in WORKED if not w[0].startswith("(")])
def test_aseq_worked_examples(pattern: str, stream: str, count: int) -> None:
    got = aseq.evaluate(f"RETURN COUNT(*) PATTERN {pattern}", events(stream))
    assert got.column("COUNT(*)").to_pylist() == [count]


def test_greta_adjacent_predicate_example() -> None:
    # docs/language.md, Worked examples: a predicate that makes a7 adjacent to b2 but not to b6 -> 33.
    table = events("a1 b2 a3 a4 c5 b6 a7 b8", v=[0, 1, 0, 0, 0, 2, 0, 0])
    q = "RETURN COUNT(*) PATTERN (SEQ(A+, B))+ WHERE B.v < NEXT(A).v + 2"
    assert greta.evaluate(q, table).to_pylist() == reference(q, table).to_pylist() == [{"COUNT(*)": 33}]


# ---------------------------------------------------------------------------
# Random queries against the reference
# ---------------------------------------------------------------------------


@settings(max_examples=400, **COMMON)
@given(case=cases(extended=False))  # GRETA: the report's Kleene patterns
def test_greta_equals_reference(case) -> None:
    q, table = case
    text = as_any(q.text)
    want = reference(text, table)
    for use_numba in (None, False):
        # A tiny block size exercises the block boundaries of the adjacency matrix.
        got = quiet(greta.evaluate, text, table, on_overflow="null", use_numba=use_numba, block_cells=10)
        assert_same_result(got, want, context=f"\nnumba={use_numba}\nquery:\n{text}\nstream:\n{table.to_pylist()}")


@settings(max_examples=200, **COMMON)
@given(case=cases(windows=False, grouping=False, max_events=12, extended=False))
def test_greta_equals_reference_one_window(case) -> None:
    q, table = case
    text = as_any(q.text)
    got = quiet(greta.evaluate, text, table, on_overflow="null")
    assert_same_result(got, reference(text, table), context=f"\nquery:\n{text}\nstream:\n{table.to_pylist()}")


@st.composite
def aseq_cases(draw):
    """Queries A-Seq applies to: SEQ of single and Kleene-plus variables, no adjacent
    predicates, with the local predicates, grouping, windows and aggregates of
    ``tests.strategies``; and a stream over the pattern's types."""
    k = draw(st.integers(1, 3))
    items = []
    for i in range(k):
        v = Var(draw(st.sampled_from(TYPES)), f"V{i}", _SPAN)
        items.append(Plus(v, _SPAN) if draw(st.booleans()) else v)
    pattern = items[0] if k == 1 else Seq(tuple(items), _SPAN)
    names = [f"V{i}" for i in range(k)]
    conjuncts = []
    for v in names:
        if draw(st.integers(0, 3)) == 0:
            conjuncts.append(draw(st.sampled_from([f"{v}.v > 1", f"{v}.w IS NOT NULL", f"{v}.v BETWEEN 1 AND 3",
                                                   f"{v}.v IN (1, 2, 4)"])))
    group = []
    if draw(st.booleans()):
        group.append("g")
    if draw(st.integers(0, 3)) == 0:
        group.append(f"{draw(st.sampled_from(names))}.k")
    if draw(st.integers(0, 4)) == 0:
        conjuncts.append("[h]")
    if draw(st.integers(0, 4)) == 0:
        conjuncts.append(f"[{draw(st.sampled_from(names))}.h]")
    returned = list(dict.fromkeys(group))
    for _ in range(draw(st.integers(1, 3))):
        v = draw(st.sampled_from(names))
        returned.append(draw(st.sampled_from([
            "COUNT(*)", f"COUNT({v})", f"SUM({v}.v)", f"MIN({v}.v)", f"MAX({v}.w)", f"AVG({v}.w)",
            f"SUM({v}.w)", f"AVG({v}.v)"])))
    returned = list(dict.fromkeys(returned))
    text = f"RETURN {', '.join(returned)}\nPATTERN {render(pattern)}\nSEMANTICS any"
    if conjuncts:
        text += "\nWHERE " + " AND ".join(conjuncts)
    if group:
        text += "\nGROUP-BY " + ", ".join(group)
    if draw(st.booleans()):
        size = draw(st.integers(2, 6))
        slide = draw(st.integers(1, size))
        text += f"\nWITHIN {size} seconds" + (f" SLIDE {slide} seconds" if slide != size else "")
    types = tuple(sorted({(i.inner if isinstance(i, Plus) else i).event_type for i in items}))
    return text, draw(streams(max_events=10, types=types))


@settings(max_examples=400, **COMMON)
@given(case=aseq_cases())
def test_aseq_equals_reference(case) -> None:
    text, table = case
    got = quiet(aseq.evaluate, text, table, on_overflow="null")
    assert_same_result(got, reference(text, table), context=f"\nquery:\n{text}\nstream:\n{table.to_pylist()}")


@settings(max_examples=150, **COMMON)
@given(case=cases())
def test_aseq_on_generic_queries_is_right_or_not_applicable(case) -> None:
    """On the generic strategy's queries A-Seq either declines or agrees with the reference."""
    q, table = case
    text = as_any(q.text)
    try:
        got = quiet(aseq.evaluate, text, table, on_overflow="null")
    except NotSupported:
        return
    assert_same_result(got, reference(text, table), context=f"\nquery:\n{text}\nstream:\n{table.to_pylist()}")


# ---------------------------------------------------------------------------
# What they do not support, limits, numbers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("semantics", ["skip-till-next-match", "contiguous"])
def test_only_any_semantics(semantics: str) -> None:
    q = f"RETURN COUNT(*) PATTERN SEQ(A+, B) SEMANTICS {semantics}"
    for module in (greta, aseq):
        with pytest.raises(NotSupported, match="skip-till-any-match"):
            module.evaluate(q, events("a1 b2"))
        with pytest.raises(NotImplementedError):
            module.check(q, events("a1 b2").schema)


@pytest.mark.parametrize("pattern", ["A*", "SEQ(A, B?)", "A | B", "(SEQ(A, B))+"])
def test_aseq_rejects_patterns_it_cannot_flatten(pattern: str) -> None:
    with pytest.raises(NotSupported, match="A-Seq"):
        aseq.evaluate(f"RETURN COUNT(*) PATTERN {pattern}", events("a1 b2"))
    greta.evaluate(f"RETURN COUNT(*) PATTERN {pattern}", events("a1 b2"))  # GRETA handles any pattern


def test_aseq_rejects_adjacent_predicates() -> None:
    with pytest.raises(NotSupported, match="adjacent"):
        aseq.evaluate("RETURN COUNT(*) PATTERN A+ WHERE A.v < NEXT(A).v", events("a1 a2", v=[1, 2]))


def test_string_extremes_are_not_supported() -> None:
    table = events("a1 a2", s=["x", "y"])
    for module in (greta, aseq):
        with pytest.raises(NotSupported, match="float64"):
            module.evaluate("RETURN MIN(A.s) PATTERN A+", table)


def test_aseq_state_limit() -> None:
    table = events(" ".join(f"a{i} b{i + 100}" for i in range(30)))
    with pytest.raises(BaselineLimitExceeded):
        aseq.evaluate("RETURN COUNT(*) PATTERN SEQ(A+, B+)", table, max_cells=100)


def test_float64_counts_follow_the_overflow_policy() -> None:
    table = events(" ".join(f"a{i}" for i in range(70)))  # 2**70 - 1 trends: beyond int64
    q = "RETURN COUNT(*), COUNT(A) PATTERN A+"
    for module in (greta, aseq):
        assert module.evaluate(q, table, on_overflow="null").to_pylist() == [{"COUNT(*)": None, "COUNT(A)": None}]
        with pytest.raises(AggregateOverflowError):
            module.evaluate(q, table)


def test_windows_groups_and_output_schema_match_the_engine() -> None:
    import cogra
    from cogra import datasets

    table = datasets.stock(400, seed=3)
    q = ("RETURN company, COUNT(*), SUM(A.volume), AVG(B.price), MIN(B.price), MAX(A.price)\n"
         "PATTERN SEQ(Stock A+, Stock B)\nWHERE [company] AND A.volume > 1000\nGROUP-BY company\n"
         "WITHIN 20 seconds SLIDE 5 seconds")
    want = cogra.evaluate(q, table, on_overflow="null")
    for module in (greta, aseq):
        got = module.evaluate(q, table, on_overflow="null")
        assert got.schema == want.schema
        assert got.num_rows == want.num_rows
        assert got.column("COUNT(*)").to_pylist() == want.column("COUNT(*)").to_pylist()
        for name in ("AVG(B.price)", "MIN(B.price)", "MAX(A.price)"):
            assert got.column(name).to_pylist() == pytest.approx(want.column(name).to_pylist(), rel=1e-9)
