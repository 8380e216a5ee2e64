"""Compiling a shape's generated kernel in a background process, for later calls.

Inputs below the size that repays compiling in the foreground run the generic kernels;
where the engine call is large enough to matter (a Spark task's chunks), the generated
kernel is compiled by a niced process that ends with its parent, one at a time per
machine, so that later calls find it compiled (:func:`kernel_cache.is_compiled`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from cogra.runtime.compiled.codegen import kernel_cache
from cogra.runtime.compiled.codegen.query_shape import Shape


BACKGROUND_ENV = "COGRA_BACKGROUND_COMPILE"
"""Set to ``0`` to never start background compiles (:func:`compile_in_background`)."""


STALE_LOCK_SECONDS = 900


BACKGROUND_MIN_EVENTS = 8_192
"""An engine call over at least this many events (its table's rows) that runs a generic
kernel asks for the generated one in the background (:func:`generated_or_requested`).  A
Spark task evaluates a partition in slices and chunks of ~6k-40k rows: none of them
reaches the sizes that repay compiling in the foreground (``min_events``: 50k-1M), and a
generated run's own positions can be far fewer than the call's (q3's representatives,
a tenth of its stocks).  On a machine where no whole-table run ever compiled them, Spark
kept the generic kernels for good: q2's per-window kernel (~5x slower per window), q1's
sliding kernel (its partition loop ~1.45x slower), q3's representatives' ring run (26%
slower), q3-tumbling's loading kernel (~1.3x)."""


def worth_requesting(call_events: int) -> bool:
    """Whether an engine call over ``call_events`` events that runs a generic kernel asks
    for the generated one in the background (BACKGROUND_MIN_EVENTS)."""
    return call_events >= BACKGROUND_MIN_EVENTS


def generated_or_requested(shape: Shape, function: str, n_events: int, min_events: int,
                           call_events: int, args: Callable[[], tuple]) -> bool:
    """Whether to run the shape's generated ``function`` (:func:`kernel_cache.use_generated`: ``n_events``
    repay compiling it, or it is compiled already).  Where not, and the engine call holds
    at least BACKGROUND_MIN_EVENTS events (``call_events``), its compile is requested in
    the background for later calls (``args()``: this call's arguments, for their types --
    built only then)."""
    if kernel_cache.use_generated(shape, function, n_events, min_events):
        return True
    if worth_requesting(call_events):
        compile_in_background(shape, function, args())
    return False


def compile_in_background(shape: Shape, function: str, args: tuple) -> bool:
    """Compile the shape's ``function`` for the types of ``args`` in a background process
    that ends with this one (:func:`_end_with`),
    once per machine and shape, so that later calls find it compiled (:func:`is_compiled`)
    -- e.g. a Spark worker's 131k-row chunks, each below the size that repays compiling
    in the foreground.  A lock file beside the source (holding the request) keeps other
    processes from starting the same compile; a lock older than 15 minutes is stale.
    Returns whether it was requested (a process started, or deferred to the end of the
    call: :func:`compiles_after_the_call`)."""
    if not kernel_cache.REUSE_COMPILED or os.environ.get(BACKGROUND_ENV, "1") == "0" or not kernel_cache.generated_kernels_enabled():
        return False
    import numba

    types = tuple(numba.typeof(a) for a in args)
    pending = getattr(_DEFERRED, "requests", None)
    if pending is not None:
        if (shape.key, function) not in {(s.key, f) for s, f, _ in pending}:
            pending.append((shape, function, types))
        return True
    return _start(shape, function, types)


_DEFERRED = threading.local()


@contextlib.contextmanager
def compiles_after_the_call() -> Iterator[None]:
    """Start the background compiles requested inside the block when it ends: a compile
    started mid-call takes a core from the call that asked for it (on two cores, q1's
    first call over 1M events took 0.76 instead of 0.34 s).  Blocks nest; the outermost
    starts them."""
    if getattr(_DEFERRED, "requests", None) is not None:
        yield
        return
    _DEFERRED.requests = []
    try:
        yield
    finally:
        pending, _DEFERRED.requests = _DEFERRED.requests, None
        for shape, function, types in pending:
            _start(shape, function, types)


def _start(shape: Shape, function: str, types: tuple) -> bool:
    """Start the background compile of the shape's ``function`` for argument ``types``
    (see :func:`compile_in_background`); whether a process was started."""
    import pickle
    import subprocess

    lock = kernel_cache.cache_dir() / f"cogra_kernel_{shape.key}.{function}.compiling"
    try:
        if time.time() - lock.stat().st_mtime < STALE_LOCK_SECONDS:
            return False
        lock.unlink()
    except FileNotFoundError:
        pass
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as f:
        f.write(pickle.dumps((shape, function, types)))
    subprocess.Popen([sys.executable, "-c", _BACKGROUND, str(lock), str(os.getpid()),
                      str(kernel_cache.cache_dir() / "background-compile.lock")],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True)
    return True


_BACKGROUND = """
import os, sys
try:
    os.nice(10)
    import fcntl
    held = open(sys.argv[3], "a")
    fcntl.flock(held, fcntl.LOCK_EX)
except (OSError, ImportError, AttributeError):
    pass
from cogra.runtime.compiled.codegen import background
background._compile_requested(sys.argv[1], int(sys.argv[2]))
"""
"""The background compile's process: niced, and holding the machine's background-compile
lock (one compile at a time, however many are requested) before it imports anything --
importing cogra and numba costs a core ~0.5 s.  A query requests several compiles (q3
over 1M events: its ring's two runs and three finishes); run side by side at full
priority they slowed the query that asked for them ~2x on two cores (q2's first call
over 1M events: 1.5 instead of 0.45 s)."""


def _end_with(parent: int, lock: Path) -> None:
    """Make this background compile end when the process that asked for it does: a
    compile outliving its driver or worker holds a core nobody waits for.  Linux tells the
    process at once (``PR_SET_PDEATHSIG``); elsewhere a thread watches the parent.  Ending
    early removes the lock, so that the next call asks again.  (Its own session still: a
    Ctrl-C meant for the parent's terminal should not cut a compile that is about to end
    with the parent's exit anyway.)"""
    import signal

    def stop(*_: object) -> None:
        lock.unlink(missing_ok=True)
        os._exit(1)

    signal.signal(signal.SIGTERM, stop)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent ended before the signal was armed
        stop()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                stop()

    threading.Thread(target=watch, daemon=True).start()


def _compile_requested(lock: str, parent: int | None = None) -> None:
    """The background process: compile what the lock file asks for (numba saves it to its
    disk cache), then remove the lock; end with ``parent`` (:func:`_end_with`)."""
    import pickle

    path = Path(lock)
    if parent is not None:
        _end_with(parent, path)
    shape, function, signature = pickle.loads(path.read_bytes())
    # A compile that fails leaves its lock: no process asks again until it is stale
    # (STALE_LOCK_SECONDS) -- each Spark task's call would start another one.
    getattr(kernel_cache._module_for(shape), function).compile(signature)
    kernel_cache._NOT_COMPILED.pop((shape.key, function), None)
    path.unlink(missing_ok=True)


if __name__ == "__main__":  # python -m cogra.runtime.compiled.codegen.background LOCK (see compile_in_background)
    from cogra.runtime.compiled.codegen import background  # the module proper, not this __main__ copy

    background._compile_requested(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
