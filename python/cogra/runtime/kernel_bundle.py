"""The kernels compiled ahead of time that ship with cogra: a read-only numba cache that
numba's own cache falls back to, so that the first query on a machine compiles nothing.

Compiling the generic kernels costs a fresh process tens of seconds (20k events: q1
20 s, q3 33 s, of which the mixed-grained ring kernel alone is 26 s).  ``cogra warm
--bundle`` (:mod:`cogra.warmup`) compiles them once, for the baseline CPU of the
architecture (``NUMBA_CPU_NAME=generic``: no instruction a machine of the same
architecture may lack), into ``cogra/_kernels/``, which the wheel carries.  Each entry
is numba's own cache entry for one kernel and signature, keyed as numba keys it -- the
signature, the machine ("magic tuple") and a hash of the function's bytecode -- under a
stamp of its source file's content, so an entry is used only by the very source it was
compiled from, with the numba and Python versions and a hash of all the kernels' sources
(:func:`sources_hash`: a kernel inlines helpers of other files) recorded in
``manifest.json``.

Lookup order, per kernel and signature (:class:`BundledCache`): numba's own cache
(machine code tuned to this CPU, where a compile has happened here), then the bundle,
then a compile (saved to numba's own cache as usual).  Generic code runs the kernels
within a few percent of host-tuned code: their loops are scalar and branchy.

Why not numba's ahead-of-time compiler (``numba.pycc``): it needs every signature
spelled out, is deprecated, and cannot compile the functions the kernels call through
their dispatchers; the cache entries are what numba itself loads.

Why not copy the entries into numba's cache at install: numba's cache is keyed by this
CPU, so the copy would have to rewrite index files that other processes write
concurrently; reading the bundle in place needs no writes at all.

The bundle also holds the generated kernels of a few common query shapes
(:data:`GENERATED`, :mod:`cogra.warmup`'s ``common_shapes``): each generated module's
source beside numba's entries for it, used where the generator that wrote them is this
one (:func:`generated_source`).  A query of another shape runs the generic kernels
first and gets its own generated kernel compiled per machine
(:mod:`cogra.runtime.compiled.codegen.background`).

``COGRA_KERNEL_BUNDLE=0`` ignores the bundle (``cogra warm --bundle`` does, to compile);
``COGRA_KERNEL_BUNDLE=generic`` its generated modules only (every shape's generated
kernel then compiles on the machine, as without them).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, NamedTuple

from numba.core.caching import FunctionCache, IndexDataCacheFile

BUNDLE_ENV = "COGRA_KERNEL_BUNDLE"
PACKAGE = Path(__file__).resolve().parents[1]  # the cogra package
MANIFEST = "manifest.json"
GENERIC_ONLY = "generic"
"""The value of :data:`BUNDLE_ENV` that leaves out the bundle's generated modules."""
GENERATED = "generated"
"""The bundle's directory of generated modules (``cogra_kernel_<shape key>.py``) and
their numba entries."""


def bundle_root() -> Path:
    """Where the bundle lives: ``cogra/_kernels``."""
    return PACKAGE / "_kernels"


def python_tag() -> str:
    """The interpreter the entries were pickled by (numba's cache files are per version)."""
    return f"{sys.implementation.name}{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}"


KERNEL_SOURCES = ("compiled", "aggregates.py", "windows.py", "kernel_bundle.py", "caches.py")
"""What the kernels are compiled from, under ``cogra/runtime``: the compiled package and
the modules it takes constants and helpers from.  (Not all of ``runtime``: the online and
Spark-facing modules there change often and no kernel reads them.)"""


NOT_KERNEL_SOURCES = ("compiled/codegen",)
"""Below :data:`KERNEL_SOURCES`, what no bundled kernel is compiled from: the per-shape
generators and their background compiles (a generated kernel is compiled per machine,
never bundled, and its source names its generator's version:
:func:`cogra.runtime.compiled.codegen.kernel_cache.generator_version`)."""


def kernel_source_files() -> list[Path]:
    runtime = PACKAGE / "runtime"
    files: list[Path] = []
    for name in KERNEL_SOURCES:
        path = runtime / name
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    skipped = [runtime / name for name in NOT_KERNEL_SOURCES]
    return [f for f in files if not any(f.is_relative_to(d) for d in skipped)]


def sources_hash() -> str:
    """A hash of every source the kernels may be compiled from (:data:`KERNEL_SOURCES`):
    numba's own stamp covers a kernel's file only, not the helpers it inlines from others,
    so an edited helper must invalidate the whole bundle."""
    import hashlib

    digest = hashlib.sha256()
    runtime = PACKAGE / "runtime"
    for path in kernel_source_files():
        digest.update(str(path.relative_to(runtime)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.lru_cache(maxsize=None)
def _manifest(root: Path) -> dict:
    try:
        found = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


@functools.lru_cache(maxsize=None)
def _manifest_key(root: Path) -> tuple | None:
    """The machine key (numba's "magic tuple": target triple, CPU name, CPU features) the
    bundle at ``root`` was compiled for, where this process may load it: same numba, same
    interpreter, CPU name ``generic`` (code any CPU of the architecture runs); else None."""
    if os.environ.get(BUNDLE_ENV, "1") == "0":
        return None
    manifest = _manifest(root)
    import numba

    key = tuple(manifest.get("machine") or ())
    if (manifest.get("numba") != numba.__version__ or manifest.get("python") != python_tag()
            or manifest.get("sources") != sources_hash()):
        return None
    return key if len(key) == 3 and key[1] == "generic" else None


def usable(codegen: Any = None) -> bool:
    """Whether this process loads kernels from the bundle: :func:`_manifest_key`, and the
    bundle's target triple is this process's."""
    key = _manifest_key(bundle_root())
    if key is None:
        return False
    if codegen is None:
        from numba.core.registry import cpu_target

        codegen = cpu_target.target_context.codegen()
    return key[0] == codegen.magic_tuple()[0]


def entry_dir(root: Path, source: Path) -> Path | None:
    """The bundle's directory for the kernels of source file ``source``: its directory
    relative to the package (``runtime/compiled/windows`` -> ``root/runtime/compiled/windows``),
    or its own directory for a generated module of the bundle (:data:`GENERATED`); None
    outside the package."""
    parent = Path(source).resolve().parent
    if parent == root.resolve() / GENERATED:
        return parent
    try:
        return root / parent.relative_to(PACKAGE)
    except ValueError:
        return None


def generated_source(key: str, generator: str) -> Path | None:
    """The bundle's generated module of shape ``key`` (:mod:`cogra.runtime.compiled.codegen`),
    where this process loads the bundle (:func:`usable`) and the module was written by
    generator version ``generator`` (the manifest records the version the bundle's modules
    were written by); else None."""
    root = bundle_root()
    if (os.environ.get(BUNDLE_ENV) == GENERIC_ONLY or _manifest(root).get("generator") != generator
            or not usable()):
        return None
    path = root / GENERATED / f"cogra_kernel_{key}.py"
    return path if path.is_file() else None


def generated_has(source: Path, function: str) -> bool:
    """Whether the bundle holds numba entries for ``function`` of the generated module
    ``source`` (a :func:`generated_source`)."""
    return any(source.parent.glob(f"{source.stem}.{function}-*.nbi"))


def numba_runtime(target_context: Any) -> None:
    """Make numba's runtime ready to run loaded kernels: its memory functions linked into
    the process (``rtsys.initialize``; ~30 ms once).  All that loading a kernel needs."""
    from numba.core.runtime import rtsys

    rtsys.initialize(target_context)


class BundledCache(FunctionCache):
    """numba's per-function disk cache, falling back to the bundle on a miss, and loading
    either without refreshing numba's registries.

    numba's own ``load_overload`` first refreshes the target's typing and lowering
    registries -- importing some sixty of numba's modules (linear algebra, random numbers,
    typed containers...) and registering their templates: ~110 ms of a fresh process,
    ~0.3 s where the user's own work holds the interpreter meanwhile.  A cached entry is
    machine code and the descriptors to call it: rebuilding it needs numba's runtime
    (:func:`numba_runtime`), not the registries, and a call of a loaded kernel only types
    its arguments (``typeof``).  A compile still refreshes them first (numba's
    ``CompilerBase``), so nothing compiled ever misses a registration."""

    _bundle: IndexDataCacheFile | None | bool = False  # False: not looked up yet

    def _bundle_file(self, codegen: Any) -> IndexDataCacheFile | None:
        """The bundle's index file for this function, looked up once.  Published in one
        assignment: the warm start (:mod:`cogra.runtime.warm_start`) asks from its own
        thread, outside numba's compiler lock, and a half-set ``None`` seen by a call
        meanwhile read as "not in the bundle" and compiled the kernel."""
        if self._bundle is False:
            found = None
            where = entry_dir(bundle_root(), Path(self._impl.locator._py_file)) if usable(codegen) else None
            if where is not None and (where / f"{self._impl.filename_base}.nbi").exists():
                found = IndexDataCacheFile(cache_path=str(where), filename_base=self._impl.filename_base,
                                           source_stamp=self._impl.locator.get_source_stamp())
            self._bundle = found
        return self._bundle

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        numba_runtime(target_context)
        with self._guard_against_spurious_io_errors():
            found = self._load_overload(sig, target_context)
        if found is not None or not self._enabled:
            return found
        codegen = target_context.codegen()
        bundle = self._bundle_file(codegen)
        if bundle is None:
            return None
        _, _, code = self._index_key(sig, codegen)
        data = bundle.load((sig, _manifest_key(bundle_root()), code))
        if data is None:
            return None
        try:
            found = self._impl.rebuild(target_context, data)
        except Exception:  # noqa: BLE001 - an unreadable entry is a miss: the kernel compiles
            return None
        _FROM_BUNDLE.append(Kernel(self._py_func.__module__, self._py_func.__qualname__, signature_text(sig)))
        return found


class Kernel(NamedTuple):
    """One compiled kernel of the bundle: a function and one signature of it."""

    module: str
    """The function's module: ``cogra.runtime.compiled...``, or ``cogra_kernel_<shape key>``
    for a generated module of the bundle."""
    function: str
    signature: str
    """Its argument types as :func:`signature_text` writes them."""


def signature_text(sig: Any) -> str:
    """A signature's argument types as text (numba's own spelling: the key a recorded
    kernel is found by in the bundle's index)."""
    from numba.core import sigutils

    return str(tuple(sigutils.normalize_signature(sig)[0]))


_FROM_BUNDLE: list[Kernel] = []
"""Every kernel this process loaded from the bundle, in order (:func:`loaded_from_bundle`)."""


def loaded_from_bundle() -> list[Kernel]:
    """The kernels this process loaded from the bundle, in the order it loaded them."""
    return list(_FROM_BUNDLE)


FIRST_USE = "first_use.json"
"""The bundle's record of what common first queries import and load, in the order they do
(:func:`first_use`, written by :func:`cogra.warmup.record_first_use`)."""


FirstUseStep = str | Kernel
"""One step of the first-use record: a module of cogra to import, or a kernel to load."""


def first_use() -> list[FirstUseStep]:
    """What common first calls need beyond ``import cogra``, in the order they first need
    it: the modules of cogra they import (the engine, its executors...) just before the
    kernels that follow them, and the kernels, generic and generated, they load from the
    bundle.  What the warm start makes ready first (:mod:`cogra.runtime.warm_start`).
    Empty where the bundle is not usable or has no record."""
    if not usable():
        return []
    try:
        found = json.loads((bundle_root() / FIRST_USE).read_text())
    except (OSError, ValueError):
        return []
    steps: list[FirstUseStep] = []
    for step in found.get("steps", []):
        if isinstance(step, str) and step.startswith("cogra."):
            steps.append(step)
        elif isinstance(step, list) and len(step) == 3:
            steps.append(Kernel(*step))
    return steps


def preload_kernel(dispatcher: Any, signature: str) -> bool:
    """Load the bundle's ``dispatcher`` kernel of ``signature`` (a :func:`signature_text`)
    unless it is loaded already; whether it was loaded now.  Nothing is compiled: a
    signature the bundle lacks is skipped."""
    cache = getattr(dispatcher, "_cache", None)
    bundle = cache._bundle_file(dispatcher.targetctx.codegen()) if isinstance(cache, BundledCache) else None
    if bundle is None:
        return False
    machine = _manifest_key(bundle_root())
    for sig, entry_machine, _ in bundle._load_index():
        if entry_machine == machine and signature_text(sig) == signature:
            if tuple(sig) in dispatcher.overloads:
                return False
            dispatcher.compile(sig)
            return True
    return False


_DISPATCHERS: list[Any] = []
"""Every dispatcher given the bundle (:func:`use_bundle`), for :func:`preload`."""


def use_bundle(dispatcher: Any) -> Any:
    """Give a ``cache=True`` dispatcher the bundle as its cache's fallback; returns it."""
    cache = getattr(dispatcher, "_cache", None)
    if type(cache) is FunctionCache:
        dispatcher._cache = BundledCache(dispatcher.py_func)
        _DISPATCHERS.append(dispatcher)
    return dispatcher


def bundled_modules() -> list[str]:
    """The modules with kernels in the bundle (``cogra.runtime.compiled...``), sorted;
    empty where this process does not load the bundle (:func:`usable`)."""
    root = bundle_root()
    if not usable():
        return []
    names = {".".join(["cogra", *index.parent.relative_to(root).parts, index.name.split(".", 1)[0]])
             for index in root.rglob("*.nbi") if index.relative_to(root).parts[0] != GENERATED}
    return sorted(names)


def preload_module(module: str, before_each: Callable[[], object] | None = None) -> int:
    """Load the bundle's kernels of ``module`` (imported if need be; every signature the
    bundle holds for its dispatchers, nothing compiled); returns how many were loaded.
    ``before_each`` runs before each kernel's load (the warm start waits there while a
    call runs: one kernel loads in ~10 ms, a module's in up to 0.5 s)."""
    import importlib

    root = bundle_root()
    if not usable():
        return 0
    try:
        importlib.import_module(module)
    except ImportError:
        return 0
    loaded = 0
    for dispatcher in list(_DISPATCHERS):
        if dispatcher.py_func.__module__ != module:
            continue
        cache = dispatcher._cache
        bundle = cache._bundle_file(dispatcher.targetctx.codegen()) if isinstance(cache, BundledCache) else None
        if bundle is None:
            continue
        for sig, machine, _ in bundle._load_index():
            if machine == _manifest_key(root) and sig not in dispatcher.overloads:
                if before_each is not None:
                    before_each()
                dispatcher.compile(sig)
                loaded += 1
    return loaded


def preload() -> int:
    """Load every kernel of the bundle into this process (:func:`preload_module` of each of
    :func:`bundled_modules`); returns how many were loaded.  A Spark executor's Python
    daemon does this before forking workers (:mod:`cogra.spark.daemon`), so that no
    query's first task pays for it."""
    return sum(preload_module(module) for module in bundled_modules())


__all__ = ["BUNDLE_ENV", "FIRST_USE", "FirstUseStep", "GENERATED", "GENERIC_ONLY", "MANIFEST", "BundledCache", "Kernel", "bundle_root",
           "bundled_modules", "entry_dir", "first_use", "generated_has", "generated_source", "loaded_from_bundle",
           "numba_runtime", "preload", "preload_kernel", "preload_module", "python_tag", "signature_text",
           "sources_hash", "usable", "use_bundle"]
