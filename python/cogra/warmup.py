"""``cogra warm``: compile the generic kernels ahead of the first query, so that no user
query pays for them -- into numba's disk cache for this CPU, or (``--bundle``) into the
bundle that ships with cogra (:mod:`cogra.runtime.kernel_bundle`).

A cold numba cache costs the first query of each executor tens of seconds (a fresh
process, 20k events: q1 20 s, q2 4.6 s, q3 33 s, of which q3's mixed-grained ring kernel
alone is 26 s); with the cache warm the same fresh process answers each in under 0.6 s.
The generic kernels' compiled code depends on the query's executor and window kind, not
on the query, so a handful of queries -- the report's q1-q3 at the demo's 20k events
(some kernels are chosen by input size), a sliding and a streamed one -- compile what
every query meets.  The per-shape generated kernels (:mod:`cogra.runtime.compiled.codegen`,
3-5x faster than the generic ones) depend on the query's shape: the bundle carries those
of the common shapes (:func:`common_shapes`, :func:`common_examples`); any other shape's
compile when a query first needs one (in the background for small inputs and Spark's
chunks).  The cases run in separate processes, ``jobs`` at once (the compiles are
single-threaded).  ``scripts/setup.sh`` runs it after installing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
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


def _examples(events: int) -> None:
    """The report's q1-q3, each over ``events`` of its data set."""
    from cogra.examples import EXAMPLES

    for example in EXAMPLES:
        _evaluate(example.query, example.data(events, seed=1))


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
def large() -> None:
    """q1-q3 over 1M events: some kernels take other argument types at that size."""
    _examples(1_000_000)


def _shapes_table(timestamps: bool):
    """Events of types A, B, C with integer and float attributes, a group and a key."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(1)
    n = 600
    times = np.cumsum(rng.integers(1, 400, n))  # ms
    time = (pa.array(times * 1000, pa.timestamp("us")) if timestamps else pa.array(times // 1000, pa.int64()))
    return pa.table({"type": pa.array(rng.choice(["A", "B", "C"], n)), "time": time,
                     "v": pa.array(rng.integers(0, 100, n)), "f": pa.array(rng.random(n)),
                     "g": pa.array(rng.choice(["x", "y"], n)), "k": pa.array(rng.integers(0, 3, n))})


def _shapes(semantics: tuple[str, ...]) -> None:
    """Query shapes beyond q1-q3: each semantics over single, sequenced and nested Kleene
    patterns, with and without variable keys and adjacent predicates, over one window,
    tumbling and sliding windows, integer and timestamp times."""
    import pyarrow as pa

    patterns = ["A+", "SEQ(A+, B)", "(SEQ(A+, B))+", "SEQ(A, B+, C?)", "SEQ(A+, B*)"]
    windows = ["", " WITHIN 10 seconds", " WITHIN 10 seconds SLIDE 2 seconds"]
    wheres = ["", " WHERE [A.k]", " WHERE A.v < NEXT(A).v"]
    for timestamps in (False, True):
        table = _shapes_table(timestamps)
        for sem in semantics:
            for pattern in patterns:
                for where in (w for w in wheres if "NEXT(A)" not in w or "A+" in pattern):
                    for window in windows:
                        _evaluate(f"RETURN g, COUNT(*), COUNT(A), SUM(A.v), SUM(A.f), MIN(A.v), MAX(A.f), AVG(A.v) "
                                  f"PATTERN {pattern} SEMANTICS {sem}{where} GROUP-BY g{window}", table)
            # Without keys (the table is one sub-stream), and with type names too long to
            # compare as one word.
            _evaluate(f"RETURN COUNT(*), AVG(A.v) PATTERN SEQ(A+, B) SEMANTICS {sem}", table)
            long_names = table.set_column(0, "type", pa.array([f"{t}TypeOfManyBytes" for t in
                                                             table.column("type").to_pylist()]))
            _evaluate(f"RETURN COUNT(*) PATTERN SEQ(ATypeOfManyBytes A+, BTypeOfManyBytes B) SEMANTICS {sem}",
                      long_names)
            # A dictionary type column of more types than int8 codes hold (int64 codes).
            names = ["A", "B", "C"] + [f"T{k}" for k in range(130)]
            index = {n: i for i, n in enumerate(names)}
            wide = table.set_column(0, "type", pa.DictionaryArray.from_arrays(
                pa.array([index[t] for t in table.column("type").to_pylist()], pa.int32()), pa.array(names)))
            _evaluate(f"RETURN COUNT(*), AVG(A.v) PATTERN SEQ(A+, B) SEMANTICS {sem}", wide)
            _evaluate(f"RETURN g, COUNT(*), MAX(A.f) PATTERN SEQ(A+, B) SEMANTICS {sem} WHERE [A.k] GROUP-BY g "
                      "WITHIN 10 seconds", wide)


@case
def shapes_any() -> None:
    _shapes(("any",))


@case
def shapes_next_cont() -> None:
    _shapes(("next", "cont"))


@case
def type_grained() -> None:
    from cogra import datasets

    table = datasets.stock(3000, seed=1)
    for window in ("WITHIN 10 minutes", "WITHIN 10 minutes SLIDE 10 seconds"):
        _evaluate("RETURN sector, COUNT(*), SUM(A.volume), AVG(A.price), MIN(A.price), MAX(B.price) "
                  "PATTERN SEQ(Stock A+, Stock B) WHERE [company] GROUP-BY sector " + window, table)


@case
def absence() -> None:
    """Negation at the pattern's edge (docs/language.md, Absence at the edge of a pattern): leading, trailing and
    both, per semantics, over one window, tumbling and sliding windows, with and without
    keys, integer and timestamp times."""
    windows = ["", " WITHIN 10 seconds", " WITHIN 10 seconds SLIDE 2 seconds"]
    patterns = ["SEQ(A+, B, NOT C)", "SEQ(NOT C, A+, B)", "SEQ(NOT C, A, B+, NOT C C2)"]
    for timestamps in (False, True):
        table = _shapes_table(timestamps)
        for sem in ("any", "next", "cont"):
            for pattern in patterns:
                for window in windows:
                    for keys in ("", " GROUP-BY g"):
                        items = "g, " if keys else ""
                        _evaluate(f"RETURN {items}COUNT(*), SUM(A.v), MIN(A.f), AVG(B.v) PATTERN {pattern} "
                                  f"SEMANTICS {sem}{keys}{window}", table)


@case
def column_types() -> None:
    """``SEQ(A+, B)`` per semantics and aggregate set over each Arrow type a type column
    arrives in (string, large_string -- Spark's Arrow batches --, dictionary -- Parquet
    readers'), integer and float attributes, at a size below and one above the sizes that
    pick other argument types (read-only arrays of a zero-copy column, wider codes); and
    q1-q3 read back from Parquet (dictionary columns)."""
    import tempfile

    import pyarrow.parquet as pq

    from cogra.bench.first_run import AGGREGATES, SEMANTICS, TYPE_COLUMNS, grid_data, grid_query
    from cogra.examples import EXAMPLES

    for events in (2_000, 300_000):
        for kind in TYPE_COLUMNS:
            table = grid_data({"type": kind, "events": events})
            integer = table.set_column(2, "v", table.column("v").cast("int64"))
            for semantics in SEMANTICS:
                for aggregates in AGGREGATES:
                    query = grid_query({"semantics": semantics, "aggregates": aggregates})
                    for data in (table, integer):
                        _evaluate(query, data, type_column="type")
    with tempfile.TemporaryDirectory(prefix="cogra-warm-") as scratch:
        for example in EXAMPLES:
            path = Path(scratch) / f"{example.name}.parquet"
            pq.write_table(example.data(20_000, seed=1), path)
            _evaluate(example.query, pq.read_table(path))


COMMON_PATTERNS = ("A+", "SEQ(A+, B)", "SEQ(A, B+)")
COMMON_AGGREGATES = ("COUNT(*)", "COUNT(*), MIN(A.v), MAX(A.v)", "COUNT(*), SUM(A.v), AVG(B.v)",
                     "COUNT(*), SUM(A.v), MIN(A.v), MAX(A.v), AVG(B.v)")
"""The common shapes whose generated kernels ship in the bundle (:func:`common_shapes`):
each of these patterns under each semantics, with each of these aggregate lists (``B.v``
reads as ``A.v`` where the pattern has no ``B``), over a floating attribute."""


def common_query(aggregates: str, pattern: str, semantics: str) -> str:
    """A common shape's query (``B.v`` read as ``A.v`` where the pattern has no ``B``)."""
    if "B" not in pattern:
        aggregates = aggregates.replace("B.v", "A.v")
    return f"RETURN {aggregates} PATTERN {pattern} SEMANTICS {semantics}"


def _common_table(events: int, signed: bool, kind: str = "string"):
    """``events`` events at distinct times, nine in ten of type ``A``, the rest ``B``: a type
    column of Arrow type ``kind`` (``string``, ``large_string`` or ``dictionary``)."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(1)
    v = rng.integers(1, 100, events).astype(np.float64) * (rng.choice([-1.0, 1.0], events) if signed else 1.0)
    types = pa.array(np.where(rng.random(events) < 0.9, "A", "B"),
                     pa.large_string() if kind == "large_string" else pa.string())
    return pa.table({"type": types.dictionary_encode() if kind == "dictionary" else types,
                     "time": np.arange(events, dtype=np.int64), "v": v})


def _generated_in_the_foreground() -> None:
    """Run the generated kernels of every call from here on, compiled in the foreground as
    for a call large enough to repay them (the bundle's settings turn them off)."""
    from cogra.runtime.compiled import kernel_driver
    from cogra.runtime.compiled.finish import by_column
    from cogra.runtime.compiled.windows import sliding

    os.environ["COGRA_GENERATED_KERNELS"] = "1"
    kernel_driver.SPECIALIZE_MIN_EVENTS = sliding.SPECIALIZE_MIN_EVENTS = by_column.SPECIALIZE_MIN_KEYS = 0


@case
def common_shapes() -> None:
    """The generated kernels of :data:`COMMON_PATTERNS` x semantics x
    :data:`COMMON_AGGREGATES` (values never negative, and signed: sums of signed values
    carry one more channel).  ``cogra warm --bundle`` ships them
    (:mod:`cogra.runtime.kernel_bundle`), so that a fresh process runs these shapes' first
    calls on them; other shapes start on the generic kernels."""
    from cogra.runtime.compiled.windows import chunked

    _generated_in_the_foreground()
    limits = chunked.CHUNK_ROWS, chunked.MIN_ROWS
    # In one pass (the window kernel), and in chunks (the kernel that continues a window:
    # what a table of millions of rows runs), lowered here to the small tables' sizes.
    for chunk_rows, min_rows in (limits, (700, 1_400)):
        chunked.CHUNK_ROWS, chunked.MIN_ROWS = chunk_rows, min_rows
        for signed in (False, True):
            table = _common_table(2_000, signed)
            for pattern in COMMON_PATTERNS:
                for semantics in ("any", "next", "contiguous"):
                    for aggregates in COMMON_AGGREGATES:
                        if signed and "SUM" not in aggregates:
                            continue
                        _evaluate(common_query(aggregates, pattern, semantics), table, type_column="type")
    chunked.CHUNK_ROWS, chunked.MIN_ROWS = limits


@case
def common_examples() -> None:
    """The generated kernels of q1-q3, over 20k and 1M events (some routes are chosen by
    size), for the bundle as :func:`common_shapes`."""
    _generated_in_the_foreground()
    _examples(20_000)
    _examples(1_000_000)


TYPE_COLUMN_TYPES = ("dictionary", "string", "large_string")
"""The Arrow types of a type column a first call meets: Parquet readers hand over
dictionaries, tables built in Python strings (each takes its own type-code kernel)."""


def first_calls() -> None:
    """The first calls a user is likely to make, the cheapest first: :data:`COMMON_PATTERNS`
    x semantics with each of :data:`COMMON_AGGREGATES` over each of
    :data:`TYPE_COLUMN_TYPES`, over 2M events (run in chunks) and 20k (in one pass), then
    q1-q3 over 1M and 20k.  :func:`record_first_use` runs them in a fresh process on the
    bundle and records the kernels they load, in order: what the warm start loads first."""
    for events in (2_000_000, 20_000):
        tables = {kind: _common_table(events, False, kind) for kind in TYPE_COLUMN_TYPES}
        for aggregates in COMMON_AGGREGATES:
            for pattern in COMMON_PATTERNS:
                for semantics in ("any", "next", "contiguous"):
                    query = common_query(aggregates, pattern, semantics)
                    for kind in TYPE_COLUMN_TYPES:
                        _evaluate(query, tables[kind], type_column="type")
    _examples(1_000_000)
    _examples(20_000)


def record_first_use(*, out=sys.stderr) -> int:
    """Run :func:`first_calls` in a fresh process on the package's bundle (empty caches, no
    warm start, nothing compiled in the background) and write the modules of cogra it
    imported and the kernels it loaded, in the order it did, as the bundle's first-use
    record (:data:`kernel_bundle.FIRST_USE`); returns how many kernels."""
    import json
    import tempfile

    from cogra.runtime import kernel_bundle

    with tempfile.TemporaryDirectory(prefix="cogra-first-use-") as scratch:
        env = {**os.environ, "NUMBA_CACHE_DIR": str(Path(scratch) / "numba"), "COGRA_CACHE": str(Path(scratch) / "cogra"),
               "COGRA_WARM_START": "0", "COGRA_BACKGROUND_COMPILE": "0"}
        for name in ("COGRA_KERNEL_BUNDLE", "COGRA_GENERATED_KERNELS", "NUMBA_CPU_NAME"):
            env.pop(name, None)
        done = subprocess.run([sys.executable, "-m", "cogra.warmup", FIRST_USE_CHILD], env=env,
                              capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"cogra warm: recording the first calls' kernels failed:\n{done.stderr[-3000:]}")
    record = json.loads(done.stdout.strip().splitlines()[-1])
    (kernel_bundle.bundle_root() / kernel_bundle.FIRST_USE).write_text(json.dumps(record, indent=0))
    kernels = sum(1 for step in record["steps"] if not isinstance(step, str))
    print(f"cogra warm: first-use record of {len(record['steps']) - kernels} modules and {kernels} kernels", file=out)
    return kernels


FIRST_USE_CHILD = "--first-use"
"""``python -m cogra.warmup --first-use``: :func:`first_calls`, then the modules they
imported and the kernels they loaded from the bundle as JSON (the child
:func:`record_first_use` runs)."""


def _first_use_child() -> None:
    import json

    from cogra.runtime import kernel_bundle

    if not kernel_bundle.usable():
        raise SystemExit("the package's kernel bundle does not fit this process")
    import cogra.examples  # noqa: F401 - the workload's own data, not what a call imports

    # Each kernel is recorded after the modules of cogra imported since the one before.
    steps: list = []
    seen = set(sys.modules)
    load = kernel_bundle.BundledCache.load_overload

    def recording(cache, sig, target_context):
        new = [name for name in sys.modules if name not in seen]
        seen.update(new)
        steps.extend(name for name in new if name.startswith("cogra."))
        before = len(kernel_bundle.loaded_from_bundle())
        found = load(cache, sig, target_context)
        steps.extend(list(k) for k in kernel_bundle.loaded_from_bundle()[before:])
        return found

    kernel_bundle.BundledCache.load_overload = recording
    first_calls()
    steps.extend(name for name in sys.modules if name not in seen and name.startswith("cogra."))
    print(json.dumps({"steps": steps}))


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


def run(jobs: int | None = None, *, out=sys.stderr, env: dict[str, str] | None = None) -> int:
    """Run every case in a process of its own (environment ``env``), ``jobs`` at once
    (default: the cores); returns how many failed (each failure printed)."""
    jobs = jobs or os.cpu_count() or 1
    started = time.perf_counter()
    pending = list(CASES)
    running: dict[str, tuple[subprocess.Popen, float]] = {}
    failed = 0
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            running[name] = (subprocess.Popen([sys.executable, "-m", "cogra.warmup", name], env=env,
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


def exercise(events: int = 300) -> None:
    """q1-q3 over a few events in this process: what a process's first query pays beyond
    loading kernels (lazy imports, first-use initialisation in numpy, pyarrow and the
    parser) is paid here.  A Spark executor's Python daemon runs it before forking
    workers (:mod:`cogra.spark.daemon`)."""
    _examples(events)


BUNDLE_SETTINGS = {
    "NUMBA_CPU_NAME": "generic",  # code every CPU of the architecture runs
    "COGRA_KERNEL_BUNDLE": "0",  # compile, rather than load an older bundle
    "COGRA_GENERATED_KERNELS": "0",  # the generic kernels, but in common_shapes: other shapes' stay per machine
    "COGRA_BACKGROUND_COMPILE": "0",
}


def bundle(target: Path | None = None, jobs: int | None = None, *, out=sys.stderr) -> int:
    """Compile the cases' generic kernels for the architecture's baseline CPU into a fresh
    numba cache and lay its entries out as the bundle at ``target`` (default: the package's
    ``_kernels``), replacing what was there; returns how many cases failed (no bundle is
    written then)."""
    import json
    import shutil
    import tempfile

    import numba
    from numba.core.caching import UserProvidedCacheLocator

    from cogra.runtime import kernel_bundle

    target = Path(target or kernel_bundle.bundle_root())
    sources = kernel_bundle.sources_hash()  # before compiling: what the cases compile from
    with tempfile.TemporaryDirectory(prefix="cogra-bundle-") as staging:
        cache = Path(staging) / "numba"
        env = {**os.environ, **BUNDLE_SETTINGS, "NUMBA_CACHE_DIR": str(cache),
               "COGRA_CACHE": str(Path(staging) / "cogra")}
        failed = run(jobs, out=out, env=env)
        if failed:
            return failed
        machine = json.loads(subprocess.run(
            [sys.executable, "-c", "import json; from numba.core.registry import cpu_target as t; "
             "print(json.dumps(t.target_context.codegen().magic_tuple()))"],
            env=env, check=True, capture_output=True, text=True).stdout)
        # numba names a source directory's cache "<dir>_<sha1 of its path>": map it back.
        package = kernel_bundle.PACKAGE
        names = {UserProvidedCacheLocator.get_suitable_cache_subpath(str(d / "x.py")): d.relative_to(package)
                 for d in [package, *(p for p in package.rglob("*") if p.is_dir())]}
        fresh = target.with_name(target.name + ".new")
        shutil.rmtree(fresh, ignore_errors=True)
        entries = 0
        for directory in sorted(p for p in cache.iterdir() if p.is_dir()):
            if directory.name not in names:
                continue  # not the package's (the generated kernels', below)
            shutil.copytree(directory, fresh / names[directory.name], dirs_exist_ok=True)
            entries += sum(1 for _ in directory.glob("*.nbc"))
        generated = _bundle_generated(Path(staging) / "cogra" / "kernels", cache, fresh / kernel_bundle.GENERATED)
        fresh.mkdir(parents=True, exist_ok=True)
        from cogra.runtime.compiled.codegen.kernel_cache import generator_version

        (fresh / kernel_bundle.MANIFEST).write_text(json.dumps({
            "numba": numba.__version__, "python": kernel_bundle.python_tag(), "sources": sources,
            "generator": generator_version(), "machine": machine, "entries": entries,
            "generated": generated}, indent=1))
        shutil.rmtree(target, ignore_errors=True)
        fresh.rename(target)
    if target.resolve() == kernel_bundle.bundle_root().resolve():
        record_first_use(out=out)
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(f"cogra warm: bundle of {entries} kernels and {generated} generated ones ({size / 2**20:.1f} MiB) "
          f"in {target}", file=out)
    return 0


def _bundle_generated(sources: Path, cache: Path, target: Path) -> int:
    """Copy the generated modules under ``sources`` that numba compiled something of into
    ``cache`` -- each module's source and its entries, side by side -- to ``target``;
    returns how many entries.  (A module the cases wrote but compiled nothing of, say a
    shape seen below the sizes that repay it, stays out.)  Each source also gets its
    bytecode, checked by the source's hash rather than its time (which an install
    changes): compiling a module's source took 12-16 ms of a first call that loads it."""
    import importlib.util
    import py_compile
    import shutil

    from numba.core.caching import UserProvidedCacheLocator

    compiled = cache / UserProvidedCacheLocator.get_suitable_cache_subpath(str(sources / "x.py"))
    entries = 0
    for source in sorted(sources.glob("cogra_kernel_*.py")):
        found = sorted(compiled.glob(f"{source.stem}.*")) if compiled.is_dir() else []
        if not any(f.suffix == ".nbc" for f in found):
            continue
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / source.name)
        py_compile.compile(str(target / source.name), cfile=importlib.util.cache_from_source(str(target / source.name)),
                           doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        for f in found:
            shutil.copy2(f, target / f.name)
        entries += sum(1 for f in found if f.suffix == ".nbc")
    return entries


if __name__ == "__main__":  # python -m cogra.warmup CASE (one case, in this process)
    _first_use_child() if sys.argv[1] == FIRST_USE_CHILD else CASES[sys.argv[1]]()
