"""The int8 convolution turned around, in LLVM IR: output channels along the lanes.

`rvm.kernels.qtile`'s micro-kernel puts a convolution's output positions along the lanes and
broadcasts the weight's rows; a small map wastes lanes there (7 x 7's 49 positions are 64
columns, or a wide tile and a dot). Turned around (as `rvm.kernels.bf16conv` turns its bf16
convolution), the tile is up to `MR` output positions by `VECTORS` vectors of `LANES` output
channels: each position's 4 input channels at a tap (one 32-bit word of the image that
`rvm.kernels.qcolumns.image` makes) broadcast, the weight read a vector of channels at a time
from its turned layout (`turn_weight`: for each quad of depth, every channel's 4 bytes side by
side), one ``vpdpbusd`` per accumulator. A tile of `MR` - 1 positions has its own loop
(`rvm.kernels.bf16turned.position_tiles`: 49 positions are 7 tiles of 7, none computed twice).

The sums start from the channels' shifts and are requantized in registers as
`rvm.kernels.qtile`'s epilogue does (scaled in float32, rounded half to even as they convert,
packed to bytes with saturation, clipped), the scales now a vector of channels; then each
vector's `MR` positions of 16 channels are put channel-major by one byte permutation into two
registers of 8 channels x 8 positions, and each channel's bytes are stored with one masked
store at its row of the NCHW output. Without an epilogue record the int32 sums are stored,
a row per position. `qconv2d_turned` drives it: the image as `rvm.kernels.qconv`'s direct
method builds it, weight panels split over the pool (the task ``qgemm_turned``).
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels import parfor, workpool
from rvm.kernels.bf16gemm import _no_unroll
from rvm.kernels.bf16turned import position_tiles
from rvm.kernels.jitting import jit
from rvm.kernels.qcolumns import image
from rvm.kernels.qconv import byte_shift, tap_offsets
from rvm.kernels.qepilogue import EPILOGUE, Requantizer
from rvm.kernels.qgemm import (
    _OPTS,
    PIECES_PER_THREAD,
    _requantize,
)
from rvm.kernels.qgemm import _epilogue as _epilogue_record
from rvm.kernels.qsplit import F32, I8, I32, I64, SPLIT_MIN, U8, pointer_at
from rvm.kernels.qtile import LANES, MR, VNNI, _vpdpbusd
from rvm.kernels.vectors import first_lanes

__all__ = [
    "NR",
    "SUM_PASS",
    "TURN_GAIN",
    "VECTORS",
    "micro_turned",
    "qconv2d_turned",
    "qconv2d_turned_bytes",
    "turn_weight",
    "turned",
]

VECTORS = 2  # vectors of channels a tile: 16 accumulators, as `rvm.kernels.qtile`'s
NR = VECTORS * LANES
TURN_GAIN = 1.02
"""How much more of its lanes' work (`turned`) a turned convolution must use than the direct
one to take it. One Zen 4 core, warm: turned/direct time 0.74-0.80 at 7 x 7 (3 x 3, also from
stride 2), 0.86 at 14 x 14, 0.93 at 28 x 28, 0.83 at 13 x 13, 0.89-0.99 for 1 x 1 at 7 x 7
and 14 x 14 (lane ratios 1.04-1.31 with the sums); 1.0-1.07 where the ratio is 1.0-1.02 (1 x 1
at 27 x 27 to 56 x 56; 1.22 for 16 channels in)."""
SUM_PASS = 4
"""What the direct method's pass over its weight for the channels' sums costs, in its
multiply-adds per weight byte (the turned weight carries its sums): 25 us of 287 at 2048 ->
512 channels, 7 x 7."""


def turn_weight(w: np.ndarray, width: int = NR) -> np.ndarray:
    """An OHWI int8 weight ``(o, kh, kw, cg)`` in the turned kernel's layout: int8 ``(panels,
    kh * kw * cq + 1, width, 4)`` (``cq`` = ``cg`` in quads), panel ``t`` holding output
    channels ``t * width``.. (0 past ``o``, and past ``cg``): its row ``(u * kw + v) * cq + k``
    each channel's weights of input channels ``4k`` to ``4k + 3`` at tap ``(u, v)``, its last
    row each channel's weight sum, one int32 in its 4 bytes. A panel is one run of bytes, read
    as the kernel walks its depth (a layout with every channel's quad side by side read 128
    bytes of each 2 KB from memory: 1.1-1.4x slower in resnet50)."""
    o, kh, kw, cg = w.shape
    cq, panels = -(-cg // 4), -(-o // width)
    padded = np.zeros((panels * width, kh * kw, 4 * cq), np.int8)
    padded[:o, :, :cg] = w.reshape(o, kh * kw, cg)
    turned = np.zeros((panels, kh * kw * cq + 1, width, 4), np.int8)
    turned[:, :-1] = padded.reshape(panels, width, kh * kw * cq, 4).transpose(0, 2, 1, 3)
    sums = np.zeros(panels * width, np.int32)
    sums[:o] = w.reshape(o, -1).astype(np.int32).sum(axis=1)
    turned[:, -1] = sums.view(np.int8).reshape(panels, width, 4)
    return turned


def turned(og: int, oh: int, ow: int, pitch: int, groups: int) -> bool:
    """Whether a convolution of ``og`` output channels a group, an ``oh`` x
    ``ow`` output, runs turned around (its weight in `turn_weight`'s layout): when its tiles
    use `TURN_GAIN` times the direct tiles' share of the lanes' work. Direct
    (`rvm.kernels.qconv._direct`): the positions with each row's margin (rows ``pitch``
    words apart) in vectors of `LANES` columns, and a pass over the weight for its sums
    (`SUM_PASS`); turned: every position once (`position_tiles`), ``og`` in vectors of
    `LANES`. Only with VNNI, one group and at least `NR` channels (16 leave the turned tile's
    loads unshared: 1.12x the direct time)."""
    npos = oh * ow
    if not VNNI or groups != 1 or og < NR or npos == 0:
        return False
    columns = -(-((oh - 1) * pitch + ow) // LANES) * LANES
    direct_use = npos / columns / (1 + SUM_PASS / npos)
    tiles, full = position_tiles(npos, MR)
    computed = full * MR + (tiles - full) * (MR - 1)
    turned_use = npos / computed * og / (-(-og // LANES) * LANES)
    return turned_use >= TURN_GAIN * direct_use


@intrinsic
def micro_turned(typingctx, taps, offsets, quads, a, lda, pos, b, ldb, rows, vectors, epi, o0,
                 p0, cols, c, ldc):  # type: ignore[no-untyped-def]  # fmt: skip
    """On int64 addresses, ``rows`` (up to `MR`) output positions by ``vectors`` (1 or 2)
    vectors of `LANES` output channels: position ``i``'s quad ``s`` of tap ``t`` is the
    uint8 word at ``a + 4 * pos[i] + offsets[t] + s * lda`` (``pos``, ``offsets``: int64
    arrays' addresses), broadcast; the channels' int8 words of that quad the vectors at
    ``b + (t * quads + s) * ldb``. ``epi`` 0: the int32 sums stored at ``c``, a row of
    ``ldc`` values per position; else the address of a `rvm.kernels.qepilogue.EPILOGUE` record:
    the sums start from the shifts of channels ``o0``.. and are requantized into its output
    at positions ``p0``.. (the first ``cols`` channels of the tile stored)."""
    sig = nt.void(*(nt.int64,) * 16)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        _code(builder, args)
        return context.get_dummy_value()

    return sig, codegen


def _code(builder: ir.IRBuilder, args: list) -> None:
    """`micro_turned`'s body: one loop per (vectors, height), chosen by a switch."""
    i64 = ir.IntType(64)
    rows, vectors = args[8], args[9]
    kinds = [(v, h) for v in range(1, VECTORS + 1) for h in (MR, MR - 1)]
    blocks = [builder.append_basic_block(f"turned{v}_{h}") for v, h in kinds]
    done = builder.append_basic_block("turned")
    short = builder.zext(builder.icmp_signed("==", rows, i64(MR - 1)), i64)
    switch = builder.switch(builder.add(builder.mul(vectors, i64(2)), short), blocks[0])
    for block, (v, h) in zip(blocks, kinds):
        switch.add_case(i64(2 * v + (h == MR - 1)), block)
        builder.position_at_end(block)
        _tile(builder, args, v, h)
        builder.branch(done)
    builder.position_at_end(done)


def _tile(builder: ir.IRBuilder, args: list, vectors: int, height: int) -> None:
    """The loop of ``vectors`` vectors by ``height`` positions, then its stores."""
    taps, offsets, quads, a, lda, pos, b, ldb, rows, _, epi, o0, p0, cols, c, ldc = args
    i1, i8, i32, i64 = (ir.IntType(n) for n in (1, 8, 32, 64))
    dot, vec = _vpdpbusd(builder)
    masks = ir.VectorType(i1, LANES)
    module = builder.module
    load_words = cgutils.get_or_insert_function(
        module,
        ir.FunctionType(vec, [vec.as_pointer(), i32, masks, vec]),
        "llvm.masked.load.v16i32.p0",
    )
    undef = ir.Constant(vec, ir.Undefined)
    splat = ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)
    a_bytes, b_bytes = (builder.inttoptr(v, i8.as_pointer()) for v in (a, b))
    offs, positions = (builder.inttoptr(v, i64.as_pointer()) for v in (offsets, pos))
    fused = builder.icmp_signed("!=", epi, i64(0))
    # The rows' first bytes (a row past ``rows`` reads row 0's, and is not stored).
    starts = []
    for i in range(height):
        row = builder.select(builder.icmp_signed("<", i64(i), rows), i64(i), i64(0))
        word = builder.load(builder.gep(positions, [row]))
        starts.append(builder.gep(a_bytes, [builder.mul(word, i64(4))]))

    def channel_mask(j):  # type: ignore[no-untyped-def]
        """The lanes of vector ``j`` that are channels of the tile."""
        return first_lanes(builder, builder.sub(cols, i64(j * LANES)), LANES)

    record = builder.inttoptr(epi, i64.as_pointer())
    acc = [[cgutils.alloca_once(builder, vec) for _ in range(vectors)] for _ in range(height)]
    with builder.if_else(fused) as (with_shift, plain):
        with with_shift:  # the sums start from the channels' shifts
            shifts = builder.inttoptr(builder.load(record), i32.as_pointer())
            for j in range(vectors):
                at = builder.bitcast(builder.gep(shifts, [builder.add(o0, i64(j * LANES))]),
                                     vec.as_pointer())  # fmt: skip
                start = builder.call(
                    load_words, [at, i32(4), channel_mask(j), ir.Constant(vec, None)]
                )
                for i in range(height):
                    builder.store(start, acc[i][j])
        with plain:
            for i in range(height):
                for j in range(vectors):
                    builder.store(ir.Constant(vec, None), acc[i][j])
    with cgutils.for_range(builder, taps) as outer:
        tap_at = builder.load(builder.gep(offs, [outer.index]))
        first_quad = builder.mul(outer.index, quads)
        with cgutils.for_range(builder, quads) as inner:
            s = inner.index
            row_a = builder.add(tap_at, builder.mul(s, lda))
            row_b = builder.mul(builder.add(first_quad, s), ldb)
            bs = []
            for j in range(vectors):
                at = builder.gep(b_bytes, [builder.add(row_b, i64(4 * LANES * j))])
                bs.append(builder.load(builder.bitcast(at, vec.as_pointer()), align=1))
            for i in range(height):
                at = builder.gep(starts[i], [row_a])
                word = builder.load(builder.bitcast(at, i32.as_pointer()), align=1)
                av = builder.shuffle_vector(builder.insert_element(undef, word, i32(0)), undef,
                                            splat)  # fmt: skip
                for j in range(vectors):
                    builder.store(builder.call(dot, [builder.load(acc[i][j]), av, bs[j]]),
                                  acc[i][j])  # fmt: skip
            body = builder.basic_block
    body.terminator.set_metadata("llvm.loop", _no_unroll(module))
    with builder.if_else(fused) as (requantize, sums):
        with requantize:
            _epilogue(builder, acc, record, rows, o0, p0, cols, channel_mask)
        with sums:
            cp = builder.inttoptr(c, i32.as_pointer())
            for i in range(height):
                with builder.if_then(builder.icmp_signed("<", i64(i), rows)):
                    for j in range(vectors):
                        at = builder.add(builder.mul(ldc, i64(i)), i64(j * LANES))
                        at = builder.bitcast(builder.gep(cp, [at]), vec.as_pointer())
                        builder.store(builder.load(acc[i][j]), at, align=4)


def _epilogue(builder, acc, record, rows, o0, p0, cols, channel_mask) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """The tile's sums (started from the shifts) requantized and stored: channel ``o0 + o``'s
    bytes of positions ``p0``.. at its row of the output (see the module docstring)."""
    i1, i8, i32, i64 = (ir.IntType(n) for n in (1, 8, 32, 64))
    f32 = ir.FloatType()
    fvec, bytes64 = ir.VectorType(f32, LANES), ir.VectorType(i8, 4 * LANES)
    module = builder.module
    load_floats = cgutils.get_or_insert_function(
        module,
        ir.FunctionType(fvec, [fvec.as_pointer(), i32, ir.VectorType(i1, LANES), fvec]),
        "llvm.masked.load.v16f32.p0",
    )
    store = cgutils.get_or_insert_function(
        module,
        ir.FunctionType(
            ir.VoidType(), [bytes64, bytes64.as_pointer(), i32, ir.VectorType(i1, 4 * LANES)]
        ),
        "llvm.masked.store.v64i8.p0",
    )
    field = [builder.load(builder.gep(record, [i64(k)])) for k in range(EPILOGUE)]
    scales = builder.inttoptr(field[1], f32.as_pointer())
    out = builder.inttoptr(field[2], i8.as_pointer())
    ldo = field[3]
    requantize = Requantizer(builder, field, LANES)
    height, vectors = len(acc), len(acc[0])
    # positions p0 + [0, rows): bits [8q, 8q + rows) of the store of a register's channel q
    lanes = builder.sub(builder.shl(i64(1), rows), i64(1))
    # Byte 8q + p of a register: channel q (of its 8) at position p, from the packed bytes:
    # a pack puts position p < 4's channel 4L + t at byte 16L + 4p + t of its first register
    # (positions 4 to 7 likewise in the second, bytes 64 on in the shuffle).
    order = []
    for half in range(2):
        for q in range(8):
            ch = 8 * half + q
            for p in range(8):
                order.append(64 * (p // 4) + 16 * (ch // 4) + 4 * (p % 4) + ch % 4)
    for j in range(vectors):
        at = builder.gep(scales, [builder.add(o0, i64(j * LANES))])
        scale = builder.call(
            load_floats,
            [
                builder.bitcast(at, fvec.as_pointer()),
                i32(4),
                channel_mask(j),
                ir.Constant(fvec, None),
            ],
        )
        values = [
            requantize.rounded(builder.load(acc[min(i, height - 1)][j]), scale) for i in range(MR)
        ]
        packed = [requantize.bytes(values[4 * g : 4 * g + 4]) for g in range(2)]
        # Every position and channel of the vector: a plain 8-byte store a channel; else
        # masked ones (64 bytes, the channel's bytes selected).
        whole = builder.and_(
            builder.icmp_signed("==", rows, i64(MR)),
            builder.icmp_signed(">=", cols, i64((j + 1) * LANES)),
        )
        for half in range(2):
            mask_ = ir.Constant(ir.VectorType(i32, 4 * LANES), order[64 * half : 64 * half + 64])
            channels = builder.shuffle_vector(packed[0], packed[1], mask_)
            qwords = builder.bitcast(channels, ir.VectorType(i64, 8))
            with builder.if_else(whole) as (plain, masked):
                with plain:
                    for q in range(8):
                        row = builder.add(o0, i64(j * LANES + 8 * half + q))
                        at = builder.gep(out, [builder.add(builder.mul(row, ldo), p0)])
                        value = builder.extract_element(qwords, i32(q))
                        builder.store(value, builder.bitcast(at, i64.as_pointer()), align=1)
                with masked:
                    for q in range(8):
                        o = j * LANES + 8 * half + q  # the channel within the tile
                        row = builder.add(o0, i64(o))
                        at = builder.add(builder.mul(row, ldo), builder.sub(p0, i64(8 * q)))
                        at = builder.bitcast(builder.gep(out, [at]), bytes64.as_pointer())
                        bits = builder.shl(lanes, i64(8 * q))
                        inside = builder.icmp_signed("<", i64(o), cols)
                        bits = builder.select(inside, bits, i64(0))
                        bitmask = builder.bitcast(bits, ir.VectorType(i1, 4 * LANES))
                        builder.call(store, [channels, at, i32(1), bitmask])


# A turned job (int64): its length; the image's address, the bytes between its quads; the
# tap offsets' address, the taps, the quads a tap; the positions' columns' address, the
# positions; the turned weight's address, its panels' width; the channels; the epilogue
# record's address (0: none, the sums go to the scratch); the scratch's address and its row
# (the panels' channels); panels a piece.
_TURNED_JOB = 15


@jit(**_OPTS)
def _turned_part(job, t0, t1):  # type: ignore[no-untyped-def]
    """Weight panels [t0, t1) of a turned job, every position: tiles of up to `NR`
    channels by `MR` or `MR` - 1 positions (`position_tiles`)."""
    words, lda, offs, taps, quads = job[1], job[2], job[3], job[4], job[5]
    pos, npos, wt, width, o, epi = job[6], job[7], job[8], job[9], job[10], job[11]
    scratch, ldc = job[12], job[13]
    panel = 4 * width * (taps * quads + 1)  # a panel's bytes (its depth, then its sums)
    if not VNNI:  # a plain loop: the sums into the scratch (the epilogue is never fused)
        _turned_plain(job, t0, t1, panel)
        return
    tiles, full = position_tiles(npos, MR)
    for t in range(t0, t1):
        for jj in range(0, min(width, o - t * width), NR):
            j0 = t * width + jj
            cols = min(NR, o - j0)
            vectors = (cols + LANES - 1) // LANES
            b = wt + t * panel + 4 * jj
            i0 = 0
            for q in range(tiles):
                rows = min(MR if q < full else MR - 1, npos - i0)
                micro_turned(taps, offs, quads, words, lda, pos + 8 * i0, b, 4 * width, rows,
                             vectors, epi, j0, i0, cols, scratch + 4 * (i0 * ldc + j0),
                             ldc)  # fmt: skip
                i0 += rows


@jit(**_OPTS)
def _turned_plain(job, t0, t1, panel):  # type: ignore[no-untyped-def]
    """`_turned_part` without VNNI: each int32 sum of panels [t0, t1) in a plain loop, into
    the scratch."""
    words, lda, offs, taps, quads = job[1], job[2], job[3], job[4], job[5]
    pos, npos, wt, width, o = job[6], job[7], job[8], job[9], job[10]
    image = nb.carray(pointer_at(words, U8), lda * quads)
    weight = nb.carray(pointer_at(wt, I8), panel * t1)
    taps_at = nb.carray(pointer_at(offs, I64), taps)
    columns = nb.carray(pointer_at(pos, I64), npos)
    sums = nb.carray(pointer_at(job[12], I32), (npos, job[13]))
    for c in range(t0 * width, min(o, t1 * width)):
        at_c = c // width * panel + 4 * (c % width)
        for i in range(npos):
            total = np.int32(0)
            for tap in range(taps):
                for s in range(quads):
                    a = 4 * columns[i] + taps_at[tap] + s * lda
                    b = at_c + 4 * width * (tap * quads + s)
                    for k in range(4):
                        total += np.int32(image[a + k]) * np.int32(weight[b + k])
            sums[i, c] = total


def _turned_task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a turned convolution: a range of weight panels (a pool task)."""
    job = parfor.job(data)
    step = job[14]
    panels = -(-job[10] // job[9])
    _turned_part(job, p * step, min(panels, (p + 1) * step))


parfor.export_task("qgemm_turned", _turned_task)
_run_turned = parfor.runner("qgemm_turned")


@jit(inline="always", **_OPTS)
def qconv2d_turned(x, w, bias, scale, out, x_zero, y_zero, low, high, sh, sw, dh, dw, pt, pl,
                   kh, kw):  # type: ignore[no-untyped-def]  # fmt: skip
    """`rvm.op.qconv2d` (one group) into ``out`` (n, o, oh, ow) of uint8 or int8, turned
    around (`rvm.kernels.qturned`): ``w`` the turned weight ``(panels, kh * kw * cq + 1,
    width, 4)`` (`qturned.turn_weight`, each panel's last row its channels' sums); the
    image as `rvm.kernels.qconv`'s direct method builds it."""
    qconv2d_turned_bytes(x.view(np.uint8), w, bias, scale, out.view(np.uint8), x_zero, y_zero,
                         low, high, sh, sw, dh, dw, pt, pl, kh, kw, byte_shift(x),
                         byte_shift(out) != 0)  # fmt: skip


@jit(inline="always", **_OPTS)
def qconv2d_turned_bytes(x, w, bias, scale, out, x_zero, y_zero, low, high, sh, sw, dh, dw, pt,
                         pl, kh, kw, flip, signed):  # type: ignore[no-untyped-def]  # fmt: skip
    """`qconv2d_turned` on the bytes of ``x`` and ``out`` (uint8 arrays), as
    `rvm.kernels.qconv.qconv2d_bytes`."""
    o, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    cg, npos = x.shape[1], out.shape[2] * out.shape[3]
    cq, taps, width = (cg + 3) // 4, kh * kw, w.shape[2]
    zero = x_zero + flip
    pitch = ow + (kw - 1) * dw // sw
    hp = oh + (kh - 1) * dh // sh
    offsets, slots, used = tap_offsets(kh, kw, sh, sw, dh, dw, hp, pitch)
    words = np.empty((cq, used * hp * pitch), np.uint32)
    pos = np.empty(npos, np.int64)
    for i in range(npos):
        pos[i] = i // ow * pitch + i % ow
    flat = w.reshape(-1).view(np.int32)  # a panel's sums: its last row's words
    sums = np.empty(o, np.int32)
    for c in range(o):
        sums[c] = flat[(c // width * (taps * cq + 1) + taps * cq) * width + c % width]
    narrow = 4 * taps * cq * 255 * 128 < 1 << 30  # |sum| <= 255 * 128 * depth
    panels = -(-o // width)
    for n in range(x.shape[0]):
        if npos == 0 or o == 0:
            break
        image(x, n, 0, cg, sh, sw, pt, pl, hp, pitch, slots, zero, flip, words, 0, cq)
        dest = out[n].reshape(o, npos)
        # Fused only in the VNNI kernels (`_turned_part`'s plain loop fills the scratch).
        epi = np.empty(0, np.int64)
        if VNNI:
            epi = _epilogue_record(sums, zero, bias, scale, 0, y_zero, low, high, dest, npos,
                                   npos, npos, narrow, signed)  # fmt: skip
        scratch = np.empty((npos if epi.size == 0 else 0, panels * width), np.int32)
        job = np.empty(_TURNED_JOB, np.int64)
        job[0], job[1], job[2] = _TURNED_JOB, words.ctypes.data, 4 * words.shape[1]
        job[3], job[4], job[5] = offsets.ctypes.data, taps, cq
        job[6], job[7], job[8], job[9], job[10] = pos.ctypes.data, npos, w.ctypes.data, width, o
        job[11] = epi.ctypes.data if epi.size else 0
        job[12], job[13] = scratch.ctypes.data, panels * width
        parts = 1
        if parfor.threads() > 1 and not workpool.busy():
            work = o * npos * 4 * taps * cq // SPLIT_MIN
            parts = min(PIECES_PER_THREAD * parfor.threads(), panels, work)
        step = -(-panels // max(1, parts))
        job[14] = step
        if panels > step:
            _run_turned(F32, -(-panels // step), job)
        else:
            _turned_part(job, 0, panels)
        if epi.size == 0:  # the sums, requantized as the direct method's are
            acc = np.ascontiguousarray(scratch[:, :o].T)
            _requantize(acc, sums, zero, bias, scale, 0, y_zero, low, high, dest, 0, npos, npos,
                        npos, narrow, 0)  # fmt: skip
