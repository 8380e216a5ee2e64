"""``MATCH_TREND``'s analysis on the driver: what Spark's analyzer asks of the call before
any job (:func:`analyze_call`, run by :meth:`cogra.spark.udtf.MatchTrendUDTF.analyze`).

It fixes the output schema without reading data, so a query that does not parse or names
a missing column fails at analysis with cogra's message (line, column and a caret); it
asks Spark to partition the TABLE argument by the query's plain keys and order it by
time, and selects only the columns the query reads plus a filter every usable row passes
(:func:`cogra.pushdown`), so the scan below reads less.  The result
(:class:`CograAnalyzeResult`) travels, pickled, to every task.  It imports no kernel
module: a Spark driver's analysis worker only plans.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa
from pyspark.errors import PySparkValueError
from pyspark.sql.types import StructField, StructType
from pyspark.sql.udtf import (
    AnalyzeArgument,
    AnalyzeResult,
    OrderingColumn,
    PartitioningColumn,
    SelectedColumn,
)

import cogra
from cogra.errors import CograError

FUNCTION_NAME = "MATCH_TREND"
#: Alias of the pushed-down row filter among the selected input columns; the shim turns it
#: into a Filter below the scan's projection, the plain UDTF route filters rows with it.
FILTER_ALIAS = "__cogra_filter__"
#: Prefix of the columns the shim adds for a user's ``PARTITION BY`` expressions.
KEY_PREFIX = "__cogra_pk_"
#: Alias of the event-time column a streaming call selects for Spark's watermark.
EVENT_TIME_ALIAS = "__cogra_event_time"
#: Alias of the query's identity a streaming call selects (the shim stores it with the state).
IDENTITY_ALIAS = "__cogra_identity__"

USAGE = (
    f"{FUNCTION_NAME}(TABLE(t), 'RETURN ... PATTERN ...' "
    "[, type_column => 'type'] [, time_column => 'time'] [, watermark => '30 seconds'])"
)


def analysis_error(message: str) -> PySparkValueError:
    """An error for ``analyze`` to raise: Spark's analyzer keeps the text after
    ``PySparkValueError:``, so the user sees cogra's message without a Python traceback."""
    return PySparkValueError(message=message)


@dataclass
class CograAnalyzeResult(AnalyzeResult):
    """What ``analyze`` decided, handed (pickled) to every task that evaluates the call."""

    query: str = ""
    type_column: str | None = None
    time_column: str = "time"
    #: Plain sub-stream keys the input is partitioned by (input column names).
    key_columns: tuple[str, ...] = ()
    #: Input columns the evaluation reads, in the order they are selected.
    input_columns: tuple[str, ...] = ()
    #: SQL predicate every row the query can use satisfies, or None.
    filter_sql: str | None = None
    #: How late a streamed event may arrive (``watermark => '30 seconds'``), or None.
    watermark: str | None = None
    #: The selected input columns' Arrow schema (serialized).
    input_schema: bytes = b""


# ---------------------------------------------------------------------------
# analyze
# ---------------------------------------------------------------------------


def sql_string(text: str) -> str:
    """A Spark SQL expression for the string ``text`` that every parser setting reads the
    same: its UTF-8 bytes in hex, cast to a string.  A quoted literal is read one way or
    the other by ``spark.sql.parser.escapedStringLiterals`` (so are SQL parameters, which
    Spark renders back into quoted text), and a query may hold quotes and backslashes."""
    return f"CAST(X'{text.encode('utf-8').hex().upper()}' AS STRING)"


def quote_identifier(name: str) -> str:
    """A Spark SQL identifier for a column name (backticks, doubled inside)."""
    return "`" + name.replace("`", "``") + "`"


def _string_argument(arg: AnalyzeArgument | None, what: str, default: str | None,
                     required: bool = False) -> str | None:
    if arg is None:
        if required:
            raise analysis_error(f"{FUNCTION_NAME} needs {what}: {USAGE}")
        return default
    if arg.isTable:
        raise analysis_error(f"{FUNCTION_NAME}: {what} must be a string, not a TABLE: {USAGE}")
    if not arg.isConstantExpression or not isinstance(arg.value, str):
        raise analysis_error(
            f"{FUNCTION_NAME}: {what} must be a constant string (got {arg.dataType.simpleString()}"
            f"{'' if arg.isConstantExpression else ' expression'}): {USAGE}"
        )
    return arg.value


def _arrow_schema(struct: StructType) -> pa.Schema:
    """The Arrow schema Spark will send for the TABLE argument (columns it cannot send as
    Arrow are left out, so a query that names one reports it as missing)."""
    from pyspark.sql.pandas.types import to_arrow_type

    fields = []
    for f in struct.fields:
        try:
            fields.append(pa.field(f.name, to_arrow_type(f.dataType, timezone="UTC"), f.nullable))
        except Exception:  # noqa: BLE001 - e.g. intervals/variant: not a COGRA attribute type
            continue
    return pa.schema(fields)


def _spark_schema(schema: pa.Schema) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_type

    return StructType(
        [StructField(f.name, from_arrow_type(f.type, prefer_timestamp_ntz=True), True) for f in schema]
    )


def _resolve(name: str, columns: Sequence[str]) -> str:
    """The input column a query attribute names: exact match, else a unique case-insensitive one."""
    if name in columns:
        return name
    folded = [c for c in columns if c.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else name


def plain_group_keys(query: str) -> tuple[str, ...]:
    """Keys the input can be partitioned by without splitting an output group.

    These are the plain sub-stream keys (:func:`cogra.partition_columns`: rows that differ in
    them never meet in a trend) that are also unqualified GROUP-BY attributes: a key that is
    only an equivalence ``[attr]`` separates sub-streams whose results still merge into one
    output row, so partitioning by it would split that row.
    """
    q = cogra.parse(query)
    grouped = {ref.name for ref in q.group_by if ref.variable is None}
    return tuple(k for k in cogra.partition_columns(q) if k in grouped)


def pushdown(query: str, schema: pa.Schema, type_column: str | None, time_column: str
             ) -> tuple[tuple[str, ...], str | None]:
    """(input columns the query reads, SQL filter every usable row passes, or None).

    From :func:`cogra.pushdown` when the engine has it; otherwise the bound query's
    ``columns_used`` (projection only, no filter).
    """
    fn = getattr(cogra, "pushdown", None)
    if fn is not None:
        columns, filter_sql = fn(query, schema, type_column=type_column, time_column=time_column)
        return tuple(columns), filter_sql or None
    from cogra.analysis.binding import bind

    bound = bind(cogra.parse(query), schema, type_column=type_column, time_column=time_column)
    used = getattr(bound, "columns_used", None)
    return (tuple(used) if used is not None else tuple(schema.names)), None


def analyze_call(
    input: AnalyzeArgument | None,
    query: AnalyzeArgument | None,
    type_column: AnalyzeArgument | None = None,
    time_column: AnalyzeArgument | None = None,
    watermark: AnalyzeArgument | None = None,
    stream: AnalyzeArgument | None = None,
) -> CograAnalyzeResult:
    """``stream``: set by the shim for a streaming TABLE argument, which then also selects
    the query's identity (``__cogra_identity__``, :mod:`cogra.analysis.identity`) and the
    wire forms of columns pandas would change (:mod:`cogra.spark.stream_rows`)."""
    if input is None or not input.isTable or not isinstance(input.dataType, StructType):
        raise analysis_error(f"{FUNCTION_NAME}'s first argument must be TABLE(...): {USAGE}")
    text = _string_argument(query, "a query", None, required=True)
    delay = _string_argument(watermark, "watermark", None)
    # No type_column: "type" if the table has it (else a one-type pattern reads every row
    # as its type); a named one must exist.
    type_col = _string_argument(type_column, "type_column", None)
    time_col = _string_argument(time_column, "time_column", "time")
    in_schema = _arrow_schema(input.dataType)
    try:
        out_schema = cogra.result_schema(text, in_schema, type_column=type_col, time_column=time_col)
        keys = plain_group_keys(text)
        columns, filter_sql = pushdown(text, in_schema, type_col, time_col)
    except CograError as e:
        raise analysis_error(f"{FUNCTION_NAME}: {e}") from None

    names = in_schema.names
    keys = tuple(_resolve(k, names) for k in keys)
    time_name = _resolve(time_col, names)
    selected: list[str] = []
    for c in (*keys, time_name, *columns):
        c = _resolve(c, names)
        if c in names and c not in selected:
            selected.append(c)
    select = [SelectedColumn(quote_identifier(c)) for c in selected]
    if filter_sql:
        select.append(SelectedColumn(f"({filter_sql})", alias=FILTER_ALIAS))
    if delay is not None:  # a stream's event time, for Spark's watermark (cogra.spark.event_time)
        from cogra.runtime.evaluation import require_window
        from cogra.spark.event_time import delay_seconds, event_time_sql

        try:
            delay_seconds(delay)
            require_window(cogra.parse(text))
            select.append(SelectedColumn(event_time_sql(time_name, in_schema.field(time_name).type),
                                         alias=EVENT_TIME_ALIAS))
        except (ValueError, CograError) as e:
            raise analysis_error(f"{FUNCTION_NAME}: {e}") from None
    if stream is not None and stream.value:
        select += _stream_columns(text, in_schema, selected, type_col, time_col)

    return CograAnalyzeResult(
        schema=_spark_schema(out_schema),
        withSinglePartition=not keys,
        partitionBy=[PartitioningColumn(quote_identifier(k)) for k in keys],
        orderBy=[OrderingColumn(quote_identifier(time_name))],
        select=select,
        query=text,
        type_column=type_col,
        time_column=time_col,
        key_columns=keys,
        input_columns=tuple(selected),
        filter_sql=filter_sql,
        watermark=delay,
        input_schema=pa.schema([in_schema.field(c) for c in selected]).serialize().to_pybytes(),
    )


def _stream_columns(text: str, schema: pa.Schema, selected: Sequence[str], type_column: str | None,
                    time_column: str) -> list[SelectedColumn]:
    """A streaming call's extra selections: its identity as a string literal, and each
    column's wire form where it has one."""
    from cogra.analysis.identity import query_identity
    from cogra.spark.stream_rows import WIRE_PREFIX, wire_sql

    identity = query_identity(text, schema, type_column=type_column, time_column=time_column, columns=selected)
    out = [SelectedColumn(sql_string(identity.to_json()), alias=IDENTITY_ALIAS)]
    for c in selected:
        wire = wire_sql(c, schema.field(c).type)
        if wire is not None:
            out.append(SelectedColumn(wire, alias=WIRE_PREFIX + c))
    return out
