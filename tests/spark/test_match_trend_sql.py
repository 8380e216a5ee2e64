"""MATCH_TREND in Spark SQL (through the JVM shim), the DataFrame API and the plain Python
UDTF registration: every route returns exactly what :func:`cogra.evaluate` returns."""

from __future__ import annotations

import datetime as dt
import json
import math
import pickle
import re

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

import cogra  # noqa: E402
from cogra.examples import EXAMPLES  # noqa: E402
from cogra.spark import udtf as udtf_module  # noqa: E402
from cogra.spark import udtf_analysis  # noqa: E402
from cogra.spark import udtf_routing  # noqa: E402

STOCK_QUERY = """
  RETURN sector, A.company, B.company, AVG(B.price)
  PATTERN SEQ(Stock A+, Stock B+)
  WHERE [A.company] AND [B.company] AND A.price > NEXT(A).price
  GROUP-BY sector, A.company, B.company
  WITHIN 10 minutes SLIDE 10 seconds"""

SIMPLE_QUERY = "RETURN sector, COUNT(*), AVG(B.price) PATTERN SEQ(Stock A, Stock B+) " \
    "GROUP-BY sector WITHIN 10 seconds"


def sql_literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _cell(v):
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return v


def canonical(rows) -> list[tuple]:
    """Rows sorted by their non-float cells (None first), to compare with :func:`same_rows`."""

    def key(row):
        return tuple((0, "") if v is None else (1, v) for v in row if not isinstance(v, float))

    return sorted((tuple(_cell(v) for v in row) for row in rows), key=key)


class Rows(list):
    """Result rows; ``==`` compares floats to 1e-12 relative (AVG of a group may differ in the
    last bit depending on how the engine's input was split; docs/language.md allows 1e-9)."""

    def __eq__(self, other):
        if len(self) != len(other):
            return False
        for a, b in zip(self, other):
            if len(a) != len(b):
                return False
            for x, y in zip(a, b):
                if isinstance(x, float) and isinstance(y, float):
                    if not (math.isclose(x, y, rel_tol=1e-12) or (math.isnan(x) and math.isnan(y))):
                        return False
                elif x != y:
                    return False
        return True

    __hash__ = None  # type: ignore[assignment]


def expected(query: str, table: pa.Table, **kw) -> Rows:
    return Rows(canonical(tuple(r.values()) for r in cogra.evaluate(query, table, **kw).to_pylist()))


def actual(df) -> Rows:
    return Rows(canonical(tuple(r.values()) for r in df.toArrow().to_pylist()))


def stock_table(n: int = 400, seed: int = 0) -> pa.Table:
    from cogra import datasets

    return datasets.stock(n_events=n, seed=seed)


@pytest.fixture(scope="module")
def stock(spark):
    table = stock_table()
    spark.createDataFrame(table).createOrReplaceTempView("stock")
    return table


# ---------------------------------------------------------------------------
# equality with cogra.evaluate
# ---------------------------------------------------------------------------


@pytest.mark.spark
def test_sql_equals_evaluate_on_the_issue_query(spark, stock):
    df = spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(stock), {sql_literal(STOCK_QUERY)})")
    assert df.columns == ["sector", "A.company", "B.company", "AVG(B.price)",
                          "window_start", "window_end"]
    got = actual(df)
    assert got and got == expected(STOCK_QUERY, stock)
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "MapInArrow" in plan and "hashpartitioning(sector" in plan


@pytest.mark.spark
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_report_queries_equal_evaluate(spark, example):
    table = example.data(n_events=600, seed=1)
    view = f"events_{example.name}"
    spark.createDataFrame(table).createOrReplaceTempView(view)
    df = spark.sql(f"SELECT * FROM MATCH_TREND(TABLE({view}), {sql_literal(example.query)})")
    assert actual(df) == expected(example.query, table)


EXTENDED = [  # docs/language.md, Negation and Bounded quantifiers
    # q3 with bounded quantifiers: keys and a predicate on adjacent events over repetitions.
    """RETURN sector, A.company, B.company, COUNT(*), SUM(A.price), AVG(B.price)
       PATTERN SEQ(Stock A{2,}, Stock B{1,3})
       WHERE [A.company] AND [B.company] AND A.price > NEXT(A).price
       GROUP-BY sector, A.company, B.company
       WITHIN 10 minutes SLIDE 1 minute""",
    """RETURN sector, COUNT(*), MIN(A.price) PATTERN (SEQ(Stock A, Stock B)){2,3}
       SEMANTICS next GROUP-BY sector WITHIN 5 minutes""",
    """RETURN sector, COUNT(*), MAX(A.price) PATTERN Stock A{3}
       SEMANTICS contiguous WHERE A.price < NEXT(A).price GROUP-BY sector""",
    # A price over 100 twice with no drop under 50 between, per sector.
    """RETURN sector, COUNT(*), AVG(B.price) PATTERN SEQ(Stock A, NOT Stock N, Stock B)
       WHERE A.price > 100 AND B.price > 100 AND N.price < 50
       GROUP-BY sector WITHIN 5 minutes SLIDE 1 minute""",
    """RETURN sector, COUNT(*) PATTERN (SEQ(Stock A, NOT Stock N, Stock B))+ SEMANTICS next
       WHERE [company] AND N.price < 80 GROUP-BY sector""",
]


@pytest.mark.spark
@pytest.mark.parametrize("query", EXTENDED, ids=["repeat-keys-any", "repeat-seq-next", "repeat-exact-contiguous",
                                                  "not-sliding", "not-kleene-next"])
def test_quantifiers_and_negation_equal_evaluate(spark, query):
    table = stock_table(20_000, seed=5)
    spark.createDataFrame(table).createOrReplaceTempView("stock_quantified")
    # Counts of some groups exceed int64 under any: NULL, as Spark outside ANSI mode.
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        df = spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(stock_quantified), {sql_literal(query)})")
        got = actual(df)
    finally:
        spark.conf.set("spark.sql.ansi.enabled", "true")
    assert got and got == expected(query, table, on_overflow="null")


SPREAD_QUERY = """RETURN sector, COUNT(*), AVG(A.price), VAR_POP(A.price), VARIANCE(B.volume),
    STDDEV_POP(B.price), STDDEV(A.volume) PATTERN SEQ(Stock A+, Stock B)
    SEMANTICS skip-till-next-match WHERE [company] AND A.price < NEXT(A).price
    GROUP-BY sector WITHIN 5 minutes SLIDE 1 minute"""


@pytest.mark.spark
@pytest.mark.parametrize("route", ["auto", "chunked", "sliced", "streamed"])
def test_spread_aggregates_equal_evaluate(spark, route):
    # VAR_*/STDDEV_* run on the Python executors in each task (the kernels keep no sums of
    # squares): the same numbers as cogra.evaluate, to 1e-12, over the shim's partitions,
    # on each worker route -- groups in chunks of 3,000 rows, sliced from 400 (a query
    # the kernels cannot carry is never streamed: "streamed" takes the chunks).
    table = stock_table(20_000, seed=11)
    spark.createDataFrame(table).createOrReplaceTempView("stock_spread")
    settings = {udtf_routing.ROUTE_SETTING: route, udtf_routing.CHUNK_ROWS_SETTING: "3000",
                udtf_routing.SLICE_ROWS_SETTING: "400"} if route != "auto" else {}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        df = spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(stock_spread), {sql_literal(SPREAD_QUERY)})")
        assert [f.dataType.simpleString() for f in df.schema.fields][3:7] == ["double"] * 4
        got = actual(df)
    finally:
        for key in settings:
            spark.conf.unset(key)
    assert len(got) > 50 and got == expected(SPREAD_QUERY, table)


# Absence (docs/language.md) at the sizes users run: each window decides, from
# the blockers of its partition, whatever the variable keys.
ABSENCE = {
    "trailing-any-sliding": """RETURN sector, COUNT(*), MAX(A.price) PATTERN SEQ(Stock A+, NOT Stock N)
        WHERE [company] AND A.price > 100 AND N.volume > 9500 GROUP-BY sector WITHIN 5 minutes SLIDE 1 minute""",
    "leading-next": """RETURN sector, COUNT(*), AVG(B.price) PATTERN SEQ(NOT Stock N, Stock A, Stock B+)
        SEMANTICS next WHERE A.price > 120 AND N.volume > 9000 GROUP-BY sector WITHIN 10 minutes""",
    "both-contiguous-keys": """RETURN sector, A.company, COUNT(*) PATTERN SEQ(NOT Stock M, Stock A+, NOT Stock N)
        SEMANTICS contiguous WHERE [A.company] AND M.volume > 9500 AND N.volume < 500
        GROUP-BY sector, A.company WITHIN 2 minutes""",
}


@pytest.mark.spark
@pytest.mark.parametrize("name", [name if i == 0 else pytest.param(name, marks=pytest.mark.slow)
                                  for i, name in enumerate(ABSENCE)])  # (the rest in the slow suite)
def test_absence_at_scale_equals_evaluate(spark, name):
    query = ABSENCE[name]
    table = stock_table(100_000, seed=7)
    spark.createDataFrame(table).createOrReplaceTempView("stock_absence")
    # Counts of some groups exceed int64 under any: NULL, as Spark outside ANSI mode.
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        got = actual(spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(stock_absence), {sql_literal(query)})"))
    finally:
        spark.conf.set("spark.sql.ansi.enabled", "true")
    assert got and got == expected(query, table, on_overflow="null")
    # Some trends are blocked: the pattern without its NOTs counts more.
    positive = query.replace("NOT Stock M, ", "").replace(", NOT Stock N", "").replace("NOT Stock N, ", "")
    positive = re.sub(r" AND [MN]\.\w+ [<>] \d+", "", positive)
    assert expected(positive, table, on_overflow="null") != got


@pytest.mark.spark
def test_named_arguments_and_renamed_columns(spark, stock):
    renamed = stock.rename_columns(["kind_of_event" if c == "type" else "ts" if c == "time" else c
                                    for c in stock.column_names])
    spark.createDataFrame(renamed).createOrReplaceTempView("stock_renamed")
    df = spark.sql(
        "SELECT * FROM MATCH_TREND(input => TABLE(stock_renamed), "
        f"query => {sql_literal(SIMPLE_QUERY)}, type_column => 'kind_of_event', time_column => 'ts')"
    )
    assert actual(df) == expected(SIMPLE_QUERY, stock)
    positional = spark.sql(
        f"SELECT * FROM MATCH_TREND(TABLE(stock_renamed), {sql_literal(SIMPLE_QUERY)}, "
        "'kind_of_event', 'ts')"
    )
    assert actual(positional) == actual(df)


@pytest.mark.spark
def test_user_partition_by_and_order_by_are_accepted(spark, stock):
    df = spark.sql(
        "SELECT * FROM MATCH_TREND(TABLE(stock) PARTITION BY sector ORDER BY (time), "
        f"{sql_literal(SIMPLE_QUERY)})"
    )
    assert actual(df) == expected(SIMPLE_QUERY, stock)


@pytest.mark.spark
def test_dataframe_api(spark, stock):
    from cogra.spark import match_trend

    df = match_trend(spark.table("stock"), STOCK_QUERY)
    assert actual(df) == expected(STOCK_QUERY, stock)


@pytest.mark.spark
def test_registered_python_udtf(spark, stock):
    """register(spark): the same handler as a session-scoped Arrow Python UDTF (no shim)."""
    from cogra.spark import register

    register(spark, "match_trend_py")
    df = spark.sql(f"SELECT * FROM match_trend_py(TABLE(stock), {sql_literal(STOCK_QUERY)})")
    assert "ArrowEvalPythonUDTF" in df._jdf.queryExecution().executedPlan().toString()
    assert actual(df) == expected(STOCK_QUERY, stock)


@pytest.mark.spark
def test_dataframe_api_without_the_extension(spark, stock, monkeypatch):
    import importlib

    from cogra.spark import match_trend

    session_module = importlib.import_module("cogra.spark.session")
    monkeypatch.setattr(session_module, "has_extension", lambda s: False)
    df = match_trend(spark.table("stock"), SIMPLE_QUERY)
    assert "ArrowEvalPythonUDTF" in df._jdf.queryExecution().executedPlan().toString()
    assert actual(df) == expected(SIMPLE_QUERY, stock)


@pytest.mark.spark
def test_timestamps_and_bad_rows(spark):
    """NULL times and types are skipped (never a failed task); timestamp windows round-trip."""
    base = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    n = 300
    rng = np.random.default_rng(3)
    times = [base + dt.timedelta(seconds=int(s)) for s in np.sort(rng.integers(0, 600, n))]
    times[5] = None
    types = ["Stock"] * n
    types[7] = None
    table = pa.table({
        "type": pa.array(types, pa.string()),
        "time": pa.array(times, pa.timestamp("us", tz="UTC")),
        "sector": [f"s{i % 3}" for i in range(n)],
        "price": rng.random(n) * 10,
    })
    spark.createDataFrame(table).createOrReplaceTempView("ts_events")
    query = "RETURN sector, COUNT(*), MAX(B.price) PATTERN SEQ(Stock A, Stock B) " \
        "GROUP-BY sector WITHIN 1 minute SLIDE 30 seconds"
    df = spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(ts_events), {sql_literal(query)})")
    assert dict(df.dtypes)["window_start"] == "timestamp"
    with pytest.warns(cogra.CograDataWarning):
        want = expected(query, table)
    assert actual(df) == want


@pytest.mark.spark
def test_overflow_follows_ansi_mode(spark):
    """COUNT(*) of A+ over 70 events is 2^70 - 1: an error under ANSI mode, else NULL."""
    table = pa.table({"type": ["Stock"] * 70, "time": list(range(70)), "sector": ["x"] * 70})
    spark.createDataFrame(table).createOrReplaceTempView("many")
    sql = "SELECT * FROM MATCH_TREND(TABLE(many), 'RETURN sector, COUNT(*) PATTERN Stock A+ " \
        "GROUP-BY sector')"
    with pytest.raises(Exception, match="does not fit") as caught:
        spark.sql(sql).collect()
    # The Python part of Spark's message is cogra's, without a traceback before it.
    python_part = str(caught.value).split("Python worker", 1)[-1].lstrip(":. \n")
    assert python_part.startswith("cogra.errors.AggregateOverflowError: MATCH_TREND overflow: COUNT(*) "
                                  "does not fit int64 of group sector = 'x'"), python_part[:300]
    assert "Traceback" not in str(caught.value)
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        assert [tuple(r) for r in spark.sql(sql).collect()] == [("x", None)]
    finally:
        spark.conf.set("spark.sql.ansi.enabled", "true")


@pytest.mark.spark
def test_user_partition_by_evaluates_each_partition_on_its_own(spark):
    """Partitions that hash to one Spark partition stay apart: 3 companies x 2 events give
    3 trends of SEQ(A, B), whatever spark.sql.shuffle.partitions is."""
    table = pa.table({"type": ["Stock"] * 6, "time": [1, 2, 3, 4, 5, 6],
                      "company": ["a", "b", "c", "a", "b", "c"], "price": [1.0] * 6})
    spark.createDataFrame(table).createOrReplaceTempView("three_companies")
    query = "RETURN COUNT(*) PATTERN SEQ(Stock A, Stock B) SEMANTICS next"
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        for n in ("1", "2", "3", "8"):
            spark.conf.set("spark.sql.shuffle.partitions", n)
            df = spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(three_companies) PARTITION BY (company), "
                           f"{sql_literal(query)})")
            assert sorted(r[0] for r in df.collect()) == [1, 1, 1], n
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", previous)


@pytest.mark.spark
def test_equivalence_key_outside_group_by_streams(spark, stock):
    """[company] under GROUP-BY sector: partitions sorted by sector interleave companies."""
    query = ("RETURN sector, COUNT(*) PATTERN SEQ(Stock A, Stock B+) SEMANTICS next "
             "WHERE [company] GROUP-BY sector WITHIN 10 minutes")
    df = spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(stock), {sql_literal(query)})")
    assert actual(df) == expected(query, stock)


@pytest.mark.spark
def test_negative_zero_and_nan_keys_are_one_group_each(spark):
    """As in Spark's GROUP BY (whose hash partitioning agrees): 0.0 = -0.0, NaN = NaN."""
    g = [0.0, -0.0, 0.0, float("nan"), -0.0, float("nan"), 0.0, float("nan")] * 3
    table = pa.table({"type": ["A"] * len(g), "time": list(range(len(g))), "g": g})
    spark.createDataFrame(table).createOrReplaceTempView("signed_zeros")
    query = "RETURN g, COUNT(*) PATTERN SEQ(A X, A Y) GROUP-BY g"
    df = spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(signed_zeros), {sql_literal(query)})")
    got = {("nan" if r[0] != r[0] else r[0]): r[1] for r in df.collect()}
    assert got == {0.0: 15 * 14 // 2, "nan": 9 * 8 // 2}


PUSHED_CONDITIONS = [
    "A.f <> A.f", "A.f = A.f", "NOT (A.f >= 3)", "A.f < 1", "A.f > 0 OR A.f IS NULL", "A.f = 0",
    "A.f BETWEEN -1 AND 1", "A.f IN (0, 3)", "A.x = 'it''s'", "A.x <> 'it''s'", "A.x = 'a\\b'",
    "A.x IS NOT NULL AND NOT (A.f < 2)", "A.n > 1",
]


@pytest.mark.spark
@pytest.mark.parametrize("escaped", ["false", "true"])
def test_the_pushed_filter_keeps_every_row_the_engine_keeps(spark, escaped):
    """NaN, NULL, -0.0 and string escapes: Spark's reading of the pushed filter keeps
    every row the engine's predicate keeps."""
    nan = float("nan")
    table = pa.table({
        "type": ["A"] * 8, "time": list(range(8)),
        "f": pa.array([nan, 1.0, 3.0, -0.0, 0.0, None, nan, 2.5], pa.float64()),
        "x": ["it's", "a\\b", None, "it's", "b", "a\\b", "it''s", "c"],
        "n": [1, 2, None, 3, 4, 5, 6, 7],
    })
    from cogra.spark import match_trend

    spark.createDataFrame(table).createOrReplaceTempView("pushed")
    spark.conf.set("spark.sql.parser.escapedStringLiterals", escaped)
    try:
        for condition in PUSHED_CONDITIONS:
            query = f"RETURN COUNT(*), SUM(A.n) PATTERN A+ WHERE {condition}"
            df = match_trend(spark.table("pushed"), query)  # (its query reaches Spark unescaped)
            want = [tuple(r.values()) for r in cogra.evaluate(query, table).to_pylist()]
            assert [tuple(r) for r in df.collect()] == want, condition
    finally:
        spark.conf.unset("spark.sql.parser.escapedStringLiterals")


@pytest.mark.spark
def test_a_variable_named_like_a_sql_keyword(spark):
    table = pa.table({"type": ["Call", "B", "Call", "B"], "time": [1, 2, 3, 4], "v": [2, 3, 4, 5]})
    spark.createDataFrame(table).createOrReplaceTempView("calls")
    query = "RETURN COUNT(*) PATTERN SEQ(Call+, B) WHERE Call.v > 1 AND Call.v < NEXT(Call).v"
    df = spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(calls), {sql_literal(query)})")
    assert [r[0] for r in df.collect()] == [4]


def recent_diagnostics(spark, wanted: str, seconds: float = 20.0) -> str:
    """The driver's recent MATCH_TREND warnings, once one holds ``wanted`` (the listener
    runs on Spark's listener bus, after the action returns)."""
    import time

    deadline = time.monotonic() + seconds
    while True:
        text = spark._jvm.org.apache.spark.sql.cogra.Diagnostics.recent()
        if wanted in text or time.monotonic() > deadline:
            return text
        time.sleep(0.1)


@pytest.mark.spark
def test_the_driver_logs_skipped_rows_and_types_no_row_has(spark):
    table = pa.table({"type": ["Stock", None, "Stock", "Stock", "Stock"],
                      "time": [1, 2, None, 4, 5], "company": ["a", "a", "a", "b", "b"]})
    spark.createDataFrame(table).createOrReplaceTempView("diagnosed")
    query = "RETURN company, COUNT(*) PATTERN SEQ(Stok A, Stock B) GROUP-BY company"
    assert spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(diagnosed), {sql_literal(query)})").collect() == []
    text = recent_diagnostics(spark, "'Stok'")
    assert "no row of the input has the pattern's type 'Stok' (rows of 'Stock' were read, 5 rows in all)" in text
    assert "1 row(s) with a NULL time and 1 with a NULL type are not events and were skipped" in text


@pytest.mark.spark
def test_a_named_type_column_must_exist(spark, stock):
    from pyspark.errors import AnalysisException

    query = "RETURN COUNT(*) PATTERN Stock A WITHIN 1 minute"
    with pytest.raises(AnalysisException, match="no type column 'kindd' in the input"):
        spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(stock), {sql_literal(query)}, type_column => 'kindd')")


@pytest.mark.spark
def test_a_key_group_past_the_row_limit_fails_naming_the_limit(spark, stock):
    """A mixed-grained query without WITHIN holds its group whole; past
    spark.cogra.worker.maxGroupRows the task fails with a DataError that names the group,
    the limit and the ways out (not a worker out of memory)."""
    query = "RETURN sector, COUNT(*) PATTERN Stock A+ WHERE A.price > NEXT(A).price GROUP-BY sector"
    spark.conf.set(udtf_routing.GROUP_ROWS_SETTING, "10")
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        with pytest.raises(Exception) as info:
            spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(stock), {sql_literal(query)})").collect()
        message = str(info.value)
        assert "cogra.errors.DataError: MATCH_TREND: key group sector = '" in message
        assert "holds more than 10 rows" in message and "SET spark.cogra.worker.maxGroupRows=N" in message
        spark.conf.set(udtf_routing.WINDOWS_SETTING, "10")
        with pytest.raises(Exception, match="puts every event in 60 windows, more than the limit of 10"):
            spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(stock), {sql_literal(STOCK_QUERY)})").collect()
    finally:
        spark.conf.unset(udtf_routing.GROUP_ROWS_SETTING)
        spark.conf.unset(udtf_routing.WINDOWS_SETTING)
        spark.conf.set("spark.sql.ansi.enabled", "true")


@pytest.mark.spark
def test_bad_worker_settings_fail_at_analysis(spark, stock):
    from pyspark.errors import AnalysisException

    for key, value in ((udtf_routing.ROUTE_SETTING, "fastest"), (udtf_routing.SLICE_ROWS_SETTING, "0")):
        spark.conf.set(key, value)
        try:
            with pytest.raises(AnalysisException, match=key.replace(".", r"\.")):
                spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(stock), {sql_literal(SIMPLE_QUERY)})")
        finally:
            spark.conf.unset(key)


# ---------------------------------------------------------------------------
# errors at analysis
# ---------------------------------------------------------------------------


@pytest.mark.spark
def test_invalid_query_fails_at_analysis_with_position(spark, stock):
    from pyspark.errors import AnalysisException

    bad = "RETURN COUNT(*)\nPATTERN SEQ(Stock A, Stock B"
    with pytest.raises(cogra.QueryError) as parsed:
        cogra.parse(bad)
    # spark.sql analyzes eagerly: the error comes before any job runs.
    with pytest.raises(AnalysisException) as caught:
        spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(stock), {sql_literal(bad)})")
    message = str(caught.value)
    assert f"line {parsed.value.line}, column {parsed.value.column}" in message
    assert parsed.value.message in message
    assert "^" in message and "Traceback" not in message


@pytest.mark.spark
def test_a_query_failing_analysis_is_left_alone_by_the_diagnostics_listener(spark, stock):
    """The shim's query listener resets a failed run's task reports by reading its physical
    plan; a query that failed analysis has none, and asking for it rethrew the query's own
    error inside the listener bus (logged as a second error) and re-stamped that error's
    stack trace with the listener's frames -- what the user then read."""
    from pyspark.errors import AnalysisException

    good = "RETURN sector, COUNT(*) PATTERN Stock A+ GROUP-BY sector"
    spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(stock), {sql_literal(good)})").collect()  # (the listener is on)
    query = "RETURN region, COUNT(*) PATTERN Stock A+ GROUP-BY region"
    with pytest.raises(AnalysisException) as caught:
        spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(stock), {sql_literal(query)})").collect()
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()  # the listener has run
    origin = caught.value._origin
    frames = [str(f) for f in origin.getStackTrace()]
    assert frames and not [f for f in frames if "cogra.Diagnostics" in f or "ExecutionListenerBus" in f], frames[:5]


@pytest.mark.spark
def test_missing_column_is_named(spark, stock):
    from pyspark.errors import AnalysisException

    query = "RETURN region, COUNT(*) PATTERN Stock A+ GROUP-BY region"
    with pytest.raises(AnalysisException, match="region"):
        spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(stock), {sql_literal(query)})")
    with pytest.raises(AnalysisException, match="no_such_time"):
        spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(stock), {sql_literal(SIMPLE_QUERY)}, "
                  "time_column => 'no_such_time')")


@pytest.mark.spark
def test_bad_arguments(spark, stock):
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException, match="TABLE"):
        spark.sql(f"SELECT * FROM MATCH_TREND('stock', {sql_literal(SIMPLE_QUERY)})")
    with pytest.raises(AnalysisException, match="query"):
        spark.sql("SELECT * FROM MATCH_TREND(TABLE(stock))")


# ---------------------------------------------------------------------------
# pushdown
# ---------------------------------------------------------------------------


@pytest.mark.spark
def test_pushdown_into_a_dsv2_scan(spark, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("dsv2") / "stock")
    table = stock_table(300).append_column("unused_payload", pa.array(["x" * 20] * 300))
    spark.createDataFrame(table).write.parquet(path)
    query = "RETURN sector, COUNT(*) PATTERN SEQ(Stock A, Stock B) WHERE A.price > 10 " \
        "GROUP-BY sector WITHIN 1 minute"
    columns, filter_sql = udtf_analysis.pushdown(query, table.schema, "type", "time")
    assert "unused_payload" not in columns
    previous = spark.conf.get("spark.sql.sources.useV1SourceList")
    spark.conf.set("spark.sql.sources.useV1SourceList", "")  # parquet through DataSource V2
    spark.conf.set("spark.sql.maxMetadataStringLength", "10000")  # untruncated ReadSchema
    try:
        spark.read.parquet(path).createOrReplaceTempView("stock_v2")
        df = spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(stock_v2), {sql_literal(query)})")
        plan = df._jdf.queryExecution().executedPlan().toString()
        assert "BatchScan" in plan and "Sort [" in plan
        read_schema = plan.split("ReadSchema: ", 1)[1].split("\n", 1)[0]
        assert "unused_payload" not in read_schema
        for c in columns:
            assert c in read_schema
        if filter_sql:  # from cogra.pushdown, when the engine offers it
            pushed = plan.split("PushedFilters: [", 1)[1].split("]", 1)[0]
            assert pushed.strip(), plan
        assert actual(df) == expected(query, table.drop_columns(["unused_payload"]))
    finally:
        spark.conf.set("spark.sql.sources.useV1SourceList", previous)


# ---------------------------------------------------------------------------
# the per-partition streaming (no Spark needed)
# ---------------------------------------------------------------------------


def test_key_boundaries_treat_null_and_nan_as_values():
    col = pa.array([1.0, 1.0, None, None, float("nan"), float("nan"), 2.0])
    same = udtf_module._equal_neighbours(col)
    assert same.tolist() == [True, False, True, False, True, False]


@pytest.mark.parametrize("chunk_rows", [1, 50, 10**9])
def test_chunked_evaluation_equals_whole_table(chunk_rows):
    table = stock_table(500, seed=2)
    table = table.sort_by([("sector", "ascending"), ("time", "ascending")])
    result = udtf_analysis.CograAnalyzeResult(
        schema=udtf_analysis._spark_schema(cogra.result_schema(SIMPLE_QUERY, table.schema)),
        query=SIMPLE_QUERY,
        key_columns=("sector",),
    )
    chunks = udtf_module._ChunkedEvaluator(
        udtf_module._Evaluator(result, "error"), ["sector"], chunk_rows=chunk_rows
    )
    out = []
    for batch in table.to_batches(max_chunksize=37):
        out.extend(chunks.feed(batch))
    out.extend(chunks.finish())
    got = Rows(canonical(tuple(r.values()) for r in pa.Table.from_batches(out).to_pylist()))
    assert got == expected(SIMPLE_QUERY, table)


SLICED_QUERIES = {
    "tumbling": SIMPLE_QUERY,
    "sliding": STOCK_QUERY,
    "contiguous": ("RETURN sector, COUNT(*), MAX(A.price) PATTERN Stock A+ SEMANTICS contiguous "
                   "WHERE [sector] AND A.price < NEXT(A).price GROUP-BY sector WITHIN 30 seconds SLIDE 5 seconds"),
    "no window": "RETURN sector, COUNT(*) PATTERN SEQ(Stock A, Stock B) WHERE [sector] GROUP-BY sector",
    "absence": ("RETURN sector, COUNT(*) PATTERN SEQ(NOT Stock M, Stock A, Stock B, NOT Stock N) "
                "WHERE [sector] AND M.volume > 9500 AND N.volume < 500 GROUP-BY sector WITHIN 10 minutes SLIDE 1 minute"),
}


@pytest.mark.parametrize("timestamps", [False, True])
@pytest.mark.parametrize("slice_rows", [1, 40, 10**9])
@pytest.mark.parametrize("name", list(SLICED_QUERIES))
def test_key_groups_evaluated_in_time_slices_equal_the_whole_table(name, slice_rows, timestamps):
    # Each window is evaluated independently, so a key group's windows may be evaluated a
    # time slice at a time, before the group is complete (cogra.runtime.slices): every
    # window exactly once, none cut short -- with NULL times, key changes right after a
    # slice, and timestamps in other units.
    from cogra import datasets

    query = SLICED_QUERIES[name]
    table = datasets.stock(n_events=700, seed=4, rate=0.3)  # ~40 minutes: 10-minute windows complete
    if timestamps:
        micros = pa.array(table.column("time").to_numpy() * 1000, pa.timestamp("ms", tz="UTC"))
        table = table.set_column(table.schema.get_field_index("time"), "time", micros)
    time = table.column("time").to_pylist()
    time[5] = time[300] = None
    table = table.set_column(table.schema.get_field_index("time"), "time", pa.array(time, table.schema.field("time").type))
    table = table.sort_by([("sector", "ascending"), ("time", "ascending")])  # nulls last here:
    order = np.lexsort([np.asarray(table.column("time").is_valid().to_numpy(zero_copy_only=False)),
                        table.column("sector").to_numpy(zero_copy_only=False)])
    table = table.take(pa.array(order))  # as Spark sorts: by sector, then time with NULLs first
    result = udtf_analysis.CograAnalyzeResult(
        schema=udtf_analysis._spark_schema(cogra.result_schema(query, table.schema)), query=query,
        key_columns=("sector",))
    from cogra.runtime.slices import WindowSlices

    slices = WindowSlices.of(query, table.schema, "time")
    assert (slices is None) == (name == "no window")
    evaluator = udtf_module._Evaluator(result, "error")
    calls = []
    real = evaluator.evaluate
    evaluator.evaluate = lambda batches, select=None: (calls.append(select), real(batches, select))[1]
    chunks = udtf_module._ChunkedEvaluator(evaluator, ["sector"], chunk_rows=10**9, slices=slices,
                                           slice_rows=slice_rows)
    out = []
    for batch in table.to_batches(max_chunksize=29):
        out.extend(chunks.feed(batch))
    out.extend(chunks.finish())
    got = Rows(canonical(tuple(r.values()) for r in pa.Table.from_batches(out, schema=chunks.evaluator.target).to_pylist()))
    with pytest.warns(cogra.CograDataWarning):  # the two NULL times
        want = expected(query, table)
    assert len(want) >= 10 and got == want
    sliced = [w for w in calls if w is not None]
    assert bool(sliced) == (slices is not None and slice_rows < 10**9)


@pytest.mark.parametrize("settings, processors, slots", [
    ({"master": "local[1]"}, 2, 1),
    ({"master": "local"}, 8, 1),
    ({"master": "local[2]"}, 2, 2),
    ({"master": "local[ 3 , 4 ]"}, 8, 3),  # with retries
    ({"master": "local[*]"}, 6, 6),
    ({"master": "local[4]", "task_cpus": "2"}, 4, 2),
    ({"master": "local-cluster[2, 3, 1024]"}, 8, 3),
    ({"master": "local[1]", "executor_cores": "8"}, 2, 1),  # local mode ignores executor cores
    ({"master": "yarn", "executor_cores": "4", "task_cpus": "2"}, 16, 2),
    ({"master": "yarn"}, 16, None),  # the cluster manager's default: unknown here
    ({"master": "spark://host:7077", "executor_cores": "x"}, 16, None),
    ({"master": "local[x]"}, 2, None),
    (None, 2, None),
])
def test_task_slots_from_the_session_settings(settings, processors, slots):
    assert udtf_routing.task_slots(settings, processors) == slots
    spare = slots is not None and processors >= 2 * slots
    want = udtf_routing.SPARE_PROCESSOR_SLICE_ROWS if spare else udtf_routing.SLICE_ROWS
    assert udtf_routing.slice_rows_for(settings, processors) == want


def test_the_shim_passes_the_session_settings(spark):
    """The settings the Python side reads to size its slices come from the session."""
    settings = json.loads(spark._jvm.org.apache.spark.sql.cogra.MatchTrend.executorSettings())
    assert settings == {"master": spark.sparkContext.master, "executor_cores": None,
                        "task_cpus": spark.conf.get("spark.task.cpus", None)}
    assert udtf_routing.task_slots(settings, udtf_routing.available_processors()) == 2  # local[2]


@pytest.mark.parametrize("processors", [1, 2])
def test_a_spare_processor_slices_open_groups(processors, monkeypatch):
    """``local[1]`` with a second processor: an open key group is evaluated in slices of
    SPARE_PROCESSOR_SLICE_ROWS rows as it arrives (same rows); with one, at its end."""
    from cogra import datasets

    query = STOCK_QUERY
    table = datasets.stock(n_events=2400, seed=2, rate=0.3)  # ~2 hours: 10-minute windows complete
    table = table.sort_by([("sector", "ascending"), ("time", "ascending")])
    result = udtf_analysis.CograAnalyzeResult(
        schema=udtf_analysis._spark_schema(cogra.result_schema(query, table.schema)),
        query=query, key_columns=("sector",),
    )
    monkeypatch.setattr(udtf_routing, "available_processors", lambda: processors)
    monkeypatch.setattr(udtf_routing, "SPARE_PROCESSOR_SLICE_ROWS", 60)
    monkeypatch.setattr(udtf_module, "SLICE_SECONDS", 0.0)  # the pace's least rows, whatever the engine's speed
    monkeypatch.setenv(udtf_routing.STREAMING_ENV, "0")
    sliced = []
    real = udtf_module._ChunkedEvaluator._slice_open_group

    def spy(self):
        sliced.append(self.slice_rows)
        yield from real(self)

    monkeypatch.setattr(udtf_module._ChunkedEvaluator, "_slice_open_group", spy)
    options = {"on_overflow": "null", "executor": {"master": "local[1]", "executor_cores": None, "task_cpus": None}}
    run = udtf_module.make_map_function(pickle.dumps(result), json.dumps(options))
    got = pa.Table.from_batches(list(run(iter(table.to_batches(max_chunksize=50)))))
    assert sliced == ([60] * len(sliced) if processors == 2 else [])
    assert (len(sliced) > 3) == (processors == 2)
    want = cogra.evaluate(query, table, on_overflow="null")
    assert Rows(canonical(tuple(r.values()) for r in got.to_pylist())) == \
        Rows(canonical(tuple(r.values()) for r in udtf_module._conform(want, got.schema).to_pylist()))


def test_slice_pace_holds_what_the_engine_evaluates_in_slice_seconds(monkeypatch):
    """Costly rows slice at the least rows, cheap ones at more (up to the most): every
    engine call has a fixed cost that small slices of cheap rows would mostly pay."""
    monkeypatch.setattr(udtf_module, "SLICE_SECONDS", 0.008)
    pace = udtf_module.SlicePace(least=8192, most=32768)
    assert pace.slice_rows() == 8192  # nothing measured yet
    pace.record(10_000, 5.0)  # a process's first call loads the kernels: left out
    assert pace.slice_rows() == 8192
    pace.record(20_000, 0.006)  # 0.3 us per row: 8 ms hold ~26.7k rows
    assert pace.slice_rows() == 26_666
    pace.record(10_000, 0.0001)  # very cheap: capped at the most
    assert pace.slice_rows() == 32768
    costly = udtf_module.SlicePace(least=8192, most=32768)
    for _ in range(3):
        costly.record(8192, 0.010)  # 1.2 us per row: 6.6k rows, so the least
    assert costly.slice_rows() == 8192
    # Recent calls weigh most: after cheap calls, the costly past fades.
    for _ in range(10):
        costly.record(8192, 0.0008)
    assert costly.slice_rows() > 20_000
    # The chunked evaluator takes its slices' size from the pace.
    result = udtf_analysis.CograAnalyzeResult(
        schema=udtf_analysis._spark_schema(cogra.result_schema(STOCK_QUERY, stock_table(10).schema)),
        query=STOCK_QUERY, key_columns=("sector",))
    chunks = udtf_module._ChunkedEvaluator(udtf_module._Evaluator(result, "null", pace=pace), ["sector"])
    assert chunks.slice_rows == 32768 and chunks.slice_at == 32768
    assert udtf_module.slice_pace(STOCK_QUERY, 60, 32768) is udtf_module.slice_pace(STOCK_QUERY, 60, 32768)


def test_partition_function_freezes_the_live_heap():
    """PySpark's daemon runs a full gc.collect() after every task of a reused worker: the
    objects alive when a task starts (modules, kernels) are frozen out of its sight."""
    import gc

    query = "RETURN sector, COUNT(*) PATTERN Stock A+ WHERE [sector] GROUP-BY sector WITHIN 2 minutes"
    table = stock_table(200, seed=1).sort_by([("sector", "ascending"), ("time", "ascending")])
    result = udtf_analysis.CograAnalyzeResult(
        schema=udtf_analysis._spark_schema(cogra.result_schema(query, table.schema)),
        query=query, key_columns=("sector",),
    )
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        run = udtf_module.make_map_function(pickle.dumps(result), json.dumps({"on_overflow": "null"}))
        assert list(run(iter(table.to_batches(max_chunksize=53))))
        assert gc.get_freeze_count() > 10_000  # this process's modules, at least
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("query, streams", [
    # COUNT / integer SUM / MIN / MAX of a numeric attribute, tumbling: the partition streams.
    ("RETURN sector, COUNT(*), SUM(A.volume), MAX(A.price) PATTERN Stock A+ WHERE [sector] "
     "GROUP-BY sector WITHIN 2 minutes", True),
    # Sliding windows share panes in the chunked route only.
    ("RETURN sector, COUNT(*) PATTERN Stock A+ WHERE [sector] "
     "GROUP-BY sector WITHIN 2 minutes SLIDE 30 seconds", False),
    # AVG of a double: inf/NaN or huge spans in the data could stop a stream half-way,
    # so it takes the chunked route.
    ("RETURN sector, AVG(A.price) PATTERN Stock A+ WHERE [sector] GROUP-BY sector "
     "WITHIN 2 minutes", False),
])
def test_partition_function_streams_when_it_can(query, streams, monkeypatch):
    """A partition streams where the query allows (COGRA_SPARK_STREAMING=0 turns it off)."""
    from cogra.runtime import stream as stream_module

    created = []
    real = stream_module.StreamEvaluation.__init__

    def spy(self, *args, **kwargs):
        created.append(kwargs.get("sorted_by"))
        real(self, *args, **kwargs)

    monkeypatch.setattr(stream_module.StreamEvaluation, "__init__", spy)
    table = stock_table(800, seed=3).sort_by([("sector", "ascending"), ("time", "ascending")])
    result = udtf_analysis.CograAnalyzeResult(
        schema=udtf_analysis._spark_schema(cogra.result_schema(query, table.schema)),
        query=query, key_columns=("sector",),
    )
    monkeypatch.setenv(udtf_routing.STREAMING_ENV, "1")
    options = {"on_overflow": "null", "settings": {udtf_routing.CHUNK_ROWS_SETTING: "100"}}  # several pushes
    run = udtf_module.make_map_function(pickle.dumps(result), json.dumps(options))
    out = list(run(iter(table.to_batches(max_chunksize=53))))
    assert created == ([("sector",)] if streams else [])
    monkeypatch.setenv(udtf_routing.STREAMING_ENV, "0")
    created.clear()
    assert list(run(iter(table.to_batches(max_chunksize=53)))) and created == []
    got = pa.Table.from_batches(out) if out else None
    want = cogra.evaluate(query, table, on_overflow="null")
    assert got is not None and got.num_rows == want.num_rows
    order = [("window_start", "ascending"), ("sector", "ascending")]
    assert got.sort_by(order).to_pylist() == udtf_module._conform(want, got.schema).sort_by(order).to_pylist()
