"""examples/notebook.ipynb executed by nbclient in a fresh kernel, as `make test` runs it:
a tiny random transformers model in memory, `attnviz.show` and `attnviz.capture` on it,
and the notebook's own check that the captured weights equal the model's eager
attentions to 1e-5 (tests/e2e/test_notebook.py opens the same notebook in JupyterLab)."""

from __future__ import annotations

from pathlib import Path

import nbclient
import nbformat

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "notebook.ipynb"


def test_the_example_notebook_runs_and_its_weights_are_the_models_own(tmp_path):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in notebook.cells), "the notebook is kept unexecuted"
    client = nbclient.NotebookClient(
        notebook, timeout=180, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()  # (a cell's error raises CellExecutionError, its traceback shown)
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    printed = "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")
    # the widget: a view of anywidget's, one the frontend draws from its model
    widgets = [
        o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    assert len(widgets) == 1
    assert "'weights': (4, 14, 14)" in printed and "'k': (2, 14, 16)" in printed
    for layer in (0, 1):
        line = next(s for s in printed.splitlines() if s.startswith(f"layer {layer}:"))
        assert float(line.rsplit(" ", 1)[1]) < 1e-5, line
