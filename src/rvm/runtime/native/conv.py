"""Float convolution for jit kernels, compiled once and called by every convolution kernel.

A convolution kernel checks its operands' shapes, calls `conv2d` (or `conv2d_dot`) with the
attributes, and runs its epilogue (bias, activation) over the output; the convolution itself
lives here, so it is compiled once per operand type and cached with this module's Numba
cache, not compiled again into every kernel (it was most of a CNN's compile time):

- `conv2d(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr, min_shift)`: NumPy's BLAS
  (`rvm.runtime.native.blas.gemm_split`: every GEMM is cut into pieces that run at once on
  the BLAS's threads, one thread each), the method chosen by shape (`_conv2d_blas`). 1x1
  convolutions are one GEMM per (image, group) on the operands themselves. Depthwise ones
  (one input channel per group) are direct loops. Stride-1 convolutions with at least
  ``min_shift`` (the lowering's `rvm.jit.stages.SHIFT_MIN_CHANNELS`) input channels per
  group stack the kw horizontal shifts of the zero-padded input and run one GEMM per kernel
  row on row-strided windows of the stack, accumulated in place by BLAS: no column matrix.
  Others pack the input windows of each (image, group) into a column matrix (im2col, with
  the padding as zero runs and unit-stride copies in between) and multiply it by the
  weight, one GEMM per block of output positions.
- `conv2d_dot(...)`: the same im2col with ``np.dot``, where NumPy's BLAS is not reachable.

Operands are C-contiguous: ``x`` (n, c, ih, iw), ``w`` (o, c / groups, kh, kw), ``out`` (n, o,
oh, ow); ``pt``, ``pl``, ``pb``, ``pr`` are the top, left, bottom and right padding. Both
entry points check that channels, groups, batch and output size agree with the geometry before
touching memory, and raise ValueError when they do not (the kernels check the same earlier,
with messages in the model's terms; this check is what keeps the library itself safe).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.runtime.native import entry
from rvm.runtime.native.blas import blas_threads
from rvm.runtime.native.blas import gemm_split as gemm
from rvm.runtime.native.planes import U, padded_phases, phase_shape, tap_starts

# Output positions per im2col block and BLAS thread, fewer past COL_BYTES (64 at least).
CONV_BLOCK = 1024
COL_BYTES = 1 << 21  # an im2col block's bytes per BLAS thread at most: it stays in cache

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@nb.njit(**_OPTS)
def _out_size(size, kern, stride, dil, lo, hi):  # type: ignore[no-untyped-def]
    """The output size along one spatial axis (-1 when the kernel is larger than the input)."""
    span = size + lo + hi - dil * (kern - 1) - 1
    return -1 if span < 0 else span // stride + 1


@nb.njit(**_OPTS)
def _check(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr):  # type: ignore[no-untyped-def]
    """Whether the operands' channels, groups, batch and output size agree with the geometry
    (the loops rely on it)."""
    if min(groups, sh, sw, dh, dw) <= 0:
        return False
    kh, kw = w.shape[2], w.shape[3]
    return (
        x.shape[1] == w.shape[1] * groups
        and w.shape[0] % groups == 0
        and out.shape[0] == x.shape[0]
        and out.shape[1] == w.shape[0]
        and out.shape[2] == _out_size(x.shape[2], kh, sh, dh, pt, pb)
        and out.shape[3] == _out_size(x.shape[3], kw, sw, dw, pl, pr)
    )


@nb.njit(**_OPTS)
def _im2col_block(x, col, n_, g_, cg, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, pb_, pe_):  # type: ignore[no-untyped-def]
    """Column block ``col[:, :pe_ - pb_]``: the windows of output positions [pb_, pe_) of
    image ``n_``, group ``g_`` (zero outside the input)."""
    ih, iw = x.shape[2], x.shape[3]
    for c_ in range(cg):
        ch_ = g_ * cg + c_
        for kh_ in range(kh):
            for kw_ in range(kw):
                r_ = (c_ * kh + kh_) * kw + kw_
                off_ = kw_ * dw - pl
                lo_ = min(max(0, -(off_ // sw)), ow)
                hi_ = min(max(lo_, (iw - 1 - off_) // sw + 1), ow)
                p_ = pb_
                while p_ < pe_:
                    oh_ = p_ // ow
                    w0_ = p_ - oh_ * ow
                    w1_ = min(ow, w0_ + pe_ - p_)
                    b_ = p_ - pb_ - w0_
                    ih_ = oh_ * sh - pt + kh_ * dh
                    if ih_ < 0 or ih_ >= ih:
                        col[r_, b_ + w0_ : b_ + w1_] = 0
                    else:
                        a_ = max(w0_, min(lo_, w1_))
                        z_ = max(a_, min(hi_, w1_))
                        col[r_, b_ + w0_ : b_ + a_] = 0
                        if sw == 1:  # a unit-stride copy (vectorized)
                            for q_ in range(a_, z_):
                                col[r_, b_ + q_] = x[n_, ch_, ih_, q_ + off_]
                        else:
                            for q_ in range(a_, z_):
                                col[r_, b_ + q_] = x[n_, ch_, ih_, q_ * sw + off_]
                        col[r_, b_ + z_ : b_ + w1_] = 0
                    p_ += w1_ - w0_


def _im2col(product):  # type: ignore[no-untyped-def]
    """The im2col convolution whose block products ``product(wm, col, y, ...)`` computes."""

    @nb.njit(**_OPTS)
    def conv(x, w, out, groups, sh, sw, dh, dw, pt, pl):  # type: ignore[no-untyped-def]
        n = x.shape[0]
        o, cg, kh, kw = w.shape
        oh, ow = out.shape[2], out.shape[3]
        if n * o * oh * ow == 0:
            return
        if cg * kh * kw == 0:
            out[...] = 0
            return
        K = cg * kh * kw
        P = oh * ow
        og = o // groups
        wm = w.reshape((o, K))
        y = out.reshape((n, o, P))
        # A block per thread: each thread's piece of the split GEMM stays in its cache.
        B = min(max(64, COL_BYTES // x.itemsize // K), CONV_BLOCK) * blas_threads()
        B = min(B, P)
        col = np.empty((K, B), dtype=x.dtype)
        for n_ in range(n):
            for g_ in range(groups):
                for pb_ in range(0, P, B):
                    pe_ = min(pb_ + B, P)
                    _im2col_block(
                        x, col, n_, g_, cg, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, pb_, pe_
                    )
                    product(wm, col, y, n_, g_, og, K, P, pb_, pe_)

    return conv


@nb.njit(**_OPTS)
def _gemm_product(wm, col, y, n_, g_, og, K, P, pb_, pe_):  # type: ignore[no-untyped-def]
    """The block's product straight into the output's columns (row stride P), by BLAS."""
    o = y.shape[1]
    at = (n_ * o + g_ * og) * P + pb_
    gemm(wm, g_ * og * K, K, col, 0, col.shape[1], y, at, P, og, pe_ - pb_, K, 0.0)


@nb.njit(**_OPTS)
def _dot_product(wm, col, y, n_, g_, og, K, P, pb_, pe_):  # type: ignore[no-untyped-def]
    """np.dot of contiguous operands into a temporary, copied into the output."""
    tmp = np.empty((og, pe_ - pb_), dtype=y.dtype)
    np.dot(wm[g_ * og : (g_ + 1) * og], col[:, : pe_ - pb_].copy(), tmp)
    y[n_, g_ * og : (g_ + 1) * og, pb_:pe_] = tmp


_im2col_gemm = _im2col(_gemm_product)
conv2d_dot_unchecked = _im2col(_dot_product)


# Stride-1 convolution as one GEMM per kernel row (kh GEMMs of depth kw * cg), accumulated in
# place (beta = 1) by BLAS: output position p = oh * Wp + ow of the zero-padded input, flattened
# with its padded row width Wp, reads input position p + i * dh * Wp + j * dw for tap (i, j).
# The kw horizontal shifts of the padded input are stacked as rows ((c, j) order, `_stack_taps`),
# so each kernel row's input matrix is a row-strided window of the stack and needs no further
# copy; fewer, deeper GEMMs than one per tap (K = cg is 16-64 in squeezenet) also read and
# write the output kw times less and split better over threads.
# Row p's last Wp - ow columns are wrap-around garbage, dropped when the result is copied out.
@nb.njit(**_OPTS)
def _stack_taps(x, xs, n_, ch0, cg, kw, dw, pt, pl, Wp):  # type: ignore[no-untyped-def]
    """``xs[c * kw + j, q]`` = padded input channel ``ch0 + c`` at flat position ``q + j * dw``
    (zero outside the input), for the kw horizontal taps j."""
    ih, iw = x.shape[2], x.shape[3]
    Lr = xs.shape[1]
    xs[:, :] = 0
    for c_ in range(cg):
        for j_ in range(kw):
            r_ = c_ * kw + j_
            for h_ in range(min(ih, Lr // Wp - pt)):
                at = (h_ + pt) * Wp + pl - j_ * dw  # where input row h_ starts in this row
                lo, hi = max(0, -at), min(iw, Lr - at, Wp - pl)
                for q_ in range(lo, hi):
                    xs[r_, at + q_] = x[n_, ch0 + c_, h_, q_]


@nb.njit(**_OPTS)
def _shifted(x, w, out, groups, dh, dw, pt, pl):  # type: ignore[no-untyped-def]
    n, c, ih, iw = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = out.shape[2], out.shape[3]
    og = o // groups
    Wp = ow + dw * (kw - 1)
    Hp = oh + dh * (kh - 1)
    P = oh * Wp
    K = kw * cg
    wt = np.empty((kh, o, cg, kw), dtype=w.dtype)  # kernel rows first, runs of kw copied
    for o_ in range(o):
        for c_ in range(cg):
            for i_ in range(kh):
                for j_ in range(kw):
                    wt[i_, o_, c_, j_] = w[o_, c_, i_, j_]
    xs = np.empty((K, Hp * Wp), dtype=x.dtype)
    tmp = np.empty((og, P), dtype=x.dtype)
    for n_ in range(n):
        for g_ in range(groups):
            _stack_taps(x, xs, n_, g_ * cg, cg, kw, dw, pt, pl, Wp)
            for i_ in range(kh):
                gemm(
                    wt, (i_ * o + g_ * og) * K, K,
                    xs, i_ * dh * Wp, Hp * Wp,
                    tmp, 0, P, og, P, K, 0.0 if i_ == 0 else 1.0,
                )  # fmt: skip
            for o_ in range(og):
                for h_ in range(oh):
                    for q_ in range(ow):
                        out[n_, g_ * og + o_, h_, q_] = tmp[o_, h_ * Wp + q_]


@nb.njit(**_OPTS)
def _pointwise(x, w, out, groups):  # type: ignore[no-untyped-def]
    """A 1x1, stride-1, unpadded convolution: one GEMM per (image, group) straight from the
    input to the output, (og, cg) weight rows times the group's (cg, h * w) input rows."""
    n, c, ih, iw = x.shape
    o, cg = w.shape[0], w.shape[1]
    og, P = o // groups, ih * iw
    for n_ in range(n):
        for g_ in range(groups):
            at_x, at_out = (n_ * c + g_ * cg) * P, (n_ * o + g_ * og) * P
            gemm(w, g_ * og * cg, cg, x, at_x, P, out, at_out, P, og, P, cg, 0.0)


@nb.njit(**_OPTS)
def _depthwise(x, w, out, sh, sw, dh, dw, pt, pl):  # type: ignore[no-untyped-def]
    """A convolution with one input channel per group (depthwise, any channel multiplier):
    each channel is copied into a zero-padded plane split into its stride phases, then every
    tap adds its weighted window as one long run (see `rvm.runtime.native.planes`)."""
    n, c, ih, iw = x.shape
    o, _, kh, kw = w.shape
    oh, ow = out.shape[2], out.shape[3]
    m = o // c  # outputs per input channel
    hp, wp, hq, wq = phase_shape(oh, ow, kh, kw, sh, sw, dh, dw)
    flat = np.zeros(sh * sw * hq * wq, dtype=x.dtype)
    starts = tap_starts(sh, sw, hq, wq, kh, kw, dh, dw)
    run = U(oh * wq)
    acc = np.empty(run, dtype=x.dtype)
    xf, wf, of = x.reshape(x.size), w.reshape(w.size), out.reshape(out.size)
    for n_ in range(n):
        for ch in range(c):
            padded_phases(xf, (n_ * c + ch) * ih * iw, ih, iw, flat, sh, sw, hq, wq, hp, wp, pt, pl)
            for oc in range(ch * m, ch * m + m):
                acc[:] = 0
                for t in range(kh * kw):
                    wv, at = wf[oc * kh * kw + t], U(starts[t])
                    for r_ in range(run):
                        acc[r_] += wv * flat[at + r_]
                _copy_rows(acc, wq, of, (n_ * o + oc) * oh * ow, oh, ow)


@nb.njit(**_OPTS)
def _copy_rows(acc, wq, of, at, oh, ow):  # type: ignore[no-untyped-def]
    """The first ``ow`` of every ``wq`` elements of ``acc`` to ``of[at:]`` (the output plane
    without the wrap-around columns); unsigned indices, as in `rvm.runtime.native.planes`."""
    for p_ in range(oh):
        dst, src = U(at + p_ * ow), U(p_ * wq)
        for q_ in range(U(ow)):
            of[dst + q_] = acc[src + q_]


@nb.njit(**_OPTS)
def _conv2d_blas(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr, min_shift):  # type: ignore[no-untyped-def]
    """`conv2d`'s work; False when the shapes disagree with the geometry (`_check`).

    The method by shape: 1x1 unpadded stride-1 convolutions are GEMMs on the operands
    themselves (`_pointwise`); one input channel per group runs direct loops
    (`_depthwise`); stride-1 convolutions with ``min_shift`` channels per group and more
    output positions than output channels run shifted GEMMs (`_shifted`: its weight
    transpose costs o * cg * kh * kw, im2col's column matrix cg * kh * kw per position);
    the rest im2col.
    """
    if not _check(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr):
        return False
    n, o, oh, ow = out.shape
    cg, kh, kw = w.shape[1], w.shape[2], w.shape[3]
    unit = sh == 1 and sw == 1
    if n * o * oh * ow == 0:
        return True
    if unit and kh == 1 and kw == 1 and pt == 0 and pl == 0 and pb == 0 and pr == 0:
        _pointwise(x, w, out, groups)
    elif cg == 1:
        _depthwise(x, w, out, sh, sw, dh, dw, pt, pl)
    elif unit and min(pt, pl) >= 0 and cg >= min_shift and oh * ow >= o:
        _shifted(x, w, out, groups, dh, dw, pt, pl)
    else:
        _im2col_gemm(x, w, out, groups, sh, sw, dh, dw, pt, pl)
    return True


# -- the compiled entry point (see `rvm.runtime.native.entry`) ------------------------------


def _entry(a, b, c, dims, params):  # type: ignore[no-untyped-def]
    """`_conv2d_blas` on x (a), w (b), out (c): 0 done, 1 the shapes disagree."""
    d, p = nb.carray(dims, 12), nb.carray(params, 10)
    x = nb.carray(a, (d[0], d[1], d[2], d[3]))
    w = nb.carray(b, (d[4], d[5], d[6], d[7]))
    out = nb.carray(c, (d[8], d[9], d[10], d[11]))
    ok = _conv2d_blas(x, w, out, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9])
    return 0 if ok else 1


entry.export("conv2d", _entry)
# What kernels call (`rvm.runtime.native.entry.caller`): ``entry_call(arrays, params)``, 0 done.
entry_call = entry.caller("conv2d", 10)


# For Python callers (kernels call `entry_call`). Not cached: compiling it types the call, which
# registers the entry point (`entry.require`); cached object code would be linked without it.
@nb.njit(nogil=True)
def conv2d(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr, min_shift):  # type: ignore[no-untyped-def]
    """``out`` = the convolution of ``x`` by ``w`` (see the module docstring), by BLAS;
    shifted GEMMs from ``min_shift`` input channels per group."""
    i = np.int64
    params = (i(groups), i(sh), i(sw), i(dh), i(dw), i(pt), i(pl), i(pb), i(pr), i(min_shift))
    if entry_call((x, w, out), params) != 0:
        raise ValueError("conv2d: the operands' shapes do not match the geometry")


@nb.njit(**_OPTS)
def conv2d_dot(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr):  # type: ignore[no-untyped-def]
    """`conv2d` by im2col and ``np.dot`` (where NumPy's BLAS is not reachable)."""
    if not _check(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr):
        raise ValueError("conv2d: the operands' shapes do not match the geometry")
    conv2d_dot_unchecked(x, w, out, groups, sh, sw, dh, dw, pt, pl)
