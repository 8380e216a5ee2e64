"""Compiled (numba) executors over the channels of :mod:`cogra.runtime.fast.channels`.

They compute exactly what :mod:`cogra.runtime.type_grained` and
:mod:`cogra.runtime.next_cont` compute (the docstrings there explain the method);
only the number representation differs.  One call evaluates every window of every
sub-stream: windows are ``[win_lo[w], win_hi[w])`` ranges of the event arrays, and
results land in row ``w`` of the output arrays.

Event inputs, per event ``e`` of the concatenated sub-streams:

* ``times[e]``   -- ties form a batch (never adjacent to each other);
* ``plays[e]``   -- bit ``v``: the event may play variable ``v``;
* ``pair_ok[e]`` -- bit ``v * nv + u``: playing ``v`` it may follow ``u`` (predicates on
  adjacent events that read only the new event are folded in here; all ones otherwise).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from cogra.runtime.fast.channels import (
    MAX_KEY_IDENTITY,
    MIN_KEY_IDENTITY,
    OP_CNT,
    OP_MAX,
    OP_MIN,
    OP_NN,
    OP_SUM_FLOAT,
    OP_SUM_INT,
)

RESCALE_ABOVE = 2.0**600
RESCALE_STEP = 600
_ONE = np.uint64(1)


@njit(cache=True, inline="always")
def _bit(bits, i):
    return (bits >> np.uint64(i)) & _ONE


@njit(cache=True)
def _reset(si, sf, sx, sr, x_is_min):
    si[:] = 0
    sf[:] = 0.0
    sr[:] = False
    for k in range(sx.shape[1]):
        sx[:, k] = MIN_KEY_IDENTITY if x_is_min[k] else MAX_KEY_IDENTITY


@njit(cache=True, inline="always")
def _add(di, df, dx, si, sf, sx, x_is_min):
    for k in range(di.shape[0]):
        di[k] += si[k]
    for k in range(df.shape[0]):
        df[k] += sf[k]
    for k in range(dx.shape[0]):
        if x_is_min[k]:
            if sx[k] < dx[k]:
                dx[k] = sx[k]
        elif sx[k] > dx[k]:
            dx[k] = sx[k]


@njit(cache=True, inline="always")
def _contribute(vi, vf, vx, prog, lo, hi, e, a_int, a_flt, a_valid, a_key):
    """The event ``e`` extends the ``vi[0]`` trends of this state (report Table 9)."""
    ci = vi[0]
    cf = vf[0]
    for k in range(lo, hi):
        op = prog[k, 1]
        a = prog[k, 2]
        s1 = prog[k, 3]
        s2 = prog[k, 4]
        s3 = prog[k, 5]
        if op == OP_CNT:
            vi[s1] += ci
            vf[s2] += cf
        elif not a_valid[a, e]:
            continue
        elif op == OP_NN:
            vi[s1] += ci
            vf[s2] += cf
        elif op == OP_SUM_INT:
            x = a_int[a, e]
            vi[s1] += np.uint64(x) * ci
            vf[s2] += np.float64(x) * cf
            vf[s3] += abs(np.float64(x)) * cf
        elif op == OP_SUM_FLOAT:
            vf[s2] += a_flt[a, e] * cf
        elif op == OP_MIN:
            if a_key[a, e] < vx[s1]:
                vx[s1] = a_key[a, e]
        elif op == OP_MAX:
            if a_key[a, e] > vx[s1]:
                vx[s1] = a_key[a, e]


@njit(cache=True, inline="always")
def _max_abs(sf):
    m = 0.0
    for k in range(sf.shape[0]):
        if abs(sf[k]) > m:
            m = abs(sf[k])
    return m


@njit(cache=True)
def run_windows(
    mode,  # 0 any (type-grained), 1 next, 2 contiguous
    times, plays, pair_ok, nv, pred_ptr, pred_idx, start_bits, final_bits,
    prog, op_ptr, x_is_min, n_i, n_f,
    a_int, a_flt, a_valid, a_key,
    win_lo, win_hi, max_batch,
    out_i, out_f, out_x, out_e, out_r,
):
    n_x = x_is_min.shape[0]
    # Per-variable states: running totals (any) or waiting trends (next / contiguous).
    si = np.zeros((nv, n_i), np.uint64)
    sf = np.zeros((nv, n_f), np.float64)
    sx = np.zeros((nv, n_x), np.int64)
    sr = np.zeros(nv, np.bool_)
    # Finished trends (next / contiguous accumulate them as they finish).
    fi = np.zeros((1, n_i), np.uint64)
    ff = np.zeros((1, n_f), np.float64)
    fx = np.zeros((1, n_x), np.int64)
    fr = np.zeros(1, np.bool_)
    # One state per (event, variable) of the current batch.
    bi = np.zeros((max_batch, n_i), np.uint64)
    bf = np.zeros((max_batch, n_f), np.float64)
    bx = np.zeros((max_batch, n_x), np.int64)
    br = np.zeros(max_batch, np.bool_)
    bvar = np.zeros(max_batch, np.int64)
    nvu = np.uint64(nv)
    for w in range(win_lo.shape[0]):
        _reset(si, sf, sx, sr, x_is_min)
        _reset(fi, ff, fx, fr, x_is_min)
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
                    for p in range(pred_ptr[v], pred_ptr[v + 1]):
                        u = pred_idx[p]
                        if _bit(okb, np.uint64(v) * nvu + np.uint64(u)) == 0:
                            continue
                        extended |= _ONE << np.uint64(u)
                        if sr[u]:
                            _add(bi[nb], bf[nb], bx[nb], si[u], sf[u], sx[u], x_is_min)
                            alive = True
                    if alive:
                        _contribute(bi[nb], bf[nb], bx[nb], prog, op_ptr[v], op_ptr[v + 1],
                                    e, a_int, a_flt, a_valid, a_key)
                        bvar[nb] = v
                        nb += 1
            if mode == 2:
                _reset(si, sf, sx, sr, x_is_min)
            elif mode == 1:
                for u in range(nv):
                    if _bit(extended, u):
                        _reset(si[u:u + 1], sf[u:u + 1], sx[u:u + 1], sr[u:u + 1], x_is_min)
            big = 0.0
            for k in range(nb):
                v = bvar[k]
                _add(si[v], sf[v], sx[v], bi[k], bf[k], bx[k], x_is_min)
                sr[v] = True
                m = _max_abs(sf[v])
                if m > big:
                    big = m
                if mode != 0 and _bit(final_bits, v):
                    _add(fi[0], ff[0], fx[0], bi[k], bf[k], bx[k], x_is_min)
                    fr[0] = True
                    m = _max_abs(ff[0])
                    if m > big:
                        big = m
            if big > RESCALE_ABOVE:
                scale = math.ldexp(1.0, -RESCALE_STEP)
                sf *= scale
                ff *= scale
                exponent += RESCALE_STEP
                unit = math.ldexp(1.0, -exponent)
            i = j
        if mode == 0:
            for v in range(nv):
                if _bit(final_bits, v) and sr[v]:
                    _add(fi[0], ff[0], fx[0], si[v], sf[v], sx[v], x_is_min)
                    fr[0] = True
        out_i[w] = fi[0]
        out_f[w] = ff[0]
        out_x[w] = fx[0]
        out_e[w] = exponent
        out_r[w] = fr[0]
