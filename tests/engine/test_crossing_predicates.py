"""Predicates that read the earlier event around one comparison, on the compiled kernels
(compiled/crossing_predicates.py).

* what each event takes (the comparison, its complement, every earlier event with a value,
  every earlier event, nothing) under SQL's three-valued logic, row by row;
* the shapes the kernels cannot index are refused with the reason, and then run exactly on
  the Python executors;
* at the sizes users run: 5,000 events per query (20,000 in the slow suite), every semantics and window kind, the
  compiled result equal to the Python executors', with the compiled path taken.
"""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest
import sqlglot.expressions as exp

import cogra
from cogra.runtime.compiled.channels import Unsupported
from cogra.runtime.compiled.crossing_predicates import split_crossing
from cogra.reference import evaluate_reference
from cogra.runtime.engine import Engine
from tests.compare import assert_same_result


def column(role: str, name: str = "v") -> exp.Column:
    return exp.column(name, table=role)


def predicate(text: str) -> exp.Expression:
    """A bound predicate: ``cur.v`` the earlier event, ``next.v`` the new one."""
    import sqlglot

    return sqlglot.parse_one(text)


def columns(values: list) -> dict:
    data = np.array([0 if x is None else x for x in values], np.int64)
    return {"v": (data, np.array([x is not None for x in values]))}


def test_each_event_takes_what_the_predicate_makes_of_the_comparison() -> None:
    # Rows as the new event: v = 1, 3, NULL.
    cols = columns([1, 3, None])
    c = split_crossing(predicate("cur.v = next.v OR next.v > 2"), cols, 3)
    assert c.op == "=" and not c.plain
    assert c.uses["C"].tolist() == [True, False, False]
    assert c.uses["all"].tolist() == [False, True, False]  # (NULL = x OR NULL > 2: NULL)
    c = split_crossing(predicate("NOT (cur.v < next.v)"), cols, 3)
    assert c.uses["not C"].tolist() == [True, True, False] and not c.uses["C"].any()
    c = split_crossing(predicate("next.v < cur.v AND next.v <> 3"), cols, 3)
    assert c.op == ">" and c.plain and c.uses["C"].tolist() == [True, False, False]
    c = split_crossing(predicate("cur.v > next.v OR next.v IS NULL"), cols, 3)
    assert c.uses["C"].tolist() == [True, True, False] and c.uses["all"].tolist() == [False, False, True]
    c = split_crossing(predicate("cur.v <= next.v OR next.v >= 0"), cols, 3)
    assert c.uses["all"].tolist() == [True, True, False]


@pytest.mark.parametrize(("text", "reason"), [
    ("(cur.v + 1 > next.v) IS NOT FALSE", "holds where"),
    ("cur.v < next.v AND cur.v > next.v - 3", "outside one comparison"),
    ("cur.v + next.v > 3", "mixes the two events"),
    ("next.v BETWEEN cur.v AND 4", "outside one comparison"),
])
def test_shapes_the_kernels_cannot_index_are_refused(text: str, reason: str) -> None:
    with pytest.raises(Unsupported, match=reason):
        split_crossing(predicate(text), columns([1, 3, None]), 3)


def events(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    v = rng.integers(0, 6, n)
    return pa.table({
        "type": rng.choice(["A", "B", "X"], n, p=[0.5, 0.4, 0.1]),
        "time": np.sort(rng.integers(0, n, n)),
        "v": pa.array(v, mask=rng.random(n) < 0.1),
        "g": rng.integers(0, 3, n),
    })


PREDICATES = [
    "(A.v = NEXT(B).v OR NEXT(B).v > 2)",
    "NOT (A.v < NEXT(B).v)",
    "(A.v <= NEXT(B).v AND NEXT(B).v <> 3)",
    "(A.v > NEXT(B).v OR NEXT(B).v IS NULL)",
    "(NEXT(B).v > 3 OR A.v <> NEXT(B).v)",
]


def compiled_equals_python_on(query: str, table: pa.Table) -> pa.Table:
    """``query`` over ``table`` with every window on the compiled kernels (no performance
    warning) equals the Python executors; the compiled result."""
    engine = Engine(cogra.plan(query, table.schema), table)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        warnings.simplefilter("error", cogra.CograPerformanceWarning)
        got = engine.result_table(on_overflow="null")
        want = cogra.evaluate(query, table, compiled=False, on_overflow="null")
    assert "fast_unsupported" not in engine.stats, query
    assert engine.stats["windows_fast"] == engine.stats["windows"] > 0, query
    assert_same_result(want, got, query)
    return got


def compiled_equals_python(semantics: str, n: int) -> None:
    table = events(n, seed=1)
    rows = 0
    for pattern in ("SEQ(A+, B)", "SEQ(A+, B+)"):
        for where in PREDICATES:
            for window in ("", "WITHIN 50 seconds", "WITHIN 50 seconds SLIDE 10 seconds"):
                query = (f"RETURN g, COUNT(*), SUM(A.v), MAX(B.v) PATTERN {pattern} SEMANTICS {semantics} "
                         f"WHERE {where} GROUP-BY g {window}")
                rows += compiled_equals_python_on(query, table).num_rows
    assert rows > 1000


@pytest.mark.parametrize("semantics", ["any", "next", "contiguous"])
def test_at_scale_compiled_equals_the_python_executors(semantics: str) -> None:
    compiled_equals_python(semantics, 5000)


@pytest.mark.slow
@pytest.mark.parametrize("semantics", ["any", "next", "contiguous"])
def test_at_larger_scale_compiled_equals_the_python_executors(semantics: str) -> None:
    compiled_equals_python(semantics, 20_000)


def test_a_refused_shape_runs_on_the_python_executors_exactly() -> None:
    table = events(300, seed=2)
    query = ("RETURN g, COUNT(*) PATTERN SEQ(A+, B) WHERE (A.v + 1 > NEXT(B).v) IS NOT FALSE GROUP-BY g "
             "WITHIN 8 seconds")
    engine = Engine(cogra.plan(query, table.schema), table)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = engine.result_table()
    assert "NULL" in engine.stats["fast_unsupported"]
    assert_same_result(evaluate_reference(query, table), got, query)


# -- across a negation: the guard and the user's comparison as one ranked value --------------


def guarded_events(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "type": rng.choice(["A", "B", "N", "M", "X"], n, p=[0.4, 0.35, 0.08, 0.07, 0.1]),
        "time": np.sort(rng.integers(0, n, n)),  # ties, blockers among them
        "v": pa.array(rng.integers(0, 6, n), mask=rng.random(n) < 0.1),
        "g": rng.integers(0, 3, n),
    })


GUARDED = [
    "A.v < NEXT(B).v",
    "A.v >= NEXT(B).v",
    "A.v + 1 = NEXT(B).v",
    "(A.v = NEXT(B).v OR NEXT(B).v > 2)",
    "(A.v > NEXT(B).v OR NEXT(B).v IS NULL)",
    "(A.v <= NEXT(B).v AND NEXT(B).v <> 3)",
]


def guarded_compiled_equals_python(semantics: str, n: int) -> None:
    table = guarded_events(n, seed=3)
    rows = 0
    for pattern in ("SEQ(A+, NOT N, B)", "SEQ(A, NOT N, B+)", "SEQ(A, NOT N, B)+"):
        for where in GUARDED:
            for window in ("", "WITHIN 50 seconds", "WITHIN 50 seconds SLIDE 10 seconds"):
                query = (f"RETURN g, COUNT(*), SUM(A.v), MAX(B.v) PATTERN {pattern} SEMANTICS {semantics} "
                         f"{'WHERE ' + where if where else ''} GROUP-BY g {window}")
                assert "kernels    compiled" in cogra.explain(query), query
                rows += compiled_equals_python_on(query, table).num_rows
    assert rows > 1000


@pytest.mark.parametrize("semantics", ["any", "next", "contiguous"])
def test_across_a_negation_compiled_equals_the_python_executors(semantics: str) -> None:
    guarded_compiled_equals_python(semantics, 2500)


@pytest.mark.slow
@pytest.mark.parametrize("semantics", ["any", "next", "contiguous"])
def test_across_a_negation_at_larger_scale(semantics: str) -> None:
    guarded_compiled_equals_python(semantics, 20_000)


def test_across_a_negation_both_orders_of_a_value_stay_exact() -> None:
    # <> needs the values below and above g within the guard's block: not one suffix.
    table = guarded_events(400, seed=4)
    query = "RETURN g, COUNT(*) PATTERN SEQ(A+, NOT N, B) WHERE A.v <> NEXT(B).v GROUP-BY g WITHIN 20 seconds"
    assert "not <>" in cogra.explain(query)
    engine = Engine(cogra.plan(query, table.schema), table)
    with pytest.warns(cogra.CograPerformanceWarning):
        got = engine.result_table()
    assert_same_result(evaluate_reference(query, table), got, query)
