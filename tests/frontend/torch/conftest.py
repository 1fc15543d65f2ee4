"""PyTorch frontend tests: skipped without torch; a test kernel cache; eager-PyTorch checks."""

from __future__ import annotations

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("RVM_CACHE_DIR", os.path.join(tempfile.gettempdir(), "rvm-test-cache"))
