"""The automaton of a pattern: states an event may play, deterministic over variables.

A trend is a sequence of ``(event, variable)`` pairs whose variable word the pattern
accepts (docs/language.md, Event matching semantics).  The executors walk an automaton
whose *states* each bind one variable, and need three facts per state ``s``:

* ``s in start``  -- an event playing ``s`` may begin a trend;
* ``s in final``  -- an event playing ``s`` may end a trend (finish it);
* ``pred[s]``     -- the report's ``predTypes``: states that may immediately precede ``s``.

Variables are unique within a pattern, so without bounded quantifiers the position
(Glushkov) automaton is already deterministic over variable names and its states are the
variables themselves.  A bounded quantifier repeats a variable under one name (``A{3,}``
is ``SEQ(A, A, A+)`` with every event bound to ``A``): the positions are unrolled, then
determinized over variable names and minimized (:func:`_determinized`; one construction
for both, which gives the position automaton back where variables are unique).  Each
prefix of a word then reaches exactly one state, so no trend is counted twice and "can
extend" (docs/language.md, Bounded quantifiers: which variables may follow depends on
the whole prefix) is the
state's own follow set.  ``A{2}`` has states ``A#1`` and ``A#2``, both binding ``A``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from cogra.language.ast import (
    Alt,
    Not,
    Opt,
    Pattern,
    Plus,
    Repeat,
    Seq,
    Star,
    Var,
    negations,
)

MAX_POSITIONS = 4096
"""Positions of an unrolled pattern before it is determinized (``A{64}`` nested in
``{64}`` would be 4096): past this the pattern is refused before any work."""


class TooManyPositions(ValueError):
    """The unrolled pattern has more than :data:`MAX_POSITIONS` positions."""


class AmbiguousNegation(ValueError):
    """Under repetition, one step of the automaton crosses a negation in one parse of a
    prefix and not in another (``args[0]``: the negation's index)."""


@dataclass(frozen=True)
class Automaton:
    names: tuple[str, ...]
    """State names, indexed by state: the variable's name, or ``A#1``, ``A#2``, ... where
    repetitions give one variable several states."""
    event_types: tuple[str, ...]
    """Event type of each state's variable."""
    start: frozenset[int]
    final: frozenset[int]
    follow: tuple[frozenset[int], ...]
    nullable: bool
    """True when the pattern also matches the empty word (never a trend itself)."""
    state_variables: tuple[str, ...] = ()
    """The variable each state binds (``names`` when every variable has one state)."""
    negated: tuple[Var, ...] = ()
    """The negated variables (``NOT N``), indexed as in :attr:`guards`."""
    guards: tuple[tuple[int, int, int], ...] = ()
    """``(u, v, k)``: the step from state ``u`` to ``v`` crosses negation ``k`` -- the pair is
    not adjacent when an event that could play ``negated[k]`` lies strictly between
    (docs/language.md, Negation)."""
    presence: tuple[str, ...] = ()
    """Keyed variables some trends lack (:mod:`cogra.analysis.presence`); empty otherwise."""
    seen: tuple[int, ...] = ()
    """With :attr:`presence`, per state: the bits (``1 << i`` for ``presence[i]``) of the
    ones its trends have played."""

    def ends_not_in(self, present: int) -> int:
        """Play bits of the final states whose trends played other optional keyed
        variables than the bits ``present`` (cleared in that sub-stream)."""
        if not self.presence:
            return 0
        return sum(1 << s for s in self.final if self.seen[s] != present)

    def __post_init__(self) -> None:
        if not self.state_variables:
            object.__setattr__(self, "state_variables", self.names)

    @cached_property
    def variables(self) -> tuple[str, ...]:
        """The pattern's variables, each once, in the order of their first state."""
        return tuple(dict.fromkeys(self.state_variables))

    @cached_property
    def repeated(self) -> bool:
        """Whether some variable has several states (a bounded quantifier)."""
        return len(self.variables) != len(self.names)

    def states_of(self, variable: str) -> tuple[int, ...]:
        """The states that bind ``variable`` (one, unless it is repeated)."""
        return tuple(i for i, v in enumerate(self.state_variables) if v == variable)

    def mandatory_variable(self, variable: str) -> bool:
        """Whether every trend contains an event playing ``variable``."""
        return self._avoiding(frozenset(self.states_of(variable)))

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
        """Whether every trend passes through state ``var`` (no accepted non-empty word avoids it)."""
        return self._avoiding(frozenset([var]))

    def _avoiding(self, states: frozenset[int]) -> bool:
        """Whether no trend avoids all of ``states``."""
        frontier = [s for s in self.start if s not in states]
        seen = set(frontier)
        while frontier:
            u = frontier.pop()
            if u in self.final:
                return False
            for v in self.follow[u]:
                if v not in states and v not in seen:
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
    """A sub-pattern's position sets: whether it matches nothing, where its words may start
    and end."""

    nullable: bool
    first: frozenset[int]
    last: frozenset[int]


def build_automaton(pattern: Pattern) -> Automaton:
    """Compile a pattern into its automaton (:func:`_determinized`).  Where variables are
    unique (no bounded quantifier) it is the position automaton itself: first / last /
    follow over the variables, in pattern order."""
    return _determinized(pattern)


def _determinized(pattern: Pattern) -> Automaton:
    """The automaton of a pattern, deterministic over variable names.

    1. Unroll: positions are variable occurrences, ``P{n,m}`` is ``n`` copies of ``P``
       then ``m - n`` optional ones, ``P{n,}`` is ``n - 1`` copies then ``P+``; build
       the position automaton over them.
    2. Determinize over variable names (subset construction): a state is the set of
       positions a prefix may have reached, so one prefix, one state.
    3. Minimize (Moore's partition refinement, states split first by variable and by
       whether they accept), so ``(A{1,2}){1,2}`` has the states of ``A{1,4}``.

    States are numbered by their smallest position, which keeps a pattern without
    repetition in pattern order.  Why not count repetitions per variable at run time
    instead: a trend's extensions depend on the whole prefix (``SEQ(A{2}, B)``: a ``B``
    may follow only the second ``A``), which is exactly what a deterministic state is.
    """
    labels: list[str] = []  # per position: its variable
    types: dict[str, str] = {}
    follow: list[set[int]] = []
    negated = negations(pattern)
    negation_index = {id(n): k for k, n in enumerate(negated)}
    edge_guards: dict[tuple[int, int], frozenset[int]] = {}

    def position(v: Var) -> int:
        if len(labels) >= MAX_POSITIONS:
            raise TooManyPositions(len(labels))
        labels.append(v.name)
        types[v.name] = v.event_type
        follow.append(set())
        return len(labels) - 1

    def seq(parts: list) -> _Glushkov:
        acc = _Glushkov(True, frozenset(), frozenset())
        crossing: int | None = None
        for build in parts:
            if isinstance(build, Not):
                crossing = negation_index[id(build)]
                continue
            g = build()
            for u in acc.last:
                follow[u] |= g.first
                if crossing is not None:
                    for v in g.first:
                        edge_guards[(u, v)] = edge_guards.get((u, v), frozenset()) | {crossing}
            crossing = None
            acc = _Glushkov(
                acc.nullable and g.nullable,
                acc.first | g.first if acc.nullable else acc.first,
                g.last | acc.last if g.nullable else g.last,
            )
        return acc

    def loop(g: _Glushkov) -> _Glushkov:
        for u in g.last:
            follow[u] |= g.first
        return g

    def optional(g: _Glushkov) -> _Glushkov:
        return _Glushkov(True, g.first, g.last)

    def visit(p: Pattern) -> _Glushkov:
        if isinstance(p, Var):
            i = position(p)
            return _Glushkov(False, frozenset([i]), frozenset([i]))
        if isinstance(p, Seq):
            return seq([item if isinstance(item, Not) else (lambda item=item: visit(item)) for item in p.items])
        if isinstance(p, Alt):
            gs = [visit(o) for o in p.options]
            return _Glushkov(
                any(g.nullable for g in gs),
                frozenset().union(*(g.first for g in gs)),
                frozenset().union(*(g.last for g in gs)),
            )
        if isinstance(p, Plus):
            return loop(visit(p.inner))
        if isinstance(p, Star):
            return optional(loop(visit(p.inner)))
        if isinstance(p, Opt):
            return optional(visit(p.inner))
        assert isinstance(p, Repeat)
        inner = p.inner
        if p.high is None:
            if p.low == 0:
                return optional(loop(visit(inner)))
            parts = [lambda: visit(inner)] * (p.low - 1) + [lambda: loop(visit(inner))]
        else:
            parts = [lambda: visit(inner)] * p.low + [lambda: optional(visit(inner))] * (p.high - p.low)
        return seq(parts)

    g = visit(pattern)

    # 2. Subset construction; subset 0 is the empty prefix.  A step's guards are those of
    # the position edges it stands for, which must agree (else the negation is ambiguous).
    subsets: list[frozenset[int]] = [frozenset()]
    index: dict[frozenset[int], int] = {frozenset(): 0}
    delta: list[dict[str, int]] = []
    step_guards: list[dict[str, frozenset[int]]] = []
    k = 0
    while k < len(subsets):
        here = subsets[k]
        reach = g.first if k == 0 else frozenset().union(*(follow[p] for p in here))
        by_label: dict[str, set[int]] = {}
        for q in sorted(reach):
            by_label.setdefault(labels[q], set()).add(q)
        moves: dict[str, int] = {}
        guarded: dict[str, frozenset[int]] = {}
        for label, qs in by_label.items():
            target = frozenset(qs)
            if target not in index:
                index[target] = len(subsets)
                subsets.append(target)
            moves[label] = index[target]
            found = {edge_guards.get((p, q), frozenset()) for p in here for q in qs if q in follow[p]}
            if len(found) > 1:
                raise AmbiguousNegation(min(min(f) for f in found if f))
            guarded[label] = next(iter(found), frozenset())
        delta.append(moves)
        step_guards.append(guarded)
        k += 1
    accepting = [bool(sub & g.last) for sub in subsets]
    accepting[0] = g.nullable

    # 3. Moore's refinement: blocks by (label, accepting), split by where each label leads.
    def label_of(k: int) -> str | None:
        return None if k == 0 else labels[min(subsets[k])]

    block = [(label_of(k), accepting[k]) for k in range(len(subsets))]
    while True:
        keys = [(block[k], tuple(sorted((lab, block[t], tuple(sorted(step_guards[k][lab])))
                                        for lab, t in delta[k].items())))
                for k in range(len(subsets))]
        names_of = {key: i for i, key in enumerate(dict.fromkeys(keys))}
        refined = [names_of[key] for key in keys]
        if len(set(refined)) == len(set(block)):
            break
        block = refined
    classes: dict = {}
    for k in range(len(subsets)):
        classes.setdefault(block[k], []).append(k)
    # Number the classes (without the empty prefix's) by their smallest position.
    members = [ks for ks in classes.values() if 0 not in ks]
    members.sort(key=lambda ks: min(min(subsets[k]) for k in ks))
    number = {}
    for i, ks in enumerate(members):
        for k in ks:
            number[k] = i
    initial_class = next(ks for ks in classes.values() if 0 in ks)
    if len(initial_class) != 1:  # pragma: no cover - the empty prefix has no variable
        raise AssertionError("the empty prefix merged with a state")
    n_states = len(members)
    state_variable = tuple(label_of(ks[0]) or "" for ks in members)
    start = frozenset(number[t] for t in delta[0].values())
    final = frozenset(number[ks[0]] for ks in members if accepting[ks[0]])
    out = [set() for _ in range(n_states)]
    guards = set()
    for ks in members:
        for label, t in delta[ks[0]].items():
            out[number[ks[0]]].add(number[t])
            guards.update((number[ks[0]], number[t], c) for c in step_guards[ks[0]][label])
    counts: dict[str, int] = {}
    for v in state_variable:
        counts[v] = counts.get(v, 0) + 1
    seen: dict[str, int] = {}
    names = []
    for v in state_variable:
        seen[v] = seen.get(v, 0) + 1
        names.append(v if counts[v] == 1 else f"{v}#{seen[v]}")
    return Automaton(
        names=tuple(names),
        event_types=tuple(types[v] for v in state_variable),
        start=start,
        final=final,
        follow=tuple(frozenset(f) for f in out),
        nullable=accepting[0],
        state_variables=state_variable,
        negated=tuple(n.var for n in negated),
        guards=tuple(sorted(guards)),
    )
