"""What a new application's first MATCH_TREND waits for, started by ``cogra.spark.session``
on a local master without holding the session back (cogra.spark.workers)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")


def test_a_local_session_starts_its_python_workers_in_the_background(spark) -> None:
    """The daemon that loads cogra and the bundle before forking workers is set for a
    local master too, and the warm-up (analysis worker, one probe task per core) runs in
    threads: once it ends, every task's worker starts with cogra imported."""
    from cogra.spark import workers

    assert spark.sparkContext.getConf().get("spark.python.daemon.module") == workers.DAEMON_MODULE
    assert workers.wait_warmed_up(spark, timeout=300)
    n = spark.sparkContext.defaultParallelism
    found = [workers.ExecutorReport(*r) for r in workers.probe_tasks(spark, n)]
    assert len(found) == n and all(r.preloaded and r.cogra for r in found), found


def test_the_probe_starts_the_daemon_matchtrends_tasks_fork_from(spark) -> None:
    """The probe is an RDD job (its task starts seconds sooner than a SQL job's on a new
    application), carrying the SQL runners' worker environment: Spark keeps a daemon per
    environment, so a SQL job's Python workers (``mapInArrow``, as MATCH_TREND's UDTF) are
    forked by the daemon the probe started, not by a second one."""
    import os

    from cogra.spark import workers

    n = spark.sparkContext.defaultParallelism
    probed = {workers.ExecutorReport(*r).daemon for r in workers.probe_tasks(spark, n)}

    def parent(batches):
        import os as _os

        import pyarrow as pa

        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"daemon": [_os.getppid()]})

    sql = {r.daemon for r in spark.range(0, n, 1, n).mapInArrow(parent, "daemon long").collect()}
    assert len(probed) == 1 and sql == probed, (probed, sql)
    assert os.getpid() not in probed


def test_without_the_sql_environment_an_rdd_job_gets_another_daemon(spark) -> None:
    """What the probe's environment is for: a plain RDD job's workers come from another
    daemon than a SQL job's (so the test above can fail)."""
    from cogra.spark import workers

    n = spark.sparkContext.defaultParallelism
    probed = {workers.ExecutorReport(*r).daemon for r in workers.probe_tasks(spark, n)}
    plain = set(spark.sparkContext.parallelize(range(n), n).mapPartitions(
        lambda rows: [__import__("os").getppid()]).collect())
    assert plain and not plain & probed


def test_session_registers_no_python_data_source(spark, monkeypatch) -> None:
    """A JVM's first Python data source costs 1.7 s (Spark's lookup of installed ones):
    ``session()`` leaves the data-set sources to ``cogra.spark.sources.register``."""
    from cogra.spark import session, sources

    calls = []
    monkeypatch.setattr(sources, "register", lambda s: calls.append(s))
    monkeypatch.setattr(type(spark.dataSource), "register", lambda self, source: calls.append(source))
    again = session(app_name="cogra-tests", master="local[2]", prepare_executors=False)
    assert again is spark and calls == []


def test_a_worker_that_could_not_start_says_where_to_look() -> None:
    """A Python worker that failed to start for another reason than a missing cogra: the
    message sends the user to the log of the process that tried -- the driver's analysis
    worker or an executor's."""
    from cogra.errors import CograError
    from cogra.spark import workers

    err = RuntimeError("org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)\nEOFError")
    driver = workers._could_not_start(err, "the driver")
    executors = workers._could_not_start(err, "executors")
    assert isinstance(driver, CograError) and isinstance(executors, CograError)
    assert str(driver).startswith("the driver could not start a Python worker with cogra")
    assert "see the driver's log" in str(driver) and "executors' logs" not in str(driver)
    assert "see the executors' logs" in str(executors)
    missing = workers._could_not_start(RuntimeError("ModuleNotFoundError: No module named 'cogra'"), "executors")
    assert workers.RECIPE in str(missing)
