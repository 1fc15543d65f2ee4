"""bf16 products with float32 accumulation: the dense and convolution entry points.

Weights arrive converted once, at compile time (`rvm.transform.to_bf16`), as the int16 bits
of bf16 values, laid out as the GEMM's A (`rvm.kernels.bf16gemm`): ``(rows, kp)`` with each
row's depth padded to an even ``kp`` with zeros. Activations arrive in float32 and are rounded
(to nearest even) to bf16 per call, packed in pairs as the GEMM's B:

- `dense(x, w, out)`: ``out[m, n] = bf16(x[m, k]) @ w[n, kp].T``. A few rows (a batch-1
  classifier) take a GEMV over ``w``'s rows (float32 FMAs on widened bf16, half the bytes of
  float32 weights); more take the GEMM ``out.T = w @ pack(x.T)``, then a transpose.
- `conv2d(x, w, out, groups, sh, sw, dh, dw, pt, pl, kh, kw)` on NCHW: per image and group,
  the im2col columns packed in pairs, then the GEMM ``out[n, group] = w[group] @ columns``.

Large products are cut into pieces on rvm's pool (`rvm.kernels.parfor`), along C's longer
side. No bounds are assumed: every entry point checks its arrays' shapes first and raises
`ValueError` naming what disagrees.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.extending import intrinsic

from rvm.kernels import parfor, workpool
from rvm.kernels.bf16gemm import NR, gemm_bf16, panels

__all__ = ["conv2d", "dense", "round_bits"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
GEMV_ROWS = 4  # up to this many rows, `dense` runs GEMVs (the GEMM's lanes run along rows)
SPLIT_MIN = 1 << 21  # multiply-adds a piece keeps at least when a product is split
PACK_SPLIT_MIN = 1 << 18  # words a packing piece writes at least
GEMV_SPLIT_MIN = 1 << 18  # weights a GEMV piece reads at least (512 KB of bf16)
PIECES_PER_THREAD = 4


@intrinsic
def _as_float(typingctx, bits):  # type: ignore[no-untyped-def]
    """The float32 whose bits are the uint32 ``bits``."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.FloatType())

    return nt.float32(nt.uint32), codegen


@nb.njit(**_OPTS)
def round_bits(word):  # type: ignore[no-untyped-def]
    """The bf16 bits (0..65535) nearest the float32 whose bits are ``word`` (ties to even;
    NaN stays a quiet NaN)."""
    w = np.int64(word)
    if (w & 0x7FFFFFFF) > 0x7F800000:
        return ((w >> 16) | 0x40) & 0xFFFF
    return ((w + 0x7FFF + ((w >> 16) & 1)) >> 16) & 0xFFFF


@nb.njit(**_OPTS)
def _pack_rows(x, k, out):  # type: ignore[no-untyped-def]
    """``out[i // NR, p, i % NR]`` (uint32) = the bf16 pair of ``x[i, 2p]`` and ``x[i, 2p +
    1]`` (0 past ``k`` and past x's rows): x's rows (float32, 2-d, C) as the GEMM's B, in
    panels (`rvm.kernels.bf16gemm.panel_index`)."""
    bits = x.reshape(x.size).view(np.uint32)
    rows = x.shape[0]
    out[out.shape[0] - 1] = 0  # the last panel's padding
    for i in range(rows):
        panel, lane = out[i // NR], i % NR
        for p in range(k // 2):
            lo = round_bits(bits[i * k + 2 * p])
            hi = round_bits(bits[i * k + 2 * p + 1])
            panel[p, lane] = np.uint32(lo | (hi << 16))
        if k & 1:
            panel[k // 2, lane] = np.uint32(round_bits(bits[i * k + k - 1]))


# A GEMM job (int64): its length; A, B, C addresses; lda, ldc (words, floats); m, n, k2;
# along n; the step.
_JOB = 11


@nb.njit(**_OPTS)
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


@nb.njit(**_OPTS)
def _gemm(like, a, lda, b, c, ldc, m, n, k2):  # type: ignore[no-untyped-def]
    """`gemm_bf16` writing C, cut into pieces on the pool when large; ``like`` is a float32
    array (the task's dtype)."""
    along_n = n >= m
    side = n if along_n else m
    threads = parfor.threads()
    parts = 1
    if threads > 1 and not workpool.busy():
        parts = min(PIECES_PER_THREAD * threads, (m * n * 2 * k2) // SPLIT_MIN)
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


@nb.njit(**_OPTS, fastmath=True)
def _gemv_rows(xw, w, out, j0, j1):  # type: ignore[no-untyped-def]
    """``out[j] = xw . w[j]`` for j in [j0, j1): ``xw`` the bf16-rounded input in float32,
    ``w``'s rows bf16 bits (uint16 view)."""
    kp = w.shape[1]
    for j in range(j0, j1):
        row = w[j]  # a 1-d row: the loop vectorizes
        s = np.float32(0.0)
        for q in range(kp):
            s += xw[q] * _as_float(np.uint32(row[q]) << np.uint32(16))
        out[j] = s


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


@nb.njit(**_OPTS)
def _gemv(xw, w, out):  # type: ignore[no-untyped-def]
    """``out = xw @ w.T`` (``w`` uint16 bf16 bits), its rows cut into pieces on the pool when
    the weight is large."""
    n, kp = w.shape
    threads = parfor.threads()
    parts = 1
    if threads > 1 and not workpool.busy():
        parts = min(PIECES_PER_THREAD * threads, (n * kp) // GEMV_SPLIT_MIN)
    if parts <= 1:
        _gemv_rows(xw, w, out, 0, n)
        return
    step = -(-n // parts)
    job = np.empty(_GEMV_JOB, dtype=np.int64)
    job[0], job[1], job[2], job[3] = _GEMV_JOB, xw.ctypes.data, w.ctypes.data, out.ctypes.data
    job[4], job[5], job[6] = n, kp, step
    _run_gemv(out, -(-n // step), job)


@nb.njit(**_OPTS)
def _check_dense(x, w, out):  # type: ignore[no-untyped-def]
    m, k = x.shape
    if w.shape[1] != k + (k & 1):
        raise ValueError("bf16 dense: the weight's depth is not the input's, padded to even")
    if out.shape[0] != m or out.shape[1] != w.shape[0]:
        raise ValueError("bf16 dense: the output's shape is not (rows, units)")


@nb.njit(**_OPTS)
def dense(x, w, out):  # type: ignore[no-untyped-def]
    """``out[m, n] = bf16(x[m, k]) @ w[n, kp].T`` with float32 sums; ``w`` int16 bf16 bits,
    all 2-d."""
    _check_dense(x, w, out)
    m, k = x.shape
    n, kp = w.shape
    if m == 0 or n == 0:
        return
    xc = np.ascontiguousarray(x)
    wc = np.ascontiguousarray(w).view(np.uint16)
    if m <= GEMV_ROWS:
        xw = np.zeros(kp, dtype=np.float32)
        row = np.empty(n, dtype=np.float32)
        bits = xw.view(np.uint32)
        for i in range(m):
            for q in range(k):
                xw[q] = xc[i, q]
            for q in range(k):
                bits[q] = np.uint32(round_bits(bits[q]) << 16)
            _gemv(xw, wc, row)
            out[i, :] = row
        return
    packed = np.empty((panels(m), kp // 2, NR), dtype=np.uint32)
    _pack_rows(xc, k, packed)
    ct = np.empty((n, m), dtype=np.float32)
    _gemm(ct, wc.ctypes.data, kp // 2, packed.ctypes.data, ct.ctypes.data, m, n, m, kp // 2)
    out[:, :] = ct.T


@nb.njit(**_OPTS)
def _round_image(x, c0, pt, pl, out):  # type: ignore[no-untyped-def]
    """``out[c, pt + y, pl + x]`` (uint32) = the bf16 bits of ``x[c0 + c, y, x]`` (x float32
    CHW); ``out``'s border (the padding) 0."""
    cg, h, wd = out.shape[0], x.shape[1], x.shape[2]
    out[...] = 0
    for c in range(cg):
        bits = x[c0 + c].reshape(h * wd).view(np.uint32)
        for y in range(h):
            row = out[c, pt + y]
            for i in range(wd):
                row[pl + i] = np.uint32(round_bits(bits[y * wd + i]))


@nb.njit(**_OPTS)
def _pack_columns(xp, cg, kh, kw, sh, sw, dh, dw, oh, ow, out):  # type: ignore[no-untyped-def]
    """`_pack_panels` of every panel, cut into pieces on the pool when large."""
    count = out.shape[0]
    threads = parfor.threads()
    parts = 1
    if threads > 1 and not workpool.busy():
        parts = min(PIECES_PER_THREAD * threads, count, out.size // PACK_SPLIT_MIN)
    if parts <= 1:
        _pack_panels(xp, cg, kh, kw, sh, sw, dh, dw, oh, ow, out, 0, count)
        return
    step = -(-count // parts)
    job = np.empty(_PACK_JOB, dtype=np.int64)
    job[0], job[1], job[2], job[3], job[4] = _PACK_JOB, xp.ctypes.data, cg, xp.shape[1], xp.shape[2]
    job[5], job[6], job[7], job[8], job[9], job[10] = kh, kw, sh, sw, dh, dw
    job[11], job[12], job[13], job[14], job[15] = oh, ow, out.ctypes.data, out.shape[1], step
    _run_pack(out.view(np.float32), -(-count // step), job)


# A packing job (int64): its length; the padded image's address, channels, height, width;
# kh, kw, sh, sw, dh, dw; oh, ow; the panels' address, their depth; panels per piece.
_PACK_JOB = 16


def _pack_task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a split im2col packing: ``step`` panels (a pool task)."""
    job = parfor.job(data)
    cg, oh, ow, k2, step = job[2], job[11], job[12], job[14], job[15]
    xp = parfor.array_at(job[1], (cg, job[3], job[4]), like).view(np.uint32)
    count = (oh * ow + NR - 1) // NR
    out = parfor.array_at(job[13], (count, k2, NR), like).view(np.uint32)
    _pack_panels(xp, cg, job[5], job[6], job[7], job[8], job[9], job[10], oh, ow, out,
                 p * step, min(count, (p + 1) * step))  # fmt: skip


parfor.export_task("bf16_pack", _pack_task)
_run_pack = parfor.runner("bf16_pack")


@nb.njit(**_OPTS)
def _pack_panels(xp, cg, kh, kw, sh, sw, dh, dw, oh, ow, out, jp0, jp1):  # type: ignore[no-untyped-def]  # noqa: E501
    """Panels ``jp0`` to ``jp1`` of the im2col columns of the padded image ``xp`` (bf16 bits
    in uint32, CHW), pair-packed: word ``(p, y * ow + x)`` (`rvm.kernels.bf16gemm.panel_index`)
    holds depth rows 2p and 2p + 1 of (channel, dy, dx), the high half 0 past the depth.
    Panel after panel, so the writes are one stream and the reads stay within a few rows of
    the image."""
    k, taps = cg * kh * kw, kh * kw
    hp, wp = xp.shape[1], xp.shape[2]
    flat = xp.reshape(xp.size)
    pixels = oh * ow
    at = np.empty(pixels, dtype=np.int64)  # each output pixel's first tap in a channel
    for y in range(oh):
        for x in range(ow):
            at[y * ow + x] = y * sh * wp + x * sw
    k2 = out.shape[1]
    tap = np.empty(2 * k2, dtype=np.int64)  # each depth row's offset: channel, dy, dx
    for q in range(2 * k2):
        c, r = min(q, k - 1) // taps, min(q, k - 1) % taps
        tap[q] = c * hp * wp + (r // kw) * dh * wp + (r % kw) * dw
    high = k2 * 2 == k  # an even depth: every pair has its high half
    for jp in range(jp0, jp1):
        j0 = jp * NR
        width = min(NR, pixels - j0)
        panel = out[jp]
        if width < NR:
            panel[:, width:] = 0
        for p in range(k2):
            lo, hi = tap[2 * p], tap[2 * p + 1]
            row = panel[p]
            if high or p < k2 - 1:
                for lane in range(width):
                    src = at[j0 + lane]
                    row[lane] = flat[lo + src] | (flat[hi + src] << np.uint32(16))
            else:
                for lane in range(width):
                    row[lane] = flat[lo + at[j0 + lane]]


@nb.njit(**_OPTS)
def _check_conv(x, w, out, groups, kh, kw):  # type: ignore[no-untyped-def]
    n, c = x.shape[0], x.shape[1]
    co = w.shape[0]
    if groups < 1 or c % groups or co % groups:
        raise ValueError("bf16 conv2d: the channels do not divide into the groups")
    k = (c // groups) * kh * kw
    if w.shape[1] != k + (k & 1):
        raise ValueError("bf16 conv2d: the weight's depth is not channels x kernel, padded")
    if out.shape[0] != n or out.shape[1] != co:
        raise ValueError("bf16 conv2d: the output's batch or channels disagree")


@nb.njit(**_OPTS)
def conv2d(x, w, out, groups, sh, sw, dh, dw, pt, pl, kh, kw):  # type: ignore[no-untyped-def]
    """NCHW convolution of float32 ``x`` with bf16 ``w`` (int16 bits, ``(out channels, kp)``,
    depth ordered (channel, dy, dx)) into float32 ``out``; padding top ``pt``, left ``pl``
    (the output's size says the rest)."""
    _check_conv(x, w, out, groups, kh, kw)
    n, c = x.shape[0], x.shape[1]
    co, kp = w.shape
    oh, ow = out.shape[2], out.shape[3]
    cg, og, pixels = c // groups, co // groups, oh * ow
    if n == 0 or co == 0 or pixels == 0:
        return
    xc = np.ascontiguousarray(x)
    wc = np.ascontiguousarray(w)
    oc = np.ascontiguousarray(out)
    packed = np.empty((panels(pixels), kp // 2, NR), dtype=np.uint32)
    # the padded image holds every tap: (oh - 1) * sh + (kh - 1) * dh + 1 rows at least
    hp = max(x.shape[2] + pt, (oh - 1) * sh + (kh - 1) * dh + 1)
    wp = max(x.shape[3] + pl, (ow - 1) * sw + (kw - 1) * dw + 1)
    xb = np.empty((cg, hp, wp), dtype=np.uint32)
    at_w, at_o = wc.ctypes.data, oc.ctypes.data
    for b in range(n):
        for g in range(groups):
            _round_image(xc[b], g * cg, pt, pl, xb)
            _pack_columns(xb, cg, kh, kw, sh, sw, dh, dw, oh, ow, packed)
            a = at_w + 2 * g * og * kp
            cc = at_o + 4 * (b * co + g * og) * pixels
            _gemm(oc, a, kp // 2, packed.ctypes.data, cc, pixels, og, pixels, kp // 2)
    if oc.ctypes.data != out.ctypes.data:
        out[...] = oc
