"""Ops whose shape is a tensor computed at run time: reshape, expand, full, arange and tile;
and reductions over axes read at run time.

A shape that depends on the inputs' symbolic dimensions (``Shape(x)[1] * 4``, ``past + seq``)
or on data cannot be a static attribute. These ops take it as a 1-d int64 tensor input (the
bounds of ``dynamic_arange`` as 0-d tensors) and carry in ``dims`` what is known of the result
when the program is built: an int, a symbolic name, or None (computed at run time) per
dimension. The type rule reads ``dims``; the reference computes the result from the run-time
shape and checks it against ``dims`` (names arrive resolved to the bound sizes), so a shape
that contradicts what the program promised is an error at run time, not a wrong tensor.
They are opaque: kernels never fuse them and the VM allocates their results by their run-time
size. ``dynamic_slice`` (`rvm.op.index`) is the slicing member of the family.

``dynamic_reduce`` reduces over axes given as a 1-d integer tensor (ONNX's ReduceSum and
friends take them as an input): its rank is known from the number of axes, its dims are not.
The other ops that ONNX gives a parameter as a tensor take it the same way: ``dynamic_trilu``
(the diagonal), ``dynamic_scan`` (cumsum/cumprod's axis), ``dynamic_topk`` (k),
``dynamic_pad`` (the pads, negative ones crop, and the fill value), ``dynamic_resize``
(ONNX Resize's roi, scales and sizes), ``dynamic_split`` (the sizes) and
``dynamic_squeeze``/``dynamic_unsqueeze`` (the axes).
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm.errors import IRError
from rvm.ir.expr import Call
from rvm.ir.op import OpPattern
from rvm.ir.types import INT_DTYPES, Dim, Shape, TensorType, TupleType, Type, check_dim
from rvm.op import ops
from rvm.op.core import (
    ExprLike,
    as_expr,
    call,
    check_choice,
    check_dtype_attr,
    check_int,
    check_scalar,
    define_op,
)
from rvm.op.image import interpolation_attrs
from rvm.op.manipulate import PAD_MODES
from rvm.op.shapes import fmt, normalize_axes, rule

__all__ = [
    "DYNAMIC_OPS",
    "REDUCERS",
    "dynamic_arange",
    "dynamic_expand",
    "dynamic_full",
    "dynamic_pad",
    "dynamic_reduce",
    "dynamic_reshape",
    "dynamic_resize",
    "dynamic_scan",
    "dynamic_split",
    "dynamic_squeeze",
    "dynamic_tile",
    "dynamic_topk",
    "dynamic_trilu",
    "dynamic_unsqueeze",
]

# The ops of this module (`rvm.op.core.define_op`).
define_op("dynamic_reshape", OpPattern.OPAQUE, 2)
define_op("dynamic_expand", OpPattern.OPAQUE, 2)
define_op("dynamic_full", OpPattern.OPAQUE, 1)
define_op("dynamic_arange", OpPattern.OPAQUE, 3)
define_op("dynamic_tile", OpPattern.OPAQUE, 2)
define_op("dynamic_reduce", OpPattern.OPAQUE, 2)
define_op("dynamic_trilu", OpPattern.OPAQUE, 2)
define_op("dynamic_scan", OpPattern.OPAQUE, 2)
define_op("dynamic_topk", OpPattern.OPAQUE, 2)
define_op("dynamic_pad", OpPattern.OPAQUE, 3)
define_op("dynamic_resize", OpPattern.OPAQUE, 4)
define_op("dynamic_split", OpPattern.OPAQUE, 2)
define_op("dynamic_squeeze", OpPattern.OPAQUE, 2)
define_op("dynamic_unsqueeze", OpPattern.OPAQUE, 2)

DYNAMIC_OPS = frozenset(
    {
        "dynamic_arange",
        "dynamic_expand",
        "dynamic_full",
        "dynamic_pad",
        "dynamic_reduce",
        "dynamic_reshape",
        "dynamic_resize",
        "dynamic_scan",
        "dynamic_slice",
        "dynamic_split",
        "dynamic_squeeze",
        "dynamic_tile",
        "dynamic_topk",
        "dynamic_trilu",
        "dynamic_unsqueeze",
    }
)
"""The ops whose result shape is read from data at run time (`rvm.op.index.dynamic_slice`
too): a kernel that writes one into an output planned from its type checks it fits exactly."""

REDUCERS = ("sum", "mean", "max", "min", "prod")
"""The reductions `dynamic_reduce` applies: the ops of those names (`rvm.op.reduce`)."""


def _check_dims(op: str, dims: Sequence[Dim]) -> Shape:
    """``dims`` as a tuple of dimensions (ints >= 0, names, None)."""
    try:
        return tuple(check_dim(d) for d in dims)
    except IRError as err:
        raise IRError(f"{op}: bad dims {tuple(dims)!r}: {err}") from None


def _check_int_tensor(op: str, what: str, ty: TensorType) -> None:
    """A run-time parameter must be an integer tensor (its dtype unknown passes)."""
    if ty.dtype is not None and ty.dtype not in INT_DTYPES:
        raise IRError(f"{op}: {what} must be an integer tensor, got {ty.dtype}")


def _check_shape_input(op: str, shape: TensorType, rank: int | None) -> None:
    """A run-time shape: a 1-d integer tensor of ``rank`` elements (None: any number)."""
    _check_int_tensor(op, "the shape", shape)
    if shape.shape is not None and (
        len(shape.shape) != 1 or shape.shape[0] not in (rank, None) and rank is not None
    ):
        count = "" if rank is None else f" of {rank} dims"
        raise IRError(f"{op}: the shape must be a 1-d tensor{count}, got shape {fmt(shape.shape)}")


def _unknown_axes(op: str, shape: Shape | None, axes: Sequence[int] | None) -> Shape | None:
    """``shape`` with the sizes on ``axes`` (None: every axis) unknown: they are read at run
    time."""
    if shape is None:
        return None
    axes_ = range(len(shape)) if axes is None else normalize_axes(op, axes, len(shape))
    return tuple(None if i in axes_ else d for i, d in enumerate(shape))


@rule(ops.dynamic_reshape)
def _infer_dynamic_reshape(call_: Call, args: list[TensorType]) -> Type:
    x, shape = args
    dims = call_.attrs["dims"]
    _check_shape_input("dynamic_reshape", shape, len(dims))
    return TensorType(dims, x.dtype)


@rule(ops.dynamic_expand)
def _infer_dynamic_expand(call_: Call, args: list[TensorType]) -> Type:
    x, shape = args
    dims = call_.attrs["dims"]
    if x.shape is not None and len(x.shape) > len(dims):
        raise IRError(f"dynamic_expand: cannot expand rank {len(x.shape)} to dims {dims}")
    _check_shape_input("dynamic_expand", shape, None)
    return TensorType(dims, x.dtype)


@rule(ops.dynamic_full)
def _infer_dynamic_full(call_: Call, args: list[TensorType]) -> Type:
    (shape,) = args
    dims = call_.attrs["dims"]
    _check_shape_input("dynamic_full", shape, len(dims))
    return TensorType(dims, call_.attrs["dtype"])


@rule(ops.dynamic_arange)
def _infer_dynamic_arange(call_: Call, args: list[TensorType]) -> Type:
    for what, bound in zip(("start", "stop", "step"), args):
        if bound.shape is not None and bound.shape != ():
            raise IRError(f"dynamic_arange: {what} must be 0-d, got shape {fmt(bound.shape)}")
    return TensorType((call_.attrs["length"],), call_.attrs["dtype"])


@rule(ops.dynamic_tile)
def _infer_dynamic_tile(call_: Call, args: list[TensorType]) -> Type:
    x, reps = args
    dims = call_.attrs["dims"]
    _check_shape_input("dynamic_tile", reps, len(dims))
    if x.shape is not None and len(x.shape) != len(dims):
        raise IRError(f"dynamic_tile: {len(dims)} repeats for a tensor of rank {len(x.shape)}")
    return TensorType(dims, x.dtype)


def dynamic_reshape(
    x: ExprLike, shape: ExprLike, dims: Sequence[Dim], allowzero: bool = False
) -> Call:
    """``x`` reshaped to the 1-d integer tensor ``shape`` (ONNX Reshape: one -1 is inferred;
    a 0 copies ``x``'s dimension unless ``allowzero``); ``dims``: what is known of the result."""
    op = "dynamic_reshape"
    return call(
        ops.dynamic_reshape,
        as_expr(x),
        as_expr(shape),
        dims=_check_dims(op, dims),
        allowzero=bool(allowzero),
    )


def dynamic_expand(x: ExprLike, shape: ExprLike, dims: Sequence[Dim]) -> Call:
    """``x`` broadcast with the 1-d integer tensor ``shape`` (ONNX Expand: both ways, so a
    1 in ``shape`` keeps ``x``'s dimension); ``dims``: what is known of the result."""
    dims_ = _check_dims("dynamic_expand", dims)
    return call(ops.dynamic_expand, as_expr(x), as_expr(shape), dims=dims_)


def dynamic_full(
    shape: ExprLike, fill_value: float | int | bool, dtype: str, dims: Sequence[Dim]
) -> Call:
    """A tensor of the 1-d integer tensor ``shape`` filled with ``fill_value``."""
    op = "dynamic_full"
    return call(
        ops.dynamic_full,
        as_expr(shape),
        fill_value=check_scalar(op, "fill_value", fill_value),
        dtype=check_dtype_attr(op, dtype),
        dims=_check_dims(op, dims),
    )


def dynamic_arange(
    start: ExprLike, stop: ExprLike, step: ExprLike, dtype: str, length: Dim = None
) -> Call:
    """``start, start + step, ...`` below ``stop``, the bounds being 0-d tensors read at run
    time (step 0 is an error then); ``length``: the count when known (an int or a name)."""
    op = "dynamic_arange"
    (length_,) = _check_dims(op, (length,))
    return call(
        ops.dynamic_arange,
        as_expr(start),
        as_expr(stop),
        as_expr(step),
        dtype=check_dtype_attr(op, dtype),
        length=length_,
    )


def dynamic_tile(x: ExprLike, reps: ExprLike, dims: Sequence[Dim]) -> Call:
    """``x`` repeated along each axis by the 1-d integer tensor ``reps``."""
    return call(ops.dynamic_tile, as_expr(x), as_expr(reps), dims=_check_dims("dynamic_tile", dims))


@rule(ops.dynamic_reduce)
def _infer_dynamic_reduce(call_: Call, args: list[TensorType]) -> Type:
    x, axes = args
    a = call_.attrs
    count = _axes_count("dynamic_reduce", axes)
    dtype = "int64" if x.dtype == "bool" and a["reducer"] in ("sum", "prod") else x.dtype
    if x.shape is None or count is None:
        shape = x.shape if x.shape is not None and a["keepdims"] else None
        if shape is not None:
            shape = tuple(1 if d == 1 else None for d in shape)
        return TensorType(shape, dtype)
    if count == 0:  # every axis, or none
        if a["noop_with_empty_axes"]:
            return TensorType(x.shape, dtype)
        return TensorType((1,) * len(x.shape) if a["keepdims"] else (), dtype)
    if count > len(x.shape):
        raise IRError(f"dynamic_reduce: {count} axes for a tensor of rank {len(x.shape)}")
    if a["keepdims"]:
        return TensorType(tuple(1 if d == 1 else None for d in x.shape), dtype)
    return TensorType((None,) * (len(x.shape) - count), dtype)


def dynamic_reduce(
    x: ExprLike,
    axes: ExprLike,
    reducer: str,
    keepdims: bool = True,
    noop_with_empty_axes: bool = False,
) -> Call:
    """``reducer`` (one of `REDUCERS`) of ``x`` over ``axes``, a 1-d integer tensor read at
    run time (negative axes count from the end). No axes reduce every axis, or none with
    ``noop_with_empty_axes`` (ONNX)."""
    if reducer not in REDUCERS:
        raise IRError(
            f"dynamic_reduce: reducer must be one of {', '.join(REDUCERS)}, got {reducer!r}"
        )
    return call(
        ops.dynamic_reduce,
        as_expr(x),
        as_expr(axes),
        reducer=reducer,
        keepdims=bool(keepdims),
        noop_with_empty_axes=bool(noop_with_empty_axes),
    )


def _check_scalar_input(op: str, what: str, value: TensorType) -> None:
    """A run-time integer parameter: a 0-d or one-element 1-d integer tensor."""
    _check_int_tensor(op, what, value)
    if value.shape is not None and value.shape not in ((), (1,), (None,)):
        raise IRError(f"{op}: {what} must hold one value, got shape {fmt(value.shape)}")


@rule(ops.dynamic_trilu)
def _infer_dynamic_trilu(call_: Call, args: list[TensorType]) -> Type:
    x, k = args
    _check_scalar_input("dynamic_trilu", "k", k)
    if x.shape is not None and len(x.shape) < 2:
        raise IRError(f"dynamic_trilu: expects a tensor of rank >= 2, got {fmt(x.shape)}")
    return x


@rule(ops.dynamic_scan)
def _infer_dynamic_scan(call_: Call, args: list[TensorType]) -> Type:
    x, axis = args
    _check_scalar_input("dynamic_scan", "axis", axis)
    return TensorType(x.shape, "int64" if x.dtype == "bool" else x.dtype)


@rule(ops.dynamic_topk)
def _infer_dynamic_topk(call_: Call, args: list[TensorType]) -> Type:
    x, k = args
    _check_scalar_input("dynamic_topk", "k", k)
    shape = _unknown_axes("dynamic_topk", x.shape, (call_.attrs["axis"],))
    return TupleType((TensorType(shape, x.dtype), TensorType(shape, "int64")))


@rule(ops.dynamic_pad)
def _infer_dynamic_pad(call_: Call, args: list[TensorType]) -> Type:
    x, pads, value = args
    _check_shape_input("dynamic_pad", pads, None)
    if value.shape is not None and value.shape not in ((), (1,)):
        raise IRError(f"dynamic_pad: the value must be one element, got shape {fmt(value.shape)}")
    return TensorType(_unknown_axes("dynamic_pad", x.shape, call_.attrs["axes"]), x.dtype)


def dynamic_trilu(x: ExprLike, k: ExprLike, upper: bool = True) -> Call:
    """`rvm.op.trilu` from the diagonal ``k`` read at run time (a one-element int tensor)."""
    return call(ops.dynamic_trilu, as_expr(x), as_expr(k), upper=bool(upper))


def dynamic_scan(
    x: ExprLike, axis: ExprLike, reducer: str, exclusive: bool = False, reverse: bool = False
) -> Call:
    """The running ``reducer`` ("sum" or "prod") of ``x`` along the axis read at run time;
    ``reverse`` runs from the end (ONNX CumSum and CumProd)."""
    if reducer not in ("sum", "prod"):
        raise IRError(f"dynamic_scan: reducer must be sum or prod, got {reducer!r}")
    return call(
        ops.dynamic_scan,
        as_expr(x),
        as_expr(axis),
        reducer=reducer,
        exclusive=bool(exclusive),
        reverse=bool(reverse),
    )


def dynamic_topk(
    x: ExprLike, k: ExprLike, axis: int = -1, largest: bool = True, sorted: bool = True
) -> Call:
    """`rvm.op.topk` of the ``k`` read at run time: (values, int64 indices)."""
    axis = check_int("dynamic_topk", "axis", axis)
    return call(
        ops.dynamic_topk,
        as_expr(x),
        as_expr(k),
        axis=axis,
        largest=bool(largest),
        sorted=bool(sorted),
    )


def dynamic_pad(
    x: ExprLike,
    pads: ExprLike,
    value: ExprLike,
    axes: Sequence[int] | None = None,
    mode: str = "constant",
) -> Call:
    """``x`` padded by ``pads``, a 1-d integer tensor read at run time in ONNX's order (every
    begin, then every end, over ``axes``: None for all); a negative pad crops. ``value`` (one
    element) fills in "constant" mode; the other modes are `rvm.op.pad`'s."""
    if mode not in PAD_MODES:
        raise IRError(f"dynamic_pad: unknown mode {mode!r}; expected one of {', '.join(PAD_MODES)}")
    axes_ = None if axes is None else tuple(int(a) for a in axes)
    return call(
        ops.dynamic_pad, as_expr(x), as_expr(pads), as_expr(value, x), axes=axes_, mode=mode
    )


ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


@rule(ops.dynamic_resize)
def _infer_dynamic_resize(call_: Call, args: list[TensorType]) -> Type:
    x = args[0]
    for what, value in zip(("roi", "scales", "sizes"), args[1:]):
        if value.shape is not None and len(value.shape) != 1:
            raise IRError(f"dynamic_resize: {what} must be 1-d, got shape {fmt(value.shape)}")
    _check_int_tensor("dynamic_resize", "sizes", args[3])
    return TensorType(_unknown_axes("dynamic_resize", x.shape, call_.attrs["axes"]), x.dtype)


def dynamic_resize(
    x: ExprLike,
    roi: ExprLike,
    scales: ExprLike,
    sizes: ExprLike,
    axes: Sequence[int] | None = None,
    keep_aspect_ratio_policy: str = "stretch",
    mode: str = "nearest",
    coordinate_transformation_mode: str = "half_pixel",
    nearest_mode: str = "round_prefer_floor",
    cubic_coeff_a: float = -0.75,
    exclude_outside: bool = False,
    extrapolation_value: float = 0.0,
    antialias: bool = False,
) -> Call:
    """ONNX Resize with ``roi``, ``scales`` and ``sizes`` read at run time (1-d tensors over
    ``axes``, None for all; an empty one is absent): the output has ``floor(scale * size)``
    elements per axis, or ``sizes`` under ``keep_aspect_ratio_policy``. The other
    attributes are `rvm.op.resize`'s."""
    op = "dynamic_resize"
    return call(
        ops.dynamic_resize,
        as_expr(x),
        as_expr(roi),
        as_expr(scales),
        as_expr(sizes),
        axes=None if axes is None else tuple(int(a) for a in axes),
        keep_aspect_ratio_policy=check_choice(
            op, "keep_aspect_ratio_policy", keep_aspect_ratio_policy, ASPECT_POLICIES
        ),
        **interpolation_attrs(
            op,
            mode,
            coordinate_transformation_mode,
            nearest_mode,
            cubic_coeff_a,
            exclude_outside,
            extrapolation_value,
            antialias,
        ),
    )


def _axes_count(op: str, axes: TensorType) -> int | None:
    """How many axes a run-time axes tensor holds (None: unknown); it must be 1-d integer."""
    _check_int_tensor(op, "axes", axes)
    if axes.shape is None:
        return None
    if len(axes.shape) != 1:
        raise IRError(f"{op}: axes must be a 1-d tensor, got shape {fmt(axes.shape)}")
    return axes.shape[0]


@rule(ops.dynamic_squeeze)
def _infer_dynamic_squeeze(call_: Call, args: list[TensorType]) -> Type:
    x, axes = args
    count = _axes_count("dynamic_squeeze", axes)
    if x.shape is None or count is None:
        return TensorType(None, x.dtype)
    if count > len(x.shape):
        raise IRError(f"dynamic_squeeze: {count} axes for a tensor of rank {len(x.shape)}")
    return TensorType((None,) * (len(x.shape) - count), x.dtype)


@rule(ops.dynamic_unsqueeze)
def _infer_dynamic_unsqueeze(call_: Call, args: list[TensorType]) -> Type:
    x, axes = args
    count = _axes_count("dynamic_unsqueeze", axes)
    if x.shape is None or count is None:
        return TensorType(None, x.dtype)
    return TensorType((None,) * (len(x.shape) + count), x.dtype)


@rule(ops.dynamic_split)
def _infer_dynamic_split(call_: Call, args: list[TensorType]) -> Type:
    x, sizes = args
    count = call_.attrs["count"]
    _check_shape_input("dynamic_split", sizes, count)
    shape = _unknown_axes("dynamic_split", x.shape, (call_.attrs["axis"],))
    return TupleType((TensorType(shape, x.dtype),) * count)


def dynamic_squeeze(x: ExprLike, axes: ExprLike) -> Call:
    """``x`` without the axes of size 1 listed in ``axes``, a 1-d int tensor read at run time."""
    return call(ops.dynamic_squeeze, as_expr(x), as_expr(axes))


def dynamic_unsqueeze(x: ExprLike, axes: ExprLike) -> Call:
    """``x`` with new axes of size 1 at the positions of the result in ``axes``, read at run
    time (ONNX Unsqueeze)."""
    return call(ops.dynamic_unsqueeze, as_expr(x), as_expr(axes))


def dynamic_split(x: ExprLike, sizes: ExprLike, axis: int, count: int) -> Call:
    """``x`` cut along ``axis`` into ``count`` pieces of the sizes in ``sizes``, a 1-d int
    tensor read at run time that must add up to the axis."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise IRError(f"dynamic_split: count must be a positive int, got {count!r}")
    axis = check_int("dynamic_split", "axis", axis)
    return call(ops.dynamic_split, as_expr(x), as_expr(sizes), axis=axis, count=count)
