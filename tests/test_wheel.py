"""The package installs as users install it: the built wheel, ``pip install``-ed into an
empty virtual environment (no extras), runs the README's Python example -- with no
deprecation warning from the build -- and carries the Scala shim's sources."""

from __future__ import annotations

import re
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def readme_python_example() -> str:
    """The first Python block of the README (``import cogra`` without Spark)."""
    return next(body for body in BLOCK.findall((ROOT / "README.md").read_text())
                if "import cogra\n" in body and "spark" not in body)


def test_the_wheel_installs_into_an_empty_venv_and_runs_the_readme_example(tmp_path: Path) -> None:
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
