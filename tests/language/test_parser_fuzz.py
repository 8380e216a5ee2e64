"""Fuzzing the front end: any text is parsed, or refused with a QueryError that has a line
and a column; a query that parses is evaluated, or refused with a cogra error -- never a
crash of another kind (RecursionError, TypeError, an Arrow or numpy error ...)."""

from __future__ import annotations

import warnings

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cogra
from cogra.errors import CograError, QueryError
from tests.strategies import queries

VALID = [
    "RETURN COUNT(*) PATTERN SEQ(A, B+) WHERE A.v < NEXT(B).v WITHIN 5 seconds",
    "RETURN g, SUM(B.v), AVG(A.w) PATTERN SEQ(A+, B) SEMANTICS next WHERE [g] AND B.w > 1 GROUP-BY g",
    "RETURN MIN(Call.v), MAX(Call.w) PATTERN (Call | B)+ WHERE Call.v IN (1, 2) AND Call.s = 'it''s'",
    "RETURN COUNT(A) PATTERN SEQ(A, B?, A A2*) SEMANTICS contiguous WITHIN 10 seconds SLIDE 2 seconds",
    "RETURN COUNT(*) PATTERN A+ WHERE A.v BETWEEN SYMMETRIC 3 AND 1 AND A.b IS TRUE AND NOT A.w IS NULL",
]
WORDS = [
    "RETURN", "PATTERN", "SEMANTICS", "WHERE", "GROUP-BY", "WITHIN", "SLIDE", "COUNT(*)", "SUM", "AVG",
    "MIN", "MAX", "COUNT", "(", ")", "[", "]", ",", ".", "+", "*", "?", "|", "SEQ", "A", "B", "A2",
    "Call", "Case", "Set", "NEXT", "v", "w", "s", "b", "g", ">", "<", "=", "<>", ">=", "AND", "OR",
    "NOT", "IN", "BETWEEN", "SYMMETRIC", "IS", "NULL", "TRUE", "FALSE", "1", "0", "-1", "2.5", "1e400",
    "99999999999999999999999", "'x'", "'it''s'", "'a\\b'", '"q"', "`b`", "10", "seconds", "minutes",
    "hours", "any", "next", "contiguous", "skip-till-any-match", ";", "-", "/", "%", "\n", "SELECT",
    "CASE", "WHEN", "THEN", "END", "'", "#", "\\", "é", "\x00",
]
TABLE = pa.table({
    "type": ["A", "B", "Call", "A", "C", None], "time": [1, 2, 2, 3, 5, 6],
    "v": [1, 2, None, 3, -(2**63), 2**63 - 1], "w": [0.5, float("nan"), -0.0, None, 1e308, 2.0],
    "s": ["it's", "a\\b", None, "x", "", "y"], "b": [True, False, None, True, True, False],
    "g": [1, 1, 2, 2, None, 1], "h": [0, 1, None, 1, 0, 0], "k": ["p", "q", "p", None, "q", "p"],
})


def check(text: str) -> None:
    try:
        query = cogra.parse(text)
    except QueryError as e:
        assert e.line is not None and e.column is not None, f"{text!r}: {e}"
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        try:
            cogra.evaluate(query, TABLE)
        except CograError:
            pass


@st.composite
def mutated(draw) -> str:
    """A valid query (one of VALID, or a random one of tests.strategies) with up to two
    tokens replaced, inserted, deleted or repeated."""
    base = draw(st.one_of(st.sampled_from(VALID), queries().map(lambda q: q.text.replace("\n", " \n "))))
    tokens = base.split(" ")
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(tokens)))
        action = draw(st.sampled_from(["replace", "insert", "delete", "repeat"]))
        if action == "replace" and at < len(tokens):
            tokens[at] = draw(st.sampled_from(WORDS))
        elif action == "insert":
            tokens.insert(at, draw(st.sampled_from(WORDS)))
        elif action == "delete" and at < len(tokens) and len(tokens) > 1:
            del tokens[at]
        elif action == "repeat" and at < len(tokens):
            tokens[at:at + 1] = [tokens[at]] * draw(st.integers(2, 150))
    return " ".join(tokens)


words = st.lists(st.sampled_from(WORDS), max_size=40).map(" ".join)

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@FUZZ
@given(mutated())
def test_mutated_queries_fail_only_with_cogra_errors(text) -> None:
    check(text)


@FUZZ
@given(words)
def test_random_words_fail_only_with_cogra_errors(text) -> None:
    check(text)


@pytest.mark.slow
@settings(max_examples=5000, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.one_of(mutated(), words, st.text(max_size=80)))
def test_fuzz_more(text) -> None:
    check(text)
