"""Makes `rt_helpers` (hand-built executables) importable under --import-mode=importlib."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture(params=["bytecode", "compiled"])
def exec_mode(request: pytest.FixtureRequest) -> str:
    """Runs a VM test in both exec modes."""
    return request.param
