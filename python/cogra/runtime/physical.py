"""The physical plan: which algorithms evaluate a query, named before any row is read.

Analysis decides the logical plan (:class:`cogra.analysis.plan.Plan`: the executor family
and each variable's granularity).  What evaluates it is decided here, from the query and
its schema alone: the compiled kernels or the Python executors (and why), how the windows
run (one pass or chunks of rows; each window on its own, or panes or lanes shared between
sliding windows), and the aggregates' slots.
What depends on the data -- a table's size, the events per window, the memory a shared
run needs -- is stated as the threshold the engine applies.  ``cogra.explain`` prints it
(:meth:`PhysicalPlan.lines`); the engine reads :attr:`PhysicalPlan.windows` where it
chooses a window run (:mod:`cogra.runtime.compiled.windows.chunked`,
:mod:`cogra.runtime.compiled.windows.sliding`), which then check only the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import pyarrow as pa

from cogra.analysis.granularity import Executor
from cogra.analysis.kernel_reach import checks_past_the_word, python_only_parts
from cogra.analysis.plan import Plan
from cogra.runtime.aggregates import ADD, FADD, Layout, layout_of
from cogra.runtime.windows import WindowSpec, is_integral


class WindowRun(Enum):
    """How the windows' kernels run."""

    ONE_PASS = "one pass over every event"
    CHUNKS = "chunks of rows carrying the window's state (windows/chunked.py)"
    EACH_WINDOW = "each window from its own events"
    SHARED_PANES = "windows share their panes' work (windows/sliding.py)"
    SHARED_LANES = "windows share a pass, a lane per start pane (windows/mixed_one_pass.py, mixed_grouped.py)"
    PYTHON = "the Python executors, each window on its own"


@dataclass(frozen=True)
class RunChoice:
    """A window run the engine may take, and when (its module's threshold, in words)."""

    run: WindowRun
    when: str = ""


@dataclass(frozen=True)
class WindowStrategy:
    """The windows and the runs that evaluate them, in order: the first whose threshold
    the data meets runs."""

    windows: str
    runs: tuple[RunChoice, ...]
    why_no_sharing: str | None = None
    """Why no chunks or shared run applies, where none does."""

    def offers(self, run: WindowRun) -> bool:
        """Whether ``run`` may evaluate the windows (its data threshold permitting)."""
        return any(choice.run is run for choice in self.runs)


@dataclass(frozen=True)
class SlotLine:
    """One slot of the aggregates' state vector (:class:`cogra.runtime.aggregates.Layout`)."""

    role: str
    variable: str | None
    attribute: str | None
    exact: bool
    """Read as an exact number; else only as a ratio's part or tested for zero (the
    kernels may keep it in doubles)."""
    exact_always: bool = False
    """Exact at every size (:attr:`~cogra.runtime.aggregates.Layout.exact_always`): a
    window whose value passes the kernels' fixed-width channels re-runs exactly."""

    def text(self) -> str:
        what = self.role if self.variable is None else (
            f"{self.role} {self.variable}" + (f".{self.attribute}" if self.attribute else ""))
        if self.exact_always:
            return what + "   (exact at any size: past the kernels' integers, the window re-runs exactly)"
        return what + ("" if self.exact else "   (a ratio's part: may be kept in doubles)")


@dataclass(frozen=True)
class PhysicalPlan:
    """What evaluates one bound query (see the module docstring)."""

    executor: Executor
    python_only: tuple[str, ...]
    """Why the query runs on the Python executors (empty: the compiled kernels run it;
    :func:`cogra.analysis.kernel_reach.python_only_parts`, printed with the logical plan)."""
    windows: WindowStrategy
    slots: tuple[SlotLine, ...]

    @property
    def compiled(self) -> bool:
        return not self.python_only

    def lines(self) -> list[str]:
        """The plan as ``cogra.explain`` prints it."""
        out = ["physical plan", f"  windows        {self.windows.windows}"]
        for i, choice in enumerate(self.windows.runs):
            out.append(f"  {'runs' if i == 0 else 'else':<14} {choice.run.value}")
            if choice.when:
                out.append(f"  {'':<14}   {choice.when}")
        if self.windows.why_no_sharing:
            out.append(f"  {'':<14} (no chunks or shared run: {self.windows.why_no_sharing})")
        out.append("  slots          " + self.slots[0].text())
        out += [f"  {'':<14} {s.text()}" for s in self.slots[1:]]
        return out


def physical_plan(plan: Plan) -> PhysicalPlan:
    """The physical plan of ``plan`` (computed once per bound query)."""
    memo = plan.bound.memo
    key = ("physical", plan.executor)
    if key not in memo:
        memo[key] = _physical(plan)
    return memo[key]


def _physical(plan: Plan) -> PhysicalPlan:
    b = plan.bound
    layout = layout_of(b)
    python_only = python_only_parts(b)
    slots = tuple(SlotLine(s.role, None if not s.states else b.automaton.state_variables[s.states[0]],
                           s.attribute, s.kind not in (ADD, FADD) or i not in layout.ratio_only,
                           i in layout.exact_always)
                  for i, s in enumerate(layout.slots))
    return PhysicalPlan(plan.executor, python_only, _windows(plan, layout, not python_only), slots)


def _windows(plan: Plan, layout: Layout, compiled: bool) -> WindowStrategy:
    """The window runs the engine chooses among, from the query and schema."""
    b = plan.bound
    q = b.query
    if not compiled:
        return WindowStrategy(_describe(q), (RunChoice(WindowRun.PYTHON),))
    if q.window is None:
        why = _no_chunks(plan, layout)
        if why is None:
            return WindowStrategy(_describe(q), (
                RunChoice(WindowRun.CHUNKS, "from chunked.MIN_ROWS rows, CHUNK_ROWS at a time"),
                RunChoice(WindowRun.ONE_PASS)))
        return WindowStrategy(_describe(q), (RunChoice(WindowRun.ONE_PASS),), why)
    spec = WindowSpec.of(q.window, b.time_type)
    # (Tumbling windows are one pane each: below sliding.MIN_PANES_PER_WINDOW, the shared
    # runs leave them to the per-window kernel; tests lower it to run them on one pane.)
    why = _no_shared_panes(plan, layout, spec)
    if why is not None:
        return WindowStrategy(_describe(q), (RunChoice(WindowRun.EACH_WINDOW),), why)
    panes = RunChoice(WindowRun.SHARED_PANES, "from sliding.MIN_PANES_PER_WINDOW panes and MIN_EVENTS_PER_WINDOW "
             "events per window")
    if not _kept(b):
        return WindowStrategy(_describe(q), (panes, RunChoice(WindowRun.EACH_WINDOW)))
    if plan.executor is Executor.MIXED_GRAINED:
        if any(s.role in ("min", "max") for s in layout.slots):
            return WindowStrategy(_describe(q), (RunChoice(WindowRun.EACH_WINDOW),),
                                  "MIN/MAX over kept events (the lanes keep sums and counts)")
        return WindowStrategy(_describe(q), (
            RunChoice(WindowRun.SHARED_LANES, "from sliding.MIN_PANES_PER_WINDOW panes per window; in groups of "
             "GROUP_LANES windows past RING_MAX_BYTES"),
            RunChoice(WindowRun.EACH_WINDOW, "where a sub-stream's windows are not in walk order")))
    if plan.executor is Executor.CONTIGUOUS and not checks_past_the_word(b):
        return WindowStrategy(_describe(q), (
            RunChoice(WindowRun.SHARED_PANES, "where the sub-streams fold the kept events away (contiguous), from "
             "sliding.MIN_PANES_PER_WINDOW panes and MIN_EVENTS_PER_WINDOW events per window"),
            RunChoice(WindowRun.EACH_WINDOW)))
    return WindowStrategy(_describe(q), (RunChoice(WindowRun.EACH_WINDOW),), "kept events under next")


def _describe(q) -> str:
    if q.window is None:
        return "one window over the whole input"
    w = q.window
    if w.slide is None:
        return f"tumbling, WITHIN {w.within.amount} {w.within.unit}"
    return f"sliding, WITHIN {w.within.amount} {w.within.unit} SLIDE {w.slide.amount} {w.slide.unit}"


def _no_chunks(plan: Plan, layout: Layout) -> str | None:
    """Why one window over the whole input cannot run in chunks (None: it can): the
    conditions of :func:`cogra.runtime.compiled.windows.chunked.applies` that the query and
    schema decide."""
    b = plan.bound
    if b.plain_keys or b.keyed_states:
        return "keys: a window per key"
    if not b.automaton.names:
        return "no variable"
    if b.negations or b.leading is not None or b.trailing is not None:
        return "a negation reads the whole table (blockers, absence cut-offs)"
    if _kept(b):
        return "kept events (a predicate reads the earlier event)"
    time_type = b.schema.field(b.time_column).type
    if pa.types.is_floating(time_type):
        return "floating times"
    for attr in layout.attributes:
        t = b.schema.field(attr).type
        if pa.types.is_dictionary(t):
            t = t.value_type
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return f"MIN/MAX of the string attribute {attr} (ranks would differ per chunk)"
    return None


def _no_shared_panes(plan: Plan, layout: Layout, spec: WindowSpec) -> str | None:
    """Why sliding windows cannot share work (None: they may): the conditions of
    :mod:`cogra.runtime.compiled.windows.sliding` that the query and schema decide."""
    b = plan.bound
    if b.leading is not None or b.trailing is not None:
        return "an absence: each window's own cut-offs"
    if not is_integral(spec, b.time_type):
        return "windows of fractional size"
    size, step = int(spec.size), int(spec.step)
    if size % step:
        return "SLIDE does not divide WITHIN"
    return None


def _kept(b) -> bool:
    """Whether the kernels keep events of some variable (a predicate reads the earlier
    event, or checks one past the kernels' word of edges)."""
    return bool(b.kept_variables or checks_past_the_word(b))


__all__ = ["PhysicalPlan", "RunChoice", "SlotLine", "WindowRun", "WindowStrategy", "physical_plan"]
