"""Inputs a careful user or an attacker tries: each gets the right answer (the reference's)
or a cogra error naming the problem -- never a crash of another kind, never a silently
different number."""

from __future__ import annotations

import decimal
import warnings

import numpy as np
import pyarrow as pa
import pytest

import cogra
from cogra.reference import evaluate_reference


def table(**columns) -> pa.Table:
    n = len(next(iter(columns.values())))
    return pa.table({"type": ["A"] * n, "time": list(range(1, n + 1)), **columns})


def both(query: str, events: pa.Table) -> list:
    """cogra.evaluate's rows, checked against the reference's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        got = cogra.evaluate(query, events).to_pylist()
        assert got == evaluate_reference(query, events).to_pylist(), query
    return got


# -- conditions that crashed at evaluation ------------------------------------------------

def test_is_true_and_is_false() -> None:
    events = table(b=[True, False, None, True])
    assert both("RETURN COUNT(*) PATTERN A+ WHERE A.b IS TRUE", events) == [{"COUNT(*)": 3}]
    assert both("RETURN COUNT(*) PATTERN A+ WHERE A.b IS NOT FALSE", events) == [{"COUNT(*)": 7}]
    with pytest.raises(cogra.QueryError, match="IS TRUE needs a condition, but A.n is a number"):
        cogra.evaluate("RETURN COUNT(*) PATTERN A+ WHERE A.n IS TRUE", table(n=[1]))


def test_an_empty_in_list_is_a_query_error_with_position() -> None:
    with pytest.raises(cogra.QueryError, match="IN needs at least one value") as info:
        cogra.parse("RETURN COUNT(*) PATTERN A+ WHERE A.n IN ()")
    assert (info.value.line, info.value.column) == (1, 34)


@pytest.mark.parametrize("condition, count", [
    ("A.n * 100000000000000000000 > 0", 7),           # a literal past int64: exact
    ("A.n > -9223372036854775809", 7),                 # ... on the other side
    ("A.n + 9223372036854775807 > 0", 7),              # int64 arithmetic that would wrap
    ("A.n * 4611686018427387904 < 0", 0),              # 2**62 * n: no wrap to negative
    ("-A.m > 0", 1),                                   # -(-2**63)
    ("A.n % 9223372036854775808 = A.n", 7),
    ("A.n BETWEEN SYMMETRIC 3 AND 1", 7),
    ("A.n BETWEEN 3 AND 1", 0),
])
def test_integer_arithmetic_is_exact(condition, count) -> None:
    events = table(n=[1, 2, 3], m=[-(2**63), 0, 5])
    want = [{"COUNT(*)": count}] if count else []
    assert both(f"RETURN COUNT(*) PATTERN A+ WHERE {condition}", events) == want


def test_wide_decimals_compare_exactly() -> None:
    d = pa.array([decimal.Decimal(12345678901234567890), decimal.Decimal(12345678901234567891)],
                 pa.decimal128(38, 0))
    events = table(d=d)
    assert both("RETURN COUNT(*) PATTERN A+ WHERE A.d = 12345678901234567890", events) == [{"COUNT(*)": 1}]
    assert both("RETURN COUNT(*) PATTERN A+ WHERE A.d > 12345678901234567890.5", events) == [{"COUNT(*)": 1}]
    tenths = table(d=pa.array([decimal.Decimal("0.1"), decimal.Decimal("0.3")], pa.decimal128(20, 18)))
    assert both("RETURN COUNT(*) PATTERN A+ WHERE A.d + 0.2 = 0.3", tenths) == [{"COUNT(*)": 1}]


def test_only_is_null_applies_to_a_list_column() -> None:
    events = table(l=pa.array([[1], None, [2]]))
    assert both("RETURN COUNT(*) PATTERN A+ WHERE A.l IS NULL", events) == [{"COUNT(*)": 1}]
    with pytest.raises(cogra.QueryError, match="only IS \\[NOT\\] NULL applies"):
        cogra.evaluate("RETURN COUNT(*) PATTERN A+ WHERE A.l = NEXT(A).l", events)


def test_half_precision_floats() -> None:
    events = table(h=pa.array(np.array([1, 2, 3], np.float16)))
    assert both("RETURN SUM(A.h), MIN(A.h), MAX(A.h) PATTERN A+ WHERE A.h > 1.5", events) == \
        [{"SUM(A.h)": 10.0, "MIN(A.h)": 2.0, "MAX(A.h)": 3.0}]


def test_uint64_extremes_fit_their_column() -> None:
    events = table(u=pa.array([2**63 + 5, 1, 2**64 - 1], pa.uint64()))
    assert both("RETURN MAX(A.u), MIN(A.u) PATTERN A", events) == [{"MAX(A.u)": 2**64 - 1, "MIN(A.u)": 1}]


# -- limits: a QueryError or DataError that names them --------------------------------------

def test_more_variables_than_the_kernels_hold() -> None:
    alternatives = " | ".join(f"A V{i}" for i in range(65))
    with pytest.raises(cogra.QueryError, match="binds 65 variables; cogra evaluates patterns of at most 64"):
        cogra.evaluate(f"RETURN COUNT(*) PATTERN ({alternatives})", table(n=[1]))
    sixty_four = " | ".join(f"A V{i}" for i in range(64))
    assert both(f"RETURN COUNT(*) PATTERN ({sixty_four})", table(n=[1, 2])) == [{"COUNT(*)": 128}]


def test_a_window_longer_than_int64_microseconds() -> None:
    with pytest.raises(cogra.QueryError, match="longer than the longest window") as info:
        cogra.parse("RETURN COUNT(*) PATTERN A+ WITHIN 9223372036854775808 sec")
    assert info.value.line == 1
    cogra.parse("RETURN COUNT(*) PATTERN A+ WITHIN 100000000 days")  # ~274,000 years: fine


@pytest.mark.parametrize("evaluate", [cogra.evaluate, evaluate_reference])
def test_times_at_the_ends_of_int64(evaluate) -> None:
    events = pa.table({"type": ["A", "A"], "time": [-(2**63 - 1), 2**63 - 1]})
    with pytest.raises(cogra.DataError, match="past the 64-bit range of times"):
        evaluate("RETURN COUNT(*) PATTERN A+ WITHIN 1 sec", events)
    assert cogra.evaluate("RETURN COUNT(*) PATTERN A+", events).to_pylist() == [{"COUNT(*)": 3}]


def test_second_timestamps_past_the_microsecond_range() -> None:
    events = pa.table({"type": ["A", "A"],
                       "time": pa.array([9_300_000_000_000, 9_300_000_000_001], pa.timestamp("s"))})
    with pytest.raises(cogra.DataError, match="beyond the range of microsecond timestamps"):
        cogra.evaluate("RETURN COUNT(*) PATTERN A+ WITHIN 1 hour", events)


# -- nesting ---------------------------------------------------------------------------------

@pytest.mark.parametrize("query", [
    "RETURN COUNT(*) PATTERN A+ WHERE " + "(" * 99 + "A.n > 0" + ")" * 99,
    "RETURN COUNT(*) PATTERN " + "(" * 99 + "A" + ")" * 99,
    "RETURN COUNT(*) PATTERN " + "SEQ(" * 50 + "A" + "".join(f", A B{i})" for i in range(50)),
    "RETURN COUNT(*) PATTERN A" + "+" * 99,
    "RETURN COUNT(*) PATTERN A+ WHERE (" + " OR ".join(["A.n > 0"] * 1500) + ")",
    "RETURN COUNT(*) PATTERN A+ WHERE A.n" + " + 1" * 1500 + " > 0",
])
def test_nesting_a_person_could_write(query) -> None:
    both(query, table(n=[1, 2]))  # the engine and the reference agree, neither crashes


@pytest.mark.parametrize("query, column", [
    ("RETURN COUNT(*) PATTERN A+ WHERE " + "(" * 200 + "A.n > 0" + ")" * 200, 134),
    ("RETURN COUNT(*) PATTERN " + "SEQ(" * 247 + "A" + ", B)" * 247, 428),
    ("RETURN COUNT(*) PATTERN A" + "+" * 991, 126),
])
def test_deeper_nesting_is_a_query_error_with_position(query, column) -> None:
    with pytest.raises(cogra.QueryError, match="nests more than 100 levels deep") as info:
        cogra.parse(query)
    assert (info.value.line, info.value.column) == (1, column)


def test_the_recursion_limit_is_restored() -> None:
    import sys

    before = sys.getrecursionlimit()
    cogra.evaluate("RETURN COUNT(*) PATTERN A+ WHERE " + "(" * 99 + "A.n > 0" + ")" * 99, table(n=[1]))
    assert sys.getrecursionlimit() == before


# -- unbounded work ----------------------------------------------------------------------

def test_windows_per_event_past_the_limit_are_refused_before_any_work() -> None:
    events = table(n=[1])
    with pytest.raises(cogra.DataError, match=r"WITHIN 1 hour SLIDE 1 ms puts every event in "
                       r"3,600,000 windows, more than the limit of 100,000"):
        cogra.evaluate("RETURN COUNT(*) PATTERN A+ WITHIN 1 hour SLIDE 1 ms", events)
    with pytest.raises(cogra.DataError, match="spark.cogra.maxWindowsPerEvent"):
        cogra.evaluate_batches("RETURN COUNT(*) PATTERN A+ WITHIN 1 day SLIDE 1 ms", [events.to_batches()[0]])
    out = cogra.evaluate("RETURN COUNT(*) PATTERN A+ WITHIN 10 sec SLIDE 1 ms", events,
                         max_windows_per_event=10_000)
    assert out.num_rows == 10_000
