"""A kept variable's totals, computed once for every sub-stream that holds its events.

In q3 (``PATTERN SEQ(Stock A+, Stock B+)``, ``WHERE [A.company] AND [B.company] AND
A.price > NEXT(A).price``) a sector with companies a and b has the sub-streams (a, a),
(a, b), (b, a) and (b, b).  A's rows -- its events' kept states, the Fenwick-tree work
that is most of the mixed-grained kernels -- depend only on A's own events, and those
are company a's in every sub-stream (a, *): the kernels computed the same rows once per
sub-stream.  Here they are computed once per *group* (the sub-streams that hold the same
events for A: one plain key and one value of A's variable key), in a run over one
*representative* sub-stream per group whose events play A only, which saves A's totals
after each batch.  Every sub-stream then runs without its events that play A alone and
without any Fenwick tree, loading A's total before each batch -- all other variables only
ever read A's totals.  The stock data's sectors hold two companies: A's work halves.

It applies (:func:`shared_variable`) under ``any`` when the only predicate that reads an
earlier event relates two events of one variable ``V`` (``V.x op NEXT(V).y``), ``V``
follows only itself (it comes first in the pattern) and is not final (its totals are
needed between events only).  Two kernels share:

* the per-window kernel (:func:`run_raw`) where a sub-stream's windows are disjoint
  (tumbling, or no WITHIN): an event lies in one window, the same time range in every
  sub-stream of its group, so V's total before an event is the representative's last
  total in that window (its time at least the window's start);
* the ring kernel of sliding windows (:func:`run_ring`): totals are lane vectors over the
  last ``W`` panes, saved with the pane they are current at; loading empties the lanes
  of panes that expired since.  The cache holds ``W`` lanes per event: it is used only
  within :data:`RING_CACHE_MAX_BYTES`.

Exactness.  Integer channels (exact mod 2**64) are the same sums in any order.  The
per-window kernel's floats carry a per-window power-of-two exponent: a loaded total is
scaled to the loading run's exponent, which is first raised to the cache row's if that
is higher (so loading only scales down: exact above the subnormal range, as the trees'
own lazy catch-up).  The ring kernel does not rescale (past 2**600 a segment goes to the
per-window kernel; if a representative does, nothing is shared).  The trees' summation
order differs (other ranks), which moves the float channels by rounding only: they are
the approximate channel, and the decode checks them with margins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from cogra.runtime.compiled.jit import njit

from cogra.runtime.compiled import channels
from cogra.runtime.compiled.channels import KernelOut
from cogra.runtime.compiled.codes import SHARE_NONE, SHARE_SAVE, SHARE_TAKE
from cogra.runtime.compiled.sharing.saved_totals import Share

ENABLED = True
"""Tests switch this off to compare with every sub-stream computing its own rows."""
RING_CACHE_MAX_BYTES = 1 << 28
"""The ring kernel's cache (``W`` lanes of the shared variable's live channels per event of
the representatives) must fit in this; beyond it nothing is shared."""


@dataclass
class RingShare:
    """The sharing arguments of :func:`~cogra.runtime.compiled.windows.mixed_one_pass.run_mixed_ring`: as
    :class:`Share`, with lane vectors per cache row (``ci``, ``cf``: rows x live channels x
    lanes) and the ring pane each row is current at (``cpane``).  ``positions``: the
    positions of all batches of the run this one belongs to (:func:`run_ring`), which
    decide whether the generated runs repay compiling (``sliding._generated``; 0: this
    run's own)."""

    var: int
    mode: int
    take_at: np.ndarray
    ci: np.ndarray
    cf: np.ndarray
    cpane: np.ndarray
    positions: int = 0

    @classmethod
    def none(cls) -> "RingShare":
        return cls(-1, SHARE_NONE, np.zeros(1, np.int64), np.zeros((1, 1, 1), np.uint64),
                   np.zeros((1, 1, 1), np.float64), np.zeros(1, np.int64))

    @classmethod
    def cache(cls, driver: Any, var: int, n_rows: int, lanes: int) -> "RingShare":
        """A cache of ``n_rows`` rows for variable ``var``'s live channels, *uninitialised*:
        the ring kernel writes the last row of every batch it runs, and rows are read only
        where :func:`_last_total_before` points, which is always such a row.  (Zeroing
        ~1 KB per event costs a memset of the whole cache in a worker that reuses its heap:
        15 MB per 32k-row chunk of q3.)  Tests fill it with garbage
        (:data:`channels.UNFILLED_POISON`: NaN floats, a wild count, a pane far in the past)."""
        n_i, n_f = int(driver.var_live_i[var, 0]), int(driver.var_live_f[var, 0])
        ci = np.empty((n_rows, max(1, n_i), lanes), np.uint64)
        cf = np.empty((n_rows, max(1, n_f), lanes), np.float64)
        cpane = np.empty(n_rows, np.int64)
        if channels.UNFILLED_POISON:
            ci.fill(np.uint64(0xDEADBEEFDEADBEEF))
            cf.fill(np.nan)
            cpane.fill(np.iinfo(np.int64).min // 2)
        return cls(var, SHARE_SAVE, np.zeros(1, np.int64), ci, cf, cpane)

    def taking(self, take_at: np.ndarray, positions: int = 0) -> "RingShare":
        return RingShare(self.var, SHARE_TAKE, take_at, self.ci, self.cf, self.cpane, positions)

    def batch_of(self, positions: int) -> "RingShare":
        """The same cache, for a batch of a run over ``positions`` in all."""
        return RingShare(self.var, self.mode, self.take_at, self.ci, self.cf, self.cpane, positions)

    def arguments(self) -> tuple:
        return (self.var, self.mode, self.take_at, self.ci, self.cf, self.cpane)


def shared_variable(driver: Any, engine: Any) -> int | None:
    """The variable whose totals the sub-streams of a group share, or None (see the module)."""
    if not ENABLED or driver.mode != 0 or not driver.kept or driver.kept != engine.bound.kept_variables:
        return None  # (kept for checks past the pair word: windows may have been dropped)
    us, vs = np.nonzero(driver.pair_of >= 0)
    if len(us) != 1 or us[0] != vs[0]:
        return None
    v = int(us[0])
    a = engine.bound.automaton
    if driver.kept != frozenset({v}) or set(a.pred[v]) - {v} or v in a.final:
        return None
    return v


@dataclass
class Groups:
    """The two runs' positions: the representatives' events that play ``v`` (``rep_pos``,
    ascending, group by group: group ``g``'s are ``rep_pos[rep_ptr[g]:rep_ptr[g + 1]]``)
    and the events that play another variable (``pos``); ``before_rep`` / ``before``
    count them before each position (window ranges map through them)."""

    v: int
    bit: np.uint64
    group: np.ndarray  # per segment
    representative: np.ndarray  # per segment
    rep_pos: np.ndarray
    before_rep: np.ndarray
    rep_ptr: np.ndarray
    pos: np.ndarray
    before: np.ndarray

    def rep_times(self, engine: Any, subs: Any) -> np.ndarray:
        return engine.time_np[subs.rows[self.rep_pos]]


def groups(driver: Any, engine: Any, subs: Any) -> Groups | None:
    """The shared variable's groups and the runs' positions, or None where nothing is
    shared (see the module)."""
    v = shared_variable(driver, engine)
    if v is None or subs.codes is None:
        return None
    group = _groups(engine, subs, v)
    first_seg = np.unique(group, return_index=True)[1]  # ascending, as group numbers are
    if len(first_seg) == len(group):
        return None  # no two sub-streams hold the same events for v
    representative = np.zeros(len(group), np.bool_)
    representative[first_seg] = True
    bit = np.uint64(1) << np.uint64(v)
    rep_pos, before_rep, pos, before = _split(subs.seg_ptr, representative, subs.bits, bit)
    rep_ptr = before_rep[np.append(subs.seg_ptr[first_seg], len(subs.rows))]
    return Groups(v, bit, group, representative, rep_pos, before_rep, rep_ptr, pos, before)


def run_raw(driver: Any, engine: Any, subs: Any, wins: Any) -> KernelOut | None:
    """Every window's channels with the per-window kernels (as :meth:`KernelDriver.run_raw`),
    or None where sharing does not apply: windows must be disjoint."""
    if wins.start is None or not len(wins.seg):
        return None
    seg, lo, hi = (np.asarray(a, np.int64) for a in (wins.seg, wins.lo, wins.hi))
    if np.any(np.diff(seg) < 0) or np.any((seg[1:] == seg[:-1]) & (lo[1:] < hi[:-1])):
        return None  # windows overlap (sliding): an event's row differs per window
    g = groups(driver, engine, subs)
    if g is None:
        return None

    # The representatives, their events playing v only: v's totals after each batch.
    rep_wins = np.flatnonzero(g.representative[seg])
    share = Share.cache(driver, g.v, len(g.rep_pos))
    driver.run_mixed(subs.rows[g.rep_pos], np.full(len(g.rep_pos), g.bit, np.uint64),
                   g.before_rep[lo[rep_wins]], g.before_rep[hi[rep_wins]], share)

    # Every sub-stream without its events that play v alone, loading v's totals.
    rows = subs.rows[g.pos]
    lo_r, hi_r = g.before[lo], g.before[hi]
    take_at = np.empty(len(g.pos), np.int64)
    if wins.size is None:  # one window per sub-stream: from the first event on
        start = np.full(len(seg), np.iinfo(np.int64).min, np.int64)
    else:
        start = np.asarray(wins.start, np.int64)
    _last_total_before(engine.time_np[rows], lo_r, hi_r, start, g.group[seg], g.rep_ptr,
                       g.rep_times(engine, subs), take_at)
    out = _run_generated(driver, share, rows, subs.bits[g.pos], lo_r, hi_r, take_at, driver.rescale_bound(lo, hi))
    if out is None:
        out = driver.run_mixed(rows, subs.bits[g.pos], lo_r, hi_r, share.taking(take_at))
    return out


def run_ring(driver: Any, engine: Any, subs: Any, seg: np.ndarray, lo: np.ndarray, hi: np.ndarray,
             lanes: int, run: Any) -> KernelOut | None:
    """Every window's channels with the ring kernel, or None where sharing does not apply
    or its cache would be too large.

    ``run(rows, plays, seg_ptr, windows, lo, hi, share)`` is the ring kernel's run over the
    positions ``rows`` (segments ``seg_ptr``) for the caller's windows ``windows``
    (indices), with ranges ``[lo, hi)`` over those positions and a :class:`RingShare`; it
    returns ``(KernelOut, windows to redo)`` -- every window to redo, for the representatives,
    where their trees would not fit in memory.

    The groups run in *batches* (:func:`_batches`): the representatives of a batch, then the
    sub-streams that load from them, so the cache rows are read back while they are still
    in the processor's last-level cache (q3: 480 bytes per row -- 60 lanes of A's float
    count --, a company's ~5 MB per Spark call of ~40k rows, the call's ~20 MB; batches of
    one company each: its loading runs 30 -> 20 ms per 200k rows, with two companies per
    batch no faster than one batch).  The cache is sized for the largest batch and reused.
    """
    g = groups(driver, engine, subs)
    if g is None:
        return None
    n_live = int(driver.var_live_i[g.v, 0] + driver.var_live_f[g.v, 0])
    row_bytes = max(1, n_live) * lanes * 8
    batches = _batches(g, row_bytes)
    cache_rows = max(int(g.rep_ptr[z] - g.rep_ptr[a]) for a, z in batches)
    if cache_rows * row_bytes > RING_CACHE_MAX_BYTES:
        return None
    share = RingShare.cache(driver, g.v, cache_rows, lanes)

    # The ring reads a window when the events pass its end, so it must not be handed a
    # window without events of its own (it would start past it): the representatives run
    # over their windows with an event that plays v, the sub-streams over their windows
    # with an event left -- the others hold no trend that ends (v is not final).
    rep_lo, rep_hi = g.before_rep[lo], g.before_rep[hi]
    rep_wins = np.flatnonzero(g.representative[seg] & (rep_hi > rep_lo))  # by segment: by group
    rows = subs.rows[g.pos]
    bits = subs.bits[g.pos]
    seg_ptr = g.before[subs.seg_ptr]
    take_at = np.empty(len(g.pos), np.int64)
    no_start = np.full(len(seg_ptr) - 1, np.iinfo(np.int64).min, np.int64)
    _last_total_before(engine.time_np[rows], seg_ptr[:-1], seg_ptr[1:], no_start, g.group, g.rep_ptr,
                       g.rep_times(engine, subs), take_at)
    lo_r, hi_r = g.before[lo], g.before[hi]
    wins = np.flatnonzero(hi_r > lo_r)  # by segment: by group, where batches are several
    rep_seg_ptr = g.before_rep[subs.seg_ptr]
    rep_win_group, win_group = g.group[seg[rep_wins]], g.group[seg[wins]]
    out = KernelOut.zeros(len(seg), driver.chan)
    for first, last in batches:
        a, z = int(g.rep_ptr[first]), int(g.rep_ptr[last])
        rw = rep_wins[np.searchsorted(rep_win_group, first):np.searchsorted(rep_win_group, last)]
        _, redo = run(subs.rows[g.rep_pos[a:z]], np.full(z - a, g.bit, np.uint64),
                      np.clip(rep_seg_ptr - a, 0, z - a), rw, rep_lo[rw] - a, rep_hi[rw] - a,
                      share.batch_of(len(g.rep_pos)))
        if redo.any():
            return None  # a representative's counts passed 2**600 (its totals stop there) or its trees do not fit
        lw = wins[np.searchsorted(win_group, first):np.searchsorted(win_group, last)]
        if not len(lw):
            continue
        p, q = (int(lo_r[lw].min()), int(hi_r[lw].max())) if len(batches) > 1 else (0, len(rows))
        part, redo = run(rows[p:q], bits[p:q], np.clip(seg_ptr - p, 0, q - p), lw, lo_r[lw] - p, hi_r[lw] - p,
                         share.taking(_rows_from(take_at[p:q], a), len(rows)))
        if redo.any():
            return None
        out.put(lw, part)
    return out


CACHE_BATCH_BYTES = 8 << 20
"""Groups join one batch of :func:`run_ring` until their cache rows pass this: a few
megabytes, to stay in a last-level cache (32 MB on the machine measured, shared with the
JVM), but batches of many small groups, each a call of both runs."""


def _batches(g: Groups, row_bytes: int) -> list[tuple[int, int]]:
    """Consecutive groups ``[first, last)`` whose representatives' cache rows add up to about
    :data:`CACHE_BATCH_BYTES` (a group larger than that alone).  One batch of all groups
    where the segments' group numbers ever decrease: a batch's loading positions must then
    form one range (in q3, and wherever the shared variable's key comes first among the
    keyed variables, they are ordered)."""
    n_groups = len(g.rep_ptr) - 1
    if n_groups <= 1 or np.any(np.diff(g.group) < 0):
        return [(0, n_groups)]
    out, first = [], 0
    for gg in range(1, n_groups + 1):
        if gg == n_groups or (g.rep_ptr[gg + 1] - g.rep_ptr[first]) * row_bytes > CACHE_BATCH_BYTES:
            out.append((first, gg))
            first = gg
    return out


def _rows_from(take_at: np.ndarray, first: int) -> np.ndarray:
    """Cache rows numbered from ``first`` (a batch's first representative row); -1 stays."""
    return np.where(take_at >= 0, take_at - first, take_at) if first else take_at


def _run_generated(driver: Any, share: Share, rows: np.ndarray, plays: np.ndarray, lo: np.ndarray,
                   hi: np.ndarray, take_at: np.ndarray, bound: float | None) -> KernelOut | None:
    """The run that loads the shared totals, with the kernel generated for the query's
    shape (no variable left reads an earlier event: the type-grained loop, unrolled, ~4x
    faster than the mixed kernel), or None where that does not pay off or has no sound
    rescale bound.  ``bound``: :meth:`KernelDriver.rescale_bound` of the sub-streams' own
    windows -- the loaded totals sum over events this run does not hold, so its windows'
    lengths would not bound them."""
    from cogra.runtime.compiled.codegen import background
    from cogra.runtime.compiled.codegen import kernel_cache

    live = tuple(tuple(int(k) for k in arr[1:1 + arr[0]]) for arr in (share.live_i, share.live_f, share.live_x))
    shape = driver.shape(loads=(share.var, *live))
    if bound is None:
        return None
    e = driver.engine

    def arguments(out: KernelOut) -> tuple:
        return (e.time_np[rows], plays, driver.pair_ok[rows], driver.a_int, driver.a_flt, driver.a_valid, driver.a_key,
                rows, lo, hi, bound, out.i, out.f, out.x, out.e, out.r,
                take_at, share.ci, share.cf, share.cx, share.ce, share.cr)

    if not background.generated_or_requested(shape, "kernel_loading", len(rows), driver.specialize_min_events(), e.n,
                                             lambda: arguments(KernelOut.zeros(0, driver.chan))):  # (the types)
        return None
    out = KernelOut.zeros(len(lo), driver.chan)
    kernel_cache.kernel_loading_for(shape)(*arguments(out))
    return out


@njit(cache=True)
def _split(seg_ptr, representative, bits, bit):
    """The positions of the two runs, in one pass: the representatives' positions that play
    ``bit`` (``rep_pos``) and the positions that play another variable (``pos``), with
    their counts before each position (``before_rep``, ``before``: ``n + 1`` entries)."""
    n = bits.shape[0]
    rep_pos = np.empty(n, np.int64)
    pos = np.empty(n, np.int64)
    before_rep = np.empty(n + 1, np.int64)
    before = np.empty(n + 1, np.int64)
    n_rep = 0
    n_pos = 0
    for s in range(seg_ptr.shape[0] - 1):
        rep = representative[s]
        for e in range(seg_ptr[s], seg_ptr[s + 1]):
            before_rep[e] = n_rep
            before[e] = n_pos
            if rep and bits[e] & bit:
                rep_pos[n_rep] = e
                n_rep += 1
            if bits[e] & ~bit:
                pos[n_pos] = e
                n_pos += 1
    before_rep[n] = n_rep
    before[n] = n_pos
    return rep_pos[:n_rep], before_rep, pos[:n_pos], before


@njit(cache=True)
def _last_total_before(times, lo, hi, start, group, rep_ptr, rep_times, take_at):
    """Per position ``e`` of range ``w`` (``[lo[w], hi[w])``, of group ``group[w]``): the
    last cache row of that group whose time lies in ``[start[w], times[e])`` -- the shared
    variable's total just before ``e``'s batch -- or -1.  The last row of a time is the last
    position of its batch, the one the kernels save.  For tumbling windows the range is a
    window and ``start`` its start: a row in that range is in the same window."""
    for w in range(lo.shape[0]):
        a, z = rep_ptr[group[w]], rep_ptr[group[w] + 1]
        first = a + np.searchsorted(rep_times[a:z], start[w])
        c = first
        for e in range(lo[w], hi[w]):
            while c < z and rep_times[c] < times[e]:
                c += 1
            take_at[e] = c - 1 if c > first else -1


def _groups(engine: Any, subs: Any, v: int) -> np.ndarray:
    """Per segment, a number naming the events it holds for ``v``: its plain key, and v's
    variable-key value if v has one -- by their codes (values may compare equal across
    sub-streams: 0.0 and -0.0)."""
    b = engine.bound
    keyed = list(b.keyed_states)
    first = b.automaton.states_of(b.automaton.state_variables[v])[0]  # a repeated variable's
    at = keyed.index(first) if first in keyed else None
    names: dict[tuple, int] = {}
    out = np.empty(len(subs.codes), np.int64)
    for s, (plain, var_codes) in enumerate(subs.codes):
        key = (plain, var_codes[at]) if at is not None else (plain,)
        out[s] = names.setdefault(key, len(names))
    return out


__all__ = ["CACHE_BATCH_BYTES", "ENABLED", "RING_CACHE_MAX_BYTES", "Groups", "RingShare", "Share", "groups",
           "run_raw", "run_ring", "shared_variable"]
