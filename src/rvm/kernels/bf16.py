"""bf16 products with float32 accumulation: the dense entry point and the split GEMM.

Weights arrive converted once, at compile time (`rvm.transform.to_bf16`), as the int16 bits
of bf16 values, laid out as the GEMM's A (`rvm.kernels.bf16gemm`): ``(rows, kp)`` with each
row's depth padded to an even ``kp`` with zeros. Activations arrive in float32 and are rounded
(to nearest even) to bf16 per call, packed in pairs as the GEMM's B:

- `dense(x, w, out, exact)`: ``out[m, n] = bf16(x[m, k]) @ w[n, kp].T``. A few rows (a batch-1
  classifier) take a GEMV over ``w``'s rows (float32 FMAs on widened bf16, half the bytes of
  float32 weights); more take the GEMM ``out.T = w @ pack(x.T)``, then a transpose. With
  ``exact`` (the ``"rounded"`` way's GEMVs, `rvm.transform.to_bf16`), ``x`` is not rounded:
  ``x @ w.T``, GEMVs only.
- `gemm(like, a, lda, b, c, ldc, m, n, k2)`: the GEMM on the pool, which the convolution
  (`rvm.kernels.bf16conv`) calls too.

Large products are cut into pieces on rvm's pool (`rvm.kernels.parfor`), along C's longer
side. No bounds are assumed: every entry point checks its arrays' shapes first and raises
`ValueError` naming what disagrees.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels import parfor, workpool
from rvm.kernels.bf16gemm import LANES, NR, PACK_SPLIT_MIN, gemm_bf16, panels, run_bits
from rvm.kernels.jitting import jit
from rvm.kernels.planes import copy
from rvm.kernels.vectors import VectorIR

__all__ = ["dense", "gemm", "pack_rows", "pair_rows", "round_bits"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
GEMV_ROWS = 4  # up to this many rows, `dense` runs GEMVs (the GEMM's lanes run along rows)
SPLIT_MIN = 1 << 21  # multiply-adds a piece keeps at least when a product is split
GEMV_SHARED_DEPTH = 4096  # deeper, a GEMV's rows go four a pass (`_gemv_rows`)
GEMV_SPLIT_MIN = 1 << 18  # weights a GEMV piece reads at least (512 KB of bf16)


@intrinsic
def _as_float(typingctx, bits):  # type: ignore[no-untyped-def]
    """The float32 whose bits are the uint32 ``bits``."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.FloatType())

    return nt.float32(nt.uint32), codegen


@jit(**_OPTS)
def round_bits(word):  # type: ignore[no-untyped-def]
    """The bf16 bits (0..65535) nearest the float32 whose bits are ``word`` (ties to even;
    NaN stays a quiet NaN)."""
    w = np.int64(word)
    if (w & 0x7FFFFFFF) > 0x7F800000:
        return ((w >> 16) | 0x40) & 0xFFFF
    return ((w + 0x7FFF + ((w >> 16) & 1)) >> 16) & 0xFFFF


@intrinsic
def _pair_row(typingctx, src, k, dst, stride):  # type: ignore[no-untyped-def]
    """On int64 addresses: the words ``dst[q * stride]`` (uint32) = the bf16 pair of float32
    ``src[2q]`` (low half) and ``src[2q + 1]`` (high half; 0 past ``k``), for q < ``(k + 1) //
    2``: `LANES` words a step, rounded as vectors (`rvm.kernels.bf16gemm.run_bits`), stored
    as a vector at ``stride`` 1, else one by one."""
    sig = nt.void(*(nt.int64,) * 4)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        src, k, dst, stride = args
        v = VectorIR(builder, LANES)
        i32, i64 = ir.IntType(32), ir.IntType(64)
        words = builder.sdiv(builder.add(k, i64(1)), i64(2))
        steps = builder.sdiv(builder.add(words, i64(LANES - 1)), i64(LANES))
        with cgutils.for_range(builder, steps) as loop:
            q0 = builder.mul(loop.index, i64(LANES))
            f0 = builder.mul(q0, i64(2))
            at = builder.add(src, builder.mul(f0, i64(4)))
            lo = v.load(at, v.f32, v.first(builder.sub(k, f0)))
            hi = v.load(builder.add(at, i64(4 * LANES)), v.f32,
                        v.first(builder.sub(k, builder.add(f0, i64(LANES)))))  # fmt: skip
            pairs = run_bits(builder, lo, hi)
            unit = builder.icmp_signed("==", stride, i64(1))
            with builder.if_else(unit) as (together, apart):
                with together:
                    at = builder.add(dst, builder.mul(q0, i64(4)))
                    v.store(pairs, at, v.first(builder.sub(words, q0)))
                with apart:
                    for lane in range(LANES):
                        q = builder.add(q0, i64(lane))
                        with builder.if_then(builder.icmp_signed("<", q, words)):
                            to = builder.add(dst, builder.mul(builder.mul(q, stride), i64(4)))
                            word = builder.extract_element(pairs, i32(lane))
                            builder.store(word, builder.inttoptr(to, i32.as_pointer()))
        return context.get_dummy_value()

    return sig, codegen


@jit(**_OPTS)
def pack_rows(x, k, out):  # type: ignore[no-untyped-def]
    """``out[i // NR, p, i % NR]`` (uint32) = the bf16 pair of ``x[i, 2p]`` and ``x[i, 2p +
    1]`` (0 past ``k`` and past x's rows): x's rows (float32, 2-d, each row contiguous, as
    a slice of a wider array's columns) as the GEMM's B, in panels (`rvm.kernels.bf16gemm.
    panel_index`)."""
    out[out.shape[0] - 1] = 0  # the last panel's padding
    k2 = out.shape[1]
    at_x, at_o = x.ctypes.data, out.ctypes.data
    for i in range(x.shape[0]):
        _pair_row(at_x + i * x.strides[0], k, at_o + 4 * ((i // NR) * k2 * NR + i % NR), NR)


# A pair-rows job (int64): its length; x's address, its rows' stride (bytes) and columns (k);
# out's address and its rows' words (k2); the rows; rows a piece.
_ROWS_JOB = 8


@jit(inline="always", **_OPTS)
def _rows(job, r0, r1):  # type: ignore[no-untyped-def]
    """Rows [r0, r1) of a pair-rows job."""
    for i in range(r0, r1):
        _pair_row(job[1] + i * job[2], job[3], job[4] + 4 * i * job[5], 1)


def _rows_task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of `pair_rows` (a pool task): its ``job[7]`` rows."""
    job = parfor.job(data)
    _rows(job, p * job[7], min(job[6], (p + 1) * job[7]))


parfor.export_task("bf16_pair_rows", _rows_task)
_run_rows = parfor.runner("bf16_pair_rows")


@jit(**_OPTS)
def pair_rows(x, out):  # type: ignore[no-untyped-def]
    """``out[i, p]`` (uint32) = the bf16 pair of ``x[i, 2p]`` (low half) and ``x[i, 2p + 1]``
    (high half; 0 past x's columns): x's rows (float32, 2-d, each row contiguous, as a slice
    of a wider array's columns) as a bf16 GEMM's A, ``out`` ``(rows, (k + 1) // 2)``
    C-contiguous. Cut by rows into pieces on the pool from `PACK_SPLIT_MIN` words a piece:
    in one thread, BERT-base's 128 x 3072 A took 66 us a call while the other core waited."""
    rows, k2 = x.shape[0], out.shape[1]
    threads, parts = parfor.threads(), 1
    if threads > 1 and not workpool.busy():
        parts = parfor.pieces(threads, min(rows, rows * k2 // PACK_SPLIT_MIN))
    step = -(-rows // max(1, parts))
    job = np.empty(_ROWS_JOB, dtype=np.int64)
    job[0], job[1], job[2], job[3] = _ROWS_JOB, x.ctypes.data, x.strides[0], x.shape[1]
    job[4], job[5], job[6], job[7] = out.ctypes.data, k2, rows, step
    if parts <= 1:
        _rows(job, 0, rows)
    else:
        _run_rows(x, -(-rows // step), job)


# A GEMM job (int64): its length; A, B, C addresses; lda, ldc (words, floats); m, n, k2;
# along n; the step.
_JOB = 11


@jit(inline="always", **_OPTS)
def _piece(p, job):  # type: ignore[no-untyped-def]
    a, b, c, lda, ldc = job[1], job[2], job[3], job[4], job[5]
    m, n, k2, along_n, step = job[6], job[7], job[8], job[9], job[10]
    lo = p * step
    if along_n:  # lo is a multiple of NR: B's panel lo / NR
        gemm_bf16(a, lda, b + 4 * lo * k2, c + 4 * lo, ldc, m, min(step, n - lo), k2, False)
    else:
        at_a, at_c = a + 4 * lo * lda, c + 4 * lo * ldc
        gemm_bf16(at_a, lda, b, at_c, ldc, min(step, m - lo), n, k2, False)


def _task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a split bf16 GEMM (a pool task)."""
    _piece(p, parfor.job(data))


parfor.export_task("bf16_gemm", _task)
_run = parfor.runner("bf16_gemm")


@jit(**_OPTS)
def gemm(like, a, lda, b, c, ldc, m, n, k2):  # type: ignore[no-untyped-def]
    """`gemm_bf16` writing C, cut into pieces on the pool when large; ``like`` is a float32
    array (the task's dtype)."""
    along_n = n >= m
    side = n if along_n else m
    threads = parfor.threads()
    parts = 1
    if threads > 1 and not workpool.busy():
        parts = parfor.pieces(threads, (m * n * 2 * k2) // SPLIT_MIN)
    if parts <= 1:
        gemm_bf16(a, lda, b, c, ldc, m, n, k2, False)
        return
    align = NR if along_n else 8
    step = -(-side // parts)
    step = -(-step // align) * align
    job = np.empty(_JOB, dtype=np.int64)
    job[0], job[1], job[2], job[3], job[4], job[5] = _JOB, a, b, c, lda, ldc
    job[6], job[7], job[8], job[9], job[10] = m, n, k2, 1 if along_n else 0, step
    _run(like, -(-side // step), job)


@jit(**_OPTS, fastmath=True)
def _gemv_rows(xw, w, out, j0, j1):  # type: ignore[no-untyped-def]
    """``out[j] = xw . w[j]`` for j in [j0, j1): ``xw`` the bf16-rounded input in float32,
    ``w``'s rows bf16 bits (uint16 view). Past `GEMV_SHARED_DEPTH`, four rows a pass share
    each load of ``xw``, which outgrows L1 (alexnet's fc6, 9216 deep: 2.9 against 3.9 ms
    for one row a pass, one thread); shallower, one row a pass is faster (4096: 0.86 against
    1.16 ms)."""
    kp = w.shape[1]
    sixteen = np.uint32(16)
    j = j0
    while kp > GEMV_SHARED_DEPTH and j + 4 <= j1:
        r0, r1, r2, r3 = w[j], w[j + 1], w[j + 2], w[j + 3]
        s0 = s1 = s2 = s3 = np.float32(0.0)
        for q in range(kp):
            v = xw[q]
            s0 += v * _as_float(np.uint32(r0[q]) << sixteen)
            s1 += v * _as_float(np.uint32(r1[q]) << sixteen)
            s2 += v * _as_float(np.uint32(r2[q]) << sixteen)
            s3 += v * _as_float(np.uint32(r3[q]) << sixteen)
        out[j], out[j + 1], out[j + 2], out[j + 3] = s0, s1, s2, s3
        j += 4
    for i in range(j, j1):
        row = w[i]  # a 1-d row: the loop vectorizes
        s = np.float32(0.0)
        for q in range(kp):
            s += xw[q] * _as_float(np.uint32(row[q]) << sixteen)
        out[i] = s


# A GEMV job (int64): its length; the rounded input's, the weight's and the output's
# addresses; the weight's rows and padded depth; rows per piece.
_GEMV_JOB = 7


def _gemv_task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a split GEMV: ``step`` of the weight's rows (a pool task)."""
    job = parfor.job(data)
    n, kp, step = job[4], job[5], job[6]
    xw = parfor.array_at(job[1], (kp,), like)
    w = parfor.array_at(job[2], (n, kp // 2), like).view(np.uint16)  # bf16 bits, 2 a float
    out = parfor.array_at(job[3], (n,), like)
    _gemv_rows(xw, w, out, p * step, min(n, (p + 1) * step))


parfor.export_task("bf16_gemv", _gemv_task)
_run_gemv = parfor.runner("bf16_gemv")


@jit(**_OPTS)
def _gemv(xw, w, out):  # type: ignore[no-untyped-def]
    """``out = xw @ w.T`` (``w`` uint16 bf16 bits), its rows cut into pieces on the pool when
    the weight is large."""
    n, kp = w.shape
    threads = parfor.threads()
    parts = 1
    if threads > 1 and not workpool.busy():
        parts = parfor.pieces(threads, (n * kp) // GEMV_SPLIT_MIN)
    if parts <= 1:
        _gemv_rows(xw, w, out, 0, n)
        return
    step = -(-n // parts)
    job = np.empty(_GEMV_JOB, dtype=np.int64)
    job[0], job[1], job[2], job[3] = _GEMV_JOB, xw.ctypes.data, w.ctypes.data, out.ctypes.data
    job[4], job[5], job[6] = n, kp, step
    _run_gemv(out, -(-n // step), job)


@jit(**_OPTS)
def _check_dense(x, w, out):  # type: ignore[no-untyped-def]
    m, k = x.shape
    if w.shape[1] != k + (k & 1):
        raise ValueError("bf16 dense: the weight's depth is not the input's, padded to even")
    if out.shape[0] != m or out.shape[1] != w.shape[0]:
        raise ValueError("bf16 dense: the output's shape is not (rows, units)")


@jit(inline="always", **_OPTS)
def dense(x, w, out, exact=False):  # type: ignore[no-untyped-def]
    """``out[m, n] = bf16(x[m, k]) @ w[n, kp].T`` with float32 sums; ``w`` int16 bf16 bits,
    all 2-d. With ``exact``, ``x`` as it is, not rounded (``dense_bf16``'s ``input``
    ``"float32"``): GEMVs for every row, whose FMAs take float32 ``x`` at no cost."""
    _check_dense(x, w, out)
    m, k = x.shape
    n, kp = w.shape
    if m == 0 or n == 0:
        return
    xc = np.ascontiguousarray(x)
    wc = np.ascontiguousarray(w).view(np.uint16)
    if m <= GEMV_ROWS or exact:
        xw = np.zeros(kp, dtype=np.float32)
        row = np.empty(n, dtype=np.float32)
        bits = xw.view(np.uint32)
        for i in range(m):
            for q in range(k):
                xw[q] = xc[i, q]
            if not exact:
                for q in range(k):
                    bits[q] = np.uint32(round_bits(bits[q]) << 16)
            _gemv(xw, wc, row)
            copy(out[i], row, n)
        return
    # B's words in a float32 array, passed as the GEMM's ``like``: that keeps it alive until
    # the GEMM is done (Numba frees an array after its last use, here its address)
    packed = np.empty((panels(m), kp // 2, NR), dtype=np.float32)
    pack_rows(xc, k, packed.view(np.uint32))
    ct = np.empty((n, m), dtype=np.float32)
    gemm(packed, wc.ctypes.data, kp // 2, packed.ctypes.data, ct.ctypes.data, m, n, m, kp // 2)
    for i in range(m):  # not ``out[:, :] = ct.T``: see `planes.copy`
        for j in range(n):
            out[i, j] = ct[j, i]
