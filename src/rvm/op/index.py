"""Indexing ops: slices, takes, gathers and scatters.

``strided_slice`` slices like Python (ends out of range clamp; a huge end such as 2**63 - 1
means "to the end"). ``dynamic_slice`` is the same with ``begin`` and ``end`` given as 1-d
integer tensors at run time (the sliced dimensions are then unknown). ``take`` is NumPy's
take: indices from ``axis`` (None: of the flattened tensor), negative indices counting from
the end. ``gather`` is ONNX GatherElements, which is NumPy's take_along_axis: ``indices`` has
the rank of ``x`` and the result has its shape.
``gather_nd`` is ONNX GatherND: the last axis of ``indices`` holds index tuples into ``x``.
The scatters are their inverses (ONNX ScatterElements and ScatterND): a copy of ``x`` with
``updates`` written at the indices, or combined with what is there by ``reduction`` ("add",
"mul", "max", "min"; repeated indices combine in order).
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm.errors import IRError
from rvm.ir.expr import Call
from rvm.ir.op import OpPattern
from rvm.ir.types import INT_DTYPES, Dim, Shape, TensorType, Type
from rvm.op import ops
from rvm.op.core import (
    ExprLike,
    as_expr,
    call,
    check_axis,
    check_choice,
    check_int,
    check_ints,
    define_op,
)
from rvm.op.shapes import fmt, normalize_axes, normalize_axis, rule, unify_dim

__all__ = [
    "dynamic_slice",
    "gather",
    "gather_nd",
    "scatter_elements",
    "scatter_nd",
    "strided_slice",
    "take",
]

# The ops of this module (`rvm.op.core.define_op`).
define_op("strided_slice", OpPattern.INJECTIVE, 1)
# bounds from run-time tensors: the output shape depends on data, so it is opaque
define_op("dynamic_slice", OpPattern.OPAQUE, 3)
define_op("take", OpPattern.INJECTIVE, 2)
define_op("gather", OpPattern.INJECTIVE, 2)
define_op("gather_nd", OpPattern.INJECTIVE, 2)
define_op("scatter_elements", OpPattern.OPAQUE, 3)
define_op("scatter_nd", OpPattern.OPAQUE, 3)

_TO_END = 2**31 - 1  # ends at least this large slice to the end of a symbolic dim


def _slice_dim(dim: Dim, begin: int, end: int, stride: int) -> Dim:
    if isinstance(dim, int):
        return len(range(dim)[begin:end:stride])
    if stride == 1 and begin == 0 and end >= _TO_END:
        return dim
    if stride == -1 and begin == -1 and end <= -_TO_END:
        return dim
    return None


@rule(ops.strided_slice)
def _infer_strided_slice(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    if x.shape is None:
        return x
    a = call_.attrs
    out = list(x.shape)
    for axis, b, e, s in zip(
        normalize_axes("strided_slice", a["axes"], len(x.shape), what="axes"),
        a["begin"],
        a["end"],
        a["strides"],
    ):
        out[axis] = _slice_dim(x.shape[axis], b, e, s)
    return TensorType(tuple(out), x.dtype)


@rule(ops.dynamic_slice)
def _infer_dynamic_slice(call_: Call, args: list[TensorType]) -> Type:
    x, begin, end = args
    n = len(call_.attrs["axes"])
    for what, bound in (("begin", begin), ("end", end)):
        _check_indices(f"dynamic_slice {what}", bound)
        if bound.shape is not None and bound.shape not in ((n,), (None,)):
            raise IRError(
                f"dynamic_slice: {what} must be a 1-d tensor of {n} bounds, got shape "
                f"{fmt(bound.shape)}"
            )
    if x.shape is None:
        return x
    out = list(x.shape)
    for axis in normalize_axes("dynamic_slice", call_.attrs["axes"], len(out), what="axes"):
        out[axis] = None
    return TensorType(tuple(out), x.dtype)


def _check_indices(op: str, indices: TensorType) -> None:
    if indices.dtype is not None and indices.dtype not in INT_DTYPES:
        raise IRError(f"{op}: indices must be an integer tensor, got {indices.dtype}")


@rule(ops.take)
def _infer_take(call_: Call, args: list[TensorType]) -> Type:
    x, indices = args
    _check_indices("take", indices)
    axis = call_.attrs["axis"]
    if axis is None:
        return TensorType(indices.shape, x.dtype)
    if x.shape is None or indices.shape is None:
        return TensorType(None, x.dtype)
    axis = normalize_axis("take", axis, len(x.shape))
    return TensorType(x.shape[:axis] + indices.shape + x.shape[axis + 1 :], x.dtype)


@rule(ops.gather)
def _infer_gather(call_: Call, args: list[TensorType]) -> Type:
    x, indices = args
    _check_indices("gather", indices)
    if x.shape is not None:
        normalize_axis("gather", call_.attrs["axis"], len(x.shape))
        if indices.shape is not None and len(indices.shape) != len(x.shape):
            raise IRError(
                f"gather: indices {fmt(indices.shape)} must have the rank of x {fmt(x.shape)}"
            )
    return TensorType(indices.shape, x.dtype)


@rule(ops.gather_nd)
def _infer_gather_nd(call_: Call, args: list[TensorType]) -> Type:
    x, indices = args
    _check_indices("gather_nd", indices)
    if x.shape is None or indices.shape is None or not indices.shape:
        return TensorType(None, x.dtype)
    b = call_.attrs["batch_dims"]
    depth = indices.shape[-1]
    if b >= min(len(x.shape), len(indices.shape)):
        raise IRError(
            f"gather_nd: batch_dims={b} must be less than the ranks of x {fmt(x.shape)} and "
            f"indices {fmt(indices.shape)}"
        )
    batch = tuple(
        unify_dim("gather_nd", d, e, "x and indices differ in a batch dimension")
        for d, e in zip(x.shape[:b], indices.shape[:b])
    )
    if not isinstance(depth, int):
        return TensorType(None, x.dtype)
    if b + depth > len(x.shape):
        raise IRError(
            f"gather_nd: index tuples of length {depth} (indices {fmt(indices.shape)}) do not "
            f"fit x {fmt(x.shape)} after {b} batch dimensions"
        )
    return TensorType(batch + indices.shape[b:-1] + x.shape[b + depth :], x.dtype)


def _check_updates(op: str, x: TensorType, updates: TensorType, expected: Shape | None) -> None:
    if None not in (x.dtype, updates.dtype) and x.dtype != updates.dtype:
        raise IRError(f"{op}: updates have dtype {updates.dtype}, x has {x.dtype}")
    if expected is None or updates.shape is None:
        return
    clash = len(expected) != len(updates.shape) or any(
        isinstance(a, int) and isinstance(b, int) and a != b
        for a, b in zip(expected, updates.shape)
    )
    if clash:
        raise IRError(f"{op}: updates have shape {fmt(updates.shape)}, expected {fmt(expected)}")


@rule(ops.scatter_elements)
def _infer_scatter_elements(call_: Call, args: list[TensorType]) -> Type:
    x, indices, updates = args
    _check_indices("scatter_elements", indices)
    if x.shape is not None:
        normalize_axis("scatter_elements", call_.attrs["axis"], len(x.shape))
        if indices.shape is not None and len(indices.shape) != len(x.shape):
            raise IRError(
                f"scatter_elements: indices {fmt(indices.shape)} must have the rank of x "
                f"{fmt(x.shape)}"
            )
    _check_updates("scatter_elements", x, updates, indices.shape)
    return x


@rule(ops.scatter_nd)
def _infer_scatter_nd(call_: Call, args: list[TensorType]) -> Type:
    x, indices, updates = args
    _check_indices("scatter_nd", indices)
    expected = None
    if x.shape is not None and indices.shape is not None and indices.shape:
        depth = indices.shape[-1]
        if isinstance(depth, int):
            if depth > len(x.shape):
                raise IRError(
                    f"scatter_nd: index tuples of length {depth} do not fit x {fmt(x.shape)}"
                )
            expected = indices.shape[:-1] + x.shape[depth:]
    _check_updates("scatter_nd", x, updates, expected)
    return x


def strided_slice(
    x: ExprLike,
    begin: Sequence[int],
    end: Sequence[int],
    strides: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
) -> Call:
    """``x[begin:end:strides]`` along ``axes`` (None: the first ``len(begin)`` axes).

    Attributes are stored in full: ``strides`` (default all 1) and ``axes``.
    """
    op = "strided_slice"
    begin_ = check_ints(op, "begin", begin)
    end_ = check_ints(op, "end", end, len(begin_))
    strides_ = (1,) * len(begin_) if strides is None else check_ints(op, "strides", strides)
    axes_ = tuple(range(len(begin_))) if axes is None else check_ints(op, "axes", axes)
    if not len(begin_) == len(strides_) == len(axes_):
        raise IRError(
            f"{op}: begin {begin_}, end {end_}, strides {strides_} and axes {axes_} must have "
            f"the same length"
        )
    if 0 in strides_:
        raise IRError(f"{op}: strides must not be 0, got {strides_}")
    return call(ops.strided_slice, as_expr(x), begin=begin_, end=end_, strides=strides_, axes=axes_)


def dynamic_slice(
    x: ExprLike,
    begin: ExprLike,
    end: ExprLike,
    axes: Sequence[int],
    strides: Sequence[int] | None = None,
) -> Call:
    """``x[begin:end:strides]`` along ``axes``, ``begin`` and ``end`` being 1-d integer
    tensors (one bound per axis) known only at run time."""
    op = "dynamic_slice"
    axes_ = check_ints(op, "axes", axes)
    strides_ = (1,) * len(axes_) if strides is None else check_ints(op, "strides", strides)
    if len(strides_) != len(axes_) or 0 in strides_:
        raise IRError(f"{op}: strides {strides_} must be nonzero, one per axis of {axes_}")
    return call(
        ops.dynamic_slice, as_expr(x), as_expr(begin), as_expr(end), axes=axes_, strides=strides_
    )


def take(x: ExprLike, indices: ExprLike, axis: int | None = None) -> Call:
    """Elements of ``x`` at ``indices`` along ``axis`` (None: of the flattened ``x``)."""
    return call(
        ops.take, as_expr(x), as_expr(indices), axis=check_axis("take", axis, allow_none=True)
    )


def gather(x: ExprLike, indices: ExprLike, axis: int = 0) -> Call:
    """ONNX GatherElements / NumPy take_along_axis: ``out[i][j] = x[indices[i][j]][j]``."""
    return call(ops.gather, as_expr(x), as_expr(indices), axis=check_axis("gather", axis))


def gather_nd(x: ExprLike, indices: ExprLike, batch_dims: int = 0) -> Call:
    """ONNX GatherND: ``out[i] = x[tuple(indices[i])]`` for every index tuple along the last
    axis of ``indices``, after ``batch_dims`` leading axes matched one to one."""
    b = check_int("gather_nd", "batch_dims", batch_dims, minimum=0)
    return call(ops.gather_nd, as_expr(x), as_expr(indices), batch_dims=b)


_REDUCTIONS = ("none", "add", "mul", "max", "min")


def scatter_elements(
    x: ExprLike, indices: ExprLike, updates: ExprLike, axis: int = 0, reduction: str = "none"
) -> Call:
    """``x`` with ``updates[i][j]`` at ``[indices[i][j]][j]`` (axis 0), the inverse of
    ``gather``; ``reduction`` combines an update with the value there instead."""
    return call(
        ops.scatter_elements,
        as_expr(x),
        as_expr(indices),
        as_expr(updates),
        axis=check_axis("scatter_elements", axis),
        reduction=check_choice("scatter_elements", "reduction", reduction, _REDUCTIONS),
    )


def scatter_nd(x: ExprLike, indices: ExprLike, updates: ExprLike, reduction: str = "none") -> Call:
    """``x`` with the slice ``x[tuple(indices[i])]`` replaced by ``updates[i]`` (or combined by
    ``reduction``), the inverse of ``gather_nd``."""
    return call(
        ops.scatter_nd,
        as_expr(x),
        as_expr(indices),
        as_expr(updates),
        reduction=check_choice("scatter_nd", "reduction", reduction, _REDUCTIONS),
    )
