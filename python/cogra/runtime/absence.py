"""Absence at the edge of a pattern (docs/language.md): per window, where it cuts.

``SEQ(NOT M, P, NOT N)`` counts a trend of ``P`` in a window only if no event that could
play ``M`` lies in the window (and partition) strictly before the trend's first event,
and none that could play ``N`` strictly after its last.  Both are facts of the window,
not of the trend's inner steps, so each becomes one time per window:

* *start until*: the window's first leading blocker.  A trend may start only at an
  event at or before it (one at the same time does not block);
* *finish from*: the window's last trailing blocker.  A trend counts only if it ends at
  or after it.

Every executor then runs the window as without the negation, with the start states
silenced after the first cut and the finished trends counted from the second on; which
trends ``P`` has, and which events extend them, do not change.  Blockers are the
partition's (plain keys), whatever the variable keys, as for the negations between two
parts of a SEQ.  Why not derive per-row blocker counts as those do: a blocker of an edge
negation need not lie between two trend events, only in the same window, and windows
overlap; one time per window is what every executor can compare batch by batch.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import numpy as np

from cogra.runtime.compiled.windows.blockers import blockers_in_windows

@dataclass(frozen=True)
class Cut:
    """One window's cut-offs as exact times (None: no blocker of that side in it)."""

    start_until: Any = None
    finish_from: Any = None

    def starts(self, time: Any) -> bool:
        """Whether trends may start at an event at ``time``."""
        return self.start_until is None or time <= self.start_until

    def finishes(self, time: Any) -> bool:
        """Whether trends ending at an event at ``time`` count."""
        return self.finish_from is None or time >= self.finish_from


NO_CUT = Cut()


@dataclass(frozen=True)
class Cutoffs:
    """Per window of an engine's windows, the table row of its first
    leading and of its last trailing blocker (-1: none), or None for a side the query
    does not have."""

    lead_rows: np.ndarray | None
    trail_rows: np.ndarray | None

    def kernel_arrays(self, time_np: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(start_until, finish_from)`` in the kernels' times (``time_np``'s type), as
        :func:`cogra.runtime.compiled.aggregators.coarse_grained.run_windows` takes them:
        a window without a blocker gets the type's largest (smallest) value; an empty
        array for a side the query does not have."""
        out = []
        for rows, extreme in ((self.lead_rows, "max"), (self.trail_rows, "min")):
            if rows is None:
                out.append(time_np[:0])
                continue
            if time_np.dtype.kind == "f":
                fill = np.inf if extreme == "max" else -np.inf
            else:
                info = np.iinfo(time_np.dtype)
                fill = info.max if extreme == "max" else info.min
            values = np.full(len(rows), fill, dtype=time_np.dtype)
            has = rows >= 0
            values[has] = time_np[rows[has]]
            out.append(values)
        return out[0], out[1]

    def cut(self, w: int, times: list) -> Cut:
        """Window ``w``'s cut-offs as exact times (``times``: the engine's, per table row)."""
        lead = None if self.lead_rows is None or self.lead_rows[w] < 0 else times[int(self.lead_rows[w])]
        trail = None if self.trail_rows is None or self.trail_rows[w] < 0 else times[int(self.trail_rows[w])]
        return Cut(lead, trail)

    def take(self, keep: np.ndarray) -> "Cutoffs":
        """The cut-offs of the windows ``keep`` selects."""
        return Cutoffs(None if self.lead_rows is None else self.lead_rows[keep],
                       None if self.trail_rows is None else self.trail_rows[keep])


def cutoffs(engine: Any, subs: Any, wins: Any) -> Cutoffs | None:
    """The cut-offs of every window of ``wins`` (:class:`~cogra.runtime.engine.Windows` of the
    engine's :class:`~cogra.runtime.engine.SubStreams`); None without an edge negation.
    (Typed ``Any``: the engine imports this module.)"""
    b = engine.bound
    sides = [None if n is None else engine.blocker_masks[b.negations.index(n)] for n in (b.leading, b.trailing)]
    if sides[0] is None and sides[1] is None:
        return None
    part = engine.partition_of_rows()
    seg_rows = subs.rows[np.asarray(subs.seg_ptr[:-1], np.int64)] if len(subs.rows) else np.zeros(0, np.int64)
    window_part = part[seg_rows[np.asarray(wins.seg, np.int64)]] if len(wins.seg) else np.zeros(0, np.int64)
    found = []
    for side, first in zip(sides, (True, False)):
        if side is None:
            found.append(None)
            continue
        rows = np.flatnonzero(side).astype(np.int64)
        order = np.lexsort((rows, engine.time_np[rows], part[rows]))
        rows = rows[order]
        if wins.exact_bounds is not None:
            found.append(_exact(engine, rows, part, window_part, wins.exact_bounds, first))
            continue
        n_parts = int(part.max()) + 1 if len(part) else 1
        bounds = np.searchsorted(part[rows], np.arange(n_parts + 1))
        if wins.size is None:
            starts = np.zeros(len(wins.seg), np.int64)
            whole = True
        else:
            starts = np.asarray(wins.start, np.int64)
            whole = False
        out = np.full(len(wins.seg), -1, np.int64)
        blockers_in_windows(window_part, starts, int(wins.size or 0), whole, engine.time_np[rows], rows,
                             bounds, first, out)
        found.append(out)
    return Cutoffs(found[0], found[1])


def _exact(engine: Any, rows: np.ndarray, part: np.ndarray, window_part: np.ndarray, bounds: list,
           first: bool) -> np.ndarray:
    """:func:`blockers_in_windows` for fractional windows, in exact arithmetic."""
    times = engine.times
    by_part: dict[int, tuple[list, list]] = {}
    for r in rows.tolist():
        ts, rs = by_part.setdefault(int(part[r]), ([], []))
        ts.append(times[r])
        rs.append(r)
    out = np.full(len(bounds), -1, np.int64)
    for w, window in enumerate(bounds):
        ts, rs = by_part.get(int(window_part[w]), ([], []))
        a, z = (0, len(ts)) if window is None else (bisect.bisect_left(ts, window[0]), bisect.bisect_left(ts, window[1]))
        if a < z:
            out[w] = rs[a] if first else rs[z - 1]
    return out


__all__ = ["NO_CUT", "Cut", "Cutoffs", "cutoffs"]
