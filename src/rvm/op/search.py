"""Searching and sorting ops: topk, nonzero and unique.

``topk`` gives a tuple (values, int64 indices) of the ``k`` largest or smallest elements
along an axis, ties lowest index first. ``nonzero`` and ``unique`` have shapes that depend on
the data: their types carry an unknown (None) dimension, and the VM allocates their results
when the kernel returns them.
"""

from __future__ import annotations

from rvm.errors import IRError
from rvm.ir.expr import Call
from rvm.ir.op import OpPattern
from rvm.ir.types import TensorType, TupleType, Type
from rvm.op import ops
from rvm.op.core import (
    ExprLike,
    as_expr,
    call,
    check_axis,
    check_bool,
    check_int,
    define_op,
)
from rvm.op.shapes import dims_product, fmt, normalize_axis, rule

__all__ = ["nonzero", "topk", "unique"]

# The ops of this module (`rvm.op.core.define_op`).
# Searching and sorting.
define_op("topk", OpPattern.OPAQUE, 1)
define_op("nonzero", OpPattern.OPAQUE, 1)
define_op("unique", OpPattern.OPAQUE, 1)


@rule(ops.topk)
def _infer_topk(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    k = call_.attrs["k"]
    shape = None
    if x.shape is not None:
        axis = normalize_axis("topk", call_.attrs["axis"], len(x.shape))
        n = x.shape[axis]
        if isinstance(n, int) and k > n:
            raise IRError(f"topk: k={k} is larger than axis {axis} of shape {fmt(x.shape)}")
        shape = x.shape[:axis] + (k,) + x.shape[axis + 1 :]
    return TupleType((TensorType(shape, x.dtype), TensorType(shape, "int64")))


@rule(ops.nonzero)
def _infer_nonzero(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    return TensorType((None if x.shape is None else len(x.shape), None), "int64")


@rule(ops.unique)
def _infer_unique(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    axis = call_.attrs["axis"]
    count = TensorType((None,), "int64")
    if x.shape is None:
        values = TensorType(None if axis is not None else (None,), x.dtype)
        return TupleType((values, count, count, count))
    if axis is None:
        values, size = TensorType((None,), x.dtype), dims_product(x.shape)
    else:
        axis = normalize_axis("unique", axis, len(x.shape))
        size = x.shape[axis]
        values = TensorType(x.shape[:axis] + (None,) + x.shape[axis + 1 :], x.dtype)
    return TupleType((values, count, TensorType((size,), "int64"), count))


def topk(x: ExprLike, k: int, axis: int = -1, largest: bool = True, sorted: bool = True) -> Call:
    """A tuple: the ``k`` largest (``largest=False``: smallest) values along ``axis``, in
    order, and their int64 indices. Equal values come lowest index first; ``sorted=False``
    allows any order (rvm sorts anyway)."""
    return call(
        ops.topk,
        as_expr(x),
        k=check_int("topk", "k", k, minimum=0),
        axis=check_axis("topk", axis),
        largest=check_bool("topk", "largest", largest),
        sorted=check_bool("topk", "sorted", sorted),
    )


def nonzero(x: ExprLike) -> Call:
    """The int64 indices of the nonzero elements of ``x``: shape (rank, count)."""
    return call(ops.nonzero, as_expr(x))


def unique(x: ExprLike, axis: int | None = None, sorted: bool = True) -> Call:
    """A 4-tuple: the unique elements (slices along ``axis``; None: of the flattened ``x``),
    the index of each one's first occurrence, the inverse indices (``values[inverse]``
    rebuilds ``x`` along the axis) and the count of each; all indices int64. ``sorted=False``
    keeps first-occurrence order."""
    return call(
        ops.unique,
        as_expr(x),
        axis=check_axis("unique", axis, allow_none=True),
        sorted=check_bool("unique", "sorted", sorted),
    )
