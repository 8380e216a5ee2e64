"""Build the small Scala shim (``jvm-shim/``) into a jar, offline, with pyspark's own jars.

PySpark ships the Scala 2.13 compiler (``scala-compiler-*.jar``) next to Spark's jars, so
the shim is compiled with ``java scala.tools.nsc.Main`` against every jar in
``pyspark/jars`` and zipped with :mod:`zipfile`; no sbt, Maven or network is needed.

The jar is cached, keyed by a hash of the Scala sources, the pyspark version and the
compiler jar, and rebuilt only when one of them changes::

    python -m cogra.spark.shim_build            # build if stale, print the jar's path
    python -m cogra.spark.shim_build --force    # rebuild

Environment: ``COGRA_SHIM_SOURCES`` (the ``jvm-shim`` directory), ``COGRA_JAR_DIR`` (where
jars are cached), ``JAVA_HOME`` (else ``java`` on PATH).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

#: Bump when the way the jar is built changes, so cached jars are rebuilt.
BUILD_FORMAT = "2"
JAR_PREFIX = "cogra-shim"
EXTENSION_CLASS = "org.apache.spark.sql.cogra.CograExtensions"
#: Superseded jars kept next to the current one (sessions started earlier may load them).
KEEP_OLD_JARS = 2

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # python/cogra


class ShimBuildError(RuntimeError):
    """The shim could not be compiled; the message carries the compiler's output."""


@dataclass(frozen=True)
class BuildResult:
    jar: Path
    built: bool
    seconds: float


def default_source_dir() -> Path:
    """``$COGRA_SHIM_SOURCES``, else the package's copy of ``jvm-shim/`` (``cogra/_shim``:
    a link in a checkout, the sources themselves in an installed wheel)."""
    env = os.environ.get("COGRA_SHIM_SOURCES")
    if env:
        return Path(env)
    return _PACKAGE_DIR / "_shim"


def default_jar_dir() -> Path:
    env = os.environ.get("COGRA_JAR_DIR")
    if env:
        return Path(env)
    local = _PACKAGE_DIR / "_jars"
    try:
        local.mkdir(exist_ok=True)
        if os.access(local, os.W_OK):
            return local
    except OSError:
        pass
    from cogra.runtime.caches import cache_root

    return cache_root() / "jars"  # a writable place on every machine


def pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def pyspark_jars_dir() -> Path:
    jars = pyspark_home() / "jars"
    if not jars.is_dir():
        raise ShimBuildError(f"pyspark has no jars directory at {jars}")
    return jars


def pyspark_version() -> str:
    import pyspark

    return pyspark.__version__


def scala_sources(source_dir: Path) -> list[Path]:
    root = source_dir / "src" / "main" / "scala"
    files = sorted(p for p in root.rglob("*.scala") if p.is_file())
    if not files:
        raise ShimBuildError(f"no Scala sources under {root}")
    return files


def _compiler_jars(jars_dir: Path) -> list[Path]:
    wanted = ("scala-compiler-", "scala-library-", "scala-reflect-")
    found = [next(iter(sorted(jars_dir.glob(f"{w}*.jar"))), None) for w in wanted]
    missing = [w for w, f in zip(wanted, found) if f is None]
    if missing:
        raise ShimBuildError(
            f"pyspark's jars ({jars_dir}) lack {', '.join(m + '*.jar' for m in missing)}"
        )
    return [f for f in found if f is not None]


def source_digest(source_dir: Path, spark_version: str, compiler: str = "") -> str:
    """Hash of everything the jar depends on: sources (path and bytes), pyspark, compiler."""
    h = hashlib.sha256()
    h.update(f"format={BUILD_FORMAT}\nspark={spark_version}\ncompiler={compiler}\n".encode())
    root = source_dir / "src" / "main"
    for path in scala_sources(source_dir):
        h.update(str(path.relative_to(root)).replace(os.sep, "/").encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def jar_path(source_dir: Path | None = None, jar_dir: Path | None = None) -> Path:
    """Where the jar for the current sources and pyspark lives (built or not)."""
    source_dir = source_dir or default_source_dir()
    jar_dir = jar_dir or default_jar_dir()
    jars = pyspark_jars_dir()
    compiler = _compiler_jars(jars)[0].name
    digest = source_digest(source_dir, pyspark_version(), compiler)
    return jar_dir / f"{JAR_PREFIX}-{pyspark_version()}-{digest}.jar"


def is_stale(source_dir: Path | None = None, jar_dir: Path | None = None) -> bool:
    return not jar_path(source_dir, jar_dir).is_file()


def java_executable() -> str:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("java")
    if not found:
        raise ShimBuildError("no java executable: install a JDK 17+ or set JAVA_HOME")
    return found


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive lock across processes (two sessions starting at once build once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def compile_jar(source_dir: Path, target: Path) -> None:
    """Compile the shim's sources into ``target`` (written atomically)."""
    jars_dir = pyspark_jars_dir()
    compiler = _compiler_jars(jars_dir)
    classpath = os.pathsep.join(str(p) for p in sorted(jars_dir.glob("*.jar")))
    sources = scala_sources(source_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cogra-shim-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        argfile = Path(tmp) / "scalac.args"
        # An @argfile keeps the (long) class path off the command line.
        args = ["-classpath", classpath, "-d", str(classes), "-nowarn"]
        args += [str(s) for s in sources]
        argfile.write_text("\n".join(_quote_arg(a) for a in args) + "\n")
        cmd = [
            java_executable(),
            "-Xss8m",
            "-Xmx1g",
            "-cp",
            os.pathsep.join(str(p) for p in compiler),
            "scala.tools.nsc.Main",
            f"@{argfile}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not any(classes.rglob("*.class")):
            raise ShimBuildError(
                "compiling the cogra JVM shim failed:\n" + (proc.stdout + proc.stderr).strip()
            )
        partial = target.with_name(target.name + f".{os.getpid()}.{threading.get_ident()}.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr(
                "META-INF/MANIFEST.MF",
                "Manifest-Version: 1.0\r\nCreated-By: cogra.spark.shim_build\r\n"
                f"Implementation-Title: cogra-shim\r\nSpark-Version: {pyspark_version()}\r\n\r\n",
            )
            for path in sorted(classes.rglob("*")):
                if path.is_file():
                    jar.write(path, path.relative_to(classes).as_posix())
        os.replace(partial, target)


def _quote_arg(arg: str) -> str:
    if any(c.isspace() for c in arg) or '"' in arg:
        return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return arg


def ensure_jar(
    source_dir: Path | None = None, jar_dir: Path | None = None, *, force: bool = False
) -> BuildResult:
    """Return the shim jar for the current sources, compiling it first when it is stale."""
    source_dir = Path(source_dir or default_source_dir())
    jar_dir = Path(jar_dir or default_jar_dir())
    target = jar_path(source_dir, jar_dir)
    if target.is_file() and not force:
        return BuildResult(target, False, 0.0)
    with _lock(jar_dir / ".build.lock"):
        if target.is_file() and not force:  # built by another process meanwhile
            return BuildResult(target, False, 0.0)
        start = time.monotonic()
        compile_jar(source_dir, target)
        elapsed = time.monotonic() - start
        # Drop stale jars, keeping the newest few (a running session may still use one).
        stale = sorted(
            (p for p in jar_dir.glob(f"{JAR_PREFIX}-*.jar") if p != target),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        for old in stale[KEEP_OLD_JARS:]:
            with contextlib.suppress(OSError):
                old.unlink()
    return BuildResult(target, True, elapsed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cogra.spark.shim_build",
        description="Build (if stale) the cogra Spark shim jar and print its path.",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--sources", type=Path, default=None, help="the jvm-shim directory")
    parser.add_argument("--jar-dir", type=Path, default=None, help="where to cache the jar")
    ns = parser.parse_args(argv)
    try:
        result = ensure_jar(ns.sources, ns.jar_dir, force=ns.force)
    except ShimBuildError as e:
        print(str(e), file=sys.stderr)
        return 1
    if result.built:
        print(f"built in {result.seconds:.1f}s", file=sys.stderr)
    print(result.jar)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
