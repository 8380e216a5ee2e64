"""``cogra bench --experiments first-run``: what the first query costs on a fresh machine.

Two measurements, written to ``docs/benchmarks/first-run.md`` (embedded in
``docs/benchmarks.md``) and the raw numbers to ``first-run.json``:

* **A fresh process.**  q1-q3 at 20k and 1M events, each in a process of its own whose
  kernel caches are empty (``NUMBA_CACHE_DIR`` and ``COGRA_CACHE`` fresh directories):
  the time of its first ``cogra.evaluate`` (the data generated before the clock starts,
  the import reported apart).  *Cold* runs with the kernels compiled ahead of time that
  ship with cogra (:mod:`cogra.runtime.kernel_bundle`), *no bundle* without them
  (``COGRA_KERNEL_BUNDLE=0``: everything compiles), and *warm* is the same fresh process
  once a first run has compiled everything the query uses on this machine (its
  per-shape kernels included): the state of a machine after its first queries.
* **A fresh executor.**  Each query through ``spark.sql`` on ``local-cluster[2,1,1024]``
  (two executor JVMs with their own Python workers): first on a new application, against
  the same query on an application whose executors ran the other two queries first (warm
  executors, the query new to them), and its repeat.
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
FULL = {"sizes": [20_000, 1_000_000], "repeat": 3, "no_bundle_sizes": [20_000], "cluster_events": 20_000}
QUICK = {"sizes": [20_000], "repeat": 1, "no_bundle_sizes": [], "cluster_events": 5_000}

CHILD = r"""
import json, sys, time
started = time.perf_counter()
import cogra
imported = time.perf_counter() - started
from cogra.examples import EXAMPLES
name, events, prime = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "prime"
example = next(e for e in EXAMPLES if e.name == name)
data, query = example.data(events, seed=1), example.query
if prime:  # compile every kernel the query's route uses, its per-shape ones included, in the foreground
    from cogra.runtime.compiled import executor
    from cogra.runtime.compiled.finish import by_column
    from cogra.runtime.compiled.windows import sliding
    executor.SPECIALIZE_MIN_EVENTS = sliding.SPECIALIZE_MIN_EVENTS = by_column.SPECIALIZE_MIN_KEYS = 0
    cogra.evaluate(query, data, on_overflow="null")
    sys.exit(0)
times = []
for _ in range(2):
    t = time.perf_counter()
    cogra.evaluate(query, data, on_overflow="null")
    times.append(time.perf_counter() - t)
print(json.dumps({"import": imported, "first": times[0], "second": times[1]}))
"""


def _child(name: str, events: int, caches: Path, *, bundle: bool = True, prime: bool = False) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(caches / "numba"), "COGRA_CACHE": str(caches / "cogra")}
    env.pop("COGRA_KERNEL_BUNDLE", None)
    if not bundle:
        env["COGRA_KERNEL_BUNDLE"] = "0"
    if prime:
        env["COGRA_BACKGROUND_COMPILE"] = "0"
    done = subprocess.run([sys.executable, "-c", CHILD, name, str(events), "prime" if prime else "run"],
                          env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise RuntimeError(f"first-run child {name} {events} failed:\n{done.stderr[-3000:]}")
    return {} if prime else json.loads(done.stdout.strip().splitlines()[-1])


def process_runs(sizes: dict, log: Any) -> list[dict]:
    """Cold, no-bundle and warm first calls of q1-q3 (see the module docstring)."""
    rows = []
    for events in sizes["sizes"]:
        for name in QUERIES:
            row: dict[str, Any] = {"query": name, "events": events}
            cold, imports = [], []
            for _ in range(sizes["repeat"]):
                with tempfile.TemporaryDirectory(prefix="cogra-first-run-", ignore_cleanup_errors=True) as caches:
                    r = _child(name, events, Path(caches))
                    cold.append(r["first"])
                    imports.append(r["import"])
            row["cold"] = statistics.median(cold)
            row["import"] = statistics.median(imports)
            if events in sizes["no_bundle_sizes"]:
                with tempfile.TemporaryDirectory(prefix="cogra-first-run-", ignore_cleanup_errors=True) as caches:
                    row["no_bundle"] = _child(name, events, Path(caches), bundle=False)["first"]
            with tempfile.TemporaryDirectory(prefix="cogra-first-run-", ignore_cleanup_errors=True) as caches:
                _child(name, events, Path(caches), prime=True)
                warm = [_child(name, events, Path(caches)) for _ in range(sizes["repeat"])]
            row["warm"] = statistics.median(r["first"] for r in warm)
            row["steady"] = statistics.median(r["second"] for r in warm)
            row["ratio"] = row["cold"] / row["warm"]
            log(f"first-run {name} {events:,}: cold {row['cold']:.2f} s, warm {row['warm']:.2f} s "
                f"({row['ratio']:.2f}x), steady {row['steady']:.3f} s"
                + (f", no bundle {row['no_bundle']:.1f} s" if "no_bundle" in row else ""))
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


def run(quick: bool, out_dir: Path, docs_dir: Path | None, log: Any = None, *, cluster: bool = True) -> dict:
    """The whole experiment; returns what it wrote to ``out_dir/first-run.json``."""
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    from cogra.runtime import kernel_bundle

    sizes = QUICK if quick else FULL
    result: dict[str, Any] = {"quick": quick, "date": time.strftime("%Y-%m-%d %H:%M %Z"),
                              "bundle": kernel_bundle.usable(), "cores": os.cpu_count(),
                              "process": process_runs(sizes, log)}
    result["executor"] = cluster_runs(sizes["cluster_events"], log) if cluster else []
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "first-run.json").write_text(json.dumps(result, indent=2))
    if docs_dir is not None:
        write_report(result, docs_dir, out_dir)
    return result


def write_report(result: dict, docs_dir: Path, out_dir: Path | None = None) -> Path:
    """``docs_dir/benchmarks/first-run.md``, embedded in benchmarks.md."""
    lines = ["## First run: a fresh process, a fresh executor", ""]
    add = lines.append
    add(f"Generated by `cogra bench --experiments first-run{' --quick' if result['quick'] else ''}` on "
        f"{result['date']}{' (**quick mode**)' if result['quick'] else ''}, {result['cores']} cores; see "
        "`python/cogra/bench/first_run.py` for the method. Each run is a fresh process with empty kernel "
        "caches; the data is generated before the clock starts. *Cold*: the first `cogra.evaluate`, with "
        "the kernels compiled ahead of time that ship with cogra"
        + ("" if result["bundle"] else " (**no bundle fitted this process**: it compiled them)")
        + ". *No bundle*: the same without them. *Warm*: the first call of a fresh process once the "
        "machine has compiled everything the query uses (the state after its first queries); "
        "*steady*: the second call in that process. Medians of the repeats.")
    add("")
    add("| query | events | cold (s) | warm (s) | cold / warm | steady (s) | no bundle (s) | import (s) |")
    add("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in result["process"]:
        nb = f"{r['no_bundle']:.1f}" if "no_bundle" in r else "-"
        add(f"| {r['query']} | {r['events']:,} | {r['cold']:.2f} | {r['warm']:.2f} | {r['ratio']:.2f} | "
            f"{r['steady']:.3f} | {nb} | {r['import']:.2f} |")
    add("")
    if result["executor"]:
        add(f"A fresh executor: each query through `spark.sql` on `local-cluster[2,1,1024]` "
            f"({result['executor'][0]['events']:,} events, two partitions, `cogra.spark.session`, which "
            "prepares the executors: `cogra.spark.executors`). *Fresh executors*: the query first on a new "
            "application. *Warm executors*: the query on an application whose executors ran the other two "
            "first (median of the two). *Repeated*: its second run there (median).")
        add("")
        add("| query | fresh executors (s) | warm executors (s) | fresh / warm | repeated (s) |")
        add("|---|---:|---:|---:|---:|")
        for r in result["executor"]:
            add(f"| {r['query']} | {r['first']:.2f} | {r['warm']:.2f} | {r['ratio']:.2f} | {r['repeat']:.2f} |")
        add("")
    if out_dir is not None:
        add(f"Raw results: `{out_dir / 'first-run.json'}` (git-ignored).")
        add("")
    from cogra.bench import sections

    return sections.write_section(docs_dir, "first-run", lines)


__all__ = ["QUERIES", "cluster_runs", "process_runs", "run", "write_report"]
