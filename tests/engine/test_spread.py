"""The spread aggregates (VAR_POP, VAR_SAMP / VARIANCE, STDDEV_POP, STDDEV_SAMP / STDDEV;
docs/language.md, Aggregates): each engine path equals the literal reference, to 1e-12
relative, on random queries; exact where counts of trends pass 1e308 and where the mean
dwarfs the spread; NULL, NaN and the names as Spark SQL has them."""

from __future__ import annotations

import decimal
import math
import statistics
import warnings
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cogra
from cogra.language.ast import AggFunc
from cogra.reference import evaluate_reference
from cogra.runtime.compiled import kernel_driver
from cogra.runtime.compiled.windows import chunked, sliding
from cogra.runtime.engine import Engine
from cogra.runtime.physical import WindowRun, physical_plan
from cogra.runtime.spread import sqrt_rounded, variance
from tests.compare import assert_same_result
from tests.strategies import cases

SPREAD_NAMES = ("VAR_POP", "VAR_SAMP", "VARIANCE", "STDDEV_POP", "STDDEV_SAMP", "STDDEV")


def _close12(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    return a == b


def check(text: str, table: pa.Table) -> None:
    """Every engine path equals the reference; the spread columns to 1e-12 relative."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        warnings.simplefilter("ignore", cogra.CograPerformanceWarning)
        want = evaluate_reference(text, table, on_overflow="null")
        for compiled in (None, False, True):
            try:
                got = cogra.evaluate(text, table, on_overflow="null", compiled=compiled)
            except cogra.CograError as refused:  # (NaN, decimals: the kernels refuse them)
                assert compiled and "compiled=True, but" in str(refused), refused
                continue
            context = f"\ncompiled={compiled}\nquery:\n{text}\nstream:\n{table.to_pylist()}"
            assert_same_result(got, want, context=context)
            spreads = [c for c in got.column_names if c.split("(")[0] in SPREAD_NAMES]
            for col in spreads:
                g, w = got.column(col).to_pylist(), want.column(col).to_pylist()
                assert all(_close12(a, b) for a, b in zip(g, w)), (col, g, w, context)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=cases(spreads=True))
def test_spreads_equal_the_reference(case) -> None:
    q, table = case
    check(q.text, table)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=cases(spreads=True, nan=True))
def test_spreads_with_nan_equal_the_reference(case) -> None:
    q, table = case
    check(q.text, table)


def _subsets_table(values: list[float]) -> pa.Table:
    n = len(values)
    return pa.table({"type": ["A"] * n + ["B"], "time": list(range(n + 1)), "x": values + [None]},
                    schema=pa.schema([("type", pa.string()), ("time", pa.int64()), ("x", pa.float64())]))


def test_a_variance_over_more_trends_than_a_double_counts_is_exact() -> None:
    # SEQ(A+, B) under any over m A events and one B: a trend per non-empty subset of the
    # A events, each A event in 2**(m-1) of them -- the multiset is every value 2**(m-1)
    # times, so its variance is the values' own.  m = 1,500 puts the counts near 2**1500,
    # past a double; the values sit at 1e9 with spreads of 1e-3 (the one-pass formula in
    # doubles would lose every digit).
    rng = np.random.default_rng(7)
    values = [1e9 + float(d) for d in np.round(rng.random(1500), 3)]
    table = _subsets_table(values)
    got = cogra.evaluate("RETURN COUNT(*), VAR_POP(A.x), VAR_SAMP(A.x), STDDEV_POP(A.x), STDDEV(A.x) "
                         "PATTERN SEQ(A+, B)", table, on_overflow="null").to_pylist()[0]
    exact = [Fraction(v) for v in values]
    m = len(exact)
    pop = Fraction(statistics.pvariance(exact))
    n = m * 2 ** (m - 1)  # values over every trend
    s1, s2 = 2 ** (m - 1) * sum(exact), 2 ** (m - 1) * sum(x * x for x in exact)
    samp = (n * s2 - s1 * s1) / (n * (n - 1))
    assert got["COUNT(*)"] is None  # 2**1500 - 1 trends: past int64
    assert got["VAR_POP(A.x)"] == float(pop)
    assert got["VAR_SAMP(A.x)"] == float(samp)
    with decimal.localcontext() as ctx:
        ctx.prec = 80
        root = (decimal.Decimal(pop.numerator) / decimal.Decimal(pop.denominator)).sqrt()
    assert math.isclose(got["STDDEV_POP(A.x)"], float(root), rel_tol=1e-15)
    assert got["STDDEV(A.x)"] == sqrt_rounded(samp)


def test_null_for_too_few_values_and_nan_for_non_finite_ones() -> None:
    schema = pa.schema([("type", pa.string()), ("time", pa.int64()), ("x", pa.float64()), ("g", pa.int64())])
    table = pa.table({"type": ["A", "B", "A", "B", "A", "A", "B", "A", "B"],
                      "time": [0, 1, 2, 3, 4, 5, 6, 7, 8],
                      "x": [None, None, 2.0, None, 1.0, math.inf, None, 5.0, None],
                      "g": [1, 1, 2, 2, 3, 3, 3, 4, 4]}, schema=schema)
    rows = cogra.evaluate("RETURN g, VAR_POP(A.x), VAR_SAMP(A.x), STDDEV_POP(A.x), STDDEV_SAMP(A.x) "
                          "PATTERN SEQ(A, B) SEMANTICS contiguous WHERE [g] GROUP-BY g", table).to_pylist()
    by_g = {r["g"]: list(r.values())[1:] for r in rows}
    assert by_g[1] == [None, None, None, None]  # no value
    assert by_g[2] == [0.0, None, 0.0, None]  # one value: no sample spread
    assert by_g[4] == [0.0, None, 0.0, None]
    # g=3 has the one trend (inf, B) under contiguous: NaN, as Spark's var_pop of [inf];
    # a sample of one value stays NULL.
    assert math.isnan(by_g[3][0]) and math.isnan(by_g[3][2]) and by_g[3][1] is None and by_g[3][3] is None
    rows = cogra.evaluate("RETURN g, VAR_POP(A.x), STDDEV_SAMP(A.x), AVG(A.x) PATTERN SEQ(A+, B) "
                          "WHERE [g] GROUP-BY g", table).to_pylist()
    g3 = next(r for r in rows if r["g"] == 3)
    assert math.isnan(g3["VAR_POP(A.x)"]) and math.isnan(g3["STDDEV_SAMP(A.x)"]) and g3["AVG(A.x)"] == math.inf


@pytest.mark.parametrize("column", [pa.array([3, -1, 4, 1, 5], pa.int64()),
                                    pa.array([decimal.Decimal("3.25"), decimal.Decimal("-1.50"), None,
                                              decimal.Decimal("1.00"), decimal.Decimal("5.75")], pa.decimal128(6, 2)),
                                    pa.array([0.1, 0.2, 0.3, None, 1e-300], pa.float64())],
                         ids=["int64", "decimal", "float64"])
def test_integers_decimals_and_floats_spread_exactly(column: pa.Array) -> None:
    table = pa.table({"type": ["S"] + ["A"] * 5 + ["B"], "time": list(range(7)),
                      "x": pa.concat_arrays([pa.array([None], column.type), column, pa.array([None], column.type)])})
    text = ("RETURN VAR_POP(A.x), VARIANCE(A.x), STDDEV_POP(A.x), STDDEV(A.x) PATTERN SEQ(S, A+, B) "
            "SEMANTICS contiguous")
    got = cogra.evaluate(text, table).to_pylist()[0]
    values = [Fraction(v) for v in column.to_pylist() if v is not None]
    # (one trend: S, every A event, B)
    pop, samp = Fraction(statistics.pvariance(values)), Fraction(statistics.variance(values))
    assert list(got.values()) == [float(pop), float(samp), sqrt_rounded(pop), sqrt_rounded(samp)]
    assert cogra.evaluate(text, table).schema.types == [pa.float64()] * 4
    check(text, table)


def test_the_names_are_spark_sqls() -> None:
    q = cogra.parse("RETURN variance(A.x), Stddev(A.x), var_samp(A.x) AS v PATTERN A+")
    assert [i.value.func.value for i in q.returns] == ["VAR_SAMP", "STDDEV_SAMP", "VAR_SAMP"]
    assert [i.name if hasattr(i, "name") else i.text for i in q.returns][:2] == ["variance(A.x)", "Stddev(A.x)"]
    with pytest.raises(cogra.QueryError, match=r"VAR_POP needs a variable's attribute, e.g. VAR_POP\(A.attr\)"):
        cogra.parse("RETURN VAR_POP(A) PATTERN A+")
    table = pa.table({"type": ["A"], "time": [0], "s": ["x"]})
    with pytest.raises(cogra.CograError, match=r"line 1, column 8: STDDEV_POP\(A.s\) needs a numeric attribute, but s is string"):
        cogra.evaluate("RETURN STDDEV_POP(A.s) PATTERN A+", table)


def test_the_compiled_kernels_evaluate_spreads() -> None:
    table = _subsets_table([1.0, 2.0, 4.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", cogra.CograPerformanceWarning)
        got = cogra.evaluate("RETURN VAR_POP(A.x) PATTERN SEQ(A+, B)", table, compiled=True)
    # Trends: the 7 non-empty subsets of {1, 2, 4}; each value in 4 of them.
    assert got.column(0).to_pylist() == [float(statistics.pvariance([1, 2, 4] * 4))]
    assert "kernels    compiled" in cogra.explain("RETURN COUNT(*), STDDEV(A.x) PATTERN SEQ(A+, B)", table.schema)


def test_an_entry_the_kernels_do_not_evaluate_runs_on_the_python_executors(monkeypatch) -> None:
    # The registry's seam for an aggregate added without kernel channels: ``kernels=False``.
    from dataclasses import replace

    from cogra.runtime import aggregates

    monkeypatch.setitem(aggregates.ENTRIES, AggFunc.VAR_POP,
                        replace(aggregates.ENTRIES[AggFunc.VAR_POP], kernels=False))
    table = _subsets_table([1.0, 2.0, 4.0])
    query = "RETURN VAR_POP(A.x) AS registry_seam PATTERN SEQ(A+, B)"  # (a query no other test planned)
    with pytest.warns(cogra.CograPerformanceWarning, match="VAR_POP run on the exact Python executors"):
        got = cogra.evaluate(query, table)
    assert got.column(0).to_pylist() == [float(statistics.pvariance([1, 2, 4] * 4))]
    with pytest.raises(cogra.CograError, match="compiled=True, but the compiled kernels do not evaluate this "
                                               "query: VAR_POP run on the exact Python executors"):
        cogra.evaluate(query, table, compiled=True)
    assert "VAR_POP(A.x): no compiled kernel evaluates VAR_POP" in cogra.explain(query, table.schema)


# ---------------------------------------------------------------------------------------
# The kernels' routes, on data large enough to reach each (the Python executors are the
# oracle: the reference cannot enumerate 2**40 trends)
# ---------------------------------------------------------------------------------------


def _events(n: int, seed: int, *, ties: bool = False) -> pa.Table:
    """Prices (two decimals: float scales near 2**46, split sums, four-limb squares), small
    and wide integers with NULLs and negatives, integral floats (one-limb squares)."""
    rng = np.random.default_rng(seed)
    wide = rng.integers(-(2**40), 2**40, n)
    small = pa.array(rng.integers(-50, 50, n), mask=rng.random(n) < 0.05)
    return pa.table({"type": rng.choice(["A", "B", "X"], n, p=[0.6, 0.3, 0.1]),
                     "time": np.arange(n) // (4 if ties else 1), "g": rng.integers(0, 4, n),
                     "price": np.round(rng.normal(100, 15, n), 2), "i": small, "w": wide,
                     "f": rng.integers(0, 1000, n).astype(np.float64)})


def _kernels_equal_python(query: str, table: pa.Table, *, exact_runs: bool | None = False) -> Engine:
    """The compiled engine's result equals the Python executors', spreads to 1e-12;
    ``exact_runs``: whether windows had to re-run exactly (None: either)."""
    engine = Engine(cogra.plan(query, table.schema), table)
    got = engine.result_table(on_overflow="null")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograPerformanceWarning)
        want = cogra.evaluate(query, table, compiled=False, on_overflow="null")
    stats = engine.stats
    assert stats["windows_fast"] + stats["windows_exact"] == stats["windows"] and stats["windows_fast"] > 0, stats
    if exact_runs is not None:
        assert (stats["windows_exact"] > 0) == exact_runs, stats
    assert got.schema == want.schema and got.num_rows == want.num_rows > 0
    for name in got.column_names:
        g, w = got.column(name).to_pylist(), want.column(name).to_pylist()
        bad = [(k, a, b) for k, (a, b) in enumerate(zip(g, w)) if not _close12(a, b)]
        assert not bad, (name, bad[:5], len(bad), query)
    return engine


SPREADS = "VAR_POP(A.price), STDDEV(B.price), VARIANCE(A.i), STDDEV_POP(B.w), VAR_SAMP(A.f)"


@pytest.mark.parametrize("semantics", ["any", "next", "contiguous"])
def test_spreads_on_the_per_window_kernels(semantics: str) -> None:
    # Short windows: counts stay below 2**31 under any, so every window is decided on
    # the kernels.
    window = "WITHIN 8 seconds SLIDE 4 seconds" if semantics == "any" else "WITHIN 400 seconds SLIDE 100 seconds"
    _kernels_equal_python(f"RETURN g, COUNT(*), {SPREADS}, AVG(A.price) PATTERN SEQ(A+, B) "
                          f"SEMANTICS {semantics} WHERE [g] GROUP-BY g {window}", _events(6000, 1))


def test_spreads_on_shared_panes_and_lanes(monkeypatch) -> None:
    monkeypatch.setattr(sliding, "MIN_EVENTS_PER_WINDOW", 0)
    took = []
    original = sliding.plan
    monkeypatch.setattr(sliding, "plan", lambda *args: took.append(original(*args)) or took[-1])
    _kernels_equal_python(f"RETURN COUNT(*), {SPREADS} PATTERN SEQ(A+, B) SEMANTICS next "
                          "WITHIN 400 seconds SLIDE 20 seconds", _events(8000, 2))
    assert any(found is not None for found in took)


@pytest.mark.parametrize("ring", [True, False])
def test_spreads_on_the_mixed_grained_kernels(monkeypatch, ring: bool) -> None:
    # Kept events (a predicate on NEXT(A)): the mixed-grained kernels, per window, ring
    # or grouped.
    monkeypatch.setattr(sliding, "RING", ring)
    monkeypatch.setattr(sliding, "MIN_PANES_PER_WINDOW", 1)
    _kernels_equal_python(f"RETURN g, COUNT(*), {SPREADS} PATTERN SEQ(A+, B) SEMANTICS next "
                          "WHERE [g] AND A.price < NEXT(A).price GROUP-BY g WITHIN 300 seconds SLIDE 100 seconds",
                          _events(6000, 3))


def test_spreads_in_chunks_of_one_window() -> None:
    table = _events(chunked.MIN_ROWS + 5000, 4)
    query = "RETURN COUNT(*), VAR_POP(A.price), STDDEV(B.i), VARIANCE(B.w) PATTERN SEQ(A+, B) SEMANTICS contiguous"
    assert [c.run for c in physical_plan(cogra.plan(query, table.schema)).windows.runs][0] is WindowRun.CHUNKS
    _kernels_equal_python(query, table)


def test_spreads_from_generated_kernels(monkeypatch) -> None:
    from cogra.runtime.compiled.codegen import kernel_cache

    monkeypatch.setattr(kernel_driver, "SPECIALIZE_MIN_EVENTS", 0)
    monkeypatch.setattr(sliding, "SPECIALIZE_MIN_EVENTS", 0)
    loaded = []
    original = kernel_cache.kernel_for
    monkeypatch.setattr(kernel_cache, "kernel_for", lambda shape, *a, **k: loaded.append(shape) or original(shape, *a, **k))
    _kernels_equal_python(f"RETURN g, COUNT(*), {SPREADS} PATTERN SEQ(A+, B) SEMANTICS next WHERE [g] "
                          "GROUP-BY g WITHIN 200 seconds SLIDE 50 seconds", _events(3000, 5))
    assert loaded


def test_windows_whose_counts_pass_the_limbs_re_run_exactly() -> None:
    # Ties in time let next's trends branch: 2**40 trends and more per window, past what
    # the squares' limbs hold exactly -- those windows re-run on the exact path, the
    # others are decided on the kernels.
    table = _events(3000, 6, ties=True)
    engine = _kernels_equal_python("RETURN COUNT(*), VAR_POP(A.price), STDDEV(A.i) PATTERN SEQ(A+, B) SEMANTICS next "
                                   "WITHIN 60 seconds SLIDE 10 seconds", table, exact_runs=True)
    assert engine.stats["windows_fast"] >= 10


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-10**6, 10**6), min_size=1, max_size=30), st.integers(1, 10**4),
       st.integers(1, 2**80), st.booleans())
def test_variance_from_sums_is_the_definition(xs: list[int], weight: int, scale: int, sample: bool) -> None:
    # Every value ``weight`` times (a value's trends), scaled by ``scale``.
    values = [Fraction(x, scale) for x in xs for _ in range(weight)]
    n = len(values)
    got = variance(n, weight * sum(xs), weight * sum(x * x for x in xs), scale, sample)
    if sample and n == 1:
        assert got is None
        return
    mean = sum(values) / n
    assert got == sum((v - mean) ** 2 for v in values) / (n - 1 if sample else n)


@settings(max_examples=500, deadline=None)
@given(st.fractions(min_value=0, max_value=10**30, max_denominator=10**30))
def test_square_roots_are_rounded_once(x: Fraction) -> None:
    with decimal.localcontext() as ctx:
        ctx.prec = 100
        want = float((decimal.Decimal(x.numerator) / decimal.Decimal(x.denominator)).sqrt())
    assert sqrt_rounded(x) == want


def test_a_stream_holds_spread_windows_and_closes_each_as_the_batch_result() -> None:
    # Carried sums of squares could outgrow the kernels' limbs with no events left to
    # re-run from: a spread query's open windows are held and evaluated whole when they
    # close, through a snapshot and restore.
    from cogra.runtime.online import OnlineEvaluation, state_kind
    from cogra.runtime.stream import unsupported_reason

    rng = np.random.default_rng(3)
    n = 3000
    table = pa.table({"type": rng.choice(["A", "B", "X"], n), "time": np.sort(rng.integers(0, 600, n)),
                      "g": rng.integers(0, 3, n), "x": np.round(rng.normal(100, 15, n), 2)})
    text = ("RETURN g, COUNT(*), VAR_POP(A.x), STDDEV(B.x) PATTERN SEQ(A+, B) SEMANTICS next "
            "WHERE [g] GROUP-BY g WITHIN 60 seconds SLIDE 20 seconds")
    assert "a spread (VAR_*, STDDEV_*)" in unsupported_reason(cogra.plan(text, table.schema))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograPerformanceWarning)
        want = cogra.evaluate(text, table, on_overflow="null")
        online = OnlineEvaluation(text, table.schema, on_overflow="null")
        assert online.kind == state_kind(online.plan) == "held"
        parts = []
        times = table.column("time").to_numpy()
        cuts = [0, *(int(np.searchsorted(times, times[i], "left")) for i in range(700, n, 700)), n]
        for i, (a, z) in enumerate(zip(cuts, cuts[1:])):  # (batches end between timestamps: none is late)
            online.push(table.slice(a, z - a))
            parts.append(online.advance())
            if i == 2:
                restored = OnlineEvaluation(text, table.schema, on_overflow="null")
                restored.restore(online.snapshot())
                online = restored
        parts.append(online.finish())
    got = pa.concat_tables(parts)
    keys = [("window_start", "ascending"), ("g", "ascending")]
    assert want.num_rows > 20
    assert_same_result(got.sort_by(keys), want.sort_by(keys))
