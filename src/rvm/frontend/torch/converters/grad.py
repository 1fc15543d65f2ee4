"""Backward ATen ops that stay in a decomposed graph (Core ATen keeps them whole): the
gradients of average, adaptive average and max pooling, and of convolution.

Average pooling is linear and separable, so its gradient is one matrix product per spatial
axis with the transpose of that axis's averaging matrix; max pooling's gradient adds each
output's gradient at the input position its index names; convolution's input gradient is a
transposed convolution and its weight gradient a convolution of the input by the output
gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rvm import op
from rvm.frontend.torch.context import NodeContext
from rvm.frontend.torch.converters.nn import _averaging, _ints
from rvm.frontend.torch.registry import converter
from rvm.ir import Expr
from rvm.ir import const as ir_const


def _along(ctx: NodeContext, x: Expr, axis: int, matrix: np.ndarray) -> Expr:
    """``x`` with axis ``axis`` (size ``matrix.shape[0]``) mapped through ``matrix``."""
    rank = ctx.rank(x)
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    moved = x if axis == rank - 1 else ctx.emit(op.transpose(x, perm))
    y = ctx.emit(op.matmul(moved, ir_const(matrix, ctx.dtype_of(x) or "float32")))
    return y if axis == rank - 1 else ctx.emit(op.transpose(y, perm))


def _spatial(ctx: NodeContext, grad: Expr, x: Expr, n: int) -> list[tuple[int, int, int]]:
    """(axis, output size, input size) of the last ``n`` axes, which must be static."""
    outs, ins = ctx.shape(grad)[-n:], ctx.shape(x)[-n:]
    if not all(isinstance(d, int) for d in (*outs, *ins)):
        ctx.fail(f"needs static spatial sizes, got {outs} and {ins}")
    rank = ctx.rank(x)
    return [(rank - n + k, int(o), int(d)) for k, (o, d) in enumerate(zip(outs, ins))]


@converter("aten._adaptive_avg_pool2d_backward.default")
def _adaptive_avg_pool2d_backward(ctx: NodeContext, grad: Expr, x: Expr) -> Expr:
    for axis, o, d in _spatial(ctx, grad, x, 2):
        grad = _along(ctx, grad, axis, _averaging(d, o))
    return grad


def _pool_matrix(
    o: int, d: int, k: int, s: int, p: int, include_pad: bool, divided: bool
) -> np.ndarray:
    """The (o, d) matrix of one axis of average pooling: row ``i`` weighs the inputs of window
    ``i`` by one over PyTorch's divisor along this axis (the window clipped to the padded
    input, or to the input without ``include_pad``), or by one when not ``divided``."""
    out = np.zeros((o, d))
    for i in range(o):
        start = i * s - p
        end = min(start + k, d + p)
        size = end - start
        start, end = max(start, 0), min(end, d)
        if end > start:
            out[i, start:end] = 1.0 / (size if include_pad else end - start) if divided else 1.0
    return out


@converter("aten.avg_pool2d_backward.default")
def _avg_pool2d_backward(
    ctx: NodeContext,
    grad: Expr,
    x: Expr,
    kernel: Any,
    stride: Any,
    padding: Any,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: Any = None,
) -> Expr:
    k = _ints(kernel, 2)
    s = _ints(stride, 2) if stride not in (None, []) else k
    p = _ints(padding, 2)
    divided = divisor_override is None
    for (axis, o, d), kk, ss, pp in zip(_spatial(ctx, grad, x, 2), k, s, p):
        grad = _along(ctx, grad, axis, _pool_matrix(o, d, kk, ss, pp, count_include_pad, divided))
    if not divided:
        grad = ctx.emit(op.divide(grad, ir_const(float(divisor_override), ctx.dtype_of(grad))))
    return grad


@converter("aten.max_pool2d_with_indices_backward.default")
def _max_pool2d_backward(ctx: NodeContext, grad: Expr, x: Expr, *rest: Any) -> Expr:
    """Each output's gradient added at its index (flat over the input's H*W plane)."""
    indices = rest[-1]
    shape = list(ctx.shape(x))
    lead = shape[:-2]
    flat_grad = ctx.emit(op.reshape(grad, [*lead, -1]))
    flat_index = ctx.emit(op.reshape(indices, [*lead, -1]))
    if None in lead:
        ctx.fail(f"needs known leading sizes, got {lead}")
    zeros = ctx.emit(op.zeros([*lead, _plane(ctx, shape)], ctx.dtype_of(grad) or "float32"))
    axis = len(lead)
    summed = op.scatter_elements(zeros, flat_index, flat_grad, axis=axis, reduction="add")
    return ctx.emit(op.reshape(ctx.emit(summed), shape))


def _plane(ctx: NodeContext, shape: list) -> int:
    h, w = shape[-2:]
    if not (isinstance(h, int) and isinstance(w, int)):
        ctx.fail(f"needs static H and W, got {h} and {w}")
    return h * w


@converter("aten.convolution_backward.default")
def _convolution_backward(
    ctx: NodeContext,
    grad: Expr,
    x: Expr,
    w: Expr,
    bias_sizes: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int,
    output_mask: list,
) -> list[Any]:
    n = ctx.rank(w) - 2
    if n != 2 or transposed:
        ctx.fail("computes the gradients of a 2-d, not transposed, convolution only")
    st, pad, dil = _ints(stride, n), _ints(padding, n), _ints(dilation, n)
    spatial = _spatial(ctx, grad, x, n)
    ks = [int(v) for v in ctx.shape(w)[2:]]
    outs: list[Any] = [None, None, None]
    if output_mask[0]:
        extra = [
            d - ((o - 1) * s - 2 * p + dd * (k - 1) + 1)
            for (_, o, d), s, p, dd, k in zip(spatial, st, pad, dil, ks)
        ]
        outs[0] = ctx.emit(op.conv2d_transpose(grad, w, st, pad, extra, dil, int(groups)))
    if output_mask[1]:
        outs[1] = _weight_grad(ctx, grad, x, st, pad, dil, ks, int(groups))
    if output_mask[2]:
        outs[2] = ctx.emit(op.sum(grad, axis=[0, *range(2, 2 + n)]))
    return outs


def _weight_grad(
    ctx: NodeContext, grad: Expr, x: Expr, st: list, pad: list, dil: list, ks: list, groups: int
) -> Expr:
    """dW[o, c] = sum over batch and positions of grad[:, o] times the input window of c: a
    convolution of the input (channels as batch) by the gradient (batch as channels), with
    stride and dilation swapped, cut to the kernel's size; one per group."""
    cin, cout = ctx.shape(x)[1], ctx.shape(grad)[1]
    if not (isinstance(cin, int) and isinstance(cout, int)):
        ctx.fail("needs static channel counts")
    xs = ctx.emit(op.transpose(x, [1, 0, 2, 3]))  # (C, N, H, W)
    gs = ctx.emit(op.transpose(grad, [1, 0, 2, 3]))  # (O, N, Ho, Wo)
    ci, co = cin // groups, cout // groups
    parts = []
    for g in range(groups):
        xg = (
            xs
            if groups == 1
            else ctx.emit(op.strided_slice(xs, [g * ci], [(g + 1) * ci], axes=[0]))
        )
        gg = (
            gs
            if groups == 1
            else ctx.emit(op.strided_slice(gs, [g * co], [(g + 1) * co], axes=[0]))
        )
        y = ctx.emit(op.conv2d(xg, gg, dil, pad, st, 1))  # (C/g, O/g, >= KH, >= KW)
        y = ctx.emit(op.strided_slice(y, [0, 0], ks, axes=[2, 3]))
        parts.append(ctx.emit(op.transpose(y, [1, 0, 2, 3])))
    return parts[0] if groups == 1 else ctx.emit(op.concat(parts, axis=0))
