"""The position (Glushkov) automaton of a pattern, over its variables.

Variables are unique within a pattern (docs/ARCHITECTURE.md), so positions and
variables coincide and the automaton is deterministic over variable names: a trend
is a sequence of ``(event, variable)`` pairs whose variable word is accepted, and
the executors only need three facts per variable ``V``:

* ``V in start``  -- an event playing ``V`` may begin a trend;
* ``V in final``  -- an event playing ``V`` may end a trend (finish it);
* ``pred[V]``     -- the report's ``predTypes(V)``: variables that may immediately
                     precede ``V``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from cogra.language.ast import Alt, Opt, Pattern, Plus, Seq, Star, Var, pattern_variables


@dataclass(frozen=True)
class Automaton:
    names: tuple[str, ...]
    """Variable names, indexed by position (pattern order)."""
    event_types: tuple[str, ...]
    """Event type bound to each variable."""
    start: frozenset[int]
    final: frozenset[int]
    follow: tuple[frozenset[int], ...]
    nullable: bool
    """True when the pattern also matches the empty word (never a trend itself)."""

    @cached_property
    def pred(self) -> tuple[frozenset[int], ...]:
        preds: list[set[int]] = [set() for _ in self.names]
        for u, nexts in enumerate(self.follow):
            for v in nexts:
                preds[v].add(u)
        return tuple(frozenset(p) for p in preds)

    def index(self, name: str) -> int:
        return self.names.index(name)

    def mandatory(self, var: int) -> bool:
        """Whether every trend contains ``var`` (no accepted non-empty word avoids it)."""
        frontier = [s for s in self.start if s != var]
        seen = set(frontier)
        while frontier:
            u = frontier.pop()
            if u in self.final:
                return False
            for v in self.follow[u]:
                if v != var and v not in seen:
                    seen.add(v)
                    frontier.append(v)
        return True

    def describe(self) -> str:
        """A few readable lines: start/final variables and predTypes."""
        n = self.names
        fmt = lambda s: "{" + ", ".join(n[i] for i in sorted(s)) + "}"  # noqa: E731
        lines = [f"start {fmt(self.start)}  final {fmt(self.final)}"]
        for i, name in enumerate(n):
            lines.append(f"predTypes({name}) = {fmt(self.pred[i])}   [{self.event_types[i]}]")
        return "\n".join(lines)


@dataclass(frozen=True)
class _Glushkov:
    nullable: bool
    first: frozenset[int]
    last: frozenset[int]


def build_automaton(pattern: Pattern) -> Automaton:
    """Compile a pattern into its position automaton (first / last / follow)."""
    variables = pattern_variables(pattern)
    index = {v.name: i for i, v in enumerate(variables)}
    follow: list[set[int]] = [set() for _ in variables]

    def visit(p: Pattern) -> _Glushkov:
        if isinstance(p, Var):
            i = index[p.name]
            return _Glushkov(False, frozenset([i]), frozenset([i]))
        if isinstance(p, Seq):
            acc = _Glushkov(True, frozenset(), frozenset())
            for item in p.items:
                g = visit(item)
                for u in acc.last:
                    follow[u] |= g.first
                acc = _Glushkov(
                    acc.nullable and g.nullable,
                    acc.first | g.first if acc.nullable else acc.first,
                    g.last | acc.last if g.nullable else g.last,
                )
            return acc
        if isinstance(p, Alt):
            gs = [visit(o) for o in p.options]
            return _Glushkov(
                any(g.nullable for g in gs),
                frozenset().union(*(g.first for g in gs)),
                frozenset().union(*(g.last for g in gs)),
            )
        g = visit(p.inner)
        if isinstance(p, (Plus, Star)):
            for u in g.last:
                follow[u] |= g.first
        nullable = g.nullable or isinstance(p, (Star, Opt))
        return _Glushkov(nullable, g.first, g.last)

    g = visit(pattern)
    return Automaton(
        names=tuple(v.name for v in variables),
        event_types=tuple(v.event_type for v in variables),
        start=g.first,
        final=g.last,
        follow=tuple(frozenset(f) for f in follow),
        nullable=g.nullable,
    )
