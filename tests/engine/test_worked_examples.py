"""Every worked example of docs/language.md, through the engine (cogra.evaluate)."""

from __future__ import annotations

import pytest

import cogra
from cogra.datasets import events
from cogra.reference import evaluate_reference

RUNNING = "a1 b2 a3 a4 c5 b6 a7 b8"


def count(query: str, table) -> int:
    out = cogra.evaluate(query, table)
    assert out.num_rows <= 1
    return out.column("COUNT(*)")[0].as_py() if out.num_rows else 0


@pytest.mark.parametrize("semantics, expected", [("any", 43), ("next", 8), ("contiguous", 2)])
def test_running_example(semantics: str, expected: int) -> None:
    q = f"RETURN COUNT(*) PATTERN (SEQ(A+, B))+ SEMANTICS {semantics}"
    assert count(q, events(RUNNING)) == expected


def test_running_example_with_adjacent_predicate_is_33() -> None:
    # a7 is adjacent to b2 (1 < 5) but not to b6 (10 > 5); a3, a4 follow b2 (1 < 3).
    table = events(RUNNING, v={"a1": 3, "b2": 1, "a3": 3, "a4": 3, "b6": 10, "a7": 5, "b8": 0})
    q = "RETURN COUNT(*) PATTERN (SEQ(A+, B))+ SEMANTICS any WHERE B.v < NEXT(A).v"
    assert count(q, table) == 33
    assert cogra.plan(q, table.schema).executor.value == "mixed-grained"


@pytest.mark.parametrize(
    "pattern, stream, expected",
    [
        ("SEQ(A, B)", "a1 a2 b3", (2, 2, 1)),
        ("SEQ(A, B)", "a1 b2 b3", (2, 1, 1)),
        ("A+", "a1 a2 a3", (7, 6, 6)),
        ("SEQ(A+, B)", "a1 b2 b3 x4", (2, 1, 1)),
        ("SEQ(A, B+, C)", "a1 b2 x3 b4 c5 c6", (6, 1, 0)),
    ],
)
def test_semantics_table(pattern: str, stream: str, expected: tuple[int, int, int]) -> None:
    got = tuple(
        count(f"RETURN COUNT(*) PATTERN {pattern} SEMANTICS {s}", events(stream))
        for s in ("any", "next", "cont")
    )
    assert got == expected


def test_report_type_grained_table_counts() -> None:
    """Report Table 5: COUNT(*), COUNT(A), COUNT(B) of (SEQ(A+, B))+ on the running example.

    Type-grained totals (trends, A events, B events) over the trends ending at each
    variable; predTypes(A) = {A, B}, predTypes(B) = {A}; an A also starts one trend:

    event  trends ending at it          A total        B total
    a1     start:       (1, 1, 0)       (1, 1, 0)      (0, 0, 0)
    b2     A:           (1, 1, 0+1)     (1, 1, 0)      (1, 1, 1)
    a3     A + B + 1:   (3, 2+3, 1)     (4, 6, 1)      (1, 1, 1)
    a4     A + B + 1:   (6, 7+6, 2)     (10, 19, 3)    (1, 1, 1)
    c5     (not in the pattern)
    b6     A:           (10, 19, 3+10)  (10, 19, 3)    (11, 20, 14)
    a7     A + B + 1:   (22, 39+22, 17) (32, 80, 20)   (11, 20, 14)
    b8     A:           (32, 80, 20+32) (32, 80, 20)   (43, 100, 66)

    Trends end at a B, so the result is the final B total: 43 trends, 100 A events,
    66 B events (the two-step reference agrees).
    """
    table = events(RUNNING)
    q = "RETURN COUNT(*), COUNT(A), COUNT(B) PATTERN (SEQ(A+, B))+"
    assert cogra.evaluate(q, table).to_pylist() == [{"COUNT(*)": 43, "COUNT(A)": 100, "COUNT(B)": 66}]
    assert evaluate_reference(q, table).to_pylist() == [{"COUNT(*)": 43, "COUNT(A)": 100, "COUNT(B)": 66}]
