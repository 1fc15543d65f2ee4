"""A bf16 tile's sums put out from its registers: the direct convolution's epilogue, in the
micro-kernel (`rvm.kernels.bf16gemm.micro_out`).

`tile_words` writes each two rows of a tile (two output channels, positions along the lanes)
as one vector of the next convolution's pair-plane words a vector of positions: the two
channels' sums plus their biases, plus a pair plane's residual, ReLU'd
(`rvm.kernels.bf16words.finish_sums`), rounded (`pair_bits`), where the
`rvm.kernels.blockout.BLOCK_OUT` record says, as `rvm.kernels.blockout.block_out` puts a block
out of L1 (its ``whole`` case: the output's and the residual's rows the run's). Measured on a
Zen 4 (two threads, bf16 models, the two ways in turns in one process, outputs bit for bit the
same): resnet50's 1 x 1s from 64 and 128 channels took 0.87-0.94 of their time, the model
0.953-0.963; squeezenet 0.977; densenet121 and inception_v2 (their 1 x 1s deep, or turned)
1.005-1.008. With the put-out skipped altogether (wrong outputs) resnet50's 64 -> 256 took
0.66-0.72: the rest is the output's and the residual's traffic.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir
from numba.core import cgutils

from rvm.kernels.bf16words import finish_sums, pair_bits, pair_halves
from rvm.kernels.vectors import VectorIR

__all__ = ["tile_words"]

I64, F32 = ir.IntType(64), ir.FloatType()


def tile_words(
    builder: ir.IRBuilder,
    summed: Callable[[int, int], ir.Value],
    shape: tuple[int, int, ir.Value],
    masks: tuple[ir.Value, ir.Value],
    where: tuple[ir.Value, ir.Value, ir.Value, ir.Value, ir.Value],
) -> None:
    """Rows ``[0, rows)`` of a tile of ``height`` rows by ``vectors`` vectors (``shape``),
    row ``i``'s vector ``j`` of float32 sums ``summed(i, j)``, into pair-plane words:
    ``masks`` the lanes of a whole vector and of the last one; ``where`` the int64 address
    of the `rvm.kernels.blockout.BLOCK_OUT` record (a pair plane out; a residual none or a
    pair plane, the kind chosen here), the biases' address (0: none), ReLU (not 0), the
    tile's first output channel (even) and its first position in the run."""
    height, vectors, rows = shape
    to, bias, relu, i0, j0 = where
    v = VectorIR(builder, masks[0].type.count)
    desc = builder.inttoptr(to, I64.as_pointer())
    out, ld_out, kind, res, ld_res = (
        builder.load(builder.gep(desc, [I64(k)])) for k in (1, 2, 6, 7, 8)
    )
    with_bias = builder.icmp_signed("!=", bias, I64(0))
    with_relu = builder.icmp_signed("!=", relu, I64(0))
    biases = builder.inttoptr(bias, F32.as_pointer())

    def rows_out(residual: bool) -> None:
        for i in range(0, height, 2):
            with builder.if_then(builder.icmp_signed("<", I64(i), rows)):
                paired = builder.icmp_signed("<", I64(i + 1), rows)
                channel = builder.add(i0, I64(i))
                shifts = []
                for k, wanted in ((0, with_bias), (1, builder.and_(with_bias, paired))):
                    keep = cgutils.alloca_once_value(builder, ir.Constant(F32, 0.0))
                    with builder.if_then(wanted):
                        builder.store(
                            builder.load(builder.gep(biases, [builder.add(channel, I64(k))])), keep
                        )
                    shifts.append(v.broadcast(builder.load(keep), v.f32))
                pair = builder.sdiv(channel, I64(2))
                at_out = builder.add(
                    out, builder.shl(builder.add(builder.mul(pair, ld_out), j0), I64(2))
                )
                at_res = builder.add(
                    res, builder.shl(builder.add(builder.mul(pair, ld_res), j0), I64(2))
                )
                for j in range(vectors):
                    lanes = masks[1] if j == vectors - 1 else masks[0]
                    step = I64(4 * j * v.lanes)
                    more = None
                    if residual:
                        more = list(
                            pair_halves(builder, v.load(builder.add(at_res, step), v.i32, lanes))
                        )
                    sums = [summed(i, j), summed(min(i + 1, height - 1), j)]
                    sums = finish_sums(builder, sums, shifts, with_bias, more, with_relu)
                    high = builder.select(paired, sums[1], ir.Constant(v.f32, None))
                    v.store(pair_bits(builder, sums[0], high), builder.add(at_out, step), lanes)

    with builder.if_else(builder.icmp_signed("==", kind, I64(2))) as (with_residual, without):
        with with_residual:
            rows_out(True)
        with without:
            rows_out(False)
