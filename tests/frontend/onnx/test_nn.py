"""Neural-network converters against ONNX Runtime: Conv, pools, Gemm, norms, Softmax."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx_helpers import check_ort, single_op  # noqa: E402

RNG = np.random.default_rng(1)
X = RNG.standard_normal((2, 4, 9, 8)).astype(np.float32)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"pads": [1, 0, 2, 1], "strides": [2, 1]},
        {"dilations": [2, 1], "pads": [1, 1, 1, 1]},
        {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
        {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
        {"auto_pad": "VALID"},
    ],
)
def test_conv2d(attrs):
    w, b = _f32(6, 4, 3, 3), _f32(6)
    check_ort(*single_op("Conv", {"x": X}, initializers={"w": w, "b": b}, **attrs), rtol=1e-4)


def test_conv_groups_and_1d():
    check_ort(*single_op("Conv", {"x": X}, initializers={"w": _f32(4, 2, 1, 3)}, group=2))
    x1 = _f32(2, 3, 10)
    check_ort(*single_op("Conv", {"x": x1}, initializers={"w": _f32(5, 3, 3)}, pads=[2, 0]))


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3]},
        {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 0, 1]},
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
        {"kernel_shape": [2, 2], "dilations": [2, 1], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    ],
)
def test_max_pool(attrs):
    check_ort(*single_op("MaxPool", {"x": X}, **attrs))


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3]},
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [3, 3], "pads": [1, 0, 2, 1], "count_include_pad": 1},
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1]},
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "count_include_pad": 1},
    ],
)
def test_average_pool(attrs):
    check_ort(*single_op("AveragePool", {"x": X}, **attrs))


def test_average_pool_opset_9_and_global_pools():
    check_ort(*single_op("AveragePool", {"x": X}, opset=9, kernel_shape=[2, 2], strides=[2, 2]))
    check_ort(*single_op("GlobalAveragePool", {"x": X}))
    check_ort(*single_op("GlobalMaxPool", {"x": X}))
    check_ort(*single_op("GlobalAveragePool", {"x": _f32(2, 3, 5)}))


@pytest.mark.parametrize(
    "attrs, a_shape, b_shape, c_shape",
    [
        ({}, (3, 4), (4, 5), (5,)),
        ({"transA": 1}, (4, 3), (4, 5), (3, 5)),
        ({"transB": 1, "alpha": 0.5, "beta": 2.0}, (3, 4), (5, 4), (1, 5)),
        ({"transA": 1, "transB": 1}, (4, 3), (5, 4), None),
    ],
)
def test_gemm(attrs, a_shape, b_shape, c_shape):
    inits = {"b": _f32(*b_shape)}
    if c_shape is not None:
        inits["c"] = _f32(*c_shape)
    check_ort(*single_op("Gemm", {"a": _f32(*a_shape)}, initializers=inits, **attrs))


def test_batch_norm_lrn_layer_norm():
    scale, bias, mean = _f32(4), _f32(4), _f32(4)
    var = RNG.uniform(0.5, 1.5, 4).astype(np.float32)
    inits = {"s": scale, "b": bias, "m": mean, "v": var}
    check_ort(*single_op("BatchNormalization", {"x": X}, initializers=inits, epsilon=1e-3))
    check_ort(*single_op("BatchNormalization", {"x": X}, initializers=inits, opset=9))
    check_ort(*single_op("LRN", {"x": X}, size=3, alpha=1e-3, beta=0.75, bias=2.0))
    ln = {"g": _f32(9, 8), "b": _f32(9, 8)}
    check_ort(*single_op("LayerNormalization", {"x": X}, initializers=ln, axis=-2), rtol=1e-4)


def test_layer_norm_mean_and_inv_std_dev_outputs():
    # the converter leaves the extra outputs to LayerNormalization's function body
    ln = {"g": _f32(9, 8), "b": _f32(9, 8)}
    model = single_op("LayerNormalization", {"x": X}, initializers=ln, axis=-2, n_outputs=3)
    check_ort(*model, rtol=1e-4)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset, axis", [(9, 1), (11, 2), (11, -1), (13, 1), (13, -1)])
def test_softmax_versions(op_type, opset, axis):
    # Before opset 13 the input is flattened to 2-D at axis: a different result on 3-D input.
    check_ort(*single_op(op_type, {"x": _f32(2, 3, 4)}, opset=opset, axis=axis))


def test_dropout_is_identity_with_mask():
    check_ort(*single_op("Dropout", {"x": X}, opset=9, ratio=0.3))
    check_ort(*single_op("Dropout", {"x": X}, opset=13, n_outputs=2))
    check_ort(*single_op("Dropout", {"x": X}, opset=13))


@pytest.mark.parametrize("exec_mode", ["bytecode", "compiled"])
def test_conv_pool_gemm_with_jit_kernels(exec_mode):
    w = _f32(6, 4, 3, 3)
    model, inputs = single_op(
        "Conv", {"x": X}, initializers={"w": w}, pads=[1, 0, 2, 1], strides=[2, 1]
    )
    check_ort(model, inputs, kernels="jit", exec_modes=(exec_mode,), rtol=1e-4)
    model, inputs = single_op(
        "AveragePool", {"x": X}, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, pads=[1, 0, 1, 1]
    )
    check_ort(model, inputs, kernels="jit", exec_modes=(exec_mode,))
