"""Loading Numba's cached object code without starting Numba's compiler.

Before it loads a cached function, Numba's `Cache.load_overload` refreshes the target context:
it imports and installs every lowering and typing registry Numba has (NumPy's, the typed
containers', SciPy's BLAS bindings...), about half a second of CPU and most of a warm start,
though loading object code needs none of it, only Numba's runtime (NRT) symbols. Within
`light_loads()`, cache loads on this thread skip that refresh: the NRT is initialized and the
object code is loaded through Numba's own cache classes (its private ``Cache._load_overload``,
used in `light_load` only). Everything else goes Numba's normal way: a miss compiles (Numba's
compiler refreshes the context itself first), and a light load that fails for any reason (a
Numba whose internals differ, a corrupt file) is done again by Numba's own `load_overload`,
which reports a corrupt file as it always did (`rvm.runtime.loading.loader` then drops the
entry and recompiles).

`install()` puts the switch in place, once per process, after dropping the library's object
code if the library's source changed since it was cached (`drop_stale_library_code`);
on a Numba without the private methods it changes nothing and loads stay Numba's own.
`counts()` says how many loads went which way in this process.

Object code rvm caches is sealed (`seal_object_code`: the hash of a source file's ``.nbi``
and ``.nbc`` files, in ``<stem>.seal`` beside them) and checked against its seal before it is
loaded (`check_object_code`), so a tampered or corrupt file is dropped and compiled again,
never unpickled: kernel files and the native mode's file by `rvm.runtime.loading`, the
library's modules here, from `install` on (Numba's cache saves and loads of their functions
go through `_seal_library`).

The rules of Numba's cache folders (`object_code_dir`) and atomic writes (`write_atomic`)
live here too, at the bottom, for the library's stamp and for `rvm.runtime.loading`'s caches.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rvm.kernels import apart
from rvm.kernels.cpu import opt_key, tuning_key, wide_vectors

logger = logging.getLogger("rvm.jit")

_state = threading.local()  # .depth: how many `light_loads` this thread is inside
_lock = threading.Lock()
_installed: bool | None = None
_counts = {"light": 0, "normal": 0, "fallback": 0}


def counts() -> dict[str, int]:
    """Cache loads this process made: ``light`` (no refresh), ``normal`` (Numba's own, outside
    `light_loads` or without `install`), ``fallback`` (a light load that failed, then done
    Numba's way)."""
    return dict(_counts)


def light_load(cache: Any, sig: Any, target_context: Any) -> Any:
    """Numba's cached compile result of ``sig`` from ``cache`` (a `numba.core.caching.Cache`),
    or None on a miss, without refreshing ``target_context`` (the only use of Numba's private
    methods; raises whatever they raise)."""
    from numba.core.runtime import nrt

    nrt.rtsys.initialize(target_context)  # the NRT symbols the object code links against
    return cache._load_overload(sig, target_context)


def install() -> bool:
    """Put the `light_loads` switch into Numba's cache, once per process; False (and nothing
    changed) when this Numba lacks what `light_load` uses."""
    global _installed
    with _lock:
        if _installed is None:
            wide_vectors()  # before anything compiles: the features every build keys on
            apart.install(check_object_code, seal_object_code)  # helpers compile, if isolated
            drop_stale_library_code()
            _key_opt_level()
            _skip_declarations()
            _share_overloads()
            _installed = _patch()
            _seal_library()  # around the light loads: checked before either way loads
        return _installed


def _patch() -> bool:
    try:
        from numba.core import caching
        from numba.core.runtime import nrt
    except ImportError as err:  # pragma: no cover - Numba is a dependency
        logger.debug("Numba's cache loads stay its own: %s", err)
        return False
    cls = caching.Cache
    original = cls.__dict__.get("load_overload")
    usable = (
        callable(original)
        and callable(getattr(cls, "_load_overload", None))
        and callable(getattr(nrt.rtsys, "initialize", None))
    )
    if not usable:
        logger.debug("Numba's cache loads stay its own: its Cache has no _load_overload")
        return False

    def load_overload(self: Any, sig: Any, target_context: Any) -> Any:
        if getattr(_state, "depth", 0) > 0:
            try:
                data = light_load(self, sig, target_context)
            except Exception as err:  # noqa: BLE001 - Numba's own load runs (and reports)
                _counts["fallback"] += 1
                logger.debug("light cache load failed (%s: %s): Numba's own", type(err), err)
            else:
                _counts["light"] += 1
                return data
        else:
            _counts["normal"] += 1
        return original(self, sig, target_context)

    load_overload.__wrapped__ = original  # type: ignore[attr-defined]
    cls.load_overload = load_overload
    return True


def _key_opt_level() -> None:
    """Make Numba's cache index key every function by LLVM's optimization level too, where it
    is not Numba's default (`rvm.kernels.cpu.opt_key`): Numba keys an entry by the signature,
    the target's CPU name and features (its codegen's ``magic_tuple``) and the source, so a
    process at the default would load code a process at another level cached (the test
    suite's ``NUMBA_OPT=1``). At the default the keys stay Numba's own."""
    from numba.core.codegen import CPUCodegen

    field = opt_key()
    plain = CPUCodegen.__dict__.get("magic_tuple")
    if not field or not callable(plain) or hasattr(plain, "__wrapped__"):
        return

    def magic_tuple(self: Any) -> tuple:
        return (*plain(self), field)

    magic_tuple.__wrapped__ = plain  # type: ignore[attr-defined]
    CPUCodegen.magic_tuple = magic_tuple


# The names Numba's `CPUCodeLibrary._optimize_functions` reads (Numba 0.68's), whose loop
# `_skip_declarations` repeats: another body is left as it is.
_FUNCTION_PASSES_READ = frozenset(
    ("_codegen", "_data_layout", "_function_pass_manager", "_recorded_timings", "data_layout")
    + ("functions", "name", "record", "run")
)


def _skip_declarations() -> None:
    """Make Numba's function passes skip the declarations of a module it adds to a library.
    `CPUCodeLibrary._optimize_functions` builds LLVM's function pass pipeline for every
    function of the module, declarations too (a jit kernel's declares about 80: the runtime's
    and the C API's functions it calls), where the passes find no body to change: a tenth of
    that step, 4% of a small kernel's build on a Zen 3 (session 48). The functions with a body
    get the same passes in the same order, so the code is the same. A Numba whose method reads
    other names keeps its own."""
    from numba.core.codegen import CPUCodeLibrary

    plain = CPUCodeLibrary.__dict__.get("_optimize_functions")
    code = getattr(plain, "__code__", None)
    if code is None or hasattr(plain, "__wrapped__"):
        return
    if frozenset(code.co_names) != _FUNCTION_PASSES_READ:
        return

    def _optimize_functions(self: Any, ll_module: Any) -> None:
        ll_module.data_layout = self._codegen._data_layout
        for func in ll_module.functions:
            if func.is_declaration:
                continue
            fpm, pb = self._codegen._function_pass_manager()
            with self._recorded_timings.record(f"Function passes on {func.name!r}", pb):
                fpm.run(func, pb)

    _optimize_functions.__wrapped__ = plain  # type: ignore[attr-defined]
    CPUCodeLibrary._optimize_functions = _optimize_functions


# The names Numba's `_OverloadFunctionTemplate._get_impl` reads (Numba 0.68's), whose lookup
# `_share_overloads` repeats with another key.
_OVERLOAD_IMPL_READ = frozenset(
    ("ConfigStack", "KeyError", "_build_impl", "_impl_cache", "context", "items", "targetconfig",
     "top_or_none", "tuple")
)  # fmt: skip


def _share_overloads() -> None:
    """Make an ``@overload``'s compiled implementation (NumPy's ``np.empty``, ``min`` of a
    tuple...) serve every caller whose flags agree on those its compile takes from the caller.
    Numba keys it by the caller's whole flags (`_OverloadFunctionTemplate._get_impl`), so one
    process compiling the library (nogil, no bounds checks), its C callbacks (neither) and the
    kernels (no C wrapper) compiled ``np.empty`` of one signature up to 7 times (session 53), each
    the same code: the compile takes only the flags its options inherit (`_inherited_flags`:
    ``nrt``, ``fastmath``, ``error_model``, ``forceinline``) from the caller, and the rest from
    the overload's own options. The key here holds those inherited values only. A Numba whose
    lookup reads other names, or whose options inherit other flags, keeps its own."""
    from numba.core import targetconfig
    from numba.core.typing.templates import _OverloadFunctionTemplate as cls

    plain = cls.__dict__.get("_get_impl")
    code = getattr(plain, "__code__", None)
    if code is None or hasattr(plain, "__wrapped__"):
        return
    names = _inherited_flags()
    if frozenset(code.co_names) != _OVERLOAD_IMPL_READ or names is None:
        return

    def _get_impl(self: Any, args: Any, kws: Any) -> Any:
        flags = targetconfig.ConfigStack.top_or_none()
        inherited = None if flags is None else tuple(_hashable(getattr(flags, n)) for n in names)
        key = self.context, tuple(args), tuple(kws.items()), inherited
        try:
            return self._impl_cache[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable value: Numba's own key
            return plain(self, args, kws)
        return self._build_impl(key, args, kws)

    _get_impl.__wrapped__ = plain  # type: ignore[attr-defined]
    cls._get_impl = _get_impl


def _inherited_flags() -> tuple[str, ...] | None:
    """The flags a compile on Numba's CPU target takes from its caller's (the names its
    options' ``finalize`` passes to ``inherit_if_not_set``), or None when that is unclear."""
    import dis

    from numba.core.cpu import CPUTargetOptions

    try:
        code = list(dis.get_instructions(CPUTargetOptions.finalize))
    except TypeError:
        return None
    names = []
    for k, ins in enumerate(code):
        if ins.argval == "inherit_if_not_set":
            if k + 1 == len(code) or not isinstance(code[k + 1].argval, str):
                return None
            names.append(code[k + 1].argval)
    return tuple(names) or None


def _hashable(value: Any) -> Any:
    """A flag's value as a key: fastmath's options (a set, unhashable) by their flags."""
    flags = getattr(value, "flags", None)
    return (type(value).__name__, frozenset(flags)) if isinstance(flags, set) else value


def _seal_library() -> None:
    """Make Numba's cache load the library's object code (of this package's modules)
    only when it is what rvm sealed, checked before each load (else the module's object code
    is dropped, one INFO line says so, and it compiles), and seal it after each save."""
    from numba.core.caching import Cache as cls

    load, save = cls.__dict__.get("load_overload"), cls.__dict__.get("save_overload")
    if not (callable(load) and callable(save)):
        return

    def load_overload(self: Any, sig: Any, target_context: Any) -> Any:
        module = _library_module(self)
        if module is None:
            return load(self, sig, target_context)
        with _locked(module, exclusive=False):  # no other process between a save and its seal
            if not check_object_code(module):
                logger.info(
                    "rvm library module %s: its cached object code is not what rvm sealed "
                    "(changed on disk, or cached before seals): rebuilt",
                    module.stem,
                )
                drop_object_code(module)
                return None
            return load(self, sig, target_context)

    def save_overload(self: Any, sig: Any, data: Any) -> None:
        module = _library_module(self)
        if module is None:
            save(self, sig, data)
            return
        with _locked(module, exclusive=True):
            if not _saved_by_another(self, module, sig, data):
                save(self, sig, data)
                seal_object_code(module)

    load_overload.__wrapped__ = load  # type: ignore[attr-defined]
    save_overload.__wrapped__ = save  # type: ignore[attr-defined]
    cls.load_overload = load_overload
    cls.save_overload = save_overload


def _saved_by_another(cache: Any, module: Path, sig: Any, data: Any) -> bool:
    """Whether another process saved ``sig``'s object code while this one compiled it (both
    compiled it at once): the sealed entry it wrote stays, so object code a process has
    loaded is never replaced under it. False when unsure (unsealed, or this Numba's cache
    lacks the private ``_index_key`` / ``_cache_file``): then this process saves."""
    try:
        if not check_object_code(module):
            return False  # the index is a pickle: read only when sealed
        key = cache._index_key(sig, data.codegen)
        return key in cache._cache_file._load_index()
    except Exception:  # noqa: BLE001 - unsure: saved as without the check
        return False


@contextlib.contextmanager
def _locked(path: Path, exclusive: bool) -> Iterator[None]:
    """Hold an advisory lock (``flock``) on the object code of the source file ``path``
    across processes: exclusive around a save and its seal, shared around a check and a load,
    so processes sharing a cache (pytest-xdist workers, servers) never see a save without its
    seal (which would drop the module's object code) nor lose each other's index entries.
    Without ``fcntl`` or a writable folder it does nothing (a race then costs a rebuild)."""
    try:
        import fcntl

        folder = object_code_dir(path)
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / f"{path.stem}.{LOCK}", os.O_RDWR | os.O_CREAT, 0o644)
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases the lock


@functools.lru_cache(maxsize=1)
def _library_sources() -> frozenset[str]:
    """The real paths of this package's modules."""
    return frozenset(os.path.realpath(p) for p in Path(__file__).parent.glob("*.py"))


def _library_module(cache: Any) -> Path | None:
    """The library module whose function Numba's ``cache`` caches, or None (not rvm's)."""
    code = getattr(getattr(cache, "_py_func", None), "__code__", None)
    if code is None:
        return None
    path = code.co_filename
    return Path(path) if os.path.realpath(path) in _library_sources() else None


def cfunc(sig: Any, **options: Any) -> Any:
    """`numba.cfunc` for a C callback a library module defines at import: compiled there and
    then, or loaded from Numba's cache under `light_loads`, whoever imports the module (a
    compile pass that reads one of the library's facts imports its module outside any load)."""
    import numba

    def build(fn: Any) -> Any:
        with light_loads():
            return numba.cfunc(sig, **options)(fn)

    return build


@contextlib.contextmanager
def light_loads() -> Iterator[None]:
    """Within: Numba's cache loads on this thread skip the context refresh (see the module
    docstring; `install` is called first)."""
    install()
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in its folder moved in place with
    ``os.replace`` (atomic: a reader sees the old file or the whole new one)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def object_code_dir(path: Path) -> Path:
    """The folder where Numba caches the object code of the kernel file ``path``: the
    ``__pycache__`` beside it, or its mirror under ``NUMBA_CACHE_DIR`` when that is set
    (Numba's own rule, `numba.core.caching.UserProvidedCacheLocator`)."""
    from numba.core import config
    from numba.core.caching import UserProvidedCacheLocator

    if config.CACHE_DIR:
        return Path(config.CACHE_DIR) / UserProvidedCacheLocator.get_suitable_cache_subpath(
            str(path)
        )
    return path.parent / "__pycache__"


# Beside the library's object code: the hash of the library's source it was compiled from.
LIBRARY_STAMP = "rvm-native-library.stamp"


@functools.lru_cache(maxsize=1)
def library_digest() -> str:
    """The hash of the library's sources (this package's modules, read once per process) and
    of the CPU facts its tuning reads (`rvm.kernels.cpu.tuning_key`): code tuned for other
    caches is dropped too."""
    sources = sorted(Path(__file__).parent.glob("*.py"))
    text = b"".join(p.read_bytes() for p in sources) + tuning_key().encode()
    return hashlib.sha256(text).hexdigest()


@functools.lru_cache(maxsize=1)
def drop_stale_library_code() -> bool:
    """Drop Numba's cached object code of this package's modules if any module's source
    changed since it was written (once per process, before the first load); True if dropped.

    Numba checks a cached function against its own file only, but the library's modules
    compile each other's functions in and link symbols others register, so after an edit (a
    git pull under an editable install) a module's stale code could name a symbol that no
    longer exists, which LLVM answers by aborting the process. A folder rvm cannot write is
    left as it is (Numba cannot cache there either)."""
    sources = sorted(Path(__file__).parent.glob("*.py"))
    return _drop_unless_stamped(sources, object_code_dir(sources[0]) / LIBRARY_STAMP)


def drop_stale_user_code(path: Path) -> bool:
    """Drop Numba's cached object code of the source file ``path``, a module outside the
    library whose cached functions compile library code in, if the library's source changed
    since it was written (the library's digest in ``<stem>.library`` beside it); True if
    dropped. Numba checks that code against ``path`` alone: `rvm.runtime.modes.native_support`'s
    helpers inline `rvm.kernels.blocks`' slots, and after `blocks.SLOTS` changed their stale
    code read the slots of the old layout, so the native mode never took a kept block back.
    Called at the module's import, before its functions load."""
    return _drop_unless_stamped([path], user_code_stamp(path))


def user_code_stamp(path: Path) -> Path:
    """Where `drop_stale_user_code` keeps the library's digest for the module at ``path``."""
    return object_code_dir(path) / f"{path.stem}.library"


def _drop_unless_stamped(sources: list[Path], stamp: Path) -> bool:
    """Drop the object code of ``sources`` unless ``stamp`` holds the library's digest, which
    is then written there; True if dropped (False too where the folder is not writable)."""
    digest = library_digest()
    try:
        if stamp.read_text() == digest:
            return False
    except OSError:
        pass
    try:
        for module in sources:
            drop_object_code(module)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(stamp, digest.encode())
    except OSError:
        return False
    return True


# -- seals: the hash of the object code rvm's processes cached, checked before each load ------


SEAL = "seal"
LOCK = "lock"  # beside a library module's object code: `_locked`'s file (empty)


def drop_object_code(path: Path) -> None:
    """Remove Numba's cached object code of the source file ``path`` (and its seal)."""
    for f in _object_files(path):
        f.unlink(missing_ok=True)
    (object_code_dir(path) / f"{path.stem}.{SEAL}").unlink(missing_ok=True)


def _object_files(path: Path) -> list[Path]:
    """The files of Numba's cached object code of the source file ``path``."""
    folder = object_code_dir(path)
    if not folder.is_dir():
        return []
    return sorted(f for f in folder.glob(f"{path.stem}.*") if f.suffix in (".nbi", ".nbc"))


def _digest(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f.name}\0".encode())
        digest.update(_file_hash(f))
    return digest.hexdigest()


_hashes: dict[tuple, bytes] = {}  # by file and stat (inode, size, times: ctime is not settable)


def _file_hash(f: Path) -> bytes:
    """The hash of file ``f``'s bytes, read once per version of it (a check runs before each
    load of a function's object code, over all of its file's object code)."""
    st = f.stat()
    key = (str(f), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    found = _hashes.get(key)
    if found is None:
        found = _hashes[key] = hashlib.sha256(f.read_bytes()).digest()
    return found


def seal_object_code(path: Path) -> None:
    """Record the hash of Numba's object code of the source file ``path`` (a kernel file, the native
    mode's file, a library module) beside it (its
    seal; `check_object_code` compares it before each load). Best effort: an unwritable
    cache stays unsealed."""
    try:
        files = _object_files(path)
        if files:
            write_atomic(object_code_dir(path) / f"{path.stem}.{SEAL}", _digest(files).encode())
    except OSError:
        pass


def check_object_code(path: Path) -> bool:
    """Whether the object code of the source file ``path`` (a kernel file, the native
    mode's file, a library module) is what rvm sealed (or absent):
    object code without a seal, or changed since it was sealed (a corrupt disk, a
    tampered file), is not loaded: the caller drops it and it is compiled again."""
    try:
        files = _object_files(path)
        if not files:
            return True
        seal = object_code_dir(path) / f"{path.stem}.{SEAL}"
        return seal.read_text() == _digest(files)
    except OSError:
        return False
