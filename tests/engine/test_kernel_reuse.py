"""Generated kernels are reused for small inputs once compiled (kernel_cache.is_compiled).

Compiling a shape's kernel costs seconds, so only large inputs compile one; but a Spark
worker evaluates 131k-row chunks of a large query, and a kernel compiled by an earlier
large run (in this process, or found in numba's disk cache) costs nothing to reuse.
"""

from __future__ import annotations

import json

import pytest

import cogra
from cogra.datasets import stock
from cogra.examples import Q3
from cogra.runtime.compiled.codegen import background
from cogra.runtime.compiled.codegen import kernel_cache
from cogra.runtime.compiled.codegen import query_shape
from cogra.runtime import kernel_bundle
from cogra.runtime.compiled import kernel_driver
from tests.compare import assert_same_result
from tests.engine.test_sliding import forced

SLIDING = ("RETURN company, COUNT(*), SUM(S.volume) PATTERN Stock S+ SEMANTICS skip-till-next-match "
           "WHERE [company] "
           "GROUP-BY company WITHIN 60 seconds SLIDE 5 seconds")
TUMBLING = SLIDING.replace(" SLIDE 5 seconds", "")


@pytest.fixture
def reuse(monkeypatch):
    """Kernels compiled earlier count (kernel_cache.REUSE_COMPILED), those of this machine
    only: the shapes here are common ones, whose generated modules the kernel bundle
    holds, and these tests are about compiling them per machine."""
    monkeypatch.setattr(kernel_cache, "REUSE_COMPILED", True)
    monkeypatch.setenv(kernel_bundle.BUNDLE_ENV, kernel_bundle.GENERIC_ONLY)  # (background compiles' too)


def test_small_input_reuses_a_compiled_sliding_kernel(reuse, monkeypatch, generated_kernels) -> None:
    from cogra.runtime.compiled.windows import sliding

    shapes = []
    real_sliding_for = kernel_cache.sliding_for
    monkeypatch.setattr(kernel_cache, "sliding_for", lambda shape: shapes.append(shape) or real_sliding_for(shape))
    with forced() as generic:  # pane sharing whatever the events per window
        cogra.evaluate(SLIDING, stock(3000, rate=20.0))  # thresholds lowered: compiles it
        assert shapes and not generic
        monkeypatch.setattr(sliding, "SPECIALIZE_MIN_EVENTS", 10**9)  # no size qualifies any more
        small = stock(2000, rate=20.0, seed=5)
        got = cogra.evaluate(SLIDING, small)
        assert len(shapes) == 2 and not generic  # the compiled generated kernel ran again
        assert_same_result(got, cogra.evaluate(SLIDING, small, compiled=False))
        monkeypatch.setattr(kernel_cache, "REUSE_COMPILED", False)
        cogra.evaluate(SLIDING, small)
        assert len(shapes) == 2 and generic  # without reuse, small inputs keep the generic kernel


def test_small_input_reuses_a_compiled_window_kernel(reuse, monkeypatch, generated_kernels) -> None:
    shapes = []
    real_kernel_for = kernel_cache.kernel_for
    monkeypatch.setattr(kernel_cache, "kernel_for", lambda shape: shapes.append(shape) or real_kernel_for(shape))
    cogra.evaluate(TUMBLING, stock(3000, rate=20.0))  # thresholds lowered: compiles it
    assert shapes and kernel_cache.is_compiled(shapes[0], "kernel")
    monkeypatch.setattr(kernel_driver, "SPECIALIZE_MIN_EVENTS", 10**9)  # no size qualifies any more
    shapes.clear()
    small = stock(2000, rate=20.0, seed=5)
    got = cogra.evaluate(TUMBLING, small)
    assert shapes  # the generated kernel was used
    assert_same_result(got, cogra.evaluate(TUMBLING, small, compiled=False))
    monkeypatch.setattr(kernel_cache, "REUSE_COMPILED", False)
    assert not kernel_cache.is_compiled(shapes[0], "kernel")
    shapes.clear()
    cogra.evaluate(TUMBLING, small)
    assert not shapes


def _sliding_call(monkeypatch):
    """``(shape, args)`` of one generic sliding-kernel call on a small stream."""
    from cogra.runtime.compiled.windows import sliding
    from cogra.runtime.compiled.windows import pane_maps

    captured = []
    real = pane_maps.run_sliding
    monkeypatch.setattr(pane_maps, "run_sliding", lambda *a: captured.append(a) or real(*a))
    shapes = []
    real_bg = background.compile_in_background
    monkeypatch.setattr(background, "compile_in_background", lambda s, f, a: shapes.append(s) or False)
    monkeypatch.setattr(background, "BACKGROUND_MIN_EVENTS", 0)
    monkeypatch.setattr(sliding, "SPECIALIZE_MIN_EVENTS", 10**9)  # the generic kernel runs
    with forced():
        cogra.evaluate(SLIDING, stock(500, rate=20.0))
    monkeypatch.setattr(background, "compile_in_background", real_bg)
    assert captured and shapes
    return shapes[0], captured[0]


def test_background_compile_request_and_lock(reuse, monkeypatch, tmp_path) -> None:
    # The request is written to a lock file beside the source; while it is fresh no
    # second process starts; the child compiles what it asks for and removes it.
    import os
    import subprocess

    monkeypatch.setenv("COGRA_CACHE", str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_LOADED", {})  # nothing compiled in this process either
    shape, args = _sliding_call(monkeypatch)
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, **kw: started.append(cmd))
    assert background.compile_in_background(shape, "run_sliding", args)
    lock = tmp_path / "kernels" / f"cogra_kernel_{shape.key}.run_sliding.compiling"
    assert lock.exists() and started[0][1] == "-c" and started[0][3] == str(lock)
    assert json.loads(started[0][6]) == background._compile_command(lock)  # what the supervisor runs
    assert not background.compile_in_background(shape, "run_sliding", args)  # one at a time
    os.utime(lock, (0, 0))  # a lock from a process that died long ago
    assert background.compile_in_background(shape, "run_sliding", args) and len(started) == 2
    assert not kernel_cache.is_compiled(shape, "run_sliding")
    background._compile_requested(str(lock))  # what the child runs
    assert not lock.exists() and kernel_cache.is_compiled(shape, "run_sliding")
    monkeypatch.setenv(background.BACKGROUND_ENV, "0")
    other = query_shape.Shape(**{**shape.__dict__, "n_i": shape.n_i + 1})
    assert not background.compile_in_background(other, "run_sliding", args)


def test_a_kernel_compiled_into_numba_cache_dir_counts_as_compiled(reuse, monkeypatch, tmp_path) -> None:
    # Where NUMBA_CACHE_DIR is set (an executor whose HOME is read-only: caches.ensure_numba_cache),
    # numba caches the generated kernels there, not beside their sources: found there too,
    # else the engine ran the generic kernel and compiled the generated one again for good.
    from numba.core import config

    monkeypatch.setenv("COGRA_CACHE", str(tmp_path / "cogra"))
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "numba"))
    monkeypatch.setattr(kernel_cache, "_LOADED", {})
    monkeypatch.setattr(kernel_cache, "_NOT_COMPILED", {})
    shape, args = _sliding_call(monkeypatch)
    lock = kernel_cache.cache_dir() / f"cogra_kernel_{shape.key}.run_sliding.compiling"
    import numba
    import pickle

    lock.write_bytes(pickle.dumps((shape, "run_sliding", tuple(numba.typeof(a) for a in args))))
    background._compile_requested(str(lock))
    monkeypatch.setattr(kernel_cache, "_LOADED", {})  # a fresh process: only the disk knows
    monkeypatch.setattr(kernel_cache, "_NOT_COMPILED", {})
    assert list((tmp_path / "numba").rglob(f"cogra_kernel_{shape.key}.run_sliding-*.nbi"))
    assert not list(kernel_cache.cache_dir().rglob("*.nbi"))  # nothing beside the source
    assert kernel_cache.is_compiled(shape, "run_sliding")


def test_compiles_requested_during_a_call_start_when_it_returns(reuse, monkeypatch, tmp_path) -> None:
    # A compile started mid-call would take a core from the call that asked for it.
    import subprocess

    monkeypatch.setenv("COGRA_CACHE", str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_LOADED", {})
    shape, args = _sliding_call(monkeypatch)
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, **kw: started.append(cmd))
    lock = tmp_path / "kernels" / f"cogra_kernel_{shape.key}.run_sliding.compiling"
    with background.compiles_after_the_call():
        with background.compiles_after_the_call():  # nested: the outermost starts them
            assert background.compile_in_background(shape, "run_sliding", args)
            assert background.compile_in_background(shape, "run_sliding", args)  # asked twice, started once
        assert not started and not lock.exists()
    assert len(started) == 1 and lock.exists()
    # And an engine call starts what it requests after its kernels ran.
    from cogra.runtime.compiled.windows import sliding
    from cogra.runtime.compiled.windows import pane_maps

    events = []
    monkeypatch.setattr(background, "_start", lambda s, f, t: events.append(("start", f)) or True)
    real = pane_maps.run_sliding
    monkeypatch.setattr(pane_maps, "run_sliding", lambda *a: events.append(("kernel",)) or real(*a))
    monkeypatch.setattr(background, "BACKGROUND_MIN_EVENTS", 0)
    monkeypatch.setattr(sliding, "SPECIALIZE_MIN_EVENTS", 10**9)
    with forced():
        cogra.evaluate(SLIDING, stock(500, rate=20.0))
    assert events[0] == ("kernel",) and ("start", "run_sliding") in events
    assert events.index(("start", "run_sliding")) > max(i for i, e in enumerate(events) if e == ("kernel",))


@pytest.mark.slow
def test_background_compile_serves_later_calls(reuse, monkeypatch, tmp_path) -> None:
    # End to end: a chunk-sized input starts a detached compile; once it is done, the same
    # query runs the generated kernel.
    import time

    from cogra.runtime.compiled.windows import sliding

    monkeypatch.setenv("COGRA_CACHE", str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_LOADED", {})
    monkeypatch.setattr(background, "BACKGROUND_MIN_EVENTS", 0)
    monkeypatch.setattr(sliding, "SPECIALIZE_MIN_EVENTS", 10**9)
    shapes = []
    real_bg = background.compile_in_background
    monkeypatch.setattr(background, "compile_in_background", lambda s, f, a: shapes.append(s) or real_bg(s, f, a))
    table = stock(3000, rate=20.0)
    with forced() as generic:
        cogra.evaluate(SLIDING, table)
        assert generic and shapes
        deadline = time.time() + 300
        while not kernel_cache.is_compiled(shapes[0], "run_sliding"):
            assert time.time() < deadline, "the background compile did not finish"
            time.sleep(1)
        generic.clear()
        got = cogra.evaluate(SLIDING, table)
        assert not generic
    assert_same_result(got, cogra.evaluate(SLIDING, table, compiled=False))


def test_shape_keys_are_memoized_by_value(monkeypatch) -> None:
    """A shape's module name is the hash of its repr, whichever equal shape object asks (the
    memo is keyed by value), and a shape that differs in any field gets another name."""
    import dataclasses
    import hashlib

    monkeypatch.setattr(query_shape, "_KEYS", {})
    shape = query_shape.Shape(mode=0, nv=2, preds=((), (0, 1)), start=(0,), final=(1,), ops=(),
                              n_i=1, n_f=0, x_is_min=(), pair_checks=())
    expected = hashlib.sha256(repr(shape).encode()).hexdigest()[:20]
    assert shape.key == expected
    twin = dataclasses.replace(shape)
    assert twin is not shape and twin.key == expected
    assert dataclasses.replace(shape, n_f=1).key != expected
    assert dataclasses.replace(shape, final=(0, 1)).key != expected
    assert len(query_shape._KEYS) == 3
    monkeypatch.setattr(query_shape, "_KEYS_MAX", 3)  # full: cleared before the next one
    assert dataclasses.replace(shape, nv=3).key == hashlib.sha256(
        repr(dataclasses.replace(shape, nv=3)).encode()).hexdigest()[:20]
    assert len(query_shape._KEYS) == 1


def test_a_chunk_starts_the_window_kernel_compiling_in_the_background(reuse, monkeypatch, tmp_path) -> None:
    """Spark evaluates a partition in slices and chunks of 8k-40k rows, none of which
    reaches SPECIALIZE_MIN_EVENTS: the first large enough asks for the generated per-window
    kernel to be compiled in the background, with the argument types of its later calls."""
    import numba

    monkeypatch.setenv("COGRA_CACHE", str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_LOADED", {})
    monkeypatch.setattr(kernel_cache, "_NOT_COMPILED", {})
    monkeypatch.setattr(kernel_driver, "SPECIALIZE_MIN_EVENTS", 10**9)
    monkeypatch.setattr(background, "BACKGROUND_MIN_EVENTS", 1000)
    requests = []
    monkeypatch.setattr(background, "compile_in_background", lambda s, f, a: requests.append((s, f, a)) or True)
    table = stock(3000, rate=20.0)
    expected = cogra.evaluate(TUMBLING, table, compiled=False)
    cogra.evaluate(TUMBLING, table.slice(0, 500))
    assert not requests  # below BACKGROUND_MIN_EVENTS
    got = cogra.evaluate(TUMBLING, table)
    assert requests and {f for _, f, _ in requests} == {"kernel"}
    shape, _, args = requests[0]
    # What the background process does (background._compile_requested); then the generated
    # kernel runs, with no second compile: the requested types are the call's.
    kernel = kernel_cache._module_for(shape).kernel
    kernel.compile(tuple(numba.typeof(a) for a in args))
    ran = []
    real_kernel_for = kernel_cache.kernel_for
    monkeypatch.setattr(kernel_cache, "kernel_for", lambda s: ran.append(s) or real_kernel_for(s))
    again = cogra.evaluate(TUMBLING, table)
    assert [s.key for s in ran] and {s.key for s in ran} == {shape.key}
    assert len(kernel.signatures) == 1
    assert_same_result(got, expected)
    assert_same_result(again, expected)


def _one_variable_shape() -> "query_shape.Shape":
    """``A+`` counted: a shape no other test compiles."""
    return query_shape.Shape(mode=0, nv=1, preds=((0,),), start=(0,), final=(0,), ops=(),
                             n_i=1, n_f=0, x_is_min=(), pair_checks=())


def test_a_kernel_found_not_compiled_is_not_looked_for_again_at_once(reuse, monkeypatch, tmp_path) -> None:
    """Finding out costs generating the source and reading the cache; Spark's slices ask
    per call. The answer is trusted for RECHECK_SECONDS, per shape and function."""
    monkeypatch.setenv("COGRA_CACHE", str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_LOADED", {})
    monkeypatch.setattr(kernel_cache, "_NOT_COMPILED", {})
    shape = _one_variable_shape()
    looks = []
    real_source_path = kernel_cache._source_path
    monkeypatch.setattr(kernel_cache, "_source_path", lambda s: looks.append(s) or real_source_path(s))
    assert not kernel_cache.is_compiled(shape, "kernel") and len(looks) == 1
    assert not kernel_cache.is_compiled(shape, "kernel") and len(looks) == 1
    assert not kernel_cache.is_compiled(shape, "kernel_from") and len(looks) == 2
    monkeypatch.setattr(kernel_cache, "RECHECK_SECONDS", 0.0)
    assert not kernel_cache.is_compiled(shape, "kernel") and len(looks) == 3


def test_a_failed_background_compile_keeps_its_lock(reuse, monkeypatch, tmp_path) -> None:
    """Every Spark task's call would otherwise start another process that fails the same
    way: the lock stays until it is stale."""
    import os
    import pickle
    import subprocess

    monkeypatch.setenv("COGRA_CACHE", str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_LOADED", {})
    shape = _one_variable_shape()
    lock = kernel_cache.cache_dir() / f"cogra_kernel_{shape.key}.no_such_function.compiling"
    lock.write_bytes(pickle.dumps((shape, "no_such_function", ())))
    with pytest.raises(AttributeError):
        background._compile_requested(str(lock))
    assert lock.exists()
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, **kw: started.append(cmd))
    assert not background.compile_in_background(shape, "no_such_function", ()) and not started
    os.utime(lock, (0, 0))
    assert background.compile_in_background(shape, "no_such_function", ()) and started


Q3_TUMBLING = Q3.replace(" SLIDE 10 seconds", "")


def _background_requests(monkeypatch, query: str, table, threshold: int) -> tuple:
    """``(result, requests)``: the background compiles (shape, function, arguments) one
    evaluation of ``query`` asks for -- none started --, with every generated run's own
    size threshold out of reach and background.BACKGROUND_MIN_EVENTS at ``threshold``."""
    from cogra.runtime.compiled.windows import sliding

    monkeypatch.setattr(kernel_driver, "SPECIALIZE_MIN_EVENTS", 10**9)
    monkeypatch.setattr(sliding, "SPECIALIZE_MIN_EVENTS", 10**9)
    monkeypatch.setattr(background, "BACKGROUND_MIN_EVENTS", threshold)
    requests = []
    monkeypatch.setattr(background, "compile_in_background", lambda s, f, a: requests.append((s, f, a)) or True)
    with _ring_if_sliding(query):
        got = cogra.evaluate(query, table)
    return got, requests


def _ring_if_sliding(query: str):
    """Sliding windows: the ring whatever the events per window (tumbling ones keep the
    per-window kernels)."""
    import contextlib

    return forced() if "SLIDE" in query else contextlib.nullcontext([])


@pytest.mark.parametrize("query, functions", [
    # (the sliding query's thousands of keys per block also ask for their generated finish;
    # the tumbling query's few do not: finish.BACKGROUND_MIN_KEYS)
    (Q3, {"ring_saving", "ring_loading", "finish_one_window_per_key"}),
    (Q3_TUMBLING, {"kernel_loading"})], ids=["q3", "q3-tumbling"])
def test_a_spark_sized_call_requests_the_generated_runs_it_skips(reuse, monkeypatch, tmp_path,
                                                                 query, functions) -> None:
    """Whether a call asks for a background compile depends on the call's rows, not on the
    run's own positions: q3's representatives hold a tenth of a slice's events, and a
    slice (~6k rows) never reached the 20k positions that used to be asked."""
    monkeypatch.setenv("COGRA_CACHE", str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_LOADED", {})
    monkeypatch.setattr(kernel_cache, "_NOT_COMPILED", {})
    table = stock(3000, rate=2.0)
    _, requests = _background_requests(monkeypatch, query, table, table.num_rows + 1)
    assert not requests
    got, requests = _background_requests(monkeypatch, query, table, table.num_rows)
    assert {f for _, f, _ in requests} == functions
    assert_same_result(got, cogra.evaluate(query, table, compiled=False))


@pytest.mark.slow
@pytest.mark.parametrize("query, runs", [(Q3, ("ring_generated", "saving_generated")),
                                         (Q3_TUMBLING, ("generated",))], ids=["q3", "q3-tumbling"])
def test_the_requested_runs_serve_the_next_calls(reuse, monkeypatch, tmp_path, query, runs) -> None:
    """Compiled for the requested types (what the background process does), the generated
    runs serve the next call -- with no second compile: the types were the call's."""
    import numba

    from tests.engine.test_shared_rows import watched

    monkeypatch.setenv("COGRA_CACHE", str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_LOADED", {})
    monkeypatch.setattr(kernel_cache, "_NOT_COMPILED", {})
    table = stock(3000, rate=2.0)
    _, requests = _background_requests(monkeypatch, query, table, 0)
    compiled = []
    for shape, function, args in requests:
        dispatcher = getattr(kernel_cache._module_for(shape), function)
        dispatcher.compile(tuple(numba.typeof(a) for a in args))
        compiled.append(dispatcher)
    monkeypatch.setattr(kernel_cache, "_NOT_COMPILED", {})
    with _ring_if_sliding(query), watched() as seen:
        got = cogra.evaluate(query, table)
    assert all(seen[run] for run in runs), seen
    assert all(len(d.signatures) == 1 for d in compiled)
    assert_same_result(got, cogra.evaluate(query, table, compiled=False))


def test_a_streamed_chunk_requests_the_continuing_kernel(reuse, monkeypatch, tmp_path) -> None:
    """An unkeyed query streams a Spark partition chunk by chunk (cogra.runtime.stream):
    its chunks ask for the generated kernel that continues windows, as the other routes'
    calls ask for theirs, with the types of its later calls."""
    import numba

    from cogra.runtime.stream import StreamEvaluation

    monkeypatch.setenv("COGRA_CACHE", str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_LOADED", {})
    monkeypatch.setattr(kernel_cache, "_NOT_COMPILED", {})
    monkeypatch.setattr(kernel_driver, "SPECIALIZE_MIN_EVENTS", 10**9)
    requests = []
    monkeypatch.setattr(background, "compile_in_background", lambda s, f, a: requests.append((s, f, a)) or True)
    query = ("RETURN COUNT(*), SUM(S.volume), MAX(S.price) PATTERN Stock S+ SEMANTICS skip-till-next-match "
             "WITHIN 10 seconds")
    table = stock(3000, rate=20.0)

    def streamed(chunk: int):
        stream = StreamEvaluation(cogra.plan(query, table.schema), table.schema)
        for batch in table.to_batches(max_chunksize=chunk):
            stream.push(batch)
        return stream.finish()

    monkeypatch.setattr(background, "BACKGROUND_MIN_EVENTS", 1000)
    expected = streamed(500)
    assert not requests  # every chunk below BACKGROUND_MIN_EVENTS
    assert_same_result(streamed(1500), expected)
    assert requests and {f for _, f, _ in requests} == {"kernel_from"}
    shape, _, args = requests[0]
    kernel = kernel_cache._module_for(shape).kernel_from
    kernel.compile(tuple(numba.typeof(a) for a in args))  # what the background process does
    ran = []
    real = kernel_cache.kernel_from_for
    monkeypatch.setattr(kernel_cache, "kernel_from_for", lambda s: ran.append(s) or real(s))
    assert_same_result(streamed(1500), expected)
    assert ran and len(kernel.signatures) == 1


def test_an_index_older_than_its_rewritten_source_still_counts_when_the_text_is_the_same(tmp_path) -> None:
    # numba stamps its cache index with the source's digest: a source rewritten with the
    # same text (another cogra version sharing the cache wrote it in between) is newer
    # than its index and still compiled; a changed text is not (kernel_cache._index_is_current).
    import importlib.util
    import os
    import time

    source = tmp_path / "cogra_kernel_probe.py"
    text = "from numba import njit\n\n\n@njit(cache=True)\ndef twice(x):\n    return 2 * x\n"
    source.write_text(text)
    spec = importlib.util.spec_from_file_location("cogra_kernel_probe", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.twice(21) == 42  # compiled and saved beside the source
    (index,) = (tmp_path / "__pycache__").glob("cogra_kernel_probe.twice-*.nbi")
    assert kernel_cache._index_is_current(index, source)
    later = time.time() + 5
    source.write_text(text)
    os.utime(source, (later, later))  # rewritten, same text, newer than the index
    assert kernel_cache._index_is_current(index, source)
    source.write_text(text.replace("2 * x", "3 * x"))
    os.utime(source, (later, later))
    assert not kernel_cache._index_is_current(index, source)
    index.write_bytes(b"not an index")
    assert not kernel_cache._index_is_current(index, source)


def test_threads_on_an_empty_kernel_cache(monkeypatch, tmp_path, generated_kernels) -> None:
    """Eight threads evaluating at once, each writing the same generated module into an
    empty cache: none loses another's temporary file, all get the whole table's result."""
    import threading

    monkeypatch.setenv("COGRA_CACHE", str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_LOADED", {})  # a module loaded earlier would not be written
    monkeypatch.setenv(kernel_bundle.BUNDLE_ENV, kernel_bundle.GENERIC_ONLY)  # (nor one of the bundle)
    table = stock(400, seed=2)
    want = cogra.evaluate(TUMBLING, table, compiled=False)
    results, errors = [], []
    start = threading.Barrier(8)
    written = []
    real_source = kernel_cache._source
    monkeypatch.setattr(kernel_cache, "_source", lambda shape: written.append(shape) or real_source(shape))

    def work() -> None:
        try:
            start.wait()
            for _ in range(3):
                results.append(cogra.evaluate(TUMBLING, table))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 24 and written  # (the generated kernels ran)
    for got in results:
        assert_same_result(got, want)
    assert list((tmp_path / "kernels").glob("cogra_kernel_*.py"))
    assert not list((tmp_path / "kernels").glob("*.tmp"))
