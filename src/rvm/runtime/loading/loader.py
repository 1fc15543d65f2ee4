"""Loading jit kernels: source file in the cache, imported, compiled by Numba (or loaded).

`load_kernel(record)` returns the kernel's Numba dispatcher, resolved once; the VM calls it
directly (a call costs the dispatcher's argument check, about a microsecond). The kernel's
source is written to rvm's cache (`rvm.runtime.loading.cache`) and imported as a module, so Numba's
``cache=True`` stores and reuses the object code across processes; a cached kernel loads
without starting Numba's compiler (`rvm.kernels.numba_cache`). Compiles, cache hits and
misses are logged on the ``rvm.jit`` logger with their times, and counted (`kernel_counts`).
A kernel that does not compile raises `rvm.errors.JITError` naming the kernel, its ops, and the
generated line that failed.
"""

from __future__ import annotations

import functools
import importlib.util
import linecache
import logging
import re
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from rvm.errors import JITError
from rvm.kernels import compile_request
from rvm.kernels.numba_cache import light_loads
from rvm.progress import with_progress
from rvm.runtime.loading.cache import (
    check_object_code,
    drop_object_code,
    kernel_path,
    seal_object_code,
    write_entry,
)

if TYPE_CHECKING:
    from rvm.runtime.executable import KernelRecord

logger = logging.getLogger("rvm.jit")

_lock = threading.Lock()
_modules: dict[str, ModuleType] = {}
_entries: dict[str, Path] = {}  # rvm's kernel file -> the isolated entry loaded instead
_counts = {"loaded": 0, "compiled": 0}


def kernel_counts() -> dict[str, int]:
    """How many kernels this process loaded from the cache (``loaded``) and compiled
    (``compiled``)."""
    return dict(_counts)


def load_kernel(record: KernelRecord, entry: Path | None = None) -> Callable[..., Any]:
    """The Numba dispatcher of jit kernel ``record`` (compiled, or loaded from the cache).

    Args:
        record: The kernel (of an executable built here, or of a trusted file).
        entry: The kernel file of a trusted file's isolated cache entry, verified by the
            caller (`rvm.runtime.loading.artifact.use_entry`); None: rvm's own cache.

    Raises:
        JITError: The record is not a jit kernel, or its source does not compile.
    """
    if record.backend != "jit":
        raise JITError(f"kernel {record.name!r} has backend {record.backend!r}, not 'jit'")
    path = kernel_path(record.source, record.imports)
    with _lock:
        if entry is not None:
            _entries[str(path)] = entry
        where = _entries.get(str(path), path)
        module = _modules.get(str(where))
        if module is None:
            module = _import_kernel(record, where, own=where == path)
            _modules[str(where)] = module
    func = getattr(module, record.entry, None)
    if func is None:
        raise JITError(f"kernel {record.name!r}: its source defines no {record.entry!r}")
    return func


def kernel_function(record: KernelRecord, name: str) -> Callable[..., Any]:
    """Function ``name`` of jit kernel ``record``'s module (a kernel's scalar form, whose name
    its meta holds), the module loaded as `load_kernel` loads it.

    Raises:
        JITError: The record is not a jit kernel, or its module defines no ``name``.
    """
    load_kernel(record)
    path = str(kernel_path(record.source, record.imports))
    func = getattr(_modules[str(_entries.get(path, path))], name, None)
    if func is None:
        raise JITError(f"kernel {record.name!r}: its source defines no {name!r}")
    return func


def _import_kernel(record: KernelRecord, path: Path, own: bool = True) -> ModuleType:
    """Import kernel file ``path``: rvm's own cache entry (``own``; its object code checked
    against its seal first, `check_object_code`) or a trusted file's isolated entry."""
    start = time.perf_counter()
    wrote = write_entry(path, record.source)
    if own and not wrote and not check_object_code(path):
        logger.warning(
            "kernel %s: its cached object code is not what rvm sealed (changed on disk, or "
            "cached before seals): rebuilt",
            record.name,
        )
        drop_object_code(path)
    lines = record.source.splitlines(True)
    linecache.cache[str(path)] = (len(record.source), None, lines, str(path))
    try:
        module = exec_kernel_file(path, record.source)
    except Exception as first:  # noqa: BLE001 - any failure may be a stale object cache
        drop_object_code(path)
        try:
            module = exec_kernel_file(path, record.source)
        except Exception as err:
            raise _jit_error(record, path, err) from err
        logger.warning("kernel %s: dropped a broken cache entry (%s)", record.name, first)
    if own:
        seal_object_code(path)
    func = getattr(module, record.entry, None)
    stats = getattr(func, "stats", None)
    hits = sum(stats.cache_hits.values()) if stats is not None else 0
    elapsed = time.perf_counter() - start
    _counts["loaded" if hits else "compiled"] += 1
    if hits:
        logger.debug("kernel %s: cache hit, loaded in %.3f s (%s)", record.name, elapsed, path)
    else:
        what = "new entry" if wrote else "object code missing"
        logger.info(
            "kernel %s: cache miss (%s), compiled in %.3f s (%s)", record.name, what, elapsed, path
        )
    return module


def exec_kernel_file(path: Path, source: str | None = None) -> ModuleType:
    """Import the kernel file ``path`` (holding ``source``; None: read it) as a module
    (compiling its kernel, or loading it from Numba's cache without starting Numba's
    compiler, `rvm.kernels.numba_cache`)."""
    with light_loads():
        return exec_module_file(path, kernel_module_name(path), source=source)


def kernel_module_name(path: Path) -> str:
    """The module name the kernel file ``path`` is imported as (Numba's cached code of a
    function calling the kernel names it)."""
    return f"rvm_jit_{path.stem}"


def exec_module_file(
    path: Path,
    name: str,
    namespace: dict[str, Any] | None = None,
    source: str | None = None,
) -> ModuleType:
    """Import the generated file ``path`` as module ``name`` (in `sys.modules`, so Numba's
    cache can name it), with ``namespace`` bound as its globals before it runs.

    The module runs ``source`` (the text rvm generated, which ``path`` holds; None: the
    file's bytes read now), compiled here: never a ``.pyc`` of Python's bytecode cache, which
    Python trusts by the source's time and size, so a tampered one would run."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise ImportError(f"cannot import {path}")
    text = path.read_bytes() if source is None else source
    code = compile(text, str(path), "exec", dont_inherit=True)
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(namespace or {})
    compile_request.replayable(name, path, text, namespace)  # a compile server may run it again
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 - rvm's own generated source
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _jit_error(record: KernelRecord, path: Path, err: Exception) -> JITError:
    """A JITError naming the kernel, its ops and the generated line that failed."""
    src = record.source.splitlines()
    lineno = _named_line(src, str(err)) or _failing_line(path, err)
    shown = ""
    if lineno is not None and 1 <= lineno <= len(src):
        shown = f"\n  generated source line {lineno}: {src[lineno - 1].strip()}"
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))
    summary = [line.strip() for line in text.strip().splitlines() if line.strip()]
    head = " ".join(summary[:3])
    ops = record.meta.get("ops", "")
    return JITError(
        f"kernel {record.name!r} (ops: {ops}) failed to compile: {type(err).__name__}: {head}"
        f"{shown}\n  kernel source: {path}"
    )


def _named_line(src: list[str], message: str) -> int | None:
    """The first line using the name an error message says is undefined or untyped."""
    m = re.search(r"name '(\w+)'", message)
    if m is None:
        return None
    pattern = re.compile(rf"\b{re.escape(m.group(1))}\b")
    for k, line in enumerate(src, 1):
        if pattern.search(line) and not line.lstrip().startswith(("#", "@", "from ", "import ")):
            return k
    return None


def _failing_line(path: Path, err: BaseException) -> int | None:
    found = None
    for m in re.finditer(r'File "([^"]+)", line (\d+)', str(err)):
        if Path(m.group(1)).name == path.name:
            return int(m.group(2))
    tb = err.__traceback__
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).name == path.name:
            found = tb.tb_lineno
        tb = tb.tb_next
    if found is None and isinstance(err, SyntaxError) and err.lineno:
        found = err.lineno
    return found


def compile_kernels(
    records: Iterable[KernelRecord], progress: bool = False
) -> dict[str, Callable[..., Any]]:
    """Load every jit kernel of ``records`` (others are skipped), optionally with a bar.

    Args:
        records: Kernel records (an executable's ``kernels.values()``).
        progress: Show their progress (`rvm.progress`).
    """
    todo = [r for r in records if r.backend == "jit"]
    return {rec.name: load_kernel(rec) for rec in with_progress(todo, _name, progress)}


def _name(record: KernelRecord) -> str:
    return record.name


# -- introspection ---------------------------------------------------------------------------


def kernel_source(record: KernelRecord) -> str:
    """The kernel's generated source (Python for Numba, or numpy source for fallbacks)."""
    return record.source


@functools.lru_cache(maxsize=4)  # kernel_llvm then kernel_asm of one kernel compile it once
def _fresh_dispatcher(source: str, entry: str, name: str) -> Any:
    """The kernel compiled from its source without the disk cache (for inspection)."""
    namespace: dict[str, Any] = {"__name__": f"rvm_jit_inspect_{entry}"}
    source = source.replace("CACHE = True", "CACHE = False", 1)
    exec(compile(source, f"<rvm-jit {name}>", "exec"), namespace)  # noqa: S102
    return namespace[entry]


def _inspect(record: KernelRecord, what: str) -> str:
    """The kernel's LLVM IR or assembly. Numba keeps neither for code loaded from its disk
    cache (it warns "Inspection disabled for cached code" and returns a stub), so a kernel
    loaded from the cache is compiled again from its source, apart from the cache."""
    if record.backend != "jit":
        raise JITError(f"kernel {record.name!r} is a {record.backend} kernel: no {what}")
    func = load_kernel(record)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            text = "\n".join(getattr(func, f"inspect_{what}")().values())
        except Exception:  # noqa: BLE001 - object code loaded from rvm's cache has no IR
            text = ""
    if not text.strip() or any("cached code" in str(w.message) for w in caught):
        fresh = _fresh_dispatcher(record.source, record.entry, record.name)
        text = "\n".join(getattr(fresh, f"inspect_{what}")().values())
    return text


def kernel_llvm(record: KernelRecord) -> str:
    """The LLVM IR of the kernel."""
    return _inspect(record, "llvm")


def kernel_asm(record: KernelRecord) -> str:
    """The native assembly of the kernel."""
    return _inspect(record, "asm")
