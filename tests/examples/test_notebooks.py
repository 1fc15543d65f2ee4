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
