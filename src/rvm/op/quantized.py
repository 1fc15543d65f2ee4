"""Integer (quantized) convolution and dense products with a requantizing epilogue.

``qconv2d(x, w, bias, scale)`` and ``qdense(x, w, bias, scale)`` are what a quantized model's
``DequantizeLinear -> Conv/MatMul/Gemm -> QuantizeLinear`` chain computes, as one op: the
products of ``x - x_zero`` (uint8 or int8) and ``w`` (int8 or uint8, zero point 0: symmetric
weights, as ONNX Runtime's quantizer makes them; or an int8 weight's values as int16,
`widen_weight`) summed in int32, plus the int32 ``bias`` (in the accumulator's scale), then
requantized per output channel::

    y = clip(round_half_even(float32(acc) * scale[o]) + y_zero, low, high)   # cast to dtype

``scale`` (float32, one per output channel or a scalar) is ``x_scale * w_scale / y_scale``;
``low``/``high`` are the output type's range, narrowed to ``y_zero`` from below when a ReLU
was folded in. ``qconv2d``'s weight is (O, C / groups, KH, KW), or in another
``weight_layout``: "OHWI", or "turned" (the jit kernels' layout for a convolution turned
around, `turn_qconv2d`, with its ``weight_shape``); ``qdense``'s is (N, K) as in
`rvm.op.dense`, and ``x`` is (..., K). Both are OPAQUE: their kernels stand alone.

``qadd(a, b)`` is a quantized model's residual, ``DequantizeLinear(a) + DequantizeLinear(b)
[-> Relu] -> QuantizeLinear`` of two tensors of one shape (uint8 or int8, per-tensor scales
and zero points), in float32 as ONNX defines the chain::

    y = clip(rint(((a - a_zero) * a_scale + (b - b_zero) * b_scale) / y_scale) + y_zero, low, high)

(a ReLU folded into ``low``: ``y_zero``, as above). OPAQUE too: the library's pass over it is
cut over rvm's pool (`rvm.kernels.qadd`).
"""

from __future__ import annotations

import numpy as np

from rvm.errors import IRError
from rvm.ir.expr import Call, Constant
from rvm.ir.op import OpPattern
from rvm.ir.types import TensorType, Type
from rvm.op import ops
from rvm.op.conv import IntOrInts, conv_out_shape, normalize_padding, positive_ints
from rvm.op.core import OP_PRECISION, ExprLike, as_expr, call, check_float, check_int, define_op
from rvm.op.shapes import fmt, rule, unify_dim

__all__ = ["qadd", "qconv2d", "qdense", "turn_qconv2d", "widen_weight"]

define_op("qconv2d", OpPattern.OPAQUE, 4)
define_op("qdense", OpPattern.OPAQUE, 4)
define_op("qadd", OpPattern.OPAQUE, 2)
OP_PRECISION.update(qconv2d="int8", qdense="int8", qadd="int8")

ACTIVATIONS = ("uint8", "int8")
RANGES = {"uint8": (0, 255), "int8": (-128, 127)}
# A weight's dtypes: int16 holds an int8 weight's values widened once (`widen_weight`).
WEIGHTS = (*ACTIVATIONS, "int16")
WEIGHT_LAYOUTS = ("OIHW", "OHWI", "turned")


def _quant_attrs(name: str, x_zero: int, y_zero: int, dtype: str, relu: bool) -> dict:
    if dtype not in RANGES:
        raise IRError(f"{name}: dtype must be uint8 or int8, got {dtype!r}")
    lo, hi = RANGES[dtype]
    y_zero = check_int(name, "y_zero", y_zero)
    if not lo <= y_zero <= hi:
        raise IRError(f"{name}: y_zero {y_zero} is outside {dtype}'s range [{lo}, {hi}]")
    return {
        "x_zero": check_int(name, "x_zero", x_zero),
        "y_zero": y_zero,
        "low": y_zero if relu else lo,
        "high": hi,
        "dtype": dtype,
    }


def qconv2d(
    x: ExprLike,
    w: ExprLike,
    bias: ExprLike,
    scale: ExprLike,
    *,
    x_zero: int = 0,
    y_zero: int = 0,
    dtype: str = "uint8",
    relu: bool = False,
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    groups: int = 1,
    low: int | None = None,
    high: int | None = None,
    weight_layout: str = "OIHW",
    weight_shape: tuple[int, ...] | None = None,
) -> Call:
    """Quantized 2-d convolution (see the module docstring); ``low``/``high`` (as printed)
    override the range ``dtype`` and ``relu`` give. ``weight_layout`` "OHWI" takes the
    weight as (O, KH, KW, C / groups): each output channel's taps with their channels
    contiguous, the order the integer kernel's depths take (importers store it so, once,
    and the kernel reads it in place); "turned" takes it as `turn_qconv2d` makes it, with
    ``weight_shape`` the OHWI weight's shape (one group)."""
    attrs = _quant_attrs("qconv2d", x_zero, y_zero, dtype, relu)
    attrs["strides"] = positive_ints("qconv2d", "strides", strides, 2)
    attrs["padding"] = normalize_padding("qconv2d", padding, 2)
    attrs["dilation"] = positive_ints("qconv2d", "dilation", dilation, 2)
    attrs["groups"] = check_int("qconv2d", "groups", groups, minimum=1)
    if weight_layout not in WEIGHT_LAYOUTS:
        raise IRError(f"qconv2d: weight_layout must be OIHW, OHWI or turned, got {weight_layout!r}")
    if weight_layout != "OIHW":  # the default is not written (modules saved before read so)
        attrs["weight_layout"] = weight_layout
    if weight_layout == "turned":
        if weight_shape is None or attrs["groups"] != 1:
            raise IRError("qconv2d: a turned weight needs its weight_shape and one group")
        attrs["weight_shape"] = positive_ints("qconv2d", "weight_shape", weight_shape, 4)
    _override(attrs, low, high)
    args = (as_expr(x), as_expr(w), as_expr(bias), as_expr(scale))
    return call(ops.qconv2d, *args, **attrs)


def qdense(
    x: ExprLike,
    w: ExprLike,
    bias: ExprLike,
    scale: ExprLike,
    *,
    x_zero: int = 0,
    y_zero: int = 0,
    dtype: str = "uint8",
    relu: bool = False,
    low: int | None = None,
    high: int | None = None,
) -> Call:
    """Quantized ``x @ w.T`` (see the module docstring)."""
    attrs = _quant_attrs("qdense", x_zero, y_zero, dtype, relu)
    _override(attrs, low, high)
    args = (as_expr(x), as_expr(w), as_expr(bias), as_expr(scale))
    return call(ops.qdense, *args, **attrs)


def qadd(
    a: ExprLike,
    b: ExprLike,
    *,
    a_scale: float,
    b_scale: float,
    y_scale: float,
    a_zero: int = 0,
    b_zero: int = 0,
    y_zero: int = 0,
    dtype: str = "uint8",
    relu: bool = False,
    low: int | None = None,
    high: int | None = None,
) -> Call:
    """The requantized sum of two quantized tensors of one shape (see the module docstring);
    the scales are float32 values."""
    attrs = _quant_attrs("qadd", a_zero, y_zero, dtype, relu)
    attrs["a_zero"] = attrs.pop("x_zero")
    attrs["b_zero"] = check_int("qadd", "b_zero", b_zero)
    for name, value in (("a_scale", a_scale), ("b_scale", b_scale), ("y_scale", y_scale)):
        attrs[name] = float(np.float32(check_float("qadd", name, value)))
        if not attrs[name] > 0:
            raise IRError(f"qadd: {name} must be positive, got {value!r}")
    _override(attrs, low, high)
    return call(ops.qadd, as_expr(a), as_expr(b), **attrs)


def _override(attrs: dict, low: int | None, high: int | None) -> None:
    lo, hi = RANGES[attrs["dtype"]]
    if low is not None:
        attrs["low"] = max(lo, check_int("quantized op", "low", low))
    if high is not None:
        attrs["high"] = min(hi, check_int("quantized op", "high", high))


def _check_operands(name: str, args: list[TensorType], channels: object) -> None:
    x, w, bias, scale = args
    if x.dtype is not None and x.dtype not in ACTIVATIONS:
        raise IRError(f"{name}: the input must be uint8 or int8, got {x.dtype}")
    if w.dtype is not None and w.dtype not in WEIGHTS:
        raise IRError(f"{name}: the weight must be int8, uint8 or int16, got {w.dtype}")
    if bias.dtype is not None and bias.dtype != "int32":
        raise IRError(f"{name}: the bias must be int32, got {bias.dtype}")
    if scale.dtype is not None and scale.dtype != "float32":
        raise IRError(f"{name}: the scale must be float32, got {scale.dtype}")
    for what, t in (("bias", bias), ("scale", scale)):
        if t.shape is None or t.shape == () or t.shape == (1,):
            continue
        if len(t.shape) != 1 or (isinstance(channels, int) and t.shape[0] not in (channels,)):
            raise IRError(
                f"{name}: the {what} must be a scalar or have one value per output channel "
                f"({channels}), got shape {fmt(t.shape)}"
            )


def oihw(w: TensorType, attrs: dict) -> TensorType:
    """A qconv2d's weight type as (O, C / groups, KH, KW), whatever its ``weight_layout``."""
    layout = attrs.get("weight_layout", "OIHW")
    if layout == "turned":
        o, kh, kw, c = attrs["weight_shape"]
        depth = kh * kw * -(-c // 4) + 1  # a panel's rows: quads of depth, then the sums
        shape = w.shape
        if shape is not None and not (
            len(shape) == 4 and shape[1] == depth and shape[3] == 4 and shape[0] * shape[2] >= o
        ):
            raise IRError(
                f"qconv2d: a turned weight of {fmt((o, kh, kw, c))} is (panels, {depth}, width, "
                f"4) with panels x width >= {o}, got {fmt(shape)}"
            )
        return TensorType((o, c, kh, kw), w.dtype)
    if layout == "OIHW" or w.shape is None or len(w.shape) != 4:
        return w
    o, kh, kw, c = w.shape
    return TensorType((o, c, kh, kw), w.dtype)


def turn_qconv2d(value: Call, weight: object) -> Call | None:
    """The ``qconv2d`` computing ``value`` (a qconv2d of static shapes by the constant
    ``weight``, numpy, in its ``weight_layout``) turned around, its weight turned here, once
    (`rvm.kernels.qturned.turn_weight`), where this CPU's turned kernel uses its lanes better
    than the direct one (`rvm.kernels.qturned.turned`: the rule, written once); None where
    not."""
    import numpy as np

    from rvm.kernels import qturned

    attrs = value.attrs
    layout = attrs.get("weight_layout", "OIHW")
    out_type = getattr(value, "type", None)
    if layout == "turned" or not isinstance(weight, np.ndarray) or weight.ndim != 4:
        return None
    if weight.dtype != np.int8 or not isinstance(out_type, TensorType) or out_type.shape is None:
        return None
    if not all(isinstance(d, int) for d in out_type.shape[2:]):
        return None
    ohwi = weight if layout == "OHWI" else weight.transpose(0, 2, 3, 1)
    oh, ow = out_type.shape[2:]
    kw, sw, dw = ohwi.shape[2], attrs["strides"][1], attrs["dilation"][1]
    pitch = ow + (kw - 1) * dw // sw  # the image's row (`rvm.kernels.qconv._direct`)
    if not qturned.turned(ohwi.shape[0], oh, ow, pitch, attrs["groups"]):
        return None
    turned = Constant(qturned.turn_weight(np.ascontiguousarray(ohwi)))
    shape = tuple(int(d) for d in ohwi.shape)
    new = {**attrs, "weight_layout": "turned", "weight_shape": shape}
    return call(ops.qconv2d, value.args[0], turned, *value.args[2:], **new)


def widen_weight(value: Call, weight: object) -> Call | None:
    """The ``qconv2d`` or ``qdense`` computing ``value`` (by the constant int8 ``weight``,
    numpy, in its ``weight_layout``, not turned) on the weight as this CPU's integer kernels
    without VNNI read it (`rvm.kernels.qtile.MADD16`): where its pairs fit 16 bits
    (`rvm.kernels.qtile.pairs_fit`: 7-bit weights), the same int8 weight with
    ``weight_pairs="int16"``, which the ``vpmaddubsw`` tiles read as it is; else widened to
    int16 here, once (the ``vpmaddwd`` tiles would widen it at every call). None where
    neither (VNNI). Widened values are the weight's: a CPU with VNNI narrows them back at each
    call (`rvm.kernels.qgemm`); ``weight_pairs`` is a fact its kernels do not need."""
    import numpy as np

    from rvm.kernels import qtile

    if not qtile.MADD16 or value.attrs.get("weight_layout", "OIHW") == "turned":
        return None
    if not isinstance(weight, np.ndarray) or weight.dtype != np.int8:
        return None
    if value.attrs.get("weight_pairs") == "int16":
        return None
    if qtile.pairs_fit(weight):
        attrs = {**value.attrs, "weight_pairs": "int16"}
        return call(value.callee, *value.args, **attrs)
    wide = Constant(np.ascontiguousarray(weight).astype(np.int16))
    return call(value.callee, value.args[0], wide, *value.args[2:], **value.attrs)


@rule(ops.qadd)
def _infer_qadd(call_: Call, args: list[TensorType]) -> Type:
    a, b = args
    for t in (a, b):
        if t.dtype is not None and t.dtype not in ACTIVATIONS:
            raise IRError(f"qadd: the inputs must be uint8 or int8, got {t.dtype}")
    if a.shape is not None and b.shape is not None:
        if len(a.shape) != len(b.shape):
            raise IRError(f"qadd: the inputs differ in shape: {fmt(a.shape)} and {fmt(b.shape)}")
        for axis, (p, q) in enumerate(zip(a.shape, b.shape, strict=True)):
            unify_dim("qadd", p, q, f"the inputs differ in shape at axis {axis}")
    return TensorType(a.shape if a.shape is not None else b.shape, call_.attrs["dtype"])


@rule(ops.qconv2d)
def _infer_qconv2d(call_: Call, args: list[TensorType]) -> Type:
    x, w = args[0], oihw(args[1], call_.attrs)
    shape = conv_out_shape("qconv2d", x, w, call_.attrs, 2)
    _check_operands("qconv2d", args, None if w.shape is None else w.shape[0])
    return TensorType(shape, call_.attrs["dtype"])


@rule(ops.qdense)
def _infer_qdense(call_: Call, args: list[TensorType]) -> Type:
    x, w = args[0], args[1]
    _check_operands("qdense", args, None if w.shape is None else w.shape[0])
    if w.shape is not None and len(w.shape) != 2:
        raise IRError(f"qdense: the weight must be (N, K), got {fmt(w.shape)}")
    if x.shape is None or w.shape is None:
        return TensorType(None, call_.attrs["dtype"])
    if not x.shape:
        raise IRError("qdense: the input must have at least 1 axis, got a scalar")
    k, kw = x.shape[-1], w.shape[1]
    if isinstance(k, int) and isinstance(kw, int) and k != kw:
        raise IRError(f"qdense: input {fmt(x.shape)} and weight {fmt(w.shape)} differ in K")
    return TensorType((*x.shape[:-1], w.shape[0]), call_.attrs["dtype"])
