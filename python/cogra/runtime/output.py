"""Turn exact per-(window, group) results into a typed Arrow table.

Executors and the two-step reference both compute *exact* values (Python ints,
``Fraction`` for sums and averages of floating or decimal attributes, raw values for
MIN/MAX) and hand them here as :class:`ResultRow`.  This module alone decides the
output types (as Spark would: ``COUNT`` -> bigint, ``SUM`` of integers -> bigint,
``SUM`` of doubles -> double, ``SUM`` of decimal(p, s) -> decimal(min(38, p+10), s),
``AVG`` -> double, ``MIN``/``MAX`` -> the attribute's type) and what happens to a
value that does not fit: an :class:`AggregateOverflowError` when ``on_overflow`` is
``"error"`` (Spark's ANSI mode), NULL when it is ``"null"``.  Nothing is ever
silently wrapped or rounded into a wrong number.
"""

from __future__ import annotations

import decimal
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Sequence

import pyarrow as pa

from cogra.analysis.aggregates import spec as aggregate_spec
from cogra.errors import AggregateOverflowError, DataError, sql_value
from cogra.language.ast import Aggregate, AttrRef, Query, ReturnItem

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
ON_OVERFLOW = ("error", "null")


@dataclass(frozen=True)
class ResultRow:
    """One output row before typing.

    ``window`` is ``(start, end)`` in the engine's time domain (seconds as int or
    Fraction for numeric time columns; integer microseconds since the epoch for
    timestamp columns), or None when the query has no WITHIN.  ``values`` is aligned
    with ``query.returns``: grouping items hold the group's value, aggregates hold the
    exact aggregate (see module docstring).
    """

    window: tuple[Any, Any] | None
    values: tuple[Any, ...]
    group: tuple[Any, ...] = ()
    """The GROUP-BY values in GROUP-BY order (also those RETURN does not show): the sort key."""


def column_type(schema: pa.Schema, name: str) -> pa.DataType:
    idx = schema.get_field_index(name)
    if idx < 0:
        raise DataError(f"no column {name!r} in the input (columns: {', '.join(schema.names)})")
    return schema.field(idx).type


def result_type(item: ReturnItem, schema: pa.Schema) -> pa.DataType:
    """The Arrow type of one RETURN item's output column (an aggregate's: its entry's
    :attr:`~cogra.analysis.aggregates.AggregateSpec.result_type`)."""
    value = item.value
    if isinstance(value, AttrRef):
        return column_type(schema, value.name)
    assert isinstance(value, Aggregate)
    source = None if value.attribute is None else column_type(schema, value.attribute)
    entry = aggregate_spec(value.func)
    typ = entry.result_type(source)
    if typ is None:
        raise DataError(f"{value.func.value} needs {entry.needs}; {value.variable}.{value.attribute} is {source}")
    return typ


def _fits(value: Any, item: ReturnItem, typ: pa.DataType) -> Any:
    """Convert an exact value to the Python value Arrow stores, or raise OverflowError."""
    if value is None:
        return None
    if isinstance(value, Fraction) and value.denominator == 1 and pa.types.is_integer(typ):
        value = int(value)
    if pa.types.is_integer(typ) and isinstance(value, int) and not isinstance(value, bool):
        # The column's own range: MIN/MAX keep the input's type (uint64 holds 2**63 + 5).
        low, high = (0, 2**typ.bit_width - 1) if pa.types.is_unsigned_integer(typ) \
            else (-(2 ** (typ.bit_width - 1)), 2 ** (typ.bit_width - 1) - 1)
        if isinstance(item.value, Aggregate) and not low <= value <= high:
            raise OverflowError
        return value
    if pa.types.is_floating(typ) and isinstance(value, (Fraction, int)) and not isinstance(value, bool):
        out = float(value)  # correctly rounded; raises OverflowError past the double range
        if math.isinf(out):
            raise OverflowError
        return out
    if pa.types.is_decimal(typ) and isinstance(value, (Fraction, int, decimal.Decimal)):
        frac = Fraction(value)
        scaled = frac * (10**typ.scale)
        if scaled.denominator != 1:  # cannot happen for sums of decimals; be loud if it does
            raise OverflowError
        if abs(scaled.numerator) >= 10**typ.precision:
            raise OverflowError
        return decimal.Decimal(scaled.numerator).scaleb(-typ.scale)
    return value


def _window_bound(value: Any, time_type: pa.DataType) -> Any:
    if pa.types.is_timestamp(time_type):
        return int(value)  # microseconds; the array is typed below
    if isinstance(value, Fraction) and value.denominator == 1:
        return int(value.numerator)
    if isinstance(value, Fraction):
        return float(value)
    return value


def window_type(query: Query, time_type: pa.DataType) -> pa.DataType:
    """window_start/window_end type: the time column's timestamp type, else int64 or double."""
    if pa.types.is_timestamp(time_type):
        return pa.timestamp("us", tz=time_type.tz)
    assert query.window is not None
    integral = pa.types.is_integer(time_type) and all(
        d.denominator == 1 for d in (query.window.size, query.window.step)
    )
    return pa.int64() if integral else pa.float64()


def order(v: Any) -> tuple:
    """Sort key of one value: NULL first, NaN last (as Spark orders ascending)."""
    if v is None:
        return (0, 0)
    if isinstance(v, float) and v != v:
        return (2, 0)
    return (1, v)


def table_schema(query: Query, schema: pa.Schema, time_type: pa.DataType,
                 metadata: dict[str, str] | None = None) -> pa.Schema:
    """RETURN items in order, then window_start/window_end under WITHIN."""
    fields = [pa.field(item.name, result_type(item, schema)) for item in query.returns]
    if query.window is not None:
        wtype = window_type(query, time_type)
        fields += [pa.field("window_start", wtype), pa.field("window_end", wtype)]
    meta = {k.encode(): str(v).encode() for k, v in (metadata or {}).items()}
    return pa.schema(fields, metadata=meta or None)


def build_table(
    query: Query,
    schema: pa.Schema,
    rows: Sequence[ResultRow],
    *,
    time_type: pa.DataType,
    on_overflow: str = "error",
    metadata: dict[str, str] | None = None,
) -> pa.Table:
    """Type the rows (RETURN items in order, then window_start/window_end under WITHIN).

    Rows are ordered by window start, then by the grouping values (NULL first), so that
    results are deterministic and easy to compare.
    """
    if on_overflow not in ON_OVERFLOW:
        raise ValueError(f"on_overflow must be one of {ON_OVERFLOW}, not {on_overflow!r}")
    types = [result_type(item, schema) for item in query.returns]
    group_positions = [i for i, it in enumerate(query.returns) if isinstance(it.value, AttrRef)]

    def key(row: ResultRow) -> tuple:
        # Window, then the GROUP-BY values, then the other values: a total order that
        # does not depend on how an executor happened to enumerate its groups.
        parts: list[tuple] = []
        if row.window is not None:
            parts.append((0, row.window[0]))
        parts += [order(v) for v in row.group]
        parts += [order(row.values[i]) for i in group_positions]
        parts += [order(v) for i, v in enumerate(row.values) if i not in group_positions]
        return tuple(parts)

    ordered = sorted(rows, key=key)
    columns: list[list[Any]] = [[] for _ in query.returns]
    for row in ordered:
        for i, (item, typ) in enumerate(zip(query.returns, types)):
            try:
                columns[i].append(_fits(row.values[i], item, typ))
            except (OverflowError, decimal.InvalidOperation):
                if on_overflow == "null":
                    columns[i].append(None)
                    continue
                raise overflow_error(query, item.name, typ, row.window, row.group, time_type,
                                     _magnitude(row.values[i])) from None
    out_schema = table_schema(query, schema, time_type, metadata)
    arrays = [pa.array(col, type=typ) for col, typ in zip(columns, types)]
    if query.window is not None:
        wtype = out_schema.field("window_start").type
        starts = [_window_bound(r.window[0], time_type) for r in ordered]  # type: ignore[index]
        ends = [_window_bound(r.window[1], time_type) for r in ordered]  # type: ignore[index]
        arrays += [pa.array(starts, type=wtype), pa.array(ends, type=wtype)]
    return pa.Table.from_arrays(arrays, schema=out_schema)


INT64_RANGE = (-(2**63), 2**63 - 1)


def check_window_range(first: int, last: int, size: Fraction, step: Fraction, window: Any) -> None:
    """Every window ``[k*step, k*step + size)`` holding a time in ``[first, last]`` (in the
    time column's units: seconds, or microseconds for timestamps) must start and end
    within int64, where the kernels and the result hold them; else a DataError."""
    if size.denominator != 1 or step.denominator != 1:
        return  # fractional windows are computed exactly, in Python
    size_, step_ = int(size), int(step)
    lowest = ((first - size_) // step_ + 1) * step_
    highest = last // step_ * step_ + size_
    if lowest < INT64_RANGE[0] or highest > INT64_RANGE[1]:
        at = first if lowest < INT64_RANGE[0] else last
        raise DataError(f"the windows of WITHIN {window.within.amount} {window.within.unit} holding "
                        f"time {at} would reach past the 64-bit range of times; such times are "
                        "too close to its ends")


def overflow_error(query: Query, item: str, typ: pa.DataType, window: tuple[Any, Any] | None,
                   group: Sequence[Any], time_type: pa.DataType,
                   magnitude: str | None = None) -> AggregateOverflowError:
    """The error for a value that does not fit its column, worded so that its first line
    -- all a Spark user may read of it -- names the item, the window, the group and the
    ways out.  ``window`` is in the engine's time domain, ``group`` the GROUP-BY values."""
    where = ""
    if window is not None:
        start, end = (_shown_time(_window_bound(w, time_type), time_type) for w in window)
        where = f" in window [{start}, {end})"
    if query.group_by:
        values = ", ".join(f"{ref.text} = {sql_value(v)}" for ref, v in zip(query.group_by, group))
        where += f" of group {values}"
    value = f" (its exact value has {magnitude})" if magnitude else ""
    return AggregateOverflowError(
        f"MATCH_TREND overflow: {item} does not fit {typ}{where}{value}. Use "
        "on_overflow='null' (Spark: spark.sql.ansi.enabled=false) to get NULL for such "
        "values, or count fewer trends: a shorter WITHIN, a more selective pattern or "
        "WHERE, or SEMANTICS skip-till-next-match")


def _shown_time(value: Any, time_type: pa.DataType) -> str:
    """A window bound as a user reads it: a timestamp in ISO form, else the number."""
    if pa.types.is_timestamp(time_type):
        return pa.scalar(int(value), pa.timestamp("us", tz=time_type.tz)).as_py().isoformat()
    return str(value)


def _magnitude(value: Any) -> str:
    """``about 1.18 x 10^21``: the value's three leading digits and decimal exponent, however
    large it is.  From the logarithm, not the decimal string: a count over a million events
    under skip-till-any-match has ~300k digits, past Python's limit for int -> str (4300)
    (a double's logarithm of it is off by ~1e-10: the third digit stays right)."""
    try:
        frac = Fraction(value)
    except (TypeError, ValueError):
        return f"value {value!r}"
    if frac == 0:
        return "value 0"
    size = abs(frac)
    log = math.log10(size.numerator) - math.log10(size.denominator)  # (ints of any size)
    exponent = math.floor(log)
    leading = f"{10 ** (log - exponent):.2f}".rstrip("0").rstrip(".")
    if leading == "10":  # (9.996 rounds up: the next power)
        leading, exponent = "1", exponent + 1
    sign = "-" if frac < 0 else ""
    return f"about {sign}{leading} x 10^{exponent}"

