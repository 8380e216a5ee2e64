"""Compiling a shape's generated kernel in a background process, for later calls.

Inputs below the size that repays compiling in the foreground run the generic kernels;
where the engine call is large enough to matter, the generated kernel is compiled by a
niced process, one at a time per machine, so that later calls -- of this process, or of
the next one: the compile outlives a short script, for at most
:data:`COMPILE_SECONDS` -- find it compiled (:func:`kernel_cache.is_compiled`).

No compile runs beside a query where that would take the query's core: while any cogra
call runs on the machine (each holds :func:`running` -- a shared lock on a file of the
cache), a machine of :data:`PAUSE_AT_CORES` cores or fewer keeps the compile stopped
(``SIGSTOP``, resumed by ``SIGCONT`` when the last call ends).  Why not end the compile
with the process that asked for it: a script that runs one query and exits then never
got its generated kernels, each run compiling them again and losing them.
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
    (:data:`_SUPERVISOR`), once per machine and shape, so that later calls find it
    compiled (:func:`is_compiled`) -- e.g. a Spark worker's 131k-row chunks, each below the size that repays compiling
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
    """Start the background compiles requested inside the block when it ends, and mark
    the call as running meanwhile (:func:`running`, which pauses compiles already under
    way): a compile beside a call takes a core from it (on two cores, q1's first call
    over 1M events took 0.76 instead of 0.34 s).  Blocks nest; the outermost starts
    them."""
    if getattr(_DEFERRED, "requests", None) is not None:
        yield
        return
    _DEFERRED.requests = []
    try:
        with running():
            yield
    finally:
        pending, _DEFERRED.requests = _DEFERRED.requests, None
        for shape, function, types in pending:
            _start(shape, function, types)


COMPILE_SECONDS = 600
"""The longest a background compile may take, waiting for its turn and paused time
included; past it, it ends and removes its request (a later call asks again)."""

PAUSE_AT_CORES = 2
"""On a machine of this many cores or fewer, a background compile is stopped while any
cogra call runs: the call's own core is one of two."""

POLL_SECONDS = 0.05
"""How often the compile's supervisor looks whether a call runs: the longest a compile
runs beside a call that has just started."""


def _running_lock() -> Path:
    return kernel_cache.cache_dir() / "running.lock"


@contextlib.contextmanager
def running() -> Iterator[None]:
    """Mark a cogra call as running on this machine for its duration (a shared ``flock``
    on :func:`_running_lock`, released by the kernel if the process dies), so that
    background compiles pause (see the module docstring).  Nests within a thread."""
    if getattr(_RUNNING, "depth", 0):
        _RUNNING.depth += 1
        try:
            yield
        finally:
            _RUNNING.depth -= 1
        return
    with _IN_PROCESS_LOCK:
        _IN_PROCESS[0] += 1
    _RUNNING.depth = 1
    try:
        with _machine_wide():
            yield
    finally:
        _RUNNING.depth = 0
        with _IN_PROCESS_LOCK:
            _IN_PROCESS[0] -= 1


_IN_PROCESS = [0]
_IN_PROCESS_LOCK = threading.Lock()


def calls_in_process() -> int:
    """How many threads of this process are inside :func:`running` (the warm start waits
    for none before loading kernels no call has asked for: :mod:`cogra.runtime.warm_start`)."""
    return _IN_PROCESS[0]


@contextlib.contextmanager
def _machine_wide() -> Iterator[None]:
    """:func:`running`'s shared lock on :func:`_running_lock` for the block."""
    handle = None
    try:
        import fcntl

        handle = open(_running_lock(), "a")
        fcntl.flock(handle, fcntl.LOCK_SH)
    except Exception:  # noqa: BLE001 - no writable cache, no flock: the call runs unmarked
        if handle is not None:
            handle.close()
        handle = None
    try:
        yield
    finally:
        if handle is not None:
            handle.close()  # (releases the lock)


_RUNNING = threading.local()


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
    subprocess.Popen(supervisor_command(lock, _compile_command(lock)),
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True, env=_child_env())
    return True


def _child_env() -> dict:
    """The background processes' environment: this one's, without the warm start (a
    compile loads the kernels it needs, no more) and with the cache this process uses."""
    from cogra.runtime.caches import CACHE_ENV, cache_root

    return {**os.environ, "COGRA_WARM_START": "0", CACHE_ENV: str(cache_root())}


def _compile_command(lock: Path) -> list[str]:
    """The compile's own process (the supervisor's child): :func:`_compile_requested`."""
    return [sys.executable, "-m", "cogra.runtime.compiled.codegen.background", "compile", str(lock)]


def supervisor_command(lock: Path, compile_command: list[str], *, pause: bool | None = None) -> list[str]:
    """The supervisor's command line: :data:`_SUPERVISOR` with its arguments (``pause``:
    whether to stop the compile while calls run; default by :data:`PAUSE_AT_CORES`)."""
    import json

    if pause is None:
        pause = (os.cpu_count() or 1) <= PAUSE_AT_CORES
    cache = kernel_cache.cache_dir()
    return [sys.executable, "-c", _SUPERVISOR, str(lock), str(cache / "background-compile.lock"),
            str(_running_lock()), json.dumps(compile_command), "1" if pause else "0",
            str(COMPILE_SECONDS), str(POLL_SECONDS)]


_SUPERVISOR = """
import fcntl, json, os, signal, subprocess, sys, time
lock, turn_path, running_path, command = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
pause, seconds, poll = sys.argv[5] == "1", float(sys.argv[6]), float(sys.argv[7])
deadline = time.monotonic() + seconds

def give_up(child=None):
    if child is not None:
        child.kill()
        child.wait()
    try:
        os.unlink(lock)
    except FileNotFoundError:
        pass
    sys.exit(1)

def calls_running():
    with open(running_path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False

try:
    os.nice(10)
except OSError:
    pass
turn = open(turn_path, "a")
while True:
    try:
        fcntl.flock(turn, fcntl.LOCK_EX | fcntl.LOCK_NB)
        break
    except BlockingIOError:
        if time.monotonic() > deadline:
            give_up()
        time.sleep(0.5)
child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
stopped = False
while child.poll() is None:
    if time.monotonic() > deadline:
        if stopped:
            child.send_signal(signal.SIGCONT)
        give_up(child)
    wanted = pause and calls_running()
    if wanted != stopped:
        child.send_signal(signal.SIGSTOP if wanted else signal.SIGCONT)
        stopped = wanted
    time.sleep(poll)
sys.exit(child.returncode)
"""
"""The background compile's supervisor, standard library only (importing cogra, numba
and pyarrow would cost the call that just ended's machine ~0.7 s of a core): niced, it
waits for the machine's turn (one compile at a time: a flock, polled so that the wait is
bounded), runs the compile in a child, keeps it stopped while calls hold the running
lock where ``pause`` is set, and ends it past the deadline, removing its request."""


def _end_with_the_supervisor() -> None:
    """Die with the supervisor (``PR_SET_PDEATHSIG``, Linux): a compile it had stopped
    would otherwise stay stopped for good if the supervisor were killed."""
    import signal

    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _compile_requested(lock: str) -> None:
    """Compile what the lock file asks for (numba saves it to its disk cache), then remove
    the lock."""
    import pickle

    path = Path(lock)
    shape, function, signature = pickle.loads(path.read_bytes())
    # A compile that fails leaves its lock: no process asks again until it is stale
    # (STALE_LOCK_SECONDS) -- each Spark task's call would start another one.
    getattr(kernel_cache._module_for(shape), function).compile(signature)
    kernel_cache._NOT_COMPILED.pop((shape.key, function), None)
    path.unlink(missing_ok=True)


if __name__ == "__main__":  # python -m cogra.runtime.compiled.codegen.background compile LOCK
    from cogra.runtime.compiled.codegen import background  # the module proper, not this __main__ copy

    background._end_with_the_supervisor()
    background._compile_requested(sys.argv[2])
