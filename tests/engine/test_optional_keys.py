"""Keys on optional variables (docs/language.md, Keys on optional variables).

``GROUP-BY B.g`` where some trends have no ``B``: those trends have ``B.g`` NULL and share
the row of trends whose ``B`` events have ``B.g`` NULL; ``[B.x]`` constrains only trends
with ``B``; the trends without ``B`` form the sub-stream in which no event plays ``B``.

* small cases by hand, on both engine paths and the reference;
* every shape that used to be refused (``B?``, ``B*``, ``B | C``, an optional SEQ), against
  the reference under all three semantics;
* at the sizes users run: under ``any`` the trends split by ``B``'s presence and value, so
  the NULL row of ``SEQ(A, B?, C)`` grouped by ``B.g`` is ``SEQ(A, C)``'s count and the
  other rows sum to ``SEQ(A, B, C)``'s, over 100,000 events and sliding windows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import cogra
from cogra.reference import evaluate_reference
from tests.compare import assert_same_result

SEMANTICS = ("any", "next", "contiguous")


def rows(query: str, table: pa.Table) -> list[dict]:
    """Rows of the engine (compiled, pure), checked equal to the reference's, sorted."""
    want = evaluate_reference(query, table)
    for compiled in (None, False):
        assert_same_result(cogra.evaluate(query, table, compiled=compiled), want, context=query)
    return sorted(want.to_pylist(), key=lambda r: tuple((v is None, str(v)) for v in r.values()))


TABLE = pa.table({
    "type": ["A", "B", "C", "A", "C", "B", "C", "B"],
    "time": [1, 2, 3, 4, 5, 6, 7, 8],
    "g": ["x", "y", "z", "w", "v", "x", "q", None],
})


def test_group_by_an_optional_variable() -> None:
    # Without B: (a1|a4, c) -> a1: c3 c5 c7, a4: c5 c7 = 5.  B = y (b2): a1 b2 c3|c5|c7 = 3.
    # B = x (b6): a1|a4 b6 c7 = 2.  b8 (g NULL) finishes nothing.
    got = rows("RETURN B.g, COUNT(*), COUNT(B) PATTERN SEQ(A, B?, C) GROUP-BY B.g", TABLE)
    assert got == [{"B.g": "x", "COUNT(*)": 2, "COUNT(B)": 2}, {"B.g": "y", "COUNT(*)": 3, "COUNT(B)": 3},
                   {"B.g": None, "COUNT(*)": 5, "COUNT(B)": 0}]


def test_trends_without_the_variable_share_the_row_of_its_null_value() -> None:
    # b8 has g NULL: SEQ(A, B?) then finishes (a1, b8) and (a4, b8) in the NULL row, beside
    # the trends (a1) and (a4) without B.
    got = rows("RETURN B.g, COUNT(*) PATTERN SEQ(A, B?) GROUP-BY B.g", TABLE)
    assert {r["B.g"]: r["COUNT(*)"] for r in got} == {None: 2 + 2, "x": 2, "y": 1}


def test_an_equivalence_constrains_only_the_trends_with_the_variable() -> None:
    table = pa.table({"type": ["A", "B", "B", "C", "C"], "time": [1, 2, 3, 4, 5], "h": [0, 1, 2, 0, 0]})
    # [B.h]: all B events of a trend share h; trends without B are unconstrained.
    # SEQ(A, B*, C): without B a1 c4, a1 c5; with B {b2} or {b3} (b2 b3 differ in h), then
    # c4 or c5: 2 + 4.
    got = rows("RETURN COUNT(*) PATTERN SEQ(A, B*, C) WHERE [B.h]", table)
    assert got == [{"COUNT(*)": 6}]


@pytest.mark.parametrize("semantics", SEMANTICS)
@pytest.mark.parametrize(("pattern", "clause"), [
    ("SEQ(A, B?)", "WHERE [B.x]"),
    ("SEQ(A, B?)", "GROUP-BY B.x"),
    ("SEQ(A, B*)", "WHERE [B.x]"),
    ("SEQ(A, B*, C)", "GROUP-BY B.x"),
    ("SEQ(A, B | C)", "WHERE [B.x]"),
    ("SEQ(A, B | C)", "GROUP-BY B.x, C.x"),
    ("SEQ(A, (SEQ(B, C))?)", "WHERE [C.x] GROUP-BY B.x"),
    ("SEQ(A+, B{0,2}, C)", "GROUP-BY A.x, B.x"),
])
def test_each_shape_equals_the_reference(pattern: str, clause: str, semantics: str) -> None:
    rng = np.random.default_rng(sum(map(ord, pattern + clause)))  # (str hashes vary by process)
    n = 14
    table = pa.table({"type": rng.choice(["A", "B", "C", "X"], n).tolist(), "time": np.sort(rng.integers(0, 9, n)),
                      "x": rng.choice([1, 2, None], n).tolist()})
    items = ", ".join([r.strip() for r in clause.split("GROUP-BY")[1].split(",")] if "GROUP-BY" in clause else [])
    query = f"RETURN {items + ', ' if items else ''}COUNT(*) PATTERN {pattern} SEMANTICS {semantics} {clause}"
    rows(query, table)


def test_explain_names_the_sub_stream_without_the_variable() -> None:
    text = cogra.explain("RETURN B.g, COUNT(*) PATTERN SEQ(A, B?, C+) GROUP-BY B.g")
    assert "  without B      the sub-stream where no event plays B (its keys NULL)" in text
    # C[B] may go on (C+), so its trends end at a final copy; without B, at C[]$.
    assert "  C[B]     C                         predTypes = {B[B], C[B]}   binds C" in text
    assert "  C[B]$    C                  final  predTypes = {B[B], C[B]}   binds C" in text
    assert "  C[]$     C                  final  predTypes = {A[], C[]}   binds C" in text


def test_trends_end_at_final_copies_only() -> None:
    a = cogra.plan("RETURN B.g, COUNT(*) PATTERN SEQ(A, B?, C) GROUP-BY B.g").bound.automaton
    assert a.names == ("A[]", "B[B]", "C[]", "C[B]", "C[]$", "C[B]$") and a.final == {4, 5}
    assert a.ends_not_in(1) == 1 << 4 and a.ends_not_in(0) == 1 << 5  # B present: C[]$ cleared


def test_under_next_an_end_another_sub_stream_counts_still_extends_first() -> None:
    # Sub-stream B.x = 1 (b3): c2 ends (a1, c2), a trend of the sub-stream without B, but it
    # is still a1's first extension there, so (a1, b3, c4) is no trend under next.
    table = pa.table({"type": ["A", "C", "B", "C"], "time": [1, 2, 3, 4], "x": [None, None, 1, None]})
    got = rows("RETURN B.x, COUNT(*) PATTERN SEQ(A, B*, C) SEMANTICS next GROUP-BY B.x", table)
    assert got == [{"B.x": None, "COUNT(*)": 1}]


# -- at scale -----------------------------------------------------------------------------


def generated(n: int, seed: int = 5) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "type": rng.choice(["A", "B", "C", "X"], n, p=[0.3, 0.2, 0.3, 0.2]),
        "time": np.sort(rng.integers(0, n // 4, n)),
        "p": rng.integers(0, 25, n),
        "g": rng.integers(0, 6, n),
        "v": rng.integers(0, 100, n),
    })


@pytest.mark.parametrize("window", ["WITHIN 30 seconds", "WITHIN 40 seconds SLIDE 10 seconds"])
def test_at_scale_the_rows_split_the_trends_by_the_variable(window: str) -> None:
    table = generated(100_000)
    grouped = cogra.evaluate(f"RETURN p, B.g, COUNT(*), SUM(C.v) PATTERN SEQ(A, B?, C) "
                             f"GROUP-BY p, B.g {window}", table, on_overflow="null").to_pylist()
    without = cogra.evaluate(f"RETURN p, COUNT(*), SUM(C.v) PATTERN SEQ(A, C) GROUP-BY p {window}",
                             table, on_overflow="null").to_pylist()
    with_b = cogra.evaluate(f"RETURN p, COUNT(*), SUM(C.v) PATTERN SEQ(A, B, C) GROUP-BY p {window}",
                            table, on_overflow="null").to_pylist()
    key = lambda r: (r["p"], r["window_start"])  # noqa: E731
    null_rows = {key(r): (r["COUNT(*)"], r["SUM(C.v)"]) for r in grouped if r["B.g"] is None}
    assert null_rows == {key(r): (r["COUNT(*)"], r["SUM(C.v)"]) for r in without}
    summed: dict = {}
    for r in grouped:
        if r["B.g"] is not None:
            c, s = summed.get(key(r), (0, 0))
            summed[key(r)] = (c + r["COUNT(*)"], s + r["SUM(C.v)"])
    assert summed == {key(r): (r["COUNT(*)"], r["SUM(C.v)"]) for r in with_b}
    assert len(null_rows) > 1000 and len(summed) > 1000


@pytest.mark.parametrize("semantics", SEMANTICS)
def test_at_scale_the_pure_path_equals_the_compiled_one(semantics: str) -> None:
    table = generated(15_000, seed=8)
    query = (f"RETURN p, B.g, COUNT(*), AVG(A.v) PATTERN SEQ(A+, B?, C) SEMANTICS {semantics} "
             "WHERE [B.g] GROUP-BY p, B.g WITHIN 20 seconds SLIDE 5 seconds")
    assert_same_result(cogra.evaluate(query, table, compiled=False, on_overflow="null"),
                       cogra.evaluate(query, table, on_overflow="null"))
