"""Random COGRA queries through Spark equal :func:`cogra.evaluate` on the same rows.

Cases come from ``tests.strategies.cases()`` (every pattern operator, semantics,
predicate class, grouping, window and aggregate). Most are *spread*: the query is
rewritten to ``GROUP-BY g`` and the input is several independent streams, each with its
own ``g`` values, so that MATCH_TREND's key groups land in several Spark partitions and
each Python task evaluates several groups (streamed in small Arrow batches).

Spark's cost is per statement, not per row, so cases run in batches: one ``UNION ALL`` of
many MATCH_TREND calls over one table of all cases' events (filtered by ``case_id``),
each call's rows returned as JSON with the Spark partition that produced them. A failing
batch is re-run case by case to name the failing case.

Routes: the JVM shim in SQL (every case), ``cogra.spark.match_trend(df, ...)`` and the
plain Python UDTF from ``cogra.spark.register(spark)`` (a subset each).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.spark.rows import evaluate_rows, group_by_g, same_rows, sort_key, sql_literal  # noqa: E402
from tests.strategies import cases, streams  # noqa: E402

pytestmark = pytest.mark.spark

BATCH = 25
DEFAULT_CASES = 100
SLOW_CASES = 300
SUBSET = 25
SHUFFLE_PARTITIONS = 4
#: Small Arrow batches, so each task sees key groups split across batches.
ARROW_BATCH_ROWS = 16
COLUMNS = ("type", "time", "v", "w", "g", "k", "h")


@dataclass(frozen=True)
class Case:
    query: str
    table: pa.Table
    spread: bool  # rewritten to GROUP-BY g over several streams


@st.composite
def spark_cases(draw) -> Case:
    q, stream = draw(cases())
    if not draw(st.sampled_from([True, False])):  # spread first: hypothesis favours it
        return Case(q.text, stream, False)
    more = draw(st.lists(streams(max_events=10, types=q.event_types), min_size=3, max_size=9))
    parts = []
    for i, part in enumerate([stream, *more]):
        g = pa.array([2 * i + x for x in part.column("g").to_pylist()], pa.int64())
        parts.append(part.set_column(part.schema.get_field_index("g"), "g", g))
    return Case(group_by_g(q.text), pa.concat_tables(parts), True)


@functools.lru_cache(maxsize=None)
def draw_cases(n: int, random_seed: int) -> list[Case]:
    """``n`` cases, the same on every run (hypothesis seeded with ``random_seed``); drawn
    up front so that Spark can run them in batches."""
    out: list[Case] = []

    @seed(random_seed)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(spark_cases())
    def collect(case: Case) -> None:
        out.append(case)

    collect()
    assert len(out) >= 0.9 * n, f"hypothesis drew only {len(out)} of {n} cases"
    return out


# ---------------------------------------------------------------------------
# expected and actual rows
# ---------------------------------------------------------------------------


def expected(case: Case) -> tuple[list[str], list[tuple]]:
    return evaluate_rows(case.query, case.table)


def describe(case: Case) -> str:
    return f"query:\n{case.query}\nrows ({case.table.num_rows}):\n{case.table.to_pylist()}"


# ---------------------------------------------------------------------------
# running a batch
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spread_conf(spark):
    """Several shuffle partitions kept apart (no AQE coalescing), small Arrow batches."""
    settings_ = {
        "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
        "spark.sql.adaptive.coalescePartitions.enabled": "false",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(ARROW_BATCH_ROWS),
    }
    previous = {k: spark.conf.get(k, None) for k in settings_}
    for k, v in settings_.items():
        spark.conf.set(k, v)
    yield spark
    for k, v in previous.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


def load(spark, batch: list[Case], view: str) -> None:
    """All cases' events in one view, with their case number.

    The table is combined into one chunk first: pyspark 4.3's ``createDataFrame`` drops
    every row after an empty chunk of a ``pyarrow.Table`` (``[2, 0, 3]`` rows -> 2).
    """
    tables = [c.table.select(list(COLUMNS)).append_column(
        "case_id", pa.array([i] * c.table.num_rows, pa.int32())) for i, c in enumerate(batch)]
    table = pa.concat_tables(tables).combine_chunks()
    spark.createDataFrame(table).createOrReplaceTempView(view)


def case_input(view: str, i: int) -> str:
    return f"SELECT {', '.join(COLUMNS)} FROM {view} WHERE case_id = {i}"


def sql_call(function: str, view: str, i: int, case: Case) -> str:
    return (f"SELECT {i} AS case_id, spark_partition_id() AS pid, "
            "to_json(struct(*), map('ignoreNullFields', 'false')) AS row "
            f"FROM {function}(TABLE({case_input(view, i)}), {sql_literal(case.query)})")


def collect_rows(df) -> dict[int, tuple[list[tuple[str, ...]], list[tuple], set[int]]]:
    """case -> (column-name lists seen, rows, partitions that produced rows)."""
    out: dict[int, tuple[list, list, set]] = {}
    for r in df.collect():
        names, rows, pids = out.setdefault(r["case_id"], ([], [], set()))
        obj = json.loads(r["row"])
        names.append(tuple(obj))
        rows.append(tuple(obj.values()))
        pids.add(r["pid"])
    return out


def check(batch: list[Case], results: dict) -> list[int]:
    """Assert every case's rows. Returns, for each spread case with result rows in several
    groups, how many Spark partitions produced them."""
    spread_partitions = []
    for i, case in enumerate(batch):
        names, want = expected(case)
        seen, got, pids = results.get(i, ([], [], set()))
        assert all(list(s) == names for s in seen), f"columns {seen[:1]} != {names}\n{describe(case)}"
        assert same_rows(got, want), f"got {sorted(got, key=sort_key)}\nwant {want}\n{describe(case)}"
        if case.spread and len({row[0] for row in want}) > 1:  # g is the first column
            spread_partitions.append(len(pids))
    return spread_partitions


def assert_spread(partitions: list[int]) -> None:
    """The spread cases really ran in several tasks (hash partitioning is deterministic)."""
    if len(partitions) >= 3:
        assert max(partitions) > 1, partitions


def run_sql_batch(spark, batch: list[Case], function: str = "MATCH_TREND") -> list[int]:
    view = "cogra_random_cases"
    load(spark, batch, view)
    union = "\nUNION ALL\n".join(sql_call(function, view, i, c) for i, c in enumerate(batch))
    try:
        results = collect_rows(spark.sql(union))
    except Exception:
        for i, case in enumerate(batch):  # name the case that fails
            try:
                collect_rows(spark.sql(sql_call(function, view, i, case)))
            except Exception as e:
                raise AssertionError(f"{function} failed: {e}\n{describe(case)}") from None
        raise
    return check(batch, results)


def run_dataframe_batch(spark, batch: list[Case]) -> list[int]:
    from pyspark.sql import functions as F

    from cogra.spark import match_trend

    view = "cogra_random_cases_df"
    load(spark, batch, view)
    events = spark.table(view)
    frames = [
        match_trend(events.where(F.col("case_id") == i).select(*COLUMNS), c.query).select(
            F.lit(i).alias("case_id"), F.spark_partition_id().alias("pid"),
            F.to_json(F.struct("*"), {"ignoreNullFields": "false"}).alias("row"))
        for i, c in enumerate(batch)
    ]
    return check(batch, collect_rows(functools.reduce(lambda a, b: a.unionAll(b), frames)))


def batches(items: list[Case]) -> list[list[Case]]:
    return [items[i:i + BATCH] for i in range(0, len(items), BATCH)]


# ---------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------


def test_rewrite_to_group_by_g():
    assert group_by_g("RETURN COUNT(*)\nPATTERN A\nWITHIN 2 seconds") == \
        "RETURN g, COUNT(*)\nPATTERN A\nGROUP-BY g\nWITHIN 2 seconds"
    assert group_by_g("RETURN V0.k, COUNT(*)\nPATTERN A V0\nGROUP-BY V0.k") == \
        "RETURN g, V0.k, COUNT(*)\nPATTERN A V0\nGROUP-BY g, V0.k"
    same = "RETURN g, COUNT(*)\nPATTERN A\nGROUP-BY g"
    assert group_by_g(same) == same


@pytest.mark.parametrize("batch", range(-(-DEFAULT_CASES // BATCH)))
def test_sql_equals_evaluate(spread_conf, batch):
    assert_spread(run_sql_batch(spread_conf, batches(draw_cases(DEFAULT_CASES, 20240611))[batch]))


@pytest.mark.slow
@pytest.mark.parametrize("batch", range(-(-SLOW_CASES // BATCH)))
def test_sql_equals_evaluate_more(spread_conf, batch):
    assert_spread(run_sql_batch(spread_conf, batches(draw_cases(SLOW_CASES, 7))[batch]))


def test_dataframe_api_equals_evaluate(spread_conf):
    assert_spread(run_dataframe_batch(spread_conf, draw_cases(3 * SUBSET, 99)[-SUBSET:]))


def test_registered_python_udtf_equals_evaluate(spread_conf):
    from cogra.spark import register

    register(spread_conf, "match_trend_random")
    assert_spread(run_sql_batch(spread_conf, draw_cases(3 * SUBSET, 101)[-SUBSET:], function="match_trend_random"))
