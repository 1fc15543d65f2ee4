"""The VM thread guard's atomic steps in native code (the native exec mode's guard:
`rvm.runtime.modes.native_guard`): a guard is an int64 array, word `OWNER` the holding
thread's ident (0: free), the very ``threading.get_ident()`` value (CPython's
``PyThread_get_thread_ident``, called by symbol, so cached code links it anew in each process),
word `OFF` nonzero while native entries may not run. `guard_claim` and `guard_release` are
intrinsics a native entry calls; `python_turn` is Python's claim and release of the same word
by the same compare-and-swap. In the kernel library (`rvm.kernels`), so its cached object code
is the library's (`rvm.jit.clear_cache` drops it).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.jitting import jit
from rvm.kernels.numba_cache import light_loads

__all__ = ["OFF", "OWNER", "guard_claim", "guard_release", "load", "python_turn"]

OWNER, OFF = 0, 1  # the guard's words: the holding thread's ident (0: free); native code off


def _words(context, builder, sig, args):  # type: ignore[no-untyped-def]
    """The address of the guard array's first word."""
    return context.make_array(sig.args[0])(context, builder, args[0]).data


def _compare_and_swap(builder, owner):  # type: ignore[no-untyped-def]
    """1 when this thread took the free word ``owner`` now, 0 when it holds it already, -1
    when another thread does."""
    i64 = ir.IntType(64)
    fnty = ir.FunctionType(ir.IntType(64), [])
    ident = cgutils.get_or_insert_function(builder.module, fnty, "PyThread_get_thread_ident")
    me = builder.call(ident, [])
    pair = builder.cmpxchg(owner, i64(0), me, "acquire", "monotonic")
    took, old = builder.extract_value(pair, 1), builder.extract_value(pair, 0)
    mine = builder.select(builder.icmp_unsigned("==", old, me), i64(0), i64(-1))
    return builder.select(took, i64(1), mine)


def _is_guard(g: nt.Type) -> bool:
    return isinstance(g, nt.Array) and g.dtype == nt.int64 and g.ndim == 1


@intrinsic
def guard_claim(typingctx, g):  # type: ignore[no-untyped-def]
    """A native entry's claim of its VM's guard ``g``: 1 taken now (`guard_release` it before each
    return), 0 this thread's already, -1 another thread's or native code off (`OFF`): raise
    `Refused`."""
    if not _is_guard(g):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64 = ir.IntType(64)
        words = _words(context, builder, signature, args)
        off = builder.load_atomic(builder.gep(words, [i64(OFF)]), "monotonic", 8)
        out = cgutils.alloca_once_value(builder, i64(-1))
        with builder.if_then(builder.icmp_signed("==", off, i64(0)), likely=True):
            builder.store(_compare_and_swap(builder, builder.gep(words, [i64(OWNER)])), out)
        return builder.load(out)

    return nt.int64(g), codegen


@intrinsic
def guard_release(typingctx, g, took):  # type: ignore[no-untyped-def]
    """Gives back guard ``g`` if `guard_claim` took it (``took`` 1), as the entry returns."""
    if not _is_guard(g) or not isinstance(took, nt.Integer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64 = ir.IntType(64)
        took = context.cast(builder, args[1], signature.args[1], nt.int64)
        with builder.if_then(builder.icmp_signed("==", took, i64(1))):
            owner = builder.gep(_words(context, builder, signature, args), [i64(OWNER)])
            builder.store_atomic(i64(0), owner, "release", 8)
        return context.get_dummy_value()

    return nt.void(g, took), codegen


@intrinsic
def _take_word(typingctx, g):  # type: ignore[no-untyped-def]
    if not _is_guard(g):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        owner = builder.gep(_words(context, builder, signature, args), [ir.IntType(64)(OWNER)])
        return _compare_and_swap(builder, owner)

    return nt.int64(g), codegen


@jit(cache=True, nogil=True)
def python_turn(g, take):  # type: ignore[no-untyped-def]
    """Python's claim of guard ``g`` (``take``: as `guard_claim`, whether native code is off
    or not) or its release of the guard it took (returns 0): one function, one compile."""
    if take:
        return _take_word(g)
    guard_release(g, 1)
    return 0


def load() -> None:
    """Compiles `python_turn`, or loads it from Numba's cache without a refresh of Numba's
    typing context (`numba_cache.light_loads`: loaded at its first call, the refresh cost a
    native VM's first checked call 2 s), once per process."""
    if python_turn.signatures:
        return
    with light_loads():
        python_turn.compile((nt.Array(nt.int64, 1, "C"), nt.boolean))
