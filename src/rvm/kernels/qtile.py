"""The int8 micro-kernels of `rvm.kernels.qgemm`, in LLVM IR: tiles of ``vpdpbusd`` and dots.

`_make_micro` builds the micro-kernel of 1, `VECTORS` or `VECTORS` + 1 vectors of `LANES`
int32 columns (`_micro_tail`, `_micro`, `_micro_wide`): `MR` rows of sums in registers, each
row's 4 bytes broadcast and one ``vpdpbusd`` (AVX-512 VNNI: 64 multiply-adds of uint8 by int8
into int32) per vector for every 4 depths, taps read in place at offsets. `_dot_columns` takes
a product's few last columns past a vector as dot products of each column with each row
(`_row_dot`). Without VNNI, on AVX2 (`MADD16`), the same micro-kernels multiply 16-bit
values by ``vpmaddwd`` (`_madd16_code`: `LANES` 8, `MR` from the register count, a
product's last rows in tiles of fewer) and requantize their sums as those do; without either
`rvm.kernels.qgemm` runs a plain loop.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.cpu import cpu
from rvm.kernels.jitting import jit
from rvm.kernels.planes import U
from rvm.kernels.qepilogue import epilogue_code

__all__ = [
    "DOT_COLUMNS",
    "DOT_DEPTHS",
    "LANES",
    "MADD16",
    "MR",
    "NR",
    "PAIR_BOUND",
    "REGISTERS",
    "TILE_DEPTHS",
    "VECTORS",
    "VNNI",
    "pairs_fit",
]

VNNI = "avx512vnni" in cpu().features
MADD16 = not VNNI and "avx2" in cpu().features
"""Without VNNI, on AVX2: the tiles' products by ``vpmaddwd`` on 16-bit values (`_madd16_code`)."""
LANES = 16 if VNNI else 8  # int32 lanes of the kernels' vectors: zmm with VNNI, else ymm
VECTORS = 2
REGISTERS = cpu().vector_registers
# The vector registers `_madd16_code` keeps besides its sums: the panel's widened vectors, a
# row's broadcast pair (measured on Zen 3: 6 rows of 2 vectors, LLVM spilling one sum and the
# byte shuffles' 2 masks, ran squeezenet's int8 products faster than 5 rows without spills).
MADD16_SPARE = 4
# The ``vpmaddwd`` kernels' tiles of fewer rows than `MR`, for a product's last rows: by
# steps of this many (`_madd16_code`).
SHORT_ROWS = 2
# Rows x VECTORS accumulators: with VNNI 16 of the 32 zmm registers; with ``vpmaddwd`` all the
# others.
MR = 8 if VNNI else (REGISTERS - MADD16_SPARE) // VECTORS
NR = LANES * VECTORS

PAIR_BOUND = 128
"""The most two int8 weights may sum to in magnitude for ``vpmaddubsw`` to be exact: a pair
of products by uint8 values summed into int16, at most 255 x 128 = 32640 (`pairs_fit`)."""

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


def pairs_fit(weight: np.ndarray) -> bool:
    """Whether the int8 ``weight`` (output channels along axis 0) can take the ``vpmaddubsw``
    tiles (`_madd16_code`'s ``pairs``): any two values of one output channel sum to at most
    `PAIR_BOUND` in magnitude, whatever depths the kernels pair (the two largest do). ONNX
    Runtime's ``reduce_range`` weights (7 bits: -64..64) always do; full 8-bit ones, whose
    channels each reach 127, do not."""
    if weight.dtype != np.int8 or weight.ndim < 1 or weight.size == 0:
        return False
    mags = np.abs(weight.reshape(weight.shape[0], -1).astype(np.int16))
    if mags.shape[1] < 2:
        return bool(mags.max() <= PAIR_BOUND)
    largest = np.partition(mags, mags.shape[1] - 2, axis=1)[:, -2:]
    return bool(largest.sum(axis=1).max() <= PAIR_BOUND)


def _vpdpbusd(builder: ir.IRBuilder) -> tuple[ir.Function, ir.VectorType]:
    """``llvm.x86.avx512.vpdpbusd.512`` declared in the builder's module, and its int32
    vector type."""
    vec = ir.VectorType(ir.IntType(32), LANES)
    fnty = ir.FunctionType(vec, [vec, vec, vec])
    return cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.avx512.vpdpbusd.512"), vec


def _make_micro(vectors: int, pairs: bool = False):  # type: ignore[no-untyped-def]
    """The micro-kernel ``micro(taps, offsets, quads, a, lda, b, ldb, c, ldc, rows, swap)`` of
    ``vectors`` vectors of `LANES` columns: on int64 addresses, int32 ``C[:rows, :width] =
    A[:rows, :4 * taps * quads] @ B[:, :width]`` (``width`` = ``vectors * LANES``): A's rows
    ``lda`` bytes apart, broadcast 4 bytes at a time; B by taps, each of ``quads`` quads of
    depth: quad ``s`` of tap ``t`` is ``width`` x 4 bytes at ``b + offsets[t] + s * ldb``
    (``offsets`` the address of int64 byte offsets), loaded `LANES` columns a vector; C's
    rows ``ldc`` values apart. ``swap`` 0: A is uint8 and B int8; 1: A int8, B uint8. Rows
    past ``rows`` read row 0 and are not stored. One tap at offset 0 is a plain panel;
    several read a convolution's taps in place from one image (`rvm.kernels.qconv`). ``epi`` 0: C is
    stored as int32 sums; else the address of an `rvm.kernels.qepilogue.EPILOGUE` record:
    the sums are requantized in registers (`rvm.kernels.qepilogue.epilogue_code`) into its
    uint8/int8 output, as the product's rows ``row``.. and columns ``col``.. (C is not
    written). ``pairs``: without VNNI, A's rows are int8 whose pairs fit 16 bits
    (`_madd16_code`)."""

    @intrinsic
    def micro(typingctx, taps, offsets, quads, a, lda, b, ldb, c, ldc, rows, swap, epi, row,
              col):  # type: ignore[no-untyped-def]  # fmt: skip
        sig = nt.void(*(nt.int64,) * 14)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            if VNNI:
                _micro_code(builder, args, vectors)
            else:
                _madd16_code(builder, args, vectors, pairs)
            return context.get_dummy_value()

        return sig, codegen

    return micro


def _addresses(builder: ir.IRBuilder, args: list) -> tuple:
    """Both micro-kernel bodies' operands as pointers -- A's and B's bytes, the taps' int64
    offsets, C's int32 sums -- and the byte offset in A of each of the `MR` rows (a row past
    ``rows`` reads row 0)."""
    _taps, offsets, _quads, a, lda, b, _ldb, c, _ldc, rows = args[:10]
    i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    a_bytes, b_bytes = (
        builder.inttoptr(a, i8.as_pointer()),
        builder.inttoptr(b, i8.as_pointer()),
    )
    offs = builder.inttoptr(offsets, i64.as_pointer())
    cp = builder.inttoptr(c, i32.as_pointer())
    a_rows = [
        builder.mul(builder.select(builder.icmp_signed("<", i64(i), rows), i64(i), i64(0)), lda)
        for i in range(MR)
    ]
    return a_bytes, b_bytes, offs, cp, a_rows


def _start_sums(builder: ir.IRBuilder, acc: list, rows, epi, row, first: int) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """With an epilogue record ``epi`` (fused), the tile's sums ``acc`` (rows ``first``..)
    start from the rows' shifts (a row past ``rows``, row 0's); they are zero without."""
    i32, i64 = ir.IntType(32), ir.IntType(64)
    vec = ir.VectorType(i32, LANES)
    undef = ir.Constant(vec, ir.Undefined)
    splat = ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)
    with builder.if_then(builder.icmp_signed("!=", epi, i64(0))):
        record = builder.inttoptr(epi, i64.as_pointer())
        shifts = builder.inttoptr(builder.load(record), i32.as_pointer())
        for i in range(len(acc)):
            inside = builder.icmp_signed("<", i64(first + i), rows)
            r = builder.add(row, builder.select(inside, i64(first + i), i64(0)))
            word = builder.load(builder.gep(shifts, [r]))
            start = builder.shuffle_vector(
                builder.insert_element(undef, word, i32(0)), undef, splat
            )
            for slot in acc[i]:
                builder.store(start, slot)


def _finish(builder: ir.IRBuilder, acc: list, rows, epi, row, col, first: int, cp, ldc) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """The tile's sums ``acc`` (rows ``first``..) requantized into the output of the record
    ``epi`` (`rvm.kernels.qepilogue.epilogue_code`), or without one stored as int32 at
    ``cp``, rows ``ldc`` apart (the rows past ``rows`` dropped)."""
    i64 = ir.IntType(64)
    vec = ir.VectorType(ir.IntType(32), LANES)
    with builder.if_else(builder.icmp_signed("!=", epi, i64(0))) as (fused, sums):
        with fused:
            epilogue_code(builder, acc, rows, epi, row, col, first, LANES)
        with sums:
            for i in range(len(acc)):
                with builder.if_then(builder.icmp_signed("<", i64(first + i), rows)):
                    for j in range(len(acc[i])):
                        at = builder.add(builder.mul(ldc, i64(first + i)), i64(j * LANES))
                        at = builder.bitcast(builder.gep(cp, [at]), vec.as_pointer())
                        builder.store(builder.load(acc[i][j]), at, align=4)


def _micro_code(builder: ir.IRBuilder, args: list, vectors: int) -> None:
    """The body of `_make_micro`'s kernel of ``vectors`` vectors."""
    taps, offsets, quads, a, lda, b, ldb, c, ldc, rows, swap, epi, row, col = args
    i32, i64 = ir.IntType(32), ir.IntType(64)
    dot, vec = _vpdpbusd(builder)
    zero, undef = ir.Constant(vec, None), ir.Constant(vec, ir.Undefined)
    splat = ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)
    a_bytes, b_bytes, offs, cp, a_rows = _addresses(builder, args)

    def step(swapped, acc, tap, s, a_rows):  # type: ignore[no-untyped-def]
        """Quad ``s`` of tap ``tap``: one ``vpdpbusd`` per accumulator."""
        row_b = builder.add(builder.load(builder.gep(offs, [tap])), builder.mul(s, ldb))
        bs = []
        for j in range(vectors):
            at = builder.gep(b_bytes, [builder.add(row_b, i64(4 * LANES * j))])
            bs.append(builder.load(builder.bitcast(at, vec.as_pointer()), align=1))
        depth = builder.mul(builder.add(builder.mul(tap, quads), s), i64(4))
        for i, a_row in enumerate(a_rows):
            at = builder.gep(a_bytes, [builder.add(a_row, depth)])
            word = builder.load(builder.bitcast(at, i32.as_pointer()), align=1)
            av = builder.shuffle_vector(builder.insert_element(undef, word, i32(0)), undef, splat)
            for j in range(vectors):
                u, v = (bs[j], av) if swapped else (av, bs[j])
                builder.store(builder.call(dot, [builder.load(acc[i][j]), u, v]), acc[i][j])

    def tile(swapped, first, last):  # type: ignore[no-untyped-def]
        """Rows ``first`` to ``last`` (exclusive) of the tile."""
        acc = [
            [cgutils.alloca_once_value(builder, zero) for _ in range(vectors)]
            for _ in range(first, last)
        ]
        _start_sums(builder, acc, rows, epi, row, first)
        with cgutils.for_range(builder, taps) as outer:
            with cgutils.for_range(builder, quads) as inner:
                step(swapped, acc, outer.index, inner.index, a_rows[first:last])
        _finish(builder, acc, rows, epi, row, col, first, cp, ldc)

    # Three vectors of `MR` rows would need more registers than there are (24 accumulators,
    # the operands, the broadcasts: LLVM spills): two passes of half the rows each, the
    # second only when it has rows.
    halves = [(0, MR)] if vectors * MR <= 16 else [(0, MR // 2), (MR // 2, MR)]
    with builder.if_else(builder.icmp_signed("!=", swap, i64(0))) as (swapped, plain):
        for flag, branch in ((True, swapped), (False, plain)):
            with branch:
                for first, last in halves:
                    with builder.if_then(builder.icmp_signed("<", i64(first), rows)):
                        tile(flag, first, last)


def _madd16_code(builder: ir.IRBuilder, args: list, vectors: int, pairs: bool = False) -> None:
    """The body of `_make_micro`'s kernel of ``vectors`` vectors without VNNI, on AVX2
    (`MADD16`): A's rows are int16, ``lda`` bytes apart (the weight's bytes widened once a
    product: `rvm.kernels.qgemm._operand_rows`); B's quads are bytes as for VNNI. For every
    4 depths each vector of B (`LANES` columns x 4 bytes) is widened to 16-bit values twice,
    once per pair of depths (column ``c``'s 2 bytes in its int32 lane: one in-lane byte
    shuffle with zeros, or sign-extended), and each row's pair of int16 values is broadcast
    and multiplied into every vector by one ``vpmaddwd`` (two multiply-adds an int32 lane,
    the pair sum exact: at most 2 x 255 x 128 in magnitude; ``vpmaddubsw``'s int16 pair sums
    would saturate). Rows in passes of as many as the registers keep sums of (all `MR` for 1
    or 2 vectors). With an epilogue record ``epi`` the sums are requantized in registers as
    with VNNI (`rvm.kernels.qepilogue.epilogue_code`, on ymm registers).

    ``pairs``: A's rows are int8, 4 bytes a quad as with VNNI, and no two values of a row
    sum past `PAIR_BOUND` in magnitude (a fact of the constant weight: `pairs_fit`), so
    ``vpmaddubsw`` (uint8 by int8, each pair's two products summed into an int16) is exact:
    each row's 4 bytes broadcast, one ``vpmaddubsw`` per vector of B as loaded and one
    ``vpmaddwd`` by ones adding the int16 pairs into the int32 lanes -- 2 instructions of the
    multiplier for 4 depths where the int16 tiles take 2 for 2, and no widening of B. B is
    the uint8 operand (``swap`` 1, as every caller passes)."""
    taps, offsets, quads, a, lda, b, ldb, c, ldc, rows, swap, epi, row, col = args
    i8, i16, i32, i64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
    vec, words = ir.VectorType(i32, LANES), ir.VectorType(i16, 2 * LANES)
    raw, half = ir.VectorType(i8, 4 * LANES), ir.VectorType(i8, 2 * LANES)
    madd = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vec, [words, words]), "llvm.x86.avx2.pmadd.wd"
    )
    zero, undef = ir.Constant(vec, None), ir.Constant(vec, ir.Undefined)
    splat = ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)
    zero_bytes = ir.Constant(raw, None)
    a_bytes, b_bytes, offs, cp, a_rows = _addresses(builder, args)

    def widened(v, pair, signed):  # type: ignore[no-untyped-def]
        """Depths ``2 * pair`` and ``2 * pair + 1`` of the `LANES` columns of ``v`` (their 4
        bytes each) as int16 values, column ``c``'s in words ``2 c`` and ``2 c + 1``."""
        picks = [4 * (k // 2) + 2 * pair + k % 2 for k in range(2 * LANES)]
        if signed:
            low = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(i32, 2 * LANES), picks))
            return builder.sext(builder.bitcast(low, half), words)
        # Zero-extended: each byte beside a zero byte (one byte shuffle, within 128-bit lanes).
        mask = ir.Constant(
            ir.VectorType(i32, 4 * LANES), [i for k in picks for i in (k, 4 * LANES)]
        )
        return builder.bitcast(builder.shuffle_vector(v, zero_bytes, mask), words)

    def b_vectors(tap, s):  # type: ignore[no-untyped-def]
        """Quad ``s`` of tap ``tap`` of the panel's `LANES`-column vectors, raw bytes."""
        row_b = builder.add(builder.load(builder.gep(offs, [tap])), builder.mul(s, ldb))
        loaded = []
        for j in range(vectors):
            at = builder.gep(b_bytes, [builder.add(row_b, i64(4 * LANES * j))])
            loaded.append(builder.load(builder.bitcast(at, raw.as_pointer()), align=1))
        return loaded

    def a_word(a_row, offset, kind):  # type: ignore[no-untyped-def]
        """The 32-bit word of A's row at byte ``offset``, in every lane, as ``kind``."""
        at = builder.gep(a_bytes, [builder.add(a_row, offset)])
        word = builder.load(builder.bitcast(at, i32.as_pointer()), align=1)
        av = builder.shuffle_vector(builder.insert_element(undef, word, i32(0)), undef, splat)
        return builder.bitcast(av, kind)

    def step(signed, acc, tap, s, a_rows):  # type: ignore[no-untyped-def]
        """Quad ``s`` of tap ``tap``: two ``vpmaddwd`` per accumulator."""
        loaded = b_vectors(tap, s)
        depth = builder.mul(builder.add(builder.mul(tap, quads), s), i64(8))  # bytes of A
        for pair in range(2):
            bs = [widened(v, pair, signed) for v in loaded]
            for i, a_row in enumerate(a_rows):
                av = a_word(a_row, builder.add(depth, i64(4 * pair)), words)
                for j in range(vectors):
                    product = builder.call(madd, [av, bs[j]])
                    builder.store(builder.add(builder.load(acc[i][j]), product), acc[i][j])

    bytes_by_bytes = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(words, [raw, raw]), "llvm.x86.avx2.pmadd.ub.sw"
    )
    ones = ir.Constant(words, [1] * 2 * LANES)

    def pairs_step(signed, acc, tap, s, a_rows):  # type: ignore[no-untyped-def]
        """Quad ``s`` of tap ``tap`` with ``pairs``: ``vpmaddubsw`` then ``vpmaddwd`` by
        ones per accumulator."""
        loaded = b_vectors(tap, s)
        depth = builder.mul(builder.add(builder.mul(tap, quads), s), i64(4))  # bytes of A
        for i, a_row in enumerate(a_rows):
            av = a_word(a_row, depth, raw)
            for j in range(vectors):
                pair_sums = builder.call(bytes_by_bytes, [loaded[j], av])
                product = builder.call(madd, [pair_sums, ones])
                builder.store(builder.add(builder.load(acc[i][j]), product), acc[i][j])

    def tile(signed, first, last):  # type: ignore[no-untyped-def]
        """Rows ``first`` to ``last`` (exclusive) of the tile."""
        acc = [
            [cgutils.alloca_once_value(builder, zero) for _ in range(vectors)]
            for _ in range(first, last)
        ]
        _start_sums(builder, acc, rows, epi, row, first)
        quad = pairs_step if pairs else step
        with cgutils.for_range(builder, taps) as outer:
            with cgutils.for_range(builder, quads) as inner:
                quad(signed, acc, outer.index, inner.index, a_rows[first:last])
        _finish(builder, acc, rows, epi, row, col, first, cp, ldc)

    per_pass = max(1, min(MR, (REGISTERS - MADD16_SPARE) // vectors))
    passes = [(r, min(MR, r + per_pass)) for r in range(0, MR, per_pass)]
    # A product's last tile of fewer rows (its output channels past a multiple of `MR`: 2
    # or 4 of 6 for a power of two) computes as many as it has, rounded up to `SHORT_ROWS`,
    # rather than `MR` (each a tile of its own: a row past ``rows`` costs what a row does).
    shorts = list(range(SHORT_ROWS, per_pass, SHORT_ROWS)) if len(passes) == 1 else []

    def rows_of(signed, shorts):  # type: ignore[no-untyped-def]
        """The tile of the fewest rows in ``shorts`` that holds ``rows``, else all passes."""
        if not shorts:
            for first, last in passes:
                with builder.if_then(builder.icmp_signed("<", i64(first), rows)):
                    tile(signed, first, last)
            return
        with builder.if_else(builder.icmp_signed("<=", rows, i64(shorts[0]))) as (few, more):
            with few:
                tile(signed, 0, shorts[0])
            with more:
                rows_of(signed, shorts[1:])

    if pairs:  # B holds the uint8 bytes
        rows_of(False, shorts)
        return
    # ``swap`` 1: B holds the uint8 bytes (zero-extended); 0: the int8 ones (sign-extended).
    with builder.if_else(builder.icmp_signed("!=", swap, i64(0))) as (unsigned, signed):
        for flag, branch in ((False, unsigned), (True, signed)):
            with branch:
                rows_of(flag, shorts)


_micro = _make_micro(VECTORS)
_micro_tail = _make_micro(1)  # a product's last columns when `LANES` or fewer are left
# Without VNNI, the same on int8 rows whose pairs fit 16 bits (`pairs_fit`): ``vpmaddubsw``.
_micro_pairs = _make_micro(VECTORS, pairs=True)
_micro_pairs_tail = _make_micro(1, pairs=True)
_micro_wide = _make_micro(VECTORS + 1)  # its last columns when 3 * `LANES` are left


@intrinsic
def _row_dot(typingctx, a, b, chunks):  # type: ignore[no-untyped-def]
    """The int32 sum of ``64 * chunks`` products of the int8 bytes at address ``a`` by the
    uint8 bytes at address ``b``: one ``vpdpbusd`` per 64 bytes, then the lanes added."""
    sig = nt.int32(nt.int64, nt.int64, nt.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        a, b, chunks = args
        i8, i32 = ir.IntType(8), ir.IntType(32)
        dot, vec = _vpdpbusd(builder)
        a_bytes, b_bytes = (
            builder.inttoptr(a, i8.as_pointer()),
            builder.inttoptr(b, i8.as_pointer()),
        )
        acc = cgutils.alloca_once_value(builder, ir.Constant(vec, None))
        with cgutils.for_range(builder, chunks) as loop:
            at = builder.mul(loop.index, ir.IntType(64)(4 * LANES))
            av = builder.load(
                builder.bitcast(builder.gep(a_bytes, [at]), vec.as_pointer()), align=1
            )
            bv = builder.load(
                builder.bitcast(builder.gep(b_bytes, [at]), vec.as_pointer()), align=1
            )
            builder.store(builder.call(dot, [builder.load(acc), bv, av]), acc)
        total, lanes = i32(0), builder.load(acc)
        for k in range(LANES):
            total = builder.add(total, builder.extract_element(lanes, i32(k)))
        return total

    return sig, codegen


DOT_COLUMNS = 4  # a product's last columns past a multiple of `LANES`, at most, taken by dots
# The depths one instruction of a dot (`_row_dot`'s ``vpdpbusd``; without VNNI ``vpmaddwd`` on
# int16) and of a tile (each column's: ``vpdpbusd`` 4, ``vpmaddwd`` 2) multiply, for the rule
# that takes a product's last columns by dots when those cost less (`rvm.kernels.qgemm`).
DOT_DEPTHS = 4 * LANES if VNNI else 2 * LANES
TILE_DEPTHS = 4 if VNNI else 2
_COLUMN = np.zeros(0, np.uint8 if VNNI else np.int16)  # a gathered column's type (a marker)


@jit(**_OPTS)
def _dot_columns(rows, b, acc, j0, c0, c1):  # type: ignore[no-untyped-def]
    """``acc[r, c - j0]`` for the columns ``c0 <= c < c1`` of the panel ``b``, one column at a
    time: its bytes gathered in depth order, then a dot product with each row (`_row_dot`,
    64 depths an instruction, the rest a plain loop; without VNNI the column int16 and a
    loop the compiler vectorizes, ``vpmaddwd`` on the rows' int16). A few columns past the
    last vector of a product cost a dot each rather than a tile of `LANES` (7 x 7's 49
    positions: 48 in tiles and 1 by dots, not 64 in tiles)."""
    flat, offsets, quads, ldb = b[0], b[1], b[2], b[3]
    n_rows, depth = rows.shape
    chunks = depth // (4 * LANES) if VNNI else 0
    col = np.empty(depth, _COLUMN.dtype)
    for c in range(c0, c1):
        for tap in range(offsets.size):
            for q in range(quads):
                at, d = offsets[tap] + q * ldb + 4 * c, 4 * (tap * quads + q)
                for t in range(4):
                    col[d + t] = flat[at + t]
        for r in range(n_rows):
            total = np.int32(0)
            if VNNI:
                total = _row_dot(rows.ctypes.data + r * depth, col.ctypes.data, chunks)
            row = rows[r]
            for d in range(U(chunks * 4 * LANES), U(depth)):
                total += np.int32(row[d]) * np.int32(col[d])
            acc[r, c - j0] = total
