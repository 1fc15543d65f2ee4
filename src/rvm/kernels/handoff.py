"""What handing work to rvm's pool costs, measured on this machine, for split thresholds.

A library loop split over the pool (`rvm.kernels.workpool`) pays a handoff: the job is
published, a helper sees it, claims a piece and reports it done. Work below a few handoffs
is faster in the calling thread. How long a handoff takes depends on the machine (cores,
caches, how a helper spins or sleeps), so a kernel compares it with its own work measured in
the same unit, never with a constant tuned on one machine:

- `cycles()`: the CPU's time-stamp counter (``llvm.readcyclecounter``: x86's TSC, AArch64's
  virtual counter; 0 where there is none), the unit both are measured in;
- `handoff_ticks()`: an empty job's round trip on the pool, in ticks of `cycles`: the least
  over `TRIALS` jobs of two pieces that meet (each waits until the other has started, so a
  helper, not the caller, runs one of them), after one that wakes a helper. Measured once
  per process, in compiled code, on the first call with a helper free (a slot registered
  for compiled callers holds it); 0 when it cannot be measured (one thread, the pool busy,
  no counter, no helper coming);
- `slot(symbol)`: an int64 registered under a symbol, read and written by compiled code
  (cached code finds it when linked): what a kernel keeps of its own measurements.
"""

from __future__ import annotations

import ctypes

import numba as nb
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels import workpool

__all__ = ["TRIALS", "cycles", "handoff_ticks", "reset", "settled", "slot"]

TRIALS = 16  # jobs timed; the least is the handoff (others meet preemption)
WAKE_TICKS = 1 << 27  # the first job's piece waits at most this long for a helper to wake
WAIT_TICKS = 1 << 22  # a later one this long for its partner (then: in vain)
GIVE_UP = 8  # jobs whose pieces waited in vain (helpers preempted) before measuring stops

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


def slot(symbol: str) -> tuple[ctypes.c_int64, object, object]:
    """An int64 registered under ``symbol`` (for compiled callers; 0 at first): the cell (for
    Python) and the intrinsics ``load()`` and ``store(value)`` (atomic, relaxed) that
    compiled code reads and writes it with."""
    cell = ctypes.c_int64(0)
    llvm.add_symbol(symbol, ctypes.addressof(cell))
    return cell, _slot_load(symbol), _slot_store(symbol)


def _global(builder: ir.IRBuilder, symbol: str) -> ir.Value:
    i64 = ir.IntType(64)
    cell = builder.module.globals.get(symbol)
    if cell is None:
        cell = ir.GlobalVariable(builder.module, i64, symbol)
        cell.linkage = "external"
    return cell


def _slot_load(symbol: str):  # type: ignore[no-untyped-def]
    @intrinsic
    def load(typingctx):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            return builder.load_atomic(_global(builder, symbol), "monotonic", 8)

        return nt.int64(), codegen

    return load


def _slot_store(symbol: str):  # type: ignore[no-untyped-def]
    @intrinsic
    def store(typingctx, value):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            v = context.cast(builder, args[0], signature.args[0], nt.int64)
            builder.store_atomic(v, _global(builder, symbol), "monotonic", 8)
            return context.get_dummy_value()

        return nt.void(value), codegen

    return store


@intrinsic
def cycles(typingctx):  # type: ignore[no-untyped-def]
    """The CPU's time-stamp counter (0 where it has none)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
        return builder.call(fn, [])

    return nt.int64(), codegen


@intrinsic
def _bump(typingctx, address):  # type: ignore[no-untyped-def]
    """Atomically adds 1 to the int64 at ``address``; returns the value after."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ptr = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        old = builder.atomic_rmw("add", ptr, ir.IntType(64)(1), "seq_cst")
        return builder.add(old, ir.IntType(64)(1))

    return nt.int64(nt.int64), codegen


@intrinsic
def _peek(typingctx, address):  # type: ignore[no-untyped-def]
    """The int64 at ``address``, loaded atomically."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ptr = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        return builder.load_atomic(ptr, "seq_cst", 8)

    return nt.int64(nt.int64), codegen


@nb.cfunc(nt.void(nt.int64, nt.voidptr, nt.CPointer(nt.int64)), **_OPTS)
def _meet(i, null, data):  # type: ignore[no-untyped-def]
    """A piece of the timing job (``data``: three int64): marks itself started (the first),
    then waits, at most the third's ticks, until both pieces have; the second counts pieces
    that gave up waiting."""
    state = nb.carray(data, 3)
    at, limit = state.ctypes.data, state[2]
    t0 = cycles()
    started = _bump(at)
    while started < 2:
        workpool._pause()
        started = _peek(at)
        if cycles() - t0 > limit:
            _bump(at + 8)
            return


# The timing piece's address (a process's own) and the measured handoff, for compiled code.
_meet_cell, _meet_address, _ = slot("rvm_handoff_piece")
_meet_cell.value = _meet.address
_handoff_cell, _handoff_load, _handoff_store = slot("rvm_handoff_ticks")


@nb.njit(**_OPTS)
def _round_trips():  # type: ignore[no-untyped-def]
    """The least round trip of `TRIALS` meeting jobs in ticks, after one that wakes a helper
    (waiting up to `WAKE_TICKS`); 0 if none woke or pieces waited in vain `GIVE_UP` times
    (helpers preempted); -1 if another job took the pool meanwhile."""
    state = np.zeros(3, np.int64)
    fn, best, vain = _meet_address(), 0, 0
    for trial in range(TRIALS + 1):
        if workpool.busy():
            return -1
        state[0], state[1], state[2] = 0, 0, WAKE_TICKS if trial == 0 else WAIT_TICKS
        t0 = cycles()
        workpool.run(fn, 2, state.ctypes.data)
        took = cycles() - t0
        if state[1] != 0:  # a piece waited in vain
            vain += 1
            if trial == 0 or vain == GIVE_UP:
                return 0
        elif trial > 0 and took > 0 and (best == 0 or took < best):
            best = took
    return best


@nb.njit(**_OPTS)
def handoff_ticks():  # type: ignore[no-untyped-def]
    """An empty two-piece job's round trip on the pool, in `cycles` ticks (measured on the
    first call that finds a helper and a free pool); 0 while unknown."""
    known = _handoff_load()
    if known != 0:
        return max(known, 0)
    if workpool.threads() < 2 or workpool.busy():
        return 0
    best = _round_trips()
    if best < 0:  # the pool was taken: measure on a later call
        return 0
    _handoff_store(best if best > 0 else -1)  # -1: no helper came, do not wait again
    return best


@nb.njit(**_OPTS)
def settled():  # type: ignore[no-untyped-def]
    """Whether `handoff_ticks` is settled: measured, or found not measurable (no helper
    came); not while only the pool was busy or one thread ran."""
    return _handoff_load() != 0


def reset() -> None:
    """Forget the measured handoff (measured again on next use: after the pool changed)."""
    _handoff_cell.value = 0
