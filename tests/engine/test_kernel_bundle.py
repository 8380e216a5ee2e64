"""The kernels compiled ahead of time (cogra.runtime.kernel_bundle): a fresh process with
empty caches loads them instead of compiling, and a bundle that does not fit this
process is never read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cogra.runtime import kernel_bundle

REPO = Path(__file__).resolve().parents[2]

COUNT_COMPILES = r"""
import sys, json
import cogra
from cogra.examples import EXAMPLES
from numba.core.dispatcher import Dispatcher

for example in EXAMPLES:
    cogra.evaluate(example.query, example.data(20_000, seed=1), on_overflow="null")
if sys.argv[1:] == ["grid"]:
    # SEQ(A+, B) per semantics and aggregate set over each type column's Arrow type, and
    # q1-q3 read back from Parquet (dictionary columns).
    import tempfile
    import pyarrow.parquet as pq
    from cogra.bench.first_run import AGGREGATES, SEMANTICS, TYPE_COLUMNS, grid_data, grid_query
    from cogra.runtime.compiled.windows import chunked
    # (the 300k-event calls in chunks, as the first-run benchmark's millions of rows run)
    chunked.CHUNK_ROWS, chunked.MIN_ROWS = 100_000, 200_000
    for events in (2_000, 300_000):
        for kind in TYPE_COLUMNS:
            table = grid_data({"type": kind, "events": events})
            for semantics in SEMANTICS:
                for aggregates in AGGREGATES if events < 100_000 else ("COUNT", "all five"):
                    query = grid_query({"semantics": semantics, "aggregates": aggregates})
                    cogra.evaluate(query, table, type_column="type", on_overflow="null")
    # A dictionary of more types than int8 codes hold (int64 codes).
    import pyarrow as pa
    small = grid_data({"type": "dictionary", "events": 300_000})
    names = ["A", "B"] + [f"T{k}" for k in range(130)]
    column = small.column("type").combine_chunks()
    wide = small.set_column(0, "type", pa.DictionaryArray.from_arrays(
        column.indices, pa.array(names[:len(column.dictionary)] + names[len(column.dictionary):])))
    for semantics in SEMANTICS:
        cogra.evaluate(grid_query({"semantics": semantics, "aggregates": "all five"}), wide, type_column="type",
                       on_overflow="null")
    with tempfile.TemporaryDirectory() as scratch:
        for example in EXAMPLES:
            pq.write_table(example.data(20_000, seed=1), scratch + "/t.parquet")
            cogra.evaluate(example.query, pq.read_table(scratch + "/t.parquet"), on_overflow="null")
hits = misses = 0
compiled = []
generated = {"hits": 0, "misses": 0, "modules": []}  # the generated kernels (cogra_kernel_<shape>)
for module in list(sys.modules.values()):
    name = getattr(module, "__name__", "")
    if name.startswith("cogra_kernel_"):
        generated["modules"].append(module.__file__)
        for value in vars(module).values():
            if isinstance(value, Dispatcher):
                generated["hits"] += sum(value.stats.cache_hits.values())
                generated["misses"] += sum(value.stats.cache_misses.values())
    if not name.startswith("cogra.runtime"):
        continue
    for value in vars(module).values():
        if isinstance(value, Dispatcher) and value.__module__ == module.__name__:
            stats = value.stats
            hits += sum(stats.cache_hits.values())
            misses += sum(stats.cache_misses.values())
            compiled += [value.__qualname__] * sum(stats.cache_misses.values())
print(json.dumps({"hits": hits, "misses": misses, "compiled": compiled, "generated": generated}))
"""


def _fresh(tmp_path: Path, *args: str, **env: str) -> dict:
    """Run q1-q3 at 20k events (and, with ``grid``, the first-run benchmark's cases) in a
    fresh process whose caches are empty."""
    settings = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "COGRA_CACHE": str(tmp_path / "cogra"),
                "COGRA_BACKGROUND_COMPILE": "0", **env}
    done = subprocess.run([sys.executable, "-c", COUNT_COMPILES, *args], env=settings, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_fresh_process_with_empty_caches_compiles_no_generic_kernel(tmp_path: Path) -> None:
    if not (kernel_bundle.bundle_root() / kernel_bundle.MANIFEST).exists():
        pytest.skip("no kernel bundle in this checkout: `make setup` (or `cogra warm --bundle`) builds it")
    assert kernel_bundle.usable(), "the checkout's bundle does not fit this process: run `cogra warm --bundle`"
    counts = _fresh(tmp_path, "grid")
    assert counts["hits"] > 10 and counts["misses"] == 0, counts["compiled"]
    assert not list((tmp_path / "numba").rglob("*.nbc"))  # nothing was compiled into numba's own cache
    # The grid's shapes and q1-q3 are common shapes (cogra.warmup.common_shapes): their
    # calls ran generated kernels (in one pass and in chunks), every one loaded from the
    # bundle, none written.
    generated = counts["generated"]
    assert generated["modules"] and generated["hits"] >= len(generated["modules"]) and generated["misses"] == 0
    assert all(Path(m).parent == kernel_bundle.bundle_root() / kernel_bundle.GENERATED for m in generated["modules"])
    assert not list((tmp_path / "cogra").rglob("cogra_kernel_*.py"))


WARM_START = r"""
import json, sys, time
import cogra
from cogra.runtime import kernel_bundle, warm_start
assert warm_start.wait(300)
lazy = "numpy.ma" in sys.modules  # (numba's typeof of an ndarray imports it: the warm start does)
from cogra.bench.first_run import grid_data, grid_query
loaded = {(d.py_func.__module__, d.py_func.__name__, sig) for d in kernel_bundle._DISPATCHERS for sig in d.overloads}
for kind in ("dictionary", "string"):
    table = grid_data({"type": kind, "events": 20_000})
    for semantics in ("any", "next", "contiguous"):
        cogra.evaluate(grid_query({"semantics": semantics, "aggregates": "all five"}), table, type_column="type",
                       on_overflow="null")
after = {(d.py_func.__module__, d.py_func.__name__, sig) for d in kernel_bundle._DISPATCHERS for sig in d.overloads}
print(json.dumps({"steps": warm_start.steps(), "loaded": len(loaded), "lazy_imports_done": lazy,
                  "by_the_call": sorted(f"{m}.{f}" for m, f, _ in after - loaded)}))
"""


def test_import_loads_the_bundle_in_the_background_so_a_first_call_loads_nothing(tmp_path: Path) -> None:
    """``import cogra`` starts the warm start (numba's runtime, the bundle's first-use
    record in its order, then the modules every call runs, then the rest): once it is done,
    a first call of a common shape loads nothing itself, its generated kernel included;
    with ``COGRA_WARM_START=0`` nothing is loaded ahead."""
    from cogra.runtime import warm_start

    if not kernel_bundle.usable():
        pytest.skip("no kernel bundle fits this checkout: `make setup` builds it")
    settings = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "COGRA_CACHE": str(tmp_path / "cogra"),
                "COGRA_BACKGROUND_COMPILE": "0"}
    settings.pop(warm_start.WARM_START_ENV, None)
    done = subprocess.run([sys.executable, "-c", WARM_START], env=settings, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    warm = json.loads(done.stdout.strip().splitlines()[-1])
    first_use = []
    for step in kernel_bundle.first_use():
        if isinstance(step, str):
            first_use.append(f"import {step}")
            continue
        if step.module.startswith("cogra_kernel_") and f"import {step.module}" not in first_use:
            first_use.append(f"import {step.module}")  # (a generated module's import: a step of its own)
        first_use.append(f"{step.module}.{step.function}")
    steps = warm["steps"]
    assert steps[0] == warm_start.RUNTIME and steps[1:1 + len(first_use)] == first_use, steps
    assert steps[1 + len(first_use):1 + len(first_use) + len(warm_start.FIRST)] == list(warm_start.FIRST), steps
    assert warm["loaded"] > 30 and warm["lazy_imports_done"], warm
    assert warm["by_the_call"] == [], warm["by_the_call"]
    settings[warm_start.WARM_START_ENV] = "0"
    done = subprocess.run([sys.executable, "-c", WARM_START], env=settings, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    cold = json.loads(done.stdout.strip().splitlines()[-1])
    assert cold["steps"] == [] and cold["loaded"] == 0 and cold["by_the_call"] and not cold["lazy_imports_done"], cold
    assert any(name.startswith("cogra_kernel_") for name in cold["by_the_call"]), cold["by_the_call"]


def test_the_first_use_record_names_kernels_the_bundle_holds() -> None:
    """The record the warm start follows (written when the bundle is built, by running the
    common first calls on it): the modules they import, each before the first kernel
    after it, common shapes' generated kernels, in one pass and in chunks, and the type
    codes of each Arrow type of a type column -- each kernel one the bundle holds."""
    if not kernel_bundle.usable():
        pytest.skip("no kernel bundle fits this checkout: `make setup` builds it")
    steps = kernel_bundle.first_use()
    record = [step for step in steps if isinstance(step, kernel_bundle.Kernel)]
    assert record, "the bundle has no first-use record: `cogra warm --bundle` writes it"
    # A module comes before the first kernel that needs it: the engine before any kernel,
    # each kernel's own module before it.
    modules = [step for step in steps if isinstance(step, str)]
    assert "cogra.runtime.engine" in modules and steps.index("cogra.runtime.engine") < steps.index(record[0])
    for kernel in record:
        if kernel.module in modules:
            assert steps.index(kernel.module) < steps.index(kernel), kernel
    assert len(set(record)) == len(record)
    functions = {(k.module.split(".")[-1], k.function) for k in record}
    assert {("event_types", "_one_byte_codes"), ("substream_split", "_whole_table_rows")} <= functions
    generated = [k for k in record if k.module.startswith("cogra_kernel_")]
    assert {k.function for k in generated} >= {"kernel", "kernel_continue"}
    for k in record:
        assert k.signature in _bundled_signatures(k), k


def _bundled_signatures(kernel: kernel_bundle.Kernel) -> set[str]:
    """The signatures the bundle's index files hold for ``kernel``'s function (read from the
    files: a test process may have imported a generated module from elsewhere)."""
    import importlib
    import pickle

    if kernel.module.startswith("cogra_kernel_"):
        where, stem = kernel_bundle.bundle_root() / kernel_bundle.GENERATED, kernel.module
    else:
        source = Path(importlib.import_module(kernel.module).__file__)
        where, stem = kernel_bundle.entry_dir(kernel_bundle.bundle_root(), source), source.stem
    found = set()
    for index in where.glob(f"{stem}.{kernel.function}-*.nbi"):
        with open(index, "rb") as f:
            pickle.load(f)  # numba's version
            _, overloads = pickle.loads(f.read())
        found |= {kernel_bundle.signature_text(sig) for sig, _, _ in overloads}
    return found


LOADS_WITHOUT_REFRESH = r"""
import json, sys
import numpy as np
import cogra
from cogra.bench.first_run import grid_data, grid_query
from cogra.runtime import kernel_bundle
table = grid_data({"type": "string", "events": 20_000})
got = cogra.evaluate(grid_query({"semantics": "any", "aggregates": "all five"}), table, type_column="type",
                     on_overflow="null").to_pylist()
from numba.core.imputils import builtin_registry
from numba.core.registry import cpu_target
refreshed = builtin_registry in cpu_target.target_context._registries  # (installed by numba's refresh)
loaded = [list(k) for k in kernel_bundle.loaded_from_bundle()]
# A compile afterwards refreshes the registries itself: np.median's typing and lowering
# are among those the loads skipped.
from numba import njit
median = njit(lambda a: np.median(a))(np.array([3.0, 1.0, 2.0]))
print(json.dumps({"got": got, "refreshed": refreshed, "loaded": loaded, "median": median}))
"""


def test_kernels_load_without_numba_refreshing_its_registries(tmp_path: Path) -> None:
    """Loading a kernel (from the bundle, or numba's own cache) initialises numba's runtime
    only, not its typing and lowering registries (~110 ms of a first call): the kernels run
    and give the answer the Python executors give, and a compile in the same process still
    finds every registration."""
    if not kernel_bundle.usable():
        pytest.skip("no kernel bundle fits this checkout: `make setup` builds it")
    import cogra
    from cogra.bench.first_run import grid_data, grid_query

    settings = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "COGRA_CACHE": str(tmp_path / "cogra"),
                "COGRA_BACKGROUND_COMPILE": "0", "COGRA_WARM_START": "0"}
    done = subprocess.run([sys.executable, "-c", LOADS_WITHOUT_REFRESH], env=settings, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    fresh = json.loads(done.stdout.strip().splitlines()[-1])
    assert not fresh["refreshed"] and fresh["median"] == 2.0
    loaded = {(m.split(".")[-1], f) for m, f, _ in fresh["loaded"]}
    assert ("event_types", "_one_byte_codes") in loaded and any(m.startswith("cogra_kernel_") for m, _, _ in fresh["loaded"])
    table = grid_data({"type": "string", "events": 20_000})
    expected = cogra.evaluate(grid_query({"semantics": "any", "aggregates": "all five"}), table, type_column="type",
                              on_overflow="null", compiled=False).to_pylist()
    assert len(fresh["got"]) == len(expected) == 1
    for key, value in expected[0].items():
        assert fresh["got"][0][key] == (value if value is None else pytest.approx(value, rel=1e-12)), key
    assert any(value is not None for value in expected[0].values())


def _bundle(root: Path, **manifest: object) -> Path:
    import numba

    root.mkdir(parents=True)
    (root / kernel_bundle.MANIFEST).write_text(json.dumps(
        {"numba": numba.__version__, "python": kernel_bundle.python_tag(), "sources": kernel_bundle.sources_hash(),
         "machine": ["x86_64-unknown-linux-gnu", "generic", ""], **manifest}))
    return root


def test_a_bundle_is_read_only_where_numba_python_and_cpu_fit(tmp_path: Path, monkeypatch) -> None:
    kernel_bundle._manifest_key.cache_clear()
    monkeypatch.setattr(kernel_bundle, "_manifest_key", kernel_bundle._manifest_key.__wrapped__)
    fits = _bundle(tmp_path / "fits")
    assert kernel_bundle._manifest_key(fits) == ("x86_64-unknown-linux-gnu", "generic", "")
    assert kernel_bundle._manifest_key(_bundle(tmp_path / "numba", numba="0.1.0")) is None
    assert kernel_bundle._manifest_key(_bundle(tmp_path / "python", python="cpython27")) is None
    # Compiled from other sources: a kernel may inline a helper edited since.
    assert kernel_bundle._manifest_key(_bundle(tmp_path / "sources", sources="0" * 64)) is None
    # Code tuned to a CPU may use instructions another machine lacks: only "generic" is read.
    tuned = _bundle(tmp_path / "tuned", machine=["x86_64-unknown-linux-gnu", "znver5", "+avx512f"])
    assert kernel_bundle._manifest_key(tuned) is None
    assert kernel_bundle._manifest_key(tmp_path / "missing") is None
    (tmp_path / "garbled").mkdir()
    (tmp_path / "garbled" / kernel_bundle.MANIFEST).write_text("{not json")
    assert kernel_bundle._manifest_key(tmp_path / "garbled") is None
    monkeypatch.setenv(kernel_bundle.BUNDLE_ENV, "0")
    assert kernel_bundle._manifest_key(fits) is None


def test_entries_are_laid_out_by_the_source_directory_in_the_package(tmp_path: Path) -> None:
    from cogra.runtime.compiled.windows import mixed_one_pass

    assert kernel_bundle.entry_dir(tmp_path, Path(mixed_one_pass.__file__)) == tmp_path / "runtime" / "compiled" / "windows"
    assert kernel_bundle.entry_dir(tmp_path, tmp_path / "elsewhere.py") is None
    # A generated module of the bundle has its entries beside it.
    generated = tmp_path / kernel_bundle.GENERATED
    assert kernel_bundle.entry_dir(tmp_path, generated / "cogra_kernel_0123.py") == generated


def test_generated_modules_are_read_where_their_generator_wrote_them(monkeypatch) -> None:
    """A bundled module is used only under the generator version that wrote it (the
    manifest's): another generator would write another text for the same shape key."""
    from cogra.runtime.compiled.codegen.kernel_cache import generator_version

    if not kernel_bundle.usable():
        pytest.skip("no kernel bundle fits this checkout: `make setup` builds it")
    some = sorted((kernel_bundle.bundle_root() / kernel_bundle.GENERATED).glob("cogra_kernel_*.py"))
    assert some, "the bundle holds no generated module: `cogra warm --bundle` compiles the common shapes"
    key = some[0].stem.removeprefix("cogra_kernel_")
    assert kernel_bundle.generated_source(key, generator_version()) == some[0]
    assert kernel_bundle.generated_has(some[0], "kernel") or kernel_bundle.generated_has(some[0], "run_sliding") or \
        any(some[0].parent.glob(f"{some[0].stem}.*.nbi"))
    assert kernel_bundle.generated_source(key, "0" * 24) is None
    assert kernel_bundle.generated_source("no_such_shape", generator_version()) is None
    monkeypatch.setenv(kernel_bundle.BUNDLE_ENV, kernel_bundle.GENERIC_ONLY)
    assert kernel_bundle.generated_source(key, generator_version()) is None
    # Each module comes with its bytecode (checked by the source's hash: an install
    # changes file times), so a first call loading it does not compile its source.
    import importlib.util

    assert Path(importlib.util.cache_from_source(str(some[0]))).is_file()


@pytest.mark.slow
def test_without_the_bundle_the_same_process_compiles(tmp_path: Path) -> None:
    # The other side of the first test: what the bundle saves (and that the counting sees it).
    counts = _fresh(tmp_path, COGRA_KERNEL_BUNDLE="0")
    assert counts["misses"] > 10 and "run_mixed_ring" in counts["compiled"]


FORK = r"""
import os, sys
import cogra
from cogra.bench.first_run import grid_data, grid_query
table = grid_data({"type": "string", "events": 5_000})
pid = os.fork()  # at once: the warm start is under way (the fork waits for it)
if pid == 0:
    got = cogra.evaluate(grid_query({"semantics": "next", "aggregates": "COUNT"}), table, type_column="type",
                         on_overflow="null")
    os._exit(0 if got.num_rows == 1 else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_process_forked_during_the_warm_start_evaluates(tmp_path: Path) -> None:
    """A child forked while the warm-start thread held numba's or the import lock would
    inherit it taken and hang at its first call: the fork waits for the thread."""
    settings = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "COGRA_CACHE": str(tmp_path / "cogra"),
                "COGRA_BACKGROUND_COMPILE": "0"}
    settings.pop("COGRA_WARM_START", None)
    done = subprocess.run([sys.executable, "-c", FORK], env=settings, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
