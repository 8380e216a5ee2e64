"""A key group's windows, evaluated a time slice at a time.

Each window is evaluated independently (docs/language.md, Windows), so the windows that end
by time ``t`` depend only on the events before ``t``.  A task's Python worker therefore
need not hold a key group whole -- a query without keys is one group, the whole partition
-- and evaluate it once it is complete: once enough rows of a group are held, the windows
complete by its last row's time are evaluated from the rows they need, and the rows no
later window needs are dropped.  Memory is then two windows' rows plus a slice, not the
group.

The price is the overlap: the rows of the last ``WITHIN - SLIDE`` seconds of a slice are
evaluated again with the next one, the windows cut by a slice's ends are computed and
dropped, and each slice is one more call of the engine.  In slices of 8k rows (q3's 20k-row
sectors), meant to let the engine work while the JVM sends the rest of a group, the
workers' CPU per query rose from 0.30 to 0.38-0.40 s and MATCH_TREND was no faster on one
core and slower on two; so slices are as large as the chunks (``udtf_routing.SLICE_ROWS``).

Integral windows only (integer or timestamp time, whole sizes): their starts are exact
int64 multiples of the slide, as the engine enumerates them.  A stream
(:mod:`cogra.runtime.online`) also takes times in double seconds, read as whole
microseconds (``micros_of_seconds``): floored, a double time compares with a window bound of
whole microseconds exactly as the double does (the product's rounding error is below half
the gap between a double and the next one, times 10^6).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cogra.runtime.evaluation import parse
from cogra.runtime.columns import micros
from cogra.runtime.windows import WindowSpec, is_integral

NULL_TIME = np.iinfo(np.int64).min
"""A NULL time (sorted first by Spark, skipped by the engine) as an int64 time."""


@dataclass(frozen=True)
class WindowSlices:
    """Windows ``[k * step, k * step + size)`` in the time column's int64 units (seconds,
    or µs for timestamps)."""

    time_column: str
    size: int
    step: int
    micros_of_seconds: bool = False
    """A time column of double seconds, read as µs (``size`` and ``step`` in µs too)."""

    @classmethod
    def of(cls, query: str, schema: pa.Schema, time_column: str, *,
           double_seconds: bool = False) -> "WindowSlices | None":
        """For a query whose windows are integral over ``schema``'s ``time_column``, else
        None; ``double_seconds``: also a double time column, read as µs, with windows of
        whole µs."""
        window = parse(query).window
        if window is None or time_column not in schema.names:
            return None
        time_type = schema.field(time_column).type
        spec = WindowSpec.of(window, time_type)
        if double_seconds and pa.types.is_floating(time_type) and spec.size is not None:
            size, step = spec.size * 1_000_000, spec.step * 1_000_000
            if size.denominator == 1 and step.denominator == 1:
                return cls(time_column, int(size), int(step), micros_of_seconds=True)
            return None
        if not is_integral(spec, time_type):
            return None
        return cls(time_column, int(spec.size), int(spec.step))

    def times(self, table: pa.Table) -> np.ndarray:
        """The time column as int64 (µs floored for timestamps and double seconds; NULL, and
        a double that is no finite time, as :data:`NULL_TIME`)."""
        col = table.column(self.time_column)
        if pa.types.is_floating(col.type):
            seconds = col.to_numpy(zero_copy_only=False).astype(np.float64)
            finite = np.isfinite(seconds) & (np.abs(seconds) < 9.2e12)  # µs within int64
            floored = np.floor(np.where(finite, seconds, 0.0) * 1e6).astype(np.int64)
            return np.where(finite, floored, NULL_TIME)
        if pa.types.is_timestamp(col.type):
            values = micros(pc.fill_null(col, pa.scalar(0, col.type)))  # as the engine reads them
        else:
            values = pc.fill_null(col.cast(pa.int64()), 0).to_numpy().astype(np.int64, copy=False)
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        return np.where(valid, values, NULL_TIME)

    def last_complete_start(self, last_time: int) -> int:
        """The latest window start whose window ends by ``last_time`` (every event it holds
        is before the row at ``last_time``, which is held)."""
        return (last_time - self.size) // self.step * self.step

    def starts(self, result: pa.Table) -> np.ndarray:
        """The ``window_start`` column of a result, in these slices' int64 units."""
        starts = result.column("window_start")
        if self.micros_of_seconds:
            return np.round(starts.to_numpy(zero_copy_only=False).astype(np.float64) * 1e6).astype(np.int64)
        return starts.cast(pa.int64()).to_numpy()

    def window_filter(self, result: pa.Table, first: int | None, last: int | None) -> pa.Table:
        """``result``'s rows whose window starts in ``[first, last]`` (None: unbounded)."""
        if first is None and last is None:
            return result
        starts = self.starts(result)
        keep = np.ones(len(starts), bool)
        if first is not None:
            keep &= starts >= first
        if last is not None:
            keep &= starts <= last
        return result if keep.all() else result.filter(pa.array(keep))


__all__ = ["NULL_TIME", "WindowSlices"]
