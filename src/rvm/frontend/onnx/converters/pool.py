"""Pooling ONNX ops over 1 to 3 spatial axes: MaxPool (with its Indices), AveragePool, LpPool,
the global pools and MaxUnpool.

ONNX's indices count over the whole tensor, ``((n * C + c) * plane + spatial index)``, the
spatial index row-major or, with ``storage_order=1``, column-major; rvm's `op.max_pool_indices`
counts row-major within each plane, so the converter adds the plane offsets (N and C must be
static). An Lp pool is a sum pool of ``|x| ** p`` (a depthwise convolution with a ones kernel:
zero padding adds nothing) raised to ``1 / p``. MaxUnpool scatters into a flat zero tensor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rvm import op
from rvm.frontend.onnx.context import NodeContext
from rvm.frontend.onnx.converters.conv import CONVS, static_sizes, window_attrs
from rvm.frontend.onnx.registry import converter
from rvm.ir import Constant, Expr
from rvm.op.shapes import window_out_dim

_MAX_POOLS = {1: op.max_pool1d, 2: op.max_pool2d, 3: op.max_pool3d}
_AVG_POOLS = {1: op.avg_pool1d, 2: op.avg_pool2d, 3: op.avg_pool3d}


def _pool_window(ctx: NodeContext, x: Expr) -> dict:
    """The pool's attributes in rvm's form: pool_size, strides, padding, dilation, ceil_mode."""
    kernel = list(ctx.attr("kernel_shape"))
    if len(kernel) not in _MAX_POOLS:
        ctx.fail(f"rvm has 1-d, 2-d and 3-d pools, got kernel_shape {kernel}")
    if len(ctx.shape(x)) != len(kernel) + 2:
        ctx.fail(f"kernel_shape {kernel} does not fit input {tuple(ctx.shape(x))}")
    attrs = window_attrs(ctx, x, kernel)
    return {"pool_size": kernel, "ceil_mode": bool(ctx.attr("ceil_mode", 0)), **attrs}


@converter("MaxPool", since=(1, 8, 10, 11, 12, 22))
def _max_pool(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    window = _pool_window(ctx, x)
    values = ctx.emit(_MAX_POOLS[len(window["pool_size"])](x, **window))
    if ctx.num_outputs < 2:
        return [values]
    indices = ctx.emit(op.max_pool_indices(x, **window))
    return [values, ctx.emit(_onnx_indices(ctx, indices, ctx.shape(x)))]


def _onnx_indices(ctx: NodeContext, indices: Expr, shape: Sequence) -> Expr:
    """rvm's row-major indices within each plane as ONNX's over the whole tensor."""
    n, c, *spatial = static_sizes(ctx, shape, "the Indices output")
    if ctx.attr("storage_order", 0):
        # Row-major index -> coordinates -> column-major index (the first axis fastest).
        column, rest = None, indices
        for size in reversed(spatial):
            coord = op.mod(rest, size)
            rest = op.floor_divide(rest, size)
            column = coord if column is None else op.add(op.multiply(column, size), coord)
        indices = column
    plane = math.prod(spatial)
    offsets = np.arange(n * c, dtype=np.int64).reshape(n, c, *([1] * len(spatial))) * plane
    return op.add(indices, Constant(offsets))


@converter("AveragePool", since=(1, 7, 10, 11, 19, 22))
def _avg_pool(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    window = _pool_window(ctx, x)
    include = bool(ctx.attr("count_include_pad", 0))
    pool = _AVG_POOLS[len(window["pool_size"])]
    return ctx.emit(pool(x, count_include_pad=include, **window))


@converter("LpPool", since=(1, 2, 11, 18, 22))
def _lp_pool(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    window = _pool_window(ctx, x)
    kernel = window.pop("pool_size")
    shape = ctx.shape(x)
    channels = shape[1]
    if not isinstance(channels, int):
        ctx.fail(f"needs a static channel count, got input {tuple(shape)}")
    if window.pop("ceil_mode"):
        window["padding"] = _ceil_padding(ctx, shape[2:], kernel, window)
    p = float(ctx.attr("p", 2))
    dtype = ctx.type(x).dtype
    ones = Constant(np.ones((channels, 1, *kernel), dtype=dtype))
    sums = CONVS[len(kernel)](op.power(op.abs(x), p), ones, groups=channels, **window)
    return ctx.emit(op.power(sums, 1.0 / p))


def _ceil_padding(ctx: NodeContext, spatial: Sequence, kernel: Sequence[int], window: dict):
    """End pads that give a floor-mode window op the ceil-mode output size."""
    sizes = static_sizes(ctx, spatial, "ceil_mode")
    n = len(kernel)
    pads = list(window["padding"])
    for i, (size, k, s, d) in enumerate(zip(sizes, kernel, window["strides"], window["dilation"])):
        out = window_out_dim(ctx.node.op_type, size, k, s, (pads[i], pads[i + n]), d, True)
        reach = (out - 1) * s + d * (k - 1) + 1
        pads[i + n] = max(pads[i + n], reach - size - pads[i])
    return pads


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


@converter("GlobalLpPool", since=(1, 2, 22))
def _global_lp_pool(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    p = float(ctx.attr("p", 2))
    axes = list(range(2, len(ctx.shape(x))))
    sums = op.sum(op.power(op.abs(x), p), axis=axes, keepdims=True)
    return ctx.emit(op.power(sums, 1.0 / p))


@converter("MaxUnpool", since=(9, 11, 22))
def _max_unpool(ctx: NodeContext) -> Expr:
    x, indices = ctx.input(0), ctx.input(1)
    kernel = list(ctx.attr("kernel_shape"))
    n = len(kernel)
    strides = list(ctx.attr("strides", [1] * n))
    pads = list(ctx.attr("pads", [0] * 2 * n))
    shape = ctx.ints(2, "output_shape")
    if shape is None:
        shape = static_sizes(ctx, ctx.shape(x), "an output_shape-less MaxUnpool")
        for a, (s, k) in enumerate(zip(strides, kernel)):
            shape[2 + a] = (shape[2 + a] - 1) * s - pads[a] - pads[a + n] + k
    # The indices count over the whole output tensor (as MaxPool's over its input): scatter
    # into a flat zero tensor of the output's size.
    flat = op.zeros((math.prod(shape),), ctx.type(x).dtype)
    scattered = op.scatter_elements(flat, op.reshape(indices, (-1,)), op.reshape(x, (-1,)), axis=0)
    return ctx.emit(op.reshape(scattered, shape))
