"""How many threads rvm's kernels use: the calling thread plus the helpers of rvm's own pool.

`set_num_threads(n)` makes jobs of native work (the pieces of a large GEMM, GEMV or library
loop, `rvm.kernels.workpool`) run on the calling thread and ``n - 1`` pool helpers;
`get_num_threads()` reads it back. Without a call, the count is the environment variable
``RVM_NUM_THREADS`` if set, else every CPU this process may run on
(``os.sched_getaffinity``). Importing rvm changes nothing; the first `VirtualMachine` (or
`set_num_threads`) applies the environment (`apply_environment`), starts the pool's helpers
if jit kernels are loaded, and sets NumPy's OpenBLAS to one thread, process-wide.

Why rvm's own pool and OpenBLAS on one thread: OpenBLAS threads a GEMM only when it is large,
runs one threaded GEMM at a time per process, and its threads spin after each call on the
core the next kernel wants; Numba's threading layers either abort when entered from several
threads at once (workqueue) or in a forked child (GNU OpenMP). rvm's pool cuts each large
product or loop into pieces that the calling thread and the helpers claim; a job that finds
the pool busy with another VM's job runs in its own thread. So several VMs in several
threads share the cores without oversubscription collapse, and one VM uses them all. The
numpy kernels' ``np.dot`` runs on one thread as a consequence.

``RVM_SPLIT_LOOPS=0`` turns off the splitting of library loops (pooling, lrn;
`rvm.kernels.parfor`, which reads it here when it is imported).
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

ENV_VAR = "RVM_NUM_THREADS"
SPLIT_ENV_VAR = "RVM_SPLIT_LOOPS"

# NumPy's bundled OpenBLAS spelling (scipy_ prefix, ILP64 64_ suffix), then other builds'.
_SET_NAMES = (
    "scipy_openblas_set_num_threads64_",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)
_GET_NAMES = tuple(n.replace("_set_", "_get_") for n in _SET_NAMES)
_POOL = "rvm.kernels.workpool"

_lock = threading.Lock()
_count: int | None = None  # the chosen count, once chosen (explicitly or at first use)
_openblas_set = False  # NumPy's OpenBLAS set to one thread


@functools.cache
def numpy_core_library() -> ctypes.CDLL | None:
    """NumPy's core extension module, which exports NumPy's BLAS (None if it cannot be
    loaded)."""
    for module in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            return ctypes.CDLL(importlib.import_module(module).__file__)
        except (ImportError, OSError, TypeError):
            continue
    return None


@functools.cache
def _openblas_control() -> tuple[object, object] | None:
    """NumPy's OpenBLAS (set, get) thread functions; None without OpenBLAS thread control."""
    lib = numpy_core_library()
    if lib is None:
        return None
    for set_name, get_name in zip(_SET_NAMES, _GET_NAMES, strict=True):
        if hasattr(lib, set_name) and hasattr(lib, get_name):
            setter, getter = getattr(lib, set_name), getattr(lib, get_name)
            setter.argtypes, setter.restype = [ctypes.c_int], None
            getter.argtypes, getter.restype = [], ctypes.c_int
            return setter, getter
    return None


def openblas_threads() -> int | None:
    """NumPy's OpenBLAS thread count (None without OpenBLAS thread control)."""
    control = _openblas_control()
    return None if control is None else int(control[1]())  # type: ignore[operator]


def _check(n: object, where: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{where}: expected a positive whole number of threads, got {n!r}")
    return n


def _all_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _from_environment() -> int:
    text = os.environ.get(ENV_VAR, "").strip()
    if not text:
        return _all_cpus()
    try:
        value: object = int(text)
    except ValueError:
        value = text
    return _check(value, f"environment variable {ENV_VAR}")


def split_loops_from_environment() -> bool:
    """Whether ``RVM_SPLIT_LOOPS`` leaves library loops split (anything but ``0``; unset
    is on).

    Raises:
        ValueError: The variable is set to something other than ``0`` or ``1``.
    """
    text = os.environ.get(SPLIT_ENV_VAR, "").strip()
    if text not in ("", "0", "1"):
        raise ValueError(f"environment variable {SPLIT_ENV_VAR}: expected 0 or 1, got {text!r}")
    return text != "0"


def _chosen() -> int:
    """The count, chosen from the environment the first time (with `_lock` held)."""
    global _count
    if _count is None:
        _count = _from_environment()  # a bad value raises at every use until fixed
    return _count


def _size_pool(import_it: bool) -> None:
    """Gives the pool ``count - 1`` helpers: always when ``import_it``, else only if jit
    code has loaded it (a process running numpy kernels alone never loads Numba)."""
    if not import_it and _POOL not in sys.modules:
        return
    importlib.import_module(_POOL).set_helpers(_chosen() - 1)


def pool_call() -> Callable[[list[bool], int, Callable[..., Any], tuple], Any] | None:
    """The pool's `call` (`rvm.kernels.workpool.call`) that a VM makes each call from Python
    through (it wakes sleeping helpers as the call begins when that helps), or None while no
    jit code has loaded the pool."""
    pool = sys.modules.get(_POOL)
    return None if pool is None else pool.call


def _openblas_to_one_thread() -> None:
    """Sets NumPy's OpenBLAS to one thread, once per process (with `_lock` held): the pool's
    GEMM pieces call it from several threads at once, each piece one thread's work."""
    global _openblas_set
    if not _openblas_set:
        control = _openblas_control()
        if control is not None:
            control[0](1)  # type: ignore[operator]
        _openblas_set = True


def apply_environment() -> None:
    """What the first `VirtualMachine` does (and each after it, cheaply): chooses the count
    (``RVM_NUM_THREADS`` or every CPU, unless `set_num_threads` chose), sets NumPy's
    OpenBLAS to one thread, and gives the pool its helpers if jit code has loaded it (again
    in a forked child, whose pool starts without helpers).

    Raises:
        ValueError: ``RVM_NUM_THREADS`` is set to a value it does not take.
    """
    with _lock:
        _chosen()
        _openblas_to_one_thread()
        _size_pool(import_it=False)


def _reset_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a thread of the parent may have held it


os.register_at_fork(after_in_child=_reset_in_child)


def set_num_threads(n: int) -> None:
    """Sets how many threads rvm's kernels use: the calling thread plus ``n - 1`` helpers of
    rvm's pool, process-wide (started or stopped now), and NumPy's OpenBLAS to one thread.
    Overrides ``RVM_NUM_THREADS``.

    Args:
        n: The number of threads, at least 1.

    Raises:
        ValueError: `n` is not a positive int.
    """
    global _count
    n = _check(n, "rvm.set_num_threads")
    with _lock:
        _count = n
        _openblas_to_one_thread()
        _size_pool(import_it=True)


def get_num_threads() -> int:
    """How many threads rvm's kernels use (see `set_num_threads`); chooses the count from
    ``RVM_NUM_THREADS`` or the CPUs first, if not yet done.

    Raises:
        ValueError: ``RVM_NUM_THREADS`` is set to a value it does not take.
    """
    with _lock:
        return _chosen()
