"""The streaming operator run the way it fails below the driver: Python workers killed
mid-batch (their tasks retried by Spark), and a long run whose memory must stay flat.

* A driver on ``local[2,4]`` (each task may fail three times) streams three queries -- two
  held (one with VAR_POP and STDDEV), one carried -- over files arriving one per micro-batch; the test kills the Python
  workers' processes whenever a micro-batch is running.  Spark retries the failed tasks
  from the state store's last committed version; every closed window must equal batch, and
  the application's stages must show the failed and retried tasks.
* 60 micro-batches of 5,000 rows through q3's shape: the driver's heap (after a full GC)
  and the Python workers' resident memory stay flat between the 20th and the 60th
  micro-batch, as does the operator's state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")

import cogra  # noqa: E402
from tests.spark.rows import same_rows  # noqa: E402
from tests.spark.stream_files import OrderedFiles  # noqa: E402
from tests.spark.test_streaming import CARRIED, DELAY, MIXED, closed_rows, events  # noqa: E402

pytestmark = pytest.mark.spark

# The spreads (held: the kernels carry no sums of squares) through the same failures.
SPREAD = ("RETURN sector, COUNT(*), VAR_POP(A.price), STDDEV(B.volume) PATTERN SEQ(Stock A+, Stock B) "
          "WHERE [company] GROUP-BY sector WITHIN 10 seconds SLIDE 5 seconds")

ROOT = Path(__file__).resolve().parents[2]

DRIVER = textwrap.dedent("""
    import json, os, sys, threading, time, urllib.request
    from cogra.spark import session, match_trend
    root, queries = sys.argv[1], json.loads(sys.argv[2])
    spark = session(master="local[2,4]", **{"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "true",
                                           "spark.ui.port": "0", "spark.sql.ansi.enabled": "false"})
    spark.sparkContext.setLogLevel("OFF")
    schema = spark.read.parquet(root + "/schema.parquet").schema
    writers = []
    for i, query in enumerate(queries):
        stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(root + "/in")
        writers.append(match_trend(stream, query, watermark="%d seconds").writeStream
                       .format("parquet").option("path", f"{root}/out{i}")
                       .option("checkpointLocation", f"{root}/checkpoint{i}").start())
    def report():  # whether a micro-batch runs, for the test to kill workers then
        while True:
            active = any(w.isActive and w.status.get("isTriggerActive") for w in writers)
            with open(root + "/active.tmp", "w") as f:
                f.write("1" if active else "0")
            os.replace(root + "/active.tmp", root + "/active")
            time.sleep(0.02)
    threading.Thread(target=report, daemon=True).start()
    print("started", flush=True)
    while not os.path.exists(root + "/done"):
        time.sleep(0.2)
    for w in writers:
        w.processAllAvailable()
        w.stop()
    stages = json.load(urllib.request.urlopen(
        spark.sparkContext.uiWebUrl + f"/api/v1/applications/{spark.sparkContext.applicationId}/stages"))
    print("failed tasks", sum(s.get("numFailedTasks", 0) for s in stages), flush=True)
""" % DELAY)


def python_workers(driver: int) -> list[int]:
    """The forked Python workers under ``driver``: children of its Python daemon
    (``pyspark.daemon``, or ``cogra.spark.daemon``, which ``cogra.spark.session`` sets)."""
    def children(pid: int) -> list[int]:
        found = []  # (each thread's children: the JVM starts processes from other threads)
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:  # the process ended meanwhile
            return found
        for task in tasks:
            try:
                found += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
        return found

    def cmdline(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return ""

    def daemon(command: str) -> bool:
        """A Python process running the daemon module (``python -m MODULE``) -- not the JVM,
        whose command line names the module in its Spark settings."""
        args = command.split()
        return any(a == "-m" and b in ("pyspark.daemon", "cogra.spark.daemon") for a, b in zip(args, args[1:]))

    seen, stack, workers = set(), [driver], []
    while stack:
        pid = stack.pop()
        for child in children(pid):
            if child in seen:
                continue
            seen.add(child)
            stack.append(child)
            if daemon(cmdline(child)) and daemon(cmdline(pid)):
                workers.append(child)  # a fork of the daemon: a worker
    return workers


def test_killed_python_workers_and_their_retried_tasks_equal_batch(tmp_path):
    table = events(3000)
    parts = [table.slice(i, 375) for i in range(0, table.num_rows, 375)]
    (tmp_path / "in").mkdir()
    pq.write_table(table.slice(0, 1), tmp_path / "schema.parquet")
    queries = [MIXED, CARRIED, SPREAD]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(ROOT)]),
           "PYSPARK_PYTHON": sys.executable, "COGRA_GENERATED_KERNELS": "0", "COGRA_BACKGROUND_COMPILE": "0"}
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path), json.dumps(queries)],
                            stdout=subprocess.PIPE, stderr=open(tmp_path / "driver.log", "w"), text=True, env=env,
                            start_new_session=True)
    kills = 0
    try:
        assert proc.stdout.readline() == "started\n"
        files = OrderedFiles(tmp_path / "in")
        for i, part in enumerate(parts):
            files.add(part, f"p{i:03}.parquet")
            if i % 3 == 1:  # every third file: kill the workers once a micro-batch runs
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    active = (tmp_path / "active").exists() and (tmp_path / "active").read_text() == "1"
                    workers = python_workers(proc.pid) if active else []
                    if workers:
                        time.sleep(0.05)
                        for pid in python_workers(proc.pid):
                            try:
                                os.kill(pid, signal.SIGKILL)
                                kills += 1
                            except ProcessLookupError:
                                pass
                        break
                    time.sleep(0.01)
            time.sleep(0.3)
        (tmp_path / "done").touch()
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, (out, (tmp_path / "driver.log").read_text()[-3000:])
    failed = int(out.split("failed tasks")[-1])
    assert kills >= 3 and failed >= 1, (kills, out)
    for i, query in enumerate(queries):
        columns = cogra.result_schema(query, table.schema).names
        got = [tuple(r.values()) for r in pq.read_table(tmp_path / f"out{i}").select(columns).to_pylist()]
        want = closed_rows(query, table)
        assert len(want) > 50 and same_rows(got, want), query


def _resident_kb(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


@pytest.mark.slow
def test_sixty_micro_batches_keep_memory_flat(spark, tmp_path):
    from pyspark.sql.streaming import StreamingQueryListener

    from cogra.spark import match_trend

    table = events(300_000)
    (tmp_path / "in").mkdir()
    for i in range(60):
        path = tmp_path / "in" / f"p{i:03}.parquet"
        pq.write_table(table.slice(i * 5000, 5000), path)
        os.utime(path, ns=(10**18 + i * 10**7,) * 2)
    jvm = spark.sparkContext._jvm
    samples: list[tuple[int, int, int, int]] = []  # (batch, driver heap, workers' RSS, state bytes written)

    class Sample(StreamingQueryListener):
        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            progress = json.loads(event.progress.json)
            if not progress["numInputRows"]:
                return
            jvm.System.gc()
            runtime = jvm.java.lang.Runtime.getRuntime()
            workers = [p for p in python_workers(os.getpid())]
            samples.append((progress["batchId"], runtime.totalMemory() - runtime.freeMemory(),
                            _resident_kb(workers),
                            progress["stateOperators"][0]["customMetrics"]["rocksdbTotalBytesWritten"]))

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    listener = Sample()
    spark.streams.addListener(listener)
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        stream = spark.readStream.schema(spark.read.parquet(str(tmp_path / "in")).schema) \
            .option("maxFilesPerTrigger", 1).parquet(str(tmp_path / "in"))
        writer = (match_trend(stream, MIXED, watermark=f"{DELAY} seconds").writeStream.format("noop")
                  .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        try:
            writer.processAllAvailable()
        finally:
            writer.stop()
        time.sleep(1)  # the listener's last events
    finally:
        spark.streams.removeListener(listener)
        spark.conf.set("spark.sql.ansi.enabled", "true")
    samples.sort()
    assert len(samples) >= 58, samples
    early, late = samples[19], samples[-1]
    assert late[1] - early[1] < 64 * 2**20, samples  # the driver's heap after a full GC
    assert late[2] - early[2] < 64 * 1024, samples  # the workers' resident memory (kB)
    # The state written per micro-batch (the groups' snapshots: their open windows' rows)
    # stays where it was; state kept past its windows would grow it threefold by the end.
    written = [w for *_, w in samples]
    assert sum(written[-10:]) < 1.5 * sum(written[15:25]), written
