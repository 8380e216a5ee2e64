"""The immutable plan every executor consumes, and its readable explanation."""

from __future__ import annotations

from dataclasses import dataclass

from cogra.analysis.binding import BoundQuery
from cogra.analysis.granularity import Executor, VariableGranularity, select
from cogra.analysis.kernel_reach import python_only_parts
from cogra.language.ast import Not


@dataclass(frozen=True)
class Plan:
    bound: BoundQuery
    executor: Executor
    granularity: tuple[VariableGranularity, ...]

    @classmethod
    def of(cls, bound: BoundQuery) -> "Plan":
        executor, granularity = select(bound)
        return cls(bound, executor, granularity)

    def _kernel_lines(self) -> list[str]:
        """Whether the compiled kernels run it, or which parts keep it on the Python executors."""
        parts = python_only_parts(self.bound)
        if not parts:
            return ["kernels    compiled"]
        lines = ["kernels    the Python executors (exact, 10-100x slower than the compiled kernels):"]
        lines += [f"             {part}" for part in parts]
        return lines

    def explain(self) -> str:
        b = self.bound
        q = b.query
        a = b.automaton
        names = a.names
        fmt = lambda s: "{" + ", ".join(names[i] for i in sorted(s)) + "}"  # noqa: E731
        lines = [
            "== cogra plan ==",
            f"semantics  {q.semantics.value}",
            f"executor   {self.executor.value}",
            *self._kernel_lines(),
            "",
            "automaton (states remember the optional keyed variables their trends played; "
            "$: a final copy, where a trend that may go on ends)" if a.presence
            else "automaton (a state per repetition: bounded quantifiers, determinized)" if a.repeated
            else "automaton (one position per variable)",
        ]
        for i, name in enumerate(names):
            marks = ("start " if i in a.start else "      ") + ("final" if i in a.final else "     ")
            binds = f"   binds {a.state_variables[i]}" if a.repeated and name != a.state_variables[i] else ""
            lines.append(f"  {name:<8} {a.event_types[i]:<12} {marks}  predTypes = {fmt(a.pred[i])}{binds}")
        lines.append("")
        lines.append("predicates")
        for e in q.equivalences:
            lines.append(f"  equivalence  [{e.attribute.text}]")
        for variable in a.variables:
            for c in q.conditions:
                if c.variables == {variable} and not c.next_variables:
                    lines.append(f"  local        {c.text}   filters {variable}")
        for n in b.negations:
            for c in q.conditions:
                if c.variables == {n.variable}:
                    lines.append(f"  local        {c.text}   decides which {n.variable} events block")
        seen = set()
        for p in b.adjacent:
            if id(p.source) in seen:
                continue
            seen.add(id(p.source))
            pairs = [f"({names[x.prev]}, {names[x.next]})" for x in b.adjacent if x.source is p.source]
            if isinstance(p.source, Not):
                lines.append(f"  negation     {p.source.text}   guards {', '.join(pairs)}: no blocking event between")
            else:
                lines.append(f"  adjacent     {p.source.text}   on {', '.join(pairs)}")
        for n, where in ((b.leading, "precedes its first"), (b.trailing, "follows its last")):
            if n is not None:
                lines.append(f"  absence      {n.source.text}   {n.edge}: a trend counts only if no {n.variable} event "
                             f"{where} event in its window")
        if not q.where and not (b.leading or b.trailing):
            lines.append("  (none)")
        lines.append("")
        lines.append("sub-streams")
        lines.append(f"  partition by   {', '.join(b.plain_keys) or '(nothing: one stream)'}")
        vkeys = list(dict.fromkeys(f"{a.state_variables[i]}.{k}" for i, ks in enumerate(b.var_keys) for k in ks))
        if vkeys:
            lines.append(f"  variable keys  {', '.join(vkeys)}")
        for v in a.presence:
            lines.append(f"  without {v:<6} the sub-stream where no event plays {v} (its keys NULL)")
        if q.window:
            w = q.window
            slide = f" SLIDE {w.slide.amount} {w.slide.unit}" if w.slide else " (tumbling)"
            lines.append(f"  windows        WITHIN {w.within.amount} {w.within.unit}{slide}")
        else:
            lines.append("  windows        one window over the whole input")
        lines.append("")
        lines.append("granularity")
        for g in self.granularity:
            lines.append(f"  {g.variable:<8} {g.granularity + '-grained':<15} {g.reason}")
        return "\n".join(lines)
