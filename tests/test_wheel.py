"""The package installs as users install it: the built wheel, ``pip install``-ed into an
empty virtual environment (no extras), runs the README's Python example -- with no
deprecation warning from the build -- and carries the Scala shim's sources."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def readme_python_example() -> str:
    """The first Python block of the README (``import cogra`` without Spark)."""
    return next(body for body in BLOCK.findall((ROOT / "README.md").read_text())
                if "import cogra\n" in body and "spark" not in body)


def test_the_wheel_installs_into_an_empty_venv_and_runs_the_readme_example(tmp_path: Path) -> None:
    # setuptools copies the package into build/lib and leaves there what a later checkout
    # no longer has: a module renamed since the last build would ship twice, and its extra
    # kernel source would make the bundle's sources hash differ (not loaded).
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "dist"),
                            str(ROOT)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    assert "deprecat" not in (built.stdout + built.stderr).lower(), built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("cogra-*.whl")
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    installed = subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(wheel)],
                               capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stderr
    example = readme_python_example()
    example = example.replace('cogra.evaluate("RETURN COUNT(*) PATTERN (SEQ(A+, B))+ SEMANTICS any", events)',
                              'print(cogra.evaluate("RETURN COUNT(*) PATTERN (SEQ(A+, B))+ SEMANTICS any", '
                              'events).column(0).to_pylist())')
    ran = subprocess.run([str(python), "-c", example], capture_output=True, text=True, timeout=900,
                         cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[0] == "[43]"  # the README's comment: COUNT(*) = 43
    assert str(tmp_path / "venv") in subprocess.run(
        [str(python), "-c", "import cogra; print(cogra.__file__)"], capture_output=True, text=True,
        cwd=tmp_path).stdout  # the wheel's cogra, not the checkout's
    # The shim's Scala sources travel with the package, where cogra.spark.shim_build looks
    # (with pyspark installed, a session builds the jar from them).
    shim = subprocess.run([str(python), "-c", "import cogra, pathlib; print(sorted(p.name for p in "
                           "(pathlib.Path(cogra.__file__).parent / '_shim').rglob('*.scala')))"],
                          capture_output=True, text=True, cwd=tmp_path)
    expected = sorted(p.name for p in (ROOT / "jvm-shim").rglob("*.scala"))
    assert shim.stdout.strip() == str(expected) and len(expected) >= 4, shim.stdout + shim.stderr
    # The kernels compiled ahead of time travel with it too (where the checkout built
    # them): the installed package loads them -- same numba, same Python -- and its first
    # query compiled none of the generic kernels into numba's cache (HOME is empty).
    from cogra.runtime import kernel_bundle

    if kernel_bundle.usable():
        bundle = subprocess.run([str(python), "-c", "from cogra.runtime import kernel_bundle as k; "
                                 "print(k.usable(), k.bundle_root())"], capture_output=True, text=True, cwd=tmp_path,
                                env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
        assert bundle.stdout.split() == ["True", str(tmp_path / "venv" / _site(python) / "cogra" / "_kernels")], \
            bundle.stdout + bundle.stderr
        compiled = [p.name for p in tmp_path.rglob("*.nbc") if "_kernels" not in p.parts]
        assert not [n for n in compiled if not n.startswith("cogra_kernel_")], compiled


def _site(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import sysconfig, os, sys; print(os.path.relpath("
                           "sysconfig.get_paths()['purelib'], sys.prefix))"], capture_output=True, text=True).stdout.strip()


SPARK_EXAMPLE = """
import sys
import cogra
from cogra import datasets
from cogra.examples import Q3
from cogra.spark import session

spark = session(app_name="cogra-wheel", master="local[1]", **{"spark.ui.enabled": "false"})
table = datasets.stock(2000, seed=3)
spark.createDataFrame(table.to_pandas()).createOrReplaceTempView("stock")
got = spark.sql("SELECT * FROM MATCH_TREND(TABLE(stock), '" + Q3 + "')").count()
want = cogra.evaluate(Q3, table).num_rows
spark.stop()
print(got, want, cogra.__file__)
"""


@pytest.mark.slow
def test_the_wheel_with_the_spark_extra_runs_match_trend_in_an_empty_venv(tmp_path: Path) -> None:
    # pip install "cogra[spark]" is all a Spark user needs: the session builds the shim's
    # jar from the sources the wheel carries, with pyspark's own compiler.
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "dist"),
                            str(ROOT)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("cogra-*.whl")
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    installed = subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"{wheel}[spark]"],
                               capture_output=True, text=True, timeout=1800)
    assert installed.returncode == 0, installed.stderr
    java_home = {k: v for k, v in os.environ.items() if k == "JAVA_HOME"}
    ran = subprocess.run([str(python), "-c", SPARK_EXAMPLE], capture_output=True, text=True, timeout=1800,
                         cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **java_home})
    assert ran.returncode == 0, ran.stderr[-4000:]
    got, want, where = ran.stdout.split()[-3:]
    assert got == want and int(want) > 0 and str(tmp_path / "venv") in where, ran.stdout
