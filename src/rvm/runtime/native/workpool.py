"""Moved to `rvm.kernels.workpool`; this old name is the same module (kernels saved before the move
import it by this path)."""

import sys

import rvm.kernels.workpool  # noqa: F401 - the module this name aliases

sys.modules[__name__] = sys.modules["rvm.kernels.workpool"]
