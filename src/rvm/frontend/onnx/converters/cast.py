"""ONNX conversions between element types: Cast, CastLike and BitCast.

Casts go through `rvm.op.cast`, which is NumPy's ``astype`` (with ``ml_dtypes`` for the narrow
types: round to nearest even, overflow to inf or NaN as the type has them). ONNX's ``saturate``
(the default since Cast-19) instead clamps to the largest finite value of a float8 target, NaN
staying NaN: `saturate_cast` clips before casting. Casting to FLOAT8E8M0 (a power-of-two scale)
rounds the exponent as ``round_mode`` says (up by default), from the float32 bits (`to_e8m0`).
String casts are not supported (rvm has no string dtype).
"""

from __future__ import annotations

import ml_dtypes

from rvm import op
from rvm.dtypes import dtype_kind
from rvm.frontend.onnx.context import NodeContext
from rvm.frontend.onnx.registry import converter
from rvm.frontend.onnx.weights import np_dtype
from rvm.ir import Expr, const

# Targets whose plain cast overflows to inf or NaN, so that ``saturate`` changes the result.
SATURATING = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"})
E8M0 = "float8_e8m0fnu"


def saturate_cast(ctx: NodeContext, x: Expr, dtype: str) -> Expr:
    """``x`` cast to float8 ``dtype``, values beyond its range (infinities too) clamped to its
    largest finite value; NaN stays NaN."""
    src = ctx.type(x).dtype
    top = float(ml_dtypes.finfo(dtype).max)
    if dtype_kind(src) == "f":
        top = min(top, float(ml_dtypes.finfo(src).max))  # a bound the source can hold
    elif top >= ml_dtypes.iinfo(src).max:
        return op.cast(x, dtype)  # every value of the integer source fits
    return op.cast(op.clip(x, -top, top), dtype)


def to_e8m0(x: Expr, saturate: bool, round_mode: str) -> Expr:
    """``x`` as FLOAT8E8M0: the exponent of its float32 bits, rounded per ``round_mode``
    ("up", "down", "nearest") on the mantissa, as ONNX's reference computes it; NaN and inf
    give NaN, and ``saturate`` keeps the largest exponent from rounding up into NaN."""

    def u32(v: int) -> Expr:
        return const(v, "uint32")

    bits = op.bitcast(op.cast(x, "float32"), "uint32")
    exponent = op.bitwise_and(op.right_shift(bits, u32(23)), u32(0xFF))
    special = op.equal(exponent, u32(0xFF))
    if round_mode == "up":
        up = op.greater(op.bitwise_and(bits, u32(0x7FFFFF)), u32(0))
    elif round_mode == "nearest":
        guard = op.greater(op.bitwise_and(bits, u32(0x400000)), u32(0))
        rest = op.greater(op.bitwise_and(bits, u32(0x3FFFFF)), u32(0))
        up = op.logical_and(guard, op.logical_or(rest, op.greater(exponent, u32(0))))
    else:
        up = op.zeros((), "bool")
    up = op.logical_and(up, op.logical_not(special))
    if saturate:
        up = op.logical_and(up, op.not_equal(exponent, u32(0xFE)))
    rounded = op.add(exponent, op.cast(up, "uint32"))
    byte = op.cast(op.where(special, u32(0xFF), rounded), "uint8")
    return op.bitcast(byte, E8M0)


def cast_to(ctx: NodeContext, x: Expr, dtype: str) -> Expr:
    """``x`` cast to ``dtype`` as the node's ``saturate`` and ``round_mode`` say."""
    saturate = bool(ctx.attr("saturate", 1))
    if dtype == E8M0:
        return to_e8m0(x, saturate, ctx.attr("round_mode", "up"))
    if ctx.type(x).dtype == dtype:
        return x
    if saturate and dtype in SATURATING:
        return saturate_cast(ctx, x, dtype)
    return op.cast(x, dtype)


@converter("Cast", since=(6, 9, 13, 19, 21, 23, 24, 25, 28))
def _cast(ctx: NodeContext) -> Expr:
    return ctx.emit(cast_to(ctx, ctx.input(0), np_dtype(ctx.attr("to"), "the target type")))


@converter("CastLike", since=(15, 19, 21, 23, 24, 25))
def _cast_like(ctx: NodeContext) -> Expr:
    x, like = ctx.input(0), ctx.input(1)
    return ctx.emit(cast_to(ctx, x, ctx.type(like).dtype))


@converter("BitCast", since=26)
def _bitcast(ctx: NodeContext) -> Expr:
    return ctx.emit(op.bitcast(ctx.input(0), np_dtype(ctx.attr("to"), "the target type")))
