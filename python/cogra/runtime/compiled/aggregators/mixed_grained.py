"""Compiled executors with event-grained variables (report section 5, and ``next`` fix).

A predicate on adjacent events that reads the earlier event ``U`` forces ``U``'s
events to be kept with their own states.  The compiled path handles the common form

    h(U) ∘ g(NEXT(V))      with ∘ in <, <=, >, >=, =, <>

where ``h`` reads only the earlier event and ``g`` only the new one (both evaluated
vectorised beforehand).  The values of ``h`` are ranked once, so that

* under ``any`` the kept states live in Fenwick trees over those ranks (prefix and
  suffix sums of state vectors, and per-rank buckets for ``=``): a new event sums
  its predecessors in O(log n) instead of scanning them -- this is what makes the
  mixed-grained executor asymptotically faster than an event-grained graph.  The
  trees run over the ranks *within a block of positions* holding the window
  (:func:`_window_ranks`), so they stay as small as the window, and their nodes carry
  only the channels the kept variable's states can hold (``live_*``);
* under ``next`` / ``contiguous`` kept states are *waiting* trends, scanned and
  consumed by the first events that satisfy the predicate (the waiting lists are
  short: contiguous keeps one timestamp's events, next drops consumed ones).

Per pair ``p = (u, v)``, a new event ``e`` playing ``v`` wants the kept states of
``u`` with rank in ``[0, q_a[p, r])`` and/or ``[q_b[p, r], M[p])``, or exactly
``q_eq[p, r]`` (``r = rows[e]``, the event's table row) -- see :func:`pair_ranges`.
"""

from __future__ import annotations

import math

import numpy as np
from cogra.runtime.compiled.jit import njit

from cogra.runtime.compiled.aggregators.coarse_grained import (
    RESCALE_ABOVE,
    RESCALE_STEP,
    _ONE,
    _add,
    _add_row,
    _bit,
    _contribute_row,
    _edge_ok,
    _max_abs_row,
    _reset,
    _reset_row,
)
from cogra.runtime.compiled.channels import MAX_KEY_IDENTITY, MIN_KEY_IDENTITY
from cogra.runtime.compiled.codes import CROSS_ALL, SHARE_SAVE, SHARE_TAKE, USE_EQUAL, USE_PREFIX, USE_SUFFIX

RADIX_BITS = 11  # ranks are sorted in passes of up to this many bits (2048 buckets)



def pair_ranges(op: str, vals: np.ndarray, g: np.ndarray,
                g_rank: np.ndarray | None = None) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """For ``h op g`` over the sorted distinct values ``vals`` of ``h``: the rank ranges.

    ``g_rank``: where every ``g`` is one of ``vals``, its index there (saves two searches).
    Returns ``(flags, a, b, eq)``: prefix ``[0, a)``, suffix ``[b, M)``, equal rank ``eq``
    (-1 when no value equals ``g``).
    """
    lt, le = value_bounds(vals, g, g_rank)
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


def value_bounds(vals: np.ndarray, g: np.ndarray,
                 g_rank: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(lt, le)``: per ``g``, the number of ``vals`` (sorted, distinct) below it and up to
    it (``g_rank``: as in :func:`pair_ranges`)."""
    if g_rank is not None:
        return g_rank, g_rank + 1
    if (dense := _dense_bounds(vals, g)) is not None:
        return dense
    lt = np.searchsorted(vals, g, side="left").astype(np.int64)
    le = np.searchsorted(vals, g, side="right").astype(np.int64)
    return lt, le


def _dense_bounds(vals: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(lt, le)`` of :func:`pair_ranges` by a table over the values' range, where ``vals``
    and ``g`` are whole numbers spanning few values (a negation's blocker counts, small
    integer attributes): one pass, where binary searches of unsorted ``g`` missed the cache
    at every step (3M rows: 0.62 s -> ~0.03 s)."""
    if len(vals) == 0 or len(g) == 0:
        return None
    v0, v1 = float(vals[0]), float(vals[-1])
    if v1 - v0 > max(1024, 4 * len(g)) or not (np.all(vals == np.floor(vals))
                                                and np.all(g == np.floor(g))):
        return None  # (a NaN in g fails the second test)
    span = int(v1 - v0) + 1
    present = np.zeros(span, np.int64)
    present[(vals - v0).astype(np.int64)] = 1
    below = np.zeros(span + 1, np.int64)  # below[k]: values < v0 + k
    np.cumsum(present, out=below[1:])
    k = np.clip(g - v0, -1, span).astype(np.int64)
    inside = (k >= 0) & (k < span)
    lt = np.where(k < 0, 0, np.where(k >= span, len(vals), below[np.clip(k, 0, span)]))
    le = lt + np.where(inside, present[np.clip(k, 0, span - 1)], 0)
    return lt.astype(np.int64), le.astype(np.int64)


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
def _catch_up(tf, te, p, t, i, exponent):
    """Nodes are rescaled lazily: bring node ``i``'s floats to the current exponent."""
    if te[p, t, i] != exponent:
        factor = math.ldexp(1.0, te[p, t, i] - exponent)
        for k in range(tf.shape[3]):
            tf[p, t, i, k] *= factor
        te[p, t, i] = exponent


@njit(cache=True, inline="always")
def _node_into(di, df, dx, d, ti, tf, tx, p, t, i, x_is_min, live_i, live_f, live_x):
    """Row ``d`` of the batch += node ``i`` of tree ``(p, t)`` (its live channels)."""
    for c in range(live_i[p, 0]):
        k = live_i[p, c + 1]
        di[d, k] += ti[p, t, i, k]
    for c in range(live_f[p, 0]):
        k = live_f[p, c + 1]
        df[d, k] += tf[p, t, i, k]
    for c in range(live_x[p, 0]):
        k = live_x[p, c + 1]
        if x_is_min[k]:
            if tx[p, t, i, k] < dx[d, k]:
                dx[d, k] = tx[p, t, i, k]
        elif tx[p, t, i, k] > dx[d, k]:
            dx[d, k] = tx[p, t, i, k]


@njit(cache=True, inline="always")
def _into_node(ti, tf, tx, tr, p, t, i, si, sf, sx, s, x_is_min, live_i, live_f, live_x):
    """Node ``i`` of tree ``(p, t)`` += row ``s`` of the batch (its live channels)."""
    for c in range(live_i[p, 0]):
        k = live_i[p, c + 1]
        ti[p, t, i, k] += si[s, k]
    for c in range(live_f[p, 0]):
        k = live_f[p, c + 1]
        tf[p, t, i, k] += sf[s, k]
    for c in range(live_x[p, 0]):
        k = live_x[p, c + 1]
        if x_is_min[k]:
            if sx[s, k] < tx[p, t, i, k]:
                tx[p, t, i, k] = sx[s, k]
        elif sx[s, k] > tx[p, t, i, k]:
            tx[p, t, i, k] = sx[s, k]
    tr[p, t, i] = True


@njit(cache=True, inline="always")
def _fen_add(ti, tf, tx, tr, te, p, t, m, r, si, sf, sx, s, x_is_min, exponent, live_i, live_f, live_x):
    """Insert row ``s`` of the batch at rank ``r`` of tree ``(p, t)``."""
    i = r + 1
    while i <= m:
        if exponent != 0:
            _catch_up(tf, te, p, t, i, exponent)
        _into_node(ti, tf, tx, tr, p, t, i, si, sf, sx, s, x_is_min, live_i, live_f, live_x)
        i += i & (-i)


@njit(cache=True, inline="always")
def _fen_sum(ti, tf, tx, tr, te, p, t, a, di, df, dx, d, x_is_min, exponent, live_i, live_f, live_x):
    """Add tree ``(p, t)``'s prefix [0, a) into row ``d``; True if anything was added."""
    got = False
    i = a
    while i > 0:
        if tr[p, t, i]:
            if exponent != 0:
                _catch_up(tf, te, p, t, i, exponent)
            _node_into(di, df, dx, d, ti, tf, tx, p, t, i, x_is_min, live_i, live_f, live_x)
            got = True
        i -= i & (-i)
    return got


@njit(cache=True)
def _radix_sort_into(keys, tags, n, count, tmp_k, tmp_t):
    """Sort ``keys[:n]`` (non-negative) with ``tags[:n]`` alongside, stably: least significant
    digit first, up to :data:`RADIX_BITS` bits per pass, with the scratch given (``count``:
    ``2**RADIX_BITS + 1`` entries, ``tmp_k``/``tmp_t``: ``n``); returns whether the sorted
    keys and tags ended in the scratch (else in ``keys``/``tags``).  Ranks of a block are a
    few hundred to a few thousand keys below 2**22: two passes over them beat a comparison
    sort's mispredicted branches several times.  It allocates nothing and returns no array, so
    mixed_one_pass's loop, compiled without reference counts, can call it: numba compiles a
    callee with its caller's options and keeps that compile for every caller of the same
    types -- one returning an array compiled so would hand reference-counted callers a
    freed one."""
    top = 0
    for t in range(n):
        if keys[t] > top:
            top = keys[t]
    bits = 0
    while (top >> bits) > 0:
        bits += 1
    if bits == 0:
        return False
    passes = (bits + RADIX_BITS - 1) // RADIX_BITS
    width = (bits + passes - 1) // passes
    mask = (1 << width) - 1
    buckets = (1 << width) + 1
    src_k, src_t = keys, tags
    dst_k, dst_t = tmp_k, tmp_t
    for q in range(passes):
        shift = q * width
        for d in range(buckets):
            count[d] = 0
        for t in range(n):
            count[((src_k[t] >> shift) & mask) + 1] += 1
        for d in range(1, buckets):
            count[d] += count[d - 1]
        for t in range(n):
            d = (src_k[t] >> shift) & mask
            dst_k[count[d]] = src_k[t]
            dst_t[count[d]] = src_t[t]
            count[d] += 1
        src_k, dst_k = dst_k, src_k
        src_t, dst_t = dst_t, src_t
    return passes % 2 == 1


def unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(distinct values ascending, each value's index among them)``: the predicate's
    global ranks, with -0.0 and 0.0 one value (they compare equal).

    A radix sort of order-preserving integer keys (:func:`_radix_sort_into`), as
    ``np.unique`` but 2-3x faster on this machine under numpy 2.4 (q3's prices, per call
    of 21k / 42k / 200k / 2M values: 0.30 / 0.61 / 7.6 / 80 ms against 0.91 / 1.99 / 15 /
    176 ms; this set-up step is a tenth of q3's engine time per Spark call).
    ``np.unique`` itself where a value is NaN."""
    x = np.asarray(values, np.float64)
    keys = np.empty(len(x), np.int64)
    if len(x) == 0 or not _order_keys(x, keys):
        vals, inverse = np.unique(x + 0.0, return_inverse=True)
        return vals, inverse.reshape(-1).astype(np.int64, copy=False)
    return _dense_ranks(x, keys)


@njit(cache=True)
def _order_keys(x, keys):
    """``keys``: integers in the order of the doubles ``x`` (-0.0 as 0.0), shifted so the
    smallest is 0; False (keys unusable) if a value is NaN or the keys span 2**63 or more
    (values of both signs far apart: -1e300 and 1e300, the infinities).  Non-negative
    doubles order as their bit patterns, negative ones reversed."""
    lo = np.int64(0)
    hi = np.int64(0)
    for t in range(x.shape[0]):
        v = x[t]
        if v != v:
            return False
        b = np.float64(v + 0.0).view(np.int64)
        k = b if b >= 0 else np.int64(-1) - (b & np.int64(0x7FFFFFFFFFFFFFFF))
        keys[t] = k
        if t == 0 or k < lo:
            lo = k
        if t == 0 or k > hi:
            hi = k
    if lo < 0 and hi >= lo + np.int64(0x7FFFFFFFFFFFFFFF):  # hi - lo >= 2**63 - 1 (would overflow)
        return False
    for t in range(x.shape[0]):
        keys[t] -= lo
    return True


@njit(cache=True)
def _dense_ranks(x, keys):
    """``unique_inverse`` from the keys of :func:`_order_keys` (sorted in place)."""
    n = keys.shape[0]
    order = np.arange(n)
    tmp_k, tmp_t = np.empty(n, np.int64), np.empty(n, np.int64)
    sorted_keys, sorted_order = keys, order
    if _radix_sort_into(keys, order, n, np.empty((1 << RADIX_BITS) + 1, np.int64), tmp_k, tmp_t):
        sorted_keys, sorted_order = tmp_k, tmp_t
    inverse = np.empty(n, np.int64)
    vals = np.empty(n, np.float64)
    m = 0
    for t in range(n):
        if t == 0 or sorted_keys[t] != sorted_keys[t - 1]:
            vals[m] = x[sorted_order[t]] + 0.0
            m += 1
        inverse[sorted_order[t]] = m - 1
    return vals[:m].copy(), inverse


@njit(cache=True, inline="always")
def _local_bound(t, own, local, vals, m):
    """The number of ``vals[:m]`` below global rank ``t``.  Usually ``t`` is the event's own
    global rank ``own`` (or one above it: both sides of the comparison read one attribute),
    whose local rank ``local`` is known: no search."""
    if t == own:
        return local
    if t == own + 1:
        return local + 1
    return _below(vals, m, t)


@njit(cache=True, inline="always")
def _below(vals, m, t):
    """``np.searchsorted(vals[:m], t)`` (ascending ``vals``) without the slice: a view would
    need reference counts, which mixed_one_pass's loop is compiled without."""
    a = 0
    z = m
    while a < z:
        mid = (a + z) >> 1
        if vals[mid] < t:
            a = mid + 1
        else:
            z = mid
    return a


@njit(cache=True)
def _window_ranks(p, flags, lo, hi, plays, rows, h_rank, h_valid, q_a, q_b, q_eq, g_valid, buf, pos, lr, la, lb, leq,
                  vals, tmp_k, tmp_t, count):
    """Re-rank pair ``p``'s values among the events of positions ``[lo, hi)``; returns their
    number ``m``.

    The table-wide ranks can run to millions (prices), so Fenwick trees over them touch
    ~20 cache-cold nodes per step; over the window's own values they stay small and hot.
    Fills, per position ``d = e - lo``: ``lr`` the event's local rank of ``h``,
    and as ``flags`` need them ``la`` / ``lb`` the local prefix end / suffix start and
    ``leq`` the local equal rank (-1).  Local ranks keep the order of the global ones, so
    ``rank < a`` is preserved.
    """
    k = 0
    for e in range(lo, hi):
        if plays[e] != 0 and h_valid[p, rows[e]]:
            buf[k] = h_rank[p, rows[e]]
            pos[k] = e - lo
            k += 1
    keys, tags = buf, pos
    if _radix_sort_into(buf, pos, k, count, tmp_k, tmp_t):
        keys, tags = tmp_k, tmp_t
    m = 0
    for t in range(k):
        g = keys[t]
        if m == 0 or g != vals[m - 1]:
            vals[m] = g
            m += 1
        lr[p, tags[t]] = m - 1
    for e in range(lo, hi):
        r = rows[e]
        if plays[e] == 0 or not g_valid[p, r]:
            continue
        d = e - lo
        own = h_rank[p, r] if h_valid[p, r] else -2  # ranked above, so lr[p, d] is its local rank
        local = lr[p, d]
        if flags & USE_PREFIX:
            la[p, d] = _local_bound(q_a[p, r], own, local, vals, m)
        if flags & USE_SUFFIX:
            lb[p, d] = _local_bound(q_b[p, r], own, local, vals, m)
        if flags & USE_EQUAL:
            q = q_eq[p, r]
            leq[p, d] = -1
            if q >= 0:
                if q == own:
                    leq[p, d] = local
                else:
                    s = _below(vals, m, q)
                    if s < m and vals[s] == q:
                        leq[p, d] = s
    return m


@njit(cache=True, inline="always")
def _rank_block(lo, hi, blo, bhi, n_pairs, plays, rows, pair_flags, h_rank, h_valid, q_a, q_b, q_eq,
                g_valid, buf, pos, lr, la, lb, leq, m_loc, vals, tmp_k, tmp_t, count):
    """The rank block ``(blo, bhi)`` for positions ``[lo, hi)``: the current one if it holds
    them, else ``[lo, lo + 2 (hi - lo))`` (clipped), re-ranked -- so consecutive windows or
    passes re-rank about once per length."""
    if n_pairs and not (blo <= lo and hi <= bhi):
        blo = lo
        bhi = min(plays.shape[0], lo + 2 * (hi - lo))
        for p in range(n_pairs):
            m_loc[p] = _window_ranks(p, pair_flags[p], blo, bhi, plays, rows, h_rank, h_valid, q_a, q_b,
                                     q_eq, g_valid, buf, pos, lr, la, lb, leq, vals, tmp_k, tmp_t, count)
    return blo, bhi


@njit(cache=True)
def _rank_buffers(n_pairs, block):
    """Scratch for :func:`_window_ranks` over blocks of up to ``block`` positions:
    ``(buf, pos, lr, la, lb, leq, m_loc, vals, tmp_k, tmp_t, count)``."""
    rows_ = max(1, n_pairs)
    return (np.zeros(block, np.int64), np.zeros(block, np.int64),
            np.zeros((rows_, block), np.int64), np.zeros((rows_, block), np.int64),
            np.zeros((rows_, block), np.int64), np.zeros((rows_, block), np.int64),
            np.zeros(rows_, np.int64), np.zeros(block, np.int64), np.zeros(block, np.int64),
            np.zeros(block, np.int64), np.zeros((1 << RADIX_BITS) + 1, np.int64))




@njit(cache=True, inline="always")
def _save_total(ci, cf, cx, ce, cr, c, si, sf, sx, sr, v, exponent, li, lf, lx):
    """Cache row ``c`` := the live channels of variable ``v``'s total, under ``exponent``."""
    for j in range(li[0]):
        ci[c, j] = si[v, li[j + 1]]
    for j in range(lf[0]):
        cf[c, j] = sf[v, lf[j + 1]]
    for j in range(lx[0]):
        cx[c, j] = sx[v, lx[j + 1]]
    ce[c] = exponent
    cr[c] = sr[v]


@njit(cache=True, inline="always")
def _load_total(si, sf, sx, sr, v, ci, cf, cx, cr, c, scale, li, lf, lx):
    """Variable ``v``'s total (reset) := cache row ``c``, floats times ``scale``; its largest
    float."""
    big = 0.0
    for j in range(li[0]):
        si[v, li[j + 1]] = ci[c, j]
    for j in range(lf[0]):
        x = cf[c, j] * scale
        sf[v, lf[j + 1]] = x
        if abs(x) > big:
            big = abs(x)
    for j in range(lx[0]):
        sx[v, lx[j + 1]] = cx[c, j]
    sr[v] = cr[c]
    return big


@njit(cache=True)
def run_mixed_windows(
    pattern, positions, slots, attributes, kept_bits, pairs,
    win_lo, win_hi, max_batch, max_window, out, share, start_until, finish_from,
):
    """Every window ``[win_lo[w], win_hi[w])``; results in row ``w`` of ``out``
    (:mod:`cogra.runtime.compiled.kernel_args`' groups; ``share``: the tuple below).

    Sharing a kept variable between sub-streams (:mod:`cogra.runtime.compiled.sharing.kept_totals`):
    with ``share_mode`` :data:`SHARE_SAVE`, after each batch, variable ``share_var``'s
    total is written to cache row ``j - 1``, the batch's last position (``ci/cf/cx``:
    the variable's live channels ``share_l*``; ``ce``: the exponent of its floats; ``cr``:
    reached).  With :data:`SHARE_TAKE` the variable is never computed: before each batch
    its total is loaded from cache row ``take_at[i]`` (``i`` the batch's first position;
    -1: no event of it yet in the window), the window's exponent raised to the row's first
    if it is higher, so that loading only scales down.

    Absence (docs/language.md, Absence at the edge of a pattern), per window as :func:`coarse_grained.run_windows`
    takes it: trends start only at events up to ``start_until[w]`` and count as finished
    only when they end from ``finish_from[w]`` on (then, under any too, batch by batch);
    empty arrays where the query has no such negation.
    """
    mode, nv, pred_ptr, pred_idx, start_bits, final_bits = pattern
    times, plays, pair_ok, rows = positions
    prog, op_ptr, x_is_min, n_i, n_f = slots
    a_int, a_flt, a_valid, a_key = attributes
    pair_of, pair_flags, m_of, live_i, live_f, live_x, ranks = pairs
    h_rank, h_valid, q_a, q_b, q_eq, g_valid = ranks
    out_i, out_f, out_x, out_e, out_r = out
    share_var, share_mode, take_at, ci, cf, cx, ce, cr, share_li, share_lf, share_lx = share
    leading = start_until.shape[0] > 0
    trailing = finish_from.shape[0] > 0
    none = np.uint64(0)
    n_x = x_is_min.shape[0]
    n_pairs = m_of.shape[0]
    m_max = 1
    for p in range(n_pairs):
        if m_of[p] + 1 > m_max:
            m_max = m_of[p] + 1
    span = 2 * max_window  # rank blocks: a window and what follows it (see below)
    if m_max > span + 1:  # trees over a block's own ranks (_window_ranks)
        m_max = span + 1
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
    bvar = np.zeros(max_batch, np.int64)
    bev = np.zeros(max_batch, np.int64)
    # any: per pair, prefix Fenwick (slot 0), suffix Fenwick (slot 1), buckets (slot 2).
    n_struct = n_pairs if mode == 0 else 0
    ti = np.zeros((max(1, n_struct), 3, m_max, n_i), np.uint64)
    tf = np.zeros((max(1, n_struct), 3, m_max, n_f), np.float64)
    tx = np.zeros((max(1, n_struct), 3, m_max, n_x), np.int64)
    tr = np.zeros((max(1, n_struct), 3, m_max), np.bool_)
    te = np.zeros((max(1, n_struct), 3, m_max), np.int64)  # per node: exponent of its floats
    rank_buf, rank_pos, lr, la, lb, leq, m_loc, vals, tmp_k, tmp_t, count = _rank_buffers(n_struct, span)
    blo = -1
    bhi = -1
    # next / contiguous: waiting kept states per variable.
    cap = max_window if mode != 0 else 1
    wi = np.zeros((nv, cap, n_i), np.uint64)
    wf = np.zeros((nv, cap, n_f), np.float64)
    wx = np.zeros((nv, cap, n_x), np.int64)
    we = np.zeros((nv, cap), np.int64)
    wgone = np.zeros((nv, cap), np.bool_)
    wn = np.zeros(nv, np.int64)
    for w in range(win_lo.shape[0]):
        _reset(si, sf, sx, sr, x_is_min)
        _reset(fi, ff, fx, fr, x_is_min)
        wn[:] = 0
        exponent = 0
        unit = 1.0
        i = win_lo[w]
        hi = win_hi[w]
        # Ranks are local to a block of positions [blo, bhi) that holds the window.
        blo, bhi = _rank_block(i, hi, blo, bhi, n_struct, plays, rows, pair_flags, h_rank, h_valid,
                               q_a, q_b, q_eq, g_valid, rank_buf, rank_pos, lr, la, lb, leq, m_loc,
                               vals, tmp_k, tmp_t, count)
        lo = blo
        for p in range(n_struct):
            m = m_loc[p]
            # Empty trees over the block's ranks (a memset of at most twice the window).
            for k in range(3):
                ti[p, k, :m + 1] = 0
                tf[p, k, :m + 1] = 0.0
                tr[p, k, :m + 1] = False
                te[p, k, :m + 1] = 0
                for q in range(n_x):
                    tx[p, k, :m + 1, q] = MIN_KEY_IDENTITY if x_is_min[q] else MAX_KEY_IDENTITY
        while i < hi:
            j = i + 1
            while j < hi and times[j] == times[i]:
                j += 1
            nb = 0
            extended = np.uint64(0)
            loaded = 0.0
            starts = start_bits if not leading or times[i] <= start_until[w] else none
            finishing = not trailing or times[i] >= finish_from[w]
            if share_mode == SHARE_TAKE:
                c = take_at[i]
                if c < 0:
                    _reset_row(si, sf, sx, share_var, x_is_min)
                    sr[share_var] = False
                else:
                    if ce[c] > exponent:  # the cached floats are coarser: rescale ours to them
                        scale = math.ldexp(1.0, exponent - ce[c])
                        sf *= scale
                        ff *= scale
                        exponent = ce[c]
                        unit = math.ldexp(1.0, -exponent)
                    loaded = _load_total(si, sf, sx, sr, share_var, ci, cf, cx, cr, c,
                                         math.ldexp(1.0, ce[c] - exponent), share_li, share_lf, share_lx)
            for e in range(i, j):
                bits = plays[e]
                if bits == 0:
                    continue
                okb = pair_ok[e]
                for v in range(nv):
                    if _bit(bits, v) == 0:
                        continue
                    if share_mode == SHARE_TAKE and v == share_var:
                        continue  # its totals are loaded per batch
                    _reset_row(bi, bf, bx, nb, x_is_min)
                    alive = False
                    if _bit(starts, v):
                        bi[nb, 0] = 1
                        bf[nb, 0] = unit
                        alive = True
                    for pp in range(pred_ptr[v], pred_ptr[v + 1]):
                        u = pred_idx[pp]
                        if not _edge_ok(okb, pp):
                            continue
                        p = pair_of[u, v]
                        if p >= 0 and g_valid[p, rows[e]] == CROSS_ALL:
                            p = -1  # this event takes every earlier event of the pair
                        kept = _bit(kept_bits, u) != 0
                        if mode == 0:
                            if p < 0:
                                if sr[u]:
                                    _add_row(bi, bf, bx, nb, si, sf, sx, u, x_is_min)
                                    alive = True
                            elif g_valid[p, rows[e]]:
                                fl = pair_flags[p]
                                m = m_loc[p]
                                d = e - lo
                                if fl & USE_PREFIX:
                                    if _fen_sum(ti, tf, tx, tr, te, p, 0, la[p, d], bi, bf, bx, nb,
                                                x_is_min, exponent, live_i, live_f, live_x):
                                        alive = True
                                if fl & USE_SUFFIX:
                                    if _fen_sum(ti, tf, tx, tr, te, p, 1, m - lb[p, d], bi, bf, bx, nb,
                                                x_is_min, exponent, live_i, live_f, live_x):
                                        alive = True
                                if (fl & USE_EQUAL) and leq[p, d] >= 0:
                                    r = leq[p, d] + 1
                                    if tr[p, 2, r]:
                                        _catch_up(tf, te, p, 2, r, exponent)
                                        _node_into(bi, bf, bx, nb, ti, tf, tx, p, 2, r, x_is_min,
                                                   live_i, live_f, live_x)
                                        alive = True
                        elif not kept:
                            extended |= _ONE << np.uint64(u)
                            if sr[u]:
                                _add_row(bi, bf, bx, nb, si, sf, sx, u, x_is_min)
                                alive = True
                        else:
                            for k in range(wn[u]):
                                ek = we[u, k]
                                if p >= 0:
                                    if not (g_valid[p, rows[e]] and h_valid[p, rows[ek]]):
                                        continue
                                    r = rows[e]
                                    if not _in_range(pair_flags[p], h_rank[p, rows[ek]], q_a[p, r], q_b[p, r],
                                                     q_eq[p, r]):
                                        continue
                                _add(bi[nb], bf[nb], bx[nb], wi[u, k], wf[u, k], wx[u, k], x_is_min)
                                wgone[u, k] = True
                                alive = True
                    if alive:
                        _contribute_row(bi, bf, bx, nb, prog, op_ptr[v], op_ptr[v + 1],
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
            big = loaded
            for k in range(nb):
                v = bvar[k]
                e = bev[k]
                if (mode != 0 or trailing) and finishing and _bit(final_bits, v):
                    _add_row(fi, ff, fx, 0, bi, bf, bx, k, x_is_min)
                    fr[0] = True
                    m = _max_abs_row(ff, 0)
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
                    _add_row(si, sf, sx, v, bi, bf, bx, k, x_is_min)
                    sr[v] = True
                if mode == 0:
                    for vv in range(nv):
                        p = pair_of[v, vv]
                        if p < 0 or not h_valid[p, rows[e]]:
                            continue
                        r = lr[p, e - lo]
                        m = m_loc[p]
                        fl = pair_flags[p]
                        if fl & USE_PREFIX:
                            _fen_add(ti, tf, tx, tr, te, p, 0, m, r, bi, bf, bx, k, x_is_min, exponent,
                                     live_i, live_f, live_x)
                        if fl & USE_SUFFIX:
                            _fen_add(ti, tf, tx, tr, te, p, 1, m, m - 1 - r, bi, bf, bx, k, x_is_min,
                                     exponent, live_i, live_f, live_x)
                        if fl & USE_EQUAL:
                            _catch_up(tf, te, p, 2, r + 1, exponent)
                            _into_node(ti, tf, tx, tr, p, 2, r + 1, bi, bf, bx, k, x_is_min,
                                       live_i, live_f, live_x)
                m = _max_abs_row(bf, k)
                if m > big:
                    big = m
                m = _max_abs_row(sf, v)
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
            if share_mode == SHARE_SAVE:  # a batch's total is read at its last position only
                _save_total(ci, cf, cx, ce, cr, j - 1, si, sf, sx, sr, share_var, exponent,
                            share_li, share_lf, share_lx)
            i = j
        if mode == 0 and not trailing:
            for v in range(nv):
                if _bit(final_bits, v) and sr[v]:
                    _add_row(fi, ff, fx, 0, si, sf, sx, v, x_is_min)
                    fr[0] = True
        out_i[w] = fi[0]
        out_f[w] = ff[0]
        out_x[w] = fx[0]
        out_e[w] = exponent
        out_r[w] = fr[0]
