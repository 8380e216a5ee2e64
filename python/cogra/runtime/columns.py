"""Columns as the engine reads them: numpy views with validity, times as int64
microseconds, dense codes of key tuples and of event types.

Each function reads an Arrow column once and hands numpy arrays to the vectorised steps
and the kernels (:mod:`cogra.runtime.engine`, :mod:`cogra.runtime.stream`); they know
nothing of queries.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cogra.errors import DataError
from cogra.runtime.arrow_arrays import empty, one_array
from cogra.runtime.compiled.substream_split import short_string_codes, string_runs


def numpy_column(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(data, valid)`` for vectorised predicates; NULLs get a harmless filler."""
    if isinstance(col, pa.ChunkedArray):
        col = one_array(col)
    t = col.type
    if pa.types.is_dictionary(t):
        col = col.dictionary_decode()
        t = col.type
    valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_timestamp(t):
        col = col.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64())
    elif pa.types.is_date(t):
        col = col.cast(pa.date32()).cast(pa.int32())
    elif pa.types.is_decimal(t) and t.precision <= 15:
        col = col.cast(pa.float64())  # every such decimal is its own double, in order
    elif pa.types.is_decimal(t):
        # Beyond 15 digits two decimals may share a double: exact values (rarely used).
        data = np.empty(len(col), dtype=object)
        data[:] = [Fraction(0) if d is None else Fraction(d) for d in col.to_pylist()]
        return data, valid
    elif not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_string(t)
              or pa.types.is_large_string(t) or pa.types.is_boolean(t) or pa.types.is_null(t)):
        # Lists, structs, maps, binary ...: a condition may only ask IS [NOT] NULL of them
        # (binding rejects the rest), which reads ``valid`` alone.
        return np.zeros(len(col), dtype=bool), valid
    elif pa.types.is_floating(t) and t.bit_width == 16:
        col = col.cast(pa.float32())
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        # Through a dictionary: one Python str per distinct value, not per row (2M rows of
        # a few distinct values: ~2x faster than converting every row).
        enc = pc.dictionary_encode(pc.fill_null(col, ""))
        values = np.asarray(enc.dictionary.to_pylist(), dtype=object)
        data = values[enc.indices.to_numpy(zero_copy_only=False)]
    elif pa.types.is_boolean(col.type):
        data = np.asarray(pc.fill_null(col, False).to_numpy(zero_copy_only=False), dtype=bool)
    elif pa.types.is_null(col.type):
        data = np.zeros(len(col))
    else:
        data = pc.fill_null(col, 0).to_numpy(zero_copy_only=False)
    return data, valid


def micros(col: pa.ChunkedArray) -> np.ndarray:
    """Timestamps of any unit as int64 microseconds since the epoch, floored."""
    raw = col.cast(pa.int64()).to_numpy() if not isinstance(col, np.ndarray) else col
    factor = {"s": -1_000_000, "ms": -1000, "us": 1, "ns": 1000}[col.type.unit]
    raw = np.asarray(raw, dtype=np.int64)
    if factor < 0:
        limit = np.iinfo(np.int64).max // -factor
        if len(raw) and (raw.max() > limit or raw.min() < -limit):
            bad = int(raw.max() if raw.max() > limit else raw.min())
            raise DataError(f"timestamp {bad} ({col.type.unit}) is beyond the range of microsecond "
                            "timestamps (years 290,308 BC to 294,247 AD), which cogra computes in")
        return raw * -factor
    return raw // factor


def without_halves(table: pa.Table) -> pa.Table:
    """Half-precision columns as float32 (exact): Arrow's kernels have none for float16."""
    for i, field in enumerate(table.schema):
        if pa.types.is_float16(field.type):
            table = table.set_column(i, field.name, table.column(i).cast(pa.float32()))
    return table


def canonical_keys(table: pa.Table, names: Iterable[str]) -> pa.Table:
    """``table`` with its floating-point key columns ``names`` as Spark's GROUP BY compares
    them: -0.0 is 0.0, and every NaN one value (Arrow's encodings tell both zeros, and
    NaNs of other bits, apart)."""
    for name in names:
        col = table.column(name)
        if not (pa.types.is_float32(col.type) or pa.types.is_float64(col.type)):
            continue
        zero, nan = pa.scalar(0.0, col.type), pa.scalar(float("nan"), col.type)
        fixed = pc.if_else(pc.equal(col, zero), zero, col)
        fixed = pc.if_else(pc.is_nan(fixed), nan, fixed)
        table = table.set_column(table.schema.get_field_index(name), table.field(name), fixed)
    return table


def key_codes(table: pa.Table, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Dense int codes of the tuple of ``names`` per row (NULL is a value), and one
    representative row per code (to read the key's values back)."""
    if not names:
        return np.zeros(table.num_rows, np.int64), np.zeros(min(1, table.num_rows), np.int64)
    if len(names) == 1:
        col = table.column(names[0])
        grouped = _sorted_codes(col)
        if grouped is None and not pa.types.is_dictionary(col.type):
            grouped = _dictionary_codes(col)
        if grouped is not None:
            return grouped
    combined = np.zeros(table.num_rows, np.int64)
    radix = 1
    for name in names:
        enc = pc.dictionary_encode(one_array(table.column(name)))
        codes = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64) + 1
        width = len(enc.dictionary) + 1  # 0 is NULL
        if radix * width >= 2**62:  # too many combinations for one int64: compact first
            combined = np.unique(combined, return_inverse=True)[1].reshape(-1).astype(np.int64)
            radix = int(combined.max(initial=0)) + 1
        combined = combined * width + codes
        radix *= width
    # Dense codes 0..k-1 (in order of the combined dictionary codes), and the first row per code.
    seen = np.full(radix, -1, np.int64) if radix <= 4 * table.num_rows + 64 else None
    if seen is None:
        uniq, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
        return inverse.reshape(-1).astype(np.int64), first.astype(np.int64)
    rows = np.arange(table.num_rows, dtype=np.int64)
    seen[combined[::-1]] = rows[::-1]  # the last write per code is its first row
    present = np.flatnonzero(seen >= 0)
    dense = np.full(radix, -1, np.int64)
    dense[present] = np.arange(len(present))
    return dense[combined], seen[present]


def _dictionary_codes(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`key_codes` of one column that is not dictionary-typed: encoding it numbers its
    values densely in order of first appearance (NULL first, as the general path numbers
    them), so only the first row per code is left to find -- no combined codes, no dense
    renumbering (q3's company per sector, 21k rows: 0.72 -> 0.63 ms).  (A dictionary-typed
    column keeps its own dictionary, which may hold unused values: the general path.)"""
    arr = one_array(col)
    if (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)) and not arr.null_count and len(arr):
        offsets, data = _string_buffers(arr)
        codes, first, short = short_string_codes(offsets, data)
        if short:
            return codes, first
    enc = pc.dictionary_encode(arr)
    if enc.null_count:
        codes = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64) + 1
        k = len(enc.dictionary) + 1
    else:
        codes = enc.indices.to_numpy().astype(np.int64)
        k = len(enc.dictionary)
    first = np.empty(k, np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1, dtype=np.int64)  # the last write wins
    return codes, first


def _sorted_codes(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`key_codes` of one integer or string column without NULLs whose values never
    decrease -- as Spark hands a partition over, sorted by its keys -- without hashing: a
    code per run of equal values (first appearance is ascending order, so the codes are
    the same).  None for any other column.  (q3's sector strings, 200k rows: 3.3 -> ~1 ms.)"""
    t = col.type
    if col.null_count or len(col) == 0:
        return None
    new = np.empty(len(col), bool)
    new[0] = True
    if pa.types.is_integer(t):
        values = col.to_numpy()
        if not bool(np.all(values[1:] >= values[:-1])):  # (comparisons: a difference could wrap)
            return None
        np.not_equal(values[1:], values[:-1], out=new[1:])
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        if not string_runs(*_string_buffers(one_array(col)), new):
            return None  # (bytewise order, as Spark's)
    else:
        return None
    return np.cumsum(new) - 1, np.flatnonzero(new)


def _string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A string array's offsets (its ``n + 1``, from its own offset) and data bytes, no copy."""
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], np.int64 if pa.types.is_large_string(arr.type) else np.int32)
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return offsets[arr.offset:arr.offset + len(arr) + 1], data


def stable_order(codes: np.ndarray, k: int) -> np.ndarray:
    """``np.argsort(codes, kind="stable")`` for dense codes ``0..k-1``."""
    if len(codes) < 2 or k <= 1:
        return np.arange(len(codes), dtype=np.int64)
    # numpy sorts 16-bit integers stably by radix: 4x faster than int32 on 2M rows.
    dtype = np.uint16 if k <= 2**16 else np.int32 if k < 2**31 else np.int64
    return np.argsort(codes.astype(dtype), kind="stable")


def dictionary_type_codes(indices: pa.Array, n_names: int) -> np.ndarray:
    """A dictionary column's indices as type codes (NULL: ``n_names``, another type), as
    int8 where the dictionary is that small -- the codes the string path makes, so the
    same kernels take them -- else int64.  Why not int64 always: over 3M Parquet rows that
    is 24 MB of fresh memory on a first call (~60 ms on a virtual machine), not 3 MB."""
    if indices.null_count:
        indices = pc.fill_null(indices, n_names)
    values = indices.to_numpy(zero_copy_only=False)
    codes = empty(len(values), np.int8 if n_names < np.iinfo(np.int8).max else np.int64)
    np.copyto(codes, values, casting="unsafe")
    return codes


__all__ = ["canonical_keys", "dictionary_type_codes", "key_codes", "micros", "numpy_column",
           "stable_order", "without_halves"]
