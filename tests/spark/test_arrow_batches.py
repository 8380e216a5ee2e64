"""A batch MATCH_TREND's Arrow batches to its Python workers: closed by row count, with no
size check per row, unless the session sets a byte limit itself (``ArrowBatches.scala``)."""

from __future__ import annotations

import contextlib

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from cogra.spark import udtf_routing  # noqa: E402
from tests.spark.test_match_trend_sql import actual, expected  # noqa: E402

MAX_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
MAX_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"

QUERY = ("RETURN g, note, COUNT(*), MAX(A.v), MIN(B.v) PATTERN SEQ(A+, B) SEMANTICS skip-till-next-match "
         "WHERE [g] AND [note] AND A.v < NEXT(A).v GROUP-BY g, note WITHIN 2 minutes SLIDE 1 minute")


@contextlib.contextmanager
def settings(spark, values: dict[str, str]):
    """Session settings for the block, unset afterwards."""
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in values:
            spark.conf.unset(key)


def events(n: int, note_chars: int, seed: int = 0) -> pa.Table:
    """``n`` events a second in eight groups: four of ``g`` times two notes, strings of
    ``note_chars`` characters."""
    rng = np.random.default_rng(seed)
    notes = np.array(["x" * note_chars, "y" * note_chars])
    return pa.table({
        "time": np.arange(n, dtype=np.int64),
        "type": np.where(rng.random(n) < 0.8, "A", "B"),
        "g": rng.integers(0, 4, n),
        "v": rng.integers(0, 1000, n),
        "note": notes[(rng.random(n) < 0.1).astype(int)],
    })


def sql(view: str, query: str = QUERY) -> str:
    return f"SELECT * FROM MATCH_TREND(TABLE({view}), '{query}')"


def plan(spark, view: str) -> str:
    return spark.sql(sql(view))._jdf.queryExecution().executedPlan().toString()


@pytest.mark.spark
def test_batches_are_closed_by_row_count_unless_the_session_limits_them(spark):
    spark.createDataFrame(events(100, 3)).createOrReplaceTempView("arrow_batches_small")
    default = plan(spark, "arrow_batches_small")
    assert "ArrowBatches" in default and "RowSizeCheck" in default, default
    with settings(spark, {MAX_BYTES: "64MB"}):
        own = plan(spark, "arrow_batches_small")
    with settings(spark, {MAX_ROWS: "0"}):
        unbounded = plan(spark, "arrow_batches_small")
    for text in (own, unbounded):
        assert "MapInArrow" in text and "ArrowBatches" not in text and "RowSizeCheck" not in text, text


@pytest.mark.spark
@pytest.mark.parametrize("route", ["chunked", "sliced", "streamed"])
def test_rows_are_the_same_however_batches_are_closed(spark, route):
    # 40k rows of ~300 bytes in two tasks: batches of 10k rows by count, of a few hundred
    # under a 64 KB byte limit; on each worker route, groups in chunks of 3,000 rows,
    # sliced from 400.
    table = events(40_000, 300, seed=3)
    spark.createDataFrame(table).createOrReplaceTempView("arrow_batches_wide")
    want = expected(QUERY, table)
    worker = {udtf_routing.ROUTE_SETTING: route, udtf_routing.CHUNK_ROWS_SETTING: "3000",
              udtf_routing.SLICE_ROWS_SETTING: "400"}
    with settings(spark, worker):
        by_rows = actual(spark.sql(sql("arrow_batches_wide")))
    with settings(spark, {**worker, MAX_BYTES: "64KB"}):
        by_bytes = actual(spark.sql(sql("arrow_batches_wide")))
    assert len(want) > 10
    assert by_rows == want
    assert by_bytes == want


@pytest.mark.spark
def test_a_row_too_large_for_batches_of_rows_names_the_settings(spark):
    # A million rows per batch leave a row ~1 KB: one note of 4 KB is too large ...
    table = events(2_000, 3, seed=5)
    notes = table.column("note").to_pylist()
    notes[700] = "z" * 4096
    table = table.set_column(table.schema.get_field_index("note"), "note", pa.array(notes))
    spark.createDataFrame(table).createOrReplaceTempView("arrow_batches_large_row")
    with settings(spark, {MAX_ROWS: "1000000"}):
        with pytest.raises(Exception) as failure:
            spark.sql(sql("arrow_batches_large_row")).collect()
        message = str(failure.value)
        assert "MATCH_TREND: a row of" in message and MAX_BYTES in message and MAX_ROWS in message, message
        # ... and a session that limits batches by size runs it.
        with settings(spark, {MAX_BYTES: "64MB"}):
            rows = actual(spark.sql(sql("arrow_batches_large_row")))
    assert rows == expected(QUERY, table)
