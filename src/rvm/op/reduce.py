"""Reductions over axes: sum, mean, max, min, prod, variance, argmax, argmin; the running
cumsum and cumprod.

``axis`` is stored as None (every axis) or a tuple of ints (possibly negative; they are
normalized against the rank when types are inferred). ``argmax``/``argmin`` take one axis or
None, as NumPy, and give int64. Sums and products keep the input dtype (bool counts as int64);
``mean`` and ``variance`` (population, ddof=0) keep it too, so an integer mean truncates.
``max`` and ``min`` over no elements give their identities, as ONNX ReduceMax/ReduceMin:
-inf/inf for floats, the dtype's least/greatest integer, False/True for bools.
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm.errors import IRError
from rvm.ir.expr import Call, Op
from rvm.ir.op import OpPattern
from rvm.ir.types import FLOAT_DTYPES, TensorType, Type
from rvm.op import ops
from rvm.op.core import (
    ExprLike,
    as_expr,
    call,
    check_axes,
    check_axis,
    check_bool,
    define_op,
)
from rvm.op.shapes import dims_product, fmt, normalize_axis, reduce_shape, rule

__all__ = ["argmax", "argmin", "cumprod", "cumsum", "max", "mean", "min", "prod", "sum", "variance"]

# The ops of this module (`rvm.op.core.define_op`).
# Reductions.
define_op("sum", OpPattern.REDUCTION, 1)
define_op("mean", OpPattern.REDUCTION, 1)
define_op("max", OpPattern.REDUCTION, 1)
define_op("min", OpPattern.REDUCTION, 1)
define_op("prod", OpPattern.REDUCTION, 1)
define_op("argmax", OpPattern.REDUCTION, 1)
define_op("argmin", OpPattern.REDUCTION, 1)
define_op("variance", OpPattern.REDUCTION, 1)
define_op("cumsum", OpPattern.OPAQUE, 1)
define_op("cumprod", OpPattern.OPAQUE, 1)

Axis = int | Sequence[int] | None


def _reduce_rule(op: Op, *, float_only: bool = False) -> None:
    @rule(op)
    def infer_reduce(call_: Call, args: list[TensorType]) -> Type:
        (x,) = args
        if float_only and x.dtype is not None and x.dtype not in FLOAT_DTYPES:
            raise IRError(f"{op.name}: expects a float tensor, got {x.dtype} {fmt(x.shape)}")
        dtype = x.dtype
        if op in (ops.sum, ops.prod) and dtype == "bool":
            dtype = "int64"
        shape = reduce_shape(op.name, x.shape, call_.attrs["axis"], call_.attrs["keepdims"])
        return TensorType(shape, dtype)


def _arg_rule(op: Op) -> None:
    @rule(op)
    def infer_arg(call_: Call, args: list[TensorType]) -> Type:
        (x,) = args
        axis = call_.attrs["axis"]
        if x.shape is not None and axis is not None and not x.shape:
            raise IRError(f"{op.name}: axis {axis} is out of range for a tensor of rank 0")
        axes = None if axis is None else (axis,)
        return TensorType(reduce_shape(op.name, x.shape, axes, call_.attrs["keepdims"]), "int64")


for _op in (ops.sum, ops.max, ops.min, ops.prod, ops.mean):
    _reduce_rule(_op)
_reduce_rule(ops.variance, float_only=True)
_arg_rule(ops.argmax)
_arg_rule(ops.argmin)


def _scan_rule(op: Op) -> None:
    @rule(op)
    def infer_scan(call_: Call, args: list[TensorType]) -> Type:
        (x,) = args
        dtype = "int64" if x.dtype == "bool" else x.dtype
        axis = call_.attrs["axis"]
        if x.shape is None:
            return TensorType(None if axis is not None else (None,), dtype)
        if axis is None:
            return TensorType((dims_product(x.shape),), dtype)
        normalize_axis(op.name, axis, len(x.shape))
        return TensorType(x.shape, dtype)


_scan_rule(ops.cumsum)
_scan_rule(ops.cumprod)


def _reduce(op: Op, x: ExprLike, axis: Axis, keepdims: bool) -> Call:
    return call(
        op,
        as_expr(x),
        axis=check_axes(op.name, axis),
        keepdims=check_bool(op.name, "keepdims", keepdims),
    )


def sum(x: ExprLike, axis: Axis = None, keepdims: bool = False) -> Call:
    """The sum over ``axis`` (an int, a list of ints, or None for all)."""
    return _reduce(ops.sum, x, axis, keepdims)


def mean(x: ExprLike, axis: Axis = None, keepdims: bool = False) -> Call:
    """The mean over ``axis``."""
    return _reduce(ops.mean, x, axis, keepdims)


def max(x: ExprLike, axis: Axis = None, keepdims: bool = False) -> Call:
    """The maximum over ``axis``."""
    return _reduce(ops.max, x, axis, keepdims)


def min(x: ExprLike, axis: Axis = None, keepdims: bool = False) -> Call:
    """The minimum over ``axis``."""
    return _reduce(ops.min, x, axis, keepdims)


def prod(x: ExprLike, axis: Axis = None, keepdims: bool = False) -> Call:
    """The product over ``axis``."""
    return _reduce(ops.prod, x, axis, keepdims)


def variance(x: ExprLike, axis: Axis = None, keepdims: bool = False) -> Call:
    """The population variance (ddof=0) over ``axis``."""
    return _reduce(ops.variance, x, axis, keepdims)


def argmax(x: ExprLike, axis: int | None = None, keepdims: bool = False) -> Call:
    """The int64 index of the maximum along ``axis`` (None: of the flattened tensor)."""
    return call(
        ops.argmax,
        as_expr(x),
        axis=check_axis("argmax", axis, allow_none=True),
        keepdims=check_bool("argmax", "keepdims", keepdims),
    )


def argmin(x: ExprLike, axis: int | None = None, keepdims: bool = False) -> Call:
    """The int64 index of the minimum along ``axis`` (None: of the flattened tensor)."""
    return call(
        ops.argmin,
        as_expr(x),
        axis=check_axis("argmin", axis, allow_none=True),
        keepdims=check_bool("argmin", "keepdims", keepdims),
    )


def cumsum(x: ExprLike, axis: int | None = None, exclusive: bool = False) -> Call:
    """The running sum along ``axis`` (None: of the flattened tensor, giving 1-d).

    ``exclusive`` starts from 0 and leaves each element out of its own sum.
    """
    return _scan(ops.cumsum, x, axis, exclusive)


def cumprod(x: ExprLike, axis: int | None = None, exclusive: bool = False) -> Call:
    """The running product along ``axis`` (None: of the flattened tensor, giving 1-d).

    ``exclusive`` starts from 1 and leaves each element out of its own product.
    """
    return _scan(ops.cumprod, x, axis, exclusive)


def _scan(op: Op, x: ExprLike, axis: int | None, exclusive: bool) -> Call:
    return call(
        op,
        as_expr(x),
        axis=check_axis(op.name, axis, allow_none=True),
        exclusive=check_bool(op.name, "exclusive", exclusive),
    )
