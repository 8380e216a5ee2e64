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


@dataclass(frozen=True)
class Not:
    """``NOT N`` / ``NOT Cancel X``: a negated event between two parts of a SEQ
    (docs/language.md, Negation).  Its variable is in no trend: a pair of trend events that
    crosses it is not adjacent when an event that could play it lies strictly between.
    At the start or end of the whole pattern's SEQ it is an *absence* (docs/language.md,
    Absence at the edge of a pattern; :func:`edge_negations`): a trend counts only if no
    such event precedes (leading) or follows (trailing) it in its window."""

    var: Var
    span: Span

    @property
    def text(self) -> str:
        v = self.var
        return f"NOT {v.event_type}" if v.event_type == v.name else f"NOT {v.event_type} {v.name}"


@dataclass(frozen=True)
class Repeat:
    """Bounded quantifier ``P{low}``, ``P{low,}``, ``P{low,high}`` (docs/language.md, Bounded
    quantifiers).

    ``high`` is None for ``P{low,}``; ``P{n}`` has ``low == high``.  Every repetition
    binds the same variables: a trend is still a sequence of ``(event, variable)`` pairs,
    so two parses that differ only in which repetition an event filled are one trend.
    """

    inner: "Pattern"
    low: int
    high: int | None
    span: Span

    @property
    def suffix(self) -> str:
        if self.high is None:
            return f"{{{self.low},}}"
        return f"{{{self.low}}}" if self.low == self.high else f"{{{self.low},{self.high}}}"


Pattern = Union[Var, Seq, Plus, Star, Opt, Alt, Repeat, Not]


def has_repeat(pattern: Pattern) -> bool:
    """Whether a bounded quantifier occurs anywhere in ``pattern``."""
    if isinstance(pattern, Repeat):
        return True
    if isinstance(pattern, (Var, Not)):
        return False
    if isinstance(pattern, Seq):
        return any(has_repeat(i) for i in pattern.items)
    if isinstance(pattern, Alt):
        return any(has_repeat(o) for o in pattern.options)
    return has_repeat(pattern.inner)


def pattern_variables(pattern: Pattern) -> tuple[Var, ...]:
    """The pattern's variables in the order they are written, negated ones (``NOT N``) aside."""
    if isinstance(pattern, Var):
        return (pattern,)
    if isinstance(pattern, Not):
        return ()
    if isinstance(pattern, (Seq,)):
        return tuple(v for item in pattern.items for v in pattern_variables(item))
    if isinstance(pattern, Alt):
        return tuple(v for item in pattern.options for v in pattern_variables(item))
    return pattern_variables(pattern.inner)


def matches_nothing(p: Pattern) -> bool:
    """Whether the sub-pattern also matches the empty word (``P?``, ``P*``, ``P{0,m}``; a
    ``NOT N`` item adds no event to a SEQ)."""
    if isinstance(p, Var):
        return False
    if isinstance(p, Not):
        return True
    if isinstance(p, Seq):
        return all(matches_nothing(i) for i in p.items)
    if isinstance(p, Alt):
        return any(matches_nothing(o) for o in p.options)
    if isinstance(p, (Star, Opt)):
        return True
    if isinstance(p, Repeat) and p.low == 0:
        return True
    return matches_nothing(p.inner)


def edge_negations(pattern: Pattern) -> tuple[Not | None, Not | None]:
    """The whole pattern's leading and trailing ``NOT`` (docs/language.md, Absence at the edge
    of a pattern), or None: ``SEQ(NOT M, P, NOT N)`` has ``(NOT M, NOT N)``.  The parser
    allows a ``NOT`` at a SEQ's edge only there, so a negation is either one of these or
    guards the steps that cross it."""
    if not isinstance(pattern, Seq) or len(pattern.items) < 2:
        return None, None
    first, last = pattern.items[0], pattern.items[-1]
    return (first if isinstance(first, Not) else None), (last if isinstance(last, Not) else None)


def negations(pattern: Pattern) -> tuple[Not, ...]:
    """The pattern's negated events ``NOT N``, in the order they are written."""
    if isinstance(pattern, Not):
        return (pattern,)
    if isinstance(pattern, Var):
        return ()
    if isinstance(pattern, Seq):
        return tuple(n for item in pattern.items for n in negations(item))
    if isinstance(pattern, Alt):
        return tuple(n for item in pattern.options for n in negations(item))
    return negations(pattern.inner)


# ---------------------------------------------------------------------------
# Clauses
# ---------------------------------------------------------------------------


class Semantics(str, Enum):
    """Event matching semantics (docs/language.md, Event matching semantics)."""

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
    VAR_POP = "VAR_POP"
    VAR_SAMP = "VAR_SAMP"
    STDDEV_POP = "STDDEV_POP"
    STDDEV_SAMP = "STDDEV_SAMP"


AGG_ALIASES: dict[str, AggFunc] = {"VARIANCE": AggFunc.VAR_SAMP, "STDDEV": AggFunc.STDDEV_SAMP}
"""Other names of aggregate functions, as in Spark SQL (the item's text keeps the name written)."""


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
    def negated(self) -> tuple[Var, ...]:
        """The negated variables (``NOT N``), in the order they are written."""
        return tuple(n.var for n in negations(self.pattern))

    @property
    def event_types(self) -> tuple[str, ...]:
        """Distinct event types named by the pattern, negated ones included, in order of
        first appearance."""
        seen: dict[str, None] = {}
        for v in self.variables + self.negated:
            seen.setdefault(v.event_type, None)
        return tuple(seen)

    @property
    def equivalences(self) -> tuple[Equivalence, ...]:
        return tuple(c for c in self.where if isinstance(c, Equivalence))

    @property
    def conditions(self) -> tuple[Condition, ...]:
        return tuple(c for c in self.where if isinstance(c, Condition))
