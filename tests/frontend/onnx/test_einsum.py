"""Einsum, LpNormalization, EyeLike and ReverseSequence against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from onnx_helpers import check_ort, make_model, single_op  # noqa: E402

RNG = np.random.default_rng(12)
F32 = TensorProto.FLOAT


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "equation,shapes",
    [
        ("ij,jk->ik", [(2, 3), (3, 4)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("ij->ji", [(3, 4)]),
        ("ii->i", [(4, 4)]),
        ("ij->", [(3, 4)]),
        ("i,i", [(5,), (5,)]),
        ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
        ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ],
)
def test_einsum(equation, shapes, kernels):
    inputs = {f"x{i}": _f32(*s) for i, s in enumerate(shapes)}
    model, arrays = single_op("Einsum", inputs, equation=equation)
    check_ort(model, arrays, kernels=kernels, rtol=1e-4)


def test_einsum_symbolic_batch():
    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation="bij,jk->bik")
    model = make_model([node], [("a", F32, ["n", 3, 4]), ("b", F32, [4, 5])], ["y"])
    for n in (1, 3):
        check_ort(model, [_f32(n, 3, 4), _f32(4, 5)], rtol=1e-4)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lp_normalization(p, axis, kernels):
    model, inputs = single_op("LpNormalization", {"x": _f32(3, 4, 5)}, p=p, axis=axis)
    check_ort(model, inputs, kernels=kernels)


@pytest.mark.parametrize("attrs", [{}, {"k": 1}, {"k": -2}, {"k": 9}, {"dtype": TensorProto.INT32}])
def test_eye_like(attrs, kernels):
    check_ort(*single_op("EyeLike", {"x": _f32(4, 6)}, **attrs), kernels=kernels)


def test_eye_like_symbolic():
    node = helper.make_node("EyeLike", ["x"], ["y"], k=1, dtype=TensorProto.INT64)
    model = make_model([node], [("x", F32, ["n", "m"])], ["y"])
    for shape in ((3, 5), (4, 2)):
        check_ort(model, [_f32(*shape)])


@pytest.mark.parametrize("batch_axis,time_axis", [(0, 1), (1, 0)])
def test_reverse_sequence(batch_axis, time_axis, kernels):
    shape = [None, None, 2]
    shape[batch_axis], shape[time_axis] = 3, 5
    lens = np.array([5, 1, 3], np.int64)
    node = helper.make_node(
        "ReverseSequence", ["x", "lens"], ["y"], batch_axis=batch_axis, time_axis=time_axis
    )
    sym = ["b" if i == batch_axis else "t" if i == time_axis else 2 for i in range(3)]
    model = make_model([node], [("x", F32, sym), ("lens", TensorProto.INT64, [3])], ["y"])
    check_ort(model, [_f32(*shape), lens], kernels=kernels)
    check_ort(model, [_f32(*shape), np.array([0, 2, 4], np.int64)], kernels=kernels)
