"""Bitwise converters (BitwiseAnd/Or/Xor/Not, BitShift) and Mod against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx_helpers import check_ort, single_op  # noqa: E402

RNG = np.random.default_rng(4)


def _ints(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, endpoint=True, dtype=dtype)


@pytest.mark.parametrize("op_type", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [np.int16, np.uint8, np.uint64])
def test_bitwise_binary(op_type, dtype):
    a, b = _ints((2, 3, 5), dtype), _ints((3, 1), dtype)
    check_ort(*single_op(op_type, {"a": a, "b": b}, opset=18))


@pytest.mark.parametrize("dtype", [np.int32, np.uint16])
def test_bitwise_not(dtype):
    check_ort(*single_op("BitwiseNot", {"x": _ints((3, 4), dtype)}, opset=18))


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64])
def test_bit_shift(direction, dtype, kernels):
    bits = np.dtype(dtype).itemsize * 8
    x = _ints((7,), dtype)
    y = np.array([0, 1, 2, 3, bits // 2, bits - 1, 1], dtype)
    model, inputs = single_op("BitShift", {"x": x, "y": y}, opset=11, direction=direction)
    check_ort(model, inputs, kernels=kernels)


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod(fmod, kernels):
    a = (RNG.standard_normal((3, 4)) * 5).astype(np.float32)
    b = np.array([1.5, -2.0, 3.25, -0.75], np.float32)
    if fmod:
        check_ort(*single_op("Mod", {"a": a, "b": b}, opset=13, fmod=1), kernels=kernels)
    ia, ib = _ints((3, 4), np.int32) // 7, np.array([3, -5, 7, -2], np.int32)
    check_ort(*single_op("Mod", {"a": ia, "b": ib}, opset=13, fmod=fmod), kernels=kernels)
