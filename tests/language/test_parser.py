"""Parser tests: golden trees for whole queries, plus direct checks of the AST contract.

Goldens live in tests/fixtures/parser as ``NAME.query`` (input) and ``NAME.tree``
(``dump`` output).  Run with ``COGRA_UPDATE_GOLDEN=1`` to rewrite the ``.tree``
files after an intended change, then review the diff.
"""

from __future__ import annotations

import os
import re
from fractions import Fraction
from pathlib import Path

import pytest
import sqlglot.expressions as exp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cogra.errors import QueryError
from cogra.language import dump, parse
from cogra.language.ast import (
    NEXT_MARKER,
    Aggregate,
    AggFunc,
    Alt,
    AttrRef,
    ColumnRef,
    Condition,
    Equivalence,
    Opt,
    Plus,
    Semantics,
    Seq,
    Star,
    Var,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "parser"
QUERIES = sorted(FIXTURES.glob("*.query"))

Q1 = (FIXTURES / "q1.query").read_text()
Q2 = (FIXTURES / "q2.query").read_text()
Q3 = (FIXTURES / "q3.query").read_text()


def without_spans(tree: str) -> str:
    return re.sub(r" @\d+:\d+", "", tree)


def test_fixtures_exist() -> None:
    assert len(QUERIES) >= 15


@pytest.mark.parametrize("query_file", QUERIES, ids=lambda p: p.stem)
def test_golden_tree(query_file: Path) -> None:
    tree = dump(parse(query_file.read_text()))
    golden = query_file.with_suffix(".tree")
    if os.environ.get("COGRA_UPDATE_GOLDEN") == "1":
        golden.write_text(tree)
    assert golden.exists(), f"no golden for {query_file.name}; run with COGRA_UPDATE_GOLDEN=1"
    assert tree == golden.read_text()


@pytest.mark.parametrize("name", ["q1", "q2", "q3"])
def test_one_line_form_gives_the_same_tree(name: str) -> None:
    multi = parse((FIXTURES / f"{name}.query").read_text())
    single = parse((FIXTURES / f"{name}_one_line.query").read_text())
    assert without_spans(dump(multi)) == without_spans(dump(single))


# -- q1 .. q3 in detail ------------------------------------------------------


def test_q1_structure() -> None:
    q = parse(Q1)
    assert q.text == Q1
    assert [item.name for item in q.returns] == ["patient", "MIN(M.rate)", "MAX(M.rate)"]
    assert q.returns[0].value == AttrRef(None, "patient", q.returns[0].value.span)
    assert q.returns[1].value.func is AggFunc.MIN
    assert (q.returns[1].value.variable, q.returns[1].value.attribute) == ("M", "rate")
    assert isinstance(q.pattern, Plus) and q.pattern.inner.event_type == "Measurement"
    assert q.pattern.inner.name == "M"
    assert q.semantics is Semantics.CONT
    assert [type(c) for c in q.where] == [Equivalence, Condition, Condition]
    assert q.where[0].attribute.text == "patient"
    assert [a.text for a in q.group_by] == ["patient"]
    assert q.window is not None and q.window.size == 600 and q.window.step == 30


def test_next_is_rewritten_into_a_three_part_column() -> None:
    cond = parse(Q1).where[1]
    assert isinstance(cond, Condition)
    assert isinstance(cond.expression, exp.LT)
    right = cond.expression.expression
    assert isinstance(right, exp.Column)
    assert (right.name, right.table, right.text("db")) == ("rate", "M", NEXT_MARKER)
    assert cond.variables == frozenset({"M"})
    assert cond.next_variables == frozenset({"M"})
    assert cond.text == "M.rate < NEXT(M).rate"


def test_references_carry_spans_into_the_whole_query() -> None:
    q = parse(Q1)
    refs = q.where[1].references + q.where[2].references
    assert [(r.variable, r.attribute, r.is_next) for r in refs] == [
        ("M", "rate", False),
        ("M", "rate", True),
        ("M", "activity", False),
        (None, "passive", False),
    ]
    assert [Q1[r.span.start : r.span.end] for r in refs] == ["M.rate", "NEXT(M).rate", "M.activity", "passive"]
    assert [(r.span.line, r.span.column) for r in refs] == [(4, 21), (4, 30), (4, 47), (4, 60)]


def test_q2_nested_kleene_of_seq() -> None:
    q = parse(Q2)
    assert q.semantics is Semantics.NEXT
    assert isinstance(q.pattern, Seq)
    accept, loop, finish = q.pattern.items
    assert accept == Var("Accept", "Accept", accept.span)
    assert isinstance(loop, Plus) and isinstance(loop.inner, Seq)
    assert [v.name for v in loop.inner.items] == ["Call", "Cancel"]
    assert Q2[loop.span.start : loop.span.end] == "(SEQ(Call, Cancel))+"
    assert finish.name == "Finish"
    assert [type(c) for c in q.where] == [Equivalence]
    assert q.returns[1].value == Aggregate(AggFunc.COUNT, None, None, q.returns[1].value.span)


def test_q3_one_type_two_variables_and_qualified_grouping() -> None:
    q = parse(Q3)
    assert [(v.event_type, v.name) for v in q.variables] == [("Stock", "A"), ("Stock", "B")]
    assert q.event_types == ("Stock",)
    assert [e.attribute.text for e in q.equivalences] == ["A.company", "B.company"]
    assert [a.text for a in q.group_by] == ["sector", "A.company", "B.company"]
    assert [item.name for item in q.returns] == ["sector", "A.company", "B.company", "AVG(B.price)"]
    assert q.window is not None and q.window.step == 10


# -- individual features -----------------------------------------------------


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("skip-till-any-match", Semantics.ANY),
        ("any", Semantics.ANY),
        ("SKIP-TILL-NEXT-MATCH", Semantics.NEXT),
        ("Next", Semantics.NEXT),
        ("contiguous", Semantics.CONT),
        ("cont", Semantics.CONT),
    ],
)
def test_semantics_names(written: str, expected: Semantics) -> None:
    assert parse(f"RETURN COUNT(*) PATTERN A SEMANTICS {written}").semantics is expected


def test_default_semantics_is_any_and_optional_clauses_are_empty() -> None:
    q = parse("RETURN COUNT(*) PATTERN A")
    assert (q.semantics, q.where, q.group_by, q.window) == (Semantics.ANY, (), (), None)


@pytest.mark.parametrize(
    ("duration", "seconds"),
    [
        ("250 ms", Fraction(1, 4)),
        ("1 millisecond", Fraction(1, 1000)),
        ("3 s", 3),
        ("2 sec", 2),
        ("1 second", 1),
        ("1.5 seconds", Fraction(3, 2)),
        ("2 MIN", 120),
        ("0.25 minutes", 15),
        ("1 Hour", 3600),
        ("2 days", 172800),
    ],
)
def test_units_and_decimals_are_exact(duration: str, seconds: Fraction) -> None:
    window = parse(f"RETURN COUNT(*) PATTERN A WITHIN {duration}").window
    assert window is not None
    assert window.size == seconds and isinstance(window.within.amount, Fraction)
    assert window.slide is None and window.step == seconds


def test_group_by_may_be_two_words() -> None:
    a = parse("RETURN x, COUNT(*) PATTERN A GROUP BY x")
    b = parse("RETURN x, COUNT(*) PATTERN A GROUP-BY x")
    assert without_spans(dump(a)) == without_spans(dump(b))


def test_return_text_collapses_whitespace_and_keeps_spelling() -> None:
    q = parse("RETURN count( * ), Avg( B . price ), COUNT ( B ) PATTERN B")
    assert [i.text for i in q.returns] == ["count(*)", "Avg(B.price)", "COUNT(B)"]
    assert [i.value.func for i in q.returns] == [AggFunc.COUNT, AggFunc.AVG, AggFunc.COUNT]


def test_aliases_plain_and_quoted() -> None:
    q = parse('RETURN COUNT(*) AS n, MIN(A.x) AS "low ""x""", MAX(A.x) as `hi`, SUM(A.x) PATTERN A')
    assert [i.alias for i in q.returns] == ["n", 'low "x"', "hi", None]
    assert [i.name for i in q.returns] == ["n", 'low "x"', "hi", "SUM(A.x)"]


def test_pattern_operators_and_spans() -> None:
    text = "RETURN COUNT(*) PATTERN SEQ(A | B C, D*?, (E)+) | F"
    q = parse(text)
    assert isinstance(q.pattern, Alt)
    seq, f = q.pattern.options
    assert f.name == "F"
    alt, star_opt, plus = seq.items
    assert isinstance(alt, Alt) and [v.name for v in alt.options] == ["A", "C"]
    assert alt.options[1].event_type == "B"
    assert isinstance(star_opt, Opt) and isinstance(star_opt.inner, Star)
    assert isinstance(plus, Plus) and plus.inner.name == "E"
    assert text[star_opt.span.start : star_opt.span.end] == "D*?"
    assert text[plus.span.start : plus.span.end] == "(E)+"
    assert text[seq.span.start : seq.span.end] == "SEQ(A | B C, D*?, (E)+)"


def test_where_sql_constructs() -> None:
    q = parse((FIXTURES / "where_sql.query").read_text())
    kinds = [type(c.expression) for c in q.conditions]
    assert kinds == [exp.Between, exp.In, exp.Not, exp.Not, exp.Paren, exp.LTE, exp.NEQ, exp.LT, exp.EQ]
    assert q.conditions[-1].references == (ColumnRef(None, "currency", False, q.conditions[-1].references[0].span),)
    assert q.conditions[5].next_variables == frozenset({"T"})


def test_and_inside_parentheses_between_and_case_does_not_split() -> None:
    q = parse(
        "RETURN COUNT(*) PATTERN A WHERE (A.x = 1 AND A.y = 2) AND A.z BETWEEN 1 AND 2 "
        "AND CASE WHEN A.p AND A.q THEN 1 ELSE 0 END = 1"
    )
    assert [type(c.expression) for c in q.conditions] == [exp.Paren, exp.Between, exp.EQ]


def test_trailing_semicolon_is_allowed() -> None:
    assert parse("RETURN COUNT(*) PATTERN A;").pattern.name == "A"


def test_clause_words_after_a_dot_are_attributes() -> None:
    q = parse("RETURN A.within, COUNT(*) PATTERN A WHERE A.slide > 1 GROUP-BY A.within")
    assert [a.text for a in q.group_by] == ["A.within"]
    assert q.conditions[0].references[0].attribute == "slide"


# -- properties --------------------------------------------------------------

_Q3_TOKENS = re.findall(r"[A-Za-z_][\w-]*|\d+|\S", Q3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["", " ", "\n", "  \n\t"]), min_size=len(_Q3_TOKENS), max_size=len(_Q3_TOKENS)))
def test_whitespace_never_changes_the_tree(gaps: list[str]) -> None:
    """Any spacing between tokens (none where two words would merge) parses to the same tree."""
    text = _Q3_TOKENS[0]
    for prev, tok, gap in zip(_Q3_TOKENS, _Q3_TOKENS[1:], gaps):
        words = prev[-1].isalnum() and tok[0].isalnum()
        text += (gap or " " if words else gap) + tok
    assert without_spans(dump(parse(text))) == without_spans(dump(parse(Q3)))


_ATOMS = ["RETURN", "PATTERN", "SEMANTICS", "WHERE", "GROUP-BY", "WITHIN", "SLIDE", "SEQ", "COUNT", "MIN",
          "NEXT", "AND", "OR", "BETWEEN", "AS", "A", "B", "x", "1", "2.5", "minutes", "'s'", '"q"', "(", ")",
          "[", "]", ",", ".", "+", "*", "?", "|", "-", ";", "<", "=", "\n"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_ATOMS), max_size=25))
def test_garbage_raises_only_query_errors_with_a_position(atoms: list[str]) -> None:
    text = "RETURN " + " ".join(atoms)
    try:
        parse(text)
    except QueryError as err:
        assert err.span is not None and 1 <= err.span.line <= len(text.splitlines())
        assert "^" in str(err)


def test_cogra_parse_is_cached_and_evaluation_leaves_the_tree_alone() -> None:
    """``cogra.parse`` hands out one tree per text (a worker parses the same query for
    every partition); binding, pushdown and evaluation must not change it."""
    import cogra
    from cogra.datasets import stock
    from cogra.examples import Q3

    text = Q3 + "\n\n"
    tree = cogra.parse(text)
    assert cogra.parse(text) is tree
    before = dump(tree)
    cogra.evaluate(text, stock(300, rate=2.0))
    cogra.pushdown(text, stock(10).schema)
    cogra.explain(text)
    assert dump(cogra.parse(text)) == before == dump(parse(text))
    with pytest.raises(QueryError):
        cogra.parse("RETURN COUNT(*) PATTERN")
    with pytest.raises(QueryError):  # errors are raised again, not cached as values
        cogra.parse("RETURN COUNT(*) PATTERN")


def _sql_keywords() -> list[str]:
    """Every single-word keyword sqlglot's tokenizer knows (CALL, SET, IF, CASE, UNION ...)."""
    from sqlglot.tokens import Tokenizer

    return sorted({w.title() for w in Tokenizer.KEYWORDS if re.fullmatch(r"[A-Za-z_]+", w)})


@pytest.mark.parametrize("name", ["Call", "Set", "If", "Case", "End", "Union", "Join", "Comment", "Select", "And", "Between"])
def test_variables_named_like_sql_keywords_work_in_where(name):
    """``Call`` is a type of the report's q2; sqlglot would read ``Call.v > 1`` as a CALL
    statement and ``NEXT(Case)`` as a CASE expression."""
    import pyarrow as pa

    import cogra
    from cogra.reference import evaluate_reference

    table = pa.table({"type": [name, "B", name, name, "B"], "time": [1, 2, 3, 4, 5],
                      "v": [2, 3, 4, 1, 5]})
    query = (f"RETURN COUNT(*), SUM({name}.v) PATTERN SEQ({name}+, B) "
             f"WHERE {name}.v > 1 AND {name}.v < NEXT({name}).v")
    plain = query.replace(f"{name}.", "V.").replace(f"({name})", "(V)").replace(f"({name}+", "(V+")
    renamed = table.set_column(0, "type", pa.array(["V" if t == name else t for t in table["type"].to_pylist()]))
    got = [list(r.values()) for r in cogra.evaluate(query, table).to_pylist()]
    # (1 2) (1 5) (3 5) (1 3 5): Call@4 fails v > 1
    assert got == [list(r.values()) for r in cogra.evaluate(plain, renamed).to_pylist()] == [[4, 14]]
    assert [list(r.values()) for r in evaluate_reference(query, table).to_pylist()] == got


def test_every_keyword_the_language_allows_as_a_variable_parses_in_where():
    allowed = []
    for word in _sql_keywords():
        try:
            parse(f"RETURN COUNT(*) PATTERN SEQ({word}+, B)")
        except QueryError:
            continue  # not a name the language allows (a clause keyword)
        allowed.append(word)
        q = parse(f"RETURN COUNT(*) PATTERN SEQ({word}+, B)\nWHERE {word}.v > 1 AND NEXT({word}).v > {word}.v")
        refs = [(r.variable, r.attribute, r.is_next) for c in q.conditions for r in c.references]
        assert refs == [(word, "v", False), (word, "v", True), (word, "v", False)], word
    assert len(allowed) > 200


def test_a_condition_error_names_the_variable_not_its_placeholder():
    with pytest.raises(QueryError) as info:
        parse("RETURN COUNT(*) PATTERN SEQ(Call+, B) WHERE Call.v > NEXT(Call).v +")
    assert "line 1, column 67" in str(info.value) and "_0" not in str(info.value)
    with pytest.raises(QueryError, match="unknown variable Cal"):
        parse("RETURN COUNT(*) PATTERN SEQ(Call, B) WHERE Cal.v > 1")
    q = parse("RETURN COUNT(*) PATTERN SEQ(And+, B) WHERE And.v > 1 AND And.v < NEXT(And).v")
    assert len(q.conditions) == 2
