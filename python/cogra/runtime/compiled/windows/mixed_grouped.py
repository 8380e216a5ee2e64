"""Sliding windows for the mixed-grained (``any``) kernel: a few windows per pass.

:func:`mixed_grained.run_mixed_windows` evaluates every window on its own, so under
``WITHIN d SLIDE s`` an event is processed ``d / s`` times (q3: 60).  Its cost per
(event, window) is mostly the Fenwick traversal, not the arithmetic.  This kernel
evaluates a *group* of ``G`` consecutive windows of a sub-stream in one pass over the
events they span, with every state a vector of ``G + 1`` *lanes*: lane ``j < G`` holds
the trends that started in pane ``k0 + j`` (``k0`` the group's first window's pane), lane
``G`` those that started later.  Trends never reach back before their first event, so
window ``k0 + j`` -- read when the pass reaches its end -- is the sum of lanes ``j..G`` of
the final variables' running totals.  An event is then in about ``d / (s G) + 1`` passes
of ``G + 1`` lanes each, the traversal shared by the lanes; ``G ~ sqrt(d / s)``.

Scope (else the caller uses the per-window kernel): ``any``, no MIN/MAX (a lane's
extremes would need their own reach), windows whose slide divides their size.  A group
whose floats need rescaling (counts past 2**600, where one exponent for lanes of very
different magnitude could underflow the small ones) is flagged in ``redo`` and evaluated
per window by the caller.
"""

from __future__ import annotations

import numpy as np
from cogra.runtime.compiled.jit import njit

from cogra.runtime.compiled.channels import OP_CNT, OP_NN, OP_SUM_FLOAT, OP_SUM_INT
from cogra.runtime.compiled.aggregators.coarse_grained import RESCALE_ABOVE, _bit, _edge_ok
from cogra.runtime.compiled.aggregators.mixed_grained import _rank_block, _rank_buffers
from cogra.runtime.compiled.codes import CROSS_ALL, USE_EQUAL, USE_PREFIX, USE_SUFFIX


@njit(cache=True, inline="always")
def _node_into_lanes(bi, bf, br, d, ti, tf, tr, p, t, i, lanes, live_i, live_f):
    """Batch row ``d`` += node ``i`` of tree ``(p, t)``, lane by lane; True if any lane reached."""
    got = False
    for ln in range(lanes):
        if not tr[p, t, i, ln]:
            continue
        got = True
        br[d, ln] = True
        for c in range(live_i[p, 0]):
            k = live_i[p, c + 1]
            bi[d, ln, k] += ti[p, t, i, ln, k]
        for c in range(live_f[p, 0]):
            k = live_f[p, c + 1]
            bf[d, ln, k] += tf[p, t, i, ln, k]
    return got


@njit(cache=True, inline="always")
def _lanes_into_node(ti, tf, tr, p, t, i, bi, bf, br, s, lanes, live_i, live_f):
    """Node ``i`` of tree ``(p, t)`` += batch row ``s``, lane by lane.  A lane not reached
    yet is empty whatever its memory holds (trees are reset by their reach flags only),
    so the first insert assigns."""
    for ln in range(lanes):
        if not br[s, ln]:
            continue
        if tr[p, t, i, ln]:
            for c in range(live_i[p, 0]):
                k = live_i[p, c + 1]
                ti[p, t, i, ln, k] += bi[s, ln, k]
            for c in range(live_f[p, 0]):
                k = live_f[p, c + 1]
                tf[p, t, i, ln, k] += bf[s, ln, k]
        else:
            tr[p, t, i, ln] = True
            for c in range(live_i[p, 0]):
                k = live_i[p, c + 1]
                ti[p, t, i, ln, k] = bi[s, ln, k]
            for c in range(live_f[p, 0]):
                k = live_f[p, c + 1]
                tf[p, t, i, ln, k] = bf[s, ln, k]


@njit(cache=True, inline="always")
def _contribute_lanes(bi, bf, br, d, lanes, prog, lo, hi, e, a_int, a_flt, a_valid):
    """:func:`coarse_grained._contribute_row` for every reached lane of batch row ``d`` (no MIN/MAX):
    each slot-program op is decoded once, then applied lane by lane."""
    for k in range(lo, hi):
        op = prog[k, 1]
        a = prog[k, 2]
        s1 = prog[k, 3]
        s2 = prog[k, 4]
        s3 = prog[k, 5]
        if op != OP_CNT and not a_valid[a, e]:
            continue
        if op == OP_CNT or op == OP_NN:
            for ln in range(lanes):
                if br[d, ln]:
                    if s1 >= 0:  # else approximate: no modular channel
                        bi[d, ln, s1] += bi[d, ln, 0]
                    bf[d, ln, s2] += bf[d, ln, 0]
        elif op == OP_SUM_INT:
            x = a_int[a, e]
            xu = np.uint64(x)
            xf = np.float64(x)
            for ln in range(lanes):
                if br[d, ln]:
                    bi[d, ln, s1] += xu * bi[d, ln, 0]
                    bf[d, ln, s2] += xf * bf[d, ln, 0]
                    if s3 >= 0:  # else never negative: the approximation is the bound
                        bf[d, ln, s3] += abs(xf) * bf[d, ln, 0]
        elif op == OP_SUM_FLOAT:
            xf = a_flt[a, e]
            for ln in range(lanes):
                if br[d, ln]:
                    bf[d, ln, s2] += xf * bf[d, ln, 0]
                    if s3 >= 0:  # else never negative
                        bf[d, ln, s3] += abs(xf) * bf[d, ln, 0]


@njit(cache=True)
def run_mixed_sliding(
    pattern, positions, slots, attributes, pairs,
    win_seg, win_k, win_lo, win_hi, slide, size, group, max_batch, max_span, out, redo,
):
    """Every window ``[k*slide, k*slide + size)``, grouped ``group`` at a time (see the
    module docstring; :mod:`cogra.runtime.compiled.kernel_args`' groups).  Windows come
    grouped by segment, ``k`` ascending within one."""
    _mode, nv, pred_ptr, pred_idx, start_bits, final_bits = pattern
    times, plays, pair_ok, rows = positions
    prog, op_ptr, _x_is_min, n_i, n_f = slots
    a_int, a_flt, a_valid, a_key = attributes
    pair_of, pair_flags, m_of, live_i, live_f, _live_x, ranks = pairs
    h_rank, h_valid, q_a, q_b, q_eq, g_valid = ranks
    out_i, out_f, _out_x, out_e, out_r = out
    lanes = group + 1
    n_pairs = m_of.shape[0]
    si = np.zeros((nv, lanes, n_i), np.uint64)
    sf = np.zeros((nv, lanes, n_f), np.float64)
    sr = np.zeros((nv, lanes), np.bool_)
    bi = np.zeros((max_batch, lanes, n_i), np.uint64)
    bf = np.zeros((max_batch, lanes, n_f), np.float64)
    br = np.zeros((max_batch, lanes), np.bool_)
    bvar = np.zeros(max_batch, np.int64)
    bev = np.zeros(max_batch, np.int64)
    block = 2 * max_span  # ranks hold for a block of positions: a span and what follows it
    m_max = block + 1
    rank_buf, rank_pos, lr, la, lb, leq, m_loc, vals, tmp_k, tmp_t, count = _rank_buffers(n_pairs, block)
    blo = -1
    bhi = -1
    ti = np.zeros((max(1, n_pairs), 3, m_max, lanes, n_i), np.uint64)
    tf = np.zeros((max(1, n_pairs), 3, m_max, lanes, n_f), np.float64)
    tr = np.zeros((max(1, n_pairs), 3, m_max, lanes), np.bool_)
    n_win = win_lo.shape[0]
    w = 0
    while w < n_win:
        seg = win_seg[w]
        k0 = win_k[w]
        w2 = w + 1
        while w2 < n_win and win_seg[w2] == seg and win_k[w2] < k0 + group:
            w2 += 1
        lo = win_lo[w]
        hi = win_hi[w]
        for q in range(w, w2):
            if win_hi[q] > hi:
                hi = win_hi[q]
        si[:] = 0
        sf[:] = 0.0
        sr[:] = False
        blo, bhi = _rank_block(lo, hi, blo, bhi, n_pairs, plays, rows, pair_flags, h_rank, h_valid,
                               q_a, q_b, q_eq, g_valid, rank_buf, rank_pos, lr, la, lb, leq, m_loc,
                               vals, tmp_k, tmp_t, count)
        for p in range(n_pairs):
            m = m_loc[p]
            for t in range(3):
                tr[p, t, :m + 1] = False  # empties every node (see _lanes_into_node)
        failed = False
        emit = w
        i = lo
        while i <= hi:
            # Windows that end before this batch (or at the end of the span) are complete.
            t_now = times[i] if i < hi else times[hi - 1] + size + 1
            while emit < w2 and win_k[emit] * slide + size <= t_now:
                j0 = win_k[emit] - k0
                out_i[emit] = 0
                out_f[emit] = 0.0
                reached = False
                for v in range(nv):
                    if _bit(final_bits, v) == 0:
                        continue
                    for ln in range(j0, lanes):
                        if sr[v, ln]:
                            reached = True
                            for k in range(n_i):
                                out_i[emit, k] += si[v, ln, k]
                            for k in range(n_f):
                                out_f[emit, k] += sf[v, ln, k]
                out_r[emit] = reached
                out_e[emit] = 0
                emit += 1
            if i == hi:
                break
            j = i + 1
            while j < hi and times[j] == times[i]:
                j += 1
            nb = 0
            for e in range(i, j):
                bits = plays[e]
                if bits == 0:
                    continue
                lane = times[e] // slide - k0
                if lane > group:
                    lane = group
                okb = pair_ok[e]
                d = e - blo
                for v in range(nv):
                    if _bit(bits, v) == 0:
                        continue
                    bi[nb] = 0
                    bf[nb] = 0.0
                    br[nb] = False
                    alive = False
                    if _bit(start_bits, v):
                        bi[nb, lane, 0] = 1
                        bf[nb, lane, 0] = 1.0
                        br[nb, lane] = True
                        alive = True
                    for pp in range(pred_ptr[v], pred_ptr[v + 1]):
                        u = pred_idx[pp]
                        if not _edge_ok(okb, pp):
                            continue
                        p = pair_of[u, v]
                        if p >= 0 and g_valid[p, rows[e]] == CROSS_ALL:
                            p = -1  # this event takes every earlier event of the pair
                        if p < 0:
                            for ln in range(lanes):
                                if sr[u, ln]:
                                    alive = True
                                    br[nb, ln] = True
                                    for k in range(n_i):
                                        bi[nb, ln, k] += si[u, ln, k]
                                    for k in range(n_f):
                                        bf[nb, ln, k] += sf[u, ln, k]
                        elif g_valid[p, rows[e]]:
                            fl = pair_flags[p]
                            m = m_loc[p]
                            if fl & USE_PREFIX:
                                a = la[p, d]
                                while a > 0:
                                    if _node_into_lanes(bi, bf, br, nb, ti, tf, tr, p, 0, a, lanes, live_i, live_f):
                                        alive = True
                                    a -= a & (-a)
                            if fl & USE_SUFFIX:
                                a = m - lb[p, d]
                                while a > 0:
                                    if _node_into_lanes(bi, bf, br, nb, ti, tf, tr, p, 1, a, lanes, live_i, live_f):
                                        alive = True
                                    a -= a & (-a)
                            if (fl & USE_EQUAL) and leq[p, d] >= 0:
                                if _node_into_lanes(bi, bf, br, nb, ti, tf, tr, p, 2, leq[p, d] + 1, lanes,
                                                    live_i, live_f):
                                    alive = True
                    if alive:
                        _contribute_lanes(bi, bf, br, nb, lanes, prog, op_ptr[v], op_ptr[v + 1], rows[e],
                                          a_int, a_flt, a_valid)
                        bvar[nb] = v
                        bev[nb] = e
                        nb += 1
            big = 0.0
            for k in range(nb):
                v = bvar[k]
                e = bev[k]
                for ln in range(lanes):
                    if not br[k, ln]:
                        continue
                    sr[v, ln] = True
                    for c in range(n_i):
                        si[v, ln, c] += bi[k, ln, c]
                    for c in range(n_f):
                        sf[v, ln, c] += bf[k, ln, c]
                        if abs(sf[v, ln, c]) > big:
                            big = abs(sf[v, ln, c])
                for vv in range(nv):
                    p = pair_of[v, vv]
                    if p < 0 or not h_valid[p, rows[e]]:
                        continue
                    r = lr[p, e - blo]
                    m = m_loc[p]
                    fl = pair_flags[p]
                    if fl & USE_PREFIX:
                        a = r + 1
                        while a <= m:
                            _lanes_into_node(ti, tf, tr, p, 0, a, bi, bf, br, k, lanes, live_i, live_f)
                            a += a & (-a)
                    if fl & USE_SUFFIX:
                        a = m - r
                        while a <= m:
                            _lanes_into_node(ti, tf, tr, p, 1, a, bi, bf, br, k, lanes, live_i, live_f)
                            a += a & (-a)
                    if fl & USE_EQUAL:
                        _lanes_into_node(ti, tf, tr, p, 2, r + 1, bi, bf, br, k, lanes, live_i, live_f)
            if big > RESCALE_ABOVE:
                failed = True  # no shared exponent across lanes: evaluate these per window
                break
            i = j
        if failed:
            for q in range(w, w2):
                redo[q] = True
        w = w2


__all__ = ["run_mixed_sliding"]
