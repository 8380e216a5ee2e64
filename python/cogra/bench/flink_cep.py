"""cogra against Flink CEP on the report's §9 queries (``cogra bench --experiments
flink-cep``, opt-in: it needs ``cogra[bench-flink]`` and a JDK).

Each point is a run of :mod:`cogra.bench.runner` (a fresh process, the data generated
before the clock starts, the time and memory limits, DNF ending a series); the ``flink``
contender is :mod:`cogra.bench.flink`.  Only queries whose semantics Flink shares are
timed: skip-till-any-match (events per window, selectivity, groups) and contiguous.
For skip-till-next-match the section shows the two counts on one input instead: Flink's
closest pattern is not the report's semantics.

Writes ``results.csv`` and ``flink-cep.json`` to the results directory, and the section
``docs/benchmarks/flink-cep.md`` (embedded in benchmarks.md) with one plot per series.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from cogra.bench import experiments as ex
from cogra.bench.experiments import Run
from cogra.bench.sections import generated_by, new_result, save, write_section

NEXT_DEMO = """RETURN COUNT(*)
PATTERN SEQ(Stock A+, Stock B)
SEMANTICS skip-till-next-match
WHERE [company]
GROUP-BY company"""
NEXT_DEMO_EVENTS = 100

SERIES = {
    # id: (title, dataset, query builder, x label, sizes full, sizes quick, data kwargs builder)
    "any-events": "skip-till-any-match, events per window (stock, q3 without its predicate)",
    "cont-events": "contiguous, events per window (physical activity, q1 without its window)",
    "selectivity": "skip-till-any-match, predicate selectivity (stock, 200 events)",
    "groups": "skip-till-any-match, trend groups (public transportation, 400 events)",
}


def runs(quick: bool) -> list[Run]:
    """cogra and Flink on the same points, easy to hard within each series."""
    out = []
    any_sizes = [20, 40, 60] if quick else [20, 40, 60, 80, 100, 200, 400, 1_000, 10_000, 100_000]
    cont_sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000, 1_000_000]
    for c in ("cogra", "flink"):
        out += [Run("any-events", c, c, n, "stock", n, ex.Q_ANY, meta={"semantics": "any"}) for n in any_sizes]
        out += [Run("cont-events", c, c, n, "activity", n, ex.Q_CONT, meta={"semantics": "contiguous"})
                for n in cont_sizes]
        for s in ([0.1, 0.9] if quick else [0.1, 0.3, 0.5, 0.7, 0.9]):
            offset, actual = ex.volume_offset(s)
            out.append(Run("selectivity", c, c, s, "stock", 200, ex.Q_SELECTIVITY.format(offset=offset),
                           meta={"semantics": "any", "selectivity": round(actual, 4)}))
        out += [Run("groups", c, c, g, "transport", 400, ex.Q_GROUPS, data_kwargs={"n_passengers": g},
                    meta={"semantics": "any", "groups": g})
                for g in ([30, 10] if quick else [30, 25, 20, 15, 10, 5])]
    return out


def next_demo() -> dict:
    """Trends of ``SEQ(A+, B)`` under skip-till-next-match on the same events: cogra (and
    the reference) against Flink's ``oneOrMore()`` / ``followedBy``."""
    import cogra
    from cogra import datasets
    from cogra.bench.flink import FlinkCep
    from cogra.reference import evaluate_reference

    table = datasets.by_name("stock", NEXT_DEMO_EVENTS, seed=0)

    def total(result: Any) -> int:
        return int(sum(v for v in result.column("COUNT(*)").to_pylist() if v is not None))

    with FlinkCep() as flink:
        flink_count = total(flink.evaluate(NEXT_DEMO, table, allow_next=True))
        empty = []
        for _ in range(3):  # a job of one event: what every Flink call costs at least
            began = time.perf_counter()
            flink.evaluate(ex.Q_ANY, table.slice(0, 1))
            empty.append(time.perf_counter() - began)
    return {"events": NEXT_DEMO_EVENTS, "cogra": total(cogra.evaluate(NEXT_DEMO, table)),
            "reference": total(evaluate_reference(NEXT_DEMO, table)), "flink": flink_count,
            "empty_job_s": min(empty)}


def run(quick: bool, out_dir: Path, docs_dir: Path | None, log: Any = None) -> dict:
    from cogra.bench import runner
    from cogra.bench.flink import FlinkUnavailable, flink_lib

    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    try:
        flink_lib()
    except FlinkUnavailable as err:
        raise SystemExit(f"cogra bench flink-cep: {err}") from err
    out_dir.mkdir(parents=True, exist_ok=True)
    limits = runner.Limits(time_limit=10.0 if quick else 120.0, memory_limit=_memory_limit(),
                           setup_limit=120.0 if quick else 600.0, repeat=1, tracemalloc=False,
                           warmup="prefix", max_trends=runner.TWO_STEP_MAX_TRENDS)
    began = time.perf_counter()
    rows = runner.run_all(runs(quick), limits, out_dir / "results.csv")
    demo = next_demo()
    log(f"cogra bench flink-cep: next semantics on {demo['events']} events: cogra {demo['cogra']} trends "
        f"(reference {demo['reference']}), Flink {demo['flink']} matches")
    result = new_result(quick, time_limit=limits.time_limit, duration_s=round(time.perf_counter() - began, 1),
                        rows=[_keep(r) for r in rows], next=demo)
    return save("flink-cep", result, out_dir, docs_dir, write_report)


def _memory_limit() -> int:
    from cogra.bench import default_memory_limit

    return default_memory_limit()


def _keep(row: dict) -> dict:
    keys = ("experiment", "series", "x", "n_events", "status", "message", "latency_s", "result_digest",
            "engine_stats")
    return {k: row.get(k) for k in keys}


def _num(x: Any) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _stat(row: dict, key: str) -> float | None:
    stats = dict(kv.split("=", 1) for kv in (row.get("engine_stats") or "").split() if "=" in kv)
    return _num(stats.get(key))


def headlines(result: dict) -> list[dict]:
    """Per series: cogra's speed-up at the largest x both finished, and where Flink stopped."""
    out = []
    for exp_id, title in SERIES.items():
        rows = [r for r in result["rows"] if r["experiment"] == exp_id]
        cogra = {str(r["x"]): r for r in rows if r["series"] == "cogra" and r["status"] == "ok"}
        flink = {str(r["x"]): r for r in rows if r["series"] == "flink" and r["status"] == "ok"}
        common = [x for x in flink if x in cogra]
        if not common:
            continue
        x = max(common, key=lambda v: float(v))
        ratio = float(flink[x]["latency_s"]) / float(cogra[x]["latency_s"])
        stopped = [r for r in rows if r["series"] == "flink" and r["status"] not in ("ok", "n/a")]
        agree = (cogra[x].get("result_digest") or "") == (flink[x].get("result_digest") or "")
        empty = (result.get("next") or {}).get("empty_job_s")
        net = float(flink[x]["latency_s"]) - empty if empty is not None else None
        out.append({"series": exp_id, "title": title, "x": x, "ratio": ratio,
                    "net_ratio": net / float(cogra[x]["latency_s"]) if net and net > 0 else None,
                    "cogra_s": float(cogra[x]["latency_s"]), "flink_s": float(flink[x]["latency_s"]),
                    "stopped": f"{stopped[0]['status']} from x={stopped[0]['x']}" if stopped else "",
                    "agree": agree})
    return out


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def _fmt_x(x: str) -> str:
    v = float(x)
    return f"{int(v):,}" if v.is_integer() else f"{v:g}"


def write_report(result: dict, docs_dir: Path) -> Path:
    """``docs_dir/benchmarks/flink-cep.md`` and its plots, embedded in benchmarks.md."""
    plots = _plots(result, docs_dir / "benchmarks")
    lines: list[str] = []
    add = lines.append
    add("## Flink CEP: a real peer")
    add("")
    add(generated_by("flink-cep", result) + f", time limit {result['time_limit']:g} s per call; see "
        "`python/cogra/bench/flink_cep.py` and "
        "`python/cogra/bench/flink.py`. Flink 2 from `apache-flink-libraries`, a local mini-cluster at "
        "parallelism 1, `AfterMatchSkipStrategy.noSkip()`, every match built by Flink's NFA and then "
        "aggregated (the two-step way); skip-till-any-match as `oneOrMore().allowCombinations()` / "
        "`followedByAny`, contiguous as `oneOrMore().consecutive()` / `next`, keyed by the `[attr]` "
        "keys. Flink's latency is the whole call from Python (events written to a file, one job); "
        "the JVM starts once per run, before the clock (its start is in the table). cogra is "
        "`cogra.evaluate`.")
    add("")
    heads = headlines(result)
    if heads:
        empty = (result.get("next") or {}).get("empty_job_s")
        add("| series | at | cogra | Flink | cogra faster | without Flink's fixed job cost | Flink stopped | results agree |")
        add("|---|---|---|---|---|---|---|---|")
        for h in heads:
            net = f"{h['net_ratio']:,.0f}x" if h.get("net_ratio") else "-"
            add(f"| {h['title']} | x={_fmt_x(h['x'])} | {_fmt_s(h['cogra_s'])} | {_fmt_s(h['flink_s'])} | "
                f"{h['ratio']:,.0f}x | {net} | {h['stopped'] or '-'} | {'yes' if h['agree'] else 'no: see below'} |")
        add("")
        if empty is not None:
            add(f"A Flink job over one event takes {_fmt_s(empty)} here (the mini-cluster's job "
                "submission, scheduling and teardown): the column before last subtracts it from Flink's "
                "latency, as a long-running Flink cluster would pay less of it per query. The results agree "
                "where each series' result digest (the `COUNT(*)` total, else the first aggregate's) is equal.")
            add("")
    demo = result.get("next")
    if demo:
        add(f"**Skip-till-next-match is not timed**: Flink has no such semantics. Its closest pattern, "
            f"`oneOrMore()` with `followedBy`, also matches after a skipped event that could have extended "
            f"the trend, which [skip-till-next-match](../language.md#event-matching-semantics) forbids "
            f"(on `a1 a2 b3`, `SEQ(A+, B)` has the trends "
            f"`a1 a2 b3` and `a2 b3`; Flink adds `a1 b3`). On the first {demo['events']} stock events, "
            f"`SEQ(Stock A+, Stock B)` per company: cogra {demo['cogra']:,} trends (the two-step reference "
            f"{demo['reference']:,}), Flink {demo['flink']:,} matches.")
        add("")
    add("Every point (latency of the call; the result digest: `COUNT(*)`'s total, else the first aggregate's):")
    add("")
    add("| series | x | cogra | Flink | Flink's JVM start | Flink's job in the JVM | digest cogra / Flink |")
    add("|---|---|---|---|---|---|---|")
    for exp_id, title in SERIES.items():
        xs = sorted({str(r["x"]) for r in result["rows"] if r["experiment"] == exp_id}, key=float)
        for x in xs:
            pair = {r["series"]: r for r in result["rows"] if r["experiment"] == exp_id and str(r["x"]) == x}
            c, f = pair.get("cogra"), pair.get("flink")

            def cell(r: dict | None) -> str:
                if r is None:
                    return "-"
                return _fmt_s(_num(r["latency_s"])) if r["status"] == "ok" else r["status"]

            counts = " / ".join((r.get("result_digest") or "-") if r and r["status"] == "ok"
                                else "-" for r in (c, f))
            add(f"| {exp_id} | {_fmt_x(x)} | {cell(c)} | {cell(f)} | {_fmt_s(_stat(f, 'jvm_start_s')) if f else '-'} | "
                f"{_fmt_s(_stat(f, 'job_s')) if f and f['status'] == 'ok' else '-'} | {counts} |")
    add("")
    for p in plots:
        add(f"![{p.stem}]({p.name})")  # beside this file; benchmarks.md's copy: sections.embed
    return write_section(docs_dir, "flink-cep", lines)


def _plots(result: dict, plots_dir: Path) -> list[Path]:
    """Latency per x, cogra and Flink, one plot per series (log scales where x spans decades)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    plots_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for exp_id, title in SERIES.items():
        rows = [r for r in result["rows"] if r["experiment"] == exp_id]
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for series, style in (("cogra", "o-"), ("flink", "s--")):
            pts = sorted((float(r["x"]), float(r["latency_s"])) for r in rows
                         if r["series"] == series and r["status"] == "ok")
            if pts:
                ax.plot(*zip(*pts), style, label="cogra" if series == "cogra" else "Flink CEP")
            dnf = [float(r["x"]) for r in rows if r["series"] == series and r["status"] in ("DNF", "OOM")]
            if dnf:
                ax.axvline(min(dnf), color="gray", linestyle=":", linewidth=1)
                ax.annotate(f"{'Flink' if series == 'flink' else 'cogra'} DNF", (min(dnf), 0.98),
                            xycoords=("data", "axes fraction"), fontsize=8, ha="left", va="top")
        xs = [float(r["x"]) for r in rows]
        if max(xs) / max(min(xs), 1e-9) >= 100:
            ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel({"any-events": "events per window", "cont-events": "events per window",
                       "selectivity": "predicate selectivity", "groups": "trend groups"}[exp_id])
        ax.set_ylabel("latency (s)")
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        path = plots_dir / f"flink-cep-{exp_id}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out.append(path)
    return out


__all__ = ["NEXT_DEMO", "SERIES", "headlines", "next_demo", "run", "runs", "write_report"]
