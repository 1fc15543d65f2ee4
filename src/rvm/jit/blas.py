"""Moved to `rvm.runtime.native.blas`; this name stays so kernels saved before the move load.

Executables saved by rvm 0.1.0 hold kernel source with ``from rvm.jit.blas import ...``.
New kernels import `rvm.runtime.native.blas` and never load the compiler package.
"""

from __future__ import annotations

from rvm.runtime.native.blas import *  # noqa: F403
