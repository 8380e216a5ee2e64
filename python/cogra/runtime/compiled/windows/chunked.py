"""One window over a whole table, run chunk of rows after chunk with its state carried.

A query without keys and without WITHIN has one window: every event of the table.  The
one-pass route (:meth:`Engine.substreams` then the window kernel) builds each per-event
array the kernels read for the whole table at once -- the kept rows, their play bits and
times, the attributes' doubles, scaled integers and order keys: 24 bytes per event
each, ~170 MB over 3M events with MIN/MAX.  A process's first call meets all of it as
fresh memory, which a virtual machine's host backs page by page (1-4 ms per MiB here:
0.2-0.5 s of a first call whose kernel runs in 30-110 ms).  Here the same arrays are
built for :data:`CHUNK_ROWS` rows at a time -- Arrow's pool hands each chunk the memory
the one before it freed -- and the window's state is carried from chunk to chunk by a
kernel that continues windows (below), so a call touches a few MB of fresh memory
however large the table.

Chunks end between timestamps: the events of one timestamp form one batch, which reads
the state from before it.  What the window's channels decode to is decided as on the
one-pass route (:func:`cogra.runtime.compiled.finish.by_column.table_from_channels`);
where they cannot be decided (an exact re-run in Python, which needs every event's
position) or an overflow must raise (the row path words it), the call falls back to the
one-pass route: :func:`result_table` returns None.

Why not the streaming engine itself: it builds an engine per batch and encodes for
batches whose scales it cannot know ahead (every float sum split into limbs), where here
the whole table's encodings are known.  The chunk size matters little: 32k to 256k rows
ran 3M events in the same time.  The generated kernel continues the window with the
one-pass kernel's bound on the counts, derived from the whole table (``kernel_continue``),
so that the chunks' channels are the one pass's bit for bit; where no such bound exists,
the streaming engine's ``kernel_from`` (every float watched against a fixed bound).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from cogra.runtime.compiled.channels import MAX_KEY_IDENTITY, MIN_KEY_IDENTITY, KernelOut

CHUNK_ROWS = 1 << 18
"""Rows per chunk (at least: a chunk ends between timestamps).  Its arrays take ~6 MB
for the rows, bits and times and ~2 MB per attribute row."""

MIN_ROWS = 2 * CHUNK_ROWS
"""Tables of fewer rows run in one pass: the chunks' calls would cost more than their
fresh memory."""


class _OnePass(Exception):
    """Raised inside :func:`result_table` where the one-pass route must answer."""


def applies(engine: Any) -> bool:
    """Whether ``engine``'s table runs here, its query's physical plan offering chunks
    (:mod:`cogra.runtime.physical`, which the engine asks first: compiled, one window over
    the whole table -- no WITHIN, no keys --, no negation, whose blockers and absence
    cut-offs read the whole table, no kept events, MIN/MAX over numbers only, as string
    ranks would differ per chunk): at least :data:`MIN_ROWS` rows, integer times, and the
    kernels not turned off for the call."""
    return not (engine.use_compiled is False or engine.n < MIN_ROWS or engine.idle_events_matter
                or engine.time_np.dtype.kind != "i")


def result_table(engine: Any, *, on_overflow: str, metadata: dict | None) -> pa.Table | None:
    """The query's result through the chunks, or None where the table does not apply
    (:func:`applies`) or the one-pass route must answer (see the module docstring).  Only
    for a query whose physical plan offers chunks."""
    if not applies(engine):
        return None
    from cogra.runtime.compiled.kernel_driver import KernelDriver, Unsupported

    _stats_without_doubles(engine)
    try:
        driver = KernelDriver(engine, table_rows=False)
    except Unsupported:
        return None  # the one-pass route decides: the Python executors, or the error
    if driver.kept:
        return None
    try:
        out, kept = _run(engine, driver)
        if out is None:
            return _empty(engine, metadata)
        return _table(engine, driver, out, kept, on_overflow, metadata)
    except _OnePass:
        return None


def _stats_without_doubles(engine: Any) -> None:
    """The floating attributes' summaries (their scales), without the copy of the table's
    doubles that the one-pass route keeps for its kernels (24 MB per 3M rows: the chunks
    build their own)."""
    from cogra.runtime.compiled.attribute_columns import float_stats

    for attr in engine.layout.attributes:
        if attr not in engine.float_stats and pa.types.is_floating(engine.table.schema.field(attr).type):
            engine.float_stats[attr] = float_stats(engine.table.column(attr))


def chunk_ends(time: np.ndarray, rows: int) -> list[int]:
    """Where chunks of about ``rows`` rows end in a table ordered by ``time``: never
    between two rows of one timestamp (their batch reads the state from before it)."""
    n = len(time)
    ends = []
    a = 0
    while a < n:
        z = min(n, a + rows)
        if z < n and time[z] == time[z - 1]:
            z = int(np.searchsorted(time, time[z - 1], side="right"))
        ends.append(z)
        a = z
    return ends


def _run(engine: Any, driver: Any) -> tuple[KernelOut | None, int]:
    """The window's finished-trend channels after every chunk (None where no row plays a
    variable: no window), and how many events it kept."""
    from cogra.analysis.granularity import Executor
    from cogra.runtime.compiled import kernel_driver
    from cogra.runtime.compiled.aggregators.coarse_grained import run_windows_from
    from cogra.runtime.compiled.kernel_args import Channels, Positions
    from cogra.runtime.compiled.codegen import background, kernel_cache
    from cogra.runtime.compiled.substream_split import whole_table_rows

    b = engine.bound
    c = driver.chan
    nv = driver.nv
    keep_idle = engine.plan.executor is Executor.CONTIGUOUS
    clear = np.uint64(b.automaton.ends_not_in(0))
    codes, time, local_ok = engine._type_codes, engine.time_np, engine.local_ok
    n_x = len(c.x_is_min)
    st_i = np.zeros((1, nv + 1, c.n_i), np.uint64)
    st_f = np.zeros((1, nv + 1, c.n_f), np.float64)
    st_x = np.empty((1, nv + 1, n_x), np.int64)
    st_x[...] = np.where(np.asarray(c.x_is_min, bool), MIN_KEY_IDENTITY, MAX_KEY_IDENTITY)
    st_r = np.zeros((1, nv + 1), np.bool_)
    st_e = np.zeros(1, np.int64)
    lo, hi = np.zeros(1, np.int64), np.zeros(1, np.int64)
    shape = driver.shape()
    bound = driver.rescale_bound(lo, np.full(1, engine.n, np.int64))  # (the longest the window can be)
    continuing = "kernel_continue" if bound is not None else "kernel_from"
    generated = None
    kept, playing = 0, False
    a = 0
    for z in chunk_ends(time, CHUNK_ROWS):
        local = local_ok if local_ok.shape[0] == 0 else np.ascontiguousarray(local_ok[:, a:z])
        rows, bits, times, plays = whole_table_rows(codes[a:z], engine.type_bits, engine.type_irrelevant,
                                                    engine.local_bits, local, clear, keep_idle, time[a:z])
        if len(rows):
            driver.load_rows(engine.table.slice(a, z - a))
            pair_ok = driver.pair_ok[a:z][rows] if shape.pair_checks else kernel_driver.NO_PAIR_OK
            hi[0] = len(rows)
            rows_args = (times, bits, pair_ok, driver.a_int, driver.a_flt, driver.a_valid, driver.a_key, rows,
                         lo, hi)
            states = (st_i, st_f, st_x, st_r, st_e)
            args = (*rows_args, bound, *states) if bound is not None else (*rows_args, *states)
            if generated is None:  # (decided once: the same kernel for every chunk)
                generated = background.generated_or_requested(shape, continuing, engine.n,
                                                              kernel_driver.SPECIALIZE_MIN_EVENTS, engine.n,
                                                              lambda: args)
            if generated and bound is not None:
                kernel_cache.kernel_continue_for(shape)(*args)
            elif generated:
                kernel_cache.kernel_from_for(shape)(*args)
            else:
                run_windows_from(driver.pattern, Positions(times, bits, pair_ok, rows), driver.slots,
                                 driver.attributes, lo, hi, driver._max_batch(times, bits),
                                 Channels(st_i, st_f, st_x, st_e, st_r))
        kept += len(rows)
        playing |= plays
        a = z
        # Free this chunk's arrays before the next one's are allocated: Arrow's pool then
        # hands their memory on (else each chunk's allocations asked the system for more:
        # ~14 ms of a first call over 3M events).
        rows = bits = times = pair_ok = args = rows_args = None
    if not kept or not playing:
        return None, 0
    fin = nv
    if driver.mode == 0:
        # Under any, trends that end at a final variable finish when the window closes
        # (coarse_grained._emit_window).
        x_is_min = np.asarray(c.x_is_min, bool)
        for v in sorted(b.automaton.final):
            if st_r[0, v]:
                st_i[0, fin] += st_i[0, v]
                st_f[0, fin] += st_f[0, v]
                st_x[0, fin] = np.where(x_is_min, np.minimum(st_x[0, fin], st_x[0, v]),
                                        np.maximum(st_x[0, fin], st_x[0, v]))
                st_r[0, fin] = True
    return KernelOut(st_i[:, fin].copy(), st_f[:, fin].copy(), st_x[:, fin].copy(), st_e.copy(),
                     st_r[:, fin].copy()), kept


def _table(engine: Any, driver: Any, out: KernelOut, kept: int, on_overflow: str,
           metadata: dict | None) -> pa.Table:
    from cogra.runtime.compiled.finish.by_column import Context, table_from_channels

    def one_pass(keyed: Any, slow: np.ndarray) -> pa.Table:
        raise _OnePass  # an exact re-run reads every event's position

    zero = np.zeros(1, np.int64)
    table = table_from_channels(Context.of(engine, driver, None), [engine._output_group({}, {})], zero, zero,
                                out, on_overflow=on_overflow, metadata=metadata, row_path=one_pass)
    if table is None:
        raise _OnePass  # an overflow to raise: the one-pass route words it
    engine.stats["windows"] = engine.stats["windows_fast"] = 1
    engine.stats["chunked_events"] = kept
    return table


def _empty(engine: Any, metadata: dict | None) -> pa.Table:
    from cogra.runtime.output import build_table

    b = engine.bound
    return build_table(b.query, b.schema, [], time_type=b.time_type, on_overflow="null", metadata=metadata)


__all__ = ["CHUNK_ROWS", "MIN_ROWS", "applies", "chunk_ends", "result_table"]
