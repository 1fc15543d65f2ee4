"""Winograd F(2x2, 3x3)'s input and output transforms as vector loops (jit intrinsics), a
vector of tiles along a row of tiles at a time, the last under a lane mask; on AVX-512, where
a row holds at most half a vector's tiles (13 x 13 and 14 x 14 maps: 7), two rows of tiles a
vector (`_two_rows`, `_two_rows_out`).

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
0.978-0.982. Two rows of tiles a vector then took the 14 x 14 maps' bf16 input transform
from 60 to 20 us at 256 channels and the output transform from 28 to 13 us (one core), and
the models, in turns as above: bf16 inception_v2 0.983, inception_v1 0.988, squeezenet 0.990,
resnet50 0.994; float32 squeezenet 0.988, inception_v2 0.986.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.bf16words import LANES, pair_bits
from rvm.kernels.epilogue import VectorMath
from rvm.kernels.vectors import VectorIR

__all__ = ["input_tiles", "output_tiles"]

I64 = ir.IntType(64)


def _bt(b: ir.IRBuilder, x0: ir.Value, x1: ir.Value, x2: ir.Value, x3: ir.Value) -> list:
    """One B^T combination of four vectors: ``[x0 - x2, x1 + x2, x2 - x1, x1 - x3]`` (B^T =
    [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]), down a window's rows and
    across its columns alike."""
    return [b.fsub(x0, x2), b.fadd(x1, x2), b.fsub(x2, x1), b.fsub(x1, x3)]


def _smaller(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """The smaller of two i64s."""
    return b.select(b.icmp_signed("<", x, y), x, y)


def _inside(b: ir.IRBuilder, y: ir.Value, height: ir.Value) -> ir.Value:
    """Whether row ``y`` (i64) is one of the image's ``height``."""
    return b.and_(b.icmp_signed(">=", y, I64(0)), b.icmp_signed("<", y, height))


def _lanes_from(b: ir.IRBuilder, v: VectorIR, lo: ir.Value, hi: ir.Value) -> ir.Value:
    """The mask of lanes ``lo`` to ``hi`` (i64s, clamped to the vector)."""
    every = ir.Constant(v.masks, [1] * v.lanes)
    return b.and_(v.first(hi), b.xor(v.first(lo), every))


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
    down = zip(*(_bt(b, *(r[k] for r in raw)) for k in range(3)))  # each row's 3 vectors
    out = []
    for vectors in down:
        out += _bt(b, *_columns(b, v, list(vectors)))
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
        with_hi = b.icmp_signed("!=", hi, I64(0))

        def loop(store):  # type: ignore[no-untyped-def]
            with cgutils.for_range(b, rows) as ty:
                y = b.add(top, b.add(ty.index, ty.index))
                inside = [_inside(b, b.add(y, I64(a)), ih) for a in range(4)]
                first = b.mul(b.sub(b.mul(y, iw), pl), I64(4))  # tile 0's window's bytes
                at_row = b.add(out, b.mul(b.mul(ty.index, tw), I64(4)))
                with cgutils.for_range(b, steps) as each:
                    at = b.mul(each.index, I64(LANES))
                    left = b.sub(tw, at)
                    col = b.sub(b.add(at, at), pl)  # the input column of lane 0's window
                    span = b.add(b.add(left, left), I64(2))  # the values the tiles read
                    columns = []
                    for k in range(3):  # lanes left of the image off, and past its edge
                        before = b.sub(I64(-LANES * k), col)
                        past = b.sub(b.sub(iw, col), I64(LANES * k))
                        end = _smaller(b, past, b.sub(span, I64(LANES * k)))
                        columns.append(_lanes_from(b, v, before, end))
                    masks = [[b.select(ok, m, none) for m in columns] for ok in inside]
                    offset = b.add(first, b.mul(at, I64(8)))

                    def windows(src, masks):  # type: ignore[no-untyped-def]
                        return _windows(b, v, b.add(src, offset), row, masks)

                    store(masks, b.add(at_row, b.mul(at, I64(4))), v.first(left), windows)

        def floats(masks, dst, mask, windows):  # type: ignore[no-untyped-def]
            for xi, value in enumerate(windows(lo, masks)):
                v.store(value, b.add(dst, b.mul(plane, I64(xi))), mask)

        def words(masks, dst, mask, windows):  # type: ignore[no-untyped-def]
            low = windows(lo, masks)
            high = windows(hi, _masks_if(b, with_hi, masks, none))  # 0 where hi is 0
            for xi in range(16):
                v.store(pair_bits(b, low[xi], high[xi]), b.add(dst, b.mul(plane, I64(xi))), mask)

        def by_mode(run):  # type: ignore[no-untyped-def]
            with b.if_else(b.icmp_signed("==", mode, I64(0))) as (as_floats, as_words):
                with as_floats:
                    run(floats)
                with as_words:
                    run(words)

        def two_rows(store):  # type: ignore[no-untyped-def]
            _two_rows(b, v, (ih, iw, top, pl, rows, tw, out), store)

        if LANES != 16:
            by_mode(loop)
        else:  # rows of at most 7 tiles: two in a vector (`_two_rows`)
            with b.if_else(b.icmp_signed("<", tw, I64(LANES // 2))) as (short, wide):
                with short:
                    by_mode(two_rows)
                with wide:
                    by_mode(loop)
        return context.get_dummy_value()

    return sig, codegen


def _masks_if(b: ir.IRBuilder, keep: ir.Value, masks: list, none: ir.Value) -> list:
    """``masks`` (nested lists) where ``keep``, else ``none`` in each place."""
    if isinstance(masks, list):
        return [_masks_if(b, keep, m, none) for m in masks]
    return b.select(keep, masks, none)


def _permute(b: ir.IRBuilder, v: VectorIR, first: ir.Value, second: ir.Value, index: ir.Value):  # type: ignore[no-untyped-def]  # noqa: E501
    """Lane ``i``: lane ``index[i]`` of ``first`` ++ ``second`` (AVX-512's two-source
    permute, its indices a vector known at run time only)."""
    name = "llvm.x86.avx512.vpermi2var.ps.512"
    fn = v.declare(v.f32, [v.f32, v.i32, v.f32], name)
    return b.call(fn, [first, index, second])


def _row_lanes(b: ir.IRBuilder, v: VectorIR, tw) -> tuple:  # type: ignore[no-untyped-def]
    """(whether each lane is in the first of two rows of ``tw`` tiles, its tile in its row),
    as vectors: a vector holding two rows of tiles, lanes ``[0, tw)`` and ``[tw, 2 tw)``."""
    lanes = ir.Constant(v.i32, list(range(LANES)))
    width = v.broadcast(b.trunc(tw, ir.IntType(32)), v.i32)
    upper = b.icmp_signed("<", lanes, width)
    return upper, b.select(upper, lanes, b.sub(lanes, width))


def _two_rows(b: ir.IRBuilder, v: VectorIR, shape: tuple, store) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """`input_tiles`' loop where a row holds fewer than ``LANES / 2`` tiles (14 x 14 and 13
    x 13 maps: 7): two rows of tiles a vector, lanes ``[0, tw)`` and ``[tw, 2 tw)``, so the
    transform and the stores run on 14 of 16 lanes, not 7. Each window row of each row of
    tiles is one load (its ``2 tw + 2`` values fit a vector), and each tile's columns 0 to 3
    are picked from the two rows' loads by a two-source permute. ``store(masks, dst, mask,
    windows)`` as `input_tiles`' loop's, ``windows(src)`` the 16 vectors at ``src``."""
    ih, iw, top, pl, rows, tw, out = shape
    none = ir.Constant(v.masks, [0] * LANES)
    row = b.mul(iw, I64(4))
    upper, tile = _row_lanes(b, v, tw)
    shift = b.select(upper, ir.Constant(v.i32, [0] * LANES), ir.Constant(v.i32, [LANES] * LANES))
    index = [b.add(b.add(b.add(tile, tile), shift), v.constant(k)) for k in range(4)]
    span = b.add(b.add(tw, tw), I64(2))  # the values a row of tiles reads
    columns = _lanes_from(b, v, pl, _smaller(b, span, b.add(iw, pl)))
    pairs = b.sdiv(b.add(rows, I64(1)), I64(2))
    with cgutils.for_range(b, pairs) as q:
        ty = b.add(q.index, q.index)
        two = b.icmp_signed("<", b.add(ty, I64(1)), rows)
        masks = []
        for t in range(2):
            y = b.add(top, b.mul(b.add(ty, I64(t)), I64(2)))
            here = []
            for a in range(4):
                ok = _inside(b, b.add(y, I64(a)), ih)
                here.append(b.select(b.and_(ok, two) if t else ok, columns, none))
            masks.append(here)
        first = b.mul(b.sub(b.mul(b.add(top, b.add(ty, ty)), iw), pl), I64(4))
        dst = b.add(out, b.mul(b.mul(ty, tw), I64(4)))
        lanes = b.select(two, b.add(tw, tw), tw)

        def windows(src, masks):  # type: ignore[no-untyped-def]
            return _windows_two(b, v, b.add(src, first), row, masks, index)

        store(masks, dst, v.first(lanes), windows)


def _windows_two(b: ir.IRBuilder, v: VectorIR, src, row, masks, index) -> list:  # type: ignore[no-untyped-def]  # noqa: E501
    """`_windows` for two rows of tiles in a vector (`_two_rows`): the windows of the first
    start at ``src``, the second's two image rows down; ``masks[t][a]`` the mask of window
    row ``a`` of row of tiles ``t``, ``index[k]`` the permute picking column ``k``."""
    loaded = []
    for t in range(2):
        at = b.add(src, b.mul(row, I64(2 * t)))
        loaded.append([v.load(b.add(at, b.mul(row, I64(a))), v.f32, masks[t][a]) for a in range(4)])
    down = [_bt(b, *rows) for rows in loaded]
    out = []
    for i in range(4):
        out += _bt(b, *(_permute(b, v, down[0][i], down[1][i], index[k]) for k in range(4)))
    return out


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
        b, v = builder, VectorMath(builder, LANES)
        with_res, relu = b.icmp_signed("!=", res, I64(0)), b.icmp_signed("==", act, I64(1))
        bias_v = v.broadcast(bias, v.f32)

        def finish(value, offset, keep):  # type: ignore[no-untyped-def]
            value = _epilogue(b, v, value, res, offset, keep, with_res, relu)
            v.store(value, b.add(out, offset), keep)

        def one_row():  # type: ignore[no-untyped-def]
            _one_row_out(b, v, (m, plane, tw, rows, ow, height, bias_v), finish)

        if LANES != 16:
            one_row()
        else:  # rows of at most 8 tiles: two in a vector (`_two_rows_out`)
            with b.if_else(b.icmp_signed("<=", tw, I64(LANES // 2))) as (short, wide):
                with short:
                    _two_rows_out(b, v, (m, plane, tw, rows, ow, height, bias_v), finish)
                with wide:
                    one_row()
        return context.get_dummy_value()

    return sig, codegen


def _epilogue(b, v, value, res, offset, keep, with_res, relu):  # type: ignore[no-untyped-def]
    """``value`` plus the residual's lanes at ``res + offset`` (where ``with_res``; lanes off
    ``keep`` not read), then ReLU'd where ``relu`` (`VectorMath.activation`'s: a NaN stays
    a NaN)."""
    safe = b.select(with_res, b.add(res, offset), I64(0))
    added = b.fadd(value, v.load(safe, v.f32, b.select(with_res, keep, v.first(I64(0)))))
    value = b.select(with_res, added, value)
    return b.select(relu, v.activation(value, 1), value)


def _sums(b: ir.IRBuilder, p: list, bias: ir.Value) -> list:
    """The two output rows' even and odd columns of a vector of tiles, from their 16
    products ``p``: ``[(even, odd) of the top row, (even, odd) of the bottom row]``, summed
    in the scalar code's order."""
    s = [b.fadd(b.fadd(p[k], p[k + 4]), p[k + 8]) for k in range(4)]
    e = [b.fsub(b.fsub(p[k + 4], p[k + 8]), p[k + 12]) for k in range(4)]
    rows = []
    for x0, x1, x2, x3 in (s, e):
        even = b.fadd(b.fadd(b.fadd(x0, x1), x2), bias)
        odd = b.fadd(b.fsub(b.fsub(x1, x2), x3), bias)
        rows.append((even, odd))
    return rows


def _one_row_out(b: ir.IRBuilder, v: VectorIR, shape: tuple, finish) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """`output_tiles`' loop: a vector of tiles along a row of tiles at a time, each output
    row's even and odd columns interleaved into two vectors; ``finish(value, offset, keep)``
    applies the epilogue and stores the lanes ``keep`` at the output's byte ``offset``."""
    m, plane, tw, rows, ow, height, bias = shape
    steps = b.sdiv(b.add(tw, I64(LANES - 1)), I64(LANES))
    line = b.mul(ow, I64(4))
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
            cols = b.sub(ow, b.add(at, at))  # output columns from this vector's first on
            for r, (even, odd) in enumerate(_sums(b, p, bias)):
                y = b.add(top, I64(r))
                with b.if_then(b.icmp_signed("<", y, height)):
                    start = b.add(b.mul(y, line), b.mul(at, I64(8)))
                    for half, order in enumerate((low, high)):
                        keep = v.first(b.sub(cols, I64(LANES * half)))
                        value = b.shuffle_vector(even, odd, order)
                        finish(value, b.add(start, I64(4 * LANES * half)), keep)


def _two_rows_out(b: ir.IRBuilder, v: VectorIR, shape: tuple, finish) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """`_one_row_out` where a row holds at most ``LANES / 2`` tiles: two rows of tiles a
    vector (lanes ``[0, tw)`` and ``[tw, 2 tw)``: one load a position for both), each of
    their four output rows (at most ``LANES`` columns) picked from the even and odd columns by
    a two-source permute."""
    m, plane, tw, rows, ow, height, bias = shape
    line = b.mul(ow, I64(4))
    lanes = ir.Constant(v.i32, list(range(LANES)))
    half = b.lshr(lanes, v.constant(1))  # output column j: tile j / 2, its even or odd value
    odd = b.mul(b.and_(lanes, v.constant(1)), v.constant(LANES))
    width = v.broadcast(b.trunc(tw, ir.IntType(32)), v.i32)
    index = [b.add(half, odd), b.add(b.add(half, odd), width)]  # the first row's, the second's
    keep = v.first(ow)
    pairs = b.sdiv(b.add(rows, I64(1)), I64(2))
    with cgutils.for_range(b, pairs) as q:
        ty = b.add(q.index, q.index)
        two = b.icmp_signed("<", b.add(ty, I64(1)), rows)
        src = b.add(m, b.mul(b.mul(ty, tw), I64(4)))
        mask = v.first(b.select(two, b.add(tw, tw), tw))
        p = [v.load(b.add(src, b.mul(plane, I64(xi))), v.f32, mask) for xi in range(16)]
        sums = _sums(b, p, bias)
        for t in range(2):
            for r, (even, odd_) in enumerate(sums):
                y = b.add(b.add(ty, ty), I64(2 * t + r))
                inside = b.icmp_signed("<", y, height)
                with b.if_then(b.and_(inside, two) if t else inside):
                    finish(_permute(b, v, even, odd_, index[t]), b.mul(y, line), keep)
