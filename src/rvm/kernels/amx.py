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

`block` (LLVM's ``llvm.x86.tdpbf16ps`` and the tile loads and stores, through its
tile-numbered intrinsics) computes ``C[:m, :n] (+)= A[:m] @ B`` for ``m, n <= 32``: four
accumulator tiles (two of A's rows by two of B's columns), two A tiles, two B tiles, the
depth in steps of 16 pairs and a last step of what is left; each shorter edge configured in
the tile's shape (``ldtilecfg``), so no tail needs padding. `walk` feeds it: for each block of
`BLOCK_COLS` columns it copies B's pair rows into one contiguous buffer (a convolution's rows
are read through its tap table, a panel's or a plane's at their stride), then runs every band
of `BLOCK_ROWS` rows of A across that buffer over the whole depth, the band's bias,
activation and residual applied to its block of C right after (in cache).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.cpu import amx_tiles
from rvm.kernels.epilogue import tile, tile_rows
from rvm.kernels.jitting import alive, jit
from rvm.kernels.microkernel import floats_at, ints_at

__all__ = [
    "AMX",
    "BLOCK_COLS",
    "BLOCK_ROWS",
    "CHUNK_BYTES",
    "TILE",
    "block",
    "pack_a",
    "pack_b",
    "walk",
]

AMX = amx_tiles()
"""Whether the bf16 products run on AMX tiles in this process (compiled in: the features
Numba compiles for name AMX only where the OS granted the tiles, `rvm.kernels.cpu`)."""
TILE = 16  # a tile's rows, its float32 columns, its pairs of depth
BLOCK_ROWS = 2 * TILE  # rows of C a `block` computes at most: two A tiles
BLOCK_COLS = 2 * TILE  # columns of C a `block` computes at most: two B tiles
_PACKED_ROW = 4 * BLOCK_COLS  # bytes of a pair row of packed B
_STEP = 2 * TILE * 4 * TILE  # bytes of a step (16 pairs) of packed A or B: two tiles
CHUNK_BYTES = 1 << 19  # packed B a chunk of columns (half of a 1 MB L2)

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

# tile registers: C's four (rows 0-15 | 16-31) x (columns 0-15 | 16-31), A's two, B's two
_C, _A, _B = (0, 1, 2, 3), (4, 5), (6, 7)


def _declare(builder, name, params):  # type: ignore[no-untyped-def]
    kind = ir.FunctionType(ir.VoidType(), params)
    return cgutils.get_or_insert_function(builder.module, kind, name)


_I8, _I16, _I64 = ir.IntType(8), ir.IntType(16), ir.IntType(64)
_PTR = _I8.as_pointer()


@intrinsic
def _configure(typingctx, scratch):  # type: ignore[no-untyped-def]
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
def _release(typingctx):  # type: ignore[no-untyped-def]
    """Releases the tiles (back to their initial state: no tile state saved on a switch)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        builder.call(_declare(builder, "llvm.x86.tilerelease", []), [])
        return context.get_dummy_value()

    return nt.void(), codegen


@intrinsic
def block(typingctx, a, b, steps, c, ldc, acc):  # type: ignore[no-untyped-def]
    """``C[32, 32] (+)= A @ B`` over ``steps`` steps of 16 pairs of depth (``acc``: add to
    C), on int64 addresses, the tiles configured (`_configure`): A packed as `pack_a` writes
    it (a step's two 16 x 16-word tiles, 2 KB a step), B as `pack_b` does (a step's 16 pair
    rows of 32 words), C's rows ``ldc`` bytes apart. Its loads and products interleaved so
    that each product's operands are loaded just before it (the tiles are not renamed: a
    load waits for the products reading its tile)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        a, b, steps, c, ldc, acc = args
        load = _declare(builder, "llvm.x86.tileloadd64", [_I8, _PTR, _I64])
        store = _declare(builder, "llvm.x86.tilestored64", [_I8, _PTR, _I64])
        dot = _declare(builder, "llvm.x86.tdpbf16ps", [_I8, _I8, _I8])
        zero = _declare(builder, "llvm.x86.tilezero", [_I8])
        ap, bp, cp = (builder.inttoptr(v, _PTR) for v in (a, b, c))
        down = builder.mul(ldc, _I64(TILE))
        cs = [cp, builder.gep(cp, [_I64(64)]), builder.gep(cp, [down])]
        cs.append(builder.gep(cp, [builder.add(down, _I64(64))]))
        with builder.if_else(builder.icmp_signed("==", acc, _I64(0))) as (fresh, old):
            with fresh:
                for t in _C:
                    builder.call(zero, [_I8(t)])
            with old:
                for t in _C:
                    builder.call(load, [_I8(t), cs[t], ldc])
        with cgutils.for_range(builder, steps) as loop:
            at_a = builder.gep(ap, [builder.mul(loop.index, _I64(_STEP))])
            at_b = builder.gep(bp, [builder.mul(loop.index, _I64(_STEP))])
            row = _I64(4 * TILE)
            builder.call(load, [_I8(_A[0]), at_a, row])
            builder.call(load, [_I8(_B[0]), at_b, _I64(_PACKED_ROW)])
            builder.call(dot, [_I8(_C[0]), _I8(_A[0]), _I8(_B[0])])
            builder.call(load, [_I8(_B[1]), builder.gep(at_b, [row]), _I64(_PACKED_ROW)])
            builder.call(dot, [_I8(_C[1]), _I8(_A[0]), _I8(_B[1])])
            builder.call(load, [_I8(_A[1]), builder.gep(at_a, [_I64(_STEP // 2)]), row])
            builder.call(dot, [_I8(_C[2]), _I8(_A[1]), _I8(_B[0])])
            builder.call(dot, [_I8(_C[3]), _I8(_A[1]), _I8(_B[1])])
        for t in _C:
            builder.call(store, [_I8(t), cs[t], ldc])
        return context.get_dummy_value()

    return nt.void(*(nt.int64,) * 6), codegen


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


@jit(**_OPTS)
def pack_b(b, b_col, nr, ldb, indexed, j0, cols, k2, to):  # type: ignore[no-untyped-def]
    """B's columns [j0, j0 + cols) (at most `BLOCK_COLS`, ``j0`` a multiple of `TILE`), pair
    rows 0 to ``k2``, to ``to`` as `block` reads them: a pair row every `BLOCK_COLS` words,
    columns past ``cols`` and rows past ``k2`` (to a whole step) 0. B as
    `rvm.kernels.bf16gemm.walk` reads it: pair row ``p`` ``4 * ldb * p`` bytes after ``b``
    or, ``indexed``, ``4 * table[p]`` bytes, ``ldb`` the int64 table's address; column ``j``
    ``4 * j`` bytes into the row (``b_col`` 4), or in panels of ``nr`` columns (a multiple of
    `TILE`) ``b_col * (j - j % nr) + 4 * (j % nr)`` bytes."""
    table = ints_at(ldb)
    for p in range(k2):
        row = b + (4 * table[p] if indexed else 4 * ldb * p)
        out = to + _PACKED_ROW * p
        if b_col == 4:
            _copy_words(row + 4 * j0, out, cols, BLOCK_COLS)
        else:
            for g in range(0, BLOCK_COLS, TILE):
                j = j0 + g
                _copy_words(row + b_col * (j - j % nr) + 4 * (j % nr), out + 4 * g,
                            max(0, min(TILE, cols - g)), TILE)  # fmt: skip
    for p in range(k2, (k2 + TILE - 1) // TILE * TILE):
        _copy_words(0, to + _PACKED_ROW * p, 0, BLOCK_COLS)


@jit(**_OPTS)
def _walk(a, lda, m0, m1, b, b_col, nr, ldb, indexed, c, ldc, n, k2, acc, bias, act, res, per_col):  # type: ignore[no-untyped-def]  # noqa: E501
    """Rows [m0, m1) of ``C[:, :n] (+)= A @ B`` over ``k2`` pairs on AMX tiles (int64
    addresses; A's rows ``lda`` words apart, C's ``ldc`` floats; B as `pack_b` reads it): the
    columns in chunks whose packed B fits half of L2, each chunk's blocks of `BLOCK_COLS`
    columns packed once (`pack_b`), then each band of `BLOCK_ROWS` rows packed (`pack_a`) and
    run across the chunk's blocks over the whole depth (`block`; a block at C's edges through
    a 32 x 32 scratch), the band's epilogue on each block right after, while it is in cache:
    with a bias's address (0: none), an activation's index (0: none) or a residual's (laid
    out as C; 0: none), ``act(C + bias + R)``, the bias one value a row (`tile_rows`), or with
    ``per_col`` ``act(C + bias) + R``, the bias one value a column (`tile`)."""
    if m1 <= m0 or n <= 0:
        return
    steps = (k2 + TILE - 1) // TILE
    per_block = steps * _STEP
    chunk = max(1, min((n + BLOCK_COLS - 1) // BLOCK_COLS, CHUNK_BYTES // per_block))
    packed_b = np.empty(chunk * per_block // 4, dtype=np.int32)
    packed_a = np.empty(per_block // 4, dtype=np.int32)
    edge = np.empty(BLOCK_ROWS * BLOCK_COLS + 16, dtype=np.float32)  # the scratch, the config
    at_b, at_a, at_edge = packed_b.ctypes.data, packed_a.ctypes.data, edge.ctypes.data
    epilogue = bias != 0 or act != 0 or res != 0
    _configure(at_edge + 4 * BLOCK_ROWS * BLOCK_COLS)
    for q0 in range(0, n, chunk * BLOCK_COLS):
        q1 = min(n, q0 + chunk * BLOCK_COLS)
        for j0 in range(q0, q1, BLOCK_COLS):
            pack_b(b, b_col, nr, ldb, indexed, j0, min(BLOCK_COLS, n - j0), k2,
                   at_b + (j0 - q0) // BLOCK_COLS * per_block)  # fmt: skip
        for i0 in range(m0, m1, BLOCK_ROWS):
            rows = min(BLOCK_ROWS, m1 - i0)
            pack_a(a + 4 * i0 * lda, lda, rows, k2, at_a)
            for j0 in range(q0, q1, BLOCK_COLS):
                cols = min(BLOCK_COLS, n - j0)
                at_c = c + 4 * (i0 * ldc + j0)
                from_b = at_b + (j0 - q0) // BLOCK_COLS * per_block
                if rows == BLOCK_ROWS and cols == BLOCK_COLS:
                    block(at_a, from_b, steps, at_c, 4 * ldc, acc)
                else:  # through the scratch: only C's own rows and columns are read or written
                    _edge(at_a, from_b, steps, at_c, ldc, rows, cols, acc, edge)
                if epilogue:
                    at_res = res + 4 * (i0 * ldc + j0) if res != 0 else 0
                    if per_col:
                        at_bias = bias + 4 * j0 if bias != 0 else 0
                        tile(at_c, ldc, rows, cols, at_bias, act, at_res)
                    else:
                        at_bias = bias + 4 * i0 if bias != 0 else 0
                        tile_rows(at_c, ldc, rows, cols, at_bias, act, at_res)
    _release()
    alive(packed_a)
    alive(packed_b)
    alive(edge)


@jit(**_OPTS)
def _edge(at_a, from_b, steps, at_c, ldc, rows, cols, acc, edge):  # type: ignore[no-untyped-def]
    """A `block` at C's edges: on the 32 x 32 ``edge`` (C's part copied in first with
    ``acc``), its ``rows`` x ``cols`` then copied out to C (``ldc`` floats a row)."""
    out = floats_at(at_c)
    if acc:
        for i in range(rows):
            for j in range(cols):
                edge[i * BLOCK_COLS + j] = out[i * ldc + j]
    block(at_a, from_b, steps, edge.ctypes.data, 4 * BLOCK_COLS, acc)
    for i in range(rows):
        for j in range(cols):
            out[i * ldc + j] = edge[i * BLOCK_COLS + j]


@jit(**_OPTS)
def _absent(
    a, lda, m0, m1, b, b_col, nr, ldb, indexed, c, ldc, n, k2, acc, bias, act, res, per_col
):  # type: ignore[no-untyped-def]  # noqa: E501
    """Nothing: `walk` where the target has no AMX, never called (``if AMX`` guards every
    call); LLVM cannot even select a tile instruction for such a target."""


walk = _walk if AMX else _absent
"""The AMX walk (`_walk`), or where the target has none a stand-in never called."""
