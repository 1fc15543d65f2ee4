"""The README's runnable programs run as pasted, in a fresh process."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def first_program() -> str:
    text = README.read_text()
    section = text[text.index("## A first program") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README's first program has no python block"
    return match.group(1)


def test_readme_first_program_runs_as_pasted(tmp_path):
    script = tmp_path / "first.py"
    script.write_text(first_program())
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert "def main" in out.stdout  # print(Model)
    assert (tmp_path / "model.rvmx").is_file()


def test_readme_python_in_and_out_runs_as_pasted(tmp_path):
    text = README.read_text()
    section = text[text.index("## Python in and out of the VM") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README's Python in and out section has no python block"
    script = tmp_path / "in_out.py"
    script.write_text(match.group(1))
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert "z: float32[2, 4]" in out.stdout
    assert "[1. 2. 3. 4.]" in out.stdout
    assert "(5, 2)" in out.stdout
    assert "planned storage" in out.stdout


def test_the_readme_counts_operators_right():
    """A count of operators in the README (if it states one) is the number registered."""
    from rvm.ir import list_ops

    counts = re.findall(r"\b(\d+) operators\b", README.read_text())
    assert all(int(n) == len(list_ops()) for n in counts), (counts, len(list_ops()))
