"""The report's q1, q2, q3 (its section 1), exactly as printed, over small data of their kind.

Each runs through the engine and the two-step reference on a generated stream small
enough for the reference to enumerate every trend (each well under the 5 s budget), and
must give the same non-empty table.  ``sql/q1.sql`` .. ``sql/q3.sql`` must hold the same
texts, so the SQL front end runs exactly these queries.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

import cogra
from cogra import datasets
from cogra.examples import EXAMPLES, Q1, Q2, Q3
from cogra.reference import evaluate_reference
from tests.compare import assert_same_result

ROOT = Path(__file__).resolve().parents[2]

# Small streams: q1 needs passive stretches (4 activities: lying, sitting, standing are
# passive, walking is not); q3's 10-minute windows sliding every 10 s must hold few ticks
# per company, so ticks are ~50 s apart.
Q1_DATA = dict(n_events=300, n_people=3, n_activities=4, rate=0.5, seed=0)
Q2_DATA = dict(n_events=300, n_drivers=3, seed=0)
Q3_DATA = dict(n_events=24, n_companies=4, n_sectors=2, rate=0.02, seed=0)


def run_both(query: str, table: pa.Table) -> pa.Table:
    got = cogra.evaluate(query, table)
    want = evaluate_reference(query, table)
    assert_same_result(got, want, context=f"\nquery:\n{query}")
    assert got.num_rows > 0
    assert got.schema.metadata[b"cogra.rows_null_time"] == b"0"
    return got


def test_q1_heart_rate_rising_while_passive() -> None:
    table = datasets.activity(**Q1_DATA)
    out = run_both(Q1, table)
    assert out.schema.names == ["patient", "MIN(M.rate)", "MAX(M.rate)", "window_start", "window_end"]
    assert out.schema.types == [pa.int64()] * 5
    rows = out.to_pylist()
    assert len({r["patient"] for r in rows}) >= 2
    # A rising run of two or more measurements makes MAX exceed MIN.
    assert any(r["MIN(M.rate)"] < r["MAX(M.rate)"] for r in rows)
    assert all(r["window_end"] - r["window_start"] == 600 and r["window_start"] % 30 == 0 for r in rows)
    # Only passive measurements take part.
    passive = [r for r, a in zip(table.column("rate").to_pylist(), table.column("activity").to_pylist())
               if a == "passive"]
    assert min(passive) <= min(r["MIN(M.rate)"] for r in rows)
    assert max(r["MAX(M.rate)"] for r in rows) <= max(passive)


def test_q2_pool_trips_per_driver() -> None:
    out = run_both(Q2, datasets.rides(**Q2_DATA))
    assert out.schema.names == ["driver", "COUNT(*)", "window_start", "window_end"]
    rows = out.to_pylist()
    assert {r["driver"] for r in rows} == {1, 2, 3}
    assert all(r["COUNT(*)"] >= 1 for r in rows)
    assert max(r["COUNT(*)"] for r in rows) >= 2  # some window holds two trips of a driver


def test_q3_prices_after_down_trends() -> None:
    table = datasets.stock(**Q3_DATA)
    out = run_both(Q3, table)
    assert out.schema.names == [
        "sector", "A.company", "B.company", "AVG(B.price)", "window_start", "window_end"]
    assert out.schema.field("AVG(B.price)").type == pa.float64()
    rows = out.to_pylist()
    assert len({r["sector"] for r in rows}) == 2
    assert any(r["A.company"] != r["B.company"] for r in rows)
    # Companies of a group are in the group's sector (company i is in sector i % 2).
    for r in rows:
        for c in (r["A.company"], r["B.company"]):
            assert int(c[1:]) % 2 == int(r["sector"][1:])
    prices = table.column("price").to_pylist()
    assert all(min(prices) <= r["AVG(B.price)"] <= max(prices) for r in rows)


def test_report_queries_as_printed() -> None:
    # Guards against accidental edits: the texts are the report's, clause for clause.
    assert Q1.splitlines()[0] == "RETURN patient, MIN(M.rate), MAX(M.rate)"
    assert "SEMANTICS contiguous" in Q1 and "M.activity = passive" in Q1
    assert "PATTERN SEQ(Accept, (SEQ(Call, Cancel))+, Finish)" in Q2
    assert "SEMANTICS skip-till-next-match" in Q2
    assert "PATTERN SEQ(Stock A+, Stock B+)" in Q3 and "A.price > NEXT(A).price" in Q3
    assert [e.query for e in EXAMPLES] == [Q1, Q2, Q3]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_sql_files_hold_exactly_the_report_texts(example) -> None:
    sql = (ROOT / "sql" / f"{example.name}.sql").read_text()
    found = re.findall(r"MATCH_TREND\(TABLE\((\w+)\),\s*'\n(.*?)\n'\)", sql, flags=re.S)
    assert len(found) == 1, f"sql/{example.name}.sql should call MATCH_TREND once"
    table, text = found[0]
    assert text == example.query
    assert table == example.table
