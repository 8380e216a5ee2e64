"""A streaming group's state in Spark's state store, written where it changed.

A group's :class:`~cogra.runtime.online.OnlineEvaluation` is kept as two state variables
of ``transformWithStateInPandas`` (RocksDB):

* ``evaluation`` (a value): the snapshot without rows -- watermark, counters, the timer
  set, and for carried queries the open windows' aggregate states -- with a *version*, a
  random token written with every change;
* ``rows`` (a list): the held rows as Arrow IPC chunks, each with the latest time in it.
  A micro-batch appends the rows it brought as one chunk (RocksDB merges it in: the bytes
  written are those rows, not the group's state).  Rows leave the held set by time
  (:meth:`OnlineEvaluation.held_from`), so chunks are dropped whole and lazily: the list is
  rewritten -- the live rows, in a few chunks by time -- only once its dead chunks outweigh
  its live ones or it has grown past :data:`MAX_CHUNKS`, which keeps the bytes written per
  micro-batch a small multiple of the rows that arrived, and a restore's reads bounded.

Why a list rather than a map of chunks (whose entries could be dropped one by one): each
call on a state variable is a round trip to the JVM's state server, and a map would need
one per dropped chunk; a list takes a micro-batch's rows in one call.

Reading every chunk back for every micro-batch would cost what writing them saved, so a
Python worker keeps the evaluations it last wrote (:class:`EvaluationCache`, bounded in
bytes), and uses one only where the state's version is the one it wrote: a retried task,
a restarted query or a group last written by another worker reads the store.
"""

from __future__ import annotations

import io
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from cogra.runtime.online import SNAPSHOT_IPC

MAX_CHUNKS = 256
"""A group's rows are rewritten once its list holds more chunks than this (bounding what a
restore reads: one chunk per micro-batch that brought rows, e.g. ~600 over a 10-minute
window at a 1-second trigger, would otherwise be read back one by one)."""
REWRITE_PARTS = 8
"""A rewrite cuts the live rows into at most this many chunks by time, so that the
earliest ones are dropped whole as windows close."""
CACHE_BYTES = 256 << 20
"""What a Python worker's :class:`EvaluationCache` holds at most (estimated bytes)."""


@dataclass
class Chunk:
    """One entry of a group's ``rows`` list."""

    high: int
    """The latest time among its rows (in the engine's time units)."""
    size: int
    """Its encoded bytes."""


@dataclass
class Cached:
    version: int
    online: Any
    chunks: list[Chunk] = field(default_factory=list)
    size: int = 0


class EvaluationCache:
    """The evaluations a Python worker wrote last, by group, least recently used first
    out past ``max_bytes``.  An entry is taken out while its group is evaluated and put
    back after its state was written: an evaluation that failed half-way is never reused."""

    def __init__(self, max_bytes: int = CACHE_BYTES):
        self.max_bytes = max_bytes
        self.entries: OrderedDict[Any, Cached] = OrderedDict()
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    def take(self, key: Any, version: int) -> Cached | None:
        entry = self.entries.pop(key, None)
        if entry is not None:
            self.bytes -= entry.size
            if entry.version == version:
                self.hits += 1
                return entry
        self.misses += 1
        return None

    def put(self, key: Any, entry: Cached) -> None:
        old = self.entries.pop(key, None)
        if old is not None:
            self.bytes -= old.size
        if entry.size > self.max_bytes:
            return
        self.entries[key] = entry
        self.bytes += entry.size
        while self.bytes > self.max_bytes and self.entries:
            _, dropped = self.entries.popitem(last=False)
            self.bytes -= dropped.size


CACHE = EvaluationCache()
"""This Python worker's cache (workers are reused across tasks and micro-batches)."""


def encode(rows: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, rows.schema, options=SNAPSHOT_IPC) as writer:
        writer.write_table(rows)
    return sink.getvalue()


def decode(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


class GroupStore:
    """Load and save the evaluations of one operator's groups (see the module docstring).
    ``group`` is the call's :class:`~cogra.spark.streaming.GroupQuery`."""

    def __init__(self, handle: Any, group: Any, cache: EvaluationCache = CACHE):
        from pyspark.sql.types import BinaryType, LongType, StructField, StructType

        self.group = group
        self.cache = cache
        self.saved = handle.getValueState("evaluation", StructType([StructField("snapshot", BinaryType())]))
        self.rows = handle.getListState("rows", StructType([
            StructField("high", LongType()), StructField("size", LongType()), StructField("rows", BinaryType())]))
        self.scope = group.identity()

    def load(self, key: Any) -> Cached:
        """The group's evaluation: the cached one where the stored version is its own,
        else read from the store (a new one where the group has no state)."""
        saved = self.saved.get()  # (None where the group has no state: one call to the store)
        if saved is None:
            return Cached(0, self.group.evaluation(None))
        snapshot = bytes(saved[0])
        version = self.group.snapshot_version(snapshot)
        entry = self.cache.take((self.scope, tuple(key)), version)
        if entry is not None:
            return entry
        chunks, tables = [], []
        for high, size, data in self.rows.get():
            chunks.append(Chunk(int(high), int(size)))
            tables.append(decode(bytes(data)))
        online = self.group.evaluation(snapshot, rows=tables)
        return Cached(version, online, chunks)

    def save(self, key: Any, entry: Cached) -> None:
        """Write what changed: the rows pushed since the load as one appended chunk (or
        the list rewritten, see the module docstring) and the snapshot with a new version."""
        online = entry.online
        new = [t for t in online.take_journal() if t.num_rows]
        since = online.held_from()
        held = online.state.held
        pending = []
        if new:
            # Only the new rows still held: at high rates most of a micro-batch's rows are
            # settled or emitted within it, and a chunk lives as long as its latest row.
            table = pa.concat_tables(new) if len(new) > 1 else new[0]
            times = online.slices.times(table)
            if since is not None and not (times >= since).all():
                table = table.filter(pa.array(times >= since))
                times = times[times >= since]
            if table.num_rows:
                data = encode(table)
                entry.chunks.append(Chunk(int(times.max()), len(data)))
                pending = [(entry.chunks[-1], data)]
        dead = sum(c.size for c in entry.chunks if since is not None and c.high < since)
        live = sum(c.size for c in entry.chunks) - dead
        if held is None or not held.num_rows:
            if entry.chunks:
                self.rows.clear()
            entry.chunks = []
        elif dead > live or len(entry.chunks) > MAX_CHUNKS:
            parts = self._parts(online, held)
            self.rows.put([(c.high, c.size, data) for c, data in parts])
            entry.chunks = [c for c, _ in parts]
        elif pending:
            self.rows.appendList([(c.high, c.size, data) for c, data in pending])
        entry.version = secrets.randbits(63)
        online.state.extra["version"] = entry.version
        snapshot = online.snapshot(rows=False)
        self.saved.update((snapshot,))
        entry.size = len(snapshot) + (held.nbytes if held is not None else 0)
        self.cache.put((self.scope, tuple(key)), entry)

    def _parts(self, online: Any, held: pa.Table) -> list[tuple[Chunk, bytes]]:
        """The live rows in at most :data:`REWRITE_PARTS` chunks of equal time spans (in
        the order they came within each)."""
        times = online.slices.times(held)
        lo, hi = int(times.min()), int(times.max())
        width = max(1, -(-(hi - lo + 1) // REWRITE_PARTS))
        part = (times - lo) // width
        out = []
        for p in np.unique(part):
            rows = held.filter(pa.array(part == p))
            data = encode(rows)
            out.append((Chunk(int(times[part == p].max()), len(data)), data))
        return out


__all__ = ["CACHE", "Cached", "Chunk", "EvaluationCache", "GroupStore", "MAX_CHUNKS"]
