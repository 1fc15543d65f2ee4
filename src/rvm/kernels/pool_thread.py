"""Which of the pool's threads runs the calling code: a small index, stable from call to call.

`index()` (njit-callable) is 0 in any thread that is not one of `rvm.kernels.workpool`'s
helpers (a job's caller, a VM's thread, a piece run inline) and ``i + 1`` in helper ``i``,
which says so as its loop starts (`set_index`). Inside a job of ``workpool.threads()``
threads it is in ``0 .. threads - 1`` and the same for a thread at every job: what a cut
gives a thread the work it did last time by (`rvm.kernels.parfor.affine_unit`), so that a
core writes again the lines it wrote last time. Not a proof that no other thread has the
same index (several callers are all 0): what is keyed by it must stay correct when two
threads share one (atomic claims).

It is a POSIX thread-specific value (``pthread_getspecific`` on a key made at import: a call
of a few nanoseconds, no system call), not an LLVM thread-local, which MCJIT does not link;
`current()` reads it from Python.
"""

from __future__ import annotations

import ctypes
import sys

from llvmlite import binding as llvm
from llvmlite import ir
from numba import types as nt
from numba.extending import intrinsic

from rvm.kernels import atomics, numba_cache

numba_cache.install()

__all__ = ["current", "index", "set_index"]

_libc = ctypes.CDLL(None)
_KEY_TYPE = ctypes.c_uint if sys.platform.startswith("linux") else ctypes.c_ulong  # pthread_key_t
_key = _KEY_TYPE(0)
if _libc.pthread_key_create(ctypes.byref(_key), None) != 0:
    raise OSError("rvm.kernels.pool_thread: pthread_key_create failed")
_KEY = "rvm_pool_thread_key"
llvm.add_symbol(_KEY, ctypes.addressof(_key))
for _symbol, _name in (("rvm_pthread_getspecific", "pthread_getspecific"),
                       ("rvm_pthread_setspecific", "pthread_setspecific")):  # fmt: skip
    llvm.add_symbol(_symbol, ctypes.cast(getattr(_libc, _name), ctypes.c_void_p).value)
_libc.pthread_getspecific.restype = ctypes.c_void_p
_libc.pthread_getspecific.argtypes = [_KEY_TYPE]


def _load_key(builder: ir.IRBuilder) -> ir.Value:
    kty = ir.IntType(8 * ctypes.sizeof(_KEY_TYPE))
    key = builder.module.globals.get(_KEY)
    if key is None:
        key = ir.GlobalVariable(builder.module, kty, _KEY)
        key.linkage = "external"
    return builder.load(key)


@intrinsic
def index(typingctx):  # type: ignore[no-untyped-def]
    """The calling thread's index among the pool's (see the module docstring)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i8p = ir.IntType(8).as_pointer()
        value = atomics.c_call(builder, "rvm_pthread_getspecific", i8p, [_load_key(builder)])
        return builder.ptrtoint(value, ir.IntType(64))

    return nt.int64(), codegen


@intrinsic
def set_index(typingctx, i):  # type: ignore[no-untyped-def]
    """Makes `index` ``i`` in the calling thread (a helper's loop, as it starts)."""
    if not isinstance(i, nt.Integer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        value = context.cast(builder, args[0], signature.args[0], nt.int64)
        ptr = builder.inttoptr(value, ir.IntType(8).as_pointer())
        key = _load_key(builder)
        atomics.c_call(builder, "rvm_pthread_setspecific", ir.IntType(32), [key, ptr])
        return context.get_dummy_value()

    return nt.void(i), codegen


def current() -> int:
    """`index` of the calling Python thread."""
    return int(_libc.pthread_getspecific(_key) or 0)
