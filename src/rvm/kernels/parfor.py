"""Both cores for the kernel library's large loops: chunks of work on rvm's thread pool.

A library function splits a large loop (pooling, lrn) into chunks, one piece each of a job on
`rvm.kernels.workpool`: the calling thread and the pool's helpers claim them. A chunk
is a task, compiled once per dtype as a `numba.cfunc` and registered under a fixed symbol, so
the library's cached code calls it as a kernel calls the library
(`rvm.kernels.entry`): the symbol is resolved when the cached code is linked.

- `export_task(name, body)` declares ``body(chunk, like, data)`` as the task ``name``: it
  runs chunk ``chunk`` (0 to ``chunks - 1``) of the job whose int64 array is ``data``
  (`job(data)` reads it; ``like`` is a null pointer typed by the dtype, for `array_at`);
- `runner(name)` is the intrinsic ``run(x, chunks, job)`` that runs the task of ``x``'s
  dtype once per chunk, ``chunks`` of them, on the pool;
- `threads()` is how many chunks to cut: the pool's threads (the caller and its helpers),
  or 1 with splitting off (`enable`; the environment variable ``RVM_SPLIT_LOOPS=0`` starts
  it off);
- `address(array)` / `array_at(address, shape, like)` carry arrays through a job;
- `MIN_WORK`: the size (elements touched) from which a loop is worth splitting, written once.

No Numba threading layer is involved (its workqueue layer aborts when entered from several
threads at once, and GNU OpenMP in a forked child): several VMs in several threads each run
their loops, on the pool or, while another's job holds it, in their own thread.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numba as nb
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels import DTYPES, workpool
from rvm.kernels.threads import split_loops_from_environment

MIN_WORK = 1 << 18
"""Elements a loop touches from which its chunks go to two or more threads: below it a
helper's wake-up (a few microseconds) outweighs the work."""

# Read by compiled code through the symbol below.
_enabled = ctypes.c_int64(int(split_loops_from_environment()))
llvm.add_symbol("rvm_parallel_enabled", ctypes.addressof(_enabled))
_task_bodies: dict[str, Callable[..., None]] = {}  # exported tasks by name
_compiled: dict[tuple[str, str], object] = {}  # (name, dtype) -> its cfunc, kept alive


def enable(on: bool) -> None:
    """Split large library loops over the pool's threads (``on``) or not. On by default,
    unless ``RVM_SPLIT_LOOPS=0``."""
    _enabled.value = int(bool(on))


def enabled() -> bool:
    """Whether large library loops are split (`enable`)."""
    return bool(_enabled.value)


def task_symbol(name: str, dtype: str) -> str:
    """The registered symbol of task ``name`` for ``dtype``."""
    return f"rvm_task_{name}_{dtype}"


def export_task(name: str, body: Callable[..., None]) -> None:
    """Declare ``body(chunk, like, data)`` (module level, for Numba's cache) as the task
    ``name``; `require_task` compiles it for a dtype (the library entry point of the same
    name requires it, `rvm.kernels.entry.require`). ``chunk`` is the chunk it runs,
    ``job(data)`` the caller's int64 array; ``like`` is a null pointer typed by the dtype
    (never read: pass it to `array_at`). Its C signature is a pool piece's
    (`rvm.kernels.workpool`)."""
    _task_bodies[name] = body


def require_task(name: str, dtype: str) -> None:
    """Compile task ``name`` for ``dtype`` (or load it from Numba's cache) and register its
    symbol, unless this process already has; a name without a task is a no-op."""
    if (name, dtype) in _compiled or name not in _task_bodies:
        return
    ptr = nt.CPointer(nb.from_dtype(np.dtype(dtype)))
    sig = nt.void(nt.int64, ptr, nt.CPointer(nt.int64))
    cfunc = nb.cfunc(sig, cache=True, error_model="numpy", boundscheck=False)(_task_bodies[name])
    llvm.add_symbol(task_symbol(name, dtype), cfunc.address)
    _compiled[name, dtype] = cfunc


@nb.njit(nogil=True, cache=True)
def job(data):  # type: ignore[no-untyped-def]
    """The caller's job array, from a task's ``data`` (its length is its first entry)."""
    return nb.carray(data, data[0])


@intrinsic
def _flag(typingctx):  # type: ignore[no-untyped-def]
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64 = ir.IntType(64)
        flag = builder.module.globals.get("rvm_parallel_enabled")
        if flag is None:
            flag = ir.GlobalVariable(builder.module, i64, "rvm_parallel_enabled")
            flag.linkage = "external"
        return builder.icmp_signed("!=", builder.load(flag), i64(0))

    return nt.boolean(), codegen


@nb.njit(nogil=True, cache=True)
def threads():  # type: ignore[no-untyped-def]
    """How many chunks a large loop is cut into (see the module docstring)."""
    return workpool.threads() if _flag() else 1


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
            i64, i8p = ir.IntType(64), ir.IntType(8).as_pointer()
            jb = context.make_array(job)(context, builder, args[2])
            task_ty = ir.FunctionType(ir.VoidType(), [i64, i8p, i64.as_pointer()])
            task = cgutils.get_or_insert_function(
                builder.module, task_ty, task_symbol(name, str(x.dtype))
            )
            values = [
                builder.ptrtoint(task, i64),
                context.cast(builder, args[1], chunks, nt.int64),
                builder.ptrtoint(jb.data, i64),
            ]
            fnty = ir.FunctionType(ir.VoidType(), [i64] * 3)
            builder.call(cgutils.get_or_insert_function(builder.module, fnty, workpool.RUN), values)
            return context.get_dummy_value()

        return nt.void(x, chunks, job), codegen

    return run


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


@nb.njit(nogil=True, cache=True)
def array_at(at, shape, like):  # type: ignore[no-untyped-def]
    """The C-contiguous array of ``shape`` at address ``at``, of the dtype ``like`` points to."""
    return nb.carray(_pointer(at, like), shape)
