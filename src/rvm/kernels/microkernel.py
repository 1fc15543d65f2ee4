"""The float32 GEMM's micro-kernel (`rvm.kernels.sgemm`), written in LLVM IR at the CPU's vector
width: a tile of up to `MR` rows of C by up to `VECTORS` vectors, its accumulators in registers
across the depth, B's rows read in place, through a table or from packed panels, C stored under
lane masks where a tile is narrower, a convolution's epilogue applied in the store. Numba
intrinsics (`micro`, `micro_row`, `micro_panel`), so each loop that calls one inlines its code.
The notes on why it is shaped so are `rvm.kernels.sgemm`'s."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.gemmshape import (
    AHEAD,
    FMA,
    HALF,
    LANES,
    LINE,
    MR,
    NR,
    PANEL_AHEAD,
    PLAIN_STORES,
    VECTORS,
)
from rvm.kernels.jitting import jit
from rvm.kernels.vectors import first_lanes

__all__ = [
    "floats_at",
    "ints_at",
    "micro",
    "micro_for",
    "micro_panel",
    "micro_row",
    "move_lanes",
    "prefetch_l2",
    "tail_dots",
]


def micro_for(mr: int, padded: bool = False):  # type: ignore[no-untyped-def]
    """The micro-kernel intrinsic for tiles of up to ``mr`` rows of C (`micro`: `MR`;
    `micro_row`: one row, a GEMV's, which does not multiply `MR` rows for one; ``padded``:
    `micro_panel`, B's rows in panels of whole vectors)."""

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
    ``last`` columns of its own (`sgemm.sgemm_segments`). The IR has one loop per (vectors,
    indexed), chosen by a switch: each keeps its accumulators in registers. ``MR``: the
    tile's rows at most (rows past ``rows`` are computed, not stored).

    ``wrap`` (0: none; indexed tiles only): B's columns are positions of rows ``wrap`` apart
    of which the first ``cols`` are C's (a convolution's output rows in its padded input,
    `sgemm.sgemm_segments`), the tile's first one column ``col0`` of its row, and ``c`` its place
    in C, whose rows are ``cols`` apart: each vector goes to C in pieces, one per row it
    spans, each a masked store ``m * (wrap - cols)`` floats back for the ``m``-th row on;
    the columns past ``cols`` of each row are computed, not stored.

    ``padded`` (`micro_panel`; plain rows of B only: ``narrow`` and ``wrap`` 0): B's rows
    are whole vectors, read without a mask (a packed panel's, zero past the product's
    columns: `sgemm._pack`), not prefetched `AHEAD` (a panel is one stream) but into L1d
    `PANEL_AHEAD` steps on, nor A's next band in the loop (its address cost more than it
    saved: the bands prefetch it between tiles, `sgemm._bands_on_panels`). There ``indexed``
    means in
    place (whole panels only, ``vectors`` = `VECTORS`): B's rows ``rows_b`` floats apart,
    each prefetched `AHEAD` tiles on, and, where ``col0`` is not 0, each row's vectors also
    stored at that address, `NR` floats a row, as `sgemm._pack` would (`IN_PLACE_ROWS`). On AVX2
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
            return (
                vec,
                declare(vec, [vec] * 3, f"llvm.fma.{name}"),
                declare(vec, [vptr, i32, masks, vec], f"llvm.masked.load.{name}.p0"),
                declare(ir.VoidType(), [vec, vptr, i32, masks], f"llvm.masked.store.{name}.p0"),
                first_lanes(builder, last, lanes),
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
                if prefetch is not None and padded and not indexed:  # see `PANEL_AHEAD`
                    soon = builder.add(row_b, builder.mul(rows_b, i64(PANEL_AHEAD)))
                    for line in range(-(-vectors * lanes // LINE)):
                        at = builder.gep(b, [builder.add(soon, i64(line * LINE))])
                        builder.call(hint, [builder.bitcast(at, i8p), i32(0), i32(3), i32(1)])
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
                        if FMA:
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
    tail = first_lanes(builder, last, LANES)
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


micro = micro_for(MR)
"""Tiles of up to `MR` rows: the GEMM's."""
micro_row = micro_for(1)
"""Tiles of one row: a GEMV's, which does not multiply `MR` rows for one."""
micro_panel = micro_for(MR, padded=True)
"""Tiles on packed panels of B, with a convolution's epilogue in their store."""


@intrinsic
def floats_at(typingctx, address):  # type: ignore[no-untyped-def]
    """A float32 pointer to the int64 ``address``."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.inttoptr(args[0], ir.FloatType().as_pointer())

    return nt.CPointer(nt.float32)(nt.int64), codegen


@intrinsic
def move_lanes(typingctx, src, dst, lo, hi):  # type: ignore[no-untyped-def]
    """Lanes ``lo`` to ``hi`` of `NR` floats at the int64 address ``src`` to the same lanes at
    ``dst``, and zeros to its lanes ``hi`` to `NR`: `VECTORS` masked loads, no lane outside
    ``lo`` to ``hi`` read (``src`` may point before a piece's floats: its lane ``lo`` is the
    piece's first). A panel row's pieces in turn leave its columns past the last zero
    (`rvm.kernels.sgemm._pack`). With mask registers (AVX-512) the stores are masked too;
    without (`PLAIN_STORES`: AVX2's masked store takes its mask in a vector register, several
    plain stores' cost) each vector is stored whole, its lanes below ``lo`` read back from
    ``dst`` (the pieces before, written just before) and its lanes past ``hi`` zeros. On a Zen 3
    core (one thread, in one process, quiet: `benchmarks/pack_pieces.py`) the masked stores
    packed 3 x 3 im2col panels (16 to 256 channels, rows of 13 to 56) in 2.2-2.9 times the
    float-at-a-time copy's time, the whole stores in 0.48-0.83 of it (session 57)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        f32, i1, i32, i64 = ir.FloatType(), ir.IntType(1), ir.IntType(32), ir.IntType(64)
        vec, masks = ir.VectorType(f32, LANES), ir.VectorType(i1, LANES)
        vptr, module, name = vec.as_pointer(), builder.module, f"v{LANES}f32"
        load = cgutils.get_or_insert_function(
            module, ir.FunctionType(vec, [vptr, i32, masks, vec]), f"llvm.masked.load.{name}.p0"
        )
        src, dst, lo, hi = args
        zero = ir.Constant(vec, [0.0] * LANES)
        if PLAIN_STORES:  # masks from compares of the lanes' numbers, whole stores
            lanes_t = ir.VectorType(i32, LANES)

            def splat(x):  # type: ignore[no-untyped-def]
                one = builder.insert_element(ir.Constant(lanes_t, ir.Undefined),
                                             builder.trunc(x, i32), i32(0))  # fmt: skip
                return builder.shuffle_vector(one, one, ir.Constant(lanes_t, [0] * LANES))

            los, his = splat(lo), splat(hi)
            for v in range(VECTORS):
                lanes = ir.Constant(lanes_t, [v * LANES + t for t in range(LANES)])
                below = builder.icmp_signed("<", lanes, los)
                inside = builder.and_(builder.not_(below), builder.icmp_signed("<", lanes, his))
                fro, to = (builder.inttoptr(builder.add(x, i64(4 * v * LANES)), vptr)
                           for x in (src, dst))  # fmt: skip
                kept = builder.select(below, builder.load(to, align=4), zero)
                builder.store(builder.call(load, [fro, i32(4), inside, kept]), to, align=4)
            return context.get_dummy_value()
        store = cgutils.get_or_insert_function(
            module, ir.FunctionType(ir.VoidType(), [vec, vptr, i32, masks]),
            f"llvm.masked.store.{name}.p0")  # fmt: skip
        # The lanes' masks as bits of one integer (a mask register's move, not compares).
        wide, lane_bits = ir.IntType(128), ir.IntType(LANES)  # NR <= 64
        one = ir.Constant(wide, 1)
        first, past = (builder.shl(one, builder.zext(x, wide)) for x in (lo, hi))
        loads = builder.sub(past, first)
        stores = builder.sub(builder.shl(one, ir.Constant(wide, NR)), first)

        def part(bits, v):  # type: ignore[no-untyped-def]
            shifted = builder.lshr(bits, ir.Constant(wide, v * LANES))
            return builder.bitcast(builder.trunc(shifted, lane_bits), masks)

        for v in range(VECTORS):
            at = (builder.inttoptr(builder.add(x, i64(4 * v * LANES)), vptr) for x in (src, dst))
            value = builder.call(load, [next(at), i32(4), part(loads, v), zero])
            builder.call(store, [value, next(at), i32(4), part(stores, v)])
        return context.get_dummy_value()

    return nt.void(nt.int64, nt.int64, nt.int64, nt.int64), codegen


@intrinsic
def ints_at(typingctx, address):  # type: ignore[no-untyped-def]
    """An int64 pointer to the int64 ``address`` (a table of B's rows)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.inttoptr(args[0], ir.IntType(64).as_pointer())

    return nt.CPointer(nt.int64)(nt.int64), codegen


@intrinsic
def prefetch_l2(typingctx, address):  # type: ignore[no-untyped-def]
    """A hint to bring the cache line at the int64 ``address`` into L2 (``prefetcht1`` on
    x86-64); no fault whatever the address."""
    sig = nt.void(nt.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        hint = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0"
        )
        builder.call(hint, [builder.inttoptr(args[0], i8p), i32(0), i32(2), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


@jit(nogil=True, cache=True, error_model="numpy", boundscheck=False,
     fastmath={"reassoc", "contract"})  # fmt: skip
def tail_dots(kc, a_band, lda, tail, n, c_tile, ldc, add, rows, bias, bias_step, act, res):  # type: ignore[no-untyped-def]  # noqa: E501
    """C's last ``n`` columns of a band of ``rows`` rows as dot products of A's rows (at
    ``a_band``, ``lda`` apart) with B's columns gathered at ``tail`` (``kc`` floats each, one
    after the other), into C at ``c_tile`` (``add``: onto it), then `micro_panel`'s epilogue
    in its order (``bias`` the address of the first row's bias or 0, ``bias_step``, ``res``
    the floats from C to the residual or 0, a ReLU when ``act``). Reassociated, each dot runs
    in vectors along the depth (`rvm.kernels.sgemm.TAIL_DOTS`); the same sums at every thread
    count (a product's last panel is its own at any cut)."""
    for i in range(rows):
        row = floats_at(a_band + 4 * i * lda)
        out = floats_at(c_tile + 4 * i * ldc)
        for j in range(n):
            col = floats_at(tail + 4 * j * kc)
            total = np.float32(0.0)
            for t in range(kc):
                total += row[t] * col[t]
            value = out[j] + total if add else total
            if bias != 0:
                value += floats_at(bias)[i * bias_step]
            if res != 0:
                value += out[j + res]
            if act != 0 and np.float32(0.0) > value:
                value = np.float32(0.0)
            out[j] = value
