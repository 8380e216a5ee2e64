"""Let a reused Python worker keep the heap it has grown, instead of faulting it in anew.

A MATCH_TREND task allocates its engine's arrays (windows, channels, result keys:
~100 MB per 1M rows of q2) and frees them when the partition is done.  glibc returns
such memory to the kernel -- arrays above its mmap threshold (at most 32 MB, grown only
as large blocks are freed) are unmapped, and the heap's top is trimmed beyond twice that
-- so the next task of the same reused worker (``spark.python.worker.reuse``, on by
default) takes a page fault on every 4 KB page again, and the kernel clears each one.
Measured on q2 in a ``local[1]`` session (1M rows, 8 partitions): ~26k faults per query
in the workers, against ~1.5k with the thresholds below (q3: ~16.5k against ~750); the
workers' system time fell from 0.05-0.17 s to 0.01-0.04 s per query.

The thresholds are set once per worker process (``mallopt``), glibc only: up to
:data:`MMAP_THRESHOLD` an array comes from the heap, and up to :data:`TRIM_THRESHOLD`
of free memory stays at the heap's top for the next task.  A worker's resident memory
therefore stays near its largest task's peak between tasks -- as a JVM's heap does.
``COGRA_WORKER_RETAIN_HEAP=0`` in the executors' environment (e.g.
``spark.executorEnv.COGRA_WORKER_RETAIN_HEAP=0``) leaves glibc's defaults alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

RETAIN_ENV = "COGRA_WORKER_RETAIN_HEAP"
M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 256 << 20
"""Arrays up to this size come from the heap (reused), larger ones are mapped per use."""
TRIM_THRESHOLD = 512 << 20
"""Free memory beyond this at the heap's top goes back to the kernel."""

_applied: bool | None = None


def retain_freed_memory() -> bool:
    """Set the thresholds, once per process; whether they are in force.

    False where the environment turns it off or the C library is not glibc (``mallopt``
    and its parameters are glibc's)."""
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def _apply() -> bool:
    if os.environ.get(RETAIN_ENV, "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc only: musl's mallopt ignores these parameters
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # The mmap threshold first: setting it also fixes glibc's dynamic trim threshold.
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


__all__ = ["MMAP_THRESHOLD", "RETAIN_ENV", "TRIM_THRESHOLD", "retain_freed_memory"]
