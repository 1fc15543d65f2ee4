"""Moved to `rvm.kernels.cblas`; this old name is the same module (kernels saved before the move
import it by this path)."""

import sys

import rvm.kernels.cblas  # noqa: F401 - the module this name aliases

sys.modules[__name__] = sys.modules["rvm.kernels.cblas"]
