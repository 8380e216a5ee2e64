"""Running one measurement in a child process, under a wall-clock (and memory) limit.

Each run is a fresh process (``multiprocessing`` forkserver, with cogra, numpy and
pyarrow preloaded so that a run does not pay for imports).  The child:

1. generates its data set (seeded, so every contender sees the same events) and, for
   contenders that compile code on first use (cogra's numba executors, GRETA's kernel),
   evaluates the query once on the first rows, so that compilation is not measured;
2. reports *ready*; the parent starts the clock;
3. evaluates the query ``repeat`` times, measuring for each
   * latency: wall time of the evaluation call (``time.perf_counter``),
   * peak RSS delta: the kernel's high-water mark (``VmHWM``, reset through
     ``/proc/self/clear_refs`` just before the call) minus the RSS before the call --
     on systems without that, a 2 ms sampling thread,
   and reports the result (the median latency, the largest RSS delta);
4. evaluates once more under ``tracemalloc`` (Python and numpy allocations; Arrow's own
   buffers are not traced) and reports that peak.  This run is slower, so it is separate
   and may be cut off by the limit without losing the measurement.

The parent kills the child when the evaluation exceeds the time limit (status ``DNF``,
as the report) or when its RSS exceeds the memory limit (``OOM``).  A contender that
does not support the query is ``n/a``; ``skipped`` means it could not be set up (e.g.
no Spark).
"""

from __future__ import annotations

import gc
import math
import multiprocessing as mp
import os
import statistics
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any, Callable

from cogra.bench.experiments import Run

OK, DNF, OOM, NA, ERROR, SKIPPED = "ok", "DNF", "OOM", "n/a", "error", "skipped"

WARMUP_ROWS = 300
TWO_STEP_MAX_TRENDS = 2_000_000


@dataclass
class Limits:
    time_limit: float = 60.0  # seconds per evaluation
    memory_limit: int = 8 << 30  # bytes of RSS per child
    setup_limit: float = 300.0  # data generation and warm-up
    repeat: int = 1
    tracemalloc: bool = True
    warmup: str = "prefix"  # "prefix": the first WARMUP_ROWS rows; "full": the whole input; "none"
    max_trends: int = TWO_STEP_MAX_TRENDS


@dataclass
class Outcome:
    status: str
    message: str = ""
    latency_s: float | None = None
    latency_min_s: float | None = None
    paired_latency_s: float | None = None
    repeats: int = 0
    throughput_eps: float | None = None
    rss_peak_delta_bytes: int | None = None
    rss_method: str = ""
    tracemalloc_peak_bytes: int | None = None
    result_rows: int | None = None
    result_digest: str = ""
    executor: str = ""
    engine_stats: str = ""
    setup_s: float | None = None
    wall_s: float = 0.0


# ---------------------------------------------------------------------------
# Contenders (called in the child)
# ---------------------------------------------------------------------------


STREAM_BATCH_ROWS = 100_000


def _contender(name: str, limits: Limits) -> Callable[[str, Any], Any]:
    import cogra

    if name == "cogra":
        return lambda q, t: cogra.evaluate(q, t, on_overflow="null")
    if name == "cogra-stream":  # batches of STREAM_BATCH_ROWS rows (zero-copy slices of the input)
        return lambda q, t: cogra.evaluate_batches(q, t.to_batches(max_chunksize=STREAM_BATCH_ROWS),
                                                   on_overflow="null")
    if name == "cogra-py":
        return lambda q, t: cogra.evaluate(q, t, on_overflow="null", compiled=False)
    if name == "two-step":
        from cogra.reference import evaluate_reference

        return lambda q, t: evaluate_reference(q, t, on_overflow="null", max_trends=limits.max_trends)
    if name == "greta":
        from cogra.baselines import greta

        return lambda q, t: greta.evaluate(q, t, on_overflow="null")
    if name == "a-seq":
        from cogra.baselines import aseq

        return lambda q, t: aseq.evaluate(q, t, on_overflow="null")
    if name == "spark":
        return _spark_contender()
    if name == "flink":
        return _flink_contender()
    if name == "sleep":  # for tests of the harness: sleeps t.num_rows milliseconds
        return lambda q, t: time.sleep(t.num_rows / 1000)
    raise ValueError(f"unknown contender {name!r}")


class generated_kernels_always:
    """During warm-up, make cogra use its per-shape generated kernels even on a few rows,
    so that generating and compiling them (once per shape) is not measured: the query
    kernels', the sliding kernel's and the finish's thresholds at 0, and the sliding
    kernel used however few events a window of the warm-up's rows holds.  (Else the
    engine requests their compile in the background, from a process the harness kills
    with the child's tree when the run ends: on a fresh machine the 100k-event sliding
    runs measured the generic sharing kernel, ~4x slower.)"""

    def _thresholds(self) -> list[tuple[Any, str]]:
        from cogra.runtime.compiled import kernel_driver
        from cogra.runtime.compiled.finish import by_column
        from cogra.runtime.compiled.windows import sliding

        return [(kernel_driver, "SPECIALIZE_MIN_EVENTS"), (sliding, "SPECIALIZE_MIN_EVENTS"),
                (sliding, "MIN_EVENTS_PER_WINDOW"), (by_column, "SPECIALIZE_MIN_KEYS")]

    def __enter__(self) -> None:
        self.old = [(module, name, getattr(module, name)) for module, name in self._thresholds()]
        for module, name, _ in self.old:
            setattr(module, name, 0)

    def __exit__(self, *exc: object) -> None:
        for module, name, value in self.old:
            setattr(module, name, value)


class Skip(Exception):
    """The contender cannot be set up here (reported as ``skipped``)."""


def _spark_contender() -> Callable[[str, Any], Any]:
    """cogra through Spark: MATCH_TREND over a DataFrame of the generated table."""
    import importlib.util
    import shutil

    if importlib.util.find_spec("pyspark") is None:
        raise Skip("pyspark is not installed (pip install 'cogra[spark]')")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise Skip("no Java runtime (java on PATH or JAVA_HOME)")
    try:
        from cogra.spark import match_trend, session

        # ANSI off: an overflowing COUNT is NULL, as for the other contenders (on_overflow="null").
        spark = session(**{"spark.ui.enabled": "false", "spark.sql.ansi.enabled": "false"})
    except Exception as err:  # noqa: BLE001 - any setup failure means: skip with its message
        raise Skip(f"no Spark session with the cogra shim: {type(err).__name__}: {err}") from err

    def run(q: str, table: Any) -> Any:
        df = spark.createDataFrame(table.to_pandas())
        return match_trend(df, q).collect()

    return run


def _flink_contender() -> Callable[[str, Any], Any]:
    """Flink CEP in a JVM started here (:mod:`cogra.bench.flink`); its start is reported
    apart from the jobs, in the run's engine stats."""
    from cogra.bench.flink import FlinkCep, FlinkUnavailable

    try:
        flink = FlinkCep()
    except FlinkUnavailable as err:
        raise Skip(str(err)) from err

    def run(q: str, table: Any) -> Any:
        return flink.evaluate(q, table)

    run.stats = lambda: (f"jvm_start_s={flink.start_s:.3f}"  # type: ignore[attr-defined]
                         + (f" job_s={flink.last_job_s:.3f}" if flink.last_job_s is not None else ""))
    return run


FLINK_WARMUP_ROWS = 20
"""Flink warms up on one small job (class loading, the JIT): its first job over 30 events
took 4.5 s, the next ones 1.6 s.  Not on WARMUP_ROWS rows: under skip-till-any-match
Flink builds every match, 2^n of them, and 300 events never finish."""


def available(name: str) -> bool:
    if name == "flink":
        from cogra.bench.flink import FlinkUnavailable, flink_lib

        try:
            flink_lib()
        except FlinkUnavailable:
            return False
        return True
    if name == "cogra-py":
        from cogra.bench.experiments import cogra_python_available

        return cogra_python_available()
    return True


def applicable(name: str, query: str, schema: Any) -> str | None:
    """None if ``name`` can evaluate ``query`` over ``schema``, else why not."""
    try:
        if name == "greta":
            from cogra.baselines import greta

            greta.check(query, schema)
        elif name == "a-seq":
            from cogra.baselines import aseq

            aseq.check(query, schema)
        elif name == "flink":
            from cogra.bench.flink import translate

            translate(query, schema.empty_table())
    except NotImplementedError as err:
        return str(err)
    return None


def executor_of(name: str, query: str, schema: Any) -> str:
    if name not in ("cogra", "cogra-py", "spark"):
        return name
    try:
        import cogra

        return str(cogra.plan(query, schema).executor.value)
    except Exception:  # noqa: BLE001 - informational only
        return ""


# ---------------------------------------------------------------------------
# Memory measurement (in the child)
# ---------------------------------------------------------------------------


def _status_kb(field_name: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def release_free_memory() -> None:
    """Collect garbage and hand free heap pages back to the OS (glibc's heap, and Arrow's
    memory pool, which holds cogra's large per-row arrays: :mod:`cogra.runtime.arrow_arrays`),
    so that the RSS delta of the next call counts what it allocates rather than reusing
    resident pages."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class PeakRss:
    """Peak RSS of this process during a block, minus the RSS at its start."""

    def __init__(self) -> None:
        self.method = ""
        self.delta: int | None = None

    def __enter__(self) -> "PeakRss":
        self.base = _status_kb("VmRSS")
        if self.base is not None and _reset_peak() and _status_kb("VmHWM") is not None:
            self.method = "VmHWM"
        else:
            self.method = "sampled"
            self._stop = threading.Event()
            self._peak = 0
            import psutil

            proc = psutil.Process()
            self.base = proc.memory_info().rss

            def sample() -> None:
                while not self._stop.is_set():
                    self._peak = max(self._peak, proc.memory_info().rss)
                    self._stop.wait(0.002)

            self._thread = threading.Thread(target=sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.method == "VmHWM":
            self.delta = max(0, (_status_kb("VmHWM") or 0) - (self.base or 0))
        else:
            import psutil

            self._peak = max(self._peak, psutil.Process().memory_info().rss)
            self._stop.set()
            self._thread.join()
            self.delta = max(0, self._peak - (self.base or 0))


# ---------------------------------------------------------------------------
# The child
# ---------------------------------------------------------------------------


def _fixed_mmap_threshold(threshold: int = 128 * 1024) -> None:
    """glibc ``mallopt(M_MMAP_THRESHOLD, threshold)``: blocks above it are mmapped and
    unmapped when freed (the default threshold grows with the largest block freed)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-3, threshold)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def _engine_probe() -> dict | None:
    """Record ``Engine.stats`` (windows evaluated by the compiled kernels vs in Python)
    of each evaluation, when the engine keeps such statistics.  One dict copy per call."""
    try:
        from cogra.runtime import engine as eng
    except ImportError:
        return None
    box: dict = {}

    def wrap(original: Callable) -> Callable:
        def probed(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, *args, **kwargs)
            stats = getattr(self, "stats", None)
            if isinstance(stats, dict):
                box["stats"] = dict(stats)
            return result
        return probed

    hooked = False
    for name in ("run", "result_table"):  # whichever entry point this version evaluates through
        original = getattr(eng.Engine, name, None)
        if original is not None:
            setattr(eng.Engine, name, wrap(original))
            hooked = True
    return box if hooked else None


def _format_stats(stats: dict | None) -> str:
    if not stats:
        return ""
    return " ".join(f"{k}={v}" for k, v in stats.items())


def make_table(run: Run) -> Any:
    from cogra import datasets

    return datasets.by_name(run.dataset, run.n_events, seed=0, **run.data_kwargs)


def _digest(result: Any) -> tuple[int | None, str]:
    """Number of result rows and the total of its COUNT(*) column (a cross-check)."""
    if result is None or not hasattr(result, "num_rows"):
        n = len(result) if isinstance(result, list) else None
        return n, ""
    total = 0
    if "COUNT(*)" in result.column_names:
        values = [v for v in result.column("COUNT(*)").to_pylist() if v is not None]
        nulls = result.num_rows - len(values)
        total = sum(values)
        return result.num_rows, f"count={total:.6g}" + (f";null={nulls}" if nulls else "")
    import pyarrow as pa

    for name, column in zip(result.column_names, result.columns):  # else the first numeric aggregate
        if "(" in name and (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            values = [v for v in column.to_pylist() if v is not None]
            return result.num_rows, f"{name.split('(')[0].lower()}={sum(values):.6g}"
    return result.num_rows, ""


def child_main(run: Run, limits: Limits, conn: Any) -> None:
    """Entry point of the child process (see the module docstring)."""
    import warnings

    warnings.simplefilter("ignore")
    try:
        started = time.perf_counter()
        table = make_table(run)
        try:
            fn = _contender(run.contender, limits)
        except Skip as err:
            conn.send(("skipped", str(err)))
            return
        warmup = limits.warmup
        if run.meta.get("steady_state"):
            # Peak-memory runs compare steady states: warm up on the whole input, and let
            # glibc return freed blocks at once (a fixed mmap threshold) instead of keeping
            # a heap whose size depends on the process's history (docs/benchmarks.md).
            warmup = "full"
            _fixed_mmap_threshold()
        if warmup != "none" and run.contender not in ("two-step", "sleep"):
            rows = table.num_rows if warmup == "full" else min(WARMUP_ROWS, table.num_rows)
            if run.contender == "flink":
                rows = min(FLINK_WARMUP_ROWS, table.num_rows)
            with generated_kernels_always():
                for query in filter(None, (run.paired_query, run.query)):
                    fn(query, table.slice(0, rows))
        probe = _engine_probe() if run.contender.startswith("cogra") else None
        gc.collect()
        conn.send(("ready", time.perf_counter() - started))
        latencies, deltas, method, result, paired = [], [], "", None, []
        for _ in range(max(1, limits.repeat)):
            result = None
            if run.paired_query:  # (its result is dropped before the measured call)
                release_free_memory()
                t0 = time.perf_counter()
                fn(run.paired_query, table)
                paired.append(time.perf_counter() - t0)
            release_free_memory()
            with PeakRss() as peak:
                t0 = time.perf_counter()
                result = fn(run.query, table)
                latencies.append(time.perf_counter() - t0)
            deltas.append(peak.delta)
            method = peak.method
        rows, digest = _digest(result)
        conn.send(("result", {
            "latencies": latencies, "paired_latencies": paired, "rss_delta": max(d for d in deltas if d is not None) if any(
                d is not None for d in deltas) else None,
            "rss_method": method, "rows": rows, "digest": digest,
            "engine_stats": _format_stats(probe.get("stats")) if probe else (
                fn.stats() if hasattr(fn, "stats") else ""),
        }))
        if limits.tracemalloc:
            import tracemalloc

            result = None
            release_free_memory()
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
            fn(run.query, table)
            peak_bytes = tracemalloc.get_traced_memory()[1] - base
            tracemalloc.stop()
            conn.send(("traced", peak_bytes))
    except BaseException as err:  # noqa: BLE001 - everything goes back to the parent
        from cogra.baselines import BaselineLimitExceeded

        try:
            from cogra.reference import ReferenceLimitExceeded
        except ImportError:  # pragma: no cover
            ReferenceLimitExceeded = ()  # type: ignore[assignment]
        if isinstance(err, (BaselineLimitExceeded, ReferenceLimitExceeded)):
            conn.send(("limit", f"{type(err).__name__}: {err}"))
        elif isinstance(err, NotImplementedError):
            conn.send(("n/a", str(err)))
        elif isinstance(err, MemoryError):
            conn.send(("oom", "MemoryError"))
        else:
            conn.send(("error", f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=6)}"))
    finally:
        conn.close()


# ---------------------------------------------------------------------------
# The parent
# ---------------------------------------------------------------------------

_CONTEXT = None
PRELOAD = ["numpy", "pyarrow", "pyarrow.compute", "psutil", "cogra", "cogra.api", "cogra.datasets",
           "cogra.reference", "cogra.baselines.greta", "cogra.baselines.aseq", "cogra.bench.runner",
           "cogra.bench.warm"]


def _context() -> Any:
    global _CONTEXT
    if _CONTEXT is None:
        methods = mp.get_all_start_methods()
        if "forkserver" in methods:
            _CONTEXT = mp.get_context("forkserver")
            _CONTEXT.set_forkserver_preload(PRELOAD)
        else:  # pragma: no cover - Windows
            _CONTEXT = mp.get_context("spawn")
    return _CONTEXT


def measure(run: Run, limits: Limits) -> Outcome:
    """Run ``run`` in a child process under ``limits``."""
    import psutil

    ctx = _context()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=child_main, args=(run, limits, send), daemon=True)
    began = time.perf_counter()
    proc.start()
    send.close()
    ps = None
    try:
        ps = psutil.Process(proc.pid)
    except psutil.Error:
        pass
    out = Outcome(status=ERROR)

    def wait(deadline: float) -> tuple[str, Any] | str:
        """The next message, or "timeout" / "oom" / "died"."""
        while True:
            if recv.poll(0.05):
                try:
                    return recv.recv()
                except EOFError:
                    return "died"
            if not proc.is_alive() and not recv.poll(0):
                return "died"
            if ps is not None:
                try:
                    rss = ps.memory_info().rss
                    if rss > limits.memory_limit:
                        return "oom"
                except psutil.Error:
                    pass
            if time.perf_counter() > deadline:
                return "timeout"

    try:
        msg = wait(time.perf_counter() + limits.setup_limit)
        if isinstance(msg, str) or msg[0] != "ready":
            return _failed(out, msg, "setup", limits, began)
        out.setup_s = msg[1]
        clock = time.perf_counter()
        msg = wait(clock + limits.time_limit * max(1, limits.repeat))
        if isinstance(msg, str) or msg[0] != "result":
            return _failed(out, msg, "evaluation", limits, began)
        data = msg[1]
        lat = data["latencies"]
        out.status = OK
        out.latency_s = statistics.median(lat)
        out.latency_min_s = min(lat)
        if data.get("paired_latencies"):
            out.paired_latency_s = statistics.median(data["paired_latencies"])
        out.repeats = len(lat)
        out.throughput_eps = run.n_events / out.latency_s if out.latency_s > 0 else math.inf
        out.rss_peak_delta_bytes = data["rss_delta"]
        out.rss_method = data["rss_method"]
        out.result_rows = data["rows"]
        out.result_digest = data["digest"]
        out.engine_stats = data.get("engine_stats", "")
        if limits.tracemalloc:
            # tracemalloc slows pure-Python code down several times: allow for it.
            budget = min(max(limits.time_limit, 2.0), 6 * out.latency_s + 1)
            msg = wait(time.perf_counter() + budget)
            if not isinstance(msg, str) and msg[0] == "traced":
                out.tracemalloc_peak_bytes = msg[1]
            else:
                out.message = "tracemalloc run cut off (took too long)"
        return out
    finally:
        out.wall_s = time.perf_counter() - began
        if proc.is_alive():
            _kill_tree(proc, ps)
        proc.join(5)
        recv.close()


def _kill_tree(proc: Any, ps: Any) -> None:
    """Kill our child and the processes it started (e.g. a Spark JVM), by pid."""
    import psutil

    kids = []
    if ps is not None:
        try:
            kids = ps.children(recursive=True)
        except psutil.Error:
            pass
    proc.kill()
    for kid in kids:
        try:
            kid.kill()
        except psutil.Error:
            pass


def _failed(out: Outcome, msg: Any, phase: str, limits: Limits, began: float) -> Outcome:
    if msg == "timeout":
        if phase == "setup":
            out.status, out.message = ERROR, f"setup exceeded {limits.setup_limit:g} s"
        else:
            out.status, out.message = DNF, f"exceeded the time limit of {limits.time_limit:g} s"
    elif msg == "oom":
        out.status, out.message = OOM, f"RSS exceeded the memory limit of {limits.memory_limit / 2**30:.1f} GiB"
    elif msg == "died":
        out.status, out.message = ERROR, "the child process died without a result"
    else:
        kind, text = msg
        if kind == "skipped":
            out.status, out.message = SKIPPED, text
        elif kind == "n/a":
            out.status, out.message = NA, text
        elif kind == "limit":
            out.status, out.message = DNF, text
        elif kind == "oom":
            out.status, out.message = OOM, text
        else:
            out.status, out.message = ERROR, str(text)
    return out


def outcome_row(run: Run, out: Outcome) -> dict:
    row = {
        "experiment": run.experiment, "series": run.series, "contender": run.contender,
        "x": run.x, "dataset": run.dataset, "n_events": run.n_events,
        "semantics": run.meta.get("semantics", ""), "selectivity": run.meta.get("selectivity", ""),
        "groups": run.meta.get("groups", ""),
    }
    row.update(asdict(out))
    row["query"] = run.query
    return row


# ---------------------------------------------------------------------------
# Many runs: ordering, DNF propagation, progress, CSV
# ---------------------------------------------------------------------------

CSV_FIELDS = [
    "experiment", "series", "contender", "x", "dataset", "n_events", "semantics", "selectivity",
    "groups", "executor", "engine_stats", "status", "message", "latency_s", "latency_min_s", "paired_latency_s", "repeats",
    "throughput_eps", "rss_peak_delta_bytes", "rss_method", "tracemalloc_peak_bytes",
    "result_rows", "result_digest", "setup_s", "wall_s", "query",
]


class Progress:
    """One line per run on stderr: counter, elapsed time and an ETA."""

    def __init__(self, total: int, stream: Any = None, enabled: bool = True):
        import sys

        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.began = time.perf_counter()
        self.done = 0
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def _clock(self, seconds: float) -> str:
        seconds = int(round(seconds))
        return f"{seconds // 60}:{seconds % 60:02d}"

    def _prefix(self, index: int, run: Run) -> str:
        x = f"{run.x:,}" if isinstance(run.x, int) else str(run.x)
        return f"[{index:>3}/{self.total}] {run.experiment:<15} {run.series:<26} x={x:<11}"

    def start(self, index: int, run: Run) -> None:
        if self.enabled and self.tty:
            self.stream.write(self._prefix(index, run) + " running...\r")
            self.stream.flush()

    def finish(self, index: int, run: Run, out: Outcome, note: str = "") -> None:
        self.done += 1
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.began
        eta = elapsed / self.done * (self.total - self.done)
        if out.status == OK:
            rss = "" if out.rss_peak_delta_bytes is None else f" rss+{out.rss_peak_delta_bytes / 2**20:,.1f}MB"
            what = f"ok  {out.latency_s:9.4f} s {_si(out.throughput_eps)}ev/s{rss}"
        else:
            what = f"{out.status:<4} {out.message.splitlines()[0][:60] if out.message else ''}"
        line = f"{self._prefix(index, run)} {what}{note}  [{self._clock(elapsed)} elapsed, ETA {self._clock(eta)}]"
        self.stream.write(("\x1b[2K" if self.tty else "") + line + "\n")
        self.stream.flush()


def _si(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:7.2f}{unit}"
    return f"{x:7.1f} "


def run_all(runs: list[Run], limits: Limits, csv_path: Any, *, categorical: set[str] = frozenset(),
            progress: bool = True) -> list[dict]:
    """Measure ``runs`` one after the other; append each to ``csv_path`` as it finishes.

    Within a series (same experiment and series), runs are in order of difficulty: once
    one exceeds a limit, the later ones are reported as DNF without running (not for
    categorical experiments).  Identical runs are measured once.  On Ctrl-C, the runs
    so far are returned (and are in the CSV).
    """
    import csv

    state = _RunState(Progress(len(runs), enabled=progress), categorical)
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        f.flush()
        try:
            for i, run in enumerate(runs, 1):
                state.bar.start(i, run)
                out, note = state.outcome(run, limits)
                row = outcome_row(run, out)
                writer.writerow(row)
                f.flush()
                state.rows.append(row)
                state.bar.finish(i, run, out, note)
        except KeyboardInterrupt:
            state.bar.stream.write(f"\ninterrupted after {len(state.rows)} of {len(runs)} runs\n")
    return state.rows


class _RunState:
    def __init__(self, bar: Progress, categorical: set[str]):
        self.bar = bar
        self.categorical = categorical
        self.failed: dict[tuple[str, str], tuple[str, Any]] = {}  # series -> (status, x)
        self.cache: dict[tuple, Outcome] = {}
        self.schemas: dict[tuple, Any] = {}
        self.rows: list[dict] = []

    def schema(self, run: Run) -> Any:
        if run.contender == "sleep":
            return None
        key = (run.dataset, tuple(sorted(run.data_kwargs.items())))
        if key not in self.schemas:
            self.schemas[key] = make_table(Run(run.experiment, "", "", 0, run.dataset, 20, "",
                                               dict(run.data_kwargs))).schema
        return self.schemas[key]

    def outcome(self, run: Run, limits: Limits) -> tuple[Outcome, str]:
        note = ""
        series = (run.experiment, run.series)
        schema = self.schema(run)
        if not available(run.contender):
            out = Outcome(status=NA, message=f"{run.contender} is not available in this build")
        elif schema is not None and (why := applicable(run.contender, run.query, schema)):
            out = Outcome(status=NA, message=why)
        elif series in self.failed and run.experiment not in self.categorical:
            status, x = self.failed[series]
            shown = f"{x:,}" if isinstance(x, int) else x
            out = Outcome(status=status, message=f"not run: {status} already at x={shown}")
        elif run.key() in self.cache:
            out, note = self.cache[run.key()], "  (same run as before)"
        else:
            out = measure(run, limits)
            self.cache[run.key()] = out
        if out.status in (DNF, OOM) and series not in self.failed:
            self.failed[series] = (out.status, run.x)
        if not out.executor and schema is not None:
            out.executor = executor_of(run.contender, run.query, schema)
        return out, note
