"""Neural-network ATen ops: linear and matmul, convolution, normalization, pooling,
attention, resampling, dropout.

``linear``, ``conv1d``/``conv2d``, ``layer_norm`` and ``scaled_dot_product_attention`` arrive
whole (the importer keeps them through decomposition): each becomes the rvm op that fuses.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rvm import op
from rvm.frontend.torch.context import NodeContext
from rvm.frontend.torch.registry import converter
from rvm.ir import Constant, Expr
from rvm.ir import const as ir_const


@converter("aten.linear.default")
def _linear(ctx: NodeContext, x: Expr, weight: Expr, bias: Expr | None = None) -> Expr:
    # the forms from_onnx gets from torch.onnx's export: a matrix input is a Gemm (dense with
    # the (out, in) weight), a batch of them a MatMul with the weight stored (in, out)
    constant = isinstance(weight, Constant) and weight.data.ndim == 2
    if constant and ctx.rank(x) != 2:
        y = ctx.emit(op.matmul(x, ir_const(np.ascontiguousarray(weight.data.T))))
        return y if bias is None else ctx.emit(op.add(y, bias))
    y = ctx.emit(op.dense(x, weight))
    return y if bias is None else ctx.emit(op.add(y, bias))


@converter("aten.addmm.default")
def _addmm(
    ctx: NodeContext, bias: Expr, a: Expr, b: Expr, *, beta: float = 1, alpha: float = 1
) -> Expr:
    y = ctx.emit(op.matmul(a, b))
    if alpha != 1:
        y = ctx.emit(op.multiply(y, float(alpha)))
    if beta == 0:
        return y
    return ctx.emit(op.add(y, bias if beta == 1 else op.multiply(bias, float(beta))))


@converter("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def _mm(ctx: NodeContext, a: Expr, b: Expr) -> Expr:
    return ctx.emit(op.matmul(a, b))


_CONV = {1: op.conv1d, 2: op.conv2d, 3: op.conv3d}
_CONV_T = {1: op.conv1d_transpose, 2: op.conv2d_transpose, 3: op.conv3d_transpose}


def _ints(value: Any, n: int) -> list[int]:
    values = [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
    return values * n if len(values) == 1 else values


@converter("aten.convolution.default")
def _convolution(
    ctx: NodeContext,
    x: Expr,
    w: Expr,
    bias: Expr | None,
    stride: list,
    padding: Any,
    dilation: list,
    transposed: bool,
    output_padding: list,
    groups: int,
) -> Expr:
    n = ctx.rank(w) - 2
    if n not in _CONV:
        ctx.fail(f"needs a 3-d to 5-d weight, got rank {n + 2}")
    st, dil = _ints(stride, n), _ints(dilation, n)
    pad = _same_padding(ctx, w, n, dil) if padding == "same" else _ints(padding, n)
    if len(pad) == n:
        pad = pad * 2
    batched = ctx.rank(x) == n + 2
    if not batched:
        x = ctx.emit(op.expand_dims(x, 0))
    if transposed:
        y = _CONV_T[n](x, w, st, pad, _ints(output_padding, n), dil, int(groups))
    else:
        y = _CONV[n](x, w, st, pad, dil, int(groups))
    y = ctx.emit(y)
    if bias is not None:
        y = ctx.emit(op.add(y, op.reshape(bias, [-1] + [1] * n)))
    return y if batched else ctx.emit(op.squeeze(y, [0]))


def _same_padding(ctx: NodeContext, w: Expr, n: int, dilation: list[int]) -> list[int]:
    """torch's ``padding="same"``: the extra pad of an even total goes after."""
    kernel = ctx.shape(w)[2:]
    totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
    return [t // 2 for t in totals] + [t - t // 2 for t in totals]


@converter(
    "aten.conv1d.default", "aten.conv2d.default", "aten.conv1d.padding", "aten.conv2d.padding"
)
def _conv(
    ctx: NodeContext,
    x: Expr,
    w: Expr,
    bias: Expr | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Expr:
    n = ctx.rank(w) - 2
    if padding == "valid":
        padding = 0
    return _convolution(ctx, x, w, bias, stride, padding, dilation, False, [0] * n, groups)


def _ones_like_param(ctx: NodeContext, x: Expr, shape: list, value: float) -> Expr:
    return ctx.emit(op.full(shape, value, ctx.dtype_of(x) or "float32"))


@converter("aten.layer_norm.default")
def _layer_norm(
    ctx: NodeContext,
    x: Expr,
    normalized_shape: list,
    weight: Expr | None = None,
    bias: Expr | None = None,
    eps: float = 1e-5,
    cudnn_enable: bool = True,
) -> Expr:
    shape = list(normalized_shape)
    k = len(shape)
    gamma = weight if weight is not None else _ones_like_param(ctx, x, shape, 1.0)
    beta = bias if bias is not None else _ones_like_param(ctx, x, shape, 0.0)
    axes = list(range(-k, 0))
    return ctx.emit(op.layer_norm(x, gamma, beta, axes=axes, epsilon=float(eps)))


@converter("aten.native_layer_norm.default")
def _native_layer_norm(
    ctx: NodeContext,
    x: Expr,
    normalized_shape: list,
    weight: Expr | None,
    bias: Expr | None,
    eps: float,
) -> list[Expr]:
    out = _layer_norm(ctx, x, normalized_shape, weight, bias, eps)
    axes = list(range(-len(normalized_shape), 0))
    mean = ctx.emit(op.mean(x, axis=axes, keepdims=True))
    rstd = ctx.emit(op.rsqrt(op.add(op.variance(x, axis=axes, keepdims=True), float(eps))))
    return [out, mean, rstd]


def _channel(param: Expr, rank: int) -> Any:
    return op.reshape(param, [-1] + [1] * (rank - 2))


@converter("aten._native_batch_norm_legit_no_training.default")
def _batch_norm_eval(
    ctx: NodeContext,
    x: Expr,
    weight: Expr | None,
    bias: Expr | None,
    mean: Expr,
    var: Expr,
    momentum: float,
    eps: float,
) -> list[Any]:
    c = [ctx.shape(mean)[0]]
    gamma = weight if weight is not None else _ones_like_param(ctx, x, c, 1.0)
    beta = bias if bias is not None else _ones_like_param(ctx, x, c, 0.0)
    if ctx.rank(x) < 2:
        ctx.fail("batch norm needs a channel axis")
    out = ctx.emit(op.batch_norm(x, gamma, beta, mean, var, axis=1, epsilon=float(eps)))
    # torch returns empty saved mean and rstd in eval: the graph rarely reads them
    empty = [ir_const(np.zeros((0,), ctx.out_dtype(k))) for k in (1, 2)]
    return [out, *empty]


@converter("aten._native_batch_norm_legit.no_stats", "aten._native_batch_norm_legit.default")
def _batch_norm_batch_stats(ctx: NodeContext, x: Expr, weight: Any, bias: Any, *rest: Any) -> list:
    eps = float(rest[-1])
    axes = [0, *range(2, ctx.rank(x))]
    mean = ctx.emit(op.mean(x, axis=axes, keepdims=True))
    var = ctx.emit(op.variance(x, axis=axes, keepdims=True))
    rstd = ctx.emit(op.rsqrt(op.add(var, eps)))
    y = ctx.emit(op.multiply(op.subtract(x, mean), rstd))
    if weight is not None:
        y = ctx.emit(op.multiply(y, _channel(weight, ctx.rank(x))))
    if bias is not None:
        y = ctx.emit(op.add(y, _channel(bias, ctx.rank(x))))
    flat = [ctx.emit(op.reshape(mean, [-1])), ctx.emit(op.reshape(rstd, [-1]))]
    return [y, *flat]


@converter("aten.native_group_norm.default")
def _group_norm(
    ctx: NodeContext,
    x: Expr,
    weight: Expr | None,
    bias: Expr | None,
    n: Any,
    c: Any,
    hw: Any,
    group: int,
    eps: float,
) -> list[Expr]:
    shape = ctx.shape(x)
    grouped = ctx.emit(op.reshape(x, [shape[0], int(group), -1]))
    mean = ctx.emit(op.mean(grouped, axis=[2], keepdims=True))
    rstd = ctx.emit(op.rsqrt(op.add(op.variance(grouped, axis=[2], keepdims=True), float(eps))))
    y = ctx.emit(op.reshape(op.multiply(op.subtract(grouped, mean), rstd), list(shape)))
    if weight is not None:
        y = ctx.emit(op.multiply(y, _channel(weight, len(shape))))
    if bias is not None:
        y = ctx.emit(op.add(y, _channel(bias, len(shape))))
    stats = [
        ctx.emit(op.reshape(mean, [shape[0], int(group)])),
        ctx.emit(op.reshape(rstd, [shape[0], int(group)])),
    ]
    return [y, *stats]


def _pool_args(kernel: Any, stride: Any, padding: Any, n: int) -> tuple[list, list, list]:
    k = _ints(kernel, n)
    s = _ints(stride, n) if stride not in (None, []) else k
    return k, s, _ints(padding, n)


@converter("aten.max_pool2d_with_indices.default", "aten.max_pool3d_with_indices.default")
def _max_pool(
    ctx: NodeContext,
    x: Expr,
    kernel: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> list[Expr]:
    n = 3 if "3d" in str(ctx.node.target) else 2
    k, s, p = _pool_args(kernel, stride, padding, n)
    d = _ints(dilation, n)
    pool = op.max_pool3d if n == 3 else op.max_pool2d
    batched = ctx.rank(x) == n + 2
    if not batched:
        x = ctx.emit(op.expand_dims(x, 0))
    out = ctx.emit(pool(x, k, s, p, d, bool(ceil_mode)))
    if not batched:
        out = ctx.emit(op.squeeze(out, [0]))
    if not any(u.args[1:2] == (1,) for u in ctx.node.users):  # the indices unused (ResNet)
        return [out, None]
    idx = ctx.emit(op.max_pool_indices(x, k, s, p, d, bool(ceil_mode)))
    if not batched:
        idx = ctx.emit(op.squeeze(idx, [0]))
    return [out, idx]


@converter("aten.avg_pool2d.default", "aten.avg_pool3d.default", "aten.avg_pool1d.default")
def _avg_pool(
    ctx: NodeContext,
    x: Expr,
    kernel: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Any = None,
) -> Expr:
    name = str(ctx.node.target)
    n = 3 if "3d" in name else 1 if "1d" in name else 2
    k, s, p = _pool_args(kernel, stride, padding, n)
    pool = {1: op.avg_pool1d, 2: op.avg_pool2d, 3: op.avg_pool3d}[n]
    batched = ctx.rank(x) == n + 2
    if not batched:
        x = ctx.emit(op.expand_dims(x, 0))
    if divisor_override is not None:
        out = _window_sums(ctx, x, pool, k, s, p)
        out = ctx.emit(op.divide(out, ir_const(float(divisor_override), ctx.dtype_of(x))))
    else:
        out = ctx.emit(pool(x, k, s, p, 1, bool(ceil_mode), bool(count_include_pad)))
    return out if batched else ctx.emit(op.squeeze(out, [0]))


def _window_sums(ctx: NodeContext, x: Expr, pool: Any, k: list, s: list, p: list) -> Expr:
    """The sum of each pooling window: ``x`` zero-padded so that every window of torch's
    output is whole, then the mean of whole windows times their size."""
    spatial = ctx.shape(x)[2:]
    out = ctx.out_shape()[-len(k) :]
    if not all(isinstance(d, int) for d in (*spatial, *out)):
        ctx.fail(f"divisor_override needs static spatial sizes, got {spatial}")
    extra = [
        max(0, (o - 1) * st + kk - (d + 2 * pp)) for o, st, kk, d, pp in zip(out, s, k, spatial, p)
    ]
    widths = [(0, 0), (0, 0)] + [(pp, pp + e) for pp, e in zip(p, extra)]
    padded = ctx.emit(op.pad(x, widths))
    mean = ctx.emit(pool(padded, k, s, [0] * len(k), 1, False, True))
    return ctx.emit(op.multiply(mean, float(math.prod(k))))


@converter(
    "aten.adaptive_avg_pool1d.default",
    "aten._adaptive_avg_pool2d.default",
    "aten._adaptive_avg_pool3d.default",
)
def _adaptive_avg_pool(ctx: NodeContext, x: Expr, output_size: list) -> Expr:
    """Average pooling is separable: one averaging matrix per spatial axis, as a matmul.
    Output cell ``j`` of an axis of size ``d`` averages ``floor(j*d/o)`` to ``ceil((j+1)*d/o)``
    (PyTorch's bins; they overlap when ``o`` does not divide ``d``)."""
    n = len(output_size)
    shape = ctx.shape(x)
    spatial = shape[-n:]
    axes = list(range(len(shape) - n, len(shape)))
    if all(int(o) == 1 for o in output_size):
        return ctx.emit(op.mean(x, axis=axes, keepdims=True))
    if not all(isinstance(d, int) for d in spatial):
        ctx.fail(f"needs static spatial sizes, got {spatial}")
    dtype = ctx.dtype_of(x) or "float32"
    rank = len(shape)
    for axis, d, o in zip(axes, spatial, output_size):
        if int(o) == d:
            continue
        weights = ir_const(_averaging(d, int(o)).T, dtype)  # (d, o)
        last = list(range(rank))
        last[axis], last[-1] = last[-1], last[axis]
        moved = x if axis == rank - 1 else ctx.emit(op.transpose(x, last))
        y = ctx.emit(op.matmul(moved, weights))
        x = y if axis == rank - 1 else ctx.emit(op.transpose(y, last))
    return x


def _averaging(d: int, o: int) -> np.ndarray:
    """The (o, d) matrix averaging PyTorch's adaptive pooling bins."""
    out = np.zeros((o, d))
    for j in range(o):
        start, end = (j * d) // o, -((-(j + 1) * d) // o)
        out[j, start:end] = 1.0 / (end - start)
    return out


@converter("aten.scaled_dot_product_attention.default")
def _sdpa(
    ctx: NodeContext,
    q: Expr,
    k: Expr,
    v: Expr,
    attn_mask: Expr | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Expr:
    qs, ks = ctx.shape(q), ctx.shape(k)
    rank = len(qs)
    if enable_gqa and qs[-3] != ks[-3]:
        if not (isinstance(qs[-3], int) and isinstance(ks[-3], int)):
            ctx.fail("grouped-query attention needs static head counts")
        rep = qs[-3] // ks[-3]
        k = ctx.emit(
            op.take(k, op.const([h // rep for h in range(qs[-3])], "int64"), axis=rank - 3)
        )
        v = ctx.emit(
            op.take(v, op.const([h // rep for h in range(qs[-3])], "int64"), axis=rank - 3)
        )
    head = qs[-1]
    if scale is None:
        if not isinstance(head, int):
            ctx.fail("needs a static head size or an explicit scale")
        scale = 1.0 / math.sqrt(head)
    perm = [*range(rank - 2), rank - 1, rank - 2]
    scores = ctx.emit(op.multiply(op.matmul(q, op.transpose(k, perm)), float(scale)))
    if is_causal:
        causal = op.trilu(op.ones([qs[-2], ks[-2]], "bool"), k=0, upper=False)
        scores = ctx.emit(op.where(ctx.emit(causal), scores, float("-inf")))
    if attn_mask is not None:
        if ctx.dtype_of(attn_mask) == "bool":
            scores = ctx.emit(op.where(attn_mask, scores, float("-inf")))
        else:
            scores = ctx.emit(op.add(scores, ctx.cast(attn_mask, ctx.dtype_of(scores))))
    return ctx.emit(op.matmul(op.softmax(scores, axis=-1), v))


@converter("aten.native_dropout.default")
def _dropout(ctx: NodeContext, x: Expr, p: float, train: bool | None) -> list[Any]:
    if train and p > 0:
        ctx.fail("dropout in training mode is random; export the model in eval mode")
    return [x, ctx.emit(op.full(list(ctx.shape(x)), True, "bool"))]


@converter("aten.upsample_nearest2d.vec", "aten.upsample_bilinear2d.vec")
def _upsample(ctx: NodeContext, x: Expr, output_size: Any, *rest: Any) -> Expr:
    bilinear = "bilinear" in str(ctx.node.target)
    align = bool(rest[0]) if bilinear else False
    scales = rest[-1] if rest else None
    out = list(ctx.out_shape())
    if None in out:
        ctx.fail("needs a static output size")
    if scales is not None and not align:
        factors = [1.0, 1.0, *(float(s) for s in scales)]
    else:
        factors = [1.0, 1.0] + [o / i for o, i in zip(out[2:], ctx.shape(x)[2:])]
    if bilinear:
        mode = "align_corners" if align else "pytorch_half_pixel"
        return ctx.emit(
            op.resize(x, out, factors, mode="linear", coordinate_transformation_mode=mode)
        )
    return ctx.emit(
        op.resize(
            x,
            out,
            factors,
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )
    )


def _p_norm(ctx: NodeContext, diff: Expr, p: float, axis: int) -> Expr:
    """The ``p``-norm of ``diff`` along ``axis`` (p = 0 counts nonzeros, inf takes the max)."""
    a = ctx.emit(op.abs(diff))
    if p == 0:
        return ctx.emit(op.sum(op.cast(op.not_equal(a, 0.0), ctx.dtype_of(diff)), axis=axis))
    if math.isinf(p):
        return ctx.emit(op.max(a, axis=axis))
    if p == 1:
        return ctx.emit(op.sum(a, axis=axis))
    if p == 2:
        return ctx.emit(op.sqrt(op.sum(op.multiply(a, a), axis=axis)))
    return ctx.emit(op.power(op.sum(op.power(a, float(p)), axis=axis), 1.0 / float(p)))


@converter("aten._cdist_forward.default")
def _cdist(ctx: NodeContext, x1: Expr, x2: Expr, p: float, compute_mode: Any = None) -> Expr:
    diff = ctx.emit(op.subtract(op.expand_dims(x1, -2), op.expand_dims(x2, -3)))
    return _p_norm(ctx, diff, float(p), -1)


@converter("aten._pdist_forward.default")
def _pdist(ctx: NodeContext, x: Expr, p: float = 2.0) -> Expr:
    n = ctx.shape(x)[0]
    if not isinstance(n, int):
        ctx.fail("needs a static row count")
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    if not pairs:
        return ctx.emit(op.zeros([0], ctx.dtype_of(x) or "float32"))
    left = ctx.emit(op.take(x, op.const([i for i, _ in pairs], "int64"), axis=0))
    right = ctx.emit(op.take(x, op.const([j for _, j in pairs], "int64"), axis=0))
    return _p_norm(ctx, ctx.emit(op.subtract(left, right)), float(p), -1)
