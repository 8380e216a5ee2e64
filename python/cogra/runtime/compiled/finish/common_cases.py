"""The column-wise finish's common cases in one compiled pass per slot and per item.

:mod:`cogra.runtime.compiled.finish.by_column` decodes every window with ~30 numpy passes (limbs as
32-bit pairs, wrapped residues, long-double quotients): ~0.3 µs and ~350 bytes of
temporaries per result row, half the time of a sliding query with more result rows than
events.  Almost every value is in one of two easy cases, and these functions decide
them per key in one pass, leaving the rest to that module:

* **exact**: no rescaling lost it and its ``|x|``-bound proves the residue is the value,
  which is below 2**62 (so sums of a key's windows are checked in int64);
* **big**: provably beyond 2**64, the approximation ``m * 2**k`` is used.

Anything else -- residues that wrapped past 2**64 but are still resolvable, undecided
values, exact AVG operands of 2**53 or more (the correctly rounded quotient needs more
than a double division), subnormal results -- marks its key *hard*, and
:func:`finish.item_columns` evaluates the hard keys with the numpy rules.  The rules
here are the numpy rules restricted to the easy cases, in the same order of floating
operations, so both give the same values.
"""

from __future__ import annotations

import math

import numpy as np

from cogra.runtime.compiled.channels import (
    CANCELLATION_LIMIT,
    FITS_SIGNED,
    FITS_UNSIGNED,
    SPLIT_SHIFT,
    SURELY_TOO_BIG,
    TINY,
)
from cogra.runtime.compiled.jit import NO_REFCOUNTS, njit

EXACT, BIG, HARD = 0, 1, 2
"""Per slot and key: the value is ``value`` / about ``mantissa * 2**exponent`` / not decided here."""
TILE = 512
"""Rows of one segment decoded before the next segment's (:func:`decode_one_window_per_key`)."""

KIND_COUNT, KIND_ISUM, KIND_SPLIT, KIND_APPROX_COUNT, KIND_APPROX_SUM = 0, 1, 2, 3, 4
"""Slot kinds: ``int`` (uint64 residue), ``isum`` (int64 residue), ``fsplit`` (two isum
limbs, ``hi * 2**32 + lo``), and the doubles alone of ``fcount`` / ``fapprox``
(:func:`channels.channel_layout`; a row ``(kind, -, f, bound f, scale bits, -, -)``)."""

RESOLVABLE = 2.0**61 / 1e-6  # as finish.RESOLVABLE (bounds below it are exact there, wrapped or not)
EXACT_LIMIT = 2**62
HIGH_LIMIT = 2**29  # a split sum's high limb below this keeps hi * 2**32 + lo below 2**62
DOUBLE_EXACT = 2**53
DOUBLE_EXACT_BOUND = 2.0**53 * (1 - 1e-6)  # as channels.DOUBLE_EXACT
SMALLEST_NORMAL = 2.0**-1022
MERGED_BIG = SURELY_TOO_BIG * 2.0**SPLIT_SHIFT  # finish.merged_number's threshold


_POW2 = np.ldexp(1.0, np.arange(-1022, 1024))
"""``2.0**e`` for the normal exponents ``-1022 <= e <= 1023``, at ``e + 1022``."""


@njit(cache=True, inline="always")
def _ldexp(x, e):
    """``math.ldexp(x, e)``, bit for bit, without its call into the C library where
    ``2**e`` is a normal double: the product with an exact power of two rounds once, as
    ldexp does (to a subnormal, or to infinity, alike).  The decode calls it two or three
    times per window and slot: libm's ldexp was ~4% of the sliding benchmark query on an
    AMD EPYC VM, and this decode 45 -> 37 ms per 1.92M windows."""
    if -1022 <= e <= 1023:
        return x * _POW2[e + 1022]
    return math.ldexp(x, e)


@njit(cache=True, inline="always")
def _limb(kind, r, bound):
    """A limb whose bound proves its residue (int64 view) is the value: (known, value);
    known is False where that value is 2**62 or more, or wrapped (bound past ``fits``)."""
    fits = FITS_UNSIGNED if kind == KIND_COUNT else FITS_SIGNED
    if not bound < fits:
        return False, 0
    if kind == KIND_COUNT and r < 0:  # a count's residue >= 2**63 reads negative
        return False, 0
    if r >= EXACT_LIMIT or r <= -EXACT_LIMIT:
        return False, 0
    return True, r


@njit(cache=True, inline="always")
def _window(kind, r, bound_raw, approx, r_lo, bound_lo, approx_lo, e):
    """One window's slot: (status, exact value, mantissa, exponent), as ``finish.number``.

    ``kind`` KIND_SPLIT: the value is ``hi * 2**32 + lo``, limbs ``(r, bound_raw, approx)``
    and ``(r_lo, bound_lo, approx_lo)``; otherwise one limb (the ``_lo`` ones unused)."""
    split = kind == KIND_SPLIT
    if e > 0 and bound_raw < TINY and (not split or bound_lo < TINY):  # rescaled below resolution
        if bound_raw == 0.0 and r == 0 and (not split or (bound_lo == 0.0 and r_lo == 0)):
            return EXACT, 0, 0.0, 0
        return HARD, 0, 0.0, 0
    bound = _ldexp(bound_raw, e) if e != 0 else bound_raw
    known = bound < RESOLVABLE
    if split:
        b_lo = _ldexp(bound_lo, e) if e != 0 else bound_lo
        known = known and b_lo < RESOLVABLE
    if known:  # exact by the numpy rules; here only where every limb is its residue
        ok, value = _limb(KIND_ISUM if split else kind, r, bound)
        if not ok:
            return HARD, 0, 0.0, 0
        if split:
            ok, low = _limb(KIND_ISUM, r_lo, b_lo)
            if not ok or value >= HIGH_LIMIT or value <= -HIGH_LIMIT:
                return HARD, 0, 0.0, 0
            value = (value << SPLIT_SHIFT) + low
            if value >= EXACT_LIMIT or value <= -EXACT_LIMIT:
                return HARD, 0, 0.0, 0
        return EXACT, value, 0.0, 0
    total = approx * 2.0**SPLIT_SHIFT + approx_lo if split else approx
    scaled = _ldexp(total, e) if e != 0 else total
    big = abs(scaled) > SURELY_TOO_BIG * (2.0**28 if split else 1.0)
    if kind != KIND_COUNT:
        total_bound = bound_raw * 2.0**SPLIT_SHIFT + bound_lo if split else bound_raw
        big = big and total != 0.0 and total_bound <= CANCELLATION_LIMIT * abs(total)
    if big:
        return BIG, 0, total, e
    return HARD, 0, 0.0, 0


@njit(cache=True, inline="always")
def _approximate_window(approx, bound, e, scale_bits):
    """One window's ``fcount`` / ``fapprox`` slot, as ``finish.number``: exact while the
    bound proves the doubles never rounded, the approximation (times ``2**scale_bits``,
    the exact slots' units) where it shows no cancellation, hard otherwise."""
    if e > 0 and bound < TINY:
        if bound == 0.0 and approx == 0.0:
            return EXACT, 0, 0.0, 0
        return HARD, 0, 0.0, 0
    if e == 0 and _ldexp(bound, scale_bits) < DOUBLE_EXACT_BOUND and math.isfinite(approx):
        return EXACT, np.int64(_ldexp(approx, scale_bits)), 0.0, 0
    if approx != 0.0 and bound <= CANCELLATION_LIMIT * abs(approx):
        return BIG, 0, approx, e + scale_bits
    return HARD, 0, 0.0, 0


@njit(cache=True, inline="always")
def _slot_window(slots, j, out_i, out_f, out_e, w):
    kind, ii, fi, bi, ii_lo, fi_lo, bi_lo = (slots[j, 0], slots[j, 1], slots[j, 2], slots[j, 3],
                                             slots[j, 4], slots[j, 5], slots[j, 6])
    if kind >= KIND_APPROX_COUNT:
        return _approximate_window(out_f[w, fi], out_f[w, bi], out_e[w], ii_lo)
    return _window(kind, out_i[w, ii], out_f[w, bi], out_f[w, fi],
                   out_i[w, ii_lo], out_f[w, bi_lo], out_f[w, fi_lo], out_e[w])


@njit(cache=True, inline="always")
def _decode_window(slots, out_i, out_f, out_e, w, k, status, value, mantissa, exponent):
    """Every slot of window ``w``, the one window of key ``k`` (see :func:`decode_slots`)."""
    for j in range(slots.shape[0]):
        s, v, m, p = _slot_window(slots, j, out_i, out_f, out_e, w)
        status[j, k], exponent[j, k] = s, p
        if s == EXACT:
            value[j, k] = v
        else:
            mantissa[j, k] = m


# decode_slots allocates nothing, so it compiles without reference counts, and then its
# per-slot helpers can be inlined at no cost: as calls (``_slot_window`` taking 4 arrays,
# ``_window`` 8 scalars, once per window and slot) they took a quarter of its time (1.92M
# sliding windows x 3 slots: 0.138 -> 0.106 s inlined).
@njit(cache=True, **NO_REFCOUNTS)
def decode_slots(slots, out_i, out_f, out_e, windows, first, status, value, mantissa, exponent):
    """Every slot of every key, one pass over the keys (their windows are scattered over
    the kernel's output, so each window's rows are read once for all slots).

    ``slots[j]`` = (kind, i, f, bound f, and a split sum's low limb's i, f, bound f);
    key ``k`` holds windows ``windows[first[k]:first[k+1]]`` (``first`` has one more
    entry than keys); the results land in ``status[j, k]`` etc.  ``value[j, k]`` is
    written only where the status is EXACT and ``mantissa[j, k]`` only where it is not
    (0.0 where HARD), so the two may be one buffer (int64 and its float64 view): the
    finish reads each by the status, and saves a third of this pass's fresh memory.

    One window: its own value.  Several (sub-streams merged into one output row): exact
    if all are and the int64 sum stays below 2**62; big if none is undecided, the sum of
    their doubles is finite, beyond ``2**96`` and not a cancellation (as
    ``finish.merged_number``); hard otherwise.
    """
    for k in range(first.shape[0] - 1):
        lo, hi = first[k], first[k + 1]
        if hi - lo == 1:
            _decode_window(slots, out_i, out_f, out_e, windows[lo], k, status, value, mantissa, exponent)
            continue
        for j in range(slots.shape[0]):
            all_exact = True
            undecided = False
            acc = 0
            approx = 0.0
            magnitude = 0.0
            for t in range(lo, hi):
                s, v, m, p = _slot_window(slots, j, out_i, out_f, out_e, windows[t])
                if s == HARD:
                    undecided = True
                    break
                if s == EXACT:
                    acc += v
                    if acc >= EXACT_LIMIT or acc <= -EXACT_LIMIT:
                        undecided = True  # the numpy rules sum exactly to ~2**92
                        break
                    x = float(v)
                else:
                    all_exact = False
                    x = _ldexp(m, p)
                approx += x
                magnitude += abs(x)
            value[j, k], mantissa[j, k], exponent[j, k] = 0, 0.0, 0  # (one buffer or two)
            if undecided:
                status[j, k] = HARD
            elif all_exact:
                status[j, k], value[j, k] = EXACT, acc
            elif (math.isfinite(approx) and (abs(approx) > MERGED_BIG or slots[j, 0] >= KIND_APPROX_COUNT)
                  and approx != 0.0 and magnitude <= CANCELLATION_LIMIT * abs(approx)):
                status[j, k], mantissa[j, k] = BIG, approx
            else:
                status[j, k] = HARD


# A window per key (sub-streams are the output groups) is the common case, and then the
# keys' order -- by (window start, group) -- and the kernel's -- by segment, then start --
# differ.  Read in key order, a block's channels are ~3 arrays x segments streams at once
# (57 for the stock benchmark's 19 companies), more than the hardware prefetchers follow:
# decode_slots took ~85 ms per 1.9M sliding windows.  Read in window order with each key's
# results written where the key is, the writes stride over the whole block once per
# segment (65 ms).  In tiles -- TILE windows of every segment in turn, so that reads are
# runs and writes stay within a few thousand keys -- 42 ms (tiles of 64 / 256 / 1024
# windows: 59 / 44 / 45 ms); the benchmark query 0.57-0.58 -> ~0.51 s.
@njit(cache=True, **NO_REFCOUNTS)
def decode_one_window_per_key(slots, out_i, out_f, out_e, row_first, window_key, runs, status, value, mantissa,
                              exponent):
    """:func:`decode_slots` where every key holds one window, in tiles of the kernel's order:
    window ``w``'s key is ``window_key[w]`` (-1: none), its row as ``row_first`` says
    (:func:`row_windows`).  A row shared by several windows is decoded once, and copied
    to their keys.  ``runs``: scratch of one entry per row and one more.
    (:mod:`window_finish` generates it with the query's slots unrolled, and its items'
    columns written in the same pass.)"""
    n_runs, longest = row_runs(row_first, window_key, out_e.shape[0], runs)
    for r0 in range(0, longest, TILE):
        for r in range(n_runs):
            a = runs[r] + r0
            b = min(a + TILE, runs[r + 1])
            for d in range(a, b):
                first, last = row_windows(row_first, d)
                k = window_key[first]
                if k >= 0:  # else no key: the row has no finished trend
                    _decode_window(slots, out_i, out_f, out_e, d, k, status, value, mantissa, exponent)
                    for w in range(first + 1, last):
                        _copy_key(status, value, mantissa, exponent, k, window_key[w])


@njit(cache=True, inline="always")
def _copy_key(status, value, mantissa, exponent, k, to):
    """Key ``to`` := key ``k``'s decoded slots (``value`` and ``mantissa`` may be one buffer:
    both copies then copy the same bits)."""
    for j in range(status.shape[0]):
        status[j, to], exponent[j, to] = status[j, k], exponent[j, k]
        value[j, to] = value[j, k]
        mantissa[j, to] = mantissa[j, k]


@njit(cache=True, inline="always")
def row_windows(row_first, d):
    """The windows ``[first, last)`` whose channels row ``d`` holds: as ``row_first`` says
    (:attr:`channels.KernelOut.row_first`), or where it is empty, window ``d`` alone."""
    if row_first.shape[0] == 0:
        return d, d + 1
    return row_first[d], row_first[d + 1]


@njit(cache=True, **NO_REFCOUNTS)
def row_runs(row_first, window_key, n_rows, runs):
    """The runs of rows of :func:`decode_one_window_per_key`: ``runs[r]`` := the first row
    of run ``r``, ``runs[n_runs]`` := ``n_rows``.  A *run* is a maximal range of rows whose
    windows' keys ascend: a segment's.  Returns ``(n_runs, the longest run's rows)``.  The
    windows of a row share its finished trends: all have a key, or none has."""
    n_runs = 0
    last = -1
    longest = 0
    for d in range(n_rows):
        first, end = row_windows(row_first, d)
        k = window_key[first]
        if k < 0:
            continue
        if n_runs == 0 or k < last:
            runs[n_runs] = d
            if n_runs > 0 and d - runs[n_runs - 1] > longest:
                longest = d - runs[n_runs - 1]
            n_runs += 1
        last = window_key[end - 1]
    runs[n_runs] = n_rows
    if n_runs > 0 and n_rows - runs[n_runs - 1] > longest:
        longest = n_rows - runs[n_runs - 1]
    return n_runs, longest


@njit(cache=True)
def keys_by_start(seg, start, reached, row_first, seg_rank):
    """:func:`keys_by_start_into` into fresh arrays: ``(n, key start, key group, window key)``."""
    key_start = np.empty(seg.shape[0], np.int64)
    key_group = np.empty(seg.shape[0], np.int64)
    window_key = np.empty(seg.shape[0], np.int64)
    n = keys_by_start_into(seg, start, reached, row_first, seg_rank, key_start, key_group, window_key)
    return n, key_start, key_group, window_key


@njit(cache=True, inline="always")
def _row_at(row_first, d, w):
    """The row of window ``w``, the one after window ``w - 1``'s row ``d`` (rows cover
    consecutive windows; ``row_first`` empty: a row per window)."""
    if row_first.shape[0] == 0:
        return w
    return d + 1 if row_first[d + 1] <= w else d


@njit(cache=True)
def keys_by_start_into(seg, start, reached, row_first, seg_rank, key_start, key_group, window_key):
    """The reached windows in key order -- (start, group rank) -- when every segment is its
    own output group: their number ``n``, with the first ``n`` entries of ``key start`` and
    ``key group`` written, and ``window_key[w]`` := window ``w``'s key, -1 where it has no
    finished trend (arrays as long as ``seg``, given by the caller: the keys' starts become
    the result's window column); or ``n = -1`` where this does not apply (segments sharing
    a group, windows not by segment with ascending starts, or starts so sparse that the
    sweep would cost more than sorting).  ``reached``: per row of the kernels' output (empty:
    every row is), rows as ``row_first`` says (:attr:`channels.KernelOut.row_first`; empty: a
    row per window).  Where every row is reached, the windows' rows are not followed: the
    test of a row's end per window, a branch as irregular as the repeats, made the sliding
    benchmark's sweep ~1.5x slower.

    The windows come as runs, one per segment, each ascending by start; the sweep takes
    the smallest start among the runs' heads and emits every head at it, runs in rank
    order, finding the next smallest start in the same pass: per block of the sliding
    benchmark ~0.4 ms instead of ~1.7 ms for ``np.lexsort`` and the gathers of starts,
    groups and window indices after it."""
    n = seg.shape[0]
    runs = 0
    for w in range(n):
        if w == 0 or seg[w] != seg[w - 1]:
            runs += 1
        elif start[w] <= start[w - 1]:
            return -1  # not in walk order
    head = np.empty(runs, np.int64)
    end = np.empty(runs, np.int64)
    rank = np.empty(runs, np.int64)
    head_row = np.empty(runs, np.int64)
    every = reached.shape[0] == 0  # (then no row is read)
    r = -1
    d = 0
    for w in range(n):
        if w == 0 or seg[w] != seg[w - 1]:
            r += 1
            head[r] = w
            rank[r] = seg_rank[seg[w]]
            if every or row_first.shape[0] == 0:
                d = w
            else:
                while row_first[d + 1] <= w:
                    d += 1
            head_row[r] = d
        end[r] = w + 1
    by_rank = np.argsort(rank)
    for i in range(1, runs):
        if rank[by_rank[i]] == rank[by_rank[i - 1]]:
            return -1  # two segments, one output group: merged keys
    # The runs in rank order; one pass per start emits the heads at it and finds the next.
    head, end, rank, head_row = head[by_rank], end[by_rank], rank[by_rank], head_row[by_rank]
    none = np.iinfo(np.int64).max
    v = none
    for i in range(runs):
        h, d = head[i], head_row[i]
        while h < end[i] and not (every or reached[d]):
            window_key[h] = -1
            h += 1
            d = _row_at(row_first, d, h)
        head[i], head_row[i] = h, d
        if h < end[i] and start[h] < v:
            v = start[h]
    k = 0
    budget = 4 * n + 64  # (two) head visits per run and start before sorting is cheaper
    while v != none:
        next_v = none
        for i in range(runs):
            h = head[i]
            if h < end[i]:
                if start[h] == v:
                    key_start[k] = v
                    key_group[k] = rank[i]
                    window_key[h] = k
                    k += 1
                    h += 1
                    if not every:
                        d = _row_at(row_first, head_row[i], h)
                        while h < end[i] and not reached[d]:
                            window_key[h] = -1
                            h += 1
                            d = _row_at(row_first, d, h)
                        head_row[i] = d
                    head[i] = h
                if h < end[i] and start[h] < next_v:
                    next_v = start[h]
        v = next_v
        budget -= 2 * runs
        if budget < 0:
            return -1
    return k


# Per key, an item's column entries from its slots' decoded (status, value, mantissa,
# exponent): shared by the loops below (one item over decoded slots) and the finisher
# generated per query (window_finish: decode and items in one pass, no decoded slots).

@njit(cache=True, inline="always")
def _as_double(s, v, m, p):
    """``(m, p)`` with the value ~ ``m * 2**p``: an exact value correctly rounded (int64 to
    double rounds to nearest even), a big one's approximation."""
    if s == EXACT:
        return float(v), 0
    return m, p


@njit(cache=True, inline="always")
def _null_or_hard(ts, ns, nv):
    """(NULL: no trends, hard: an operand undecided) -- as the numpy rules: a zero count
    makes the row NULL whatever its sum."""
    null = ns == EXACT and nv == 0
    return null, not null and (ts == HARD or ns == HARD)


@njit(cache=True, inline="always")
def count_item(s, v, r, bound_raw, e):
    """COUNT(*) / COUNT(V) from its slot's decode ``(s, v)``, residue ``r`` (int64 view) and
    bound: ``(value, overflow, hard)``.  Exact values are below 2**62, a big one overflows
    int64.  A count the decode leaves hard (past 2**62, below the approximation's reach)
    is decided here where the column alone is concerned: its bound below ``FITS_UNSIGNED``
    makes the residue the value (from 2**63 on, an overflow), a bound above it is a count
    past 2**63 -- an overflow (counts have no cancellation; the numpy rules decide the same,
    ~0.5% of the sliding benchmark's windows at 100k events, 3 of its 38 ms)."""
    if s != HARD:
        return (v if s == EXACT else 0), s == BIG, False
    if e > 0 and bound_raw < TINY:  # rescaled below resolution: the numpy rules decide
        return 0, False, True
    bound = _ldexp(bound_raw, e) if e != 0 else bound_raw
    if bound < FITS_UNSIGNED:
        return (r if r >= 0 else 0), r < 0, False
    if bound >= FITS_UNSIGNED:  # (not NaN)
        return 0, True, False
    return 0, False, True


@njit(cache=True, inline="always")
def integer_sum_item(ts, tv, ns, nv):
    """SUM of an integer attribute from its sum and count slots: ``(value, null, overflow,
    hard)``."""
    null, hard = _null_or_hard(ts, ns, nv)
    return (tv if ts == EXACT else 0), null, ts == BIG and not null and not hard, hard


@njit(cache=True, inline="always")
def average_item(ts, tv, tm, tp, ns, nv, nm, np_, scale_bits):
    """AVG from its sum and count slots: ``(value, null, hard)``.  NULL without trends; the
    correctly rounded quotient where both are exact and below 2**53 (IEEE division of
    exact doubles); the quotient of the approximations where one is big; hard otherwise."""
    null, hard = _null_or_hard(ts, ns, nv)
    if null or hard:
        return 0.0, null, hard
    if ts == EXACT and ns == EXACT:
        if tv >= DOUBLE_EXACT or tv <= -DOUBLE_EXACT or nv >= DOUBLE_EXACT:
            return 0.0, False, True
        q = _ldexp(float(tv) / float(nv), -scale_bits)
        if q != 0.0 and abs(q) < SMALLEST_NORMAL:  # subnormal: rounded twice
            return 0.0, False, True
        return q, False, False
    s_m, s_k = _as_double(ts, tv, tm, tp)
    n_m, n_k = _as_double(ns, nv, nm, np_)
    v = _ldexp(s_m / n_m, s_k - n_k - scale_bits)
    if not math.isfinite(v):
        return 0.0, False, True
    return v, False, False


@njit(cache=True, inline="always")
def float_sum_item(ts, tv, tm, tp, ns, nv, scale_bits):
    """SUM of a float attribute (kept as scaled integers) from its sum and count slots:
    ``(value, null, overflow, hard)`` -- overflow where the double is infinite."""
    null, hard = _null_or_hard(ts, ns, nv)
    if null or hard:
        return 0.0, null, False, hard
    s_m, s_k = _as_double(ts, tv, tm, tp)
    v = _ldexp(s_m, s_k - scale_bits)
    if not math.isfinite(v):
        return 0.0, False, True, False
    return v, False, False, False


@njit(cache=True)
def average(t_st, t_val, t_man, t_exp, n_st, n_val, n_man, n_exp, scale_bits, values, null, hard):
    """:func:`average_item` per key of decoded slots."""
    for k in range(values.shape[0]):
        values[k], null[k], hard[k] = average_item(t_st[k], t_val[k], t_man[k], t_exp[k],
                                                   n_st[k], n_val[k], n_man[k], n_exp[k], scale_bits)


@njit(cache=True)
def integer_sum(t_st, t_val, n_st, n_val, values, null, overflow, hard):
    """:func:`integer_sum_item` per key of decoded slots."""
    for k in range(values.shape[0]):
        values[k], null[k], overflow[k], hard[k] = integer_sum_item(t_st[k], t_val[k], n_st[k], n_val[k])


@njit(cache=True)
def float_sum(t_st, t_val, t_man, t_exp, n_st, n_val, scale_bits, values, null, overflow, hard):
    """:func:`float_sum_item` per key of decoded slots."""
    for k in range(values.shape[0]):
        values[k], null[k], overflow[k], hard[k] = float_sum_item(t_st[k], t_val[k], t_man[k], t_exp[k],
                                                                  n_st[k], n_val[k], scale_bits)


@njit(cache=True)
def gathered_bytes(offsets, index):
    """The bytes :func:`gather_strings` writes (no temporary per row)."""
    total = 0
    for r in range(index.shape[0]):
        total += offsets[index[r] + 1] - offsets[index[r]]
    return total


@njit(cache=True)
def gather_strings(offsets, data, index, out_offsets, out_data):
    """Arrow string ``index``-gather: ``out`` row ``r`` is row ``index[r]`` of
    ``(offsets, data)``; ``out_data`` holds exactly the bytes gathered."""
    at = 0
    out_offsets[0] = 0
    for r in range(index.shape[0]):
        g = index[r]
        a, b = offsets[g], offsets[g + 1]
        for t in range(a, b):
            out_data[at] = data[t]
            at += 1
        out_offsets[r + 1] = at


@njit(cache=True)
def gather_fixed_width(data, base, width, index, out_offsets, out_data):
    """:func:`gather_strings` where every value is ``width`` bytes, the first from ``base``."""
    at = 0
    for r in range(index.shape[0]):
        out_offsets[r] = at
        src = base + index[r] * width
        for t in range(width):
            out_data[at + t] = data[src + t]
        at += width
    out_offsets[index.shape[0]] = at


__all__ = ["BIG", "EXACT", "HARD", "KIND_APPROX_COUNT", "KIND_APPROX_SUM", "KIND_COUNT", "KIND_ISUM", "KIND_SPLIT",
           "average", "decode_one_window_per_key",
           "decode_slots", "float_sum", "gather_fixed_width", "integer_sum", "gathered_bytes", "gather_strings", "keys_by_start", "keys_by_start_into"]
