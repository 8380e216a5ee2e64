"""The event time of a streaming MATCH_TREND: the watermark's delay and the timestamp
column Spark's watermark reads.  Used by the analysis (:mod:`cogra.spark.udtf`) and the
stateful operator (:mod:`cogra.spark.streaming`)."""

from __future__ import annotations

import re

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


def event_time_sql(time_column: str, time_type: pa.DataType) -> str:
    """Spark SQL for the event time (a timestamp) of a time column: seconds or a timestamp."""
    quoted = "`" + time_column.replace("`", "``") + "`"
    if pa.types.is_timestamp(time_type):
        return quoted
    if pa.types.is_integer(time_type):
        return f"timestamp_seconds({quoted})"
    raise ValueError("a streaming MATCH_TREND needs an integer or timestamp time column "
                     f"(its windows close at exact times), not {time_type}")


__all__ = ["delay_seconds", "event_time_sql"]
