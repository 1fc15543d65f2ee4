"""Max pools with 3-wide windows 1 apart, 1 or 2 apart along rows, one output row at a time.

The common max pool of CNNs (3x3 windows 2 apart: squeezenet's, resnet's, inception's) and
the 3x3 pools 1 apart of inception's branches take this method (`rvm.kernels.pool`'s tasks
``pool2d_max_rows``, `by_lines`, and ``pool2d_max_whole``, `by_whole`: each built only for
models whose pools take it). For each output row, its
window rows are reduced element by element into a line that holds -inf where the padding or
a ceil-mode overhang would be, then each output element is the maximum of three neighbours
of the line. When the windows lie inside the input (no padding, no overhang; 2 apart, on maps
narrower than `CHANNEL_WIDTH`), or the map is that narrow and padded by at most a row and a
column, the rows are reduced
for the whole channel in one run instead, the rows the stride skips too: one long run costs
less than a short one per output row on small planes (13 x 13: half the time); the padded
edge rows are then runs of their own and the padded first and last columns are taken again.
On rows at most a vector wide padded by one, 1 apart (`centres_at_once`), a group of
channels is one run centred on every row instead, and the padding is left out by masks
(`Blocks`, `max3_edged`): the edges' loops took half of a 7 x 7 or 14 x 14 map's time.
(Windows 2 apart on maps that narrow take `rvm.kernels.narrow`.)

Two vector loops do the work, written as LLVM intrinsics (`max3_run`, `max3_pairs`): Numba's
own loops for them take the NaN-propagating maximum as a compare and a blend per operand
and, for the column stride 2, a gather per three elements; the pairs loop loads two vectors
and splits them into the even and odd elements with shuffles instead. A NaN in a window
makes its maximum NaN, as in the reference (`rvm.op.max_pool2d`). On one core of an AVX-512
machine this takes 0.3 to 0.6 of the time of `rvm.kernels.maxflat` on the light CNNs' max
pools, and its task builds in half the time.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.cpu import cpu
from rvm.kernels.jitting import alive, jit
from rvm.kernels.vectors import VectorIR

__all__ = [
    "Blocks",
    "Vectors",
    "by_lines",
    "by_rows",
    "by_whole",
    "centres_at_once",
    "edged_taps",
    "in_row",
    "loop",
    "scalar_type",
    "takes",
    "whole",
]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_BITS = cpu().vector_bits
I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)


class Vectors(VectorIR):
    """`VectorIR` for vectors of one float type as wide as the CPU's, addressed by an int64
    base and an element index."""

    def __init__(self, builder: ir.IRBuilder, scalar: ir.Type, lanes: int | None = None) -> None:
        bits = 32 if isinstance(scalar, ir.FloatType) else 64
        super().__init__(builder, lanes or _BITS // bits)
        self.b, self.size, self.scalar = builder, bits // 8, scalar
        self.vec = ir.VectorType(scalar, self.lanes)

    def address(self, base: ir.Value, index: ir.Value) -> ir.Value:
        """The int64 address of element ``index`` from ``base``."""
        return self.b.add(base, self.b.mul(index, I64(self.size)))

    def splat_mask(self, flag: ir.Value) -> ir.Value:
        """The i1 ``flag`` in every lane of a mask."""
        return self.broadcast(flag, self.masks)

    def widen(self, x: ir.Value) -> ir.Value:
        """``x`` (a vector of as many lanes) in float64 lanes."""
        double = ir.VectorType(ir.DoubleType(), self.lanes)
        return x if x.type == double else self.b.fpext(x, double)

    def narrow(self, x: ir.Value) -> ir.Value:
        """The float64 vector ``x`` in this type's lanes (rounded)."""
        return x if x.type == self.vec else self.b.fptrunc(x, self.vec)

    def load_at(
        self, base: ir.Value, index: ir.Value, mask: ir.Value | None, fill: ir.Value = None
    ) -> ir.Value:
        """The vector at element ``index`` of ``base`` (lanes off ``mask`` not read: 0 or
        ``fill``'s)."""
        at = self.address(base, index)
        if mask is None:
            return self.b.load(self.pointer(at, self.vec), align=self.size)
        return self.load(at, self.vec, mask, fill)

    def store_at(
        self, value: ir.Value, base: ir.Value, index: ir.Value, mask: ir.Value | None
    ) -> None:
        """``value`` to element ``index`` of ``base`` (lanes on ``mask`` only)."""
        at = self.address(base, index)
        if mask is None:
            self.b.store(value, self.pointer(at, self.vec), align=self.size)
        else:
            self.store(value, at, mask)

    def max3(self, a: ir.Value, c: ir.Value, e: ir.Value) -> ir.Value:
        """The lanes' maximum of three vectors; NaN where any of them is NaN. Each maximum
        is a compare and a select, which a NaN does not win: the result is its second operand
        then (x86's MAXPS). Chained so, ``c``'s NaN reaches the result; where ``a`` or ``e``
        is NaN their sum is taken instead (one compare, one add: four instructions where
        the three NaN checks of before took eight; -inf plus +inf never decides, the compare
        does)."""
        b = self.b
        m = b.select(b.fcmp_ordered(">", a, c), a, c)  # c where either is NaN
        m = b.select(b.fcmp_ordered(">", e, m), e, m)  # m where either is NaN
        return b.select(b.fcmp_unordered("uno", a, e), b.fadd(a, e), m)


def loop(builder: ir.IRBuilder, v: Vectors, n: ir.Value, whole: ir.Value, step) -> None:  # type: ignore[no-untyped-def]
    """``step(j0, mask)`` for j0 = 0, lanes, ... below ``n``: the first ``whole`` vectors
    unmasked (``mask`` None), then the rest, at most one vector, masked."""
    with cgutils.for_range(builder, whole) as loop:
        step(builder.mul(loop.index, I64(v.lanes)), None)
    j0 = builder.mul(whole, I64(v.lanes))
    with builder.if_then(builder.icmp_signed("<", j0, n)):
        step(j0, v.first(builder.sub(n, j0)))


def scalar_type(like: nt.Type) -> ir.Type | None:
    """The LLVM float type of a Numba float type (None for any other type)."""
    return {nt.float32: ir.FloatType(), nt.float64: ir.DoubleType()}.get(like)


@intrinsic
def max3_run(typingctx, like, a, c, e, dst, n):  # type: ignore[no-untyped-def]
    """On int64 addresses of elements of ``like``'s float type: ``dst[j]`` = the maximum of
    ``a[j]``, ``c[j]`` and ``e[j]`` for j < ``n`` (``dst`` may be ``a``)."""
    scalar = scalar_type(like)
    if scalar is None:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        _, a, c, e, dst, n = args
        v = Vectors(builder, scalar)

        def step(j0, mask):  # type: ignore[no-untyped-def]
            m = v.max3(v.load_at(a, j0, mask), v.load_at(c, j0, mask), v.load_at(e, j0, mask))
            v.store_at(m, dst, j0, mask)

        loop(builder, v, n, builder.sdiv(n, I64(v.lanes)), step)
        return context.get_dummy_value()

    return nt.void(like, *(nt.int64,) * 5), codegen


def in_row(v: Vectors, q0: ir.Value, col0: ir.Value, width: ir.Value, sw: int | ir.Value):  # type: ignore[no-untyped-def]
    """The masks of the lanes q = q0, q0 + 1, ... of an output row whose first and whose last
    (third) tap, columns ``col0 + sw * q`` and 2 on, lie in a row of ``width`` columns (the
    middle tap always does, as the pools taking these loops have it)."""
    b = v.b
    ids = ir.Constant(v.i32, list(range(v.lanes)))
    step = sw if isinstance(sw, ir.Value) else I64(sw)
    cols = b.add(v.broadcast(b.trunc(b.add(col0, b.mul(step, q0)), I32), v.i32),
                 b.mul(ids, v.broadcast(b.trunc(step, I32), v.i32)))  # fmt: skip
    last = v.broadcast(b.trunc(b.sub(width, I64(2)), I32), v.i32)
    return b.icmp_signed(">=", cols, ir.Constant(v.i32, [0] * v.lanes)), b.icmp_signed(
        "<", cols, last
    )


@intrinsic
def max3_pairs(typingctx, like, src, dst, n, spare):  # type: ignore[no-untyped-def]
    """On int64 addresses of elements of ``like``'s float type: ``dst[q]`` = the maximum of
    ``src[2q]``, ``src[2q + 1]`` and ``src[2q + 2]`` for q < ``n`` (``src`` holds 2n + 1
    elements, no more are read; with ``spare`` true, ``n`` rounded up to whole vectors are
    read and written: no masked step): two vectors of ``src`` split into their even and odd
    elements by shuffles, and the even ones of the two vectors one element on."""
    scalar = scalar_type(like)
    if scalar is None:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        _, src, dst, n, spare = args
        v = Vectors(builder, scalar)
        lanes, b = v.lanes, builder
        even = ir.Constant(ir.VectorType(I32, lanes), list(range(0, 2 * lanes, 2)))
        odd = ir.Constant(ir.VectorType(I32, lanes), list(range(1, 2 * lanes, 2)))
        size = b.add(b.mul(n, I64(2)), I64(1))  # the elements of src

        def step(q0, mask):  # type: ignore[no-untyped-def]
            at = b.mul(q0, I64(2))
            parts = []
            for offset in (0, lanes, 2, lanes + 2):
                k = b.add(at, I64(offset))
                parts.append(v.load_at(src, k, None if mask is None else v.first(b.sub(size, k))))
            lo_a, hi_a, lo_c, hi_c = parts
            a = b.shuffle_vector(lo_a, hi_a, even)
            c = b.shuffle_vector(lo_a, hi_a, odd)
            e = b.shuffle_vector(lo_c, hi_c, even)
            v.store_at(v.max3(a, c, e), dst, q0, mask)

        # A whole step at q0 reads src up to 2 q0 + 2 lanes + 1: inside while q0 + lanes < n.
        whole = b.sdiv(b.sub(n, I64(1)), I64(lanes))
        whole = b.select(b.icmp_signed(">", n, I64(0)), whole, I64(0))
        rounded = b.sdiv(b.add(n, I64(lanes - 1)), I64(lanes))
        loop(builder, v, n, b.select(b.icmp_signed("!=", spare, I64(0)), rounded, whole), step)
        return context.get_dummy_value()

    return nt.void(like, *(nt.int64,) * 4), codegen


class Blocks:
    """Where each lane of a run's vectors lies in its block of ``period`` elements (a row, or
    a channel of a group laid one after another), a vector at a time: `next` gives the masks
    of the lanes whose taps ``apart`` elements before and after lie in the same block, and
    moves on. A 3-tap window 1 row or column apart, padded by one, then takes its padding by
    masks, with no fix-up loop per row or channel (those took half of a small map's time).
    The places are i32 lanes, advanced by ``lanes mod period`` and wrapped by one conditional
    subtraction per vector."""

    def __init__(self, b: ir.IRBuilder, v: Vectors, apart: ir.Value, period: ir.Value) -> None:
        i32 = v.i32
        self.b, self.period = b, v.broadcast(b.trunc(period, I32), i32)
        ids = ir.Constant(i32, list(range(v.lanes)))
        self.slot = cgutils.alloca_once_value(b, b.urem(ids, self.period))
        self.step = v.broadcast(b.trunc(b.srem(I64(v.lanes), period), I32), i32)
        self.low = v.broadcast(b.trunc(apart, I32), i32)
        self.high = b.sub(self.period, self.low)

    def next(self) -> tuple[ir.Value, ir.Value]:
        """The masks of this vector's lanes with their tap before, and after, in the block."""
        b = self.b
        at = b.load(self.slot)
        before, after = b.icmp_signed(">=", at, self.low), b.icmp_signed("<", at, self.high)
        at = b.add(at, self.step)
        b.store(b.select(b.icmp_signed(">=", at, self.period), b.sub(at, self.period), at),
                self.slot)  # fmt: skip
        return before, after


def edged_taps(
    v: Vectors, src: ir.Value, j0: ir.Value, apart: ir.Value, blocks: Blocks,
    mask: ir.Value | None, centre: bool,
) -> tuple[ir.Value, ir.Value, ir.Value]:  # fmt: skip
    """The vectors at element ``j0 - apart``, ``j0`` and ``j0 + apart`` of ``src`` (lanes off
    ``mask`` not read), the outer two read only where their tap is in its block (`Blocks`;
    elsewhere 0, or with ``centre`` the centre's lane)."""
    b = v.b
    before, after = blocks.next()
    if mask is not None:
        before, after = b.and_(before, mask), b.and_(after, mask)
    c = v.load_at(src, j0, mask)
    fill = c if centre else None
    return (
        v.load_at(src, b.sub(j0, apart), before, fill),
        c,
        v.load_at(src, b.add(j0, apart), after, fill),
    )


@intrinsic
def max3_edged(typingctx, like, src, dst, n, apart, period):  # type: ignore[no-untyped-def]
    """On int64 addresses of elements of ``like``'s float type: ``dst[j]`` = the maximum of
    ``src[j - apart]``, ``src[j]`` and ``src[j + apart]`` for j < ``n``, the outer two only
    where they lie in j's block of ``period`` elements (`Blocks`; others are not read)."""
    scalar = scalar_type(like)
    if scalar is None:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        _, src, dst, n, apart, period = args
        v = Vectors(builder, scalar)
        blocks = Blocks(builder, v, apart, period)

        def step(j0, mask):  # type: ignore[no-untyped-def]
            # a tap outside: the centre again, which never changes the maximum
            v.store_at(v.max3(*edged_taps(v, src, j0, apart, blocks, mask, True)), dst, j0, mask)

        loop(builder, v, n, builder.sdiv(n, I64(v.lanes)), step)
        return context.get_dummy_value()

    return nt.void(like, *(nt.int64,) * 5), codegen


_PLAIN = not cpu().mask_registers  # see `by_lines`
_LANES_BYTES = _BITS // 8  # a vector's bytes: its lanes for elements of a size

CHANNEL_WIDTH = 4 * _BITS // 32
"""The input width (four float32 vectors) below which padded 3-row max pools are reduced over
whole channels too (`_by_channel`): on 12 x 12 to 56 x 56 maps 0.6 to 0.8 of the time of
a window-row reduction per output row, on 112 x 112 1.05 (one core, AVX-512). Windows 2
apart inside wider maps take a reduction per output row too (squeezenet's 111 x 111: 0.7 of
the time of the whole channel's, which reduces the rows the stride skips)."""

PLANES_POSITIONS = cpu().l1d // 16
"""Positions of the input a group of channels reduced in one run holds at most
(`planes_at_once`): the group's window-row reductions stay in half of L1d as float64 sums
(2048 with 32 KB; 8192 was no faster)."""


@jit(**_OPTS)
def takes(kw, sw, dw):  # type: ignore[no-untyped-def]
    """Whether `by_rows` takes a max pool of this window width, column stride and dilation."""
    return kw == 3 and dw == 1 and (sw == 1 or sw == 2)


@jit(**_OPTS, inline="always")
def _taps_in(r0, ih, kh, dh):  # type: ignore[no-untyped-def]
    """The first and last taps i of a window whose rows r0 + i * dh are in a channel of
    ``ih`` rows (last < first when none is). Without dilation, no division: a division per
    output row was a third of a small map's time."""
    if dh == 1:
        return max(0, -r0), min(kh - 1, ih - 1 - r0)
    return max(0, -(r0 // dh)), min(kh - 1, (ih - 1 - r0) // dh)


@jit(**_OPTS, inline="always")
def _reduce_rows(like, size, base, ih, iw, r0, kh, dh, dst, n):  # type: ignore[no-untyped-def]
    """At address ``dst``: the maximum, column by column, of the window rows r0 + i * dh
    (i < kh) that are in the (ih, iw) channel at address ``base``, three rows a pass; False
    when none is. ``n`` (at least ``iw``) columns are read and written: those past ``iw`` are
    the next rows'. ``like``: a scalar of the elements' dtype, ``size`` bytes each."""
    first, last = _taps_in(r0, ih, kh, dh)
    if last < first:
        return False
    row = iw * size
    at = base + (r0 + first * dh) * row
    step, k = dh * row, last - first + 1
    max3_run(like, at, at + min(1, k - 1) * step, at + min(2, k - 1) * step, dst, n)
    for t in range(3, k, 2):
        max3_run(like, dst, at + t * step, at + min(t + 1, k - 1) * step, dst, n)
    return True


@jit(**_OPTS)
def _edge_rows(like, size, base, v, lead, window, ih, iw, rows, r0, r1):  # type: ignore[no-untyped-def]
    """The kept rows of the window rows' reductions in ``v`` from ``lead`` outside ``r0`` to
    ``r1``, whose windows are partly in the padding: the first (padded on top) and those
    past ``r1``, each a run of its window rows in the (ih, iw) channel at ``base``."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    row, at_v = iw * size, v.ctypes.data + lead * size
    for r in range(0, rows, sh):
        if r0 <= r < r1:
            continue
        if not _reduce_rows(like, size, base, ih, iw, r - pt, kh, dh, at_v + r * row, iw):
            v[lead + r * iw : lead + (r + 1) * iw] = -np.inf  # every window row in the padding


@jit(**_OPTS)
def _edge_columns(v, at, of, at_out, oh, ow, iw, sh, left, right):  # type: ignore[no-untyped-def]
    """A channel's first (``left``) and last (``right``) output columns again, from its
    window rows' reductions in ``v`` from ``at`` (rows ``sh`` apart): their windows are a
    column past the channel, which the vector loops read for them."""
    for p_ in range(oh):
        r, o = at + p_ * sh * iw, at_out + p_ * ow
        if left:  # the window's columns: -1, 0 and 1
            of[o] = np.maximum(v[r], v[r + 1])
        if right:  # iw - 2, iw - 1 and iw
            of[o + ow - 1] = np.maximum(v[r + iw - 2], v[r + iw - 1])


@jit(**_OPTS)
def planes_at_once(ih, iw, oh, ow, sh, sw, channels):  # type: ignore[no-untyped-def]
    """How many channels `_by_channel` (and `rvm.kernels.avgrows`'s) reduce in each run: with
    windows 1 apart and the output as large as the input, the output's rows follow one another
    as the input's do, so a group of channels of up to `PLANES_POSITIONS` positions is one run
    for each pass (the rows that cross a channel's edge are done again, as the padded edges
    are); else one channel."""
    if sh == 1 and sw == 1 and oh == ih and ow == iw:
        return max(1, min(channels, PLANES_POSITIONS // (ih * iw)))
    return 1


@jit(**_OPTS)
def centres_at_once(ih, iw, oh, ow, kh, sh, sw, dh, pt, pl, channels, size, is_max):  # type: ignore[no-untyped-def]
    """How many channels `_by_centres` (and `rvm.kernels.avgrows`'s) reduce in each run, 0
    when it does not take the pool: 3-row windows 1 apart, padded by one on every side, the
    output the input's size (`planes_at_once`, at least two channels). Rows of elements of
    ``size`` bytes wider than a vector keep their edge loops (`_by_channel`), but for
    averages: the masks cost more than the edges there (one core of a Zen 4: max 0.45 to 0.8
    of the time on 6 x 6 to 14 x 14, 1.05 to 1.1 on 27 x 27 and 28 x 28, averages 0.45 to 0.9
    on 6 x 6 to 28 x 28). (Pools 2 apart on maps a vector wide take `rvm.kernels.narrow`.)"""
    if kh != 3 or dh != 1 or sw != 1 or pt > 1 or (oh - 1) * sh - pt + 1 >= ih:
        return 0
    narrow = iw * size * 8 <= _BITS
    m = planes_at_once(ih, iw, oh, ow, sh, sw, channels)
    return m if m > 1 and pt == 1 and pl == 1 and (narrow or not is_max) else 0


@jit(**_OPTS)
def _by_centres(x, out, lo, hi, m):  # type: ignore[no-untyped-def]
    """`by_rows` for the pools `centres_at_once` takes, ``m`` channels at a time: the window
    rows reduced at every row of the group in one run centred on it (the rows before and
    after only in their channel: `max3_edged`), then the window columns in one run over the
    group (the columns before and after only in their row). The padding is thus taken by
    masks: no fix-up loop per row or channel (the scalar edge loops it replaces took half of
    a 7 x 7 or 14 x 14 map's time)."""
    ih, iw, size = x.shape[2], x.shape[3], x.itemsize
    p, line = ih * iw, 64 // size
    v = np.empty(m * p + 3 * line, dtype=x.dtype)  # a cache line of margin at either end
    like, at_v = v[0], v.ctypes.data + (64 - v.ctypes.data % 64) % 64 + 64
    for first in range(lo, hi, m):
        g, at = min(m, hi - first), first * p * size
        max3_edged(like, x.ctypes.data + at, at_v, g * p, iw, p)
        max3_edged(like, at_v, out.ctypes.data + at, g * p, 1, iw)
    alive(v)  # read and written through its address only


@jit(**_OPTS)
def _by_channel(x, out, lo, hi, window):  # type: ignore[no-untyped-def]
    """`by_rows` for 3-row windows padded by at most one row and column on top and on the
    left, overhanging by at most one column on the right: per channel (per group of channels,
    `planes_at_once`), the window rows reduced at every row whose taps are all in the channel
    in one run (the rows the stride skips too: one long run costs less than a short one per
    output row on small planes), the kept edge rows each a run of their taps in the channel;
    then the columns of each output row (of the whole group at once), the first and last
    outputs again when their windows pad (the vector loops read a column past the row for
    them)."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    rows = (oh - 1) * sh + 1
    size = x.itemsize
    m = planes_at_once(ih, iw, oh, ow, sh, sw, hi - lo)
    plane = rows * iw  # a channel's rows in v (ih * iw when m > 1)
    # v's rows from a cache line's start (a vector split over two lines costs more), a cache
    # line of margin at either end: the first window of a row padded on the left reads one
    # element before its row, the last one overhanging on the right one after
    v = np.full(m * plane + 3 * 64 // size, -np.inf, dtype=x.dtype)
    lead = 64 - v.ctypes.data % 64
    like, at_v = v[0], v.ctypes.data + lead
    at_x, at_out = x.ctypes.data, out.ctypes.data
    row = iw * size
    r0, r1 = pt, max(pt, min(rows, ih - 2 * dh + pt))  # the rows all of whose taps are in
    left, right = pl > 0, (ow - 1) * sw - pl + 2 == iw  # windows a column past the channel
    of = out.reshape(out.size)
    for first in range(lo, hi, m):
        g = min(m, hi - first)
        if r1 > r0:
            at = at_x + (first * ih + r0 - pt) * row
            n = ((g - 1) * rows + r1 - r0) * iw
            max3_run(like, at, at + dh * row, at + 2 * dh * row, at_v + r0 * row, n)
        for j in range(g if r0 > 0 or r1 < rows else 0):
            base = at_x + (first + j) * ih * row
            _edge_rows(like, size, base, v, lead // size + j * plane, window, ih, iw, rows,
                       r0, r1)  # fmt: skip
        if m > 1:  # the group's outputs in one run
            src = at_v - pl * size
            max3_run(like, src, src + size, src + 2 * size, at_out + first * oh * ow * size,
                     g * oh * ow)  # fmt: skip
        else:
            for p_ in range(oh):
                src = at_v + p_ * sh * row - pl * size
                dst = at_out + ((first * oh + p_) * ow) * size
                if sw == 2:
                    max3_pairs(like, src, dst, ow, 0)
                else:
                    max3_run(like, src, src + size, src + 2 * size, dst, ow)
        if m > 1 and (left or right):  # the group's rows one after another, in v as in out
            _edge_columns(v, lead // size, of, first * oh * ow, g * oh, ow, iw, 1, left, right)
        elif left or right:
            _edge_columns(v, lead // size, of, first * oh * ow, oh, ow, iw, sh, left, right)


@jit(**_OPTS)
def whole(kh, kw, sh, sw, dh, pt, pl, ih, iw, oh, ow):  # type: ignore[no-untyped-def]
    """Whether `by_rows` reduces a pool's window rows over whole channels (`by_whole`:
    `_by_centres` or `_by_channel`) rather than per output row (`by_lines`): windows inside
    the input (2 apart, on maps narrower than `CHANNEL_WIDTH`), or maps that narrow padded by
    at most a row and a column. `rvm.kernels.pool` runs the two as tasks of their own, so a
    model builds only the one its pools take (each 1.2 to 2.4 CPU-s)."""
    need = (ow - 1) * sw + kw  # the line's elements the outputs read
    inside = pt == 0 and pl == 0 and (oh - 1) * sh + 2 * dh < ih and need <= iw
    inside = inside and (sh == 1 or iw < CHANNEL_WIDTH)
    narrow = pt <= 1 and pl <= 1 and need - pl <= iw + 1 and 2 <= iw < CHANNEL_WIDTH
    return kh == 3 and (inside or narrow)


@jit(**_OPTS)
def by_whole(x, out, lo, hi, window):  # type: ignore[no-untyped-def]
    """Max pools of channels ``lo`` to ``hi`` (flat n * c index) that `whole` takes, over
    whole channels (see the module docstring)."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    m = centres_at_once(ih, iw, oh, ow, kh, sh, sw, dh, pt, pl, hi - lo, x.itemsize, True)
    if m > 0:
        _by_centres(x, out, lo, hi, m)
    else:
        _by_channel(x, out, lo, hi, window)


@jit(**_OPTS)
def by_lines(x, out, lo, hi, window):  # type: ignore[no-untyped-def]
    """Max pools of channels ``lo`` to ``hi`` (flat n * c index) whose windows `takes`, one
    output row at a time (see the module docstring), with a line of scratch of its own. Where
    masks are not registers of their own (`Cpu.mask_registers`: a masked store is slow), the
    window rows are reduced and the outputs computed in whole vectors, reading the next
    row's columns too where they lie in ``x`` and storing over the next output row where it
    is the chunk's: no masked step a row (a ceil-mode overhang set to -inf again)."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    size = x.itemsize
    lanes = _LANES_BYTES // size if _PLAIN else 1
    wide_in, wide_out = -(-iw // lanes) * lanes, -(-ow // lanes) * lanes
    need = (ow - 1) * sw + kw  # the line's elements the outputs read
    line = np.full(max(pl + wide_in, need, 2 * wide_out + 2), -np.inf, dtype=x.dtype)
    like = line[0]
    at_x, at_line, at_out = x.ctypes.data, line.ctypes.data, out.ctypes.data
    end_x, end_out = at_x + x.size * size, at_out + hi * oh * ow * size
    for c in range(lo, hi):
        base = at_x + c * ih * iw * size
        for p_ in range(oh):
            r0 = p_ * sh - pt
            bottom = min(r0 + (kh - 1) * dh, ih - 1)  # reads reach this row's next columns
            n = wide_in if base + bottom * iw * size + wide_in * size <= end_x else iw
            if not _reduce_rows(like, size, base, ih, iw, r0, kh, dh, at_line + pl * size, n):
                line[pl : pl + iw] = -np.inf  # a window row wholly in the padding
            if lanes > 1 and need > pl + iw:
                line[pl + iw : need] = -np.inf  # the overhang, written past the row before
            dst = at_out + ((c * oh + p_) * ow) * size
            if sw == 2:
                spare = 1 if lanes > 1 and dst + wide_out * size <= end_out else 0
                max3_pairs(like, at_line, dst, ow, spare)
            else:
                max3_run(like, at_line, at_line + size, at_line + 2 * size, dst, ow)
    alive(line)  # read and written through its address only


@jit(**_OPTS)
def by_rows(x, out, lo, hi, window):  # type: ignore[no-untyped-def]
    """Max pools of channels ``lo`` to ``hi`` (flat n * c index) whose windows `takes`:
    `by_whole` where `whole` holds, else `by_lines`."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    if whole(kh, kw, sh, sw, dh, pt, pl, ih, iw, oh, ow):
        by_whole(x, out, lo, hi, window)
    else:
        by_lines(x, out, lo, hi, window)
