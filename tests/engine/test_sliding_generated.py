"""The sliding-window sharing kernel generated per query shape (kernel_cache.sliding_for).

Large inputs run ``run_sliding`` with its pane update and map application generated for
the query's shape; it must return exactly what the generic sharing kernel, the
per-window kernel and the two-step reference return.  Each shape compiles once (a few
seconds), so the queries are fixed and the streams random.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from cogra.runtime.compiled.codegen import kernel_cache
from cogra.runtime.compiled.codegen import window_kernel
from tests.engine.test_sliding import shared_equals_direct
from tests.strategies import streams

QUERIES = [
    "RETURN COUNT(*), SUM(A.v), AVG(A.w), MIN(A.w), MAX(A.v) PATTERN A+ WITHIN 6 seconds SLIDE 1 second",
    "RETURN g, COUNT(*), MAX(B.w), SUM(B.v) PATTERN SEQ(A+, B) SEMANTICS skip-till-next-match "
    "GROUP-BY g WITHIN 6 seconds SLIDE 2 seconds",
    "RETURN COUNT(*), MIN(A.v), AVG(B.w) PATTERN SEQ(A, B+) SEMANTICS contiguous "
    "WHERE A.v < NEXT(B).v WITHIN 4 seconds SLIDE 1 second",
    # Under any the generated functions drop the finished row of maps and states (only
    # the emitted window adds its final variables' rows): two variables, one not final.
    "RETURN g, COUNT(*), SUM(A.v), MIN(B.w), AVG(B.v) PATTERN SEQ(A+, B+) "
    "GROUP-BY g WITHIN 6 seconds SLIDE 2 seconds",
]


@pytest.fixture
def counted_generated(monkeypatch):
    """Counts the calls of the generated sharing kernels."""
    calls = []
    real = kernel_cache.sliding_for

    def counting(shape):
        kernel = real(shape)

        def run(*args):
            calls.append(1)
            return kernel(*args)
        return run

    monkeypatch.setattr(kernel_cache, "sliding_for", counting)
    return calls


@pytest.mark.parametrize("query", QUERIES)
def test_generated_sharing_runs(query, generated_kernels, counted_generated) -> None:
    table = pa.table({"type": ["A", "B", "A", "B", "A"], "time": pa.array([0, 1, 2, 3, 5], pa.int64()),
                      "v": [1, 2, 3, 4, 5], "w": [0.5, 1.5, -2.0, 3.0, 1.0], "g": [0, 0, 1, 0, 0]})
    shared_equals_direct(query, table)
    assert counted_generated


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=120, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(table=streams(max_events=14, types=("A", "B")))
def test_generated_sharing_equals_direct_and_reference(query, table, generated_kernels) -> None:
    shared_equals_direct(query, table)


@pytest.mark.parametrize("query, derived", [
    ("RETURN COUNT(*) PATTERN A+", True),
    ("RETURN COUNT(*), MIN(A.w) PATTERN A+ WHERE A.v > 1", True),  # a filter, not a pair predicate
    ("RETURN COUNT(*) PATTERN A", False),  # no Kleene: a trend is one event
    ("RETURN COUNT(*) PATTERN SEQ(A+, B)", False),
    ("RETURN COUNT(*) PATTERN A+ SEMANTICS skip-till-next-match", False),
    ("RETURN COUNT(*) PATTERN A+ SEMANTICS contiguous", False),
])
def test_linear_response_derived_only_for_one_kleene_variable_under_any(query, derived) -> None:
    # The generated pane map derives L_0 = T0 + one trend only where that identity holds:
    # one variable that every event playing it starts and extends, under any.
    import cogra
    from cogra.runtime.engine import Engine
    from cogra.runtime.compiled.kernel_driver import KernelDriver

    table = pa.table({"type": ["A", "B"], "time": pa.array([0, 1], pa.int64()), "v": [1, 2], "w": [0.5, 1.5]})
    engine = Engine(cogra.plan(query + " WITHIN 6 seconds SLIDE 1 second", table.schema), table)
    shape = KernelDriver(engine, subs=engine.substreams()).shape()
    assert window_kernel.one_kleene_variable_under_any(shape) is derived


def test_unread_parameters_are_pruned_from_definitions_and_calls() -> None:
    # window_kernel._prune_parameters: ``inner`` never reads ``b``; once that is dropped,
    # ``outer`` only passed ``b`` on and loses it too; ``keep`` reads all of its own.
    text = ("def inner(a, b, c):\n    return a + c\n\n"
            "def outer(a, b):\n    return inner(a, b, 1) + keep(a)\n\n"
            "def keep(a):\n    return a\n\n"
            "def run(x, y):\n    return outer(x, y) + inner(x, y * 2, 3)\n")
    pruned = window_kernel._prune_parameters(text, ["inner", "outer", "keep"])
    namespace: dict = {}
    exec(pruned, namespace)
    assert "def inner(a, c):" in pruned and "def outer(a):" in pruned and "def keep(a):" in pruned
    assert "outer(x) + inner(x, 3)" in pruned and "inner(a, 1)" in pruned
    assert namespace["run"](5, 7) == (5 + 1 + 5) + (5 + 3)
