"""The event time of a streaming MATCH_TREND: the watermark's delay and the timestamp
column Spark's watermark reads.  Used by the analysis (:mod:`cogra.spark.udtf`) and the
stateful operator (:mod:`cogra.spark.streaming`)."""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa


def delay_seconds(text: str) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|secs?|seconds?|mins?|minutes?|"
                         r"hours?|days?)\s*", text, re.I)
    if not match:
        raise ValueError(f"watermark must be a delay such as '30 seconds', not {text!r}")
    unit = match.group(2).lower()
    scale = 0.001 if unit.startswith("m") and unit not in ("min", "mins", "minute", "minutes") \
        else 60 if unit.startswith("min") else 3600 if unit.startswith("hour") \
        else 86400 if unit.startswith("day") else 1
    return float(match.group(1)) * scale


OFFSET_SECONDS = 3_155_695_200
"""How far the event time Spark's watermark reads lies after the time column: 100 years
(of 365.2425 days).

Spark's watermark starts at 0 (the epoch) and only grows, and its stateful operators
drop rows at or below it as late, so rows at or before the epoch (integer times from 0,
negative times) would be dropped in a stream's first batches, before any watermark of
an earlier batch exists (docs/language.md, Streams: before the first batch the watermark
is minus infinity).  Shifted by the offset, every time of the supported range lies after
Spark's initial watermark, and the watermark Spark reports converts back exactly
(:func:`watermark_in_time_units`); 0 still means "no watermark yet".

The event time also crosses PySpark's pandas operator, as nanoseconds since the epoch
(years 1677-2262), so the supported times are those whose shifted time fits: from
:data:`FIRST_MICROS` to :data:`LAST_MICROS` (1869-12-31 18:00 to 2162-04-11 17:47 UTC); a row outside is a clear
error (:func:`check_event_times`), never a silent drop.

Why not leave the time alone and treat Spark's 0 as "none": a true watermark at or
below the epoch reads as 0 too, and lateness there could not be decided."""

_OFFSET_MICROS = OFFSET_SECONDS * 1_000_000
FIRST_MICROS = 1 - _OFFSET_MICROS
"""The earliest time (µs since the epoch) a stream supports: its shifted time is after 0."""
LAST_MICROS = (2**63 - 1) // 1000 - _OFFSET_MICROS
"""The latest time (µs since the epoch) a stream supports: its shifted time fits pandas' ns."""


def event_time_sql(time_column: str, time_type: pa.DataType) -> str:
    """Spark SQL for the event time (a timestamp, :data:`OFFSET_SECONDS` after the time;
    NULL outside the supported range) of a time column: integer or double seconds, a
    timestamp, or a timestamp without time zone."""
    quoted = "`" + time_column.replace("`", "``") + "`"
    if pa.types.is_timestamp(time_type):
        # A time-zone-less timestamp counts its wall-clock micros from the epoch, as the
        # engine reads it (no session time zone in between).
        micros = (f"unix_micros({quoted})" if time_type.tz is not None
                  else f"timestampdiff(MICROSECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', {quoted})")
        first, last = FIRST_MICROS, LAST_MICROS
    elif pa.types.is_integer(time_type):
        micros = f"CAST({quoted} AS BIGINT)"
        first, last = -(-FIRST_MICROS // 1_000_000), LAST_MICROS // 1_000_000
    elif pa.types.is_floating(time_type):
        # Whole microseconds, floored, as the stream reads double seconds
        # (cogra.runtime.slices); NaN lies past every bound in Spark's order: NULL.
        seconds = f"CAST({quoted} AS DOUBLE)"
        return (f"CASE WHEN {seconds} BETWEEN {FIRST_MICROS / 1e6!r} AND {LAST_MICROS / 1e6!r} "
                f"THEN timestamp_micros(CAST(floor({seconds} * 1000000D) AS BIGINT) + {_OFFSET_MICROS}) END")
    else:
        raise ValueError("a streaming MATCH_TREND needs an integer, double or timestamp time column "
                         f"(its windows close at exact times), not {time_type}")
    shifted = f"{micros} + {_OFFSET_MICROS}" if first == FIRST_MICROS else f"{micros} * 1000000 + {_OFFSET_MICROS}"
    return f"CASE WHEN {micros} BETWEEN {first} AND {last} THEN timestamp_micros({shifted}) END"


def check_event_times(times: Any, event_times: Any, time_column: str) -> None:
    """A DataError if a row has a time but no event time: its time lies outside the range a
    stream supports (``times``, ``event_times``: the pandas columns of one chunk)."""
    outside = times.notna() & event_times.isna()
    if outside.any():
        from cogra.errors import DataError

        raise DataError(
            f"time column {time_column}: {int(outside.sum())} row(s) at times outside the range a "
            "streaming MATCH_TREND supports (1869-12-31 18:00 to 2162-04-11 17:47 UTC; as seconds, "
            f"{-(-FIRST_MICROS // 1_000_000)} to {LAST_MICROS // 1_000_000}), e.g. "
            f"{times[outside].iloc[0]!r}: Spark's watermark reads the time 100 years later, as "
            "nanoseconds of pandas")


def watermark_in_time_units(watermark_ms: int | None, time_type: pa.DataType, offset_seconds: int) -> int | None:
    """Spark's watermark (ms of the event time) as a time of the time column: seconds, or
    microseconds for timestamps and double seconds; None where Spark has none yet (0).  ``offset_seconds``:
    :data:`OFFSET_SECONDS` for the event time of :func:`event_time_sql`, 0 for a watermark
    the input set on its own timestamp column."""
    if watermark_ms is None or watermark_ms <= 0:
        return None
    if pa.types.is_timestamp(time_type) or pa.types.is_floating(time_type):
        return int(watermark_ms) * 1000 - offset_seconds * 1_000_000
    return int(watermark_ms) // 1000 - offset_seconds


def timer_ms(end: int, time_type: pa.DataType, offset_seconds: int) -> int:
    """The event-time timer (ms of the event time) at which a window ending at ``end``
    (time column units; µs for double seconds) may close: the first watermark at or past it."""
    if pa.types.is_timestamp(time_type) or pa.types.is_floating(time_type):
        return -(-(end + offset_seconds * 1_000_000) // 1000)
    return (end + offset_seconds) * 1000


__all__ = ["FIRST_MICROS", "LAST_MICROS", "OFFSET_SECONDS", "check_event_times", "delay_seconds", "event_time_sql", "timer_ms", "watermark_in_time_units"]
