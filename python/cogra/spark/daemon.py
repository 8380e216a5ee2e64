"""Spark's Python daemon with cogra loaded (``spark.python.daemon.module``; see
:mod:`cogra.spark.workers`): imports cogra and, for the tasks' workers, loads the
kernels of the bundle, then runs pyspark's daemon, whose forked workers start with both.
A bundle that does not load is left to the workers (they load or compile kernels as any
process does)."""

from __future__ import annotations


def _load(kernels: bool) -> None:
    try:
        import cogra.spark.udtf  # noqa: F401 - what a worker unpickles first

        if kernels:
            import cogra.runtime.online  # noqa: F401 - and the engine, slices, stream: what tasks run
            from cogra import warmup
            from cogra.runtime import kernel_bundle

            kernel_bundle.preload()
            warmup.exercise()
    except Exception:  # noqa: BLE001 - see the module docstring
        pass


if __name__ == "__main__":  # python -m cogra.spark.daemon [WORKER MODULE], as Spark starts it
    import sys

    # Spark starts a daemon per worker module: the tasks' workers evaluate queries (cogra
    # and its kernels), the driver's UDTF analysis parses them (cogra alone).
    worker = sys.argv[1] if len(sys.argv) > 1 else "pyspark.worker"
    if worker in ("pyspark.worker", "pyspark.sql.worker.analyze_udtf"):
        _load(kernels=worker == "pyspark.worker")
    from pyspark import daemon

    daemon.manager()
