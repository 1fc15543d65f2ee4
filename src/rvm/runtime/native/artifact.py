"""Moved to `rvm.runtime.loading.artifact`; this old name is the same module."""

import sys

import rvm.runtime.loading.artifact  # noqa: F401 - the module this name aliases

sys.modules[__name__] = sys.modules["rvm.runtime.loading.artifact"]
