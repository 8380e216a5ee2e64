"""Negation's cost per event (``cogra bench --experiments negation``, opt-in).

``SEQ(A+, NOT N, B)`` against the same pattern without the negation, under
skip-till-any-match (type-grained without it, mixed with it: ``A`` is event-grained, its
guarded step an ordered index over blocker counts) and skip-till-next-match
(pattern-grained), one window holding every event, on the stock data.  The table gives the
time per event at each size: flat rows mean cost linear in the events per window.

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


def measure(semantics: str, negated: bool, n: int) -> float:
    out = subprocess.run([sys.executable, "-c", _CHILD, query(semantics, negated), str(n)],
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
    return save("negation", new_result(quick, rows=rows), out_dir, docs_dir, write_report)


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
    return write_section(docs_dir, "negation", lines)


__all__ = ["CASES", "QUERY", "SIZES", "measure", "query", "run", "write_report"]
