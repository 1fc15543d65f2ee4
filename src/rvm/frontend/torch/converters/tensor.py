"""Shape and layout ATen ops: views, permutes, slices, concatenation, padding, copies.

Sizes may be symbolic. A target shape takes torch's recorded output shape: ints and symbol
names stay; one dimension rvm cannot name (``s0 * 12``) becomes -1, which the reshape solves.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rvm import op
from rvm.frontend.torch.context import NodeContext, SymInt, rvm_dtype
from rvm.frontend.torch.registry import converter
from rvm.ir import Expr, TupleGetItem

BIG = 2**63 - 1


def target_shape(ctx: NodeContext) -> list[int | str]:
    """The node's output shape for a reshape: at most one unnamed dimension, as -1."""
    shape = list(ctx.out_shape())
    unknown = [i for i, d in enumerate(shape) if d is None]
    if len(unknown) > 1:
        ctx.fail(f"cannot name more than one dimension of the result {ctx.val.shape}")
    for i in unknown:
        shape[i] = -1
    return shape  # type: ignore[return-value]


@converter(
    "aten.view.default",
    "aten._unsafe_view.default",
    "aten.reshape.default",
    "aten.view_copy.default",
)
def _view(ctx: NodeContext, x: Expr, size: list) -> Expr:
    target = target_shape(ctx)
    if tuple(target) == ctx.shape(x):
        return x
    return ctx.emit(op.reshape(x, target))


@converter("aten.permute.default", "aten.permute_copy.default")
def _permute(ctx: NodeContext, x: Expr, dims: list[int]) -> Expr:
    rank = ctx.rank(x)
    axes = [d % rank for d in dims] if rank else []
    if axes == list(range(rank)):
        return x
    return ctx.emit(op.transpose(x, axes))


@converter("aten.expand.default")
def _expand(ctx: NodeContext, x: Expr, size: list, *, implicit: bool = False) -> Expr:
    src = ctx.shape(x)
    out = list(ctx.out_shape())
    for i in range(len(out)):
        j = i - (len(out) - len(src))
        if out[i] is None and j >= 0 and src[j] != 1:
            out[i] = src[j]
    if None in out:
        ctx.fail(f"cannot name the expanded shape {ctx.val.shape}")
    if tuple(out) == src:
        return x
    return ctx.emit(op.broadcast_to(x, out))


@converter("aten.clone.default", "aten.alias.default", "aten.lift_fresh_copy.default")
def _identity(ctx: NodeContext, x: Expr, **_: Any) -> Expr:
    return x


@converter("aten._to_copy.default")
def _to_copy(ctx: NodeContext, x: Expr, **_: Any) -> Expr:
    return ctx.cast(x, ctx.out_dtype())


@converter("aten.copy.default")
def _copy(ctx: NodeContext, dst: Expr, src: Expr, non_blocking: bool = False) -> Expr:
    src = ctx.cast(src, ctx.out_dtype())
    if ctx.shape(src) == ctx.shape(dst):
        return src
    return ctx.emit(op.broadcast_to(src, list(ctx.shape(dst))))


@converter("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default")
def _squeeze(ctx: NodeContext, x: Expr, dim: Any = None) -> Expr:
    shape = ctx.shape(x)
    if not shape:
        return x
    dims = range(len(shape)) if dim is None else [dim] if isinstance(dim, int) else dim
    axes = sorted({d % len(shape) for d in dims if shape[d % len(shape)] == 1})
    return ctx.emit(op.squeeze(x, axes)) if axes else x


@converter("aten.unsqueeze.default")
def _unsqueeze(ctx: NodeContext, x: Expr, dim: int) -> Expr:
    return ctx.emit(op.expand_dims(x, dim % (ctx.rank(x) + 1)))


@converter("aten.cat.default")
def _cat(ctx: NodeContext, tensors: list[Expr], dim: int = 0) -> Expr:
    dtype = ctx.out_dtype()
    parts = [ctx.cast(t, dtype) for t in tensors if ctx.shape(t) != (0,)]
    if len(parts) == 1:
        return parts[0]
    rank = ctx.rank(parts[0])
    return ctx.emit(op.concat(parts, axis=dim % rank))


def _bound(ctx: NodeContext, value: Any, size: Any) -> int | None:
    """A slice bound as an int; None when it is symbolic."""
    if value is None or isinstance(value, Expr):  # None, or a bound read from a tensor
        return None
    if isinstance(value, SymInt):
        if value.static is not None:
            return value.static
        return BIG if ctx.dim(value) is not None and ctx.dim(value) == size else None
    return int(value)


@converter("aten.slice.Tensor")
def _slice(
    ctx: NodeContext, x: Expr, dim: int = 0, start: Any = None, end: Any = None, step: int = 1
) -> Expr:
    shape = ctx.shape(x)
    axis = dim % len(shape)
    begin = 0 if start is None else _bound(ctx, start, shape[axis])
    stop = BIG if end is None else _bound(ctx, end, shape[axis])
    if begin is None or stop is None:  # bounds known only at run time
        b = ctx.scalar(0 if start is None else start, "int64")
        e = ctx.scalar(BIG if end is None else end, "int64")
        b, e = ctx.emit(op.reshape(b, [1])), ctx.emit(op.reshape(e, [1]))
        return ctx.emit(op.dynamic_slice(x, b, e, [axis], [int(step)]))
    if begin == 0 and stop >= BIG and step == 1:
        return x
    return ctx.emit(op.strided_slice(x, [begin], [stop], [int(step)], [axis]))


@converter("aten.select.int")
def _select(ctx: NodeContext, x: Expr, dim: int, index: Any) -> Expr:
    axis = dim % ctx.rank(x)
    if isinstance(index, SymInt) and index.static is None:
        return ctx.emit(op.take(x, ctx.scalar(index, "int64"), axis=axis))
    i = int(index.static if isinstance(index, SymInt) else index)
    piece = op.strided_slice(x, [i], [i + 1 if i != -1 else BIG], [1], [axis])
    return ctx.emit(op.squeeze(ctx.emit(piece), [axis]))


@converter("aten.split_with_sizes.default", "aten.split.Tensor")
def _split(ctx: NodeContext, x: Expr, sizes: Any, dim: int = 0) -> list[Expr]:
    axis = dim % ctx.rank(x)
    lengths = [ctx.out_shape(i)[axis] for i in range(len(ctx.val))]
    if any(not isinstance(n, int) for n in lengths):
        ctx.fail(f"needs static split sizes, got {lengths}")
    cuts, at = [], 0
    for n in lengths[:-1]:
        at += n
        cuts.append(at)
    if not cuts:
        return [x]
    pieces = ctx.emit(op.split(x, cuts, axis=axis))
    return [ctx.emit(TupleGetItem(pieces, i)) for i in range(len(lengths))]


@converter("aten.flip.default")
def _flip(ctx: NodeContext, x: Expr, dims: list[int]) -> Expr:
    rank = ctx.rank(x)
    if not dims or rank == 0:
        return x
    axes = sorted({d % rank for d in dims})
    n = len(axes)
    return ctx.emit(op.strided_slice(x, [-1] * n, [-(2**63)] * n, [-1] * n, axes))


@converter("aten.repeat.default")
def _repeat(ctx: NodeContext, x: Expr, repeats: list[int]) -> Expr:
    shape = ctx.shape(x)
    extra = len(repeats) - len(shape)
    if extra:
        x = ctx.emit(op.reshape(x, [1] * extra + list(shape)))
    return ctx.emit(op.tile(x, [int(r) for r in repeats]))


def _pads(ctx: NodeContext, rank: int, pad: list[int]) -> list[list[int]]:
    widths = [[0, 0] for _ in range(rank)]
    for k in range(len(pad) // 2):
        widths[rank - 1 - k] = [int(pad[2 * k]), int(pad[2 * k + 1])]
    return widths


def _crop(ctx: NodeContext, x: Expr, widths: list[list[int]]) -> tuple[Expr, list[list[int]]]:
    """``x`` cropped where ``widths`` are negative (negative padding crops, in every mode),
    and the widths left to pad."""
    cuts = [(i, lo, hi) for i, (lo, hi) in enumerate(widths) if lo < 0 or hi < 0]
    for i, lo, hi in cuts:
        x = ctx.emit(op.strided_slice(x, [max(-lo, 0)], [hi if hi < 0 else BIG], [1], [i]))
    return x, [[max(lo, 0), max(hi, 0)] for lo, hi in widths]


@converter("aten.constant_pad_nd.default")
def _constant_pad(ctx: NodeContext, x: Expr, pad: list[int], value: float = 0) -> Expr:
    x, widths = _crop(ctx, x, _pads(ctx, ctx.rank(x), pad))
    if not any(lo or hi for lo, hi in widths):
        return x
    dtype = ctx.out_dtype()
    fill = bool(value) if dtype == "bool" else value if "float" in dtype else int(value)
    return ctx.emit(op.pad(x, widths, pad_value=fill))


@converter(
    "aten.reflection_pad1d.default",
    "aten.reflection_pad2d.default",
    "aten.reflection_pad3d.default",
    "aten.replication_pad1d.default",
    "aten.replication_pad2d.default",
    "aten.replication_pad3d.default",
)
def _mode_pad(ctx: NodeContext, x: Expr, padding: list[int]) -> Expr:
    mode = "reflect" if "reflection" in str(ctx.node.target) else "edge"
    widths = _pads(ctx, ctx.rank(x), padding)
    if mode == "edge":  # cropping first could leave nothing to copy: gather clamped rows
        for i, size in enumerate(ctx.shape(x)):
            lo, hi = widths[i]
            if (lo < 0 or hi < 0) and isinstance(size, int):
                rows = np.clip(np.arange(size + lo + hi) - lo, 0, size - 1)
                x, widths[i] = ctx.emit(op.take(x, op.const(rows, "int64"), axis=i)), [0, 0]
    x, widths = _crop(ctx, x, widths)
    if not any(lo or hi for lo, hi in widths):
        return x
    return ctx.emit(op.pad(x, widths, mode=mode))


@converter("aten.slice_scatter.default")
def _slice_scatter(
    ctx: NodeContext,
    x: Expr,
    src: Expr,
    dim: int = 0,
    start: Any = None,
    end: Any = None,
    step: int = 1,
) -> Expr:
    shape = ctx.shape(x)
    axis = dim % len(shape)
    size = shape[axis]
    begin = 0 if start is None else _bound(ctx, start, size)
    stop = BIG if end is None else _bound(ctx, end, size)
    if begin is None or stop is None or not isinstance(size, int):
        ctx.fail("needs static slice bounds")
    begin, stop, _ = slice(begin, stop, step).indices(size)
    src = ctx.cast(src, ctx.out_dtype())
    if step != 1:
        index = op.reshape(
            op.arange(begin, stop, step), [-1 if k == axis else 1 for k in range(len(shape))]
        )
        index = op.broadcast_to(index, list(ctx.shape(src)))
        return ctx.emit(op.scatter_elements(x, ctx.emit(index), src, axis=axis))
    parts = []
    if begin > 0:
        parts.append(ctx.emit(op.strided_slice(x, [0], [begin], [1], [axis])))
    parts.append(src)
    if stop < size:
        parts.append(ctx.emit(op.strided_slice(x, [stop], [BIG], [1], [axis])))
    return parts[0] if len(parts) == 1 else ctx.emit(op.concat(parts, axis=axis))


@converter("aten.select_scatter.default")
def _select_scatter(ctx: NodeContext, x: Expr, src: Expr, dim: int, index: int) -> Expr:
    axis = dim % ctx.rank(x)
    size = ctx.shape(x)[axis]
    if not isinstance(size, int):
        ctx.fail("needs a static size along the selected axis")
    i = int(index) % size
    row = ctx.emit(op.expand_dims(ctx.cast(src, ctx.out_dtype()), axis))
    return _slice_scatter(ctx, x, row, axis, i, i + 1, 1)


@converter("aten.alias_copy.default", "aten.detach.default", "aten.detach_copy.default")
def _alias_copy(ctx: NodeContext, x: Expr) -> Expr:
    return x


@converter("aten.t.default")
def _t(ctx: NodeContext, x: Expr) -> Expr:
    return x if ctx.rank(x) < 2 else ctx.emit(op.transpose(x, [1, 0]))


@converter("aten.transpose.int")
def _transpose(ctx: NodeContext, x: Expr, dim0: int, dim1: int) -> Expr:
    rank = ctx.rank(x)
    axes = list(range(rank))
    a, b = dim0 % rank, dim1 % rank
    axes[a], axes[b] = axes[b], axes[a]
    return x if a == b else ctx.emit(op.transpose(x, axes))


@converter("aten.scalar_tensor.default")
def _scalar_tensor(ctx: NodeContext, s: Any, **_: Any) -> Expr:
    return ctx.scalar(s, ctx.out_dtype())


@converter("aten._local_scalar_dense.default", "aten.item.default")
def _item(ctx: NodeContext, x: Expr) -> Expr:
    return x if ctx.shape(x) == () else ctx.emit(op.reshape(x, []))


def dtype_kwarg(ctx: NodeContext, dtype: Any) -> str:
    return ctx.out_dtype() if dtype is None else rvm_dtype(dtype)


@converter(
    "aten.sym_size.int",
    "aten.sym_numel.default",
    "aten.sym_stride.int",
    "aten.sym_storage_offset.default",
)
def _sym(ctx: NodeContext, *_: Any) -> Any:
    """A size query: its value is the symbolic integer torch.export recorded."""
    return ctx.sym_value()
