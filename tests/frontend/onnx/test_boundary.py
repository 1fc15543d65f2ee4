"""Sequences and optionals at the VM's boundary, as ONNX Runtime takes and gives them: a
Python list for a sequence, None for an empty optional; in every exec mode, through saved
functions, `set_input`/`get_outputs`, a saved and loaded executable, and rvm.dask."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

import rvm  # noqa: E402
from rvm.testing.onnx_models import run_ort  # noqa: E402

F = TensorProto.FLOAT


def _seq(name, shape):
    return helper.make_value_info(
        name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, shape))
    )


def _opt(name, shape):
    return helper.make_value_info(
        name, helper.make_optional_type_proto(helper.make_tensor_type_proto(F, shape))
    )


def sequence_model():
    """(total, parts, maybe) = (concat(s) summed, split(x) along 0, Optional(x))."""
    nodes = [
        helper.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0),
        helper.make_node("ReduceSum", ["cat"], ["total"], keepdims=0),
        helper.make_node("SplitToSequence", ["x"], ["parts"], axis=0),
        helper.make_node("Optional", ["x"], ["maybe"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [_seq("s", ["n", 3]), helper.make_tensor_value_info("x", F, [3, 2])],
        [
            helper.make_tensor_value_info("total", F, []),
            _seq("parts", [1, 2]),
            _opt("maybe", [3, 2]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def optional_model():
    """(has, y) = (whether o holds a value, o or an empty optional passed through)."""
    graph = helper.make_graph(
        [
            helper.make_node("OptionalHasElement", ["o"], ["has"]),
            helper.make_node("Identity", ["o"], ["y"]),
        ],
        "g",
        [_opt("o", [2])],
        [helper.make_tensor_value_info("has", TensorProto.BOOL, []), _opt("y", [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


RNG = np.random.default_rng(5)
SEQ = [
    RNG.standard_normal((2, 3)).astype(np.float32),
    RNG.standard_normal((1, 3)).astype(np.float32),
]
X = RNG.standard_normal((3, 2)).astype(np.float32)


def _check_sequence_outputs(got, want):
    total, parts, maybe = got
    assert isinstance(parts, list) and len(parts) == len(want[1]) == 3
    np.testing.assert_allclose(total, want[0], rtol=1e-5)
    for a, b in zip(parts, want[1]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(maybe, want[2])


@pytest.fixture(scope="module")
def seq_ex():
    return rvm.compile(rvm.from_onnx(sequence_model()), kernels="numpy")


def test_a_sequence_is_a_list_both_ways_in_every_mode(seq_ex, exec_mode, tmp_path):
    want = run_ort(sequence_model(), [SEQ, X])
    path = str(tmp_path / "seq.rvmx")
    seq_ex.save(path)
    for ex in (seq_ex, rvm.load_executable(path)):
        vm = rvm.VirtualMachine(ex, exec_mode=exec_mode)
        _check_sequence_outputs(vm["main"](SEQ, X), want)
        _check_sequence_outputs(vm["main"](tuple(SEQ), x=X), want)
        vm.save_function("main", "saved", SEQ, X)
        _check_sequence_outputs(vm["saved"](), want)
        vm.set_input("main", SEQ, X)
        vm.invoke_stateful("main")
        _check_sequence_outputs(vm.get_outputs("main"), want)
    empty = rvm.VirtualMachine(seq_ex, exec_mode=exec_mode)
    with pytest.raises(TypeError, match="main: argument 0 's' expects a list"):
        empty["main"](SEQ[0], X)


@pytest.mark.parametrize("given", [True, False])
def test_none_is_an_empty_optional_both_ways(exec_mode, given):
    model = optional_model()
    x = RNG.standard_normal(2).astype(np.float32) if given else None
    want = run_ort(model, [x])
    ex = rvm.compile(rvm.from_onnx(model), kernels="numpy")
    has, y = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](x)
    assert bool(has) == bool(want[0]) == given
    if given:
        np.testing.assert_array_equal(y, want[1])
    else:
        assert y is None and want[1] is None


def test_dask_blocks_take_a_list_argument():
    da = pytest.importorskip("dask.array")
    rvm_dask = pytest.importorskip("rvm.dask")
    graph = helper.make_graph(
        [
            helper.make_node("SequenceLength", ["s"], ["len"]),
            helper.make_node("Cast", ["len"], ["k"], to=F),
            helper.make_node("Mul", ["x", "k"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, ["n", 3]), _seq("s", ["m", 3])],
        [helper.make_tensor_value_info("y", F, ["n", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    want = run_ort(model, [x, SEQ])[0]
    ex = rvm.compile(rvm.from_onnx(model), kernels="numpy")
    got = rvm_dask.map_batches(ex, da.from_array(x, chunks=2), SEQ).compute(scheduler="threads")
    np.testing.assert_allclose(got, want, rtol=1e-6)
