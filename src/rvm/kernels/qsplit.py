"""How `rvm.kernels.qgemm`'s integer products are cut for rvm's pool, and the operand their
pieces make before they multiply.

- `split_plan`: a product of ``og`` rows by ``cols`` columns of ``depth`` is cut into pieces
  of columns, or of rows (output channels) where those share the work out more evenly
  between the threads, from `SPLIT_MIN` multiply-adds a piece, each tile's fixed cost counted
  (`TILE_DEPTHS_FIXED`), a multiple of the threads where there are as many;
- the operand (an int64 record, `PREP` fields named by ``PREP_*``; `operand` writes it,
  `prepare` reads it): a convolution's image (`rvm.kernels.qcolumns.image`) and the im2col
  panel gathered from it (`gather`), or its im2col panel by words (`columns`). A split
  product's first pieces (`makers`) make it, a share of its quads of channels each
  (`quads`), while the multiplying pieces wait for them; an unsplit product's one piece
  making it runs first, in the calling thread, as its one multiplying piece does;
- the job of a product (an int64 record, `JOB` fields named by ``JOB_*``), which
  `rvm.kernels.qgemm` writes and its pieces (runs of its tasks ``qgemm`` and ``qgemm_wide``) read.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numba import types as nt
from numba.extending import intrinsic

from rvm.kernels import parfor
from rvm.kernels.jitting import NO_C_WRAPPER, jit
from rvm.kernels.qcolumns import columns, gather, image
from rvm.kernels.qtile import LANES, MR, NR

__all__ = [
    "SPLIT_MIN",
    "TILE_DEPTHS_FIXED",
    "job",
    "makers",
    "operand",
    "pointer_at",
    "prepare",
    "quads",
    "split_plan",
]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False, **NO_C_WRAPPER)

SPLIT_MIN = (1 << 17) * LANES
"""Multiply-adds a piece keeps at least when a product is split, its tiles' fixed cost counted
(`TILE_DEPTHS_FIXED`). A rule of the vector width, as the float GEMM's
(`rvm.kernels.blas.SPLIT_MIN_MNK`), so that a piece is about the same time of a core's work
on every CPU: 1 << 21 with VNNI's 16 lanes (tuned on a Zen 4); 1 << 20 with AVX2's 8 lanes,
about 13 us of a Zen 3 core's tiles (at 1 << 21 squeezenet's 1 x 1 convolutions, 50-80 us
each, ran on one core while the other waited)."""
TILE_DEPTHS_FIXED = 20
"""What a tile costs besides its multiply-adds (starting it, its loops, the requantizing
epilogue and the stores of its bytes), in depths of its multiply-adds: without VNNI (Zen 3)
about 23 ns a 6 x 16 tile, against 4.7 ns a quad of depth. It weighs on shallow products:
squeezenet's 16-channel 1 x 1s spend half their time there. `split_plan` counts it as work."""

# The job of a product (int64): its length; the weight rows (address, count, stride);
# the panel (bytes: address, size; tap offsets: address, count; quads, ldb, columns, pitch,
# width); the rows' sums; bias and scale (address, size each); x_zero, o0, y_zero, low, high;
# the output's positions and kind (1 int8 else uint8, + 2 stored transposed); the step; the
# output's address; the pieces' axis (0 columns, 1 rows); the operand's record (`PREP`: its
# address), the pieces making it first, and the count of those done.
(JOB_LENGTH, JOB_ROWS, JOB_OG, JOB_DEPTH, JOB_FLAT, JOB_FLAT_SIZE, JOB_OFFSETS, JOB_TAPS,
 JOB_QUADS, JOB_LDB, JOB_COLS, JOB_PITCH, JOB_WIDTH, JOB_SUMS, JOB_BIAS, JOB_BIAS_SIZE,
 JOB_SCALE, JOB_SCALE_SIZE, JOB_ZERO, JOB_O0, JOB_Y_ZERO, JOB_LOW, JOB_HIGH, JOB_POSITIONS,
 JOB_KIND, JOB_STEP, JOB_OUT, JOB_AXIS, JOB_PREP, JOB_MAKERS, JOB_MADE,
 JOB) = range(32)  # fmt: skip

# The operand a product's pieces make before they multiply (int64): its kind (`NONE`: made
# already; `COLUMNS`: an im2col panel by words, `columns`; `IMAGE`: an image, `image`;
# `GATHERED`: an image and the panel gathered from it, `gather`); the input (address, n, c,
# ih, iw); the image, its first channel and channels; kh, kw, sh, sw, dh, dw, pt, pl, oh, ow;
# the fill and the flip; the words (address, quads, plane); hp, pitch; the slots (address,
# count); the taps' offsets (address, count); the gathered panel (address, columns).
(PREP_KIND, PREP_X, PREP_XN, PREP_XC, PREP_XH, PREP_XW, PREP_N, PREP_C0, PREP_CG, PREP_KH,
 PREP_KW, PREP_SH, PREP_SW, PREP_DH, PREP_DW, PREP_PT, PREP_PL, PREP_OH, PREP_OW, PREP_FILL,
 PREP_FLIP, PREP_WORDS, PREP_QUADS, PREP_PLANE, PREP_HP, PREP_PITCH, PREP_SLOTS,
 PREP_SLOT_COUNT, PREP_OFFSETS, PREP_TAPS, PREP_PANEL, PREP_PANEL_COLS,
 PREP) = range(33)  # fmt: skip
NONE, COLUMNS, IMAGE, GATHERED = 0, 1, 2, 3

# Dtype markers for `pointer_at` (never read), shared by the integer kernels.
U8, I8, U32 = np.zeros(0, np.uint8), np.zeros(0, np.int8), np.zeros(0, np.uint32)
I32, F32, I64 = np.zeros(0, np.int32), np.zeros(0, np.float32), np.zeros(0, np.int64)


@intrinsic
def pointer_at(typingctx, address, like):  # type: ignore[no-untyped-def]
    """Address ``address`` (int64) as a pointer to ``like``'s dtype (``like`` an array)."""
    if not isinstance(like, nt.Array):
        return None
    ptr = nt.CPointer(like.dtype)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.inttoptr(args[0], context.get_value_type(ptr))

    return ptr(nt.int64, like), codegen


@jit(**_OPTS)
def _cut(tiles, want, threads):  # type: ignore[no-untyped-def]
    """(tiles a piece, pieces, the slowest thread's tiles) for ``tiles`` tiles cut into at
    most ``want`` pieces, the pieces taken by ``threads`` threads in turn."""
    step = -(-tiles // min(want, tiles))
    pieces = -(-tiles // step)
    return step, pieces, -(-pieces // threads) * step


@jit(**_OPTS, inline="always")
def _first_share(size, piece, threads):  # type: ignore[no-untyped-def]
    """The elements of ``size`` cut in pieces of ``piece`` that the first of ``threads``
    threads takes, the pieces taken in turn: the most any takes."""
    share = 0
    for i in range(0, -(-size // piece), threads):
        share += min(piece, size - i * piece)
    return share


@jit(**_OPTS, inline="always")
def _plan(col_tiles, row_tiles, want, threads):  # type: ignore[no-untyped-def]
    """(rows: 1 else 0, tiles a piece, the slowest thread's tiles) for `split_plan` on these
    tile counts."""
    step, pieces, slowest = _cut(max(col_tiles, 1), want, threads)
    if row_tiles >= 2:
        row_step, row_pieces, row_slowest = _cut(row_tiles, want, threads)
        # The slowest thread's share of the product, rows against columns; as even, the more
        # pieces (a late helper leaves less to the others).
        by_rows, by_cols = row_slowest * col_tiles, slowest * row_tiles
        if by_rows < by_cols or (by_rows == by_cols and row_pieces > pieces):
            return 1, row_step, row_slowest
    return 0, step, slowest


@jit(**_OPTS)
def split_plan(og, depth, cols, threads):  # type: ignore[no-untyped-def]
    """How a product of ``og`` rows (output channels) by ``cols`` columns (`NR` a tile) of
    ``depth`` is cut for ``threads`` threads: (axis, step, pieces), axis 0 pieces of ``step``
    columns, 1 of ``step`` rows; 1 piece: not split (fewer than `SPLIT_MIN` multiply-adds a
    piece, a tile's fixed cost counted: `TILE_DEPTHS_FIXED`), else at most a multiple of the
    threads where there are as many (`parfor.even`). By columns, or by rows when those even
    out the threads better (few positions, many channels: 7 x 7's two tiles of columns,
    14 x 14's seven).

    Whole tiles are counted first; where the cut that gives leaves the first thread more than
    17/16 of the share planned (a last band of a few rows, or a last tile of a few columns, a
    piece of its own), the partial tiles are counted too and the cut made again. Counted whole
    only, squeezenet's 16 rows (two bands of `MR` 6 and one of 4) went in three pieces of a
    band, 6 + 4 rows for one thread, and its 169 columns (10 tiles and 9 columns) in 80 + 80 +
    9; counted again, 128 -> 16 channels on 55 x 55 go in columns (0.77-0.90 of the time at
    two threads on a Zen 3, the old and the new cut in turns in one process), 48 rows by 169
    columns in two pieces of 24 rows; the int8 squeezenet 0.973-0.988 of its time. Shapes whose
    extra piece is small keep the whole tiles' cut: resnet50's 14 x 14 layers (12 tiles and 4
    columns) in 7 pieces of 32 columns, squeezenet's conv10 in 8 of 126 rows."""
    work = og * cols * (depth + TILE_DEPTHS_FIXED)
    want = parfor.pieces(threads, work // SPLIT_MIN)
    col_tiles, row_tiles = cols // NR, og // MR
    if threads < 2 or want < 2 or max(col_tiles, row_tiles) < 2:
        return 0, cols, 1
    rows, step, slowest = _plan(col_tiles, row_tiles, want, threads)
    unit = MR if rows else NR
    if 16 * _first_share(og if rows else cols, step * unit, threads) > 17 * (slowest * unit):
        rows, step, slowest = _plan(-(-cols // NR), -(-og // MR), want, threads)
    if rows:
        return 1, step * MR, -(-og // (step * MR))
    return 0, step * NR, -(-cols // (step * NR))


@jit(**_OPTS)
def job(record, rows, b, sums, bias, scale, zero, o0, y_zero, low, high, positions, kind, step,
        out, axis, prep, threads):  # type: ignore[no-untyped-def]  # fmt: skip
    """Fill ``record`` (`JOB` int64s) as the job of a product of the weight ``rows`` by the
    panel ``b`` (`rvm.kernels.qgemm.panel_of`) into ``out``, cut as `split_plan` says
    (``axis``, ``step``), its operand ``prep`` (`PREP`) made by its first pieces (`makers`,
    for ``threads`` threads)."""
    flat, offsets = b[0], b[1]
    record[:] = 0
    record[JOB_LENGTH], record[JOB_ROWS] = JOB, rows.ctypes.data
    record[JOB_OG], record[JOB_DEPTH] = rows.shape
    record[JOB_FLAT], record[JOB_FLAT_SIZE] = flat.ctypes.data, flat.size
    record[JOB_OFFSETS], record[JOB_TAPS] = offsets.ctypes.data, offsets.size
    record[JOB_QUADS], record[JOB_LDB], record[JOB_COLS] = b[2], b[3], b[4]
    record[JOB_PITCH], record[JOB_WIDTH] = b[5], b[6]
    record[JOB_SUMS], record[JOB_BIAS] = sums.ctypes.data, bias.ctypes.data
    record[JOB_BIAS_SIZE] = bias.size
    record[JOB_SCALE], record[JOB_SCALE_SIZE] = scale.ctypes.data, scale.size
    record[JOB_ZERO], record[JOB_O0], record[JOB_Y_ZERO] = zero, o0, y_zero
    record[JOB_LOW], record[JOB_HIGH] = low, high
    record[JOB_POSITIONS], record[JOB_KIND], record[JOB_STEP] = positions, kind, step
    record[JOB_OUT], record[JOB_AXIS] = out.ctypes.data, axis
    record[JOB_PREP], record[JOB_MAKERS] = prep.ctypes.data, makers(prep, threads)


@jit(**_OPTS)
def operand(kind, x, n, c0, cg, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, fill, flip, words, hp,
            pitch, slots, offsets, panel):  # type: ignore[no-untyped-def]  # fmt: skip
    """The record (`PREP`) of the operand of kind ``kind`` that `prepare` makes from these
    arrays (which its caller keeps alive until the product is done)."""
    prep = np.zeros(PREP, np.int64)
    prep[PREP_KIND], prep[PREP_X] = kind, x.ctypes.data
    prep[PREP_XN], prep[PREP_XC], prep[PREP_XH], prep[PREP_XW] = x.shape
    prep[PREP_N], prep[PREP_C0], prep[PREP_CG] = n, c0, cg
    prep[PREP_KH], prep[PREP_KW], prep[PREP_SH], prep[PREP_SW] = kh, kw, sh, sw
    prep[PREP_DH], prep[PREP_DW], prep[PREP_PT], prep[PREP_PL] = dh, dw, pt, pl
    prep[PREP_OH], prep[PREP_OW], prep[PREP_FILL], prep[PREP_FLIP] = oh, ow, fill, flip
    prep[PREP_WORDS], prep[PREP_QUADS] = words.ctypes.data, words.shape[0]
    prep[PREP_PLANE] = words.shape[1]
    prep[PREP_HP], prep[PREP_PITCH] = hp, pitch
    prep[PREP_SLOTS], prep[PREP_SLOT_COUNT] = slots.ctypes.data, slots.size
    prep[PREP_OFFSETS], prep[PREP_TAPS] = offsets.ctypes.data, offsets.size
    prep[PREP_PANEL], prep[PREP_PANEL_COLS] = panel.ctypes.data, panel.shape[1]
    return prep


@jit(inline="always", **_OPTS)
def quads(prep):  # type: ignore[no-untyped-def]
    """The quads of channels (words of 4) of the operand ``prep`` describes: `prepare` makes
    a range of them (none: made already)."""
    return 0 if prep[PREP_KIND] == NONE else (prep[PREP_CG] + 3) // 4


@jit(**_OPTS)
def makers(prep, threads):  # type: ignore[no-untyped-def]
    """How many of a split product's pieces make its operand (`prepare`): a share of its
    quads a thread (none when it is made already)."""
    return min(quads(prep), threads)


@jit(**_OPTS)
def prepare(prep, k0, k1):  # type: ignore[no-untyped-def]
    """Quads ``[k0, k1)`` of channels (`quads`) of the operand the record ``prep`` describes
    (`PREP`)."""
    kind = prep[PREP_KIND]
    if kind == NONE or k1 <= k0:
        return
    x = nb.carray(pointer_at(prep[PREP_X], U8),
                  (prep[PREP_XN], prep[PREP_XC], prep[PREP_XH], prep[PREP_XW]))  # fmt: skip
    n, c0, cg = prep[PREP_N], prep[PREP_C0], prep[PREP_CG]
    kh, kw, sh, sw = prep[PREP_KH], prep[PREP_KW], prep[PREP_SH], prep[PREP_SW]
    dh, dw, pt, pl = prep[PREP_DH], prep[PREP_DW], prep[PREP_PT], prep[PREP_PL]
    oh, ow, fill, flip = prep[PREP_OH], prep[PREP_OW], prep[PREP_FILL], prep[PREP_FLIP]
    words = nb.carray(pointer_at(prep[PREP_WORDS], U32), (prep[PREP_QUADS], prep[PREP_PLANE]))
    if kind == COLUMNS:
        columns(x, n, c0, cg, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, fill, flip, words, k0, k1)
        return
    hp, pitch = prep[PREP_HP], prep[PREP_PITCH]
    slots = nb.carray(pointer_at(prep[PREP_SLOTS], I64), prep[PREP_SLOT_COUNT])
    image(x, n, c0, cg, sh, sw, pt, pl, hp, pitch, slots, fill, flip, words, k0, k1)
    if kind == GATHERED:
        taps = prep[PREP_TAPS]
        offsets = nb.carray(pointer_at(prep[PREP_OFFSETS], I64), taps)
        panel = nb.carray(pointer_at(prep[PREP_PANEL], U32),
                          (taps * prep[PREP_QUADS], prep[PREP_PANEL_COLS]))  # fmt: skip
        gather(words, offsets, oh, ow, pitch, panel, k0, k1)
