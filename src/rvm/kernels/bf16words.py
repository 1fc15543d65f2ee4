"""bf16 words: float32 vectors rounded (to nearest even) into bf16 values in 32-bit words, as
``vdpbf16ps`` and AMX's ``tdpbf16ps`` take them.

`pair_bits` rounds two float32 vectors into one vector of pairs (lane ``i``: ``lo[i]`` in the
low half, ``hi[i]`` in the high), `run_bits` one run of values into consecutive pairs (a row
of A as the GEMM takes it), and `pair_words` a whole run of values (a prologue ``x * scale +
shift`` per channel, then ReLU, applied first when asked) into pair words in memory: the
convolutions build their pair planes with it (`rvm.kernels.bf16planes`) and the AMX walk
writes the next convolution's plane with it (`rvm.kernels.amx`). With AVX512-BF16 (`DPBF16`)
one ``vcvtne2ps2bf16`` rounds 32 values; elsewhere the integer rounding
(`rvm.kernels.vectors.VectorIR.bf16_bits`). The lowest of the bf16 kernels: it imports no
other.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.cpu import target_features
from rvm.kernels.vectors import VectorIR

__all__ = [
    "DPBF16",
    "LANES",
    "NO_AFFINE",
    "NO_RESIDUAL",
    "BFloat",
    "converted",
    "finish_sums",
    "move_words",
    "pair_bits",
    "pair_words",
    "run_bits",
    "sum_words",
]


def _words(features: str) -> tuple[bool, int]:
    """(dpbf16, lanes) for the target's features: AVX512-BF16's dot product and conversions,
    and the float32 lanes of its vectors."""
    flags = set(features.split(","))
    if "+avx512f" in flags:
        return "+avx512bf16" in flags, 16
    return False, 8 if ("+avx2" in flags or "+avx" in flags) else 4


DPBF16, LANES = _words(target_features())
NO_AFFINE = (np.float32(1.0), np.float32(0.0), np.float32(1.0), np.float32(0.0))
"""`pair_words`'s ``scales`` with no prologue: (scale, shift) of the low and the high half."""


class BFloat(ir.Type):
    """LLVM's ``bfloat`` (llvmlite has no class for it): the element type of the intrinsic's
    operands."""

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BFloat)

    def __hash__(self) -> int:
        return hash("bfloat")


def converted(builder: ir.IRBuilder, lo: ir.Value, hi: ir.Value) -> ir.Value:
    """``bf16(lo) ++ bf16(hi)`` as ``<2n x bfloat>`` by one ``vcvtne2ps2bf16`` (AVX512-BF16
    CPUs only): round to nearest even, a subnormal read as 0 -- as ``vdpbf16ps`` reads a bf16
    one anyway, so no product changes."""
    lanes = lo.type.count
    f32, pairs = ir.VectorType(ir.FloatType(), lanes), ir.VectorType(BFloat(), 2 * lanes)
    name = f"llvm.x86.avx512bf16.cvtne2ps2bf16.{32 * lanes}"
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(pairs, [f32, f32]), name)
    return builder.call(fn, [hi, lo])  # its second operand fills the low lanes


def pair_bits(builder: ir.IRBuilder, lo: ir.Value, hi: ir.Value) -> ir.Value:
    """The i32 vector whose lane ``i`` holds the bf16 of float32 ``lo[i]`` (low half) and of
    ``hi[i]`` (high half), rounded to nearest even: with AVX512-BF16 one ``vcvtne2ps2bf16``
    and an interleaving shuffle (`converted`); elsewhere the integer rounding
    (`VectorIR.bf16_bits`), with which resnet50's 1 x 1 convolutions' pair planes took
    1.5-1.7x as long (one Zen 4 core)."""
    lanes = lo.type.count
    if not DPBF16:
        v = VectorIR(builder, lanes)
        return builder.or_(v.bf16_bits(lo), builder.shl(v.bf16_bits(hi), v.constant(16)))
    both = converted(builder, lo, hi)
    order = [lane for i in range(lanes) for lane in (i, lanes + i)]
    mixed = builder.shuffle_vector(
        both, both, ir.Constant(ir.VectorType(ir.IntType(32), 2 * lanes), order)
    )
    return builder.bitcast(mixed, ir.VectorType(ir.IntType(32), lanes))


def run_bits(builder: ir.IRBuilder, lo: ir.Value, hi: ir.Value) -> ir.Value:
    """The i32 vector whose lane ``q`` holds the bf16 of values ``2 q`` (low half) and ``2 q
    + 1`` (high half) of the float32 run ``lo ++ hi``, rounded as `pair_bits` rounds: a row of
    A as the GEMM takes it (`rvm.kernels.bf16.pair_rows`)."""
    lanes = lo.type.count
    words = ir.VectorType(ir.IntType(32), lanes)
    if DPBF16:
        return builder.bitcast(converted(builder, lo, hi), words)
    v, wide = VectorIR(builder, lanes), ir.VectorType(ir.IntType(64), lanes)
    both = ir.Constant(ir.VectorType(ir.IntType(32), 2 * lanes), list(range(2 * lanes)))
    bits = builder.shuffle_vector(v.bf16_bits(lo), v.bf16_bits(hi), both)
    pairs = builder.bitcast(bits, wide)  # value 2q in the low half, 2q + 1 the high
    pairs = builder.or_(pairs, builder.lshr(pairs, ir.Constant(wide, [16] * lanes)))
    return builder.trunc(pairs, words)


def pair_halves(builder: ir.IRBuilder, words: ir.Value) -> tuple[ir.Value, ir.Value]:
    """The float32 values of a vector of pair words (i32 lanes): each word's low half's
    (channel ``2 c2``) and high half's (``2 c2 + 1``), bf16 widened exactly, lane by lane."""
    lanes = words.type.count
    i32 = ir.VectorType(ir.IntType(32), lanes)
    f32 = ir.VectorType(ir.FloatType(), lanes)
    low = builder.shl(words, ir.Constant(i32, [16] * lanes))
    high = builder.and_(words, ir.Constant(i32, [-65536] * lanes))  # 0xFFFF0000
    return builder.bitcast(low, f32), builder.bitcast(high, f32)


def finish_sums(
    builder: ir.IRBuilder,
    sums: list[ir.Value],
    biases: list[ir.Value],
    with_bias: ir.Value,
    more: list[ir.Value] | None,
    with_relu: ir.Value,
) -> list[ir.Value]:
    """Float32 sum vectors as a convolution's epilogue ends them, in this order: each plus
    its bias where ``with_bias`` (an i1; not adding 0 elsewhere: -0.0 stays), plus the
    residual ``more`` (None: none), then ReLU'd where ``with_relu`` (an i1), each step
    rounded to float32 as the float32 epilogue's (`rvm.kernels.epilogue.tile_rows`)."""
    zero = ir.Constant(sums[0].type, None)
    sums = [builder.select(with_bias, builder.fadd(s, b), s) for s, b in zip(sums, biases)]
    if more is not None:
        sums = [builder.fadd(s, r) for s, r in zip(sums, more)]
    return [
        builder.select(with_relu, builder.select(builder.fcmp_ordered("<", s, zero), zero, s), s)
        for s in sums
    ]


def _three_ways(builder: ir.IRBuilder, value: ir.Value, cases: tuple, emit: tuple) -> None:
    """``emit[0]()``'s code where ``value`` (i64) is ``cases[0]``, ``emit[1]()``'s where it is
    ``cases[1]``, else ``emit[2]()``'s: each a loop of its own, specialized."""
    i64 = ir.IntType(64)
    with builder.if_else(builder.icmp_signed("==", value, i64(cases[0]))) as (first, rest):
        with first:
            emit[0]()
        with rest:
            with builder.if_else(builder.icmp_signed("==", value, i64(cases[1]))) as (second, last):
                with second:
                    emit[1]()
                with last:
                    emit[2]()


def _strided_vectors(builder: ir.IRBuilder, v: VectorIR, out, n, step, vector) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """The loop writing ``n`` 32-bit lanes at the int64 address ``out``, a vector of `LANES`
    a step (lanes ``at`` on), the last under a lane mask: ``vector(read)`` gives the step's
    lanes, ``read(address)`` the float32 values ``step`` apart from ``address + 4 step at``
    on, loaded unit-stride at ``step`` 1, by two loads and a shuffle at 2 (`VectorIR.evens`),
    gathered otherwise; one loop each (`_three_ways`)."""
    i64 = ir.IntType(64)
    stride = builder.mul(step, i64(4))
    steps = builder.sdiv(builder.add(n, i64(LANES - 1)), i64(LANES))

    def loop(load):  # type: ignore[no-untyped-def]
        with cgutils.for_range(builder, steps) as each:
            at = builder.mul(each.index, i64(LANES))
            left, offset = builder.sub(n, at), builder.mul(at, stride)
            value = vector(lambda address: load(builder.add(address, offset), left))
            v.store(value, builder.add(out, builder.mul(at, i64(4))), v.first(left))

    _three_ways(builder, step, (1, 2), (
        lambda: loop(lambda address, left: v.load(address, v.f32, v.first(left))),
        lambda: loop(lambda address, left: v.evens(address, left)),
        lambda: loop(lambda address, left: v.gather(address, stride, v.f32, v.first(left))),
    ))  # fmt: skip


@intrinsic
def move_words(typingctx, src, out, n, step):  # type: ignore[no-untyped-def]
    """On int64 addresses: ``out[i]`` = the 32-bit word ``src[i * step]``, for i < ``n``
    (`_strided_vectors`; at ``step`` 2 LLVM's own loop gathered): a pair plane's words into a
    strided convolution's phases (`rvm.kernels.bf16planes`)."""
    sig = nt.void(*(nt.int64,) * 4)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        src, out, n, step = args
        v = VectorIR(builder, LANES)
        _strided_vectors(builder, v, out, n, step, lambda read: read(src))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def pair_words(typingctx, lo, hi, out, n, pair, step, scales, mode):  # type: ignore[no-untyped-def]  # noqa: E501
    """On int64 addresses: ``out[i]`` (uint32) = the bf16 bits of float32 ``lo[i * step]``
    (low half) and, when ``pair``, of ``hi[i * step]`` (high half; else 0), for i < ``n``: a
    vector of `LANES` a step, the last under a lane mask; loads unit-stride at ``step`` 1,
    two loads and a shuffle at ``step`` 2 (`VectorIR.evens`), gathered otherwise. With
    ``mode`` 1 or 2 (a `PROLOGUES` index) each value is first ``value * scale + shift`` (a
    multiply and an add, rounded as NumPy's), then, at 2, ReLU'd; ``scales`` the float32
    (scale, shift) of the low half's channel and of the high half's."""
    sig = nt.void(*(nt.int64,) * 6, nt.UniTuple(nt.float32, 4), nt.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        lo, hi, out, n, pair, step, scales, mode = args
        v = VectorIR(builder, LANES)
        i64 = ir.IntType(64)
        with_hi = builder.icmp_signed("!=", pair, i64(0))
        factors = [v.broadcast(builder.extract_value(scales, i), v.f32) for i in range(4)]
        affine = builder.icmp_signed(">", mode, i64(0))
        relu = builder.icmp_signed(">", mode, i64(1))
        zero = ir.Constant(v.f32, None)

        def prologue(x, scale, shift):  # type: ignore[no-untyped-def]
            y = builder.fadd(builder.fmul(x, scale), shift)
            y = builder.select(relu, builder.select(builder.fcmp_ordered("<", y, zero), zero, y), y)
            return builder.select(affine, y, x)

        def vector(read):  # type: ignore[no-untyped-def]
            low, high = (read(src) for src in (lo, hi))
            low = prologue(low, factors[0], factors[1])
            high = prologue(high, factors[2], factors[3])
            high = builder.select(with_hi, high, ir.Constant(v.f32, None))
            return pair_bits(builder, low, high)

        _strided_vectors(builder, v, out, n, step, vector)
        return context.get_dummy_value()

    return sig, codegen


NO_RESIDUAL = (0, 0, 0)
"""`sum_words`' ``res`` with no residual: its kind, then the addresses of its two channels."""


@intrinsic
def sum_words(typingctx, lo, hi, out, out_hi, n, pair, shifts, flags, res):  # type: ignore[no-untyped-def]
    """A convolution's sums rounded as its epilogue ends: on int64 addresses, ``out[i]``
    (uint32) = the bf16 bits of ``act(lo[i] + shifts[0] + R_lo[i])`` (low half) and, when
    ``pair``, of ``act(hi[i] + shifts[1] + R_hi[i])`` (high half; else 0), for i < ``n``, unit
    stride, a vector of `LANES` a step, the last under a lane mask; ``shifts`` the two
    channels' biases, added where ``flags`` has bit 0 (not adding 0: -0.0 stays), ``act`` ReLU
    where it has bit 1, else none; the sums in that order, each rounded to float32, as the
    float32 epilogue's (`rvm.kernels.epilogue.tile_rows`). With bit 2 of ``flags`` the sums
    are stored as they are instead, float32, the low channel's at ``out + 4 i``, the high
    one's (when ``pair``) at ``out_hi + 4 i``, for a float32 output;
    ``res`` the residual: ``(kind, r_lo, r_hi)``, kind 0 none, 1 float32 values at ``r_lo +
    4 i`` and ``r_hi + 4 i``, 2 a pair plane's words at ``r_lo + 4 i`` (its low halves the
    low channel's, its high halves the high one's; ``r_hi`` unused)."""
    sig = nt.void(*(nt.int64,) * 6, nt.UniTuple(nt.float32, 2), nt.int64, nt.UniTuple(nt.int64, 3))

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        lo, hi, out, out_hi, n, pair, shifts, flags, res = args
        v = VectorIR(builder, LANES)
        i64 = ir.IntType(64)
        with_hi = builder.icmp_signed("!=", pair, i64(0))
        with_bias = builder.icmp_signed("!=", builder.and_(flags, i64(1)), i64(0))
        with_relu = builder.icmp_signed("!=", builder.and_(flags, i64(2)), i64(0))
        floats_out = builder.icmp_signed("!=", builder.and_(flags, i64(4)), i64(0))
        biases = [v.broadcast(builder.extract_value(shifts, i), v.f32) for i in range(2)]
        kind, r_lo, r_hi = (builder.extract_value(res, i) for i in range(3))
        zero = ir.Constant(v.f32, None)
        steps = builder.sdiv(builder.add(n, i64(LANES - 1)), i64(LANES))

        def rows(residual):  # type: ignore[no-untyped-def]
            """The loop over the vectors, ``residual(at, mask)`` the two channels' residual
            lanes from lane ``at`` on (None: none): whole vectors loaded and stored plainly,
            the last, partial one under its lane mask."""
            with cgutils.for_range(builder, steps) as loop:
                at = builder.mul(loop.index, i64(LANES))
                offset = builder.mul(at, i64(4))
                left = builder.sub(n, at)
                whole = builder.icmp_signed(">=", left, i64(LANES))
                with builder.if_else(whole) as (plain, tail):
                    with plain:
                        vector(residual, offset, ir.Constant(v.masks, [1] * LANES))
                    with tail:
                        vector(residual, offset, v.first(left))

        def vector(residual, offset, mask):  # type: ignore[no-untyped-def]
            sums = [v.load(builder.add(src, offset), v.f32, mask) for src in (lo, hi)]
            sums = finish_sums(builder, sums, biases, with_bias, residual(offset, mask), with_relu)
            with builder.if_else(floats_out) as (as_floats, as_words):
                with as_floats:
                    v.store(sums[0], builder.add(out, offset), mask)
                    with builder.if_then(with_hi):
                        v.store(sums[1], builder.add(out_hi, offset), mask)
                with as_words:
                    high = builder.select(with_hi, sums[1], zero)
                    words = pair_bits(builder, sums[0], high)
                    v.store(words, builder.add(out, offset), mask)

        def floats(offset, mask):  # type: ignore[no-untyped-def]
            return [v.load(builder.add(r, offset), v.f32, mask) for r in (r_lo, r_hi)]

        def words(offset, mask):  # type: ignore[no-untyped-def]
            return list(pair_halves(builder, v.load(builder.add(r_lo, offset), v.i32, mask)))

        _three_ways(builder, kind, (0, 1), (lambda: rows(lambda offset, mask: None),
                                            lambda: rows(floats), lambda: rows(words)))  # fmt: skip
        return context.get_dummy_value()

    return sig, codegen
