"""Numbers (docs/language.md, Numbers: exactness and overflow): exact aggregates, overflow,
decimals, NaN and infinity.

``A+`` under skip-till-any-match over n events of distinct times has 2^n - 1 trends
(every non-empty subset, in time order), and every event is in 2^(n-1) of them.  So
counts outgrow int64 at n = 64 and doubles near n = 1024, while the engine must stay
exact whenever the exact value fits the output type, and fail (``on_overflow="error"``,
the default) or give NULL (``on_overflow="null"``) when it does not.  AVG is the
quotient of its sum and count -- exact ones, or (compiled kernels) double approximations
of both -- so it stays accurate past 1e308.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import warnings
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest

import cogra
from cogra.reference import evaluate_reference
from tests.compare import assert_same_result

INT64_MAX = 2**63 - 1


def a_stream(n: int, **columns) -> pa.Table:
    """n events of type A at times 0 .. n-1 (distinct), with extra columns."""
    return pa.table({"type": ["A"] * n, "time": pa.array(range(n), pa.int64()), **columns})


def one(table: pa.Table) -> dict:
    rows = table.to_pylist()
    assert len(rows) == 1, rows
    return rows[0]


def both(query: str, table: pa.Table, **kw) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        got = cogra.evaluate(query, table, **kw)
        want = evaluate_reference(query, table, **kw)
    assert_same_result(got, want, context=query)
    return got


# ---------------------------------------------------------------------------
# Counting: 2^n - 1 trends, n * 2^(n-1) events
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 11])
def test_kleene_plus_counts_match_the_formula_and_the_reference(n: int) -> None:
    xs = [float(3 * i - 7) for i in range(n)]
    out = both("RETURN COUNT(*), COUNT(A), SUM(A.x), AVG(A.x), MIN(A.x), MAX(A.x) PATTERN A+",
               a_stream(n, x=xs))
    assert one(out) == {
        "COUNT(*)": 2**n - 1,
        "COUNT(A)": n * 2 ** (n - 1),
        "SUM(A.x)": 2 ** (n - 1) * sum(xs),
        "AVG(A.x)": sum(xs) / n,
        "MIN(A.x)": min(xs),
        "MAX(A.x)": max(xs),
    }


def test_count_62_is_exact() -> None:
    # 2^62 - 1 is not a double: an engine counting in floats would be off.
    out = cogra.evaluate("RETURN COUNT(*) PATTERN A+", a_stream(62))
    assert one(out) == {"COUNT(*)": 2**62 - 1}
    assert out.schema.field("COUNT(*)").type == pa.int64()


def test_count_63_is_the_int64_maximum() -> None:
    assert one(cogra.evaluate("RETURN COUNT(*) PATTERN A+", a_stream(63))) == {"COUNT(*)": INT64_MAX}


def test_count_64_does_not_fit() -> None:
    with pytest.raises(cogra.AggregateOverflowError, match=r"COUNT\(\*\).*int64"):
        cogra.evaluate("RETURN COUNT(*) PATTERN A+", a_stream(64))


def test_count_70_overflows_error_by_default_null_on_request() -> None:
    query = "RETURN COUNT(*), MIN(A.x), MAX(A.x) PATTERN A+"
    table = a_stream(70, x=[float(i) for i in range(70)])
    with pytest.raises(cogra.AggregateOverflowError, match=r"COUNT\(\*\) does not fit int64"):
        cogra.evaluate(query, table)
    with pytest.raises(cogra.AggregateOverflowError):
        cogra.evaluate(query, table, on_overflow="error")
    out = cogra.evaluate(query, table, on_overflow="null")
    # Only the value that does not fit becomes NULL.
    assert one(out) == {"COUNT(*)": None, "MIN(A.x)": 0.0, "MAX(A.x)": 69.0}


def test_an_overflow_names_its_group_and_size_in_sqls_words() -> None:
    """A Spark user reads the message: a NULL key is ``NULL``, a string a quoted literal,
    and the size the exact value's leading digits and power of ten (2^70 - 1 trends)."""
    query = "RETURN g, h, COUNT(*) PATTERN A+ GROUP-BY g, h"
    table = a_stream(70, g=pa.nulls(70, pa.string()), h=["it's"] * 70)
    with pytest.raises(cogra.AggregateOverflowError) as info:
        cogra.evaluate(query, table)
    assert "of group g = NULL, h = 'it''s' (its exact value has about 1.18 x 10^21)" in str(info.value), info.value


def test_count_of_a_variable_overflows_before_count_star() -> None:
    # n = 62: COUNT(*) = 2^62 - 1 fits, COUNT(A) = 62 * 2^61 does not.
    query = "RETURN COUNT(*), COUNT(A) PATTERN A+"
    with pytest.raises(cogra.AggregateOverflowError, match=r"COUNT\(A\)"):
        cogra.evaluate(query, a_stream(62))
    assert one(cogra.evaluate(query, a_stream(62), on_overflow="null")) == {"COUNT(*)": 2**62 - 1, "COUNT(A)": None}


def test_overflow_in_one_window_only() -> None:
    # Window [0, 100) holds 64 events (overflows), [100, 200) holds 3 (7 trends).
    table = pa.table({"type": ["A"] * 67, "time": list(range(64)) + [100, 101, 102]})
    out = cogra.evaluate("RETURN COUNT(*) PATTERN A+ WITHIN 100 seconds", table, on_overflow="null")
    assert out.to_pylist() == [
        {"COUNT(*)": None, "window_start": 0, "window_end": 100},
        {"COUNT(*)": 7, "window_start": 100, "window_end": 200},
    ]
    with pytest.raises(cogra.AggregateOverflowError, match=r"window \[0, 100\)"):
        cogra.evaluate("RETURN COUNT(*) PATTERN A+ WITHIN 100 seconds", table)


# ---------------------------------------------------------------------------
# Past 1e308: AVG stays exact, SUM and COUNT overflow
# ---------------------------------------------------------------------------

N_BIG = 1100
XS_BIG = [random.Random(7).uniform(-100.0, 100.0) for _ in range(N_BIG)]
XS_BIG[17] = 12345.678  # an outlier, so the mean is not near zero by symmetry


def test_avg_is_exact_past_1e308() -> None:
    table = a_stream(N_BIG, x=XS_BIG)
    exact_mean = sum(Fraction(x) for x in XS_BIG) / N_BIG
    assert N_BIG * 2 ** (N_BIG - 1) > 1e308  # COUNT(A) is beyond every double
    out = one(cogra.evaluate("RETURN AVG(A.x), MIN(A.x), MAX(A.x) PATTERN A+", table))
    assert out["AVG(A.x)"] == pytest.approx(float(exact_mean), rel=1e-12, abs=0)
    assert out["MIN(A.x)"] == min(XS_BIG) and out["MAX(A.x)"] == max(XS_BIG)


def test_avg_of_integers_is_exact_past_1e308() -> None:
    ys = [(i * 7919) % 1000 - 400 for i in range(N_BIG)]
    out = one(cogra.evaluate("RETURN AVG(A.y) PATTERN A+", a_stream(N_BIG, y=ys)))
    assert out["AVG(A.y)"] == float(Fraction(sum(ys), N_BIG))


def test_sum_and_counts_past_1e308_overflow() -> None:
    table = a_stream(N_BIG, x=XS_BIG)
    query = "RETURN COUNT(*), COUNT(A), SUM(A.x), AVG(A.x) PATTERN A+"
    with pytest.raises(cogra.AggregateOverflowError):
        cogra.evaluate(query, table)
    with pytest.raises(cogra.AggregateOverflowError, match=r"SUM\(A.x\) does not fit double"):
        cogra.evaluate("RETURN SUM(A.x) PATTERN A+", table)
    out = one(cogra.evaluate(query, table, on_overflow="null"))
    assert out["COUNT(*)"] is None and out["COUNT(A)"] is None and out["SUM(A.x)"] is None
    assert out["AVG(A.x)"] == pytest.approx(float(sum(Fraction(x) for x in XS_BIG) / N_BIG), rel=1e-12)


# ---------------------------------------------------------------------------
# Integer SUM at the int64 limit
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pattern, values, exact",
    [
        ("A", [2**62, 2**62 - 1], INT64_MAX),           # fits exactly
        ("A", [2**62, 2**62], 2**63),                   # one past
        ("A", [INT64_MAX, 1, -1], INT64_MAX),           # a partial sum overflows, the total fits
        ("A", [-(2**62), -(2**62)], -(2**63)),          # the int64 minimum fits
        ("A", [-(2**63), -1], -(2**63) - 1),            # one below
        ("A+", [2**61, 2**61 - 1], 2**63 - 2),          # each event in 2 of 3 trends
        ("A+", [2**61, 2**61], 2**63),
    ],
)
def test_integer_sum_is_exact_at_the_int64_limit(pattern: str, values: list[int], exact: int) -> None:
    table = a_stream(len(values), x=pa.array(values, pa.int64()))
    query = f"RETURN SUM(A.x) PATTERN {pattern}"
    if -(2**63) <= exact <= INT64_MAX:
        out = both(query, table)
        assert one(out) == {"SUM(A.x)": exact}
        assert out.schema.field("SUM(A.x)").type == pa.int64()
    else:
        with pytest.raises(cogra.AggregateOverflowError, match=r"SUM\(A.x\) does not fit int64"):
            cogra.evaluate(query, table)
        assert one(both(query, table, on_overflow="null")) == {"SUM(A.x)": None}


def test_small_integer_types_sum_to_int64() -> None:
    table = a_stream(3, x=pa.array([100, 120, 127], pa.int8()))
    out = both("RETURN SUM(A.x), MIN(A.x) PATTERN A+", table)
    assert one(out) == {"SUM(A.x)": 4 * 347, "MIN(A.x)": 100}
    assert out.schema.field("SUM(A.x)").type == pa.int64()
    assert out.schema.field("MIN(A.x)").type == pa.int8()


def test_integer_avg_is_the_correctly_rounded_fraction() -> None:
    # A+ over [1, 1, 2]: each event in 4 of the 7 trends: SUM = 16, COUNT(A) = 12.
    out = both("RETURN SUM(A.x), COUNT(A), AVG(A.x) PATTERN A+", a_stream(3, x=[1, 1, 2]))
    assert one(out) == {"SUM(A.x)": 16, "COUNT(A)": 12, "AVG(A.x)": float(Fraction(4, 3))}


# ---------------------------------------------------------------------------
# Floating sums are exact, then rounded once
# ---------------------------------------------------------------------------


def test_float_sum_rounds_once() -> None:
    # The exact sum of the doubles 0.1, 0.2, 0.3 rounds to 0.6 (adding left to right gives
    # 0.6000000000000001).
    table = a_stream(3, x=[0.1, 0.2, 0.3])
    assert one(evaluate_reference("RETURN SUM(A.x) PATTERN A", table)) == {"SUM(A.x)": 0.6}
    assert one(cogra.evaluate("RETURN SUM(A.x) PATTERN A", table)) == {"SUM(A.x)": 0.6}


def test_float_sum_survives_cancellation() -> None:
    table = a_stream(3, x=[1e16, 1.0, -1e16])
    out = one(cogra.evaluate("RETURN SUM(A.x), AVG(A.x) PATTERN A", table))
    assert out == {"SUM(A.x)": 1.0, "AVG(A.x)": 1 / 3}
    out = one(cogra.evaluate("RETURN SUM(A.x) PATTERN A+", table))
    assert out == {"SUM(A.x)": 4.0}  # each event in 4 of the 7 trends


def test_float_sum_is_exact_whatever_other_windows_hold() -> None:
    # The small values need the scale 2^55 (0.1 = 3602879701896397 / 2^55); 1000.0 in
    # another window must not make this window's sum inexact.
    table = pa.table({"type": ["A"] * 4, "time": [1, 2, 3, 100], "x": [0.1, 0.2, 0.3, 1000.0]})
    query = "RETURN SUM(A.x), AVG(A.x) PATTERN A WITHIN 10 seconds"
    want = [(0.6, 0.2, 0, 10), (1000.0, 1000.0, 100, 110)]
    ref = evaluate_reference(query, table)
    assert list(zip(*(ref.column(i).to_pylist() for i in range(4)))) == want
    out = cogra.evaluate(query, table)
    assert list(zip(*(out.column(i).to_pylist() for i in range(4)))) == want


def test_float32_attribute_sums_to_double() -> None:
    out = both("RETURN SUM(A.x), MAX(A.x) PATTERN A+", a_stream(2, x=pa.array([1.5, 0.25], pa.float32())))
    assert one(out) == {"SUM(A.x)": 3.5, "MAX(A.x)": 1.5}
    assert out.schema.field("SUM(A.x)").type == pa.float64()
    assert out.schema.field("MAX(A.x)").type == pa.float32()


# ---------------------------------------------------------------------------
# Decimals
# ---------------------------------------------------------------------------


def test_decimal_sum_is_exact_with_ten_more_digits() -> None:
    values = [Decimal("1.10"), Decimal("2.25"), Decimal("3.05")]
    table = a_stream(3, x=pa.array(values, pa.decimal128(5, 2)))
    out = both("RETURN SUM(A.x), AVG(A.x), MIN(A.x), MAX(A.x) PATTERN A+", table)
    # Each event in 4 of 7 trends: 4 * 6.40.
    assert one(out) == {
        "SUM(A.x)": Decimal("25.60"), "AVG(A.x)": float(Fraction(640, 300)),
        "MIN(A.x)": Decimal("1.10"), "MAX(A.x)": Decimal("3.05"),
    }
    assert out.schema.types == [pa.decimal128(15, 2), pa.float64(), pa.decimal128(5, 2), pa.decimal128(5, 2)]


def test_decimal_sum_beyond_double_precision() -> None:
    # 12 events of decimal(18, 6) near 1.2e11: SUM = 2^11 * sum, about 3e15 with 6
    # decimals (22 significant digits): no double holds it.
    values = [Decimal(f"{123456789012 + 1000 * i}.{(37 * i + 1) % 1000000:06d}") for i in range(12)]
    table = a_stream(12, x=pa.array(values, pa.decimal128(18, 6)))
    out = both("RETURN SUM(A.x) PATTERN A+", table)
    assert out.schema.field("SUM(A.x)").type == pa.decimal128(28, 6)
    exact = 2**11 * sum(values)
    assert one(out)["SUM(A.x)"] == exact
    assert Decimal(float(exact)) != exact


def test_decimal_precision_is_capped_at_38_and_overflow_is_reported() -> None:
    table = a_stream(1, x=pa.array([Decimal("1.10")], pa.decimal128(30, 2)))
    out = both("RETURN SUM(A.x) PATTERN A+", table)
    assert out.schema.field("SUM(A.x)").type == pa.decimal128(38, 2)
    assert one(out) == {"SUM(A.x)": Decimal("1.10")}
    nines = Decimal("9" * 38)
    table = a_stream(2, x=pa.array([nines, nines], pa.decimal128(38, 0)))
    with pytest.raises(cogra.AggregateOverflowError, match=r"decimal128\(38, 0\)"):
        cogra.evaluate("RETURN SUM(A.x) PATTERN A", table)
    assert one(both("RETURN SUM(A.x) PATTERN A", table, on_overflow="null")) == {"SUM(A.x)": None}


# ---------------------------------------------------------------------------
# MIN / MAX keep the input type
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string()])
def test_min_max_of_strings(typ) -> None:
    table = a_stream(4, x=pa.array(["pear", "apple", None, "Zebra"], typ))
    out = both("RETURN MIN(A.x), MAX(A.x) PATTERN A+", table)
    assert one(out) == {"MIN(A.x)": "Zebra", "MAX(A.x)": "pear"}  # code-point order: 'Z' < 'a'
    assert out.schema.types == [typ, typ]


@pytest.mark.parametrize("typ", [pa.timestamp("ms", tz="UTC"), pa.timestamp("us"), pa.timestamp("s", tz="Asia/Tokyo")])
def test_min_max_of_timestamps(typ) -> None:
    values = [dt.datetime(2020, 1, 2), dt.datetime(2019, 5, 1), None, dt.datetime(2019, 12, 31, 23, 59, 59)]
    table = a_stream(4, x=pa.array(values, pa.timestamp(typ.unit)).cast(typ))
    out = both("RETURN MIN(A.x), MAX(A.x) PATTERN A+", table)
    assert out.schema.types == [typ, typ]
    got = [out.column(c).cast(pa.int64()).to_pylist()[0] for c in ("MIN(A.x)", "MAX(A.x)")]
    want = [pa.scalar(v, pa.timestamp(typ.unit)).cast(pa.int64()).as_py() for v in (values[1], values[0])]
    assert got == want


def test_min_max_of_booleans() -> None:
    out = both("RETURN MIN(A.x), MAX(A.x) PATTERN A+", a_stream(3, x=[True, None, False]))
    assert one(out) == {"MIN(A.x)": False, "MAX(A.x)": True}
    assert out.schema.types == [pa.bool_(), pa.bool_()]


def test_min_max_of_dates() -> None:
    table = a_stream(2, x=pa.array([dt.date(2020, 1, 2), dt.date(2019, 1, 1)], pa.date32()))
    out = cogra.evaluate("RETURN MIN(A.x), MAX(A.x) PATTERN A+", table)
    assert one(out) == {"MIN(A.x)": dt.date(2019, 1, 1), "MAX(A.x)": dt.date(2020, 1, 2)}
    assert out.schema.types == [pa.date32(), pa.date32()]


def test_min_max_only_over_the_variable_named() -> None:
    # SEQ(A, B) on a1 b2 a3 b4: trends (a1,b2), (a1,b4), (a3,b4).
    table = pa.table({"type": ["A", "B", "A", "B"], "time": [1, 2, 3, 4], "x": [5, -10, 7, 100]})
    out = both("RETURN MIN(A.x), MAX(A.x), MIN(B.x), MAX(B.x), SUM(B.x) PATTERN SEQ(A, B)", table)
    assert one(out) == {"MIN(A.x)": 5, "MAX(A.x)": 7, "MIN(B.x)": -10, "MAX(B.x)": 100, "SUM(B.x)": 190}


# ---------------------------------------------------------------------------
# NaN and infinities
# ---------------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    "values, expected",
    [
        ([1.0, INF, 2.0], (INF, INF, 1.0, INF)),
        ([1.0, INF, -INF], (NAN, NAN, -INF, INF)),      # inf + -inf is NaN
        ([1.0, NAN, 2.0], (NAN, NAN, 1.0, NAN)),        # NaN is above every number
        ([NAN, -INF, 3.0], (NAN, NAN, -INF, NAN)),
        ([1.0, -INF, None], (-INF, -INF, -INF, 1.0)),   # NULL is skipped
        ([NAN, NAN], (NAN, NAN, NAN, NAN)),
        ([INF, INF], (INF, INF, INF, INF)),
    ],
)
def test_non_finite_floats(values, expected) -> None:
    table = a_stream(len(values), x=pa.array(values, pa.float64()))
    out = one(both("RETURN SUM(A.x), AVG(A.x), MIN(A.x), MAX(A.x) PATTERN A+", table))
    got = (out["SUM(A.x)"], out["AVG(A.x)"], out["MIN(A.x)"], out["MAX(A.x)"])
    for g, w in zip(got, expected):
        assert (math.isnan(g) and math.isnan(w)) or g == w, (got, expected)


def test_non_finite_sum_is_not_an_overflow() -> None:
    # inf is the IEEE result, not an overflow of the exact value: no error.
    table = a_stream(3, x=[1.0, INF, 2.0])
    assert one(cogra.evaluate("RETURN SUM(A.x) PATTERN A+", table, on_overflow="error")) == {"SUM(A.x)": INF}


def test_an_overflow_past_pythons_digit_limit_is_reported_as_an_overflow() -> None:
    """A count of 2**20000 trends has ~6,000 decimal digits, past what Python converts to a
    string (4,300): the error still says how large it is, instead of failing to."""
    n = 20_000
    table = pa.table({"time": np.arange(n, dtype=np.int64)})
    with pytest.raises(cogra.AggregateOverflowError, match=r"about 3\.98 x 10\^6020\)"):
        cogra.evaluate("RETURN COUNT(*) PATTERN A+ SEMANTICS any", table)


@pytest.mark.parametrize("xs", [[0.3, 1e-300, None], [1e-300, 2e-300, 5e-310], [1e300, 1e-300, 3.0]],
                         ids=["tiny-beside-large", "tiny-only", "both-ends"])
def test_floats_whose_exact_scale_is_past_the_double_range(xs) -> None:
    # A float column reaching 1e-300 is summed exactly at a scale near 2**1050, past a
    # double itself: each path still equals the reference (it raised OverflowError).
    table = pa.table({"type": ["A", "A", "B"], "time": [0, 1, 2], "x": pa.array(xs, pa.float64())})
    for query in ("RETURN SUM(A.x), AVG(A.x), MIN(A.x) PATTERN SEQ(A+, B)",
                  "RETURN VAR_POP(A.x), STDDEV(A.x) PATTERN SEQ(A+, B)"):
        want = evaluate_reference(query, table, on_overflow="null")
        for compiled in (None, False):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", cogra.CograPerformanceWarning)
                assert_same_result(cogra.evaluate(query, table, compiled=compiled, on_overflow="null"), want)
