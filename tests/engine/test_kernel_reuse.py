"""Generated kernels are reused for small inputs once compiled (codegen.is_compiled).

Compiling a shape's kernel costs seconds, so only large inputs compile one; but a Spark
worker evaluates 131k-row chunks of a large query, and a kernel compiled by an earlier
large run (in this process, or found in numba's disk cache) costs nothing to reuse.
"""

from __future__ import annotations

import pytest

import cogra
from cogra.datasets import stock
from cogra.runtime.fast import codegen, executor
from tests.compare import assert_same_result
from tests.engine.test_sliding import forced

SLIDING = ("RETURN company, COUNT(*), SUM(S.volume) PATTERN Stock S+ SEMANTICS skip-till-next-match "
           "WHERE [company] "
           "GROUP-BY company WITHIN 60 seconds SLIDE 5 seconds")
TUMBLING = SLIDING.replace(" SLIDE 5 seconds", "")


@pytest.fixture
def reuse(monkeypatch):
    monkeypatch.setattr(codegen, "REUSE_COMPILED", True)


def test_small_input_reuses_a_compiled_sliding_kernel(reuse, monkeypatch, generated_kernels) -> None:
    from cogra.runtime.fast import sliding

    shapes = []
    real_sliding_for = codegen.sliding_for
    monkeypatch.setattr(codegen, "sliding_for", lambda shape: shapes.append(shape) or real_sliding_for(shape))
    with forced() as generic:  # pane sharing whatever the events per window
        cogra.evaluate(SLIDING, stock(3000, rate=20.0))  # thresholds lowered: compiles it
        assert shapes and not generic
        monkeypatch.setattr(sliding, "SPECIALIZE_MIN_EVENTS", 10**9)  # no size qualifies any more
        small = stock(2000, rate=20.0, seed=5)
        got = cogra.evaluate(SLIDING, small)
        assert len(shapes) == 2 and not generic  # the compiled generated kernel ran again
        assert_same_result(got, cogra.evaluate(SLIDING, small, compiled=False))
        monkeypatch.setattr(codegen, "REUSE_COMPILED", False)
        cogra.evaluate(SLIDING, small)
        assert len(shapes) == 2 and generic  # without reuse, small inputs keep the generic kernel


def test_small_input_reuses_a_compiled_window_kernel(reuse, monkeypatch, generated_kernels) -> None:
    shapes = []
    real_kernel_for = codegen.kernel_for
    monkeypatch.setattr(codegen, "kernel_for", lambda shape: shapes.append(shape) or real_kernel_for(shape))
    cogra.evaluate(TUMBLING, stock(3000, rate=20.0))  # thresholds lowered: compiles it
    assert shapes and codegen.is_compiled(shapes[0], "kernel")
    monkeypatch.setattr(executor, "SPECIALIZE_MIN_EVENTS", 10**9)  # no size qualifies any more
    shapes.clear()
    small = stock(2000, rate=20.0, seed=5)
    got = cogra.evaluate(TUMBLING, small)
    assert shapes  # the generated kernel was used
    assert_same_result(got, cogra.evaluate(TUMBLING, small, compiled=False))
    monkeypatch.setattr(codegen, "REUSE_COMPILED", False)
    assert not codegen.is_compiled(shapes[0], "kernel")
    shapes.clear()
    cogra.evaluate(TUMBLING, small)
    assert not shapes
