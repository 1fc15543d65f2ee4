"""Quantization ONNX ops, composed from rvm ops: QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, QLinearMatMul, QLinearConv, MatMulInteger and ConvInteger.

Each follows the formula of its ONNX definition, in the precision and order of operations of
ONNX's reference implementation (``onnx.reference``), which produced the conformance data:

- QuantizeLinear: ``y = saturate(round(x / scale) + zero_point)``, rounding half to even
  (`rvm.op.round`), the sum in int32 and clipped to the target's range (int16...int2, uint16...
  uint2). A float8 target instead casts ``x / scale`` (saturating by default, as Cast does) and
  ignores the zero point, which must be 0; a float4 target adds it and casts. The output type
  is the zero point's, else ``output_dtype``, else uint8. The division runs in the scale's
  type since version 23 (in ``precision``'s when given), before in the operands' common type.
- DequantizeLinear: ``y = (float32(x) - float32(zero_point)) * scale`` in float32, cast to
  ``output_dtype`` or the scale's type; float8 zero points are 0 and ignored.
- Scales and zero points are per tensor (a scalar), per axis (1-D along ``axis``) or blocked
  (``block_size`` consecutive elements along ``axis`` share one: `_granular`).
- The integer ops compute in int32 (convolutions in float64, exact for any realistic size,
  since rvm's convolutions take floats) and requantize with the float scales.

Every version listed shares these semantics: later versions only add types and attributes
(axis at 13, saturate at 19, block_size and output_dtype at 21, precision at 23), whose
defaults give the earlier behaviour, and version 23 fixes the division's type to the scale's.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from rvm import op
from rvm.dtypes import dtype_kind
from rvm.frontend.onnx.context import NodeContext
from rvm.frontend.onnx.converters.cast import SATURATING, saturate_cast
from rvm.frontend.onnx.converters.conv import convolve
from rvm.frontend.onnx.registry import converter
from rvm.frontend.onnx.weights import np_dtype
from rvm.ir import Expr, const
from rvm.ir.types import NARROW_DTYPES, promote_dtypes

_VERSIONS = (10, 13, 19, 21, 23, 24, 25, 28)
_FLOAT8 = SATURATING  # the float8 types whose zero point is 0 by definition
_ROUNDED_BOUND = 2.0**17  # beyond every target's range, and exact in every float type


def _granular(ctx: NodeContext, value: Expr, x: Expr, axis: int, block: int) -> Expr:
    """A scale or zero point shaped to broadcast against ``x``: a scalar as it is, a 1-D
    tensor along ``axis``, or blocks of ``block`` elements along ``axis`` spread out."""
    shape, xshape = ctx.shape(value), ctx.shape(x)
    if all(d == 1 for d in shape):
        return op.reshape(value, ()) if shape else value
    if not block:
        if len(shape) != 1:
            ctx.fail(f"a per-axis scale or zero point must be 1-D, got shape {shape}")
        return op.reshape(value, tuple(-1 if i == axis else 1 for i in range(len(xshape))))
    size = xshape[axis]
    if not isinstance(size, int):
        ctx.fail(f"blocked quantization needs a static size along axis {axis}, got {xshape}")
    which = const(np.arange(size, dtype=np.int64) // block)
    return op.take(value, which, axis=axis)


def _options(ctx: NodeContext, x: Expr) -> tuple[int, int]:
    rank = len(ctx.shape(x))
    axis = ctx.attr("axis", 1)
    return (axis % rank if rank else 0), ctx.attr("block_size", 0)


def _quotient(ctx: NodeContext, x: Expr, scale: Expr) -> Expr:
    """``x / scale`` in the ``precision`` type when given, else (since version 23) in the
    scale's type, else (before) in their common type as NumPy (and ONNX's reference) computes
    it: float32 for a narrow type, which rvm does not promote implicitly."""
    precision = ctx.attr("precision", 0)
    dt = ctx.type(x).dtype, ctx.type(scale).dtype
    if precision:
        common = np_dtype(precision, "precision")
    elif ctx.version >= 23:
        common = dt[1]
    elif dt[0] != dt[1] and (dt[0] in NARROW_DTYPES or dt[1] in NARROW_DTYPES):
        common = "float32"
    else:
        common = promote_dtypes(*dt)
    return op.divide(_as(ctx, x, common), _as(ctx, scale, common))


def _as(ctx: NodeContext, x: Expr, dtype: str) -> Expr:
    """``x`` cast to ``dtype``; itself when it has that type (a cast to its own type would
    count toward a fused kernel's ops: a QDQ residual's dequantize, add and quantize then
    fit in one kernel, `rvm.transform.fuse_ops.MAX_GROUP_OPS`)."""
    return x if ctx.type(x).dtype == dtype else op.cast(x, dtype)


@converter("QuantizeLinear", since=_VERSIONS)
def _quantize(ctx: NodeContext) -> Expr:
    x, scale, zero = ctx.input(0), ctx.input(1), ctx.optional(2)
    axis, block = _options(ctx, x)
    if zero is not None:
        target = ctx.type(zero).dtype
    else:
        out = ctx.attr("output_dtype", 0)
        target = np_dtype(out, "output_dtype") if out else "uint8"
    q = _quotient(ctx, x, _granular(ctx, scale, x, axis, block))
    if target in _FLOAT8:
        saturate = bool(ctx.attr("saturate", 1))
        return ctx.emit(saturate_cast(ctx, q, target) if saturate else op.cast(q, target))
    if dtype_kind(target) == "f":  # float4/float6: ml_dtypes' cast saturates by itself
        if zero is not None:
            dt = ctx.type(q).dtype
            q = op.add(q, op.cast(_granular(ctx, zero, x, axis, block), dt))
        return ctx.emit(op.cast(q, target))
    rounded = op.clip(op.round(q), -_ROUNDED_BOUND, _ROUNDED_BOUND)
    y = op.cast(rounded, "int32")
    if zero is not None:
        y = op.add(y, op.cast(_granular(ctx, zero, x, axis, block), "int32"))
    info = ml_dtypes.iinfo(target)
    return ctx.emit(op.cast(op.clip(y, int(info.min), int(info.max)), target))


@converter("DequantizeLinear", since=_VERSIONS)
def _dequantize(ctx: NodeContext) -> Expr:
    x, scale, zero = ctx.input(0), ctx.input(1), ctx.optional(2)
    axis, block = _options(ctx, x)
    out = ctx.attr("output_dtype", 0)
    target = np_dtype(out, "output_dtype") if out else ctx.type(scale).dtype
    y = _as(ctx, x, "float32")
    if zero is not None and dtype_kind(ctx.type(x).dtype) != "f":  # float zero points are 0
        y = op.subtract(y, op.cast(_granular(ctx, zero, x, axis, block), "float32"))
    y = op.multiply(y, op.cast(_granular(ctx, scale, x, axis, block), "float32"))
    return ctx.emit(y if target == "float32" else op.cast(y, target))


@converter("DynamicQuantizeLinear", since=11)
def _dynamic_quantize(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    dt = ctx.type(x).dtype
    zero = const(0.0, dt)
    high = op.maximum(op.max(x), zero)
    low = op.minimum(op.min(x), zero)
    span = op.where(op.equal(high, low), const(1.0, dt), op.subtract(high, low))
    scale = ctx.emit(op.divide(span, const(255.0, dt)))
    zero_point = op.round(op.clip(op.subtract(zero, op.divide(low, scale)), 0.0, 255.0))
    y = op.clip(op.add(op.round(op.divide(x, scale)), zero_point), 0.0, 255.0)
    return [ctx.emit(op.cast(y, "uint8")), scale, ctx.emit(op.cast(zero_point, "uint8"))]


def _centered(ctx: NodeContext, x: Expr, zero: Expr | None, row_axis: int | None) -> Expr:
    """``int32(x) - int32(zero)``; a 1-D zero point runs along ``row_axis`` (rows of a
    matmul's left operand, output channels of a convolution weight), else the last axis."""
    y = op.cast(x, "int32")
    if zero is None:
        return y
    z = op.cast(zero, "int32")
    if row_axis is not None and len(ctx.shape(zero)) == 1:
        rank = len(ctx.shape(x))
        z = op.reshape(z, tuple(-1 if i == row_axis % rank else 1 for i in range(rank)))
    return op.subtract(y, z)


def _requantize(
    ctx: NodeContext, acc: Expr, multiplier: Expr, zero: Expr, clip_first: bool
) -> Expr:
    """``acc * multiplier + zero`` rounded and clipped to the zero point's integer type (in
    the order of ONNX's reference: QLinearConv clips before rounding)."""
    y = op.multiply(acc, multiplier)
    y = op.add(y, op.cast(zero, ctx.type(y).dtype))
    target = ctx.type(zero).dtype
    info = ml_dtypes.iinfo(target)
    lo, hi = float(info.min), float(info.max)
    y = op.round(op.clip(y, lo, hi)) if clip_first else op.clip(op.round(y), lo, hi)
    return ctx.emit(op.cast(y, target))


@converter("MatMulInteger", since=10)
def _matmul_integer(ctx: NodeContext) -> Expr:
    a = _centered(ctx, ctx.input(0), ctx.optional(2), -2)
    b = _centered(ctx, ctx.input(1), ctx.optional(3), None)
    return ctx.emit(op.matmul(a, b))


@converter("QLinearMatMul", since=(10, 21))
def _qlinear_matmul(ctx: NodeContext) -> Expr:
    a = _centered(ctx, ctx.input(0), ctx.input(2), -2)
    b = _centered(ctx, ctx.input(3), ctx.input(5), None)
    a_scale = ctx.input(1)
    if len(ctx.shape(a_scale)) == 1:  # per row of a
        a_scale = op.reshape(a_scale, (-1, 1))
    multiplier = op.divide(op.multiply(a_scale, ctx.input(4)), ctx.input(6))
    return _requantize(ctx, op.matmul(a, b), multiplier, ctx.input(7), clip_first=False)


def _integer_conv(ctx: NodeContext, x: Expr, w: Expr) -> Expr:
    """The convolution of int32 ``x`` and ``w``, exact through float64."""
    y = convolve(ctx, op.cast(x, "float64"), op.cast(w, "float64"))
    return op.cast(y, "int32")


@converter("ConvInteger", since=10)
def _conv_integer(ctx: NodeContext) -> Expr:
    x = _centered(ctx, ctx.input(0), ctx.optional(2), None)
    w = _centered(ctx, ctx.input(1), ctx.optional(3), 0)
    return ctx.emit(_integer_conv(ctx, x, w))


@converter("QLinearConv", since=10)
def _qlinear_conv(ctx: NodeContext) -> Expr:
    x = _centered(ctx, ctx.input(0), ctx.input(2), None)
    w = _centered(ctx, ctx.input(3), ctx.input(5), 0)
    acc = _integer_conv(ctx, x, w)
    spatial = len(ctx.shape(w)) - 2
    bias = ctx.optional(8)
    if bias is not None:
        acc = op.add(acc, op.reshape(op.cast(bias, "int32"), (-1,) + (1,) * spatial))
    w_scale = ctx.input(4)
    if len(ctx.shape(w_scale)) == 1:  # per output channel
        w_scale = op.reshape(w_scale, (1, -1) + (1,) * spatial)
    multiplier = op.divide(op.multiply(ctx.input(1), w_scale), ctx.input(6))
    return _requantize(ctx, acc, multiplier, ctx.input(7), clip_first=True)
