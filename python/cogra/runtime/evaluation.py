"""Evaluating a query over a table, below the front door (:mod:`cogra.api`, which
re-exports these): parsing and planning once per text and schema, the output schema, the
windows-per-event limit, a stream's need of WITHIN, and one evaluation through the engine
(imported on the first evaluation: a process that only plans, as a Spark driver's UDTF
analysis, never loads the kernels' modules).  The streaming evaluator
(:mod:`cogra.runtime.online`) and the time slices (:mod:`cogra.runtime.slices`) use them
from here, so nothing below the front door imports it."""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from cogra.analysis.binding import DEFAULT_TYPE_COLUMN, BoundQuery, bind
from cogra.analysis.plan import Plan
from cogra.errors import CograDataWarning, DataError, QueryError
from cogra.language.ast import Aggregate, AttrRef, Query
from cogra.language.limits import with_recursion_room
from cogra.runtime.output import result_type, window_type


MAX_WINDOWS_PER_EVENT = 100_000
"""The default of ``max_windows_per_event`` (Spark: ``spark.cogra.maxWindowsPerEvent``)."""


def require_window(q: Query) -> None:
    """A streamed query needs WITHIN (docs/language.md, Streams)."""
    if q.window is None:
        raise QueryError("a streaming query needs WITHIN: without it its one window never "
                         "closes, and nothing could ever be emitted", q.text, q.pattern.span)


def check_windows_per_event(q: Query, limit: int) -> None:
    """Refuse a query whose windows overlap more than ``limit`` deep (size / slide)."""
    if q.window is None:
        return
    per_event = math.ceil(q.window.size / q.window.step)
    if per_event > limit:
        slide = q.window.slide
        raise DataError(
            f"WITHIN {q.window.within.amount} {q.window.within.unit}"
            + (f" SLIDE {slide.amount} {slide.unit}" if slide else "")
            + f" puts every event in {per_event:,} windows, more than the limit of "
            f"{limit:,}: slide by more, or raise the limit (cogra.evaluate(..., "
            "max_windows_per_event=N); Spark: SET spark.cogra.maxWindowsPerEvent=N)")


def parse(query: str | Query) -> Query:
    """Parse query text into its syntax tree (QueryError with line/column if it does not parse)."""
    if isinstance(query, Query):
        return query
    return _parse_text(query)


@functools.lru_cache(maxsize=256)
def _parse_text(query: str) -> Query:
    """Parsed once per text: a Spark worker evaluates the same query for every partition
    and chunk (q2 as printed: 16 parses per 1M rows, 5% of the worker's time).  Sharing the
    tree is safe -- its nodes are frozen, and whoever rewrites a condition's sqlglot
    expression copies it first (``binding``, ``pushdown``); a text that does not parse
    raises each time (exceptions are not cached)."""
    from cogra.language import parse as parse_text

    return parse_text(query)


def as_table(events: Any) -> pa.Table:
    if isinstance(events, pa.Table):
        return events
    if isinstance(events, pa.RecordBatch):
        return pa.Table.from_batches([events])
    return pa.table(events)


@with_recursion_room
def plan(query: str | Query, schema: pa.Schema | None = None, *,
         type_column: str | None = None, time_column: str = "time") -> Plan:
    if schema is not None:
        return _plan_of(query, schema.remove_metadata(), type_column, time_column)
    q = parse(query)
    if schema is None:
        schema = assumed_schema(q, type_column, time_column)
    return Plan.of(bind(q, schema, type_column=type_column, time_column=time_column))


@functools.lru_cache(maxsize=256)
def _plan_of(query: str | Query, schema: pa.Schema, type_column: str | None, time_column: str) -> Plan:
    """Bound and planned once per (query, schema, columns), as parsed once per text: a
    Spark worker evaluates one query per key group or chunk, and binding it (sqlglot
    rewrites of the conditions) cost ~0.4 ms a call -- 2% of a q3 sector's evaluation.  A
    syntax tree is a key too (frozen, hashed by value: ~10 us).  The plan is frozen and
    nothing downstream rewrites its expressions in place (see _parse_text); a query that
    does not bind raises each time."""
    q = parse(query)
    return Plan.of(bind(q, schema, type_column=type_column, time_column=time_column))


def assumed_schema(q: Query, type_column: str | None, time_column: str) -> pa.Schema:
    """A schema with every attribute the query names, for explaining without data."""
    fields: dict[str, pa.DataType] = {time_column: pa.int64(),
                                      type_column or DEFAULT_TYPE_COLUMN: pa.string()}
    for ref in list(q.group_by) + [e.attribute for e in q.equivalences]:
        fields.setdefault(ref.name, pa.string())
    for item in q.returns:
        if isinstance(item.value, AttrRef):
            fields.setdefault(item.value.name, pa.string())
        elif isinstance(item.value, Aggregate) and item.value.attribute:
            fields.setdefault(item.value.attribute, pa.float64())
    for c in q.conditions:
        for r in c.references:
            if r.variable is not None:
                fields.setdefault(r.attribute, pa.null())
    return pa.schema(list(fields.items()))


def evaluate_table(query: str | Query, events: Any, type_column: str | None, time_column: str, on_overflow: str,
                   compiled: bool | None, max_windows_per_event: int) -> pa.Table:
    """:func:`cogra.evaluate` once the call counts as running (its data warnings name the
    caller of ``cogra.evaluate``: two frames up)."""
    table = typed_nulls(as_table(events), type_column, time_column)
    p = plan(query, table.schema, type_column=type_column, time_column=time_column)
    check_windows_per_event(p.bound.query, max_windows_per_event)
    from cogra.runtime.engine import Engine  # (the kernels' modules: not for a process that only plans)

    engine = Engine(p, table, compiled=compiled)
    counters = engine.counters
    skipped = counters["rows_null_time"] + counters["rows_null_type"]
    if skipped:
        warnings.warn(
            f"{counters['rows_null_time']} row(s) with a NULL time and "
            f"{counters['rows_null_type']} with a NULL type are not events and were skipped",
            CograDataWarning,
            stacklevel=3,
        )
    if engine.absent_types:
        types = pa.compute.unique(engine.table.column(engine.bound.type_column)).to_pylist()
        shown = ", ".join(repr(t) for t in sorted(types)[:20]) + (", ..." if len(types) > 20 else "")
        warnings.warn(
            f"no row has the pattern's type {', '.join(repr(t) for t in engine.absent_types)}: "
            f"the input's types are {shown}",
            CograDataWarning,
            stacklevel=3,
        )
    return engine.result_table(on_overflow=on_overflow,
                               metadata={f"cogra.{k}": v for k, v in counters.items()})


def typed_nulls(table: pa.Table, type_column: str | None, time_column: str) -> pa.Table:
    """``table`` with a type or time column of Arrow's null type (what pyarrow infers for a
    column of no value but NULL, an empty one included) cast to string or int64: every row
    has a NULL type or time, so none is an event -- as for any other column type -- and the
    result is that of no events, not an error about the column's type."""
    for name, typ in ((type_column or DEFAULT_TYPE_COLUMN, pa.string()), (time_column, pa.int64())):
        i = table.schema.get_field_index(name)
        if i >= 0 and pa.types.is_null(table.schema.field(i).type):
            table = table.set_column(i, pa.field(name, typ), table.column(i).cast(typ))
    return table


@with_recursion_room
def result_schema(query: str | Query, input_schema: pa.Schema, *,
                  type_column: str | None = None, time_column: str = "time") -> pa.Schema:
    """The output schema, without data (what Spark's analyze step reports)."""
    bound = bind(parse(query), input_schema, type_column=type_column, time_column=time_column)
    return output_schema(bound)


def output_schema(bound: BoundQuery) -> pa.Schema:
    q = bound.query
    fields = [pa.field(item.name, result_type(item, bound.schema)) for item in q.returns]
    if q.window is not None:
        wt = window_type(q, bound.time_type)
        fields += [pa.field("window_start", wt), pa.field("window_end", wt)]
    return pa.schema(fields)


__all__ = ["MAX_WINDOWS_PER_EVENT", "as_table", "assumed_schema", "check_windows_per_event", "evaluate_table",
           "output_schema", "parse", "plan", "require_window", "result_schema", "typed_nulls"]
