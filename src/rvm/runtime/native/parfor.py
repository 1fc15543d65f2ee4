"""Both cores for the kernel library's large loops: chunks of work on Numba's thread pool.

Numba's ``parallel=True`` functions cannot be cached (their code holds the thread pool's
addresses), so the library, compiled once and cached, would compile again in every process.
Instead a library function calls the pool's C entry point by symbol, as a kernel calls the
library (`rvm.runtime.native.entry`): ``numba_parallel_for``, which runs a task function once
per chunk on ``n`` threads (the calling thread's Numba thread count, which
`rvm.set_num_threads` sets). Symbols are resolved when the cached code is linked.

- `export_task(name, body)` compiles ``body(args, dims, dtype_ptr, data)`` as the task
  ``name`` of each float dtype; in it, `chunk` (0 to ``n - 1``) and `job` (an int64 array
  the caller filled) read its arguments;
- `runner(name)` is the intrinsic ``run(x, chunks, job)`` that runs the task of ``x``'s
  dtype once per entry of the int64 array ``chunks`` (each gets its entry);
- `threads()` is how many chunks to cut: Numba's thread count for the calling thread, or 1
  when the pool cannot be entered from several threads at once (Numba's workqueue layer
  aborts then; the OpenMP and TBB layers do not), did not start, or belongs to the parent
  of this forked process;
- `address(array)` / `array_at(address, shape, like)` carry arrays through a job;
- `MIN_WORK`: the size (elements touched) from which a loop is worth splitting, written once.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable

import numba as nb
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.runtime.native.entry import DTYPES

logger = logging.getLogger("rvm.jit")

MIN_WORK = 1 << 18
"""Elements a loop touches from which its chunks go to two or more threads: below it the
pool's wake-up (a few microseconds) outweighs the work."""

_SAFE_LAYERS = ("omp", "tbb")
_enabled = ctypes.c_int64(0)  # read by compiled code through the symbol below
_task_bodies: dict[str, Callable[..., None]] = {}  # exported tasks by name
_compiled: dict[tuple[str, str], object] = {}  # (name, dtype) -> its cfunc, kept alive


# Stand-ins for the pool's symbols when it does not start (the library's code still links;
# with splitting off it never calls them).
_one_thread = ctypes.CFUNCTYPE(ctypes.c_int64)(lambda: 1)
_no_pool = ctypes.CFUNCTYPE(None)(lambda: None)


def _disable_in_child() -> None:
    # GNU OpenMP aborts a forked child that enters the pool its parent started.
    _enabled.value = 0


def _start_pool() -> None:
    """Start Numba's thread pool (registering ``numba_parallel_for`` and
    ``get_num_threads``) and enable splitting if its layer takes concurrent callers; a
    process forked from this one runs the loops on one thread."""
    llvm.add_symbol("rvm_parallel_enabled", ctypes.addressof(_enabled))
    os.register_at_fork(after_in_child=_disable_in_child)
    try:
        nb.get_num_threads()  # launches the threading layer
        layer = nb.threading_layer()
    except (ValueError, RuntimeError, OSError, ImportError) as err:
        logger.info("Numba's thread pool did not start (%s): library loops run on one thread", err)
        llvm.add_symbol("get_num_threads", ctypes.cast(_one_thread, ctypes.c_void_p).value)
        llvm.add_symbol("numba_parallel_for", ctypes.cast(_no_pool, ctypes.c_void_p).value)
        return
    if layer in _SAFE_LAYERS:
        _safe.append(True)
        enable(os.environ.get(ENV_VAR, "").strip() == "1")
    else:
        logger.info(
            "Numba's %r threading layer aborts when several threads enter it: library loops "
            "run on one thread (install OpenMP or TBB for both cores)",
            layer,
        )


ENV_VAR = "RVM_SPLIT_LOOPS"
_safe: list[bool] = []  # [True] once a pool that takes concurrent callers has started


def enable(on: bool) -> None:
    """Split large library loops over threads (``on``) or not. Off by default (set
    ``RVM_SPLIT_LOOPS=1`` to start on): in a model, each pool follows a GEMM whose OpenBLAS
    threads keep spinning on the other core, and the pool's second thread waited for it (a
    0.2-0.4 ms pool took 1.7-2.8 ms on two threads on an idle 2-core machine; alone it
    takes half)."""
    _enabled.value = int(bool(on) and bool(_safe))


_start_pool()


def task_symbol(name: str, dtype: str) -> str:
    """The registered symbol of task ``name`` for ``dtype``."""
    return f"rvm_task_{name}_{dtype}"


def export_task(name: str, body: Callable[..., None]) -> None:
    """Declare ``body(args, dims, dtype_ptr, data)`` (module level, for Numba's cache) as the
    task ``name``; `require_task` compiles it for a dtype (the library entry point of the same
    name requires it, `rvm.runtime.native.entry.require`). ``chunk(args)`` is the chunk it
    runs, ``job(data)`` the caller's int64 array; ``dtype_ptr`` is a pointer typed by the
    dtype (never read: pass it to `array_at`)."""
    _task_bodies[name] = body


def require_task(name: str, dtype: str) -> None:
    """Compile task ``name`` for ``dtype`` (or load it from Numba's cache) and register its
    symbol, unless this process already has; a name without a task is a no-op."""
    if (name, dtype) in _compiled or name not in _task_bodies:
        return
    ptr = nt.CPointer(nb.from_dtype(np.dtype(dtype)))
    i64p = nt.CPointer(nt.int64)
    sig = nt.void(nt.CPointer(i64p), i64p, ptr, i64p)
    cfunc = nb.cfunc(sig, cache=True, error_model="numpy", boundscheck=False)(_task_bodies[name])
    llvm.add_symbol(task_symbol(name, dtype), cfunc.address)
    _compiled[name, dtype] = cfunc


@nb.njit(nogil=True, cache=True)
def chunk(args):  # type: ignore[no-untyped-def]
    """The chunk a task runs, from its ``args``."""
    return args[0][0]


@nb.njit(nogil=True, cache=True)
def job(data):  # type: ignore[no-untyped-def]
    """The caller's job array, from a task's ``data`` (its length is its first entry)."""
    return nb.carray(data, data[0])


@intrinsic
def threads(typingctx):  # type: ignore[no-untyped-def]
    """How many chunks a large loop is cut into (see the module docstring)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64 = ir.IntType(64)
        flag = builder.module.globals.get("rvm_parallel_enabled")
        if flag is None:
            flag = ir.GlobalVariable(builder.module, i64, "rvm_parallel_enabled")
            flag.linkage = "external"
        fnty = ir.FunctionType(i64, [])
        get = cgutils.get_or_insert_function(builder.module, fnty, "get_num_threads")
        count = builder.call(get, [])
        on = builder.icmp_signed("!=", builder.load(flag), i64(0))
        return builder.select(on, count, i64(1))

    return nt.int64(), codegen


def runner(name: str):  # type: ignore[no-untyped-def]
    """The intrinsic ``run(x, chunks, job)``: task ``name`` of ``x``'s dtype once per entry
    of ``chunks`` (int64, 1-d, C), on Numba's pool; ``job`` (int64, 1-d, C) is its data."""

    @intrinsic
    def run(typingctx, x, chunks, job):  # type: ignore[no-untyped-def]
        if not (isinstance(x, nt.Array) and str(x.dtype) in DTYPES):
            return None
        for a in (chunks, job):
            if not (isinstance(a, nt.Array) and a.dtype == nt.int64 and a.layout == "C"):
                return None

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            i64, i8p = ir.IntType(64), ir.IntType(8).as_pointer()
            ch = context.make_array(chunks)(context, builder, args[1])
            jb = context.make_array(job)(context, builder, args[2])
            n = builder.extract_value(ch.shape, 0)
            arg0 = cgutils.alloca_once(builder, i8p)
            builder.store(builder.bitcast(ch.data, i8p), arg0)
            dims = cgutils.alloca_once_value(builder, n)
            steps = cgutils.alloca_once_value(builder, i64(8))
            task_ty = ir.FunctionType(ir.VoidType(), [i8p.as_pointer(), i64.as_pointer(),
                                                      i64.as_pointer(), i8p])  # fmt: skip
            task = cgutils.get_or_insert_function(
                builder.module, task_ty, task_symbol(name, str(x.dtype))
            )
            pfor_ty = ir.FunctionType(ir.VoidType(), [i8p] * 5 + [i64] * 3)
            pfor = cgutils.get_or_insert_function(builder.module, pfor_ty, "numba_parallel_for")
            ptrs = [task, arg0, dims, steps, jb.data]
            builder.call(pfor, [builder.bitcast(p, i8p) for p in ptrs] + [i64(0), i64(1), n])
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
