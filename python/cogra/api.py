"""The public functions: parse, explain, evaluate, and what Spark's analyze step needs."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import sqlglot.expressions as exp

from cogra.analysis.binding import bind
from cogra.language.ast import Query, Semantics
from cogra.language.limits import with_recursion_room
from cogra.runtime.evaluation import (  # noqa: F401 - re-exported: the front door's names
    MAX_WINDOWS_PER_EVENT,
    as_table,
    assumed_schema,
    check_windows_per_event,
    evaluate_table,
    output_schema,
    parse,
    plan,
    result_schema,
)
from cogra.runtime.output import ON_OVERFLOW


@with_recursion_room
def explain(query: str | Query, schema: pa.Schema | None = None, *,
            type_column: str | None = None, time_column: str = "time") -> str:
    """A readable plan: automaton, predicate classes, granularity per variable and why,
    then the physical plan (:mod:`cogra.runtime.physical`: the window runs, the slots).

    Without a schema, every attribute the query names is assumed to exist (bare
    identifiers in WHERE are then string literals).
    """
    from cogra.runtime.physical import physical_plan

    p = plan(query, schema, type_column=type_column, time_column=time_column)
    return "\n".join([p.explain(), "", *physical_plan(p).lines()])


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
    exact Python executors elsewhere; False forces the Python executors; True raises a
    :class:`~cogra.errors.CograError` naming why where the kernels do not apply.  All
    three give the same results.

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
    from cogra.runtime.compiled.codegen.background import compiles_after_the_call

    with compiles_after_the_call():
        return evaluate_table(query, events, type_column, time_column, on_overflow, compiled, max_windows_per_event)


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
