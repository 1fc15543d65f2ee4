"""Resize, Upsample, DepthToSpace, SpaceToDepth and OneHot against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx_helpers import check_ort, single_op  # noqa: E402

RNG = np.random.default_rng(6)
X = RNG.standard_normal((1, 2, 5, 6)).astype(np.float32)  # scales give whole sizes:
# ONNX Runtime and the ONNX reference disagree on align_corners when they do not
EMPTY = np.zeros(0, np.float32)


@pytest.mark.parametrize(
    "attrs",
    [
        {"mode": "nearest"},
        {"mode": "nearest", "nearest_mode": "ceil", "coordinate_transformation_mode": "asymmetric"},
        {"mode": "linear"},
        {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
        {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
        {"mode": "cubic"},
        {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
    ],
)
@pytest.mark.parametrize("scales", [(1.0, 1.0, 2.0, 1.5), (1.0, 1.0, 0.6, 0.5)])
def test_resize_scales(attrs, scales, kernels):
    inits = {"roi": EMPTY, "scales": np.array(scales, np.float32)}
    model, inputs = single_op("Resize", {"x": X}, initializers=inits, opset=13, **attrs)
    check_ort(model, inputs, kernels=kernels, rtol=1e-4)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_sizes_axes(policy):
    inits = {"roi": EMPTY, "scales": EMPTY, "sizes": np.array([9, 4], np.int64)}
    model, inputs = single_op(
        "Resize", {"x": X}, initializers=inits, input_names=["x", "roi", "scales", "sizes"],
        opset=18, mode="linear", axes=[2, 3], keep_aspect_ratio_policy=policy,
    )  # fmt: skip
    check_ort(model, inputs, rtol=1e-4)


def test_resize_crop_and_resize():
    roi = np.array([0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2], np.float32)
    inits = {"roi": roi, "scales": EMPTY, "sizes": np.array([1, 2, 4, 4], np.int64)}
    model, inputs = single_op(
        "Resize", {"x": X}, initializers=inits, opset=13, mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-3.0,
    )  # fmt: skip
    check_ort(model, inputs, rtol=1e-4)


def test_upsample_and_resize_10():
    scales = {"s": np.array([1, 1, 2, 3], np.float32)}
    check_ort(*single_op("Upsample", {"x": X}, initializers=scales, opset=9, mode="nearest"))
    check_ort(*single_op("Resize", {"x": X}, initializers=scales, opset=10, mode="linear"))


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode, kernels):
    x = RNG.standard_normal((2, 8, 3, 2)).astype(np.float32)
    check_ort(*single_op("DepthToSpace", {"x": x}, blocksize=2, mode=mode), kernels=kernels)


def test_space_to_depth(kernels):
    x = RNG.standard_normal((2, 3, 4, 6)).astype(np.float32)
    check_ort(*single_op("SpaceToDepth", {"x": x}, blocksize=2), kernels=kernels)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis):
    indices = np.array([[0, 3, -1], [2, 7, 1]], np.int64)  # 7: out of range, an all-off row
    inits = {"depth": np.array(5, np.int64), "values": np.array([-1.0, 2.5], np.float32)}
    check_ort(*single_op("OneHot", {"i": indices}, initializers=inits, opset=11, axis=axis))
