"""Float convolution for jit kernels, compiled once and called by every convolution kernel.

A convolution kernel checks its operands' shapes, calls `conv2d` (or `conv2d_dot`) with the
attributes, and runs its epilogue (bias, activation) over the output, or, for float32, hands a
bias, residual and ReLU to the library with the convolution (``conv2d_fused``: its GEMM applies
them as it stores where it can, `fuses_epilogue`, else `rvm.kernels.epipass`'s pass); the
convolution itself lives here, so it is compiled once per operand type and cached with this
module's Numba cache, not compiled again into every kernel (it was most of a CNN's compile
time):

- `conv2d(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr)`: NumPy's BLAS
  (`rvm.kernels.blas.gemm_split`: every GEMM is cut into pieces that run at once on
  the BLAS's threads, one thread each), the method chosen by shape (`method`). 1x1
  unpadded convolutions are one GEMM per (image, group), on the operands themselves at
  stride 1, on the input subsampled once otherwise. Depthwise ones (one input channel per
  group) are direct loops, three taps per pass. Others split the zero-padded input of each
  (image, group) into its stride phases once (`rvm.kernels.planes.fill_phases`: every element
  written, padding included, on the pool by rows when large), so each tap of
  each output row is a unit-stride run, copy those runs into a column matrix (im2col) and
  multiply it by the weight, one GEMM per block of output rows; where the GEMM packs B
  (`sgemm.packs`) and output rows are wider than its panels (`panels_pay`), with no column
  matrix: each piece of one GEMM on the pool copies its rows' taps from the phases straight
  into the panels (`_im2col_panels`). (Stride-1 convolutions used
  to run one GEMM per kernel row on shifted windows of the padded input, with no column
  matrix: its shallower GEMMs and its weight transpose made it slower than this im2col.)
  Float32 convolutions where vectors of output channels pay (`rvm.kernels.direct.prefers`:
  deep, in whole vectors of output channels, on rows that leave the GEMM's lanes idle or at
  stride 1 with many output channels or an input plane larger than a quarter of L3, as
  vgg19's and the inception stems' are) on maps of `rvm.kernels.direct.PACK_MIN_POSITIONS`
  or more run the direct method instead (`rvm.kernels.direct.conv2d_oihw`), their weight
  packed at the call. Float32 3x3 convolutions at stride 1 and dilation 1 without groups,
  deep enough on maps of enough tiles (`winograd_pays`), run Winograd's F(2x2, 3x3) before
  either (`rvm.kernels.winograd`: 2.25 times fewer multiply-adds, the weight transformed at
  the call, the epilogue applied in its output transform).
- ``conv2d_winograd`` (entry point, `_winograd_entry`): Winograd's on a weight transformed at
  build time (`rvm.op.conv2d_winograd`), with its epilogue.
- `conv2d_dot(...)`: the same im2col with ``np.dot``, where NumPy's BLAS is not reachable.

Each method is a task of its own (`rvm.kernels.parfor.caller`), built when a convolution
first takes it: the entry point itself is only the checks and the choice, seconds less to
build, and a model builds the methods its shapes take (a CNN without depthwise convolutions
never builds that one), each once, not nested in the others' code. A batch the pool's threads
share evenly runs an image a piece (`by_images`): each image's method in one thread, one join
for the batch instead of one per image (and per GEMM block), small images a core each.

Operands are C-contiguous: ``x`` (n, c, ih, iw), ``w`` (o, c / groups, kh, kw), ``out`` (n, o,
oh, ow); ``pt``, ``pl``, ``pb``, ``pr`` are the top, left, bottom and right padding. Both
entry points check that channels, groups, batch and output size agree with the geometry before
touching memory, and raise ValueError when they do not (the kernels check the same earlier,
with messages in the model's terms; this check is what keeps the library itself safe).
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numba.core import types as nt
from numba.extending import overload

from rvm.kernels import direct, entry, epipass, parfor, planes, sgemm, winograd
from rvm.kernels.blas import blas_threads, gemm_epilogue
from rvm.kernels.blas import gemm_split as gemm
from rvm.kernels.blocks import empty, kept
from rvm.kernels.cpu import cpu
from rvm.kernels.depthwise import depthwise
from rvm.kernels.jitting import alive, jit
from rvm.kernels.planes import U, fill_phases, phase_shape, tap_starts
from rvm.kernels.segments import SHARED_TASKS, gemm_segments

# Output positions per im2col block and BLAS thread, fewer past COL_BYTES (64 at least).
CONV_BLOCK = 1024
# An im2col block's bytes per BLAS thread at most, twice one core's L2 (2 MB on a 1 MB L2): the
# GEMM reads it in depth slices of `sgemm.KC` rows, each of which stays in L2.
COL_BYTES = 2 * cpu().l2

# Float32 convolutions with output rows at least this wide read their taps in place
# (`_taps_gemm`, where that reads best: `TAPS_IN_PLACE`); narrower ones use im2col. Each output
# row is a run of tiles whose last one is masked: at width 7 only 7 of 16 lanes work, where
# im2col's GEMM runs over all rows at once.
TAPS_MIN_WIDTH = 12
TAPS_IN_PLACE = not sgemm.PACK_B
"""Whether float32 convolutions read their taps in place (`_taps_gemm`) at all. Where a tile's
row of B is one cache line (AVX2: `sgemm.PACK_B`), ``KC`` taps in place are ``KC`` lines on as
many pages that the hardware does not prefetch, while im2col's column matrix reaches the GEMM
as packed panels: on a Zen 3 core (AVX2, 512 KB L2) im2col ran every taps layer of resnet50 and
inception_v2 1.2 to 1.9 times as fast (medians; 3 x 3 on 14 x 14 to 28 x 28, 64 to 256 channels; one
thread), their 7 x 7 stems 1.02 to 1.1 times. Where a tile's row is several lines (AVX-512's
three), the taps read in place."""

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@jit(**_OPTS)
def _out_size(size, kern, stride, dil, lo, hi):  # type: ignore[no-untyped-def]
    """The output size along one spatial axis (-1 when the kernel is larger than the input)."""
    span = size + lo + hi - dil * (kern - 1) - 1
    return -1 if span < 0 else span // stride + 1


@jit(**_OPTS)
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


@jit(**_OPTS)
def _im2col_rows(ph, size, starts, col, cg, wq, ow, p0, p1):  # type: ignore[no-untyped-def]
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
                    _im2col_rows(ph, size, starts, col, cg, wq, ow, p0, p1)
                    product(wm, col, y, n_, g_, og, K, P, p0 * ow, p1 * ow, epilogue)
        alive(ph)  # reached by address in the product's pieces: not freed before
        alive(col)

    return conv


@jit(**_OPTS)
def _gemm_product(wm, col, y, n_, g_, og, K, P, pb_, pe_, epilogue):  # type: ignore[no-untyped-def]
    """The block's product straight into the output's columns (row stride P), by BLAS, the
    ``epilogue`` (`_conv2d_blas`') applied as it stores (`blas.gemm_epilogue`)."""
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


_im2col_gemm = _im2col(_gemm_product)
conv2d_dot_unchecked = _im2col(_dot_product)


@jit(**_OPTS)
def _tap_table(cg, size, starts):  # type: ignore[no-untyped-def]
    """Where B's row (channel, tap) starts in an image's phases (``size`` elements a channel,
    its taps at ``starts``): the GEMM's table of rows when it reads taps there."""
    taps = starts.shape[0]
    table = np.empty(cg * taps, dtype=np.int64)
    for c_ in range(cg):
        for t in range(taps):
            table[c_ * taps + t] = c_ * size + starts[t]
    return table


@jit(**_OPTS)
def _im2col_panels(x, w, out, groups, sh, sw, dh, dw, pt, pl, epilogue):  # type: ignore[no-untyped-def]  # noqa: E501
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
    table = _tap_table(cg, size, tap_starts(sh, sw, hq, wq, kh, kw, dh, dw))
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


@jit(**_OPTS, inline="always")
def panels_pay(ow):  # type: ignore[no-untyped-def]
    """Whether a float32 im2col convolution with output rows of ``ow`` copies its taps
    straight into the GEMM's panels (`_im2col_panels`): where the GEMM packs B
    (`sgemm.PACK_B`), on rows wider than a panel (`sgemm.NR` columns), whose panels then
    mostly lie within a row and move a vector a row of B; a panel across rows moves its pieces
    a float at a time (`sgemm._pack`). On a Zen 3 core (one thread, bias and ReLU in the
    store) the panels took 0.84-0.89 of the column matrix's time on 112 x 112 (the 7 x 7
    stem), 0.90-0.95 on 111 x 111, 0.85-0.90 on 56 x 56 and 0.90-0.95 on 28 x 28, but 1.03-1.05
    on 14 x 14 (every panel across two rows)."""
    return sgemm.PACK_B and ow > sgemm.NR


def _im2col_method(x, w, out, groups, sh, sw, dh, dw, pt, pl, epilogue):  # type: ignore[no-untyped-def]  # noqa: E501
    """The im2col method: float32 into the GEMM's panels where that pays (`panels_pay`),
    else through a column matrix (`_im2col_gemm`). Jitted code only."""
    raise NotImplementedError("_im2col_method is for jitted code")


@overload(_im2col_method, jit_options=_OPTS)
def _im2col_method_impl(x, w, out, groups, sh, sw, dh, dw, pt, pl, epilogue):  # type: ignore[no-untyped-def]  # noqa: E501
    if sgemm.PACK_B and isinstance(x, nt.Array) and x.dtype == nt.float32:

        def either(x, w, out, groups, sh, sw, dh, dw, pt, pl, epilogue):  # type: ignore[no-untyped-def]  # noqa: E501
            if panels_pay(out.shape[3]):
                _im2col_panels(x, w, out, groups, sh, sw, dh, dw, pt, pl, epilogue)
            else:
                _im2col_gemm(x, w, out, groups, sh, sw, dh, dw, pt, pl, epilogue)

        return either
    return lambda x, w, out, groups, sh, sw, dh, dw, pt, pl, epilogue: _im2col_gemm(
        x, w, out, groups, sh, sw, dh, dw, pt, pl, epilogue
    )


@jit(**_OPTS)
def _taps_gemm(x, w, out, groups, sh, sw, dh, dw, pt, pl):  # type: ignore[no-untyped-def]
    """The convolution as a GEMM that reads its taps in place: the input of each (image,
    group) is split into its zero-padded stride phases once, and B's row (channel, tap) is
    that tap's run in them (a table of where each starts), one segment per output row
    (`rvm.kernels.segments.gemm_segments`). No column matrix is built, but on maps whose rows
    leave many of the GEMM's lanes idle (`columns_pay`): there the taps are copied into one, its
    rows the map's positions end to end, and the same GEMM multiplies it."""
    n, c, ih, iw = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = out.shape[2], out.shape[3]
    if n * o * oh * ow == 0:
        return
    K, P, og = cg * kh * kw, oh * ow, o // groups
    hp, wp, hq, wq = phase_shape(oh, ow, kh, kw, sh, sw, dh, dw)
    size = sh * sw * hq * wq
    ph = np.empty(max(cg * size, 1), dtype=x.dtype)  # every element written by `fill_phases`
    starts = tap_starts(sh, sw, hq, wq, kh, kw, dh, dw)
    table = _tap_table(cg, size, starts)
    xf, wf, of = x.reshape(x.size), w.reshape(w.size), out.reshape(out.size)
    # The map a run per output row, or one run wrapping around its rows (`wraps_rows`), or its
    # taps copied into a column matrix first where that pays (`columns_pay`).
    columns = columns_pay(og, K, oh, ow, wq)
    col = np.empty((K, P) if columns else (0, 0), dtype=x.dtype)
    b, ldb, rows = ph, 0, table
    if columns:  # B's rows the column matrix's, P apart (one GEMM call either way)
        b, ldb, rows = col.reshape(col.size), P, np.empty(0, dtype=np.int64)
        runs, run, step, wrap = 1, P, 0, 0
    elif wraps_rows(oh, ow, wq):
        runs, run, step, wrap = 1, (oh - 1) * wq + ow, 0, wq
    else:
        runs, run, step, wrap = oh, ow, wq, 0
    for n_ in range(n):
        for g_ in range(groups):
            fill_phases(xf, ph, (n_ * c + g_ * cg) * ih * iw, cg, ih, iw, sh, sw, hq, wq, hp, wp,
                        pt, pl)  # fmt: skip
            if columns:
                _im2col_rows(ph, size, starts, col, cg, wq, ow, 0, oh)
            at_out = (n_ * o + g_ * og) * P
            gemm_segments(wf, g_ * og * K, K, b, ldb, rows, of, at_out, P, og, K, runs, run, step,
                          ow, 1, 1, 0, 0, 0, wrap, ow, sgemm.NO_EPILOGUE)  # fmt: skip


@jit(**_OPTS)
def wraps_rows(oh, ow, wq):  # type: ignore[no-untyped-def]
    """Whether `_taps_gemm` runs its ``oh`` output rows as one run of the phases' rows (``wq``
    positions apart, ``wq - ow`` of them between two output rows computed and not stored:
    `rvm.kernels.sgemm.sgemm_segments`) rather than a run per row, whose last vector leaves
    lanes idle: when that takes fewer vectors (55 x 55: 196 against 220, 100 GFLOP/s on a
    Zen 4 core against 95; 27 x 27: 49 against 54; 13 x 13: 13 either way)."""
    by_rows, wrapped = _taps_vectors(oh, ow, wq)
    return wrapped < by_rows


@jit(**_OPTS)
def _taps_vectors(oh, ow, wq):  # type: ignore[no-untyped-def]
    """The vectors of positions `_taps_gemm` takes a row of its product: a run per output row,
    and one run wrapping around the phases' rows, ``wq`` apart (`wraps_rows`)."""
    lanes = sgemm.LANES
    return oh * -(-ow // lanes), -(-((oh - 1) * wq + ow) // lanes)


@jit(**_OPTS)
def taps_fill(oh, ow, wq):  # type: ignore[no-untyped-def]
    """Whether `_taps_gemm` reads its taps in place (by rows or wrapped: `wraps_rows`) rather
    than copying them into a column matrix first, whose rows run the map's positions end to
    end: the former takes at most an eighth more vectors. 13 x 13 maps take 13 against 11 (on
    a Zen 4 core the copy ran squeezenet's 48- and 64-deep 3 x 3 layers 1.1 to 1.15 times as
    fast), 14 x 14 14 against 13 (the same speed either way), 27 x 27 49 against 46."""
    by_rows, wrapped = _taps_vectors(oh, ow, wq)
    return 8 * min(by_rows, wrapped) <= 9 * -(-(oh * ow) // sgemm.LANES)


@jit(**_OPTS)
def columns_pay(og, k, oh, ow, wq):  # type: ignore[no-untyped-def]
    """Whether `_taps_gemm` copies its ``k`` taps into a column matrix (``og`` output channels
    a group, ``oh`` x ``ow`` positions, phases' rows ``wq`` apart): where reading them in place
    takes over an eighth more vectors (`taps_fill`), the matrix stays in L2 while the GEMM's
    bands walk it (`sgemm.BLOCK_BYTES`), and the copy weighs little against the products, from
    12 vectors of output channels (its cost against theirs falls with the channels and grows
    with the vector width). On a Zen 4 core squeezenet's 13 x 13 layers, 192 and 256 channels,
    ran 1.08 and 1.14 times as fast this way; inception_v1's 48 and 64 took 1.1 and 1.04 times
    as long, alexnet's 26 x 26 5 x 5 one (128 channels a group, a 3.2 MB matrix) 1.05."""
    if og < 12 * sgemm.LANES or 4 * k * oh * ow > sgemm.BLOCK_BYTES:
        return False
    return not taps_fill(oh, ow, wq)


def _pointwise(x, w, out, groups, epilogue):  # type: ignore[no-untyped-def]
    """A 1x1, stride-1, unpadded convolution: for float32 one batched GEMM
    (`_pointwise_batched`, which applies the ``epilogue``), else one GEMM per (image, group)
    straight from the input to the output, (og, cg) weight rows times the group's (cg, h * w)
    input rows (``epilogue`` `sgemm.NO_EPILOGUE`). Jitted code only."""
    raise NotImplementedError("_pointwise is for jitted code")


@overload(_pointwise, jit_options=_OPTS)
def _pointwise_impl(x, w, out, groups, epilogue):  # type: ignore[no-untyped-def]
    if isinstance(x, nt.Array) and x.dtype == nt.float32:
        return lambda x, w, out, groups, epilogue: _pointwise_batched(x, w, out, groups, epilogue)

    def by_blas(x, w, out, groups, epilogue):  # type: ignore[no-untyped-def]
        n, c, ih, iw = x.shape
        o, cg = w.shape[0], w.shape[1]
        og, P = o // groups, ih * iw
        for n_ in range(n):
            for g_ in range(groups):
                at_x, at_out = (n_ * c + g_ * cg) * P, (n_ * o + g_ * og) * P
                gemm(w, g_ * og * cg, cg, x, at_x, P, out, at_out, P, og, P, cg, 0.0)

    return by_blas


@jit(**_OPTS)
def _pointwise_batched(x, w, out, groups, epilogue):  # type: ignore[no-untyped-def]
    """`_pointwise` for float32 as one batched GEMM over the (image, group) pairs, whose
    pieces the pool takes pair by pair when each product is small (shufflenet's groups), the
    ``epilogue`` (`gemm_segments`': the residual of ``out``'s layout) applied as it stores."""
    n, _, ih, iw = x.shape
    o, cg = w.shape[0], w.shape[1]
    og, P = o // groups, ih * iw
    none = np.empty(0, dtype=np.int64)
    wf, xf, of = w.reshape(w.size), x.reshape(x.size), out.reshape(out.size)
    gemm_segments(wf, 0, cg, xf, P, none, of, 0, P, og, cg, 1, P, 0, 0, n * groups, groups,
                  og * cg, cg * P, og * P, 0, 0, epilogue)  # fmt: skip


@jit(**_OPTS)
def _strided_pointwise(x, w, out, groups, sh, sw, epilogue):  # type: ignore[no-untyped-def]
    """A 1x1 unpadded convolution with strides: the input subsampled once (every sh-th row,
    every sw-th column; `_subsample`), then one GEMM per (image, group) as `_pointwise` (and
    its ``epilogue``)."""
    n, c = x.shape[0], x.shape[1]
    oh, ow = out.shape[2], out.shape[3]
    xs = empty((n, c, oh, ow), x.dtype)  # a kept block: from malloc, its pages faulted anew
    _subsample(x, xs, sh, sw)
    _pointwise(xs, w, out, groups, epilogue)


@jit(**_OPTS)
def _subsample(x, xs, sh, sw):  # type: ignore[no-untyped-def]
    """``xs`` = every sh-th row and sw-th column of ``x``'s planes (``xs``' shape), on the
    pool by ranges of planes when large (`parfor.chunks`). In the caller alone it was serial
    work while the other cores waited for the GEMM: resnet50's 256 channels of 56 x 56 to 28
    x 28, a third of the GEMM's time on one Zen 3 core (its pages faulted anew as well, the
    array from malloc)."""
    planes = x.shape[0] * x.shape[1]
    size = planes * xs.shape[2] * xs.shape[3]
    pieces = parfor.chunks(2 * size, planes)  # each element read and written
    job = np.empty(_SUBSAMPLE_JOB, dtype=np.int64)
    job[0], job[1], job[2], job[3] = _SUBSAMPLE_JOB, parfor.address(x), parfor.address(xs), planes
    job[4], job[5], job[6], job[7] = x.shape[2], x.shape[3], xs.shape[2], xs.shape[3]
    job[8], job[9], job[10] = sh, sw, pieces
    if pieces > 1:
        _run_subsample(x, pieces, job)
    else:
        _subsample_planes(x.reshape(x.size), xs.reshape(xs.size), job, 0, planes)


# A subsample's job (int64): its length, x's and xs' addresses, the planes, ih, iw, oh, ow, sh,
# sw, the pieces.
_SUBSAMPLE_JOB = 11


@jit(**_OPTS)
def _subsample_planes(xf, sf, job, p0, p1):  # type: ignore[no-untyped-def]
    """Planes [p0, p1) of `_subsample`'s job."""
    ih, iw, oh, ow, sh, sw = job[4], job[5], job[6], job[7], job[8], job[9]
    for plane in range(p0, p1):
        for p_ in range(oh):
            src, dst = U((plane * ih + p_ * sh) * iw), U((plane * oh + p_) * ow)
            if sw == 1:
                for q_ in range(U(ow)):
                    sf[dst + q_] = xf[src + q_]
            else:
                step = U(sw)
                for q_ in range(U(ow)):
                    sf[dst + q_] = xf[src + q_ * step]


def _subsample_task(piece, like, data):  # type: ignore[no-untyped-def]
    """Piece ``piece`` of `_subsample`'s job: an equal range of its planes."""
    job = parfor.job(data)
    planes = job[3]
    xf = parfor.array_at(job[1], (planes * job[4] * job[5],), like)
    sf = parfor.array_at(job[2], (planes * job[6] * job[7],), like)
    p0, p1 = parfor.piece_range(piece, job[10], planes, 1)
    _subsample_planes(xf, sf, job, p0, p1)


parfor.export_task("conv2d_subsample", _subsample_task)
_run_subsample = parfor.runner("conv2d_subsample")


# -- the methods, each a task built when first run (`rvm.kernels.parfor.caller`) ----------

# A method's job (int64): its length (26), x, w, out, the dims of x (4), of w (4), of out's
# plane (2), groups, sh, sw, dh, dw, pt, pl, the method (`method`; read by `_images_task`),
# the epilogue the GEMM applies (`sgemm.sgemm_segments`; all 0: none).
_JOB = 26
_EPILOGUE = 22


@jit(**_OPTS, inline="always")
def _job(x, w_at, out, cg, kh, kw, groups, sh, sw, dh, dw, pt, pl, how, epilogue):  # type: ignore[no-untyped-def]  # noqa: E501
    """The job (`_JOB` fields) of method ``how`` on ``x`` and ``out`` (4-d) by the weight at
    ``w_at`` (``out.shape[1]`` x ``cg`` x ``kh`` x ``kw`` as the methods view it; a transformed
    one, `TRANSFORMED`, is read by `_winograd_task` in its own layout), with ``epilogue``
    (`sgemm.sgemm_segments`'; `sgemm.NO_EPILOGUE`: none)."""
    n, c, ih, iw = x.shape
    o, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    bias, step, act, res = epilogue
    return np.array((_JOB, parfor.address(x), w_at, parfor.address(out), n, c, ih, iw,
                     o, cg, kh, kw, oh, ow, groups, sh, sw, dh, dw, pt, pl, how,
                     bias, step, act, res), dtype=np.int64)  # fmt: skip


@jit(**_OPTS, inline="always")
def _epilogue_of(biases, act, added):  # type: ignore[no-untyped-def]
    """The epilogue `sgemm.sgemm_segments` takes, (bias, its step, act, residual), from
    `epipass.operands`' bias (empty: none; one value: its step 0) and residual (empty: none)."""
    at_bias = parfor.address(biases) if biases.size else 0
    at_res = parfor.address(added) if added.size else 0
    return at_bias, 1 if biases.size > 1 else 0, act, at_res


@jit(**_OPTS, inline="always")
def _epilogue(job):  # type: ignore[no-untyped-def]
    """The epilogue of a method's job, as `sgemm.sgemm_segments` takes it."""
    at = _EPILOGUE
    return job[at], job[at + 1], job[at + 2], job[at + 3]


@jit(**_OPTS)
def _operands(data, like):  # type: ignore[no-untyped-def]
    """A method's arrays and its job, from a task's ``data``."""
    job = parfor.job(data)
    x = parfor.array_at(job[1], (job[4], job[5], job[6], job[7]), like)
    w = parfor.array_at(job[2], (job[8], job[9], job[10], job[11]), like)
    out = parfor.array_at(job[3], (job[4], job[8], job[12], job[13]), like)
    return x, w, out, job


def _pointwise_task(k, like, data):  # type: ignore[no-untyped-def]
    x, w, out, job = _operands(data, like)
    _pointwise(x, w, out, job[14], _epilogue(job))


def _strided_task(k, like, data):  # type: ignore[no-untyped-def]
    x, w, out, job = _operands(data, like)
    _strided_pointwise(x, w, out, job[14], job[15], job[16], _epilogue(job))


def _depthwise_method_task(k, like, data):  # type: ignore[no-untyped-def]
    x, w, out, job = _operands(data, like)
    depthwise(x, w, out, job[15], job[16], job[17], job[18], job[19], job[20])


def _taps_task(k, like, data):  # type: ignore[no-untyped-def]
    x, w, out, job = _operands(data, like)
    _taps_gemm(x, w, out, job[14], job[15], job[16], job[17], job[18], job[19], job[20])


def _channels_task(k, like, data):  # type: ignore[no-untyped-def]
    x, w, out, job = _operands(data, like)
    bias = parfor.array_at(job[_EPILOGUE], (out.shape[1] if job[_EPILOGUE] else 0,), like)
    direct.conv2d_oihw(x, w, out, job[15], job[16], job[17], job[18], job[19], job[20], bias,
                       job[_EPILOGUE + 2])  # fmt: skip


def _im2col_task(k, like, data):  # type: ignore[no-untyped-def]
    x, w, out, job = _operands(data, like)
    _im2col_method(x, w, out, job[14], job[15], job[16], job[17], job[18], job[19], job[20],
                   _epilogue(job))  # fmt: skip


def _winograd_task(k, like, data):  # type: ignore[no-untyped-def]
    """Winograd's method on an OIHW weight, transformed at the call, or (``job[21]``
    `TRANSFORMED`: `_winograd_entry`) on one transformed at build time, (16, o, c)."""
    x, w, out, job = _operands(data, like)
    if job[21] == TRANSFORMED:
        u = parfor.array_at(job[2], (winograd.POSITIONS, job[8], job[9]), like)
        winograd.conv2d_transformed(x, u, out, job[19], job[20], _epilogue(job))
    else:
        winograd.conv2d(x, w, out, job[19], job[20], _epilogue(job))


def _images_task(k, like, data):  # type: ignore[no-untyped-def]
    """Image ``k`` of a batch split by images (`by_images`): the job's method on it alone,
    in this thread (its own splits, nested in the pool's job, run here too)."""
    x, w, out, job = _operands(data, like)
    one = job.copy()
    one[1], one[3], one[4] = parfor.address(x[k]), parfor.address(out[k]), 1
    _dispatch(x, job[21], one)


for _name, _task in (
    ("conv2d_images", _images_task),
    ("conv2d_pointwise", _pointwise_task),
    ("conv2d_strided", _strided_task),
    ("conv2d_depthwise", _depthwise_method_task),
    ("conv2d_taps", _taps_task),
    ("conv2d_channels", _channels_task),
    ("conv2d_im2col", _im2col_task),
    ("conv2d_winograd", _winograd_task),
):
    parfor.export_task(_name, _task)
_call_pointwise = parfor.caller("conv2d_pointwise")
_call_strided = parfor.caller("conv2d_strided")
_call_depthwise = parfor.caller("conv2d_depthwise")
_call_taps = parfor.caller("conv2d_taps")
_call_channels = parfor.caller("conv2d_channels")
_call_im2col = parfor.caller("conv2d_im2col")
_call_winograd = parfor.caller("conv2d_winograd")
_run_images = parfor.runner("conv2d_images")


POINTWISE, STRIDED, DEPTHWISE, CHANNELS, TAPS, IM2COL, WINOGRAD = range(7)
"""The methods `method` picks; the library tasks each runs are `METHOD_TASKS`'."""
TRANSFORMED = 7
"""A job's method (``job[21]``) of Winograd's on a weight transformed at build time
(`_winograd_entry`)."""

METHOD_TASKS = (
    ("conv2d_pointwise", "gemm_segments", *sgemm.TASKS, *SHARED_TASKS),
    ("conv2d_strided", "conv2d_subsample", "gemm_segments", *sgemm.TASKS, *SHARED_TASKS),
    ("conv2d_depthwise", "conv2d"),
    ("conv2d_channels", *direct.FIRST_RUN_TASKS),
    ("conv2d_taps", *planes.TASKS, "gemm_segments", *sgemm.TASKS),
    ("conv2d_im2col", *planes.TASKS, "gemm", *sgemm.TASKS),
    winograd.FIRST_RUN_TASKS,
)
"""The library tasks (`rvm.kernels.parfor`) a convolution by each method runs on float32, the
method's own first (`first_run_tasks`); im2col into the GEMM's panels (`panels_pay`) runs
`PANEL_TASKS`."""
PANEL_TASKS = ("conv2d_im2col", *planes.TASKS, "gemm_segments", *sgemm.TASKS)


@jit(**_OPTS)
def method(c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow, ih, iw, unpadded, f32):  # type: ignore[no-untyped-def]  # noqa: E501
    """How `conv2d` computes a convolution of this shape (`POINTWISE`...; ``unpadded``: no
    padding; ``f32``: float32 operands): 1x1 unpadded convolutions are GEMMs on the operands
    (`_pointwise`, `_strided_pointwise` on the subsampled input); one input channel per
    group runs direct loops (`rvm.kernels.depthwise`); float32 3x3 ones at stride 1 where
    Winograd's fewer multiplies pay run `rvm.kernels.winograd` (`winograd_pays`); float32 ones
    where vectors of output
    channels pay the direct method (`channels_pay`), those with rows of `TAPS_MIN_WIDTH` or
    more and some depth read their taps in place (`_taps_gemm`) where that reads best
    (`TAPS_IN_PLACE`); the rest im2col (`_im2col_gemm`)."""
    cg = c // groups
    if kh == 1 and kw == 1 and unpadded:
        return POINTWISE if sh == 1 and sw == 1 else STRIDED
    if cg == 1:
        return DEPTHWISE
    if f32 and winograd_pays(c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow):
        return WINOGRAD
    if f32 and channels_pay(c, o, groups, kh, kw, sh, sw, oh, ow, ih, iw, False):
        return CHANNELS
    if TAPS_IN_PLACE and f32 and ow >= TAPS_MIN_WIDTH and cg * kh * kw > 0:
        return TAPS
    return IM2COL


def first_run_tasks(
    c: int, o: int, groups: int, kh: int, kw: int, sh: int, sw: int, oh: int, ow: int,
    ih: int, iw: int, unpadded: bool, dh: int = 1, dw: int = 1,
) -> tuple[str, ...]:  # fmt: skip
    """The library tasks a float32 convolution of this shape runs (`method`, `METHOD_TASKS`):
    what its first run builds, worth building beforehand (`rvm.kernels.parfor.prefetch`)."""
    how = method.py_func(c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow, ih, iw, unpadded, True)
    return PANEL_TASKS if how == IM2COL and panels_pay.py_func(ow) else METHOD_TASKS[how]


@jit(**_OPTS)
def _conv2d_blas(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr, epilogue):  # type: ignore[no-untyped-def]  # noqa: E501
    """`conv2d`'s work: -1 when the shapes disagree with the geometry (`_check`), else 1 when
    it applied the ``epilogue`` (`sgemm.sgemm_segments`' (bias, its step, act, residual), the
    residual of ``out``'s layout; `sgemm.NO_EPILOGUE`: none), 0 when the caller still has to
    (`fuses_epilogue`).

    The method by shape (`method`), each a task of its own built when first run (a model
    builds the methods its convolutions take).
    """
    if not _check(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr):
        return -1
    n, o, oh, ow = out.shape
    cg, kh, kw = w.shape[1], w.shape[2], w.shape[3]
    if n * o * oh * ow == 0:
        return 1
    unpadded = pt == 0 and pl == 0 and pb == 0 and pr == 0
    c, ih, iw = x.shape[1], x.shape[2], x.shape[3]
    how = method(c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow, ih, iw, unpadded, sgemm.applies(x))
    images = by_images(how, n, n * o * oh * ow * cg * kh * kw, parfor.threads())
    fused = fuses_epilogue(how, cg * kh * kw, images, epilogue) and sgemm.applies(x)
    job = _job(x, parfor.address(w), out, cg, kh, kw, groups, sh, sw, dh, dw, pt, pl, how,
               epilogue if fused else sgemm.NO_EPILOGUE)  # fmt: skip
    if images:
        _run_images(x, n, job)
    else:
        _dispatch(x, how, job)
    return 1 if fused else 0


@jit(**_OPTS, inline="always")
def fuses_epilogue(how, k, images, epilogue):  # type: ignore[no-untyped-def]
    """Whether a float32 convolution by method ``how`` (a depth of ``k`` a group; a batch split
    ``images`` by images: `by_images`) applies its ``epilogue`` (`sgemm.sgemm_segments`') with
    the convolution: in its GEMM's store (`sgemm.fuses`) for the 1x1 ones (one GEMM of the
    whole batch on the input's rows; strided: on the subsampled input) and im2col's (a GEMM a
    block of output rows, on the column matrix), where the GEMM can; in the direct method's
    tiles (`rvm.kernels.direct.conv2d_packed_fused`) a bias a channel and a ReLU, not a
    residual (the pass adds it before the ReLU); in Winograd's output transform
    (`rvm.kernels.winograd`) all of it."""
    if how == WINOGRAD:
        return True
    if how == CHANNELS:
        return epilogue[3] == 0 and (epilogue[0] == 0 or epilogue[1] == 1)
    gemm = how == POINTWISE or how == STRIDED or how == IM2COL
    # One run of B's rows, or (im2col into panels) runs end to end in C: the same to `fuses`.
    return gemm and not images and sgemm.fuses(1, 1, 1, 0, k)


@jit(**_OPTS)
def by_images(how, n, work, threads):  # type: ignore[no-untyped-def]
    """Whether a batch of ``n`` images (``work`` multiply-adds in all) by method ``how`` runs
    an image a piece on the pool, each image's method in one thread
    (`rvm.kernels.direct.images_pay`, the one rule). The 1x1 convolutions run one GEMM over
    the batch already (`_pointwise`), depthwise ones split their planes over the batch
    (`rvm.kernels.depthwise`) and the direct method and Winograd's split their batch themselves
    (the weight packed or transformed once)."""
    if how == POINTWISE or how == DEPTHWISE or how == CHANNELS or how == WINOGRAD:
        return False
    return direct.images_pay(n, work, threads)


@jit(**_OPTS, inline="always")
def _dispatch(x, how, job):  # type: ignore[no-untyped-def]
    """The convolution of ``job`` by method ``how``, in its task (`METHOD_TASKS`)."""
    if how == POINTWISE:
        _call_pointwise(x, 0, job)
    elif how == STRIDED:
        _call_strided(x, 0, job)
    elif how == DEPTHWISE:
        _call_depthwise(x, 0, job)
    elif how == CHANNELS:
        _call_channels(x, 0, job)
    elif how == TAPS:
        _call_taps(x, 0, job)
    elif how == WINOGRAD:
        _call_winograd(x, 0, job)
    else:
        _call_im2col(x, 0, job)


@jit(**_OPTS)
def channels_pay(c, o, groups, kh, kw, sh, sw, oh, ow, ih, iw, packed):  # type: ignore[no-untyped-def]
    """Whether a float32 convolution of this shape runs the direct method vectorized along
    output channels (`rvm.kernels.direct`) rather than this module's GEMMs: the one rule,
    `rvm.kernels.direct.prefers`, given the positions this module's GEMM would vectorize
    (an output row of `TAPS_MIN_WIDTH` or more, else the map; the whole map for a 1x1
    convolution, a GEMM on the map as it is: `_pointwise`). With the weight ``packed``
    at build time (`rvm.op.conv2d_packed`) any map size; else the weight is packed at each
    call, only on maps large enough that the copy costs little
    (`rvm.kernels.direct.PACK_MIN_POSITIONS`)."""
    if not packed and oh * ow < direct.PACK_MIN_POSITIONS:
        return False
    run = ow if ow >= TAPS_MIN_WIDTH and kh * kw > 1 else oh * ow
    return direct.prefers(c, o, groups, kh, kw, sh, sw, oh, ow, ih, iw, run)


@jit(**_OPTS)
def winograd_pays(c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow):  # type: ignore[no-untyped-def]
    """Whether a float32 convolution of this shape runs Winograd's F(2x2, 3x3)
    (`rvm.kernels.winograd`) rather than the GEMMs or the direct method: 3x3, stride 1,
    dilation 1, no groups, on maps of `WINOGRAD_MIN_TILES` tiles (2 x 2 output positions) or
    more, from `WINOGRAD_MIN_CHANNELS` vectors of the GEMM's (`rvm.kernels.sgemm.LANES`)
    input and output channels each and `WINOGRAD_MEAN_CHANNELS` vectors of their harmonic
    mean (`winograd_floors`: measured per vector width); on a map small enough that an
    image's transformed input and products at one of the 16 positions take at most half of
    one core's L2 (`WINOGRAD_SMALL_MAP`: every GEMM's operands stay there, and the
    image is one block, `rvm.kernels.winograd.block_rows`), from `WINOGRAD_SMALL_MEAN`
    vectors of the harmonic mean.

    The transforms move each input value a few times (``o`` multiply-adds each in the GEMMs)
    and each output value a few times (``c`` each), where the GEMMs go a vector at a time:
    their share of the time is about ``1 / c + 1 / o``, so the channels' floor is on the
    harmonic mean ``2 c o / (c + o)``, in vectors. A constant weight is transformed at build
    time (`rvm.op.conv2d_winograd`), and a small map's phases are cut apart for the pool's
    threads (`rvm.kernels.winograd.cut`). The measurements that set the floors are
    `winograd_floors`'."""
    if groups != 1 or kh != 3 or kw != 3 or sh != 1 or sw != 1 or dh != 1 or dw != 1:
        return False
    tiles = ((oh + 1) // 2) * ((ow + 1) // 2)
    floor = WINOGRAD_MIN_CHANNELS * sgemm.LANES
    if tiles < WINOGRAD_MIN_TILES or c < floor or o < floor:
        return False
    small = (c + o) * tiles <= WINOGRAD_SMALL_MAP
    mean = WINOGRAD_SMALL_MEAN if small else WINOGRAD_MEAN_CHANNELS
    return 2 * c * o >= mean * sgemm.LANES * (c + o)


WINOGRAD_MIN_TILES = 32
"""The tiles of a map from which `winograd_pays` (between 7 x 7 maps' 16, where it won or lost
by the layer, and 12 x 12 maps' 36, where it won): a measured floor, not one derived from the
machine (session 43 had 256 while the weight was transformed at each call and a small map's
pieces each transformed their input again). On a Zen 4 core 7 x 7 maps won from 160
channels at one thread (1.17-1.35) but 128 -> 32 lost (0.49); two threads' cut phases not
measured there (the machine too loaded)."""


def winograd_floors(vector_bits: int) -> tuple[int, int, int]:
    """(`WINOGRAD_MIN_CHANNELS`, `WINOGRAD_MEAN_CHANNELS`, `WINOGRAD_SMALL_MEAN`) for vectors
    of ``vector_bits``, in vectors: measured per vector width (`benchmarks/conv_methods.py`,
    one thread, thread CPU; the faster of the direct method and the GEMMs over Winograd's time
    on a weight transformed beforehand, every 3x3 stride-1 layer of the light models), as the
    transforms' share against the GEMMs' is not the same count of vectors on both.

    - 256 bits: 8 and 10 (64 channels each and a mean of 80), on a Zen 3 core (AVX2; session
      44, one and two threads, loaded): from 12 x 12 maps (36 tiles) with the mean from 96
      channels 1.04-1.78, but 160 -> 320 on 13 x 13 0.97; at a mean of 77 (64 -> 96, 48 ->
      192) 0.68-1.26, of 64 (64 -> 64) 0.79-1.34; 7 x 7 maps 0.76-1.52, 6 x 6 0.49-0.76.
    - 512 bits: 2 and 3 (32 channels each and a mean of 48), on a Zen 4 core (AVX-512 run as
      two 256-bit halves; session 45, loaded): from 36 tiles 1.06-1.78 from 32 channels each
      and a mean of 51 -- squeezenet's 32 -> 128 on 27 x 27 1.21-1.23, 48 -> 192 and 64 -> 256
      on 13 x 13 1.08-1.25; inception_v2's 28 x 28 layers 1.34-1.53, its 14 x 14 ones 1.06-1.44;
      resnet50's 64 -> 64 on 56 x 56 1.10, 128 -> 128 on 28 x 28 1.67; vgg19's 64 on 224 x 224
      1.22, 128 on 112 x 112 1.49; densenet121's 128 -> 32 on 56 x 56 1.34, 28 x 28 1.39, 14 x
      14 0.97; inception_v1's 1.17-1.61 -- but 16 -> 64 on 55 x 55 (one vector of input
      channels, a mean of 26) 0.56-0.66 and 3 -> 64 0.26. The floors of 8 and 10 vectors (128
      and 160 channels) had left all of these to the slower methods. Not measured on a core
      that runs 512 bits at once (Zen 5, Intel's), nor a Zen 3 re-measured at these floors.
    - Small maps (`WINOGRAD_SMALL_MAP`), 256 bits: a mean of 8 vectors, the channels' floor
      (session 46, Zen 3, load 8-10, thread CPU, alternated): 64 -> 96 and 64 -> 64 on 28 x 28
      (inception_v2's) took 0.72-0.80 and 0.77-0.85 of the packed direct method's time at one
      thread, 0.82 and 0.91 of its CPU in pieces at two (their phases cut apart); 64 -> 96 on
      14 x 14 a tie (0.97 at one thread, 1.05 in pieces at two, 0.89 of its best wall); but
      64 -> 64 on 56 x 56, where a position's operands take all of L2, 1.11 (the mean's floor
      stays). 512 bits: the mean's floor (3), not measured.
    """
    return (2, 3, 3) if vector_bits >= 512 else (8, 10, 8)


WINOGRAD_MIN_CHANNELS, WINOGRAD_MEAN_CHANNELS, WINOGRAD_SMALL_MEAN = winograd_floors(
    cpu().vector_bits
)
"""The input and output channels, in vectors, from which `winograd_pays`, each; their
harmonic mean, in vectors; and that mean on small maps (`WINOGRAD_SMALL_MAP`;
`winograd_floors`)."""
WINOGRAD_SMALL_MAP = winograd.L2_FLOATS // 2
"""The most floats of input and output channels times tiles (an image's transformed input and
products at one of the 16 positions) of a map `winograd_pays` takes from `WINOGRAD_SMALL_MEAN`
vectors of the channels' harmonic mean: half of one core's L2."""


# -- the compiled entry point (see `rvm.kernels.entry`) ------------------------------


def _entry(a, b, c, dims, params):  # type: ignore[no-untyped-def]
    """`_conv2d_blas` on x (a), w (b), out (c): 0 done, 1 the shapes disagree."""
    d, p = nb.carray(dims, 12), nb.carray(params, 9)
    x = nb.carray(a, (d[0], d[1], d[2], d[3]))
    w = nb.carray(b, (d[4], d[5], d[6], d[7]))
    out = nb.carray(c, (d[8], d[9], d[10], d[11]))
    done = _conv2d_blas(x, w, out, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8],
                        sgemm.NO_EPILOGUE)  # fmt: skip
    return 0 if done >= 0 else 1


def _fused_entry(a, b, c, bias, res, dims, params):  # type: ignore[no-untyped-def]
    """`_conv2d_blas` on x (a), w (b), out (c), then its epilogue (`rvm.kernels.epipass`:
    the bias viewed (1, c or 1, 1, 1), the residual of out's shape; ``params``: the
    convolution's nine, then the activation, whether there is a bias, whether a residual; an
    array absent is passed as out, unread), in the GEMM's store where it can
    (`fuses_epilogue`), else by the pass: 0 done, 1 the shapes disagree."""
    d, p = nb.carray(dims, 20), nb.carray(params, 12)
    x = nb.carray(a, (d[0], d[1], d[2], d[3]))
    w = nb.carray(b, (d[4], d[5], d[6], d[7]))
    out = nb.carray(c, (d[8], d[9], d[10], d[11]))
    act = p[9]
    ok, biases, added = epipass.operands(out, bias, d[12:16], res, d[16:20], act, p[10], p[11])
    if not ok:
        return 1
    done = _conv2d_blas(x, w, out, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8],
                        _epilogue_of(biases, act, added))  # fmt: skip
    if done < 0:
        return 1
    if done == 0:
        epipass.epilogue_rows(out, biases, act, added)
    return 0


def _winograd_entry(a, b, c, bias, res, dims, params):  # type: ignore[no-untyped-def]
    """Winograd's F(2x2, 3x3) on x (a) by a weight transformed at build time (b: `U`, (16, o,
    c), viewed (16, o, c, 1): `rvm.kernels.winograd.transform`, `rvm.op.conv2d_winograd`)
    into out (c), then its epilogue in the output transform (the bias viewed (1, o or 1, 1,
    1), the residual of out's shape; ``params``: the padding (top, left, bottom, right), the
    activation, whether there is a bias, whether a residual; an array absent is passed as
    out, unread): 0 done, 1 the shapes disagree. The call runs in the method's task
    (`_winograd_task`)."""
    d, p = nb.carray(dims, 20), nb.carray(params, 7)
    x = nb.carray(a, (d[0], d[1], d[2], d[3]))
    out = nb.carray(c, (d[8], d[9], d[10], d[11]))
    n, ch, ih, iw, o = d[0], d[1], d[2], d[3], d[5]
    pt, pl, pb, pr, act = p[0], p[1], p[2], p[3], p[4]
    if min(pt, pl, pb, pr) < 0 or d[4] != winograd.POSITIONS or d[6] != ch or d[7] != 1:
        return 1
    if d[8] != n or d[9] != o or d[10] != _out_size(ih, 3, 1, 1, pt, pb):
        return 1
    if d[11] != _out_size(iw, 3, 1, 1, pl, pr):
        return 1
    ok, biases, added = epipass.operands(out, bias, d[12:16], res, d[16:20], act, p[5], p[6])
    if not ok:
        return 1
    if out.size == 0:
        return 0
    job = _job(x, parfor.address(nb.carray(b, 1)), out, ch, 3, 3, 1, 1, 1, 1, 1, pt, pl,
               TRANSFORMED, _epilogue_of(biases, act, added))  # fmt: skip
    _call_winograd(x, 0, job)
    return 0


entry.export("conv2d", _entry)
entry.export("conv2d_fused", _fused_entry)
entry.export("conv2d_winograd", _winograd_entry)
# What kernels call (`rvm.kernels.entry.caller`): ``entry_call(arrays, params)``, 0 done.
entry_call = entry.caller("conv2d", 9)
conv2d_fused_call = entry.caller("conv2d_fused", 12)
conv2d_winograd_call = entry.caller("conv2d_winograd", 7)
"""Winograd's convolution by a weight transformed at build time and its epilogue
(`_winograd_entry`): ``conv2d_winograd_call((x, u, out, bias, res), (pt, pl, pb, pr, act,
with bias, with residual))``, ``u`` (16, o, c, 1)."""
"""A float32 convolution and its epilogue (`_fused_entry`): ``conv2d_fused_call((x, w, out,
bias, res), (groups, sh, sw, dh, dw, pt, pl, pb, pr, act, with bias, with residual))``."""


# For Python callers (kernels call `entry_call`). Not cached: compiling it types the call, which
# registers the entry point (`entry.require`); cached object code would be linked without it.
@nb.njit(nogil=True)
def conv2d(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr):  # type: ignore[no-untyped-def]
    """``out`` = the convolution of ``x`` by ``w`` (see the module docstring), by BLAS."""
    i = np.int64
    params = (i(groups), i(sh), i(sw), i(dh), i(dw), i(pt), i(pl), i(pb), i(pr))
    if entry_call((x, w, out), params) != 0:
        raise ValueError("conv2d: the operands' shapes do not match the geometry")


@jit(**_OPTS)
def conv2d_dot(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr):  # type: ignore[no-untyped-def]
    """`conv2d` by im2col and ``np.dot`` (where NumPy's BLAS is not reachable)."""
    if not _check(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr):
        raise ValueError("conv2d: the operands' shapes do not match the geometry")
    conv2d_dot_unchecked(x, w, out, groups, sh, sw, dh, dw, pt, pl, sgemm.NO_EPILOGUE)
