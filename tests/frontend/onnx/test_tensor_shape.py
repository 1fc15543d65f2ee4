"""Tensor, shape and reduction converters against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx_helpers import check_ort, run_rvm, single_op  # noqa: E402

RNG = np.random.default_rng(2)
X = RNG.standard_normal((2, 3, 4)).astype(np.float32)


def _i64(*values):
    return np.array(values, np.int64)


def test_transpose_concat_identity_cast():
    check_ort(*single_op("Transpose", {"x": X}, perm=[2, 0, 1]))
    check_ort(*single_op("Transpose", {"x": X}))
    check_ort(*single_op("Concat", {"a": X, "b": X[:, :1]}, axis=1))
    check_ort(*single_op("Identity", {"x": X}))
    check_ort(*single_op("Cast", {"x": X * 3}, to=7))  # INT64


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split(opset):
    if opset < 13:
        check_ort(*single_op("Split", {"x": X}, opset=opset, n_outputs=2, axis=2, split=[1, 3]))
    else:
        inits = {"s": _i64(1, 3)}
        check_ort(
            *single_op("Split", {"x": X}, initializers=inits, opset=opset, n_outputs=2, axis=2)
        )
    equal = {"num_outputs": 2} if opset >= 18 else {}
    check_ort(*single_op("Split", {"x": X}, opset=opset, n_outputs=2, axis=-1, **equal))


def test_split_18_uneven():
    check_ort(*single_op("Split", {"x": X}, opset=18, n_outputs=2, axis=1, num_outputs=2))


@pytest.mark.parametrize(
    "starts, ends, axes, steps",
    [
        ((1,), (3,), (2,), None),
        ((0, -1), (2, -(2**63)), (0, 2), (1, -1)),
        ((-2,), (2**63 - 1,), (-1,), (2,)),
        ((5,), (10,), (1,), None),
    ],
)
def test_slice(starts, ends, axes, steps):
    inits = {"s": _i64(*starts), "e": _i64(*ends), "a": _i64(*axes)}
    if steps is not None:
        inits["st"] = _i64(*steps)
    check_ort(*single_op("Slice", {"x": X}, initializers=inits))


def test_slice_opset_1_gather_tile_pad():
    check_ort(*single_op("Slice", {"x": X}, opset=9, starts=[1], ends=[3], axes=[2]))
    check_ort(*single_op("Gather", {"x": X}, initializers={"i": _i64(2, -1, 0)}, axis=2))
    check_ort(*single_op("Gather", {"x": X}, initializers={"i": np.array(1, np.int64)}, axis=1))
    idx = RNG.integers(0, 3, (2, 3, 4)).astype(np.int64)
    check_ort(*single_op("GatherElements", {"x": X, "i": idx}, axis=1))
    check_ort(*single_op("Tile", {"x": X}, initializers={"r": _i64(2, 1, 3)}))
    pads = _i64(0, 1, 2, 0, 0, 1)
    check_ort(*single_op("Pad", {"x": X}, initializers={"p": pads, "v": np.array(1.5, np.float32)}))
    check_ort(*single_op("Pad", {"x": X}, opset=2, pads=[1, 0, 0, 0, 2, 1], value=-1.0))


def test_reshape_flatten_squeeze_unsqueeze():
    check_ort(*single_op("Reshape", {"x": X}, initializers={"s": _i64(0, -1)}))
    check_ort(*single_op("Reshape", {"x": X}, initializers={"s": _i64(4, 0, 2)}))
    for axis in (0, 1, 2, -1):
        check_ort(*single_op("Flatten", {"x": X}, axis=axis))
    check_ort(*single_op("Unsqueeze", {"x": X}, initializers={"a": _i64(0, -1)}))
    check_ort(*single_op("Unsqueeze", {"x": X}, opset=11, axes=[1]))
    y = X[:, :1]
    check_ort(*single_op("Squeeze", {"x": y}, initializers={"a": _i64(1)}))
    check_ort(*single_op("Squeeze", {"x": y}, opset=11, axes=[-2]))


def test_shape_size_expand_constant_of_shape_range():
    check_ort(*single_op("Shape", {"x": X}))
    check_ort(*single_op("Shape", {"x": X}, start=1, end=-1))
    check_ort(*single_op("Size", {"x": X}))
    check_ort(*single_op("Expand", {"x": X[:, :1]}, initializers={"s": _i64(3, 1, 1, 1)}))
    check_ort(*single_op("ConstantOfShape", {}, initializers={"s": _i64(2, 3)}))
    check_ort(
        *single_op(
            "Range",
            {},
            initializers={
                "a": np.array(1, np.int64),
                "b": np.array(9, np.int64),
                "d": np.array(3, np.int64),
            },
        )
    )


@pytest.mark.parametrize(
    "op_type",
    [
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceSumSquare",
        "ReduceL1",
        "ReduceL2",
    ],
)
@pytest.mark.parametrize("opset", [11, 18])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions(op_type, opset, keepdims):
    axes_as_input = opset >= 18 or (op_type == "ReduceSum" and opset >= 13)
    if axes_as_input:
        model = single_op(
            op_type, {"x": X}, initializers={"a": _i64(0, -1)}, opset=opset, keepdims=keepdims
        )
    else:
        model = single_op(op_type, {"x": X}, opset=opset, axes=[0, -1], keepdims=keepdims)
    check_ort(*model, rtol=1e-4)
    check_ort(*single_op(op_type, {"x": X}, opset=opset, keepdims=keepdims), rtol=1e-4)


def test_argmax_argmin_cumsum():
    check_ort(*single_op("ArgMax", {"x": X}, axis=1))
    check_ort(*single_op("ArgMin", {"x": X}, axis=-1, keepdims=0))
    axis = np.array(1, np.int64)
    check_ort(*single_op("CumSum", {"x": X}, initializers={"a": axis}))
    check_ort(*single_op("CumSum", {"x": X}, initializers={"a": axis}, exclusive=1, reverse=1))


def test_constant_of_shape_and_expand_with_a_symbolic_batch(kernels, exec_mode):
    """The target shape ["N", 3] comes from Shape(x): the kernels read N at run time."""
    import onnx
    from onnx import helper
    from onnx_helpers import make_model

    import rvm
    from rvm.testing.onnx_models import run_ort

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node(
            "ConstantOfShape", ["s"], ["c"], value=helper.make_tensor("v", 1, [1], [1.5])
        ),
        helper.make_node("Expand", ["b", "s"], ["e"]),
    ]
    b = np.arange(3, dtype=np.float32)[None]
    model = make_model(nodes, [("x", onnx.TensorProto.FLOAT, ["N", 3])], ["c", "e"], {"b": b})
    vm = rvm.VirtualMachine(rvm.compile(rvm.from_onnx(model), kernels=kernels), exec_mode=exec_mode)
    for batch in (1, 4):
        x = np.zeros((batch, 3), np.float32)
        for ours, expected in zip(vm["main"](x), run_ort(model, [x])):
            assert ours.shape == (batch, 3)
            np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_arg_select_last_index_picks_the_last_tie(op_type, keepdims):
    ties = RNG.integers(0, 3, (3, 5, 4)).astype(np.float32)  # many equal extremes
    model = single_op(op_type, {"x": ties}, axis=1, keepdims=keepdims, select_last_index=1)
    check_ort(*model)
    expected = 4 - getattr(np, op_type.lower())(ties[:, ::-1], axis=1)
    out = run_rvm(*model)[0]
    np.testing.assert_array_equal(out if keepdims == 0 else out[:, 0], expected)


def test_reduce_log_sum_exp_matches_ort():
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32) * 50
    x[0, 0, :] = -np.inf
    axes = {"axes": np.array([1, 2], np.int64)}
    for opset in (11, 13):
        check_ort(*single_op("ReduceLogSumExp", {"x": x}, opset=opset, axes=[1], keepdims=0))
        check_ort(*single_op("ReduceLogSumExp", {"x": x}, opset=opset))
        check_ort(*single_op("ReduceLogSum", {"x": np.abs(x) + 1}, opset=opset, axes=[2]))
    check_ort(*single_op("ReduceLogSumExp", {"x": x}, opset=18, initializers=axes))
