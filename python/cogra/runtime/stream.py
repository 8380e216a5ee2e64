"""Streaming evaluation: record batches in, one result table out, with memory bounded by
the open windows' aggregate states -- not by the events per window.

:class:`StreamEvaluation` takes batches (``push``) and returns the result (``finish``);
:func:`cogra.evaluate_batches` wraps it.  The result equals :func:`cogra.evaluate` over the
concatenated batches.  Each batch goes through the ordinary :class:`Engine` (filters,
sub-streams, windows); what differs is that the compiled kernel *continues* each window
from the state the previous batches left (``kernels.run_windows_from``), and a window is
finalised, and its state dropped, once its sub-stream's events have passed its end.

What the stream must satisfy: the events of one sub-stream (one value of the plain keys,
``[attr]`` / GROUP-BY attr) arrive in time order across batches -- globally time-ordered
streams and Spark partitions sorted by key, then time, both do.  A key's rows at its
latest time so far are held back until the next batch (more events of that time may
follow, and ties must be processed together).  An earlier time arriving late is a
:class:`~cogra.errors.DataError` naming the key.

The kernels' encodings must not depend on data a batch has not seen yet, which decides
what streams (docs/design-next.md section 2):

* float sums are exact scaled integers ``x * 2**k``; ``k`` grows when a batch needs finer
  resolution, and the carried states' sum channels are multiplied by ``2**Δk`` (exact:
  sums are linear in x); every float sum is kept in two limbs;
* MIN/MAX keys must be order-preserving without a dictionary: numbers, timestamps,
  dates, booleans -- not strings;
* the engine's exact Python fallback needs a window's events, which are gone: a value the
  kernels cannot decide raises :class:`~cogra.runtime.fast.finish.UndecidableError`.

Anything else -- the mixed-grained executor (it keeps events), variable keys (a
sub-stream's membership depends on later values), fractional windows or float times,
decimals -- raises :class:`StreamingUnsupported` when the query is prepared, before any
data is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cogra.analysis.granularity import Executor
from cogra.errors import AggregateOverflowError, CograError, DataError
from cogra.runtime.aggregates import attribute_scales
from cogra.runtime.engine import Engine, key_codes, micros
from cogra.runtime.fast.channels import (
    MAX_KEY_IDENTITY,
    MIN_KEY_IDENTITY,
    KernelOut,
    Unsupported,
)
from cogra.runtime.windows import WindowSpec, is_integral

STREAMING_EXECUTORS = (Executor.TYPE_GRAINED, Executor.NEXT, Executor.CONTIGUOUS)
RENORMALIZE_ABOVE = 2.0**600
"""Carried float channels stay below this (as the kernels keep them)."""
TRIM_HEAP_ROWS = 65_536
"""After a batch of at least this many rows, hand freed heap pages back to the OS (glibc
``malloc_trim``): each batch allocates and frees its per-row arrays, and glibc otherwise
keeps the freed pages resident, so a long stream's RSS would creep up although its live
memory does not (measured: +45% RSS over 100 batches, flat with the trim).  0 disables."""


def _trim_heap() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


class StreamingUnsupported(CograError, NotImplementedError):
    """The query needs whole-table evaluation (the message says why)."""


@dataclass
class OpenWindow:
    """A window's carried kernel state: all ``nv + 1`` rows, floats times ``2**e``."""

    i: np.ndarray
    f: np.ndarray
    x: np.ndarray
    r: np.ndarray
    e: int
    group: tuple


class StreamEvaluation:
    """Evaluate one query over a stream of record batches (see the module docstring)."""

    def __init__(self, plan: Any, schema: pa.Schema, *, on_overflow: str = "error",
                 key_sorted: bool = False):
        """``key_sorted``: the stream comes sorted by the plain keys, then time (a Spark
        partition does): a key followed by another is complete, so its windows close and
        its bookkeeping is dropped at once."""
        self.key_sorted = key_sorted
        self.done_keys: set[tuple] = set()
        self.plan = plan
        self.schema = schema
        self.on_overflow = on_overflow
        b = plan.bound
        self.bound = b
        self._check_supported()
        self.window_size = None if b.query.window is None else int(WindowSpec.of(b.query.window, b.time_type).size)
        self.open: dict[tuple, dict[int, OpenWindow]] = {}
        self.last_time: dict[tuple, Any] = {}
        self.watermark: dict[tuple, Any] = {}
        self.held: pa.Table | None = None
        self.scales: dict[str, int] = {}
        self.closed: list[tuple[tuple, int, np.ndarray, np.ndarray, np.ndarray, int]] = []
        self.counters = {"rows_in": 0, "rows_null_time": 0, "rows_null_type": 0}
        self.stats = {"batches": 0, "windows_closed": 0, "max_open_windows": 0}
        self.ctx: Any = None
        self.chan: Any = None

    # -- what streams ------------------------------------------------------------------
    def _check_supported(self) -> None:
        b = self.bound
        why = None
        if self.plan.executor not in STREAMING_EXECUTORS or b.kept_variables:
            why = (f"the {self.plan.executor.value} executor keeps events (a predicate reads "
                   "an earlier event)")
        elif any(b.var_keys):
            why = "variable keys ([V.attr] or GROUP-BY V.attr) make sub-streams depend on later values"
        elif not is_integral(WindowSpec.of(b.query.window, b.time_type), b.time_type):
            why = "windows need an integer or timestamp time column and whole sizes"
        else:
            for slot in _slots(b):
                t = b.schema.field(slot.attribute).type
                if pa.types.is_decimal(t):
                    why = f"{slot.attribute} is a decimal"
                elif slot.kind in ("min", "max") and (pa.types.is_string(t) or pa.types.is_large_string(t)):
                    why = f"MIN/MAX of the string attribute {slot.attribute}"
        if why:
            raise StreamingUnsupported(f"this query cannot be evaluated as a stream: {why}; "
                                       "use cogra.evaluate on the whole table")

    # -- input -------------------------------------------------------------------------
    def push(self, batch: pa.RecordBatch | pa.Table) -> None:
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if table.schema.names != self.schema.names:
            raise DataError(f"batch columns {table.schema.names} differ from the stream's {self.schema.names}")
        if not table.schema.equals(self.schema):
            table = table.cast(self.schema)
        self.counters["rows_in"] += table.num_rows
        if not table.num_rows:
            return
        self._check_order(table)
        if self.held is not None and self.held.num_rows:
            table = pa.concat_tables([self.held, table])
        hold = self._latest_per_key(table)
        done: list[tuple] = []
        if self.key_sorted:
            # Only the last key can continue; every other key in here is complete.
            codes, keys = self._key_values(table)
            last = int(codes[-1])
            hold = pc.and_(hold, pa.array(codes == last))
            done = [k for c, k in enumerate(keys) if c != last]
        self.held = table.filter(hold)
        self._process(table.filter(pc.invert(hold)), final=False)
        for key in done:
            self._close_key(key)

    def _key_values(self, table: pa.Table) -> tuple[np.ndarray, list[tuple]]:
        codes, reps = key_codes(table, self.bound.plain_keys)
        if not self.bound.plain_keys:
            return codes, [()] * len(reps)
        cols = [table.column(k).take(pa.array(reps)).to_pylist() for k in self.bound.plain_keys]
        return codes, list(zip(*cols))

    def _valid_times(self, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """Times as the engine sees them (µs for timestamps), and which are not NULL."""
        col = table.column(self.bound.time_column).combine_chunks()
        valid = np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)
        if pa.types.is_timestamp(col.type):
            return micros(pc.fill_null(col, 0)), valid
        return np.asarray(pc.fill_null(col, 0).to_numpy(zero_copy_only=False), dtype=np.int64), valid

    def _check_order(self, table: pa.Table) -> None:
        times, valid = self._valid_times(table)
        codes, keys = self._key_values(table)
        big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
        first = np.full(len(keys), big, np.int64)
        latest = np.full(len(keys), small, np.int64)
        np.minimum.at(first, codes[valid], times[valid])
        np.maximum.at(latest, codes[valid], times[valid])
        for key, lo, hi in zip(keys, first.tolist(), latest.tolist()):
            if lo == big:
                continue  # only NULL times
            if key in self.done_keys:
                raise DataError(f"sub-stream {dict(zip(self.bound.plain_keys, key))} continues after "
                                "another key although the stream was declared sorted by key")
            last = self.last_time.get(key)
            if last is not None and lo < last:
                raise DataError(f"events of sub-stream {dict(zip(self.bound.plain_keys, key))} arrive out "
                                f"of time order across batches ({lo} after {last}); a stream must "
                                "bring each sub-stream's events in time order")
            self.last_time[key] = hi if last is None else max(hi, last)

    def _latest_per_key(self, table: pa.Table) -> pa.Array:
        """Rows at their key's latest time: more events of that time may follow."""
        times, valid = self._valid_times(table)
        codes, keys = self._key_values(table)
        latest = np.full(len(keys), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(latest, codes[valid], times[valid])
        for code, key in enumerate(keys):
            if latest[code] != np.iinfo(np.int64).min:
                self.watermark[key] = int(latest[code])
        return pa.array(valid & (times == latest[codes]))

    # -- evaluation ----------------------------------------------------------------------
    def _process(self, table: pa.Table, *, final: bool) -> None:
        self.stats["batches"] += 1
        if table.num_rows:
            self._run(table)
        self._close(final)

    def _run(self, table: pa.Table) -> None:
        from cogra.runtime.fast.executor import FastExecutor
        from cogra.runtime.fast.finish import Context
        from cogra.runtime.fast.kernels import run_windows_from

        engine = Engine(self.plan, table)
        for k in ("rows_null_time", "rows_null_type"):
            self.counters[k] += engine.counters[k]
        engine.idle_events_matter = self.plan.executor is Executor.CONTIGUOUS
        self._grow_scales(attribute_scales(engine.table, engine.layout.attributes))
        engine.__dict__["scales"] = dict(self.scales)  # the stream's scales, not this batch's
        try:
            fast = FastExecutor(engine, streaming=True)
        except Unsupported as why:
            raise StreamingUnsupported(f"this stream cannot be evaluated incrementally: {why}") from None
        if self.ctx is None:
            self.ctx = Context.of(engine, fast, self.window_size)
            self.chan = fast.chan
        subs = engine.substreams()
        wins = engine.window_ranges(subs)
        w = len(wins.seg)
        if not w:
            return
        nv, c = fast.nv, fast.chan
        st_i = np.zeros((w, nv + 1, max(1, c.n_i)), np.uint64)
        st_f = np.zeros((w, nv + 1, max(1, c.n_f)), np.float64)
        st_x = np.empty((w, nv + 1, c.n_x), np.int64)
        st_x[:] = np.where(c.x_is_min, MIN_KEY_IDENTITY, MAX_KEY_IDENTITY)
        st_r = np.zeros((w, nv + 1), np.bool_)
        st_e = np.zeros(w, np.int64)
        places = []
        for k, (s, start) in enumerate(zip(wins.seg.tolist(), wins.start.tolist())):
            key = subs.keys[s][0]
            windows = self.open.setdefault(key, {})
            ow = windows.get(start)
            if ow is None:
                ow = windows[start] = OpenWindow(st_i[k].copy(), st_f[k].copy(), st_x[k].copy(),
                                                 st_r[k].copy(), 0, subs.groups[s])
            else:
                st_i[k], st_f[k], st_x[k], st_r[k], st_e[k] = ow.i, ow.f, ow.x, ow.r, ow.e
            places.append(ow)
        rows = subs.rows
        times = engine.time_np[rows]
        run_windows_from(fast.mode, times, subs.bits, fast.pair_ok[rows], nv, fast.pred_ptr, fast.pred_idx,
                         fast.start_bits, fast.final_bits, c.program, fast.op_ptr, c.x_is_min,
                         fast.a_int, fast.a_flt, fast.a_valid, fast.a_key, rows,
                         wins.lo.astype(np.int64), wins.hi.astype(np.int64),
                         fast._max_batch(times, subs.bits), st_i, st_f, st_x, st_r, st_e)
        for k, ow in enumerate(places):
            ow.i, ow.f, ow.x, ow.r, ow.e = st_i[k].copy(), st_f[k].copy(), st_x[k].copy(), st_r[k].copy(), int(st_e[k])
        self.stats["max_open_windows"] = max(self.stats["max_open_windows"],
                                             sum(len(v) for v in self.open.values()))
        del engine, fast, subs, wins, st_i, st_f, st_x, st_r, st_e, rows, times
        if TRIM_HEAP_ROWS and table.num_rows >= TRIM_HEAP_ROWS:
            pa.default_memory_pool().release_unused()
            _trim_heap()

    def _close(self, final: bool) -> None:
        """Finalise windows whose sub-stream has passed their end (all of them at the end)."""
        for key, windows in self.open.items():
            mark = self.watermark.get(key)
            for start in list(windows):
                if not final and (self.window_size is None or mark is None or start + self.window_size > mark):
                    break  # windows open in start order: the rest end later
                self._finalize(windows.pop(start), start)

    def _close_key(self, key: tuple) -> None:
        """A complete key (key-sorted streams): close its windows, forget it."""
        for start, ow in self.open.pop(key, {}).items():
            self._finalize(ow, start)
        self.last_time.pop(key, None)
        self.watermark.pop(key, None)
        self.done_keys.add(key)

    def _finalize(self, ow: OpenWindow, start: int) -> None:
        self.stats["windows_closed"] += 1
        nv = len(self.bound.automaton.names)
        fin = nv
        if self.plan.executor is Executor.TYPE_GRAINED:  # under any, finished = ending at a final variable
            x_is_min = self.chan.x_is_min
            for v in sorted(self.bound.automaton.final):
                if ow.r[v]:
                    ow.i[fin] += ow.i[v]
                    ow.f[fin] += ow.f[v]
                    ow.x[fin] = np.where(x_is_min, np.minimum(ow.x[fin], ow.x[v]), np.maximum(ow.x[fin], ow.x[v]))
                    ow.r[fin] = True
        if ow.r[fin]:
            self.closed.append((ow.group, start, ow.i[fin].copy(), ow.f[fin].copy(), ow.x[fin].copy(), ow.e))

    # -- scales ----------------------------------------------------------------------------
    def _grow_scales(self, needed: dict[str, int]) -> None:
        for attr, k in needed.items():
            old = self.scales.get(attr)
            if old is None:
                self.scales[attr] = k
            elif k > old:
                self._rescale(attr, (k // old).bit_length() - 1)
                self.scales[attr] = k

    def _rescale(self, attr: str, shift: int) -> None:
        """Multiply every carried sum of ``attr`` by ``2**shift`` (its scale grew)."""
        if self.chan is None:
            return
        i_idx, f_idx = [], []
        for slot, entry in zip(self.ctx.layout.slots, self.chan.slot_map):
            if slot.attribute == attr and slot.role == "sum":
                assert entry[0] == "fsplit", entry  # streaming splits every float sum
                i_idx += [entry[1], entry[4]]
                f_idx += [entry[2], entry[3], entry[5], entry[6]]
        if not i_idx:
            return
        factor = np.uint64((1 << shift) & 0xFFFFFFFFFFFFFFFF) if shift < 64 else np.uint64(0)

        def scale(i: np.ndarray, f: np.ndarray, e: int) -> int:
            i[..., i_idx] *= factor  # exact modulo 2**64
            f[..., f_idx] *= 2.0**shift if shift < 1000 else np.inf
            while np.abs(f).max(initial=0.0) > RENORMALIZE_ABOVE and np.isfinite(f).all():
                f *= 2.0**-600
                e += 600
            return e

        for windows in self.open.values():
            for ow in windows.values():
                ow.e = scale(ow.i, ow.f, ow.e)
        for n, (group, start, i, f, x, e) in enumerate(self.closed):
            self.closed[n] = (group, start, i, f, x, scale(i, f, e))

    # -- output ------------------------------------------------------------------------------
    def finish(self, *, metadata: dict | None = None) -> pa.Table:
        """Process what is held back, close every window, and return the result table."""
        from cogra.runtime.fast.finish import table_from_channels
        from cogra.runtime.output import build_table

        held, self.held = self.held, None
        self._process(held if held is not None else self.schema.empty_table(), final=True)
        meta = {f"cogra.{k}": v for k, v in self.counters.items()}
        meta.update(metadata or {})
        if self.ctx is None or not self.closed:
            b = self.bound
            return build_table(b.query, b.schema, [], time_type=b.time_type,
                               on_overflow=self.on_overflow, metadata=meta)
        self.ctx.scales = dict(self.scales)
        groups = [c[0] for c in self.closed]
        out = KernelOut(np.stack([c[2] for c in self.closed]), np.stack([c[3] for c in self.closed]),
                        np.stack([c[4] for c in self.closed]), np.array([c[5] for c in self.closed], np.int64),
                        np.ones(len(self.closed), np.bool_))
        starts = np.array([c[1] for c in self.closed], np.int64)
        table = table_from_channels(self.ctx, groups, np.arange(len(groups)), starts, out,
                                    on_overflow=self.on_overflow, metadata=meta, row_path=None)
        if table is None:
            raise AggregateOverflowError(
                "a result value does not fit its output type (streaming evaluation); use "
                "on_overflow='null' (Spark: spark.sql.ansi.enabled=false) to get NULL instead")
        return table


def _slots(bound: Any):
    from cogra.runtime.aggregates import Layout

    layout = Layout(bound.query, bound.automaton.names, bound.schema)
    return [s for s in layout.slots if s.attribute]


def evaluate_batches(plan: Any, schema: pa.Schema, batches: Iterable[pa.RecordBatch | pa.Table], *,
                     on_overflow: str = "error") -> tuple[pa.Table, StreamEvaluation]:
    stream = StreamEvaluation(plan, schema, on_overflow=on_overflow)
    for batch in batches:
        stream.push(batch)
    return stream.finish(), stream


__all__ = ["OpenWindow", "StreamEvaluation", "StreamingUnsupported", "evaluate_batches"]
