"""resize against hand-computed interpolations."""

from __future__ import annotations

import numpy as np
import pytest
from op_testing import check, rand, var

from rvm import op
from rvm.errors import IRError
from rvm.ir import infer_type, tensor


def test_nearest_integer_upscale_repeats():
    x = var("x", (2, 3, 4))
    a = rand((2, 3, 4))
    call = op.resize(x, (2, 6, 12), (1.0, 2.0, 3.0), coordinate_transformation_mode="asymmetric",
                     nearest_mode="floor")  # fmt: skip
    out = check(call, {x: a}, tensor((2, 6, 12), "float32"))
    np.testing.assert_array_equal(out, a.repeat(2, axis=1).repeat(3, axis=2))


@pytest.mark.parametrize(
    "ctm, expected",
    [
        ("align_corners", [0.0, 1 / 3, 2 / 3, 1.0, 4 / 3, 5 / 3, 2.0]),
        ("asymmetric", [0.0, 3 / 7, 6 / 7, 9 / 7, 12 / 7, 2.0, 2.0]),
        ("half_pixel", [0.0, 1 / 7, 4 / 7, 1.0, 10 / 7, 13 / 7, 2.0]),  # clamped at the ends
    ],
)
def test_linear_coordinate_transforms(ctm, expected):
    x = var("x", (3,))
    a = np.array([0.0, 1.0, 2.0], np.float32)  # linear data: the result is the source coord
    out = check(op.resize(x, (7,), (7 / 3,), mode="linear", coordinate_transformation_mode=ctm),
                {x: a})  # fmt: skip
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_cubic_reproduces_quadratics_inside():
    x = var("x", (8,), "float64")
    grid = np.arange(8.0)
    a = 0.5 * grid**2 - grid
    out = check(op.resize(x, (16,), (2.0,), mode="cubic", cubic_coeff_a=-0.5,
                          coordinate_transformation_mode="asymmetric"), {x: a})  # fmt: skip
    src = np.arange(16) / 2.0
    inside = (src >= 1) & (src <= 5)  # away from the clamped edges
    np.testing.assert_allclose(out[inside], (0.5 * src**2 - src)[inside], atol=1e-12)


def test_crop_extrapolates_and_ints_round():
    x = var("x", (4,))
    a = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    call = op.resize(x, (3,), (0.75,), roi=(-0.5, 1.0), mode="linear",
                     coordinate_transformation_mode="tf_crop_and_resize",
                     extrapolation_value=-7.0)  # fmt: skip
    out = check(call, {x: a})
    np.testing.assert_allclose(out, [-7.0, 1.75, 4.0])  # source coords -1.5, 0.75, 3
    i = var("i", (1, 3), "uint8")
    b = np.array([[0, 255, 100]], np.uint8)
    out = check(op.resize(i, (1, 5), (1.0, 5 / 3), mode="cubic"), {i: b})
    assert out.dtype == np.uint8 and out.min() == 0 and out.max() == 255  # saturated


def test_antialias_downscale_averages():
    x = var("x", (8,))
    a = np.arange(8, dtype=np.float32)
    out = check(op.resize(x, (2,), (0.25,), mode="linear", antialias=True), {x: a})
    # Output 0 reads source 1.5 through a triangle 4 times wider: taps -2..5 (clamped to the
    # edge) with weights 1, 3, 5, 7, 7, 5, 3, 1 (/ 32); output 1 mirrors it.
    first = np.dot([0, 0, 0, 1, 2, 3, 4, 5], [1, 3, 5, 7, 7, 5, 3, 1]) / 32
    np.testing.assert_allclose(out, [first, 7 - first], rtol=1e-6)


def test_resize_errors_and_symbolic_sizes():
    x = var("x", ("n", 3, 4))
    assert infer_type(op.resize(x, ("n", 6, 8), (1.0, 2.0, 2.0))) == tensor(("n", 6, 8), "float32")
    with pytest.raises(IRError, match="resize: sizes .* do not match the rank"):
        infer_type(op.resize(x, (6, 8), (2.0, 2.0)))
    with pytest.raises(IRError, match="resize: tf_crop_and_resize needs a roi"):
        op.resize(x, ("n", 3, 4), (1.0,) * 3, coordinate_transformation_mode="tf_crop_and_resize")
    with pytest.raises(IRError, match="resize: mode must be one of"):
        op.resize(x, ("n", 3, 4), (1.0,) * 3, mode="area")
