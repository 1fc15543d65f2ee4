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
- a helper that finishes spins while the job's other pieces still run and then about
  `SPIN_US` for the next job (a model's next GEMM is usually that close: between them run the
  VM and single-threaded kernels), then sleeps on a condition variable; a job wakes sleepers
  (200 us rather than 10 made shufflenet and squeezenet 15-20% faster, resnet50 7%: a wake-up
  costs tens of microseconds here, milliseconds where a virtual CPU that halted waits for its
  host's core). Counted from the job's end, not the helper's: a job whose caller still runs a
  piece 200 us longer than the helper's (a core slowed by its host) had the helper asleep at
  the next job, and squeezenet's calls found it asleep at 15 jobs of 30 in such spells;
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
- every spinning thread (a helper waiting for a job, a caller for its helpers' pieces, a piece
  for another's: `wait_until`) gives its core away every few microseconds
  (`YIELDS_PER_SPIN`): where the machine runs more threads than it has cores, the thread it
  waits for may be waiting for that very core;
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

For compiled callers (`rvm.kernels.poolcalls`, re-exported here): `run(fn, n, data)`,
`threads()` (1 + helpers) and `busy()` are intrinsics calling the pool's C functions by
symbol, so cached code that uses them is resolved when linked (a caller holding the GIL lets
go of it for a job: `gil_released`); `call_begin()` and `call_end(word)` do what `call` does
around a VM call from Python, in the compiled function called (the native exec mode's
entries); `add_at(address, value)` and `wait_until(address, value)` a counter in a job's data
that a piece waits on for pieces of the same job before it (one job where two would pay a join
between them). For Python: `for_each(n, fn)` runs a Python callable per piece (exceptions
propagate), `helpers()` and `set_helpers(n)`; `jobs()`, `wakes()`, `naps()` and `yields()`:
the jobs, sleeps, wake-ups and yields a workload pays. What the pool measures when asked (each
thread's CPU time inside pieces, the callers' wait at jobs' ends, each job's tail and each
piece's CPU time; off by default: a load and a branch a piece and a job), to find a job's
critical path where wall time says little (a loaded machine), is `rvm.kernels.poolstate`'s
(`measure(on)`, `piece_times()`, `job_log()`...), with the state, atomics, locks and clocks
the pool's native code is made of.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import threading
import time
from collections.abc import Callable

from llvmlite import binding as llvm
from llvmlite import ir
from numba import types as nt
from numba.extending import intrinsic

from rvm.kernels import numba_cache, pool_thread
from rvm.kernels import poolstate as ps
from rvm.kernels.jitting import jit
from rvm.kernels.poolcalls import (  # the pool's calls from compiled code, its API too
    BUSY,
    RUN,
    THREADS,
    WAKE,
    busy,
    call_begin,
    call_end,
    gil_released,
    run,
    threads,
)

__all__ = [
    "PIECE",
    "PIN_ENV_VAR",
    "RUN",
    "SPIN_US",
    "YIELDS_PER_SPIN",
    "add_at",
    "busy",
    "call",
    "call_begin",
    "call_end",
    "for_each",
    "gil_released",
    "helper_cpus",
    "helpers",
    "jobs",
    "naps",
    "run",
    "set_helpers",
    "threads",
    "wait_until",
    "wake",
    "wakes",
    "yields",
]

numba_cache.install()  # the functions compiled at import below load sealed object code only

SPIN_US = 200
"""How long a helper spins for the next job before it sleeps, in microseconds."""
YIELDS_PER_SPIN = 32
"""How often a spinning thread gives its core away (``sched_yield``) within `SPIN_US`: every
``SPIN_US / YIELDS_PER_SPIN`` (about 6 us; a yield returns at once when no other thread waits
for the core). Where the machine runs more threads than it has cores (another process busy on
one of them), the thread a spinner waits for can be waiting for the spinner's own core: a
helper and its caller on one core while another program held the other, the spin kept the
piece's thread off its core for a scheduler's time slice (milliseconds). On Zen 4 with a busy
thread pinned to the second core (the pool's two threads then shared a core about a third of
the time), squeezenet in bf16 took 4.1 ms a call instead of 8.0, inception_v2 21.3 instead of
35.1 (its one-thread time: 20); on a quiet machine the same within the noise."""


# -- the pool ---------------------------------------------------------------------------------

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@jit(**_OPTS)  # one compile for every caller's ``who`` (no literal)
def _timed_piece(who, fn, i, data):  # type: ignore[no-untyped-def]
    """Piece ``i``; its thread CPU time added to line ``who`` while `measure` is on."""
    if ps.load(ps.MEASURE) == 0 or who >= ps.STAT_THREADS:
        ps.call_piece(fn, i, data)
        return
    start = ps.thread_ns()
    ps.call_piece(fn, i, data)
    ns = ps.thread_ns() - start
    ps.stat_add(who, ns)
    at = ps.add(ps.PIECES_LOGGED, 1)
    if at < ps.LOG_PIECES:
        record = (fn, i, who, ns)
        for k in range(ps.PIECE_WIDTH):
            ps.piece_put(at * ps.PIECE_WIDTH + k, record[k])


@jit(**_OPTS)
def _claim(who):  # type: ignore[no-untyped-def]
    """Runs pieces of the published job until none is left unclaimed; returns the job's
    sequence number and how many pieces this thread ran. ``who``: the thread's line in the
    statistics (`measure`)."""
    ran = 0
    while True:
        word = ps.load(ps.WORD)
        seq = word >> 32
        if seq & 1:  # being published: ready in a moment
            ps.pause()
            continue
        i = word & ps.INDEX_MASK
        fn, n, data = ps.load(ps.FN), ps.load(ps.N), ps.load(ps.DATA)
        if i >= n:
            if ps.load(ps.MEASURE) != 0 and ps.load(ps.WORD) == word:  # the job's first thread out
                ps.cas(ps.FIRST_OUT, 0, ps.now_ns())
            return seq, ran
        # The word still holding (seq, i) proves fn, n and data were seq's (fields change
        # only after the sequence number does).
        if ps.cas(ps.WORD, word, word + 1):
            _timed_piece(who, fn, i, data)
            ran += 1
            if ps.add(ps.DONE, 1) == n - 1 and ps.load(ps.WAITING) != 0:  # the caller sleeps
                ps.lock()
                ps.signal_done()
                ps.unlock()


@jit(**_OPTS, inline="always")
def _spin_step(step, every):  # type: ignore[no-untyped-def]
    """Spin-wait step ``step`` (from 0) of a thread waiting for a job or for pieces: the CPU's
    pause, and a yield of the core every ``every`` steps (`_yield_every`)."""
    ps.pause()
    if every > 0 and step % every == every - 1:
        ps.add(ps.YIELDS, 1)
        ps.yield_core()


@jit(**_OPTS, inline="always")
def _yield_every(spins):  # type: ignore[no-untyped-def]
    """The spin-wait steps between two yields, of the ``spins`` steps in `SPIN_US`
    (`YIELDS_PER_SPIN`)."""
    return spins // YIELDS_PER_SPIN


@numba_cache.cfunc(nt.void(nt.int64, nt.int64, nt.int64), **_OPTS)
def _run(fn, n, data):  # type: ignore[no-untyped-def]
    """Runs the job ``fn`` on pieces 0 .. n - 1 (see the module docstring)."""
    if n <= 0:
        return
    if n == 1 or n >= ps.MAX_PIECES or ps.load(ps.WANTED) == 0 or not ps.cas(ps.BUSY, 0, 1):
        for i in range(n):
            _timed_piece(0, fn, i, data)
        return
    seq = ((ps.load(ps.WORD) >> 32) + 1) & ps.SEQ_MASK  # odd: publishing
    ps.store(ps.WORD, seq << 32)
    ps.store(ps.FN, fn)
    ps.store(ps.DATA, data)
    ps.store(ps.N, n)
    ps.store(ps.DONE, 0)
    ps.store(ps.FIRST_OUT, 0)
    ps.store(ps.WORD, ((seq + 1) & ps.SEQ_MASK) << 32)  # even: open, from piece 0
    published = ps.now_ns() if ps.load(ps.MEASURE) != 0 else 0
    if ps.load(ps.SLEEPING) > 0:
        ps.add(ps.WAKES, 1)
        ps.lock()
        ps.broadcast()
        ps.unlock()
    start = ps.now_ns()
    ran = _claim(0)[1]
    claimed = ps.now_ns()
    spins, s = ps.load(ps.SPIN), 0
    every = _yield_every(spins)
    if ran > 0:  # and as long as a piece of its own took: a helper's is that close to done
        spins += (claimed - start) // ran * spins // (SPIN_US * 1000)
    while ps.load(ps.DONE) < n and s < spins:  # pieces helpers claimed and still run
        _spin_step(s, every)
        s += 1
    if ps.load(ps.DONE) < n:  # sleep: the core may be the late helper's
        ps.add(ps.JOIN_NAPS, 1)
        ps.lock()
        ps.store(ps.WAITING, 1)
        while ps.load(ps.DONE) < n:
            ps.wait_done()
        ps.store(ps.WAITING, 0)
        ps.unlock()
    if ps.load(ps.MEASURE) != 0:
        done = ps.now_ns()
        ps.add(ps.JOIN_NS, done - claimed)
        at = ps.add(ps.LOGGED, 1)
        if at < ps.LOG_JOBS:
            record = (fn, n, ran, published, ps.load(ps.FIRST_OUT), claimed, done)
            for k in range(len(record)):
                ps.log_put(at * ps.LOG_WIDTH + k, record[k])
    ps.store(ps.BUSY, 0)


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


@jit(**_OPTS)
def wait_until(address, value):  # type: ignore[no-untyped-def]
    """Returns once the int64 at ``address`` (a job's counter, `add_at`) is at least
    ``value``: a piece waiting for pieces of its own job that come before it (a job's pieces
    are claimed in index order, so those are claimed, and run, by threads that do not wait
    on this one: no deadlock; a job run in one thread runs them first). It spins as a helper
    does for a job (`SPIN_US`, `_spin_step`), then yields its core at each look: the thread it
    waits for may be waiting for a core (a loaded machine)."""
    spins, s = ps.load(ps.SPIN), 0
    every = _yield_every(spins)
    while _load_at(address) < value:
        if s < spins:
            _spin_step(s, every)
            s += 1
        else:
            ps.yield_core()


@jit(**_OPTS)
def _wanted(index):  # type: ignore[no-untyped-def]
    return index < ps.load(ps.WANTED)


@numba_cache.cfunc(nt.void(nt.int64), **_OPTS)
def _helper(index):  # type: ignore[no-untyped-def]
    """Helper ``index``'s loop: claim pieces, spin, sleep; returns once the pool wants at most
    ``index`` helpers. Its pieces see `rvm.kernels.pool_thread.index` ``index + 1``."""
    pool_thread.set_index(index + 1)
    while _wanted(index):
        seen = _claim(index + 1)[0]
        spins, s, steps = ps.load(ps.SPIN), 0, 0
        every = _yield_every(spins)
        while (ps.load(ps.WORD) >> 32) == seen and _wanted(index):
            if s < spins:
                _spin_step(steps, every)
                steps += 1
                if ps.load(ps.DONE) >= ps.load(ps.N):  # counted from the job's end
                    s += 1
                continue
            nudge = ps.load(ps.NUDGE)
            ps.add(ps.NAPS, 1)
            ps.lock()
            ps.add(ps.SLEEPING, 1)
            while (
                (ps.load(ps.WORD) >> 32) == seen and _wanted(index) and ps.load(ps.NUDGE) == nudge
            ):
                ps.wait()
            ps.add(ps.SLEEPING, -1)
            ps.unlock()
            s = 0  # woken by a job (the loop ends) or by `wake`: spin for the job again


@numba_cache.cfunc(nt.void(), **_OPTS)
def _wake():  # type: ignore[no-untyped-def]
    """Sleeping helpers wake to spin for a job (see `wake`)."""
    if ps.load(ps.SLEEPING) > 0:
        ps.add(ps.NUDGE, 1)
        ps.lock()
        ps.broadcast()
        ps.unlock()


@numba_cache.cfunc(nt.int64(), **_OPTS)
def _threads():  # type: ignore[no-untyped-def]
    return ps.load(ps.WANTED) + 1


@numba_cache.cfunc(nt.int64(), **_OPTS)
def _busy():  # type: ignore[no-untyped-def]
    return ps.load(ps.BUSY)


@numba_cache.cfunc(nt.void(nt.int64), **_OPTS)
def _spin(count):  # type: ignore[no-untyped-def]
    """``count`` spin-wait steps, as a helper takes them (to calibrate `SPIN_US`)."""
    for _ in range(count):
        ps.load(ps.WORD)
        ps.pause()


_SYMBOLS = {RUN: _run, THREADS: _threads, BUSY: _busy, WAKE: _wake}
for _symbol, _cfunc in _SYMBOLS.items():
    llvm.add_symbol(_symbol, _cfunc.address)

# Through ctypes the GIL is released for the call.
_run_c = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)(_run.address)
_helper_c = ctypes.CFUNCTYPE(None, ctypes.c_int64)(_helper.address)
_spin_c = ctypes.CFUNCTYPE(None, ctypes.c_int64)(_spin.address)
_wake_c = ctypes.CFUNCTYPE(None)(_wake.address)
PIECE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)
"""The C type of a piece function."""


# -- for Python -------------------------------------------------------------------------------

_guard = threading.Lock()  # over _helpers and the helper count
_helpers: list[threading.Thread] = []


def wake() -> None:
    """Sleeping helpers wake now and spin `SPIN_US` for a job (see `call`)."""
    if ps.state[_SLEEPING_AT]:
        _wake_c()


def call(ran: list[bool], i: int, fn: Callable[..., object], args: tuple) -> object:
    """``fn(*args)``, a VM call of its function ``i`` from Python. When helpers sleep as it
    begins, it wakes them first (`wake`: their wake-up then overlaps the call's work before
    its first job instead of delaying that job) if the last such call of ``i`` ran a job on
    the pool (``ran[i]``; True at first), and ``ran[i]`` records whether this one did. A
    function whose calls run no job (the MLP at batch 1: 5 us) thus leaves them asleep, where
    waking them cost each call 0.3 us of CPU (a system call, amortized) on this 2-core Zen 4,
    and their spin a core. About 100 ns when none sleeps."""
    if not ps.state[_SLEEPING_AT]:
        return fn(*args)
    word = ps.state[_WORD_AT]  # changes as a job is published or a piece claimed
    if ran[i]:
        _wake_c()
    try:
        return fn(*args)
    finally:
        ran[i] = ps.state[_WORD_AT] != word


_SLEEPING_AT, _WORD_AT = ps.SLEEPING * ps.LINE, ps.WORD * ps.LINE


def jobs() -> int:
    """How many jobs went to the pool's helpers so far (modulo 2 ** 30; not those run in their
    caller: one thread, a busy pool, one piece)."""
    return int(ps.state[_WORD_AT]) >> 33


def wakes() -> int:
    """How many jobs so far had to wake sleeping helpers (each a wake-up's latency)."""
    return int(ps.state[ps.WAKES * ps.LINE])


def naps() -> tuple[int, int]:
    """How many times so far (helpers, callers) went to sleep: a helper that spun `SPIN_US`
    with no job, a caller that spun as long at a job's end while helpers still ran its
    pieces. Each sleep is paid by a wake-up (tens of microseconds here, more where a virtual
    CPU halts): `wakes` counts the jobs that found helpers asleep."""
    return int(ps.state[ps.NAPS * ps.LINE]), int(ps.state[ps.JOIN_NAPS * ps.LINE])


def yields() -> int:
    """How many times so far spinning threads gave their core away (`YIELDS_PER_SPIN`)."""
    return int(ps.state[ps.YIELDS * ps.LINE])


def helpers() -> int:
    """How many helper threads the pool has (jobs run on these and their caller)."""
    return int(ps.state[ps.WANTED * ps.LINE])


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
    ps.libc.pthread_mutex_lock(ctypes.c_void_p(ps.state[ps.MUTEX * ps.LINE]))
    ps.libc.pthread_cond_broadcast(ctypes.c_void_p(ps.state[ps.COND * ps.LINE]))
    ps.libc.pthread_mutex_unlock(ctypes.c_void_p(ps.state[ps.MUTEX * ps.LINE]))


PIN_ENV_VAR = "RVM_PIN_HELPERS"


def helper_cpus(n: int) -> list[int] | None:
    """The CPU each of ``n`` helpers is pinned to, or None (not pinned): when the pool's
    threads are as many as the CPUs this process may run on (the default count), helper i
    runs on the i + 1-th of them only and the calling thread anywhere, as ONNX Runtime pins
    its pool's threads; ``RVM_PIN_HELPERS=0`` turns it off.

    Why: a helper woken from sleep (a job after a pause) was often placed on its waker's CPU,
    busy with the caller's pieces, and waited there for the scheduler's next turn while the
    other CPU idled: on the 2-core Zen 3 guest a wake-up after a 10-100 ms pause took 1.3-3.1
    ms unpinned against 0.13 ms pinned, and the int8 squeezenet's first call after a pause ran
    half its jobs in the caller alone. With fewer threads than CPUs the scheduler places them
    (a pinned helper could share a core with the caller's SMT sibling)."""
    if os.environ.get(PIN_ENV_VAR, "1").strip() == "0" or not hasattr(os, "sched_getaffinity"):
        return None
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except OSError:
        return None
    return allowed[1 : n + 1] if n > 0 and len(allowed) == n + 1 else None


def _pin(thread: int | None, cpus: set[int] | None) -> None:
    """Thread ``thread`` (a native id; 0: the calling thread) runs on ``cpus`` only, or on
    every CPU the process may run on (None). A no-op where the OS has no affinity."""
    if thread is None or not hasattr(os, "sched_setaffinity"):
        return
    try:
        os.sched_setaffinity(thread, cpus if cpus else os.sched_getaffinity(0))
    except OSError:
        pass  # the process's CPUs changed meanwhile: the scheduler places it


def _helper_main(index: int, cpu: int | None) -> None:
    """A helper thread: pinned to ``cpu`` (`helper_cpus`; None: not), then the native loop."""
    if cpu is not None:
        _pin(0, {cpu})  # this thread's own (Linux: per thread)
    _helper_c(index)


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
        if ps.state[ps.SPIN * ps.LINE] == 0:
            ps.state[ps.SPIN * ps.LINE] = _calibrate()
        ps.state[ps.WANTED * ps.LINE] = n
        _wake_all()  # sleepers past the new count leave
        for t in alive[n:]:
            t.join()
        del alive[n:]
        cpus = helper_cpus(n)
        for i, t in enumerate(alive):  # those kept: pinned, or not, as the new count says
            _pin(t.native_id, {cpus[i]} if cpus else None)
        for i in range(len(alive), n):
            args = (i, cpus[i] if cpus else None)
            t = threading.Thread(target=_helper_main, args=args, name=f"rvm-pool-{i}", daemon=True)
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
    for at in (ps.WORD, ps.FN, ps.DATA, ps.N, ps.DONE, ps.BUSY, ps.WANTED, ps.SLEEPING, ps.WAITING):
        ps.state[at * ps.LINE] = 0
    ps.init_sync()


def _stop() -> None:
    """At exit: helpers leave their loop (none is left inside native code or a piece)."""
    ps.state[ps.WANTED * ps.LINE] = 0
    _wake_all()
    for t in list(_helpers):
        t.join(timeout=1.0)


os.register_at_fork(after_in_child=_reset_in_child)
atexit.register(_stop)
