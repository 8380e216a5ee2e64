"""cogra: coarse-grained event trend aggregation (COGRA) for Apache Spark.

The public surface is small: :func:`parse` a query, :func:`explain` its plan, and
:func:`evaluate` it over a pyarrow table.  Spark integration lives in ``cogra.spark``.
"""

__version__ = "0.1.0"

from cogra.runtime.caches import ensure_numba_cache  # noqa: E402

ensure_numba_cache()  # before any kernel module is imported (numba reads it then)

from cogra.api import (  # noqa: E402
    MAX_WINDOWS_PER_EVENT,
    evaluate,
    explain,
    parse,
    partition_columns,
    plan,
    pushdown,
    result_schema,
)
from cogra.errors import (  # noqa: E402
    AggregateOverflowError,
    CheckpointError,
    CograDataWarning,
    CograError,
    CograPerformanceWarning,
    DataError,
    QueryError,
)
from cogra.runtime import warm_start  # noqa: E402

_LAZY = {"OnlineEvaluation": "cogra.runtime.online", "evaluate_batches": "cogra.runtime.online"}
"""Names whose modules import the engine and the kernels' modules (numba: ~0.6 s), which a
process that only plans -- a Spark driver's UDTF analysis, a Python worker without the
warm start -- never needs: imported on first use there, at once elsewhere.  Why not on
first use everywhere: left to the warm start's thread, the import landed on the first
call of a script that loads its data in under a second (0.15 s later over 3M events)."""

if warm_start.wanted():
    from cogra.runtime.online import OnlineEvaluation, evaluate_batches  # noqa: E402


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'cogra' has no attribute {name!r}")


warm_start.start()  # numba and the shipped kernels made ready while the caller loads data

__all__ = [
    "MAX_WINDOWS_PER_EVENT",
    "AggregateOverflowError",
    "CheckpointError",
    "CograDataWarning",
    "CograPerformanceWarning",
    "CograError",
    "DataError",
    "OnlineEvaluation",
    "QueryError",
    "evaluate",
    "evaluate_batches",
    "explain",
    "parse",
    "partition_columns",
    "plan",
    "pushdown",
    "result_schema",
]
