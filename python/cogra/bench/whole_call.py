"""The whole ``cogra.evaluate`` call against its kernel alone (``cogra bench --experiments
whole-call``, opt-in).

``SEQ(A+, B)`` with ``COUNT(*), AVG(A.price)`` over types A, B and X in uniform random
order, int64 times, one window, under each semantics (type-grained for any,
pattern-grained for next and contiguous): the call's events per second, warm, against the
compiled executor's own (:func:`cogra.bench.kernels.kernel_seconds`: after preparation,
sub-streams and windows), in a fresh process per point with the generated kernels
compiled before the clock.  The gap is what a call costs besides the kernel: reading the
Arrow columns, the play masks, the sub-streams, the windows and the result.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from cogra.bench.sections import generated_by, new_result, save, write_section

SIZES = {"full": [1_000_000, 3_000_000], "quick": [100_000, 300_000]}
SEMANTICS = ("skip-till-any-match", "skip-till-next-match", "contiguous")
QUERY = "RETURN COUNT(*), AVG(A.price) PATTERN SEQ(A+, B) SEMANTICS {semantics}"
TARGET = 0.5
"""The call's throughput over the kernel's, at the largest size."""

_CHILD = """
import json, sys, time
import numpy as np, pyarrow as pa
import cogra
from cogra.bench.kernels import kernel_seconds
from cogra.bench.runner import generated_kernels_always
query, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
table = pa.table({"type": np.array(["A", "B", "X"])[rng.integers(0, 3, n)],
                  "time": np.arange(n, dtype=np.int64), "price": np.round(rng.random(n) * 100, 2)})
with generated_kernels_always():
    # (a slice for the one-pass route's kernels, the whole table for those of the chunks
    # a table of millions of rows runs in: cogra.runtime.compiled.windows.chunked)
    cogra.evaluate(query, table.slice(0, 20_000), on_overflow="null")
    cogra.evaluate(query, table, on_overflow="null")
cogra.evaluate(query, table, on_overflow="null")
best = float("inf")
for _ in range(5):
    began = time.perf_counter()
    cogra.evaluate(query, table, on_overflow="null")
    best = min(best, time.perf_counter() - began)
print(json.dumps({"call_s": best, "kernel_s": kernel_seconds(query, table, 5)}))
"""


def measure(semantics: str, n: int) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, QUERY.format(semantics=semantics), str(n)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool, out_dir: Path, docs_dir: Path | None, log: Any = None) -> dict:
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    rows = []
    for semantics in SEMANTICS:
        for n in SIZES["quick" if quick else "full"]:
            m = measure(semantics, n)
            log(f"cogra bench whole-call: {semantics} {n:>9,} events: call {m['call_s'] * 1e3:.1f} ms, "
                f"kernel {m['kernel_s'] * 1e3:.1f} ms")
            rows.append({"semantics": semantics, "events": n, **m})
    return save("whole-call", new_result(quick, rows=rows), out_dir, docs_dir, write_report)


def write_report(result: dict, docs_dir: Path) -> Path:
    """``docs_dir/benchmarks/whole-call.md``, embedded in benchmarks.md."""
    lines = ["## The whole call against its kernel", ""]
    add = lines.append
    add(generated_by("whole-call", result) + "; see "
        "`python/cogra/bench/whole_call.py`. `" + QUERY.format(semantics="...") + "` over types A, B, X "
        "in uniform random order, int64 times, one window; best of five warm calls in a fresh process, "
        "against the compiled executor alone on the same sub-streams and windows. Million events per second:")
    add("")
    largest = max(r["events"] for r in result["rows"])
    ratios = {r["semantics"]: r["kernel_s"] / r["call_s"] for r in result["rows"] if r["events"] == largest}
    met = all(ratio >= TARGET for ratio in ratios.values())
    add(f"*target: the whole call at >= {TARGET:.0%} of the kernel's throughput under each semantics* -- "
        f"at {largest:,} events: " + ", ".join(f"{s} {ratio:.2f}" for s, ratio in ratios.items())
        + (" (met)." if met else " (not met)."))
    add("")
    add("| semantics | events | whole call | kernel alone | call / kernel |")
    add("|---|---|---|---|---|")
    for r in result["rows"]:
        call, kernel = r["events"] / r["call_s"] / 1e6, r["events"] / r["kernel_s"] / 1e6
        add(f"| {r['semantics']} | {r['events']:,} | {call:.1f} ({r['call_s'] * 1e3:.0f} ms) | "
            f"{kernel:.0f} ({r['kernel_s'] * 1e3:.1f} ms) | {call / kernel:.2f} |")
    return write_section(docs_dir, "whole-call", lines)


__all__ = ["QUERY", "SEMANTICS", "SIZES", "TARGET", "measure", "run", "write_report"]
