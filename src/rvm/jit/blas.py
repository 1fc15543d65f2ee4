"""Moved to `rvm.kernels.blas`; this old name is the same module (kernels saved before the move
import it by this path, and never load the compiler package for it: `rvm.jit` is lazy)."""

import sys

import rvm.kernels.blas  # noqa: F401 - the module this name aliases

sys.modules[__name__] = sys.modules["rvm.kernels.blas"]
