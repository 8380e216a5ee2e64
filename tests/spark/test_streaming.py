"""MATCH_TREND over Structured Streaming (``match_trend(stream_df, query, watermark=...)``):
a real file source with files added while the query runs, a Parquet sink with a
checkpoint; the rows equal batch MATCH_TREND's for the windows the watermark closed,
across a stop and restart and across a killed driver."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")

import cogra  # noqa: E402
from cogra import datasets  # noqa: E402
from tests.spark.conftest import parametrize_operators  # noqa: E402
from tests.spark.rows import same_rows, sql_literal  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("operator")]

ROOT = Path(__file__).resolve().parents[2]
START = 1_700_000_000  # epoch seconds: Spark's first watermark (0) would drop events at time 0
DELAY = 5
SIMPLE = ("RETURN sector, COUNT(*), AVG(B.price) PATTERN SEQ(Stock A, Stock B) SEMANTICS next "
          "GROUP-BY sector WITHIN 10 seconds")
# Type-grained, integer sums: the kernels carry the open windows' states.
CARRIED = ("RETURN sector, COUNT(*), SUM(A.volume), MAX(B.price) PATTERN SEQ(Stock A+, Stock B) "
           "WHERE [company] GROUP-BY sector WITHIN 10 seconds SLIDE 5 seconds")
# q3's shape (mixed-grained, variable keys) under a sliding window.
MIXED = ("RETURN sector, A.company, B.company, COUNT(*), AVG(B.price) PATTERN SEQ(Stock A+, Stock B+) "
         "WHERE [A.company] AND [B.company] AND A.price > NEXT(A).price "
         "GROUP-BY sector, A.company, B.company WITHIN 20 seconds SLIDE 5 seconds")

# docs/language.md: a repetition, a negation and a key on an optional variable.
EXTENDED = ("RETURN sector, C.company, COUNT(*), MAX(A.price) "
            "PATTERN SEQ(Stock A{2,}, NOT Stock N, Stock B, Stock C?) SEMANTICS next "
            "WHERE N.volume > 9000 GROUP-BY sector, C.company WITHIN 10 seconds")


# Absence (docs/language.md): a window's blockers may come in a later micro-batch than its
# trends; the window is decided when the watermark closes it.
ABSENCE = ("RETURN sector, COUNT(*), MAX(A.price) PATTERN SEQ(NOT Stock M, Stock A+, Stock B, NOT Stock N) "
           "SEMANTICS next WHERE M.volume > 9500 AND N.volume < 500 GROUP-BY sector WITHIN 10 seconds SLIDE 5 seconds")


def events(n: int = 3000, seed: int = 3) -> pa.Table:
    return datasets.stock(n, seed=seed, start=START)


def closed_rows(query: str, table: pa.Table) -> list[tuple]:
    """Batch MATCH_TREND's rows of the windows the final watermark (largest time minus the
    delay) has passed."""
    want = cogra.evaluate(query, table, on_overflow="null")
    watermark = int(pc.max(table["time"]).as_py()) - DELAY
    want = want.filter(pc.less_equal(want["window_end"], watermark))
    return [tuple(r.values()) for r in want.to_pylist()]


def sink_rows(path: Path, columns: list[str]) -> list[tuple]:
    if not path.exists() or not any(path.glob("*.parquet")):
        return []
    return [tuple(r.values()) for r in pq.read_table(path).select(columns).to_pylist()]


def start(spark, root: Path, query: str, schema, route: str = "dataframe"):
    """The streaming MATCH_TREND over a file source of ``root/in``, into a Parquet sink
    with a checkpoint: through ``match_trend`` or SQL over a streaming view."""
    from cogra.spark import match_trend

    stream = spark.readStream.schema(schema).parquet(str(root / "in"))
    if route == "sql":
        stream.createOrReplaceTempView("ticks")
        out = spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(ticks), {sql_literal(query)}, "
                        f"watermark => '{DELAY} seconds')")
    else:
        out = match_trend(stream, query, watermark=f"{DELAY} seconds")
    return (out.writeStream.format("parquet").option("path", str(root / "out"))
            .option("checkpointLocation", str(root / "checkpoint")).outputMode("append").start())


def feed(writer, parts: list[pa.Table], directory: Path) -> None:
    """Add ``parts[1:]`` to the watched ``directory`` one per micro-batch (``parts[0]`` is
    there already), let the stream take them all, then stop it."""
    try:
        for i, part in enumerate(parts[1:], 1):
            writer.processAllAvailable()
            pq.write_table(part, directory / f"p{i:02}.parquet")
        writer.processAllAvailable()
    finally:
        writer.stop()


ROWS_OPERATOR_IN_THE_DEFAULT_SUITE = {"test_late_events_are_dropped_and_counted", "test_the_inputs_own_watermark_serves",
                               "test_partition_by_keys_the_stream", "test_restart_from_the_checkpoint_after_a_stop"}


def pytest_generate_tests(metafunc):
    parametrize_operators(metafunc, ROWS_OPERATOR_IN_THE_DEFAULT_SUITE)


@pytest.fixture
def stream_conf(spark):
    spark.conf.set("spark.sql.ansi.enabled", "false")
    yield spark
    spark.conf.set("spark.sql.ansi.enabled", "true")


@pytest.mark.parametrize("query, route", [  # each query once in the default suite: the shim plans both routes alike
    (SIMPLE, "dataframe"), pytest.param(MIXED, "dataframe", marks=pytest.mark.slow),
    pytest.param(CARRIED, "dataframe", marks=pytest.mark.slow),
    pytest.param(SIMPLE, "sql", marks=pytest.mark.slow), (MIXED, "sql"), (CARRIED, "sql"), (EXTENDED, "sql"),
    (ABSENCE, "dataframe")],
    ids=["pattern-grained", "mixed-grained", "carried", "sql-pattern-grained", "sql-mixed-grained", "sql-carried",
         "sql-quantifier-negation-optional-key", "absence"])
def test_stream_equals_batch_for_the_closed_windows(stream_conf, tmp_path, query, route):
    from cogra.runtime.online import OnlineEvaluation

    spark = stream_conf
    table = events()
    kind = OnlineEvaluation(query, table.schema).kind
    assert kind == ("carried" if query == CARRIED else "held")
    (tmp_path / "in").mkdir()
    parts = [table.slice(i, 400) for i in range(0, table.num_rows, 400)]
    pq.write_table(parts[0], tmp_path / "in" / "p00.parquet")
    writer = start(spark, tmp_path, query, spark.createDataFrame(table.slice(0, 1)).schema, route)
    try:
        for i, part in enumerate(parts[1:], 1):
            writer.processAllAvailable()
            pq.write_table(part, tmp_path / "in" / f"p{i:02}.parquet")
        writer.processAllAvailable()
        progress = writer.lastProgress
    finally:
        writer.stop()
    want = closed_rows(query, table)
    columns = cogra.result_schema(query, table.schema).names
    got = sink_rows(tmp_path / "out", columns)
    assert len(want) > 50 and same_rows(got, want)
    assert progress["stateOperators"][0]["numRowsDroppedByWatermark"] == 0


@pytest.mark.parametrize("route", ["dataframe", "sql"])
def test_late_events_are_dropped_and_counted(stream_conf, tmp_path, route):
    spark = stream_conf
    table = events(1200)
    (tmp_path / "in").mkdir()
    pq.write_table(table, tmp_path / "in" / "p0.parquet")
    writer = start(spark, tmp_path, SIMPLE, spark.createDataFrame(table.slice(0, 1)).schema, route)
    try:
        writer.processAllAvailable()
        late = table.slice(0, 50)  # long behind the watermark now
        pq.write_table(late, tmp_path / "in" / "p1.parquet")
        writer.processAllAvailable()
        dropped = sum(p["stateOperators"][0]["numRowsDroppedByWatermark"] for p in writer.recentProgress)
    finally:
        writer.stop()
    assert dropped == 50
    got = sink_rows(tmp_path / "out", cogra.result_schema(SIMPLE, table.schema).names)
    assert same_rows(got, closed_rows(SIMPLE, table))  # the late copies matched nothing
    # The driver's log says so (listener events arrive asynchronously).
    deadline = time.monotonic() + 20
    said = f"MATCH_TREND stream {writer.id}: 50 late row(s)"
    while said not in (text := spark._jvm.org.apache.spark.sql.cogra.Diagnostics.recent()):
        assert time.monotonic() < deadline, text
        time.sleep(0.2)
    assert "were dropped in batch" in text


def test_restart_from_the_checkpoint_after_a_stop(stream_conf, tmp_path):
    spark = stream_conf
    table = events()
    (tmp_path / "in").mkdir()
    parts = [table.slice(i, 500) for i in range(0, table.num_rows, 500)]
    schema = spark.createDataFrame(table.slice(0, 1)).schema
    for round_ in (parts[:3], parts[3:]):
        writer = start(spark, tmp_path, SIMPLE, schema)
        try:
            for part in round_:
                n = len(list((tmp_path / "in").glob("*.parquet")))
                pq.write_table(part, tmp_path / "in" / f"p{n:02}.parquet")
                writer.processAllAvailable()
        finally:
            writer.stop()
    got = sink_rows(tmp_path / "out", cogra.result_schema(SIMPLE, table.schema).names)
    assert same_rows(got, closed_rows(SIMPLE, table))


def test_a_stream_killed_while_writing_its_first_offsets_restarts(stream_conf, tmp_path):
    """A driver killed while writing ``offsets/0`` leaves only the checkpoint file
    manager's temporary file (and its checksum): no log entry, so the restart begins at
    batch 0, where Spark requires the log directory to list empty.  Starting MATCH_TREND on
    that checkpoint removes the leftover and streams; the sink equals batch."""
    spark = stream_conf
    table = events(1200)
    (tmp_path / "in").mkdir()
    parts = [table.slice(i, 400) for i in range(0, table.num_rows, 400)]
    pq.write_table(parts[0], tmp_path / "in" / "p00.parquet")
    offsets = tmp_path / "checkpoint" / "offsets"
    offsets.mkdir(parents=True)
    (tmp_path / "checkpoint" / "commits").mkdir()
    (tmp_path / "checkpoint" / "metadata").write_text('{"id":"4b1c4e0e-7a62-4d1a-9f55-0c2d1e6f5b11"}')
    leftover = [offsets / ".0.a3b731d7-8d22-4f1e-a053-4a31680ffdac.tmp",
                offsets / "..0.a3b731d7-8d22-4f1e-a053-4a31680ffdac.tmp.crc"]
    for path in leftover:
        path.write_bytes(b"")
    writer = start(spark, tmp_path, SIMPLE, spark.createDataFrame(table.slice(0, 1)).schema)
    feed(writer, parts, tmp_path / "in")
    assert not any(path.exists() for path in leftover)
    got = sink_rows(tmp_path / "out", cogra.result_schema(SIMPLE, table.schema).names)
    want = closed_rows(SIMPLE, table)
    assert len(want) > 10 and same_rows(got, want)


DRIVER = textwrap.dedent("""
    import sys, time
    import pyarrow.parquet as pq
    from cogra.spark import session, match_trend
    root, query, delay = sys.argv[1], sys.argv[2], int(sys.argv[3])
    spark = session(master="local[2]", **{"spark.sql.shuffle.partitions": "2",
                                          "spark.sql.ansi.enabled": "false"})
    schema = spark.read.parquet(root + "/schema.parquet").schema
    stream = spark.readStream.schema(schema).parquet(root + "/in")
    writer = (match_trend(stream, query, watermark=f"{delay} seconds").writeStream.format("parquet")
              .option("path", root + "/out").option("checkpointLocation", root + "/checkpoint")
              .outputMode("append").start())
    print("started", flush=True)
    while True:
        writer.processAllAvailable()
        print("batch", writer.lastProgress and writer.lastProgress["batchId"], flush=True)
        time.sleep(0.2)
""")


@pytest.mark.slow  # (test_stream_recovery kills the driver of random queries in the default suite)
def test_restart_from_the_checkpoint_after_the_driver_is_killed(tmp_path):
    """The whole driver process is killed with SIGKILL mid-stream; a new one started on the
    same checkpoint finishes the stream; the sink holds exactly the uninterrupted rows."""
    table = events()
    (tmp_path / "in").mkdir()
    pq.write_table(table.slice(0, 1), tmp_path / "schema.parquet")
    parts = [table.slice(i, 500) for i in range(0, table.num_rows, 500)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(ROOT)]),
           "COGRA_GENERATED_KERNELS": "0", "COGRA_BACKGROUND_COMPILE": "0"}

    def driver() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path), SIMPLE, str(DELAY)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env=env, start_new_session=True)

    def wait_batches(proc: subprocess.Popen, n: int) -> None:
        seen = 0
        deadline = time.monotonic() + 240
        while seen < n:
            line = proc.stdout.readline()
            assert line and time.monotonic() < deadline, "the driver stopped"
            seen += line.startswith("batch")

    first = driver()
    try:
        for i, part in enumerate(parts[:4]):
            pq.write_table(part, tmp_path / "in" / f"p{i:02}.parquet")
            wait_batches(first, 2)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    second = driver()
    try:
        for i, part in enumerate(parts[4:], 4):
            pq.write_table(part, tmp_path / "in" / f"p{i:02}.parquet")
            wait_batches(second, 2)
        wait_batches(second, 3)
    finally:
        os.killpg(second.pid, signal.SIGKILL)
        second.wait()
    got = sink_rows(tmp_path / "out", cogra.result_schema(SIMPLE, table.schema).names)
    want = closed_rows(SIMPLE, table)
    assert len(got) == len(want) and same_rows(got, want)


def test_a_streaming_call_needs_within_and_a_watermark(spark, tmp_path):
    from cogra.spark import match_trend

    table = events(10)
    pq.write_table(table, tmp_path / "p.parquet")
    stream = spark.readStream.schema(spark.createDataFrame(table).schema).parquet(str(tmp_path))
    with pytest.raises(ValueError, match="needs watermark="):
        match_trend(stream, SIMPLE)
    with pytest.raises(cogra.QueryError, match="needs WITHIN"):
        match_trend(stream, "RETURN COUNT(*) PATTERN Stock A+", watermark="5 seconds")


def test_sql_over_a_stream_fails_at_analysis_without_watermark_or_within(spark, tmp_path):
    from pyspark.errors import AnalysisException

    table = events(10)
    pq.write_table(table, tmp_path / "p.parquet")
    spark.readStream.schema(spark.createDataFrame(table).schema).parquet(str(tmp_path)) \
        .createOrReplaceTempView("ticks_no_watermark")
    with pytest.raises(AnalysisException, match="needs watermark => .30 seconds. .how late an event may arrive., or a watermark on the input"):
        spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(ticks_no_watermark), {sql_literal(SIMPLE)})")
    with pytest.raises(AnalysisException, match="needs WITHIN"):
        spark.sql("SELECT * FROM MATCH_TREND(TABLE(ticks_no_watermark), 'RETURN COUNT(*) PATTERN Stock A+', "
                  "watermark => '5 seconds')")
    # A batch call ignores the watermark.
    spark.createDataFrame(table).createOrReplaceTempView("ticks_batch")
    rows = spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(ticks_batch), {sql_literal(SIMPLE)}, "
                     "watermark => '5 seconds')").collect()
    assert same_rows([tuple(r) for r in rows],
                     [tuple(r.values()) for r in cogra.evaluate(SIMPLE, table).to_pylist()])


@pytest.mark.slow
def test_the_data_set_sources_batch_and_stream(spark):
    """``cogra.stock`` as a batch read is the stream's first rows, deterministic per seed;
    as a stream it feeds a MATCH_TREND that emits closed windows."""
    import io

    from cogra.spark import sources
    from cogra.spark.demo import run_stream_demo

    sources.register(spark)
    first = spark.read.format("cogra.stock").option("rows", 25_000).option("seed", 7).load().toArrow()
    again = spark.read.format("cogra.stock").option("rows", 25_000).option("seed", 7).load().toArrow()
    want = pa.concat_tables([sources.block("stock", k, 7, sources.DEFAULT_START) for k in (0, 1)]).slice(0, 25_000)
    order = [("time", "ascending"), ("transaction", "ascending")]
    assert first.sort_by(order).equals(again.sort_by(order))
    assert first.sort_by(order).equals(want.sort_by(order))
    times = want.column("time").to_numpy()
    assert (times[1:] >= times[:-1]).all() and times[0] >= sources.DEFAULT_START

    out = io.StringIO()
    assert run_stream_demo(seconds=12, rows_per_second=3000, rows=1, spark=spark, out=out) == 0
    text = out.getvalue()
    assert "q3 over a live stock stream" in text
    assert "after the watermark passed their end" in text, text


def test_the_inputs_own_watermark_serves(stream_conf, tmp_path):
    """A streaming view with withWatermark on its timestamp time column needs no
    watermark => argument."""
    spark = stream_conf
    table = events(2500)
    stamped = table.set_column(table.schema.get_field_index("time"), "time",
                               pc.multiply(table["time"], 1_000_000).cast(pa.timestamp("us", tz="UTC")))
    (tmp_path / "in").mkdir()
    parts = [stamped.slice(i, 500) for i in range(0, stamped.num_rows, 500)]
    pq.write_table(parts[0], tmp_path / "in" / "p00.parquet")
    schema = spark.createDataFrame(stamped.slice(0, 1)).schema
    stream = spark.readStream.schema(schema).parquet(str(tmp_path / "in")).withWatermark("time", f"{DELAY} seconds")
    stream.createOrReplaceTempView("stamped_ticks")
    out = spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(stamped_ticks), {sql_literal(SIMPLE)})")
    writer = (out.writeStream.format("parquet").option("path", str(tmp_path / "out"))
              .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    feed(writer, parts, tmp_path / "in")
    want = cogra.evaluate(SIMPLE, stamped, on_overflow="null")
    last = pc.max(table["time"]).as_py() - DELAY
    want = want.filter(pc.less_equal(pc.cast(want["window_end"], pa.int64()), last * 1_000_000))
    columns = want.column_names
    got = pq.read_table(tmp_path / "out").select(columns)
    assert want.num_rows > 50
    assert same_rows([tuple(r.values()) for r in got.to_pylist()], [tuple(r.values()) for r in want.to_pylist()])


@pytest.mark.parametrize("query", [pytest.param(SIMPLE, marks=pytest.mark.slow), CARRIED], ids=["held", "carried"])
def test_partition_by_keys_the_stream(stream_conf, tmp_path, query):
    """``TABLE(t) PARTITION BY (company)`` over a stream: each company's rows are evaluated
    on their own (one output row per company, sector and window), as batch MATCH_TREND
    does, and as each company's own cogra.evaluate."""
    spark = stream_conf
    table = events(2400)
    (tmp_path / "in").mkdir()
    pq.write_table(table.slice(0, 1200), tmp_path / "in" / "p0.parquet")
    spark.readStream.schema(spark.createDataFrame(table.slice(0, 1)).schema).parquet(str(tmp_path / "in")) \
        .createOrReplaceTempView("ticks_by_company")
    out = spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(ticks_by_company) PARTITION BY (company), "
                    f"{sql_literal(query)}, watermark => '{DELAY} seconds')")
    writer = (out.writeStream.format("parquet").option("path", str(tmp_path / "out"))
              .option("checkpointLocation", str(tmp_path / "checkpoint")).outputMode("append").start())
    try:
        writer.processAllAvailable()
        pq.write_table(table.slice(1200), tmp_path / "in" / "p1.parquet")
        writer.processAllAvailable()
    finally:
        writer.stop()
    watermark = int(pc.max(table["time"]).as_py()) - DELAY
    want = []
    for company in pc.unique(table["company"]).to_pylist():
        part = table.filter(pc.equal(table["company"], company))
        result = cogra.evaluate(query, part, on_overflow="null")
        result = result.filter(pc.less_equal(result["window_end"], watermark))
        want += [tuple(r.values()) for r in result.to_pylist()]
    got = sink_rows(tmp_path / "out", cogra.result_schema(query, table.schema).names)
    assert len(want) > 50 and same_rows(got, want)
