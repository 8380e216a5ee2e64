"""The Python code Spark calls for ``MATCH_TREND(TABLE(t), query, ...)``.

Two routes lead here, and both end in :func:`cogra.evaluate` on Arrow data:

* **The JVM shim** (``spark.sql.extensions=org.apache.spark.sql.cogra.CograExtensions``):
  while the query is analyzed, the shim runs :meth:`MatchTrendUDTF.analyze` (through
  Spark's own UDTF analyze runner), then plans the call as ``MapInArrow`` over the TABLE
  argument, repartitioned by the query's plain keys and sorted by (keys, time).  Each task
  runs the function built by :func:`make_map_function`: it streams the partition's Arrow
  batches through :mod:`cogra.runtime.stream` where the query allows (memory bounded by
  the open windows' states), else evaluates complete key groups in chunks
  (:class:`_ChunkedEvaluator`).
* **A plain Python UDTF** (:func:`cogra.spark.register`, for sessions that cannot load the
  jar): Spark calls :meth:`MatchTrendUDTF.analyze`, partitions and orders the table as it
  requests, and feeds each partition's Arrow batches to :meth:`MatchTrendUDTF.eval`;
  :meth:`MatchTrendUDTF.terminate` evaluates the partition.

``analyze`` fixes the output schema without reading data, so a query that does not parse
or names a missing column fails at analysis, before any job, with cogra's message (line,
column and a caret).  It also asks for the columns the query reads and for a filter that
every usable row passes (from :func:`cogra.pushdown`), so the scan below the TABLE
argument reads less.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import json
import os
import pickle
import re
import time
import warnings
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.errors import PySparkValueError
from pyspark.sql.types import StructField, StructType
from pyspark.sql.udtf import (
    AnalyzeArgument,
    AnalyzeResult,
    OrderingColumn,
    PartitioningColumn,
    SelectedColumn,
)

import cogra
from cogra.errors import CograDataWarning, CograError, DataError
from cogra.language.ast import AttrRef, Query, Span
from cogra.spark.worker_heap import retain_freed_memory

FUNCTION_NAME = "MATCH_TREND"
#: Alias of the pushed-down row filter among the selected input columns; the shim turns it
#: into a Filter below the scan's projection, the plain UDTF route filters rows with it.
FILTER_ALIAS = "__cogra_filter__"
#: Prefix of the columns the shim adds for a user's ``PARTITION BY`` expressions.
KEY_PREFIX = "__cogra_pk_"
#: Alias of the event-time column a streaming call selects for Spark's watermark.
EVENT_TIME_ALIAS = "__cogra_event_time"
#: Alias of the query's identity a streaming call selects (the shim stores it with the state).
IDENTITY_ALIAS = "__cogra_identity__"
MAX_GROUP_ROWS = 5_000_000
"""Rows of one key group a worker holds at most (its memory: ~0.6 GB per million rows of a
mixed-grained query without WITHIN); the streamed and sliced routes hold far fewer."""
#: Evaluate at least this many rows at a time (whole key groups; a streamed partition is
#: pushed in chunks of this size), see _ChunkedEvaluator.
CHUNK_ROWS = 1 << 15
#: Under integral windows, evaluate a key group's complete windows once this many of its
#: rows are held, without waiting for the group's end (see _ChunkedEvaluator): memory
#: stays bounded in a large group.  Not smaller where every processor runs a task: more,
#: smaller calls cost CPU (q3's 20k-row groups in 8k-row slices on ``local[2]``, two
#: processors: 12% slower, medians of 16 interleaved runs).
SLICE_ROWS = CHUNK_ROWS
#: ... but where each task has a processor to spare (:func:`slice_rows_for`), open groups
#: are sliced from this many rows on, so that the engine works on a group's first rows
#: while the JVM, on the other processor, still sorts and encodes the rest -- instead of
#: both waiting for each other at the group's end.  ``local[1]`` on two processors,
#: medians of 16 interleaved runs: q3 8-11% faster, q1 4%, q3 tumbling unchanged.
SPARE_PROCESSOR_SLICE_ROWS = 1 << 13
#: ... or more: as many rows as the engine evaluates in about this long, a few times an
#: engine call's fixed cost (:class:`SlicePace`).  q3 stays at 8k rows; q2's cheap rows
#: slice at ~15k (70 engine calls per 1M rides instead of 129, its engine time in process
#: 364 -> 308 ms), q1's at ~27k (75 calls per 2M rows instead of 204: 834 -> 333 ms).
#: ``local[1]``, medians of 12 interleaved runs: with 8 ms, q2 2-7% faster than in fixed
#: 8k-row slices but q1 5% slower (the finer slices' extra work ran on the spare
#: processor and overlapped more); 4 ms against 8 ms: q1 3% faster, q2 the same.
SLICE_SECONDS = 0.004

USAGE = (
    f"{FUNCTION_NAME}(TABLE(t), 'RETURN ... PATTERN ...' "
    "[, type_column => 'type'] [, time_column => 'time'] [, watermark => '30 seconds'])"
)


def analysis_error(message: str) -> PySparkValueError:
    """An error for ``analyze`` to raise: Spark's analyzer keeps the text after
    ``PySparkValueError:``, so the user sees cogra's message without a Python traceback."""
    return PySparkValueError(message=message)


@dataclass
class CograAnalyzeResult(AnalyzeResult):
    """What ``analyze`` decided, handed (pickled) to every task that evaluates the call."""

    query: str = ""
    type_column: str | None = None
    time_column: str = "time"
    #: Plain sub-stream keys the input is partitioned by (input column names).
    key_columns: tuple[str, ...] = ()
    #: Input columns the evaluation reads, in the order they are selected.
    input_columns: tuple[str, ...] = ()
    #: SQL predicate every row the query can use satisfies, or None.
    filter_sql: str | None = None
    #: How late a streamed event may arrive (``watermark => '30 seconds'``), or None.
    watermark: str | None = None
    #: The selected input columns' Arrow schema (serialized).
    input_schema: bytes = b""


# ---------------------------------------------------------------------------
# analyze
# ---------------------------------------------------------------------------


def sql_string(text: str) -> str:
    """A Spark SQL expression for the string ``text`` that every parser setting reads the
    same: its UTF-8 bytes in hex, cast to a string.  A quoted literal is read one way or
    the other by ``spark.sql.parser.escapedStringLiterals`` (so are SQL parameters, which
    Spark renders back into quoted text), and a query may hold quotes and backslashes."""
    return f"CAST(X'{text.encode('utf-8').hex().upper()}' AS STRING)"


def quote_identifier(name: str) -> str:
    """A Spark SQL identifier for a column name (backticks, doubled inside)."""
    return "`" + name.replace("`", "``") + "`"


def _string_argument(arg: AnalyzeArgument | None, what: str, default: str | None,
                     required: bool = False) -> str | None:
    if arg is None:
        if required:
            raise analysis_error(f"{FUNCTION_NAME} needs {what}: {USAGE}")
        return default
    if arg.isTable:
        raise analysis_error(f"{FUNCTION_NAME}: {what} must be a string, not a TABLE: {USAGE}")
    if not arg.isConstantExpression or not isinstance(arg.value, str):
        raise analysis_error(
            f"{FUNCTION_NAME}: {what} must be a constant string (got {arg.dataType.simpleString()}"
            f"{'' if arg.isConstantExpression else ' expression'}): {USAGE}"
        )
    return arg.value


def _arrow_schema(struct: StructType) -> pa.Schema:
    """The Arrow schema Spark will send for the TABLE argument (columns it cannot send as
    Arrow are left out, so a query that names one reports it as missing)."""
    from pyspark.sql.pandas.types import to_arrow_type

    fields = []
    for f in struct.fields:
        try:
            fields.append(pa.field(f.name, to_arrow_type(f.dataType, timezone="UTC"), f.nullable))
        except Exception:  # noqa: BLE001 - e.g. intervals/variant: not a COGRA attribute type
            continue
    return pa.schema(fields)


def _spark_schema(schema: pa.Schema) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_type

    return StructType(
        [StructField(f.name, from_arrow_type(f.type, prefer_timestamp_ntz=True), True) for f in schema]
    )


def _resolve(name: str, columns: Sequence[str]) -> str:
    """The input column a query attribute names: exact match, else a unique case-insensitive one."""
    if name in columns:
        return name
    folded = [c for c in columns if c.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else name


def plain_group_keys(query: str) -> tuple[str, ...]:
    """Keys the input can be partitioned by without splitting an output group.

    These are the plain sub-stream keys (:func:`cogra.partition_columns`: rows that differ in
    them never meet in a trend) that are also unqualified GROUP-BY attributes: a key that is
    only an equivalence ``[attr]`` separates sub-streams whose results still merge into one
    output row, so partitioning by it would split that row.
    """
    q = cogra.parse(query)
    grouped = {ref.name for ref in q.group_by if ref.variable is None}
    return tuple(k for k in cogra.partition_columns(q) if k in grouped)


def pushdown(query: str, schema: pa.Schema, type_column: str | None, time_column: str
             ) -> tuple[tuple[str, ...], str | None]:
    """(input columns the query reads, SQL filter every usable row passes, or None).

    From :func:`cogra.pushdown` when the engine has it; otherwise the bound query's
    ``columns_used`` (projection only, no filter).
    """
    fn = getattr(cogra, "pushdown", None)
    if fn is not None:
        columns, filter_sql = fn(query, schema, type_column=type_column, time_column=time_column)
        return tuple(columns), filter_sql or None
    from cogra.analysis.binding import bind

    bound = bind(cogra.parse(query), schema, type_column=type_column, time_column=time_column)
    used = getattr(bound, "columns_used", None)
    return (tuple(used) if used is not None else tuple(schema.names)), None


def analyze_call(
    input: AnalyzeArgument | None,
    query: AnalyzeArgument | None,
    type_column: AnalyzeArgument | None = None,
    time_column: AnalyzeArgument | None = None,
    watermark: AnalyzeArgument | None = None,
    stream: AnalyzeArgument | None = None,
) -> CograAnalyzeResult:
    """``stream``: set by the shim for a streaming TABLE argument, which then also selects
    the query's identity (``__cogra_identity__``, :mod:`cogra.analysis.identity`) and the
    wire forms of columns pandas would change (:mod:`cogra.spark.stream_rows`)."""
    if input is None or not input.isTable or not isinstance(input.dataType, StructType):
        raise analysis_error(f"{FUNCTION_NAME}'s first argument must be TABLE(...): {USAGE}")
    text = _string_argument(query, "a query", None, required=True)
    delay = _string_argument(watermark, "watermark", None)
    # No type_column: "type" if the table has it (else a one-type pattern reads every row
    # as its type); a named one must exist.
    type_col = _string_argument(type_column, "type_column", None)
    time_col = _string_argument(time_column, "time_column", "time")
    in_schema = _arrow_schema(input.dataType)
    try:
        out_schema = cogra.result_schema(text, in_schema, type_column=type_col, time_column=time_col)
        keys = plain_group_keys(text)
        columns, filter_sql = pushdown(text, in_schema, type_col, time_col)
    except CograError as e:
        raise analysis_error(f"{FUNCTION_NAME}: {e}") from None

    names = in_schema.names
    keys = tuple(_resolve(k, names) for k in keys)
    time_name = _resolve(time_col, names)
    selected: list[str] = []
    for c in (*keys, time_name, *columns):
        c = _resolve(c, names)
        if c in names and c not in selected:
            selected.append(c)
    select = [SelectedColumn(quote_identifier(c)) for c in selected]
    if filter_sql:
        select.append(SelectedColumn(f"({filter_sql})", alias=FILTER_ALIAS))
    if delay is not None:  # a stream's event time, for Spark's watermark (cogra.spark.event_time)
        from cogra.runtime.evaluation import require_window
        from cogra.spark.event_time import delay_seconds, event_time_sql

        try:
            delay_seconds(delay)
            require_window(cogra.parse(text))
            select.append(SelectedColumn(event_time_sql(time_name, in_schema.field(time_name).type),
                                         alias=EVENT_TIME_ALIAS))
        except (ValueError, CograError) as e:
            raise analysis_error(f"{FUNCTION_NAME}: {e}") from None
    if stream is not None and stream.value:
        select += _stream_columns(text, in_schema, selected, type_col, time_col)

    return CograAnalyzeResult(
        schema=_spark_schema(out_schema),
        withSinglePartition=not keys,
        partitionBy=[PartitioningColumn(quote_identifier(k)) for k in keys],
        orderBy=[OrderingColumn(quote_identifier(time_name))],
        select=select,
        query=text,
        type_column=type_col,
        time_column=time_col,
        key_columns=keys,
        input_columns=tuple(selected),
        filter_sql=filter_sql,
        watermark=delay,
        input_schema=pa.schema([in_schema.field(c) for c in selected]).serialize().to_pybytes(),
    )


def _stream_columns(text: str, schema: pa.Schema, selected: Sequence[str], type_column: str | None,
                    time_column: str) -> list[SelectedColumn]:
    """A streaming call's extra selections: its identity as a string literal, and each
    column's wire form where it has one."""
    from cogra.analysis.identity import query_identity
    from cogra.spark.stream_rows import WIRE_PREFIX, wire_sql

    identity = query_identity(text, schema, type_column=type_column, time_column=time_column, columns=selected)
    out = [SelectedColumn(sql_string(identity.to_json()), alias=IDENTITY_ALIAS)]
    for c in selected:
        wire = wire_sql(c, schema.field(c).type)
        if wire is not None:
            out.append(SelectedColumn(wire, alias=WIRE_PREFIX + c))
    return out


# ---------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------


def _target_schema(result: CograAnalyzeResult) -> pa.Schema:
    """The Arrow schema Spark expects back (its own mapping of the Spark output schema)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(result.schema, timezone="UTC")


def _conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    if table.num_columns != len(target):
        raise RuntimeError(
            f"{FUNCTION_NAME}: the engine returned {table.num_columns} columns, "
            f"analysis promised {len(target)}"
        )
    table = table.rename_columns(target.names).replace_schema_metadata(None)
    return table if table.schema.equals(target) else table.cast(target)


class SlicePace:
    """How many rows an open key group's slices hold where each task has a processor to
    spare: as many as the engine evaluates in about SLICE_SECONDS, at the cost per row
    measured so far in this worker for this query, from ``least`` to ``most`` rows.

    Every engine call has a fixed cost (plan set-up, sub-streams, result columns: ~1 ms
    for q2, ~2 ms for q3) besides its cost per row.  A query whose rows are costly slices
    at ``least`` rows (q3, a mixed-grained pattern over 60 sliding windows per event: ~1.2
    µs per row), so that the engine works on a group's first rows while the JVM still
    sends the rest (8-14% faster on ``local[1]`` than in 32k-row slices); one whose rows
    are cheap would mostly pay calls at that size (q2 in 8k-row slices: 129 calls per 1M
    rides instead of 26 in 32k-row ones, its engine time 1.8-2.3x, the query 8% slower)
    and slices at more rows.  The extra calls of small slices run on the spare processor,
    though, and partly overlap with the JVM (q1 was 5% faster in 8k slices than in 32k
    ones, at 2.6x the engine time): hence a target of a few fixed costs, not many.

    The cost per row is a decaying average over the calls (recent calls weigh most); a
    process's first call, which loads the compiled kernels, is left out.
    """

    DECAY = 0.8

    def __init__(self, least: int, most: int):
        self.least, self.most = least, max(least, most)
        self.calls = 0
        self.rows = 0.0
        self.seconds = 0.0

    def record(self, rows: int, seconds: float) -> None:
        """One engine call's input rows and time."""
        self.calls += 1
        if self.calls == 1 or rows <= 0:
            return
        self.rows = self.DECAY * self.rows + rows
        self.seconds = self.DECAY * self.seconds + seconds

    def slice_rows(self) -> int:
        if self.rows <= 0 or self.seconds <= 0:
            return self.least
        return int(min(self.most, max(self.least, SLICE_SECONDS * self.rows / self.seconds)))


_PACES: dict[tuple, SlicePace] = {}
"""Per query (and bounds): its SlicePace, shared by the tasks of a reused worker."""


def slice_pace(query: str, least: int, most: int) -> SlicePace:
    key = (query, least, most)
    pace = _PACES.get(key)
    if pace is None:
        if len(_PACES) >= 64:
            _PACES.clear()
        pace = _PACES[key] = SlicePace(least, most)
    return pace


def with_partition_keys(query: str, keys: Sequence[str]) -> str | Query:
    """``query`` with ``keys`` (the columns the shim adds for a ``PARTITION BY`` written
    after ``TABLE(...)``) as plain GROUP-BY attributes that RETURN does not list.

    Spark evaluates a table function's partitions each on its own; so does the engine for
    the values of plain keys, which never meet in a trend, window or output row.  Several
    partitions can then go through one engine call (a task holds many of them: whatever
    hashes to its Spark partition) and still stay apart, and the output has no column
    for the keys, as for any Spark table function.
    """
    if not keys:
        return query
    q = cogra.parse(query)
    at = Span(0, 0, 1, 1)
    return dataclasses.replace(q, group_by=q.group_by + tuple(AttrRef(None, k, at) for k in keys))


@dataclass
class TaskReport:
    """What a task's input held that the user should hear of, sent to the driver when the
    task ends: the shim's accumulator collects one report per task and the driver logs
    what they add up to after the query (``Diagnostics.scala``): rows skipped for a NULL
    time or type, and pattern types no row had (a misspelled type matches nothing, and
    its query returns no rows).

    Rows are counted as they arrive, once each (slices evaluate some rows twice).  The
    types are looked at only until every pattern type has been seen.
    """

    pattern_types: tuple[str, ...]
    type_column: str | None
    time_column: str
    rows: int = 0
    null_time: int = 0
    null_type: int = 0
    seen: set[str] = dataclasses.field(default_factory=set)

    @classmethod
    def of(cls, result: CograAnalyzeResult) -> "TaskReport":
        return cls(cogra.parse(result.query).event_types, result.type_column or "type", result.time_column)

    def read(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Count one arriving batch (the pushed filter applied); returns it."""
        n = batch.num_rows
        if not n:
            return batch
        self.rows += n
        names = batch.schema.names
        time = batch.column(names.index(self.time_column)) if self.time_column in names else None
        valid = None
        if time is not None and (time.null_count or pa.types.is_floating(time.type)):
            valid = pc.is_valid(time)
            if pa.types.is_floating(time.type):
                valid = pc.and_(valid, pc.fill_null(pc.is_finite(time), False))
            self.null_time += n - pc.sum(valid).as_py()
        kind = batch.column(names.index(self.type_column)) if self.type_column in names else None
        if kind is not None and kind.null_count:
            missing = pc.is_null(kind)
            self.null_type += pc.sum(missing if valid is None else pc.and_(missing, valid)).as_py()
        if kind is not None and len(self.seen) < len(self.pattern_types):
            self.seen.update(t for t in pc.unique(kind).to_pylist() if t in self.pattern_types)
        return batch

    def send(self, accumulator_id: int | None) -> None:
        """Hand the report to PySpark's worker, which sends a task's accumulator updates to
        the JVM when the task ends (``pyspark.worker_util.send_accumulator_updates``)."""
        if accumulator_id is None:
            return
        from pyspark.accumulators import _deserialize_accumulator

        report = {"rows": self.rows, "null_time": self.null_time, "null_type": self.null_type,
                  "pattern_types": list(self.pattern_types),
                  "seen_types": sorted(self.seen) if self.type_column else list(self.pattern_types)}
        _deserialize_accumulator(int(accumulator_id), json.dumps(report), None)


class _Evaluator:
    """Evaluates batches of one or more complete key groups with :func:`cogra.evaluate`;
    each call's rows and time go to ``pace`` (when given).

    ``partition_keys``: the columns of a user's ``PARTITION BY``, evaluated as plain keys
    (:func:`with_partition_keys`)."""

    def __init__(self, result: CograAnalyzeResult, on_overflow: str,
                 partition_keys: Sequence[str] = (), pace: SlicePace | None = None,
                 reported: bool = False, max_windows_per_event: int = cogra.MAX_WINDOWS_PER_EVENT):
        """``reported``: skipped rows go into a :class:`TaskReport` rather than a warning
        on the worker's stderr, which no user reads."""
        self.result = result
        self.reported = reported
        self.max_windows_per_event = max_windows_per_event
        self.query = with_partition_keys(result.query, partition_keys)
        self.on_overflow = on_overflow
        self.drop = {FILTER_ALIAS, EVENT_TIME_ALIAS, IDENTITY_ALIAS}
        self.target = _target_schema(result)
        self.pace = pace

    def prepare(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Apply the pushed-down filter if it arrived as a column (plain UDTF route)."""
        names = batch.schema.names
        if FILTER_ALIAS in names:
            keep = pc.fill_null(batch.column(names.index(FILTER_ALIAS)), False)
            batch = batch.filter(keep)
        return batch

    def trim(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Drop the columns the engine must not see (the filter flag)."""
        extra = [n for n in batch.schema.names if n in self.drop]
        return batch.drop_columns(extra) if extra else batch

    def evaluate(self, batches: Sequence[pa.RecordBatch],
                 select: Callable[[pa.Table], pa.Table] | None = None) -> Iterator[pa.RecordBatch]:
        """The result rows of ``batches`` (those ``select`` keeps of the engine's result)."""
        batches = [b for b in batches if b.num_rows]
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        extra = [n for n in table.column_names if n in self.drop]
        if extra:
            table = table.drop_columns(extra)
        started = time.perf_counter()
        with warnings.catch_warnings():
            if self.reported:
                warnings.simplefilter("ignore", CograDataWarning)
            out = cogra.evaluate(
                self.query,
                table,
                type_column=self.result.type_column,
                time_column=self.result.time_column,
                on_overflow=self.on_overflow,
                max_windows_per_event=self.max_windows_per_event,
            )
        if self.pace is not None:
            self.pace.record(table.num_rows, time.perf_counter() - started)
        if select is not None:
            out = select(out)
        if out.num_rows:
            yield from _conform(out, self.target).to_batches()


def _equal_neighbours(col: pa.Array) -> Any:
    """numpy bool array: row i+1 has the same key value as row i (NULL equals NULL, NaN NaN)."""
    import numpy as np

    n = len(col)
    a, b = col.slice(0, n - 1), col.slice(1)
    try:
        eq = pc.equal(a, b)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, TypeError):
        left, right = a.to_pylist(), b.to_pylist()
        return np.fromiter((x == y for x, y in zip(left, right)), dtype=bool, count=n - 1)
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    eq = pc.or_(pc.fill_null(eq, False), both_null)
    if pa.types.is_floating(col.type):
        both_nan = pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False)
        eq = pc.or_(eq, both_nan)
    return eq.to_numpy(zero_copy_only=False)


def _compare_keys(a: pa.Table, b: pa.Table, names: Sequence[str]) -> Any:
    """Per row, -1, 0 or 1 as the key of ``a`` sorts before, with or after that of ``b``
    in Spark's ascending order (NULL first, NaN last, -0.0 = 0.0, strings by their
    UTF-8 bytes); None where a key's type has no order Arrow can compare."""
    import numpy as np

    result = np.zeros(a.num_rows, np.int8)
    for name in names:
        x, y = a.column(name).combine_chunks(), b.column(name).combine_chunks()
        try:
            less = pc.fill_null(pc.less(x, y), False).to_numpy(zero_copy_only=False)
            greater = pc.fill_null(pc.greater(x, y), False).to_numpy(zero_copy_only=False)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, TypeError):
            return None
        cmp = less.astype(np.int8) * -1 + greater.astype(np.int8)
        x_null = x.is_null().to_numpy(zero_copy_only=False)
        y_null = y.is_null().to_numpy(zero_copy_only=False)
        if pa.types.is_floating(x.type):
            x_nan = pc.fill_null(pc.is_nan(x), False).to_numpy(zero_copy_only=False)
            y_nan = pc.fill_null(pc.is_nan(y), False).to_numpy(zero_copy_only=False)
            cmp = np.where(x_nan & ~y_nan & ~y_null, 1, np.where(y_nan & ~x_nan & ~x_null, -1, cmp))
        cmp = np.where(x_null & ~y_null, -1, np.where(y_null & ~x_null, 1, cmp))
        result = np.where(result == 0, cmp, result).astype(np.int8)
    return result


class _ChunkedEvaluator:
    """Streams one Spark partition, sorted by its key columns, through the engine.

    Rows arrive grouped by key (the shim sorts each partition by keys, then time). Batches
    are buffered until at least CHUNK_ROWS rows of complete key groups are held; those
    groups are evaluated together and their result rows emitted, the rest is kept.

    Chunks are small so that the engine works on one while the JVM encodes the next
    batches into the socket (a task's JVM side waits for Python only on its last chunk):
    with 32k-row chunks instead of 131k, MATCH_TREND's time on one core fell 4.5-12%
    (q1 4.5%, q1 tumbling 5.5%, q3 6%, q2 7%, q2 tumbling 12%: medians of five to eight
    interleaved runs in one Spark session).  8k-row chunks were no better: there the
    engine's per-call costs start to show.

    Under integral windows (``slices``) a key group need not be complete: once its open
    rows reach ``slice_rows`` (or the evaluator's pace's, :class:`SlicePace`), the windows
    complete by its last row are evaluated and the rows no later window needs are dropped
    (:mod:`cogra.runtime.slices`).  Memory is then bounded by CHUNK_ROWS plus two windows'
    rows of one group; without windows, by CHUNK_ROWS plus the largest key group.
    """

    def __init__(self, evaluator: _Evaluator, key_columns: Sequence[str],
                 chunk_rows: int = CHUNK_ROWS, slices: WindowSlices | None = None,
                 slice_rows: int = SLICE_ROWS, max_group_rows: int = MAX_GROUP_ROWS):
        self.evaluator = evaluator
        self.max_group_rows = max_group_rows
        self.keys = list(key_columns)
        self.chunk_rows = chunk_rows
        self.slices = slices
        self.fixed_slice_rows = slice_rows
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        self.last_keys: pa.RecordBatch | None = None
        self.group_starts: list[int] = []
        """Offsets (in the pending rows) where a key group starts, after the first."""
        self.emitted_before: int | None = None
        """The first pending group's windows that start before this were emitted (sliced)."""
        self.slice_at = self.slice_rows
        """Open-group rows at which to try the next slice."""

    @property
    def slice_rows(self) -> int:
        pace = self.evaluator.pace
        return self.fixed_slice_rows if pace is None else pace.slice_rows()

    def _boundaries(self, batch: pa.RecordBatch) -> Any:
        """Offsets in ``batch`` where a new key group starts (0 = at its first row)."""
        import numpy as np

        keys = pa.RecordBatch.from_arrays([batch.column(k) for k in self.keys], names=self.keys)
        if self.last_keys is not None:
            table = pa.Table.from_batches([self.last_keys, keys]).combine_chunks()
            offset = 1
        else:
            table = pa.Table.from_batches([keys]).combine_chunks()
            offset = 0
        self.last_keys = keys.slice(keys.num_rows - 1, 1)
        if table.num_rows < 2:
            return np.empty(0, dtype=np.int64)
        same = np.ones(table.num_rows - 1, dtype=bool)
        for name in self.keys:
            same &= _equal_neighbours(table.column(name).combine_chunks())
        starts = np.flatnonzero(~same) + 1
        self._check_grouped(table, starts)
        return starts - offset

    def _check_grouped(self, keys: pa.Table, starts: Any) -> None:
        """Each group must follow the one before it in the plan's sort order (ascending,
        NULL first): then no key comes back, and the chunks hold complete groups.  A
        group that came back would be evaluated in two parts -- a wrong result -- so it
        is an error instead.  O(1) memory: the order is checked at the boundaries."""
        if not len(starts):
            return
        before, after = keys.take(pa.array(starts - 1)), keys.take(pa.array(starts))
        order = _compare_keys(before, after, self.keys)
        if order is not None and not bool(np.all(order < 0)):
            k = int(np.flatnonzero(order >= 0)[0])
            key = {name: after.column(name)[k].as_py() for name in self.keys}
            raise DataError(
                f"{FUNCTION_NAME}: the rows of key {key} do not follow their key's order "
                f"in the task's input; it must arrive sorted by {', '.join(self.keys)} "
                "(the plan sorts it so: was the plan changed?)")

    def feed(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        batch = self.evaluator.prepare(batch)
        if batch.num_rows == 0:
            return
        if self.keys:
            # (Never at offset 0: pending rows are kept until a batch follows them.)
            self.group_starts += [self.pending_rows + start for start in self._boundaries(batch).tolist()]
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        complete = self.group_starts[-1] if self.group_starts else 0
        open_rows = self.pending_rows - complete
        if open_rows > self.max_group_rows:
            self._too_large(batch)
        sliced = self.slices is not None and open_rows >= self.slice_at
        if complete >= self.chunk_rows or (sliced and complete):
            yield from self._complete_groups(complete)
        if sliced:
            yield from self._slice_open_group()

    def _too_large(self, batch: pa.RecordBatch) -> None:
        """The open group holds more rows than a worker may (it is evaluated whole: no
        WITHIN, or windows too long to slice it by)."""
        key = {k: batch.column(k)[batch.num_rows - 1].as_py() for k in self.keys}
        where = f"key group {key}" if key else "the input (one group: the query has no plain key)"
        raise DataError(
            f"{FUNCTION_NAME}: {where} holds more than {self.max_group_rows:,} rows, which this "
            "query evaluates at once (no WITHIN, or windows too long to evaluate it slice by "
            "slice); split it -- GROUP-BY or [attr] on a further attribute, PARTITION BY, a "
            f"WITHIN -- or raise the limit (SET {GROUP_ROWS_SETTING}=N)")

    def _take(self, rows: int) -> list[pa.RecordBatch]:
        """Remove and return the first ``rows`` pending rows."""
        table = pa.Table.from_batches(self.pending)
        head, rest = table.slice(0, rows), table.slice(rows)
        self.pending = rest.to_batches()
        self.pending_rows = rest.num_rows
        self.group_starts = [s - rows for s in self.group_starts if s > rows]
        return head.to_batches()

    def _complete_groups(self, rows: int) -> Iterator[pa.RecordBatch]:
        """Evaluate the complete key groups (the first ``rows`` pending rows)."""
        first_end = self.group_starts[0]
        head = self._take(rows)
        if self.emitted_before is not None:  # the first group was sliced: its remaining windows
            table = pa.Table.from_batches(head)
            yield from self.evaluator.evaluate(table.slice(0, first_end).to_batches(),
                                               self._windows_from(self.emitted_before, None))
            head = table.slice(first_end).to_batches()
            self.emitted_before = None
        yield from self.evaluator.evaluate(head)
        self.slice_at = self.slice_rows

    def _windows_from(self, first: int | None, last: int | None) -> Callable[[pa.Table], pa.Table]:
        """A result's rows whose window starts in ``[first, last]`` (None: unbounded)."""
        slices = self.slices
        assert slices is not None
        return lambda result: slices.window_filter(result, first, last)

    def _slice_open_group(self) -> Iterator[pa.RecordBatch]:
        """Evaluate the pending (one, open) group's windows complete by its last row, if
        that drops at least half of its rows; else try again at twice the rows."""
        import numpy as np

        assert self.slices is not None and not self.group_starts
        table = pa.Table.from_batches(self.pending)
        times = self.slices.times(table)
        if len(times) > 1 and not bool(np.all(times[1:] >= times[:-1])):
            # Slices cut a group by time: its rows must arrive in time order (the plan
            # sorts them so), else a slice would miss rows of the windows it emits.
            raise DataError(f"{FUNCTION_NAME}: a task's input is not in time order within its "
                            "key group (the plan sorts it so: was the plan changed?)")
        last = self.slices.last_complete_start(int(times[-1]))
        first = self.emitted_before
        after = last + self.slices.step  # later windows need the rows from here on
        keep_from = int(np.searchsorted(times, after, "left"))
        if (first is not None and last < first) or keep_from < table.num_rows // 2:
            self.slice_at = 2 * table.num_rows
            return
        needed = int(np.searchsorted(times, last + self.slices.size, "left"))
        yield from self.evaluator.evaluate(table.slice(0, needed).to_batches(), self._windows_from(first, last))
        rest = table.slice(keep_from)
        self.pending, self.pending_rows = rest.to_batches(), rest.num_rows
        self.emitted_before = after
        self.slice_at = self.pending_rows + self.slice_rows

    def finish(self) -> Iterator[pa.RecordBatch]:
        if self.group_starts or self.emitted_before is not None:
            self.group_starts.append(self.pending_rows)
            yield from self._complete_groups(self.pending_rows)
        else:
            pending, self.pending, self.pending_rows = self.pending, [], 0
            yield from self.evaluator.evaluate(pending)


_LOCAL_MASTER = re.compile(r"local(?:\[\s*(\*|\d+)\s*(?:,\s*\d+\s*)?\])?")
_LOCAL_CLUSTER_MASTER = re.compile(r"local-cluster\[\s*\d+\s*,\s*(\d+)\s*,\s*\d+\s*\]")


def task_slots(settings: dict | None, processors: int) -> int | None:
    """How many tasks one executor runs at once, from the session's settings (the shim's
    ``executor`` option: ``master``, ``executor_cores``, ``task_cpus``, strings or None),
    ``processors`` being the executor machine's; None where the settings do not say (a
    cluster manager's default cores) or cannot be read."""
    if not settings:
        return None
    master = (settings.get("master") or "").strip()
    try:
        local = _LOCAL_MASTER.fullmatch(master)
        cluster = _LOCAL_CLUSTER_MASTER.fullmatch(master)
        if local:
            cores = processors if local.group(1) == "*" else int(local.group(1) or 1)
        elif cluster:
            cores = int(cluster.group(1))
        elif settings.get("executor_cores"):
            cores = int(settings["executor_cores"])
        else:
            return None
        cpus = int(settings.get("task_cpus") or 1)
    except ValueError:
        return None
    return max(1, cores // max(1, cpus))


def available_processors() -> int:
    """The processors this worker may run on (its affinity, where the OS tells)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def slice_rows_for(settings: dict | None, processors: int | None = None) -> int:
    """:data:`SPARE_PROCESSOR_SLICE_ROWS` where every task an executor runs at once has a
    second processor (``local[1]`` on two, or ``spark.task.cpus=2``), else
    :data:`SLICE_ROWS`: overlapping the engine with the JVM pays only with a processor
    for each."""
    processors = processors or available_processors()
    slots = task_slots(settings, processors)
    return SPARE_PROCESSOR_SLICE_ROWS if slots is not None and processors >= 2 * slots else SLICE_ROWS


class Route(Enum):
    """How a task's Python worker evaluates its partition (docs/ARCHITECTURE.md, "The
    worker's routes", lists what each assumes of its input)."""

    STREAMED = "streamed"
    """Batches pushed through :class:`cogra.runtime.stream.StreamEvaluation`: memory is the
    open windows' states."""
    CHUNKED = "chunked"
    """Complete key groups, several per engine call (:class:`_ChunkedEvaluator`)."""
    SLICED = "sliced"
    """As chunked, and a group that grows past the slice size is evaluated a time slice
    at a time (:mod:`cogra.runtime.slices`)."""


ROUTE_SETTING = "spark.cogra.worker.route"
SLICE_ROWS_SETTING = "spark.cogra.worker.sliceRows"
CHUNK_ROWS_SETTING = "spark.cogra.worker.chunkRows"
GROUP_ROWS_SETTING = "spark.cogra.worker.maxGroupRows"
WINDOWS_SETTING = "spark.cogra.maxWindowsPerEvent"


@dataclass(frozen=True)
class WorkerSettings:
    """The session's ``spark.cogra.worker.*`` settings, as the shim hands them over.

    ``route``: ``auto`` (stream where the query allows it and streaming pays: tumbling
    windows, no float SUM/AVG; else chunks, slicing a large group under integral windows),
    ``streamed`` (stream wherever the query allows it), ``chunked`` (whole groups, never
    sliced) or ``sliced`` (chunks, a group sliced from ``slice_rows`` rows on).
    ``slice_rows`` / ``chunk_rows``: rows at which an open group is sliced / complete
    groups are evaluated (None: the defaults, :data:`SLICE_ROWS`, :data:`CHUNK_ROWS`).
    ``max_group_rows`` / ``max_windows_per_event``: the limits past which a task fails
    with a DataError naming them, before memory runs out.
    """

    route: str = "auto"
    slice_rows: int | None = None
    chunk_rows: int = CHUNK_ROWS
    max_group_rows: int = MAX_GROUP_ROWS
    max_windows_per_event: int = cogra.MAX_WINDOWS_PER_EVENT

    ROUTES = ("auto", "streamed", "chunked", "sliced")

    @classmethod
    def of(cls, settings: dict[str, str] | None) -> "WorkerSettings":
        settings = settings or {}
        route = settings.get(ROUTE_SETTING, "auto").strip().lower()
        if route not in cls.ROUTES:
            raise ValueError(f"{ROUTE_SETTING} must be one of {', '.join(cls.ROUTES)}, not {route!r}")

        def rows(name: str) -> int | None:
            text = settings.get(name)
            if text is None:
                return None
            try:
                value = int(text)
            except ValueError:
                value = 0
            if value < 1:
                raise ValueError(f"{name} must be a positive number of rows, not {text!r}")
            return value

        return cls(route, rows(SLICE_ROWS_SETTING), rows(CHUNK_ROWS_SETTING) or CHUNK_ROWS,
                   rows(GROUP_ROWS_SETTING) or MAX_GROUP_ROWS,
                   rows(WINDOWS_SETTING) or cogra.MAX_WINDOWS_PER_EVENT)


def partition_route(result: CograAnalyzeResult, query: str | Query, schema: pa.Schema,
                    settings: WorkerSettings, sorted_by: Sequence[str] = (),
                    on_overflow: str = "error") -> tuple[Route, Any]:
    """(the route for a partition whose batches have ``schema``, its StreamEvaluation when
    streamed).  ``query``: what the engine evaluates (:func:`with_partition_keys`);
    ``sorted_by``: the columns the shim sorted the partition by, before time."""
    from cogra.runtime.slices import WindowSlices
    from cogra.runtime.stream import StreamEvaluation, unsupported_reason

    if settings.route in ("auto", "streamed") and streaming_enabled():
        p = cogra.plan(query, schema, type_column=result.type_column, time_column=result.time_column)
        if (settings.route == "streamed" or _streaming_pays(p)) and unsupported_reason(p) is None:
            keys = tuple(_resolve(c, p.bound.plain_keys) for c in sorted_by)
            return Route.STREAMED, StreamEvaluation(p, schema, on_overflow=on_overflow, sorted_by=keys)
    if settings.route != "chunked" and WindowSlices.of(
            result.query, schema, _resolve(result.time_column, schema.names)) is not None:
        return Route.SLICED, None
    return Route.CHUNKED, None


def _streaming_pays(p: Any) -> bool:
    """Whether streaming is the better route where the query allows it: its windows tumble
    (the chunked route shares the panes of sliding windows, many times faster), and no
    input value can stop the stream half-way (:func:`~cogra.runtime.stream.values_may_stop`;
    the chunked route evaluates those values exactly)."""
    from cogra.runtime.stream import values_may_stop

    if values_may_stop(p):
        return False
    window = p.bound.query.window
    return window is None or window.step == window.size


def make_map_function(analyze_result: bytes, options: str):
    r"""The per-partition function of the shim's MapInArrow (built by the JVM, see
    ``MatchTrend.scala``): ``analyze_result`` is the pickled :class:`CograAnalyzeResult`,
    ``options`` a JSON object with ``user_keys`` (columns the shim added for a PARTITION BY
    written in the query), ``on_overflow``, ``executor`` (see :func:`task_slots`),
    ``settings`` (the session's ``spark.cogra.*``, see :class:`WorkerSettings`) and
    ``diagnostics`` (the id of the accumulator that collects :class:`TaskReport`\ s)."""
    result = pickle.loads(analyze_result)
    if not isinstance(result, CograAnalyzeResult):
        raise TypeError(f"{FUNCTION_NAME}: unexpected analyze result {type(result).__name__}")
    opts = json.loads(options)
    user_keys = list(opts.get("user_keys", ()))
    on_overflow = opts.get("on_overflow", "error")
    settings = WorkerSettings.of(opts.get("settings"))
    report_id = opts.get("diagnostics")
    slice_rows = settings.slice_rows or slice_rows_for(opts.get("executor"))
    pace = (slice_pace(result.query, slice_rows, SLICE_ROWS)
            if slice_rows < SLICE_ROWS and settings.slice_rows is None else None)
    keys = [*user_keys, *result.key_columns]

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        try:
            yield from evaluate_partition(batches)
        except CograError:
            report_without_traceback()
            raise

    def evaluate_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        start_task()
        evaluator = _Evaluator(result, on_overflow, partition_keys=user_keys, pace=pace,
                               reported=report_id is not None,
                               max_windows_per_event=settings.max_windows_per_event)
        cogra.api.check_windows_per_event(cogra.parse(result.query), settings.max_windows_per_event)
        report = TaskReport.of(result)
        it = map(report.read, map(evaluator.prepare, iter(batches)))
        yield from evaluate_rows(evaluator, it)
        report.send(report_id)

    def evaluate_rows(evaluator: _Evaluator, it: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        first = next((b for b in it if b.num_rows), None)
        if first is None:
            return
        first = evaluator.trim(first)
        route, stream = partition_route(result, evaluator.query, first.schema, settings,
                                        sorted_by=keys, on_overflow=on_overflow)
        if route is Route.STREAMED:
            yield from _run_stream(evaluator, stream, first, it, settings.chunk_rows)
            return
        slices = None
        if route is Route.SLICED:
            from cogra.runtime.slices import WindowSlices

            slices = WindowSlices.of(result.query, first.schema, _resolve(result.time_column, first.schema.names))
        chunks = _ChunkedEvaluator(evaluator, keys, chunk_rows=settings.chunk_rows, slices=slices,
                                   slice_rows=slice_rows, max_group_rows=settings.max_group_rows)
        for batch in itertools.chain([first], it):
            yield from chunks.feed(batch)
        yield from chunks.finish()

    return run


def report_without_traceback() -> None:
    """Have PySpark report the exception being raised by its message alone.

    PySpark's worker sends an exception's traceback (~600 characters of cogra's frames)
    before its message, so a Spark user's first lines would be frames; a cogra error's
    message names the problem and the fix itself.  ``SPARK_HIDE_TRACEBACK`` is read when
    the worker formats the exception, and the worker exits right after reporting it
    (``pyspark.worker.main``), so no other task's error loses its traceback.
    """
    os.environ["SPARK_HIDE_TRACEBACK"] = "1"


def start_task() -> None:
    """What a task does first in a (reused) Python worker, on either route: freeze the
    live objects out of the per-task garbage collection and keep the heap the previous
    task freed (:func:`cogra.spark.worker_heap.retain_freed_memory`, once per process)."""
    freeze_live_objects()
    retain_freed_memory()


def freeze_live_objects() -> None:
    """Move every object alive now out of the cyclic garbage collector's sight (``gc.freeze``).

    PySpark's daemon runs a full ``gc.collect()`` after every task of a reused Python
    worker.  A worker that has imported cogra, numba and pyarrow holds ~175k tracked
    objects, and traversing them was half of the worker's CPU time on q2 (2M rows, 8
    partitions; perf: ``gc_collect_main`` and its visitors ~50%) -- an identity
    ``mapInArrow`` worker holds far fewer.  Called when a task starts: a collection first
    (cheap after the first task: it traverses only what was created since the last
    freeze), so that what is frozen is live -- modules, compiled kernels, caches -- and
    never garbage, also where no daemon collected just before (workers that are not
    forked, tests); objects the task creates are collected as before.
    """
    gc.collect()
    gc.freeze()


STREAMING_ENV = "COGRA_SPARK_STREAMING"


def streaming_enabled() -> bool:
    """Whether partitions may stream (default yes; ``COGRA_SPARK_STREAMING=0`` in the
    executors' environment, e.g. ``spark.executorEnv.COGRA_SPARK_STREAMING=0``, turns it off).

    Streaming bounds a task's memory by the open windows instead of the largest key group
    (a skewed key cannot exhaust a worker); its Python costs more per row than the chunked
    route (1M rows of q2 tumbling in 10k-row batches: 0.23 s vs 0.11 s), which stays well
    below Spark's own cost per row (MATCH_TREND rows/s were equal in both routes)."""
    return os.environ.get(STREAMING_ENV, "1") != "0"


def _run_stream(evaluator: _Evaluator, stream: Any, first: pa.RecordBatch,
                batches: Iterator[pa.RecordBatch], chunk_rows: int = CHUNK_ROWS) -> Iterator[pa.RecordBatch]:
    """Push the partition in chunks of about ``chunk_rows`` rows (Spark's Arrow batches are
    small; each push runs the engine once): memory is one chunk plus the open windows."""
    pending, rows = [first], first.num_rows
    for batch in batches:
        batch = evaluator.trim(evaluator.prepare(batch))
        if not batch.num_rows:
            continue
        pending.append(batch)
        rows += batch.num_rows
        if rows >= chunk_rows:
            stream.push(pa.Table.from_batches(pending))
            pending, rows = [], 0
    if pending:
        stream.push(pa.Table.from_batches(pending))
    out = stream.finish()
    if out.num_rows:
        yield from _conform(out, evaluator.target).to_batches()


# ---------------------------------------------------------------------------
# the handler class
# ---------------------------------------------------------------------------


class MatchTrendUDTF:
    """``MATCH_TREND(TABLE(t), query [, type_column] [, time_column])``.

    Spark's analyzer calls :meth:`analyze`; with the JVM shim the evaluation then runs in
    :func:`make_map_function`'s function, as a plain (Arrow) Python UDTF it runs here: one
    instance per partition of the plain keys, fed Arrow batches in time order.
    """

    #: What a value that does not fit its output type becomes ("error": ANSI mode).
    on_overflow = "error"

    def __init__(self, analyze_result: CograAnalyzeResult | None = None):
        if analyze_result is None:
            raise RuntimeError(f"{FUNCTION_NAME} must be analyzed before it is evaluated")
        start_task()
        self._evaluator = _Evaluator(analyze_result, self.on_overflow)
        self._batches: list[pa.RecordBatch] = []

    @staticmethod
    def analyze(
        input: AnalyzeArgument,
        query: AnalyzeArgument | None = None,
        type_column: AnalyzeArgument | None = None,
        time_column: AnalyzeArgument | None = None,
        watermark: AnalyzeArgument | None = None,
        stream: AnalyzeArgument | None = None,
    ) -> AnalyzeResult:
        return analyze_call(input, query, type_column, time_column, watermark, stream)

    def eval(self, input: pa.RecordBatch, query: Any = None, type_column: Any = None,
             time_column: Any = None, watermark: Any = None, stream: Any = None) -> Iterator[pa.Table]:
        batch = self._evaluator.prepare(input)
        if batch.num_rows:
            self._batches.append(batch)
        return iter(())

    def terminate(self) -> Iterator[pa.RecordBatch]:
        batches, self._batches = self._batches, []
        try:
            yield from self._evaluator.evaluate(batches)
        except CograError:
            report_without_traceback()
            raise


class MatchTrendNullOnOverflowUDTF(MatchTrendUDTF):
    """As :class:`MatchTrendUDTF`, but an aggregate that does not fit becomes NULL (non-ANSI)."""

    on_overflow = "null"
