"""examples/generate.py runs as a script and its tokens equal the ONNX Runtime loop's (-m slow:
about 40 s, a fresh process compiling both decoders; tests/generation checks `generate` against
ONNX Runtime in every exec mode in the default run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_generate_example_matches_onnx_runtime():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "generate.py"), "--new", "6"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("tokens equal to the ONNX Runtime loop's") == 2, proc.stdout
    assert "DIFFERENT" not in proc.stdout
