"""Executors that start ready: cogra loaded before their first task, or a precise error.

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
  first MATCH_TREND task).  :func:`cogra.spark.session` calls it for cluster masters.
"""

from __future__ import annotations

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


def _probe(_: Any) -> Any:
    """Runs on an executor (pickled by value: it must run where cogra does not import)."""
    import os
    import socket
    import sys

    preloaded = "cogra.runtime.kernel_bundle" in sys.modules
    try:
        import cogra
        from cogra.runtime import caches, kernel_bundle

        kernel_bundle.preload()
        found = (cogra.__version__, None, kernel_bundle.usable(), str(caches.cache_root()))
    except Exception as err:  # noqa: BLE001 - reported to the driver, which raises
        found = (None, f"{type(err).__name__}: {err}", False, None)
    yield (socket.gethostname(), os.getpid(), sys.executable, *found[:2], found[2], preloaded, found[3])


def prepare(spark: Any, *, tasks: int | None = None) -> list[ExecutorReport]:
    """Run a probe task on every core (``tasks``, default the default parallelism): start
    the executors' Python daemons (cogra loaded, :data:`DAEMON_MODULE`) and check that each
    runs the driver's cogra.  Returns what each task found; raises CograError where an
    executor cannot run cogra or runs another version.  Not for Spark Connect sessions
    (their server prepares its own executors)."""
    import cogra

    sc = spark.sparkContext
    n = tasks or max(1, sc.defaultParallelism)
    probe = _by_value(_probe)
    try:
        found = sc.parallelize(range(n), n).mapPartitions(probe).collect()
    except Exception as err:  # noqa: BLE001 - a worker that could not start: say why and what to do
        text = str(err)
        missing = "No module named" in text or "ModuleNotFoundError" in text
        first = next((line.strip() for line in text.splitlines() if "Error" in line), text.splitlines()[0] if text else "")
        raise CograError(f"executors could not start a Python worker with cogra ({first[:300]}): "
                         + (RECIPE if missing else "see the executors' logs")) from err
    reports = [ExecutorReport(*row) for row in found]
    for r in reports:
        if r.cogra is None:
            raise CograError(f"cogra is not importable on executor {r.host} (Python {r.python}: {r.error}): {RECIPE}")
        if r.cogra != cogra.__version__:
            raise CograError(f"executor {r.host} runs cogra {r.cogra}, the driver {cogra.__version__}: "
                             f"results could differ; {RECIPE}")
    return reports


def _by_value(function: Any) -> Any:
    """``function`` as cloudpickle pickles a function of no importable module: by value, so
    that the executor unpickles it without importing cogra."""
    import types

    clone = types.FunctionType(function.__code__, {"__builtins__": __builtins__}, function.__name__)
    clone.__module__ = "__main__"
    clone.__qualname__ = f"cogra_probe.<locals>.{function.__name__}"
    return clone


__all__ = ["DAEMON_MODULE", "ExecutorReport", "RECIPE", "prepare"]
