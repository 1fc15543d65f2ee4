"""Creation and indexing ATen ops: full, arange, embedding, index, gather, scatter, sort.

``arange`` to a symbolic end counts with a cumulative sum over ``ones((n,))``: the symbol
comes from an input's shape, so one compiled program serves every length.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rvm import op
from rvm.frontend.torch.context import NodeContext, SymInt
from rvm.frontend.torch.registry import converter
from rvm.ir import Expr, TupleGetItem


def _fill(ctx: NodeContext, value: Any) -> Any:
    dtype = ctx.out_dtype()
    if isinstance(value, SymInt):
        value = value.static if value.static is not None else value
    if isinstance(value, (int, float, bool)):
        return bool(value) if dtype == "bool" else float(value) if "float" in dtype else int(value)
    return value


def _full(ctx: NodeContext, value: Any) -> Expr:
    shape = ctx.out_shape()
    if None in shape:
        ctx.fail(f"cannot name the shape {ctx.val.shape}")
    fill = _fill(ctx, value)
    if isinstance(fill, (Expr, SymInt)):
        return ctx.emit(op.broadcast_to(ctx.scalar(fill, ctx.out_dtype()), list(shape)))
    return ctx.emit(op.full(list(shape), fill, ctx.out_dtype()))


@converter("aten.full.default")
def _full_default(ctx: NodeContext, size: list, fill_value: Any, **_: Any) -> Expr:
    return _full(ctx, fill_value)


@converter("aten.full_like.default", "aten.fill.Scalar")
def _full_like(ctx: NodeContext, x: Expr, fill_value: Any, **_: Any) -> Expr:
    return _full(ctx, fill_value)


@converter("aten.zeros.default", "aten.empty.memory_format", "aten.empty_strided.default")
def _zeros(ctx: NodeContext, size: list, *rest: Any, **_: Any) -> Expr:
    return _full(ctx, 0)


@converter("aten.ones.default")
def _ones(ctx: NodeContext, size: list, **_: Any) -> Expr:
    return _full(ctx, 1)


@converter("aten.zeros_like.default", "aten.empty_like.default")
def _zeros_like(ctx: NodeContext, x: Expr, **_: Any) -> Expr:
    return _full(ctx, 0)


@converter("aten.arange.start_step", "aten.arange.default", "aten.arange.start")
def _arange(ctx: NodeContext, *bounds: Any, **_: Any) -> Expr:
    start, end, step = (0, bounds[0], 1) if len(bounds) == 1 else (*bounds, 1)[:3]
    dtype = ctx.out_dtype()
    static = [b.static if isinstance(b, SymInt) else b for b in (start, end, step)]
    if all(isinstance(b, (int, float)) for b in static):
        return ctx.emit(op.arange(*static, dtype=dtype))
    n = ctx.out_shape()[0]
    if n is None:
        ctx.fail(f"cannot name the length {ctx.val.shape[0]} of arange")
    count = ctx.emit(op.cumsum(op.ones([n], dtype), axis=0, exclusive=True))
    out = count
    if static[2] != 1:
        out = ctx.emit(op.multiply(out, ctx.scalar(step, dtype)))
    if static[0] != 0:
        out = ctx.emit(op.add(out, ctx.scalar(start, dtype)))
    return out


@converter("aten.embedding.default")
def _embedding(ctx: NodeContext, weight: Expr, indices: Expr, *_: Any) -> Expr:
    return ctx.emit(op.take(weight, indices, axis=0))


@converter("aten.index_select.default")
def _index_select(ctx: NodeContext, x: Expr, dim: int, index: Expr) -> Expr:
    if ctx.rank(x) == 0:
        return x
    return ctx.emit(op.take(x, index, axis=dim % ctx.rank(x)))


@converter("aten.gather.default")
def _gather(ctx: NodeContext, x: Expr, dim: int, index: Expr, **_: Any) -> Expr:
    if ctx.rank(x) == 0:
        return x
    return ctx.emit(op.gather(x, index, axis=dim % ctx.rank(x)))


def axis_size(ctx: NodeContext, x: Expr, axis: int) -> Any:
    """The size of ``x`` along ``axis``: an int, else a run-time 0-d int64 tensor."""
    size = ctx.shape(x)[axis]
    if isinstance(size, int):
        return size
    return ctx.emit(op.take(op.shape_of(x), ctx.scalar(axis, "int64")))


def _wrapped(ctx: NodeContext, index: Expr, size: Any) -> Expr:
    index = ctx.cast(index, "int64")
    return ctx.emit(op.where(op.less(index, 0), op.add(index, size), index))


@converter("aten.index.Tensor")
def _index(ctx: NodeContext, x: Expr, indices: list) -> Expr:
    """Advanced indexing by a run of index tensors (after leading full slices)."""
    used = [i for i, t in enumerate(indices) if t is not None]
    if any(ctx.dtype_of(indices[i]) == "bool" for i in used):
        ctx.fail("boolean mask indexing has a data-dependent shape")
    if used != list(range(used[0], used[-1] + 1)):
        ctx.fail("index tensors separated by full slices are not supported")
    first, count = used[0], len(used)
    if count == 1:
        return ctx.emit(op.take(x, indices[first], axis=first))
    rank = ctx.rank(x)
    out = ctx.out_shape()
    nb = len(out) - (rank - count)  # the broadcast index's rank
    bshape = list(out[first : first + nb])
    if None in bshape:
        ctx.fail(f"cannot name the broadcast index shape {ctx.val.shape}")
    parts = []
    for i in used:
        idx = _wrapped(ctx, indices[i], axis_size(ctx, x, i))
        if ctx.shape(idx) != tuple(bshape):
            idx = ctx.emit(op.broadcast_to(idx, bshape))
        parts.append(ctx.emit(op.expand_dims(idx, -1)))
    stacked = ctx.emit(op.concat(parts, axis=-1))
    if first:  # the indexed axes first, for gather_nd
        perm = [*used, *range(first), *range(first + count, rank)]
        x = ctx.emit(op.transpose(x, perm))
    y = ctx.emit(op.gather_nd(x, stacked))
    if first:  # gather_nd gives (index..., before..., after...): the index dims back in place
        perm = [*range(nb, nb + first), *range(nb), *range(nb + first, len(out))]
        y = ctx.emit(op.transpose(y, perm))
    return y


@converter("aten.index_put.default")
def _index_put(
    ctx: NodeContext, x: Expr, indices: list, values: Expr, accumulate: bool = False
) -> Expr:
    """``x[indices] = values`` (``+=`` with ``accumulate``): a run of integer index tensors
    after leading full slices becomes a ``scatter_nd``; one boolean mask a ``where``."""
    used = [i for i, t in enumerate(indices) if t is not None]
    values = ctx.cast(values, ctx.out_dtype())
    if len(used) == 1 and ctx.dtype_of(indices[used[0]]) == "bool":
        return _masked_put(ctx, x, used[0], indices[used[0]], values, accumulate)
    if any(ctx.dtype_of(indices[i]) == "bool" for i in used):
        ctx.fail("a boolean mask with other index tensors is not supported")
    if not used or used != list(range(used[0], used[-1] + 1)):
        ctx.fail("index tensors separated by full slices are not supported")
    first, count, rank = used[0], len(used), ctx.rank(x)
    shapes = [ctx.shape(indices[i]) for i in used]
    if all(isinstance(d, int) for sh in shapes for d in sh):
        bshape = list(np.broadcast_shapes(*shapes))
    elif all(sh == shapes[0] for sh in shapes):
        bshape = list(shapes[0])
    else:
        ctx.fail(f"cannot name the broadcast shape of index tensors {shapes}")
    parts = []
    for i in used:
        idx = _wrapped(ctx, indices[i], axis_size(ctx, x, i))
        if ctx.shape(idx) != tuple(bshape):
            idx = ctx.emit(op.broadcast_to(idx, bshape))
        parts.append(ctx.emit(op.expand_dims(idx, -1)))
    stacked = ctx.emit(op.concat(parts, axis=-1))
    perm = [*used, *range(first), *range(first + count, rank)]
    if first:  # the indexed axes first, for scatter_nd
        x = ctx.emit(op.transpose(x, perm))
    xs = ctx.shape(x)
    rows = bshape + list(xs[count:])
    if first:  # torch's values follow x's order (before..., index..., after...)
        vrows = list(xs[count : count + first]) + bshape + list(xs[count + first :])
        values = _broadcast(ctx, values, vrows)
        nb = len(bshape)
        vperm = [*range(first, first + nb), *range(first), *range(first + nb, len(vrows))]
        values = ctx.emit(op.transpose(values, vperm))
    values = _broadcast(ctx, values, rows)
    reduction = "add" if accumulate else "none"
    y = ctx.emit(op.scatter_nd(x, stacked, values, reduction=reduction))
    if first:
        y = ctx.emit(op.transpose(y, [perm.index(a) for a in range(rank)]))
    return y


def _broadcast(ctx: NodeContext, values: Expr, shape: list) -> Expr:
    if ctx.shape(values) == tuple(shape):
        return values
    return ctx.emit(op.broadcast_to(values, shape))


def _masked_put(
    ctx: NodeContext, x: Expr, axis: int, mask: Expr, values: Expr, accumulate: bool
) -> Expr:
    """``x[..., mask] = values``: values that broadcast over the axes after the mask by a
    ``where``, one row per true cell of a mask on the leading axes by a ``scatter_nd`` at the
    mask's ``nonzero`` positions."""
    vshape = ctx.shape(values)
    rank, mrank = ctx.rank(x), ctx.rank(mask)
    trailing = rank - axis - mrank  # values that fit the axes after the mask broadcast
    if not all(d == 1 for d in vshape) and len(vshape) > trailing:
        if axis:
            ctx.fail("a boolean mask after full slices with several values is not supported")
        where = ctx.emit(op.transpose(op.nonzero(mask), [1, 0]))
        reduction = "add" if accumulate else "none"
        return ctx.emit(op.scatter_nd(x, where, values, reduction=reduction))
    if axis:
        mask = ctx.emit(op.reshape(mask, [1] * axis + list(ctx.shape(mask))))
    if rank > axis + mrank:
        mask = ctx.emit(op.expand_dims(mask, list(range(axis + mrank, rank))))
    if all(d == 1 for d in vshape):
        values = ctx.emit(op.reshape(values, []))
    if accumulate:
        zero = ctx.scalar(0, ctx.out_dtype())
        return ctx.emit(op.add(x, op.where(mask, values, zero)))
    return ctx.emit(op.where(mask, values, x))


@converter("aten.scatter.src", "aten.scatter.value", "aten.scatter_add.default")
def _scatter(ctx: NodeContext, x: Expr, dim: int, index: Expr, src: Any, **kw: Any) -> Expr:
    if ctx.rank(x) == 0:
        return ctx.scalar(src, ctx.out_dtype()) if "add" not in str(ctx.node.target) else x
    if not isinstance(src, Expr):
        src = ctx.emit(op.broadcast_to(ctx.scalar(src, ctx.out_dtype()), list(ctx.shape(index))))
    elif ctx.shape(src) != ctx.shape(index):
        shape = ctx.shape(index)
        src = ctx.emit(op.strided_slice(src, [0] * len(shape), list(shape)))
    reduction = "add" if "scatter_add" in str(ctx.node.target) else kw.get("reduce") or "none"
    reduction = {"multiply": "mul"}.get(reduction, reduction)
    return ctx.emit(
        op.scatter_elements(
            x, index, ctx.cast(src, ctx.out_dtype()), axis=dim % ctx.rank(x), reduction=reduction
        )
    )


@converter("aten.scatter_reduce.two")
def _scatter_reduce(
    ctx: NodeContext,
    x: Expr,
    dim: int,
    index: Expr,
    src: Expr,
    reduce: str,
    include_self: bool = True,
) -> Expr:
    names = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min", "mean": "add"}
    if reduce not in names:
        ctx.fail(f"reduce={reduce!r} is not supported")
    axis, dtype = dim % max(ctx.rank(x), 1), ctx.out_dtype()
    if ctx.rank(x) == 0:
        ctx.fail("scatter_reduce of a 0-d tensor is not supported")
    if reduce == "mean" and dtype not in ("float32", "float64", "float16"):
        ctx.fail(f"reduce='mean' of {dtype} (torch divides with floor) is not supported")
    base = x
    if not include_self:  # the scattered cells start from the reduction's identity
        fill = _identity(reduce, dtype)
        fills = ctx.emit(op.broadcast_to(ctx.scalar(fill, dtype), list(ctx.shape(index))))
        base = ctx.emit(op.scatter_elements(x, index, fills, axis=axis))
    out = ctx.emit(op.scatter_elements(base, index, src, axis=axis, reduction=names[reduce]))
    if reduce != "mean":
        return out
    ones = ctx.emit(op.broadcast_to(ctx.scalar(1, dtype), list(ctx.shape(index))))
    start = ctx.scalar(1 if include_self else 0, dtype)
    counts = ctx.emit(op.broadcast_to(start, list(ctx.shape(x))))
    counts = ctx.emit(op.scatter_elements(counts, index, ones, axis=axis, reduction="add"))
    mean = ctx.emit(op.divide(out, op.maximum(counts, ctx.scalar(1, dtype))))
    return ctx.emit(op.where(op.greater(counts, ctx.scalar(0, dtype)), mean, x))


def _identity(reduce: str, dtype: str) -> Any:
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    np_dtype = np.dtype(dtype)
    if np_dtype.kind == "f":
        return float(-np.inf if reduce == "amax" else np.inf)
    if np_dtype.kind == "b":
        return reduce != "amax"
    info = np.iinfo(np_dtype)
    return int(info.min if reduce == "amax" else info.max)


@converter("aten.topk.default")
def _topk(
    ctx: NodeContext, x: Expr, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
) -> list[Expr]:
    if ctx.rank(x) == 0:
        return [x, ctx.scalar(0, "int64")]
    out = ctx.emit(op.topk(x, int(k), axis=dim % ctx.rank(x), largest=largest, sorted=True))
    return [ctx.emit(TupleGetItem(out, 0)), ctx.emit(TupleGetItem(out, 1))]


@converter("aten.sort.default", "aten.sort.stable")
def _sort(ctx: NodeContext, x: Expr, *args: Any, **kw: Any) -> list[Expr]:
    if ctx.rank(x) == 0:
        return [x, ctx.scalar(0, "int64")]
    if "stable" in str(ctx.node.target):
        dim, descending = kw.get("dim", -1), kw.get("descending", False)
    else:
        dim = args[0] if args else kw.get("dim", -1)
        descending = args[1] if len(args) > 1 else kw.get("descending", False)
    axis = dim % ctx.rank(x)
    n = ctx.shape(x)[axis]
    if not isinstance(n, int):
        ctx.fail("needs a static size along the sorted axis")
    out = ctx.emit(op.topk(x, n, axis=axis, largest=bool(descending), sorted=True))
    return [ctx.emit(TupleGetItem(out, 0)), ctx.emit(TupleGetItem(out, 1))]


@converter("aten.nonzero.default")
def _nonzero(ctx: NodeContext, x: Expr) -> Expr:
    if ctx.rank(x) == 0:  # one row (x != 0) or none, of no columns
        rows = ctx.emit(op.transpose(op.nonzero(op.reshape(x, [1])), [1, 0]))
        return ctx.emit(op.strided_slice(rows, [0], [0], axes=[1]))
    return ctx.emit(op.transpose(op.nonzero(x), [1, 0]))


@converter("aten.diagonal.default")
def _diagonal(ctx: NodeContext, x: Expr, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Expr:
    rank = ctx.rank(x)
    a, b = dim1 % rank, dim2 % rank
    rest = [d for d in range(rank) if d not in (a, b)]
    n, m = ctx.shape(x)[a], ctx.shape(x)[b]
    if not (isinstance(n, int) and isinstance(m, int)):
        ctx.fail("needs static sizes along the two diagonal axes")
    x = ctx.emit(op.transpose(x, [*rest, a, b]))
    flat = ctx.emit(op.reshape(x, [*ctx.shape(x)[:-2], n * m]))
    rows = range(max(0, -offset), min(n, m - offset)) if offset < m else range(0)
    index = [r * m + r + offset for r in rows]
    return ctx.emit(op.take(flat, op.const(index, "int64"), axis=len(rest)))


@converter("aten.as_strided.default", "aten.as_strided_copy.default")
def _as_strided(
    ctx: NodeContext, x: Expr, size: list, stride: list, storage_offset: Any = None
) -> Expr:
    """A strided view of ``x``'s row-major elements, gathered (sizes and strides static)."""
    if not all(isinstance(v, int) for v in [*size, *stride]):
        ctx.fail("needs static sizes and strides")
    index = np.full([int(s) for s in size], int(storage_offset or 0), dtype=np.int64)
    for axis, (n, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[axis] = int(n)
        index = index + (np.arange(int(n), dtype=np.int64) * int(st)).reshape(shape)
    flat = ctx.emit(op.reshape(x, [-1]))
    return ctx.emit(op.take(flat, op.const(index, "int64")))


@converter("aten.masked_scatter.default")
def _masked_scatter(ctx: NodeContext, x: Expr, mask: Expr, source: Expr) -> Expr:
    """Where ``mask`` holds, the next element of ``source`` in row-major order."""
    shape = list(ctx.out_shape())
    if None in shape:
        ctx.fail(f"cannot name the shape {ctx.val.shape}")
    mask = ctx.emit(op.broadcast_to(ctx.cast(mask, "bool"), shape))
    x = ctx.emit(op.broadcast_to(x, shape)) if ctx.shape(x) != tuple(shape) else x
    flat = ctx.emit(op.reshape(op.cast(mask, "int64"), [-1]))
    index = ctx.emit(op.maximum(op.subtract(op.cumsum(flat, axis=0), 1), 0))
    values = ctx.emit(op.take(op.reshape(source, [-1]), index))
    return ctx.emit(op.where(mask, op.reshape(values, shape), x))


@converter("aten.embedding_dense_backward.default")
def _embedding_backward(
    ctx: NodeContext,
    grad: Expr,
    indices: Expr,
    num_weights: int,
    padding_idx: int,
    scale_grad_by_freq: bool,
) -> Expr:
    """``embedding``'s weight gradient: each row of ``grad`` added into the row its index
    names (one ``scatter_nd``), without the rows of ``padding_idx`` (none when negative), each
    divided by how often its index occurs with ``scale_grad_by_freq``."""
    dtype, width = ctx.out_dtype(), ctx.shape(grad)[-1]
    flat = ctx.emit(op.reshape(indices, [-1]))
    where = ctx.emit(op.expand_dims(flat, -1))
    rows = ctx.emit(op.reshape(grad, [-1, width]))
    if scale_grad_by_freq:
        ones = ctx.emit(op.broadcast_to(ctx.scalar(1.0, dtype), list(ctx.shape(flat))))
        counts = op.scatter_nd(op.zeros([int(num_weights)], dtype), where, ones, reduction="add")
        rows = ctx.emit(op.divide(rows, op.expand_dims(op.take(counts, flat, axis=0), -1)))
    if padding_idx >= 0:
        keep = op.expand_dims(
            op.not_equal(flat, ctx.scalar(int(padding_idx), ctx.dtype_of(flat))), -1
        )
        rows = ctx.emit(op.where(keep, rows, ctx.scalar(0.0, dtype)))
    base = op.zeros([int(num_weights), width], dtype)
    return ctx.emit(op.scatter_nd(base, where, rows, reduction="add"))


@converter("aten.grid_sampler_2d.default")
def _grid_sampler_2d(
    ctx: NodeContext, x: Expr, grid: Expr, mode: int, padding: int, align_corners: bool
) -> Expr:
    """Sampling ``x`` (N, C, H, W) at ``grid`` (N, Ho, Wo, 2; x then y in [-1, 1]): bilinear
    (mode 0) or nearest (1), outside points zero (padding 0), clamped to the border (1) or
    reflected (2), as PyTorch's ``grid_sampler_2d``. Each corner is a gather of the flattened
    planes."""
    if mode not in (0, 1):
        ctx.fail("samples bilinear (mode 0) or nearest (1) only, not bicubic")
    n, c, h, w = ctx.shape(x)
    if not (isinstance(h, int) and isinstance(w, int)):
        ctx.fail(f"needs static H and W, got {h} and {w}")
    out = list(ctx.out_shape())
    coords = [
        _source_coord(ctx, grid, k, size, padding, bool(align_corners))
        for k, size in ((0, w), (1, h))
    ]
    planes = ctx.emit(op.reshape(x, [n, c, h * w]))
    dtype = ctx.dtype_of(x) or "float32"
    if mode == 1:
        corners = [(op.round(coords[0]), op.round(coords[1]), None)]
    else:
        x0, y0 = op.floor(coords[0]), op.floor(coords[1])
        fx, fy = ctx.emit(op.subtract(coords[0], x0)), ctx.emit(op.subtract(coords[1], y0))
        gx, gy = op.subtract(1.0, fx), op.subtract(1.0, fy)
        x1, y1 = op.add(x0, 1.0), op.add(y0, 1.0)
        corners = [
            (x0, y0, op.multiply(gx, gy)),
            (x1, y0, op.multiply(fx, gy)),
            (x0, y1, op.multiply(gx, fy)),
            (x1, y1, op.multiply(fx, fy)),
        ]
    total = None
    for cx, cy, weight in corners:
        cx, cy = ctx.emit(cx), ctx.emit(cy)
        inside = op.logical_and(
            op.logical_and(op.greater_equal(cx, 0.0), op.less_equal(cx, float(w - 1))),
            op.logical_and(op.greater_equal(cy, 0.0), op.less_equal(cy, float(h - 1))),
        )
        scale = op.cast(inside, dtype) if weight is None else op.where(inside, weight, 0.0)
        flat = op.add(
            op.multiply(op.cast(op.clip(cy, 0.0, float(h - 1)), "int64"), w),
            op.cast(op.clip(cx, 0.0, float(w - 1)), "int64"),
        )
        index = op.broadcast_to(op.reshape(flat, [n, 1, -1]), [n, c, out[2] * out[3]])
        picked = op.multiply(op.gather(planes, index, axis=2), op.reshape(scale, [n, 1, -1]))
        total = ctx.emit(picked if total is None else op.add(total, picked))
    return ctx.emit(op.reshape(total, out))


def _source_coord(
    ctx: NodeContext, grid: Expr, k: int, size: int, padding: int, align: bool
) -> Expr:
    """Grid component ``k`` as a source coordinate along an axis of ``size``, padded."""
    g = ctx.emit(op.squeeze(op.strided_slice(grid, [k], [k + 1], axes=[3]), [3]))
    if align:
        coord = op.multiply(op.add(g, 1.0), (size - 1) / 2.0)
    else:
        coord = op.divide(op.subtract(op.multiply(op.add(g, 1.0), float(size)), 1.0), 2.0)
    coord = ctx.emit(coord)
    if padding == 2:
        low, high = (0, 2 * (size - 1)) if align else (-1, 2 * size - 1)
        coord = _reflect(ctx, coord, low, high)
    if padding in (1, 2):
        coord = ctx.emit(op.clip(coord, 0.0, float(size - 1)))
    return coord


def _reflect(ctx: NodeContext, coord: Expr, twice_low: int, twice_high: int) -> Expr:
    """PyTorch's ``reflect_coordinates``: ``coord`` mirrored into [low/2, high/2]."""
    if twice_low == twice_high:
        return ctx.emit(op.multiply(coord, 0.0))
    low, span = twice_low / 2.0, (twice_high - twice_low) / 2.0
    dist = ctx.emit(op.abs(op.subtract(coord, low)))
    extra = ctx.emit(op.fmod(dist, span))
    flips = op.floor(op.divide(dist, span))
    even = op.equal(op.fmod(flips, 2.0), 0.0)
    return ctx.emit(op.where(even, op.add(extra, low), op.add(op.subtract(span, extra), low)))
