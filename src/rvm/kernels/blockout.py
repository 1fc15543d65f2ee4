"""Where a bf16 walk's blocks of sums go from L1: the next convolution's pair plane, rounded,
or a float32 image, each block's bias, residual and ReLU applied in the same pass
(`block_out`), as the `BLOCK_OUT` record a walk is given says. AMX's walk (`rvm.kernels.amx`)
and the vector walk (`rvm.kernels.bf16gemm.walk_out`) put their blocks out so: the float32
sums never leave L1."""

from __future__ import annotations

import numpy as np

from rvm.kernels.bf16words import sum_words
from rvm.kernels.jitting import jit
from rvm.kernels.microkernel import floats_at, ints_at

__all__ = ["BLOCK_OUT", "POSITIONS", "block_out", "whole_runs"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

# A block out (int64, a walk's ``to``): where the walk's blocks go from L1, past C. The
# output's kind (0: a pair plane, its channel pairs' words; 1: a float32 image), its address
# at the walk's first position (channel 0), its channels' stride (a pair plane: a pair's
# words) and its rows' width; the walk's positions a row (its rows may be wider than the
# image's: C's column ``j`` is row ``j // wp``, column ``j % wp``) and the image's width; the
# residual's kind (`sum_words`: 0 none, 1 a float32 image, 2 a pair plane), its address at
# the walk's first position, its channels' stride and its rows' width, as the output's. Kind
# `POSITIONS` (the walk turned around only, `rvm.kernels.amxconv`): a plane of positions by
# channel pairs, its address at the walk's first position, the words between its positions
# (its channel pairs) and its rows' width (positions); so a residual's (a pair plane's or
# such a plane's, no float32 one).
BLOCK_OUT = 10
POSITIONS = 3  # neither an output's kind (0, 1) nor a residual's (0, 1, 2)


@jit(inline="always", **_OPTS)
def whole_runs(desc):  # type: ignore[no-untyped-def]
    """Whether a `BLOCK_OUT` record's (``desc``: its int64 fields) output and residual have
    rows as wide as the walk's positions a row: a block's positions then make one run in each,
    whatever the block."""
    wp, ow, kind = desc[4], desc[5], desc[6]
    return wp == ow and desc[3] == ow and (kind == 0 or desc[9] == ow)


@jit(**_OPTS)
def block_out(edge, ld, rows, cols, i0, j0, to, bias, relu):  # type: ignore[no-untyped-def]
    """A block's float32 sums (``rows`` x ``cols`` at ``edge``, rows ``ld`` floats apart:
    output channels ``i0`` on at the run's positions ``j0`` on), each plus its channel's bias
    (at ``bias``, 0: none) and the residual, then ReLU'd with ``relu``, into the output the
    `BLOCK_OUT` record ``to`` describes, two channels at a time in one pass (`sum_words`): a
    pair plane's word ``c2`` rounded from channels ``2 c2`` and ``2 c2 + 1`` (``i0`` even;
    an odd last channel's high halves 0), or a float32 image's two rows. Each run of the
    block's positions within one of the image's rows at a time (the whole block's at once
    where the run, the output's and the residual's rows are the image's), positions past the
    image's width dropped."""
    desc = ints_at(to)
    floats, out, ld_out, row_out, wp, ow = desc[0], desc[1], desc[2], desc[3], desc[4], desc[5]
    kind, res, ld_res, row_res = desc[6], desc[7], desc[8], desc[9]
    b = floats_at(bias)
    zero = np.float32(0.0)
    # `sum_words`' bias, ReLU and float32 out
    flags = (1 if bias != 0 else 0) | (2 if relu else 0) | (4 if floats else 0)
    whole = whole_runs(desc)
    # the first run's row and column once a block, not once a pair of channels
    y0, x0 = (0, 0) if whole else (j0 // wp, j0 % wp)
    for r in range(0, rows, 2):
        pair = 1 if r + 1 < rows else 0
        lo, c = edge + 4 * r * ld, i0 + r
        at_out = out + 4 * (c if floats else c // 2) * ld_out
        at_res = res + 4 * (c if kind == 1 else c // 2) * ld_res
        shifts = (b[c] if bias != 0 else zero, b[c + 1] if bias != 0 and pair else zero)
        if whole:  # one run of the image's positions, in the output and the residual
            o, q = at_out + 4 * j0, at_res + 4 * j0
            sum_words(lo, lo + 4 * ld, o, o + 4 * ld_out, cols, pair, shifts, flags,
                      (kind, q, q + 4 * ld_res))  # fmt: skip
            continue
        j, y, x = j0, y0, x0
        while j < j0 + cols:
            run = min(j0 + cols - j, wp - x)
            if x < ow:
                src = lo + 4 * (j - j0)
                o, q = at_out + 4 * (y * row_out + x), at_res + 4 * (y * row_res + x)
                sum_words(src, src + 4 * ld, o, o + 4 * ld_out, min(run, ow - x), pair,
                          shifts, flags, (kind, q, q + 4 * ld_res))  # fmt: skip
            j, y, x = j + run, y + 1, 0
