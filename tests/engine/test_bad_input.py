"""Bad input: queries that do not fit the table, and rows that are not events.

A query that does not make sense for the input fails with a :class:`cogra.QueryError`
*before any data is processed* (docs/language.md, Bad input and errors): the message names the
problem, and when the query text is at fault, ``err.line``/``err.column`` point at it
and ``str(err)`` shows the line with a caret under it.  The parser's own errors are
tested in ``tests/language``; these are the binding-level ones (they need the schema).

Bad rows never raise: NULL times and NULL types are skipped, counted in the result's
schema metadata and reported with a :class:`cogra.CograDataWarning`; NULL attributes
follow SQL (a predicate that is NULL is false, aggregates skip NULLs); division by zero
in a predicate is NULL.
"""

from __future__ import annotations

import warnings

import pyarrow as pa
import pytest

import cogra
import cogra.runtime.engine
from cogra.datasets import events
from cogra.reference import evaluate_reference
from tests.compare import assert_same_result

# Columns: type, time, x (double), s (string), g (int64), l (list: not orderable).
TABLE = events(
    "a1 b2 a3 b4",
    x=[1.0, 2.0, 3.0, 4.0],
    s=["p", "q", "r", "s"],
    g=[1, 1, 2, 2],
    l=[[1], [2], [3], [4]],
)
COLUMNS = ("type", "time", "x", "s", "g", "l")


@pytest.fixture
def no_data_processing(monkeypatch):
    """Make any attempt to run the engine fail loudly: errors must come before it."""

    class Forbidden:
        def __init__(self, *args, **kwargs):
            raise AssertionError("the engine was started; the error should have come before any data")

    monkeypatch.setattr(cogra.runtime.engine, "Engine", Forbidden)  # (evaluation imports it per call)


def test_the_guard_catches_a_started_engine(no_data_processing) -> None:
    # Without this, a refactoring of the evaluation could make the guard above vacuous.
    with pytest.raises(AssertionError, match="engine was started"):
        cogra.evaluate("RETURN COUNT(*) PATTERN SEQ(A, B)", TABLE)


def position(text: str, fragment: str, occurrence: int = 0) -> tuple[int, int]:
    """1-based (line, column) of the ``occurrence``-th ``fragment`` in ``text``."""
    at = -1
    for _ in range(occurrence + 1):
        at = text.index(fragment, at + 1)
    line = text.count("\n", 0, at) + 1
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    return line, column


def assert_points_at(err: cogra.QueryError, text: str, fragment: str, occurrence: int = 0) -> None:
    """``err`` is at ``fragment`` and ``str(err)`` shows that line with a caret under it."""
    line, column = position(text, fragment, occurrence)
    assert (err.line, err.column) == (line, column), str(err)
    rendered = str(err).splitlines()
    src = text.splitlines()[line - 1]
    assert rendered[0].startswith(f"line {line}, column {column}: ")
    assert rendered[1] == f"  {src}"
    caret = rendered[2]
    assert caret.strip() and set(caret.strip()) == {"^"}, caret
    assert caret.index("^") == 2 + column - 1, f"caret under the wrong column:\n{err}"


def query_error(query: str, table: pa.Table = TABLE, **kw) -> cogra.QueryError:
    """The QueryError of evaluating ``query``; the same error without data (result_schema)."""
    with pytest.raises(cogra.QueryError) as info:
        cogra.evaluate(query, table, **kw)
    with pytest.raises(cogra.QueryError) as schema_only:
        cogra.result_schema(query, table.schema, **kw)
    assert str(schema_only.value) == str(info.value)
    return info.value


# ---------------------------------------------------------------------------
# Columns the query reads but the input lacks
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query, fragment",
    [
        pytest.param("RETURN COUNT(*)\nPATTERN SEQ(A, B)\nGROUP-BY nope", "nope", id="group-by"),
        pytest.param("RETURN COUNT(*)\nPATTERN SEQ(A, B)\nGROUP-BY A.nope", "A.nope", id="group-by-var"),
        pytest.param("RETURN COUNT(*)\nPATTERN SEQ(A, B)\nWHERE [nope]", "nope", id="equivalence"),
        pytest.param("RETURN COUNT(*)\nPATTERN SEQ(A, B)\nWHERE [B.nope]", "B.nope", id="equivalence-var"),
        pytest.param("RETURN COUNT(*)\nPATTERN SEQ(A, B)\nWHERE A.x > 0 AND A.nope > 1", "A.nope", id="where"),
        pytest.param("RETURN COUNT(*)\nPATTERN SEQ(A, B)\nWHERE A.x < NEXT(B).nope", "NEXT(B).nope",
                     id="where-next"),
        pytest.param("RETURN COUNT(*), SUM(A.nope)\nPATTERN SEQ(A, B)", "SUM(A.nope)", id="aggregate-sum"),
        pytest.param("RETURN MAX(B.nope)\nPATTERN SEQ(A, B)", "MAX(B.nope)", id="aggregate-max"),
    ],
)
def test_missing_column_is_named_with_the_input_columns(no_data_processing, query, fragment) -> None:
    err = query_error(query)
    assert_points_at(err, query, fragment)
    message = err.message
    assert "'nope'" in message
    for col in COLUMNS:
        assert col in message, f"the message should list the input's columns: {message}"


def test_missing_column_in_return(no_data_processing) -> None:
    # A returned attribute must be grouped, so it also appears in GROUP-BY; the error
    # points at one of the two occurrences and names the column.
    query = "RETURN nope, COUNT(*)\nPATTERN SEQ(A, B)\nGROUP-BY nope"
    err = query_error(query)
    assert (err.line, err.column) in {position(query, "nope", 0), position(query, "nope", 1)}
    assert "'nope'" in err.message and all(c in err.message for c in COLUMNS)


def test_missing_time_column(no_data_processing) -> None:
    table = TABLE.drop_columns(["time"])
    err = query_error("RETURN COUNT(*) PATTERN SEQ(A, B)", table)
    assert "'time'" in str(err) and "time_column" in str(err)
    assert all(c in str(err) for c in COLUMNS if c != "time")
    # A custom name that is not there either.
    err = query_error("RETURN COUNT(*) PATTERN SEQ(A, B)", TABLE, time_column="ts")
    assert "'ts'" in str(err)


@pytest.mark.parametrize("values, typ, shown", [
    (["1", "2", "3", "4"], pa.string(), "string"),
    ([True, False, True, False], pa.bool_(), "bool"),
])
def test_time_column_of_a_wrong_type(no_data_processing, values, typ, shown) -> None:
    table = TABLE.set_column(1, "time", pa.array(values, typ))
    err = query_error("RETURN COUNT(*) PATTERN SEQ(A, B)", table)
    assert "'time'" in str(err) and shown in str(err)
    assert "timestamp" in str(err)  # says what would do


def test_missing_type_column_with_several_types_points_at_the_pattern(no_data_processing) -> None:
    query = "RETURN COUNT(*)\nPATTERN SEQ(A, B)\nWITHIN 10 seconds"
    err = query_error(query, TABLE.drop_columns(["type"]))
    line, column = position(query, "SEQ(A, B)")
    assert err.line == line
    assert column <= err.column < column + len("SEQ(A, B)")
    assert "'type'" in err.message and "type_column" in err.message
    assert "A" in err.message and "B" in err.message
    assert "^" in str(err).splitlines()[2]


def test_missing_type_column_with_one_type_is_fine() -> None:
    table = pa.table({"time": [1, 2, 3], "rate": [60, 61, 62]})
    out = cogra.evaluate("RETURN COUNT(*), MAX(M.rate) PATTERN Measurement M+", table)
    assert out.to_pylist() == [{"COUNT(*)": 7, "MAX(M.rate)": 62}]


def test_a_named_type_column_must_exist_even_for_one_type() -> None:
    """Only the default may fall back: a misspelled type_column would read every row as
    the pattern's one type."""
    from cogra.reference import evaluate_reference

    table = pa.table({"time": [1, 2, 3], "kind": ["M", "x", "M"]})
    for evaluate in (cogra.evaluate, evaluate_reference):
        with pytest.raises(cogra.QueryError, match="no type column 'kindd'"):
            evaluate("RETURN COUNT(*) PATTERN Measurement M+", table, type_column="kindd")
    assert cogra.evaluate("RETURN COUNT(*) PATTERN M+", table, type_column="kind").to_pylist() == [{"COUNT(*)": 3}]


def test_type_column_that_is_not_strings(no_data_processing) -> None:
    table = TABLE.set_column(0, "type", pa.array([1, 2, 1, 2], pa.int64()))
    err = query_error("RETURN COUNT(*) PATTERN SEQ(A, B)", table)
    assert "'type'" in str(err) and "int64" in str(err) and "string" in str(err)


@pytest.mark.parametrize("typ", [pa.large_string(), pa.dictionary(pa.int32(), pa.string())])
def test_type_column_of_other_string_types_is_fine(typ) -> None:
    table = TABLE.set_column(0, "type", TABLE.column("type").cast(typ))
    assert cogra.evaluate("RETURN COUNT(*) PATTERN SEQ(A, B)", table).to_pylist() == [{"COUNT(*)": 3}]


@pytest.mark.parametrize("func", ["SUM", "AVG"])
def test_sum_and_avg_over_a_string(no_data_processing, func) -> None:
    query = f"RETURN COUNT(*),\n  {func}(B.s)\nPATTERN SEQ(A, B)"
    err = query_error(query)
    assert_points_at(err, query, f"{func}(B.s)")
    assert "numeric" in err.message and "string" in err.message


def test_min_over_an_unorderable_attribute(no_data_processing) -> None:
    query = "RETURN MIN(A.l) PATTERN SEQ(A, B)"
    err = query_error(query)
    assert_points_at(err, query, "MIN(A.l)")
    assert "orderable" in err.message


def test_variable_key_on_a_mandatory_variable_is_fine() -> None:
    query = "RETURN B.x, COUNT(*) PATTERN SEQ(A?, B) GROUP-BY B.x"
    assert cogra.evaluate(query, TABLE).to_pylist() == [
        {"B.x": 2.0, "COUNT(*)": 2}, {"B.x": 4.0, "COUNT(*)": 3},
    ]


@pytest.mark.parametrize(
    "pattern, condition, prev, nxt",
    [
        ("SEQ(A, C, B)", "A.x < NEXT(B).x", "A", "B"),   # B follows C, never A
        ("SEQ(A, B)", "B.x < NEXT(A).x", "B", "A"),      # nothing follows B
        ("SEQ(A+, B)", "B.x > NEXT(B).x", "B", "B"),     # B is not repeated
    ],
)
def test_adjacent_predicate_on_a_pair_that_never_occurs(no_data_processing, pattern, condition, prev, nxt) -> None:
    query = f"RETURN COUNT(*)\nPATTERN {pattern}\nWHERE {condition}"
    err = query_error(query)
    assert_points_at(err, query, condition)
    assert f"{nxt} never comes right after {prev}" in err.message


def test_next_of_a_variable_nothing_precedes(no_data_processing) -> None:
    query = "RETURN COUNT(*)\nPATTERN SEQ(A, B)\nWHERE NEXT(A).x > 1"
    err = query_error(query)
    assert_points_at(err, query, "NEXT(A).x > 1")
    assert "precedes A" in err.message


def test_two_plain_variables_in_one_condition(no_data_processing) -> None:
    query = "RETURN COUNT(*)\nPATTERN SEQ(A, B)\nWHERE [g] AND A.x < B.x"
    err = query_error(query)
    assert_points_at(err, query, "A.x < B.x")
    assert "A and B" in err.message and "NEXT" in err.message


def test_two_next_variables_in_one_condition(no_data_processing) -> None:
    query = "RETURN COUNT(*)\nPATTERN SEQ(A, B)\nWHERE NEXT(A).x < NEXT(B).x"
    err = query_error(query)
    assert_points_at(err, query, "NEXT(A).x < NEXT(B).x")
    assert "A, B" in err.message and "NEXT" in err.message


@pytest.mark.parametrize("condition", ["x > 1", "NEXT(B).x > x", "1 = 1 AND s = 'p'"])
def test_bare_column_without_a_single_variable_is_ambiguous(no_data_processing, condition) -> None:
    query = f"RETURN COUNT(*)\nPATTERN SEQ(A, B)\nWHERE {condition}"
    conjunct = condition.split(" AND ")[-1]
    name = conjunct.split()[-1] if conjunct.startswith("NEXT") else conjunct.split()[0]
    err = query_error(query)
    assert_points_at(err, query, conjunct)
    assert f"{name} is a column" in err.message
    assert f"V.{name}" in err.message and f"'{name}'" in err.message  # both ways out


def test_bare_word_that_is_no_column_is_a_string() -> None:
    # The counterpart: 'passive' is not a column, so it is the string 'passive'.
    table = events("a1 b2 a3 b4", s=["passive", "q", "active", "q"])
    out = cogra.evaluate("RETURN COUNT(*) PATTERN SEQ(A, B) WHERE A.s = passive", table)
    assert out.to_pylist() == [{"COUNT(*)": 2}]


@pytest.mark.parametrize("condition", ["A.s > 1", "A.s = NEXT(B).x", "A.s BETWEEN 1 AND 2", "A.s IN (1, 2)"])
def test_comparing_a_string_with_a_number(no_data_processing, condition) -> None:
    query = f"RETURN COUNT(*)\nPATTERN SEQ(A, B)\nWHERE {condition}"
    err = query_error(query)
    assert_points_at(err, query, condition)
    assert "compare" in err.message and "string" in err.message and "number" in err.message


@pytest.mark.parametrize("condition", ["A.s + 1 > 2", "A.x * A.s > 2", "-A.s < 0"])
def test_arithmetic_on_a_string(no_data_processing, condition) -> None:
    query = f"RETURN COUNT(*)\nPATTERN SEQ(A, B)\nWHERE {condition}"
    err = query_error(query)
    assert_points_at(err, query, condition)
    assert "arithmetic needs numbers" in err.message and "string" in err.message


@pytest.mark.parametrize("condition, written", [
    ("A.s > 1", ["A.s"]),
    ("A.s = NEXT(B).x", ["A.s", "NEXT(B).x"]),
    ("A.s + 1 > 2", ["A.s"]),
    ("A.x", ["A.x"]),
])
def test_type_errors_name_attributes_as_written(condition, written) -> None:
    err = query_error(f"RETURN COUNT(*) PATTERN SEQ(A, B) WHERE {condition}")
    for text in written:
        assert text in err.message, err.message
    assert "cur." not in err.message and "next." not in err.message


def test_condition_that_is_not_boolean(no_data_processing) -> None:
    query = "RETURN COUNT(*)\nPATTERN SEQ(A, B)\nWHERE A.x"
    err = query_error(query)
    assert_points_at(err, query, "A.x")
    assert "not a condition" in err.message


def test_unknown_variable_in_an_aggregate_and_a_condition(no_data_processing) -> None:
    query = "RETURN COUNT(C)\nPATTERN SEQ(A, B)"
    err = query_error(query)
    assert_points_at(err, query, "C)")  # the variable, not the C of COUNT
    assert "unknown variable C" in err.message and "A, B" in err.message
    query = "RETURN COUNT(*)\nPATTERN SEQ(A, B)\nWHERE C.x > 1"
    err = query_error(query)
    assert_points_at(err, query, "C.x")
    assert "unknown variable C" in err.message


def test_bogus_on_overflow_is_named() -> None:
    with pytest.raises(ValueError, match=r"on_overflow.*'error'.*'null'.*'bogus'"):
        cogra.evaluate("RETURN COUNT(*) PATTERN SEQ(A, B)", TABLE, on_overflow="bogus")


def test_bogus_on_overflow_fails_before_any_data(no_data_processing) -> None:
    with pytest.raises(ValueError, match="bogus"):
        cogra.evaluate("RETURN COUNT(*) PATTERN SEQ(A, B)", TABLE, on_overflow="bogus")


def test_errors_come_before_bad_rows_are_looked_at(no_data_processing) -> None:
    # Rows that would be skipped with a warning do not matter when the query is wrong.
    table = pa.table({"type": ["A", None], "time": [None, 1], "x": [1.0, 2.0]})
    query = "RETURN SUM(A.y) PATTERN SEQ(A, B)"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no data warning either
        err = query_error(query, table)
    assert_points_at(err, query, "SUM(A.y)")


# ---------------------------------------------------------------------------
# Bad rows: skipped, counted, reported; never an exception
# ---------------------------------------------------------------------------


def both(query: str, table: pa.Table, **kw) -> pa.Table:
    """Engine result, checked equal to the two-step reference."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        want = evaluate_reference(query, table, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        got = cogra.evaluate(query, table, **kw)
    assert_same_result(got, want, context=query)
    return got


def test_null_times_and_types_are_skipped_counted_and_warned() -> None:
    table = pa.table({
        "type": ["A", "B", None, "A", "B", "B", None],
        "time": [1, 2, 3, None, 5, None, None],
        "x": [1.0, 2.0, 3.0, 4.0, None, 6.0, 7.0],
    })
    query = "RETURN COUNT(*), COUNT(B), SUM(B.x) PATTERN SEQ(A, B)"
    with pytest.warns(cogra.CograDataWarning, match=r"3 row\(s\) with a NULL time and 1 with a NULL type"):
        out = cogra.evaluate(query, table)
    # Events: a1, b2, b5 (the row with NULL time and NULL type counts as NULL time).
    assert out.to_pylist() == [{"COUNT(*)": 2, "COUNT(B)": 2, "SUM(B.x)": 2.0}]
    meta = out.schema.metadata
    assert meta[b"cogra.rows_null_time"] == b"3"
    assert meta[b"cogra.rows_null_type"] == b"1"
    assert both(query, table).to_pylist() == out.to_pylist()


@pytest.mark.parametrize("rows", [0, 3])
@pytest.mark.parametrize("column", ["type", "time"])
def test_a_column_of_nulls_arrow_typed_null_is_no_events_not_a_type_error(column: str, rows: int) -> None:
    """pyarrow types a column of no value but NULL -- an empty one included -- as ``null``:
    a type or time column of it holds no event, as a string or int64 column of NULLs,
    rather than failing on the column's type."""
    table = pa.table({"type": pa.array(["A", "B", "B"][:rows], pa.string()),
                      "time": pa.array(list(range(1, rows + 1)), pa.int64()),
                      "x": pa.array([1.0, 2.0, 3.0][:rows], pa.float64())})
    table = table.set_column(table.schema.get_field_index(column), column, pa.nulls(rows))
    for query in ("RETURN COUNT(*), SUM(B.x) PATTERN SEQ(A, B+)",
                  "RETURN COUNT(*), MAX(A.x) PATTERN SEQ(A+, B) SEMANTICS any WITHIN 10 seconds SLIDE 5 seconds"):
        out = both(query, table)
        assert out.num_rows == 0 and out.schema.field("COUNT(*)").type == pa.int64(), out
        if rows:
            assert out.schema.metadata[f"cogra.rows_null_{column}".encode()] == str(rows).encode()


@pytest.mark.parametrize(("query", "name"), [
    ("RETURN SUM(A.v) PATTERN SEQ(A, B)", "v"),
    ("RETURN COUNT(*) PATTERN SEQ(A, B)", "time"),
    ("RETURN COUNT(*) PATTERN SEQ(A, B) WHERE A.s = v", "v"),  # (a bare name: column or string)
])
def test_a_column_name_the_input_has_twice_is_an_error_where_the_query_reads_it(query: str, name: str) -> None:
    """Two input columns of one name (a join's output, say): the query cannot tell which it
    reads -- an error naming the column, not "no attribute", and never the bare name read
    as a string.  Columns the query does not read may repeat."""
    columns = {"type": ["A", "B"], "time": [1, 2], "s": ["v", "w"], "v": [1.0, 2.0]}
    names = list(columns) + [name]
    table = pa.Table.from_arrays([pa.array(columns[n]) for n in names], names=names)
    with pytest.raises(cogra.QueryError, match=f"the input has 2 columns named '{name}'"):
        cogra.evaluate(query, table)
    unread = pa.Table.from_arrays([pa.array(columns[n]) for n in [*columns, "s"]], names=[*columns, "s"])
    assert cogra.evaluate("RETURN COUNT(*) PATTERN SEQ(A, B)", unread).to_pylist() == [{"COUNT(*)": 1}]


def test_no_warning_and_zero_counts_for_clean_input() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = cogra.evaluate("RETURN COUNT(*) PATTERN SEQ(A, B)", TABLE)
    assert out.to_pylist() == [{"COUNT(*)": 3}]
    assert out.schema.metadata[b"cogra.rows_null_time"] == b"0"
    assert out.schema.metadata[b"cogra.rows_null_type"] == b"0"


def test_a_pattern_type_no_row_has_is_warned_with_the_types_seen() -> None:
    with pytest.warns(cogra.CograDataWarning, match=r"no row has the pattern's type 'Stok': "
                      r"the input's types are 'A', 'B'"):
        assert cogra.evaluate("RETURN COUNT(*) PATTERN SEQ(Stok X, B)", TABLE).num_rows == 0
    with pytest.warns(cogra.CograDataWarning, match="'Stok'"):  # the one-type path
        assert cogra.evaluate("RETURN COUNT(*) PATTERN Stok X+", TABLE).num_rows == 0


def test_only_bad_rows_give_an_empty_result_with_a_warning() -> None:
    table = pa.table({"type": pa.array(["A", None], pa.string()), "time": pa.array([None, 2], pa.int64())})
    with pytest.warns(cogra.CograDataWarning):
        out = cogra.evaluate("RETURN COUNT(*) PATTERN SEQ(A, B) WITHIN 5 seconds", table)
    assert out.num_rows == 0
    assert out.schema.names == ["COUNT(*)", "window_start", "window_end"]
    assert out.schema.metadata[b"cogra.rows_null_time"] == b"1"
    assert out.schema.metadata[b"cogra.rows_null_type"] == b"1"


def test_nan_and_infinite_times_are_not_events() -> None:
    table = pa.table({"type": ["A"] * 4, "time": [1.0, float("nan"), 3.0, float("inf")]})
    with pytest.warns(cogra.CograDataWarning):
        out = cogra.evaluate("RETURN COUNT(*) PATTERN A+", table)
    assert out.to_pylist() == [{"COUNT(*)": 3}]
    assert out.schema.metadata[b"cogra.rows_null_time"] == b"2"


def test_infinite_time_under_a_window_does_not_raise() -> None:
    table = pa.table({"type": ["A"] * 3, "time": [1.0, 3.0, float("inf")]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        out = cogra.evaluate("RETURN COUNT(*) PATTERN A+ WITHIN 10 seconds", table)
    assert out.to_pylist() == [{"COUNT(*)": 3, "window_start": 0.0, "window_end": 10.0}]


# a1(x=1, y=0)  b2(x=0, y=0)  a3(x=NULL, y=0)  b4(x=5, y=1); SEQ(A, B) under any has the
# trends (a1,b2), (a1,b4), (a3,b4).
NULLS = events("a1 b2 a3 b4", x=[1, 0, None, 5], y=[0, 0, 0, 1])


@pytest.mark.parametrize(
    "condition, expected",
    [
        ("A.x < 3", 2),                      # a3: NULL < 3 is NULL -> a3 plays no A
        ("NOT (A.x < 3)", 0),                # NOT NULL is NULL, still false
        ("A.x IS NULL", 1),                  # only a3
        ("A.x IS NOT NULL", 2),
        ("A.x <> 1", 0),                     # a1 fails, a3 is NULL
        ("A.x < 3 OR A.y = 0", 3),           # NULL OR TRUE is TRUE
        ("A.x < 3 AND A.y = 0", 2),          # NULL AND TRUE is NULL
        ("A.x IN (1, 2)", 2),
        ("A.x < NEXT(B).x", 1),              # (a1,b4) only: 1 < 0 false, NULL < 5 NULL
        ("NEXT(B).x > A.x OR NEXT(B).y = 1", 2),   # (a1,b4) and (a3,b4)
        ("A.x / NEXT(B).y > 0", 1),          # (a1,b2): 1/0 is NULL; (a3,b4): NULL
        ("A.x % NEXT(B).y = 0", 1),          # modulo by zero is NULL too
        ("A.x / 0 > 0 OR A.x > 0", 2),       # NULL OR TRUE for a1; NULL for a3
        ("A.x / A.y IS NULL", 3),            # a1: 1/0 and a3: NULL/0 are NULL: all trends
    ],
)
def test_null_in_a_predicate_is_false_and_nothing_raises(condition, expected) -> None:
    out = both(f"RETURN COUNT(*) PATTERN SEQ(A, B) WHERE {condition}", NULLS)
    got = out.column("COUNT(*)").to_pylist()
    assert got == ([expected] if expected else [])


def test_null_attributes_are_skipped_by_aggregates() -> None:
    # a1(x=NULL) a2(x=2) a3(x=NULL) b4; SEQ(A+, B): A+ sequences of {a1,a2,a3}: 7 trends.
    table = events("a1 a2 a3 b4", x=[None, 2.0, None, 7.0])
    query = ("RETURN COUNT(*), COUNT(A), SUM(A.x), AVG(A.x), MIN(A.x), MAX(A.x), "
             "SUM(B.x), AVG(B.x) PATTERN SEQ(A+, B)")
    out = both(query, table)
    # Each of 3 A events is in 4 of the 7 trends: COUNT(A) = 12; only a2 is non-null:
    # SUM(A.x) = 2 * 4 = 8, AVG(A.x) = 8 / 4 (non-null values only) = 2.
    assert out.to_pylist() == [{
        "COUNT(*)": 7, "COUNT(A)": 12, "SUM(A.x)": 8.0, "AVG(A.x)": 2.0,
        "MIN(A.x)": 2.0, "MAX(A.x)": 2.0, "SUM(B.x)": 49.0, "AVG(B.x)": 7.0,
    }]


def test_all_null_attribute_gives_null_aggregates() -> None:
    table = events("a1 b2", x=pa.array([None, None], pa.int64()))
    out = both("RETURN COUNT(*), COUNT(A), SUM(A.x), AVG(A.x), MIN(A.x), MAX(A.x) PATTERN SEQ(A, B)", table)
    assert out.to_pylist() == [{
        "COUNT(*)": 1, "COUNT(A)": 1, "SUM(A.x)": None, "AVG(A.x)": None, "MIN(A.x)": None, "MAX(A.x)": None,
    }]
    assert out.schema.field("SUM(A.x)").type == pa.int64()
    assert out.schema.field("MIN(A.x)").type == pa.int64()


def test_null_group_and_equivalence_values_form_their_own_group() -> None:
    # NULL is a value for grouping and [attr] (as Spark's GROUP BY), listed first.
    table = events("a1 b2 a3 b4 a5 b6", g=[None, None, "k", "k", None, "k"])
    out = both("RETURN g, COUNT(*) PATTERN SEQ(A, B) WHERE [g] GROUP-BY g", table)
    # NULL: a1, b2, a5 -> (a1,b2).  k: a3, b4, b6 -> (a3,b4), (a3,b6).
    assert out.to_pylist() == [{"g": None, "COUNT(*)": 1}, {"g": "k", "COUNT(*)": 2}]
