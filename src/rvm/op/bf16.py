"""bf16 products with float32 accumulation: ``dense_bf16`` and ``conv2d_bf16``.

What ``rvm.compile(mod, precision="bf16")`` turns float32 dense, matmul and conv2d calls with
constant weights into (`rvm.transform.to_bf16`). The weight is converted once, at compile
time, to bf16 and stored as its int16 bits in the layout the kernel reads: ``(rows, kp)``,
each row's depth padded with zeros to an even ``kp``. The input stays float32 and is rounded
to bf16 (to nearest even) by the op; products are summed in float32; the result is float32.

- ``dense_bf16(x, w)``: ``x`` (..., k) float32, ``w`` (units, kp) int16: ``bf16(x) @ w.T``.
- ``conv2d_bf16(x, w, strides, padding, dilation, groups, kernel)``: ``x`` NCHW float32, ``w``
  (out channels, kp) int16 with depth in channel pairs, ``(c2, dy, dx, parity)`` --
  conv2d's OIHW weight through `conv_pairs`, ``kp = pair_depth(c / groups, kh, kw)`` -- and
  ``kernel`` its (kh, kw).
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm.errors import IRError
from rvm.ir.expr import Call
from rvm.ir.op import OpPattern
from rvm.ir.types import TensorType, Type
from rvm.kernels.reference.bf16 import (  # noqa: F401 (the rounding and layout, for to_bf16)
    bf16_bits,
    conv_pairs,
    pair_depth,
)
from rvm.op import ops
from rvm.op.conv import normalize_padding, pad_pairs, positive_ints
from rvm.op.core import OP_PRECISION, ExprLike, as_expr, call, check_int, define_op
from rvm.op.shapes import fmt, rule, window_out_dim

__all__ = ["conv2d_bf16", "dense_bf16"]

define_op("dense_bf16", OpPattern.OUT_ELEMWISE_FUSABLE, 2)
define_op("conv2d_bf16", OpPattern.OUT_ELEMWISE_FUSABLE, 2)
OP_PRECISION.update(dense_bf16="bf16", conv2d_bf16="bf16")


def padded_depth(k: int) -> int:
    """A weight row's length for depth ``k``: ``k`` rounded up to even (bf16 pairs)."""
    return k + (k & 1)


def _check_inputs(op: str, x: TensorType, w: TensorType) -> None:
    if x.dtype is not None and x.dtype != "float32":
        raise IRError(f"{op}: expects a float32 input, got {x.dtype} {fmt(x.shape)}")
    if w.dtype is not None and w.dtype != "int16":
        raise IRError(f"{op}: expects the weight as int16 bf16 bits, got {w.dtype}")
    if w.shape is not None and len(w.shape) != 2:
        raise IRError(f"{op}: the weight must be 2-d (rows, padded depth), got {fmt(w.shape)}")


@rule(ops.dense_bf16)
def _infer_dense(call_: Call, args: list[TensorType]) -> Type:
    x, w = args
    _check_inputs("dense_bf16", x, w)
    if x.shape is None:
        return TensorType(None, "float32")
    if not x.shape:
        raise IRError("dense_bf16: the input must have rank >= 1, got ()")
    k = x.shape[-1]
    if w.shape is not None and isinstance(k, int) and isinstance(w.shape[1], int):
        if w.shape[1] != padded_depth(k):
            raise IRError(
                f"dense_bf16: input {fmt(x.shape)} has {k} features, weight {fmt(w.shape)} "
                f"expects {w.shape[1]} padded to even"
            )
    return TensorType((*x.shape[:-1], None if w.shape is None else w.shape[0]), "float32")


@rule(ops.conv2d_bf16)
def _infer_conv(call_: Call, args: list[TensorType]) -> Type:
    x, w = args
    _check_inputs("conv2d_bf16", x, w)
    if x.shape is None:
        return TensorType(None, "float32")
    if len(x.shape) != 4:
        raise IRError(f"conv2d_bf16: the input must be NCHW, got {fmt(x.shape)}")
    attrs = call_.attrs
    kernel, groups = attrs["kernel"], attrs["groups"]
    cin = x.shape[1]
    if w.shape is not None and isinstance(cin, int) and isinstance(w.shape[1], int):
        if cin % groups or w.shape[1] != pair_depth(cin // groups, *kernel):
            raise IRError(
                f"conv2d_bf16: input {fmt(x.shape)} with groups={groups} and kernel {kernel} "
                f"does not match weight {fmt(w.shape)}"
            )
    spatial = [
        window_out_dim(
            "conv2d_bf16",
            x.shape[2 + i],
            kernel[i],
            attrs["strides"][i],
            pads,
            attrs["dilation"][i],
        )  # fmt: skip
        for i, pads in enumerate(pad_pairs(attrs["padding"], 2))
    ]
    return TensorType((x.shape[0], None if w.shape is None else w.shape[0], *spatial), "float32")


def dense_bf16(x: ExprLike, w: ExprLike) -> Call:
    """``bf16(x) @ w.T`` in float32 sums: ``w`` (units, kp) the int16 bits of bf16 values."""
    return call(ops.dense_bf16, as_expr(x), as_expr(w))


def conv2d_bf16(
    x: ExprLike,
    w: ExprLike,
    strides: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    kernel: int | Sequence[int] = 1,
) -> Call:
    """conv2d of float32 ``x`` (NCHW) with the bf16 weight ``w`` (out channels, kp; int16
    bits of conv2d's OIHW weight in channel pairs, `conv_pairs`) of spatial size
    ``kernel``."""
    name = "conv2d_bf16"
    return call(
        ops.conv2d_bf16,
        as_expr(x),
        as_expr(w),
        strides=positive_ints(name, "strides", strides, 2),
        padding=normalize_padding(name, padding, 2),
        dilation=positive_ints(name, "dilation", dilation, 2),
        groups=check_int(name, "groups", groups, minimum=1),
        kernel=positive_ints(name, "kernel", kernel, 2),
    )
