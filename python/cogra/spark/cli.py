"""The Spark subcommands of ``cogra``: sql, data, shim, thriftserver, connect-server.

They live here, registered through :func:`cogra.commands.extra_command`, so that ``cogra``'s
core commands work without pyspark. ``cogra/cli.py`` imports this module once; it can
also be run on its own: ``python -m cogra.spark.cli sql "SELECT ..."``.

::

    cogra data DIR [--events N]                 # Parquet data sets for sql/setup.sql
    cogra sql "SELECT ..." | -f FILE [...]      # statements through spark.sql, with MATCH_TREND
    cogra shim [--force]                        # build the JVM shim jar
    cogra thriftserver [--port 10000]           # JDBC/ODBC server (foreground)
    cogra connect-server [--port 15002]         # Spark Connect server (foreground)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cogra.commands import extra_command

_COMMANDS = ("sql", "data", "shim", "thriftserver", "connect-server")


def cmd_sql(args: argparse.Namespace) -> int:
    """Run statements (each -f file in order, then the arguments) in one Spark session."""
    from cogra.spark.sqlrun import open_session, quiet_pyspark, register_parquet_views, run_statements
    from cogra.spark.sqlscript import ScriptError, parse_definitions, resolve, split_statements
    from cogra.spark.servers import parse_conf

    try:
        variables = parse_definitions(args.define)
        conf = parse_conf(args.conf)
        statements = []
        for name in args.file or ():
            text = sys.stdin.read() if name == "-" else Path(name).read_text()
            statements += split_statements(text, "<stdin>" if name == "-" else name)
        for i, text in enumerate(args.statements):
            statements += split_statements(text, f"<argument {i + 1}>")
        if args.data:
            variables.setdefault("COGRA_DATA", str(Path(args.data).resolve()))
        statements = resolve(statements, variables)  # an undefined ${NAME} fails before Spark starts
    except (ScriptError, ValueError, OSError) as e:
        print(f"cogra sql: {e}", file=sys.stderr)
        return 2
    if not statements:
        print("cogra sql: nothing to run: give a statement or -f FILE", file=sys.stderr)
        return 2

    quiet_pyspark()
    spark, owned = open_session(master=args.master, remote=args.remote, conf=conf)
    try:
        if args.data:
            try:
                names = register_parquet_views(spark, args.data)
            except FileNotFoundError as e:
                print(f"cogra sql: {e}", file=sys.stderr)
                return 2
            print(f"-- views over {args.data}: {', '.join(names)}", file=sys.stderr)
        return run_statements(spark, statements, rows=args.rows, echo=args.echo)
    finally:
        if owned:
            spark.stop()


def cmd_data(args: argparse.Namespace) -> int:
    """Write the generated data sets as ``DIR/<name>/part-00000.parquet``."""
    from cogra import datasets

    names = args.tables or datasets.NAMES
    unknown = [n for n in names if n not in datasets.NAMES]
    if unknown:
        print(f"cogra data: unknown data set {', '.join(unknown)} "
              f"(known: {', '.join(datasets.NAMES)})", file=sys.stderr)
        return 2
    written = datasets.write_parquet(args.directory, n_events=args.events, names=names, seed=args.seed)
    for name, path in written.items():
        print(f"{name:10s} {path}")
    root = Path(args.directory).resolve()
    print(f"next: cogra sql --data {root} -f sql/q1.sql   "
          f"(or: cogra sql -d COGRA_DATA={root} -f sql/setup.sql -f sql/q1.sql)")
    return 0


def cmd_shim(args: argparse.Namespace) -> int:
    """Build the shim jar if stale (or always with --force) and print its path."""
    from cogra.spark import shim_build

    try:
        result = shim_build.ensure_jar(force=args.force)
    except shim_build.ShimBuildError as e:
        print(f"cogra shim: {e}", file=sys.stderr)
        return 1
    if result.built:
        print(f"built in {result.seconds:.1f} s", file=sys.stderr)
    print(result.jar)
    return 0


def _serve(kind: str, args: argparse.Namespace) -> int:
    from cogra.spark.servers import ServerSpec, parse_conf, serve

    try:
        spec = ServerSpec(kind, host=args.host, port=args.port, master=args.master,
                          conf=parse_conf(args.conf), hiveconf=parse_conf(getattr(args, "hiveconf", None)))
    except ValueError as e:
        print(f"cogra: {e}", file=sys.stderr)
        return 2
    return serve(spec, cwd=args.work_dir)


def cmd_thriftserver(args: argparse.Namespace) -> int:
    return _serve("thrift", args)


def cmd_connect_server(args: argparse.Namespace) -> int:
    return _serve("connect", args)


def _server_arguments(p: argparse.ArgumentParser, port: int) -> None:
    p.add_argument("--port", type=int, default=port, help=f"port to listen on (default {port})")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--conf", action="append", metavar="KEY=VALUE", help="a Spark setting (repeatable)")
    p.add_argument("--work-dir", default=None,
                   help="the server's working directory (metastore_db/, spark-warehouse/; "
                        "default: the current directory)")


@extra_command
def register(sub: argparse._SubParsersAction) -> None:
    """Add the Spark subcommands to ``cogra``'s parser (once, however often imported)."""
    if any(name in sub.choices for name in _COMMANDS):
        return

    p = sub.add_parser("sql", help="run Spark SQL statements (MATCH_TREND available)",
                       description="Run Spark SQL statements in a local session with MATCH_TREND "
                                   "(or on a Spark Connect server with --remote).")
    p.add_argument("statements", nargs="*", metavar="STATEMENT",
                   help="SQL text; several statements may be separated by ';'")
    p.add_argument("-f", "--file", action="append", metavar="FILE",
                   help="a file of ';'-separated statements, '-' for stdin (repeatable; files "
                        "run in order, before the STATEMENT arguments)")
    p.add_argument("-d", "--define", action="append", metavar="NAME=VALUE",
                   help="substitute ${NAME} (else the environment variable NAME is used)")
    p.add_argument("--data", metavar="DIR",
                   help="register DIR/<name>/ Parquet data sets as views and define COGRA_DATA=DIR")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--remote", metavar="sc://HOST:PORT",
                   help="run on a Spark Connect server (started with `cogra connect-server`)")
    p.add_argument("--conf", action="append", metavar="KEY=VALUE", help="a Spark setting (repeatable)")
    p.add_argument("--rows", type=int, default=20, help="result rows to print per statement")
    p.add_argument("--echo", action="store_true", help="print each statement before running it")
    p.set_defaults(func=cmd_sql)

    p = sub.add_parser("data", help="write the generated data sets as Parquet (for sql/setup.sql)")
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--events", type=int, default=None,
                   help="events per data set (default: each generator's own size)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tables", nargs="+", metavar="NAME", help="only these data sets")
    p.set_defaults(func=cmd_data)

    p = sub.add_parser("shim", help="build the MATCH_TREND JVM shim jar and print its path")
    p.add_argument("--force", action="store_true", help="rebuild even if up to date")
    p.set_defaults(func=cmd_shim)

    p = sub.add_parser("thriftserver", help="run Spark's Thrift JDBC/ODBC server with MATCH_TREND")
    p.add_argument("--hiveconf", action="append", metavar="KEY=VALUE",
                   help="a HiveServer2 setting, e.g. hive.server2.authentication=LDAP (repeatable)")
    _server_arguments(p, 10000)
    p.set_defaults(func=cmd_thriftserver)

    p = sub.add_parser("connect-server", help="run a Spark Connect server with MATCH_TREND")
    _server_arguments(p, 15002)
    p.set_defaults(func=cmd_connect_server)


if __name__ == "__main__":  # pragma: no cover - `python -m cogra.spark.cli ...`
    from cogra import cli as _cli
    from cogra.spark import cli as _registered  # noqa: F401 - the importable copy registers

    sys.exit(_cli.main())
