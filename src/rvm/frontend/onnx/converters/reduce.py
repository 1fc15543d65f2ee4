"""Reduction ONNX ops: ReduceSum/Mean/Max/Min/Prod/SumSquare/L1/L2/LogSum/LogSumExp, ArgMax
and ArgMin.

Axes come from an attribute before the version that made them an input (ReduceSum 13, the
others 18); axes known only at run time make an ``op.dynamic_reduce``. ``keepdims`` defaults
to 1; with ``noop_with_empty_axes`` and no axes the input passes through. ReduceLogSumExp
subtracts the largest element before ``exp`` (where it is finite), so large inputs do not
overflow.
"""

from __future__ import annotations

import numpy as np

from rvm import op
from rvm.dtypes import dtype_kind
from rvm.frontend.onnx.context import NodeContext
from rvm.frontend.onnx.registry import converter
from rvm.ir import Expr, const


def _reduction(fn, axes_input_since: int, before=None, after=None):
    def convert(ctx: NodeContext) -> Expr:
        x = ctx.input(0)
        if ctx.version >= axes_input_since and _run_time_axes(ctx):
            # axes read at run time: the rank is known from their count, the dims are not
            noop = _flag(ctx, "noop_with_empty_axes", 0)
            keepdims = _flag(ctx, "keepdims", 1)
            axes = ctx.emit(op.cast(ctx.input(1), "int64"))
            y = op.dynamic_reduce(
                x if before is None else before(x), axes, fn.__name__, keepdims, noop
            )
            return ctx.emit(y if after is None else after(y))
        axes = _axes(ctx, axes_input_since)
        if axes == ():
            return x
        keepdims = _flag(ctx, "keepdims", 1)
        y = fn(x if before is None else before(x), axis=axes, keepdims=keepdims)
        return ctx.emit(y if after is None else after(y))

    return convert


def _run_time_axes(ctx: NodeContext) -> bool:
    """Whether the axes input is given and known only at run time."""
    return ctx.optional(1) is not None and ctx.const(1) is None


def _flag(ctx: NodeContext, name: str, default: int) -> bool:
    """A 0/1 attribute; any other value is refused (ONNX Runtime reads only 1 as true, ONNX's
    reference any nonzero: the meaning is not defined)."""
    value = ctx.attr(name, default)
    if value not in (0, 1):
        ctx.fail(f"attribute {name} must be 0 or 1, got {value}")
    return bool(value)


def _axes(ctx: NodeContext, axes_input_since: int) -> list[int] | tuple | None:
    """The axes to reduce (None: all of them), or () when the input passes through."""
    if ctx.version >= axes_input_since:
        axes = ctx.ints(1, "axes")
    else:
        axes = ctx.attr("axes", None)
    if not axes:
        return () if _flag(ctx, "noop_with_empty_axes", 0) else None
    return list(axes)


def _log_sum_exp(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    dtype = ctx.type(x).dtype
    if dtype is None or dtype_kind(dtype) != "f":
        ctx.fail(f"rvm computes it on floats, got {dtype}")
    axes = _axes(ctx, 18)
    if axes == ():
        return x
    keepdims = _flag(ctx, "keepdims", 1)

    def shift(keep: bool) -> Expr:  # the largest element where finite, else 0
        m = op.max(x, axis=axes, keepdims=keep)
        finite = op.less(op.abs(m), const(np.inf, dtype))
        return op.where(finite, m, const(0.0, dtype))

    total = op.sum(op.exp(op.subtract(x, shift(True))), axis=axes, keepdims=keepdims)
    return ctx.emit(op.add(op.log(total), shift(keepdims)))


converter("ReduceLogSumExp", since=(1, 11, 13, 18))(_log_sum_exp)


def _square(x: Expr) -> Expr:
    return op.multiply(x, x)


converter("ReduceSum", since=(1, 11, 13))(_reduction(op.sum, 13))
converter("ReduceMean", since=(1, 11, 13, 18))(_reduction(op.mean, 18))
converter("ReduceMax", since=(1, 11, 12, 13, 18, 20))(_reduction(op.max, 18))
converter("ReduceMin", since=(1, 11, 12, 13, 18, 20))(_reduction(op.min, 18))
converter("ReduceProd", since=(1, 11, 13, 18))(_reduction(op.prod, 18))
converter("ReduceSumSquare", since=(1, 11, 13, 18))(_reduction(op.sum, 18, before=_square))
converter("ReduceL1", since=(1, 11, 13, 18))(_reduction(op.sum, 18, before=op.abs))
converter("ReduceL2", since=(1, 11, 13, 18))(_reduction(op.sum, 18, before=_square, after=op.sqrt))
converter("ReduceLogSum", since=(1, 11, 13, 18))(_reduction(op.sum, 18, after=op.log))


def _arg(fn):
    def convert(ctx: NodeContext) -> Expr:
        x = ctx.input(0)
        axis = ctx.attr("axis", 0) % max(len(ctx.shape(x)), 1)
        keepdims = _flag(ctx, "keepdims", 1)
        if not _flag(ctx, "select_last_index", 0):
            return ctx.emit(fn(x, axis=axis, keepdims=keepdims))
        # the last extreme: the first one along the reversed axis, counted from the end
        reverse = op.strided_slice(x, [-1], [-(2**63)], [-1], [axis])
        last = op.subtract(op.take(op.shape_of(x), const(axis, "int64")), const(1, "int64"))
        return ctx.emit(op.subtract(last, fn(reverse, axis=axis, keepdims=keepdims)))

    return convert


converter("ArgMax", since=(1, 11, 12, 13))(_arg(op.argmax))
converter("ArgMin", since=(1, 11, 12, 13))(_arg(op.argmin))
