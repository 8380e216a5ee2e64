"""Real servers started by ``cogra thriftserver`` / ``cogra connect-server``, real clients.

Each server runs as ``python -m cogra.spark.cli ...`` in its own process group (so the
fixture ends the CLI, its spark-submit JVM and the JVM's Python workers together), on a
free port, with its metastore and warehouse in a temporary directory. A watchdog kills a
server that outlives its tests (a hung client then fails instead of hanging).

Every client session creates its own table in that session and must see ``MATCH_TREND``:
the extension applies to each session the server creates, not only the first.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Sequence
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")

from cogra import datasets  # noqa: E402
from cogra.spark.servers import free_port, port_open  # noqa: E402
from tests.spark.rows import evaluate_rows, same_rows, sql_literal  # noqa: E402

pytestmark = pytest.mark.spark

START_TIMEOUT = 240
WATCHDOG = 600

STOCK_QUERY = """RETURN sector, A.company, B.company, AVG(B.price)
PATTERN SEQ(Stock A+, Stock B+)
WHERE [A.company] AND [B.company] AND A.price > NEXT(A).price
GROUP-BY sector, A.company, B.company
WITHIN 10 minutes SLIDE 10 seconds"""

# The README's first example: 43 trends under skip-till-any-match.
README_VALUES = ", ".join(f"('{t}', {i + 1})" for i, t in enumerate("ABAACBAB"))
README_VIEW = f"CREATE TEMPORARY VIEW readme AS SELECT * FROM VALUES {README_VALUES} AS t(type, time)"
README_QUERY = "RETURN COUNT(*) PATTERN (SEQ(A+, B))+ SEMANTICS any"
README_SQL = f"SELECT * FROM MATCH_TREND(TABLE(readme), {sql_literal(README_QUERY)})"

# What a BI tool's chart reads: TIMESTAMP windows, BIGINT counts, DOUBLE averages.
BI_QUERY = """RETURN sector, COUNT(*) AS trends, AVG(A.price) AS avg_price
PATTERN Stock A+
WHERE [company] AND A.price > NEXT(A).price
GROUP-BY sector
WITHIN 2 minutes SLIDE 30 seconds"""
BI_SQL = f"SELECT * FROM MATCH_TREND(TABLE(bi_stock), {sql_literal(BI_QUERY)})"
BI_EPOCH = 1_767_605_400  # 2026-01-05 09:30:00 UTC

BAD_QUERY = "RETURN COUNT(*)\nPATTERN Stock A+\nWHERE C.price > 1"
BAD_SQL = f"SELECT * FROM MATCH_TREND(TABLE(stock), {sql_literal(BAD_QUERY)})"


class RunningServer:
    """A ``cogra`` server subprocess: its URL parts, its log, and how to end it."""

    def __init__(self, command: str, workdir: Path, extra: Sequence[str] = ()):
        self.host = "127.0.0.1"
        self.port = free_port(self.host)
        self.log_path = workdir / f"{command}.log"
        self.log = open(self.log_path, "wb")
        cmd = [sys.executable, "-m", "cogra.spark.cli", command, "--host", self.host,
               "--port", str(self.port), "--master", "local[2]", "--work-dir", str(workdir),
               "--conf", "spark.driver.memory=1g", "--conf", "spark.sql.shuffle.partitions=2", *extra]
        self.proc = subprocess.Popen(cmd, cwd=workdir, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.watchdog = threading.Timer(WATCHDOG, self.kill)
        self.watchdog.daemon = True
        self.watchdog.start()

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            if "cogra: ready." in self.log_path.read_text(errors="replace") and \
                    port_open(self.host, self.port):
                return
            time.sleep(0.5)
        raise RuntimeError(f"server not ready after {START_TIMEOUT} s:\n{self.log_tail()}")

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
            return True
        except ProcessLookupError:
            return False

    def kill(self) -> None:
        """SIGTERM to the whole group (CLI, JVM, Python workers), SIGKILL what is left."""
        for sig, grace in ((signal.SIGTERM, 45.0), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                self.proc.poll()
                if not self._group_alive():
                    return
                time.sleep(0.2)

    def stop(self) -> None:
        self.watchdog.cancel()
        self.kill()
        self.proc.wait(5)
        self.log.close()
        assert not self._group_alive(), "server processes survived SIGKILL"


    def listening(self) -> list[str]:
        """The local addresses the server's processes (CLI, JVM, Python workers) listen on."""
        out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
        addresses = []
        for line in out.splitlines():
            pids = [int(p) for p in re.findall(r"pid=(\d+)", line)]
            if any(_group_of(pid) == self.proc.pid for pid in pids):
                addresses.append(line.split()[3])
        return addresses


    def jvm_pid(self) -> int:
        """The server's driver JVM among its processes."""
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and _group_of(int(entry.name)) == self.proc.pid:
                try:
                    argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0]
                except OSError:
                    continue
                if argv0.endswith(b"/java"):
                    return int(entry.name)
        raise AssertionError(f"no JVM among the server's processes:\n{self.log_tail()}")


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


@contextlib.contextmanager
def server(command: str, workdir: Path, extra: Sequence[str] = ()):
    running = RunningServer(command, workdir, extra)
    try:
        running.wait_ready()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def stock_parquet(tmp_path_factory) -> tuple[Path, pa.Table]:
    table = datasets.stock(n_events=400, seed=5)
    path = tmp_path_factory.mktemp("stock") / "stock.parquet"
    pq.write_table(table, path)
    return path, table


@pytest.fixture(scope="module")
def bi_stock_parquet(tmp_path_factory) -> tuple[Path, pa.Table]:
    """3,000 ticks, about one a second, with a TIMESTAMP time column (UTC)."""
    table = datasets.stock(n_events=3000, seed=11, rate=1.0)
    micros = pc.multiply(pc.add(table["time"], BI_EPOCH), 1_000_000)
    table = table.set_column(table.schema.get_field_index("time"), "time",
                             micros.cast(pa.timestamp("us", tz="UTC")))
    path = tmp_path_factory.mktemp("bi_stock")  # a table's directory
    pq.write_table(table, path / "part-00000.parquet")
    return path, table


# ---------------------------------------------------------------------------
# the command lines (nothing started)
# ---------------------------------------------------------------------------


def test_server_command_lines():
    from cogra.spark import servers
    from cogra.spark.session import EXTENSION

    thrift = servers.command(servers.ServerSpec("thrift", port=10001, conf={"spark.jars": "/x.jar"}),
                             jar="/shim.jar")
    assert thrift[0].endswith("/bin/spark-submit")
    assert thrift[thrift.index("--class") + 1] == servers.THRIFT_CLASS
    assert "spark.jars=/x.jar,/shim.jar" in thrift
    assert "spark.driver.extraClassPath=/shim.jar" in thrift  # no session's class loader owns it
    assert not any(a.startswith("spark.driver.extraJavaOptions=") for a in thrift)  # (no archive for /shim.jar)
    assert f"spark.sql.extensions={EXTENSION}" in thrift
    assert f"spark.pyspark.python={sys.executable}" in thrift
    assert thrift[-4:] == ["--hiveconf", "hive.server2.thrift.bind.host=127.0.0.1",
                           "--hiveconf", "hive.server2.thrift.port=10001"]
    assert "spark.driver.bindAddress=127.0.0.1" in thrift  # a local master's ports: loopback
    ldap = servers.command(servers.ServerSpec("thrift", port=10001, hiveconf={
        "hive.server2.authentication": "LDAP"}), jar="/shim.jar")
    assert ldap[-6:-4] == ["--hiveconf", "hive.server2.authentication=LDAP"]
    cluster = servers.command(servers.ServerSpec("thrift", port=10001, master="spark://h:7077"), jar="/s.jar")
    assert not any(a.startswith("spark.driver.bindAddress") for a in cluster)
    connect = servers.command(servers.ServerSpec("connect", host="0.0.0.0", port=15003), jar="/shim.jar")
    assert connect[connect.index("--class") + 1] == servers.CONNECT_CLASS
    assert "spark.connect.grpc.binding.address=0.0.0.0" in connect
    assert "spark.connect.grpc.binding.port=15003" in connect
    assert servers.ServerSpec("thrift", port=1).url == "jdbc:hive2://127.0.0.1:1/default"
    with pytest.raises(ValueError, match="port"):
        servers.command(servers.ServerSpec("connect", port=0), jar="/shim.jar")


# ---------------------------------------------------------------------------
# Thrift (JDBC/ODBC) server, queried with PyHive
# ---------------------------------------------------------------------------


@pytest.fixture(scope="class")
def thrift(tmp_path_factory):
    with server("thriftserver", tmp_path_factory.mktemp("thrift")) as running:
        yield running


@pytest.fixture(scope="class")
def bi_engine(thrift, bi_stock_parquet):
    """A SQLAlchemy engine on the server as a BI tool makes one (``hive+cogra://``: PyHive's
    dialect reading Spark's catalog, :mod:`cogra.spark.sqlalchemy_dialect`), and what a BI
    user would set up through it: a table in the metastore over Parquet files and a view
    holding MATCH_TREND's result."""
    import sqlalchemy

    path, _ = bi_stock_parquet
    engine = sqlalchemy.create_engine(f"hive+cogra://cogra@{thrift.host}:{thrift.port}/default")
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text(f"CREATE TABLE bi_stock USING parquet LOCATION '{path}'"))
            conn.execute(sqlalchemy.text(f"CREATE VIEW bi_trends AS {BI_SQL}"))
        yield engine
    finally:
        engine.dispose()


def hive_cursor(thrift):
    from pyhive import hive

    connection = hive.connect(host=thrift.host, port=thrift.port, auth="NONE", username="cogra")
    return connection, connection.cursor()


class TestThriftServer:
    """One Thrift server for these tests (stopped before the Connect server starts)."""

    def test_thrift_a_first_session_that_never_calls_match_trend(self, thrift):
        """The server's first JDBC session closes without MATCH_TREND; later sessions still
        have it (the shim's classes must not live and die with one session)."""
        first, cursor = hive_cursor(thrift)
        try:
            cursor.execute("SELECT 1")
            assert cursor.fetchall() == [(1,)]
        finally:
            first.close()
        for _ in range(2):
            later, cursor = hive_cursor(thrift)
            try:
                cursor.execute(README_VIEW)
                cursor.execute(README_SQL)
                assert cursor.fetchall() == [(43,)]
            finally:
                later.close()

    def test_thrift_server_listens_on_loopback_only(self, thrift):
        """Spark's own ports (driver RPC, block manager) as well as the JDBC port: nothing
        of a local server is open to the network."""
        connection, cursor = hive_cursor(thrift)
        try:
            cursor.execute(README_VIEW)
            cursor.execute(README_SQL)  # Python workers started too
            assert cursor.fetchall() == [(43,)]
        finally:
            connection.close()
        addresses = thrift.listening()
        assert len(addresses) >= 3, addresses  # JDBC, driver RPC, block manager at least
        assert all(a.rsplit(":", 1)[0] in ("127.0.0.1", "[::ffff:127.0.0.1]", "[::1]") for a in addresses), addresses

    def test_thrift_servers_driver_maps_the_class_archive(self, thrift):
        """The server's driver JVM starts from the class archive setup dumped, as a session's
        does (cogra.spark.class_archive)."""
        from cogra.spark import class_archive
        from cogra.spark.session import jar_path

        if os.environ.get("COGRA_WARM") == "0":
            pytest.skip("setup dumped no archive (COGRA_WARM=0)")
        assert class_archive.mapped_archive(thrift.jvm_pid()) == str(class_archive.archive_path(jar_path()))

    def test_thrift_a_killed_clients_query_is_cancelled(self, thrift):
        """A client that runs its statement asynchronously (Hive JDBC, BI tools, PyHive with
        async_) and dies: the server notices the dropped connection, closes the session and
        cancels the running job instead of computing it to the end."""
        long_query = ("SELECT COUNT(*) FROM MATCH_TREND(TABLE(SELECT 'A' AS type, id AS time, "
                      "id % 7 AS v FROM range(500000000)), 'RETURN COUNT(*) PATTERN A+ "
                      "WHERE A.v < NEXT(A).v WITHIN 100 sec')")
        client = (f"from pyhive import hive\nimport time\n"
                  f"c = hive.connect(host='{thrift.host}', port={thrift.port}, auth='NONE', "
                  f"username='x').cursor()\nc.execute({long_query!r}, async_=True)\n"
                  "print('running', flush=True)\nwhile True:\n    time.sleep(0.5); c.poll()\n")
        start = len(thrift.log_path.read_text(errors="replace"))

        def log_since_start() -> str:
            return thrift.log_path.read_text(errors="replace")[start:]

        proc = subprocess.Popen([sys.executable, "-c", client], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "running"
            deadline = time.monotonic() + 60
            while "Starting task" not in log_since_start():  # the job runs
                assert time.monotonic() < deadline, thrift.log_tail()
                time.sleep(0.5)
            time.sleep(2)
        finally:
            proc.kill()
            proc.wait()
        killed = time.monotonic()
        while "SPARK_JOB_CANCELLED" not in log_since_start():
            assert time.monotonic() - killed < 30, thrift.log_tail()
            time.sleep(0.5)

    def test_thrift_server_runs_match_trend(self, thrift, stock_parquet):
        path, table = stock_parquet
        connection, cursor = hive_cursor(thrift)
        try:
            cursor.execute(f"CREATE TEMPORARY VIEW stock USING parquet OPTIONS (path '{path}')")
            cursor.execute(f"SELECT * FROM MATCH_TREND(TABLE(stock), {sql_literal(STOCK_QUERY)})")
            names, want = evaluate_rows(STOCK_QUERY, table)
            assert [d[0] for d in cursor.description] == names
            got = cursor.fetchall()
            assert got and same_rows(got, want)

            cursor.execute(README_VIEW)
            cursor.execute(README_SQL)
            assert cursor.fetchall() == [(43,)]
        finally:
            connection.close()

    def test_thrift_every_session_has_match_trend(self, thrift):
        """A second connection is a new Spark session: the first one's views are gone, and
        MATCH_TREND is there all the same."""
        first, c1 = hive_cursor(thrift)
        second, c2 = hive_cursor(thrift)
        try:
            c1.execute(README_VIEW)
            with pytest.raises(Exception, match="readme"):
                c2.execute("SELECT * FROM readme")
            c2.execute(README_VIEW)
            c2.execute(README_SQL)
            assert c2.fetchall() == [(43,)]
        finally:
            first.close()
            second.close()

    def test_thrift_sqlalchemy_runs_match_trend_with_typed_columns(self, bi_engine, bi_stock_parquet):
        """A BI tool's query through SQLAlchemy (a dataset defined by SQL): the rows are
        cogra.evaluate's, and the cursor's description types the columns as a chart needs
        them (Superset and Redash read these type codes)."""
        from sqlalchemy import text

        _, table = bi_stock_parquet
        names, want = evaluate_rows(BI_QUERY, table)
        with bi_engine.connect() as conn:
            zone = ZoneInfo(conn.execute(text("SELECT current_timezone()")).scalar_one())
            result = conn.execute(text(BI_SQL))
            description = result.cursor.description
            got = result.fetchall()
        assert [(d[0], d[1]) for d in description] == [
            ("sector", "STRING_TYPE"), ("trends", "BIGINT_TYPE"), ("avg_price", "DOUBLE_TYPE"),
            ("window_start", "TIMESTAMP_TYPE"), ("window_end", "TIMESTAMP_TYPE")]
        assert [d[0] for d in description] == names
        # PyHive turns a TIMESTAMP into a naive datetime in the session's time zone.
        assert all(type(r.window_start) is dt.datetime and r.window_start.tzinfo is None for r in got)
        assert all(type(r.trends) is int and type(r.avg_price) is float for r in got)
        got = [(*r[:3], r[3].replace(tzinfo=zone), r[4].replace(tzinfo=zone)) for r in got]
        assert len(got) > 100 and same_rows(got, want)

    def test_thrift_sqlalchemy_inspector(self, bi_engine, thrift):
        """What a BI tool's table browser asks SQLAlchemy's inspector: the tables and the
        views by name, whether one exists, and typed columns of a table and of a view over
        MATCH_TREND.  PyHive's own ``hive://`` reads the first column of SHOW TABLES, Hive's
        table name but Spark's namespace (it lists ``default`` once per table): what
        ``hive+cogra://`` is for."""
        import sqlalchemy
        from pyhive.sqlalchemy_hive import HiveTimestamp

        inspector = sqlalchemy.inspect(bi_engine)
        assert "default" in inspector.get_schema_names()
        assert "bi_stock" in inspector.get_table_names() and "bi_trends" not in inspector.get_table_names()
        assert "bi_trends" in inspector.get_view_names() and "bi_stock" not in inspector.get_view_names()
        assert "bi_stock" in inspector.get_table_names(schema="default")
        assert inspector.has_table("bi_stock") and inspector.has_table("BI_TRENDS")
        assert not inspector.has_table("no_such_table")

        columns = {c["name"]: c["type"] for c in inspector.get_columns("bi_trends")}
        assert list(columns) == ["sector", "trends", "avg_price", "window_start", "window_end"]
        assert isinstance(columns["sector"], sqlalchemy.String)
        assert isinstance(columns["trends"], sqlalchemy.BigInteger)
        assert isinstance(columns["avg_price"], sqlalchemy.Float)  # PyHive's type for DOUBLE
        assert isinstance(columns["window_start"], HiveTimestamp)
        assert isinstance(columns["window_end"], HiveTimestamp)
        assert [str(columns[n]) for n in columns] == ["VARCHAR", "BIGINT", "FLOAT", "TIMESTAMP", "TIMESTAMP"]
        stock = {c["name"]: str(c["type"]) for c in inspector.get_columns("bi_stock")}
        assert stock["time"] == "TIMESTAMP" and stock["price"] == "FLOAT" and stock["volume"] == "BIGINT"

        plain = sqlalchemy.create_engine(f"hive://cogra@{thrift.host}:{thrift.port}/default")
        try:
            listed = sqlalchemy.inspect(plain).get_table_names()
        finally:
            plain.dispose()
        assert "bi_stock" not in listed and set(listed) == {"default"}, listed

    def test_thrift_error_names_line_and_column(self, thrift, stock_parquet):
        path, _ = stock_parquet
        connection, cursor = hive_cursor(thrift)
        try:
            cursor.execute(f"CREATE TEMPORARY VIEW stock USING parquet OPTIONS (path '{path}')")
            with pytest.raises(Exception) as info:
                cursor.execute(BAD_SQL)
            assert "line 3, column 7: unknown variable C (the pattern binds A)" in str(info.value)
        finally:
            connection.close()


# ---------------------------------------------------------------------------
# Spark Connect server, queried with pyspark.sql.connect
# ---------------------------------------------------------------------------


@pytest.fixture(scope="class")
def connect(tmp_path_factory):
    # Creating a Connect session sets SPARK_CONNECT_MODE_ENABLED in os.environ, which turns
    # the rest of this process's pyspark into Connect mode; restore it afterwards.
    with pytest.MonkeyPatch.context() as mp:
        for name in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):
            mp.setenv(name, "")  # records the current state, restored on exit
            mp.delenv(name)
        with server("connect-server", tmp_path_factory.mktemp("connect")) as running:
            running.url = f"sc://{running.host}:{running.port}"
            yield running


@pytest.fixture()
def remote(connect):
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(connect.url).create()
    yield spark
    spark.stop()


class TestConnectServer:
    """One Spark Connect server for these tests."""

    def test_connect_server_runs_match_trend(self, remote, stock_parquet):
        from cogra.spark import has_extension, match_trend

        path, table = stock_parquet
        assert type(remote).__module__.startswith("pyspark.sql.connect")
        remote.read.parquet(str(path)).createOrReplaceTempView("stock")
        names, want = evaluate_rows(STOCK_QUERY, table)
        df = remote.sql(f"SELECT * FROM MATCH_TREND(TABLE(stock), {sql_literal(STOCK_QUERY)})")
        assert df.columns == names
        got = [tuple(r) for r in df.collect()]
        assert got and same_rows(got, want)

        assert has_extension(remote)  # so match_trend uses the server's shim
        got = [tuple(r) for r in match_trend(remote.table("stock"), STOCK_QUERY).collect()]
        assert same_rows(got, want)

    def test_connect_every_session_has_match_trend(self, connect, remote):
        from pyspark.sql import SparkSession

        remote.sql(README_VIEW)
        other = SparkSession.builder.remote(connect.url).create()
        try:
            with pytest.raises(Exception, match="readme"):
                other.sql("SELECT * FROM readme").collect()
            events = pa.table({"type": list("ABAACBAB"), "time": list(range(1, 9))})
            other.createDataFrame(events).createOrReplaceTempView("readme")
            assert [tuple(r) for r in other.sql(README_SQL).collect()] == [(43,)]
        finally:
            other.stop()

    def test_connect_error_names_line_and_column(self, remote, stock_parquet):
        path, _ = stock_parquet
        remote.read.parquet(str(path)).createOrReplaceTempView("stock")
        with pytest.raises(Exception) as info:
            remote.sql(BAD_SQL).collect()
        assert "line 3, column 7: unknown variable C (the pattern binds A)" in str(info.value)

    def test_cogra_sql_remote(self, connect, capsys):
        from cogra import cli
        from cogra.spark import cli as spark_cli  # noqa: F401 - registers `sql`

        assert cli.main(["sql", "--remote", connect.url, f"{README_VIEW}; {README_SQL}"]) == 0
        out = capsys.readouterr().out
        assert "OK (" in out and "  43" in out


class TestConnectAuthentication:
    """Spark's own pre-shared token (spark.connect.authenticate.token): a client without
    it is refused, one with it runs MATCH_TREND."""

    @pytest.mark.slow
    def test_a_token_protected_connect_server(self, tmp_path_factory):
        from pyspark.sql import SparkSession

        token = "cogra-test-token-8f3a"
        with pytest.MonkeyPatch.context() as mp:
            for name in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):
                mp.setenv(name, "")
                mp.delenv(name)
            extra = ["--conf", f"spark.connect.authenticate.token={token}"]
            with server("connect-server", tmp_path_factory.mktemp("connect-auth"), extra) as running:
                anonymous = SparkSession.builder.remote(f"sc://localhost:{running.port}").create()
                try:
                    with pytest.raises(Exception, match="(?i)unauthenticated|authenticat|token"):
                        anonymous.sql("SELECT 1").collect()
                finally:
                    with contextlib.suppress(Exception):
                        anonymous.stop()
                spark = SparkSession.builder.remote(f"sc://localhost:{running.port}/;token={token}").create()
                try:
                    events = pa.table({"type": list("ABAACBAB"), "time": list(range(1, 9))})
                    spark.createDataFrame(events).createOrReplaceTempView("readme")
                    assert [tuple(r) for r in spark.sql(README_SQL).collect()] == [(43,)]
                finally:
                    spark.stop()
