"""rvm's own thread pool: jobs of N native pieces of work, claimed by whoever is free.

A job is a piece function ``fn(i, null, data)`` (C ABI: int64, a pointer, a pointer; a
`numba.cfunc`, nogil) run once for each i in ``0 .. n - 1``. `run(fn, n, data)` publishes the
job and the calling thread claims pieces itself, through one atomic counter, alongside the
pool's helper threads; it returns when every piece has finished. So the caller always works
and never waits on a busy pool (ONNX Runtime's thread pool works the same way: the thread
that starts a parallel section runs its share of it):

- one job at a time: while a job runs, a `run` from another thread (another VM) or from
  inside a piece (nesting) runs all its pieces in its own thread, at once, with no wait and
  no extra thread;
- a helper that finishes spins about `SPIN_US` for the next job (a model's next GEMM is
  usually that close: between them run the VM and single-threaded kernels), then sleeps on a
  condition variable; a job wakes sleepers (200 us rather than 10 made shufflenet and
  squeezenet 15-20% faster, resnet50 7%: a wake-up costs tens of microseconds here);
- a VM call wakes sleeping helpers as it begins (`call`), so after a quiet spell their
  wake-up overlaps the call's first steps rather than delaying its first job, but only while
  its function's last call that found them asleep ran a job (a call that runs none, a small
  MLP, would pay a system call and a core's spin for nothing); `wakes()` counts the jobs that
  still found helpers asleep;
- a caller left waiting for pieces that helpers still run spins as long and as long again as
  one of its own pieces took (a helper's piece is at most that far from its end: at most a
  piece's time more of spin, 1/n of a job of n pieces), then sleeps until the last piece
  wakes it (on a busy machine its core may be the one a late helper needs); a sleep is
  paid by a wake-up on the job's critical path (`naps` counts them, and helpers' naps);
- no helper at all (one thread, or a forked child before its pool restarts) is a plain loop
  in the caller;
- a piece knows which thread runs it (`rvm.kernels.pool_thread.index`: the caller 0, helper
  i i + 1), the same at every job: what gives a thread the same work at every call is keyed
  by it (`rvm.kernels.parfor.affine_unit`).

The pool is written in Numba-compiled code with no C of its own: the state is an int64 array
registered with llvmlite as ``rvm_pool_state`` (one cache line per field), claims are LLVM
atomics, sleeping is the C library's pthread mutex and condition variable. The published job
is guarded like a seqlock: a word holds the job's sequence number (odd while it is being
published) and its next unclaimed piece, and a piece is claimed by a compare-and-swap of the
whole word, so a thread that read a finished job's fields never runs one of its pieces.

Helpers are Python threads that enter the native helper loop through ctypes (the GIL released)
and leave it only when `set_helpers` asks fewer of them. A forked child resets the pool (its
parent's helpers do not exist there) and runs jobs in the caller until `set_helpers` restarts
helpers (`rvm.kernels.threads` does at the next VM).

For compiled callers: `run(fn, n, data)`, `threads()` (1 + helpers) and `busy()` are
intrinsics calling the pool's C functions by symbol, so cached code that uses them is
resolved when linked (a caller holding the GIL lets go of it for a job: `gil_released`);
`call_begin()` and `call_end(word)` do what `call` does around a VM call from Python, in the
compiled function called (the native exec mode's entries); `add_at(address, value)` and
`wait_until(address, value)` a counter in a job's data that a piece waits on for pieces of
the same job before it (one job where two would pay a join between them). For Python:
`for_each(n, fn)` runs a Python callable per piece (exceptions propagate), `helpers()` and
`set_helpers(n)`; `measure(on)`, `piece_times()`, `join_time()`, `job_log()`, `job_edges()` and
`piece_log()`: each thread's CPU time inside pieces and its pieces, the callers' wait at
jobs' ends, each job's tail and each piece's CPU time (off by default: a load and a branch a
piece and a job), to find a job's critical path where wall time says little (a loaded
machine); `jobs()`, `wakes()` and `naps()`: the jobs, sleeps and wake-ups a workload pays.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Iterator

from llvmlite import binding as llvm
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels import atomics, numba_cache, pool_thread
from rvm.kernels.jitting import jit

numba_cache.install()  # the functions compiled at import below load sealed object code only

SPIN_US = 200
"""How long a helper spins for the next job before it sleeps, in microseconds."""

# Fields of the state, one cache line (8 int64) apart.
(WORD, FN, DATA, N, DONE, BUSY, WANTED, SLEEPING, WAITING, SPIN, MUTEX, COND, DONE_COND) = range(13)
(NUDGE, WAKES, MEASURE, NAPS, JOIN_NAPS, JOIN_NS, FIRST_OUT, LOGGED, PIECES_LOGGED) = range(13, 22)
_FIELDS = 22
_LINE = 8
_STATE = "rvm_pool_state"
_SEQ_MASK = (1 << 31) - 1  # the sequence number's bits (above bit 32 of the word)
_INDEX_MASK = (1 << 32) - 1  # the next piece's bits
MAX_PIECES = 1 << 31
"""A job has fewer pieces than this (the claim counter's range)."""

_state = (ctypes.c_int64 * (_FIELDS * _LINE))()
_SYNC_BYTES = 256  # room for a pthread mutex or condition variable on every platform
_sync = ctypes.create_string_buffer(3 * _SYNC_BYTES)  # the mutex, then two conditions
_libc = ctypes.CDLL(None)
STAT_THREADS = 64
"""Threads whose pieces `measure` times: the callers (together) and the first helpers."""
_stats = (ctypes.c_int64 * (STAT_THREADS * _LINE))()  # a thread's line: busy ns, pieces
_STATS = "rvm_pool_stats"
LOG_JOBS = 1 << 14
"""Jobs `job_log` records while `measure` is on (the first ones: later jobs are counted only)."""
# A job's record: its piece function, pieces, the caller's pieces, then the monotonic clock
# (ns) as it was published, as the first thread found no piece left, as the caller did, and
# as its last piece was done.
(_LOG_FN, _LOG_N, _LOG_RAN, _LOG_START, _LOG_FIRST_OUT, _LOG_OUT, _LOG_DONE) = range(7)
_LOG_WIDTH = 8
_log = (ctypes.c_int64 * (LOG_JOBS * _LOG_WIDTH))()
_LOG = "rvm_pool_log"
LOG_PIECES = 1 << 16
"""Pieces `piece_log` records while `measure` is on (the first ones)."""
_PIECE_WIDTH = 4  # a piece's record: its function, its index, its thread's line, its CPU ns
_piece_log = (ctypes.c_int64 * (LOG_PIECES * _PIECE_WIDTH))()
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


def _init_sync() -> None:
    """(Re)initializes the mutex and condition variable (at start and in a forked child,
    where the parent's may have been held by a thread that does not exist there)."""
    mutex, cond, done = (ctypes.addressof(_sync) + i * _SYNC_BYTES for i in range(3))
    if _libc.pthread_mutex_init(ctypes.c_void_p(mutex), None) != 0:
        raise OSError("rvm's thread pool: pthread_mutex_init failed")
    for at in (cond, done):
        if _libc.pthread_cond_init(ctypes.c_void_p(at), None) != 0:
            raise OSError("rvm's thread pool: pthread_cond_init failed")
    _state[MUTEX * _LINE], _state[COND * _LINE], _state[DONE_COND * _LINE] = mutex, cond, done


_init_sync()
llvm.add_symbol(_STATE, ctypes.addressof(_state))
llvm.add_symbol(_STATS, ctypes.addressof(_stats))
llvm.add_symbol(_LOG, ctypes.addressof(_log))
llvm.add_symbol(_PIECE_LOG, ctypes.addressof(_piece_log))
for _symbol, _name in _LIBC.items():
    llvm.add_symbol(_symbol, ctypes.cast(getattr(_libc, _name), ctypes.c_void_p).value)


# -- the atomics and calls the pool is made of ----------------------------------------------


_global = atomics.array


def _field(builder: ir.IRBuilder, index: ir.Value) -> ir.Value:
    """A pointer to field ``index`` of the state."""
    return atomics.field(builder, _STATE, _FIELDS, _LINE, index)


_load, _store, _add, _cas = atomics.fields(_STATE, _FIELDS, _LINE)
"""The state's fields, a cache line apart: ``_load(i)``, ``_store(i, value)``, ``_add(i,
value)`` (the value before), ``_cas(i, old, new)`` (whether it did), each sequentially
consistent (`rvm.kernels.atomics`)."""


# The CPU's spin-wait hint as an LLVM intrinsic (name, arguments); none elsewhere.
_PAUSE = {
    "x86_64": ("llvm.x86.sse2.pause", ()),
    "amd64": ("llvm.x86.sse2.pause", ()),
    "aarch64": ("llvm.aarch64.hint", (1,)),  # YIELD
    "arm64": ("llvm.aarch64.hint", (1,)),
}.get(platform.machine().lower())


@intrinsic
def _pause(typingctx):  # type: ignore[no-untyped-def]
    """The CPU's spin-wait hint (nothing where it has none)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        if _PAUSE is not None:
            name, values = _PAUSE
            atomics.c_call(builder, name, ir.VoidType(), [ir.IntType(32)(v) for v in values])
        return context.get_dummy_value()

    return nt.void(), codegen


@intrinsic
def _yield(typingctx):  # type: ignore[no-untyped-def]
    """Gives the core to another thread that is ready to run (``sched_yield``)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        atomics.c_call(builder, "rvm_sched_yield", ir.IntType(32), [])
        return context.get_dummy_value()

    return nt.void(), codegen


def _at(builder: ir.IRBuilder, address: ir.Value) -> ir.Value:
    return builder.inttoptr(address, ir.IntType(64).as_pointer())


@intrinsic
def add_at(typingctx, address, value):  # type: ignore[no-untyped-def]
    """Adds ``value`` to the int64 at ``address`` atomically (a job's counter its pieces
    share: `wait_until`); returns its value before."""
    if not (isinstance(address, nt.Integer) and isinstance(value, nt.Integer)):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        at = context.cast(builder, args[0], signature.args[0], nt.int64)
        v = context.cast(builder, args[1], signature.args[1], nt.int64)
        return builder.atomic_rmw("add", _at(builder, at), v, "seq_cst")

    return nt.int64(address, value), codegen


@intrinsic
def _load_at(typingctx, address):  # type: ignore[no-untyped-def]
    """The int64 at ``address``, loaded atomically."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        at = context.cast(builder, args[0], signature.args[0], nt.int64)
        return builder.load_atomic(_at(builder, at), "seq_cst", 8)

    return nt.int64(address), codegen


def _sync_call(name: str, fields: tuple[int, ...]):  # type: ignore[no-untyped-def]
    """The intrinsic calling C function ``name`` on the addresses in ``fields``."""

    @intrinsic
    def call(typingctx):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            i64, i8p = ir.IntType(64), ir.IntType(8).as_pointer()
            ptrs = [
                builder.inttoptr(builder.load_atomic(_field(builder, i64(f)), "monotonic", 8), i8p)
                for f in fields
            ]
            atomics.c_call(builder, name, ir.IntType(32), ptrs)
            return context.get_dummy_value()

        return nt.void(), codegen

    return call


_lock = _sync_call("rvm_pthread_mutex_lock", (MUTEX,))
_unlock = _sync_call("rvm_pthread_mutex_unlock", (MUTEX,))
_wait = _sync_call("rvm_pthread_cond_wait", (COND, MUTEX))
_broadcast = _sync_call("rvm_pthread_cond_broadcast", (COND,))
_wait_done = _sync_call("rvm_pthread_cond_wait", (DONE_COND, MUTEX))
_signal_done = _sync_call("rvm_pthread_cond_broadcast", (DONE_COND,))


@intrinsic
def _piece(typingctx, fn, i, data):  # type: ignore[no-untyped-def]
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


_thread_ns = _clock(_THREAD_CLOCK, "The calling thread's CPU time in nanoseconds.")
_now_ns = _clock(_MONOTONIC_CLOCK, "The monotonic clock in nanoseconds (vDSO: no system call).")


@intrinsic
def _stat_add(typingctx, line, ns):  # type: ignore[no-untyped-def]
    """Adds ``ns`` and one piece to statistics line ``line`` (`measure`)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64 = ir.IntType(64)
        stats = _global(builder, _STATS, STAT_THREADS * _LINE)
        at = builder.mul(args[0], i64(_LINE))
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


_log_put = _putter(_LOG, LOG_JOBS * _LOG_WIDTH, "Stores an element of the job log (`job_log`).")
_piece_put = _putter(_PIECE_LOG, LOG_PIECES * _PIECE_WIDTH, "... of the piece log (`piece_log`).")


# -- the pool ---------------------------------------------------------------------------------

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@jit(**_OPTS)  # one compile for every caller's ``who`` (no literal)
def _timed_piece(who, fn, i, data):  # type: ignore[no-untyped-def]
    """Piece ``i``; its thread CPU time added to line ``who`` while `measure` is on."""
    if _load(MEASURE) == 0 or who >= STAT_THREADS:
        _piece(fn, i, data)
        return
    start = _thread_ns()
    _piece(fn, i, data)
    ns = _thread_ns() - start
    _stat_add(who, ns)
    at = _add(PIECES_LOGGED, 1)
    if at < LOG_PIECES:
        record = (fn, i, who, ns)
        for k in range(_PIECE_WIDTH):
            _piece_put(at * _PIECE_WIDTH + k, record[k])


@jit(**_OPTS)
def _claim(who):  # type: ignore[no-untyped-def]
    """Runs pieces of the published job until none is left unclaimed; returns the job's
    sequence number and how many pieces this thread ran. ``who``: the thread's line in the
    statistics (`measure`)."""
    ran = 0
    while True:
        word = _load(WORD)
        seq = word >> 32
        if seq & 1:  # being published: ready in a moment
            _pause()
            continue
        i = word & _INDEX_MASK
        fn, n, data = _load(FN), _load(N), _load(DATA)
        if i >= n:
            if _load(MEASURE) != 0 and _load(WORD) == word:  # the job's first thread out
                _cas(FIRST_OUT, 0, _now_ns())
            return seq, ran
        # The word still holding (seq, i) proves fn, n and data were seq's (fields change
        # only after the sequence number does).
        if _cas(WORD, word, word + 1):
            _timed_piece(who, fn, i, data)
            ran += 1
            if _add(DONE, 1) == n - 1 and _load(WAITING) != 0:  # the caller sleeps
                _lock()
                _signal_done()
                _unlock()


@numba_cache.cfunc(nt.void(nt.int64, nt.int64, nt.int64), **_OPTS)
def _run(fn, n, data):  # type: ignore[no-untyped-def]
    """Runs the job ``fn`` on pieces 0 .. n - 1 (see the module docstring)."""
    if n <= 0:
        return
    if n == 1 or n >= MAX_PIECES or _load(WANTED) == 0 or not _cas(BUSY, 0, 1):
        for i in range(n):
            _timed_piece(0, fn, i, data)
        return
    seq = ((_load(WORD) >> 32) + 1) & _SEQ_MASK  # odd: publishing
    _store(WORD, seq << 32)
    _store(FN, fn)
    _store(DATA, data)
    _store(N, n)
    _store(DONE, 0)
    _store(FIRST_OUT, 0)
    _store(WORD, ((seq + 1) & _SEQ_MASK) << 32)  # even: open, from piece 0
    published = _now_ns() if _load(MEASURE) != 0 else 0
    if _load(SLEEPING) > 0:
        _add(WAKES, 1)
        _lock()
        _broadcast()
        _unlock()
    start = _now_ns()
    ran = _claim(0)[1]
    claimed = _now_ns()
    spins, s = _load(SPIN), 0
    if ran > 0:  # and as long as a piece of its own took: a helper's is that close to done
        spins += (claimed - start) // ran * spins // (SPIN_US * 1000)
    while _load(DONE) < n and s < spins:  # pieces helpers claimed and still run
        _pause()
        s += 1
    if _load(DONE) < n:  # sleep: the core may be the late helper's
        _add(JOIN_NAPS, 1)
        _lock()
        _store(WAITING, 1)
        while _load(DONE) < n:
            _wait_done()
        _store(WAITING, 0)
        _unlock()
    if _load(MEASURE) != 0:
        done = _now_ns()
        _add(JOIN_NS, done - claimed)
        at = _add(LOGGED, 1)
        if at < LOG_JOBS:
            record = (fn, n, ran, published, _load(FIRST_OUT), claimed, done)
            for k in range(len(record)):
                _log_put(at * _LOG_WIDTH + k, record[k])
    _store(BUSY, 0)


@jit(**_OPTS)
def wait_until(address, value):  # type: ignore[no-untyped-def]
    """Returns once the int64 at ``address`` (a job's counter, `add_at`) is at least
    ``value``: a piece waiting for pieces of its own job that come before it (a job's pieces
    are claimed in index order, so those are claimed, and run, by threads that do not wait
    on this one: no deadlock; a job run in one thread runs them first). It spins as a helper
    does for a job (`SPIN_US`), then yields its core at each look: the thread it waits for
    may be waiting for a core (a loaded machine)."""
    spins, s = _load(SPIN), 0
    while _load_at(address) < value:
        if s < spins:
            _pause()
            s += 1
        else:
            _yield()


@jit(**_OPTS)
def _wanted(index):  # type: ignore[no-untyped-def]
    return index < _load(WANTED)


@numba_cache.cfunc(nt.void(nt.int64), **_OPTS)
def _helper(index):  # type: ignore[no-untyped-def]
    """Helper ``index``'s loop: claim pieces, spin, sleep; returns once the pool wants at most
    ``index`` helpers. Its pieces see `rvm.kernels.pool_thread.index` ``index + 1``."""
    pool_thread.set_index(index + 1)
    while _wanted(index):
        seen = _claim(index + 1)[0]
        spins, s = _load(SPIN), 0
        while (_load(WORD) >> 32) == seen and _wanted(index):
            if s < spins:
                _pause()
                s += 1
                continue
            nudge = _load(NUDGE)
            _add(NAPS, 1)
            _lock()
            _add(SLEEPING, 1)
            while (_load(WORD) >> 32) == seen and _wanted(index) and _load(NUDGE) == nudge:
                _wait()
            _add(SLEEPING, -1)
            _unlock()
            s = 0  # woken by a job (the loop ends) or by `wake`: spin for the job again


@numba_cache.cfunc(nt.void(), **_OPTS)
def _wake():  # type: ignore[no-untyped-def]
    """Sleeping helpers wake to spin for a job (see `wake`)."""
    if _load(SLEEPING) > 0:
        _add(NUDGE, 1)
        _lock()
        _broadcast()
        _unlock()


@numba_cache.cfunc(nt.int64(), **_OPTS)
def _threads():  # type: ignore[no-untyped-def]
    return _load(WANTED) + 1


@numba_cache.cfunc(nt.int64(), **_OPTS)
def _busy():  # type: ignore[no-untyped-def]
    return _load(BUSY)


@numba_cache.cfunc(nt.void(nt.int64), **_OPTS)
def _spin(count):  # type: ignore[no-untyped-def]
    """``count`` spin-wait steps, as a helper takes them (to calibrate `SPIN_US`)."""
    for _ in range(count):
        _load(WORD)
        _pause()


RUN = "rvm_pool_run"
"""The symbol of the pool's C function ``run(fn, n, data)`` (int64 each)."""
_WAKE = "rvm_pool_wake"
_SYMBOLS = {RUN: _run, "rvm_pool_threads": _threads, "rvm_pool_busy": _busy, _WAKE: _wake}
for _symbol, _cfunc in _SYMBOLS.items():
    llvm.add_symbol(_symbol, _cfunc.address)

# Through ctypes the GIL is released for the call.
_run_c = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)(_run.address)
_helper_c = ctypes.CFUNCTYPE(None, ctypes.c_int64)(_helper.address)
_spin_c = ctypes.CFUNCTYPE(None, ctypes.c_int64)(_spin.address)
_wake_c = ctypes.CFUNCTYPE(None)(_wake.address)
PIECE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)
"""The C type of a piece function."""


# -- for compiled callers ---------------------------------------------------------------------


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

    state = builder.call(c(_THREAD_STATE, i8p), [])
    held = builder.icmp_unsigned("!=", state, ir.Constant(i8p, None))
    if not _STATE_IS_LOCAL:  # the GIL's holder: this thread only if it is this thread's state
        own = builder.call(c("PyGILState_GetThisThreadState", i8p), [])
        held = builder.and_(held, builder.icmp_unsigned("==", state, own))
    with builder.if_then(held, likely=False):
        builder.call(c("PyEval_SaveThread", i8p), [])  # returns ``state``
    yield
    with builder.if_then(held, likely=False):
        builder.call(c("PyEval_RestoreThread", ir.VoidType(), i8p), [state])


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
        return atomics.c_call(builder, "rvm_pool_threads", ir.IntType(64), [])

    return nt.int64(), codegen


@intrinsic
def busy(typingctx):  # type: ignore[no-untyped-def]
    """Whether a job runs on the pool now (a job started now would run in its caller)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        value = atomics.c_call(builder, "rvm_pool_busy", ir.IntType(64), [])
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
    """What `call` does as a call from Python begins, in the compiled function called (the
    native exec mode's entries): when helpers sleep, wakes them if this function's last such
    call ran a job (`_ran_flag`; at first too), and returns the pool's word for `call_end`;
    -1 when none sleeps (nothing to record). Its calling function must end in `call_end`."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64 = ir.IntType(64)
        asleep = builder.icmp_signed(">", builder.load_atomic(_field(builder, i64(SLEEPING)),
                                                              "monotonic", 8), i64(0))  # fmt: skip
        word = builder.load_atomic(_field(builder, i64(WORD)), "monotonic", 8)
        ran = builder.icmp_signed("!=", builder.load(_ran_flag(builder)), i64(0))
        with builder.if_then(builder.and_(asleep, ran), likely=False):
            atomics.c_call(builder, _WAKE, ir.VoidType(), [])
        return builder.select(asleep, word, i64(-1))

    return nt.int64(), codegen


@intrinsic
def call_end(typingctx, word):  # type: ignore[no-untyped-def]
    """What `call` does as a call from Python ends, in the compiled function called: with the
    ``word`` `call_begin` returned (not -1), records whether the call ran a job."""
    if not isinstance(word, nt.Integer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64 = ir.IntType(64)
        before = context.cast(builder, args[0], signature.args[0], nt.int64)
        with builder.if_then(builder.icmp_signed("!=", before, i64(-1))):
            now = builder.load_atomic(_field(builder, i64(WORD)), "monotonic", 8)
            ran = builder.icmp_signed("!=", now, before)
            builder.store(builder.zext(ran, i64), _ran_flag(builder))
        return context.get_dummy_value()

    return nt.void(word), codegen


# -- for Python -------------------------------------------------------------------------------

_guard = threading.Lock()  # over _helpers and the helper count
_helpers: list[threading.Thread] = []


def wake() -> None:
    """Sleeping helpers wake now and spin `SPIN_US` for a job (see `call`)."""
    if _state[_SLEEPING_AT]:
        _wake_c()


def call(ran: list[bool], i: int, fn: Callable[..., object], args: tuple) -> object:
    """``fn(*args)``, a VM call of its function ``i`` from Python. When helpers sleep as it
    begins, it wakes them first (`wake`: their wake-up then overlaps the call's work before
    its first job instead of delaying that job) if the last such call of ``i`` ran a job on
    the pool (``ran[i]``; True at first), and ``ran[i]`` records whether this one did. A
    function whose calls run no job (the MLP at batch 1: 5 us) thus leaves them asleep, where
    waking them cost each call 0.3 us of CPU (a system call, amortized) on this 2-core Zen 4,
    and their spin a core. About 100 ns when none sleeps."""
    if not _state[_SLEEPING_AT]:
        return fn(*args)
    word = _state[_WORD_AT]  # changes as a job is published or a piece claimed
    if ran[i]:
        _wake_c()
    try:
        return fn(*args)
    finally:
        ran[i] = _state[_WORD_AT] != word


_SLEEPING_AT, _WORD_AT = SLEEPING * _LINE, WORD * _LINE


def jobs() -> int:
    """How many jobs went to the pool's helpers so far (modulo 2 ** 30; not those run in their
    caller: one thread, a busy pool, one piece)."""
    return int(_state[_WORD_AT]) >> 33


def wakes() -> int:
    """How many jobs so far had to wake sleeping helpers (each a wake-up's latency)."""
    return int(_state[WAKES * _LINE])


def naps() -> tuple[int, int]:
    """How many times so far (helpers, callers) went to sleep: a helper that spun `SPIN_US`
    with no job, a caller that spun as long at a job's end while helpers still ran its
    pieces. Each sleep is paid by a wake-up (tens of microseconds here, more where a virtual
    CPU halts): `wakes` counts the jobs that found helpers asleep."""
    return int(_state[NAPS * _LINE]), int(_state[JOIN_NAPS * _LINE])


def helpers() -> int:
    """How many helper threads the pool has (jobs run on these and their caller)."""
    return int(_state[WANTED * _LINE])


def measure(on: bool) -> None:
    """Time every piece the pool runs (``on``) or not (off, the default), the statistics
    zeroed: `piece_times` reads them. For finding a job's critical path on a loaded machine,
    where wall time says little: each thread's CPU time inside pieces, and its pieces."""
    _state[MEASURE * _LINE] = 0
    ctypes.memset(_stats, 0, ctypes.sizeof(_stats))
    _state[JOIN_NS * _LINE] = 0
    _state[LOGGED * _LINE] = 0
    _state[PIECES_LOGGED * _LINE] = 0
    _state[MEASURE * _LINE] = int(bool(on))


def join_time() -> int:
    """Since `measure` was turned on: the nanoseconds (wall) the callers of jobs waited, their
    own pieces done, for helpers to finish theirs (spinning or asleep): the jobs' imbalance
    and late helpers, as the caller saw them."""
    return int(_state[JOIN_NS * _LINE])


def job_log() -> list[tuple[int, int, int, int, int, int]]:
    """Since `measure` was turned on, the jobs that went to the helpers (the first `LOG_JOBS`),
    each (piece function's address, pieces, the caller's pieces, the tail, the caller's
    join, the job's time): the tail is the wall nanoseconds from the first thread finding no
    piece left to claim to the last piece's end (a thread idle, caller or helper: the job's
    imbalance), the join the caller's share of it (its own pieces done, waiting for a
    helper's), the time from publishing to the last piece's end."""
    count = min(LOG_JOBS, int(_state[LOGGED * _LINE]))
    out = []
    for j in range(count):
        r = _log[j * _LOG_WIDTH : j * _LOG_WIDTH + _LOG_DONE + 1]
        first = r[_LOG_FIRST_OUT] or r[_LOG_OUT]
        tail = r[_LOG_DONE] - max(r[_LOG_START], min(first, r[_LOG_OUT]))
        join = r[_LOG_DONE] - r[_LOG_OUT]
        out.append((r[_LOG_FN], r[_LOG_N], r[_LOG_RAN], tail, join, r[_LOG_DONE] - r[_LOG_START]))
    return out


def job_edges() -> list[tuple[int, int]]:
    """Since `measure` was turned on, the logged jobs' (the first `LOG_JOBS`) publishing and
    last piece's end, monotonic-clock nanoseconds (`time.perf_counter_ns`' clock): where they
    fall between a kernel's own edges."""
    count = min(LOG_JOBS, int(_state[LOGGED * _LINE]))
    w = _LOG_WIDTH
    return [(int(_log[j * w + _LOG_START]), int(_log[j * w + _LOG_DONE])) for j in range(count)]


def piece_log() -> list[tuple[int, int, int, int]]:
    """Since `measure` was turned on, the pieces run (the first `LOG_PIECES`), in the order
    they ended: (piece function's address, its index, its thread's line as `piece_times`
    numbers them, its CPU nanoseconds). At one thread, a job's pieces in claim order: what
    a cut's tail at more threads can be computed from on a machine too loaded to time it."""
    count = min(LOG_PIECES, int(_state[PIECES_LOGGED * _LINE]))
    w = _PIECE_WIDTH
    return [tuple(_piece_log[j * w : (j + 1) * w]) for j in range(count)]  # type: ignore[misc]


def piece_times() -> list[tuple[int, int]]:
    """Since `measure` was turned on: per thread, (CPU nanoseconds inside pieces, pieces), the
    callers' (any thread that started a job or ran one's pieces itself) first, then each
    helper's (up to `STAT_THREADS` in all)."""
    count = min(STAT_THREADS, 1 + helpers())
    return [(int(_stats[t * _LINE]), int(_stats[t * _LINE + 1])) for t in range(count)]


def _calibrate() -> int:
    """Spin-wait steps in `SPIN_US` on this machine (the fastest of three timings)."""
    steps = 1 << 12
    best = min(_timed(steps) for _ in range(3))
    return max(1, int(steps * SPIN_US * 1000 / max(best, 1)))


def _timed(steps: int) -> int:
    t0 = time.perf_counter_ns()
    _spin_c(steps)
    return time.perf_counter_ns() - t0


def _wake_all() -> None:
    _libc.pthread_mutex_lock(ctypes.c_void_p(_state[MUTEX * _LINE]))
    _libc.pthread_cond_broadcast(ctypes.c_void_p(_state[COND * _LINE]))
    _libc.pthread_mutex_unlock(ctypes.c_void_p(_state[MUTEX * _LINE]))


def set_helpers(n: int) -> None:
    """Makes the pool have ``n`` helper threads (0: every job runs in its caller), starting
    or stopping threads; a no-op when it has them.

    Raises:
        ValueError: ``n`` is not a whole number >= 0.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"set_helpers: expected a whole number >= 0 of helpers, got {n!r}")
    with _guard:
        alive = [t for t in _helpers if t.is_alive()]
        if n == len(alive) == helpers():
            return
        if _state[SPIN * _LINE] == 0:
            _state[SPIN * _LINE] = _calibrate()
        _state[WANTED * _LINE] = n
        _wake_all()  # sleepers past the new count leave
        for t in alive[n:]:
            t.join()
        del alive[n:]
        for i in range(len(alive), n):
            t = threading.Thread(target=_helper_c, args=(i,), name=f"rvm-pool-{i}", daemon=True)
            t.start()
            alive.append(t)
        _helpers[:] = alive


def for_each(n: int, fn: Callable[[int], object]) -> None:
    """Calls ``fn(i)`` for i in 0 .. n - 1 on the pool and this thread, and returns when all
    have returned. The first exception a call raised is raised here (the pieces not yet
    started then are skipped)."""
    errors: list[BaseException] = []

    def piece(i: int, _null: int | None, _data: int | None) -> None:
        if errors:
            return
        try:
            fn(i)
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller
            errors.append(err)

    callback = PIECE(piece)
    _run_c(ctypes.cast(callback, ctypes.c_void_p).value, n, 0)
    if errors:
        raise errors[0]


def _reset_in_child() -> None:
    """A forked child has none of its parent's helpers: jobs run in their caller until
    `set_helpers` starts new ones."""
    global _guard
    _guard = threading.Lock()
    _helpers.clear()
    for field in (WORD, FN, DATA, N, DONE, BUSY, WANTED, SLEEPING, WAITING):
        _state[field * _LINE] = 0
    _init_sync()


def _stop() -> None:
    """At exit: helpers leave their loop (none is left inside native code or a piece)."""
    _state[WANTED * _LINE] = 0
    _wake_all()
    for t in list(_helpers):
        t.join(timeout=1.0)


os.register_at_fork(after_in_child=_reset_in_child)
atexit.register(_stop)
