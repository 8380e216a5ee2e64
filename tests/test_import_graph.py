"""The package's modules import each other without cycles -- function-level imports
included: a cycle hidden in a function still ties the two modules together, and which
one loads first then depends on who called."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "cogra"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "_shim" in path.parts or "_kernels" in path.parts:
            continue
        parts = ["cogra", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules ``name`` imports (a ``from m import x`` of submodule ``x``
    counts as importing ``m.x``; its own ancestor packages, which Python loads first
    anyway, and ``if __name__ == "__main__":`` blocks do not count)."""
    tree = ast.parse(path.read_text())
    main_blocks = [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
    skipped = {id(n) for block in main_blocks for n in ast.walk(block)}
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:  # a submodule, or a name the module itself defines
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    # A package's own ancestors load before it whatever it imports: no edge to them.
    return {m for m in found if m in modules and m != name and not name.startswith(m + ".")}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_through_others() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert graph["cogra.cli"] and graph["cogra.runtime.compiled.kernel_driver"]  # the scan sees imports at all
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _longest_chain(graph: dict[str, set[str]], root: str) -> list[str]:
    """The longest import chain from ``root`` (the graph has no cycles)."""
    memo: dict[str, list[str]] = {}

    def chain(v: str) -> list[str]:
        if v not in memo:
            memo[v] = [v, *max((chain(w) for w in sorted(graph[v])), key=len, default=[])]
        return memo[v]

    return chain(root)


def test_the_code_generator_reads_the_kernels_without_importing_them() -> None:
    """The generator copies from and hashes the kernels' sources; importing them would make
    every kernel a dependency of everything that asks for a generated kernel."""
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    generator = {m for m in modules if m.startswith("cogra.runtime.compiled.codegen.")}
    kernels = {m for m in modules if m.startswith(("cogra.runtime.compiled.aggregators.",
                                                   "cogra.runtime.compiled.windows."))}
    assert generator and kernels
    for m in generator:
        assert not graph[m] & kernels, (m, graph[m] & kernels)


def test_the_engine_is_at_most_ten_imports_deep() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    chain = _longest_chain(graph, "cogra.runtime.engine")
    assert len(chain) <= 10, " > ".join(chain)
    assert _longest_chain({"a": {"b", "c"}, "b": {"c"}, "c": set()}, "a") == ["a", "b", "c"]


def test_nothing_below_the_front_door_imports_it() -> None:
    """``cogra.api`` re-exports what the layers below define (parsing and planning once,
    evaluating a table: ``cogra.runtime.evaluation``); the language, the analysis and the
    runtime never import it."""
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    below = [m for m in modules if m.startswith(("cogra.language", "cogra.analysis", "cogra.runtime"))]
    assert "cogra.runtime.online" in below and "cogra.runtime.slices" in below
    assert [m for m in below if "cogra.api" in graph[m]] == []


PLANNING_ONLY = r"""
import sys
import pyarrow as pa
import cogra
import cogra.spark.udtf  # noqa: F401 - what Spark's analysis worker unpickles
import cogra.spark.udtf_analysis as udtf_analysis
from cogra.examples import Q1

schema = pa.schema([("time", pa.int64()), ("type", pa.string()), ("patient", pa.string()),
                    ("rate", pa.float64()), ("activity", pa.string())])
cogra.result_schema(Q1, schema, type_column=None, time_column="time")
udtf_analysis.plain_group_keys(Q1)
assert udtf_analysis.pushdown(Q1, schema, None, "time")[1]
assert "kernels    compiled" in cogra.explain(Q1)
udtf_analysis._stream_columns(Q1, schema, schema.names, None, "time")
print(sorted(m for m in sys.modules if m == "numba" or m.startswith(("numba.", "cogra.runtime.compiled.kernel_driver"))))
"""


def test_a_process_that_only_plans_never_imports_numba() -> None:
    """A Spark driver's UDTF analysis (a Python worker: no warm start) parses, binds and
    types a query, its pushdown and stream columns: none of it needs the kernels' modules,
    whose import (numba's, ~0.6 s) would sit in front of every new application's first
    query.  The names that do need them load on first use (``cogra.evaluate_batches``)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHON_WORKER_FACTORY_SECRET": "x"}
    done = subprocess.run([sys.executable, "-c", PLANNING_ONLY], capture_output=True, text=True, env=env,
                          timeout=300, cwd=PACKAGE.parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[-2] == "[]", done.stdout
    lazy = subprocess.run([sys.executable, "-c", "import cogra, sys; cogra.evaluate_batches; "
                           "print('numba' in sys.modules, cogra.OnlineEvaluation.__module__)"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert lazy.stdout.split() == ["True", "cogra.runtime.online"], lazy.stdout + lazy.stderr[-2000:]
