"""Keys on optional variables (docs/language.md, Keys on optional variables): which trends
each sub-stream counts.

``GROUP-BY B.g`` or ``[B.g]`` where some trends have no ``B`` splits the stream into one
sub-stream per value of ``B.g`` -- counting only the trends *with* a ``B`` -- and one more
sub-stream in which no event plays ``B``, whose trends have ``B.g`` NULL.  Events play
variables as always; what differs between these sub-streams is which trends finish, so
the automaton remembers which keyed optional variables a prefix has played:

* each state ``s`` becomes ``(s, seen)``, ``seen`` the set of those variables the prefix
  played (the flag product: deterministic, so "can extend" is unchanged under ``next``
  and ``contiguous``);
* each final ``(s, seen)`` gets a *final copy* with the same predecessors, no successors,
  and the only final one: a trend ends there, and continues from the original.  The
  original stays playable in every sub-stream: under ``next`` and ``contiguous`` an event
  that ends a trend another sub-stream counts is still the first extension of the
  partial trends before it (clearing the original's play bit made a later event their
  first extension: too many trends).

A sub-stream whose combination has values for the variables ``P`` and none for the others
lets events play a final copy only where ``seen == P`` (``Engine.substreams`` clears the
other copies' play bits), and no event play the absent variables at all.  So every trend
of a sub-stream is counted exactly once, in the sub-stream its variables select.  Why not
a final set per sub-stream: the kernels (compiled per query shape) read one final set;
play bits are already per sub-stream.
"""

from __future__ import annotations

from cogra.analysis.automaton import Automaton


def with_presence(a: Automaton, optional: tuple[str, ...]) -> Automaton:
    """``a`` with states that remember which of the ``optional`` variables were played."""
    flag = {v: 1 << i for i, v in enumerate(optional)}

    def seen_after(seen: int, s: int) -> int:
        return seen | flag.get(a.state_variables[s], 0)

    # Reachable (state, seen) pairs, from the start states.
    index: dict[tuple[int, int], int] = {}
    pairs: list[tuple[int, int]] = []
    for s in sorted(a.start):
        p = (s, seen_after(0, s))
        if p not in index:
            index[p] = len(pairs)
            pairs.append(p)
    k = 0
    while k < len(pairs):
        s, seen = pairs[k]
        for t in sorted(a.follow[s]):
            q = (t, seen_after(seen, t))
            if q not in index:
                index[q] = len(pairs)
                pairs.append(q)
        k += 1
    copies = [i for i, (s, _) in enumerate(pairs) if s in a.final]
    n = len(pairs) + len(copies)
    copy_of = {i: len(pairs) + j for j, i in enumerate(copies)}  # original -> its final copy
    follow: list[set[int]] = [set() for _ in range(n)]
    for i, (s, seen) in enumerate(pairs):
        for t in a.follow[s]:
            j = index[(t, seen_after(seen, t))]
            follow[i].add(j)
            if j in copy_of:
                follow[i].add(copy_of[j])
    start = {index[(s, seen_after(0, s))] for s in a.start}
    start |= {copy_of[i] for i in start if i in copy_of}
    guard_of: dict[tuple[int, int], list[int]] = {}
    for u, v, k in a.guards:
        guard_of.setdefault((u, v), []).append(k)
    guards = set()
    base = [s for s, _ in pairs] + [pairs[i][0] for i in copies]
    for i in range(n):
        for j in follow[i]:
            guards.update((i, j, k) for k in guard_of.get((base[i], base[j]), ()))
    seen_of = [seen for _, seen in pairs] + [pairs[i][1] for i in copies]

    def name(i: int) -> str:
        played = [v for v in optional if seen_of[i] & flag[v]]
        return f"{a.names[base[i]]}[{','.join(played)}]" + ("$" if i >= len(pairs) else "")

    return Automaton(
        names=tuple(name(i) for i in range(n)),
        event_types=tuple(a.event_types[s] for s in base),
        start=frozenset(start),
        final=frozenset(range(len(pairs), n)),
        follow=tuple(frozenset(f) for f in follow),
        nullable=a.nullable,
        state_variables=tuple(a.state_variables[s] for s in base),
        negated=a.negated,
        guards=tuple(sorted(guards)),
        presence=optional,
        seen=tuple(seen_of),
    )
