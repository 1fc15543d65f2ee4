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
float64 as they are loaded.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.extending import intrinsic

from rvm.kernels.jitting import jit
from rvm.kernels.maxrows import I32, I64, Vectors, _taps_in, loop, scalar_type

__all__ = ["by_rows"]

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
def sum3_scaled(typingctx, like, src, dst, n, scale, sw):  # type: ignore[no-untyped-def]
    """On int64 addresses: ``dst[q]`` (``like``'s float type) = (``src[sw q]`` +
    ``src[sw q + 1]`` + ``src[sw q + 2]``) * ``scale[q]`` for q < ``n``, ``src`` and
    ``scale`` float64, ``sw`` 1 or 2 (``src`` holds sw (n - 1) + 3 elements; no more are
    read)."""
    scalar = scalar_type(like)
    if scalar is None:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        _, src, dst, n, scale, sw = args
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
                    s2 = b.fadd(
                        b.fadd(
                            b.shuffle_vector(lo_a, hi_a, even), b.shuffle_vector(lo_a, hi_a, odd)
                        ),
                        b.shuffle_vector(lo_c, hi_c, even),
                    )
                with one:
                    block_one = b.block
                    s1 = b.fadd(b.fadd(part(q0, mask), part(b.add(q0, I64(1)), mask)),
                                part(b.add(q0, I64(2)), mask))  # fmt: skip
            total = b.phi(w.vec)
            total.add_incoming(s2, block_two)
            total.add_incoming(s1, block_one)
            out_mask = mask if mask is not None else w.first(I64(lanes))
            scaled = b.fmul(total, w.load_at(scale, q0, out_mask))
            v.store_at(v.narrow(scaled), dst, q0, mask)

        # A whole step at q0 reads src up to sw q0 + 2 lanes + 1: inside while q0 + lanes < n.
        whole = b.sdiv(b.sub(n, I64(1)), I64(lanes))
        loop(b, v, n, b.select(b.icmp_signed(">", n, I64(0)), whole, I64(0)), step)
        return context.get_dummy_value()

    return nt.void(like, *(nt.int64,) * 5), codegen


@jit(**_OPTS)
def by_rows(x, out, lo, hi, scale, window):  # type: ignore[no-untyped-def]
    """Average pools of channels ``lo`` to ``hi`` (flat n * c index) whose windows
    `rvm.kernels.maxrows.takes`, ``scale`` (float64, oh * ow) the windows' reciprocal
    counts, one output row at a time (see the module docstring)."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
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
                        at_scale + p_ * ow * 8, sw)  # fmt: skip
