"""Pools of narrow maps: each output row from its window rows loaded whole, as vectors.

Max and average pools with windows of at most 3 x 3 taps 2 apart along rows (3 columns, or 2
for a maximum), on maps whose needed columns fit in one, two or four vectors of the CPU (`takes`;
float32 on AVX-512: 13 x 13 and 14 x 14 maps in one, 27 x 27 and 28 x 28 in two, up to 64
columns in four) take this method (`rvm.kernels.pool`'s tasks ``pool2d_max_narrow`` and
``pool2d_avg_narrow``): the CNNs' 3x3 pools 2 apart on 12 x 12 to 56 x 56 maps, vgg's and
zfnet's 2x2 ones on 12 x 12 to 28 x 28.

For each output row, its window rows are loaded as vectors from the row's padded column 0
(column ``-pl``), whole where the vectors lie in the chunk's planes (else masked, at the
chunk's ends); the lanes that are padding, a ceil-mode overhang or the next row's columns
are set to -inf for a maximum and 0 for a sum after the rows are reduced lane by lane
(averages in float64, as the reference sums): one load mask for every row, made once a call
(rebuilt for each row, a 4-vector row's took AVX2 dozens of instructions). A maximum's row
outside the channel reads a row of its window again; a sum's is 0. Each output's window
columns are taken from that one vector by constant shuffles (a shuffle per tap: the columns
2 apart), and the row of outputs is stored, whole where masks are not registers of their own
(`Cpu.mask_registers`) and the vector ends inside the chunk's outputs (its lanes past the row
are the next row's, stored over after). So an output row costs its window rows' loads, a
few shuffles and one store, where `rvm.kernels.maxrows` and `rvm.kernels.avgrows` write a
line of row reductions (at every row, those the stride skips too) and read it again through
a loop whose one, masked, step was all its work on these maps. An average's sum is
multiplied by its window's scale (`rvm.kernels.pool`'s table of reciprocal counts, which
says whether the padding counts). A NaN in a window makes its maximum NaN, as in the
reference. On a Zen 3 core, in the models (one thread): squeezenet's 256 x 27 x 27 max pool
94 -> 40 us, inception_v2's 320 x 28 x 28 and 576 x 14 x 14 ones 220 -> 85 and 105 -> 48 us.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.cpu import cpu
from rvm.kernels.jitting import alive, jit
from rvm.kernels.maxrows import I32, I64, Vectors, scalar_type

__all__ = ["by_narrow", "takes"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_BITS = cpu().vector_bits
_PLAIN = not cpu().mask_registers  # see `_rows`' stores


def _rows(is_max: bool, vectors: int):  # type: ignore[no-untyped-def]
    """The intrinsic ``(like, x, out, scale, m, ih, iw, oh, ow, sh, pt, pl, kh, kw)`` on int64
    addresses, ``vectors`` CPU vectors a row: the ``m`` (oh, ow) planes from ``out`` (of
    ``like``'s float type) = the maxima (``is_max``) or the sums times ``scale`` (float64, oh
    * ow) of the windows of ``kh`` (at most 3) x ``kw`` (2 or 3) taps, rows ``sh`` and columns
    2 apart, of the ``m`` (ih, iw) planes from ``x`` padded by ``pt`` rows and ``pl`` columns;
    nothing outside the planes is read (see the module docstring)."""

    def rows(typingctx, like, x, out, scale, m, ih, iw, oh, ow, sh, pt, pl, kh, kw):  # type: ignore[no-untyped-def]
        scalar = scalar_type(like)
        if scalar is None:
            return None

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            _, x, out, scale, m, ih, iw, oh, ow, sh, pt, pl, kh, kw = args
            b = builder
            v, cols = row_lanes(b, scalar, vectors, pl, iw)  # one mask for every row
            size, lanes = v.size, v.lanes
            fill = ir.Constant(v.vec, [float("-inf") if is_max else 0.0] * lanes)
            n = lanes // 2  # the outputs, 2 apart: a shuffle per window column
            o = Vectors(b, scalar, n)
            picks = [ir.Constant(ir.VectorType(I32, n), [2 * q + j for q in range(n)])
                     for j in range(3)]  # fmt: skip
            third = b.icmp_signed("==", kw, I64(3))
            none = ir.Constant(o.vec, [float("-inf")] * n) if is_max else None
            keep, row = o.first(ow), b.mul(iw, I64(size))
            plane, last = b.mul(ih, row), b.sub(ih, I64(1))
            end = b.mul(b.mul(m, oh), ow)  # the outputs of the m planes
            bound = b.add(x, b.mul(m, plane))  # the end of their input
            with cgutils.for_range(b, m) as planes:
                j = planes.index
                start = b.sub(b.add(x, b.mul(j, plane)), b.mul(pl, I64(size)))
                with cgutils.for_range(b, oh) as loop:
                    p = loop.index
                    r0 = b.sub(b.mul(p, sh), pt)
                    first = _most(b, r0, I64(0))
                    final = _least(b, b.add(r0, b.sub(kh, I64(1))), last)
                    ats, insides = [], []
                    for t in range(3):
                        r = b.add(r0, I64(t))
                        if is_max:
                            # a row outside the window or the plane: a row of the window
                            # again, which never changes a maximum
                            r = _least(b, _most(b, _least(b, _most(b, r, first), final),
                                                I64(0)), last)  # fmt: skip
                        else:
                            # (final is at most the window's last row)
                            insides.append(b.and_(b.icmp_signed("<=", first, r),
                                                  b.icmp_signed("<=", r, final)))  # fmt: skip
                            r = _least(b, _most(b, r, I64(0)), last)
                        ats.append(b.add(start, b.mul(r, row)))
                    # Rows whose vectors lie in the m planes are loaded whole where masks are
                    # not registers of their own, their lanes outside the map (the row
                    # before's or after's) set after the sum or maximum (one blend a vector,
                    # not one a row): masked loads only at the ends.
                    whole = b.and_(
                        b.icmp_signed(">=", ats[0], x),
                        b.icmp_signed("<=", b.add(ats[2], I64(lanes * size)), bound),
                    )
                    whole = b.and_(whole, ir.Constant(ir.IntType(1), _PLAIN))
                    slots = [cgutils.alloca_once(b, v.vec) for _ in range(3)]
                    with b.if_else(whole) as (plain, masked):
                        with plain:
                            for at_t, slot in zip(ats, slots, strict=True):
                                b.store(v.load_at(at_t, I64(0), None), slot)
                        with masked:
                            for at_t, slot in zip(ats, slots, strict=True):
                                b.store(v.load(at_t, v.vec, cols), slot)
                    taps = [b.load(slot) for slot in slots]
                    if is_max:
                        line = b.select(cols, v.max3(*taps), fill)
                        # no row of the window in the plane: padding only
                        line = b.select(b.icmp_signed(">", first, final), fill, line)
                    else:
                        zero = v.widen(fill)
                        wide = [b.select(k, v.widen(t), zero) for k, t in zip(insides, taps,
                                                                          strict=True)]  # fmt: skip
                        line = b.select(cols, b.fadd(b.fadd(wide[0], wide[1]), wide[2]), zero)
                    blank = fill if is_max else ir.Constant(line.type, None)
                    a, c, e = (b.shuffle_vector(line, blank, pick) for pick in picks)
                    at = b.mul(b.add(b.mul(j, oh), p), ow)
                    if is_max:
                        total = o.max3(a, c, b.select(third, e, none))
                    else:
                        e = b.select(third, e, ir.Constant(e.type, None))
                        w = Vectors(b, ir.DoubleType(), n)
                        scaled = b.fmul(b.fadd(b.fadd(a, c), e),
                                        w.load_at(scale, b.mul(p, ow), keep))  # fmt: skip
                        total = o.narrow(scaled)
                    # A row whose vector ends inside the m planes is stored whole where masks
                    # are not registers of their own (`Cpu.mask_registers`): its lanes past
                    # the row are the next row's, stored over after.
                    fits = b.icmp_signed("<=", b.add(at, I64(n)), end)
                    fits = b.and_(fits, ir.Constant(ir.IntType(1), _PLAIN))
                    with b.if_else(fits) as (plain, masked):
                        with plain:
                            o.store_at(total, out, at, None)
                        with masked:
                            o.store_at(total, out, at, keep)
            return context.get_dummy_value()

        return nt.void(like, *(nt.int64,) * 13), codegen

    return intrinsic(rows)


def _most(b: ir.IRBuilder, a: ir.Value, c: ir.Value) -> ir.Value:
    """The larger of the int64 values ``a`` and ``c``."""
    return b.select(b.icmp_signed(">", a, c), a, c)


def _least(b: ir.IRBuilder, a: ir.Value, c: ir.Value) -> ir.Value:
    """The smaller of the int64 values ``a`` and ``c``."""
    return b.select(b.icmp_signed("<", a, c), a, c)


max_rows, max_rows2, max_rows4 = _rows(True, 1), _rows(True, 2), _rows(True, 4)
sum_rows, sum_rows2, sum_rows4 = _rows(False, 1), _rows(False, 2), _rows(False, 4)


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
    like, m = x.reshape(x.size)[0], hi - lo
    vectors = row_vectors((ow - 1) * 2 + kw, size)
    at_x, at_out = x.ctypes.data + lo * ih * iw * size, out.ctypes.data + lo * oh * ow * size
    at_scale = scale.ctypes.data
    if is_max and vectors == 1:
        max_rows(like, at_x, at_out, at_scale, m, ih, iw, oh, ow, sh, pt, pl, kh, kw)
    elif is_max and vectors == 2:
        max_rows2(like, at_x, at_out, at_scale, m, ih, iw, oh, ow, sh, pt, pl, kh, kw)
    elif is_max:
        max_rows4(like, at_x, at_out, at_scale, m, ih, iw, oh, ow, sh, pt, pl, kh, kw)
    elif vectors == 1:
        sum_rows(like, at_x, at_out, at_scale, m, ih, iw, oh, ow, sh, pt, pl, kh, kw)
    elif vectors == 2:
        sum_rows2(like, at_x, at_out, at_scale, m, ih, iw, oh, ow, sh, pt, pl, kh, kw)
    else:
        sum_rows4(like, at_x, at_out, at_scale, m, ih, iw, oh, ow, sh, pt, pl, kh, kw)
    alive(scale)  # read through its address only
