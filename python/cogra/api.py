"""The public functions: parse, explain, evaluate, and what Spark's analyze step needs."""

from __future__ import annotations

import warnings
from typing import Any

import pyarrow as pa

from cogra.analysis.binding import BoundQuery, bind
from cogra.analysis.plan import Plan
from cogra.errors import CograDataWarning
from cogra.language.ast import Aggregate, AttrRef, Query
from cogra.runtime.engine import Engine
from cogra.runtime.output import ON_OVERFLOW, build_table, result_type, window_type


def parse(query: str | Query) -> Query:
    """Parse query text into its syntax tree (QueryError with line/column if it does not parse)."""
    if isinstance(query, Query):
        return query
    from cogra.language import parse as parse_text

    return parse_text(query)


def as_table(events: Any) -> pa.Table:
    if isinstance(events, pa.Table):
        return events
    if isinstance(events, pa.RecordBatch):
        return pa.Table.from_batches([events])
    return pa.table(events)


def plan(query: str | Query, schema: pa.Schema | None = None, *,
         type_column: str = "type", time_column: str = "time") -> Plan:
    q = parse(query)
    if schema is None:
        schema = assumed_schema(q, type_column, time_column)
    return Plan.of(bind(q, schema, type_column=type_column, time_column=time_column))


def explain(query: str | Query, schema: pa.Schema | None = None, *,
            type_column: str = "type", time_column: str = "time") -> str:
    """A readable plan: automaton, predicate classes, granularity per variable and why.

    Without a schema, every attribute the query names is assumed to exist (bare
    identifiers in WHERE are then string literals).
    """
    return plan(query, schema, type_column=type_column, time_column=time_column).explain()


def assumed_schema(q: Query, type_column: str, time_column: str) -> pa.Schema:
    """A schema with every attribute the query names, for explaining without data."""
    fields: dict[str, pa.DataType] = {time_column: pa.int64(), type_column: pa.string()}
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


def evaluate(
    query: str | Query,
    events: Any,
    *,
    type_column: str = "type",
    time_column: str = "time",
    on_overflow: str = "error",
    compiled: bool | None = None,
) -> pa.Table:
    """Evaluate a COGRA query over ``events`` (a pyarrow.Table or anything pa.table accepts).

    ``compiled``: None (default) uses the compiled kernels wherever they apply and the
    exact Python executors elsewhere; False forces the Python executors; True fails if
    the kernels do not apply.  All three give the same results.

    Output: the RETURN items in order, then ``window_start``/``window_end`` under WITHIN;
    one row per (window, group) with at least one finished trend.  The schema metadata
    carries how many rows were read and skipped (``cogra.rows_null_time``, ...).
    """
    if on_overflow not in ON_OVERFLOW:
        raise ValueError(f"on_overflow must be one of {ON_OVERFLOW}, not {on_overflow!r}")
    table = as_table(events)
    p = plan(query, table.schema, type_column=type_column, time_column=time_column)
    engine = Engine(p, table, fast=compiled)
    rows = engine.run()
    counters = engine.counters
    skipped = counters["rows_null_time"] + counters["rows_null_type"]
    if skipped:
        warnings.warn(
            f"{counters['rows_null_time']} row(s) with a NULL time and "
            f"{counters['rows_null_type']} with a NULL type are not events and were skipped",
            CograDataWarning,
            stacklevel=2,
        )
    return build_table(
        p.bound.query, table.schema, rows, time_type=p.bound.time_type, on_overflow=on_overflow,
        metadata={f"cogra.{k}": v for k, v in counters.items()},
    )


def result_schema(query: str | Query, input_schema: pa.Schema, *,
                  type_column: str = "type", time_column: str = "time") -> pa.Schema:
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


def partition_columns(query: str | Query) -> tuple[str, ...]:
    """The plain sub-stream keys: rows that differ in them never meet in a trend."""
    q = parse(query)
    keys: dict[str, None] = {}
    for ref in list(q.group_by) + [e.attribute for e in q.equivalences]:
        if ref.variable is None:
            keys[ref.name] = None
    return tuple(keys)
