"""Getting numba and the shipped kernels ready while the user loads data.

A fresh process's first ``cogra.evaluate`` would pay, before any event is read, for
importing numba and initialising its runtime (~0.15 s) and for loading each kernel it runs
from the bundle (:mod:`cogra.runtime.kernel_bundle`; 3-8 ms each, a generated module's
import ~8 ms more): 0.2-0.3 s on a 2-core machine, against 0.03-0.3 s for the steady
state's whole call over millions of events.  None of it depends on the query, so ``import
cogra`` starts a daemon thread (:func:`start`) that does it: numba's runtime, then the
modules and kernels the bundle's record says common first calls import and load, in the
order they do (:func:`kernel_bundle.first_use`, recorded when the bundle is built: the
shapes a user starts with, in one window and in chunks, over each Arrow type of a type
column, and q1-q3), then the modules every call runs (:data:`FIRST`), then the rest of
the bundle.
The thread pauses while a call runs, and a call that needs a kernel the thread has not
reached loads it itself (numba's compiler lock orders the two).  What a user does between
the import and the first call -- reading Parquet, building a table -- mostly releases
the GIL, so the thread's work hides behind it.  Why the record rather than whole modules
in a fixed order: a module holds the kernels of every argument type (float times, int64
type codes...), and a first call needs a few of them and its shape's generated kernel;
loading whole modules, the kernels a first COUNT needed were ready ~0.2 s later.

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
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from cogra.runtime.kernel_bundle import Kernel

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
"""The modules whose bundled kernels (every signature) are loaded after the first-use
record's: those every query's first call runs (time order, type codes, sub-streams,
attribute columns, the finish), then the generic window kernel (a common shape runs its
generated one, shipped in the bundle too); the rest of the bundle follows."""

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
            if name != RUNTIME:
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
    """Wait while a call of this process runs, before each kernel past numba's runtime: the
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

    def runtime() -> None:
        import numpy.ma  # noqa: F401 - numba's typeof of an ndarray imports it (numpy loads it lazily): 10-25 ms
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.registry import cpu_target

        with global_compiler_lock:  # (as a call's first load initialises it)
            kernel_bundle.numba_runtime(cpu_target.target_context)

    plan: list[tuple[str, Callable[[], object]]] = [(RUNTIME, runtime)]
    if not kernel_bundle.usable():
        return plan
    generated: set[str] = set()
    for step in kernel_bundle.first_use():
        if isinstance(step, str):
            plan.append((f"import {step}", (lambda m=step: _import(m))))
            continue
        if step.module.startswith(GENERATED_PREFIX) and step.module not in generated:
            # (a step of its own: a call beginning meanwhile waits for less)
            generated.add(step.module)
            plan.append((f"import {step.module}", (lambda m=step.module: _generated_module(m))))
        plan.append((f"{step.module}.{step.function}", (lambda k=step: _load(k))))
    modules = list(FIRST) + [m for m in kernel_bundle.bundled_modules() if m not in FIRST]
    plan += [(module, (lambda m=module: kernel_bundle.preload_module(m, _wait_for_calls))) for module in modules]
    return plan


RUNTIME = "numba runtime"
"""The first step's name: numba imported and its runtime ready to load kernels."""


def _import(module: str) -> None:
    """Import a module of the first-use record (one cogra no longer has is skipped)."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        pass


def _load(kernel: "Kernel") -> None:
    """Load one kernel of the bundle's first-use record: a generic one (its module
    imported), or a common shape's generated one (its module imported from the bundle)."""
    import importlib

    from cogra.runtime import kernel_bundle

    if kernel.module.startswith(GENERATED_PREFIX):
        module = _generated_module(kernel.module)
    else:
        module = importlib.import_module(kernel.module)
    dispatcher = getattr(module, kernel.function, None) if module is not None else None
    if dispatcher is not None:
        kernel_bundle.preload_kernel(dispatcher, kernel.signature)


def _generated_module(name: str) -> object | None:
    """The bundle's generated module ``name`` (``cogra_kernel_<shape key>``), imported once."""
    from cogra.runtime.compiled.codegen import kernel_cache

    return kernel_cache.bundled_module(name[len(GENERATED_PREFIX):])


GENERATED_PREFIX = "cogra_kernel_"
"""A generated module's name: this prefix and its shape's key."""


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=wait)


__all__ = ["FIRST", "RUNTIME", "WARM_START_ENV", "seconds", "start", "steps", "stop", "wait", "wanted"]
