"""rvm.from_onnx: model sources, parameters, shapes, symbolic batch, refusals and errors."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from onnx_helpers import check_ort, make_model, single_op  # noqa: E402

import rvm  # noqa: E402
from rvm import ir  # noqa: E402
from rvm.testing.onnx_models import run_ort  # noqa: E402

RNG = np.random.default_rng(3)
W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
FC = RNG.standard_normal((5, 4 * 8 * 8)).astype(np.float32)


def _i64(*values):
    return np.array(values, np.int64)


def torch_like_model(batch="N"):
    """Conv -> Relu -> a torch-style flatten (Shape, Gather, Mul, Cast, Concat, Reshape) ->
    Gemm -> Softmax, with a symbolic batch."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        n("Relu", ["c"], ["r"]),
        n("Shape", ["r"], ["s"]),
        n("Gather", ["s", "i0"], ["n"], axis=0),
        n("Gather", ["s", "i1"], ["ch"], axis=0),
        n("Slice", ["s", "two", "four"], ["hw"]),
        n("ReduceProd", ["hw"], ["hw_size"], keepdims=0),
        n("Mul", ["ch", "hw_size"], ["features"]),
        n("Cast", ["features"], ["features64"], to=TensorProto.INT64),
        n("Unsqueeze", ["n", "zero"], ["n1"]),
        n("Unsqueeze", ["features64", "zero"], ["f1"]),
        n("Concat", ["n1", "f1"], ["target"], axis=0),
        n("Reshape", ["r", "target"], ["flat"]),
        n("Gemm", ["flat", "fc"], ["logits"], transB=1),
        n("Softmax", ["logits"], ["prob"], axis=1),
    ]
    inits = {
        "w": W,
        "fc": FC,
        "i0": np.array(0, np.int64),
        "i1": np.array(1, np.int64),
        "two": _i64(2),
        "four": _i64(4),
        "zero": _i64(0),
    }
    return make_model(
        nodes, [("x", TensorProto.FLOAT, [batch, 3, 8, 8])], ["prob", "logits"], inits, opset=13
    )


def _reshape_targets(mod):
    return [
        b.value.attrs["shape"]
        for b in mod["main"].body.bindings
        if isinstance(b.value, ir.Call) and b.value.callee.name == "reshape"
    ]


def test_symbolic_batch_compiles_once_and_runs_every_batch(exec_mode):
    model = torch_like_model()
    mod = rvm.from_onnx(model)
    assert mod["main"].params[0].type.shape == ("N", 3, 8, 8)
    assert _reshape_targets(mod) == [("N", 256)]  # the shape chain folded to a symbolic reshape
    vm = rvm.VirtualMachine(rvm.compile(mod, kernels="numpy"), exec_mode=exec_mode)
    for batch in (1, 3, 2):
        x = RNG.standard_normal((batch, 3, 8, 8)).astype(np.float32)
        prob, logits = vm["main"](x)
        ref_prob, ref_logits = run_ort(model, [x])
        np.testing.assert_allclose(logits, ref_logits, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(prob, ref_prob, rtol=1e-4, atol=1e-6)


def test_static_batch_folds_the_shape_chain_to_constants():
    mod = rvm.from_onnx(torch_like_model(batch=2))
    assert _reshape_targets(mod) == [(2, 256)]
    assert not any(
        b.value.callee.name == "shape_of"
        for b in mod["main"].body.bindings
        if isinstance(b.value, ir.Call)
    )


def test_unnamed_dynamic_dim_gets_a_fresh_name_and_shape_dict_fixes_it():
    model = torch_like_model(batch=None)
    mod = rvm.from_onnx(model)
    assert mod["main"].params[0].type.shape == ("dim0", 3, 8, 8)
    fixed = rvm.from_onnx(model, shape_dict={"x": (4, 3, 8, 8)})
    assert fixed["main"].params[0].type.shape == (4, 3, 8, 8)
    named = rvm.from_onnx(model, shape_dict={"x": ("batch", 3, 8, 8)})
    assert _reshape_targets(named) == [("batch", 256)]


def test_model_sources_path_bytes_and_proto(tmp_path):
    model, inputs = single_op("Relu", {"x": RNG.standard_normal((2, 3)).astype(np.float32)})
    path = tmp_path / "relu.onnx"
    onnx.save(model, path)
    expected = run_ort(model, inputs)[0]
    for source in (model, model.SerializeToString(), str(path), path):
        ex = rvm.compile(rvm.from_onnx(source), kernels="numpy")
        np.testing.assert_array_equal(rvm.VirtualMachine(ex)["main"](*inputs), expected)


def test_names_are_identifiers_and_mapped_back():
    x = helper.make_tensor_value_info("gpu_0/data:0", TensorProto.FLOAT, [2])
    node = helper.make_node("Neg", ["gpu_0/data:0"], ["1out"])
    graph = helper.make_graph([node], "g", [x], [helper.make_tensor_value_info("1out", 1, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    mod = rvm.from_onnx(model)
    (param,) = mod["main"].params
    assert param.name.isidentifier()
    assert mod.attrs["onnx_input_names"] == {param.name: "gpu_0/data:0"}


def test_params_as_inputs_swaps_weights_at_run_time(exec_mode):
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    w = RNG.standard_normal((3, 4)).astype(np.float32)
    shape = _i64(4, 2)
    model, _ = single_op("MatMul", {"x": x}, initializers={"w": w})
    node = helper.make_node("Reshape", ["y0", "s"], ["out"])
    model.graph.node.append(node)
    model.graph.initializer.append(onnx.numpy_helper.from_array(shape, "s"))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("out", TensorProto.FLOAT, [4, 2]))
    mod = rvm.from_onnx(model, params="inputs")
    assert [p.name for p in mod["main"].params] == ["x", "w"]  # the int shape stays constant
    vm = rvm.VirtualMachine(rvm.compile(mod, kernels="numpy"), exec_mode=exec_mode)
    w2 = w * 2
    np.testing.assert_allclose(vm["main"](x, w2), (x @ w2).reshape(4, 2), rtol=1e-6)
    np.testing.assert_allclose(vm["main"](x, w), (x @ w).reshape(4, 2), rtol=1e-6)


def test_dtype_dict_overrides_input_dtype():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    model, _ = single_op("Relu", {"x": x})
    mod = rvm.from_onnx(model, dtype_dict={"x": "float64"})
    assert mod["main"].params[0].type.dtype == "float64"
    out = rvm.VirtualMachine(rvm.compile(mod, kernels="numpy"))["main"](x.astype(np.float64))
    assert out.dtype == np.float64


def test_one_output_is_a_tensor_several_a_tuple():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    check_ort(*single_op("Split", {"x": x}, opset=13, n_outputs=3, axis=1))
    mod = rvm.from_onnx(single_op("Relu", {"x": x})[0])
    assert isinstance(mod["main"].ret_type or mod["main"].body.body.type, ir.TensorType)


def _model_with(nodes, opset=13, extra_opsets=()):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, [2, 3])],
    )
    opsets = [helper.make_opsetid("", opset), *extra_opsets]
    return helper.make_model(graph, opset_imports=opsets)


def test_unsupported_ops_are_all_listed_before_conversion():
    then = helper.make_graph(
        [helper.make_node("RandomUniformLike", ["x"], ["t"], name="inner_random")],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Det", ["a"], ["b"], name="det1"),
        helper.make_node("Det", ["b"], ["c"], name="det2"),
        helper.make_node("Greater", ["c", "c"], ["cond0"], name="gt"),
        helper.make_node("ReduceMin", ["cond0"], ["cond"], keepdims=0, name="rm"),
        helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then, else_branch=then),
        helper.make_node("Thing", ["y"], ["z"], name="custom", domain="my.domain"),
    ]
    model = _model_with(nodes, extra_opsets=[helper.make_opsetid("my.domain", 1)])
    with pytest.raises(rvm.OnnxImportError) as info:
        rvm.from_onnx(model)
    message = str(info.value)
    for expected in (
        "Det-11",
        "'det1', 'det2'",
        "RandomUniformLike-1",
        "'inner_random'",
        "my.domain.Thing",
        "'custom'",
    ):
        assert expected in message, message
    assert "Relu" not in message and "If" not in message  # the If is supported, its body not
    assert isinstance(info.value, rvm.IRError)


def test_a_version_without_converter_is_refused():
    # Add-6 has legacy broadcast attributes rvm does not implement; opset 6 selects it.
    model = _model_with([helper.make_node("Add", ["x", "x"], ["y"], name="add6")], opset=6)
    with pytest.raises(rvm.OnnxImportError, match=r"Add-6 \(opset 6\): 1 node: 'add6'"):
        rvm.from_onnx(model)
    # At opset 12, Softmax-11 (flatten to 2-D) is selected, not Softmax-13.
    model = _model_with([helper.make_node("Softmax", ["x"], ["y"])], opset=12)
    assert rvm.from_onnx(model) is not None


def test_corrupt_truncated_and_invalid_models(tmp_path):
    model, _ = single_op("Relu", {"x": np.zeros((2, 3), np.float32)})
    data = model.SerializeToString()
    with pytest.raises(rvm.OnnxImportError, match="not a valid ONNX model"):
        rvm.from_onnx(b"\xff\xff\xff garbage")
    with pytest.raises(rvm.OnnxImportError):
        rvm.from_onnx(data[: len(data) // 2])
    with pytest.raises(rvm.OnnxImportError, match="cannot read"):
        rvm.from_onnx(tmp_path / "missing.onnx")
    bad = _model_with([helper.make_node("Relu", ["nowhere"], ["y"])])
    with pytest.raises(rvm.OnnxImportError, match="fails onnx.checker"):
        rvm.from_onnx(bad)
    with pytest.raises(TypeError, match="ModelProto, a path or bytes"):
        rvm.from_onnx(42)
    with pytest.raises(ValueError, match="params"):
        rvm.from_onnx(model, params="weights")


def test_checker_findings_ort_tolerates_warn_and_the_model_imports(exec_mode):
    # A graph output whose type has no shape field: onnx.checker refuses it, ORT runs it.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = onnx.ValueInfoProto(name="y")
    y.type.tensor_type.elem_type = TensorProto.FLOAT
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(onnx.checker.ValidationError, match="Field 'shape' of 'type'"):
        onnx.checker.check_model(model)
    with pytest.warns(rvm.OnnxCheckerWarning, match="Field 'shape' of 'type' is required"):
        mod = rvm.from_onnx(model)
    assert not model.graph.output[0].type.tensor_type.HasField("shape")  # the model unchanged
    x_in = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    out = rvm.VirtualMachine(rvm.compile(mod, kernels="numpy"), exec_mode=exec_mode)["main"](x_in)
    np.testing.assert_array_equal(out, run_ort(model, [x_in])[0])
    # A finding ORT does not tolerate is still an error, also after a tolerated one.
    bad = helper.make_graph([helper.make_node("Relu", ["nowhere"], ["y"])], "g", [x], [y])
    bad_model = helper.make_model(bad, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(rvm.OnnxImportError, match="fails onnx.checker: Nodes in a graph"):
        rvm.from_onnx(bad_model)


def test_node_errors_name_the_node():
    inputs = {"i": np.zeros(2, np.int64), "d": np.array(3), "v": np.zeros(2, np.float32)}
    model, _ = single_op("OneHot", inputs)
    with pytest.raises(rvm.OnnxImportError, match=r"node 'onehot_0' \(OneHot-11\).*known at"):
        rvm.from_onnx(model)


def test_rvm_imports_without_onnx_and_from_onnx_says_how_to_install():
    code = (
        "import sys; sys.modules['onnx'] = None\n"
        "import rvm\n"
        "try:\n    rvm.from_onnx(b'')\nexcept ImportError as e:\n    print('IMPORT-ERROR', e)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert "IMPORT-ERROR" in out.stdout and "pip install 'rvm[onnx]'" in out.stdout, out
