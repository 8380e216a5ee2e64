"""Bad queries: every error names the problem and points at its exact line and column.

Each case gives the query, a fragment the message must contain, and the 1-based
line and column the caret must sit under.  The rendered error must show that
source line with the caret in the right place (docs/language.md, Bad input and errors).
"""

from __future__ import annotations

import pytest

from cogra.errors import QueryError
from cogra.language import parse

UNITS = "valid units: ms, millisecond(s), s, sec(s), second(s), min(s), minute(s), hour(s), day(s)"

CASES = [
    # -- tokens and brackets
    ("unterminated_string", "RETURN COUNT(*)\nPATTERN A\nWHERE A.name = 'abc", "unterminated string", 3, 16),
    ("unclosed_paren", "RETURN COUNT(*)\nPATTERN SEQ(A, B\nWITHIN 1 min", "unclosed '(': no matching ')'", 2, 12),
    ("unmatched_close", "RETURN COUNT(*)\nPATTERN SEQ(A, B))", "unmatched ')'", 2, 18),
    ("mismatched_bracket", "RETURN COUNT(*)\nPATTERN A\nWHERE [x)", "')' does not close the '[' at line 3, column 7", 3, 9),
    # -- clause structure
    ("does_not_start_with_return", "PATTERN A\nRETURN COUNT(*)", "a query starts with RETURN, found PATTERN", 1, 1),
    ("empty_return", "RETURN\nPATTERN A", "empty RETURN", 2, 1),
    ("missing_pattern", "RETURN COUNT(*)\nWHERE A.x > 1", "missing PATTERN clause", 2, 1),
    ("missing_comma_in_return", "RETURN driver COUNT(*)\nPATTERN A", "unexpected COUNT after a RETURN item; expected ',' or PATTERN", 1, 15),
    ("duplicate_clause", "RETURN COUNT(*)\nPATTERN A\nSEMANTICS any\nSEMANTICS next", "duplicate SEMANTICS clause (the first is at line 3, column 1)", 4, 1),
    ("clause_out_of_order", "RETURN COUNT(*)\nPATTERN A\nWITHIN 1 min\nWHERE A.x > 1", "WHERE must come before WITHIN", 4, 1),
    ("unknown_clause", "RETURN COUNT(*)\nPATTERN SEQ(A, B)\nHAVING COUNT(*) > 1", "unknown clause HAVING; expected SEMANTICS, WHERE, GROUP-BY, WITHIN or the end of the query", 3, 1),
    ("trailing_garbage", "RETURN COUNT(*)\nPATTERN A\nWITHIN 1 min, 2 min", "unexpected ',' after the WITHIN clause; expected the end of the query", 3, 13),
    ("garbage_after_pattern", "RETURN COUNT(*)\nPATTERN SEQ(A, B) C", "unexpected C after the PATTERN clause", 2, 19),
    # -- RETURN items
    ("unknown_aggregate", "RETURN MEDIAN(A.x)\nPATTERN A", "unknown aggregate MEDIAN (allowed: COUNT, MIN, MAX, SUM, AVG, VAR_POP, VAR_SAMP, STDDEV_POP, "
     "STDDEV_SAMP, VARIANCE, STDDEV)", 1, 8),
    ("min_without_attribute", "RETURN patient,\n  MIN(M)\nPATTERN Measurement M+", "MIN needs a variable's attribute, e.g. MIN(M.attr)", 2, 3),
    ("count_of_attribute", "RETURN COUNT(M.rate)\nPATTERN Measurement M+", "COUNT takes * or a variable, not an attribute: COUNT(*) or COUNT(M)", 1, 8),
    ("unknown_variable_in_aggregate", "RETURN AVG(C.price)\nPATTERN SEQ(Stock A+, Stock B+)", "unknown variable C (the pattern binds A, B)", 1, 12),
    ("aggregate_over_unbound_type", "RETURN AVG(Stock.price)\nPATTERN SEQ(Stock A+, Stock B+)", "Stock is an event type, not a variable: the pattern binds it to A, B", 1, 12),
    ("unknown_variable_in_return_attribute", "RETURN C.company, COUNT(*)\nPATTERN Stock A+\nGROUP-BY C.company", "unknown variable C (the pattern binds A)", 1, 8),
    ("return_attribute_not_grouped", "RETURN sector, COUNT(*)\nPATTERN Stock A+", "sector in RETURN is not a GROUP-BY attribute", 1, 8),
    ("qualified_return_vs_plain_group_by", "RETURN A.company, COUNT(*)\nPATTERN Stock A+\nGROUP-BY company", "A.company in RETURN is not a GROUP-BY attribute (GROUP-BY has company: write it the same way)", 1, 8),
    ("duplicate_output_column", "RETURN MIN(A.x),\n       min(A.x)\nPATTERN A", "duplicate output column min(A.x) (same as RETURN item 1)", 2, 8),
    ("duplicate_alias", "RETURN COUNT(*) AS n, SUM(A.x) AS N\nPATTERN A", "duplicate output column N", 1, 23),
    ("alias_clashes_with_window_column", "RETURN COUNT(*) AS window_end\nPATTERN A\nWITHIN 1 hour", "same as the window column WITHIN adds", 1, 8),
    # -- PATTERN
    ("duplicate_variable", "RETURN COUNT(*)\nPATTERN SEQ(A, B, A)", "variable A appears twice in the pattern; bind the type to distinct variables, e.g. SEQ(A A1, B, A A2)", 2, 19),
    ("variable_bound_to_two_types", "RETURN COUNT(*)\nPATTERN SEQ(Stock X, Trade X+)", "variable X appears twice in the pattern, as Stock and as Trade; bind the type to distinct variables, e.g. SEQ(Stock X1, Trade X2+)", 2, 22),
    ("empty_seq", "RETURN COUNT(*)\nPATTERN SEQ(A, SEQ())", "empty SEQ()", 2, 16),
    ("missing_sub_pattern", "RETURN COUNT(*)\nPATTERN SEQ(A, , B)", "expected an event type, SEQ(...) or '(' in the pattern, found ','", 2, 16),
    ("missing_comma_in_seq", "RETURN COUNT(*)\nPATTERN SEQ(Stock A B)", "expected ',' or ')' in SEQ(...), found B", 2, 21),
    # NOT N (docs/language.md, Negation): a keyword, between two parts of a SEQ that match events.
    # At the start or end of the whole pattern's SEQ it is an absence (docs/language.md); elsewhere not.
    ("negation_at_start", "RETURN COUNT(*)\nPATTERN SEQ(B, SEQ(NOT N, A))", "NOT N stands at the start of a SEQ inside the pattern; only the whole pattern's SEQ may start or end with NOT", 2, 20),
    ("negation_at_end", "RETURN COUNT(*)\nPATTERN (SEQ(Accept A, not Cancel C))+", "NOT Cancel C stands at the end of a SEQ inside the pattern", 2, 24),
    ("negation_alone", "RETURN COUNT(*)\nPATTERN NOT N", "a pattern of negations alone matches no trend", 2, 9),
    ("negation_in_alternation", "RETURN COUNT(*)\nPATTERN SEQ(A, (NOT N | B), C)", "NOT N must stand between two parts of a SEQ", 2, 17),
    ("negation_next_to_negation", "RETURN COUNT(*)\nPATTERN SEQ(A, NOT N, NOT M, B)", "NOT N is next to another negation", 2, 16),
    ("negation_after_optional", "RETURN COUNT(*)\nPATTERN SEQ(A?, NOT N, B)", "the part before NOT N can match nothing", 2, 17),
    ("negation_before_zero_repetitions", "RETURN COUNT(*)\nPATTERN SEQ(A, NOT N, B{0,2})", "the part after NOT N can match nothing", 2, 16),
    ("negation_quantified", "RETURN COUNT(*)\nPATTERN SEQ(A, NOT N+, B)", "NOT N takes no quantifier", 2, 21),
    ("negation_of_a_sub_pattern", "RETURN COUNT(*)\nPATTERN SEQ(A, NOT SEQ(B, C), D)", "NOT takes one event type and an optional variable (NOT N, NOT Cancel X), found SEQ", 2, 20),
    ("negation_without_type", "RETURN COUNT(*)\nPATTERN SEQ(A, NOT, B)", "NOT takes one event type and an optional variable", 2, 19),
    ("negated_variable_reused", "RETURN COUNT(*)\nPATTERN SEQ(A, NOT A, B)", "variable A appears twice in the pattern", 2, 20),
    # Bounded quantifiers (docs/language.md, Bounded quantifiers)
    ("quantifier_most_below_least", "RETURN COUNT(*)\nPATTERN SEQ(A{3,2}, B)", "quantifier {3,2}: its most (2) is below its least (3)", 2, 14),
    ("quantifier_of_zero", "RETURN COUNT(*)\nPATTERN SEQ(A, B{0})", "a quantifier of at most 0 repetitions matches nothing", 2, 17),
    ("quantifier_not_a_number", "RETURN COUNT(*)\nPATTERN A{n,3}", "expected a whole number in the quantifier, found n", 2, 11),
    ("quantifier_fraction", "RETURN COUNT(*)\nPATTERN A{1.5}", "expected a whole number in the quantifier, found '1.5'", 2, 11),
    ("quantifier_empty", "RETURN COUNT(*)\nPATTERN A{}", "expected a whole number in the quantifier, found '}'", 2, 11),
    ("quantifier_unclosed", "RETURN COUNT(*)\nPATTERN SEQ(A{2 B)", "expected '}' to close the quantifier, found B", 2, 17),
    ("quantifier_too_large", "RETURN COUNT(*)\nPATTERN A{2,100}", "100 repetitions: cogra evaluates quantifiers up to 64", 2, 13),
    # -- SEMANTICS
    ("unknown_semantics", "RETURN COUNT(*)\nPATTERN A\nSEMANTICS skip-till-every-match", "unknown semantics skip-till-every-match", 3, 11),
    # -- WHERE
    ("unknown_variable_in_where", "RETURN COUNT(*)\nPATTERN SEQ(A, B)\nWHERE A.x > 1 AND C.x < 2", "unknown variable C (the pattern binds A, B)", 3, 19),
    ("next_of_unknown_variable", "RETURN COUNT(*)\nPATTERN A+\nWHERE A.x < NEXT(C).x", "unknown variable C", 3, 18),
    ("next_without_attribute", "RETURN COUNT(*)\nPATTERN A+\nWHERE A.x < NEXT(A)", "NEXT(A) needs an attribute: write NEXT(A).attr", 3, 13),
    ("next_of_two_variables", "RETURN COUNT(*)\nPATTERN A+\nWHERE A.x < NEXT(A, A).x", "NEXT takes one variable", 3, 13),
    ("three_part_column", "RETURN COUNT(*)\nPATTERN A+\nWHERE a.b.c = 1", "a.b.c is not an attribute: write V.attr, NEXT(V).attr or attr", 3, 7),
    ("subquery", "RETURN COUNT(*)\nPATTERN A+\nWHERE A.x IN (SELECT y FROM t)", "subqueries are not allowed in WHERE", 3, 15),
    ("aggregate_in_where", "RETURN COUNT(*)\nPATTERN A+\nWHERE SUM(A.x) > 10", "aggregate function SUM(A.x) is not allowed in WHERE", 3, 7),
    ("incomplete_condition", "RETURN COUNT(*)\nPATTERN A\nWHERE A.x > 1\n  AND A.y =\nGROUP-BY z", "incomplete condition near '='", 4, 11),
    ("unexpected_token_in_condition", "RETURN COUNT(*)\nPATTERN A\nWHERE A.x = 1 2", "unexpected '2' in the condition", 3, 15),
    ("malformed_equivalence", "RETURN COUNT(*)\nPATTERN A\nWHERE [A.x, A.y]", "an equivalence predicate is [attr] or [V.attr]", 3, 7),
    ("or_next_to_top_level_and", "RETURN COUNT(*)\nPATTERN A\nWHERE A.x = 1 OR A.y = 2 AND A.z = 3", "OR next to a top-level AND is ambiguous", 3, 15),
    ("dangling_and", "RETURN COUNT(*)\nPATTERN A\nWHERE A.x = 1 AND\nGROUP-BY z", "expected a condition after AND", 3, 15),
    ("empty_where", "RETURN COUNT(*)\nPATTERN A\nWHERE\nGROUP-BY z", "empty WHERE", 4, 1),
    # -- GROUP-BY
    ("unknown_variable_in_group_by", "RETURN COUNT(*)\nPATTERN Stock A+\nGROUP-BY sector, B.company", "unknown variable B (the pattern binds A)", 3, 18),
    ("duplicate_group_by_attribute", "RETURN COUNT(*)\nPATTERN Stock A+\nGROUP-BY sector, Sector", "duplicate GROUP-BY attribute Sector", 3, 18),
    # -- WITHIN / SLIDE
    ("unknown_unit", "RETURN COUNT(*)\nPATTERN A\nWITHIN 10 fortnights", f"unknown time unit fortnights; {UNITS}", 3, 11),
    ("missing_unit", "RETURN COUNT(*)\nPATTERN A\nWITHIN 10\nSLIDE 5 seconds", f"missing time unit after 10; {UNITS}", 4, 1),
    ("missing_duration", "RETURN COUNT(*)\nPATTERN A\nWITHIN minutes", "expected a duration after WITHIN (e.g. WITHIN 10 minutes), found minutes", 3, 8),
    ("zero_duration", "RETURN COUNT(*)\nPATTERN A\nWITHIN 10 minutes SLIDE 0 s", "SLIDE needs a positive duration, not 0 s", 3, 25),
    ("negative_duration", "RETURN COUNT(*)\nPATTERN A\nWITHIN -10 minutes", "WITHIN needs a positive duration", 3, 8),
    ("slide_larger_than_within", "RETURN COUNT(*)\nPATTERN A\nWITHIN 30 seconds\n  SLIDE 1 minute", "SLIDE 1 minute is larger than WITHIN 30 seconds", 4, 9),
    ("slide_without_within", "RETURN COUNT(*)\nPATTERN A\nSLIDE 10 seconds", "SLIDE without WITHIN", 3, 1),
]


@pytest.mark.parametrize(("query", "fragment", "line", "column"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_error_names_the_problem_and_points_at_it(query: str, fragment: str, line: int, column: int) -> None:
    with pytest.raises(QueryError) as info:
        parse(query)
    err = info.value
    assert fragment in err.message
    assert (err.line, err.column) == (line, column)
    head, source_line, caret_line = str(err).splitlines()
    assert head == f"line {line}, column {column}: {err.message}"
    assert source_line == "  " + query.splitlines()[line - 1]
    assert caret_line.strip("^ ") == "" and caret_line.index("^") == 2 + column - 1


def test_there_are_many_distinct_error_kinds() -> None:
    assert len({c[0] for c in CASES}) == len(CASES) >= 40


def test_caret_underlines_the_whole_offending_span() -> None:
    with pytest.raises(QueryError) as info:
        parse("RETURN COUNT(*)\nPATTERN A\nWITHIN 10 fortnights")
    assert str(info.value).splitlines()[2] == "  " + " " * 10 + "^" * len("fortnights")


def test_query_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse("")
