"""The native mode's thread guard: one VM run at a time, claimed in native code.

A native-mode VM's guard (`NativeGuard`, the `ExecContext.guard` its mode sets) is a word its
native entries claim and give back themselves, by a compare-and-swap of the calling thread's
ident (`guard_claim`, `guard_release`), so a call from Python through the VM's handle pays no
Python for it (see `NativeMode.fast_call`). The word holds the holding thread's ident (0: free),
the very ``threading.get_ident()`` value (CPython's ``PyThread_get_thread_ident``, which native
code calls by symbol, so cached code links it anew in each process); a second word is nonzero
while native entries may not run (`ExecContext.plain` false: an instrumented or profiled VM, an
allocator of its own). An entry finding the guard another thread's, or native code turned off,
raises `Refused` before it runs anything; finding it its own thread's (a call from Python the VM
runs calling the VM again) it runs without claiming it.

Python takes the same word by the same compare-and-swap (`NativeGuard.enter`, through a small
njit function: the VM's checked entry, compiled-mode fallbacks), so the two never hold it at
once. Imports Numba: made by the native mode only.
"""

from __future__ import annotations

from threading import get_ident

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.jitting import jit

__all__ = ["NativeGuard", "Refused", "guard_claim", "guard_release"]

OWNER, OFF = 0, 1  # the guard's words: the holding thread's ident (0: free); native code off


class Refused(Exception):
    """Raised by a native entry that did not run: its VM's guard held by another thread, or
    native code off for the VM; the caller hands the call to the VM's checked entry."""


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
def _python_turn(g, take):  # type: ignore[no-untyped-def]
    """Python's claim of guard ``g`` (``take``: as `guard_claim`, whether native code is off
    or not) or its release of the guard it took (returns 0): one function, one compile."""
    if take:
        return _take_word(g)
    guard_release(g, 1)
    return 0


def _load() -> None:
    """Compiles `_python_turn`, or loads it from Numba's cache without a refresh of Numba's
    typing context (`numba_cache.light_loads`: loaded at its first call, the refresh cost a
    native VM's first checked call 2 s), once per process."""
    if _python_turn.signatures:
        return
    from numba import types as nt

    from rvm.kernels.numba_cache import light_loads

    with light_loads():
        _python_turn.compile((nt.Array(nt.int64, 1, "C"), nt.boolean))


class NativeGuard:
    """A native-mode VM's thread guard (see the module docstring), with `EntryGuard`'s API:
    `enter` / `leave` for Python's claims, `owner`, `held`, and `failed` after a native entry
    raised. ``word`` is the array native entries take as their first argument."""

    __slots__ = ("word", "_python")

    def __init__(self, plain: bool = True) -> None:
        self.word = np.zeros(2, np.int64)
        self.word[OFF] = 0 if plain else 1
        self._python = False  # whether the holder took it from Python (`enter`)
        _load()

    def enter(self) -> bool | None:
        """Takes the guard for this thread: True when this call took it (`leave` gives it
        back), False when this thread holds it already (a reentrant call), None when another
        thread holds it."""
        took = _python_turn(self.word, True)
        if took == 1:
            self._python = True
            return True
        return False if took == 0 else None

    def leave(self) -> None:
        """Gives back the guard `enter` took."""
        self._python = False
        _python_turn(self.word, False)

    def failed(self) -> None:
        """After a native entry of this thread raised: gives the guard back if the entry took
        it (it holds it, and Python did not take it), as the entry would have returning."""
        if self.word[OWNER] == get_ident() and not self._python:
            _python_turn(self.word, False)

    def set_plain(self, plain: bool) -> None:
        """Lets native entries run (``plain``) or makes them raise `Refused` (`OFF`)."""
        self.word[OFF] = 0 if plain else 1

    @property
    def owner(self) -> int | None:
        """The holding thread's ident, None while the guard is free."""
        return int(self.word[OWNER]) or None

    @property
    def held(self) -> bool:
        """Whether a thread holds the guard."""
        return self.word[OWNER] != 0
