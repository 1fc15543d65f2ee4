"""Transform tests: the fusion tests' helpers (`fusion_helpers`) are importable."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
