"""Absence: negation at the edge of a pattern (docs/language.md, Absence at the edge of a
pattern).

* the section's worked examples under every semantics, on the compiled and the Python
  paths and the reference, and which events block (local predicates, partitions, not
  variable keys; a blocker at the trend's own end time blocks nothing);
* a trend blocked in one sliding window and not in the next;
* every misplacement the section names, with line, column and reason;
* at the sizes users run: ``SEQ(A, NOT N)`` / ``SEQ(NOT N, A)`` counted directly with
  numpy over 200,000 events with partitions and every window kind, and random
  absence queries over 30,000 events, compiled (window, mixed-grained and generated
  kernels) against the Python executors;
* a stream pushed in batches equals the batch evaluation (the window's later blockers).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import cogra
from cogra.errors import QueryError
from cogra.runtime.online import OnlineEvaluation
from tests.compare import assert_same_result
from tests.engine.test_negation import all_paths, counts, stream

SEMANTICS = ("any", "next", "contiguous")


@pytest.mark.parametrize(("pattern", "events", "expected"), [
    # The section's examples (its SEQ(Accept A, NOT Finish F) with one-letter types).
    ("SEQ(A, NOT F)", "a1 f2 a3", (1, 1, 1)),
    # (a1, b4) under any; under next a1's first extension is b2 and (a1, b2) is blocked by
    # n3; under contiguous (a1, b4) is not contiguous.
    ("SEQ(A, B, NOT N)", "a1 b2 n3 b4", (1, 0, 0)),
    # (a3, b4) has n2 before it; under contiguous n2 (a type only under NOT) stays in the
    # sub-stream and separates a1 from b4.
    ("SEQ(NOT N, A, B)", "a1 n2 a3 b4", (1, 1, 0)),
    # A blocker at the same time as the trend's end (start) blocks nothing.
    ("SEQ(A, NOT N)", "a1 n1", (1, 1, 1)),
    ("SEQ(NOT N, A)", "n1 a1", (1, 1, 1)),
    # Both: trends start at a1 (m2 precedes the rest) and end at a6 (n5 follows the rest):
    # any takes a3, a4 or not (4), next the chain a1 a3 a4 a6, contiguous none (m2 breaks).
    ("SEQ(NOT M, A+, NOT N)", "a1 m2 a3 a4 n5 a6", (4, 1, 0)),
    # It filters complete trends, never partial ones: (a1, b2) is blocked by n3 but goes on
    # to b4 -- any counts (a1, b4) and (a1, b2, b4), next (a1, b2, b4) (b2 took a1's next
    # step); under contiguous n3 breaks the run after (a1, b2).
    ("SEQ(A, B+, NOT N)", "a1 b2 n3 b4", (2, 1, 0)),
    # A type that is both positive and negated: the last B of the input ends every trend.
    ("SEQ(A, B, NOT B X)", "a1 b2 b3", (1, 0, 0)),
])
def test_worked_examples(pattern: str, events: str, expected: tuple[int, int, int]) -> None:
    for semantics, want in zip(SEMANTICS, expected):
        query = f"RETURN COUNT(*) PATTERN {pattern} SEMANTICS {semantics}"
        assert counts(query, stream(events)) == [want], query


def test_a_trend_is_blocked_in_one_sliding_window_and_not_in_the_next() -> None:
    # [-5, 5) holds a1 only; in [0, 10) n7 follows a1.
    query = "RETURN COUNT(*) PATTERN SEQ(A, NOT N) WITHIN 10 seconds SLIDE 5 seconds"
    for rows in all_paths(query, stream("a1 n7")):
        assert rows == [{"COUNT(*)": 1, "window_start": -5, "window_end": 5}]
    # The same for a leading blocker: in [0, 10) n1 precedes a7, in [5, 15) nothing does.
    query = "RETURN COUNT(*) PATTERN SEQ(NOT N, A) WITHIN 10 seconds SLIDE 5 seconds"
    for rows in all_paths(query, stream("n1 a7")):
        assert rows == [{"COUNT(*)": 1, "window_start": 5, "window_end": 15}]


def test_local_predicates_decide_which_events_block() -> None:
    # Rides accepted and not finished, where only a finish with paid = 1 counts as one.
    table = pa.table({"type": ["Accept", "Finish", "Accept", "Finish"], "time": [1, 2, 3, 4],
                      "paid": [0, 0, 0, 1]})
    query = "RETURN COUNT(*) PATTERN SEQ(Accept A, NOT Finish F) WHERE F.paid = 1"
    assert counts(query, table) == [0]  # f4 follows both accepts
    table = table.set_column(2, "paid", pa.array([0, 1, 0, 0]))
    assert counts(query, table) == [1]  # f2 follows a1 only


def test_blockers_come_from_the_partition_whatever_the_variable_keys() -> None:
    # Partition g: x's blocker does not reach y.  Variable key A.k: n3 (k = 2) still
    # follows a1 (k = 1).
    table = pa.table({"type": ["A", "A", "N", "A"], "time": [1, 2, 3, 4], "g": ["x", "y", "x", "x"],
                      "k": [1, 1, 2, 1]})
    query = "RETURN g, COUNT(*) PATTERN SEQ(A, NOT N) GROUP-BY g"
    rows = all_paths(query, table)
    assert rows[0] == rows[1] == rows[2]
    assert sorted((r["g"], r["COUNT(*)"]) for r in rows[0]) == [("x", 1), ("y", 1)]
    query = "RETURN A.k, COUNT(*) PATTERN SEQ(A, NOT N) GROUP-BY A.k"
    rows = all_paths(query, table)
    assert rows[0] == rows[1] == rows[2] == [{"A.k": 1, "COUNT(*)": 1}]


def test_explain_names_the_blockers_and_their_side() -> None:
    text = cogra.explain("RETURN COUNT(*) PATTERN SEQ(NOT Cancel C, Accept A, NOT Finish F) WHERE F.paid = 1")
    assert "local        F.paid = 1   decides which F events block" in text
    assert "absence      NOT Cancel C   leading: a trend counts only if no C event precedes its first event" in text
    assert "absence      NOT Finish F   trailing: a trend counts only if no F event follows its last event" in text


@pytest.mark.parametrize(("query", "fragment", "line", "at"), [
    ("RETURN COUNT(*)\nPATTERN SEQ(A?, NOT N)", "the part before NOT N can match nothing", 2, "NOT N"),
    ("RETURN COUNT(*)\nPATTERN SEQ(NOT N, A*)", "the part after NOT N can match nothing", 2, "NOT N"),
    ("RETURN COUNT(*)\nPATTERN SEQ(NOT M, NOT N, A)", "NOT M is next to another negation", 2, "NOT M"),
    ("RETURN COUNT(*)\nPATTERN (SEQ(A, NOT N))+", "NOT N stands at the end of a SEQ inside the pattern", 2,
     "NOT N"),
    ("RETURN COUNT(*)\nPATTERN SEQ(B, SEQ(NOT N, A))", "NOT N stands at the start of a SEQ inside the pattern",
     2, "NOT N"),
    ("RETURN COUNT(*)\nPATTERN SEQ(A, NOT N) | B", "NOT N stands at the end of a SEQ inside the pattern", 2,
     "NOT N"),
    ("RETURN COUNT(*)\nPATTERN SEQ(NOT N)", "a pattern of negations alone matches no trend", 2, "SEQ"),
    ("RETURN COUNT(*)\nPATTERN SEQ(NOT M, NOT N)", "a pattern of negations alone", 2, "SEQ"),
    ("RETURN COUNT(N)\nPATTERN SEQ(A, NOT N)", "N is negated (NOT N): its events are in no trend", 1, "COUNT(N)"),
    ("RETURN COUNT(*)\nPATTERN SEQ(A, NOT N)\nGROUP-BY N.x", "N is negated (NOT N)", 3, "N.x"),
])
def test_misplaced_absences_are_errors(query: str, fragment: str, line: int, at: str) -> None:
    with pytest.raises(QueryError) as info:
        cogra.plan(query)
    assert fragment in info.value.message
    assert (info.value.line, info.value.column) == (line, query.splitlines()[line - 1].index(at) + 1)


# -- at scale -----------------------------------------------------------------------------


def generated(n: int, seed: int = 5) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "type": rng.choice(["A", "B", "N", "X"], n, p=[0.4, 0.3, 0.05, 0.25]),
        "time": np.sort(rng.integers(0, n // 3, n)),  # ~3 events a second: ties
        "g": rng.integers(0, 30, n),
        "v": rng.integers(0, 10, n),
    })


def direct_counts(table: pa.Table, size: int | None, step: int | None, leading: bool) -> dict[tuple, int]:
    """``SEQ(A, NOT N)`` (``SEQ(NOT N, A)`` when ``leading``) per partition and window, from
    the definition with numpy: the ``a``s at or after the window's last ``n`` (at or
    before its first)."""
    types = np.asarray(table.column("type").to_pylist())
    times = table.column("time").to_numpy()
    g = table.column("g").to_numpy()
    out: dict[tuple, int] = {}
    for key in np.unique(g):
        rows = np.flatnonzero(g == key)
        t, ty = times[rows], types[rows]
        a_t, n_t = t[ty == "A"], t[ty == "N"]
        if size is None:
            windows = [(-(2**62), 2**62)]
        else:
            ks = range((int(t.min()) - size) // step, int(t.max()) // step + 1)
            windows = [(k * step, k * step + size) for k in ks]
        for lo, hi in windows:
            a = a_t[(a_t >= lo) & (a_t < hi)]
            n = n_t[(n_t >= lo) & (n_t < hi)]
            if len(n):
                a = a[a <= n[0]] if leading else a[a >= n[-1]]
            if len(a):
                out[(int(key), None if size is None else lo)] = len(a)
    return out


@pytest.mark.parametrize(("window", "size", "step"), [
    ("", None, None), ("WITHIN 60 seconds", 60, 60), ("WITHIN 60 seconds SLIDE 20 seconds", 60, 20),
], ids=["one-window", "tumbling", "sliding"])
@pytest.mark.parametrize("leading", [False, True], ids=["trailing", "leading"])
def test_at_scale_equals_a_direct_count(window: str, size, step, leading: bool) -> None:
    table = generated(200_000)
    pattern = "SEQ(NOT N, A)" if leading else "SEQ(A, NOT N)"
    query = f"RETURN g, COUNT(*) PATTERN {pattern} GROUP-BY g {window}"
    got = cogra.evaluate(query, table).to_pylist()
    want = direct_counts(table, size, step, leading)
    assert {(r["g"], r.get("window_start")): r["COUNT(*)"] for r in got} == want
    assert 0 < sum(want.values()) < len(table) * 0.4 * (3 if step == 20 else 1)  # some blocked, some not


@pytest.mark.parametrize("semantics", SEMANTICS)
@pytest.mark.parametrize("pattern", ["SEQ(A+, B, NOT N)", "SEQ(NOT N, A, B+)", "SEQ(NOT X, A+, B, NOT N)"])
def test_at_scale_the_python_path_equals_the_compiled_one(semantics: str, pattern: str) -> None:
    table = generated(30_000, seed=2)
    rows = 0
    for window in ("", "WITHIN 20 seconds", "WITHIN 20 seconds SLIDE 5 seconds"):
        query = (f"RETURN g, COUNT(*), SUM(A.v), MAX(B.v), AVG(B.v) PATTERN {pattern} SEMANTICS {semantics} "
                 f"WHERE N.v > 2 GROUP-BY g {window}")
        compiled = cogra.evaluate(query, table, on_overflow="null")
        rows += compiled.num_rows
        assert_same_result(cogra.evaluate(query, table, compiled=False, on_overflow="null"), compiled, query)
    assert rows > 100


def compiled_against_python(query: str, table: pa.Table):
    """``(engine, result)`` of ``query`` with every window on the compiled kernels, checked
    equal to the Python executors' result."""
    from cogra.runtime.engine import Engine

    engine = Engine(cogra.plan(query, table.schema), table)
    got = engine.result_table(on_overflow="null")
    assert engine.stats["windows_fast"] == engine.stats["windows"] > 0
    assert_same_result(cogra.evaluate(query, table, compiled=False, on_overflow="null"), got, query)
    return engine, got


@pytest.mark.parametrize("semantics", SEMANTICS)
def test_the_mixed_grained_kernel_takes_the_cut_offs(semantics: str) -> None:
    # A predicate that reads the earlier event keeps A's events (mixed-grained kernel).
    table = generated(20_000, seed=5)
    rows = 0
    for pattern in ("SEQ(A+, B, NOT N)", "SEQ(NOT N, A+, B)", "SEQ(NOT X, A+, B, NOT N)"):
        for window in ("", "WITHIN 20 seconds", "WITHIN 20 seconds SLIDE 5 seconds"):
            query = (f"RETURN g, COUNT(*), SUM(A.v), MIN(B.v), AVG(B.v) PATTERN {pattern} "
                     f"SEMANTICS {semantics} WHERE A.v <= NEXT(A).v AND N.v > 2 GROUP-BY g {window}")
            engine, got = compiled_against_python(query, table)
            assert "fast_unsupported" not in engine.stats
            rows += got.num_rows
    assert rows > 100


@pytest.mark.parametrize("semantics", SEMANTICS)
def test_the_generated_kernels_take_the_cut_offs(semantics: str, generated_kernels, monkeypatch) -> None:
    # Each query shape's own kernel (normally from 32M events, or compiled in the
    # background for later calls) against the Python executors.
    from cogra.runtime.compiled.codegen import kernel_cache

    shapes = []
    real = kernel_cache.kernel_for
    monkeypatch.setattr(kernel_cache, "kernel_for", lambda shape: (shapes.append(shape), real(shape))[1])
    table = generated(20_000, seed=4)
    for pattern in ("SEQ(A+, B, NOT N)", "SEQ(NOT N, A, B+)", "SEQ(NOT X, A+, B, NOT N)"):
        for window in ("", "WITHIN 20 seconds", "WITHIN 20 seconds SLIDE 5 seconds"):
            query = (f"RETURN g, COUNT(*), SUM(A.v), MIN(B.v), AVG(B.v) PATTERN {pattern} "
                     f"SEMANTICS {semantics} WHERE N.v > 2 GROUP-BY g {window}")
            compiled_against_python(query, table)
            assert shapes and shapes[-1].absence == (pattern.startswith("SEQ(NOT"), pattern.endswith("NOT N)"))


@pytest.mark.parametrize("semantics", SEMANTICS)
def test_a_stream_in_batches_equals_the_batch(semantics: str) -> None:
    # A window's blockers may arrive in a later batch than its trends: the window is
    # decided when it closes.  Distinct times, so no event is late.
    rng = np.random.default_rng(3)
    n = 3000
    table = pa.table({"type": rng.choice(["A", "B", "N", "X"], n, p=[0.45, 0.3, 0.1, 0.15]),
                      "time": np.sort(rng.choice(np.arange(10 * n), n, replace=False)),
                      "v": rng.integers(1, 9, n)})
    for pattern in ("SEQ(A+, B, NOT N)", "SEQ(NOT N, A+, B)", "SEQ(NOT N, A, B+, NOT X)"):
        query = (f"RETURN COUNT(*), SUM(A.v), MAX(B.v) PATTERN {pattern} SEMANTICS {semantics} "
                 "WITHIN 100 seconds SLIDE 25 seconds")
        online = OnlineEvaluation(query, table.schema)
        parts = []
        for k in range(0, n, 211):
            online.push(table.slice(k, 211))
            parts.append(online.advance())
        parts.append(online.finish())
        got = pa.concat_tables(parts)
        want = cogra.evaluate(query, table)
        assert want.num_rows > 20
        assert sorted(map(str, got.to_pylist())) == sorted(map(str, want.to_pylist())), query
