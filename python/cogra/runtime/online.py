"""Online evaluation (docs/language.md, Streams): events arrive in batches, in any order
within the watermark's delay; each (window, group) row is emitted once, when the
event-time watermark has passed the window's end; late events are counted, never matched.

:class:`OnlineEvaluation` keeps the events later than the watermark (*pending*: more of
their time may come, and out of order).  When the watermark advances to ``W``, the events
at or before ``W`` are final and every window ending by ``W`` is complete.  What happens
to the final events depends on the query -- its *state kind*:

* ``carried`` -- type- and pattern-grained queries without variable keys or values that
  could stop the kernels (:func:`~cogra.runtime.stream.unsupported_reason`,
  :func:`~cogra.runtime.stream.values_may_stop`): the final events go through the
  compiled kernels, which continue each open window's aggregate state
  (:meth:`StreamEvaluation.settle`); the events are then dropped.  Memory: the open
  windows' states and the pending events.
* ``held`` -- every other query (mixed-grained patterns, variable keys as in q3, float
  SUM/AVG): the events an open window still needs are held, and the complete windows are
  evaluated by the batch engine from them (each window depends on its own events only,
  docs/language.md, Windows, as in :mod:`cogra.runtime.slices`).  Memory: the open windows'
  events and the pending ones.  The price is the overlap: an event is evaluated again at
  each advance while its windows are open (``WITHIN / SLIDE`` times at most).

Both emit exactly the rows :func:`cogra.evaluate` gives the on-time events.  The state
is a few numbers, the held or pending rows and, carried, the windows' states;
:meth:`OnlineEvaluation.snapshot` writes it as bytes and :meth:`OnlineEvaluation.restore`
reads it back, so a stream restarted from a checkpoint continues exactly where it stopped.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import itertools
import json
import pickle
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pyarrow as pa

from cogra.analysis.identity import query_identity
from cogra.errors import CheckpointError, CograDataWarning, DataError, QueryError
from cogra.language.ast import Query
from cogra.language.limits import with_recursion_room
from cogra.runtime.evaluation import (MAX_WINDOWS_PER_EVENT, check_windows_per_event, evaluate_table, plan,
                                      require_window, result_schema)
from cogra.runtime.output import ON_OVERFLOW
from cogra.runtime.slices import NULL_TIME, WindowSlices
from cogra.runtime.stream import StreamEvaluation, unsupported_reason, values_may_stop

SNAPSHOT_FORMAT = 3
SNAPSHOT_IPC = pa.ipc.IpcWriteOptions(compression="zstd")
READABLE_FORMATS = (2, 3)  # 2: without the query's identity
STATE_KINDS = ("auto", "carried", "held")


def state_kind(p: Any) -> str:
    """``carried`` where the kernels can continue the open windows' states, else ``held``
    (see the module docstring)."""
    return "carried" if unsupported_reason(p) is None and not values_may_stop(p) else "held"


@dataclass
class OnlineState:
    """What an online evaluation carries from batch to batch (and into a snapshot)."""

    held: pa.Table | None = None
    """Rows not evaluated for good: later than the watermark (pending) and, for the
    ``held`` kind, those an open window needs."""
    watermark: int | None = None
    """Times at or below it are final (seconds, or microseconds for timestamps)."""
    max_time: int | None = None
    """The largest time seen (the default watermark is this minus the delay)."""
    emitted_before: int | None = None
    """``held``: windows starting before this were emitted (None: none yet)."""
    counters: dict[str, int] = field(default_factory=lambda: {
        "rows_in": 0, "rows_late": 0, "rows_null_time": 0, "rows_null_type": 0, "windows_emitted": 0})
    extra: dict[str, Any] = field(default_factory=dict)
    """What the evaluation's driver keeps with the state (JSON values): e.g. the event-time
    timer a Spark operator has set for the group."""


class OnlineEvaluation:
    """One query over an unbounded stream of record batches.

    ``push(batch)`` takes events (those at or below the watermark are late: counted in
    ``counters["rows_late"]`` and dropped, or a DataError with ``late="error"``);
    ``advance(watermark)`` moves the watermark (by default to the largest time seen minus
    ``delay``) and returns the rows of the windows that closed, as :func:`cogra.evaluate`
    gives them; ``finish()`` closes the rest (a bounded stream's end); ``snapshot()`` /
    ``restore()`` carry the state over a restart.  ``delay`` is in the query's time units
    as a duration: seconds for numeric times, and for timestamps too (converted to µs, the
    unit times of timestamps and of double seconds are read in, as is ``watermark``).
    ``states`` forces the state kind (``auto``: :func:`state_kind`).  ``bounded``: the
    stream ends (:func:`cogra.evaluate_batches`), so a query without WITHIN -- one window,
    emitted by ``finish()`` -- is allowed.  ``early``: :meth:`early` gives the open windows'
    current rows (Update mode).  ``journal``: the rows each push keeps are also listed for
    :meth:`take_journal`, for a store that appends them instead of rewriting the held rows
    (:meth:`snapshot` without rows, :meth:`restore` with them).
    """

    def __init__(self, query: Any, schema: pa.Schema, *, type_column: str | None = None,
                 time_column: str = "time", delay: float = 0, on_overflow: str = "error",
                 max_windows_per_event: int | None = None, late: str = "count", states: str = "auto",
                 bounded: bool = False, early: bool = False, journal: bool = False):
        if late not in ("count", "error"):
            raise ValueError(f"late must be 'count' or 'error', not {late!r}")
        if states not in STATE_KINDS:
            raise ValueError(f"states must be one of {STATE_KINDS}, not {states!r}")
        self.plan = plan(query, schema, type_column=type_column, time_column=time_column)
        q = self.plan.bound.query
        self.windowed = q.window is not None
        if not bounded:
            require_window(q)
        limit = MAX_WINDOWS_PER_EVENT if max_windows_per_event is None else max_windows_per_event
        check_windows_per_event(q, limit)
        time_type = self.plan.bound.schema.field(self.plan.bound.time_column).type
        if self.windowed:
            self.slices = WindowSlices.of(q, schema, time_column, double_seconds=True)
            if self.slices is None:
                raise QueryError("a streaming query needs an integer, timestamp or double time column and "
                                 "window sizes of whole seconds (whole microseconds over timestamps and "
                                 "doubles): its windows close at exact times", q.text, q.window.span)
        elif pa.types.is_integer(time_type) or pa.types.is_timestamp(time_type) or pa.types.is_floating(time_type):
            # its times; no window closes before the end
            self.slices = WindowSlices(time_column, 0, 0, micros_of_seconds=pa.types.is_floating(time_type))
        else:
            raise QueryError(f"a stream needs an integer, timestamp or double time column, not {time_type}", q.text)
        self.query = q
        self.schema = schema
        self.type_column = type_column
        self.time_column = time_column
        self.on_overflow = on_overflow
        self.max_windows_per_event = limit
        self.late = late
        self.kind = state_kind(self.plan) if states == "auto" else states
        unit = 1_000_000 if pa.types.is_timestamp(time_type) or self.slices.micros_of_seconds else 1
        self.delay = int(round(delay * unit))
        self.state = OnlineState()
        self.carried = (StreamEvaluation(self.plan, schema, on_overflow=on_overflow)
                        if self.kind == "carried" else None)
        self.output_schema = result_schema(q, schema, type_column=type_column, time_column=time_column)
        self.identity = query_identity(q, schema, type_column=type_column, time_column=time_column).fingerprint()
        self.touched: list[np.ndarray] | None = [] if early else None
        """With ``early``: the times of the events pushed since the last :meth:`early` (not
        part of the state; None without it, so that a long stream keeps no list of times)."""
        self.journal: list[pa.Table] | None = [] if journal else None
        """With ``journal``: the rows pushes kept since the last :meth:`take_journal`."""

    @property
    def counters(self) -> dict[str, int]:
        return self.state.counters

    def held_from(self) -> int | None:
        """The held rows are exactly the rows pushed (and not late) whose time is at least
        this (None: all of them): ``carried`` settles every row at or before the watermark,
        ``held`` drops the rows of the windows emitted.  So a store may keep pushed rows in
        the order they came and drop them lazily: :meth:`restore` filters them."""
        st = self.state
        if self.carried is not None:
            return None if st.watermark is None else st.watermark + 1
        return st.emitted_before

    def take_journal(self) -> list[pa.Table]:
        """The rows pushes kept since the last call (needs ``journal=True``)."""
        if self.journal is None:
            raise ValueError("take_journal() needs an evaluation made with journal=True")
        rows, self.journal = self.journal, []
        return rows

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
        if n_late and self.late == "error":
            first = int(times[late][0])
            raise DataError(f"{n_late} event(s) arrive after the stream passed their time: time {first} "
                            f"after {st.max_time} (the stream may be out of time order by less than "
                            f"its delay, {self.delay})")
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
            if self.touched is not None:
                self.touched.append(times[keep])
            if self.journal is not None:
                self.journal.append(table)
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
        if self.carried is not None:
            return self._settle(watermark)
        if not self.windowed:
            return self.output_schema.empty_table()
        return self._emit(self.slices.last_complete_start(watermark))

    def finish(self) -> pa.Table:
        """The rows of every window still open (the end of a bounded stream)."""
        st = self.state
        if st.max_time is None:
            return self.output_schema.empty_table()
        if not self.windowed:
            return self._finish_unwindowed()
        last = st.max_time // self.slices.step * self.slices.step  # the last window holding an event
        watermark = max(st.watermark or last, last + self.slices.size)
        st.watermark = watermark
        return self._settle(watermark) if self.carried is not None else self._emit(last)

    def early(self) -> pa.Table:
        """Update mode (docs/language.md, Early results): the current rows of every
        open window that an event pushed since the last call falls in -- the rows batch
        evaluation gives over the on-time events received so far in that window.  The
        windows that closed are :meth:`advance`'s; the state does not change."""
        if self.touched is None:
            raise ValueError("early() needs an evaluation made with early=True")
        touched, self.touched = self.touched, []
        if not self.windowed or not touched or self.state.max_time is None:
            return self.output_schema.empty_table()
        times = np.unique(np.concatenate(touched))
        if not len(times):
            return self.output_schema.empty_table()
        probe = copy.copy(self)  # finishing a copy: its state and kernels' states are its own
        probe.state = dataclasses.replace(self.state, counters=dict(self.state.counters), extra={})
        probe.touched = []
        probe.journal = None
        if self.carried is not None:
            probe.carried = StreamEvaluation(self.plan, self.schema, on_overflow=self.on_overflow)
            probe.carried.load_state(self.carried.state())
        rows = probe.finish()
        if not rows.num_rows:
            return rows
        starts = self.slices.starts(rows)
        at = np.searchsorted(times, starts)  # the first touched time at or after each start
        hit = at < len(times)
        hit[hit] = times[at[hit]] < starts[hit] + self.slices.size
        return rows if hit.all() else rows.filter(pa.array(hit))

    def _finish_unwindowed(self) -> pa.Table:
        st = self.state
        st.watermark = st.max_time
        if self.carried is not None:
            self._settle(st.max_time)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CograDataWarning)
                return self._output(self.carried.finish())
        rows, st.held = st.held, None
        return self._output(self._evaluate(rows))

    def next_window_end(self) -> int | None:
        """The end of the earliest window not emitted yet that holds an event (None: no
        event is waiting): where an event-time timer should fire."""
        if not self.windowed:
            return None
        st = self.state
        ends = []
        if self.carried is not None:
            end = self.carried.next_window_end()
            if end is not None:
                ends.append(end)
        if st.held is not None and st.held.num_rows:
            size, step = self.slices.size, self.slices.step
            first = ((int(self.slices.times(st.held).min()) - size) // step + 1) * step
            if st.emitted_before is not None and self.carried is None:
                first = max(first, st.emitted_before)
            ends.append(first + size)
        return min(ends) if ends else None

    def _evaluate(self, rows: pa.Table) -> pa.Table:
        """``held``: the batch engine over held rows (their data warnings were counted
        when the rows were pushed)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CograDataWarning)
            return evaluate_table(self.query, rows, self.type_column, self.time_column, self.on_overflow, None,
                                  self.max_windows_per_event)

    def _output(self, result: pa.Table) -> pa.Table:
        out = result.replace_schema_metadata(None)
        self.state.counters["windows_emitted"] += out.num_rows
        return out

    def _settle(self, watermark: int) -> pa.Table:
        """``carried``: the final pending events into the kernels' states; the windows
        ending by ``watermark`` out."""
        st = self.state
        final = st.held
        if st.held is not None:
            times = self.slices.times(st.held)
            due = times <= watermark
            final = st.held.filter(pa.array(due)) if not due.all() else st.held
            st.held = None if due.all() else st.held.filter(pa.array(~due))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CograDataWarning)
            self.carried.settle(final if final is not None else self.schema.empty_table(), watermark)
            return self._output(self.carried.drain())

    def _emit(self, last: int) -> pa.Table:
        """``held``: evaluate the windows starting in ``[emitted_before, last]`` (all
        complete) and drop the rows no later window needs."""
        st = self.state
        first = st.emitted_before
        if st.held is None or (first is not None and last < first):
            return self.output_schema.empty_table()
        times = self.slices.times(st.held)
        needed = times < last + self.slices.size
        rows = st.held.filter(pa.array(needed)) if not needed.all() else st.held
        out = self.output_schema.empty_table()
        if rows.num_rows:
            out = self.slices.window_filter(self._evaluate(rows), first, last)
        after = last + self.slices.step  # later windows start here: they need no earlier row
        keep = times >= after
        st.held = st.held.filter(pa.array(keep)) if not keep.all() else st.held
        st.emitted_before = after
        return self._output(out)

    # -- checkpoints ---------------------------------------------------------------------
    def snapshot(self, rows: bool = True) -> bytes:
        """The state as bytes: a length-prefixed JSON header, the held rows as an Arrow IPC
        stream (none with ``rows=False``: a store keeps them apart, see ``journal``), and
        (``carried``) the kernels' window states."""
        st = self.state
        sink = io.BytesIO()
        held = st.held if st.held is not None and rows else self.schema.empty_table()
        # zstd: a state store writes (and a stream re-reads) every snapshot whole, per group
        # and micro-batch; held rows shrink ~4-6x for ~1 ms (IPC readers decompress as is).
        with pa.ipc.new_stream(sink, held.schema, options=SNAPSHOT_IPC) as writer:
            writer.write_table(held)
        rows = sink.getvalue()
        carried = b"" if self.carried is None else pickle.dumps(self.carried.state(), protocol=5)
        header = json.dumps({"format": SNAPSHOT_FORMAT, "identity": self.identity, "kind": self.kind, "watermark": st.watermark,
                             "max_time": st.max_time, "emitted_before": st.emitted_before,
                             "counters": st.counters, "extra": st.extra, "rows_bytes": len(rows)}).encode()
        return len(header).to_bytes(4, "big") + header + rows + carried

    def restore(self, data: bytes, rows: Iterable[pa.Table] = ()) -> None:
        """Continue from a :meth:`snapshot` of the same query over the same schema (the
        snapshot is trusted: it is the evaluation's own checkpoint).  A snapshot another
        query wrote (:mod:`cogra.analysis.identity`) is a :class:`CheckpointError`.
        ``rows``: the rows kept apart from a ``snapshot(rows=False)``, in the order they
        were pushed (older ones are dropped here, see :meth:`held_from`); with ``journal``,
        rows the snapshot itself held are journaled again, for the store to keep apart."""
        n = int.from_bytes(data[:4], "big")
        header = snapshot_header(data)
        if header.get("format") not in READABLE_FORMATS:
            raise ValueError(f"unknown snapshot format {header.get('format')!r}")
        stored = header.get("identity")
        if stored is not None and stored != self.identity:
            raise CheckpointError(
                "this state was written by another query (its identity "
                f"{stored} is not this query's {self.identity}: its pattern, semantics, "
                "window, keys, aggregates or input columns differ); a checkpoint continues only "
                "the query that wrote it: start the changed query from a new checkpoint")
        if header["kind"] != self.kind:
            raise ValueError(f"a snapshot of {header['kind']} states cannot continue as {self.kind}")
        start = 4 + n
        inline = pa.ipc.open_stream(data[start:start + header["rows_bytes"]]).read_all()
        self.state = OnlineState(None, header["watermark"], header["max_time"],
                                 header["emitted_before"], dict(header["counters"]), dict(header.get("extra", {})))
        if self.carried is not None:
            self.carried.load_state(pickle.loads(data[start + header["rows_bytes"]:]))
        parts = [t for t in itertools.chain([inline], rows) if t.num_rows]
        if parts:
            held = pa.concat_tables([t if t.schema.equals(self.schema) else t.cast(self.schema) for t in parts])
            since = self.held_from()
            if since is not None:
                keep = self.slices.times(held) >= since
                held = held if keep.all() else held.filter(pa.array(keep))
            self.state.held = held if held.num_rows else None
        if self.journal is not None:
            self.journal = [inline] if inline.num_rows else []



def snapshot_header(data: bytes) -> dict:
    """The JSON header of a :meth:`OnlineEvaluation.snapshot` (its rows and states unread)."""
    n = int.from_bytes(data[:4], "big")
    return json.loads(data[4:4 + n])


@with_recursion_room
def evaluate_batches(
    query: str | Query,
    batches: Iterable[Any],
    *,
    schema: pa.Schema | None = None,
    type_column: str | None = None,
    time_column: str = "time",
    delay: float = 0,
    on_overflow: str = "error",
    max_windows_per_event: int = MAX_WINDOWS_PER_EVENT,
) -> pa.Table:
    """Evaluate over a stream of record batches in time order, with memory bounded by the
    open windows (:class:`~cogra.runtime.online.OnlineEvaluation`, advanced after each
    batch; the rows of each window as it closes, concatenated): their aggregate states
    wherever the kernels can carry the query -- a value they cannot take (a float sum
    spanning more than 2**93, inf/NaN) is then a :class:`DataError` -- else their events.
    Without WITHIN the one window is the whole stream; integer, timestamp or double times.

    Events may come out of time order by up to ``delay`` (in the time column's units; for
    timestamps, seconds); an event later than that is a :class:`DataError`.  The result
    equals :func:`evaluate` over all the batches.
    """
    if on_overflow not in ON_OVERFLOW:
        raise ValueError(f"on_overflow must be one of {ON_OVERFLOW}, not {on_overflow!r}")
    it = iter(batches)
    first = None
    if schema is None:
        first = next(it, None)
        if first is None:
            raise ValueError("evaluate_batches needs a schema= when there are no batches")
        schema = first.schema
    # Carried wherever the kernels can carry the query, float sums included: the caller
    # asked for memory bounded by the windows' states, and a value that stops the kernels
    # (a float sum spanning 2**93, inf/NaN) is a DataError that says to use evaluate().
    # (A long-running OnlineEvaluation holds such queries instead: it must not stop.)
    kind = "carried" if unsupported_reason(plan(query, schema, type_column=type_column,
                                                time_column=time_column)) is None else "held"
    online = OnlineEvaluation(query, schema, type_column=type_column, time_column=time_column, delay=delay,
                              on_overflow=on_overflow, max_windows_per_event=max_windows_per_event,
                              late="error", bounded=True, states=kind)
    tie = 1  # events at the latest time may continue in the next batch: that time stays open
    parts = []
    for batch in itertools.chain([first] if first is not None else [], it):
        online.push(batch)
        if online.state.max_time is not None:
            parts.append(online.advance(online.state.max_time - online.delay - tie))
    parts.append(online.finish())
    counters = online.counters
    if counters["rows_null_time"] + counters["rows_null_type"]:
        warnings.warn(
            f"{counters['rows_null_time']} row(s) with a NULL time and "
            f"{counters['rows_null_type']} with a NULL type are not events and were skipped",
            CograDataWarning,
            stacklevel=2,
        )
    meta = {f"cogra.{k}": str(v) for k, v in counters.items() if k != "rows_late"}
    return pa.concat_tables(parts).replace_schema_metadata(meta)


__all__ = ["OnlineEvaluation", "OnlineState", "evaluate_batches", "require_window", "snapshot_header", "state_kind"]
