"""The compiled passes over a whole table that every call makes before its kernel, each
against its definition: the type codes (one-byte and general paths), the time order, the
one-sub-stream rows with their bits and times, the float summary that keeps the doubles,
the attribute rows the kernels read, and the arrays from Arrow's pool.  Then whole
calls at sizes that take the pooled and reused-doubles routes, against the exact Python
executors."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import cogra
from cogra.runtime.arrow_arrays import POOLED_BYTES, empty, one_array, pooled, take
from cogra.runtime.compiled.attribute_columns import float_stats
from cogra.runtime.compiled.event_types import ARROW_COMPARED, type_codes
from cogra.runtime.compiled.substream_split import whole_table_rows
from cogra.runtime.compiled.time_order import ascending


def codes_by_definition(values: list, names: list[str]) -> np.ndarray:
    return np.array([names.index(v) if v in names else len(names) for v in values], np.int64)


@pytest.mark.parametrize("values, names", [
    (["A", "B", "X"], ["A", "B"]),                      # one byte per string: the lookup
    (["A", "BB", "X", ""], ["A", "BB"]),                # as many bytes as rows, not one each
    (["Stock", "Pickup", "Dropoff", "X"], ["Dropoff", "Stock"]),
    (["A", "TypeOfManyBytes", "B"], ["A", "TypeOfManyBytes"]),  # a name past 7 bytes: Arrow compares
    (["Measurement", "Other", "M"], ["Measurement"]),  # q1's one long type
    (["A", "TypeOfManyBytes", "B", "C", "D"], ["A", "B", "C", "TypeOfManyBytes"]),  # more: the byte loop
    (["é", "A", "ü"], ["A", "é"]),                      # multi-byte characters
])
@pytest.mark.parametrize("sliced", [False, True])
def test_type_codes_equal_their_definition(values: list, names: list[str], sliced: bool) -> None:
    rng = np.random.default_rng(len(values))
    column = pa.array(np.array(values, dtype=object)[rng.integers(0, len(values), 5_000)].tolist(), pa.string())
    if sliced:
        column = column.slice(3, 4_990)
    times = np.arange(len(column), dtype=np.int64) // 3
    got = type_codes(pa.chunked_array([column]), names, times)  # (a chunked column of one chunk)
    assert got is not None
    codes, seen, ordered = got
    want = codes_by_definition(column.to_pylist(), names)
    assert codes.dtype == np.int8
    np.testing.assert_array_equal(codes, want)
    np.testing.assert_array_equal(seen, [bool((want == c).any()) for c in range(len(names) + 1)])
    by_arrow = any(len(n.encode()) > 7 for n in names) and len(names) <= ARROW_COMPARED
    assert ordered is (None if by_arrow else True)  # (Arrow's comparisons: the caller checks the order)
    for at in (1, len(times) // 2, len(times) - 1):  # one descent, anywhere, is found
        later = times.astype(np.float64)
        later[at] = later[at - 1] - 0.5
        assert type_codes(column, names, later).ordered is (None if by_arrow else False)
    assert type_codes(column, names).ordered is None  # (not asked)
    assert type_codes(column, names, times.astype(np.int32)).ordered is None  # (other dtypes: the caller checks)


def test_a_type_absent_from_the_rows_is_not_seen() -> None:
    codes, seen, _ = type_codes(pa.array(["A", "X", "A"]), ["A", "B"])
    assert codes.tolist() == [0, 2, 0]
    assert seen.tolist() == [True, False, True]


@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.int32])
def test_time_order_is_found_to_the_last_row(dtype) -> None:
    times = np.arange(100_000).astype(dtype)
    assert ascending(times)
    times[-1] = times[-2] - 1  # the only descent, at the very end
    assert not ascending(times)
    times[-1] = times[-2]  # ties are in order
    assert ascending(times)
    assert ascending(np.zeros(0, dtype)) and ascending(np.zeros(1, dtype))


@pytest.mark.parametrize("local", [False, True])
@pytest.mark.parametrize("keep_idle", [False, True])
def test_whole_table_rows_keep_playing_rows_with_their_bits_and_times(local: bool, keep_idle: bool) -> None:
    rng = np.random.default_rng(int(local) * 2 + int(keep_idle))
    n = 20_000
    codes = rng.integers(0, 3, n).astype(np.int8)  # 0: A (state 0), 1: B (state 1), 2: another type
    type_bits = np.array([1, 2, 0], np.uint64)
    type_irrelevant = np.array([False, False, True])
    ok = rng.random(n) < 0.5
    local_bits = np.array([1], np.uint64) if local else np.zeros(0, np.uint64)
    local_ok = ok.reshape(1, n) if local else np.zeros((0, 1), bool)
    clear = np.uint64(0)
    time = np.cumsum(rng.integers(0, 3, n)).astype(np.int64)
    rows, bits, times, playing = whole_table_rows(codes, type_bits, type_irrelevant, local_bits, local_ok, clear,
                                                  keep_idle, time)
    want_rows, want_bits = [], []
    for i in range(n):
        b = int(type_bits[codes[i]])
        if local and not ok[i]:
            b &= ~1
        if b or (keep_idle and type_irrelevant[codes[i]]):
            want_rows.append(i)
            want_bits.append(b)
    assert rows.tolist() == want_rows
    assert bits.tolist() == want_bits
    np.testing.assert_array_equal(times, time[want_rows])
    assert playing == any(want_bits)


@pytest.mark.parametrize("nulls", [False, True])
def test_the_float_summary_keeps_the_doubles_with_nulls_as_zero(nulls: bool) -> None:
    rng = np.random.default_rng(7)
    values = np.round(rng.normal(0, 50, 10_000), 2)
    mask = rng.random(10_000) < 0.1 if nulls else None
    col = pa.array(values, mask=mask)
    stats = float_stats(col, keep_doubles=True)
    np.testing.assert_array_equal(stats.doubles, pc_fill_zero(col))
    assert stats.all_finite
    assert float_stats(col).doubles is None
    assert float_stats(col).scale == stats.scale
    assert all(float(v * stats.scale).is_integer() for v in values)
    assert not float_stats(pa.array([1.0, float("inf")]), keep_doubles=True).all_finite
    assert not float_stats(pa.array([1.0, float("nan")])).all_finite
    assert float_stats(pa.array([1.0, None], pa.float64())).all_finite


def pc_fill_zero(col: pa.Array) -> np.ndarray:
    return np.asarray(col.fill_null(0.0).to_numpy(zero_copy_only=False), np.float64)


def test_pooled_arrays_are_writable_c_arrays_of_their_shape() -> None:
    big = empty((2, POOLED_BYTES // 8), np.int64)
    assert big.shape == (2, POOLED_BYTES // 8) and big.flags.c_contiguous and big.flags.writeable
    big[1, -1] = 5
    assert big[1, -1] == 5
    column = pooled(5, np.int32)  # (a result column's: from the pool whatever its size)
    column[:] = 7
    assert column.tolist() == [7] * 5 and isinstance(column.base, pa.Buffer)
    small = empty(3, np.bool_)
    assert small.shape == (3,) and small.flags.writeable
    values = np.arange(1_000_000) * 3
    positions = np.arange(0, 1_000_000, 7)
    np.testing.assert_array_equal(take(values, positions), values[positions])
    chunked = pa.chunked_array([pa.array([1, 2]), pa.array([3])])
    assert one_array(chunked).to_pylist() == [1, 2, 3]
    single = pa.chunked_array([pa.array([1, 2, 3]).slice(1)])
    assert one_array(single).to_pylist() == [2, 3]


QUERIES = [
    "RETURN COUNT(*), AVG(A.price) PATTERN SEQ(A+, B)",  # the doubles reused where never negative
    "RETURN COUNT(*), SUM(A.price), AVG(B.price), MIN(A.price), MAX(B.qty) PATTERN SEQ(A+, B) WHERE A.qty > 1",
]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("sem", ["skip-till-any-match", "skip-till-next-match", "contiguous"])
@pytest.mark.parametrize("negative", [False, True])
def test_whole_calls_equal_the_exact_executors(query: str, sem: str, negative: bool) -> None:
    """150k events in windows of ~40: the arrays from Arrow's pool, the one-byte type codes,
    the attribute rows filled only where read, the doubles the summary kept (prices never
    negative) or not (negative ones), NULL prices; the compiled call against the exact
    Python executors on the same table."""
    rng = np.random.default_rng(abs(hash((query, sem, negative))) % 2**32)
    n = 150_000
    price = np.round(rng.random(n) * 100 - (50 if negative else 0), 2)
    table = pa.table({"type": np.array(["A", "B", "X"])[rng.integers(0, 3, n)],
                      "time": np.arange(n, dtype=np.int64) // 2,
                      "price": pa.array(price, mask=rng.random(n) < 0.05),
                      "qty": rng.integers(0, 5, n)})
    q = (query.replace(" WHERE", f" SEMANTICS {sem} WHERE") if "WHERE" in query else f"{query} SEMANTICS {sem}")
    q += " WITHIN 20 seconds SLIDE 20 seconds"  # windows of ~40 events: exact counts stay small for the Python executors
    fast = cogra.evaluate(q, table, on_overflow="null", compiled=True).to_pylist()
    exact = cogra.evaluate(q, table, on_overflow="null", compiled=False).to_pylist()
    assert len(fast) == len(exact) > 1_000
    for got, want in zip(fast, exact):
        for name, value in want.items():
            if isinstance(value, float):
                assert got[name] == pytest.approx(value, rel=1e-9), name
            else:
                assert got[name] == value, name


@pytest.mark.parametrize("sem", ["skip-till-any-match", "skip-till-next-match", "contiguous"])
def test_an_unsorted_table_is_sorted_with_its_type_codes(sem: str) -> None:
    """The type codes are read before the table is sorted by time, and move with its rows:
    the same events shuffled give the same result as in time order."""
    rng = np.random.default_rng(11)
    n = 3_000
    table = pa.table({"type": np.array(["A", "B", "X"])[rng.integers(0, 3, n)],
                      "time": np.arange(n, dtype=np.int64),
                      "price": np.round(rng.random(n) * 10, 1)})
    q = f"RETURN COUNT(*), AVG(A.price) PATTERN SEQ(A+, B) SEMANTICS {sem} WITHIN 30 seconds SLIDE 10 seconds"
    shuffled = table.take(pa.array(rng.permutation(n)))
    assert cogra.evaluate(q, shuffled, on_overflow="null").to_pylist() == \
        cogra.evaluate(q, table, on_overflow="null").to_pylist()


@pytest.mark.parametrize("extra_types", [0, 200], ids=["small dictionary", "large dictionary"])
def test_a_dictionary_type_column_gives_the_string_columns_result(extra_types: int) -> None:
    # Dictionary indices become int8 codes where the dictionary fits (the codes of the
    # string path), else int64; NULL types are skipped either way.
    from cogra.runtime.engine import Engine

    rng = np.random.default_rng(4)
    n = 300_000
    names = ["A", "B"] + [f"T{k}" for k in range(extra_types)]
    weights = np.array([0.45, 0.45] + [0.1 / extra_types] * extra_types) if extra_types else None
    types = pa.array(rng.choice(names, n, p=weights), pa.string())
    types = pa.array(types.to_pylist(), mask=rng.random(n) < 0.01)
    strings = pa.table({"type": types, "time": np.arange(n), "v": rng.integers(0, 9, n)})
    encoded = strings.set_column(0, "type", types.dictionary_encode())
    query = "RETURN COUNT(*), SUM(A.v), MAX(B.v) PATTERN SEQ(A+, B) SEMANTICS contiguous WITHIN 1000 seconds"
    engine = Engine(cogra.plan(query, encoded.schema), encoded)
    assert engine._type_codes.dtype == (np.int8 if extra_types == 0 else np.int64)
    with pytest.warns(cogra.CograDataWarning):
        want = cogra.evaluate(query, strings)
    with pytest.warns(cogra.CograDataWarning):
        got = cogra.evaluate(query, encoded)
    assert got.num_rows > 100 and got.equals(want)
