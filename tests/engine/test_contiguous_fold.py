"""Contiguous semantics with predicates that read the earlier event.

Under ``contiguous`` an event's predecessors are the events at the sub-stream's previous
timestamp.  When that timestamp holds one event, ``A.x < NEXT(A).x`` is decided per row
(``Engine.contiguous_pair_ok_bits``) and the variable needs no per-event state, so the
pattern-grained kernel and window sharing apply.  A tie at a predecessor timestamp keeps
the per-event kernel.  Both must equal the two-step reference.
"""

from __future__ import annotations

import contextlib
import re
import warnings

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import cogra
from cogra.datasets import activity, events
from cogra.reference import evaluate_reference
from cogra.runtime.engine import Engine
from tests.compare import assert_same_result
from tests.engine.test_sliding import forced
from tests.strategies import queries, streams

COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                  HealthCheck.filter_too_much])
READS_EARLIER = re.compile(r"V\d+\.[vw][^A-Z]*NEXT\(")


@contextlib.contextmanager
def fold_spy():
    """Yields the list of what ``contiguous_pair_ok_bits`` decided per call (folded or not)."""
    folded: list[bool] = []
    real = Engine.contiguous_pair_ok_bits

    def spy(engine, subs, base):
        bits = real(engine, subs, base)
        folded.append(bits is not None)
        return bits

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Engine, "contiguous_pair_ok_bits", spy)
        yield folded


def evaluate(query: str, table: pa.Table, **kw) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        return cogra.evaluate(query, table, on_overflow="null", **kw)


def reference(query: str, table: pa.Table) -> pa.Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        return evaluate_reference(query, table, on_overflow="null")


@st.composite
def contiguous_cases(draw, distinct_times: bool):
    q = draw(queries())
    assume(READS_EARLIER.search(q.text) is not None)
    text = re.sub(r"SEMANTICS \S+", "SEMANTICS contiguous", q.text)
    table = draw(streams(max_events=12, types=q.event_types))
    if distinct_times:  # strictly increasing times: every predecessor is unique
        times = table.column("time").to_pylist()
        table = table.set_column(1, "time", pa.array(
            [None if t is None else i for i, t in enumerate(times)], pa.int64()))
    return text, table


@settings(max_examples=400, **COMMON)
@given(case=contiguous_cases(distinct_times=True))
def test_folded_equals_reference(case) -> None:
    text, table = case
    with fold_spy() as folded:
        got = evaluate(text, table)
    assert_same_result(got, reference(text, table), context=f"\n{text}\n{table.to_pylist()}")
    if not any(cogra.plan(text, table.schema).bound.var_keys):  # no variable keys: it folds
        assert all(folded)


@settings(max_examples=400, **COMMON)
@given(case=contiguous_cases(distinct_times=False))
def test_ties_equal_reference(case) -> None:
    text, table = case
    assert_same_result(evaluate(text, table), reference(text, table),
                       context=f"\n{text}\n{table.to_pylist()}")


@settings(max_examples=200, **COMMON)
@given(case=contiguous_cases(distinct_times=True))
def test_folded_with_window_sharing_equals_reference(case) -> None:
    text, table = case
    text = text.split("\nWITHIN")[0] + "\nWITHIN 4 seconds SLIDE 1 second"
    with forced():
        got = evaluate(text, table)
    assert_same_result(got, reference(text, table), context=f"\n{text}\n{table.to_pylist()}")


# ---------------------------------------------------------------------------
# Hand-checked cases
# ---------------------------------------------------------------------------

INCREASING = "RETURN COUNT(*), MAX(M.v) PATTERN M+ SEMANTICS contiguous WHERE M.v < NEXT(M).v"


def test_increasing_runs() -> None:
    # v = 1 2 3 1 2: runs 1<2<3 and 1<2; contiguous trends are the increasing sub-runs:
    # 5 single events, (1,2) (2,3) (1,2,3) and (1,2) -> 9 trends, max 3.
    table = events("m1 m2 m3 m4 m5", v=[1, 2, 3, 1, 2])
    with fold_spy() as folded:
        got = evaluate(INCREASING, table, compiled=True)
    assert got.to_pylist() == [{"COUNT(*)": 9, "MAX(M.v)": 3}]
    assert folded == [True]


def test_a_tie_at_the_predecessor_keeps_events() -> None:
    # m2 and m2' tie: m3 may follow either (only m2' = 0 is below 5) -- per-event state.
    table = events("m1 m2 m2 m3", v=[9, 7, 0, 5])
    with fold_spy() as folded:
        got = evaluate(INCREASING, table, compiled=True)
    # singles 4, (m2'=0, m3=5) -> 5 trends; m1=9 extends neither m2.
    assert got.to_pylist() == [{"COUNT(*)": 5, "MAX(M.v)": 9}]
    assert folded == [False]
    assert_same_result(got, reference(INCREASING, table))


def test_irrelevant_and_filtered_events() -> None:
    # x3 breaks contiguity; m4 (v=0) is filtered out by a local predicate, so m2 -> m5.
    q = INCREASING + " AND M.v > 0"
    table = events("m1 m2 x3 m4 m5 m6", v=[1, 2, 9, 0, 4, 3])
    got = evaluate(q, table, compiled=True)
    assert_same_result(got, reference(q, table))
    # singles m1 m2 m5 m6 = 4, plus (m1,m2); m5=4 > m6=3 -> 5 trends.
    assert got.to_pylist() == [{"COUNT(*)": 5, "MAX(M.v)": 4}]


@pytest.mark.parametrize("slide", [30, 600])
def test_q1_folded_equals_per_event_kernel(slide, monkeypatch) -> None:
    """The report's q1 on generated activity data: folded (and shared when sliding) vs the
    per-event kernel it replaces."""
    from cogra.runtime.compiled.windows import sliding

    q = f"""RETURN patient, MIN(M.rate), MAX(M.rate), COUNT(*) PATTERN Measurement M+
    SEMANTICS contiguous WHERE [patient] AND M.rate < NEXT(M).rate AND M.activity = passive
    GROUP-BY patient WITHIN 10 minutes SLIDE {slide} seconds"""
    table = activity(40_000)
    calls = []
    real = sliding.run_raw

    def counted(*args):
        out = real(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(sliding, "run_raw", counted)
    folded = evaluate(q, table, compiled=True)
    monkeypatch.setattr(Engine, "contiguous_pair_ok_bits", lambda self, subs, base: None)
    per_event = evaluate(q, table, compiled=True)
    assert folded.num_rows > 40
    assert_same_result(folded, per_event)
    assert calls[0] == (slide == 30)  # the sliding query shared its panes
