"""Imported by the benchmark's fork server: import and exercise every contender once.

Each run is a child forked from that server, so it inherits loaded modules, parsed
grammar tables and numba code (compiled or loaded from the on-disk cache) instead of
paying for them again -- about a second per run otherwise.  The measured evaluation is
unaffected: the child still warms the contender up on its own data (see
:mod:`cogra.bench.runner`), and memory is measured as the increase during the call.
Failures are ignored here; they surface in the runs themselves.
"""

from __future__ import annotations

import warnings


def warm() -> None:
    from cogra import datasets

    warnings.simplefilter("ignore")
    stock = datasets.stock(200)
    transport = datasets.transport(200)
    activity = datasets.activity(200)
    from cogra.bench import experiments as ex

    cases = [(ex.Q_ANY, stock), (ex.Q_NEXT, transport), (ex.Q_CONT, activity),
             (ex.Q_SELECTIVITY.format(offset=0), stock), (ex.Q_GROUPS, transport),
             (ex.Q_SLIDING.format(slide=" SLIDE 1 second"), stock)]
    cases += [(t.format(aggs=ex.ALL_AGGREGATES), stock) for t in ex.KERNEL.values()]
    cases += [(q, stock) for q in ex.MEMORY.values()]
    import cogra
    from cogra.bench.runner import generated_kernels_always

    for q, table in cases:
        with generated_kernels_always():
            _try(lambda: cogra.evaluate(q, table, on_overflow="null"))
        _try(lambda: cogra.evaluate(q, table, on_overflow="null"))
        if ex.cogra_python_available():
            _try(lambda: cogra.evaluate(q, table, on_overflow="null", compiled=False))
    from cogra.baselines import aseq, greta
    from cogra.reference import evaluate_reference

    small = stock.slice(0, 40)
    for q in (ex.Q_ANY, ex.Q_SELECTIVITY.format(offset=0)):
        _try(lambda: greta.evaluate(q, small, on_overflow="null"))
        _try(lambda: aseq.evaluate(q, small, on_overflow="null"))
        _try(lambda: evaluate_reference(q, small, on_overflow="null"))


def _try(fn) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001 - see the module docstring
        pass


try:
    warm()
    from cogra.bench.runner import release_free_memory

    release_free_memory()
except Exception:  # noqa: BLE001
    pass
