"""rvm's own float32 GEMM: a register-blocked micro-kernel in LLVM IR at the CPU's vector width.

Why not BLAS: NumPy's OpenBLAS picks its kernels once per process, by CPU or by the
``OPENBLAS_CORETYPE`` the environment sets, and rvm cannot choose for the user. On the AVX-512
machine the benchmarks run on, the environment pins it to its Haswell (AVX2) kernels: 110-125
GFLOP/s on one core, where ONNX Runtime's own GEMM (MLAS, dispatched on the CPU itself) reaches
about twice that. This kernel is built by Numba for the CPU Numba targets, so it uses the
widest vectors there are (210-250 GFLOP/s on one core of that machine, against OpenBLAS's
115-125 there: `benchmarks/kernels.py`).

`sgemm(a, lda, b, ldb, c, ldc, m, n, k, accumulate)` computes, row-major on int64 addresses,
``C[m, n] = A[m, k] @ B[k, n]`` (``+= ...`` when ``accumulate``). No checks: the callers
(`rvm.kernels.blas`) check every window first.

How (a register-blocked GEMM, C's rows along A and its columns in vectors):

- the depth is cut into blocks of `KC`; for each block, each band of `MR` rows of A walks
  across C in tiles of `MR` rows by up to `NR` columns: for each of the ``KC`` steps the
  micro-kernel loads up to three vectors of B's row, broadcasts the band's ``MR`` values of A
  and adds their products into ``MR x 3`` accumulator registers (24 of the 32 AVX-512
  registers); it stores the tile once per block;
- A is not packed (BLIS packs both operands): its rows are read where they are, each a
  unit-stride stream. Packing A's band cost 4.5 times a plain copy of A, most of a GEMM with
  few columns (a 7 x 7 image's 49). B's rows are read in place where a tile's row of B is
  several cache lines (AVX-512's three); where it is one (AVX2's 16 floats), a plain GEMM
  copies each block of B into panels of `NR` columns first and its tiles read them without
  masks (`PACK_B`, `_packed_blocks`, in a block kept across calls: `PACK_FLOATS`), B's rows
  by their stride or through a table, in runs whose C columns lie end to end (`packs`: a
  convolution's taps, its im2col straight into the panels); with few rows of C, the first
  band's tiles pack B as they read it in place (`IN_PLACE_ROWS`); without
  mask registers (AVX2), whole tiles store without
  masks (`PLAIN_STORES`);
- each step of the micro-kernel prefetches a line of A's next band into L2: a convolution's
  weight comes from memory (a model's weights outgrow L3), and its first tile waited for each
  band's rows. A 1x1 convolution on a cold weight (256 to 1024 channels on 14 x 14, 512 to
  2048 on 7 x 7) took 5-10% less time at one thread on Zen 4, resnet50 2% less on a loaded
  machine (within noise on a quieter one); on a weight in cache, the same. Not where B is
  packed (`_micro_panel`): there a step is half as many multiply-adds (12 on AVX2's 16
  registers), and the prefetch's address (a division by `MR`, products, two prefetches every
  two steps, ~14 integer instructions to 24 multiply-adds) cost a Zen 3 core 1-6% of its rate
  on operands in cache at load 8, up to a quarter at load 13 (the same loop, the machine
  busier); without it resnet50's 1x1 GEMMs took 0.74-1.0 of the time on
  cold weights, 0.82-1.08 on warm ones (the hardware follows A's band rows);
- on plain rows of B (not a convolution's taps), it prefetches the row `AHEAD` tiles on along C: a
  1x1 convolution's wide input at batch 8 comes from memory in as many streams as it has rows;
- where B is packed (`FUSED_EPILOGUE`), a convolution's bias, residual and ReLU are applied
  in registers as the last depth block's tiles store (``epilogue``), C written once;
- the last tile of a row is as wide as what is left (one, two or three vectors), its last
  vector loaded and stored under a lane mask, and rows past ``m`` are not stored, so no edge
  needs a copy;
- a last tile of at most half a vector's lanes (`HALF`: 196 positions of a 14 x 14 map are
  4 tiles and 4 columns, 49 of a 7 x 7 one tile and 1) runs on half vectors: a CPU that
  executes its widest vectors as two halves (Zen 4's AVX-512) does half the work for it, one
  that does not the same. One thread, Zen 4: 1x1 convolutions' GEMMs on 14 x 14 2% faster
  (256 to 1024 channels, 944 to 925 us), on 7 x 7 5% (512 to 2048, 1162 to 1107 us).

Multiple threads: `rvm.kernels.blas` cuts large products into pieces on rvm's pool, one
call of this each.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic, overload

from rvm.kernels import parfor
from rvm.kernels.blocks import kept
from rvm.kernels.cpu import Cpu, cpu, target_features
from rvm.kernels.jitting import alive, jit

__all__ = [
    "BLOCK_BYTES",
    "FUSED_EPILOGUE",
    "IN_PLACE_ROWS",
    "KC",
    "LANES",
    "MR",
    "NO_EPILOGUE",
    "NR",
    "applies",
    "bands_on_packed",
    "block_bytes",
    "column_step",
    "depth_block",
    "fuses",
    "has_epilogue",
    "in_place_rows",
    "moved",
    "takes_packed",
    "pack_whole",
    "packs",
    "packs_in_place",
    "require",
    "sgemm",
    "sgemm_segments",
]


def _shape(c: Cpu) -> tuple[int, int, int, bool]:
    """(lanes, rows, vectors, fma): the micro-tile for the target's vector registers --
    MR x (vectors x lanes) accumulators with room left for B's vectors and A's broadcast."""
    if c.vector_bits == 512:
        return 16, 8, 3, True  # 24 accumulators of 32 zmm registers
    if c.vector_bits == 256:
        return 8, 6, 2, c.fma  # 12 of 16 ymm registers
    return 4, 6, 2, c.fma  # 12 of 16 xmm registers


def depth_block(c: Cpu, rows: int) -> int:
    """`KC`: the depth block. A band's ``rows`` x ``KC`` floats of A are read again for every
    tile across C, so they take half of L1d (the other half streams B's rows): the power of two
    that fits, 128 to 1024 (512 with a 48 KB L1d and 8 rows; 256 and 128 were no faster
    there)."""
    fit = max(1, c.l1d // 2 // (4 * rows))
    return min(1024, max(128, 1 << (fit.bit_length() - 1)))


def block_bytes(c: Cpu) -> int:
    """`BLOCK_BYTES`: B's rows for a block of C's columns at most, half of one core's L2 (every
    band of A walks the block, which stays there)."""
    return max(64 << 10, c.l2 // 2)


def in_place_rows(c: Cpu, depth: int, block: int, rows: int) -> int:
    """`IN_PLACE_ROWS`: the rows of A whose depth block (``depth`` = `KC` floats a row) fits in
    the part of L2 that B's block (``block`` = `BLOCK_BYTES`) leaves, at least one band
    (``rows`` = `MR`). While the whole of A's depth block stays in L2 beside B's, every band
    computes from L2 and the first band's strided reads of B (prefetched, a stream a row)
    overlap its multiply-adds; with more rows A is read from L3 as well, and the pass before
    the bands, one stream at about ``memcpy``'s rate, cost less. Counted at the full depth
    block whatever the product's depth: 256 rows of depth 64 lost too."""
    return max(rows, (c.l2 - block) // (4 * depth))


_target_features = target_features  # the name `bf16gemm` and `qgemm` import
LANES, MR, VECTORS, _FMA = _shape(cpu())
NR = LANES * VECTORS  # a tile's columns at most
PLAIN_STORES = not cpu().mask_registers
"""Whether a tile whose vectors are all whole stores them (and reads C, adding) without
masks. Where masks are vector registers (AVX2's ``vmaskmovps``), a masked store costs several
plain ones: on a Zen 3 core, 1x1 convolutions' GEMMs of depth 16 to 64 took 0.79-0.90 of MLAS's
time with plain stores against 1.05-1.33 masked. AVX-512's masks are registers of their own:
its tiles store under them as before."""
HALF = LANES // 2 if LANES >= 8 else 0  # a tail tile's lanes on half vectors (`_micro_typing`)


def panel_width() -> int:
    """The panel width this CPU's GEMM reads best: its micro-tile's columns (`NR`). Packed
    weights (`rvm.kernels.packed`) take it; a pass asks it here, where importing loads no
    library code."""
    return NR


KC = depth_block(cpu(), MR)
PACK_B = VECTORS * LANES * 4 <= cpu().line
"""Whether a plain GEMM (one run of B's rows, no table) copies B's blocks into panels of `NR`
columns first (`_packed_blocks`): where a tile's row of B is one cache line (AVX2's 16
floats), read in place its ``KC`` rows are ``KC`` lines on as many pages, which the
hardware does not prefetch. On a Zen 3 core (AVX2, 32 KB L1d, 512 KB L2) the GEMMs of
resnet50's and squeezenet's 1x1 convolutions went from 31-49 GFLOP/s (0.52-0.81 of ONNX
Runtime's MLAS, which packs B too) to 44-80 (0.75-1.28 of MLAS), packed panels read by
`_micro_panel`. AVX-512's three lines a row were not measured packed: they read in place."""
BLOCK_BYTES = block_bytes(cpu())
PACK_FLOATS = max(KC * NR, BLOCK_BYTES // 4)
"""The floats of `_packed_blocks`' panels, the most a block of B takes (``min(KC, k)``
rows by its columns, `BLOCK_BYTES` or one panel): one size, so that its scratch is a block
kept across calls (`rvm.kernels.blocks.kept`). From ``malloc`` at each call (256 KB here),
it was mapped fresh or taken from a trimmed heap in some processes and its pages faulted in
again at every call: on a Zen 3 core with ``MALLOC_MMAP_THRESHOLD_=65536`` (fresh pages each
call) 1x1 convolutions' GEMMs took 1.3-1.8 times as long (512 to 128 channels on 14 x 14 326
-> 485 µs, squeezenet's 64 to 16 at 55 x 55 147 -> 270), as in one process of
`benchmarks/conv_methods.py` where densenet121's 14 x 14 GEMMs ran at 43-49 GFLOP/s against
78-82 in others."""
IN_PLACE_ROWS = in_place_rows(cpu(), KC, BLOCK_BYTES, MR)
"""The most rows of C for which `_packed_blocks` packs B in its first band (`packs_in_place`):
that band's tiles read whole panels of B where they are (`_micro_panel` in place, each step
prefetching its row of B `AHEAD` tiles on, as tiles on plain rows do) and store each row's
vectors into the panel as they go, which the other bands then read; with one band (``m <=
MR``) nothing is stored. B is read once, by the tiles, where a pass before the bands read it
and wrote the panels: a copy at about ``memcpy``'s rate (64 rows of 3025 floats: 27-37 µs,
the same bytes copied by NumPy 29 µs), 16-29% of the time of a 1x1 convolution with 16 to 64
output channels (squeezenet's squeezes, 3 to 11 bands), 2-9% of one with 256 to 1024.
Whole panels of B's rows by their stride only (`_in_place`): the others are packed before
their tile; B's rows through a table (a convolution's taps) are packed before the bands.
Same process, one thread, thread CPU, two runs of 40-60 alternated calls on a Zen 3 core:
64->6 at 55 x 55 0.61-0.70 of the time, 64->16 0.89-0.91, 128->16 0.90-0.93, resnet50's 256
->64 and 256->128 at 56 x 56 0.87-0.97, 512->128 at 28 x 28 0.95-0.99, 13 x 13 maps 0.97-1.03;
from 224 rows it lost 1-6% (576->224 at 14 x 14, 64->256 at 56 x 56, 1024->512 at 14 x 14,
512->1000 at 13 x 13): the gain goes as the pack's share, two floats moved a column of B
against ``m`` multiply-adds, while the in-place band's own slowing does not. The break-even
is the machine's (`in_place_rows`): 128 there (512 KB of L2, B's block 256 KB, `KC` 512);
with AVX-512 (where `PACK_B` is false, so no block is packed) a 1 MB L2 gives 256."""
FUSED_EPILOGUE = PACK_B
"""Whether `sgemm_segments` applies a convolution's epilogue (a per-row bias, a residual, a
ReLU: ``epilogue``) in registers as it stores each tile of its last depth block, so that C is
written once and not read again by a pass over it (`rvm.kernels.epipass`): on one plain run of
B (no table), where B is packed (`PACK_B`), its tiles' store (`_micro_panel`). Elsewhere the
caller runs the pass (`fuses`)."""
NO_EPILOGUE = (0, 0, 0, 0)
"""`sgemm_segments`' ``epilogue`` when there is none: (bias, bias step, act, residual)."""

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
LINE = max(1, cpu().line // 4)  # floats of a cache line: what one prefetch brings
AHEAD = 2
"""How many tiles ahead along C a tile of `MR` rows prefetches B's rows (plain rows, not a
convolution's taps through a table), each step its own row, into L2. A wide B that comes from
memory (a 1x1 convolution's input at batch 8, squeezenet's 64-128 rows of 3025 positions) is
read in as many streams as it has rows, too many for the hardware's prefetcher: squeezenet's
squeeze layers at 55 x 55 on a cold input took 79-146 against 168-317 µs an image on a Zen 4
core (one tile ahead: 159-299; four: 92-165)."""


def _micro_for(mr: int, padded: bool = False):  # type: ignore[no-untyped-def]
    """The micro-kernel intrinsic for tiles of up to ``mr`` rows of C (`_micro`: `MR`;
    `_micro_row`: one row, a GEMV's, which does not multiply `MR` rows for one; ``padded``:
    `_micro_panel`, B's rows in panels of whole vectors)."""

    if padded:  # and a convolution's epilogue in the final store (`FUSED_EPILOGUE`)

        @intrinsic
        def panel(typingctx, kc, ap, lda, b, rows_b, indexed, c, ldc, add, rows, vectors, last,
                  b_vec, c_vec, narrow, wrap, cols, col0, bias, bias_step, act, res):  # type: ignore[no-untyped-def]  # fmt: skip  # noqa: E501
            return _micro_typing(mr, padded)

        return panel

    @intrinsic
    def micro(typingctx, kc, ap, lda, b, rows_b, indexed, c, ldc, add, rows, vectors, last,
              b_vec, c_vec, narrow, wrap, cols, col0):  # type: ignore[no-untyped-def]  # fmt: skip
        return _micro_typing(mr, padded)

    return micro


def _micro_typing(MR: int, padded: bool = False):  # type: ignore[no-untyped-def]  # noqa: N803
    """The micro-kernel: on int64 addresses, ``C[:rows, :width] (+)= A[:rows, :kc] @
    B[:kc, :width]`` with A's rows ``lda`` floats apart and ``width = (vectors - 1) * LANES +
    last`` (``0 < vectors <= VECTORS``, ``0 < last <= LANES``). B's row ``s`` starts ``rows_b
    * s`` floats after ``b``, or, ``indexed``, ``table[s]`` floats after it, ``rows_b`` being
    the table's address. Vector ``j`` of a row is ``j * b_vec`` floats on in B and ``j *
    c_vec`` in C: `LANES` for one run of columns; ``narrow``, each vector is a segment of
    ``last`` columns of its own (`sgemm_segments`). The IR has one loop per (vectors,
    indexed), chosen by a switch: each keeps its accumulators in registers. ``MR``: the
    tile's rows at most (rows past ``rows`` are computed, not stored).

    ``wrap`` (0: none; indexed tiles only): B's columns are positions of rows ``wrap`` apart
    of which the first ``cols`` are C's (a convolution's output rows in its padded input,
    `sgemm_segments`), the tile's first one column ``col0`` of its row, and ``c`` its place
    in C, whose rows are ``cols`` apart: each vector goes to C in pieces, one per row it
    spans, each a masked store ``m * (wrap - cols)`` floats back for the ``m``-th row on;
    the columns past ``cols`` of each row are computed, not stored.

    ``padded`` (`_micro_panel`; plain rows of B only: ``narrow`` and ``wrap`` 0): B's rows
    are whole vectors, read without a mask (a packed panel's, zero past the product's
    columns: `_pack`), and not prefetched `AHEAD` (a panel is one stream), nor A's next band
    (its address cost more than it saved: see the module's notes). There ``indexed`` means in
    place (whole panels only, ``vectors`` = `VECTORS`): B's rows ``rows_b`` floats apart,
    each prefetched `AHEAD` tiles on, and, where ``col0`` is not 0, each row's vectors also
    stored at that address, `NR` floats a row, as `_pack` would (`IN_PLACE_ROWS`). On AVX2
    the last vector's mask in the loop took a 17th ymm register: LLVM rebuilt it from the stack
    every step.

    A padded tile also takes a convolution's epilogue, applied in registers as it stores
    (`FUSED_EPILOGUE`; all 0: none): ``bias`` the address of its first row's bias (0: none),
    the next rows' ``bias_step`` floats on (1, or 0: one value for all), then ``res`` (floats
    from C to the residual, of C's layout; 0: none) added, then a ReLU when ``act``: C is
    written once, ``act(C + bias + res)``, in the epilogue pass's order
    (`rvm.kernels.epipass`)."""
    sig = nt.void(*(nt.int64,) * (22 if padded else 18))

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        kc, ap, lda, b, rows_b, indexed, c, ldc, accumulate, rows, vectors, last = args[:12]
        b_vec, c_vec, narrow, wrap, cols, col0 = args[12:18]
        i1, i32, i64, f32 = ir.IntType(1), ir.IntType(32), ir.IntType(64), ir.FloatType()
        fptr, i8p, module = f32.as_pointer(), ir.IntType(8).as_pointer(), builder.module

        def declare(ret, params, intrinsic_name):  # type: ignore[no-untyped-def]
            fnty = ir.FunctionType(ret, params)
            return cgutils.get_or_insert_function(module, fnty, intrinsic_name)

        ap, b, c, panel = (builder.inttoptr(x, fptr) for x in (ap, b, c, col0))
        copying = builder.icmp_signed("!=", col0, i64(0))
        table = builder.inttoptr(rows_b, i64.as_pointer())
        align = i32(4)

        def width(lanes):  # type: ignore[no-untyped-def]
            """(vector type, fma, masked load, masked store, mask of the last vector's
            ``last`` lanes) for vectors of ``lanes`` floats."""
            vec = ir.VectorType(f32, lanes)
            vptr, masks, name = vec.as_pointer(), ir.VectorType(i1, lanes), f"v{lanes}f32"
            ids = ir.Constant(ir.VectorType(i64, lanes), list(range(lanes)))
            return (
                vec,
                declare(vec, [vec] * 3, f"llvm.fma.{name}"),
                declare(vec, [vptr, i32, masks, vec], f"llvm.masked.load.{name}.p0"),
                declare(ir.VoidType(), [vec, vptr, i32, masks], f"llvm.masked.store.{name}.p0"),
                builder.icmp_signed("<", ids, broadcast(last, ids.type)),
            )

        def broadcast(value, vtype):  # type: ignore[no-untyped-def]
            undef = ir.Constant(vtype, ir.Undefined)
            one = builder.insert_element(undef, value, i32(0))
            splat = ir.Constant(ir.VectorType(i32, vtype.count), [0] * vtype.count)
            return builder.shuffle_vector(one, undef, splat)

        half = HALF if MR > 1 else 0  # a one-row tile (a GEMV's) keeps one variant a width
        widths = {LANES: width(LANES), half: width(half)} if half else {LANES: width(LANES)}
        mask = widths[LANES][4]
        # Vectors other than the last are whole, unless they are narrow segments.
        whole = ir.Constant(ir.VectorType(i1, LANES), [1] * LANES)
        inner = builder.select(builder.icmp_signed("!=", narrow, i64(0)), mask, whole)

        # A's rows as they are (no packing): row i at i * lda, rows past ``rows`` read the
        # last one (their sums are not stored).
        last_row = builder.sub(rows, i64(1))
        row_ids = [
            builder.select(builder.icmp_signed("<", i64(i), rows), i64(i), last_row)
            for i in range(MR)
        ]
        a_rows = [builder.mul(row, lda) for row in row_ids]

        if padded:  # the epilogue's operands (`_micro_typing`)
            bias, bias_step, act, res = args[18:]
            has_bias = builder.icmp_signed("!=", bias, i64(0))
            biases = builder.select(has_bias, builder.inttoptr(bias, fptr), _zero(module))
            bias_step = builder.select(has_bias, bias_step, i64(0))
            relu = builder.icmp_signed("!=", act, i64(0))
            floor_value = builder.select(relu, f32(0.0), f32(float("-inf")))
            fusing = builder.icmp_signed("!=", builder.or_(builder.or_(bias, act), res), i64(0))

        prefetch = None
        if MR > 1:
            hint = declare(ir.VoidType(), [i8p, i32, i32, i32], "llvm.prefetch.p0")
            next_band = builder.gep(ap, [builder.mul(lda, i64(MR))])

            def prefetch(step):  # type: ignore[no-untyped-def]
                # The next band of A (`MR` rows on) into L2, a line every other step, the
                # rows in turn: ``kc`` floats of each of its 8 rows in ``kc`` steps (more of
                # its 6 on AVX2). Past A's last row it prefetches what follows (no fault).
                at = builder.lshr(step, i64(1))
                row, line = builder.urem(at, i64(MR)), builder.udiv(at, i64(MR))
                offset = builder.add(builder.mul(row, lda), builder.mul(line, i64(LINE)))
                at = builder.bitcast(builder.gep(next_band, [offset]), i8p)
                builder.call(hint, [at, i32(0), i32(2), i32(1)])  # read, into L2, data

            def ahead(row_b):  # type: ignore[no-untyped-def]
                # This step's row of B `AHEAD` tiles on along C, into L2 (see `AHEAD`).
                for line in range(-(-NR // LINE)):
                    at = builder.gep(b, [builder.add(row_b, i64(AHEAD * NR + line * LINE))])
                    builder.call(hint, [builder.bitcast(at, i8p), i32(0), i32(2), i32(1)])

        def tile(vectors, indexed, lanes):  # type: ignore[no-untyped-def]
            vec, fma, masked_load, masked_store, mask = widths[lanes]
            vptr, zero = vec.as_pointer(), ir.Constant(vec, None)

            def load(at, j):  # type: ignore[no-untyped-def]
                if padded:
                    return builder.load(at, align=4)
                lanes = mask if j == vectors - 1 else inner
                return builder.call(masked_load, [at, align, lanes, zero])

            def vector_at(base, offset, j, apart):  # type: ignore[no-untyped-def]
                at = builder.gep(base, [builder.add(offset, builder.mul(apart, i64(j)))])
                return builder.bitcast(at, vptr)

            if padded:  # the residual's lines of the tile into L2 while it computes
                with builder.if_then(builder.icmp_signed("!=", res, i64(0))):
                    for i in range(MR):
                        row = builder.add(builder.mul(ldc, row_ids[i]), res)
                        for end in (0, vectors * lanes - 1):
                            at = builder.gep(c, [builder.add(row, i64(end))])
                            builder.call(hint, [builder.bitcast(at, i8p), i32(0), i32(2), i32(1)])

            # Accumulators as stack slots: LLVM promotes them to registers.
            acc = [
                [cgutils.alloca_once_value(builder, zero) for _ in range(vectors)]
                for _ in range(MR)
            ]
            with cgutils.for_range(builder, kc) as loop:
                step = loop.index
                if prefetch is not None and not padded:  # (a panel's tile: see `_micro_typing`)
                    prefetch(step)
                if indexed and not padded:
                    row_b = builder.load(builder.gep(table, [step]))
                else:
                    row_b = builder.mul(step, rows_b)
                if prefetch is not None and (indexed if padded else not indexed):
                    ahead(row_b)
                if padded:
                    bs = [load(vector_at(b, row_b, j, i64(lanes)), j) for j in range(vectors)]
                    if indexed:  # in place: each row of B also into its panel (``col0``)
                        with builder.if_then(copying):
                            at_panel = builder.mul(step, i64(vectors * lanes))
                            for j in range(vectors):
                                at = vector_at(panel, at_panel, j, i64(lanes))
                                builder.store(bs[j], at, align=4)
                else:
                    bs = [load(vector_at(b, row_b, j, b_vec), j) for j in range(vectors)]
                for i in range(MR):
                    a = builder.load(builder.gep(ap, [builder.add(a_rows[i], step)]))
                    a = broadcast(a, vec)
                    for j in range(vectors):
                        old = builder.load(acc[i][j])
                        if _FMA:
                            new = builder.call(fma, [a, bs[j], old])
                        else:
                            new = builder.fadd(builder.fmul(a, bs[j]), old)
                        builder.store(new, acc[i][j])

            def store(adding, whole=False, fused=None):  # type: ignore[no-untyped-def]
                # ``whole``: every vector is all C's (plain loads and stores, no mask).
                # ``fused``: the epilogue (`_micro_typing`) applied, True with a residual.
                def read(at, lanes):  # type: ignore[no-untyped-def]
                    if whole:
                        return builder.load(at, align=4)
                    return builder.call(masked_load, [at, align, lanes, zero])

                for i in range(MR):
                    with builder.if_then(builder.icmp_signed("<", i64(i), rows)):
                        row_c = builder.mul(ldc, i64(i))
                        if fused is not None:
                            at_bias = builder.gep(biases, [builder.mul(bias_step, i64(i))])
                            bias_i = broadcast(builder.load(at_bias), vec)
                        for j in range(vectors):
                            at = vector_at(c, row_c, j, c_vec)
                            value = builder.load(acc[i][j])
                            lanes = mask if j == vectors - 1 else inner
                            if adding:
                                value = builder.fadd(read(at, lanes), value)
                            if fused is not None:
                                value = builder.fadd(value, bias_i)
                                if fused:
                                    at_res = vector_at(c, builder.add(row_c, res), j, c_vec)
                                    value = builder.fadd(value, read(at_res, lanes))
                                floor = broadcast(floor_value, vec)
                                below = builder.fcmp_ordered(">", floor, value)
                                value = builder.select(below, floor, value)
                            if whole:
                                builder.store(value, at, align=4)
                            else:
                                builder.call(masked_store, [value, at, align, lanes])

            def store_by_rows(fused=None):  # type: ignore[no-untyped-def]
                # C is read only when adding to it (a write-only tile costs no load of C).
                # Without mask registers, a tile whose vectors are all whole stores without
                # masks (`PLAIN_STORES`).
                plain = padded or PLAIN_STORES
                if plain:
                    full = builder.icmp_signed("==", last, i64(lanes))
                    if not padded:
                        full = builder.and_(full, builder.icmp_signed("==", narrow, i64(0)))
                with builder.if_else(builder.icmp_signed("!=", accumulate, i64(0))) as (add, write):
                    for block, adding in ((add, True), (write, False)):
                        with block:
                            if not plain:
                                store(adding)
                                continue
                            with builder.if_else(full) as (plain, masked):
                                with plain:
                                    store(adding, whole=True, fused=fused)
                                with masked:
                                    store(adding, fused=fused)

            if padded:  # the epilogue, with a residual or without, or none
                with builder.if_else(fusing) as (fused, bare):
                    with fused:
                        with builder.if_else(builder.icmp_signed("!=", res, i64(0))) as (r, no_r):
                            with r:
                                store_by_rows(fused=True)
                            with no_r:
                                store_by_rows(fused=False)
                    with bare:
                        store_by_rows()
                return
            if not indexed:
                store_by_rows()
                return
            with builder.if_else(builder.icmp_signed("!=", wrap, i64(0))) as (wraps, by_rows):
                with wraps:  # the accumulators through memory, to one function
                    full = widths[LANES][0]
                    spill = cgutils.alloca_once(builder, full, size=MR * VECTORS)
                    for i in range(MR):
                        for j in range(vectors):
                            at = builder.gep(spill, [i64(i * VECTORS + j)])
                            value = builder.load(acc[i][j])
                            if lanes < LANES:  # a half vector's lanes first, zeros after
                                ids = ir.Constant(ir.VectorType(i32, LANES), list(range(LANES)))
                                value = builder.shuffle_vector(value, zero, ids)
                            builder.store(value, at)
                    builder.call(_wrapped_store(module), [
                        spill, c, ldc, rows, i64(vectors), last, wrap, cols, col0,
                        accumulate])  # fmt: skip
                with by_rows:
                    store_by_rows()

        # One tile loop per variant: (vectors - 1) * 2 + indexed picks it; a tile of one
        # vector whose lanes fit half of one takes half vectors (`HALF`), 2 * VECTORS + indexed.
        variants = [(v, x, LANES) for v in range(1, VECTORS + 1) for x in (0, 1)]
        if padded:  # "indexed" is in place, of whole panels only: no code for the others
            variants = [(v, x if x == 0 or v == VECTORS else None, w) for v, x, w in variants]
        picked = builder.add(builder.mul(builder.sub(vectors, i64(1)), i64(2)), indexed)
        if half:
            variants += [(1, x if x == 0 or not padded else None, half) for x in (0, 1)]
            fits = builder.and_(
                builder.icmp_signed("==", vectors, i64(1)),
                builder.icmp_signed("<=", last, i64(half)),
            )
            picked = builder.select(fits, builder.add(i64(2 * VECTORS), indexed), picked)
        blocks = [builder.append_basic_block(f"tile{v}.{x}.{w}") for v, x, w in variants]
        done = builder.append_basic_block("tiled")
        switch = builder.switch(picked, blocks[VECTORS * 2 - (2 if padded else 1)])
        for index, ((v, x, w), block) in enumerate(zip(variants, blocks)):
            switch.add_case(i64(index), block)
            builder.position_at_end(block)
            if x is not None:
                tile(v, x, w)
            builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen


def _zero(module: ir.Module) -> ir.GlobalVariable:
    """A float32 zero in ``module``: the bias of a fused epilogue without one."""
    name = "rvm_sgemm_zero"
    if name in module.globals:
        return module.globals[name]
    zero = ir.GlobalVariable(module, ir.FloatType(), name)
    zero.initializer, zero.global_constant, zero.linkage = ir.FloatType()(0.0), True, "internal"
    return zero


def _wrapped_store(module: ir.Module) -> ir.Function:
    """The micro-kernel's store of a wrapped tile (`_micro_typing`), one function in a module
    that every tile loop calls (its code once: unrolled into each loop, it cost 20 CPU-s more
    to build): ``spill``'s ``rows`` x ``vectors`` accumulators (`VECTORS` a row) into C (at
    ``c``, rows ``ldc`` apart), each in one masked store per output row it spans, added to
    what is there when ``add``."""
    name = f"rvm_sgemm_wrapped_store_{LANES}"
    if name in module.globals:
        return module.globals[name]
    i1, i32, i64, f32 = ir.IntType(1), ir.IntType(32), ir.IntType(64), ir.FloatType()
    vec, lanes_i64 = ir.VectorType(f32, LANES), ir.VectorType(i64, LANES)
    vptr, masks = vec.as_pointer(), ir.VectorType(i1, LANES)
    fnty = ir.FunctionType(ir.VoidType(), [vptr, f32.as_pointer()] + [i64] * 8)
    fn = ir.Function(module, fnty, name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    spill, c, ldc, rows, vectors, last, wrap, cols, col0, add = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    sig = f"v{LANES}f32"
    masked_load = cgutils.get_or_insert_function(
        module, ir.FunctionType(vec, [vptr, i32, masks, vec]), f"llvm.masked.load.{sig}.p0"
    )
    masked_store = cgutils.get_or_insert_function(
        module, ir.FunctionType(ir.VoidType(), [vec, vptr, i32, masks]),
        f"llvm.masked.store.{sig}.p0",
    )  # fmt: skip
    zero, align = ir.Constant(vec, None), i32(4)
    splat = ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)

    def broadcast(value):  # type: ignore[no-untyped-def]
        undef = ir.Constant(lanes_i64, ir.Undefined)
        return builder.shuffle_vector(builder.insert_element(undef, value, i32(0)), undef, splat)

    lane_ids = ir.Constant(lanes_i64, list(range(LANES)))
    tail = builder.icmp_signed("<", lane_ids, broadcast(last))
    whole = ir.Constant(masks, [1] * LANES)
    gap = builder.sub(wrap, cols)
    # Vector by vector, piece by piece (an output row's lanes: a mask and a place), each row.
    with cgutils.for_range(builder, vectors) as v:
        j = v.index
        first = builder.add(col0, builder.mul(j, i64(LANES)))
        at_q = builder.add(lane_ids, broadcast(first))
        lanes = builder.select(
            builder.icmp_signed("==", j, builder.sub(vectors, i64(1))), tail, whole
        )
        m0 = builder.sdiv(first, wrap)
        count = builder.sub(builder.sdiv(builder.add(first, i64(LANES - 1)), wrap), m0)
        count = builder.add(count, i64(1))

        def pieces(body):  # type: ignore[no-untyped-def]
            with cgutils.for_range(builder, count) as piece:
                m = builder.add(m0, piece.index)
                rel = builder.sub(at_q, broadcast(builder.mul(m, wrap)))
                inside = builder.and_(
                    builder.icmp_signed(">=", rel, ir.Constant(lanes_i64, [0] * LANES)),
                    builder.icmp_signed("<", rel, broadcast(cols)),
                )
                part = builder.and_(inside, lanes)
                back = builder.sub(builder.mul(j, i64(LANES)), builder.mul(m, gap))
                with cgutils.for_range(builder, rows) as row:
                    at_c = builder.add(builder.mul(ldc, row.index), back)
                    at = builder.bitcast(builder.gep(c, [at_c]), vptr)
                    slot = builder.gep(spill, [builder.add(
                        builder.mul(row.index, i64(VECTORS)), j)])  # fmt: skip
                    body(at, part, slot)

        def gather(at, part, slot):  # type: ignore[no-untyped-def]
            held = builder.call(masked_load, [at, align, part, zero])
            builder.store(builder.fadd(builder.load(slot), held), slot)

        with builder.if_then(builder.icmp_signed("!=", add, i64(0))):
            pieces(gather)
        pieces(lambda at, part, slot: builder.call(
            masked_store, [builder.load(slot), at, align, part]))  # fmt: skip
    builder.ret_void()
    return fn


_micro = _micro_for(MR)
_micro_row = _micro_for(1)
_micro_panel = _micro_for(MR, padded=True)


@intrinsic
def _floats_at(typingctx, address):  # type: ignore[no-untyped-def]
    """A float32 pointer to the int64 ``address``."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.inttoptr(args[0], ir.FloatType().as_pointer())

    return nt.CPointer(nt.float32)(nt.int64), codegen


@intrinsic
def _ints_at(typingctx, address):  # type: ignore[no-untyped-def]
    """An int64 pointer to the int64 ``address`` (a table of B's rows)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.inttoptr(args[0], ir.IntType(64).as_pointer())

    return nt.CPointer(nt.int64)(nt.int64), codegen


@jit(**_OPTS, inline="always")
def wrapped(c, j, wrap, cols, phase):  # type: ignore[no-untyped-def]
    """Where B's column ``j`` of a run goes in C (``c``: the run's first column's place) and
    its column in its row: with ``wrap``, B's rows of positions are ``wrap`` apart, C's
    ``cols``, and the run starts at column ``phase`` of a row (`sgemm_segments`)."""
    if wrap == 0:
        return c + 4 * j, 0
    q = phase + j
    return c + 4 * ((q // wrap) * cols + q % wrap - phase), q % wrap


@jit(**_OPTS)
def _tiles(kc, a, lda, b, rows_b, indexed, c, ldc, add, rows, width, wrap, cols, phase):  # type: ignore[no-untyped-def]  # noqa: E501
    """A's band of ``rows`` times B's first ``width`` columns, tile after tile along C's rows
    (``wrap``, ``cols``, ``phase``: see `sgemm_segments`)."""
    for j0 in range(0, width, NR):
        n = min(NR, width - j0)
        vectors = (n + LANES - 1) // LANES
        last = n - (vectors - 1) * LANES
        at_c, col0 = wrapped(c, j0, wrap, cols, phase)
        _micro(kc, a, lda, b + 4 * j0, rows_b, indexed, at_c, ldc, add, rows, vectors,
               last, LANES, LANES, 0, wrap, cols, col0)  # fmt: skip


# A library of its own, linked into its callers (the GEMM's and the segmented GEMM's tasks):
# its paths are tasks (`TASKS`), so it links no micro-kernel, and Numba's IR inlining (which
# types and lowers a copy of it in every caller) cost more than a link: on a Zen 3 core the
# ``gemm`` and ``gemm_segments`` tasks built in 1.45-1.75 CPU-s against 2.18-2.31 inlined.
# (Before its paths were tasks, every level of the chain linked the micro-kernel and was
# optimized again: inlining it then took the GEMM task from 3.5 to 2.1 CPU-s on a Zen 4.)
@jit(**_OPTS)
def sgemm_segments(
    a,
    lda,
    b,
    ldb,
    table,
    c,
    ldc,
    m,
    k,
    segments,
    width,
    b_step,
    c_step,
    accumulate,
    wrap,
    cols,
    phase,
    epilogue,
):  # type: ignore[no-untyped-def]  # noqa: E501
    """``C (+)= A[m, k] @ B`` where C's and B's columns come in ``segments`` runs of
    ``width``: run ``s`` of B starts ``s * b_step`` floats after ``b``, of C ``s * c_step``
    after ``c``. B's row ``r`` is ``r * ldb`` floats on, or with a ``table`` (an int64 array's
    address, else 0) ``table[r]``. One segment of ``n`` columns is a plain GEMM; a convolution
    reads its taps in place, an output row a segment (`rvm.kernels.conv`). float32
    at int64 addresses, in the calling thread, no checks.

    ``wrap`` (with a table and one segment; 0: none): B's columns are positions in rows
    ``wrap`` apart, of which the first ``cols`` are C's, whose rows are ``cols`` apart (a
    convolution's output rows in its zero-padded input, ``wrap - cols`` columns between two:
    the whole map one run, so that a row's last vector is not mostly idle lanes); the run
    starts at column ``phase`` of its row, ``c`` at that place in C. The other columns are
    computed, not stored.

    ``epilogue`` (`NO_EPILOGUE`: none), where `fuses` holds: (the address of the bias of C's
    first row or 0, the floats from a row's bias to the next's (1, or 0: one for all), the
    activation (1: ReLU), the floats from C to the residual, of C's layout, or 0): C becomes
    ``act(A @ B + bias + residual)``, applied as each tile stores (`FUSED_EPILOGUE`)."""
    if m <= 0 or segments <= 0 or width <= 0:
        return
    if k <= 0:
        if not accumulate:
            for s in range(segments):
                out = _floats_at(c + 4 * s * c_step)
                for i in range(m):
                    for j in range(width):
                        out[i * ldc + j] = 0.0
        return
    # B packed (`packs`), or one run in place (a plain GEMM): blocks of C's columns whose rows
    # of B stay in L2 while every band of A walks them. Runs of taps read in place are not
    # cut: their rows overlap (a block would read every band of A again for little B), and
    # cutting them was slower.
    step = column_step(k)
    job = _path_job()
    job[0], job[1], job[2], job[3], job[4], job[5] = _PATH_JOB, a, lda, b, ldb, table
    job[6], job[7], job[8], job[9], job[10], job[11] = c, ldc, m, k, segments, width
    job[12], job[13], job[14], job[15] = b_step, c_step, accumulate, wrap
    job[16], job[17], job[18] = cols, phase, step
    job[19], job[20], job[21], job[22] = epilogue
    # A band or less reads B once, unpacked; an epilogue is the packed tiles' own.
    if takes_packed(m, segments, width, c_step, wrap, epilogue):
        _call_packed(0, job)
    else:
        _call_block(0, job)


# The job of `sgemm_segments`' two paths (int64, in its stack frame): its length; a, lda, b,
# ldb, table, c, ldc, m, k, segments, width, b_step, c_step, accumulate, wrap, cols, phase (as
# `sgemm_segments` takes them); the step of C's columns a block of B's rows takes; the
# epilogue's four.
_PATH_JOB = 23
_path_job = parfor.stack_job(_PATH_JOB)


def _packed_task(p, like, data):  # type: ignore[no-untyped-def]
    """`sgemm_segments` where it packs B (`_packed_blocks`), as a task (`rvm.kernels.parfor`):
    built when a product first takes this path, once, not into every caller of the GEMM."""
    j = parfor.job(data)
    _packed_blocks(j[1], j[2], j[3], j[4], j[5], j[6], j[7], j[8], j[9], j[10] * j[11], j[11],
                   j[12], j[18], j[14], (j[19], j[20], j[21], j[22]))  # fmt: skip


def _block_task(p, like, data):  # type: ignore[no-untyped-def]
    """`sgemm_segments` on B in place (`_block`), as a task (`rvm.kernels.parfor`): one block
    of ``step`` columns after the other for one run, all runs in one block otherwise."""
    j = parfor.job(data)
    a, lda, b, ldb, table, c, ldc, m, k = j[1], j[2], j[3], j[4], j[5], j[6], j[7], j[8], j[9]
    segments, width, b_step, c_step, accumulate = j[10], j[11], j[12], j[13], j[14]
    wrap, cols, phase, step = j[15], j[16], j[17], j[18]
    if segments == 1:
        for j0 in range(0, width, step):
            at_c, col0 = wrapped(c, j0, wrap, cols, phase)
            _block(a, lda, b + 4 * j0, ldb, table, at_c, ldc, m, k, 1, min(step, width - j0),
                   0, 0, accumulate, wrap, cols, col0)  # fmt: skip
        return
    _block(a, lda, b, ldb, table, c, ldc, m, k, segments, width, b_step, c_step, accumulate,
           0, 0, 0)  # fmt: skip


parfor.export_task("sgemm_packed", _packed_task)
parfor.export_task("sgemm_block", _block_task)
_call_packed = parfor.caller("sgemm_packed", "float32")
_call_block = parfor.caller("sgemm_block", "float32")
TASKS = ("sgemm_block", "sgemm_packed") if PACK_B else ("sgemm_block",)
"""The tasks of `sgemm_segments`' paths (`rvm.kernels.parfor`), each built when a product
first takes it: B in place, and packed (`packs`) where `PACK_B` holds."""
GEMM_TASKS = ("sgemm_packed",) if PACK_B else ("sgemm_block",)
"""The task a plain GEMM of more than `MR` rows takes (`packs`): what a matmul's first run
likely builds (`rvm.kernels.blas.METHOD_TASKS`)."""


@intrinsic
def _move_panel_row(typingctx, src, dst):  # type: ignore[no-untyped-def]
    """Copies `NR` floats from the int64 address ``src`` to ``dst``, as one vector."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        vptr = ir.VectorType(ir.FloatType(), NR).as_pointer()
        src, dst = (builder.inttoptr(x, vptr) for x in args)
        builder.store(builder.load(src, align=4), dst, align=4)
        return context.get_dummy_value()

    return nt.void(nt.int64, nt.int64), codegen


@jit(**_OPTS)
def _pack(b, ldb, table, p0, kc, j0, cols, run, b_step, into):  # type: ignore[no-untyped-def]
    """B's rows ``p0`` to ``p0 + kc`` by C's columns ``j0`` to ``j0 + cols`` into the floats at
    the address ``into``: panels of `NR` columns one after the other, each ``kc`` rows of `NR`
    floats, the last panel's columns past ``cols`` zeros (`_micro_panel` reads whole vectors).
    B's row ``r`` starts ``r * ldb`` floats after the address ``b``, or ``table[r]`` (an int64
    array's address, else 0); C's column ``q`` is column ``q % run`` of B's run ``q // run``,
    ``b_step`` floats after the one before (`sgemm_segments`' runs end to end in C: a
    convolution's output rows, each a run of taps in its input's phases).

    A panel at a time, its rows in turn: the writes one stream, the reads one line a row of B
    (a stride the hardware follows). Row by row, each row's panels in turn, every write went
    to another panel, ``4 * kc * NR`` bytes on: on a Zen 3 core that took 1.1 to 1.75 times
    as long (147 to 1024 rows by 64 to 1024 columns; a 1x1 convolution's 256 rows of 3136
    positions: 340 against 195 us, a quarter of its GEMM of 64 rows). A panel within one run
    moves a vector a row; one across runs (or the last) moves its pieces a float at a time."""
    rows = _ints_at(table)
    for q0 in range(0, cols, NR):
        n = min(NR, cols - q0)
        q = j0 + q0
        s, off = q // run, q % run
        src, dst = b + 4 * (s * b_step + off), into + 4 * q0 * kc
        if n == NR and off + NR <= run:
            if table == 0:
                for r in range(kc):
                    _move_panel_row(src + 4 * (p0 + r) * ldb, dst + 4 * r * NR)
            else:
                for r in range(kc):
                    _move_panel_row(src + 4 * rows[p0 + r], dst + 4 * r * NR)
            continue
        for r in range(kc):
            row = _floats_at(src + 4 * (rows[p0 + r] if table != 0 else (p0 + r) * ldb))
            at = _floats_at(dst + 4 * r * NR)
            j, piece, skip = 0, min(n, run - off), 0
            while j < n:
                for t in range(piece):
                    at[j + t] = row[skip + t]
                j, skip = j + piece, skip + piece + b_step - run
                piece = min(n - j, run)
            for t in range(n, NR):
                at[t] = 0.0


@jit(**_OPTS, inline="always")
def has_epilogue(epilogue):  # type: ignore[no-untyped-def]
    """Whether ``epilogue`` (`sgemm_segments`') does anything: a bias, an activation or a
    residual (`NO_EPILOGUE` does none)."""
    return epilogue[0] != 0 or epilogue[2] != 0 or epilogue[3] != 0


@jit(**_OPTS, inline="always")
def packs(segments, width, c_step, wrap):  # type: ignore[no-untyped-def]
    """Whether `sgemm_segments` copies B into panels of `NR` columns (`PACK_B`) for a product
    over ``segments`` runs of ``width`` columns, C's ``c_step`` apart (``wrap``: its wrapped
    run, 0: none): one run, or runs end to end in C (a convolution's output rows), B's rows
    by their stride or through a table (its taps, `_pack`: an im2col straight into the
    panels, no column matrix)."""
    return PACK_B and wrap == 0 and (segments == 1 or c_step == width)


@jit(**_OPTS, inline="always")
def takes_packed(m, segments, width, c_step, wrap, epilogue):  # type: ignore[no-untyped-def]
    """Whether `sgemm_segments` takes its packed path (`sgemm_packed`) on a product of ``m``
    rows: B packs (`packs`) and there is more than a band of rows or an epilogue to apply."""
    return packs(segments, width, c_step, wrap) and (m > MR or has_epilogue(epilogue))


@jit(**_OPTS, inline="always")
def column_step(k):  # type: ignore[no-untyped-def]
    """C's columns a block of B's rows takes in a product of depth ``k`` (`sgemm_segments`):
    ``min(KC, k)`` rows of them fill `BLOCK_BYTES` at most, in whole tiles; every band of A
    walks the block, so A is read once a block."""
    return max(NR, BLOCK_BYTES // (4 * min(KC, k)) // NR * NR)


@jit(**_OPTS)
def moved(m, n, k, m_parts, n_parts):  # type: ignore[no-untyped-def]
    """The floats a product ``C[m, n] = A[m, k] @ B[k, n]`` whose B is packed (`packs`) moves
    beside its multiply-adds when cut into ``m_parts`` bands of C's rows by ``n_parts`` runs
    of its columns, one call a piece: each piece packs its columns of B (`_pack`: a read and a
    write of each float, the packed panels then read by every band in any cut) and reads its
    rows of A once a block of its columns (`column_step`; A is not packed). Bands pack all of
    B again each; column runs read all of A again each: the cut of a split product is the
    one that moves the least (`rvm.kernels.blas.packed_cut`)."""
    cols = -(-n // n_parts)  # a piece's columns, at most
    return 2 * m_parts * k * n + n_parts * -(-cols // column_step(k)) * m * k


@jit(**_OPTS, inline="always")
def fuses(segments, width, c_step, wrap, k):  # type: ignore[no-untyped-def]
    """Whether `sgemm_segments` applies an ``epilogue`` to a product of depth ``k`` over
    ``segments`` runs of ``width`` columns, C's ``c_step`` apart (``wrap``: its wrapped run):
    where it packs B (`packs`) and `FUSED_EPILOGUE` holds. A caller passes `NO_EPILOGUE`
    elsewhere and runs the pass."""
    return FUSED_EPILOGUE and packs(segments, width, c_step, wrap) and k > 0


@jit(**_OPTS, inline="always")
def packs_in_place(m):  # type: ignore[no-untyped-def]
    """Whether `_packed_blocks` packs B in its first band's tiles (`IN_PLACE_ROWS`) for a
    product of ``m`` rows (B's rows by their stride), not in a pass before the bands."""
    return m <= IN_PLACE_ROWS


@jit(**_OPTS, inline="always")
def _in_place(b, ldb, p0, q, n, run, b_step):  # type: ignore[no-untyped-def]
    """The address of B's row ``p0`` (rows by their stride) at C's column ``q`` where the
    panel of C's columns ``q`` to ``q + n`` is a whole one (``n`` = `NR`) in one run: read
    there by rows ``ldb`` floats apart, its copy is a vector a row (`_pack`); else 0."""
    s, off = q // run, q % run
    if n != NR or off + NR > run:
        return 0
    return b + 4 * (s * b_step + off + p0 * ldb)


@jit(**_OPTS, inline="always")
def _bands_on_panels(a, lda, c, ldc, m, p0, kc, j0, cols, panels, depth, add, last, epilogue,
                     first, b, ldb, table, run, b_step):  # type: ignore[no-untyped-def]  # fmt: skip
    """The bands of A's rows (``m``) times one depth block (rows ``p0`` to ``p0 + kc``) of B's
    columns ``j0`` to ``j0 + cols``, packed in panels of `NR` columns (panel ``q0 / NR`` at
    ``panels + 4 * q0 * depth``, its rows `NR` floats apart): each band's tiles across the
    panels, into C's rows (``add``: onto them), the ``epilogue`` (`sgemm_segments`') on the
    ``last`` depth block. With ``first`` the first band packs each panel from B (``b``,
    ``ldb``, ``table``, ``run``, ``b_step``: `_pack`'s) as it reads it, or reads B in place
    (`_in_place`) and writes the panel for the other bands. The loops `_packed_blocks` and
    `bands_on_packed` share (the latter without ``first``, a constant its copy folds)."""
    bias, bias_step, act, res = epilogue
    for i0 in range(0, m, MR):
        rows = min(MR, m - i0)
        a_band, c_band = a + 4 * (i0 * lda + p0), c + 4 * (i0 * ldc + j0)
        at_bias = bias + 4 * i0 * bias_step if last and bias != 0 else 0
        for q0 in range(0, cols, NR):
            n = min(NR, cols - q0)
            vectors = (n + LANES - 1) // LANES
            panel = panels + 4 * q0 * depth
            at_b, rows_b, in_place = panel, NR, 0
            if first and i0 == 0:
                at = _in_place(b, ldb, p0, j0 + q0, n, run, b_step)
                if at == 0:
                    _pack(b, ldb, table, p0, kc, j0 + q0, n, run, b_step, panel)
                else:
                    at_b, rows_b, in_place = at, ldb, 1
            # In place, the tile also writes the panel when other bands read it.
            into_panel = panel if in_place and m > MR else 0
            _micro_panel(kc, a_band, lda, at_b, rows_b, in_place, c_band + 4 * q0, ldc, add,
                         rows, vectors, n - (vectors - 1) * LANES, LANES, LANES, 0, 0, 0,
                         into_panel, at_bias, bias_step, act if last else 0,
                         res if last else 0)  # fmt: skip


@jit(**_OPTS, inline="always")  # its one caller, the task: built and optimized once
def _packed_blocks(a, lda, b, ldb, table, c, ldc, m, k, width, run, b_step, step, accumulate,
                   epilogue):  # type: ignore[no-untyped-def]  # fmt: skip
    """`sgemm_segments` where it packs B (`packs`; C's ``width`` columns, B's runs of ``run``
    ``b_step`` apart, its rows by ``ldb`` or the ``table``: `_pack`): for each block of
    ``step`` columns and each depth block, B's block copied into panels of `NR` columns, then
    every band of A across the panels, each tile reading its panel's rows one after the other,
    the last depth block's tiles applying the ``epilogue`` (`sgemm_segments`); m, k, width >
    0. With few rows (`packs_in_place`) and B's rows by their stride, the first band packs as
    it computes instead."""
    into = kept(PACK_FLOATS, np.float32)  # one size for every call: a kept block
    packed = into.ctypes.data
    first = packs_in_place(m) and table == 0  # a table's taps: no panel reads in place
    for j0 in range(0, width, step):
        cols = min(step, width - j0)
        for p0 in range(0, k, KC):
            kc = min(KC, k - p0)
            if not first:
                _pack(b, ldb, table, p0, kc, j0, cols, run, b_step, packed)
            add = 1 if (accumulate or p0 > 0) else 0
            _bands_on_panels(a, lda, c, ldc, m, p0, kc, j0, cols, packed, kc, add, p0 + kc == k,
                             epilogue, first, b, ldb, table, run, b_step)  # fmt: skip
    alive(into)  # read only through its address above: not freed before


@jit(**_OPTS, inline="always")
def pack_whole(b, ldb, table, k, j0, cols, run, b_step, into):  # type: ignore[no-untyped-def]
    """B's columns ``j0`` (a multiple of `NR`) to ``j0 + cols``, every one of its ``k`` rows
    (`_pack`'s B), into their panels of all of B packed at the address ``into``: (panels,
    ``k``, `NR`) floats, panel ``j0 / NR`` on (what `bands_on_packed` reads), the last
    panel's columns past B's zeros."""
    _pack(b, ldb, table, 0, k, j0, cols, run, b_step, into + 4 * j0 * k)


@jit(**_OPTS, inline="always")
def bands_on_packed(a, lda, packed, c, ldc, m, k, width, epilogue):  # type: ignore[no-untyped-def]
    """``C[:m, :width] = A[:m, :k] @ B`` (then the ``epilogue``, `sgemm_segments`') with all
    of B packed at ``packed`` (`pack_whole`): `_packed_blocks`' loops and tiles on panels
    packed once for every band (its column blocks, depth blocks, bands, tiles; the same sums
    in the same order), C's columns end to end; m, k, width > 0."""
    step = column_step(k)
    for j0 in range(0, width, step):
        cols = min(step, width - j0)
        for p0 in range(0, k, KC):
            kc = min(KC, k - p0)
            panels = packed + 4 * (j0 * k + p0 * NR)
            _bands_on_panels(a, lda, c, ldc, m, p0, kc, j0, cols, panels, k, 1 if p0 > 0 else 0,
                             p0 + kc == k, epilogue, False, 0, 0, 0, 1, 0)  # fmt: skip


@jit(**_OPTS)
def _block(a, lda, b, ldb, table, c, ldc, m, k, segments, width, b_step, c_step, accumulate,
           wrap, cols, phase):  # type: ignore[no-untyped-def]  # fmt: skip
    """`sgemm_segments` on one block of C's columns: each depth block, each band of A across
    the block's segments; m, k, segments, width > 0."""
    indexed = 1 if table != 0 else 0
    narrow = width < LANES and segments > 1
    for p0 in range(0, k, KC):
        kc = min(KC, k - p0)
        add = 1 if (accumulate or p0 > 0) else 0
        if indexed:
            b_block, rows_b = b, table + 8 * p0
        else:
            b_block, rows_b = b + 4 * p0 * ldb, ldb
        for i0 in range(0, m, MR):
            rows = min(MR, m - i0)
            a_band, c_band = a + 4 * (i0 * lda + p0), c + 4 * i0 * ldc
            if narrow:  # one segment per vector, up to `VECTORS` of them a tile
                for s in range(0, segments, VECTORS):
                    at_b, at_c = b_block + 4 * s * b_step, c_band + 4 * s * c_step
                    vectors = min(VECTORS, segments - s)
                    _micro(kc, a_band, lda, at_b, rows_b, indexed, at_c, ldc, add, rows, vectors,
                           width, b_step, c_step, 1, 0, 0, 0)  # fmt: skip
                continue
            for s in range(segments):
                at_b, at_c = b_block + 4 * s * b_step, c_band + 4 * s * c_step
                _tiles(kc, a_band, lda, at_b, rows_b, indexed, at_c, ldc, add, rows, width, wrap,
                       cols, phase)  # fmt: skip


@jit(**_OPTS, inline="always")  # see `sgemm_segments`
def sgemm(a, lda, b, ldb, c, ldc, m, n, k, accumulate):  # type: ignore[no-untyped-def]
    """``C[m, n] (+)= A[m, k] @ B[k, n]`` on the float32 row-major matrices at the int64
    addresses ``a``, ``b``, ``c`` (row strides ``lda``, ``ldb``, ``ldc``), in the calling
    thread; ``accumulate`` adds to C. No checks."""
    sgemm_segments(a, lda, b, ldb, 0, c, ldc, m, k, 1, n, 0, 0, accumulate, 0, 0, 0, NO_EPILOGUE)


def _serves(like: nt.Type) -> bool:
    """Whether `sgemm` serves the Numba type ``like`` (an array or a typed pointer)."""
    return isinstance(like, (nt.Array, nt.CPointer)) and like.dtype == nt.float32


def applies(like):  # type: ignore[no-untyped-def]
    """Whether `sgemm` serves ``like``'s dtype (an array or a typed pointer): float32. A
    compile-time constant in jitted code."""
    return np.asarray(like).dtype == np.float32


@overload(applies, jit_options=dict(cache=True))
def _applies(like):  # type: ignore[no-untyped-def]
    serves = _serves(like)
    return lambda like: serves


@intrinsic
def require(typingctx, like):  # type: ignore[no-untyped-def]
    """Nothing at run time; at typing, refuses (a TypingError) what `applies` rejects."""
    if not _serves(like):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return context.get_dummy_value()

    return nt.void(like), codegen
