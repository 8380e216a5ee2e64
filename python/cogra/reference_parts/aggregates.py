"""Aggregates for the reference: per trend, literally from its events, then over trends.

The exact value domain of docs/ARCHITECTURE.md: counts are ints; SUM of integers an
int, of floats or decimals an exact ``Fraction`` (a non-finite float makes it a float
``inf``/``nan``: Python's Fraction + float arithmetic does exactly that); AVG is
``Fraction(sum of non-null values, number of non-null values)``; MIN/MAX the raw
extreme value, NaN above every other number (Spark); VAR_* an exact ``Fraction`` over
every value of every trend (:func:`spread`), STDDEV_* its square root as a double.  NULL
attribute values are skipped; ``COUNT(V)`` counts ``V`` events whether or not their
attributes are NULL.
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction
from typing import Any

from cogra.errors import DataError
from cogra.language.ast import AggFunc, Aggregate
from cogra.reference_parts.patterns import Trend

SPREADS = frozenset({AggFunc.VAR_POP, AggFunc.VAR_SAMP, AggFunc.STDDEV_POP, AggFunc.STDDEV_SAMP})


def exact_number(value: Any) -> Any:
    """A SUM/AVG operand in the exact domain: int, Fraction, or a non-finite float."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return Fraction(value) if math.isfinite(value) else value
    if isinstance(value, decimal.Decimal):
        return Fraction(value) if value.is_finite() else float(value)
    raise DataError(f"cannot sum {value!r}: not a number")


def spark_order(value: Any) -> tuple:
    """Sort key for MIN/MAX: NaN above every other number (Spark)."""
    if isinstance(value, float) and math.isnan(value):
        return (1, 0)
    return (0, value)



class Accumulator:
    """The aggregates of one (window, output group), combined over its trends."""

    def __init__(self, items: list[Aggregate | None]):
        self.items = items
        self.state: list[Any] = [self._empty(a) for a in items]

    @staticmethod
    def _empty(agg: Aggregate | None) -> Any:
        if agg is None:
            return None
        if agg.func is AggFunc.COUNT:
            return 0
        if agg.func is AggFunc.AVG:
            return (None, 0)
        if agg.func in SPREADS:
            return []
        return None

    def add_trend(self, trend: Trend) -> None:
        for i, agg in enumerate(self.items):
            if agg is not None:
                self.state[i] = self._combine(agg, self.state[i], per_trend(agg, trend))

    @staticmethod
    def _combine(agg: Aggregate, a: Any, b: Any) -> Any:
        if agg.func is AggFunc.COUNT:
            return a + b
        if agg.func is AggFunc.AVG:
            return (add(a[0], b[0]), a[1] + b[1])
        if agg.func is AggFunc.SUM:
            return add(a, b)
        if agg.func in SPREADS:
            a.extend(b)  # (the accumulator's own list: copying it per trend was quadratic)
            return a
        if a is None or b is None:
            return b if a is None else a
        pick = min if agg.func is AggFunc.MIN else max
        return pick(a, b, key=spark_order)

    def values(self, group_values: list[Any]) -> tuple[Any, ...]:
        out = []
        for agg, state, group_value in zip(self.items, self.state, group_values):
            if agg is None:
                out.append(group_value)
            elif agg.func is AggFunc.AVG:
                total, count = state
                if count == 0:
                    out.append(None)
                elif isinstance(total, float):
                    out.append(total / count)
                else:
                    out.append(Fraction(total, count))
            elif agg.func in SPREADS:
                out.append(spread(agg.func, state))
            else:
                out.append(state)
        return tuple(out)


def spread(func: AggFunc, values: list[Any]) -> Any:
    """VAR_*/STDDEV_* of every value of every trend, literally: the mean, then each
    value's squared distance from it (exact), averaged; a square root in 60 decimal
    digits, then rounded to a double.  NULL for no value (and one, for a sample); NaN
    where a value is inf or nan (Spark's ``x - mean`` is NaN then)."""
    n = len(values)
    sample = func in (AggFunc.VAR_SAMP, AggFunc.STDDEV_SAMP)
    if n == 0 or (sample and n == 1):
        return None
    if any(isinstance(x, float) for x in values):  # (exact_number leaves only the non-finite as floats)
        return math.nan
    mean = sum(values, Fraction(0)) / n
    var = sum(((x - mean) ** 2 for x in values), Fraction(0)) / (n - 1 if sample else n)
    if func in (AggFunc.VAR_POP, AggFunc.VAR_SAMP):
        return var
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        return float((decimal.Decimal(var.numerator) / decimal.Decimal(var.denominator)).sqrt())


def add(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return b if a is None else a
    return a + b


def per_trend(agg: Aggregate, trend: Trend) -> Any:
    """One aggregate over one trend (literally, from its events)."""
    if agg.variable is None:
        return 1  # COUNT(*)
    events = [e for e, v in trend if v == agg.variable]
    if agg.func is AggFunc.COUNT:
        return len(events)
    values = [e.values[agg.attribute] for e in events if e.values[agg.attribute] is not None]
    if agg.func in SPREADS:
        return [exact_number(x) for x in values]
    if agg.func in (AggFunc.SUM, AggFunc.AVG):
        total = None
        for x in values:
            total = add(total, exact_number(x))
        return total if agg.func is AggFunc.SUM else (total, len(values))
    if not values:
        return None
    pick = min if agg.func is AggFunc.MIN else max
    return pick(values, key=spark_order)

