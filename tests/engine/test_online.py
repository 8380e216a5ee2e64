"""Online evaluation (docs/language.md, Streams): over any split into batches, any order
within the watermark's delay, any snapshot and restore, the rows emitted equal
cogra.evaluate over the on-time events; late events are counted, never matched."""

from __future__ import annotations

import random
import warnings

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import cogra
from cogra.datasets import stock
from cogra.examples import Q3
from cogra.runtime.online import OnlineEvaluation, state_kind
from cogra.runtime.stream import unsupported_reason
from tests.compare import assert_same_result
from tests.strategies import cases

STATES = ("auto", "carried", "held")
COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck), database=None)


def batch_result(query: str, table: pa.Table) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        return cogra.evaluate(query, table, on_overflow="null")


def sorted_rows(table: pa.Table) -> pa.Table:
    keys = [(n, "ascending") for n in ("window_start", *table.column_names) if n in table.column_names]
    return table.sort_by(list(dict.fromkeys(keys)))


def run_online(query: str, table: pa.Table, cuts: list[int], delay: int, shuffle_seed: int,
               restore_at: set[int], states: str = "auto", journal: bool = False) -> tuple[pa.Table, OnlineEvaluation]:
    """Push ``table`` in batches cut at ``cuts`` (rows shuffled within the delay), advancing
    the watermark after each; snapshot and restore into a new evaluation at ``restore_at``.
    ``journal``: the held rows are kept apart, as a streaming state store does: every
    journaled chunk is logged, a chunk dropped only once its latest time is below
    ``held_from()``, and a restore reads the snapshot without rows plus the log."""
    def make():
        return OnlineEvaluation(query, table.schema, delay=delay, on_overflow="null", states=states,
                                journal=journal)

    online = make()
    log: list[pa.Table] = []
    order = list(range(table.num_rows))
    rng = random.Random(shuffle_seed)
    times = table.column("time").to_pylist()
    # Out of order, but by less than the delay (so that nothing is late; an event whose
    # time is the watermark, largest seen minus the delay, would be): swap neighbours.
    for i in range(len(order) - 1):
        a, b = order[i], order[i + 1]
        if times[a] is not None and times[b] is not None and abs(times[a] - times[b]) < delay \
                and rng.random() < 0.5:
            order[i], order[i + 1] = b, a
    shuffled = table.take(pa.array(order, pa.int64()))
    bounds = sorted({0, table.num_rows, *(c % (table.num_rows + 1) for c in cuts)})
    outputs = []
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        online.push(shuffled.slice(a, b - a))
        outputs.append(online.advance())
        if journal:
            log.extend(online.take_journal())
            since = online.held_from()
            if since is not None:
                log = [t for t in log if int(online.slices.times(t).max()) >= since]
        if k in restore_at:
            data = online.snapshot(rows=not journal)
            online = make()
            online.restore(data, rows=log)
    outputs.append(online.finish())
    return pa.concat_tables(outputs), online


@settings(max_examples=400, **COMMON)
@given(case=cases(max_events=14), cuts=st.lists(st.integers(0, 100), max_size=6),
       delay=st.integers(1, 3), shuffle_seed=st.integers(0, 10**6),
       restore_at=st.sets(st.integers(0, 6), max_size=3), states=st.sampled_from(STATES),
       journal=st.booleans())
def test_online_equals_batch_over_any_split_order_and_restart(case, cuts, delay, shuffle_seed, restore_at,
                                                              states, journal):
    """Both state kinds: ``carried`` wherever the kernels can carry the query (float sums
    included: the generated values never stop them), ``held`` for every query; the held
    rows in the snapshot or kept apart (``journal``)."""
    q, table = case
    assume("WITHIN" in q.text)
    if states == "carried":
        assume(unsupported_reason(cogra.plan(q.text, table.schema)) is None)
    got, online = run_online(q.text, table, cuts, delay, shuffle_seed, restore_at, states, journal)
    assert online.kind == (state_kind(online.plan) if states == "auto" else states)
    assert online.counters["rows_late"] == 0  # out of order only within the delay
    assert_same_result(sorted_rows(got), sorted_rows(batch_result(q.text, table)),
                       context=f"\nquery:\n{q.text}\nstream:\n{table.to_pylist()}\ncuts {cuts} delay {delay}")


@settings(max_examples=200, **COMMON)
@given(case=cases(max_events=14), late=st.lists(st.integers(0, 13), max_size=4), states=st.sampled_from(STATES))
def test_late_events_are_counted_and_never_matched(case, late, states):
    """After the stream, events at or below the watermark arrive: counted, not matched."""
    q, table = case
    assume("WITHIN" in q.text and table.num_rows)
    if states == "carried":
        assume(unsupported_reason(cogra.plan(q.text, table.schema)) is None)
    online = OnlineEvaluation(q.text, table.schema, on_overflow="null", states=states)
    online.push(table)
    first = online.advance()
    watermark = online.state.watermark
    assume(watermark is not None)
    stragglers = table.take(pa.array(sorted({i % table.num_rows for i in late}), pa.int64()))
    on_time = pc.fill_null(pc.greater(stragglers.column("time"), watermark), True)  # NULL times: no events
    assume(not pc.any(on_time).as_py())
    n_events = stragglers.num_rows - stragglers.column("time").null_count
    assert online.push(stragglers) == n_events
    got = pa.concat_tables([first, online.advance(), online.finish()])
    assert online.counters["rows_late"] == n_events
    assert_same_result(sorted_rows(got), sorted_rows(batch_result(q.text, table)))


def test_q3_online_in_ten_second_batches_with_a_restart() -> None:
    table = stock(6000, seed=4)  # ~10 minutes of ticks
    got, online = run_online(Q3, table, cuts=list(range(0, 6000, 97)), delay=5, shuffle_seed=1,
                             restore_at={7, 30})
    assert online.counters["rows_late"] == 0
    want = batch_result(Q3, table)
    assert got.num_rows == want.num_rows > 1000
    assert_same_result(sorted_rows(got), sorted_rows(want))
    # Memory: only the open windows' rows are held (10 minutes here, all of them at most).
    assert online.state.held is None or online.state.held.num_rows <= table.num_rows


def test_a_streaming_query_needs_within_and_integral_windows() -> None:
    schema = pa.schema([("type", pa.string()), ("time", pa.int64())])
    with pytest.raises(cogra.QueryError, match="needs WITHIN"):
        OnlineEvaluation("RETURN COUNT(*) PATTERN A+", schema)
    texts = pa.schema([("type", pa.string()), ("time", pa.string())])
    with pytest.raises(cogra.QueryError):
        OnlineEvaluation("RETURN COUNT(*) PATTERN A+ WITHIN 2 seconds", texts)


@settings(max_examples=30, **COMMON)
@given(case=cases(max_events=14), fractions=st.lists(st.floats(0, 0.999), min_size=14, max_size=14),
       cuts=st.lists(st.integers(0, 100), max_size=6), delay=st.integers(1, 3),
       shuffle_seed=st.integers(0, 10**6), restore_at=st.sets(st.integers(0, 6), max_size=3))
def test_double_seconds_online_equal_batch(case, fractions, cuts, delay, shuffle_seed, restore_at):
    """Times in double seconds (read as whole microseconds, floored): the same rows as
    batch over any split, order within the delay, and restart."""
    q, table = case
    assume("WITHIN" in q.text)
    times = [None if t is None else t + fractions[i % 14] for i, t in enumerate(table.column("time").to_pylist())]
    table = table.set_column(table.schema.get_field_index("time"), "time", pa.array(times, pa.float64()))
    got, online = run_online(q.text, table, cuts, delay, shuffle_seed, restore_at)
    assert online.counters["rows_late"] == 0
    assert_same_result(sorted_rows(got), sorted_rows(batch_result(q.text, table)),
                       context=f"\nquery:\n{q.text}\nstream:\n{table.to_pylist()}\ncuts {cuts} delay {delay}")


@pytest.mark.slow
@settings(max_examples=200, **COMMON)
@given(case=cases(max_events=14), fractions=st.lists(st.floats(0, 0.999), min_size=14, max_size=14),
       cuts=st.lists(st.integers(0, 100), max_size=6), delay=st.integers(1, 3),
       shuffle_seed=st.integers(0, 10**6), restore_at=st.sets(st.integers(0, 6), max_size=3))
def test_double_seconds_online_equal_batch_many(case, fractions, cuts, delay, shuffle_seed, restore_at):
    test_double_seconds_online_equal_batch.hypothesis.inner_test(case, fractions, cuts, delay, shuffle_seed,
                                                                 restore_at)


def test_held_rows_stay_bounded_by_the_open_windows() -> None:
    """A long stream: what is held is the last window's rows and the delay's, not the stream."""
    table = stock(40_000, seed=2)
    query = "RETURN company, COUNT(*) PATTERN Stock A+ SEMANTICS next GROUP-BY company WITHIN 30 seconds"
    online = OnlineEvaluation(query, table.schema, delay=2)
    most = 0
    for batch in table.to_batches(max_chunksize=500):
        online.push(batch)
        online.advance()
        most = max(most, online.state.held.num_rows if online.state.held is not None else 0)
    assert most < 1000  # ~10 events/s: 32 s of rows and a batch


def test_carried_states_at_scale_with_restarts() -> None:
    """A type-grained sliding query over 20k ticks, out of order within the delay, cut
    into ~200 batches with restarts: the kernels carry the open windows (no event is kept
    past the watermark), and the state does not grow with the stream."""
    table = stock(20_000, seed=5)
    query = ("RETURN sector, COUNT(*), SUM(A.volume), MIN(A.price), MAX(B.price) "
             "PATTERN SEQ(Stock A+, Stock B) WHERE [company] AND A.volume < 5000 "
             "GROUP-BY sector WITHIN 60 seconds SLIDE 20 seconds")
    got, online = run_online(query, table, cuts=list(range(0, 20_000, 97)), delay=3, shuffle_seed=2,
                             restore_at=set(range(0, 200, 17)))
    assert online.kind == "carried"
    want = batch_result(query, table)
    assert got.num_rows == want.num_rows > 500
    assert_same_result(sorted_rows(got), sorted_rows(want))
    sizes = []
    online = OnlineEvaluation(query, table.schema, delay=3)
    for batch in table.to_batches(max_chunksize=500):
        online.push(batch)
        online.advance()
        sizes.append(len(online.snapshot()))
    assert max(sizes[20:]) < 2 * max(sizes[:20])  # flat: bounded by the open windows
    assert online.state.held is None or online.state.held.num_rows < 500


def test_a_restored_evaluation_without_open_windows_rescales_nothing() -> None:
    """Restored with no open window, the first batch that needs a finer float scale has
    nothing to rescale (found by the property test: NULL-only values, then 0.5)."""
    rows = pa.table({"type": ["A"] * 9, "time": [None, 0, 0, 0, 0, 0, 0, 0, 3],
                     "v": [0, 0, 0, 0, 0, 0, 0, None, None],
                     "w": [None] * 8 + [0.5], "h": [0] * 9})
    query = "RETURN AVG(V0.w) PATTERN (SEQ(A V0, A V1)+)+ WHERE V0.v > 1 AND [h] WITHIN 2 seconds SLIDE 1 seconds"
    got, online = run_online(query, rows, cuts=[], delay=1, shuffle_seed=0, restore_at={0}, states="carried")
    assert online.kind == "carried"
    assert_same_result(sorted_rows(got), sorted_rows(batch_result(query, rows)))
