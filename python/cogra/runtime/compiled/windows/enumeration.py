"""Compiled window enumeration over integer times: two monotone pointers per segment, or
per-pane counts where windows span several panes (see :func:`_walk`)."""

from __future__ import annotations

import numpy as np

from cogra.runtime.arrow_arrays import empty
from cogra.runtime.compiled import scratch
from cogra.runtime.compiled.jit import NO_REFCOUNTS, njit


NO_WINDOW_YET = np.iinfo(np.int64).min
LAST_WINDOW = np.iinfo(np.int64).max


NO_ENDS = (np.zeros(0, np.int64), np.zeros(0, np.int64))
"""``ends`` of a walk that keeps every window (:func:`_walk`); the functions below take
None for it."""


PANE_WALK_MIN_SPAN = 4
"""Windows of fewer panes (tumbling ones: one) are walked by events: their few windows
per event cost little there."""
PANE_WALK_DENSITY = 4
"""A segment's block is walked by panes where its panes are at most this many per event
(plus two windows' worth): beyond it, empty panes would cost more than the events' walk."""


@njit(cache=True, **NO_REFCOUNTS)
def _window_range(times, b, start, size, lo, hi):
    """The positions ``[lo, hi)`` of the events in ``[start, start + size)``, advanced from
    pointers at or before them (times ascend up to position ``b``)."""
    while lo < b and times[lo] < start:
        lo += 1
    if hi < lo:
        hi = lo
    while hi < b and times[hi] < start + size:
        hi += 1
    return lo, hi


@njit(cache=True)
def _pane_counts(times, active, lo, b, step, k_start, n_panes, cnt, acnt):
    """Events (``cnt``) and active events (``acnt``) per pane ``k_start + j``, ``j <
    n_panes``, of positions ``lo ..`` (times ascending from pane ``k_start``); returns how
    many events were counted."""
    for j in range(n_panes + 1):
        cnt[j] = 0
        acnt[j] = 0
    limit = (k_start + n_panes) * step
    i = lo
    while i < b and times[i] < limit:
        j = times[i] // step - k_start
        cnt[j] += 1
        if active[i]:
            acnt[j] += 1
        i += 1
    return i - lo


@njit(cache=True)
def _walk(seg_ptr, times, active, size, step, k_to, emit, state, seg_out, start_out, lo_out, hi_out,
          first_start, last_final, cnt, acnt):
    """Counts (``emit`` False) or writes the windows ``k < k_to`` (start ``k * step``) of
    every segment, resuming where ``state`` says; times ascend within a segment.

    A walk that writes keeps only the windows that may hold a finished trend
    (:func:`may_finish` over :func:`trend_ends`' ``first_start``, ``last_final``) where
    those are given (not empty): q2 as printed has 2.68M windows per 1M rides, 1.16M of
    which may finish -- writing the others, then filtering and copying the rest, took as
    long as its kernel.  A count counts them all (it has no event ranges): a bound.
    Returns ``(written or counted, walked)``: ``walked`` counts every window of the walk,
    written or not (a count's both are its count).

    ``state[s]`` = (next event, first window not yet written, lo, hi) of segment ``s``:
    a walk that writes leaves it at the first window ``>= k_to``, so that windows can be
    enumerated block after block of starts (:mod:`blockwise`) in one pass over the
    events in all; a count leaves it alone.

    An event at ``t`` lies in windows ``k_lo(t) .. t // step``.  ``t // step`` is kept
    with the pane ``[k * step, (k + 1) * step)`` it holds for and recomputed only when an
    event leaves that pane (dense streams divide once per pane, not twice per event);
    when ``step`` divides ``size``, ``k_lo`` follows from it without a division.  The
    count needs no event ranges, so it skips the two range pointers.

    Where ``step`` divides ``size`` into at least :data:`PANE_WALK_MIN_SPAN` panes and
    ``cnt``/``acnt`` (scratch of at least the block's panes) are given, a segment dense
    enough is walked *by panes* instead (:func:`_pane_counts`): its events counted per
    pane once, every window's range and whether it holds an active event follow from the
    previous window's by the pane that leaves and the one that enters -- additions, no
    data-dependent branches.  The two range pointers mispredicted a branch every few
    windows: the sliding benchmark's 1.92M windows took 28 ms by events, ~10 ms by panes."""
    n = 0
    walked = 0
    whole = size % step == 0
    span = size // step
    filtered = first_start.shape[0] > 0
    by_panes = emit and whole and span >= PANE_WALK_MIN_SPAN and cnt.shape[0] > 0
    for s in range(seg_ptr.shape[0] - 1):
        b = seg_ptr[s + 1]
        e, next_k, lo, hi = state[s, 0], state[s, 1], state[s, 2], state[s, 3]
        if by_panes and e < b:
            # Windows k_start .. k_end of this block: from the next event's first window
            # (or the first not yet written) to the block's or the segment's last pane.
            k_start = times[e] // step - span + 1
            if k_start < next_k:
                k_start = next_k
            k_end = times[b - 1] // step
            if k_end > k_to - 1:
                k_end = k_to - 1
            width = k_end - k_start + 1
            if width > 0 and width + span + 1 <= cnt.shape[0]:
                lo, hi = _window_range(times, b, k_start * step, size, lo, hi)
                n_events = _pane_counts(times, active, lo, b, step, k_start, width + span, cnt, acnt)
                if width <= PANE_WALK_DENSITY * n_events + 2 * span + 64:
                    act = 0
                    for j in range(span):
                        act += acnt[j]
                    for j in range(width):
                        if act > 0:  # an active event in panes k .. k + span - 1
                            walked += 1
                            if not filtered or (hi > lo and first_start[lo] <= last_final[hi - 1]):
                                seg_out[n] = s
                                start_out[n] = (k_start + j) * step
                                lo_out[n] = lo
                                hi_out[n] = hi
                                n += 1
                        lo += cnt[j]  # pane k leaves, pane k + span enters
                        hi += cnt[j + span]
                        act += acnt[j + span] - acnt[j]
                    # lo, hi: window k_end + 1's; lo its first event, the first whose
                    # windows are not all written.
                    state[s, 0], state[s, 1], state[s, 2], state[s, 3] = lo, k_end + 1, lo, hi
                    continue
                # else too sparse for its panes: by events, from the window's pointers
        k_hi = 0
        pane_from = 1
        pane_to = 0  # empty: the first event computes its pane
        while e < b:
            if not active[e]:
                e += 1
                continue
            t = times[e]
            if t < pane_from or t >= pane_to:
                k_hi = t // step
                pane_from = k_hi * step
                pane_to = pane_from + step
            k_lo = k_hi - span + 1 if whole else (t - size) // step + 1
            k = k_lo if k_lo > next_k else next_k
            last = k_hi if k_hi < k_to else k_to - 1
            if not emit:
                if k <= last:
                    n += last - k + 1
            else:
                walked += last - k + 1 if k <= last else 0
                while k <= last:
                    start = k * step
                    lo, hi = _window_range(times, b, start, size, lo, hi)
                    if not filtered or (hi > lo and first_start[lo] <= last_final[hi - 1]):
                        seg_out[n] = s
                        start_out[n] = start
                        lo_out[n] = lo
                        hi_out[n] = hi
                        n += 1
                    k += 1
            if k_hi >= k_to:  # this event's later windows belong to the next block
                if next_k < k_to:
                    next_k = k_to
                break
            next_k = k_hi + 1
            e += 1
        if emit:
            state[s, 0], state[s, 1], state[s, 2], state[s, 3] = e, next_k, lo, hi
    return n, (walked if emit else n)


def walk_state(seg_ptr) -> np.ndarray:
    """:func:`_walk`'s state before the first window of every segment."""
    seg_ptr = np.asarray(seg_ptr, np.int64)
    state = np.empty((max(0, len(seg_ptr) - 1), 4), np.int64)
    state[:, 0] = state[:, 2] = state[:, 3] = seg_ptr[:-1]
    state[:, 1] = NO_WINDOW_YET
    return state


def count_windows(seg_ptr, times, active, size, step, k_to, state) -> int:
    """How many windows ``k < k_to`` a walk from ``state`` would write (unfiltered)."""
    empty = np.zeros(0, np.int64)
    return int(_walk(seg_ptr, times, active, size, step, k_to, False, state, empty, empty, empty, empty,
                     *NO_ENDS, empty, empty)[0])


@njit(cache=True)
def bound_windows(seg_ptr, times, size, step, k_to, state):
    """At least as many windows ``k < k_to`` as a walk from ``state`` writes, per segment
    from its next event's first window to its last event's pane (``O(segments)``, where
    :func:`count_windows` walks the events).  Exact for a segment with an event in every
    pane of the range, as a dense stream has."""
    n = 0
    for s in range(seg_ptr.shape[0] - 1):
        e, b = state[s, 0], seg_ptr[s + 1]
        if e >= b:
            continue
        k = (times[e] - size) // step + 1
        if k < state[s, 1]:
            k = state[s, 1]
        last = times[b - 1] // step
        if last > k_to - 1:
            last = k_to - 1
        if last >= k:
            n += last - k + 1
    return n


def write_windows(seg_ptr, times, active, size, step, k_to, state, n, ends=None, pool=None):
    """``((seg, start, lo, hi), walked)``: the windows ``k < k_to`` from ``state`` (advanced),
    or those of them that may finish (``ends``: :func:`trend_ends`), and how many windows
    the walk passed (all of them).  ``n``: at least that many (a count, or
    :func:`bound_windows`).  ``pool``: where the arrays may be working arrays, reused by the
    next call (:mod:`cogra.runtime.compiled.scratch`: blocks of windows, each done with before
    the next is written)."""
    out = tuple(scratch.take(pool, "walk." + name, (n,), np.int64) for name in ("seg", "start", "lo", "hi"))
    counts = _pane_scratch(n, size, step, pool)
    written, walked = _walk(seg_ptr, times, active, size, step, k_to, True, state, *out, *(ends or NO_ENDS),
                            *counts)
    return _trimmed(out, written), walked


def _pane_scratch(n: int, size: int, step: int, pool: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_walk`'s per-pane counts for a walk of at most ``n`` windows: a dense segment
    spans at most ``n`` of them plus a window's panes (others are walked by events)."""
    if size % step or size // step < PANE_WALK_MIN_SPAN:
        empty = np.zeros(0, np.int64)
        return empty, empty
    length = n + size // step + 2
    return scratch.take(pool, "walk.counts", (length,), np.int64), scratch.take(pool, "walk.active", (length,), np.int64)


def _trimmed(out: tuple, n: int) -> tuple:
    """The first ``n`` windows of ``out``; copied where that is less than half of them, so
    that the slack is not kept alive with the windows."""
    if n == len(out[0]):
        return out
    if 2 * n < len(out[0]):
        return tuple(a[:n].copy() for a in out)
    return tuple(a[:n] for a in out)


WALK_ONCE_WINDOWS_PER_EVENT = 8
""":func:`enumerate_int_windows` writes in one walk into arrays of :func:`window_bound`'s
size where that bound is at most this many windows per event (plus 4096): 256 bytes per
event at most, never touched where the bound is loose (``np.empty``), and copied down when
less than half of it is used.  Beyond it the windows are counted first."""


def enumerate_int_windows(seg_ptr, times, active, size, step, ends=None):
    """Every window of every segment, ``(seg, start, lo, hi)``: one walk that writes into
    arrays of a bound (:func:`window_bound`) where that bound is small, else a count and
    then a walk that writes (the count was ~40% of q3's enumeration, 2.3 of 5.8 ms per
    200k rows; q2, ~3.7 windows per event where it slides, counted first while the limit
    was two windows per event: its count pass, ~3 ms per 1M rows).  ``ends``: keep only
    the windows that may finish (:func:`_walk`)."""
    state = walk_state(seg_ptr)
    seg_ptr = np.asarray(seg_ptr, np.int64)
    bound = window_bound(seg_ptr, times, size, step)
    if bound > WALK_ONCE_WINDOWS_PER_EVENT * len(times) + 4096:
        n = count_windows(seg_ptr, times, active, size, step, LAST_WINDOW, state)
        return write_windows(seg_ptr, times, active, size, step, LAST_WINDOW, state, n, ends)[0]
    out = tuple(scratch.fresh(bound, np.int64) for _ in range(4))  # (huge pages where large)
    n, _ = _walk(seg_ptr, times, active, size, step, LAST_WINDOW, True, state, *out, *(ends or NO_ENDS),
                 *_pane_scratch(bound, size, step))
    return _trimmed(out, n)  # (a loose bound: its slack is not kept alive with the windows)


def window_bound(seg_ptr, times, size, step) -> int:
    """At least as many windows as :func:`_walk` writes over all segments: per segment,
    the window starts from its first event's first window to its last event's pane, at
    most ``ceil(size / step)`` per event (times ascend within a segment)."""
    first, end = seg_ptr[:-1], seg_ptr[1:]
    full = end > first
    first, end = first[full], end[full]
    t0, t1 = times[first], times[end - 1]
    by_time = t1 // step - ((t0 - size) // step + 1) + 1
    by_events = (end - first) * (-(-size // step))
    return int(np.minimum(by_time, by_events).sum())


@njit(cache=True)
def walk_ordered(seg, key):
    """Segments ascend, and ``key`` (a window's start, or its pane) ascends strictly within
    a segment: the order the window kernels walk (one pass, no temporaries)."""
    for w in range(1, seg.shape[0]):
        if seg[w] < seg[w - 1] or (seg[w] == seg[w - 1] and key[w] <= key[w - 1]):
            return False
    return True


def trend_ends(plays: np.ndarray, start_bits: np.uint64, final_bits: np.uint64) -> tuple[np.ndarray, np.ndarray]:
    """Per event position ``i``: the first position ``>= i`` whose event may play a start
    variable, and the last ``<= i`` whose event may play a final one (for
    :func:`may_finish`; once per evaluation, shared by its blocks of windows).  Allocated
    from Arrow's pool (:func:`cogra.runtime.arrow_arrays.empty`), not by numba."""
    n = plays.shape[0]
    first_start, last_final = empty(n + 1, np.int64), empty(n, np.int64)
    _trend_ends(plays, start_bits, final_bits, first_start, last_final)
    return first_start, last_final


@njit(cache=True)
def _trend_ends(plays, start_bits, final_bits, first_start, last_final):
    n = plays.shape[0]
    nxt = n
    first_start[n] = n
    for i in range(n - 1, -1, -1):
        if plays[i] & start_bits:
            nxt = i
        first_start[i] = nxt
    prev = -1
    for i in range(n):
        if plays[i] & final_bits:
            prev = i
        last_final[i] = prev


@njit(cache=True)
def playing_segments(seg_ptr, plays):
    """The segments ``s`` (positions ``seg_ptr[s]:seg_ptr[s+1]``) holding a position whose
    play bits are not zero: the windows of a query without WITHIN, one per such segment.
    Each scan stops at its first hit, where a per-position mask and a sum per segment
    read every position twice."""
    out = np.empty(seg_ptr.shape[0] - 1, np.int64)
    k = 0
    for s in range(seg_ptr.shape[0] - 1):
        for i in range(seg_ptr[s], seg_ptr[s + 1]):
            if plays[i] != 0:
                out[k] = s
                k += 1
                break
    return out[:k]


@njit(cache=True)
def windows_may_finish(plays, start_bits, final_bits, lo, hi):
    """:func:`may_finish` without :func:`trend_ends`, for few windows over many events (one
    window per sub-stream): from each window's ends, the first event that may start a
    trend and the last that may finish one, each scan stopping at its first hit."""
    keep = np.empty(lo.shape[0], np.bool_)
    for w in range(lo.shape[0]):
        first = hi[w]
        for i in range(lo[w], hi[w]):
            if plays[i] & start_bits:
                first = i
                break
        found = False
        for i in range(hi[w] - 1, first - 1, -1):
            if plays[i] & final_bits:
                found = True
                break
        keep[w] = found
    return keep


@njit(cache=True)
def may_finish(first_start, last_final, lo, hi):
    """Per window ``[lo, hi)``: whether an event in it may play a start variable and an
    event at or after that one a final variable -- a trend's first and last events
    (:func:`trend_ends`).  A window without both holds no finished trend, so it has no
    result row under any semantics."""
    keep = np.empty(lo.shape[0], np.bool_)
    for w in range(lo.shape[0]):
        keep[w] = hi[w] > lo[w] and first_start[lo[w]] <= last_final[hi[w] - 1]
    return keep


@njit(cache=True)
def kept_windows(keep, seg, start, lo, hi):
    """``(seg, start, lo, hi)`` of the windows ``keep`` marks, in order: one pass for the
    four arrays (numpy's boolean indexing took ~4x as long, one array at a time)."""
    n = 0
    for w in range(keep.shape[0]):
        n += keep[w]
    out = (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64))
    j = 0
    for w in range(keep.shape[0]):
        if keep[w]:
            out[0][j] = seg[w]
            out[1][j] = start[w]
            out[2][j] = lo[w]
            out[3][j] = hi[w]
            j += 1
    return out
