"""The aggregate functions' entries (cogra.analysis.aggregates): one per name the parser
knows, and the typing binding and the output read from them."""

from __future__ import annotations

import pyarrow as pa
import pytest

import cogra
from cogra.analysis.aggregates import AGGREGATES, spec
from cogra.language.ast import AggFunc


def test_every_aggregate_name_has_an_entry() -> None:
    assert set(AGGREGATES) == set(AggFunc)
    assert all(spec(f).func is f for f in AggFunc)


@pytest.mark.parametrize(("source", "want"), [
    (pa.int32(), {"COUNT": pa.int64(), "MIN": pa.int32(), "MAX": pa.int32(), "SUM": pa.int64(), "AVG": pa.float64()}),
    (pa.float16(), {"MIN": pa.float32(), "SUM": pa.float64(), "AVG": pa.float64()}),
    (pa.decimal128(5, 1), {"SUM": pa.decimal128(15, 1), "MAX": pa.decimal128(5, 1)}),
    (pa.string(), {"MIN": pa.string(), "SUM": None}),
])
def test_result_types(source: pa.DataType, want: dict) -> None:
    for name, typ in want.items():
        assert spec(AggFunc(name)).result_type(None if name == "COUNT" else source) == typ


def test_binding_and_output_read_the_entries() -> None:
    """An attribute of a kind an aggregate does not accept is a QueryError naming what it
    needs; the output columns take the entries' types."""
    table = pa.table({"type": ["A", "B"], "time": [1, 2], "s": ["x", "y"], "i": pa.array([1, 2], pa.int16())})
    with pytest.raises(cogra.QueryError, match=r"SUM\(A.s\) needs a numeric attribute, but s is string"):
        cogra.evaluate("RETURN SUM(A.s) PATTERN SEQ(A, B)", table)
    out = cogra.evaluate("RETURN COUNT(*), MIN(A.s), SUM(A.i), MAX(B.i), AVG(B.i) PATTERN SEQ(A, B)", table)
    assert out.schema.types == [pa.int64(), pa.string(), pa.int64(), pa.int16(), pa.float64()]
    assert out.to_pylist() == [{"COUNT(*)": 1, "MIN(A.s)": "x", "SUM(A.i)": 1, "MAX(B.i)": 2, "AVG(B.i)": 2.0}]
