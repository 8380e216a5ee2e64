"""Engine.key_codes: dense codes per distinct key tuple, numbered by first appearance (NULL,
a value of its own, first), and each code's first row -- also on its paths for one column
(runs of a sorted integer or string column, as Spark hands a partition over; a dictionary
encoding otherwise), which must give the codes of the general path."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from cogra.runtime.columns import _sorted_codes, key_codes

INT_TYPES = [pa.int8(), pa.int32(), pa.int64(), pa.uint64()]


def first_appearance(values: list) -> tuple[list[int], list[int]]:
    code: dict = {}
    first: list[int] = []
    out = []
    if None in values:  # NULL is code 0
        code[None] = 0
        first.append(values.index(None))
    for i, v in enumerate(values):
        if v not in code:
            code[v] = len(code)
            first.append(i)
        out.append(code[v])
    return out, first


@st.composite
def int_columns(draw):
    typ = draw(st.sampled_from(INT_TYPES))
    lo, hi = (0, 2**64 - 1) if typ == pa.uint64() else (-(2 ** (typ.bit_width - 1)), 2 ** (typ.bit_width - 1) - 1)
    edges = st.sampled_from([lo, hi, lo + 1, hi - 1, 0 if lo < 0 else 1])
    values = draw(st.lists(st.one_of(st.integers(lo, hi), edges), min_size=1, max_size=40))
    if draw(st.booleans()):
        values.sort()
    elif draw(st.booleans()):
        values = [None if draw(st.booleans()) else v for v in values]
    return pa.chunked_array([pa.array(values, typ)]), values


@st.composite
def string_columns(draw):
    # (Up to 7 bytes a string is one word of the compiled dictionary; 8 and more: Arrow's.)
    words = ["", "a", "ab", "b", "B", "é", "ab\x00", "\x00", "abcdefg", "abcdefg\x00", "abcdefgh"]
    values = draw(st.lists(st.sampled_from(words), min_size=1, max_size=40))
    if draw(st.booleans()):
        values.sort(key=lambda v: v.encode())  # Arrow's (and Spark's) order: bytewise
    elif draw(st.booleans()):
        values = [None if draw(st.booleans()) else v for v in values]
    chunks = draw(st.integers(1, 3))
    cut = sorted(draw(st.lists(st.integers(0, len(values)), min_size=chunks - 1, max_size=chunks - 1)))
    bounds = [0, *cut, len(values)]
    typ = draw(st.sampled_from([pa.string(), pa.large_string()]))
    return pa.chunked_array([pa.array(values[a:b], typ) for a, b in zip(bounds[:-1], bounds[1:])], typ), values


@settings(max_examples=600, deadline=None)
@given(column=st.one_of(int_columns(), string_columns()))
def test_codes_number_keys_by_first_appearance(column) -> None:
    col, values = column
    codes, first = key_codes(pa.table({"k": col}), ["k"])
    want_codes, want_first = first_appearance(values)
    assert codes.tolist() == want_codes
    assert first.tolist() == want_first
    # The general path (several columns; a constant second one leaves the codes alone).
    general = key_codes(pa.table({"k": col, "one": pa.array(np.ones(len(values), np.int8))}), ["k", "one"])
    assert codes.tolist() == general[0].tolist() and first.tolist() == general[1].tolist()


def test_a_dictionary_column_keeps_dense_codes() -> None:
    # Its own dictionary may be out of order and hold values no row has: codes stay dense
    # and each code's first row has that code (as the general path numbers them).
    col = pa.DictionaryArray.from_arrays(pa.array([2, 2, None, 0, 2]), pa.array(["x", "y", "z"]))
    codes, first = key_codes(pa.table({"k": col}), ["k"])
    assert sorted(set(codes.tolist())) == [0, 1, 2]
    assert [codes[f] for f in first.tolist()] == [0, 1, 2]
    assert [col[f].as_py() for f in first.tolist()] == [None, "x", "z"]
    general = key_codes(pa.table({"k": col, "one": pa.array(np.ones(5, np.int8))}), ["k", "one"])
    assert codes.tolist() == general[0].tolist() and first.tolist() == general[1].tolist()


def test_the_fast_path_takes_sorted_integers_and_strings_only() -> None:
    # uint64 values whose difference wraps: not sorted, so not the fast path.
    assert _sorted_codes(pa.chunked_array([pa.array([2**64 - 1, 0], pa.uint64())])) is None
    assert _sorted_codes(pa.chunked_array([pa.array([3, 1])])) is None
    assert _sorted_codes(pa.chunked_array([pa.array([1, None, 2])])) is None
    assert _sorted_codes(pa.chunked_array([pa.array(["b", "a"])])) is None
    assert _sorted_codes(pa.chunked_array([pa.array(["a", None])])) is None
    assert _sorted_codes(pa.chunked_array([pa.array([1.0, 2.0])])) is None
    codes, first = _sorted_codes(pa.chunked_array([pa.array([-5, -5, 0, 7, 7, 7])]))
    assert codes.tolist() == [0, 0, 1, 2, 2, 2] and first.tolist() == [0, 2, 3]
    codes, first = _sorted_codes(pa.chunked_array([pa.array(["Energy", "Energy", "Tech"])]))
    assert codes.tolist() == [0, 0, 1] and first.tolist() == [0, 2]
    # Several chunks, as Arrow batches arrive.
    codes, first = _sorted_codes(pa.chunked_array([pa.array([1, 1]), pa.array([1, 4])]))
    assert codes.tolist() == [0, 0, 0, 1] and first.tolist() == [0, 3]
    codes, first = _sorted_codes(pa.chunked_array([pa.array(["x", "y"]), pa.array(["y", "z"])]))
    assert codes.tolist() == [0, 1, 1, 2] and first.tolist() == [0, 1, 3]
    # Strings compared bytewise in one pass: a proper prefix sorts first; a sliced array
    # reads its own offsets (from its offset on).
    assert _sorted_codes(pa.chunked_array([pa.array(["ab", "a"])])) is None
    assert _sorted_codes(pa.chunked_array([pa.array(["a", "ab", "b", "é", "B"])])) is None
    codes, first = _sorted_codes(pa.chunked_array([pa.array(["", "", "a", "ab", "ab", "ab\x00", "b", "é"])]))
    assert codes.tolist() == [0, 0, 1, 2, 2, 3, 4, 5] and first.tolist() == [0, 2, 3, 5, 6, 7]
    codes, first = _sorted_codes(pa.chunked_array([pa.array(["z", "a", "a", "b"], pa.large_string()).slice(1)]))
    assert codes.tolist() == [0, 0, 1] and first.tolist() == [0, 2]
    codes, first = _sorted_codes(pa.chunked_array([pa.array(["", ""])]))  # no data buffer bytes
    assert codes.tolist() == [0, 0] and first.tolist() == [0]


def test_short_strings_are_coded_by_a_compiled_dictionary() -> None:
    # Thousands of distinct values (the table doubles many times), a sliced array of each
    # string type, and a long string late in the array (the compiled coder gives up there;
    # Arrow codes the column): the same codes as a dictionary encoding.
    from cogra.runtime.columns import _dictionary_codes
    from cogra.runtime.compiled.substream_split import short_string_codes

    rng = np.random.default_rng(3)
    values = [f"v{i}" for i in rng.integers(0, 6000, 20_000)]
    for typ in (pa.string(), pa.large_string()):
        for arr in (pa.array(values, typ), pa.array(["zz", *values], typ).slice(1)):
            codes, first = _dictionary_codes(pa.chunked_array([arr]))
            want_codes, want_first = first_appearance(values)
            assert codes.tolist() == want_codes and first.tolist() == want_first
    arr = pa.array([*values[:100], "longer than seven"])
    offsets = np.frombuffer(arr.buffers()[1], np.int32)
    assert not short_string_codes(offsets, np.frombuffer(arr.buffers()[2], np.uint8))[2]
    codes, first = _dictionary_codes(pa.chunked_array([arr]))
    assert codes.tolist() == first_appearance([*values[:100], "longer than seven"])[0]
