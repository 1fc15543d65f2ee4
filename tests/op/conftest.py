"""Make the shared helpers of the op tests (`op_testing`) importable in any import mode."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
