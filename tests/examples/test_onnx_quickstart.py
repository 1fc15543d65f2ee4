"""examples/onnx_quickstart.py runs as a script and agrees with ONNX Runtime."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]


def test_onnx_quickstart_runs_and_matches_onnx_runtime():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "onnx_quickstart.py"), "--kernels", "numpy"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "def main(" in proc.stdout  # the imported module printed as rvm script
    match = re.search(r"logits against ONNX Runtime: max rel err (\S+), top-1 (\w+)", proc.stdout)
    assert match is not None, proc.stdout
    assert float(match.group(1)) <= 1e-4 and match.group(2) == "equal"
