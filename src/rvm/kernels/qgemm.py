"""Integer convolution and dense products for quantized models: uint8 x int8 -> int32.

`qconv2d` and `qdense` compute what `rvm.op.qconv2d` / `rvm.op.qdense` define (int32 sums of
``(x - x_zero) * w`` plus the bias, requantized per output channel, clipped, cast to uint8 or
int8) on C-contiguous operands:

- the weight is packed per call into panels of `NR` output channels: for each group of four
  consecutive depths, ``NR`` x 4 int8 (the layout of ``vpdpbusd``'s second operand), depths
  padded with zeros to a multiple of 4, channels to a multiple of `NR`; beside it each
  channel's weight sum;
- the input becomes a row matrix of uint8 (im2col: one row per output position, its depths
  contiguous, padding filled with the zero point, so it adds nothing once corrected); int8
  inputs are shifted by 128 into uint8 (and their zero point with them);
- the micro-kernel (`_micro`, LLVM IR) keeps `MR` rows x `NR` columns of int32 sums in
  registers: for every 4 depths it broadcasts each row's 4 bytes and issues one
  ``vpdpbusd`` (AVX-512 VNNI: 64 multiply-adds of uint8 by int8 into int32) per vector.
  Without VNNI (`VNNI` False) a plain loop computes the same sums;
- the epilogue corrects for the input zero point (``- x_zero * weight_sum``), adds the bias,
  scales in float32, rounds half to even, adds the output zero point and clips.

The sums are exact (int32 holds 255 * 128 * 65536); results equal the ops' NumPy references.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic, overload

from rvm.kernels.sgemm import _target_features

__all__ = ["MR", "NR", "VNNI", "qconv2d", "qdense"]

VNNI = "+avx512vnni" in set(_target_features().split(","))
LANES = 16
VECTORS = 2
MR = 8  # rows x VECTORS accumulators: 16 of the 32 zmm registers
NR = LANES * VECTORS

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@intrinsic
def _micro(typingctx, quads, a, lda, b, ldb, c, ldc, rows, swap):  # type: ignore[no-untyped-def]
    """On int64 addresses, int32 ``C[:rows, :NR] = A[:rows, :4 * quads] @ B[:, :NR]``: A's
    rows ``lda`` bytes apart, broadcast 4 bytes at a time; B packed by quads of depth
    (quad ``s``'s ``NR`` x 4 bytes ``s * ldb`` bytes on), loaded `LANES` columns a vector;
    C's rows ``ldc`` values apart. ``swap`` 0: A is uint8 and B int8; 1: A int8, B uint8.
    Rows past ``rows`` read row 0 and are not stored."""
    sig = nt.void(*(nt.int64,) * 9)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        quads, a, lda, b, ldb, c, ldc, rows, swap = args
        i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
        vec = ir.VectorType(i32, LANES)
        fnty = ir.FunctionType(vec, [vec, vec, vec])
        dot = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.avx512.vpdpbusd.512")
        a_bytes, b_bytes = (
            builder.inttoptr(a, i8.as_pointer()),
            builder.inttoptr(b, i8.as_pointer()),
        )
        cp = builder.inttoptr(c, i32.as_pointer())
        zero, undef = ir.Constant(vec, None), ir.Constant(vec, ir.Undefined)
        splat = ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)
        a_rows = [
            builder.mul(builder.select(builder.icmp_signed("<", i64(i), rows), i64(i), i64(0)), lda)
            for i in range(MR)
        ]

        def tile(swapped):  # type: ignore[no-untyped-def]
            acc = [
                [cgutils.alloca_once_value(builder, zero) for _ in range(VECTORS)]
                for _ in range(MR)
            ]
            with cgutils.for_range(builder, quads) as loop:
                s = loop.index
                row_b = builder.mul(s, ldb)
                bs = []
                for j in range(VECTORS):
                    at = builder.gep(b_bytes, [builder.add(row_b, i64(4 * LANES * j))])
                    bs.append(builder.load(builder.bitcast(at, vec.as_pointer()), align=1))
                for i in range(MR):
                    at = builder.gep(a_bytes, [builder.add(a_rows[i], builder.mul(s, i64(4)))])
                    word = builder.load(builder.bitcast(at, i32.as_pointer()), align=1)
                    av = builder.shuffle_vector(
                        builder.insert_element(undef, word, i32(0)), undef, splat
                    )
                    for j in range(VECTORS):
                        u, v = (bs[j], av) if swapped else (av, bs[j])
                        builder.store(builder.call(dot, [builder.load(acc[i][j]), u, v]), acc[i][j])
            for i in range(MR):
                with builder.if_then(builder.icmp_signed("<", i64(i), rows)):
                    for j in range(VECTORS):
                        at = builder.gep(
                            cp, [builder.add(builder.mul(ldc, i64(i)), i64(j * LANES))]
                        )
                        builder.store(
                            builder.load(acc[i][j]), builder.bitcast(at, vec.as_pointer()), align=4
                        )

        with builder.if_else(builder.icmp_signed("!=", swap, i64(0))) as (swapped, plain):
            with swapped:
                tile(True)
            with plain:
                tile(False)
        return context.get_dummy_value()

    return sig, codegen


def _shift(x):  # type: ignore[no-untyped-def]
    """128 for an int8 array (its values shift into uint8), 0 for uint8."""
    return 128 if x.dtype == np.int8 else 0


@overload(_shift, jit_options=_OPTS)
def _shift_impl(x):  # type: ignore[no-untyped-def]
    value = 128 if x.dtype == nt.int8 else 0
    return lambda x: value


@nb.njit(**_OPTS)
def _weight_rows(wm, quads):  # type: ignore[no-untyped-def]
    """``wm`` (o, k) as rows of ``4 * quads`` depths (itself when ``k`` is a multiple of 4,
    else a zero-padded copy), and each row's sum."""
    o, k = wm.shape
    rows = wm
    if k != 4 * quads:
        rows = np.zeros((o, 4 * quads), wm.dtype)
        rows[:, :k] = wm
    sums = np.zeros(o, np.int32)
    for r in range(o):
        total = np.int32(0)
        for d in range(k):
            total += np.int32(wm[r, d])
        sums[r] = total
    return rows, sums


@nb.njit(**_OPTS)
def _gemm(rows, panel, acc, swap):  # type: ignore[no-untyped-def]
    """``acc[r, j] = sum_d rows[r, d] * B[d, j]`` in int32, B packed in ``panel`` (quads,
    columns, 4); ``swap`` says which operand is the uint8 one (see `_micro`)."""
    n_rows, lda = rows.shape
    quads, cols = panel.shape[0], panel.shape[1]
    ldc = acc.shape[1]
    if VNNI:
        a0, b0, c0 = rows.ctypes.data, panel.ctypes.data, acc.ctypes.data
        for j in range(0, cols, NR):
            for r in range(0, n_rows, MR):
                count = min(MR, n_rows - r)
                _micro(quads, a0 + r * lda, lda, b0 + 4 * j, 4 * cols, c0 + 4 * (r * ldc + j),
                       ldc, count, swap)  # fmt: skip
        return
    for r in range(n_rows):
        for j in range(cols):
            total = np.int32(0)
            for q in range(quads):
                for t in range(4):
                    total += np.int32(rows[r, 4 * q + t]) * np.int32(panel[q, j, t])
            acc[r, j] = total


@nb.njit(**_OPTS)
def _requantize(acc, sums, x_zero, bias, scale, o0, y_zero, low, high, out):  # type: ignore[no-untyped-def]
    """``out[o, p]`` from the sums ``acc[o, p]`` of channel ``o0 + o`` (any layouts)."""
    og, p_total = out.shape
    one_bias, one_scale = bias.size == 1, scale.size == 1
    for o in range(og):
        b = bias[0] if one_bias else bias[o0 + o]
        f = scale[0] if one_scale else scale[o0 + o]
        shift = b - x_zero * sums[o]
        for p in range(p_total):
            q = np.rint(np.float32(acc[o, p] + shift) * f) + y_zero
            out[o, p] = min(max(q, low), high)


@nb.njit(**_OPTS)
def _columns(x, n, c0, cg, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, fill, flip, panel):  # type: ignore[no-untyped-def]
    """Image ``n``'s channels ``c0 + [0, cg)`` as a uint8 panel (quads, positions, 4): depth
    ``d = (c * kh + u) * kw + v`` of position ``i * ow + j`` at ``[d // 4, i * ow + j, d %
    4]``; taps in the padding read ``fill``. Positions and depths past the end stay 0."""
    ih, iw = x.shape[2], x.shape[3]
    d = 0
    for c in range(cg):
        for u in range(kh):
            for v in range(kw):
                q, t = d // 4, d % 4
                # Output columns whose tap is inside the row: [j_lo, j_hi).
                first = pl - v * dw
                j_lo = min(max(0, (first + sw - 1) // sw), ow)
                j_hi = min(max(j_lo, (iw - 1 + first) // sw + 1), ow)
                for i in range(oh):
                    y = i * sh - pt + u * dh
                    base = i * ow
                    if y < 0 or y >= ih:
                        for j in range(ow):
                            panel[q, base + j, t] = fill
                        continue
                    for j in range(j_lo):
                        panel[q, base + j, t] = fill
                    for j in range(j_lo, j_hi):
                        value = np.int32(x[n, c0 + c, y, j * sw - first]) + flip
                        panel[q, base + j, t] = np.uint8(value & 255)
                    for j in range(j_hi, ow):
                        panel[q, base + j, t] = fill
                d += 1


@nb.njit(**_OPTS)
def qconv2d(x, w, bias, scale, out, x_zero, y_zero, low, high, groups, sh, sw, dh, dw, pt, pl):  # type: ignore[no-untyped-def]
    """`rvm.op.qconv2d` into ``out`` (n, o, oh, ow) of uint8 or int8; ``w`` int8."""
    n_img = x.shape[0]
    o, cg, kh, kw = w.shape
    oh, ow = out.shape[2], out.shape[3]
    og = o // groups
    quads = (cg * kh * kw + 3) // 4
    flip = _shift(x)  # int8 inputs shift into uint8
    zero = x_zero + flip
    p_total = oh * ow
    cols = (p_total + NR - 1) // NR * NR
    panel = np.zeros((quads, cols, 4), np.uint8)
    acc = np.empty((og, cols), np.int32)
    for g in range(groups):
        rows, sums = _weight_rows(w[g * og : (g + 1) * og].reshape(og, cg * kh * kw), quads)
        for n in range(n_img):
            _columns(x, n, g * cg, cg, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, zero, flip, panel)
            _gemm(rows, panel, acc, 1)
            dest = out[n, g * og : (g + 1) * og].reshape(og, p_total)
            _requantize(acc, sums, zero, bias, scale, g * og, y_zero, low, high, dest)


@nb.njit(**_OPTS)
def qdense(x, w, bias, scale, out, x_zero, y_zero, low, high):  # type: ignore[no-untyped-def]
    """`rvm.op.qdense` of ``x`` (m, k) into ``out`` (m, n) of uint8 or int8; ``w`` int8.
    As a convolution's: the weight's rows broadcast, ``x``'s rows packed as the panel."""
    m, k = x.shape
    quads = (k + 3) // 4
    flip = _shift(x)
    cols = (m + NR - 1) // NR * NR
    panel = np.zeros((quads, cols, 4), np.uint8)
    for p in range(m):
        for d in range(k):
            panel[d // 4, p, d % 4] = np.uint8((np.int32(x[p, d]) + flip) & 255)
    rows, sums = _weight_rows(w, quads)
    acc = np.empty((w.shape[0], cols), np.int32)
    _gemm(rows, panel, acc, 1)
    _requantize(acc, sums, x_zero + flip, bias, scale, 0, y_zero, low, high, out.T)
