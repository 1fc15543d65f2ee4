"""Neural-network ONNX ops: Conv, pools, Gemm, normalizations, Softmax, Dropout.

Convolutions take 1-d or 2-d inputs (rvm's conv1d/conv2d), pools 2-d (NCHW). ONNX pads are
(begin..., end...) per spatial axis, which is rvm's padding order. ``auto_pad`` SAME_* needs
static spatial sizes. Everything here is inference: Dropout is the identity, BatchNormalization
uses the given statistics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rvm import op
from rvm.frontend.onnx.context import NodeContext
from rvm.frontend.onnx.registry import converter
from rvm.ir import Expr
from rvm.op.shapes import dims_product


def _pads(
    ctx: NodeContext,
    spatial: Sequence,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> list[int]:
    """Explicit pads (begin..., end...) from ``pads`` or ``auto_pad``."""
    n = len(kernel)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto == "NOTSET":
        pads = list(ctx.attr("pads", [0] * 2 * n))
        if len(pads) != 2 * n:
            ctx.fail(f"pads must have {2 * n} values, got {pads}")
        return pads
    if auto == "VALID":
        return [0] * 2 * n
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        ctx.fail(f"unknown auto_pad {auto!r}")
    if not all(isinstance(d, int) for d in spatial):
        ctx.fail(f"auto_pad={auto} needs static spatial sizes, got {tuple(spatial)}")
    begin, end = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        out = math.ceil(size / s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return begin + end


def _window(ctx: NodeContext, x: Expr, kernel: Sequence[int]) -> dict:
    shape = ctx.shape(x)
    n = len(kernel)
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    pads = _pads(ctx, shape[2:], kernel, strides, dilations)
    return {"strides": strides, "padding": pads, "dilation": dilations}


def convolve(ctx: NodeContext, x: Expr, w: Expr) -> Expr:
    """``x`` convolved with ``w`` as the node's Conv attributes say (kernel_shape, strides,
    pads or auto_pad, dilations, group); no bias. QLinearConv and ConvInteger share it."""
    wshape = ctx.shape(w)
    kernel = list(ctx.attr("kernel_shape", wshape[2:]))
    if not all(isinstance(k, int) for k in kernel):
        ctx.fail(f"needs a static kernel shape, got weight {tuple(wshape)}")
    conv = {1: op.conv1d, 2: op.conv2d}.get(len(kernel))
    if conv is None:
        ctx.fail(f"rvm has 1-d and 2-d convolutions, got a {len(kernel)}-d kernel")
    return conv(x, w, groups=ctx.attr("group", 1), **_window(ctx, x, kernel))


@converter("Conv", since=(1, 11, 22))
def _conv(ctx: NodeContext) -> Expr:
    x, w = ctx.input(0), ctx.input(1)
    y = convolve(ctx, x, w)
    kernel = ctx.shape(w)[2:]
    bias = ctx.optional(2)
    if bias is not None:
        y = op.add(y, op.reshape(bias, (-1,) + (1,) * len(kernel)))
    return ctx.emit(y)


def _pool(ctx: NodeContext, pool, **extra) -> Expr:
    x = ctx.input(0)
    kernel = list(ctx.attr("kernel_shape"))
    if len(kernel) != 2:
        ctx.fail(f"rvm has 2-d pools, got kernel_shape {kernel}")
    attrs = _window(ctx, x, kernel)
    return ctx.emit(
        pool(x, pool_size=kernel, ceil_mode=bool(ctx.attr("ceil_mode", 0)), **attrs, **extra)
    )


@converter("MaxPool", since=(1, 8, 10, 11, 12, 22))
def _max_pool(ctx: NodeContext) -> Expr:
    if ctx.num_outputs > 1:
        ctx.fail("the Indices output is not supported")
    return _pool(ctx, op.max_pool2d)


@converter("AveragePool", since=(1, 7, 10, 11, 19, 22))
def _avg_pool(ctx: NodeContext) -> Expr:
    include = bool(ctx.attr("count_include_pad", 0))
    return _pool(ctx, op.avg_pool2d, count_include_pad=include)


def _global_pool(pool, reduce):
    def convert(ctx: NodeContext) -> Expr:
        x = ctx.input(0)
        rank = len(ctx.shape(x))
        if rank == 4:
            return ctx.emit(pool(x))
        return ctx.emit(reduce(x, axis=list(range(2, rank)), keepdims=True))

    return convert


converter("GlobalAveragePool", since=(1, 22))(_global_pool(op.global_avg_pool2d, op.mean))
converter("GlobalMaxPool", since=(1, 22))(_global_pool(op.global_max_pool2d, op.max))


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
def _layer_norm(ctx: NodeContext) -> Expr:
    if ctx.num_outputs > 1:
        ctx.fail("the Mean and InvStdDev outputs are not supported")
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
    return [x, ctx.emit(op.full(ctx.shape(x), True, "bool"))]
