"""Running SQL statements for ``cogra sql`` and the Spark demo: sessions, data, output.

A statement is run with ``spark.sql`` and, when it returns columns, its result is
collected as Arrow and printed; commands (``CREATE ...``) run eagerly in ``spark.sql``
and print ``OK``. The first failing statement stops the script, as ``spark-sql -f``
does, and its error is printed without the JVM stack trace (cogra's messages carry the
line, column and a caret).
"""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Mapping, Sequence

from cogra.spark.sqlscript import Statement

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

#: Shown after "table or view not found": the catalog of ``cogra sql`` lives for one run.
NOT_FOUND_HINT = (
    "hint: tables live for one `cogra sql` run; pass --data DIR (a directory written by "
    "`cogra data`) or run -f sql/setup.sql first in the same command"
)


#: Shown when the session does not know MATCH_TREND (a server started without the shim).
NO_FUNCTION_HINT = (
    "hint: this session has no MATCH_TREND; start servers with `cogra thriftserver` / "
    "`cogra connect-server`, or call cogra.spark.register(spark) in a program"
)


def quiet_pyspark() -> None:
    """Keep a command's output to its results and one message per failure.

    pyspark warns about pandas >= 3 on Arrow conversions (cogra does not use pandas), and
    logs every SQL error as a JSON record with the JVM stack before raising it.
    """
    import logging

    from pyspark.logger import PySparkLogger

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark(\.|$)")
    PySparkLogger.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)


def open_session(master: str = "local[*]", remote: str | None = None,
                 conf: Mapping[str, str] | None = None) -> tuple["SparkSession", bool]:
    """(session, whether the caller owns it and should stop it).

    ``remote`` (``sc://host:port``) connects to a Spark Connect server, which must have been
    started with the cogra extension (``cogra connect-server``). Otherwise a session already
    active in this process is reused as it is (a program embedding the CLI), else a local
    one with the shim is started by :func:`cogra.spark.session`.
    """
    from pyspark.sql import SparkSession

    if remote:
        builder = SparkSession.builder.remote(remote)
        for key, value in (conf or {}).items():
            builder = builder.config(key, value)
        return builder.create(), True  # a session of our own, even if one is open to `remote`
    active = SparkSession.getActiveSession()
    from cogra.spark import has_extension

    if active is not None and has_extension(active):
        return active, False
    from cogra.spark import session

    # Raises, naming the fix, when a session without the extension is already running.
    spark = session(app_name="cogra sql", master=master, **dict(conf or {}))
    spark.sparkContext.setLogLevel("ERROR")
    return spark, True


def register_parquet_views(spark: "SparkSession", directory: str | Path) -> list[str]:
    """Make each ``directory/<name>/`` of Parquet files (and ``<name>.parquet``) a temp
    view ``<name>``: the layout :func:`cogra.datasets.write_parquet` writes."""
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"no data directory {root}")
    names = []
    for path in sorted(root.iterdir()):
        if path.is_dir() and any(path.rglob("*.parquet")):
            name = path.name
        elif path.is_file() and path.suffix == ".parquet":
            name = path.stem
        else:
            continue
        spark.read.parquet(str(path.resolve())).createOrReplaceTempView(name)
        names.append(name)
    if not names:
        raise FileNotFoundError(f"no Parquet data sets in {root} (write some with `cogra data {root}`)")
    return names


def error_text(exc: BaseException) -> str:
    """An exception's message without the JVM stack trace and the logical plan that
    pyspark appends (a Spark error's own message is enough: cogra's carry a caret)."""
    text = ""
    get_message = getattr(exc, "getMessage", None)
    if callable(get_message):
        try:
            text = str(get_message() or "")
        except Exception:  # noqa: BLE001 - e.g. the JVM is gone
            text = ""
    text = text or str(exc)
    for marker in ("\n\nJVM stacktrace:", "\nJVM stacktrace:", "\n\tat "):
        text = text.split(marker, 1)[0]
    return text.strip() or type(exc).__name__


@dataclass
class Outcome:
    statement: Statement
    rows: int | None  # None: a command without a result set
    seconds: float


def run_statement(spark: "SparkSession", statement: Statement) -> tuple[Outcome, Any]:
    """Run one (substituted) statement; returns its outcome and its result (a
    pyarrow.Table, or None for a command)."""
    started = time.perf_counter()
    df = spark.sql(statement.text)
    table = df.toArrow() if df.columns else None
    took = time.perf_counter() - started
    return Outcome(statement, None if table is None else table.num_rows, took), table


def run_statements(spark: "SparkSession", statements: Sequence[Statement], *, rows: int = 20,
                   out: IO[str] | None = None, err: IO[str] | None = None,
                   echo: bool = False) -> int:
    """Run ``statements`` in order, printing each result; 0, or 1 at the first failure."""
    out = out or sys.stdout
    err = err or sys.stderr
    for statement in statements:
        if echo:
            print(f"-- {statement.where}\n{statement.text};", file=out)
        try:
            outcome, table = run_statement(spark, statement)
        except Exception as e:  # noqa: BLE001 - Spark raises many kinds; all end the script
            text = error_text(e)
            print(f"cogra sql: statement at {statement.where} failed:\n{text}", file=err)
            if "TABLE_OR_VIEW_NOT_FOUND" in text:
                print(NOT_FOUND_HINT, file=err)
            elif "UNRESOLVABLE_TABLE_VALUED_FUNCTION" in text and "MATCH_TREND" in text.upper():
                print(NO_FUNCTION_HINT, file=err)
            return 1
        if table is None:
            print(f"OK ({outcome.seconds:.2f} s)", file=out)
            continue
        if table.num_columns:
            print_table(table, rows, out)
        print(f"({outcome.rows:,} row{'s' * (outcome.rows != 1)}, {outcome.seconds:.2f} s)", file=out)
    return 0


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def print_table(table: Any, limit: int, out: IO[str]) -> None:
    """The first ``limit`` rows of a pyarrow.Table as aligned text columns."""
    names = table.column_names
    head = table.slice(0, max(limit, 0))
    columns = [head.column(i).to_pylist() for i in range(head.num_columns)]  # names may repeat
    cells = [[_cell(v) for v in row] for row in zip(*columns)]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(names)]
    print("  " + "  ".join(c.ljust(w) for c, w in zip(names, widths)).rstrip(), file=out)
    for row in cells:
        print("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip(), file=out)
    if table.num_rows > limit:
        print(f"  ... {table.num_rows - limit:,} more rows", file=out)
