"""Compare two result tables: same schema, same rows; floats to a relative 1e-9."""

from __future__ import annotations

import math

import pyarrow as pa


def _close(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def assert_same_result(got: pa.Table, want: pa.Table, context: str = "") -> None:
    assert got.schema.names == want.schema.names, f"columns differ {context}"
    assert [f.type for f in got.schema] == [f.type for f in want.schema], (
        f"types differ: {got.schema} vs {want.schema} {context}")
    g, w = got.to_pylist(), want.to_pylist()
    assert len(g) == len(w), f"{len(g)} rows vs {len(w)} expected {context}\n got={g}\n want={w}"
    for i, (rg, rw) in enumerate(zip(g, w)):
        for col in rg:
            assert _close(rg[col], rw[col]), (
                f"row {i} column {col}: {rg[col]!r} != {rw[col]!r} {context}\n got={g}\n want={w}")


def assert_compiled_equals_reference(query: str, table: pa.Table) -> pa.Table:
    """The compiled result (every window decided by the kernels, none re-run exactly)
    equals the two-step reference's; returns it."""
    import warnings

    import cogra
    from cogra.reference import evaluate_reference
    from cogra.runtime.engine import Engine

    engine = Engine(cogra.plan(query, table.schema), table)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        got = engine.result_table(on_overflow="null")
        assert_same_result(got, evaluate_reference(query, table, on_overflow="null"), context=query)
    assert engine.stats["windows_fast"] > 0 and engine.stats["windows_exact"] == 0, engine.stats
    return got
