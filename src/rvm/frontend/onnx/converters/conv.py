"""Convolution ONNX ops: Conv, ConvTranspose and Col2Im, over 1 to 3 spatial axes.

ONNX pads are (begin..., end...) per spatial axis, which is rvm's padding order. ``auto_pad``
SAME_* and ConvTranspose's ``output_shape`` need static spatial sizes. Col2Im is a transposed
convolution whose one-hot weight puts each column entry back at its place in the block.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rvm import op
from rvm.frontend.onnx.context import NodeContext
from rvm.frontend.onnx.registry import converter
from rvm.ir import Constant, Expr

CONVS = {1: op.conv1d, 2: op.conv2d, 3: op.conv3d}
_CONV_TRANSPOSES = {1: op.conv1d_transpose, 2: op.conv2d_transpose, 3: op.conv3d_transpose}


def auto_pads(
    ctx: NodeContext,
    spatial: Sequence,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> list[int]:
    """Explicit pads (begin..., end...) of a window op from ``pads`` or ``auto_pad``."""
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
    static_sizes(ctx, spatial, f"auto_pad={auto}")
    begin, end = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        out = math.ceil(size / s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return begin + end


def static_sizes(ctx: NodeContext, dims: Sequence, what: str) -> list[int]:
    """``dims`` as ints; the node fails, naming ``what`` needs them, when one is not static."""
    if not all(isinstance(d, int) for d in dims):
        ctx.fail(f"{what} needs static sizes, got {tuple(dims)}")
    return list(dims)


def window_attrs(ctx: NodeContext, x: Expr, kernel: Sequence[int]) -> dict:
    """``strides``, ``padding`` and ``dilation`` of a window op in rvm's form."""
    n = len(kernel)
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    pads = auto_pads(ctx, ctx.shape(x)[2:], kernel, strides, dilations)
    return {"strides": strides, "padding": pads, "dilation": dilations}


def _kernel(ctx: NodeContext, w: Expr) -> list[int]:
    """The static kernel shape: ``kernel_shape`` or the weight's trailing axes."""
    kernel = list(ctx.attr("kernel_shape", ctx.shape(w)[2:]))
    if not all(isinstance(k, int) for k in kernel):
        ctx.fail(f"needs a static kernel shape, got weight {tuple(ctx.shape(w))}")
    if len(kernel) not in CONVS:
        ctx.fail(f"rvm has 1-d, 2-d and 3-d convolutions, got a {len(kernel)}-d kernel")
    return kernel


def _add_bias(ctx: NodeContext, y: Expr, nspatial: int) -> Expr:
    bias = ctx.optional(2)
    if bias is None:
        return y
    return op.add(y, op.reshape(bias, (-1,) + (1,) * nspatial))


def convolve(ctx: NodeContext, x: Expr, w: Expr) -> Expr:
    """``x`` convolved with ``w`` as the node's Conv attributes say (kernel_shape, strides,
    pads or auto_pad, dilations, group), without bias: Conv, QLinearConv and ConvInteger."""
    kernel = _kernel(ctx, w)
    return CONVS[len(kernel)](x, w, groups=ctx.attr("group", 1), **window_attrs(ctx, x, kernel))


@converter("Conv", since=(1, 11, 22))
def _conv(ctx: NodeContext) -> Expr:
    x, w = ctx.input(0), ctx.input(1)
    return ctx.emit(_add_bias(ctx, convolve(ctx, x, w), len(ctx.shape(w)) - 2))


@converter("ConvTranspose", since=(1, 11, 22))
def _conv_transpose(ctx: NodeContext) -> Expr:
    x, w = ctx.input(0), ctx.input(1)
    kernel = _kernel(ctx, w)
    n = len(kernel)
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    extra = list(ctx.attr("output_padding", [0] * n))
    pads = _transpose_pads(ctx, ctx.shape(x)[2:], kernel, strides, dilations, extra)
    # A negative end pad asks for zeros past the full result: output padding.
    extra = [e + max(-p, 0) for e, p in zip(extra, pads[n:])]
    y = _CONV_TRANSPOSES[n](
        x,
        w,
        strides=strides,
        padding=[max(p, 0) for p in pads],
        output_padding=extra,
        dilation=dilations,
        groups=ctx.attr("group", 1),
    )
    return ctx.emit(_add_bias(ctx, y, n))


def _transpose_pads(
    ctx: NodeContext,
    spatial: Sequence,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    extra: Sequence[int],
) -> list[int]:
    """ConvTranspose's pads (begin..., end...) from its attributes; an end pad may be negative.

    With ``output_shape``, or SAME_* auto padding (an output of the input size times the
    stride), the total padding is what gives that size, split as version 11's schema says:
    the smaller half at the start for SAME_UPPER, at the end otherwise. Version 1's text swaps
    the halves, but ONNX Runtime runs one kernel for every version, and the node suite and
    real models follow it. A negative total (an output larger than the full result) is zeros
    at the end, as in ONNX Runtime and onnx.reference.
    """
    auto = ctx.attr("auto_pad", "NOTSET")
    shape = ctx.attr("output_shape", None)
    if shape is None and auto not in ("SAME_UPPER", "SAME_LOWER"):
        return auto_pads(ctx, spatial, kernel, strides, dilations)
    sizes = static_sizes(ctx, spatial, "output_shape" if shape is not None else f"auto_pad={auto}")
    if shape is None:
        shape = [size * s for size, s in zip(sizes, strides)]
    small_first = auto == "SAME_UPPER"
    begin, end = [], []
    for size, k, s, d, e, out in zip(sizes, kernel, strides, dilations, extra, shape):
        total = s * (size - 1) + e + (k - 1) * d + 1 - out
        small, big = max(total, 0) // 2, max(total, 0) - max(total, 0) // 2
        begin.append(small if small_first else big)
        end.append((big if small_first else small) + min(total, 0))
    return begin + end


@converter("Col2Im", since=18)
def _col2im(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    image = ctx.ints(1, "image_shape")
    block = ctx.ints(2, "block_shape")
    if image is None or block is None or len(image) != len(block):
        ctx.fail(f"image_shape {image} and block_shape {block} must have one value per axis")
    n = len(block)
    if n not in _CONV_TRANSPOSES:
        ctx.fail(f"rvm has 1-d, 2-d and 3-d transposed convolutions, got a {n}-d block")
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    pads = list(ctx.attr("pads", [0] * 2 * n))
    if len(ctx.shape(x)) != 3:
        ctx.fail(f"the input must be (N, C x block size, blocks), got {tuple(ctx.shape(x))}")
    rows = ctx.shape(x)[1]
    size = math.prod(block)
    if not isinstance(rows, int) or rows % size:
        ctx.fail(f"input {tuple(ctx.shape(x))}: axis 1 must be a multiple of {size} (the block)")
    grid = [
        (i + pads[a] + pads[a + n] - d * (b - 1) - 1) // s + 1
        for a, (i, b, s, d) in enumerate(zip(image, block, strides, dilations))
    ]
    channels = rows // size
    # Column row c * size + j holds block offset j of channel c: a one-hot weight per group.
    one_hot = np.eye(size, dtype=ctx.type(x).dtype).reshape(size, 1, *block)
    weight = Constant(np.tile(one_hot, (channels,) + (1,) * (n + 1)))
    full = [s * (g - 1) + d * (b - 1) + 1 for g, b, s, d in zip(grid, block, strides, dilations)]
    extra = [i - (f - pads[a] - pads[a + n]) for a, (i, f) in enumerate(zip(image, full))]
    y = _CONV_TRANSPOSES[n](
        op.reshape(x, (-1, rows, *grid)),
        weight,
        strides=strides,
        padding=pads,
        output_padding=extra,
        dilation=dilations,
        groups=channels,
    )
    return ctx.emit(y)
