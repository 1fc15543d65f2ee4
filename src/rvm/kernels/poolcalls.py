"""The thread pool's calls from compiled code (`rvm.kernels.workpool`'s, which re-exports
them): intrinsics that call the pool's C functions by symbol, so cached code that uses them is
resolved when linked. `run(fn, n, data)` runs a job (a caller holding the GIL lets go of it
for the job: `gil_released`), `threads()` is 1 + the helpers, `busy()` whether a job runs
now, and `call_begin()` / `call_end(word)` do what `workpool.call` does around a VM call from
Python, in the compiled function called (the native exec mode's entries). The symbols are
this module's names (`RUN`, `THREADS`, `BUSY`, `WAKE`); `workpool` registers its functions
under them."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels import atomics
from rvm.kernels import poolstate as ps

__all__ = [
    "BUSY",
    "RUN",
    "THREADS",
    "WAKE",
    "busy",
    "call_begin",
    "call_end",
    "gil_released",
    "run",
    "threads",
]

RUN = "rvm_pool_run"
"""The symbol of the pool's C function ``run(fn, n, data)`` (int64 each)."""
THREADS, BUSY, WAKE = "rvm_pool_threads", "rvm_pool_busy", "rvm_pool_wake"
"""The symbols of the pool's ``threads()``, ``busy()`` and ``wake()``."""


# The Python thread state that holds the GIL: from 3.12 the calling thread's own (a thread-
# local, null while it does not hold the GIL); before, the interpreter's global one, whichever
# thread holds it, so there the caller holds the GIL only if that state is its own
# (``PyGILState_GetThisThreadState``). Not ``PyGILState_Check``, which says 1 in a process that
# made a subinterpreter.
_THREAD_STATE = (
    "PyThreadState_GetUnchecked" if sys.version_info >= (3, 13) else "_PyThreadState_UncheckedGet"
)
_STATE_IS_LOCAL = sys.version_info >= (3, 12)


@contextlib.contextmanager
def gil_released(builder: ir.IRBuilder) -> Iterator[None]:
    """Code emitted inside runs without the GIL when the calling thread holds it (a caller
    compiled without ``nogil``: a user's own ``@njit``), as ctypes runs a foreign call: what a
    job's caller emits around `RUN` (`run`, `rvm.kernels.parfor.runner`), since a helper may
    need the GIL to finish its piece (`rvm.kernels.parfor` resolves a task the piece calls, a
    callback into Python, on a process's first runs) while the caller waits for its pieces.
    The library's own callers are ``nogil``: for them, a read or two of the interpreter's
    thread state a job. Threads running kernels at once (VMs in threads) must each see only
    their own state: before 3.12 the state read is the GIL holder's, whichever thread that is
    (`_THREAD_STATE`)."""
    i8p = ir.IntType(8).as_pointer()

    def c(name: str, ret: ir.Type, *args: ir.Type) -> ir.Function:
        return cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, args), name)

    thread_state = builder.call(c(_THREAD_STATE, i8p), [])
    held = builder.icmp_unsigned("!=", thread_state, ir.Constant(i8p, None))
    if not _STATE_IS_LOCAL:  # the GIL's holder: this thread only if it is this thread's state
        own = builder.call(c("PyGILState_GetThisThreadState", i8p), [])
        held = builder.and_(held, builder.icmp_unsigned("==", thread_state, own))
    with builder.if_then(held, likely=False):
        builder.call(c("PyEval_SaveThread", i8p), [])  # returns ``thread_state``
    yield
    with builder.if_then(held, likely=False):
        builder.call(c("PyEval_RestoreThread", ir.VoidType(), i8p), [thread_state])


@intrinsic
def run(typingctx, fn, n, data):  # type: ignore[no-untyped-def]
    """Runs piece function ``fn`` (an int64 address) on pieces 0 .. n - 1 with ``data`` (an
    int64 address), on the pool and the calling thread; returns when all are done."""
    for a in (fn, n, data):
        if not isinstance(a, nt.Integer):
            return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        values = [context.cast(builder, v, t, nt.int64) for v, t in zip(args, signature.args)]
        with gil_released(builder):
            atomics.c_call(builder, RUN, ir.VoidType(), values)
        return context.get_dummy_value()

    return nt.void(fn, n, data), codegen


@intrinsic
def threads(typingctx):  # type: ignore[no-untyped-def]
    """How many threads a job can run on: the caller and the pool's helpers."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return atomics.c_call(builder, THREADS, ir.IntType(64), [])

    return nt.int64(), codegen


@intrinsic
def busy(typingctx):  # type: ignore[no-untyped-def]
    """Whether a job runs on the pool now (a job started now would run in its caller)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        value = atomics.c_call(builder, BUSY, ir.IntType(64), [])
        return builder.icmp_signed("!=", value, ir.IntType(64)(0))

    return nt.boolean(), codegen


def _ran_flag(builder: ir.IRBuilder) -> ir.GlobalVariable:
    """The calling function's own flag for `call_begin` / `call_end`: whether its last call
    that found helpers asleep ran a job (1 at first), a global of its module (so of its
    object code, each process's own)."""
    i64 = ir.IntType(64)
    name = f"rvm_pool_ran.{builder.function.name}"
    flag = builder.module.globals.get(name)
    if flag is None:
        flag = ir.GlobalVariable(builder.module, i64, name)
        flag.linkage = "internal"
        flag.initializer = i64(1)
    return flag


@intrinsic
def call_begin(typingctx):  # type: ignore[no-untyped-def]
    """What `rvm.kernels.workpool.call` does as a call from Python begins, in the compiled
    function called (the native exec mode's entries): when helpers sleep, wakes them if this
    function's last such call ran a job (`_ran_flag`; at first too), and returns the pool's word
    for `call_end`; -1 when none sleeps (nothing to record). Its calling function must end in
    `call_end`."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64 = ir.IntType(64)
        asleep = builder.icmp_signed(">", builder.load_atomic(ps.field(builder, i64(ps.SLEEPING)),
                                                              "monotonic", 8), i64(0))  # fmt: skip
        word = builder.load_atomic(ps.field(builder, i64(ps.WORD)), "monotonic", 8)
        ran = builder.icmp_signed("!=", builder.load(_ran_flag(builder)), i64(0))
        with builder.if_then(builder.and_(asleep, ran), likely=False):
            atomics.c_call(builder, WAKE, ir.VoidType(), [])
        return builder.select(asleep, word, i64(-1))

    return nt.int64(), codegen


@intrinsic
def call_end(typingctx, word):  # type: ignore[no-untyped-def]
    """What `rvm.kernels.workpool.call` does as a call from Python ends, in the compiled
    function called: with the ``word`` `call_begin` returned (not -1), records whether the
    call ran a job."""
    if not isinstance(word, nt.Integer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64 = ir.IntType(64)
        before = context.cast(builder, args[0], signature.args[0], nt.int64)
        with builder.if_then(builder.icmp_signed("!=", before, i64(-1))):
            now = builder.load_atomic(ps.field(builder, i64(ps.WORD)), "monotonic", 8)
            ran = builder.icmp_signed("!=", now, before)
            builder.store(builder.zext(ran, i64), _ran_flag(builder))
        return context.get_dummy_value()

    return nt.void(word), codegen
