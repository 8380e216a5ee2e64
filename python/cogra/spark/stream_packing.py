"""The ``packed`` streaming operator's first step: each group's rows of a task's input as
one Arrow IPC value.

PySpark's pandas stateful operators hand a group's rows to Python as pandas DataFrames,
at a cost per row (and per column) that no handler can win back.  Packed first -- a
MapInArrow over the input's partitions, Arrow in and Arrow out -- the stateful operator
(``transformWithStateInPandas``, :class:`cogra.spark.streaming.MatchTrendProcessor`)
sees one row per group and task, whose payload the group's evaluation reads as Arrow,
every value as Spark sent it (no pandas conversion of the events at all).

The input columns are the query's, then the event time (when the stream sets its own
watermark) and the group key ``__cogra_group``; a payload holds the query's columns.
"""

from __future__ import annotations

import json
import pickle
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

GROUP = "__cogra_group"
PAYLOAD = "payload"
EVENT_TIME = "__cogra_event_time"
PACKED_SCHEMA = pa.schema([(GROUP, pa.string()), (PAYLOAD, pa.binary()), (EVENT_TIME, pa.timestamp("us", tz="UTC"))])


def ipc_bytes(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def read_payload(payload: bytes) -> pa.Table:
    return pa.ipc.open_stream(payload).read_all()


def pack(batch: pa.RecordBatch, columns: list[str]) -> pa.RecordBatch:
    """One row per group of ``batch``: the group key, its rows' ``columns`` as IPC, and
    their largest event time (the stateful operator's watermarked column)."""
    keys = pc.dictionary_encode(batch.column(batch.schema.get_field_index(GROUP)))
    codes = np.asarray(keys.indices)
    counts = np.bincount(codes, minlength=len(keys.dictionary))
    rows = batch.select(columns)
    times = batch.column(batch.schema.get_field_index(EVENT_TIME)).cast(pa.timestamp("us", tz="UTC"))
    if len(counts) > 1:
        order = pa.array(np.argsort(codes, kind="stable"))
        rows, times = rows.take(order), times.take(order)
    groups, payloads, latest, at = [], [], [], 0
    for code, n in enumerate(counts.tolist()):
        if n:
            groups.append(keys.dictionary[code].as_py())
            payloads.append(ipc_bytes(rows.slice(at, n)))
            latest.append(pc.max(times.slice(at, n)))
            at += n
    return pa.record_batch([pa.array(groups, pa.string()), pa.array(payloads, pa.binary()),
                            pa.array([t.value for t in latest], pa.timestamp("us", tz="UTC"))],
                           schema=PACKED_SCHEMA)


def check_event_times(batch: pa.RecordBatch, time_column: str) -> None:
    """A DataError if a row has a time but no event time: outside the range a stream's
    watermark reads (:mod:`cogra.spark.event_time`)."""
    times = batch.column(batch.schema.get_field_index(time_column))
    event_times = batch.column(batch.schema.get_field_index(EVENT_TIME))
    outside = pc.and_(pc.is_valid(times), pc.is_null(event_times))
    if pc.any(outside).as_py():
        from cogra.spark import event_time

        event_time.check_event_times(times.to_pandas(), event_times.to_pandas(), time_column)


def make_pack_function(analyze_result: bytes, options: str) -> Any:
    """The MapInArrow function of the ``packed`` operator (built by the shim)."""
    result = pickle.loads(analyze_result)
    columns = list(result.input_columns)
    own_watermark = json.loads(options).get("own_watermark", False)

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows:
                if not own_watermark:
                    check_event_times(batch, result.time_column)
                yield pack(batch, columns)

    return run


__all__ = ["EVENT_TIME", "GROUP", "PACKED_SCHEMA", "PAYLOAD", "check_event_times", "make_pack_function", "pack",
           "read_payload"]
