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
from cogra.language.ast import Alt, Opt, Pattern, Plus, Seq, Star, Var

Pair = tuple[Any, str]  # (event, variable name)
Trend = tuple[Pair, ...]


class ReferenceLimitExceeded(CograError, RuntimeError):
    """The reference would enumerate more trends than its ``max_trends`` budget allows."""


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
        elif isinstance(q, (Plus, Star)):
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
    return required(p.inner)  # Plus, Star, Opt: a non-empty word holds a non-empty inner word


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
        # Plus and Star: one or more inner trends, each after the previous one.
        inner = trends(p.inner)
        joiner = Joiner(inner)
        result = set(inner)
        frontier = inner
        while frontier:
            frontier = joiner.join(frontier) - result
            result |= frontier
        return result

    return trends(pattern)
