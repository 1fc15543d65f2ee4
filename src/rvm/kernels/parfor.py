"""Both cores for the kernel library's large loops: chunks of work on rvm's thread pool.

A library function splits a large loop (pooling, lrn, GEMM) into chunks, one piece each of a
job on `rvm.kernels.workpool`: the calling thread and the pool's helpers claim them. A chunk
is a task, compiled once per dtype as a `numba.cfunc`, only when first needed (each is seconds
of LLVM on a first run). Compiled code finds a task through its slot: an int64 registered under
a fixed symbol when the task is exported, holding the task's address once compiled, 0 before.
A run whose slot is 0 first asks `_resolve` (a C callback into Python, in the thread that
runs it) to compile or load the task. Code calling a task thus compiles, or links from the
cache, without it, and a process whose loops never split never builds one (a small product
runs in the calling thread).

- `export_task(name, body)` declares ``body(chunk, like, data)`` as the task ``name`` (and
  registers its slots): it
  runs chunk ``chunk`` (0 to ``chunks - 1``) of the job whose int64 array is ``data``
  (`job(data)` reads it; ``like`` is a null pointer typed by the dtype, for `array_at`);
- `runner(name)` is the intrinsic ``run(x, chunks, job)`` that runs the task of ``x``'s
  dtype once per chunk, ``chunks`` of them, on the pool (a caller holding the GIL lets go of
  it for the job: a helper's piece may need it to resolve a task it calls);
- `caller(name)` is the intrinsic ``call(x, chunk, job)`` that runs one chunk of the task of
  ``x``'s dtype in the calling thread: a library function's methods, each built when first
  run, and code several functions share (the GEMM's), built once; `stack_job(size)` makes
  such a call's job in the caller's stack frame;
- `threads()` is how many threads the chunks run on: the pool's threads (the caller and
  its helpers), or 1 with splitting off (`enable`; the environment variable
  ``RVM_SPLIT_LOOPS=0`` starts it off); `chunks(work, items)` how many chunks to cut a loop
  into (`PIECES_PER_THREAD` a thread when it is large), `pieces(threads, most)` how many
  pieces a job is cut into (`PIECES_PER_THREAD` a thread), `even(parts, threads)` a count of
  equal pieces that keeps the threads even;
- `address(array)` / `array_at(address, shape, like)` carry arrays through a job;
  `registered_slot(symbol)` an int64 registered with llvmlite (a slot), which
  `registered_int(builder, symbol)` declares in compiled code;
- `piece_range(piece, pieces, total, align)`: a piece of a flat run cut in equal runs;
  `guided_range(piece, pieces, threads, total, align)` in runs that shrink toward the end of
  the claim order (the threads finish together); `affine_unit(counters, units, threads)`
  the unit a piece does where units go to the same thread at every call (`set_affine(False)`
  turns that off, `affine()` reads it);
- `MIN_WORK`: the size (elements touched) from which a loop is worth splitting, written once.

No Numba threading layer is involved (its workqueue layer aborts when entered from several
threads at once, and GNU OpenMP in a forked child): several VMs in several threads each run
their loops, on the pool or, while another's job holds it, in their own thread.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable

import numba as nb
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import populate_array

from rvm.kernels import DTYPES, apart, pool_thread, workpool
from rvm.kernels.cpu import cpu
from rvm.kernels.jitting import jit
from rvm.kernels.threads import split_loops_from_environment
from rvm.progress import Progress

MIN_WORK = (1 << 14) * cpu().lanes
"""Elements a loop touches from which its chunks go to two or more threads: below it a
helper's wake-up (a few microseconds) outweighs the work. A rule of the vector width, so that
it stands for the same time of a core's work on every CPU: the loops split by it (pools, lrn,
depthwise and direct convolutions, their epilogues) go a vector at a time, so a core of half
the lanes takes about twice as long an element. 1 << 18 with AVX-512's 16 lanes (tuned on a
Zen 4); 1 << 17 with AVX2's 8 (on a Zen 3, 1 << 18 elements of a pool took 60-65 us, so
pieces of half that still outweigh a job's start tenfold)."""

PIECES_PER_THREAD = 4
"""Chunks a thread a large loop is cut into (`chunks`), so that the threads that come first
take more of them when a helper is late (woken from sleep, its core busy elsewhere): cut in
one chunk a thread, a helper that claimed its chunk late left the caller waiting up to half
the loop's time, the loop at one core's speed."""

# Read by compiled code through the symbols below.
_enabled = ctypes.c_int64(int(split_loops_from_environment()))
llvm.add_symbol("rvm_parallel_enabled", ctypes.addressof(_enabled))
_affine = ctypes.c_int64(1)
llvm.add_symbol("rvm_affine_units", ctypes.addressof(_affine))
_task_bodies: dict[str, Callable[..., None]] = {}  # exported tasks by name
_compiled: dict[tuple[str, str], object] = {}  # (name, dtype) -> its cfunc, kept alive
_slots: dict[tuple[str, str], ctypes.c_int64] = {}  # (name, dtype) -> its address slot
_slot_keys: dict[int, tuple[str, str]] = {}  # a slot's address -> (name, dtype)
_prefetched: dict[tuple[str, str], apart.Pending] = {}  # handed to background helpers (`prefetch`)
_task_lock = threading.RLock()
PREFETCH_WAIT_S = 600.0  # at most, for a background helper building a task; then build it
logger = logging.getLogger("rvm.jit")


def enable(on: bool) -> None:
    """Split large library loops over the pool's threads (``on``) or not. On by default,
    unless ``RVM_SPLIT_LOOPS=0``."""
    _enabled.value = int(bool(on))


def enabled() -> bool:
    """Whether large library loops are split (`enable`)."""
    return bool(_enabled.value)


def set_affine(on: bool) -> None:
    """Whether cuts that can give their units by thread do (`affine_unit`; on by default):
    off, to measure what it saves."""
    _affine.value = int(bool(on))


def slot_symbol(name: str, dtype: str) -> str:
    """The registered symbol of task ``name``'s slot for ``dtype`` (see the module docstring)."""
    return f"rvm_task_slot_{name}_{dtype}"


_registered: dict[str, ctypes.c_int64] = {}  # symbol -> its int64, registered once, kept


def registered_slot(symbol: str) -> ctypes.c_int64:
    """The int64 registered with llvmlite as ``symbol`` (made, 0, and registered at the first
    call for it; kept for good): what compiled code reads through `registered_int`."""
    if not symbol.isidentifier():
        raise ValueError(f"registered_slot: a symbol must be an identifier, got {symbol!r}")
    with _task_lock:
        value = _registered.get(symbol)
        if value is None:
            value = _registered[symbol] = ctypes.c_int64(0)
            llvm.add_symbol(symbol, ctypes.addressof(value))
        return value


def export_task(name: str, body: Callable[..., None]) -> None:
    """Declare ``body(chunk, like, data)`` (module level, for Numba's cache) as the task
    ``name``; `require_task` compiles it for a dtype (the library entry point of the same
    name requires it, `rvm.kernels.entry.require`). ``chunk`` is the chunk it runs,
    ``job(data)`` the caller's int64 array; ``like`` is a null pointer typed by the dtype
    (never read: pass it to `array_at`). Its C signature is a pool piece's
    (`rvm.kernels.workpool`)."""
    _task_bodies[name] = body
    for dtype in DTYPES:
        if (name, dtype) not in _slots:
            slot = _slots[name, dtype] = registered_slot(slot_symbol(name, dtype))
            _slot_keys[ctypes.addressof(slot)] = (name, dtype)


def require_task(name: str, dtype: str) -> None:
    """Compile task ``name`` for ``dtype`` (or load it from Numba's cache) and fill its slot,
    unless this process already has; a name without a task is a no-op. A task `prefetch`
    is building is waited for, then loaded."""
    from numba.core.compiler_lock import global_compiler_lock

    if (name, dtype) in _compiled or name not in _task_bodies:
        return
    building = _prefetched.get((name, dtype))
    if building is not None and not building.take():  # a helper is building it: wait
        with Progress(f"building rvm's library: {name} ({dtype})"):
            building.done.wait(PREFETCH_WAIT_S)
    # Numba's (reentrant) lock first, as typing holds it when it requires a task.
    with global_compiler_lock, _task_lock:
        if (name, dtype) in _compiled:
            return
        ptr = nt.CPointer(nb.from_dtype(np.dtype(dtype)))
        sig = nt.void(nt.int64, ptr, nt.CPointer(nt.int64))
        body = _task_bodies[name]
        with Progress(f"building rvm's library: {name} ({dtype})"):  # seconds, once per machine
            cfunc = nb.cfunc(sig, cache=True, error_model="numpy", boundscheck=False)(body)
        _compiled[name, dtype] = cfunc
        _slots[name, dtype].value = cfunc.address


def prefetch(tasks: Iterable[tuple[str, str]]) -> int:
    """Start building ``tasks`` ((task, dtype) pairs, in the order this process will likely
    run them) in forked helpers while this process goes on, those not built, nor being
    built, here; returns how many. For tasks a process will likely run soon (those its
    model's shapes take, while its kernels compile): its first run then loads them from
    Numba's cache, built meanwhile on other cores, rather than building them then (each
    seconds of LLVM on a first run); a task no helper has started when it is first run is
    built here, while the helpers build the others (`rvm.kernels.apart.in_background`).
    Names without a task are skipped."""
    with _task_lock:
        todo = [
            t
            for t in dict.fromkeys(tasks)
            if t[0] in _task_bodies and t not in _compiled and t not in _prefetched
        ]
        pending = apart.in_background([_builder(*t) for t in todo]) if todo else None
        if pending is None:
            return 0
        _prefetched.update(zip(todo, pending))
    return len(todo)


def _builder(name: str, dtype: str) -> Callable[[], None]:
    """What a background helper runs to build task ``name`` for ``dtype`` (`prefetch`)."""
    return lambda: require_task(name, dtype)


def required_tasks() -> list[tuple[str, str]]:
    """The (task, dtype) pairs this process has compiled or loaded."""
    return sorted(_compiled)


@ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)
def _resolve(at: int) -> int:
    """The address of the task whose slot is at ``at``, compiled or loaded now (a C callback:
    compiled code calls it, holding no lock, when it finds the slot empty)."""
    from rvm.kernels.numba_cache import light_loads

    name, dtype = _slot_keys[at]
    try:
        with light_loads():
            require_task(name, dtype)
    except BaseException as err:  # noqa: BLE001 - nothing can be raised through C
        # Running without the task would leave its chunks undone: a wrong answer.
        logger.critical("rvm: the library task %s (%s) failed to build: %r", name, dtype, err)
        sys.stderr.write(f"rvm: the library task {name} ({dtype}) failed to build: {err!r}\n")
        sys.stderr.flush()
        os.abort()
    return _slots[name, dtype].value


RESOLVE = "rvm_task_resolve"
llvm.add_symbol(RESOLVE, ctypes.cast(_resolve, ctypes.c_void_p).value)


@nb.njit(nogil=True, cache=True)
def job(data):  # type: ignore[no-untyped-def]
    """The caller's job array, from a task's ``data`` (its length is its first entry)."""
    return nb.carray(data, data[0])


def registered_int(builder: ir.IRBuilder, symbol: str) -> ir.GlobalVariable:
    """The int64 registered with llvmlite as ``symbol``, declared in ``builder``'s module (an
    external global, resolved when the code is linked: cached code too)."""
    value = builder.module.globals.get(symbol)
    if value is None:
        value = ir.GlobalVariable(builder.module, ir.IntType(64), symbol)
        value.linkage = "external"
    return value


def _global_flag(symbol: str):  # type: ignore[no-untyped-def]
    """The intrinsic reading the int64 registered as ``symbol`` as a boolean."""

    @intrinsic
    def flag(typingctx):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            value = builder.load(registered_int(builder, symbol))
            return builder.icmp_signed("!=", value, ir.IntType(64)(0))

        return nt.boolean(), codegen

    return flag


_flag = _global_flag("rvm_parallel_enabled")
affine = _global_flag("rvm_affine_units")
"""Whether cuts give their units by thread (`set_affine`), in compiled code."""


@jit(nogil=True, cache=True)
def piece_range(piece, pieces, total, align):  # type: ignore[no-untyped-def]
    """(lo, hi): piece ``piece`` of ``pieces`` equal runs of ``total`` elements, each starting
    on a multiple of ``align`` (whole vectors between them), the last one to ``total``: each
    boundary the multiple of ``align`` nearest the equal one (`_nearest_step`)."""
    lo = _nearest_step(piece, pieces, total, align)
    hi = total if piece == pieces - 1 else _nearest_step(piece + 1, pieces, total, align)
    return lo, hi


@jit(nogil=True, cache=True, inline="always")
def _nearest_step(piece, pieces, total, align):  # type: ignore[no-untyped-def]
    """The multiple of ``align`` nearest ``piece * total / pieces``, at most the last one in
    ``total`` (a boundary inside stays on the grid; the last piece takes the rest).
    Rounded down, a short side left one piece most of the work: a 1x1 convolution's 169
    positions (13 x 13) in tiles of 48 cut 48 + 121, its two threads' pieces 16 and 41 us
    (squeezenet's 64 -> 256, one Zen 4 core each); nearest, 96 + 73."""
    return min(total // align, (2 * piece * total // pieces + align) // (2 * align)) * align


GUIDED_LAST = 3
"""A guided cut's first pieces against its last (`guided_range`): the threads' last claims a
third of their first, so that the thread that runs out of pieces first waits at most about
a last piece (a third of an equal cut's) for the others."""


@jit(nogil=True, cache=True)
def _guided_before(piece, rounds, threads):  # type: ignore[no-untyped-def]
    """The weight of a guided cut's pieces before ``piece`` (`guided_range`): piece i weighs
    ``GUIDED_LAST * (rounds - 1) - (GUIDED_LAST - 1) * (i // threads)``, so a round's pieces
    weigh the same, each round less than the one before by the same step, the last round
    ``1 / GUIDED_LAST`` of the first."""
    first, step = GUIDED_LAST * (rounds - 1), GUIDED_LAST - 1
    k, rem = piece // threads, piece % threads
    return threads * (first * k - step * k * (k - 1) // 2) + rem * (first - step * k)


@jit(nogil=True, cache=True)
def guided_range(piece, pieces, threads, total, align):  # type: ignore[no-untyped-def]
    """(lo, hi): piece ``piece`` of ``pieces`` runs of ``total`` elements claimed in index
    order by ``threads`` threads, in rounds of ``threads`` pieces whose sizes shrink round by
    round (guided scheduling: the last round's pieces a `GUIDED_LAST`-th of the first's,
    sizes in proportion to `_guided_before`'s weights), each starting on a multiple of
    ``align``, the last one to ``total``. The threads then finish together: the first one
    out of pieces waits at most about a last piece, where runs of equal size leave it waiting
    up to a whole one (half on average). Equal runs (`piece_range`) where the pieces make
    one round or the runs are too few whole steps of ``align`` for the smallest to get one
    (fewer than 2 a piece). The runs' boundaries are multiples of ``align``, as
    `piece_range`'s: on the same grid of tiles as a product unsplit."""
    if pieces <= threads or total // align < 2 * pieces:
        return piece_range(piece, pieces, total, align)
    rounds = (pieces + threads - 1) // threads
    whole = _guided_before(pieces, rounds, threads)
    lo = _guided_before(piece, rounds, threads) * total // whole // align * align
    if piece == pieces - 1:
        return lo, total
    return lo, _guided_before(piece + 1, rounds, threads) * total // whole // align * align


@jit(nogil=True, cache=True)
def affine_unit(counters, units, threads):  # type: ignore[no-untyped-def]
    """The unit of work (0 .. ``units`` - 1) the calling piece does, where a job's ``units``
    pieces (a phase's: each calls this once, so each unit is done once) give unit u to thread
    ``u % threads`` (`rvm.kernels.pool_thread.index`) first: each thread takes its own in
    order, then, out of its own, the next of another's (a late thread's are taken, not waited
    for). So a thread does the same units at every call while the threads keep pace: it
    writes again the lines it wrote last time, its own core's. ``counters``: the address of
    ``threads`` int64 zeros, one a thread, the phase's pieces' alone."""
    t = min(pool_thread.index(), threads - 1)
    for k in range(threads):
        owner = (t + k) % threads
        u = owner + workpool.add_at(counters + 8 * owner, 1) * threads
        if u < units:
            return u
    return -1  # not reached: a piece of the phase finds a unit left


@nb.njit(nogil=True, cache=True)
def threads():  # type: ignore[no-untyped-def]
    """How many threads a large loop's chunks run on (see the module docstring)."""
    return workpool.threads() if _flag() else 1


@nb.njit(nogil=True, cache=True)
def splits(work):  # type: ignore[no-untyped-def]
    """Whether a loop touching ``work`` elements is worth cutting into chunks (`MIN_WORK`)."""
    return work >= MIN_WORK


@nb.njit(nogil=True, cache=True)
def even(parts, threads):  # type: ignore[no-untyped-def]
    """``parts`` pieces of equal work rounded down to a multiple of ``threads`` when there are
    as many: each thread then claims as many pieces, where 3 on 2 threads left one thread two
    and the other idle for a third of the time (the job taking 2/3 of the work's time rather
    than 1/2)."""
    return parts // threads * threads if parts >= threads else parts


@nb.njit(nogil=True, cache=True)
def pieces(threads, most):  # type: ignore[no-untyped-def]
    """How many pieces a job on ``threads`` threads is cut into, ``most`` at most (what its
    work is worth): up to `PIECES_PER_THREAD` a thread, a multiple of the threads where there
    are as many (`even`). The one rule of the library's cuts."""
    return even(min(PIECES_PER_THREAD * threads, most), threads)


@nb.njit(nogil=True, cache=True)
def chunks(work, items):  # type: ignore[no-untyped-def]
    """How many chunks a loop over ``items`` independent items (planes, channels) touching
    ``work`` elements is cut into: 1 below `MIN_WORK` (or on one thread); else up to
    `PIECES_PER_THREAD` a thread, of ``MIN_WORK // PIECES_PER_THREAD`` elements at least (a
    few microseconds of a core's work against a claim's fraction of one), a multiple of the
    threads where there are as many (`even`), at most ``items``."""
    t = threads()
    if t < 2 or not splits(work):
        return 1
    return pieces(t, min(items, max(t, work * PIECES_PER_THREAD // MIN_WORK)))


def runner(name: str):  # type: ignore[no-untyped-def]
    """The intrinsic ``run(x, chunks, job)``: task ``name`` of ``x``'s dtype once per chunk,
    ``chunks`` of them, on the pool; ``job`` (int64, 1-d, C) is its data."""

    @intrinsic
    def run(typingctx, x, chunks, job):  # type: ignore[no-untyped-def]
        if not (isinstance(x, nt.Array) and str(x.dtype) in DTYPES):
            return None
        if not isinstance(chunks, nt.Integer):
            return None
        if not (isinstance(job, nt.Array) and job.dtype == nt.int64 and job.layout == "C"):
            return None

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            i64 = ir.IntType(64)
            jb = context.make_array(job)(context, builder, args[2])
            task = _task_address(builder, slot_symbol(name, str(x.dtype)))
            values = [
                task,
                context.cast(builder, args[1], chunks, nt.int64),
                builder.ptrtoint(jb.data, i64),
            ]
            fnty = ir.FunctionType(ir.VoidType(), [i64] * 3)
            with workpool.gil_released(builder):
                builder.call(
                    cgutils.get_or_insert_function(builder.module, fnty, workpool.RUN), values
                )
            return context.get_dummy_value()

        return nt.void(x, chunks, job), codegen

    return run


def caller(name: str, dtype: str | None = None):  # type: ignore[no-untyped-def]
    """The intrinsic ``call(x, chunk, job)``: chunk ``chunk`` of task ``name`` of ``x``'s
    dtype, in the calling thread; ``job`` (int64, 1-d, C) is its data. A library function
    splits its methods into tasks called so, and each is built when first run (a model's
    first run builds the methods its shapes take, not every method the function has), and
    code that several call (the GEMM) is built once, as a task, not into each of them.
    With a ``dtype`` (code on addresses, with no array to type it), ``call(chunk, job)``
    runs the task of that dtype."""

    def typed(x: nt.Type, chunk: nt.Type, job: nt.Type) -> bool:
        return (
            (dtype is not None or (isinstance(x, nt.Array) and str(x.dtype) in DTYPES))
            and isinstance(chunk, nt.Integer)
            and isinstance(job, nt.Array)
            and job.dtype == nt.int64
            and job.layout == "C"
        )

    def codegen(context, builder, x, chunk, job, args):  # type: ignore[no-untyped-def]
        i64 = ir.IntType(64)
        like = context.get_value_type(nt.CPointer(x))
        jb = context.make_array(job)(context, builder, args[1])
        task = _task_address(builder, slot_symbol(name, str(x)))
        fnty = ir.FunctionType(ir.VoidType(), [i64, like, jb.data.type])
        fn = builder.inttoptr(task, fnty.as_pointer())
        k = context.cast(builder, args[0], chunk, nt.int64)
        builder.call(fn, [k, ir.Constant(like, None), jb.data])
        return context.get_dummy_value()

    if dtype is not None:
        scalar = nb.from_dtype(np.dtype(dtype))

        @intrinsic
        def call_typed(typingctx, chunk, job):  # type: ignore[no-untyped-def]
            if not typed(None, chunk, job):
                return None
            return nt.void(chunk, job), lambda context, builder, signature, args: codegen(
                context, builder, scalar, chunk, job, args
            )

        return call_typed

    @intrinsic
    def call(typingctx, x, chunk, job):  # type: ignore[no-untyped-def]
        if not typed(x, chunk, job):
            return None
        return nt.void(x, chunk, job), lambda context, builder, signature, args: codegen(
            context, builder, x.dtype, chunk, job, args[1:]
        )

    return call


def stack_job(size: int):  # type: ignore[no-untyped-def]
    """The intrinsic making an int64 array of ``size`` elements in the calling function's
    stack frame: the job of a task that ends before its caller returns (run in the calling
    thread, or a job of the pool, which returns when every piece is done). A heap array cost
    a one-row product of a microsecond or less 3-5% of it."""
    array = nt.Array(nt.int64, 1, "C")

    @intrinsic
    def job(typingctx):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            i64 = ir.IntType(64)
            data = cgutils.alloca_once(builder, i64, size=size)
            out = context.make_array(array)(context, builder)
            populate_array(
                out, data=data, shape=[i64(size)], strides=[i64(8)], itemsize=i64(8), meminfo=None
            )
            return out._getvalue()

        return array(), codegen

    return job


def _task_address(builder: ir.IRBuilder, symbol: str) -> ir.Value:
    """The task's address from its slot ``symbol``, resolved (`_resolve`) when still 0."""
    i64 = ir.IntType(64)
    slot = registered_int(builder, symbol)
    known = builder.load(slot)
    with builder.if_else(builder.icmp_signed("!=", known, i64(0)), likely=True) as (then, other):
        with then:
            bb_known = builder.basic_block
        with other:
            fnty = ir.FunctionType(i64, [i64])
            resolve = cgutils.get_or_insert_function(builder.module, fnty, RESOLVE)
            resolved = builder.call(resolve, [builder.ptrtoint(slot, i64)])
            bb_resolved = builder.basic_block
    address = builder.phi(i64)
    address.add_incoming(known, bb_known)
    address.add_incoming(resolved, bb_resolved)
    return address


@intrinsic
def address(typingctx, a):  # type: ignore[no-untyped-def]
    """The address of array ``a``'s data, as an int64."""
    if not isinstance(a, nt.Array):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        arr = context.make_array(a)(context, builder, args[0])
        return builder.ptrtoint(arr.data, ir.IntType(64))

    return nt.int64(a), codegen


@intrinsic
def _pointer(typingctx, at, like):  # type: ignore[no-untyped-def]
    """Address ``at`` (int64) as a pointer of ``like``'s type."""
    if not isinstance(like, nt.CPointer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.inttoptr(args[0], context.get_value_type(like))

    return like(nt.int64, like), codegen


@jit(nogil=True, cache=True)
def array_at(at, shape, like):  # type: ignore[no-untyped-def]
    """The C-contiguous array of ``shape`` at address ``at``, of the dtype ``like`` points to."""
    return nb.carray(_pointer(at, like), shape)
