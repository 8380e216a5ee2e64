"""The spread aggregates' arithmetic: variance from exact sums, square roots rounded once.

``VAR_POP``, ``VAR_SAMP``, ``STDDEV_POP`` and ``STDDEV_SAMP`` (SEMANTICS.md §5) run over
the multiset SUM and AVG sum: each ``V`` event once per trend it is in, NULLs skipped.
Their state is three exact sums over it -- ``n`` values, their sum ``S1`` and the sum of
their squares ``S2`` -- which add when trends or windows combine, as SUM's does.  Then

    VAR_POP = (n * S2 - S1**2) / n**2,    VAR_SAMP = (n * S2 - S1**2) / (n * (n - 1))

exactly, in integers: however large the counts, the difference cancels nothing but
exact digits (the one-pass formula in doubles, or Welford's update, loses all of them
when the mean dwarfs the spread, and counts of trends pass 1e308).  Sums of floats
and decimals arrive scaled to integers (``x * k``, :mod:`cogra.runtime.aggregates`): the
squares' sum is then scaled by ``k**2``.  A standard deviation is the square root of
the exact variance rounded once to a double (:func:`sqrt_rounded`).
"""

from __future__ import annotations

import math
from fractions import Fraction

SAMPLE = frozenset({"VAR_SAMP", "STDDEV_SAMP"})
ROOTED = frozenset({"STDDEV_POP", "STDDEV_SAMP"})


def variance(n: int, s1: int, s2: int, scale: int, sample: bool) -> Fraction | None:
    """The exact variance of ``n`` values whose sum is ``s1 / scale`` and whose squares'
    sum is ``s2 / scale**2``; None where it is undefined (no value; one, for a sample)."""
    if n == 0 or (sample and n == 1):
        return None
    spread = n * s2 - s1 * s1
    if spread < 0:  # (impossible for exact sums: Cauchy-Schwarz; loud if it happens)
        raise ArithmeticError(f"negative spread {spread} from n={n}, sums {s1}, {s2}")
    return Fraction(spread, n * (n - 1 if sample else n) * scale * scale)


def sqrt_rounded(x: Fraction) -> float:
    """``sqrt(x)`` correctly rounded to a double, for an exact ``x >= 0``: the integer
    square root to 60+ bits, with a sticky bit where it is inexact, rounded once."""
    if x < 0:
        raise ValueError("square root of a negative number")
    p, q = x.numerator, x.denominator
    if p == 0:
        return 0.0
    e = max(0, 62 - (p.bit_length() - q.bit_length()) // 2)  # 2**e * sqrt(x) has 60+ bits
    scaled = (p << (2 * e)) // q
    m = math.isqrt(scaled)
    inexact = m * m * q != p << (2 * e)
    return float(Fraction(2 * m + (1 if inexact else 0), 1 << (e + 1)))


def finish(func: str, n: int, s1: int, s2: int, scale: int, non_finite: float) -> Fraction | float | None:
    """The exact value of spread aggregate ``func`` (its name) from its sums; NaN where a
    non-finite value (``non_finite``: their sum, 0.0 for none) is among them, as Spark's
    ``x - mean`` is then NaN."""
    sample = func in SAMPLE
    if n == 0 or (sample and n == 1):
        return None
    if non_finite:
        return math.nan
    var = variance(n, s1, s2, scale, sample)
    return sqrt_rounded(var) if func in ROOTED else var


__all__ = ["ROOTED", "SAMPLE", "finish", "sqrt_rounded", "variance"]
