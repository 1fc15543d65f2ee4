"""The state of rvm's thread pool (`rvm.kernels.workpool`) and the native operations on it.

The state is an int64 array registered with llvmlite as ``rvm_pool_state``, one cache line per
field (`WORD`, `FN`, `N`...); compiled code reaches it by symbol through atomics
(`rvm.kernels.atomics`): `load`, `store`, `add` and `cas` on a field. Sleeping and waking are
the C library's pthread mutex and condition variables, called by symbol (`lock`, `wait`,
`broadcast`...); spinning, the CPU's hint (`pause`); a piece's call, `call_piece`; the clocks,
`thread_ns` and `now_ns`. A forked child initializes its own mutex and conditions
(`init_sync`).

What the pool measures when asked (`measure`: each thread's CPU time inside pieces, a log of
jobs and of pieces) is kept here too, in arrays of their own (`stat_add`, `log_put`,
`piece_put` write them from the pool's code; `piece_times`, `job_log`, `piece_log`,
`job_edges`, `join_time` read them).
"""

from __future__ import annotations

import ctypes
import platform
import time

from llvmlite import binding as llvm
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels import atomics

__all__ = [
    "INDEX_MASK",
    "LINE",
    "MAX_PIECES",
    "SEQ_MASK",
    "STAT_THREADS",
    "add",
    "broadcast",
    "call_piece",
    "cas",
    "field",
    "init_sync",
    "job_edges",
    "job_log",
    "join_time",
    "load",
    "lock",
    "measure",
    "now_ns",
    "pause",
    "piece_log",
    "piece_times",
    "signal_done",
    "state",
    "store",
    "thread_ns",
    "unlock",
    "wait",
    "wait_done",
    "yield_core",
]

# Fields of the state, one cache line (8 int64) apart.
(WORD, FN, DATA, N, DONE, BUSY, WANTED, SLEEPING, WAITING, SPIN, MUTEX, COND, DONE_COND) = range(13)
(NUDGE, WAKES, MEASURE, NAPS, JOIN_NAPS, JOIN_NS, FIRST_OUT, LOGGED, PIECES_LOGGED) = range(13, 22)
YIELDS = 22
_FIELDS = 23
LINE = 8
_STATE = "rvm_pool_state"
SEQ_MASK = (1 << 31) - 1  # the sequence number's bits (above bit 32 of the word)
INDEX_MASK = (1 << 32) - 1  # the next piece's bits
MAX_PIECES = 1 << 31
"""A job has fewer pieces than this (the claim counter's range)."""

state = (ctypes.c_int64 * (_FIELDS * LINE))()
_SYNC_BYTES = 256  # room for a pthread mutex or condition variable on every platform
_sync = ctypes.create_string_buffer(3 * _SYNC_BYTES)  # the mutex, then two conditions
libc = ctypes.CDLL(None)
STAT_THREADS = 64
"""Threads whose pieces `measure` times: the callers (together) and the first helpers."""
_stats = (ctypes.c_int64 * (STAT_THREADS * LINE))()  # a thread's line: busy ns, pieces
_STATS = "rvm_pool_stats"
LOG_JOBS = 1 << 14
"""Jobs `job_log` records while `measure` is on (the first ones: later jobs are counted only)."""
# A job's record: its piece function, pieces, the caller's pieces, then the monotonic clock
# (ns) as it was published, as the first thread found no piece left, as the caller did, and
# as its last piece was done.
(_LOG_FN, _LOG_N, _LOG_RAN, _LOG_START, _LOG_FIRST_OUT, _LOG_OUT, _LOG_DONE) = range(7)
LOG_WIDTH = 8
_log = (ctypes.c_int64 * (LOG_JOBS * LOG_WIDTH))()
_LOG = "rvm_pool_log"
LOG_PIECES = 1 << 16
"""Pieces `piece_log` records while `measure` is on (the first ones)."""
PIECE_WIDTH = 4  # a piece's record: its function, its index, its thread's line, its CPU ns
_piece_log = (ctypes.c_int64 * (LOG_PIECES * PIECE_WIDTH))()
_PIECE_LOG = "rvm_pool_piece_log"
_THREAD_CLOCK = getattr(time, "CLOCK_THREAD_CPUTIME_ID", 3)  # Linux's 3 where unnamed
_MONOTONIC_CLOCK = getattr(time, "CLOCK_MONOTONIC", 1)
_LIBC = {
    "rvm_clock_gettime": "clock_gettime",
    "rvm_pthread_mutex_lock": "pthread_mutex_lock",
    "rvm_pthread_mutex_unlock": "pthread_mutex_unlock",
    "rvm_pthread_cond_wait": "pthread_cond_wait",
    "rvm_pthread_cond_broadcast": "pthread_cond_broadcast",
    "rvm_sched_yield": "sched_yield",
}


def init_sync() -> None:
    """(Re)initializes the mutex and condition variable (at start and in a forked child,
    where the parent's may have been held by a thread that does not exist there)."""
    mutex, cond, done = (ctypes.addressof(_sync) + i * _SYNC_BYTES for i in range(3))
    if libc.pthread_mutex_init(ctypes.c_void_p(mutex), None) != 0:
        raise OSError("rvm's thread pool: pthread_mutex_init failed")
    for at in (cond, done):
        if libc.pthread_cond_init(ctypes.c_void_p(at), None) != 0:
            raise OSError("rvm's thread pool: pthread_cond_init failed")
    state[MUTEX * LINE], state[COND * LINE], state[DONE_COND * LINE] = mutex, cond, done


init_sync()
llvm.add_symbol(_STATE, ctypes.addressof(state))
llvm.add_symbol(_STATS, ctypes.addressof(_stats))
llvm.add_symbol(_LOG, ctypes.addressof(_log))
llvm.add_symbol(_PIECE_LOG, ctypes.addressof(_piece_log))
for _symbol, _name in _LIBC.items():
    llvm.add_symbol(_symbol, ctypes.cast(getattr(libc, _name), ctypes.c_void_p).value)


# -- the atomics and calls the pool is made of ----------------------------------------------


_global = atomics.array


def field(builder: ir.IRBuilder, index: ir.Value) -> ir.Value:
    """A pointer to field ``index`` of the state."""
    return atomics.field(builder, _STATE, _FIELDS, LINE, index)


load, store, add, cas = atomics.fields(_STATE, _FIELDS, LINE)
"""The state's fields, a cache line apart: ``load(i)``, ``store(i, value)``, ``add(i,
value)`` (the value before), ``cas(i, old, new)`` (whether it did), each sequentially
consistent (`rvm.kernels.atomics`)."""


# The CPU's spin-wait hint as an LLVM intrinsic (name, arguments); none elsewhere.
_PAUSE = {
    "x86_64": ("llvm.x86.sse2.pause", ()),
    "amd64": ("llvm.x86.sse2.pause", ()),
    "aarch64": ("llvm.aarch64.hint", (1,)),  # YIELD
    "arm64": ("llvm.aarch64.hint", (1,)),
}.get(platform.machine().lower())


@intrinsic
def pause(typingctx):  # type: ignore[no-untyped-def]
    """The CPU's spin-wait hint (nothing where it has none)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        if _PAUSE is not None:
            name, values = _PAUSE
            atomics.c_call(builder, name, ir.VoidType(), [ir.IntType(32)(v) for v in values])
        return context.get_dummy_value()

    return nt.void(), codegen


@intrinsic
def yield_core(typingctx):  # type: ignore[no-untyped-def]
    """Gives the core to another thread that is ready to run (``sched_yield``)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        atomics.c_call(builder, "rvm_sched_yield", ir.IntType(32), [])
        return context.get_dummy_value()

    return nt.void(), codegen


def _sync_call(name: str, fields: tuple[int, ...]):  # type: ignore[no-untyped-def]
    """The intrinsic calling C function ``name`` on the addresses in ``fields``."""

    @intrinsic
    def call(typingctx):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            i64, i8p = ir.IntType(64), ir.IntType(8).as_pointer()
            ptrs = [
                builder.inttoptr(builder.load_atomic(field(builder, i64(f)), "monotonic", 8), i8p)
                for f in fields
            ]
            atomics.c_call(builder, name, ir.IntType(32), ptrs)
            return context.get_dummy_value()

        return nt.void(), codegen

    return call


lock = _sync_call("rvm_pthread_mutex_lock", (MUTEX,))
unlock = _sync_call("rvm_pthread_mutex_unlock", (MUTEX,))
wait = _sync_call("rvm_pthread_cond_wait", (COND, MUTEX))
broadcast = _sync_call("rvm_pthread_cond_broadcast", (COND,))
wait_done = _sync_call("rvm_pthread_cond_wait", (DONE_COND, MUTEX))
signal_done = _sync_call("rvm_pthread_cond_broadcast", (DONE_COND,))


@intrinsic
def call_piece(typingctx, fn, i, data):  # type: ignore[no-untyped-def]
    """Calls piece function ``fn`` (an address) on piece ``i`` and ``data``."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64, i8p = ir.IntType(64), ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i64, i8p, i8p])
        target = builder.inttoptr(args[0], fnty.as_pointer())
        builder.call(target, [args[1], ir.Constant(i8p, None), builder.inttoptr(args[2], i8p)])
        return context.get_dummy_value()

    return nt.void(nt.int64, nt.int64, nt.int64), codegen


def _clock(clock: int, doc: str):  # type: ignore[no-untyped-def]
    """The intrinsic reading clock ``clock`` (``clock_gettime``) in nanoseconds."""

    @intrinsic
    def read(typingctx):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            i64, i32 = ir.IntType(64), ir.IntType(32)
            spec = cgutils.alloca_once(builder, ir.ArrayType(i64, 2))
            at = builder.bitcast(spec, ir.IntType(8).as_pointer())
            atomics.c_call(builder, "rvm_clock_gettime", i32, [i32(clock), at])
            sec = builder.load(builder.gep(spec, [i32(0), i32(0)]))
            nsec = builder.load(builder.gep(spec, [i32(0), i32(1)]))
            return builder.add(builder.mul(sec, i64(1_000_000_000)), nsec)

        return nt.int64(), codegen

    read.__doc__ = doc
    return read


thread_ns = _clock(_THREAD_CLOCK, "The calling thread's CPU time in nanoseconds.")
now_ns = _clock(_MONOTONIC_CLOCK, "The monotonic clock in nanoseconds (vDSO: no system call).")


@intrinsic
def stat_add(typingctx, line, ns):  # type: ignore[no-untyped-def]
    """Adds ``ns`` and one piece to statistics line ``line`` (`measure`)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64 = ir.IntType(64)
        stats = _global(builder, _STATS, STAT_THREADS * LINE)
        at = builder.mul(args[0], i64(LINE))
        for offset, value in ((0, args[1]), (1, i64(1))):
            ptr = builder.gep(stats, [ir.IntType(32)(0), builder.add(at, i64(offset))])
            builder.atomic_rmw("add", ptr, value, "monotonic")
        return context.get_dummy_value()

    return nt.void(nt.int64, nt.int64), codegen


def _putter(symbol: str, size: int, doc: str):  # type: ignore[no-untyped-def]
    """The intrinsic ``put(at, value)`` storing ``value`` at element ``at`` of the int64
    array registered as ``symbol`` (``size`` elements)."""

    @intrinsic
    def put(typingctx, at, value):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            array = _global(builder, symbol, size)
            builder.store(args[1], builder.gep(array, [ir.IntType(32)(0), args[0]]))
            return context.get_dummy_value()

        return nt.void(nt.int64, nt.int64), codegen

    put.__doc__ = doc
    return put


log_put = _putter(_LOG, LOG_JOBS * LOG_WIDTH, "Stores an element of the job log (`job_log`).")
piece_put = _putter(_PIECE_LOG, LOG_PIECES * PIECE_WIDTH, "... of the piece log (`piece_log`).")


# -- what `measure` records, for Python -------------------------------------------------------


def measure(on: bool) -> None:
    """Time every piece the pool runs (``on``) or not (off, the default), the statistics
    zeroed: `piece_times` reads them. For finding a job's critical path on a loaded machine,
    where wall time says little: each thread's CPU time inside pieces, and its pieces."""
    state[MEASURE * LINE] = 0
    ctypes.memset(_stats, 0, ctypes.sizeof(_stats))
    state[JOIN_NS * LINE] = 0
    state[LOGGED * LINE] = 0
    state[PIECES_LOGGED * LINE] = 0
    state[MEASURE * LINE] = int(bool(on))


def join_time() -> int:
    """Since `measure` was turned on: the nanoseconds (wall) the callers of jobs waited, their
    own pieces done, for helpers to finish theirs (spinning or asleep): the jobs' imbalance
    and late helpers, as the caller saw them."""
    return int(state[JOIN_NS * LINE])


def job_log() -> list[tuple[int, int, int, int, int, int]]:
    """Since `measure` was turned on, the jobs that went to the helpers (the first `LOG_JOBS`),
    each (piece function's address, pieces, the caller's pieces, the tail, the caller's
    join, the job's time): the tail is the wall nanoseconds from the first thread finding no
    piece left to claim to the last piece's end (a thread idle, caller or helper: the job's
    imbalance), the join the caller's share of it (its own pieces done, waiting for a
    helper's), the time from publishing to the last piece's end."""
    count = min(LOG_JOBS, int(state[LOGGED * LINE]))
    out = []
    for j in range(count):
        r = _log[j * LOG_WIDTH : j * LOG_WIDTH + _LOG_DONE + 1]
        first = r[_LOG_FIRST_OUT] or r[_LOG_OUT]
        tail = r[_LOG_DONE] - max(r[_LOG_START], min(first, r[_LOG_OUT]))
        join = r[_LOG_DONE] - r[_LOG_OUT]
        out.append((r[_LOG_FN], r[_LOG_N], r[_LOG_RAN], tail, join, r[_LOG_DONE] - r[_LOG_START]))
    return out


def job_edges() -> list[tuple[int, int]]:
    """Since `measure` was turned on, the logged jobs' (the first `LOG_JOBS`) publishing and
    last piece's end, monotonic-clock nanoseconds (`time.perf_counter_ns`' clock): where they
    fall between a kernel's own edges."""
    count = min(LOG_JOBS, int(state[LOGGED * LINE]))
    w = LOG_WIDTH
    return [(int(_log[j * w + _LOG_START]), int(_log[j * w + _LOG_DONE])) for j in range(count)]


def piece_log() -> list[tuple[int, int, int, int]]:
    """Since `measure` was turned on, the pieces run (the first `LOG_PIECES`), in the order
    they ended: (piece function's address, its index, its thread's line as `piece_times`
    numbers them, its CPU nanoseconds). At one thread, a job's pieces in claim order: what
    a cut's tail at more threads can be computed from on a machine too loaded to time it."""
    count = min(LOG_PIECES, int(state[PIECES_LOGGED * LINE]))
    w = PIECE_WIDTH
    return [tuple(_piece_log[j * w : (j + 1) * w]) for j in range(count)]  # type: ignore[misc]


def piece_times() -> list[tuple[int, int]]:
    """Since `measure` was turned on: per thread, (CPU nanoseconds inside pieces, pieces), the
    callers' (any thread that started a job or ran one's pieces itself) first, then each
    helper's (up to `STAT_THREADS` in all)."""
    count = min(STAT_THREADS, 1 + int(state[WANTED * LINE]))
    return [(int(_stats[t * LINE]), int(_stats[t * LINE + 1])) for t in range(count)]
