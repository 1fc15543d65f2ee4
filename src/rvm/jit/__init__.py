"""The jit: fused primitive functions lowered to loop nests and compiled by Numba/LLVM.

- `jit_kernel(name, func, style)` (`rvm.jit.lower`): a primitive function to a `KernelRecord`
  of backend "jit" (Numba source), or the numpy kernel for ops the jit does not lower.
- `numpy_kernel(name, func, style)` (`rvm.jit.numpy_kernel`): the numpy backend's kernel
  record, and the jit's fallback for ops it does not lower.

The jit only compiles: loading a kernel lives in `rvm.runtime.loading`, and everything a
kernel calls at run time in `rvm.kernels`. `load_kernel`, `compile_kernels`, `kernel_source`,
`kernel_llvm`, `kernel_asm`, `cache_dir`, `cache_info` and `clear_cache` are re-exported from
there for convenience. Attributes are imported lazily, so ``import rvm.jit`` costs nothing
until used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "jit_kernel": "rvm.jit.lower",
    "FALLBACK_NOTE": "rvm.jit.lower",
    "NO_JIT_COMPUTE": "rvm.jit.lower",
    "compute": "rvm.jit.compute",
    "numpy_kernel": "rvm.jit.numpy_kernel",
    "load_kernel": "rvm.runtime.loading.loader",
    "compile_kernels": "rvm.runtime.loading.loader",
    "kernel_source": "rvm.runtime.loading.loader",
    "kernel_llvm": "rvm.runtime.loading.loader",
    "kernel_asm": "rvm.runtime.loading.loader",
    "cache_dir": "rvm.runtime.loading.cache",
    "cache_info": "rvm.runtime.loading.cache",
    "clear_cache": "rvm.runtime.loading.cache",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rvm.jit' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
