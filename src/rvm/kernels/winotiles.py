"""Winograd F(2x2, 3x3)'s input and output transforms as vector loops (jit intrinsics), a
vector of tiles along a row of tiles at a time, the last under a lane mask.

`input_tiles` transforms the 4 x 4 windows of an image's rows of tiles into the 16 positions'
rows of tiles (``B^T d B``), as float32 or rounded into bf16 pair words, two channels a word
(`rvm.kernels.bf16words.pair_bits`), reading the windows straight from the image: the
padding and the values past its edges are lanes masked off, read as 0. `output_tiles`
transforms one output channel's products back (``A^T M A``), adds the bias and a residual,
applies the ReLU, and stores the two output rows of each row of tiles straight into the
output, the columns and rows past an odd edge masked off. `rvm.kernels.winograd` runs both.

They replace Numba loops vectorized along a row of tiles with a scalar tail (all of it scalar
on 14 x 14 maps: 7 tiles a row), which copied each channel's rows into zero-padded scratch,
and whose bf16 rows went through float32 scratch before `rvm.kernels.bf16words.pair_words`
rounded them. Each value is computed with the same operations in the same order, so the
results are the same, bit for bit. One Zen 4 core, the phases alone (medians, the host
noisy), before -> after: the bf16 input transform 217 -> 93-122 us at 64 channels on 56 x
56, 153 -> 39-61 at 128 on 28 x 28, 152 -> 60-63 at 256 on 14 x 14; the float32 one 282 ->
218-229, 142 -> 83, 112 -> 74 (it writes twice the bytes, beyond L2 on the larger maps); the
output transform 150 -> 140, 69 -> 33-48, 57 -> 44-46. In the models (two threads, each
built once, the transforms switched in turns in one process), bf16: resnet50 0.951-0.966 of
the time, inception_v2 0.953-0.982, vgg19 0.942, inception_v1 0.969, zfnet512 0.974,
densenet121 0.987; float32: squeezenet 0.952-0.954, inception_v2 0.957-0.958, resnet50
0.978-0.982.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.bf16words import LANES, pair_bits
from rvm.kernels.vectors import VectorIR

__all__ = ["input_tiles", "output_tiles"]

I64 = ir.IntType(64)


def _windows(builder: ir.IRBuilder, v: VectorIR, src, row, masks) -> list:  # type: ignore[no-untyped-def]  # noqa: E501
    """The 16 float32 vectors of ``B^T d B`` for a vector of tiles whose windows start at the
    int64 ``src``, rows ``row`` bytes apart: position ``4 i + j``'s at ``[4 i + j]``. Row
    ``a``'s values under the tiles are loaded as they lie, three vectors under
    ``masks[a]`` (the lanes off read as 0: the padding, and past the tiles), and combined down
    the rows (B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]); each
    combination is then split into its columns 0 to 3 of every tile (`_columns`) and combined
    across. (Each column loaded as every other value of the row, `VectorIR.evens`, took 8
    loads a row, not 3: 1.3x the time of the whole transform, one Zen 4 core.)"""
    b = builder
    raw = []
    for a in range(4):
        at = b.add(src, b.mul(row, I64(a)))
        raw.append([v.load(b.add(at, I64(4 * LANES * k)), v.f32, masks[a][k]) for k in range(3)])
    r0, r1, r2, r3 = raw
    down = [
        [b.fsub(r0[k], r2[k]) for k in range(3)],
        [b.fadd(r1[k], r2[k]) for k in range(3)],
        [b.fsub(r2[k], r1[k]) for k in range(3)],
        [b.fsub(r1[k], r3[k]) for k in range(3)],
    ]
    out = []
    for vectors in down:
        d0, d1, d2, d3 = _columns(b, v, vectors)
        out += [b.fsub(d0, d2), b.fadd(d1, d2), b.fsub(d2, d1), b.fsub(d1, d3)]
    return out


def _columns(b: ir.IRBuilder, v: VectorIR, vectors: list) -> list:
    """Columns 0 to 3 of each tile's window (lane ``i``: values ``2 i`` to ``2 i + 3``) of a
    row's values in three vectors (``2 LANES + 2`` values used): the even and odd values of
    the first two, then each shifted down a lane with the third's first two values last."""
    lanes = v.lanes
    first, second, third = vectors
    evens = b.shuffle_vector(first, second, ir.Constant(v.i32, list(range(0, 2 * lanes, 2))))
    odds = b.shuffle_vector(first, second, ir.Constant(v.i32, list(range(1, 2 * lanes, 2))))
    shifted = list(range(1, lanes))
    next_evens = b.shuffle_vector(evens, third, ir.Constant(v.i32, [*shifted, lanes]))
    next_odds = b.shuffle_vector(odds, third, ir.Constant(v.i32, [*shifted, lanes + 1]))
    return [evens, odds, next_evens, next_odds]


@intrinsic
def input_tiles(typingctx, lo, hi, ih, iw, top, pl, rows, tw, out, plane, mode):  # type: ignore[no-untyped-def]  # noqa: E501
    """On int64 addresses: the input transform of ``rows`` rows of ``tw`` tiles of the
    float32 image (``ih`` rows of ``iw``) at ``lo``, tile (ty, tx)'s window at row ``top + 2
    ty``, column ``2 tx - pl``, zeros outside the image, read straight from it under lane
    masks; position ``xi``'s tile (ty, tx) stored at ``out + xi plane + 4 (ty tw + tx)``:
    float32 where ``mode`` is 0; else (1) words of bf16 pairs, the low half ``lo``'s, the high
    half that of the image at ``hi`` (0 where ``hi`` is 0)."""
    sig = nt.void(*(nt.int64,) * 11)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        lo, hi, ih, iw, top, pl, rows, tw, out, plane, mode = args
        b, v = builder, VectorIR(builder, LANES)
        row = b.mul(iw, I64(4))
        steps = b.sdiv(b.add(tw, I64(LANES - 1)), I64(LANES))
        none = ir.Constant(v.masks, [0] * LANES)
        every = ir.Constant(v.masks, [1] * LANES)
        with_hi = b.icmp_signed("!=", hi, I64(0))

        def loop(store):  # type: ignore[no-untyped-def]
            with cgutils.for_range(b, rows) as ty:
                y = b.add(top, b.add(ty.index, ty.index))
                inside = []
                for a in range(4):
                    ya = b.add(y, I64(a))
                    above, below = b.icmp_signed(">=", ya, I64(0)), b.icmp_signed("<", ya, ih)
                    inside.append(b.and_(above, below))
                first = b.mul(b.sub(b.mul(y, iw), pl), I64(4))  # tile 0's window's bytes
                at_row = b.add(out, b.mul(b.mul(ty.index, tw), I64(4)))
                with cgutils.for_range(b, steps) as each:
                    at = b.mul(each.index, I64(LANES))
                    left = b.sub(tw, at)
                    col = b.sub(b.add(at, at), pl)  # the input column of lane 0's window
                    span = b.add(b.add(left, left), I64(2))  # the values the tiles read
                    columns = []
                    for k in range(3):
                        past = b.sub(b.sub(iw, col), I64(LANES * k))  # lanes before the edge
                        end = b.select(b.icmp_signed("<", past, b.sub(span, I64(LANES * k))),
                                       past, b.sub(span, I64(LANES * k)))  # fmt: skip
                        before = b.sub(I64(-LANES * k), col)  # lanes left of the image
                        columns.append(b.and_(v.first(end), b.xor(v.first(before), every)))
                    masks = [[b.select(ok, m, none) for m in columns] for ok in inside]
                    offset = b.add(first, b.mul(at, I64(8)))
                    store(offset, masks, b.add(at_row, b.mul(at, I64(4))), v.first(left))

        def floats(offset, masks, dst, mask):  # type: ignore[no-untyped-def]
            for xi, value in enumerate(_windows(b, v, b.add(lo, offset), row, masks)):
                v.store(value, b.add(dst, b.mul(plane, I64(xi))), mask)

        def words(offset, masks, dst, mask):  # type: ignore[no-untyped-def]
            low = _windows(b, v, b.add(lo, offset), row, masks)
            high_masks = [[b.select(with_hi, m, none) for m in ms] for ms in masks]
            high = _windows(b, v, b.add(hi, offset), row, high_masks)  # 0 where hi is 0
            for xi in range(16):
                v.store(pair_bits(b, low[xi], high[xi]), b.add(dst, b.mul(plane, I64(xi))), mask)

        with b.if_else(b.icmp_signed("==", mode, I64(0))) as (as_floats, as_words):
            with as_floats:
                loop(floats)
            with as_words:
                loop(words)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def output_tiles(typingctx, m, plane, tw, rows, out, ow, height, res, bias, act):  # type: ignore[no-untyped-def]  # noqa: E501
    """On int64 addresses: one output channel's ``rows`` rows of ``tw`` tiles, ``A^T M A``
    of its 16 float32 products (position ``xi``'s tile (ty, tx) at ``m + xi plane + 4 (ty tw
    + tx)``; A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]), plus ``bias``, plus the residual at
    ``res`` (the output's layout; none where 0), then a ReLU where ``act`` is 1, stored at
    ``out`` (its first row of tiles' top row; rows ``ow`` floats apart, ``height`` of them
    from there on): the two output rows of each row of tiles, the columns past ``ow`` and the
    rows past ``height`` not stored. The sums' order is the scalar code's: ``((s0 + s1) + s2)
    + bias`` with ``s0 = (m0 + m4) + m8``, ..."""
    sig = nt.void(*(nt.int64,) * 8, nt.float32, nt.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        m, plane, tw, rows, out, ow, height, res, bias, act = args
        b, v = builder, VectorIR(builder, LANES)
        steps = b.sdiv(b.add(tw, I64(LANES - 1)), I64(LANES))
        line = b.mul(ow, I64(4))
        with_res, relu = b.icmp_signed("!=", res, I64(0)), b.icmp_signed("==", act, I64(1))
        bias_v = v.broadcast(bias, v.f32)
        order = [k for i in range(LANES // 2) for k in (i, LANES + i)]  # even, odd, ...
        low = ir.Constant(v.i32, order)
        high = ir.Constant(v.i32, [k + LANES // 2 for k in order])
        with cgutils.for_range(b, rows) as ty:
            tiles_at = b.add(m, b.mul(b.mul(ty.index, tw), I64(4)))
            top = b.mul(ty.index, I64(2))  # the row of tiles' first output row
            with cgutils.for_range(b, steps) as each:
                at = b.mul(each.index, I64(LANES))
                mask = v.first(b.sub(tw, at))
                src = b.add(tiles_at, b.mul(at, I64(4)))
                p = [v.load(b.add(src, b.mul(plane, I64(xi))), v.f32, mask) for xi in range(16)]
                s = [b.fadd(b.fadd(p[k], p[k + 4]), p[k + 8]) for k in range(4)]
                e = [b.fsub(b.fsub(p[k + 4], p[k + 8]), p[k + 12]) for k in range(4)]
                cols = b.sub(ow, b.add(at, at))  # output columns from this vector's first on
                for r, (x0, x1, x2, x3) in enumerate((s, e)):
                    even = b.fadd(b.fadd(b.fadd(x0, x1), x2), bias_v)
                    odd = b.fadd(b.fsub(b.fsub(x1, x2), x3), bias_v)
                    y = b.add(top, I64(r))
                    inside = b.icmp_signed("<", y, height)
                    with b.if_then(inside):
                        start = b.add(b.mul(y, line), b.mul(at, I64(8)))
                        for half, order in enumerate((low, high)):
                            value = b.shuffle_vector(even, odd, order)
                            offset = b.add(start, I64(4 * LANES * half))
                            keep = v.first(b.sub(cols, I64(LANES * half)))
                            value = _epilogue(b, v, value, res, offset, keep, with_res, relu)
                            v.store(value, b.add(out, offset), keep)
        return context.get_dummy_value()

    return sig, codegen


def _epilogue(b, v, value, res, offset, keep, with_res, relu):  # type: ignore[no-untyped-def]
    """``value`` plus the residual's lanes at ``res + offset`` (where ``with_res``; lanes off
    ``keep`` not read), then ReLU'd where ``relu`` (a NaN stays a NaN)."""
    zero = ir.Constant(v.f32, None)
    safe = b.select(with_res, b.add(res, offset), I64(0))
    added = b.fadd(value, v.load(safe, v.f32, b.select(with_res, keep, v.first(I64(0)))))
    value = b.select(with_res, added, value)
    clipped = b.select(b.fcmp_ordered("<", value, zero), zero, value)
    return b.select(relu, clipped, value)
