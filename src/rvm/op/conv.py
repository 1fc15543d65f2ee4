"""Convolutions and pools over NCW / NCHW tensors with OIW / OIHW weights.

Attributes are stored normalized: ``strides`` and ``dilation`` as one int per spatial axis;
``padding`` as (left, right) for 1-d and (top, left, bottom, right) for 2-d (TVM's order). A
builder accepts an int (every side), a pair (per axis, both sides) or the full form. Output
sizes follow ``(size + pads - dilation * (kernel - 1) - 1) // stride + 1``; a symbolic spatial
size gives an unknown output size, a symbolic batch size passes through.
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm.errors import IRError
from rvm.ir.expr import Call, Op
from rvm.ir.types import Dim, TensorType, Type, promote_dtypes
from rvm.op import numpy_ref, ops
from rvm.op.core import ExprLike, as_expr, call, check_bool, check_int, check_ints, reference
from rvm.op.shapes import fmt, rule, window_out_dim

IntOrInts = int | Sequence[int]


def normalize_padding(op: str, padding: IntOrInts, nspatial: int) -> tuple[int, ...]:
    """Padding as (before..., after...) per spatial axis: 2 values for 1-d, 4 for 2-d."""
    pads = check_ints(op, "padding", padding)
    if len(pads) == 1:
        pads = pads * (2 * nspatial)
    elif len(pads) == nspatial and nspatial > 1:
        pads = pads * 2
    if len(pads) != 2 * nspatial:
        raise IRError(
            f"{op}: padding must have 1, {nspatial} or {2 * nspatial} values, got {padding!r}"
        )
    if any(p < 0 for p in pads):
        raise IRError(f"{op}: padding must be >= 0, got {padding!r}")
    return pads


def _positive(op: str, name: str, value: IntOrInts, n: int) -> tuple[int, ...]:
    out = check_ints(op, name, value, n)
    if any(v < 1 for v in out):
        raise IRError(f"{op}: {name} must be >= 1, got {value!r}")
    return out


def _pairs(pads: Sequence[int], nspatial: int) -> list[tuple[int, int]]:
    return [(pads[i], pads[i + nspatial]) for i in range(nspatial)]


def _check_rank(op: str, x: TensorType, rank: int, what: str) -> None:
    if x.shape is not None and len(x.shape) != rank:
        raise IRError(f"{op}: {what} must have rank {rank}, got {fmt(x.shape)}")


def _conv_rule(op: Op, nspatial: int) -> None:
    layout = "NCW" if nspatial == 1 else "NCHW"

    @rule(op)
    def infer_conv(call_: Call, args: list[TensorType]) -> Type:
        x, w = args
        _check_rank(op.name, x, 2 + nspatial, f"the input ({layout})")
        _check_rank(op.name, w, 2 + nspatial, f"the weight (O{layout[1:].replace('C', 'I')})")
        dtype = promote_dtypes(x.dtype, w.dtype)
        if x.shape is None:
            return TensorType(None, dtype)
        attrs = call_.attrs
        groups = attrs["groups"]
        cin, out_ch = x.shape[1], None if w.shape is None else w.shape[0]
        if w.shape is not None and isinstance(cin, int) and isinstance(w.shape[1], int):
            if cin != w.shape[1] * groups:
                raise IRError(
                    f"{op.name}: input {fmt(x.shape)} has {cin} channels but weight "
                    f"{fmt(w.shape)} with groups={groups} expects {w.shape[1] * groups}"
                )
        if isinstance(out_ch, int) and out_ch % groups:
            raise IRError(f"{op.name}: {out_ch} output channels do not divide into {groups} groups")
        spatial: list[Dim] = []
        for i, pads in enumerate(_pairs(attrs["padding"], nspatial)):
            kernel = None if w.shape is None else w.shape[2 + i]
            spatial.append(
                window_out_dim(
                    op.name, x.shape[2 + i], kernel, attrs["strides"][i], pads, attrs["dilation"][i]
                )
            )
        return TensorType((x.shape[0], out_ch, *spatial), dtype)


def _pool_rule(op: Op) -> None:
    @rule(op)
    def infer_pool(call_: Call, args: list[TensorType]) -> Type:
        (x,) = args
        _check_rank(op.name, x, 4, "the input (NCHW)")
        if x.shape is None:
            return x
        a = call_.attrs
        spatial = [
            window_out_dim(
                op.name,
                x.shape[2 + i],
                a["pool_size"][i],
                a["strides"][i],
                pads,
                a["dilation"][i],
                a["ceil_mode"],
            )
            for i, pads in enumerate(_pairs(a["padding"], 2))
        ]
        return TensorType((*x.shape[:2], *spatial), x.dtype)


def _global_pool_rule(op: Op) -> None:
    @rule(op)
    def infer_global_pool(call_: Call, args: list[TensorType]) -> Type:
        (x,) = args
        _check_rank(op.name, x, 4, "the input (NCHW)")
        return TensorType(None if x.shape is None else (*x.shape[:2], 1, 1), x.dtype)


_conv_rule(ops.conv1d, 1)
_conv_rule(ops.conv2d, 2)
_pool_rule(ops.max_pool2d)
_pool_rule(ops.avg_pool2d)
_global_pool_rule(ops.global_avg_pool2d)
_global_pool_rule(ops.global_max_pool2d)
for _name in (
    "conv1d",
    "conv2d",
    "max_pool2d",
    "avg_pool2d",
    "global_avg_pool2d",
    "global_max_pool2d",
):
    reference[getattr(ops, _name)] = getattr(numpy_ref, _name)


def conv1d(
    x: ExprLike,
    w: ExprLike,
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    groups: int = 1,
) -> Call:
    """1-d convolution (cross-correlation): x is (N, C, W), w is (O, C / groups, KW).

    ``padding`` is an int or (left, right).
    """
    return _conv_call(ops.conv1d, 1, x, w, strides, padding, dilation, groups)


def conv2d(
    x: ExprLike,
    w: ExprLike,
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    groups: int = 1,
) -> Call:
    """2-d convolution (cross-correlation): x is (N, C, H, W), w is (O, C / groups, KH, KW).

    ``padding`` is an int, (pad_h, pad_w), or (top, left, bottom, right).
    """
    return _conv_call(ops.conv2d, 2, x, w, strides, padding, dilation, groups)


def _conv_call(
    conv_op: Op,
    ndim: int,
    x: ExprLike,
    w: ExprLike,
    strides: IntOrInts,
    padding: IntOrInts,
    dilation: IntOrInts,
    groups: int,
) -> Call:
    """The call of ``conv_op`` over ``ndim`` spatial dims with normalized attributes."""
    name = conv_op.name
    return call(
        conv_op,
        as_expr(x),
        as_expr(w),
        strides=_positive(name, "strides", strides, ndim),
        padding=normalize_padding(name, padding, ndim),
        dilation=_positive(name, "dilation", dilation, ndim),
        groups=check_int(name, "groups", groups, minimum=1),
    )


def _pool_attrs(
    op: str,
    pool_size: IntOrInts,
    strides: IntOrInts,
    padding: IntOrInts,
    dilation: IntOrInts,
    ceil_mode: bool,
) -> dict:
    return {
        "pool_size": _positive(op, "pool_size", pool_size, 2),
        "strides": _positive(op, "strides", strides, 2),
        "padding": normalize_padding(op, padding, 2),
        "dilation": _positive(op, "dilation", dilation, 2),
        "ceil_mode": check_bool(op, "ceil_mode", ceil_mode),
    }


def max_pool2d(
    x: ExprLike,
    pool_size: IntOrInts = 1,
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    ceil_mode: bool = False,
) -> Call:
    """The maximum over windows of an NCHW tensor (padding never wins).

    As in TVM, ``strides`` default to 1, not to ``pool_size``.
    """
    attrs = _pool_attrs("max_pool2d", pool_size, strides, padding, dilation, ceil_mode)
    return call(ops.max_pool2d, as_expr(x), **attrs)


def avg_pool2d(
    x: ExprLike,
    pool_size: IntOrInts = 1,
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    ceil_mode: bool = False,
    count_include_pad: bool = False,
) -> Call:
    """The mean over windows of an NCHW tensor.

    The divisor counts padding elements only when ``count_include_pad``.
    """
    attrs = _pool_attrs("avg_pool2d", pool_size, strides, padding, dilation, ceil_mode)
    attrs["count_include_pad"] = check_bool("avg_pool2d", "count_include_pad", count_include_pad)
    return call(ops.avg_pool2d, as_expr(x), **attrs)


def global_avg_pool2d(x: ExprLike) -> Call:
    """The mean over H and W of an NCHW tensor, giving (N, C, 1, 1)."""
    return call(ops.global_avg_pool2d, as_expr(x))


def global_max_pool2d(x: ExprLike) -> Call:
    """The maximum over H and W of an NCHW tensor, giving (N, C, 1, 1)."""
    return call(ops.global_max_pool2d, as_expr(x))
