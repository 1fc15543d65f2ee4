"""Layout ops: reshape, transpose, expand_dims, squeeze, flatten, broadcast_to, pad, tile,
trilu, concat, stack and split.

Shapes given as attributes may hold symbolic names (``reshape(x, ("n", 784))``). ``reshape``
solves a -1 from the input's product, symbolic factors included (``(n, 28, 28)`` to
``(-1, 784)`` gives ``(n, 784)``). ``flatten`` keeps the first axis and flattens the rest, as
TVM's batch_flatten and ONNX Flatten(axis=1). ``concat`` and ``stack`` take one Tuple argument.
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm.errors import IRError
from rvm.ir import dims
from rvm.ir.expr import Call, Expr
from rvm.ir.infer import infer_type
from rvm.ir.op import OpPattern
from rvm.ir.types import AnyType, Dim, Shape, TensorType, TupleType, Type, promote_dtypes
from rvm.op import ops
from rvm.op.core import (
    ExprLike,
    as_expr,
    as_tuple_expr,
    call,
    check_axes,
    check_axis,
    check_bool,
    check_choice,
    check_int,
    check_ints,
    check_scalar,
    check_shape,
    define_op,
)
from rvm.op.shapes import (
    as_tensor,
    dims_product,
    factor,
    fmt,
    normalize_axes,
    normalize_axis,
    rule,
    rule_raw,
    unify_dim,
)

__all__ = [
    "broadcast_to",
    "concat",
    "expand_dims",
    "flatten",
    "pad",
    "reshape",
    "split",
    "squeeze",
    "stack",
    "tile",
    "transpose",
    "trilu",
]

# The ops of this module (`rvm.op.core.define_op`).
# Layout and indexing.
define_op("reshape", OpPattern.INJECTIVE, 1)
define_op("transpose", OpPattern.INJECTIVE, 1)
define_op("expand_dims", OpPattern.INJECTIVE, 1)
define_op("squeeze", OpPattern.INJECTIVE, 1)
define_op("flatten", OpPattern.INJECTIVE, 1)
define_op("concat", OpPattern.INJECTIVE, 1)  # one Tuple argument
define_op("split", OpPattern.INJECTIVE, 1)
define_op("stack", OpPattern.INJECTIVE, 1)  # one Tuple argument
define_op("broadcast_to", OpPattern.BROADCAST, 1)
define_op("pad", OpPattern.INJECTIVE, 1)
define_op("tile", OpPattern.INJECTIVE, 1)
define_op("trilu", OpPattern.OPAQUE, 1)

PAD_MODES = ("constant", "edge", "reflect", "wrap")

# ---------------------------------------------------------------------------------------------
# reshape


def reshape_shape(src: Shape | None, target: Shape) -> Shape:
    """The shape of ``reshape(x, target)`` for ``x`` of shape ``src``; solves a -1."""
    if -1 not in target:
        if src is not None:
            a, b = factor(src), factor(target)
            if a is not None and b is not None and a[1] == b[1] and a[0] != b[0]:
                raise IRError(f"reshape: cannot reshape {fmt(src)} to {fmt(target)}")
        return target
    known = tuple(d for d in target if d != -1)
    return tuple(_solve(src, target, known) if d == -1 else d for d in target)


def _solve(src: Shape | None, target: Shape, known: Shape) -> Dim:
    have = None if src is None else factor(src)
    want = factor(known)
    if have is None or want is None or want[1] - have[1]:
        return None  # the target names a factor the input may not have
    rest_names = have[1] - want[1]
    if want[0] == 0 or have[0] % want[0]:
        if not rest_names:
            raise IRError(f"reshape: cannot reshape {fmt(src)} to {fmt(target)}")
        return None
    return dims_product([have[0] // want[0], *rest_names.elements()])


@rule(ops.reshape)
def _infer_reshape(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    return TensorType(reshape_shape(x.shape, call_.attrs["shape"]), x.dtype)


def reshape(x: ExprLike, shape: Sequence[int | str]) -> Call:
    """``x`` with a new shape of the same size; one dimension may be -1.

    When ``x``'s shape is known well enough to solve the -1 (an int or a symbolic name), the
    call stores the solved shape: at run time NumPy cannot solve a -1 beside an empty dimension
    (``(0, 4)`` to ``(n, -1, 2)`` with n = 0), but the types can.
    """
    x = as_expr(x)
    target = check_shape("reshape", shape, allow_infer=True)
    if -1 in target:
        ty = infer_type(x)
        if isinstance(ty, TensorType) and ty.shape is not None:
            try:
                solved = reshape_shape(ty.shape, target)
            except IRError:
                solved = (None,)  # reported by type inference, where the binding is known
            if all(d is not None for d in solved):
                target = solved
    return call(ops.reshape, x, shape=target)


# ---------------------------------------------------------------------------------------------
# transpose, expand_dims, squeeze, flatten


@rule(ops.transpose)
def _infer_transpose(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    axes = call_.attrs["axes"]
    if x.shape is None:
        return TensorType(None if axes is None else (None,) * len(axes), x.dtype)
    if axes is None:
        return TensorType(tuple(reversed(x.shape)), x.dtype)
    if len(axes) != len(x.shape):
        raise IRError(f"transpose: axes {axes!r} do not match a tensor of shape {fmt(x.shape)}")
    perm = normalize_axes("transpose", axes, len(x.shape), what="axes")
    return TensorType(tuple(x.shape[a] for a in perm), x.dtype)


@rule(ops.expand_dims)
def _infer_expand_dims(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    if x.shape is None:
        return x
    axes = call_.attrs["axis"]
    ndim = len(x.shape) + len(axes)
    new = normalize_axes("expand_dims", axes, ndim)
    rest = iter(x.shape)
    return TensorType(tuple(1 if i in new else next(rest) for i in range(ndim)), x.dtype)


@rule(ops.squeeze)
def _infer_squeeze(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    axis = call_.attrs["axis"]
    if x.shape is None:
        return x
    if axis is None:
        if not all(isinstance(d, int) for d in x.shape):
            return TensorType(None, x.dtype)  # a symbolic dim might be 1 at run time
        return TensorType(tuple(d for d in x.shape if d != 1), x.dtype)
    drop = normalize_axes("squeeze", axis, len(x.shape))
    for a in drop:
        if isinstance(x.shape[a], int) and x.shape[a] != 1:
            raise IRError(
                f"squeeze: cannot squeeze axis {a} of size {x.shape[a]} in shape {fmt(x.shape)}"
            )
    return TensorType(tuple(d for i, d in enumerate(x.shape) if i not in drop), x.dtype)


@rule(ops.flatten)
def _infer_flatten(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    if x.shape is None:
        return TensorType((None, None), x.dtype)
    if not x.shape:
        raise IRError("flatten: the input must have rank >= 1, got ()")
    return TensorType((x.shape[0], dims_product(x.shape[1:])), x.dtype)


def transpose(x: ExprLike, axes: Sequence[int] | None = None) -> Call:
    """``x`` with its axes permuted by ``axes`` (None: reversed)."""
    perm = None if axes is None else check_ints("transpose", "axes", axes)
    return call(ops.transpose, as_expr(x), axes=perm)


def expand_dims(x: ExprLike, axis: int | Sequence[int]) -> Call:
    """``x`` with new axes of size 1 at the positions ``axis`` (in the result)."""
    return call(ops.expand_dims, as_expr(x), axis=check_axes("expand_dims", axis, allow_none=False))


def squeeze(x: ExprLike, axis: int | Sequence[int] | None = None) -> Call:
    """``x`` without the size-1 axes ``axis`` (None: every size-1 axis)."""
    return call(ops.squeeze, as_expr(x), axis=check_axes("squeeze", axis))


def flatten(x: ExprLike) -> Call:
    """(N, d1, d2, ...) to (N, d1 * d2 * ...)."""
    return call(ops.flatten, as_expr(x))


# ---------------------------------------------------------------------------------------------
# broadcast_to, pad, tile


@rule(ops.broadcast_to)
def _infer_broadcast_to(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    shape = call_.attrs["shape"]
    if x.shape is not None:
        if len(x.shape) > len(shape):
            raise IRError(f"broadcast_to: cannot broadcast {fmt(x.shape)} to {fmt(shape)}")
        for d, t in zip(reversed(x.shape), reversed(shape)):
            if isinstance(d, int) and isinstance(t, int) and d not in (1, t):
                raise IRError(f"broadcast_to: cannot broadcast {fmt(x.shape)} to {fmt(shape)}")
    return TensorType(shape, x.dtype)


@rule(ops.pad)
def _infer_pad(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    widths = call_.attrs["pad_width"]
    if x.shape is None:
        return TensorType((None,) * len(widths), x.dtype)
    if len(widths) != len(x.shape):
        raise IRError(
            f"pad: pad_width has {len(widths)} pairs for a tensor of shape {fmt(x.shape)}"
        )
    out: list[Dim] = []
    for axis, (d, (lo, hi)) in enumerate(zip(x.shape, widths)):
        if d == 0 and lo + hi and call_.attrs["mode"] != "constant":
            raise IRError(
                f"pad: mode {call_.attrs['mode']!r} copies values of the input, but axis {axis} "
                f"of {fmt(x.shape)} is empty"
            )
        if isinstance(d, int):
            out.append(d + lo + hi)
        else:
            out.append(d if lo == hi == 0 else None)
    return TensorType(tuple(out), x.dtype)


@rule(ops.tile)
def _infer_tile(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    reps = call_.attrs["reps"]
    if x.shape is None:
        return TensorType(None, x.dtype)
    n = max(len(reps), len(x.shape))
    shape = (1,) * (n - len(x.shape)) + tuple(x.shape)
    reps = (1,) * (n - len(reps)) + tuple(reps)
    return TensorType(tuple(dims_product((d, r)) for d, r in zip(shape, reps)), x.dtype)


def broadcast_to(x: ExprLike, shape: Sequence[int | str]) -> Call:
    """``x`` broadcast to ``shape`` (NumPy rules)."""
    return call(ops.broadcast_to, as_expr(x), shape=check_shape("broadcast_to", shape))


def pad(
    x: ExprLike,
    pad_width: Sequence[Sequence[int]],
    pad_value: float | int | bool = 0.0,
    mode: str = "constant",
) -> Call:
    """``x`` padded by a (before, after) pair per axis in ``pad_width``.

    ``mode`` fills the new elements as NumPy's modes of the same names (and ONNX Pad's):
    "constant" with ``pad_value``, "edge" with the nearest edge value, "reflect" with the
    mirror image about the edge (the edge itself not repeated), "wrap" with the values from
    the other end. ``pad_value`` counts only in "constant" mode.
    """
    if not isinstance(pad_width, (list, tuple)):
        raise IRError(f"pad: pad_width must be a (before, after) pair per axis, got {pad_width!r}")
    widths = tuple(check_ints("pad", "pad_width", p, 2) for p in pad_width)
    if any(v < 0 for p in widths for v in p):
        raise IRError(f"pad: pad_width must be >= 0, got {pad_width!r}")
    return call(
        ops.pad,
        as_expr(x),
        pad_width=widths,
        pad_value=check_scalar("pad", "pad_value", pad_value),
        mode=check_choice("pad", "mode", mode, PAD_MODES),
    )


def tile(x: ExprLike, reps: int | Sequence[int]) -> Call:
    """``x`` repeated ``reps`` times along each axis (NumPy's tile)."""
    reps_ = check_ints("tile", "reps", reps)
    if any(r < 0 for r in reps_):
        raise IRError(f"tile: reps must be >= 0, got {reps!r}")
    return call(ops.tile, as_expr(x), reps=reps_)


@rule(ops.trilu)
def _infer_trilu(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    if x.shape is not None and len(x.shape) < 2:
        raise IRError(f"trilu: the input must have rank >= 2, got {fmt(x.shape)}")
    return x


def trilu(x: ExprLike, k: int = 0, upper: bool = True) -> Call:
    """The upper (or lower) triangle of the last two axes of ``x`` from diagonal ``k``
    (positive: above the main one), zeros elsewhere: NumPy's triu and tril."""
    return call(
        ops.trilu,
        as_expr(x),
        k=check_int("trilu", "k", k),
        upper=check_bool("trilu", "upper", upper),
    )


# ---------------------------------------------------------------------------------------------
# concat, stack, split


def _tuple_fields(op: str, ty: Type) -> list[TensorType] | None:
    """The tensor types of a variadic op's Tuple argument (None if not known)."""
    if isinstance(ty, TupleType):
        if not ty.fields:
            raise IRError(f"{op}: expects at least one tensor")
        return [as_tensor(op, f, i) for i, f in enumerate(ty.fields)]
    if isinstance(ty, AnyType):
        return None
    raise IRError(f"{op}: expects a tuple of tensors, got {ty}")


def _joined(op: str, fields: list[TensorType]) -> tuple[list[Shape], str | None] | None:
    """The fields' shapes (same rank, else IRError) and promoted dtype; None shapes: None."""
    dtype = fields[0].dtype
    for f in fields[1:]:
        dtype = promote_dtypes(dtype, f.dtype)
    shapes = [f.shape for f in fields]
    known = [s for s in shapes if s is not None]
    if any(len(s) != len(known[0]) for s in known):
        raise IRError(f"{op}: tensors have different ranks: {', '.join(fmt(s) for s in known)}")
    return shapes, dtype


@rule_raw(ops.concat)
def _infer_concat(call_: Call, arg_types: list[Type]) -> Type:
    fields = _tuple_fields("concat", arg_types[0])
    if fields is None:
        return TensorType(None, None)
    shapes, dtype = _joined("concat", fields)
    if any(s is None for s in shapes):
        return TensorType(None, dtype)
    ndim = len(shapes[0])
    if ndim == 0:
        raise IRError("concat: cannot concatenate 0-d tensors")
    axis = normalize_axis("concat", call_.attrs["axis"], ndim)
    out = list(shapes[0])
    for s in shapes[1:]:
        for i in range(ndim):
            if i != axis:
                what = f"shapes {fmt(shapes[0])} and {fmt(s)} differ outside axis {axis}"
                out[i] = unify_dim("concat", out[i], s[i], what)
    total: Dim = 0
    for s in shapes:  # a sum of symbolic sizes stays one: past + seq
        total = dims.add(total, s[axis])
    out[axis] = total
    return TensorType(tuple(out), dtype)


@rule_raw(ops.stack)
def _infer_stack(call_: Call, arg_types: list[Type]) -> Type:
    fields = _tuple_fields("stack", arg_types[0])
    if fields is None:
        return TensorType(None, None)
    shapes, dtype = _joined("stack", fields)
    if any(s is None for s in shapes):
        return TensorType(None, dtype)
    out = list(shapes[0])
    for s in shapes[1:]:
        for i in range(len(out)):
            out[i] = unify_dim(
                "stack", out[i], s[i], f"shapes {fmt(shapes[0])} and {fmt(s)} differ"
            )
    axis = normalize_axis("stack", call_.attrs["axis"], len(out) + 1)
    out.insert(axis, len(fields))
    return TensorType(tuple(out), dtype)


@rule(ops.split)
def _infer_split(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    spec = call_.attrs["indices_or_sections"]
    count = spec if isinstance(spec, int) else len(spec) + 1
    if x.shape is None:
        return TupleType((TensorType(None, x.dtype),) * count)
    axis = normalize_axis("split", call_.attrs["axis"], len(x.shape))
    dim = x.shape[axis]
    if isinstance(spec, int):
        if isinstance(dim, int) and dim % spec:
            raise IRError(f"split: axis {axis} of shape {fmt(x.shape)} does not divide into {spec}")
        sizes: list[Dim] = [dim // spec if isinstance(dim, int) else (dim if spec == 1 else None)]
        sizes = sizes * spec
    elif isinstance(dim, int):
        bounds = [0, *spec, dim]
        sizes = [len(range(dim)[a:b]) for a, b in zip(bounds, bounds[1:])]
    else:
        sizes = [dim if not spec else None] * count
    pieces = (x.shape[:axis] + (s,) + x.shape[axis + 1 :] for s in sizes)
    return TupleType(tuple(TensorType(p, x.dtype) for p in pieces))


def concat(tensors: Sequence[ExprLike] | Expr, axis: int = 0) -> Call:
    """The tensors joined along ``axis``; they agree on every other axis."""
    return call(ops.concat, as_tuple_expr("concat", tensors), axis=check_axis("concat", axis))


def stack(tensors: Sequence[ExprLike] | Expr, axis: int = 0) -> Call:
    """The tensors (all of one shape) stacked along a new axis ``axis``."""
    return call(ops.stack, as_tuple_expr("stack", tensors), axis=check_axis("stack", axis))


def split(x: ExprLike, indices_or_sections: int | Sequence[int], axis: int = 0) -> Call:
    """A tuple of pieces of ``x`` along ``axis`` (NumPy's split).

    An int cuts ``x`` into that many equal pieces; a list of indices cuts before each index.
    """
    spec: int | tuple[int, ...]
    if isinstance(indices_or_sections, (list, tuple)):
        spec = check_ints("split", "indices_or_sections", indices_or_sections)
    else:
        spec = check_int("split", "indices_or_sections", indices_or_sections, minimum=1)
    return call(ops.split, as_expr(x), indices_or_sections=spec, axis=check_axis("split", axis))
