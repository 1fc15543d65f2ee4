"""Depthwise convolutions (one input channel per group, any channel multiplier) for
`rvm.kernels.conv`'s depthwise method; input planes in chunks on the pool when large.

3x3 windows 2 apart along rows (or 1, with 512-bit vectors or output rows that fit two
vectors: `takes`), undilated, on maps whose
needed columns fit in four CPU vectors (`by_rows`: float32 on AVX-512, rows up to 62 wide at
stride 1, 31 outputs at stride 2; shufflenet's and the MobileNets' 7 x 7 to 56 x 56 maps) go
an output row at a time, as
`rvm.kernels.narrow`'s pools: each of the three input rows is loaded whole as vectors from
its padded column 0, the padding and rows outside the plane as lanes never read (0); each
tap's columns are taken from that line by a constant shuffle (lane q: column ``sw q + j``),
multiplied by the tap's weight and added in registers, a sum per input row (three chains
of three multiply-adds, not one of nine); the output row is stored once, masked (whole where
masks are not registers of their own and the vector ends inside the plane: its lanes past
the row are the next row's, stored over after). A row outside the plane reads its nearest
row and takes zeros, so every row's load has the same mask (rebuilt for each row from its
flag, it took AVX2 a dozen instructions a row). So an output row costs three loads, nine
shuffles and multiply-adds and a store, where the general method (below) writes a padded
copy of the plane, passes over a line of sums three taps at a time and copies the rows out:
on shufflenet's depthwise layers (7 x 7 to 56 x 56, strides 1 and 2) this takes 0.2 to 0.55
of its time, one core of a Zen 4. The chains, the stores and the mask took shufflenet's 7 x
7 and stride-2 layers from 31-70 to 20-44 µs on a Zen 3 core (0.63-0.72 of the time).

Other depthwise convolutions copy each input plane once into a zero-padded plane split into
its stride phases (`rvm.kernels.planes`), then add the taps' weighted windows as long runs,
three taps per pass.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels import parfor
from rvm.kernels.cpu import cpu
from rvm.kernels.jitting import jit
from rvm.kernels.maxrows import I32, I64, Vectors, scalar_type
from rvm.kernels.narrow import row_lanes, row_vectors
from rvm.kernels.planes import U, padded_phases, phase_shape, tap_starts

__all__ = ["by_rows", "depthwise"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_BITS = cpu().vector_bits
_PLAIN = not cpu().mask_registers  # see `_plane`'s stores


def _plane(sw: int, vectors: int):  # type: ignore[no-untyped-def]
    """The intrinsic ``(like, x, w, out, ih, iw, oh, ow, sh, pt, pl)`` on int64 addresses,
    ``vectors`` CPU vectors a row, columns ``sw`` apart: the (oh, ow) plane ``out`` (of
    ``like``'s float type) = the 3x3 windows, rows ``sh`` apart, of the (ih, iw) plane ``x``
    padded by ``pt`` rows and ``pl`` columns, weighted by the 9 taps at ``w`` (see the module
    docstring)."""

    def plane(typingctx, like, x, w, out, ih, iw, oh, ow, sh, pt, pl):  # type: ignore[no-untyped-def]
        scalar = scalar_type(like)
        if scalar is None:
            return None

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            _, x, w, out, ih, iw, oh, ow, sh, pt, pl = args
            b = builder
            v, cols = row_lanes(b, scalar, vectors, pl, iw)
            size, lanes = v.size, v.lanes
            n = lanes // sw  # the outputs of a row
            o = Vectors(b, scalar, n)
            zero, blank = ir.Constant(v.vec, None), ir.Constant(o.vec, None)
            fma = o.declare(o.vec, [o.vec] * 3, f"llvm.fma.v{n}{'f32' if size == 4 else 'f64'}")
            picks = [
                ir.Constant(ir.VectorType(I32, n), [sw * q + j for q in range(n)]) for j in range(3)
            ]
            taps = [o.broadcast(b.load(b.inttoptr(v.address(w, I64(t)), scalar.as_pointer())),
                                o.vec) for t in range(9)]  # fmt: skip
            keep = o.first(ow)
            row = b.mul(iw, I64(size))
            # Rows whose vector ends inside the plane store it whole where masks are not
            # registers of their own (`Cpu.mask_registers`): its lanes past the row are the
            # next row's, stored over after.
            plane_end = b.mul(oh, ow)
            with cgutils.for_range(b, oh) as loop:
                p = loop.index
                r0 = b.sub(b.mul(p, sh), pt)
                # A sum per input row: three chains of three multiply-adds, not one of nine.
                sums = []
                for i in range(3):
                    r = b.add(r0, I64(i))
                    above, below = b.icmp_signed("<", r, I64(0)), b.icmp_signed(">=", r, ih)
                    near = b.select(above, I64(0), b.select(below, b.sub(ih, I64(1)), r))
                    start = b.sub(b.add(x, b.mul(near, row)), b.mul(pl, I64(size)))
                    line = v.load(start, v.vec, cols, zero)
                    line = b.select(b.or_(above, below), zero, line)
                    acc = blank
                    for j in range(3):
                        tap = b.shuffle_vector(line, zero, picks[j])
                        acc = b.call(fma, [taps[3 * i + j], tap, acc])
                    sums.append(acc)
                acc = b.fadd(b.fadd(sums[0], sums[1]), sums[2])
                fits = b.icmp_signed("<=", b.add(b.mul(p, ow), I64(n)), plane_end)
                fits = b.and_(fits, ir.Constant(ir.IntType(1), _PLAIN))
                with b.if_else(fits) as (plain, masked):
                    with plain:
                        o.store_at(acc, out, b.mul(p, ow), None)
                    with masked:
                        o.store_at(acc, out, b.mul(p, ow), keep)
            return context.get_dummy_value()

        return nt.void(like, *(nt.int64,) * 10), codegen

    return intrinsic(plane)


plane1, plane1x2, plane1x4 = _plane(1, 1), _plane(1, 2), _plane(1, 4)
plane2, plane2x2, plane2x4 = _plane(2, 1), _plane(2, 2), _plane(2, 4)


@jit(**_OPTS)
def takes(kh, kw, sw, dh, dw, ow, size):  # type: ignore[no-untyped-def]
    """Whether `by_rows` takes a depthwise convolution of this window, column stride and
    dilation, ``ow`` outputs a row, elements of ``size`` bytes: 3x3 taps, undilated, 2 apart
    along rows, or 1 apart on CPUs with 512-bit vectors or where an output row fits two
    vectors, the columns an output row reads in four CPU vectors. (A line shifted by a lane is
    one instruction on AVX-512, a permute and a blend across the halves on AVX2: there,
    compiled for Haswell on a Zen 4, rows 1 apart took 1.1 to 1.6 times the plane method's
    time on 14 x 14 to 30 x 30 maps, and rows 2 apart 0.36 to 0.7; on a Zen 3, 0.54-0.58 at 14
    x 14 (shufflenet's 272 channels, since each row's sum runs in three chains with one load
    mask) and 0.91-1.04 at 28 x 28, where the plane method stays.)"""
    apart = sw == 2 or (sw == 1 and (_BITS >= 512 or row_vectors(ow, size) <= 2))
    window = kh == 3 and kw == 3 and dh == 1 and dw == 1 and apart
    return window and row_vectors((ow - 1) * sw + 3, size) <= 4


@jit(**_OPTS)
def by_rows(x, w, out, lo, hi, sh, sw, pt, pl):  # type: ignore[no-untyped-def]
    """Input planes ``lo`` to ``hi`` (flat n * c index) of a depthwise convolution that
    `takes`, an output row at a time (see the module docstring)."""
    c, ih, iw = x.shape[1], x.shape[2], x.shape[3]
    o, oh, ow, size = w.shape[0], out.shape[2], out.shape[3], x.itemsize
    m = o // c  # outputs per input channel
    like = x.reshape(x.size)[0]
    vectors = row_vectors((ow - 1) * sw + 3, size)
    at_x, at_w, at_out = x.ctypes.data, w.ctypes.data, out.ctypes.data
    for plane in range(lo, hi):
        n_, ch = plane // c, plane % c
        src = at_x + plane * ih * iw * size
        for oc in range(ch * m, ch * m + m):
            wt, dst = at_w + oc * 9 * size, at_out + (n_ * o + oc) * oh * ow * size
            if sw == 1 and vectors == 1:
                plane1(like, src, wt, dst, ih, iw, oh, ow, sh, pt, pl)
            elif sw == 1 and vectors == 2:
                plane1x2(like, src, wt, dst, ih, iw, oh, ow, sh, pt, pl)
            elif sw == 1:
                plane1x4(like, src, wt, dst, ih, iw, oh, ow, sh, pt, pl)
            elif vectors == 1:
                plane2(like, src, wt, dst, ih, iw, oh, ow, sh, pt, pl)
            elif vectors == 2:
                plane2x2(like, src, wt, dst, ih, iw, oh, ow, sh, pt, pl)
            else:
                plane2x4(like, src, wt, dst, ih, iw, oh, ow, sh, pt, pl)


@jit(**_OPTS)
def _depthwise_range(x, w, out, lo, hi, sh, sw, dh, dw, pt, pl):  # type: ignore[no-untyped-def]
    """Input planes ``lo`` to ``hi`` (flat n * c index) of a convolution with one input
    channel per group (depthwise, any channel multiplier): each plane is copied into a
    zero-padded plane split into its stride phases, then the taps add their weighted windows
    as long runs, three per pass (see `rvm.kernels.planes`)."""
    c, ih, iw = x.shape[1], x.shape[2], x.shape[3]
    o, kh, kw = w.shape[0], w.shape[2], w.shape[3]
    oh, ow = out.shape[2], out.shape[3]
    if takes(kh, kw, sw, dh, dw, ow, x.itemsize):
        by_rows(x, w, out, lo, hi, sh, sw, pt, pl)
        return
    m = o // c  # outputs per input channel
    hp, wp, hq, wq = phase_shape(oh, ow, kh, kw, sh, sw, dh, dw)
    flat = np.zeros(sh * sw * hq * wq, dtype=x.dtype)
    starts = tap_starts(sh, sw, hq, wq, kh, kw, dh, dw)
    run = U(oh * wq)
    acc = np.empty(run, dtype=x.dtype)
    xf, wf, of = x.reshape(x.size), w.reshape(w.size), out.reshape(out.size)
    for plane in range(lo, hi):
        n_, ch = plane // c, plane % c
        padded_phases(xf, plane * ih * iw, ih, iw, flat, sh, sw, hq, wq, hp, wp, pt, pl)
        for oc in range(ch * m, ch * m + m):
            _weighted_taps(flat, starts, wf, oc * kh * kw, acc, run)
            _copy_rows(acc, wq, of, (n_ * o + oc) * oh * ow, oh, ow)


# A depthwise job (int64): its length (20), x, w, out, n, c, ih, iw, o, kh, kw, oh, ow, sh, sw,
# dh, dw, pt, pl, chunks.


def _depthwise_task(k, like, data):  # type: ignore[no-untyped-def]
    """One chunk of input planes of a depthwise convolution split over threads."""
    job = parfor.job(data)
    n, c, ih, iw, o = job[4], job[5], job[6], job[7], job[8]
    kh, kw, oh, ow = job[9], job[10], job[11], job[12]
    x = parfor.array_at(job[1], (n, c, ih, iw), like)
    w = parfor.array_at(job[2], (o, 1, kh, kw), like)
    out = parfor.array_at(job[3], (n, o, oh, ow), like)
    chunks = job[19]
    lo, hi = k * n * c // chunks, (k + 1) * n * c // chunks
    _depthwise_range(x, w, out, lo, hi, job[13], job[14], job[15], job[16], job[17], job[18])


# Built when a depthwise convolution first splits (`rvm.kernels.parfor`); its name is the
# convolution entry point's own task of old.
parfor.export_task("conv2d", _depthwise_task)
_run_depthwise = parfor.runner("conv2d")


@jit(**_OPTS)
def depthwise(x, w, out, sh, sw, dh, dw, pt, pl):  # type: ignore[no-untyped-def]
    """`_depthwise_range` over every input plane, in chunks of planes on the pool when large."""
    n, c, ih, iw = x.shape
    o, _, kh, kw = w.shape
    oh, ow = out.shape[2], out.shape[3]
    chunks = parfor.chunks(n * o * (ih * iw + oh * ow * kh * kw), n * c)
    if chunks < 2:
        _depthwise_range(x, w, out, 0, n * c, sh, sw, dh, dw, pt, pl)
        return
    job = np.array((20, parfor.address(x), parfor.address(w), parfor.address(out), n, c, ih, iw,
                    o, kh, kw, oh, ow, sh, sw, dh, dw, pt, pl, chunks), dtype=np.int64)  # fmt: skip
    _run_depthwise(x, chunks, job)


@jit(**_OPTS)
def _weighted_taps(flat, starts, wf, at_w, acc, run):  # type: ignore[no-untyped-def]
    """``acc[:run]`` = the sum over the taps t of ``wf[at_w + t]`` times the run of ``flat``
    at ``starts[t]``, three taps per pass over ``acc`` (a pass per tap reads and writes it
    three times as often)."""
    taps = starts.shape[0]
    if taps == 0:
        acc[:run] = 0
    first = True
    for t in range(0, taps, 3):
        left = taps - t
        w0, a0 = wf[at_w + t], U(starts[t])
        if left >= 3:
            w1, a1 = wf[at_w + t + 1], U(starts[t + 1])
            w2, a2 = wf[at_w + t + 2], U(starts[t + 2])
            if first:
                for r_ in range(run):
                    acc[r_] = w0 * flat[a0 + r_] + w1 * flat[a1 + r_] + w2 * flat[a2 + r_]
            else:
                for r_ in range(run):
                    acc[r_] += w0 * flat[a0 + r_] + w1 * flat[a1 + r_] + w2 * flat[a2 + r_]
        elif left == 2:
            w1, a1 = wf[at_w + t + 1], U(starts[t + 1])
            if first:
                for r_ in range(run):
                    acc[r_] = w0 * flat[a0 + r_] + w1 * flat[a1 + r_]
            else:
                for r_ in range(run):
                    acc[r_] += w0 * flat[a0 + r_] + w1 * flat[a1 + r_]
        elif first:
            for r_ in range(run):
                acc[r_] = w0 * flat[a0 + r_]
        else:
            for r_ in range(run):
                acc[r_] += w0 * flat[a0 + r_]
        first = False


@jit(**_OPTS)
def _copy_rows(acc, wq, of, at, oh, ow):  # type: ignore[no-untyped-def]
    """The first ``ow`` of every ``wq`` elements of ``acc`` to ``of[at:]`` (the output plane
    without the wrap-around columns); unsigned indices, as in `rvm.kernels.planes`."""
    for p_ in range(oh):
        dst, src = U(at + p_ * ow), U(p_ * wq)
        for q_ in range(U(ow)):
            of[dst + q_] = acc[src + q_]
