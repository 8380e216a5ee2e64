"""``cogra data``, ``cogra sql`` (statements and ``-f`` files), ``cogra shim`` and the Spark
demo, on a tiny data directory.

Most commands run in this process through ``cogra.cli.main`` and reuse the tests' session
(``cogra sql`` uses an active session that has the extension); one runs as a real
subprocess, to cover the entry point, a fresh session and ``sql/setup.sql``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")

import cogra  # noqa: E402
from cogra import cli  # noqa: E402
from cogra.examples import EXAMPLES  # noqa: E402
from cogra.spark import cli as spark_cli  # noqa: E402 - registers the subcommands
from cogra.spark.sqlscript import (  # noqa: E402
    ScriptError,
    parse_definitions,
    resolve,
    split_statements,
    substitute,
)

ROOT = Path(__file__).resolve().parents[2]
SQL = ROOT / "sql"
EVENTS = 400
VIEWS = ("activity", "rides", "stock", "transport")


def expected_rows(name: str, data: Path) -> int:
    ex = next(e for e in EXAMPLES if e.name == name)
    table = pq.read_table(data / ex.table)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        return cogra.evaluate(ex.query, table).num_rows


def printed_rows(text: str) -> list[int]:
    """The row counts that ``cogra sql`` printed, one per result."""
    return [int(n.replace(",", "")) for n in re.findall(r"^\((\S+) rows?, ", text, re.M)]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cogra-data")
    assert cli.main(["data", str(root), "--events", str(EVENTS)]) == 0
    return root


@pytest.fixture()
def views(spark):
    """Drop the views ``--data`` registers, so later modules see their own tables."""
    yield
    for name in VIEWS:
        spark.catalog.dropTempView(name)


# ---------------------------------------------------------------------------
# scripts (no Spark)
# ---------------------------------------------------------------------------


def test_split_statements_respects_literals_and_comments():
    script = (
        "-- a comment; with ${UNDEFINED}\n"
        "SELECT 'a;b', \"c;d\", `e;f` FROM t; /* block; /* nested; */ still */\n"
        "\n"
        "SELECT 'it\\'s; fine'\n"
        ";;  -- trailing\n"
    )
    statements = split_statements(script, "x.sql")
    assert [s.text for s in statements] == [
        "SELECT 'a;b', \"c;d\", `e;f` FROM t",
        "SELECT 'it\\'s; fine'",
    ]
    assert [s.where for s in statements] == ["x.sql:2", "x.sql:4"]
    with pytest.raises(ScriptError, match="x.sql:1: unterminated ' quote"):
        split_statements("SELECT 'oops;", "x.sql")


def test_the_sql_files_split_into_their_statements():
    assert len(split_statements((SQL / "setup.sql").read_text())) == 4
    for name in ("q1.sql", "q2.sql", "q3.sql", "rising.sql", "no_cancel.sql", "unfinished.sql", "clean_start.sql"):
        (statement,) = split_statements((SQL / name).read_text())
        assert statement.text.startswith("SELECT * FROM MATCH_TREND(TABLE(")


def test_substitution_and_undefined_variables():
    env = {"HOME_DIR": "/h"}
    assert substitute("'${A}/x' ${hivevar:A} ${env:HOME_DIR} ${HOME_DIR} ${spark:k} ${a.b}",
                      {"A": "/d"}, environ=env) == "'/d/x' /d /h /h ${spark:k} ${a.b}"
    with pytest.raises(ScriptError, match=r"setup.sql:15: \$\{COGRA_DATA\} is not defined "
                                          r"\(pass -d COGRA_DATA=VALUE"):
        resolve(split_statements((SQL / "setup.sql").read_text(), "setup.sql"), {}, environ={})
    assert parse_definitions(["A=1", "B=x=y"]) == {"A": "1", "B": "x=y"}
    with pytest.raises(ScriptError):
        parse_definitions(["no-equals"])


def test_undefined_variable_fails_before_spark_starts(capsys, monkeypatch):
    monkeypatch.delenv("COGRA_DATA", raising=False)
    assert cli.main(["sql", "-f", str(SQL / "setup.sql")]) == 2
    assert "${COGRA_DATA} is not defined" in capsys.readouterr().err


def test_parser_has_the_spark_commands():
    parser = cli.build_parser()
    assert parser.parse_args(["sql", "SELECT 1"]).func is spark_cli.cmd_sql
    assert parser.parse_args(["data", "d"]).func is spark_cli.cmd_data
    assert parser.parse_args(["shim"]).func is spark_cli.cmd_shim
    assert parser.parse_args(["thriftserver"]).port == 10000
    assert parser.parse_args(["connect-server"]).port == 15002


# ---------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------


def test_data_writes_the_layout_of_setup_sql(data):
    for name in VIEWS:
        assert pq.read_metadata(data / name / "part-00000.parquet").num_rows == EVENTS


@pytest.mark.spark
def test_sql_statement(spark, data, views, capsys):
    assert cli.main(["sql", "--data", str(data), "SELECT COUNT(*) AS n FROM stock; SELECT 1 AS one"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^\s+n\s*\n\s+{EVENTS}\s*$", out, re.M), out
    assert printed_rows(out) == [1, 1]


@pytest.mark.spark
@pytest.mark.parametrize("name", ["q1", "q2", "q3"])
def test_sql_file(spark, data, views, capsys, name):
    assert cli.main(["sql", "--data", str(data), "-f", str(SQL / f"{name}.sql"), "--rows", "3"]) == 0
    out = capsys.readouterr().out
    assert printed_rows(out) == [expected_rows(name, data)]
    ex = next(e for e in EXAMPLES if e.name == name)
    header = out.strip().splitlines()[0].split()
    assert header == [f.name for f in cogra.result_schema(ex.query, pq.read_schema(data / ex.table / "part-00000.parquet"))]


@pytest.mark.spark
@pytest.mark.parametrize(("name", "table"), [("rising", "activity"), ("no_cancel", "rides"), ("unfinished", "rides"),
                                           ("clean_start", "rides")])
def test_sql_file_with_quantifiers_and_negation(spark, data, views, capsys, name, table):
    text = (SQL / f"{name}.sql").read_text()
    assert cli.main(["sql", "--data", str(data), "-f", str(SQL / f"{name}.sql"), "--rows", "3"]) == 0
    query = re.search(r"MATCH_TREND\(TABLE\(\w+\), '(.*)'\)", text, re.S).group(1)
    want = cogra.evaluate(query, pq.read_table(data / table / "part-00000.parquet"))
    assert want.num_rows > 0 and printed_rows(capsys.readouterr().out) == [want.num_rows]


@pytest.mark.spark
def test_sql_error_points_at_the_query(spark, data, views, capsys):
    bad = "SELECT * FROM MATCH_TREND(TABLE(stock), 'RETURN COUNT(*)\nPATTERN Stock A+\nWHERE C.price > 1')"
    assert cli.main(["sql", "--data", str(data), bad, "SELECT 'not reached'"]) == 1
    captured = capsys.readouterr()
    assert "statement at <argument 1>:1 failed" in captured.err
    assert "line 3, column 7: unknown variable C" in captured.err
    assert "        ^" in captured.err
    assert "JVM stacktrace" not in captured.err and "\tat " not in captured.err
    assert "not reached" not in captured.out


@pytest.mark.spark
def test_sql_missing_table_hints_at_data(spark, capsys):
    assert cli.main(["sql", "SELECT * FROM no_such_table_here"]) == 1
    assert "--data DIR" in capsys.readouterr().err


@pytest.mark.spark
@pytest.mark.slow
def test_sql_subprocess_with_setup_sql(data, tmp_path):
    """A fresh process: ``-d COGRA_DATA=...`` feeds sql/setup.sql, then q2.sql reads its table."""
    cmd = [sys.executable, "-m", "cogra.spark.cli", "sql", "--master", "local[1]",
           "-d", f"COGRA_DATA={data}", "-f", str(SQL / "setup.sql"), "-f", str(SQL / "q2.sql"),
           "SELECT COUNT(*) FROM transport"]
    env = {k: v for k, v in os.environ.items() if k not in ("COGRA_DATA", "SPARK_LOCAL_IP")}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("OK (") == 4
    # A quiet console: none of Spark's start-up warnings a user can do nothing about (the
    # host name's loopback address, Hadoop's native library, the default log profile); the
    # JVM's own notice of an incubator module is Spark's launcher's.
    noise = [line for line in proc.stderr.splitlines()
             if ("WARN" in line or "log4j profile" in line or "default log level" in line)
             and "incubator modules" not in line]
    assert noise == [], noise
    assert printed_rows(proc.stdout) == [expected_rows("q2", data), 1]
    assert f"  {EVENTS}" in proc.stdout


def test_a_failed_query_shows_its_error_once(tmp_path):
    """A fresh process's failed MATCH_TREND (an overflow under ANSI mode): the error, in
    SQL's words, once -- not also logged by the executor and the scheduler that aborted
    the job (the session's log configuration, cogra.spark.session)."""
    query = ("SELECT * FROM MATCH_TREND(TABLE(SELECT 'A' AS type, id AS time, CAST(NULL AS STRING) AS g "
             "FROM range(70)), 'RETURN g, COUNT(*) PATTERN A+ GROUP-BY g')")
    cmd = [sys.executable, "-m", "cogra.spark.cli", "sql", "--master", "local[1]", query]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-3000:]
    assert output.count("does not fit int64 of group g = NULL") == 1, output[-6000:]
    assert "ERROR" not in proc.stderr, proc.stderr[-3000:]


def test_shim_prints_the_jar(capsys):
    assert cli.main(["shim"]) == 0
    assert Path(capsys.readouterr().out.strip()).is_file()


@pytest.mark.spark
def test_spark_demo(spark, views, tmp_path):
    import io

    from cogra.spark.demo import run_demo

    out = io.StringIO()
    assert run_demo(events=EVENTS, rows=2, spark=spark, data_dir=tmp_path, out=out) == 0
    text = out.getvalue()
    for ex in EXAMPLES:
        assert f"=== {ex.name}:" in text
        assert f"-- sql/{ex.name}.sql" in text
    counts = [int(n.replace(",", "")) for n in re.findall(r"^-> (\S+) rows in ", text, re.M)]
    assert counts == [expected_rows(ex.name, tmp_path) for ex in EXAMPLES]


def test_missing_match_trend_is_explained():
    """A session without the shim (e.g. a server not started by cogra) gets a hint."""
    import io

    from cogra.spark.sqlrun import run_statements

    class NoMatchTrend:
        def sql(self, text):
            raise RuntimeError("[UNRESOLVABLE_TABLE_VALUED_FUNCTION] Could not resolve "
                               "`MATCH_TREND` to a table-valued function.")

    err = io.StringIO()
    statements = split_statements("SELECT * FROM MATCH_TREND(TABLE(t), 'RETURN COUNT(*) PATTERN A')")
    assert run_statements(NoMatchTrend(), statements, out=io.StringIO(), err=err) == 1
    assert "cogra connect-server" in err.getvalue()
