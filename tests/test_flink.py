"""Flink CEP as a benchmark contender: a real Flink job (local mini-cluster, the project's
own harness compiled against the ``apache-flink-libraries`` jars) must give cogra's
results where the semantics agree, and differ where docs/language.md (Event matching
semantics) says Flink's patterns are not skip-till-next-match."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

import cogra
from cogra import datasets
from cogra.bench import experiments as ex
from cogra.bench import flink_cep, readme
from cogra.bench.flink import FlinkCep, FlinkUnavailable, flink_lib, translate
from cogra.reference import evaluate_reference

try:
    flink_lib()
    HAVE_FLINK = True
except FlinkUnavailable:
    HAVE_FLINK = False
needs_flink = pytest.mark.skipif(not HAVE_FLINK, reason="cogra[bench-flink] is not installed")


@pytest.fixture(scope="module")
def flink():
    with FlinkCep() as f:
        yield f


def _rows(table: pa.Table, keys: list[str]) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: tuple(str(r[k]) for k in keys))


def _same(a: pa.Table, b: pa.Table, keys: list[str]) -> None:
    ra, rb = _rows(a, keys), _rows(b, keys)
    assert len(ra) == len(rb) > 0
    for x, y in zip(ra, rb):
        assert x.keys() == y.keys()
        for k in y:
            if isinstance(y[k], (int, float)) and not isinstance(y[k], bool):
                assert math.isclose(x[k], y[k], rel_tol=1e-9), (k, x, y)
            else:
                assert x[k] == y[k], (k, x, y)


CASES = [
    ("any, q3 without its predicate", "stock", 40, {}, ex.Q_ANY, ["company"]),
    ("contiguous, q1 without its window", "activity", 3_000, {}, ex.Q_CONT, ["patient"]),
    ("any, a predicate on adjacent events", "stock", 60, {}, ex.Q_SELECTIVITY.format(offset=ex.volume_offset(0.5)[0]),
     ["company"]),
    ("any, trend groups", "transport", 300, {"n_passengers": 30}, ex.Q_GROUPS, ["passenger"]),
]


@needs_flink
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_flink_gives_cogras_results_where_the_semantics_agree(flink: FlinkCep, case: tuple) -> None:
    _, dataset, n, kwargs, query, keys = case
    table = datasets.by_name(dataset, n, seed=3, **kwargs)
    _same(flink.evaluate(query, table), cogra.evaluate(query, table), keys)
    assert flink.last_job_s is not None and flink.last_job_s > 0
    assert flink.start_s > 0


@needs_flink
def test_events_of_one_timestamp_are_never_adjacent_in_flink_either(flink: FlinkCep) -> None:
    table = pa.table({"type": ["A", "A", "B", "A", "B"], "time": [1, 1, 2, 3, 3]})
    query = "RETURN COUNT(*), SUM(A.time)\nPATTERN SEQ(A+, B)\nSEMANTICS skip-till-any-match"
    ours = cogra.evaluate(query, table)
    assert ours.column("COUNT(*)").to_pylist() == evaluate_reference(query, table).column("COUNT(*)").to_pylist()
    _same(flink.evaluate(query, table), ours, [])


@needs_flink
def test_flinks_closest_next_pattern_is_not_skip_till_next_match(flink: FlinkCep) -> None:
    """SEQ(A+, B) on a1 a2 b3 under skip-till-next-match: a1's trend must take a2, so the
    trends are (a1 a2 b3) and (a2 b3); Flink's oneOrMore()/followedBy also gives (a1 b3)."""
    table = pa.table({"type": ["A", "A", "B"], "time": [1, 2, 3]})
    query = "RETURN COUNT(*)\nPATTERN SEQ(A+, B)\nSEMANTICS skip-till-next-match"
    assert cogra.evaluate(query, table).column("COUNT(*)").to_pylist() == [2]
    assert evaluate_reference(query, table).column("COUNT(*)").to_pylist() == [2]
    assert flink.evaluate(query, table, allow_next=True).column("COUNT(*)").to_pylist() == [3]
    with pytest.raises(NotImplementedError, match="skip-till-next-match"):
        translate(query, table)


def test_an_attribute_with_nulls_is_refused() -> None:
    table = pa.table({"type": ["A", "B"], "time": [1, 2], "x": pa.array([1.0, None])})
    with pytest.raises(NotImplementedError, match="NULLs"):
        translate("RETURN SUM(A.x)\nPATTERN SEQ(A+, B)\nSEMANTICS skip-till-any-match", table)


@pytest.mark.parametrize("query, why", [
    ("RETURN COUNT(*)\nPATTERN A+\nSEMANTICS skip-till-any-match\nWITHIN 10 seconds", "WITHIN"),
    ("RETURN COUNT(*)\nPATTERN SEQ(A, NOT N, B)\nSEMANTICS skip-till-any-match", "variables"),
    ("RETURN COUNT(*)\nPATTERN SEQ(A, B*)\nSEMANTICS skip-till-any-match", "variables"),
    ("RETURN COUNT(*)\nPATTERN SEQ(A+, B)\nSEMANTICS skip-till-any-match\nWHERE [A.g]", "variable keys"),
    ("RETURN COUNT(*)\nPATTERN SEQ(A+, B)\nSEMANTICS skip-till-any-match\nWHERE A.s < NEXT(A).s", "not a number"),
])
def test_what_the_harness_cannot_run_is_reported_not_approximated(query: str, why: str) -> None:
    from cogra.bench.runner import applicable

    table = pa.table({"type": pa.array([], pa.string()), "time": pa.array([], pa.int64()),
                      "g": pa.array([], pa.int64()), "s": pa.array([], pa.string())})
    with pytest.raises(NotImplementedError, match=why):
        translate(query, table)
    assert why in (applicable("flink", query, table.schema) or "")


@needs_flink
def test_a_benchmark_run_reports_the_jvm_start_apart() -> None:
    from cogra.bench.experiments import Run
    from cogra.bench.runner import Limits, measure

    run = Run("any-events", "flink", "flink", 30, "stock", 30, ex.Q_ANY)
    out = measure(run, Limits(time_limit=120, setup_limit=300, tracemalloc=False))
    assert out.status == "ok", out.message
    assert "jvm_start_s=" in out.engine_stats and "job_s=" in out.engine_stats
    ours = cogra.evaluate(ex.Q_ANY, datasets.by_name("stock", 30, seed=0))
    assert out.result_digest == f"count={sum(ours.column('COUNT(*)').to_pylist()):.6g}"


def test_the_section_and_the_readme_row_come_from_the_measured_rows(tmp_path) -> None:
    def row(series: str, x: object, seconds: float | None, status: str = "ok", digest: str = "count=5") -> dict:
        return {"experiment": "any-events", "series": series, "x": x, "n_events": x, "status": status,
                "message": "", "latency_s": seconds, "result_digest": digest,
                "engine_stats": "jvm_start_s=0.5 job_s=1.9" if series == "flink" else ""}

    result = {"quick": False, "date": "today", "cores": 2, "time_limit": 120.0,
              "rows": [row("cogra", 20, 0.002), row("flink", 20, 2.0), row("cogra", 40, 0.004),
                       row("flink", 40, 6.0), row("cogra", 60, 0.005), row("flink", 60, None, "DNF", "")],
              "next": {"events": 100, "cogra": 7, "reference": 7, "flink": 9, "empty_job_s": 1.0}}
    (tmp_path / "benchmarks.md").write_text("# Benchmarks\n\n## Files\n")
    flink_cep.write_report(result, tmp_path)
    md = (tmp_path / "benchmarks.md").read_text()
    assert "| x=40 | 4 ms | 6 s | 1,500x | 1,250x | DNF from x=60 | yes |" in md
    assert "cogra 7 trends (the two-step reference 7), Flink 9 matches" in md
    assert readme.flink_span(md) == "1,500x"
    assert ("cogra vs Flink CEP (report §9 queries, any and contiguous; at the largest size Flink finished)",
            "1,500x faster", "(report: cogra wins)") in readme.rows(md)
