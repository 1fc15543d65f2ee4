"""Helpers of the type rules: argument checks, broadcasting, axes and symbolic products.

A dimension is an int, a symbolic name (a str) or None (unknown). The helpers reason the way
the rules promise: a name may be any size at run time (including 1), so only two different
ints prove an incompatibility; anything unproven gives an unknown dimension, never an error.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rvm.errors import IRError
from rvm.ir import dims as dim_exprs
from rvm.ir.op import infer
from rvm.ir.types import STORAGE_DTYPES, AnyType, Dim, Shape, TensorType, TupleType, Type
from rvm.op.ops import STORAGE_OP_NAMES

if TYPE_CHECKING:
    from rvm.ir.expr import Call, Op

Rule = Callable[["Call", "list[TensorType]"], Type]
ANY = AnyType()


def rule(op: Op) -> Callable[[Rule], Rule]:
    """Register a type rule for ``op`` that receives its arguments as TensorTypes.

    The wrapper checks the argument count and turns ``Any`` into a tensor of unknown shape and
    dtype, so rules only handle TensorTypes whose shape or dtype may be None. A call whose rule
    leaves a dtype unknown because an argument is ``Any`` (a value not typed yet, such as the
    result of a recursive call still being inferred) is ``Any`` itself: like ``Any``, it gives
    way when branches join (`rvm.ir.infer.join_types`) instead of making their dtype unknown.
    Rules of ops taking one Tuple argument (concat, stack) are registered with `rule_raw`.
    """

    def register(fn: Rule) -> Rule:
        def checked(call: Call, arg_types: list[Type]) -> Type:
            check_num_args(op, arg_types)
            args = [as_tensor(op.name, t, i) for i, t in enumerate(arg_types)]
            if op.name not in STORAGE_OP_NAMES:
                check_computes(op, args)
            try:
                ty = fn(call, args)
            except KeyError as err:
                raise IRError(f"{op.name}: missing attribute {err}") from None
            if _dtype_unknown(ty) and any(isinstance(t, AnyType) for t in arg_types):
                return ANY
            return ty

        infer[op] = checked
        return fn

    return register


def _dtype_unknown(ty: Type) -> bool:
    if isinstance(ty, TupleType):
        return any(_dtype_unknown(f) for f in ty.fields)
    return isinstance(ty, TensorType) and ty.dtype is None


def rule_raw(op: Op) -> Callable[[Callable[[Call, list[Type]], Type]], Callable]:
    """Register a rule that receives the raw argument types (after the count check).

    Only ops that take the storage dtypes (concat, stack: `rvm.op.ops.STORAGE_OP_NAMES`) use it, so
    it does not refuse them as `rule` does."""

    def register(fn: Callable[[Call, list[Type]], Type]) -> Callable:
        def checked(call: Call, arg_types: list[Type]) -> Type:
            check_num_args(op, arg_types)
            try:
                return fn(call, arg_types)
            except KeyError as err:
                raise IRError(f"{op.name}: missing attribute {err}") from None

        infer[op] = checked
        return fn

    return register


def check_computes(op: Op, arg_types: Sequence[Type]) -> None:
    """Refuse a storage-only dtype (int4...) to ``op``, which computes with its inputs."""
    for i, ty in enumerate(arg_types):
        if isinstance(ty, TensorType) and ty.dtype in STORAGE_DTYPES:
            raise IRError(
                f"{op.name}: input {i} is {ty.dtype}, a dtype rvm only stores, moves and "
                "compares; op.cast it to int8 (or wider) to compute with it"
            )


def check_num_args(op: Op, arg_types: Sequence[Type]) -> None:
    if op.num_inputs >= 0 and len(arg_types) != op.num_inputs:
        raise IRError(f"{op.name}: expects {op.num_inputs} inputs, got {len(arg_types)}")


def as_tensor(op: str, ty: Type, index: int = 0) -> TensorType:
    """``ty`` as a TensorType (Any becomes fully unknown); other types are an error."""
    if isinstance(ty, TensorType):
        return ty
    if isinstance(ty, AnyType):
        return TensorType(None, None)
    raise IRError(f"{op}: input {index} must be a tensor, got {ty}")


def fmt(shape: Shape | None) -> str:
    """A shape as the user wrote it: ``(2, 3)``, ``('n', 4)``."""
    return "(unknown rank)" if shape is None else repr(tuple(shape))


# ---------------------------------------------------------------------------------------------
# Broadcasting


def broadcast_dim(a: Dim, b: Dim) -> Dim:
    """The broadcast of two dims, or raise ValueError when two ints provably clash."""
    if isinstance(a, int) and isinstance(b, int):
        if a == b or b == 1:
            return a
        if a == 1:
            return b
        raise ValueError
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, int):  # an int k != 1 against a name or unknown: k, or a run-time error
        return a
    if isinstance(b, int):
        return b
    if a == b:  # the same name
        return a
    return None  # two different names, or a name against an unknown


def broadcast_shapes(op: str, *shapes: Shape | None) -> Shape | None:
    """NumPy broadcasting of ``shapes`` with symbolic dims; IRError names ``op``."""
    if any(s is None for s in shapes):
        return None
    out: Shape = ()
    for shape in shapes:
        assert shape is not None
        n = max(len(out), len(shape))
        left = (1,) * (n - len(out)) + tuple(out)
        right = (1,) * (n - len(shape)) + tuple(shape)
        try:
            out = tuple(broadcast_dim(x, y) for x, y in zip(left, right))
        except ValueError:
            listed = " and ".join(fmt(s) for s in shapes)
            raise IRError(f"{op}: cannot broadcast shapes {listed}") from None
    return out


# ---------------------------------------------------------------------------------------------
# Axes


def normalize_axis(op: str, axis: int, ndim: int, *, what: str = "axis") -> int:
    """``axis`` in ``[0, ndim)``; IRError for an axis out of range."""
    if not -ndim <= axis < ndim:
        raise IRError(f"{op}: {what} {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim


def normalize_axes(op: str, axes: Sequence[int], ndim: int, *, what: str = "axis") -> list[int]:
    """Every axis normalized; IRError for out-of-range or repeated axes."""
    out = [normalize_axis(op, a, ndim, what=what) for a in axes]
    if len(set(out)) != len(out):
        raise IRError(f"{op}: repeated {what} in {tuple(axes)!r}")
    return out


def reduce_shape(op: str, shape: Shape | None, axis: Sequence[int] | None, keepdims: bool):
    """The shape left by reducing ``axis`` (None: all) of ``shape``."""
    if shape is None:
        return None
    ndim = len(shape)
    axes = range(ndim) if axis is None else normalize_axes(op, axis, ndim)
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


# ---------------------------------------------------------------------------------------------
# Products of dims


def dims_product(dims: Sequence[Dim]) -> Dim:
    """The product of dims: an int, a name, or an expression (``heads*seq``, `rvm.ir.dims`);
    None when a dim is unknown."""
    out: Dim = 1
    for d in dims:
        out = dim_exprs.mul(out, d)  # type: ignore[assignment]
    return out


def factor(dims: Sequence[Dim]) -> tuple[int, Counter[str]] | None:
    """The int factor and the multiset of names of a product; None when a dim is unknown."""
    if any(d is None for d in dims):
        return None
    ints = math.prod(d for d in dims if isinstance(d, int))  # type: ignore[misc]
    return ints, Counter(d for d in dims if isinstance(d, str))


def unify_dim(op: str, a: Dim, b: Dim, what: str) -> Dim:
    """Two dims that must be equal: the better-known one, IRError when two ints differ."""
    if isinstance(a, int) and isinstance(b, int):
        if a != b:
            raise IRError(f"{op}: {what}: {a} != {b}")
        return a
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    if a == b:
        return a
    return a if b is None else (b if a is None else None)


def window_out_dim(
    op: str,
    size: Dim,
    kernel: Dim,
    stride: int,
    pads: tuple[int, int],
    dilation: int,
    ceil_mode: bool = False,
) -> Dim:
    """Output size of a sliding window (conv, pool) along one axis; None if not static.

    ``ceil_mode`` rounds up as PyTorch/ONNX do, dropping a last window that would start in the
    right padding.
    """
    if not isinstance(size, int) or not isinstance(kernel, int):
        return None
    span = size + pads[0] + pads[1] - dilation * (kernel - 1) - 1
    if span < 0:
        raise IRError(
            f"{op}: window of size {kernel} (dilation {dilation}) is larger than the padded "
            f"input of size {size + pads[0] + pads[1]}"
        )
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + pads[0]:
        out -= 1
    return out
