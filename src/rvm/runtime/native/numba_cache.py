"""Moved to `rvm.kernels.numba_cache`; this old name is the same module."""

import sys

import rvm.kernels.numba_cache  # noqa: F401 - the module this name aliases

sys.modules[__name__] = sys.modules["rvm.kernels.numba_cache"]
