"""The integer GEMM's micro-kernel: `MR` rows x `NR` columns of int32 sums in registers.

For every 4 depths it broadcasts each row's 4 bytes and issues one ``vpdpbusd`` (AVX-512
VNNI: 64 multiply-adds of uint8 by int8 into int32) per vector of `LANES` columns, reading
the columns' quads by taps (offsets into one buffer: a plain panel has one tap at offset 0,
a convolution's image its taps, `rvm.kernels.qgemm`'s ``_direct``). `micro` is `VECTORS`
vectors wide, `micro_tail` one (a product's last columns when no more are left). `VNNI`
says whether the CPU Numba compiles for has the instruction; without it `rvm.kernels.qgemm`
runs a plain loop instead.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.sgemm import _target_features

__all__ = ["LANES", "MR", "NR", "VECTORS", "VNNI", "micro", "micro_tail"]

VNNI = "+avx512vnni" in set(_target_features().split(","))
LANES = 16
VECTORS = 2
MR = 8  # rows x VECTORS accumulators: 16 of the 32 zmm registers
NR = LANES * VECTORS


def _make_micro(vectors: int):  # type: ignore[no-untyped-def]
    """The micro-kernel ``micro(taps, offsets, quads, a, lda, b, ldb, c, ldc, rows, swap)`` of
    ``vectors`` vectors of `LANES` columns: on int64 addresses, int32 ``C[:rows, :width] =
    A[:rows, :4 * taps * quads] @ B[:, :width]`` (``width`` = ``vectors * LANES``): A's rows
    ``lda`` bytes apart, broadcast 4 bytes at a time; B by taps, each of ``quads`` quads of
    depth: quad ``s`` of tap ``t`` is ``width`` x 4 bytes at ``b + offsets[t] + s * ldb``
    (``offsets`` the address of int64 byte offsets), loaded `LANES` columns a vector; C's
    rows ``ldc`` values apart. ``swap`` 0: A is uint8 and B int8; 1: A int8, B uint8. Rows
    past ``rows`` read row 0 and are not stored. One tap at offset 0 is a plain panel;
    several read a convolution's taps in place from one image (`_direct`)."""

    @intrinsic
    def micro(typingctx, taps, offsets, quads, a, lda, b, ldb, c, ldc, rows, swap):  # type: ignore[no-untyped-def]
        sig = nt.void(*(nt.int64,) * 11)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            _micro_code(builder, args, vectors)
            return context.get_dummy_value()

        return sig, codegen

    return micro


def _micro_code(builder: ir.IRBuilder, args: list, vectors: int) -> None:
    """The body of `_make_micro`'s kernel of ``vectors`` vectors."""
    taps, offsets, quads, a, lda, b, ldb, c, ldc, rows, swap = args
    i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    vec = ir.VectorType(i32, LANES)
    fnty = ir.FunctionType(vec, [vec, vec, vec])
    dot = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.avx512.vpdpbusd.512")
    a_bytes, b_bytes = (
        builder.inttoptr(a, i8.as_pointer()),
        builder.inttoptr(b, i8.as_pointer()),
    )
    offs = builder.inttoptr(offsets, i64.as_pointer())
    cp = builder.inttoptr(c, i32.as_pointer())
    zero, undef = ir.Constant(vec, None), ir.Constant(vec, ir.Undefined)
    splat = ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)
    a_rows = [
        builder.mul(builder.select(builder.icmp_signed("<", i64(i), rows), i64(i), i64(0)), lda)
        for i in range(MR)
    ]

    def step(swapped, acc, tap, s):  # type: ignore[no-untyped-def]
        """Quad ``s`` of tap ``tap``: one ``vpdpbusd`` per accumulator."""
        row_b = builder.add(builder.load(builder.gep(offs, [tap])), builder.mul(s, ldb))
        bs = []
        for j in range(vectors):
            at = builder.gep(b_bytes, [builder.add(row_b, i64(4 * LANES * j))])
            bs.append(builder.load(builder.bitcast(at, vec.as_pointer()), align=1))
        depth = builder.mul(builder.add(builder.mul(tap, quads), s), i64(4))
        for i in range(MR):
            at = builder.gep(a_bytes, [builder.add(a_rows[i], depth)])
            word = builder.load(builder.bitcast(at, i32.as_pointer()), align=1)
            av = builder.shuffle_vector(builder.insert_element(undef, word, i32(0)), undef, splat)
            for j in range(vectors):
                u, v = (bs[j], av) if swapped else (av, bs[j])
                builder.store(builder.call(dot, [builder.load(acc[i][j]), u, v]), acc[i][j])

    def tile(swapped):  # type: ignore[no-untyped-def]
        acc = [
            [cgutils.alloca_once_value(builder, zero) for _ in range(vectors)] for _ in range(MR)
        ]
        with cgutils.for_range(builder, taps) as outer:
            with cgutils.for_range(builder, quads) as inner:
                step(swapped, acc, outer.index, inner.index)
        for i in range(MR):
            with builder.if_then(builder.icmp_signed("<", i64(i), rows)):
                for j in range(vectors):
                    at = builder.gep(cp, [builder.add(builder.mul(ldc, i64(i)), i64(j * LANES))])
                    builder.store(
                        builder.load(acc[i][j]), builder.bitcast(at, vec.as_pointer()), align=4
                    )

    with builder.if_else(builder.icmp_signed("!=", swap, i64(0))) as (swapped, plain):
        with swapped:
            tile(True)
        with plain:
            tile(False)


micro = _make_micro(VECTORS)
micro_tail = _make_micro(1)  # a product's last columns when `LANES` or fewer are left
