"""Dump the driver JVM's class archive (:mod:`cogra.spark.class_archive`): what
``cogra warm --spark`` and ``make setup`` run.

A fresh process starts a session whose JVM dumps its classes at exit
(``-XX:ArchiveClassesAtExit``), runs the workload below, stops the JVM and waits for the
dump; another fresh process then checks that a new session's driver JVM maps the archive
(an archive no JVM would map is deleted, not kept).  ~40 s on two cores, once per JDK,
pyspark and shim jar.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from cogra.spark.class_archive import (ARCHIVE_PREFIX, QUIET, ClassArchiveError, archive_path, driver_pid,
                                       mapped_archive, quoted_option)

DUMP_SECONDS = 600


# The dump's workload: MATCH_TREND's whole path (the analysis worker, the shim's planning,
# a Parquet scan, a shuffle, a sort, Arrow both ways) for the report's three queries, and
# Spark's own window and aggregate over the same table, each over a few thousand rows.
WORKLOAD_EVENTS = 3_000


def _workload(spark, folder: Path) -> None:  # noqa: ANN001 - a SparkSession
    import pyarrow.parquet as pq

    from cogra.examples import EXAMPLES

    for example in EXAMPLES:
        path = folder / f"{example.name}.parquet"
        pq.write_table(example.data(WORKLOAD_EVENTS, seed=7), path)
        spark.read.parquet(str(path)).createOrReplaceTempView(example.table)
        spark.sql(f"SELECT * FROM MATCH_TREND(TABLE({example.table}), '{example.query}')").collect()
    spark.sql(SPARK_QUERY).toPandas()


SPARK_QUERY = ("SELECT patient, MIN(rate), MAX(rise) FROM (SELECT patient, rate, rate - LAG(rate) "
               "OVER (PARTITION BY patient ORDER BY time) AS rise FROM activity) GROUP BY patient")


def _dump(target: Path) -> None:
    """In this (fresh) process: a session whose JVM dumps its classes to ``target`` at exit,
    the workload, then the JVM's exit, waited for."""
    from pyspark import SparkContext

    from cogra.spark.session import JAVA_OPTIONS, LOG_OPTION, session
    from cogra.spark.workers import wait_warmed_up

    options = " ".join([LOG_OPTION, quoted_option(f"-XX:ArchiveClassesAtExit={target}"), *QUIET])
    spark = session(app_name="cogra-class-archive", master="local[2]", **{JAVA_OPTIONS: options})
    wait_warmed_up(spark)
    with tempfile.TemporaryDirectory(prefix="cogra-class-archive-") as folder:
        _workload(spark, Path(folder))
    process = SparkContext._gateway.proc  # the java process itself (spark-class execs it)
    spark.stop()
    process.stdin.close()  # pyspark's gateway exits the JVM when its input ends
    process.wait(DUMP_SECONDS)


def _check(expected: Path) -> None:
    """In this (fresh) process: whether a session's driver JVM maps ``expected``."""
    from cogra.spark.session import session

    spark = session(app_name="cogra-class-archive-check", master="local[1]", prepare_executors=False)
    try:
        mapped = mapped_archive(driver_pid(spark))
    finally:
        spark.stop()
    if mapped != str(expected):
        raise ClassArchiveError(f"a new driver JVM mapped {mapped or 'no archive'}, not {expected}")


def build(*, force: bool = False, out: TextIO = sys.stderr) -> Path:
    """Dump the archive for the current shim jar and pyspark where it is missing (or
    ``force``), check that a new session maps it, drop older ones; returns its path."""
    from cogra.spark import shim_build

    jar = str(shim_build.ensure_jar().jar)
    target = archive_path(jar)
    if target.is_file() and not force:
        return target
    with shim_build._lock(target.parent / ".class-archive.lock"):
        if target.is_file() and not force:
            return target
        started = time.monotonic()
        partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        done = subprocess.run([sys.executable, "-m", "cogra.spark.archive_dump", "--dump", str(partial)],
                              capture_output=True, text=True, timeout=DUMP_SECONDS + 120)
        if done.returncode or not partial.is_file() or partial.stat().st_size == 0:
            partial.unlink(missing_ok=True)
            raise ClassArchiveError("dumping the driver JVM's class archive failed:\n" + done.stderr[-3000:])
        os.replace(partial, target)
        checked = subprocess.run([sys.executable, "-m", "cogra.spark.archive_dump", "--check", str(target)],
                                 capture_output=True, text=True, timeout=600)
        if checked.returncode:
            target.unlink(missing_ok=True)
            raise ClassArchiveError("the driver JVM's class archive was dumped but a new JVM did not map it:\n"
                                    + checked.stderr[-3000:])
        for old in target.parent.glob(f"{ARCHIVE_PREFIX}*.jsa"):
            if old != target:
                old.unlink(missing_ok=True)  # (a JVM mapping it keeps its pages)
        size = target.stat().st_size / 2**20
        print(f"cogra: the driver JVM's class archive ({size:.0f} MiB) dumped in "
              f"{time.monotonic() - started:.0f} s: {target}", file=out)
    return target


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "--dump":
        _dump(Path(args[1]))
        return 0
    if len(args) == 2 and args[0] == "--check":
        _check(Path(args[1]))
        return 0
    try:
        print(build(force="--force" in args))
    except ClassArchiveError as e:
        print(str(e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["DUMP_SECONDS", "SPARK_QUERY", "WORKLOAD_EVENTS", "build", "main"]
