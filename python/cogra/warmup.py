"""``cogra warm``: compile the generic kernels into numba's disk cache ahead of the first
query, so that no user query pays for them.

A cold numba cache costs the first query of each executor tens of seconds (a fresh
process, 20k events: q1 20 s, q2 4.6 s, q3 33 s, of which q3's mixed-grained ring kernel
alone is 26 s); with the cache warm the same fresh process answers each in under 0.6 s.
The compiled code depends on the query's executor and window kind, not on the query, so
a handful of queries -- the report's q1-q3 at the demo's 20k events (some kernels are
chosen by input size), a sliding and a streamed one -- compile what every query meets.  They run in separate processes, ``jobs`` at once (the
compiles are single-threaded).  ``scripts/setup.sh`` runs it after installing;
the per-shape generated kernels still compile when a query first needs one (in the
background for Spark's chunks, :mod:`cogra.runtime.fast.codegen`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from typing import Callable

CASES: dict[str, Callable[[], None]] = {}


def case(function: Callable[[], None]) -> Callable[[], None]:
    CASES[function.__name__] = function
    return function


def _evaluate(query: str, table, **kw) -> None:
    import cogra

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cogra.evaluate(query, table, on_overflow="null", **kw)


@case
def q1() -> None:
    from cogra import datasets
    from cogra.examples import Q1

    _evaluate(Q1, datasets.activity(20_000, seed=1))


@case
def q2() -> None:
    from cogra import datasets
    from cogra.examples import Q2

    table = datasets.rides(20_000, seed=1)
    _evaluate(Q2, table)
    _evaluate(Q2.replace(" SLIDE 30 seconds", ""), table)


@case
def q3() -> None:
    from cogra import datasets
    from cogra.examples import Q3

    table = datasets.stock(20_000, seed=1)
    _evaluate(Q3, table)
    _evaluate(Q3.replace(" SLIDE 10 seconds", ""), table)


@case
def type_grained() -> None:
    from cogra import datasets

    table = datasets.stock(3000, seed=1)
    for window in ("WITHIN 10 minutes", "WITHIN 10 minutes SLIDE 10 seconds"):
        _evaluate("RETURN sector, COUNT(*), SUM(A.volume), AVG(A.price), MIN(A.price), MAX(B.price) "
                  "PATTERN SEQ(Stock A+, Stock B) WHERE [company] GROUP-BY sector " + window, table)


@case
def streamed() -> None:
    import cogra
    from cogra import datasets

    table = datasets.stock(3000, seed=1)
    query = ("RETURN sector, COUNT(*), SUM(A.volume), MAX(B.price) PATTERN SEQ(Stock A+, Stock B) "
             "WHERE [company] GROUP-BY sector WITHIN 1 minutes")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cogra.evaluate_batches(query, table.to_batches(max_chunksize=1000), on_overflow="null")


def run(jobs: int | None = None, *, out=sys.stderr) -> int:
    """Run every case in a process of its own, ``jobs`` at once (default: the cores);
    returns how many failed (each failure printed)."""
    jobs = jobs or os.cpu_count() or 1
    started = time.perf_counter()
    pending = list(CASES)
    running: dict[str, tuple[subprocess.Popen, float]] = {}
    failed = 0
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            running[name] = (subprocess.Popen([sys.executable, "-m", "cogra.warmup", name],
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
                             time.perf_counter())
        for name, (process, began) in list(running.items()):
            if process.poll() is None:
                continue
            del running[name]
            text = process.stdout.read() if process.stdout else ""
            if process.returncode:
                failed += 1
                print(f"cogra warm: {name} failed:\n{text}", file=out)
            else:
                print(f"cogra warm: {name} {time.perf_counter() - began:.1f} s", file=out)
        time.sleep(0.05)
    print(f"cogra warm: kernels compiled in {time.perf_counter() - started:.0f} s", file=out)
    return failed


if __name__ == "__main__":  # python -m cogra.warmup CASE (one case, in this process)
    CASES[sys.argv[1]]()
