"""Pool converters against ONNX Runtime: MaxPool (and its Indices), AveragePool and LpPool over
1 to 3 spatial axes, the global pools, MaxUnpool; and Pad's modes."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from onnx_helpers import check_ort, run_rvm, single_op  # noqa: E402

from rvm.errors import OnnxImportError  # noqa: E402

RNG = np.random.default_rng(5)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


X1, X3 = _f32(2, 3, 11), _f32(1, 2, 5, 6, 7)

WINDOWS = [
    (X1, {"kernel_shape": [3], "strides": [2], "pads": [1, 2]}),
    (X1, {"kernel_shape": [2], "strides": [3], "ceil_mode": 1}),
    (X1, {"kernel_shape": [3], "dilations": [2], "pads": [2, 1]}),
    (X1, {"kernel_shape": [3], "strides": [2], "auto_pad": "SAME_UPPER"}),
    (X1, {"kernel_shape": [4], "strides": [2], "auto_pad": "SAME_LOWER"}),
    (X3, {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1]}),
    (X3, {"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "ceil_mode": 1}),
    (X3, {"kernel_shape": [2, 2, 2], "dilations": [2, 1, 2], "auto_pad": "VALID"}),
    (X3, {"kernel_shape": [3, 2, 3], "strides": [2, 2, 2], "auto_pad": "SAME_UPPER"}),
]


@pytest.mark.parametrize("x, attrs", WINDOWS)
def test_max_pool_1d_3d(x, attrs):
    check_ort(*single_op("MaxPool", {"x": x}, **attrs))


@pytest.mark.parametrize("include", [0, 1])
@pytest.mark.parametrize("x, attrs", WINDOWS)
def test_average_pool_1d_3d(x, attrs, include):
    check_ort(*single_op("AveragePool", {"x": x}, opset=19, count_include_pad=include, **attrs))


@pytest.mark.parametrize(
    "x, attrs",
    [
        (_f32(2, 3, 6, 7), {"kernel_shape": [2, 2], "strides": [2, 2]}),
        (_f32(1, 2, 7, 6), {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "storage_order": 1}),
        (_f32(2, 2, 5, 5), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
        (_f32(1, 3, 9, 8), {"kernel_shape": [2, 3], "dilations": [2, 1], "storage_order": 1}),
        (X1, {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
        (X3, {"kernel_shape": [2, 2, 3], "strides": [2, 2, 2], "pads": [0, 1, 1, 1, 0, 0]}),
    ],
)
def test_max_pool_indices(x, attrs):
    x = np.round(x, 1)  # ties: the first maximum in window order wins
    check_ort(*single_op("MaxPool", {"x": x}, n_outputs=2, **attrs))


@pytest.mark.parametrize(
    "x, attrs, opset",
    [
        (_f32(2, 3, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 0, 1]}, 11),
        (_f32(2, 3, 7, 8), {"kernel_shape": [2, 3], "p": 1, "auto_pad": "SAME_UPPER"}, 11),
        (_f32(2, 3, 7, 8), {"kernel_shape": [3, 2], "p": 3, "dilations": [2, 1]}, 18),
        (_f32(2, 3, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, 18),
        (X1, {"kernel_shape": [3], "strides": [2]}, 18),
        (X3, {"kernel_shape": [2, 2, 2], "p": 1}, 18),
        (_f32(1, 2, 5, 5), {"kernel_shape": [2, 2], "p": 2}, 2),
    ],
)
def test_lp_pool(x, attrs, opset):
    check_ort(*single_op("LpPool", {"x": x}, opset=opset, **attrs), rtol=1e-4)


def _typed_model(nodes, inputs, outputs, opset):
    """A model whose outputs are declared (ONNX cannot infer them for these nodes)."""
    graph = helper.make_graph(
        nodes,
        "test",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def test_lp_pool_1_takes_a_float_p():
    x = _f32(1, 2, 5, 5)
    node = helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], p=3.0)
    model = _typed_model([node], [("x", x.shape)], [("y", TensorProto.FLOAT, (1, 2, 4, 4))], 1)
    (got,) = run_rvm(model, [x])
    windows = np.lib.stride_tricks.sliding_window_view(np.abs(x), (2, 2), axis=(2, 3))
    np.testing.assert_allclose(got, ((windows**3).sum((-2, -1))) ** (1 / 3), rtol=1e-5)


def test_max_pool_same_padding_counts_the_dilation():
    # The schema's SAME padding spans the dilated window (ONNX Runtime's leaves dilation out).
    from onnx.reference import ReferenceEvaluator

    model, inputs = single_op(
        "MaxPool", {"x": X1}, kernel_shape=[3], dilations=[2], auto_pad="SAME_UPPER"
    )
    (want,) = ReferenceEvaluator(model).run(None, {"x": X1})
    (got,) = run_rvm(model, inputs)
    assert got.shape == X1.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("x", [X1, _f32(2, 3, 4, 5), X3])
def test_global_pools(x):
    check_ort(*single_op("GlobalAveragePool", {"x": x}))
    check_ort(*single_op("GlobalMaxPool", {"x": x}))
    check_ort(*single_op("GlobalLpPool", {"x": x}), rtol=1e-4)
    check_ort(*single_op("GlobalLpPool", {"x": x}, p=3), rtol=1e-4)


@pytest.mark.parametrize(
    "shape, attrs, same_size",
    [
        ((1, 2, 4, 4), {"kernel_shape": [2, 2], "strides": [2, 2]}, True),
        ((2, 2, 5, 5), {"kernel_shape": [2, 2], "strides": [2, 2]}, False),
        ((1, 3, 7), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, True),
        ((1, 1, 4, 5, 6), {"kernel_shape": [2, 2, 3], "strides": [2, 2, 3]}, False),
    ],
)
def test_max_unpool_inverts_max_pool(shape, attrs, same_size):
    """MaxPool's values and indices through MaxUnpool, back to the pooled input's shape
    (given as output_shape, or the default when the pool lost no rows)."""
    nodes = [
        helper.make_node("MaxPool", ["x"], ["v", "i"], **attrs),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("MaxUnpool", ["v", "i", "s"], ["y"], **attrs),
    ]
    outputs = [("y", TensorProto.FLOAT, shape)]
    if same_size:
        nodes.append(helper.make_node("MaxUnpool", ["v", "i"], ["z"], **attrs))
        outputs.append(("z", TensorProto.FLOAT, shape))
    check_ort(_typed_model(nodes, [("x", shape)], outputs, 11), [_f32(*shape)])


@pytest.mark.parametrize("kernels", ["numpy", "jit"])
def test_pools_with_both_kernel_backends(kernels):
    check_ort(
        *single_op("MaxPool", {"x": X3}, kernel_shape=[2, 2, 2], pads=[1] * 6), kernels=kernels
    )
    check_ort(*single_op("AveragePool", {"x": X1}, kernel_shape=[3], strides=[2]), kernels=kernels)
    # one window the whole map: run as GlobalAveragePool (`rvm.transform.legalize`)
    whole = _f32(2, 3, 4, 5)
    check_ort(*single_op("AveragePool", {"x": whole}, kernel_shape=[4, 5]), kernels=kernels)
    check_ort(
        *single_op("AveragePool", {"x": whole}, kernel_shape=[4, 5], strides=[2, 3], ceil_mode=1),
        kernels=kernels,
    )
    model, inputs = single_op("LpPool", {"x": _f32(2, 3, 7, 8)}, opset=18, kernel_shape=[3, 3])
    check_ort(model, inputs, kernels=kernels, rtol=1e-4)
    check_ort(*single_op("MaxPool", {"x": X1}, kernel_shape=[3], n_outputs=2), kernels=kernels)


def test_pool_errors_name_the_node():
    model, inputs = single_op("MaxPool", {"x": _f32(1, 2, 3, 4, 5, 6)}, kernel_shape=[2, 2, 2, 2])
    with pytest.raises(OnnxImportError, match=r"maxpool_0.*1-d, 2-d and 3-d pools"):
        run_rvm(model, inputs)
    model, inputs = single_op("MaxPool", {"x": X1}, kernel_shape=[2], n_outputs=2)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    with pytest.raises(OnnxImportError, match="the Indices output needs static sizes"):
        run_rvm(model, inputs)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
@pytest.mark.parametrize("opset", [11, 19])
def test_pad_modes(mode, opset):
    if mode == "wrap" and opset < 19:
        pytest.skip("wrap arrived in Pad-19")
    x = _f32(3, 4, 5)
    pads = np.array([1, 0, 2, 2, 3, 1], np.int64)
    check_ort(*single_op("Pad", {"x": x}, initializers={"p": pads}, opset=opset, mode=mode))
    check_ort(*single_op("Pad", {"x": x}, opset=2, pads=[0, 2, 1, 1, 1, 0], mode=mode))


def test_pad_value_known_only_at_run_time():
    x = _f32(3, 4)
    pads = np.array([1, 0, 2, 3], np.int64)
    value = np.array(2.5, np.float32)
    model, _ = single_op("Pad", {"x": x, "v": value}, initializers={"p": pads},
                         input_names=["x", "p", "v"])  # fmt: skip
    check_ort(model, [x, value])
    check_ort(model, [x, np.array(-7.0, np.float32)])
