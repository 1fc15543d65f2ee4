"""NumPy's own BLAS, called from inside Numba kernels: strided GEMM and the matmul anchor.

Numba's ``np.dot`` reaches BLAS through SciPy's bundled OpenBLAS, a second library beside
NumPy's with its own thread pool, and on this build its ``sgemm`` costs 75-100 us for any
product of two to sixteen rows by a 784 x 128 float32 matrix (NumPy's: 25-55 us, one thread);
strided operands are copied first. So float matmul and convolution call NumPy's BLAS directly:

- `gemm(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta)` computes, row-major,
  ``C[m, n] = A[m, k] @ B[k, n] + beta * C`` where ``A`` starts at flat element ``ia`` of the
  C-contiguous array ``a`` with row stride ``lda`` (likewise ``B``, ``C``): the shifted GEMMs
  and im2col blocks of a convolution.
- `matmul(a, b, out, b_t)` computes ``out = a @ b`` (``a @ b.T`` when ``b_t``) on 2-d
  C-contiguous arrays, with the BLAS call that costs least for the shape (see `matmul`).

Both check that every element they touch lies inside its array before BLAS runs, so a wrong
offset or shape raises instead of reading or writing out of bounds.

The BLAS is the one NumPy is linked against (its ``cblas_?gemm`` / ``cblas_?gemv`` with 64-bit
integers, found through NumPy's core extension module); each address is registered with
llvmlite under a fixed symbol name, so kernels that call it are cached by Numba like any other
(the address is resolved when a cached kernel is linked, not baked into it). `AVAILABLE` is
False when NumPy's BLAS does not export that interface; the lowering then uses ``np.dot``.
"""

from __future__ import annotations

import ctypes
import importlib

import numba as nb
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

_PREFIX = {"float32": "s", "float64": "d"}
_ROUTINES = ("gemm", "gemv")
_THREAD_NAMES = ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_")
_THREADS = "rvm_openblas_get_num_threads"
# CBLAS enums: row-major layout, no transpose, transpose.
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def _names(routine: str, dtype: str) -> tuple[str, ...]:
    """NumPy's bundled OpenBLAS spelling (ILP64, scipy_ prefix, 64_ suffix), then the plain
    ILP64 spellings other builds use."""
    f = _PREFIX[dtype] + routine
    return (f"scipy_cblas_{f}64_", f"cblas_{f}64_", f"cblas_{f}_64")


def _symbol(routine: str, dtype: str) -> str:
    return f"rvm_cblas_{_PREFIX[dtype]}{routine}64"


def _core_library() -> ctypes.CDLL | None:
    for module in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            return ctypes.CDLL(importlib.import_module(module).__file__)
        except (ImportError, OSError, TypeError):
            continue
    return None


def _register() -> bool:
    lib = _core_library()
    if lib is None:
        return False
    found = {}
    for routine in _ROUTINES:
        for dtype in _PREFIX:
            fn = next((getattr(lib, n) for n in _names(routine, dtype) if hasattr(lib, n)), None)
            if fn is None:
                return False
            found[_symbol(routine, dtype)] = ctypes.cast(fn, ctypes.c_void_p).value
    for symbol, address in found.items():
        llvm.add_symbol(symbol, address)
    return True


# Stand-ins where the BLAS lacks the batched GEMM or its thread count: one thread, so the
# batch is never called (kept alive: llvmlite holds only their addresses).
_ONE_THREAD = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 1)
_NO_BATCH = ctypes.CFUNCTYPE(None)(lambda: None)


def _register_batch() -> bool:
    """Registers OpenBLAS's batched GEMM (``cblas_?gemm_batch``, OpenBLAS 0.3.30+) and its
    thread count; True when both exist (otherwise `blas_threads` answers 1)."""
    lib = _core_library()
    batch = {
        _symbol("gemm_batch", dtype): next(
            (getattr(lib, n) for n in _names("gemm_batch", dtype) if hasattr(lib, n)), None
        )
        for dtype in _PREFIX
    }
    count = next((getattr(lib, n) for n in _THREAD_NAMES if hasattr(lib, n)), None)
    ok = AVAILABLE and count is not None and all(f is not None for f in batch.values())
    for symbol, fn in batch.items():
        llvm.add_symbol(symbol, ctypes.cast(fn if ok else _NO_BATCH, ctypes.c_void_p).value)
    llvm.add_symbol(_THREADS, ctypes.cast(count if ok else _ONE_THREAD, ctypes.c_void_p).value)
    return ok


AVAILABLE = _register()
BATCH = _register_batch()


def _blas_arrays(*arrays: nt.Type) -> bool:
    """Whether the operands are C-contiguous arrays of one BLAS dtype."""
    if not all(isinstance(t, nt.Array) and t.layout == "C" for t in arrays):
        return False
    return len({t.dtype for t in arrays}) == 1 and str(arrays[0].dtype) in _PREFIX


def _call(context, builder, routine, dtype, pieces):  # type: ignore[no-untyped-def]
    """Calls CBLAS ``routine`` on ``pieces``: ("i32", value), ("i64", value), ("float",
    value) or ("array", (array type, array value, element offset)) for a data pointer."""
    fty = context.get_value_type(dtype)
    irty = {"i32": ir.IntType(32), "i64": ir.IntType(64), "float": fty, "array": fty.as_pointer()}
    values = []
    for kind, v in pieces:
        if kind == "array":
            aty, av, offset = v
            base = context.make_array(aty)(context, builder, av).data
            v = builder.gep(base, [offset])
        values.append(v)
    fnty = ir.FunctionType(ir.VoidType(), [irty[kind] for kind, _ in pieces])
    fn = cgutils.get_or_insert_function(builder.module, fnty, _symbol(routine, str(dtype)))
    builder.call(fn, values)
    return context.get_dummy_value()


@intrinsic
def _cblas_gemm(typingctx, ta, tb, a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta):  # type: ignore[no-untyped-def]
    """Raw row-major ``C = op(A) @ op(B) + beta * C`` (``ta``/``tb``: CBLAS transpose enums),
    on data pointers plus element offsets (no checks)."""
    if not _blas_arrays(a, b, c):
        return None
    i64 = nt.int64
    sig = nt.void(i64, i64, a, i64, i64, b, i64, i64, c, i64, i64, i64, i64, i64, a.dtype)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        (tav, tbv, av, iav, ldav, bv, ibv, ldbv, cv, icv, ldcv, mv, nv, kv, betav) = args
        i32 = ir.IntType(32)
        pieces = [
            ("i32", i32(_ROW_MAJOR)),
            ("i32", builder.trunc(tav, i32)),
            ("i32", builder.trunc(tbv, i32)),
            *(("i64", v) for v in (mv, nv, kv)),
            ("float", context.get_constant(a.dtype, 1.0)),
            ("array", (a, av, iav)),
            ("i64", ldav),
            ("array", (b, bv, ibv)),
            ("i64", ldbv),
            ("float", betav),
            ("array", (c, cv, icv)),
            ("i64", ldcv),
        ]
        return _call(context, builder, "gemm", a.dtype, pieces)

    return sig, codegen


@intrinsic
def _cblas_gemv(typingctx, trans, a, lda, rows, cols, x, ix, y, iy):  # type: ignore[no-untyped-def]
    """Raw row-major ``y = op(A) @ x`` for the ``rows`` x ``cols`` matrix at the start of
    ``a`` (row stride ``lda``), unit-stride vectors at element offsets (no checks)."""
    if not _blas_arrays(a, x, y):
        return None
    i64 = nt.int64
    sig = nt.void(i64, a, i64, i64, i64, x, i64, y, i64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        (tv, av, ldav, rv, cv, xv, ixv, yv, iyv) = args
        i32, one = ir.IntType(32), ir.IntType(64)(1)
        pieces = [
            ("i32", i32(_ROW_MAJOR)),
            ("i32", builder.trunc(tv, i32)),
            ("i64", rv),
            ("i64", cv),
            ("float", context.get_constant(a.dtype, 1.0)),
            ("array", (a, av, ir.IntType(64)(0))),
            ("i64", ldav),
            ("array", (x, xv, ixv)),
            ("i64", one),
            ("float", context.get_constant(a.dtype, 0.0)),
            ("array", (y, yv, iyv)),
            ("i64", one),
        ]
        return _call(context, builder, "gemv", a.dtype, pieces)

    return sig, codegen


@intrinsic
def _blas_threads(typingctx):  # type: ignore[no-untyped-def]
    """The BLAS's thread count now (1 without a batched GEMM: see `_register_batch`)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, []), _THREADS)
        return builder.sext(builder.call(fn, []), ir.IntType(64))

    return nt.int64(), codegen


@intrinsic
def _address(typingctx, a, offset):  # type: ignore[no-untyped-def]
    """The address of element ``offset`` of the C-contiguous array ``a``, as an int64."""
    if not (isinstance(a, nt.Array) and a.layout == "C"):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        data = context.make_array(a)(context, builder, args[0]).data
        return builder.ptrtoint(builder.gep(data, [args[1]]), ir.IntType(64))

    return nt.int64(a, nt.int64), codegen


@intrinsic
def _cblas_gemm_batch(typingctx, trans, ints, scal, ptrs, count):  # type: ignore[no-untyped-def]
    """Raw row-major ``cblas_?gemm_batch`` of ``count`` groups of one product each: ``trans``
    int32 (2, count) (A's, B's CBLAS enums), ``ints`` int64 (7, count) (m, n, k, lda, ldb,
    ldc, 1), ``scal`` (2, count) (alpha, beta) in the operands' dtype, ``ptrs`` int64 (3,
    count) (A, B, C addresses). No checks."""
    dtype = scal.dtype
    sig = nt.void(trans, ints, scal, ptrs, nt.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        tv, iv, sv, pv, cv = args
        i32, i64 = ir.IntType(32), ir.IntType(64)

        def row(aty, av, r):  # a pointer to row r of a (rows, count) array
            data = context.make_array(aty)(context, builder, av).data
            return builder.gep(data, [builder.mul(cv, i64(r))])

        values = [
            i32(_ROW_MAJOR), row(trans, tv, 0), row(trans, tv, 1),
            row(ints, iv, 0), row(ints, iv, 1), row(ints, iv, 2),
            row(scal, sv, 0), row(ptrs, pv, 0), row(ints, iv, 3),
            row(ptrs, pv, 1), row(ints, iv, 4), row(scal, sv, 1),
            row(ptrs, pv, 2), row(ints, iv, 5), cv, row(ints, iv, 6),
        ]  # fmt: skip
        fnty = ir.FunctionType(ir.VoidType(), [v.type for v in values])
        name = _symbol("gemm_batch", str(dtype))
        builder.call(cgutils.get_or_insert_function(builder.module, fnty, name), values)
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(nogil=True, cache=True)
def _extent(start, rows, cols, ld, size):  # type: ignore[no-untyped-def]
    """Whether a rows x cols window at ``start`` with row stride ``ld`` fits in ``size``."""
    if rows == 0 or cols == 0:
        return True
    return start >= 0 and cols <= ld and start + (rows - 1) * ld + cols <= size


@nb.njit(nogil=True, cache=True)
def _check_windows(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k):  # type: ignore[no-untyped-def]
    if not (
        _extent(ia, m, k, lda, a.size)
        and _extent(ib, k, n, ldb, b.size)
        and _extent(ic, m, n, ldc, c.size)
    ):
        raise IndexError("gemm: a matrix window lies outside its array")


@nb.njit(nogil=True, cache=True)
def gemm(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta):  # type: ignore[no-untyped-def]
    """``C[m, n] = A[m, k] @ B[k, n] + beta * C`` on strided windows of flat arrays."""
    if m <= 0 or n <= 0:
        return
    _check_windows(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k)
    if k == 0:
        flat = c.reshape(c.size)
        for i in range(m):
            for j in range(n):
                flat[ic + i * ldc + j] *= beta
        return
    _cblas_gemm(_NO_TRANS, _NO_TRANS, a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta)


# A product is split over the BLAS's threads only when each piece keeps at least this many
# multiply-adds (m * n * k): OpenBLAS's batch runs pieces up to 1e6 with its small-matrix
# kernels, and a thread's wake-up costs microseconds.
SPLIT_MIN_MNK = 1 << 20
SPLIT_ALIGN = 16  # pieces start on multiples of this many columns (or rows)


@nb.njit(nogil=True, cache=True)
def blas_threads():  # type: ignore[no-untyped-def]
    """How many threads `gemm_split` spreads a product over (1 when the BLAS has no batched
    GEMM)."""
    return max(1, _blas_threads())


@nb.njit(nogil=True, cache=True)
def gemm_split(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta):  # type: ignore[no-untyped-def]
    """`gemm`, cut into independent pieces along its longer output side that run at once,
    one single-threaded GEMM on each of the BLAS's threads (``cblas_?gemm_batch``).

    OpenBLAS's own threading of one GEMM pays off only on large products (and one such
    GEMM at a time per process, under a lock); a batch of pieces spreads the small and
    thin products of convolutions too, and serializes nothing. With one BLAS thread, or
    pieces too small (`SPLIT_MIN_MNK`), it is `gemm`.
    """
    if m <= 0 or n <= 0:
        return
    threads = blas_threads()
    if threads <= 1 or k == 0 or m * n * k < 2 * SPLIT_MIN_MNK:
        gemm(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta)
        return
    _check_windows(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k)
    along_n = n >= m
    side = n if along_n else m
    parts = min(threads, m * n * k // SPLIT_MIN_MNK)
    step = -(-side // parts)
    step = -(-step // SPLIT_ALIGN) * SPLIT_ALIGN
    parts = -(-side // step)
    trans = np.full((2, parts), _NO_TRANS, dtype=np.int32)
    ints = np.empty((7, parts), dtype=np.int64)
    scal = np.empty((2, parts), dtype=c.dtype)
    ptrs = np.empty((3, parts), dtype=np.int64)
    for p in range(parts):
        lo = p * step
        size = min(step, side - lo)
        ints[0, p], ints[1, p] = (m, size) if along_n else (size, n)
        ints[2, p], ints[3, p], ints[4, p], ints[5, p], ints[6, p] = k, lda, ldb, ldc, 1
        scal[0, p], scal[1, p] = 1.0, beta
        ptrs[0, p] = _address(a, ia if along_n else ia + lo * lda)
        ptrs[1, p] = _address(b, ib + lo if along_n else ib)
        ptrs[2, p] = _address(c, ic + lo if along_n else ic + lo * ldc)
    _cblas_gemm_batch(trans, ints, scal, ptrs, parts)


# Fewer rows than this multiply without GEMM, whose packing of B is a fixed cost (single
# thread, 784 x 128 float32 B: GEMM 26-56 us for 1-3 rows, one GEMV per row 6-27 us, the
# row loop 7-22 us; from 4 rows GEMM is within 20% of the loop and threads help it).
SMALL_ROWS = 4


@nb.njit(nogil=True, cache=True, fastmath={"contract", "reassoc", "nsz"})
def _rows_axpy(a, b, out):  # type: ignore[no-untyped-def]
    """``out = a @ b`` for a few rows of ``a``: B streams through once, four rows of B per
    pass, each pass adding into the output rows (which stay in L1); the inner loop runs
    along B's contiguous rows and vectorizes."""
    m, k = a.shape
    n = b.shape[1]
    out[:, :] = 0
    k4 = k - k % 4
    for p in range(0, k4, 4):
        for i in range(m):
            a0, a1, a2, a3 = a[i, p], a[i, p + 1], a[i, p + 2], a[i, p + 3]
            for j in range(n):
                out[i, j] += a0 * b[p, j] + a1 * b[p + 1, j] + a2 * b[p + 2, j] + a3 * b[p + 3, j]
    for p in range(k4, k):
        for i in range(m):
            a0 = a[i, p]
            for j in range(n):
                out[i, j] += a0 * b[p, j]


@nb.njit(nogil=True, cache=True)
def matmul(a, b, out, b_t):  # type: ignore[no-untyped-def]
    """``out = a @ b`` (``a @ b.T`` when ``b_t``) on 2-d C-contiguous arrays.

    The call is chosen per shape by what costs least (measured, single thread): a GEMV for a
    single row or column (as NumPy does), one GEMV per row of a transposed ``b`` and the row
    loop `_rows_axpy` otherwise for fewer than `SMALL_ROWS` rows, GEMM from there on.
    """
    m, k = a.shape
    n = b.shape[0] if b_t else b.shape[1]
    if (b.shape[1] if b_t else b.shape[0]) != k or out.shape[0] != m or out.shape[1] != n:
        raise ValueError(
            "matmul: the operand and output shapes do not match: expected a (m, k), b (k, n) "
            "(b (n, k) when transposed) and out (m, n)"
        )
    if m == 0 or n == 0:
        return
    if k == 0:
        out[:, :] = 0
    elif n == 1:  # b is one contiguous column either way
        _cblas_gemv(_NO_TRANS, a, k, m, k, b, 0, out, 0)
    elif b_t and m < SMALL_ROWS:
        for i in range(m):
            _cblas_gemv(_NO_TRANS, b, k, n, k, a, i * k, out, i * n)
    elif m == 1:
        _cblas_gemv(_TRANS, b, n, k, n, a, 0, out, 0)
    elif m < SMALL_ROWS:
        _rows_axpy(a, b, out)
    else:
        tb = _TRANS if b_t else _NO_TRANS
        _cblas_gemm(_NO_TRANS, tb, a, 0, k, b, 0, k if b_t else n, out, 0, n, m, n, k, 0.0)
