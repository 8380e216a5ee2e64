"""``cogra.explain``: golden plans for the report's q1-q3, and the executor/granularity choice.

The golden files are ``tests/fixtures/explain/q1.txt`` .. ``q3.txt``; after an intended
change of the explanation, regenerate them with ``COGRA_UPDATE_GOLDEN=1`` and review the
diff.  The choice itself (report Table 4, ARCHITECTURE.md) is asserted on the plan, so a
regenerated golden cannot hide a wrong executor.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import cogra
from cogra.analysis.granularity import Executor
from cogra.examples import EXAMPLES, Q1, Q2, Q3

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "explain"


def granularity(query: str, schema=None) -> dict[str, str]:
    return {g.variable: g.granularity for g in cogra.plan(query, schema).granularity}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_golden_explanation(example) -> None:
    text = cogra.explain(example.query)
    golden = GOLDEN / f"{example.name}.txt"
    if os.environ.get("COGRA_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text + "\n")
    assert golden.exists(), f"no golden for {example.name}; run with COGRA_UPDATE_GOLDEN=1"
    assert text + "\n" == golden.read_text()


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_explanation_with_the_real_schema_is_the_same(example) -> None:
    # Without a schema every named attribute is assumed; with the data's schema, the
    # bare word 'passive' (q1) is still no column, so nothing changes.
    assert cogra.explain(example.query, example.data(n_events=10).schema) == cogra.explain(example.query)


def test_q1_is_contiguous_with_m_event_grained() -> None:
    plan = cogra.plan(Q1)
    assert plan.executor is Executor.CONTIGUOUS
    assert granularity(Q1) == {"M": "event"}
    text = cogra.explain(Q1)
    assert "executor   pattern-grained (contiguous)" in text
    assert "adjacent     M.rate < NEXT(M).rate   on (M, M)" in text
    assert "local        M.activity = passive   filters M" in text
    assert "partition by   patient" in text


def test_q2_is_next_and_pattern_grained() -> None:
    plan = cogra.plan(Q2)
    assert plan.executor is Executor.NEXT
    assert granularity(Q2) == {"Accept": "pattern", "Call": "pattern", "Cancel": "pattern", "Finish": "pattern"}
    assert plan.bound.adjacent == ()
    text = cogra.explain(Q2)
    assert "Call     Call                      predTypes = {Accept, Cancel}" in text


def test_q3_is_mixed_with_a_event_grained_and_b_type_grained() -> None:
    plan = cogra.plan(Q3)
    assert plan.executor is Executor.MIXED_GRAINED
    assert granularity(Q3) == {"A": "event", "B": "type"}
    assert plan.bound.kept_variables == frozenset({0})
    text = cogra.explain(Q3)
    assert "variable keys  A.company, B.company" in text
    assert "partition by   sector" in text


@pytest.mark.parametrize("query", [
    "RETURN COUNT(*) PATTERN SEQ(A+, B)",
    "RETURN COUNT(*) PATTERN (SEQ(A+, B))+ WHERE [g] AND A.x > 5 AND B.y = 'k'",
    "RETURN COUNT(*), SUM(B.x) PATTERN SEQ(A+, B) SEMANTICS any GROUP-BY g WITHIN 1 minute",
])
def test_any_without_adjacent_predicates_is_type_grained(query: str) -> None:
    plan = cogra.plan(query)
    assert plan.executor is Executor.TYPE_GRAINED
    assert set(granularity(query).values()) == {"type"}
    assert plan.bound.adjacent == ()


def test_next_predicate_alone_keeps_nothing() -> None:
    query = "RETURN COUNT(*) PATTERN A+ WHERE NEXT(A).x > 5"
    plan = cogra.plan(query)
    assert plan.bound.kept_variables == frozenset()
    assert [p.uses_prev for p in plan.bound.adjacent] == [False]
    assert granularity(query) == {"A": "type"}
    assert "event-grained" not in cogra.explain(query)
    # Under next the same predicate leaves every variable pattern-grained.
    query_next = "RETURN COUNT(*) PATTERN SEQ(A+, B) SEMANTICS next WHERE NEXT(A).x > 5 AND NEXT(B).x < 1"
    assert cogra.plan(query_next).executor is Executor.NEXT
    assert granularity(query_next) == {"A": "pattern", "B": "pattern"}


def test_predicate_reading_the_earlier_event_makes_it_event_grained() -> None:
    # A.x < NEXT(B).x reads A when B arrives: A is kept, B is not.
    query = "RETURN COUNT(*) PATTERN SEQ(A+, B) WHERE A.x < NEXT(B).x AND NEXT(A).y > 5"
    assert cogra.plan(query).executor is Executor.MIXED_GRAINED
    assert granularity(query) == {"A": "event", "B": "type"}
    query_next = query.replace("WHERE", "SEMANTICS next WHERE")
    assert granularity(query_next) == {"A": "event", "B": "pattern"}
    # B.v < NEXT(A).v of the running example: B is read later.
    assert granularity("RETURN COUNT(*) PATTERN (SEQ(A+, B))+ WHERE B.v < NEXT(A).v") == {"A": "type", "B": "event"}


def test_contiguous_without_predicates_is_pattern_grained() -> None:
    query = "RETURN COUNT(*) PATTERN SEQ(A, B+, C) SEMANTICS contiguous"
    assert cogra.plan(query).executor is Executor.CONTIGUOUS
    assert granularity(query) == {"A": "pattern", "B": "pattern", "C": "pattern"}
