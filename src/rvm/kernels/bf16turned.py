"""bf16 convolution turned around, for small maps: output channels along the lanes.

`rvm.kernels.bf16conv` runs a convolution as ``C = A @ B`` with the output channels as the
GEMM's rows and the positions along the lanes. On a small map (7 x 7: 49 positions) the
lanes' last vector is mostly empty; turned around (``C.T = B.T @ A.T``) the output positions
are the rows, each broadcast from the same pair plane (built by `rvm.kernels.bf16conv`)
through the same tap table, and the output channels run along the lanes, read from the
weight converted at compile time into panels of channels
(`rvm.kernels.reference.bf16.turn_pairs`, the op's ``panel``). `turned_panel` says which
convolutions take it (`TURN_GAIN`). The sums land in a scratch of ``(positions, NR)`` and
are moved into the output's channel rows, the epilogue applied there while in cache, and,
when the next convolution reads a pair plane (`rvm.op.bf16`), rounded into it from there
(`rvm.kernels.bf16planes.rows_to_pairs`) in the same piece: one thread rounding the whole
image after the pieces took 13-19 us of a 14 x 14 layer's 165 at two threads (Zen 4).
"""

from __future__ import annotations

import numpy as np

from rvm.kernels import parfor, workpool
from rvm.kernels.bf16gemm import (
    CONV_SPLIT_MIN,
    KC2,
    LANES,
    MR,
    NR,
    PIECES_PER_THREAD,
    micro_turned,
    piece_grid,
)
from rvm.kernels.bf16planes import rows_to_pairs
from rvm.kernels.epilogue import tile_rows
from rvm.kernels.jitting import alive, jit
from rvm.kernels.microkernel import floats_at

__all__ = ["TURN_GAIN", "position_tiles", "turned_group", "turned_panel"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


TURN_GAIN = 1.1
"""How much more of its lanes' work a turned-around convolution must use than the direct one
to take it: the margin pays for moving its sums into channel rows (on one Zen 4 core the
turned kernel took 0.76-0.98x the direct one's time where it used 1.14-1.31x the lanes' work:
7 x 7 maps, 3 x 3 kernels at 13 x 13 and 14 x 14, stride 2 to 7 x 7 and 14 x 14; 1.04-1.5x
where it used 1.0-1.06x: 1 x 1 kernels at 13 x 13 to 28 x 28)."""


@jit(**_OPTS)
def position_tiles(npos, mr):  # type: ignore[no-untyped-def]
    """(tiles, full): a turned convolution's ``npos`` output positions in ``tiles`` tiles, the
    first ``full`` of ``mr`` rows and the rest of ``mr - 1`` (the micro-kernel has both), so
    no row is computed twice (49: 7 tiles of 7; 196: 21 of 8, 4 of 7); below ``(mr - 1) *
    (mr - 2)`` positions, tiles of ``mr``, the last one fewer (its last row repeated)."""
    tiles = -(-npos // mr)
    full = npos - (mr - 1) * tiles
    return tiles, (full if full >= 0 else tiles)


def turned_panel(og: int, oh: int, ow: int, wq: int, groups: int) -> int:
    """The panel width (output channels, `NR`) a convolution of ``og`` output channels a
    group, an ``oh`` x ``ow`` output and pair-plane rows ``wq`` words wide runs turned
    around with, or 0 for the direct method: turned when its tiles use `TURN_GAIN` times the
    direct tiles' share of lanes and rows. Direct: ``og`` in bands of `MR` rows, the rows'
    ``oh * wq`` positions (the last ``wq - ow`` of each row dropped) along `LANES` lanes;
    turned: ``oh * ow`` positions in tiles (`position_tiles`), ``og`` along the lanes in
    tiles of `NR`, a last tile of one vector after full ones counted as half a full one (64
    channels: 48 + 16 took 1.03-1.04x the direct kernel's time, 3 x 3 at 13 x 13 and 14 x 14).
    Groups stay direct (they run side by side there)."""
    npos = oh * ow
    if groups != 1 or npos == 0 or og == 0:
        return 0
    tiles, full = position_tiles(npos, MR)
    computed = full * MR + (tiles - full) * (MR - 1)  # the micro-kernel's rows, 7 or 8 a tile
    rest = og % NR  # a last tile of one vector after full ones costs half a full one (`band`)
    lanes = -(-rest // LANES) * LANES
    if og > NR and 0 < rest <= LANES:
        lanes = max(LANES, NR // 2)
    direct_use = npos / (-(-oh * wq // LANES) * LANES) * og / (-(-og // MR) * MR)
    turned_use = npos / computed * og / (og - rest + lanes)
    return NR if turned_use >= TURN_GAIN * direct_use else 0


@jit(**_OPTS)
def _turned(job, t0, t1, ct):  # type: ignore[no-untyped-def]
    """Panels [t0, t1) of output channels of a turned job (`_TURNED_JOB`): ``C.T = B.T @
    A.T``, the output positions as the GEMM's rows, broadcast from the pair plane (position
    ``i``'s pair row ``s`` the word ``offs[i] + table[s]``: any positions, no wide rows), the
    weight's pairs as its B in panels of ``panel`` output channels (`turn_pairs`: panel ``t``
    ``(k2, width)`` words, ``width`` its channels, the last panel's fewer), read a vector of
    `LANES` channels at a time, `NR` channels a tile; summed into the scratch ``(positions,
    NR)`` at ``ct``, then moved into the output's channel rows and ``act(C + bias + R)``
    applied there while in cache (`tile_rows`)."""
    wt, plane, table, k2, offs, npos = job[1], job[2], job[3], job[4], job[5], job[6]
    og, out, ohw, bias, act, res = job[7], job[9], job[10], job[11], job[12], job[13]
    panel = job[15]
    scratch = floats_at(ct)
    dst = floats_at(out)
    tiles, full = position_tiles(npos, MR)
    for t in range(t0, t1):
        width = min(panel, og - t * panel)
        at_panel = wt + 4 * t * panel * k2
        for jj in range(0, width, NR):
            j0 = t * panel + jj
            cols = min(NR, width - jj)
            vectors = (cols + LANES - 1) // LANES
            last = cols - (vectors - 1) * LANES
            for p0 in range(0, k2, KC2):
                kc2 = min(KC2, k2 - p0)
                b = at_panel + 4 * (p0 * width + jj)
                i0 = 0
                for q in range(tiles):  # not ``t``: the panel's index, read again below
                    rows = min(MR if q < full else MR - 1, npos - i0)
                    micro_turned(kc2, plane, table + 8 * p0, b, width, 2, ct + 4 * i0 * NR, NR,
                          1 if p0 else 0, rows, vectors, last, offs + 8 * i0)  # fmt: skip
                    i0 += rows
            for o in range(cols):
                d = (j0 + o) * ohw
                for i in range(npos):
                    dst[d + i] = scratch[i * NR + o]
            if bias != 0 or act != 0 or res != 0:
                at_bias = bias + 4 * j0 if bias != 0 else 0
                at_res = res + 4 * j0 * ohw if res != 0 else 0
                tile_rows(out + 4 * j0 * ohw, ohw, cols, npos, at_bias, act, at_res)
            if job[16] != 0:  # the next convolution's pair plane, from these rows in cache
                oh, ow = job[21], job[22]
                rows_to_pairs(job[16:21], out, ohw, ow, og, oh, ow, j0, j0 + cols, 0, oh)


# A turned job (int64): its length; the group's weight pairs' address ((k2, og) words), the
# plane's, the tap table's, the pairs (k2), the positions' word offsets' address, the
# positions, the group's channels; the scratch's address (the first piece's), the output's
# (the group's first channel), its positions a channel; the bias's address (the group's
# first channel; 0: none), the activation's index, the residual's (as the output's; 0: none);
# panels a piece, channels a panel; the next convolution's pair plane's address (0: none),
# its padding top and left, its height and width (`rows_to_pairs`); the output's height and
# width.
_TURNED_JOB = 23


def _turned_task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a turned convolution: a range of channel tiles, its own scratch."""
    job = parfor.job(data)
    step, tiles = job[14], -(-job[7] // job[15])
    _turned(job, p * step, min(tiles, (p + 1) * step), job[8] + 4 * p * job[6] * NR)


parfor.export_task("bf16_conv_turned", _turned_task)
_run_turned = parfor.runner("bf16_conv_turned")


@jit(**_OPTS)
def turned_group(w, oc, b, g, groups, plane, table, offs, epilogue, panel):  # type: ignore[no-untyped-def]  # noqa: E501
    """Group ``g`` of image ``b`` turned around (`_turned`) on its pair plane (built by the
    caller): its channel tiles, in pieces on the pool when large and the pool is free
    (`piece_grid`); ``epilogue`` (int64) the bias's address (0: none), the activation's
    index, the residual's address (0: none), and, when the output is the next convolution's
    pair plane (``oc`` then the float32 rows it is rounded from), the plane's address (0:
    none), padding top and left, height and width."""
    co, kp, oh, ow = w.shape[0], w.shape[1], oc.shape[2], oc.shape[3]
    og, k2, npos = co // groups, kp // 2, oh * ow
    tiles = -(-og // panel)
    threads, parts = parfor.threads(), 1
    if threads > 1 and not workpool.busy():
        parts = min(PIECES_PER_THREAD * threads, tiles, (og * npos * k2) // CONV_SPLIT_MIN)
    step, parts, _, _ = piece_grid(og, panel, 1, 1, parts, threads)
    scratch = np.empty(parts * npos * NR, dtype=np.float32)
    job = np.empty(_TURNED_JOB, dtype=np.int64)
    job[0], job[1], job[2] = _TURNED_JOB, w.ctypes.data + 2 * g * og * kp, plane.ctypes.data
    job[3], job[4], job[5], job[6], job[7] = table.ctypes.data, k2, offs.ctypes.data, npos, og
    job[8], job[9] = scratch.ctypes.data, oc.ctypes.data + 4 * (b * co + g * og) * oh * ow
    job[10], job[12], job[14], job[15] = oh * ow, epilogue[1], step, panel
    job[11] = epilogue[0] + 4 * g * og if epilogue[0] != 0 else 0
    job[13] = epilogue[2] + job[9] - oc.ctypes.data if epilogue[2] != 0 else 0
    planed = epilogue.size > 3 and epilogue[3] != 0  # one group: its plane's first pair
    for i in range(5):
        job[16 + i] = epilogue[3 + i] if planed else 0
    job[21], job[22] = oh, ow
    if parts == 1:
        _turned(job, 0, tiles, job[8])
        alive(scratch)  # read and written through its address only
    else:
        _run_turned(scratch, parts, job)  # the pool's ``like``: kept alive until done
