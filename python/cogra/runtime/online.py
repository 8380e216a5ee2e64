"""Online evaluation (SEMANTICS.md section 10): events arrive in batches, in any order
within the watermark's delay; each (window, group) row is emitted once, when the
event-time watermark has passed the window's end; late events are counted, never matched.

:class:`OnlineEvaluation` holds the events that are not yet *final* (later than the
watermark: more of their time may come, and out of order) and those an open window still
needs.  When the watermark advances to ``W``, every window ending by ``W`` is complete:
they are evaluated by the batch engine from the rows they hold (each window depends on
its own events only, SEMANTICS.md section 4, as in :mod:`cogra.runtime.slices`), and the
rows no later window needs are dropped.  So every query class the batch engine runs
streams -- mixed-grained patterns, variable keys, sliding windows, every aggregate --
with memory bounded by the events of the open windows and of the watermark's delay.  The
price is the overlap: an event is evaluated again at each advance while its windows are
open (``WITHIN / SLIDE`` times at most).

Why not the kernels' carried states (:mod:`cogra.runtime.stream`): they cover the type-
and pattern-grained executors without variable keys, and need each sub-stream in time
order, which a stream delivers only up to the watermark's delay.

The state is a few numbers and the held rows; :meth:`OnlineEvaluation.snapshot` writes it
as bytes (Arrow IPC with a JSON header) and :meth:`OnlineEvaluation.restore` reads it back,
so a stream restarted from a checkpoint continues exactly where it stopped.
"""

from __future__ import annotations

import io
import json
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cogra.api import MAX_WINDOWS_PER_EVENT, check_windows_per_event, evaluate, plan, result_schema
from cogra.errors import CograDataWarning, QueryError
from cogra.runtime.slices import NULL_TIME, WindowSlices

SNAPSHOT_FORMAT = 1


def require_window(q: Any) -> None:
    """A streamed query needs WITHIN (SEMANTICS.md section 10)."""
    if q.window is None:
        raise QueryError("a streaming query needs WITHIN: without it its one window never "
                         "closes, and nothing could ever be emitted", q.text, q.pattern.span)


@dataclass
class OnlineState:
    """What an online evaluation carries from batch to batch (and into a snapshot)."""

    held: pa.Table | None = None
    """Rows not yet evaluated for good: later than the watermark, or in an open window."""
    watermark: int | None = None
    """Times at or below it are final (seconds, or microseconds for timestamps)."""
    max_time: int | None = None
    """The largest time seen (the default watermark is this minus the delay)."""
    emitted_before: int | None = None
    """Windows starting before this were emitted (None: none yet)."""
    counters: dict[str, int] = field(default_factory=lambda: {
        "rows_in": 0, "rows_late": 0, "rows_null_time": 0, "rows_null_type": 0, "windows_emitted": 0})


class OnlineEvaluation:
    """One query over an unbounded stream of record batches.

    ``push(batch)`` takes events (those at or below the watermark are late: counted in
    ``counters["rows_late"]`` and dropped); ``advance(watermark)`` moves the watermark
    (by default to the largest time seen minus ``delay``) and returns the rows of the
    windows that closed, as :func:`cogra.evaluate` gives them; ``snapshot()`` /
    ``restore()`` carry the state over a restart.  ``delay`` is in the query's time units
    as a duration: seconds for numeric times, and for timestamps too (converted to µs).
    """

    def __init__(self, query: Any, schema: pa.Schema, *, type_column: str | None = None,
                 time_column: str = "time", delay: float = 0, on_overflow: str = "error",
                 max_windows_per_event: int | None = None):
        self.plan = plan(query, schema, type_column=type_column, time_column=time_column)
        q = self.plan.bound.query
        require_window(q)
        limit = MAX_WINDOWS_PER_EVENT if max_windows_per_event is None else max_windows_per_event
        check_windows_per_event(q, limit)
        self.slices = WindowSlices.of(q, schema, time_column)
        if self.slices is None:
            raise QueryError("a streaming query needs an integer or timestamp time column and "
                             "whole window sizes (its windows close at exact times)", q.text, q.window.span)
        self.query = q
        self.schema = schema
        self.type_column = type_column
        self.time_column = time_column
        self.on_overflow = on_overflow
        self.max_windows_per_event = limit
        unit = 1_000_000 if pa.types.is_timestamp(schema.field(time_column).type) else 1
        self.delay = int(round(delay * unit))
        self.state = OnlineState()
        self.output_schema = result_schema(q, schema, type_column=type_column, time_column=time_column)

    @property
    def counters(self) -> dict[str, int]:
        return self.state.counters

    # -- input ---------------------------------------------------------------------------
    def push(self, batch: pa.RecordBatch | pa.Table) -> int:
        """Take a batch of events; returns how many of them were late."""
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if not table.schema.equals(self.schema):
            table = table.select(self.schema.names).cast(self.schema)
        st = self.state
        st.counters["rows_in"] += table.num_rows
        if not table.num_rows:
            return 0
        times = self.slices.times(table)
        valid = times != NULL_TIME
        st.counters["rows_null_time"] += int((~valid).sum())
        late = valid & (times <= st.watermark) if st.watermark is not None else np.zeros(len(times), bool)
        n_late = int(late.sum())
        st.counters["rows_late"] += n_late
        keep = valid & ~late
        kind = self.plan.bound.type_column
        if kind is not None:  # rows without a type are no events either
            typed = table.column(kind).is_valid().to_numpy(zero_copy_only=False)
            st.counters["rows_null_type"] += int((keep & ~typed).sum())
            keep &= typed
        if n_late or not keep.all():
            table = table.filter(pa.array(keep))
        if table.num_rows:
            seen = int(times[keep].max())
            st.max_time = seen if st.max_time is None else max(st.max_time, seen)
            st.held = table if st.held is None else pa.concat_tables([st.held, table])
        return n_late

    # -- output --------------------------------------------------------------------------
    def advance(self, watermark: int | None = None) -> pa.Table:
        """Move the watermark to ``watermark`` (default: the largest time seen minus the
        delay; it never moves back) and return the rows of the windows that closed."""
        st = self.state
        if watermark is None:
            if st.max_time is None:
                return self.output_schema.empty_table()
            watermark = st.max_time - self.delay
        if st.watermark is not None and watermark <= st.watermark:
            return self.output_schema.empty_table()
        st.watermark = watermark
        return self._emit(self.slices.last_complete_start(watermark))

    def finish(self) -> pa.Table:
        """The rows of every window still open (the end of a bounded stream)."""
        st = self.state
        if st.max_time is None:
            return self.output_schema.empty_table()
        last = st.max_time // self.slices.step * self.slices.step  # the last window holding an event
        st.watermark = max(st.watermark or last, last + self.slices.size)
        return self._emit(last)

    def _emit(self, last: int) -> pa.Table:
        """Evaluate the windows starting in ``[emitted_before, last]`` (all complete) and
        drop the rows no later window needs."""
        st = self.state
        first = st.emitted_before
        if st.held is None or (first is not None and last < first):
            return self.output_schema.empty_table()
        times = self.slices.times(st.held)
        needed = times < last + self.slices.size
        rows = st.held.filter(pa.array(needed)) if not needed.all() else st.held
        out = self.output_schema.empty_table()
        if rows.num_rows:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CograDataWarning)
                result = evaluate(self.query, rows, type_column=self.type_column,
                                        time_column=self.time_column, on_overflow=self.on_overflow,
                                        max_windows_per_event=self.max_windows_per_event)
            out = self.slices.window_filter(result, first, last).replace_schema_metadata(None)
        st.counters["windows_emitted"] += out.num_rows
        after = last + self.slices.step  # later windows start here: they need no earlier row
        keep = times >= after
        st.held = st.held.filter(pa.array(keep)) if not keep.all() else st.held
        st.emitted_before = after
        return out

    # -- checkpoints ---------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """The state as bytes: a JSON header, then the held rows as an Arrow IPC stream."""
        st = self.state
        header = json.dumps({"format": SNAPSHOT_FORMAT, "watermark": st.watermark, "max_time": st.max_time,
                             "emitted_before": st.emitted_before, "counters": st.counters}).encode()
        sink = io.BytesIO()
        held = st.held if st.held is not None else self.schema.empty_table()
        with pa.ipc.new_stream(sink, held.schema) as writer:
            writer.write_table(held)
        return len(header).to_bytes(4, "big") + header + sink.getvalue()

    def restore(self, data: bytes) -> None:
        """Continue from a :meth:`snapshot` of the same query over the same schema."""
        n = int.from_bytes(data[:4], "big")
        header = json.loads(data[4:4 + n])
        if header.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(f"unknown snapshot format {header.get('format')!r}")
        held = pa.ipc.open_stream(data[4 + n:]).read_all()
        self.state = OnlineState(held if held.num_rows else None, header["watermark"], header["max_time"],
                                 header["emitted_before"], dict(header["counters"]))


__all__ = ["OnlineEvaluation", "OnlineState", "require_window"]
