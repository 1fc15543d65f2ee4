"""bf16 products with float32 accumulation: ``dense_bf16`` and ``conv2d_bf16``.

What ``rvm.compile(mod, precision="bf16")`` turns float32 dense, matmul and conv2d calls with
constant weights into (`rvm.transform.to_bf16`). The weight is converted once, at compile
time, to bf16 and stored as its int16 bits in the layout the kernel reads: ``(rows, kp)``,
each row's depth padded with zeros to an even ``kp``. The input stays float32 and is rounded
to bf16 (to nearest even) by the op; products are summed in float32; the result is float32.

- ``dense_bf16(x, w, input)``: ``x`` (..., k) float32, ``w`` (units, kp) int16: ``bf16(x) @
  w.T``; with ``input`` ``"float32"`` (`INPUTS`) ``x @ w.T``, ``x`` as it is (the
  ``"rounded"`` way's GEMVs, `rvm.transform.to_bf16`).
- ``conv2d_bf16(x, w, strides, padding, dilation, groups, kernel, bias=None, residual=None,
  activation)``: ``x`` NCHW float32, ``w`` (out channels, kp) int16 with depth in channel
  pairs, ``(c2, dy, dx, parity)`` -- conv2d's OIHW weight through `conv_pairs`, ``kp =
  pair_depth(c / groups, kh, kw)`` -- and ``kernel`` its (kh, kw); ``activation(conv + bias
  + residual)``, ``bias`` one float32 value per output channel (or none), ``residual`` a
  float32 tensor of the output's shape (or none; only with a bias) and ``activation`` one of
  `ACTIVATIONS`, applied by the kernel to the rows it sums, while in cache
  (`rvm.transform.to_bf16` joins a following bias add, residual add and activation). With
  ``panel`` > 0 the kernel runs turned around (output channels along the vector lanes) and
  ``w`` holds the same words in its panels of ``panel`` output channels (`turn_pairs`). With
  ``pairing`` ``"columns"`` (`PAIRINGS`) an odd group's last channel pairs its taps along the
  kernel's rows, ``kp = pair_depth(c / groups, kh, kw, 1)`` (not with ``source``); with
  ``"taps"`` the row's words go tap by tap, each tap's channel pairs in turn; with
  ``"tiles"`` (one group, input and output channels multiples of 32) those words are laid out
  as the tiles of B of AMX's walk turned around (`tile_pairs`, `rvm.kernels.amxconv`).
  Between two convolutions activations may stay bf16 (`rvm.transform.to_bf16` decides): with
  ``plane`` ``(pt, pl, hq, wq)`` the result is not float32 NCHW but the next convolution's
  *pair plane* (`pair_plane`): int32 ``(n, (co + 1) // 2, hq, wq)``, word ``(c2, pt + y, pl
  + x)`` the bf16 pair of channels ``2 c2`` (low half) and ``2 c2 + 1`` at ``(y, x)``, the
  padding's words 0; with ``source`` ``(c, h, w)`` the input ``x`` is such a plane of a ``c``
  x ``h`` x ``w`` image, laid out for this convolution (stride 1, one group: its padding
  around it, one row more below). With ``prologue`` ``"affine"`` or ``"affine_relu"`` the
  input is first ``x * scale + shift`` per channel (then ReLU; a batch norm's and its scaling
  before the convolution: densenet's), the last operand ``affine`` ``(2, c)`` float32. With
  ``residual_plane`` ``(pt, pl)`` the residual is not float32 but the int32 pair plane of the
  output's image with that padding, as a convolution wrote it for the next (ResNet's shortcut
  kept bf16 between its blocks). With ``plane_layout`` ``"positions"`` (`LAYOUTS`) the plane
  out is laid out as positions by channel pairs, ``(n, hq, wq, (co + 1) // 2)``, the same
  words turned; with ``source_layout`` ``"positions"`` so is the plane in (read as it lies,
  not with ``source_at``), with ``residual_layout`` the residual's plane: what AMX's walk
  turned around reads and writes a line a position (`rvm.kernels.amxconv`).
- ``dense_packed_bf16(x, w, bias=None, residual=None, *, units, activation="none")``: as
  `rvm.op.packed.dense_packed` (the bias, activation and residual its GEMM's epilogue), ``w``
  B ``(k, units)`` in column panels of bf16 *pairs*, ``(panels, (k + 1) // 2, panel)`` int32
  (`pack_pairs`): ``activation(bf16(x) @ B + bias) + residual``. What products of more than
  a few rows take: the weight streams in the micro-kernel's layout, C comes out row-major.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rvm.errors import IRError
from rvm.ir.expr import Call
from rvm.ir.op import OpPattern
from rvm.ir.types import TensorType, Type
from rvm.kernels.reference.bf16 import (  # noqa: F401 (the rounding and layout, for to_bf16)
    INPUTS,
    LAYOUTS,
    PAIRINGS,
    PROLOGUES,
    _round_bf16,
    bf16_bits,
    bf16_rows,
    conv_pairing,
    conv_pairs,
    pack_pairs,
    pair_depth,
    pair_width,
    split_operands,
    tile_pairs,
    turn_pairs,
    unpair,
    unturn_pairs,
)
from rvm.kernels.reference.packed import ACTIVATIONS
from rvm.op import ops
from rvm.op.conv import normalize_padding, pad_pairs, positive_ints
from rvm.op.core import (
    OP_PRECISION,
    ExprLike,
    as_expr,
    call,
    check_choice,
    check_int,
    define_op,
)
from rvm.op.shapes import broadcast_shapes, fmt, rule, window_out_dim

__all__ = ["conv2d_bf16", "dense_bf16", "dense_packed_bf16"]

define_op("dense_bf16", OpPattern.OUT_ELEMWISE_FUSABLE, 2)
define_op("conv2d_bf16", OpPattern.OUT_ELEMWISE_FUSABLE)
define_op("dense_packed_bf16", OpPattern.OUT_ELEMWISE_FUSABLE)
OP_PRECISION.update(dense_bf16="bf16", conv2d_bf16="bf16", dense_packed_bf16="bf16")


def padded_depth(k: int) -> int:
    """A weight row's length for depth ``k``: ``k`` rounded up to even (bf16 pairs)."""
    return k + (k & 1)


def default_pair_panel() -> int:
    """The panel width of this CPU's bf16 GEMM (`rvm.kernels.bf16gemm.NR`), imported when a
    pass asks, as `rvm.op.packed.default_panel`."""
    from rvm.kernels.bf16gemm import NR

    return NR


def has_bf16_dot() -> bool:
    """Whether this CPU target has a bf16 dot product (`rvm.kernels.bf16gemm.DPBF16`: AVX512-BF16),
    imported when a pass asks (`rvm.transform.to_bf16.native_way`)."""
    from rvm.kernels.bf16gemm import DPBF16

    return bool(DPBF16)


def has_amx_tiles() -> bool:
    """Whether this process runs bf16 products on AMX tiles (`rvm.kernels.amx.AMX`), imported
    when a pass asks (`rvm.transform.to_bf16.native_way`)."""
    from rvm.kernels.amx import AMX

    return bool(AMX)


def bf16_dot_speed() -> tuple[float, float] | None:
    """(bf16 dot products, float32 FMAs) a second on one core of this CPU, timed once a
    process, or None where they cannot be (`rvm.kernels.bf16speed.measured`), imported when a
    pass asks (`rvm.transform.to_bf16.native_way`)."""
    from rvm.kernels.bf16speed import measured

    return measured()


def turned_panel(og: int, oh: int, ow: int, wq: int, groups: int) -> int:
    """The panel width a convolution's kernel runs turned around with on this CPU (0: not),
    imported when a pass asks: `rvm.kernels.bf16turned.turned_panel`."""
    from rvm.kernels.bf16turned import turned_panel as rule

    return rule(og, oh, ow, wq, groups)


def plane_shape(source: Sequence[int], kernel, padding, dilation) -> tuple[int, int]:
    """``(hq, wq)`` of the pair plane a stride-1 convolution reads of a ``source`` ``(c, h,
    w)`` image: its padding around it and one row more (`rvm.kernels.bf16conv.conv2d`: the
    positions past a row's end run on into the next row), its width `pair_width`'s."""
    (kh, kw), (dh, dw), (pt, pl, pb, pr) = kernel, dilation, padding
    oh = source[1] + pt + pb - (kh - 1) * dh
    ow = source[2] + pl + pr - (kw - 1) * dw
    return oh + (kh - 1) * dh + 1, pair_width(source[2], ow, pl, kw, dw, 1)


def _check_inputs(op: str, x: TensorType, w: TensorType, plane: bool = False) -> None:
    if plane:
        if x.dtype not in (None, "int32") or (x.shape is not None and len(x.shape) != 4):
            raise IRError(f"{op}: expects an int32 pair plane, got {x.dtype} {fmt(x.shape)}")
    elif x.dtype is not None and x.dtype != "float32":
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
    attrs = call_.attrs
    prologue = attrs.get("prologue", "none")
    extra = int(prologue != "none")
    if len(args) not in (2 + extra, 3 + extra, 4 + extra):
        raise IRError(
            f"conv2d_bf16: expects 2 to 4 inputs (x, w[, bias[, residual]]), and the "
            f"prologue's affine with one, got {len(args)}"
        )
    x, w = args[:2]
    bias, residual, affine = split_operands(args[2:], prologue)
    source, plane = attrs.get("source", ()), attrs.get("plane", ())
    if affine is not None and (source or affine.dtype not in (None, "float32")):
        raise IRError("conv2d_bf16: the prologue needs a float32 input and affine")
    _check_inputs("conv2d_bf16", x, w, bool(source))
    pairing = PAIRINGS.index(attrs.get("pairing", "channels"))
    lines_in = attrs.get("source_layout", "channels") == "positions"
    lines_out = attrs.get("plane_layout", "channels") == "positions"
    if lines_in and (not source or attrs.get("source_at", ())):
        raise IRError("conv2d_bf16: a plane of positions in is read as it lies (source, no "
                      "source_at)")  # fmt: skip
    if lines_out and not plane:
        raise IRError("conv2d_bf16: plane_layout says how a plane out lies, but there is none")
    if lines_in:  # as a pair plane, for the checks below
        x = _as_pair_plane(x)
    if source and pairing == 1:
        raise IRError("conv2d_bf16: reads a pair plane with its channels paired, not columns")
    source_at = attrs.get("source_at", ())
    if source and source_at:  # another's plane, its words copied into this one's phases
        if attrs["groups"] != 1:
            raise IRError("conv2d_bf16: reads a pair plane only with one group")
        _check_plane(x, (x.shape[0] if x.shape else None, *source), source_at, "input")
    elif source:
        kernel, padding, dilation = attrs["kernel"], attrs["padding"], attrs["dilation"]
        want = ((source[0] + 1) // 2, *plane_shape(source, kernel, padding, dilation))
        if attrs["strides"] != (1, 1) or attrs["groups"] != 1:
            raise IRError("conv2d_bf16: reads a pair plane only at stride 1, one group")
        if x.shape is not None and any(
            isinstance(a, int) and a != b for a, b in zip(x.shape[1:], want)
        ):
            raise IRError(
                f"conv2d_bf16: the pair plane of a {fmt(source)} image is {fmt(want)} an "
                f"image, got {fmt(x.shape)}"
            )
    elif source_at:
        raise IRError("conv2d_bf16: source_at says how a pair plane in lies, but x is none")
    if source and x.shape is not None:
        x = TensorType((x.shape[0], *source), "float32")
    if bias is not None:
        units = None if w.shape is None else w.shape[0]
        if bias.dtype not in (None, "float32") or (
            bias.shape is not None and tuple(bias.shape) != (units,)
        ):
            raise IRError(
                f"conv2d_bf16: the bias must be float32 ({units},), got {bias.dtype} "
                f"{fmt(bias.shape)}"
            )
    if x.shape is None:
        return TensorType(None, "int32" if plane else "float32")
    if len(x.shape) != 4:
        raise IRError(f"conv2d_bf16: the input must be NCHW, got {fmt(x.shape)}")
    kernel, groups = attrs["kernel"], attrs["groups"]
    cin = x.shape[1]
    if affine is not None and affine.shape is not None and tuple(affine.shape) != (2, cin):
        raise IRError(
            f"conv2d_bf16: the prologue's affine must be (2, {cin}), got {fmt(affine.shape)}"
        )
    if w.shape is not None and isinstance(cin, int) and isinstance(w.shape[1], int):
        if cin % groups or w.shape[1] != pair_depth(cin // groups, *kernel, pairing):
            raise IRError(
                f"conv2d_bf16: input {fmt(x.shape)} with groups={groups} and kernel {kernel} "
                f"does not match weight {fmt(w.shape)}"
            )
        if pairing == 3 and (groups != 1 or cin % 32 or w.shape[0] % 32):
            raise IRError(
                f"conv2d_bf16: a weight in tiles needs one group and input and output "
                f"channels multiples of 32, got input {fmt(x.shape)}, weight {fmt(w.shape)} "
                f"and groups={groups}"
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
    shape = (x.shape[0], None if w.shape is None else w.shape[0], *spatial)
    residual_plane = attrs.get("residual_plane", ())
    if attrs.get("residual_layout", "channels") == "positions":
        if not residual_plane:
            raise IRError("conv2d_bf16: residual_layout says how a residual plane lies, but "
                          "there is none")  # fmt: skip
        if residual is not None:
            residual = _as_pair_plane(residual)
    if residual is not None and residual_plane:
        _check_plane(residual, shape, residual_plane)
    elif residual is not None:
        res = residual
        if res.dtype not in (None, "float32") or (
            res.shape is not None
            and (len(res.shape) != 4 or any(isinstance(a, int) and isinstance(b, int) and a != b
                                             for a, b in zip(res.shape, shape)))
        ):  # fmt: skip
            raise IRError(
                f"conv2d_bf16: the residual must be float32 {fmt(shape)}, got {res.dtype} "
                f"{fmt(res.shape)}"
            )
    if residual_plane and residual is None:
        raise IRError("conv2d_bf16: residual_plane says how a residual lies, but there is none")
    if plane:
        if groups != 1:
            raise IRError("conv2d_bf16: writes a pair plane with one group")
        co = shape[1]
        pairs = (co + 1) // 2 if isinstance(co, int) else None
        if lines_out:
            return TensorType((x.shape[0], plane[2], plane[3], pairs), "int32")
        return TensorType((x.shape[0], pairs, plane[2], plane[3]), "int32")
    return TensorType(shape, "float32")


def _as_pair_plane(t: TensorType) -> TensorType:
    """The type of a plane of positions ``(n, hq, wq, pairs)`` as the pair plane of the same
    words, ``(n, pairs, hq, wq)`` (`LAYOUTS`); any other type as it is."""
    if t.shape is None or len(t.shape) != 4:
        return t
    n, hq, wq, pairs = t.shape
    return TensorType((n, pairs, hq, wq), t.dtype)


def _check_plane(
    res: TensorType, shape: tuple, at: tuple, what: str = "residual", op: str = "conv2d_bf16"
) -> None:
    """A residual (or an input: ``what``) given as the pair plane of an image (``shape``,
    NCHW) with padding ``at`` (top, left): int32, a word a channel pair, room for the image."""
    co, oh, ow = shape[1:]
    want = (shape[0], (co + 1) // 2 if isinstance(co, int) else None)
    ok = res.dtype in (None, "int32") and (res.shape is None or len(res.shape) == 4)
    if ok and res.shape is not None:
        room = [pad + image if isinstance(image, int) else None for pad, image in zip(at, (oh, ow))]
        least = [*want, *room]
        for i, (size, bound) in enumerate(zip(res.shape, least)):
            if isinstance(size, int) and isinstance(bound, int):
                ok = ok and (size == bound if i < 2 else size >= bound)
    if not ok:
        raise IRError(
            f"{op}: the {what} must be the int32 pair plane of a {fmt(shape)} image "
            f"with padding {at}, got {res.dtype} {fmt(res.shape)}"
        )


def dense_bf16(x: ExprLike, w: ExprLike, input: str = "bf16") -> Call:
    """``bf16(x) @ w.T`` in float32 sums: ``w`` (units, kp) the int16 bits of bf16 values;
    ``input`` ``"float32"`` (`INPUTS`): ``x @ w.T``, ``x`` not rounded."""
    input = check_choice("dense_bf16", "input", input, INPUTS)
    return call(ops.dense_bf16, as_expr(x), as_expr(w), input=input)


def conv2d_bf16(
    x: ExprLike,
    w: ExprLike,
    strides: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    kernel: int | Sequence[int] = 1,
    bias: ExprLike | None = None,
    activation: str = "none",
    residual: ExprLike | None = None,
    panel: int = 0,
    plane: Sequence[int] = (),
    source: Sequence[int] = (),
    affine: ExprLike | None = None,
    prologue: str = "none",
    pairing: str = "channels",
    residual_plane: Sequence[int] = (),
    source_at: Sequence[int] = (),
    plane_layout: str = "channels",
    source_layout: str = "channels",
    residual_layout: str = "channels",
) -> Call:
    """``activation(conv2d(bf16(x), w) + bias + residual)``: float32 ``x`` (NCHW) with the
    bf16 weight ``w`` (out channels, kp; int16 bits of conv2d's OIHW weight in channel pairs,
    `conv_pairs`; with ``panel`` > 0 those words in panels of ``panel`` output channels,
    `turn_pairs`) of spatial size ``kernel``; ``bias`` (out channels,) float32 or None;
    ``residual`` float32 of the output's shape or None (only with a bias); ``activation`` one
    of `ACTIVATIONS`; ``plane`` ``(pt, pl, hq, wq)``: the result as the next convolution's
    pair plane, ``source`` ``(c, h, w)``: ``x`` is this convolution's pair plane of such an
    image (the module's docstring); ``prologue`` (`PROLOGUES`): ``x * scale + shift`` per
    input channel (then ReLU) before rounding, ``affine`` the ``(2, c)`` scales and shifts;
    ``pairing`` (`PAIRINGS`): how ``w`` pairs an odd group's last channel's taps, and in
    which order its words go;
    ``residual_plane`` ``(pt, pl)``: the residual is the int32 pair plane of the output's image
    with that padding (a convolution's ``plane`` out), not float32; ``source_at`` ``(pt,
    pl)`` with ``source``: ``x`` is a pair plane of that image with that padding, laid out for
    another convolution (any stride here: its words copied into this one's phases);
    ``plane_layout``, ``source_layout`` and ``residual_layout`` (`LAYOUTS`): how the planes
    out, in and added lie."""
    name = "conv2d_bf16"
    if residual is not None and bias is None:
        raise IRError("conv2d_bf16: a residual needs a bias (zeros for none)")
    args = (as_expr(x), as_expr(w)) + (() if bias is None else (as_expr(bias),))
    args += () if residual is None else (as_expr(residual),)
    if (affine is None) != (prologue == "none"):
        raise IRError("conv2d_bf16: a prologue takes an affine, and an affine a prologue")
    args += () if affine is None else (as_expr(affine),)
    return call(
        ops.conv2d_bf16,
        *args,
        strides=positive_ints(name, "strides", strides, 2),
        padding=normalize_padding(name, padding, 2),
        dilation=positive_ints(name, "dilation", dilation, 2),
        groups=check_int(name, "groups", groups, minimum=1),
        kernel=positive_ints(name, "kernel", kernel, 2),
        activation=check_choice(name, "activation", activation, ACTIVATIONS),
        panel=check_int(name, "panel", panel, minimum=0),
        plane=_ints(name, "plane", plane, 4, 0),
        source=_ints(name, "source", source, 3, 1),
        prologue=check_choice(name, "prologue", prologue, PROLOGUES),
        pairing=check_choice(name, "pairing", pairing, PAIRINGS),
        residual_plane=_ints(name, "residual_plane", residual_plane, 2, 0),
        source_at=_ints(name, "source_at", source_at, 2, 0),
        plane_layout=check_choice(name, "plane_layout", plane_layout, LAYOUTS),
        source_layout=check_choice(name, "source_layout", source_layout, LAYOUTS),
        residual_layout=check_choice(name, "residual_layout", residual_layout, LAYOUTS),
    )


def _ints(name: str, what: str, values: Sequence[int], length: int, minimum: int) -> tuple:
    """``values`` as a tuple of ``length`` ints of at least ``minimum``, or () (none)."""
    if len(values) not in (0, length):
        raise IRError(f"{name}: {what} must have {length} values or none, got {values!r}")
    return tuple(check_int(name, what, v, minimum=minimum) for v in values)


def _check_panels(x: TensorType, w: TensorType, units: int) -> None:
    name = "dense_packed_bf16"
    if x.dtype is not None and x.dtype != "float32":
        raise IRError(f"{name}: expects a float32 input, got {x.dtype} {fmt(x.shape)}")
    if w.dtype is not None and w.dtype != "int32":
        raise IRError(f"{name}: expects the weight as int32 bf16 pairs, got {w.dtype}")
    if w.shape is None:
        return
    if len(w.shape) != 3:
        raise IRError(f"{name}: the weight must be 3-d (panels, k2, panel), got {fmt(w.shape)}")
    panels, k2, panel = w.shape
    if isinstance(panels, int) and isinstance(panel, int):
        if panel < 1 or panels != -(-units // panel):
            raise IRError(
                f"{name}: {units} units need {-(-units // max(panel, 1))} panels of {panel}, "
                f"the weight {fmt(w.shape)} has {panels}"
            )
    k = x.shape[-1] if x.shape else None
    if isinstance(k, int) and isinstance(k2, int) and k2 != (k + 1) // 2:
        raise IRError(
            f"{name}: input {fmt(x.shape)} has {k} features, the weight {fmt(w.shape)} "
            f"holds {k2} pairs, not {(k + 1) // 2}"
        )


@rule(ops.dense_packed_bf16)
def _infer_packed(call_: Call, args: list[TensorType]) -> Type:
    name = "dense_packed_bf16"
    if len(args) not in (2, 3, 4):
        raise IRError(f"{name}: expects 2 to 4 inputs (x, w[, bias[, residual]]), got {len(args)}")
    x, w = args[:2]
    units = call_.attrs["units"]
    if x.shape is not None and not x.shape:
        raise IRError(f"{name}: the input must have rank >= 1, got ()")
    _check_panels(x, w, units)
    if len(args) >= 3:
        bias = args[2]
        if bias.dtype not in (None, "float32") or (
            bias.shape is not None and tuple(bias.shape) != (units,)
        ):
            raise IRError(
                f"{name}: the bias must be float32 ({units},), got {bias.dtype} {fmt(bias.shape)}"
            )
    residual = args[3] if len(args) == 4 else None
    if residual is not None and residual.dtype not in (None, "float32"):
        raise IRError(f"{name}: the residual must be float32, got {residual.dtype}")
    if x.shape is None:
        return TensorType(None, "float32")
    product = (*x.shape[:-1], units)
    if residual is None:
        return TensorType(product, "float32")
    return TensorType(broadcast_shapes(name, product, residual.shape), "float32")


def dense_packed_bf16(
    x: ExprLike,
    w: ExprLike,
    bias: ExprLike | None = None,
    residual: ExprLike | None = None,
    *,
    units: int,
    activation: str = "none",
) -> Call:
    """``activation(bf16(x) @ B + bias) + residual`` for B ``(k, units)`` in bf16 pair
    panels ``w`` (`pack_pairs`); ``bias`` (units,) or None; ``residual`` a tensor or None
    (with a residual and no bias, the bias is zeros). Operands first, attributes by keyword,
    as `rvm.op.packed.dense_packed`'s."""
    name = "dense_packed_bf16"
    units = check_int(name, "units", units, minimum=0)
    if residual is not None and bias is None:
        bias = np.zeros(units, np.float32)
    args = (as_expr(x), as_expr(w)) + (() if bias is None else (as_expr(bias),))
    args += () if residual is None else (as_expr(residual),)
    return call(
        ops.dense_packed_bf16,
        *args,
        units=units,
        activation=check_choice(name, "activation", activation, ACTIVATIONS),
    )
