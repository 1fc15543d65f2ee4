"""rvm's own float32 GEMM: a register-blocked micro-kernel in LLVM IR at the CPU's vector width.

Why not BLAS: NumPy's OpenBLAS picks its kernels once per process, by CPU or by the
``OPENBLAS_CORETYPE`` the environment sets, and rvm cannot choose for the user. On the AVX-512
machine the benchmarks run on, the environment pins it to its Haswell (AVX2) kernels: 110-125
GFLOP/s on one core, where ONNX Runtime's own GEMM (MLAS, dispatched on the CPU itself) reaches
about twice that. This kernel is built by Numba for the CPU Numba targets, so it uses the
widest vectors there are (200-220 GFLOP/s on one core of that machine, `benchmarks/kernels.py`).

`sgemm(a, lda, b, ldb, c, ldc, m, n, k, accumulate)` computes, row-major on int64 addresses,
``C[m, n] = A[m, k] @ B[k, n]`` (``+= ...`` when ``accumulate``). No checks: the callers
(`rvm.runtime.native.blas`) check every window first.

How (the GotoBLAS/BLIS scheme, with C's rows along A and its columns in vectors):

- the depth is cut into blocks of `KC`; for each block and each band of `MR` rows of A, the
  band is packed k-major (``MR`` values a step, zero past the last row) into a buffer that
  stays in L1;
- the micro-kernel then walks the band across C in tiles of `MR` rows by up to `NR` columns:
  for each of the ``KC`` steps it loads up to three vectors of B's row (B is read in place: its
  rows are contiguous, and packing them cost more than it saved at these sizes), broadcasts
  the band's ``MR`` values of A and adds their products into ``MR x 3`` accumulator registers
  (24 of the 32 AVX-512 registers); it stores the tile once, at the end of the block;
- the last tile of a row is as wide as what is left (one, two or three vectors), its last
  vector loaded and stored under a lane mask, and rows past ``m`` are not stored, so no edge
  needs a copy.

Multiple threads: `rvm.runtime.native.blas` cuts large products into pieces on rvm's pool, one
call of this each.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils, config
from numba.extending import intrinsic, overload

__all__ = ["KC", "LANES", "MR", "NR", "applies", "sgemm"]


def _target_features() -> str:
    """The CPU features Numba compiles for (its override, else the host's)."""
    if config.CPU_FEATURES is not None:
        return config.CPU_FEATURES
    if config.CPU_NAME is not None:  # a named CPU without features: assume the least
        return ""
    return llvm.get_host_cpu_features().flatten()


def _shape(features: str) -> tuple[int, int, int, bool]:
    """(lanes, rows, vectors, fma): the micro-tile for the target's vector registers --
    MR x (vectors x lanes) accumulators with room left for B's vectors and A's broadcast."""
    flags = set(features.split(","))
    fma = "+fma" in flags or "+avx512f" in flags
    if "+avx512f" in flags:
        return 16, 8, 3, True  # 24 accumulators of 32 zmm registers
    if "+avx2" in flags or "+avx" in flags:
        return 8, 6, 2, fma  # 12 of 16 ymm registers
    return 4, 6, 2, fma  # 12 of 16 xmm registers


LANES, MR, VECTORS, _FMA = _shape(_target_features())
NR = LANES * VECTORS  # a tile's columns at most
KC = 256  # depth block: the packed band of A (MR x KC) stays in L1

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


def _micro_kernel(vectors: int):  # type: ignore[no-untyped-def]
    """The micro-kernel with ``vectors`` vectors per tile row: the intrinsic
    ``micro(kc, ap, b, ldb, c, ldc, accumulate, rows, last)`` on int64 addresses: ``C[:rows,
    :width] (+)= Ap @ B[:kc, :width]`` with ``Ap`` the packed band (``kc`` steps of `MR`),
    ``width = (vectors - 1) * LANES + last`` (``0 < last <= LANES``)."""

    @intrinsic
    def micro(typingctx, kc, ap, b, ldb, c, ldc, accumulate, rows, last):  # type: ignore[no-untyped-def]
        sig = nt.void(*(nt.int64,) * 9)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            kc, ap, b, ldb, c, ldc, accumulate, rows, last = args
            i1, i32, i64, f32 = ir.IntType(1), ir.IntType(32), ir.IntType(64), ir.FloatType()
            vec = ir.VectorType(f32, LANES)
            vptr, fptr = vec.as_pointer(), f32.as_pointer()
            module = builder.module
            masks = ir.VectorType(i1, LANES)
            name = f"v{LANES}f32"
            fma = cgutils.get_or_insert_function(
                module, ir.FunctionType(vec, [vec] * 3), f"llvm.fma.{name}"
            )
            masked_load = cgutils.get_or_insert_function(
                module, ir.FunctionType(vec, [vptr, i32, masks, vec]), f"llvm.masked.load.{name}.p0"
            )
            masked_store = cgutils.get_or_insert_function(
                module,
                ir.FunctionType(ir.VoidType(), [vec, vptr, i32, masks]),
                f"llvm.masked.store.{name}.p0",
            )
            ap, b, c = (builder.inttoptr(x, fptr) for x in (ap, b, c))
            zero, align = ir.Constant(vec, None), i32(4)
            splat = ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)
            lanes = ir.VectorType(i64, LANES)
            undef_lanes = ir.Constant(lanes, ir.Undefined)
            last_all = builder.shuffle_vector(
                builder.insert_element(undef_lanes, last, i32(0)), undef_lanes, splat
            )
            mask = builder.icmp_signed("<", ir.Constant(lanes, list(range(LANES))), last_all)

            def broadcast(value):  # type: ignore[no-untyped-def]
                undef = ir.Constant(vec, ir.Undefined)
                return builder.shuffle_vector(
                    builder.insert_element(undef, value, i32(0)), undef, splat
                )

            def vector_at(base, offset, j):  # type: ignore[no-untyped-def]
                return builder.bitcast(
                    builder.gep(base, [builder.add(offset, i64(j * LANES))]), vptr
                )

            # Accumulators as stack slots: LLVM promotes them to registers.
            acc = [
                [cgutils.alloca_once_value(builder, zero) for _ in range(vectors)]
                for _ in range(MR)
            ]
            with cgutils.for_range(builder, kc) as loop:
                step = loop.index
                row_b = builder.mul(step, ldb)
                bs = [
                    builder.call(masked_load, [vector_at(b, row_b, j), align, mask, zero])
                    if j == vectors - 1
                    else builder.load(vector_at(b, row_b, j), align=4)
                    for j in range(vectors)
                ]
                at_a = builder.mul(step, i64(MR))
                for i in range(MR):
                    a = broadcast(builder.load(builder.gep(ap, [builder.add(at_a, i64(i))])))
                    for j in range(vectors):
                        old = builder.load(acc[i][j])
                        if _FMA:
                            new = builder.call(fma, [a, bs[j], old])
                        else:
                            new = builder.fadd(builder.fmul(a, bs[j]), old)
                        builder.store(new, acc[i][j])
            add = builder.icmp_signed("!=", accumulate, i64(0))
            for i in range(MR):
                with builder.if_then(builder.icmp_signed("<", i64(i), rows)):
                    row_c = builder.mul(ldc, i64(i))
                    for j in range(vectors):
                        at = vector_at(c, row_c, j)
                        value = builder.load(acc[i][j])
                        if j == vectors - 1:
                            old = builder.call(masked_load, [at, align, mask, zero])
                            value = builder.select(add, builder.fadd(old, value), value)
                            builder.call(masked_store, [value, at, align, mask])
                        else:
                            with builder.if_then(add):
                                builder.store(
                                    builder.fadd(builder.load(at, align=4), value), at, align=4
                                )
                            with builder.if_then(builder.not_(add)):
                                builder.store(value, at, align=4)
            return context.get_dummy_value()

        return sig, codegen

    return micro


# A tile row of one, two or three vectors (at most `VECTORS` are used).
_micro1, _micro2, _micro3 = (_micro_kernel(v) for v in range(1, 4))


@intrinsic
def _floats_at(typingctx, address):  # type: ignore[no-untyped-def]
    """A float32 pointer to the int64 ``address``."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.inttoptr(args[0], ir.FloatType().as_pointer())

    return nt.CPointer(nt.float32)(nt.int64), codegen


@nb.njit(**_OPTS)
def _pack_band(a, lda, rows, kc, band):  # type: ignore[no-untyped-def]
    """``band[s * MR + i] = A[i, s]`` for the ``rows`` x ``kc`` block at ``a`` (row stride
    ``lda``); zero for ``rows <= i < MR``."""
    for s in range(kc):
        for i in range(rows):
            band[s * MR + i] = a[i * lda + s]
        for i in range(rows, MR):
            band[s * MR + i] = 0.0


@nb.njit(**_OPTS)
def sgemm(a, lda, b, ldb, c, ldc, m, n, k, accumulate):  # type: ignore[no-untyped-def]
    """``C[m, n] (+)= A[m, k] @ B[k, n]`` on the float32 row-major matrices at the int64
    addresses ``a``, ``b``, ``c`` (row strides ``lda``, ``ldb``, ``ldc``), in the calling
    thread; ``accumulate`` adds to C. No checks."""
    if m <= 0 or n <= 0:
        return
    band = np.empty(KC * MR, dtype=np.float32)
    at_band = band.ctypes.data
    if k <= 0:
        if not accumulate:
            out = _floats_at(c)
            for i in range(m):
                for j in range(n):
                    out[i * ldc + j] = 0.0
        return
    for p0 in range(0, k, KC):
        kc = min(KC, k - p0)
        add = 1 if (accumulate or p0 > 0) else 0
        b_block = b + 4 * p0 * ldb
        for i0 in range(0, m, MR):
            rows = min(MR, m - i0)
            _pack_band(_floats_at(a + 4 * (i0 * lda + p0)), lda, rows, kc, band)
            c_band = c + 4 * i0 * ldc
            for j0 in range(0, n, NR):
                width = min(NR, n - j0)
                vectors = (width + LANES - 1) // LANES
                last = width - (vectors - 1) * LANES
                at_b, at_c = b_block + 4 * j0, c_band + 4 * j0
                if vectors == 3:
                    _micro3(kc, at_band, at_b, ldb, at_c, ldc, add, rows, last)
                elif vectors == 2:
                    _micro2(kc, at_band, at_b, ldb, at_c, ldc, add, rows, last)
                else:
                    _micro1(kc, at_band, at_b, ldb, at_c, ldc, add, rows, last)


def applies(like):  # type: ignore[no-untyped-def]
    """Whether `sgemm` serves ``like``'s dtype (an array or a typed pointer): float32. A
    compile-time constant in jitted code."""
    return np.asarray(like).dtype == np.float32


@overload(applies, jit_options=dict(cache=True))
def _applies(like):  # type: ignore[no-untyped-def]
    serves = isinstance(like, (nt.Array, nt.CPointer)) and like.dtype == nt.float32
    return lambda like: serves
