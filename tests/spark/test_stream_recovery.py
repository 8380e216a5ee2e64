"""Streams run the way they fail: random queries, random micro-batches, the driver killed
with SIGKILL at random moments (mid-batch or between batches) and restarted on its
checkpoints, data added between runs; at the end every closed window of every stream
equals batch evaluation over the same events.

One driver process runs several streams at once (one query each, each with its own
checkpoint and Parquet sink, all over one file source directory), so one kill interrupts
them all at different points.  The queries come from the property generator
(``tests.strategies.queries``: every pattern operator, semantics, predicate class, key
and aggregate), with a window added where the generator drew none.  The sinks are read by
Spark, through their commit logs: a killed batch's files are not part of the output.

Drivers alternate between the streaming operators (``spark.cogra.streaming.operator``)
that are available.  ``make test`` runs one driver (the default operator, one kill);
``-m slow`` runs ``COGRA_RECOVERY_DRIVERS`` drivers (default 40) of ``COGRA_RECOVERY_KILLS``
kills each (default 5): 200 kills."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

import cogra  # noqa: E402
from tests.spark.rows import same_rows  # noqa: E402
from tests.spark.stream_files import OrderedFiles  # noqa: E402
from tests.spark.test_scale import scaled_events  # noqa: E402
from tests.strategies import queries  # noqa: E402

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
DELAY = 3
STREAMS_PER_DRIVER = 3
ROWS = 6000

DRIVER = textwrap.dedent("""
    import json, os, sys, time
    from cogra.spark import session, match_trend
    config = json.loads(sys.argv[1])
    root = config["root"]
    spark = session(master="local[2]", **{"spark.sql.shuffle.partitions": "3",
                                          "spark.sql.ansi.enabled": "false",
                                          "spark.cogra.streaming.operator": config["operator"]})
    spark.sparkContext.setLogLevel("ERROR")
    schema = spark.read.parquet(root + "/schema.parquet").schema
    writers = []
    for i, query in enumerate(config["queries"]):
        stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 2).parquet(root + "/in")
        writers.append(match_trend(stream, query, watermark=f"{config['delay']} seconds").writeStream
                       .format("parquet").option("path", f"{root}/out{i}")
                       .option("checkpointLocation", f"{root}/checkpoint{i}").start())
    print("started", flush=True)
    while True:
        done = os.path.exists(root + "/done")
        for w in writers:
            w.processAllAvailable()
        print("batch", flush=True)
        if done:
            for w in writers:
                w.stop()
            print("finished", flush=True)
            break
        time.sleep(0.1)
""")


OPERATORS = ("packed", "transformWithState")


@dataclass(frozen=True)
class RecoveryCase:
    queries: tuple[str, ...]
    seed: int
    kills: int
    operator: str


def windowed(text: str, rng: random.Random) -> str:
    """The query with a window (a stream needs WITHIN): the generator's, else a drawn one."""
    if "WITHIN" in text:
        return text
    size = rng.randint(2, 8)
    slide = rng.randint(1, size)
    return text + f"\nWITHIN {size} seconds" + (f" SLIDE {slide} seconds" if slide != size else "")


def draw_cases(drivers: int, kills: int, random_seed: int, spreads: bool = False) -> list[RecoveryCase]:
    """``spreads``: every query holds a VAR_*/STDDEV_* aggregate (held streams)."""
    texts: list[str] = []

    @seed(random_seed)
    @settings(max_examples=drivers * STREAMS_PER_DRIVER, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(queries(spreads=spreads))
    def collect(q) -> None:
        texts.append(q.text)

    collect()
    rng = random.Random(random_seed)
    texts = [windowed(t, rng) for t in texts]
    starts = range(0, len(texts) - STREAMS_PER_DRIVER + 1, STREAMS_PER_DRIVER)
    return [RecoveryCase(tuple(texts[i:i + STREAMS_PER_DRIVER]), random_seed * 1000 + i, kills,
                         OPERATORS[k % len(OPERATORS)])
            for k, i in enumerate(starts)][:drivers]


def events(case: RecoveryCase) -> pa.Table:
    types = sorted({t for q in case.queries for t in cogra.parse(q).event_types})
    return scaled_events(ROWS, tuple(types), case.seed)


def failure(log: Path) -> str:
    """The Python traceback or Java exception that ended a driver, from its stderr."""
    text = log.read_text(errors="replace") if log.exists() else ""
    lines = [line for line in text.splitlines() if "WARN" not in line]
    return "\n".join(lines[-40:])


def run_case(spark, case: RecoveryCase, root: Path) -> None:
    rng = random.Random(case.seed)
    table = events(case)
    (root / "in").mkdir(parents=True)
    pq.write_table(table.slice(0, 1), root / "schema.parquet")
    cuts = sorted(rng.sample(range(1, ROWS), rng.randint(8, 20)))
    parts = [table.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, ROWS])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(ROOT)]),
           "COGRA_GENERATED_KERNELS": "0", "COGRA_BACKGROUND_COMPILE": "0"}
    config = json.dumps({"root": str(root), "queries": list(case.queries), "delay": DELAY,
                         "operator": case.operator})
    written = 0
    log = []
    files = OrderedFiles(root / "in")

    def write(n: int) -> None:
        nonlocal written
        for part in parts[written:written + n]:
            files.add(part, f"p{written:03}.parquet")
            written += 1

    def start() -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", DRIVER, config], stdout=subprocess.PIPE,
                                stderr=open(root / "driver.err", "a"), text=True, env=env, start_new_session=True)
        deadline = time.monotonic() + 240
        while (line := proc.stdout.readline()) != "started\n":
            assert line and time.monotonic() < deadline, f"the driver did not start ({case})"
        return proc

    for run in range(case.kills):
        proc = start()
        try:
            write(rng.randint(1, max(1, (len(parts) - written) // (case.kills - run + 1))))
            moment = rng.uniform(0.2, 4.0)  # mid-batch, or between batches
            log.append(f"run {run}: {written} files, kill after {moment:.1f} s")
            time.sleep(moment)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    proc = start()
    try:
        write(len(parts) - written)
        (root / "done").touch()
        deadline = time.monotonic() + 600
        while (line := proc.stdout.readline()) != "finished\n":
            assert line and time.monotonic() < deadline, (f"the last run did not finish ({case})\n"
                                                          + failure(root / "driver.err"))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    times = table["time"]
    watermark = int(pc.max(times).as_py()) - DELAY
    for i, query in enumerate(case.queries):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cogra.CograDataWarning)
            want = cogra.evaluate(query, table, on_overflow="null")
        want = want.filter(pc.less_equal(want["window_end"], watermark))
        columns = want.column_names
        out = root / f"out{i}"
        got = ([tuple(r) for r in spark.read.parquet(str(out)).select(*[f"`{c}`" for c in columns]).collect()]
               if (out / "_spark_metadata").exists() else [])
        rows = [tuple(r.values()) for r in want.to_pylist()]
        assert same_rows(got, rows), (f"stream {i} of {case}: {len(got)} rows, batch {len(rows)}\n"
                                      f"query:\n{query}\n" + "\n".join(log))


@pytest.mark.parametrize("case", draw_cases(1, 1, 46) + draw_cases(1, 1, 47, spreads=True),
                         ids=lambda c: f"{c.operator}-seed{c.seed}")
def test_killed_and_restarted_streams_equal_batch(spark, tmp_path, case):
    run_case(spark, case, tmp_path)


SLOW_DRIVERS = int(os.environ.get("COGRA_RECOVERY_DRIVERS", "40"))
SLOW_KILLS = int(os.environ.get("COGRA_RECOVERY_KILLS", "5"))


@pytest.mark.slow
@pytest.mark.parametrize("case", draw_cases(SLOW_DRIVERS, SLOW_KILLS, 4600), ids=lambda c: f"{c.operator}-seed{c.seed}")
def test_killed_and_restarted_streams_equal_batch_more(spark, tmp_path, case):
    run_case(spark, case, tmp_path)
