"""Convolutions and transposed convolutions over 1, 2 or 3 spatial axes (NCW, NCHW, NCDHW).

One definition serves every rank: ``conv{1,2,3}d`` and ``conv{1,2,3}d_transpose`` are separate
ops (the jit lowers conv1d/conv2d itself, the others run their numpy kernel) sharing one type
rule, one builder and one reference each. Attributes are stored normalized: ``strides``,
``dilation`` and ``output_padding`` as one int per spatial axis; ``padding`` as (before...,
after...) per spatial axis (TVM's (top, left, bottom, right) in 2-d). A builder accepts an int
(every side), one value per axis (both sides) or the full form. A symbolic spatial size gives an
unknown output size; a symbolic batch size passes through.

A convolution's output size is ``(size + before + after - dilation * (kernel - 1) - 1) //
stride + 1``. A transposed convolution (the gradient of a convolution with the same attributes;
its weight is (in channels, out channels / groups, kernel...)) scatters input position ``i``
through kernel offset ``k`` to ``i * stride + k * dilation``, then drops ``before`` positions at
the start and ``after`` at the end and adds ``output_padding`` zeros-or-values at the end:
``stride * (size - 1) + dilation * (kernel - 1) + 1 - before - after + output_padding``.
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm.errors import IRError
from rvm.ir.expr import Call, Constant, Op
from rvm.ir.op import OpPattern
from rvm.ir.types import Dim, TensorType, Type, promote_dtypes
from rvm.op import ops
from rvm.op.core import ExprLike, as_expr, call, check_int, check_ints, define_op
from rvm.op.shapes import fmt, rule, window_out_dim

__all__ = [
    "conv1d",
    "conv1d_transpose",
    "conv2d",
    "conv2d_packed",
    "conv2d_transpose",
    "conv2d_winograd",
    "conv3d",
    "conv3d_transpose",
]

# The ops of this module (`rvm.op.core.define_op`).
define_op("conv1d", OpPattern.OUT_ELEMWISE_FUSABLE, 2)
define_op("conv2d", OpPattern.OUT_ELEMWISE_FUSABLE, 2)
define_op("conv2d_packed", OpPattern.OUT_ELEMWISE_FUSABLE, 2)
define_op("conv2d_winograd", OpPattern.OUT_ELEMWISE_FUSABLE, 2)
define_op("conv3d", OpPattern.OPAQUE, 2)
define_op("conv1d_transpose", OpPattern.OPAQUE, 2)
define_op("conv2d_transpose", OpPattern.OPAQUE, 2)
define_op("conv3d_transpose", OpPattern.OPAQUE, 2)

IntOrInts = int | Sequence[int]
LAYOUTS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}


def normalize_padding(op: str, padding: IntOrInts, nspatial: int) -> tuple[int, ...]:
    """Padding as (before..., after...) per spatial axis: 2 values for 1-d, 4 for 2-d..."""
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


def positive_ints(op: str, name: str, value: IntOrInts, n: int) -> tuple[int, ...]:
    """``n`` ints >= 1 (a single int is repeated)."""
    out = check_ints(op, name, value, n)
    if any(v < 1 for v in out):
        raise IRError(f"{op}: {name} must be >= 1, got {value!r}")
    return out


def pad_pairs(pads: Sequence[int], nspatial: int) -> list[tuple[int, int]]:
    """(before..., after...) as one (before, after) pair per spatial axis."""
    return [(pads[i], pads[i + nspatial]) for i in range(nspatial)]


def check_rank(op: str, x: TensorType, rank: int, what: str) -> None:
    """IRError unless ``x`` (of known rank) has ``rank`` axes."""
    if x.shape is not None and len(x.shape) != rank:
        raise IRError(f"{op}: {what} must have rank {rank}, got {fmt(x.shape)}")


def _check_groups(op: str, x: TensorType, w: TensorType, groups: int, transpose: bool) -> Dim:
    """Checks the channels against the weight and ``groups``; returns the output channels.

    A convolution's weight is (out, in / groups, ...); a transposed one's (in, out / groups).
    """
    assert x.shape is not None
    if w.shape is None:
        return None
    per_group = w.shape[0] if transpose else w.shape[1]
    if not transpose and isinstance(per_group, int):
        per_group *= groups
    cin = x.shape[1]
    if isinstance(cin, int) and isinstance(per_group, int) and cin != per_group:
        raise IRError(
            f"{op}: input {fmt(x.shape)} has {cin} channels but weight {fmt(w.shape)} "
            f"with groups={groups} expects {per_group}"
        )
    what = "input" if transpose else "output"
    if isinstance(w.shape[0], int) and w.shape[0] % groups:
        raise IRError(f"{op}: {w.shape[0]} {what} channels do not divide into {groups} groups")
    if not transpose:
        return w.shape[0]
    if isinstance(w.shape[1], int):
        return w.shape[1] * groups
    return w.shape[1] if groups == 1 else None


def _transpose_out_dim(op: str, size: Dim, kernel: Dim, i: int, attrs: dict, nsp: int) -> Dim:
    if not isinstance(size, int) or not isinstance(kernel, int):
        return None
    lo, hi = pad_pairs(attrs["padding"], nsp)[i]
    stride, dil = attrs["strides"][i], attrs["dilation"][i]
    out = stride * (size - 1) + dil * (kernel - 1) + 1 - lo - hi + attrs["output_padding"][i]
    if out < 1:
        raise IRError(f"{op}: padding ({lo}, {hi}) leaves no output along spatial axis {i}")
    return out


def conv_out_shape(
    name: str, x: TensorType, w: TensorType, attrs: dict, nspatial: int, transpose: bool = False
) -> tuple[Dim, ...] | None:
    """The output shape of convolution ``name`` of ``x`` by ``w`` with ``attrs`` (None when
    ``x``'s rank is unknown), checking ranks, channels and groups."""
    layout = LAYOUTS[nspatial]
    weight = ("IO" if transpose else "OI") + layout[2:]
    check_rank(name, x, 2 + nspatial, f"the input ({layout})")
    check_rank(name, w, 2 + nspatial, f"the weight ({weight})")
    if x.shape is None:
        return None
    out_ch = _check_groups(name, x, w, attrs["groups"], transpose)
    spatial: list[Dim] = []
    for i, pads in enumerate(pad_pairs(attrs["padding"], nspatial)):
        size, kernel = x.shape[2 + i], None if w.shape is None else w.shape[2 + i]
        if transpose:
            spatial.append(_transpose_out_dim(name, size, kernel, i, attrs, nspatial))
            continue
        stride, dil = attrs["strides"][i], attrs["dilation"][i]
        spatial.append(window_out_dim(name, size, kernel, stride, pads, dil))
    return (x.shape[0], out_ch, *spatial)


def _conv_rule(op: Op, nspatial: int, transpose: bool) -> None:
    @rule(op)
    def infer_conv(call_: Call, args: list[TensorType]) -> Type:
        x, w = args
        shape = conv_out_shape(op.name, x, w, call_.attrs, nspatial, transpose)
        return TensorType(shape, promote_dtypes(x.dtype, w.dtype))


for _n in (1, 2, 3):
    for _transpose, _name in ((False, f"conv{_n}d"), (True, f"conv{_n}d_transpose")):
        _conv_rule(getattr(ops, _name), _n, _transpose)


def _conv_call(
    conv_op: Op,
    ndim: int,
    x: ExprLike,
    w: ExprLike,
    strides: IntOrInts,
    padding: IntOrInts,
    dilation: IntOrInts,
    groups: int,
    output_padding: IntOrInts | None = None,
) -> Call:
    """The call of ``conv_op`` over ``ndim`` spatial dims with normalized attributes."""
    name = conv_op.name
    attrs = {
        "strides": positive_ints(name, "strides", strides, ndim),
        "padding": normalize_padding(name, padding, ndim),
    }
    if output_padding is not None:
        extra = check_ints(name, "output_padding", output_padding, ndim)
        if any(e < 0 for e in extra):
            raise IRError(f"{name}: output_padding must be >= 0, got {output_padding!r}")
        attrs["output_padding"] = extra
    attrs["dilation"] = positive_ints(name, "dilation", dilation, ndim)
    attrs["groups"] = check_int(name, "groups", groups, minimum=1)
    return call(conv_op, as_expr(x), as_expr(w), **attrs)


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


def conv3d(
    x: ExprLike,
    w: ExprLike,
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    groups: int = 1,
) -> Call:
    """3-d convolution: x is (N, C, D, H, W), w is (O, C / groups, KD, KH, KW).

    ``padding`` is an int, (pad_d, pad_h, pad_w), or (front, top, left, back, bottom, right).
    """
    return _conv_call(ops.conv3d, 3, x, w, strides, padding, dilation, groups)


def conv1d_transpose(
    x: ExprLike,
    w: ExprLike,
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    output_padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    groups: int = 1,
) -> Call:
    """1-d transposed convolution: x is (N, C, W), w is (C, O / groups, KW); see the module
    docstring for the output size."""
    return _conv_call(
        ops.conv1d_transpose, 1, x, w, strides, padding, dilation, groups, output_padding
    )


def conv2d_transpose(
    x: ExprLike,
    w: ExprLike,
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    output_padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    groups: int = 1,
) -> Call:
    """2-d transposed convolution (the gradient of conv2d): x is (N, C, H, W), w is
    (C, O / groups, KH, KW)."""
    return _conv_call(
        ops.conv2d_transpose, 2, x, w, strides, padding, dilation, groups, output_padding
    )


def conv3d_transpose(
    x: ExprLike,
    w: ExprLike,
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    output_padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    groups: int = 1,
) -> Call:
    """3-d transposed convolution: x is (N, C, D, H, W), w is (C, O / groups, KD, KH, KW)."""
    return _conv_call(
        ops.conv3d_transpose, 3, x, w, strides, padding, dilation, groups, output_padding
    )


# -- conv2d on a weight packed in panels of output channels ------------------------------


def conv2d_packed(
    x: ExprLike,
    w: ExprLike,
    channels: int,
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    groups: int = 1,
) -> Call:
    """conv2d of ``x`` (N, C, H, W) by a weight packed in panels of output channels, as the
    direct convolution reads it (`rvm.kernels.direct.pack`; `rvm.transform.pack_conv_weights`
    packs constant weights so, once): ``w`` is (groups, panels, KH, KW, C / groups, panel),
    panel ``p`` of a group holding its output channels ``p * panel`` on, the last padded with
    zeros; ``channels`` is O, the output channels."""
    name = "conv2d_packed"
    return call(
        ops.conv2d_packed,
        as_expr(x),
        as_expr(w),
        channels=check_int(name, "channels", channels, minimum=1),
        strides=positive_ints(name, "strides", strides, 2),
        padding=normalize_padding(name, padding, 2),
        dilation=positive_ints(name, "dilation", dilation, 2),
        groups=check_int(name, "groups", groups, minimum=1),
    )


@rule(ops.conv2d_packed)
def _infer_packed(call_: Call, args: list[TensorType]) -> Type:
    x, w = args
    attrs, name = call_.attrs, "conv2d_packed"
    check_rank(name, x, 4, "the input (NCHW)")
    check_rank(name, w, 6, "the weight (groups, panels, KH, KW, C / groups, panel)")
    channels, groups = attrs["channels"], attrs["groups"]
    if channels % groups:
        raise IRError(f"{name}: {channels} output channels do not divide into {groups} groups")
    dtype = promote_dtypes(x.dtype, w.dtype)
    if x.shape is None or w.shape is None:
        return TensorType(None if x.shape is None else (x.shape[0], channels, None, None), dtype)
    g, panels, kh, kw, cg, panel = w.shape
    cin = x.shape[1]
    expected = (groups, -(-(channels // groups) // panel) if isinstance(panel, int) else panels)
    if (g, panels) != expected or (
        isinstance(cin, int) and isinstance(cg, int) and cin != cg * groups
    ):
        raise IRError(
            f"{name}: input {fmt(x.shape)} with groups={groups} and {channels} output channels "
            f"does not match weight {fmt(w.shape)}"
        )
    spatial = [
        window_out_dim(name, x.shape[2 + i], k, attrs["strides"][i], pads, attrs["dilation"][i])
        for i, (k, pads) in enumerate(zip((kh, kw), pad_pairs(attrs["padding"], 2)))
    ]
    return TensorType((x.shape[0], channels, *spatial), dtype)


# -- conv2d by Winograd's F(2x2, 3x3) on a weight transformed once ----------------------


def conv2d_winograd(
    x: ExprLike, u: ExprLike, padding: IntOrInts = 0, precision: str = "fp32"
) -> Call:
    """The 3x3 conv2d at stride 1 and dilation 1, without groups, of ``x`` (N, C, H, W) by a
    weight transformed for Winograd's F(2x2, 3x3) (`rvm.kernels.winograd.transform`;
    `rvm.transform.pack_conv_weights` transforms constant weights so, once): ``u`` is (16, O,
    C), ``u[4 i + j]`` position (i, j) of ``G g G^T`` for each 3x3 kernel ``g``, G = [[1, 0,
    0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]; or ``u`` is those values rounded to bf16
    in channel pairs, (16, O, ceil(C / 2)) int32 words (`rvm.kernels.winograd.transform_bf16`,
    by `rvm.transform.to_bf16`), with ``precision="bf16"``: then the 16 products take the
    transformed input rounded to bf16 too, with float32 sums, and the input and output are
    float32. ``padding`` as conv2d's."""
    name = "conv2d_winograd"
    pads = normalize_padding(name, padding, 2)
    if precision not in ("fp32", "bf16"):
        raise IRError(f"{name}: precision must be 'fp32' or 'bf16', got {precision!r}")
    return call(ops.conv2d_winograd, as_expr(x), as_expr(u), padding=pads, precision=precision)


@rule(ops.conv2d_winograd)
def _infer_winograd(call_: Call, args: list[TensorType]) -> Type:
    x, u = args
    name = "conv2d_winograd"
    check_rank(name, x, 4, "the input (NCHW)")
    check_rank(name, u, 3, "the weight (16, O, C)")
    pairs = call_.attrs.get("precision", "fp32") == "bf16"  # U: bf16 pairs, (16, O, C2)
    if pairs and (u.dtype != "int32" or x.dtype != "float32"):
        raise IRError(
            f"{name}: precision bf16 takes a float32 input and an int32 weight of bf16 pairs, "
            f"got {x.dtype} and {u.dtype}"
        )
    dtype = x.dtype if pairs else promote_dtypes(x.dtype, u.dtype)
    o = None if u.shape is None else u.shape[1]
    if x.shape is None:
        return TensorType(None, dtype)
    if u.shape is not None:
        cin, cg = x.shape[1], u.shape[2]
        if pairs and isinstance(cin, int):
            cin = (cin + 1) // 2
        if u.shape[0] != 16 or (isinstance(cin, int) and isinstance(cg, int) and cin != cg):
            raise IRError(f"{name}: input {fmt(x.shape)} does not match weight {fmt(u.shape)}")
    spatial = [
        window_out_dim(name, x.shape[2 + i], 3, 1, pads, 1)
        for i, pads in enumerate(pad_pairs(call_.attrs["padding"], 2))
    ]
    return TensorType((x.shape[0], o, *spatial), dtype)


def winograd_keeps_phases(c: int, o: int, oh: int, ow: int) -> bool:
    """Whether `conv2d_winograd` of one image of ``c`` input and ``o`` output channels to an
    ``oh`` x ``ow`` map keeps each piece's three phases together on the pool's threads (at
    rvm's thread count now): blocks of rows, or one thread, not its phases cut apart, each
    waiting for the one before (`rvm.kernels.winograd.cut`)."""
    from rvm.kernels import winograd
    from rvm.kernels.threads import get_num_threads

    # float32's cut: bf16's (``words``) cuts its blocks of rows finer, its phases alike
    cut = winograd.cut.py_func(c, o, 1, (ow + 1) // 2, (oh + 1) // 2, get_num_threads(), 0)
    return bool(cut[3] == 0)


def _static_shape(value: Call, weight: object) -> tuple[int, ...] | None:
    """(c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow, ih, iw) of ``value``, a float32
    ``conv2d`` of a static-shaped input by the float32 OIHW numpy ``weight``; else None."""
    import numpy as np

    x_type, out_type = getattr(value.args[0], "type", None), getattr(value, "type", None)
    if not isinstance(weight, np.ndarray) or weight.dtype != np.float32 or weight.ndim != 4:
        return None
    if not (isinstance(x_type, TensorType) and isinstance(out_type, TensorType)):
        return None
    if x_type.dtype != "float32" or x_type.shape is None or out_type.shape is None:
        return None
    if not all(isinstance(d, int) for d in (*x_type.shape[1:], *out_type.shape[2:])):
        return None
    attrs = value.attrs
    (_, c, ih, iw), (oh, ow) = x_type.shape, out_type.shape[2:]
    o, _, kh, kw = weight.shape
    groups, (sh, sw), (dh, dw) = attrs["groups"], attrs["strides"], attrs["dilation"]
    return c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow, ih, iw


def winograd_bf16(value: Call, weight: object) -> Call | None:
    """The call computing ``value``, a float32 ``conv2d`` of a static-shaped input by the
    constant ``weight`` (numpy, OIHW), in bf16 by Winograd's F(2x2, 3x3): `conv2d_winograd`
    on the weight transformed and rounded into bf16 pairs, once
    (`rvm.kernels.winograd.transform_bf16`), where Winograd's pays (`rvm.kernels.convmethod.
    winograd_bf16_pays`); None elsewhere (`rvm.transform.to_bf16` then takes the direct bf16
    convolution)."""
    from rvm.kernels import convmethod

    shape = _static_shape(value, weight)
    if shape is None or not convmethod.winograd_bf16_pays(*shape[:11]):
        return None
    from rvm.kernels import winograd

    u = Constant(winograd.transform_bf16(weight))
    return conv2d_winograd(value.args[0], u, value.attrs["padding"], precision="bf16")


def pack_conv2d(value: Call, weight: object, built: bool = False) -> Call | None:
    """The call computing ``value``, a float32 ``conv2d`` of a static-shaped input by the
    constant ``weight`` (numpy, OIHW), on the weight laid out here, once, for the method the
    library takes: `conv2d_winograd` on the weight transformed where Winograd's beats the other
    methods (`rvm.kernels.convmethod.winograd_pays`), else `conv2d_packed` on the weight packed
    where the direct method beats the GEMMs on this CPU
    (`rvm.kernels.convmethod.channels_pay`: the rule, written once; with ``built``, the model
    builds the method anyway, also where `rvm.kernels.convmethod.pays_once_built`); None
    elsewhere."""
    from rvm.kernels import convmethod, direct

    shape = _static_shape(value, weight)
    if shape is None:
        return None
    attrs = value.attrs
    c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow, ih, iw = shape
    if convmethod.winograd_pays(c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow):
        from rvm.kernels import winograd

        u = Constant(winograd.transform(weight))
        return conv2d_winograd(value.args[0], u, attrs["padding"])
    if not convmethod.channels_pay(c, o, groups, kh, kw, sh, sw, oh, ow, ih, iw, True) and not (
        built and convmethod.pays_once_built(c, o, groups, kh, kw, sh, sw, oh, ow)
    ):
        return None
    return conv2d_packed(
        value.args[0],
        Constant(direct.pack(weight, groups)),
        o,
        attrs["strides"],
        attrs["padding"],
        attrs["dilation"],
        groups,
    )
