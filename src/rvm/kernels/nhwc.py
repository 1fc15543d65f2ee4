"""The NCHW image into a zero-padded NHWC plane, for `rvm.kernels.direct`'s convolution.

Every (tap, channel) of an output position is then one element ``taps[t] + c`` after the
position's base in the plane (``(hp, wp, c)``). The copy goes row by row, each plane row
written while it is in cache; whole tiles of `TILE_CHANNELS` channels by `LANES` columns go
by vector loads, a transpose in registers (`transposed`, which `rvm.kernels.direct`'s tile
store uses too) and vector stores, a row's last columns by masked loads (`tile_part`),
channels past the last whole tile element by element. `rows` copies a range of
rows, so a large plane can be copied by rows on the pool.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels import parfor
from rvm.kernels.gemmshape import LANES
from rvm.kernels.jitting import jit
from rvm.kernels.planes import U

__all__ = ["TILE_CHANNELS", "image", "padding", "rows", "tile", "tile_part", "transposed"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
# Channels a tile of the NHWC copy (`tile`), by `LANES` columns: 8 vectors transposed
# into `LANES` runs of 8 (16 of 16 on AVX-512 took half as long again).
TILE_CHANNELS = 8


def transposed(builder, rows):  # type: ignore[no-untyped-def]
    """Up to 8 vectors ``rows`` (each `LANES` channels of one position) as `LANES` vectors of
    ``len(rows)`` floats (each one channel's positions), by the shuffles x86 has within
    128-bit lanes (the list padded with zeros to 8): pairs of rows interleaved by floats
    (``unpcklps``/``unpckhps``), then by pairs of floats (``unpcklpd``/``unpckhpd``), so each
    128-bit lane holds 4 rows of one channel; then each channel's two halves joined. A
    transpose by doubling groups (each stage's shuffles twice as wide) left the lanes to
    LLVM's general shuffles: 147 cycles an 8 x 16 tile on Zen 4. `tile` transposes
    `TILE_CHANNELS` rows, `rvm.kernels.direct_tile` `MR`."""
    count = len(rows)
    if count > 8 or LANES % 4:
        raise ValueError(f"transposed: {count} rows of {LANES} lanes")
    zero = ir.Constant(ir.VectorType(ir.FloatType(), LANES), None)
    rows = [*rows, *[zero] * (8 - count)]

    def shuffle(a, b, mask):  # type: ignore[no-untyped-def]
        return builder.shuffle_vector(
            a, b, ir.Constant(ir.VectorType(ir.IntType(32), len(mask)), mask)
        )

    def by_lane(picks):  # type: ignore[no-untyped-def]
        """A mask of the same picks in each 128-bit lane (``LANES + i``: the second vector)."""
        return [4 * lane + i if i < LANES else LANES + 4 * lane + i - LANES
                for lane in range(LANES // 4) for i in picks]  # fmt: skip

    floats_lo, floats_hi = by_lane((0, LANES, 1, LANES + 1)), by_lane((2, LANES + 2, 3, LANES + 3))
    pairs_lo, pairs_hi = by_lane((0, 1, LANES, LANES + 1)), by_lane((2, 3, LANES + 2, LANES + 3))
    quads = []  # per half of the rows: channel 4 * lane + j's 4 rows in lane ``lane`` of [j]
    for half in (0, 4):
        if half >= count:
            break
        r = rows[half : half + 4]
        t = [shuffle(r[k], r[k + 1], m) for k in (0, 2) for m in (floats_lo, floats_hi)]
        quads.append([shuffle(t[k], t[k + 2], m) for k in (0, 1) for m in (pairs_lo, pairs_hi)])
    runs = []
    for q in range(LANES):
        lane, j = divmod(q, 4)
        own = [4 * lane + i for i in range(4)]
        if len(quads) == 1:
            run = shuffle(quads[0][j], quads[0][j], own)
        else:
            run = shuffle(quads[0][j], quads[1][j], own + [LANES + i for i in own])
        if count < run.type.count:
            run = shuffle(run, run, list(range(count)))
        runs.append(run)
    return runs


def _tile_codegen(partial: bool):  # type: ignore[no-untyped-def]
    """`tile`'s code (``partial``: `tile_part`'s, the first ``cols`` columns of a tile, loaded
    under a lane mask and stored a column at a time while ``q < cols``)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        src, plane, dst, c = args[:4]
        f32, i64 = ir.FloatType(), ir.IntType(64)
        vec = ir.VectorType(f32, LANES)
        vptr = vec.as_pointer()
        src, dst = (builder.inttoptr(x, f32.as_pointer()) for x in (src, dst))
        if partial:
            i32 = ir.IntType(32)
            masks = ir.VectorType(ir.IntType(1), LANES)
            masked_load = cgutils.get_or_insert_function(
                builder.module,
                ir.FunctionType(vec, [vptr, i32, masks, vec]),
                f"llvm.masked.load.v{LANES}f32.p0",
            )
            cols = args[4]
            lanes = ir.Constant(ir.VectorType(i64, LANES), list(range(LANES)))
            undef = ir.Constant(lanes.type, ir.Undefined)
            splat = ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)
            wide = builder.shuffle_vector(builder.insert_element(undef, cols, i32(0)), undef, splat)
            mask = builder.icmp_signed("<", lanes, wide)
        rows = []
        for k in range(TILE_CHANNELS):
            at = builder.bitcast(builder.gep(src, [builder.mul(plane, i64(k))]), vptr)
            if partial:
                zero = ir.Constant(vec, None)
                rows.append(builder.call(masked_load, [at, i32(4), mask, zero]))
            else:
                rows.append(builder.load(at, align=4))
        for q, run in enumerate(transposed(builder, rows)):
            at = builder.gep(dst, [builder.mul(c, i64(q))])
            at = builder.bitcast(at, run.type.as_pointer())
            if partial:
                with builder.if_then(builder.icmp_signed("<", i64(q), cols)):
                    builder.store(run, at, align=4)
            else:
                builder.store(run, at, align=4)
        return context.get_dummy_value()

    return codegen


@intrinsic
def tile(typingctx, src, plane, dst, c):  # type: ignore[no-untyped-def]
    """`TILE_CHANNELS` channels by `LANES` columns of an NCHW image into an NHWC plane, on
    int64 addresses: channel ``k``'s run of `LANES` floats at ``src + k * plane`` (floats)
    becomes column ``q``'s `TILE_CHANNELS` channels at ``dst + q * c``: vector loads, a
    transpose in registers (`transposed`), vector stores."""
    return nt.void(*(nt.int64,) * 4), _tile_codegen(False)


@intrinsic
def tile_part(typingctx, src, plane, dst, c, cols):  # type: ignore[no-untyped-def]
    """`tile` of the first ``cols`` (< `LANES`) columns only: a row's last columns, or a
    row narrower than a vector (14 x 14 and 7 x 7 maps: element by element their copy was
    4 % of a 512-channel 3 x 3 convolution's time, three times what it is this way)."""
    return nt.void(*(nt.int64,) * 5), _tile_codegen(True)


@jit(**_OPTS)
def image(x, n_, xh, hp, wp, pt, pl):  # type: ignore[no-untyped-def]
    """Image ``n_`` of ``x`` into the zero-padded NHWC plane ``xh`` ((hp, wp, c)): input row
    ``r`` at plane row ``r + pt``, column ``q`` at ``q + pl``, zeros around; what falls
    outside the plane is not read by any output."""
    padding(x, xh, hp, wp, pt, pl)
    rows(x, n_, xh, hp, wp, pt, pl, 0, hp)


@jit(**_OPTS)
def padding(x, xh, hp, wp, pt, pl):  # type: ignore[no-untyped-def]
    """Zeros in the padding of the NHWC plane ``xh`` (`image`; its memory is reused, not
    zeroed)."""
    c, ih, iw = x.shape[1], x.shape[2], x.shape[3]
    top, bottom = min(max(pt, 0), hp), min(max(pt + ih, 0), hp)
    left, right = min(max(pl, 0), wp), min(max(pl + iw, 0), wp)
    row = wp * c
    xh[: top * row] = 0
    xh[bottom * row : hp * row] = 0
    for y in range(top, bottom):
        xh[y * row : (y * wp + left) * c] = 0
        xh[(y * wp + right) * c : (y + 1) * row] = 0


@jit(**_OPTS)
def rows(x, n_, xh, hp, wp, pt, pl, y0, y1):  # type: ignore[no-untyped-def]
    """Plane rows [y0, y1) of `image` but their padding (`padding`): the input's."""
    c, ih, iw = x.shape[1], x.shape[2], x.shape[3]
    top, bottom = min(max(pt, 0, y0), hp, y1), min(max(pt + ih, 0, y0), hp, y1)
    left, right = min(max(pl, 0), wp), min(max(pl + iw, 0), wp)
    # Row by row, 16 channels at a time: each plane row is written while it is in cache,
    # from 16 input rows read along (a pass per channel over the whole plane missed L2 on
    # large planes: ten times as long on 512 channels of 28 x 28). Whole tiles of
    # `TILE_CHANNELS` channels by `LANES` columns go by vectors (`tile`: element by
    # element the copy was a tenth of a 64-channel 3 x 3 convolution's time and 6 % of
    # vgg19's, two to three times what it is now), a row's last columns (a whole row when
    # narrower than a vector) by masked ones (`tile_part`), ragged channels element by element.
    xf, plane, q0, q1 = x.reshape(x.size), ih * iw, left - pl, right - pl
    c_tiles = c - c % TILE_CHANNELS
    q_tiles = q0 + (q1 - q0) - (q1 - q0) % LANES
    at_xf, at_xh = parfor.address(xf), parfor.address(xh)
    for y in range(top, bottom):
        at_x = (n_ * c * ih + y - pt) * iw
        for ch0 in range(0, c_tiles, TILE_CHANNELS):
            for q in range(q0, q_tiles, LANES):
                src, dst = at_x + ch0 * plane + q, (y * wp + q + pl) * c + ch0
                tile(at_xf + 4 * src, plane, at_xh + 4 * dst, c)
            if q_tiles < q1:
                src, dst = at_x + ch0 * plane + q_tiles, (y * wp + q_tiles + pl) * c + ch0
                tile_part(at_xf + 4 * src, plane, at_xh + 4 * dst, c, q1 - q_tiles)
        _rest(xf, xh, at_x, plane, (y * wp + pl) * c, c, c_tiles, c, q0, q1)


@jit(**_OPTS)
def _rest(xf, xh, at_x, plane, at_row, c, c0, c1, q0, q1):  # type: ignore[no-untyped-def]
    """Channels [c0, c1) of input columns [q0, q1) of one row into the NHWC plane row at
    ``at_row``, element by element, 16 channels at a time."""
    for ch0 in range(c0, c1, 16):
        for q in range(q0, q1):
            dst, src = U(at_row + q * c), U(at_x + q)
            for ch in range(ch0, min(c1, ch0 + 16)):
                xh[dst + U(ch)] = xf[src + U(ch * plane)]
