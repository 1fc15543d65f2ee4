"""ONNX sequences as rvm lists, against ONNX Runtime (and onnx.reference for sequence I/O)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_helpers import check_ort, make_model  # noqa: E402

from rvm.testing.onnx_backend import RvmBackend  # noqa: E402

RNG = np.random.default_rng(3)
F = TensorProto.FLOAT
I64 = TensorProto.INT64


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _seq_info(name, elem, shape):
    """The ValueInfo of a sequence of ``elem`` tensors of ``shape`` (None: any shape)."""
    return helper.make_value_info(
        name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, shape))
    )


def _i64(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.int64(value)))


@pytest.mark.parametrize("new_axis", [0, 1])
def test_construct_insert_erase_at_length_concat(kernels, new_axis):
    nodes = [
        _i64("minus1", -1),
        _i64("one", 1),
        helper.make_node("SequenceConstruct", ["a", "b"], ["s0"]),
        helper.make_node("SequenceInsert", ["s0", "c", "minus1"], ["s1"]),  # before the last
        helper.make_node("SequenceInsert", ["s1", "a"], ["s2"]),  # at the end
        helper.make_node("SequenceErase", ["s2", "one"], ["s3"]),
        helper.make_node("SequenceAt", ["s3", "minus1"], ["last"]),
        helper.make_node("SequenceLength", ["s3"], ["n"]),
        helper.make_node("ConcatFromSequence", ["s3"], ["cat"], axis=1, new_axis=new_axis),
    ]
    inputs = [(k, F, [2, 3]) for k in "abc"]
    model = make_model(nodes, inputs, ["last", "n", "cat"])
    check_ort(model, [_f32(2, 3) for _ in "abc"], kernels=kernels)


@pytest.mark.parametrize(
    "split, attrs",
    [(None, {"axis": 1}), (None, {"axis": 1, "keepdims": 0}), (2, {}), ([1, 3, 1], {})],
)
def test_split_to_sequence(split, attrs):
    x = _f32(5, 4)
    inits = {} if split is None else {"split": np.asarray(split, np.int64)}
    nodes = [
        helper.make_node("SplitToSequence", ["x", *inits], ["s"], **attrs),
        helper.make_node("SequenceLength", ["s"], ["n"]),
        helper.make_node("SequenceAt", ["s", "last"], ["y"]),
    ]
    inits["last"] = np.int64(-1)
    check_ort(make_model(nodes, [("x", F, [5, 4])], ["n", "y"], inits), [x])


def test_sequence_grown_in_a_loop_of_run_time_length(kernels):
    # a Loop inserts one tensor per iteration: the length is known only at run time
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Mul", ["x", "fi"], ["xi"]),
            helper.make_node("SequenceInsert", ["s_in", "xi"], ["s_out"]),
            helper.make_node("Identity", ["c"], ["c_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            _seq_info("s_in", F, None),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            _seq_info("s_out", F, None),
        ],
    )
    nodes = [
        helper.make_node("SequenceEmpty", [], ["s0"], dtype=F),
        helper.make_node("Loop", ["n", "", "s0"], ["s"], body=body),
        helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, new_axis=1),
        helper.make_node("SequenceLength", ["s"], ["len"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [3]), helper.make_tensor_value_info("n", I64, [])],
        [
            helper.make_tensor_value_info("y", F, [None, 3]),
            helper.make_tensor_value_info("len", I64, []),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for n in (1, 4):
        check_ort(model, [_f32(3), np.array(n, np.int64)], kernels=kernels)


def test_sequence_inputs_and_outputs_through_the_backend():
    # SequenceMap over sequence graph inputs (lists of arrays of differing shapes)
    body = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        "map_body",
        [helper.make_tensor_value_info(n, F, ["n"]) for n in ("a", "b")],
        [helper.make_tensor_value_info("c", F, ["n"])],
    )
    graph = helper.make_graph(
        [helper.make_node("SequenceMap", ["xs", "b"], ["ys"], body=body)],
        "g",
        [
            _seq_info("xs", F, ["n"]),
            helper.make_tensor_value_info("b", F, [1]),
        ],
        [_seq_info("ys", F, ["n"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    xs = [_f32(2), _f32(5), _f32(1)]
    b = _f32(1)
    expected = ReferenceEvaluator(model).run(None, {"xs": xs, "b": b})[0]
    rep = RvmBackend.prepare(model)
    for case in (xs, []):
        (out,) = rep.run([case, b])
        want = expected if case else []
        assert len(out) == len(want)
        for a, e in zip(out, want):
            np.testing.assert_allclose(a, e, rtol=1e-6)


def _optional_model():
    """y = x + 1 when the optional input holds x, else zeros; and whether it holds one."""
    opt_f = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [3]))
    then = helper.make_graph(
        [
            helper.make_node("OptionalGetElement", ["o"], ["x"]),
            helper.make_node("Add", ["x", "one"], ["t"]),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("t", F, [3])],
    )
    other = helper.make_graph(
        [helper.make_node("Sub", ["one", "one"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", F, [3])],
    )
    nodes = [
        helper.make_node("OptionalHasElement", ["o"], ["has"]),
        helper.make_node("If", ["has"], ["y"], then_branch=then, else_branch=other),
        helper.make_node("Optional", ["y"], ["oy"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_value_info("o", opt_f)],
        [
            helper.make_tensor_value_info("has", TensorProto.BOOL, []),
            helper.make_value_info("oy", opt_f),
        ],
        [numpy_helper.from_array(np.ones(3, np.float32), "one")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("given", [True, False])
def test_optional_inputs_and_outputs_through_the_backend(given):
    model = _optional_model()
    x = _f32(3) if given else None
    expected = ReferenceEvaluator(model).run(None, {"o": x})
    has, oy = RvmBackend.prepare(model).run([x])
    assert bool(has) == given == bool(expected[0])
    np.testing.assert_allclose(oy, x + 1 if given else np.zeros(3), rtol=1e-6)


def test_empty_optional_of_a_sequence_from_an_if():
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, [2]))
    opt_t = helper.make_optional_type_proto(seq_t)
    then = helper.make_graph(
        [helper.make_node("Optional", [], ["none"], type=seq_t)],
        "then",
        [],
        [helper.make_value_info("none", opt_t)],
    )
    other = helper.make_graph(
        [
            helper.make_node("SequenceConstruct", ["x", "x"], ["s"]),
            helper.make_node("Optional", ["s"], ["some"]),
        ],
        "else",
        [],
        [helper.make_value_info("some", opt_t)],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["o"], then_branch=then, else_branch=other)],
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", F, [2]),
        ],
        [helper.make_value_info("o", opt_t)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    rep = RvmBackend.prepare(model)
    x = _f32(2)
    assert rep.run([np.array(True), x])[0] is None
    got = rep.run([np.array(False), x])[0]
    assert len(got) == 2 and all(np.array_equal(g, x) for g in got)
