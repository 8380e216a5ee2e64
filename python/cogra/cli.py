"""``cogra`` command line: demo, explain, run.

Spark-facing commands (``sql``, ``thriftserver``, ``connect-server``) and ``bench`` are
registered by their own modules when present, so this file stays a thin dispatcher.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import pyarrow as pa

import cogra
from cogra.commands import REGISTERED
from cogra.errors import CograError

Command = Callable[[argparse.Namespace], int]
def _print_table(table: pa.Table, limit: int = 10) -> None:
    cols = table.column_names
    rows = table.slice(0, limit).to_pylist()
    cells = [[_fmt(r[c]) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    print("  " + "  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for row in cells:
        print("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths)))
    if table.num_rows > limit:
        print(f"  ... {table.num_rows - limit} more rows")


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return "NULL" if v is None else str(v)


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the report's q1-q3 over generated data: through spark.sql (default) or the engine."""
    if args.stream:
        from cogra.spark.demo import run_stream_demo

        return run_stream_demo(seconds=args.seconds, rows=args.rows, master=args.master)
    if not args.no_spark:
        from cogra.spark.demo import run_demo

        return run_demo(events=args.events, rows=args.rows, master=args.master)
    from cogra.examples import EXAMPLES

    for ex in EXAMPLES:
        table = ex.data(n_events=args.events, seed=0)
        print(f"\n=== {ex.name}: {ex.title} ({table.num_rows:,} events of table {ex.table}) ===")
        print("\n".join("  " + line for line in ex.query.splitlines()))
        started = time.perf_counter()
        result = cogra.evaluate(ex.query, table, on_overflow="null")
        took = time.perf_counter() - started
        print(f"-> {result.num_rows:,} rows in {took:.2f} s "
              f"({table.num_rows / took:,.0f} events/s, executor: {cogra.plan(ex.query, table.schema).executor.value})")
        _print_table(result, args.rows)
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    text = open(args.file).read() if args.file else args.query
    print(cogra.explain(text))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Evaluate a query over a Parquet/CSV file with the in-process engine."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    text = open(args.file).read() if args.file else args.query
    table = pq.read_table(args.data) if args.data.endswith(".parquet") else pcsv.read_csv(args.data)
    result = cogra.evaluate(text, table, type_column=args.type_column, time_column=args.time_column,
                            on_overflow=args.on_overflow)
    _print_table(result, args.rows)
    return 0


def cmd_warm(args: argparse.Namespace) -> int:
    from cogra import warmup

    if args.spark:
        from cogra.spark import archive_dump

        return archive_dump.main(["--force"] if args.force else [])
    if args.bundle is not None:
        return 1 if warmup.bundle(Path(args.bundle) if args.bundle else None, args.jobs) else 0
    return 1 if warmup.run(args.jobs) else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cogra", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"cogra {cogra.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="run the report's q1-q3 over generated data")
    p.add_argument("--events", type=int, default=20_000, help="events per data set")
    p.add_argument("--rows", type=int, default=8, help="result rows to print per query")
    p.add_argument("--no-spark", action="store_true",
                   help="evaluate with cogra.evaluate in this process instead of spark.sql")
    p.add_argument("--master", default="local[*]", help="Spark master for the demo")
    p.add_argument("--stream", action="store_true",
                   help="q3 over a live stock stream, windows printed as they close")
    p.add_argument("--seconds", type=float, default=30.0, help="how long the --stream demo runs")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("explain", help="show a query's plan")
    p.add_argument("query", nargs="?")
    p.add_argument("-f", "--file")
    p.set_defaults(func=cmd_explain)
    p = sub.add_parser("run", help="evaluate a query over a Parquet or CSV file (no Spark)")
    p.add_argument("query", nargs="?")
    p.add_argument("-f", "--file")
    p.add_argument("--data", required=True)
    p.add_argument("--type-column", default=None)
    p.add_argument("--time-column", default="time")
    p.add_argument("--on-overflow", choices=("error", "null"), default="error")
    p.add_argument("--rows", type=int, default=20)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("warm", help="compile the generic kernels into the disk cache ahead of the first query")
    p.add_argument("--jobs", type=int, default=None, help="compiles at once (default: the cores)")
    p.add_argument("--bundle", nargs="?", const="", default=None, metavar="DIR",
                   help="compile for the architecture's baseline CPU into the bundle that ships with "
                        "cogra (default: the package's _kernels directory) instead of this machine's cache")
    p.add_argument("--spark", action="store_true",
                   help="instead: dump the class archive that cogra.spark.session()'s driver JVM starts from "
                        "(where none matches this JDK, pyspark and shim jar; ~40 s)")
    p.add_argument("--force", action="store_true", help="with --spark: dump it again")
    p.set_defaults(func=cmd_warm)
    importlib.import_module("cogra.bench")  # registers `cogra bench`
    if importlib.util.find_spec("pyspark") is not None:
        # registers sql, data, shim, thriftserver, connect-server
        importlib.import_module("cogra.spark.cli")

    for register in REGISTERED:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CograError as err:
        print(f"cogra: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
