"""Shape ONNX ops: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Expand, Constant,
ConstantOfShape and Range.

A target shape (Reshape, Expand, ConstantOfShape, Tile's repeats, Range's bounds) known at
import, as a constant or a *shape value* computed from ``Shape`` (see
`rvm.frontend.onnx.context`), becomes a static attribute: ``Reshape(x, Concat(Gather(Shape(x),
0), [-1]))`` of ``x: T[("n", 3, 4)]`` is ``op.reshape(x, ("n", 12))``. One with elements that
are only known at run time (``past + seq``, a size read from data) stays a tensor: the
``rvm.op.dynamic`` ops read it when they run, and carry what is known of it (ints, names)
into the result's type.
"""

from __future__ import annotations

import numpy as np

from rvm import op
from rvm.frontend.onnx.context import NodeContext
from rvm.frontend.onnx.dims import nonnegative
from rvm.frontend.onnx.registry import converter
from rvm.ir import Constant, Expr
from rvm.op.shapes import dims_product

_LATEST = (21, 23, 24, 25)  # versions that only add types rvm lacks (float8, int4, ...)


def target_shape(ctx: NodeContext, i: int, what: str) -> list:
    """Input ``i`` as a list of dims (ints, names, None where computed at run time).

    A shape input that is no shape value (computed from data) gives None for every element;
    its length must be known at import, since it is the rank of the result.
    """
    known = ctx.shape_value(i)
    if known is not None and known.ndim == 1:
        return [ctx.emitter.dims.dim(d) for d in known]
    shape = ctx.shape(ctx.input(i))
    if len(shape) != 1 or not isinstance(shape[0], int):
        ctx.fail(f"the {what} (input {i}) must be a 1-d tensor of known length, got {shape}")
    return [None] * shape[0]


def run_time_shape(ctx: NodeContext, i: int) -> Expr:
    """Input ``i`` as an int64 tensor, for an op that reads a shape at run time."""
    value = ctx.input(i)
    if ctx.type(value).dtype == "int64":
        return value
    return ctx.emit(op.cast(value, "int64"))


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
    allowzero = bool(ctx.attr("allowzero", 0))
    src = ctx.shape(x)
    if not allowzero and 0 in dims:
        dims = [
            (src[i] if i < len(src) else None) if isinstance(d, int) and d == 0 else d
            for i, d in enumerate(dims)
        ]
    unknown = [i for i, d in enumerate(dims) if d is None]
    # A static reshape's kernel finds the named dims of its target on its input: a name the
    # input does not carry (``(b, seq, 64)`` from ``(b, 4, ?, 16)``) is read from the shape
    # tensor at run time instead, and checked against the name's size.
    foreign = any(isinstance(d, str) and d not in src for d in dims)
    if len(unknown) + dims.count(-1) <= 1 and not foreign:
        if unknown:
            dims[unknown[0]] = -1
        return ctx.emit(op.reshape(x, dims))
    # Several dimensions computed at run time: reshape by the shape tensor itself.
    hint = [None if d == -1 else d for d in dims]
    return ctx.emit(op.dynamic_reshape(x, run_time_shape(ctx, 1), hint, allowzero=allowzero))


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
    if ctx.version >= 13 and ctx.optional(1) is not None and ctx.const(1) is None:
        axes = ctx.emit(op.cast(ctx.input(1), "int64"))  # read at run time
        return ctx.emit(op.dynamic_squeeze(ctx.input(0), axes))
    return ctx.emit(op.squeeze(ctx.input(0), _axes(ctx)))


@converter("Unsqueeze", since=(1, 11, 13, *_LATEST))
def _unsqueeze(ctx: NodeContext) -> Expr:
    if ctx.version >= 13 and ctx.const(1) is None:
        axes_ = ctx.emit(op.cast(ctx.input(1), "int64"))  # read at run time
        return ctx.emit(op.dynamic_unsqueeze(ctx.input(0), axes_))
    axes = _axes(ctx)
    if not axes:
        ctx.fail("needs axes")
    return ctx.emit(op.expand_dims(ctx.input(0), axes))


def _expanded_dim(a, b):
    """The known result of broadcasting dims ``a`` and ``b`` (None: known only at run time)."""
    if a is None or b is None:
        known = b if a is None else a
        return None if known is None or known == 1 else known
    if a == 1:
        return b
    if b == 1 or a == b:
        return a
    if isinstance(a, int) and isinstance(b, int):
        raise ValueError(f"cannot broadcast {a} and {b}")
    return None  # two names, or a name and an int: equal at run time, or an error then


@converter("Expand", since=(8, 13))
def _expand(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    dims = target_shape(ctx, 1, "shape")
    src = list(ctx.shape(x))
    n = max(len(src), len(dims))
    left, right = [1] * (n - len(src)) + src, [1] * (n - len(dims)) + dims
    try:
        out = [_expanded_dim(a, b) for a, b in zip(left, right)]
    except ValueError as err:
        ctx.fail(f"cannot expand {tuple(src)} to {dims}: {err}")
    if None not in out:
        if out == src:
            return x
        return ctx.emit(op.broadcast_to(x, out))
    return ctx.emit(op.dynamic_expand(x, run_time_shape(ctx, 1), out))


@converter("ConstantOfShape", since=(9, 20, *_LATEST))
def _constant_of_shape(ctx: NodeContext) -> Expr:
    dims = target_shape(ctx, 0, "shape")
    value = ctx.attr("value", np.zeros(1, dtype=np.float32))
    fill = np.ravel(value)[0].item()
    if None not in dims:
        return ctx.emit(op.full(dims, fill, value.dtype.name))
    return ctx.emit(op.dynamic_full(run_time_shape(ctx, 0), fill, value.dtype.name, dims))


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
    dtype = ctx.type(ctx.input(0)).dtype
    if all(b is not None for b in bounds):
        start, limit, delta = (b.item() for b in bounds)
        return ctx.emit(op.arange(start, limit, delta, dtype=dtype))
    if dtype is None:
        ctx.fail("the bounds' dtype must be known at import")
    # Bounds computed at run time; the length is known when they count up by 1 and the
    # difference is a dimension (``Range(0, Shape(x)[1], 1)``, ``Range(past, past + seq)``).
    known = [ctx.shape_value(i) for i in range(3)]
    length = None
    if all(k is not None and k.ndim == 0 for k in known):
        start, limit, delta = (k.item() for k in known)
        if delta == 1:
            count = ctx.emitter.dims.subtract(limit, start)
            length = ctx.emitter.dims.dim(count)
            if isinstance(length, int) or not nonnegative(length):
                length = None  # bounds that are no constants (a sum that might be negative)
    start, limit, delta = (ctx.emit(op.reshape(ctx.input(i), ())) for i in range(3))
    return ctx.emit(op.dynamic_arange(start, limit, delta, dtype, length))
