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

This module is the worker: the two entry points Spark names (the shim's
``PythonModule``) and the evaluation of a task's partition -- chunked, sliced or
streamed, with its task report.  ``analyze`` is :mod:`cogra.spark.udtf_analysis` (the
output schema, pushdown, partitioning; it imports no kernel module, as a driver's
analysis worker needs), and which route a partition takes, with the settings the shim
hands the tasks, is :mod:`cogra.spark.udtf_routing`.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import json
import os
import pickle
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.udtf import AnalyzeArgument, AnalyzeResult

import cogra
from cogra.errors import CograDataWarning, CograError, DataError, sql_value
from cogra.language.ast import AttrRef, Query, Span
from cogra.spark.udtf_analysis import (  # noqa: F401 - FUNCTION_NAME, sql_string: the names users import from here
    EVENT_TIME_ALIAS,
    FILTER_ALIAS,
    FUNCTION_NAME,
    IDENTITY_ALIAS,
    CograAnalyzeResult,
    _resolve,
    analyze_call,
    sql_string,
)
from cogra.spark.udtf_routing import (
    CHUNK_ROWS,
    GROUP_ROWS_SETTING,
    MAX_GROUP_ROWS,
    SLICE_ROWS,
    Route,
    WorkerSettings,
    partition_route,
    slice_rows_for,
)
from cogra.spark.worker_heap import retain_freed_memory

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


#: Where a task has a processor to spare, open groups are sliced from
#: ``udtf_routing.SPARE_PROCESSOR_SLICE_ROWS`` rows on, or more: as many rows as the engine
#: evaluates in about this long, a few times an engine call's fixed cost (:class:`SlicePace`).  q3 stays at 8k rows; q2's cheap rows
#: slice at ~15k (70 engine calls per 1M rides instead of 129, its engine time in process
#: 364 -> 308 ms), q1's at ~27k (75 calls per 2M rows instead of 204: 834 -> 333 ms).
#: ``local[1]``, medians of 12 interleaved runs: with 8 ms, q2 2-7% faster than in fixed
#: 8k-row slices but q1 5% slower (the finer slices' extra work ran on the spare
#: processor and overlapped more); 4 ms against 8 ms: q1 3% faster, q2 the same.
SLICE_SECONDS = 0.004


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
        key = ", ".join(f"{k} = {sql_value(batch.column(k)[batch.num_rows - 1].as_py())}" for k in self.keys)
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
