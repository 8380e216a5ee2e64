"""One window over a whole table, run in chunks of rows (cogra.runtime.compiled.windows.chunked).

The chunked route must return exactly what the one-pass route returns -- the same
kernels' channels, decoded by the same finish -- and fall back to it wherever it cannot
decide.  ``chunks`` sets the chunk size (small, so that small tables cross many chunk
boundaries) and counts the chunked runs to prove the route was taken.
"""

from __future__ import annotations

import contextlib
import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cogra
from cogra.errors import AggregateOverflowError
from cogra.runtime.compiled.windows import chunked
from tests.compare import assert_same_result


@contextlib.contextmanager
def chunks(rows: int | None):
    """Run tables of at least two rows in chunks of ``rows`` rows (None: never chunked);
    yields the number of calls the chunked route answered."""
    answered = []
    real = chunked._table
    old = chunked.CHUNK_ROWS, chunked.MIN_ROWS

    def counted(*args, **kwargs):
        table = real(*args, **kwargs)  # (raises where the one-pass route must answer)
        answered.append(1)
        return table

    chunked.CHUNK_ROWS, chunked.MIN_ROWS = (rows, 2) if rows else (old[0], 10**12)
    chunked._table = counted
    try:
        yield answered
    finally:
        chunked.CHUNK_ROWS, chunked.MIN_ROWS = old
        chunked._table = real


def _events(n: int, seed: int, *, ties: bool = False, nulls: bool = False, ints: bool = False,
            types: str = "AB") -> pa.Table:
    rng = np.random.default_rng(seed)
    time = np.sort(rng.integers(0, n // 3, n)) if ties else np.arange(n)
    v = rng.integers(-50, 100, n)
    values = v.astype(np.int64) if ints else v.astype(np.float64) / 4
    return pa.table({"type": rng.choice(list(types), n), "time": time,
                     "v": pa.array(values, mask=(rng.random(n) < 0.05) if nulls else None),
                     "w": rng.integers(0, 5, n)})


QUERIES = [
    "RETURN COUNT(*) PATTERN SEQ(A+, B) SEMANTICS {s}",
    "RETURN COUNT(*), MIN(A.v), MAX(A.v) PATTERN SEQ(A+, B) SEMANTICS {s}",
    "RETURN COUNT(*), SUM(A.v), AVG(B.v) PATTERN SEQ(A+, B) SEMANTICS {s}",
    "RETURN COUNT(*), SUM(A.v), MIN(A.v), MAX(A.v), AVG(B.v), COUNT(A) PATTERN SEQ(A+, B) SEMANTICS {s}",
    "RETURN COUNT(*), AVG(A.v) PATTERN A+ SEMANTICS {s} WHERE A.v < NEXT(A).v",  # pair predicates
    "RETURN COUNT(*), SUM(B.v) PATTERN SEQ(A, B+) SEMANTICS {s} WHERE A.w > 1",  # local predicates
    "RETURN COUNT(*), MAX(B.w) PATTERN SEQ(A, B?, C) SEMANTICS {s}",
]


@pytest.mark.parametrize("data", [
    dict(n=5_000, seed=1),
    dict(n=6_000, seed=2, ties=True, nulls=True, types="ABC"),  # batches across chunk ends, NULLs, idle types
    dict(n=4_000, seed=3, ints=True, types="ABCD"),
], ids=["floats", "ties-nulls", "ints"])
def test_chunks_give_the_one_pass_result(data: dict) -> None:
    table = _events(**data)
    taken = 0
    for query, semantics in itertools.product(QUERIES, ("any", "next", "contiguous")):
        query = query.format(s=semantics)
        with chunks(None):
            want = cogra.evaluate(query, table, type_column="type", on_overflow="null")
        with chunks(333) as answered:
            got = cogra.evaluate(query, table, type_column="type", on_overflow="null")
        taken += len(answered)
        assert got.equals(want), (query, got.to_pylist(), want.to_pylist())
    # Every query but those whose exact sums the channels cannot decide (the one-pass
    # route re-runs them exactly) took the chunks.
    assert taken >= len(QUERIES) * 3 - 9


def test_chunks_equal_the_reference() -> None:
    table = _events(1_500, seed=4, ties=True, types="ABC")
    for semantics in ("any", "next", "contiguous"):
        query = f"RETURN COUNT(*), MIN(A.v), SUM(B.v), AVG(A.v) PATTERN SEQ(A+, B) SEMANTICS {semantics}"
        with chunks(100) as answered:
            got = cogra.evaluate(query, table, type_column="type", on_overflow="null")
        assert answered
        assert_same_result(got, cogra.evaluate(query, table, type_column="type", on_overflow="null",
                                               compiled=False))


def test_at_the_sizes_users_run() -> None:
    """The module's own chunk size over 1.2M events (five chunks), every aggregate, each
    semantics: the same result as one pass."""
    table = _events(1_200_000, seed=5, ties=True, types="ABC")
    for semantics in ("any", "next", "contiguous"):
        query = ("RETURN COUNT(*), SUM(A.v), MIN(A.v), MAX(A.v), AVG(B.v) PATTERN SEQ(A+, B) "
                 f"SEMANTICS {semantics}")
        with chunks(None):
            want = cogra.evaluate(query, table, type_column="type", on_overflow="null")
        with chunks(chunked.CHUNK_ROWS) as answered:
            got = cogra.evaluate(query, table, type_column="type", on_overflow="null")
        assert answered and got.equals(want), semantics


def test_an_overflow_to_raise_is_worded_by_the_one_pass_route() -> None:
    table = _events(3_000, seed=6)
    query = "RETURN COUNT(*) PATTERN SEQ(A+, B) SEMANTICS any"
    with chunks(None), pytest.raises(AggregateOverflowError) as one_pass:
        cogra.evaluate(query, table, type_column="type")
    with chunks(500) as answered, pytest.raises(AggregateOverflowError) as got:
        cogra.evaluate(query, table, type_column="type")
    assert not answered and str(got.value) == str(one_pass.value)


def test_what_does_not_apply_runs_in_one_pass() -> None:
    table = _events(2_000, seed=7)
    for query in ("RETURN w, COUNT(*) PATTERN SEQ(A+, B) SEMANTICS any GROUP-BY w",  # keys
                  "RETURN COUNT(*) PATTERN SEQ(A+, B) SEMANTICS any WITHIN 100 seconds",  # windows
                  "RETURN COUNT(*) PATTERN SEQ(A+, NOT C, B) SEMANTICS any"):  # a negation
        with chunks(100) as answered:
            cogra.evaluate(query, table, type_column="type", on_overflow="null")
        assert not answered, query
    strings = table.set_column(table.schema.get_field_index("w"), "w", pa.array([str(x) for x in
                                                                                table.column("w").to_pylist()]))
    with chunks(100) as answered:  # MIN/MAX of strings: ranks would differ per chunk
        cogra.evaluate("RETURN COUNT(*), MAX(A.w) PATTERN SEQ(A+, B) SEMANTICS any", strings,
                       type_column="type", on_overflow="null")
    assert not answered


def test_no_trend_and_no_playing_event() -> None:
    table = _events(1_000, seed=8, types="CD")  # no A, no B
    with chunks(100):
        got = cogra.evaluate("RETURN COUNT(*) PATTERN SEQ(A+, B) SEMANTICS any", table, type_column="type")
    assert got.num_rows == 0
    only_a = _events(1_000, seed=8, types="A")
    with chunks(100):
        got = cogra.evaluate("RETURN COUNT(*) PATTERN SEQ(A+, B) SEMANTICS next", only_a, type_column="type")
    assert got.num_rows == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=60), st.integers(1, 8))
def test_chunks_end_between_timestamps(steps: list[int], rows: int) -> None:
    time = np.cumsum(np.asarray(steps, np.int64))
    ends = chunked.chunk_ends(time, rows)
    assert ends[-1] == len(time) and all(a < b for a, b in zip([0, *ends], ends))
    for z in ends[:-1]:
        assert time[z - 1] != time[z]  # never inside a batch
    for a, z in zip([0, *ends], ends):
        # as long as asked, unless a batch runs on
        assert z - a >= min(rows, len(time) - a)
        assert z - a <= rows or time[a + rows - 1] == time[a + rows]


@pytest.mark.parametrize("semantics", ["any", "next", "contiguous"])
def test_the_generated_kernels_in_chunks_give_the_one_pass_result(semantics: str, generated_kernels) -> None:
    """With the generated kernels (the one pass's ``kernel``, the chunks' ``kernel_continue``
    under the same bound on the counts), over floats, ints and NULLs."""
    for data in (dict(n=5_000, seed=11, ties=True, nulls=True, types="ABC"), dict(n=4_000, seed=12, ints=True)):
        table = _events(**data)
        for query in QUERIES[:4]:
            query = query.format(s=semantics)
            with chunks(None):
                want = cogra.evaluate(query, table, type_column="type", on_overflow="null")
            with chunks(400):
                got = cogra.evaluate(query, table, type_column="type", on_overflow="null")
            assert got.equals(want), (query, got.to_pylist(), want.to_pylist())
