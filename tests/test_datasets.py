"""cogra.datasets: deterministic, correctly shaped streams and the a1-b2 notation."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from cogra import datasets
from cogra.datasets import events

N = 5_000

SCHEMAS = {
    "stock": {"type": pa.string(), "time": pa.int64(), "company": pa.string(),
              "sector": pa.string(), "transaction": pa.int64(), "kind": pa.string(),
              "volume": pa.int64(), "price": pa.float64()},
    "activity": {"type": pa.string(), "time": pa.int64(), "patient": pa.int64(),
                 "activity": pa.string(), "activity_name": pa.string(),
                 "activity_id": pa.int64(), "rate": pa.int64()},
    "rides": {"type": pa.string(), "time": pa.int64(), "driver": pa.int64()},
    "transport": {"type": pa.string(), "time": pa.int64(), "passenger": pa.int64(),
                  "station": pa.int64(), "waiting": pa.int64()},
}


@pytest.fixture(scope="module", params=datasets.NAMES)
def name(request):
    return request.param


@pytest.fixture(scope="module")
def table(name):
    return datasets.by_name(name, N)


def distinct(table, column):
    return set(table[column].to_pylist())


def test_names_and_schemas(name, table):
    assert set(datasets.NAMES) == set(SCHEMAS)
    assert dict(zip(table.schema.names, table.schema.types)) == SCHEMAS[name]
    assert table.num_rows == N
    assert all(table[c].null_count == 0 for c in table.column_names)


def test_time_non_decreasing_with_ties(table):
    time = table["time"].to_numpy()
    assert np.all(np.diff(time) >= 0)
    assert time[0] >= 0


def test_deterministic(name, table):
    assert datasets.by_name(name, N, seed=0).equals(table)
    assert not datasets.by_name(name, N, seed=1).equals(table)


@pytest.mark.parametrize("n", [0, 1, 7, 1234])
def test_sizes(name, n):
    t = datasets.by_name(name, n)
    assert t.num_rows == n
    assert dict(zip(t.schema.names, t.schema.types)) == SCHEMAS[name]


def test_unknown_name():
    with pytest.raises(ValueError, match="unknown data set"):
        datasets.by_name("nope", 10)


def test_stock():
    t = datasets.stock(20_000)
    assert distinct(t, "type") == {"Stock"}
    assert len(distinct(t, "company")) == 19
    assert len(distinct(t, "sector")) == 10
    pairs = set(zip(t["company"].to_pylist(), t["sector"].to_pylist()))
    assert len(pairs) == 19  # each company in exactly one sector
    assert datasets.stock(100, seed=5)["sector"].to_pylist() == [
        f"S{int(c[1:]) % 10:02d}" for c in datasets.stock(100, seed=5)["company"].to_pylist()]
    assert distinct(t, "kind") == {"buy", "sell"}
    assert t["transaction"].to_pylist() == list(range(1, 20_001))
    assert pc.min(t["volume"]).as_py() > 0 and pc.min(t["price"]).as_py() > 0
    assert len(set(t["time"].to_pylist())) < t.num_rows  # ticks share seconds
    # A.price > NEXT(A).price about half the time between a company's consecutive ticks.
    falls = []
    for c in distinct(t, "company"):
        p = t.filter(pc.equal(t["company"], c))["price"].to_numpy()
        falls.append(np.mean(p[:-1] > p[1:]))
    assert 0.4 < np.mean(falls) < 0.6


def test_activity():
    t = datasets.activity(20_000)
    assert distinct(t, "type") == {"Measurement"}
    assert distinct(t, "patient") == set(range(1, 15))
    names = distinct(t, "activity_name")
    assert names == set(datasets.ACTIVITIES) and len(names) == 18
    assert distinct(t, "activity") == {"passive", "active"}
    for n, c, i in zip(t["activity_name"].to_pylist(), t["activity"].to_pylist(),
                       t["activity_id"].to_pylist()):
        assert (c == "passive") == (n in datasets.PASSIVE) and datasets.ACTIVITIES[i - 1] == n
    rate = t["rate"].to_numpy()
    passive = pc.equal(t["activity"], "passive").to_numpy(zero_copy_only=False)
    assert 40 <= rate.min() and rate.max() <= 200
    assert rate[passive].mean() + 20 < rate[~passive].mean()
    # A person keeps an activity for a stretch, and the rate both rises and falls.
    one = t.filter(pc.equal(t["patient"], 1))
    acts = one["activity_name"].to_pylist()
    assert sum(a != b for a, b in zip(acts, acts[1:])) < len(acts) / 50
    steps = np.diff(one["rate"].to_numpy())
    assert np.mean(steps > 0) > 0.25 and np.mean(steps < 0) > 0.25
    assert len(distinct(datasets.activity(2000, n_activities=4), "activity_name")) == 4


def test_rides():
    t = datasets.rides(20_000, n_drivers=20)
    assert distinct(t, "type") == {"Accept", "Call", "Cancel", "Finish", "InTransit", "DropOff"}
    assert distinct(t, "driver") == set(range(1, 21))
    # Drivers interleave from the start.
    assert len(distinct(t.slice(0, 200), "driver")) > 10
    texts = []
    for d in range(1, 21):
        one = t.filter(pc.equal(t["driver"], d))
        assert np.all(np.diff(one["time"].to_numpy()) > 0)
        types = [x for x in one["type"].to_pylist() if x not in ("InTransit", "DropOff")]
        trips = " ".join(types).split("Accept")[1:]
        assert len(trips) > 10
        for trip in trips[:-1]:  # the last one may be cut off
            steps = trip.split()
            assert steps[-1] == "Finish" and "Call" in steps and "Finish" not in steps[:-1]
        texts.append(" ".join(types))
    # Mostly Call then Cancel, with some missing or out-of-order Cancels.
    text = " ".join(texts)
    assert text.count("Call Cancel") > 0.7 * text.count("Call")
    assert text.count("Accept Cancel Call") > 0
    assert text.count("Call Call") + text.count("Call Finish") > 0


def test_transport():
    t = datasets.transport(20_000)
    assert distinct(t, "type") == {"Enter", "Wait", "Ride", "Exit"}
    assert distinct(t, "passenger") == set(range(1, 31))
    station = t["station"].to_numpy()
    assert station.min() >= 1 and station.max() <= 100 and len(set(station)) > 90
    waiting = t["waiting"].to_numpy()
    assert waiting.min() >= 0 and waiting.max() <= 600
    assert 250 < waiting.mean() < 350  # uniform on [0, 600]
    one = t.filter(pc.equal(t["passenger"], 3)).to_pylist()
    for prev, e in zip(one, one[1:]):
        if e["type"] == "Ride":  # boards where and when its Wait said
            assert prev["type"] == "Wait" and prev["station"] == e["station"]
            assert e["time"] - prev["time"] == prev["waiting"] == e["waiting"]
        if e["type"] == "Wait" and prev["type"] == "Enter":
            assert e["station"] == prev["station"]
        if prev["type"] == "Ride":  # then travels to another station
            assert e["type"] in ("Wait", "Exit") and e["station"] != prev["station"]


def test_parameters():
    t = datasets.stock(3000, n_companies=5, n_sectors=2, start=1_000_000)
    assert len(distinct(t, "company")) == 5 and len(distinct(t, "sector")) == 2
    assert pc.min(t["time"]).as_py() == 1_000_000
    assert len(distinct(datasets.transport(3000, n_passengers=4, n_stations=3), "station")) == 3
    assert distinct(datasets.activity(1000, n_people=3), "patient") == {1, 2, 3}
    with pytest.raises(ValueError):
        datasets.stock(10, n_companies=0)
    with pytest.raises(ValueError):
        datasets.activity(10, n_activities=19)


def test_write_parquet(tmp_path):
    import pyarrow.parquet as pq

    paths = datasets.write_parquet(tmp_path, 50, names=["rides", "stock"])
    assert paths["stock"] == tmp_path / "stock" / "part-00000.parquet"
    assert pq.read_table(paths["rides"]).equals(datasets.rides(50))


# ------------------------------------------------------------------ events() notation


def test_events_notation():
    t = events("a1 b2 a3 a4 c5 b6 a7 b8")
    assert t.schema.names == ["type", "time"]
    assert t["type"].to_pylist() == list("ABAACBAB")
    assert t["time"].to_pylist() == [1, 2, 3, 4, 5, 6, 7, 8]
    assert t.schema.field("time").type == pa.int64()


def test_events_attributes():
    t = events("a1 b2", v={"b2": 1})
    assert t.to_pydict() == {"type": ["A", "B"], "time": [1, 2], "v": [None, 1]}
    t = events("a1, b2 x3", price=[1.5, 2.0, None], company={"a1": "C", "x3": "D"})
    assert t["price"].to_pylist() == [1.5, 2.0, None]
    assert t["company"].to_pylist() == ["C", None, "D"]


def test_events_edge_cases():
    assert events("Stock10 Stock10")["type"].to_pylist() == ["STOCK", "STOCK"]  # ties
    assert events("b2 a1")["time"].to_pylist() == [2, 1]  # written order kept
    f = events("a1.5 b2")
    assert f.schema.field("time").type == pa.float64() and f["time"].to_pylist() == [1.5, 2.0]
    empty = events("")
    assert empty.num_rows == 0 and empty.schema.field("time").type == pa.int64()
    with pytest.raises(ValueError, match="bad event"):
        events("a1 2b")
    with pytest.raises(ValueError, match="no event"):
        events("a1", v={"a2": 1})
    with pytest.raises(ValueError, match="values for"):
        events("a1 b2", v=[1])
