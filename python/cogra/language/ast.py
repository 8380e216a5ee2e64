"""Typed, immutable syntax trees for COGRA queries.

Every node is a frozen dataclass carrying the :class:`Span` of the query text it
came from, so that any later stage (binding against a schema, the analyzer) can
point at the exact line and column of a problem.  Predicate expressions are kept
as sqlglot trees (we do not hand-write an expression grammar); references to
``NEXT(V).attr`` are rewritten by the parser into
``exp.Column(this=attr, table=V, db="NEXT")`` so that the tree stays plain sqlglot.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from typing import Union

import sqlglot.expressions as exp

NEXT_MARKER = "NEXT"
"""The ``db`` part of a sqlglot Column that stands for ``NEXT(V).attr``."""


@dataclass(frozen=True)
class Span:
    """A stretch of the query text: ``text[start:end]``, starting at ``line``/``column`` (1-based)."""

    start: int
    end: int
    line: int
    column: int


# ---------------------------------------------------------------------------
# Patterns
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Var:
    """``Stock A`` binds event type ``Stock`` to variable ``A``; a bare ``A`` is ``Var("A", "A")``."""

    event_type: str
    name: str
    span: Span


@dataclass(frozen=True)
class Seq:
    """``SEQ(P1, ..., Pn)``: the sub-patterns' trends, one after the other in time."""

    items: tuple["Pattern", ...]
    span: Span


@dataclass(frozen=True)
class Plus:
    """Kleene plus ``P+``: one or more trends of ``P`` in time order."""

    inner: "Pattern"
    span: Span


@dataclass(frozen=True)
class Star:
    """Kleene star ``P*``: sugar for ``P+`` or nothing (report section 8)."""

    inner: "Pattern"
    span: Span


@dataclass(frozen=True)
class Opt:
    """Optional ``P?``: ``P`` or nothing."""

    inner: "Pattern"
    span: Span


@dataclass(frozen=True)
class Alt:
    """Alternation ``P1 | P2 | ...``."""

    options: tuple["Pattern", ...]
    span: Span


Pattern = Union[Var, Seq, Plus, Star, Opt, Alt]


def pattern_variables(pattern: Pattern) -> tuple[Var, ...]:
    """The pattern's variables in the order they are written."""
    if isinstance(pattern, Var):
        return (pattern,)
    if isinstance(pattern, (Seq,)):
        return tuple(v for item in pattern.items for v in pattern_variables(item))
    if isinstance(pattern, Alt):
        return tuple(v for item in pattern.options for v in pattern_variables(item))
    return pattern_variables(pattern.inner)


# ---------------------------------------------------------------------------
# Clauses
# ---------------------------------------------------------------------------


class Semantics(str, Enum):
    """Event matching semantics (SEMANTICS.md section 3)."""

    ANY = "skip-till-any-match"
    NEXT = "skip-till-next-match"
    CONT = "contiguous"

    @property
    def short(self) -> str:
        return {"skip-till-any-match": "any", "skip-till-next-match": "next", "contiguous": "cont"}[
            self.value
        ]


@dataclass(frozen=True)
class AttrRef:
    """An attribute, plain (``sector``: every event) or variable-qualified (``A.company``)."""

    variable: str | None
    name: str
    span: Span

    @property
    def text(self) -> str:
        return f"{self.variable}.{self.name}" if self.variable else self.name


class AggFunc(str, Enum):
    COUNT = "COUNT"
    MIN = "MIN"
    MAX = "MAX"
    SUM = "SUM"
    AVG = "AVG"


@dataclass(frozen=True)
class Aggregate:
    """``COUNT(*)`` (variable and attribute None), ``COUNT(V)`` (attribute None), or ``F(V.attr)``."""

    func: AggFunc
    variable: str | None
    attribute: str | None
    span: Span

    @property
    def text(self) -> str:
        if self.variable is None:
            return f"{self.func.value}(*)"
        if self.attribute is None:
            return f"{self.func.value}({self.variable})"
        return f"{self.func.value}({self.variable}.{self.attribute})"


@dataclass(frozen=True)
class ReturnItem:
    """One RETURN item. ``text`` is the item as written, whitespace collapsed (its default name)."""

    value: Union[AttrRef, Aggregate]
    alias: str | None
    text: str
    span: Span

    @property
    def name(self) -> str:
        return self.alias if self.alias is not None else self.text


@dataclass(frozen=True)
class Equivalence:
    """``[attr]`` or ``[V.attr]``: all events (of ``V``) in a trend share the value."""

    attribute: AttrRef
    span: Span


@dataclass(frozen=True)
class ColumnRef:
    """One attribute reference inside a WHERE condition, with where it was written.

    ``variable`` is None for a bare identifier (an attribute of the conjunct's only
    variable, or a string literal: decided when the query is bound to a schema).
    """

    variable: str | None
    attribute: str
    is_next: bool
    span: Span


@dataclass(frozen=True)
class Condition:
    """A boolean WHERE conjunct, parsed by sqlglot.

    ``NEXT(V).attr`` appears in ``expression`` as ``exp.Column(attr, table=V, db="NEXT")``.
    """

    expression: exp.Expression
    text: str
    span: Span
    references: tuple[ColumnRef, ...]

    @property
    def variables(self) -> frozenset[str]:
        """Variables referenced without NEXT."""
        return frozenset(r.variable for r in self.references if r.variable and not r.is_next)

    @property
    def next_variables(self) -> frozenset[str]:
        """Variables referenced as ``NEXT(V)``."""
        return frozenset(r.variable for r in self.references if r.variable and r.is_next)


Conjunct = Union[Equivalence, Condition]

UNIT_SECONDS: dict[str, Fraction] = {
    "ms": Fraction(1, 1000),
    "millisecond": Fraction(1, 1000),
    "milliseconds": Fraction(1, 1000),
    "s": Fraction(1),
    "sec": Fraction(1),
    "secs": Fraction(1),
    "second": Fraction(1),
    "seconds": Fraction(1),
    "min": Fraction(60),
    "mins": Fraction(60),
    "minute": Fraction(60),
    "minutes": Fraction(60),
    "hour": Fraction(3600),
    "hours": Fraction(3600),
    "day": Fraction(86400),
    "days": Fraction(86400),
}


@dataclass(frozen=True)
class Duration:
    """``10 minutes``: an exact amount of a unit."""

    amount: Fraction
    unit: str
    span: Span

    @property
    def seconds(self) -> Fraction:
        return self.amount * UNIT_SECONDS[self.unit.lower()]


@dataclass(frozen=True)
class Window:
    """``WITHIN size [SLIDE slide]``: windows ``[k*slide, k*slide + size)`` aligned to time 0."""

    within: Duration
    slide: Duration | None
    span: Span

    @property
    def size(self) -> Fraction:
        return self.within.seconds

    @property
    def step(self) -> Fraction:
        return (self.slide or self.within).seconds


@dataclass(frozen=True)
class Query:
    """A whole parsed query. ``text`` is the original query string (spans index into it)."""

    text: str
    returns: tuple[ReturnItem, ...]
    pattern: Pattern
    semantics: Semantics
    where: tuple[Conjunct, ...]
    group_by: tuple[AttrRef, ...]
    window: Window | None

    @property
    def variables(self) -> tuple[Var, ...]:
        return pattern_variables(self.pattern)

    @property
    def event_types(self) -> tuple[str, ...]:
        """Distinct event types named by the pattern, in order of first appearance."""
        seen: dict[str, None] = {}
        for v in self.variables:
            seen.setdefault(v.event_type, None)
        return tuple(seen)

    @property
    def equivalences(self) -> tuple[Equivalence, ...]:
        return tuple(c for c in self.where if isinstance(c, Equivalence))

    @property
    def conditions(self) -> tuple[Condition, ...]:
        return tuple(c for c in self.where if isinstance(c, Condition))
