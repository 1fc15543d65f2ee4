"""Indexing, scattering and searching ONNX ops: GatherND, ScatterElements, ScatterND,
Scatter, TopK, NonZero, Unique, Compress, Trilu, CumProd, OneHot, EyeLike and ReverseSequence.

``k`` (TopK), the diagonal (Trilu) and the axis (CumProd) known only at run time make the ops
of `rvm.op.dynamic`; the depth and values (OneHot) must be constants known at import, as rvm
takes them as attributes. NonZero, Unique and Compress give shapes that depend on the
data (an unknown dimension in their type). EyeLike and ReverseSequence compare and gather
positions counted along an axis (`_positions`), so their inputs need known or named sizes.
"""

from __future__ import annotations

import numpy as np

from rvm import op
from rvm.frontend.onnx.context import NodeContext
from rvm.frontend.onnx.registry import converter
from rvm.frontend.onnx.weights import np_dtype
from rvm.ir import Expr, TupleGetItem
from rvm.ir.types import INT_DTYPES


@converter("GatherND", since=(11, 12, 13))
def _gather_nd(ctx: NodeContext) -> Expr:
    return ctx.emit(op.gather_nd(ctx.input(0), ctx.input(1), ctx.attr("batch_dims", 0)))


def _reduction(ctx: NodeContext) -> str:
    return ctx.attr("reduction", "none")


@converter("ScatterElements", since=(11, 13, 16, 18))
def _scatter_elements(ctx: NodeContext) -> Expr:
    x, indices, updates = (ctx.input(i) for i in range(3))
    axis = ctx.attr("axis", 0)
    return ctx.emit(op.scatter_elements(x, indices, updates, axis, _reduction(ctx)))


@converter("Scatter", since=(9, 11))
def _scatter(ctx: NodeContext) -> Expr:
    x, indices, updates = (ctx.input(i) for i in range(3))
    return ctx.emit(op.scatter_elements(x, indices, updates, ctx.attr("axis", 0)))


@converter("ScatterND", since=(11, 13, 16, 18))
def _scatter_nd(ctx: NodeContext) -> Expr:
    x, indices, updates = (ctx.input(i) for i in range(3))
    return ctx.emit(op.scatter_nd(x, indices, updates, _reduction(ctx)))


def _scalar_input(ctx: NodeContext, i: int, what: str, default: int | None = None) -> int:
    values = ctx.ints(i, what)
    if values is None:
        if default is None:
            ctx.fail(f"{what} (input {i}) is required")
        return default
    if len(values) != 1:
        ctx.fail(f"{what} (input {i}) must hold one value, got {values}")
    return values[0]


@converter("TopK", since=1)
def _topk_v1(ctx: NodeContext) -> list:
    return _topk(ctx, ctx.attr("k"), largest=True, sort=True)


@converter("TopK", since=(10, 11, 24))
def _topk_v10(ctx: NodeContext) -> list:
    largest = bool(ctx.attr("largest", 1)) if ctx.version >= 11 else True
    if ctx.const(1) is None:  # k read at run time
        k = ctx.emit(op.cast(ctx.input(1), "int64"))
        axis, sort = ctx.attr("axis", -1), bool(ctx.attr("sorted", 1))
        pair = ctx.emit(op.dynamic_topk(ctx.input(0), k, axis, largest, sort))
        return [ctx.emit(TupleGetItem(pair, i)) for i in range(2)]
    k = _scalar_input(ctx, 1, "k")
    return _topk(ctx, k, largest, bool(ctx.attr("sorted", 1)))


def _topk(ctx: NodeContext, k: int, largest: bool, sort: bool) -> list:
    pair = ctx.emit(op.topk(ctx.input(0), k, ctx.attr("axis", -1), largest, sort))
    return [ctx.emit(TupleGetItem(pair, i)) for i in range(2)]


@converter("NonZero", since=(9, 13))
def _nonzero(ctx: NodeContext) -> Expr:
    return ctx.emit(op.nonzero(ctx.input(0)))


@converter("Unique", since=(11, 28))
def _unique(ctx: NodeContext) -> list:
    x, axis = ctx.input(0), ctx.attr("axis", None)
    parts = ctx.emit(op.unique(x, axis, bool(ctx.attr("sorted", 1))))
    return [ctx.emit(TupleGetItem(parts, i)) for i in range(4)]


@converter("Compress", since=(9, 11, 28))
def _compress(ctx: NodeContext) -> Expr:
    x, condition = ctx.input(0), ctx.input(1)
    axis = ctx.attr("axis", None)
    picked = op.reshape(op.nonzero(condition), (-1,))
    return ctx.emit(op.take(x, picked, axis=axis))


@converter("Trilu", since=14)
def _trilu(ctx: NodeContext) -> Expr:
    if ctx.optional(1) is not None and ctx.const(1) is None:  # k read at run time
        k = ctx.emit(op.cast(ctx.input(1), "int64"))
        return ctx.emit(op.dynamic_trilu(ctx.input(0), k, upper=bool(ctx.attr("upper", 1))))
    k = _scalar_input(ctx, 1, "k", default=0)
    return ctx.emit(op.trilu(ctx.input(0), k, upper=bool(ctx.attr("upper", 1))))


@converter("CumProd", since=26)
def _cumprod(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    exclusive = bool(ctx.attr("exclusive", 0))
    if ctx.const(1) is None:  # the axis read at run time
        axis_ = ctx.emit(op.cast(ctx.input(1), "int64"))
        reverse = bool(ctx.attr("reverse", 0))
        return ctx.emit(op.dynamic_scan(x, axis_, "prod", exclusive, reverse))
    axis = _scalar_input(ctx, 1, "axis")
    if not ctx.attr("reverse", 0):
        return ctx.emit(op.cumprod(x, axis=axis, exclusive=exclusive))
    backwards = [-1], [-(2**63)], [-1], [axis]
    out = op.cumprod(op.strided_slice(x, *backwards), axis=axis, exclusive=exclusive)
    return ctx.emit(op.strided_slice(out, *backwards))


@converter("OneHot", since=(9, 11, 28))
def _one_hot(ctx: NodeContext) -> Expr:
    depth, values = ctx.const(1), ctx.const(2)
    if depth is None or values is None:
        ctx.fail("depth and values (inputs 1 and 2) must be constants known at import")
    indices = ctx.input(0)
    if ctx.type(indices).dtype not in INT_DTYPES:
        indices = op.cast(indices, "int64")  # ONNX allows float indices; they truncate
    off, on = (v.item() for v in np.ravel(values))
    y = op.one_hot(indices, int(np.ravel(depth)[0]), on, off, ctx.attr("axis", -1),
                   values.dtype.name)  # fmt: skip
    return ctx.emit(y)


def _positions(ctx: NodeContext, size: object, axis: int, rank: int) -> Expr:
    """``0, 1, ..., size - 1`` (int64) along ``axis`` of a rank-``rank`` tensor, size 1 on
    every other axis; ``size`` may be a symbolic name (an exclusive running sum of ones)."""
    if size is None:
        ctx.fail(f"needs axis {axis} of its input to have a known or named size")
    shape = tuple(size if i == axis else 1 for i in range(rank))
    return op.cumsum(op.ones(shape, "int64"), axis, exclusive=True)


@converter("EyeLike", since=(9, 22))
def _eye_like(ctx: NodeContext) -> Expr:
    """Ones on diagonal ``k`` (positive: above the main one) of a tensor shaped as the 2-d
    input, of the ``dtype`` attribute (default: the input's): rows and columns compared."""
    x = ctx.input(0)
    shape = ctx.shape(x)
    if len(shape) != 2:
        ctx.fail(f"the input must be 2-d, got shape {shape}")
    dtype = ctx.attr("dtype", None)
    dtype = ctx.type(x).dtype if dtype is None else np_dtype(dtype, "the dtype attribute")
    rows, cols = (_positions(ctx, shape[i], i, 2) for i in range(2))
    return ctx.emit(op.cast(op.equal(cols - rows, ctx.attr("k", 0)), dtype))


@converter("ReverseSequence", since=(10, 28))  # 28 adds types (bfloat16...)
def _reverse_sequence(ctx: NodeContext) -> Expr:
    """The first ``sequence_lens[b]`` steps along ``time_axis`` of each batch entry ``b``
    reversed, the rest kept: a gather along the time axis of ``t < n ? n - 1 - t : t``."""
    x, lens = ctx.input(0), ctx.input(1)
    shape = ctx.shape(x)
    batch_axis, time_axis = ctx.attr("batch_axis", 1), ctx.attr("time_axis", 0)
    if sorted((batch_axis, time_axis)) != [0, 1] or None in shape:
        ctx.fail(f"needs batch_axis/time_axis 0 and 1 and a known shape, got {shape}")
    t = _positions(ctx, shape[time_axis], time_axis, len(shape))
    n = op.reshape(
        op.cast(lens, "int64"), tuple(-1 if i == batch_axis else 1 for i in range(len(shape)))
    )
    source = op.where(op.less(t, n), n - t - 1, t)
    return ctx.emit(op.gather(x, op.broadcast_to(source, shape), axis=time_axis))
