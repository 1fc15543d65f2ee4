"""The example notebook, and the VM tour cut at its `# %%` markers, run on a real Jupyter kernel.

Each cell runs in an IPython kernel (nbclient + ipykernel), where `@module` classes live in
`__main__` and their source only in IPython's line cache: the way notebook users meet rvm.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TOUR = EXAMPLES / "notebooks" / "tour.ipynb"


def run_notebook(nb: nbformat.NotebookNode, cwd: Path) -> nbformat.NotebookNode:
    """Executes every cell on a fresh python3 kernel; a cell error fails the test."""
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=600,
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()
    return nb


def outputs_of(cell: nbformat.NotebookNode) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", ""))
        data = out.get("data", {})
        parts.append(data.get("text/html", ""))
        parts.append(data.get("text/plain", ""))
    return "\n".join(parts)


def test_tour_notebook_is_saved_without_outputs_and_matches_its_generator():
    sys.path.insert(0, str(TOUR.parent))
    try:
        import make_tour
    finally:
        sys.path.pop(0)
    saved = nbformat.read(TOUR, as_version=4)
    assert [c.source for c in saved.cells] == [c.source for c in make_tour.build().cells]
    for cell in saved.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_tour_notebook_runs_on_a_jupyter_kernel(tmp_path):
    nb = run_notebook(nbformat.read(TOUR, as_version=4), tmp_path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    text = "\n".join(outputs_of(c) for c in code)
    assert "all four agree with rvm.interpret" in text
    assert "image/png" in str([c.outputs for c in code])  # the bar chart
    assert "<details" in text  # the executable's HTML summary folds its bytecode
    assert "VM overhead" in text  # the profile
    assert "invoke_packed" in text  # the bytecode
    assert "all exec modes match eager PyTorch" in text or "torch is not installed" in text


def tour_cells() -> list[str]:
    """examples/vm_tour.py cut into cells at its `# %%` markers."""
    source = (EXAMPLES / "vm_tour.py").read_text()
    return [cell for cell in re.split(r"^# %%.*$", source, flags=re.M) if cell.strip()]


def test_vm_tour_runs_cut_into_notebook_cells(tmp_path):
    cells = tour_cells()
    assert len(cells) > 5
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    nb = run_notebook(nb, tmp_path)
    text = "\n".join(outputs_of(c) for c in nb.cells)
    assert "def main" in text
    assert "rvm.ShapeError" in text


@pytest.mark.parametrize("code", ["import rvm", "from rvm.script import T, module, func"])
def test_kernel_sees_rvm(tmp_path, code):
    nb = run_notebook(new_notebook(cells=[new_code_cell(code)]), tmp_path)
    assert not [o for o in nb.cells[0].outputs if o.output_type == "error"]


def _chart_lines() -> str:
    """The tour's chart code: its imports and the lines after the timings that draw."""
    cells = [c.source for c in nbformat.read(TOUR, as_version=4).cells if c.cell_type == "code"]
    imports = next(c for c in cells if "import matplotlib" in c)
    chart = next(c for c in cells if "set_xscale" in c)
    drawing = chart[chart.index("fig, ax = plt.subplots") : chart.index("fig.tight_layout()")]
    kept = [ln for ln in imports.splitlines() if "matplotlib" in ln or "numpy" in ln]
    return "\n".join(kept) + "\n" + drawing


@pytest.mark.parametrize(
    "timings",
    [
        {"interpret": 410.0, "numpy kernels": 330.0, "jit kernels": 300.0},  # within a decade
        {"interpret": 5000.0, "numpy kernels": 900.0, "jit kernels": 300.0},  # over one
        {"interpret": 52000.0, "numpy kernels": 900.0, "jit kernels": 35.0},  # over three
    ],
)
def test_the_tour_charts_log_axis_labels_do_not_overlap(timings):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scope = {"timings": timings}
    exec(_chart_lines(), scope)  # noqa: S102 - the notebook's own drawing code
    fig, ax = scope["fig"], scope["ax"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    lo, hi = ax.get_xlim()
    labels = [
        t.label1
        for t in ax.xaxis.get_major_ticks() + ax.xaxis.get_minor_ticks()
        if t.label1.get_visible() and t.label1.get_text() and lo <= t.get_loc() <= hi
    ]
    boxes = sorted((lab.get_window_extent(renderer) for lab in labels), key=lambda b: b.x0)
    plt.close(fig)
    assert len(boxes) >= 2, [lab.get_text() for lab in labels]  # the axis has a scale
    assert all(a.x1 <= b.x0 for a, b in zip(boxes, boxes[1:])), [lab.get_text() for lab in labels]
