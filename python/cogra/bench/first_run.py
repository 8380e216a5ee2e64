"""``cogra bench --experiments first-run``: what the first query costs on a fresh machine.

Written to ``docs/benchmarks/first-run.md`` (embedded in ``docs/benchmarks.md``), the raw
numbers to ``first-run.json``:

* **A fresh process per case** (:func:`process_runs`): q1-q3, and ``SEQ(A+, B)`` over one
  window per semantics, aggregate set and type column's Arrow type (:func:`grid_cases`),
  each in a process whose kernel caches are empty (``NUMBA_CACHE_DIR`` and
  ``COGRA_CACHE`` fresh directories: only the bundle that ships with cogra,
  :mod:`cogra.runtime.kernel_bundle`).  Its first ``cogra.evaluate`` against the steady
  state the same process reaches once every kernel it uses is compiled, and the first
  call of a second fresh process on the caches the first left.
* **A new Spark application** (:func:`spark_runs`): ``cogra.spark.session()`` against a
  plain session, and the first MATCH_TREND of q1 over Parquet against the second.
* **A fresh executor** (:func:`cluster_runs`): each query through ``spark.sql`` on
  ``local-cluster[2,1,1024]``, first on a new application, against the same query on
  executors that ran the other two first, and its repeat.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

QUERIES = ("q1", "q2", "q3")
SEMANTICS = ("any", "next", "contiguous")
AGGREGATES = {
    "COUNT": "COUNT(*)",
    "COUNT+MIN/MAX": "COUNT(*), MIN(A.v), MAX(A.v)",
    "COUNT+SUM/AVG": "COUNT(*), SUM(A.v), AVG(B.v)",
    "all five": "COUNT(*), SUM(A.v), MIN(A.v), MAX(A.v), AVG(B.v)",
}
TYPE_COLUMNS = ("string", "large_string", "dictionary")
TARGET = 0.5
"""The target: a fresh process's first call at no less than half the steady state's rate."""


def grid_cases() -> list[dict]:
    """``SEQ(A+, B)`` in one window, per semantics, aggregate set and type column's type."""
    return [{"kind": "grid", "semantics": s, "aggregates": a, "type": t}
            for s in SEMANTICS for a in AGGREGATES for t in TYPE_COLUMNS]


FULL = {"grid_events": 3_000_000, "grid": None, "query_events": 1_000_000, "cluster_events": 20_000,
        "spark_events": 2_000_000, "spark_repeat": 3}
QUICK = {"grid_events": 1_000_000, "grid": [("any", "COUNT", "dictionary"), ("next", "all five", "string")],
         "query_events": 200_000, "cluster_events": 5_000,
         "spark_events": 200_000, "spark_repeat": 1}

CHILD = r"""
import json, sys, time
started = time.perf_counter()
import cogra
imported = time.perf_counter() - started
case = json.loads(sys.argv[1])
started = time.perf_counter()
if case["kind"] == "query":
    from cogra.examples import EXAMPLES
    example = next(e for e in EXAMPLES if e.name == case["name"])
    data, query, options = example.data(case["events"], seed=1), example.query, {}
else:
    from cogra.bench.first_run import grid_data, grid_query
    data, query, options = grid_data(case), grid_query(case), {"type_column": "type"}
prepared = time.perf_counter() - started
def call():
    t = time.perf_counter()
    cogra.evaluate(query, data, on_overflow="null", **options)
    return time.perf_counter() - t
from cogra.runtime import warm_start
ready = warm_start.wait(0)  # whether the warm start had ended when the first call began
first = call()
warm_start.wait()
result = {"import": imported, "data": prepared, "first": first, "warm_start": warm_start.seconds(),
          "warm_start_ended_before": ready}
if case.get("steady"):
    # Compile every kernel the query's route uses, generated ones included, in the
    # foreground: the state the process reaches once its background compiles are done.
    from cogra.runtime.compiled import kernel_driver
    from cogra.runtime.compiled.finish import by_column
    from cogra.runtime.compiled.windows import sliding
    limits = kernel_driver.SPECIALIZE_MIN_EVENTS, sliding.SPECIALIZE_MIN_EVENTS, by_column.SPECIALIZE_MIN_KEYS
    kernel_driver.SPECIALIZE_MIN_EVENTS = sliding.SPECIALIZE_MIN_EVENTS = by_column.SPECIALIZE_MIN_KEYS = 0
    call()
    kernel_driver.SPECIALIZE_MIN_EVENTS, sliding.SPECIALIZE_MIN_EVENTS, by_column.SPECIALIZE_MIN_KEYS = limits
    result["steady"] = min(call() for _ in range(3))
print(json.dumps(result))
"""


def grid_query(case: dict) -> str:
    return f"RETURN {AGGREGATES[case['aggregates']]} PATTERN SEQ(A+, B) SEMANTICS {case['semantics']}"


def grid_data(case: dict):
    """``events`` events, nine in ten of type ``A``, the rest ``B``, at distinct times; the
    type column of the case's Arrow type (``dictionary``: what Parquet readers hand over)."""
    import numpy as np
    import pyarrow as pa

    n = case["events"]
    rng = np.random.default_rng(1)
    types = np.where(rng.random(n) < 0.9, "A", "B")
    column = pa.array(types, pa.large_string() if case["type"] == "large_string" else pa.string())
    if case["type"] == "dictionary":
        column = column.dictionary_encode()
    return pa.table({"type": column, "time": np.arange(n, dtype=np.int64), "v": rng.integers(1, 100, n).astype(np.float64)})


def _child(case: dict, caches: Path, *, steady: bool = False) -> dict:
    """One fresh process: ``case`` evaluated with the caches under ``caches`` (the
    shipped bundle, plus whatever earlier processes there compiled)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(caches / "numba"), "COGRA_CACHE": str(caches / "cogra")}
    env.pop("COGRA_KERNEL_BUNDLE", None)
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps({**case, "steady": steady})],
                          env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise RuntimeError(f"first-run child {case} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def label(case: dict) -> str:
    if case["kind"] == "query":
        return case["name"]
    return f"{case['semantics']}, {case['aggregates']}, {case['type']}"


FRESH_PROCESSES = 3
"""Fresh processes per case: a COUNT's whole first call over 3M events is 30-70 ms, and one
process's varies by tens of ms on a virtual machine (its scheduling and fresh memory), so
the verdict reads their median."""


def process_runs(sizes: dict, log: Any) -> list[dict]:
    """Per case, :data:`FRESH_PROCESSES` fresh processes with empty caches (the shipped
    bundle only): their first calls (the median, and the slowest), the steady state the
    first of them reaches (its kernels compiled, best of three later calls); and a further
    fresh process on the caches that one left (a machine after its first queries)."""
    cases = [{"kind": "query", "name": q, "events": sizes["query_events"]} for q in QUERIES]
    grid = grid_cases() if sizes["grid"] is None else [
        {"kind": "grid", "semantics": s, "aggregates": a, "type": t} for s, a, t in sizes["grid"]]
    cases += [{**c, "events": sizes["grid_events"]} for c in grid]
    rows = []
    for case in cases:
        fresh = []
        for i in range(FRESH_PROCESSES):
            with tempfile.TemporaryDirectory(prefix="cogra-first-run-", ignore_cleanup_errors=True) as caches:
                fresh.append(_child(case, Path(caches), steady=i == 0))
                if i == 0:
                    again = _child(case, Path(caches))
        firsts = [f["first"] for f in fresh]
        row = {**case, "label": label(case), "import": fresh[0]["import"], "data": fresh[0]["data"],
               "first": statistics.median(firsts), "firsts": firsts, "slowest_first": max(firsts),
               "steady": fresh[0]["steady"], "cached_first": again["first"],
               "warm_start": fresh[0]["warm_start"], "warm_start_ended_before": fresh[0]["warm_start_ended_before"]}
        row["ratio"] = row["steady"] / row["first"]
        log(f"first-run {row['label']} {case['events']:,}: first {row['first']:.3f} s (slowest "
            f"{row['slowest_first']:.3f} s), steady {row['steady']:.3f} s ({row['ratio']:.2f} of steady), "
            f"cache warm {row['cached_first']:.3f} s")
        rows.append(row)
    return rows


def cluster_runs(events: int, log: Any) -> list[dict]:
    """Per query: its first ``spark.sql`` on a new local-cluster application (fresh
    executors), its first on an application whose executors ran the other two queries
    (warm executors, a query new to them), and its repeat there (the second run)."""
    from cogra.examples import EXAMPLES
    from cogra.spark import session
    from cogra.spark.sqlrun import quiet_pyspark

    quiet_pyspark()
    examples = {e.name: e for e in EXAMPLES}
    fresh: dict[str, float] = {}
    warm: dict[str, list[float]] = {q: [] for q in QUERIES}
    repeat: dict[str, list[float]] = {q: [] for q in QUERIES}
    for lead in QUERIES:
        spark = session(app_name=f"cogra-first-run-{lead}", master="local-cluster[2,1,1024]", **{
            "spark.ui.enabled": "false", "spark.sql.ansi.enabled": "false", "spark.sql.shuffle.partitions": "2"})
        try:
            spark.sparkContext.setLogLevel("ERROR")
            for e in examples.values():
                view = e.data(events, seed=1).to_pandas()
                spark.createDataFrame(view).repartition(2).cache().createOrReplaceTempView(e.table)
                spark.table(e.table).count()  # the data on the executors (JVM only: no Python worker yet)
            order = [lead] + [q for q in QUERIES if q != lead]
            for i, name in enumerate(order + order):
                sql = f"SELECT * FROM MATCH_TREND(TABLE({examples[name].table}), '{examples[name].query}')"
                t = time.perf_counter()
                spark.sql(sql).collect()
                took = time.perf_counter() - t
                if i == 0:
                    fresh[name] = took
                elif i < len(order):
                    warm[name].append(took)
                else:
                    repeat[name].append(took)
        finally:
            spark.stop()
    rows = []
    for name in QUERIES:
        row = {"query": name, "events": events, "first": fresh[name], "warm": statistics.median(warm[name]),
               "repeat": statistics.median(repeat[name])}
        row["ratio"] = row["first"] / row["warm"]
        log(f"first-run executor {name}: fresh executors {row['first']:.2f} s, warm executors {row['warm']:.2f} s "
            f"({row['ratio']:.2f}x), repeated {row['repeat']:.2f} s")
        rows.append(row)
    return rows


SPARK_CHILD = r"""
import json, sys, time
which, parquet = sys.argv[1], sys.argv[2]
started = time.perf_counter()
if which == "plain":
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.master("local[2]").appName("first-run-plain").getOrCreate()
else:
    from cogra.spark import session
    spark = session(app_name="first-run-cogra", master="local[2]")
result = {"session": time.perf_counter() - started}
if which != "plain":
    from cogra.spark.class_archive import driver_pid, mapped_archive
    result["archive"] = mapped_archive(driver_pid(spark)) is not None
if parquet:
    t = time.perf_counter()
    spark.read.parquet(parquet).createOrReplaceTempView("activity")
    result["read"] = time.perf_counter() - t
    if which != "plain":
        from cogra.examples import Q1
        sql = "SELECT * FROM MATCH_TREND(TABLE(activity), '" + Q1 + "')"
    else:
        from cogra.bench.first_run import SPARK_WINDOW_QUERY as sql
    for name in ("first", "second"):
        t = time.perf_counter()
        spark.sql(sql).collect()
        result[name] = time.perf_counter() - t
        if name == "first":
            result["to_first_result"] = time.perf_counter() - started
spark.stop()
print(json.dumps(result))
"""


SPARK_WINDOW_QUERY = (
    "SELECT patient, MIN(rate), MAX(rate), MAX(rise) FROM (SELECT patient, rate, "
    "rate - LAG(rate) OVER (PARTITION BY patient ORDER BY time) AS rise FROM activity "
    "WHERE activity = 'passive') GROUP BY patient")
"""Spark's own plan of q1's shape over the same rows (a filter, a shuffle by patient, a
sort by time, a window function, an aggregate): how much of a new application's first
query is the JVM's own warm-up (class loading, code generation, its JIT compilers)."""


TOUCH = r"""
import time
import numpy as np
import pyarrow as pa
started = time.perf_counter()
buffer = pa.allocate_buffer(256 << 20)
np.frombuffer(buffer, np.uint8)[::4096] = 1
print((time.perf_counter() - started) * 1000 / 256)
"""


def first_touch_ms_per_mb() -> float:
    """What a fresh process pays per MiB of memory it touches first (256 MiB from Arrow's
    pool, one write per page).  A first call's arrays are fresh memory, later calls reuse
    the pool's.  On a virtual machine whose host takes back the memory its guest frees,
    each first touch costs ~2.5 ms/MiB (this 2-core VM; ~0.2 ms/MiB right after a process
    had touched all of it) -- ~0.4 s of a first call over 3M events -- so the report
    states what it measured."""
    done = subprocess.run([sys.executable, "-c", TOUCH], capture_output=True, text=True, check=True, timeout=600)
    return float(done.stdout.strip())


SPARK_CASES = ("plain", "cogra", "cogra-no-archive")
"""A plain application (Spark's own window query), one of ``cogra.spark.session()`` and
one whose driver JVM starts without the class archive (``COGRA_CLASS_ARCHIVE=0``)."""


def spark_runs(events: int, repeat: int, log: Any) -> dict:
    """A new Spark application per run, each in a fresh process with empty kernel caches:
    how long ``cogra.spark.session()`` takes against a plain ``SparkSession.builder...
    getOrCreate()`` (both ``local[2]``), with and without the driver's class archive
    (:mod:`cogra.spark.class_archive`), the new application's first MATCH_TREND of q1 over
    ``events`` Parquet rows against its second, and the whole wait from the script's start
    to the first query's result (the Parquet table's schema included)."""
    from cogra.examples import EXAMPLES

    runs: dict[str, list[dict]] = {which: [] for which in SPARK_CASES}
    with tempfile.TemporaryDirectory(prefix="cogra-first-run-") as scratch:
        parquet = Path(scratch) / "activity.parquet"
        import pyarrow.parquet as pq

        pq.write_table(next(e for e in EXAMPLES if e.name == "q1").data(events, seed=1), parquet)
        for i in range(repeat):
            for which in SPARK_CASES:
                caches = Path(scratch) / f"caches-{which}-{i}"
                env = {**os.environ, "NUMBA_CACHE_DIR": str(caches / "numba"), "COGRA_CACHE": str(caches / "cogra"),
                       "PYSPARK_PYTHON": sys.executable,
                       "COGRA_CLASS_ARCHIVE": "0" if which == "cogra-no-archive" else "1"}
                done = subprocess.run([sys.executable, "-c", SPARK_CHILD, which, str(parquet)], env=env,
                                      capture_output=True, text=True, timeout=1800)
                if done.returncode:
                    raise RuntimeError(f"first-run Spark child {which} failed:\n{done.stderr[-3000:]}")
                runs[which].append(json.loads(done.stdout.strip().splitlines()[-1]))

    def median(which: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[which])

    row = {"events": events, "repeat": repeat, "plain_session": median("plain", "session"),
           "cogra_session": median("cogra", "session"), "first": median("cogra", "first"),
           "second": median("cogra", "second"), "to_first_result": median("cogra", "to_first_result"),
           "archive": all(r["archive"] for r in runs["cogra"]),
           "no_archive_session": median("cogra-no-archive", "session"),
           "no_archive_first": median("cogra-no-archive", "first"),
           "no_archive_second": median("cogra-no-archive", "second"),
           "no_archive_to_first_result": median("cogra-no-archive", "to_first_result"),
           "spark_first": median("plain", "first"), "spark_second": median("plain", "second"),
           "spark_to_first_result": median("plain", "to_first_result"), "runs": runs}
    log(f"first-run Spark: session {row['cogra_session']:.2f} s (without the class archive "
        f"{row['no_archive_session']:.2f} s; plain {row['plain_session']:.2f} s), q1 over {events:,} rows first "
        f"{row['first']:.2f} s, second {row['second']:.2f} s, first result {row['to_first_result']:.2f} s after the "
        f"start (without the archive {row['no_archive_to_first_result']:.2f} s); Spark's own window query first "
        f"{row['spark_first']:.2f} s, second {row['spark_second']:.2f} s")
    return row


def run(quick: bool, out_dir: Path, docs_dir: Path | None, log: Any = None, *, cluster: bool = True) -> dict:
    """The whole experiment; returns what it wrote to ``out_dir/first-run.json``."""
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    from cogra.runtime import kernel_bundle

    sizes = QUICK if quick else FULL
    bytecode()
    result: dict[str, Any] = {"quick": quick, "date": time.strftime("%Y-%m-%d %H:%M %Z"),
                              "bundle": kernel_bundle.usable(), "cores": os.cpu_count(),
                              "first_touch_ms_per_mb": first_touch_ms_per_mb()}
    log(f"first-run: a fresh process touches fresh memory at {result['first_touch_ms_per_mb']:.2f} ms/MiB")
    result["process"] = process_runs(sizes, log)
    result["spark"] = spark_runs(sizes["spark_events"], sizes["spark_repeat"], log) if cluster else None
    result["executor"] = cluster_runs(sizes["cluster_events"], log) if cluster else []
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "first-run.json").write_text(json.dumps(result, indent=2))
    if docs_dir is not None:
        write_report(result, docs_dir, out_dir)
    return result


def bytecode() -> None:
    """Write the package's bytecode where it is missing or stale, as installing a wheel does
    (pip compiles every module): a fresh process of an editable install where bytecode is
    not written (``PYTHONDONTWRITEBYTECODE``) would compile each module's source instead,
    ~0.1 s of ``import cogra`` and ~20 ms of a first call that no user's install pays."""
    import compileall
    import re

    from cogra.runtime import kernel_bundle

    # (not the bundle's generated modules: their bytecode is checked by hash, see kernel_bundle)
    compileall.compile_dir(str(kernel_bundle.PACKAGE), quiet=1, rx=re.compile(r"[/\\]_kernels[/\\]"))


def _verdict(met: bool) -> str:
    return "met" if met else "**not met**"


def write_report(result: dict, docs_dir: Path, out_dir: Path | None = None) -> Path:
    """``docs_dir/benchmarks/first-run.md``, embedded in benchmarks.md."""
    lines = ["## First run: a fresh process, a fresh application", ""]
    add = lines.append
    add(f"Generated by `cogra bench --experiments first-run{' --quick' if result['quick'] else ''}` on "
        f"{result['date']}{' (**quick mode**)' if result['quick'] else ''}, {result['cores']} cores; see "
        "`python/cogra/bench/first_run.py` for the method. Each case runs in fresh processes whose kernel "
        "caches are empty: only the kernels compiled ahead of time that ship with cogra"
        + ("" if result["bundle"] else " (**no bundle fitted this process**: it compiled them)")
        + ", and the package's bytecode, as an install writes it. *Import*: `import cogra`; *data*: building the input after it (as a user's own loading "
        "would); *warm start*: how long the thread `import cogra` starts to load numba and the bundle ran "
        "(`runtime/warm_start.py`: the bundle's first-use record first; marked * where it had not ended "
        "when the first call began, the call loading itself what the thread had not reached); *first*: "
        f"the first `cogra.evaluate`, the median of {FRESH_PROCESSES} fresh processes (*slowest*: the "
        "slowest of them); *steady*: the first process once every kernel the "
        "query uses is compiled (best of three later calls). *Cache warm*: the first call of a further "
        f"fresh process on the caches the first left (a machine after its first queries). Target: "
        f"first call (the median) at >= {TARGET} of the steady state's rate. The grid is `SEQ(A+, B)` over one "
        "window, nine events in ten of type `A`, aggregates over `A.v` and `B.v`. A fresh process "
        f"touched fresh memory at {result.get('first_touch_ms_per_mb', float('nan')):.2f} ms/MiB on this "
        "machine: a first call's arrays are fresh memory, a later call's come from the memory pools the "
        "first left (a virtual machine whose host takes back freed memory pays ~2.5 ms/MiB, ~0.4 s of a "
        "first call over 3M events; ~0.2 ms/MiB where memory stays backed).")
    add("")
    add("| case | events | import (s) | data (s) | warm start (s) | first (s) | slowest (s) | steady (s) "
        "| first / steady rate | target | cache warm (s) |")
    add("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for r in result["process"]:
        warm = "-" if r.get("warm_start") is None else f"{r['warm_start']:.2f}" + (
            "" if r.get("warm_start_ended_before") else "*")
        add(f"| {r['label']} | {r['events']:,} | {r['import']:.2f} | {r['data']:.2f} | {warm} | {r['first']:.3f} | "
            f"{r['slowest_first']:.3f} | {r['steady']:.3f} | {r['ratio']:.2f} | {_verdict(r['ratio'] >= TARGET)} | {r['cached_first']:.3f} |")
    add("")
    spark = result.get("spark")
    if spark:
        add(f"A new Spark application (`local[2]`, a fresh process with empty kernel caches, median of "
            f"{spark['repeat']}): `cogra.spark.session()` against a plain `SparkSession.builder.master(\"local[2]\")"
            f".getOrCreate()` (target: within 1 s), and its first MATCH_TREND of q1 over {spark['events']:,} "
            "Parquet rows against its second (target: within 2x).")
        add("")
        add("| measure | cogra | reference | ratio | target |")
        add("|---|---:|---:|---:|---|")
        extra = spark["cogra_session"] - spark["plain_session"]
        archive = "" if spark.get("archive", True) else " (**the driver did not map the class archive**)"
        add(f"| session (s){archive} | {spark['cogra_session']:.2f} | {spark['plain_session']:.2f} (plain) | "
            f"{extra:+.2f} s | {_verdict(extra <= 1.0)} |")
        ratio = spark["first"] / spark["second"]
        add(f"| q1, first MATCH_TREND (s) | {spark['first']:.2f} | {spark['second']:.2f} (second) | "
            f"{ratio:.2f}x | {_verdict(ratio <= 2.0)} |")
        if spark.get("no_archive_session") is not None:
            add(f"| session without the class archive (s) | {spark['no_archive_session']:.2f} | "
                f"{spark['plain_session']:.2f} (plain) | {spark['no_archive_session'] - spark['plain_session']:+.2f} s | |")
            add(f"| q1 without the class archive, first (s) | {spark['no_archive_first']:.2f} | "
                f"{spark['no_archive_second']:.2f} (second) | "
                f"{spark['no_archive_first'] / spark['no_archive_second']:.2f}x | |")
            add(f"| start of the script to q1's first result (s) | {spark['to_first_result']:.2f} | "
                f"{spark['no_archive_to_first_result']:.2f} (without the archive) | "
                f"{spark['to_first_result'] - spark['no_archive_to_first_result']:+.2f} s | |")
        if spark.get("spark_first"):
            own = spark["spark_first"] / spark["spark_second"]
            add(f"| Spark's own window query of q1's shape, first (s) | {spark['spark_first']:.2f} | "
                f"{spark['spark_second']:.2f} (second) | {own:.2f}x | (the JVM's own warm-up) |")
        add("")
        if spark.get("spark_first"):
            add("Spark's own row: a new plain application's first and second run of "
                "`bench/first_run.py`'s `SPARK_WINDOW_QUERY` (a filter, a shuffle by patient, a sort by "
                "time, `LAG`, an aggregate) over the same rows: what a new application's first query "
                "pays in the JVM (class loading, code generation, JIT compilation), whatever the query.")
            add("")
        if spark.get("no_archive_session") is not None:
            add("*Without the class archive*: the same application with `COGRA_CLASS_ARCHIVE=0`, its driver "
                "JVM loading every class from the jars (`cogra.spark.class_archive`; `make setup` dumps the "
                "archive). *Start of the script to q1's first result*: `session()`, the Parquet table's schema "
                "(a Spark job, behind the warm-up's probe tasks) and the first query, as a script meets them.")
            add("")
    if result["executor"]:
        add(f"A fresh executor: each query through `spark.sql` on `local-cluster[2,1,1024]` "
            f"({result['executor'][0]['events']:,} events, two partitions, `cogra.spark.session`, which "
            "prepares the executors: `cogra.spark.workers`). *Fresh executors*: the query first on a new "
            "application. *Warm executors*: the query on an application whose executors ran the other two "
            "first (median of the two). *Repeated*: its second run there (median).")
        add("")
        add("| query | fresh executors (s) | warm executors (s) | fresh / warm | repeated (s) |")
        add("|---|---:|---:|---:|---:|")
        for r in result["executor"]:
            add(f"| {r['query']} | {r['first']:.2f} | {r['warm']:.2f} | {r['ratio']:.2f} | {r['repeat']:.2f} |")
        add("")
    from cogra.bench import sections

    if out_dir is not None:
        add(sections.raw_results([("Raw results", out_dir / "first-run.json")]))
        add("")
    return sections.write_section(docs_dir, "first-run", lines)


__all__ = ["AGGREGATES", "QUERIES", "SPARK_CASES", "TARGET", "cluster_runs", "grid_cases", "grid_data", "grid_query",
           "process_runs", "run", "spark_runs", "write_report"]
