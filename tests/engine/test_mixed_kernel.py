"""The compiled mixed-grained kernel on longer streams than the reference can enumerate.

Its Fenwick trees run over ranks local to a block of positions (a window and what
follows it), re-ranked when a window leaves the block; these tests make windows overlap,
repeat values (ties in rank), and use every comparison, and compare the compiled kernel
with the exact Python mixed-grained executor (``compiled=False``), which the property
tests tie to the two-step reference on small streams.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cogra
from cogra.datasets import stock
from cogra.examples import Q3
from tests.compare import assert_same_result

OPS = ["<", "<=", ">", ">=", "=", "<>"]


def random_stream(seed: int, n: int, distinct: int) -> pa.Table:
    """``n`` events of types A, B and the irrelevant X, with ties, ``distinct`` values of
    ``v`` (and of ``w``, halved), and a grouping column ``g``."""
    rng = np.random.default_rng(seed)
    return pa.table({
        "type": pa.array(rng.choice(["A", "B", "X"], n, p=[0.6, 0.3, 0.1])),
        "time": pa.array(np.sort(rng.integers(0, max(2, n // 2), n))),
        "v": pa.array(rng.integers(0, distinct, n)),
        "w": pa.array(rng.integers(0, distinct, n) * 0.5),
        "g": pa.array(rng.integers(0, 2, n)),
    })


def both(query: str, table: pa.Table) -> pa.Table:
    got = cogra.evaluate(query, table, compiled=True, on_overflow="null")
    want = cogra.evaluate(query, table, compiled=False, on_overflow="null")
    assert_same_result(got, want, context=f"\n{query}")
    return got


@pytest.mark.parametrize("slide", ["", " SLIDE 10 seconds", " SLIDE 200 seconds"])
def test_q3_compiled_equals_python(slide) -> None:
    query = Q3.replace(" SLIDE 10 seconds", slide)
    got = both(query, stock(1500, rate=2.0))
    assert got.num_rows > 20


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    op=st.sampled_from(OPS),
    other=st.sampled_from(["v", "w"]),
    pattern=st.sampled_from(["SEQ(A+, B*)", "SEQ(A+, B+)"]),
    kept=st.sampled_from(["A", "B"]),
    n=st.integers(1, 400),
    distinct=st.sampled_from([3, 50, 10_000]),
    size=st.integers(1, 60),
    slide=st.integers(1, 20),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_comparisons_and_windows(op, other, pattern, kept, n, distinct, size, slide, seed) -> None:
    # The kept variable's Fenwick trees carry only the channels its states can hold:
    # A's (counts, its own MIN and AVG) or B's (those plus B's SUM).
    table = random_stream(seed, n, distinct)
    size = max(size, slide)
    query = (f"RETURN COUNT(*), SUM(B.v), MIN(A.w), AVG(A.v), MAX(B.w) PATTERN {pattern} "
             f"WHERE {kept}.v {op} NEXT({kept}).{other} "
             f"WITHIN {size} seconds SLIDE {slide} seconds")
    both(query, table)


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.integers(0, 2**40), max_size=300) | st.lists(st.integers(0, 5), max_size=300))
def test_rank_radix_sort_is_a_stable_sort(keys) -> None:
    # Block ranks are sorted by an LSD radix sort whose tags (positions) must keep their
    # order among equal keys: a position's rank is read back through its tag.
    from cogra.runtime.compiled.aggregators.mixed_grained import RADIX_BITS, _radix_sort_into

    n = len(keys)
    k = np.asarray(keys + [7, 7], np.int64)  # scratch beyond n must be left alone
    tags = np.arange(n + 2, dtype=np.int64)
    tmp_k, tmp_t = np.full(n + 2, -1, np.int64), np.full(n + 2, -1, np.int64)
    in_scratch = _radix_sort_into(k, tags, n, np.empty((1 << RADIX_BITS) + 1, np.int64), tmp_k, tmp_t)
    got_k, got_t = (tmp_k, tmp_t) if in_scratch else (k, tags)
    order = np.argsort(np.asarray(keys, np.int64), kind="stable")
    assert got_k[:n].tolist() == sorted(keys)
    assert got_t[:n].tolist() == order.tolist()
    assert k[n:].tolist() == [7, 7] and tags[n:].tolist() == [n, n + 1]


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.floats(allow_nan=False) | st.sampled_from([0.0, -0.0, 1.5, -1.5]), max_size=200))
def test_unique_inverse_ranks_every_value(values) -> None:
    # Global ranks of a predicate's values: distinct values ascending, each row's rank
    # points at its own value, and -0.0 == 0.0 is one value (a positive zero).
    from cogra.runtime.compiled.aggregators.mixed_grained import unique_inverse

    x = np.asarray(values, np.float64)
    vals, inverse = unique_inverse(x)
    assert inverse.dtype == np.int64 and inverse.shape == x.shape
    assert all(a < b for a, b in zip(vals.tolist(), vals[1:].tolist()))
    assert vals[inverse].tolist() == x.tolist()
    assert not np.signbit(vals[vals == 0.0]).any()


@pytest.mark.parametrize("values", [[np.inf, -np.inf, 0.0], [-1e300, 1e300, -0.0], [2.0, np.nan, -3.0, np.nan]])
def test_unique_inverse_of_keys_too_wide_or_nan_is_numpys(values) -> None:
    # Keys spanning 2**63 or more, and NaN, take np.unique (the radix keys would overflow
    # or have no order): the same answer as np.unique's.
    from cogra.runtime.compiled.aggregators.mixed_grained import unique_inverse

    x = np.asarray(values, np.float64)
    vals, inverse = unique_inverse(x)
    want_vals, want_inverse = np.unique(x + 0.0, return_inverse=True)
    assert np.array_equal(vals, want_vals, equal_nan=True) and inverse.tolist() == want_inverse.tolist()


def test_dense_bounds_equal_the_binary_searches() -> None:
    """pair_ranges' table over a small range of whole numbers (a negation's blocker counts)
    gives the ranks searchsorted gives, values outside the range and NaN included."""
    from cogra.runtime.compiled.aggregators.mixed_grained import _dense_bounds

    rng = np.random.default_rng(0)
    for _ in range(300):
        vals = np.unique(rng.integers(-5, 30, rng.integers(1, 20))).astype(float)
        g = rng.integers(-10, 40, 50).astype(float)
        lt, le = _dense_bounds(vals, g)
        assert lt.tolist() == np.searchsorted(vals, g, "left").tolist()
        assert le.tolist() == np.searchsorted(vals, g, "right").tolist()
    assert _dense_bounds(np.array([0.0, 1.0]), np.array([0.5])) is None
    assert _dense_bounds(np.array([0.0, 1.0]), np.array([np.nan])) is None
    assert _dense_bounds(np.array([0.0, 1e9]), np.array([3.0])) is None  # too wide a range
