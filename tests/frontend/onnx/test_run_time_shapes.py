"""Shapes computed at run time in ONNX graphs with symbolic dimensions: causal masks, positions
after a KV cache (``past + seq``), targets read from data. One compile runs every shape and
matches ONNX Runtime in every exec mode; an inconsistent shape is an error."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

import rvm  # noqa: E402
from rvm.errors import ShapeError  # noqa: E402
from rvm.frontend.onnx.dims import Dims  # noqa: E402
from rvm.ir.dims import DimExpr  # noqa: E402

F, I = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=None):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(o, t, [None] * rank) for o, t, rank in outputs],
        [onnx.numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def _check(model, cases, exec_mode):
    """rvm (compiled once) equals ONNX Runtime on every input set of ``cases``."""
    ex = rvm.compile(rvm.from_onnx(model), kernels="numpy")
    vm = rvm.VirtualMachine(ex, exec_mode=exec_mode)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for inputs in cases:
        expected = session.run(None, dict(zip(names, inputs)))
        out = vm["main"](*inputs)
        out = list(out) if isinstance(out, tuple) else [out]
        for got, want in zip(out, expected):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-6)
    return vm


def _const(name, value):
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(value))


def test_causal_mask(exec_mode):
    """Range to a symbolic length, LessOrEqual, Where, Trilu and CumSum over (seq, seq)."""
    nodes = [
        _const("zero", np.array(0, np.int64)),
        _const("one", np.array(1, np.int64)),
        _const("ax0", np.array([0], np.int64)),
        _const("ax1", np.array([1], np.int64)),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["seq"]),
        helper.make_node("Range", ["zero", "seq", "one"], ["pos"]),
        helper.make_node("Unsqueeze", ["pos", "ax1"], ["rows"]),
        helper.make_node("Unsqueeze", ["pos", "ax0"], ["cols"]),
        helper.make_node("LessOrEqual", ["cols", "rows"], ["mask"]),
        helper.make_node("Where", ["mask", "x", "zero_f"], ["masked"]),
        helper.make_node("Unsqueeze", ["seq", "ax0"], ["seq1"]),
        helper.make_node("Concat", ["seq1", "seq1"], ["square"], axis=0),
        helper.make_node(
            "ConstantOfShape", ["square"], ["ones"], value=helper.make_tensor("v", F, [1], [1.0])
        ),
        helper.make_node("Trilu", ["ones"], ["lower"], upper=0),
        helper.make_node("CumSum", ["lower", "one"], ["counts"]),
    ]
    model = _model(
        nodes,
        [("x", F, ["s", "s"])],
        [("masked", F, 2), ("lower", F, 2), ("counts", F, 2)],
        {"zero_f": np.array(0.0, np.float32)},
    )
    cases = [(np.arange(n * n, dtype=np.float32).reshape(n, n),) for n in (1, 3, 6)]
    _check(model, cases, exec_mode)


def test_positions_after_a_cache(exec_mode):
    """past + seq: the new positions, the cache concatenated, a reshape folding the heads."""
    nodes = [
        _const("two", np.array([2], np.int64)),
        _const("one", np.array(1, np.int64)),
        _const("minus1", np.array([-1], np.int64)),
        helper.make_node("Concat", ["past", "new"], ["cache"], axis=2),
        helper.make_node("Shape", ["past"], ["past_shape"]),
        helper.make_node("Shape", ["cache"], ["cache_shape"]),
        helper.make_node("Gather", ["past_shape", "two"], ["start1"]),
        helper.make_node("Gather", ["cache_shape", "two"], ["stop1"]),
        helper.make_node("Squeeze", ["start1"], ["start"]),
        helper.make_node("Squeeze", ["stop1"], ["stop"]),
        helper.make_node("Range", ["start", "stop", "one"], ["positions"]),
        helper.make_node("Slice", ["cache_shape", "minus1", "minus1"], ["empty"]),  # no dims
        helper.make_node("Gather", ["cache_shape", "minus1"], ["d"]),
        helper.make_node("Concat", ["minus1", "d"], ["flat_shape"], axis=0),
        helper.make_node("Reshape", ["cache", "flat_shape"], ["flat"]),
    ]
    model = _model(
        nodes,
        [("past", F, ["b", 2, "p", 4]), ("new", F, ["b", 2, "s", 4])],
        [("cache", F, 4), ("positions", I, 1), ("flat", F, 2)],
    )
    rng = np.random.default_rng(0)
    cases = [
        (
            rng.standard_normal((b, 2, p, 4), np.float32),
            rng.standard_normal((b, 2, s, 4), np.float32),
        )
        for b, p, s in ((1, 0, 3), (2, 5, 1), (3, 2, 4))
    ]
    _check(model, cases, exec_mode)


def test_shapes_read_from_data(exec_mode):
    """Reshape, Expand, ConstantOfShape and Tile to shapes that are graph inputs."""
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["reshaped"]),
        helper.make_node("Expand", ["x", "target"], ["expanded"]),
        helper.make_node("ConstantOfShape", ["target"], ["zeros"]),
        helper.make_node("Tile", ["x", "reps"], ["tiled"]),
    ]
    model = _model(
        nodes,
        [("x", F, ["n", 1]), ("shape", I, [2]), ("target", I, [2]), ("reps", I, [2])],
        [("reshaped", F, 2), ("expanded", F, 2), ("zeros", F, 2), ("tiled", F, 2)],
    )
    x = np.arange(4, dtype=np.float32).reshape(4, 1)
    v = np.array
    cases = [(x, v([2, 2]), v([4, 3]), v([1, 3])), (x[:2], v([1, 2]), v([1, 2]), v([2, 1]))]
    vm = _check(model, cases, exec_mode)
    with pytest.raises(ShapeError, match=r"cannot reshape a tensor of shape \(4, 1\) to \(3, 3\)"):
        vm["main"](x, v([3, 3]), v([4, 3]), v([1, 1]))
    with pytest.raises(ShapeError, match=r"cannot expand a tensor of shape \(4, 1\) to \(2, 3\)"):
        vm["main"](x, v([2, 2]), v([2, 3]), v([1, 1]))


def test_dim_sums():
    dims = Dims()
    total = dims.add("past", "seq")
    assert isinstance(total, DimExpr) and total == "past + seq" == dims.add("seq", "past")
    assert dims.parse("past + seq", lambda name: name) == total  # an ONNX dim_param
    assert dims.parse("n", str) is None and dims.parse("n ** 2", str) is None
    assert dims.subtract(total, "past") == "seq"
    assert dims.multiply(dims.add("n", 1), 2) == "2*n + 2"
    assert dims.divide(dims.multiply(dims.add("n", 1), 2), 2) == "n + 1"
    assert dims.divide("n", 2) is None and dims.multiply("n", "m") == "m*n"
    assert dims.floor_divide("n", 2) == "n // 2" and dims.floor_divide(-7, 2) == -4
    assert dims.divide(-7, 2) == -3  # ONNX Div truncates
    assert dims.equal("n", -1) is False and dims.equal("n", "n") is True
    assert dims.equal("n", 3) is None and dims.equal(dims.add("n", 1), 0) is False
    assert dims.extreme("n", 0, larger=True) == "n" and dims.extreme("n", 1, larger=True) is None
    assert dims.extreme(dims.add("n", 2), "n", larger=False) == "n"
    assert dims.dim(dims.multiply("n", 3)) == "3*n" and dims.dim("n") == "n"
    assert dims.dim(None) is None and dims.dim(True) is None


@pytest.mark.parametrize("kernels", ["numpy", "jit"])
def test_reshape_to_a_length_a_range_made(exec_mode, kernels):
    """A Range to ``seq`` makes a tensor whose ``seq`` no input of the kernels after it carries;
    a Reshape to ``(-1, seq, 4)`` (read from its shape, as the dynamo exporter writes Llama's
    attention) then needs the name bound (it reached a kernel as the string 'seq')."""
    nodes = [
        _const("zero", np.array(0, np.int64)),
        _const("one", np.array(1, np.int64)),
        _const("ax1", np.array([1], np.int64)),
        _const("ax02", np.array([0, 2], np.int64)),
        _const("ax2", np.array([2], np.int64)),
        _const("s1", np.array([1], np.int64)),
        _const("s2", np.array([2], np.int64)),
        _const("minus1", np.array([-1], np.int64)),
        _const("four", np.array([4], np.int64)),
        _const("w", np.arange(8, dtype=np.float32).reshape(1, 1, 8)),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["n"], axis=0),
        helper.make_node("Range", ["zero", "n", "one"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=F),
        helper.make_node("Unsqueeze", ["rf", "ax02"], ["a"]),  # (1, seq, 1)
        helper.make_node("ReduceSum", ["x", "ax1"], ["b"], keepdims=1),  # (batch, 1)
        helper.make_node("Unsqueeze", ["b", "ax2"], ["b3"]),  # (batch, 1, 1)
        helper.make_node("Mul", ["a", "b3"], ["c"]),
        helper.make_node("Mul", ["c", "w"], ["d"]),  # (batch, seq, 8)
        helper.make_node("Shape", ["d"], ["dshape"]),
        helper.make_node("Slice", ["dshape", "s1", "s2"], ["seq"]),
        helper.make_node("Concat", ["minus1", "seq", "four"], ["target"], axis=0),
        helper.make_node("Reshape", ["d", "target"], ["e"]),  # (2 * batch, seq, 4)
        helper.make_node("Transpose", ["e"], ["y"], perm=[0, 2, 1]),
    ]
    model = _model(nodes, [("x", F, ["batch", "seq"])], [("y", F, 3)])
    ex = rvm.compile(rvm.from_onnx(model), kernels=kernels)
    vm = rvm.VirtualMachine(ex, exec_mode=exec_mode)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for shape in [(2, 5), (3, 1), (1, 7)]:
        x = rng.standard_normal(shape).astype(np.float32)
        (want,) = session.run(None, {"x": x})
        got = vm["main"](x)
        assert got.shape == want.shape == (2 * shape[0], 4, shape[1])
        np.testing.assert_allclose(got, want, rtol=1e-6)
