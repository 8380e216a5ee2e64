"""``cogra bench``: reproduce the report's §9 experiments and measure the engine's targets.

    cogra bench                      # every experiment (not the opt-in spark-e2e hook)
    cogra bench --quick              # small sizes and short limits: under two minutes
    cogra bench --experiments any-events,mixed-vs-greta --time-limit 120
    cogra bench --list               # the experiments
    cogra bench --experiments streaming   # q1-q3 over Structured Streaming (opt-in; Spark)
    cogra bench --experiments streaming-operators   # each streaming plan's cost per row (opt-in; Spark)
    cogra bench --experiments first-run   # a fresh process's and a fresh executor's first query (opt-in)
    cogra bench --experiments flink-cep   # against Flink CEP (opt-in; cogra[bench-flink] and a JDK)
    cogra bench --report-only bench-results/20260101-120000   # regenerate the docs
    python -m cogra.bench ...        # the same

Writes ``bench-results/<timestamp>/results.csv`` and ``machine.json`` (git-ignored),
one PNG per experiment and metric into ``docs/benchmarks/`` and ``docs/benchmarks.md``.
Progress goes to stderr, one line per run.  The full set takes about an hour on two
cores, most of it waiting for the time limit of contenders that do not finish
(``--time-limit 60`` shortens that).  See :mod:`cogra.bench.experiments` for the
experiments and contenders, :mod:`cogra.bench.runner` for how a run is measured, and
:mod:`cogra.bench.report` for the plots and the markdown.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Sequence

from cogra.commands import extra_command

QUICK_TIME_LIMIT = 3.0
FULL_TIME_LIMIT = 300.0


def repository_root() -> Path:
    """The source checkout (where ``docs/`` lives) when cogra runs from one, else the cwd."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").exists() and (parent / "docs").is_dir():
            return parent
    return Path.cwd()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true",
                   help=f"small sizes and a {QUICK_TIME_LIMIT:g} s limit (finishes in under two minutes)")
    p.add_argument("--experiments", metavar="A,B",
                   help="comma-separated experiment ids, or 'all' (default: all but opt-in ones; see --list)")
    p.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help=f"per evaluation; beyond it a run is DNF (default {FULL_TIME_LIMIT:g}, quick {QUICK_TIME_LIMIT:g})")
    p.add_argument("--memory-limit", type=float, metavar="GIB",
                   help="RSS per run; beyond it a run is OOM (default: 8 GiB or 40%% of RAM, if less)")
    p.add_argument("--repeat", type=int, default=1, help="evaluations per run; the median is reported (default 1)")
    p.add_argument("--out", metavar="DIR", help="results directory (default bench-results/<timestamp>)")
    p.add_argument("--docs", metavar="DIR", help="where benchmarks.md and benchmarks/*.png go (default docs/)")
    p.add_argument("--no-docs", action="store_true", help="write the CSV only")
    p.add_argument("--no-tracemalloc", action="store_true", help="skip the tracemalloc run")
    p.add_argument("--warmup", choices=("prefix", "full", "none"), default="prefix",
                   help="before measuring, evaluate on the first 300 rows (default), on all of them "
                        "(steady state; the setup limit applies), or not at all")
    p.add_argument("--max-trends", type=int, help="trend budget of the two-step contender (default 2,000,000)")
    p.add_argument("--report-only", metavar="RESULTS_DIR", help="regenerate plots and markdown from a results dir")
    p.add_argument("--list", action="store_true", help="list the experiments and exit")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


@extra_command
def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="reproduce the report's performance evaluation (section 9)",
                       description=__doc__.splitlines()[0])
    add_arguments(p)
    p.set_defaults(func=run_command)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cogra.bench", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    args.command_line = "python -m cogra.bench " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    from cogra.bench import experiments, report, runner, sections

    if args.list:
        for e in experiments.EXPERIMENTS.values():
            print(f"{e.id:<16} {e.title}{'  (opt-in)' if e.opt_in else ''}")
            print(f"{'':<16} {e.figure}")
        print(f"{'first-run':<16} q1-q3 in a fresh process with empty kernel caches, and on fresh executors  (opt-in)")
        print(f"{'':<16} target: issue 'First run and clusters' (cogra.bench.first_run)")
        print(f"{'streaming':<16} q1-q3 over Structured Streaming: sustained rate, latency, state size  (opt-in)")
        print(f"{'':<16} target: issue 'Streaming', item 7 (cogra.bench.streaming)")
        print(f"{'streaming-operators':<16} q1-q3 per streaming operator against Spark's window aggregation and each operator's no-op  (opt-in)")
        print(f"{'':<16} target: issue 'Streaming at the speed of Spark' (cogra.bench.streaming_operators)")
        print(f"{'negation':<16} SEQ(A+, NOT N, B) against SEQ(A+, B): time per event by events per window  (opt-in)")
        print(f"{'':<16} target: issue 'Language', cost linear in the events per window (cogra.bench.negation)")
        print(f"{'whole-call':<16} the whole cogra.evaluate call against its kernel alone, one window  (opt-in)")
        print(f"{'':<16} target: issue 'Performance against a real peer', item 2 (cogra.bench.whole_call)")
        print(f"{'flink-cep':<16} cogra against Flink CEP on the report's §9 queries, where the semantics agree  (opt-in)")
        print(f"{'':<16} needs cogra[bench-flink] and a JDK (cogra.bench.flink_cep)")
        return 0
    root = repository_root()
    docs_dir = Path(args.docs) if args.docs else root / "docs"
    if args.report_only:
        md, plots = report.generate(Path(args.report_only), docs_dir)
        print(f"wrote {md} and {len(plots)} plots in {md.parent / 'benchmarks'}")
        return 0

    names = [n.strip() for n in (args.experiments or "").split(",") if n.strip()]
    # The opt-in sections measured by commands of their own (cogra.bench.sections).
    for section in sections.SECTIONS:
        if section not in names and names != ["all"]:
            continue
        module = importlib.import_module(f"cogra.bench.{section.replace('-', '_')}")
        out_dir = Path(args.out) if args.out else root / "bench-results" / report.timestamp()
        module.run(args.quick, out_dir, None if args.no_docs else docs_dir,
                   log=(lambda _text: None) if args.quiet else None)
        names = [n for n in names if n != section]
        if not names:
            return 0
        args.experiments = ",".join(names)
    try:
        selected = experiments.select(args.experiments)
    except ValueError as err:
        print(f"cogra bench: {err}", file=sys.stderr)
        return 2
    limits = runner.Limits(
        time_limit=args.time_limit or (QUICK_TIME_LIMIT if args.quick else FULL_TIME_LIMIT),
        memory_limit=int(args.memory_limit * 2**30) if args.memory_limit else default_memory_limit(),
        setup_limit=120.0 if args.quick else 900.0,
        repeat=max(1, args.repeat),
        tracemalloc=not args.no_tracemalloc,
        warmup=args.warmup,
        max_trends=args.max_trends or runner.TWO_STEP_MAX_TRENDS,
    )
    out_dir = Path(args.out) if args.out else root / "bench-results" / report.timestamp()
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [r for e in selected for r in e.runs(args.quick)]
    command = getattr(args, "command_line", None) or "cogra " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    settings = {
        "command": command, "quick": bool(args.quick), "experiments": [e.id for e in selected],
        "time_limit": limits.time_limit, "memory_limit": limits.memory_limit, "repeat": limits.repeat,
        "max_trends": limits.max_trends, "warmup": limits.warmup, "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "load_average_before": _load(),
    }
    meta = {"machine": report.machine_description(root), "settings": settings}
    (out_dir / "machine.json").write_text(json.dumps(meta, indent=2))
    if not args.quiet:
        print(f"cogra bench: {len(runs)} runs of {len(selected)} experiment(s), time limit "
              f"{limits.time_limit:g} s, results in {out_dir}", file=sys.stderr)
    began = time.perf_counter()
    categorical = {e.id for e in selected if e.categorical}
    runner.run_all(runs, limits, out_dir / "results.csv", categorical=categorical, progress=not args.quiet)
    took = time.perf_counter() - began
    settings["duration_s"] = round(took, 1)
    settings["load_average_after"] = _load()
    (out_dir / "machine.json").write_text(json.dumps(meta, indent=2))
    print(f"results: {out_dir / 'results.csv'} ({took:.0f} s)")
    if not args.no_docs:
        md, plots = report.generate(out_dir, docs_dir)
        print(f"docs:    {md} and {len(plots)} plots in {md.parent / 'benchmarks'}")
    return 0


def _load() -> list[float] | None:
    import os

    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def default_memory_limit() -> int:
    import psutil

    return int(min(8 * 2**30, 0.4 * psutil.virtual_memory().total))
