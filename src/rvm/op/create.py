"""Creation ops: zeros, ones, full, arange, one_hot, and shape_of.

Creation ops take no tensor inputs: their shape, dtype and values are static attributes.
Shapes may hold symbolic names (``zeros(("n", 4))``); the reference receives concrete ints.
``shape_of`` gives the shape as a 1-d int64 tensor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rvm.errors import IRError
from rvm.ir.expr import Call, Op
from rvm.ir.op import OpPattern
from rvm.ir.types import INT_DTYPES, TensorType, Type
from rvm.op import ops
from rvm.op.core import (
    ExprLike,
    as_expr,
    call,
    check_axis,
    check_dtype_attr,
    check_int,
    check_scalar,
    check_shape,
    define_op,
)
from rvm.op.shapes import normalize_axis, rule

__all__ = ["arange", "full", "one_hot", "ones", "shape_of", "zeros"]

# The ops of this module (`rvm.op.core.define_op`).
# Creation.
define_op("zeros", OpPattern.ELEMWISE, 0)
define_op("ones", OpPattern.ELEMWISE, 0)
define_op("full", OpPattern.ELEMWISE, 0)
define_op("arange", OpPattern.INJECTIVE, 0)
define_op("one_hot", OpPattern.INJECTIVE, 1)
define_op("shape_of", OpPattern.OPAQUE, 1)


def _shape_rule(op: Op) -> None:
    @rule(op)
    def infer_creation(call_: Call, args: list[TensorType]) -> Type:
        return TensorType(call_.attrs["shape"], call_.attrs["dtype"])


_shape_rule(ops.zeros)
_shape_rule(ops.ones)
_shape_rule(ops.full)


def arange_length(start: float, stop: float, step: float) -> int:
    """The number of elements of ``arange(start, stop, step)`` (NumPy's rule)."""
    return max(math.ceil((stop - start) / step), 0)


@rule(ops.arange)
def _infer_arange(call_: Call, args: list[TensorType]) -> Type:
    a = call_.attrs
    return TensorType((arange_length(a["start"], a["stop"], a["step"]),), a["dtype"])


@rule(ops.one_hot)
def _infer_one_hot(call_: Call, args: list[TensorType]) -> Type:
    (indices,) = args
    if indices.dtype is not None and indices.dtype not in INT_DTYPES:
        raise IRError(f"one_hot: indices must be an integer tensor, got {indices.dtype}")
    a = call_.attrs
    if indices.shape is None:
        return TensorType(None, a["dtype"])
    axis = normalize_axis("one_hot", a["axis"], len(indices.shape) + 1)
    shape = list(indices.shape)
    shape.insert(axis, a["depth"])
    return TensorType(tuple(shape), a["dtype"])


@rule(ops.shape_of)
def _infer_shape_of(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    return TensorType((None if x.shape is None else len(x.shape),), "int64")


def zeros(shape: Sequence[int | str], dtype: str = "float32") -> Call:
    """A tensor of zeros."""
    return call(
        ops.zeros, shape=check_shape("zeros", shape), dtype=check_dtype_attr("zeros", dtype)
    )


def ones(shape: Sequence[int | str], dtype: str = "float32") -> Call:
    """A tensor of ones."""
    return call(ops.ones, shape=check_shape("ones", shape), dtype=check_dtype_attr("ones", dtype))


def full(
    shape: Sequence[int | str], fill_value: float | int | bool, dtype: str = "float32"
) -> Call:
    """A tensor filled with ``fill_value``."""
    return call(
        ops.full,
        shape=check_shape("full", shape),
        fill_value=check_scalar("full", "fill_value", fill_value),
        dtype=check_dtype_attr("full", dtype),
    )


def arange(
    start: float | int,
    stop: float | int | None = None,
    step: float | int = 1,
    dtype: str | None = None,
) -> Call:
    """``start, start + step, ...`` below ``stop``; ``arange(n)`` counts from 0.

    ``dtype`` defaults to int64 when every bound is an int, else float32. All four attributes
    are stored.
    """
    if stop is None:
        start, stop = 0, start
    values = [
        check_scalar("arange", name, v)
        for name, v in (("start", start), ("stop", stop), ("step", step))
    ]
    if any(isinstance(v, bool) for v in values):
        raise IRError(f"arange: bounds must be numbers, got {values!r}")
    if values[2] == 0:
        raise IRError("arange: step must not be 0")
    if dtype is None:
        dtype = "int64" if all(isinstance(v, int) for v in values) else "float32"
    dtype = check_dtype_attr("arange", dtype)
    if dtype in INT_DTYPES and not all(isinstance(v, int) for v in values):
        raise IRError(f"arange: integer dtype {dtype} needs integer bounds, got {values!r}")
    return call(ops.arange, start=values[0], stop=values[1], step=values[2], dtype=dtype)


def one_hot(
    indices: ExprLike,
    depth: int,
    on_value: float | int | bool = 1.0,
    off_value: float | int | bool = 0.0,
    axis: int = -1,
    dtype: str = "float32",
) -> Call:
    """``on_value`` where an index equals the position along the new ``axis`` of size
    ``depth``, else ``off_value``. Negative indices count from ``depth`` (ONNX)."""
    return call(
        ops.one_hot,
        as_expr(indices),
        depth=check_int("one_hot", "depth", depth, minimum=0),
        on_value=check_scalar("one_hot", "on_value", on_value),
        off_value=check_scalar("one_hot", "off_value", off_value),
        axis=check_axis("one_hot", axis),
        dtype=check_dtype_attr("one_hot", dtype),
    )


def shape_of(x: ExprLike) -> Call:
    """The shape of ``x`` as a 1-d int64 tensor."""
    return call(ops.shape_of, as_expr(x))
