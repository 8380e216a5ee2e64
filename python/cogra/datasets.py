"""Deterministic event streams shaped like the report's data sets (its §1 and §9).

The report evaluates q1-q3 on two real data sets (physical activity monitoring, stock
transactions) and one synthetic one (public transportation); q2 runs on ride-sharing
events.  None of them ship with cogra, so these generators produce streams with the same
schema and the same features the queries depend on: sub-streams per patient / company /
driver / passenger, stretches of passive activity with rising heart rates, prices that
fall about half the time, trips of typed events interleaved in time.

Every generator is vectorised numpy seeded by ``default_rng(seed)`` (same arguments, same
table), returns a ``pyarrow.Table`` of exactly ``n_events`` rows in non-decreasing
``time`` (int64 seconds; ties are common, as in the real data), and builds 10M rows in a
few seconds.  :func:`events` turns the report's stream notation (``"a1 b2 a3"``) into a
table for tests.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

NAMES = ("stock", "activity", "rides", "transport")

# PAMAP2 (the report's [RS12]) has 18 activities; "reading", which q1's prose names as
# a passive activity, stands in for PAMAP2's "car driving".
PASSIVE = ("lying", "sitting", "standing", "watching TV", "computer work", "reading")
ACTIVITIES = (
    "lying", "sitting", "standing", "walking", "running", "cycling", "Nordic walking",
    "watching TV", "computer work", "reading", "ascending stairs", "descending stairs",
    "vacuum cleaning", "ironing", "folding laundry", "house cleaning", "playing soccer",
    "rope jumping",
)
# Typical heart rate (beats per minute) at the low end of each activity.
_BASE_RATE = dict(zip(ACTIVITIES, (
    58, 63, 68, 95, 140, 115, 105, 62, 66, 61, 115, 100, 90, 80, 80, 90, 140, 145,
)))


# --------------------------------------------------------------------------- helpers


def _strings(names: Sequence[str], codes: np.ndarray) -> pa.Array:
    """``names[codes]`` as an Arrow string array, without building Python strings."""
    return pa.array(list(names), pa.string()).take(pa.array(codes))


def _ids(prefix: str, n: int) -> list[str]:
    """``C00, C01, ...``: zero-padded so that string order is numeric order."""
    width = max(2, len(str(n - 1)))
    return [f"{prefix}{i:0{width}d}" for i in range(n)]


def _poisson_times(rng: np.random.Generator, n: int, rate: float, start: int) -> np.ndarray:
    """Arrival times in whole seconds of a Poisson stream of ``rate`` events/second."""
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    gaps = rng.poisson(1.0 / rate, n)
    return start + np.cumsum(gaps) - (gaps[0] if n else 0)


def _segment_cumsum(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running sum of ``values`` that restarts wherever ``starts`` is True."""
    total = np.cumsum(values)
    first = np.flatnonzero(starts)
    before = total[first] - values[first]
    return total - before[np.cumsum(starts) - 1]


def _group_sort(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stable order that groups equal ``keys`` (small ints: radix sort), and group starts."""
    order = np.argsort(keys.astype(np.int16 if keys.max(initial=0) < 2**15 else np.int64),
                       kind="stable")
    k = keys[order]
    starts = np.ones(len(k), bool)
    starts[1:] = k[1:] != k[:-1]
    return order, starts


def _walk_by(keys: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Per-key random walk: at each row, the sum of the steps of that key's rows so far."""
    out = np.empty(len(steps), steps.dtype)
    if len(steps):
        order, starts = _group_sort(keys)
        out[order] = _segment_cumsum(steps[order], starts)
    return out


def _check(n_events: int, **counts: int) -> None:
    if n_events < 0:
        raise ValueError(f"n_events must be >= 0, got {n_events}")
    for name, value in counts.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


# --------------------------------------------------------------------------- stock


def stock(n_events: int = 225_000, n_companies: int = 19, n_sectors: int = 10,
          seed: int = 0, start: int = 0, rate: float = 10.0) -> pa.Table:
    """Stock transactions like the report's real data set (225k records, 19 companies, 10 sectors).

    Columns (q3 runs on them):
      ``type`` string, always ``"Stock"``; ``time`` int64 seconds from ``start``, about
      ``rate`` ticks per second (one trading day for the default size), several per second;
      ``company`` string ``"C00"``..; ``sector`` string ``"S00"``..: company ``i`` is in
      sector ``i % n_sectors`` (fixed, whatever the seed); ``transaction`` int64, 1, 2, ...
      in time order; ``kind`` ``"buy"``/``"sell"``; ``volume`` int64, multiples of 100;
      ``price`` float64 in cents precision.

    A company's price is a random walk (a company part plus a sector part, so companies
    of one sector move together, which is what q3 looks for).  Steps are symmetric, so
    ``A.price > NEXT(A).price`` holds for about half the pairs of a company's ticks.
    """
    _check(n_events, n_companies=n_companies, n_sectors=n_sectors)
    rng = np.random.default_rng(seed)
    time = _poisson_times(rng, n_events, rate, start)
    company = rng.integers(0, n_companies, n_events)
    sector_of = np.arange(n_companies) % n_sectors
    sector = sector_of[company]
    # Log-price: base + own walk + the walk of its sector (driven by all its companies' ticks).
    base = np.log(rng.uniform(10.0, 500.0, n_companies))
    log_price = (base[company]
                 + _walk_by(company, rng.normal(0.0, 0.002, n_events))
                 + _walk_by(sector, rng.normal(0.0, 0.001, n_events)))
    price = np.round(np.exp(log_price), 2)
    return pa.table({
        "type": _strings(["Stock"], np.zeros(n_events, np.int8)),
        "time": pa.array(time, pa.int64()),
        "company": _strings(_ids("C", n_companies), company),
        "sector": _strings(_ids("S", n_sectors), sector),
        "transaction": pa.array(np.arange(1, n_events + 1), pa.int64()),
        "kind": _strings(["buy", "sell"], rng.integers(0, 2, n_events)),
        "volume": pa.array(100 * rng.integers(1, 100, n_events), pa.int64()),
        "price": pa.array(price, pa.float64()),
    })


# --------------------------------------------------------------------------- activity


def activity(n_events: int = 63_000, n_people: int = 14, n_activities: int = 18,
             seed: int = 0, start: int = 0, rate: float = 14.0) -> pa.Table:
    """Heart-rate measurements like the report's physical activity data set (PAMAP2).

    The report's set has 14 people, 75 minutes, 18 activities; the default size is one
    measurement per person per second over those 75 minutes.  Columns:
      ``type`` string, always ``"Measurement"``; ``time`` int64 seconds, about ``rate``
      measurements per second in all; ``patient`` int64 1..n_people;
      ``activity`` string ``"passive"`` or ``"active"``: the class that q1's
      ``M.activity = passive`` compares with (a bare identifier is the string 'passive');
      ``activity_name`` string, one of the first ``n_activities`` of :data:`ACTIVITIES`
      (those in :data:`PASSIVE` are passive); ``activity_id`` int64, 1-based index in
      :data:`ACTIVITIES`; ``rate`` int64 heart rate.

    A person's monitor gives one reading at a time: while ``rate <= n_people`` no person
    has two measurements in the same second (a collision moves the later one on), so
    each person's series is strictly increasing in time, as the report's data is.

    Each person does one activity for a stretch (about 300 of their measurements), then
    switches.  The heart rate is a walk of steps -2..2 reflected into a band 20 bpm wide
    above the activity's typical rate (plus a per-person offset): passive activities
    have lower rates, and rises and falls are both common (q1 looks for rising runs).
    """
    _check(n_events, n_people=n_people, n_activities=n_activities)
    if n_activities > len(ACTIVITIES):
        raise ValueError(f"n_activities must be <= {len(ACTIVITIES)}, got {n_activities}")
    rng = np.random.default_rng(seed)
    time = _poisson_times(rng, n_events, rate, start)
    patient = rng.integers(0, n_people, n_events)
    if rate <= n_people and n_events:
        time = _one_per_second(patient, time)

    # Stretches: a new one at each person's first measurement and then at random.
    act = np.empty(n_events, np.int64)
    walk = np.empty(n_events, np.int64)
    if n_events:
        order, starts = _group_sort(patient)
        new = starts | (rng.random(n_events) < 1 / 300)
        segment = np.cumsum(new) - 1
        act[order] = rng.integers(0, n_activities, segment[-1] + 1)[segment]
        walk[order] = _segment_cumsum(rng.integers(-2, 3, n_events)[order], starts)
    band = 20
    offset = rng.integers(0, 2 * band, n_people)
    reflected = np.abs((walk + offset[patient]) % (2 * band) - band)  # in [0, band]
    names = ACTIVITIES[:n_activities]
    base = np.array([_BASE_RATE[a] for a in names])
    person = rng.integers(-6, 7, n_people)
    heart = base[act] + person[patient] + reflected
    passive = np.array([a in PASSIVE for a in names])
    table = pa.table({
        "type": _strings(["Measurement"], np.zeros(n_events, np.int8)),
        "time": pa.array(time, pa.int64()),
        "patient": pa.array(patient + 1, pa.int64()),
        "activity": _strings(["active", "passive"], passive[act].astype(np.int8)),
        "activity_name": _strings(names, act),
        "activity_id": pa.array(act + 1, pa.int64()),
        "rate": pa.array(heart, pa.int64()),
    })
    return table.take(np.argsort(time, kind="stable"))


def _one_per_second(keys: np.ndarray, time: np.ndarray) -> np.ndarray:
    """``time`` made strictly increasing within each key, moving collisions later.

    Within a key's i-th row: ``t'_i = max(t_i, t'_{i-1} + 1)``, i.e. ``i + max_{j<=i}(t_j - j)``.
    """
    order, starts = _group_sort(keys)
    group = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    idx = np.arange(len(order)) - first[group]
    span = int(time.max() - time.min()) + len(order) + 1
    shifted = time[order] - idx + group * span  # groups never overlap: one running max
    out = np.empty_like(time)
    out[order] = np.maximum.accumulate(shifted) - group * span + idx
    return out


# --------------------------------------------------------------------------- trips


def _trips(rng: np.random.Generator, n_events: int, n_actors: int, mean_len: float,
           build) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Lay out trips actor by actor, then interleave the actors in time.

    Each actor makes enough trips, one after another, to cover its share of the stream.
    A trip is a run of *units* (a header, ``k`` middle units, a trailer); ``build`` maps
    ``(rng, kind, first)`` — unit kinds 0/1/2 and whether a middle unit is the trip's
    first — to a dict of equally shaped 2-D arrays ``code``, ``gap`` (seconds since the
    actor's previous event) and any attributes; ``code`` -1 marks an empty slot.
    Returns the first ``n_events`` events in time: codes, times, attribute columns.
    """
    per_actor = math.ceil(1.3 * n_events / (n_actors * mean_len)) + 1
    n_trips = n_actors * per_actor
    middles = rng.geometric(0.5, n_trips)  # 1, 2, 3, ... middle units, mean 2
    units = middles + 2
    unit_trip = np.repeat(np.arange(n_trips), units)
    pos = np.arange(len(unit_trip)) - np.repeat(np.cumsum(units) - units, units)
    kind = np.where(pos == 0, 0, np.where(pos == units[unit_trip] - 1, 2, 1))
    cols = build(rng, kind, pos == 1)
    keep = (cols["code"] >= 0).ravel()
    flat = {k: v.ravel()[keep] for k, v in cols.items()}
    actor = np.repeat(np.repeat(np.arange(n_actors), per_actor), units)
    actor = np.repeat(actor, cols["code"].shape[1])[keep]
    first = np.ones(len(actor), bool)
    first[1:] = actor[1:] != actor[:-1]
    # Actors start at staggered times so their trips interleave from the beginning.
    flat["gap"] = np.where(first, rng.integers(0, 600, len(actor)), flat["gap"])
    time = _segment_cumsum(flat.pop("gap"), first)
    order = np.argsort(time, kind="stable")[:n_events]  # sorted runs: timsort merges them
    return actor[order], time[order], {k: v[order] for k, v in flat.items()}


def rides(n_events: int = 100_000, n_drivers: int = 50, seed: int = 0,
          start: int = 0) -> pa.Table:
    """Ride-sharing (Uber pool) events for q2: ``SEQ(Accept, (SEQ(Call, Cancel))+, Finish)``.

    Columns: ``type`` string; ``time`` int64 seconds; ``driver`` int64 1..n_drivers, the
    session id that q2's ``[driver]`` partitions by.

    A driver makes trips one after another (30 s to 10 min apart); drivers' trips
    interleave in time.  A trip is ``Accept``, then one or more rider contacts (mean 2),
    each a ``Call`` followed by a ``Cancel``, then ``DropOff`` and ``Finish``; gaps are
    5 to 90 s, so most trips fit q2's 10-minute window and some do not.  Irregular
    input q2 must cope with: 10% of contacts have no ``Cancel``, 5% log ``Cancel`` before
    ``Call``, and irrelevant ``InTransit`` events (skipped by skip-till-next-match)
    appear around contacts.  The stream is cut after ``n_events`` events, so trips that
    are in progress at the end are unfinished.
    """
    _check(n_events, n_drivers=n_drivers)
    types = ["Accept", "Call", "Cancel", "Finish", "InTransit", "DropOff"]
    accept, call, cancel, finish, transit, dropoff = range(6)

    def build(rng, kind, _first):
        n = len(kind)
        header = np.array([accept, -1, -1, -1])
        trailer = np.array([dropoff, finish, -1, -1])
        maybe_transit = np.where(rng.random((n, 2)) < 0.3, transit, -1)
        r = rng.random(n)
        a = np.where(r < 0.05, cancel, call)                  # out of order
        b = np.where(r < 0.05, call, np.where(r < 0.15, -1, cancel))  # missing Cancel
        middle = np.stack([maybe_transit[:, 0], a, maybe_transit[:, 1], b], axis=1)
        code = np.select([kind[:, None] == 0, kind[:, None] == 2], [header, trailer], middle)
        gap = rng.integers(5, 90, code.shape)
        gap[:, 0] = np.where(kind == 0, rng.integers(30, 600, n), gap[:, 0])
        return {"code": code, "gap": gap}

    rng = np.random.default_rng(seed)
    driver, time, cols = _trips(rng, n_events, n_drivers, 8.0, build)
    return pa.table({
        "type": _strings(types, cols["code"]),
        "time": pa.array(start + time, pa.int64()),
        "driver": pa.array(driver + 1, pa.int64()),
    })


def transport(n_events: int = 100_000, n_passengers: int = 30, n_stations: int = 100,
              seed: int = 0, start: int = 0, max_wait: int = 600) -> pa.Table:
    """Public transportation trips like the report's synthetic data set (30 passengers, 100 stations).

    Columns: ``type`` string, one of ``Enter`` (passes the gate at ``station``),
    ``Wait`` (reaches the platform of ``station``), ``Ride`` (boards a vehicle at
    ``station``), ``Exit`` (leaves through the gate at ``station``); ``time`` int64
    seconds; ``passenger`` int64 1..n_passengers; ``station`` int64 1..n_stations;
    ``waiting`` int64 seconds, uniform in [0, max_wait] on every event, as in the report:
    on ``Wait`` and the following ``Ride`` it is the time spent waiting for that vehicle
    (``Ride.time - Wait.time``), on ``Enter`` and ``Exit`` the time queued at the gate.

    A trip is ``Enter``, then one or more legs (mean 2) ``Wait, Ride`` — the first at
    the entry station, each later one at a different station (a transfer) — then
    ``Exit`` at yet another station.  Rides last 2 to 20 minutes; trips of one passenger
    are 5 minutes to 2 hours apart; passengers interleave in time.
    """
    _check(n_events, n_passengers=n_passengers, n_stations=n_stations)
    types = ["Enter", "Wait", "Ride", "Exit"]
    enter, wait, ride, exit_ = range(4)

    def build(rng, kind, first):
        n = len(kind)
        k = kind[:, None]
        code = np.select([k == 0, k == 2], [np.array([enter, -1]), np.array([exit_, -1])],
                         np.array([wait, ride]))
        waiting = rng.integers(0, max_wait + 1, (n, 2))
        waiting[:, 1] = np.where(kind == 1, waiting[:, 0], waiting[:, 1])  # Ride: its Wait's
        # Station of each unit: a leg moves on (step 1..S-1 mod S), except the first
        # leg, which starts where the passenger entered; a header starts anywhere.
        step = np.where(kind == 0, rng.integers(0, n_stations, n),
                        np.where(first, 0, rng.integers(1, max(n_stations, 2), n)))
        station = np.repeat((np.cumsum(step) % n_stations + 1)[:, None], 2, axis=1)
        gap = np.stack([
            np.select([kind == 0, first], [rng.integers(300, 7200, n),
                                           rng.integers(30, 180, n)],
                      rng.integers(120, 1200, n)),       # Enter / walk in / previous ride
            np.where(kind == 1, waiting[:, 0], 0),        # Ride: after the Wait
        ], axis=1)
        return {"code": code, "gap": gap, "station": station, "waiting": waiting}

    rng = np.random.default_rng(seed)
    passenger, time, cols = _trips(rng, n_events, n_passengers, 6.0, build)
    return pa.table({
        "type": _strings(types, cols["code"]),
        "time": pa.array(start + time, pa.int64()),
        "passenger": pa.array(passenger + 1, pa.int64()),
        "station": pa.array(cols["station"], pa.int64()),
        "waiting": pa.array(cols["waiting"], pa.int64()),
    })


# --------------------------------------------------------------------------- access


_GENERATORS = {"stock": stock, "activity": activity, "rides": rides, "transport": transport}


def _generator(name: str):
    try:
        return _GENERATORS[name]
    except KeyError:
        raise ValueError(f"unknown data set {name!r}; expected one of {', '.join(NAMES)}") from None


def by_name(name: str, n_events: int, seed: int = 0, **kwargs: Any) -> pa.Table:
    """The generator called ``name`` (one of :data:`NAMES`) with ``n_events`` rows."""
    return _generator(name)(n_events=n_events, seed=seed, **kwargs)


def write_parquet(directory: str | Path, n_events: int | None = None,
                  names: Sequence[str] = NAMES, seed: int = 0) -> dict[str, Path]:
    """Write ``<directory>/<name>/part-00000.parquet`` per data set (the layout
    ``sql/setup.sql`` expects); ``n_events=None`` uses each generator's default size."""
    import pyarrow.parquet as pq

    written = {}
    for name in names:
        generate = _generator(name)
        table = generate(seed=seed) if n_events is None else generate(n_events=n_events, seed=seed)
        path = Path(directory) / name / "part-00000.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        written[name] = path
    return written


# --------------------------------------------------------------------------- notation


_TOKEN = re.compile(r"([A-Za-z_]+)(-?\d+(?:\.\d+)?)")


def events(spec: str, **attrs: Mapping[str, Any] | Sequence[Any]) -> pa.Table:
    """The report's stream notation as a table: ``"a1 b2 c5"`` -> type A, B, C at time 1, 2, 5.

    Tokens are separated by whitespace or commas; a token is letters (the type, upper-cased)
    then a number (the time: int64, or float64 if any token has a fraction).  Rows keep the
    written order, so out-of-order input can be written too.  Each keyword argument adds a
    column, given either as a dict from token to value (``v={"b2": 1}``; tokens not in it
    get null) or as a sequence with one value per event.  Column types are inferred by
    Arrow; an all-null column is of type null.

    >>> events("a1 b2", v={"b2": 1}).to_pydict()
    {'type': ['A', 'B'], 'time': [1, 2], 'v': [None, 1]}
    """
    tokens = [t for t in re.split(r"[\s,]+", spec.strip()) if t]
    types, times = [], []
    for token in tokens:
        m = _TOKEN.fullmatch(token)
        if m is None:
            raise ValueError(f"bad event {token!r} in {spec!r}: expected letters then a time, like 'a1'")
        types.append(m.group(1).upper())
        times.append(m.group(2))
    floats = any("." in t for t in times)
    columns: dict[str, pa.Array] = {
        "type": pa.array(types, pa.string()),
        "time": pa.array([float(t) if floats else int(t) for t in times],
                         pa.float64() if floats else pa.int64()),
    }
    for column, values in attrs.items():
        if column in columns:
            raise ValueError(f"attribute {column!r} would replace the {column} column")
        if isinstance(values, Mapping):
            unknown = set(values) - set(tokens)
            if unknown:
                raise ValueError(f"{column}: no event {', '.join(sorted(unknown))} in {spec!r}")
            values = [values.get(t) for t in tokens]
        elif len(values) != len(tokens):
            raise ValueError(f"{column}: {len(values)} values for {len(tokens)} events")
        columns[column] = pa.array(list(values))
    return pa.table(columns)


if __name__ == "__main__":  # python -m cogra.datasets DIR [N_EVENTS]
    import sys

    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m cogra.datasets DIR [N_EVENTS]")
    n = int(sys.argv[2]) if len(sys.argv) == 3 else None
    for name, path in write_parquet(sys.argv[1], n).items():
        print(f"{name}: {path}")
