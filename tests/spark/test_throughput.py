"""cogra.spark.throughput: what it times (MATCH_TREND and the pass-through over the same
input, in rounds) and how it turns the runs into rates and a ratio."""

from __future__ import annotations

import statistics

import pyarrow.parquet as pq

from cogra.spark import throughput as tp


def test_a_round_pairs_the_runs_and_the_ratio_is_their_median() -> None:
    m = tp.Measurement("local[1]", "q3", rows=1000, result_rows=10,
                       match_trend_times=(2.0, 1.0, 4.0, 1.0), passthrough_times=(1.0, 0.9, 1.0, 0.5),
                       engine_s=0.5)
    assert m.pair_ratios == [0.5, 0.9, 0.25, 0.5]
    assert m.ratio == 0.5  # not the medians' ratio: 0.95 / 1.5
    assert m.ratio_spread == (0.4375, 0.6)
    assert m.match_trend_rate == 1000 / 1.5 and m.passthrough_rate == 1000 / 0.95
    one = tp.Measurement("local[1]", "q3", 10, 1, (2.0,), (1.0,), 1.0)
    assert one.ratio == 0.5 and one.ratio_spread == (0.5, 0.5)


def test_measure_runs_both_plans_over_the_same_rows(spark, tmp_path) -> None:
    import cogra

    w = tp.workloads()["q3"]
    path = tp.write_data(w, 3000, tmp_path)
    table = pq.read_table(path)
    assert tp.passthrough_frame(spark, path, w.query).count() == table.num_rows
    m = tp.measure(spark, "local[2]", w, path, repeat=3, engine_s=1.0)
    assert m.rows == table.num_rows == 3000
    assert m.result_rows == cogra.evaluate(w.query, table).num_rows > 0
    assert len(m.match_trend_times) == len(m.passthrough_times) == 3
    assert m.ratio == statistics.median(p / t for t, p in zip(m.match_trend_times, m.passthrough_times))
