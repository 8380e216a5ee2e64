"""The README's Spark examples run exactly as printed, on the 100k generated rows its Python
example creates, and their rows equal :func:`cogra.evaluate`'s.

They run in a fresh interpreter, as a user would paste them: the Python blocks that use
``cogra.spark`` in order, then every SQL block that calls MATCH_TREND.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def readme_blocks(language: str, needle: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    return [body for lang, body in BLOCK.findall(text) if lang == language and needle in body]


CHECK = textwrap.dedent('''
    import json, re, warnings
    import pyarrow as pa
    import cogra
    from tests.spark.rows import same_rows

    def check(sql):
        query = re.search(r"MATCH_TREND\\(TABLE\\((\\w+)\\), '(.*)'\\)", sql, re.S)
        got = [tuple(r) for r in spark.sql(sql).collect()]
        table = spark.table(query.group(1)).toArrow()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cogra.CograDataWarning)
            want = cogra.evaluate(query.group(2), table)
        rows = list(zip(*[want.column(i).to_pylist() for i in range(want.num_columns)]))
        return {"rows": len(got), "same": same_rows(got, rows)}
''')


def test_readme_spark_examples_run_as_printed(tmp_path):
    python = readme_blocks("python", "cogra.spark")
    sql = readme_blocks("sql", "MATCH_TREND")
    assert python and sql, "the README lost its Spark examples"
    script = "\n".join([*python, CHECK, f"SQL = {json.dumps(sql)}",
                        'print("RESULTS", json.dumps([check(s) for s in SQL]))'])
    path = tmp_path / "readme_examples.py"
    path.write_text(script)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "COGRA_GENERATED_KERNELS": "0", "COGRA_BACKGROUND_COMPILE": "0"}
    done = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-5000:]}"
    # The Python block's .show() calls printed tables with rows.
    assert done.stdout.count("+----") >= 4, done.stdout[-3000:]
    assert re.search(r"^[1-9]\d* closed windows$", done.stdout, re.M), done.stdout[-2000:]  # streaming
    results = json.loads(done.stdout.split("RESULTS", 1)[1])
    assert all(r["rows"] > 0 and r["same"] for r in results), results


def test_readme_command_line_examples_run_as_printed(tmp_path):
    """``cogra data ./data --events 100000`` and ``cogra sql --data ./data -f sql/q1.sql``
    from the README's command-line block (the servers' lines start servers: tested in
    test_servers.py), in a directory holding the repository's ``sql/``."""
    block = next(body for lang, body in BLOCK.findall((ROOT / "README.md").read_text())
                 if lang == "bash" and "cogra sql" in body)
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()
                if line.startswith(("cogra data", "cogra sql --data"))]
    assert [c.split()[:2] for c in commands] == [["cogra", "data"], ["cogra", "sql"]], commands
    (tmp_path / "sql").symlink_to(ROOT / "sql")
    cogra_command = str(Path(sys.executable).with_name("cogra"))
    env = {**os.environ, "COGRA_GENERATED_KERNELS": "0", "COGRA_BACKGROUND_COMPILE": "0"}
    for command in commands:
        argv = [cogra_command, *command.split()[1:]]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{command}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    rows = re.search(r"^\(([\d,]+) rows, ", done.stdout, re.M)  # q1's summary line
    assert rows and int(rows.group(1).replace(",", "")) > 100, done.stdout[-2000:]
