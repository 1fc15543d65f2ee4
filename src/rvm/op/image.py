"""Image ops: resize (ONNX Resize: nearest, linear and cubic interpolation).

``resize`` takes every axis: ``sizes`` is the output shape (ints, or symbolic names on axes
it leaves alone), ``scales`` the factor each axis's coordinate transform uses (ONNX uses the
given scale, not the ratio of the sizes, when both exist), ``roi`` the crop of
``tf_crop_and_resize`` as (start..., end...) in normalized coordinates. The interpolation is
separable, so the reference resizes one axis at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm.errors import IRError
from rvm.ir.expr import Call
from rvm.ir.op import OpPattern
from rvm.ir.types import TensorType, Type
from rvm.op import ops
from rvm.op.core import (
    ExprLike,
    as_expr,
    call,
    check_bool,
    check_choice,
    check_float,
    check_shape,
    define_op,
)
from rvm.op.shapes import fmt, rule

__all__ = ["resize"]

# The ops of this module (`rvm.op.core.define_op`).
# Image ops.
define_op("resize", OpPattern.OPAQUE, 1)

MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


@rule(ops.resize)
def _infer_resize(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    sizes = call_.attrs["sizes"]
    if x.shape is not None and len(x.shape) != len(sizes):
        raise IRError(f"resize: sizes {fmt(sizes)} do not match the rank of x {fmt(x.shape)}")
    return TensorType(sizes, x.dtype)


def resize(
    x: ExprLike,
    sizes: Sequence[int | str],
    scales: Sequence[float],
    roi: Sequence[float] | None = None,
    mode: str = "nearest",
    coordinate_transformation_mode: str = "half_pixel",
    nearest_mode: str = "round_prefer_floor",
    cubic_coeff_a: float = -0.75,
    exclude_outside: bool = False,
    extrapolation_value: float = 0.0,
    antialias: bool = False,
) -> Call:
    """``x`` interpolated to the shape ``sizes``, as ONNX Resize.

    Args:
        x: The tensor; every axis may be resized.
        sizes: The output shape.
        scales: Per axis, the scale the coordinate transform divides by.
        roi: (start..., end...) per axis, for ``tf_crop_and_resize``.
        mode: "nearest", "linear" or "cubic".
        coordinate_transformation_mode: How an output position maps to the input.
        nearest_mode: How "nearest" rounds a source coordinate.
        cubic_coeff_a: The cubic kernel's parameter.
        exclude_outside: Give taps outside the input weight 0 (and renormalize).
        extrapolation_value: The value where ``tf_crop_and_resize`` reads outside the input.
        antialias: Stretch the linear/cubic kernel when downscaling (a low-pass filter).
    """
    op = "resize"
    sizes_ = check_shape(op, sizes)
    scales_ = tuple(check_float(op, "scales", s) for s in scales)
    if len(scales_) != len(sizes_) or any(s <= 0 for s in scales_):
        raise IRError(f"{op}: scales {scales_} must be positive, one per axis of {sizes_}")
    roi_ = None if roi is None else tuple(check_float(op, "roi", r) for r in roi)
    if roi_ is not None and len(roi_) != 2 * len(sizes_):
        raise IRError(f"{op}: roi must have {2 * len(sizes_)} values, got {roi_}")
    attrs = interpolation_attrs(
        op,
        mode,
        coordinate_transformation_mode,
        nearest_mode,
        cubic_coeff_a,
        exclude_outside,
        extrapolation_value,
        antialias,
    )
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" and roi_ is None:
        raise IRError(f"{op}: tf_crop_and_resize needs a roi")
    return call(ops.resize, as_expr(x), sizes=sizes_, scales=scales_, roi=roi_, **attrs)


def interpolation_attrs(
    op: str,
    mode: str,
    coordinate_transformation_mode: str,
    nearest_mode: str,
    cubic_coeff_a: float,
    exclude_outside: bool,
    extrapolation_value: float,
    antialias: bool,
) -> dict[str, object]:
    """The interpolation attributes of ``op`` (`resize` and `rvm.op.dynamic.dynamic_resize`),
    checked: the attributes by their names."""
    ctm = coordinate_transformation_mode
    return {
        "mode": check_choice(op, "mode", mode, MODES),
        "coordinate_transformation_mode": check_choice(
            op, "coordinate_transformation_mode", ctm, COORDINATE_MODES
        ),
        "nearest_mode": check_choice(op, "nearest_mode", nearest_mode, NEAREST_MODES),
        "cubic_coeff_a": check_float(op, "cubic_coeff_a", cubic_coeff_a),
        "exclude_outside": check_bool(op, "exclude_outside", exclude_outside),
        "extrapolation_value": check_float(op, "extrapolation_value", extrapolation_value),
        "antialias": check_bool(op, "antialias", antialias),
    }
