"""The Python worker keeps the memory a task freed for the next task (worker_heap).

Each case runs in a fresh interpreter: the thresholds are process-wide and cannot be
undone, so they must not leak into the test session's own process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cogra.spark import worker_heap

# Allocate, fill and free 64 MB (above glibc's default mmap threshold; plain malloc, so
# no transparent huge pages), then fill a new block of the same size: the page faults of that second touch show whether the freed
# memory was kept (a few) or returned to the kernel and faulted in again (~16k pages).
PROBE = """
import ctypes, json, resource
from cogra.spark.worker_heap import retain_freed_memory
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
size = 64 << 20
applied = retain_freed_memory()
first = libc.malloc(size); libc.memset(first, 1, size); libc.free(first)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
second = libc.malloc(size); libc.memset(second, 1, size)
print(json.dumps({"applied": applied, "again": retain_freed_memory(),
                  "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _probe(retain: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != worker_heap.RETAIN_ENV}
    if retain is not None:
        env[worker_heap.RETAIN_ENV] = retain
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


glibc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the thresholds are glibc's")


@glibc
def test_freed_memory_is_reused_without_page_faults():
    kept = _probe(None)
    assert kept["applied"] and kept["again"]
    assert kept["faults"] < 2000  # 64 MB is 16,384 pages of 4 KB


@glibc
def test_the_environment_switch_leaves_glibc_defaults():
    default = _probe("0")
    assert default == {"applied": False, "again": False, "faults": default["faults"]}
    assert default["faults"] > 8000  # unmapped on free, faulted in again
