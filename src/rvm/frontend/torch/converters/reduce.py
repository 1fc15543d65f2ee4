"""Reductions, scans and softmax: sum, mean, amax, max.dim, argmax, prod, var, any, cumsum."""

from __future__ import annotations

from typing import Any

from rvm import op
from rvm.frontend.torch.context import NodeContext
from rvm.frontend.torch.registry import converter
from rvm.ir import Expr
from rvm.ir.types import FLOAT_DTYPES


def _axes(ctx: NodeContext, x: Expr, dim: Any) -> list[int] | None:
    """Normalized axes; None for all of them (torch's ``dim=None`` or ``[]``)."""
    rank = ctx.rank(x)
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % rank for d in dims}) if rank else None


def _reduce(ctx: NodeContext, fn: Any, x: Expr, dim: Any, keepdim: bool) -> Expr:
    if ctx.rank(x) == 0:
        return x
    axes = _axes(ctx, x, dim)
    return ctx.emit(fn(x, axis=axes, keepdims=bool(keepdim)))


@converter("aten.sum.dim_IntList", "aten.sum.default")
def _sum(ctx: NodeContext, x: Expr, dim: Any = None, keepdim: bool = False, **_: Any) -> Expr:
    return _reduce(ctx, op.sum, ctx.cast(x, ctx.out_dtype()), dim, keepdim)


@converter("aten.mean.dim", "aten.mean.default")
def _mean(ctx: NodeContext, x: Expr, dim: Any = None, keepdim: bool = False, **_: Any) -> Expr:
    x = ctx.cast(x, ctx.out_dtype())
    if ctx.rank(x) == 4 and _axes(ctx, x, dim) == [2, 3]:
        # the mean over H and W of NCHW (a CNN's head): the global pool, as from_onnx gets it
        pooled = op.global_avg_pool2d(x)
        return ctx.emit(pooled if keepdim else op.squeeze(pooled, axis=[2, 3]))
    return _reduce(ctx, op.mean, x, dim, keepdim)


@converter("aten.prod.default", "aten.prod.dim_int")
def _prod(ctx: NodeContext, x: Expr, dim: Any = None, keepdim: bool = False, **_: Any) -> Expr:
    return _reduce(ctx, op.prod, ctx.cast(x, ctx.out_dtype()), dim, keepdim)


@converter("aten.amax.default", "aten.max.default")
def _amax(ctx: NodeContext, x: Expr, dim: Any = None, keepdim: bool = False) -> Expr:
    return _reduce(ctx, op.max, x, dim, keepdim)


@converter("aten.amin.default", "aten.min.default")
def _amin(ctx: NodeContext, x: Expr, dim: Any = None, keepdim: bool = False) -> Expr:
    return _reduce(ctx, op.min, x, dim, keepdim)


@converter("aten.any.default", "aten.any.dim", "aten.any.dims")
def _any(ctx: NodeContext, x: Expr, dim: Any = None, keepdim: bool = False) -> Expr:
    nz = ctx.emit(op.cast(op.not_equal(x, ctx.scalar(0, ctx.dtype_of(x))), "int32"))
    return ctx.emit(op.greater(_reduce(ctx, op.max, nz, dim, keepdim), 0))


@converter("aten.all.default", "aten.all.dim", "aten.all.dims")
def _all(ctx: NodeContext, x: Expr, dim: Any = None, keepdim: bool = False) -> Expr:
    nz = ctx.emit(op.cast(op.not_equal(x, ctx.scalar(0, ctx.dtype_of(x))), "int32"))
    return ctx.emit(op.greater(_reduce(ctx, op.min, nz, dim, keepdim), 0))


def _arg(ctx: NodeContext, fn: Any, x: Expr, dim: Any, keepdim: bool) -> Expr:
    if ctx.rank(x) == 0:
        return ctx.scalar(0, "int64")
    if dim is None:
        flat = ctx.emit(op.reshape(x, [-1]))
        out = ctx.emit(fn(flat, axis=0, keepdims=False))
        return ctx.emit(op.reshape(out, [1] * ctx.rank(x))) if keepdim else out
    return ctx.emit(fn(x, axis=dim % ctx.rank(x), keepdims=bool(keepdim)))


@converter("aten.argmax.default")
def _argmax(ctx: NodeContext, x: Expr, dim: Any = None, keepdim: bool = False) -> Expr:
    return _arg(ctx, op.argmax, x, dim, keepdim)


@converter("aten.argmin.default")
def _argmin(ctx: NodeContext, x: Expr, dim: Any = None, keepdim: bool = False) -> Expr:
    return _arg(ctx, op.argmin, x, dim, keepdim)


@converter("aten.max.dim")
def _max_dim(ctx: NodeContext, x: Expr, dim: int, keepdim: bool = False) -> list[Expr]:
    return [_reduce(ctx, op.max, x, dim, keepdim), _arg(ctx, op.argmax, x, dim, keepdim)]


@converter("aten.min.dim")
def _min_dim(ctx: NodeContext, x: Expr, dim: int, keepdim: bool = False) -> list[Expr]:
    return [_reduce(ctx, op.min, x, dim, keepdim), _arg(ctx, op.argmin, x, dim, keepdim)]


@converter("aten.var.correction", "aten.var.dim")
def _var(
    ctx: NodeContext,
    x: Expr,
    dim: Any = None,
    *rest: Any,
    correction: Any = None,
    keepdim: bool = False,
) -> Expr:
    if "var.dim" in str(ctx.node.target):  # var(x, dim, unbiased=True, keepdim=False)
        unbiased = rest[0] if rest else True
        keepdim = rest[1] if len(rest) > 1 else keepdim
        correction = 1 if unbiased else 0
    elif rest:
        correction = rest[0]
    correction = 1 if correction is None else correction
    x = ctx.cast(x, ctx.out_dtype(0) if isinstance(ctx.val, (tuple, list)) else ctx.out_dtype())
    if ctx.rank(x) == 0:
        return ctx.emit(op.divide(op.multiply(x, 0.0), float(1 - correction)))
    axes = _axes(ctx, x, dim)
    shape = ctx.shape(x)
    n = 1
    for a in axes if axes is not None else range(len(shape)):
        if not isinstance(shape[a], int):
            ctx.fail("needs static sizes along the reduced axes")
        n *= shape[a]
    biased = ctx.emit(op.variance(x, axis=axes, keepdims=bool(keepdim)))
    if not correction:
        return biased
    denom = max(n - correction, 0)
    scale = float("inf") if denom == 0 else n / denom
    return ctx.emit(op.multiply(biased, scale))


@converter("aten.var_mean.correction")
def _var_mean(
    ctx: NodeContext, x: Expr, dim: Any = None, *, correction: Any = None, keepdim: bool = False
) -> list[Expr]:
    var = _var(ctx, x, dim, correction=correction, keepdim=keepdim)
    mean = _reduce(ctx, op.mean, ctx.cast(x, ctx.out_dtype(1)), dim, keepdim)
    return [var, mean]


def _scan(ctx: NodeContext, fn: Any, x: Expr, dim: int) -> Expr:
    x = ctx.cast(x, ctx.out_dtype())
    if ctx.rank(x) == 0:
        return x
    return ctx.emit(fn(x, axis=dim % ctx.rank(x)))


@converter("aten.cumprod.default")
def _cumprod(ctx: NodeContext, x: Expr, dim: int, **_: Any) -> Expr:
    return _scan(ctx, op.cumprod, x, dim)


@converter("aten.cumsum.default")
def _cumsum(ctx: NodeContext, x: Expr, dim: int, **_: Any) -> Expr:
    return _scan(ctx, op.cumsum, x, dim)


@converter("aten._softmax.default", "aten.softmax.int")
def _softmax(ctx: NodeContext, x: Expr, dim: int, *_: Any, **__: Any) -> Expr:
    x = ctx.cast(x, ctx.out_dtype())
    if ctx.rank(x) == 0:
        return ctx.emit(op.divide(x, x))
    return ctx.emit(op.softmax(x, axis=dim % ctx.rank(x)))


@converter("aten._log_softmax.default", "aten.log_softmax.int")
def _log_softmax(ctx: NodeContext, x: Expr, dim: int, *_: Any, **__: Any) -> Expr:
    x = ctx.cast(x, ctx.out_dtype())
    if ctx.rank(x) == 0:
        return ctx.emit(op.subtract(x, x))
    if ctx.out_dtype() not in FLOAT_DTYPES:
        ctx.fail("log_softmax needs a float tensor")
    return ctx.emit(op.log_softmax(x, axis=dim % ctx.rank(x)))
