"""Rows -> events for the reference: exact times, and grouping keys.

* A time is exact: an ``int``; ``Fraction(x)`` for a float (NaN and infinities are not
  times: ``None``, counted with the null times); ``Fraction`` of a decimal; integer
  microseconds since the epoch for a timestamp (any unit and zone; nanoseconds are
  floored to microseconds, Spark's precision) or a date (midnight UTC).
* Grouping keys compare values as Spark's GROUP BY does: NULL is a value, and every NaN
  equals every other NaN.
"""

from __future__ import annotations

import decimal
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cogra.errors import DataError

MICROS = 1_000_000


@dataclass(eq=False)  # identity equality and hash: an event is itself, not its values
class Event:
    row: int  # index of the input row
    time: Any  # exact: int or Fraction
    type: str
    values: dict[str, Any]

    def __repr__(self) -> str:
        return f"{self.type.lower()}{self.time}"


def exact_times(column: pa.ChunkedArray, name: str) -> tuple[list[Any], pa.DataType]:
    """Exact times (None for a null or non-finite time) and the time type for the output."""
    typ = column.type
    if pa.types.is_null(typ):  # (no time at all: no event; read as the engine reads it, int64)
        return [None] * len(column), pa.int64()
    if pa.types.is_integer(typ):
        return column.to_pylist(), typ
    if pa.types.is_floating(typ):
        times = [None if x is None or not math.isfinite(x) else Fraction(x) for x in column.to_pylist()]
        return times, typ
    if pa.types.is_decimal(typ):
        return [None if x is None else Fraction(x) for x in column.to_pylist()], typ
    if pa.types.is_timestamp(typ):
        per_unit = {"s": Fraction(MICROS), "ms": Fraction(1000), "us": Fraction(1), "ns": Fraction(1, 1000)}
        scale = per_unit[typ.unit]
        raw = pc.cast(column, pa.int64()).to_pylist()
        return [None if x is None else math.floor(x * scale) for x in raw], typ
    if pa.types.is_date(typ):
        days = pc.cast(pc.cast(column, pa.date32()), pa.int32()).to_pylist()
        return [None if d is None else d * 86400 * MICROS for d in days], pa.timestamp("us")
    raise DataError(f"time column {name!r} must be numeric, a timestamp or a date, not {typ}")


def time_scale(time_type: pa.DataType) -> Fraction:
    """Time units per second of the query's durations."""
    return Fraction(MICROS) if pa.types.is_timestamp(time_type) else Fraction(1)


class NaNKey:
    """Stands for every NaN in a grouping key (NaN equals NaN when grouping)."""

    def __repr__(self) -> str:
        return "NaN"


NAN = NaNKey()


def group_key(value: Any) -> Any:
    """The value as a grouping key: itself, except that every NaN is :data:`NAN`."""
    if isinstance(value, float) and math.isnan(value):
        return NAN
    if isinstance(value, decimal.Decimal) and value.is_nan():
        return NAN
    return value

