"""The jit: fused primitive functions lowered to loop nests and compiled by Numba/LLVM.

- `jit_kernel(name, func, style)` (`rvm.jit.lower`): a primitive function to a `KernelRecord`
  of backend "jit" (Numba source), or the numpy kernel for ops the jit does not lower.
- `load_kernel(record)` (`rvm.jit.loader`): the kernel's Numba dispatcher, compiled once and
  cached on disk (`cache_dir`, `cache_info`, `clear_cache`).
- `compile_kernels`, `kernel_source`, `kernel_llvm`, `kernel_asm`.

Attributes are imported lazily, so the runtime's ``import rvm.jit.loader`` does not pull in
the lowering (and with it the IR and the op set).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "jit_kernel": "rvm.jit.lower",
    "FALLBACK_NOTE": "rvm.jit.lower",
    "compute": "rvm.jit.compute",
    "load_kernel": "rvm.jit.loader",
    "compile_kernels": "rvm.jit.loader",
    "kernel_source": "rvm.jit.loader",
    "kernel_llvm": "rvm.jit.loader",
    "kernel_asm": "rvm.jit.loader",
    "cache_dir": "rvm.jit.cache",
    "cache_info": "rvm.jit.cache",
    "clear_cache": "rvm.jit.cache",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rvm.jit' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
