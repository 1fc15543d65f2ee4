"""Moved to `rvm.kernels.entry`; this old name is the same module (kernels saved before the move
import it by this path)."""

import sys

import rvm.kernels.entry  # noqa: F401 - the module this name aliases

sys.modules[__name__] = sys.modules["rvm.kernels.entry"]
