"""Choose the executor and, per variable, the granularity of its aggregates.

Report Table 4, extended by the ``next`` fix (docs/language.md, Event matching semantics):

================  ===========================  ===================================
semantics         no adjacent predicates       predicates on adjacent events
================  ===========================  ===================================
any               type-grained                 mixed: event-grained only for the
                                               variables a predicate reads
next, contiguous  pattern-grained: one waiting  the same, event-grained waiting
                  state per variable            trends for the variables a
                                                predicate reads
================  ===========================  ===================================

A predicate such as ``NEXT(A).x > 5`` reads only the new event, so it is checked
once per event and forces nothing to be kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from cogra.analysis.binding import BoundQuery
from cogra.language.ast import Not, Semantics


class Executor(str, Enum):
    TYPE_GRAINED = "type-grained"
    MIXED_GRAINED = "mixed-grained"
    NEXT = "pattern-grained (skip-till-next-match)"
    CONTIGUOUS = "pattern-grained (contiguous)"


@dataclass(frozen=True)
class VariableGranularity:
    variable: str
    granularity: str  # "type", "event" or "pattern"
    reason: str


def select(bound: BoundQuery) -> tuple[Executor, tuple[VariableGranularity, ...]]:
    semantics = bound.query.semantics
    names = bound.automaton.names
    kept = bound.kept_variables
    if semantics is Semantics.ANY:
        executor = Executor.MIXED_GRAINED if bound.adjacent else Executor.TYPE_GRAINED
        coarse, coarse_why = "type", "no predicate reads its events later, so one running aggregate per variable"
    else:
        executor = Executor.NEXT if semantics is Semantics.NEXT else Executor.CONTIGUOUS
        coarse, coarse_why = "pattern", (
            "partial trends waiting for their first extension are summed into one aggregate"
        )
    out = []
    for i, name in enumerate(names):
        if i in kept:
            sources = list({id(p.source): p.source for p in bound.adjacent if p.prev == i and p.uses_prev}.values())
            readers = "; ".join(source.text for source in sources)
            why = f"{readers} reads {name}'s attributes when a later event arrives"
            if all(isinstance(source, Not) for source in sources):
                why = f"{readers}: a later event checks for blocking events since each {name} event"
            if executor is Executor.CONTIGUOUS and not any(bound.var_keys):
                # Engine.contiguous_pair_ok_bits: the predecessor is a fact of the stream.
                why += " (at run time, decided per event if no predecessor timestamp holds two events)"
            out.append(VariableGranularity(name, "event", why))
        else:
            out.append(VariableGranularity(name, coarse, coarse_why))
    return executor, tuple(out)
