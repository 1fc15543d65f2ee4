"""The direct convolution's micro-kernel (`rvm.kernels.direct`): a tile of `MR` output
positions by up to `VECTORS` vectors of output channels, in LLVM IR at the CPU's vector width.

`micro` keeps ``MR x VECTORS`` accumulators in registers (24 + 4 of 32 AVX-512 registers;
12 + 3 of 16 AVX2 ones): for each (tap, input channel) it loads the packed weight's vectors
and broadcasts each position's input value from the NHWC plane (`rvm.kernels.nhwc`). A whole
tile goes transposed into the NCHW output in registers (`rvm.kernels.nhwc.transposed`), a
convolution's bias and ReLU applied to its accumulators first (no pass over the output). A
band's last, partial tile keeps its sums in several interleaved sets (`sums`), so its few
accumulators do not wait on each multiply-add's latency.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels import nhwc
from rvm.kernels.cpu import cpu
from rvm.kernels.gemmshape import LANES, VECTORS
from rvm.kernels.jitting import jit
from rvm.kernels.vectors import first_lanes

__all__ = [
    "CHAINS",
    "MR",
    "NB",
    "PARTS",
    "WHOLE_LOOPS",
    "finish",
    "micro",
    "read_line",
    "sums",
    "tap_block",
]

# Output positions a tile: MR x VECTORS accumulators, with room left for the weight's vectors
# and a broadcast (24 + 4 of 32 AVX-512 registers; 12 + 3 of 16 AVX2 ones).
MR = 8 if cpu().vector_bits == 512 else 6
NB = LANES * VECTORS  # output channels a tile at most
L2_BYTES = cpu().l2
_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
# The rows of a tile's loops: whole tiles, and partial ones (a band's last) of up to half or a
# quarter of `MR` positions. A 7 x 7 map's last band holds 1 position: a loop of MR / 2 rows
# ran 4 positions' multiply-adds for it (12 cycles a step on Zen 4, whose 512-bit FMAs issue one
# a cycle), one of MR / 4 runs at the FMA's latency (4 cycles): 7 x 7 layers 3-5 % faster.
PARTS = tuple(dict.fromkeys(mr for mr in (MR, MR // 2, MR // 4) if mr))
_FMA = cpu().fma
# Whether whole tiles whose last vector fills its lanes get loops of their own, with plain
# loads and stores. A lane mask lives in a mask register on AVX-512; without them it takes a
# vector register, which a whole tile's loop lacks (12 accumulators, 2 weight vectors and a
# broadcast of 16 AVX2 registers): LLVM then rebuilt the mask from spilled vectors at every
# step, 9 instructions and 2 reloads a 24 multiply-adds, and vgg19's 3 x 3 layers ran at 55
# to 62 GFLOP/s on a core of a Zen 3, ORT's at 80 to 89.
WHOLE_LOOPS = not cpu().mask_registers
# Independent sums that keep a core's FMA units busy: two pipes, each result ready 4 cycles
# after its inputs (x86-64 cores with AVX2 or AVX-512 since Skylake and Zen 2).
CHAINS = 8
# Steps (tap, channel) a round of a tile's loop: its counter and back edge once per `STEPS`
# steps. Rounds of 2 steps (LLVM's unrolling of a loop of one) ran squeezenet's 3 x 3 layers'
# whole tiles 1-5% slower (16 to 64 input channels, one thread of a Zen 3).
STEPS = 8


def sums(mr: int, vectors: int) -> int:
    """Interleaved sums a partial tile of ``mr`` rows (fewer than `MR`) by ``vectors``
    vectors keeps: as many as make up `CHAINS` independent accumulators, up to a whole
    tile's count (`MR` x `VECTORS`: the registers). With fewer, each multiply-add waits on
    the last one's result: a band's last position alone (7 x 7 and 13 x 13 maps: 49 and 169
    positions, one past whole bands) kept 2 of AVX2's 12 accumulators and ran at 4 cycles a
    step, 1.8 times as long as in 4 sums (3 rows: 1.25 to 1.6 times; one thread of a Zen 3).
    A whole tile keeps its own count: a tile of one vector in two sums ran 1.2 times as long
    (a broadcast for each of its multiply-adds: the loads bound it)."""
    have = mr * vectors
    if mr >= MR:
        return 1
    return min(-(-CHAINS // have), MR * VECTORS // have)


@intrinsic
def read_line(typingctx, address):  # type: ignore[no-untyped-def]
    """Reads the byte at the int64 ``address`` and drops it: a load the compiler keeps (an
    atomic one of monotonic, relaxed, ordering, which LLVM does not delete: a plain ``mov``
    on x86-64), bringing the byte's cache line into L1 and L2 as any load does. In a pass
    over a plane's rows (`rvm.kernels.bf16conv._read_rows`) such loads fed the next products
    better than `prefetch_l2`'s hints: 221 GF/s against 205 (Zen 4, one thread)."""
    sig = nt.void(nt.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i8p = ir.IntType(8).as_pointer()
        builder.load_atomic(builder.inttoptr(args[0], i8p), "monotonic", 1)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def micro(typingctx, depth, cg, a, bases, taps, b, ldb, c, rows, vectors, last, ldc, bias, act,
          soon, lines):  # type: ignore[no-untyped-def]  # fmt: skip
    """The micro-kernel, on int64 addresses: ``T[i, :width] = act(sum over (t, ch) of
    A[bases[i] + taps[t] + ch] * B[t * cg + ch, :width] + bias[:width])`` for positions i <
    ``rows`` (of `MR`), ``width = (vectors - 1) * LANES + last``; ``depth`` = taps * cg steps,
    B's rows ``ldb`` floats apart; ``bias`` the address of the tile's ``width`` channels'
    biases (0: none), ``act`` 1 for a ReLU (0: none), both applied to the accumulators in
    registers, a vector of channels at a time, before any store (`rvm.kernels.epipass`'s
    arithmetic: the sum plus the bias, then the ReLU, NaN kept).
    ``bases`` and ``taps`` are int64 arrays' addresses. With ``ldc`` 0, T's rows go to C `NB`
    floats apart; else the tile is whole (``rows`` = `MR`) and goes transposed, as NCHW wants
    it: channel ``k``'s `MR` positions one run at ``C + k * ldc``, the accumulators
    transposed in registers (`nhwc.transposed`). One loop per vector count and row count of
    `PARTS`, chosen by a switch: each keeps its accumulators in registers; a partial tile
    runs the loop of the fewest rows that hold it (a 7 x 7 map's last band of 1 position
    cost a whole band's multiply-adds, a seventh of the map's), each tap's channels spread
    over `sums` interleaved sets of accumulators.

    ``soon`` (0: none): the address of ``lines`` cache lines the tile brings into L2 as it
    goes, one every ``depth // (lines + 1)`` steps, spread over the loop rather than in a burst
    (a prefetch waits for a fill buffer): `rvm.kernels.direct` passes a slice of the panel
    its thread runs next."""
    sig = nt.void(*(nt.int64,) * 16)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        depth, cg, a, bases, taps, b, ldb, c, rows, vectors, last, ldc, bias, act = args[:14]
        soon, lines = args[14:]
        i1, i32, i64, f32 = ir.IntType(1), ir.IntType(32), ir.IntType(64), ir.FloatType()
        vec = ir.VectorType(f32, LANES)
        vptr, fptr, iptr = vec.as_pointer(), f32.as_pointer(), i64.as_pointer()
        masks, name, module = ir.VectorType(i1, LANES), f"v{LANES}f32", builder.module

        def declare(ret, params, intrinsic_name):  # type: ignore[no-untyped-def]
            return cgutils.get_or_insert_function(
                module, ir.FunctionType(ret, params), intrinsic_name
            )

        fma = declare(vec, [vec] * 3, f"llvm.fma.{name}")
        hint = declare(ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32],
                       "llvm.prefetch.p0")  # fmt: skip
        # ``soon``'s lines into L2, one every ``every`` steps from the first (``due`` -1: none)
        every = builder.select(builder.icmp_signed("!=", soon, i64(0)),
                               builder.sdiv(depth, builder.add(lines, i64(1))), i64(0))  # fmt: skip
        every = builder.select(builder.icmp_signed("<", every, i64(1)), i64(1), every)
        due = cgutils.alloca_once_value(
            builder, builder.select(builder.icmp_signed("!=", soon, i64(0)), i64(0), i64(-1))
        )
        fetch = cgutils.alloca_once_value(builder, soon)
        masked_load = declare(vec, [vptr, i32, masks, vec], f"llvm.masked.load.{name}.p0")
        masked_store = declare(
            ir.VoidType(), [vec, vptr, i32, masks], f"llvm.masked.store.{name}.p0"
        )
        a, b, c = (builder.inttoptr(x, fptr) for x in (a, b, c))
        bases, taps = builder.inttoptr(bases, iptr), builder.inttoptr(taps, iptr)
        zero, align = ir.Constant(vec, None), i32(4)
        splat = ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)

        def broadcast(value, vtype):  # type: ignore[no-untyped-def]
            undef = ir.Constant(vtype, ir.Undefined)
            one = builder.insert_element(undef, value, i32(0))
            return builder.shuffle_vector(one, undef, splat)

        mask = first_lanes(builder, last, LANES)
        # Positions past ``rows`` read the last one's input (their sums are not stored).
        last_row = builder.sub(rows, i64(1))

        def row_base(i):  # type: ignore[no-untyped-def]
            row = builder.select(builder.icmp_signed("<", i64(i), rows), i64(i), last_row)
            return builder.load(builder.gep(bases, [row]))

        a_rows = [row_base(i) for i in range(MR)]
        ntaps = builder.sdiv(depth, cg)  # cg > 0: the caller's

        def vector_at(base, offset, j):  # type: ignore[no-untyped-def]
            return builder.bitcast(builder.gep(base, [builder.add(offset, i64(j * LANES))]), vptr)

        def tile(vectors, mr, whole=False):  # type: ignore[no-untyped-def]
            # ``whole``: the last vector's lanes all count (``last`` = `LANES`): no mask.
            def load(at, j):  # type: ignore[no-untyped-def]
                if whole or j < vectors - 1:
                    return builder.load(at, align=4)
                return builder.call(masked_load, [at, align, mask, zero])

            # Interleaved sums (`sums`): channel ``ch`` of each tap into set ``ch % count``
            # (the last ``cg % count`` into the first), added together after the loop.
            count = sums(mr, vectors)
            sets = [
                [[cgutils.alloca_once_value(builder, zero) for _ in range(vectors)]
                 for _ in range(mr)]
                for _ in range(count)
            ]  # fmt: skip
            acc = sets[0]

            def step(row0, tap, ch, into):  # type: ignore[no-untyped-def]
                """One (tap, channel)'s multiply-adds into the accumulators ``into``."""
                row_b = builder.mul(builder.add(row0, ch), ldb)
                # Out of the loop's line (``likely``): laid out inline, each step jumped over it.
                with builder.if_then(builder.icmp_signed("==", builder.add(row0, ch),
                                                         builder.load(due)),
                                     likely=False):  # fmt: skip
                    at = builder.load(fetch)
                    builder.call(hint, [builder.inttoptr(at, ir.IntType(8).as_pointer()),
                                        i32(0), i32(2), i32(1)])  # read, into L2, data  # fmt: skip
                    builder.store(builder.add(at, i64(64)), fetch)
                    builder.store(builder.add(builder.load(due), every), due)
                bs = [load(vector_at(b, row_b, j), j) for j in range(vectors)]
                at = builder.add(tap, ch)
                for i in range(mr):
                    x = builder.load(builder.gep(a, [builder.add(a_rows[i], at)]))
                    x = broadcast(x, vec)
                    for j in range(vectors):
                        old = builder.load(into[i][j])
                        if _FMA:
                            new = builder.call(fma, [x, bs[j], old])
                        else:
                            new = builder.fadd(builder.fmul(x, bs[j]), old)
                        builder.store(new, into[i][j])

            with cgutils.for_range(builder, ntaps) as outer:
                t = outer.index
                tap = builder.load(builder.gep(taps, [t]))
                row0 = builder.mul(t, cg)
                # Rounds of `STEPS` steps (a whole number of sets'), then of one step a set,
                # then single steps into the first set: step k of a round into set k % count.
                taken = i64(0)
                for per in dict.fromkeys(p for p in (count * -(-STEPS // count), count) if p > 1):
                    rounds = builder.sdiv(builder.sub(cg, taken), i64(per))
                    with cgutils.for_range(builder, rounds) as inner:
                        first = builder.add(taken, builder.mul(inner.index, i64(per)))
                        for k in range(per):
                            step(row0, tap, builder.add(first, i64(k)), sets[k % count])
                    taken = builder.add(taken, builder.mul(rounds, i64(per)))
                with cgutils.for_range_slice(builder, taken, cg, i64(1)) as (ch, _):
                    step(row0, tap, ch, acc)
            for other in sets[1:]:
                for i in range(mr):
                    for j in range(vectors):
                        total = builder.fadd(builder.load(acc[i][j]), builder.load(other[i][j]))
                        builder.store(total, acc[i][j])
            with builder.if_then(builder.icmp_signed("!=", bias, i64(0))):
                for j in range(vectors):
                    shift = load(vector_at(builder.inttoptr(bias, fptr), i64(0), j), j)
                    for i in range(mr):
                        builder.store(builder.fadd(builder.load(acc[i][j]), shift), acc[i][j])
            with builder.if_then(builder.icmp_signed("!=", act, i64(0))):
                for i in range(mr):
                    for j in range(vectors):
                        value = builder.load(acc[i][j])
                        below = builder.fcmp_ordered("<", value, zero)
                        builder.store(builder.select(below, zero, value), acc[i][j])

            def store_rows():  # type: ignore[no-untyped-def]
                for i in range(mr):
                    with builder.if_then(builder.icmp_signed("<", i64(i), rows)):
                        for j in range(vectors):
                            at = vector_at(c, i64(i * NB), j)
                            value = builder.load(acc[i][j])
                            if whole or j < vectors - 1:
                                builder.store(value, at, align=4)
                            else:
                                builder.call(masked_store, [value, at, align, mask])

            if mr < MR:  # partial tiles only (``ldc`` 0)
                store_rows()
                return
            with builder.if_else(by_rows) as (plain, transposed):
                with plain:
                    store_rows()
                with transposed:
                    for j in range(vectors):
                        runs = nhwc.transposed(
                            builder, [builder.load(acc[i][j]) for i in range(MR)]
                        )
                        for lane, run in enumerate(runs):
                            k = i64(j * LANES + lane)
                            at = builder.gep(c, [builder.mul(k, ldc)])
                            at = builder.bitcast(at, run.type.as_pointer())
                            if whole or j < vectors - 1:
                                builder.store(run, at, align=4)
                            else:
                                with builder.if_then(builder.icmp_signed("<", i64(lane), last)):
                                    builder.store(run, at, align=4)

        # The tile's loop: the fewest rows of `PARTS` that hold ``rows`` (whole tiles: MR);
        # with `WHOLE_LOOPS`, a whole tile of whole vectors its own loop, after the others.
        key = builder.mul(builder.sub(vectors, i64(1)), i64(len(PARTS)))
        by_rows = builder.icmp_signed("==", ldc, i64(0))
        partial = ir.Constant(i1, 0)
        for mr in PARTS[1:]:
            fits = builder.and_(by_rows, builder.icmp_signed("<=", rows, i64(mr)))
            partial = builder.or_(partial, fits)
            key = builder.add(key, builder.zext(fits, i64))
        shapes = [(v, mr, False) for v in range(1, VECTORS + 1) for mr in PARTS]
        if WHOLE_LOOPS:
            full = builder.and_(builder.not_(partial), builder.icmp_signed("==", last, i64(LANES)))
            whole_key = builder.add(i64(len(shapes) - 1), vectors)
            key = builder.select(full, whole_key, key)
            shapes += [(v, MR, True) for v in range(1, VECTORS + 1)]
        blocks = [
            builder.append_basic_block(f"tile{v}x{mr}{'w' if whole else ''}")
            for v, mr, whole in shapes
        ]
        done = builder.append_basic_block("tiled")
        switch = builder.switch(key, blocks[VECTORS * len(PARTS) - len(PARTS)])
        for case, ((v, mr, whole), block) in enumerate(zip(shapes, blocks, strict=True)):
            switch.add_case(i64(case), block)
            builder.position_at_end(block)
            tile(v, mr, whole)
            builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen


@jit(**_OPTS)
def finish(sums, blocks, biases, act, of, out_at, p_all, p0, rows, width):  # type: ignore[no-untyped-def]  # noqa: E501
    """A tile of ``rows`` positions by ``width`` channels from its sums, ``blocks`` tiles of
    `MR` x `NB` one after another in ``sums`` (a partial tile's one, a band's depth blocks'),
    into the NCHW output, each channel's positions one run: added in block order, plus the bias
    (``biases``, empty: none), then the ReLU (``act`` 1; NaN kept), as `micro` ends a tile."""
    for lane in range(width):
        dst = out_at + lane * p_all + p0
        for i in range(rows):
            v = sums[i * NB + lane]
            for k in range(1, blocks):
                v += sums[k * MR * NB + i * NB + lane]
            if biases.size:
                v += biases[lane]
            if act == 1 and v < 0:
                v = np.float32(0)
            of[dst + i] = v


@jit(**_OPTS)
def tap_block(ntaps, cg, nb, plane):  # type: ignore[no-untyped-def]
    """The taps of a depth block of the direct method's bands: all of them where a panel
    (``ntaps * cg`` rows of ``nb`` floats) and the input's NHWC plane (``plane`` floats)
    fit half of one core's L2, which every band reads again; else as many as fit 45% of it
    (one at least). resnet50's 512 -> 512 on 7 x 7 (a panel of 884 KB) in three calls
    over thirds of its channels, outputs added: 0.72x its time at one thread with the weight
    coming from memory, 0.88x at two (Zen 5, 1 MB of L2)."""
    if 4 * (ntaps * cg * nb + plane) <= L2_BYTES // 2:
        return ntaps
    return max(1, min(ntaps, L2_BYTES * 45 // 100 // (4 * cg * nb)))
