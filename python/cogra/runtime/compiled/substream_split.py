"""Splitting a table's rows into sub-streams by variable keys, compiled.

A query with variable keys (q3's ``[A.company] AND [B.company]``) has one sub-stream per
plain key value and combination of the keyed variables' values: its rows are the plain
group's rows that play a variable of the combination -- a keyed variable only with the
combination's value.  Done with numpy, each combination took ~10 passes over its group's
rows (masks, shifts, gathers, a boolean selection); q3 as printed has 37 combinations of
~20k rows, and the split took 35 ms of the query's ~300 ms.  Here: one pass per
combination over its group's rows, no temporaries.
"""

from __future__ import annotations

import numpy as np
from cogra.runtime.arrow_arrays import empty
from cogra.runtime.compiled.jit import njit


@njit(cache=True, inline="always")
def _bits_in(i, c, bits, codes, combo_codes, var_bits, combo_clear):
    """Position ``i``'s play bits in combination ``c``: a keyed variable only with its value
    (code -1: an optional variable absent from the combination, played by no row), and none
    of ``combo_clear[c]`` (the final states of trends another combination counts)."""
    b = bits[i] & ~combo_clear[c]
    for j in range(codes.shape[0]):  # without branches: the codes are random, mispredicted
        b &= ~(var_bits[j] * np.uint64(codes[j, i] != combo_codes[c, j]))
    return b


def combination_rows(order, group_lo, group_hi, combo_group, combo_codes, codes, var_bits, combo_clear, bits,
                     irrelevant, keep_idle, idle_events_matter):
    """Per combination ``c`` (of the plain group ``combo_group[c]``, positions
    ``group_lo[g]:group_hi[g]`` of ``order``, the table's rows by group): the rows that
    play a variable of it (under ``keep_idle`` also the ``irrelevant`` ones), in order,
    with their bits.

    By position (the rows' facts gathered in ``order`` once -- read through ``order`` per
    combination, the scattered loads took 21 ms for q3): ``bits``, ``irrelevant``,
    ``codes[j, i]`` keyed variable ``j``'s key code; ``combo_codes[c, j]`` the
    combination's, ``var_bits[j]`` the variable's play bits, ``combo_clear[c]`` bits no row
    plays in the combination.  Returns ``(rows, bits,
    sizes)``, the kept combinations' rows concatenated; ``sizes[c]`` is -1 for a combination
    without sub-stream (no row kept, or none that plays a variable unless
    ``idle_events_matter``).

    One pass per combination, written where the previous one ended (a combination
    without sub-stream is overwritten by the next) into buffers of its group's size
    summed over the combinations: counting first took a second pass (q3: 6.3 -> 3.6 ms
    per 200k rows).  Buffers more than twice what is kept are copied to size; they are
    allocated from Arrow's pool (see :func:`whole_table_rows`)."""
    bound = int((group_hi[combo_group] - group_lo[combo_group]).sum()) if len(combo_group) else 0
    rows = empty(bound + 1, np.int64)  # every position is written, kept ones advance k
    out_bits = empty(bound + 1, np.uint64)
    sizes = np.empty(combo_group.shape[0], np.int64)
    k = _combination_rows(order, group_lo, group_hi, combo_group, combo_codes, codes, var_bits, combo_clear, bits,
                          irrelevant, keep_idle, idle_events_matter, rows, out_bits, sizes)
    if 2 * k < bound:
        return rows[:k].copy(), out_bits[:k].copy(), sizes
    return rows[:k], out_bits[:k], sizes


@njit(cache=True)
def _combination_rows(order, group_lo, group_hi, combo_group, combo_codes, codes, var_bits, combo_clear, bits,
                      irrelevant, keep_idle, idle_events_matter, rows, out_bits, sizes):
    k = 0
    for c in range(combo_group.shape[0]):
        g = combo_group[c]
        first = k
        playing = False
        for i in range(group_lo[g], group_hi[g]):
            b = _bits_in(i, c, bits, codes, combo_codes, var_bits, combo_clear)
            plays = b != 0
            rows[k] = order[i]
            out_bits[k] = b
            k += plays | (keep_idle & irrelevant[i])
            playing |= plays
        if k == first or not (idle_events_matter or playing):
            sizes[c] = -1
            k = first
        else:
            sizes[c] = k - first
    return k


@njit(cache=True, inline="always")
def _row_bits(i, codes, type_bits, local_bits, local_ok):
    """Row ``i``'s play bits: its type's (``type_bits[codes[i]]``), without the states of
    each variable ``m`` whose local predicates it fails (``local_bits[m]``, where
    ``local_ok[m, i]`` is False)."""
    b = type_bits[codes[i]]
    for m in range(local_bits.shape[0]):  # without branches
        b &= ~(local_bits[m] * np.uint64(not local_ok[m, i]))
    return b


def play_bits(codes: np.ndarray, type_bits: np.ndarray, local_bits: np.ndarray,
              local_ok: np.ndarray) -> np.ndarray:
    """Per row, bit ``v`` set where it may play state ``v``: from its type code through
    ``type_bits`` and its variables' local predicates (see :func:`_row_bits`).  One pass
    over one byte per row; a boolean mask per state, stacked and then folded, took three
    passes and a mask per state.  (Allocated from Arrow's pool: see :func:`whole_table_rows`.)"""
    out = empty(codes.shape[0], np.uint64)
    _play_bits(codes, type_bits, local_bits, local_ok, out)
    return out


@njit(cache=True)
def _play_bits(codes, type_bits, local_bits, local_ok, out):
    for i in range(codes.shape[0]):
        out[i] = _row_bits(i, codes, type_bits, local_bits, local_ok)


@njit(cache=True)
def _whole_table_rows(codes, code_bits, code_idle, local_bits, local_ok, time, rows, bits, times):
    k = 0
    playing = np.uint64(0)
    for i in range(codes.shape[0]):
        b = _row_bits(i, codes, code_bits, local_bits, local_ok)
        rows[k] = i
        bits[k] = b
        times[k] = time[i]
        playing |= b
        k += (b != 0) | code_idle[codes[i]]
    return k, playing != 0


def whole_table_rows(codes: np.ndarray, type_bits: np.ndarray, type_irrelevant: np.ndarray,
                     local_bits: np.ndarray, local_ok: np.ndarray, clear: np.uint64,
                     keep_idle: bool, time: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """:func:`combination_rows` for a table that is one sub-stream (no keys), fused with
    :func:`play_bits`: the rows that play a variable (under ``keep_idle`` also those whose
    type the pattern does not name, ``type_irrelevant[codes[i]]``), their bits (without
    ``clear``) and their times (of ``time``, per table row), and whether any row plays.
    One pass over the type codes and the times, with nothing kept for the rows left out:
    gathering the times afterwards read the kept rows' positions once more.

    The outputs are allocated outside the compiled pass, from Arrow's memory pool
    (:func:`cogra.runtime.arrow_arrays.empty`), which keeps freed pages for the next call:
    numba's allocations come from glibc, which returns them to the system, and a fresh
    array is faulted in a 4 KiB page at a time (3M rows: ~8 ms per array instead of ~1.5
    to write it)."""
    n = codes.shape[0]
    rows = empty(n, np.int64)
    bits = empty(n, np.uint64)
    times = empty(n, time.dtype)
    code_bits = type_bits & ~np.uint64(clear)  # (per type code: the bits and whether idle rows stay)
    code_idle = (bool(keep_idle) & type_irrelevant).astype(np.int64)
    k, playing = _whole_table_rows(codes, code_bits, code_idle, local_bits, local_ok, time, rows, bits, times)
    if 2 * k < n:
        return rows[:k].copy(), bits[:k].copy(), times[:k].copy(), bool(playing)
    return rows[:k], bits[:k], times[:k], bool(playing)


@njit(cache=True)
def string_runs(offsets, data, new):
    """For an Arrow string array's ``offsets`` (its ``n + 1``, from the array's own offset)
    and ``data`` bytes: ``new[i]`` (``i >= 1``) whether string ``i`` differs from string
    ``i - 1``.  Returns False -- at the first such pair, ``new`` then partly written --
    where a string sorts bytewise before the one preceding it (Arrow's and Spark's order of
    strings).  One pass instead of Arrow's three (less, any, not_equal): q3's sector
    column, 42k rows, 0.33 -> 0.22 ms; an unsorted column stops at its first descent."""
    for i in range(1, offsets.shape[0] - 1):
        a, b = offsets[i - 1], offsets[i]
        la, lb = b - a, offsets[i + 1] - b
        k = 0
        m = min(la, lb)
        while k < m and data[a + k] == data[b + k]:
            k += 1
        if k < m:
            if data[b + k] < data[a + k]:
                return False
            new[i] = True
        elif lb < la:  # a proper prefix of the string before it
            return False
        else:
            new[i] = lb != la
    return True


SHORT_STRING_BYTES = 7
"""Strings of up to this many bytes fit one 64-bit word with their length
(:func:`short_string_codes`)."""


@njit(cache=True, inline="always")
def _short_word(offsets, data, i):
    """String ``i``'s bytes and length in one word (bytes 0..6, length in the top byte);
    -1 for a longer string."""
    a, b = offsets[i], offsets[i + 1]
    if b - a > SHORT_STRING_BYTES:
        return np.int64(-1)
    word = np.int64(b - a) << np.int64(56)
    for k in range(b - a):
        word |= np.int64(data[a + k]) << np.int64(8 * k)
    return word


@njit(cache=True, inline="always")
def _slot(word, shift):
    """A word's home slot among ``2 ** (64 - shift)`` (Fibonacci hashing: the product's top bits)."""
    return np.int64((np.uint64(word) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(shift))


def short_string_codes(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """Dense codes of a string array's values in order of first appearance, and the first
    position of each -- what ``pyarrow.compute.dictionary_encode`` numbers, for arrays
    without NULLs whose strings all have at most :data:`SHORT_STRING_BYTES` bytes
    (``offsets``: its ``n + 1``, from the array's own offset).  Returns ``(codes, first,
    True)``, or ``(.., .., False)`` at the first longer string (the caller encodes with
    Arrow then).  Each string is one word, looked up in an open-addressing table that
    doubles at half load: q3's company column, 42k rows of 19 values, ~0.9 -> ~0.2 ms.
    (The codes are allocated from Arrow's pool: see :func:`whole_table_rows`.)"""
    codes = empty(offsets.shape[0] - 1, np.int64)
    first, short = _short_string_codes(offsets, data, codes)
    return codes, first, bool(short)


@njit(cache=True)
def _short_string_codes(offsets, data, codes):
    n = offsets.shape[0] - 1
    first = np.empty(16, np.int64)
    words = np.empty(16, np.int64)
    cap = 64
    shift = 58  # 64 - log2(cap)
    slots = np.full(cap, -1, np.int64)  # a code, -1 empty
    k = 0
    for i in range(n):
        word = _short_word(offsets, data, i)
        if word < 0:
            return first[:k], False
        j = _slot(word, shift)
        while slots[j] >= 0 and words[slots[j]] != word:
            j = (j + 1) & (cap - 1)
        if slots[j] >= 0:
            codes[i] = slots[j]
            continue
        if k == words.shape[0]:
            words = np.concatenate((words, np.empty(k, np.int64)))
            first = np.concatenate((first, np.empty(k, np.int64)))
        words[k] = word
        first[k] = i
        codes[i] = k
        slots[j] = k
        k += 1
        if 2 * k > cap:  # rehash into twice the slots
            cap *= 2
            shift -= 1
            slots = np.full(cap, -1, np.int64)
            for c in range(k):
                j = _slot(words[c], shift)
                while slots[j] >= 0:
                    j = (j + 1) & (cap - 1)
                slots[j] = c
    return first[:k], True


__all__ = ["combination_rows", "play_bits", "short_string_codes", "string_runs", "whole_table_rows"]
