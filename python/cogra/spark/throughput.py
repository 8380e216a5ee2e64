"""End-to-end throughput of MATCH_TREND in Spark, against a no-op Arrow pass-through.

What it measures: input rows per second of ``spark.sql("SELECT * FROM MATCH_TREND(...)")
.count()`` over a Parquet table, and of a pass-through with the *same* plan below the
Python step -- the scan with MATCH_TREND's pruned columns and pushed filter, the
repartition by the query's keys, the sort by (keys, time) -- followed by an identity
``mapInArrow``. Their ratio is the share of Spark's own Arrow pass-through speed that
MATCH_TREND keeps: 1.0 would mean the evaluation costs nothing; what is lost is the
engine's work plus the batching around it (``cogra.spark.udtf``).

Queries: the report's q1-q3 (sliding windows, as in ``sql/``) and the same queries with
tumbling windows (one window per event instead of 20-60, so the engine's share is smaller
and the integration's overhead shows). Each runs on ``local[1]`` and ``local[2]``; the
speed-up is the ratio of their MATCH_TREND rates. After a warm-up run of each (Python
workers started, kernels compiled) come ``--repeat`` rounds, each a MATCH_TREND run and then
a pass-through run: rates are the medians of the runs, the ratio is the median of the
rounds' own ratios (printed with their quartiles)::

    python -m cogra.spark.throughput                       # defaults below, ~15 minutes
    python -m cogra.spark.throughput --queries q3 --masters 'local[1]' --repeat 20
    python -m cogra.spark.throughput --queries q1 q3-tumbling --events 4000000 --repeat 5

For scale, ``engine rows/s`` is :func:`cogra.evaluate` on the same table in this process
(one core, no Spark, warm: the median of ``--repeat`` runs after one untimed run):
MATCH_TREND cannot be faster per core than the engine it runs.

AQE's partition coalescing is off: it merges MATCH_TREND's shuffle partitions by their size
in bytes, not by the engine's work per row (2M stock rows: 6 non-empty partitions -> 3
tasks; 2,000 rows: 1 task), which can leave a core idle. ``--aqe-coalesce`` turns it on.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class Workload:
    name: str
    query: str
    dataset: str  # a cogra.datasets generator
    events: int  # default input size (sliding windows cost 20-60x more per event)


def workloads() -> dict[str, Workload]:
    from cogra.examples import Q1, Q2, Q3

    tumbling = {
        "q1": Q1.replace(" SLIDE 30 seconds", ""),
        "q2": Q2.replace(" SLIDE 30 seconds", ""),
        "q3": Q3.replace(" SLIDE 10 seconds", ""),
    }
    assert all("SLIDE" not in q for q in tumbling.values())
    items = [
        Workload("q1", Q1, "activity", 2_000_000),
        Workload("q2", Q2, "rides", 1_000_000),
        Workload("q3", Q3, "stock", 200_000),
        Workload("q1-tumbling", tumbling["q1"], "activity", 2_000_000),
        Workload("q2-tumbling", tumbling["q2"], "rides", 2_000_000),
        Workload("q3-tumbling", tumbling["q3"], "stock", 2_000_000),
    ]
    return {w.name: w for w in items}


@dataclass(frozen=True)
class Measurement:
    master: str
    workload: str
    rows: int
    result_rows: int
    match_trend_times: tuple[float, ...]
    """Seconds per timed MATCH_TREND run; run ``i`` was followed by pass-through run ``i``."""
    passthrough_times: tuple[float, ...]
    engine_s: float

    @property
    def match_trend_s(self) -> float:
        return statistics.median(self.match_trend_times)

    @property
    def passthrough_s(self) -> float:
        return statistics.median(self.passthrough_times)

    @property
    def engine_rate(self) -> float:
        return self.rows / self.engine_s

    @property
    def match_trend_rate(self) -> float:
        return self.rows / self.match_trend_s

    @property
    def passthrough_rate(self) -> float:
        return self.rows / self.passthrough_s

    @property
    def pair_ratios(self) -> list[float]:
        """Per round, MATCH_TREND's rows/s over the pass-through's run right after it."""
        return [p / m for m, p in zip(self.match_trend_times, self.passthrough_times)]

    @property
    def ratio(self) -> float:
        """The median of the rounds' ratios.  A round's two runs share the machine's state
        of the moment, so a slow spell moves both, and one slow run moves the median of
        the ratios less than it moves the ratio of the two medians (which ranged 0.76-0.87
        over repeated five-round q3 runs).  Spark's own speed still moves it between
        Spark sessions: q3 on one core, twenty rounds per run, 0.73-0.85 within one day."""
        return statistics.median(self.pair_ratios)

    @property
    def ratio_spread(self) -> tuple[float, float]:
        """The rounds' ratios' lower and upper quartiles (both the ratio with one round)."""
        r = self.pair_ratios
        if len(r) < 2:
            return r[0], r[0]
        q = statistics.quantiles(r, n=4, method="inclusive")
        return q[0], q[2]


def write_data(workload: Workload, events: int, root: Path) -> Path:
    """The workload's input as one Parquet directory (written once, read by every run)."""
    import pyarrow.parquet as pq

    from cogra import datasets

    path = root / f"{workload.dataset}-{events}"
    if not path.exists():
        path.mkdir(parents=True)
        pq.write_table(datasets.by_name(workload.dataset, events, seed=0), path / "part-00000.parquet")
    return path


def match_trend_frame(spark: "SparkSession", path: Path, query: str) -> "DataFrame":
    spark.read.parquet(str(path)).createOrReplaceTempView("cogra_throughput_input")
    literal = "'" + query.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return spark.sql(f"SELECT * FROM MATCH_TREND(TABLE(cogra_throughput_input), {literal})")


def passthrough_frame(spark: "SparkSession", path: Path, query: str,
                      type_column: str | None = None, time_column: str = "time") -> "DataFrame":
    """MATCH_TREND's plan up to its Python step, with an identity ``mapInArrow`` instead.

    Columns, filter and keys come from the same functions MATCH_TREND's analysis uses.
    """
    from pyspark.sql import functions as F

    from cogra.spark import udtf_analysis as analysis

    df = spark.read.parquet(str(path))
    schema = analysis._arrow_schema(df.schema)
    keys = [analysis._resolve(k, schema.names) for k in analysis.plain_group_keys(query)]
    columns, filter_sql = analysis.pushdown(query, schema, type_column, time_column)
    time_name = analysis._resolve(time_column, schema.names)
    selected: list[str] = []
    for c in (*keys, time_name, *columns):
        c = analysis._resolve(c, schema.names)
        if c in schema.names and c not in selected:
            selected.append(c)
    if filter_sql:
        df = df.where(F.expr(filter_sql))
    df = df.select(*[F.col(analysis.quote_identifier(c)) for c in selected])
    df = df.repartition(*[F.col(analysis.quote_identifier(k)) for k in keys]) if keys else df.repartition(1)
    df = df.sortWithinPartitions(*[F.col(analysis.quote_identifier(c)) for c in (*keys, time_name)])

    def identity(batches):
        yield from batches

    return df.mapInArrow(identity, df.schema)


def median_seconds(action: Callable[[], int], repeat: int) -> tuple[float, int]:
    """(median wall-clock seconds of ``repeat`` runs, the action's result), after one
    untimed warm-up run (Python workers started, the engine's kernels compiled)."""
    result = action()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def engine_seconds(workload: Workload, path: Path, repeat: int = 3) -> float:
    """Median of ``repeat`` timed :func:`cogra.evaluate` runs of the whole input in this
    process, after an untimed one on the whole input: a warm-up on a prefix would leave
    the first timed run with the size-dependent kernels (generated per shape from 1M
    events) still to compile and every buffer's pages still to fault in."""
    import pyarrow.parquet as pq

    import cogra

    table = pq.read_table(path)
    return median_seconds(lambda: cogra.evaluate(workload.query, table).num_rows, max(1, repeat))[0]


def measure(spark: "SparkSession", master: str, workload: Workload, path: Path,
            repeat: int, engine_s: float) -> Measurement:
    import pyarrow.parquet as pq

    rows = sum(pq.read_metadata(p).num_rows for p in path.glob("*.parquet"))
    mt = lambda: match_trend_frame(spark, path, workload.query).count()  # noqa: E731
    pt = lambda: passthrough_frame(spark, path, workload.query).count()  # noqa: E731
    result_rows = mt()  # warm-up: Python workers started, kernels compiled
    pt()
    # Interleaved, so that a slower spell of a shared machine hits both alike.
    mt_times, pt_times = [], []
    for _ in range(max(1, repeat)):
        for action, times in ((mt, mt_times), (pt, pt_times)):
            started = time.perf_counter()
            action()
            times.append(time.perf_counter() - started)
    return Measurement(master, workload.name, rows, result_rows, tuple(mt_times), tuple(pt_times), engine_s)


def start(master: str, partitions: int, coalesce: bool, driver_memory: str) -> "SparkSession":
    from cogra.spark import session

    spark = session(app_name="cogra-throughput", master=master, **{
        "spark.sql.shuffle.partitions": str(partitions),
        "spark.sql.adaptive.coalescePartitions.enabled": str(coalesce).lower(),
        "spark.driver.memory": driver_memory,
        "spark.python.worker.reuse": "true",
    })
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def report(results: Sequence[Measurement], out=sys.stdout) -> None:
    print(f"\n{'master':9s} {'query':12s} {'input rows':>11s} {'result rows':>11s} "
          f"{'engine rows/s':>14s} {'MATCH_TREND rows/s':>19s} {'pass-through rows/s':>20s} "
          f"{'ratio':>6s} {'quartiles':>11s}", file=out)
    for m in results:
        lo, hi = m.ratio_spread
        print(f"{m.master:9s} {m.workload:12s} {m.rows:>11,} {m.result_rows:>11,} "
              f"{m.engine_rate:>14,.0f} {m.match_trend_rate:>19,.0f} {m.passthrough_rate:>20,.0f} "
              f"{m.ratio:>6.3f} {lo:5.3f}-{hi:5.3f}", file=out)
    by = {(m.master, m.workload): m for m in results}
    masters = list(dict.fromkeys(m.master for m in results))
    if len(masters) >= 2:
        a, b = masters[0], masters[-1]
        print(f"\nspeed-up {a} -> {b} (MATCH_TREND rows/s; pass-through in parentheses):", file=out)
        for name in dict.fromkeys(m.workload for m in results):
            if (a, name) in by and (b, name) in by:
                x, y = by[a, name], by[b, name]
                print(f"  {name:12s} {y.match_trend_rate / x.match_trend_rate:5.2f}x "
                      f"({y.passthrough_rate / x.passthrough_rate:.2f}x)", file=out)


def main(argv: Sequence[str] | None = None) -> int:
    known = workloads()
    parser = argparse.ArgumentParser(prog="python -m cogra.spark.throughput",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", nargs="+", default=list(known), choices=list(known))
    parser.add_argument("--events", type=int, default=None,
                        help="input rows for every query (default: per query, see workloads())")
    parser.add_argument("--masters", nargs="+", default=["local[1]", "local[2]"])
    parser.add_argument("--repeat", type=int, default=5,
                        help="timed rounds (a MATCH_TREND run, then a pass-through run) per measurement")
    parser.add_argument("--partitions", type=int, default=8, help="spark.sql.shuffle.partitions")
    parser.add_argument("--aqe-coalesce", action="store_true", help="let AQE coalesce partitions")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--data-dir", type=Path, default=None, help="keep the Parquet inputs here")
    ns = parser.parse_args(argv)

    from cogra.spark.sqlrun import quiet_pyspark

    quiet_pyspark()
    results: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="cogra-throughput-") as tmp:
        root = ns.data_dir or Path(tmp)
        paths, engine = {}, {}
        for name in ns.queries:
            w = known[name]
            paths[name] = write_data(w, ns.events or w.events, root)
            engine[name] = engine_seconds(w, paths[name], ns.repeat)
            print(f"engine {name}: {ns.events or w.events:,} rows in {engine[name]:.2f} s", flush=True)
        for master in ns.masters:
            spark = start(master, ns.partitions, ns.aqe_coalesce, ns.driver_memory)
            try:
                for name in ns.queries:
                    m = measure(spark, master, known[name], paths[name], ns.repeat, engine[name])
                    results.append(m)
                    lo, hi = m.ratio_spread
                    print(f"{master} {name}: MATCH_TREND {m.match_trend_rate:,.0f} rows/s, "
                          f"pass-through {m.passthrough_rate:,.0f} rows/s, ratio {m.ratio:.3f} "
                          f"(rounds' quartiles {lo:.3f}-{hi:.3f})", flush=True)
            finally:
                spark.stop()
    report(results)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
