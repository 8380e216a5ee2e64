"""The driver JVM's class archive (cogra.spark.class_archive): keyed by the class path the
JDK checks it against, given to a new driver JVM only where it exists, and mapped."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from cogra.spark import archive_dump, class_archive, shim_build
from cogra.spark.session import jar_path


def test_the_sessions_driver_jvm_maps_the_archive_setup_dumped(spark) -> None:
    if os.environ.get("COGRA_WARM") == "0":
        pytest.skip("setup dumped no archive (COGRA_WARM=0)")
    archive = class_archive.archive_path(jar_path())
    assert archive.is_file(), "make setup dumps the archive (cogra warm --spark)"
    assert class_archive.mapped_archive(class_archive.driver_pid(spark)) == str(archive)


def test_options_name_the_archive_only_where_one_exists_for_the_class_path(tmp_path, monkeypatch) -> None:
    jar = tmp_path / "cogra-shim.jar"
    jar.write_bytes(b"jar")
    assert class_archive.java_options(str(jar)) == ""
    archive = class_archive.archive_path(str(jar))
    archive.write_bytes(b"archive")
    options = class_archive.java_options(str(jar))
    assert options.split()[0] == f"-XX:SharedArchiveFile={archive}"
    assert set(options.split()[1:]) == set(class_archive.QUIET)
    # A user's own class path entry is another class path: not this archive.
    other = tmp_path / "udfs.jar"
    other.write_bytes(b"udfs")
    assert class_archive.java_options(str(jar), [str(other)]) == ""
    monkeypatch.setenv("COGRA_CLASS_ARCHIVE", "0")
    assert class_archive.java_options(str(jar)) == ""


def test_a_path_with_a_space_stays_one_option(tmp_path) -> None:
    folder = tmp_path / "with space"
    folder.mkdir()
    jar = folder / "cogra-shim.jar"
    jar.write_bytes(b"jar")
    class_archive.archive_path(str(jar)).write_bytes(b"archive")
    options = class_archive.java_options(str(jar))
    assert options.startswith('"-XX:SharedArchiveFile=') and str(folder) in options


def test_the_key_follows_what_the_jdk_checks(tmp_path, monkeypatch) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    for name in ("spark-core.jar", "janino.jar"):
        (jars / name).write_bytes(name.encode())
    monkeypatch.setattr(shim_build, "pyspark_jars_dir", lambda: jars)
    jar = tmp_path / "cogra-shim.jar"
    jar.write_bytes(b"jar")
    key = class_archive.archive_key(str(jar))
    assert class_archive.archive_key(str(jar)) == key
    os.utime(jars / "janino.jar", ns=(1, 1))  # a jar replaced by another of the same name
    changed_jar = class_archive.archive_key(str(jar))
    assert changed_jar != key
    (jars / "extra.jar").write_bytes(b"x")  # a jar added to pyspark's
    added = class_archive.archive_key(str(jar))
    assert added != changed_jar
    monkeypatch.setenv("SPARK_DIST_CLASSPATH", "/opt/hadoop/*")  # the launcher's class path
    assert class_archive.archive_key(str(jar)) != added
    monkeypatch.delenv("SPARK_DIST_CLASSPATH")
    jar.write_bytes(b"a rebuilt shim")
    assert class_archive.archive_key(str(jar)) != added


def test_a_driver_about_to_start_gets_the_archive_unless_the_user_set_java_options(tmp_path, monkeypatch) -> None:
    import importlib

    from pyspark import SparkContext

    session_module = importlib.import_module("cogra.spark.session")  # (the package exports the function)

    monkeypatch.setattr(SparkContext, "_jvm", None)  # (as before the first session)
    monkeypatch.setattr(class_archive, "java_options",
                        lambda jar, extra=(), memory=None: f"ARCHIVE:{len(extra)}:{memory}")
    monkeypatch.delenv("JAVA_TOOL_OPTIONS", raising=False)
    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    started = session_module._driver_start("local[2]", {})
    options = started["spark.driver.extraJavaOptions"].split()
    assert options[0] == "ARCHIVE:0:None" and options[1].startswith("-Dlog4j2.configurationFile=")
    with_path = session_module._driver_start("local[2]", {"spark.driver.extraClassPath": "/a.jar:/b.jar",
                                                          "spark.driver.memory": "4g"})
    assert with_path["spark.driver.extraJavaOptions"].startswith("ARCHIVE:2:4g ")
    own = {"spark.driver.extraJavaOptions": "-Xss4m"}
    assert session_module._driver_start("local[2]", own) == own
    # Options in Spark's defaults file: a builder setting would replace them, so none is added.
    (conf / "spark-defaults.conf").write_text("# site settings\nspark.driver.extraJavaOptions  -Dsite=1\n")
    assert "spark.driver.extraJavaOptions" not in session_module._driver_start("local[2]", {})
    (conf / "spark-defaults.conf").write_text("spark.driver.memory=2g\n")
    assert "spark.driver.extraJavaOptions" in session_module._driver_start("local[2]", {})


def test_a_heap_of_32_gib_or_more_gets_no_archive(tmp_path) -> None:
    """From 32 GiB on the JVM's object pointers are not compressed and the archive (dumped
    by a 1g driver) would not map: a refused archive costs the JDK's own too."""
    jar = tmp_path / "cogra-shim.jar"
    jar.write_bytes(b"jar")
    class_archive.archive_path(str(jar)).write_bytes(b"archive")
    assert class_archive.java_options(str(jar), driver_memory="31g")
    assert class_archive.java_options(str(jar), driver_memory="32g") == ""
    assert class_archive.java_options(str(jar), driver_memory="40960") == ""  # MiB
    assert [class_archive.memory_bytes(v) for v in ("1g", "512m", "2048", "1.5G", "4gb", "lots")] == [
        2**30, 2**29, 2**31, 3 * 2**29, 2**32, None]


def test_mapped_archive_reads_this_processs_maps() -> None:
    assert class_archive.mapped_archive(os.getpid()) is None  # (Python maps no archive)
    assert class_archive.mapped_archive(2**22 + 7) is None  # no such process


@pytest.mark.slow
def test_build_dumps_checks_and_replaces_the_archive(tmp_path, monkeypatch) -> None:
    """The whole dump (a session, the workload, the JVM's exit) and the check that a new
    JVM maps it, into a jar folder of its own; an older archive there is dropped."""
    jar = jar_path()
    folder = tmp_path / "jars"
    folder.mkdir()
    shutil.copy2(jar, folder / Path(jar).name)
    monkeypatch.setenv("COGRA_JAR_DIR", str(folder))
    old = folder / f"{class_archive.ARCHIVE_PREFIX}0000000000000000.jsa"
    old.write_bytes(b"older")
    built = archive_dump.build()
    assert built == class_archive.archive_path(str(folder / Path(jar).name))
    assert built.stat().st_size > 10 * 2**20
    assert not old.exists()
    assert archive_dump.build() == built  # present: nothing to do


def test_a_servers_driver_gets_the_archive_unless_its_java_options_are_set(tmp_path) -> None:
    from cogra.spark import servers

    jar = tmp_path / "cogra-shim.jar"
    jar.write_bytes(b"jar")
    spec = servers.ServerSpec("thrift", port=10001)
    assert "spark.driver.extraJavaOptions" not in servers.settings(spec, str(jar))
    archive = class_archive.archive_path(str(jar))
    archive.write_bytes(b"archive")
    assert servers.settings(spec, str(jar))["spark.driver.extraJavaOptions"].startswith(
        f"-XX:SharedArchiveFile={archive} ")
    own = servers.ServerSpec("thrift", port=10001, conf={"spark.driver.extraJavaOptions": "-Xss4m"})
    assert servers.settings(own, str(jar))["spark.driver.extraJavaOptions"] == "-Xss4m"
