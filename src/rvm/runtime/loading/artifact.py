"""Native code in a saved executable: Numba's cache files of its kernels and library, carried.

A saved executable (`rvm.runtime.serialize`, section NATV) carries, beside the kernels' source,
the files Numba's ``cache=True`` wrote for them in the saving process (`collect`): per jit
kernel, the index (``.nbi``) and data (``.nbc``, the object code) files of its kernel file in
rvm's cache (`rvm.runtime.loading.cache`), and per rvm library module, the files of the
functions a loading process loads from Numba's cache (`loaded_functions`: those compiled at
import, such as `rvm.kernels.mathlib`'s, and the entry points and tasks the kernels
require, `rvm.kernels.entry`). They are tagged with a key
(`native_key`: rvm, Numba and llvmlite versions, the host CPU's name and features, Python's
version, the hash of the library's sources).

Loading (`install`, only for a trusted executable: `rvm.runtime.loading.trust`) in a
process with the same key writes each kernel group, and the native mode's file, into an entry
of its own, ``<cache dir>/files/<entry_hash>/``, named by the hash of the group's bytes and
used only by the executables that brought them (`Entry`, verified byte for byte at each use,
`use_entry`); the kernel file is written first (the same bytes, so Numba's source stamp, a
hash of the file in Numba 0.57+, matches; its modification time is set to the saved one too,
for a Numba whose stamp is the time and size), each index after its data files. The library's
groups (``module``) are never written: the library is built locally, so nothing a file
brings changes what another executable runs. The cached load then finds them and nothing
compiles. With another key, nothing is written, the kernels rebuild from source as for an
executable without native code, and one INFO line on the ``rvm`` logger says so.

Numba's cache files are pickles: a trusted executable's native code runs what its author
compiled, as importing their Python module would; an untrusted one's is never written.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rvm.runtime.executable import KernelRecord

logger = logging.getLogger("rvm")
_debug = logging.getLogger("rvm.jit")

KINDS = ("kernel", "module", "native")
KERNEL_FILE = re.compile(r"k_[0-9a-f]{24}\.py")
NATIVE_FILE = re.compile(r"n_[0-9a-f]{24}\.py")
# The kernel library's modules (no other package is imported); ``rvm.runtime.native.*`` is
# their path before the layout moved, valid in files saved then (whose key never matches now:
# the library's sources differ, so they are never installed).
MODULE_NAME = re.compile(r"rvm\.kernels\.[A-Za-z_]\w*")
OLD_MODULE_NAME = re.compile(r"rvm\.runtime\.native\.[A-Za-z_]\w*")
CACHE_FILE = re.compile(r"[A-Za-z_][\w\-]*(?:\.[\w\-]+)*\.(?:nbi|nbc)")


@dataclass(frozen=True)
class NativeGroup:
    """Numba's cache files of one kernel file (``kind`` "kernel", ``ident`` its file name in
    rvm's cache, ``mtime_ns`` its saved modification time), of one rvm module (``kind``
    "module", ``ident`` its dotted name), or of the native exec mode's file of the executable
    (``kind`` "native", ``ident`` its file name; its source is the file of that name among
    ``files``, as the executable does not hold it)."""

    kind: str
    ident: str
    mtime_ns: int
    files: tuple[tuple[str, bytes], ...]

    def stem(self) -> str:
        """The prefix of every cache file name of the group (the source file's stem)."""
        return self.ident[:-3] if self.kind != "module" else self.ident.rpartition(".")[2]


@dataclass(frozen=True)
class NativeCode:
    """An executable's native code: the key it was built for and its groups of files."""

    key: str
    groups: tuple[NativeGroup, ...]


def check(native: NativeCode) -> str | None:
    """What is wrong with ``native``'s names (None when nothing): a group kind, a kernel file
    or module name, or a cache file name that is not one Numba writes for it (no file may
    land outside its folder)."""
    for g in native.groups:
        if g.kind not in KINDS:
            return f"native group kind {g.kind!r} is not one of {KINDS}"
        pattern = {"kernel": KERNEL_FILE, "module": MODULE_NAME, "native": NATIVE_FILE}[g.kind]
        if not pattern.fullmatch(g.ident) and not (
            g.kind == "module" and OLD_MODULE_NAME.fullmatch(g.ident)
        ):
            return f"native {g.kind} name {g.ident!r} is not valid"
        if g.kind == "native" and g.ident not in dict(g.files):
            return f"native file {g.ident!r} has no source"
        for name, _ in g.files:
            if g.kind == "native" and name == g.ident:
                continue
            if not CACHE_FILE.fullmatch(name) or not name.startswith(g.stem() + "."):
                return f"native file name {name!r} of {g.ident!r} is not valid"
    return None


def native_key() -> str:
    """The key native code is valid for: `rvm.runtime.loading.cache.target_key` (rvm, Numba,
    llvmlite versions, CPU name and features), Python's version, and the hash of the library's
    sources (`rvm.kernels.numba_cache.library_digest`: library code compiled from other
    sources may link symbols this library no longer registers)."""
    from rvm.kernels.numba_cache import library_digest
    from rvm.runtime.loading.cache import target_key

    abi = getattr(sys, "abiflags", "")
    python = f"{sys.version_info[0]}.{sys.version_info[1]}{abi}"
    return f"{target_key()} python={python} library={library_digest()[:16]}"


def _fields(key: str) -> dict[str, str]:
    return dict(part.partition("=")[::2] for part in key.split())


def key_difference(saved: str, here: str) -> str:
    """The names of the key fields that differ, e.g. ``"cpu, features"``."""
    a, b = _fields(saved), _fields(here)
    diff = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
    return ", ".join(diff) or "the key"


def module_cache_folder(module: str) -> Path | None:
    """Where this process's Numba caches the functions of the rvm module ``module`` (Numba's
    own locators, tried in its order: ``NUMBA_CACHE_DIR``, ``__pycache__`` beside the file,
    the user-wide cache), without importing it; None when it has no file or no locator fits."""
    import importlib.util

    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    if impl is None:
        return None
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None

    def probe() -> None:  # the locators read its line number only
        pass

    for cls in impl._locator_classes:
        locator = cls.from_function(probe, spec.origin)
        if locator is not None:
            return Path(locator.get_cache_path())
    return None


def _cache_files(
    folder: Path | None, stem: str, bases: set[str] | None = None
) -> tuple[tuple[str, bytes], ...]:
    """The Numba cache files named ``stem.*`` in ``folder``; with ``bases``, only the index and
    data files of those functions (file names ``<base>.nbi``, ``<base>.<n>.nbc``)."""
    if folder is None or not folder.is_dir():
        return ()
    out = []
    for f in sorted(folder.glob(f"{stem}.*")):
        if not CACHE_FILE.fullmatch(f.name):
            continue
        if bases is not None and _base(f.name) not in bases:
            continue
        try:
            out.append((f.name, f.read_bytes()))
        except OSError:
            continue
    return tuple(out)


def _base(name: str) -> str:
    """The function's file name base of a cache file: ``m.f-3.py311`` for ``m.f-3.py311.nbi``
    and ``m.f-3.py311.2.nbc``."""
    base = name.rsplit(".", 1)[0]
    return base.rsplit(".", 1)[0] if name.endswith(".nbc") else base


def _function_cache(obj: object) -> tuple[str, str] | None:
    """(module, file name base) of the Numba cache of a dispatcher or cfunc ``obj``, or None
    when it has none."""
    impl = getattr(getattr(obj, "_cache", None), "_impl", None)
    base = getattr(impl, "filename_base", None)
    func = getattr(obj, "py_func", None) or getattr(obj, "_pyfunc", None)
    module = getattr(func, "__module__", None)
    if not isinstance(base, str) or not isinstance(module, str):
        return None
    return module, base


def loaded_functions(records: Iterable[KernelRecord]) -> dict[str, set[str]]:
    """The library functions a process loading the jit kernels ``records`` loads from Numba's
    cache, as {module: file name bases}: in the runtime modules the kernels import (and those
    of the entry points they require, and what these import), every function compiled when
    its module is imported or a kernel is (a `numba.cfunc`, such as the work pool's, the
    entry points and tasks of `rvm.kernels.entry` and `.parfor`, or an ``njit`` with
    signatures, such as `rvm.kernels.mathlib`'s). The modules must be imported (the
    kernels loaded) first. Lazily compiled functions (BLAS calls...) are left out: they are in
    the object code of what calls them, and compile only where a kernel does."""
    from numba.core.ccallback import CFunc
    from numba.core.registry import CPUDispatcher

    from rvm.kernels import entry, parfor
    from rvm.runtime.loading.cache import imported_modules

    modules: set[str] = set()
    for rec in records:
        modules.update(imported_modules(rec.imports))
        for name, _ in rec.requires:
            modules.update(imported_modules((entry.MODULES[name],)))
    found: dict[str, set[str]] = {}

    def add(obj: object) -> None:
        got = _function_cache(obj)
        if got is not None and got[0] in modules and MODULE_NAME.fullmatch(got[0]):
            found.setdefault(got[0], set()).add(got[1])

    for name in modules:
        # a module named only by a function's own import, never run in this process, has none
        module = sys.modules.get(name)
        for obj in list(vars(module).values()) if module is not None else ():
            eager = isinstance(obj, CPUDispatcher) and not getattr(obj, "_can_compile", True)
            if eager or isinstance(obj, CFunc):
                add(obj)
    for table in (entry._compiled, parfor._compiled):
        for obj in list(table.values()):
            add(obj)
    return found


def collect(records: Iterable[KernelRecord], native_file: str | None = None) -> NativeCode | None:
    """The native code of the jit kernels among ``records``, loaded (compiled when not
    cached) first, and of the native exec mode's file ``native_file`` (its functions compiled
    first, `rvm.runtime.vm.VirtualMachine.native_report`); None when there are no jit kernels.
    A kernel that does not compile is left out (it rebuilds from source where it is loaded,
    and fails there as here)."""
    from rvm.errors import JITError
    from rvm.kernels.numba_cache import object_code_dir
    from rvm.runtime.loading.cache import kernel_path
    from rvm.runtime.loading.loader import load_kernel

    jit = [r for r in records if r.backend == "jit"]
    if not jit:
        return None
    groups = []
    for rec in jit:
        try:
            load_kernel(rec)
        except (JITError, OSError) as err:  # OSError: a cache it cannot write
            _debug.debug("kernel %s: no native code saved (%s)", rec.name, err)
            continue
        path = kernel_path(rec.source, rec.imports)
        files = _cache_files(object_code_dir(path), path.stem)
        if files:
            try:
                mtime = path.stat().st_mtime_ns
            except OSError:
                continue
            groups.append(NativeGroup("kernel", path.name, mtime, files))
    for module, bases in sorted(loaded_functions(jit).items()):
        files = _cache_files(module_cache_folder(module), module.rpartition(".")[2], bases)
        if files:
            groups.append(NativeGroup("module", module, 0, files))
    if native_file is not None:
        path = Path(native_file)
        files = _cache_files(object_code_dir(path), path.stem)
        try:
            source, mtime = path.read_bytes(), path.stat().st_mtime_ns
        except OSError:
            files = ()
        if files:
            groups.append(NativeGroup("native", path.name, mtime, ((path.name, source), *files)))
    return NativeCode(native_key(), tuple(groups))


def entry_hash(group: NativeGroup) -> str:
    """The hash naming ``group``'s isolated entry: of its name, saved time and every file."""
    digest = hashlib.sha256()
    digest.update(f"{group.kind}\0{group.ident}\0{group.mtime_ns}\0".encode())
    for name, data in sorted(group.files):
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:32]


@dataclass(frozen=True)
class Entry:
    """Where a trusted file's object code of one kernel lives: its own kernel file (the
    record's source) in a folder named by `entry_hash` of ``group``, which it is checked
    against at each use (`verify_entry`)."""

    path: Path
    group: NativeGroup


def install(native: NativeCode, kernels: Mapping[str, KernelRecord], ex: object = None) -> int:
    """Write the object code of ``native``'s kernels into isolated entries of the cache, when
    its key is this process's (see the module docstring), and note them on ``ex`` (the
    executable, its ``_native_entries`` by kernel file name) for `rvm.runtime.kernels`;
    returns how many files were written. Only for a trusted executable.

    Nothing written here can change what another executable runs: each entry is a folder of
    its own, named by the hash of the bytes it holds (`entry_hash`), and used only by the
    executable that brought it (the native exec mode's file too, `native_entry`). The
    library's own entries (``module`` groups) are never written from a file: this process
    builds them.
    A failure to write (a read-only cache) is logged at debug level: the kernels then
    compile as usual."""
    here = native_key()
    if native.key != here:
        logger.info(
            "executable's native code was built for another machine or library versions "
            "(%s differ): its kernels rebuild from source",
            key_difference(native.key, here),
        )
        return 0
    from rvm.runtime.loading.cache import kernel_path

    records = {}
    for rec in kernels.values():
        if rec.backend == "jit":
            records[kernel_path(rec.source, rec.imports).name] = rec
    entries = getattr(ex, "_native_entries", {})
    written = stale = 0
    for group in native.groups:
        if group.kind == "module":
            continue
        if group.kind == "native":
            source = _native_source(group)
            if source is None:
                continue
        else:
            rec = records.get(group.ident)
            if rec is None:  # the same versions, other rvm library sources
                stale += 1
                continue
            source = rec.source
        try:
            path, count = _write_entry(group, source)
        except (OSError, ValueError, OverflowError) as err:  # ValueError: a bad mtime
            _debug.debug("native code of %s not installed: %s", group.ident, err)
            continue
        written += count
        entries[group.ident] = Entry(path, group)
    if stale:
        logger.info(
            "executable's native code was built from other rvm library sources: %d of its "
            "kernels rebuild from source",
            stale,
        )
    return written


def _native_source(group: NativeGroup) -> str | None:
    """The native mode's source a ``native`` group carries, when it hashes to its name."""
    from rvm.runtime.loading import NATIVE_IMPORTS
    from rvm.runtime.loading.cache import source_hash

    try:
        source = dict(group.files)[group.ident].decode()
    except UnicodeDecodeError:
        return None
    if f"n_{source_hash(source, NATIVE_IMPORTS)}.py" != group.ident:
        _debug.debug("native file %s not installed: its source hashes otherwise", group.ident)
        return None
    return source


def _object_files(group: NativeGroup) -> dict[str, bytes]:
    return {name: data for name, data in group.files if name != group.ident}


def native_entry(ex: object, path: Path, source: str) -> Path | None:
    """The verified isolated entry of the native mode's file ``path`` (rvm's own cache path
    of ``source``) that trusted executable ``ex`` brought, or None (use ``path``)."""
    entry = getattr(ex, "_native_entries", {}).get(path.name)
    return None if entry is None else use_entry(entry, source)


def _write_entry(group: NativeGroup, source: str) -> tuple[Path, int]:
    """Write ``group``'s entry (kernel file and object code) unless it is there intact;
    returns the kernel file's path and how many files were written."""
    from rvm.kernels.numba_cache import object_code_dir, write_atomic
    from rvm.runtime.loading import FILES_DIR
    from rvm.runtime.loading.cache import cache_dir

    path = cache_dir() / FILES_DIR / entry_hash(group) / group.ident
    if verify_entry(path, group, source):
        return path, 0
    folder = object_code_dir(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    for f in folder.glob(f"{path.stem}.*"):
        f.unlink(missing_ok=True)
    write_atomic(path, source.encode())
    os.utime(path, ns=(group.mtime_ns, group.mtime_ns))
    written = 1
    for name, data in sorted(_object_files(group).items(), key=lambda f: f[0].endswith(".nbi")):
        write_atomic(folder / name, data)  # the indexes last
        written += 1
    return path, written


def verify_entry(path: Path, group: NativeGroup, source: str) -> bool:
    """Whether the entry at ``path`` holds exactly ``source`` and ``group``'s files (and no
    other object code of that kernel): checked before each use, so an entry changed on disk
    is never loaded."""
    from rvm.kernels.numba_cache import object_code_dir

    try:
        if path.read_bytes() != source.encode():
            return False
        folder = object_code_dir(path)
        files = _object_files(group)
        there = {f.name for f in folder.glob(f"{path.stem}.*")}
        if there != set(files):
            return False
        return all((folder / name).read_bytes() == data for name, data in files.items())
    except OSError:
        return False


def use_entry(entry: Entry, source: str) -> Path | None:
    """The kernel file of ``entry`` to load, verified (rewritten from the executable's own
    bytes once when it was changed on disk); None when it cannot be made intact (the kernel
    then loads from rvm's own cache, compiled locally)."""
    if verify_entry(entry.path, entry.group, source):
        return entry.path
    logger.warning("kernel cache entry %s was changed on disk: rewritten", entry.path.parent)
    try:
        path, _ = _write_entry(entry.group, source)
    except (OSError, ValueError, OverflowError):
        return None
    return path if verify_entry(path, entry.group, source) else None
