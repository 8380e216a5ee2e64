"""MATCH_TREND through ``spark.sql`` at the sizes users run equals :func:`cogra.evaluate`.

The random queries of ``tests.strategies`` (every pattern operator, semantics, predicate
class, grouping, window and aggregate) run over generated tables of 50,000 rows: 40 plain
key values ``g`` (a sub-stream of ~1,250 rows each), equivalence values ``h``, a column
``p`` for a user's ``PARTITION BY``, irrelevant events, NULLs and timestamp ties.  At
this size a task's Python worker takes the routes small inputs never reach: complete key
groups in several chunks per task, an open group evaluated a time slice at a time, and
batches pushed through the streaming evaluation (docs/ARCHITECTURE.md, "The worker's
routes").

Each case runs under one combination of

* ``spark.sql.shuffle.partitions`` 1, 3 or 8 (a task holds one key group, several, or all),
* ``spark.cogra.worker.route`` auto, chunked, sliced or streamed (each route forced),
* with or without ``PARTITION BY p`` after ``TABLE(...)`` (expected: each ``p`` evaluated
  on its own),
* and, by construction, a plain GROUP-BY key ``g`` in every other case and an
  equivalence key ``[h]`` outside GROUP-BY in every third,

and its rows must equal ``cogra.evaluate``'s (on_overflow ``null``, as Spark's non-ANSI
mode: unwindowed sub-streams of 1,250 events count past 2**63).
``test_the_cases_reach_every_route`` checks, with the worker's own decision
(``udtf_routing.partition_route``), that the default cases reach every route.
"""

from __future__ import annotations

import functools
import json
import warnings
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

pytest.importorskip("pyspark")

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

import cogra  # noqa: E402
from cogra.spark import udtf  # noqa: E402
from cogra.spark import udtf_analysis  # noqa: E402
from cogra.spark import udtf_routing  # noqa: E402
from tests.spark.rows import group_by_g, same_rows, sort_key, sql_literal  # noqa: E402
from tests.strategies import queries  # noqa: E402

pytestmark = pytest.mark.spark

N_ROWS = 50_000
N_G = 40
N_P = 7
EVENTS_PER_SECOND = 20  # per g: ~0.5 a second, a few events per window of 2-6 seconds
COLUMNS = ("type", "time", "v", "w", "g", "k", "h", "p")
SHUFFLE_PARTITIONS = (1, 3, 8)
ROUTES = ("auto", "chunked", "sliced", "streamed")
#: Forced routes evaluate in small chunks and slices, so that a task makes many calls.
FORCED = {udtf_routing.CHUNK_ROWS_SETTING: "3000", udtf_routing.SLICE_ROWS_SETTING: "400"}
DEFAULT_PER_COMBINATION = 2
SLOW_PER_COMBINATION = 6


def scaled_events(n: int, types: tuple[str, ...], seed_: int) -> pa.Table:
    """``n`` events mostly of ``types`` (and the irrelevant ``X``), in time order with ties."""
    rng = np.random.default_rng(seed_)
    names = np.array([*types, "X"], dtype=object)
    weights = np.array([3.0] * len(types) + [1.0])
    kind = names[rng.choice(len(names), n, p=weights / weights.sum())]
    time = np.sort(rng.integers(0, n // EVENTS_PER_SECOND, n))
    time_valid = rng.random(n) > 0.001
    lowest = -3 if seed_ % 3 == 0 else 0  # some tables hold negative v (see strategies.streams)
    v = rng.integers(lowest, 5, n)
    w = np.array([0.5, 1.25, -2.0, 3.0])[rng.integers(0, 4, n)]
    h = rng.integers(0, 3, n)
    return pa.table({
        "type": pa.array(kind.tolist(), pa.string()),
        "time": pa.array(time, pa.int64(), mask=~time_valid),
        "v": pa.array(v, pa.int64(), mask=rng.random(n) < 0.1),
        "w": pa.array(w, pa.float64(), mask=rng.random(n) < 0.1),
        "g": pa.array(rng.integers(0, N_G, n), pa.int64()),
        "k": pa.array(np.array(["p", "q"], dtype=object)[rng.integers(0, 2, n)].tolist(), pa.string()),
        "h": pa.array(h, pa.int64(), mask=rng.random(n) < 0.05),
        "p": pa.array(rng.integers(0, N_P, n), pa.int64()),
    })


def with_equivalence_h(text: str) -> str:
    """The query with ``[h]`` among its WHERE conjuncts (an equivalence outside GROUP-BY)."""
    if "[h]" in text:
        return text
    lines = text.split("\n")
    where = [i for i, line in enumerate(lines) if line.startswith("WHERE ")]
    if where:
        lines[where[0]] += " AND [h]"
    else:
        at = next(i for i, line in enumerate(lines) if line.startswith("SEMANTICS ")) + 1
        lines.insert(at, "WHERE [h]")
    return "\n".join(lines)


@dataclass(frozen=True)
class ScaleCase:
    query: str
    seed: int
    shuffle_partitions: int
    route: str
    partition_by: bool

    @functools.cached_property
    def table(self) -> pa.Table:
        return scaled_events(N_ROWS, cogra.parse(self.query).event_types, self.seed)

    def describe(self) -> str:
        return (f"query:\n{self.query}\nseed {self.seed}, shuffle partitions {self.shuffle_partitions}, "
                f"route {self.route}, PARTITION BY p: {self.partition_by}")


@functools.lru_cache(maxsize=None)
def draw_cases(per_combination: int, random_seed: int) -> tuple[ScaleCase, ...]:
    """``per_combination`` cases for every (shuffle partitions, route), the same on every
    run; every other case keyed by ``g``, every third with ``[h]``, every fourth (and
    fourth but one) under ``PARTITION BY p``."""
    combinations = [(n, r) for n in SHUFFLE_PARTITIONS for r in ROUTES]
    texts: list[str] = []

    @seed(random_seed)
    @settings(max_examples=per_combination * len(combinations) * 2, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(queries())
    def collect(q) -> None:
        texts.append(q.text)

    collect()
    cases = []
    for i, text in enumerate(texts[:per_combination * len(combinations)]):
        if i % 2 == 0 or ("WITHIN" not in text and "GROUP-BY g" not in text):
            text = group_by_g(text)  # (an unkeyed query without windows is one 50k-row call)
        if i % 3 == 0:
            text = with_equivalence_h(text)
        n, route = combinations[i % len(combinations)]
        cases.append(ScaleCase(text, random_seed * 1000 + i, n, route, partition_by=i % 4 in (1, 2)))
    return tuple(cases)


def expected_rows(case: ScaleCase) -> list[tuple]:
    """cogra.evaluate's rows (each ``p`` on its own under PARTITION BY)."""
    table = case.table
    parts = [table.filter(pc.equal(table["p"], p)) for p in range(N_P)] if case.partition_by else [table]
    rows: list[tuple] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        for part in parts:
            result = cogra.evaluate(case.query, part, on_overflow="null")
            rows += [tuple(r.values()) for r in result.to_pylist()]
    return rows


@pytest.fixture(scope="module")
def scale_conf(spark):
    """Non-ANSI (an overflow is NULL), no coalescing of shuffle partitions, Arrow batches
    that cut key groups; restored afterwards."""
    base = {
        "spark.sql.ansi.enabled": "false",
        "spark.sql.adaptive.coalescePartitions.enabled": "false",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "1000",
    }
    keys = [*base, "spark.sql.shuffle.partitions", udtf_routing.ROUTE_SETTING, *FORCED]
    previous = {k: spark.conf.get(k, None) for k in keys}
    for k, v in base.items():
        spark.conf.set(k, v)
    yield spark
    for k, v in previous.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


@pytest.fixture(autouse=True, scope="module")
def generic_kernels_in_process():
    """The expected side keeps to the generic kernels too (no per-shape compiles)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("COGRA_GENERATED_KERNELS", "0")
    yield
    mp.undo()


def run_combination(spark, cases: list[ScaleCase]) -> int:
    """One statement (UNION ALL of the cases' calls) under the cases' settings; returns how
    many cases have no result rows."""
    first = cases[0]
    spark.conf.set("spark.sql.shuffle.partitions", str(first.shuffle_partitions))
    spark.conf.set(udtf_routing.ROUTE_SETTING, first.route)
    for k, v in FORCED.items():
        if first.route == "auto":
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)
    view = "cogra_scale_cases"
    tables = [c.table.select(list(COLUMNS)).append_column("case_id", pa.array([i] * N_ROWS, pa.int32()))
              for i, c in enumerate(cases)]
    spark.createDataFrame(pa.concat_tables(tables).combine_chunks()).createOrReplaceTempView(view)

    def call(i: int, case: ScaleCase) -> str:
        partition = " PARTITION BY (p)" if case.partition_by else ""
        return (f"SELECT {i} AS case_id, to_json(struct(*), map('ignoreNullFields', 'false')) AS row "
                f"FROM MATCH_TREND(TABLE(SELECT {', '.join(COLUMNS)} FROM {view} WHERE case_id = {i})"
                f"{partition}, {sql_literal(case.query)})")

    def collect(statement: str) -> dict[int, list[tuple]]:
        out: dict[int, list[tuple]] = {}
        for r in spark.sql(statement).collect():
            out.setdefault(r["case_id"], []).append(tuple(json.loads(r["row"]).values()))
        return out

    try:
        results = collect("\nUNION ALL\n".join(call(i, c) for i, c in enumerate(cases)))
    except Exception:
        for i, case in enumerate(cases):  # name the case that fails
            try:
                collect(call(i, case))
            except Exception as e:
                raise AssertionError(f"MATCH_TREND failed: {e}\n{case.describe()}") from None
        raise
    empty = 0
    for i, case in enumerate(cases):
        got, want = results.get(i, []), expected_rows(case)
        empty += not want
        assert same_rows(got, want), (
            f"{len(got)} rows, {len(want)} expected; first differences:\n"
            f"got  {sorted(got, key=sort_key)[:5]}\nwant {sorted(want, key=sort_key)[:5]}\n{case.describe()}")
    return empty


def combinations_of(cases: tuple[ScaleCase, ...]) -> list[list[ScaleCase]]:
    groups: dict[tuple[int, str], list[ScaleCase]] = {}
    for c in cases:
        groups.setdefault((c.shuffle_partitions, c.route), []).append(c)
    return list(groups.values())


def combination_id(group: list[ScaleCase]) -> str:
    return f"{group[0].shuffle_partitions}-partitions-{group[0].route}"


DEFAULT = combinations_of(draw_cases(DEFAULT_PER_COMBINATION, 2026))
SLOW = combinations_of(draw_cases(SLOW_PER_COMBINATION, 11))


@pytest.mark.parametrize("cases", DEFAULT, ids=[combination_id(g) for g in DEFAULT])
def test_sql_equals_evaluate_at_scale(scale_conf, cases):
    assert run_combination(scale_conf, cases) < len(cases), "no case of this combination has a result row"


@pytest.mark.slow
@pytest.mark.parametrize("cases", SLOW, ids=[combination_id(g) for g in SLOW])
def test_sql_equals_evaluate_at_scale_more(scale_conf, cases):
    run_combination(scale_conf, cases)


def test_the_cases_reach_every_route():
    """Every route is taken by some default case, as the worker decides it; and the cases
    cover keys inside and outside GROUP-BY, with and without PARTITION BY."""
    reached = set()
    for group in DEFAULT:
        for case in group:
            schema = case.table.select([c for c in COLUMNS if c != "p" or case.partition_by]).schema
            keys = ["p"] if case.partition_by else []
            query = udtf.with_partition_keys(case.query, keys)
            result = udtf_analysis.CograAnalyzeResult(schema=StructType(), query=case.query,
                                             key_columns=udtf_analysis.plain_group_keys(case.query))
            settings_ = udtf_routing.WorkerSettings.of({udtf_routing.ROUTE_SETTING: case.route, **FORCED})
            route, _ = udtf_routing.partition_route(result, query, schema, settings_,
                                            sorted_by=[*keys, *result.key_columns], on_overflow="null")
            reached.add(route)
    assert reached == set(udtf_routing.Route)
    cases = [c for g in DEFAULT for c in g]
    assert any(c.partition_by for c in cases) and not all(c.partition_by for c in cases)
    assert any("GROUP-BY g" in c.query for c in cases)
    assert any("[h]" in c.query and "GROUP-BY g" not in c.query for c in cases)
    assert any("[h]" in c.query and "GROUP-BY g" in c.query for c in cases)
