"""The im2col convolution methods of `rvm.kernels.conv`: taps copied into columns, then a GEMM.

The input of each (image, group) is split into its zero-padded stride phases once
(`rvm.kernels.planes.fill_phases`), so every tap of every output row is a unit-stride run of
them; then either

- `conv2d_im2col` through a column matrix: those runs copied into a matrix a block of output
  rows at a time (`im2col_rows`; `CONV_BLOCK` positions a block and BLAS thread at most, fewer
  past `COL_BYTES`), each block multiplied by the weight in one GEMM that applies the
  convolution's epilogue as it stores (NumPy's BLAS, `rvm.kernels.blas.gemm_epilogue`); or,
  for float32 where the GEMM packs B and rows are wider than its panels
  (`rvm.kernels.convmethod.panels_pay`), straight into the GEMM's panels (`im2col_panels`:
  one segmented GEMM whose pieces copy their rows' taps as they pack them, no column matrix);
- `conv2d_dot_unchecked` the same column matrix with ``np.dot``, where NumPy's BLAS is not
  reachable.

`tap_table` is where each (channel, tap) row starts in the phases, for the GEMMs that read taps
in place (`rvm.kernels.conv`'s taps method, which also copies into columns with
`im2col_rows` on small maps). Operands are as `rvm.kernels.conv`'s (C-contiguous, checked by
the caller).
"""

from __future__ import annotations

import numpy as np
from numba.core import types as nt
from numba.extending import overload

from rvm.kernels import parfor
from rvm.kernels.blas import blas_threads, gemm_epilogue
from rvm.kernels.blocks import kept
from rvm.kernels.convmethod import panels_pay
from rvm.kernels.cpu import cpu
from rvm.kernels.jitting import alive, jit
from rvm.kernels.planes import U, fill_phases, phase_shape, tap_starts
from rvm.kernels.segments import gemm_segments

__all__ = [
    "COL_BYTES",
    "CONV_BLOCK",
    "conv2d_dot_unchecked",
    "conv2d_im2col",
    "im2col_panels",
    "im2col_rows",
    "takes_panels",
    "tap_table",
]

# Output positions per im2col block and BLAS thread, fewer past COL_BYTES (64 at least).
CONV_BLOCK = 1024
# An im2col block's bytes per BLAS thread at most, twice one core's L2 (2 MB on a 1 MB L2): the
# GEMM reads it in depth slices of `sgemm.KC` rows, each of which stays in L2.
COL_BYTES = 2 * cpu().l2

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@jit(**_OPTS)
def im2col_rows(ph, size, starts, col, cg, wq, ow, p0, p1):  # type: ignore[no-untyped-def]
    """Column block ``col[:, :(p1 - p0) * ow]``: the windows of output rows [p0, p1), tap
    rows in (channel, tap) order, each output row one unit-stride run of the phases ``ph``
    (``size`` elements a channel, taps starting at ``starts``)."""
    taps = starts.shape[0]
    ld = U(col.shape[1])
    colf = col.reshape(col.size)
    for c_ in range(cg):
        for t in range(taps):
            dst = U(c_ * taps + t) * ld
            src = U(c_ * size + starts[t] + p0 * wq)
            for _ in range(p1 - p0):
                for q_ in range(U(ow)):
                    colf[dst + q_] = ph[src + q_]
                dst, src = dst + U(ow), src + U(wq)


@jit(**_OPTS, inline="always")
def _done_before(w, out):  # type: ignore[no-untyped-def]
    """Whether an im2col convolution is done before its work: an empty output, or none to sum
    (a depth of 0: ``out`` zeros)."""
    if out.size == 0:
        return True
    if w.shape[1] * w.shape[2] * w.shape[3] == 0:
        out[...] = 0
        return True
    return False


def _im2col(product):  # type: ignore[no-untyped-def]
    """The im2col convolution whose block products ``product(wm, col, y, ..., epilogue)``
    computes: the input of each (image, group) is split into its zero-padded stride phases
    once, so every tap of every output row is a unit-stride run of them
    (`rvm.kernels.planes`)."""

    @jit(**_OPTS)
    def conv(x, w, out, groups, sh, sw, dh, dw, pt, pl, epilogue):  # type: ignore[no-untyped-def]
        if _done_before(w, out):
            return
        n, c, ih, iw = x.shape
        o, cg, kh, kw = w.shape
        oh, ow = out.shape[2], out.shape[3]
        K = cg * kh * kw
        P = oh * ow
        og = o // groups
        wm = w.reshape((o, K))
        y = out.reshape((n, o, P))
        hp, wp, hq, wq = phase_shape(oh, ow, kh, kw, sh, sw, dh, dw)
        size = sh * sw * hq * wq
        # Scratch kept across calls (`rvm.kernels.blocks.kept`): from malloc, the stems' 0.6
        # and 1.3 MB were mapped fresh in some processes, faulted in page by page at each
        # call (squeezenet's 3 to 64 channels at 224 x 224: 696 µs with no mapping, 953
        # in a process that mapped them, 1256 with every block mapped).
        ph = kept(cg * size, x.dtype)  # every element written by `fill_phases`
        starts = tap_starts(sh, sw, hq, wq, kh, kw, dh, dw)
        # Whole output rows per block, a block per thread: each thread's piece of the split
        # GEMM stays in its cache.
        B = min(max(64, COL_BYTES // x.itemsize // K), CONV_BLOCK) * blas_threads()
        rows = max(1, min(B // ow, oh))
        col = kept(K * rows * ow, x.dtype).reshape((K, rows * ow))
        xf = x.reshape(x.size)
        for n_ in range(n):
            for g_ in range(groups):
                fill_phases(xf, ph, (n_ * c + g_ * cg) * ih * iw, cg, ih, iw, sh, sw, hq, wq,
                            hp, wp, pt, pl)  # fmt: skip
                for p0 in range(0, oh, rows):
                    p1 = min(p0 + rows, oh)
                    im2col_rows(ph, size, starts, col, cg, wq, ow, p0, p1)
                    product(wm, col, y, n_, g_, og, K, P, p0 * ow, p1 * ow, epilogue)
        alive(ph)  # reached by address in the product's pieces: not freed before
        alive(col)

    return conv


@jit(**_OPTS)
def _gemm_product(wm, col, y, n_, g_, og, K, P, pb_, pe_, epilogue):  # type: ignore[no-untyped-def]
    """The block's product straight into the output's columns (row stride P), by BLAS, the
    ``epilogue`` (`rvm.kernels.conv._conv2d_blas`') applied as it stores (`blas.gemm_epilogue`)."""
    o = y.shape[1]
    at = (n_ * o + g_ * og) * P + pb_
    bias, bias_step, act, res = epilogue
    if bias != 0:
        bias += 4 * bias_step * g_ * og
    res = (res - parfor.address(y)) // 4 if res != 0 else 0  # of the output's layout
    gemm_epilogue(wm, g_ * og * K, K, col, 0, col.shape[1], y, at, P, og, pe_ - pb_, K,
                  (bias, bias_step, act, res))  # fmt: skip


@jit(**_OPTS)
def _dot_product(wm, col, y, n_, g_, og, K, P, pb_, pe_, epilogue):  # type: ignore[no-untyped-def]
    """np.dot of contiguous operands into a temporary, copied into the output (by loops: see
    `planes.copy`)."""
    tmp = np.empty((og, pe_ - pb_), dtype=y.dtype)
    np.dot(wm[g_ * og : (g_ + 1) * og], col[:, : pe_ - pb_].copy(), tmp)
    for i in range(og):
        for j in range(pe_ - pb_):
            y[n_, g_ * og + i, pb_ + j] = tmp[i, j]


conv2d_im2col = _im2col(_gemm_product)
conv2d_dot_unchecked = _im2col(_dot_product)


@jit(**_OPTS)
def tap_table(cg, size, starts):  # type: ignore[no-untyped-def]
    """Where B's row (channel, tap) starts in an image's phases (``size`` elements a channel,
    its taps at ``starts``): the GEMM's table of rows when it reads taps there."""
    taps = starts.shape[0]
    table = np.empty(cg * taps, dtype=np.int64)
    for c_ in range(cg):
        for t in range(taps):
            table[c_ * taps + t] = c_ * size + starts[t]
    return table


# Its one caller in the library is its task (`rvm.kernels.conv`'s ``conv2d_im2col_panels``):
# inlined there, built and optimized once, not again as a library of its own.
@jit(**_OPTS, inline="always")
def im2col_panels(x, w, out, groups, sh, sw, dh, dw, pt, pl, epilogue):  # type: ignore[no-untyped-def]  # noqa: E501
    """The im2col convolution where the GEMM packs B into panels (`sgemm.packs`), with no
    column matrix: each image's input split into its zero-padded stride phases once, group
    after group, then one segmented GEMM (`gemm_segments`: the groups its batches, an output
    row a run, B's row (channel, tap) that tap's run in the phases, through a table) whose
    pieces copy their output rows' taps straight into the GEMM's panels (`sgemm._pack`), the
    ``epilogue`` applied as it stores. Where the column matrix was written, then packed, by
    the calling thread alone, each piece now packs its own columns, once."""
    if _done_before(w, out):
        return
    n, c, ih, iw = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = out.shape[2], out.shape[3]
    K, P, og = cg * kh * kw, oh * ow, o // groups
    hp, wp, hq, wq = phase_shape(oh, ow, kh, kw, sh, sw, dh, dw)
    size = sh * sw * hq * wq
    ph = kept(c * size, x.dtype)  # kept across calls, as `_im2col`'s scratch
    table = tap_table(cg, size, tap_starts(sh, sw, hq, wq, kh, kw, dh, dw))
    xf, wf, of = x.reshape(x.size), w.reshape(w.size), out.reshape(out.size)
    bias, bias_step, act, res = epilogue
    for n_ in range(n):
        # the image's channels, every group's one after another
        fill_phases(xf, ph, n_ * c * ih * iw, c, ih, iw, sh, sw, hq, wq, hp, wp, pt, pl)
        at = n_ * o * P
        image = (bias, bias_step, act, res + 4 * at if res != 0 else 0)
        gemm_segments(wf, 0, K, ph, 0, table, of, at, P, og, K, oh, ow, wq, ow, groups, groups,
                      og * K, cg * size, og * P, 0, 0, image)  # fmt: skip
    alive(ph)  # reached by address in the product's pieces: not freed before


def takes_panels(x, ow):  # type: ignore[no-untyped-def]
    """Whether an im2col convolution of ``x`` with output rows of ``ow`` runs `im2col_panels`
    (float32 where `panels_pay`) rather than `conv2d_im2col`: the two are library tasks of
    their own (`rvm.kernels.conv`), so a model builds only the one its shapes take. Jitted
    code only."""
    raise NotImplementedError("takes_panels is for jitted code")


@overload(takes_panels, jit_options=_OPTS, inline="always")
def _takes_panels_impl(x, ow):  # type: ignore[no-untyped-def]
    if isinstance(x, nt.Array) and x.dtype == nt.float32:
        return lambda x, ow: panels_pay(ow)
    return lambda x, ow: False
