"""cogra.pushdown: the columns a scan may prune to and a filter that keeps every row that matters."""

from __future__ import annotations

import pyarrow as pa
import pytest

import cogra
from cogra.examples import Q1, Q3

ACTIVITY = pa.schema([("type", pa.string()), ("time", pa.int64()), ("patient", pa.int64()),
                      ("activity", pa.string()), ("rate", pa.int64()), ("unused", pa.string())])
AB = pa.schema([("type", pa.string()), ("time", pa.int64()), ("x", pa.int64()), ("s", pa.string()),
                ("unused", pa.float64())])


def test_q1_prunes_columns_and_pushes_the_local_predicate_and_keeps_other_types_under_cont() -> None:
    columns, where = cogra.pushdown(Q1, ACTIVITY)
    assert set(columns) == {"time", "type", "patient", "rate", "activity"}
    assert where == ("((`type` = 'Measurement') AND (`activity` = 'passive')) OR (`type` IS NULL) "
                     "OR (`type` NOT IN ('Measurement'))")


def test_q3_has_no_local_predicate_so_only_its_type_is_kept() -> None:
    schema = pa.schema([("type", pa.string()), ("time", pa.int64()), ("sector", pa.string()),
                        ("company", pa.string()), ("price", pa.float64()), ("volume", pa.int64())])
    columns, where = cogra.pushdown(Q3, schema)
    assert "volume" not in columns
    assert where == "((`type` = 'Stock')) OR (`type` IS NULL)"


def test_arithmetic_is_not_pushed_but_the_rest_of_the_variable_is() -> None:
    q = "RETURN COUNT(*) PATTERN SEQ(A, B) WHERE A.x > 1 AND A.x / 0 > 1 AND B.s IN ('a', 'b')"
    _, where = cogra.pushdown(q, AB)
    assert where == "((`type` = 'A') AND (`x` > 1)) OR ((`type` = 'B') AND (`s` IN ('a', 'b'))) OR (`type` IS NULL)"


@pytest.mark.parametrize("semantics", ["any", "next"])
def test_other_types_are_dropped_unless_contiguous(semantics: str) -> None:
    _, where = cogra.pushdown(f"RETURN COUNT(*) PATTERN SEQ(A, B) SEMANTICS {semantics}", AB)
    assert "NOT IN" not in where


def test_a_variable_without_local_predicates_and_no_type_column_keeps_everything() -> None:
    schema = pa.schema([("time", pa.int64()), ("x", pa.int64())])
    assert cogra.pushdown("RETURN COUNT(*) PATTERN M+", schema) == (("time",), None)
    assert cogra.pushdown("RETURN COUNT(*) PATTERN M+ WHERE M.x BETWEEN 1 AND 3", schema)[1] == \
        "((`x` BETWEEN 1 AND 3))"


def test_adjacent_predicates_are_never_pushed() -> None:
    _, where = cogra.pushdown("RETURN COUNT(*) PATTERN A+ WHERE A.x < NEXT(A).x", AB)
    assert where == "((`type` = 'A')) OR (`type` IS NULL)"


def test_partition_columns_are_the_plain_group_by_attributes() -> None:
    assert cogra.partition_columns(Q3) == ("sector",)
    assert cogra.partition_columns("RETURN COUNT(*) PATTERN A+ WHERE [h] GROUP-BY g") == ("g",)


def test_nan_is_ordered_as_spark_orders_it() -> None:
    """Equal to itself, above every number: the engine reads a condition on NaN as Spark
    reads the pushed filter (tests/spark: the two agree on NaN, NULL and -0.0)."""
    nan = float("nan")
    table = pa.table({"type": ["A"] * 4, "time": [1, 2, 3, 4], "f": [nan, 1.0, 3.0, nan]})
    counts = {c: cogra.evaluate(f"RETURN COUNT(*) PATTERN A+ WHERE {c}", table).to_pylist()
              for c in ("A.f <> A.f", "NOT (A.f >= 3)", "A.f > 2", "A.f = NEXT(A).f")}
    assert counts == {"A.f <> A.f": [], "NOT (A.f >= 3)": [{"COUNT(*)": 1}],
                      "A.f > 2": [{"COUNT(*)": 7}], "A.f = NEXT(A).f": [{"COUNT(*)": 5}]}


@pytest.mark.parametrize("literal", ["'it''s'", "'a\\b'"])
def test_string_literals_with_quotes_or_backslashes_are_not_pushed(literal) -> None:
    """Spark reads their escapes by spark.sql.parser.escapedStringLiterals."""
    schema = pa.schema([("type", pa.string()), ("time", pa.int64()), ("x", pa.string())])
    _, where = cogra.pushdown(f"RETURN COUNT(*) PATTERN A+ WHERE A.x = {literal}", schema)
    assert where == "((`type` = 'A')) OR (`type` IS NULL)"


@pytest.mark.parametrize("semantics", ["any", "contiguous"])
def test_the_rows_a_negation_may_block_are_kept(semantics: str) -> None:
    """Blockers of NOT N are read (its type and its pushable local predicates); under
    contiguous every row of a type only under NOT is kept as well (it breaks contiguity)."""
    q = f"RETURN COUNT(*) PATTERN SEQ(A, NOT Cancel C, B) SEMANTICS {semantics} WHERE C.x > 3 AND A.x < 2"
    columns, where = cogra.pushdown(q, AB)
    assert "x" in columns
    blockers = "((`type` = 'Cancel') AND (`x` > 3))"
    assert where == ("((`type` = 'A') AND (`x` < 2)) OR ((`type` = 'B')) OR " + blockers + " OR (`type` IS NULL)"
                     + (" OR (`type` NOT IN ('A', 'B'))" if semantics == "contiguous" else ""))
