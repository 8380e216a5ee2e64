"""``cogra bench --experiments streaming``: q1-q3 over Structured Streaming on local[2].

Three measurements, written to ``docs/benchmarks/streaming.md`` (embedded in
``docs/benchmarks.md``) with plots, and the raw numbers to ``streaming.json``:

* **Sustained rate.**  Each query over its data set's live source (``cogra.activity``,
  ``cogra.rides``, ``cogra.stock``; :mod:`cogra.spark.sources`) at doubling input rates,
  a processing-time trigger of one second, the report's 30-second watermark, Spark's
  memory sink, after a warm-up stream of the query (its first micro-batch starts the
  Python workers and loads or compiles the kernels: a one-time cost, not a rate).  A rate is *sustained* when, over the run's second half (the first
  half pays the workers' start and compiles), the micro-batches process their rows at
  least as fast as they arrive: rows / busy seconds >= rows offered per second.  The
  ladder stops at the first rate that is not.
Each query runs under :data:`PLANS`, side by side in one session: MATCH_TREND in Append and
in Update mode, Spark's own streaming window aggregation, and MATCH_TREND's operator with a
handler that only counts rows.

* **Latency** from the input closing a window to its row in the sink: for each emitted
  window, the end of the micro-batch that emitted it minus the start of the first
  micro-batch whose largest event time minus the delay reached the window's end.  It includes Spark's own step: a
  watermark computed in one micro-batch closes windows in the next.
* **State size** over a long simulated stream: the query evaluated by
  :class:`~cogra.runtime.online.OnlineEvaluation` per group of its plain GROUP-BY keys,
  as Spark's stateful operator keeps it, with the global watermark advanced after each
  batch; the sum of the groups' snapshots (the bytes the state store holds) after each
  batch.  Flat means bounded by the open windows, not by the events seen.

Each rate's events are then evaluated by batch ``MATCH_TREND`` in the same session
(the source's first N rows are the stream's), timed, and compared with the streamed
rows of the windows the stream closed.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from cogra.examples import Q1, Q2, Q3

QUERIES = {"q1": ("activity", Q1), "q2": ("rides", Q2), "q3": ("stock", Q3)}
DELAY_SECONDS = 30
TRIGGER = "1 second"
FULL = {"rates": [16_000 * 2**k for k in range(6)], "seconds": 24, "warmup": 30, "events": 1_000_000, "batch": 10_000}
QUICK = {"rates": [500, 2_000], "seconds": 16, "warmup": 15, "events": 100_000, "batch": 5_000}
PLANS = ("cogra", "cogra update", "native", "noop packed")
"""MATCH_TREND (its default operator, Append mode into Parquet), the same in Update mode
(no-op sink), Spark's own streaming window aggregation with the query's keys and window
(Parquet), and MATCH_TREND's operator with a handler that only counts rows (no-op sink)."""


@dataclass
class RateRun:
    """One plan of one query at one input rate."""

    query: str
    rate: int
    seconds: float
    batches: int
    rows: int
    capacity: float
    """Second half: rows processed per busy second, over the rate (>= 1: sustained)."""
    sustained: bool
    latency_p50: float | None
    latency_p95: float | None
    latency_max: float | None
    windows: int
    output_rows: int
    state_rows: int | None
    state_bytes: int | None
    batch_seconds: float | None = None
    batch_rows_per_second: float | None = None
    equal_to_batch: bool | None = None
    plan: str = "cogra"
    state_written_per_batch: int | None = None
    """Second half: bytes the state store wrote per micro-batch (RocksDB's puts and deletes)."""
    rows_per_batch: int | None = None
    batch_p50: float | None = None
    """Second half: the median micro-batch's duration (s)."""


@dataclass
class StateCurve:
    """State bytes after each batch of a simulated stream."""

    query: str
    kind: str
    groups: int
    events: list[int] = field(default_factory=list)
    state_bytes: list[int] = field(default_factory=list)


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(math.ceil(q * len(values))) - 1)]


def run_rate(spark: Any, name: str, rate: int, seconds: float, log: Any, plan: str = "cogra") -> RateRun:
    """Stream ``name`` at ``rate`` rows/s for ``seconds`` into a Parquet sink; then batch
    MATCH_TREND over the same rows into Parquet.  (File sinks: the rows never pass through
    the driver's heap, which a memory sink's millions of rows exhaust.)

    Latencies come from the query's progress alone: a window ending at ``e`` is emitted by
    the first micro-batch whose watermark is at least ``e`` (its rows are in the sink when
    that batch ends), and became closable with the first micro-batch whose largest event
    time minus the delay reached ``e``.  (Why not a ``foreachBatch`` sink timing its calls:
    stopping a query while a Python sink runs makes Spark match the py4j error's text with
    a regular expression that overflows the stream thread's stack.)"""
    work = Path(tempfile.mkdtemp(prefix="cogra-bench-stream-"))
    try:
        return _run_rate(spark, name, rate, seconds, work, log, plan)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_rate(spark: Any, name: str, rate: int, seconds: float, work: Path, log: Any, plan: str) -> RateRun:
    from cogra.bench.streaming_operators import plan_frame
    from cogra.spark import match_trend

    from cogra.bench.streaming_operators import HDFS, ROCKSDB
    from cogra.spark.event_time import OFFSET_SECONDS

    data_set, query = QUERIES[name]
    # Spark's aggregation on its default store; MATCH_TREND's operator takes RocksDB only.
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", HDFS if plan == "native" else ROCKSDB)
    from cogra.spark import sources

    source = sources.register(spark).readStream.format(f"cogra.{data_set}").option("rowsPerSecond", rate).load()
    if plan in ("cogra", "cogra update"):
        out = match_trend(source, query, watermark=f"{DELAY_SECONDS} seconds")
    else:
        out = plan_frame(spark, plan, name, source)
    writer = out.writeStream.trigger(processingTime=TRIGGER).option("checkpointLocation", str(work / "checkpoint"))
    if plan in ("cogra", "native"):
        writer = writer.format("parquet").option("path", str(work / "stream")).outputMode("append")
    else:
        writer = writer.format("noop").outputMode("update" if plan == "cogra update" else "append")
    stream = writer.start()
    try:
        stream.awaitTermination(seconds)
    finally:
        stream.stop()
    progress = [p for p in stream.recentProgress if p.get("numInputRows") is not None]
    streamed = _committed(work / "stream")
    progress.sort(key=lambda p: p["batchId"])
    rows = max((int(_offset(p["sources"][0]["endOffset"])) for p in progress if p["sources"]), default=0)
    # Capacity over the second half of the run.
    began = _epoch(progress[0]["timestamp"]) if progress else 0.0
    half = [p for p in progress if _epoch(p["timestamp"]) >= began + seconds / 2]
    busy = sum(p["durationMs"].get("triggerExecution", 0) for p in half) / 1000
    done = sum(p["numInputRows"] for p in half)
    capacity = (done / busy / rate) if busy > 0 and done else 0.0
    # Latency of each window end.
    closable: list[tuple[float, float]] = []  # (largest time minus the delay so far, batch start)
    emitted: list[tuple[float, float]] = []  # (batch's watermark, batch end)
    top = -math.inf
    # MATCH_TREND's watermark is on the time shifted by OFFSET_SECONDS (spark/event_time.py).
    shift = OFFSET_SECONDS if plan in ("cogra", "cogra update") else 0
    for p in progress:
        start = _epoch(p["timestamp"])
        times = p.get("eventTime") or {}
        if times.get("max"):
            top = max(top, _epoch(times["max"]) - shift)
        closable.append((top - DELAY_SECONDS, start))
        if times.get("watermark") and _epoch(times["watermark"]) > 0:
            emitted.append((_epoch(times["watermark"]) - shift, start + p["durationMs"].get("triggerExecution", 0) / 1000))
    latencies = []
    ends = sorted(set(streamed.column("window_end").to_pylist())) if streamed is not None else []
    for end in ends:
        opened = next((t for mark, t in closable if mark >= end), None)
        out_at = next((t for mark, t in emitted if mark >= end), None)
        if opened is not None and out_at is not None:
            latencies.append(out_at - opened)
    last = progress[-1] if progress else {}
    operators = last.get("stateOperators") or [{}]
    written = [sum(o.get("customMetrics", {}).get("rocksdbTotalBytesWritten", 0) for o in p.get("stateOperators") or [])
               for p in half]
    durations = sorted(p["durationMs"].get("triggerExecution", 0) / 1000 for p in half)
    result = RateRun(
        plan=plan, state_written_per_batch=round(sum(written) / len(written)) if written else None,
        batch_p50=durations[len(durations) // 2] if durations else None,
        rows_per_batch=round(done / len(half)) if half else None,
        query=name, rate=rate, seconds=seconds, batches=len(progress), rows=rows, capacity=round(capacity, 3),
        sustained=capacity >= 1.0, latency_p50=_percentile(latencies, 0.5),
        latency_p95=_percentile(latencies, 0.95), latency_max=max(latencies) if latencies else None,
        windows=len(latencies), output_rows=streamed.num_rows if streamed is not None else 0,
        state_rows=operators[0].get("numRowsTotal"), state_bytes=operators[0].get("memoryUsedBytes"))
    if rows and plan == "cogra":
        began = time.perf_counter()
        events = spark.read.format(f"cogra.{data_set}").option("rows", rows).load()
        match_trend(events, query).write.parquet(str(work / "batch"))
        result.batch_seconds = round(time.perf_counter() - began, 3)
        result.batch_rows_per_second = round(rows / result.batch_seconds)
        whole = _committed(work / "batch")
        if streamed is not None and whole is not None:
            result.equal_to_batch = _same_closed_windows(streamed, whole)
    log(f"  {name} {plan} at {rate:,} rows/s: {result.rows:,} rows in {result.batches} batches, capacity "
        f"{result.capacity:.2f}x, latency p50 {result.latency_p50 or 0:.2f} s p95 {result.latency_p95 or 0:.2f} s, "
        f"batch {result.batch_rows_per_second or 0:,} rows/s, equal {result.equal_to_batch}")
    return result


def _committed(path: Path) -> Any:
    """The rows of the Parquet files a sink committed (None: none).  A streaming file sink
    lists them in its ``_spark_metadata`` log (the last compaction and the batches after
    it); a micro-batch interrupted by the stop may have left files it never committed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    log = path / "_spark_metadata"
    if log.is_dir():
        entries = sorted((f for f in log.iterdir() if f.name.split(".")[0].isdigit() and not f.name.endswith(".crc")),
                         key=lambda f: int(f.name.split(".")[0]))
        compacted = [i for i, f in enumerate(entries) if f.name.endswith(".compact")]
        live: dict[str, None] = {}
        for f in entries[compacted[-1] if compacted else 0:]:
            for line in f.read_text().splitlines()[1:]:  # a version line, then one file per line
                entry = json.loads(line)
                local = unquote(urlparse(entry["path"]).path)
                if entry.get("action", "add") == "add":
                    live[local] = None
                else:
                    live.pop(local, None)
        files = list(live)
    else:
        files = [str(f) for f in sorted(path.glob("*.parquet"))] if path.is_dir() else []
    tables = [pq.read_table(f) for f in files]
    return pa.concat_tables(tables) if tables else None


def _offset(value: Any) -> int:
    """A ``cogra.*`` source's offset (progress holds it as JSON text or as a dict)."""
    return int((json.loads(value) if isinstance(value, str) else value)["rows"])


def _same_closed_windows(streamed: Any, whole: Any) -> bool:
    """The streamed rows equal batch MATCH_TREND's for every window up to the last one the
    stream closed (all windows ending by it were closed with it).  Floats within 1e-12
    relative: an AVG over trend counts past 2**92 is within a few ulps (docs/ARCHITECTURE.md,
    the finish), and its last bits depend on which events shared the engine call."""
    import pyarrow.compute as pc

    last = pc.max(streamed.column("window_end")).as_py()
    whole = whole.filter(pc.less_equal(whole.column("window_end"), last))
    if streamed.num_rows != whole.num_rows:
        return False

    def rows(t: Any) -> list[tuple]:
        cols = [t.column(i).to_pylist() for i in range(t.num_columns)]
        key = [i for i, f in enumerate(t.schema) if not str(f.type).startswith(("double", "float"))]
        return sorted(zip(*cols), key=lambda r: repr([r[i] for i in key]))

    for a, b in zip(rows(streamed.select(whole.column_names)), rows(whole)):
        for x, y in zip(a, b):
            if isinstance(x, float) and isinstance(y, float):
                if not (math.isclose(x, y, rel_tol=1e-12) or (x != x and y != y)):
                    return False
            elif x != y:
                return False
    return True


def state_curve(name: str, events: int, batch: int) -> StateCurve:
    """The query's state, as Spark's operator keeps it (one OnlineEvaluation per group of
    the plain GROUP-BY keys, one global watermark), after each batch of a stream."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    import cogra
    from cogra import datasets
    from cogra.runtime.online import OnlineEvaluation

    data_set, query = QUERIES[name]
    table = getattr(datasets, data_set)(events, seed=1)
    keys = list(cogra.partition_columns(query))
    groups: dict[tuple, OnlineEvaluation] = {}
    curve = StateCurve(name, OnlineEvaluation(query, table.schema).kind, 0)
    top = None
    for at in range(0, table.num_rows, batch):
        part = table.slice(at, batch)
        top = max(top or 0, int(pc.max(part.column("time")).as_py()))
        if keys:
            codes = pc.dictionary_encode(pc.binary_join_element_wise(
                *[pc.cast(part.column(k), pa.string()) for k in keys], "\x1f")).combine_chunks()
            values = codes.dictionary.to_pylist()
            index = codes.indices.to_numpy(zero_copy_only=False)
            pieces = {values[i]: part.filter(pa.array(index == i)) for i in np.unique(index)}
        else:
            pieces = {"": part}
        for key, rows in pieces.items():
            online = groups.get(key)
            if online is None:
                online = groups[key] = OnlineEvaluation(query, table.schema, delay=DELAY_SECONDS)
            online.push(rows)
        for online in groups.values():
            online.advance(top - DELAY_SECONDS)
        curve.events.append(at + part.num_rows)
        curve.state_bytes.append(sum(len(o.snapshot()) for o in groups.values()))
    curve.groups = len(groups)
    return curve


def run(quick: bool, out_dir: Path, docs_dir: Path | None, log: Any = None) -> dict:
    """The whole experiment; returns what it wrote to ``out_dir/streaming.json``."""
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    sizes = QUICK if quick else FULL
    from cogra.spark import session
    from cogra.spark.sqlrun import quiet_pyspark

    quiet_pyspark()
    spark = session(app_name="cogra-bench-streaming", master="local[2]", **{
        "spark.ui.enabled": "false", "spark.sql.ansi.enabled": "false",
        "spark.sql.shuffle.partitions": "2", "spark.sql.streaming.numRecentProgressUpdates": "1000"})
    spark.sparkContext.setLogLevel("ERROR")
    runs: list[RateRun] = []
    try:
        for name in QUERIES:
            for plan in PLANS:
                warm = run_rate(spark, name, sizes["rates"][0], sizes["warmup"], lambda _text: None, plan)
                log(f"streaming {name} {plan} (warm-up: {warm.batches} micro-batches in {sizes['warmup']} s)")
                for rate in sizes["rates"]:
                    r = run_rate(spark, name, rate, sizes["seconds"], log, plan)
                    runs.append(r)
                    if not r.sustained:
                        break
    finally:
        spark.stop()
    curves = []
    for name in QUERIES:
        curve = state_curve(name, sizes["events"], sizes["batch"])
        log(f"state of {name} ({curve.kind}): {curve.state_bytes[len(curve.state_bytes) // 10]:,} B after "
            f"{curve.events[len(curve.events) // 10]:,} events, {curve.state_bytes[-1]:,} B after {curve.events[-1]:,}")
        curves.append(curve)
    result = {"quick": quick, "date": time.strftime("%Y-%m-%d %H:%M %Z"), "trigger": TRIGGER,
              "delay_seconds": DELAY_SECONDS, "rates": [asdict(r) for r in runs],
              "state": [asdict(c) for c in curves], "settings": sizes}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "streaming.json").write_text(json.dumps(result, indent=2))
    if docs_dir is not None:
        write_report(result, docs_dir, out_dir)
    return result


# -- report --------------------------------------------------------------------------------
BEGIN, END = "<!-- streaming: begin -->", "<!-- streaming: end -->"  # (sections.markers)


def write_report(result: dict, docs_dir: Path, out_dir: Path | None = None) -> Path:
    """``docs_dir/benchmarks/streaming.md`` and its plots, embedded in benchmarks.md."""
    plots = docs_dir / "benchmarks"
    plots.mkdir(parents=True, exist_ok=True)
    _plot(result, plots)
    lines = ["## Streaming: q1-q3 over Structured Streaming (local[2])", ""]
    add = lines.append
    add(f"Generated by `cogra bench --experiments streaming{' --quick' if result['quick'] else ''}` on "
        f"{result['date']}{' (**quick mode**)' if result['quick'] else ''}. Each query reads its data "
        f"set's live source at doubling rates for {result['settings']['seconds']} s (trigger "
        f"{result['trigger']}, watermark {result['delay_seconds']} seconds) under each plan: `cogra` "
        "(MATCH_TREND, Append mode, Parquet sink), `cogra update` (Update mode, no-op sink), `native` "
        "(Spark's streaming window aggregation with the query's keys and window, count and max, on "
        "Spark's default state store, Parquet sink) and `noop packed` (MATCH_TREND's operator with a "
        "handler that only counts rows, no-op sink); see "
        "`python/cogra/bench/streaming.py` for the method. *Capacity*: rows processed per busy "
        "second over the rate, second half of the run (>= 1: the rate is sustained). *Latency*: from "
        "the start of the micro-batch whose events closed a window to the end of the one that "
        "wrote its rows (Spark closes windows one micro-batch after the one that moved the "
        "watermark); *within target*: the median latency less the median micro-batch (the one that "
        "writes a window's rows) is at most one trigger, within 10%: a closed window waits at most one "
        "trigger for the micro-batch that writes it (true of any plan only below saturation, where "
        "micro-batches are shorter than the trigger). *State written*: the bytes RocksDB's puts, "
        "merges and deletes wrote per micro-batch, and per row that arrived (second half). *Batch*: "
        "MATCH_TREND over the same rows in the same session, and whether the streamed rows equal "
        "its rows for the windows the stream closed (floats within 1e-12 relative).")
    add("")
    add("| query | plan | rate (rows/s) | rows | capacity | sustained | micro-batch p50 (s) | "
        "latency p50 / p95 / max (s) | within target | windows | state written per micro-batch / per row | "
        "state rows / bytes (Spark) | batch rows/s | equal to batch |")
    add("|---|---|---:|---:|---:|---|---:|---|---|---:|---:|---|---:|---|")
    trigger = float(result["trigger"].split()[0])
    for r in result["rates"]:
        lat = " / ".join("-" if v is None else f"{v:.2f}" for v in (r["latency_p50"], r["latency_p95"], r["latency_max"]))
        batch = r.get("batch_p50")
        within = ("-" if r["latency_p50"] is None or batch is None
                  else "yes" if r["latency_p50"] - batch <= 1.1 * trigger else "**no**")
        per_row = (f" / {r['state_written_per_batch'] / r['rows_per_batch']:.1f} B"
                   if r.get("state_written_per_batch") is not None and r.get("rows_per_batch") else "")
        add(f"| {r['query']} | {r.get('plan', 'cogra')} | {r['rate']:,} | {r['rows']:,} | {r['capacity']:.2f} | "
            f"{'yes' if r['sustained'] else '**no**'} | {'-' if batch is None else f'{batch:.2f}'} | {lat} | "
            f"{within} | {r['windows']:,} | "
            f"{_kb(r.get('state_written_per_batch'))}{per_row} | "
            f"{r['state_rows'] if r['state_rows'] is not None else '-'} / "
            f"{_kb(r['state_bytes'])} | {_count(r['batch_rows_per_second'])} | "
            f"{'-' if r['equal_to_batch'] is None else 'yes' if r['equal_to_batch'] else '**no**'} |")
    add("")
    best, failed = {}, set()
    for r in result["rates"]:
        at = (r["query"], r.get("plan", "cogra"))
        if r["sustained"]:
            best[at] = max(best.get(at, 0), r["rate"])
        else:
            failed.add(at)
    plans = list(dict.fromkeys(r.get("plan", "cogra") for r in result["rates"]))
    add("Highest sustained rate (rows/s; >=: the ladder's top rate was sustained too):")
    add("")
    add("| plan | " + " | ".join(QUERIES) + " |")
    add("|---|" + "---:|" * len(QUERIES))
    for plan in plans:
        add(f"| {plan} | " + " | ".join(
            f"{'' if (q, plan) in failed or (q, plan) not in best else '>= '}{best.get((q, plan), 0):,}"
            for q in QUERIES) + " |")
    add("")
    add(f"State over a simulated stream of {result['settings']['events']:,} events (OnlineEvaluation per "
        "group of the plain GROUP-BY keys, as Spark's operator keeps it; the sum of the groups' "
        "snapshots after each batch):")
    add("")
    add("| query | state kind | groups | bytes at 10% of the stream | at 50% | at the end |")
    add("|---|---|---:|---:|---:|---:|")
    for c in result["state"]:
        b = c["state_bytes"]
        add(f"| {c['query']} | {c['kind']} | {c['groups']} | {_kb(b[len(b) // 10])} | {_kb(b[len(b) // 2])} | "
            f"{_kb(b[-1])} |")
    add("")
    for name in ("streaming-rate", "streaming-latency", "streaming-state"):
        if (plots / f"{name}.png").exists():
            add(f"![{name}]({name}.png)")  # beside this file; benchmarks.md's copy: sections.embed
    add("")
    if out_dir is not None:
        from cogra.bench.sections import raw_results

        add(raw_results([("Raw results", out_dir / "streaming.json")]))
        add("")
    section = "\n".join(lines)
    path = plots / "streaming.md"
    path.write_text(section)
    embed(docs_dir)
    return path


def embed(docs_dir: Path) -> None:
    """Put ``benchmarks/streaming.md`` into ``benchmarks.md`` (:func:`sections.embed`)."""
    from cogra.bench import sections

    sections.embed(docs_dir, "streaming")


def _count(n: float | None) -> str:
    return "-" if not n else f"{n:,}"


def _kb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.0f} kB"


def _plot(result: dict, plots: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = result["rates"]
    for name, column, label in (("streaming-rate", "capacity", "capacity (processed / offered rows)"),
                                ("streaming-latency", "latency_p95", "latency p95 (s)")):
        fig, ax = plt.subplots(figsize=(5.2, 3.6), dpi=110)
        for q in QUERIES:
            pts = [(r["rate"], r[column]) for r in rates
                   if r["query"] == q and r.get("plan", "cogra") == "cogra" and r[column] is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=q)
        if column == "capacity":
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_xlabel("input rate (rows/s)")
        ax.set_ylabel(label)
        ax.legend()
        fig.tight_layout()
        fig.savefig(plots / f"{name}.png")
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(5.2, 3.6), dpi=110)
    for c in result["state"]:
        ax.plot(c["events"], [b / 1024 for b in c["state_bytes"]], label=f"{c['query']} ({c['kind']})")
    ax.set_xlabel("events seen")
    ax.set_ylabel("state (kB)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(plots / "streaming-state.png")
    plt.close(fig)


__all__ = ["QUERIES", "RateRun", "StateCurve", "embed", "run", "run_rate", "state_curve", "write_report"]
