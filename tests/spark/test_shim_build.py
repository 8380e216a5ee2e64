"""The offline build of the JVM shim: cache key, staleness, the jar's contents.

Staleness is tested on a temporary copy of ``jvm-shim/`` without compiling it twice; the
only compilation here is of the real sources (skipped when the cached jar is current).
"""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from cogra.spark import shim_build  # noqa: E402


@pytest.fixture()
def shim_copy(tmp_path: Path) -> Path:
    src = shim_build.default_source_dir()
    dst = tmp_path / "jvm-shim"
    shutil.copytree(src / "src", dst / "src")
    return dst


def test_sources_found():
    sources = shim_build.scala_sources(shim_build.default_source_dir())
    names = {p.name for p in sources}
    assert "CograExtensions.scala" in names
    for p in sources:
        assert "package org.apache.spark.sql.cogra" in p.read_text()


def test_digest_is_stable_and_keyed_on_pyspark(shim_copy: Path):
    a = shim_build.source_digest(shim_copy, "4.3.0")
    assert a == shim_build.source_digest(shim_copy, "4.3.0")
    assert a != shim_build.source_digest(shim_copy, "4.3.1")
    assert a != shim_build.source_digest(shim_copy, "4.3.0", compiler="scala-compiler-2.13.19.jar")


def test_jar_is_stale_after_a_source_changes(shim_copy: Path, tmp_path: Path):
    jar_dir = tmp_path / "jars"
    before = shim_build.jar_path(shim_copy, jar_dir)
    assert shim_build.is_stale(shim_copy, jar_dir)
    # Pretend it was built: a jar at the expected path is current.
    jar_dir.mkdir()
    before.write_bytes(b"")
    assert not shim_build.is_stale(shim_copy, jar_dir)

    source = next(iter(shim_build.scala_sources(shim_copy)))
    source.write_text(source.read_text() + "\n// changed\n")
    after = shim_build.jar_path(shim_copy, jar_dir)
    assert after != before
    assert shim_build.is_stale(shim_copy, jar_dir)

    # A new source file changes the key too.
    extra = source.parent / "Extra.scala"
    extra.write_text("package org.apache.spark.sql.cogra\nobject Extra\n")
    assert shim_build.jar_path(shim_copy, jar_dir) not in (before, after)


def test_ensure_jar_uses_the_cache(shim_copy: Path, tmp_path: Path, monkeypatch):
    jar_dir = tmp_path / "jars"
    jar_dir.mkdir()
    target = shim_build.jar_path(shim_copy, jar_dir)
    target.write_bytes(b"cached")

    def no_compile(*args, **kwargs):  # pragma: no cover - must not run
        raise AssertionError("compiled although the jar was current")

    monkeypatch.setattr(shim_build, "compile_jar", no_compile)
    result = shim_build.ensure_jar(shim_copy, jar_dir)
    assert result.jar == target and not result.built


def test_ensure_jar_rebuilds_a_stale_jar_and_drops_old_ones(shim_copy: Path, tmp_path: Path,
                                                            monkeypatch):
    jar_dir = tmp_path / "jars"
    jar_dir.mkdir()
    olds = []
    for i in range(shim_build.KEEP_OLD_JARS + 2):
        old = jar_dir / f"{shim_build.JAR_PREFIX}-0.0.0-{i:016d}.jar"
        old.write_bytes(b"old")
        os.utime(old, (1000 + i, 1000 + i))
        olds.append(old)
    calls = []

    def fake_compile(source_dir: Path, target: Path) -> None:
        calls.append((source_dir, target))
        target.write_bytes(b"new")

    monkeypatch.setattr(shim_build, "compile_jar", fake_compile)
    result = shim_build.ensure_jar(shim_copy, jar_dir)
    assert result.built and calls == [(shim_copy, result.jar)]
    assert result.jar.read_bytes() == b"new"
    kept = [p for p in olds if p.exists()]
    assert kept == olds[-shim_build.KEEP_OLD_JARS:]  # the newest old ones survive


def test_the_real_jar_holds_the_extension():
    """Compiles the shim if the cached jar is stale (about 10 s), else only reads it."""
    result = shim_build.ensure_jar()
    assert result.jar.is_file()
    with zipfile.ZipFile(result.jar) as jar:
        names = set(jar.namelist())
    cls = shim_build.EXTENSION_CLASS.replace(".", "/") + ".class"
    assert cls in names
    assert "META-INF/MANIFEST.MF" in names
    assert not shim_build.is_stale()

    from cogra.spark import EXTENSION

    assert EXTENSION == shim_build.EXTENSION_CLASS


def test_compile_errors_are_reported(shim_copy: Path, tmp_path: Path):
    source = shim_copy / "src" / "main" / "scala" / "Broken.scala"
    source.write_text("package org.apache.spark.sql.cogra\nobject Broken { val x: Int = \"no\" }\n")
    with pytest.raises(shim_build.ShimBuildError, match="Broken.scala"):
        shim_build.compile_jar(shim_copy, tmp_path / "out.jar")
    assert not (tmp_path / "out.jar").exists()
