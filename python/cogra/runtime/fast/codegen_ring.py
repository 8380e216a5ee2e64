"""The ring kernel's loading run, generated per query shape: ``ring_loading``.

Sliding windows with a shared kept variable (:func:`shared_rows.run_ring`) run every
sub-stream without that variable's Fenwick trees: before each batch its lane totals are
loaded from the representatives' cache, and every other variable is type-grained -- its
batch is one update of its lane vectors (:func:`mixed_ring._fused_batch`).  The generic
ring kernel (:func:`mixed_ring.run_mixed_ring`) does that through loops over variables,
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
"""

from __future__ import annotations

from typing import Any

from cogra.runtime.fast.channels import OP_CNT, OP_NN, OP_SUM_FLOAT, OP_SUM_INT


def write_ring_loading(w: Any, s: Any) -> None:
    """Append ``ring_loading`` for shape ``s`` (with ``loads`` and ``live``) to writer ``w``:
    ``ring_loading(times, plays, pair_ok, a_int, a_flt, a_valid, rows, win_seg, win_k,
    win_lo, win_hi, slide, lanes, out_i, out_f, out_e, out_r, redo, take_at, ci, cf,
    cpane)`` -- :func:`mixed_ring.run_mixed_ring`'s arguments of the same names, under
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
        """Empty the computed states' slots of panes ``first..last`` (all if that is
        ``lanes`` or more), as mixed_ring._clear_slots."""
        w(f"n_clear = ({last}) - ({first}) + 1")
        w("if n_clear >= lanes:")
        with w.block():
            _empty(w, states, ":")
        w("else:")
        with w.block():
            w(f"for q in range({first}, ({first}) + n_clear):")
            with w.block():
                w("ln = q % lanes")
                _empty(w, states, "ln")

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
                w("j = i + 1")
                w("while j < hi and times[j] == times[i]:")
                with w.block():
                    w("j += 1")
                _load(w, lv, li[lv], lf[lv], loaded)
                _batch(w, s, lv, computed, li, lf)
                w("if failed:")
                with w.block():
                    w("break")
                w("i = j")
            w("if failed:")
            with w.block():
                w("for q in range(emit, w2):")
                with w.block():
                    w("redo[q] = True")
            w("w = w2")
    w()


def _empty(w: Any, names: list, at: str) -> None:
    """Empty element(s) ``at`` (``":"``: all lanes) of the lane vectors ``names``
    (``s{v}_i{k}`` integer, ``s{v}_f{k}`` float)."""
    for name in names:
        w(f"{name}[{at}] = {'U0' if '_i' in name else '0.0'}")


def _emit_windows(w: Any, s: Any, li: dict, lf: dict, clear_panes: Any) -> None:
    """Read the windows that end before ``pane``, each with the ring at its last pane: the
    final variables' lanes summed, variable by variable (as the generic kernel does)."""
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
        w("emit += 1")


def _load(w: Any, lv: int, li: tuple, lf: tuple, loaded: list) -> None:
    """The loaded variable's lanes := cache row ``take_at[i]`` (zero if none), with the lanes
    of panes that expired since that row's pane emptied (mixed_ring._load_lanes)."""
    w("c = take_at[i]")
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


def _batch(w: Any, s: Any, lv: int, computed: list, li: dict, lf: dict) -> None:
    """The batch ``i..j``: which variable its events play (one, with one predecessor mask,
    else ``failed``), their count ``n`` and contributions (coefficients per channel), then
    that variable's lanes updated in one loop (mixed_ring._fused_batch's algebra)."""
    nv = s.nv
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
        w(f"var = {computed[0]}")
        for v in computed[1:]:
            w(f"if bits == B{v}:")
            with w.block():
                w(f"var = {v}")
        w(f"m = (pair_ok[e] >> (np.uint64(var) * np.uint64({nv}))) & np.uint64({(1 << nv) - 1})")
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
    for v in computed:
        w(f"if v == {v}:")
        with w.block():
            _update(w, s, v, li, lf)
    w("if over:")
    with w.block():
        w("failed = True")
        w("break")


def _coefficient(w: Any, v: int, op: int, a: int, s1: int, s2: int, s3: int) -> None:
    """One event's contribution to the batch's coefficients (mixed_ring._fused_batch).
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


def _update(w: Any, s: Any, v: int, li: dict, lf: dict) -> None:
    """Variable ``v``'s lanes after a batch of ``n`` of its events with the same predecessor
    mask: the batch's trends per lane are ``cnt`` (its predecessors' counts, plus a start in
    the current pane's lane), channel 0 gains ``n * cnt``, every other channel ``k`` becomes
    ``keep * own + n * (the other sources' k) + coef_k * cnt`` with ``keep = n + 1`` if ``v``
    follows itself here, else 1 -- exact modulo 2**64 in the integer channels."""
    preds = list(s.preds[v])
    checked = {u for u in preds if (u, v) in s.pair_checks}
    for u in checked:
        w(f"on{u} = (mask >> np.uint64({u})) & U1")
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
        ref = f"s{u}_{kind}{k}[ln]"
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
                    w(f"over |= abs({new}) > rescale_above")
                stores.append(f"s{v}_{kind}{k}[ln] = {new}")
        for line in stores:
            w(line)
