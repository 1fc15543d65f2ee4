"""Shape ONNX ops: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Expand, Constant,
ConstantOfShape and Range.

rvm shapes are static attributes holding ints and symbolic names, so a target shape (Reshape,
Expand, ConstantOfShape) must be known at import: a constant, or a *shape value* computed from
``Shape`` (see `rvm.frontend.onnx.context`). ``Reshape(x, Concat(Gather(Shape(x), 0), [-1]))``
of ``x: T[("n", 3, 4)]`` becomes ``op.reshape(x, ("n", 12))``.
"""

from __future__ import annotations

import numpy as np

from rvm import op
from rvm.frontend.onnx.context import NodeContext
from rvm.frontend.onnx.registry import converter
from rvm.ir import Constant, Expr
from rvm.op.shapes import broadcast_shapes, dims_product

_LATEST = (21, 23, 24, 25)  # versions that only add types rvm lacks (float8, int4, ...)


def target_shape(ctx: NodeContext, i: int, what: str) -> list:
    """Input ``i`` as a list of dims (ints, names, None where unknown)."""
    known = ctx.shape_value(i)
    if known is None or known.ndim != 1:
        ctx.fail(
            f"the {what} (input {i}) must be known at import: a constant, or computed from "
            f"Shape; rvm has no reshape by a shape computed at run time"
        )
    return [d if d is None or isinstance(d, str) else int(d) for d in known]


@converter("Shape", since=(1, 13, 15, 19, *_LATEST))
def _shape(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    out = op.shape_of(x)
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    if start != 0 or end is not None:
        out = op.strided_slice(out, [start], [2**63 - 1 if end is None else end])
    return ctx.emit(out)


@converter("Size", since=(1, 13, 19, *_LATEST))
def _size(ctx: NodeContext) -> Expr:
    total = dims_product(ctx.shape(ctx.input(0)))
    if isinstance(total, int):
        return Constant(np.array(total, dtype=np.int64))
    return ctx.emit(op.prod(op.shape_of(ctx.input(0))))


@converter("Reshape", since=(5, 13, 14, 19, *_LATEST))
def _reshape(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    dims = target_shape(ctx, 1, "target shape")
    if not ctx.attr("allowzero", 0) and 0 in dims:
        src = ctx.shape(x)
        dims = [src[i] if isinstance(d, int) and d == 0 else d for i, d in enumerate(dims)]
    unknown = [i for i, d in enumerate(dims) if d is None]
    if len(unknown) + dims.count(-1) > 1:
        ctx.fail(f"target shape {dims} has more than one dimension unknown at import")
    if unknown:
        dims[unknown[0]] = -1
    return ctx.emit(op.reshape(x, dims))


@converter("Flatten", since=(1, 9, 11, 13, *_LATEST))
def _flatten(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    shape = ctx.shape(x)
    axis = ctx.attr("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    if axis == 1 and shape:
        return ctx.emit(op.flatten(x))
    before, after = dims_product(shape[:axis]), dims_product(shape[axis:])
    if before is not None:
        return ctx.emit(op.reshape(x, (before, -1)))
    if after is not None:
        return ctx.emit(op.reshape(x, (-1, after)))
    ctx.fail(f"cannot flatten shape {tuple(shape)} at axis {axis} without known dims")


def _axes(ctx: NodeContext) -> list[int] | None:
    """Axes from the attribute (before opset 13) or the second input (from 13)."""
    if ctx.version < 13:
        axes = ctx.attr("axes", None)
        return None if axes is None else list(axes)
    return ctx.ints(1, "axes")


@converter("Squeeze", since=(1, 11, 13, *_LATEST))
def _squeeze(ctx: NodeContext) -> Expr:
    return ctx.emit(op.squeeze(ctx.input(0), _axes(ctx)))


@converter("Unsqueeze", since=(1, 11, 13, *_LATEST))
def _unsqueeze(ctx: NodeContext) -> Expr:
    axes = _axes(ctx)
    if not axes:
        ctx.fail("needs axes")
    return ctx.emit(op.expand_dims(ctx.input(0), axes))


@converter("Expand", since=(8, 13))
def _expand(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    dims = target_shape(ctx, 1, "shape")
    out = broadcast_shapes("Expand", ctx.shape(x), tuple(dims))
    if out is None or any(d is None for d in out):
        ctx.fail(f"cannot expand {ctx.shape(x)} to {dims}: dimensions unknown at import")
    if tuple(out) == tuple(ctx.shape(x)):
        return x
    return ctx.emit(op.broadcast_to(x, out))


@converter("ConstantOfShape", since=(9, 20, *_LATEST))
def _constant_of_shape(ctx: NodeContext) -> Expr:
    dims = target_shape(ctx, 0, "shape")
    if any(d is None for d in dims):
        ctx.fail(f"shape {dims} has dimensions unknown at import")
    value = ctx.attr("value", np.zeros(1, dtype=np.float32))
    fill = np.ravel(value)[0].item()
    return ctx.emit(op.full(dims, fill, value.dtype.name))


@converter("Constant", since=(1, 9, 11, 12, 13, 19, *_LATEST))
def _constant(ctx: NodeContext) -> Expr:
    a = ctx.attrs
    if "value" in a:
        return Constant(a["value"])
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32)):
        if key in a:
            return Constant(np.asarray(a[key], dtype=dtype))
    for key in ("value_int", "value_ints"):
        if key in a:
            return Constant(np.asarray(a[key], dtype=np.int64))
    ctx.fail(f"attributes {sorted(a)} are not supported (sparse and string constants)")


@converter("Range", since=(11, 27))
def _range(ctx: NodeContext) -> Expr:
    bounds = [ctx.const(i) for i in range(3)]
    if any(b is None for b in bounds):
        ctx.fail("start, limit and delta must be constants known at import")
    dtype = bounds[0].dtype.name
    start, limit, delta = (b.item() for b in bounds)
    return ctx.emit(op.arange(start, limit, delta, dtype=dtype))
