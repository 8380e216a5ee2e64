"""Comparing result rows from Spark (any client) with :func:`cogra.evaluate`'s.

Spark returns a MATCH_TREND result in no particular order (rows come from several
partitions), and an AVG may differ in its last bits when a group was summed in another
order; so rows are compared as multisets, floats to a relative 1e-9 (docs/language.md).
"""

from __future__ import annotations

import datetime as dt
import math
import warnings
from typing import Any, Iterable

import pyarrow as pa

import cogra


def _cell(v: Any) -> Any:
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return v


def sort_key(row: tuple) -> tuple:
    """Orders rows by their non-float cells (NULL first), then by their float cells to six
    significant digits (rows that differ only in floats: e.g. the windows of two PARTITION
    BY partitions, whose key is no output column).  Cells keep their positions."""
    def exact(v: Any) -> tuple:
        return (0, "") if v is None else (1, "") if isinstance(v, float) else (2, v)

    def rounded(v: Any) -> float:
        return -math.inf if not isinstance(v, float) or math.isnan(v) else float(f"{v:.6g}")

    return tuple(exact(v) for v in row) + tuple(rounded(v) for v in row)


def same_rows(got: Iterable[tuple], want: Iterable[tuple]) -> bool:
    got = sorted((tuple(_cell(v) for v in r) for r in got), key=sort_key)
    want = sorted((tuple(_cell(v) for v in r) for r in want), key=sort_key)
    if len(got) != len(want):
        return False
    for a, b in zip(got, want):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if isinstance(x, float) and isinstance(y, (int, float)) and not isinstance(y, bool):
                if not (math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
                        or (math.isnan(x) and math.isnan(float(y)))):
                    return False
            elif x != y:
                return False
    return True


def evaluate_rows(query: str, table: pa.Table) -> tuple[list[str], list[tuple]]:
    """(column names, rows) of :func:`cogra.evaluate`, data warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        result = cogra.evaluate(query, table)
    columns = [result.column(i).to_pylist() for i in range(result.num_columns)]
    return result.column_names, list(zip(*columns)) if columns else []


def sql_literal(text: str) -> str:
    """A Spark SQL string literal for ``text``."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def group_by_g(text: str) -> str:
    """The query with ``g`` as its first GROUP-BY attribute (and first RETURN item)."""
    lines = text.split("\n")
    group = [i for i, line in enumerate(lines) if line.startswith("GROUP-BY ")]
    if group:
        items = [x.strip() for x in lines[group[0]][len("GROUP-BY "):].split(",")]
        if "g" in items:
            return text
        lines[group[0]] = "GROUP-BY g, " + ", ".join(items)
    else:
        at = next((i for i, line in enumerate(lines) if line.startswith("WITHIN ")), len(lines))
        lines.insert(at, "GROUP-BY g")
    assert lines[0].startswith("RETURN ")
    lines[0] = "RETURN g, " + lines[0][len("RETURN "):]
    return "\n".join(lines)
