"""ONNX ops composed from rvm's elementwise ops: activations, Tan/Sinh/Cosh, IsNaN/IsInf,
and Hardmax.

Selu, Celu, ThresholdedRelu, Softsign, HardSwish, Mish, Swish and Shrink have no rvm op of their
own: each is the composition its ONNX definition gives. The later versions listed (22, 28...)
only add types (bfloat16, float16), so every version follows the same semantics.
"""

from __future__ import annotations

from rvm import op
from rvm.frontend.onnx.context import NodeContext
from rvm.frontend.onnx.registry import converter
from rvm.ir import Expr, const


def _scalar(ctx: NodeContext, x: Expr, value: float) -> Expr:
    """``value`` as a 0-d constant of ``x``'s dtype (no promotion of float16 inputs)."""
    return const(value, ctx.type(x).dtype)


@converter("Selu", since=(6, 22))
def _selu(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    alpha = _scalar(ctx, x, ctx.attr("alpha", 1.67326319217681884765625))
    gamma = _scalar(ctx, x, ctx.attr("gamma", 1.05070102214813232421875))
    neg = op.multiply(alpha, op.subtract(op.exp(x), _scalar(ctx, x, 1.0)))
    return ctx.emit(op.multiply(gamma, op.where(op.greater(x, _scalar(ctx, x, 0.0)), x, neg)))


@converter("Celu", since=(12, 28))
def _celu(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    alpha = _scalar(ctx, x, ctx.attr("alpha", 1.0))
    zero = _scalar(ctx, x, 0.0)
    neg = op.multiply(alpha, op.subtract(op.exp(op.divide(x, alpha)), _scalar(ctx, x, 1.0)))
    return ctx.emit(op.add(op.maximum(x, zero), op.minimum(zero, neg)))


@converter("ThresholdedRelu", since=(10, 22))
def _thresholded_relu(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    alpha = _scalar(ctx, x, ctx.attr("alpha", 1.0))
    return ctx.emit(op.where(op.greater(x, alpha), x, _scalar(ctx, x, 0.0)))


@converter("Softsign", since=(1, 22))
def _softsign(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    return ctx.emit(op.divide(x, op.add(_scalar(ctx, x, 1.0), op.abs(x))))


@converter("HardSwish", since=(14, 22))
def _hard_swish(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    gate = op.clip(op.add(op.multiply(x, _scalar(ctx, x, 1 / 6)), _scalar(ctx, x, 0.5)), 0.0, 1.0)
    return ctx.emit(op.multiply(x, gate))


@converter("Mish", since=(18, 22))
def _mish(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    return ctx.emit(op.multiply(x, op.tanh(op.softplus(x))))


@converter("Swish", since=24)
def _swish(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    alpha = _scalar(ctx, x, ctx.attr("alpha", 1.0))
    return ctx.emit(op.multiply(x, op.sigmoid(op.multiply(alpha, x))))


@converter("Shrink", since=9)
def _shrink(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    lambd = _scalar(ctx, x, ctx.attr("lambd", 0.5))
    bias = _scalar(ctx, x, ctx.attr("bias", 0.0))
    zero = _scalar(ctx, x, 0.0)
    low = op.where(op.less(x, op.negative(lambd)), op.add(x, bias), zero)
    return ctx.emit(op.where(op.greater(x, lambd), op.subtract(x, bias), low))


@converter("Tan", since=(7, 22))
def _tan(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    return ctx.emit(op.divide(op.sin(x), op.cos(x)))


def _hyperbolic(sign: float):
    """sinh (sign -1) and cosh (sign +1): (e^x + sign * e^-x) / 2."""

    def convert(ctx: NodeContext) -> Expr:
        x = ctx.input(0)
        both = op.add(op.exp(x), op.multiply(_scalar(ctx, x, sign), op.exp(op.negative(x))))
        return ctx.emit(op.multiply(both, _scalar(ctx, x, 0.5)))

    return convert


converter("Sinh", since=(9, 22))(_hyperbolic(-1.0))
converter("Cosh", since=(9, 22))(_hyperbolic(1.0))


@converter("IsNaN", since=(9, 13, 20))
def _is_nan(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    return ctx.emit(op.not_equal(x, x))


@converter("IsInf", since=(10, 20))
def _is_inf(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    inf = _scalar(ctx, x, float("inf"))
    pos = op.equal(x, inf) if ctx.attr("detect_positive", 1) else None
    neg = op.equal(x, op.negative(inf)) if ctx.attr("detect_negative", 1) else None
    if pos is None and neg is None:  # nothing to detect: all false (x < -inf never holds)
        return ctx.emit(op.less(x, op.negative(inf)))
    if pos is None or neg is None:
        return ctx.emit(pos if neg is None else neg)
    return ctx.emit(op.logical_or(pos, neg))


@converter("Hardmax", since=13)
def _hardmax(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    shape = ctx.shape(x)
    axis = ctx.attr("axis", -1) % len(shape)
    depth = shape[axis]
    if not isinstance(depth, int):
        ctx.fail(f"needs a static size along axis {axis}, got shape {tuple(shape)}")
    index = op.argmax(x, axis=axis, keepdims=False)
    return ctx.emit(op.one_hot(index, depth, axis=axis, dtype=ctx.type(x).dtype))
