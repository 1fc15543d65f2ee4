"""Elementwise ATen ops: arithmetic, comparisons, logic, unary math and activations.

Arithmetic computes in the dtype torch recorded for the node's output (so ``int / int`` is a
float division, as in torch); comparisons in the inputs' common dtype. A Python number
operand becomes a 0-d constant of that dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from rvm import op
from rvm.frontend.torch.context import NodeContext, SymInt
from rvm.frontend.torch.registry import converter
from rvm.ir import Expr
from rvm.ir.types import FLOAT_DTYPES, promote_dtypes


def common_dtype(ctx: NodeContext, *values: Any) -> str:
    """The dtype torch computes ``values`` in: tensors promote; a number joins its kind."""
    tensors = [ctx.dtype_of(v) for v in values if isinstance(v, Expr)]
    dtype = tensors[0] if tensors else "float32"
    for d in tensors[1:]:
        dtype = promote_dtypes(dtype, d) or dtype
    for v in values:
        if isinstance(v, bool) or isinstance(v, Expr):
            continue
        if isinstance(v, float) and dtype not in FLOAT_DTYPES:
            dtype = "float32"
        elif isinstance(v, (int, SymInt)) and dtype == "bool":
            dtype = "int64"
    return dtype


def operands(ctx: NodeContext, dtype: str, *values: Any) -> list[Expr]:
    return [ctx.scalar(v, dtype) for v in values]


def _arith(fn: Callable[[Expr, Expr], Expr]) -> Callable[..., Expr]:
    def convert(ctx: NodeContext, a: Any, b: Any, **_: Any) -> Expr:
        x, y = operands(ctx, ctx.out_dtype(), a, b)
        return ctx.emit(fn(x, y))

    return convert


def _compare(fn: Callable[[Expr, Expr], Expr]) -> Callable[..., Expr]:
    def convert(ctx: NodeContext, a: Any, b: Any) -> Expr:
        x, y = operands(ctx, common_dtype(ctx, a, b), a, b)
        return ctx.emit(fn(x, y))

    return convert


_ARITH = {
    "mul": (op.multiply, ("Tensor", "Scalar")),
    "maximum": (op.maximum, ("default",)),
    "minimum": (op.minimum, ("default",)),
    "logaddexp": (op.logaddexp, ("default",)),
    "remainder": (op.mod, ("Tensor", "Scalar")),
    "fmod": (op.fmod, ("Tensor", "Scalar")),
    "bitwise_and": (op.bitwise_and, ("Tensor", "Scalar")),
    "bitwise_or": (op.bitwise_or, ("Tensor", "Scalar")),
    "bitwise_xor": (op.bitwise_xor, ("Tensor", "Scalar")),
}
for _name, (_fn, _overloads) in _ARITH.items():
    converter(*(f"aten.{_name}.{o}" for o in _overloads))(_arith(_fn))

_COMPARE = {
    "eq": op.equal,
    "ne": op.not_equal,
    "lt": op.less,
    "le": op.less_equal,
    "gt": op.greater,
    "ge": op.greater_equal,
}
for _name, _fn in _COMPARE.items():
    converter(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar")(_compare(_fn))

for _name, _fn in {"and": op.logical_and, "or": op.logical_or}.items():
    converter(f"aten.logical_{_name}.default")(
        lambda ctx, a, b, _fn=_fn: ctx.emit(_fn(ctx.cast(a, "bool"), ctx.cast(b, "bool")))
    )


@converter("aten.logical_xor.default")
def _logical_xor(ctx: NodeContext, a: Expr, b: Expr) -> Expr:
    return ctx.emit(op.not_equal(ctx.cast(a, "bool"), ctx.cast(b, "bool")))


@converter("aten.logical_not.default")
def _logical_not(ctx: NodeContext, x: Expr) -> Expr:
    return ctx.emit(op.logical_not(ctx.cast(x, "bool")))


@converter("aten.add.Tensor", "aten.add.Scalar", "aten.sub.Tensor", "aten.sub.Scalar")
def _add_sub(ctx: NodeContext, a: Any, b: Any, alpha: Any = 1) -> Expr:
    x, y = operands(ctx, ctx.out_dtype(), a, b)
    if alpha != 1:
        y = ctx.emit(op.multiply(y, ctx.scalar(alpha, ctx.out_dtype())))
    sub = ctx.node.target.__name__.startswith("sub")
    return ctx.emit(op.subtract(x, y) if sub else op.add(x, y))


@converter("aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode", "aten.div.Scalar_mode")
def _div(ctx: NodeContext, a: Any, b: Any, *, rounding_mode: str | None = None) -> Expr:
    dtype = ctx.out_dtype()
    x, y = operands(ctx, dtype, a, b)
    if rounding_mode == "floor":
        return ctx.emit(
            op.floor_divide(x, y) if dtype not in FLOAT_DTYPES else op.floor(op.divide(x, y))
        )
    q = ctx.emit(op.divide(x, y))
    if rounding_mode == "trunc" and dtype in FLOAT_DTYPES:
        return ctx.emit(op.where(op.less(q, 0.0), op.ceil(q), op.floor(q)))
    return q


@converter("aten.pow.Tensor_Tensor", "aten.pow.Tensor_Scalar", "aten.pow.Scalar")
def _pow(ctx: NodeContext, a: Any, b: Any) -> Expr:
    dtype = ctx.out_dtype()
    if isinstance(b, (int, float)) and not isinstance(b, bool) and isinstance(a, Expr):
        x = ctx.cast(a, dtype)
        if b == 2:
            return ctx.emit(op.multiply(x, x))
        if b == 0.5 and dtype in FLOAT_DTYPES:
            return ctx.emit(op.sqrt(x))
        if b == 1:
            return x
    x, y = operands(ctx, dtype, a, b)
    return ctx.emit(op.power(x, y))


@converter("aten.atan2.default", "aten.atan2.Tensor")
def _atan2(ctx: NodeContext, a: Expr, b: Expr) -> Expr:
    y, x = operands(ctx, ctx.out_dtype(), a, b)
    base = op.atan(op.divide(y, x))
    pi = ctx.scalar(math.pi, ctx.out_dtype())
    neg = op.where(op.less(y, 0.0), op.subtract(base, pi), op.add(base, pi))
    safe = op.where(op.less(x, 0.0), neg, base)
    zero_x = op.where(op.greater(y, 0.0), pi * 0.5, op.where(op.less(y, 0.0), pi * -0.5, y * 0.0))
    return ctx.emit(op.where(op.equal(x, 0.0), zero_x, safe))


# -- unary --------------------------------------------------------------------------------------
_UNARY: dict[str, Callable[[Expr], Expr]] = {
    "abs": op.abs,
    "acos": op.acos,
    "acosh": op.acosh,
    "asin": op.asin,
    "asinh": op.asinh,
    "atan": op.atan,
    "atanh": op.atanh,
    "ceil": op.ceil,
    "cos": op.cos,
    "erf": op.erf,
    "exp": op.exp,
    "floor": op.floor,
    "log": op.log,
    "neg": op.negative,
    "relu": op.relu,
    "round": op.round,
    "rsqrt": op.rsqrt,
    "sigmoid": op.sigmoid,
    "sign": op.sign,
    "sin": op.sin,
    "sqrt": op.sqrt,
    "tanh": op.tanh,
    "silu": op.silu,
    "bitwise_not": op.bitwise_not,
    "expm1": op.expm1,
    "log1p": op.log1p,
    "log2": lambda x: op.multiply(op.log(x), 1.0 / math.log(2.0)),
    "log10": lambda x: op.multiply(op.log(x), 1.0 / math.log(10.0)),
    "tan": lambda x: op.divide(op.sin(x), op.cos(x)),
    "sinh": lambda x: op.multiply(op.subtract(op.exp(x), op.exp(op.negative(x))), 0.5),
    "cosh": lambda x: op.multiply(op.add(op.exp(x), op.exp(op.negative(x))), 0.5),
    "reciprocal": lambda x: op.divide(op.ones((), infer_dtype(x)), x),
    "exp2": lambda x: op.exp(op.multiply(x, math.log(2.0))),
    "signbit": None,
    "trunc": lambda x: op.where(op.less(x, op.zeros((), infer_dtype(x))), op.ceil(x), op.floor(x)),
}


def infer_dtype(x: Expr) -> str:
    from rvm.ir import infer_type

    return infer_type(x).dtype  # type: ignore[attr-defined]


def _unary(fn: Callable[[Expr], Expr]) -> Callable[..., Expr]:
    def convert(ctx: NodeContext, x: Expr) -> Expr:
        dtype = ctx.out_dtype()
        if dtype != "bool" and ctx.dtype_of(x) != dtype:
            x = ctx.cast(x, dtype)
        return ctx.emit(fn(x))

    return convert


for _name, _fn in _UNARY.items():
    if _fn is not None:
        converter(f"aten.{_name}.default")(_unary(_fn))


@converter("aten.signbit.default")
def _signbit(ctx: NodeContext, x: Expr) -> Expr:
    if ctx.dtype_of(x) in FLOAT_DTYPES:  # -0.0 has its sign bit set: 1 / -0.0 is -inf
        return ctx.emit(op.less(op.where(op.equal(x, 0.0), op.divide(1.0, x), x), 0.0))
    return ctx.emit(op.less(x, ctx.scalar(0, ctx.dtype_of(x))))


@converter("aten.fmax.default", "aten.fmin.default")
def _fmax(ctx: NodeContext, a: Expr, b: Expr) -> Expr:
    """The larger (smaller) value, ignoring a NaN beside a number."""
    x, y = operands(ctx, ctx.out_dtype(), a, b)
    pick = op.maximum if "fmax" in str(ctx.node.target) else op.minimum
    both = pick(x, y)
    return ctx.emit(op.where(op.not_equal(x, x), y, op.where(op.not_equal(y, y), x, both)))


@converter("aten.copysign.Tensor", "aten.copysign.Scalar")
def _copysign(ctx: NodeContext, a: Any, b: Any) -> Expr:
    x, y = operands(ctx, ctx.out_dtype(), a, b)
    negative = op.less(op.where(op.equal(y, 0.0), op.divide(1.0, y), y), 0.0)
    return ctx.emit(op.where(negative, op.negative(op.abs(x)), op.abs(x)))


@converter("aten.isnan.default")
def _isnan(ctx: NodeContext, x: Expr) -> Expr:
    return ctx.emit(op.not_equal(x, x))


@converter("aten.isinf.default")
def _isinf(ctx: NodeContext, x: Expr) -> Expr:
    if ctx.dtype_of(x) not in FLOAT_DTYPES:
        return ctx.emit(op.not_equal(x, x))  # integers are never infinite: all False
    return ctx.emit(op.equal(op.abs(x), float("inf")))


@converter("aten.gelu.default")
def _gelu(ctx: NodeContext, x: Expr, *, approximate: str = "none") -> Expr:
    return ctx.emit(op.gelu(x, approximate=approximate))


@converter("aten.leaky_relu.default")
def _leaky_relu(ctx: NodeContext, x: Expr, negative_slope: float = 0.01) -> Expr:
    return ctx.emit(op.leaky_relu(x, alpha=float(negative_slope)))


@converter("aten.hardtanh.default")
def _hardtanh(ctx: NodeContext, x: Expr, min_val: float = -1.0, max_val: float = 1.0) -> Expr:
    return ctx.emit(op.clip(x, float(min_val), float(max_val)))


@converter("aten.elu.default")
def _elu(
    ctx: NodeContext, x: Expr, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0
) -> Expr:
    neg = op.multiply(op.subtract(op.exp(op.multiply(x, float(input_scale))), 1.0), float(alpha))
    out = op.where(op.greater(x, 0.0), x, neg)
    return ctx.emit(out if scale == 1 else op.multiply(out, float(scale)))


@converter("aten.clamp.default", "aten.clamp.Tensor")
def _clamp(ctx: NodeContext, x: Expr, min: Any = None, max: Any = None) -> Expr:  # noqa: A002
    dtype = ctx.out_dtype()
    x = ctx.cast(x, dtype)
    if isinstance(min, Expr) or isinstance(max, Expr):
        if min is not None:
            x = ctx.emit(op.maximum(x, ctx.scalar(min, dtype)))
        if max is not None:
            x = ctx.emit(op.minimum(x, ctx.scalar(max, dtype)))
        return x
    if dtype not in FLOAT_DTYPES:
        lo = x if min is None else ctx.emit(op.maximum(x, ctx.scalar(min, dtype)))
        return lo if max is None else ctx.emit(op.minimum(lo, ctx.scalar(max, dtype)))
    if min is not None and max is not None and min > max:
        return ctx.emit(op.full(ctx.out_shape(), float(max), dtype))
    return ctx.emit(
        op.clip(x, None if min is None else float(min), None if max is None else float(max))
    )


@converter("aten.where.self")
def _where(ctx: NodeContext, cond: Expr, a: Any, b: Any) -> Expr:
    dtype = ctx.out_dtype()
    x, y = operands(ctx, dtype, a, b)
    return ctx.emit(op.where(ctx.cast(cond, "bool"), x, y))
