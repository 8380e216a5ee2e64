"""A floating attribute's column as the kernels read it, in one compiled pass each: its
summary (the power of two that makes every value an integer, which is the exact sums'
scale, and its range), and the doubles, scaled integers and order keys the kernels take.

numpy needs a pass per step (frexp, the mantissa, its trailing zeros, the maximum; then
the copy, the product, the cast, the order keys): over 3M prices ~35 ms for the scale
and ~30 ms for the columns, against ~4 and ~6 ms here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pyarrow as pa

from cogra.runtime.arrow_arrays import empty, one_array
from cogra.runtime.compiled.jit import njit

NAN_BITS = int(np.array([np.nan]).view(np.int64)[0])
"""The bits every NaN becomes in an order key (above +inf)."""


@njit(cache=True)
def _summary(x, bits, valid, doubles):
    """Over the finite values of ``x`` (``bits``: the same doubles as int64; ``valid[i]``,
    or all when ``valid`` is empty): the most binary digits after the point (-1 where no
    value has any), the smallest value, the largest magnitude, and how many there are.
    Where ``doubles`` is not empty, ``x`` is copied into it on the way, NULLs as 0.0.

    A non-zero double is ``M * 2**E`` (``M`` the 53-bit mantissa with its implicit bit);
    its digits after the point are ``-E - trailing_zeros(M)``, at most ``-E``.  The
    trailing zeros are counted only where ``-E`` could raise the maximum: branches that
    depend on the mantissa's low bits are as random as the data."""
    check = valid.shape[0] > 0
    copy = doubles.shape[0] > 0
    need = -1
    low = np.inf
    high = 0.0
    count = 0
    for i in range(x.shape[0]):
        v = x[i]
        if check and not valid[i]:
            if copy:
                doubles[i] = 0.0
            continue
        if copy:
            doubles[i] = v
        if not math.isfinite(v):
            continue
        count += 1
        low = min(low, v)
        high = max(high, abs(v))
        b = bits[i]
        field = (b >> 52) & 0x7FF
        mant = b & 0xFFFFFFFFFFFFF
        if field == 0 and mant == 0:
            continue  # zero
        if field == 0:
            e = -1074
        else:
            e = field - 1075
            mant |= 0x10000000000000
        if -e <= need:
            continue
        tz = 0
        while (mant & 1) == 0:
            mant >>= 1
            tz += 1
        if -e - tz > need:
            need = -e - tz
    return need, low, high, count


@dataclass(frozen=True)
class FloatStats:
    """What the executors ask of a floating attribute's finite values, from one compiled
    pass: the exact sums' scale, whether any is negative, the largest magnitude."""

    scale: int
    """The smallest power of two ``k`` such that ``x * k`` is an integer for every value."""
    smallest: float | None
    """None where no value is finite."""
    largest: float
    """max |x| (0.0 where no value is finite)."""
    all_finite: bool = True
    """Whether every value that is not NULL is finite."""
    doubles: np.ndarray | None = field(default=None, compare=False, repr=False)
    """The values as doubles, NULLs as 0.0, where the pass was asked to keep them
    (``float_stats(.., keep_doubles=True)``): the kernels' ``a_flt`` row, copied while
    the values were read anyway -- a second pass read 24 MB per 3M values again."""


def float_stats(col: pa.ChunkedArray | pa.Array, keep_doubles: bool = False) -> FloatStats:
    if isinstance(col, pa.ChunkedArray):
        col = one_array(col)
    x = np.ascontiguousarray(col.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
    valid = (np.zeros(0, np.bool_) if not col.null_count
             else np.asarray(col.is_valid().to_numpy(zero_copy_only=False), np.bool_))
    doubles = empty(len(x), np.float64) if keep_doubles and len(x) else _NO_DOUBLES
    need, low, high, count = _summary(x, x.view(np.int64), valid, doubles)
    return FloatStats(1 << max(0, int(need)), float(low) if count else None, float(high),
                      int(count) == len(col) - col.null_count, doubles if keep_doubles and len(x) else None)


_NO_DOUBLES = np.zeros(0, np.float64)


@njit(cache=True)
def _float_columns(x, bits, scale, want_flt, want_int, want_key, nan_bits, a_flt, a_int, a_key):
    """a_flt = x, a_int = x * scale, a_key = order keys of x, each only where wanted."""
    for i in range(x.shape[0]):
        v = x[i]
        if want_flt:
            a_flt[i] = v
        if want_int:
            a_int[i] = np.int64(v * scale)
        if want_key:
            b = bits[i]
            if v != v:
                b = nan_bits
            a_key[i] = b if b >= 0 else b ^ np.int64(0x7FFFFFFFFFFFFFFF)


def float_columns(x: np.ndarray, scale: float, want_flt: bool, want_int: bool, want_key: bool,
                  a_flt: np.ndarray, a_int: np.ndarray, a_key: np.ndarray) -> None:
    """Fill the kernels' rows of one floating attribute that its operations read: the
    doubles (``want_flt``), the scaled integers (``want_int``: exact sums, ``x * scale``
    below 2**62), the order keys (``want_key``: MIN/MAX).  A row no operation reads is
    not written (whether the values are finite, :class:`FloatStats` says)."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    _float_columns(x, x.view(np.int64), float(scale), want_flt, want_int, want_key, np.int64(NAN_BITS),
                   a_flt, a_int, a_key)


def attribute_scales(table: pa.Table, attributes: Sequence[str],
                     stats: dict[str, FloatStats] | None = None) -> dict[str, int]:
    """Per attribute, the factor that makes its values integers in the ``sum`` slots
    (``stats``: where a floating attribute's :class:`FloatStats` are kept, to be reused)."""
    scales = {}
    for attr in attributes:
        t = table.column(attr).type
        if pa.types.is_floating(t):
            found = stats.get(attr) if stats is not None else None
            if found is None:
                found = float_stats(table.column(attr))
                if stats is not None:
                    stats[attr] = found
            scales[attr] = found.scale
        elif pa.types.is_decimal(t):
            scales[attr] = 10 ** t.scale
        else:
            scales[attr] = 1
    return scales


LIMB_MASK = np.uint64(0xFFFFFFFF)
LIMB_BITS = np.uint64(32)


def magnitude_limbs(hi: np.ndarray, lo: np.ndarray | None = None) -> list[np.ndarray]:
    """``|v|`` as 32-bit limbs (uint64 arrays, lowest first) of ``v = hi`` (int64) or, for a
    float sum split in two, ``v = hi * 2**32 + lo`` with ``0 <= lo < 2**32``."""
    hi = np.asarray(hi, np.int64)
    neg = hi < 0
    if lo is None:
        # (two's complement: exact for int64's minimum too)
        mag = np.where(neg, ~hi.view(np.uint64) + np.uint64(1), hi.view(np.uint64))
        return [mag & LIMB_MASK, mag >> LIMB_BITS]
    lo = np.asarray(lo, np.int64)
    borrow = neg & (lo > 0)  # |v| = (-hi - 1) * 2**32 + (2**32 - lo)
    high = np.where(neg, -hi - borrow, hi).view(np.uint64)
    low = np.where(borrow, np.int64(1 << 32) - lo, lo).view(np.uint64)
    return [low, high & LIMB_MASK, high >> LIMB_BITS]


def square_limbs(parts: list[np.ndarray], count: int) -> list[np.ndarray]:
    """The exact squares of the values whose magnitudes ``parts`` holds
    (:func:`magnitude_limbs`), as ``count`` 32-bit limbs (int64 arrays, lowest first):
    what a spread's ``sq`` slot sums, limb by limb.  Each product of two limbs is below
    2**64; its halves go to their limbs, which then carry upwards."""
    n = len(parts[0]) if parts else 0
    acc = [np.zeros(n, np.uint64) for _ in range(2 * len(parts) + 1)]
    for i, a in enumerate(parts):
        for j in range(i, len(parts)):
            p = a * parts[j]
            low, high = p & LIMB_MASK, p >> LIMB_BITS
            for _ in range(1 if i == j else 2):  # (2ab: a cross product counts twice)
                acc[i + j] += low
                acc[i + j + 1] += high
    for k in range(len(acc) - 1):
        acc[k + 1] += acc[k] >> LIMB_BITS
        acc[k] &= LIMB_MASK
    if count > len(acc) or any(a.any() for a in acc[count:]):
        raise ValueError(f"{len(parts)} limbs square into {len(acc)}, not {count}")
    return [a.view(np.int64) for a in acc[:count]]


__all__ = ["NAN_BITS", "FloatStats", "attribute_scales", "float_columns", "float_stats", "magnitude_limbs",
           "square_limbs"]
