"""`Executable`'s methods that belong to the modules above the record, bound onto it here.

`rvm.runtime.executable` is data plus validation and imports none of the modules that encode,
print, package or inspect an executable; each of those is a function over the record in the
module that owns it. This module sits above all of them and binds them as the public methods
(``ex.save(path)``, ``ex.as_text()``, ``Executable.from_bytes(data)``...). `rvm.runtime`
imports it first, and Python runs a package's ``__init__`` before any of its modules, so the
methods are bound whenever an executable exists; nothing imports this module but that.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from typing import TYPE_CHECKING, Any

from rvm.runtime import serialize, text
from rvm.runtime.derived import Derived
from rvm.runtime.executable import Executable, KernelRecord
from rvm.runtime.kernels import require_trusted
from rvm.runtime.loading import artifact, loader, trust
from rvm.runtime.vm import VirtualMachine

if TYPE_CHECKING:
    from rvm.runtime.loading.artifact import NativeCode

_NATIVE_CODE: Derived[NativeCode | None] = Derived("the native code a saved file ships")
_CONTENT_HASH: Derived[str] = Derived("the content hash, per default exec mode")
_DEFAULT_VM: Derived[VirtualMachine] = Derived("the VM of ex[name] and ex(...)")


def native_code(ex: Executable) -> NativeCode | None:
    """The native code of the jit kernels (None without any), and of the native exec
    mode's functions when the executable runs natively by default, collected once."""

    if not ex.trusted:  # collecting builds the kernels: never an untrusted file's
        return None

    def collect() -> NativeCode | None:
        native = None
        if ex.default_exec_mode == "native":
            from rvm.runtime.modes.native import native_file  # Numba loads with it

            native = native_file(ex)
        return artifact.collect(ex.kernels.values(), native)

    return _NATIVE_CODE.get(ex, collect)


def _signing_key(ex: Executable, sign: bool | bytes | str | None) -> bytes | str | None:
    """The key to sign ``ex``'s bytes with. An untrusted executable is never signed by
    default (re-saving or pickling a file must not make it trusted), and refuses a key."""
    if sign is None or sign is False:
        return None
    if not ex.trusted:
        if sign is True:
            return None
        require_trusted(ex)
    return trust.local_key() if sign is True else sign


def to_bytes(ex: Executable, native: bool = True, sign: bool | bytes | str | None = True) -> bytes:
    """Encodes the executable in the versioned RVMX format (see `rvm.runtime.serialize`).

    Args:
        ex: The executable.
        native: Embed the native code of the jit kernels (Numba's cache files, for this
            CPU and these library versions; `rvm.runtime.loading.artifact`), compiling
            the kernels not compiled yet (once per executable). Without it, a process
            loading the bytes compiles the kernels its cache lacks.
        sign: The key to sign the bytes with (bytes, or hex text); True (default): this
            user's local key (`rvm.trust.local_key`), so the bytes load trusted wherever
            it is trusted; False or None: unsigned (they load as untrusted data). An
            untrusted executable (a file nobody trusted) is saved unsigned and without
            native code, and signing it with a key raises `UntrustedExecutableError` (load
            it trusted first).
    """
    key = _signing_key(ex, sign)
    return serialize.encode(ex, native_code(ex) if native else None, key)


def save(ex: Executable, path: str, sign: bool | bytes | str | None = True) -> None:
    """Writes the executable to `path`, with its kernels' native code (`to_bytes`), signed
    with ``sign`` (default: this user's local key; see `to_bytes`).

    The file is written beside ``path`` and renamed over it, so a process that has the old
    file loaded (memory-mapped, `rvm.load_executable`) keeps reading the old bytes."""
    parts = serialize.encode_parts(ex, native_code(ex), _signing_key(ex, sign))
    path = os.path.realpath(os.fspath(path))  # through a symbolic link, as open() writes
    if os.path.exists(path) and not os.path.isfile(path):  # a device or a pipe: in place
        with open(path, "wb") as f:
            for part in parts:
                f.write(part)
        return
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
    try:
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(part)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _kernel_record(ex: Executable, name: str) -> KernelRecord:
    try:
        return ex.kernels[name]
    except KeyError:
        raise KeyError(
            f"no kernel named {name!r}; kernels: {', '.join(sorted(ex.kernels))}"
        ) from None


def kernel_source(ex: Executable, name: str) -> str:
    """The generated Python source of kernel ``name`` (Numba source for jit kernels)."""
    return _kernel_record(ex, name).source


def _jit_record(ex: Executable, name: str) -> KernelRecord:
    record = _kernel_record(ex, name)
    if record.backend != "jit":
        raise ValueError(
            f"kernel {name!r} runs on the {record.backend} backend; only jit kernels have "
            "LLVM IR and assembly"
        )
    return record


def kernel_llvm(ex: Executable, name: str) -> str:
    """The LLVM IR Numba generated for jit kernel ``name`` (compiles it: a trusted
    executable's only, `UntrustedExecutableError` otherwise)."""
    require_trusted(ex)
    return loader.kernel_llvm(_jit_record(ex, name))


def kernel_asm(ex: Executable, name: str) -> str:
    """The native assembly of jit kernel ``name`` (a trusted executable's only)."""
    require_trusted(ex)
    return loader.kernel_asm(_jit_record(ex, name))


def default_vm(ex: Executable) -> VirtualMachine:
    """The `VirtualMachine` that `ex[name]` and `ex(...)` share, made at the first use."""
    return _DEFAULT_VM.get(ex, lambda: VirtualMachine(ex), ex.default_exec_mode)


def content_hash(ex: Executable) -> str:
    """A hex digest of the RVMX bytes without native code: equal for executables that save
    identically (computed once; keys caches across processes, as `rvm.dask` does)."""

    def digest() -> str:
        return hashlib.sha256(to_bytes(ex, native=False, sign=False)).hexdigest()

    # Keyed by the default exec mode too: the saved bytes record it.
    return _CONTENT_HASH.get(ex, digest, ex.default_exec_mode)


def function(ex: Executable, name: str) -> Any:
    """`ex["f"]`: function `f` as a callable over this executable's default VM.

    A convenience for scripts and notebooks: every `ex[...]` and `ex(...)` shares one
    `VirtualMachine(ex)` (made at the first use, in the default exec mode), so like any VM
    it runs one call at a time; make a VM per thread for concurrent calls.

    Raises:
        FunctionNotFoundError: No function is called `name`.
    """
    return default_vm(ex)[name]


def call_main(ex: Executable, *args: Any, **kwargs: Any) -> Any:
    """`ex(...)` calls "main" on the default VM (see `function`)."""
    return default_vm(ex)["main"](*args, **kwargs)


Executable.as_text = text.as_text  # type: ignore[attr-defined]
Executable.as_python = text.as_python  # type: ignore[attr-defined]
Executable.stats = text.stats  # type: ignore[attr-defined]
Executable._repr_html_ = text.as_html  # type: ignore[attr-defined]
Executable.kernel_source = kernel_source  # type: ignore[attr-defined]
Executable.kernel_llvm = kernel_llvm  # type: ignore[attr-defined]
Executable.kernel_asm = kernel_asm  # type: ignore[attr-defined]
Executable.native_code = native_code  # type: ignore[attr-defined]
Executable.to_bytes = to_bytes  # type: ignore[attr-defined]
Executable.save = save  # type: ignore[attr-defined]
Executable.from_bytes = classmethod(serialize.from_bytes)  # type: ignore[attr-defined]
Executable.default_vm = default_vm  # type: ignore[attr-defined]
Executable.content_hash = content_hash  # type: ignore[attr-defined]
Executable.__getitem__ = function  # type: ignore[attr-defined]
Executable.__call__ = call_main  # type: ignore[attr-defined]
