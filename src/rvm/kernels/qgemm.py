"""Integer convolution and dense products for quantized models: uint8 x int8 -> int32.

`qconv2d` and `qdense` compute what `rvm.op.qconv2d` / `rvm.op.qdense` define (int32 sums of
``(x - x_zero) * w`` plus the bias, requantized per output channel, clipped, cast to uint8 or
int8) on C-contiguous operands:

- the weight's rows are the micro-kernel's broadcast operand (int8, depths contiguous and
  padded with zeros to a multiple of 4), beside each row's sum; a convolution's are in the
  panel's depth order (tap-major, 4 channels a word): an OHWI weight (``hwc``, as importers
  store it) is used in place when its channels are a multiple of 4; an OIHW one is reordered
  per call when the panel is by words, else used in place with a panel made a byte at a
  time in its order;
- the input is the packed operand, a panel of uint8 (quads of depth, positions, 4): a
  convolution interleaves each group of 4 channel rows of the NCHW image into words, tap by
  tap, for every output position (im2col by 32-bit words, a vectorized run per output row
  at unit stride; taps in the padding read the zero point, so they add nothing once
  corrected); int8 inputs are shifted by 128 into uint8 (and their zero point with them);
- the micro-kernel (`_micro`, LLVM IR) keeps `MR` rows x `NR` columns of int32 sums in
  registers: for every 4 depths it broadcasts each row's 4 bytes and issues one
  ``vpdpbusd`` (AVX-512 VNNI: 64 multiply-adds of uint8 by int8 into int32) per vector.
  Without VNNI (`VNNI` False) a plain loop computes the same sums;
- the sums are made a block of columns at a time (`_blocks`, in cache) and requantized
  there: the epilogue corrects for the input zero point (``- x_zero * weight_sum``), adds
  the bias, scales in float32, rounds half to even, adds the output zero point and clips;
- a large product is cut into pieces of columns on rvm's pool (`rvm.kernels.parfor`: the
  task ``qgemm``, its job addresses and sizes; each piece its own blocks), as the float
  GEMMs are, from `SPLIT_MIN` multiply-adds a piece.

The sums are exact (int32 holds 255 * 128 * 65536); results equal the ops' NumPy references.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic, overload

from rvm.kernels import parfor, workpool
from rvm.kernels.planes import U
from rvm.kernels.sgemm import _target_features

__all__ = ["MR", "NR", "VNNI", "qconv2d", "qdense"]

VNNI = "+avx512vnni" in set(_target_features().split(","))
LANES = 16
VECTORS = 2
MR = 8  # rows x VECTORS accumulators: 16 of the 32 zmm registers
NR = LANES * VECTORS

SPLIT_MIN = 1 << 21  # multiply-adds a piece keeps at least when a product is split
PIECES_PER_THREAD = 4  # pieces a thread claims (more than one: balance on a loaded machine)

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
    return rows, _row_sums(np.ascontiguousarray(wm).reshape(-1), 0, o, k)


@nb.njit(**_OPTS)
def _row_sums(flat, o0, og, length):  # type: ignore[no-untyped-def]
    """The int32 sums of rows ``o0 + [0, og)`` of ``flat`` viewed as rows of ``length``
    (unsigned indices: vectorized)."""
    sums = np.zeros(og, np.int32)
    for o in range(og):
        at, total = U((o0 + o) * length), np.int32(0)
        for d in range(U(length)):
            total += np.int32(flat[at + d])
        sums[o] = total
    return sums


@nb.njit(**_OPTS)
def _gemm(rows, panel, acc, swap, j0, j1):  # type: ignore[no-untyped-def]
    """``acc[r, j - j0] = sum_d rows[r, d] * B[d, j]`` in int32 for columns ``j0 <= j < j1``
    (``j0`` a multiple of `NR`), B packed in ``panel`` (quads, columns, 4); ``swap`` says which
    operand is the uint8 one (see `_micro`)."""
    n_rows, lda = rows.shape
    quads, cols = panel.shape[0], panel.shape[1]
    ldc = acc.shape[1]
    if VNNI:
        a0, b0, c0 = rows.ctypes.data, panel.ctypes.data, acc.ctypes.data
        for j in range(j0, j1, NR):
            for r in range(0, n_rows, MR):
                count = min(MR, n_rows - r)
                _micro(quads, a0 + r * lda, lda, b0 + 4 * j, 4 * cols,
                       c0 + 4 * (r * ldc + j - j0), ldc, count, swap)  # fmt: skip
        return
    for r in range(n_rows):
        for j in range(j0, j1):
            total = np.int32(0)
            for q in range(quads):
                for t in range(4):
                    total += np.int32(rows[r, 4 * q + t]) * np.int32(panel[q, j, t])
            acc[r, j - j0] = total


@nb.njit(**_OPTS)
def _requantize(acc, sums, x_zero, bias, scale, o0, y_zero, low, high, out, p0, p1, narrow):  # type: ignore[no-untyped-def]
    """``out[o, p]`` for ``p0 <= p < p1`` from the sums ``acc[o, p - p0]`` of channel ``o0 +
    o`` (any layouts; whole arrays, not slices, keep contiguous ones' loops vectorized);
    ``narrow``: every sum is below 2 ** 30 in magnitude."""
    og, first = out.shape[0], np.uint64(p0)
    one_bias, one_scale = bias.size == 1, scale.size == 1
    # In float32 (16 lanes): a sum past 2 ** 24 may round when the zero point is added,
    # but it is then far outside the range and clipped the same.
    zero, lo, hi = np.float32(y_zero), np.float32(low), np.float32(high)
    for o in range(og):
        b = bias[0] if one_bias else bias[o0 + o]
        f = np.float32(scale[0] if one_scale else scale[o0 + o])
        shift = np.int64(b) - x_zero * sums[o]
        if narrow and abs(shift) < 1 << 30:  # acc + shift fits in int32: 16 lanes
            shift32 = np.int32(shift)
            for p in range(np.uint64(p1 - p0)):  # unsigned: no wraparound, vectorized
                q = np.rint(np.float32(np.int32(acc[o, p] + shift32)) * f) + zero
                out[o, first + p] = np.int32(min(max(q, lo), hi))
            continue
        for p in range(np.uint64(p1 - p0)):
            q = np.rint(np.float32(acc[o, p] + shift) * f) + zero
            out[o, first + p] = np.int32(min(max(q, lo), hi))


@intrinsic
def pointer_at(typingctx, address, like):  # type: ignore[no-untyped-def]
    """Address ``address`` (int64) as a pointer to ``like``'s dtype (``like`` an array)."""
    if not isinstance(like, nt.Array):
        return None
    ptr = nt.CPointer(like.dtype)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.inttoptr(args[0], context.get_value_type(ptr))

    return ptr(nt.int64, like), codegen


def _plain(bias, scale):  # type: ignore[no-untyped-def]
    """Whether ``bias`` is int32 and ``scale`` float32 (the ops' types: what a piece reads)."""
    return bias.dtype == np.int32 and scale.dtype == np.float32


@overload(_plain, jit_options=_OPTS)
def _plain_impl(bias, scale):  # type: ignore[no-untyped-def]
    value = bias.dtype == nt.int32 and scale.dtype == nt.float32
    return lambda bias, scale: value


# Dtype markers for `_at` (never read).
_U8, _I8 = np.zeros(0, np.uint8), np.zeros(0, np.int8)
_I32, _F32 = np.zeros(0, np.int32), np.zeros(0, np.float32)
# A job: its length; the weight rows (address, count, stride); the panel (address, quads,
# columns); sums; bias and scale (address, size); x_zero, o0, y_zero, low, high; the output
# (address, positions, kind: 1 int8 else uint8, + 2 stored transposed); the step.
_JOB = 21
BLOCK_BYTES = 1 << 17  # the int32 sums of a block of columns, requantized while in cache


@nb.njit(**_OPTS)
def _blocks(rows, sums, panel, zero, bias, scale, o0, y_zero, low, high, out, j0, j1):  # type: ignore[no-untyped-def]
    """Columns ``[j0, j1)`` of ``out`` (channels x positions, any layout) requantized from
    ``rows @ panel``, a block of columns at a time (its sums stay in cache)."""
    og, p_total = out.shape
    block = max(NR, BLOCK_BYTES // (4 * og) // NR * NR)
    acc = np.empty((og, block), np.int32)
    narrow = rows.shape[1] * 255 * 128 < 1 << 30  # |sum| <= 255 * 128 * depth
    for b0 in range(j0, j1, block):
        b1 = min(j1, b0 + block)
        _gemm(rows, panel, acc, 1, b0, b1)
        end = min(p_total, b1)
        if end > b0:
            _requantize(acc, sums, zero, bias, scale, o0, y_zero, low, high, out, b0, end,
                        narrow)  # fmt: skip


@nb.njit(**_OPTS)
def _piece(p, job):  # type: ignore[no-untyped-def]
    """Columns ``[p * step, (p + 1) * step)`` of a split product: their sums, requantized."""
    og, lda, quads, cols = job[2], job[3], job[5], job[6]
    p_total, kind, step = job[18], job[19], job[20]
    rows = nb.carray(pointer_at(job[1], _I8), (og, lda))
    panel = nb.carray(pointer_at(job[4], _U8), (quads, cols, 4))
    sums = nb.carray(pointer_at(job[7], _I32), og)
    bias = nb.carray(pointer_at(job[8], _I32), job[9])
    scale = nb.carray(pointer_at(job[10], _F32), job[11])
    zero, o0, y_zero, low, high = job[12], job[13], job[14], job[15], job[16]
    j0 = p * step
    j1 = min(cols, j0 + step)
    if kind == 0:
        out = nb.carray(pointer_at(job[17], _U8), (og, p_total))
        _blocks(rows, sums, panel, zero, bias, scale, o0, y_zero, low, high, out, j0, j1)
    elif kind == 1:
        out = nb.carray(pointer_at(job[17], _I8), (og, p_total))
        _blocks(rows, sums, panel, zero, bias, scale, o0, y_zero, low, high, out, j0, j1)
    elif kind == 2:
        out = nb.carray(pointer_at(job[17], _U8), (p_total, og)).T
        _blocks(rows, sums, panel, zero, bias, scale, o0, y_zero, low, high, out, j0, j1)
    else:
        out = nb.carray(pointer_at(job[17], _I8), (p_total, og)).T
        _blocks(rows, sums, panel, zero, bias, scale, o0, y_zero, low, high, out, j0, j1)


def _task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a split integer product (a pool task)."""
    _piece(p, parfor.job(data))


parfor.export_task("qgemm", _task)
_run = parfor.runner("qgemm")


@nb.njit(**_OPTS)
def _split(rows, sums, panel, zero, bias, scale, o0, y_zero, low, high, out, transposed):  # type: ignore[no-untyped-def]
    """Pieces of columns of a large product on the pool: how many (1: not split, run it)."""
    og, quads, cols = rows.shape[0], panel.shape[0], panel.shape[1]
    threads = parfor.threads()
    if threads < 2 or not _plain(bias, scale) or workpool.busy():
        return 1
    parts = min(PIECES_PER_THREAD * threads, cols // NR, og * cols * quads * 4 // SPLIT_MIN)
    if parts < 2:
        return 1
    step = -(-(cols // NR) // parts) * NR
    p_total = out.shape[0] if transposed else out.shape[1]
    kind = (1 if _shift(out) else 0) + (2 if transposed else 0)
    job = np.array((_JOB, rows.ctypes.data, og, rows.shape[1], panel.ctypes.data, quads, cols,
                    sums.ctypes.data, bias.ctypes.data, bias.size, scale.ctypes.data,
                    scale.size, zero, o0, y_zero, low, high, out.ctypes.data, p_total, kind,
                    step), dtype=np.int64)  # fmt: skip
    _run(_F32, -(-cols // step), job)
    return parts


@nb.njit(**_OPTS)
def _product(rows, sums, panel, zero, bias, scale, o0, y_zero, low, high, out, transposed):  # type: ignore[no-untyped-def]
    """``out`` (channels x positions, or its transpose stored when ``transposed``) requantized
    from ``rows @ panel``: in pieces of columns on rvm's pool when large."""
    args = (zero, bias, scale, o0, y_zero, low, high)
    if _split(rows, sums, panel, *args, out, transposed) > 1:
        return
    if transposed:
        _blocks(rows, sums, panel, *args, out.T, 0, panel.shape[1])
    else:
        _blocks(rows, sums, panel, *args, out, 0, panel.shape[1])


@nb.njit(**_OPTS)
def _hwc_weight_rows(w, o0, og, cq):  # type: ignore[no-untyped-def]
    """Output channels ``o0 + [0, og)`` of the OHWI weight ``w`` as rows of depths in the
    panel's order (itself when the channels are a multiple of 4, else each tap's channels
    padded with zeros to ``4 * cq``), and each row's sum."""
    kh, kw, cg = w.shape[1], w.shape[2], w.shape[3]
    taps, width = kh * kw, 4 * cq
    flat = w.reshape(-1)
    sums = _row_sums(flat, o0, og, taps * cg)
    if width == cg:
        return flat[o0 * taps * cg : (o0 + og) * taps * cg].reshape(og, taps * cg), sums
    rows = np.zeros((og, taps * width), np.int8)
    for o in range(og):
        for tap in range(taps):
            src = ((o0 + o) * taps + tap) * cg
            rows[o, tap * width : tap * width + cg] = flat[src : src + cg]
    return rows, sums


@nb.njit(**_OPTS)
def _conv_weight_rows(w, o0, og, cq):  # type: ignore[no-untyped-def]
    """Output channels ``o0 + [0, og)`` of the weight ``w`` (o, cg, kh, kw) as rows of depths
    in the panel's order (see `_columns`: depth ``4 * ((u * kw + v) * cq + k) + t`` is
    channel ``4 * k + t`` of tap ``(u, v)``, channels past ``cg`` 0), and each row's sum."""
    cg, kh, kw = w.shape[1], w.shape[2], w.shape[3]
    taps, width = kh * kw, 4 * cq
    flat = w.reshape(-1)
    sums = _row_sums(flat, o0, og, cg * taps)
    if taps * width == cg:  # a 1 x 1 kernel, channels a multiple of 4: the weight itself
        return flat[o0 * cg : (o0 + og) * cg].reshape(og, cg), sums
    rows = np.zeros((og, taps * width), np.int8)
    rf = rows.reshape(-1)
    for o in range(og):
        src, dst = U((o0 + o) * cg * taps), U(o * taps * width)
        for tap in range(taps):
            at = dst + U(tap * width)
            for c in range(U(cg)):
                rf[at + c] = flat[src + c * U(taps) + U(tap)]
    return rows, sums


@nb.njit(**_OPTS)
def _columns(x, n, c0, cg, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, fill, flip, words):  # type: ignore[no-untyped-def]
    """Image ``n``'s channels ``c0 + [0, cg)`` of ``x`` (uint8 view) as the panel by words:
    ``words[(u * kw + v) * cq + k, i * ow + j]`` holds channels ``4k`` to ``4k + 3`` (a byte
    each, ``flip`` 0x80 shifting int8 into uint8) that tap ``(u, v)`` of output position
    ``(i, j)`` reads, ``fill`` in each byte for a tap in the padding; channels past ``cg``
    repeat the last one (their weights are 0). Made straight from the NCHW image: four
    channel rows interleaved a run at a time (vectorized at unit stride). Positions past the
    end are left as they are."""
    ih, iw = x.shape[2], x.shape[3]
    cq, cols = (cg + 3) // 4, words.shape[1]
    wf, xf = words.reshape(-1), x.reshape(-1)
    fill_word = np.uint32(fill) * np.uint32(0x01010101)
    flip_word = np.uint32(flip) * np.uint32(0x01010101)
    plane = U(ih * iw)
    for k in range(cq):
        base = U((n * x.shape[1] + c0) * ih * iw)
        p0 = base + U(min(4 * k, cg - 1)) * plane
        p1 = base + U(min(4 * k + 1, cg - 1)) * plane
        p2 = base + U(min(4 * k + 2, cg - 1)) * plane
        p3 = base + U(min(4 * k + 3, cg - 1)) * plane
        for u in range(kh):
            for v in range(kw):
                first = pl - v * dw
                # Output columns whose tap is inside the row: [j_lo, j_hi).
                j_lo = min(max(0, (first + sw - 1) // sw), ow)
                j_hi = min(max(j_lo, (iw - 1 + first) // sw + 1), ow)
                at0 = ((u * kw + v) * cq + k) * cols
                for i in range(oh):
                    y = i * sh - pt + u * dh
                    at = at0 + i * ow
                    if y < 0 or y >= ih:
                        wf[at : at + ow] = fill_word
                        continue
                    wf[at : at + j_lo] = fill_word
                    wf[at + j_hi : at + ow] = fill_word
                    row = U(y * iw + j_lo * sw - first)
                    dst, count = U(at + j_lo), U(j_hi - j_lo)
                    if sw == 1:
                        _interleave(xf, p0 + row, p1 + row, p2 + row, p3 + row, wf, dst,
                                    count, flip_word)  # fmt: skip
                    else:
                        step = U(sw)
                        for j in range(count):
                            s = row + j * step
                            wf[dst + j] = _word(xf, p0 + s, p1 + s, p2 + s, p3 + s) ^ flip_word


@nb.njit(**_OPTS)
def _interleave(xf, a0, a1, a2, a3, wf, dst, count, flip_word):  # type: ignore[no-untyped-def]
    """``wf[dst + j]`` = the bytes ``xf[a0 + j]`` .. ``xf[a3 + j]`` as one word, for j <
    ``count`` (unsigned indices: a vectorized loop)."""
    for j in range(count):
        wf[dst + j] = _word(xf, a0 + j, a1 + j, a2 + j, a3 + j) ^ flip_word


@nb.njit(inline="always", **_OPTS)
def _word(xf, a0, a1, a2, a3):  # type: ignore[no-untyped-def]
    """The bytes ``xf[a0]`` .. ``xf[a3]`` as one little-endian word."""
    low = np.uint32(xf[a0]) | (np.uint32(xf[a1]) << 8)
    return low | (np.uint32(xf[a2]) << 16) | (np.uint32(xf[a3]) << 24)


@nb.njit(**_OPTS)
def _columns_bytes(x, n, c0, cg, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, fill, flip, panel):  # type: ignore[no-untyped-def]
    """Image ``n``'s channels ``c0 + [0, cg)`` as a uint8 panel (quads, positions, 4) in the
    weight's own depth order: depth ``d = (c * kh + u) * kw + v`` of position ``i * ow + j``
    at ``[d // 4, i * ow + j, d % 4]``, a byte at a time (for products with more channels
    than positions, where reordering the weight would cost more than these stores); taps in
    the padding read ``fill``. Positions and depths past the end stay 0."""
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
def qconv2d(x, w, bias, scale, out, x_zero, y_zero, low, high, groups, sh, sw, dh, dw, pt, pl,
            hwc=False):  # type: ignore[no-untyped-def]  # fmt: skip
    """`rvm.op.qconv2d` into ``out`` (n, o, oh, ow) of uint8 or int8; ``w`` int8, (o, cg,
    kh, kw) or, ``hwc``, (o, kh, kw, cg)."""
    n_img = x.shape[0]
    o, oh, ow = w.shape[0], out.shape[2], out.shape[3]
    cg, kh, kw = (w.shape[3], w.shape[1], w.shape[2]) if hwc else w.shape[1:]
    og = o // groups
    p_total = oh * ow
    # The panel by words (4 channels of a tap) needs the weight in tap-major order: an OHWI
    # weight is (in place when its channels are a multiple of 4); an OIHW one is reordered
    # per call, worth it for many positions. Many channels of an OIHW weight: the weight in
    # place, the panel a byte at a time.
    by_words = hwc or 4 * og < p_total
    cq = (cg + 3) // 4 if by_words else 1  # words of 4 channels
    quads = kh * kw * cq if by_words else (cg * kh * kw + 3) // 4
    flip = _shift(x)  # int8 inputs shift into uint8
    zero = x_zero + flip
    cols = (p_total + NR - 1) // NR * NR
    words = np.zeros((quads, cols), np.uint32)  # the panel, 4 bytes a word
    panel = words.view(np.uint8).reshape(quads, cols, 4)
    xu = x.view(np.uint8)
    for g in range(groups):
        if hwc:
            rows, sums = _hwc_weight_rows(w, g * og, og, cq)
        elif by_words:
            rows, sums = _conv_weight_rows(w, g * og, og, cq)
        else:
            wm = w[g * og : (g + 1) * og].reshape(og, cg * kh * kw)
            rows, sums = _weight_rows(wm, quads)
        for n in range(n_img):
            if by_words:
                _columns(xu, n, g * cg, cg, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, zero, flip,
                         words)  # fmt: skip
            else:
                _columns_bytes(x, n, g * cg, cg, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, zero,
                               flip, panel)  # fmt: skip
            dest = out[n, g * og : (g + 1) * og].reshape(og, p_total)
            _product(rows, sums, panel, zero, bias, scale, g * og, y_zero, low, high, dest,
                     False)  # fmt: skip


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
    _product(rows, sums, panel, x_zero + flip, bias, scale, 0, y_zero, low, high, out, True)
