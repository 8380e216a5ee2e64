"""Specialised kernels: the generic kernel's loop, generated per query shape.

The generic kernel (:mod:`cogra.runtime.fast.kernels`) keeps states in small arrays
and interprets the aggregate program per event; that costs most of its time.  For a
given *shape* -- semantics, predTypes, start/final variables, the slot program -- this
module writes the same loop with every state slot a local scalar, every loop over
variables and slots unrolled, so LLVM keeps the states in registers.

Two facts keep the generated code small: events of one timestamp all read the state
from before their batch, so each batch only needs one *delta* per variable (summed
over the batch's events); and the rescaling check only watches the trend counts,
against a bound that the caller derives from the largest attribute magnitude and the
longest window.

Sources are written to ``$COGRA_CACHE`` (default ``~/.cache/cogra/kernels``) and
imported from there, so numba's on-disk cache works across processes: compiling a
shape costs about a second once.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

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

_LOADED: dict[str, object] = {}


@dataclass(frozen=True)
class Shape:
    mode: int  # 0 any, 1 next, 2 contiguous
    nv: int
    preds: tuple[tuple[int, ...], ...]
    start: tuple[int, ...]
    final: tuple[int, ...]
    ops: tuple[tuple[int, int, int, int, int, int], ...]  # (var, op, attr, s1, s2, s3)
    n_i: int
    n_f: int
    x_is_min: tuple[bool, ...]
    pair_checks: tuple[tuple[int, int], ...]  # (u, v) pairs gated by pair_ok bits

    @property
    def key(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()[:20]


def cache_dir() -> Path:
    root = os.environ.get("COGRA_CACHE") or os.path.join(Path.home(), ".cache", "cogra")
    path = Path(root) / "kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _module_for(shape: Shape):
    """The generated module of a shape (written and imported once)."""
    key = shape.key
    if key in _LOADED:
        return _LOADED[key]
    path = cache_dir() / f"cogra_kernel_{key}.py"
    source = generate(shape)
    if not path.exists() or path.read_text() != source:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    name = f"cogra_kernel_{key}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    _LOADED[key] = module
    return module


REUSE_COMPILED = True
"""Whether :func:`is_compiled` may report kernels compiled earlier (tests turn it off, so
that which kernel runs does not depend on the machine's cache)."""


def is_compiled(shape: Shape, function: str) -> bool:
    """Whether ``function`` of the shape's generated module is compiled already: in this
    process, or in numba's on-disk cache (``__pycache__`` beside the source).  Loading it
    then costs milliseconds instead of seconds of compiling, so the engine uses generated
    kernels for inputs of any size once they exist (e.g. a Spark worker's 131k-row chunks
    after a full-size run compiled them)."""
    if not REUSE_COMPILED:
        return False
    key = shape.key
    module = _LOADED.get(key)
    if module is not None and getattr(module, function).signatures:
        return True
    return any((cache_dir() / "__pycache__").glob(f"cogra_kernel_{key}.{function}-*.nbi"))


def kernel_for(shape: Shape) -> Callable:
    """The compiled kernel of a shape (generated, written and imported once)."""
    return _module_for(shape).kernel


def kernel_from_for(shape: Shape) -> Callable:
    """The shape's kernel that continues windows from carried states (streaming):
    ``kernel_from(times, plays, pair_ok, a_int, a_flt, a_valid, a_key, rows, win_lo, win_hi,
    st_i, st_f, st_x, st_r, st_e)``, as :func:`kernels.run_windows_from`."""
    return _module_for(shape).kernel_from


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, line: str = "") -> None:
        self.lines.append("    " * self.depth + line if line else "")

    def block(self) -> "_Indent":
        return _Indent(self)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class _Indent:
    def __init__(self, w: _Writer) -> None:
        self.w = w

    def __enter__(self) -> None:
        self.w.depth += 1

    def __exit__(self, *exc: object) -> None:
        self.w.depth -= 1


def generate(shape: Shape) -> str:
    s = shape
    nv, n_i, n_f, n_x = s.nv, s.n_i, s.n_f, len(s.x_is_min)
    w = _Writer()
    w('"""Generated by cogra.runtime.fast.codegen -- do not edit."""')
    w("import math")
    w("import numpy as np")
    w("from numba import njit")
    w("U0 = np.uint64(0)")
    w("U1 = np.uint64(1)")
    w(f"XMIN = np.int64({MIN_KEY_IDENTITY})")
    w(f"XMAX = np.int64({MAX_KEY_IDENTITY})")
    for b in range(64):
        w(f"B{b} = np.uint64({1 << b})")
    w()

    def xid(k: int) -> str:
        return "XMIN" if s.x_is_min[k] else "XMAX"

    def slots(prefix: str) -> list[tuple[str, str]]:
        out = [(f"{prefix}_i{k}", "U0") for k in range(n_i)]
        out += [(f"{prefix}_f{k}", "0.0") for k in range(n_f)]
        out += [(f"{prefix}_x{k}", xid(k)) for k in range(n_x)]
        out += [(f"{prefix}_r", "False")]
        return out

    def reset(prefix: str) -> None:
        for name, init in slots(prefix):
            w(f"{name} = {init}")

    def add(dst: str, src: str) -> None:
        for k in range(n_i):
            w(f"{dst}_i{k} += {src}_i{k}")
        for k in range(n_f):
            w(f"{dst}_f{k} += {src}_f{k}")
        for k in range(n_x):
            cmp = "<" if s.x_is_min[k] else ">"
            w(f"if {src}_x{k} {cmp} {dst}_x{k}:")
            with w.block():
                w(f"{dst}_x{k} = {src}_x{k}")
        w(f"{dst}_r = True")

    def transfer(arrays: str, at: str, to_arrays: bool) -> None:
        """Copy the states s0.., fin between scalars and rows ``[at, row]`` of the four
        arrays named ``arrays`` (``"st"``: st_i, st_f, st_x, st_r; else its i/f/x/r)."""
        a_i, a_f, a_x, a_r = (f"{arrays}_{c}" if arrays == "st" else f"{arrays[0]}{c}"
                              for c in "ifxr")
        for prefix, row in [(f"s{v}", v) for v in range(nv)] + [("fin", nv)]:
            pairs = [(f"{prefix}_i{k}", f"{a_i}[{at}, {row}, {k}]") for k in range(n_i)]
            pairs += [(f"{prefix}_f{k}", f"{a_f}[{at}, {row}, {k}]") for k in range(n_f)]
            pairs += [(f"{prefix}_x{k}", f"{a_x}[{at}, {row}, {k}]") for k in range(n_x)]
            pairs += [(f"{prefix}_r", f"{a_r}[{at}, {row}]")]
            for scalar, cell in pairs:
                w(f"{cell} = {scalar}" if to_arrays else f"{scalar} = {cell}")

    def scale_floats(prefix: str) -> None:
        for k in range(n_f):
            w(f"{prefix}_f{k} *= scale")

    finals = list(s.final)

    def window_loop(all_floats_watch: bool, lo: str = "win_lo[w]", hi: str = "win_hi[w]",
                    starts: str = "True") -> None:
        """The batches of events ``lo`` .. ``hi`` applied to the states s*, fin; trends
        start only where ``starts`` holds (the pane maps' basis states start none)."""
        w(f"i = {lo}")
        w(f"hi = {hi}")
        w("while i < hi:")
        with w.block():
            w("t = times[i]")
            for v in range(nv):
                reset(f"d{v}")
            if s.mode == 1:
                w("ext = U0")
            w("j = i")
            w("while j < hi and times[j] == t:")
            with w.block():
                w("bits = plays[j]")
                w("r = rows[j]")
                if s.pair_checks:
                    w("okb = pair_ok[j]")
                for v in range(nv):
                    w(f"if bits & B{v}:")
                    with w.block():
                        reset("c")
                        if v in s.start:
                            w(f"if {starts}:")
                            with w.block():
                                w("c_i0 = U1")
                                w("c_f0 = unit")
                                w("c_r = True")
                        for u in s.preds[v]:
                            cond = f"okb & B{v * nv + u}" if (u, v) in s.pair_checks else "True"
                            w(f"if {cond}:")
                            with w.block():
                                if s.mode == 1:
                                    w(f"ext |= B{u}")
                                w(f"if s{u}_r:")
                                with w.block():
                                    add("c", f"s{u}")
                        w("if c_r:")
                        with w.block():
                            for (var, op, a, s1, s2, s3) in s.ops:
                                if var != v:
                                    continue
                                if op == OP_CNT:
                                    w(f"c_i{s1} += c_i0")
                                    w(f"c_f{s2} += c_f0")
                                    continue
                                w(f"if a_valid[{a}, r]:")
                                with w.block():
                                    if op == OP_NN:
                                        w(f"c_i{s1} += c_i0")
                                        w(f"c_f{s2} += c_f0")
                                    elif op == OP_SUM_INT:
                                        w(f"x = a_int[{a}, r]")
                                        w(f"c_i{s1} += np.uint64(x) * c_i0")
                                        w(f"c_f{s2} += np.float64(x) * c_f0")
                                        w(f"c_f{s3} += abs(np.float64(x)) * c_f0")
                                    elif op == OP_SUM_FLOAT:
                                        w(f"c_f{s2} += a_flt[{a}, r] * c_f0")
                                        w(f"c_f{s3} += abs(a_flt[{a}, r]) * c_f0")
                                    elif op in (OP_MIN, OP_MAX):
                                        cmp = "<" if op == OP_MIN else ">"
                                        w(f"if a_key[{a}, r] {cmp} c_x{s1}:")
                                        with w.block():
                                            w(f"c_x{s1} = a_key[{a}, r]")
                            add(f"d{v}", "c")
                w("j += 1")
            # apply the batch
            if s.mode == 2:
                for v in range(nv):
                    reset(f"s{v}")
            elif s.mode == 1:
                for u in range(nv):
                    w(f"if ext & B{u}:")
                    with w.block():
                        reset(f"s{u}")
            for v in range(nv):
                w(f"if d{v}_r:")
                with w.block():
                    add(f"s{v}", f"d{v}")
                    if s.mode != 0 and v in finals:
                        add("fin", f"d{v}")
            if all_floats_watch:
                # Streaming: a window's length is unknown, so every float slot is watched.
                watch = [f"abs(s{v}_f{k})" for v in range(nv) for k in range(n_f)]
                watch += [f"abs(fin_f{k})" for k in range(n_f)]
            else:
                watch = [f"s{v}_f0" for v in range(nv)] + (["fin_f0"] if s.mode != 0 else [])
            w(f"if max({', '.join(watch + ['0.0'])}) > rescale_above:")
            with w.block():
                w("scale = math.ldexp(1.0, -600)")
                for v in range(nv):
                    scale_floats(f"s{v}")
                scale_floats("fin")
                w("exponent += 600")
                w("unit = math.ldexp(1.0, -exponent)")
            w("i = j")

    w("@njit(cache=True, fastmath=False)")
    w("def kernel(times, plays, pair_ok, a_int, a_flt, a_valid, a_key, rows, win_lo, win_hi,")
    w("           rescale_above, out_i, out_f, out_x, out_e, out_r):")
    with w.block():
        w("for w in range(win_lo.shape[0]):")
        with w.block():
            for v in range(nv):
                reset(f"s{v}")
            reset("fin")
            w("exponent = 0")
            w("unit = 1.0")
            window_loop(False)
            if s.mode == 0:
                for v in finals:
                    w(f"if s{v}_r:")
                    with w.block():
                        add("fin", f"s{v}")
            for k in range(n_i):
                w(f"out_i[w, {k}] = fin_i{k}")
            for k in range(n_f):
                w(f"out_f[w, {k}] = fin_f{k}")
            for k in range(n_x):
                w(f"out_x[w, {k}] = fin_x{k}")
            w("out_e[w] = exponent")
            w("out_r[w] = fin_r")
    w()
    w("@njit(cache=True, fastmath=False)")
    w("def kernel_from(times, plays, pair_ok, a_int, a_flt, a_valid, a_key, rows, win_lo, win_hi,")
    w("                st_i, st_f, st_x, st_r, st_e):")
    with w.block():
        w(f"rescale_above = {float(2.0**600)!r}")
        w("for w in range(win_lo.shape[0]):")
        with w.block():
            transfer("st", "w", to_arrays=False)
            w("exponent = st_e[w]")
            w("unit = math.ldexp(1.0, -exponent)")
            window_loop(True)
            transfer("st", "w", to_arrays=True)
            w("st_e[w] = exponent")
    w()
    _sliding_functions(w, s, window_loop, transfer)
    return w.text()


def _sliding_functions(w: "_Writer", s: Shape, window_loop, transfer) -> None:
    """The sliding-window sharing kernel (:mod:`sliding_kernels`) for this shape: its
    driver ``run_sliding`` and ``_compose`` verbatim, with the two hot functions it calls
    -- ``_pane_map`` (the events of a pane applied to the ``nv + 1`` states of a map) and
    ``_apply`` (a map applied to a state) -- generated with every loop unrolled."""
    from cogra.runtime.fast import sliding_kernels

    nv, n_i, n_f, n_x = s.nv, s.n_i, s.n_f, len(s.x_is_min)
    w("from cogra.runtime.fast.kernels import _emit_window")
    w("from cogra.runtime.fast.sliding_kernels import _assign, _clear, _copy_map, _identity, _normalize")
    w()
    w("@njit(cache=True)")
    w("def _pane_map(mode, lo, hi, times, plays, pair_ok, nv, pred_ptr, pred_idx, start_bits,")
    w("              final_bits, prog, op_ptr, x_is_min, a_int, a_flt, a_valid, a_key, rows,")
    w("              mi, mf, mx, mr, me, bi, bf, bx, bvar):")
    with w.block():
        w(f"rescale_above = {float(2.0**600)!r}")
        w(f"_identity(mi, mf, mx, mr, {nv}, x_is_min)")
        w(f"for st in range({nv + 1}):")
        with w.block():
            w("me[st] = 0")
            w("live = st == 0" + "".join(f" or mr[st, {r}]" for r in range(nv)))
            w("if not live:")
            with w.block():
                w("continue  # a basis state whose trends all died stays dead")
            transfer("m", "st", to_arrays=False)
            w("exponent = 0")
            w("unit = 1.0")
            w("with_starts = st == 0")
            window_loop(True, lo="lo", hi="hi", starts="with_starts")
            transfer("m", "st", to_arrays=True)
            w("shift = _normalize(mf[st])")
            w("if shift < 0:")
            with w.block():
                w("return False")
            w("me[st] = exponent + shift")
        w("return True")
    w()
    w("@njit(cache=True)")
    w("def _apply(gi, gf, gx, gr, ge, si, sf, sx, sr, se, oi, of, ox, orr, affine, nv, x_is_min):")
    with w.block():
        w("eo = ge[0] if affine else 0")
        for r in range(nv):
            w(f"if sr[{r}] and se + ge[{r + 1}] > eo:")
            with w.block():
                w(f"eo = se + ge[{r + 1}]")
        w(f"if sr[{nv}] and se > eo:")
        with w.block():
            w("eo = se")
        w("a0 = math.ldexp(1.0, ge[0] - eo)")
        for q in range(nv + 1):
            w("if affine:")
            with w.block():
                for k in range(n_i):
                    w(f"oi[{q}, {k}] = gi[0, {q}, {k}]")
                for k in range(n_f):
                    w(f"of[{q}, {k}] = gf[0, {q}, {k}] * a0")
                for k in range(n_x):
                    w(f"ox[{q}, {k}] = gx[0, {q}, {k}]")
                w(f"orr[{q}] = gr[0, {q}]")
            w("else:")
            with w.block():
                for k in range(n_i):
                    w(f"oi[{q}, {k}] = U0")
                for k in range(n_f):
                    w(f"of[{q}, {k}] = 0.0")
                for k in range(n_x):
                    w(f"ox[{q}, {k}] = {'XMIN' if s.x_is_min[k] else 'XMAX'}")
                w(f"orr[{q}] = False")
            for r in range(nv):
                w(f"if sr[{r}]:")
                with w.block():
                    w(f"if gr[{r + 1}, {q}]:")
                    with w.block():
                        w(f"orr[{q}] = True")
                        w(f"c = si[{r}, 0]")
                        w(f"l0 = gi[{r + 1}, {q}, 0]")
                        w(f"oi[{q}, 0] += c * l0")
                        for k in range(1, n_i):
                            w(f"oi[{q}, {k}] += c * gi[{r + 1}, {q}, {k}] + si[{r}, {k}] * l0")
                        w(f"ar = math.ldexp(1.0, se + ge[{r + 1}] - eo)")
                        w(f"cf = sf[{r}, 0]")
                        w(f"m0 = gf[{r + 1}, {q}, 0]")
                        w(f"of[{q}, 0] += cf * m0 * ar")
                        for k in range(1, n_f):
                            w(f"of[{q}, {k}] += (cf * gf[{r + 1}, {q}, {k}] + sf[{r}, {k}] * m0) * ar")
                        for k in range(n_x):
                            cmp = "<" if s.x_is_min[k] else ">"
                            w(f"if sx[{r}, {k}] {cmp} ox[{q}, {k}]:")
                            with w.block():
                                w(f"ox[{q}, {k}] = sx[{r}, {k}]")
                    for k in range(n_x):
                        cmp = "<" if s.x_is_min[k] else ">"
                        w(f"if gx[{r + 1}, {q}, {k}] {cmp} ox[{q}, {k}]:")
                        with w.block():
                            w(f"ox[{q}, {k}] = gx[{r + 1}, {q}, {k}]")
        w(f"if sr[{nv}]:")
        with w.block():
            w("afin = math.ldexp(1.0, se - eo)")
            for k in range(n_i):
                w(f"oi[{nv}, {k}] += si[{nv}, {k}]")
            for k in range(n_f):
                w(f"of[{nv}, {k}] += sf[{nv}, {k}] * afin")
            for k in range(n_x):
                cmp = "<" if s.x_is_min[k] else ">"
                w(f"if sx[{nv}, {k}] {cmp} ox[{nv}, {k}]:")
                with w.block():
                    w(f"ox[{nv}, {k}] = sx[{nv}, {k}]")
            w(f"orr[{nv}] = True")
        w("shift = _normalize(of)")
        w("return -1 if shift < 0 else eo + shift")
    w()
    # From the module's file, not its attributes (tests may wrap those).
    source = Path(sliding_kernels.__file__).read_text()
    lines = source.split("\n")
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name in ("_compose", "run_sliding"):
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            w.lines.extend(lines[first - 1:node.end_lineno])
            w()


def sliding_for(shape: Shape) -> Callable:
    """The shape's sliding-window sharing kernel, with the signature of
    :func:`sliding_kernels.run_sliding`."""
    return _module_for(shape).run_sliding
