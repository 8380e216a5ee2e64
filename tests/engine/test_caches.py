"""The compiled kernels' caches work where HOME is not writable, and a background compile
ends with the process that asked for it."""

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
def test_a_background_compile_ends_with_its_parent(tmp_path: Path) -> None:
    """The parent starts the compile process (its own session, as compile_in_background
    does) and exits: the compile process ends within seconds and removes its lock."""
    lock = tmp_path / "cogra_kernel_x.kernel.compiling"
    lock.write_bytes(b"request")
    parent = run(f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c",
            "import sys, time; from cogra.runtime.compiled.codegen.background import _end_with; "
            "from pathlib import Path; _end_with(int(sys.argv[1]), Path(sys.argv[2])); time.sleep(120)",
            str(os.getpid()), {str(lock)!r}], start_new_session=True)
        time.sleep(2)  # the child arms its signal
        print(child.pid)
    """)
    assert parent.returncode == 0, parent.stderr
    pid = int(parent.stdout)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if _zombie(pid):
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        pytest.fail("the background compile outlived its parent")
    assert not lock.exists()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return False
