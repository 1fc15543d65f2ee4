"""Image ONNX ops: Resize and Upsample, onto rvm's ``resize``; DepthToSpace and SpaceToDepth
as reshape/transpose.

rvm's resize takes the output shape and per-axis scales as attributes when ``roi``, ``scales``
and ``sizes`` are constants known at import (the input's resized axes must then be static);
any of them known only at run time makes an ``op.dynamic_resize``, which plans the same way
when it runs. The
converter resolves what ONNX leaves implicit: ``axes``, ``keep_aspect_ratio_policy``, and the
sizes ``floor(scale * size)`` that scales imply.
"""

from __future__ import annotations

import math

import numpy as np

from rvm import op
from rvm.frontend.onnx.context import NodeContext
from rvm.frontend.onnx.registry import converter
from rvm.ir import Constant, Expr


def _floats(ctx: NodeContext, i: int, what: str) -> list[float] | None:
    """Input ``i`` as floats (a constant); None when omitted or empty."""
    if ctx.optional(i) is None:
        return None
    data = ctx.const(i)
    if data is None:
        ctx.fail(f"{what} (input {i}) must be a constant known at import")
    return [float(v) for v in np.ravel(data)] or None


def _spread(values: list, axes: list[int], rank: int, fill: list) -> list:
    """``values`` given for ``axes`` placed in a full-rank list that starts as ``fill``."""
    out = list(fill)
    for v, a in zip(values, axes):
        out[a] = v
    return out


def _plan(ctx: NodeContext, shape: tuple, scales, sizes, axes: list[int]) -> tuple[list, list]:
    """The full output shape and per-axis scales from ONNX's ``scales`` or ``sizes``."""
    rank = len(shape)
    if any(not isinstance(shape[a], int) for a in axes):
        ctx.fail(f"needs static sizes on the resized axes, got input shape {tuple(shape)}")
    if scales is not None:
        full = _spread(scales, axes, rank, [1.0] * rank)
        out = [int(math.floor(s * d)) if a in axes else d for a, (s, d) in
               enumerate(zip(full, shape))]  # fmt: skip
        return out, full
    if sizes is None:
        ctx.fail("needs scales or sizes")
    ratios = {a: n / shape[a] for a, n in zip(axes, sizes)}
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        pick = {"not_larger": min, "not_smaller": max}.get(policy)
        if pick is None:
            ctx.fail(f"unknown keep_aspect_ratio_policy {policy!r}")
        scale = pick(ratios.values())
        ratios = dict.fromkeys(axes, scale)
        sizes = [int(scale * shape[a] + 0.5) for a in axes]
    out = _spread(sizes, axes, rank, list(shape))
    return out, [ratios.get(a, 1.0) for a in range(rank)]


def _run_time_inputs(ctx: NodeContext, slots: tuple[int, ...]) -> bool:
    """Whether one of the inputs in ``slots`` is given and known only at run time."""
    return any(ctx.optional(i) is not None and ctx.const(i) is None for i in slots)


def _resize_run_time(ctx: NodeContext, roi_slot: int | None, scales_slot: int) -> Expr:
    """Resize (or Upsample) whose roi, scales or sizes are read at run time."""
    x = ctx.input(0)
    parts = []
    for slot, dtype in (
        (roi_slot, "float32"),
        (scales_slot, "float32"),
        (scales_slot + 1, "int64"),
    ):
        value = None if slot is None or slot >= len(ctx.inputs) else ctx.optional(slot)
        if value is None:
            parts.append(Constant(np.zeros(0, dtype)))
        else:
            parts.append(ctx.emit(op.cast(value, dtype if dtype == "int64" else "float64")))
    old = ctx.version < 11
    axes = ctx.attr("axes", None)
    y = op.dynamic_resize(
        x,
        *parts,
        axes=None if axes is None else list(axes),
        keep_aspect_ratio_policy=ctx.attr("keep_aspect_ratio_policy", "stretch"),
        mode=ctx.attr("mode", "nearest"),
        coordinate_transformation_mode=(
            "asymmetric" if old else ctx.attr("coordinate_transformation_mode", "half_pixel")
        ),
        nearest_mode="floor" if old else ctx.attr("nearest_mode", "round_prefer_floor"),
        cubic_coeff_a=ctx.attr("cubic_coeff_a", -0.75),
        exclude_outside=bool(ctx.attr("exclude_outside", 0)),
        extrapolation_value=ctx.attr("extrapolation_value", 0.0),
        antialias=bool(ctx.attr("antialias", 0)),
    )
    return ctx.emit(y)


@converter("Resize", since=(10, 11, 13, 18, 19))
def _resize(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    shape = ctx.shape(x)
    rank = len(shape)
    if ctx.version == 10 and _run_time_inputs(ctx, (1,)):
        return _resize_run_time(ctx, None, 1)
    if ctx.version > 10 and _run_time_inputs(ctx, (1, 2, 3)):
        return _resize_run_time(ctx, 1, 2)
    if ctx.version == 10:
        roi, scales, sizes = None, _floats(ctx, 1, "scales"), None
    else:
        roi, scales = _floats(ctx, 1, "roi"), _floats(ctx, 2, "scales")
        sizes = ctx.ints(3, "sizes") if ctx.optional(3) is not None else None
    axes = [a % rank for a in ctx.attr("axes", range(rank))]
    out, full_scales = _plan(ctx, shape, scales, sizes, axes)
    if roi is not None:
        n = len(axes)
        roi = _spread(roi[:n], axes, rank, [0.0] * rank) + _spread(
            roi[n:], axes, rank, [1.0] * rank
        )
    ctm = (
        "asymmetric"
        if ctx.version == 10
        else ctx.attr("coordinate_transformation_mode", "half_pixel")
    )
    nearest = "floor" if ctx.version == 10 else ctx.attr("nearest_mode", "round_prefer_floor")
    y = op.resize(
        x,
        out,
        full_scales,
        roi=roi if ctm == "tf_crop_and_resize" else None,
        mode=ctx.attr("mode", "nearest"),
        coordinate_transformation_mode=ctm,
        nearest_mode=nearest,
        cubic_coeff_a=ctx.attr("cubic_coeff_a", -0.75),
        exclude_outside=bool(ctx.attr("exclude_outside", 0)),
        extrapolation_value=ctx.attr("extrapolation_value", 0.0),
        antialias=bool(ctx.attr("antialias", 0)),
    )
    return ctx.emit(y)


@converter("Upsample", since=(7, 9))
def _upsample(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    shape = ctx.shape(x)
    if ctx.version > 7 and _run_time_inputs(ctx, (1,)):
        return _resize_run_time(ctx, None, 1)
    scales = ctx.attr("scales") if ctx.version == 7 else _floats(ctx, 1, "scales")
    out, full = _plan(ctx, shape, list(scales), None, list(range(len(shape))))
    mode = ctx.attr("mode", "nearest")
    y = op.resize(x, out, full, mode=mode, coordinate_transformation_mode="asymmetric",
                  nearest_mode="floor")  # fmt: skip
    return ctx.emit(y)


def _static_nchw(ctx: NodeContext) -> tuple[Expr, tuple]:
    x = ctx.input(0)
    shape = ctx.shape(x)
    if len(shape) != 4 or not all(isinstance(d, int) for d in shape[1:]):
        ctx.fail(f"needs an NCHW input with static C, H and W, got {tuple(shape)}")
    return x, shape


@converter("DepthToSpace", since=(1, 11, 13, 28))
def _depth_to_space(ctx: NodeContext) -> Expr:
    x, (n, c, h, w) = _static_nchw(ctx)
    b = ctx.attr("blocksize")
    if ctx.attr("mode", "DCR") == "DCR":
        split, perm = (n, b, b, c // b**2, h, w), (0, 3, 4, 1, 5, 2)
    else:  # CRD
        split, perm = (n, c // b**2, b, b, h, w), (0, 1, 4, 2, 5, 3)
    moved = op.transpose(op.reshape(x, split), perm)
    return ctx.emit(op.reshape(moved, (n, c // b**2, h * b, w * b)))


@converter("SpaceToDepth", since=(1, 13, 28))
def _space_to_depth(ctx: NodeContext) -> Expr:
    x, (n, c, h, w) = _static_nchw(ctx)
    b = ctx.attr("blocksize")
    blocks = op.reshape(x, (n, c, h // b, b, w // b, b))
    crd = ctx.attr("mode", "DCR") == "CRD"  # the mode attribute arrived in SpaceToDepth-28
    moved = op.transpose(blocks, (0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4))
    return ctx.emit(op.reshape(moved, (n, c * b * b, h // b, w // b)))
