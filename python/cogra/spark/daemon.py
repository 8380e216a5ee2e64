"""Spark's Python daemon with cogra loaded (``spark.python.daemon.module``; see
:mod:`cogra.spark.executors`): imports cogra and loads the kernels of the bundle, then
runs pyspark's daemon, whose forked workers start with both.  A bundle that does not load
is left to the workers (they load or compile kernels as any process does)."""

from __future__ import annotations


def _load() -> None:
    try:
        from cogra.runtime import kernel_bundle

        kernel_bundle.preload()
    except Exception:  # noqa: BLE001 - see the module docstring
        pass


if __name__ == "__main__":  # python -m cogra.spark.daemon [WORKER MODULE], as Spark starts it
    import sys

    # Spark starts a daemon per worker module; only the tasks' workers evaluate queries
    # (not the driver's UDTF analysis or data-source lookups).
    if len(sys.argv) < 2 or sys.argv[1] == "pyspark.worker":
        _load()
    from pyspark import daemon

    daemon.manager()
