"""Plots and ``docs/benchmarks.md`` from a results CSV (and the machine it ran on).

Plots follow the report's figures: one line per approach, log-scale axes (the x axis
too when it spans orders of magnitude), one PNG per experiment and metric.  A run that
exceeded the time or memory limit is drawn as a cross on the top edge of the plot,
as the report omits such runs.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import math
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Iterable

from cogra.bench import readme
from cogra.bench.experiments import EXPERIMENTS

METRICS = {
    # id: (CSV column, axis label, scale to display unit, file suffix)
    "latency": ("latency_s", "latency (ms)", 1e3),
    "throughput": ("throughput_eps", "throughput (events/s)", 1.0),
    "memory-rss": ("rss_peak_delta_bytes", "peak RSS delta (MB)", 1 / 2**20),
    "memory-tracemalloc": ("tracemalloc_peak_bytes", "tracemalloc peak (MB)", 1 / 2**20),
}

COLORS = {"cogra": "#1f77b4", "two-step": "#d62728", "greta": "#2ca02c", "a-seq": "#9467bd",
          "spark": "#ff7f0e", "cogra-py": "#17becf", "tumbling": "#1f77b4", "sliding": "#d62728"}
MARKERS = {"cogra": "o", "two-step": "s", "greta": "^", "a-seq": "D", "spark": "P"}


# ---------------------------------------------------------------------------
# Machine
# ---------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(module: str) -> str:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # noqa: BLE001
        return "not installed"


def _git(root: Path) -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return f"{head}{' (with uncommitted changes)' if dirty else ''}" if head else "unknown"
    except Exception:  # noqa: BLE001
        return "unknown"


def machine_description(root: Path | None = None) -> dict[str, Any]:
    import psutil

    import cogra
    from cogra.bench.experiments import cogra_python_available

    freq = None
    try:
        f = psutil.cpu_freq()
        freq = f.max or f.current if f else None
    except Exception:  # noqa: BLE001
        pass
    return {
        "cpu": _cpu_model(),
        "cpu_mhz": round(freq) if freq else None,
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "numba": _version("numba"),
        "pyarrow": _version("pyarrow"),
        "matplotlib": _version("matplotlib"),
        "pyspark": _version("pyspark"),
        "cogra": cogra.__version__,
        "cogra_commit": _git(root) if root else "unknown",
        "cogra_compiled_option": cogra_python_available(),
    }


# ---------------------------------------------------------------------------
# Reading results
# ---------------------------------------------------------------------------


def read_rows(csv_path: Path) -> list[dict]:
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in ("latency_s", "latency_min_s", "paired_latency_s", "throughput_eps", "setup_s", "wall_s"):
            r[k] = float(r[k]) if r.get(k) not in (None, "") else None
        for k in ("rss_peak_delta_bytes", "tracemalloc_peak_bytes", "n_events", "result_rows"):
            r[k] = int(float(r[k])) if r.get(k) not in (None, "") else None
        r["x"] = _number(r["x"])
    return rows


def _number(x: str) -> Any:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return x
    return int(f) if f.is_integer() else f


def _by(rows: Iterable[dict], *keys: str) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


# ---------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------


def plot_experiment(exp_id: str, rows: list[dict], out_dir: Path) -> list[tuple[str, Path]]:
    """One PNG per metric for which some run of the experiment has a value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    exp = EXPERIMENTS.get(exp_id)
    written = []
    series_order = list(dict.fromkeys(r["series"] for r in rows))
    shown = [s for s in series_order if any(r["series"] == s and r["status"] in ("ok", "DNF", "OOM")
                                            for r in rows)]
    for metric, (column, label, scale) in METRICS.items():
        values = [r[column] for r in rows if r["status"] == "ok" and r[column] is not None]
        if not any(v and v > 0 for v in values):
            continue
        fig, ax = plt.subplots(figsize=(5.2, 3.6), dpi=110)
        categorical = exp.categorical if exp else False
        xs_all = list(dict.fromkeys(r["x"] for r in rows))
        dnf_any = False
        for k, s in enumerate(shown):
            srows = [r for r in rows if r["series"] == s]
            base = s.replace(" (python)", "")  # a pure-Python variant shares its executor's colour
            bases = list(dict.fromkeys(x.replace(" (python)", "") for x in shown))
            color = COLORS.get(base, f"C{bases.index(base) % 10}")
            marker = MARKERS.get(s, "o")
            ok = [r for r in srows if r["status"] == "ok" and r[column] is not None and r[column] > 0]
            if categorical:
                width = 0.8 / max(1, len(shown))
                pos = [xs_all.index(r["x"]) + (k - (len(shown) - 1) / 2) * width for r in ok]
                ax.bar(pos, [r[column] * scale for r in ok], width=width, color=color, label=s,
                       hatch="//" if "python" in s else None, edgecolor="white")
                bad = [r for r in srows if r["status"] in ("DNF", "OOM")]
                for r in bad:
                    dnf_any = True
                    ax.plot(xs_all.index(r["x"]) + (k - (len(shown) - 1) / 2) * width, 0.97, "x",
                            color=color, transform=ax.get_xaxis_transform(), markersize=8, clip_on=False)
            else:
                ok.sort(key=lambda r: r["x"])
                ax.plot([r["x"] for r in ok], [r[column] * scale for r in ok], marker=marker,
                        color=color, label=s, markersize=5, linewidth=1.4)
                for r in srows:
                    if r["status"] in ("DNF", "OOM"):
                        dnf_any = True
                        ax.plot(r["x"], 0.97, "x", color=color, transform=ax.get_xaxis_transform(),
                                markersize=8, markeredgewidth=2, clip_on=False)
        ax.set_yscale("log")
        if categorical:
            ax.set_xticks(range(len(xs_all)))
            ax.set_xticklabels([str(x) for x in xs_all])
        elif exp and exp.x_log:
            ax.set_xscale("log")
        ax.set_xlabel(exp.x_label if exp else "x")
        ax.set_ylabel(label)
        ax.set_title(f"{exp.title if exp else exp_id}", fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        if dnf_any:
            handles.append(Line2D([], [], linestyle="", marker="x", color="black", markeredgewidth=2))
            labels.append("did not finish (limit)")
        if handles:
            ax.legend(handles, labels, fontsize=7, loc="best")
        fig.subplots_adjust(left=0.15, right=0.97, bottom=0.14, top=0.9)  # tight_layout is slow on log axes
        path = out_dir / f"{exp_id}-{metric}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append((metric, path))
    return written


# ---------------------------------------------------------------------------
# Headline ratios
# ---------------------------------------------------------------------------


def _ok(rows: list[dict], **match: Any) -> dict | None:
    for r in rows:
        if r["status"] == "ok" and all(r[k] == v for k, v in match.items()):
            return r
    return None


def _find(rows: list[dict], **match: Any) -> dict | None:
    for r in rows:
        if all(r[k] == v for k, v in match.items()):
            return r
    return None


def _fmt_ratio(x: float | None, bound: str = "") -> str:
    if x is None:
        return "n/a"
    return f"{bound}{x:,.2f}x" if x < 100 else f"{bound}{x:,.0f}x"


def headline(rows: list[dict], time_limit: float | None) -> list[dict]:
    """The targets' ratios: ``{"target", "measured", "goal", "verdict", "detail"}``."""
    out = []
    by_exp = _by(rows, "experiment")

    # Kernel throughput per executor.
    kernel = by_exp.get(("kernel",), [])
    for series in dict.fromkeys(r["series"] for r in kernel):
        srows = [r for r in kernel if r["series"] == series and r["status"] == "ok"]
        allrow = _ok(srows, x="all")
        if not srows:
            bad = _find(kernel, series=series)
            out.append({"target": f"end-to-end throughput (kernel experiment), {series}", "measured": bad["status"] if bad else "-",
                        "goal": "events/s (report: 39M/s in Java)", "verdict": "",
                        "detail": _first_line(bad["message"]) if bad else ""})
            continue
        per = ", ".join(f"{r['x']} {_si(r['throughput_eps'])}" for r in srows if r["x"] != "all")
        out.append({
            "target": f"end-to-end throughput (kernel experiment), {series}",
            "measured": f"{_si((allrow or srows[0])['throughput_eps'])} events/s"
                        + (" (all five aggregates)" if allrow else ""),
            "goal": "events/s (report: 39M/s in Java)", "verdict": "",
            "detail": f"{srows[0]['n_events']:,} events; {per}" if per else f"{srows[0]['n_events']:,} events",
        })

    # Mixed-grained vs GRETA.
    mg = by_exp.get(("mixed-vs-greta",), [])
    for n in sorted({r["x"] for r in mg}):
        c, g = _find(mg, series="cogra", x=n), _find(mg, series="greta", x=n)
        ratio, bound = _ratio(g, c, time_limit)
        out.append({"target": f"mixed-grained vs GRETA ({n:,} events, 50% selectivity)",
                    "measured": _speed(ratio, bound) if ratio is not None else _status_pair(c, g),
                    "goal": ">= 10x", "verdict": _verdict(ratio, bound, lambda v: v >= 10),
                    "detail": _lat_pair(("cogra", c), ("GRETA", g))})

    # Sliding vs tumbling.
    sl = by_exp.get(("sliding",), [])
    rates = dict.fromkeys(r["series"].partition(", ")[2] for r in sl)
    for rate in rates:
        suffix = f", {rate}" if rate else ""
        for n in sorted({r["x"] for r in sl}):
            t, s = _find(sl, series=f"tumbling{suffix}", x=n), _find(sl, series=f"sliding{suffix}", x=n)
            if t is None and s is None:
                continue
            ratio, bound = _ratio(s, t, time_limit)
            rows = f"; {s['result_rows']:,} vs {t['result_rows']:,} result rows" if s and t and s.get("result_rows") else ""
            out.append({"target": f"sliding (SLIDE 1 second) vs tumbling, {n:,} events{suffix}",
                        "measured": _fmt_ratio(ratio, bound) + " the tumbling latency" if ratio is not None else _status_pair(t, s),
                        "goal": "<= 3x", "verdict": _verdict(ratio, bound, lambda v: v <= 3, upper=True),
                        "detail": _lat_pair(("tumbling", t), ("sliding", s)) + rows})
            p = _find(sl, series=f"paired{suffix}", x=n)
            if p is not None:
                out.append(_paired_target(p, n, suffix))

    # Peak memory flatness.
    mem = by_exp.get(("memory",), [])
    for series in dict.fromkeys(r["series"] for r in mem):
        srows = sorted((r for r in mem if r["series"] == series), key=lambda r: r["x"])
        if len(srows) < 2:
            continue
        lo, hi = srows[0], srows[-1]
        for column, what in (("rss_peak_delta_bytes", "peak RSS delta"), ("tracemalloc_peak_bytes", "tracemalloc peak")):
            if lo["status"] == "ok" and hi["status"] == "ok" and lo[column] and hi[column]:
                ratio = hi[column] / lo[column]
                measured = f"{_fmt_ratio(ratio)} ({_mb(lo[column])} -> {_mb(hi[column])})"
            else:
                ratio = None
                measured = _status_pair(lo, hi)
            if series.endswith("(stream)"):  # the executors' own memory: the target
                goal, verdict, detail = "<= 1.10x", _verdict(ratio, "", lambda v: v <= 1.10, upper=True), ""
            else:  # the whole table is one call's input: its events and per-event arrays scale
                goal, verdict = "(informational)", ""
                detail = "the whole input table and its per-event arrays are in memory; see the (stream) rows"
            out.append({"target": f"peak memory {hi['x']:,} vs {lo['x']:,} events, {series} ({what})",
                        "measured": measured, "goal": goal, "verdict": verdict, "detail": detail})

    # Report-style speed-ups: cogra against each contender at the largest x both finished.
    for exp_id in ("any-events", "next-events", "cont-events", "selectivity", "groups"):
        erows = by_exp.get((exp_id,), [])
        cog = {r["x"]: r for r in erows if r["series"] == "cogra" and r["status"] == "ok"}
        for other in ("two-step", "greta", "a-seq", "flink"):
            orows = {r["x"]: r for r in erows if r["series"] == other and r["status"] == "ok"}
            common = [x for x in cog if x in orows]
            if not common:
                continue
            x = max(common)
            ratio = orows[x]["latency_s"] / cog[x]["latency_s"]
            more = [r for r in erows if r["series"] == other and r["status"] in ("DNF", "OOM")]
            out.append({"target": f"{exp_id}: cogra vs {other}",
                        "measured": f"{_fmt_ratio(ratio)} faster" if ratio >= 1 else f"{_fmt_ratio(1 / ratio)} slower",
                        "goal": "(report: cogra wins)", "verdict": "",
                        "detail": f"at x={x:,}" + (f"; {other} DNF from x={more[0]['x']:,}" if more else "")})
    return out


def _paired_target(p: dict, n: int, suffix: str) -> dict:
    """The sliding target measured in one process: the sliding query's median latency over
    the tumbling one's, evaluated in turn (see experiments._sliding)."""
    ok = p["status"] == "ok" and p.get("paired_latency_s")
    ratio = p["latency_s"] / p["paired_latency_s"] if ok else None
    return {"target": f"sliding vs tumbling in one process, {n:,} events{suffix}",
            "measured": _fmt_ratio(ratio) + " the tumbling latency" if ok else p["status"],
            "goal": "<= 3x", "verdict": _verdict(ratio, "", lambda v: v <= 3, upper=True),
            "detail": (f"tumbling {_seconds(p['paired_latency_s'])}; sliding {_seconds(p['latency_s'])}, "
                       "in turn" if ok else p.get("message", ""))}


def _ratio(slow: dict | None, fast: dict | None, time_limit: float | None) -> tuple[float | None, str]:
    """slow / fast latency; a lower bound when ``slow`` did not finish."""
    if not fast or fast["status"] != "ok" or not fast["latency_s"]:
        return None, ""
    if slow and slow["status"] == "ok":
        return slow["latency_s"] / fast["latency_s"], ""
    if slow and slow["status"] == "DNF" and time_limit:
        return time_limit / fast["latency_s"], "> "
    return None, ""


def _speed(ratio: float, bound: str) -> str:
    if bound or ratio >= 1:
        return _fmt_ratio(ratio, bound) + " faster"
    return _fmt_ratio(1 / ratio) + " slower"


def _verdict(ratio: float | None, bound: str, good, upper: bool = False) -> str:
    if ratio is None:
        return "-"
    if bound and upper:
        return "missed"
    return "met" if good(ratio) else "missed"


def _status_pair(a: dict | None, b: dict | None) -> str:
    return " / ".join((r["status"] if r else "-") for r in (a, b))


def _lat_pair(*pairs: tuple[str, dict | None]) -> str:
    parts = []
    for name, r in pairs:
        if r is None:
            continue
        parts.append(f"{name} {_seconds(r['latency_s'])}" if r["status"] == "ok" else f"{name} {r['status']}")
    return "; ".join(parts)


def _seconds(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def _mb(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**20:,.1f} MB"


def _si(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.0f}"


# ---------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------


def write_markdown(rows: list[dict], machine: dict, settings: dict, docs_dir: Path, plots_dir: Path,
                   results_dir: Path | None) -> Path:
    """Write ``docs_dir/benchmarks.md`` (plots already in ``plots_dir``)."""
    lines: list[str] = []
    add = lines.append
    add("# Benchmarks")
    add("")
    from cogra.bench.sections import shown_command

    add(f"Generated by `{shown_command(settings.get('command', 'cogra bench'))}` on {settings.get('date', '')} "
        f"({'**quick mode**: small sizes, short limits; run `cogra bench` for the full set' if settings.get('quick') else 'full run'}). "
        "Do not edit by hand: rerun the benchmark, or `cogra bench --report-only <results dir>`.")
    add("")
    add("The experiments reproduce §9 of the technical report (*Event Trend Aggregation Under Rich "
        "Event Matching Semantics*) with the contenders implemented in this project, plus the "
        "engine's performance targets. See `python/cogra/bench/experiments.py` for every query.")
    add("")
    add("## Machine")
    add("")
    add("| | |")
    add("|---|---|")
    cpu = machine.get("cpu", "?") + (f" ({machine['cpu_mhz']} MHz)" if machine.get("cpu_mhz") else "")
    add(f"| CPU | {cpu} |")
    add(f"| cores | {machine.get('logical_cores')} logical, {machine.get('physical_cores')} physical |")
    add(f"| RAM | {machine.get('ram_gib')} GiB |")
    add(f"| OS | {machine.get('os')} |")
    add(f"| Python | {machine.get('python')} |")
    add(f"| numpy / numba / pyarrow | {machine.get('numpy')} / {machine.get('numba')} / {machine.get('pyarrow')} |")
    add(f"| matplotlib / pyspark | {machine.get('matplotlib')} / {machine.get('pyspark')} |")
    if settings.get("load_average_before") is not None:
        add(f"| load average (1/5/15 min) | before {_loads(settings.get('load_average_before'))}, "
            f"after {_loads(settings.get('load_average_after'))} (other work on the machine adds noise) |")
    if settings.get("duration_s") is not None:
        add(f"| benchmark duration | {settings['duration_s']:.0f} s for the runs |")
    add(f"| cogra | {machine.get('cogra')} at {machine.get('cogra_commit')}"
        f"{'; `evaluate(compiled=...)` available' if machine.get('cogra_compiled_option') else ''} |")
    add("")
    add("## Method")
    add("")
    tl = settings.get("time_limit")
    ml = settings.get("memory_limit")
    add(f"* Every run is a fresh child process; the data set is generated there (fixed seed) before "
        f"the clock starts. Time limit {tl:g} s per evaluation, memory limit "
        f"{(ml or 0) / 2**30:.1f} GiB of RSS: a run that exceeds either is **DNF** (or **OOM**), as "
        "in the report, and the harder points of the same series are not run. "
        f"Repeats per run: {settings.get('repeat', 1)} (median reported)."
        if tl is not None else "* Every run is a fresh child process.")
    add("* **Latency**: wall time of the evaluation call (the whole window is evaluated at once, so "
        "this is also the report's result latency for the window). **Throughput**: events per window / "
        "latency. " + _warmup_note(settings.get("warmup", "prefix")) + " The fork server that starts "
        "each run has imported and exercised every contender once, so runs do not pay for imports. "
        "For cogra, the executor column says how many windows the compiled kernels evaluated (the "
        "others ran in Python).")
    add("* **Peak memory**, two measurements: the peak RSS during the call minus the RSS before it "
        "(kernel high-water mark reset via `/proc/self/clear_refs`), and the `tracemalloc` peak of a "
        "separate run of the call (Python objects and numpy arrays; Arrow buffers are not traced). "
        "Free heap is returned to the OS (`malloc_trim`) before each call, but an RSS delta still only "
        "counts memory the call had to take from the OS, so small peaks read as ~0.")
    add("* Contenders: `cogra` (`cogra.evaluate`, the executor the plan picks is in the tables), "
        "`two-step` (the SASE-style reference: construct every trend, then aggregate; its trend budget "
        f"is {settings.get('max_trends', 0):,} trends, beyond which it is DNF), `greta` (event-grained "
        "graph, `cogra.baselines.greta`), `a-seq` (flattened fixed-length sequences with prefix counters, "
        "`cogra.baselines.aseq`), and `flink`: Flink CEP, a real peer (`cogra.bench.flink`: "
        "`apache-flink-libraries`' jars, a harness compiled with the JDK; one JVM per run, whose start "
        "is in the engine-stats column apart from the job; each call a job in a local mini-cluster at "
        "parallelism 1, `noSkip()`, every match built and then aggregated; "
        "`oneOrMore().allowCombinations()`/`followedByAny` for skip-till-any-match, "
        "`oneOrMore().consecutive()`/`next` for contiguous; it has no skip-till-next-match: "
        "`followedBy` also matches after skipped events that could extend a trend, e.g. "
        "`SEQ(A+, B)` on `a1 a2 b3` gives 3 matches where "
        "[skip-till-next-match](language.md#event-matching-semantics) has 2). GRETA, A-Seq and "
        "Flink use float64; cogra and two-step are exact. A contender that does not support a query "
        "is **n/a** (report Table 10).")
    add("")
    add("## Headline ratios")
    add("")
    heads = headline(rows, tl)
    if heads:
        add("| target | measured | goal | verdict | detail |")
        add("|---|---|---|---|---|")
        for h in heads:
            add("| " + " | ".join(_md(str(h[k])) for k in ("target", "measured", "goal", "verdict", "detail")) + " |")
    else:
        add("(no target experiments in this run)")
    add("")
    kernels = results_dir / "kernels.md" if results_dir else None
    if kernels and kernels.exists():
        add("### Kernel-only throughput")
        add("")
        add("The `kernel` rows above time `cogra.evaluate` end to end (Arrow preparation, "
            "sub-streams, output typing). The compiled executor call alone, measured by "
            "`python -m cogra.bench.kernels --out <results dir>`:")
        add("")
        lines.extend(kernels.read_text().strip().splitlines())
        add("")
    issues = consistency(rows)
    if issues:
        add("### Result cross-check")
        add("")
        add("Finished contenders should agree on the total of `COUNT(*)` (within float64 rounding "
            "for GRETA and A-Seq). Disagreements:")
        add("")
        for text in issues:
            add(f"* {text}")
        add("")
    add("## Experiments")
    for exp_id, erows in _by(rows, "experiment").items():
        exp_id = exp_id[0]
        exp = EXPERIMENTS.get(exp_id)
        add("")
        add(f"### `{exp_id}`: {exp.title if exp else exp_id}")
        add("")
        if exp:
            add(f"*{exp.figure}.* {exp.description}")
            add("")
        queries = list(dict.fromkeys(r["query"] for r in erows))
        if len(queries) <= 2:
            for q in queries:
                add("```")
                add(q)
                add("```")
        else:
            add(f"({len(queries)} queries; see the `query` column of the CSV.)")
        add("")
        add(f"| {exp.x_label if exp else 'x'} | series | status | latency | throughput (ev/s) | "
            "peak RSS delta | tracemalloc peak | executor |")
        add("|---|---|---|---|---|---|---|---|")
        for r in erows:
            x = f"{r['x']:,}" if isinstance(r["x"], int) else str(r["x"])
            if r["selectivity"] not in ("", None) and exp_id in ("selectivity", "mixed-vs-greta"):
                x += f" (actual {float(r['selectivity']):.3f})"
            status = r["status"] if r["status"] == "ok" else f"**{r['status']}**"
            msg = (r.get("message") or "").splitlines()[0][:90] if r["status"] != "ok" else ""
            add(f"| {x} | {r['series']} | {status}{(': ' + _md(msg)) if msg else ''} | "
                f"{_seconds(r['latency_s']) if r['status'] == 'ok' else '-'} | "
                f"{_si(r['throughput_eps']) if r['status'] == 'ok' else '-'} | "
                f"{_mb(r['rss_peak_delta_bytes'])} | {_mb(r['tracemalloc_peak_bytes'])} | "
                f"{_executor(r)} |")
        add("")
        for metric in METRICS:
            path = plots_dir / f"{exp_id}-{metric}.png"
            if path.exists():
                rel = os.path.relpath(path, docs_dir)
                add(f"![{exp_id} {metric}]({rel})")
        add("")
    if results_dir is not None:
        add("## Files")
        add("")
        from cogra.bench.sections import raw_results

        add(raw_results([("Raw results", results_dir / "results.csv"),
                         ("machine description", results_dir / "machine.json")]))
        add("")
    path = docs_dir / "benchmarks.md"
    path.write_text("\n".join(lines))
    from cogra.bench.sections import embed_all

    embed_all(docs_dir)  # the sections measured by their own commands
    return path


def _warmup_note(mode: str) -> str:
    if mode == "full":
        return ("Every contender but two-step first evaluates the query once on the whole input "
                "(steady state: no JIT compilation in the measurement).")
    if mode == "none":
        return "No warm-up: first-call costs (JIT compilation) are included."
    return ("Contenders that may compile code (cogra, GRETA, A-Seq) first evaluate the query on the "
            "first 300 rows, so that numba compilation is not measured; Flink runs one job on the "
            "first 20 rows (class loading and the JVM's JIT).")


def _executor(r: dict) -> str:
    """The executor, and how many windows the compiled kernels evaluated (``fast 19/19``)."""
    text = r.get("executor") or ""
    stats = dict(kv.split("=", 1) for kv in (r.get("engine_stats") or "").split() if "=" in kv)
    if "windows" in stats and "windows_fast" in stats:
        text += f" [compiled {stats['windows_fast']}/{stats['windows']} windows]"
    if stats.get("fast_unsupported"):
        text += " [python]"
    if "jvm_start_s" in stats:
        text += f" [JVM start {float(stats['jvm_start_s']):.2f} s apart" + (
            f"; job {float(stats['job_s']):.3g} s in the JVM]" if "job_s" in stats else "]")
    return _md(text)


def _first_line(text: str | None, width: int = 120) -> str:
    return (text or "").strip().splitlines()[0][:width] if (text or "").strip() else ""


def _loads(x: Any) -> str:
    return "-" if not x else " / ".join(f"{v:.2f}" for v in x)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def consistency(rows: list[dict]) -> list[str]:
    """Finished runs of one experiment point whose COUNT(*) totals disagree."""
    issues = []
    for (exp_id, x), group in _by(rows, "experiment", "x").items():
        if exp_id in ("kernel", "sliding", "memory"):
            continue
        totals = {}
        for r in group:
            d = r.get("result_digest") or ""
            if r["status"] != "ok" or not d.startswith("count="):
                continue
            if ";null=" in d:
                continue  # some counts overflowed int64: nothing to compare
            totals[r["series"]] = float(d.split(";")[0].split("=")[1])
        if len(totals) < 2:
            continue
        values = list(totals.values())
        ref = values[0]
        if any(not math.isclose(v, ref, rel_tol=1e-5) for v in values):
            issues.append(f"`{exp_id}` x={x}: " + ", ".join(f"{k} {v:.6g}" for k, v in totals.items()))
    return issues


# ---------------------------------------------------------------------------
# Everything
# ---------------------------------------------------------------------------


def generate(results_dir: Path, docs_dir: Path) -> tuple[Path, list[Path]]:
    """Plots into ``docs_dir/benchmarks/`` and ``docs_dir/benchmarks.md`` from a results dir."""
    rows = read_rows(results_dir / "results.csv")
    meta_path = results_dir / "machine.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    machine, settings = meta.get("machine", {}), meta.get("settings", {})
    plots_dir = docs_dir / "benchmarks"
    plots_dir.mkdir(parents=True, exist_ok=True)
    for exp_id in EXPERIMENTS:  # only the files this module writes
        for metric in METRICS:
            old = plots_dir / f"{exp_id}-{metric}.png"
            if old.exists():
                old.unlink()
    plots = []
    for (exp_id,), erows in _by(rows, "experiment").items():
        plots += [p for _, p in plot_experiment(exp_id, erows, plots_dir)]
    md = write_markdown(rows, machine, settings, docs_dir, plots_dir, results_dir)
    readme.update(docs_dir.parent / "README.md", md)  # the README's table follows the report
    return md, plots


def timestamp() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
