"""Moved to `rvm.runtime.native.mathlib`; this name stays so kernels saved before the move load.

Executables saved by rvm 0.1.0 hold kernel source with ``from rvm.jit.mathlib import ...``.
New kernels import `rvm.runtime.native.mathlib` and never load the compiler package.
"""

from __future__ import annotations

from rvm.runtime.native.mathlib import *  # noqa: F403
