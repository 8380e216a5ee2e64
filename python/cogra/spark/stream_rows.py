"""How a stream's rows cross PySpark's pandas stateful operator exactly.

``transformWithStateInPandas`` hands each group's rows to the processor as pandas
DataFrames and takes pandas DataFrames back.  Two of pandas' conversions change values:

* an integer column with a NULL becomes float64, which rounds integers past 2**53 (an
  attribute summed, a key compared, a count or sum in the output);
* a timestamp arrives as a naive wall-clock time in the session's time zone, which a DST
  change makes ambiguous (two instants, one wall-clock time).

So the stream's projection sends such columns in a form pandas keeps exactly -- 64-bit
integers as decimal strings, timestamps as microseconds since the epoch -- and the
processor reads them back into the query's Arrow schema (:func:`rows_from_pandas`);
results go back with pandas' nullable integers (:func:`exact_pandas`).  The forms are
chosen here, by :func:`wire_sql`, and reach the shim as selected expressions aliased
``__cogra_wire__<column>``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

WIRE_PREFIX = "__cogra_wire__"
"""Alias prefix of a selected expression that carries a column in its wire form."""


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def wire_sql(column: str, arrow_type: pa.DataType) -> str | None:
    """Spark SQL for ``column``'s wire form, or None where pandas keeps it exactly."""
    q = _quoted(column)
    if pa.types.is_timestamp(arrow_type):
        if arrow_type.tz is not None:
            return f"unix_micros({q})"
        return f"timestampdiff(MICROSECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', {q})"
    if pa.types.is_int64(arrow_type) or pa.types.is_uint64(arrow_type):
        return f"CAST({q} AS STRING)"
    return None


def rows_from_pandas(pdf: Any, schema: pa.Schema) -> pa.Table:
    """The rows of ``pdf`` (the operator's pandas chunk, columns as in ``schema``, some in
    their wire form) as an Arrow table of ``schema``."""
    columns = []
    for field in schema:
        series = pdf[field.name]
        wire = wire_sql(field.name, field.type)
        if wire is None:
            values = pa.Array.from_pandas(series)
            columns.append(values if values.type == field.type else values.cast(field.type))
        elif pa.types.is_timestamp(field.type):
            micros = pa.Array.from_pandas(series).cast(pa.int64())
            columns.append(micros.cast(pa.timestamp("us", tz=field.type.tz)).cast(field.type))
        else:
            columns.append(pc.cast(pa.Array.from_pandas(series, type=pa.string()), field.type))
    return pa.Table.from_arrays(columns, schema=schema)


_NULLABLE: dict[pa.DataType, Any] = {}


def exact_pandas(table: pa.Table) -> Any:
    """``table`` as the pandas DataFrame PySpark's operator sends back, every value exact:
    integer columns as pandas' nullable integers (``to_pandas`` alone makes an integer
    column with a NULL float64)."""
    if not _NULLABLE:
        import pandas as pd

        _NULLABLE.update({pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
                          pa.int64(): pd.Int64Dtype(), pa.uint8(): pd.UInt8Dtype(),
                          pa.uint16(): pd.UInt16Dtype(), pa.uint32(): pd.UInt32Dtype(),
                          pa.uint64(): pd.UInt64Dtype()})
    return table.to_pandas(types_mapper=_NULLABLE.get)


__all__ = ["WIRE_PREFIX", "exact_pandas", "rows_from_pandas", "wire_sql"]
