"""How the compiled kernels hold the exact aggregate slots of :class:`Layout`.

A compiled kernel cannot use Python's unbounded integers, so each slot of
:mod:`cogra.runtime.aggregates` is kept in up to three fixed-width *channels*:

* ``I`` (uint64): the slot's exact value modulo 2**64 (counts, integer sums);
* ``F`` (float64): an approximation, scaled by ``2**-E`` where ``E`` is a per-run
  exponent the kernel raises whenever values grow past 2**600, so that nothing
  overflows (AVG stays accurate when counts pass 1e308).  Integer sums also keep
  ``|x|``-sums here as an upper bound of every partial sum's magnitude;
* ``X`` (int64): MIN/MAX as order-preserving integer keys (floats mapped bitwise so
  that NaN sorts above +inf, as in Spark; strings as ranks in a sorted dictionary).

Decoding turns a kernel's channels back into the exact slot values the Python
executors would produce.  When the approximation proves a value below 2**62 the
modular value *is* the value; when it proves it above 2**63 the value does not fit
its output type anyway; in between -- or where scaling lost a small slot -- decoding
reports :data:`UNDECIDED` and the engine re-runs that window exactly in Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pyarrow as pa

from cogra.runtime.aggregates import MAX, MIN, Layout
from cogra.runtime.compiled.scratch import take

# Op codes of a variable's contribution program (see coarse_grained.apply_contributions).
OP_CNT, OP_SUM_INT, OP_SUM_FLOAT, OP_NN, OP_MIN, OP_MAX = range(6)

FITS_UNSIGNED = 2.0**64 * (1 - 1e-6)
"""A count whose |x|-bound is below this is its residue modulo 2**64 (the bound's own
relative error is far below the margin)."""
FITS_SIGNED = 2.0**63 * (1 - 1e-6)
SURELY_TOO_BIG = 2.0**64 * (1 + 1e-6)
TINY = 2.0**-900
UNDECIDED = object()
"""Decoding could not prove the value: re-run the window exactly."""

UNFILLED_POISON = False
"""Tests set this: buffers the kernels are trusted to write before they read them
(:meth:`KernelOut.unfilled`, the ring kernel's shared cache) are then filled with garbage."""

MIN_KEY_IDENTITY = np.iinfo(np.int64).max
MAX_KEY_IDENTITY = np.iinfo(np.int64).min


class Unsupported(Exception):
    """The query or data needs the exact Python path (the reason is the message)."""


@dataclass
class KernelOut:
    """What a kernel writes per window: the finished-trend row of every channel.

    ``i`` uint64 [w, n_i], ``f`` float64 [w, n_f] (scaled by ``2**-e``), ``x`` int64
    [w, n_x], ``e`` int64 [w] the window's exponent, ``r`` bool [w]: whether any trend
    finished (a window without one has no result row).

    A sliding query's sharing kernel evaluates a window over the same events as the window
    before it only once (:mod:`cogra.runtime.compiled.windows.sliding`): its rows are *shared*, and
    ``row_first`` says by which windows.
    """

    i: np.ndarray
    f: np.ndarray
    x: np.ndarray
    e: np.ndarray
    r: np.ndarray
    row_first: np.ndarray | None = None
    """Shared rows: row ``d`` holds the channels of the consecutive windows ``row_first[d]``
    to ``row_first[d + 1] - 1`` (one more entry than rows: the number of windows).  None:
    row ``w`` is window ``w``'s."""

    @property
    def windows(self) -> int:
        """The number of windows (rows, where they are not shared)."""
        return len(self.e) if self.row_first is None else int(self.row_first[-1])

    def rows_of_windows(self) -> np.ndarray:
        """Each window's row (int64)."""
        if self.row_first is None:
            return np.arange(len(self.e))
        return np.repeat(np.arange(len(self.e)), np.diff(self.row_first))

    def window_of_row(self, row: int) -> int:
        """The first window whose channels row ``row`` holds."""
        return row if self.row_first is None else int(self.row_first[row])

    def per_window(self) -> "KernelOut":
        """These channels with a row per window: itself, or a copy where rows are shared
        (for the consumers that read them by window: the engine's row path)."""
        if self.row_first is None:
            return self
        rows = self.rows_of_windows()
        return KernelOut(self.i[rows], self.f[rows], self.x[rows], self.e[rows], self.r[rows])

    @classmethod
    def zeros(cls, w: int, chan: "ChannelLayout") -> "KernelOut":
        return cls(np.zeros((w, max(1, chan.n_i)), np.uint64), np.zeros((w, max(1, chan.n_f)), np.float64),
                   np.zeros((w, chan.n_x), np.int64), np.zeros(w, np.int64), np.zeros(w, np.bool_))

    @classmethod
    def unfilled(cls, w: int, chan: "ChannelLayout", pool: dict | None = None) -> "KernelOut":
        """As :meth:`zeros`, *uninitialised*: for kernels that write every row (or mark
        it to be redone).  A block of a sliding query's windows is ~12 MB of channels,
        reused block after block (from ``pool``, :mod:`cogra.runtime.compiled.scratch`, where
        given: then nothing of it may outlive the block), where zeroing it is a memset
        each time (a Spark worker's q2: ~2% of its time).
        Tests fill it with garbage (:data:`UNFILLED_POISON`), so a row no kernel wrote
        changes results."""
        out = cls(take(pool, "out.i", (w, max(1, chan.n_i)), np.uint64),
                  take(pool, "out.f", (w, max(1, chan.n_f)), np.float64),
                  take(pool, "out.x", (w, chan.n_x), np.int64), take(pool, "out.e", (w,), np.int64),
                  take(pool, "out.r", (w,), np.bool_))
        if chan.n_i == 0:  # the placeholder column no kernel writes
            out.i.fill(0)
        if chan.n_f == 0:
            out.f.fill(0.0)
        if UNFILLED_POISON:
            out.i[:, :chan.n_i] = np.uint64(0xDEADBEEFDEADBEEF)
            out.f[:, :chan.n_f] = np.nan
            out.x.fill(np.iinfo(np.int64).min // 3)
            out.e.fill(np.iinfo(np.int64).min // 5)
            out.r.fill(True)
        return out

    def put(self, where: np.ndarray, other: "KernelOut") -> None:
        """Overwrite rows ``where`` with ``other``'s rows (in order)."""
        for mine, theirs in ((self.i, other.i), (self.f, other.f), (self.x, other.x),
                             (self.e, other.e), (self.r, other.r)):
            mine[where] = theirs


@dataclass(frozen=True)
class ChannelLayout:
    n_i: int
    n_f: int
    n_x: int
    program: np.ndarray
    """int64 [n_ops, 6]: (variable, op, attribute, a, b, c); an integer sum's ``c`` (its
    |x|-bound channel) is -1 where its values are never negative (:func:`channel_layout`)."""
    x_is_min: np.ndarray
    """bool [n_x]: MIN (True) or MAX (False) per extreme slot."""
    slot_map: tuple[tuple, ...]
    """Per Layout slot: (kind, i index, f index, extra f index or x index[, low limb's i, f, bound f])."""
    attributes: tuple[str, ...]


SPLIT_SUFFIX = "#lo"
SPLIT_SHIFT = 32
SQUARE_SUFFIX = "#sq"
"""The synthetic attributes ``attr#sq0``, ``attr#sq1``, ...: the 32-bit limbs of each
value's exact square (:func:`cogra.runtime.compiled.attribute_columns.square_limbs`), limb
``j`` weighing ``2**(32 j)``; a spread's ``sq`` slot sums each in a modular slot of its own."""
INTEGER_KINDS = ("int", "isum", "fsplit", "sqlimbs")
"""Slot kinds held exactly modulo 2**64, limb by limb (:func:`slot_limbs`)."""


def square_attribute(attr: str, limb: int) -> str:
    """The synthetic attribute of limb ``limb`` of ``attr``'s squares."""
    return f"{attr}{SQUARE_SUFFIX}{limb}"


def base_attribute(attr: str) -> str:
    """The attribute a synthetic limb attribute (``#lo``, ``#sqJ``) is read from."""
    if attr.endswith(SPLIT_SUFFIX):
        return attr[:-len(SPLIT_SUFFIX)]
    at = attr.rfind(SQUARE_SUFFIX)
    if at > 0 and attr[at + len(SQUARE_SUFFIX):].isdigit():
        return attr[:at]
    return attr


def slot_limbs(entry: tuple) -> list[tuple[int, int, int]]:
    """An integer slot's limbs as ``(modular i, approximation f, |x|-bound f)``, high limb
    first: one for ``int`` (whose approximation is its bound) and ``isum``, two for
    ``fsplit`` (the value is ``hi * 2**32 + lo``), ``L`` for ``sqlimbs`` (never negative:
    each limb's approximation is its bound; the value is ``sum(limb_j * 2**(32 j))``)."""
    kind, ii, fi, extra = entry[:4]
    if kind == "sqlimbs":
        return [(ii + j, fi + j, fi + j) for j in reversed(range(extra))]
    limbs = [(ii, fi, fi if kind == "int" else extra)]
    if kind == "fsplit":
        limbs.append(tuple(entry[4:7]))
    return limbs


def limb_weights(entry: tuple) -> list[int]:
    """The weight of each of :func:`slot_limbs`' limbs, in the same order."""
    return [1 << (SPLIT_SHIFT * j) for j in reversed(range(len(slot_limbs(entry))))]


def channel_layout(layout: Layout, table_schema: pa.Schema,
                   split: frozenset[str] = frozenset(),
                   inexact: frozenset[str] = frozenset(),
                   never_negative: frozenset[str] = frozenset(),
                   approximate: frozenset[int] = frozenset(),
                   square_limbs: tuple[tuple[str, int], ...] = ()) -> ChannelLayout:
    """Slots to channels.

    Float attributes are summed as exact scaled integers ``x * 2**k`` (as the Python
    executors do).  Where those exceed int64 they are ``split`` into two exact limbs,
    ``hi * 2**32 + lo``, each summed in its own modular slot (the low limb reads the
    synthetic attribute ``attr#lo``); only attributes spanning more than 2**93 are
    ``inexact`` -- summed in double, and decoded exactly only through the fallback.

    An integer sum over values that are ``never_negative`` keeps no |x|-bound channel of
    its own: the bound would be the same products of the same values as the
    approximation, bit for bit, so the slot names the approximation as its bound and
    the op's bound index is -1 (the kernels skip it).  A split sum's low limb is never
    negative, whatever the data.  Each channel saved is work in every kernel: a sliding
    window's state is updated, composed, copied and emitted channel by channel.

    The ``approximate`` slots (``Layout.ratio_only``: AVG's parts, a SUM's non-null count,
    an unreturned trend count; sums only over values that are never negative, which cannot
    cancel) keep no modular channel at all: a count is one double
    (``fcount``), a sum the double sum of the raw values with its |x|-bound (``fapprox``,
    op ``OP_SUM_FLOAT`` with modular index -1).  Doubles are exact while the bound stays
    below 2**53 (decoded exactly then), and an AVG of approximations is within ~1e-15 of
    the quotient.  Modular channel 0 is the trend count every other modular channel is
    multiplied from; with no exact slot it is computed by the kernels that compute every
    channel and read by nothing, and no variable has it live (q3's kept A: one channel
    instead of two in each Fenwick node, B's eight channels down to three).

    A spread's ``sq`` slot (the sum of the values' exact squares) is ``sqlimbs``: the
    squares' 32-bit limbs (``square_limbs``: how many per attribute, from the widest
    value) each summed in a modular slot over its synthetic attribute ``attr#sqJ`` --
    never negative, so one double each.  The value is exact while each limb's sum stays
    below 2**63; beyond, the window re-runs exactly (a spread reads no approximation:
    ``Layout.exact_always``).
    """
    n_i = n_f = n_x = 0
    slot_map: list[tuple[str, int, int, int]] = []
    ops_all: list[tuple[int, int, int, int, int, int]] = []
    limbs_of = dict(square_limbs)
    attrs = (list(layout.attributes) + [a + SPLIT_SUFFIX for a in sorted(split)]
             + [square_attribute(a, j) for a in sorted(limbs_of) for j in range(limbs_of[a])])
    x_is_min: list[bool] = []

    for idx, slot in enumerate(layout.slots):
        a = attrs.index(slot.attribute) if slot.attribute else -1
        is_float = slot.attribute in inexact
        # One op per state of the slot's variable (a repeated variable has several).
        ops = _PerState(ops_all, slot.states)
        if idx == 0 and idx in approximate:
            slot_map.append(("fcount", -1, 0, 0))  # modular channel 0 stays: see above
            n_i += 1
            n_f += 1
        elif slot.role in ("cnt", "nn") and idx in approximate:
            slot_map.append(("fcount", -1, n_f, n_f))
            ops.append((OP_CNT if slot.role == "cnt" else OP_NN, a, -1, n_f, -1))
            n_f += 1
        elif slot.role == "sum" and idx in approximate:
            raw = attrs.index(slot.attribute)
            f, bound, op_bound, n_f = _sum_floats(n_f, slot.attribute in never_negative)
            slot_map.append(("fapprox", -1, f, bound))
            ops.append((OP_SUM_FLOAT, raw, -1, f, op_bound))
        elif slot.role in ("count", "cnt", "nn"):
            slot_map.append(("int", n_i, n_f, -1))
            if slot.role == "cnt":
                ops.append((OP_CNT, -1, n_i, n_f, -1))
            elif slot.role == "nn":
                ops.append((OP_NN, a, n_i, n_f, -1))
            n_i += 1
            n_f += 1
        elif slot.role == "sq":
            count = limbs_of[slot.attribute]
            slot_map.append(("sqlimbs", n_i, n_f, count))
            for j in range(count):
                ops.append((OP_SUM_INT, attrs.index(square_attribute(slot.attribute, j)), n_i + j, n_f + j, -1))
            n_i += count
            n_f += count
        elif slot.role == "sum" and slot.attribute in split:
            lo = attrs.index(slot.attribute + SPLIT_SUFFIX)
            hi_f, hi_bound, hi_op, n_f = _sum_floats(n_f, slot.attribute in never_negative)
            lo_f, lo_bound, lo_op, n_f = _sum_floats(n_f, True)
            slot_map.append(("fsplit", n_i, hi_f, hi_bound, n_i + 1, lo_f, lo_bound))
            ops.append((OP_SUM_INT, a, n_i, hi_f, hi_op))
            ops.append((OP_SUM_INT, lo, n_i + 1, lo_f, lo_op))
            n_i += 2
        elif slot.role == "sum" and not is_float:
            f, bound, op_bound, n_f = _sum_floats(n_f, slot.attribute in never_negative)
            slot_map.append(("isum", n_i, f, bound))
            ops.append((OP_SUM_INT, a, n_i, f, op_bound))
            n_i += 1
        elif slot.role == "sum":
            slot_map.append(("fsum", -1, n_f, n_f + 1))
            ops.append((OP_SUM_FLOAT, a, -1, n_f, n_f + 1))
            n_f += 2
        elif slot.role == "inf":
            # Non-finite inputs send the window to the exact path, so this slot stays 0.0.
            slot_map.append(("inf", -1, -1, -1))
        elif slot.kind in (MIN, MAX):
            slot_map.append(("x", -1, -1, n_x))
            ops.append((OP_MIN if slot.kind == MIN else OP_MAX, a, n_x, -1, -1))
            x_is_min.append(slot.kind == MIN)
            n_x += 1
        else:  # pragma: no cover - every slot kind is handled above
            raise Unsupported(f"slot {slot}")
    assert layout.slots[0].role == "count" and slot_map[0][1] in (0, -1) and slot_map[0][2] == 0 and n_i >= 1
    program = np.array(sorted(ops_all), dtype=np.int64).reshape(-1, 6)
    return ChannelLayout(n_i, n_f, n_x, program, np.array(x_is_min, dtype=bool),
                         tuple(slot_map), tuple(attrs))


class _PerState:
    """Appends a slot's op ``(op, attr, s1, s2, s3)`` once per state of its variable."""

    def __init__(self, out: list, states: tuple[int, ...]):
        self.out, self.states = out, states

    def append(self, op: tuple[int, int, int, int, int]) -> None:
        self.out.extend((v, *op) for v in self.states)


def _sum_floats(n_f: int, never_negative: bool) -> tuple[int, int, int, int]:
    """An integer sum's float channels from ``n_f`` on: (approximation, |x|-bound, the
    bound index its op writes (-1: none, the approximation is the bound), next free)."""
    if never_negative:
        return n_f, n_f, -1, n_f + 1
    return n_f, n_f + 1, n_f + 1, n_f + 2


def float_key(values: np.ndarray) -> np.ndarray:
    """Order-preserving int64 keys of float64 values (NaN canonicalised above +inf)."""
    v = np.where(np.isnan(values), np.nan, values).astype(np.float64)
    bits = v.view(np.int64)
    return np.where(bits >= 0, bits, bits ^ np.int64(0x7FFFFFFFFFFFFFFF))


def floats_from_keys(keys: np.ndarray) -> np.ndarray:
    """Inverse of :func:`float_key` for an array."""
    k = np.asarray(keys, dtype=np.int64)
    bits = np.where(k >= 0, k, k ^ np.int64(0x7FFFFFFFFFFFFFFF))
    return bits.view(np.float64)


def float_from_key(key: int) -> float:
    k = np.int64(key)
    bits = k if k >= 0 else k ^ np.int64(0x7FFFFFFFFFFFFFFF)
    return float(np.array([bits], dtype=np.int64).view(np.float64)[0])


def _unsigned(v: int) -> int:
    return int(v) & 0xFFFFFFFFFFFFFFFF


def _signed(v: int) -> int:
    v = _unsigned(v)
    return v - (1 << 64) if v >= 1 << 63 else v


CANCELLATION_LIMIT = 1e3
"""A double sum is used only when sum(|x|) / |sum(x)| stays below this: its relative
error is then at most about events * 2**-53 * this ratio."""


def _trustworthy(approx: float, bound: float) -> bool:
    return approx != 0.0 and bound <= CANCELLATION_LIMIT * abs(approx)


def _scaled(approx: float, exponent: int) -> float:
    try:
        return math.ldexp(approx, exponent)
    except OverflowError:
        return math.inf


def decode(
    chan: ChannelLayout,
    layout: Layout,
    i_vals: np.ndarray,
    f_vals: np.ndarray,
    x_vals: np.ndarray,
    exponent: int,
    x_decoders: list,
    scales: dict[str, int],
) -> list | object:
    """Exact slot values (as the Python executors hold them) or :data:`UNDECIDED`.

    With ``exponent > 0`` every float was scaled down by ``2**exponent`` and parts
    below ``2**(exponent - 1074)`` were lost: a value whose scaled approximation is
    tiny cannot be trusted and sends the window to the exact path.
    """
    state = layout.zero()
    if not np.isfinite(f_vals).all():
        return UNDECIDED  # cannot happen with a sound rescale bound; never guess
    for idx, entry in enumerate(chan.slot_map):
        kind, ii, fi, extra = entry[:4]
        slot = layout.slots[idx]
        if kind in INTEGER_KINDS:
            value = _exact_or_approx(kind, i_vals, f_vals, entry, exponent,
                                     approximation_ok=idx not in layout.exact_always)
            if value is UNDECIDED:
                return UNDECIDED
            state[idx] = value
        elif kind in ("fcount", "fapprox") and idx in layout.exact_always:
            return UNDECIDED  # (not reached: such slots are never approximate)
        elif kind in ("fcount", "fapprox"):
            scale = scales[slot.attribute] if kind == "fapprox" else 1
            value = approximate_value(float(f_vals[fi]), float(f_vals[extra]), exponent, scale)
            if value is UNDECIDED:
                return UNDECIDED
            state[idx] = value
        elif kind == "fsum":
            approx, bound = float(f_vals[fi]), float(f_vals[extra])
            if exponent == 0 or abs(approx) < TINY or not _trustworthy(approx, bound):
                # Doubles are exact only through the fallback; past 2**600 the
                # approximation is all anyone can use (and AVG only needs the ratio).
                return UNDECIDED
            state[idx] = Fraction(approx) * (1 << exponent) * scales[slot.attribute]
        elif kind == "x":
            key = int(x_vals[extra])
            identity = MIN_KEY_IDENTITY if slot.kind == MIN else MAX_KEY_IDENTITY
            state[idx] = None if key == identity else x_decoders[extra](key)
        # "inf" slots stay 0.0
    return state


DOUBLE_EXACT = 2.0**53 * (1 - 1e-6)
"""A double sum of integers (counts; raw values times their scale) whose |x|-bound is
below this never rounded: every partial value was an integer below 2**53."""


def approximate_value(approx: float, bound: float, exponent: int, scale: int):
    """An ``fcount`` / ``fapprox`` slot in the units of the exact slots (a sum of raw
    values times ``scale``): exact while the bound proves no rounding, else the
    approximation where the bound shows no cancellation, else :data:`UNDECIDED`."""
    if exponent and bound < TINY:  # rescaled below the doubles' resolution
        return 0 if approx == 0.0 and bound == 0.0 else UNDECIDED
    if exponent == 0 and bound * scale < DOUBLE_EXACT:
        value = Fraction(approx) * scale
        return int(value) if value.denominator == 1 else UNDECIDED
    if not _trustworthy(approx, bound):
        return UNDECIDED
    return int(Fraction(approx) * scale * (1 << exponent))


def _exact_or_approx(kind: str, i_vals, f_vals, entry: tuple, exponent: int, approximation_ok: bool = True):
    """An integer slot (:func:`slot_limbs`' limbs) exactly, or provably huge (then its
    approximation, unless not ``approximation_ok``: :data:`UNDECIDED`)."""
    limbs = slot_limbs(entry)
    weights = limb_weights(entry)
    bounds = [float(f_vals[b]) for _, _, b in limbs]
    if exponent and all(b < TINY for b in bounds):
        if all(b == 0.0 for b in bounds) and all(int(i_vals[i]) == 0 for i, _, _ in limbs):
            return 0
        return UNDECIDED
    fits = FITS_UNSIGNED if kind == "int" else FITS_SIGNED
    if all(_scaled(b, exponent) < fits for b in bounds):
        conv = _unsigned if kind == "int" else _signed
        return sum(w * conv(int(i_vals[i])) for w, (i, _, _) in zip(weights, limbs))
    if not approximation_ok:
        return UNDECIDED
    approx = sum(float(w) * float(f_vals[f]) for w, (_, f, _) in zip(weights, limbs))
    bound = sum(float(w) * b for w, b in zip(weights, bounds))
    if kind != "int" and not _trustworthy(approx, bound):
        return UNDECIDED
    if abs(_scaled(approx, exponent)) <= SURELY_TOO_BIG * max(weights):
        return UNDECIDED
    # Far beyond int64: the approximation is enough (the output reports the overflow,
    # and AVG only needs the ratio).
    return int(Fraction(approx) * (1 << exponent))


def decode_many(chan: ChannelLayout, layout: Layout, out_i: np.ndarray, out_f: np.ndarray,
                out_x: np.ndarray, out_e: np.ndarray, out_r: np.ndarray, x_decoders: list,
                scales: dict[str, int], x_vectorised: list) -> list:
    """:func:`decode` for every window, vectorised for the common case.

    A window is *simple* when nothing was rescaled and every integer slot's bound proves
    its residue exact; its slots then come straight from the uint64 arrays.  Other
    windows go through :func:`decode` one by one.  ``x_vectorised[k]`` decodes a whole
    array of MIN/MAX keys (or is None to decode per value).
    """
    w = len(out_r)
    simple = (out_e == 0) & out_r & np.isfinite(out_f).all(axis=1)
    columns: list = []
    for idx, entry in enumerate(chan.slot_map):
        kind = entry[0]
        if kind in INTEGER_KINDS:
            fits = FITS_UNSIGNED if kind == "int" else FITS_SIGNED
            for _, _, b in slot_limbs(entry):
                simple &= out_f[:, b] < fits
            if kind == "int":
                columns.append(out_i[:, entry[1]].tolist())
            elif kind == "isum":
                columns.append(out_i[:, entry[1]].view(np.int64).tolist())
            elif kind == "sqlimbs":
                parts = [out_i[:, i].view(np.int64).tolist() for i, _, _ in slot_limbs(entry)]
                weights = limb_weights(entry)
                columns.append([sum(w * p for w, p in zip(weights, limbs)) for limbs in zip(*parts)])
            else:
                hi = out_i[:, entry[1]].view(np.int64).tolist()
                lo = out_i[:, entry[4]].view(np.int64).tolist()
                columns.append([(h << SPLIT_SHIFT) + l for h, l in zip(hi, lo)])
        elif kind == "fcount":
            counts = out_f[:, entry[2]]
            simple &= counts < DOUBLE_EXACT  # (and not NaN)
            columns.append(np.where(counts < DOUBLE_EXACT, counts, 0.0).astype(np.int64).tolist())
        elif kind in ("fsum", "fapprox"):
            simple &= False
            columns.append(None)
        elif kind == "x":
            k = entry[3]
            slot = layout.slots[idx]
            keys = out_x[:, k]
            identity = MIN_KEY_IDENTITY if slot.kind == MIN else MAX_KEY_IDENTITY
            empty = (keys == identity).tolist()
            if x_vectorised[k] is not None:
                vals = x_vectorised[k](keys)
            else:
                vals = [x_decoders[k](int(key)) if not e else None for key, e in zip(keys.tolist(), empty)]
            columns.append([None if e else v for v, e in zip(vals, empty)])
        else:  # "inf"
            columns.append([0.0] * w)
    states: list = [None] * w
    simple_list = simple.tolist()
    ready = out_r.tolist()
    for k in range(w):
        if not ready[k]:
            continue
        if simple_list[k]:
            states[k] = [col[k] for col in columns]
        else:
            states[k] = decode(chan, layout, out_i[k], out_f[k], out_x[k], int(out_e[k]),
                               x_decoders, scales)
    return states
