"""How a ``MATCH_TREND`` task evaluates its partition: the route (streamed, sliced or
chunked, :func:`partition_route`), the sizes each route works in, and the session
settings the shim hands to the tasks (:class:`WorkerSettings`, the contract it checks).

Streamed partitions keep only the open windows' states; sliced ones evaluate a key
group's complete windows as its rows arrive; chunked ones evaluate whole key groups.
The worker (:mod:`cogra.spark.udtf`) runs the route chosen here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any, Sequence

import pyarrow as pa

import cogra
from cogra.language.ast import Query
from cogra.spark.udtf_analysis import CograAnalyzeResult, _resolve

MAX_GROUP_ROWS = 5_000_000
"""Rows of one key group a worker holds at most (its memory: ~0.6 GB per million rows of a
mixed-grained query without WITHIN); the streamed and sliced routes hold far fewer."""
#: Evaluate at least this many rows at a time (whole key groups; a streamed partition is
#: pushed in chunks of this size), see :class:`cogra.spark.udtf._ChunkedEvaluator`.
CHUNK_ROWS = 1 << 15
#: Under integral windows, evaluate a key group's complete windows once this many of its
#: rows are held, without waiting for the group's end (:class:`cogra.spark.udtf._ChunkedEvaluator`):
#: memory stays bounded in a large group.  Not smaller where every processor runs a task:
#: more, smaller calls cost CPU (q3's 20k-row groups in 8k-row slices on ``local[2]``, two
#: processors: 12% slower, medians of 16 interleaved runs).
SLICE_ROWS = CHUNK_ROWS
#: ... but where each task has a processor to spare (:func:`slice_rows_for`), open groups
#: are sliced from this many rows on, so that the engine works on a group's first rows
#: while the JVM, on the other processor, still sorts and encodes the rest -- instead of
#: both waiting for each other at the group's end.  ``local[1]`` on two processors,
#: medians of 16 interleaved runs: q3 8-11% faster, q1 4%, q3 tumbling unchanged.
SPARE_PROCESSOR_SLICE_ROWS = 1 << 13


_LOCAL_MASTER = re.compile(r"local(?:\[\s*(\*|\d+)\s*(?:,\s*\d+\s*)?\])?")
_LOCAL_CLUSTER_MASTER = re.compile(r"local-cluster\[\s*\d+\s*,\s*(\d+)\s*,\s*\d+\s*\]")


def task_slots(settings: dict | None, processors: int) -> int | None:
    """How many tasks one executor runs at once, from the session's settings (the shim's
    ``executor`` option: ``master``, ``executor_cores``, ``task_cpus``, strings or None),
    ``processors`` being the executor machine's; None where the settings do not say (a
    cluster manager's default cores) or cannot be read."""
    if not settings:
        return None
    master = (settings.get("master") or "").strip()
    try:
        local = _LOCAL_MASTER.fullmatch(master)
        cluster = _LOCAL_CLUSTER_MASTER.fullmatch(master)
        if local:
            cores = processors if local.group(1) == "*" else int(local.group(1) or 1)
        elif cluster:
            cores = int(cluster.group(1))
        elif settings.get("executor_cores"):
            cores = int(settings["executor_cores"])
        else:
            return None
        cpus = int(settings.get("task_cpus") or 1)
    except ValueError:
        return None
    return max(1, cores // max(1, cpus))


def available_processors() -> int:
    """The processors this worker may run on (its affinity, where the OS tells)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def slice_rows_for(settings: dict | None, processors: int | None = None) -> int:
    """:data:`SPARE_PROCESSOR_SLICE_ROWS` where every task an executor runs at once has a
    second processor (``local[1]`` on two, or ``spark.task.cpus=2``), else
    :data:`SLICE_ROWS`: overlapping the engine with the JVM pays only with a processor
    for each."""
    processors = processors or available_processors()
    slots = task_slots(settings, processors)
    return SPARE_PROCESSOR_SLICE_ROWS if slots is not None and processors >= 2 * slots else SLICE_ROWS


class Route(Enum):
    """How a task's Python worker evaluates its partition (docs/ARCHITECTURE.md, "The
    worker's routes", lists what each assumes of its input)."""

    STREAMED = "streamed"
    """Batches pushed through :class:`cogra.runtime.stream.StreamEvaluation`: memory is the
    open windows' states."""
    CHUNKED = "chunked"
    """Complete key groups, several per engine call (:class:`cogra.spark.udtf._ChunkedEvaluator`)."""
    SLICED = "sliced"
    """As chunked, and a group that grows past the slice size is evaluated a time slice
    at a time (:mod:`cogra.runtime.slices`)."""


ROUTE_SETTING = "spark.cogra.worker.route"
SLICE_ROWS_SETTING = "spark.cogra.worker.sliceRows"
CHUNK_ROWS_SETTING = "spark.cogra.worker.chunkRows"
GROUP_ROWS_SETTING = "spark.cogra.worker.maxGroupRows"
WINDOWS_SETTING = "spark.cogra.maxWindowsPerEvent"


@dataclass(frozen=True)
class WorkerSettings:
    """The session's ``spark.cogra.worker.*`` settings, as the shim hands them over.

    ``route``: ``auto`` (stream where the query allows it and streaming pays: tumbling
    windows, no float SUM/AVG; else chunks, slicing a large group under integral windows),
    ``streamed`` (stream wherever the query allows it), ``chunked`` (whole groups, never
    sliced) or ``sliced`` (chunks, a group sliced from ``slice_rows`` rows on).
    ``slice_rows`` / ``chunk_rows``: rows at which an open group is sliced / complete
    groups are evaluated (None: the defaults, :data:`SLICE_ROWS`, :data:`CHUNK_ROWS`).
    ``max_group_rows`` / ``max_windows_per_event``: the limits past which a task fails
    with a DataError naming them, before memory runs out.
    """

    route: str = "auto"
    slice_rows: int | None = None
    chunk_rows: int = CHUNK_ROWS
    max_group_rows: int = MAX_GROUP_ROWS
    max_windows_per_event: int = cogra.MAX_WINDOWS_PER_EVENT

    ROUTES = ("auto", "streamed", "chunked", "sliced")

    @classmethod
    def of(cls, settings: dict[str, str] | None) -> "WorkerSettings":
        settings = settings or {}
        route = settings.get(ROUTE_SETTING, "auto").strip().lower()
        if route not in cls.ROUTES:
            raise ValueError(f"{ROUTE_SETTING} must be one of {', '.join(cls.ROUTES)}, not {route!r}")

        def rows(name: str) -> int | None:
            text = settings.get(name)
            if text is None:
                return None
            try:
                value = int(text)
            except ValueError:
                value = 0
            if value < 1:
                raise ValueError(f"{name} must be a positive number of rows, not {text!r}")
            return value

        return cls(route, rows(SLICE_ROWS_SETTING), rows(CHUNK_ROWS_SETTING) or CHUNK_ROWS,
                   rows(GROUP_ROWS_SETTING) or MAX_GROUP_ROWS,
                   rows(WINDOWS_SETTING) or cogra.MAX_WINDOWS_PER_EVENT)


def partition_route(result: CograAnalyzeResult, query: str | Query, schema: pa.Schema,
                    settings: WorkerSettings, sorted_by: Sequence[str] = (),
                    on_overflow: str = "error") -> tuple[Route, Any]:
    """(the route for a partition whose batches have ``schema``, its StreamEvaluation when
    streamed).  ``query``: what the engine evaluates (:func:`with_partition_keys`);
    ``sorted_by``: the columns the shim sorted the partition by, before time."""
    from cogra.runtime.slices import WindowSlices
    from cogra.runtime.stream import StreamEvaluation, unsupported_reason

    if settings.route in ("auto", "streamed") and streaming_enabled():
        p = cogra.plan(query, schema, type_column=result.type_column, time_column=result.time_column)
        if (settings.route == "streamed" or _streaming_pays(p)) and unsupported_reason(p) is None:
            keys = tuple(_resolve(c, p.bound.plain_keys) for c in sorted_by)
            return Route.STREAMED, StreamEvaluation(p, schema, on_overflow=on_overflow, sorted_by=keys)
    if settings.route != "chunked" and WindowSlices.of(
            result.query, schema, _resolve(result.time_column, schema.names)) is not None:
        return Route.SLICED, None
    return Route.CHUNKED, None


def _streaming_pays(p: Any) -> bool:
    """Whether streaming is the better route where the query allows it: its windows tumble
    (the chunked route shares the panes of sliding windows, many times faster), and no
    input value can stop the stream half-way (:func:`~cogra.runtime.stream.values_may_stop`;
    the chunked route evaluates those values exactly)."""
    from cogra.runtime.stream import values_may_stop

    if values_may_stop(p):
        return False
    window = p.bound.query.window
    return window is None or window.step == window.size


STREAMING_ENV = "COGRA_SPARK_STREAMING"


def streaming_enabled() -> bool:
    """Whether partitions may stream (default yes; ``COGRA_SPARK_STREAMING=0`` in the
    executors' environment, e.g. ``spark.executorEnv.COGRA_SPARK_STREAMING=0``, turns it off).

    Streaming bounds a task's memory by the open windows instead of the largest key group
    (a skewed key cannot exhaust a worker); its Python costs more per row than the chunked
    route (1M rows of q2 tumbling in 10k-row batches: 0.23 s vs 0.11 s), which stays well
    below Spark's own cost per row (MATCH_TREND rows/s were equal in both routes)."""
    return os.environ.get(STREAMING_ENV, "1") != "0"
