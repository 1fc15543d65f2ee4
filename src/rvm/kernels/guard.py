"""The VM thread guard's atomic steps in native code (the native exec mode's guard:
`rvm.runtime.modes.native_guard`): a guard is an int64 array, word `OWNER` the holding
thread's ident (0: free), the very ``threading.get_ident()`` value (CPython's
``PyThread_get_thread_ident``, called by symbol, so cached code links it anew in each process),
word `OFF` nonzero while native entries may not run. `compare_and_swap` and `release` are the
claim and its give-back as LLVM IR: the VM's native handle (C code,
`rvm.runtime.modes.native_handle`) claims the word so around its call of a native entry, and
`python_turn`, Python's claim and release of the same word, by the same instructions. In the
kernel library (`rvm.kernels`), so its cached object code is the library's
(`rvm.jit.clear_cache` drops it).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.jitting import jit
from rvm.kernels.numba_cache import light_loads

__all__ = ["IDENT", "OFF", "OWNER", "compare_and_swap", "load", "python_turn", "release"]

OWNER, OFF = 0, 1  # the guard's words: the holding thread's ident (0: free); native code off
IDENT = "PyThread_get_thread_ident"  # the C function of a thread's ident


def _words(context, builder, sig, args):  # type: ignore[no-untyped-def]
    """The address of the guard array's first word."""
    return context.make_array(sig.args[0])(context, builder, args[0]).data


def compare_and_swap(builder, owner):  # type: ignore[no-untyped-def]
    """1 when this thread took the free word ``owner`` now, 0 when it holds it already, -1
    when another thread does: LLVM IR at ``builder`` (an ``llvmlite.ir.IRBuilder``; Numba's
    or the native handle's, `rvm.runtime.modes.native_handle`), calling `IDENT`."""
    i64 = ir.IntType(64)
    fnty = ir.FunctionType(ir.IntType(64), [])
    ident = cgutils.get_or_insert_function(builder.module, fnty, IDENT)
    me = builder.call(ident, [])
    pair = builder.cmpxchg(owner, i64(0), me, "acquire", "monotonic")
    took, old = builder.extract_value(pair, 1), builder.extract_value(pair, 0)
    mine = builder.select(builder.icmp_unsigned("==", old, me), i64(0), i64(-1))
    return builder.select(took, i64(1), mine)


def _is_guard(g: nt.Type) -> bool:
    return isinstance(g, nt.Array) and g.dtype == nt.int64 and g.ndim == 1


def release(builder, owner):  # type: ignore[no-untyped-def]
    """Gives back the word ``owner`` `compare_and_swap` took (LLVM IR at ``builder``)."""
    builder.store_atomic(ir.IntType(64)(0), owner, "release", 8)


@intrinsic
def _give_back(typingctx, g):  # type: ignore[no-untyped-def]
    if not _is_guard(g):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        release(
            builder, builder.gep(_words(context, builder, signature, args), [ir.IntType(64)(OWNER)])
        )
        return context.get_dummy_value()

    return nt.void(g), codegen


@intrinsic
def _take_word(typingctx, g):  # type: ignore[no-untyped-def]
    if not _is_guard(g):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        owner = builder.gep(_words(context, builder, signature, args), [ir.IntType(64)(OWNER)])
        return compare_and_swap(builder, owner)

    return nt.int64(g), codegen


@jit(cache=True, nogil=True)
def python_turn(g, take):  # type: ignore[no-untyped-def]
    """Python's claim of guard ``g`` (``take``: 1 taken now, 0 this thread's already, -1
    another thread's, whether native code is off or not) or its release of the guard it took
    (returns 0): one function, one compile."""
    if take:
        return _take_word(g)
    _give_back(g)
    return 0


def load() -> None:
    """Compiles `python_turn`, or loads it from Numba's cache without a refresh of Numba's
    typing context (`numba_cache.light_loads`: loaded at its first call, the refresh cost a
    native VM's first checked call 2 s), once per process."""
    if python_turn.signatures:
        return
    with light_loads():
        python_turn.compile((nt.Array(nt.int64, 1, "C"), nt.boolean))
