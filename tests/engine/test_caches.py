"""The compiled kernels' caches work where HOME is not writable; a background compile
outlives the script that asked for it and pauses while a call runs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(code: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("COGRA_CACHE", "NUMBA_CACHE_DIR")}
    environ.update(env)
    environ["PYTHONPATH"] = str(ROOT / "python") + os.pathsep + environ.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ, capture_output=True,
                          text=True, timeout=300)


def test_an_unwritable_home_falls_back_to_a_writable_place(tmp_path: Path) -> None:
    """HOME=/dev/null (no directory can be made under it, even by root): the generated
    kernels go to Spark's local directory, and a query that compiles one runs."""
    local = tmp_path / "spark-local"
    done = run("""
        import warnings
        import cogra
        from cogra.datasets import stock
        from cogra.runtime.compiled.codegen import kernel_cache
        from cogra.bench.runner import generated_kernels_always
        print(kernel_cache.cache_dir())
        with generated_kernels_always():
            print(cogra.evaluate("RETURN COUNT(*), SUM(B.volume) PATTERN SEQ(Stock A, Stock B) SEMANTICS next WITHIN 1 minutes",
                                 stock(500)).num_rows)
    """, HOME="/dev/null", SPARK_LOCAL_DIRS=f"/dev/null/x,{local}")
    assert done.returncode == 0, done.stderr
    where, rows = done.stdout.split()
    assert where == str(local / "cogra-cache" / "kernels") and int(rows) > 0
    assert any(local.glob("cogra-cache/kernels/cogra_kernel_*.py"))


def test_an_unwritable_cogra_cache_is_an_error_that_says_so() -> None:
    done = run("""
        from cogra.runtime.compiled.codegen import kernel_cache
        kernel_cache.cache_dir()
    """, COGRA_CACHE="/dev/null/kernels")
    assert done.returncode != 0
    assert "CograError: COGRA_CACHE=/dev/null/kernels is not a directory this process can write to" in done.stderr


def test_numba_gets_a_cache_directory_where_it_has_none(tmp_path: Path) -> None:
    done = run("""
        import os
        from cogra.runtime import caches
        caches._numba_has_a_place = lambda: False  # as an installed package with HOME unwritable
        caches.ensure_numba_cache()
        import numba.core.config as config
        print(os.environ["NUMBA_CACHE_DIR"], config.CACHE_DIR)
    """, COGRA_CACHE=str(tmp_path / "c"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(tmp_path / "c" / "numba")] * 2


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")
def test_a_background_compile_outlives_the_script_that_asked_for_it(tmp_path: Path) -> None:
    """A script requests a generated kernel's compile and exits at once: the compile
    still ends, compiled (in numba's cache) and its request removed, so that the next
    process runs the generated kernel."""
    caches = {"COGRA_CACHE": str(tmp_path / "c"), "NUMBA_CACHE_DIR": str(tmp_path / "n")}
    script = run("""
        import pickle
        import numpy as np
        import numba
        from cogra.runtime.compiled.codegen import background, kernel_cache
        from cogra.runtime.compiled.codegen.query_shape import Shape
        shape = Shape(mode=0, nv=1, preds=((0,),), start=(0,), final=(0,), ops=((0, 0, 0, 0, 0, -1),),
                      n_i=1, n_f=1, x_is_min=(), pair_checks=())
        i64, u64 = np.zeros(1, np.int64), np.zeros(1, np.uint64)
        args = (i64, u64, u64, np.zeros((0, 1), np.int64), np.zeros((0, 1)), np.zeros((0, 1), np.bool_),
                np.zeros((0, 1), np.int64), i64, i64, i64, 1.0, np.zeros((1, 1), np.uint64), np.zeros((1, 1)),
                np.zeros((1, 0), np.int64), i64, np.zeros(1, np.bool_))
        assert background.compile_in_background(shape, "kernel", args)
        print(shape.key)
    """, **caches)
    assert script.returncode == 0, script.stderr
    key = script.stdout.split()[-1]
    lock = tmp_path / "c" / "kernels" / f"cogra_kernel_{key}.kernel.compiling"
    deadline = time.monotonic() + 240
    while lock.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not lock.exists(), "the compile did not end"
    assert list((tmp_path / "n").rglob(f"cogra_kernel_{key}.kernel-*.nbi")), "nothing compiled"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_background_compile_is_stopped_while_a_call_runs(tmp_path: Path, monkeypatch) -> None:
    """On a machine of PAUSE_AT_CORES cores or fewer (forced here: ``pause=True``), the
    supervisor stops its compile (a ticker here) while any cogra call holds the running
    lock, and resumes it after."""
    from cogra.runtime.compiled.codegen import background

    monkeypatch.setenv("COGRA_CACHE", str(tmp_path / "c"))
    ticks = tmp_path / "ticks"
    lock = background.kernel_cache.cache_dir() / "cogra_kernel_x.kernel.compiling"
    lock.write_bytes(b"request")
    ticker = ("import sys, time\nend = time.monotonic() + 20\nwhile time.monotonic() < end:\n"
              "    open(sys.argv[1], 'a').write('x')\n    time.sleep(0.02)")
    supervisor = subprocess.Popen(background.supervisor_command(lock, [sys.executable, "-c", ticker, str(ticks)],
                                                             pause=True))
    try:
        deadline = time.monotonic() + 60
        while not (ticks.exists() and ticks.stat().st_size > 5) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ticks.exists(), "the compile never ran"
        with background.running():
            time.sleep(1.0)  # the supervisor looks every POLL_SECONDS
            paused = ticks.stat().st_size
            time.sleep(1.0)
            assert ticks.stat().st_size == paused, "the compile ran beside a call"
        time.sleep(1.0)
        assert ticks.stat().st_size > paused, "the compile was not resumed"
    finally:
        supervisor.kill()
        supervisor.wait()


def test_a_call_runs_unmarked_where_the_running_lock_cannot_be_taken(monkeypatch) -> None:
    """The running lock only pauses background compiles: where no cache directory is
    writable (cache_root raises), the call runs all the same, counted in this process."""
    from cogra.errors import CograError
    from cogra.runtime.compiled.codegen import background

    def unwritable():
        raise CograError("no writable directory")

    monkeypatch.setattr(background, "_running_lock", unwritable)
    with background.running():
        assert background.calls_in_process() >= 1
        with background.running():  # nested in the thread: counted once
            inner = background.calls_in_process()
    assert background.calls_in_process() == inner - 1
