"""Tensor ONNX ops: Transpose, Concat, Split, Slice, Gather, GatherElements, Identity, Tile, Pad
and CumSum.

Indices, starts and sizes must be constants known at import (rvm takes them as static
attributes); values computed from ``Shape`` count when they are fully known ints. Slice bounds,
Tile's repeats, Pad's pads and CumSum's axis known only at run time make the ops of
`rvm.op.dynamic`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rvm import op
from rvm.frontend.onnx.context import NodeContext
from rvm.frontend.onnx.registry import converter
from rvm.ir import Constant, Expr, TupleGetItem
from rvm.op.manipulate import PAD_MODES

_LATEST = (21, 23, 24, 25)  # versions that only add types rvm lacks (float8, int4, ...)


@converter("Transpose", since=(1, 13, *_LATEST))
def _transpose(ctx: NodeContext) -> Expr:
    x, perm = ctx.input(0), ctx.attr("perm", None)
    if perm is not None:
        perm = [int(p) for p in perm]
        rank = ctx.type(x).ndim
        if sorted(perm) != list(range(len(perm) if rank is None else rank)):
            ctx.fail(f"perm {perm} is not a permutation of the axes of a rank-{rank} input")
    return ctx.emit(op.transpose(x, perm))


@converter("Concat", since=(4, 11, 13))
def _concat(ctx: NodeContext) -> Expr:
    args = [a for a in ctx.inputs if a is not None]
    return ctx.emit(op.concat(args, axis=ctx.attr("axis")))


@converter("Identity", since=(1, 13, 14, 16, 19, *_LATEST))
def _identity(ctx: NodeContext) -> Expr:
    return ctx.input(0)


@converter("Split", since=(2, 11, 13, 18))
def _split(ctx: NodeContext) -> list:
    x = ctx.input(0)
    shape = ctx.shape(x)
    axis = _axis(ctx, ctx.attr("axis", 0), len(shape))
    if ctx.version >= 13 and ctx.optional(1) is not None and ctx.const(1) is None:
        sizes_ = ctx.emit(op.cast(ctx.input(1), "int64"))  # read at run time
        pieces = ctx.emit(op.dynamic_split(x, sizes_, axis, len(ctx.node.output)))
        return [ctx.emit(TupleGetItem(pieces, i)) for i in range(len(ctx.node.output))]
    sizes = _split_sizes(ctx, shape[axis])
    if sizes:
        spec: list[int] | int = list(np.cumsum(sizes)[:-1].tolist())
    else:
        spec = len(ctx.node.output)
    pieces = ctx.emit(op.split(x, spec, axis=axis))
    return [ctx.emit(TupleGetItem(pieces, i)) for i in range(len(ctx.node.output))]


def _split_sizes(ctx: NodeContext, dim: Any) -> list[int] | None:
    """The sizes of Split's pieces, checked as ONNX's definition requires; None for equal
    pieces of an axis whose length is unknown at import."""
    count = len(ctx.node.output)
    sizes = ctx.attr("split", None) if ctx.version < 13 else ctx.ints(1, "split")
    pieces = ctx.attr("num_outputs", None) if ctx.version >= 18 else None
    if sizes and pieces is not None:
        ctx.fail("takes either the 'split' input or the 'num_outputs' attribute, not both")
    if sizes:
        sizes = [int(s) for s in sizes]
        if len(sizes) != count:
            ctx.fail(f"split {sizes} has {len(sizes)} sizes for {count} outputs")
        if any(s < 0 for s in sizes) or (isinstance(dim, int) and sum(sizes) != dim):
            ctx.fail(f"split sizes {sizes} must be >= 0 and sum to the axis length {dim}")
        return sizes
    if ctx.version >= 18:
        if pieces is None:
            ctx.fail("needs the 'split' input or the 'num_outputs' attribute")
        if pieces != count:
            ctx.fail(f"num_outputs is {pieces}, but the node has {count} outputs")
        if isinstance(dim, int) and dim % count:  # opset 18: the last piece is smaller
            chunk = math.ceil(dim / count)
            if chunk * (count - 1) > dim:
                ctx.fail(f"{count} pieces of an axis of length {dim} leave a negative last piece")
            return [chunk] * (count - 1) + [dim - chunk * (count - 1)]
    elif isinstance(dim, int) and dim % count:
        ctx.fail(f"an axis of length {dim} does not split evenly into {count} outputs")
    return None


def _axis(ctx: NodeContext, axis: int, rank: int) -> int:
    """``axis`` in [-rank, rank - 1] made non-negative; refused outside that range."""
    if not -rank <= axis < rank:
        ctx.fail(f"axis {axis} is out of range for rank {rank}: expected [-{rank}, {rank - 1}]")
    return axis % rank


@converter("Slice", since=1)
def _slice_v1(ctx: NodeContext) -> Expr:
    starts, ends = list(ctx.attr("starts")), list(ctx.attr("ends"))
    axes = list(ctx.attr("axes", range(len(starts))))
    return ctx.emit(op.strided_slice(ctx.input(0), starts, ends, None, axes))


@converter("Slice", since=(10, 11, 13))
def _slice(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    count = ctx.shape(ctx.input(1))[0]
    axes = ctx.ints(3, "axes") or list(range(count))
    steps = ctx.ints(4, "steps") or [1] * len(axes)
    rank = len(ctx.shape(x))
    axes = [a % rank for a in axes]
    if ctx.const(1) is None or ctx.const(2) is None:  # bounds computed at run time
        bounds = [ctx.emit(op.cast(ctx.input(k), "int64")) for k in (1, 2)]
        return ctx.emit(op.dynamic_slice(x, *bounds, axes=axes, strides=steps))
    starts, ends = ctx.ints(1, "starts"), ctx.ints(2, "ends")
    return ctx.emit(op.strided_slice(x, starts, ends, steps, axes))


@converter("Gather", since=(1, 11, 13))
def _gather(ctx: NodeContext) -> Expr:
    return ctx.emit(op.take(ctx.input(0), ctx.input(1), axis=ctx.attr("axis", 0)))


@converter("GatherElements", since=(11, 13))
def _gather_elements(ctx: NodeContext) -> Expr:
    return ctx.emit(op.gather(ctx.input(0), ctx.input(1), axis=ctx.attr("axis", 0)))


@converter("Tile", since=(6, 13))
def _tile(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    if ctx.const(1) is not None:
        return ctx.emit(op.tile(x, ctx.ints(1, "repeats")))
    known = ctx.shape_value(1)
    src = ctx.shape(x)
    reps = list(known) if known is not None and known.ndim == 1 else [None] * len(src)
    dims = [_tiled_dim(d, r) for d, r in zip(src, reps)]
    counts = ctx.emit(op.cast(ctx.input(1), "int64"))
    return ctx.emit(op.dynamic_tile(x, counts, dims))


def _tiled_dim(dim, rep):
    """The known size of ``dim`` repeated ``rep`` times (None: known only at run time)."""
    if rep == 1 or dim == 1:
        return dim if rep == 1 else rep
    if isinstance(dim, int) and isinstance(rep, int):
        return dim * rep
    return 0 if dim == 0 or rep == 0 else None


@converter("Pad", since=2)
def _pad_v2(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    widths = _pad_widths(ctx, x, list(ctx.attr("pads")), None)
    return ctx.emit(op.pad(x, widths, ctx.attr("value", 0.0), mode=_pad_mode(ctx)))


@converter("Pad", since=(11, 13, 18, 19, *_LATEST))
def _pad_v11(ctx: NodeContext) -> Expr:
    x, value = ctx.input(0), ctx.optional(2)
    if ctx.const(1) is None:  # pads read at run time (negative ones crop)
        pads = ctx.emit(op.cast(ctx.input(1), "int64"))
        fill = value if value is not None else Constant(np.zeros((), _dtype_of(ctx, x)))
        axes = ctx.ints(3, "axes")
        return ctx.emit(op.dynamic_pad(x, pads, fill, axes, mode=_pad_mode(ctx)))
    widths = _pad_widths(ctx, x, ctx.ints(1, "pads"), ctx.ints(3, "axes"))
    mode = _pad_mode(ctx)
    if value is None or mode != "constant" or ctx.const(2) is not None:
        fill = 0 if value is None or ctx.const(2) is None else ctx.const(2).item()
        return ctx.emit(op.pad(x, widths, fill, mode=mode))
    # A constant_value known only at run time: the padded elements are where a padded mask of
    # the input's shape is False (the mask folds to a constant when the shape is static).
    mask = op.pad(op.full(ctx.shape(x), True, "bool"), widths, False)
    return ctx.emit(op.where(mask, op.pad(x, widths), op.reshape(value, ())))


def _dtype_of(ctx: NodeContext, x: Expr) -> str:
    """The dtype of tensor ``x``, which must be known."""
    dtype = ctx.type(x).dtype
    if dtype is None:
        ctx.fail("needs an input of known dtype")
    return dtype


def _pad_mode(ctx: NodeContext) -> str:
    mode = ctx.attr("mode", "constant")
    if mode not in PAD_MODES:
        ctx.fail(f"unknown mode {mode!r}; expected one of {', '.join(PAD_MODES)}")
    return mode


def _pad_widths(
    ctx: NodeContext, x: Expr, pads: list[int], axes: list[int] | None
) -> list[list[int]]:
    """ONNX pads (begin..., end...) over ``axes`` as a (before, after) pair per axis."""
    rank = len(ctx.shape(x))
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    n = len(axes)
    if len(pads) != 2 * n:
        ctx.fail(f"pads must have {2 * n} values, got {pads}")
    if any(p < 0 for p in pads):
        ctx.fail(f"negative pads (cropping) are not supported, got {pads}")
    widths = [[0, 0] for _ in range(rank)]
    for i, a in enumerate(axes):
        widths[a] = [pads[i], pads[i + n]]
    return widths


@converter("CumSum", since=(11, 14))
def _cumsum(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    if ctx.const(1) is None:  # the axis read at run time
        axis_ = ctx.emit(op.cast(ctx.input(1), "int64"))
        flags = bool(ctx.attr("exclusive", 0)), bool(ctx.attr("reverse", 0))
        return ctx.emit(op.dynamic_scan(x, axis_, "sum", *flags))
    axis = ctx.ints(1, "axis")
    if axis is None or len(axis) != 1:
        ctx.fail("axis must be a constant scalar")
    exclusive = bool(ctx.attr("exclusive", 0))
    if not ctx.attr("reverse", 0):
        return ctx.emit(op.cumsum(x, axis=axis[0], exclusive=exclusive))
    backwards = [-1], [-(2**63)], [-1], [axis[0]]
    flipped = op.strided_slice(x, *backwards)
    out = op.cumsum(flipped, axis=axis[0], exclusive=exclusive)
    return ctx.emit(op.strided_slice(out, *backwards))
