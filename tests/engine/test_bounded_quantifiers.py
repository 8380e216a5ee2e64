"""Bounded quantifiers ``P{n}``, ``P{n,}``, ``P{n,m}`` (docs/language.md, Bounded
quantifiers).

* the section's worked examples, on both engine paths and the reference;
* the automaton: determinized over variable names (one state per prefix), minimized,
  and identical to the position automaton where no quantifier repeats a variable;
* aggregates, keys and predicates on adjacent events read every repetition;
* at the sizes users run (tens to hundreds of thousands of events, every window kind,
  plain keys, predicates), a quantified pattern equals the same pattern written out with
  one variable per repetition -- an equivalence that holds under all three semantics,
  since a trend of ``A{3,}`` is exactly a trend of ``SEQ(A A1, A A2, A A3+)``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

import cogra
from cogra.analysis.automaton import build_automaton
from cogra.errors import QueryError
from cogra.language import parse
from cogra.reference import evaluate_reference
from tests.compare import assert_same_result
from tests.strategies import patterns

SEMANTICS = ("any", "next", "contiguous")


def stream(text: str) -> pa.Table:
    """``"a1 a2 b3"``: letter = type, number = time."""
    tokens = text.split()
    return pa.table({"type": [t[0].upper() for t in tokens], "time": [int(t[1:]) for t in tokens],
                     "v": [int(t[1:]) * 10 for t in tokens]})


def counts(query: str, table: pa.Table) -> list[tuple]:
    """COUNT(*) of the engine (compiled, pure) and the reference."""
    return [tuple(cogra.evaluate(query, table, compiled=c).column(0).to_pylist()) for c in (None, False)] + [
        tuple(evaluate_reference(query, table).column(0).to_pylist())]


@pytest.mark.parametrize(("pattern", "events", "expected"), [
    ("A{2}", "a1 a2 a3", (3, 2, 2)),  # docs/language.md, Bounded quantifiers
    ("A{2,}", "a1 a2 a3", (4, 3, 3)),
    ("A{1,2}", "a1 a2 a3", (6, 5, 5)),
    ("A{1,}", "a1 a2 a3", (7, 6, 6)),  # = A+, docs/language.md, Worked examples
    ("A{0,}", "a1 a2 a3", (7, 6, 6)),  # = A*
    ("A{0,1}", "a1 a2 a3", (3, 3, 3)),  # = A?
    ("SEQ(A{2}, B)", "a1 a2 a3 b4", (3, 2, 1)),  # next: (a1,a2,b4), (a2,a3,b4)
    ("SEQ(A, B){2}", "a1 b2 a3 b4", (1, 1, 1)),
])
def test_worked_examples(pattern: str, events: str, expected: tuple[int, int, int]) -> None:
    for semantics, want in zip(SEMANTICS, expected):
        query = f"RETURN COUNT(*) PATTERN {pattern} SEMANTICS {semantics}"
        assert counts(query, stream(events)) == [(want,)] * 3, query


def test_next_extends_by_the_prefix_not_the_last_variable() -> None:
    # SEQ(A{2}, B) on a1 a2 a3 b4 a5 b6, under next: after (a1, a2) only a B may come, so a3
    # does not block b4 (a rule by the last variable alone -- "an A may follow an A" --
    # would, and lose (a1, a2, b4)).  Trends: (a1,a2,b4), (a2,a3,b4), (a3,a5,b6).
    query = "RETURN COUNT(*) PATTERN SEQ(A{2}, B) SEMANTICS next"
    assert counts(query, stream("a1 a2 a3 b4 a5 b6")) == [(3,)] * 3


def test_aggregates_keys_and_adjacent_predicates_read_every_repetition() -> None:
    table = pa.table({
        "type": ["A", "A", "A", "A", "B"],
        "time": [1, 2, 3, 4, 5],
        "v": [10, 20, 5, 30, 7],
        "k": ["x", "x", "y", "x", "x"],
    })
    query = """RETURN A.k, COUNT(*), COUNT(A), SUM(A.v), MIN(A.v), MAX(A.v)
               PATTERN SEQ(A{2,}, B)
               WHERE A.v < NEXT(A).v
               GROUP-BY A.k"""
    got = cogra.evaluate(query, table)
    # k = x: A events 10, 20, 30 (the 5 is y); increasing runs of >= 2 then b5:
    # (10,20), (10,30), (20,30), (10,20,30) -> 4 trends, 9 A events, sum 10+20+10+30+20+30+10+20+30.
    assert got.to_pylist() == [{"A.k": "x", "COUNT(*)": 4, "COUNT(A)": 9, "SUM(A.v)": 180,
                                "MIN(A.v)": 10, "MAX(A.v)": 30}]
    for compiled in (None, False):
        assert_same_result(cogra.evaluate(query, table, compiled=compiled), evaluate_reference(query, table))


# -- the automaton ---------------------------------------------------------------------


def automaton(pattern: str):
    return build_automaton(parse(f"RETURN COUNT(*) PATTERN {pattern}").pattern)


def test_states_count_repetitions_and_minimize() -> None:
    a = automaton("SEQ(A{2}, B)")
    assert a.names == ("A#1", "A#2", "B") and a.state_variables == ("A", "A", "B")
    assert a.variables == ("A", "B") and a.states_of("A") == (0, 1)
    assert a.start == {0} and a.final == {2} and a.pred[2] == {1}
    # (A{1,2}){1,2} accepts A{1,4}: four states, not the unrolled subsets.
    nested, flat = automaton("(A{1,2}){1,2}"), automaton("A{1,4}")
    assert (nested.names, nested.start, nested.final, nested.follow) == (flat.names, flat.start, flat.final,
                                                                        flat.follow)
    assert automaton("A{2,}").follow == ({1}, {1})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=patterns(repeat=False))
def test_without_repetition_the_states_are_the_variables(p) -> None:
    """Where variables are unique, the automaton is the position automaton: its states are
    the variables in pattern order, with the reference's own first / last / follow sets
    (computed from the pattern's structure, independently)."""
    from cogra.language.ast import pattern_variables
    from cogra.reference_parts.patterns import first, follow, last, without_negations

    a = build_automaton(p)
    plain = without_negations(p)
    names = [v.name for v in pattern_variables(p)]
    assert a.names == a.state_variables == tuple(names)
    at = {name: i for i, name in enumerate(names)}
    assert a.start == {at[v] for v in first(plain)} and a.final == {at[v] for v in last(plain)}
    fol = follow(plain)
    assert a.follow == tuple(frozenset(at[v] for v in fol.get(name, ())) for name in names)


def test_mandatory_variables_count_every_repetition() -> None:
    a = automaton("SEQ(A{2}, B?)")
    assert a.mandatory_variable("A") and not a.mandatory_variable("B")


@pytest.mark.parametrize(("pattern", "fragment"), [
    ("SEQ(A, B){40}", "the pattern needs 80 automaton states (a state per repetition); cogra evaluates "
                      "patterns of at most 64"),
    ("((A{64}){64}){2}", "the pattern's repetitions unroll to more than 64 automaton states"),
])
def test_too_many_states_is_an_error_at_the_pattern(pattern: str, fragment: str) -> None:
    with pytest.raises(QueryError) as info:
        cogra.plan(f"RETURN COUNT(*)\nPATTERN {pattern}")
    assert fragment in info.value.message and (info.value.line, info.value.column) == (2, 9)


def test_explain_shows_the_repetitions() -> None:
    text = cogra.explain("RETURN COUNT(*) PATTERN SEQ(Rest R, Measurement M{3,}) WHERE M.rate < NEXT(M).rate")
    assert "automaton (a state per repetition: bounded quantifiers, determinized)" in text
    assert "M#3      Measurement        final  predTypes = {M#2, M#3}   binds M" in text
    assert "adjacent     M.rate < NEXT(M).rate   on (M#1, M#2), (M#2, M#3), (M#3, M#3)" in text


# -- at scale: the quantifier equals the pattern written out ------------------------------


def generated(n: int, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "type": rng.choice(["A", "B", "C"], n, p=[0.5, 0.3, 0.2]),
        "time": np.sort(rng.integers(0, n // 4, n)),  # ~4 events a second: ties
        "v": rng.integers(0, 100, n),
        "g": rng.integers(0, 20, n),
    })


CLAUSES = [
    "",
    "WITHIN 30 seconds",
    "WITHIN 40 seconds SLIDE 10 seconds",
]
PAIRS = [
    # (quantified, written out with one variable per repetition)
    ("SEQ(A{3,}, B)", "SEQ(A A1, A A2, A A3+, B)"),
    ("SEQ(A{2}, B{1,2})", "SEQ(A A1, A A2, B B1, (B B2)?)"),
    ("(SEQ(A, B)){2,3}", "SEQ(A A1, B B1, A A2, B B2, (SEQ(A A3, B B3))?)"),
]


def _int64(parts: list) -> int | None:
    """The sum of the written-out parts as the quantified column holds it: NULL where a
    part or the sum overflows int64 (on_overflow="null")."""
    if None in parts:
        return None
    total = sum(parts)
    return total if -(2**63) <= total < 2**63 else None


def _sum_of(variables: list[str]) -> str:
    return ", ".join(f"SUM({v}.v)" for v in variables)


@pytest.mark.parametrize("semantics", SEMANTICS)
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p[0])
@pytest.mark.parametrize("window", CLAUSES, ids=["one-window", "tumbling", "sliding"])
def test_at_scale_equals_the_written_out_pattern(pair, window: str, semantics: str) -> None:
    quantified, written = pair
    table = generated(120_000)
    out_vars = [v for v in ("A1", "A2", "A3") if v in written]
    q = (f"RETURN g, COUNT(*), COUNT(A), SUM(A.v), MIN(A.v) PATTERN {quantified} SEMANTICS {semantics} "
         f"WHERE A.v > 20 GROUP-BY g {window}")
    counts_ = ", ".join(f"COUNT({v})" for v in out_vars)
    mins = ", ".join(f"MIN({v}.v)" for v in out_vars)
    where = " AND ".join(f"{v}.v > 20" for v in out_vars)
    w = (f"RETURN g, COUNT(*), {counts_}, {_sum_of(out_vars)}, {mins} PATTERN {written} "
         f"SEMANTICS {semantics} WHERE {where} GROUP-BY g {window}")
    got = cogra.evaluate(q, table, on_overflow="null").to_pylist()
    want = cogra.evaluate(w, table, on_overflow="null").to_pylist()
    assert len(got) == len(want) > 0
    k = len(out_vars)
    for row, ref in zip(got, want):
        values = list(ref.values())
        g_ref, count = values[0], values[1]
        cnts, sums, mins = values[2:2 + k], values[2 + k:2 + 2 * k], values[2 + 2 * k:2 + 3 * k]
        assert row["g"] == g_ref and row["COUNT(*)"] == count
        if count is None:  # overflowed: the written-out pattern overflows too
            continue
        assert row["COUNT(A)"] == _int64(cnts)
        # A part's SUM is NULL where its variable has no event (0 then) or it overflowed.
        played = [c != 0 for c in cnts]
        assert row["SUM(A.v)"] == (_int64([x if p else 0 for x, p in zip(sums, played)]) if any(played)
                                   else None)
        assert row["MIN(A.v)"] == min(m for m in mins if m is not None)


@pytest.mark.parametrize("semantics", SEMANTICS)
def test_at_scale_the_pure_path_equals_the_compiled_one(semantics: str) -> None:
    table = generated(20_000, seed=3)
    query = (f"RETURN g, COUNT(*), SUM(A.v), MAX(B.v) PATTERN SEQ(A{{2,}}, B{{1,2}}) SEMANTICS {semantics} "
             "WHERE A.v < NEXT(A).v GROUP-BY g WITHIN 20 seconds SLIDE 5 seconds")
    assert_same_result(cogra.evaluate(query, table, compiled=False, on_overflow="null"),
                       cogra.evaluate(query, table, on_overflow="null"))
