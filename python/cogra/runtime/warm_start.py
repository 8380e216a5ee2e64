"""Getting numba and the shipped kernels ready while the user loads data.

A fresh process's first ``cogra.evaluate`` used to pay, before any event was read, for
numba's CPU target (its typing and lowering registries: ~0.4 s) and for loading each
kernel it runs from the bundle (:mod:`cogra.runtime.kernel_bundle`; ~10 ms each, 65 in
all): ~1 s on a 2-core machine, against 0.05-0.3 s for the steady state's whole call over
millions of events.  Neither depends on the query, so ``import cogra`` starts a daemon
thread (:func:`start`) that does both, the kernels every query runs first; the thread
pauses while a call runs, and a call that needs a kernel the thread has not reached
loads it itself (numba's compiler lock orders the two).  What a user does between
the import and the first call -- reading Parquet, building a table -- mostly releases
the GIL, so the thread's work hides behind it.

Where it would only compete: a Python worker of a Spark executor (its task runs at once;
a prepared executor's daemon loads the bundle before forking, :mod:`cogra.spark.daemon`),
and a Spark driver, which only plans (:func:`cogra.spark.session` calls :func:`stop`).
``COGRA_WARM_START=0`` turns it off.  A ``fork`` waits for the thread to finish
(:func:`os.register_at_fork`): a child forked while it held numba's or the import lock
would inherit the lock taken and never get it.
"""

from __future__ import annotations

import os
import threading
from typing import Callable

WARM_START_ENV = "COGRA_WARM_START"

FIRST = (
    "cogra.runtime.compiled.time_order",
    "cogra.runtime.compiled.event_types",
    "cogra.runtime.compiled.substream_split",
    "cogra.runtime.compiled.attribute_columns",
    "cogra.runtime.compiled.kernel_driver",
    "cogra.runtime.compiled.finish.common_cases",
    "cogra.runtime.compiled.finish.by_column",
    "cogra.runtime.compiled.aggregators.coarse_grained",
)
"""The modules whose bundled kernels are loaded first: those every query's first call
runs (time order, type codes, sub-streams, attribute columns, the finish), then the
generic window kernel (a common shape runs its generated one, shipped in the bundle
too); the rest of the bundle follows."""

_THREAD: threading.Thread | None = None
_STOP = threading.Event()
_STEPS: list[str] = []
"""What the thread has done, in order (for tests and benchmarks)."""
_TIMES: dict[str, float] = {}
"""When the thread started and ended (``time.perf_counter``)."""


def wanted() -> bool:
    """Whether this process should warm up: not turned off, and not a Spark Python worker
    or daemon (their first task runs at once; see the module docstring).  Spark starts
    both with its worker factory's secret in the environment -- a daemon imports cogra
    before pyspark, so what is imported says nothing yet."""
    if os.environ.get(WARM_START_ENV, "1") == "0":
        return False
    return "PYTHON_WORKER_FACTORY_SECRET" not in os.environ


def start() -> bool:
    """Start the warm-up thread once per process (:func:`wanted`); whether it started."""
    global _THREAD
    if _THREAD is not None or not wanted():
        return False
    _THREAD = threading.Thread(target=_run, name="cogra-warm-start", daemon=True)
    _THREAD.start()
    return True


def stop() -> None:
    """Ask the thread to stop after its current step (a process that will not evaluate)."""
    _STOP.set()


def wait(timeout: float | None = None) -> bool:
    """Wait for the thread to end (at once if none started); whether it has."""
    thread = _THREAD
    if thread is None or thread is threading.current_thread():
        return True
    thread.join(timeout)
    return not thread.is_alive()


def steps() -> list[str]:
    """What the thread has done so far, in order."""
    return list(_STEPS)


def seconds() -> float | None:
    """How long the thread ran, once it has ended (None before, or if none started)."""
    if "ended" not in _TIMES:
        return None
    return _TIMES["ended"] - _TIMES["started"]


def _run() -> None:
    import time

    _TIMES["started"] = time.perf_counter()
    try:
        for name, step in _plan():
            if _STOP.is_set():
                raise _Stopped
            if name != "numba target":
                _wait_for_calls()
            step()
            _STEPS.append(name)
    except _Stopped:
        _STEPS.append("stopped")
    except Exception as e:  # noqa: BLE001 - a warm-up is an optimisation: the call loads on demand
        _STEPS.append(f"failed: {type(e).__name__}: {e}")
    finally:
        _TIMES["ended"] = time.perf_counter()


def _wait_for_calls() -> None:
    """Wait while a call of this process runs, before each kernel past numba's target: the
    call loads what it needs itself, and loading beside it took the GIL and numba's
    compiler lock from it -- kernels it may never need (a fresh process's first call over
    3M events ran 0.1-0.3 s slower), and those every call needs first too (which the call,
    having started, loads in the order it needs them: 0.09-0.22 s against 0.06-0.11 s for
    a first COUNT over 3M events that began while they loaded)."""
    from cogra.runtime.compiled.codegen.background import calls_in_process

    while calls_in_process() and not _STOP.is_set():
        _STOP.wait(0.02)
    if _STOP.is_set():
        raise _Stopped


class _Stopped(Exception):
    """:func:`stop` was called: the thread ends before its next kernel."""


def _plan() -> list[tuple[str, Callable[[], object]]]:
    from cogra.runtime import kernel_bundle

    def target() -> None:
        import numpy.ma  # noqa: F401 - numba's typeof of an ndarray imports it (numpy loads it lazily): 10-25 ms
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.registry import cpu_target

        # Under numba's compiler lock, as a compile refreshes them: the registries are
        # generators, and a call loading its first kernel meanwhile refreshed the same ones
        # from its thread ("ValueError: generator already executing").
        with global_compiler_lock:
            cpu_target.typing_context.refresh()
            cpu_target.target_context.refresh()

    plan: list[tuple[str, Callable[[], object]]] = [("numba target", target)]
    if not kernel_bundle.usable():
        return plan
    modules = list(FIRST) + [m for m in kernel_bundle.bundled_modules() if m not in FIRST]
    plan += [(module, (lambda m=module: kernel_bundle.preload_module(m, _wait_for_calls))) for module in modules]
    return plan


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=wait)


__all__ = ["FIRST", "WARM_START_ENV", "seconds", "start", "steps", "stop", "wait", "wanted"]
