"""Negation's cost per event (``cogra bench --experiments negation``, opt-in).

``SEQ(A+, NOT N, B)`` against the same pattern without the negation, under
skip-till-any-match (type-grained without it, mixed with it: ``A`` is event-grained, its
guarded step an ordered index over blocker counts) and skip-till-next-match
(pattern-grained), one window holding every event, on the stock data.  The table gives the
time per event at each size: flat rows mean cost linear in the events per window.

Absence (docs/language.md, Absence at the edge of a pattern): ``SEQ(A+, B, NOT N)`` and
``SEQ(NOT N, A+, B)``
against ``SEQ(A+, B)``, under each semantics, over one window, tumbling and sliding
windows (target: at most 2x the query without the ``NOT``).

Each size runs in a fresh process (the data generated before the clock starts), warmed up
by one call at the smallest size; medians of three calls.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from cogra.bench.sections import generated_by, new_result, save, write_section

SIZES = {"full": [100_000, 300_000, 1_000_000, 3_000_000], "quick": [10_000, 30_000]}

QUERY = """RETURN company, COUNT(*), AVG(B.price)
PATTERN SEQ(Stock A+, {negation}Stock B)
SEMANTICS {semantics}
WHERE [company] AND A.volume > 5000 AND B.volume <= 5000{predicate}
GROUP-BY company"""
"""A's events carry volume above 5,000, B's at most; under NOT, a blocker is an event of
volume above 9,500 (~5% of events)."""

CASES = [(s, n) for s in ("skip-till-any-match", "skip-till-next-match") for n in (False, True)]

ABSENCE_QUERY = """RETURN company, COUNT(*), AVG(B.price)
PATTERN SEQ({leading}Stock A+, Stock B{trailing})
SEMANTICS {semantics}
WHERE [company] AND A.volume > 5000 AND B.volume <= 5000{predicate}
GROUP-BY company{window}"""
"""As :data:`QUERY`; the blockers of the absence, events of volume above 9,500."""

ABSENCE_SEMANTICS = ("skip-till-any-match", "skip-till-next-match", "contiguous")
ABSENCE_WINDOWS = {"one window": "", "tumbling": "\nWITHIN 10 minutes",
                   "sliding": "\nWITHIN 10 minutes SLIDE 1 minute"}
EDGES = (None, "trailing", "leading")
ABSENCE_SIZES = {"full": [300_000, 1_000_000], "quick": [10_000]}
ABSENCE_TARGET = 2.0
"""An absence costs at most twice the same query without it."""

_CHILD = """
import json, statistics, sys, time
import cogra
from cogra import datasets
query, n = sys.argv[1], int(sys.argv[2])
cogra.evaluate(query, datasets.stock(n_events=2_000, seed=1))
table = datasets.stock(n_events=n, seed=2)
times = []
for _ in range(3):
    began = time.perf_counter()
    cogra.evaluate(query, table, on_overflow="null")
    times.append(time.perf_counter() - began)
print(json.dumps({"seconds": statistics.median(times)}))
"""


def query(semantics: str, negated: bool) -> str:
    return QUERY.format(semantics=semantics, negation="NOT Stock N, " if negated else "",
                        predicate=" AND N.volume > 9500" if negated else "")


def absence_query(semantics: str, edge: str | None, window: str) -> str:
    """:data:`ABSENCE_QUERY` with the ``NOT`` at ``edge`` (None: without it)."""
    return ABSENCE_QUERY.format(
        semantics=semantics, window=ABSENCE_WINDOWS[window],
        leading="NOT Stock N, " if edge == "leading" else "",
        trailing=", NOT Stock N" if edge == "trailing" else "",
        predicate=" AND N.volume > 9500" if edge else "")


def measure(semantics: str, negated: bool, n: int, text: str | None = None) -> float:
    """Median seconds of three calls of the query (``text``, else :func:`query`) over ``n``
    stock events, in a fresh process."""
    out = subprocess.run([sys.executable, "-c", _CHILD, text or query(semantics, negated), str(n)],
                         capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


def run(quick: bool, out_dir: Path, docs_dir: Path | None, log: Any = None) -> dict:
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    sizes = SIZES["quick" if quick else "full"]
    rows = []
    for semantics, negated in CASES:
        for n in sizes:
            seconds = measure(semantics, negated, n)
            log(f"cogra bench negation: {semantics} {'NOT' if negated else '   '} {n:>9,} events {seconds:.3f} s")
            rows.append({"semantics": semantics, "negated": negated, "events": n, "seconds": seconds})
    absence = []
    for semantics in ABSENCE_SEMANTICS:
        for window in ABSENCE_WINDOWS:
            for edge in EDGES:
                for n in ABSENCE_SIZES["quick" if quick else "full"]:
                    seconds = measure(semantics, False, n, absence_query(semantics, edge, window))
                    log(f"cogra bench negation: absence {semantics} {window} {edge or 'without'} {n:>9,} events "
                        f"{seconds:.3f} s")
                    absence.append({"semantics": semantics, "window": window, "edge": edge, "events": n,
                                    "seconds": seconds})
    return save("negation", new_result(quick, rows=rows, absence=absence), out_dir, docs_dir, write_report)


def write_report(result: dict, docs_dir: Path) -> Path:
    """``docs_dir/benchmarks/negation.md``, embedded in benchmarks.md."""
    lines = ["## Negation: cost per event", ""]
    add = lines.append
    add(generated_by("negation", result) + "; see "
        "`python/cogra/bench/negation.py`. `SEQ(Stock A+, NOT Stock N, Stock B)` per company, one window "
        "holding every event, against the same query without `NOT`; a fresh process per point, medians "
        "of three calls. Nanoseconds per event: a flat row is cost linear in the events per window.")
    add("")
    sizes = sorted({r["events"] for r in result["rows"]})
    add("| semantics | query | " + " | ".join(f"{n:,} events" for n in sizes) + " |")
    add("|---|---|" + "---|" * len(sizes))
    for semantics, negated in CASES:
        cells = []
        for n in sizes:
            r = next(r for r in result["rows"] if r["semantics"] == semantics and r["negated"] == negated
                     and r["events"] == n)
            cells.append(f"{r['seconds']:.3f} s ({r['seconds'] / n * 1e9:.0f} ns/event)")
        add(f"| {semantics} | {'with NOT' if negated else 'without'} | " + " | ".join(cells) + " |")
    if result.get("absence"):
        _absence_table(result["absence"], add)
    return write_section(docs_dir, "negation", lines)


def _absence_table(rows: list[dict], add: Any) -> None:
    """Absence against the same query without its ``NOT``: seconds per size and the ratio
    at the largest, with the verdict on :data:`ABSENCE_TARGET`."""
    sizes = sorted({r["events"] for r in rows})
    add("")
    add("### Absence at the pattern's edge")
    add("")
    add("`SEQ(Stock A+, Stock B, NOT Stock N)` (trailing) and `SEQ(NOT Stock N, Stock A+, Stock B)` "
        "(leading) per company against `SEQ(Stock A+, Stock B)`; windows of 10 minutes, sliding by 1 "
        f"minute. Target: at most {ABSENCE_TARGET:g}x the query without `NOT`, at {sizes[-1]:,} events.")
    add("")
    add("| semantics | windows | query | " + " | ".join(f"{n:,} events" for n in sizes) + " | vs without | target |")
    add("|---|---|---|" + "---:|" * len(sizes) + "---:|---|")

    def seconds(semantics: str, window: str, edge: str | None, n: int) -> float:
        return next(r["seconds"] for r in rows if (r["semantics"], r["window"], r["edge"], r["events"])
                    == (semantics, window, edge, n))

    for semantics in dict.fromkeys(r["semantics"] for r in rows):
        for window in dict.fromkeys(r["window"] for r in rows):
            base = seconds(semantics, window, None, sizes[-1])
            for edge in EDGES:
                cells = [f"{seconds(semantics, window, edge, n):.3f} s" for n in sizes]
                if edge is None:
                    ratio, verdict = "", ""
                else:
                    r = seconds(semantics, window, edge, sizes[-1]) / base
                    ratio, verdict = f"{r:.2f}x", "met" if r <= ABSENCE_TARGET else "**not met**"
                add(f"| {semantics} | {window} | {edge or 'without'} | " + " | ".join(cells) + f" | {ratio} | {verdict} |")


__all__ = ["ABSENCE_QUERY", "CASES", "EDGES", "QUERY", "SIZES", "absence_query", "measure", "query", "run",
           "write_report"]
