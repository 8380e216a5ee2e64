"""A streaming group's state written where it changed (cogra.spark.stream_state), driven
the way Spark's operator drives it -- load, push a micro-batch, advance, save -- over a
state store double that counts the bytes each call writes: the rows equal batch's, the
bytes written per micro-batch follow the rows that arrived, and a worker's cached
evaluation is used only where the stored version is the one it wrote."""

from __future__ import annotations

import random
import warnings

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import cogra
from cogra.datasets import activity, stock
from cogra.examples import Q1, Q3
from cogra.spark import stream_state
from cogra.spark.stream_state import EvaluationCache, GroupStore
from cogra.spark.streaming import GroupQuery
from tests.spark.rows import same_rows


class Value:
    def __init__(self, store: "Store", name: str):
        self.store, self.name = store, name

    def get(self):
        return self.store.values.get(self.name)

    def update(self, value) -> None:
        self.store.write(sum(len(v) for v in value if isinstance(v, bytes)))
        self.store.values[self.name] = value


class List:
    def __init__(self, store: "Store", name: str):
        self.store, self.name = store, name

    def get(self):
        self.store.list_reads += 1
        return iter(list(self.store.lists.get(self.name, [])))

    def appendList(self, values) -> None:
        self.store.write(sum(len(v[-1]) for v in values))
        self.store.lists.setdefault(self.name, []).extend(values)

    def put(self, values) -> None:
        self.store.write(sum(len(v[-1]) for v in values))
        self.store.lists[self.name] = list(values)

    def clear(self) -> None:
        self.store.lists.pop(self.name, None)


class Store:
    """One group's state, as Spark's handle shows it to the processor."""

    def __init__(self):
        self.values: dict = {}
        self.lists: dict = {}
        self.written = 0
        self.list_reads = 0

    def write(self, n: int) -> None:
        self.written += n

    def getValueState(self, name, schema):
        return Value(self, name)

    def getListState(self, name, schema):
        return List(self, name)

    def copy(self) -> "Store":
        other = Store()
        other.values, other.lists = dict(self.values), {k: list(v) for k, v in self.lists.items()}
        return other


def group_query(query: str, schema: pa.Schema, delay: int) -> GroupQuery:
    return GroupQuery(query, schema, tuple(schema.names), "type", "time", float(delay), on_overflow="null")


def batch_rows(query: str, table: pa.Table) -> list[tuple]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cogra.CograDataWarning)
        want = cogra.evaluate(query, table, on_overflow="null")
    return sorted(tuple(r.values()) for r in want.to_pylist())


def drive(query: str, table: pa.Table, batch: int, delay: int, *, workers: int = 1, seed: int = 0,
          crash_every: int = 0) -> tuple[list[tuple], Store, list[int]]:
    """Stream ``table`` (one group) through GroupStore in micro-batches of ``batch`` rows,
    each run by one of ``workers`` Python workers (each with its own cache), as Spark runs
    a group's tasks; every ``crash_every``-th micro-batch fails after writing, and is
    retried from the state before it (what Spark's state store gives a retried task)."""
    group = group_query(query, table.schema, delay)
    caches = [EvaluationCache() for _ in range(workers)]
    rng = random.Random(seed)
    store = Store()
    rows: list[tuple] = []
    new_bytes: list[int] = []
    for k, start in enumerate(range(0, table.num_rows, batch)):
        part = table.slice(start, batch)
        attempts = 2 if crash_every and k % crash_every == crash_every - 1 else 1
        for attempt in range(attempts):
            before = store.copy()
            gs = GroupStore(store, group, caches[rng.randrange(workers)])
            entry = gs.load(("g",))
            entry.online.push(part)
            max_time = entry.online.state.max_time
            out = entry.online.advance(None if max_time is None else max_time - delay)
            if attempt + 1 < attempts:  # the task fails after writing; Spark retries it
                gs.save(("g",), entry)
                store.values, store.lists = before.values, before.lists
                continue
            written = store.written
            gs.save(("g",), entry)
            new_bytes.append(store.written - written)
            rows.extend(tuple(r.values()) for r in out.to_pylist())
    return sorted(rows), store, new_bytes


def closed(query: str, table: pa.Table, delay: int) -> list[tuple]:
    want = batch_rows(query, table)
    names = cogra.result_schema(query, table.schema).names
    watermark = int(pc.max(table["time"]).as_py()) - delay
    end = names.index("window_end")
    return [r for r in want if r[end] <= watermark]


@pytest.mark.parametrize("workers,crash_every", [(1, 0), (2, 0), (3, 4)])
def test_held_rows_kept_apart_equal_batch(workers, crash_every):
    """q3 (held: its windows' rows) over 40 micro-batches: one worker (every load hits its
    cache), workers taking turns (misses read the store), retried micro-batches."""
    table = stock(20_000, seed=3).filter(pc.equal(pc.field("sector"), "S01"))
    got, store, _ = drive(Q3, table, 200, 30, workers=workers, seed=workers, crash_every=crash_every)
    assert same_rows(got, closed(Q3, table, 30)) and len(got) > 20
    assert len(store.lists["rows"]) <= stream_state.MAX_CHUNKS + 1


def test_carried_states_kept_apart_equal_batch():
    """q1 (carried: its windows' aggregate states; the rows later than the watermark kept apart)."""
    table = activity(20_000, seed=4)
    table = table.filter(pc.equal(table["patient"], table["patient"][0]))
    got, store, _ = drive(Q1, table, 100, 30, workers=2, seed=1, crash_every=5)
    assert same_rows(got, closed(Q1, table, 30)) and len(got) > 10


def test_bytes_written_follow_the_rows_that_arrived_not_the_state_held():
    """A 4-minute window at one micro-batch per second of events: the rows held are ~240
    micro-batches' worth; a micro-batch writes its own rows (and now and then a rewrite of
    the live ones), not the held rows."""
    query = Q3.replace("WITHIN 10 minutes SLIDE 10 seconds", "WITHIN 4 minutes SLIDE 30 seconds")
    table = stock(30_000, seed=5).filter(pc.equal(pc.field("sector"), "S02"))
    table = table.set_column(1, "time", pa.array([i // 5 for i in range(table.num_rows)], pa.int64()))
    got, store, written = drive(query, table, 5, 30)  # 5 events a second
    assert same_rows(got, closed(query, table, 30))
    held_bytes = sum(len(v[-1]) for v in store.lists["rows"])
    late = written[len(written) // 2:]  # once the window is full
    mean = sum(late) / len(late)
    assert mean < held_bytes / 20, (mean, held_bytes)


def test_a_stale_cached_evaluation_is_never_used():
    """Worker A writes version 1 and caches it; worker B continues from the store; A, given
    the group again, sees a version it did not write and reads the store."""
    table = stock(4_000, seed=6).filter(pc.equal(pc.field("sector"), "S03"))
    group = group_query(Q3, table.schema, 30)
    store, a, b = Store(), EvaluationCache(), EvaluationCache()
    halves = [table.slice(0, table.num_rows // 3), table.slice(table.num_rows // 3, table.num_rows // 3),
              table.slice(2 * (table.num_rows // 3))]
    for cache, part in zip((a, b, a), halves):
        gs = GroupStore(store, group, cache)
        entry = gs.load(("g",))
        entry.online.push(part)
        gs.save(("g",), entry)
    assert (a.hits, a.misses, b.hits, b.misses) == (0, 1, 0, 1)  # (the first load had no state)
    entry = GroupStore(store, group, EvaluationCache()).load(("g",))
    assert entry.online.counters["rows_in"] == table.num_rows
    assert entry.online.state.held.num_rows == table.num_rows  # nothing closed: no advance
