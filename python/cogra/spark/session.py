"""Sessions that know ``MATCH_TREND``.

* :func:`session` starts (or returns) a SparkSession with the cogra shim jar and
  ``spark.sql.extensions=org.apache.spark.sql.cogra.CograExtensions``; the jar is built
  from ``jvm-shim/`` on first use (see :mod:`cogra.spark.shim_build`).
* :func:`configure` adds the same settings to a ``SparkSession.builder`` (Delta-style).
* :func:`register` makes ``MATCH_TREND`` a session-scoped Python UDTF, for sessions that
  cannot load jars (an existing session, a Spark Connect client): same results, but rows
  are split by Spark's generic UDTF machinery and a ``PARTITION BY`` after ``TABLE(...)``
  is refused (the function partitions its input itself).
* :func:`match_trend` is the DataFrame API.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from cogra.api import parse
from cogra.runtime.evaluation import require_window
from cogra.spark.extension import EXTENSION, has_extension
from cogra.spark.udtf import MatchTrendNullOnOverflowUDTF, MatchTrendUDTF
from cogra.spark.udtf_analysis import FUNCTION_NAME, sql_string

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession


#: With a local master, Spark's own ports (the driver's RPC and block manager) listen on
#: the loopback interface only: by default they listen on every interface, open to the
#: network although nothing outside the machine needs them.
LOOPBACK: dict[str, str] = {
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}


LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
"""The driver's logging where :func:`session` starts its JVM: Spark's defaults at WARN,
without the warnings no user acts on (Hadoop's native-library notice)."""
LOG_OPTION = f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}"


def local_defaults(master: str) -> dict[str, str]:
    """:data:`LOCAL_DEFAULTS`, and :data:`LOOPBACK` where ``master`` is local."""
    return {**LOCAL_DEFAULTS, **(LOOPBACK if master.strip().startswith("local") else {})}


JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def sets_driver_java_options(conf: Mapping[str, Any]) -> bool:
    """Whether the user set the driver's Java options: in ``conf``, or in Spark's defaults
    file (``$SPARK_CONF_DIR`` or ``$SPARK_HOME/conf``, else pyspark's ``conf``:
    ``spark-defaults.conf``), whose value a setting of the builder would replace, not add to."""
    if JAVA_OPTIONS in conf:
        return True
    from cogra.spark import shim_build

    folder = os.environ.get("SPARK_CONF_DIR") or str(Path(os.environ.get("SPARK_HOME") or shim_build.pyspark_home())
                                                      / "conf")
    try:
        lines = (Path(folder) / "spark-defaults.conf").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        text = line.strip()
        if text and not text.startswith(("#", "!")):
            if text.replace("=", " ").replace(":", " ").split(None, 1)[0] == JAVA_OPTIONS:
                return True
    return False


def archive_options(conf: Mapping[str, Any], jar: str) -> str:
    """The class archive's Java options for a driver JVM about to start with ``conf`` and
    the shim ``jar`` (:func:`cogra.spark.class_archive.java_options`: ``""`` where none was
    dumped for its class path and heap); a session's driver or a server's."""
    from cogra.spark import class_archive

    extra = [p for p in str(conf.get("spark.driver.extraClassPath") or "").split(os.pathsep) if p and p != jar]
    memory = conf.get("spark.driver.memory")
    return class_archive.java_options(jar, extra, str(memory) if memory else None)


def _driver_start(master: str, settings: dict[str, Any], jar: str | None = None) -> dict[str, Any]:
    """``settings`` for a driver JVM about to start (unchanged where a JVM already runs).

    Unless the user set the driver's Java options (:func:`sets_driver_java_options`): the
    classes of the driver's class archive where ``cogra warm --spark`` dumped one
    (:func:`archive_options`: ``session()`` ~2 s sooner), and Spark's logging from
    :data:`LOG_CONFIG` (unless ``JAVA_TOOL_OPTIONS`` names a logging configuration),
    without the console lines a user can do nothing about.  For a local master,
    ``SPARK_LOCAL_IP`` -- the address the session binds to anyway (:data:`LOOPBACK`) -- so
    that Spark does not warn that the host name resolves to a loopback address."""
    from pyspark import SparkContext

    if SparkContext._jvm is not None:  # (a gateway is up: its JVM has started)
        return settings
    if not is_cluster(master):
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK["spark.driver.bindAddress"])
    if not sets_driver_java_options(settings):
        options = [archive_options(settings, jar or jar_path())]
        if "log4j2.configurationFile" not in os.environ.get("JAVA_TOOL_OPTIONS", ""):
            options.append(LOG_OPTION)
        if any(options):
            settings = {**settings, JAVA_OPTIONS: " ".join(o for o in options if o)}
    return settings


#: Local defaults of :func:`session`; any of them can be overridden through ``**conf``.
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2)),
    "spark.default.parallelism": str(max(2, os.cpu_count() or 2)),
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
}


def jar_path() -> str:
    """The shim jar for the installed sources and pyspark (compiled now if stale)."""
    from cogra.spark import shim_build  # imported here: `python -m cogra.spark.shim_build` runs it

    return str(shim_build.ensure_jar().jar)


def _merge_list(existing: str | None, item: str) -> str:
    items = [x.strip() for x in (existing or "").split(",") if x.strip()]
    if item not in items:
        items.append(item)
    return ",".join(items)


def is_cluster(master: str) -> bool:
    """Whether ``master`` runs executors apart from the driver (``local-cluster`` included)."""
    master = master.strip()
    return not master.startswith("local") or master.startswith("local-cluster")


def configure(builder: Any, *, jar: str | None = None) -> Any:
    """Add the cogra shim to a ``SparkSession.builder`` and return the builder.

    Keeps ``spark.jars`` and ``spark.sql.extensions`` values already set on the builder,
    points Python workers at this interpreter unless ``spark.pyspark.python`` is set, and
    with a cluster master (``spark.master`` set on the builder) has the executors' Python
    daemons load cogra before forking workers (:mod:`cogra.spark.workers`; call
    :func:`cogra.spark.workers.prepare` on the session to check them at once).
    """
    from cogra.spark.workers import DAEMON_MODULE

    jar = jar or jar_path()
    options = getattr(builder, "_options", {})
    if is_cluster(options.get("spark.master", "local")) and "spark.python.daemon.module" not in options:
        builder = builder.config("spark.python.daemon.module", DAEMON_MODULE)
    builder = builder.config("spark.jars", _merge_list(options.get("spark.jars"), jar))
    builder = builder.config(
        "spark.sql.extensions", _merge_list(options.get("spark.sql.extensions"), EXTENSION)
    )
    # The driver's own class path as well (a JVM started by this builder): classes loaded
    # through spark.jars live in a class loader that a server may close with a session.
    paths = [p for p in (options.get("spark.driver.extraClassPath") or "").split(os.pathsep) if p]
    if jar not in paths:
        builder = builder.config("spark.driver.extraClassPath", os.pathsep.join([*paths, jar]))
    if "spark.pyspark.python" not in options and not os.environ.get("PYSPARK_PYTHON"):
        builder = builder.config("spark.pyspark.python", sys.executable)
        # pyspark's own Python UDFs/UDTFs (register()) read PYSPARK_PYTHON, not the conf.
        os.environ["PYSPARK_PYTHON"] = sys.executable
    return builder


def _use_this_python(spark: Any) -> None:
    """Python UDTF workers must import cogra: run them with this interpreter unless the
    user chose one (pyspark defaults to whatever ``python3`` is on PATH)."""
    sc = getattr(spark, "sparkContext", None)
    if sc is not None and not os.environ.get("PYSPARK_PYTHON") and sc.pythonExec == "python3":
        sc.pythonExec = sys.executable


def session(app_name: str = "cogra", master: str = "local[*]", *, prepare_executors: bool | None = None,
            **conf: Any) -> "SparkSession":
    """A SparkSession in which ``MATCH_TREND`` works (the shim is built on first use).

    ``conf`` holds Spark settings (``session(**{"spark.sql.shuffle.partitions": "4"})``);
    they override :data:`LOCAL_DEFAULTS`. If a session already runs in this process
    without the extension, this raises: stop it first, or call :func:`register` on it.

    With a cluster master (``prepare_executors`` unset) or ``prepare_executors=True``, the
    executors' Python daemons load cogra before forking workers and a probe task per core
    checks them (:mod:`cogra.spark.workers`): a missing cogra is a CograError here, and
    the first query's tasks start warm.  With a local master (``prepare_executors``
    unset), the daemons load cogra too, and background threads start them and the
    driver's analysis worker without holding the session back
    (:func:`workers.warm_up_in_background`; no check is needed: the workers run this
    machine's cogra); ``prepare_executors=False`` does neither.
    """
    from pyspark.sql import SparkSession

    from cogra.runtime import warm_start
    from cogra.spark import workers

    warm_start.stop()  # a driver plans; its executors' workers evaluate
    prepare = is_cluster(master) if prepare_executors is None else prepare_executors
    warm_up = prepare_executors is None and not is_cluster(master)
    builder = SparkSession.builder.appName(app_name).master(master)
    daemon = {"spark.python.daemon.module": workers.DAEMON_MODULE} if prepare or warm_up else {}
    jar = jar_path()
    settings = _driver_start(master, {**local_defaults(master), **daemon, **{str(k): v for k, v in conf.items()}}, jar)
    for key, value in settings.items():
        if key not in ("spark.jars", "spark.sql.extensions"):
            builder = builder.config(key, str(value).lower() if isinstance(value, bool) else str(value))
    for key in ("spark.jars", "spark.sql.extensions"):
        if key in settings:
            builder = builder.config(key, str(settings[key]))
    spark = configure(builder, jar=jar).getOrCreate()
    if not has_extension(spark):
        raise RuntimeError(
            "a SparkSession without the cogra extension is already running in this process; "
            "stop it (spark.stop()) before cogra.spark.session(), or use "
            "cogra.spark.register(spark) to add MATCH_TREND to it as a Python UDTF"
        )
    if prepare:
        workers.prepare(spark)
    elif warm_up:
        workers.warm_up_in_background(spark)
    return spark


def _ansi(spark: "SparkSession") -> bool:
    try:
        return str(spark.conf.get("spark.sql.ansi.enabled", "true")).lower() == "true"
    except Exception:  # noqa: BLE001
        return True


def python_udtf(spark: "SparkSession") -> Any:
    """``MATCH_TREND`` as an (unregistered) Arrow Python UDTF object for ``spark``."""
    from pyspark.util import PythonEvalType

    handler = MatchTrendUDTF if _ansi(spark) else MatchTrendNullOnOverflowUDTF
    if _is_connect(spark):
        from pyspark.sql.connect.udtf import _create_udtf
    else:
        from pyspark.sql.udtf import _create_udtf
    # pyspark's public arrow_udtf() refuses an `analyze` method (SPARK-53286); the JVM runs
    # it for SQL_ARROW_UDTF all the same, so the UDTF is created with that eval type directly.
    return _create_udtf(
        handler, None, name=FUNCTION_NAME, evalType=PythonEvalType.SQL_ARROW_UDTF, deterministic=True
    )


def _is_connect(spark: "SparkSession") -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def register(spark: "SparkSession", name: str = FUNCTION_NAME) -> Any:
    """Register ``MATCH_TREND`` in ``spark`` as a session-scoped Python UDTF (no jar needed).

    The overflow policy follows ``spark.sql.ansi.enabled`` at registration time.
    """
    _use_this_python(spark)
    return spark.udtf.register(name, python_udtf(spark))


def match_trend(
    df: "DataFrame",
    query: str,
    *,
    type_column: str | None = None,
    time_column: str = "time",
    watermark: str | None = None,
    output_mode: str | None = None,
) -> "DataFrame":
    """Evaluate a COGRA ``query`` over ``df``: the DataFrame form of ``MATCH_TREND``.

    Uses the shim when the session has the extension (Arrow streaming, pushdown), and the
    Python UDTF otherwise; both give the same rows.  A streaming ``df`` needs
    ``watermark`` (how late an event may arrive, e.g. ``'30 seconds'``) and a query with
    WITHIN: each window's rows are emitted once the watermark passes its end
    (:mod:`cogra.spark.streaming`), and, when the writer's output mode is ``update``,
    the open windows' current rows after every micro-batch.  ``output_mode`` is for a
    session without the extension only, whose operator cannot see the writer's mode:
    ``'update'`` there must be the writer's mode too.
    """
    if output_mode not in (None, "append", "update"):
        raise ValueError(f"output_mode must be 'append' or 'update', not {output_mode!r}")
    if output_mode is not None and (not df.isStreaming or has_extension(df.sparkSession)):
        raise ValueError("output_mode= is for a streaming DataFrame on a session without the cogra "
                         "extension; with it, the writer's outputMode(...) decides")
    if df.isStreaming:
        from cogra.spark.streaming import match_trend_stream

        if watermark is None and "EventTimeWatermark" not in df._jdf.queryExecution().logical().toString():
            raise ValueError("a streaming DataFrame needs watermark=, how late an event may "
                             "arrive (e.g. watermark='30 seconds'), or a watermark of its own "
                             "(withWatermark): a window's rows are final only once no event of "
                             "it can come any more")
        if not has_extension(df.sparkSession):
            return match_trend_stream(df, query, watermark=watermark, type_column=type_column,
                                      time_column=time_column, update=output_mode == "update")
        require_window(parse(query))  # (as the shim would, but as a QueryError here)
    spark = df.sparkSession
    columns = {"time_column": time_column}
    if type_column is not None:
        columns["type_column"] = type_column
    if watermark is not None and df.isStreaming:
        columns["watermark"] = watermark
    if has_extension(spark):
        # One plan for SQL and DataFrames (streams too: the shim plans the stateful operator
        # and logs late rows).
        named = "".join(f", {name} => {sql_string(value)}" for name, value in columns.items())
        return spark.sql(f"SELECT * FROM {FUNCTION_NAME}(TABLE({{df}}), {sql_string(query)}{named})", df=df)
    from pyspark.sql.functions import lit

    _use_this_python(spark)
    udtf = python_udtf(spark)
    return udtf(df.asTable(), lit(query), **{name: lit(value) for name, value in columns.items()})
