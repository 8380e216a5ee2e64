"""A kept variable's rows, computed once for every sub-stream that holds its events.

In q3 (``PATTERN SEQ(Stock A+, Stock B+)``, ``WHERE [A.company] AND [B.company] AND
A.price > NEXT(A).price``) a sector with companies a and b has the sub-streams (a, a),
(a, b), (b, a) and (b, b).  A's rows -- its events' kept states, the Fenwick-tree work
that is most of the mixed-grained kernel -- depend only on A's own events, and those are
company a's in every sub-stream (a, *): the kernel computed the same rows once per
sub-stream.  Here they are computed once per *group* (the sub-streams that hold the same
events for A: one plain key and one value of A's variable key), in a run over one
representative sub-stream per group whose events play A only, and saved; every
sub-stream then reads them and runs without any Fenwick tree (no other predicate reads an
earlier event).  The stock data's sectors hold two companies: A's work halves.

It applies (:func:`shared_variable`) under ``any`` when the only predicate that reads an
earlier event relates two events of one variable ``V`` (``V.x op NEXT(V).y``), ``V``
follows only itself (it comes first in the pattern, or alone), and every sub-stream's
windows are disjoint (tumbling windows, or no WITHIN): an event then lies in one window,
the same time range in every sub-stream of its group (windows are aligned to time, not to
a sub-stream -- checked per event below), so its row depends on nothing else.

Exactness.  Integer channels (exact mod 2**64) are the same sums in any order.  Floats
carry a per-window power-of-two exponent: the representative run's exponent at a batch
is at most the sub-stream's (its rows and totals are among the sub-stream's, and both
rescale when the largest passes the same bound), so a read row is multiplied by
``2**-k`` -- exact above the subnormal range, as the trees' own lazy catch-up.  The
trees' summation order differs (other ranks), which moves the float channels by rounding
only: they are the approximate channel, and the decode checks them with margins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from cogra.runtime.fast.channels import KernelOut
from cogra.runtime.fast.mixed_kernels import SHARE_NONE, SHARE_SAVE, SHARE_TAKE

ENABLED = True
"""Tests switch this off to compare with every sub-stream computing its own rows."""


@dataclass
class Share:
    """The sharing arguments of :func:`~cogra.runtime.fast.mixed_kernels.run_mixed_windows`.

    ``take_at``: per position of the run, its cache row (read under ``SHARE_TAKE``; under
    ``SHARE_SAVE`` position ``e`` writes cache row ``e``).  The cache holds the shared
    variable's live channels (``live_*``: ``[n, channel_1, ..]``) per row.
    """

    var: int
    mode: int
    take_at: np.ndarray
    ci: np.ndarray
    cf: np.ndarray
    cx: np.ndarray
    ce: np.ndarray
    cr: np.ndarray
    live_i: np.ndarray
    live_f: np.ndarray
    live_x: np.ndarray

    @classmethod
    def none(cls, fast: Any) -> "Share":
        return cls.cache(fast, 0, 0, SHARE_NONE)

    @classmethod
    def cache(cls, fast: Any, var: int, n_rows: int, mode: int = SHARE_SAVE) -> "Share":
        """An empty cache of ``n_rows`` rows for variable ``var``'s live channels."""
        li, lf, lx = fast.var_live_i[var], fast.var_live_f[var], fast.var_live_x[var]
        return cls(var if mode != SHARE_NONE else -1, mode, np.zeros(1, np.int64),
                   np.zeros((n_rows, max(1, int(li[0]))), np.uint64),
                   np.zeros((n_rows, max(1, int(lf[0]))), np.float64),
                   np.zeros((n_rows, max(1, int(lx[0]))), np.int64),
                   np.zeros(n_rows, np.int64), np.zeros(n_rows, np.bool_), li, lf, lx)

    def taking(self, take_at: np.ndarray) -> "Share":
        """The same cache, read at ``take_at``."""
        return Share(self.var, SHARE_TAKE, take_at, self.ci, self.cf, self.cx, self.ce, self.cr,
                     self.live_i, self.live_f, self.live_x)

    def arguments(self) -> tuple:
        return (self.var, self.mode, self.take_at, self.ci, self.cf, self.cx, self.ce, self.cr,
                self.live_i, self.live_f, self.live_x)


def shared_variable(fast: Any, engine: Any) -> int | None:
    """The variable whose totals the sub-streams of a group share, or None (see the module)."""
    if not ENABLED or fast.mode != 0 or not fast.kept:
        return None
    us, vs = np.nonzero(fast.pair_of >= 0)
    if len(us) != 1 or us[0] != vs[0]:
        return None
    v = int(us[0])
    a = engine.bound.automaton
    if fast.kept != frozenset({v}) or set(a.pred[v]) - {v} or v in a.final:
        return None
    return v


def run_raw(fast: Any, engine: Any, subs: Any, wins: Any) -> KernelOut | None:
    """Every window's channels (as :meth:`FastExecutor.run_raw`), or None where sharing
    does not apply or would share nothing."""
    v = shared_variable(fast, engine)
    if v is None or subs.keys is None or wins.start is None or not len(wins.seg):
        return None
    seg, lo, hi = (np.asarray(a, np.int64) for a in (wins.seg, wins.lo, wins.hi))
    if np.any(np.diff(seg) < 0) or np.any((seg[1:] == seg[:-1]) & (lo[1:] < hi[:-1])):
        return None  # windows overlap (sliding): an event's row differs per window
    group = _groups(engine, subs, v)
    first_seg = np.unique(group, return_index=True)[1]  # ascending, as group numbers are
    if len(first_seg) == len(group):
        return None  # no two sub-streams hold the same events for v
    representative = np.zeros(len(group), np.bool_)
    representative[first_seg] = True

    bit = np.uint64(1) << np.uint64(v)
    rep_pos, rep_lo, rep_hi, pos, lo_r, hi_r = _split(lo, hi, seg, representative, subs.bits, bit)

    # The representatives, their events playing v only: v's totals after each batch.
    share = Share.cache(fast, v, len(rep_pos))
    fast.run_mixed(subs.rows[rep_pos], np.full(len(rep_pos), bit, np.uint64), rep_lo, rep_hi, share)
    rep_ptr = np.zeros(len(first_seg) + 1, np.int64)
    rep_ptr[1:] = np.cumsum(np.bincount(group[seg[representative[seg]]], weights=rep_hi - rep_lo,
                                        minlength=len(first_seg))).astype(np.int64)
    rep_times = engine.time_np[subs.rows[rep_pos]]

    # Every sub-stream without its events that play v alone, loading v's totals.
    rows = subs.rows[pos]
    take_at = np.empty(len(pos), np.int64)
    if wins.size is None:  # one window per sub-stream: from the first event on
        start = np.full(len(seg), np.iinfo(np.int64).min, np.int64)
    else:
        start = np.asarray(wins.start, np.int64)
    _last_total_before(engine.time_np[rows], lo_r, hi_r, start, group[seg], rep_ptr, rep_times, take_at)
    out = _run_generated(fast, share, rows, subs.bits[pos], lo_r, hi_r, take_at)
    if out is None:
        out = fast.run_mixed(rows, subs.bits[pos], lo_r, hi_r, share.taking(take_at))
    return out


def _run_generated(fast: Any, share: Share, rows: np.ndarray, plays: np.ndarray, lo: np.ndarray,
                   hi: np.ndarray, take_at: np.ndarray) -> KernelOut | None:
    """The run that loads the shared totals, with the kernel generated for the query's
    shape (no variable left reads an earlier event: the type-grained loop, unrolled, ~4x
    faster than the mixed kernel), or None where that does not pay off or has no sound
    rescale bound."""
    from cogra.runtime.fast import codegen
    from cogra.runtime.fast.executor import SPECIALIZE_MIN_EVENTS

    live = tuple(tuple(int(k) for k in arr[1:1 + arr[0]]) for arr in (share.live_i, share.live_f, share.live_x))
    shape = fast.shape(loads=(share.var, *live))
    if not codegen.use_generated(shape, "kernel_loading", len(rows), SPECIALIZE_MIN_EVENTS):
        return None
    bound = fast.rescale_bound(lo, hi)
    if bound is None:
        return None
    out = KernelOut.zeros(len(lo), fast.chan)
    e = fast.engine
    codegen.kernel_loading_for(shape)(
        e.time_np[rows], plays, fast.pair_ok[rows], fast.a_int, fast.a_flt, fast.a_valid, fast.a_key, rows,
        lo, hi, bound, out.i, out.f, out.x, out.e, out.r,
        take_at, share.ci, share.cf, share.cx, share.ce, share.cr)
    return out


@njit(cache=True)
def _split(lo, hi, seg, representative, bits, bit):
    """The positions of the two runs, in one pass over the windows ``[lo, hi)``:

    * the representatives' positions playing ``bit`` (``rep_pos``) and the representative
      windows' ranges over them (``rep_lo``, ``rep_hi``, in window order);
    * the positions playing another variable (``pos``) and every window's range over them.
    """
    n = 0
    for w in range(lo.shape[0]):
        n += hi[w] - lo[w]
    rep_pos = np.empty(n, np.int64)
    pos = np.empty(n, np.int64)
    n_rep_wins = 0
    for w in range(lo.shape[0]):
        if representative[seg[w]]:
            n_rep_wins += 1
    rep_lo = np.empty(n_rep_wins, np.int64)
    rep_hi = np.empty(n_rep_wins, np.int64)
    lo_r = np.empty(lo.shape[0], np.int64)
    hi_r = np.empty(lo.shape[0], np.int64)
    n_rep = 0
    n_pos = 0
    r = 0
    for w in range(lo.shape[0]):
        rep = representative[seg[w]]
        if rep:
            rep_lo[r] = n_rep
        lo_r[w] = n_pos
        for e in range(lo[w], hi[w]):
            if rep and bits[e] & bit:
                rep_pos[n_rep] = e
                n_rep += 1
            if bits[e] & ~bit:
                pos[n_pos] = e
                n_pos += 1
        hi_r[w] = n_pos
        if rep:
            rep_hi[r] = n_rep
            r += 1
    return rep_pos[:n_rep], rep_lo, rep_hi, pos[:n_pos], lo_r, hi_r


@njit(cache=True)
def _last_total_before(times, lo, hi, start, group, rep_ptr, rep_times, take_at):
    """Per position ``e`` of window ``w``: the last cache row of the window's group whose
    time lies in ``[start[w], times[e])`` -- the shared variable's total just before ``e``'s
    batch -- or -1.  Windows are tumbling, so a row in that range is in the same window."""
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
    variable-key value if v has one."""
    b = engine.bound
    keyed = [u for u in range(len(b.automaton.names)) if b.var_keys[u]]
    at = keyed.index(v) if v in keyed else None
    names: dict[tuple, int] = {}
    out = np.empty(len(subs.keys), np.int64)
    for s, (plain, var_values) in enumerate(subs.keys):
        key = (plain, var_values[at]) if at is not None else (plain,)
        out[s] = names.setdefault(key, len(names))
    return out


__all__ = ["ENABLED", "Share", "run_raw", "shared_variable"]
