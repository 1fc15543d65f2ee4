"""Neural-network ONNX ops: Gemm, Einsum, normalizations (LpNormalization too), Softmax,
Dropout.

Convolutions are in `conv`, pools in `pool`. Everything here is inference: Dropout is the
identity, BatchNormalization uses the given statistics.
"""

from __future__ import annotations

from rvm import op
from rvm.frontend.onnx.context import NodeContext
from rvm.frontend.onnx.registry import converter
from rvm.ir import Expr
from rvm.op.shapes import dims_product


@converter("Gemm", since=(6, 7, 9, 11, 13))
def _gemm(ctx: NodeContext) -> Expr:
    a, b, c = ctx.input(0), ctx.input(1), ctx.optional(2)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    if ctx.attr("transA", 0):
        a = op.transpose(a)
    y = op.dense(a, b) if ctx.attr("transB", 0) else op.matmul(a, b)
    if alpha != 1.0:
        y = op.multiply(y, alpha)
    if c is not None:
        y = op.add(y, c if beta == 1.0 else op.multiply(c, beta))
    return ctx.emit(y)


@converter("BatchNormalization", since=(7, 9, 14, 15))
def _batch_norm(ctx: NodeContext) -> Expr:
    if ctx.attr("training_mode", 0) or ctx.num_outputs > 1:
        ctx.fail("only inference (one output, training_mode=0) is supported")
    if not ctx.attr("spatial", 1):
        ctx.fail("spatial=0 is not supported")
    args = [ctx.input(i) for i in range(5)]
    return ctx.emit(op.batch_norm(*args, axis=1, epsilon=ctx.attr("epsilon", 1e-5)))


@converter("LRN", since=(1, 13))
def _lrn(ctx: NodeContext) -> Expr:
    return ctx.emit(
        op.lrn(
            ctx.input(0),
            size=ctx.attr("size"),
            axis=1,
            alpha=ctx.attr("alpha", 1e-4),
            beta=ctx.attr("beta", 0.75),
            bias=ctx.attr("bias", 1.0),
        )
    )


@converter("LayerNormalization", since=17)
def _layer_norm(ctx: NodeContext) -> Expr | list[Expr]:
    if ctx.num_outputs > 1:  # the Mean and InvStdDev outputs: the function body gives them
        return ctx.expand()
    x = ctx.input(0)
    rank = len(ctx.shape(x))
    axis = ctx.attr("axis", -1) % rank
    scale = ctx.input(1)
    bias = ctx.optional(2)
    if bias is None:
        bias = op.zeros(ctx.shape(scale), ctx.type(scale).dtype)
    axes = list(range(axis, rank))
    return ctx.emit(op.layer_norm(x, scale, bias, axes=axes, epsilon=ctx.attr("epsilon", 1e-5)))


def _softmax_legacy(fn):
    """Softmax-1/11: the input is coerced to 2-D at ``axis``, normalized along its rows."""

    def convert(ctx: NodeContext) -> Expr:
        x = ctx.input(0)
        shape = ctx.shape(x)
        axis = ctx.attr("axis", 1) % max(len(shape), 1)
        if axis == len(shape) - 1:
            return ctx.emit(fn(x, axis=-1))
        rows = dims_product(shape[:axis])
        if rows is None or any(d is None for d in shape):
            ctx.fail(f"cannot flatten shape {tuple(shape)} at axis {axis} without known dims")
        flat = op.reshape(x, (rows, -1))
        return ctx.emit(op.reshape(fn(flat, axis=-1), shape))

    return convert


def _softmax(fn):
    def convert(ctx: NodeContext) -> Expr:
        return ctx.emit(fn(ctx.input(0), axis=ctx.attr("axis", -1)))

    return convert


converter("Softmax", since=(1, 11))(_softmax_legacy(op.softmax))
converter("LogSoftmax", since=(1, 11))(_softmax_legacy(op.log_softmax))
converter("Softmax", since=13)(_softmax(op.softmax))
converter("LogSoftmax", since=13)(_softmax(op.log_softmax))


@converter("Dropout", since=(7, 10, 12, 13, 22))
def _dropout(ctx: NodeContext) -> list:
    training = ctx.const(2)
    if ctx.optional(2) is not None and (training is None or bool(training)):
        ctx.fail("training_mode must be a constant False (rvm imports for inference)")
    x = ctx.input(0)
    if ctx.num_outputs < 2:
        return [x]
    mask_dtype = "bool" if ctx.version >= 10 else ctx.type(x).dtype  # Dropout-7: mask is T
    return [x, ctx.emit(op.full(ctx.shape(x), True, mask_dtype))]


@converter("Einsum", since=(12, 28))  # 28 adds bfloat16
def _einsum(ctx: NodeContext) -> Expr:
    operands = [ctx.input(i) for i in range(len(ctx.inputs))]
    return ctx.emit(op.einsum(ctx.attr("equation"), *operands))


@converter("LpNormalization", since=(1, 22))
def _lp_normalization(ctx: NodeContext) -> Expr:
    """``x`` over its L1 or L2 norm along ``axis``; a zero norm gives zeros (as ONNX's
    reference), not NaN."""
    x, axis, p = ctx.input(0), ctx.attr("axis", -1), ctx.attr("p", 2)
    if p == 1:
        norm = ctx.emit(op.sum(ctx.emit(op.abs(x)), axis, keepdims=True))
    elif p == 2:
        norm = ctx.emit(op.sqrt(ctx.emit(op.sum(ctx.emit(x * x), axis, keepdims=True))))
    else:
        ctx.fail(f"p must be 1 or 2, got {p}")
    zero = ctx.emit(op.equal(norm, 0.0))
    return ctx.emit(op.where(zero, 0.0, ctx.emit(x / ctx.emit(op.where(zero, 1.0, norm)))))
