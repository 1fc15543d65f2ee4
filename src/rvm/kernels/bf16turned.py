"""bf16 convolution turned around, for small maps: output channels along the lanes.

`rvm.kernels.bf16conv` runs a convolution as ``C = A @ B`` with the output channels as the
GEMM's rows and the positions along the lanes. On a small map (7 x 7: 49 positions) the
lanes' last vector is mostly empty; turned around (``C.T = B.T @ A.T``) the output positions
are the rows, each broadcast from the same pair plane (built by `rvm.kernels.bf16conv`)
through the same tap table, and the output channels run along the lanes, read from the
weight converted at compile time into panels of channels
(`rvm.kernels.reference.bf16.turn_pairs`, the op's ``panel``). `turned_panel` says which
convolutions take it (`TURN_GAIN`) and in which panels: where the channels fill panels of
`LANES`, those, a tile of `NR` channels reading its vectors from three of them, so that the
channels are cut into tiles once and the threads' pieces are whole tiles, equal shares
(`_short_tiles`). Panels of `NR`, each cut into its own tiles, left 512 channels in ten
tiles of 48 and one of 32, one thread's pieces 288 channels and the other's 224; panels of
`LANES` make them eight tiles of 48 and four of 32, 256 each (squeezenet, resnet50 and
inception_v2 in bf16 took 0.96-0.97 of the time, vgg19 and shufflenet 0.99, the others the
same: the two in turns in one process, Zen 4, two threads). The sums land in a scratch of
``(positions, NR)`` and
are moved into the output's channel rows, the epilogue applied there while in cache, and,
when the next convolution reads a pair plane (`rvm.op.bf16`), rounded into it from there
(`rvm.kernels.bf16planes.rows_to_pairs`) in the same piece: one thread rounding the whole
image after the pieces took 13-19 us of a 14 x 14 layer's 165 at two threads (Zen 4).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.extending import intrinsic

from rvm.kernels import amx, parfor, workpool
from rvm.kernels.bf16gemm import (
    KC2,
    LANES,
    MR,
    NR,
    PIECES_PER_THREAD,
    TURNED_ROWS,
    conv_pieces,
    micro_turned,
    piece_grid,
)
from rvm.kernels.bf16planes import rows_to_pairs
from rvm.kernels.epilogue import tile_rows
from rvm.kernels.jitting import alive, jit
from rvm.kernels.vectors import VectorIR

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


@jit(inline="always", **_OPTS)
def _tiles(npos):  # type: ignore[no-untyped-def]
    """(tiles, full) of a turned convolution's ``npos`` positions, the first ``full`` tiles of
    `MR` rows and the rest of ``MR - 1`` (`position_tiles`), or where the tiles hold at most
    ``MR - 1`` (`TURNED_ROWS`, AVX-512) all of ``MR - 1`` but the last: ``full`` 0."""
    if TURNED_ROWS == MR:
        return position_tiles(npos, MR)
    return -(-npos // (MR - 1)), 0


def turned_panel(og: int, oh: int, ow: int, wq: int, groups: int) -> int:
    """The panel width (output channels: `LANES` where they fill such panels, so that tiles
    span panels and the threads' pieces are whole tiles of equal shares, else `NR`) a
    convolution of ``og`` output channels a group, an ``oh`` x ``ow`` output and pair-plane
    rows ``wq`` words wide runs turned around with, or 0 for the direct method: turned when
    its tiles use `TURN_GAIN` times the direct tiles' share of lanes and rows. Direct: ``og``
    in bands of `MR` rows, the rows' ``oh * wq`` positions (the last ``wq - ow`` of each row
    dropped) along `LANES` lanes; turned: ``oh * ow`` positions in tiles (`_tiles`),
    ``og`` along the lanes in tiles of `NR`, a last tile of one vector after full ones
    counted as half a full one (64 channels: 48 + 16 took 1.03-1.04x the direct kernel's
    time, 3 x 3 at 13 x 13 and 14 x 14). Groups stay direct (they run side by side there)."""
    npos = oh * ow
    if groups != 1 or npos == 0 or og == 0 or amx.AMX:  # AMX: the direct method's tiles
        return 0
    tiles, full = _tiles(npos)
    computed = full * MR + (tiles - full) * (MR - 1)  # the micro-kernel's rows, 7 or 8 a tile
    rest = og % NR  # a last tile of one vector after full ones costs half a full one (`band`)
    lanes = -(-rest // LANES) * LANES
    if og > NR and 0 < rest <= LANES:
        lanes = max(LANES, NR // 2)
    direct_use = npos / (-(-oh * wq // LANES) * LANES) * og / (-(-og // MR) * MR)
    turned_use = npos / computed * og / (og - rest + lanes)
    if turned_use < TURN_GAIN * direct_use:
        return 0
    return LANES if og % LANES == 0 else NR


@jit(inline="always", **_OPTS)
def _tile_width(left, span):  # type: ignore[no-untyped-def]
    """The channels of a turned tile, ``left`` channels of its piece (``span``: tiles span
    panels) or of its panel left: `NR`, or what is left; spanning, 64 as two tiles of 32, not
    `NR` and one vector (a one-vector tile broadcasts A for half the products)."""
    if span and left == NR + LANES:
        return 2 * LANES
    return min(NR, left)


@jit(**_OPTS)
def _short_tiles(og, threads):  # type: ignore[no-untyped-def]
    """How many tiles of ``2 * LANES`` channels end the tiles of ``og`` channels (the others
    `NR`; ``og`` a multiple of `LANES`) so that ``threads`` threads taking the tiles in turn
    get the fewest channels at most: 512 on two threads, eight of 48 and four of 32 (256
    each; whole tiles of 48 left one thread 288); of equals, the fewest short tiles. 0 where
    no such mix makes ``og`` (the last tile the rest, `_tile_start`)."""
    best, most = 0, og + 1
    short = 2 * LANES
    for n in range(og // short + 1):
        rest = og - n * short
        if rest % NR != 0:
            continue
        full = rest // NR
        busiest = 0
        for t in range(threads):  # tile i goes to thread i % threads
            wide = _turns(full, t, threads)
            busiest = max(busiest, NR * wide + short * (_turns(full + n, t, threads) - wide))
        if busiest < most:
            best, most = n, busiest
    return best


@jit(inline="always", **_OPTS)
def _turns(count, t, threads):  # type: ignore[no-untyped-def]
    """How many of ``0 .. count - 1`` are ``t`` modulo ``threads``: thread ``t``'s tiles of
    ``count`` taken in turn."""
    return (count - t + threads - 1) // threads if count > t else 0


@jit(inline="always", **_OPTS)
def _tile_count(og, short):  # type: ignore[no-untyped-def]
    """The tiles of ``og`` channels whose last ``short`` tiles are of ``2 * LANES`` channels,
    the others of `NR` (`_short_tiles`; with no short tiles, the last one the rest)."""
    return -(-(og - short * 2 * LANES) // NR) + short


@jit(inline="always", **_OPTS)
def _tile_start(i, og, short):  # type: ignore[no-untyped-def]
    """The first channel of tile ``i`` of those (`_tile_count`)."""
    full = (og - short * 2 * LANES) // NR
    return min(og, NR * min(i, full) + 2 * LANES * max(0, i - full))


@intrinsic
def _turn_words(typingctx, src, src_row, rows, cols, dst, dst_row):  # type: ignore[no-untyped-def]
    """A block of at most `LANES` x `LANES` 32-bit words turned: row ``i < cols`` at ``dst``
    (rows ``dst_row`` bytes apart) gets its first ``rows`` words from column ``i`` of the
    ``rows`` x ``cols`` words at ``src`` (rows ``src_row`` bytes apart); nothing else is read
    or written (masked loads and stores); int64 addresses."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        src, src_row, rows, cols, dst, dst_row = args
        v = VectorIR(builder, LANES)
        down, none = v.first(rows), ir.Constant(v.masks, [0] * LANES)
        for i, word_row in enumerate(v.turn(v.block(src, src_row, rows, cols))):
            at = builder.add(dst, builder.mul(dst_row, ir.Constant(dst_row.type, i)))
            inside = builder.icmp_signed(">", cols, ir.Constant(cols.type, i))
            v.store(word_row, at, builder.select(inside, down, none))
        return context.get_dummy_value()

    return nt.void(*(nt.int64,) * 6), codegen


@jit(**_OPTS)
def _turned(job, c0, c1, y0, y1):  # type: ignore[no-untyped-def]
    """Output channels [c0, c1) by output rows [y0, y1) of a turned job (`_TURNED_JOB`): ``C.T =
    B.T @ A.T``, the rows' output positions as the GEMM's rows, broadcast from the pair plane
    (position ``i``'s pair row ``s`` the word ``offs[i] + table[s]``: any positions, no wide
    rows), the weight's pairs as its B in panels of ``panel`` output channels (`turn_pairs`:
    panel ``t`` ``(k2, width)`` words, ``width`` its channels, the last panel's fewer), read a
    vector of `LANES` channels at a time, up to `NR` channels a tile (`_tile_width`): with
    panels of `LANES` channels, all full, a tile spans panels (the micro-kernel's ``bstep``), so
    that [c0, c1) may start and end at any panel (`_tile_start`); wider panels hold their tiles.
    Each tile summed into a scratch ``(positions, NR)``, then moved into the output's channel
    rows and ``act(C + bias + R)`` applied there while in cache (`tile_rows`)."""
    wt, plane, table, k2, offs = job[1], job[2], job[3], job[4], job[5]
    og, out, ohw, bias, act, res = job[7], job[9], job[10], job[11], job[12], job[13]
    panel = job[15]
    first = y0 * job[22]  # the rows' positions: [first, first + npos)
    npos = (y1 - y0) * job[22]
    room = np.empty(npos * NR, dtype=np.float32)  # the scratch
    ct = room.ctypes.data
    tiles, full = _tiles(npos)
    span = panel == LANES and og % LANES == 0  # panels of LANES channels, all full
    j0 = c0
    while j0 < c1:
        t = j0 // panel
        width = min(panel, og - t * panel)  # the channels of j0's panel
        jj = j0 - t * panel
        if span:
            cols = _tile_width(c1 - j0, span)
            ldb, bstep = LANES, LANES * k2
        else:
            cols = _tile_width(min(c1, t * panel + width) - j0, span)
            ldb, bstep = width, LANES
        vectors = (cols + LANES - 1) // LANES
        last = cols - (vectors - 1) * LANES
        for p0 in range(0, k2, KC2):
            kc2 = min(KC2, k2 - p0)
            b = wt + 4 * (t * panel * k2 + p0 * ldb + jj)
            i0 = 0
            for q in range(tiles):
                rows = min(MR if q < full else MR - 1, npos - i0)
                micro_turned(kc2, plane, table + 8 * p0, b, ldb, 2, ct + 4 * i0 * NR, NR,
                             1 if p0 else 0, rows, vectors, last, offs + 8 * (first + i0),
                             bstep)  # fmt: skip
                i0 += rows
        for i0 in range(0, npos, LANES):  # the sums turned into channel rows, a block a time
            for o0 in range(0, cols, LANES):
                _turn_words(ct + 4 * (i0 * NR + o0), 4 * NR, min(LANES, npos - i0),
                            min(LANES, cols - o0), out + 4 * ((j0 + o0) * ohw + first + i0),
                            4 * ohw)  # fmt: skip
        if bias != 0 or act != 0 or res != 0:
            at_bias = bias + 4 * j0 if bias != 0 else 0
            at_res = res + 4 * (j0 * ohw + first) if res != 0 else 0
            tile_rows(out + 4 * (j0 * ohw + first), ohw, cols, npos, at_bias, act, at_res)
        if job[16] != 0:  # the next convolution's pair plane, from these rows in cache
            oh, ow = job[21], job[22]
            rows_to_pairs(job[16:21], out + 4 * first, ohw, ow, og, oh, ow, j0, j0 + cols, y0,
                          y1)  # fmt: skip
        j0 += cols
    alive(room)  # read and written through its address only


# A turned job (int64): its length; the group's weight pairs' address ((k2, og) words), the
# plane's, the tap table's, the pairs (k2), the positions' word offsets' address, the
# positions, the group's channels; its tiles of 2 * LANES channels (`_short_tiles`); the
# output's address (the group's first channel), its positions a channel; the bias's address
# (the group's first channel; 0: none), the activation's index, the residual's (as the
# output's; 0: none); channels a piece (whole panels; 0: a tile a piece or a guided cut of
# the tiles), channels a panel; the next convolution's pair plane's address (0: none), its
# padding top and left, its height and width (`rows_to_pairs`); the output's height and
# width; the pieces along the channels and the threads; the pieces along the output's rows.
_TURNED_JOB = 26


def _turned_task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a turned convolution: a range of channels by a range of output rows,
    its own scratch."""
    job = parfor.job(data)
    step, along = job[14], job[25]
    pc, py = p // along, p % along
    if step == 0:  # tiles spanning panels: a guided cut of the tiles (`_short_tiles`)
        og, short = job[7], job[8]
        t0, t1 = parfor.guided_range(pc, job[23], job[24], _tile_count(og, short), 1)
        c0, c1 = _tile_start(t0, og, short), _tile_start(t1, og, short)
    else:
        c0, c1 = pc * step, min(job[7], (pc + 1) * step)
    y0, y1 = parfor.piece_range(py, along, job[21], 1)
    _turned(job, c0, c1, y0, y1)


parfor.export_task("bf16_conv_turned", _turned_task)
_run_turned = parfor.runner("bf16_conv_turned")


@jit(**_OPTS)
def turned_group(w, oc, b, g, groups, plane, table, offs, epilogue, panel):  # type: ignore[no-untyped-def]  # noqa: E501
    """Group ``g`` of image ``b`` turned around (`_turned`) on its pair plane (built by the
    caller): its channels, in pieces on the pool when large and the pool is free: with tiles
    spanning panels (`_turned`), a tile a piece (`_short_tiles`: the threads' shares equal),
    or, where the work is too small for that many, a guided cut of the tiles
    (`rvm.kernels.parfor.guided_range`); where the tiles are fewer than the threads, each
    also cut along the output's rows (densenet121's 24 growth convolutions at 14 x 14, 32
    channels in one tile, had run on one thread while the other waited: the model took 0.95
    of its time, Zen 4, two threads); else whole panels (`piece_grid`). ``epilogue``
    (int64) the bias's address (0: none), the activation's index, the residual's address (0:
    none), and, when the output is the next convolution's pair plane (``oc`` then the
    float32 rows it is rounded from), the plane's address (0: none), padding top and left,
    height and width."""
    co, kp, oh, ow = w.shape[0], w.shape[1], oc.shape[2], oc.shape[3]
    og, k2, npos = co // groups, kp // 2, oh * ow
    threads, parts = parfor.threads(), 1
    split = threads > 1 and not workpool.busy()
    most = conv_pieces(og, npos, k2) if split else 1  # pieces of enough work
    step, short = 0, 0
    along = 1  # pieces along the output's rows, where the channels make fewer than threads
    if panel == LANES and og % LANES == 0:  # a piece a tile, or a few (`_turned_task`)
        short = _short_tiles(og, threads)
        parts = max(1, min(most, _tile_count(og, short)))
        if split and parts < threads:
            along = max(1, min(oh, threads // parts, most // parts))
    elif split:
        parts = min(PIECES_PER_THREAD * threads, -(-og // panel), most)
        step, parts, _, _ = piece_grid(og, panel, 1, 1, parts, threads)
    job = np.empty(_TURNED_JOB, dtype=np.int64)
    job[0], job[1], job[2] = _TURNED_JOB, w.ctypes.data + 2 * g * og * kp, plane.ctypes.data
    job[3], job[4], job[5], job[6], job[7] = table.ctypes.data, k2, offs.ctypes.data, npos, og
    job[8], job[9] = short, oc.ctypes.data + 4 * (b * co + g * og) * oh * ow
    job[10], job[12], job[14], job[15] = oh * ow, epilogue[1], step * panel, panel
    job[11] = epilogue[0] + 4 * g * og if epilogue[0] != 0 else 0
    job[13] = epilogue[2] + job[9] - oc.ctypes.data if epilogue[2] != 0 else 0
    planed = epilogue.size > 3 and epilogue[3] != 0  # one group: its plane's first pair
    for i in range(5):
        job[16 + i] = epilogue[3 + i] if planed else 0
    job[21], job[22], job[23], job[24], job[25] = oh, ow, parts, threads, along
    if parts * along == 1:
        _turned(job, 0, og, 0, oh)
    else:
        _run_turned(oc, parts * along, job)
