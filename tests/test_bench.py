"""The benchmark harness end to end on a tiny experiment (no timing assertions)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from cogra.bench import experiments, main, runner
from cogra.bench.experiments import Experiment, Run


def tiny_runs(quick: bool) -> list[Run]:
    q = experiments.Q_ANY
    runs = [Run("tiny", c, c, n, "stock", n, q, meta={"semantics": "any"})
            for c in ("cogra", "two-step", "greta", "a-seq") for n in (40, 80)]
    runs.append(Run("tiny", "a-seq", "a-seq", 120, "stock", 120, experiments.Q_SELECTIVITY.format(offset=0)))
    # sleeps one millisecond per event: 3 s, far beyond the time limit below -> DNF,
    # and the next point of the same series is DNF without running.
    runs += [Run("tiny", "sleeper", "sleep", n, "stock", n, q) for n in (3000, 6000)]
    return runs


@pytest.fixture
def tiny(monkeypatch):
    exp = Experiment("tiny", "A tiny experiment", "test", "Two sizes, every contender.",
                     "events per window", True, tiny_runs)
    monkeypatch.setitem(experiments.EXPERIMENTS, "tiny", exp)
    return exp


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_end_to_end(tiny, tmp_path: Path, capsys) -> None:
    out, docs = tmp_path / "results", tmp_path / "docs"
    docs.mkdir()
    code = main(["--experiments", "tiny", "--out", str(out), "--docs", str(docs), "--time-limit", "1"])
    assert code == 0
    rows = read_csv(out / "results.csv")
    assert len(rows) == len(tiny_runs(True))
    by = {(r["series"], r["x"]): r for r in rows}

    for c in ("cogra", "greta", "a-seq", "two-step"):
        r = by[(c, "40")]
        assert r["status"] == "ok", r
        assert float(r["latency_s"]) > 0 and float(r["throughput_eps"]) > 0
        assert r["rss_peak_delta_bytes"] != "" and r["tracemalloc_peak_bytes"] != ""
    assert by[("cogra", "40")]["executor"] == "type-grained"
    # Every contender that finished agrees on the number of trends (the cross-check).
    counts = {by[(c, "40")]["result_digest"] for c in ("cogra", "greta", "a-seq", "two-step")}
    assert len(counts) == 1 and next(iter(counts)).startswith("count=")

    assert by[("a-seq", "120")]["status"] == "n/a"  # predicates on adjacent events
    assert by[("sleeper", "3000")]["status"] == "DNF"
    assert "time limit" in by[("sleeper", "3000")]["message"]
    assert by[("sleeper", "6000")]["status"] == "DNF"
    assert "not run" in by[("sleeper", "6000")]["message"]

    meta = json.loads((out / "machine.json").read_text())
    assert meta["machine"]["logical_cores"] >= 1 and meta["settings"]["time_limit"] == 1

    md = (docs / "benchmarks.md").read_text()
    assert "## Machine" in md and meta["machine"]["cpu"] in md
    assert "## Headline ratios" in md and "### `tiny`" in md
    assert "DNF" in md and "n/a" in md
    plots = sorted(p.name for p in (docs / "benchmarks").glob("*.png"))
    assert "tiny-latency.png" in plots and "tiny-throughput.png" in plots
    assert "](benchmarks/tiny-latency.png)" in md
    assert "[" in capsys.readouterr().err  # progress lines on stderr

    # The docs can be regenerated from the results alone.
    (docs / "benchmarks.md").unlink()
    assert main(["--report-only", str(out), "--docs", str(docs)]) == 0
    assert (docs / "benchmarks.md").exists()


def test_measure_reports_dnf_and_errors() -> None:
    limits = runner.Limits(time_limit=0.3, tracemalloc=False)
    out = runner.measure(Run("t", "s", "sleep", 1, "stock", 2000, ""), limits)
    assert out.status == runner.DNF and out.latency_s is None
    out = runner.measure(Run("t", "s", "cogra", 1, "stock", 50, "RETURN COUNT(*) PATTERN Stock A+ WHERE B.x > 1"), limits)
    assert out.status == runner.ERROR and "unknown variable" in out.message


def test_cogra_bench_is_a_cli_command() -> None:
    import cogra.bench  # noqa: F401  (registers the command)
    from cogra.cli import build_parser

    args = build_parser().parse_args(["bench", "--quick", "--experiments", "groups"])
    assert args.quick and args.experiments == "groups" and callable(args.func)


def test_experiment_selection_and_sizes() -> None:
    default = [e.id for e in experiments.select(None)]
    assert "spark-e2e" not in default and {"any-events", "mixed-vs-greta", "sliding", "memory"} <= set(default)
    assert "spark-e2e" in [e.id for e in experiments.select("all")]
    with pytest.raises(ValueError, match="unknown experiment"):
        experiments.select("nope")
    for exp in experiments.EXPERIMENTS.values():
        assert exp.runs(True) and len(exp.runs(True)) <= len(exp.runs(False))
    offset, actual = experiments.volume_offset(0.5)
    assert offset % 100 == 0 and abs(actual - 0.5) < 0.01
    assert experiments.volume_offset(0.1)[1] < experiments.volume_offset(0.9)[1]


def test_which_contenders_apply() -> None:
    """Report Table 10: GRETA and A-Seq only under skip-till-any-match, A-Seq without
    predicates on adjacent events."""
    schemas = {}
    na = set()
    for exp in experiments.select("any-events,next-events,cont-events,selectivity,groups"):
        for run in exp.runs(True):
            key = (run.dataset, tuple(sorted(run.data_kwargs.items())))
            if key not in schemas:
                schemas[key] = runner.make_table(Run("", "", "", 0, run.dataset, 10, "", dict(run.data_kwargs))).schema
            if runner.applicable(run.contender, run.query, schemas[key]):
                na.add((run.experiment, run.contender))
    assert na == {("next-events", "greta"), ("next-events", "a-seq"), ("cont-events", "greta"),
                  ("cont-events", "a-seq"), ("selectivity", "a-seq")}


def test_spark_hook_skips_without_pyspark(monkeypatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else real(name, *a))
    with pytest.raises(runner.Skip, match="pyspark"):
        runner._contender("spark", runner.Limits())


def test_a_paired_run_times_both_queries_in_one_process() -> None:
    # The sliding target's ratio in one process: the paired query before each measured
    # call, its median reported beside the run's own; the headline states their ratio.
    from cogra.bench import report

    limits = runner.Limits(time_limit=30, tracemalloc=False, repeat=3)
    sliding = experiments.Q_SLIDING.format(slide=" SLIDE 10 seconds")
    tumbling = experiments.Q_SLIDING.format(slide="")
    run = Run("sliding", "paired, 10/s", "cogra", 3000, "stock", 3000, sliding,
              data_kwargs={"rate": 10.0}, paired_query=tumbling)
    out = runner.measure(run, limits)
    assert out.status == runner.OK and out.repeats == 3
    assert out.paired_latency_s is not None and out.paired_latency_s > 0
    alone = runner.measure(Run("sliding", "sliding, 10/s", "cogra", 3000, "stock", 3000, sliding,
                               data_kwargs={"rate": 10.0}), limits)
    assert alone.paired_latency_s is None and alone.result_digest == out.result_digest
    row = runner.outcome_row(run, out)
    assert row["paired_latency_s"] == out.paired_latency_s
    target = report._paired_target(row, 3000, ", 10/s")
    assert target["target"] == "sliding vs tumbling in one process, 3,000 events, 10/s"
    assert target["verdict"] == ("met" if out.latency_s / out.paired_latency_s <= 3 else "missed")
    assert f"{out.latency_s / out.paired_latency_s:.2f}" in target["measured"]


def test_the_warm_up_compiles_the_generated_sliding_kernel_on_a_few_rows(monkeypatch) -> None:
    # The warm-up's 300 rows hold too few events per window for the sharing kernel, and a
    # compile requested in the background dies with the child's process tree: the warm-up
    # lowers every threshold, so the generated sliding kernel and finish run on them.
    import cogra
    from cogra.datasets import stock
    from cogra.runtime.compiled.codegen import kernel_cache
    from cogra.runtime.compiled import kernel_driver
    from cogra.runtime.compiled.finish import by_column
    from cogra.runtime.compiled.windows import sliding

    before = (kernel_driver.SPECIALIZE_MIN_EVENTS, sliding.SPECIALIZE_MIN_EVENTS, sliding.MIN_EVENTS_PER_WINDOW,
              by_column.SPECIALIZE_MIN_KEYS)
    ran = []
    real = kernel_cache.sliding_for
    monkeypatch.setattr(kernel_cache, "sliding_for", lambda shape: ran.append(shape) or real(shape))
    query = experiments.Q_SLIDING.format(slide=" SLIDE 1 second")
    with runner.generated_kernels_always():
        assert (kernel_driver.SPECIALIZE_MIN_EVENTS, sliding.SPECIALIZE_MIN_EVENTS, sliding.MIN_EVENTS_PER_WINDOW,
                by_column.SPECIALIZE_MIN_KEYS) == (0, 0, 0, 0)
        cogra.evaluate(query, stock(runner.WARMUP_ROWS, rate=10.0), on_overflow="null")
    assert ran  # the generated sharing kernel ran (compiled, or loaded from the cache)
    assert (kernel_driver.SPECIALIZE_MIN_EVENTS, sliding.SPECIALIZE_MIN_EVENTS, sliding.MIN_EVENTS_PER_WINDOW,
            by_column.SPECIALIZE_MIN_KEYS) == before


def test_memory_flatness_is_judged_on_the_streamed_runs() -> None:
    # The target is the executors' own memory: evaluate_batches (the "(stream)" series).
    # A whole-table call holds its input and per-event arrays, which scale with it: its
    # ratio is reported, not judged.
    from cogra.bench import report

    def row(series: str, x: int, rss: int, traced: int) -> dict:
        return {"experiment": "memory", "series": series, "x": x, "status": "ok",
                "rss_peak_delta_bytes": rss, "tracemalloc_peak_bytes": traced}

    rows = [row("type-grained", 10**6, 70 << 20, 89 << 20), row("type-grained", 10**7, 660 << 20, 888 << 20),
            row("type-grained (stream)", 10**6, 17 << 20, 10 << 20),
            row("type-grained (stream)", 10**7, 13 << 20, 12 << 20)]
    targets = {t["target"]: t for t in report.headline(rows, None)}
    whole = targets["peak memory 10,000,000 vs 1,000,000 events, type-grained (peak RSS delta)"]
    assert whole["verdict"] == "" and whole["goal"] == "(informational)" and "9.43x" in whole["measured"]
    assert targets["peak memory 10,000,000 vs 1,000,000 events, type-grained (stream) (peak RSS delta)"]["verdict"] == "met"
    assert targets["peak memory 10,000,000 vs 1,000,000 events, type-grained (stream) (tracemalloc peak)"]["verdict"] == "missed"


def test_streaming_state_stays_flat_over_a_long_stream() -> None:
    """The streaming benchmark's state measure: the groups' snapshots, as Spark's operator
    keeps them, stop growing once the first windows close (q2 carries kernel states, q3
    holds its open windows' events)."""
    from cogra.bench.streaming import state_curve

    for name, kind in (("q2", "carried"), ("q3", "held")):
        curve = state_curve(name, 40_000, 2_000)
        assert curve.kind == kind and curve.groups > 1
        settled = curve.state_bytes[len(curve.state_bytes) // 4:]
        assert max(settled) < 1.5 * min(settled), (name, curve.state_bytes)


def test_the_streaming_section_is_embedded_in_benchmarks_md_once(tmp_path: Path) -> None:
    from cogra.bench import streaming

    (tmp_path / "benchmarks.md").write_text("# Benchmarks\n\ntext\n\n## Files\n\nraw\n")
    run = streaming.RateRun("q2", 500, 16, 10, 6781, 1.11, True, 1.75, 6.09, 7.0, 40, 500, 30, 4096,
                            0.75, 9041, True, state_written_per_batch=2048, rows_per_batch=512, batch_p50=0.9)
    curve = streaming.StateCurve("q2", "carried", 30, [1000, 2000, 3000], [5000, 6000, 6000])
    result = {"quick": True, "date": "2026-11-28", "trigger": "1 second", "delay_seconds": 30,
              "rates": [streaming.asdict(run)], "state": [streaming.asdict(curve)],
              "settings": streaming.QUICK}
    for _ in range(2):
        streaming.write_report(result, tmp_path)
    text = (tmp_path / "benchmarks.md").read_text()
    assert text.count(streaming.BEGIN) == 1 and text.index(streaming.END) < text.index("## Files")
    assert "| q2 | cogra | 500 | 6,781 | 1.11 | yes | 0.90 | 1.75 / 6.09 / 7.00 | yes | 40 | 2 kB / 4.0 B |" in text
    assert "| cogra | 0 | >= 500 | 0 |" in text  # highest sustained rate per plan and query
    assert (tmp_path / "benchmarks" / "streaming-state.png").exists()


def test_the_negation_section_is_embedded_in_benchmarks_md_once(tmp_path: Path) -> None:
    from cogra.bench import negation
    from cogra.bench.sections import markers

    (tmp_path / "benchmarks.md").write_text("# Benchmarks\n\ntext\n\n## Files\n\nraw\n")
    rows = [{"semantics": s, "negated": n, "events": e, "seconds": e * 1e-6 * (2 if n else 1)}
            for s, n in negation.CASES for e in (1_000, 2_000)]
    result = {"quick": True, "date": "2026-11-28", "cores": 2, "rows": rows}
    for _ in range(2):
        negation.write_report(result, tmp_path)
    text = (tmp_path / "benchmarks.md").read_text()
    begin, end = markers("negation")
    assert text.count(begin) == 1 and text.index(end) < text.index("## Files")
    assert "| skip-till-next-match | with NOT | 0.002 s (2000 ns/event) | 0.004 s (2000 ns/event) |" in text


def test_the_streaming_operators_section_puts_the_plans_side_by_side(tmp_path: Path) -> None:
    from cogra.bench import streaming_operators
    from cogra.bench.sections import markers

    (tmp_path / "benchmarks.md").write_text("# Benchmarks\n\ntext\n\n## Files\n\nraw\n")
    rows = [{"query": q, "plan": p, "rows_per_second": 1000 * (i + 1), "commit_ms": None if p == "source" else 7}
            for q in streaming_operators.QUERIES for i, p in enumerate(streaming_operators.PLANS)]
    result = {"quick": True, "date": "2026-11-29", "cores": 2, "rows": rows, "rows_per_file": 20_000}
    streaming_operators.write_report(result, tmp_path)
    text = (tmp_path / "benchmarks.md").read_text()
    assert text.count(markers("streaming-operators")[0]) == 1
    assert "| source | 1,000 rows/s | 1,000 rows/s | 1,000 rows/s |" in text
    assert "| cogra transformWithState | 5,000 rows/s, commit 7 ms | 5,000 rows/s, commit 7 ms | 5,000 rows/s, commit 7 ms |" in text


def test_the_absence_table_gives_each_edge_against_the_query_without_it(tmp_path: Path) -> None:
    from cogra.bench import negation

    (tmp_path / "benchmarks.md").write_text("# Benchmarks\n\ntext\n\n## Files\n\nraw\n")
    rows = [{"semantics": s, "negated": n, "events": 1_000, "seconds": 1e-3} for s, n in negation.CASES]
    absence = [{"semantics": s, "window": w, "edge": e, "events": 1_000,
                "seconds": {None: 1.0, "trailing": 1.5, "leading": 2.5}[e]}
               for s in negation.ABSENCE_SEMANTICS for w in negation.ABSENCE_WINDOWS for e in negation.EDGES]
    negation.write_report({"quick": True, "date": "2026-11-29", "cores": 2, "rows": rows, "absence": absence},
                          tmp_path)
    text = (tmp_path / "benchmarks.md").read_text()
    assert "| contiguous | sliding | trailing | 1.500 s | 1.50x | met |" in text
    assert "| contiguous | sliding | leading | 2.500 s | 2.50x | **not met** |" in text
    assert "| skip-till-any-match | one window | without | 1.000 s |  |  |" in text


def test_the_absence_queries_differ_only_by_the_negation() -> None:
    import cogra
    from cogra.bench import negation

    plain = negation.absence_query("contiguous", None, "sliding")
    trailing = negation.absence_query("contiguous", "trailing", "sliding")
    leading = negation.absence_query("contiguous", "leading", "sliding")
    assert "NOT" not in plain and "PATTERN SEQ(Stock A+, Stock B, NOT Stock N)" in trailing
    assert "PATTERN SEQ(NOT Stock N, Stock A+, Stock B)" in leading
    assert trailing.replace(", NOT Stock N", "").replace(" AND N.volume > 9500", "") == plain
    assert cogra.plan(trailing).bound.trailing.variable == "N"
    assert cogra.plan(leading).bound.leading.variable == "N"


def test_the_negation_queries_differ_only_by_the_negation() -> None:
    import cogra
    from cogra.bench import negation

    plain, negated = negation.query("skip-till-any-match", False), negation.query("skip-till-any-match", True)
    assert "NOT" not in plain and "PATTERN SEQ(Stock A+, NOT Stock N, Stock B)" in negated
    assert cogra.plan(negated).bound.negations[0].variable == "N"


def test_the_readme_performance_table_is_the_one_benchmarks_md_gives() -> None:
    """README's table is generated from docs/benchmarks.md (cogra.bench.readme): it may not
    drift from the report it ships with."""
    from cogra.bench import readme

    root = Path(__file__).resolve().parents[1]
    text = (root / "README.md").read_text()
    block = readme.block((root / "docs" / "benchmarks.md").read_text())
    assert block in text
    assert block.count("\n| ") >= 4  # the kernel row and three targets with goals


def test_the_readme_table_reads_the_report(tmp_path: Path) -> None:
    from cogra.bench import readme

    md = ("## Headline ratios\n\n| target | measured | goal | verdict | detail |\n|---|---|---|---|---|\n"
          "| sliding (SLIDE 1 second) vs tumbling, 1 | 2.00x the tumbling latency | <= 3x | met | |\n"
          "| sliding vs tumbling in one process, 1 | 2.50x the tumbling latency | <= 3x | met | |\n"
          "| peak memory 10 vs 1 events, type-grained (tracemalloc peak) | 9.99x | (informational) | | |\n\n"
          "### Kernel-only throughput\n\n| executor | COUNT(*) | SUM | MIN/MAX | AVG | all five |\n"
          "|---|---|---|---|---|---|\n| a | 200 | 1 | 1 | 1 | 80 |\n| b | 250 | 1 | 1 | 1 | 90 |\n")
    assert readme.rows(md) == [
        ("compiled kernel, one window of 2M events, `A+`, COUNT(*) / all five aggregates",
         "200-250 / 80-90 M events/s", ">= 30 M/s"),
        ("sliding windows (`SLIDE 1 second`) vs tumbling, 100k-1M events", "2.00-2.50x", "<= 3x"),
    ]
    readme_path = tmp_path / "README.md"
    readme_path.write_text(f"intro\n{readme.BEGIN}\nold\n{readme.END}\nrest\n")
    (tmp_path / "benchmarks.md").write_text(md)
    assert readme.update(readme_path, tmp_path / "benchmarks.md")
    assert "| 2.00-2.50x | ≤ 3x |" in readme_path.read_text() and "old" not in readme_path.read_text()


def test_the_whole_call_section_states_its_target_and_feeds_the_readme(tmp_path: Path) -> None:
    """The whole-call section's verdict is read off its largest size, and the README row
    spans the semantics there (the smaller size is not the target's)."""
    from cogra.bench import readme, sections, whole_call

    def result(next_call_s: float) -> dict:
        rows = [{"semantics": s, "events": n, "call_s": call, "kernel_s": kernel}
                for s, n, call, kernel in [("skip-till-any-match", 1_000_000, 0.010, 0.002),
                                           ("skip-till-any-match", 3_000_000, 0.030, 0.018),
                                           ("skip-till-next-match", 3_000_000, next_call_s, 0.015)]]
        return sections.new_result(False, rows=rows)

    (tmp_path / "benchmarks.md").write_text("# Benchmarks\n")
    whole_call.write_report(result(0.025), tmp_path)
    md = (tmp_path / "benchmarks.md").read_text()
    assert "skip-till-any-match 0.60, skip-till-next-match 0.60 (met)." in md
    assert readme.whole_call_span(md) == "0.60-0.60 of its events/s (100-120 M events/s)"
    whole_call.write_report(result(0.040), tmp_path)  # next at 0.375 of its kernel
    md = (tmp_path / "benchmarks.md").read_text()
    assert "skip-till-next-match 0.38 (not met)." in md
    assert readme.whole_call_span(md) == "0.38-0.60 of its events/s (75-100 M events/s)"
    assert readme.whole_call_span("# Benchmarks\n") is None


def test_the_first_run_section_judges_each_case_and_feeds_the_readme(tmp_path: Path) -> None:
    """Each case's verdict is its first call's rate against its steady state's; the README
    row spans the cases and counts those that meet the target; the Spark table judges the
    session's extra time and the first query against the second."""
    from cogra.bench import first_run, readme

    def case(label: str, first: float, steady: float) -> dict:
        return {"label": label, "events": 1_000_000, "import": 0.6, "data": 0.2, "warm_start": 1.1,
                "warm_start_ended_before": False, "first": first, "slowest_first": first * 1.5, "steady": steady,
                "ratio": steady / first, "cached_first": first / 2}

    result = {"quick": False, "date": "2026-11-29 00:00 UTC", "bundle": True, "cores": 2,
              "first_touch_ms_per_mb": 0.2, "process": [case("q1", 0.2, 0.1), case("any, COUNT, string", 0.5, 0.05)],
              "spark": {"events": 2_000_000, "repeat": 3, "plain_session": 7.0, "cogra_session": 7.4,
                        "first": 7.0, "second": 3.0, "spark_first": 2.4, "spark_second": 0.8,
                        "archive": False, "to_first_result": 15.0, "no_archive_session": 9.0,
                        "no_archive_first": 8.0, "no_archive_second": 3.2, "no_archive_to_first_result": 18.5},
              "executor": []}
    (tmp_path / "benchmarks.md").write_text("# Benchmarks\n")
    first_run.write_report(result, tmp_path)
    md = (tmp_path / "benchmarks.md").read_text()
    assert "| q1 | 1,000,000 | 0.60 | 0.20 | 1.10* | 0.200 | 0.300 | 0.100 | 0.50 | met | 0.100 |" in md
    assert "| any, COUNT, string | 1,000,000 | 0.60 | 0.20 | 1.10* | 0.500 | 0.750 | 0.050 | 0.10 | **not met** |" in md
    assert "| session (s) (**the driver did not map the class archive**) | 7.40 | 7.00 (plain) | +0.40 s | met |" in md
    assert "| session without the class archive (s) | 9.00 | 7.00 (plain) | +2.00 s | |" in md
    assert "| q1 without the class archive, first (s) | 8.00 | 3.20 (second) | 2.50x | |" in md
    assert "| start of the script to q1's first result (s) | 15.00 | 18.50 (without the archive) | -3.50 s | |" in md
    assert "| q1, first MATCH_TREND (s) | 7.00 | 3.00 (second) | 2.33x | **not met** |" in md
    assert "| Spark's own window query of q1's shape, first (s) | 2.40 | 0.80 (second) | 3.00x |" in md
    assert readme.first_run_span(md) == ("0.10-0.50 of its rate (first 0.20-0.50 s, steady 0.050-0.100 s; "
                                         "1 of 2 cases met)")
    assert readme.first_run_span("# Benchmarks\n") is None


def test_the_docs_name_result_files_by_repository_paths(tmp_path: Path) -> None:
    """No machine's absolute path reaches the docs: result files inside the repository by
    their relative path, outside it by their name in the run's results directory."""
    from cogra.bench.sections import raw_results, shown_command

    root, outside = tmp_path / "repo", tmp_path / "elsewhere"
    root.mkdir()
    assert (raw_results([("Raw results", root / "bench-results" / "20261129" / "first-run.json")], root)
            == "Raw results: `bench-results/20261129/first-run.json` (git-ignored).")
    assert (raw_results([("Raw results", outside / "results.csv"), ("machine description", outside / "machine.json")],
                        root)
            == "Raw results: `results.csv`, machine description: `machine.json`, in the run's results "
               "directory (outside the repository).")
    assert (shown_command(f"cogra bench --out {outside} --docs {root / 'docs'} --quick", root)
            == "cogra bench --out <results dir> --docs docs --quick")
    assert shown_command(f"cogra bench --report-only={outside}", root) == "cogra bench --report-only=<results dir>"


def test_an_embedded_section_keeps_its_links_resolving(tmp_path: Path) -> None:
    """A section's links are written for ``docs/benchmarks/<name>.md``; its copy in
    ``docs/benchmarks.md`` has them rewritten for ``docs/``."""
    from cogra.bench.sections import embed, markers

    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks.md").write_text("# Benchmarks\n\n## Files\n\nraw\n")
    section = ("![flink-cep-groups](flink-cep-groups.png) [semantics](../language.md#event-matching-semantics) "
               "[Flink](https://flink.apache.org/) [files](#files)\n")
    (tmp_path / "benchmarks" / "flink-cep.md").write_text(section)
    embed(tmp_path, "flink-cep")
    text = (tmp_path / "benchmarks.md").read_text()
    begin, end = markers("flink-cep")
    assert text[text.index(begin) + len(begin):text.index(end)].strip() == (
        "![flink-cep-groups](benchmarks/flink-cep-groups.png) [semantics](language.md#event-matching-semantics) "
        "[Flink](https://flink.apache.org/) [files](#files)")
    assert (tmp_path / "benchmarks" / "flink-cep.md").read_text() == section
