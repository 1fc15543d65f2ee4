"""Average pools with 3-wide windows 1 apart, 1 or 2 apart along rows, one output row at a time.

The average pools of CNNs with 3x3 windows (shufflenet's 3x3 windows 2 apart, inception's 3x3
1 apart) take this method (`rvm.kernels.pool`'s task ``pool2d_avg_rows``), the sums' twin of
`rvm.kernels.maxrows`: for each output row, its window rows that are in the input are summed
element by element into a float64 line whose padding and overhang positions hold 0, then
each output element is the sum of three neighbours of the line times its window's scale
(`rvm.kernels.pool`'s table of reciprocal counts, which says whether the padding counts).
Sums are float64, as the reference's (`rvm.op.avg_pool2d`). Two vector loops do it, written
as LLVM intrinsics (`sum_rows`, `sum3_scaled`): the stride-2 columns are split into the
even and odd elements by shuffles, where Numba's loop gathers, and the rows are widened to
float64 as they are loaded. Groups of channels of small maps are runs centred on every row,
their padding left out by masks (`rvm.kernels.maxrows.centres_at_once`; `sum3_rows_edged`,
`sum3_cols_edged`, and `sum3_scaled`'s own). Pools 2 apart on maps that narrow take
`rvm.kernels.narrow`.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.extending import intrinsic

from rvm.kernels.jitting import alive, jit
from rvm.kernels.maxrows import (
    CHANNEL_WIDTH,
    I32,
    I64,
    Blocks,
    Vectors,
    _taps_in,
    centres_at_once,
    edged_taps,
    in_row,
    loop,
    planes_at_once,
    scalar_type,
)
from rvm.kernels.planes import copy

__all__ = ["by_channels", "by_rows"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@intrinsic
def sum_rows(typingctx, like, a, c, e, taps, dst, n, add):  # type: ignore[no-untyped-def]
    """On int64 addresses: the float64 ``dst[j]`` = (``dst[j]`` when ``add``) + ``a[j]`` +
    ``c[j]`` (``taps`` > 1) + ``e[j]`` (``taps`` > 2) for j < ``n``; ``a``, ``c``, ``e`` of
    ``like``'s float type (rows not taken are not read)."""
    scalar = scalar_type(like)
    if scalar is None:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        _, a, c, e, taps, dst, n, add = args
        b = builder
        v = Vectors(b, scalar)
        w = Vectors(b, ir.DoubleType(), lanes=v.lanes)
        use_c, use_e = b.icmp_signed(">", taps, I64(1)), b.icmp_signed(">", taps, I64(2))
        keep = b.icmp_signed("!=", add, I64(0))
        zero = ir.Constant(w.vec, None)

        def step(j0, mask):  # type: ignore[no-untyped-def]
            full = mask if mask is not None else w.first(I64(v.lanes))
            total = b.select(keep, w.load_at(dst, j0, full), zero)
            for at, on in ((a, None), (c, use_c), (e, use_e)):
                m = full if on is None else b.and_(full, w.splat_mask(on))
                total = b.fadd(total, w.widen(v.load_at(at, j0, m)))
            w.store_at(total, dst, j0, mask)

        loop(b, v, n, b.sdiv(n, I64(v.lanes)), step)
        return context.get_dummy_value()

    return nt.void(like, *(nt.int64,) * 7), codegen


@intrinsic
def sum3_scaled(typingctx, like, src, dst, n, scale, sw, col0, width):  # type: ignore[no-untyped-def]
    """On int64 addresses: ``dst[q]`` (``like``'s float type) = (``src[sw q]`` +
    ``src[sw q + 1]`` + ``src[sw q + 2]``) * ``scale[q]`` for q < ``n``, ``src`` and
    ``scale`` float64, ``sw`` 1 or 2 (``src`` holds sw (n - 1) + 3 elements; no more are
    read), the first and last of those only where they lie in the row
    (`rvm.kernels.maxrows.in_row`: ``src[0]`` is column ``col0`` of a row of ``width``
    columns)."""
    scalar = scalar_type(like)
    if scalar is None:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        _, src, dst, n, scale, sw, col0, width = args
        b = builder
        v = Vectors(b, scalar)
        w = Vectors(b, ir.DoubleType(), lanes=v.lanes)
        lanes = v.lanes
        even = ir.Constant(ir.VectorType(I32, lanes), list(range(0, 2 * lanes, 2)))
        odd = ir.Constant(ir.VectorType(I32, lanes), list(range(1, 2 * lanes, 2)))
        pairs = b.icmp_signed("==", sw, I64(2))
        size = b.add(b.mul(b.sub(n, I64(1)), sw), I64(3))  # the elements of src

        def part(at, mask):  # type: ignore[no-untyped-def]
            return w.load_at(src, at, None if mask is None else w.first(b.sub(size, at)))

        def step(q0, mask):  # type: ignore[no-untyped-def]
            with b.if_else(pairs) as (two, one):
                with two:
                    block_two = b.block
                    at = b.mul(q0, I64(2))
                    lo_a, hi_a = part(at, mask), part(b.add(at, I64(lanes)), mask)
                    lo_c = part(b.add(at, I64(2)), mask)
                    hi_c = part(b.add(at, I64(lanes + 2)), mask)
                    a2 = b.shuffle_vector(lo_a, hi_a, even)
                    c2 = b.shuffle_vector(lo_a, hi_a, odd)
                    e2 = b.shuffle_vector(lo_c, hi_c, even)
                with one:
                    block_one = b.block
                    a1, c1 = part(q0, mask), part(b.add(q0, I64(1)), mask)
                    e1 = part(b.add(q0, I64(2)), mask)
            a, c, e = (b.phi(w.vec) for _ in range(3))
            for phi, two_value, one_value in ((a, a2, a1), (c, c2, c1), (e, e2, e1)):
                phi.add_incoming(two_value, block_two)
                phi.add_incoming(one_value, block_one)
            first, last = in_row(v, q0, col0, width, sw)  # else 0, as the padding
            zero = ir.Constant(w.vec, None)
            total = b.fadd(b.fadd(b.select(first, a, zero), c), b.select(last, e, zero))
            out_mask = mask if mask is not None else w.first(I64(lanes))
            scaled = b.fmul(total, w.load_at(scale, q0, out_mask))
            v.store_at(v.narrow(scaled), dst, q0, mask)

        # A whole step at q0 reads src up to sw q0 + 2 lanes + 1: inside while q0 + lanes < n.
        whole = b.sdiv(b.sub(n, I64(1)), I64(lanes))
        loop(b, v, n, b.select(b.icmp_signed(">", n, I64(0)), whole, I64(0)), step)
        return context.get_dummy_value()

    return nt.void(like, *(nt.int64,) * 7), codegen


def _sum3_edged(window_rows: bool):  # type: ignore[no-untyped-def]
    """The intrinsic ``(like, src, dst, n, apart, period, scale)`` on int64 addresses: for j <
    ``n``, ``src[j - apart]`` + ``src[j]`` + ``src[j + apart]``, the outer two only where they
    lie in j's block of ``period`` elements (`rvm.kernels.maxrows.Blocks`; others not read).
    ``window_rows``: ``src`` of ``like``'s float type, the float64 sum to ``dst`` (``scale``
    unused); else ``src`` float64, the sum times the float64 ``scale[j]`` to ``dst`` in
    ``like``'s type."""

    def sum3(typingctx, like, src, dst, n, apart, period, scale):  # type: ignore[no-untyped-def]
        scalar = scalar_type(like)
        if scalar is None:
            return None

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            _, src, dst, n, apart, period, scale = args
            b = builder
            v = Vectors(b, scalar)
            w = Vectors(b, ir.DoubleType(), lanes=v.lanes)
            blocks = Blocks(b, v, apart, period)

            def step(j0, mask):  # type: ignore[no-untyped-def]
                a, c, e = edged_taps(v if window_rows else w, src, j0, apart, blocks, mask, False)
                if window_rows:  # taps outside are 0, as the padding
                    w.store_at(b.fadd(b.fadd(w.widen(a), w.widen(c)), w.widen(e)), dst, j0, mask)
                else:
                    full = mask if mask is not None else w.first(I64(v.lanes))
                    total = b.fmul(b.fadd(b.fadd(a, c), e), w.load_at(scale, j0, full))
                    v.store_at(v.narrow(total), dst, j0, mask)

            loop(b, v, n, b.sdiv(n, I64(v.lanes)), step)
            return context.get_dummy_value()

        return nt.void(like, *(nt.int64,) * 6), codegen

    return intrinsic(sum3)


sum3_rows_edged = _sum3_edged(True)
sum3_cols_edged = _sum3_edged(False)


@jit(**_OPTS)
def by_channels(kh, kw, sw, pt, pl, iw, ow):  # type: ignore[no-untyped-def]
    """Whether `by_rows` sums a pool's window rows over whole channels (`_by_channel`): 3x3
    windows padded by at most a row and a column on top and on the left, overhanging by at
    most a column on the right, on maps narrower than `rvm.kernels.maxrows.CHANNEL_WIDTH`
    (1 apart on 14 x 14 to 28 x 28 maps: 0.76 to 0.87 of `rvm.kernels.pool`'s `_phased`;
    2 apart, 0.93 to 1.07 of a sum per output row)."""
    need = (ow - 1) * sw + kw  # the columns the outputs read
    return kh == 3 and pt <= 1 and pl <= 1 and need - pl <= iw + 1 and 2 <= iw < CHANNEL_WIDTH


@jit(**_OPTS)
def _edges(v, lead, x, out, c, scale, window, rows, r0, r1):  # type: ignore[no-untyped-def]
    """Channel ``c``'s window-row sums in ``v`` (from ``lead``) at the kept rows outside
    ``r0`` to ``r1`` (their windows partly in the padding), each a sum of its window rows
    in the channel."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    ih, iw = x.shape[2], x.shape[3]
    like, size = x.reshape(x.size)[0], x.itemsize
    base, at_v = x.ctypes.data + c * ih * iw * size, v.ctypes.data + lead * 8
    for r in range(0, rows, sh):
        if r0 <= r < r1:
            continue
        first, last = _taps_in(r - pt, ih, kh, dh)
        if last < first:
            v[lead + r * iw : lead + (r + 1) * iw] = 0.0  # every window row in the padding
            continue
        at, step = base + (r - pt + first * dh) * iw * size, dh * iw * size
        sum_rows(like, at, at + step, at + 2 * step, last - first + 1, at_v + r * iw * 8, iw, 0)


@jit(**_OPTS)
def _by_centres(x, out, lo, hi, scale, m):  # type: ignore[no-untyped-def]
    """`by_rows` for the pools `rvm.kernels.maxrows.centres_at_once` takes, ``m`` channels at a
    time: the window rows summed at every row of the group in one run centred on it (the rows
    before and after only in their channel: `sum3_rows_edged`), then the window columns times
    the scales in one run over the group (the columns before and after only in their row:
    `sum3_cols_edged`): the padding by masks, no fix-up loop per row or channel."""
    ih, iw, size = x.shape[2], x.shape[3], x.itemsize
    p = ih * iw  # the output the input's size
    v = np.empty(m * p + 24, dtype=np.float64)  # a cache line of margin at either end
    at_v = v.ctypes.data + (64 - v.ctypes.data % 64) % 64 + 64
    scales = np.empty(m * p, dtype=np.float64)  # the group's, channel after channel
    for j in range(m):
        copy(scales[j * p :], scale, p)
    like = x.reshape(x.size)[0]
    for first in range(lo, hi, m):
        g, at = min(m, hi - first), first * p * size
        sum3_rows_edged(like, x.ctypes.data + at, at_v, g * p, iw, p, 0)
        sum3_cols_edged(like, at_v, out.ctypes.data + at, g * p, 1, iw, scales.ctypes.data)
    alive(v)  # read and written through its address only


@jit(**_OPTS)
def _by_channel(x, out, lo, hi, scale, window):  # type: ignore[no-untyped-def]
    """`by_rows` for 3-row windows padded by at most one row and column on top and on the
    left, overhanging by at most one column on the right, on maps narrower than
    `rvm.kernels.maxrows.CHANNEL_WIDTH`: per channel (per group of channels,
    `rvm.kernels.maxrows.planes_at_once`), the window rows summed at every row whose taps are
    all in the channel in one run (the rows the stride skips too), the kept edge rows each a
    run (`_edges`); then the columns of each output row (of the whole group at once), the
    first and last outputs again when their windows pad (the vector loop read a column past
    the row)."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    rows, lead = (oh - 1) * sh + 1, 8  # a margin of 8 elements at either end
    m = planes_at_once(ih, iw, oh, ow, sh, sw, hi - lo)
    plane = rows * iw  # a channel's rows in v (ih * iw when m > 1)
    v = np.zeros(m * plane + 2 * lead, dtype=np.float64)
    scales = np.empty(m * oh * ow, dtype=np.float64)  # the group's scales, channel after channel
    for j in range(m):
        copy(scales[j * oh * ow :], scale, oh * ow)
    like, size, of = x.reshape(x.size)[0], x.itemsize, out.reshape(out.size)
    at_x, at_v, at_out = x.ctypes.data, v.ctypes.data + lead * 8, out.ctypes.data
    row, at_scale = iw * size, scales.ctypes.data
    r0, r1 = pt, max(pt, min(rows, ih - 2 * dh + pt))  # the rows all of whose taps are in
    left, right = pl > 0, (ow - 1) * sw - pl + 2 == iw  # windows a column past the channel
    for first in range(lo, hi, m):
        g = min(m, hi - first)
        if r1 > r0:
            at = at_x + (first * ih + r0 - pt) * row
            sum_rows(like, at, at + dh * row, at + 2 * dh * row, 3, at_v + r0 * iw * 8,
                     ((g - 1) * rows + r1 - r0) * iw, 0)  # fmt: skip
        for j in range(g if r0 > 0 or r1 < rows else 0):
            _edges(v, lead + j * plane, x, out, first + j, scale, window, rows, r0, r1)
        if m > 1:  # the group's outputs in one run
            sum3_scaled(like, at_v - pl * 8, at_out + first * oh * ow * size, g * oh * ow,
                        at_scale, 1, 0, g * oh * ow + 2)  # fmt: skip
        else:  # the padding left out by sum3_scaled itself
            for p_ in range(oh):
                sum3_scaled(like, at_v + (p_ * sh * iw - pl) * 8,
                            at_out + (first * oh + p_) * ow * size, ow, at_scale + p_ * ow * 8,
                            sw, -pl, iw)  # fmt: skip
        # the group's rows one after another (m > 1: sh is 1, v's rows as out's)
        for k in range(g * oh if m > 1 and (left or right) else 0):
            r, o = lead + k * sh * iw, (first * oh + k) * ow
            if left:  # the window's columns: -1, 0 and 1
                of[o] = (v[r] + v[r + 1]) * scales[k * ow]
            if right:  # iw - 2, iw - 1 and iw
                of[o + ow - 1] = (v[r + iw - 2] + v[r + iw - 1]) * scales[k * ow + ow - 1]


@jit(**_OPTS)
def by_rows(x, out, lo, hi, scale, window):  # type: ignore[no-untyped-def]
    """Average pools of channels ``lo`` to ``hi`` (flat n * c index) whose windows
    `rvm.kernels.maxrows.takes`, ``scale`` (float64, oh * ow) the windows' reciprocal
    counts, one output row at a time (see the module docstring)."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    if by_channels(kh, kw, sw, pt, pl, iw, ow):
        m = centres_at_once(ih, iw, oh, ow, kh, sh, sw, dh, pt, pl, hi - lo, x.itemsize, False)
        if m > 0:
            _by_centres(x, out, lo, hi, scale, m)
        else:
            _by_channel(x, out, lo, hi, scale, window)
        return
    line = np.zeros(max(pl + iw, (ow - 1) * sw + kw), dtype=np.float64)
    like, size = x.reshape(x.size)[0], x.itemsize
    at_x, at_line, at_out = x.ctypes.data, line.ctypes.data, out.ctypes.data
    at_scale = scale.ctypes.data
    for c in range(lo, hi):
        base = at_x + c * ih * iw * size
        for p_ in range(oh):
            r0 = p_ * sh - pt
            first, last = _taps_in(r0, ih, kh, dh)  # the window's rows in the channel
            at, step = base + (r0 + first * dh) * iw * size, dh * iw * size
            dst = at_line + pl * 8
            if last < first:
                line[pl : pl + iw] = 0.0
            for t in range(first, last + 1, 3):
                k = min(3, last + 1 - t)
                row = at + (t - first) * step
                sum_rows(like, row, row + step, row + 2 * step, k, dst, iw, t > first)
            sum3_scaled(like, at_line, at_out + (c * oh + p_) * ow * size, ow,
                        at_scale + p_ * ow * 8, sw, -pl, iw)  # fmt: skip
