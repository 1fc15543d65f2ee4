"""examples/torch_quickstart.py runs as a script and agrees with eager PyTorch."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("transformers") is None:  # looked up, not imported:
    pytest.skip("transformers is not installed", allow_module_level=True)  # importing costs 3 CPU-s

ROOT = Path(__file__).resolve().parents[2]


def test_torch_quickstart_runs_and_matches_eager_pytorch():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "torch_quickstart.py"), "--kernels", "numpy"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    errors = [float(e) for e in re.findall(r"rel\. error (\S+)", proc.stdout)]
    assert len(errors) == 6 and max(errors) <= 1e-4, proc.stdout
    assert "rvm matches eager PyTorch" in proc.stdout
