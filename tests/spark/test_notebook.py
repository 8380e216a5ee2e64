"""examples/cogra.ipynb runs top to bottom in a fresh Jupyter kernel, as a user opens it.

The notebook is executed with nbclient in an ipykernel kernel of this interpreter (a kernel
spec written for the test, so that no kernel installed on the machine is picked up), in a
temporary working directory; the kernel starts its own Spark application.  A cell added at
the end writes what the notebook computed, which is checked here against
:func:`cogra.evaluate`: q1-q3 are the report's texts, q1's rows through the extension equal
the evaluation of the same generated data, every window of the Update-mode stream answered
with its final count at the end and some answered before, and the plot cell drew a PNG.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")
nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from cogra.examples import Q1, Q2, Q3  # noqa: E402
from tests.spark.rows import evaluate_rows, same_rows  # noqa: E402

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "cogra.ipynb"
KERNEL = "cogra-notebook-test"

#: Appended to the notebook: what it computed, for the checks below (its last cell stopped
#: Spark, so only Python values are read).
REPORT = '''
import json as _json
import pyarrow.parquet as _pq
_pq.write_table(activity_events, "activity.parquet")
_pq.write_table(ticks, "ticks.parquet")
print("NOTEBOOK-STATE " + _json.dumps({
    "queries": [q1, q2, q3],
    "stream_query": stream_query,
    "q1_rows": _json.loads(q1_table.to_json(orient="values")),
    "q1_columns": list(q1_table.columns),
    "q2_rows": len(q2_table), "q3_rows": len(q3_table),
    "updates": updates,
}))
'''


def words(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def kernel_env(tmp_path, monkeypatch):
    """A kernel spec named ``KERNEL`` that runs this interpreter, found first on JUPYTER_PATH,
    and a kernel environment of the test's own (no user profile, the inline plot backend)."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "cogra (test)", "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebook's tempfile.mkdtemp(), kept here
    # As the other tests' Spark workers: the generic kernels, no background compiles.
    monkeypatch.setenv("COGRA_GENERATED_KERNELS", "0")
    monkeypatch.setenv("COGRA_BACKGROUND_COMPILE", "0")
    work = tmp_path / "work"
    work.mkdir()
    return work


def outputs_of(nb, tag: str) -> list:
    (cell,) = [c for c in nb.cells if tag in c.metadata.get("tags", [])]
    return cell.outputs


def test_notebook_runs_top_to_bottom(kernel_env):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code), \
        "examples/cogra.ipynb is stored with outputs: clear them before committing"
    nb.cells.append(nbformat.v4.new_code_cell(REPORT))
    client = nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=600,
                                     resources={"metadata": {"path": str(kernel_env)}})
    started = time.perf_counter()
    client.execute()  # raises CellExecutionError, naming the cell, if one fails
    print(f"examples/cogra.ipynb ran in {time.perf_counter() - started:.1f} s")

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    (state,) = [o.text.split("NOTEBOOK-STATE ", 1)[1] for o in nb.cells[-1].outputs
                if o.output_type == "stream" and "NOTEBOOK-STATE " in o.text]
    state = json.loads(state)

    # The report's queries as printed.
    assert [words(q) for q in state["queries"]] == [words(q) for q in (Q1, Q2, Q3)]
    assert state["q2_rows"] > 0 and state["q3_rows"] > 0

    # q1 through the extension: cogra.evaluate's rows over the notebook's data.
    columns, want = evaluate_rows(Q1, pq.read_table(kernel_env / "activity.parquet"))
    assert state["q1_columns"] == columns
    got = [tuple(r) for r in state["q1_rows"]]
    assert len(got) > 50 and same_rows(got, want)

    # The Update-mode stream: upserted on (sector, window), every window's last row is
    # batch's count over all the trades; some windows answered in several micro-batches.
    updates = state["updates"]
    assert len({u["micro-batch"] for u in updates}) >= 3, updates
    latest, answers = {}, {}
    for u in sorted(updates, key=lambda u: u["micro-batch"]):
        key = (u["sector"], u["window_start"], u["window_end"])
        latest[key] = u["COUNT(*)"]
        answers[key] = answers.get(key, 0) + 1
    columns, rows = evaluate_rows(state["stream_query"], pq.read_table(kernel_env / "ticks.parquet"))
    assert columns == ["sector", "COUNT(*)", "window_start", "window_end"]
    assert latest == {(s, ws, we): n for s, n, ws, we in rows}
    assert sum(n > 1 for n in answers.values()) >= 10, answers
    shown = [o for o in outputs_of(nb, "stream-updates") if o.output_type == "execute_result"]
    assert shown and "window_start" in shown[0].data["text/plain"]

    # The plot rendered inline.
    assert any("image/png" in o.get("data", {}) for o in outputs_of(nb, "plot"))
