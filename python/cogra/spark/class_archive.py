"""A class data archive for the driver JVM that :func:`cogra.spark.session` starts.

A new driver JVM loads, verifies and links ~18,000 classes (Spark, Scala, Hadoop, Arrow,
Parquet, the shim) before ``session()`` returns and ~4,000 more in its first query.  The
JDK can map classes it already parsed and verified from a file instead (application
class data sharing, ``-XX:SharedArchiveFile``); a dynamic archive is dumped by a JVM at
its exit (``-XX:ArchiveClassesAtExit``) with every class it loaded from the class path.

``cogra warm --spark`` (run by ``make setup``; :mod:`cogra.spark.archive_dump`) dumps
the archive beside the shim jar, named by :func:`archive_key`.  :func:`java_options` gives
the option to a driver JVM about to start (``session()``'s, a server's) only where the
archive of this key exists: the key covers what decides the class path the JDK checks
the archive against (the JVM's build, Spark's jars, the shim jar, the class path entries
and environment Spark's launcher adds), so no driver is pointed at an archive it would
refuse.  (A refused archive costs the JDK's own one too: its classes load from the jars.)

Measured on a 2-core machine: ``session()`` 3.6-4.2 s against 5.5-6.8 s without.  Why not
more: Janino's jars are signed and the JDK keeps signed classes out of an archive, code
generated per query is never in one, and JDK 17 has no cache of JIT-compiled code (what
most of a first query's extra time is, see ARCHITECTURE).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Sequence

#: Bump when the dump's workload or the archive's use changes, so archives are rebuilt.
ARCHIVE_FORMAT = "1"
ARCHIVE_PREFIX = "cogra-driver-"
#: Quiet about an archive the JVM refuses (the key makes that rare; it costs speed only).
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
#: What Spark's launcher reads to build a driver's class path besides its jars.
LAUNCHER_ENV = ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH",
                "SPARK_PREPEND_CLASSES", "SPARK_SCALA_VERSION")


class ClassArchiveError(RuntimeError):
    """The archive could not be dumped, or a new JVM did not map it."""


def _stat(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return f"{path}:missing"
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


def archive_key(jar: str, extra_class_path: Sequence[str] = ()) -> str:
    """A hash of what the JDK checks a dynamic archive against, as far as Python can tell
    before the JVM starts: the ``java`` Spark's launcher runs and its ``libjvm.so``, every
    jar of the Spark it launches (``$SPARK_HOME``, else pyspark's; name, size, modification
    time), the driver's extra class path entries and the shim jar, and the launcher's
    environment."""
    from cogra.spark import shim_build

    java = Path(os.path.realpath(shim_build.java_executable()))
    h = hashlib.sha256(f"format={ARCHIVE_FORMAT}\n".encode())
    h.update((_stat(java) + "\n").encode())
    for libjvm in sorted(java.parent.parent.glob("lib/server/libjvm.*")):
        h.update((_stat(libjvm) + "\n").encode())
    home = Path(os.environ.get("SPARK_HOME") or shim_build.pyspark_home())
    h.update(f"spark={home.resolve()}\n".encode())
    for name in LAUNCHER_ENV:
        h.update(f"{name}={os.environ.get(name, '')}\n".encode())
    jars = home / "jars" if os.environ.get("SPARK_HOME") else shim_build.pyspark_jars_dir()
    for entry in sorted(os.scandir(jars), key=lambda e: e.name):
        h.update((_stat(Path(entry.path)) + "\n").encode())
    for path in [*extra_class_path, jar]:
        h.update((_stat(Path(path)) + "\n").encode())
    return h.hexdigest()[:16]


def archive_path(jar: str, extra_class_path: Sequence[str] = ()) -> Path:
    """Where the archive for this class path lives (dumped or not): beside the shim jar."""
    return Path(jar).parent / f"{ARCHIVE_PREFIX}{archive_key(jar, extra_class_path)}.jsa"


def quoted_option(option: str) -> str:
    """``option`` as one argument of Spark's ``extraJavaOptions`` (split at white space)."""
    return f'"{option}"' if any(c.isspace() for c in option) else option


#: From this heap on the JVM stores full object pointers, and an archive dumped by a JVM
#: with compressed ones does not map (the dump's driver has Spark's default 1g).
COMPRESSED_OOPS_LIMIT = 32 * 2**30


def memory_bytes(value: str) -> int | None:
    """A Spark memory setting (``spark.driver.memory``: ``"4g"``, ``"512m"``; a bare number
    is MiB) in bytes, or None where it does not read as one."""
    text = value.strip().lower().removesuffix("b")
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}
    scale = units.get(text[-1:], None)
    number = text[:-1] if scale else text
    try:
        return int(float(number) * (scale or 2**20))
    except ValueError:
        return None


def java_options(jar: str, extra_class_path: Sequence[str] = (), driver_memory: str | None = None) -> str:
    """The driver JVM's options to map the archive of this class path (a session's driver,
    or a Thrift or Connect server's: :mod:`cogra.spark.servers`), or ``""`` where
    none was dumped, where ``driver_memory`` is a heap the archive cannot serve (32 GiB or
    more), or with ``COGRA_CLASS_ARCHIVE=0``."""
    if os.environ.get("COGRA_CLASS_ARCHIVE", "1") == "0":
        return ""
    heap = memory_bytes(driver_memory) if driver_memory else None
    if heap is not None and heap >= COMPRESSED_OOPS_LIMIT:
        return ""
    try:
        path = archive_path(jar, extra_class_path)
    except Exception:  # noqa: BLE001 - no java or pyspark to key by: the session reports that itself
        return ""
    if not path.is_file():
        return ""
    return " ".join([quoted_option(f"-XX:SharedArchiveFile={path}"), *QUIET])


def mapped_archive(pid: int) -> str | None:
    """The ``.jsa`` file process ``pid`` maps besides the JDK's own (Linux), or None."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        fields = line.split(None, 5)
        path = fields[5] if len(fields) == 6 else ""
        if path.endswith(".jsa") and Path(path).name.startswith(ARCHIVE_PREFIX):
            return path
    return None


def driver_pid(spark) -> int:  # noqa: ANN001 - a SparkSession
    """The process id of ``spark``'s driver JVM."""
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


__all__ = ["ARCHIVE_FORMAT", "ARCHIVE_PREFIX", "COMPRESSED_OOPS_LIMIT", "ClassArchiveError", "QUIET", "archive_key",
           "archive_path", "driver_pid", "java_options", "mapped_archive", "memory_bytes", "quoted_option"]
