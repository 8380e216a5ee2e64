"""Structured Streaming MATCH_TREND where it used to give silently wrong numbers: exact
integers next to NULLs, a changed query on an old checkpoint, times at 0 and before, and
rows of types the pattern does not name (which must still advance the watermark).

Each test runs a real file source, a Parquet sink and a checkpoint, and compares every
closed window with batch evaluation (:func:`cogra.evaluate`) over the same events."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")

import cogra  # noqa: E402
from tests.spark.conftest import OPERATOR, parametrize_operators  # noqa: E402
from tests.spark.rows import same_rows, sql_literal  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("operator")]

DELAY = 2


def sink_rows(path: Path, columns: list[str]) -> list[tuple]:
    if not path.exists() or not any(path.glob("*.parquet")):
        return []
    return [tuple(r.values()) for r in pq.read_table(path).select(columns).to_pylist()]


def closed(query: str, table: pa.Table, watermark: int) -> list[tuple]:
    """Batch rows of the windows a watermark at ``watermark`` has closed (ends at or below it)."""
    want = cogra.evaluate(query, table, on_overflow="null")
    end = want["window_end"]
    if pa.types.is_timestamp(end.type):
        end = pc.cast(pc.cast(end, pa.timestamp("us")), pa.int64())
    want = want.filter(pc.less_equal(end, watermark))
    return [tuple(r.values()) for r in want.to_pylist()]


def run(spark, root: Path, query: str, parts: list[pa.Table], *, delay: int = DELAY, view: str = "ticks"):
    """Stream ``parts`` (one file each, one micro-batch each) through MATCH_TREND from SQL
    into ``root/out``; returns the last progress."""
    (root / "in").mkdir(exist_ok=True)
    first = len(list((root / "in").glob("*.parquet")))
    pq.write_table(parts[0], root / "in" / f"p{first:03}.parquet")
    schema = spark.read.parquet(str(root / "in")).schema
    spark.readStream.schema(schema).parquet(str(root / "in")).createOrReplaceTempView(view)
    out = spark.sql(f"SELECT * FROM MATCH_TREND(TABLE({view}), {sql_literal(query)}, "
                    f"watermark => '{delay} seconds')")
    writer = (out.writeStream.format("parquet").option("path", str(root / "out"))
              .option("checkpointLocation", str(root / "checkpoint")).outputMode("append").start())
    try:
        writer.processAllAvailable()
        for i, part in enumerate(parts[1:], first + 1):
            pq.write_table(part, root / "in" / f"p{i:03}.parquet")
            writer.processAllAvailable()
        return writer.lastProgress
    finally:
        writer.stop()


ROWS_OPERATOR_IN_THE_DEFAULT_SUITE = {
    "test_counts_and_sums_past_2_53_next_to_nulls_stay_exact", "test_events_at_time_zero_and_before_are_events",
    "test_rows_of_types_the_pattern_does_not_name_advance_the_watermark",
    "test_two_watermarks_and_a_bad_operator_are_errors_at_analysis",
}


def pytest_generate_tests(metafunc):
    parametrize_operators(metafunc, ROWS_OPERATOR_IN_THE_DEFAULT_SUITE)


@pytest.fixture
def non_ansi(spark):
    spark.conf.set("spark.sql.ansi.enabled", "false")
    yield spark
    spark.conf.set("spark.sql.ansi.enabled", "true")


def test_counts_and_sums_past_2_53_next_to_nulls_stay_exact(non_ansi, tmp_path):
    """One group's micro-batch closes a window whose COUNT(*) overflows (NULL) and windows
    whose COUNT(*), MAX and SUM lie past 2**53 (exact); input attributes past 2**53 sit next
    to NULLs, and the GROUP-BY key is a 64-bit integer past 2**53."""
    big = 2**53 + 1
    rows = []
    for g in (2**60 + 1, 2**60 + 3):
        for w, n in ((0, 64), (100, 60), (200, 61)):  # 2**64 - 1 trends do not fit; the others do
            for i in range(n):
                rows.append({"type": "A", "time": w + i, "g": g,
                             "v": None if i % 7 == 3 else big + 2 * (i % 5), "s": 1 if i == 0 else 0})
    rows.append({"type": "A", "time": 400, "g": 2**60 + 1, "v": 1, "s": 0})  # closes the first three windows
    table = pa.Table.from_pylist(rows, schema=pa.schema([("type", pa.string()), ("time", pa.int64()),
                                                         ("g", pa.int64()), ("v", pa.int64()), ("s", pa.int64())]))
    query = "RETURN g, COUNT(*), MAX(A.v), MIN(A.v), SUM(A.s) PATTERN A+ GROUP-BY g WITHIN 100 seconds"
    run(non_ansi, tmp_path, query, [table])
    want = closed(query, table, 400 - DELAY)
    got = sink_rows(tmp_path / "out", cogra.result_schema(query, table.schema).names)
    assert len(want) == 6 and sorted(got, key=str) == sorted(want, key=str)
    assert (2**60 + 3, 2**60 - 1, big + 8, big, 2**59, 100, 200) in got
    assert any(r[1] is None for r in got)  # the overflow, beside exact rows of its group


def test_timestamps_are_read_in_utc_whatever_the_session_time_zone(non_ansi, tmp_path):
    """A session in New York (DST): timestamps cross the operator as microseconds, not as
    pandas' wall-clock times."""
    spark = non_ansi
    start = 1_699_153_200  # 2023-11-05 03:00 UTC, New York's fall-back night
    n = 3000
    table = pa.table({
        "type": ["A" if i % 3 else "B" for i in range(n)],
        "time": pa.array([(start + i * 3) * 1_000_000 for i in range(n)], pa.int64())
        .cast(pa.timestamp("us", tz="UTC")),
        "g": [i % 4 for i in range(n)],
    })
    query = "RETURN g, COUNT(*) PATTERN SEQ(A, B) SEMANTICS next GROUP-BY g WITHIN 1 hour"
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        run(spark, tmp_path, query, [table.slice(i, 600) for i in range(0, n, 600)], view="stamped")
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    want = closed(query, table, (start + (n - 1) * 3 - DELAY) * 1_000_000)
    got = sink_rows(tmp_path / "out", cogra.result_schema(query, table.schema).names)
    assert len(want) >= 8 and same_rows(got, want)


def test_naive_timestamps_stream(spark, tmp_path):
    """A TIMESTAMP_NTZ time column (what pandas, pyarrow without a zone, and CSV give)
    streams as it evaluates in batch: its wall-clock microseconds, no session zone."""
    n = 2000
    start = 1_700_000_000
    table = pa.table({"type": ["A" if i % 4 else "B" for i in range(n)],
                      "time": pa.array([(start + i // 2) * 1_000_000 for i in range(n)], pa.int64())
                      .cast(pa.timestamp("us")),
                      "g": [i % 3 for i in range(n)]})
    query = "RETURN g, COUNT(*), MAX(A.time) PATTERN SEQ(A+, B) GROUP-BY g WITHIN 10 seconds"
    run(spark, tmp_path, query, [table.slice(i, 400) for i in range(0, n, 400)], view="naive")
    want = closed(query, table, (start + (n - 1) // 2 - DELAY) * 1_000_000)
    got = sink_rows(tmp_path / "out", cogra.result_schema(query, table.schema).names)
    assert len(want) >= 250 and same_rows(got, want)


def test_double_seconds_stream(spark, tmp_path):
    """A time column of double seconds (what JSON and pandas' epoch floats give) streams as
    it evaluates in batch, sliding windows included: times read as whole microseconds,
    floored, compare with the windows' bounds as the doubles do -- events a hair before a
    bound (here 1e-6 s and the double just below it) stay in the earlier window."""
    n = 2000
    start = 1_700_000_000
    times = [start + i / 7 for i in range(n)]
    times[700] = float(start + 100) - 1e-6
    times[701] = np.nextafter(float(start + 100), 0.0)
    times[702] = float(start + 100)
    table = pa.table({"type": ["A" if i % 4 else "B" for i in range(n)], "time": pa.array(times, pa.float64()),
                      "g": [i % 3 for i in range(n)]}).sort_by("time")
    query = "RETURN g, COUNT(*), MAX(A.time) PATTERN SEQ(A+, B) GROUP-BY g WITHIN 10 seconds SLIDE 5 seconds"
    progress = run(spark, tmp_path, query, [table.slice(i, 400) for i in range(0, n, 400)], view="doubles")
    want = cogra.evaluate(query, table, on_overflow="null")
    want = want.filter(pc.less_equal(want["window_end"], max(times) - DELAY))
    got = sink_rows(tmp_path / "out", cogra.result_schema(query, table.schema).names)
    # (Exact floats here -- MAX of times, window bounds -- that same_rows' six-digit
    # ordering would not tell apart.)
    assert want.num_rows >= 100 and sorted(got) == sorted(tuple(r.values()) for r in want.to_pylist())
    assert progress["stateOperators"][0]["numRowsDroppedByWatermark"] == 0


@pytest.mark.parametrize("first", [0, -95])
def test_events_at_time_zero_and_before_are_events(spark, tmp_path, first):
    """Integer times from 0 (and from before 0): Spark's watermark starts at the epoch, and
    no event is late before a batch has set a watermark."""
    n = 400
    table = pa.table({"type": ["A" if i % 4 else "B" for i in range(n)],
                      "time": [first + i // 2 for i in range(n)],
                      "g": [i % 3 for i in range(n)]})
    query = "RETURN g, COUNT(*), MIN(A.time) PATTERN SEQ(A+, B) GROUP-BY g WITHIN 10 seconds"
    progress = run(spark, tmp_path, query, [table.slice(i, 100) for i in range(0, n, 100)])
    want = closed(query, table, first + (n - 1) // 2 - DELAY)
    got = sink_rows(tmp_path / "out", cogra.result_schema(query, table.schema).names)
    assert len(want) >= 15 and same_rows(got, want)
    assert any(r[-2] <= 0 for r in got)  # the windows at and before time 0 are there, whole
    assert progress["stateOperators"][0]["numRowsDroppedByWatermark"] == 0


def test_rows_of_types_the_pattern_does_not_name_advance_the_watermark(spark, tmp_path):
    """The pattern's types stop arriving; later rows are all of another type. Their times
    advance the watermark (the largest time seen), so every window of the pattern's events
    closes, as docs/language.md (Streams) says."""
    n = 300
    events = pa.table({"type": ["A" if i % 3 else "B" for i in range(n)], "time": list(range(n)),
                       "g": [i % 2 for i in range(n)]})
    other = pa.table({"type": ["X"] * 100, "time": list(range(n, n + 100)), "g": [0] * 100})
    query = "RETURN g, COUNT(*) PATTERN SEQ(A+, B) SEMANTICS next GROUP-BY g WITHIN 10 seconds"
    run(spark, tmp_path, query, [events, other.slice(0, 50), other.slice(50)])
    table = pa.concat_tables([events, other])
    want = closed(query, table, n + 99 - DELAY)
    got = sink_rows(tmp_path / "out", cogra.result_schema(query, table.schema).names)
    assert len(want) == 2 * n // 10 and same_rows(got, want)


CHANGES = {
    "pattern": ("RETURN g, COUNT(*) PATTERN A{3,} GROUP-BY g WITHIN 10 seconds",
                "PATTERN: was `A{2,}`, now `A{3,}`"),
    "semantics": ("RETURN g, COUNT(*) PATTERN A{2,} SEMANTICS next GROUP-BY g WITHIN 10 seconds",
                  "SEMANTICS: was `skip-till-any-match (the default)`, now `next`"),
    "window": ("RETURN g, COUNT(*) PATTERN A{2,} GROUP-BY g WITHIN 20 seconds",
               "WITHIN: was `10 seconds`, now `20 seconds`"),
    "group-by": ("RETURN g, h, COUNT(*) PATTERN A{2,} GROUP-BY g, h WITHIN 10 seconds",
                 "GROUP-BY: was `g`, now `g, h`"),
}
ORIGINAL = "RETURN g, COUNT(*) PATTERN A{2,} GROUP-BY g WITHIN 10 seconds"


def _ticks(first: int, n: int) -> pa.Table:
    return pa.table({"type": ["A"] * n, "time": [first + i // 3 for i in range(n)],
                     "g": [i % 2 for i in range(n)], "h": [i % 3 for i in range(n)]})


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_changed_query_on_an_old_checkpoint_is_an_error(spark, tmp_path, change):
    """Restarted on its checkpoint with another pattern, semantics, window or key, the
    stream fails before its first micro-batch, naming what changed and the checkpoint;
    the sink keeps only the first query's rows."""
    from pyspark.errors import StreamingQueryException

    run(spark, tmp_path, ORIGINAL, [_ticks(0, 90), _ticks(30, 90)])
    before = sink_rows(tmp_path / "out", ["g", "COUNT(*)", "window_start", "window_end"])
    assert before
    changed, said = CHANGES[change]
    with pytest.raises(StreamingQueryException) as caught:
        run(spark, tmp_path, changed, [_ticks(60, 90)])
    message = str(caught.value)
    assert "holds the state of another query" in message and said in message, message
    assert str(tmp_path / "checkpoint") in message
    assert sink_rows(tmp_path / "out", ["g", "COUNT(*)", "window_start", "window_end"]) == before


def test_the_same_query_reformatted_with_another_delay_continues(spark, tmp_path):
    table = pa.concat_tables([_ticks(0, 90), _ticks(30, 90), _ticks(60, 90)])
    run(spark, tmp_path, ORIGINAL, [table.slice(0, 90), table.slice(90, 90)])
    reformatted = "RETURN g,  COUNT(*)\nPATTERN A{2,}\nSEMANTICS any\nGROUP BY g\nWITHIN 10 sec"
    run(spark, tmp_path, reformatted, [table.slice(180)], delay=DELAY + 1)
    got = sink_rows(tmp_path / "out", cogra.result_schema(ORIGINAL, table.schema).names)
    assert same_rows(got, closed(ORIGINAL, table, 89 - DELAY - 1))


def test_a_snapshot_of_another_query_does_not_restore():
    """The per-group state carries the query's identity too (the route without the shim)."""
    table = _ticks(0, 30)
    old = cogra.OnlineEvaluation(ORIGINAL, table.schema)
    old.push(table)
    saved = old.snapshot()
    same = cogra.OnlineEvaluation(ORIGINAL.replace("GROUP-BY", "SEMANTICS any GROUP-BY"), table.schema)
    same.restore(saved)
    with pytest.raises(cogra.CheckpointError, match="written by another query"):
        cogra.OnlineEvaluation(CHANGES["pattern"][0], table.schema).restore(saved)


NO_SHIM = """
import glob, sys
import pyarrow as pa, pyarrow.parquet as pq
from pyspark.sql import SparkSession
from cogra.spark import match_trend
root, query = sys.argv[1], sys.argv[2]
spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC").getOrCreate())
files = sorted(glob.glob(root + "/parts/*.parquet"))
pq.write_table(pq.read_table(files[0]), root + "/in/p000.parquet")
stream = spark.readStream.schema(spark.read.parquet(root + "/in").schema).parquet(root + "/in")
w = (match_trend(stream, query, watermark="2 seconds").writeStream.format("parquet")
     .option("path", root + "/out").option("checkpointLocation", root + "/checkpoint").start())
w.processAllAvailable()
for i, f in enumerate(files[1:], 1):
    pq.write_table(pq.read_table(f), root + f"/in/p{i:03}.parquet")
    w.processAllAvailable()
w.stop()
"""


@pytest.mark.slow
def test_the_route_without_the_shim_streams_times_before_zero(tmp_path):
    """``match_trend`` on a session without the extension (PySpark's own operator, planned
    in Python): the same event time, wire forms and identity."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    n = 400
    table = pa.table({"type": ["A" if i % 4 else "B" for i in range(n)], "time": [-20 + i // 2 for i in range(n)],
                      "g": pa.array([2**60 + i % 3 for i in range(n)], pa.int64())})
    query = "RETURN g, COUNT(*) PATTERN SEQ(A+, B) GROUP-BY g WITHIN 10 seconds"
    (tmp_path / "parts").mkdir()
    (tmp_path / "in").mkdir()
    for i in range(0, n, 100):
        pq.write_table(table.slice(i, 100), tmp_path / "parts" / f"p{i:03}.parquet")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "python"), str(root)]),
           "PYSPARK_PYTHON": sys.executable}
    subprocess.run([sys.executable, "-c", NO_SHIM, str(tmp_path), query], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    got = sink_rows(tmp_path / "out", cogra.result_schema(query, table.schema).names)
    want = closed(query, table, -20 + (n - 1) // 2 - DELAY)
    assert len(want) >= 15 and sorted(got) == sorted(want)


def test_two_watermarks_and_a_bad_operator_are_errors_at_analysis(spark, tmp_path):
    """watermark => over an input with a watermark of its own would mix two clocks; an
    unknown operator setting names the choices."""
    from pyspark.errors import AnalysisException

    table = pa.table({"type": ["A"], "time": pa.array([1_000_000], pa.int64()).cast(pa.timestamp("us", tz="UTC"))})
    pq.write_table(table, tmp_path / "p.parquet")
    stream = spark.readStream.schema(spark.read.parquet(str(tmp_path)).schema).parquet(str(tmp_path))
    stream.withWatermark("time", "5 seconds").createOrReplaceTempView("own")
    query = sql_literal("RETURN COUNT(*) PATTERN A+ WITHIN 10 seconds")
    with pytest.raises(AnalysisException, match="has a watermark of its own .on time.; give either"):
        spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(own), {query}, watermark => '5 seconds')")
    spark.conf.set(OPERATOR, "pandas")
    try:
        with pytest.raises(AnalysisException, match="streaming.operator must be one of transformWithState, packed"):
            spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(own), {query})")
    finally:
        spark.conf.unset(OPERATOR)
