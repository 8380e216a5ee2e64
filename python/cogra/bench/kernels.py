"""Kernel-only throughput: the compiled executor call on one large window.

``cogra bench``'s ``kernel`` experiment times ``cogra.evaluate`` end to end (Arrow
preparation, sub-streams, output typing included).  This measures what the issue's
"kernel throughput" target is about: events per second through the compiled executor
itself, after preparation, one core, best of a few repeats::

    python -m cogra.bench.kernels [--events 2000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

import cogra
from cogra.runtime.engine import Engine
from cogra.runtime.compiled.kernel_driver import KernelDriver

AGGREGATES = {
    "COUNT(*)": "COUNT(*)",
    "SUM": "COUNT(*), SUM(A.volume)",
    "MIN/MAX": "COUNT(*), MIN(A.price), MAX(A.price)",
    "AVG": "COUNT(*), AVG(A.price)",
    "all five": "COUNT(*), SUM(A.volume), MIN(A.price), MAX(A.price), AVG(A.price)",
}
SEMANTICS = {"type-grained (any)": "any", "pattern-grained (next)": "next",
             "pattern-grained (contiguous)": "contiguous"}


def stream(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "time": np.arange(n, dtype=np.int64),
        "price": np.round(rng.random(n) * 100, 2),
        "volume": rng.integers(1, 100, n),
    })


def kernel_seconds(query: str, table: pa.Table, repeat: int) -> float:
    engine = Engine(cogra.plan(query, table.schema), table)
    subs = engine.substreams()
    wins = engine.window_ranges(subs)
    lo, hi = wins.lo, wins.hi
    driver = KernelDriver(engine)
    driver.run(subs, lo, hi)  # compile (or load from the cache) outside the clock
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        driver.run(subs, lo, hi)
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", help="also write the table to OUT/kernels.md (for cogra bench's report)")
    args = parser.parse_args(argv)
    table = stream(args.events)
    lines = [f"One window of {args.events:,} events, `PATTERN Stock A+`, one core, best of "
             f"{args.repeat} (million events/s):", "",
             "| executor | " + " | ".join(AGGREGATES) + " |", "|---|" + "---|" * len(AGGREGATES)]
    for label, semantics in SEMANTICS.items():
        cells = []
        for items in AGGREGATES.values():
            q = f"RETURN {items} PATTERN Stock A+ SEMANTICS {semantics}"
            cells.append(f"{args.events / kernel_seconds(q, table, args.repeat) / 1e6:.0f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        from pathlib import Path

        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "kernels.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
