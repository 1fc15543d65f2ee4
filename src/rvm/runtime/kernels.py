"""Turning an executable's primitive names into Python callables.

A name is first looked up among the executable's kernel records, then in the global registry. Numpy
kernels are exec'd from their source with `np`, `math` and the executable's libraries in their
namespace; each source is registered in `linecache` under a unique file name (`<rvm-kernel NAME
#N>`) so tracebacks show the generated lines. JIT kernels are built by
`rvm.runtime.loading.loader.load_kernel(record)` (Numba loads when the first one does). Built
kernels are cached on the executable (thread-safe), so every VM over it shares them.
"""

from __future__ import annotations

import itertools
import linecache
import math
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

import rvm.runtime.builtins  # noqa: F401  (registers vm.builtin.*)
from rvm.errors import VMError
from rvm.progress import with_progress
from rvm.runtime.loading import loader
from rvm.runtime.registry import get_global_func

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable, KernelRecord

__all__ = ["build_kernels", "resolve_primitives", "KERNEL_FILE_PREFIX"]

KERNEL_FILE_PREFIX = "<rvm-kernel "
_serial = itertools.count()


def _exec_source(source: str, label: str, namespace: dict[str, Any]) -> None:
    filename = f"{KERNEL_FILE_PREFIX}{label} #{next(_serial)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)


def _libraries(ex: Executable) -> dict[str, types.ModuleType]:
    def build() -> dict[str, types.ModuleType]:
        mods = {}
        for name, src in ex.libraries.items():
            mod = types.ModuleType(f"rvm_library_{name}")
            mod.__dict__.update(np=np, math=math)
            try:
                _exec_source(src, f"library {name}", mod.__dict__)
            except Exception as e:
                raise VMError(f"kernel library {name!r} failed to load: {e}") from e
            mods[name] = mod
        return mods

    return ex.cached("libraries", build)


def _load_numpy_kernel(ex: Executable, rec: KernelRecord) -> Callable[..., Any]:
    namespace: dict[str, Any] = {"np": np, "math": math, "__name__": f"rvm_kernel_{rec.name}"}
    for name, mod in _libraries(ex).items():
        namespace.update({k: v for k, v in vars(mod).items() if not k.startswith("_")})
        namespace[name] = mod
    try:
        _exec_source(rec.source, rec.name, namespace)
    except Exception as e:
        raise VMError(f"kernel {rec.name!r} failed to load: {type(e).__name__}: {e}") from e
    func = namespace.get(rec.entry)
    if not callable(func):
        raise VMError(f"kernel {rec.name!r}: its source defines no function {rec.entry!r}")
    return func


def load_kernel(ex: Executable, name: str) -> Callable[..., Any]:
    """The callable of kernel `name` of `ex`, built once and cached on `ex`."""
    rec = ex.kernels[name]
    if rec.backend == "numpy":
        return ex.cached(f"kernel:{name}", lambda: _load_numpy_kernel(ex, rec))
    return ex.cached(f"kernel:{name}", lambda: loader.load_kernel(rec))


def build_kernels(ex: Executable, progress: bool = False) -> None:
    """Builds every kernel of `ex` now (jit kernels compile, or load from the disk cache),
    caching them on `ex` as `load_kernel` does; `progress` shows their progress
    (`rvm.progress`)."""
    for name in with_progress(list(ex.kernels), str, progress):
        load_kernel(ex, name)


def resolve_primitives(ex: Executable) -> list[Callable[..., Any]]:
    """A callable per primitive name of `ex`, in index order.

    Raises:
        VMError: A name is neither a kernel of `ex` nor a registered global function.
        JITError: A jit kernel cannot be loaded.
    """
    out = []
    for name in ex.primitive_names:
        if name in ex.kernels:
            out.append(load_kernel(ex, name))
            continue
        func = get_global_func(name, allow_missing=True)
        if func is None:
            raise VMError(
                f"unknown packed function {name!r}: it is neither a kernel of the executable "
                "nor a registered global function (see rvm.runtime.register_func)"
            )
        out.append(func)
    return out
