"""Compiled (numba) executors over the channels of :mod:`cogra.runtime.compiled.channels`.

They compute exactly what :mod:`cogra.runtime.executors.type_grained` and
:mod:`cogra.runtime.executors.pattern_grained` compute (the docstrings there explain the method);
only the number representation differs.  One call evaluates every window of every
sub-stream: windows are ``[win_lo[w], win_hi[w])`` ranges of the event arrays, and
results land in row ``w`` of the output arrays.

Event inputs, per event ``e`` of the concatenated sub-streams:

* ``times[e]``   -- ties form a batch (never adjacent to each other);
* ``plays[e]``   -- bit ``v``: the event may play variable ``v``;
* ``pair_ok[e]`` -- bit ``p``, edge ``p`` of the predecessor lists (``pred_idx[p]`` of
  ``v``: :func:`cogra.runtime.compiled.codes.edge_bits`): playing ``v`` it may follow ``u`` (predicates on
  adjacent events that read only the new event are folded in here; all ones otherwise).
  An empty ``pair_ok`` stands for all ones: a query without such predicates then builds
  no array of them (two passes over fresh memory, ~0.13 s of a first call over 3M events).
"""

from __future__ import annotations

import math

import numpy as np

from cogra.runtime.compiled.channels import (
    MAX_KEY_IDENTITY,
    MIN_KEY_IDENTITY,
    OP_CNT,
    OP_MAX,
    OP_MIN,
    OP_NN,
    OP_SUM_FLOAT,
    OP_SUM_INT,
)
from cogra.runtime.compiled.jit import NO_REFCOUNTS, njit

RESCALE_ABOVE = 2.0**600
RESCALE_STEP = 600
_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True, inline="always")
def _bit(bits, i):
    return (bits >> np.uint64(i)) & _ONE


@njit(cache=True, inline="always")
def _edge_ok(okb, p):
    """Whether edge ``p``'s pair bit passes: edges numbered past the word's 64 bits carry
    no check read as a bit (:func:`cogra.analysis.kernel_reach.checks_past_the_word`) and
    always pass -- a shift by 64 or more is undefined."""
    return p >= 64 or (okb >> np.uint64(p)) & _ONE != 0


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
def _reset_row(di, df, dx, d, x_is_min):
    for k in range(di.shape[1]):
        di[d, k] = 0
    for k in range(df.shape[1]):
        df[d, k] = 0.0
    for k in range(dx.shape[1]):
        dx[d, k] = MIN_KEY_IDENTITY if x_is_min[k] else MAX_KEY_IDENTITY


@njit(cache=True, inline="always")
def _add_row(di, df, dx, d, si, sf, sx, s, x_is_min):
    """Row ``d`` of the destination += row ``s`` of the source (min/max for extremes)."""
    for k in range(di.shape[1]):
        di[d, k] += si[s, k]
    for k in range(df.shape[1]):
        df[d, k] += sf[s, k]
    for k in range(dx.shape[1]):
        if x_is_min[k]:
            if sx[s, k] < dx[d, k]:
                dx[d, k] = sx[s, k]
        elif sx[s, k] > dx[d, k]:
            dx[d, k] = sx[s, k]


@njit(cache=True, inline="always")
def _contribute_row(vi, vf, vx, d, prog, lo, hi, e, a_int, a_flt, a_valid, a_key):
    """The event ``e`` extends the ``vi[d, 0]`` trends of state row ``d`` (report Table 9)."""
    ci = vi[d, 0]
    cf = vf[d, 0]
    for k in range(lo, hi):
        op = prog[k, 1]
        a = prog[k, 2]
        s1 = prog[k, 3]
        s2 = prog[k, 4]
        if op == OP_CNT:
            if s1 >= 0:  # else approximate: no modular channel (channels.channel_layout)
                vi[d, s1] += ci
            vf[d, s2] += cf
        elif not a_valid[a, e]:
            continue
        elif op == OP_NN:
            if s1 >= 0:
                vi[d, s1] += ci
            vf[d, s2] += cf
        elif op == OP_SUM_INT:
            x = a_int[a, e]
            vi[d, s1] += np.uint64(x) * ci
            vf[d, s2] += np.float64(x) * cf
            if prog[k, 5] >= 0:  # else never negative: the approximation is the bound
                vf[d, prog[k, 5]] += abs(np.float64(x)) * cf
        elif op == OP_SUM_FLOAT:
            vf[d, s2] += a_flt[a, e] * cf
            if prog[k, 5] >= 0:  # else never negative
                vf[d, prog[k, 5]] += abs(a_flt[a, e]) * cf
        elif op == OP_MIN:
            if a_key[a, e] < vx[d, s1]:
                vx[d, s1] = a_key[a, e]
        elif op == OP_MAX:
            if a_key[a, e] > vx[d, s1]:
                vx[d, s1] = a_key[a, e]


@njit(cache=True, inline="always")
def _max_abs_row(df, d):
    m = 0.0
    for k in range(df.shape[1]):
        if abs(df[d, k]) > m:
            m = abs(df[d, k])
    return m


@njit(cache=True, inline="always")
def _max_abs(sf):
    m = 0.0
    for k in range(sf.shape[0]):
        if abs(sf[k]) > m:
            m = abs(sf[k])
    return m


@njit(cache=True, inline="always")
def _batch(mode, i, j, plays, pair_ok, nv, pred_ptr, pred_idx, start_bits, final_bits,
           prog, op_ptr, x_is_min, a_int, a_flt, a_valid, a_key, rows, unit,
           si, sf, sx, sr, bi, bf, bx, bvar, finishing=True, finals_now=False):
    """Events ``i..j-1`` (one timestamp) update one state, exactly as ``run_windows``
    (a new trend counts ``unit`` in the float channel).  Returns whether any event
    played a variable.

    Absence (docs/language.md, Absence at the edge of a pattern): ``start_bits`` empty where a leading blocker came
    earlier in the window; ``finishing`` False where a trailing blocker comes later, so
    the trends ending here are not added to the finished row; ``finals_now`` (under any)
    adds them per batch, as next and contiguous always do, instead of at the window's end."""
    fin = nv
    nb = 0
    extended = np.uint64(0)
    checked = pair_ok.shape[0] > 0
    for e in range(i, j):
        bits = plays[e]
        if bits == 0:
            continue
        okb = pair_ok[e] if checked else _ALL
        for v in range(nv):
            if _bit(bits, v) == 0:
                continue
            _reset_row(bi, bf, bx, nb, x_is_min)
            alive = False
            if _bit(start_bits, v):
                bi[nb, 0] = 1
                bf[nb, 0] = unit
                alive = True
            for p in range(pred_ptr[v], pred_ptr[v + 1]):
                u = pred_idx[p]
                if checked and not _edge_ok(okb, p):
                    continue  # (unchecked: no pair bit is read, so automata past 64 edges run too)
                extended |= _ONE << np.uint64(u)
                if sr[u]:
                    _add_row(bi, bf, bx, nb, si, sf, sx, u, x_is_min)
                    alive = True
            if alive:
                _contribute_row(bi, bf, bx, nb, prog, op_ptr[v], op_ptr[v + 1],
                                rows[e], a_int, a_flt, a_valid, a_key)
                bvar[nb] = v
                nb += 1
    if mode == 2:
        for r in range(nv):
            _reset_row(si, sf, sx, r, x_is_min)
            sr[r] = False
    elif mode == 1:
        for u in range(nv):
            if _bit(extended, u):
                _reset_row(si, sf, sx, u, x_is_min)
                sr[u] = False
    for k in range(nb):
        v = bvar[k]
        _add_row(si, sf, sx, v, bi, bf, bx, k, x_is_min)
        sr[v] = True
        if (mode != 0 or finals_now) and finishing and _bit(final_bits, v):
            _add_row(si, sf, sx, fin, bi, bf, bx, k, x_is_min)
            sr[fin] = True
    return nb > 0


@njit(cache=True)
def _run_window(mode, lo, hi, times, plays, pair_ok, nv, pred_ptr, pred_idx, start_bits, final_bits,
                prog, op_ptr, x_is_min, a_int, a_flt, a_valid, a_key, rows,
                si, sf, sx, sr, exponent, bi, bf, bx, bvar, start_until, finish_from, w):
    """Events ``lo .. hi-1``, batch by batch (ties together), applied to the state
    ``s*`` whose floats are scaled by ``2**-exponent``; returns the new exponent.
    Trends start only at events up to ``start_until[w]`` and count as finished only when
    they end from ``finish_from[w]`` on (absence, :func:`run_windows`; empty arrays: no
    such negation)."""
    fin = nv
    unit = math.ldexp(1.0, -exponent)
    leading = start_until.shape[0] > 0
    trailing = finish_from.shape[0] > 0
    none = np.uint64(0)
    i = lo
    while i < hi:
        j = i + 1
        while j < hi and times[j] == times[i]:
            j += 1
        starts = start_bits if not leading or times[i] <= start_until[w] else none
        finishing = not trailing or times[i] >= finish_from[w]
        _batch(mode, i, j, plays, pair_ok, nv, pred_ptr, pred_idx, starts, final_bits,
               prog, op_ptr, x_is_min, a_int, a_flt, a_valid, a_key, rows, unit,
               si, sf, sx, sr, bi, bf, bx, bvar, finishing, trailing)
        big = _max_abs_row(sf, fin)  # empty until the end under any
        for v in range(nv):
            m = _max_abs_row(sf, v)
            if m > big:
                big = m
        if big > RESCALE_ABOVE:
            sf *= math.ldexp(1.0, -RESCALE_STEP)
            exponent += RESCALE_STEP
            unit = math.ldexp(1.0, -exponent)
        i = j
    return exponent


@njit(cache=True)
def _emit_window(mode, nv, final_bits, x_is_min, si, sf, sx, sr, exponent, w,
                 out_i, out_f, out_x, out_e, out_r, finals_now=False):
    """Row ``w`` of the outputs: the finished trends (under any, those ending at a final
    variable are added now, unless ``finals_now`` added them batch by batch)."""
    fin = nv
    if mode == 0 and not finals_now:
        for v in range(nv):
            if _bit(final_bits, v) and sr[v]:
                _add_row(si, sf, sx, fin, si, sf, sx, v, x_is_min)
                sr[fin] = True
    out_i[w] = si[fin]
    out_f[w] = sf[fin]
    out_x[w] = sx[fin]
    out_e[w] = exponent
    out_r[w] = sr[fin]


@njit(cache=True, **NO_REFCOUNTS)
def _copy_output(out_i, out_f, out_x, out_e, out_r, src, dst):
    """Output row ``dst`` := output row ``src``."""
    for k in range(out_i.shape[1]):
        out_i[dst, k] = out_i[src, k]
    for k in range(out_f.shape[1]):
        out_f[dst, k] = out_f[src, k]
    for k in range(out_x.shape[1]):
        out_x[dst, k] = out_x[src, k]
    out_e[dst] = out_e[src]
    out_r[dst] = out_r[src]


@njit(cache=True)
def run_windows(pattern, positions, slots, attributes, win_lo, win_hi, max_batch, out, start_until, finish_from):
    """Every window ``[win_lo[w], win_hi[w])``, each from empty states, into row ``w`` of
    ``out`` (:mod:`cogra.runtime.compiled.kernel_args`' groups).  Absence (docs/language.md,
    Absence at the edge of a pattern), per window, in the times' type:
    ``start_until[w]`` the first leading blocker's time (trends start at events up to
    it), ``finish_from[w]`` the last trailing blocker's (trends count when they end from
    it on); an empty array where the query has no such negation."""
    mode, nv, pred_ptr, pred_idx, start_bits, final_bits = pattern
    times, plays, pair_ok, rows = positions
    prog, op_ptr, x_is_min, n_i, n_f = slots
    a_int, a_flt, a_valid, a_key = attributes
    out_i, out_f, out_x, out_e, out_r = out
    n_x = x_is_min.shape[0]
    leading = start_until.shape[0] > 0
    trailing = finish_from.shape[0] > 0
    # Rows 0..nv-1: per-variable states (running totals for any, waiting trends for
    # next / contiguous); row nv: finished trends.
    si = np.zeros((nv + 1, n_i), np.uint64)
    sf = np.zeros((nv + 1, n_f), np.float64)
    sx = np.zeros((nv + 1, n_x), np.int64)
    sr = np.zeros(nv + 1, np.bool_)
    # One state per (event, variable) of the current batch.
    bi = np.zeros((max_batch, n_i), np.uint64)
    bf = np.zeros((max_batch, n_f), np.float64)
    bx = np.zeros((max_batch, n_x), np.int64)
    bvar = np.zeros(max_batch, np.int64)
    for w in range(win_lo.shape[0]):
        if (w > 0 and win_lo[w] == win_lo[w - 1] and win_hi[w] == win_hi[w - 1]
                and (not leading or start_until[w - 1] == start_until[w])
                and (not trailing or finish_from[w - 1] == finish_from[w])):
            # The same events as the previous window (a sparse sub-stream under a sliding
            # window) and the same blockers: the same result.
            _copy_output(out_i, out_f, out_x, out_e, out_r, w - 1, w)
            continue
        for r in range(nv + 1):
            _reset_row(si, sf, sx, r, x_is_min)
            sr[r] = False
        exponent = _run_window(mode, win_lo[w], win_hi[w], times, plays, pair_ok, nv, pred_ptr, pred_idx,
                               start_bits, final_bits, prog, op_ptr, x_is_min, a_int, a_flt, a_valid,
                               a_key, rows, si, sf, sx, sr, 0, bi, bf, bx, bvar, start_until, finish_from, w)
        _emit_window(mode, nv, final_bits, x_is_min, si, sf, sx, sr, exponent, w,
                     out_i, out_f, out_x, out_e, out_r, trailing)


@njit(cache=True)
def run_windows_from(pattern, positions, slots, attributes, win_lo, win_hi, max_batch, states):
    """Continue windows from carried states (the streaming engine, :mod:`cogra.runtime.stream`).

    Window ``w`` starts from state ``states[w]`` (a :class:`~cogra.runtime.compiled.kernel_args.Channels`
    of all ``nv + 1`` rows, floats scaled by ``2**-states.e[w]``), runs events
    ``win_lo[w] .. win_hi[w]-1`` as :func:`run_windows` does, and leaves its new state in
    place.  Nothing is finalised: under ``any`` the finished row is added when the window
    closes.
    """
    mode, nv, pred_ptr, pred_idx, start_bits, final_bits = pattern
    times, plays, pair_ok, rows = positions
    prog, op_ptr, x_is_min, _n_i, _n_f = slots
    a_int, a_flt, a_valid, a_key = attributes
    st_i, st_f, st_x, st_e, st_r = states
    n_i = st_i.shape[2]
    n_f = st_f.shape[2]
    n_x = st_x.shape[2]
    bi = np.zeros((max_batch, n_i), np.uint64)
    bf = np.zeros((max_batch, n_f), np.float64)
    bx = np.zeros((max_batch, n_x), np.int64)
    bvar = np.zeros(max_batch, np.int64)
    for w in range(win_lo.shape[0]):
        st_e[w] = _run_window(mode, win_lo[w], win_hi[w], times, plays, pair_ok, nv, pred_ptr, pred_idx,
                              start_bits, final_bits, prog, op_ptr, x_is_min, a_int, a_flt, a_valid,
                              a_key, rows, st_i[w], st_f[w], st_x[w], st_r[w], st_e[w], bi, bf, bx, bvar,
                              times[:0], times[:0], w)
