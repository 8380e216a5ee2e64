"""The column-wise finish (cogra.runtime.compiled.finish.by_column) gives the row path's result.

The property tests in test_properties.py already run it against the reference (it is
the default wherever the kernels run); here it is compared with the row path on the
same kernel output, on random queries and on the number ranges where its decoding
rules change (exact residues, values just past 2**64, huge approximations, ties).
"""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cogra
from cogra.datasets import events, stock
from cogra.runtime.compiled.finish import by_column
from tests.compare import assert_same_result
from tests.strategies import cases

COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                    HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def rules(request, monkeypatch) -> str:
    """Every test runs the compiled common cases (common_cases, the numpy rules for the
    keys they leave) and the numpy rules alone."""
    monkeypatch.setattr(by_column, "COMPILED", request.param == "compiled")
    return request.param


def both_paths(query: str, table: pa.Table, **kw) -> tuple[pa.Table, pa.Table]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        columnar = cogra.evaluate(query, table, **kw)
        old = by_column.ENABLED
        by_column.ENABLED = False
        try:
            rows = cogra.evaluate(query, table, **kw)
        finally:
            by_column.ENABLED = old
    return columnar, rows


@settings(max_examples=400, **COMMON)
@given(case=cases())
def test_columnar_equals_row_path(case) -> None:
    q, table = case
    columnar, rows = both_paths(q.text, table, on_overflow="null")
    assert_same_result(columnar, rows, context=f"\nquery:\n{q.text}")


@pytest.mark.parametrize("n", [1, 2, 31, 32, 33, 62, 63, 64, 65, 70, 100, 300])
def test_counts_around_int64(n: int) -> None:
    # A+ under any: 2^n - 1 trends; COUNT(A) = n * 2^(n-1): exact, just past 2**64, huge.
    query = "RETURN COUNT(*), COUNT(A), SUM(A.x), AVG(A.x), SUM(A.f), AVG(A.f), MIN(A.f) PATTERN A+"
    table = pa.table({"type": ["A"] * n, "time": list(range(n)),
                      "x": [7 * i + 1 for i in range(n)], "f": [0.1 * i for i in range(n)]})
    columnar, rows = both_paths(query, table, on_overflow="null")
    assert columnar.equals(rows)
    got = columnar.to_pylist()[0]
    assert got["COUNT(*)"] == (2**n - 1 if n < 64 else None)
    assert got["COUNT(A)"] == (n * 2 ** (n - 1) if n * 2 ** (n - 1) < 2**63 else None)
    want_avg = Fraction(sum(Fraction(0.1 * i) for i in range(n)), n)  # every event in half the trends
    assert got["AVG(A.f)"] == pytest.approx(float(want_avg), rel=1e-12)


def test_overflow_raises_the_row_paths_error() -> None:
    table = events(" ".join(f"a{i}" for i in range(70)))
    with pytest.raises(cogra.AggregateOverflowError, match=r"COUNT\(\*\) does not fit int64"):
        cogra.evaluate("RETURN COUNT(*) PATTERN A+ WITHIN 100 seconds SLIDE 10 seconds", table)


def test_undecided_windows_take_the_row_path_among_decided_ones(monkeypatch) -> None:
    # x = +1, -1, ...: a long window's SUM is 2**(n-1) * 0 -- its |x|-bound is huge, the
    # residue cannot tell (a cancellation): undecided, re-run exactly; short windows decide.
    n = 130
    table = pa.table({"type": ["A"] * n, "time": list(range(n)), "x": [1 - 2 * (i % 2) for i in range(n)]})
    query = "RETURN SUM(A.x), COUNT(*) PATTERN A+ WITHIN 100 seconds SLIDE 10 seconds"
    slow: list[int] = []
    original = by_column._row_path_table

    def spy(engine, fast, subs, wins, out, keyed, keys, *rest):
        slow.append(len(keys))
        return original(engine, fast, subs, wins, out, keyed, keys, *rest)

    monkeypatch.setattr(by_column, "_row_path_table", spy)
    columnar, rows = both_paths(query, table, on_overflow="null")
    assert slow and 0 < slow[0] < columnar.num_rows  # some keys each way
    assert columnar.equals(rows)
    assert columnar.column("SUM(A.x)").to_pylist() == [0] * columnar.num_rows


def test_average_ties_round_to_even() -> None:
    # (a + b) / 2 is often exactly half-way between two doubles: the quotient must be
    # rounded as Fraction -> float does (to even), not as a double division would.
    rng = np.random.default_rng(3)
    prices = np.round(rng.uniform(10, 500, 400), 2)
    table = pa.table({"type": ["A"] * 400, "time": np.repeat(np.arange(200), 2), "p": prices})
    query = "RETURN AVG(A.p), SUM(A.p) PATTERN A WITHIN 1 seconds"
    columnar, rows = both_paths(query, table)
    assert columnar.equals(rows)
    want = [float((Fraction(prices[2 * i]) + Fraction(prices[2 * i + 1])) / 2) for i in range(200)]
    assert columnar.column("AVG(A.p)").to_pylist() == want


@pytest.mark.parametrize("semantics", ["skip-till-any-match", "skip-till-next-match", "contiguous"])
def test_stock_groups_merge_like_the_row_path(semantics: str) -> None:
    # [company] with GROUP-BY sector: two sub-streams per output row are merged.
    query = (f"RETURN sector, COUNT(*), COUNT(A), SUM(A.volume), AVG(A.price), MIN(A.company), MAX(A.price)\n"
             f"PATTERN Stock A+\nSEMANTICS {semantics}\nWHERE [company] AND A.volume < 2000\n"
             f"GROUP-BY sector\nWITHIN 2 minutes SLIDE 10 seconds")
    columnar, rows = both_paths(query, stock(3000), on_overflow="null")
    assert_same_result(columnar, rows)
    assert columnar.num_rows > 100


@settings(max_examples=40, **COMMON)
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(["timestamp", "int"]))
def test_timestamps_and_strings(seed: int, kind: str) -> None:
    rng = np.random.default_rng(seed)
    n = 40
    t = np.sort(rng.integers(0, 60, n))
    time = pa.array(t * 1_000_000, pa.timestamp("us")) if kind == "timestamp" else pa.array(t, pa.int64())
    table = pa.table({"type": rng.choice(["A", "B"], n), "time": time,
                      "name": rng.choice(["x", "y", None], n), "when": pa.array(t * 1000, pa.timestamp("ms"))})
    query = ("RETURN COUNT(*), MIN(A.name), MAX(B.name), MAX(B.when) PATTERN SEQ(A+, B) "
             "WITHIN 20 seconds SLIDE 5 seconds")
    columnar, rows = both_paths(query, table, on_overflow="null")
    assert columnar.equals(rows)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.one_of(st.text(max_size=6), st.none()), min_size=1, max_size=8), data=st.data())
def test_group_column_equals_arrow_take(values, data) -> None:
    """The compiled string gather gives Arrow's take: unicode, empty strings, a NULL group
    (taken by Arrow), every row count including none."""
    distinct = pa.array(values, type=pa.string())
    gid = np.array(data.draw(st.lists(st.integers(0, len(values) - 1), max_size=40)), np.int64)
    got = by_column.group_column(distinct, gid)
    assert got.type == pa.string()
    assert got.to_pylist() == distinct.take(pa.array(gid, pa.int64())).to_pylist()
    got.validate(full=True)


@settings(max_examples=100, deadline=None)
@given(width=st.integers(0, 9), wide=st.booleans(), data=st.data())
def test_group_column_of_one_width_equals_arrow_take(width: int, wide: bool, data) -> None:
    """Values of one byte length (ticker-like keys) are copied a constant length per row:
    still Arrow's take, for empty values and two-byte characters too."""
    chars, size = (st.sampled_from(["é", "ß"]), width // 2) if wide else (st.sampled_from(["a", "Z", "0"]), width)
    values = data.draw(st.lists(st.text(chars, min_size=size, max_size=size), min_size=1, max_size=6))
    distinct = pa.array(values, type=pa.string())
    gid = np.array(data.draw(st.lists(st.integers(0, len(values) - 1), max_size=40)), np.int64)
    got = by_column.group_column(distinct, gid)
    assert got.to_pylist() == distinct.take(pa.array(gid, pa.int64())).to_pylist()
    got.validate(full=True)


def test_group_column_of_other_types_is_taken() -> None:
    distinct = pa.array([3, 1, 2], pa.int32())
    assert by_column.group_column(distinct, np.array([2, 2, 0])).to_pylist() == [2, 2, 3]
