"""Sliding windows at (almost) the cost of tumbling ones.

``WITHIN d SLIDE s`` puts every event into ``d / s`` windows; evaluating each window
on its own (what :meth:`KernelDriver.run` does) costs ``d / s`` times the tumbling
query.  When ``s`` divides ``d``, a window is a run of ``d / s`` *panes* of length
``s``, and :mod:`cogra.runtime.compiled.windows.pane_maps` shares the panes' work between
the windows: per event it does ``nv + 1`` state
updates instead of ``d / s``.

It applies where :func:`plan` says so: the compiled type- and pattern-grained
executors without kept variables (the mixed-grained executor keeps events, whose
per-window cost is bounded already), integer windows, ``s | d``, at least
:data:`MIN_PANES_PER_WINDOW` panes and :data:`MIN_EVENTS_PER_WINDOW` events per
window (below that the direct kernel is as cheap).  A segment whose floats turn
non-finite anyway is evaluated by the direct kernel.  Decoding is shared with the
direct kernel, so a window whose values cannot be proven exact still comes back
``UNDECIDED`` and the engine re-runs it in Python.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from cogra.runtime.compiled.jit import njit

from cogra.runtime.compiled.windows import mixed_one_pass
from cogra.runtime.compiled.windows import mixed_grouped
from cogra.runtime.compiled import scratch
from cogra.runtime.compiled.sharing import kept_totals
from cogra.runtime.compiled.channels import KernelOut
from cogra.runtime.compiled.kernel_args import Channels, Positions
from cogra.runtime.compiled.codes import SHARE_SAVE, SHARE_TAKE
from cogra.runtime.compiled.windows.enumeration import walk_ordered
from cogra.runtime.windows import is_integral

MIN_PANES_PER_WINDOW = 8
"""Sharing pays off from about ``nv + 1`` panes per window; tests lower this to 1."""
GROUP_LANES = 16
"""Mixed-grained sliding windows evaluated per pass (:mod:`mixed_grouped`).  q3 as printed
(200k events, 60 windows per event) took 1.97 / 1.77 / 1.74 / 1.68 s with 8 / 12 / 16 / 24
(per-window kernel: 4.2 s): the per-pass cost (traversal, ranks) and the per-lane cost
(the lanes' arithmetic) balance in that range."""
RING = True
"""Mixed-grained sliding windows use the ring kernel (:mod:`mixed_one_pass`) where it fits;
tests turn it off to check the grouped kernel (:mod:`mixed_grouped`)."""
RING_MAX_BYTES = 1 << 29
"""The ring kernel's trees and stored vectors (``W`` lanes per channel over a block of
twice the live positions) must fit in this; beyond it the grouped kernel's ``G + 1``
lanes are used."""
SPECIALIZE_MIN_EVENTS = 100_000_000
"""Inputs at least this large compile the sharing kernel generated for the query's shape
(:func:`kernel_cache.sliding_for`) in the foreground: ~1.5x faster (q1 over 1M events: 0.09
instead of 0.15 s), but compiling it takes ~9 s the first time a shape is seen on a
machine (numba then caches it on disk), which one call repays only from ~150M events.
Smaller inputs run it once it is compiled (:func:`kernel_cache.is_compiled`) and request its
compile in the background (:func:`background.generated_or_requested`).  Tests lower it."""
MIN_EVENTS_PER_WINDOW = 160
"""The sharing kernel costs about 1 µs per window and per pane, the per-window kernel
about 10 ns per (window, event) pair (measured on the stock data, one variable): below
this many events per window on average the per-window kernel is cheaper.  Tests
lower it to 0."""


def plan(driver: Any, engine: Any, lo: np.ndarray, hi: np.ndarray) -> tuple[int, int] | None:
    """``(slide, panes per window)`` when the sharing kernel applies and pays off, else None."""
    spec = engine.windows
    if driver.kept or spec.size is None or not is_integral(spec, engine.bound.time_type):
        return None
    size, slide = int(spec.size), int(spec.step)
    if size % slide or size // slide < MIN_PANES_PER_WINDOW:
        return None
    # The mean window length from two sums, without a temporary of every window's length.
    if len(lo) == 0 or (int(hi.sum()) - int(lo.sum())) / len(lo) < MIN_EVENTS_PER_WINDOW:
        return None
    return slide, size // slide


def run_raw(driver: Any, engine: Any, subs: Any, seg: np.ndarray, start: np.ndarray,
            lo: np.ndarray, hi: np.ndarray) -> KernelOut | None:
    """The channels of every window (as :meth:`KernelDriver.run_raw`), or None if not applicable.

    ``start`` holds each window's start (integral windows).  Only for a query whose
    physical plan offers a shared run (:mod:`cogra.runtime.physical`).
    """
    if driver.kept:
        return _run_mixed(driver, engine, subs, seg, start, lo, hi)
    shape = plan(driver, engine, lo, hi)
    if shape is None:
        return None
    from cogra.runtime.compiled.windows import pane_maps

    kernel = pane_maps.run_sliding
    from cogra.runtime.compiled.codegen import background
    from cogra.runtime.compiled.codegen import kernel_cache

    kernel_shape = driver.shape()
    slide, panes = shape
    seg, lo, hi = (np.asarray(a, np.int64) for a in (seg, lo, hi))
    distinct = _distinct_windows(engine.scratch, seg, np.asarray(start, np.int64), lo, hi, slide)
    if distinct is None:
        return None
    row_first, row_k = distinct
    rows, plays = subs.rows, subs.bits
    times = driver.times_of(rows, plays)
    c = driver.chan
    # The kernel writes a row per distinct window, shared by the windows that repeat it
    # (KernelOut.row_first); the channels are the engine's working arrays, reused by its
    # next block (cogra.runtime.compiled.scratch).
    out = KernelOut.unfilled(len(row_k), c, engine.scratch)
    out.row_first = row_first
    seg_done = np.ones(len(subs.seg_ptr) - 1, np.bool_)
    max_panes = _max_panes(subs.seg_ptr, panes)

    def arguments(generated: bool) -> tuple:
        # (pair_ok, max_batch: per evaluation, not per block of windows: blockwise)
        return (
            driver.pattern, Positions(times, plays, driver.pair_ok_of(rows, plays), rows), driver.slots,
            driver.attributes, seg, lo, hi, row_first, row_k, slide, panes,
            driver.max_batch_of(rows, plays), max_panes, Channels(out.i, out.f, out.x, out.e, out.r), seg_done,
        )

    generated = background.generated_or_requested(kernel_shape, "run_sliding", len(rows), SPECIALIZE_MIN_EVENTS,
                                                  engine.n, lambda: arguments(True))
    if generated:
        # Large inputs (or any, once compiled): the same kernel with its pane update and
        # map application generated for the query's shape (codegen; cached on disk).
        kernel = kernel_cache.sliding_for(kernel_shape)
    kernel(*arguments(generated))
    # Segments whose floats turned non-finite: their rows are meaningless; the direct
    # kernel (which rescales per window) evaluates them instead.
    if not seg_done.all():  # (per segment: no pass over the windows where none failed)
        redo = np.flatnonzero(~seg_done[seg[row_first[:-1]]])
        firsts = row_first[redo]
        out.put(redo, driver.run_raw(subs, lo[firsts], hi[firsts]))
    return out


def _distinct_windows(pool: dict | None, seg: np.ndarray, start: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                      slide: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(row_first, row_k)``: the first window of each run of windows over the same events
    (one more entry: the number of windows) and its pane ``k``; None unless the windows
    come by segment with ``k`` ascending (the order the kernel walks them in).  Arrays from
    ``pool`` (:mod:`scratch`).

    A window over the same events as the window before it (a sparse sub-stream sliding
    over empty panes: 42% of the sliding benchmark's windows) has the same channels.  The
    kernel used to copy its predecessor's row there, behind a branch it mispredicted
    about every other window; then it ran the distinct windows alone, and their rows were
    copied to the repeats afterwards.  Now a distinct window's row is the repeats' too
    (:attr:`KernelOut.row_first`): the kernel's output is ~40% smaller, nothing is copied,
    and the finish decodes each row once (the sliding benchmark's 100k events: ~3.3 words
    of listing per window before -- each window's segment, pane, range and row, or its
    place among the repeats -- ~1.6 now)."""
    n = len(seg)
    row_first = scratch.take(pool, "sliding.row_first", (n + 1,), np.int64)
    row_k = scratch.take(pool, "sliding.row_k", (n,), np.int64)
    m = _distinct_in_walk_order(seg, start, lo, hi, slide, row_first, row_k)
    if m < 0:
        return None
    return row_first[:m + 1], row_k[:m]


@njit(cache=True)
def _distinct_in_walk_order(seg, start, lo, hi, slide, row_first, row_k):
    """:func:`_distinct_windows` in one pass: the number of distinct windows, or -1 if out
    of walk order.  ``k`` follows the previous window's where the start moved by one slide
    (a division per window cost what numpy's vectorised one did for all).  No branch on
    whether a window repeats (unpredictable): every window is written at the next free
    place, which only a distinct one takes."""
    m = 0
    k = 0
    for w in range(seg.shape[0]):
        repeat = False
        if w > 0 and seg[w] == seg[w - 1]:
            before = k
            k = k + 1 if start[w] - start[w - 1] == slide else start[w] // slide
            if k <= before:
                return -1
            repeat = (lo[w] == lo[w - 1]) & (hi[w] == hi[w - 1])
        else:
            if w > 0 and seg[w] < seg[w - 1]:
                return -1
            k = start[w] // slide
        row_first[m] = w
        row_k[m] = k
        m += 1 - np.int64(repeat)
    row_first[m] = seg.shape[0]
    return m


def _in_walk_order(seg: np.ndarray, start: np.ndarray, slide: int):
    """``(segment, pane k)`` per window as int64 arrays, or ``(None, None)`` unless the
    windows come by segment with ``k`` ascending (the order both kernels walk them in)."""
    seg = np.asarray(seg, np.int64)
    k = np.asarray(start, np.int64) // slide
    if not walk_ordered(seg, k):
        return None, None
    return seg, k


def _run_mixed(driver: Any, engine: Any, subs: Any, seg: np.ndarray, start: np.ndarray,
               lo: np.ndarray, hi: np.ndarray) -> KernelOut | None:
    """Mixed-grained sliding windows: all of a sub-stream's windows in one pass over lanes
    by start pane (:mod:`cogra.runtime.compiled.windows.mixed_one_pass`) where its memory fits, else a
    group of windows per pass (:mod:`cogra.runtime.compiled.windows.mixed_grouped`); None where
    neither applies."""
    spec = engine.windows
    c = driver.chan
    if (driver.mode != 0 or len(c.x_is_min) or spec.size is None
            or not is_integral(spec, engine.bound.time_type) or not len(lo)):
        return None
    size, slide = int(spec.size), int(spec.step)
    if size % slide or size // slide < MIN_PANES_PER_WINDOW:
        return None
    seg, k = _in_walk_order(seg, start, slide)
    if seg is None:
        return None
    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    panes = size // slide
    n_live = int(driver.live_i[:, 0].max() + driver.live_f[:, 0].max())

    def fits(span: int) -> bool:
        return mixed_one_pass.tree_bytes(len(driver.pair_flags), n_live, panes, span) <= RING_MAX_BYTES

    if RING:
        def ring(rows, plays, seg_ptr, windows, w_lo, w_hi, share):
            times = engine.time_np[rows]
            span = None
            if share.mode == SHARE_SAVE:
                # Only the representatives keep trees: their own span must fit (it is at most
                # their sub-streams'; the loading runs keep none, so theirs is never needed).
                span = _max_live_span(times // slide, seg_ptr, panes)
                if not fits(span):
                    return None, np.ones(max(1, len(windows)), np.bool_)  # nothing is shared
            return _run_ring(driver, engine, rows, plays, seg_ptr, seg[windows], k[windows], w_lo, w_hi,
                             slide, panes, share, span=span, times=times)

        out = kept_totals.run_ring(driver, engine, subs, seg, lo, hi, panes, ring)
        if out is not None:
            return out
    rows = subs.rows
    times = engine.time_np[rows]
    ring_span = _max_live_span(times // slide, subs.seg_ptr, panes) if RING else 0
    if RING and fits(ring_span):
        out, redo = _run_ring(driver, engine, rows, subs.bits, subs.seg_ptr, seg, k, lo, hi, slide, panes,
                              kept_totals.RingShare.none(), span=ring_span, times=times)
    else:
        out = KernelOut.zeros(len(seg), c)
        redo = np.zeros(len(seg), np.bool_)
        max_batch = driver._max_batch(times, subs.bits)
        group = min(panes, GROUP_LANES)
        # The longest span a pass covers: a window to the last window of its group.
        key = seg * (int(k.max() - k.min()) + 2 * group + 2) + (k - k.min())
        last = np.searchsorted(key, key + group - 1, side="right") - 1
        max_span = max(1, int((hi[last] - lo).max()))
        p = driver.pair_arrays
        mixed_grouped.run_mixed_sliding(
            driver.pattern, Positions(times, subs.bits, driver.pair_ok[rows], rows), driver.slots,
            driver.attributes, p, seg, k, lo, hi, slide, size, group, max_batch, max_span,
            Channels(out.i, out.f, out.x, out.e, out.r), redo,
        )
    again = np.flatnonzero(redo)
    if len(again):
        out.put(again, driver.run_raw(subs, lo[again], hi[again]))
    return out


def _run_ring(driver: Any, engine: Any, rows: np.ndarray, plays: np.ndarray, seg_ptr: np.ndarray,
              seg: np.ndarray, k: np.ndarray, lo: np.ndarray, hi: np.ndarray, slide: int, panes: int,
              share: Any, span: int | None = None, times: np.ndarray | None = None
              ) -> tuple[KernelOut, np.ndarray]:
    """The ring kernel over the positions ``rows`` (segments ``seg_ptr``), windows ``(seg, k)``
    with ranges ``[lo, hi)`` over them; ``share``: a :class:`kept_totals.RingShare` (taking:
    no indexed pair is left); ``span``: :func:`_max_live_span` of these positions, and
    ``times`` their times, if known.  ``(channels, windows to redo)``."""
    c = driver.chan
    times = engine.time_np[rows] if times is None else times
    if share.mode == SHARE_TAKE:
        done = _run_ring_loading(driver, times, rows, plays, seg, k, lo, hi, slide, panes, share)
        if done is not None:
            return done
    elif share.mode == SHARE_SAVE:
        done = _run_ring_saving(driver, times, rows, plays, seg_ptr, seg, k, lo, hi, slide, panes, share, span)
        if done is not None:
            return done
    out = KernelOut.unfilled(len(seg), c)  # each window's row is written or marked to redo
    redo = np.zeros(len(seg), np.bool_)
    p = driver.no_pair_arrays if share.mode == SHARE_TAKE else driver.pair_arrays
    widest, pred_bit = _preds_widest_first(driver)
    mixed_one_pass.run_mixed_ring(
        driver.pattern._replace(pred_idx=widest), pred_bit, Positions(times, plays, driver.pair_ok[rows], rows),
        driver.slots, driver.attributes, p, driver.var_live_i, driver.var_live_f,
        seg, k, lo, hi, slide, panes, driver._max_batch(times, plays),
        span if span is not None else _max_live_span(times // slide, seg_ptr, panes),
        Channels(out.i, out.f, out.x, out.e, out.r), redo, share.arguments(),
    )
    return out, redo


def _shared_shape(driver: Any, var: int):
    """The query's shape for the ring's generated runs of shared variable ``var``: one
    module with the loading run (``loads``) and the representatives' run (``saves``).
    Built once per executor and variable (the ring asks once per batch of groups)."""
    memo = ("shared", var)
    if memo not in driver.shapes:
        driver.shapes[memo] = _build_shared_shape(driver, var)
    return driver.shapes[memo]


def _build_shared_shape(driver: Any, var: int):
    shape = driver.shape(live=True)
    live_i, live_f = shape.live
    p = driver.pair_arrays
    tree_i, tree_f = (tuple(int(c) for c in arr[0, 1:1 + arr[0, 0]]) for arr in (p.live_i, p.live_f))
    return dataclasses.replace(shape, loads=(var, live_i[var], live_f[var], ()),
                               saves=(var, int(p.pair_flags[0]), tree_i, tree_f))


def _generated(driver: Any, var: int, function: str, n_positions: int) -> tuple[Any, bool] | None:
    """``(shape, whether to run its generated function)`` for the ring's generated runs of
    shared variable ``var``: run where the input is large enough to repay compiling it or
    it is compiled already (:func:`kernel_cache.use_generated`); None where it is neither and
    the engine's call too small to request its compile in the background either
    (:data:`background.BACKGROUND_MIN_EVENTS`: the call's events, not the run's positions)."""
    from cogra.runtime.compiled.codegen import background
    from cogra.runtime.compiled.codegen import kernel_cache

    shape = _shared_shape(driver, var)
    generated = kernel_cache.use_generated(shape, function, n_positions, driver.specialize_min_events())
    if not generated and not background.worth_requesting(driver.engine.n):
        return None
    return shape, generated


def _run_generated(shape: Any, generated: bool, function: str, args: tuple) -> bool:
    """Run the shape's generated ``function`` on ``args``, or (not ``generated``) request its
    compile in the background for the next call -- a Spark task's slice, probably.  Whether
    it ran."""
    from cogra.runtime.compiled.codegen import background
    from cogra.runtime.compiled.codegen import kernel_cache

    if not generated:
        background.compile_in_background(shape, function, args)
        return False
    getattr(kernel_cache, f"{function}_for")(shape)(*args)
    return True


def _run_ring_loading(driver: Any, times: np.ndarray, rows: np.ndarray, plays: np.ndarray, seg: np.ndarray,
                      k: np.ndarray, lo: np.ndarray, hi: np.ndarray, slide: int, panes: int,
                      share: Any) -> tuple[KernelOut, np.ndarray] | None:
    """:func:`_run_ring` loading the shared variable, with the run generated for the query's
    shape (:mod:`pane_loading`, ~2x faster), or None: where the input is too small to repay
    compiling it (unless compiled already; from :data:`background.BACKGROUND_MIN_EVENTS`
    events in the call on, it is compiled in the background for the next call), or a
    batch it does not take (the generic kernel runs instead).  Its windows need nothing redone then."""
    found = _generated(driver, share.var, "ring_loading", share.positions or len(rows))  # (a batch: its run's)
    if found is None:
        return None
    out = KernelOut.unfilled(len(seg), driver.chan)
    redo = np.zeros(len(seg), np.bool_)
    args = (times, plays, driver.pair_ok[rows], driver.a_int, driver.a_flt, driver.a_valid, rows, seg, k, lo, hi,
            slide, panes, out.i, out.f, out.e, out.r, redo, share.take_at, share.ci, share.cf, share.cpane)
    if not _run_generated(*found, "ring_loading", args) or redo.any():
        return None
    return out, redo


def _run_ring_saving(driver: Any, times: np.ndarray, rows: np.ndarray, plays: np.ndarray, seg_ptr: np.ndarray,
                     seg: np.ndarray, k: np.ndarray, lo: np.ndarray, hi: np.ndarray, slide: int, panes: int,
                     share: Any, span: int | None) -> tuple[KernelOut, np.ndarray] | None:
    """:func:`_run_ring` over the representatives (saving the shared variable's totals), with
    the run generated for the query's shape (:mod:`pane_loading`; q3's 87 -> 66 ms), or None
    where it does not apply (the shared variable, which the representatives' events play
    alone, must start trends) or is not worth compiling
    (as :func:`_run_ring_loading`).  Its windows' channels are zeros, as the generic kernel's
    for a representative: they are never read."""
    v = share.var  # (kept_totals.shared_variable: v's one pair is with itself, its only predecessor)
    if v not in driver.engine.bound.automaton.start or driver.pair_all:
        return None  # (the generated run reads every event's pair through its trees)
    found = _generated(driver, v, "ring_saving", share.positions or len(rows))  # (a batch: its run's)
    if found is None:
        return None
    redo = np.zeros(len(seg), np.bool_)
    p = driver.pair_arrays
    args = (times, plays, driver.pair_ok[rows], driver.a_int, driver.a_flt, driver.a_valid, rows,
            p.pair_flags, p.live_i, p.live_f, *p.ranks, seg, k, lo, hi, slide, panes,
            driver._max_batch(times, plays),
            span if span is not None else _max_live_span(times // slide, seg_ptr, panes),
            redo, share.ci, share.cf, share.cpane)
    if not _run_generated(*found, "ring_saving", args):
        return None
    return KernelOut.zeros(len(seg), driver.chan), redo


def _preds_widest_first(driver: Any) -> tuple[np.ndarray, np.ndarray]:
    """``pred_idx`` with each variable's predecessors ordered by their live channels, most
    first (the ring kernel copies a row from its first source when that has all its
    channels: see :func:`mixed_one_pass.run_mixed_ring`), and each one's pair bit (its
    position in ``driver.pred_idx``, :func:`cogra.runtime.compiled.codes.edge_bits`)."""
    width = driver.var_live_i[:, 0] + driver.var_live_f[:, 0]
    order = [sorted(range(a, z), key=lambda pp: -width[driver.pred_idx[pp]])
             for a, z in zip(driver.pred_ptr[:-1], driver.pred_ptr[1:])]
    edges = np.asarray([pp for row in order for pp in row], np.int64)
    return driver.pred_idx[edges], edges


def _max_live_span(pane: np.ndarray, seg_ptr: np.ndarray, per_window: int) -> int:
    """The most positions of one segment in ``per_window`` consecutive panes (ending at
    an event's pane): what the ring kernel's trees hold at once."""
    return max(1, int(_live_span(np.asarray(pane, np.int64), np.asarray(seg_ptr, np.int64), per_window)))


@njit(cache=True)
def _live_span(pane, seg_ptr, per_window):
    """:func:`_max_live_span` in one pass: per segment, a pointer to the oldest position
    still within ``per_window`` panes of the current one (panes ascend in a segment)."""
    best = 0
    for s in range(seg_ptr.shape[0] - 1):
        first = seg_ptr[s]
        e = seg_ptr[s]
        while e < seg_ptr[s + 1]:
            last = e + 1  # the end of e's pane
            while last < seg_ptr[s + 1] and pane[last] == pane[e]:
                last += 1
            while pane[first] <= pane[e] - per_window:
                first += 1
            if last - first > best:
                best = last - first
            e = last
    return best


def _max_panes(seg_ptr: np.ndarray, per_window: int) -> int:
    """A bound on the panes either stack holds.

    After a flip at window ``k`` the next windows start before ``k + per_window`` and so
    add at most ``per_window - 1`` panes; the window that flips next adds its own
    ``per_window`` (events between two windows are skipped).  A stack holds only panes
    with events, so neither exceeds a segment's events either (a bound from the segment
    sizes alone: counting distinct panes took 7 ms per 1M events).
    """
    longest = int(np.max(np.diff(seg_ptr))) if len(seg_ptr) > 1 else 0
    return max(1, min(longest, 3 * per_window))


__all__ = ["MIN_EVENTS_PER_WINDOW", "MIN_PANES_PER_WINDOW", "SPECIALIZE_MIN_EVENTS", "plan", "run_raw"]
