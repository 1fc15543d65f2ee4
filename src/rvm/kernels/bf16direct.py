"""The direct method of the bf16 convolutions on AMX and vectors: a job on a pair plane
(`rvm.kernels.bf16conv` builds them), cut into pieces on the pool (`direct`), each piece a run
of the plane's rows walked by the GEMM's walk (`rvm.kernels.bf16gemm.walk`), AMX's
(`rvm.kernels.amx.walk`) or AMX's turned around (`rvm.kernels.amxconv.walk`), its blocks
put where they go with their epilogue (`_direct`). What one group of one image runs
(`direct_group`)."""

from __future__ import annotations

import numpy as np

from rvm.kernels import amx, amxconv, parfor, workpool
from rvm.kernels.bf16gemm import (
    MR,
    NR,
    PIECES_PER_THREAD,
    conv_pieces,
    piece_grid,
    walk,
    walk_out,
)
from rvm.kernels.bf16planes import pad_pairs, pad_positions, plane_dims, read_rows, rows_to_pairs
from rvm.kernels.epilogue import tile_rows
from rvm.kernels.gemmshape import BLOCK_BYTES, LINE
from rvm.kernels.jitting import alive, jit
from rvm.kernels.microkernel import floats_at
from rvm.kernels.planes import copy

__all__ = ["READ_AHEAD_ROW", "direct", "direct_group", "vectors_out", "walks_out"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
# Plane rows (words) past which a block's new rows are read ahead of its first band
# (`read_rows`), measured on Zen 4 (one thread, the GEMM's walk over a 3.3 MB plane alone):
# up to 161 words (644 bytes) the hardware's prefetchers kept that band fed (213-220 GF/s),
# from 169 to 177 words on they did not (187-196); on narrower rows the read pass only cost
# (1-4 %: resnet50's 1 x 1s at 56 x 56, vgg19's 3 x 3s at 112 x 112).
READ_AHEAD_ROW = 10 * LINE


@jit(inline="always", **_OPTS)
def _direct(job, co0, co1, y0, y1):  # type: ignore[no-untyped-def]
    """Output channels [co0, co1) by output rows [y0, y1) of a job (`_DIRECT_JOB`), on the
    plane's rows: position ``(y, x)`` is the plane word ``y * wp + x`` (stride 1), so the
    rows [y0, y1) are one run of ``(y1 - y0) * wp`` positions (the last ``wp - ow`` of each
    row computed and dropped). Blocks of rows whose plane rows fit in L2, each walked as the
    GEMM walks C (`rvm.kernels.bf16gemm.walk`: B's pair rows through the tap table), the
    band's bias, residual and activation (``job[18]``, ``job[20]``, ``job[19]``) applied to
    its rows of the block right after its last depth block, while they are in cache; then,
    when the rows are wider than the output's, the block's rows compacted into the output
    (`_compact`, which adds the residual and applies the activation there, the residual being
    laid out as the output) while they are in cache, on this thread. On AMX (`walks_out`)
    the walk itself puts each 32 x 32 block of sums where it goes, from L1, with its
    epilogue (`amx.BLOCK_OUT`): into a pair plane out, with a pair plane's residual, or into
    the output's rows from wider ones; the 7 x 7 stem of resnet50 (3 -> 64, stride 2) took
    0.70-0.74x its time, inception_v2's 64 -> 192 3 x 3 on 56 x 56 0.81x, without the float32
    buffer of wide rows (two threads). On vectors the walk puts each tile out so where
    `vectors_out` (`rvm.kernels.bf16gemm.walk_out`). A plane larger than a block
    (``job[26]`` its planes, ``job[27]`` their rows; 0: none, or rows no wider than
    `READ_AHEAD_ROW`) comes from beyond L2: each block's plane rows the previous one did not
    read are read first (`read_rows`)."""
    a, lda, plane, table, k2 = job[1], job[2], job[3], job[4], job[5]
    c, ldc, wp, rows_block = job[6], job[7], job[8], job[9]
    bias, act, res, wide = job[18], job[19], job[20], job[15] != 0
    late = wide and res != 0  # the residual, then the activation, in `_compact`
    # a pair plane out: on AMX the walk rounds each 32 x 32 block of sums into it from L1
    # (`amx.BLOCK_OUT`), as it adds a pair plane's residual and drops wide rows' extra
    # positions, the vector walk each tile where `vectors_out`; else each block of rows'
    # float32 sums go to one small buffer and are rounded out of it while in cache
    # (`rows_to_pairs`), never written back to memory
    planed = job[21] != 0
    # a plane of positions in (its channel pairs; 0: a pair plane) and out (its channel pairs;
    # 0: none), walked by the walk turned around only (`amxconv`; `conv2d` sees to it)
    across, lines = job[35], job[36]
    in_walk = walks_out(act, res != 0, planed or job[28] >= 2 or wp > job[16] or across > 0)
    vector_out = vectors_out(planed, wp > job[16], act, res != 0)
    in_walk = in_walk or vector_out
    rows = np.empty((co1 - co0 if planed and not in_walk else 0, rows_block * wp), np.float32)
    out = np.empty(amx.BLOCK_OUT, np.int64)
    out[0], out[4], out[5] = (amx.POSITIONS if lines else 0) if planed else 1, wp, job[16]
    # a pair plane's words between its channel pairs, a plane of positions' between positions
    out[2], out[3] = (lines or job[24] * job[25], job[25]) if planed else (job[17], job[16])
    out[6], out[8], out[9] = job[28] if res != 0 else 0, job[29], job[30]
    ld_rows = rows.shape[1]
    at_rows = np.int64(rows.ctypes.data) - 4 * co0 * ld_rows  # as channel 0's (int64, not uintp)
    for yb in range(y0, y1, rows_block):
        ye = min(y1, yb + rows_block)
        run = (ye - yb) * wp
        if job[26] != 0:
            reach = job[27] - job[11]  # the plane rows past a block's last output row
            first = yb + reach if yb > y0 else yb
            read_rows(plane, job[26], job[27] * wp, first * wp, min(job[27], ye + reach) * wp)
        b_run, c_run = plane + 4 * yb * wp * max(1, across), c + 4 * yb * wp
        if planed:
            c_run, ldc = at_rows, ld_rows
        r_run = 0 if (late or res == 0) else res + 4 * yb * wp
        if in_walk:
            if planed and lines:
                pad_positions(job[21:26], lines, job[11], job[16], co0, co1, yb, ye)
                out[1] = job[21] + 4 * ((job[22] + yb) * job[25] + job[23]) * lines
            elif planed:
                pad_pairs(job[21:26], job[10], job[11], job[16], co0, co1, yb, ye)
                out[1] = job[21] + 4 * ((job[22] + yb) * job[25] + job[23])
            else:
                out[1] = job[31] + 4 * yb * job[16]
            lined = job[29] if job[28] == amx.POSITIONS else 1  # words a position
            out[7] = res + 4 * (yb * job[30] * lined + (job[32] if job[28] >= 2 else 0))
            if vector_out:
                walk_out(a, lda, co0, co1, b_run, table, run, k2, bias, act, out.ctypes.data)
            elif job[33] > 0:  # turned around: the positions as A's rows
                amxconv.walk(a, co0, co1, b_run, table, job[33], k2, job[34], run, bias, act,
                             out.ctypes.data, across, (job[27] - yb) * wp)  # fmt: skip
            else:
                amx.walk(a, lda, co0, co1, b_run, 4, NR, table, 1, c_run, ldc, run, k2, 0, bias,
                         act, 0, 0, out.ctypes.data)  # fmt: skip
            continue
        walk(a, lda, co0, co1, b_run, 4, 0, table, 8, 1, c_run, ldc, run, k2, 0, bias,
             0 if late else act, r_run)  # fmt: skip
        if planed:
            rows_to_pairs(job[21:26], at_rows, ld_rows, job[8], job[10], job[11], job[16],
                          co0, co1, yb, ye)  # fmt: skip
        elif wide:
            _compact(job, co0, co1, yb, ye)
    alive(rows)  # written and read through their addresses only
    alive(out)


@jit(inline="always", **_OPTS)
def walks_out(act, residual, needed=True):  # type: ignore[no-untyped-def]
    """Whether the direct method's walk puts its blocks where they go itself, from L1
    (`amx.BLOCK_OUT`), where ``needed``: a pair plane out, a pair plane's residual, rows
    wider than the output's (else summed into a float32 buffer of wide rows, 3.3 MB for a 7
    x 7 stem, then compacted). On AMX, with at most a ReLU after a residual."""
    return needed and amx.AMX and (not residual or act <= 1)


@jit(inline="always", **_OPTS)
def vectors_out(planed, wide, act, residual):  # type: ignore[no-untyped-def]
    """Whether the direct method's vector walk (no AMX) puts its tiles where they go itself,
    from L1 (`rvm.kernels.bf16gemm.walk_out`): into the next convolution's pair plane
    (``planed``) from rows no wider than the output's, or into a float32 output from
    ``wide`` rows, with at most a ReLU after a ``residual`` (as `walks_out`). Else the walk
    writes C's rows and a pass of their own rounds them into the plane (`rows_to_pairs`) or
    copies them out of the wide rows (`_compact`; a stem's 3.3 MB buffer). Each way measured
    on a Zen 4, two threads, bf16 models, the two ways in turns in one process, outputs bit
    for bit the same: squeezenet's 1 x 1s into pair planes took 0.78-0.82 of their time (its
    squeezes from 128 to 512 channels 0.90-0.98), inception_v1's 7 x 7 stem 0.87; but its 3
    x 3s into pair planes from wider rows 1.01-1.05 (cut at the rows' ends, a tile's sums go
    out in short runs, where `rows_to_pairs` rounds whole rows), and float32 outputs from
    rows as wide (resnet50's 1 x 1s) 1.14-1.16 (the walk stores C there straight from its
    registers; the tiles would go through L1 and back)."""
    return not amx.AMX and planed != wide and (not residual or act <= 1)


@jit(**_OPTS)
def _compact(job, co0, co1, y0, y1):  # type: ignore[no-untyped-def]
    """Rows [y0, y1) of channels [co0, co1) from the wide rows (``wp`` positions a row, at
    ``job[6]``, channels ``job[7]`` apart) into the output (``job[16]`` positions a row, at
    ``job[15]``, channels ``job[17]`` apart); with a residual (at ``job[20]``, laid out as the
    output), ``act(rows + R)`` (the activation ``job[19]``)."""
    src, dst = floats_at(job[6]), floats_at(job[15])
    ldc, wp, ow, ohw, res = job[7], job[8], job[16], job[17], job[20]
    for o in range(co0, co1):
        for y in range(y0, y1):
            s, d = o * ldc + y * wp, o * ohw + y * ow
            for x in range(ow):
                dst[d + x] = src[s + x]
    if res != 0:
        at = 4 * (co0 * ohw + y0 * ow)
        tile_rows(job[15] + at, ohw, co1 - co0, (y1 - y0) * ow, 0, job[19], res + at)


# A direct job (int64): its length; the group's weight rows' address, their words (lda); the
# plane's and the tap table's addresses, the pairs (k2); the result's address (the group's
# first channel, rows of the plane's width) and its channels' stride (ldc); the plane's width,
# rows a block; channels, rows; channels and rows a piece, pieces along rows; when the result
# is wide rows, the output's address (its group's first channel; else 0), width and channels'
# stride; the bias's address (its group's first channel; 0: none), the activation's index;
# the residual's address (as the output's; 0: none); the next convolution's pair plane's
# address (0: none), its padding top and left, its height and width (`rows_to_pairs`); the
# plane's planes when its rows are read ahead (`read_rows`; 0: not) and their rows; the
# residual's kind (`amx.BLOCK_OUT`: 1 float32 as the output, 2 a pair plane, its address then
# the image's channel pair's), its channels' stride and its rows' width (a pair plane's:
# words); the output image's address (its group's first channel); a pair plane residual's
# words before its image's first; the taps of the walk turned around (`amxconv`; 0: not), and
# the words between the plane's channel pairs; the channel pairs of a plane of positions in
# (0: a pair plane) and of one out (0: none).
_DIRECT_JOB = 37


def _direct_task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a direct convolution: a range of channels by a range of rows."""
    job = parfor.job(data)
    co, oh, step_c, step_y, along_y = job[10], job[11], job[12], job[13], job[14]
    c0, y0 = (p // along_y) * step_c, (p % along_y) * step_y
    _direct(job, c0, min(co, c0 + step_c), y0, min(oh, y0 + step_y))


parfor.export_task("bf16_conv_direct", _direct_task)
_run_direct = parfor.runner("bf16_conv_direct")


@jit(**_OPTS)
def direct(like, job, og, oh, k2):  # type: ignore[no-untyped-def]
    """Runs a direct job (its first 10 fields set) on all ``og`` channels and ``oh`` rows, in
    pieces on the pool when large; ``like`` a float32 array (the task's dtype)."""
    threads = parfor.threads()
    parts = 1
    if threads > 1 and not workpool.busy():
        parts = min(PIECES_PER_THREAD * threads, conv_pieces(og, oh * job[8], k2))
    # a plane larger than L2 is cut along rows first (each piece's rows stay there while
    # every band of channels walks them), a small one along channels first
    unit = MR
    if amx.AMX:  # cut one way: each piece packs its own weight rows and positions' pair rows
        unit = amx.BLOCK_ROWS
        step_c, along_c, step_y, along_y = -(-og // unit), 1, oh, 1  # one piece each way
        if og > oh * job[8]:  # more weight rows than positions: cut the channels
            if amx.packs_b(job[4], 1, k2):  # each piece packs all of B: one piece a thread
                parts = min(parts, threads)
            step_c, along_c, _, _ = piece_grid(og, unit, 1, 1, parts, threads)
        else:
            step_y, along_y, _, _ = piece_grid(oh, 1, 1, 1, parts, threads)
    elif job[9] < oh:
        step_y, along_y, step_c, along_c = piece_grid(oh, 1, og, MR, parts, threads)
    else:
        step_c, along_c, step_y, along_y = piece_grid(og, MR, oh, 1, parts, threads)
    job[10], job[11], job[12], job[13], job[14] = og, oh, step_c * unit, step_y, along_y
    if along_c * along_y <= 1:
        _direct(job, 0, og, 0, oh)
    else:
        _run_direct(like, along_c * along_y, job)


@jit(inline="always", **_OPTS)
def direct_group(w, oc, b, g, groups, plane, table, wide, epilogue):  # type: ignore[no-untyped-def]  # noqa: E501
    """Group ``g`` of image ``b`` on its pair plane (built by the caller): the job, which
    computes rows of the phases' width into ``wide`` (``(og, oh * wq)`` float32) and compacts
    them into ``oc`` block by block (`_direct`); with ``wide`` empty the phases are as wide
    as the output and the job writes ``oc`` itself; ``epilogue`` (int64) the bias's address
    (0: none) and the activation's index, the residual's address (as ``oc``'s; 0: none),
    and, when the result is the next convolution's pair plane (one group; ``oc`` then not
    written), the plane's address (0: none), padding top and left, height and width
    (`rows_to_pairs`).
    Split on the pool when large and the pool is free (not from within a pool task:
    `_group_task`)."""
    co, kp = w.shape[0], w.shape[1]
    across = epilogue[14] if epilogue.size > 14 else 0  # a plane of positions' pairs
    oh, ow = oc.shape[2], oc.shape[3]
    _, hq, wq = plane_dims(plane.shape, across > 0)
    og, k2 = co // groups, kp // 2
    rows_block = max(1, BLOCK_BYTES // (4 * plane.size // (hq * wq) * wq) - hq + oh)
    job = np.empty(_DIRECT_JOB, dtype=np.int64)
    job[0], job[2], job[3], job[4], job[5] = _DIRECT_JOB, k2, plane.ctypes.data, 0, k2
    job[4], job[8], job[9] = table.ctypes.data, wq, rows_block
    ahead = rows_block < oh and wq > READ_AHEAD_ROW and across == 0
    job[26], job[27] = plane.shape[0] if ahead else 0, hq
    job[1] = w.ctypes.data + 2 * g * og * kp
    at_out = oc.ctypes.data + 4 * (b * co + g * og) * oh * ow
    job[15], job[16], job[17] = 0, ow, oh * ow
    job[18] = epilogue[0] + 4 * g * og if epilogue[0] != 0 else 0
    job[19] = epilogue[1]
    job[20] = epilogue[2] + at_out - oc.ctypes.data if epilogue[2] != 0 else 0
    job[21], job[28], job[29], job[30] = 0, 0, oh * ow, ow
    job[31], job[32] = at_out, 0
    if epilogue.size > 8 and epilogue[8] == 2:  # a pair plane's residual: the image's already
        job[20], job[28], job[29] = epilogue[2], 2, epilogue[11] * epilogue[12]
        job[30], job[32] = epilogue[12], epilogue[9] * epilogue[12] + epilogue[10]
    elif epilogue.size > 16 and epilogue[8] == amx.POSITIONS:  # a plane of positions'
        job[20], job[28], job[29] = epilogue[2], amx.POSITIONS, epilogue[16]
        job[30], job[32] = epilogue[12], (epilogue[9] * epilogue[12] + epilogue[10]) * epilogue[16]
    elif job[20] != 0:
        job[28] = 1
    if epilogue.size > 3 and epilogue[3] != 0:  # one group: the plane's first pair
        copy(job[21:], epilogue[3:], 5)
    job[33] = epilogue[13] if epilogue.size > 13 else 0  # a weight in tiles: its taps
    job[34] = hq * wq
    job[35], job[36] = across, epilogue[15] if epilogue.size > 15 else 0
    if wide.size == 0:
        job[6], job[7] = at_out, oh * ow
    else:
        job[6], job[7], job[15] = wide.ctypes.data, oh * wq, at_out
    direct(oc, job, og, oh, k2)
