"""Patterns for the reference: word sets by recursion, and ``trends_any`` by recursion.

Variables are unique within a pattern (docs/ARCHITECTURE.md), so "the variables a word
of the pattern may start / end with / continue with" are plain sets of names:

* ``nullable(P)``  -- P also matches the empty word;
* ``first(P)``     -- variables a non-empty word of P may start with;
* ``last(P)``      -- variables a non-empty word of P may end with;
* ``follow(P)[U]`` -- variables that may immediately follow U in some word of P;
* ``required(P)``  -- variables that occur in every non-empty word of P.

:func:`enumerate_trends` builds ``trends_any`` by structural recursion over the pattern
(report Def. 2, extended to ``*``, ``?`` and ``|``): a trend is a tuple of
``(event, variable)`` pairs with strictly increasing times; wherever two sub-trends are
concatenated, the junction pair must satisfy ``pair_ok``.  Since every consecutive pair
of a trend is a junction at some level of the recursion (or the pair inside a ``Var``,
of which there is none), this checks ``pair_ok`` on every consecutive pair exactly as
the definitions require.  Trends are kept in sets: ``(A+)+`` may build the same trend in
two ways and it is still one trend.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Callable, Iterable, Mapping

from cogra.errors import CograError
from cogra.language.ast import Alt, Not, Opt, Pattern, Plus, Repeat, Seq, Star, Var

Pair = tuple[Any, str]  # (event, variable name)
Trend = tuple[Pair, ...]


class ReferenceLimitExceeded(CograError, RuntimeError):
    """The reference would enumerate more trends than its ``max_trends`` budget allows."""


# ---------------------------------------------------------------------------
# Negations (docs/language.md, Negation)
# ---------------------------------------------------------------------------


def without_negations(p: Pattern) -> Pattern:
    """The pattern with its ``NOT N`` items left out: the words it matches (a negation
    leaves what the SEQ matches, docs/language.md, Negation: it
    "matches what ``SEQ(P1, P2)`` matches", except for blocked pairs)."""
    if isinstance(p, Seq):
        return Seq(tuple(without_negations(i) for i in p.items if not isinstance(i, Not)), p.span)
    if isinstance(p, Alt):
        return Alt(tuple(without_negations(o) for o in p.options), p.span)
    if isinstance(p, Var):
        return p
    return type(p)(without_negations(p.inner), *[getattr(p, f) for f in p.__dataclass_fields__ if f != "inner"])


def crossings(p: Pattern) -> dict[tuple[str, str], tuple[str, ...]]:
    """``(U, V) -> negated variables``: the pairs that cross a ``NOT N`` -- ``U`` in
    ``last(P1)``, ``V`` in ``first(P2)`` for ``SEQ(.., P1, NOT N, P2, ..)``."""
    out: dict[tuple[str, str], tuple[str, ...]] = {}

    def walk(q: Pattern) -> None:
        if isinstance(q, (Var, Not)):
            return
        if isinstance(q, Seq):
            for before, item, after in zip(q.items, q.items[1:], q.items[2:]):
                if isinstance(item, Not):
                    left, right = without_negations(before), without_negations(after)
                    for u in last(left):
                        for v in first(right):
                            out[(u, v)] = out.get((u, v), ()) + (item.var.name,)
        for part in (q.items if isinstance(q, Seq) else q.options if isinstance(q, Alt) else (q.inner,)):
            walk(part)

    walk(p)
    return out


# ---------------------------------------------------------------------------
# Word sets
# ---------------------------------------------------------------------------


def _parts(p: Pattern) -> tuple[Pattern, ...]:
    if isinstance(p, Seq):
        return p.items
    if isinstance(p, Alt):
        return p.options
    if isinstance(p, Var):
        return ()
    return (p.inner,)


def nullable(p: Pattern) -> bool:
    if isinstance(p, Var):
        return False
    if isinstance(p, Seq):
        return all(nullable(q) for q in p.items)
    if isinstance(p, Alt):
        return any(nullable(q) for q in p.options)
    if isinstance(p, Plus):
        return nullable(p.inner)
    if isinstance(p, Repeat):
        return p.low == 0 or nullable(p.inner)
    return True  # Star, Opt


def first(p: Pattern) -> frozenset[str]:
    if isinstance(p, Var):
        return frozenset({p.name})
    if isinstance(p, Seq):
        out: set[str] = set()
        for q in p.items:
            out |= first(q)
            if not nullable(q):
                break
        return frozenset(out)
    return frozenset().union(*(first(q) for q in _parts(p)))


def last(p: Pattern) -> frozenset[str]:
    if isinstance(p, Var):
        return frozenset({p.name})
    if isinstance(p, Seq):
        out: set[str] = set()
        for q in reversed(p.items):
            out |= last(q)
            if not nullable(q):
                break
        return frozenset(out)
    return frozenset().union(*(last(q) for q in _parts(p)))


def follow(p: Pattern) -> dict[str, frozenset[str]]:
    """``follow(P)[U]``: variables that may immediately follow ``U`` in a word of ``P``."""
    out: dict[str, set[str]] = {}

    def add(us: Iterable[str], vs: Iterable[str]) -> None:
        for u in us:
            out.setdefault(u, set()).update(vs)

    def walk(q: Pattern) -> None:
        if isinstance(q, Var):
            out.setdefault(q.name, set())
            return
        for part in _parts(q):
            walk(part)
        if isinstance(q, Seq):
            # last(Pi) x first(Pj) whenever everything strictly between them is nullable
            for i, left in enumerate(q.items):
                for right in q.items[i + 1 :]:
                    add(last(left), first(right))
                    if not nullable(right):
                        break
        elif isinstance(q, (Plus, Star)) or (isinstance(q, Repeat) and (q.high is None or q.high >= 2)):
            add(last(q.inner), first(q.inner))  # one more iteration

    walk(p)
    return {u: frozenset(vs) for u, vs in out.items()}


def required(p: Pattern) -> frozenset[str]:
    """Variables that occur in every non-empty word of ``p``."""
    if isinstance(p, Var):
        return frozenset({p.name})
    if isinstance(p, Seq):
        if all(nullable(q) for q in p.items):
            # A non-empty word may consist of any single non-empty item.
            return frozenset.intersection(*(required(q) for q in p.items))
        return frozenset().union(*(required(q) for q in p.items if not nullable(q)))
    if isinstance(p, Alt):
        return frozenset.intersection(*(required(q) for q in p.options))
    return required(p.inner)  # Plus, Star, Opt, Repeat: a non-empty word holds a non-empty inner word


# ---------------------------------------------------------------------------
# Trends by structural recursion
# ---------------------------------------------------------------------------


class Budget:
    """Counts every trend built (partial or finished) and stops past ``limit``."""

    def __init__(self, limit: int):
        self.limit = limit
        self.spent = 0

    def spend(self, n: int = 1) -> None:
        self.spent += n
        if self.spent > self.limit:
            raise ReferenceLimitExceeded(
                f"the two-step reference would enumerate more than max_trends={self.limit} "
                "event trends (partial and finished); the number of trends grows exponentially "
                "with the number of events under skip-till-any-match. Use a smaller input or "
                "raise max_trends."
            )


def enumerate_trends(
    pattern: Pattern,
    players: Mapping[str, list[Any]],
    time: Callable[[Any], Any],
    pair_ok: Callable[[Pair, Pair], bool],
    budget: Budget,
) -> set[Trend]:
    """All non-empty trends of ``pattern``.

    ``players[V]``: the events that may play ``V`` (in this sub-stream); ``time(e)``: the
    event's exact time; ``pair_ok(prev, nxt)``: whether two ``(event, variable)`` pairs may
    be consecutive in a trend (times are checked here: strictly increasing).
    """

    class Joiner:
        """Appends trends of ``right`` to other trends: ``s + t`` with ``s`` ending before
        ``t`` starts and ``pair_ok(s[-1], t[0])``.  Built once per ``right`` (Kleene
        closure joins with the same inner trends again and again)."""

        def __init__(self, right: set[Trend]):
            self.by_first: dict[Pair, list[Trend]] = {}
            for t in right:
                self.by_first.setdefault(t[0], []).append(t)
            self.firsts = sorted(self.by_first, key=lambda pair: time(pair[0]))
            self.first_times = [time(pair[0]) for pair in self.firsts]
            self.successors: dict[Pair, list[Pair]] = {}

        def next_pairs(self, end: Pair) -> list[Pair]:
            """First pairs of ``right`` that may directly follow ``end``."""
            if end not in self.successors:
                later = self.firsts[bisect_right(self.first_times, time(end[0])) :]
                self.successors[end] = [q for q in later if pair_ok(end, q)]
            return self.successors[end]

        def join(self, left: Iterable[Trend]) -> set[Trend]:
            out: set[Trend] = set()
            for s in left:
                for q in self.next_pairs(s[-1]):
                    for t in self.by_first[q]:
                        trend = s + t
                        if trend not in out:
                            budget.spend()
                            out.add(trend)
            return out

    def trends(p: Pattern) -> set[Trend]:
        if isinstance(p, Var):
            out = {((e, p.name),) for e in players.get(p.name, ())}
            budget.spend(len(out))
            return out
        if isinstance(p, Seq):
            acc: set[Trend] = set()  # non-empty trends of the items so far
            acc_nullable = True  # the items so far also match the empty word
            for item in p.items:
                item_trends = trends(item)
                new = Joiner(item_trends).join(acc)
                if acc_nullable:
                    new |= item_trends
                if nullable(item):
                    new |= acc
                acc, acc_nullable = new, acc_nullable and nullable(item)
            return acc
        if isinstance(p, Alt):
            return set().union(*(trends(q) for q in p.options))
        if isinstance(p, Opt):
            return trends(p.inner)
        if isinstance(p, Repeat):
            return repeated(p)
        # Plus and Star: one or more inner trends, each after the previous one.
        inner = trends(p.inner)
        joiner = Joiner(inner)
        result = set(inner)
        frontier = inner
        while frontier:
            frontier = joiner.join(frontier) - result
            result |= frontier
        return result

    def repeated(p: Repeat) -> set[Trend]:
        """Trends of ``low`` to ``high`` inner trends in a row (fewer where the inner
        pattern may match nothing: those copies are empty)."""
        inner = trends(p.inner)
        joiner = Joiner(inner)
        low = 1 if nullable(p.inner) else max(p.low, 1)
        result: set[Trend] = set()
        level, k = inner, 1  # level: trends of exactly k inner trends
        while level and k < low:
            level, k = joiner.join(level), k + 1
        if p.high is not None:
            while level and k <= p.high:
                result |= level
                level, k = joiner.join(level), k + 1
            return result
        result |= level
        frontier = level
        while frontier:
            frontier = joiner.join(frontier) - result
            result |= frontier
        return result

    return trends(pattern)


# ---------------------------------------------------------------------------
# "Can extend" by derivatives (docs/language.md, Event matching semantics)
# ---------------------------------------------------------------------------

_EMPTY = ("empty",)
_EPS = ("eps",)


def _seq(a: tuple, b: tuple) -> tuple:
    if a == _EMPTY or b == _EMPTY:
        return _EMPTY
    if a == _EPS:
        return b
    if b == _EPS:
        return a
    return ("seq", a, b)


def _alt(a: tuple, b: tuple) -> tuple:
    if a == _EMPTY or a == b:
        return b
    if b == _EMPTY:
        return a
    return ("alt", a, b)


def _term(p: Pattern) -> tuple:
    """The pattern as a plain regular-expression term over variable names."""
    if isinstance(p, Var):
        return ("var", p.name)
    if isinstance(p, Seq):
        out = _EPS
        for item in p.items:
            out = _seq(out, _term(item))
        return out
    if isinstance(p, Alt):
        out = _EMPTY
        for o in p.options:
            out = _alt(out, _term(o))
        return out
    inner = _term(p.inner)
    if isinstance(p, Plus):
        return _seq(inner, ("star", inner))
    if isinstance(p, Star):
        return ("star", inner)
    if isinstance(p, Opt):
        return _alt(inner, _EPS)
    assert isinstance(p, Repeat)
    return _repeat(inner, p.low, p.high)


def _repeat(inner: tuple, low: int, high: int | None) -> tuple:
    if high == 0:
        return _EPS
    if _nullable(inner):
        low = 0  # copies may be empty: fewer non-empty ones do
    return ("rep", inner, low, high)


def _nullable(t: tuple) -> bool:
    kind = t[0]
    if kind in ("empty", "var"):
        return False
    if kind in ("eps", "star"):
        return True
    if kind == "seq":
        return _nullable(t[1]) and _nullable(t[2])
    if kind == "alt":
        return _nullable(t[1]) or _nullable(t[2])
    return t[2] == 0 or _nullable(t[1])  # rep


def _is_empty(t: tuple) -> bool:
    """Whether the term's language is empty."""
    kind = t[0]
    if kind == "empty":
        return True
    if kind == "seq":
        return _is_empty(t[1]) or _is_empty(t[2])
    if kind == "alt":
        return _is_empty(t[1]) and _is_empty(t[2])
    if kind == "rep":
        return t[2] > 0 and _is_empty(t[1])
    return False  # eps, var, star


def _derive(t: tuple, v: str) -> tuple:
    """Brzozowski's derivative: the words ``w`` with ``v w`` in the term's language."""
    kind = t[0]
    if kind in ("empty", "eps"):
        return _EMPTY
    if kind == "var":
        return _EPS if t[1] == v else _EMPTY
    if kind == "seq":
        out = _seq(_derive(t[1], v), t[2])
        return _alt(out, _derive(t[2], v)) if _nullable(t[1]) else out
    if kind == "alt":
        return _alt(_derive(t[1], v), _derive(t[2], v))
    if kind == "star":
        return _seq(_derive(t[1], v), t)
    _, inner, low, high = t
    rest = _repeat(inner, max(low - 1, 0), None if high is None else high - 1)
    return _seq(_derive(inner, v), rest)


class Continuations:
    """Which variables may follow a trend's variable word: ``V'`` *can extend* ``V1..Vi``
    when ``V1..Vi V'`` is a prefix of a word of the pattern (docs/language.md, Event matching
    semantics).

    Computed from the pattern's text by derivatives, independently of the engine's
    automaton: with bounded quantifiers the answer depends on the whole prefix
    (``A{2}``: a third ``A`` may not follow ``A A``)."""

    def __init__(self, pattern: Pattern):
        self.variables = tuple(dict.fromkeys(_variable_names(pattern)))
        self._after: dict[tuple[str, ...], tuple] = {(): _term(pattern)}
        self._next: dict[tuple[str, ...], frozenset[str]] = {}

    def _residual(self, word: tuple[str, ...]) -> tuple:
        if word not in self._after:
            self._after[word] = _derive(self._residual(word[:-1]), word[-1])
        return self._after[word]

    def after(self, word: tuple[str, ...]) -> frozenset[str]:
        """The variables that can extend ``word``."""
        if word not in self._next:
            rest = self._residual(word)
            self._next[word] = frozenset(v for v in self.variables if not _is_empty(_derive(rest, v)))
        return self._next[word]


def _variable_names(p: Pattern) -> list[str]:
    if isinstance(p, Var):
        return [p.name]
    return [v for part in _parts(p) for v in _variable_names(part)]
