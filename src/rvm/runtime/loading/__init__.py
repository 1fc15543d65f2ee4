"""Loading and caching native code: jit kernels and native exec-mode files on disk.

- `cache`: the on-disk cache (where a kernel's source lives, keyed by a hash of it, the
  rvm modules it imports and the versions below).
- `loader`: a jit kernel record to its Numba dispatcher (imported from the cache).
- `numba_cache`: loads Numba's cached code without starting Numba's compiler.
- `artifact`: the native section of a saved executable (collect, check, install).

It imports `rvm.runtime`'s records and `rvm.kernels`, never the VM or the exec modes. The
constants here are the stamps the cache is laid out by; this module imports nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

VERSION = "0.1.0"
"""rvm's version (``rvm.__version__``), part of every cache key and artifact key."""

NATIVE_DIR = "native"
"""The cache subfolder of the native exec mode's files (`rvm.runtime.modes.native`)."""

FILES_DIR = "files"
"""The cache subfolder of object code from trusted files: one entry per kernel group, named by
the hash of the group's own bytes (`rvm.runtime.loading.artifact.entry_hash`)."""

COMPILED_DIR = "compiled"
"""The cache subfolder of `rvm.compile_onnx`'s executables (`rvm.compile_cache`)."""

NATIVE_IMPORTS = ("rvm.runtime.modes.native_support",)
"""The rvm modules a native exec-mode file imports (`rvm.runtime.modes.native_codegen` writes
its imports from this), which its cache key covers."""

NATIVE_SUPPORT_NAMES = (
    "bound",
    "by_symbol",
    "call_begin",
    "call_end",
    "constant",
    "empty",
    "full0",
    "shape_array",
    "storage",
    "view",
    "write_slice",
)
"""What a native file imports from `NATIVE_IMPORTS[0]` (that module's public names but `BAIL`)."""


def user_dir(explicit: str, xdg: str, fallback: str) -> Path:
    """rvm's folder of one kind, from the environment at each call (not created here): the
    variable ``explicit`` (``RVM_CACHE_DIR``), else ``$<xdg>/rvm`` (``XDG_CACHE_HOME``), else
    ``~/<fallback>/rvm`` (``.cache``)."""
    path = os.environ.get(explicit)
    if path:
        return Path(path).expanduser()
    base = os.environ.get(xdg)
    return (Path(base).expanduser() if base else Path.home() / fallback) / "rvm"
