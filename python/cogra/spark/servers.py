"""Spark's Thrift (JDBC/ODBC) and Spark Connect servers, with ``MATCH_TREND`` in every session.

Both servers ship with pyspark (``jars/spark-hive-thriftserver_*.jar``,
``jars/spark-connect_*.jar``), and both create one SparkSession per client session from a
shared SparkContext. ``spark.sql.extensions`` is applied to every session the context
builds, so starting the server with the extension and the shim jar is all it takes for
each JDBC connection and each Connect session to resolve ``MATCH_TREND``.

The servers are started the way Spark's ``sbin/start-thriftserver.sh`` and
``sbin/start-connect-server.sh`` start them: ``bin/spark-submit --class <server class>``
(no application jar: spark-submit knows both classes), here in the foreground and from
pyspark's own ``bin/`` so that the Spark version is the one the shim was compiled for.
The Python that runs the ``MATCH_TREND`` handler and the UDF workers is this interpreter
(``spark.pyspark.python``), the one that has cogra installed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Mapping, Sequence

from cogra.spark.session import EXTENSION, JAVA_OPTIONS, archive_options, local_defaults, sets_driver_java_options

THRIFT_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
THRIFT_PORT = 10000
CONNECT_PORT = 15002


class ServerError(RuntimeError):
    """A server did not start; the message ends with the tail of its log when there is one."""


@dataclass(frozen=True)
class ServerSpec:
    """What to start: a server kind, where it listens, and Spark settings."""

    kind: str  # "thrift" or "connect"
    host: str = "127.0.0.1"
    port: int = 0
    master: str = "local[*]"
    conf: Mapping[str, str] = field(default_factory=dict)
    hiveconf: Mapping[str, str] = field(default_factory=dict)
    """HiveServer2 settings of the Thrift server (authentication, SSL, timeouts)."""

    @property
    def url(self) -> str:
        """How a client reaches it (the JDBC URL, or the Spark Connect remote)."""
        if self.kind == "thrift":
            return f"jdbc:hive2://{self.host}:{self.port}/default"
        return f"sc://{self.host}:{self.port}"


def pyspark_home() -> Path:
    from cogra.spark import shim_build

    return shim_build.pyspark_home()


def spark_submit() -> Path:
    path = pyspark_home() / "bin" / "spark-submit"
    if not path.is_file():
        raise ServerError(f"pyspark has no bin/spark-submit at {path}")
    return path


def _merge(existing: str | None, item: str) -> str:
    items = [x.strip() for x in (existing or "").split(",") if x.strip()]
    return ",".join(items if item in items else [*items, item])


def _merge_path(existing: str | None, item: str) -> str:
    items = [x for x in (existing or "").split(os.pathsep) if x]
    return os.pathsep.join(items if item in items else [*items, item])


def settings(spec: ServerSpec, jar: str) -> dict[str, str]:
    """Spark settings of the server: cogra's local defaults, the caller's, then the shim.

    ``spark.jars`` and ``spark.sql.extensions`` given by the caller are kept and extended.
    The UI stays off unless asked for, and the driver maps the class archive where
    ``cogra warm --spark`` dumped one, as in :func:`cogra.spark.session`.
    """
    conf = {**local_defaults(spec.master), **dict(spec.conf)}
    conf["spark.jars"] = _merge(conf.get("spark.jars"), jar)
    # On the driver's own class path too: the jars of spark.jars are loaded by a class
    # loader that the Thrift server closes with the session that first used it, and a
    # later session's MATCH_TREND then met NoClassDefFoundError.
    conf["spark.driver.extraClassPath"] = _merge_path(conf.get("spark.driver.extraClassPath"), jar)
    conf["spark.sql.extensions"] = _merge(conf.get("spark.sql.extensions"), EXTENSION)
    conf.setdefault("spark.pyspark.python", sys.executable)
    if not sets_driver_java_options(conf):
        options = archive_options(conf, jar)
        if options:
            conf[JAVA_OPTIONS] = options
    if spec.kind == "connect":
        conf["spark.connect.grpc.binding.address"] = spec.host
        conf["spark.connect.grpc.binding.port"] = str(spec.port)
    return conf


def command(spec: ServerSpec, jar: str | None = None) -> list[str]:
    """The spark-submit command line that runs ``spec`` in the foreground."""
    if spec.kind not in ("thrift", "connect"):
        raise ValueError(f"unknown server kind {spec.kind!r}")
    if not 0 < spec.port < 65536:
        raise ValueError(f"port must be in 1..65535, got {spec.port}")
    if jar is None:
        from cogra.spark.session import jar_path

        jar = jar_path()
    cls, name = (THRIFT_CLASS, "cogra Thrift JDBC/ODBC server") if spec.kind == "thrift" \
        else (CONNECT_CLASS, "cogra Spark Connect server")
    cmd = [str(spark_submit()), "--master", spec.master, "--class", cls, "--name", name]
    for key, value in settings(spec, jar).items():
        cmd += ["--conf", f"{key}={value}"]
    if spec.kind == "thrift":
        # HiveThriftServer2 reads its listening address from HiveConf, given as --hiveconf.
        for key, value in spec.hiveconf.items():
            cmd += ["--hiveconf", f"{key}={value}"]
        cmd += ["--hiveconf", f"hive.server2.thrift.bind.host={spec.host}",
                "--hiveconf", f"hive.server2.thrift.port={spec.port}"]
    return cmd


def environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: pyspark's Spark, this Python for workers.

    ``SPARK_HOME`` is pinned to pyspark's directory: another Spark found through an
    inherited ``SPARK_HOME`` would not match the shim jar.
    """
    env = dict(os.environ if base is None else base)
    env["SPARK_HOME"] = str(pyspark_home())
    env["PYSPARK_PYTHON"] = sys.executable
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)  # a Connect-mode client setting, not a server's
    return env


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class Server:
    """A running server process: start, wait until its port accepts connections, stop.

    ``new_group=True`` starts it in its own process group, so :meth:`stop` ends the whole
    tree (spark-submit's JVM and the Python workers it forked); the foreground CLI keeps
    the terminal's group instead, so that Ctrl-C reaches the JVM too.
    """

    def __init__(self, spec: ServerSpec, *, cwd: str | os.PathLike[str] | None = None,
                 log: IO[bytes] | None = None, new_group: bool = True, jar: str | None = None):
        self.spec = spec
        self.cmd = command(spec, jar)
        self.cwd = cwd
        self.log = log
        self.new_group = new_group
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "Server":
        if port_open(self.spec.host, self.spec.port):
            raise ServerError(f"{self.spec.host}:{self.spec.port} is already in use")
        self.proc = subprocess.Popen(
            self.cmd, cwd=self.cwd, env=environment(), stdin=subprocess.DEVNULL,
            stdout=self.log, stderr=subprocess.STDOUT if self.log is not None else None,
            start_new_session=self.new_group,
        )
        return self

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Block until the port accepts connections; raise if the process exits first."""
        assert self.proc is not None, "start() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise ServerError(f"the {self.spec.kind} server exited with code {code} "
                                  f"before listening on {self.spec.host}:{self.spec.port}")
            if port_open(self.spec.host, self.spec.port):
                return
            time.sleep(0.25)
        raise ServerError(f"the {self.spec.kind} server did not listen on "
                          f"{self.spec.host}:{self.spec.port} within {timeout:.0f} s")

    def wait(self) -> int:
        assert self.proc is not None, "start() first"
        return self.proc.wait()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (the JVM's shutdown hooks stop Spark), then SIGKILL after ``timeout``."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        self._signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            proc.wait(10)

    def _signal(self, sig: int) -> None:
        assert self.proc is not None
        try:
            if self.new_group:
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)
        except ProcessLookupError:
            pass

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(spec: ServerSpec, *, cwd: str | None = None, timeout: float = 300.0,
          out: IO[str] = sys.stdout) -> int:
    """Run a server in the foreground until it exits or this process is interrupted.

    Prints the URL clients use once the port accepts connections. SIGTERM and SIGINT
    stop the server (the JVM gets SIGTERM, then SIGKILL if it hangs).
    """
    from cogra.spark.shim_build import ShimBuildError

    try:
        if cwd is not None:
            Path(cwd).mkdir(parents=True, exist_ok=True)
        server = Server(spec, cwd=cwd, new_group=False)  # builds the shim jar if stale
    except (ServerError, ShimBuildError, ValueError, OSError) as e:
        print(f"cogra: {e}", file=sys.stderr, flush=True)
        return 1
    what = "Thrift JDBC/ODBC" if spec.kind == "thrift" else "Spark Connect"
    print(f"cogra: starting the {what} server on {spec.host}:{spec.port} "
          f"(master {spec.master}) ...", file=out, flush=True)

    def terminate(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        server.start()
        server.wait_ready(timeout)
        if spec.kind == "thrift":
            beeline = pyspark_home() / "bin" / "beeline"
            print(f"cogra: ready. JDBC URL: {spec.url}\n"
                  f"  e.g. {beeline} -u {spec.url}\n"
                  f"  or   pyhive.hive.connect('{spec.host}', {spec.port}, auth='NONE', username='you')",
                  file=out, flush=True)
        else:
            print(f"cogra: ready. Spark Connect URL: {spec.url}\n"
                  f"  e.g. SparkSession.builder.remote('{spec.url}').getOrCreate()",
                  file=out, flush=True)
        return server.wait()
    except KeyboardInterrupt:
        return 130
    except ServerError as e:
        print(f"cogra: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)


def parse_conf(items: Sequence[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` (repeated ``--conf``) -> dict; a missing ``=`` is an error."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"bad --conf {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out
