"""Ops without a converter expanded from their ONNX function bodies, against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_helpers import check_ort, single_op  # noqa: E402

import rvm  # noqa: E402
from rvm.frontend.onnx.registry import lookup  # noqa: E402

RNG = np.random.default_rng(7)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _no_converter(op_type: str, opset: int) -> None:
    """The case tests expansion only while no converter implements the op."""
    if lookup(op_type, opset)[1] is not None:
        pytest.skip(f"{op_type} at opset {opset} has a converter now")


@pytest.mark.parametrize("opset", [13, 18])
def test_schema_function_body(kernels, opset):
    # MeanVarianceNormalization: a plain function body, one per opset (ReduceMean's axes
    # moved to an input at 18)
    _no_converter("MeanVarianceNormalization", opset)
    check_ort(
        *single_op("MeanVarianceNormalization", {"x": _f32(2, 3, 4)}, opset=opset, axes=[1]),
        kernels=kernels,
    )


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_context_dependent_body_with_omitted_optional_input(kernels, reduction):
    # NegativeLogLikelihoodLoss builds its body from the node (reduction, weight given or not)
    _no_converter("NegativeLogLikelihoodLoss", 13)
    x, t = _f32(3, 5, 2), RNG.integers(0, 5, (3, 2)).astype(np.int64)
    model, inputs = single_op("NegativeLogLikelihoodLoss", {"x": x, "t": t}, reduction=reduction)
    check_ort(model, inputs, kernels=kernels)
    w = np.abs(_f32(5))
    model, inputs = single_op(
        "NegativeLogLikelihoodLoss", {"x": x, "t": t, "w": w}, reduction=reduction, ignore_index=2
    )
    check_ort(model, inputs, kernels=kernels)


def test_nested_function_bodies():
    # SoftmaxCrossEntropyLoss's body calls NegativeLogLikelihoodLoss, itself a function
    _no_converter("SoftmaxCrossEntropyLoss", 13)
    x, t = _f32(4, 6), RNG.integers(0, 6, (4,)).astype(np.int64)
    model, inputs = single_op("SoftmaxCrossEntropyLoss", {"x": x, "t": t}, n_outputs=2)
    check_ort(model, inputs)


def _local_function_model(with_scale: bool):
    """A model calling its own function ``my.fn.ScaledTanh(x) = tanh(x) * scale``, whose
    ``scale`` attribute defaults to 2.0."""
    body = [
        helper.make_node("Constant", [], ["s"], value_float=0.0),
        helper.make_node("Tanh", ["x"], ["t"]),
        helper.make_node("Mul", ["t", "s"], ["y"]),
    ]
    body[0].attribute[0].ref_attr_name = "scale"  # value_float = @scale
    default = helper.make_attribute("scale", 2.0)
    fn = helper.make_function(
        "my.fn",
        "ScaledTanh",
        ["x"],
        ["y"],
        body,
        [helper.make_opsetid("", 17)],
        attributes=[],
        attribute_protos=[default],
    )
    attrs = {"scale": 0.5} if with_scale else {}
    node = helper.make_node("ScaledTanh", ["x"], ["y"], domain="my.fn", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("my.fn", 1)]
    model = helper.make_model(graph, opset_imports=opsets, functions=[fn])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("with_scale", [False, True])
def test_local_function_binds_attributes_and_defaults(with_scale):
    x = _f32(2, 3)
    model = _local_function_model(with_scale)
    check_ort(model, [x])
    expected = np.tanh(x) * (0.5 if with_scale else 2.0)
    ex = rvm.compile(rvm.from_onnx(model), kernels="numpy")
    np.testing.assert_allclose(rvm.VirtualMachine(ex)["main"](x), expected, rtol=1e-6)


def test_body_values_do_not_meet_graph_values():
    # the graph has its own "t" and "s"; the function body's "t" and "s" are other values
    x = _f32(2, 3)
    model = _local_function_model(False)
    pre = helper.make_node("Neg", ["x"], ["t"])
    call = helper.make_node("ScaledTanh", ["t"], ["s"], domain="my.fn")
    post = helper.make_node("Add", ["s", "t"], ["y"])
    del model.graph.node[:]
    model.graph.node.extend([pre, call, post])
    check_ort(model, [x])


def test_unsupported_op_inside_a_body_is_listed():
    # a local function whose body uses an op rvm lacks is refused up front, naming both
    body = [helper.make_node("ImageDecoder", ["x"], ["y"])]
    fn = helper.make_function("my.fn", "Decode", ["x"], ["y"], body, [helper.make_opsetid("", 20)])
    node = helper.make_node("Decode", ["x"], ["y"], domain="my.fn", name="decode")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [10])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [None, None, 3])],
    )
    opsets = [helper.make_opsetid("", 20), helper.make_opsetid("my.fn", 1)]
    model = helper.make_model(graph, opset_imports=opsets, functions=[fn])
    with pytest.raises(rvm.OnnxImportError, match=r"my\.fn\.Decode.*body uses ImageDecoder-20"):
        rvm.from_onnx(model)


def test_context_dependent_body_inside_a_loop_body():
    # the up-front check infers the types of subgraph values to build context-dependent bodies
    _no_converter("NegativeLogLikelihoodLoss", 13)
    loss = helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["l"], reduction="sum")
    acc = helper.make_node("Add", ["a", "l"], ["a_out"])
    keep = helper.make_node("Identity", ["c"], ["c_out"])
    body = helper.make_graph(
        [loss, acc, keep],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("a", TensorProto.FLOAT, []),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("a_out", TensorProto.FLOAT, []),
        ],
    )
    loop = helper.make_node("Loop", ["n", "", "a0"], ["a_end"], body=body)
    graph = helper.make_graph(
        [loop],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info("t", TensorProto.INT64, [3]),
        ],
        [helper.make_tensor_value_info("a_end", TensorProto.FLOAT, [])],
        [
            numpy_helper.from_array(np.array(3, np.int64), "n"),
            numpy_helper.from_array(np.array(0.0, np.float32), "a0"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x, t = _f32(3, 4), RNG.integers(0, 4, (3,)).astype(np.int64)
    check_ort(model, [x, t])
