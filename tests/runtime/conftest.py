"""Makes `rt_helpers` (hand-built executables) importable under --import-mode=importlib; the
`exec_mode` fixture is the root conftest's (every exec mode)."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
