"""Errors that name the problem and, for queries, point at it.

A :class:`QueryError` renders like a compiler diagnostic::

    line 4, column 9: unknown variable C (the pattern binds A, B)
      WHERE C.price > 10
            ^

so that a message surfaced through Spark, JDBC or a notebook is self-explanatory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from cogra.language.ast import Span


def sql_value(value: Any) -> str:
    """A value as an error shows it, in SQL's words (a Spark user reads the message):
    ``NULL``, ``TRUE``/``FALSE``, a string quoted as a SQL literal, a timestamp or date as
    its literal, a number as itself."""
    import datetime
    import math

    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, datetime.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, datetime.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, bytes):
        return "X'" + value.hex().upper() + "'"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return str(value)


class CograError(Exception):
    """Base class of every error cogra raises on purpose."""


class QueryError(CograError, ValueError):
    """A query that does not parse or does not make sense.

    ``line`` and ``column`` are 1-based; ``text`` is the whole query so the message
    can show the offending line with a caret under the problem.
    """

    def __init__(self, message: str, text: str | None = None, span: "Span | None" = None):
        self.message = message
        self.text = text
        self.span = span
        super().__init__(self._render())

    @property
    def line(self) -> int | None:
        return self.span.line if self.span else None

    @property
    def column(self) -> int | None:
        return self.span.column if self.span else None

    def _render(self) -> str:
        if self.span is None:
            return self.message
        head = f"line {self.span.line}, column {self.span.column}: {self.message}"
        if not self.text:
            return head
        lines = self.text.splitlines() or [""]
        if not 1 <= self.span.line <= len(lines):
            return head
        src = lines[self.span.line - 1]
        # Caret under the span, clipped to the end of this line.
        width = max(1, min(self.span.end - self.span.start, len(src) - self.span.column + 1))
        pad = "".join("\t" if ch == "\t" else " " for ch in src[: self.span.column - 1])
        return f"{head}\n  {src}\n  {pad}{'^' * width}"


class DataError(CograError, ValueError):
    """The input table does not fit the query (a missing or mistyped column)."""


class CheckpointError(CograError, ValueError):
    """A stream's saved state belongs to another query: restarted from its checkpoint with
    a changed pattern, semantics, window, key, aggregate or input, the state cannot be
    continued (:mod:`cogra.analysis.identity`)."""


class AggregateOverflowError(CograError, ArithmeticError):
    """An aggregate's exact value does not fit its output type (ANSI mode)."""


class CograDataWarning(UserWarning):
    """Rows that are not events (NULL time or NULL type) were skipped.

    They are also counted in the result's schema metadata (``cogra.rows_null_time``,
    ``cogra.rows_null_type``), so nothing vanishes silently.
    """


class CograPerformanceWarning(UserWarning):
    """A query (or its data) runs on the Python executors instead of the compiled kernels:
    exact, 10-100x slower.  The message names the part that forces it; ``cogra.explain``
    names those known from the query alone."""
