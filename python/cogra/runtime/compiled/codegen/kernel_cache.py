"""The generated modules of query shapes: written to a cache directory, imported once per
process, and asked whether numba has compiled a function of theirs already.

Sources are written to :func:`cogra.runtime.caches.cache_root` ``/kernels`` (default
``~/.cache/cogra/kernels``) and imported from there, so numba's on-disk cache works
across processes: compiling a shape costs about a second once.  The shapes whose modules
ship in the kernel bundle (:func:`cogra.runtime.kernel_bundle.generated_source`) are
imported from the bundle instead, their compiled code loaded from it: nothing is written
or compiled for them.  Whether a function is compiled decides whether a small input may
use it (:func:`use_generated`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

from cogra.runtime.caches import cache_root
from cogra.runtime.compiled.codegen import window_finish
from cogra.runtime.compiled.codegen.query_shape import Shape
from cogra.runtime.compiled.codegen.window_kernel import generate


_LOADED: dict[str, object] = {}


def cache_dir() -> Path:
    """Where generated modules live (:func:`cogra.runtime.caches.cache_root`: a writable
    place on every machine)."""
    path = cache_root() / "kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _source_path(shape: Shape) -> tuple[Path, bool]:
    """Where the shape's module is written, and whether the file there is this version's:
    its first line names :func:`generator_version` (the same shape key under the same
    version is the same text).  Reading one line, not generating the source to compare:
    generating q1's costs 0.25 s (it parses the helpers' sources), on a first call's path
    that only asks whether the kernel is compiled."""
    path = cache_dir() / f"cogra_kernel_{shape.key}.py"
    try:
        with open(path, "rb") as f:
            return path, f.readline() == _version_line().encode()
    except FileNotFoundError:
        return path, False


_GENERATORS = ("window_kernel", "window_finish", "pane_loading")


@functools.lru_cache(maxsize=None)
def generator_version() -> str:
    """A hash of everything a generated module's text depends on: the generators and the
    sources they import from or copy (read, not imported)."""
    from cogra.runtime.compiled.codegen.window_kernel import _HELPERS, _source_file

    digest = hashlib.sha256()
    for module in (*(f"cogra.runtime.compiled.codegen.{g}" for g in _GENERATORS), *_HELPERS,
                   "cogra.runtime.compiled.finish.common_cases"):
        digest.update(_source_file(module).read_bytes())
    return digest.hexdigest()[:24]


def _version_line() -> str:
    return f"# cogra generated kernel, generator {generator_version()}\n"


_LOADING = threading.Lock()
"""Serialises writing and importing generated modules within a process (threads)."""


def _module_for(shape: Shape):
    """The generated module of a shape (written and imported once per process): the
    bundle's where it has one, else the one written to the cache (:func:`_written`)."""
    return _once(shape.key, lambda: _bundled(shape.key) or _written(shape))


def bundled_module(key: str):
    """The bundle's generated module of shape ``key``, imported once per process (the warm
    start loads the common shapes' kernels ahead of a first call); None where the bundle
    has none, or generated kernels are off."""
    return _once(key, lambda: _bundled(key))


def _once(key: str, path_of: Callable[[], Path | None]):
    """The module of shape ``key`` this process imported, else the one at ``path_of()``
    imported now (under :data:`_LOADING`); None where ``path_of`` finds none."""
    module = _LOADED.get(key)
    if module is not None:
        return module
    with _LOADING:
        if key in _LOADED:
            return _LOADED[key]
        path = path_of()
        return None if path is None else _import(key, path)


def _written(shape: Shape) -> Path:
    """The shape's module in the cache, written there unless this version's is.  The source
    goes to a temporary file of this process *and thread* and is renamed into place, so
    that processes and threads writing the same module at once never see a partial file
    nor lose each other's temporary file."""
    path, current = _source_path(shape)
    if not current:
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.{uuid.uuid4().hex}.tmp")
        tmp.write_text(_version_line() + _source(shape))
        os.replace(tmp, path)
    return path


def _import(key: str, path: Path):
    """Import the generated module of shape ``key`` from ``path`` (under :data:`_LOADING`)."""
    name = f"cogra_kernel_{key}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    _use_bundle(module)
    _LOADED[key] = module
    return module


def _bundled(key: str) -> Path | None:
    """The bundle's module of shape ``key`` (:func:`kernel_bundle.generated_source`), unless
    generated kernels are off."""
    if not generated_kernels_enabled():
        return None
    from cogra.runtime import kernel_bundle

    return kernel_bundle.generated_source(key, generator_version())


def _use_bundle(module: object) -> None:
    """Give a generated module's dispatchers the bundle's cache (:func:`kernel_bundle.use_bundle`):
    the generated source decorates with numba's own ``njit``, whose cache looks in numba's
    cache directory only, and refreshes numba's registries before each load
    (:class:`kernel_bundle.BundledCache` does neither)."""
    from numba.core.registry import CPUDispatcher

    from cogra.runtime import kernel_bundle

    for value in vars(module).values():
        if isinstance(value, CPUDispatcher):
            kernel_bundle.use_bundle(value)


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
    process, in the kernel bundle, or in numba's on-disk cache (``__pycache__`` beside
    the source).  Loading it
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
    bundled = _bundled(key)
    if bundled is not None:
        from cogra.runtime import kernel_bundle

        if kernel_bundle.generated_has(bundled, function):
            return True
        path, current = bundled, True  # (a function the bundle lacks: compiled here, beside it)
    else:
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


def is_loaded(shape: Shape | window_finish.DecodeShape) -> bool:
    """Whether this process has imported the shape's generated module already (its
    functions then run without loading anything)."""
    return shape.key in _LOADED


def use_generated(shape: Shape, function: str, n_events: int, min_events: int) -> bool:
    """Whether to run the shape's generated ``function``: the input is large enough to
    repay compiling it (``min_events``), or it is compiled already."""
    if not generated_kernels_enabled():
        return False
    return n_events >= min_events or is_compiled(shape, function)


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
    (see :mod:`pane_loading`)."""
    return _module_for(shape).ring_loading


def ring_saving_for(shape: Shape) -> Callable:
    """The shape's representatives' run of the ring kernel (``shape.saves`` and
    ``shape.live`` set): ``ring_saving(times, plays, pair_ok, a_int, a_flt, a_valid, rows,
    pair_flags, live_i, live_f, h_rank, h_valid, q_a, q_b, q_eq, g_valid, win_seg, win_k,
    win_lo, win_hi, slide, lanes, max_batch, max_span, redo, ci, cf, cpane)`` (see
    :mod:`pane_loading`)."""
    return _module_for(shape).ring_saving


def finisher_for(shape: window_finish.DecodeShape) -> Callable:
    """The finish of one window per key generated for a query's slots and items: decode and
    columns in one pass (see :mod:`window_finish`)."""
    return getattr(_module_for(shape), window_finish.FUNCTION)


def kernel_from_for(shape: Shape) -> Callable:
    """The shape's kernel that continues windows from carried states (streaming):
    ``kernel_from(times, plays, pair_ok, a_int, a_flt, a_valid, a_key, rows, win_lo, win_hi,
    st_i, st_f, st_x, st_r, st_e)``, as :func:`coarse_grained.run_windows_from`."""
    return _module_for(shape).kernel_from


def kernel_continue_for(shape: Shape) -> Callable:
    """The shape's kernel that continues windows from carried states with the one-pass
    kernel's bound on the counts (a table run in chunks): ``kernel_continue(times, plays,
    pair_ok, a_int, a_flt, a_valid, a_key, rows, win_lo, win_hi, rescale_above, st_i,
    st_f, st_x, st_r, st_e)``.  Not for shapes with an absence or a loaded variable."""
    return _module_for(shape).kernel_continue


@functools.lru_cache(maxsize=None)
def _source(shape: Shape | window_finish.DecodeShape) -> str:
    if isinstance(shape, window_finish.DecodeShape):
        return window_finish.generate(shape)
    return generate(shape)


def sliding_for(shape: Shape) -> Callable:
    """The shape's sliding-window sharing kernel, with the signature of
    :func:`pane_maps.run_sliding`."""
    return _module_for(shape).run_sliding
