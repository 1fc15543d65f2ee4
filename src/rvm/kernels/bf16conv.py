"""bf16 convolution with float32 accumulation: NCHW, weights in channel pairs.

`conv2d(x, w, out, groups, sh, sw, dh, dw, pt, pl, kh, kw)`: float32 ``x`` (NCHW) by the
weight ``w`` converted once, at compile time (`rvm.transform.to_bf16`), into float32 ``out``.
``w`` is ``(out channels, kp)`` int16 bf16 bits in the GEMM's A layout (`rvm.kernels.bf16gemm`:
a row's 32-bit word ``p`` is a pair of bf16 values) with its depth in *channel pairs*: word
``p = (c2 * kh + dy) * kw + dx`` of output channel ``o`` holds the weights of input channels
``2 c2`` (low half) and ``2 c2 + 1`` (high half) of its group at tap ``(dy, dx)``, an odd
group's last high half 0 (`rvm.op.bf16.conv_pairs`).

Per image and group, the input is rounded (to nearest even) once into a zero-padded *pair
plane* ``(channels / 2, hp, wp)`` of 32-bit words, word ``(c2, y, x)`` the bf16 pair of
channels ``2 c2`` and ``2 c2 + 1`` at ``(y, x)`` (`_pair_plane`): exactly what ``vdpbf16ps``
takes as B, so each of the GEMM's pair rows ``p`` at an output position is the plane's word at
``taps[p]`` (`tap_table`) after the position's first tap. Then:

- stride 1 along the rows (`direct`): no im2col at all. The GEMM micro-kernel
  (`rvm.kernels.bf16gemm.micro`, its ``indexed`` mode) runs `MR` output channels by up to
  `NR` positions of one output row, B's pair row ``p`` read straight from the plane at
  ``taps[p]`` on: an output row is a run of plane words, so the lanes load unit-stride. Rows
  of the output are cut into blocks whose plane rows stay in L2 while every band of output
  channels walks them;
- otherwise (strided columns: the stems, resnet's downsampling): the im2col columns, gathered
  word by word from the plane into the GEMM's panels (`_pack_panels`), and the panel GEMM.

Large convolutions are cut into pieces on rvm's pool (`rvm.kernels.parfor`): the direct
method by (band of output channels, block of rows), the im2col method as its GEMM is. Every
entry point checks its arrays' shapes first and raises `ValueError` naming what disagrees.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels import parfor, workpool
from rvm.kernels.bf16 import gemm as _gemm
from rvm.kernels.bf16gemm import BLOCK_BYTES, KC2, LANES, MR, NR, micro, panels
from rvm.kernels.vectors import VectorIR

__all__ = ["conv2d", "direct", "tap_table"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
PACK_SPLIT_MIN = 1 << 18  # words a packing piece writes at least
SPLIT_MIN = 1 << 21  # multiply-adds (pairs) a direct piece keeps at least
PIECES_PER_THREAD = 4


@intrinsic
def _pair_words(typingctx, lo, hi, out, n, pair):  # type: ignore[no-untyped-def]
    """On int64 addresses: ``out[i]`` (uint32) = the bf16 bits of float32 ``lo[i]`` (low
    half) and, when ``pair``, of ``hi[i]`` (high half; else 0), for i < ``n``: a vector of
    `LANES` a step, the last under a lane mask."""
    sig = nt.void(*(nt.int64,) * 5)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        lo, hi, out, n, pair = args
        v = VectorIR(builder, LANES)
        i64 = ir.IntType(64)
        with_hi = builder.icmp_signed("!=", pair, i64(0))
        steps = builder.sdiv(builder.add(n, i64(LANES - 1)), i64(LANES))
        with cgutils.for_range(builder, steps) as loop:
            at = builder.mul(loop.index, i64(LANES))
            mask = v.first(builder.sub(n, at))
            offset = builder.mul(at, i64(4))
            word = v.bf16_bits(v.load(builder.add(lo, offset), v.f32, mask))
            high = v.bf16_bits(v.load(builder.add(hi, offset), v.f32, mask))
            high = builder.select(with_hi, builder.shl(high, v.constant(16)), v.constant(0))
            v.store(builder.or_(word, high), builder.add(out, offset), mask)
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(**_OPTS)
def _plane_part(job, plane, c2a, c2b):  # type: ignore[no-untyped-def]
    """Pair planes [c2a, c2b) of a plane job (`_PLANE_JOB`): each one's padding zeroed, its
    rows rounded from the image's channel pair, a vector loop a row (`_pair_words`)."""
    at_x, cg, h, wd, at_p = job[1], job[2], job[3], job[4], job[5]
    hp, wp, pt, pl = job[6], job[7], job[8], job[9]
    for c2 in range(c2a, c2b):
        plane[c2, :pt] = 0  # the padding: rows above and below, columns left and right
        plane[c2, pt + h :] = 0
        plane[c2, pt : pt + h, :pl] = 0
        plane[c2, pt : pt + h, pl + wd :] = 0
        pair = 1 if 2 * c2 + 1 < cg else 0
        lo = at_x + 4 * 2 * c2 * h * wd
        for y in range(h):
            src = lo + 4 * y * wd
            dst = at_p + 4 * ((c2 * hp + pt + y) * wp + pl)
            _pair_words(src, src + 4 * h * wd * pair, dst, wd, pair)


# A plane job (int64): its length; the group's first channel's address, the group's channels,
# the image's height and width; the plane's address, height and width; the padding top and
# left; the pair planes a piece.
_PLANE_JOB = 11


def _plane_task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a pair plane: ``step`` of its channel pairs (a pool task)."""
    job = parfor.job(data)
    cg2, step = (job[2] + 1) // 2, job[10]
    plane = parfor.array_at(job[5], (cg2, job[6], job[7]), like).view(np.uint32)
    _plane_part(job, plane, p * step, min(cg2, (p + 1) * step))


parfor.export_task("bf16_plane", _plane_task)
_run_plane = parfor.runner("bf16_plane")


@nb.njit(**_OPTS)
def _pair_plane(x, c0, cg, pt, pl, plane):  # type: ignore[no-untyped-def]
    """``plane[c2, pt + y, pl + i]`` (uint32) = the bf16 pair of ``x[c0 + 2 c2, y, i]`` (low)
    and ``x[c0 + 2 c2 + 1, y, i]`` (high; 0 past ``cg`` channels), ``x`` float32 CHW; the
    plane's border (the padding) 0. Cut by channel pairs into pieces on the pool when large."""
    h, wd = x.shape[1], x.shape[2]
    cg2, hp, wp = plane.shape[0], plane.shape[1], plane.shape[2]
    job = np.empty(_PLANE_JOB, dtype=np.int64)
    job[0], job[1], job[2], job[3], job[4] = _PLANE_JOB, x.ctypes.data + 4 * c0 * h * wd, cg, h, wd
    job[5], job[6], job[7], job[8], job[9] = plane.ctypes.data, hp, wp, pt, pl
    threads = parfor.threads()
    parts = 1
    if threads > 1 and not workpool.busy():
        parts = min(PIECES_PER_THREAD * threads, cg2, plane.size // PACK_SPLIT_MIN)
    if parts <= 1:
        _plane_part(job, plane, 0, cg2)
        return
    step = -(-cg2 // parts)
    job[10] = step
    _run_plane(x, -(-cg2 // step), job)


@nb.njit(**_OPTS)
def tap_table(cg2, kh, kw, dh, dw, hp, wp):  # type: ignore[no-untyped-def]
    """``table[p]`` (int64): the plane word of the GEMM's pair row ``p = (c2 * kh + dy) * kw +
    dx`` relative to an output position's first tap, in a pair plane ``(cg2, hp, wp)``."""
    table = np.empty(cg2 * kh * kw, dtype=np.int64)
    for c2 in range(cg2):
        for dy in range(kh):
            for dx in range(kw):
                table[(c2 * kh + dy) * kw + dx] = c2 * hp * wp + dy * dh * wp + dx * dw
    return table


# -- stride 1: the direct method ------------------------------------------------------------


@nb.njit(**_OPTS)
def _direct(job, co0, co1, y0, y1):  # type: ignore[no-untyped-def]
    """Output channels [co0, co1) by output rows [y0, y1) of a job (`_DIRECT_JOB`), on the
    plane's rows: position ``(y, x)`` is the plane word ``y * wp + x`` (stride 1), so the
    rows [y0, y1) are one run of ``(y1 - y0) * wp`` positions (the last ``wp - ow`` of each
    row computed and dropped). Blocks of rows whose plane rows fit in L2, each depth block,
    each band of `MR` channels, tile after tile of `NR` positions of the run."""
    a, lda, plane, table, k2 = job[1], job[2], job[3], job[4], job[5]
    c, ldc, wp, rows_block = job[6], job[7], job[8], job[9]
    for yb in range(y0, y1, rows_block):
        run = (min(y1, yb + rows_block) - yb) * wp
        b_run, c_run = plane + 4 * yb * wp, c + 4 * yb * wp
        for p0 in range(0, k2, KC2):
            kc2 = min(KC2, k2 - p0)
            add = 1 if p0 > 0 else 0
            for i0 in range(co0, co1, MR):
                rows = min(MR, co1 - i0)
                a_band, c_band = a + 4 * (i0 * lda + p0), c_run + 4 * i0 * ldc
                for x0 in range(0, run, NR):
                    cols = min(NR, run - x0)
                    vectors = (cols + LANES - 1) // LANES
                    last = cols - (vectors - 1) * LANES
                    micro(kc2, a_band, lda, b_run + 4 * x0, table + 8 * p0, 1, c_band + 4 * x0,
                          ldc, add, rows, vectors, last)  # fmt: skip


# A direct job (int64): its length; the group's weight rows' address, their words (lda); the
# plane's and the tap table's addresses, the pairs (k2); the result's address (the group's
# first channel, rows of the plane's width) and its channels' stride (ldc); the plane's width,
# rows a block; channels, rows; channels and rows a piece, pieces along rows.
_DIRECT_JOB = 15


def _direct_task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a direct convolution: a range of channels by a range of rows."""
    job = parfor.job(data)
    co, oh, step_c, step_y, along_y = job[10], job[11], job[12], job[13], job[14]
    c0, y0 = (p // along_y) * step_c, (p % along_y) * step_y
    _direct(job, c0, min(co, c0 + step_c), y0, min(oh, y0 + step_y))


parfor.export_task("bf16_conv_direct", _direct_task)
_run_direct = parfor.runner("bf16_conv_direct")


@nb.njit(**_OPTS)
def direct(like, job, og, oh, k2):  # type: ignore[no-untyped-def]
    """Runs a direct job (its first 10 fields set) on all ``og`` channels and ``oh`` rows, in
    pieces on the pool when large; ``like`` a float32 array (the task's dtype)."""
    threads = parfor.threads()
    parts = 1
    if threads > 1 and not workpool.busy():
        parts = min(PIECES_PER_THREAD * threads, (og * oh * job[8] * k2) // SPLIT_MIN)
    bands = (og + MR - 1) // MR
    # a plane larger than L2 is cut along rows first (each piece's rows stay there while
    # every band of channels walks them), a small one along channels first
    rows_first = job[9] < oh
    along_c = 1 if rows_first else min(bands, max(1, parts))
    step_c = -(-bands // along_c) * MR
    along_c = -(-og // step_c)
    step_y = -(-oh // min(oh, max(1, -(-parts // along_c))))
    along_y = -(-oh // step_y)
    if rows_first and along_y < parts:  # too few rows: the rest along channels
        step_c = -(-bands // min(bands, -(-parts // along_y))) * MR
        along_c = -(-og // step_c)
    job[10], job[11], job[12], job[13], job[14] = og, oh, step_c, step_y, along_y
    if along_c * along_y <= 1:
        _direct(job, 0, og, 0, oh)
    else:
        _run_direct(like, along_c * along_y, job)


@nb.njit(**_OPTS)
def _direct_image(xc, w, oc, b, groups, pt, pl, plane, table, wide):  # type: ignore[no-untyped-def]  # noqa: E501
    """Image ``b`` by the direct method: per group its pair plane, the job, and the rows of
    the plane's width (in ``wide``, ``(og, oh * wp)`` float32) compacted into ``oc``; with
    ``wide`` empty the plane is as wide as the output and the job writes ``oc`` itself."""
    c, co, kp = xc.shape[1], w.shape[0], w.shape[1]
    oh, ow, hp, wp = oc.shape[2], oc.shape[3], plane.shape[1], plane.shape[2]
    cg, og, k2 = c // groups, co // groups, kp // 2
    rows_block = max(1, BLOCK_BYTES // (4 * plane.shape[0] * wp) - hp + oh)
    job = np.empty(_DIRECT_JOB, dtype=np.int64)
    job[0], job[2], job[3], job[4], job[5] = _DIRECT_JOB, k2, plane.ctypes.data, 0, k2
    job[4], job[8], job[9] = table.ctypes.data, wp, rows_block
    for g in range(groups):
        _pair_plane(xc[b], g * cg, cg, pt, pl, plane)
        job[1] = w.ctypes.data + 2 * g * og * kp
        if wide.size == 0:
            job[6], job[7] = oc.ctypes.data + 4 * (b * co + g * og) * oh * ow, oh * ow
        else:
            job[6], job[7] = wide.ctypes.data, oh * wp
        direct(oc, job, og, oh, k2)
        if wide.size:
            out = oc[b, g * og : (g + 1) * og]
            for o in range(og):
                for y in range(oh):
                    out[o, y, :] = wide[o, y * wp : y * wp + ow]


# -- strided columns: im2col from the pair plane ---------------------------------------------


@nb.njit(**_OPTS)
def _pack_panels(plane, table, sh, sw, oh, ow, out, jp0, jp1):  # type: ignore[no-untyped-def]
    """Panels ``jp0`` to ``jp1`` of the im2col columns of the pair plane ``plane`` (uint32,
    ``(cg2, hp, wp)``) as the GEMM's B: word ``(p, y * ow + x)`` (`rvm.kernels.bf16gemm.
    panel_index`) is the plane's word ``table[p]`` after position ``(y, x)``'s first tap."""
    wp = plane.shape[2]
    flat = plane.reshape(plane.size)
    pixels = oh * ow
    k2 = out.shape[1]
    at = np.empty(NR, dtype=np.int64)
    for jp in range(jp0, jp1):
        j0 = jp * NR
        width = min(NR, pixels - j0)
        panel = out[jp]
        if width < NR:
            panel[:, width:] = 0
        for lane in range(width):
            y, x = (j0 + lane) // ow, (j0 + lane) % ow
            at[lane] = y * sh * wp + x * sw
        for p in range(k2):
            row, tap = panel[p], table[p]
            for lane in range(width):
                row[lane] = flat[tap + at[lane]]


# A packing job (int64): its length; the plane's address, pairs, height, width; the table's
# address, its pairs; sh, sw, oh, ow; the panels' address; panels per piece.
_PACK_JOB = 13


def _pack_task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a split im2col packing: ``step`` panels (a pool task)."""
    job = parfor.job(data)
    oh, ow, k2, step = job[9], job[10], job[6], job[12]
    plane = parfor.array_at(job[1], (job[2], job[3], job[4]), like).view(np.uint32)
    table = parfor.array_at(job[5], (2 * k2,), like).view(np.int64)
    count = (oh * ow + NR - 1) // NR
    out = parfor.array_at(job[11], (count, k2, NR), like).view(np.uint32)
    _pack_panels(plane, table, job[7], job[8], oh, ow, out, p * step, min(count, (p + 1) * step))


parfor.export_task("bf16_pack", _pack_task)
_run_pack = parfor.runner("bf16_pack")


@nb.njit(**_OPTS)
def _pack_columns(plane, table, sh, sw, oh, ow, out):  # type: ignore[no-untyped-def]
    """`_pack_panels` of every panel, cut into pieces on the pool when large."""
    count = out.shape[0]
    threads = parfor.threads()
    parts = 1
    if threads > 1 and not workpool.busy():
        parts = min(PIECES_PER_THREAD * threads, count, out.size // PACK_SPLIT_MIN)
    if parts <= 1:
        _pack_panels(plane, table, sh, sw, oh, ow, out, 0, count)
        return
    step = -(-count // parts)
    job = np.empty(_PACK_JOB, dtype=np.int64)
    job[0], job[1], job[2], job[3] = _PACK_JOB, plane.ctypes.data, plane.shape[0], plane.shape[1]
    job[4], job[5], job[6], job[7], job[8] = plane.shape[2], table.ctypes.data, table.size, sh, sw
    job[9], job[10], job[11], job[12] = oh, ow, out.ctypes.data, step
    _run_pack(out.view(np.float32), -(-count // step), job)


# -- the entry point --------------------------------------------------------------------------


@nb.njit(**_OPTS)
def _check(x, w, out, groups, kh, kw):  # type: ignore[no-untyped-def]
    n, c = x.shape[0], x.shape[1]
    co = w.shape[0]
    if groups < 1 or c % groups or co % groups:
        raise ValueError("bf16 conv2d: the channels do not divide into the groups")
    cg = c // groups
    if w.shape[1] != (cg + (cg & 1)) * kh * kw:
        raise ValueError("bf16 conv2d: the weight's depth is not channel pairs x kernel")
    if out.shape[0] != n or out.shape[1] != co:
        raise ValueError("bf16 conv2d: the output's batch or channels disagree")


@nb.njit(**_OPTS)
def conv2d(x, w, out, groups, sh, sw, dh, dw, pt, pl, kh, kw):  # type: ignore[no-untyped-def]
    """NCHW convolution of float32 ``x`` with the bf16 weight ``w`` (int16 bits, ``(out
    channels, kp)`` in channel pairs: `rvm.op.bf16.conv_pairs`) into float32 ``out``; padding
    top ``pt``, left ``pl`` (the output's size says the rest): the direct method at stride 1,
    the im2col GEMM otherwise."""
    _check(x, w, out, groups, kh, kw)
    n, c = x.shape[0], x.shape[1]
    co, kp = w.shape
    oh, ow = out.shape[2], out.shape[3]
    cg, og, pixels = c // groups, co // groups, oh * ow
    if n == 0 or co == 0 or pixels == 0:
        return
    xc = np.ascontiguousarray(x)
    wc = np.ascontiguousarray(w)
    oc = np.ascontiguousarray(out)
    k2, cg2 = kp // 2, (cg + 1) // 2
    # the padded plane holds every tap: (oh - 1) * sh + (kh - 1) * dh + 1 rows at least, and
    # one more for the direct method's positions past a row's end (their taps run on)
    hp = max(x.shape[2] + pt, (oh - 1) * sh + (kh - 1) * dh + 1) + 1
    wp = max(x.shape[3] + pl, (ow - 1) * sw + (kw - 1) * dw + 1)
    plane = np.empty((cg2, hp, wp), dtype=np.uint32)
    table = tap_table(cg2, kh, kw, dh, dw, hp, wp)
    if sh == 1 and sw == 1:
        wide = np.empty((og if wp > ow else 0, oh * wp), dtype=np.float32)
        for b in range(n):
            _direct_image(xc, wc, oc, b, groups, pt, pl, plane, table, wide)
    else:
        packed = np.empty((panels(pixels), k2, NR), dtype=np.uint32)
        at_w, at_o = wc.ctypes.data, oc.ctypes.data
        for b in range(n):
            for g in range(groups):
                _pair_plane(xc[b], g * cg, cg, pt, pl, plane)
                _pack_columns(plane, table, sh, sw, oh, ow, packed)
                a = at_w + 2 * g * og * kp
                cc = at_o + 4 * (b * co + g * og) * pixels
                _gemm(oc, a, k2, packed.ctypes.data, cc, pixels, og, pixels, k2)
    if oc.ctypes.data != out.ctypes.data:
        out[...] = oc
