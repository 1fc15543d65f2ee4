"""bf16 products on Intel's AMX tiles, with float32 accumulation.

Where the CPU has AMX-BF16 and the OS lets this process use the tile registers
(`rvm.kernels.cpu.amx_tiles`), every bf16 product that walks C in bands
(`rvm.kernels.bf16gemm.walk`: the direct convolution, the GEMM on pair panels, Winograd's
products, attention) and the dense layers on packed panels (`rvm.kernels.bf16dense`) run here
instead of on ``vdpbf16ps``. One ``tdpbf16ps`` multiplies a 16 x 32 tile of A by a 32 x 16
tile of B into a 16 x 16 tile of float32 sums: 8192 multiply-adds, against 32 for one
``vdpbf16ps``. On a Sapphire Rapids-class core the vector dot product runs at half the
float32 FMAs' rate (so rvm's bf16 ran as float32 there), the tiles at several times it.

The layouts are the bf16 GEMM's (`rvm.kernels.bf16gemm`), and they are already the tiles':

- A's rows hold bf16 pairs along the depth, rows ``lda`` words apart: 16 words of 16 rows are
  an A tile (``lda`` its row stride);
- B's pair rows hold, in each 32-bit word, the bf16 values of two consecutive depths of one
  column: AMX's "VNNI" layout of B, 16 pair rows of 16 words a B tile.

`block` (LLVM's ``llvm.x86.tdpbf16ps`` and the tile loads and stores, through their
tile-numbered intrinsics) computes a 32 x 32 block of C in four accumulator tiles (two of A's
rows by two of B's columns), loading two A and two B tiles a step of 16 pairs of depth; the
tiles' addresses and strides are its arguments, so it reads the operands as they lie or
packed. `walk` feeds it: where the depth is whole steps, A's tiles straight from its rows and
B's from its pair rows where they lie one stride apart (a plane's, a panel's: dense layers and
1 x 1 convolutions); else from copies packed once a walk and padded with zeros (`pack_a`,
`pack_b`: a 3 x 3 convolution's taps gathered through its table, a depth's last step), so one
tile configuration (every tile 16 rows of 64 bytes) serves the whole walk. A block at C's
edges goes through a 32 x 32 scratch; blocks of 16 rows or 16 columns skip their second tiles.
Each block's bias, activation and residual are applied right after it, while it is in cache.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.blockout import BLOCK_OUT, POSITIONS, block_out
from rvm.kernels.cpu import amx_tiles
from rvm.kernels.epilogue import tile, tile_rows
from rvm.kernels.gemmshape import BLOCK_BYTES
from rvm.kernels.jitting import alive, jit
from rvm.kernels.microkernel import floats_at, ints_at
from rvm.kernels.reference.bf16 import STEP_PAIRS

__all__ = [
    "AMX",
    "BLOCK_COLS",
    "BLOCK_ROWS",
    "CHUNK_BYTES",
    "BLOCK_OUT",
    "POSITIONS",
    "TILE",
    "block",
    "block_out",
    "configure",
    "lines_a_step",
    "present_tiles",
    "release",
    "tile_intrinsics",
    "tile_step",
    "pack_a",
    "pack_b",
    "packs_b",
    "walk",
]

AMX = amx_tiles()
"""Whether the bf16 products run on AMX tiles in this process (compiled in: the features
Numba compiles for name AMX only where the OS granted the tiles, `rvm.kernels.cpu`)."""
TILE = STEP_PAIRS  # a tile's rows (its pairs of depth, a step's), its float32 columns
BLOCK_ROWS = 2 * TILE  # rows of C a `block` computes at most: two A tiles
BLOCK_COLS = 2 * TILE  # columns of C a `block` computes at most: two B tiles
_PACKED_ROW = 4 * BLOCK_COLS  # bytes of a pair row of packed B
_STEP = 2 * TILE * 4 * TILE  # bytes of a step (16 pairs) of packed A or B: two tiles
CHUNK_BYTES = BLOCK_BYTES
"""Bytes of B's pair rows a walk keeps in L2 while bands of A run across them (a chunk of
packed blocks), and of A's rows when blocks of B run across them: half of one core's L2
(`rvm.kernels.gemmshape.BLOCK_BYTES`)."""

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

# tile registers: C's four (rows 0-15 | 16-31) x (columns 0-15 | 16-31), A's two, B's two
_C, _A, _B = (0, 1, 2, 3), (4, 5), (6, 7)


def _declare(builder, name, params):  # type: ignore[no-untyped-def]
    kind = ir.FunctionType(ir.VoidType(), params)
    return cgutils.get_or_insert_function(builder.module, kind, name)


_I8, _I32, _I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_PTR = _I8.as_pointer()


@intrinsic
def configure(typingctx, scratch):  # type: ignore[no-untyped-def]
    """Loads the tile configuration: palette 1, all eight tiles 16 rows of 64 bytes (written
    into the 64 bytes at the int64 address ``scratch`` first)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        cfg = builder.inttoptr(args[0], _PTR)
        for at in range(64):
            value = 1 if at == 0 else (64 if 16 <= at < 32 and at % 2 == 0 else 0)
            value = TILE if 48 <= at < 56 else value
            builder.store(_I8(value), builder.gep(cfg, [_I64(at)]))
        builder.call(_declare(builder, "llvm.x86.ldtilecfg", [_PTR]), [cfg])
        return context.get_dummy_value()

    return nt.void(nt.int64), codegen


@intrinsic
def release(typingctx):  # type: ignore[no-untyped-def]
    """Releases the tiles (back to their initial state: no tile state saved on a switch)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        builder.call(_declare(builder, "llvm.x86.tilerelease", []), [])
        return context.get_dummy_value()

    return nt.void(), codegen


def tile_intrinsics(builder):  # type: ignore[no-untyped-def]
    """LLVM's tile load, store, product (``tdpbf16ps``) and zeroing, and the prefetch hint,
    declared in ``builder``'s module."""
    return (
        _declare(builder, "llvm.x86.tileloadd64", [_I8, _PTR, _I64]),
        _declare(builder, "llvm.x86.tilestored64", [_I8, _PTR, _I64]),
        _declare(builder, "llvm.x86.tdpbf16ps", [_I8, _I8, _I8]),
        _declare(builder, "llvm.x86.tilezero", [_I8]),
        _declare(builder, "llvm.prefetch.p0", [_PTR, _I32, _I32, _I32]),
    )


def present_tiles(builder, tall, wide):  # type: ignore[no-untyped-def]
    """(``each_c``, ``tall``, ``wide``): the int64 flags ``tall`` (rows 16-31 of a 32 x 32
    block; 0: rows 0-15 only) and ``wide`` (columns 16-31) as i1, and ``each_c(do)``, which
    emits ``do(t)`` for each accumulator tile ``t`` present."""
    tall = builder.icmp_signed("!=", tall, _I64(0))
    wide = builder.icmp_signed("!=", wide, _I64(0))
    present = [None, wide, tall, builder.and_(tall, wide)]

    def each_c(do):  # type: ignore[no-untyped-def]
        for t in _C:
            if present[t] is None:
                do(t)
            else:
                with builder.if_then(present[t]):
                    do(t)

    return each_c, tall, wide


def lines_a_step(builder, lines, steps):  # type: ignore[no-untyped-def]
    """Of ``lines`` cache lines hinted over a block's ``steps``, how many a step: all of them
    over the steps (none when there are no steps)."""
    some = builder.select(builder.icmp_signed(">", steps, _I64(0)), steps, _I64(1))
    return builder.sdiv(builder.add(lines, builder.sub(some, _I64(1))), some)


def tile_step(builder, ops, index, each, lines, line_at, a, lda, b, ldb, tall, wide):  # type: ignore[no-untyped-def]  # noqa: E501
    """A block's step ``index`` (`tile_intrinsics`' ``ops``): its ``each`` of the ``lines``
    cache lines hinted into L2 (line ``l`` at the int64 ``line_at(l)``), then the loads of its
    A tiles (``a``: rows 0-15's and 16-31's i8 pointers, rows ``lda`` bytes apart) and B tiles
    (``b``: columns 0-15's and 16-31's, ``ldb``) interleaved with the four products, each
    operand loaded just before the product that reads it (the tiles are not renamed: a load
    waits for the products reading its tile); ``tall`` and ``wide`` (i1) as `present_tiles`'."""
    load, _, dot, _, hint = ops
    first = builder.mul(index, each)
    last = builder.select(builder.icmp_signed("<", builder.add(first, each), lines),
                          builder.add(first, each), lines)  # fmt: skip
    with cgutils.for_range_slice(builder, first, last, _I64(1)) as (line, _):
        ahead = builder.inttoptr(line_at(line), _PTR)
        builder.call(hint, [ahead, _I32(0), _I32(2), _I32(1)])  # read, into L2, data
    builder.call(load, [_I8(_A[0]), a[0], lda])
    builder.call(load, [_I8(_B[0]), b[0], ldb])
    builder.call(dot, [_I8(_C[0]), _I8(_A[0]), _I8(_B[0])])
    with builder.if_then(wide):
        builder.call(load, [_I8(_B[1]), b[1], ldb])
        builder.call(dot, [_I8(_C[1]), _I8(_A[0]), _I8(_B[1])])
    with builder.if_then(tall):
        builder.call(load, [_I8(_A[1]), a[1], lda])
        builder.call(dot, [_I8(_C[2]), _I8(_A[1]), _I8(_B[0])])
        with builder.if_then(wide):
            builder.call(dot, [_I8(_C[3]), _I8(_A[1]), _I8(_B[1])])


@intrinsic
def block(typingctx, a0, a1, lda, astep, b0, b1, ldb, bstep, steps, c, ldc, acc, tall, wide,
          soon, soon_ld, soon_gap, soon_lines, b_steps):  # type: ignore[no-untyped-def]  # fmt: skip
    """``C[32, 32] (+)= A @ B`` over ``steps`` steps of 16 pairs of depth (``acc``: add to
    C; ``tall`` 0: rows 0-15 only, ``wide`` 0: columns 0-15 only, the other tiles neither
    loaded, multiplied nor stored), on int64 addresses, the tiles configured
    (`configure`): A's tile of rows 0-15 at
    ``a0 + s * astep`` in step ``s``, of rows 16-31 at ``a1 + s * astep``, its rows ``lda``
    bytes apart; B's tile of columns 0-15 at ``b0 + s * bstep``, of columns 16-31 at ``b1 + s
    * bstep``, its pair rows ``ldb`` bytes apart, or with ``b_steps`` (the address of an int64
    array; 0: none) at ``b0 + b_steps[s]`` and ``b1 + b_steps[s]`` (a convolution's taps in
    turn, each step's pair rows one tap's, read from the plane: `_stride`); C's rows ``ldc``
    bytes apart. Packed
    (`pack_a`, `pack_b`) or as the operands lie, each step's loads and products interleaved
    (`tile_step`). Spread over its steps, a few a step, the block
    also hints L2 to fetch ``soon_lines`` cache lines (0: none), line ``l`` at ``soon + (l //
    2) * soon_ld + (l % 2) * soon_gap``: `_walk`'s next block of B, its two column groups'
    pair rows in turn."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        a0, a1, lda, astep, b0, b1, ldb, bstep, steps, c, ldc, acc, tall, wide = args[:14]
        soon, soon_ld, soon_gap, soon_lines, b_steps = args[14:]
        each_c, tall, wide = present_tiles(builder, tall, wide)
        ops = tile_intrinsics(builder)
        load, store, _, zero, _ = ops
        each = lines_a_step(builder, soon_lines, steps)
        cp = builder.inttoptr(c, _PTR)
        down = builder.mul(ldc, _I64(TILE))
        cs = [cp, builder.gep(cp, [_I64(64)]), builder.gep(cp, [down])]
        cs.append(builder.gep(cp, [builder.add(down, _I64(64))]))
        with builder.if_else(builder.icmp_signed("==", acc, _I64(0))) as (fresh, old):
            with fresh:
                each_c(lambda t: builder.call(zero, [_I8(t)]))
            with old:
                each_c(lambda t: builder.call(load, [_I8(t), cs[t], ldc]))
        with cgutils.for_range(builder, steps) as loop:

            def at(base, stride):  # type: ignore[no-untyped-def]
                return builder.inttoptr(builder.add(base, builder.mul(loop.index, stride)), _PTR)

            fixed = builder.mul(loop.index, bstep)
            with builder.if_else(builder.icmp_signed("==", b_steps, _I64(0))) as (plain, listed):
                with plain:
                    at_plain = builder.block
                with listed:
                    entry = builder.add(b_steps, builder.mul(loop.index, _I64(8)))
                    own = builder.load(builder.inttoptr(entry, _I64.as_pointer()))
                    at_listed = builder.block
            b_off = builder.phi(_I64)
            b_off.add_incoming(fixed, at_plain)
            b_off.add_incoming(own, at_listed)

            def at_b(base):  # type: ignore[no-untyped-def]
                return builder.inttoptr(builder.add(base, b_off), _PTR)

            def line_at(line):  # type: ignore[no-untyped-def]
                row = builder.mul(builder.ashr(line, _I64(1)), soon_ld)
                return builder.add(soon, builder.add(row, builder.mul(builder.and_(line, _I64(1)),
                                                                      soon_gap)))  # fmt: skip

            a = (at(a0, astep), at(a1, astep))
            tile_step(builder, ops, loop.index, each, soon_lines, line_at, a, lda,
                      (at_b(b0), at_b(b1)), ldb, tall, wide)  # fmt: skip
        each_c(lambda t: builder.call(store, [_I8(t), cs[t], ldc]))
        return context.get_dummy_value()

    return nt.void(*(nt.int64,) * 19), codegen


@intrinsic
def _copy_words(typingctx, src, dst, count, width):  # type: ignore[no-untyped-def]
    """``width`` (16 or 32) 32-bit words to the int64 address ``dst``: the first ``count`` of
    them read at ``src``, the rest 0 (masked 16-lane loads, whole stores)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        src, dst, count, width = args
        i1, i32 = ir.IntType(1), ir.IntType(32)
        words, masks = ir.VectorType(i32, TILE), ir.VectorType(i1, TILE)
        wptr = words.as_pointer()
        name = f"llvm.masked.load.v{TILE}i32.p0"
        kind = ir.FunctionType(words, [wptr, i32, masks, words])
        load = cgutils.get_or_insert_function(builder.module, kind, name)
        lanes = ir.Constant(ir.VectorType(_I64, TILE), list(range(TILE)))
        undef = ir.Constant(ir.VectorType(_I64, TILE), ir.Undefined)
        splat = ir.Constant(ir.VectorType(i32, TILE), [0] * TILE)
        for half in range(2):
            with builder.if_then(builder.icmp_signed("<", _I64(half * TILE), width)):
                left = builder.sub(count, _I64(half * TILE))
                one = builder.insert_element(undef, left, i32(0))
                mask = builder.icmp_signed("<", lanes, builder.shuffle_vector(one, undef, splat))
                at_src = builder.inttoptr(builder.add(src, _I64(64 * half)), wptr)
                at_dst = builder.inttoptr(builder.add(dst, _I64(64 * half)), wptr)
                value = builder.call(load, [at_src, i32(4), mask, ir.Constant(words, None)])
                builder.store(value, at_dst, align=4)
        return context.get_dummy_value()

    return nt.void(*(nt.int64,) * 4), codegen


@jit(**_OPTS)
def pack_a(a, lda, rows, k2, to):  # type: ignore[no-untyped-def]
    """A band's ``rows`` (at most `BLOCK_ROWS`) rows of ``k2`` pairs (row ``i`` ``4 * lda * i``
    bytes after ``a``) to ``to`` as `block` reads them: for each step of 16 pairs, the rows
    0-15 then 16-31, each 16 words (a tile: 1 KB); rows past ``rows`` and pairs past ``k2``
    0."""
    steps = (k2 + TILE - 1) // TILE
    for s in range(steps):
        count = min(TILE, k2 - s * TILE)
        for i in range(BLOCK_ROWS):
            out = to + _STEP * s + 4 * TILE * i
            _copy_words(a + 4 * (i * lda + s * TILE), out, count if i < rows else 0, TILE)


@jit(inline="always", **_OPTS)
def _column(b_col, nr, j):  # type: ignore[no-untyped-def]
    """Bytes from a pair row's start to B's column ``j``: ``4 * j`` where columns are adjacent
    words (``b_col`` 4), else in panels of ``nr`` columns ``b_col`` bytes a column apart (a
    multiple of `TILE`: a 16-column group lies in one panel)."""
    return 4 * j if b_col == 4 else b_col * (j - j % nr) + 4 * (j % nr)


@jit(**_OPTS)
def pack_b(b, b_col, nr, ldb, indexed, j0, cols, k2, to):  # type: ignore[no-untyped-def]
    """B's columns [j0, j0 + cols) (at most `BLOCK_COLS`, ``j0`` a multiple of `TILE`), pair
    rows 0 to ``k2``, to ``to`` as `block` reads them: a pair row every `BLOCK_COLS` words,
    columns past ``cols`` and rows past ``k2`` (to a whole step) 0. B as
    `rvm.kernels.bf16gemm.walk` reads it: pair row ``p`` ``4 * ldb * p`` bytes after ``b``
    or, ``indexed``, ``4 * table[p]`` bytes, ``ldb`` the int64 table's address; column ``j``
    `_column` bytes into the row."""
    table = ints_at(ldb)
    for p in range(k2):
        row = b + (4 * table[p] if indexed else 4 * ldb * p)
        out = to + _PACKED_ROW * p
        if b_col == 4:
            _copy_words(row + 4 * j0, out, cols, BLOCK_COLS)
        else:
            for g in range(0, BLOCK_COLS, TILE):
                j = j0 + g
                _copy_words(row + _column(b_col, nr, j), out + 4 * g, max(0, min(TILE, cols - g)),
                            TILE)  # fmt: skip
    for p in range(k2, (k2 + TILE - 1) // TILE * TILE):
        _copy_words(0, to + _PACKED_ROW * p, 0, BLOCK_COLS)


@jit(**_OPTS)
def _stride(b, ldb, indexed, k2, steps):  # type: ignore[no-untyped-def]
    """(first, stride, listed): B's pair row ``p`` at ``first + p * stride`` bytes from ``b``
    for every ``p`` (a plane's rows, a panel's, a table of one step: a 1 x 1 convolution's);
    or, ``listed``, each step of 16 pair rows at one ``stride`` from its own first row,
    ``first + steps[s]`` (a table of taps in tap-major order: a tap's channel pairs,
    `rvm.kernels.bf16planes.tap_table`'s ``taps_first``; ``steps`` int64, a step's room);
    else stride 0 (a table of taps channel by channel)."""
    if not indexed:
        return 0, 4 * ldb, False
    table = ints_at(ldb)
    step = table[1] - table[0] if k2 > 1 else 0
    uniform = True
    for p in range(2, k2):
        if table[p] - table[p - 1] != step:
            uniform = False
            break
    if uniform:
        return 4 * table[0], 4 * step, False
    if k2 % TILE != 0:
        return 0, 0, False
    for s in range(k2 // TILE):
        base = table[s * TILE]
        for r in range(1, TILE):
            if table[s * TILE + r] != base + r * step:
                return 0, 0, False
        steps[s] = 4 * (base - table[0])
    return 4 * table[0], 4 * step, True


@jit(**_OPTS, inline="always")
def _b_as_it_lies(stride, k2, b_col, nr):  # type: ignore[no-untyped-def]
    """Whether `walk` loads B's tiles as B lies: its depth whole steps, its pair rows one
    ``stride`` apart (`_stride`; 0: not), a 16-column group in one panel; else it packs B."""
    return k2 % TILE == 0 and stride != 0 and (b_col == 4 or nr % TILE == 0)


@jit(**_OPTS)
def packs_b(ldb, indexed, k2):  # type: ignore[no-untyped-def]
    """Whether `walk` packs B whole (its columns adjacent words; ``ldb``, ``indexed`` and
    ``k2`` as `walk`'s), where its depth is not whole steps or its pair rows not one stride
    apart a step (a table of taps channel by channel), or reads it tap by tap (`_stride`'s
    ``listed``), packing only its edge block of columns: a convolution cut into more pieces
    than threads would pack it in each (resnet50's 512 -> 512 3 x 3 on 7 x 7 so cut: 1.25x
    the time)."""
    steps = np.empty((k2 + TILE - 1) // TILE, np.int64)
    _, stride, listed = _stride(0, ldb, indexed, k2, steps)
    return listed or not _b_as_it_lies(stride, k2, 4, TILE)


@jit(**_OPTS, inline="always")
def _ahead(b, b_col, nr, stride, j0, k2, band, bands):  # type: ignore[no-untyped-def]
    """`block`'s (``soon``, ``soon_gap``, ``soon_lines``) for band ``band`` of ``bands``: its
    slice of the pair rows of unpacked B's block of columns [j0, j0 + 32) (two 16-column
    groups, pair rows ``stride`` bytes apart from ``b``), which `block` brings into L2 while
    the block before it runs that band: streamed once from memory, the tile loads otherwise
    waited on each line (a 4.7 MB weight read at about 4 GB/s)."""
    lo, hi = band * k2 // bands, (band + 1) * k2 // bands
    at = b + _column(b_col, nr, j0)
    return at + lo * stride, _column(b_col, nr, j0 + TILE) - _column(b_col, nr, j0), 2 * (hi - lo)


@jit(**_OPTS)
def _walk(
    a, lda, m0, m1, b, b_col, nr, ldb, indexed, c, ldc, n, k2, acc, bias, act, res, per_col, to
):  # type: ignore[no-untyped-def]
    """Rows [m0, m1) of ``C[:, :n] (+)= A @ B`` over ``k2`` pairs on AMX tiles (int64
    addresses; A's rows ``lda`` words apart, C's ``ldc`` floats; B as `pack_b` reads it).

    Where the depth is whole steps of 16 pairs, the tiles are loaded from A's rows as they
    lie, and from B's pair rows where they lie at one stride (`_stride`), or at one stride a
    step (a convolution's taps in turn: its plane's words, `block`'s ``b_steps``); else, and
    at C's edges, from packed copies (`pack_a`: a band of `BLOCK_ROWS` rows; `pack_b`: a
    block of `BLOCK_COLS` columns, in chunks of blocks whose copy fits half of L2, each
    packed once). Unpacked B larger than a chunk, A smaller, B not read tap by tap: each
    block of columns across every band (A's
    rows stay in L2, B is read once), each band's blocks bringing a slice of the next block's
    pair rows into L2 as they go (`_ahead`); else each band across the chunk's blocks (C written
    band by band). Each block of
    C (`block`; at C's edges through a 32 x 32 scratch) then gets its epilogue, while it is
    in cache: with a bias's address (0: none), an activation's index (0: none) or a
    residual's (laid out as C; 0: none), ``act(C + bias + R)``, the bias one value a row
    (`tile_rows`), or with ``per_col`` ``act(C + bias) + R``, the bias one value a column
    (`tile`).

    With ``to`` (the address of a `BLOCK_OUT` record; None: none, and this branch left out of
    the code compiled for such calls, which LLVM otherwise compiled worse: a bf16 stem 7-13%
    slower) C is a convolution's output
    rows, and each block, summed into the scratch, goes from there into the output the record
    describes -- the next convolution's pair plane, rounded, or a float32 image -- its bias,
    residual (float32, or a pair plane's) and ReLU applied in the same pass (`block_out`; a
    GELU, with no residual, before it): the float32 sums never leave L1 (``c``, ``ldc``,
    ``acc`` and ``res`` unused)."""
    if m1 <= m0 or n <= 0:
        return
    steps = (k2 + TILE - 1) // TILE
    per_block = steps * _STEP
    whole = k2 % TILE == 0
    b_steps = np.empty(steps, np.int64)
    first, stride, listed = _stride(b, ldb, indexed, k2, b_steps)
    direct_b = _b_as_it_lies(stride, k2, b_col, nr)
    columns_first = direct_b and not listed and (m1 - m0) * 4 * k2 <= CHUNK_BYTES < n * 4 * k2
    chunk = (n + BLOCK_COLS - 1) // BLOCK_COLS
    if not direct_b:
        chunk = max(1, min(chunk, CHUNK_BYTES // per_block))
    # scratch: the chunk's packed B (none unpacked), a band's packed A, an edge block's
    # packed B, C's edge, the tile configuration; 64-byte aligned (a tile row a cache line)
    sizes = np.array([0 if direct_b else chunk * per_block, per_block, per_block, 4096, 64])
    room = np.empty((sizes.sum() + 64) // 4, dtype=np.int32)
    at = (room.ctypes.data + 63) // 64 * 64
    at_b, at_a = at, at + sizes[0]
    at_b1, at_edge = at_a + sizes[1], at_a + sizes[1] + sizes[2]
    edge = floats_at(at_edge)
    configure(at_edge + sizes[3])
    band, packed_col = -1, -1  # the band packed at ``at_a``, the block at ``at_b1``
    epilogue = bias != 0 or act != 0 or res != 0
    for q0 in range(0, n, chunk * BLOCK_COLS):
        q1 = min(n, q0 + chunk * BLOCK_COLS)
        if not direct_b:
            for j0 in range(q0, q1, BLOCK_COLS):
                pack_b(b, b_col, nr, ldb, indexed, j0, min(BLOCK_COLS, n - j0), k2,
                       at_b + (j0 - q0) // BLOCK_COLS * per_block)  # fmt: skip
        bands = (m1 - m0 + BLOCK_ROWS - 1) // BLOCK_ROWS
        blocks = (q1 - q0 + BLOCK_COLS - 1) // BLOCK_COLS
        for t in range(bands * blocks):
            if columns_first:
                i0, j0 = m0 + (t % bands) * BLOCK_ROWS, q0 + (t // bands) * BLOCK_COLS
            else:
                i0, j0 = m0 + (t // blocks) * BLOCK_ROWS, q0 + (t % blocks) * BLOCK_COLS
            rows, cols = min(BLOCK_ROWS, m1 - i0), min(BLOCK_COLS, n - j0)
            soon, gap, soon_lines = 0, 0, 0
            if columns_first and j0 + 2 * BLOCK_COLS <= n:  # the next block's B, a slice a band
                soon, gap, soon_lines = _ahead(b + first, b_col, nr, stride, j0 + BLOCK_COLS,
                                               k2, t % bands, bands)  # fmt: skip
            tall, wide = 1 if rows > TILE else 0, 1 if cols > TILE else 0
            if whole and rows % TILE == 0:  # A's rows as they lie
                a0 = a + 4 * i0 * lda
                a1, a_row, a_step = a0 + 4 * TILE * lda, 4 * lda, 4 * TILE
            else:
                if band != i0:
                    pack_a(a + 4 * i0 * lda, lda, rows, k2, at_a)
                    band = i0
                a0, a1, a_row, a_step = at_a, at_a + _STEP // 2, 4 * TILE, _STEP
            if direct_b and cols % TILE == 0:  # B's pair rows as they lie
                b0 = b + first + _column(b_col, nr, j0)
                b1 = b + first + _column(b_col, nr, j0 + TILE)
                b_row, b_step = stride, TILE * stride
                at_steps = b_steps.ctypes.data if listed else 0
            else:
                at_steps = 0
                at_block = at_b + (j0 - q0) // BLOCK_COLS * per_block
                if direct_b:  # an edge block of unpacked B, packed on its own
                    if packed_col != j0:
                        pack_b(b, b_col, nr, ldb, indexed, j0, cols, k2, at_b1)
                        packed_col = j0
                    at_block = at_b1
                b0, b1, b_row, b_step = at_block, at_block + 4 * TILE, _PACKED_ROW, _STEP
            at_c = c + 4 * (i0 * ldc + j0)
            if to is not None and to != 0:  # into the scratch, thence the output `to` says
                block(a0, a1, a_row, a_step, b0, b1, b_row, b_step, steps, at_edge,
                      4 * BLOCK_COLS, 0, tall, wide, soon, stride, gap, soon_lines,
                      at_steps)  # fmt: skip
                if act > 1:  # a GELU first; a bias and ReLU as the sums are rounded
                    tile_rows(at_edge, BLOCK_COLS, rows, cols, bias + 4 * i0 if bias else 0,
                              act, 0)  # fmt: skip
                block_out(at_edge, BLOCK_COLS, rows, cols, i0, j0, to, 0 if act > 1 else bias,
                          act == 1)  # fmt: skip
                continue
            if rows % TILE == 0 and cols % TILE == 0:  # whole tiles: C as it lies
                block(a0, a1, a_row, a_step, b0, b1, b_row, b_step, steps, at_c, 4 * ldc, acc,
                      tall, wide, soon, stride, gap, soon_lines, at_steps)  # fmt: skip
            else:  # through the scratch: only C's own rows and columns are read or written
                out = floats_at(at_c)
                if acc:
                    for i in range(rows):
                        for j in range(cols):
                            edge[i * BLOCK_COLS + j] = out[i * ldc + j]
                block(a0, a1, a_row, a_step, b0, b1, b_row, b_step, steps, at_edge,
                      4 * BLOCK_COLS, acc, tall, wide, soon, stride, gap, soon_lines,
                      at_steps)  # fmt: skip
                for i in range(rows):
                    for j in range(cols):
                        out[i * ldc + j] = edge[i * BLOCK_COLS + j]
            if epilogue:
                at_res = res + 4 * (i0 * ldc + j0) if res != 0 else 0
                if per_col:
                    at_bias = bias + 4 * j0 if bias != 0 else 0
                    tile(at_c, ldc, rows, cols, at_bias, act, at_res)
                else:
                    at_bias = bias + 4 * i0 if bias != 0 else 0
                    tile_rows(at_c, ldc, rows, cols, at_bias, act, at_res)
    release()
    alive(room)
    alive(b_steps)


@jit(**_OPTS)
def _absent(
    a, lda, m0, m1, b, b_col, nr, ldb, indexed, c, ldc, n, k2, acc, bias, act, res, per_col, to
):  # type: ignore[no-untyped-def]
    """Nothing: `walk` where the target has no AMX, never called (``if AMX`` guards every
    call); LLVM cannot even select a tile instruction for such a target."""


walk = _walk if AMX else _absent
"""The AMX walk (`_walk`), or where the target has none a stand-in never called."""
