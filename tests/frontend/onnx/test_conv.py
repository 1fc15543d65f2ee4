"""Conv (1-d to 3-d), ConvTranspose and Col2Im converters against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_helpers import check_ort, run_rvm, single_op  # noqa: E402

from rvm.errors import OnnxImportError  # noqa: E402

RNG = np.random.default_rng(3)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "x_shape, w_shape, attrs",
    [
        ((2, 4, 11), (6, 2, 3), {"group": 2, "strides": [2], "pads": [2, 1]}),
        ((1, 3, 10), (4, 3, 4), {"auto_pad": "SAME_LOWER", "strides": [3]}),
        ((2, 3, 5, 6, 7), (4, 3, 3, 2, 3), {"pads": [1, 0, 2, 0, 1, 1], "strides": [1, 2, 2]}),
        ((1, 4, 6, 5, 5), (4, 1, 2, 3, 3), {"group": 4, "dilations": [2, 1, 2]}),
        ((1, 2, 4, 5, 6), (3, 2, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2, 1]}),
    ],
)
def test_conv_1d_and_3d(x_shape, w_shape, attrs):
    inits = {"w": _f32(*w_shape), "b": _f32(w_shape[0])}
    check_ort(*single_op("Conv", {"x": _f32(*x_shape)}, initializers=inits, **attrs), rtol=1e-4)


TRANSPOSES = [
    ((1, 2, 5), (2, 3, 3), {"strides": [2], "pads": [1, 0], "output_padding": [1]}),
    ((2, 4, 4, 3), (4, 2, 3, 2), {"strides": [3, 2], "pads": [1, 2, 0, 1], "group": 2}),
    (
        (1, 3, 3, 4),
        (3, 2, 2, 3),
        {"dilations": [2, 1], "strides": [1, 2], "output_padding": [0, 1]},
    ),
    ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
    ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [2, 2], "output_shape": [6, 5]}),
    ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [2, 2], "output_shape": [8, 7], "pads": [1] * 4}),
    ((1, 2, 4, 4), (2, 2, 4, 4), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 4, 4), (2, 2, 4, 4), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 3, 4, 2), (2, 1, 2, 3, 2), {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 0, 1]}),
]


@pytest.mark.parametrize("opset", [10, 17])
@pytest.mark.parametrize("x_shape, w_shape, attrs", TRANSPOSES)
def test_conv_transpose(x_shape, w_shape, attrs, opset):
    inits = {"w": _f32(*w_shape), "b": _f32(w_shape[1] * attrs.get("group", 1))}
    model, inputs = single_op(
        "ConvTranspose", {"x": _f32(*x_shape)}, initializers=inits, opset=opset, **attrs
    )
    check_ort(model, inputs, rtol=1e-4)


@pytest.mark.parametrize("opset", [10, 17])
def test_conv_transpose_odd_same_upper_padding_as_the_node_suite(opset):
    # An odd total padding: ONNX Runtime and onnx.reference agree on where the extra row goes.
    x = _f32(1, 1, 3, 3)
    model, inputs = single_op(
        "ConvTranspose", {"x": x}, initializers={"w": _f32(1, 1, 3, 3)}, opset=opset,
        strides=[2, 2], auto_pad="SAME_UPPER",
    )  # fmt: skip
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = run_rvm(model, inputs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    check_ort(model, inputs)


@pytest.mark.parametrize("kernels", ["numpy", "jit"])
def test_conv_transpose_and_conv3d_with_both_kernel_backends(kernels):
    model, inputs = single_op(
        "ConvTranspose", {"x": _f32(2, 4, 5, 5)}, initializers={"w": _f32(4, 3, 3, 3)},
        strides=[2, 2], pads=[1, 1, 0, 0],
    )  # fmt: skip
    check_ort(model, inputs, kernels=kernels, rtol=1e-4)
    model, inputs = single_op(
        "Conv", {"x": _f32(1, 2, 4, 5, 6)}, initializers={"w": _f32(3, 2, 2, 2, 2)}, pads=[1] * 6
    )
    check_ort(model, inputs, kernels=kernels, rtol=1e-4)


@pytest.mark.parametrize(
    "image, block, attrs",
    [
        ([5, 5], [1, 5], {}),
        ([5, 5], [2, 2], {"strides": [2, 2], "pads": [1, 0, 0, 1]}),
        ([6, 7], [2, 3], {"dilations": [2, 1], "pads": [0, 1, 1, 0]}),
        ([3, 4, 5], [2, 2, 3], {"strides": [1, 2, 1], "pads": [0, 0, 1, 1, 1, 0]}),
    ],
)
def test_col2im(image, block, attrs):
    n = len(image)
    strides, dil = attrs.get("strides", [1] * n), attrs.get("dilations", [1] * n)
    pads = attrs.get("pads", [0] * 2 * n)
    grid = [
        (i + pads[a] + pads[a + n] - d * (b - 1) - 1) // s + 1
        for a, (i, b, s, d) in enumerate(zip(image, block, strides, dil))
    ]
    x = _f32(2, 3 * int(np.prod(block)), int(np.prod(grid)))
    inits = {"image": np.array(image, np.int64), "block": np.array(block, np.int64)}
    check_ort(*single_op("Col2Im", {"x": x}, initializers=inits, opset=18, **attrs))


def test_conv_errors_name_the_node():
    model, inputs = single_op(
        "ConvTranspose", {"x": _f32(1, 2, 3, 3)}, initializers={"w": _f32(2, 1, 2, 2)},
        output_shape=[5, 5],
    )  # fmt: skip
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "h"
    with pytest.raises(OnnxImportError, match=r"convtranspose_0.*output_shape needs static sizes"):
        run_rvm(model, inputs)
