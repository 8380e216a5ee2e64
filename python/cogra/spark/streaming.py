"""MATCH_TREND over a streaming DataFrame: ``match_trend(stream_df, query, watermark=...)``.

Each group of the query's plain GROUP-BY keys (one group without keys) is an
:class:`cogra.runtime.online.OnlineEvaluation` kept in Spark's state store, driven by
Spark's own stateful operator ``transformWithStateInPandas`` in event-time mode
(:class:`MatchTrendProcessor`); the shim plans it (docs/ARCHITECTURE.md, "Streaming
tables"), feeding it each group's rows of a task packed as one Arrow value
(:mod:`cogra.spark.stream_packing`) or, with ``spark.cogra.streaming.operator=
transformWithState``, the rows themselves:

* a micro-batch's rows of a group are pushed, then the watermark Spark computed (the
  largest event time seen minus the delay, over all partitions) closes windows, whose rows
  are emitted -- each (window, group) row once; in Update mode the open windows' current
  rows that the micro-batch changed follow (:meth:`OnlineEvaluation.early`);
* an event-time timer at the group's next window end closes its windows when no more of
  its rows arrive;
* the evaluation is the group's state: the open windows' states, or their events for
  queries the kernels cannot carry (see :mod:`cogra.runtime.online`), written where it
  changed (:mod:`cogra.spark.stream_state`), so a query restarted from its checkpoint
  continues where it stopped.

The watermark is set on every input row, before the pushed-down filter drops the rows
the query cannot use, so rows of types the pattern does not name advance it too
(docs/language.md, Streams: the largest time *seen*); its event time is the time column
shifted by :data:`cogra.spark.event_time.OFFSET_SECONDS`, so that rows at or before the
epoch are not late before any watermark exists.  Late rows are dropped and counted
(``lastProgress["stateOperators"][0]["numRowsDroppedByWatermark"]``) before the operator
by the shim.  Rows cross the pandas operator in a form that keeps every value
(:mod:`cogra.spark.stream_rows`).  The query's identity is stored with its state
(:mod:`cogra.analysis.identity`): a restart with a changed query on the same checkpoint is
an error, never a mix of two queries.

:func:`match_trend_stream` plans the same operator in Python, for sessions without the
shim: the rows themselves, Spark's own late-row filter (at or below the previous
micro-batch's watermark), and the output mode as an argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import pyarrow as pa
from pyspark.sql.streaming import StatefulProcessor

from cogra.runtime.evaluation import require_window
from cogra.spark.stream_packing import PAYLOAD, read_payload
from cogra.spark.stream_rows import exact_pandas, rows_from_pandas, wire_sql
from cogra.spark.event_time import OFFSET_SECONDS, check_event_times, delay_seconds, event_time_sql, timer_ms, watermark_in_time_units

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

EVENT_TIME = "__cogra_event_time"
"""The event-time column the watermark is set on (the time column as a timestamp)."""
ALL = "__cogra_all"
"""The one grouping key of a query without plain GROUP-BY keys."""
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


@dataclass(frozen=True)
class GroupQuery:
    """What every group's evaluation of one streaming call shares: the query over the
    selected columns' schema, and how Spark's watermark maps to the time column
    (``event_time_offset``: :data:`~cogra.spark.event_time.OFFSET_SECONDS` for the event
    time MATCH_TREND sets its watermark on, 0 for the input's own watermark)."""

    query: str
    schema: pa.Schema
    columns: tuple[str, ...]
    type_column: str | None
    time_column: str
    delay: float
    on_overflow: str = "null"
    event_time_offset: int = OFFSET_SECONDS
    packed: bool = False
    """The rows come packed (:mod:`cogra.spark.stream_packing`): one Arrow value per group and task."""
    update: bool = False
    """Update mode: after each micro-batch, also the open windows' current rows that changed."""

    @classmethod
    def of(cls, analyze_result: bytes, options: str) -> tuple["GroupQuery", Any]:
        """The call's group query and output schema, from what the shim hands a worker:
        the pickled analyze result and the options JSON."""
        import json
        import pickle

        from cogra.spark.udtf_analysis import CograAnalyzeResult

        result = pickle.loads(analyze_result)
        if not isinstance(result, CograAnalyzeResult):
            raise TypeError(f"MATCH_TREND: unexpected analyze result {type(result).__name__}")
        opts = json.loads(options)
        group = cls(result.query, pa.ipc.read_schema(pa.py_buffer(result.input_schema)),
                    tuple(result.input_columns), result.type_column, result.time_column,
                    delay_seconds(result.watermark or "0 seconds"), on_overflow=opts.get("on_overflow", "error"),
                    event_time_offset=0 if opts.get("own_watermark") else OFFSET_SECONDS,
                    packed=bool(opts.get("packed")), update=opts.get("output_mode") == "update")
        return group, result.schema

    @property
    def time_type(self) -> pa.DataType:
        return self.schema.field(self.time_column).type

    def evaluation(self, snapshot: bytes | None, rows: list[pa.Table] | None = None) -> Any:
        """The group's :class:`~cogra.runtime.online.OnlineEvaluation` (journaling its rows:
        :mod:`cogra.spark.stream_state`), restored from its state's snapshot and held rows
        where it has them."""
        from cogra.runtime.online import OnlineEvaluation

        online = OnlineEvaluation(self.query, self.schema, type_column=self.type_column,
                                  time_column=self.time_column, delay=self.delay, on_overflow=self.on_overflow,
                                  early=self.update, journal=True)
        if snapshot is not None:
            online.restore(bytes(snapshot), rows=rows or ())
        return online

    def identity(self) -> str:
        """What tells this call's groups from another query's in a worker's cache."""
        import hashlib

        text = "\x00".join([self.query, self.schema.to_string(), str(self.type_column), self.time_column,
                            repr(self.delay), self.on_overflow, str(self.event_time_offset), str(self.update)])
        return hashlib.sha256(text.encode()).hexdigest()

    @staticmethod
    def snapshot_version(snapshot: bytes) -> int:
        """The version a snapshot's writer stored with it (0: none)."""
        from cogra.runtime.online import snapshot_header

        return int(snapshot_header(snapshot).get("extra", {}).get("version") or 0)

    def watermark(self, watermark_ms: int | None) -> int | None:
        """Spark's watermark in the time column's units (None: none yet)."""
        return watermark_in_time_units(watermark_ms, self.time_type, self.event_time_offset)

    def timer(self, end: int) -> int:
        """The event-time timer (ms) at which a window ending at ``end`` may close."""
        return timer_ms(end, self.time_type, self.event_time_offset)


def make_stream_command(analyze_result: bytes, options: str) -> tuple[Any, Any]:
    """The ``(function, return type)`` the shim's transformWithStateInPandas node runs for
    ``MATCH_TREND`` over a streaming table (packed rows or rows, Append or Update mode, as
    the options say): a :class:`MatchTrendProcessor` behind PySpark's own adapter of
    stateful processors to its worker protocol."""
    from pyspark.sql.streaming.stateful_processor_util import TransformWithStateInPandasUdfUtils

    group, output = GroupQuery.of(analyze_result, options)
    utils = TransformWithStateInPandasUdfUtils(MatchTrendProcessor(group), "EventTime")
    return utils.transformWithStateUDF, output


def match_trend_stream(df: "DataFrame", query: str, *, watermark: str | None, type_column: str | None = None,
                       time_column: str = "time", update: bool = False) -> "DataFrame":
    """The streaming form of ``MATCH_TREND`` planned in Python, for sessions without the
    shim (see the module docstring): ``watermark`` is how late an event may arrive, e.g.
    ``'30 seconds'`` (None: ``df``'s own watermark); ``update``: the writer writes in
    Update mode, and the open windows' current rows follow every micro-batch."""
    import cogra
    from pyspark.sql import functions as F

    from cogra.spark.udtf_analysis import _arrow_schema, _spark_schema, plain_group_keys

    q = cogra.parse(query)
    require_window(q)
    delay = delay_seconds(watermark) if watermark is not None else 0.0
    schema = _arrow_schema(df.schema)
    output = cogra.result_schema(q, schema, type_column=type_column, time_column=time_column)
    keys = list(plain_group_keys(query))
    try:
        # With the input's own watermark (on its time column), the column itself: Spark's
        # operator drops late rows by that column's watermark.
        event_time = (F.expr(event_time_sql(time_column, schema.field(time_column).type))
                      if watermark is not None else F.col(time_column))
    except ValueError as e:
        raise cogra.QueryError(str(e), q.text) from None
    spark = df.sparkSession
    if spark.conf.get("spark.sql.streaming.stateStore.providerClass", "") != ROCKSDB:
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    if spark.conf.get(CHANGELOG, None) is None:  # (as the shim: docs/ARCHITECTURE.md)
        spark.conf.set(CHANGELOG, "true")
    columns = list(df.columns)
    events = df.withColumn(EVENT_TIME, event_time)
    wired = {c: wire_sql(c, schema.field(c).type) for c in columns}
    events = events.select(*[F.expr(wired[c]).alias(c) if wired[c] else F.col(c) for c in columns], EVENT_TIME)
    if watermark is not None:
        events = events.withWatermark(EVENT_TIME, watermark)
    if not keys:
        events = events.withColumn(ALL, F.lit(0))
        keys = [ALL]
    ansi = str(spark.conf.get("spark.sql.ansi.enabled", "true")).lower() == "true"
    processor = MatchTrendProcessor(GroupQuery(query, schema, tuple(columns), type_column, time_column, delay,
                                               on_overflow="error" if ansi else "null",
                                               event_time_offset=OFFSET_SECONDS if watermark is not None else 0,
                                               update=update))
    return events.groupBy(*keys).transformWithStateInPandas(
        statefulProcessor=processor,
        outputStructType=_spark_schema(output),
        outputMode="Append",
        timeMode="EventTime",
    )


def stop_between_batches(query: Any, timeout: float = 60.0) -> None:
    """Stop a streaming query once no micro-batch is running (or after ``timeout`` s).

    Stopping one mid-batch interrupts its tasks, and Spark then matches the interruption's
    message with a regular expression; a Python ``foreachBatch`` sink's message (py4j's,
    with the Python traceback) is long enough for that match to overflow the stream
    thread's stack, which dies with a StackOverflowError and a thousand-line trace."""
    import time

    deadline = time.monotonic() + timeout
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.02)
    query.stop()


class MatchTrendProcessor(StatefulProcessor):
    """The per-group stateful processor: the group's OnlineEvaluation loaded from its state
    (or this worker's cache of it) and written back where it changed
    (:mod:`cogra.spark.stream_state`) around each call."""

    def __init__(self, group: GroupQuery):
        self.group = group

    def init(self, handle: Any) -> None:
        from cogra.spark.stream_state import GroupStore

        self.handle = handle
        self.store = GroupStore(handle, self.group)

    def _close(self, key: Any, entry: Any, timer_values: Any) -> Iterator[Any]:
        online = entry.online
        watermark = self.group.watermark(timer_values.getCurrentWatermarkInMs())
        out = online.advance(watermark) if watermark is not None else None
        early = online.early() if self.group.update else None
        # One timer, at the end of the next window to close. Each call on the handle is a
        # round trip to the JVM's state server (several ms): the timer set is kept with the
        # state, and changes only where that end did.
        end = online.next_window_end()
        wanted = None if end is None else self.group.timer(end)
        timer = online.state.extra.get("timer")
        if timer != wanted:
            if timer is not None:
                self.handle.deleteTimer(timer)
            if wanted is not None:
                self.handle.registerTimer(wanted)
            online.state.extra["timer"] = wanted
        self.store.save(key, entry)
        for rows in (out, early):
            if rows is not None and rows.num_rows:
                yield exact_pandas(rows)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        group = self.group
        entry = self.store.load(key)
        online = entry.online
        for pdf in rows:
            if group.packed:
                for payload in pdf[PAYLOAD]:
                    events = read_payload(payload)
                    online.push(events if events.schema.equals(group.schema) else events.cast(group.schema))
                continue
            if group.event_time_offset and EVENT_TIME in pdf.columns:
                check_event_times(pdf[group.time_column], pdf[EVENT_TIME], group.time_column)
            online.push(rows_from_pandas(pdf, group.schema))
        yield from self._close(key, entry, timerValues)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
        entry = self.store.load(key)
        online = entry.online
        if online.state.extra.get("timer") == expiredTimerInfo.getExpiryTimeInMs():
            online.state.extra["timer"] = None  # (Spark removed it as it fired)
        yield from self._close(key, entry, timerValues)

    def close(self) -> None:
        pass


__all__ = ["GroupQuery", "MatchTrendProcessor", "make_stream_command",
           "match_trend_stream", "stop_between_batches"]
