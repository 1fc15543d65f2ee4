"""Elementwise converters against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx_helpers import OPSET, check_ort, single_op  # noqa: E402

RNG = np.random.default_rng(0)
A = RNG.standard_normal((2, 3, 4)).astype(np.float32)
B = RNG.standard_normal((3, 1)).astype(np.float32)  # broadcasts against A
POS = (np.abs(A) + 0.5).astype(np.float32)


@pytest.mark.parametrize(
    "op_type",
    [
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Equal",
        "Less",
        "Greater",
        "LessOrEqual",
        "GreaterOrEqual",
        "Max",
        "Min",
        "Sum",
        "Mean",
        "MatMul",
    ],
)
def test_binary(op_type):
    a, b = (POS, B) if op_type == "Pow" else (A, B)
    if op_type == "MatMul":
        b = RNG.standard_normal((4, 5)).astype(np.float32)
    if op_type == "Equal":
        b = np.round(b)
        a = np.round(a)
    check_ort(*single_op(op_type, {"a": a, "b": b}))


@pytest.mark.parametrize(
    "op_type, x",
    [
        ("Neg", A),
        ("Abs", A),
        ("Sqrt", POS),
        ("Exp", A),
        ("Log", POS),
        ("Tanh", A),
        ("Sigmoid", A),
        ("Relu", A),
        ("Erf", A),
        ("Floor", A),
        ("Ceil", A),
        ("Round", A),
        ("Sign", A),
        ("Sin", A),
        ("Cos", A),
        ("Softplus", A),
        ("Reciprocal", POS),
        ("Elu", A),
        ("HardSigmoid", A),
        ("LeakyRelu", A),
    ],
)
def test_unary(op_type, x):
    check_ort(*single_op(op_type, {"x": x}))


UNIT = np.tanh(A)  # in (-1, 1), the domain of Asin, Acos and Atanh


@pytest.mark.parametrize(
    "op_type, x",
    [
        ("Asin", UNIT),
        ("Acos", UNIT),
        ("Atan", A),
        ("Asinh", A),
        ("Acosh", POS + 1.0),
        ("Atanh", UNIT),
    ],
)
@pytest.mark.parametrize("opset", [OPSET, 22])
def test_inverse_trigonometric(op_type, x, opset):
    check_ort(*single_op(op_type, {"x": x}, opset=opset))


def test_leaky_relu_alpha_and_prelu():
    check_ort(*single_op("LeakyRelu", {"x": A}, alpha=0.3))
    slope = np.array([[0.1], [0.2], [0.3]], np.float32)
    check_ort(*single_op("PRelu", {"x": A}, initializers={"slope": slope}))


def test_integer_div_and_mod_follow_onnx():
    a = np.array([7, -7, 7, -7, 0], np.int64)
    b = np.array([2, 2, -2, -2, 3], np.int64)
    check_ort(*single_op("Div", {"a": a, "b": b}))
    check_ort(*single_op("Mod", {"a": a, "b": b}))
    check_ort(*single_op("Mod", {"a": a, "b": b}, fmod=1))


def test_logic():
    p = A > 0
    q = B > 0
    check_ort(*single_op("And", {"p": p, "q": q}))
    check_ort(*single_op("Or", {"p": p, "q": q}))
    check_ort(*single_op("Xor", {"p": p, "q": q}))
    check_ort(*single_op("Not", {"p": p}))
    check_ort(*single_op("Where", {"c": p, "a": A, "b": B}))


def test_clip_versions():
    check_ort(*single_op("Clip", {"x": A}, opset=6, min=-0.5, max=0.5))
    lo, hi = np.array(-0.25, np.float32), np.array(0.75, np.float32)
    check_ort(*single_op("Clip", {"x": A}, initializers={"lo": lo, "hi": hi}))
    check_ort(*single_op("Clip", {"x": A, "lo": lo, "hi": hi}))  # bounds at run time
    check_ort(*single_op("Clip", {"x": A}, initializers={"hi": hi}, input_names=["x", "", "hi"]))


@pytest.mark.parametrize("kernels", ["numpy", "jit"])
def test_chain_in_both_backends(kernels):
    check_ort(*single_op("Sum", {"a": A, "b": B, "c": A}), kernels=kernels)
