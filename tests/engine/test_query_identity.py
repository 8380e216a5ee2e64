"""A query's identity (what a stream's state depends on), the event time a stream's
watermark reads, and the wire forms that carry rows across PySpark's pandas operator."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from cogra.analysis.identity import query_identity
from cogra.language.parser import clause_texts

SCHEMA = pa.schema([("type", pa.string()), ("time", pa.int64()), ("v", pa.int64()), ("g", pa.string())])
BASE = "RETURN g, COUNT(*) PATTERN SEQ(A+, B) WHERE A.v > 1 GROUP-BY g WITHIN 10 seconds"


def fingerprint(text: str, schema: pa.Schema = SCHEMA, **kw) -> str:
    return query_identity(text, schema, **kw).fingerprint()


def test_clause_texts_as_written():
    text = "RETURN g,  COUNT(*)\nPATTERN SEQ(A+, B)  SEMANTICS next\nWHERE A.x = 'WITHIN'\nGROUP BY g WITHIN 1 min SLIDE 10 s;"
    assert clause_texts(text) == {"RETURN": "g, COUNT(*)", "PATTERN": "SEQ(A+, B)", "SEMANTICS": "next",
                                  "WHERE": "A.x = 'WITHIN'", "GROUP-BY": "g", "WITHIN": "1 min SLIDE 10 s"}


@pytest.mark.parametrize("same", [
    "RETURN g,COUNT(*)\nPATTERN SEQ(A+,B)\nSEMANTICS any\nWHERE A.v > 1\nGROUP BY g\nWITHIN 10 sec",
    "return g, COUNT(*) pattern SEQ(A+, B) semantics skip-till-any-match where A.v > 1 group-by g within 10000 ms",
])
def test_the_same_query_written_otherwise_has_the_same_identity(same):
    assert fingerprint(same) == fingerprint(BASE)


@pytest.mark.parametrize("changed", [
    BASE.replace("SEQ(A+, B)", "SEQ(A{2,}, B)"),
    BASE.replace("WHERE", "SEMANTICS next WHERE"),
    BASE.replace("A.v > 1", "A.v > 2"),
    BASE.replace("WITHIN 10 seconds", "WITHIN 10 seconds SLIDE 5 seconds"),
    BASE.replace("GROUP-BY g", "GROUP-BY g, A.v").replace("RETURN g,", "RETURN g, A.v,"),
    BASE.replace("COUNT(*)", "COUNT(A)"),
    BASE.replace("COUNT(*)", "COUNT(*) AS n"),
])
def test_every_clause_is_part_of_the_identity(changed):
    assert fingerprint(changed) != fingerprint(BASE)


def test_the_input_binding_is_part_of_the_identity():
    wider = pa.schema([*SCHEMA, ("unused", pa.float64())])
    assert fingerprint(BASE, wider, columns=SCHEMA.names) == fingerprint(BASE)
    retyped = pa.schema([("type", pa.string()), ("time", pa.int64()), ("v", pa.float64()), ("g", pa.string())])
    assert fingerprint(BASE, retyped) != fingerprint(BASE)
    assert fingerprint(BASE, type_column="kind") != fingerprint(BASE)
    assert fingerprint(BASE, partition_by=["g"]) != fingerprint(BASE)


def test_the_identity_shows_each_clause_as_written():
    identity = query_identity(BASE.replace("SEQ(A+, B)", "SEQ(A{2,},  B)"), SCHEMA)
    shown = {c.name: c.text for c in identity.clauses}
    assert shown["PATTERN"] == "SEQ(A{2,}, B)" and shown["SEMANTICS"] == "skip-till-any-match (the default)"
    assert type(identity).from_json(identity.to_json()) == identity


def test_the_event_time_converts_back_exactly():
    from cogra.spark.event_time import OFFSET_SECONDS, timer_ms, watermark_in_time_units

    seconds, micros = pa.int64(), pa.timestamp("us", tz="UTC")
    assert watermark_in_time_units(0, seconds, OFFSET_SECONDS) is None  # Spark's "none yet"
    for t in (-95, -1, 0, 1, 1_700_000_000):
        ms = (t + OFFSET_SECONDS) * 1000  # the watermark a row at t with no delay gives
        assert watermark_in_time_units(ms, seconds, OFFSET_SECONDS) == t
        assert watermark_in_time_units(ms - 1, seconds, OFFSET_SECONDS) == t - 1  # t itself is not yet late
        assert timer_ms(t, seconds, OFFSET_SECONDS) == ms
        us = t * 1_000_000 + 7
        assert watermark_in_time_units(timer_ms(us, micros, OFFSET_SECONDS), micros, OFFSET_SECONDS) >= us
    assert watermark_in_time_units(5_000, seconds, 0) == 5  # the input's own watermark: no shift


def test_times_outside_the_streamed_range_are_an_error():
    from cogra.errors import DataError
    from cogra.spark.event_time import check_event_times

    check_event_times(pd.Series([1, None]), pd.Series([pd.Timestamp(1), None]), "time")
    with pytest.raises(DataError, match="time column time: 1 row.* outside the range"):
        check_event_times(pd.Series([1, 10**13]), pd.Series([pd.Timestamp(1), None]), "time")


def test_wire_forms_keep_every_value():
    from cogra.spark.stream_rows import exact_pandas, rows_from_pandas, wire_sql

    schema = pa.schema([("v", pa.int64()), ("t", pa.timestamp("us", tz="UTC")), ("n", pa.timestamp("us")),
                        ("w", pa.float64()), ("s", pa.string()), ("i", pa.int32())])
    assert [wire_sql(f.name, f.type) is not None for f in schema] == [True, True, True, False, False, False]
    big = 2**62 + 1
    # What PySpark's pandas operator hands over for the wire forms: strings, micros (float
    # where NULL), and plain columns as pandas makes them.
    pdf = pd.DataFrame({"v": [str(big), None], "t": [1_699_153_200_000_001, None], "n": [-5, 7],
                        "w": [0.5, None], "s": ["x", None], "i": [3.0, None]})
    table = rows_from_pandas(pdf, schema)
    assert table.schema == schema
    assert table.column("v").to_pylist() == [big, None]
    assert table.column("t").cast(pa.int64()).to_pylist() == [1_699_153_200_000_001, None]
    assert table.column("n").cast(pa.int64()).to_pylist() == [-5, 7]
    assert table.column("i").to_pylist() == [3, None]
    out = exact_pandas(pa.table({"c": pa.array([2**60 - 1, None], pa.int64())}))
    assert out["c"].iloc[0] == 2**60 - 1 and pd.isna(out["c"].iloc[1])
    assert pa.Array.from_pandas(out["c"]).to_pylist() == [2**60 - 1, None]


def test_packing_groups_rows_and_refuses_times_outside_the_range():
    from cogra.errors import DataError
    from cogra.spark.stream_packing import check_event_times, pack, read_payload

    stamps = pa.timestamp("us", tz="UTC")
    batch = pa.record_batch({"time": pa.array([1, 2, 3, 4], pa.int64()), "v": [10, 20, 30, None],
                             "__cogra_event_time": pa.array([5, 7, 6, None], stamps),
                             "__cogra_group": ["a", "b", "a", "a"]})
    packed = pack(batch, ["time", "v"]).to_pylist()
    assert [r["__cogra_group"] for r in packed] == ["a", "b"]
    assert read_payload(packed[0]["payload"]).to_pydict() == {"time": [1, 3, 4], "v": [10, 30, None]}
    assert [r["__cogra_event_time"].microsecond for r in packed] == [6, 7]  # each group's latest
    with pytest.raises(DataError, match="outside the range"):
        check_event_times(batch, "time")
    check_event_times(batch.slice(0, 3), "time")
