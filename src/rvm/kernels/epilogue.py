"""A GEMM tile's epilogue in explicit vectors: bias, activation (GELU too) and residual.

`tile(c, ldc, rows, cols, bias, act, res)` computes, on int64 addresses, ``C[:rows, :cols] =
act(C + bias) + R`` over a tile of C just stored (row stride ``ldc`` floats; ``bias`` the
address of ``cols`` floats, 0: none; ``act`` an index of
`rvm.kernels.reference.packed.ACTIVATIONS`; ``res`` R's tile, row stride ``ldc``, 0: none),
`LANES` lanes a step, the row's last under a lane mask. `tile_rows(c, ldc, rows, cols, bias,
act, res)` is a convolution's: ``C = act(C + bias + R)`` with one bias value a row (an output
channel) and R (0: none) a residual laid out as C.

Why in LLVM IR: the same epilogue written as Numba loops (once `rvm.kernels.packed`'s),
called on each 8 x 48 tile from within the bf16 GEMM's walk, vectorizes its bias and ReLU but
left its GELU scalar, with a branch between erf's two forms: on BERT's FFN shape (128 x 768
by 768 x 3072, 2 threads) with pre-activations of standard deviation 2.3, the GELU added 2.5
to 5 ms to the GEMM's 1.4 ms; here it added about 0.2-0.3 ms with erf32's arithmetic, 0.07 ms
with the rational erf (`rvm.kernels.mathlib.ERF_FAST`). (Where most values are below 1 in
magnitude the scalar code takes erf's cheap form and cost less: random-weight BERT showed no
end-to-end change.) The GELU is `rvm.kernels.mathlib`'s `gelu32` and `gelu_tanh32`, written by
the same code on whole vectors in registers (`mathlib.gelu_ir`), so its results are the
elementwise kernels'. NaN propagates, as there.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels import mathlib as m
from rvm.kernels.gemmshape import LANES  # float32 lanes of the CPU's vectors
from rvm.kernels.vectors import VectorIR

__all__ = ["VectorMath", "tile", "tile_rows"]

I64, F32 = ir.IntType(64), ir.FloatType()


class VectorMath(VectorIR):
    """`VectorIR` plus float32 constants in every lane and the activations."""

    def f(self, value: float) -> ir.Constant:
        """A float32 vector of ``value`` in every lane."""
        return ir.Constant(self.f32, [value] * self.lanes)

    def activation(self, v: ir.Value, act: int) -> ir.Value:
        """Activation ``act`` (an index of `ACTIVATIONS`: none, relu, gelu, gelu_tanh)."""
        if act == 1:
            b = self.builder
            return b.select(b.fcmp_ordered("<", v, self.f(0.0)), self.f(0.0), v)
        return m.gelu_ir(self.builder, v, act == 3) if act in (2, 3) else v


def _by_activation(builder: ir.IRBuilder, act: ir.Value, loop: Callable[[int], None]) -> None:
    """``loop(kind)`` for the activation index ``act`` only (a switch over the 4 kinds of
    `ACTIVATIONS`, each a copy of the loop with its activation inlined)."""
    blocks = [builder.append_basic_block(f"act{k}") for k in range(4)]
    done = builder.append_basic_block("stored")
    switch = builder.switch(act, blocks[0])
    for kind, block in enumerate(blocks):
        switch.add_case(I64(kind), block)
        builder.position_at_end(block)
        loop(kind)
        builder.branch(done)
    builder.position_at_end(done)


@intrinsic
def tile(typingctx, c, ldc, rows, cols, bias, act, res):  # type: ignore[no-untyped-def]
    """``C[:rows, :cols] = act(C + bias) + R`` on int64 addresses (see the module
    docstring): one loop per activation, chosen by a switch."""
    sig = nt.void(*(nt.int64,) * 7)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        _tile_codegen(builder, args)
        return context.get_dummy_value()

    return sig, codegen


def _row_vectors(builder, v, c, ldc, rows, cols, each_row) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """The vectors of ``rows`` rows of ``cols`` floats of C (at the int64 ``c``, rows ``ldc``
    floats apart): ``each_row(row)`` (the row's index) gives the row's ``step(at, j, load,
    store)``, called on each vector (at ``at``, ``j`` bytes into the row), whole vectors
    loaded and stored plainly, the row's last one under a lane mask where ``cols`` is not
    whole vectors (``load(at)``, ``store(value, at)`` of that kind)."""
    full = builder.sdiv(cols, I64(LANES))
    tail = builder.sub(cols, builder.mul(full, I64(LANES)))
    tail_mask = v.first(tail)

    def plain_load(at: ir.Value) -> ir.Value:
        return builder.load(v.pointer(at, v.f32), align=4)

    def plain_store(value: ir.Value, at: ir.Value) -> None:
        builder.store(value, v.pointer(at, v.f32), align=4)

    with cgutils.for_range(builder, rows) as row:
        at_row = builder.add(c, builder.mul(builder.mul(row.index, ldc), I64(4)))
        step = each_row(row.index)
        with cgutils.for_range(builder, full) as each:
            j = builder.mul(each.index, I64(4 * LANES))
            step(builder.add(at_row, j), j, plain_load, plain_store)
        with builder.if_then(builder.icmp_signed(">", tail, I64(0))):
            j = builder.mul(full, I64(4 * LANES))
            step(builder.add(at_row, j), j,
                 lambda at: v.load(at, v.f32, tail_mask),
                 lambda value, at: v.store(value, at, tail_mask))  # fmt: skip


def _tile_codegen(builder, args) -> None:  # type: ignore[no-untyped-def]
    """`tile`'s loops (`_row_vectors`); one loop per activation, chosen by a switch. The bias
    and R are read where they are given, else C's own vector again (read, not added): no
    lane mask for them either. On AVX2, where a lane mask is a vector register and a masked
    store (``vmaskmovps``) costs several plain ones, every vector under a mask had taken
    BERT's feed-forward GEMM (128 x 768 by 768 x 3072, one Zen 3 core) from 6.8 ms without an
    epilogue to 7.3 with its bias and 8.1 with bias and residual; plain, 7.0 and 7.5 (the
    same bits), and BERT-base in float32 0.96-0.98 of its time (two threads)."""
    c, ldc, rows, cols, bias, act, res = args
    v = VectorMath(builder, LANES)
    with_bias = builder.icmp_signed("!=", bias, I64(0))
    with_res = builder.icmp_signed("!=", res, I64(0))
    # R's address less C's: R's value at a C address is read that far on (0: C's own)
    shift = builder.select(with_res, builder.sub(res, c), I64(0))

    def loop(kind: int) -> None:
        def step(at, j, load, store) -> None:  # type: ignore[no-untyped-def]
            value = load(at)
            more = load(builder.select(with_bias, builder.add(bias, j), at))
            value = builder.select(with_bias, builder.fadd(value, more), value)
            value = v.activation(value, kind)
            more = load(builder.add(at, shift))
            value = builder.select(with_res, builder.fadd(value, more), value)
            store(value, at)

        _row_vectors(builder, v, c, ldc, rows, cols, lambda row: step)

    _by_activation(builder, act, loop)


def _rows_codegen(builder, args) -> None:  # type: ignore[no-untyped-def]
    """`tile_rows`' loops (`_row_vectors`): a row's bias in every lane, R read where given,
    else C's own vector again (read, not added); one loop per activation, chosen by a
    switch."""
    c, ldc, rows, cols, bias, act, res = args
    v = VectorMath(builder, LANES)
    bias_on = v.broadcast(builder.icmp_signed("!=", bias, I64(0)), v.masks)
    # R's address less C's: R's value at a C address is read that far on (0: C's own)
    with_res = builder.icmp_signed("!=", res, I64(0))
    shift = builder.select(with_res, builder.sub(res, c), I64(0))

    def loop(kind: int) -> None:
        def each_row(row):  # type: ignore[no-untyped-def]
            # the row's bias in lane 0, read only where given (0 otherwise), then in all
            mask = builder.and_(v.first(I64(1)), bias_on)
            one = v.load(builder.add(bias, builder.mul(row, I64(4))), v.f32, mask)
            row_bias = builder.shuffle_vector(one, one, ir.Constant(v.i32, [0] * LANES))

            def step(at, j, load, store) -> None:  # type: ignore[no-untyped-def]
                value = builder.fadd(load(at), row_bias)
                more = load(builder.add(at, shift))
                value = builder.select(with_res, builder.fadd(value, more), value)
                store(v.activation(value, kind), at)

            return step

        _row_vectors(builder, v, c, ldc, rows, cols, each_row)

    _by_activation(builder, act, loop)


@intrinsic
def tile_rows(typingctx, c, ldc, rows, cols, bias, act, res):  # type: ignore[no-untyped-def]
    """``C[:rows, :cols] = act(C + bias + R)`` on int64 addresses, the bias one value a *row*
    (``bias`` the address of ``rows`` floats, 0: none), R a residual laid out as C (``res``
    its tile's address, 0: none): a convolution's output, whose rows are output channels
    (`rvm.kernels.bf16conv`)."""
    sig = nt.void(*(nt.int64,) * 7)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        _rows_codegen(builder, args)
        return context.get_dummy_value()

    return sig, codegen
