"""The ring kernel's loading run, generated per query shape: ``ring_loading``.

Sliding windows with a shared kept variable (:func:`kept_totals.run_ring`) run every
sub-stream without that variable's Fenwick trees: before each batch its lane totals are
loaded from the representatives' cache, and every other variable is type-grained -- its
batch is one update of its lane vectors (:func:`mixed_one_pass._fused_batch`).  The generic
ring kernel (:func:`mixed_one_pass.run_mixed_ring`) does that through loops over variables,
live-channel lists and predecessors, a helper call per batch for the load and one for the
update, and ~8 passes over the lanes; q3's sub-streams spent ~700 cycles per batch there.

Here the shape's variables, channels and predecessors are constants, every state a lane
vector of its own, and a batch one loop over the lanes updating all of its variable's
channels at once (the load's expired lanes emptied first): q3's sub-streams 62 -> 33 ms
per 200k rows.  The windows are read as the generic kernel reads them (the same sums in
the same order: the results are identical).

A batch the fused update does not cover -- its events play two variables, carry
different predecessor masks, or a non-finite value -- and counts past 2**600 mark the
segment's windows not yet read in ``redo``; the caller then runs the generic kernel.

The representatives' run that fills that cache (``ring_saving``, ``Shape.saves``) is
generated too: its events play the shared variable ``V`` alone, whose only predecessor is
itself through its one indexed pair, so a batch is, per event, a row (a start in the
current pane's lane plus the Fenwick queries of the pair's trees, then ``V``'s
contributions) and, per row, the totals' update, the stored vector and the tree inserts --
the generic kernel's steps with the variable, its channels, trees and operations constants
(q3's representatives 87 -> 66 ms per 200k rows; the rows, trees and cache identical).
Re-ranking stays the generic kernel's (:func:`mixed_grained._window_ranks`,
:func:`mixed_one_pass._rebuild`, :func:`mixed_one_pass._shift_stored`, on the same arrays).
"""

from __future__ import annotations

from typing import Any

from cogra.runtime.compiled.codes import edge_bits
from cogra.runtime.compiled.channels import OP_CNT, OP_NN, OP_SUM_FLOAT, OP_SUM_INT
from cogra.runtime.compiled.jit import NO_REFCOUNTS_SOURCE
from cogra.runtime.compiled.codes import RANK_BLOCK_SPANS, USE_EQUAL, USE_PREFIX, USE_SUFFIX


def write_ring_loading(w: Any, s: Any) -> None:
    """Append ``ring_loading`` for shape ``s`` (with ``loads`` and ``live``) to writer ``w``:
    ``ring_loading(times, plays, pair_ok, a_int, a_flt, a_valid, rows, win_seg, win_k,
    win_lo, win_hi, slide, lanes, out_i, out_f, out_e, out_r, redo, take_at, ci, cf,
    cpane)`` -- :func:`mixed_one_pass.run_mixed_ring`'s arguments of the same names, under
    ``SHARE_TAKE`` with no indexed pair."""
    assert s.mode == 0 and not s.x_is_min and s.loads is not None and s.live is not None
    nv = s.nv
    lv, load_i, load_f, _load_x = s.loads
    live_i, live_f = s.live
    computed = [v for v in range(nv) if v != lv]
    # The loaded variable's lanes are its cached channels; the others' are their live ones.
    li = {v: (tuple(load_i) if v == lv else tuple(live_i[v])) for v in range(nv)}
    lf = {v: (tuple(load_f) if v == lv else tuple(live_f[v])) for v in range(nv)}
    states = [f"s{v}_i{k}" for v in computed for k in li[v]] + [f"s{v}_f{k}" for v in computed for k in lf[v]]
    loaded = [f"s{lv}_i{k}" for k in li[lv]] + [f"s{lv}_f{k}" for k in lf[lv]]

    def clear_panes(first: str, last: str) -> None:
        _clear_panes(w, first, last, lambda at: _empty(w, states, at))

    w("@njit(cache=True, fastmath=False)")
    w("def ring_loading(times, plays, pair_ok, a_int, a_flt, a_valid, rows, win_seg, win_k, win_lo, win_hi,")
    w("                 slide, lanes, out_i, out_f, out_e, out_r, redo, take_at, ci, cf, cpane):")
    with w.block():
        for name in states + loaded:
            w(f"{name} = np.zeros(lanes, {'np.uint64' if '_i' in name else 'np.float64'})")
        w(f"rescale_above = {float(2.0**600)!r}")
        w(f"skip = ~B{lv}")
        w("n_win = win_lo.shape[0]")
        w("w = 0")
        w("while w < n_win:")
        with w.block():
            _open_segment(w)
            _empty(w, states, ":")
            w("cur = times[lo] // slide if lo < hi else 0  # the ring holds panes cur - lanes + 1 .. cur")
            w("failed = False")
            w("emit = w")
            w("i = lo")
            w("while True:")
            with w.block():
                w("pane = times[i] // slide if i < hi else win_k[w2 - 1] + lanes")
                _emit_windows(w, s, li, lf, clear_panes)
                w("if i >= hi or emit >= w2:")
                with w.block():
                    w("break")
                w("if pane > cur:")
                with w.block():
                    clear_panes("cur + 1 - lanes", "pane - lanes")
                    w("cur = pane")
                _batch_end(w)
                _batch(w, s, lv, computed, li, lf, loaded)
                w("if failed:")
                with w.block():
                    w("break")
                w("i = j")
            _close_segment(w)
    w()


def _open_segment(w: Any) -> None:
    """The next segment: its windows ``w..w2-1`` (grouped by ``win_seg``), its positions
    ``lo..hi-1``."""
    w("seg = win_seg[w]")
    w("w2 = w + 1")
    w("while w2 < n_win and win_seg[w2] == seg:")
    with w.block():
        w("w2 += 1")
    w("lo = win_lo[w]")
    w("hi = lo")
    w("for q in range(w, w2):")
    with w.block():
        w("hi = max(hi, win_hi[q])")


def _batch_end(w: Any) -> None:
    """``j``: the end of the batch from ``i`` (its events share one time)."""
    w("j = i + 1")
    w("while j < hi and times[j] == times[i]:")
    with w.block():
        w("j += 1")


def _close_segment(w: Any) -> None:
    """A failed segment's windows not yet read go to the caller (``redo``); on to the next."""
    w("if failed:")
    with w.block():
        w("for q in range(emit, w2):")
        with w.block():
            w("redo[q] = True")
    w("w = w2")


def _empty(w: Any, names: list, at: str) -> None:
    """Empty element(s) ``at`` (``":"``: all lanes) of the lane vectors ``names``
    (``s{v}_i{k}`` integer, ``s{v}_f{k}`` float)."""
    for name in names:
        w(f"{name}[{at}] = {'U0' if '_i' in name else '0.0'}")


def _windows_before_pane(w: Any, clear_panes: Any, read: Any) -> None:
    """For each window that ends before ``pane``: the ring moved to its last pane
    (``clear_panes(first, last)`` empties the slots reused), then ``read()`` writes what
    is done with it."""
    w("while emit < w2 and win_k[emit] + lanes <= pane:")
    with w.block():
        w("last = win_k[emit] + lanes - 1")
        w("if last < cur:  # the ring is past this window (cannot happen for windows in walk order)")
        with w.block():
            w("redo[emit] = True")
            w("emit += 1")
            w("continue")
        clear_panes("cur + 1 - lanes", "last - lanes")
        w("cur = last")
        read()
        w("emit += 1")


def _emit_windows(w: Any, s: Any, li: dict, lf: dict, clear_panes: Any) -> None:
    """Read the windows that end before ``pane``, each with the ring at its last pane: the
    final variables' lanes summed, variable by variable (as the generic kernel does)."""
    _windows_before_pane(w, clear_panes, lambda: _read_window(w, s, li, lf))


def _read_window(w: Any, s: Any, li: dict, lf: dict) -> None:
    """Window ``emit``'s channels: the final variables' lanes summed."""
    for kind, width, live in (("i", s.n_i, li), ("f", s.n_f, lf)):
        zero = "U0" if kind == "i" else "0.0"
        for k in range(width):
            w(f"out_{kind}[emit, {k}] = {zero}")
            for v in s.final:
                if k in live[v]:
                    w(f"tot_{kind} = {zero}")
                    w("for ln in range(lanes):")
                    with w.block():
                        w(f"tot_{kind} += s{v}_{kind}{k}[ln]")
                    w(f"out_{kind}[emit, {k}] += tot_{kind}")
    w("out_r[emit] = out_f[emit, 0] > 0.0")
    w("out_e[emit] = 0")


def _load(w: Any, lv: int, li: tuple, lf: tuple, loaded: list) -> None:
    """The loaded variable's lanes := cache row ``c`` (``take_at[i]``; zero if none), with
    the lanes of panes that expired since that row's pane emptied (mixed_one_pass._load_lanes)."""
    w("if c < 0:")
    with w.block():
        _empty(w, loaded, ":")
    w("else:")
    with w.block():
        for kind, live, cache in (("i", li, "ci"), ("f", lf, "cf")):
            for q, k in enumerate(live):
                w("for ln in range(lanes):")
                with w.block():
                    w(f"s{lv}_{kind}{k}[ln] = {cache}[c, {q}, ln]")
        w("for p in range(max(cpane[c] - lanes + 1, cur - 2 * lanes + 1), cur - lanes + 1):")
        with w.block():
            w("ln = p % lanes")
            _empty(w, loaded, "ln")


def _edge_block(s: Any, v: int) -> str:
    """The expression of event ``e``'s pair bits of ``v``'s edges, shifted to bit 0 (as
    mixed_one_pass._edge_block)."""
    preds = s.preds[v]
    if not preds:
        return "U0"
    lo = edge_bits(s.preds)[(preds[0], v)]
    full = (1 << len(preds)) - 1
    if lo >= 64:  # (edges past the word's 64 bits pass: coarse_grained._edge_ok)
        return f"np.uint64({full})"
    past = full & ~((1 << max(0, 64 - lo)) - 1)
    return f"((pair_ok[e] >> np.uint64({lo})) | np.uint64({past})) & np.uint64({full})"


def _loaded_in_place(lv: int, li: tuple, lf: tuple) -> dict:
    """The loaded variable's lanes read in cache row ``c`` itself: ``{(lv, kind, k): ref}``
    (see :func:`_update`)."""
    refs = {}
    for kind, live, cache in (("i", li, "ci"), ("f", lf, "cf")):
        for q, k in enumerate(live):
            refs[(lv, kind, k)] = f"{cache}[c, {q}, ln]"
    return refs


def _batch(w: Any, s: Any, lv: int, computed: list, li: dict, lf: dict, loaded: list) -> None:
    """The batch ``i..j``: which variable its events play (one, with one predecessor mask,
    else ``failed``), their count ``n`` and contributions (coefficients per channel), then
    that variable's lanes updated in one loop (mixed_one_pass._fused_batch's algebra), reading
    the loaded variable's lanes from the cache: in its row itself where that is current
    (its pane is the ring's: no lane expired since -- ~70% of q3's batches), else copied to its
    lane vectors and the expired lanes emptied (:func:`_load`).  (Copied for every batch,
    the load was 3 of q3's ~20 ms.)"""
    w("v = -1")
    w("mask = U0")
    w("n = 0")
    coefs = {v: ([k for k in li[v] if k != 0], [k for k in lf[v] if k != 0]) for v in computed}
    for v in computed:
        for k in coefs[v][0]:
            w(f"c{v}_i{k} = U0")
        for k in coefs[v][1]:
            w(f"c{v}_f{k} = 0.0")
    w("for e in range(i, j):")
    with w.block():
        w("bits = plays[e] & skip")
        w("if bits == U0:")
        with w.block():
            w("continue")
        w("if bits & (bits - U1):  # plays two variables")
        with w.block():
            w("failed = True")
            w("break")
        # (v's predecessors' pair bits: consecutive from its first edge, codes.edge_bits)
        w(f"var = {computed[0]}")
        w(f"m = {_edge_block(s, computed[0])}")
        for v in computed[1:]:
            w(f"if bits == B{v}:")
            with w.block():
                w(f"var = {v}")
                w(f"m = {_edge_block(s, v)}")
        w("if v < 0:")
        with w.block():
            w("v = var")
            w("mask = m")
        w("elif var != v or m != mask:")
        with w.block():
            w("failed = True")
            w("break")
        w("n += 1")
        w("r = rows[e]")
        for v in computed:
            ops = [op for op in s.ops if op[0] == v]
            if not ops:
                continue
            w(f"if var == {v}:")
            with w.block():
                for (_var, op, a, s1, s2, s3) in ops:
                    _coefficient(w, v, op, a, s1, s2, s3)
    w("if failed:")
    with w.block():
        w("break")
    w("slot = cur % lanes")
    w("nu = np.uint64(n)")
    w("nf = np.float64(n)")
    w("over = False")
    w("c = take_at[i]")
    in_place = _loaded_in_place(lv, li[lv], lf[lv])
    for v in computed:
        w(f"if v == {v}:")
        with w.block():
            if lv in s.preds[v]:
                w("if c >= 0 and cpane[c] >= cur:")
                with w.block():
                    _update(w, s, v, li, lf, in_place)
                w("else:")
                with w.block():
                    _load(w, lv, li[lv], lf[lv], loaded)
                    _update(w, s, v, li, lf)
            else:
                _update(w, s, v, li, lf)
    w("if over:")
    with w.block():
        w("failed = True")
        w("break")


def _coefficient(w: Any, v: int, op: int, a: int, s1: int, s2: int, s3: int) -> None:
    """One event's contribution to the batch's coefficients (mixed_one_pass._fused_batch).
    Channel 0's update takes none (it gains ``n * cnt``), so slot 0 is never written."""

    def add(kind: str, slot: int, value: str) -> None:
        if slot > 0:
            w(f"c{v}_{kind}{slot} += {value}")

    if op == OP_CNT:
        add("i", s1, "U1")  # (s1 < 0: approximate, no modular channel -- channels.channel_layout)
        add("f", s2, "1.0")
        return
    w(f"if a_valid[{a}, r]:")
    with w.block():
        if op == OP_NN:
            add("i", s1, "U1")
            add("f", s2, "1.0")
        elif op == OP_SUM_INT:
            w(f"x = a_int[{a}, r]")
            add("i", s1, "np.uint64(x)")
            add("f", s2, "np.float64(x)")
            add("f", s3, "abs(np.float64(x))")  # (s3 < 0: never negative, the bound is the sum)
        elif op == OP_SUM_FLOAT:
            w(f"xf = a_flt[{a}, r]")
            w("if not np.isfinite(xf):  # only lanes with trends may take it (inf * 0): the generic kernel")
            with w.block():
                w("failed = True")
                w("break")
            add("f", s2, "xf")
            add("f", s3, "abs(xf)")
        else:  # pragma: no cover - the ring takes no MIN/MAX (sliding._run_mixed)
            raise AssertionError(f"op {op} in a ring kernel")


def _update(w: Any, s: Any, v: int, li: dict, lf: dict, refs: dict | None = None) -> None:
    """Variable ``v``'s lanes after a batch of ``n`` of its events with the same predecessor
    mask: the batch's trends per lane are ``cnt`` (its predecessors' counts, plus a start in
    the current pane's lane), channel 0 gains ``n * cnt``, every other channel ``k`` becomes
    ``keep * own + n * (the other sources' k) + coef_k * cnt`` with ``keep = n + 1`` if ``v``
    follows itself here, else 1 -- exact modulo 2**64 in the integer channels.  ``refs``:
    where to read some source's lanes instead of its lane vector (``{(u, kind, k): ref}``)."""
    refs = refs or {}
    preds = list(s.preds[v])
    checked = {u for u in preds if (u, v) in s.pair_checks}
    for u in checked:  # (mask: v's block of pair bits, its k-th predecessor at bit k)
        w(f"on{u} = (mask >> np.uint64({sorted(preds).index(u)})) & U1")
        w(f"on{u}_f = np.float64(on{u})")
    own = v in preds
    if own:
        w(f"keep_u = U1 + nu * on{v}" if v in checked else "keep_u = U1 + nu")
        w(f"keep_f = 1.0 + nf * on{v}_f" if v in checked else "keep_f = 1.0 + nf")
    else:
        w("keep_u = U1")
        w("keep_f = 1.0")
    start = v in s.start

    def source(u: int, kind: str, k: int) -> str:
        ref = refs.get((u, kind, k), f"s{u}_{kind}{k}[ln]")
        if u in checked:
            return f"on{u}{'_f' if kind == 'f' else ''} * {ref}"
        return ref

    def count(kind: str) -> str:
        terms = [source(u, kind, 0) for u in preds if 0 in (li if kind == "i" else lf)[u]]
        if start:
            terms.append("(U1 if ln == slot else U0)" if kind == "i" else "(1.0 if ln == slot else 0.0)")
        return " + ".join(terms) if terms else ("U0" if kind == "i" else "0.0")

    # All loads of a lane before its stores: a store between them (to an array LLVM cannot
    # tell apart from the next load's) keeps the loop from vectorising.
    w("for ln in range(lanes):")
    with w.block():
        stores = []
        floats = []
        for kind, live in (("i", li), ("f", lf)):
            if not live[v]:
                continue
            w(f"cnt_{kind} = {count(kind)}")
            n_scalar = "nu" if kind == "i" else "nf"
            keep = "keep_u" if kind == "i" else "keep_f"
            for k in live[v]:
                new = f"new_{kind}{k}"
                if k == 0:
                    w(f"{new} = s{v}_{kind}0[ln] + {n_scalar} * cnt_{kind}")
                else:
                    others = [source(u, kind, k) for u in preds if u != v and k in live[u]]
                    flow = f" + {n_scalar} * ({' + '.join(others)})" if others else ""
                    w(f"{new} = {keep} * s{v}_{kind}{k}[ln]{flow} + c{v}_{kind}{k} * cnt_{kind}")
                if kind == "f":
                    floats.append(new)
                stores.append(f"s{v}_{kind}{k}[ln] = {new}")
        if floats:
            # One test for the lane's float channels: their absolute values' sum passes
            # the bound whenever one of them does (so the run stops no later than the
            # generic kernel, which then runs the call: the same rows), in one comparison
            # instead of one per channel (q3's loading 17.9 -> 16.7 ms per 200k rows).
            w(f"over |= ({' + '.join(f'abs({x})' for x in floats)}) > rescale_above")
        for line in stores:
            w(line)


def write_ring_saving(w: Any, s: Any) -> None:
    """Append ``ring_saving`` (and its loop ``ring_saving_loop``) for shape ``s`` (with
    ``saves`` and ``live``) to writer ``w``: ``ring_saving(times, plays, pair_ok, a_int,
    a_flt, a_valid, rows, pair_flags, live_i, live_f, h_rank, h_valid, q_a, q_b, q_eq,
    g_valid, win_seg, win_k, win_lo, win_hi, slide, lanes, max_batch, max_span, redo, ci,
    cf, cpane)`` -- :func:`mixed_one_pass.run_mixed_ring`'s arguments of the same names (of its
    pair arrays, the one pair's), under ``SHARE_SAVE``.  Its windows' channels are not
    written: a representative's windows are never read."""
    v, flags, tree_i, tree_f = s.saves
    assert s.mode == 0 and s.live is not None and s.preds[v] == (v,) and v in s.start
    live_i, live_f = s.live[0][v], s.live[1][v]
    trees = [t for t, bit in enumerate((USE_PREFIX, USE_SUFFIX, USE_EQUAL)) if flags & bit]
    nti, ntf = len(tree_i), len(tree_f)  # (no tree channel of a kind: nothing to allocate, or zero)
    args = ("times, plays, pair_ok, a_int, a_flt, a_valid, rows, pair_flags, live_i, live_f, h_rank, h_valid, "
            "q_a, q_b, q_eq, g_valid, win_seg, win_k, win_lo, win_hi, slide, lanes")
    scratch = ("rank_buf, rank_pos, lr, la, lb, leq, m_loc, vals, tmp_k, tmp_t, count, ti, tf, ts, vi, vf, vs, "
               "bi, bf, bev, tot_i, tot_f, lane_age")
    w("@njit(cache=True, fastmath=False)")
    w(f"def ring_saving({args}, max_batch, max_span, redo, ci, cf, cpane):")
    with w.block():
        w(f"block = {RANK_BLOCK_SPANS} * max_span  # as mixed_one_pass.run_mixed_ring")
        w("rank_buf, rank_pos, lr, la, lb, leq, m_loc, vals, tmp_k, tmp_t, count = _rank_buffers(1, block)")
        # Uninitialised: _rebuild empties a used tree's nodes (and their panes) up to the
        # block's rank count before any walk reads them, a stored vector is read only where
        # ``vs`` (emptied per segment) marks it written.  (Zeroed, the trees of all three
        # kinds were a ~1.6 MB memset per call: 3 of q3's ~64 ms.)
        w(f"ti = np.empty((1, 3, block + 1, {nti}, lanes), np.uint64)")
        w(f"tf = np.empty((1, 3, block + 1, {ntf}, lanes), np.float64)")
        w("ts = np.empty((1, 3, block + 1), np.int64)")
        w(f"vi = np.empty((1, block, {nti}, lanes), np.uint64)")
        w(f"vf = np.empty((1, block, {ntf}, lanes), np.float64)")
        w("vs = np.zeros((1, block), np.bool_)")
        w(f"bi = np.zeros((max_batch, {max(1, s.n_i)}, lanes), np.uint64)")
        w(f"bf = np.zeros((max_batch, {max(1, s.n_f)}, lanes), np.float64)")
        w("bev = np.zeros(max_batch, np.int64)")
        w(f"tot_i = np.zeros(({max(1, s.n_i)}, lanes), np.uint64)")
        w(f"tot_f = np.zeros(({max(1, s.n_f)}, lanes), np.float64)")
        w("lane_age = np.full(lanes + 1, -1, np.int64)  # (mixed_one_pass._lane_ages)")
        w(f"ring_saving_loop({args}, redo, ci, cf, cpane, {scratch})")
    w()
    w(f"@njit(cache=True, fastmath=False{NO_REFCOUNTS_SOURCE})")
    w(f"def ring_saving_loop({args}, redo, ci, cf, cpane, {scratch}):")
    with w.block():
        w(f"rescale_above = {float(2.0**600)!r}")
        w("n_pos = plays.shape[0]")
        w("block = vs.shape[1]")
        w("n_win = win_lo.shape[0]")
        w("w = 0")
        w("while w < n_win:")
        with w.block():
            _open_segment(w)
            _empty_totals(w, live_i, live_f, ":")
            w("for d in range(block):")
            with w.block():
                w("vs[0, d] = False")
            w("blo = lo")
            w("bhi = min(n_pos, lo + block)")
            w("cur = times[lo] // slide if lo < hi else 0  # the ring holds panes cur - lanes + 1 .. cur")
            _rank(w, "0", "cur")
            w("live_lo = lo  # first position of a live pane")
            w("failed = False")
            w("emit = w")
            w("i = lo")
            w("while True:")
            with w.block():
                w("pane = times[i] // slide if i < hi else win_k[w2 - 1] + lanes")
                w("# Windows that end before this pane: the ring moves to their last pane (none is read).")
                _windows_before_pane(w, lambda first, last: _clear_total_panes(w, live_i, live_f, first, last),
                                     lambda: None)
                w("if i >= hi or emit >= w2:")
                with w.block():
                    w("break")
                w("if pane > cur:")
                with w.block():
                    _clear_total_panes(w, live_i, live_f, "cur + 1 - lanes", "pane - lanes")
                    w("cur = pane")
                w("while times[live_lo] // slide <= cur - lanes:")
                with w.block():
                    w("live_lo += 1")
                _batch_end(w)
                w("if j > bhi:")
                with w.block():
                    w("# The events leave the rank block: a new one from the oldest live pane.")
                    w("n_live = i - live_lo")
                    w("_shift_stored(vi, vf, vs, 1, live_lo - blo, n_live, times, live_lo, slide, cur, lanes, "
                      "live_i, live_f)")
                    w("blo = live_lo")
                    w("bhi = min(n_pos, blo + block)")
                    _rank(w, "n_live", "cur")
                    w("if j > bhi:  # max_span was not a bound after all: leave these windows to the caller")
                    with w.block():
                        w("failed = True")
                        w("break")
                w("slot = cur % lanes")
                w("_lane_ages(lane_age, cur, lanes)")
                w("m = m_loc[0]")
                w("nb = 0")
                w("for e in range(i, j):")
                with w.block():
                    w(f"if plays[e] & B{v} == U0:")
                    with w.block():
                        w("continue")
                    w("d = e - blo")
                    _row(w, s, v, live_i, live_f, tree_i, tree_f, trees)
                    w("bev[nb] = e")
                    w("nb += 1")
                w("over = False")
                w("for k in range(nb):")
                with w.block():
                    _commit(w, live_i, live_f, tree_i, tree_f, trees)
                w("if over:")
                with w.block():
                    w("failed = True")
                    w("break")
                w("# The batch's totals, read at its last position.")
                for kind, live, cache in (("i", live_i, "ci"), ("f", live_f, "cf")):
                    for q, k in enumerate(live):
                        _over_lanes(w, f"{cache}[j - 1, {q}, ln] = tot_{kind}[{k}, ln]")
                w("cpane[j - 1] = cur")
                w("i = j")
            _close_segment(w)
    w()


def _over_lanes(w: Any, *lines: str) -> None:
    """``lines`` in a loop over the lanes (``ln``)."""
    w("for ln in range(lanes):")
    with w.block():
        for line in lines:
            w(line)


def _rank(w: Any, n_live: str, cur: str) -> None:
    """The block's ranks and the trees rebuilt from its first ``n_live`` stored vectors."""
    w("m_loc[0] = _window_ranks(0, pair_flags[0], blo, bhi, plays, rows, h_rank, h_valid, q_a, q_b, q_eq, "
      "g_valid, rank_buf, rank_pos, lr, la, lb, leq, vals, tmp_k, tmp_t, count)")
    w(f"_rebuild(ti, tf, ts, vi, vf, vs, m_loc, lr, pair_flags, live_i, live_f, lanes, {n_live}, {cur})")


def _empty_totals(w: Any, live_i: tuple, live_f: tuple, at: str) -> None:
    for k in live_i:
        w(f"tot_i[{k}, {at}] = U0")
    for k in live_f:
        w(f"tot_f[{k}, {at}] = 0.0")


def _clear_total_panes(w: Any, live_i: tuple, live_f: tuple, first: str, last: str) -> None:
    _clear_panes(w, first, last, lambda at: _empty_totals(w, live_i, live_f, at))


def _clear_panes(w: Any, first: str, last: str, empty: Any) -> None:
    """Empty the ring slots of panes ``first..last`` (all if that is ``lanes`` or more), as
    mixed_one_pass._clear_slots; ``empty(at)`` writes the emptying of element(s) ``at``."""
    w(f"n_clear = ({last}) - ({first}) + 1")
    w("if n_clear >= lanes:")
    with w.block():
        empty(":")
    w("else:")
    with w.block():
        w(f"for q in range({first}, ({first}) + n_clear):")
        with w.block():
            w("ln = q % lanes")
            empty("ln")


def _tree_walk(w: Any, t: int, tree_i: tuple, tree_f: tuple, step: str, line: Any, insert: bool) -> None:
    """The body of a walk over tree ``t``'s nodes from ``a``: ``line(kind, c, k, lane)`` over
    the lanes for each tree channel ``c`` (batch channel ``k``), with ``lane`` the node's
    lane read as of pane ``cur`` -- zero where its pane expired since the node's last insert
    (``lane_age[ln] < n_exp``: the slots of panes ``ts + 1 .. cur``) -- then the ``step``
    to the next node, or none on the equality tree (node ``a`` alone).  An ``insert``
    writes every lane (so the expired ones become zero plus the row's) and stamps the node
    with ``cur``.

    As the generic kernel's walks (mixed_one_pass._tree_query, _tree_insert; see there): the
    expired lanes were emptied before in a branch per node and loops of varying length (big
    nodes are current, small ones mostly stale, by many panes) -- q3's representatives' run
    took 61 ms per 200k rows that way, 49 masked (emptying only the expired lanes around a
    plain loop took 79: they are many).  A query reads a stale node without writing it
    back; the sums are the same (a masked lane adds 0.0, as an emptied one did)."""
    with w.block():
        w(f"n_exp = _expired(ts, 0, {t}, a, cur, lanes)")
        if insert:
            w(f"ts[0, {t}, a] = cur")
        for kind, tree in (("i", tree_i), ("f", tree_f)):
            zero = "U0" if kind == "i" else "0.0"
            for c, k in enumerate(tree):
                # (Loaded before the choice: a load under the condition kept the loop from
                # vectorising -- 55 against 49 ms.)
                _over_lanes(w, f"node_{kind} = t{kind}[0, {t}, a, {c}, ln]",
                            line(kind, c, k, f"({zero} if lane_age[ln] < n_exp else node_{kind})"))
        w("break" if t == 2 else step)


def _row(w: Any, s: Any, v: int, live_i: tuple, live_f: tuple, tree_i: tuple, tree_f: tuple,
         trees: list) -> None:
    """Batch row ``nb`` of event ``e``: a start in the current pane's lane, plus the pair's
    tree queries if its check passes, plus V's contributions (the generic kernel's order)."""
    for k in live_i:
        _over_lanes(w, f"bi[nb, {k}, ln] = U0")
    for k in live_f:
        _over_lanes(w, f"bf[nb, {k}, ln] = 0.0")
    if 0 in live_i:
        w("bi[nb, 0, slot] = U1")
    w("bf[nb, 0, slot] = 1.0")
    # (The pair's bit is read whether or not a predicate checks it, as the generic kernel does.)
    own_bit = edge_bits(s.preds)[(v, v)]
    own_ok = f"(pair_ok[e] >> np.uint64({own_bit})) & U1" if own_bit < 64 else "True"
    w(f"if {own_ok} and g_valid[0, rows[e]]:")
    with w.block():
        for t in trees:
            if t == 0:
                w("a = la[0, d]")
            elif t == 1:
                w("a = m - lb[0, d]")
            else:
                w("a = leq[0, d] + 1 if leq[0, d] >= 0 else 0")
            w("while a > 0:")
            _tree_walk(w, t, tree_i, tree_f, "a -= a & (-a)",
                       lambda kind, c, k, lane: f"b{kind}[nb, {k}, ln] += {lane}", insert=False)
    ops = [op for op in s.ops if op[0] == v]
    if ops:
        w("r = rows[e]")
    for (_var, op, a, s1, s2, s3) in ops:
        _contribution(w, op, a, s1, s2, s3)


def _contribution(w: Any, op: int, a: int, s1: int, s2: int, s3: int) -> None:
    """One operation's contribution to row ``nb`` over every lane (mixed_one_pass._contribute_ring)."""
    def lanes_loop(line: str) -> None:
        _over_lanes(w, line)

    if op == OP_CNT or op == OP_NN:
        if op == OP_NN:
            w(f"if a_valid[{a}, r]:")
            w.depth += 1
        if s1 >= 0:
            lanes_loop(f"bi[nb, {s1}, ln] += bi[nb, 0, ln]")
        lanes_loop(f"bf[nb, {s2}, ln] += bf[nb, 0, ln]")
        if op == OP_NN:
            w.depth -= 1
        return
    w(f"if a_valid[{a}, r]:")
    with w.block():
        if op == OP_SUM_INT:
            w(f"x = a_int[{a}, r]")
            w("xu = np.uint64(x)")
            w("xf = np.float64(x)")
            lanes_loop(f"bi[nb, {s1}, ln] += xu * bi[nb, 0, ln]")
            lanes_loop(f"bf[nb, {s2}, ln] += xf * bf[nb, 0, ln]")
            if s3 >= 0:
                lanes_loop(f"bf[nb, {s3}, ln] += abs(xf) * bf[nb, 0, ln]")
        elif op == OP_SUM_FLOAT:
            w(f"xf = a_flt[{a}, r]")
            w("ax = abs(xf)")
            w("if np.isfinite(xf):")
            with w.block():
                lanes_loop(f"bf[nb, {s2}, ln] += xf * bf[nb, 0, ln]")
                if s3 >= 0:
                    lanes_loop(f"bf[nb, {s3}, ln] += ax * bf[nb, 0, ln]")
            w("else:  # only the lanes with trends take it (inf * 0)")
            with w.block():
                w("for ln in range(lanes):")
                with w.block():
                    w("if bf[nb, 0, ln] > 0.0:")
                    with w.block():
                        w(f"bf[nb, {s2}, ln] += xf * bf[nb, 0, ln]")
                        if s3 >= 0:
                            w(f"bf[nb, {s3}, ln] += ax * bf[nb, 0, ln]")
        else:  # pragma: no cover - the ring takes no MIN/MAX (sliding._run_mixed)
            raise AssertionError(f"op {op} in a ring kernel")


def _commit(w: Any, live_i: tuple, live_f: tuple, tree_i: tuple, tree_f: tuple, trees: list) -> None:
    """Row ``k`` (event ``bev[k]``) into the totals (watching the floats against 2**600), then,
    if the event has the pair's value, its stored vector and the tree inserts."""
    w("e = bev[k]")
    for q in live_i:
        _over_lanes(w, f"tot_i[{q}, ln] += bi[k, {q}, ln]")
    for q in live_f:
        _over_lanes(w, f"x = tot_f[{q}, ln] + bf[k, {q}, ln]", f"tot_f[{q}, ln] = x",
                    "over |= (x > rescale_above) | (x < -rescale_above)")
    w("if not h_valid[0, rows[e]]:")
    with w.block():
        w("continue")
    w("d = e - blo")
    w("r = lr[0, d]")
    w("vs[0, d] = True")
    for kind, tree in (("i", tree_i), ("f", tree_f)):
        for c, q in enumerate(tree):
            _over_lanes(w, f"v{kind}[0, d, {c}, ln] = b{kind}[k, {q}, ln]")
    for t in trees:
        w("a = m - r" if t == 1 else "a = r + 1")
        w("while a <= m:")
        _tree_walk(w, t, tree_i, tree_f, "a += a & (-a)",
                   lambda kind, c, q, lane: f"t{kind}[0, {t}, a, {c}, ln] = {lane} + b{kind}[k, {q}, ln]",
                   insert=True)
