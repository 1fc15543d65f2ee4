"""Codegen tests: their shared checks (`bf16_checks`) importable by name."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
