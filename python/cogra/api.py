"""The public functions: parse, explain, evaluate, and what Spark's analyze step needs."""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import sqlglot.expressions as exp

from cogra.analysis.binding import DEFAULT_TYPE_COLUMN, BoundQuery, bind
from cogra.analysis.plan import Plan
from cogra.errors import CograDataWarning, DataError
from cogra.language.ast import Aggregate, AttrRef, Query, Semantics
from cogra.language.limits import with_recursion_room
from cogra.runtime.compiled.codegen.background import compiles_after_the_call
from cogra.runtime.engine import Engine
from cogra.runtime.output import ON_OVERFLOW, result_type, window_type


MAX_WINDOWS_PER_EVENT = 100_000
"""The default of ``max_windows_per_event`` (Spark: ``spark.cogra.maxWindowsPerEvent``)."""


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


@with_recursion_room
def explain(query: str | Query, schema: pa.Schema | None = None, *,
            type_column: str | None = None, time_column: str = "time") -> str:
    """A readable plan: automaton, predicate classes, granularity per variable and why.

    Without a schema, every attribute the query names is assumed to exist (bare
    identifiers in WHERE are then string literals).
    """
    return plan(query, schema, type_column=type_column, time_column=time_column).explain()


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


@with_recursion_room
def evaluate(
    query: str | Query,
    events: Any,
    *,
    type_column: str | None = None,
    time_column: str = "time",
    on_overflow: str = "error",
    compiled: bool | None = None,
    max_windows_per_event: int = MAX_WINDOWS_PER_EVENT,
) -> pa.Table:
    """Evaluate a COGRA query over ``events`` (a pyarrow.Table or anything pa.table accepts).

    ``compiled``: None (default) uses the compiled kernels wherever they apply and the
    exact Python executors elsewhere; False forces the Python executors; True fails if
    the kernels do not apply.  All three give the same results.

    ``max_windows_per_event``: a query whose WITHIN / SLIDE put an event in more windows
    is refused (:class:`~cogra.errors.DataError`) before any work: one event under
    ``WITHIN 1 hour SLIDE 1 ms`` is 3.6M windows.

    Output: the RETURN items in order, then ``window_start``/``window_end`` under WITHIN;
    one row per (window, group) with at least one finished trend.  The schema metadata
    carries how many rows were read and skipped (``cogra.rows_null_time``, ...).
    """
    if on_overflow not in ON_OVERFLOW:
        raise ValueError(f"on_overflow must be one of {ON_OVERFLOW}, not {on_overflow!r}")
    # The whole call counts as running from here (analysis and row preparation included):
    # the warm start holds back kernels no call asked for, background compiles pause.
    with compiles_after_the_call():
        return _evaluate(query, events, type_column, time_column, on_overflow, compiled, max_windows_per_event)


def _evaluate(query: str | Query, events: Any, type_column: str | None, time_column: str, on_overflow: str,
              compiled: bool | None, max_windows_per_event: int) -> pa.Table:
    table = as_table(events)
    p = plan(query, table.schema, type_column=type_column, time_column=time_column)
    check_windows_per_event(p.bound.query, max_windows_per_event)
    engine = Engine(p, table, fast=compiled)
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


def partition_columns(query: str | Query) -> tuple[str, ...]:
    """Columns to distribute the input by: the plain GROUP-BY attributes.

    Rows that differ in them never meet in a trend nor in an output row.  (``[attr]``
    keys not in GROUP-BY also separate trends, but their sub-streams merge into one
    output row, so they must stay together.)
    """
    q = parse(query)
    return tuple(dict.fromkeys(ref.name for ref in q.group_by if ref.variable is None))


_PUSHABLE = (
    exp.Column, exp.Identifier, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.Not, exp.And, exp.Or,
    exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In, exp.Between, exp.Is, exp.Neg,
)


def _spark_predicate(expr: exp.Expression) -> str | None:
    """A bound local predicate as Spark SQL over input columns that holds for every row
    the predicate holds for (the engine re-applies every predicate), or None if there is
    no such filter to push.

    Spark must read the filter as the engine reads the predicate, under every setting:
    * arithmetic is not pushed: Spark's ANSI mode raises on division by zero or overflow
      where cogra yields NULL;
    * a string literal holding a quote or a backslash is not pushed: Spark reads its
      escapes one way or the other (``spark.sql.parser.escapedStringLiterals``).
    NaN needs nothing: the engine orders it as Spark does (``expressions.compare``).
    """
    if any(not isinstance(node, _PUSHABLE) for node in expr.walk()):
        return None
    if any(node.is_string and ("'" in node.this or "\\" in node.this)
           for node in expr.find_all(exp.Literal)):
        return None

    def to_input(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column):
            return exp.column(exp.to_identifier(node.name, quoted=True))
        return node

    return expr.copy().transform(to_input).sql(dialect="spark")


@with_recursion_room
def pushdown(query: str | Query, input_schema: pa.Schema, *, type_column: str | None = None,
             time_column: str = "time") -> tuple[tuple[str, ...], str | None]:
    """What a scan below MATCH_TREND may skip: the columns the query reads, and a Spark
    SQL filter that holds for every row that can affect the result (None: keep all).

    A row matters if it may play some variable (its type, and that variable's pushable
    local predicates), if it may block a ``NOT N`` (N's type and pushable local
    predicates), if its type is NULL (it is counted and reported), and under
    ``contiguous`` if its type is not in the pattern (it breaks trends).
    """
    bound = bind(parse(query), input_schema, type_column=type_column, time_column=time_column)
    tcol = exp.column(exp.to_identifier(bound.type_column, quoted=True)).sql(dialect="spark") \
        if bound.type_column else None
    alternatives: list[str] = []
    players = list(zip(bound.automaton.event_types, bound.local))
    players += [(n.event_type, n.local) for n in bound.negations]
    for event_type, local in players:
        parts = [f"{tcol} = {exp.Literal.string(event_type).sql(dialect='spark')}"] if tcol else []
        parts += [p for p in (_spark_predicate(e) for e in local) if p is not None]
        if not parts:
            return bound.columns_used, None  # this variable accepts every row
        alternatives.append(" AND ".join(f"({p})" for p in parts))
    if tcol:
        alternatives.append(f"{tcol} IS NULL")
        if bound.query.semantics is Semantics.CONT:
            types = ", ".join(exp.Literal.string(t).sql(dialect="spark") for t in sorted(set(bound.automaton.event_types)))
            alternatives.append(f"{tcol} NOT IN ({types})")
    return bound.columns_used, " OR ".join(f"({a})" for a in dict.fromkeys(alternatives))
