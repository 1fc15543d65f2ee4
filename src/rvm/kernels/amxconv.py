"""A bf16 convolution on AMX tiles with the positions as A's rows: the walk turned around.

`rvm.kernels.amx.walk` runs a convolution as ``C = W @ X``: the output channels are A's rows
(the weight's, as they lie), the positions B's columns, read from the input's pair plane (a
channel pair's positions in a row of words) a tap at a time. A 3 x 3 tap moves B's rows by
one or two words, so two of every three taps load rows that straddle cache lines, and a
tile's 16 pair rows lie a plane apart. Turned around (``C.T = X.T @ W.T``, as oneDNN's
convolutions run), a tile of A is 16 positions' 16 channel pairs, a position's pairs one
64-byte line, its rows a position's pairs apart; a tap moves it by whole positions, so every
load is whole lines, and B is the weight laid out as its tiles when the program is compiled
(``pairing="tiles"``, `rvm.kernels.reference.bf16.tile_pairs`), 2 KB a step of 16 pairs for
a band of 32 output channels, in L1 while the band runs along the positions. The products
alone, one thread, inception_v2's 64 -> 192 3 x 3 on 56 x 56: 351 us against 642.

`walk` takes what `rvm.kernels.amx.walk` takes for a convolution whose taps come tap by tap
(each tap's channel pairs a plane apart: a weight in tiles), with its output record
(`rvm.kernels.amx.BLOCK_OUT`). It copies the words of the input's pair plane its run reads
into a scratch of positions by channel pairs (`_gather`: 16 x 16 words at a time, turned in
registers by `_turn`), or reads a plane already laid out so (a plane of positions,
`rvm.kernels.reference.bf16.LAYOUTS`) as it lies; then walks each band of 32 output
channels along the run's blocks of 32 positions (`_block`; a 1 x 1 writing such a plane,
every band at each block in turn), and puts each block of sums, turned back into channel
rows in L1, where the record says (`rvm.kernels.amx.block_out`: the next convolution's pair
plane or a float32 image, with its bias, residual and activation), or rounds each
position's channels into one line of a plane of positions (`_lines`). The sums are the
walk's bit for bit (the same products in the same order). Where the walk is not turned (no
AMX: a program saved on a CPU with it), `rows_of` turns the tiles back into rows.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.amx import (
    AMX,
    BLOCK_COLS,
    BLOCK_OUT,
    POSITIONS,
    TILE,
    block_out,
    configure,
    lines_a_step,
    present_tiles,
    release,
    tile_intrinsics,
    tile_step,
)
from rvm.kernels.bf16words import pair_halves, run_bits
from rvm.kernels.epilogue import tile_rows
from rvm.kernels.gemmshape import BLOCK_BYTES
from rvm.kernels.jitting import alive, jit
from rvm.kernels.microkernel import ints_at, prefetch_l2
from rvm.kernels.planes import copy
from rvm.kernels.vectors import VectorIR

__all__ = ["rows_of", "walk"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_I8, _I32, _I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_PTR = _I8.as_pointer()
_WORDS = ir.VectorType(_I32, TILE)
_FLOATS = ir.VectorType(ir.FloatType(), TILE)
_TILE_BYTES = 4 * TILE * TILE  # a tile: 16 rows of 64 bytes
_STEP = 2 * _TILE_BYTES  # a step of packed B: two tiles, output channels 0-15 then 16-31
AHEAD = 4  # steps ahead a band's first block of positions fetches the weight's tiles


@intrinsic
def _block(typingctx, a0, a1, lda, a_steps, b, steps, c, tall, wide, soon, soon_lines):  # type: ignore[no-untyped-def]  # noqa: E501
    """``C[32, 32] = sum over steps s of A_s @ B_s`` on the configured tiles (int64
    addresses): A's tile of rows 0-15 at ``a0 + a_steps[s]``, of rows 16-31 at ``a1 +
    a_steps[s]`` (``a_steps`` the address of an int64 array), its rows ``lda`` bytes apart;
    B packed, step ``s``'s tile of columns 0-15 at ``b + 2048 s``, of columns 16-31 1024 bytes
    on, rows 64 bytes apart; C's rows 128 bytes apart at ``c``. ``tall`` 0: rows 0-15 only,
    ``wide`` 0: columns 0-15 only (the other tiles neither loaded, multiplied nor stored).
    Spread over its steps, a few a step, it hints L2 to fetch the ``soon_lines`` cache lines
    from ``soon`` on (0: none): a band's weight `AHEAD` steps ahead on its first block, which
    otherwise came from memory at the pace of the tile loads waiting for it (resnet50's 512
    -> 512 3 x 3 on 7 x 7: a 4.7 MB weight for 49 positions)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        a0, a1, lda, a_steps, b, steps, c, tall, wide, soon, soon_lines = args
        each_c, tall, wide = present_tiles(builder, tall, wide)
        ops = tile_intrinsics(builder)
        _, store, _, zero, _ = ops
        each = lines_a_step(builder, soon_lines, steps)
        cp = builder.inttoptr(c, _PTR)
        cs = [cp, builder.gep(cp, [_I64(64)]), builder.gep(cp, [_I64(2048)])]
        cs.append(builder.gep(cp, [_I64(2048 + 64)]))
        each_c(lambda t: builder.call(zero, [_I8(t)]))
        with cgutils.for_range(builder, steps) as loop:
            entry = builder.add(a_steps, builder.mul(loop.index, _I64(8)))
            shift = builder.load(builder.inttoptr(entry, _I64.as_pointer()))
            b0 = builder.add(b, builder.mul(loop.index, _I64(_STEP)))

            def at(base):  # type: ignore[no-untyped-def]
                return builder.inttoptr(base, _PTR)

            a = (at(builder.add(a0, shift)), at(builder.add(a1, shift)))
            b_tiles = (at(b0), at(builder.add(b0, _I64(_TILE_BYTES))))
            tile_step(builder, ops, loop.index, each, soon_lines,
                      lambda line: builder.add(soon, builder.mul(line, _I64(64))), a, lda,
                      b_tiles, _I64(64), tall, wide)  # fmt: skip
        each_c(lambda t: builder.call(store, [_I8(t), cs[t], _I64(4 * BLOCK_COLS)]))
        return context.get_dummy_value()

    return nt.void(*(nt.int64,) * 11), codegen


@intrinsic
def _turn(typingctx, src, src_row, rows, cols, dst, dst_row):  # type: ignore[no-untyped-def]
    """16 x 16 32-bit words turned: row ``i`` of the words at ``dst`` (rows ``dst_row`` bytes
    apart) is column ``i`` of the ``rows`` x ``cols`` at ``src`` (rows ``src_row`` bytes
    apart), 0 past them (masked loads: nothing past them is read); int64 addresses; turned by
    `rvm.kernels.vectors.VectorIR.turn`."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        src, src_row, rows, cols, dst, dst_row = args
        wptr = _WORDS.as_pointer()
        v = VectorIR(builder, TILE)
        loaded = v.turn(v.block(src, src_row, rows, cols))
        for i in range(TILE):
            at = builder.add(dst, builder.mul(dst_row, _I64(i)))
            builder.store(loaded[i], builder.inttoptr(at, wptr), align=4)
        return context.get_dummy_value()

    return nt.void(*(nt.int64,) * 6), codegen


@intrinsic
def _line(typingctx, src, bias, res, relu, dst):  # type: ignore[no-untyped-def]
    """One position's 32 float32 sums at ``src`` (its output channels in turn), each plus its
    channel's bias (32 at ``bias``; 0: none, not adding 0: -0.0 stays), then its residual
    (the 16 pair words at ``res``, channels ``2 q`` and ``2 q + 1`` in word ``q``'s low and
    high halves; 0: none), in that order as `rvm.kernels.bf16words.sum_words` adds them:
    with ``dst`` 0 stored back at ``src`` as they are (for a block put out in channel rows),
    else ReLU'd where ``relu`` and rounded into the 16 words at ``dst``, word ``q`` the bf16
    of channels ``2 q`` (low half) and ``2 q + 1`` (high half), as ``sum_words`` rounds a pair
    plane's words (int64 addresses)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        src, bias, res, relu, dst = args
        fptr = _FLOATS.as_pointer()
        zero = ir.Constant(_FLOATS, None)

        def halves(base):  # type: ignore[no-untyped-def]
            at = [base, builder.add(base, _I64(4 * TILE))]
            return [builder.load(builder.inttoptr(a, fptr), align=4) for a in at]

        sums = cgutils.alloca_once(builder, _FLOATS, size=2)
        for i, value in enumerate(halves(src)):
            builder.store(value, builder.gep(sums, [_I32(i)]))

        def add(more):  # type: ignore[no-untyped-def]
            for i, value in enumerate(more):
                at = builder.gep(sums, [_I32(i)])
                builder.store(builder.fadd(builder.load(at), value), at)

        with builder.if_then(builder.icmp_signed("!=", bias, _I64(0))):
            add(halves(bias))
        with builder.if_then(builder.icmp_signed("!=", res, _I64(0))):
            words = builder.load(builder.inttoptr(res, _WORDS.as_pointer()), align=4)
            low, high = pair_halves(builder, words)
            half = TILE // 2  # channels 2 q and 2 q + 1 side by side again
            order = [[q // 2 + (TILE if q % 2 else 0) + h * half for q in range(TILE)]
                     for h in range(2)]  # fmt: skip
            add([builder.shuffle_vector(low, high, ir.Constant(ir.VectorType(_I32, TILE), o))
                 for o in order])  # fmt: skip
        values = [builder.load(builder.gep(sums, [_I32(i)])) for i in range(2)]
        with builder.if_else(builder.icmp_signed("==", dst, _I64(0))) as (back, rounded):
            with back:
                for i, value in enumerate(values):
                    at = builder.add(src, _I64(4 * TILE * i))
                    builder.store(value, builder.inttoptr(at, fptr), align=4)
            with rounded:
                with_relu = builder.icmp_signed("!=", relu, _I64(0))
                cut = [builder.select(builder.fcmp_ordered("<", v, zero), zero, v) for v in values]
                values = [builder.select(with_relu, c, v) for c, v in zip(cut, values)]
                builder.store(run_bits(builder, *values),
                              builder.inttoptr(dst, _WORDS.as_pointer()), align=4)  # fmt: skip
        return context.get_dummy_value()

    return nt.void(*(nt.int64,) * 5), codegen


@jit(**_OPTS)
def rows_of(w, taps):  # type: ignore[no-untyped-def]
    """The ``"taps"`` rows of the ``"tiles"`` weight ``w`` (int16 ``(o, kp)``,
    `rvm.kernels.reference.bf16.tile_pairs`), in a new array: for a convolution the turned
    walk does not take (a CPU without AMX)."""
    o, kp = w.shape
    k2 = kp // 2
    steps = k2 // TILE
    rows = np.empty((o, kp), np.int16)
    src, dst = w.ctypes.data, rows.ctypes.data
    for band in range(o // (2 * TILE)):
        for s in range(steps):
            t, g = s // (steps // taps), s % (steps // taps)
            for h in range(2):
                at = src + _STEP * (band * steps + s) + h * _TILE_BYTES
                o0 = band * 2 * TILE + h * TILE
                _turn(at, 4 * TILE, TILE, TILE, dst + 4 * (o0 * k2 + t * (k2 // taps) + g * TILE),
                      4 * k2)  # fmt: skip
    return rows


@jit(**_OPTS)
def _layout(table, taps, k2, size, n):  # type: ignore[no-untyped-def]
    """`_gather`'s scratch for ``n`` positions through the tap table at ``table``: (its
    phases, positions a phase, channel pairs a position, the positions the taps read, and
    each step's offset into it, int64 bytes: tap ``t``'s pairs [16 g, 16 g + 16) at step ``t
    * ceil(cg2 / 16) + g``)."""
    cg2 = k2 // taps
    groups = (cg2 + TILE - 1) // TILE
    c2p = groups * TILE
    words = ints_at(table)
    phase = cg2 * size
    slots, reach = 1, 0
    for t in range(taps):
        slots = max(slots, words[t * cg2] // phase + 1)
        reach = max(reach, words[t * cg2] % phase)
    span = n + reach
    room = (span + 2 * BLOCK_COLS - 1) // BLOCK_COLS * BLOCK_COLS  # whole blocks, read past n
    shifts = np.empty(taps * groups, np.int64)
    for t in range(taps):
        first = words[t * cg2]
        for g in range(groups):
            shifts[t * groups + g] = 4 * ((first // phase * room + first % phase) * c2p + g * TILE)
    return slots, room, c2p, span, shifts


@jit(**_OPTS)
def _gather(plane, size, cg2, slots, span, room, c2p, to):  # type: ignore[no-untyped-def]
    """Words [0, span) of the ``slots`` phases' ``cg2`` channel pairs of the pair plane at
    ``plane`` (int64; phase ``s``'s pair ``c2`` at ``4 * (s * cg2 + c2) * size`` bytes) as
    positions by pairs at ``to``: phase ``s``'s position ``p`` the ``c2p`` words at ``4 * (s *
    room + p) * c2p`` bytes, pairs past ``cg2`` 0; 16 positions' 16 pairs at a time, turned in
    registers (`_turn`)."""
    for s in range(slots):
        for g in range(0, c2p, TILE):
            for p0 in range(0, span, TILE):
                src = plane + 4 * ((s * cg2 + g) * size + p0)
                dst = to + 4 * ((s * room + p0) * c2p + g)
                _turn(src, 4 * size, max(0, min(TILE, cg2 - g)), min(TILE, span - p0), dst,
                      4 * c2p)  # fmt: skip


@jit(**_OPTS)
def _positions(table, taps, k2, size, across):  # type: ignore[no-untyped-def]
    """Each step's offset (int64 bytes) into a plane of positions by ``across`` channel pairs
    read through the tap table at ``table`` (a phase's pairs ``size`` words apart: the
    channel plane's table; tap ``t``'s pairs [16 g, 16 g + 16) at step ``t * cg2 / 16 + g``),
    and the positions past a block's first the taps reach."""
    cg2 = k2 // taps
    groups = cg2 // TILE
    words = ints_at(table)
    phase = cg2 * size
    shifts = np.empty(taps * groups, np.int64)
    reach = 0
    for t in range(taps):
        moved = words[t * cg2] % phase  # the tap's move in positions (stride 1: one phase)
        reach = max(reach, moved)
        for g in range(groups):
            shifts[t * groups + g] = 4 * (moved * across + g * TILE)
    return shifts, reach


@jit(**_OPTS)
def _walk(w, m0, m1, plane, table, taps, k2, size, n, bias, act, to, across, limit):  # type: ignore[no-untyped-def]  # noqa: E501
    """Output channels [m0, m1) (``m0`` a multiple of 32) at a run of ``n`` positions of a
    convolution (int64 addresses), turned around: ``C.T = X.T @ W.T`` on AMX's tiles, each 32 x
    32 block of sums put where the `rvm.kernels.amx.BLOCK_OUT` record ``to`` says, with the
    bias (at ``bias``, 0: none; one value an output channel) and the activation ``act``, as
    `rvm.kernels.amx.walk` does with ``to``, or, where the record's kind is `POSITIONS`, each
    position's 32 channels rounded into one line of a plane of positions (`_lines`: with no
    residual or a pair plane's or a plane of positions', ``act`` at most a ReLU); a residual
    of positions is added by position (`_lines`) before the block goes out in channel rows.
    ``w`` is the weight's ``"tiles"`` (`rvm.kernels.reference.bf16.tile_pairs`); the run's
    position ``j`` reads tap ``t``'s channel pair ``c2`` at word ``j + table[t * cg2 + c2]``
    of the pair plane at ``plane`` (a phase's pairs ``size`` words apart), copied first as
    the positions' rows of A (`_gather`: the words this run reads, on this thread). With
    ``across`` > 0 ``plane`` is instead a plane of positions by ``across`` channel pairs (its
    ``limit`` positions from the run's first readable), A's rows as they lie: the blocks that
    would read past its end read a copy of its last positions."""
    if m1 <= m0 or n <= 0:
        return
    first_copied, copied = n, 0  # positions read from a copy of the plane's last ones
    if across > 0:
        shifts, reach = _positions(table, taps, k2, size, across)
        lda_x, words = 4 * across, 0
        read = BLOCK_COLS + reach  # the positions a block reads from its first
        last = (n - 1) // BLOCK_COLS * BLOCK_COLS
        if last + read > limit:
            first_copied = max(0, (limit - read) // BLOCK_COLS * BLOCK_COLS)
            while first_copied + read <= limit:
                first_copied += BLOCK_COLS
            copied = last + read - first_copied
            words = copied * across
    else:
        slots, room, c2p, span, shifts = _layout(table, taps, k2, size, n)
        lda_x, words = 4 * c2p, slots * room * c2p
    steps = shifts.size
    bands = (m1 - m0 + 2 * TILE - 1) // (2 * TILE)
    desc = ints_at(to)
    lines, added = desc[0] == POSITIONS, desc[6] == POSITIONS
    plain = np.empty(BLOCK_OUT, np.int64)  # `to` for `block_out`: a residual of positions
    for i in range(BLOCK_OUT):  # added by `_lines` already
        plain[i] = desc[i]
    plain[6] = 0 if added else plain[6]
    # scratch: the positions' pairs (or the plane's last ones), a block of sums, the same
    # turned into channel rows, a pair plane residual's words turned (a block's, and the 16
    # rows `_turn` writes past its last), the tile configuration; 64-byte aligned
    sizes = np.array([4 * words, 4096, 4096, 4 * TILE * (BLOCK_COLS + TILE), 64])
    scratch = np.empty((sizes.sum() + 64) // 4, dtype=np.int32)
    at_x = (scratch.ctypes.data + 63) // 64 * 64
    at_c, at_e = at_x + sizes[0], at_x + sizes[0] + sizes[1]
    at_t = at_e + sizes[2]
    if across == 0:
        _gather(plane, size, k2 // taps, slots, span, room, c2p, at_x)
    elif copied > 0:
        kept = 4 * (limit - first_copied) * across
        _copy_bytes(plane + 4 * first_copied * across, at_x, kept, 4 * words)
    configure(at_t + sizes[3])
    # each band of channels along the positions (its weight's tiles in L1 as it goes), or,
    # for a 1 x 1 whose weight stays in L2, every band at each block of positions in turn: a
    # position's lines out and added one after the other, not a band's strided through the
    # image (resnet50's 64 -> 256 on 56 x 56 with a residual, one thread: 335 -> 268 us)
    blocks = (n + BLOCK_COLS - 1) // BLOCK_COLS
    by_positions = lines and taps == 1 and _STEP * steps * bands <= BLOCK_BYTES
    for t in range(bands * blocks):
        band, jb = (t % bands, t // bands) if by_positions else (t // blocks, t % blocks)
        i0 = m0 + band * 2 * TILE
        rows = min(2 * TILE, m1 - i0)
        at_b = w + _STEP * (i0 // (2 * TILE)) * steps
        j0 = jb * BLOCK_COLS  # C's rows: positions; its columns: channels
        cols = min(BLOCK_COLS, n - j0)
        a0 = at_x + lda_x * j0
        if across > 0:
            a0 = plane + lda_x * j0 if j0 < first_copied else at_x + lda_x * (j0 - first_copied)
        soon, ahead = 0, 0
        if j0 == 0:  # the band's weight from memory: each step's tiles fetched ahead
            soon, ahead = at_b + _STEP * AHEAD, steps * _STEP // 64
        _block(a0, a0 + lda_x * TILE, lda_x, shifts.ctypes.data, at_b, steps, at_c,
               1 if cols > TILE else 0, 1 if rows > TILE else 0, soon, ahead)  # fmt: skip
        if lines or added:  # the bias and residual added by position, maybe rounded so
            _lines(at_c, cols, i0, j0, to, bias, act == 1, at_t)
            if lines:
                continue
        for h in range(4):  # positions by channels -> channel rows
            hp, ho = h // 2, h % 2
            _turn(at_c + 4 * (TILE * hp * BLOCK_COLS + TILE * ho), 4 * BLOCK_COLS, TILE, TILE,
                  at_e + 4 * (TILE * ho * BLOCK_COLS + TILE * hp), 4 * BLOCK_COLS)  # fmt: skip
        if act > 1:  # a GELU first; a bias and ReLU as the sums are rounded
            tile_rows(at_e, BLOCK_COLS, rows, cols, bias + 4 * i0 if bias else 0, act, 0)
        block_out(at_e, BLOCK_COLS, rows, cols, i0, j0, plain.ctypes.data,
                  0 if act > 1 or added else bias, act == 1)  # fmt: skip
    release()
    alive(scratch)
    alive(shifts)
    alive(plain)


@jit(**_OPTS)
def _copy_bytes(src, dst, kept, size):  # type: ignore[no-untyped-def]
    """``kept`` bytes from ``src`` to ``dst``, then 0 up to ``size`` bytes (int64 addresses,
    whole words)."""
    a, b = ints_at(src), ints_at(dst)
    copy(b, a, kept // 8)
    for i in range(kept // 8, size // 8):
        b[i] = 0


@jit(**_OPTS)
def _lines(edge, cols, i0, j0, to, bias, relu, turned):  # type: ignore[no-untyped-def]
    """A block's sums (``cols`` positions from the run's ``j0``, each a row of 32 output
    channels from ``i0`` at ``edge``, rows `BLOCK_COLS` floats apart), each plus its channel's
    bias (at ``bias``, 0: none) and the residual the `BLOCK_OUT` record ``to`` gives (kind 2,
    a pair plane's: its words first turned into ``turned``, a position's 16 a line; kind
    `POSITIONS`, a plane of positions': read as they lie): rounded (ReLU'd with ``relu``)
    into the plane of positions ``to`` describes where its kind is `POSITIONS`, one line of
    16 pair words a position, else left in the block as float32 (`_line`). Positions past
    the image's width are dropped."""
    desc = ints_at(to)
    out, across, row_out, wp, ow = desc[1], desc[2], desc[3], desc[4], desc[5]
    kind, res, ld_res, row_res = desc[6], desc[7], desc[8], desc[9]
    lines = desc[0] == POSITIONS
    at_bias = bias + 4 * i0 if bias != 0 else 0
    y, x = j0 // wp, j0 % wp
    if kind == 2:  # each run of the block's positions in one of the image's rows, turned
        r, yy, xx = 0, y, x
        while r < cols:
            run = min(cols - r, wp - xx)
            if xx < ow:
                at = res + 4 * (i0 // 2 * ld_res + yy * row_res + xx)
                for k in range(0, min(run, ow - xx), TILE):
                    _turn(at + 4 * k, 4 * ld_res, TILE, min(TILE, ow - xx - k),
                          turned + 4 * TILE * (r + k), 4 * TILE)  # fmt: skip
            r, yy, xx = r + run, yy + 1, 0
    if kind == POSITIONS:  # the next block's lines hinted into L2 (a band's lie a position apart)
        yy, xx = (j0 + BLOCK_COLS) // wp, (j0 + BLOCK_COLS) % wp
        for _ in range(BLOCK_COLS):
            prefetch_l2(res + 4 * ((yy * row_res + xx) * ld_res + i0 // 2))
            xx += 1
            if xx == wp:
                yy, xx = yy + 1, 0
    for r in range(cols):
        if x < ow:
            line = 0
            if kind == 2:
                line = turned + 4 * TILE * r
            elif kind == POSITIONS:
                line = res + 4 * ((y * row_res + x) * ld_res + i0 // 2)
            dst = out + 4 * ((y * row_out + x) * across + i0 // 2) if lines else 0
            _line(edge + 4 * r * BLOCK_COLS, at_bias, line, 1 if relu else 0, dst)
        x += 1
        if x == wp:
            y, x = y + 1, 0


@jit(**_OPTS)
def _absent(w, m0, m1, plane, table, taps, k2, size, n, bias, act, to, across, limit):  # type: ignore[no-untyped-def]  # noqa: E501
    """Nothing: `walk` where the target has no AMX, never called (a weight in tiles is turned
    back into rows there, `rows_of`); LLVM cannot even select a tile instruction for such a
    target."""


walk = _walk if AMX else _absent
"""The turned walk (`_walk`), or where the target has none a stand-in never called."""
