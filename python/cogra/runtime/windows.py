"""Window assignment, aligned as Spark's ``window()``: ``[k*slide, k*slide + size)``.

Kept apart from the executors (window *configuration* versus window *logic*): the
engine asks which windows hold a sub-stream's events and slices the events per
window; every window is evaluated independently (docs/language.md, Windows).
All arithmetic is exact (``Fraction``), so a float time on a window boundary is
assigned exactly as the definition says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable

import pyarrow as pa

from cogra.language.ast import Window

MICROS = 1_000_000


@dataclass(frozen=True)
class WindowSpec:
    size: Fraction | None
    """Window length in time-column units (seconds, or µs for timestamps); None: one window."""
    step: Fraction | None

    @classmethod
    def of(cls, window: Window | None, time_type: pa.DataType) -> "WindowSpec":
        if window is None:
            return cls(None, None)
        unit = MICROS if pa.types.is_timestamp(time_type) else 1
        return cls(window.size * unit, window.step * unit)

    def windows_of(self, times: Iterable) -> list[tuple[Fraction, Fraction] | None]:
        """The windows (start, end) holding at least one of ``times``, in order."""
        if self.size is None:
            return [None] if any(True for _ in times) else []
        ks: set[int] = set()
        last = object()
        for t in times:
            if t == last:
                continue
            last = t
            ft = Fraction(t)
            ks.update(range(math.floor((ft - self.size) / self.step) + 1, math.floor(ft / self.step) + 1))
        return [(k * self.step, k * self.step + self.size) for k in sorted(ks)]


def is_integral(spec: WindowSpec, time_type: pa.DataType) -> bool:
    """Whether windows can be enumerated in int64 (integer or timestamp time, whole sizes)."""
    if spec.size is None:
        return True
    integer_time = pa.types.is_integer(time_type) or pa.types.is_timestamp(time_type)
    return integer_time and spec.size.denominator == 1 and spec.step.denominator == 1


def enumerate_windows(seg_ptr, times, active, spec: WindowSpec, ends=None):
    """All (segment, window) pairs holding an active event, with their event ranges.

    Returns int64 arrays ``seg, start, lo, hi``: window ``[start, start + size)`` of
    segment ``seg`` covers events ``lo .. hi-1``.  Without WITHIN: one window per
    segment with an active event (``start`` is 0 and unused).  ``ends``
    (:func:`~cogra.runtime.compiled.windows.enumeration.trend_ends`): under WITHIN, only the
    windows that may hold a finished trend.
    """
    import numpy as np

    seg_ptr = np.asarray(seg_ptr, dtype=np.int64)
    if spec.size is None:
        counts = np.add.reduceat(active.astype(np.int64), seg_ptr[:-1]) if len(seg_ptr) > 1 else np.zeros(0, np.int64)
        seg = np.flatnonzero((np.diff(seg_ptr) > 0) & (counts > 0) if len(seg_ptr) > 1 else np.zeros(0, bool))
        return seg.astype(np.int64), np.zeros(len(seg), np.int64), seg_ptr[seg], seg_ptr[seg + 1]
    return _enumerate_int_windows(seg_ptr, np.asarray(times, dtype=np.int64), active,
                                  int(spec.size), int(spec.step), ends)


def _enumerate_int_windows(seg_ptr, times, active, size, step, ends=None):
    from cogra.runtime.compiled.windows.enumeration import enumerate_int_windows

    return enumerate_int_windows(seg_ptr, times, active, size, step, ends)
