"""The experiments: the report's §9 figures, and the targets the engine is measured against.

Every experiment is a list of *runs*; a run is one contender evaluating one query over
one generated data set (:mod:`cogra.datasets`, fixed seed) in a fresh process
(:mod:`cogra.bench.runner`).  Runs of one *series* are ordered from easy to hard, so that
once a series exceeds the time limit its harder points are reported as DNF without being
run (the report's "does not terminate").

Contenders (report Table 10; each implemented in this project):

=============  ================================================================
``cogra``      :func:`cogra.evaluate` -- whichever executor the plan picks
``cogra-py``   :func:`cogra.evaluate` with ``compiled=False`` (when the API has it)
``two-step``   :func:`cogra.reference.evaluate_reference` -- SASE-style trend
               construction, then aggregation
``greta``      :mod:`cogra.baselines.greta` -- event-grained graph aggregation
``a-seq``      :mod:`cogra.baselines.aseq` -- flattened fixed-length sequences
``spark``      ``cogra.spark.match_trend`` end to end (hook, see ``spark-e2e``)
``flink``      Flink CEP (:mod:`cogra.bench.flink`): every match built by Flink's
               NFA, then aggregated; a real peer, measured against cogra on these
               experiments' queries by ``cogra bench --experiments flink-cep``
               (:mod:`cogra.bench.flink_cep`), where its semantics match
=============  ================================================================

"Events per window" experiments use one window holding all generated events (no WITHIN
clause), which is what the x axis says; the report's queries q1-q3 are adapted the same
way (noted per experiment).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

ALL_CONTENDERS = ("cogra", "two-step", "greta", "a-seq")
ONLINE = ("cogra", "greta", "a-seq")


@dataclass(frozen=True)
class Run:
    """One measurement: ``contender`` evaluates ``query`` over a generated data set."""

    experiment: str
    series: str  # the line in the plots (usually the contender)
    contender: str
    x: Any  # the varied parameter (number or label)
    dataset: str
    n_events: int
    query: str
    data_kwargs: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)  # extra CSV columns (selectivity, groups, ...)
    paired_query: str = ""
    """A second query the child evaluates before each evaluation of ``query``, in the same
    process over the same table (its median latency: ``paired_latency_s``): a ratio of the
    two is free of the process-to-process differences of separate runs."""

    def key(self) -> tuple:
        """Runs with equal keys measure the same thing (measured once, reported twice)."""
        return (self.contender, self.dataset, self.n_events, tuple(sorted(self.data_kwargs.items())),
                self.query, self.paired_query)


@dataclass(frozen=True)
class Experiment:
    id: str
    title: str
    figure: str  # which figure of the report, or which target
    description: str
    x_label: str
    x_log: bool
    build: Callable[[bool], list[Run]]  # quick -> runs
    categorical: bool = False
    opt_in: bool = False  # not part of the default selection

    def runs(self, quick: bool) -> list[Run]:
        return self.build(quick)


# ---------------------------------------------------------------------------
# Queries
# ---------------------------------------------------------------------------

# Report §9.2 (stock, skip-till-any-match, no predicates on adjacent events so that A-Seq
# applies): q3 without its predicate and variable keys, one window.
Q_ANY = """RETURN company, COUNT(*), AVG(B.price)
PATTERN SEQ(Stock A+, Stock B)
SEMANTICS skip-till-any-match
WHERE [company]
GROUP-BY company"""

# Report §9.2 (public transportation, skip-till-next-match): trips of each passenger.
Q_NEXT = """RETURN passenger, COUNT(*), AVG(R.waiting)
PATTERN SEQ(Enter E, (SEQ(Wait W, Ride R))+, Exit X)
SEMANTICS skip-till-next-match
WHERE [passenger]
GROUP-BY passenger"""

# Report §9.2 (physical activity, contiguous): q1 as printed, without its sliding window.
Q_CONT = """RETURN patient, MIN(M.rate), MAX(M.rate)
PATTERN Measurement M+
SEMANTICS contiguous
WHERE [patient] AND M.rate < NEXT(M).rate AND M.activity = passive
GROUP-BY patient"""

# Report §9.3 (stock): a predicate on adjacent events of tunable selectivity.  ``volume``
# is 100 * uniform{1..99}, independent per event, so P(A.volume < NEXT(A).volume + 100k)
# is known exactly (see :func:`volume_offset`).
Q_SELECTIVITY = """RETURN company, COUNT(*), AVG(B.price)
PATTERN SEQ(Stock A+, Stock B)
SEMANTICS skip-till-any-match
WHERE [company] AND A.volume < NEXT(A).volume + {offset}
GROUP-BY company"""

# Report §9.4 (public transportation): one trend group per passenger; A-Seq applies.
Q_GROUPS = """RETURN passenger, COUNT(*), AVG(W.waiting)
PATTERN SEQ(Wait W+, Exit X)
SEMANTICS skip-till-any-match
WHERE [passenger]
GROUP-BY passenger"""

AGGREGATES = {
    "COUNT": "COUNT(*)",
    "SUM": "SUM(A.price)",
    "MIN": "MIN(A.price)",
    "MAX": "MAX(A.price)",
    "AVG": "AVG(A.price)",
}
ALL_AGGREGATES = ", ".join(AGGREGATES.values())

# One large window per executor (the kernel); the mixed-grained executor keeps every
# A event (the predicate reads A), so it runs per company and on fewer events.
KERNEL = {
    "type-grained": "RETURN {aggs}\nPATTERN Stock A+\nSEMANTICS skip-till-any-match",
    "mixed-grained": "RETURN company, {aggs}\nPATTERN Stock A+\nSEMANTICS skip-till-any-match\n"
                     "WHERE [company] AND A.price > NEXT(A).price\nGROUP-BY company",
    "next": "RETURN {aggs}\nPATTERN Stock A+\nSEMANTICS skip-till-next-match",
    "contiguous": "RETURN {aggs}\nPATTERN Stock A+\nSEMANTICS contiguous",
}

Q_SLIDING = """RETURN company, COUNT(*), AVG(A.price)
PATTERN Stock A+
SEMANTICS skip-till-any-match
WHERE [company]
GROUP-BY company
WITHIN 10 minutes{slide}"""

# Peak memory: only about 1% of the events play A (volume = 100), so that counts stay
# moderate and the run is about the per-event work and state, not about huge numbers.
MEMORY = {
    "type-grained": "RETURN COUNT(*), MIN(A.price), MAX(A.price), AVG(A.price)\nPATTERN Stock A+\n"
                    "SEMANTICS skip-till-any-match\nWHERE A.volume = 100",
    "pattern-grained": "RETURN COUNT(*), MIN(A.price), MAX(A.price), AVG(A.price)\nPATTERN Stock A+\n"
                       "SEMANTICS skip-till-next-match\nWHERE A.volume = 100",
}


def volume_offset(selectivity: float) -> tuple[int, float]:
    """The offset ``c`` (a multiple of 100) for which ``A.volume < NEXT(A).volume + c``
    holds for the fraction of pairs closest to ``selectivity``, and that exact fraction."""
    n = 99
    # D = a - b for a, b uniform on 1..99: P(D = d) = (99 - |d|) / 99^2.
    cdf = {}
    acc = 0.0
    for d in range(-(n - 1), n):
        cdf[d + 1] = acc + (n - abs(d)) / n**2  # P(D < d + 1)
        acc = cdf[d + 1]
    k = min(cdf, key=lambda k: abs(cdf[k] - selectivity))
    return 100 * k, cdf[k]


# ---------------------------------------------------------------------------
# The experiments
# ---------------------------------------------------------------------------


def _sizes(quick: bool, full: list[int], fast: list[int]) -> list[int]:
    return fast if quick else full


def _events_runs(exp: str, dataset: str, query: str, contenders: tuple[str, ...], sizes: list[int],
                 semantics: str) -> list[Run]:
    return [
        Run(exp, c, c, n, dataset, n, query, meta={"semantics": semantics})
        for c in contenders for n in sizes
    ]


def _any_events(quick: bool) -> list[Run]:
    sizes = _sizes(quick, [100, 300, 1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000,
                           3_000_000, 10_000_000], [100, 1_000, 10_000])
    return _events_runs("any-events", "stock", Q_ANY, ALL_CONTENDERS, sizes, "any")


def _next_events(quick: bool) -> list[Run]:
    sizes = _sizes(quick, [1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000, 3_000_000,
                           10_000_000], [1_000, 10_000])
    return _events_runs("next-events", "transport", Q_NEXT, ("cogra", "two-step", "greta", "a-seq"),
                        sizes, "next")


def _cont_events(quick: bool) -> list[Run]:
    sizes = _sizes(quick, [1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000, 3_000_000,
                           10_000_000], [1_000, 10_000])
    return _events_runs("cont-events", "activity", Q_CONT, ("cogra", "two-step", "greta", "a-seq"),
                        sizes, "contiguous")


def _selectivity(quick: bool) -> list[Run]:
    n = 5_000 if quick else 50_000
    levels = [0.1, 0.5, 0.9] if quick else [0.1, 0.3, 0.5, 0.7, 0.9]
    runs = []
    for c in ("cogra", "two-step", "greta", "a-seq"):
        for s in levels:
            offset, actual = volume_offset(s)
            runs.append(Run("selectivity", c, c, s, "stock", n, Q_SELECTIVITY.format(offset=offset),
                            meta={"semantics": "any", "selectivity": round(actual, 4)}))
    return runs


def _groups(quick: bool) -> list[Run]:
    n = 5_000 if quick else 50_000
    groups = [30, 10] if quick else [30, 25, 20, 15, 10, 5]  # easy (many groups) to hard
    return [
        Run("groups", c, c, g, "transport", n, Q_GROUPS, data_kwargs={"n_passengers": g},
            meta={"semantics": "any", "groups": g})
        for c in ALL_CONTENDERS for g in groups
    ]


def cogra_python_available() -> bool:
    """Whether :func:`cogra.evaluate` takes ``compiled=`` (pure-Python executors on demand)."""
    import inspect

    import cogra

    return "compiled" in inspect.signature(cogra.evaluate).parameters


def _kernel(quick: bool) -> list[Run]:
    n = 50_000 if quick else 1_000_000
    n_mixed = 5_000 if quick else 50_000
    aggs = {"all": ALL_AGGREGATES} if quick else {**{k: v for k, v in AGGREGATES.items()}, "all": ALL_AGGREGATES}
    contenders = ["cogra"] + (["cogra-py"] if cogra_python_available() else [])
    runs = []
    for c in contenders:
        for executor, template in KERNEL.items():
            series = executor if c == "cogra" else f"{executor} (python)"
            size = n_mixed if executor == "mixed-grained" else n
            if c != "cogra":
                size //= 5  # the pure-Python executors are 10-100x slower (exact big numbers)
            for label, items in aggs.items():
                runs.append(Run("kernel", series, c, label, "stock", size, template.format(aggs=items),
                                meta={"semantics": executor}))
    return runs


def _mixed_vs_greta(quick: bool) -> list[Run]:
    n = 5_000 if quick else 50_000
    offset, actual = volume_offset(0.5)
    q = Q_SELECTIVITY.format(offset=offset)
    return [Run("mixed-vs-greta", c, c, n, "stock", n, q, meta={"semantics": "any", "selectivity": round(actual, 4)})
            for c in ("cogra", "greta")]


SLIDING_RATES = (10, 100)
"""Events per second of the stock stream (19 companies).  At 10/s a company ticks about
every 2 s, so ``SLIDE 1 second`` has more output rows than input events; at 100/s the
per-event work dominates.  Both are reported."""


def _sliding(quick: bool) -> list[Run]:
    """Each query in a process of its own (the plots), and both in one process, tumbling and
    sliding in turn (``paired``: the ratio the target is about, without the difference
    between two processes -- on the AMD VM a process runs at one of two speeds, ~15%
    apart, which alone moved the separate runs' ratio from ~2.5 to ~3.6)."""
    sizes = [2_000] if quick else [100_000, 1_000_000]
    runs = []
    tumbling, sliding = Q_SLIDING.format(slide=""), Q_SLIDING.format(slide=" SLIDE 1 second")
    for rate in SLIDING_RATES:
        for label, query, paired in (("tumbling", tumbling, ""), ("sliding", sliding, ""),
                                     ("paired", sliding, tumbling)):
            for n in sizes:
                runs.append(Run("sliding", f"{label}, {rate}/s", "cogra", n, "stock", n, query,
                                data_kwargs={"rate": float(rate)}, meta={"semantics": "any", "rate": rate},
                                paired_query=paired))
    return runs


def _memory(quick: bool) -> list[Run]:
    """cogra.evaluate on the whole table, and cogra.evaluate_batches on 100k-row batches of
    it (the input table is built before the measurement starts in both).  Steady state:
    warmed up on the whole input, glibc with a fixed mmap threshold (see runner)."""
    sizes = [20_000, 200_000] if quick else [1_000_000, 10_000_000]
    return [Run("memory", executor + suffix, contender, n, "stock", n, q,
                meta={"semantics": executor, "steady_state": True})
            for contender, suffix in (("cogra", ""), ("cogra-stream", " (stream)"))
            for executor, q in MEMORY.items() for n in sizes]


def _spark(quick: bool) -> list[Run]:
    sizes = [10_000] if quick else [10_000, 100_000, 1_000_000]
    return [Run("spark-e2e", c, c, n, "stock", n, Q_ANY, meta={"semantics": "any"})
            for c in ("spark", "cogra") for n in sizes]


EXPERIMENTS: dict[str, Experiment] = {e.id: e for e in [
    Experiment(
        "any-events", "Skip-till-any-match: events per window (stock)",
        "report §9.2, figures \"Skip-till-any-match semantics\" (all approaches; online approaches)",
        "Vary the number of events per window under skip-till-any-match on the stock data "
        "(19 companies, one trend group each). No predicates on adjacent events, so that every "
        "contender applies.",
        "events per window", True, _any_events),
    Experiment(
        "next-events", "Skip-till-next-match: events per window (public transportation)",
        "report §9.2, figure \"Skip-till-next-match semantics\"",
        "Vary the number of events per window under skip-till-next-match on the public "
        "transportation data (30 passengers): the trips of each passenger. GRETA and A-Seq do "
        "not support this semantics (shown as n/a).",
        "events per window", True, _next_events),
    Experiment(
        "cont-events", "Contiguous: events per window (physical activity)",
        "report §9.2, figure \"Contiguous semantics\"",
        "Vary the number of events per window under the contiguous semantics on the physical "
        "activity data (14 patients): q1 without its sliding window.",
        "events per window", True, _cont_events),
    Experiment(
        "selectivity", "Predicate selectivity (stock)",
        "report §9.3, figure \"Predicate selectivity\"",
        "Vary the selectivity of a predicate on adjacent events (the fraction of (A, NEXT(A)) "
        "pairs it admits) at a fixed number of events per window. A-Seq does not support such "
        "predicates (n/a).",
        "predicate selectivity", False, _selectivity),
    Experiment(
        "groups", "Event trend grouping (public transportation)",
        "report §9.4, figure \"Event trend grouping\"",
        "Vary the number of trend groups (passengers) at a fixed number of events per window.",
        "number of trend groups", False, _groups),
    Experiment(
        "kernel", "Kernel throughput of one large window, per executor",
        "target: events/s per executor and aggregate",
        "One large window (no WITHIN, no grouping) evaluated by each executor, per aggregate "
        "function and with all five at once. The mixed-grained executor keeps every A event, "
        "so its query is partitioned by company and runs on fewer events.",
        "aggregate", False, _kernel, categorical=True),
    Experiment(
        "mixed-vs-greta", "Mixed-grained vs GRETA (any + adjacent predicate, 50% selectivity)",
        "target: cogra >= 10x faster than GRETA",
        "The selectivity query at 50% selectivity: cogra's mixed-grained executor against the "
        "event-grained GRETA baseline.",
        "events per window", True, _mixed_vs_greta),
    Experiment(
        "sliding", "Sliding vs tumbling windows",
        "target: WITHIN 10 minutes SLIDE 1 second <= 3x the tumbling query",
        "The same type-grained query with tumbling 10-minute windows and with 10-minute windows "
        "sliding every second (600 windows per event), on stock streams of 10 and 100 events/s. "
        "Each query runs in a process of its own; the 'paired' series runs both in one process, "
        "the tumbling query before each sliding call, and its headline ratio is the two medians' "
        "(separate processes on a VM may run at different speeds).",
        "events", True, _sliding),
    Experiment(
        "memory", "Peak memory at 1M vs 10M events per window",
        "target: flat within 10% for type- and pattern-grained",
        "Peak memory of one window holding all events, type-grained (any) and pattern-grained "
        "(next) executors; about 1% of the events play A. cogra.evaluate over the whole table, "
        "and cogra.evaluate_batches (the streaming engine) over 100k-row batches of it (\"(stream)\"). "
        "The input table exists before the measurement in both; steady state: each run is "
        "warmed up on its whole input, with glibc's mmap threshold fixed at 128 KiB so that "
        "freed blocks leave the RSS.",
        "events per window", True, _memory),
    Experiment(
        "spark-e2e", "Spark end to end (hook)",
        "hook for the Spark integration's numbers",
        "cogra through Spark (MATCH_TREND via cogra.spark.match_trend, local session, ANSI off) "
        "against the in-process engine. The spark latency covers creating the DataFrame from the "
        "Arrow table, the query and collect(); memory is the Python driver's only. Skipped with a "
        "message when pyspark, Java or the shim is unavailable. Opt-in: --experiments spark-e2e. "
        "A placeholder for the Spark integration's own numbers.",
        "events per window", True, _spark, opt_in=True),
]}


def select(ids: str | None) -> list[Experiment]:
    """The experiments named in ``ids`` ("a,b"; "all" for every one), default: all but opt-in."""
    if not ids:
        return [e for e in EXPERIMENTS.values() if not e.opt_in]
    if ids.strip() == "all":
        return list(EXPERIMENTS.values())
    out = []
    for name in (s.strip() for s in ids.split(",")):
        if not name:
            continue
        if name not in EXPERIMENTS:
            raise ValueError(f"unknown experiment {name!r}; choose from {', '.join(EXPERIMENTS)}")
        out.append(EXPERIMENTS[name])
    return out
