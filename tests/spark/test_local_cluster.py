"""q1-q3 on a real cluster: ``local-cluster[2,1,1024]`` starts a master, two worker JVMs
with one executor each, and their own Python workers -- nothing shared with the driver's
process but the machine.  The rows equal cogra.evaluate's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys, time, warnings
    import cogra
    from cogra import datasets
    from cogra.examples import Q1, Q2, Q3
    from cogra.spark import session
    sys.path.insert(0, sys.argv[1])
    from tests.spark.rows import same_rows

    spark = session(app_name="cogra-local-cluster", master="local-cluster[2,1,1024]",
                    **{"spark.ui.enabled": "false", "spark.sql.ansi.enabled": "false",
                       "spark.sql.shuffle.partitions": "4"})
    report = {}
    for name, query, data in (("q1", Q1, datasets.activity), ("q2", Q2, datasets.rides),
                              ("q3", Q3, datasets.stock)):
        table = data(6000, seed=7)
        spark.createDataFrame(table.to_pandas()).createOrReplaceTempView(name + "_events")
        sql = "SELECT * FROM MATCH_TREND(TABLE(%s_events), '%s')" % (name, query.replace("'", "''"))
        times = []
        for _ in range(2):
            began = time.perf_counter()
            rows = [tuple(r) for r in spark.sql(sql).collect()]
            times.append(round(time.perf_counter() - began, 2))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = cogra.evaluate(query, table, on_overflow="null")
        want_rows = list(zip(*[want.column(i).to_pylist() for i in range(want.num_columns)]))
        report[name] = {"rows": len(rows), "equal": same_rows(rows, want_rows), "seconds": times}
    report["executors"] = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # not the driver
    from cogra.spark import workers
    report["probes"] = [r.__dict__ for r in workers.prepare(spark)]
    spark.stop()
    print(json.dumps(report))
""")


def test_q1_to_q3_on_a_local_cluster_equal_cogra_evaluate(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT)], capture_output=True, text=True,
                          timeout=900, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["executors"] == 2, report
    for name in ("q1", "q2", "q3"):
        assert report[name]["rows"] > 0 and report[name]["equal"], (name, report)
    # session() prepared the executors: their Python daemons load cogra before forking
    # workers (cogra.spark.workers), so a worker starts with it -- the driver's version,
    # with the kernels compiled ahead of time where the checkout has them.
    import cogra
    from cogra.runtime import kernel_bundle

    assert report["probes"] and all(p["cogra"] == cogra.__version__ and p["error"] is None and p["preloaded"]
                                    for p in report["probes"]), report["probes"]
    assert all(p["bundle"] == kernel_bundle.usable() for p in report["probes"]), report["probes"]


MISSING = textwrap.dedent("""
    import sys
    from cogra.errors import CograError
    from cogra.spark import session
    try:
        session(app_name="cogra-missing", master="local[1]", prepare_executors=True,
                **{"spark.ui.enabled": "false", "spark.pyspark.python": sys.argv[1]})
    except CograError as err:
        print("CograError:", err)
    else:
        print("no error")
""")


@pytest.mark.slow
def test_executors_without_cogra_are_named_at_session_start(tmp_path: Path) -> None:
    # A worker Python that cannot import cogra: the session says so, with the recipe,
    # before any query (not a ModuleNotFoundError inside the first MATCH_TREND task).
    bare = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if Path(p).exists()
                 and subprocess.run([p, "-c", "import cogra"], capture_output=True).returncode), None)
    if bare is None:
        pytest.skip("no Python without cogra on this machine")
    env = dict(os.environ)
    env.pop("PYSPARK_PYTHON", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", MISSING, bare], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env=env)
    out = done.stdout.strip().splitlines()
    assert out and out[-1].startswith("CograError:") and "spark.archives" in out[-1], done.stdout + done.stderr[-3000:]
