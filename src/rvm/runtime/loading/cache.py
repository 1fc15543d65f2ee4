"""rvm's on-disk kernel cache: generated source as real files, Numba's object code beside it.

Kernel source is written to ``<cache dir>/kernels/k_<hash>.py`` and imported as a module, and its
function is compiled with ``cache=True``, so Numba stores the object code in the ``__pycache__``
folder next to it (or under ``NUMBA_CACHE_DIR``, `object_code_dir`) and a second process loads that
instead of compiling (Numba cannot cache functions of ``exec``'d source, numba#3501, hence real
files). The hash covers the source, the rvm, Numba and llvmlite versions, the host CPU's name and
features, and the source of every rvm module the kernel imports (the record's ``imports``, set
by the generator that made the kernel, and the rvm modules those import in turn),
so a file is never reused for another compiler or machine, or after a change to code the kernel
calls (Numba's object code has the intrinsics of `rvm.kernels.mathlib` and
`rvm.kernels.blas` compiled in). Writes go to a temporary file first and are moved in place
with ``os.replace`` (atomic; two processes writing the same entry write the same bytes). The cache
directory is read from the environment when asked for (`cache_dir`), never at import:
``RVM_CACHE_DIR``, else ``$XDG_CACHE_HOME/rvm``, else ``~/.cache/rvm``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

from rvm.kernels.numba_cache import (
    SEAL,
    check_object_code,
    drop_object_code,
    object_code_dir,
    seal_object_code,
    write_atomic,
)
from rvm.runtime.loading import COMPILED_DIR, FILES_DIR, NATIVE_DIR, NATIVE_IMPORTS, user_dir

KERNEL_DIR = "kernels"
logger = logging.getLogger("rvm.jit")

OWN_DIRS = (KERNEL_DIR, NATIVE_DIR, FILES_DIR, COMPILED_DIR)
__all__ = [
    "SEAL",
    "cache_dir",
    "cache_info",
    "check_object_code",
    "clear_cache",
    "drop_object_code",
    "guard_dispatcher",
    "has_object_code",
    "kernel_path",
    "object_code_dir",
    "seal_object_code",
    "source_hash",
    "target_key",
    "write_atomic",
    "write_entry",
]
"""The folders rvm writes in the cache directory, which `clear_cache` deletes."""


def cache_dir() -> Path:
    """The cache directory (from the environment at each call; not created here)."""
    return user_dir("RVM_CACHE_DIR", "XDG_CACHE_HOME", ".cache")


@functools.lru_cache(maxsize=1)
def target_key() -> str:
    """Versions and the CPU that compiled code depends on (one line, stable per machine): the
    CPU name and features Numba compiles for (``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` when
    set, else the host's), the cache sizes tuning reads (`rvm.kernels.cpu`) and LLVM's
    optimization level where it is not Numba's default (`rvm.kernels.cpu.opt_key`)."""
    import llvmlite
    import numba

    from rvm.kernels.cpu import cpu, opt_key, target_features, tuning_key
    from rvm.runtime.loading import VERSION

    key = (
        f"rvm={VERSION} numba={numba.__version__} llvmlite={llvmlite.__version__} "
        f"cpu={cpu().name} features={target_features()} {tuning_key()}"
    )
    return f"{key} {opt_key()}".rstrip()


# In an rvm library module's own (hand-written) source: `from rvm.x import a, b`, the names in
# parentheses over several lines, or `from rvm.x import *` (group 1: the module, 2: the names
# or "*") or `import rvm.x` (group 3). Generated source is never read for this.
_RVM_IMPORT = re.compile(
    r"^[ \t]*(?:"
    r"from[ \t]+(rvm(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|\*|[\w, \t]+)"
    r"|import[ \t]+(rvm(?:\.\w+)*))",
    re.MULTILINE,
)
_COMMENT = re.compile(r"#[^\n]*")


@functools.cache
def module_source(name: str) -> str:
    """The source of the rvm module `name`, as this process imports it (read once)."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ImportError(f"no module named {name!r}")
    return Path(spec.origin).read_text()


def _is_module(name: str) -> bool:
    """Whether ``name`` is a module, without running the module it would be a name of (a
    kernel's source is hashed before anything it imports is loaded, `rvm.kernels.mathlib`
    compiles functions at import)."""
    parent = name.rpartition(".")[0]
    try:
        if parent and importlib.util.find_spec(parent).submodule_search_locations is None:
            return False  # a name in a module, not a package's module
        return importlib.util.find_spec(name) is not None
    except (ImportError, AttributeError):
        return False


def _in_runtime(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in ("rvm.runtime", "rvm.kernels"))


@functools.lru_cache(maxsize=1024)
def imported_modules(imports: tuple[str, ...]) -> tuple[str, ...]:
    """The rvm runtime modules among ``imports`` (the modules a kernel or a native-mode file
    imports, as its generator recorded them) and those these import in turn (sorted). Only
    `rvm.runtime` and `rvm.kernels` count: kernels and the library they call import nothing
    else that is compiled in (rvm's version is in the hash already), and a process loading
    kernels never imports the compiler's packages.

    A library module's ``from rvm.kernels import blas`` counts `rvm.kernels` and
    `rvm.kernels.blas`; an old path such as ``rvm.runtime.native.blas`` counts its alias
    module and, through it, the module it names. Found once per tuple and process (compiling
    and loading a kernel both ask), as the modules' sources are read once.
    """
    seen: set[str] = set()
    todo = [m for m in imports if _in_runtime(m)]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for m in _RVM_IMPORT.finditer(module_source(name)):
            names = [m.group(3)] if m.group(3) else [m.group(1)]
            if m.group(2) and m.group(2) != "*":
                listed = _COMMENT.sub("", m.group(2)).strip("()")
                subs = (f"{m.group(1)}.{n.strip()}" for n in listed.split(",") if n.strip())
                names += [n for n in subs if n not in seen and _in_runtime(n) and _is_module(n)]
            todo += [n for n in names if n not in seen and _in_runtime(n)]
    return tuple(sorted(seen))


def source_hash(source: str, imports: tuple[str, ...] = ()) -> str:
    """The content hash naming a cache entry of generated ``source`` that imports the rvm
    modules ``imports`` (see the module docstring)."""
    digest = hashlib.sha256()
    digest.update(target_key().encode())
    for name in imported_modules(tuple(sorted(imports))):
        digest.update(f"\0{name}\0".encode())
        digest.update(module_source(name).encode())
    digest.update(b"\0")
    digest.update(source.encode())
    return digest.hexdigest()[:24]


def kernel_path(source: str, imports: tuple[str, ...] = ()) -> Path:
    """Where the kernel file of ``source`` (importing the rvm modules ``imports``: its
    record's) lives in the cache."""
    return cache_dir() / KERNEL_DIR / f"k_{source_hash(source, imports)}.py"


def write_entry(path: Path, source: str) -> bool:
    """Make ``path`` hold ``source``; return True when it had to be (re)written.

    An existing file with other bytes (truncated, corrupted) is replaced, and Numba's
    object code for it is dropped.
    """
    data = source.encode()
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    drop_object_code(path)
    write_atomic(path, data)
    return True


def has_object_code(path: Path) -> bool:
    """Whether Numba's cached object code of the kernel file ``path`` is there (its index)."""
    folder = object_code_dir(path)
    return folder.is_dir() and any(folder.glob(f"{path.stem}.*.nbi"))


def guard_dispatcher(dispatcher: Any, path: Path) -> None:
    """Make the Numba function ``dispatcher`` of the generated file ``path`` (compiled lazily,
    at its calls: the native exec mode's) load cached object code only when it is what rvm
    sealed, checked right before each load (else the file's object code is dropped, one INFO
    line says so, and it compiles), and seal its object code after each save. A dispatcher
    without a disk cache is left as it is."""
    from numba.core.caching import NullCache

    cache = getattr(dispatcher, "_cache", None)
    if cache is None or isinstance(cache, NullCache):
        return
    load, save = cache.load_overload, cache.save_overload

    def checked_load(sig: Any, target_context: Any) -> Any:
        if not check_object_code(path):
            logger.info(
                "%s: its cached object code is not what rvm sealed (changed on disk, or "
                "cached before seals): rebuilt",
                path.name,
            )
            drop_object_code(path)
            return None
        return load(sig, target_context)

    def sealing_save(sig: Any, data: Any) -> None:
        save(sig, data)
        seal_object_code(path)

    cache.load_overload = checked_load
    cache.save_overload = sealing_save


def cache_info() -> dict:
    """The cache's directory, number of kernels, and total bytes (sources and object code)."""
    root = cache_dir()
    kernels = root / KERNEL_DIR
    entries = len(list(kernels.glob("k_*.py"))) if kernels.is_dir() else 0
    size = 0
    if root.is_dir():
        for dirpath, _, files in os.walk(root):
            for f in files:
                try:
                    size += os.path.getsize(os.path.join(dirpath, f))
                except OSError:
                    pass
    return {"dir": str(root), "entries": entries, "bytes": size}


def clear_cache() -> None:
    """Delete everything rvm's caches hold: rvm's folders in the cache directory (kernels,
    the native exec mode's files, trusted files' entries, `rvm.compile_onnx`'s executables:
    `OWN_DIRS`), Numba's object code of them (beside them, or their mirrors under
    ``NUMBA_CACHE_DIR``), and Numba's object code of rvm's kernel library (`rvm.kernels`) and
    of the native files' helpers (`NATIVE_IMPORTS`, with their stamps), wherever Numba keeps
    it. Nothing else in the cache directory is touched (it may be a
    folder of the user's)."""
    from rvm.kernels import apart, numba_cache

    root = cache_dir()
    for sub in (root / name for name in OWN_DIRS):
        if not sub.is_dir():
            continue
        for dirpath, _, _ in os.walk(sub):
            mirror = object_code_dir(Path(dirpath) / "x.py")  # under NUMBA_CACHE_DIR, if set
            if mirror != Path(dirpath) / "__pycache__":
                shutil.rmtree(mirror, ignore_errors=True)
        shutil.rmtree(sub, ignore_errors=True)
    sources = sorted(Path(numba_cache.__file__).parent.glob("*.py"))
    folder = object_code_dir(sources[0])
    for module in sources:
        drop_object_code(module)
        (folder / f"{module.stem}.{numba_cache.LOCK}").unlink(missing_ok=True)
        for lock in folder.glob(f"{module.stem}.*.{apart.BUILD_LOCK}"):  # `apart.built_once`'s
            lock.unlink(missing_ok=True)
    (folder / numba_cache.LIBRARY_STAMP).unlink(missing_ok=True)
    for name in NATIVE_IMPORTS:  # outside the library, compiling its code in: their stamps too
        module = Path(__file__).parents[2].joinpath(*name.split(".")[1:]).with_suffix(".py")
        drop_object_code(module)
        numba_cache.user_code_stamp(module).unlink(missing_ok=True)
