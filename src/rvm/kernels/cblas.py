"""The raw binding to NumPy's own BLAS: CBLAS GEMM and GEMV on addresses, and OpenBLAS's
thread count.

NumPy links a BLAS (its bundled OpenBLAS in wheels) and its core extension module exports the
ILP64 CBLAS interface (64-bit integers). Each routine's address is registered with llvmlite
under a fixed symbol name, so compiled code that calls it is cached by Numba like any other
(the address is resolved when cached code is linked, not baked into it).

- `gemm(like, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc)`: row-major
  ``C = op(A) @ op(B) + beta * C`` on data addresses (int64), in the dtype of ``like`` (an
  array or a typed pointer); ``ta``/``tb`` are `NO_TRANS` or `TRANS`.
- `gemv(like, trans, rows, cols, a, lda, x, y)`: row-major ``y = op(A) @ x`` for the
  ``rows`` x ``cols`` matrix at ``a``, unit-stride vectors.
- `address(array, offset)`: the address of an element of a C-contiguous array;
  `require_operands(a, b, c)` types only for C-contiguous arrays of one BLAS dtype.

OpenBLAS's thread count is set in `rvm.kernels.threads` (one thread: rvm splits its
GEMMs itself).

Nothing here checks a bound: `rvm.kernels.blas` checks every window before it calls.
`AVAILABLE` is False when NumPy's BLAS does not export this interface; kernels then use
``np.dot``.
"""

from __future__ import annotations

import ctypes

from llvmlite import binding as llvm
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.threads import numpy_core_library

# CBLAS enums: row-major layout, no transpose, transpose.
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

_PREFIX = {"float32": "s", "float64": "d"}
_ROUTINES = ("gemm", "gemv")


def _names(routine: str, dtype: str) -> tuple[str, ...]:
    """NumPy's bundled OpenBLAS spelling (ILP64, scipy_ prefix, 64_ suffix), then the plain
    ILP64 spellings other builds use."""
    f = _PREFIX[dtype] + routine
    return (f"scipy_cblas_{f}64_", f"cblas_{f}64_", f"cblas_{f}_64")


def _symbol(routine: str, dtype: str) -> str:
    return f"rvm_cblas_{_PREFIX[dtype]}{routine}64"


def _register() -> bool:
    lib = numpy_core_library()
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


AVAILABLE = _register()


def _dtype_of(like: nt.Type) -> str | None:
    """The BLAS dtype ``like`` (an array or a typed pointer) names, or None."""
    if isinstance(like, (nt.Array, nt.CPointer)):
        name = str(like.dtype)
        return name if name in _PREFIX else None
    return None


def _call(context, builder, routine, dtype, values):  # type: ignore[no-untyped-def]
    fnty = ir.FunctionType(ir.VoidType(), [v.type for v in values])
    fn = cgutils.get_or_insert_function(builder.module, fnty, _symbol(routine, dtype))
    builder.call(fn, values)
    return context.get_dummy_value()


@intrinsic
def gemm(typingctx, like, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc):  # type: ignore[no-untyped-def]
    """Row-major ``C = op(A) @ op(B) + beta * C`` on the int64 addresses ``a``, ``b``, ``c``
    in ``like``'s dtype (``beta`` a float64, converted). No checks."""
    dtype = _dtype_of(like)
    if dtype is None:
        return None
    i64 = nt.int64
    sig = nt.void(like, i64, i64, i64, i64, i64, i64, i64, i64, i64, nt.float64, i64, i64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        _, tav, tbv, mv, nv, kv, av, ldav, bv, ldbv, betav, cv, ldcv = args
        fty = context.get_value_type(like.dtype)
        ptr, i32 = fty.as_pointer(), ir.IntType(32)
        values = [
            i32(ROW_MAJOR), builder.trunc(tav, i32), builder.trunc(tbv, i32), mv, nv, kv,
            context.get_constant(like.dtype, 1.0), builder.inttoptr(av, ptr), ldav,
            builder.inttoptr(bv, ptr), ldbv, context.cast(builder, betav, nt.float64, like.dtype),
            builder.inttoptr(cv, ptr), ldcv,
        ]  # fmt: skip
        return _call(context, builder, "gemm", dtype, values)

    return sig, codegen


@intrinsic
def gemv(typingctx, like, trans, rows, cols, a, lda, x, y):  # type: ignore[no-untyped-def]
    """Row-major ``y = op(A) @ x`` for the ``rows`` x ``cols`` matrix at address ``a`` (row
    stride ``lda``) and unit-stride vectors at ``x``, ``y``, in ``like``'s dtype. No checks."""
    dtype = _dtype_of(like)
    if dtype is None:
        return None
    i64 = nt.int64
    sig = nt.void(like, i64, i64, i64, i64, i64, i64, i64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        _, tv, rv, cv, av, ldav, xv, yv = args
        fty = context.get_value_type(like.dtype)
        ptr, i32, one = fty.as_pointer(), ir.IntType(32), ir.IntType(64)(1)
        values = [
            i32(ROW_MAJOR), builder.trunc(tv, i32), rv, cv,
            context.get_constant(like.dtype, 1.0), builder.inttoptr(av, ptr), ldav,
            builder.inttoptr(xv, ptr), one, context.get_constant(like.dtype, 0.0),
            builder.inttoptr(yv, ptr), one,
        ]  # fmt: skip
        return _call(context, builder, "gemv", dtype, values)

    return sig, codegen


@intrinsic
def require_operands(typingctx, a, b, c):  # type: ignore[no-untyped-def]
    """Nothing at run time; at typing, refuses (a TypingError) operands that are not
    C-contiguous arrays of one BLAS dtype, so a strided view or a mixed dtype never reaches
    BLAS through an address."""
    arrays = (a, b, c)
    if not all(isinstance(t, nt.Array) and t.layout == "C" for t in arrays):
        return None
    if len({t.dtype for t in arrays}) != 1 or str(a.dtype) not in _PREFIX:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return context.get_dummy_value()

    return nt.void(a, b, c), codegen


@intrinsic
def address(typingctx, a, offset):  # type: ignore[no-untyped-def]
    """The address of element ``offset`` of the C-contiguous array ``a``, as an int64."""
    if not (isinstance(a, nt.Array) and a.layout == "C"):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        data = context.make_array(a)(context, builder, args[0]).data
        return builder.ptrtoint(builder.gep(data, [args[1]]), ir.IntType(64))

    return nt.int64(a, nt.int64), codegen
