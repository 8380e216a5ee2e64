"""Sliding windows for the mixed-grained (``any``) kernel: all windows of a sub-stream in one pass.

Under ``WITHIN d SLIDE s`` (``s | d``, ``W = d / s`` panes per window) a trend lies in
window ``k`` iff it starts in pane ``k`` or later and ends before pane ``k + W``.  So
every state -- a variable's type-grained totals, a Fenwick node over kept events, a
batch row -- is kept as a vector of ``W`` *lanes*: lane ``q mod W`` holds the trends that
started in pane ``q``, for the ``W`` most recent panes ``q`` (a ring).  When the events
reach pane ``P``, the lanes of panes ``<= P - W`` can no longer be in any open window:
their slots are cleared and reused.  Window ``k`` is read just before the first event of
pane ``k + W``, with the ring advanced to pane ``k + W - 1``: then the ring holds exactly
its panes, and its result is the sum of all lanes of the final variables' totals.

Per event that is one Fenwick traversal with ``W``-wide additions (vectorised: lanes are
the innermost, contiguous axis, and no lane carries a reach flag -- a lane is reached
iff its float count is positive, as no count is ever rescaled here), instead of one per
window (:func:`mixed_grained.run_mixed_windows`) or one per group of windows
(:mod:`mixed_grouped`).

The trees now outlive windows, so their ranks must too: ranks are local to a *block* of
positions (:func:`mixed_grained._window_ranks`) holding the live panes and as much again
ahead.  When the events leave the block, a new one starts at the oldest live pane; every
live kept event's lane vector (stored when it was inserted, with the lanes that expired
since cleared) goes to its new rank and the trees are rebuilt in linear time.

Scope (the caller checks it): ``any``, no MIN/MAX, ``s | d``, and memory for
``W``-lane trees and stored vectors over a block.  Counts past 2**600 (where the
per-window kernel would rescale its floats) stop the segment: its windows not yet read
are flagged in ``redo`` for the per-window kernel.
"""

from __future__ import annotations

import numpy as np

from cogra.runtime.compiled.channels import OP_CNT, OP_NN, OP_SUM_FLOAT, OP_SUM_INT
from cogra.runtime.compiled.jit import NO_REFCOUNTS, njit
from cogra.runtime.compiled.aggregators.coarse_grained import RESCALE_ABOVE, _bit, _edge_ok
from cogra.runtime.compiled.aggregators.mixed_grained import (
    _rank_buffers,
    _window_ranks,
)
from cogra.runtime.compiled.codes import CROSS_ALL, RANK_BLOCK_SPANS, SHARE_SAVE, SHARE_TAKE, USE_EQUAL, USE_PREFIX, USE_SUFFIX


def tree_bytes(n_pairs: int, n_live: int, lanes: int, max_span: int) -> int:
    """Bytes :func:`run_mixed_ring` allocates for trees and stored vectors (the caller
    refuses the kernel above a budget): per pair, three trees and one stored vector per
    position over a block of ``RANK_BLOCK_SPANS * max_span`` positions, ``n_live``
    channels of ``lanes``."""
    block = RANK_BLOCK_SPANS * max_span + 1
    return 4 * max(1, n_pairs) * block * max(1, n_live) * lanes * 8


# The kernel's loop (_run_segments) is compiled without reference counts (jit.NO_REFCOUNTS):
# it allocates nothing and makes no array views, so its per-event helpers -- the Fenwick
# traversals, contributions, fused batches, cache saves and loads -- are inlined into it
# at no cost per array argument.  (Inlined into a loop *with* reference counts, they took
# a fifth of its time in NRT_incref/NRT_decref; as separate calls without them, each call
# still passed ~100 words of array descriptors: q3's representatives 100 -> 90 ms and
# its sub-streams under the generic kernel 62 -> 51 ms, inlined here.)  What the loop
# calls is compiled with the loop's options, and numba keeps that compile for every caller
# of the same argument types: so no function it calls may allocate, make a view (slice)
# or return an array (the radix sort hands back a flag, mixed_grained._radix_sort_into).

_U0 = np.uint64(0)


@njit(cache=True, inline="always")
def _lane_ages(lane_age, cur, lanes):
    """``lane_age[ln]``: how many panes before ``cur`` the pane in ring slot ``ln`` is, as of
    pane ``cur`` -- recomputed when ``cur``'s slot changes (``lane_age[lanes]`` holds the
    slot it was computed for, -1 at first)."""
    slot = cur % lanes
    if lane_age[lanes] != slot:
        for ln in range(lanes):
            g = slot - ln
            lane_age[ln] = g if g >= 0 else g + lanes
        lane_age[lanes] = slot


@njit(cache=True, inline="always")
def _expired(ts, p, t, a, cur, lanes):
    """How many of node ``a``'s lanes hold panes that expired since its last insert (stamp
    ``ts``): the slots of panes ``ts + 1 .. cur`` -- those with ``lane_age < n``."""
    n = cur - ts[p, t, a]
    return n if n < lanes else lanes


# A node's lanes are read as of the current pane by masking the expired ones (age below
# the node's expired count) instead of emptying them in a branch per node: big nodes are
# current, small ones stale by many panes, and that data-dependent branch with its loops
# of varying length was a third of q3's representatives' run.  A query leaves a stale node
# as it is; an insert writes every lane (an expired one becomes 0 + the row's) and stamps
# it.  The sums are those of emptying first (a masked lane adds zero, as an emptied one
# did).  Each lane is loaded before the choice: a load under the condition kept the loop
# from vectorising.


@njit(cache=True, inline="always")
def _tree_query(bi, bf, d, ti, tf, ts, p, t, a, cur, lanes, live_i, live_f, one, lane_age):
    """Batch row ``d`` += the Fenwick prefix ``[1, a]`` of tree ``(p, t)`` -- or node ``a``
    alone if ``one`` (the ``=`` buckets) -- as of ring pane ``cur``."""
    ni = live_i[p, 0]
    nf = live_f[p, 0]
    _lane_ages(lane_age, cur, lanes)
    while a > 0:
        n = _expired(ts, p, t, a, cur, lanes)
        for c in range(ni):
            k = live_i[p, c + 1]
            for ln in range(lanes):
                x = ti[p, t, a, c, ln]
                bi[d, k, ln] += _U0 if lane_age[ln] < n else x
        for c in range(nf):
            k = live_f[p, c + 1]
            for ln in range(lanes):
                y = tf[p, t, a, c, ln]
                bf[d, k, ln] += 0.0 if lane_age[ln] < n else y
        if one:
            break
        a -= a & (-a)


@njit(cache=True, inline="always")
def _tree_insert(ti, tf, ts, p, t, a, m, bi, bf, s, cur, lanes, live_i, live_f, one, lane_age):
    """Batch row ``s`` into tree ``(p, t)`` at Fenwick index ``a`` (and the nodes above it
    up to ``m``, unless ``one``), as of ring pane ``cur``."""
    ni = live_i[p, 0]
    nf = live_f[p, 0]
    _lane_ages(lane_age, cur, lanes)
    while a <= m:
        n = _expired(ts, p, t, a, cur, lanes)
        ts[p, t, a] = cur
        for c in range(ni):
            k = live_i[p, c + 1]
            for ln in range(lanes):
                x = ti[p, t, a, c, ln]
                ti[p, t, a, c, ln] = (_U0 if lane_age[ln] < n else x) + bi[s, k, ln]
        for c in range(nf):
            k = live_f[p, c + 1]
            for ln in range(lanes):
                y = tf[p, t, a, c, ln]
                tf[p, t, a, c, ln] = (0.0 if lane_age[ln] < n else y) + bf[s, k, ln]
        if one:
            break
        a += a & (-a)


@njit(cache=True, inline="always")
def _clear_row(bi, bf, d, v, var_live_i, var_live_f, lanes):
    """Zero batch row ``d`` in variable ``v``'s live channels (the only ones it uses)."""
    for c in range(var_live_i[v, 0]):
        k = var_live_i[v, c + 1]
        for ln in range(lanes):
            bi[d, k, ln] = 0
    for c in range(var_live_f[v, 0]):
        k = var_live_f[v, c + 1]
        for ln in range(lanes):
            bf[d, k, ln] = 0.0


@njit(cache=True, inline="always")
def _node_into_node(ti, tf, p, t, dst, src, lanes, live_i, live_f):
    for c in range(live_i[p, 0]):
        for ln in range(lanes):
            ti[p, t, dst, c, ln] += ti[p, t, src, c, ln]
    for c in range(live_f[p, 0]):
        for ln in range(lanes):
            tf[p, t, dst, c, ln] += tf[p, t, src, c, ln]


@njit(cache=True, inline="always")
def _stored_into_node(ti, tf, p, t, i, vi, vf, d, lanes, live_i, live_f):
    for c in range(live_i[p, 0]):
        for ln in range(lanes):
            ti[p, t, i, c, ln] += vi[p, d, c, ln]
    for c in range(live_f[p, 0]):
        for ln in range(lanes):
            tf[p, t, i, c, ln] += vf[p, d, c, ln]


@njit(cache=True, inline="always")
def _contribute_ring(bi, bf, d, lanes, prog, lo, hi, e, a_int, a_flt, a_valid):
    """:func:`coarse_grained._contribute_row` over every lane of batch row ``d`` (no MIN/MAX).  A lane
    with no trend has count 0 and gains 0 -- except from a non-finite value (``inf * 0``),
    where only the lanes with trends take it."""
    for k in range(lo, hi):
        op = prog[k, 1]
        a = prog[k, 2]
        s1 = prog[k, 3]
        s2 = prog[k, 4]
        s3 = prog[k, 5]
        if op != OP_CNT and not a_valid[a, e]:
            continue
        if op == OP_CNT or op == OP_NN:
            if s1 >= 0:  # else approximate: no modular channel (channels.channel_layout)
                for ln in range(lanes):
                    bi[d, s1, ln] += bi[d, 0, ln]
            for ln in range(lanes):
                bf[d, s2, ln] += bf[d, 0, ln]
        elif op == OP_SUM_INT:
            x = a_int[a, e]
            xu = np.uint64(x)
            xf = np.float64(x)
            ax = abs(xf)
            for ln in range(lanes):
                bi[d, s1, ln] += xu * bi[d, 0, ln]
            for ln in range(lanes):
                bf[d, s2, ln] += xf * bf[d, 0, ln]
            if s3 >= 0:  # else never negative: the approximation is the bound
                for ln in range(lanes):
                    bf[d, s3, ln] += ax * bf[d, 0, ln]
        elif op == OP_SUM_FLOAT:
            xf = a_flt[a, e]
            ax = abs(xf)
            if np.isfinite(xf):
                for ln in range(lanes):
                    bf[d, s2, ln] += xf * bf[d, 0, ln]
                if s3 >= 0:  # else never negative
                    for ln in range(lanes):
                        bf[d, s3, ln] += ax * bf[d, 0, ln]
            else:
                for ln in range(lanes):
                    if bf[d, 0, ln] > 0.0:
                        bf[d, s2, ln] += xf * bf[d, 0, ln]
                        if s3 >= 0:
                            bf[d, s3, ln] += ax * bf[d, 0, ln]


@njit(cache=True)
def _fusable_variables(nv, pred_ptr, pred_idx, pair_of, prog, op_ptr):
    """Per variable: whether a batch of its events may take :func:`_fused_batch` -- its
    events are never kept (no pair has it as the earlier variable), it reads only
    type-grained totals (no pair has it as the later one), and it contributes only
    counts and sums."""
    fusable = np.zeros(nv, np.bool_)
    for v in range(nv):
        ok = True
        for w in range(nv):
            if pair_of[v, w] >= 0:
                ok = False
        for pp in range(pred_ptr[v], pred_ptr[v + 1]):
            if pair_of[pred_idx[pp], v] >= 0:
                ok = False
        for k in range(op_ptr[v], op_ptr[v + 1]):
            op = prog[k, 1]
            if op != OP_CNT and op != OP_NN and op != OP_SUM_INT and op != OP_SUM_FLOAT:
                ok = False
        fusable[v] = ok
    return fusable


@njit(cache=True, inline="always")
def _played(plays, e, skip_var):
    """The variables event ``e`` plays, but ``skip_var`` (-1: none)."""
    bits = plays[e]
    if skip_var >= 0:
        bits &= ~(np.uint64(1) << np.uint64(skip_var))
    return bits


@njit(cache=True, inline="always")
def _is_live(live, u, k):
    """Whether channel ``k`` is one of variable ``u``'s live channels (``live[u]`` =
    ``[n, channel_1, ..]``): elsewhere u's totals are zero."""
    for c in range(live[u, 0]):
        if live[u, c + 1] == k:
            return True
    return False


@njit(cache=True, inline="always")
def _fused_channels(s, live, coef, cnt, v, n, keep, u0, u1, n_src, p_lo, p_hi, pred_idx, pred_bit, mask, lanes,
                    watch):
    """:func:`_fused_batch`'s update of one channel kind (``s`` = ``si`` or ``sf``): in
    ``v``'s live channels ``s[v] = keep * s[v] + n * (its other sources u0, u1, ...: bit
    ``pred_bit[pp] - p_lo`` of ``mask`` for predecessor ``pred_idx[pp]``) +
    coef * cnt`` -- the count channel 0 gains ``n * cnt`` (the sources are in ``cnt``).
    A source that is not live in a channel adds zero there and is not read (q3: B's
    predecessor A carries counts only, so B's 9 other channels read B's own totals alone).
    Returns, if ``watch``, whether a value passed RESCALE_ABOVE.  One loop per case, each
    storing only where it loads (vectorised)."""
    over = False
    for c in range(live[v, 0]):
        k = live[v, c + 1]
        ck = coef[k]
        # The sources live in channel k (when there are at most two of them).
        a0 = -1
        a1 = -1
        n_here = n_src
        if k != 0 and n_src <= 2:
            n_here = 0
            if n_src >= 1 and _is_live(live, u0, k):
                a0 = u0
                n_here = 1
            if n_src == 2 and _is_live(live, u1, k):
                if n_here == 0:
                    a0 = u1
                else:
                    a1 = u1
                n_here += 1
        if k == 0:
            for ln in range(lanes):
                x = s[v, 0, ln] + n * cnt[ln]
                s[v, 0, ln] = x
                if watch:
                    over |= (x > RESCALE_ABOVE) | (x < -RESCALE_ABOVE)
        elif n_here == 0:
            for ln in range(lanes):
                x = keep * s[v, k, ln] + ck * cnt[ln]
                s[v, k, ln] = x
                if watch:
                    over |= (x > RESCALE_ABOVE) | (x < -RESCALE_ABOVE)
        elif n_here == 1:
            for ln in range(lanes):
                x = keep * s[v, k, ln] + (n * s[a0, k, ln] + ck * cnt[ln])
                s[v, k, ln] = x
                if watch:
                    over |= (x > RESCALE_ABOVE) | (x < -RESCALE_ABOVE)
        elif n_here == 2:
            for ln in range(lanes):
                x = keep * s[v, k, ln] + (n * (s[a0, k, ln] + s[a1, k, ln]) + ck * cnt[ln])
                s[v, k, ln] = x
                if watch:
                    over |= (x > RESCALE_ABOVE) | (x < -RESCALE_ABOVE)
        else:
            for ln in range(lanes):
                acc = ck * cnt[ln]
                for pp in range(p_lo, p_hi):
                    u = pred_idx[pp]
                    if u != v and _bit(mask, pred_bit[pp] - p_lo):
                        acc += n * s[u, k, ln]
                x = keep * s[v, k, ln] + acc
                s[v, k, ln] = x
                if watch:
                    over |= (x > RESCALE_ABOVE) | (x < -RESCALE_ABOVE)
    return over


@njit(cache=True, inline="always")
def _edge_block(okb, lo, hi):
    """The pair bits of edges ``lo .. hi-1`` (one state's predecessors: consecutive bits,
    :func:`cogra.runtime.compiled.codes.edge_bits`), shifted to bit 0; edges numbered past
    the word's 64 bits pass (:func:`~cogra.runtime.compiled.aggregators.coarse_grained._edge_ok`)."""
    all_ = np.uint64(0xFFFFFFFFFFFFFFFF)
    if lo >= 64:
        m = all_
    else:
        m = okb >> np.uint64(lo)
        if hi > 64:
            m |= ~(all_ >> np.uint64(lo))
    if hi - lo >= 64:
        return m
    return m & ((np.uint64(1) << np.uint64(hi - lo)) - np.uint64(1))


@njit(cache=True, inline="always")
def _fused_batch(i, j, plays, pair_ok, nv, pred_ptr, pred_idx, pred_bit, start_bits, prog, op_ptr,
                 a_int, a_flt, a_valid, rows, si, sf, var_live_i, var_live_f, fusable,
                 skip_var, slot, lanes, cnt_i, cnt_f, coef_i, coef_f):
    """A batch whose events all play one type-grained variable ``v`` (see
    :func:`_fusable_variables`), with the same predecessors: ``v``'s totals updated in one
    pass per channel, without batch rows.

    Every such event's row is the same sum of its predecessors' totals (plus a start in
    lane ``slot``) with the same count ``cnt``, plus its own contributions ``x * cnt``; so
    the batch adds ``n * (sum of the predecessors' totals) + (sum of its x) * cnt`` --
    exact modulo 2**64 in the integer channels.  The generic path builds, contributes and
    adds each row in separate passes over ``W``-lane vectors (q3's B: ~30 passes over 60
    lanes per event; here ~15).

    Returns -1 where the batch does not qualify (nothing changed), 0 when done, 1 when
    done and a float total passed RESCALE_ABOVE.  ``skip_var`` (or -1) is a variable
    whose totals are loaded, not computed (kept_totals' SHARE_TAKE): events ignore it.
    """
    v = -1
    mask = np.uint64(0)
    n = 0
    for e in range(i, j):
        bits = _played(plays, e, skip_var)
        if bits == 0:
            continue
        if bits & (bits - np.uint64(1)):
            return -1  # plays two variables
        w = 0
        while not _bit(bits, w):
            w += 1
        m = _edge_block(pair_ok[e], pred_ptr[w], pred_ptr[w + 1])
        if v < 0:
            if not fusable[w]:
                return -1
            v = w
            mask = m
        elif w != v or m != mask:
            return -1
        n += 1
    if v < 0:
        return -1
    for c in range(coef_i.shape[0]):
        coef_i[c] = 0
    for c in range(coef_f.shape[0]):
        coef_f[c] = 0.0
    for e in range(i, j):
        bits = _played(plays, e, skip_var)
        if bits == 0:
            continue
        r = rows[e]
        for k in range(op_ptr[v], op_ptr[v + 1]):
            op = prog[k, 1]
            a = prog[k, 2]
            if op != OP_CNT and not a_valid[a, r]:
                continue
            if op == OP_CNT or op == OP_NN:
                if prog[k, 3] >= 0:  # else approximate: no modular channel
                    coef_i[prog[k, 3]] += np.uint64(1)
                coef_f[prog[k, 4]] += 1.0
            elif op == OP_SUM_INT:
                x = a_int[a, r]
                coef_i[prog[k, 3]] += np.uint64(x)
                coef_f[prog[k, 4]] += np.float64(x)
                if prog[k, 5] >= 0:  # else never negative: the approximation is the bound
                    coef_f[prog[k, 5]] += abs(np.float64(x))
            else:
                xf = a_flt[a, r]
                if not np.isfinite(xf):
                    return -1  # only lanes with trends may take it (inf * 0): the generic path
                coef_f[prog[k, 4]] += xf
                if prog[k, 5] >= 0:  # else never negative
                    coef_f[prog[k, 5]] += abs(xf)
    # The rows' count: a start in this pane's lane plus the predecessors' counts.
    for ln in range(lanes):
        cnt_i[ln] = 0
        cnt_f[ln] = 0.0
    # Channels other than the count are written in place: v's own total (B+ reads itself)
    # is scaled, the other sources added -- a loop whose store may overlap one of its
    # loads would run unvectorised.
    p_lo, p_hi = pred_ptr[v], pred_ptr[v + 1]
    own = False
    n_src = 0
    u0 = -1
    u1 = -1
    for pp in range(p_lo, p_hi):
        u = pred_idx[pp]
        if not _bit(mask, pred_bit[pp] - p_lo):
            continue
        for ln in range(lanes):
            cnt_i[ln] += si[u, 0, ln]
        for ln in range(lanes):
            cnt_f[ln] += sf[u, 0, ln]
        if u == v:
            own = True
            continue
        if n_src == 0:
            u0 = u
        elif n_src == 1:
            u1 = u
        n_src += 1
    if _bit(start_bits, v):
        cnt_i[slot] += np.uint64(1)
        cnt_f[slot] += 1.0
    alive = False
    for ln in range(lanes):
        alive |= cnt_f[ln] > 0.0
    if not alive:
        return 0  # no trend reaches these events: every row is zero
    nu = np.uint64(n)
    nf = np.float64(n)
    keep_u = np.uint64(n + 1) if own else np.uint64(1)
    keep_f = np.float64(n + 1) if own else 1.0
    _fused_channels(si, var_live_i, coef_i, cnt_i, v, nu, keep_u, u0, u1, n_src, p_lo, p_hi, pred_idx, pred_bit,
                    mask, lanes, False)
    over = _fused_channels(sf, var_live_f, coef_f, cnt_f, v, nf, keep_f, u0, u1, n_src, p_lo, p_hi, pred_idx,
                           pred_bit, mask, lanes, True)
    return 1 if over else 0


@njit(cache=True, inline="always")
def _clear_slots(si, sf, first, last, lanes):
    """Empty the type-grained totals' ring slots of panes ``first..last`` (all if that is
    ``lanes`` or more).  Tree nodes are cleared lazily: each carries the ring pane it is
    current at, and a visit first empties the slots that later panes reuse (so a node pays
    for the panes since it was last touched, not every node for every pane)."""
    n = last - first + 1
    if n >= lanes:
        _clear_totals(si, sf)
        return
    for q in range(first, first + n):
        ln = q % lanes
        for v in range(si.shape[0]):
            for k in range(si.shape[1]):
                si[v, k, ln] = 0
        for v in range(sf.shape[0]):
            for k in range(sf.shape[1]):
                sf[v, k, ln] = 0.0


@njit(cache=True, inline="always")
def _clear_totals(si, sf):
    """Every lane of every total empty (element by element: a slice is a view, and views
    need reference counts)."""
    for v in range(si.shape[0]):
        for k in range(si.shape[1]):
            for ln in range(si.shape[2]):
                si[v, k, ln] = 0
    for v in range(sf.shape[0]):
        for k in range(sf.shape[1]):
            for ln in range(sf.shape[2]):
                sf[v, k, ln] = 0.0


@njit(cache=True)
def _rebuild(ti, tf, ts, vi, vf, vs, m_loc, lr, pair_flags, live_i, live_f, lanes, n_live, cur):
    """Trees from the stored vectors of the block's first ``n_live`` positions, at the
    block's (new) ranks, as of ring pane ``cur``: leaves first, then the Fenwick sums in
    one linear pass."""
    for p in range(pair_flags.shape[0]):
        m = m_loc[p]
        fl = pair_flags[p]
        ni = live_i[p, 0]
        nf = live_f[p, 0]
        for t in range(3):
            if (fl >> t) & 1:  # USE_PREFIX, USE_SUFFIX, USE_EQUAL are bits 0, 1, 2: tree t is used
                # Only the live channels are ever read (q3: the float count alone; zeroing the
                # rest was most of the re-ranking's memset).
                for a in range(m + 1):
                    for c in range(ni):
                        for ln in range(lanes):
                            ti[p, t, a, c, ln] = 0
                    for c in range(nf):
                        for ln in range(lanes):
                            tf[p, t, a, c, ln] = 0.0
                    ts[p, t, a] = cur
        for d in range(n_live):
            if not vs[p, d]:
                continue
            r = lr[p, d]
            if fl & USE_PREFIX:
                _stored_into_node(ti, tf, p, 0, r + 1, vi, vf, d, lanes, live_i, live_f)
            if fl & USE_SUFFIX:
                _stored_into_node(ti, tf, p, 1, m - r, vi, vf, d, lanes, live_i, live_f)
            if fl & USE_EQUAL:
                _stored_into_node(ti, tf, p, 2, r + 1, vi, vf, d, lanes, live_i, live_f)
        for t in range(2):
            if (t == 0 and not fl & USE_PREFIX) or (t == 1 and not fl & USE_SUFFIX):
                continue
            for i in range(1, m + 1):
                parent = i + (i & (-i))
                if parent <= m:
                    _node_into_node(ti, tf, p, t, parent, i, lanes, live_i, live_f)


@njit(cache=True, **NO_REFCOUNTS)
def _shift_stored(vi, vf, vs, n_pairs, shift, n_live, times, live_lo, slide, cur, lanes, live_i, live_f):
    """A new rank block from position ``live_lo`` (``shift`` positions on): the stored
    vectors of its ``n_live`` live positions move to the front, their slots of the panes
    that expired since their insert emptied -- ``cur - pane`` slots ending at ``cur``'s,
    one or two contiguous ranges (once per live vector and re-ranking: not worth masking,
    as the tree walks do)."""
    cur_slot = cur % lanes
    for p in range(n_pairs):
        ni = live_i[p, 0]
        nf = live_f[p, 0]
        for d in range(n_live):
            vs[p, d] = vs[p, d + shift]
            if not vs[p, d]:
                continue
            for c in range(ni):
                for ln in range(lanes):
                    vi[p, d, c, ln] = vi[p, d + shift, c, ln]
            for c in range(nf):
                for ln in range(lanes):
                    vf[p, d, c, ln] = vf[p, d + shift, c, ln]
            n = min(lanes, cur - times[live_lo + d] // slide)
            first = cur_slot - n + 1
            lo2 = lanes
            if first < 0:
                lo2 = first + lanes
                first = 0
            for c in range(ni):
                for ln in range(first, cur_slot + 1):
                    vi[p, d, c, ln] = 0
                for ln in range(lo2, lanes):
                    vi[p, d, c, ln] = 0
            for c in range(nf):
                for ln in range(first, cur_slot + 1):
                    vf[p, d, c, ln] = 0.0
                for ln in range(lo2, lanes):
                    vf[p, d, c, ln] = 0.0
        for d in range(n_live, vs.shape[1]):
            vs[p, d] = False


@njit(cache=True, inline="always")
def _save_lanes(ci, cf, cpane, c, si, sf, v, var_live_i, var_live_f, cur, lanes):
    """Cache row ``c`` := variable ``v``'s lane totals (live channels), current at pane ``cur``."""
    for q in range(var_live_i[v, 0]):
        k = var_live_i[v, q + 1]
        for ln in range(lanes):
            ci[c, q, ln] = si[v, k, ln]
    for q in range(var_live_f[v, 0]):
        k = var_live_f[v, q + 1]
        for ln in range(lanes):
            cf[c, q, ln] = sf[v, k, ln]
    cpane[c] = cur


@njit(cache=True, inline="always")
def _load_lanes(si, sf, v, var_live_i, var_live_f, ci, cf, cpane, c, cur, lanes):
    """Variable ``v``'s lane totals := cache row ``c`` (zero if ``c < 0``), brought from its
    pane to ``cur``: the lanes of panes that expired in between are emptied."""
    if c < 0:
        for q in range(var_live_i[v, 0]):
            k = var_live_i[v, q + 1]
            for ln in range(lanes):
                si[v, k, ln] = 0
        for q in range(var_live_f[v, 0]):
            k = var_live_f[v, q + 1]
            for ln in range(lanes):
                sf[v, k, ln] = 0.0
        return
    # (Lane by lane, not ``ci[..] if c >= 0 else 0``: numba unifies uint64 with an int
    # literal as float64, which rounds counts above 2**53.)
    for q in range(var_live_i[v, 0]):
        k = var_live_i[v, q + 1]
        for ln in range(lanes):
            si[v, k, ln] = ci[c, q, ln]
    for q in range(var_live_f[v, 0]):
        k = var_live_f[v, q + 1]
        for ln in range(lanes):
            sf[v, k, ln] = cf[c, q, ln]
    first = cpane[c] - lanes + 1  # the oldest pane the row holds
    for p in range(max(first, cur - 2 * lanes + 1), cur - lanes + 1):
        ln = p % lanes
        for q in range(var_live_i[v, 0]):
            si[v, var_live_i[v, q + 1], ln] = 0
        for q in range(var_live_f[v, 0]):
            sf[v, var_live_f[v, q + 1], ln] = 0.0


@njit(cache=True)
def run_mixed_ring(
    pattern, pred_bit, positions, slots, attributes, pairs, var_live_i, var_live_f,
    win_seg, win_k, win_lo, win_hi, slide, lanes, max_batch, max_span, out, redo, share,
):
    """Every window ``[k*slide, (k + lanes)*slide)`` (see the module docstring;
    :mod:`cogra.runtime.compiled.kernel_args`' groups; ``share``: the tuple below).
    Windows come grouped by segment, ``k`` ascending within one; ``max_span`` bounds the
    positions of a segment in any ``lanes`` consecutive panes.

    A state of variable ``v`` is only ever non-zero in ``v``'s live channels
    (``var_live_*``, :meth:`KernelDriver._live_channels`), so rows and totals are read and
    written there only (for q3's A: 2 channels of 10).  ``pred_idx`` lists each variable's
    predecessors with the most live channels first: a row is a copy of its first source
    when that source has all of the row's channels; ``pred_bit`` each one's pair bit
    (:func:`cogra.runtime.compiled.codes.edge_bits`: the edges in ascending order).

    Sharing a kept variable between sub-streams (:mod:`cogra.runtime.compiled.sharing.kept_totals`):
    with ``share_mode`` :data:`~cogra.runtime.compiled.codes.SHARE_SAVE`, after each batch, variable
    ``share_var``'s lane totals (its live channels) go to cache row ``j - 1``, the batch's
    last position (``ci``, ``cf``), with the ring pane they are current at
    (``cpane``).  With :data:`~cogra.runtime.compiled.codes.SHARE_TAKE` the variable is never computed:
    before each batch its totals are loaded from cache row ``take_at[i]`` (-1: none yet),
    and the lanes of the panes that expired since that row's pane are emptied."""
    _mode, nv, pred_ptr, pred_idx, start_bits, final_bits = pattern
    times, plays, pair_ok, rows = positions
    prog, op_ptr, _x_is_min, n_i, n_f = slots
    a_int, a_flt, a_valid, _a_key = attributes
    pair_of, pair_flags, _m_of, live_i, live_f, _live_x, ranks = pairs
    h_rank, h_valid, q_a, q_b, q_eq, g_valid = ranks
    out_i, out_f, _out_x, out_e, out_r = out
    share_var, share_mode, take_at, ci, cf, cpane = share
    n_pairs = pair_flags.shape[0]
    nl_i = 1
    nl_f = 1
    for p in range(n_pairs):
        nl_i = max(nl_i, live_i[p, 0])
        nl_f = max(nl_f, live_f[p, 0])
    si = np.zeros((nv, n_i, lanes), np.uint64)
    sf = np.zeros((nv, n_f, lanes), np.float64)
    bi = np.zeros((max_batch, n_i, lanes), np.uint64)
    bf = np.zeros((max_batch, n_f, lanes), np.float64)
    bvar = np.zeros(max_batch, np.int64)
    bev = np.zeros(max_batch, np.int64)
    block = RANK_BLOCK_SPANS * max_span  # re-ranked when the events pass its end
    rank_buf, rank_pos, lr, la, lb, leq, m_loc, vals, tmp_k, tmp_t, count = _rank_buffers(n_pairs, block)
    ti = np.zeros((max(1, n_pairs), 3, block + 1, nl_i, lanes), np.uint64)
    tf = np.zeros((max(1, n_pairs), 3, block + 1, nl_f, lanes), np.float64)
    ts = np.zeros((max(1, n_pairs), 3, block + 1), np.int64)  # per node: the ring pane it is current at
    # Each kept event's inserted vector, by position in the block (for re-ranking).
    vi = np.zeros((max(1, n_pairs), block, nl_i, lanes), np.uint64)
    vf = np.zeros((max(1, n_pairs), block, nl_f, lanes), np.float64)
    vs = np.zeros((max(1, n_pairs), block), np.bool_)
    # Batches of one type-grained variable's events update its totals directly (_fused_batch).
    fusable = _fusable_variables(nv, pred_ptr, pred_idx, pair_of, prog, op_ptr)
    cnt_i = np.zeros(lanes, np.uint64)
    cnt_f = np.zeros(lanes, np.float64)
    coef_i = np.zeros(max(1, n_i), np.uint64)
    coef_f = np.zeros(max(1, n_f), np.float64)
    lane_age = np.full(lanes + 1, -1, np.int64)  # (_lane_ages)
    scratch = (si, sf, bi, bf, bvar, bev, rank_buf, rank_pos, lr, la, lb, leq, m_loc, vals, tmp_k, tmp_t, count,
               ti, tf, ts, vi, vf, vs, fusable, cnt_i, cnt_f, coef_i, coef_f, lane_age)
    _run_segments(
        times, plays, pair_ok, nv, pred_ptr, pred_idx, pred_bit, start_bits, final_bits,
        prog, op_ptr, n_i, n_f,
        a_int, a_flt, a_valid, rows,
        pair_of, pair_flags, live_i, live_f, var_live_i, var_live_f,
        h_rank, h_valid, q_a, q_b, q_eq, g_valid,
        win_seg, win_k, win_lo, win_hi, slide, lanes,
        out_i, out_f, out_e, out_r, redo,
        share_var, share_mode, take_at, ci, cf, cpane, scratch,
    )


@njit(cache=True, **NO_REFCOUNTS)
def _run_segments(
    times, plays, pair_ok, nv, pred_ptr, pred_idx, pred_bit, start_bits, final_bits,
    prog, op_ptr, n_i, n_f,
    a_int, a_flt, a_valid, rows,
    pair_of, pair_flags, live_i, live_f, var_live_i, var_live_f,
    h_rank, h_valid, q_a, q_b, q_eq, g_valid,
    win_seg, win_k, win_lo, win_hi, slide, lanes,
    out_i, out_f, out_e, out_r, redo,
    share_var, share_mode, take_at, ci, cf, cpane, scratch,
):
    """:func:`run_mixed_ring`'s loop over the windows, with its buffers (``scratch``, sized
    by ``max_batch`` and ``max_span`` there) allocated: no reference counts here, so the
    helpers inline at no cost."""
    (si, sf, bi, bf, bvar, bev, rank_buf, rank_pos, lr, la, lb, leq, m_loc, vals, tmp_k, tmp_t, count,
     ti, tf, ts, vi, vf, vs, fusable, cnt_i, cnt_f, coef_i, coef_f, lane_age) = scratch
    n_pairs = pair_flags.shape[0]
    n_pos = plays.shape[0]
    block = vs.shape[1]  # as allocated: re-ranked when the events pass its end, about once per span
    skip_var = share_var if share_mode == SHARE_TAKE else -1
    # Only a variable some event plays can fuse (a representative's events play its kept
    # variable only: no batch of it is offered to _fused_batch).
    played = np.uint64(0)
    for e in range(n_pos):
        played |= _played(plays, e, skip_var)
    any_fusable = False
    for v in range(nv):
        if fusable[v] and _bit(played, v):
            any_fusable = True
    n_win = win_lo.shape[0]
    w = 0
    while w < n_win:
        seg = win_seg[w]
        w2 = w + 1
        while w2 < n_win and win_seg[w2] == seg:
            w2 += 1
        lo = win_lo[w]
        hi = lo
        for q in range(w, w2):
            hi = max(hi, win_hi[q])
        _clear_totals(si, sf)
        for p in range(vs.shape[0]):
            for d in range(vs.shape[1]):
                vs[p, d] = False
        blo = lo
        bhi = min(n_pos, lo + block)
        cur = times[lo] // slide if lo < hi else 0  # the ring holds panes cur - lanes + 1 .. cur
        for p in range(n_pairs):
            m_loc[p] = _window_ranks(p, pair_flags[p], blo, bhi, plays, rows, h_rank, h_valid, q_a, q_b, q_eq,
                                     g_valid, rank_buf, rank_pos, lr, la, lb, leq, vals, tmp_k, tmp_t,
                                     count)
        _rebuild(ti, tf, ts, vi, vf, vs, m_loc, lr, pair_flags, live_i, live_f, lanes, 0, cur)
        live_lo = lo  # first position of a live pane
        failed = False
        emit = w
        i = lo
        while True:
            pane = times[i] // slide if i < hi else win_k[w2 - 1] + lanes
            # Windows that end before this pane are complete: read them with the ring at their last pane.
            while emit < w2 and win_k[emit] + lanes <= pane:
                last = win_k[emit] + lanes - 1
                if last < cur:  # the ring is past this window (cannot happen for windows in walk order)
                    redo[emit] = True
                    emit += 1
                    continue
                _clear_slots(si, sf, cur + 1 - lanes, last - lanes, lanes)
                cur = last
                out_i[emit] = 0
                out_f[emit] = 0.0
                for v in range(nv):
                    if _bit(final_bits, v) == 0 or share_mode == SHARE_SAVE:  # a representative's rows are not read
                        continue
                    for k in range(n_i):
                        tot = np.uint64(0)
                        for ln in range(lanes):
                            tot += si[v, k, ln]
                        out_i[emit, k] += tot
                    for k in range(n_f):
                        tot = 0.0
                        for ln in range(lanes):
                            tot += sf[v, k, ln]
                        out_f[emit, k] += tot
                out_r[emit] = out_f[emit, 0] > 0.0
                out_e[emit] = 0
                emit += 1
            if i >= hi or emit >= w2:
                break
            if pane > cur:
                _clear_slots(si, sf, cur + 1 - lanes, pane - lanes, lanes)
                cur = pane
            while times[live_lo] // slide <= cur - lanes:
                live_lo += 1
            j = i + 1
            while j < hi and times[j] == times[i]:
                j += 1
            if share_mode == SHARE_TAKE:
                _load_lanes(si, sf, share_var, var_live_i, var_live_f, ci, cf, cpane, take_at[i], cur, lanes)
            if j > bhi:
                # The events leave the rank block: a new one from the oldest live pane.
                n_live = i - live_lo
                _shift_stored(vi, vf, vs, n_pairs, live_lo - blo, n_live, times, live_lo, slide, cur, lanes,
                              live_i, live_f)
                blo = live_lo
                bhi = min(n_pos, blo + block)
                for p in range(n_pairs):
                    m_loc[p] = _window_ranks(p, pair_flags[p], blo, bhi, plays, rows, h_rank, h_valid, q_a, q_b,
                                             q_eq, g_valid, rank_buf, rank_pos, lr, la, lb, leq, vals, tmp_k,
                                             tmp_t, count)
                _rebuild(ti, tf, ts, vi, vf, vs, m_loc, lr, pair_flags, live_i, live_f, lanes, n_live, cur)
                if j > bhi:  # max_span was not a bound after all: leave these windows to the caller
                    failed = True
                    break
            slot = cur % lanes
            nb = 0
            fused = -1
            if any_fusable:
                fused = _fused_batch(i, j, plays, pair_ok, nv, pred_ptr, pred_idx, pred_bit, start_bits, prog,
                                     op_ptr,
                                     a_int, a_flt, a_valid, rows, si, sf, var_live_i, var_live_f, fusable,
                                     skip_var, slot, lanes, cnt_i, cnt_f, coef_i, coef_f)
            for e in range(i, j if fused < 0 else i):  # event by event unless fused
                bits = _played(plays, e, skip_var)
                if bits == 0:
                    continue
                okb = pair_ok[e]
                d = e - blo
                for v in range(nv):
                    if _bit(bits, v) == 0:
                        continue
                    # The row is written by its first source (a copy, not a clear and an add).
                    vni = var_live_i[v, 0]
                    vnf = var_live_f[v, 0]
                    blank = True
                    if _bit(start_bits, v):
                        _clear_row(bi, bf, nb, v, var_live_i, var_live_f, lanes)
                        bi[nb, 0, slot] = 1
                        bf[nb, 0, slot] = 1.0
                        blank = False
                    for pp in range(pred_ptr[v], pred_ptr[v + 1]):
                        u = pred_idx[pp]
                        if not _edge_ok(okb, pred_bit[pp]):
                            continue
                        p = pair_of[u, v]
                        if p >= 0 and g_valid[p, rows[e]] == CROSS_ALL:
                            p = -1  # this event takes every earlier event of the pair
                        if p < 0:
                            if blank and var_live_i[u, 0] == vni and var_live_f[u, 0] == vnf:
                                for c in range(vni):
                                    k = var_live_i[v, c + 1]
                                    for ln in range(lanes):
                                        bi[nb, k, ln] = si[u, k, ln]
                                for c in range(vnf):
                                    k = var_live_f[v, c + 1]
                                    for ln in range(lanes):
                                        bf[nb, k, ln] = sf[u, k, ln]
                            else:
                                if blank:
                                    _clear_row(bi, bf, nb, v, var_live_i, var_live_f, lanes)
                                for c in range(var_live_i[u, 0]):
                                    k = var_live_i[u, c + 1]
                                    for ln in range(lanes):
                                        bi[nb, k, ln] += si[u, k, ln]
                                for c in range(var_live_f[u, 0]):
                                    k = var_live_f[u, c + 1]
                                    for ln in range(lanes):
                                        bf[nb, k, ln] += sf[u, k, ln]
                            blank = False
                        elif g_valid[p, rows[e]]:
                            if blank:
                                _clear_row(bi, bf, nb, v, var_live_i, var_live_f, lanes)
                                blank = False
                            fl = pair_flags[p]
                            m = m_loc[p]
                            if fl & USE_PREFIX:
                                _tree_query(bi, bf, nb, ti, tf, ts, p, 0, la[p, d], cur, lanes, live_i, live_f,
                                            False, lane_age)
                            if fl & USE_SUFFIX:
                                _tree_query(bi, bf, nb, ti, tf, ts, p, 1, m - lb[p, d], cur, lanes, live_i, live_f,
                                            False, lane_age)
                            if (fl & USE_EQUAL) and leq[p, d] >= 0:
                                _tree_query(bi, bf, nb, ti, tf, ts, p, 2, leq[p, d] + 1, cur, lanes, live_i, live_f,
                                            True, lane_age)
                    if blank:
                        continue
                    alive = False
                    for ln in range(lanes):  # no early exit: an OR over lanes vectorises
                        alive |= bf[nb, 0, ln] > 0.0
                    if alive:
                        _contribute_ring(bi, bf, nb, lanes, prog, op_ptr[v], op_ptr[v + 1], rows[e],
                                         a_int, a_flt, a_valid)
                        bvar[nb] = v
                        bev[nb] = e
                        nb += 1
            # Past RESCALE_ABOVE the segment goes to the per-window kernel.  A type-grained
            # total bounds every tree node of its variable (channel by channel, with the
            # |x|-sum channels bounding signed sums), so the totals are all to watch; a
            # comparison OR-ed over lanes vectorises, a running max would not.
            over = fused == 1
            for k in range(nb):
                v = bvar[k]
                e = bev[k]
                for c in range(var_live_i[v, 0]):
                    q = var_live_i[v, c + 1]
                    for ln in range(lanes):
                        si[v, q, ln] += bi[k, q, ln]
                for c in range(var_live_f[v, 0]):
                    q = var_live_f[v, c + 1]
                    for ln in range(lanes):
                        x = sf[v, q, ln] + bf[k, q, ln]
                        sf[v, q, ln] = x
                        over |= (x > RESCALE_ABOVE) | (x < -RESCALE_ABOVE)
                for vv in range(nv):
                    p = pair_of[v, vv]
                    if p < 0 or not h_valid[p, rows[e]]:
                        continue
                    d = e - blo
                    r = lr[p, d]
                    m = m_loc[p]
                    fl = pair_flags[p]
                    vs[p, d] = True
                    # (The channel read once per channel: indexed in the lane loop it is reloaded
                    # per lane, as a store might alias it, and the copy does not vectorise.)
                    for c in range(live_i[p, 0]):
                        q = live_i[p, c + 1]
                        for ln in range(lanes):
                            vi[p, d, c, ln] = bi[k, q, ln]
                    for c in range(live_f[p, 0]):
                        q = live_f[p, c + 1]
                        for ln in range(lanes):
                            vf[p, d, c, ln] = bf[k, q, ln]
                    if fl & USE_PREFIX:
                        _tree_insert(ti, tf, ts, p, 0, r + 1, m, bi, bf, k, cur, lanes, live_i, live_f, False, lane_age)
                    if fl & USE_SUFFIX:
                        _tree_insert(ti, tf, ts, p, 1, m - r, m, bi, bf, k, cur, lanes, live_i, live_f, False, lane_age)
                    if fl & USE_EQUAL:
                        _tree_insert(ti, tf, ts, p, 2, r + 1, m, bi, bf, k, cur, lanes, live_i, live_f, True, lane_age)
            if over:
                failed = True
                break
            if share_mode == SHARE_SAVE:  # a batch's totals are read at its last position only
                _save_lanes(ci, cf, cpane, j - 1, si, sf, share_var, var_live_i, var_live_f, cur, lanes)
            i = j
        if failed:
            for q in range(emit, w2):
                redo[q] = True
        w = w2



__all__ = ["run_mixed_ring", "tree_bytes"]
