"""``cogra bench --experiments streaming-operators`` (opt-in; Spark): what each streaming
plan costs per row, side by side in one run.

Each of q1-q3 streams its data set from a backlog of Parquet files, one file (100,000
rows; 20,000 in quick mode) per micro-batch, with the report's 30-second watermark, into a
no-op sink; the measure is rows per busy second over the micro-batches after the first two
(the first start the Python workers and load the kernels).  Over the same files, in the
same session:

* ``source``: the scan alone;
* ``native``: Spark's own streaming window aggregation, ``groupBy(keys, window(time,
  WITHIN, SLIDE)).agg(count(*), max(time))``, on the session's state store (HDFS-backed);
* ``noop transformWithState`` / ``noop packed``: each streaming operator of MATCH_TREND with
  a handler that only counts its rows (one long of state per group), over the same
  projection -- the ceiling of the operator, no cogra work;
* ``cogra transformWithState`` / ``cogra packed``: MATCH_TREND on each operator
  (``spark.cogra.streaming.operator``); ``cogra packed update`` in Update mode (early rows
  of the open windows after every micro-batch).

MATCH_TREND's operators keep their state in RocksDB (transformWithState takes no other
store); the native aggregation in the session's default store.  Per plan the table also gives
the state operator's commit time per micro-batch.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from cogra.bench.sections import generated_by, new_result, save, write_section
from cogra.examples import Q1, Q2, Q3

QUERIES = {"q1": ("activity", Q1), "q2": ("rides", Q2), "q3": ("stock", Q3)}
PLANS = ("source", "native", "noop transformWithState", "noop packed", "cogra transformWithState", "cogra packed",
         "cogra packed update")
DELAY = "30 seconds"
SIZES = {"full": {"files": 12, "rows": 100_000}, "quick": {"files": 6, "rows": 20_000}}
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
OPERATOR = "spark.cogra.streaming.operator"


def _noop_transform_with_state(frame: Any, keys: list[str]) -> Any:
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    class Count(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.n = handle.getValueState("n", StructType([StructField("n", LongType())]))

        def handleInputRows(self, key: Any, rows: Any, timer_values: Any) -> Any:
            n = sum(len(pdf) for pdf in rows)
            self.n.update(((self.n.get()[0] if self.n.exists() else 0) + n,))
            return iter(())

        def close(self) -> None:
            pass

    return frame.groupBy(*keys).transformWithStateInPandas(
        Count(), StructType([StructField("k", StringType())]), "Append", "EventTime")


def _noop_packed(frame: Any, columns: list[str], keys: list[str]) -> Any:
    """The packed operator with a handler that only counts rows: packing, then
    transformWithStateInPandas over one row per group and task."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from cogra.spark.stream_packing import EVENT_TIME, GROUP, PAYLOAD, pack, read_payload

    def packing(batches: Any) -> Any:
        for batch in batches:
            if batch.num_rows:
                yield pack(batch, columns)

    class Count(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.n = handle.getValueState("n", StructType([StructField("n", LongType())]))

        def handleInputRows(self, key: Any, rows: Any, timer_values: Any) -> Any:
            n = sum(read_payload(p).num_rows for pdf in rows for p in pdf[PAYLOAD])
            self.n.update(((self.n.get()[0] if self.n.exists() else 0) + n,))
            return iter(())

        def close(self) -> None:
            pass

    grouped = frame.select(*columns, EVENT_TIME, F.to_json(F.struct(*keys)).alias(GROUP))
    packed = grouped.mapInArrow(packing, f"{GROUP} string, {PAYLOAD} binary, {EVENT_TIME} timestamp")
    return packed.groupBy(GROUP).transformWithStateInPandas(
        Count(), StructType([StructField("k", StringType())]), "Append", "EventTime")


def build(spark: Any, plan: str, name: str, path: str) -> Any:
    """The streaming DataFrame of ``plan`` for query ``name`` over the files in ``path``."""
    schema = spark.read.parquet(path).schema
    return plan_frame(spark, plan, name, spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(path))


def plan_frame(spark: Any, plan: str, name: str, source: Any) -> Any:
    """``plan`` for query ``name`` over the streaming DataFrame ``source``.  ``native``
    gives its window's end as ``window_end`` (seconds), as MATCH_TREND does."""
    from pyspark.sql import functions as F

    import cogra
    from cogra.spark import match_trend

    _, query = QUERIES[name]
    if plan == "source":
        return source
    if plan.startswith("cogra"):
        spark.conf.set(OPERATOR, plan.split()[1])
        return match_trend(source, query, watermark=DELAY)
    q = cogra.parse(query)
    keys = list(cogra.partition_columns(q))
    timed = source.withColumn("__cogra_event_time", F.timestamp_seconds("time")).withWatermark(
        "__cogra_event_time", DELAY)
    if plan == "native":
        size, slide = int(q.window.size), int(q.window.step)
        return (timed.groupBy(*keys, F.window("__cogra_event_time", f"{size} seconds", f"{slide} seconds"))
                .agg(F.count("*").alias("count"), F.max("time").alias("max_time"))
                .select(*keys, F.unix_timestamp(F.col("window.end")).alias("window_end"), "count", "max_time"))
    columns = [c for c in cogra.plan(q, _arrow(source.schema)).bound.columns_used if c in source.schema.names]
    if plan == "noop transformWithState":
        return _noop_transform_with_state(timed.select(*columns, "__cogra_event_time"), keys)
    return _noop_packed(timed, columns, keys)


def _arrow(schema: Any) -> Any:
    from cogra.spark.udtf_analysis import _arrow_schema

    return _arrow_schema(schema)


def measure(spark: Any, plan: str, name: str, path: str, work: Path) -> dict:
    """Stream ``plan`` over the backlog; rows per busy second after the first two batches."""
    store = HDFS if plan == "native" else ROCKSDB
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", store)
    frame = build(spark, plan, name, path)
    mode = "update" if plan == "native" or plan.endswith(" update") else "append"
    checkpoint = work / f"checkpoint-{name}-{plan.replace(' ', '-')}"
    stream = (frame.writeStream.format("noop").outputMode(mode)
              .option("checkpointLocation", str(checkpoint)).start())
    try:
        stream.processAllAvailable()
    finally:
        stream.stop()
        spark.conf.unset(OPERATOR)
    progress = sorted((p for p in stream.recentProgress if p.get("numInputRows")), key=lambda p: p["batchId"])[2:]
    rows = sum(p["numInputRows"] for p in progress)
    busy = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000
    commits = [sum(o.get("commitTimeMs", 0) for o in p["stateOperators"]) for p in progress if p.get("stateOperators")]
    return {"query": name, "plan": plan, "batches": len(progress), "rows": rows, "busy_seconds": round(busy, 3),
            "rows_per_second": round(rows / busy) if busy else None,
            "commit_ms": round(sum(commits) / len(commits)) if commits else None}


def run(quick: bool, out_dir: Path, docs_dir: Path | None, log: Any = None) -> dict:
    import pyarrow.parquet as pq

    from cogra import datasets
    from cogra.spark import session
    from cogra.spark.sqlrun import quiet_pyspark

    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    size = SIZES["quick" if quick else "full"]
    quiet_pyspark()
    spark = session(app_name="cogra-bench-stream-operators", master="local[2]", **{
        "spark.ui.enabled": "false", "spark.sql.ansi.enabled": "false", "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.numRecentProgressUpdates": "1000"})
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="cogra-bench-operators-"))
    rows = []
    try:
        for name, (data_set, _) in QUERIES.items():
            path = work / f"in-{name}"
            path.mkdir()
            table = getattr(datasets, data_set)(size["files"] * size["rows"], seed=1)
            for i in range(size["files"]):
                pq.write_table(table.slice(i * size["rows"], size["rows"]), path / f"p{i:03}.parquet")
            for plan in PLANS:
                r = measure(spark, plan, name, str(path), work)
                log(f"cogra bench streaming-operators: {name} {plan:<26} {r['rows_per_second'] or 0:>9,} rows/s "
                    f"(commit {r['commit_ms']} ms per micro-batch)")
                rows.append(r)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return save("streaming-operators", new_result(quick, rows=rows, rows_per_file=size["rows"]), out_dir, docs_dir,
                write_report)


def write_report(result: dict, docs_dir: Path) -> Path:
    """``docs_dir/benchmarks/streaming-operators.md``, embedded in benchmarks.md."""
    lines = ["## Streaming operators: cost per row, side by side", ""]
    add = lines.append
    add(generated_by("streaming-operators", result) + "; see `python/cogra/bench/streaming_operators.py`. "
        f"Micro-batches of {result['rows_per_file']:,} rows from a backlog of Parquet files, no-op sink; rows "
        "per busy second after the first two micro-batches, and the state operator's commit time per "
        "micro-batch. `native` is Spark's streaming window aggregation with the query's keys and window; "
        "`noop` plans run the operator with a handler that only counts rows.")
    add("")
    add("| plan | " + " | ".join(QUERIES) + " |")
    add("|---|" + "---|" * len(QUERIES))
    for plan in PLANS:
        cells = []
        for name in QUERIES:
            r = next((r for r in result["rows"] if r["plan"] == plan and r["query"] == name), None)
            commit = f", commit {r['commit_ms']} ms" if r and r["commit_ms"] is not None else ""
            cells.append(f"{r['rows_per_second']:,} rows/s{commit}" if r and r["rows_per_second"] else "-")
        add(f"| {plan} | " + " | ".join(cells) + " |")
    return write_section(docs_dir, "streaming-operators", lines)


__all__ = ["PLANS", "QUERIES", "build", "measure", "plan_frame", "run", "write_report"]
