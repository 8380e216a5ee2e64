"""Property tests: every executor equals the two-step reference on random queries.

Each example draws a random query (pattern, semantics, predicates, grouping, window,
aggregates) and a small random stream (ties, irrelevant types, NULLs), and checks that
``cogra.evaluate`` returns exactly what the literal enumeration returns.  The default
profile runs a few thousand cases in CI; ``-m slow`` runs many more.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings

import cogra
from cogra.reference import evaluate_reference
from tests.compare import assert_same_result
from tests.strategies import cases

COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check(q, table, *, every_shape_compiled: bool = True) -> None:
    """Both engine paths (compiled where it applies, and pure Python) equal the reference;
    ``every_shape_compiled``: the compiled kernels take the query (every shape the generator
    draws: no ``CograPerformanceWarning``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        want = evaluate_reference(q.text, table, on_overflow="null")
        for compiled in (None, False):
            with warnings.catch_warnings(record=True) as slow:
                warnings.simplefilter("always", cogra.CograPerformanceWarning)
                got = cogra.evaluate(q.text, table, on_overflow="null", compiled=compiled)
            reasons = [str(w.message) for w in slow if issubclass(w.category, cogra.CograPerformanceWarning)]
            if compiled is None and every_shape_compiled:
                assert not reasons, reasons
            assert_same_result(got, want, context=f"\ncompiled={compiled}\nquery:\n{q.text}\n"
                               f"stream:\n{table.to_pylist()}")


@settings(max_examples=1500, **COMMON)
@given(case=cases())
def test_engine_equals_reference(case) -> None:
    check(*case)


@settings(max_examples=500, **COMMON)
@given(case=cases(windows=False, grouping=False, max_events=12))
def test_engine_equals_reference_one_window(case) -> None:
    check(*case)


@settings(max_examples=500, **COMMON)
@given(case=cases(nan=True))
def test_engine_equals_reference_with_nan(case) -> None:
    """NaN in conditions (Spark's order), MIN/MAX, SUM and AVG (a NaN compared with the
    earlier event keeps the query on the Python executors)."""
    check(*case, every_shape_compiled=False)


@pytest.mark.slow
@settings(max_examples=20000, **COMMON)
@given(case=cases(max_events=12))
def test_engine_equals_reference_many(case) -> None:
    check(*case)


@settings(max_examples=25, **COMMON)
@given(case=cases(max_events=12))
def test_generated_kernels_equal_reference(case, generated_kernels) -> None:
    """The per-shape generated kernels (normally only for large inputs) on small cases."""
    check(*case)


@pytest.mark.slow
@settings(max_examples=400, **COMMON)
@given(case=cases(max_events=12))
def test_generated_kernels_equal_reference_many(case, generated_kernels) -> None:
    check(*case)

