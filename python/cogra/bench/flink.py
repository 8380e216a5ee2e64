"""Flink CEP as a contender of ``cogra bench``: a real, widely used engine that builds
every match (the two-step way), run here from the jars of ``apache-flink-libraries``.

The harness (``flink/CograFlinkCep.java``) is this project's own source, compiled with
the JDK's ``javac`` against those jars at first use and cached by the source's and
Flink's versions.  One JVM per benchmark process answers one job per query: its start is
reported apart from the jobs (:attr:`FlinkCep.start_s`), and each job runs in a local
mini-cluster at parallelism 1 with ``AfterMatchSkipStrategy.noSkip()``.

What Flink gets is what a Flink user would write for the query (:func:`translate`):

* ``skip-till-any-match``: ``oneOrMore().allowCombinations()`` and ``followedByAny``;
* ``contiguous``: ``oneOrMore().consecutive()`` and ``next``, over the keyed stream of
  the events that play a variable (cogra's sub-stream);
* ``skip-till-next-match`` has no Flink equivalent: ``oneOrMore()`` with ``followedBy``
  (relaxed contiguity) also takes later events after skipped ones that could have
  extended the trend, which skip-till-next-match forbids (docs/language.md, Event matching
  semantics).  :func:`translate` refuses it
  (the plots show only what agrees); ``allow_next=True`` runs it anyway, for the test
  that shows an input on which the two differ.

Supported: ``SEQ`` of variables, each once or ``V+`` (or one ``V+``); local predicates
(evaluated here, passed as each event's play bits); predicates on adjacent events of the
arithmetic-and-comparison kind (compiled to postfix programs the harness runs on
doubles); ``[attr]`` keys with GROUP-BY on the same attributes; COUNT, SUM, AVG, MIN,
MAX; one window (no WITHIN).  Anything else raises :class:`NotImplementedError`, which
the benchmark reports as n/a.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

SOURCE = Path(__file__).parent / "flink" / "CograFlinkCep.java"
MAIN_CLASS = "CograFlinkCep"
INSTALL_HINT = "pip install 'cogra[bench-flink]' (apache-flink-libraries: Flink's jars) and a JDK"


class FlinkUnavailable(RuntimeError):
    """Flink's jars or a JDK are missing here."""


def flink_lib() -> Path:
    """The directory of Flink's jars, from the ``apache-flink-libraries`` wheel."""
    spec = importlib.util.find_spec("pyflink")
    if spec is None or not spec.submodule_search_locations:
        raise FlinkUnavailable(f"Flink's jars are not installed: {INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        lib = Path(location) / "lib"
        if any(lib.glob("flink-cep-*.jar")) and any(lib.glob("flink-dist-*.jar")):
            return lib
    raise FlinkUnavailable(f"no flink-cep and flink-dist jars under pyflink/lib: {INSTALL_HINT}")


def _jdk_tool(name: str) -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / name).exists():
        return str(Path(home) / "bin" / name)
    found = shutil.which(name)
    if found is None:
        raise FlinkUnavailable(f"no {name} on PATH or in JAVA_HOME: {INSTALL_HINT}")
    return found


def harness_classes() -> Path:
    """The harness compiled against this Flink, compiled once per source and Flink version
    into the cogra cache (:func:`cogra.runtime.caches.cache_root`)."""
    from cogra.runtime.caches import cache_root

    lib = flink_lib()
    dist = sorted(p.name for p in lib.glob("flink-dist-*.jar"))
    key = hashlib.sha256(SOURCE.read_bytes() + "|".join(dist).encode()).hexdigest()[:16]
    out = cache_root() / "flink" / key
    if (out / f"{MAIN_CLASS}.class").exists():
        return out
    tmp = Path(tempfile.mkdtemp(prefix="classes-", dir=out.parent if out.parent.exists() else None))
    done = subprocess.run([_jdk_tool("javac"), "-nowarn", "-encoding", "UTF-8", "-cp", f"{lib}/*",
                           "-d", str(tmp), str(SOURCE)], capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"compiling the Flink harness failed:\n{done.stderr[-4000:]}")
    (tmp / "log4j2.properties").write_text("rootLogger.level = OFF\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, out)
    except OSError:  # another process put it there first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


JVM_OPTIONS = [
    "-XX:+UseParallelGC",
    # What Flink's own scripts open on Java 17 (its serializers reflect into these).
    *(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
        "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio",
        "java.text", "java.time", "java.util", "java.util.concurrent", "java.util.concurrent.atomic",
        "java.util.concurrent.locks", "sun.nio.ch")),
]


# ---------------------------------------------------------------------------
# Translation
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """A query as the harness runs it."""

    semantics: str  # any | contiguous | next
    variables: tuple[dict, ...]  # name, kleene, self / from_before postfix programs
    aggregates: tuple[tuple[int, int], ...]  # per aggregate: (variable or -1, attribute or -1)
    attributes: tuple[str, ...]  # the numeric attributes the harness reads, in order
    keys: tuple[str, ...]  # plain keys (= GROUP-BY)
    plays: np.ndarray  # per row: bit v set where the row may play variable v
    items: tuple  # per RETURN item: ("group", attr) or ("agg", func, k)


_OPS = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.LT: "<", exp.LTE: "<=",
        exp.GT: ">", exp.GTE: ">=", exp.EQ: "=", exp.NEQ: "!=", exp.And: "and", exp.Or: "or"}


def _postfix(node: exp.Expression, attribute: Any) -> list[list]:
    """A bound predicate on adjacent events as postfix tokens: ``prev`` is the earlier
    event (the expression's ``cur`` role), ``cur`` the later one (``NEXT``)."""
    from cogra.analysis.expressions import ROLE_CUR, literal_value

    if isinstance(node, exp.Paren):
        return _postfix(node.this, attribute)
    if isinstance(node, exp.Column):
        return [["prev" if node.table == ROLE_CUR else "cur", attribute(node.name)]]
    if isinstance(node, exp.Literal) and not node.is_string:
        return [["lit", float(literal_value(node))]]
    if isinstance(node, exp.Neg):
        return [*_postfix(node.this, attribute), ["neg"]]
    if isinstance(node, exp.Not):
        return [*_postfix(node.this, attribute), ["not"]]
    op = _OPS.get(type(node))
    if op is not None:
        return [*_postfix(node.this, attribute), *_postfix(node.expression, attribute), [op]]
    raise NotImplementedError(f"Flink harness: predicate {node.sql()!r} is not arithmetic over numbers")


def translate(query: str, table: pa.Table, *, allow_next: bool = False) -> Spec:
    """The Flink pattern and inputs for ``query`` over ``table``, or NotImplementedError."""
    from cogra.analysis.binding import bind
    from cogra.analysis.expressions import Val, evaluate, truth
    from cogra.api import parse
    from cogra.language.ast import Aggregate, AttrRef, Plus, Semantics, Seq, Var

    q = parse(query)
    if q.semantics is Semantics.NEXT and not allow_next:
        raise NotImplementedError("Flink CEP has no skip-till-next-match: followedBy with oneOrMore() also "
                                  "matches after skipped events that could extend a trend "
                                  "(docs/language.md, Event matching semantics)")
    if q.window is not None:
        raise NotImplementedError("Flink harness: one window only (no WITHIN)")
    items = q.pattern.items if isinstance(q.pattern, Seq) else (q.pattern,)
    shape = []
    for item in items:
        if isinstance(item, Var):
            shape.append((item, False))
        elif isinstance(item, Plus) and isinstance(item.inner, Var):
            shape.append((item.inner, True))
        else:
            raise NotImplementedError("Flink harness: a SEQ of variables, each once or V+")
    names = [v.name for v, _ in shape]
    if len(set(names)) != len(names) or len(names) > 30:
        raise NotImplementedError("Flink harness: distinct variables, at most 30")
    bound = bind(q, table.schema)
    if bound.negations or any(bound.var_keys):
        raise NotImplementedError("Flink harness: no NOT, no variable keys")
    if tuple(bound.automaton.names) != tuple(names):
        raise NotImplementedError("Flink harness: the pattern's automaton has other states")
    group = tuple(g.name for g in q.group_by)
    if set(group) != set(bound.plain_keys):
        raise NotImplementedError("Flink harness: GROUP-BY must name exactly the [attr] keys")

    attributes: list[str] = []

    def attribute(name: str) -> int:
        if not (pa.types.is_integer(table.schema.field(name).type) or pa.types.is_floating(table.schema.field(name).type)):
            raise NotImplementedError(f"Flink harness: attribute {name!r} is not a number")
        if table.column(name).null_count:
            raise NotImplementedError(f"Flink harness: attribute {name!r} has NULLs (the harness reads doubles)")
        if name not in attributes:
            attributes.append(name)
        return attributes.index(name)

    n = table.num_rows

    def env(role: str, name: str) -> Val:
        column = table.column(name)
        return Val(column.to_numpy(zero_copy_only=False), np.asarray(column.is_valid()))

    plays = np.zeros(n, np.int32)
    for v, (var, _) in enumerate(shape):
        ok = np.ones(n, bool)
        if bound.type_column is not None:
            ok &= np.asarray(pc.equal(table.column(bound.type_column), var.event_type).fill_null(False))
        for predicate in bound.local[v]:
            ok &= truth(evaluate(predicate, env), n)
        plays[ok] |= np.int32(1 << v)
    variables = [{"name": var.name, "kleene": kleene, "self": [], "from_before": []} for var, kleene in shape]
    for p in bound.adjacent:
        if not p.uses_prev:
            raise NotImplementedError("Flink harness: a predicate on NEXT(V) alone")
        program = _postfix(p.expression, attribute)
        if p.prev == p.next and shape[p.next][1]:
            variables[p.next]["self"].append(program)
        elif p.prev == p.next - 1:
            variables[p.next]["from_before"].append(program)
        else:
            raise NotImplementedError("Flink harness: predicates between consecutive variables only")
    aggregates: list[tuple[int, int]] = []
    out_items: list[tuple] = []
    for item in q.returns:
        value = item.value
        if isinstance(value, AttrRef):
            out_items.append(("group", value.name))
            continue
        assert isinstance(value, Aggregate)
        var = names.index(value.variable) if value.variable is not None else -1
        attr = attribute(value.attribute) if value.attribute is not None else -1
        aggregates.append((var, attr))
        out_items.append(("agg", value.func.value, len(aggregates) - 1, value.text))
    return Spec(
        semantics={Semantics.ANY: "any", Semantics.CONT: "contiguous", Semantics.NEXT: "next"}[q.semantics],
        variables=tuple(variables), aggregates=tuple(aggregates), attributes=tuple(attributes),
        keys=tuple(bound.plain_keys), plays=plays, items=tuple(out_items))


def _key_codes(table: pa.Table, keys: tuple[str, ...]) -> tuple[np.ndarray, list[tuple]]:
    """Per row, the code of its key values (the engine's :func:`~cogra.runtime.columns.key_codes`);
    and the values of each code."""
    from cogra.runtime.columns import key_codes

    codes, first = key_codes(table, keys)
    if not keys:
        return codes, [()]
    columns = [table.column(k).take(pa.array(first)).to_pylist() for k in keys]
    return codes, list(zip(*columns))


def write_events(path: Path, table: pa.Table, spec: Spec, codes: np.ndarray) -> int:
    """The events file the harness reads: rows in time order (stable), columns after one
    another: int64 time, int64 key (``codes``), int32 plays, float64 per attribute."""
    order = np.argsort(np.asarray(table.column("time"), np.int64), kind="stable")
    with open(path, "wb") as f:
        f.write(np.asarray(table.column("time"), np.int64)[order].astype("<i8").tobytes())
        f.write(codes[order].astype("<i8").tobytes())
        f.write(spec.plays[order].astype("<i4").tobytes())
        for name in spec.attributes:
            f.write(np.asarray(table.column(name).to_numpy(zero_copy_only=False), np.float64)[order]
                    .astype("<f8").tobytes())
    return table.num_rows


# ---------------------------------------------------------------------------
# The process
# ---------------------------------------------------------------------------


class FlinkCep:
    """One JVM running the harness; :meth:`evaluate` runs one Flink job per call."""

    def __init__(self) -> None:
        lib = flink_lib()
        classes = harness_classes()
        began = time.perf_counter()
        self.proc = subprocess.Popen(
            [_jdk_tool("java"), *JVM_OPTIONS, f"-Dlog4j.configurationFile={classes / 'log4j2.properties'}",
             "-cp", f"{classes}{os.pathsep}{lib}/*", MAIN_CLASS],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._reply()
        self.start_s = time.perf_counter() - began
        """Seconds from starting the JVM to the harness's first answer."""
        self.last_job_s: float | None = None
        """The last job's seconds inside the JVM (from building the job to its result)."""
        self._dir = Path(tempfile.mkdtemp(prefix="cogra-flink-"))

    def _reply(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("COGRA "):
                return json.loads(line[len("COGRA "):])
        raise RuntimeError(f"the Flink harness ended (exit code {self.proc.wait()})")

    def run(self, spec: Spec, table: pa.Table, codes: np.ndarray) -> dict:
        """The harness's answer for ``spec`` over ``table``: per key code, ``[matches,
        then per aggregate sum, count, min, max]``."""
        path = self._dir / "events.bin"
        n = write_events(path, table, spec, codes)
        request = {"events": str(path), "n": n, "attributes": len(spec.attributes),
                   "semantics": spec.semantics, "variables": list(spec.variables),
                   "aggregates": [list(a) for a in spec.aggregates]}
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        reply = self._reply()
        if "error" in reply:
            raise RuntimeError(f"Flink job failed: {reply['error']}")
        self.last_job_s = reply["job_s"]
        return reply

    def evaluate(self, query: str, table: pa.Table, *, allow_next: bool = False) -> pa.Table:
        """``query``'s result over ``table`` as Flink CEP computes it: one row per group
        with at least one match, the RETURN items as cogra names them."""
        spec = translate(query, table, allow_next=allow_next)
        codes, values = _key_codes(table, spec.keys)
        reply = self.run(spec, table, codes)
        rows = sorted(reply["groups"].items(), key=lambda kv: int(kv[0]))
        columns: dict[str, list] = {}
        for item in spec.items:
            if item[0] == "group":
                columns[item[1]] = [values[int(code)][spec.keys.index(item[1])] for code, _ in rows]
                continue
            _, func, k, text = item
            out = []
            for _, acc in rows:
                total, count, low, high = acc[1 + 4 * k: 5 + 4 * k]
                out.append({"COUNT": acc[0] if spec.aggregates[k][0] < 0 else count, "SUM": total,
                            "AVG": total / count if count else None, "MIN": low if count else None,
                            "MAX": high if count else None}[func])
            columns[text] = out
        return pa.table({name: pa.array(vals, pa.float64() if name not in spec.keys else None)
                         for name, vals in columns.items()})

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "FlinkCep":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
