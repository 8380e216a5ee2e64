"""The compiled (numba) executors: the engine's fast path, exact as the Python executors.

One sub-package per job: ``aggregators`` (the report's type-, pattern- and mixed-grained
executors as kernels), ``windows`` (window enumeration and sliding-window sharing),
``sharing`` (one kept variable's totals reused across sub-streams), ``finish`` (kernel
channels to Arrow columns), ``codegen`` (kernels generated per query shape).  Beside
them: the channels that hold exact slots in fixed-width words, the executor that drives
the kernels for the engine, and the compile options.
"""
