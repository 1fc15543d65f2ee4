"""Elementwise ONNX ops: arithmetic, comparisons, logic, unary math and activations.

Binary ops from opset 7 broadcast as NumPy does, which is rvm's rule; the legacy forms
(``broadcast``/``axis`` attributes of opset 1 and 6) are not implemented. Several schema
versions only widen the accepted types; a converter lists every version whose semantics it
follows.
"""

from __future__ import annotations

from functools import reduce as fold

from rvm import op
from rvm.frontend.onnx.context import NodeContext
from rvm.frontend.onnx.registry import converter
from rvm.ir import Expr, const


def _binary(fn):
    def convert(ctx: NodeContext) -> Expr:
        return ctx.emit(fn(ctx.input(0), ctx.input(1)))

    return convert


for _name, _fn, _since in (
    ("Add", op.add, (7, 13, 14)),
    ("Sub", op.subtract, (7, 13, 14)),
    ("Mul", op.multiply, (7, 13, 14)),
    ("Div", op.divide, (7, 13, 14)),
    ("Equal", op.equal, (7, 11, 13, 19)),
    ("Less", op.less, (7, 9, 13)),
    ("Greater", op.greater, (7, 9, 13)),
    ("LessOrEqual", op.less_equal, (12, 16)),
    ("GreaterOrEqual", op.greater_equal, (12, 16)),
    ("And", op.logical_and, (7,)),
    ("Or", op.logical_or, (7,)),
    ("Xor", op.not_equal, (7,)),
    ("MatMul", op.matmul, (1, 9, 13)),
):
    converter(_name, since=_since)(_binary(_fn))


@converter("Mod", since=(10, 13, 28))
def _mod(ctx: NodeContext) -> Expr:
    fn = op.fmod if ctx.attr("fmod", 0) else op.mod  # the sign of the dividend or the divisor
    return ctx.emit(fn(ctx.input(0), ctx.input(1)))


@converter("Pow", since=(7, 12, 13, 15))
def _pow(ctx: NodeContext) -> Expr:
    x, y = ctx.input(0), ctx.input(1)
    dtype = ctx.type(x).dtype
    if dtype is not None and ctx.type(y).dtype != dtype:
        y = ctx.emit(op.cast(y, dtype))  # ONNX keeps the base's type
    return ctx.emit(op.power(x, y))


def _unary(fn):
    def convert(ctx: NodeContext) -> Expr:
        return ctx.emit(fn(ctx.input(0)))

    return convert


for _name, _fn, _since in (
    ("Neg", op.negative, (6, 13)),
    ("Abs", op.abs, (6, 13)),
    ("Sqrt", op.sqrt, (6, 13)),
    ("Exp", op.exp, (6, 13)),
    ("Log", op.log, (6, 13)),
    ("Tanh", op.tanh, (6, 13)),
    ("Sigmoid", op.sigmoid, (6, 13)),
    ("Relu", op.relu, (6, 13, 14)),
    ("Erf", op.erf, (9, 13)),
    ("Floor", op.floor, (6, 13)),
    ("Ceil", op.ceil, (6, 13)),
    ("Round", op.round, (11, 22)),
    ("Sign", op.sign, (9, 13)),
    ("Sin", op.sin, (7, 22)),
    ("Cos", op.cos, (7, 22)),
    # version 22 of the inverse trigonometric and hyperbolic ops only adds bfloat16
    ("Asin", op.asin, (7, 22)),
    ("Acos", op.acos, (7, 22)),
    ("Atan", op.atan, (7, 22)),
    ("Asinh", op.asinh, (9, 22)),
    ("Acosh", op.acosh, (9, 22)),
    ("Atanh", op.atanh, (9, 22)),
    ("Softplus", op.softplus, (1, 22)),
    ("Not", op.logical_not, (1,)),
):
    converter(_name, since=_since)(_unary(_fn))


@converter("Reciprocal", since=(6, 13))
def _reciprocal(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    return ctx.emit(op.divide(const(1, ctx.type(x).dtype), x))


@converter("LeakyRelu", since=(6, 16))
def _leaky_relu(ctx: NodeContext) -> Expr:
    return ctx.emit(op.leaky_relu(ctx.input(0), alpha=ctx.attr("alpha", 0.01)))


@converter("Elu", since=(6, 22))
def _elu(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    alpha = ctx.attr("alpha", 1.0)
    neg = op.multiply(op.subtract(op.exp(x), 1.0), alpha)
    return ctx.emit(op.where(op.greater(x, 0.0), x, neg))


@converter("HardSigmoid", since=(6, 22))
def _hard_sigmoid(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    y = op.add(op.multiply(x, ctx.attr("alpha", 0.2)), ctx.attr("beta", 0.5))
    return ctx.emit(op.clip(y, 0.0, 1.0))


@converter("PRelu", since=(7, 9, 16))
def _prelu(ctx: NodeContext) -> Expr:
    x, slope = ctx.input(0), ctx.input(1)
    return ctx.emit(op.where(op.less(x, 0.0), op.multiply(x, slope), x))


@converter("Gelu", since=20)
def _gelu(ctx: NodeContext) -> Expr:
    return ctx.emit(op.gelu(ctx.input(0), approximate=ctx.attr("approximate", "none")))


@converter("Clip", since=6)
def _clip_v6(ctx: NodeContext) -> Expr:
    lo, hi = ctx.attr("min", None), ctx.attr("max", None)
    return ctx.emit(op.clip(ctx.input(0), lo, hi))


@converter("Clip", since=(11, 12, 13))
def _clip_v11(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    lo, hi = ctx.optional(1), ctx.optional(2)
    if (lo is None or ctx.const(1) is not None) and (hi is None or ctx.const(2) is not None):
        bounds = [None if v is None else ctx.const(i).item() for i, v in ((1, lo), (2, hi))]
        return ctx.emit(op.clip(x, *bounds))
    if lo is not None:  # bounds known only at run time
        x = ctx.emit(op.maximum(x, lo))
    if hi is not None:
        x = ctx.emit(op.minimum(x, hi))
    return x


@converter("Where", since=(9, 16))
def _where(ctx: NodeContext) -> Expr:
    return ctx.emit(op.where(ctx.input(0), ctx.input(1), ctx.input(2)))


def _variadic(fn, mean: bool = False):
    def convert(ctx: NodeContext) -> Expr:
        args = [a for a in ctx.inputs if a is not None]
        if not args:
            ctx.fail("needs at least one input")
        out = ctx.emit(fold(fn, args))
        if mean:
            out = ctx.emit(op.divide(out, const(len(args), ctx.type(out).dtype)))
        return out

    return convert


converter("Sum", since=(6, 8, 13))(_variadic(op.add))
converter("Mean", since=(6, 8, 13))(_variadic(op.add, mean=True))
converter("Max", since=(6, 8, 12, 13))(_variadic(op.maximum))
converter("Min", since=(6, 8, 12, 13))(_variadic(op.minimum))
