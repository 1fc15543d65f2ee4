"""Strided GEMM for jit kernels: NumPy's own BLAS, called from inside a Numba kernel.

Numba's ``np.dot`` reaches BLAS through SciPy, and only for contiguous operands: a strided
sub-matrix is copied first (measured 3x slower than the GEMM itself). A convolution lowered as
shifted GEMMs needs ``C += A @ B`` on row-strided windows of a padded input, with
``beta = 1`` to accumulate in place; that is exactly CBLAS ``?gemm`` with leading dimensions.

`gemm(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta)` computes, row-major,
``C[m, n] = A[m, k] @ B[k, n] + beta * C`` where ``A`` starts at flat element ``ia`` of the
C-contiguous array ``a`` with row stride ``lda`` (likewise ``B``, ``C``). It checks that every
element it touches lies inside its array before BLAS runs, so a wrong offset raises instead of
reading or writing out of bounds.

The BLAS is the one NumPy is linked against (its ``cblas_?gemm`` with 64-bit integers, found
through NumPy's core extension module); its address is registered with llvmlite under a fixed
symbol name, so kernels that call it are cached by Numba like any other (the address is
resolved when a cached kernel is linked, not baked into it). `AVAILABLE` is False when NumPy's
BLAS does not export that interface; the lowering then uses ``np.dot`` instead.
"""

from __future__ import annotations

import ctypes
import importlib

import numba as nb
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

# CBLAS names of NumPy's bundled OpenBLAS (ILP64, with the scipy_ prefix and 64_ suffix), then
# the plain ILP64 spellings other builds use.
_NAMES = {
    "float32": ("scipy_cblas_sgemm64_", "cblas_sgemm64_", "cblas_sgemm_64"),
    "float64": ("scipy_cblas_dgemm64_", "cblas_dgemm64_", "cblas_dgemm_64"),
}
_SYMBOL = {"float32": "rvm_cblas_sgemm64", "float64": "rvm_cblas_dgemm64"}
_ROW_MAJOR, _NO_TRANS = 101, 111


def _register() -> bool:
    for module in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            lib = ctypes.CDLL(importlib.import_module(module).__file__)
            break
        except (ImportError, OSError, TypeError):
            continue
    else:
        return False
    found = {}
    for dtype, names in _NAMES.items():
        for name in names:
            fn = getattr(lib, name, None)
            if fn is not None:
                found[dtype] = ctypes.cast(fn, ctypes.c_void_p).value
                break
    if len(found) != len(_NAMES):
        return False
    for dtype, address in found.items():
        llvm.add_symbol(_SYMBOL[dtype], address)
    return True


AVAILABLE = _register()


@intrinsic
def _cblas_gemm(typingctx, a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta):  # type: ignore[no-untyped-def]
    """The raw CBLAS call on data pointers plus element offsets (no checks)."""
    arrays = (a, b, c)
    if not all(isinstance(t, nt.Array) and t.layout == "C" for t in arrays):
        return None
    if len({t.dtype for t in arrays}) != 1 or str(a.dtype) not in _SYMBOL:
        return None
    dtype = a.dtype
    sig = nt.void(
        a,
        nt.int64,
        nt.int64,
        b,
        nt.int64,
        nt.int64,
        c,
        nt.int64,
        nt.int64,
        nt.int64,
        nt.int64,
        nt.int64,
        dtype,
    )

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        (av, iav, ldav, bv, ibv, ldbv, cv, icv, ldcv, mv, nv, kv, betav) = args
        fty = context.get_value_type(dtype)
        i32, i64 = ir.IntType(32), ir.IntType(64)
        ptr = fty.as_pointer()
        fnty = ir.FunctionType(
            ir.VoidType(), [i32, i32, i32, i64, i64, i64, fty, ptr, i64, ptr, i64, fty, ptr, i64]
        )
        fn = cgutils.get_or_insert_function(builder.module, fnty, _SYMBOL[str(dtype)])

        def data(aty, value, offset):  # type: ignore[no-untyped-def]
            base = context.make_array(aty)(context, builder, value).data
            return builder.gep(base, [offset])

        builder.call(
            fn,
            [
                i32(_ROW_MAJOR),
                i32(_NO_TRANS),
                i32(_NO_TRANS),
                mv,
                nv,
                kv,
                fty(1.0),
                data(a, av, iav),
                ldav,
                data(b, bv, ibv),
                ldbv,
                betav,
                data(c, cv, icv),
                ldcv,
            ],
        )
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(nogil=True, cache=True)
def _extent(start, rows, cols, ld, size):  # type: ignore[no-untyped-def]
    """Whether a rows x cols window at ``start`` with row stride ``ld`` fits in ``size``."""
    if rows == 0 or cols == 0:
        return True
    return start >= 0 and cols <= ld and start + (rows - 1) * ld + cols <= size


@nb.njit(nogil=True, cache=True)
def gemm(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta):  # type: ignore[no-untyped-def]
    """``C[m, n] = A[m, k] @ B[k, n] + beta * C`` on strided windows of flat arrays."""
    if m <= 0 or n <= 0:
        return
    if not (
        _extent(ia, m, k, lda, a.size)
        and _extent(ib, k, n, ldb, b.size)
        and _extent(ic, m, n, ldc, c.size)
    ):
        raise IndexError("gemm: a matrix window lies outside its array")
    if k == 0:
        flat = c.reshape(c.size)
        for i in range(m):
            for j in range(n):
                flat[ic + i * ldc + j] *= beta
        return
    _cblas_gemm(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta)
