"""Models ONNX declares invalid are refused with an OnnxImportError naming the node; what
import folds into constants is bounded."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from onnx_helpers import check_ort, single_op  # noqa: E402

import rvm  # noqa: E402
from rvm.frontend.onnx.context import FOLD_LIMIT_BYTES  # noqa: E402


def _model(nodes, inputs, outputs, inits=(), opset=13):
    """A model built without ONNX's shape inference (which would refuse it first)."""
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "invalid",
        [vi(n, t, s) for n, t, s in inputs],
        [vi(n, t, s) for n, t, s in outputs],
        list(inits),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _split(opset, sizes=None, outputs=2, dim=3, **attrs):
    inputs, inits = ["x"], []
    if sizes is not None and opset >= 13:
        inputs.append("s")
        inits.append(helper.make_tensor("s", TensorProto.INT64, [len(sizes)], sizes))
    elif sizes is not None:
        attrs["split"] = sizes
    outs = [f"y{i}" for i in range(outputs)]
    node = helper.make_node("Split", inputs, outs, axis=1, name="split", **attrs)
    return _model(
        [node],
        [("x", TensorProto.FLOAT, [2, dim])],
        [(o, TensorProto.FLOAT, [2, None]) for o in outs],
        inits,
        opset,
    )


@pytest.mark.parametrize("opset", [7, 11, 13, 18])
@pytest.mark.parametrize(
    ("sizes", "outputs", "message"),
    [
        ([2, 5], 2, r"split sizes \[2, 5\] must be >= 0 and sum to the axis length 3"),
        ([-1, 4], 2, r"split sizes \[-1, 4\] must be >= 0 and sum to the axis length 3"),
        ([1, 2], 3, r"split \[1, 2\] has 2 sizes for 3 outputs"),
    ],
)
def test_split_sizes_are_checked(opset, sizes, outputs, message):
    with pytest.raises(rvm.OnnxImportError, match=rf"node 'split' \(Split-\d+\): {message}"):
        rvm.from_onnx(_split(opset, sizes, outputs))


def test_split_without_sizes_is_checked_per_version():
    with pytest.raises(rvm.OnnxImportError, match="length 3 does not split evenly into 2"):
        rvm.from_onnx(_split(13))
    with pytest.raises(rvm.OnnxImportError, match="needs the 'split' input or the 'num_outp"):
        rvm.from_onnx(_split(18))
    with pytest.raises(rvm.OnnxImportError, match="num_outputs is 2, but the node has 3 out"):
        rvm.from_onnx(_split(18, outputs=3, num_outputs=2))
    with pytest.raises(rvm.OnnxImportError, match="either the 'split' input or the 'num_o"):
        rvm.from_onnx(_split(18, [1, 2], num_outputs=2))
    with pytest.raises(rvm.OnnxImportError, match="4 pieces of an axis of length 5 leave a neg"):
        rvm.from_onnx(_split(18, outputs=4, dim=5, num_outputs=4))


def test_split_of_an_axis_that_splits_unevenly_at_opset_18_matches_ort():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    check_ort(*single_op("Split", {"x": x}, opset=18, n_outputs=4, axis=1, num_outputs=4))


def _binary(op_type, a, b):
    node = helper.make_node(op_type, ["a", "b"], ["y"], name="node")
    return _model([node], [("a", a, [2, 2]), ("b", b, [2, 2])], [("y", a, [2, 2])])


@pytest.mark.parametrize(
    ("op_type", "b", "message"),
    [
        ("Add", TensorProto.INT64, r"input 1 \('b'\) is tensor\(int64\), but input 0 \('a'\) is "),
        ("MatMul", TensorProto.INT64, r"input 1 \('b'\) is tensor\(int64\), but input 0 \('a"),
        ("Add", TensorProto.BOOL, r"input 1 \('b'\) is tensor\(bool\), which its type T does no"),
    ],
)
def test_type_constraints_are_enforced(op_type, b, message):
    with pytest.raises(rvm.OnnxImportError, match=rf"node 'node' \({op_type}-13\): {message}"):
        rvm.from_onnx(_binary(op_type, TensorProto.FLOAT, b))


def test_fixed_input_types_are_enforced():
    node = helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")
    shape = helper.make_tensor("s", TensorProto.INT32, [1], [4])
    model = _model(
        [node], [("x", TensorProto.FLOAT, [2, 2])], [("y", TensorProto.FLOAT, [4])], [shape]
    )
    with pytest.raises(rvm.OnnxImportError, match=r"input 1 \('s'\) is tensor\(int32\), but t"):
        rvm.from_onnx(model)


def test_transpose_perm_must_be_a_permutation():
    for perm in ([-1, 0], [0, 0], [0, 1, 2]):
        node = helper.make_node("Transpose", ["x"], ["y"], perm=perm, name="t")
        model = _model(
            [node], [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, [None, None])]
        )
        with pytest.raises(rvm.OnnxImportError, match=r"node 't' \(Transpose-13\): perm \["):
            rvm.from_onnx(model)


def test_unknown_opset_versions_and_empty_graphs_are_refused():
    node = helper.make_node("Relu", ["x"], ["y"])
    io = [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])]
    with pytest.raises(rvm.OnnxImportError, match="imports opset 99 of domain 'ai.onnx', whi"):
        rvm.from_onnx(_model([node], *io, opset=99))
    with pytest.raises(rvm.OnnxImportError, match="has an empty graph: it declares no outputs"):
        rvm.from_onnx(_model([], [], []))


def _constant_of_shape(dims):
    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.5])
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], value=value, name="fill")
    shape = helper.make_tensor("s", TensorProto.INT64, [len(dims)], dims)
    return _model([node], [], [("y", TensorProto.FLOAT, dims)], [shape])


def test_a_tiny_model_of_a_huge_constant_imports_without_folding_it():
    # 40 GB of zeros from a model of about 100 bytes: import must not build them. The child
    # process may not grow past 1 GB of address space beyond what it needs to start.
    data = _constant_of_shape([100000, 100000]).SerializeToString()
    script = textwrap.dedent(
        f"""
        import resource
        import rvm
        model = {data!r}
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (used + (1 << 30), hard))
        mod = rvm.from_onnx(model)
        print(type(mod["main"].body.body).__name__)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["Var"]  # a value computed at run time, not a Constant


def test_a_constant_above_the_fold_limit_is_computed_at_run_time(exec_mode):
    rows = FOLD_LIMIT_BYTES // (4 * 256) + 512  # a few hundred KB above the limit
    model = _constant_of_shape([rows, 256])
    mod = rvm.from_onnx(model)
    assert not isinstance(mod["main"].body.body, rvm.ir.Constant)
    out = rvm.VirtualMachine(rvm.compile(mod), exec_mode=exec_mode)["main"]()
    np.testing.assert_array_equal(out, np.full((rows, 256), 1.5, np.float32))


def test_graph_outputs_must_have_their_declared_element_types():
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    x = [("x", TensorProto.FLOAT, [2, 3])]
    with pytest.raises(rvm.OnnxImportError, match="output 'y' is declared float64, but its va"):
        rvm.from_onnx(_model([node], x, [("y", TensorProto.DOUBLE, [2, 3])]))
    # dims that contradict the value are tolerated, as ONNX Runtime does (with a warning)
    mod = rvm.from_onnx(_model([node], x, [("y", TensorProto.FLOAT, [6])]))
    assert rvm.ir.infer_type(mod["main"].body.body).shape == (2, 3)
    # a caller's dtype_dict re-types the outputs
    model = _model([node], x, [("y", TensorProto.FLOAT, [2, 3])])
    mod = rvm.from_onnx(model, dtype_dict={"x": "float64"})
    assert rvm.ir.infer_type(mod["main"].body.body).dtype == "float64"


@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMax", "ReduceLogSumExp", "ArgMax"])
def test_reduction_flags_must_be_0_or_1(op_type):
    # ONNX Runtime reads keepdims=-1 as false, ONNX's reference as true: refused (fuzz found it)
    node = helper.make_node(op_type, ["x"], ["y"], keepdims=-1, name="r")
    out = TensorProto.INT64 if op_type == "ArgMax" else TensorProto.FLOAT
    model = _model([node], [("x", TensorProto.FLOAT, [2, 3])], [("y", out, [None, None])])
    with pytest.raises(rvm.OnnxImportError, match="node 'r' .*attribute keepdims must be 0 or 1"):
        rvm.from_onnx(model)
