"""Carried window states: record batches in, the windows' aggregates out, with memory
bounded by the open windows' aggregate states -- not by the events per window.

Each batch goes through the ordinary :class:`Engine` (filters, sub-streams, windows);
what differs is that the compiled kernel *continues* each window from the state the
previous batches left (``coarse_grained.run_windows_from``), and a window is finalised, and its
state dropped, once no later event can fall into it.  Two drivers:

* :meth:`StreamEvaluation.push` / :meth:`~StreamEvaluation.finish` -- the Spark worker's
  streamed route.  The events of one sub-stream (one value of the plain keys, ``[attr]`` /
  GROUP-BY attr) arrive in time order across batches, as Spark partitions sorted by key,
  then time, bring them.  A key's rows at its latest time so far are held back until the
  next batch (ties must be processed together); an earlier time arriving late is a
  :class:`~cogra.errors.DataError` naming the key.
* :meth:`StreamEvaluation.settle` / :meth:`~StreamEvaluation.drain` -- a global event-time
  watermark (:class:`cogra.runtime.online.OnlineEvaluation`): the events up to it, then
  the windows ending by it; :meth:`~StreamEvaluation.state` and
  :meth:`~StreamEvaluation.load_state` carry the open windows over a restart.

The kernels' encodings must not depend on data a batch has not seen yet, which decides
what can be carried (:func:`unsupported_reason` says why not, before any data is read):

* float sums are exact scaled integers ``x * 2**k``; ``k`` grows when a batch needs finer
  resolution, and the carried states' sum channels are multiplied by ``2**Δk`` (exact:
  sums are linear in x); every float sum is kept in two limbs.  Values spanning more than
  2**93, or inf/NaN, cannot be held so: a batch with one is a DataError
  (:func:`values_may_stop` tells the callers that avoid it);
* MIN/MAX keys must be order-preserving without a dictionary: numbers, timestamps,
  dates, booleans -- not strings;
* the engine's exact Python fallback needs a window's events, which are gone: a value the
  kernels cannot decide raises :class:`~cogra.runtime.compiled.finish.by_column.UndecidableError`;
* the mixed-grained executor keeps events and variable keys make a sub-stream's
  membership depend on later values: neither is carried, nor are fractional windows or
  decimals.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cogra.runtime.arrow_arrays import one_array
from cogra.analysis.granularity import Executor
from cogra.errors import DataError
from cogra.language.limits import with_recursion_room
from cogra.runtime.compiled.attribute_columns import attribute_scales
from cogra.runtime.columns import canonical_keys, key_codes, micros
from cogra.runtime.engine import Engine
from cogra.runtime.compiled.kernel_args import Channels, Positions
from cogra.runtime.compiled.channels import (
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


def _key_positions(plain_keys: Sequence[str], sorted_by: Sequence[str]) -> tuple[int, ...] | None:
    """Where each of ``sorted_by`` is among the plain keys (None: the stream is not
    sorted by key); a name that is no plain key is an error of the caller."""
    if not sorted_by:
        return None
    positions = []
    for name in sorted_by:
        if name not in plain_keys:
            raise ValueError(f"sorted_by names {name!r}, which is not a plain key of the query "
                             f"({', '.join(plain_keys) or 'none'})")
        positions.append(list(plain_keys).index(name))
    return tuple(positions)


def canonical_value(value: Any) -> Any:
    """A key value as the engine groups it: one NaN (``math.nan``, so that tuples holding
    it compare equal) and no negative zero."""
    if isinstance(value, float):
        if value != value:
            return math.nan
        if value == 0.0:
            return 0.0
    return value


def _canonical_tuple(values: tuple) -> tuple:
    return tuple(canonical_value(v) for v in values)


def unsupported_reason(plan: Any) -> str | None:
    """Why the kernels cannot carry this query's window states from batch to batch (None:
    they can).  Found on the plan and an empty batch, before any data is read; memoized on
    the bound query (a streaming Spark query asks once per group and micro-batch)."""
    key = ("stream.unsupported_reason", plan.executor)
    memo = plan.bound.memo
    if key not in memo:
        memo[key] = _unsupported_reason(plan)
    return memo[key]


def _unsupported_reason(plan: Any) -> str | None:
    b = plan.bound
    if plan.executor not in STREAMING_EXECUTORS or b.kept_variables:
        return f"the {plan.executor.value} executor keeps events (a predicate reads an earlier event)"
    if any(b.var_keys):
        return "variable keys ([V.attr] or GROUP-BY V.attr) make sub-streams depend on later values"
    if b.leading is not None or b.trailing is not None:
        # A window's blockers may arrive after its trends; its rows are held and it is
        # evaluated whole (early rows of Update mode may then go down, docs/language.md, Streams).
        return "an absence (NOT at the pattern's edge) is decided by the window's later events"
    if not is_integral(WindowSpec.of(b.query.window, b.time_type), b.time_type):
        return "windows need an integer or timestamp time column and whole sizes"
    slots = _slots(b)
    if any(slot.role == "sq" for slot in slots):
        # Its sums of squares are exact in fixed-width channels only while a window's
        # trend counts stay below ~2**31 -- which ties in time pass within a few dozen
        # events under every semantics -- and a window the channels cannot decide is
        # re-run from its events.
        return "a spread (VAR_*, STDDEV_*) is exact only from its window's events once counts are large"
    for slot in slots:
        t = b.schema.field(slot.attribute).type
        if pa.types.is_decimal(t):
            return f"{slot.attribute} is a decimal"
        if slot.kind in ("min", "max") and (pa.types.is_string(t) or pa.types.is_large_string(t)):
            return f"MIN/MAX of the string attribute {slot.attribute}"
    # What the kernels refuse for a column type (uint64, strings summed, ...) shows on an
    # empty batch: find it now, not at the first push.
    from cogra.runtime.compiled.kernel_driver import KernelDriver

    try:
        KernelDriver(Engine(plan, b.schema.empty_table()), streaming=True)
    except Unsupported as reason:
        return str(reason)
    return None


def values_may_stop(plan: Any) -> bool:
    """Whether an input value could stop carried states half-way: a float SUM/AVG meets
    values an exactly scaled sum cannot hold (inf/NaN, spans beyond 2**93), which
    whole-table evaluation handles exactly -- but the earlier events are gone by then."""
    b = plan.bound
    return any(item.value.attribute and item.value.func.value in ("SUM", "AVG")
               and pa.types.is_floating(b.schema.field(item.value.attribute).type)
               for item in b.query.returns if hasattr(item.value, "func"))


class WindowStore:
    """The open windows' kernel states in pooled arrays (one row per window).

    A row is identified by (key id, window start); free rows have key -1 and are reused.
    Finding the rows of a batch's windows is one sort of the live and requested pairs, so
    the per-window cost is array work, as in the whole-table engine.
    """

    ARRAYS = ("i", "f", "x", "r", "e", "key", "start", "group")
    """The per-row arrays (a row's state and its identity)."""

    def __init__(self, nv: int, n_i: int, n_f: int, x_is_min: np.ndarray):
        self.nv, self.n_i, self.n_f, self.x_is_min = nv, max(1, n_i), max(1, n_f), x_is_min
        self.cap = 0
        self.i = np.zeros((0, nv + 1, self.n_i), np.uint64)
        self.f = np.zeros((0, nv + 1, self.n_f), np.float64)
        self.x = np.zeros((0, nv + 1, len(x_is_min)), np.int64)
        self.r = np.zeros((0, nv + 1), np.bool_)
        self.e = np.zeros(0, np.int64)
        self.key = np.zeros(0, np.int64)  # -1: free
        self.start = np.zeros(0, np.int64)
        self.group = np.zeros(0, np.int64)
        self.n_live = 0

    @property
    def live(self) -> np.ndarray:
        return self.key >= 0

    def _grow(self, need: int) -> None:
        new = max(need, 2 * self.cap, 64)
        extra = new - self.cap

        def pad(a: np.ndarray, fill) -> np.ndarray:
            block = np.empty((extra, *a.shape[1:]), a.dtype)
            block[...] = fill
            return np.concatenate([a, block])

        self.i, self.f, self.r = pad(self.i, 0), pad(self.f, 0.0), pad(self.r, False)
        self.x = pad(self.x, np.where(self.x_is_min, MIN_KEY_IDENTITY, MAX_KEY_IDENTITY))
        self.e, self.start, self.group = pad(self.e, 0), pad(self.start, 0), pad(self.group, 0)
        self.key = pad(self.key, -1)
        self.cap = new

    def rows_for(self, keys: np.ndarray, starts: np.ndarray, groups: np.ndarray) -> np.ndarray:
        """The row of each (key, start) -- pairs are distinct -- opening zero-state rows
        for new windows."""
        live = np.flatnonzero(self.key >= 0)
        n_req = len(keys)
        kk = np.concatenate([self.key[live], keys])
        ss = np.concatenate([self.start[live], starts])
        tag = np.concatenate([live, -1 - np.arange(n_req)])  # >= 0: a live row; < 0: a request
        order = np.lexsort((ss, kk))
        kk, ss, tag = kk[order], ss[order], tag[order]
        out = np.full(n_req, -1, np.int64)
        same = (kk[1:] == kk[:-1]) & (ss[1:] == ss[:-1])
        pos = np.flatnonzero(same)  # a live row and a request with the same pair: adjacent
        a, b = tag[pos], tag[pos + 1]
        live_first = (a >= 0) & (b < 0)
        out[-1 - b[live_first]] = a[live_first]
        req_first = (b >= 0) & (a < 0)
        out[-1 - a[req_first]] = b[req_first]
        new = np.flatnonzero(out < 0)
        if len(new):
            free = np.flatnonzero(self.key < 0)
            if len(free) < len(new):
                self._grow(self.cap + len(new) - len(free))
                free = np.flatnonzero(self.key < 0)
            rows = free[:len(new)]
            out[new] = rows
            self.i[rows], self.f[rows], self.r[rows], self.e[rows] = 0, 0.0, False, 0
            self.x[rows] = np.where(self.x_is_min, MIN_KEY_IDENTITY, MAX_KEY_IDENTITY)
            self.key[rows], self.start[rows], self.group[rows] = keys[new], starts[new], groups[new]
            self.n_live += len(new)
        return out

    def shrink(self) -> None:
        """Keep only the live rows (in their order), at a capacity of at least 64."""
        live = np.flatnonzero(self.key >= 0)
        cap = max(64, len(live))
        for name in self.ARRAYS:
            old = getattr(self, name)
            new = np.empty((cap, *old.shape[1:]), old.dtype)
            new[:len(live)] = old[live]
            setattr(self, name, new)
        free = slice(len(live), cap)
        self.i[free], self.f[free], self.r[free], self.e[free] = 0, 0.0, False, 0
        self.x[free] = np.where(self.x_is_min, MIN_KEY_IDENTITY, MAX_KEY_IDENTITY)
        self.key[free], self.start[free], self.group[free] = -1, 0, 0
        self.cap = cap

    def live_rows(self) -> dict[str, np.ndarray]:
        """The live rows' arrays (what :meth:`load` takes back)."""
        live = np.flatnonzero(self.key >= 0)
        return {name: getattr(self, name)[live] for name in self.ARRAYS}

    def load(self, rows: dict[str, np.ndarray]) -> None:
        """Take :meth:`live_rows` of a store of the same layout into this empty one."""
        n = len(rows["key"])
        if n:
            self._grow(n)
            for name in self.ARRAYS:
                getattr(self, name)[:n] = rows[name]
            self.n_live = n

    def release(self, rows: np.ndarray) -> None:
        self.key[rows] = -1
        self.n_live -= len(rows)


class StreamEvaluation:
    """Evaluate one query over a stream of record batches (see the module docstring)."""

    def __init__(self, plan: Any, schema: pa.Schema, *, on_overflow: str = "error",
                 sorted_by: Sequence[str] = ()):
        """``sorted_by``: plain keys the stream comes sorted by, then time (a Spark
        partition comes sorted by its partitioning keys): once their values change, every
        sub-stream with the earlier values is complete, so its windows close and its
        bookkeeping is dropped at once.  The other plain keys' sub-streams interleave in
        time within one value of these."""
        self.plan = plan
        self.schema = schema
        self.on_overflow = on_overflow
        b = plan.bound
        self.bound = b
        self.sorted_positions = _key_positions(b.plain_keys, sorted_by)
        self.done_groups: set[tuple] = set()
        """Values of the ``sorted_by`` keys that are complete."""
        why = unsupported_reason(plan)
        if why:
            raise ValueError(f"this query cannot be evaluated with carried states: {why}")
        self.window_size = None if b.query.window is None else int(WindowSpec.of(b.query.window, b.time_type).size)
        self.store: WindowStore | None = None
        self.key_ids: dict[tuple, int] = {}
        self.groups: list[tuple] = []
        self.group_ids: dict[tuple, int] = {}
        self.last_time: dict[tuple, Any] = {}
        self.watermark: dict[tuple, Any] = {}
        self.held: pa.Table | None = None
        self.scales: dict[str, int] = {}
        self.closed: list[KernelOut] = []  # finished rows of closed windows, in blocks
        self.closed_start: list[np.ndarray] = []
        self.closed_group: list[np.ndarray] = []
        self.counters = {"rows_in": 0, "rows_null_time": 0, "rows_null_type": 0}
        self.stats = {"batches": 0, "windows_closed": 0, "max_open_windows": 0}
        self.ctx: Any = None
        self.chan: Any = None
        self.settled: int | None = None
        """The watermark of the last :meth:`settle` (None: none yet)."""

    # -- input -------------------------------------------------------------------------
    @with_recursion_room
    def push(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Feed ``batch`` (a running call for the background compiles, as an engine call:
        :func:`cogra.runtime.compiled.codegen.background.compiles_after_the_call`)."""
        from cogra.runtime.compiled.codegen.background import compiles_after_the_call

        with compiles_after_the_call():
            self._push(batch)

    def _push(self, batch: pa.RecordBatch | pa.Table) -> None:
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if table.schema.names != self.schema.names:
            raise DataError(f"batch columns {table.schema.names} differ from the stream's {self.schema.names}")
        if not table.schema.equals(self.schema):
            table = table.cast(self.schema)
        self.counters["rows_in"] += table.num_rows
        if not table.num_rows:
            return
        table = canonical_keys(table, self.bound.plain_keys)
        if self.held is not None and self.held.num_rows:
            table = pa.concat_tables([self.held, table])
        times, valid = self._valid_times(table)
        codes, keys = self._key_values(table)
        latest = self._check_order(times, valid, codes, keys)  # held rows sit at their key's last time: fine
        hold = self._hold_latest(times, valid, codes, keys, latest)
        done: list[tuple] = []
        if self.sorted_positions is not None:
            # Only the keys of the last row's sorted-by values can continue; every other
            # key in here is complete.
            last = self._sorted_values(keys[int(codes[-1])])
            current = np.array([self._sorted_values(k) == last for k in keys], bool)
            hold = pc.and_(hold, pa.array(current[codes]))
            done = [k for c, k in enumerate(keys) if not current[c]]
        self.held = table.filter(hold)
        self._process(table.filter(pc.invert(hold)), final=False, done=done)
        for key in done:
            self._close_key(key)

    def _sorted_values(self, key: tuple) -> tuple:
        """The values of the ``sorted_by`` keys in a plain key."""
        return tuple(key[i] for i in self.sorted_positions)

    def _key_values(self, table: pa.Table) -> tuple[np.ndarray, list[tuple]]:
        codes, reps = key_codes(table, self.bound.plain_keys)
        if not self.bound.plain_keys:
            return codes, [()] * len(reps)
        cols = [[canonical_value(v) for v in table.column(k).take(pa.array(reps)).to_pylist()]
                for k in self.bound.plain_keys]
        return codes, list(zip(*cols))

    def _valid_times(self, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """Times as the engine sees them (µs for timestamps), and which are not NULL."""
        col = one_array(table.column(self.bound.time_column))
        valid = np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)
        if pa.types.is_timestamp(col.type):
            return micros(pc.fill_null(col, 0)), valid
        return np.asarray(pc.fill_null(col, 0).to_numpy(zero_copy_only=False), dtype=np.int64), valid

    def _check_order(self, times: np.ndarray, valid: np.ndarray, codes: np.ndarray,
                     keys: list[tuple]) -> np.ndarray:
        """Reject a key going back in time; return each key's latest time (int64 min: none)."""
        big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
        first = np.full(len(keys), big, np.int64)
        latest = np.full(len(keys), small, np.int64)
        np.minimum.at(first, codes[valid], times[valid])
        np.maximum.at(latest, codes[valid], times[valid])
        for key, lo, hi in zip(keys, first.tolist(), latest.tolist()):
            if lo == big:
                continue  # only NULL times
            if self.sorted_positions is not None and self._sorted_values(key) in self.done_groups:
                raise DataError(f"sub-stream {dict(zip(self.bound.plain_keys, key))} continues after "
                                "another key although the stream was declared sorted by "
                                f"{', '.join(self.bound.plain_keys[i] for i in self.sorted_positions)}")
            last = self.last_time.get(key)
            if last is not None and lo < last:
                raise DataError(f"events of sub-stream {dict(zip(self.bound.plain_keys, key))} arrive out "
                                f"of time order across batches ({lo} after {last}); a stream must "
                                "bring each sub-stream's events in time order")
            self.last_time[key] = hi if last is None else max(hi, last)
        return latest

    def _hold_latest(self, times: np.ndarray, valid: np.ndarray, codes: np.ndarray, keys: list[tuple],
                     latest: np.ndarray) -> pa.Array:
        """Rows at their key's latest time: more events of that time may follow."""
        for code, key in enumerate(keys):
            if latest[code] != np.iinfo(np.int64).min:
                self.watermark[key] = int(latest[code])
        return pa.array(valid & (times == latest[codes]))

    # -- evaluation ----------------------------------------------------------------------
    def _process(self, table: pa.Table, *, final: bool, done: Iterable[tuple] = ()) -> None:
        self.stats["batches"] += 1
        if table.num_rows:
            self._run(table)
        self._close(final, done)

    def _run(self, table: pa.Table) -> None:
        from cogra.runtime.compiled import kernel_driver
        from cogra.runtime.compiled.kernel_driver import KernelDriver
        from cogra.runtime.compiled.finish.by_column import Context
        from cogra.runtime.compiled.aggregators.coarse_grained import run_windows_from

        engine = Engine(self.plan, table)
        for k in ("rows_null_time", "rows_null_type"):
            self.counters[k] += engine.counters[k]
        engine.idle_events_matter = self.plan.executor is Executor.CONTIGUOUS
        self._grow_scales(attribute_scales(engine.table, engine.layout.attributes))
        engine.__dict__["scales"] = dict(self.scales)  # the stream's scales, not this batch's
        try:
            driver = KernelDriver(engine, streaming=True)
        except Unsupported as why:
            raise DataError(f"this stream cannot be evaluated incrementally: {why}; evaluate "
                            "these events as one table (cogra.evaluate) instead") from None
        if self.ctx is None:
            self.ctx = Context.of(engine, driver, self.window_size)
            self.chan = driver.chan
        subs = engine.substreams()
        wins = engine.window_ranges(subs)
        w = len(wins.seg)
        if not w:
            return
        nv, c = driver.nv, driver.chan
        if self.store is None:
            self.store = WindowStore(nv, c.n_i, c.n_f, c.x_is_min)
        store = self.store
        # (Key values as _key_values gives them: a NaN read from another batch is another
        # float object, and tuples of NaN compare equal only by identity.)
        seg_key = np.array([self.key_ids.setdefault(_canonical_tuple(k[0]), len(self.key_ids))
                            for k in subs.keys], np.int64)
        seg_group = np.array([self._group_id(_canonical_tuple(g)) for g in subs.groups], np.int64)
        rows_w = store.rows_for(seg_key[wins.seg], wins.start.astype(np.int64), seg_group[wins.seg])
        st_i, st_f, st_x = store.i[rows_w], store.f[rows_w], store.x[rows_w]
        st_r, st_e = store.r[rows_w], store.e[rows_w]
        rows = subs.rows
        times = engine.time_np[rows]
        lo, hi = wins.lo.astype(np.int64), wins.hi.astype(np.int64)
        from cogra.runtime.compiled.codegen import background
        from cogra.runtime.compiled.codegen import kernel_cache

        shape = driver.shape()
        pair_ok = driver.pair_ok[rows]
        generated_args = (times, subs.bits, pair_ok, driver.a_int, driver.a_flt, driver.a_valid,
                          driver.a_key, rows, lo, hi, st_i, st_f, st_x, st_r, st_e)
        # The query's generated kernel where it pays off or is compiled (else requested in
        # the background for the next chunks, as the other generated kernels).
        if background.generated_or_requested(shape, "kernel_from", len(rows), kernel_driver.SPECIALIZE_MIN_EVENTS,
                                             engine.n, lambda: generated_args):
            kernel_cache.kernel_from_for(shape)(*generated_args)
        else:
            run_windows_from(driver.pattern, Positions(times, subs.bits, pair_ok, rows), driver.slots,
                             driver.attributes, lo, hi, driver._max_batch(times, subs.bits),
                             Channels(st_i, st_f, st_x, st_e, st_r))
        store.i[rows_w], store.f[rows_w], store.x[rows_w] = st_i, st_f, st_x
        store.r[rows_w], store.e[rows_w] = st_r, st_e
        self.stats["max_open_windows"] = max(self.stats["max_open_windows"], store.n_live)
        del engine, driver, subs, wins, st_i, st_f, st_x, st_r, st_e, rows, times, rows_w
        if TRIM_HEAP_ROWS and table.num_rows >= TRIM_HEAP_ROWS:
            pa.default_memory_pool().release_unused()
            _trim_heap()

    def _group_id(self, group: tuple) -> int:
        gid = self.group_ids.get(group)
        if gid is None:
            gid = self.group_ids[group] = len(self.groups)
            self.groups.append(group)
        return gid

    def _close(self, final: bool, keys: Iterable[tuple] = ()) -> None:
        """Finalise windows whose sub-stream has passed their end, those of complete
        ``keys`` (key-sorted streams), or all of them at the end."""
        store = self.store
        if store is None or not store.n_live:
            return
        live = store.live
        if final:
            closing = live
        else:
            marks = np.full(len(self.key_ids), np.iinfo(np.int64).min, np.int64)
            for key, kid in self.key_ids.items():
                mark = self.watermark.get(key)
                if mark is not None and self.window_size is not None:
                    marks[kid] = mark
            done = np.zeros(len(self.key_ids), bool)
            for key in keys:
                if key in self.key_ids:
                    done[self.key_ids[key]] = True
            kid = np.where(live, store.key, 0)
            ends = store.start + (self.window_size or 0)
            closing = live & ((ends <= marks[kid]) | done[kid])
        rows = np.flatnonzero(closing)
        if len(rows):
            self._finalize(rows)
            store.release(rows)

    def _close_key(self, key: tuple) -> None:
        """A complete key (key-sorted streams): its windows are closed; forget it."""
        self.last_time.pop(key, None)
        self.watermark.pop(key, None)
        self.done_groups.add(self._sorted_values(key))

    def _finalize(self, rows: np.ndarray) -> None:
        store = self.store
        nv = store.nv
        fin = nv
        i, f, x, r = store.i[rows], store.f[rows], store.x[rows], store.r[rows]
        if self.plan.executor is Executor.TYPE_GRAINED:  # under any, finished = ending at a final variable
            for v in sorted(self.bound.automaton.final):
                on = r[:, v]
                i[on, fin] += i[on, v]
                f[on, fin] += f[on, v]
                x[on, fin] = np.where(store.x_is_min, np.minimum(x[on, fin], x[on, v]),
                                      np.maximum(x[on, fin], x[on, v]))
                r[on, fin] = True
        self.stats["windows_closed"] += len(rows)
        done = r[:, fin]
        if done.any():
            self.closed.append(KernelOut(i[done, fin], f[done, fin], x[done, fin], store.e[rows][done],
                                         np.ones(int(done.sum()), np.bool_)))
            self.closed_start.append(store.start[rows][done])
            self.closed_group.append(store.group[rows][done])

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

        def scale(out: Any) -> None:
            if not len(out.e):  # (a store restored without open windows)
                return
            out.i[..., i_idx] *= factor  # exact modulo 2**64
            with np.errstate(over="ignore"):
                out.f[..., f_idx] *= 2.0**shift if shift < 1000 else np.inf
            # Keep stored floats below the kernels' bound: move whole windows' exponents.
            big = np.abs(out.f).reshape(len(out.e), -1).max(axis=1, initial=0.0)
            while True:
                over = np.isfinite(big) & (big > RENORMALIZE_ABOVE)
                if not over.any():
                    break
                out.f[over] *= 2.0**-600
                out.e[over] += 600
                big[over] *= 2.0**-600

        if self.store is not None:
            scale(self.store)
        for block in self.closed:
            scale(block)

    # -- a global watermark (cogra.runtime.online) ---------------------------------------
    @with_recursion_room
    def settle(self, table: pa.Table, watermark: int) -> None:
        """Take ``table``, every event at or before ``watermark`` not pushed yet (time
        order within it does not matter: the engine orders a batch), and close every window
        ending by ``watermark`` (in the engine's time units, µs for timestamps): no later
        event can fall into one.  Later events must come after ``watermark``."""
        if not table.schema.equals(self.schema):
            table = table.cast(self.schema)
        self.counters["rows_in"] += table.num_rows
        if self.held is not None and self.held.num_rows:  # from push(): a settle finalises them
            table, self.held = pa.concat_tables([self.held, table]), None
        if table.num_rows:
            table = canonical_keys(table, self.bound.plain_keys)
            times, valid = self._valid_times(table)
            if valid.any():
                lo, hi = int(times[valid].min()), int(times[valid].max())
                if hi > watermark or (self.settled is not None and lo <= self.settled):
                    raise DataError(f"events at times {lo}..{hi} do not lie after the settled watermark "
                                    f"{self.settled} and at or before the new one {watermark}")
            self.stats["batches"] += 1
            self._run(table)
        self.settled = watermark
        self._close_until(watermark)

    def _close_until(self, watermark: int) -> None:
        store = self.store
        if store is None or not store.n_live or self.window_size is None:
            return
        rows = np.flatnonzero(store.live & (store.start + self.window_size <= watermark))
        if len(rows):
            self._finalize(rows)
            store.release(rows)

    def next_window_end(self) -> int | None:
        """The end of the earliest open window (None: none is open)."""
        store = self.store
        if store is None or not store.n_live or self.window_size is None:
            return None
        return int(store.start[store.live].min()) + self.window_size

    # -- output ------------------------------------------------------------------------------
    @with_recursion_room
    def finish(self, *, metadata: dict | None = None) -> pa.Table:
        """Process what is held back, close every window, and return the result table."""
        held, self.held = self.held, None
        self._process(held if held is not None else self.schema.empty_table(), final=True)
        return self.drain(metadata=metadata)

    def drain(self, *, metadata: dict | None = None) -> pa.Table:
        """The rows of the windows closed so far and not drained yet, as :func:`cogra.evaluate`
        types and orders them; then forget the keys and groups no open window has."""
        from cogra.runtime.compiled.finish.by_column import table_from_channels
        from cogra.runtime.output import build_table

        meta = {f"cogra.{k}": v for k, v in self.counters.items()}
        meta.update(metadata or {})
        if self.ctx is None or not self.closed:
            b = self.bound
            table = build_table(b.query, b.schema, [], time_type=b.time_type,
                                on_overflow=self.on_overflow, metadata=meta)
        else:
            self.ctx.scales = dict(self.scales)
            blocks = self.closed
            out = KernelOut(np.concatenate([b.i for b in blocks]), np.concatenate([b.f for b in blocks]),
                            np.concatenate([b.x for b in blocks]), np.concatenate([b.e for b in blocks]),
                            np.concatenate([b.r for b in blocks]))
            starts = np.concatenate(self.closed_start)
            table = table_from_channels(self.ctx, self.groups, np.concatenate(self.closed_group), starts,
                                        out, on_overflow=self.on_overflow, metadata=meta, row_path=None)
            assert table is not None  # without a row path, an overflow raises there
        self.closed, self.closed_start, self.closed_group = [], [], []
        self._compact()
        return table

    def _compact(self) -> None:
        """Renumber the keys and groups the open windows use, dropping the others: a long
        stream's memory stays bounded by its open windows, not by the keys it has seen."""
        store = self.store
        if store is None or self.closed:
            return
        live = np.flatnonzero(store.key >= 0)
        by_id = [None] * len(self.key_ids)
        for key, kid in self.key_ids.items():
            by_id[kid] = key
        used = np.unique(store.key[live])
        if len(used) < len(by_id):
            remap = np.full(len(by_id), -1, np.int64)
            remap[used] = np.arange(len(used))
            store.key[live] = remap[store.key[live]]
            self.key_ids = {by_id[k]: i for i, k in enumerate(used.tolist())}
            if self.sorted_positions is None:  # (a sorted stream's keys are dropped as they end)
                for key in [k for k in self.last_time if k not in self.key_ids]:
                    self.last_time.pop(key, None)
                    self.watermark.pop(key, None)
        used = np.unique(store.group[live])
        if len(used) < len(self.groups):
            remap = np.full(len(self.groups), -1, np.int64)
            remap[used] = np.arange(len(used))
            store.group[live] = remap[store.group[live]]
            self.groups = [self.groups[g] for g in used.tolist()]
            self.group_ids = {g: i for i, g in enumerate(self.groups)}
        if store.cap > 64 and store.n_live < store.cap // 4:  # shrink to the live rows
            store.shrink()

    # -- checkpoints -----------------------------------------------------------------------
    def state(self) -> dict:
        """What :meth:`load_state` needs to continue: the open windows' states, the keys and
        groups they belong to, the scales, the counters (plain Python and numpy values)."""
        if self.closed:
            raise ValueError("drain the closed windows before taking the state")
        self._compact()
        held = None
        if self.held is not None and self.held.num_rows:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, self.held.schema) as writer:
                writer.write_table(self.held)
            held = sink.getvalue().to_pybytes()
        return {
            "store": None if self.store is None else self.store.live_rows(),
            "keys": sorted(self.key_ids, key=self.key_ids.__getitem__),
            "groups": list(self.groups),
            "last_time": list(self.last_time.items()),
            "watermark": list(self.watermark.items()),
            "done_groups": list(self.done_groups),
            "held": held,
            "scales": dict(self.scales),
            "settled": self.settled,
            "counters": dict(self.counters),
            "stats": dict(self.stats),
        }

    def load_state(self, state: dict) -> None:
        """Continue from :meth:`state` of an evaluation of the same plan and schema."""
        self.key_ids = {tuple(k): i for i, k in enumerate(state["keys"])}
        self.groups = [tuple(g) for g in state["groups"]]
        self.group_ids = {g: i for i, g in enumerate(self.groups)}
        self.last_time = {tuple(k): v for k, v in state["last_time"]}
        self.watermark = {tuple(k): v for k, v in state["watermark"]}
        self.done_groups = {tuple(g) for g in state["done_groups"]}
        self.held = pa.ipc.open_stream(state["held"]).read_all() if state["held"] else None
        self.scales = dict(state["scales"])
        self.settled = state["settled"]
        self.counters.update(state["counters"])
        self.stats.update(state["stats"])
        saved = state["store"]
        if saved is not None:
            self._ensure_context()
            c = self.chan
            self.store = WindowStore(saved["r"].shape[1] - 1, c.n_i, c.n_f, c.x_is_min)  # r: (rows, nv + 1)
            self.store.load(saved)

    def _ensure_context(self) -> None:
        """The channel layout and finishing context, from an empty batch (a restored
        evaluation needs them before its first batch: to rescale carried sums, to finish)."""
        if self.ctx is not None:
            return
        from cogra.runtime.compiled.kernel_driver import KernelDriver
        from cogra.runtime.compiled.finish.by_column import Context

        engine = Engine(self.plan, self.schema.empty_table())
        engine.__dict__["scales"] = dict(self.scales)
        driver = KernelDriver(engine, streaming=True)
        self.ctx = Context.of(engine, driver, self.window_size)
        self.chan = driver.chan


def _slots(bound: Any):
    from cogra.runtime.aggregates import layout_of

    return [s for s in layout_of(bound).slots if s.attribute]


__all__ = ["StreamEvaluation", "WindowStore", "unsupported_reason", "values_may_stop"]
