"""The kernels' channels to the result table, column by column.

A sliding query has hundreds of windows per event group, so the result has hundreds of
times the rows of the tumbling query.  Decoding, merging, finalising and typing each row
as Python objects (:func:`~cogra.runtime.compiled.channels.decode`,
:meth:`Layout.finalize`, :func:`~cogra.runtime.output.build_table`) costs ~20-40 µs per
row, far more than the kernel spends per window.  This module does the same work on
whole arrays:

1. windows without a finished trend are dropped; the others are keyed by (window
   start, output group) and sorted as ``build_table`` sorts;
2. every integer slot is decoded per window with the rules of
   :func:`channels.decode`, vectorised: exact where its bound proves the residue is the
   value, known to be huge where the approximation proves it, *undecided* otherwise;
3. windows of one key (sub-streams that differ only in keys not in GROUP-BY) are
   merged: exact values add exactly (as 32-bit limb pairs), huge ones as doubles,
   MIN/MAX keys take min/max;
4. each RETURN item becomes an Arrow array: COUNT and integer SUM as int64 (overflow ->
   NULL), SUM of doubles correctly rounded from the exact scaled integer, AVG as the
   correctly rounded quotient of exact sum and count (long double, certain except
   within a hair of a rounding midpoint) or of the approximations when they are huge,
   MIN/MAX from their keys -- the values the row path gives.

Steps 2-4 run compiled for the common cases (:mod:`common_cases`: exact values below
2**62, provably huge ones; one pass over the keys, 30-80 ns per row -- the kernel's rows
are read in output order, not in the order they were written -- instead of ~0.3 µs);
the keys it leaves take the numpy rules (:func:`numpy_item_columns`) on their windows
only.

A key with any undecided value goes through the row path (:meth:`Engine.state_of`:
decode, or re-run exactly in Python) and ``build_table``; its rows are merged into the
order.  Under ``on_overflow="error"`` an overflow makes :func:`result_table` return
None, and the engine's row path raises the error with the exact value's magnitude.

It applies to integral windows (integer or timestamp time; also no WITHIN) and
non-decimal aggregates whose sums the kernels hold exactly (no ``fsum`` channel).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cogra.runtime.arrow_arrays import pooled
from cogra.errors import DataError
from cogra.runtime.aggregates import MAX, MIN
from cogra.runtime.compiled.codegen import window_finish as gen
from cogra.runtime.compiled.finish import common_cases as fk
from cogra.runtime.compiled import scratch as reuse
from cogra.runtime.compiled.channels import (
    CANCELLATION_LIMIT,
    DOUBLE_EXACT,
    FITS_SIGNED,
    FITS_UNSIGNED,
    MAX_KEY_IDENTITY,
    MIN_KEY_IDENTITY,
    SPLIT_SHIFT,
    SURELY_TOO_BIG,
    TINY,
    KernelOut,
    INTEGER_KINDS,
    limb_weights,
    slot_limbs,
)
from cogra.runtime.output import build_table, order, overflow_error, table_schema

ENABLED = True
"""Tests switch this off to run the row path on the same inputs."""
COMPILED = True
"""Tests switch this off to run the numpy rules (:func:`numpy_item_columns`) on every key."""

def applies(engine: Any, driver: Any) -> bool:
    """Whether this module can finish the query's windows (given integral starts)."""
    if not ENABLED:
        return False
    schema = engine.table.schema
    for slot in engine.layout.slots:
        if slot.attribute and pa.types.is_decimal(schema.field(slot.attribute).type):
            return False
    return all(entry[0] != "fsum" for entry in driver.chan.slot_map)


# ---------------------------------------------------------------------------------------
# Keys and merge
# ---------------------------------------------------------------------------------------


class Keyed:
    """Reached windows grouped by output key, in output order.

    ``start``: the window start per key; ``gid``: the output group per key, an index of
    ``groups`` (the distinct output groups, in sort order).  Which windows a key merges:
    ``windows`` lists them by key, as the rows of the kernels' output they read; ``first``
    is each key's first entry there, and ``key_of`` each entry's key.

    Where every key holds one window (a sliding query's millions of rows), ``window_key``
    says which -- per window, in the kernels' order, its key or -1 -- and ``first``,
    ``key_of`` and ``windows`` are derived from it only if read (with ``row_first``, the
    rows' windows: :attr:`KernelOut.row_first`): the finish of one window per key reads
    none of them, and they were three fresh words per result row, page faults mostly.
    """

    def __init__(self, start: np.ndarray, gid: np.ndarray, groups: list[tuple], *,
                 first: np.ndarray | None = None, windows: np.ndarray | None = None,
                 key_of: np.ndarray | None = None, window_key: np.ndarray | None = None,
                 row_first: np.ndarray | None = None) -> None:
        if window_key is None and (first is None or windows is None or key_of is None):
            raise ValueError("keys need their windows, or a window each (window_key)")
        self.start, self.gid, self.groups = start, gid, groups
        self._first, self._windows, self._key_of = first, windows, key_of
        self.window_key = window_key
        """Per window, its key (-1: none), where every key holds one window; else None."""
        self.row_first = row_first

    @property
    def n_keys(self) -> int:
        return len(self.start)

    @property
    def first(self) -> np.ndarray:
        if self._first is None:
            self._first = np.arange(self.n_keys)
        return self._first

    @property
    def key_of(self) -> np.ndarray:
        if self._key_of is None:
            self._key_of = self.first  # a window per key
        return self._key_of

    @property
    def windows(self) -> np.ndarray:
        if self._windows is None:
            reached = np.flatnonzero(self.window_key >= 0)
            windows = np.empty(self.n_keys, np.int64)
            rows = reached if self.row_first is None else np.searchsorted(self.row_first, reached, side="right") - 1
            windows[self.window_key[reached]] = rows
            self._windows = windows
        return self._windows

    def subset(self, keys: np.ndarray) -> "Keyed":
        """The keys ``keys`` (ascending) with their windows, as a Keyed of its own."""
        ends = np.append(self.first, len(self.windows))
        lengths = ends[keys + 1] - ends[keys]
        first = np.cumsum(lengths) - lengths
        entries = np.repeat(ends[keys] - first, lengths) + np.arange(int(lengths.sum()))
        return Keyed(self.start[keys], self.gid[keys], self.groups, first=first, windows=self.windows[entries],
                     key_of=np.repeat(np.arange(len(keys)), lengths))

    def renumbered(self) -> "Keyed":
        """These keys reading rows ``0, 1, ...`` (their windows' rows, gathered in order)."""
        return Keyed(self.start, self.gid, self.groups, first=self.first, windows=np.arange(len(self.windows)),
                     key_of=self.key_of)


def keyed_windows(seg_groups: list[tuple], seg: np.ndarray, start: np.ndarray, out: KernelOut,
                  pool: dict | None = None) -> Keyed:
    """Window ``w`` belongs to segment ``seg[w]`` (output group ``seg_groups[seg[w]]``)
    and starts at ``start[w]``; its channels are in ``out`` (rows shared or not:
    :attr:`KernelOut.row_first`).  ``pool``: where the keys' windows and groups may be
    working arrays (:mod:`cogra.runtime.compiled.scratch`; the caller's to copy out of)."""
    distinct: dict[tuple, int] = {}
    seg_gid = np.fromiter((distinct.setdefault(g, len(distinct)) for g in seg_groups), np.int64,
                          len(seg_groups))
    groups = list(distinct)
    ranked = sorted(range(len(groups)), key=lambda i: tuple(order(v) for v in groups[i]))
    rank = np.empty(len(groups), np.int64)
    rank[ranked] = np.arange(len(groups))
    seg_rank = rank[seg_gid]  # per segment (few), not per window
    ordered_groups = [groups[i] for i in ranked]
    shared = out.row_first is not None
    n_windows = len(seg)
    if n_windows and len(groups):
        s, g = pooled(n_windows, np.int64), reuse.take(pool, "keys.group", (n_windows,), np.int64)
        window_key = reuse.take(pool, "keys.window_key", (n_windows,), np.int64)
        every = out.r.all()  # (then the sweep follows no rows: common_cases.keys_by_start_into)
        n = fk.keys_by_start_into(np.asarray(seg, np.int64), np.asarray(start, np.int64),
                                  EVERY_ROW if every else out.r, out.row_first if shared else NOT_SHARED,
                                  seg_rank, s, g, window_key)
        if n >= 0:  # every segment its own group, in walk order: a window per key, merged
            return Keyed(s[:n], g[:n], ordered_groups, window_key=window_key, row_first=out.row_first)
    row_of = out.rows_of_windows() if shared else None
    reached = np.flatnonzero(out.r if row_of is None else out.r[row_of])
    some_unreached = len(reached) < n_windows  # else no gathers by ``reached``
    if some_unreached:
        seg, start = seg[reached], start[reached]
    gid = seg_rank[seg] if len(groups) else np.zeros(0, np.int64)
    by_key = np.lexsort((gid, start))
    windows = reached[by_key] if some_unreached else by_key
    rows = windows if row_of is None else row_of[windows]
    s, g = start[by_key], gid[by_key]
    new = np.ones(len(windows), bool)
    new[1:] = (s[1:] != s[:-1]) | (g[1:] != g[:-1])
    if new.all():  # a window per key (sub-streams are the output groups): no gathers
        first = np.arange(len(windows))
        window_key = np.full(n_windows, -1, np.int64)
        window_key[windows] = first
        return Keyed(s, g, ordered_groups, first=first, windows=rows, key_of=first, window_key=window_key,
                     row_first=out.row_first)
    first = np.flatnonzero(new)
    return Keyed(s[first], g[first], ordered_groups, first=first, windows=rows, key_of=np.cumsum(new) - 1)


NOT_SHARED = np.zeros(0, np.int64)
"""``row_first`` for the kernels' rows where each is one window's (:mod:`common_cases`)."""
EVERY_ROW = np.zeros(0, np.bool_)
"""``reached`` for :func:`common_cases.keys_by_start_into` where every row is."""


def merged_extremes(keyed: Keyed, out: KernelOut, x_is_min: np.ndarray) -> np.ndarray:
    """MIN/MAX keys per output key (min/max over its windows)."""
    w = keyed.windows
    if keyed.n_keys == len(w):  # one window per key: nothing to merge
        return out.x[w]
    k, key = keyed.n_keys, keyed.key_of
    mx = np.empty((k, out.x.shape[1]), np.int64)
    for c in range(out.x.shape[1]):
        if x_is_min[c]:
            mx[:, c] = MIN_KEY_IDENTITY
            np.minimum.at(mx[:, c], key, out.x[w, c])
        else:
            mx[:, c] = MAX_KEY_IDENTITY
            np.maximum.at(mx[:, c], key, out.x[w, c])
    return mx


# ---------------------------------------------------------------------------------------
# Slots
# ---------------------------------------------------------------------------------------


LOW = np.int64((1 << SPLIT_SHIFT) - 1)


@dataclass
class Number:
    """An integer slot, per window or per key.

    ``exact``: the value is known exactly: ``hi * 2**32 + lo`` with ``0 <= lo < 2**32``
    and ``|hi| < 2**61``.  ``big``: the value is known to be beyond 2**64 and
    ``approx * 2**e`` (doubles, kept apart so that nothing overflows early) approximates
    it.  Neither: undecided (the row path decides).
    """

    exact: np.ndarray
    big: np.ndarray
    hi: np.ndarray
    lo: np.ndarray
    approx: np.ndarray
    e: np.ndarray
    approximate: bool = False
    """Kept in doubles alone (``fcount`` / ``fapprox``): ``big`` means "approximated", at
    any magnitude."""

    @property
    def undecided(self) -> np.ndarray:
        return ~(self.exact | self.big)

    @property
    def in_int64(self) -> np.ndarray:
        """Exact and within int64 (then :meth:`int64` is the value)."""
        return self.exact & (self.hi >= -(2**31)) & (self.hi < 2**31)

    @property
    def is_zero(self) -> np.ndarray:
        return self.exact & (self.hi == 0) & (self.lo == 0)

    def int64(self) -> np.ndarray:
        return (np.where(self.in_int64, self.hi, 0) << np.int64(SPLIT_SHIFT)) + self.lo

    def mantissa(self) -> tuple[np.ndarray, np.ndarray]:
        """``(m, k)`` with value ~ ``m * 2**k``: m correctly rounded where exact (k = 0),
        the approximation where big."""
        exact = round_to_double(np.where(self.exact, self.hi, 0), self.lo)
        return np.where(self.exact, exact, self.approx), np.where(self.exact, 0, self.e)

    def take(self, idx: np.ndarray) -> "Number":
        return Number(self.exact[idx], self.big[idx], self.hi[idx], self.lo[idx], self.approx[idx], self.e[idx],
                      self.approximate)


def round_to_double(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """``hi * 2**32 + lo`` (``0 <= lo < 2**32``, ``|hi| < 2**62``) correctly rounded to double."""
    neg = (hi < 0)
    # |V| = H * 2**32 + L with 0 <= L < 2**32.
    H = np.where(neg, np.where(lo > 0, -hi - 1, -hi), hi)
    L = np.where(neg & (lo > 0), (1 << SPLIT_SHIFT) - lo, lo)
    out = H.astype(np.float64) * 2.0**SPLIT_SHIFT + L.astype(np.float64)  # exact when H < 2**21
    wide = H >= (1 << 21)
    if wide.any():
        h, l = H[wide], L[wide]
        bits = np.frexp(h.astype(np.float64))[1].astype(np.int64)  # bit length, maybe one too many
        bits -= (np.left_shift(np.int64(1), bits - 1) > h).astype(np.int64)
        s = bits - 21  # bits dropped from V (which has bits + 32 > 53 bits)
        q = np.empty_like(h)
        rem = np.empty_like(h)
        small = s <= SPLIT_SHIFT
        ss = s[small]
        q[small] = (h[small] << (SPLIT_SHIFT - ss)) | (l[small] >> ss)
        rem[small] = l[small] & ((np.int64(1) << ss) - 1)
        sb = s[~small] - SPLIT_SHIFT
        q[~small] = h[~small] >> sb
        rem[~small] = ((h[~small] & ((np.int64(1) << sb) - 1)) << SPLIT_SHIFT) | l[~small]
        half = np.int64(1) << (s - 1)
        q += ((rem > half) | ((rem == half) & ((q & 1) == 1))).astype(np.int64)
        out[wide] = np.ldexp(q.astype(np.float64), s)
    return np.where(neg, -out, out)


LONG_EPS = float(np.finfo(np.longdouble).eps)


def exact_ratio(hi: np.ndarray, lo: np.ndarray, n_hi: np.ndarray, n_lo: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(hi * 2**32 + lo) / (n_hi * 2**32 + n_lo)`` correctly rounded to double, and where that is certain.

    The quotient is formed in long double (x86: 64-bit mantissa), within ~2 long-double
    ulps of the true value; its rounding to double is certain unless it lies that close to
    a midpoint between two doubles (about 1 in 500 values, and exact ties), which are
    left to the caller's exact path.  Where long double is plain double nothing is certain.
    """
    ld = np.longdouble
    v = hi.astype(ld) * ld(2.0**SPLIT_SHIFT) + lo.astype(ld)
    q_ld = v / (n_hi.astype(ld) * ld(2.0**SPLIT_SHIFT) + n_lo.astype(ld))
    q = q_ld.astype(np.float64)
    up, down = np.nextafter(q, np.inf), np.nextafter(q, -np.inf)
    mid_up = (q.astype(ld) + up.astype(ld)) / 2
    mid_down = (q.astype(ld) + down.astype(ld)) / 2
    margin = 8 * LONG_EPS * np.abs(q_ld)
    sure = (q_ld - mid_down > margin) & (mid_up - q_ld > margin) & (LONG_EPS < 2.0**-60)
    return q, sure & np.isfinite(q)


def _exact_parts(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int64 ``v`` as ``(hi, lo)`` with ``v = hi * 2**32 + lo``, ``0 <= lo < 2**32``."""
    return v >> np.int64(SPLIT_SHIFT), v & LOW


RESOLVABLE = 2.0**61 / 1e-6
"""A limb whose |x|-bound is below this is known exactly from its residue: its double
approximation is within 1e-6 of the bound (the margin FITS_* rely on too), below
2**61, so it names the multiple of 2**64 to add to the residue."""


def _limb(out: KernelOut, ii: int, fi: int, bi: int, unsigned: bool):
    """One modular channel as ``(known, hi, lo)``: value = hi * 2**32 + lo where known."""
    e = out.e
    rescaled = bool(e.any())
    with np.errstate(over="ignore", invalid="ignore"):
        bound = np.ldexp(out.f[:, bi], e) if rescaled else out.f[:, bi]
    r = out.i[:, ii]
    if unsigned:
        hi, lo = (r >> np.uint64(SPLIT_SHIFT)).astype(np.int64), (r & np.uint64(LOW)).astype(np.int64)
    else:
        hi, lo = _exact_parts(r.view(np.int64))
    fits = FITS_UNSIGNED if unsigned else FITS_SIGNED
    known = bound < RESOLVABLE
    wrapped = np.flatnonzero(known & (bound >= fits))
    if len(wrapped):  # past 2**64 (or 2**63): the approximation names the multiple of 2**64
        with np.errstate(over="ignore", invalid="ignore"):
            approx = np.ldexp(out.f[wrapped, fi], e[wrapped])
        r_float = (r[wrapped] if unsigned else r[wrapped].view(np.int64)).astype(np.float64)
        hi = hi.copy()
        hi[wrapped] += np.rint((approx - r_float) / 2.0**64).astype(np.int64) * np.int64(1 << SPLIT_SHIFT)
    return known, hi, lo


def approximate_number(entry: tuple, out: KernelOut, scale_bits: int) -> Number:
    """Decode an ``fcount`` / ``fapprox`` slot (doubles alone) for every window, as
    :func:`channels.approximate_value` does for one: exact while its bound proves the
    doubles never rounded, approximated (``big``) where the bound shows no cancellation."""
    _, _, fi, bi = entry[:4]
    f, bound, e = out.f[:, fi], out.f[:, bi], out.e
    lost = (e > 0) & (bound < TINY)
    zero = lost & (bound == 0.0) & (f == 0.0)
    exact = (e == 0) & (np.ldexp(bound, scale_bits) < DOUBLE_EXACT) & np.isfinite(f)
    hi, lo = _exact_parts(np.where(exact, np.ldexp(f, scale_bits), 0.0).astype(np.int64))
    big = ~lost & ~exact & (f != 0.0) & (bound <= CANCELLATION_LIMIT * np.abs(f))
    exact |= zero
    return Number(exact, big, np.where(exact, hi, 0), np.where(exact, lo, 0), f, e + scale_bits, True)


def number(entry: tuple, out: KernelOut) -> Number:
    """Decode one integer slot (``int``, ``isum`` or ``fsplit``) for every window, as
    :func:`channels._exact_or_approx` does for one -- and exactly also where the value
    passed 2**64 by less than :data:`RESOLVABLE` (there that function gives up)."""
    kind = entry[0]
    f, e = out.f, out.e
    limbs = slot_limbs(entry)
    weights = [2.0**SPLIT_SHIFT, 1.0] if kind == "fsplit" else [1.0]  # fsplit: hi * 2**32 + lo
    bounds = [f[:, b] for _, _, b in limbs]
    # Rescaled so far that the bounds fell below the doubles' resolution: only a plain
    # zero is certain.
    lost = e > 0
    for bnd in bounds:
        lost &= bnd < TINY
    zero = lost.copy()
    for (ii, _, _), bnd in zip(limbs, bounds):
        zero &= (bnd == 0.0) & (out.i[:, ii] == 0)
    parts = [_limb(out, *limb, unsigned=kind == "int") for limb in limbs]
    exact = ~lost
    for known, _, _ in parts:
        exact &= known
    if kind == "fsplit":
        (_, h_hi, h_lo), (_, hi, lo) = parts
        exact &= (h_hi < 2**28) & (h_hi >= -(2**28))  # |value| < ~2**92: keeps |hi| < 2**61
        hi = hi + h_lo + (np.where(exact, h_hi, 0) << np.int64(SPLIT_SHIFT))
    else:
        _, hi, lo = parts[0]
    approx = sum(w * f[:, fi] for w, (_, fi, _) in zip(weights, limbs))
    with np.errstate(over="ignore"):
        scaled = np.ldexp(approx, e)
    # Beyond 2**64 (2**92 for split sums, where exactness ends above) the doubles are used.
    big = ~lost & ~exact & (np.abs(scaled) > SURELY_TOO_BIG * (2.0**28 if kind == "fsplit" else 1.0))
    if kind != "int":
        total_bound = sum(w * bnd for w, bnd in zip(weights, bounds))
        big &= (approx != 0.0) & (total_bound <= CANCELLATION_LIMIT * np.abs(approx))
    exact |= zero
    keep = exact & ~zero
    return Number(exact, big, np.where(keep, hi, 0), np.where(keep, lo, 0), approx, e)


def merged_number(num: Number, keyed: Keyed) -> Number:
    """Per key: exact if every window is (summed exactly), big if the sum is provably huge.
    A key of one window is that window's number, as where every key holds one (and as
    :func:`common_cases.decode_slots` decides it): the merged rule's threshold for big
    split sums is 2**96, a window's own 2**92."""
    w = keyed.windows
    num = num.take(w)
    if keyed.n_keys == len(w):
        return num
    k, key = keyed.n_keys, keyed.key_of

    def total(values: np.ndarray, dtype) -> np.ndarray:
        acc = np.zeros(k, dtype)
        np.add.at(acc, key, values)
        return acc

    undecided = total(num.undecided.astype(np.int64), np.int64) > 0
    inexact = total((~num.exact).astype(np.int64), np.int64) > 0
    hi = total(num.hi, np.int64)
    lo = total(num.lo, np.int64)  # below windows * 2**32: no overflow
    hi, lo = hi + (lo >> np.int64(SPLIT_SHIFT)), lo & LOW
    wide = total(np.abs(num.hi).astype(np.float64), np.float64) >= 2.0**60  # the hi sum may have wrapped
    m, p = num.mantissa()
    with np.errstate(over="ignore", invalid="ignore"):
        values = np.ldexp(m, p)
        approx = total(values, np.float64)
        magnitude = total(np.abs(values), np.float64)
    exact = ~inexact & ~wide
    huge = np.abs(approx) > SURELY_TOO_BIG * 2.0**SPLIT_SHIFT
    big = (~undecided & ~exact & np.isfinite(approx) & (huge | num.approximate) & (approx != 0.0)
           & (magnitude <= CANCELLATION_LIMIT * np.abs(approx)))
    merged = Number(exact, big, np.where(exact, hi, 0), np.where(exact, lo, 0), approx, np.zeros(k, np.int64),
                    num.approximate)
    alone = np.flatnonzero(np.diff(np.append(keyed.first, len(w))) == 1)
    if len(alone):
        own = num.take(keyed.first[alone])
        for field in ("exact", "big", "hi", "lo", "approx", "e"):
            getattr(merged, field)[alone] = getattr(own, field)
    return merged


# ---------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------


@dataclass
class Column:
    """One RETURN item's values per key: ``array`` where ``ok``; NULL where ``null``;
    overflow where ``overflow``; the rest must take the row path."""

    values: np.ndarray | pa.Array
    null: np.ndarray
    overflow: np.ndarray
    undecided: np.ndarray


def _extreme_column(ctx: "Context", idx: int, extremes: np.ndarray, none: np.ndarray) -> Column:
    """MIN/MAX slot ``idx`` from the merged keys (never undecided: keys merge exactly)."""
    k = ctx.chan.slot_map[idx][3]
    identity = MIN_KEY_IDENTITY if ctx.layout.slots[idx].kind == MIN else MAX_KEY_IDENTITY
    keys = extremes[:, k]
    empty = keys == identity
    return Column(ctx.x_arrow[k](np.where(empty, 0, keys)), empty, none, none)


def item_columns(ctx: "Context", out: KernelOut, keyed: Keyed) -> list[Column | None]:
    """Per RETURN item a :class:`Column` over the keys (None for grouping items): the
    compiled pass for the common cases (:mod:`common_cases`), the numpy rules for the
    keys it leaves (and for queries it does not handle)."""
    if COMPILED and _compilable(ctx):
        return _compiled_item_columns(ctx, out, keyed)
    return numpy_item_columns(ctx, out, keyed)


def numpy_item_columns(ctx: "Context", out: KernelOut, keyed: Keyed) -> list[Column | None]:
    """:func:`item_columns` by the numpy rules: every case, ~30 passes over the keys."""
    layout, chan = ctx.layout, ctx.chan
    none = np.zeros(keyed.n_keys, bool)
    extremes = merged_extremes(keyed, out, chan.x_is_min)
    cols: list[Column | None] = []
    numbers: dict[int, Number] = {}
    entries = {item.position: item for item in layout.items}

    def num(idx: int) -> Number:
        if idx not in numbers:
            entry = chan.slot_map[idx]
            if entry[0] in ("fcount", "fapprox"):
                bits = _scale_bits(ctx, layout.slots[idx].attribute) if entry[0] == "fapprox" else 0
                decoded = approximate_number(entry, out, bits)
            else:
                decoded = number(entry, out)
            numbers[idx] = merged_number(decoded, keyed)
        return numbers[idx]

    for position, final in enumerate(layout.finals):
        if final[0] == "group":
            cols.append(None)
        elif final[0] == "entry":
            cols.append(_entry_column(ctx, entries[position], out, keyed))
        elif final[0] == "slot" and layout.slots[final[1]].kind in (MIN, MAX):
            cols.append(_extreme_column(ctx, final[1], extremes, none))
        elif final[0] == "slot":  # COUNT(*) / COUNT(V)
            c = num(final[1])
            fits = c.in_int64
            cols.append(Column(c.int64(), none, (c.exact & ~fits) | c.big, c.undecided))
        else:
            func, s, _inf, nn, attr = final
            count, total = num(nn), num(s)
            null = count.is_zero
            undecided = (count.undecided | total.undecided) & ~null
            scale_bits = _scale_bits(ctx, attr)
            if func == "SUM" and _integer_attribute(ctx, attr):
                fits = total.in_int64
                overflow = ((total.exact & ~fits) | total.big) & ~null & ~undecided
                cols.append(Column(total.int64(), null, overflow, undecided))
                continue
            if scale_bits > MAX_SCALE_BITS:  # results near the subnormal range: exact arithmetic only
                undecided = ~null.copy()
            s_m, s_k = total.mantissa()
            with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
                if func == "AVG":
                    n_m, n_k = count.mantissa()
                    value = np.ldexp(s_m / n_m, s_k - n_k - scale_bits)
                    # Both exact: the correctly rounded quotient, as the row path gives.
                    both = total.exact & count.exact & ~null
                    ratio, sure = exact_ratio(total.hi[both], total.lo[both], count.hi[both], count.lo[both])
                    value[both] = np.ldexp(ratio, -scale_bits)
                    for i in np.flatnonzero(both)[~sure].tolist():  # near a midpoint (or a tie)
                        v = (int(total.hi[i]) << SPLIT_SHIFT) + int(total.lo[i])
                        n = (int(count.hi[i]) << SPLIT_SHIFT) + int(count.lo[i])
                        value[i] = v / (n << scale_bits)  # Python's int division rounds correctly
                    undecided |= ~np.isfinite(value) & ~null  # extreme ratios: exact path
                    overflow = none
                else:
                    value = np.ldexp(s_m, s_k - scale_bits)
                    overflow = ~np.isfinite(value) & ~null & ~undecided
            cols.append(Column(value, null, overflow, undecided))
    return cols


def exact_integers(ctx: "Context", idx: int, out: KernelOut, keyed: Keyed) -> tuple[list[int], np.ndarray]:
    """Integer slot ``idx`` per key as Python integers (its windows' exact values added),
    and per key whether some window's value is not known exactly (then its integer is 0)."""
    entry = ctx.chan.slot_map[idx]
    if entry[0] not in INTEGER_KINDS:  # (fsum: doubles, never exact here)
        return [0] * keyed.n_keys, np.ones(keyed.n_keys, bool)
    unknown = out.e != 0  # rescaled: past 2**600, beyond any exact limb
    per_limb = []
    for limb in slot_limbs(entry):
        known, hi, lo = _limb(out, *limb, unsigned=entry[0] == "int")
        unknown |= ~known
        per_limb.append((hi.tolist(), lo.tolist()))
    weights = limb_weights(entry)
    totals = [0] * keyed.n_keys
    for k, r in zip(keyed.key_of.tolist(), keyed.windows.tolist()):
        for w, (hi, lo) in zip(weights, per_limb):  # a limb is hi * 2**32 + lo
            totals[k] += ((hi[r] << SPLIT_SHIFT) + lo[r]) * w
    bad = np.zeros(keyed.n_keys, bool)
    np.logical_or.at(bad, keyed.key_of, unknown[keyed.windows])
    return [0 if b else t for t, b in zip(totals, bad.tolist())], bad


def _entry_column(ctx: "Context", item: Any, out: KernelOut, keyed: Keyed) -> Column:
    """An item finished from its registry entry (a spread) per key, from its slots' exact
    integers; a key with a slot not known exactly is undecided (an
    :attr:`~cogra.runtime.aggregates.AggregateEntry.exact_always` entry reads no
    approximation).  Python per key: a few µs each."""
    scale = int(ctx.scales[item.attribute])
    parts = {role: exact_integers(ctx, idx, out, keyed) for role, idx in item.slots.items() if role != "inf"}
    undecided = np.zeros(keyed.n_keys, bool)
    for _values, bad in parts.values():
        undecided |= bad
    values = np.zeros(keyed.n_keys, np.float64)
    null = np.zeros(keyed.n_keys, bool)
    entry = item.entry
    columns = {role: values_ for role, (values_, _bad) in parts.items()}
    for k in np.flatnonzero(~undecided).tolist():
        value = entry.finish(entry.func, {role: col[k] for role, col in columns.items()}, scale)
        if value is None:
            null[k] = True
        else:
            values[k] = float(value)
    return Column(values, null, np.zeros(keyed.n_keys, bool), undecided)


MAX_SCALE_BITS = 1000
"""Float attributes scaled by more than 2**1000 give results near the subnormal range:
those take the exact path."""


def _scale_bits(ctx: "Context", attr: str) -> int:
    return int(ctx.scales[attr]).bit_length() - 1


def _integer_attribute(ctx: "Context", attr: str) -> bool:
    return pa.types.is_integer(ctx.input_schema.field(attr).type)


def _compilable(ctx: "Context") -> bool:
    """Whether :mod:`common_cases` handles every item: integer slots (one limb, or a
    float sum split in two), moderate float scales."""
    slot_map = ctx.chan.slot_map
    for final in ctx.layout.finals:
        if final[0] == "entry":
            return False  # (finished per key from exact integers: _entry_column)
        if final[0] == "slot" and slot_map[final[1]][0] not in ("int", "x"):
            return False
        if final[0] not in ("group", "slot"):
            _func, s, _inf, nn, attr = final
            if slot_map[s][0] not in ("isum", "fsplit", "fapprox") or slot_map[nn][0] not in ("int", "fcount"):
                return False
            if not _integer_attribute(ctx, attr) and _scale_bits(ctx, attr) > MAX_SCALE_BITS:
                return False
    return True


def _compiled_item_columns(ctx: "Context", out: KernelOut, keyed: Keyed) -> list[Column | None]:
    """:func:`item_columns` through :mod:`common_cases`; the keys it marks hard are
    overwritten with the numpy rules' values (:func:`_take_numpy_rules`)."""
    layout = ctx.layout
    # The integer slots the items read, decoded in one pass.
    needed = sorted({f[1] for f in layout.finals if f[0] == "slot" and layout.slots[f[1]].kind not in (MIN, MAX)}
                    | {i for f in layout.finals if f[0] not in ("group", "slot") for i in (f[1], f[3])})
    slots = np.array([_slot_row(ctx, idx) for idx in needed], np.int64).reshape(-1, 7)
    items = _numeric_items(ctx, {idx: j for j, idx in enumerate(needed)})
    if keyed.window_key is not None:  # a window per key: read the channels in the kernel's order
        cols = _finished_in_one_pass(ctx, out, keyed, slots, items)
        if cols is not None:
            return cols
    return _columns_of_decoded_slots(ctx, out, keyed, slots, items)


def _numeric_items(ctx: "Context", row_of: dict[int, int]) -> dict[int, tuple[int, int, int, int]]:
    """Per RETURN item :mod:`common_cases` computes (not a grouping item, not MIN/MAX), by
    position: ``(operation, its sum's -- COUNT: its -- slot, its count's slot, scale bits)``,
    operations as :mod:`window_finish`'s ``ITEM_*``, slots as rows of the decoded ones."""
    layout = ctx.layout
    items: dict[int, tuple[int, int, int, int]] = {}
    for position, final in enumerate(layout.finals):
        if final[0] == "group" or (final[0] == "slot" and layout.slots[final[1]].kind in (MIN, MAX)):
            continue
        if final[0] == "slot":  # COUNT(*) / COUNT(V)
            items[position] = (gen.ITEM_COUNT, row_of[final[1]], row_of[final[1]], 0)
            continue
        func, s, _inf, nn, attr = final
        if func == "SUM" and _integer_attribute(ctx, attr):
            items[position] = (gen.ITEM_INTEGER_SUM, row_of[s], row_of[nn], 0)
        else:
            op = gen.ITEM_AVERAGE if func == "AVG" else gen.ITEM_FLOAT_SUM
            items[position] = (op, row_of[s], row_of[nn], _scale_bits(ctx, attr))
    return items


def _assembled(ctx: "Context", out: KernelOut, keyed: Keyed, items: dict,
               column: Callable[[int], Column]) -> list[Column | None]:
    """The columns in RETURN order: ``column(position)`` for the numeric items, None for
    grouping items, MIN/MAX from the keys' merged extremes."""
    none = np.zeros(keyed.n_keys, bool)
    extremes = None
    cols: list[Column | None] = []
    for position, final in enumerate(ctx.layout.finals):
        if position in items:
            cols.append(column(position))
        elif final[0] == "group":
            cols.append(None)
        else:
            if extremes is None:
                extremes = merged_extremes(keyed, out, ctx.chan.x_is_min)
            cols.append(_extreme_column(ctx, final[1], extremes, none))
    return cols


def _columns_of_decoded_slots(ctx: "Context", out: KernelOut, keyed: Keyed, slots: np.ndarray,
                              items: dict) -> list[Column | None]:
    """:func:`_compiled_item_columns` by decoding the slots into per-key arrays, then each
    item's column from them (:func:`common_cases.average` ...: the per-key rules of the
    generated pass, :func:`_finished_in_one_pass`)."""
    n = keyed.n_keys
    none = np.zeros(n, bool)
    # Value (where EXACT) and mantissa (elsewhere) share one buffer; exponents fit int32.
    shape = (len(slots), n)
    value = scratch(ctx, "value", shape, np.int64)
    decoded = (scratch(ctx, "status", shape, np.int8), value, value.view(np.float64),
               scratch(ctx, "exponent", shape, np.int32))
    if keyed.window_key is not None:  # a window per key: read the channels in the kernel's order
        fk.decode_one_window_per_key(slots, out.i.view(np.int64), out.f, out.e, _row_first(out),
                                     keyed.window_key, scratch(ctx, "runs", (len(out.e) + 1,), np.int64),
                                     *decoded)
    else:
        fk.decode_slots(slots, out.i.view(np.int64), out.f, out.e, keyed.windows,
                        np.append(keyed.first, len(keyed.windows)), *decoded)

    def slot(row: int) -> tuple[np.ndarray, ...]:
        """(status, value, mantissa, exponent) per key; the value is meaningful where the
        status is EXACT, the mantissa and exponent where it is BIG."""
        return tuple(a[row] for a in decoded)

    def column(position: int) -> Column:
        op, a, c, scale_bits = items[position]
        total, count = slot(a), slot(c)
        if op == gen.ITEM_COUNT:  # exact values are below 2**62
            # The column's own values: handed to Arrow without a copy, a view of the
            # decode's buffer would keep all of it alive with the result -- or, where it is
            # a scratch array, be overwritten by the next call.
            values = pooled(n, np.int64)
            values[:] = total[1]
            return Column(values, none, total[0] == fk.BIG, total[0] == fk.HARD)
        null, overflow, hard = np.empty(n, bool), np.empty(n, bool), np.empty(n, bool)
        if op == gen.ITEM_INTEGER_SUM:
            values = pooled(n, np.int64)
            fk.integer_sum(total[0], total[1], count[0], count[1], values, null, overflow, hard)
            return Column(values, null, overflow, hard)
        values = pooled(n, np.float64)
        if op == gen.ITEM_AVERAGE:
            fk.average(*total, *count, scale_bits, values, null, hard)
            return Column(values, null, none, hard)
        fk.float_sum(*total, count[0], count[1], scale_bits, values, null, overflow, hard)
        return Column(values, null, overflow, hard)

    cols = _assembled(ctx, out, keyed, items, column)
    hard_keys = np.zeros(n, bool)
    for c in cols:
        if c is not None:
            hard_keys |= c.undecided
    if hard_keys.any():
        _take_numpy_rules(ctx, out, keyed, np.flatnonzero(hard_keys), cols)
    return cols


def _finished_in_one_pass(ctx: "Context", out: KernelOut, keyed: Keyed, slots: np.ndarray,
                          items: dict) -> list[Column | None] | None:
    """:func:`_compiled_item_columns` for one window per key by the finisher generated for
    the query's slots and items (:mod:`window_finish`: decode and columns in one pass), or
    None where it does not run (see :data:`SPECIALIZE_MIN_KEYS`)."""
    from cogra.runtime.compiled.codegen import background
    from cogra.runtime.compiled.codegen import kernel_cache

    n = keyed.n_keys
    positions = list(items)  # the generated pass's item t is the t-th numeric item
    shape = gen.DecodeShape.of(slots, [items[p][:3] for p in positions])
    if n < min(BACKGROUND_MIN_KEYS, SPECIALIZE_MIN_KEYS) and not kernel_cache.is_loaded(shape):
        return None  # (loading the module would cost more than the generic loops: see BACKGROUND_MIN_KEYS)
    generated = kernel_cache.use_generated(shape, gen.FUNCTION, n, SPECIALIZE_MIN_KEYS)
    if not generated and not (n >= BACKGROUND_MIN_KEYS and background.worth_requesting(ctx.events)):
        return None
    values = [pooled(n, np.int64 if items[p][0] in (gen.ITEM_COUNT, gen.ITEM_INTEGER_SUM) else np.float64)
              for p in positions]
    # The flags are working arrays: the columns live only until table_from_channels has
    # built its table (their masks are copied into Arrow bitmaps there).
    flags = scratch(ctx, "flags", (len(positions), 3, n), np.bool_)
    args = (slots, np.array([items[p][3] for p in positions], np.int64), out.i.view(np.int64), out.f, out.e,
            _row_first(out), keyed.window_key, scratch(ctx, "runs", (len(out.e) + 1,), np.int64), flags,
            *values)
    if not generated:  # (the next call, a Spark slice's, say, finds it compiled)
        background.compile_in_background(shape, gen.FUNCTION, args)
        return None
    any_hard = kernel_cache.finisher_for(shape)(*args)
    t_of = {p: t for t, p in enumerate(positions)}

    def column(position: int) -> Column:
        t = t_of[position]
        return Column(values[t], flags[t, gen.NULL], flags[t, gen.OVERFLOW], flags[t, gen.HARD])

    cols = _assembled(ctx, out, keyed, items, column)
    if any_hard:
        _take_numpy_rules(ctx, out, keyed, np.flatnonzero(flags[:, gen.HARD].any(axis=0)), cols)
    return cols


def _row_first(out: KernelOut) -> np.ndarray:
    """``out``'s rows as :mod:`common_cases` takes them (:func:`common_cases.row_windows`)."""
    return NOT_SHARED if out.row_first is None else out.row_first


SPECIALIZE_MIN_KEYS = 1 << 22
"""Blocks of at least this many keys, a window each, compile the pass generated for the
query's slots and items in the foreground (:mod:`window_finish`: decode and columns in
one pass, ~1.5x faster than the generic decode and item loops; compiling it takes ~1 s
the first time its slots and items are seen on a machine, then numba's disk cache serves
it), which one block repays only from millions of keys.  Smaller blocks use it once it
is compiled, and request its compile in the background (BACKGROUND_MIN_KEYS).  Tests
lower it."""
BACKGROUND_MIN_KEYS = 4096
"""A block of at least this many keys (a Spark slice of a sliding query, say) that
finishes with the generic decode requests the generated pass's compile in the background,
from engine calls of :data:`background.BACKGROUND_MIN_EVENTS` events on (as the kernels do);
a tumbling query's few keys do not repay even that.  Below it, a generated pass compiled
already (in the bundle, say) runs only if this process has loaded its module: loading one
costs 3-6 ms, the generic loops over 3,000 keys ~0.3 ms (a first call of one window over 3M
events spent 6 ms of its 50-90 ms loading the pass for its single result row)."""


def _slot_row(ctx: "Context", idx: int) -> tuple[int, ...]:
    """A slot as :func:`common_cases.decode_slots` reads it: its kind, then its high and
    low limbs (a one-limb slot repeats its only one, unread) -- or for a slot of doubles
    alone, its approximation and bound and the scale's bits."""
    entry = ctx.chan.slot_map[idx]
    if entry[0] == "fcount":
        return (fk.KIND_APPROX_COUNT, 0, entry[2], entry[3], 0, 0, 0)
    if entry[0] == "fapprox":
        bits = _scale_bits(ctx, ctx.layout.slots[idx].attribute)
        return (fk.KIND_APPROX_SUM, 0, entry[2], entry[3], bits, 0, 0)
    limbs = slot_limbs(entry)
    code = {"int": fk.KIND_COUNT, "isum": fk.KIND_ISUM, "fsplit": fk.KIND_SPLIT}[entry[0]]
    return (code, *limbs[0], *limbs[-1])


def _take_numpy_rules(ctx: "Context", out: KernelOut, keyed: Keyed, keys: np.ndarray,
                      cols: list[Column | None]) -> None:
    """Overwrite the numeric columns at ``keys`` with the numpy rules' columns."""
    sub = keyed.subset(keys)
    rows = sub.windows  # decode only their windows' rows, renumbered
    theirs = numpy_item_columns(ctx, KernelOut(out.i[rows], out.f[rows], out.x[rows], out.e[rows], out.r[rows]),
                                sub.renumbered())
    for i, (mine, other) in enumerate(zip(cols, theirs)):
        if mine is None or isinstance(mine.values, (pa.Array, pa.ChunkedArray)):
            continue  # grouping items; MIN/MAX are the same for every key
        values = mine.values.astype(np.result_type(mine.values, other.values))  # a copy
        values[keys] = other.values
        flags = []
        for name in ("null", "overflow", "undecided"):
            flag = getattr(mine, name).copy()  # may be shared between columns
            flag[keys] = getattr(other, name)
            flags.append(flag)
        cols[i] = Column(values, *flags)


@dataclass
class Context:
    """What turning channels into a table needs to know about the query and the kernels."""

    query: Any  # language.ast.Query
    input_schema: pa.Schema
    time_type: pa.DataType
    layout: Any  # runtime.aggregates.Layout
    scales: dict[str, int]
    group_item_positions: list[int]
    chan: Any  # channels.ChannelLayout
    x_arrow: list
    window_size: int | None
    scratch: dict | None = None
    """The evaluation's pool of working arrays (:mod:`cogra.runtime.compiled.scratch`); None:
    fresh ones."""
    events: int = 0
    """The engine call's events (whether the generated finish's compile is worth requesting
    in the background: :func:`background.worth_requesting`)."""

    @classmethod
    def of(cls, engine: Any, driver: Any, window_size: int | None) -> "Context":
        b = engine.bound
        return cls(b.query, engine.table.schema, b.time_type, engine.layout, engine.scales,
                   engine.group_item_positions, driver.chan, driver.x_arrow, window_size, engine.scratch,
                   engine.n)


def scratch(ctx: Context, name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A working array of the finish, from the evaluation's pool (:mod:`scratch`): nothing
    of it may outlive the call -- result columns copy out of it."""
    return reuse.take(ctx.scratch, "finish." + name, shape, dtype)


def result_table(engine: Any, driver: Any, subs: Any, wins: Any, out: KernelOut, *,
                 on_overflow: str, metadata: dict | None) -> pa.Table | None:
    """The typed, ordered result, or None when an overflow must raise (row path).  The
    windows re-run in Python count in ``engine.stats["windows_exact"]``."""
    ctx = Context.of(engine, driver, wins.size)

    def row_path(keyed: Keyed, slow: np.ndarray) -> pa.Table:
        return _row_path_table(engine, driver, subs, wins, out, keyed, slow, on_overflow, metadata)

    return table_from_channels(ctx, subs.groups, wins.seg, wins.start, out, on_overflow=on_overflow,
                               metadata=metadata, row_path=row_path)


def table_from_channels(ctx: Context, seg_groups: list[tuple], seg: np.ndarray, start: np.ndarray,
                        out: KernelOut, *, on_overflow: str, metadata: dict | None,
                        row_path: Callable[[Keyed, np.ndarray], pa.Table] | None) -> pa.Table | None:
    """The typed, ordered result of windows given by their channels, or None when an
    overflow must raise.  ``row_path(keyed, keys)`` evaluates the keys this module cannot
    decide (typed and ordered, as ``build_table`` gives them); without one they raise."""
    q = ctx.query
    schema = table_schema(q, ctx.input_schema, ctx.time_type, metadata)
    keyed = keyed_windows(seg_groups, seg, start, out, ctx.scratch)
    cols = item_columns(ctx, out, keyed)
    undecided = np.zeros(keyed.n_keys, bool)
    overflow = np.zeros(keyed.n_keys, bool)
    for c in cols:
        if c is not None:
            undecided |= c.undecided
            overflow |= c.overflow
    overflow &= ~undecided
    if overflow.any() and on_overflow == "error":
        if row_path is not None:
            return None  # the row path words the error, with the value's magnitude
        k = int(np.flatnonzero(overflow)[0])
        i = next(i for i, c in enumerate(cols) if c is not None and c.overflow[k])
        window = None if q.window is None else (int(keyed.start[k]), int(keyed.start[k]) + int(ctx.window_size))
        raise overflow_error(q, q.returns[i].name, schema.field(i).type, window,
                             keyed.groups[keyed.gid[k]], ctx.time_type)
    keep = ~undecided
    every = not undecided.any()  # then no copies by ``keep`` (a sliding result has millions of rows)

    def kept(a: np.ndarray) -> np.ndarray:
        return a if every else a[keep]

    arrays: list[pa.Array] = []
    group_of_item = {i: j for j, i in enumerate(ctx.group_item_positions) if i >= 0}
    for i, (item, c) in enumerate(zip(q.returns, cols)):
        typ = schema.field(i).type
        if c is None:
            j = group_of_item[i]
            distinct = pa.array([g[j] for g in keyed.groups], type=typ)
            arrays.append(group_column(distinct, kept(keyed.gid)))
            continue
        null = kept(c.null | c.overflow)
        if isinstance(c.values, (pa.Array, pa.ChunkedArray)):
            vals = c.values if every else c.values.filter(pa.array(keep))
            arrays.append(pc.if_else(pa.array(null), pa.scalar(None, typ), vals) if null.any() else vals)
        else:
            arrays.append(pa.array(kept(c.values), mask=null if null.any() else None, type=typ))
    starts = kept(keyed.start)
    if q.window is not None:
        wtype = schema.field("window_start").type
        ends = pooled(len(starts), np.int64)
        np.add(starts, int(ctx.window_size), out=ends)
        arrays += [_window_array(starts, wtype), _window_array(ends, wtype)]
    table = pa.Table.from_arrays(arrays, schema=schema)
    slow = np.flatnonzero(undecided)
    if not len(slow):
        return table
    if row_path is None:
        raise UndecidableError(
            f"{len(slow)} result row(s) need values the compiled kernels cannot decide exactly "
            "(sums near 2**64 with cancelling signs, or counts past 1e308), and their events "
            "are gone; evaluate these events as one table (cogra.evaluate) instead")
    extra = row_path(keyed, slow)
    # build_table orders its rows by (window start, group), as the keys are ordered.
    order_slow = np.lexsort((keyed.gid[slow], keyed.start[slow]))
    all_start = np.concatenate([starts, keyed.start[slow][order_slow][:extra.num_rows]])
    all_gid = np.concatenate([kept(keyed.gid), keyed.gid[slow][order_slow][:extra.num_rows]])
    merged = pa.concat_tables([table, extra.cast(table.schema)])
    return merged.take(pa.array(np.lexsort((all_gid, all_start)))).combine_chunks()


class UndecidableError(DataError):
    """A streamed result value the kernels cannot decide exactly (see table_from_channels):
    a property of the data, whose events are gone."""


def group_column(distinct: pa.Array, gid: np.ndarray) -> pa.Array:
    """``distinct.take(gid)``: a grouping item's column, one value per result row.  Strings
    without NULLs are gathered by one compiled pass (:func:`common_cases.gather_strings`)
    into the offsets and bytes of a new array: Arrow's take of 1.92M short strings took
    ~0.8 ms per 128k rows, ~4% of the sliding benchmark query; values of one length, as
    its 3-byte company keys, copy a constant number of bytes per row without counting
    them first (1.92M rows: ~10 -> ~5.5 ms)."""
    if (not pa.types.is_string(distinct.type) or distinct.null_count or not len(gid)
            or distinct.offset):
        return distinct.take(pa.array(gid))
    _validity, offsets, data = distinct.buffers()
    offsets = np.frombuffer(offsets, np.int32, len(distinct) + 1)
    data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    gid = np.asarray(gid, np.int64)
    lengths = np.diff(offsets)
    width = int(lengths[0])
    fixed = bool((lengths == width).all())  # (ticker-like keys: every value 3 bytes, say)
    total = len(gid) * width if fixed else fk.gathered_bytes(offsets, gid)
    if total >= 2**31:  # beyond 32-bit offsets: Arrow's take decides (and says why)
        return distinct.take(pa.array(gid))
    out_offsets = pooled(len(gid) + 1, np.int32)
    out_data = pooled(total, np.uint8)
    if fixed:  # no pass to count the bytes, and a copy of constant length per row
        fk.gather_fixed_width(data, int(offsets[0]), width, gid, out_offsets, out_data)
    else:
        fk.gather_strings(offsets, data, gid, out_offsets, out_data)
    return pa.Array.from_buffers(pa.string(), len(gid), [None, pa.py_buffer(out_offsets), pa.py_buffer(out_data)])


def _window_array(values: np.ndarray, typ: pa.DataType) -> pa.Array:
    arr = pa.array(values, pa.int64())
    return arr if typ == pa.int64() else arr.cast(typ)


def _row_path_table(engine, driver, subs, wins, out, keyed, slow, on_overflow, metadata) -> pa.Table:
    """The ``slow`` keys through the engine's row path, typed and ordered by build_table."""
    layout = engine.layout
    size = None if wins.size is None else int(wins.size)
    ends = np.append(keyed.first, len(keyed.windows))
    rows = []
    for k in slow.tolist():
        state = None
        for row in keyed.windows[ends[k]:ends[k + 1]].tolist():
            st = engine.state_of(subs, wins, out.window_of_row(row), driver, out, row)
            if st is None:
                continue
            if state is None:
                state = st
            else:
                layout.add_into(state, st)
        start = int(keyed.start[k])
        window = None if size is None else (start, start + size)
        if state is not None:
            rows.append(engine.result_row(window, keyed.groups[keyed.gid[k]], state))
    b = engine.bound
    return build_table(b.query, b.schema, rows, time_type=b.time_type,
                       on_overflow=on_overflow, metadata=metadata)


__all__ = ["ENABLED", "Context", "UndecidableError", "applies", "group_column", "result_table",
           "round_to_double", "scratch", "table_from_channels"]
