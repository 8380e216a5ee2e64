"""Streaming evaluation (cogra.evaluate_batches, StreamEvaluation) equals whole-table
evaluation.

Random queries and streams from the property-test generator, cut into random batches
(ties split across batches included); what the kernels cannot carry is known before any
data is read; out-of-order streams are rejected; the scale of float sums may grow
mid-stream; and the open windows -- the only state kept -- stay few.
"""

from __future__ import annotations

import math

import warnings

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import cogra
from cogra.datasets import stock
from cogra.runtime.online import OnlineEvaluation
from cogra.runtime.stream import StreamEvaluation, unsupported_reason
from tests.compare import assert_same_result
from tests.strategies import cases

COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def batches_of(table: pa.Table, cuts: list[int]) -> list[pa.Table]:
    edges = sorted({0, table.num_rows, *[c % (table.num_rows + 1) for c in cuts]})
    return [table.slice(a, b - a) for a, b in zip(edges, edges[1:])]


def streamed(query: str, parts, **kw) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        return cogra.evaluate_batches(query, parts, **kw)


def whole(query: str, table: pa.Table, **kw) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        return cogra.evaluate(query, table, **kw)


def check_batches(case, cuts) -> None:
    """The stream of ``case`` cut at ``cuts`` equals the whole table (skip what cannot stream)."""
    q, table = case
    assume(not pa.types.is_floating(table.schema.field("time").type))
    got = streamed(q.text, batches_of(table, cuts), schema=table.schema, on_overflow="null")
    assert_same_result(got, whole(q.text, table, on_overflow="null"),
                       context=f"\nquery:\n{q.text}\ncuts={cuts}\nstream:\n{table.to_pylist()}")


@settings(max_examples=400, **COMMON)
@given(case=cases(max_events=14), cuts=st.lists(st.integers(0, 100), max_size=6))
def test_batches_equal_the_whole_table(case, cuts) -> None:
    check_batches(case, cuts)


@pytest.mark.parametrize("semantics", ["skip-till-any-match", "skip-till-next-match", "contiguous"])
@pytest.mark.parametrize("order", ["time", "key-then-time"])
def test_stock_in_batches(semantics: str, order: str) -> None:
    table = stock(3000)
    if order == "key-then-time":  # as Spark hands a partition over: StreamEvaluation
        table = table.take(pc.sort_indices(table, [("company", "ascending"), ("time", "ascending")]))
    query = (f"RETURN company, COUNT(*), COUNT(A), SUM(A.volume), AVG(A.price), MIN(A.price), MAX(B.price)\n"
             f"PATTERN SEQ(Stock A+, Stock B)\nSEMANTICS {semantics}\nWHERE [company] AND A.volume < 5000\n"
             f"GROUP-BY company\nWITHIN 3 minutes SLIDE 1 minutes")
    want = whole(query, table, on_overflow="null")
    for size in (13, 997, 3000):
        if order == "time":
            got = streamed(query, table.to_batches(max_chunksize=size), on_overflow="null")
        else:
            stream = StreamEvaluation(cogra.plan(query, table.schema), table.schema, on_overflow="null",
                                      sorted_by=("company",))
            for batch in table.to_batches(max_chunksize=size):
                stream.push(batch)
            got = stream.finish()
        assert_same_result(got, want, context=f"batch size {size}")
    assert want.num_rows > 100


def test_open_windows_stay_few() -> None:
    # 19 companies, 10-minute windows sliding by 5: at most ~3 windows per company are open
    # at once, however long the stream -- that is all the stream keeps besides one batch.
    table = stock(50_000)
    query = ("RETURN company, COUNT(*), AVG(A.price) PATTERN Stock A+ WHERE [company] "
             "GROUP-BY company WITHIN 10 minutes SLIDE 5 minutes")
    stream = StreamEvaluation(cogra.plan(query, table.schema), table.schema, on_overflow="null")
    for batch in table.to_batches(max_chunksize=2000):
        stream.push(batch)
    got = stream.finish()
    assert_same_result(got, whole(query, table, on_overflow="null"))
    assert stream.stats["max_open_windows"] <= 19 * 3
    assert stream.stats["windows_closed"] == got.num_rows


def test_float_scale_grows_mid_stream() -> None:
    # Cents first, then a value that needs a finer binary scale (and a huge one): the
    # carried sums are rescaled and stay exact.
    first = pa.table({"type": ["A"] * 4, "time": [1, 2, 3, 4], "x": [0.25, 1.5, 2.75, 10.0]})
    second = pa.table({"type": ["A"] * 3, "time": [5, 6, 7], "x": [0.1, 1e9, 3.0]})
    query = "RETURN COUNT(*), SUM(A.x), AVG(A.x), MIN(A.x) PATTERN A+ WITHIN 100 seconds"
    got = streamed(query, [first, second])
    want = whole(query, pa.concat_tables([first, second]))
    assert got.equals(want)
    # Beyond 2**93 (0.1 needs 2**-56 resolution, 1e15 is 2**50) exact streaming sums end:
    # the stream says so instead of rounding.
    third = pa.table({"type": ["A"], "time": [8], "x": [1e15]})
    stream = StreamEvaluation(cogra.plan(query, first.schema), first.schema)
    with pytest.raises(cogra.DataError, match="2\\*\\*93"):
        for batch in (first, second, third):
            stream.push(batch)
        stream.finish()
    with pytest.raises(cogra.DataError, match="2\\*\\*93"):
        streamed(query, [first, second, third])  # evaluate_batches carries states too
    # A long-running OnlineEvaluation holds such a query's events instead (it must not
    # stop), and evaluates them exactly.
    online = OnlineEvaluation(query, first.schema)
    assert online.kind == "held"
    for batch in (first, second, third):
        online.push(batch)
    got = pa.concat_tables([online.advance(), online.finish()])
    assert got.equals(whole(query, pa.concat_tables([first, second, third])))


def test_timestamps_in_milliseconds() -> None:
    rng = np.random.default_rng(5)
    ms = np.sort(rng.integers(0, 600_000, 500))
    table = pa.table({"type": rng.choice(["A", "B"], 500), "time": pa.array(ms, pa.timestamp("ms")),
                      "v": rng.integers(0, 10, 500)})
    query = "RETURN COUNT(*), MAX(B.time), SUM(A.v) PATTERN SEQ(A+, B) WITHIN 1 minutes SLIDE 20 seconds"
    want = whole(query, table, on_overflow="null")
    assert streamed(query, table.to_batches(max_chunksize=37), on_overflow="null").equals(want)


@pytest.mark.parametrize("query, reason", [
    ("RETURN COUNT(*) PATTERN A+ WHERE A.v > NEXT(A).v", "keeps events"),
    ("RETURN A.k, COUNT(*) PATTERN SEQ(A+, B) WHERE [A.k] GROUP-BY A.k", "variable keys"),
    ("RETURN COUNT(*) PATTERN A+ WITHIN 1.5 seconds", "whole sizes"),
    ("RETURN MIN(A.k) PATTERN A+", "string"),
])
def test_queries_the_kernels_cannot_carry_say_why(query: str, reason: str) -> None:
    schema = pa.schema([("type", pa.string()), ("time", pa.int64()), ("v", pa.int64()), ("k", pa.string())])
    assert reason in unsupported_reason(cogra.plan(query, schema))
    with pytest.raises(ValueError, match=reason):
        StreamEvaluation(cogra.plan(query, schema), schema)


def test_out_of_order_is_an_error() -> None:
    a = pa.table({"type": ["A", "A"], "time": [5, 6], "g": [1, 1]})
    b = pa.table({"type": ["A", "A"], "time": [4, 9], "g": [2, 1]})
    query = "RETURN g, COUNT(*) PATTERN A+ WHERE [g] GROUP-BY g"
    # StreamEvaluation: key 2 starts at 4, fine (each sub-stream has its own order) ...
    stream = StreamEvaluation(cogra.plan(query, a.schema), a.schema)
    stream.push(a)
    stream.push(b)
    assert stream.finish().to_pylist() == whole(query, pa.concat_tables([a, b])).to_pylist()
    # ... but key 1 going back in time is not.
    stream = StreamEvaluation(cogra.plan(query, a.schema), a.schema)
    with pytest.raises(cogra.DataError, match="out of time order"):
        for batch in (a, b, pa.table({"type": ["A"], "time": [5], "g": [1]})):
            stream.push(batch)
    # evaluate_batches: a stream in time order, out of order by at most its delay.
    with pytest.raises(cogra.DataError, match="time 4 after 6"):
        streamed(query, [a, b])
    assert streamed(query, [a, b], delay=2).to_pylist() == whole(query, pa.concat_tables([a, b])).to_pylist()


def test_null_times_are_counted_and_ties_across_batches_meet() -> None:
    a = pa.table({"type": ["A", "A", "A"], "time": [1, 2, None]})
    b = pa.table({"type": ["A", "A"], "time": [2, 3]})  # time 2 continues from the first batch
    query = "RETURN COUNT(*) PATTERN A+ SEMANTICS skip-till-next-match"
    with pytest.warns(cogra.CograDataWarning, match="1 row"):
        got = cogra.evaluate_batches(query, [a, b])
    want = whole(query, pa.concat_tables([a, b]))
    assert got.to_pylist() == want.to_pylist()
    assert got.schema.metadata[b"cogra.rows_null_time"] == b"1"


def test_key_sorted_streams_close_keys_early() -> None:
    # Sorted by key, then time (a Spark partition): a key followed by another is complete,
    # so only the last key's windows stay open.
    table = stock(4000)
    table = table.take(pc.sort_indices(table, [("company", "ascending"), ("time", "ascending")]))
    query = ("RETURN company, COUNT(*), SUM(A.volume), MAX(A.price) PATTERN Stock A+ WHERE [company] "
             "GROUP-BY company WITHIN 5 minutes SLIDE 1 minutes")
    stream = StreamEvaluation(cogra.plan(query, table.schema), table.schema, on_overflow="null",
                              sorted_by=("company",))
    for batch in table.to_batches(max_chunksize=300):
        stream.push(batch)
    got = stream.finish()
    assert_same_result(got, whole(query, table, on_overflow="null"))
    # At most two keys' windows at once (a batch spans a key boundary); one key's events
    # span ~400 s here, so up to 400/60 + 5 + 1 of its windows are open.
    assert stream.stats["max_open_windows"] <= 2 * 13
    # A finished key that shows up again breaks the promise: an error, not a wrong result.
    again = StreamEvaluation(cogra.plan(query, table.schema), table.schema, sorted_by=("company",))
    again.push(table.slice(0, 300))
    again.push(table.slice(table.num_rows - 10))
    with pytest.raises(cogra.DataError, match="declared sorted by company"):
        again.push(table.slice(0, 5))


def test_streams_sorted_by_some_plain_keys_interleave_the_others() -> None:
    """Sorted by sector, then time (Spark's partitions for GROUP-BY sector): the company
    sub-streams of ``[company]`` interleave within a sector; a sector followed by another
    is complete."""
    table = stock(6000)
    table = table.take(pc.sort_indices(table, [("sector", "ascending"), ("time", "ascending")]))
    query = ("RETURN sector, COUNT(*), SUM(B.volume) PATTERN SEQ(Stock A, Stock B+) WHERE [company] "
             "GROUP-BY sector WITHIN 20 seconds")
    stream = StreamEvaluation(cogra.plan(query, table.schema), table.schema, sorted_by=("sector",))
    for batch in table.to_batches(max_chunksize=250):
        stream.push(batch)
    assert_same_result(stream.finish(), whole(query, table))
    with pytest.raises(ValueError, match="not a plain key"):
        StreamEvaluation(cogra.plan(query, table.schema), table.schema, sorted_by=("volume",))
    # A sector that returns after another: an error, not a wrong result.
    again = StreamEvaluation(cogra.plan(query, table.schema), table.schema, sorted_by=("sector",))
    again.push(table.slice(0, 300))
    again.push(table.slice(table.num_rows - 10))
    with pytest.raises(cogra.DataError, match="declared sorted by sector"):
        again.push(table.slice(0, 5))


def test_negative_zero_and_nan_keys_are_one_key_each_across_batches() -> None:
    """As in Spark's GROUP BY: 0.0 and -0.0 are one group, every NaN another."""
    g = [0.0, -0.0, 0.0, float("nan"), -0.0, float("nan"), 0.0, float("nan")]
    table = pa.table({"type": ["A"] * 8, "time": list(range(8)), "g": g})
    query = "RETURN g, COUNT(*) PATTERN A+ GROUP-BY g"
    want = {0.0: 2**5 - 1, "nan": 2**3 - 1}

    def counts(result: pa.Table) -> dict:
        return {("nan" if r["g"] != r["g"] else r["g"]): r["COUNT(*)"] for r in result.to_pylist()}

    assert counts(cogra.evaluate(query, table)) == want
    assert counts(cogra.evaluate_batches(query, table.to_batches(max_chunksize=1))) == want
    assert math.copysign(1.0, cogra.evaluate(query, table.slice(1)).column("g")[0].as_py()) == 1.0


def test_column_types_the_kernels_refuse_are_found_before_any_batch() -> None:
    schema = pa.schema([("type", pa.string()), ("time", pa.int64()), ("big", pa.uint64())])
    assert "uint64" in unsupported_reason(cogra.plan("RETURN SUM(A.big) PATTERN A+", schema))
    assert OnlineEvaluation("RETURN SUM(A.big) PATTERN A+ WITHIN 5 seconds", schema).kind == "held"


@settings(max_examples=25, **COMMON)
@given(case=cases(max_events=14), cuts=st.lists(st.integers(0, 100), max_size=6))
def test_generated_kernels_continue_windows_too(case, cuts, generated_kernels) -> None:
    check_batches(case, cuts)


def test_generated_kernel_on_large_batches_with_huge_counts() -> None:
    # A+ under any over 2,000 events in one window: counts pass 2**600 and are rescaled
    # inside the generated kernel; the stream equals the whole table.
    n = 60_000
    table = pa.table({"type": ["A"] * n, "time": np.arange(n) // 30, "v": np.arange(n) % 7})
    query = "RETURN COUNT(*), AVG(A.v), MAX(A.v) PATTERN A+ WITHIN 100 seconds"
    want = whole(query, table, on_overflow="null")
    got = streamed(query, table.to_batches(max_chunksize=55_000), on_overflow="null")
    assert_same_result(got, want)


def test_an_overflow_names_the_item_window_group_and_fix_in_both_routes() -> None:
    table = stock(20000, seed=1)
    query = ("RETURN sector, COUNT(*) PATTERN SEQ(Stock A, Stock B+) WHERE [company] "
             "GROUP-BY sector WITHIN 10 minutes")
    for run in (lambda: cogra.evaluate(query, table),
                lambda: cogra.evaluate_batches(query, table.to_batches(max_chunksize=5000))):
        with pytest.raises(cogra.AggregateOverflowError) as info:
            run()
        message = str(info.value)
        assert message.startswith("MATCH_TREND overflow: COUNT(*) does not fit int64 in window [0, 600) "
                                  "of group sector = 'S00'"), message
        assert "spark.sql.ansi.enabled=false" in message and "shorter WITHIN" in message
