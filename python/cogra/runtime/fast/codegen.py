"""Specialised kernels: the generic kernel's loop, generated per query shape.

The generic kernel (:mod:`cogra.runtime.fast.kernels`) keeps states in small arrays
and interprets the aggregate program per event; that costs most of its time.  For a
given *shape* -- semantics, predTypes, start/final variables, the slot program -- this
module writes the same loop with every state slot a local scalar, every loop over
variables and slots unrolled, so LLVM keeps the states in registers.

Two facts keep the generated code small: events of one timestamp all read the state
from before their batch, so each batch only needs one *delta* per variable (summed
over the batch's events); and the rescaling check only watches the trend counts,
against a bound that the caller derives from the largest attribute magnitude and the
longest window.

Sources are written to :func:`cogra.runtime.caches.cache_root` ``/kernels`` (default
``~/.cache/cogra/kernels``) and imported from there, so numba's on-disk cache works across processes: compiling a
shape costs about a second once.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib.util
import inspect
import os
import re
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from cogra.runtime.caches import cache_root
from cogra.runtime.fast import codegen_decode, codegen_ring
from cogra.runtime.fast.channels import (
    MAX_KEY_IDENTITY,
    MIN_KEY_IDENTITY,
    OP_CNT,
    OP_MAX,
    OP_MIN,
    OP_NN,
    OP_SUM_FLOAT,
    OP_SUM_INT,
)
from cogra.runtime.fast.jit import NO_REFCOUNTS_SOURCE as _NO_REFCOUNTS

POW2_TABLE = 1100
"""Powers ``2**-n``, ``n < POW2_TABLE``, tabled in the generated sliding functions (below
2**-1074 every double is zero)."""

_LOADED: dict[str, object] = {}


@dataclass(frozen=True)
class Shape:
    mode: int  # 0 any, 1 next, 2 contiguous
    nv: int
    preds: tuple[tuple[int, ...], ...]
    start: tuple[int, ...]
    final: tuple[int, ...]
    ops: tuple[tuple[int, int, int, int, int, int], ...]  # (var, op, attr, s1, s2, s3)
    n_i: int
    n_f: int
    x_is_min: tuple[bool, ...]
    pair_checks: tuple[tuple[int, int], ...]  # (u, v) pairs gated by pair_ok bits
    loads: tuple | None = None
    """``(v, live_i, live_f, live_x)``: the module's ``kernel_loading`` never computes
    variable ``v``; it loads v's totals per batch from a cache of its live channels
    (:mod:`cogra.runtime.fast.shared_rows`)."""
    live: tuple | None = None
    """``(live_i, live_f)``: per variable, the integer and float channels its states can
    hold non-empty (``FastExecutor._live_channels``); with ``loads``, the module has the
    ring kernel's loading run ``ring_loading`` (:mod:`codegen_ring`)."""
    saves: tuple | None = None
    """``(v, pair_flags, tree_i, tree_f)``: with ``live``, the module has the ring kernel's
    representatives' run ``ring_saving`` (:mod:`codegen_ring`) for the shared variable
    ``v``, whose one indexed pair has flags ``pair_flags`` and keeps channels ``tree_i`` /
    ``tree_f`` in its trees."""

    @property
    def key(self) -> str:
        """The generated module's name: a hash of the shape.  (Not cached on the instance: a
        cached value would join the fields in ``__dict__``, which callers copy.  Memoized in
        :data:`_KEYS` instead: the ring asks for it per batch, and hashing the shape's
        fields costs ~0.4 us where its repr and SHA-256 cost ~9.)"""
        key = _KEYS.get(self)
        if key is None:
            if len(_KEYS) >= _KEYS_MAX:
                _KEYS.clear()
            key = _KEYS[self] = hashlib.sha256(repr(self).encode()).hexdigest()[:20]
        return key


_KEYS: dict[Shape, str] = {}
_KEYS_MAX = 4096


def cache_dir() -> Path:
    """Where generated modules live (:func:`cogra.runtime.caches.cache_root`: a writable
    place on every machine)."""
    path = cache_root() / "kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _source_path(shape: Shape) -> tuple[Path, bool]:
    """Where the shape's module is written, and whether the file there is this version's."""
    path = cache_dir() / f"cogra_kernel_{shape.key}.py"
    return path, path.exists() and path.read_text() == _source(shape)


_LOADING = threading.Lock()
"""Serialises writing and importing generated modules within a process (threads)."""


def _module_for(shape: Shape):
    """The generated module of a shape (written and imported once per process).

    The source is written to a temporary file of this process *and thread* and renamed
    into place, so that processes and threads writing the same module at once never see
    a partial file nor lose each other's temporary file."""
    key = shape.key
    module = _LOADED.get(key)
    if module is not None:
        return module
    with _LOADING:
        if key in _LOADED:
            return _LOADED[key]
        path, current = _source_path(shape)
        if not current:
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.{uuid.uuid4().hex}.tmp")
            tmp.write_text(_source(shape))
            os.replace(tmp, path)
        name = f"cogra_kernel_{key}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _LOADED[key] = module
        return module


REUSE_COMPILED = True
"""Whether :func:`is_compiled` may report kernels compiled earlier (tests turn it off, so
that which kernel runs does not depend on the machine's cache)."""

RECHECK_SECONDS = 1.0
"""How long :func:`is_compiled` trusts a "not compiled" answer for a shape not loaded in
this process.  Finding out means generating the shape's source, reading the file beside
it and listing numba's cache (~0.2 ms): a Spark task's slices ask for every call (q2,
~130 calls per 1M rows), while the answer changes only when a compile -- in the
background, or by another process -- finishes."""

_NOT_COMPILED: dict[tuple[str, str], float] = {}
"""``(shape key, function)`` -> when :func:`is_compiled` last found it not compiled."""


def is_compiled(shape: Shape, function: str) -> bool:
    """Whether ``function`` of the shape's generated module is compiled already: in this
    process, or in numba's on-disk cache (``__pycache__`` beside the source).  Loading it
    then costs milliseconds instead of seconds of compiling, so the engine uses generated
    kernels for inputs of any size once they exist (e.g. a Spark worker's 131k-row chunks
    after a full-size run compiled them)."""
    if not REUSE_COMPILED:
        return False
    key = shape.key
    module = _LOADED.get(key)
    if module is not None:
        # Once compiled, a dispatcher stays compiled: remember it on the module (asking the
        # dispatcher for its signatures costs ~50 us, and the ring asks per batch).
        compiled = module.__dict__.setdefault("_cogra_compiled", set())
        if function in compiled:
            return True
        if getattr(module, function).signatures:
            compiled.add(function)
            return True
    checked = _NOT_COMPILED.get((key, function))
    now = time.monotonic()
    if checked is not None and now - checked < RECHECK_SECONDS:
        return False
    path, current = _source_path(shape)
    # (not current: not generated yet, or generated by another version of cogra)
    if current:
        compiled = any(_index_is_current(index, path)
                       for index in _numba_cache_path(path).glob(f"cogra_kernel_{key}.{function}-*.nbi"))
    else:
        compiled = False
    if compiled:
        _NOT_COMPILED.pop((key, function), None)
    else:
        _NOT_COMPILED[(key, function)] = now
    return compiled


def _numba_cache_path(source: Path) -> Path:
    """Where numba caches the functions of ``source``, by numba's own choice of place:
    ``$NUMBA_CACHE_DIR`` when set (as :func:`cogra.runtime.caches.ensure_numba_cache`
    sets it where HOME is read-only), else ``__pycache__`` beside the source.  (Looking
    beside the source alone, an executor with ``NUMBA_CACHE_DIR`` never found a generated
    kernel compiled: it ran the generic one and compiled it again in the background.)"""
    from numba.core import config
    from numba.core.caching import CacheImpl

    place = (str(source.parent), config.CACHE_DIR or "")  # the place is per directory
    found = _NUMBA_CACHE_PATHS.get(place)
    if found is None:
        found = source.parent / "__pycache__"
        for cls in CacheImpl._locator_classes:
            try:
                locator = cls.from_function(_numba_cache_path, str(source))
            except Exception:  # noqa: BLE001 - a locator that does not apply here
                locator = None
            if locator is not None:
                found = Path(locator.get_cache_path())
                break
        _NUMBA_CACHE_PATHS[place] = found
    return found


_NUMBA_CACHE_PATHS: dict[tuple[str, str], Path] = {}


def _index_is_current(index: Path, source: Path) -> bool:
    """Whether numba's cache index ``index`` was written for ``source`` as it is now.  An
    index newer than the source is; an older one may be too: numba stamps an index with
    the source's sha256 (0.6x; older ones its mtime and size), and a source rewritten with
    the same text -- by a process of another cogra version that shares the cache, between
    two of this one's -- is newer than its still valid index.  Judged by mtimes alone, such
    a kernel never counted as compiled again, and its background compile, finding it
    compiled, wrote no newer index."""
    try:
        if index.stat().st_mtime >= source.stat().st_mtime:
            return True
        import pickle

        with open(index, "rb") as f:
            pickle.load(f)  # numba's version
            stamp = pickle.loads(f.read())[0]
        st = source.stat()
        return stamp == hashlib.sha256(source.read_bytes()).digest() or stamp == (st.st_mtime, st.st_size)
    except Exception:  # (unreadable, or another numba's format: not known to be compiled)
        return False


GENERATED_ENV = "COGRA_GENERATED_KERNELS"
"""Set to ``0`` to run the generic compiled kernels only: no per-shape kernel is compiled
(in the foreground or the background) or loaded.  Results are the same; queries whose
inputs repay a per-shape kernel run slower, and none waits for a compile."""


def generated_kernels_enabled() -> bool:
    return os.environ.get(GENERATED_ENV, "1") != "0"


def use_generated(shape: Shape, function: str, n_events: int, min_events: int) -> bool:
    """Whether to run the shape's generated ``function``: the input is large enough to
    repay compiling it (``min_events``), or it is compiled already."""
    if not generated_kernels_enabled():
        return False
    return n_events >= min_events or is_compiled(shape, function)


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
    """Whether to run the shape's generated ``function`` (:func:`use_generated`: ``n_events``
    repay compiling it, or it is compiled already).  Where not, and the engine call holds
    at least BACKGROUND_MIN_EVENTS events (``call_events``), its compile is requested in
    the background for later calls (``args()``: this call's arguments, for their types --
    built only then)."""
    if use_generated(shape, function, n_events, min_events):
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
    if not REUSE_COMPILED or os.environ.get(BACKGROUND_ENV, "1") == "0" or not generated_kernels_enabled():
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

    lock = cache_dir() / f"cogra_kernel_{shape.key}.{function}.compiling"
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
                      str(cache_dir() / "background-compile.lock")],
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
from cogra.runtime.fast import codegen
codegen._compile_requested(sys.argv[1], int(sys.argv[2]))
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
    getattr(_module_for(shape), function).compile(signature)
    _NOT_COMPILED.pop((shape.key, function), None)
    path.unlink(missing_ok=True)


def kernel_for(shape: Shape) -> Callable:
    """The compiled kernel of a shape (generated, written and imported once)."""
    return _module_for(shape).kernel


def kernel_loading_for(shape: Shape) -> Callable:
    """The shape's kernel that loads variable ``shape.loads[0]``'s totals (see :class:`Shape`):
    ``kernel_loading(<kernel's arguments>, take_at, ci, cf, cx, ce, cr)``."""
    return _module_for(shape).kernel_loading


def ring_loading_for(shape: Shape) -> Callable:
    """The shape's loading run of the ring kernel (``shape.loads`` and ``shape.live`` set):
    ``ring_loading(times, plays, pair_ok, a_int, a_flt, a_valid, rows, win_seg, win_k,
    win_lo, win_hi, slide, lanes, out_i, out_f, out_e, out_r, redo, take_at, ci, cf, cpane)``
    (see :mod:`codegen_ring`)."""
    return _module_for(shape).ring_loading


def ring_saving_for(shape: Shape) -> Callable:
    """The shape's representatives' run of the ring kernel (``shape.saves`` and
    ``shape.live`` set): ``ring_saving(times, plays, pair_ok, a_int, a_flt, a_valid, rows,
    pair_flags, live_i, live_f, h_rank, h_valid, q_a, q_b, q_eq, g_valid, win_seg, win_k,
    win_lo, win_hi, slide, lanes, max_batch, max_span, redo, ci, cf, cpane)`` (see
    :mod:`codegen_ring`)."""
    return _module_for(shape).ring_saving


def finisher_for(shape: codegen_decode.DecodeShape) -> Callable:
    """The finish of one window per key generated for a query's slots and items: decode and
    columns in one pass (see :mod:`codegen_decode`)."""
    return getattr(_module_for(shape), codegen_decode.FUNCTION)


def kernel_from_for(shape: Shape) -> Callable:
    """The shape's kernel that continues windows from carried states (streaming):
    ``kernel_from(times, plays, pair_ok, a_int, a_flt, a_valid, a_key, rows, win_lo, win_hi,
    st_i, st_f, st_x, st_r, st_e)``, as :func:`kernels.run_windows_from`."""
    return _module_for(shape).kernel_from


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, line: str = "") -> None:
        self.lines.append("    " * self.depth + line if line else "")

    def block(self) -> "_Indent":
        return _Indent(self)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class _Indent:
    def __init__(self, w: _Writer) -> None:
        self.w = w

    def __enter__(self) -> None:
        self.w.depth += 1

    def __exit__(self, *exc: object) -> None:
        self.w.depth -= 1


@functools.lru_cache(maxsize=None)
def _helpers_hash() -> str:
    """A hash of the sources the generated modules import from or copy."""
    from cogra.runtime.fast import channels, kernels, mixed_kernels, mixed_ring, sliding_kernels

    digest = hashlib.sha256()
    for module in (channels, kernels, sliding_kernels, mixed_kernels, mixed_ring, codegen_ring,
                   sys.modules[__name__]):
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()[:16]


def _keep_better(w: "_Writer", dst: str, src: str, is_min: bool) -> None:
    """Emit ``dst = src`` where ``src`` is the better extreme (smaller for MIN)."""
    w(f"if {src} {'<' if is_min else '>'} {dst}:")
    with w.block():
        w(f"{dst} = {src}")


@functools.lru_cache(maxsize=None)
def _source(shape: Shape | codegen_decode.DecodeShape) -> str:
    if isinstance(shape, codegen_decode.DecodeShape):
        return codegen_decode.generate(shape)
    return generate(shape)


def generate(shape: Shape) -> str:
    s = shape
    nv, n_i, n_f, n_x = s.nv, s.n_i, s.n_f, len(s.x_is_min)
    w = _Writer()
    w('"""Generated by cogra.runtime.fast.codegen -- do not edit."""')
    # numba's cache tracks a function's own file only, not the modules it calls into:
    # naming their sources' hash here makes a change to them a change to this file.
    w(f"# helpers: {_helpers_hash()}")
    w("import math")
    w("import numpy as np")
    w("from numba import njit")
    if s.saves:
        w("from cogra.runtime.fast.mixed_kernels import _rank_buffers, _window_ranks")
        w("from cogra.runtime.fast.mixed_ring import _expired, _lane_ages, _rebuild, _shift_stored")
    w("U0 = np.uint64(0)")
    w("U1 = np.uint64(1)")
    w(f"XMIN = np.int64({MIN_KEY_IDENTITY})")
    w(f"XMAX = np.int64({MAX_KEY_IDENTITY})")
    for b in range(64):
        w(f"B{b} = np.uint64({1 << b})")
    w()

    def xid(k: int) -> str:
        return "XMIN" if s.x_is_min[k] else "XMAX"

    def slots(prefix: str) -> list[tuple[str, str]]:
        out = [(f"{prefix}_i{k}", "U0") for k in range(n_i)]
        out += [(f"{prefix}_f{k}", "0.0") for k in range(n_f)]
        out += [(f"{prefix}_x{k}", xid(k)) for k in range(n_x)]
        out += [(f"{prefix}_r", "False")]
        return out

    def reset(prefix: str) -> None:
        for name, init in slots(prefix):
            w(f"{name} = {init}")

    def add(dst: str, src: str) -> None:
        for k in range(n_i):
            w(f"{dst}_i{k} += {src}_i{k}")
        for k in range(n_f):
            w(f"{dst}_f{k} += {src}_f{k}")
        for k in range(n_x):
            _keep_better(w, f"{dst}_x{k}", f"{src}_x{k}", s.x_is_min[k])
        w(f"{dst}_r = True")

    def transfer(arrays: str, at: str, to_arrays: bool) -> None:
        """Copy the states s0.., fin between scalars and rows ``[at, row]`` of the four
        arrays named ``arrays`` (``"st"``: st_i, st_f, st_x, st_r; else its i/f/x/r)."""
        a_i, a_f, a_x, a_r = (f"{arrays}_{c}" if arrays == "st" else f"{arrays[0]}{c}"
                              for c in "ifxr")
        for prefix, row in [(f"s{v}", v) for v in range(nv)] + [("fin", nv)]:
            pairs = [(f"{prefix}_i{k}", f"{a_i}[{at}, {row}, {k}]") for k in range(n_i)]
            pairs += [(f"{prefix}_f{k}", f"{a_f}[{at}, {row}, {k}]") for k in range(n_f)]
            pairs += [(f"{prefix}_x{k}", f"{a_x}[{at}, {row}, {k}]") for k in range(n_x)]
            pairs += [(f"{prefix}_r", f"{a_r}[{at}, {row}]")]
            for scalar, cell in pairs:
                w(f"{cell} = {scalar}" if to_arrays else f"{scalar} = {cell}")

    def scale_floats(prefix: str) -> None:
        for k in range(n_f):
            w(f"{prefix}_f{k} *= scale")

    finals = list(s.final)

    loaded = s.loads[0] if s.loads else -1

    def raise_exponent(to: str) -> None:
        """Scale every state's floats down to the common exponent ``to`` (above the current one)."""
        w(f"scale = math.ldexp(1.0, exponent - ({to}))")
        for v in range(nv):
            scale_floats(f"s{v}")
        scale_floats("fin")
        w(f"exponent = {to}")
        w("unit = math.ldexp(1.0, -exponent)")

    def load_totals() -> None:
        """The loaded variable's total before this batch, from cache row ``take_at[i]``."""
        v, live_i, live_f, live_x = s.loads
        w("c = take_at[i]")
        w("if c < 0:")
        with w.block():
            reset(f"s{v}")
        w("else:")
        with w.block():
            w("if ce[c] > exponent:  # the cache's floats are coarser: rescale ours to them")
            with w.block():
                raise_exponent("ce[c]")
            w("scale = math.ldexp(1.0, ce[c] - exponent)")
            for j, k in enumerate(live_i):
                w(f"s{v}_i{k} = ci[c, {j}]")
            for j, k in enumerate(live_f):
                w(f"s{v}_f{k} = cf[c, {j}] * scale")
            for j, k in enumerate(live_x):
                w(f"s{v}_x{k} = cx[c, {j}]")
            w(f"s{v}_r = cr[c]")
            w(f"while s{v}_f0 > rescale_above:  # the bound below holds for loaded counts too")
            with w.block():
                raise_exponent("exponent + 600")

    def window_loop(all_floats_watch: bool, lo: str = "win_lo[w]", hi: str = "win_hi[w]",
                    starts: str = "True", load: bool = False) -> None:
        """The batches of events ``lo`` .. ``hi`` applied to the states s*, fin; trends
        start only where ``starts`` holds (the pane maps' basis states start none);
        ``load``: the loaded variable's totals come from the cache (:func:`load_totals`)."""
        w(f"i = {lo}")
        w(f"hi = {hi}")
        w("while i < hi:")
        with w.block():
            w("t = times[i]")
            if load:
                load_totals()
            for v in range(nv):
                reset(f"d{v}")
            if s.mode == 1:
                w("ext = U0")
            w("j = i")
            w("while j < hi and times[j] == t:")
            with w.block():
                w("bits = plays[j]")
                w("r = rows[j]")
                if s.pair_checks:
                    w("okb = pair_ok[j]")
                for v in range(nv):
                    if load and v == loaded:
                        continue
                    w(f"if bits & B{v}:")
                    with w.block():
                        reset("c")
                        if v in s.start:
                            w(f"if {starts}:")
                            with w.block():
                                w("c_i0 = U1")
                                w("c_f0 = unit")
                                w("c_r = True")
                        for u in s.preds[v]:
                            cond = f"okb & B{v * nv + u}" if (u, v) in s.pair_checks else "True"
                            w(f"if {cond}:")
                            with w.block():
                                if s.mode == 1:
                                    w(f"ext |= B{u}")
                                w(f"if s{u}_r:")
                                with w.block():
                                    add("c", f"s{u}")
                        w("if c_r:")
                        with w.block():
                            for (var, op, a, s1, s2, s3) in s.ops:
                                if var != v:
                                    continue
                                if op == OP_CNT:
                                    if s1 >= 0:  # else approximate (channels.channel_layout)
                                        w(f"c_i{s1} += c_i0")
                                    w(f"c_f{s2} += c_f0")
                                    continue
                                w(f"if a_valid[{a}, r]:")
                                with w.block():
                                    if op == OP_NN:
                                        if s1 >= 0:
                                            w(f"c_i{s1} += c_i0")
                                        w(f"c_f{s2} += c_f0")
                                    elif op == OP_SUM_INT:
                                        w(f"x = a_int[{a}, r]")
                                        w(f"c_i{s1} += np.uint64(x) * c_i0")
                                        w(f"c_f{s2} += np.float64(x) * c_f0")
                                        if s3 >= 0:  # else never negative (channels.channel_layout)
                                            w(f"c_f{s3} += abs(np.float64(x)) * c_f0")
                                    elif op == OP_SUM_FLOAT:
                                        w(f"c_f{s2} += a_flt[{a}, r] * c_f0")
                                        if s3 >= 0:  # else never negative
                                            w(f"c_f{s3} += abs(a_flt[{a}, r]) * c_f0")
                                    elif op in (OP_MIN, OP_MAX):
                                        cmp = "<" if op == OP_MIN else ">"
                                        w(f"if a_key[{a}, r] {cmp} c_x{s1}:")
                                        with w.block():
                                            w(f"c_x{s1} = a_key[{a}, r]")
                            add(f"d{v}", "c")
                w("j += 1")
            # apply the batch
            if s.mode == 2:
                for v in range(nv):
                    reset(f"s{v}")
            elif s.mode == 1:
                for u in range(nv):
                    w(f"if ext & B{u}:")
                    with w.block():
                        reset(f"s{u}")
            for v in range(nv):
                if load and v == loaded:
                    continue
                w(f"if d{v}_r:")
                with w.block():
                    add(f"s{v}", f"d{v}")
                    if s.mode != 0 and v in finals:
                        add("fin", f"d{v}")
            if all_floats_watch:
                # Streaming: a window's length is unknown, so every float slot is watched.
                watch = [f"abs(s{v}_f{k})" for v in range(nv) for k in range(n_f)]
                watch += [f"abs(fin_f{k})" for k in range(n_f)]
            else:
                watch = [f"s{v}_f0" for v in range(nv)] + (["fin_f0"] if s.mode != 0 else [])
            w(f"if max({', '.join(watch + ['0.0'])}) > rescale_above:")
            with w.block():
                raise_exponent("exponent + 600")
            w("i = j")

    def windows_kernel(name: str, extra: str, load: bool) -> None:
        w("@njit(cache=True, fastmath=False)")
        w(f"def {name}(times, plays, pair_ok, a_int, a_flt, a_valid, a_key, rows, win_lo, win_hi,")
        w(f"           rescale_above, out_i, out_f, out_x, out_e, out_r{extra}):")
        with w.block():
            w("for w in range(win_lo.shape[0]):")
            with w.block():
                # The same events as the previous window (a sparse sub-stream under a
                # sliding window): the same result, copied (q2: 56% of its windows) --
                # unrolled here: calling kernels._copy_output instead measured 5-10%
                # slower on q2.
                w("if w > 0 and win_lo[w] == win_lo[w - 1] and win_hi[w] == win_hi[w - 1]:")
                with w.block():
                    for k in range(n_i):
                        w(f"out_i[w, {k}] = out_i[w - 1, {k}]")
                    for k in range(n_f):
                        w(f"out_f[w, {k}] = out_f[w - 1, {k}]")
                    for k in range(n_x):
                        w(f"out_x[w, {k}] = out_x[w - 1, {k}]")
                    w("out_e[w] = out_e[w - 1]")
                    w("out_r[w] = out_r[w - 1]")
                    w("continue")
                for v in range(nv):
                    reset(f"s{v}")
                reset("fin")
                w("exponent = 0")
                w("unit = 1.0")
                window_loop(False, load=load)
                if s.mode == 0:
                    for v in finals:
                        w(f"if s{v}_r:")
                        with w.block():
                            add("fin", f"s{v}")
                for k in range(n_i):
                    w(f"out_i[w, {k}] = fin_i{k}")
                for k in range(n_f):
                    w(f"out_f[w, {k}] = fin_f{k}")
                for k in range(n_x):
                    w(f"out_x[w, {k}] = fin_x{k}")
                w("out_e[w] = exponent")
                w("out_r[w] = fin_r")
        w()

    windows_kernel("kernel", "", False)
    if s.loads:
        assert s.mode == 0 and loaded not in finals  # shared_rows.shared_variable
        windows_kernel("kernel_loading", ", take_at, ci, cf, cx, ce, cr", True)
    w("@njit(cache=True, fastmath=False)")
    w("def kernel_from(times, plays, pair_ok, a_int, a_flt, a_valid, a_key, rows, win_lo, win_hi,")
    w("                st_i, st_f, st_x, st_r, st_e):")
    with w.block():
        w(f"rescale_above = {float(2.0**600)!r}")
        w("for w in range(win_lo.shape[0]):")
        with w.block():
            transfer("st", "w", to_arrays=False)
            w("exponent = st_e[w]")
            w("unit = math.ldexp(1.0, -exponent)")
            window_loop(True)
            transfer("st", "w", to_arrays=True)
            w("st_e[w] = exponent")
    w()
    if s.loads and s.live is not None:
        codegen_ring.write_ring_loading(w, s)
    if s.saves and s.live is not None:
        codegen_ring.write_ring_saving(w, s)
    _sliding_functions(w, s, window_loop, transfer)
    text = w.text()
    loop = ["_slide_windows"] if "\ndef _slide_windows(" in text else []  # (see _loop_apart)
    return _prune_parameters(text, ["_apply", "_compose", "_copy_rows", "_emit_row", "_pane_map", *loop])


def _prune_parameters(text: str, functions: list[str]) -> str:
    """``text`` with the parameters that the named functions (defined in it on one line,
    called only from it) never read dropped from their definitions and calls, until none
    is left: a call passes every array argument as ~10 scalars, and the sliding kernel's
    ``_apply`` (called ~4M times for 1.9M windows) took 5 arrays and two more arguments
    it does not read when the query has no MIN/MAX (its kernel 164 -> 154 ms)."""
    changed = True
    while changed:
        changed = False
        for name in functions:
            found = re.search(rf"^def {name}\(([^()]*)\):\n((?:(?:[ \t]+.*)?\n)*)", text, re.M)
            assert found, name
            params = [p.strip() for p in found.group(1).split(",")]
            keep = [re.search(rf"\b{p}\b", found.group(2)) is not None for p in params]
            if all(keep):
                continue

            def kept(args: str) -> str:
                values = [a.strip() for a in args.split(",")]
                assert len(values) == len(params), (name, values)
                return ", ".join(v for v, k in zip(values, keep) if k)

            text = re.sub(rf"(?<!def )\b{name}\(([^()]*)\)", lambda c: f"{name}({kept(c.group(1))})", text)
            text = text.replace(found.group(0), f"def {name}({kept(found.group(1))}):\n{found.group(2)}", 1)
            changed = True
    return text


def one_kleene_variable_under_any(s: Shape) -> bool:
    """Whether the pattern is one variable under any that every event playing it starts
    and extends without a pair predicate (``A+``): then a pane map's linear response to
    one trend is its start response plus that trend (see ``_pane_map`` below)."""
    return (s.mode == 0 and s.nv == 1 and s.start == (0,) and tuple(s.preds[0]) == (0,)
            and not s.pair_checks)


def _sliding_functions(w: "_Writer", s: Shape, window_loop, transfer) -> None:
    """The sliding-window sharing kernel (:mod:`sliding_kernels`) for this shape: its
    driver ``run_sliding`` and ``_compose`` verbatim, with the two hot functions it calls
    -- ``_pane_map`` (the events of a pane applied to the ``nv + 1`` states of a map) and
    ``_apply`` (a map applied to a state) -- generated with every loop unrolled."""
    from cogra.runtime.fast import sliding_kernels

    nv, n_i, n_f, n_x = s.nv, s.n_i, s.n_f, len(s.x_is_min)
    # Helpers and the generated functions below read and write single elements only:
    # compiled without reference counts (jit.NO_REFCOUNTS), a call costs no atomic update
    # per array argument.  They are inlined (numba's IR) into the windows' loop, which runs
    # without reference counts too (_loop_apart): inlined into a function with them, each
    # inlined call paid its array arguments' updates; as calls, each pushed ~10 words per
    # array argument (LLVM inlined none of them: too large).  The sliding benchmark's
    # kernel 112 -> 83 ms (outputs bit-identical; its first compile ~1.3 s longer).  Only
    # for one Kleene variable under any (the derived maps below: small helpers); the
    # larger helpers of other shapes stay calls -- inlined, their compiles grew by more
    # than their runs shrank (the test suite's generated sliding kernels: minutes).
    derived = one_kleene_variable_under_any(s)
    inline = ", inline='always'" if derived else ""
    helper = f"@njit(cache=True{_NO_REFCOUNTS}{inline})" if _NO_REFCOUNTS else "@njit(cache=True)"
    w("from cogra.runtime.fast.sliding_kernels import SCALE_ABOVE, SCALE_STEP, _clear_row")
    w()
    # Under any, the trends ending at a final variable join the finished row only when a
    # window is emitted: the pane maps never write it, so every map's and state's finished
    # row stays empty, and the functions below neither compute, copy, scale nor read it
    # (about half of a map application for A+: with the tabled powers below, the
    # generated sharing kernel 0.228 -> 0.179 s on the sliding benchmark, warm).
    rows = list(range(nv)) if s.mode == 0 else list(range(nv + 1))
    # 2**e for the exponent differences of _apply (never positive there) from a table:
    # math.ldexp is a call into the C library, two or three per application.
    w(f"POW2 = np.ldexp(1.0, -np.arange({POW2_TABLE}))")
    w()

    def pow2(e: str) -> str:
        """``2.0 ** e`` for an integer expression ``e <= 0``."""
        return f"(POW2[-({e})] if ({e}) > -{POW2_TABLE} else 0.0)"

    def at(array: str, row: str, q: int, k: int | None = None) -> str:
        """Cell ``[row, q(, k)]`` of a flat view of a pool array (:func:`_flat_pool`):
        the shape's widths are constants here, so the offsets cost no stride loads."""
        if k is None:  # reach: (rows, nv + 1)
            return f"{array}[({row}) * {nv + 1} + {q}]"
        width = {"i": n_i, "f": n_f, "x": n_x}[array[-1]]
        return f"{array}[(({row}) * {nv + 1} + {q}) * {width} + {k}]"

    w(helper)
    w("def _normalize_flat(sf, row):")
    with w.block():
        w('"""sliding_kernels._normalize over the rows kept here, unrolled, on a flat view."""')
        w("big = 0.0")
        for q in rows:
            for k in range(n_f):
                w(f"a = abs({at('sf', 'row', q, k)})")
                w("if a > big:")
                with w.block():
                    w("big = a")
                w("elif a != a:")
                with w.block():
                    w("return -1")
        w("if not big < np.inf:")
        with w.block():
            w("return -1")
        w("shift = 0")
        w("while big > SCALE_ABOVE:")
        with w.block():
            w("scale = math.ldexp(1.0, -SCALE_STEP)")
            for q in rows:
                for k in range(n_f):
                    w(f"{at('sf', 'row', q, k)} *= scale")
            w("big *= scale")
            w("shift += SCALE_STEP")
        w("return shift")
    w()
    # The per-window helpers with the shape's channels unrolled (the generic ones loop
    # over runtime widths): a window's row out, rows copied in the pool.
    def xid_of(k: int) -> str:
        return "XMIN" if s.x_is_min[k] else "XMAX"

    def each_channel(line: Callable[[str, int], str], kinds: str = "ifx") -> None:
        """One line per channel: ``line(kind, k)`` for kinds ``i``, ``f``, ``x``."""
        for c, n in (("i", n_i), ("f", n_f), ("x", n_x)):
            if c in kinds:
                for k in range(n):
                    w(line(c, k))

    w(helper)
    w("def _emit_row(mode, nv, final_bits, x_is_min, si, sf, sx, sr, se, s, w, out_i, out_f, out_x, out_e, out_r):")
    with w.block():
        finals_any = list(s.final) if s.mode == 0 else []
        fin = nv
        # Under any, the trends ending at a final variable join the finished row now, added
        # in the generic helper's order (and only where that row is reached).
        if s.mode == 0:  # the finished row is empty (see rows above)
            each_channel(lambda c, k: f"o_{c}{k} = " + ("U0" if c == "i" else "0.0" if c == "f" else xid_of(k)))
        else:
            each_channel(lambda c, k: f"o_{c}{k} = {at('s' + c, 's', fin, k)}")
        for v in finals_any:
            w(f"if {at('sr', 's', v)}:")
            with w.block():
                each_channel(lambda c, k: f"o_{c}{k} += {at('s' + c, 's', v, k)}", kinds="if")
                for k in range(n_x):
                    _keep_better(w, f"o_x{k}", at("sx", "s", v, k), s.x_is_min[k])
        each_channel(lambda c, k: f"out_{c}[w, {k}] = o_{c}{k}")
        w("out_e[w] = se[s]")
        reached = [at("sr", "s", v) for v in finals_any] if s.mode == 0 else [at("sr", "s", fin)]
        w("out_r[w] = " + (" or ".join(reached) or "False"))
    w()
    w(helper)
    w("def _copy_rows(pi, pf, px, pr, pe, src, dst, n):")
    with w.block():
        w("for t in range(n):")
        with w.block():
            for q in rows:
                each_channel(lambda c, k: f"{at('p' + c, 'dst + t', q, k)} = {at('p' + c, 'src + t', q, k)}")
                w(f"{at('pr', 'dst + t', q)} = {at('pr', 'src + t', q)}")
            w("pe[dst + t] = pe[src + t]")
    w()

    def one_more_trend(pi: str, pf: str, px: str, pr: str, pe: str, m: str) -> None:
        """Emit: map row ``m + 1`` (L_0) := row ``m`` (T0, normalized) plus one trend, at
        T0's exponent -- the linear response of one Kleene variable under any (see
        _pane_map) -- and return True."""
        arrays = {"i": pi, "f": pf, "x": px}
        each_channel(lambda c, k: f"{at(arrays[c], m + ' + 1', 0, k)} = {at(arrays[c], m, 0, k)}")
        w(f"{at(pi, m + ' + 1', 0, 0)} += U1")
        # No normalizing: row m is normalized and finite, and its count plus 2**-e (at most
        # 1) stays finite and at most SCALE_ABOVE (a power of two, beyond 2**53: a double
        # below it plus one rounds to at most it) -- 4 ms of the benchmark's kernel.
        w(f"{at(pf, m + ' + 1', 0, 0)} += {pow2('-' + pe + '[' + m + ']')}")
        w(f"{at(pr, m + ' + 1', 0)} = True")
        w(f"{pe}[{m} + 1] = {pe}[{m}]")
        w("return True")

    w(helper)
    # The generic signature; _prune_parameters keeps the arguments the body reads (the
    # generic one takes 29, most of them for its interpreted slot program, and every array
    # argument of a call is passed as ~10 scalars, once per pane).
    generic = list(inspect.signature(sliding_kernels._pane_map.py_func).parameters)
    w(f"def _pane_map({', '.join(generic)}):")
    with w.block():
        w(f"rescale_above = {float(2.0**600)!r}")
        # State st of the identity map (T0: no trends; L_r: one trend, reached, at row r)
        # starts in the scalars directly, not written to the pool and read back; every
        # field goes to the pool at the end.
        # A single Kleene variable under any (A+: every event playing it starts a trend
        # and extends every trend, no pair predicate): the linear response L_0 to one
        # trend is the start response T0 plus that trend itself -- the trends from the
        # one trend are it extended by any chain of the pane's events (none included),
        # T0's are the non-empty chains, with equal channels but the count.  So T0 alone
        # runs through the pane, and L_0 is derived (half of the pane's event work; the
        # sliding benchmark's kernel 167 -> 161 ms, median of 15 in one process).
        w(f"for st in range({1 if derived else nv + 1}):")
        with w.block():
            w("row = m + st")
            for prefix, row in [(f"s{v}", v) for v in range(nv)] + [("fin", nv)]:
                basis = "st == " + str(row + 1)
                for k in range(n_i):
                    w(f"{prefix}_i{k} = U1 if {basis} else U0" if k == 0 and row < nv else f"{prefix}_i{k} = U0")
                for k in range(n_f):
                    w(f"{prefix}_f{k} = 1.0 if {basis} else 0.0" if k == 0 and row < nv else f"{prefix}_f{k} = 0.0")
                for k in range(n_x):
                    w(f"{prefix}_x{k} = {'XMIN' if s.x_is_min[k] else 'XMAX'}")
                w(f"{prefix}_r = {basis}" if row < nv else f"{prefix}_r = False")
            w("exponent = 0")
            w("unit = 1.0")
            w("with_starts = st == 0")
            window_loop(True, lo="lo", hi="hi", starts="with_starts")
            for prefix, q in [(f"s{v}", v) for v in range(nv)] + ([("fin", nv)] if nv in rows else []):
                each_channel(lambda c, k: f"{at('m' + c, 'row', q, k)} = {prefix}_{c}{k}")
                w(f"{at('mr', 'row', q)} = {prefix}_r")
            w("shift = _normalize_flat(mf, row)")
            w("if shift < 0:")
            with w.block():
                w("return False")
            w("me[row] = exponent + shift")
        if derived:
            one_more_trend("mi", "mf", "mx", "mr", "me", "m")
        else:
            w("return True")
    w()

    def apply_body(affine: str) -> None:
        """Row ``o`` := ``G(S)`` for the map at rows ``g ..`` and the state at row ``s``;
        ``affine``: the expression telling whether the map's trend starts count (its T0).
        Leaves ``eo`` and the normalizing ``shift`` (< 0: non-finite) set."""
        # One pool holds the map (rows g..), the state (row s) and the result (row o),
        # as flat views (see _flat_pool).
        w("si, sf, sr, se = gi, gf, gr, ge")
        w("oi, of, orr = gi, gf, gr")
        if n_x:  # else gx is never read (see _prune_parameters)
            w("sx, ox = gx, gx")
        w(f"eo = ge[g] if {affine} else 0")
        for r in range(nv):
            w(f"if {at('sr', 's', r)} and se[s] + ge[g + {r + 1}] > eo:")
            with w.block():
                w(f"eo = se[s] + ge[g + {r + 1}]")
        if nv in rows:
            w(f"if {at('sr', 's', nv)} and se[s] > eo:")
            with w.block():
                w("eo = se[s]")
        w(f"if {affine}:")
        with w.block():
            w(f"a0 = {pow2('ge[g] - eo')}")
            for q in rows:
                for k in range(n_i):
                    w(f"{at('oi', 'o', q, k)} = {at('gi', 'g', q, k)}")
                for k in range(n_f):
                    w(f"{at('of', 'o', q, k)} = {at('gf', 'g', q, k)} * a0")
                for k in range(n_x):
                    w(f"{at('ox', 'o', q, k)} = {at('gx', 'g', q, k)}")
                w(f"{at('orr', 'o', q)} = {at('gr', 'g', q)}")
        w("else:")
        with w.block():
            for q in rows:
                for k in range(n_i):
                    w(f"{at('oi', 'o', q, k)} = U0")
                for k in range(n_f):
                    w(f"{at('of', 'o', q, k)} = 0.0")
                for k in range(n_x):
                    w(f"{at('ox', 'o', q, k)} = {xid_of(k)}")
                w(f"{at('orr', 'o', q)} = False")
        for r in range(nv):
            lr = f"g + {r + 1}"  # the map's row L_r
            w(f"if {at('sr', 's', r)}:")
            with w.block():
                w(f"c = {at('si', 's', r, 0)}")
                w(f"cf = {at('sf', 's', r, 0)}")
                w(f"ar = {pow2(f'se[s] + ge[g + {r + 1}] - eo')}")
                for q in rows:
                    w(f"if {at('gr', lr, q)}:")
                    with w.block():
                        w(f"{at('orr', 'o', q)} = True")
                        w(f"l0 = {at('gi', lr, q, 0)}")
                        w(f"{at('oi', 'o', q, 0)} += c * l0")
                        for k in range(1, n_i):
                            w(f"{at('oi', 'o', q, k)} += c * {at('gi', lr, q, k)} + {at('si', 's', r, k)} * l0")
                        w(f"m0 = {at('gf', lr, q, 0)}")
                        w(f"{at('of', 'o', q, 0)} += cf * m0 * ar")
                        for k in range(1, n_f):
                            w(f"{at('of', 'o', q, k)} += (cf * {at('gf', lr, q, k)} + {at('sf', 's', r, k)} * m0) * ar")
                        for k in range(n_x):
                            _keep_better(w, at('ox', 'o', q, k), at('sx', 's', r, k), s.x_is_min[k])
                    for k in range(n_x):
                        _keep_better(w, at('ox', 'o', q, k), at('gx', lr, q, k), s.x_is_min[k])
        if nv in rows:
            w(f"if {at('sr', 's', nv)}:")
            with w.block():
                w(f"afin = {pow2('se[s] - eo')}")
                for k in range(n_i):
                    w(f"{at('oi', 'o', nv, k)} += {at('si', 's', nv, k)}")
                for k in range(n_f):
                    w(f"{at('of', 'o', nv, k)} += {at('sf', 's', nv, k)} * afin")
                for k in range(n_x):
                    _keep_better(w, at('ox', 'o', nv, k), at('sx', 's', nv, k), s.x_is_min[k])
                w(f"{at('orr', 'o', nv)} = True")
        w("shift = _normalize_flat(of, o)")

    w(helper)
    w("def _apply(gi, gf, gx, gr, ge, g, s, o, affine, nv, x_is_min):")
    with w.block():
        apply_body("affine")
        w("return -1 if shift < 0 else eo + shift")
    if derived:
        # Composed maps are maps of their panes' events, so the identity of _pane_map holds
        # for them too: a composition applies only its T0 row and derives L_0, in one
        # function (as calls, _apply then _one_more_trend cost what the second
        # application did; the kernel 136 -> 117 ms, median of 15 in one process).
        w()
        w(helper)
        w("def _compose(gi, gf, gx, gr, ge, g, t, o, nv, x_is_min):")
        with w.block():
            w('"""Map ``o`` := ``G o T`` (flat views): its T0 row applied, L_0 derived."""')
            w("s = t")
            apply_body("True")
            w("if shift < 0:")
            with w.block():
                w("return False")
            w("ge[o] = eo + shift")
            one_more_trend("gi", "gf", "gx", "gr", "ge", "o")
    w()
    # From the module's file, not its attributes (tests may wrap those).
    source = Path(sliding_kernels.__file__).read_text()
    lines = source.split("\n")
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name in (("run_sliding",) if derived else ("_compose", "run_sliding")):
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            copied = lines[first - 1:node.end_lineno]
            if node.name == "_compose":  # calls the generated _apply, not the generic one
                assert copied[0] == "@njit(cache=True, **NO_REFCOUNTS)", copied[0]
                copied[0] = helper
            if node.name == "run_sliding":
                copied = _loop_apart(_flat_pool("\n".join(copied))).split("\n")
            w.lines.extend(copied)
            w()


def _flat_pool(run_sliding: str) -> str:
    """``run_sliding``'s source with its pane maps, compositions, map applications, row
    copies and output rows given flat views of the pool's arrays (``reshape(-1)``, no
    copy): the generated helpers index them with the shape's widths as constants, and a
    1-d array argument is 7 scalars where a 3-d one is 11 (the sliding benchmark's kernel
    144 -> 136 ms for the applications; 119 -> 117 ms for the row copies and rows out)."""
    anchor = "    mr = np.zeros((n_rows, sdim), np.bool_)\n"
    assert run_sliding.count(anchor) == 1, "run_sliding allocates its pool once"
    views = "".join(f"    {a}_flat = {a}.reshape(-1)\n" for a in ("mi", "mf", "mx", "mr"))
    text = run_sliding.replace(anchor, anchor + views)
    for name in ("_compose", "_apply", "_copy_rows"):
        call = f"{name}(mi, mf, mx, mr, me,"
        assert call in text, call
        text = text.replace(call, f"{name}(mi_flat, mf_flat, mx_flat, mr_flat, me,")
    call = "x_is_min, mi, mf, mx, mr, me, win, d,"  # _emit_row's
    assert text.count(call) == 1, call
    text = text.replace(call, "x_is_min, mi_flat, mf_flat, mx_flat, mr_flat, me, win, d,")
    calls = list(re.finditer(r"_pane_map\(([^()]*)\)", text))
    assert len(calls) == 1, "run_sliding calls _pane_map once"
    flat = re.sub(r"\b(mi|mf|mx|mr)\b", r"\1_flat", calls[0].group(0))
    return text[:calls[0].start()] + flat + text[calls[0].end():]


def _loop_apart(run_sliding: str) -> str:
    """``run_sliding``'s source with its loop over the windows moved into a function of its
    own, ``_slide_windows``, compiled without reference counts (jit.NO_REFCOUNTS): the loop
    allocates nothing and makes no views, and the helpers inlined into it then cost no
    reference counts either (see _sliding_functions).  ``run_sliding`` keeps the pool's
    allocation and calls it once per block of windows with the arguments and locals the
    loop reads."""
    if not _NO_REFCOUNTS:  # a numba without the option: the loop stays (its helpers are calls)
        return run_sliding
    anchor = "    seg = -1\n"
    assert run_sliding.count(anchor) == 1, "run_sliding's loop starts once"
    head, loop = run_sliding.split(anchor)
    loop = anchor + loop
    (fn,) = [n for n in ast.parse(run_sliding).body if isinstance(n, ast.FunctionDef)]
    loop_line = head.count("\n") + 1
    names = [a.arg for a in fn.args.args]  # the loop reads arguments and the head's locals
    for statement in fn.body:
        if statement.lineno < loop_line:
            for node in ast.walk(statement):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in names:
                    names.append(node.id)
    used = [n for n in names if re.search(rf"\b{n}\b", loop)]
    args = ", ".join(used)
    return (f"@njit(cache=True{_NO_REFCOUNTS})\ndef _slide_windows({args}):\n{loop.rstrip()}\n\n\n"
            f"{head}    _slide_windows({args})\n")


def sliding_for(shape: Shape) -> Callable:
    """The shape's sliding-window sharing kernel, with the signature of
    :func:`sliding_kernels.run_sliding`."""
    return _module_for(shape).run_sliding


if __name__ == "__main__":  # python -m cogra.runtime.fast.codegen LOCK (see compile_in_background)
    from cogra.runtime.fast import codegen as _codegen  # the module proper, not this __main__ copy

    _codegen._compile_requested(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
