"""Compiled sliding-window sharing: per-pane affine maps combined with two stacks.

A kernel *state* is what :func:`cogra.runtime.fast.kernels.run_windows` keeps: rows
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
window's exponent is its state's, and :func:`~cogra.runtime.fast.channels.decode`
treats it exactly as the per-run exponent of ``run_windows``.  A segment whose floats
turn non-finite anyway is reported as not done and the caller evaluates its windows
with the direct kernel.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from cogra.runtime.fast.kernels import _batch, _emit_window, _reset_row

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


@njit(cache=True)
def _clear(si, sf, sx, sr, x_is_min):
    """The zero state: no trends, nothing reached."""
    for r in range(si.shape[0]):
        _reset_row(si, sf, sx, r, x_is_min)
        sr[r] = False


@njit(cache=True)
def _identity(mi, mf, mx, mr, nv, x_is_min):
    """The map of no events: ``T0`` zero, ``L_r`` the basis state of row ``r``."""
    for j in range(nv + 1):
        _clear(mi[j], mf[j], mx[j], mr[j], x_is_min)
    for r in range(nv):
        mi[r + 1, r, 0] = 1
        mf[r + 1, r, 0] = 1.0
        mr[r + 1, r] = True


@njit(cache=True)
def _normalize(sf):
    """Scale ``sf`` below :data:`SCALE_ABOVE`; the exponent to add, or -1 if non-finite."""
    big = 0.0
    for r in range(sf.shape[0]):
        for k in range(sf.shape[1]):
            a = abs(sf[r, k])
            if a > big:
                big = a
            elif a != a:
                return -1
    if not big < np.inf:
        return -1
    shift = 0
    while big > SCALE_ABOVE:
        sf *= math.ldexp(1.0, -SCALE_STEP)
        big *= math.ldexp(1.0, -SCALE_STEP)
        shift += SCALE_STEP
    return shift


@njit(cache=True)
def _apply(gi, gf, gx, gr, ge, si, sf, sx, sr, se, oi, of, ox, orr, affine, nv, x_is_min):
    """``O = G(S)`` (``affine``) or ``O = G_lin(S)`` (the map without its trend starts).

    ``G`` is given by its ``nv + 1`` states (``T0``, ``L_0 .. L_{nv-1}``) with exponents
    ``ge``; ``S`` has exponent ``se``.  Returns ``O``'s exponent (-1: non-finite).
    ``O`` must not alias ``S`` or ``G``.
    """
    n_i = si.shape[1]
    n_f = sf.shape[1]
    n_x = sx.shape[1]
    # Only the terms that can be non-zero choose the common exponent.
    eo = ge[0] if affine else 0
    for r in range(nv):
        if sr[r] and se + ge[r + 1] > eo:
            eo = se + ge[r + 1]
    if sr[nv] and se > eo:
        eo = se
    for q in range(nv + 1):
        if affine:
            a0 = math.ldexp(1.0, ge[0] - eo)
            for k in range(n_i):
                oi[q, k] = gi[0, q, k]
            for k in range(n_f):
                of[q, k] = gf[0, q, k] * a0
            for k in range(n_x):
                ox[q, k] = gx[0, q, k]
            orr[q] = gr[0, q]
        else:
            _reset_row(oi, of, ox, q, x_is_min)
            orr[q] = False
        for r in range(nv):
            if not sr[r]:
                continue  # row r of S is empty: nothing to carry
            if gr[r + 1, q]:  # a trend at row r reaches row q
                orr[q] = True
                c = si[r, 0]
                l0 = gi[r + 1, q, 0]
                oi[q, 0] += c * l0
                for k in range(1, n_i):
                    oi[q, k] += c * gi[r + 1, q, k] + si[r, k] * l0
                ar = math.ldexp(1.0, se + ge[r + 1] - eo)
                cf = sf[r, 0]
                m0 = gf[r + 1, q, 0]
                of[q, 0] += cf * m0 * ar
                for k in range(1, n_f):
                    of[q, k] += (cf * gf[r + 1, q, k] + sf[r, k] * m0) * ar
                for k in range(n_x):
                    ox[q, k] = _better(ox[q, k], sx[r, k], x_is_min[k])
            for k in range(n_x):
                ox[q, k] = _better(ox[q, k], gx[r + 1, q, k], x_is_min[k])
    # The finished row passes through unchanged.
    if sr[nv]:
        afin = math.ldexp(1.0, se - eo)
        for k in range(n_i):
            oi[nv, k] += si[nv, k]
        for k in range(n_f):
            of[nv, k] += sf[nv, k] * afin
        for k in range(n_x):
            ox[nv, k] = _better(ox[nv, k], sx[nv, k], x_is_min[k])
        orr[nv] = True
    shift = _normalize(of)
    return -1 if shift < 0 else eo + shift


@njit(cache=True)
def _compose(gi, gf, gx, gr, ge, ti, tf, tx, tr, te, oi, of, ox, orr, oe, nv, x_is_min):
    """``O = G o T`` for maps given by their ``nv + 1`` states; False if non-finite."""
    for j in range(nv + 1):
        oe[j] = _apply(gi, gf, gx, gr, ge, ti[j], tf[j], tx[j], tr[j], te[j],
                       oi[j], of[j], ox[j], orr[j], j == 0, nv, x_is_min)
        if oe[j] < 0:
            return False
    return True


@njit(cache=True)
def _pane_map(mode, lo, hi, times, plays, pair_ok, nv, pred_ptr, pred_idx, start_bits,
              final_bits, prog, op_ptr, x_is_min, a_int, a_flt, a_valid, a_key, rows,
              mi, mf, mx, mr, me, bi, bf, bx, bvar):
    """The map of events ``lo..hi-1`` into ``m*`` (``nv + 1`` states, exponents ``me``).

    Returns False if a float turned non-finite."""
    _identity(mi, mf, mx, mr, nv, x_is_min)
    me[:] = 0
    no_start = np.uint64(0)
    i = lo
    while i < hi:
        j = i + 1
        while j < hi and times[j] == times[i]:
            j += 1
        for s in range(nv + 1):
            live = s == 0
            for r in range(nv):
                live |= mr[s, r]
            if not live:
                continue  # a basis state whose trends all died stays dead
            grew = _batch(mode, i, j, plays, pair_ok, nv, pred_ptr, pred_idx,
                          start_bits if s == 0 else no_start, final_bits, prog, op_ptr,
                          x_is_min, a_int, a_flt, a_valid, a_key, rows,
                          math.ldexp(1.0, -me[s]), mi[s], mf[s], mx[s], mr[s], bi, bf, bx, bvar)
            if grew:
                shift = _normalize(mf[s])
                if shift < 0:
                    return False
                me[s] += shift
        i = j
    return True


@njit(cache=True)
def _assign(dst, src):
    """``dst[...] = src`` for C-contiguous arrays of one shape.  A loop, not a slice
    assignment: numba compiles slice assignments anew inside every function that uses
    them (seconds each), while this compiles once per array type and is cached."""
    d = dst.reshape(-1)
    s = src.reshape(-1)
    for k in range(d.shape[0]):
        d[k] = s[k]


@njit(cache=True)
def _copy_map(si, sf, sx, sr, se, di, df, dx, dr, de):
    _assign(di, si)
    _assign(df, sf)
    _assign(dx, sx)
    _assign(dr, sr)
    _assign(de, se)


@njit(cache=True)
def run_sliding(
    mode, times, plays, pair_ok, nv, pred_ptr, pred_idx, start_bits, final_bits,
    prog, op_ptr, x_is_min, n_i, n_f,
    a_int, a_flt, a_valid, a_key, rows,
    win_seg, win_k, win_lo, win_hi, slide, panes_per_window, max_batch, max_panes,
    out_i, out_f, out_x, out_e, out_r, seg_done,
):
    """Every window ``[k*slide, k*slide + panes_per_window*slide)`` of every segment.

    Windows come grouped by segment (``win_seg``), ``k`` ascending within one, with
    their event ranges ``[win_lo, win_hi)``.  Results land in row ``w`` of ``out_*``.
    ``seg_done[s]`` turns False when a float of segment ``s`` turned non-finite (or its
    panes outgrew ``max_panes``); its rows are then meaningless.
    """
    n_x = x_is_min.shape[0]
    sdim = nv + 1
    # The maps of the panes since the last flip (the back stack) ...
    pi = np.zeros((max_panes, sdim, sdim, n_i), np.uint64)
    pf = np.zeros((max_panes, sdim, sdim, n_f), np.float64)
    px = np.zeros((max_panes, sdim, sdim, n_x), np.int64)
    pr = np.zeros((max_panes, sdim, sdim), np.bool_)
    pe = np.zeros((max_panes, sdim), np.int64)
    pane_id = np.zeros(max_panes, np.int64)
    # ... their composition G (H: scratch for a new composition) ...
    gi = np.zeros((sdim, sdim, n_i), np.uint64)
    gf = np.zeros((sdim, sdim, n_f), np.float64)
    gx = np.zeros((sdim, sdim, n_x), np.int64)
    gr = np.zeros((sdim, sdim), np.bool_)
    ge = np.zeros(sdim, np.int64)
    hi_, hf, hx, hr, he = gi.copy(), gf.copy(), gx.copy(), gr.copy(), ge.copy()
    # ... and the front stack: states f_p, ascending pane p.
    fi = np.zeros((max_panes, sdim, n_i), np.uint64)
    ff = np.zeros((max_panes, sdim, n_f), np.float64)
    fx = np.zeros((max_panes, sdim, n_x), np.int64)
    fr = np.zeros((max_panes, sdim), np.bool_)
    fe = np.zeros(max_panes, np.int64)
    front_id = np.zeros(max_panes, np.int64)
    # The zero state, and one window's state.
    zi = np.zeros((sdim, n_i), np.uint64)
    zf = np.zeros((sdim, n_f), np.float64)
    zx = np.zeros((sdim, n_x), np.int64)
    zr = np.zeros(sdim, np.bool_)
    _clear(zi, zf, zx, zr, x_is_min)
    wi, wf, wx, wr = zi.copy(), zf.copy(), zx.copy(), zr.copy()
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
    for w in range(win_seg.shape[0]):
        if win_seg[w] != seg:
            seg = win_seg[w]
            pos = win_lo[w]
            n_back = 0
            n_front = 0
            fptr = 0
            flip = win_k[w]  # forces a flip at the segment's first window
        if not seg_done[seg]:
            continue
        if w > 0 and win_seg[w - 1] == seg and win_lo[w - 1] == win_lo[w] and win_hi[w - 1] == win_hi[w]:
            # The same events as the previous window (sparse sub-streams slide over
            # empty panes): the same result.  Skipping it only delays a flip, and it
            # pushes no pane.
            _assign(out_i[w], out_i[w - 1])
            _assign(out_f[w], out_f[w - 1])
            _assign(out_x[w], out_x[w - 1])
            out_e[w] = out_e[w - 1]
            out_r[w] = out_r[w - 1]
            continue
        k = win_k[w]
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
            q = pos + 1
            while q < hi and times[q] // slide == p:
                q += 1
            ok = _pane_map(mode, pos, q, times, plays, pair_ok, nv, pred_ptr, pred_idx,
                           start_bits, final_bits, prog, op_ptr, x_is_min,
                           a_int, a_flt, a_valid, a_key, rows,
                           pi[n_back], pf[n_back], px[n_back], pr[n_back], pe[n_back],
                           bi, bf, bx, bvar)
            if not ok:
                break
            pane_id[n_back] = p
            if n_back == 0:
                _copy_map(pi[0], pf[0], px[0], pr[0], pe[0], gi, gf, gx, gr, ge)
            else:
                ok = _compose(pi[n_back], pf[n_back], px[n_back], pr[n_back], pe[n_back],
                              gi, gf, gx, gr, ge, hi_, hf, hx, hr, he, nv, x_is_min)
                gi, hi_ = hi_, gi  # the composition becomes G (swap, no copy)
                gf, hf = hf, gf
                gx, hx = hx, gx
                gr, hr = hr, gr
                ge, he = he, ge
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
                    _copy_map(pi[idx], pf[idx], px[idx], pr[idx], pe[idx], gi, gf, gx, gr, ge)
                elif ok:
                    ok = _compose(gi, gf, gx, gr, ge, pi[idx], pf[idx], px[idx], pr[idx], pe[idx],
                                  hi_, hf, hx, hr, he, nv, x_is_min)
                    gi, hi_ = hi_, gi
                    gf, hf = hf, gf
                    gx, hx = hx, gx
                    gr, hr = hr, gr
                    ge, he = he, ge
                f = idx - first
                _assign(fi[f], gi[0])
                _assign(ff[f], gf[0])
                _assign(fx[f], gx[0])
                _assign(fr[f], gr[0])
                fe[f] = ge[0]
                front_id[f] = pane_id[idx]
            fptr = 0
            n_back = 0
            flip = k + panes_per_window
        if not ok:
            seg_done[seg] = False
            continue
        while fptr < n_front and front_id[fptr] < k:
            fptr += 1
        if fptr < n_front:
            si, sf, sx, sr, se = fi[fptr], ff[fptr], fx[fptr], fr[fptr], fe[fptr]
        else:
            si, sf, sx, sr, se = zi, zf, zx, zr, 0
        if n_back == 0:
            _assign(wi, si)
            _assign(wf, sf)
            _assign(wx, sx)
            _assign(wr, sr)
            we = se
        else:
            we = _apply(gi, gf, gx, gr, ge, si, sf, sx, sr, se, wi, wf, wx, wr, True, nv, x_is_min)
            if we < 0:
                seg_done[seg] = False
                continue
        _emit_window(mode, nv, final_bits, x_is_min, wi, wf, wx, wr, we, w, out_i, out_f, out_x, out_e, out_r)
