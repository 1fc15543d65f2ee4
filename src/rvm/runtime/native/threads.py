"""How many threads rvm's kernels use: NumPy's OpenBLAS pool and Numba's.

`set_num_threads(n)` sets both; `get_num_threads()` reads back the BLAS count (Numba's when
NumPy's BLAS has no OpenBLAS thread control). The environment variable ``RVM_NUM_THREADS``
does the same at first use (the first `VirtualMachine` or `get_num_threads` call), so a
deployment can choose without code. Without either, the libraries keep their own defaults:
importing rvm changes no process-wide setting.

The BLAS is the one jit kernels call (`rvm.runtime.native.blas`) and the numpy backend uses:
NumPy's bundled OpenBLAS, whose thread count is process-wide and read on every GEMM. Numba's
count is per calling thread (Numba's rule), capped at ``numba.config.NUMBA_NUM_THREADS``;
the kernel library's large loops (pooling, lrn) can split over that many threads of Numba's
pool (`rvm.runtime.native.parfor`; off unless ``RVM_SPLIT_LOOPS=1``). Several
VMs in several threads (one VM per thread) share the one BLAS pool, which serializes their
GEMMs rather than multiplying threads, so a pool of 1-2 suits many concurrent VMs.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import os
import threading
from typing import Any

logger = logging.getLogger("rvm.jit")

ENV_VAR = "RVM_NUM_THREADS"

# NumPy's bundled OpenBLAS spelling (scipy_ prefix, ILP64 64_ suffix), then other builds'.
_SET_NAMES = (
    "scipy_openblas_set_num_threads64_",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)
_GET_NAMES = tuple(n.replace("_set_", "_get_") for n in _SET_NAMES)

_lock = threading.Lock()
_env_read = False
_blas: tuple[Any, Any] | None | bool = False  # False: not looked up yet; None: not found


def _blas_control() -> tuple[Any, Any] | None:
    """NumPy's OpenBLAS (set, get) thread functions, looked up once; None, said once in the
    log, when NumPy's core module does not export them."""
    global _blas
    if _blas is not False:
        return _blas  # type: ignore[return-value]
    _blas = None
    for module in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            lib = ctypes.CDLL(importlib.import_module(module).__file__)
        except (ImportError, OSError, TypeError):
            continue
        for set_name, get_name in zip(_SET_NAMES, _GET_NAMES, strict=True):
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                setter, getter = getattr(lib, set_name), getattr(lib, get_name)
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter.argtypes, getter.restype = [], ctypes.c_int
                _blas = (setter, getter)
                return _blas
        break
    logger.warning(
        "NumPy's BLAS exports no OpenBLAS thread control (%s): rvm sets only Numba's thread "
        "count; the BLAS keeps its own",
        " / ".join(_SET_NAMES),
    )
    return None


def _check(n: object, where: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{where}: expected a positive whole number of threads, got {n!r}")
    return n


def _apply(n: int) -> None:
    import numba  # with the first use, not with `import rvm`

    control = _blas_control()
    if control is not None:
        control[0](n)
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


def apply_environment() -> None:
    """Applies ``RVM_NUM_THREADS`` once per process, if it is set (a no-op after that, and
    after an explicit `set_num_threads`).

    Raises:
        ValueError: The variable is set but is not a positive whole number.
    """
    global _env_read
    if _env_read:
        return
    with _lock:
        if _env_read:
            return
        text = os.environ.get(ENV_VAR, "").strip()
        if text:
            try:
                value: object = int(text)
            except ValueError:
                value = text
            # A bad value raises at every first use until fixed, not once and then ignored.
            _apply(_check(value, f"environment variable {ENV_VAR}"))
        _env_read = True


def set_num_threads(n: int) -> None:
    """Sets how many threads rvm's kernels use: NumPy's OpenBLAS pool (process-wide; GEMMs
    of matmul, dense and convolution) and Numba's (this thread's, capped at Numba's maximum).

    Overrides ``RVM_NUM_THREADS``. If NumPy's BLAS has no OpenBLAS thread control, says so
    once on the ``rvm.jit`` logger and sets Numba's alone.

    Args:
        n: The number of threads, at least 1.

    Raises:
        ValueError: `n` is not a positive int.
    """
    global _env_read
    n = _check(n, "rvm.set_num_threads")
    with _lock:
        _env_read = True  # an explicit choice wins over the environment
        _apply(n)


def get_num_threads() -> int:
    """How many threads NumPy's OpenBLAS uses (Numba's count for this thread when the BLAS
    has no OpenBLAS thread control). Applies ``RVM_NUM_THREADS`` first, if not yet done."""
    apply_environment()
    control = _blas_control()
    if control is not None:
        return int(control[1]())
    import numba

    return int(numba.get_num_threads())
