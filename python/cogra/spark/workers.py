"""Spark executors whose Python workers start ready: cogra loaded before their first task,
or a precise error.

An executor's Python worker pays, at its first task, for importing cogra (and numba,
pyarrow) and loading the kernels -- seconds that a warm worker does not pay (a fresh
local-cluster executor's first q1 took 2.15x a warm one's).  Two pieces remove that:

* :data:`DAEMON_MODULE`, Spark's Python daemon (``spark.python.daemon.module``) with cogra
  imported and the kernels of the bundle loaded (:func:`cogra.runtime.kernel_bundle.preload`)
  before it forks its workers: every worker starts with them, for the executor's life
  (Spark keeps idle workers for a minute only; the daemon stays).  It is set by
  :func:`cogra.spark.session` for cluster masters only: where cogra is missing on an
  executor, its daemon cannot start, and :func:`prepare` says so at once.
* :func:`prepare`: one small task per core, which starts the daemons and checks that each
  executor runs the driver's cogra, raising :class:`~cogra.errors.CograError` naming the
  executor and what is missing otherwise (instead of a ``ModuleNotFoundError`` inside the
  first MATCH_TREND task); then a MATCH_TREND over a few rows, which pays what every
  application's first query pays once (the driver's analysis worker, the shim's classes
  on the executors).  :func:`cogra.spark.session` calls it for cluster masters.  The
  shim's Python functions carry the environment PySpark's own do, so their tasks share
  the daemons the probe started.

A local master's Python workers run on the driver's machine, where cogra is importable
by construction: :func:`cogra.spark.session` sets the daemon there too and starts the
driver's analysis worker and the daemon in background threads
(:func:`warm_up_in_background`), so that ``session()`` returns as fast as a plain
session and the application's first MATCH_TREND finds both ready or on their way.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from cogra.errors import CograError

DAEMON_MODULE = "cogra.spark.daemon"

RECIPE = ("every executor needs cogra and its dependencies importable by the Python that "
          "spark.pyspark.python names: ship a packed environment with the job "
          "(spark.archives=env.tar.gz#env and spark.pyspark.python=./env/bin/python), or install "
          "the same cogra at the same path on every node (docs/cluster.md)")


@dataclass(frozen=True)
class ExecutorReport:
    """What one probe task found on its executor."""

    host: str
    pid: int
    python: str
    cogra: str | None
    """cogra's version there; None where it is not importable."""
    error: str | None
    bundle: bool
    """Whether the worker loads the kernels compiled ahead of time."""
    preloaded: bool
    """Whether the worker started with cogra already imported (from the daemon)."""
    cache: str | None
    daemon: int
    """The process id of the Python daemon that forked the worker."""


def _probe(rows: Any) -> Any:
    """Runs on an executor, one per partition of :func:`probe_tasks`' RDD.  Pickled by value:
    it must run where cogra does not import."""
    import os
    import socket
    import sys

    for _ in rows:
        pass
    preloaded = "cogra.runtime.kernel_bundle" in sys.modules
    try:
        import cogra
        from cogra.runtime import caches, kernel_bundle

        kernel_bundle.preload()
        found = [cogra.__version__, None, kernel_bundle.usable(), str(caches.cache_root())]
    except Exception as err:  # noqa: BLE001 - reported to the driver, which raises
        found = [None, f"{type(err).__name__}: {err}", False, None]
    yield (socket.gethostname(), os.getpid(), sys.executable, found[0], found[1], found[2], preloaded, found[3],
           os.getppid())


SQL_RUNNER_ENV = {"spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": ("SPARK_SIMPLIFIED_TRACEBACK", "1")}
"""What Spark's SQL Python runners (``mapInArrow``, UDTFs) add to a worker's environment
beside an RDD's, by the SQL setting that turns it on (Spark 4.x's ``BasePythonRunner``;
on by default).  Spark keeps a Python daemon per environment, so :func:`probe_tasks`'
RDD carries them to start the daemon MATCH_TREND's tasks use."""


def _sql_runner_env(spark: Any) -> dict[str, str]:
    env = {}
    for setting, (name, value) in SQL_RUNNER_ENV.items():
        if str(spark.conf.get(setting, "true")).lower() == "true":
            env[name] = value
    return env


def probe_tasks(spark: Any, n: int) -> list[tuple]:
    """Per task of ``n``, the fields of :class:`ExecutorReport` from :func:`_probe`, starting
    the executors' Python daemons on the way: the daemons of MATCH_TREND's tasks.  An RDD
    job whose workers' environment is the SQL runners' (:data:`SQL_RUNNER_ENV`), not a SQL
    job: a new application's JVM planned and compiled a ``mapInArrow`` probe for ~3 s
    before its first task started the daemon, beside the user's first query; an RDD job's
    task starts in under a second.  (Checked by a test: the tasks' daemon is then the
    one a MATCH_TREND's tasks fork from.)"""
    sc = spark.sparkContext
    rdd = sc.parallelize(range(n), n).mapPartitions(_by_value(_probe))
    added = {k: v for k, v in _sql_runner_env(spark).items() if k not in sc.environment}
    with _ENVIRONMENT:
        sc.environment.update(added)
        try:
            rdd._jrdd  # noqa: B018 - the JVM's function takes the environment now
        finally:
            for name in added:
                sc.environment.pop(name, None)
    return rdd.collect()


_ENVIRONMENT = threading.Lock()
"""Serialises :func:`probe_tasks`' change of the SparkContext's worker environment."""


def prepare(spark: Any, *, tasks: int | None = None) -> list[ExecutorReport]:
    """Run a probe task on every core (``tasks``, default the default parallelism): start
    the executors' Python daemons (cogra loaded, :data:`DAEMON_MODULE`) and check that each
    runs the driver's cogra.  Returns what each task found; raises CograError where an
    executor cannot run cogra or runs another version.  Not for Spark Connect sessions
    (their server prepares its own executors)."""
    import cogra

    n = tasks or max(1, spark.sparkContext.defaultParallelism)
    try:
        reports = [ExecutorReport(*row) for row in probe_tasks(spark, n)]
    except Exception as err:  # noqa: BLE001 - a worker that could not start: say why and what to do
        raise _could_not_start(err, "executors") from err
    for r in reports:
        if r.cogra is None:
            raise CograError(f"cogra is not importable on executor {r.host} (Python {r.python}: {r.error}): {RECIPE}")
        if r.cogra != cogra.__version__:
            raise CograError(f"executor {r.host} runs cogra {r.cogra}, the driver {cogra.__version__}: "
                             f"results could differ; {RECIPE}")
    try:
        _first_query(spark)  # (after the checks: on an executor without cogra it would fail obscurely)
    except Exception as err:  # noqa: BLE001 - the driver's analysis worker runs spark.pyspark.python too
        raise _could_not_start(err, "the driver") from err
    return reports


def _could_not_start(err: Exception, where: str) -> CograError:
    """``err`` of a Python worker that could not start, as what to do about it."""
    text = str(err)
    missing = "No module named" in text or "ModuleNotFoundError" in text
    first = next((line.strip() for line in text.splitlines() if "Error" in line), text.splitlines()[0] if text else "")
    return CograError(f"{where} could not start a Python worker with cogra ({first[:300]}): "
                      + (RECIPE if missing else "see the driver's log" if where == "the driver"
                         else "see the executors' logs"))


WARM_UP = ("SELECT * FROM MATCH_TREND(TABLE(SELECT /*+ REPARTITION({n}) */ id * 100 AS time, "
           "IF(id % 3 = 0, 'B', 'A') AS type, id % 16 AS g, id AS v FROM range(4000)), "
           "'RETURN g, COUNT(*), SUM(A.v), MAX(B.v) PATTERN SEQ(A+, B) GROUP-BY g "
           "WITHIN 10 seconds SLIDE 5 seconds')")
"""A query over a few thousand rows that takes MATCH_TREND's whole path: the analysis on the
driver, a shuffle by its keys, a sort, the Python workers, Arrow both ways."""


def _first_query(spark: Any) -> None:
    """A MATCH_TREND over a few rows: what any first query pays once per application --
    the driver's analysis worker (a Python daemon of its own), the shim's classes and
    Arrow on the executors -- is paid here.  (Only where the session has the extension.)"""
    from cogra.spark.extension import has_extension

    if has_extension(spark):
        n = max(1, spark.sparkContext.defaultParallelism)
        spark.sql(WARM_UP.format(n=n)).collect()


_WARM_UPS: dict[int, Any] = {}
"""Per SparkContext (``id``): the threads of :func:`warm_up_in_background`."""


def warm_up_in_background(spark: Any) -> list[Any]:
    """Start, in two daemon threads, what an application's first MATCH_TREND waits for:
    the driver's analysis worker (:data:`WARM_UP` analysed, not run) and the Python
    daemon of the tasks (a probe task per core, :func:`probe_tasks`: the daemon loads
    cogra and the bundle before forking them).  Returns the
    threads.  Running the whole warm-up query instead held a core for 3.8 s of a local[2]
    application's first seconds, beside the user's own first query.  A failure is left to
    the user's own first query to report."""
    from cogra.spark.extension import has_extension

    n = max(1, spark.sparkContext.defaultParallelism)

    def analyse() -> None:
        if has_extension(spark):
            spark.sql(WARM_UP.format(n=n)).schema  # noqa: B018 - the analysis is the point

    def start_daemons() -> None:
        spark.sparkContext.setJobDescription("cogra: starting the Python workers (MATCH_TREND's first query)")
        probe_tasks(spark, n)

    def quietly(step: Any) -> Any:
        def run() -> None:
            try:
                step()
            except Exception:  # noqa: BLE001 - the session may stop meanwhile; the user's query reports real errors
                pass
        return run

    threads = [threading.Thread(target=quietly(step), name=f"cogra-spark-warm-up-{step.__name__}", daemon=True)
               for step in (analyse, start_daemons)]
    _WARM_UPS[id(spark.sparkContext)] = threads
    for thread in threads:
        thread.start()
    return threads


def wait_warmed_up(spark: Any, timeout: float | None = None) -> bool:
    """Wait for :func:`warm_up_in_background` of ``spark``'s application (at once if none
    ran); whether it has ended."""
    import time

    threads = _WARM_UPS.get(id(spark.sparkContext), [])
    deadline = None if timeout is None else time.monotonic() + timeout
    for thread in threads:
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    return not any(t.is_alive() for t in threads)


def _by_value(function: Any) -> Any:
    """``function`` as cloudpickle pickles a function of no importable module: by value, so
    that the executor unpickles it without importing cogra."""
    import types

    clone = types.FunctionType(function.__code__, {"__builtins__": __builtins__}, function.__name__)
    clone.__module__ = "__main__"
    clone.__qualname__ = f"cogra_probe.<locals>.{function.__name__}"
    return clone


__all__ = ["DAEMON_MODULE", "ExecutorReport", "RECIPE", "prepare", "probe_tasks",
           "wait_warmed_up", "warm_up_in_background"]
