"""The aggregate functions, one entry each: what attribute each takes and what it returns.

Binding reads :attr:`AggregateSpec.accepts` to check a RETURN item's attribute, and the
output's typing (:func:`cogra.runtime.output.result_type`) reads
:attr:`AggregateSpec.result_type`; both ask :func:`spec` rather than branching on the
function.  The parser knows the names (:class:`cogra.language.ast.AggFunc`) and that
COUNT alone takes ``*`` or a variable: a language fact, below this layer.

What each aggregate keeps while trends grow (its slots, their update and combination,
the kernels' operations) and how it is finished are the runtime's
(:mod:`cogra.runtime.aggregates`, :mod:`cogra.runtime.compiled.channels`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pyarrow as pa

from cogra.analysis.expressions import BOOLEAN, NUMBER, STRING, TEMPORAL
from cogra.language.ast import AggFunc

ORDERABLE = frozenset({NUMBER, STRING, TEMPORAL, BOOLEAN})


@dataclass(frozen=True)
class AggregateSpec:
    """One aggregate function's typing."""

    func: AggFunc
    accepts: frozenset[str]
    """The kinds of attribute it takes (binding's :func:`~cogra.analysis.binding.kind_of_type`);
    empty for COUNT, which takes none."""
    needs: str
    """What its attribute must be, as an error says it (``a numeric attribute``)."""
    result_type: Callable[[pa.DataType | None], pa.DataType | None]
    """Its output column's type from its attribute's (None for COUNT); None where the
    attribute's type has no result (an error, raised by the caller)."""


def _count(_source: pa.DataType | None) -> pa.DataType:
    return pa.int64()


def _extreme(source: pa.DataType | None) -> pa.DataType | None:
    # float16 comes back as float32: Arrow computes nothing in half precision.
    return pa.float32() if source is not None and pa.types.is_float16(source) else source


def _sum(source: pa.DataType | None) -> pa.DataType | None:
    if source is None:
        return None
    if pa.types.is_integer(source):
        return pa.int64()
    if pa.types.is_floating(source):
        return pa.float64()
    if pa.types.is_decimal(source):
        return pa.decimal128(min(38, source.precision + 10), source.scale)
    return None


def _average(_source: pa.DataType | None) -> pa.DataType:
    """AVG and the spreads (VAR_*, STDDEV_*): a double, as in Spark SQL."""
    return pa.float64()


AGGREGATES: dict[AggFunc, AggregateSpec] = {s.func: s for s in (
    AggregateSpec(AggFunc.COUNT, frozenset(), "no attribute", _count),
    AggregateSpec(AggFunc.MIN, ORDERABLE, "an orderable attribute", _extreme),
    AggregateSpec(AggFunc.MAX, ORDERABLE, "an orderable attribute", _extreme),
    AggregateSpec(AggFunc.SUM, frozenset({NUMBER}), "a numeric attribute", _sum),
    AggregateSpec(AggFunc.AVG, frozenset({NUMBER}), "a numeric attribute", _average),
    AggregateSpec(AggFunc.VAR_POP, frozenset({NUMBER}), "a numeric attribute", _average),
    AggregateSpec(AggFunc.VAR_SAMP, frozenset({NUMBER}), "a numeric attribute", _average),
    AggregateSpec(AggFunc.STDDEV_POP, frozenset({NUMBER}), "a numeric attribute", _average),
    AggregateSpec(AggFunc.STDDEV_SAMP, frozenset({NUMBER}), "a numeric attribute", _average),
)}
"""Every aggregate function (one entry per :class:`~cogra.language.ast.AggFunc`)."""


def spec(func: AggFunc) -> AggregateSpec:
    """The entry of ``func``."""
    return AGGREGATES[func]


__all__ = ["AGGREGATES", "AggregateSpec", "ORDERABLE", "spec"]
