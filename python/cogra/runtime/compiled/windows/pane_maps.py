"""Compiled sliding-window sharing: per-pane affine maps combined with two stacks.

A kernel *state* is what :func:`cogra.runtime.compiled.aggregators.coarse_grained.run_windows` keeps: rows
``0..nv-1`` per variable plus the finished row ``nv``, each with channels ``I``
(uint64, exact mod 2**64), ``F`` (float64), ``X`` (int64 MIN/MAX keys) and the reach
flag ``R``.  A batch of events maps a state to a new one, and that map is affine in a
very particular way:

* every non-count slot ``k`` of a row is fed only by slot ``k`` of the rows it reads
  and by the new trends' count (slot 0) -- ``sum += x * count`` -- and the "rows it
  reads" pattern (additions, ``next``/``contiguous`` resets) is the same for every
  slot; the finished row is never read and never reset;
* MIN/MAX keys and reach follow the same row pattern in the (min, +) semiring, with
  only 0/infinity as factors: a key travels from row ``r`` to row ``q`` exactly when
  reach does.

Hence a composite map ``T`` (of any run of batches) is fully described by ``nv + 1``
states: ``T0 = T(zero state)`` and, per variable row ``r``, ``L_r`` = the *linear*
response (no trends started) to the basis state "one trend, reached, at row ``r``".
Both are obtained by simply running the batch update on those ``nv + 1`` states, and
:func:`_apply` evaluates ``T(S)`` for any state ``S`` from them in
``O(nv^2 * slots)``.  With panes of length ``slide`` (``slide | size``), a window is
the composition of its panes' maps applied to the zero state; the classic two-stack
scheme (a *back* map accumulating panes since the last flip, and *front* states
``f_p = T_last o ... o T_p (0)`` computed at a flip) gives every window with work
independent of ``size / slide``.

Floats carry one power-of-two exponent per state (``true = stored * 2**e``), kept
below :data:`SCALE_ABOVE` so that the products in :func:`_apply` cannot overflow; a
window's exponent is its state's, and :func:`~cogra.runtime.compiled.channels.decode`
treats it exactly as the per-run exponent of ``run_windows``.  A segment whose floats
turn non-finite anyway is reported as not done and the caller evaluates its windows
with the direct kernel.
"""

from __future__ import annotations

import math

import numpy as np

from cogra.runtime.compiled.channels import MAX_KEY_IDENTITY, MIN_KEY_IDENTITY
from cogra.runtime.compiled.jit import NO_REFCOUNTS, njit
from cogra.runtime.compiled.aggregators.coarse_grained import _batch

SCALE_ABOVE = 2.0**400
"""Stored floats stay below this (times one batch's growth), so a product of two of
them, summed over a few rows, stays far from overflow."""
SCALE_STEP = 400
_ONE = np.uint64(1)


@njit(cache=True, inline="always")
def _better(a, b, is_min):
    if is_min:
        return a if a < b else b
    return a if a > b else b


# Storage.  Every state lives in one *pool*: arrays ``(rows, nv + 1, channels)`` (reach
# ``(rows, nv + 1)``, exponents ``(rows,)``), addressed by row.  A map is ``nv + 1``
# consecutive rows (``T0``, then ``L_0 .. L_{nv-1}``), named by its first row; the front,
# zero and window states are single rows after the maps'.  One pool, not one for maps and
# one for states: a helper then takes 5 arrays instead of up to 14 (``_apply`` read a map
# from one pool and a state from another and wrote to a third), and the generated
# kernel ran 17% faster (0.456 -> 0.376 s on 1M stock events at 10/s sliding every
# second).  Functions take the pool and rows, never a row's view: a view costs two
# atomic reference-count updates, and with a few views per pane and per window those were a third of the kernel's time.  For
# the same reason the helpers that touch single elements only are compiled without
# reference counts (``jit.NO_REFCOUNTS``): a call with 10-17 array arguments otherwise
# pays two atomic updates per array, and inlining them (``inline="always"``, used before)
# keeps those updates.  On 1M stock events sliding every second at 10 events/s they were
# 40% of the generated kernel (0.80 -> 0.46 s without them).


@njit(cache=True, **NO_REFCOUNTS)
def _clear_row(si, sf, sx, sr, row, x_is_min):
    """Pool row ``row`` := the zero state (no trends, nothing reached)."""
    for q in range(si.shape[1]):
        for k in range(si.shape[2]):
            si[row, q, k] = 0
        for k in range(sf.shape[2]):
            sf[row, q, k] = 0.0
        for k in range(sx.shape[2]):
            sx[row, q, k] = MIN_KEY_IDENTITY if x_is_min[k] else MAX_KEY_IDENTITY
        sr[row, q] = False


@njit(cache=True, **NO_REFCOUNTS)
def _copy_rows(pi, pf, px, pr, pe, src, dst, n):
    """Rows ``dst .. dst+n-1`` of the pool := rows ``src ..`` (the ranges must not overlap)."""
    for t in range(n):
        for q in range(pi.shape[1]):
            for k in range(pi.shape[2]):
                pi[dst + t, q, k] = pi[src + t, q, k]
            for k in range(pf.shape[2]):
                pf[dst + t, q, k] = pf[src + t, q, k]
            for k in range(px.shape[2]):
                px[dst + t, q, k] = px[src + t, q, k]
            pr[dst + t, q] = pr[src + t, q]
        pe[dst + t] = pe[src + t]


@njit(cache=True, **NO_REFCOUNTS)
def _identity(mi, mf, mx, mr, me, m, nv, x_is_min):
    """Map ``m`` := the map of no events: ``T0`` zero, ``L_r`` the basis state of row ``r``."""
    for j in range(nv + 1):
        _clear_row(mi, mf, mx, mr, m + j, x_is_min)
        me[m + j] = 0
    for r in range(nv):
        mi[m + r + 1, r, 0] = 1
        mf[m + r + 1, r, 0] = 1.0
        mr[m + r + 1, r] = True


@njit(cache=True, **NO_REFCOUNTS)
def _normalize(sf, row):
    """Scale pool row ``row``'s floats below :data:`SCALE_ABOVE`; the exponent to add, or
    -1 if non-finite."""
    big = 0.0
    for r in range(sf.shape[1]):
        for k in range(sf.shape[2]):
            a = abs(sf[row, r, k])
            if a > big:
                big = a
            elif a != a:
                return -1
    if not big < np.inf:
        return -1
    shift = 0
    while big > SCALE_ABOVE:
        for r in range(sf.shape[1]):
            for k in range(sf.shape[2]):
                sf[row, r, k] *= math.ldexp(1.0, -SCALE_STEP)
        big *= math.ldexp(1.0, -SCALE_STEP)
        shift += SCALE_STEP
    return shift


@njit(cache=True, **NO_REFCOUNTS)
def _apply(pi, pf, px, pr, pe, g, s, o, affine, nv, x_is_min):
    """Row ``o`` of the pool := ``G(S)`` (``affine``) or ``G_lin(S)`` (the map without its
    trend starts), for the map at rows ``g ..`` and the state at row ``s``.  Returns ``O``'s
    exponent (-1: non-finite).  ``O`` must not be one of ``S``'s or ``G``'s rows.
    """
    n_i = pi.shape[2]
    n_f = pf.shape[2]
    n_x = px.shape[2]
    # Only the terms that can be non-zero choose the common exponent.
    eo = pe[g] if affine else 0
    for r in range(nv):
        if pr[s, r] and pe[s] + pe[g + r + 1] > eo:
            eo = pe[s] + pe[g + r + 1]
    if pr[s, nv] and pe[s] > eo:
        eo = pe[s]
    for q in range(nv + 1):
        if affine:
            a0 = math.ldexp(1.0, pe[g] - eo)
            for k in range(n_i):
                pi[o, q, k] = pi[g, q, k]
            for k in range(n_f):
                pf[o, q, k] = pf[g, q, k] * a0
            for k in range(n_x):
                px[o, q, k] = px[g, q, k]
            pr[o, q] = pr[g, q]
        else:
            for k in range(n_i):
                pi[o, q, k] = 0
            for k in range(n_f):
                pf[o, q, k] = 0.0
            for k in range(n_x):
                px[o, q, k] = MIN_KEY_IDENTITY if x_is_min[k] else MAX_KEY_IDENTITY
            pr[o, q] = False
        for r in range(nv):
            if not pr[s, r]:
                continue  # row r of S is empty: nothing to carry
            if pr[g + r + 1, q]:  # a trend at row r reaches row q
                pr[o, q] = True
                c = pi[s, r, 0]
                l0 = pi[g + r + 1, q, 0]
                pi[o, q, 0] += c * l0
                for k in range(1, n_i):
                    pi[o, q, k] += c * pi[g + r + 1, q, k] + pi[s, r, k] * l0
                ar = math.ldexp(1.0, pe[s] + pe[g + r + 1] - eo)
                cf = pf[s, r, 0]
                m0 = pf[g + r + 1, q, 0]
                pf[o, q, 0] += cf * m0 * ar
                for k in range(1, n_f):
                    pf[o, q, k] += (cf * pf[g + r + 1, q, k] + pf[s, r, k] * m0) * ar
                for k in range(n_x):
                    px[o, q, k] = _better(px[o, q, k], px[s, r, k], x_is_min[k])
            for k in range(n_x):
                px[o, q, k] = _better(px[o, q, k], px[g + r + 1, q, k], x_is_min[k])
    # The finished row passes through unchanged.
    if pr[s, nv]:
        afin = math.ldexp(1.0, pe[s] - eo)
        for k in range(n_i):
            pi[o, nv, k] += pi[s, nv, k]
        for k in range(n_f):
            pf[o, nv, k] += pf[s, nv, k] * afin
        for k in range(n_x):
            px[o, nv, k] = _better(px[o, nv, k], px[s, nv, k], x_is_min[k])
        pr[o, nv] = True
    shift = _normalize(pf, o)
    return -1 if shift < 0 else eo + shift


@njit(cache=True, **NO_REFCOUNTS)
def _compose(mi, mf, mx, mr, me, g, t, o, nv, x_is_min):
    """Map ``o`` := ``G o T`` for maps ``g`` and ``t`` of the pool; False if non-finite."""
    for j in range(nv + 1):
        e = _apply(mi, mf, mx, mr, me, g, t + j, o + j, j == 0, nv, x_is_min)
        if e < 0:
            return False
        me[o + j] = e
    return True


@njit(cache=True)
def _pane_map(mode, lo, hi, times, plays, pair_ok, nv, pred_ptr, pred_idx, start_bits,
              final_bits, prog, op_ptr, x_is_min, a_int, a_flt, a_valid, a_key, rows,
              mi, mf, mx, mr, me, m, bi, bf, bx, bvar):
    """Map ``m`` of the pool := the map of events ``lo..hi-1``.

    The map's states evolve independently under the same events, so each runs through the
    pane on its own.  Returns False if a float turned non-finite."""
    _identity(mi, mf, mx, mr, me, m, nv, x_is_min)
    no_start = np.uint64(0)
    for st in range(nv + 1):
        row = m + st
        si, sf, sx, sr = mi[row], mf[row], mx[row], mr[row]  # views, once per state and pane
        i = lo
        while i < hi:
            live = st == 0
            for r in range(nv):
                live |= sr[r]
            if not live:
                break  # a basis state whose trends all died stays dead
            j = i + 1
            while j < hi and times[j] == times[i]:
                j += 1
            grew = _batch(mode, i, j, plays, pair_ok, nv, pred_ptr, pred_idx,
                          start_bits if st == 0 else no_start, final_bits, prog, op_ptr,
                          x_is_min, a_int, a_flt, a_valid, a_key, rows,
                          math.ldexp(1.0, -me[row]), si, sf, sx, sr, bi, bf, bx, bvar)
            if grew:
                shift = _normalize(mf, row)
                if shift < 0:
                    return False
                me[row] += shift
            i = j
    return True


@njit(cache=True, **NO_REFCOUNTS)
def _emit_row(mode, nv, final_bits, x_is_min, si, sf, sx, sr, se, s, w, out_i, out_f, out_x, out_e, out_r):
    """Row ``w`` of the outputs from pool row ``s`` (as :func:`coarse_grained._emit_window`: under
    any, the trends ending at a final variable are added to the finished row now)."""
    fin = nv
    if mode == 0:
        for v in range(nv):
            if ((final_bits >> np.uint64(v)) & _ONE) and sr[s, v]:
                for k in range(si.shape[2]):
                    si[s, fin, k] += si[s, v, k]
                for k in range(sf.shape[2]):
                    sf[s, fin, k] += sf[s, v, k]
                for k in range(sx.shape[2]):
                    sx[s, fin, k] = _better(sx[s, fin, k], sx[s, v, k], x_is_min[k])
                sr[s, fin] = True
    for k in range(si.shape[2]):
        out_i[w, k] = si[s, fin, k]
    for k in range(sf.shape[2]):
        out_f[w, k] = sf[s, fin, k]
    for k in range(sx.shape[2]):
        out_x[w, k] = sx[s, fin, k]
    out_e[w] = se[s]
    out_r[w] = sr[s, fin]


@njit(cache=True)
def run_sliding(
    pattern, positions, slots, attributes,
    win_seg, win_lo, win_hi, row_first, row_k, slide, panes_per_window, max_batch, max_panes,
    out, seg_done,
):
    """Every window ``[k*slide, k*slide + panes_per_window*slide)`` of every segment
    (:mod:`cogra.runtime.compiled.kernel_args`' groups).

    Windows come grouped by segment (``win_seg``), ``k`` ascending within one, with
    their event ranges ``[win_lo, win_hi)``.  Only the *distinct* ones are evaluated
    (:func:`sliding._distinct_windows`): row ``d`` of ``out_*`` is window ``row_first[d]``'s
    (window ``k`` = ``row_k[d]``), and the windows after it up to ``row_first[d + 1]``
    cover the same events -- they share its row.  ``seg_done[s]`` turns False when a float
    of segment ``s`` turned non-finite (or its panes outgrew ``max_panes``); its rows are
    then meaningless.
    """
    mode, nv, pred_ptr, pred_idx, start_bits, final_bits = pattern
    times, plays, pair_ok, rows = positions
    prog, op_ptr, x_is_min, n_i, n_f = slots
    a_int, a_flt, a_valid, a_key = attributes
    out_i, out_f, out_x, out_e, out_r = out
    n_x = x_is_min.shape[0]
    sdim = nv + 1
    # The pool: the maps of the panes since the last flip (the back stack), maps
    # 0 .. max_panes-1, then their composition G and a scratch H (swapped, never copied);
    # then the states: the front stack f_p (ascending pane p, from row ``front``), the
    # zero state and one window's state.
    n_rows = (max_panes + 2) * sdim + max_panes + 2
    mi = np.zeros((n_rows, sdim, n_i), np.uint64)
    mf = np.zeros((n_rows, sdim, n_f), np.float64)
    mx = np.zeros((n_rows, sdim, n_x), np.int64)
    mr = np.zeros((n_rows, sdim), np.bool_)
    me = np.zeros(n_rows, np.int64)
    pane_id = np.zeros(max_panes, np.int64)
    g = max_panes * sdim
    h = g + sdim
    front = (max_panes + 2) * sdim
    front_id = np.zeros(max_panes, np.int64)
    zero = front + max_panes
    win = zero + 1
    _clear_row(mi, mf, mx, mr, zero, x_is_min)
    bi = np.zeros((max_batch, n_i), np.uint64)
    bf = np.zeros((max_batch, n_f), np.float64)
    bx = np.zeros((max_batch, n_x), np.int64)
    bvar = np.zeros(max_batch, np.int64)

    seg = -1
    pos = 0
    n_back = 0
    n_front = 0
    fptr = 0
    flip = 0  # first pane not covered by the front stack
    for d in range(row_k.shape[0]):
        w = row_first[d]
        if win_seg[w] != seg:
            seg = win_seg[w]
            pos = win_lo[w]
            n_back = 0
            n_front = 0
            fptr = 0
            flip = row_k[d]  # forces a flip at the segment's first window
        if not seg_done[seg]:
            continue
        k = row_k[d]
        if pos < win_lo[w]:
            pos = win_lo[w]  # skipped events lie in panes before k: in no later window
        # Push the panes up to the window's end onto the back stack.
        hi = win_hi[w]
        ok = True
        while pos < hi and ok:
            if n_back == max_panes:  # cannot happen (see sliding._max_panes); never overrun
                ok = False
                break
            p = times[pos] // slide
            # The pane's events: times ascend, so comparing with its end is enough (one
            # division per pane, not per event: 8% of the kernel on an AMD EPYC VM).
            pane_end = (p + 1) * slide
            q = pos + 1
            while q < hi and times[q] < pane_end:
                q += 1
            m = n_back * sdim
            ok = _pane_map(mode, pos, q, times, plays, pair_ok, nv, pred_ptr, pred_idx,
                           start_bits, final_bits, prog, op_ptr, x_is_min,
                           a_int, a_flt, a_valid, a_key, rows,
                           mi, mf, mx, mr, me, m, bi, bf, bx, bvar)
            if not ok:
                break
            pane_id[n_back] = p
            if n_back == 0:
                _copy_rows(mi, mf, mx, mr, me, m, g, sdim)
            else:
                ok = _compose(mi, mf, mx, mr, me, m, g, h, nv, x_is_min)
                g, h = h, g  # the composition becomes G
            n_back += 1
            pos = q
        if ok and k >= flip:
            # Flip: f_p = (T_last o ... o T_p)(0) for the stored panes p >= k.
            first = n_back
            while first > 0 and pane_id[first - 1] >= k:
                first -= 1
            n_front = n_back - first
            for idx in range(n_back - 1, first - 1, -1):
                if idx == n_back - 1:
                    _copy_rows(mi, mf, mx, mr, me, idx * sdim, g, sdim)
                elif ok:
                    ok = _compose(mi, mf, mx, mr, me, g, idx * sdim, h, nv, x_is_min)
                    g, h = h, g
                f = idx - first
                _copy_rows(mi, mf, mx, mr, me, g, front + f, 1)  # G's T0 row is f_p
                front_id[f] = pane_id[idx]
            fptr = 0
            n_back = 0
            flip = k + panes_per_window
        if not ok:
            seg_done[seg] = False
            continue
        while fptr < n_front and front_id[fptr] < k:
            fptr += 1
        s = front + fptr if fptr < n_front else zero
        if n_back == 0:
            _copy_rows(mi, mf, mx, mr, me, s, win, 1)
        else:
            e = _apply(mi, mf, mx, mr, me, g, s, win, True, nv, x_is_min)
            if e < 0:
                seg_done[seg] = False
                continue
            me[win] = e
        _emit_row(mode, nv, final_bits, x_is_min, mi, mf, mx, mr, me, win, d, out_i, out_f, out_x, out_e, out_r)
