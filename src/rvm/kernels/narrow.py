"""Pools of narrow maps: each output row from its window rows loaded whole, as vectors.

Max and average pools with windows of at most 3 x 3 taps 2 apart along rows (3 columns, or 2
for a maximum), on maps whose needed columns fit in one, two or four vectors of the CPU (`takes`;
float32 on AVX-512: 13 x 13 and 14 x 14 maps in one, 27 x 27 and 28 x 28 in two, up to 64
columns in four) take this method (`rvm.kernels.pool`'s tasks ``pool2d_max_narrow`` and
``pool2d_avg_narrow``): the CNNs' 3x3 pools 2 apart on 12 x 12 to 56 x 56 maps, vgg's and
zfnet's 2x2 ones on 12 x 12 to 28 x 28.

For each output row, its window rows are loaded as vectors from the row's padded column 0
(column ``-pl``): the padding, a ceil-mode overhang and rows outside the channel are lanes
never read, filled with -inf for a maximum and 0 for a sum. The rows are reduced lane by
lane (averages in float64, as the reference sums), each output's window columns are taken
from that one vector by constant shuffles (a shuffle per tap: the columns 2 apart), and
the row of outputs is stored, masked. So an output row costs its window rows' loads, a few
shuffles and one store, where `rvm.kernels.maxrows` and `rvm.kernels.avgrows` write a line of
row reductions (at every row, those the stride skips too) and read it again through a loop
whose one, masked, step was all its work on these maps. An average's sum is multiplied by its
window's scale (`rvm.kernels.pool`'s table of reciprocal counts, which says whether the
padding counts). A NaN in a window makes its maximum NaN, as in the reference.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types as nt
from numba.extending import intrinsic

from rvm.kernels.cpu import cpu
from rvm.kernels.jitting import jit
from rvm.kernels.maxrows import I64, Vectors, _taps_in, scalar_type

__all__ = ["by_narrow", "takes"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_BITS = cpu().vector_bits


def _row(is_max: bool, vectors: int):  # type: ignore[no-untyped-def]
    """The intrinsic ``(like, at, step, t0, t1, pl, iw, kw, dst, ow, scale)`` on int64
    addresses, ``vectors`` CPU vectors a row: ``dst[q]`` (q < ``ow``, ``like``'s float type) =
    the maximum (``is_max``) or the sum times ``scale[q]`` (float64) of the window at columns
    ``2 q - pl`` to ``2 q - pl + kw - 1`` (``kw`` 2 or 3) over the rows
    ``at + t * step`` for ``t0 <= t <= t1`` (t < 3) of a map ``iw`` wide; columns outside it
    are not read."""

    def row(typingctx, like, at, step, t0, t1, pl, iw, kw, dst, ow, scale):  # type: ignore[no-untyped-def]
        scalar = scalar_type(like)
        if scalar is None:
            return None

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            _, at, step, t0, t1, pl, iw, kw, dst, ow, scale = args
            b = builder
            v, cols = row_lanes(b, scalar, vectors, pl, iw)
            size, lanes = v.size, v.lanes
            fill = ir.Constant(v.vec, [float("-inf") if is_max else 0.0] * lanes)
            start = b.sub(at, b.mul(pl, I64(size)))
            taps = []
            for t in range(3):
                inside = b.and_(b.icmp_signed("<=", t0, I64(t)), b.icmp_signed(">=", t1, I64(t)))
                mask = b.and_(cols, v.splat_mask(inside))
                taps.append(v.load(b.add(start, b.mul(step, I64(t))), v.vec, mask, fill))
            if is_max:
                line = v.max3(*taps)
            else:
                wide = [v.widen(t) for t in taps]
                line = b.fadd(b.fadd(wide[0], wide[1]), wide[2])
            blank = ir.Constant(line.type, None) if not is_max else fill
            third = b.icmp_signed("==", kw, I64(3))

            n = lanes // 2  # the outputs, 2 apart: a shuffle per window column
            o = Vectors(b, scalar, n)
            a, c, e = (
                b.shuffle_vector(line, blank, ir.Constant(ir.VectorType(ir.IntType(32), n),
                                                          [2 * q + j for q in range(n)]))
                for j in range(3)
            )  # fmt: skip
            e = b.select(third, e, ir.Constant(e.type, None) if not is_max else
                         ir.Constant(e.type, [float("-inf")] * n))  # fmt: skip
            keep = o.first(ow)
            if is_max:
                o.store_at(o.max3(a, c, e), dst, I64(0), keep)
            else:
                w = Vectors(b, ir.DoubleType(), n)
                total = b.fmul(b.fadd(b.fadd(a, c), e), w.load_at(scale, I64(0), keep))
                o.store_at(o.narrow(total), dst, I64(0), keep)
            return context.get_dummy_value()

        return nt.void(like, *(nt.int64,) * 10), codegen

    return intrinsic(row)


max_row, max_row2, max_row4 = _row(True, 1), _row(True, 2), _row(True, 4)
sum_row, sum_row2, sum_row4 = _row(False, 1), _row(False, 2), _row(False, 4)


@jit(**_OPTS)
def row_vectors(columns, size):  # type: ignore[no-untyped-def]
    """How many CPU vectors (1, 2 or 4; more: 8) hold ``columns`` elements of ``size`` bytes:
    the whole-row loads of `row_lanes`."""
    bits = columns * size * 8
    return 1 if bits <= _BITS else 2 if bits <= 2 * _BITS else 4 if bits <= 4 * _BITS else 8


def row_lanes(b: ir.IRBuilder, scalar: ir.Type, vectors: int, pl: ir.Value, iw: ir.Value):  # type: ignore[no-untyped-def]
    """A padded row's whole-row load, ``vectors`` CPU vectors of ``scalar``: its `Vectors`
    and the mask of its lanes that are columns of the map (lane ``l`` is padded column ``l``:
    ``pl`` <= ``l`` < ``pl + iw``); the others are padding, never read."""
    size = 4 if isinstance(scalar, ir.FloatType) else 8
    lanes = _BITS // (8 * size) * vectors
    v = Vectors(b, scalar, lanes)
    ids = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))
    cols = b.and_(
        b.icmp_signed(">=", ids, v.broadcast(pl, ids.type)),
        b.icmp_signed("<", ids, v.broadcast(b.add(pl, iw), ids.type)),
    )
    return v, cols


@jit(**_OPTS)
def takes(is_max, kh, kw, sh, sw, dh, dw, ow, size):  # type: ignore[no-untyped-def]
    """Whether `by_narrow` takes a max (``is_max``) or average pool of this window, these
    strides and dilations, ``ow`` outputs a row, of elements of ``size`` bytes: at most 3 x 3
    taps 2 apart along rows, undilated, 3 columns, or 2 for a maximum (2x2 averages run faster
    by `rvm.kernels.tiles`; 1 apart, the runs of `rvm.kernels.maxrows` won on 6 x 6 to 14 x 14
    maps), the columns the outputs read in four CPU vectors, two for 2 columns (on 56 x 56
    maps the loads of whole rows cost 1.4 to 1.9 times `rvm.kernels.tiles`' stream there, one
    core of a Zen 4)."""
    most = 4 if kw == 3 else 2
    window = kh <= 3 and (kw == 3 or (kw == 2 and is_max)) and sw == 2 and sh >= 1
    return window and dh == 1 and dw == 1 and row_vectors((ow - 1) * 2 + kw, size) <= most


@jit(**_OPTS, inline="always")
def by_narrow(x, out, lo, hi, scale, is_max, window):  # type: ignore[no-untyped-def]
    """Max (``is_max``) or average pools (``scale``: the windows' reciprocal counts, float64,
    oh * ow) of channels ``lo`` to ``hi`` (flat n * c index) that `takes`, an output row at a
    time (see the module docstring)."""
    kh, kw, sh, _, dh, dw, pt, pl = window
    ih, iw, oh, ow, size = x.shape[2], x.shape[3], out.shape[2], out.shape[3], x.itemsize
    like, row = x.reshape(x.size)[0], iw * size
    vectors = row_vectors((ow - 1) * 2 + kw, size)
    at_x, at_out, at_scale = x.ctypes.data, out.ctypes.data, scale.ctypes.data
    for c in range(lo, hi):
        base = at_x + c * ih * row
        for p_ in range(oh):
            r0 = p_ * sh - pt
            t0, t1 = _taps_in(r0, ih, kh, dh)
            at, dst = base + r0 * row, at_out + (c * oh + p_) * ow * size
            s = at_scale + p_ * ow * 8
            if is_max and vectors == 1:
                max_row(like, at, row, t0, t1, pl, iw, kw, dst, ow, s)
            elif is_max and vectors == 2:
                max_row2(like, at, row, t0, t1, pl, iw, kw, dst, ow, s)
            elif is_max:
                max_row4(like, at, row, t0, t1, pl, iw, kw, dst, ow, s)
            elif vectors == 1:
                sum_row(like, at, row, t0, t1, pl, iw, kw, dst, ow, s)
            elif vectors == 2:
                sum_row2(like, at, row, t0, t1, pl, iw, kw, dst, ow, s)
            else:
                sum_row4(like, at, row, t0, t1, pl, iw, kw, dst, ow, s)
