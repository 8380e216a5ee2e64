"""Compiled executors with event-grained variables (report section 5, and ``next`` fix).

A predicate on adjacent events that reads the earlier event ``U`` forces ``U``'s
events to be kept with their own states.  The compiled path handles the common form

    h(U) ∘ g(NEXT(V))      with ∘ in <, <=, >, >=, =, <>

where ``h`` reads only the earlier event and ``g`` only the new one (both evaluated
vectorised beforehand).  The values of ``h`` are ranked once, so that

* under ``any`` the kept states live in Fenwick trees over those ranks (prefix and
  suffix sums of state vectors, and per-rank buckets for ``=``): a new event sums
  its predecessors in O(log n) instead of scanning them -- this is what makes the
  mixed-grained executor asymptotically faster than an event-grained graph;
* under ``next`` / ``contiguous`` kept states are *waiting* trends, scanned and
  consumed by the first events that satisfy the predicate (the waiting lists are
  short: contiguous keeps one timestamp's events, next drops consumed ones).

Per pair ``p = (u, v)``, a new event ``e`` playing ``v`` wants the kept states of
``u`` with rank in ``[0, q_a[p, e])`` and/or ``[q_b[p, e], M[p])``, or exactly
``q_eq[p, e]`` -- see :func:`pair_ranges`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from cogra.runtime.fast.kernels import (
    RESCALE_ABOVE,
    RESCALE_STEP,
    _ONE,
    _add,
    _bit,
    _contribute,
    _max_abs,
    _reset,
)

# Which rank ranges a comparison h ∘ g selects (flags: prefix, suffix, equal).
USE_PREFIX, USE_SUFFIX, USE_EQUAL = 1, 2, 4


def pair_ranges(op: str, vals: np.ndarray, g: np.ndarray) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """For ``h op g`` over the sorted distinct values ``vals`` of ``h``: the rank ranges.

    Returns ``(flags, a, b, eq)``: prefix ``[0, a)``, suffix ``[b, M)``, equal rank ``eq``
    (-1 when no value equals ``g``).
    """
    lt = np.searchsorted(vals, g, side="left").astype(np.int64)   # number of values < g
    le = np.searchsorted(vals, g, side="right").astype(np.int64)  # number of values <= g
    eq = np.where(le > lt, lt, -1).astype(np.int64)
    m = len(vals)
    if op == "<":
        return USE_PREFIX, lt, np.full_like(lt, m), eq
    if op == "<=":
        return USE_PREFIX, le, np.full_like(lt, m), eq
    if op == ">":
        return USE_SUFFIX, lt, le, eq
    if op == ">=":
        return USE_SUFFIX, lt, lt, eq
    if op == "=":
        return USE_EQUAL, lt, le, eq
    if op == "<>":
        return USE_PREFIX | USE_SUFFIX, lt, le, eq
    raise ValueError(op)


@njit(cache=True, inline="always")
def _in_range(flags, r, a, b, eq):
    if (flags & USE_PREFIX) and r < a:
        return True
    if (flags & USE_SUFFIX) and r >= b:
        return True
    if (flags & USE_EQUAL) and r == eq:
        return True
    return False


@njit(cache=True, inline="always")
def _catch_up(tf, te, i, exponent):
    """Nodes are rescaled lazily: bring node ``i``'s floats to the current exponent."""
    if te[i] != exponent:
        factor = math.ldexp(1.0, te[i] - exponent)
        for k in range(tf.shape[1]):
            tf[i, k] *= factor
        te[i] = exponent


@njit(cache=True)
def _fen_add(ti, tf, tx, tr, te, m, r, si, sf, sx, x_is_min, exponent):
    i = r + 1
    while i <= m:
        _catch_up(tf, te, i, exponent)
        _add(ti[i], tf[i], tx[i], si, sf, sx, x_is_min)
        tr[i] = True
        i += i & (-i)


@njit(cache=True)
def _fen_sum(ti, tf, tx, tr, te, a, di, df, dx, x_is_min, exponent):
    """Add the prefix [0, a) into the destination; True if anything was added."""
    got = False
    i = a
    while i > 0:
        if tr[i]:
            _catch_up(tf, te, i, exponent)
            _add(di, df, dx, ti[i], tf[i], tx[i], x_is_min)
            got = True
        i -= i & (-i)
    return got


@njit(cache=True)
def _fen_clear(ti, tf, tx, tr, te, m, r, x_is_min):
    i = r + 1
    while i <= m:
        _reset(ti[i:i + 1], tf[i:i + 1], tx[i:i + 1], tr[i:i + 1], x_is_min)
        te[i] = 0
        i += i & (-i)


@njit(cache=True)
def run_mixed_windows(
    mode, times, plays, pair_ok, nv, pred_ptr, pred_idx, start_bits, final_bits,
    prog, op_ptr, x_is_min, n_i, n_f,
    a_int, a_flt, a_valid, a_key, rows,
    kept_bits, pair_of, pair_flags, m_of,
    h_rank, h_valid, q_a, q_b, q_eq, g_valid,
    win_lo, win_hi, max_batch, max_window,
    out_i, out_f, out_x, out_e, out_r,
):
    n_x = x_is_min.shape[0]
    n_pairs = m_of.shape[0]
    m_max = 1
    for p in range(n_pairs):
        if m_of[p] + 1 > m_max:
            m_max = m_of[p] + 1
    # Type-grained totals (also kept for event-grained variables, for pairs without predicates).
    si = np.zeros((nv, n_i), np.uint64)
    sf = np.zeros((nv, n_f), np.float64)
    sx = np.zeros((nv, n_x), np.int64)
    sr = np.zeros(nv, np.bool_)
    fi = np.zeros((1, n_i), np.uint64)
    ff = np.zeros((1, n_f), np.float64)
    fx = np.zeros((1, n_x), np.int64)
    fr = np.zeros(1, np.bool_)
    bi = np.zeros((max_batch, n_i), np.uint64)
    bf = np.zeros((max_batch, n_f), np.float64)
    bx = np.zeros((max_batch, n_x), np.int64)
    br = np.zeros(max_batch, np.bool_)
    bvar = np.zeros(max_batch, np.int64)
    bev = np.zeros(max_batch, np.int64)
    # any: per pair, prefix Fenwick (slot 0), suffix Fenwick (slot 1), buckets (slot 2).
    n_struct = n_pairs if mode == 0 else 0
    ti = np.zeros((max(1, n_struct), 3, m_max, n_i), np.uint64)
    tf = np.zeros((max(1, n_struct), 3, m_max, n_f), np.float64)
    tx = np.zeros((max(1, n_struct), 3, m_max, n_x), np.int64)
    tr = np.zeros((max(1, n_struct), 3, m_max), np.bool_)
    te = np.zeros((max(1, n_struct), 3, m_max), np.int64)  # per node: exponent of its floats
    for p in range(n_struct):
        for k in range(3):
            _reset(ti[p, k], tf[p, k], tx[p, k], tr[p, k], x_is_min)
    ins_rank = np.zeros((max(1, n_struct), max_window), np.int64)
    n_ins = np.zeros(max(1, n_struct), np.int64)
    # next / contiguous: waiting kept states per variable.
    cap = max_window if mode != 0 else 1
    wi = np.zeros((nv, cap, n_i), np.uint64)
    wf = np.zeros((nv, cap, n_f), np.float64)
    wx = np.zeros((nv, cap, n_x), np.int64)
    we = np.zeros((nv, cap), np.int64)
    wgone = np.zeros((nv, cap), np.bool_)
    wn = np.zeros(nv, np.int64)
    nvu = np.uint64(nv)
    for w in range(win_lo.shape[0]):
        _reset(si, sf, sx, sr, x_is_min)
        _reset(fi, ff, fx, fr, x_is_min)
        wn[:] = 0
        exponent = 0
        unit = 1.0
        i = win_lo[w]
        hi = win_hi[w]
        while i < hi:
            j = i + 1
            while j < hi and times[j] == times[i]:
                j += 1
            nb = 0
            extended = np.uint64(0)
            for e in range(i, j):
                bits = plays[e]
                if bits == 0:
                    continue
                okb = pair_ok[e]
                for v in range(nv):
                    if _bit(bits, v) == 0:
                        continue
                    _reset(bi[nb:nb + 1], bf[nb:nb + 1], bx[nb:nb + 1], br[nb:nb + 1], x_is_min)
                    alive = False
                    if _bit(start_bits, v):
                        bi[nb, 0] = 1
                        bf[nb, 0] = unit
                        alive = True
                    for pp in range(pred_ptr[v], pred_ptr[v + 1]):
                        u = pred_idx[pp]
                        if _bit(okb, np.uint64(v) * nvu + np.uint64(u)) == 0:
                            continue
                        p = pair_of[u, v]
                        kept = _bit(kept_bits, u) != 0
                        if mode == 0:
                            if p < 0:
                                if sr[u]:
                                    _add(bi[nb], bf[nb], bx[nb], si[u], sf[u], sx[u], x_is_min)
                                    alive = True
                            elif g_valid[p, e]:
                                fl = pair_flags[p]
                                m = m_of[p]
                                if fl & USE_PREFIX:
                                    if _fen_sum(ti[p, 0], tf[p, 0], tx[p, 0], tr[p, 0], te[p, 0], q_a[p, e],
                                                bi[nb], bf[nb], bx[nb], x_is_min, exponent):
                                        alive = True
                                if fl & USE_SUFFIX:
                                    if _fen_sum(ti[p, 1], tf[p, 1], tx[p, 1], tr[p, 1], te[p, 1], m - q_b[p, e],
                                                bi[nb], bf[nb], bx[nb], x_is_min, exponent):
                                        alive = True
                                if (fl & USE_EQUAL) and q_eq[p, e] >= 0:
                                    r = q_eq[p, e] + 1
                                    if tr[p, 2, r]:
                                        _catch_up(tf[p, 2], te[p, 2], r, exponent)
                                        _add(bi[nb], bf[nb], bx[nb], ti[p, 2, r], tf[p, 2, r],
                                             tx[p, 2, r], x_is_min)
                                        alive = True
                        elif not kept:
                            extended |= _ONE << np.uint64(u)
                            if sr[u]:
                                _add(bi[nb], bf[nb], bx[nb], si[u], sf[u], sx[u], x_is_min)
                                alive = True
                        else:
                            for k in range(wn[u]):
                                ek = we[u, k]
                                if p >= 0:
                                    if not (g_valid[p, e] and h_valid[p, ek]):
                                        continue
                                    if not _in_range(pair_flags[p], h_rank[p, ek], q_a[p, e], q_b[p, e], q_eq[p, e]):
                                        continue
                                _add(bi[nb], bf[nb], bx[nb], wi[u, k], wf[u, k], wx[u, k], x_is_min)
                                wgone[u, k] = True
                                alive = True
                    if alive:
                        _contribute(bi[nb], bf[nb], bx[nb], prog, op_ptr[v], op_ptr[v + 1],
                                    rows[e], a_int, a_flt, a_valid, a_key)
                        bvar[nb] = v
                        bev[nb] = e
                        nb += 1
            # Waiting trends extended by this batch stop waiting (next); all stop (contiguous).
            if mode == 2:
                _reset(si, sf, sx, sr, x_is_min)
                wn[:] = 0
            elif mode == 1:
                for u in range(nv):
                    if _bit(extended, u):
                        _reset(si[u:u + 1], sf[u:u + 1], sx[u:u + 1], sr[u:u + 1], x_is_min)
                    if _bit(kept_bits, u):
                        n_keep = 0
                        for k in range(wn[u]):
                            if not wgone[u, k]:
                                if n_keep != k:
                                    wi[u, n_keep] = wi[u, k]
                                    wf[u, n_keep] = wf[u, k]
                                    wx[u, n_keep] = wx[u, k]
                                    we[u, n_keep] = we[u, k]
                                wgone[u, n_keep] = False
                                n_keep += 1
                        wn[u] = n_keep
            big = 0.0
            for k in range(nb):
                v = bvar[k]
                e = bev[k]
                if mode != 0 and _bit(final_bits, v):
                    _add(fi[0], ff[0], fx[0], bi[k], bf[k], bx[k], x_is_min)
                    fr[0] = True
                    m = _max_abs(ff[0])
                    if m > big:
                        big = m
                if mode != 0 and _bit(kept_bits, v):
                    n = wn[v]
                    wi[v, n] = bi[k]
                    wf[v, n] = bf[k]
                    wx[v, n] = bx[k]
                    we[v, n] = e
                    wgone[v, n] = False
                    wn[v] = n + 1
                else:
                    _add(si[v], sf[v], sx[v], bi[k], bf[k], bx[k], x_is_min)
                    sr[v] = True
                if mode == 0:
                    for vv in range(nv):
                        p = pair_of[v, vv]
                        if p < 0 or not h_valid[p, e]:
                            continue
                        r = h_rank[p, e]
                        m = m_of[p]
                        fl = pair_flags[p]
                        if fl & USE_PREFIX:
                            _fen_add(ti[p, 0], tf[p, 0], tx[p, 0], tr[p, 0], te[p, 0], m, r,
                                     bi[k], bf[k], bx[k], x_is_min, exponent)
                        if fl & USE_SUFFIX:
                            _fen_add(ti[p, 1], tf[p, 1], tx[p, 1], tr[p, 1], te[p, 1], m, m - 1 - r,
                                     bi[k], bf[k], bx[k], x_is_min, exponent)
                        if fl & USE_EQUAL:
                            _catch_up(tf[p, 2], te[p, 2], r + 1, exponent)
                            _add(ti[p, 2, r + 1], tf[p, 2, r + 1], tx[p, 2, r + 1], bi[k], bf[k], bx[k], x_is_min)
                            tr[p, 2, r + 1] = True
                        ins_rank[p, n_ins[p]] = r
                        n_ins[p] += 1
                m = _max_abs(bf[k])
                if m > big:
                    big = m
                m = _max_abs(sf[v])
                if m > big:
                    big = m
            if big > RESCALE_ABOVE:
                scale = math.ldexp(1.0, -RESCALE_STEP)
                sf *= scale
                ff *= scale
                for u in range(nv):
                    for k in range(wn[u]):
                        for q in range(n_f):
                            wf[u, k, q] *= scale
                exponent += RESCALE_STEP  # Fenwick nodes catch up lazily (te)
                unit = math.ldexp(1.0, -exponent)
            i = j
        if mode == 0:
            for v in range(nv):
                if _bit(final_bits, v) and sr[v]:
                    _add(fi[0], ff[0], fx[0], si[v], sf[v], sx[v], x_is_min)
                    fr[0] = True
            # Clear exactly the Fenwick nodes this window touched.
            for p in range(n_struct):
                m = m_of[p]
                for k in range(n_ins[p]):
                    r = ins_rank[p, k]
                    _fen_clear(ti[p, 0], tf[p, 0], tx[p, 0], tr[p, 0], te[p, 0], m, r, x_is_min)
                    _fen_clear(ti[p, 1], tf[p, 1], tx[p, 1], tr[p, 1], te[p, 1], m, m - 1 - r, x_is_min)
                    _reset(ti[p, 2, r + 1:r + 2], tf[p, 2, r + 1:r + 2], tx[p, 2, r + 1:r + 2],
                           tr[p, 2, r + 1:r + 2], x_is_min)
                    te[p, 2, r + 1] = 0
                n_ins[p] = 0
        out_i[w] = fi[0]
        out_f[w] = ff[0]
        out_x[w] = fx[0]
        out_e[w] = exponent
        out_r[w] = fr[0]
