"""Quantization converters (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
QLinearMatMul, QLinearConv, MatMulInteger, ConvInteger) against ONNX Runtime, and against
onnx.reference for the 4-bit, 2-bit and float4 types ONNX Runtime's Python API cannot pass."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto as TP  # noqa: E402
from onnx_helpers import check_ort, check_reference, single_op  # noqa: E402

import rvm  # noqa: E402

RNG = np.random.default_rng(10)
# Exact halves (round half to even), values beyond every range, and NaN-free random ones.
X = np.concatenate(
    [np.array([0.5, 1.5, 2.5, -0.5, -2.5, 1e6, -1e6, 0.0], np.float32), RNG.normal(0, 40, 16)]
).astype(np.float32)
X = X.reshape(4, 6)


def _zero(dtype, shape=()):
    return np.full(shape, 3 if np.dtype(dtype).kind == "u" else -2).astype(dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_per_tensor_and_per_axis(dtype, kernels):
    per_tensor = {"s": np.array(0.75, np.float32), "z": _zero(dtype)}
    check_ort(
        *single_op("QuantizeLinear", {"x": X}, initializers=per_tensor, opset=21), kernels=kernels
    )
    per_axis = {"s": np.array([0.5, 2.0, 7.0, 0.25], np.float32), "z": _zero(dtype, (4,))}
    model, inputs = single_op("QuantizeLinear", {"x": X}, initializers=per_axis, opset=21, axis=0)
    check_ort(model, inputs, kernels=kernels)


def test_quantize_without_zero_point_is_uint8_or_output_dtype():
    check_ort(*single_op("QuantizeLinear", {"x": X, "s": np.array(0.5, np.float32)}, opset=10))
    model, inputs = single_op(
        "QuantizeLinear", {"x": X, "s": np.array(0.5, np.float32)}, opset=21, output_dtype=TP.INT16
    )
    check_ort(model, inputs)


@pytest.mark.parametrize("block", [2, 4])
def test_quantize_and_dequantize_blocked(block, kernels):
    blocks = -(-6 // block)  # the last block may be short
    scale = RNG.uniform(0.1, 2.0, (4, blocks)).astype(np.float32)
    zero = RNG.integers(-5, 5, (4, blocks)).astype(np.int8)
    q = {"s": scale, "z": zero}
    model, inputs = single_op(
        "QuantizeLinear", {"x": X}, initializers=q, opset=21, axis=1, block_size=block
    )
    check_ort(model, inputs, kernels=kernels)
    xq = RNG.integers(-128, 127, (4, 6)).astype(np.int8)
    model, inputs = single_op(
        "DequantizeLinear", {"x": xq}, initializers=q, opset=21, axis=1, block_size=block
    )
    check_ort(model, inputs, kernels=kernels)


@pytest.mark.parametrize("saturate", [0, 1])
def test_quantize_to_float8(saturate):
    scale = {"s": np.array([0.5, 2.0, 0.01, 1.0], np.float32)}
    zero = {"z": np.zeros(4, ml_dtypes.float8_e4m3fn)}
    model, inputs = single_op(
        "QuantizeLinear", {"x": X}, initializers=scale | zero, opset=19, axis=0, saturate=saturate
    )
    check_ort(model, inputs)
    e5m2 = {"z": np.zeros(4, ml_dtypes.float8_e5m2)}
    model, inputs = single_op(
        "QuantizeLinear", {"x": X}, initializers=scale | e5m2, opset=19, axis=0, saturate=saturate
    )
    check_reference(model, inputs)


@pytest.mark.parametrize("dtype", ["int4", "uint4", "int2", "uint2", "float4_e2m1fn"])
def test_quantize_and_dequantize_narrow_types(dtype, kernels):
    zero = np.array([1, 0, 1, 1]).astype(dtype)
    scale = np.array([0.5, 4.0, 100.0, 1.0], np.float32)
    q = {"s": scale, "z": zero}
    model, inputs = single_op("QuantizeLinear", {"x": X}, initializers=q, opset=25, axis=0)
    check_reference(model, inputs, kernels=kernels)
    xq = (np.arange(24).reshape(4, 6) % 3).astype(dtype)
    model, inputs = single_op("DequantizeLinear", {"x": xq}, initializers=q, opset=25, axis=0)
    check_reference(model, inputs, kernels=kernels)


def test_quantize_precision_and_dequantize_output_dtype():
    x16 = np.clip(X, -6e4, 6e4).astype(np.float16)  # inf / scale has no defined integer
    q = {"s": np.array(0.3, np.float16), "z": np.array(5, np.uint8)}
    model, inputs = single_op("QuantizeLinear", {"x": x16}, initializers=q, opset=23, precision=1)
    check_reference(model, inputs)
    xq = np.arange(24, dtype=np.uint8).reshape(4, 6) * 9
    model, inputs = single_op(
        "DequantizeLinear", {"x": xq}, initializers=q, opset=23, output_dtype=TP.BFLOAT16
    )
    check_reference(model, inputs)


def test_quantize_divides_in_the_scales_type_since_23():
    """x = 2049 / scale 1: float16 (the scale's type, since 23) rounds it to 2048. Before 23,
    x and the scale must have one type (T1): the model is refused."""
    x = np.array([2049.0, 3.0, -2051.0], np.float32)
    q = {"s": np.array(1.0, np.float16), "z": np.array(0, np.int16)}
    model, inputs = single_op("QuantizeLinear", {"x": x}, initializers=q, opset=23)
    y = rvm.VirtualMachine(rvm.compile(rvm.from_onnx(model)))["main"](*inputs)
    np.testing.assert_array_equal(y, np.rint(x.astype(np.float16)).astype(np.int16))
    assert y[0] == 2048
    model, inputs = single_op("QuantizeLinear", {"x": x}, initializers=q, opset=21)
    message = r"input 1 \('s'\) is tensor\(float16\), but input 0 \('x'\) is tensor\(float\)"
    with pytest.raises(rvm.OnnxImportError, match=message):
        rvm.from_onnx(model)


def test_dequantize_packed_int4_and_float8_initializers(kernels):
    s = np.array(0.5, np.float32)
    x4 = np.array([[1, -8, 7, 0], [3, 2, -1, -5]], ml_dtypes.int4)
    init = {"x": x4, "z": np.array(1, ml_dtypes.int4)}
    model, _ = single_op("DequantizeLinear", {"s": s}, initializers=init, opset=21,
                         input_names=["x", "s", "z"])  # fmt: skip
    check_ort(model, [s], kernels=kernels)
    x8 = np.array([[1, -8, 7, 0.5], [448, 2, -1, 0.125]], ml_dtypes.float8_e4m3fn)
    model, _ = single_op("DequantizeLinear", {"s": s}, initializers={"x": x8}, opset=21,
                         input_names=["x", "s"])  # fmt: skip
    check_ort(model, [s], kernels=kernels)


def test_dynamic_quantize(kernels):
    # X's range +-1e6 puts the zero point on a tie (127.5), which jit kernels may round the
    # other way: their fast-math division multiplies by the reciprocal
    check_ort(*single_op("DynamicQuantizeLinear", {"x": X}, opset=11, n_outputs=3))
    x = RNG.normal(3, 10, (5, 7)).astype(np.float32)
    check_ort(*single_op("DynamicQuantizeLinear", {"x": x}, opset=11, n_outputs=3), kernels=kernels)
    # all zeros: ONNX's reference (the spec's data) divides 1 by 255, ONNX Runtime takes 1
    zeros = np.zeros((2, 2), np.float32)
    check_reference(*single_op("DynamicQuantizeLinear", {"x": zeros}, opset=11, n_outputs=3))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("opset", [10, 21])
def test_qlinear_matmul(dtype, opset, kernels):
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, (2, 3, 4)).astype(dtype)
    b = RNG.integers(info.min, info.max, (4, 5)).astype(dtype)
    params = {
        "a_scale": np.array(0.02, np.float32), "a_zero": _zero(dtype),
        "b_scale": np.array(0.05, np.float32), "b_zero": _zero(dtype),
        "y_scale": np.array(0.3, np.float32), "y_zero": _zero(dtype),
    }  # fmt: skip
    names = ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale", "y_zero"]
    model, _ = single_op(
        "QLinearMatMul", {"a": a, "b": b}, initializers=params, opset=opset, input_names=names
    )
    check_ort(model, [a, b], kernels=kernels)


def test_matmul_integer(kernels):
    a = RNG.integers(0, 255, (3, 4)).astype(np.uint8)
    b = RNG.integers(-20, 20, (4, 2)).astype(np.int8)  # ONNX Runtime's u8 x s8 saturates
    zeros = {"a_zero": np.array(12, np.uint8), "b_zero": np.array([3, -4], np.int8)}
    model, _ = single_op(
        "MatMulInteger", {"a": a, "b": b}, initializers=zeros, opset=10,
        input_names=["a", "b", "a_zero", "b_zero"],
    )  # fmt: skip
    check_ort(model, [a, b], kernels=kernels)


def test_conv_integer_and_qlinear_conv(kernels):
    x = RNG.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    w = RNG.integers(0, 255, (3, 2, 3, 3)).astype(np.uint8)
    model, _ = single_op(
        "ConvInteger", {"x": x, "w": w}, initializers={"x_zero": np.array(100, np.uint8)},
        opset=10, input_names=["x", "w", "x_zero"], pads=[1, 1, 1, 1],
    )  # fmt: skip
    check_ort(model, [x, w], kernels=kernels)
    # small weights: ONNX Runtime's uint8 x int8 kernels saturate 16-bit pair sums
    w8 = RNG.integers(-20, 20, (3, 2, 3, 3)).astype(np.int8)
    params = {
        "x_scale": np.array(0.01, np.float32), "x_zero": np.array(120, np.uint8),
        "w_scale": np.array([0.02, 0.05, 0.01], np.float32), "w_zero": np.zeros(3, np.int8),
        "y_scale": np.array(0.07, np.float32), "y_zero": np.array(128, np.uint8),
        "bias": np.array([100, -2000, 30], np.int32),
    }  # fmt: skip
    names = ["x", "x_scale", "x_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero", "bias"]
    model, _ = single_op(
        "QLinearConv", {"x": x, "w": w8}, initializers=params, opset=10, input_names=names,
        strides=[2, 1],
    )  # fmt: skip
    check_ort(model, [x, w8], kernels=kernels)
