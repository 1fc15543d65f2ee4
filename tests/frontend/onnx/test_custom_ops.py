"""ONNX custom-domain ops mapped to registered Python functions (`from_onnx(custom_ops=...)`),
in every exec mode."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import rvm
from rvm.errors import OnnxImportError, VMError
from rvm.script import T

rvm.register_func("test_onnx_custom.square_plus", lambda x: x * x + 1.0, override=True)
rvm.register_func("test_onnx_custom.min_max", lambda x: (x.min(1), x.max(1)), override=True)
rvm.register_func("test_onnx_custom.one_of_two", lambda x: (x.min(1),), override=True)


def _model(with_value_info: bool = True) -> bytes:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("MyOp", ["r"], ["m"], domain="MyDomain"),
        helper.make_node("Add", ["m", "x"], ["y"]),
    ]
    info = [helper.make_tensor_value_info("m", TensorProto.FLOAT, ["n", 3])]
    graph = helper.make_graph(
        nodes,
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
        value_info=info if with_value_info else [],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("MyDomain", 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def test_custom_op_calls_the_registered_function(exec_mode):
    mod = rvm.from_onnx(_model(), custom_ops={"MyDomain.MyOp": "test_onnx_custom.square_plus"})
    vm = rvm.VirtualMachine(rvm.compile(mod), exec_mode=exec_mode)
    for n in (1, 4):
        x = np.random.randn(n, 3).astype(np.float32)
        r = np.maximum(x, 0)
        np.testing.assert_allclose(vm["main"](x), r * r + 1 + x, rtol=1e-6)


def test_custom_op_type_given_and_checked(exec_mode):
    rvm.register_func("test_onnx_custom.wrong", lambda x: x[:, :2], override=True)
    custom = {"MyDomain.MyOp": ("test_onnx_custom.wrong", T[("n", 3), "float32"])}
    mod = rvm.from_onnx(_model(with_value_info=False), custom_ops=custom)
    vm = rvm.VirtualMachine(rvm.compile(mod), exec_mode=exec_mode)
    with pytest.raises(VMError, match="the result of test_onnx_custom.wrong: shape \\(2, 2\\)"):
        vm["main"](np.ones((2, 3), np.float32))


def test_custom_op_errors():
    with pytest.raises(OnnxImportError, match="MyDomain.MyOp"):
        rvm.from_onnx(_model())
    with pytest.raises(OnnxImportError, match="gives no type for its output 'm'"):
        rvm.from_onnx(_model(False), custom_ops={"MyDomain.MyOp": "test_onnx_custom.square_plus"})
    with pytest.raises(ValueError, match="custom_ops keys are 'Domain.OpType'"):
        rvm.from_onnx(_model(), custom_ops={"MyOp": "f"})


def _two_outputs(with_value_info: bool = True) -> bytes:
    nodes = [
        helper.make_node("MinMax", ["x"], ["lo", "hi"], domain="MyDomain"),
        helper.make_node("Sub", ["hi", "lo"], ["y"]),
    ]
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n"]) for n in ("lo", "hi")]
    graph = helper.make_graph(
        nodes,
        "custom2",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])],
        value_info=info if with_value_info else [],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("MyDomain", 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


@pytest.mark.parametrize("given", [False, True])
def test_custom_op_of_several_outputs(exec_mode, given):
    """A node of two outputs calls a function returning a tuple, each field checked."""
    types = (T[("n",), "float32"], T[("n",), "float32"])
    value = ("test_onnx_custom.min_max", types) if given else "test_onnx_custom.min_max"
    mod = rvm.from_onnx(_two_outputs(not given), custom_ops={"MyDomain.MinMax": value})
    vm = rvm.VirtualMachine(rvm.compile(mod), exec_mode=exec_mode)
    for n in (1, 4):
        x = np.random.randn(n, 3).astype(np.float32)
        np.testing.assert_allclose(vm["main"](x), x.max(1) - x.min(1), rtol=1e-6)
    bad = rvm.from_onnx(
        _two_outputs(), custom_ops={"MyDomain.MinMax": "test_onnx_custom.one_of_two"}
    )
    vm = rvm.VirtualMachine(rvm.compile(bad), exec_mode=exec_mode)
    with pytest.raises(VMError, match="expected a tuple of 2 tensors, got a tuple of 1"):
        vm["main"](np.ones((2, 3), np.float32))


def test_custom_op_of_several_outputs_errors():
    one = ("test_onnx_custom.min_max", T[("n",), "float32"])
    with pytest.raises(OnnxImportError, match="custom_ops gives 1 output types, the node has 2"):
        rvm.from_onnx(_two_outputs(), custom_ops={"MyDomain.MinMax": one})
    with pytest.raises(OnnxImportError, match="gives no type for its output 'lo'"):
        rvm.from_onnx(_two_outputs(False), custom_ops={"MyDomain.MinMax": "f"})
    with pytest.raises(ValueError, match="a tuple of types for several outputs"):
        rvm.from_onnx(_two_outputs(), custom_ops={"MyDomain.MinMax": ("f", ())})
