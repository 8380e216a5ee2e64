"""Which of the pattern's event types each row has: one compiled pass over the type
column's bytes.

The alternatives each cost a pass per named type or a hash per row: a string comparison
per type (``pyarrow.compute.equal``, ~6 ms per type over 3M rows) or a dictionary
encoding of the column (~25 ms over 3M rows of three values).  Comparing each row's
bytes with the few named types is ~5 ms.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cogra.runtime.arrow_arrays import empty, one_array
from cogra.runtime.compiled.jit import njit

MAX_NAMED = 120
"""More named types than this go through a dictionary encoding (codes are int8)."""
ARROW_COMPARED = 3
"""Up to this many named types, one longer than 7 bytes, are compared by Arrow, one pass
per name; more go through :func:`_codes`' byte loop."""


@njit(cache=True, inline="always")
def _descends(times, i):
    """Whether row ``i``'s time is before row ``i - 1``'s (never where ``times`` is empty:
    the order not asked for)."""
    return times.shape[0] > 0 and i > 0 and times[i] < times[i - 1]


@njit(cache=True)
def _codes(offsets, data, name_offsets, name_data, out, seen, times):
    """``out[i]``: the index of row ``i``'s string among the names, or their count;
    ``seen[c]`` whether a row has code ``c`` (a store, not a count: counting serialises
    rows of one type on the counter).  Returns whether ``times`` (the rows' times, or
    empty: not checked) never decrease: the table's order, checked while its rows are
    read anyway (a pass of its own read 24 MB per 3M rows again)."""
    k = name_offsets.shape[0] - 1
    descents = False
    for i in range(offsets.shape[0] - 1):
        descents |= _descends(times, i)
        a = offsets[i]
        length = offsets[i + 1] - a
        code = k
        for t in range(k):
            na = name_offsets[t]
            if name_offsets[t + 1] - na != length:
                continue
            j = 0
            while j < length and data[a + j] == name_data[na + j]:
                j += 1
            if j == length:
                code = t
                break
        out[i] = code
        seen[code] = True
    return not descents


@njit(cache=True)
def _short_codes(offsets, data, words, out, seen, times):
    """:func:`_codes` where every name has at most 7 bytes: each row's bytes and length in
    one word, compared with the names' words without branches (on types in random order,
    the byte comparisons' branches mispredict: 3M rows, 23 -> 5 ms)."""
    k = words.shape[0]
    descents = False
    for i in range(offsets.shape[0] - 1):
        descents |= _descends(times, i)
        a = offsets[i]
        length = offsets[i + 1] - a
        word = np.int64(-1)
        if length <= 7:
            word = np.int64(length) << np.int64(56)
            for j in range(length):
                word |= np.int64(data[a + j]) << np.int64(8 * j)
        code = k
        for t in range(k):
            code = t if word == words[t] else code
        out[i] = code
        seen[code] = True
    return not descents


@njit(cache=True)
def _one_byte_codes(offsets, data, byte_codes, out, seen, times):
    """:func:`_short_codes` where every string is one byte: a table lookup per row
    (``byte_codes``, by byte), the offsets only checked -- as a sum without branches, as
    the pass cannot stop early anyway.  Returns False where some string is not one byte
    (``out`` then partly written).  Type columns of single letters (generated streams)
    take ~1 ms per 3M rows here against ~4 ms.  Also returns the order of ``times`` (see
    :func:`_codes`)."""
    a = offsets[0]
    off = np.int64(0)
    descents = False
    for i in range(out.shape[0]):
        c = byte_codes[data[a + i]]
        out[i] = c
        seen[c] = True
        off |= np.int64(offsets[i + 1]) - (a + i + 1)
        descents |= _descends(times, i)
    return off == 0, not descents


class TypeCodes(NamedTuple):
    """What :func:`type_codes` finds in one pass over a type column."""

    codes: np.ndarray
    """int8 per row: its type's index among the names (``len(names)``: another type)."""
    seen: np.ndarray
    """bool per index: whether some row has it."""
    ordered: bool | None
    """Whether the rows' times never decrease (None: not checked)."""


def type_codes(column: pa.ChunkedArray | pa.Array, names: list[str],
               times: np.ndarray | None = None) -> TypeCodes | None:
    """Per row, the index of its type among ``names`` (``len(names)`` for another type),
    as int8, whether some row has each index (found in the same pass: a
    ``numpy.bincount`` of the int8 codes widens them first, ~3 ms per 3M rows), and, where
    ``times`` (the rows' times) are given as int64 or float64, whether they never decrease
    (else None); None where this pass does not apply (not a plain string column, NULLs, or
    too many names): the caller encodes the column then."""
    if len(names) > MAX_NAMED:
        return None
    if isinstance(column, pa.ChunkedArray):
        column = one_array(column)
    if column.null_count or not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return None
    buffers = column.buffers()
    offsets = np.frombuffer(buffers[1], np.int64 if pa.types.is_large_string(column.type) else np.int32)
    offsets = offsets[column.offset:column.offset + len(column) + 1]
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    encoded = [n.encode() for n in names]
    n = len(column)
    checked = times is not None and times.dtype in (np.int64, np.float64) and len(times) == n
    order_of = times if checked else _NOT_CHECKED
    out = empty(n, np.int8)
    seen = np.zeros(len(names) + 1, np.bool_)
    if n and int(offsets[n]) - int(offsets[0]) == n:  # (a cheap first sign of one byte per string)
        byte_codes = np.full(256, len(names), np.int8)
        for code, e in enumerate(encoded):
            if len(e) == 1:
                byte_codes[e[0]] = code
        one_byte, ordered = _one_byte_codes(offsets, data, byte_codes, out, seen, order_of)
        if one_byte:
            return TypeCodes(out, seen, bool(ordered) if checked else None)
        seen[:] = False
    if all(len(e) <= 7 for e in encoded):
        words = np.array([(len(e) << 56) | int.from_bytes(e, "little") for e in encoded] or [-1], np.int64)
        ordered = _short_codes(offsets, data, words[:len(encoded)], out, seen, order_of)
    elif len(names) <= ARROW_COMPARED:
        # Longer names, few: Arrow's comparison per name (q1's one 11-byte type, 1M rows:
        # ~2 ms, against ~8 ms for the byte loop); the caller checks the order.
        out[:] = len(names)
        for code, name in enumerate(names):
            hit = pc.equal(column, pa.scalar(name, column.type)).to_numpy(zero_copy_only=False)
            out[hit] = code
            seen[code] = bool(hit.any())
        seen[len(names)] = bool((out == len(names)).any())
        return TypeCodes(out, seen, None)
    else:
        name_offsets = np.zeros(len(encoded) + 1, np.int64)
        name_offsets[1:] = np.cumsum([len(e) for e in encoded])
        name_data = np.frombuffer(b"".join(encoded) or b"\0", np.uint8)
        ordered = _codes(offsets, data, name_offsets, name_data, out, seen, order_of)
    return TypeCodes(out, seen, bool(ordered) if checked else None)


_NOT_CHECKED = np.zeros(0, np.int64)


__all__ = ["MAX_NAMED", "TypeCodes", "type_codes"]
