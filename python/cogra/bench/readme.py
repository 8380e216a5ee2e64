"""The README's performance table, generated from docs/benchmarks.md.

The README shows a few headline numbers; docs/benchmarks.md is where they are measured.
This module reads the measured report (its "Headline ratios" rows that have a goal, and
the kernel-only table) and writes the short table between markers in README.md, so the
two cannot disagree: ``cogra bench`` rewrites it whenever it regenerates the report, and
a test checks the README against the report it ships with.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

BEGIN, END = "<!-- performance: begin -->", "<!-- performance: end -->"

# Families of headline rows: (label in the README, test on the report's target cell).
FAMILIES = (
    ("mixed-grained executor vs a GRETA-style event graph (50k events, 50% selectivity)",
     lambda t: t.startswith("mixed-grained vs GRETA")),
    ("sliding windows (`SLIDE 1 second`) vs tumbling, 100k-1M events",
     lambda t: t.startswith("sliding")),
    ("peak memory from 1M to 10M events in one window, streamed (`evaluate_batches`)",
     lambda t: t.startswith("peak memory") and "(stream)" in t),
)


def _table(md: str, heading: str) -> list[list[str]]:
    """The cells of the first table after ``heading``."""
    at = md.find(heading)
    if at < 0:
        return []
    rows = []
    for line in md[at:].splitlines()[1:]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif rows:
            break
    return rows[1:]  # without the header


def _ratio(cell: str) -> float | None:
    m = re.match(r"([\d,.]+)x", cell)
    return float(m.group(1).replace(",", "")) if m else None


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}x"


def rows(md: str) -> list[tuple[str, str, str]]:
    """(what, measured, goal) for the README, from the text of docs/benchmarks.md."""
    out = []
    kernel = _table(md, "### Kernel-only throughput")
    if kernel:
        counts = [int(r[1]) for r in kernel if r[1].isdigit()]
        alls = [int(r[-1]) for r in kernel if r[-1].isdigit()]
        out.append(("compiled kernel, one window of 2M events, `A+`, COUNT(*) / all five aggregates",
                    f"{min(counts)}-{max(counts)} / {min(alls)}-{max(alls)} M events/s", ">= 30 M/s"))
    headline = _table(md, "## Headline ratios")
    for label, matches in FAMILIES:
        found = [r for r in headline if matches(r[0]) and r[3] in ("met", "missed")]
        ratios = [x for x in (_ratio(r[1]) for r in found) if x is not None]
        if ratios:
            verdicts = {r[3] for r in found}
            out.append((label, _span(ratios) + ("" if verdicts == {"met"} else " (missed)"), found[0][2]))
    whole = whole_call_span(md)
    if whole:
        out.append(("the whole `cogra.evaluate` call vs its kernel alone, one window of 3M events, each semantics",
                    whole, ">= 0.5"))
    first = first_run_span(md)
    if first:
        out.append(("a fresh process's first `cogra.evaluate` vs the same query's steady state (q1-q3 at 1M "
                     "events; `SEQ(A+, B)` at 3M per semantics, aggregates and type column)", first, ">= 0.5"))
    spark = spark_first_span(md)
    if spark:
        out.append(("a new Spark application (`local[2]`): `cogra.spark.session()` vs a plain session; its "
                    "first MATCH_TREND (q1, 2M Parquet rows) vs its second", spark, "≤ +1 s; ≤ 2x"))
    flink = flink_span(md)
    if flink:
        out.append(("cogra vs Flink CEP (report §9 queries, any and contiguous; at the largest size Flink "
                    "finished)", f"{flink} faster", "(report: cogra wins)"))
    return out


def whole_call_span(md: str) -> str | None:
    """The call's share of its kernel's throughput at the largest size of the whole-call
    section (written by :mod:`cogra.bench.whole_call`), with the call's events per second."""
    at = md.find("## The whole call against its kernel")
    if at < 0:
        return None
    found = []  # (events, call M/s, ratio)
    for line in md[at:].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[1].replace(",", "").isdigit():
            found.append((int(cells[1].replace(",", "")), float(cells[2].split()[0]), float(cells[4])))
        if line.startswith("<!-- whole-call: end"):
            break
    if not found:
        return None
    largest = max(events for events, _, _ in found)
    calls = [call for events, call, _ in found if events == largest]
    ratios = [ratio for events, _, ratio in found if events == largest]
    return (f"{min(ratios):.2f}-{max(ratios):.2f} of its events/s "
            f"({min(calls):.0f}-{max(calls):.0f} M events/s)")


def _first_run_rows(md: str) -> list[list[str]]:
    """The cells of every table row of the first-run section (written by
    :mod:`cogra.bench.first_run`); empty where the section is missing."""
    at = md.find("## First run: a fresh process")
    if at < 0:
        return []
    rows = []
    for line in md[at:].splitlines()[1:]:
        if line.startswith("## ") or line.startswith("<!-- first-run: end"):
            break
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def first_run_span(md: str) -> str | None:
    """The first call's share of the steady state's rate over the first-run section's
    cases, with the first calls' and the steady calls' times and how many cases meet the
    target."""
    found = [(float(c[5]), float(c[7]), float(c[8]), c[9] == "met")  # (first s, steady s, ratio, met)
             for c in _first_run_rows(md) if len(c) == 11 and c[1].replace(",", "").isdigit()]
    if not found:
        return None
    ratios = [r for _, _, r, _ in found]
    met = sum(1 for *_, m in found if m)
    return (f"{min(ratios):.2f}-{max(ratios):.2f} of its rate (first {min(f for f, *_ in found):.2f}-"
            f"{max(f for f, *_ in found):.2f} s, steady {min(s for _, s, *_ in found):.3f}-"
            f"{max(s for _, s, *_ in found):.3f} s; {met} of {len(found)} cases met)")


def spark_first_span(md: str) -> str | None:
    """The first-run section's new-application rows: the session's extra seconds and the
    first query's ratio to the second."""
    found = {c[0]: c for c in _first_run_rows(md)
             if len(c) == 5 and c[0] in ("session (s)", "q1, first MATCH_TREND (s)")}
    if len(found) < 2:
        return None
    session, first = found["session (s)"], found["q1, first MATCH_TREND (s)"]
    return (f"{session[3]} ({session[1]} s against {session[2].split()[0]} s); {first[3]} "
            f"({first[1]} s against {first[2].split()[0]} s)")


def flink_span(md: str) -> str | None:
    """cogra's speed-ups over Flink CEP in its section's headline table (written by
    :mod:`cogra.bench.flink_cep`), as one span."""
    at = md.find("## Flink CEP: a real peer")
    if at < 0:
        return None
    ratios = []
    for line in md[at:].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[4].endswith("x") and cells[4][:-1].replace(",", "").isdigit():
            ratios.append(float(cells[4][:-1].replace(",", "")))
        if line.startswith("Every point"):
            break
    if not ratios:
        return None
    lo, hi = min(ratios), max(ratios)
    return f"{lo:,.0f}x" if math.isclose(lo, hi) else f"{lo:,.0f}-{hi:,.0f}x"


def table(md: str) -> str:
    lines = ["| | measured | goal |", "|---|---|---|"]
    lines += [f"| {what} | {measured} | {goal.replace('>=', '≥').replace('<=', '≤')} |"
              for what, measured, goal in rows(md)]
    return "\n".join(lines)


def block(md: str) -> str:
    return f"{BEGIN}\n{table(md)}\n{END}"


def update(readme: Path, benchmarks_md: Path) -> bool:
    """Rewrite the README's table from ``benchmarks_md``; whether anything changed."""
    if not readme.exists() or not benchmarks_md.exists():
        return False
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        return False
    a, b = text.index(BEGIN), text.index(END) + len(END)
    new = text[:a] + block(benchmarks_md.read_text()) + text[b:]
    if new != text:
        readme.write_text(new)
    return new != text


__all__ = ["BEGIN", "END", "block", "flink_span", "rows", "table", "update", "whole_call_span"]
