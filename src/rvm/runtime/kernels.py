"""Turning an executable's primitive names into Python callables.

A name is first looked up among the executable's kernel records, then in the global registry. Numpy
kernels are exec'd from their source with `np` and `math` in their namespace; their source
imports the NumPy reference kernels by name (`rvm.kernels.reference`, package code). A file saved
before that carries the old library's source instead (``ex.libraries``), exec'd into the
namespace of its kernels. Each source is registered in `linecache` under a unique file name
(`<rvm-kernel NAME #N>`) so tracebacks show the generated lines. JIT kernels are built by
`rvm.runtime.loading.loader.load_kernel(record)` (Numba loads when the first one does), from
the isolated entry of the file's own object code when a trusted file brought one. Built
kernels are cached on the executable (thread-safe), so every VM over it shares them.

Only a trusted executable's kernels are built (``ex.trusted``: built in this process, or a
file signed with a trusted key or loaded with ``trusted=True``): an untrusted file's kernel
source and libraries are never exec'd nor imported; `UntrustedExecutableError` says how to
trust it (`rvm.runtime.loading.trust`).
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
from rvm.errors import UntrustedExecutableError, VMError
from rvm.progress import with_progress
from rvm.runtime.derived import Derived
from rvm.runtime.loading import artifact, loader
from rvm.runtime.loading.cache import kernel_path
from rvm.runtime.registry import get_global_func

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable, KernelRecord

__all__ = ["build_kernels", "resolve_primitives", "KERNEL_FILE_PREFIX"]

KERNEL_FILE_PREFIX = "<rvm-kernel "
_LIBRARIES: Derived[Any] = Derived("the executable's shared libraries, loaded")
_KERNELS: Derived[Any] = Derived("a kernel, loaded (per kernel name)")
_serial = itertools.count()


def _exec_source(source: str, label: str, namespace: dict[str, Any]) -> None:
    filename = f"{KERNEL_FILE_PREFIX}{label} #{next(_serial)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)


def _libraries(ex: Executable) -> dict[str, types.ModuleType]:
    require_trusted(ex)

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

    return _LIBRARIES.get(ex, build)


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


def require_trusted(ex: Executable) -> None:
    """Raise `UntrustedExecutableError` unless the code ``ex`` carries may run."""
    if ex.trusted:
        return
    raise UntrustedExecutableError(
        f"this executable was loaded from a file rvm does not trust ({ex._untrusted_reason}), "
        "and its kernels are code: rvm runs none of it. If you trust whoever made the file, "
        "load it with rvm.load_executable(path, keys=[their_key]) or trusted=True, or add "
        "their key to the trust store with rvm.trust.add_key(key) (the rvm command: --key HEX "
        "or --trusted); files you save yourself are signed with your local key "
        "(rvm.trust.local_key()) and load trusted"
    )


def _load_jit_kernel(ex: Executable, rec: KernelRecord) -> Callable[..., Any]:
    entry = None
    if ex._native_entries:
        found = ex._native_entries.get(kernel_path(rec.source, rec.imports).name)
        if found is not None:
            entry = artifact.use_entry(found, rec.source)
    return loader.load_kernel(rec, entry)


def load_kernel(ex: Executable, name: str) -> Callable[..., Any]:
    """The callable of kernel `name` of `ex`, built once and cached on `ex`.

    Raises:
        UntrustedExecutableError: ``ex`` came from a file nobody trusted.
    """
    require_trusted(ex)
    rec = ex.kernels[name]
    if rec.backend == "numpy":
        return _KERNELS.get(ex, lambda: _load_numpy_kernel(ex, rec), name)
    return _KERNELS.get(ex, lambda: _load_jit_kernel(ex, rec), name)


def build_kernels(ex: Executable, progress: bool = False) -> None:
    """Builds every kernel of `ex` now (jit kernels compile, or load from the disk cache),
    caching them on `ex` as `load_kernel` does; `progress` shows their progress
    (`rvm.progress`).

    Raises:
        UntrustedExecutableError: ``ex`` came from a file nobody trusted.
    """
    if ex.kernels:
        require_trusted(ex)
    for name in with_progress(list(ex.kernels), str, progress):
        load_kernel(ex, name)


def resolve_primitives(ex: Executable) -> list[Callable[..., Any]]:
    """A callable per primitive name of `ex`, in index order.

    Raises:
        VMError: A name is neither a kernel of `ex` nor a registered global function.
        JITError: A jit kernel cannot be loaded.
        UntrustedExecutableError: ``ex`` came from a file nobody trusted and has kernels.
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
