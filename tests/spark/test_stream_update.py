"""Update mode (docs/language.md, Early results): ``writeStream.outputMode("update")``
over a streaming MATCH_TREND emits, after every micro-batch, the closed windows' final rows
and the current rows of the open windows the micro-batch's events fall in.

A real file source (one file per micro-batch), a checkpoint, a stop and a restart midway,
and a ``foreachBatch`` sink that records every micro-batch's rows.  Each emitted row must be
batch MATCH_TREND's row of its (keys, window) over the events received so far; upserting
every emission on (keys, window) must end with batch MATCH_TREND over all the events; and
some window must have answered before it closed."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")

import cogra  # noqa: E402
from tests.spark.conftest import parametrize_operators  # noqa: E402
from tests.spark.rows import evaluate_rows, same_rows, sql_literal  # noqa: E402
from tests.spark.stream_files import OrderedFiles  # noqa: E402
from tests.spark.test_streaming import CARRIED, DELAY, MIXED, SIMPLE, events, feed  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("operator")]

ROWS_OPERATOR_IN_THE_DEFAULT_SUITE: set[str] = set()  # (the rows operator's runs: slow)


def pytest_generate_tests(metafunc):
    parametrize_operators(metafunc, ROWS_OPERATOR_IN_THE_DEFAULT_SUITE)


def window_key(row: tuple, columns: list[str]) -> tuple:
    """A row's identity: its group keys and window (every column but the aggregates)."""
    aggregates = {c for c in columns if "(" in c}
    return tuple(v for v, c in zip(row, columns) if c not in aggregates)


@pytest.mark.parametrize("query", [SIMPLE, MIXED, CARRIED], ids=["pattern-grained", "mixed-grained", "carried"])
def test_update_mode_emits_open_windows_and_ends_as_batch(spark, tmp_path, query):
    spark.conf.set("spark.sql.ansi.enabled", "false")
    table = events(2400)
    parts = [table.slice(i, 300) for i in range(0, table.num_rows, 300)]
    columns = cogra.result_schema(query, table.schema).names
    (tmp_path / "in").mkdir()
    pq.write_table(parts[0].slice(0, 1), tmp_path / "schema.parquet")
    schema = spark.read.parquet(str(tmp_path / "schema.parquet")).schema
    emitted: list[tuple[int, list[tuple]]] = []  # (files received, rows) per micro-batch
    received = 0
    ordered = OrderedFiles(tmp_path / "in")

    def record(frame, batch_id):
        emitted.append((received, [tuple(r) for r in frame.select(*[f"`{c}`" for c in columns]).collect()]))

    def run(files: list[pa.Table]) -> None:
        nonlocal received
        stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(tmp_path / "in"))
        stream.createOrReplaceTempView("ticks")
        out = spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(ticks), {sql_literal(query)}, "
                        f"watermark => '{DELAY} seconds')")
        writer = (out.writeStream.outputMode("update").foreachBatch(record)
                  .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        try:
            for part in files:
                writer.processAllAvailable()
                ordered.add(part, f"p{received:02}.parquet")
                received += 1
            writer.processAllAvailable()
        finally:
            writer.stop()

    try:
        run(parts[:4])
        run(parts[4:])  # restarted from the checkpoint
    finally:
        spark.conf.set("spark.sql.ansi.enabled", "true")

    # Every row is batch's row of its window over the events received so far.
    for files, rows in emitted:
        names, want = evaluate_rows(query, pa.concat_tables(parts[:files]))
        assert names == columns
        by_window = {window_key(r, columns): r for r in want}
        for row in rows:
            assert same_rows([row], [by_window.get(window_key(row, columns), ())]), (files, row)
    # Upserted on (keys, window), the emissions end as batch over every event.
    final = {}
    for _, rows in emitted:
        final.update({window_key(r, columns): r for r in rows})
    _, want = evaluate_rows(query, table)
    wanted = {window_key(r, columns): r for r in want}
    wrong = sorted((k, final.get(k), wanted.get(k)) for k in set(final) | set(wanted)
                   if not same_rows([final.get(k, ())], [wanted.get(k, ())]))
    assert len(want) > 50 and not wrong, wrong[:5]
    # Some windows answered while open, and again later.
    times = {}
    for _, rows in emitted:
        for row in rows:
            times[window_key(row, columns)] = times.get(window_key(row, columns), 0) + 1
    assert sum(n > 1 for n in times.values()) > 10


def test_append_mode_emits_only_closed_windows(spark, tmp_path):
    """The same stream in Append mode (the default) emits each window once, when closed."""
    table = events(1200)
    parts = [table.slice(i, 300) for i in range(0, table.num_rows, 300)]
    columns = cogra.result_schema(SIMPLE, table.schema).names
    (tmp_path / "in").mkdir()
    pq.write_table(parts[0], tmp_path / "in" / "p00.parquet")
    schema = spark.read.parquet(str(tmp_path / "in")).schema
    emitted: list[tuple] = []
    from cogra.spark import match_trend

    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(tmp_path / "in"))
    out = match_trend(stream, SIMPLE, watermark=f"{DELAY} seconds")
    writer = (out.writeStream.foreachBatch(lambda f, i: emitted.extend(tuple(r) for r in f.collect()))
              .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    feed(writer, parts, tmp_path / "in")
    keys = [window_key(r, columns) for r in emitted]
    assert len(keys) == len(set(keys)) > 20
    last = max(r[columns.index("window_end")] for r in emitted)
    assert last <= int(pa.compute.max(table["time"]).as_py()) - DELAY


NO_SHIM = """
import glob, os, sys
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from cogra.spark import match_trend
root, query = sys.argv[1], sys.argv[2]
spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.ansi.enabled", "false").getOrCreate())
files = sorted(glob.glob(root + "/parts/*.parquet"))
stream = (spark.readStream.schema(spark.read.parquet(files[0]).schema).option("maxFilesPerTrigger", 1)
          .parquet(root + "/in"))
out = match_trend(stream, query, watermark="5 seconds", output_mode="update")
def record(frame, batch_id):
    frame.toPandas().to_parquet(root + f"/out/b{batch_id:04}.parquet")
w = out.writeStream.outputMode("update").foreachBatch(record).option("checkpointLocation", root + "/cp").start()
for i, f in enumerate(files):
    w.processAllAvailable()
    pq.write_table(pq.read_table(f), root + f"/staging/p{i:03}.parquet")  # then renamed in:
    os.replace(root + f"/staging/p{i:03}.parquet", root + f"/in/p{i:03}.parquet")  # never half-written
w.processAllAvailable()
w.stop()
"""


@pytest.mark.slow  # (a Spark application of its own; the route without the shim streams in test_stream_hazards)
def test_the_route_without_the_shim_takes_update_mode_as_an_argument(tmp_path):
    """``match_trend(..., output_mode="update")`` on a session without the extension (its
    operator cannot see the writer's mode): the emissions, upserted, end as batch."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    table = events(1500)
    (tmp_path / "parts").mkdir()
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "staging").mkdir()
    for i in range(0, table.num_rows, 300):
        pq.write_table(table.slice(i, 300), tmp_path / "parts" / f"p{i:05}.parquet")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "python"), str(root)]),
           "PYSPARK_PYTHON": sys.executable}
    subprocess.run([sys.executable, "-c", NO_SHIM, str(tmp_path), SIMPLE], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    columns = cogra.result_schema(SIMPLE, table.schema).names
    final, emissions = {}, 0
    for path in sorted((tmp_path / "out").glob("b*.parquet")):
        for row in pq.read_table(path).select(columns).to_pylist():
            final[window_key(tuple(row.values()), columns)] = tuple(row.values())
            emissions += 1
    _, want = evaluate_rows(SIMPLE, table)
    assert len(want) > 50 and emissions > len(want) and same_rows(final.values(), want)


def test_output_mode_is_refused_where_the_writer_decides(spark, tmp_path):
    from cogra.spark import match_trend

    pq.write_table(events(10), tmp_path / "p.parquet")
    stream = spark.readStream.schema(spark.read.parquet(str(tmp_path)).schema).parquet(str(tmp_path))
    with pytest.raises(ValueError, match="the writer's outputMode"):
        match_trend(stream, SIMPLE, watermark="5 seconds", output_mode="update")
