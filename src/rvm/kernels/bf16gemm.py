"""bf16 GEMM with float32 accumulation: a register-blocked micro-kernel in LLVM IR.

`gemm_bf16(a, lda, b, c, ldc, m, n, k2, accumulate)` computes, on int64 addresses,
``C[m, n] (+)= A[m, 2 k2] @ B[2 k2, n]`` where

- A holds bf16 values (their 16 bits), row-major, rows ``2 lda`` values apart: pair ``p`` of
  row ``i`` (its values ``2p`` and ``2p + 1``) is the 32-bit word ``i * lda + p``;
- B is *pair-packed in panels* (`panel_index`): its word ``(p, j)`` holds B's values
  ``(2p, j)`` (low half) and ``(2p + 1, j)`` (high half), so that a vector of B's words is
  what ``vdpbf16ps`` takes, and the words of `NR` columns lie together, row after row, one
  panel of ``k2 * NR`` words per `NR` columns (the last padded), so that the micro-kernel reads
  its tile's B as one unit-stride stream (the callers pack B anyway: a convolution's im2col
  columns, a dense layer's input);
- C is float32, row-major, rows ``ldc`` apart.

Each step of the micro-kernel broadcasts a pair of A's row and adds the two products of each
of C's lanes: on a CPU with AVX512-BF16 one ``vdpbf16ps`` (the LLVM intrinsic
``llvm.x86.avx512bf16.dpbf16ps.512``) per accumulator; elsewhere the same layout widened by
shifts (a bf16 value is the high half of a float32) and two float32 FMAs, at the CPU's vector
width -- a correct path that still reads half the bytes of float32 weights. The tile is
`MR` rows by up to `VECTORS` vectors, as `rvm.kernels.sgemm`'s; the depth is cut into blocks
of `KC2` pairs. Like `sgemm`, no checks: the callers (`rvm.kernels.bf16`) check first.

`micro`, the micro-kernel itself, also reads B's pair rows through a table of offsets
(``indexed``): the direct convolution (`rvm.kernels.bf16conv`) runs it on a plane of
channel-pair words, each pair row a tap's offset into it, with no packed B at all.
"""

from __future__ import annotations

import logging

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels import amx
from rvm.kernels.bf16words import DPBF16, LANES, BFloat, pair_bits, run_bits
from rvm.kernels.blockout import block_out, whole_runs
from rvm.kernels.cpu import target_features as _target_features
from rvm.kernels.epilogue import tile_rows
from rvm.kernels.gemmshape import BLOCK_BYTES, LINE
from rvm.kernels.jitting import alive, jit
from rvm.kernels.microkernel import ints_at, prefetch_l2
from rvm.kernels.parfor import PIECES_PER_THREAD
from rvm.kernels.tileout import tile_words
from rvm.kernels.vectors import first_lanes

__all__ = [
    "CONV_SPLIT_MIN",
    "WEIGHT_USES",
    "DPBF16",
    "KC2",
    "LANES",
    "MR",
    "NR",
    "PIECES_PER_THREAD",
    "SPLIT_MIN",
    "TURNED_ROWS",
    "band",
    "conv_pieces",
    "gemm_bf16",
    "micro",
    "micro_turned",
    "panel_index",
    "pair_bits",
    "panels",
    "piece_grid",
    "run_bits",
    "walk",
    "walk_out",
]

logger = logging.getLogger("rvm.kernels")


def _shape(features: str) -> tuple[int, int, bool]:
    """(rows, vectors, fma) for the target's features (its lanes: `bf16words.LANES`)."""
    flags = set(features.split(","))
    fma = "+fma" in flags or "+avx512f" in flags
    if "+avx512f" in flags:
        return 8, 3, True  # 24 accumulators of 32 zmm registers
    if "+avx2" in flags or "+avx" in flags:
        return 4, 2, fma  # 8 accumulators, B's widened halves, A's two broadcasts
    return 4, 2, fma


MR, VECTORS, _FMA = _shape(_target_features())
NR = LANES * VECTORS
KC2 = 256  # depth block in pairs (512 values, as sgemm's)
SPLIT_MIN = 1 << 21  # multiply-adds (pairs) a piece keeps at least when a product is split
CONV_SPLIT_MIN = SPLIT_MIN >> 2
"""Pairs a piece of a convolution keeps at least (about 10 us of one Zen 4 core): its pieces
also build and round pair planes and move sums, which the pairs leave out, and at
`SPLIT_MIN` a 3 x 3 convolution to 32 channels at 14 x 14 (densenet's, 3.6M pairs, 93 us)
or squeezenet's 1 x 1s at 55 x 55 ran in one thread while the other core waited."""
PACK_SPLIT_MIN = 1 << 10
"""Words a piece of a pair plane or of a product's A writes at least (4 KB) when its rounding
into bf16 pairs is cut on the pool (`rvm.kernels.bf16planes.pair_plane`,
`rvm.kernels.bf16.pair_rows`). Small: the rounding runs before its product's job, and the last
call's pieces of that job left the destination's lines in every core's cache, so one core
writing it alone waits on each line's invalidation. On Zen 4 at two threads the 60K-word plane
of a 1 x 1 from 576 channels on 14 x 14 took 34 us so, against 10 in a buffer no other core
had read; cut from 1K words, bf16 models took 0.92-0.98 of the time cut from 64K (squeezenet
0.92, densenet121 0.93, inception_v2 0.95, resnet50 0.96-0.98: the two cuts in turns in one
process)."""
if not DPBF16:  # `rvm.transform.to_bf16` says at INFO which way bf16 products take here
    logger.debug(
        "rvm: this CPU target has no AVX512-BF16: bf16 GEMMs widen to float32 and use FMA "
        "(%d lanes)",
        LANES,
    )

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
WEIGHT_USES = 16  # uses of a weight pair under which its load, not its products, sets the time


@jit(inline="always", **_OPTS)
def conv_pieces(og, positions, k2):  # type: ignore[no-untyped-def]
    """Pieces of `CONV_SPLIT_MIN` pairs in a convolution of ``og`` output channels over
    ``positions`` positions and ``k2`` pairs, each weight pair counted as `WEIGHT_USES` uses
    at least (a pair from memory takes a Zen 4 core as long as 16-32 products): densenet121's
    classifier, a 1 x 1 of 1024 -> 1000 on one position (2 MB of weight), was one piece on
    one thread (140 us); in pieces 0.634 of that."""
    return (og * max(positions, WEIGHT_USES) * k2) // CONV_SPLIT_MIN


def _make_micro(kinds: list[tuple[int, int, int]]):  # type: ignore[no-untyped-def]
    """The micro-kernel intrinsic with a loop for each of ``kinds`` (vector count, indexed,
    rows): `micro` has the plain and B-indexed ones, `micro_turned` the A-indexed ones, so
    that each caller compiles only the loops it runs."""

    @intrinsic
    def kernel(
        typingctx,
        kc2,
        a,
        lda,
        b,
        ldb,
        indexed,
        c,
        ldc,
        accumulate,
        rows,
        vectors,
        last,
        offs,
        bstep,
    ):  # type: ignore[no-untyped-def]  # noqa: E501
        return _micro_codegen(kinds)

    return kernel


@intrinsic
def micro_out(
    typingctx, kc2, a, lda, b, table, c, accumulate, rows, vectors, last, to, bias, relu, i0, j0
):  # type: ignore[no-untyped-def]
    """`micro`'s B-indexed tile (a direct convolution's, B's pair rows through the tap table
    at ``table``) put from its registers where the `rvm.kernels.blockout.BLOCK_OUT` record at
    ``to`` says, as `block_out` would from L1 (`rvm.kernels.tileout.tile_words`; where
    `puts_out`): output channels ``i0`` on (even), the run's positions ``j0`` on, C's rows
    added first where ``accumulate`` (the earlier depth blocks'), the biases at ``bias`` (0:
    none), ReLU where ``relu``."""
    sig, codegen = _micro_codegen([(v, 1, MR) for v in range(1, VECTORS + 1)], put=True)
    return sig, codegen


def _micro_codegen(kinds, put=False):  # type: ignore[no-untyped-def]
    """``C[:rows, :width] (+)= A[:rows] @ B`` over ``kc2`` pairs, ``width = (vectors - 1) *
    LANES + last``. B's pair row ``s`` starts ``ldb * s`` words after ``b``, or, ``indexed``,
    ``table[s]`` words after it, ``ldb`` being the int64 table's address (a convolution's
    taps: `rvm.kernels.bf16conv`). With ``indexed`` 2 A is read through the table instead
    (a convolution turned around: output positions as A's rows, output channels along the
    lanes): A's row ``i``, pair ``s`` is the word ``offs[i] + table[s]`` after ``a``, ``lda``
    the table's address and ``offs`` that of the rows' int64 word offsets (``offs`` unused
    otherwise), in tiles of `TURNED_ROWS` rows at most, and a tile of ``MR - 1`` rows has its
    own loop; there B's vector ``j`` starts
    ``j * bstep`` words after its pair row's first word (a turned weight's panels of `LANES`
    channels: ``bstep`` a panel's words, so that a tile's channels may span panels), where
    the other loops read B's vectors adjacent (``bstep`` `LANES`, as `band` passes). One loop
    per (vector count, indexed, rows), chosen by a switch: each keeps its accumulators in
    registers."""
    sig = nt.void(*(nt.int64,) * (15 if put else 14))

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        if put:  # `micro_out`: B-indexed, C's rows `NR` floats apart, no offsets
            kc2, a, lda, b, ldb, c, accumulate, rows, vectors, last = args[:10]
            indexed, ldc, offs, bstep = ir.IntType(64)(1), ir.IntType(64)(NR), None, None
            where = args[10:]  # to, bias, relu, i0, j0
        else:
            kc2, a, lda, b, ldb, indexed, c, ldc, accumulate, rows, vectors, last, offs = args[:13]
            bstep = args[13]
        i1, i32, i64, f32 = ir.IntType(1), ir.IntType(32), ir.IntType(64), ir.FloatType()
        vec, words = ir.VectorType(f32, LANES), ir.VectorType(i32, LANES)
        masks, module = ir.VectorType(i1, LANES), builder.module

        def declare(ret, params, name):  # type: ignore[no-untyped-def]
            return cgutils.get_or_insert_function(module, ir.FunctionType(ret, params), name)

        vptr, wptr = vec.as_pointer(), words.as_pointer()
        fma = declare(vec, [vec] * 3, f"llvm.fma.v{LANES}f32")
        masked_load = declare(vec, [vptr, i32, masks, vec], f"llvm.masked.load.v{LANES}f32.p0")
        load_words = declare(words, [wptr, i32, masks, words], f"llvm.masked.load.v{LANES}i32.p0")
        masked_store = declare(
            ir.VoidType(), [vec, vptr, i32, masks], f"llvm.masked.store.v{LANES}f32.p0"
        )
        if DPBF16:
            pairs = ir.VectorType(BFloat(), 2 * LANES)
            dot = declare(vec, [vec, pairs, pairs], "llvm.x86.avx512bf16.dpbf16ps.512")
        ap = builder.inttoptr(a, i32.as_pointer())
        table = builder.inttoptr(ldb, i64.as_pointer())
        table_a = builder.inttoptr(lda, i64.as_pointer())
        offsets = None if offs is None else builder.inttoptr(offs, i64.as_pointer())
        bp = builder.inttoptr(b, i32.as_pointer())
        cp = builder.inttoptr(c, f32.as_pointer())
        zero, zero_w, align = ir.Constant(vec, None), ir.Constant(words, None), i32(4)
        splat = ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)
        high = ir.Constant(words, [-65536] * LANES)  # 0xffff0000
        sixteen = ir.Constant(words, [16] * LANES)

        def broadcast(value, vtype):  # type: ignore[no-untyped-def]
            undef = ir.Constant(vtype, ir.Undefined)
            one = builder.insert_element(undef, value, i32(0))
            return builder.shuffle_vector(one, undef, splat)

        mask = first_lanes(builder, last, LANES)
        whole = ir.Constant(masks, [1] * LANES)

        def halves(w):  # type: ignore[no-untyped-def]
            """The two bf16 values of each word, widened to float32 (low, high)."""
            low = builder.bitcast(builder.shl(w, sixteen), vec)
            return low, builder.bitcast(builder.and_(w, high), vec)

        def madd(x, y, acc):  # type: ignore[no-untyped-def]
            if _FMA:
                return builder.call(fma, [x, y, acc])
            return builder.fadd(builder.fmul(x, y), acc)

        last_row = builder.sub(rows, i64(1))
        a_rows = [
            builder.mul(
                builder.select(builder.icmp_signed("<", i64(i), rows), i64(i), last_row), lda
            )
            for i in range(MR)
        ]

        def tile(vectors, indexed, height):  # type: ignore[no-untyped-def]
            if indexed == 2:  # the rows' first words: ``offs[i]`` (the last row's past rows)
                starts = [
                    builder.gep(ap, [builder.load(builder.gep(offsets, [row]))])
                    for row in (
                        builder.select(builder.icmp_signed("<", i64(i), rows), i64(i), last_row)
                        for i in range(height)
                    )
                ]
            acc = [
                [cgutils.alloca_once_value(builder, zero) for _ in range(vectors)]
                for _ in range(height)
            ]
            apart = bstep if indexed == 2 else i64(LANES)  # words from one B vector to the next
            with cgutils.for_range(builder, kc2) as loop:
                step = loop.index
                if indexed == 2:
                    row_b = builder.mul(step, ldb)
                    row_a = builder.load(builder.gep(table_a, [step]))
                elif indexed:
                    row_b = builder.load(builder.gep(table, [step]))
                else:
                    row_b = builder.mul(step, ldb)
                bs = []
                for j in range(vectors):
                    at = builder.gep(bp, [builder.add(row_b, builder.mul(apart, i64(j)))])
                    lanes = mask if j == vectors - 1 else whole
                    w = builder.call(load_words, [builder.bitcast(at, wptr), align, lanes, zero_w])
                    bs.append(builder.bitcast(w, pairs) if DPBF16 else halves(w))
                for i in range(height):
                    if indexed == 2:
                        word = builder.load(builder.gep(starts[i], [row_a]))
                    else:
                        word = builder.load(builder.gep(ap, [builder.add(a_rows[i], step)]))
                    aw = broadcast(word, words)
                    if DPBF16:
                        aw = builder.bitcast(aw, pairs)
                    else:
                        aw = halves(aw)
                    for j in range(vectors):
                        old = builder.load(acc[i][j])
                        if DPBF16:
                            new = builder.call(dot, [old, aw, bs[j]])
                        else:
                            new = madd(aw[1], bs[j][1], madd(aw[0], bs[j][0], old))
                        builder.store(new, acc[i][j])
                body = builder.basic_block
            if indexed == 2:  # unrolled by two, its 24 accumulators spilled (54 GF/s, not 230)
                body.terminator.set_metadata("llvm.loop", _no_unroll(module))

            def store(adding):  # type: ignore[no-untyped-def]
                for i in range(height):
                    with builder.if_then(builder.icmp_signed("<", i64(i), rows)):
                        row_c = builder.mul(ldc, i64(i))
                        for j in range(vectors):
                            at = builder.gep(cp, [builder.add(row_c, i64(j * LANES))])
                            at = builder.bitcast(at, vptr)
                            lanes = mask if j == vectors - 1 else whole
                            value = builder.load(acc[i][j])
                            if adding:
                                old = builder.call(masked_load, [at, align, lanes, zero])
                                value = builder.fadd(old, value)
                            builder.call(masked_store, [value, at, align, lanes])

            def summed(i, j, adding):  # type: ignore[no-untyped-def]
                """Row ``i``'s vector ``j`` of sums, C's added where ``adding``."""
                value = builder.load(acc[i][j])
                if not adding:
                    return value
                at = builder.gep(cp, [builder.add(builder.mul(ldc, i64(i)), i64(j * LANES))])
                lanes = mask if j == vectors - 1 else whole
                old = builder.call(masked_load, [builder.bitcast(at, vptr), align, lanes, zero])
                return builder.fadd(old, value)

            if put:  # `micro_out`: the sums from the registers into pair-plane words
                adding = builder.icmp_signed("!=", accumulate, i64(0))
                for flag in (True, False):
                    with builder.if_then(adding if flag else builder.not_(adding)):
                        tile_words(builder, lambda i, j, flag=flag: summed(i, j, flag),
                                   (height, vectors, rows), (whole, mask), where)  # fmt: skip
                return
            with builder.if_else(builder.icmp_signed("!=", accumulate, i64(0))) as (add, write):
                with add:
                    store(True)
                with write:
                    store(False)

        blocks = [builder.append_basic_block(f"tile{v}_{x}_{h}") for v, x, h in kinds]
        done = builder.append_basic_block("tiled")
        flag = builder.select(builder.icmp_signed(">", indexed, i64(2)), i64(2), indexed)
        short = builder.and_(
            builder.icmp_signed("==", flag, i64(2)), builder.icmp_signed("<=", rows, i64(MR - 1))
        )
        key = builder.add(builder.mul(flag, i64(2)), builder.zext(short, i64))
        case = builder.add(builder.mul(vectors, i64(8)), key)
        switch = builder.switch(case, blocks[-1])
        for block, kind in zip(blocks, kinds):
            v, x, h = kind
            switch.add_case(i64(v * 8 + x * 2 + (h == MR - 1)), block)
            builder.position_at_end(block)
            tile(*kind)
            builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen


TURNED_ROWS = MR - 1 if VECTORS == 3 else MR
"""The most rows (output positions) of an A-indexed tile (`micro_turned`; a turned
convolution's, `rvm.kernels.bf16turned`). Not `MR` on AVX-512: with 8 rows of 3 vectors LLVM
kept 35 vectors live in the loop (24 sums, 3 of B, the rows' 8 broadcasts) and spilled sums to
the stack, and the loop's speed then hung on the thread and process it ran in (likely on
where that stack lay): 256 -> 256 3 x 3 on 14 x 14 took 1.09 or 1.41 ms on one Zen 4 core by
process, 1.41-1.55 in every thread Python started; in tiles of 7 rows (21 sums), 1.08-1.10 in
each (widened, without AVX512-BF16: 2.10 against 3.06). AVX2's 4 rows of 2 vectors stay:
tiles of 3 took 1.11x their time."""
# per vector count: plain and B-indexed loops (GEMMs, the direct convolution); A-indexed ones
# of TURNED_ROWS rows and, where that is MR, of MR - 1 too (a turned convolution's positions in
# tiles of both, no row computed twice: `rvm.kernels.bf16turned`)
micro = _make_micro([(v, x, MR) for v in range(1, VECTORS + 1) for x in (0, 1)])
micro_turned = _make_micro(
    [(v, 2, h) for v in range(1, VECTORS + 1) for h in sorted({TURNED_ROWS, MR - 1})]
)


def _no_unroll(module: ir.Module) -> ir.MDValue:
    """A loop's ``llvm.loop`` metadata saying not to unroll it (a distinct, self-referential
    node, as LLVM wants a loop's)."""
    flag = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
    node = ir.values.MDValue(module, [flag], name=str(len(module.metadata)))
    node.operands = (node, flag)
    return node


@jit(**_OPTS)
def piece_grid(na, ua, nb_, ub, parts, threads):  # type: ignore[no-untyped-def]
    """(step_a, along_a, step_b, along_b): a product's ``na`` x ``nb_`` cells (``ua``, ``ub``
    cells a unit: a band of channels, a row, a panel, a tile of positions) cut into a grid of
    pieces of ``step_a`` x ``step_b`` units, ``along_a`` x ``along_b`` of them, for
    ``threads`` threads that claim the pieces as they free up: of the grids of at most
    ``parts`` pieces, the one whose busiest thread has the fewest cells (each piece to the
    thread that frees up first), of equals the fewest cuts along b (a is the cheaper axis to
    cut), then the most pieces (the better balance when a thread is held up). 28 rows on two
    threads in at most 8 parts: 4 pieces of 7 rows (7 of 4 would leave one thread 16 rows).
    One part or one thread: one piece."""
    ta, tb = -(-na // ua), -(-nb_ // ub)
    best_a, best_b, best = ta, tb, na * nb_ + 1
    cuts, pieces = 0, 0
    if parts <= 1 or threads <= 1:
        return ta, 1, tb, 1
    busy = np.empty(threads, dtype=np.int64)
    for ca in range(1, min(ta, parts) + 1):
        sa = -(-ta // ca)
        aa = -(-ta // sa)
        for cb in range(1, min(tb, parts // ca) + 1):
            sb = -(-tb // cb)
            ab = -(-tb // sb)
            busy[:] = 0
            most = 0
            for p in range(aa * ab):  # loops, not argmin: less to build
                i, j = p // ab, p % ab
                cells = (min(na, (i + 1) * sa * ua) - i * sa * ua) * (
                    min(nb_, (j + 1) * sb * ub) - j * sb * ub
                )
                at = 0
                for t in range(1, threads):
                    if busy[t] < busy[at]:
                        at = t
                busy[at] += cells
                most = max(most, busy[at])
            if most < best or (most == best and (ab < cuts or (ab == cuts and aa * ab > pieces))):
                best, cuts, pieces, best_a, best_b = most, ab, aa * ab, sa, sb
    return best_a, -(-ta // best_a), best_b, -(-tb // best_b)


@jit(**_OPTS)
def panels(n):  # type: ignore[no-untyped-def]
    """How many panels of `NR` columns ``n`` columns of B take."""
    return (n + NR - 1) // NR


@jit(**_OPTS)
def panel_index(p, j, k2):  # type: ignore[no-untyped-def]
    """The word of B's pair row ``p``, column ``j`` in its panels of depth ``k2`` pairs."""
    return (j // NR) * (k2 * NR) + p * NR + j % NR


@jit(**_OPTS)
def band(kc2, a, lda, b, b_col, ldb, indexed, c, ldc, add, rows, width):  # type: ignore[no-untyped-def]  # noqa: E501
    """The tile walk of every bf16 product: ``C[:rows, :width] (+)= A[:rows] @ B`` over
    ``kc2`` pairs, tile after tile of `NR` columns (`micro`, the last tile's lanes masked).
    Tile ``j0``'s B starts ``b_col * j0`` bytes after ``b`` (its pair rows ``ldb`` words
    apart or, ``indexed``, through the table at ``ldb``), its C ``4 * j0`` bytes after ``c``.
    Where B's columns are adjacent words (``b_col`` 4: a convolution's plane, not panels)
    and the last tile would be one vector after a tile of `VECTORS` (3), the two are two
    tiles of two vectors: a one-vector tile loads a broadcast of A for each product and took
    half a full tile's time (a 7 x 7 map's 49 positions: 48 + 1 columns 718 us, 32 + 17:
    614 us, m 2048 by 512 deep, one Zen 4 core)."""
    j0 = 0
    while j0 < width:
        cols = _tile_cols(width, j0, b_col)
        vectors = (cols + LANES - 1) // LANES
        micro(kc2, a, lda, b + b_col * j0, ldb, indexed, c + 4 * j0, ldc, add, rows, vectors,
              cols - (vectors - 1) * LANES, 0, LANES)  # fmt: skip
        j0 += cols


@jit(inline="always", **_OPTS)
def _tile_cols(width, j0, b_col):  # type: ignore[no-untyped-def]
    """The columns of the tile at column ``j0`` of a band ``width`` wide (see `band`)."""
    cols = min(NR, width - j0)
    if VECTORS == 3 and b_col == 4 and NR < width - j0 <= NR + LANES:
        cols = 2 * LANES
    return cols


@jit(**_OPTS)
def walk(
    a, lda, m0, m1, b, b_col, b_pair, ldb, ldb_pair, indexed, c, ldc, n, k2, acc, bias, act, res
):  # type: ignore[no-untyped-def]  # noqa: E501
    """Rows [m0, m1) of ``C[:, :n] (+)= A @ B`` over ``k2`` pairs (``acc``: add to C): each
    depth block of `KC2` pairs, each band of `MR` rows of A, its tiles (`band`); B's pair row
    ``p0`` of a
    depth block starts ``b_pair * p0`` bytes after ``b`` (indexed: its table ``ldb_pair *
    p0`` bytes after ``ldb``). With a bias's address (0: none), an activation's index (0:
    none) or a residual's (R laid out as C, at ``res``; 0: none), ``act(C + bias + R)`` on
    each band's rows once its last depth block is summed, while they are in cache
    (`rvm.kernels.epilogue.tile_rows`). The GEMM on pair panels (`gemm_bf16`) and the direct
    convolution (`rvm.kernels.bf16conv`) both walk C so, each band's next `MR` rows of A
    hinted into L2 as it runs (`_read_ahead`: a weight comes from memory). With AMX tiles
    (`rvm.kernels.amx.AMX`) the walk is `rvm.kernels.amx.walk`'s (B's pair rows ``ldb``
    words apart when not indexed: ``b_pair`` is ``4 * ldb`` in every caller)."""
    if amx.AMX:
        amx.walk(a, lda, m0, m1, b, b_col, NR, ldb, indexed, c, ldc, n, k2, acc, bias, act, res,
                 0, None)  # fmt: skip
        return
    last = ((k2 - 1) // KC2) * KC2  # the last depth block's first pair
    for p0 in range(0, k2, KC2):
        kc2 = min(KC2, k2 - p0)
        add = 1 if (acc or p0 > 0) else 0
        b_block, ldb_block = b + b_pair * p0, ldb + ldb_pair * p0
        for i0 in range(m0, m1, MR):
            rows = min(MR, m1 - i0)
            a_band, c_band = a + 4 * (i0 * lda + p0), c + 4 * i0 * ldc
            if i0 + MR < m1:
                _read_ahead(a_band + 4 * MR * lda, lda, min(MR, m1 - i0 - MR), kc2)
            band(kc2, a_band, lda, b_block, b_col, ldb_block, indexed, c_band, ldc, add, rows, n)
            if p0 == last and (bias != 0 or act != 0 or res != 0):
                at_bias = bias + 4 * i0 if bias != 0 else 0
                at_res = res + 4 * i0 * ldc if res != 0 else 0
                tile_rows(c_band, ldc, rows, n, at_bias, act, at_res)


@jit(**_OPTS)
def walk_out(a, lda, m0, m1, b, table, n, k2, bias, act, to):  # type: ignore[no-untyped-def]
    """Rows [m0, m1) of a direct convolution's sums ``A @ B`` over ``k2`` pairs (B's pair rows
    through the tap table at ``table`` into the plane's words at ``b``, as `walk`'s indexed
    mode reads them), put where the `rvm.kernels.blockout.BLOCK_OUT` record at ``to`` says
    tile by tile, with its bias (at ``bias``, 0: none), residual and ReLU: from the tile's
    registers where `puts_out` (`micro_out`), else summed over the depth into a scratch in L1
    and put out from there in one pass (`rvm.kernels.blockout.block_out`; another activation
    applied to the tile first); the float32 sums never leave L1. `walk` instead writes C's
    rows, band by band, and the direct convolution rounds them into the next pair plane or
    copies them out of wider rows in passes of their own. A band's tiles in turn."""
    room = np.empty(MR * NR + LANES, np.float32)
    edge = (room.ctypes.data + 63) // 64 * 64  # a tile's rows on whole lines
    fused = puts_out(to, act)
    for i0 in range(m0, m1, MR):
        rows = min(MR, m1 - i0)
        a_band = a + 4 * i0 * lda
        if i0 + MR < m1:
            _read_ahead(a_band + 4 * MR * lda, lda, min(MR, m1 - i0 - MR), min(KC2, k2))
        j0 = 0
        while j0 < n:
            cols = _tile_cols(n, j0, 4)
            vectors = (cols + LANES - 1) // LANES
            last = cols - (vectors - 1) * LANES
            for p0 in range(0, k2, KC2):
                if fused and p0 + KC2 >= k2:
                    micro_out(k2 - p0, a_band + 4 * p0, lda, b + 4 * j0, table + 8 * p0, edge,
                              1 if p0 > 0 else 0, rows, vectors, last, to, bias,
                              1 if act == 1 else 0, i0, j0)  # fmt: skip
                else:
                    micro(min(KC2, k2 - p0), a_band + 4 * p0, lda, b + 4 * j0,
                          table + 8 * p0, 1, edge, NR, 1 if p0 > 0 else 0, rows, vectors,
                          last, 0, LANES)  # fmt: skip
            if fused:
                j0 += cols
                continue
            if act > 1:
                tile_rows(edge, NR, rows, cols, bias + 4 * i0 if bias != 0 else 0, act, 0)
            block_out(edge, NR, rows, cols, i0, j0, to, 0 if act > 1 else bias, act == 1)
            j0 += cols
    alive(room)


@jit(inline="always", **_OPTS)
def puts_out(to, act):  # type: ignore[no-untyped-def]
    """Whether `walk_out`'s tiles go out from their registers (`micro_out`) by the record at
    ``to``: pair planes out and residual (or none) with the run's rows, at most a ReLU."""
    desc = ints_at(to)
    return act <= 1 and desc[0] == 0 and (desc[6] == 0 or desc[6] == 2) and whole_runs(desc)


@jit(inline="always", **_OPTS)
def _read_ahead(a, lda, rows, kc2):  # type: ignore[no-untyped-def]
    """Hints ``rows`` rows of ``kc2`` pairs of A at ``a`` (``lda`` words apart) into L2: the
    next band's weight rows, asked for while `band` runs this one. A weight comes from
    memory at each call (a model's weights outgrow L3), and the first tile of a band waited
    on its rows' lines, `MR` streams the hardware's prefetchers started late on (Zen 4, two
    threads, bf16 models in turns in one process with the hint and without: resnet50
    0.966-0.973 of the time, inception_v2 0.961-0.965, inception_v1 0.968; squeezenet, whose
    weights stay in L3, 1.00; the next depth block's first band read ahead too: no better)."""
    for r in range(rows):
        for q in range(0, 4 * kc2, 4 * LINE):
            prefetch_l2(a + 4 * r * lda + q)


@jit(**_OPTS)
def gemm_bf16(a, lda, b, c, ldc, m, n, k2, accumulate):  # type: ignore[no-untyped-def]
    """``C[m, n] (+)= A[m, 2 k2] @ B[2 k2, n]``: A's bf16 rows ``lda`` words (pairs) apart, B
    pair-packed in panels (`panel_index`), C float32 with rows ``ldc`` apart; int64
    addresses, in the calling thread, no checks."""
    if m <= 0 or n <= 0:
        return
    if k2 <= 0:
        if not accumulate:
            for i in range(m):
                for j in range(n):
                    _store_zero(c + 4 * (i * ldc + j))
        return
    step = max(NR, BLOCK_BYTES // (4 * min(KC2, k2)) // NR * NR)
    for j0 in range(0, n, step):
        # panel j0 / NR of B starts j0 * k2 words on; a depth block's pair row p0, NR * p0
        walk(a, lda, 0, m, b + 4 * j0 * k2, 4 * k2, 4 * NR, NR, 0, 0, c + 4 * j0, ldc,
             min(step, n - j0), k2, accumulate, 0, 0, 0)  # fmt: skip


@intrinsic
def _store_zero(typingctx, address):  # type: ignore[no-untyped-def]
    """Writes float32 0 at the int64 ``address``."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        at = builder.inttoptr(args[0], ir.FloatType().as_pointer())
        builder.store(ir.Constant(ir.FloatType(), 0.0), at)
        return context.get_dummy_value()

    return nt.void(nt.int64), codegen
