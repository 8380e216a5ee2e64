"""Time and windows (docs/language.md, Events, Windows and Time; ARCHITECTURE.md "Time"
and "Output").

Windows are aligned as Spark's ``window()``: ``[k*slide, k*slide + size)`` for every
integer ``k`` (negative too) whose window holds an event; without SLIDE they tumble.
Only (window, group) pairs with at least one finished trend are output, ordered by
window start, then group (NULL first).  Equal timestamps never follow each other.

Every test compares the engine with the two-step reference; most also pin the
hand-computed values (worked out in the comments).
"""

from __future__ import annotations

import datetime as dt
import warnings

import pyarrow as pa
import pytest

import cogra
from cogra.datasets import events
from cogra.reference import evaluate_reference
from tests.compare import assert_same_result

US = 1_000_000


def both(query: str, table: pa.Table, **kw) -> pa.Table:
    """The engine's result, after checking it equals the reference's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        got = cogra.evaluate(query, table, **kw)
        want = evaluate_reference(query, table, **kw)
    assert_same_result(got, want, context=f"\nquery: {query}\nstream: {table.to_pylist()}")
    return got


def rows(table: pa.Table, *columns: str) -> list[tuple]:
    cols = columns or tuple(table.schema.names)
    return list(zip(*(table.column(c).to_pylist() for c in cols)))


def micros(table: pa.Table, column: str) -> list[int]:
    """A timestamp column as integer microseconds since the epoch."""
    return table.column(column).cast(pa.int64()).to_pylist()


# ---------------------------------------------------------------------------
# Alignment
# ---------------------------------------------------------------------------


def test_sliding_windows_include_negative_k() -> None:
    # WITHIN 4 SLIDE 2: windows [2k, 2k+4).  -3 is in k=-3,-2; -1 in k=-2,-1; 0 in
    # k=-1,0; 2 in k=0,1.  A+ over n events of distinct times: 2^n - 1 trends.
    out = both("RETURN COUNT(*) PATTERN A+ WITHIN 4 seconds SLIDE 2 seconds", events("a-3 a-1 a0 a2"))
    assert rows(out) == [(1, -6, -2), (3, -4, 0), (3, -2, 2), (3, 0, 4), (1, 2, 6)]
    assert out.schema.names == ["COUNT(*)", "window_start", "window_end"]
    assert out.schema.field("window_start").type == pa.int64()


def test_tumbling_windows_without_slide() -> None:
    out = both("RETURN COUNT(*) PATTERN A+ WITHIN 4 seconds", events("a-3 a-1 a0 a2 a4"))
    assert rows(out) == [(3, -4, 0), (3, 0, 4), (1, 4, 8)]


def test_event_on_a_window_boundary_belongs_to_the_window_it_starts() -> None:
    # a4 is the end of [0, 4) (excluded) and the start of [4, 8) (included).
    out = both("RETURN COUNT(*) PATTERN A+ WITHIN 4 seconds SLIDE 2 seconds", events("a0 a2 a4"))
    assert rows(out) == [(1, -2, 2), (3, 0, 4), (3, 2, 6), (1, 4, 8)]


def test_sequence_split_by_a_boundary_has_no_trend_in_either_window() -> None:
    # a3 and b6 fall into different tumbling windows: no window has a finished trend.
    out = both("RETURN COUNT(*) PATTERN SEQ(A, B) WITHIN 3 seconds", events("a3 b6"))
    assert out.num_rows == 0
    # With SLIDE 1 the windows [4, 7) and [5, 8) ... hold b6 only; [3, 6) .. hold a3 only;
    # size 4 brings them together in [3, 7).
    out = both("RETURN COUNT(*) PATTERN SEQ(A, B) WITHIN 4 seconds SLIDE 1 second", events("a3 b6"))
    assert rows(out) == [(1, 3, 7)]


def test_minutes_slide_seconds_int_windows() -> None:
    # [30k, 30k+60): 0 and 29 in k=-1,0; 30 and 59 in k=0,1; 60 in k=1,2.
    out = both("RETURN COUNT(*) PATTERN A+ WITHIN 1 minute SLIDE 30 seconds", events("a0 a29 a30 a59 a60"))
    assert rows(out) == [(3, -30, 30), (15, 0, 60), (7, 30, 90), (1, 60, 120)]
    assert out.schema.field("window_end").type == pa.int64()


def test_epoch_scale_int_times_align_to_zero() -> None:
    base = 1_700_000_013  # not a multiple of 30
    table = pa.table({"type": ["A", "A"], "time": [base, base + 30]})
    out = both("RETURN COUNT(*) PATTERN A+ WITHIN 10 minutes SLIDE 30 seconds", table)
    starts = out.column("window_start").to_pylist()
    assert all(s % 30 == 0 for s in starts)
    # base is in the 20 windows starting 1_700_000_010 - 570 .. 1_700_000_010, base+30
    # in those starting 30 later; 19 are shared.
    assert starts[0] == 1_700_000_010 - 570 and starts[-1] == 1_700_000_010 + 30
    assert len(starts) == 21
    assert out.column("COUNT(*)").to_pylist() == [1] + [3] * 19 + [1]


# ---------------------------------------------------------------------------
# Window column types
# ---------------------------------------------------------------------------


def test_int_time_fractional_duration_gives_float64_windows() -> None:
    # [k/2, k/2 + 3/2): 0 in k=-2..0, 1 in k=0..2, 2 in k=2..4.
    out = both("RETURN COUNT(*) PATTERN A+ WITHIN 1500 ms SLIDE 500 ms", events("a0 a1 a2"))
    assert out.schema.field("window_start").type == pa.float64()
    assert rows(out) == [
        (1, -1.0, 0.5), (1, -0.5, 1.0), (3, 0.0, 1.5), (1, 0.5, 2.0),
        (3, 1.0, 2.5), (1, 1.5, 3.0), (1, 2.0, 3.5),
    ]


def test_ms_units_tumbling() -> None:
    out = both("RETURN COUNT(*) PATTERN A+ WITHIN 1500 ms", events("a0 a1 a1.4 a1.5"))
    # [0, 1.5): 0, 1, 1.4 -> 7 trends; [1.5, 3): 1.5 -> 1.
    assert rows(out) == [(7, 0.0, 1.5), (1, 1.5, 3.0)]


def test_float_times_give_float64_windows_even_with_whole_durations() -> None:
    table = pa.table({"type": ["A"] * 3, "time": [0.0, 1.0, 2.0]})
    out = both("RETURN COUNT(*) PATTERN A+ WITHIN 2 seconds", table)
    assert out.schema.field("window_start").type == pa.float64()
    assert rows(out) == [(3, 0.0, 2.0), (1, 2.0, 4.0)]


def test_float_times_and_fractional_slide() -> None:
    # [k/2, k/2 + 1): 0.5 in k=0,1; 0.75 in k=0,1; 1.0 in k=1,2 (not in [0, 1)).
    out = both("RETURN COUNT(*) PATTERN A+ WITHIN 1 second SLIDE 0.5 seconds", events("a0.5 a0.75 a1.0"))
    assert rows(out) == [(3, 0.0, 1.0), (7, 0.5, 1.5), (1, 1.0, 2.0)]


def test_float_time_compared_exactly_with_the_boundary() -> None:
    # Times are exact (ARCHITECTURE.md): the double 0.3 is 0.29999999999999998889...,
    # below the boundary 3/10 of WITHIN 0.3 seconds, so both events share [0, 0.3).
    table = pa.table({"type": ["A", "A"], "time": [0.0, 0.3]})
    out = both("RETURN COUNT(*) PATTERN A+ WITHIN 0.3 seconds", table)
    assert rows(out) == [(3, 0.0, 0.3)]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("tz", [None, "UTC"])
def test_timestamp_time_columns(unit: str, tz: str | None) -> None:
    base = dt.datetime(2024, 1, 1, 12, 0, 0)
    times = [base, base + dt.timedelta(seconds=1), base + dt.timedelta(seconds=2)]
    col = pa.array(times, pa.timestamp(unit)).cast(pa.timestamp(unit, tz=tz))
    table = pa.table({"type": ["A"] * 3, "time": col})
    out = both("RETURN COUNT(*) PATTERN A+ WITHIN 2 seconds SLIDE 1 second", table)
    want_type = pa.timestamp("us", tz=tz)
    assert out.schema.field("window_start").type == want_type
    assert out.schema.field("window_end").type == want_type
    b = int(dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc).timestamp()) * US
    # Windows [k, k+2) seconds: base-1 .. base+2.
    assert out.column("COUNT(*)").to_pylist() == [1, 3, 3, 1]
    assert micros(out, "window_start") == [b - US, b, b + US, b + 2 * US]
    assert micros(out, "window_end") == [b + US, b + 2 * US, b + 3 * US, b + 4 * US]


def test_timestamp_windows_keep_any_zone_and_align_to_the_epoch() -> None:
    naive = [dt.datetime(2024, 3, 10, 6, 59, 59), dt.datetime(2024, 3, 10, 7, 0, 0),
             dt.datetime(2024, 3, 10, 7, 0, 1)]  # UTC instants
    col = pa.array(naive, pa.timestamp("s")).cast(pa.timestamp("s", tz="America/New_York"))
    out = both("RETURN COUNT(*) PATTERN A+ WITHIN 1 hour", pa.table({"type": ["A"] * 3, "time": col}))
    assert out.schema.field("window_start").type == pa.timestamp("us", tz="America/New_York")
    six = int(dt.datetime(2024, 3, 10, 6, tzinfo=dt.timezone.utc).timestamp()) * US
    assert micros(out, "window_start") == [six, six + 3600 * US]
    assert out.column("COUNT(*)").to_pylist() == [1, 3]


def test_timestamp_ms_with_ms_windows() -> None:
    col = pa.array([0, 1000, 1400], pa.timestamp("ms"))
    out = both("RETURN COUNT(*) PATTERN A+ WITHIN 1500 ms SLIDE 500 ms", pa.table({"type": ["A"] * 3, "time": col}))
    # [0.5k, 0.5k + 1.5) s: 0 in k=-2..0; 1.0 and 1.4 in k=0..2.
    assert out.column("COUNT(*)").to_pylist() == [1, 1, 7, 3, 3]
    assert micros(out, "window_start") == [-1_000_000, -500_000, 0, 500_000, 1_000_000]


def test_timestamp_windows_of_days() -> None:
    col = pa.array([dt.datetime(2024, 1, 1, 23), dt.datetime(2024, 1, 2, 1)], pa.timestamp("us", tz="UTC"))
    out = both("RETURN COUNT(*) PATTERN A+ WITHIN 1 day", pa.table({"type": ["A", "A"], "time": col}))
    day = int(dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc).timestamp()) * US
    assert micros(out, "window_start") == [day, day + 86_400 * US]
    assert out.column("COUNT(*)").to_pylist() == [1, 1]


def test_nanosecond_timestamps_are_floored_to_microseconds() -> None:
    # -1 ns floors to -1 us, in [-1 s, 0); 1 ns floors to 0, in [0, 1 s).
    col = pa.array([-1, 1, 1_000_000_001], pa.timestamp("ns"))
    out = both("RETURN COUNT(*) PATTERN A+ WITHIN 1 second", pa.table({"type": ["A"] * 3, "time": col}))
    assert micros(out, "window_start") == [-US, 0, US]
    assert out.column("COUNT(*)").to_pylist() == [1, 1, 1]


# ---------------------------------------------------------------------------
# Equal timestamps
# ---------------------------------------------------------------------------


def test_ties_are_never_adjacent() -> None:
    # Three a1 and one a2: 4 single-event trends and the 3 pairs (a1_i, a2).
    assert rows(both("RETURN COUNT(*) PATTERN A+", events("a1 a1 a1 a2"))) == [(7,)]
    # Only ties: no pair at all.
    assert rows(both("RETURN COUNT(*) PATTERN A+", events("a5 a5 a5"))) == [(3,)]
    assert both("RETURN COUNT(*) PATTERN SEQ(A, B)", events("a5 b5 b5")).num_rows == 0


def test_ties_in_a_sequence() -> None:
    # A+ sequences of {a1, a1', a2}: {a1}, {a1'}, {a2}, {a1,a2}, {a1',a2}.  b1 follows
    # none; b2 follows {a1}, {a1'}; b3 follows all 5: COUNT(*) = 7,
    # COUNT(A) = (1+1) + (1+1+1+2+2) = 9.
    out = both("RETURN COUNT(*), COUNT(A), COUNT(B) PATTERN SEQ(A+, B)", events("a1 a1 b1 a2 b2 b3"))
    assert rows(out) == [(7, 9, 7)]


def test_ties_under_next_and_contiguous() -> None:
    # next: a1 is extended by the first events that can extend it, both b2's.
    assert rows(both("RETURN COUNT(*) PATTERN SEQ(A, B) SEMANTICS next", events("a1 b2 b2 b3"))) == [(2,)]
    # contiguous: (a1,b2), (a1,b2'); c3 ties with a3, so it is not between a3 and b4.
    out = both("RETURN COUNT(*) PATTERN SEQ(A, B) SEMANTICS cont", events("a1 b2 b2 b3 a3 c3 b4"))
    assert rows(out) == [(3,)]


def test_ties_written_out_of_order_and_in_windows() -> None:
    # Rows need not be sorted; the batch at time 2 is split by nothing.
    table = events("b3 a2 a1 a2 b2")
    out = both("RETURN COUNT(*), COUNT(A) PATTERN SEQ(A+, B) WITHIN 2 seconds SLIDE 1 second", table)
    # [1,3): a1 a2 a2' b2 -> b2 after {a1}: 1.  [2,4): a2 a2' b2 b3 -> b3 after {a2}, {a2'}: 2.
    # [0,2) holds a1 only, [3,5) b3 only: no trend, no row.
    assert rows(out) == [(1, 1, 1, 3), (2, 2, 2, 4)]


# ---------------------------------------------------------------------------
# Which rows appear, and in what order
# ---------------------------------------------------------------------------


def test_only_windows_with_a_finished_trend_appear() -> None:
    # [0,2): a1; [2,4): b2 a3 (b2 first); [4,6): b4.  Every window has events, none a trend.
    out = both("RETURN COUNT(*) PATTERN SEQ(A, B) WITHIN 2 seconds", events("a1 b2 a3 b4"))
    assert out.num_rows == 0
    assert out.schema.names == ["COUNT(*)", "window_start", "window_end"]
    assert out.schema.field("window_start").type == pa.int64()
    out = both("RETURN COUNT(*) PATTERN SEQ(A, B) WITHIN 2 seconds SLIDE 1 second", events("a1 b2 a3 b4"))
    assert rows(out) == [(1, 1, 3), (1, 3, 5)]


def test_windows_with_only_irrelevant_events_do_not_appear() -> None:
    out = both("RETURN COUNT(*) PATTERN SEQ(A, B) WITHIN 10 seconds", events("a1 b2 c15 c16 a21 b22"))
    assert rows(out) == [(1, 0, 10), (1, 20, 30)]


def test_output_ordered_by_window_then_group_null_first() -> None:
    # Rows written in a scrambled order; each event is a trend of its own (PATTERN A).
    table = pa.table({
        "type": ["A"] * 9,
        "time": [15, 3, 12, 1, 18, 7, 11, 5, 2],
        "g": ["y", "y", None, "x", "x", None, "y", "y", "x"],
    })
    out = both("RETURN g, COUNT(*) PATTERN A GROUP-BY g WITHIN 10 seconds", table)
    assert rows(out) == [
        (None, 1, 0, 10), ("x", 2, 0, 10), ("y", 2, 0, 10),
        (None, 1, 10, 20), ("x", 1, 10, 20), ("y", 2, 10, 20),
    ]


def test_output_order_with_two_grouping_columns_and_numbers() -> None:
    out = both("RETURN g, h, COUNT(*) PATTERN A GROUP-BY g, h", GROUPS)
    # Numbers numerically (-1 < 2 < 10), NULL first in each column.
    assert rows(out, "g", "h") == [(None, "q"), (-1, None), (-1, "a"), (2, "z"), (10, "a"), (10, "b")]


# g = 10: times 1, 3; g = -1: 2, 5; g = 2: 4; g = NULL: 6.
GROUPS = pa.table({
    "type": ["A"] * 6,
    "time": [1, 2, 3, 4, 5, 6],
    "g": [10, -1, 10, 2, -1, None],
    "h": ["b", None, "a", "z", "a", "q"],
})


def test_output_ordered_by_grouping_values_that_are_not_returned() -> None:
    query = "RETURN COUNT(*), MIN(A.time) PATTERN A GROUP-BY g"
    # Ordered by g: NULL, -1, 2, 10.
    want = [(1, 6), (2, 2), (1, 4), (2, 1)]
    assert rows(cogra.evaluate(query, GROUPS)) == want
    assert rows(evaluate_reference(query, GROUPS)) == want


def test_groups_have_their_own_windows() -> None:
    table = events("a1 b2 a13 b14", g=["p", "p", "q", "q"])
    out = both("RETURN g, COUNT(*) PATTERN SEQ(A, B) WHERE [g] GROUP-BY g WITHIN 10 seconds SLIDE 5 seconds", table)
    # p: a1 b2 in [-5, 5) and [0, 10).  q: a13 b14 in [5, 15) and [10, 20).
    assert rows(out) == [("p", 1, -5, 5), ("p", 1, 0, 10), ("q", 1, 5, 15), ("q", 1, 10, 20)]


def test_no_within_means_one_window_and_no_window_columns() -> None:
    out = both("RETURN COUNT(*) PATTERN A+", events("a-1000000 a0 a1000000"))
    assert out.schema.names == ["COUNT(*)"]
    assert rows(out) == [(7,)]


@pytest.mark.parametrize("order", ["key-then-time", "key-then-reversed-time", "shuffled"])
def test_row_order_does_not_matter(order: str) -> None:
    # Spark hands a partition over sorted by key, then time: the engine uses that order
    # as it is (no global sort) -- and must still sort when it is not in time order.
    import numpy as np
    import pyarrow.compute as pc

    from cogra.datasets import stock
    from cogra.runtime.engine import Engine

    table = stock(3000)
    query = ("RETURN company, COUNT(*), MIN(A.price), AVG(B.price) PATTERN SEQ(Stock A+, Stock B) "
             "WHERE [company] GROUP-BY company WITHIN 2 minutes SLIDE 30 seconds")
    want = cogra.evaluate(query, table, on_overflow="null")
    if order == "shuffled":
        other = table.take(np.random.default_rng(0).permutation(table.num_rows))
    else:
        direction = "ascending" if order == "key-then-time" else "descending"
        other = table.take(pc.sort_indices(table, [("company", "ascending"), ("time", direction)]))
    # Ties (equal times) meet in another order: huge AVGs from doubles may differ in the last bits.
    assert_same_result(cogra.evaluate(query, other, on_overflow="null"), want)
    engine = Engine(cogra.plan(query, other.schema), other)
    # Key-sorted input is used in place; anything else is sorted by time first.
    in_place = engine.table.column("company").equals(other.column("company"))
    assert in_place == (order == "key-then-time")


def test_windows_that_cannot_finish_a_trend_are_not_evaluated(monkeypatch) -> None:
    # SEQ(A, B): windows holding only Bs, or an A after the last B, hold no trend; they
    # are dropped before the kernels (as they are enumerated: Engine._finish_ends), and
    # the result is the same as evaluating them.
    import pyarrow as pa

    import cogra
    from cogra.reference import evaluate_reference
    from cogra.runtime.engine import Engine
    from tests.compare import assert_same_result

    types = ["B", "B", "A", "C", "B", "A", "A", "B", "C", "A"]
    table = pa.table({"type": types, "time": pa.array([0, 3, 7, 9, 12, 20, 21, 25, 31, 40], pa.int64()),
                      "v": pa.array(range(10), pa.int64())})
    query = "RETURN COUNT(*), SUM(B.v) PATTERN SEQ(A, B) SEMANTICS skip-till-any-match WITHIN 6 seconds SLIDE 2 seconds"
    for compiled in (None, False):
        engine = Engine(cogra.plan(query, table.schema), table, compiled=compiled)
        got = engine.result_table(on_overflow="null")
        evaluated = engine.stats["windows"]
        monkeypatch.setattr(Engine, "_finish_ends", lambda self, subs: None)
        engine = Engine(cogra.plan(query, table.schema), table, compiled=compiled)
        every = engine.result_table(on_overflow="null")
        monkeypatch.undo()
        assert evaluated < engine.stats["windows"]
        assert_same_result(got, every)
        assert_same_result(got, evaluate_reference(query, table, on_overflow="null"))
        assert got.num_rows > 0


def test_every_window_may_finish_when_every_variable_starts_and_finishes(monkeypatch) -> None:
    # A+ (its one variable starts and finishes trends): every enumerated window holds an
    # event that plays it, so none is dropped and the filter's pass is skipped; SEQ(A, B)
    # still runs it, and so does A+ where windows of idle events alone are kept.
    import pyarrow as pa

    import cogra
    from cogra.runtime.engine import Engine
    from cogra.runtime.compiled.windows import enumeration

    calls = []
    real = enumeration.may_finish
    monkeypatch.setattr(enumeration, "may_finish", lambda *a: (calls.append(1), real(*a))[1])
    table = pa.table({"type": ["B", "A", "C", "A", "B"], "time": pa.array([0, 3, 7, 12, 13], pa.int64())})

    def filtered(query: str, idle: bool = False):
        engine = Engine(cogra.plan(query, table.schema), table)
        engine.idle_events_matter = idle
        subs = engine.substreams()
        wins = engine.window_ranges(subs)
        return engine._windows_that_may_finish(subs, wins), wins

    kept, wins = filtered("RETURN COUNT(*) PATTERN A+ WITHIN 6 seconds SLIDE 2 seconds")
    assert kept is wins and len(wins.seg) and not calls
    kept, wins = filtered("RETURN COUNT(*) PATTERN SEQ(A, B) WITHIN 6 seconds SLIDE 2 seconds")
    assert calls and len(kept.seg) < len(wins.seg)
    calls.clear()
    filtered("RETURN COUNT(*) PATTERN A+ WITHIN 6 seconds SLIDE 2 seconds", idle=True)
    assert calls
