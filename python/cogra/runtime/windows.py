"""Window assignment, aligned as Spark's ``window()``: ``[k*slide, k*slide + size)``.

Kept apart from the executors (window *configuration* versus window *logic*): the
engine asks which windows hold a sub-stream's events and slices the events per
window; every window is evaluated independently (SEMANTICS.md section 4).
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

    def bounds(self, window: tuple[Fraction, Fraction] | None) -> tuple | None:
        return window
