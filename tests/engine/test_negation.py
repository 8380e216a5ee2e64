"""Negated sub-patterns ``SEQ(P1, NOT N, P2)`` (docs/language.md, Negation).

* the section's worked examples, on both engine paths and the reference;
* which events block (type and the negated variable's local predicates, in the same
  window and partition, whatever the variable keys) and which stay in the sub-stream;
* negations inside Kleene, several per SEQ, under repetition;
* errors: misplaced negations, a negated variable in aggregates, keys or predicates on
  adjacent events;
* at the sizes users run: ``SEQ(A, NOT N, B)`` counted directly with numpy (for each
  ``b``, the ``a``s since the last blocker before it) over 200,000 events, with ties,
  partitions and sliding windows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import cogra
from cogra.errors import QueryError
from cogra.reference import evaluate_reference
from tests.compare import assert_same_result

SEMANTICS = ("any", "next", "contiguous")


def stream(text: str, **columns) -> pa.Table:
    """``"a1 n2 b3"``: letter = type, number = time; extra columns by keyword."""
    tokens = text.split()
    return pa.table({"type": [t[0].upper() for t in tokens], "time": [int(t[1:]) for t in tokens], **columns})


def all_paths(query: str, table: pa.Table) -> list:
    """The query's rows from the engine (compiled, pure) and the reference."""
    return [cogra.evaluate(query, table, compiled=c).to_pylist() for c in (None, False)] + [
        evaluate_reference(query, table).to_pylist()]


def counts(query: str, table: pa.Table) -> list[int | None]:
    rows = all_paths(query, table)
    assert rows[0] == rows[1] == rows[2], rows
    return [r["COUNT(*)"] for r in rows[0]] or [0]


@pytest.mark.parametrize(("pattern", "events", "expected"), [
    # Section 8: (a4, b5) only; (a1, b3) and (a1, b5) are blocked by n2.
    ("SEQ(A, NOT N, B)", "a1 n2 b3 a4 b5", (1, 1, 1)),
    ("(SEQ(A, NOT N, B))+", "a1 b2 n3 a4 b5", (3, 3, 2)),
    # Blockers at the same time as either end block nothing: "strictly between".
    ("SEQ(A, NOT N, B)", "a1 n1 b3 n3", (1, 1, 1)),
    # Several negations in one SEQ each guard their own step: m3 blocks b2 -> c4 and
    # b2 -> c6, so under any (a1, b5, c6) is the one trend; under next a1 is extended by
    # b2 only, and (a1, b2) by no C.
    ("SEQ(A, NOT N, B, NOT M, C)", "a1 b2 m3 c4 b5 c6", (1, 0, 0)),
    # Only the crossing step is guarded: A+ runs through n2, then a3 -> b4 crosses nothing:
    # (a1, a3, b4) and (a3, b4); under contiguous n2 (a type only under NOT) stays in the
    # sub-stream and separates a1 from a3.
    ("SEQ(A+, NOT N, B)", "a1 n2 a3 b4", (2, 2, 1)),
    # Every A -> B pair straddles n2.
    ("SEQ(A, NOT N, B)", "a1 n2 b3 b5", (0, 0, 0)),
])
def test_worked_examples(pattern: str, events: str, expected: tuple[int, int, int]) -> None:
    for semantics, want in zip(SEMANTICS, expected):
        query = f"RETURN COUNT(*) PATTERN {pattern} SEMANTICS {semantics}"
        assert counts(query, stream(events)) == [want], query


def test_local_predicates_decide_which_events_block() -> None:
    # A ride with no fraud-cancel between Accept and Finish: only c3 blocks.
    table = pa.table({"type": ["Accept", "Cancel", "Finish", "Accept", "Cancel", "Finish"],
                      "time": [1, 2, 3, 4, 5, 6],
                      "reason": [None, "rain", None, None, "fraud", None]})
    query = """RETURN COUNT(*) PATTERN SEQ(Accept A, NOT Cancel C, Finish F)
               WHERE C.reason = 'fraud'"""
    # (a1,f3) unblocked; (a1,f6), (a4,f6) blocked by c5.
    assert counts(query, table) == [1]


def test_events_only_under_not_stay_in_the_sub_stream() -> None:
    # n2 does not block (N.v > 5 fails) but, of a type only under NOT, it stays in the
    # sub-stream like an irrelevant event: under contiguous it still breaks (a1, b3).
    table = stream("a1 n2 b3", v=[0, 0, 0])
    query = "RETURN COUNT(*) PATTERN SEQ(A, NOT N, B) SEMANTICS {} WHERE N.v > 5"
    assert counts(query.format("any"), table) == [1]
    assert counts(query.format("contiguous"), table) == [0]


def test_a_positive_event_that_plays_nothing_leaves_but_still_blocks() -> None:
    # One type, three roles: x2 (v = -1) plays neither A nor B (it leaves the sub-stream, so
    # contiguity holds between s1 and s3) but may play N.
    table = pa.table({"type": ["S", "S", "S"], "time": [1, 2, 3], "v": [10, -1, 10]})
    query = ("RETURN COUNT(*) PATTERN SEQ(S A, NOT S N, S B) SEMANTICS contiguous "
             "WHERE A.v > 5 AND B.v > 5 AND N.v < {}")
    assert counts(query.format(0), table) == [0]  # x2 blocks
    assert counts(query.format(-5), table) == [1]  # x2 does not block: (s1, s3) is contiguous


def test_blockers_come_from_the_partition_whatever_the_variable_keys() -> None:
    table = pa.table({"type": ["A", "N", "B", "A", "B"], "time": [1, 2, 3, 4, 5],
                      "g": [0, 1, 0, 1, 1], "k": ["x", "y", "x", "y", "y"]})
    # Plain key g: n2 is in partition 1 and blocks nothing in partition 0.
    by_g = "RETURN g, COUNT(*) PATTERN SEQ(A, NOT N, B) GROUP-BY g"
    rows = all_paths(by_g, table)
    assert rows[0] == rows[1] == rows[2]
    assert sorted((r["g"], r["COUNT(*)"]) for r in rows[0]) == [(0, 1), (1, 1)]
    # Variable keys: n2 (k = y) still blocks a1 -> b3 (k = x) in the sub-stream of x.
    keyed = "RETURN A.k, COUNT(*) PATTERN SEQ(A, NOT N, B) WHERE [A.k] AND [B.k] GROUP-BY A.k"
    rows = all_paths(keyed, table)
    assert rows[0] == rows[1] == rows[2] == [{"A.k": "y", "COUNT(*)": 1}]


def test_negation_inside_repetition() -> None:
    # (SEQ(A, NOT N, B)){2}: each repetition's A -> B step is guarded; B -> A is not.
    table = stream("a1 b2 n3 a4 b5 a6 n7 b8")
    # A -> B pairs without a blocker between: (a1, b2), (a4, b5); so one trend (a1 b2 a4 b5),
    # and under contiguous n3 (in the sub-stream) separates b2 from a4.
    for semantics, want in zip(SEMANTICS, (1, 1, 0)):
        query = "RETURN COUNT(*) PATTERN (SEQ(A, NOT N, B)){2} SEMANTICS " + semantics
        assert counts(query, table) == [want], semantics


def test_explain_shows_the_guarded_steps() -> None:
    text = cogra.explain("RETURN COUNT(*) PATTERN SEQ(Accept A, NOT Cancel C, Finish F) WHERE C.reason = 'fraud'")
    assert "  local        C.reason = 'fraud'   decides which C events block" in text
    assert "  negation     NOT Cancel C   guards (A, F): no blocking event between" in text


@pytest.mark.parametrize(("query", "fragment", "line", "column"), [
    ("RETURN COUNT(C)\nPATTERN SEQ(A, NOT Cancel C, B)", "C is negated (NOT C): its events are in no trend", 1, 8),
    ("RETURN COUNT(*)\nPATTERN SEQ(A, NOT Cancel C, B)\nGROUP-BY C.x", "C is negated (NOT C)", 3, 10),
    ("RETURN COUNT(*)\nPATTERN SEQ(A, NOT Cancel C, B)\nWHERE [C.x]", "C is negated (NOT C)", 3, 8),
    ("RETURN COUNT(*)\nPATTERN SEQ(A, NOT Cancel C, B)\nWHERE A.x < NEXT(C).x",
     "C is negated (NOT C): its events are in no trend, so a predicate on adjacent events may not name it", 3, 13),
    ("RETURN COUNT(*)\nPATTERN SEQ(A, NOT Cancel C, B)\nWHERE C.x < NEXT(B).x",
     "a predicate on adjacent events may not name it", 3, 7),
])
def test_a_negated_variable_is_named_only_by_its_local_predicates(query, fragment, line, column) -> None:
    with pytest.raises(QueryError) as info:
        cogra.plan(query)
    assert fragment in info.value.message
    assert (info.value.line, info.value.column) == (line, column)


# -- at scale -----------------------------------------------------------------------------


def generated(n: int, seed: int = 11) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "type": rng.choice(["A", "B", "N", "X"], n, p=[0.4, 0.3, 0.05, 0.25]),
        "time": np.sort(rng.integers(0, n // 3, n)),  # ~3 events a second: ties
        "g": rng.integers(0, 30, n),
        "v": rng.integers(0, 10, n),
    })


def direct_counts(table: pa.Table, size: int | None, step: int | None, blocks) -> dict[tuple, int]:
    """``SEQ(A, NOT N, B)`` under any, counted from the definition with numpy: per partition
    and window, each ``b`` pairs with the ``a``s later than the last blocker before it."""
    types = np.asarray(table.column("type").to_pylist())
    times = table.column("time").to_numpy()
    g = table.column("g").to_numpy()
    v = table.column("v").to_numpy()
    out: dict[tuple, int] = {}
    for key in np.unique(g):
        rows = np.flatnonzero(g == key)
        t, ty, vv = times[rows], types[rows], v[rows]
        a_t, b_t = t[ty == "A"], t[ty == "B"]
        n_t = t[(ty == "N") & blocks(vv)]
        last_block = np.full(len(b_t), -1)
        i = np.searchsorted(n_t, b_t, side="left") - 1  # the last blocker strictly before b
        last_block[i >= 0] = n_t[i[i >= 0]]
        if size is None:
            windows = [(None, None)]
        else:
            ks = range((int(t.min()) - size) // step, int(t.max()) // step + 1)
            windows = [(k * step, k * step + size) for k in ks]
        for lo_w, hi_w in windows:
            if lo_w is None:
                lo_a, sel = np.full(len(b_t), -np.inf), np.ones(len(b_t), bool)
            else:
                sel = (b_t >= lo_w) & (b_t < hi_w)
                lo_a = np.full(len(b_t), lo_w)
            # a.time >= the last blocker (one at a's own time is not strictly between), >= the
            # window's start, and < b.time.
            lower = np.maximum(last_block, lo_a)[sel]
            upper = b_t[sel]
            n = int((np.searchsorted(a_t, upper, side="left") - np.searchsorted(a_t, lower, side="left")).sum())
            if n:
                out[(int(key), lo_w)] = n
    return out


@pytest.mark.parametrize(("window", "size", "step"), [
    ("", None, None), ("WITHIN 60 seconds", 60, 60), ("WITHIN 60 seconds SLIDE 20 seconds", 60, 20),
], ids=["one-window", "tumbling", "sliding"])
@pytest.mark.parametrize("local", ["", "WHERE N.v > 3"])
def test_at_scale_equals_a_direct_count(window: str, size, step, local: str) -> None:
    table = generated(200_000)
    query = f"RETURN g, COUNT(*) PATTERN SEQ(A, NOT N, B) {local} GROUP-BY g {window}"
    got = cogra.evaluate(query, table).to_pylist()
    blocks = (lambda vv: vv > 3) if local else (lambda vv: np.ones(len(vv), bool))
    want = direct_counts(table, size, step, blocks)
    assert {(r["g"], r.get("window_start")): r["COUNT(*)"] for r in got} == want
    assert sum(want.values()) > 10_000


@pytest.mark.parametrize("semantics", SEMANTICS)
def test_at_scale_the_pure_path_equals_the_compiled_one(semantics: str) -> None:
    table = generated(20_000, seed=2)
    query = (f"RETURN g, COUNT(*), SUM(A.v), MAX(B.v) PATTERN (SEQ(A+, NOT N, B)){{1,2}} "
             f"SEMANTICS {semantics} WHERE N.v > 2 GROUP-BY g WITHIN 20 seconds SLIDE 5 seconds")
    assert_same_result(cogra.evaluate(query, table, compiled=False, on_overflow="null"),
                       cogra.evaluate(query, table, on_overflow="null"))
