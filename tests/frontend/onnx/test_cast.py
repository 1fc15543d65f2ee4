"""Cast, CastLike and BitCast, and the narrow element types (bfloat16, float8, float4, int4,
int2...) on graph inputs, outputs and initializers: against ONNX Runtime where its Python API
takes the type, else against onnx.reference."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto as TP  # noqa: E402
from onnx import helper  # noqa: E402
from onnx_helpers import check_ort, check_reference, make_model, single_op  # noqa: E402

import rvm  # noqa: E402
from rvm.errors import OnnxImportError  # noqa: E402

# Ties, values beyond every float8 range, infinities and NaN.
X = np.array(
    [[0.0, -0.0, 0.3, -1.75, 2.5, 3.5, 17.0, 240.0, 448.0, 500.0]]
    + [[6e4, 1e9, -1e9, np.inf, -np.inf, np.nan, 1e-3, -7.0, 0.5, 0.125]],
    dtype=np.float32,
)
FLOAT8 = [TP.FLOAT8E4M3FN, TP.FLOAT8E4M3FNUZ, TP.FLOAT8E5M2, TP.FLOAT8E5M2FNUZ]


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("src", [np.float32, np.float16])
def test_cast_to_float8e4m3fn_against_onnxruntime(saturate, src, kernels):
    with np.errstate(over="ignore"):
        x = X.astype(src)
    model, inputs = single_op("Cast", {"x": x}, opset=19, to=TP.FLOAT8E4M3FN, saturate=saturate)
    check_ort(model, inputs, kernels=kernels)


@pytest.mark.parametrize("to", FLOAT8)
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_to_every_float8(to, saturate):
    check_reference(*single_op("Cast", {"x": X}, opset=21, to=to, saturate=saturate))


@pytest.mark.parametrize(
    "to", [TP.BFLOAT16, TP.FLOAT4E2M1, TP.INT4, TP.UINT4, TP.INT2, TP.UINT2, TP.FLOAT]
)
def test_cast_to_and_from_narrow_types(to, kernels):
    small = np.array([[0.0, 1.0, -2.0, 1.5, 3.0, 7.0, -8.0, 0.25]], np.float32)
    check_reference(*single_op("Cast", {"x": small}, opset=25, to=to), kernels=kernels)
    narrow = small.astype(helper.tensor_dtype_to_np_dtype(to))
    check_reference(*single_op("Cast", {"x": narrow}, opset=25, to=TP.FLOAT), kernels=kernels)


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_to_float8e8m0_rounds_the_exponent(round_mode, saturate):
    x = np.array([0.0, 0.124, 0.25, 1.1, 1.5, 3.0, 1e-40, 3e38, np.inf, np.nan, 6.0], np.float32)
    model, inputs = single_op(
        "Cast", {"x": x}, opset=25, to=TP.FLOAT8E8M0, saturate=saturate, round_mode=round_mode
    )
    check_reference(model, inputs)


def test_cast_like_saturates_as_cast_does():
    like = np.zeros(0, ml_dtypes.float8_e5m2)
    check_reference(*single_op("CastLike", {"x": X, "like": like}, opset=19, saturate=1))
    check_reference(*single_op("CastLike", {"x": X, "like": like}, opset=19, saturate=0))


@pytest.mark.parametrize(
    "src, to",
    [(np.float32, TP.INT32), (np.int64, TP.DOUBLE), (np.bool_, TP.UINT8), (np.uint16, TP.INT16)],
)
def test_bitcast_reinterprets_the_bits(src, to, kernels):
    x = np.array([[1, 0, 3], [7, 1, 0]]).astype(src)
    check_reference(*single_op("BitCast", {"x": x}, opset=26, to=to), kernels=kernels)


def test_narrow_inputs_outputs_and_initializers(kernels, exec_mode):
    """A bfloat16 graph computing with a bfloat16 initializer and returning an int4 tensor
    read from a packed initializer (onnx stores 4-bit values two to a byte)."""
    w = np.array([[1.5, -2.0, 0.25], [3.0, 0.5, -1.0]], ml_dtypes.bfloat16)
    packed = np.array([[-8, 7, 0], [3, -1, 5]], ml_dtypes.int4)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Relu", ["xw"], ["y"]),
        helper.make_node("Transpose", ["q"], ["qt"]),
    ]
    model = make_model(
        nodes, [("x", TP.BFLOAT16, [4, 2])], ["y", "qt"], {"w": w, "q": packed}, opset=21
    )
    x = np.linspace(-2, 2, 8, dtype=np.float32).reshape(4, 2).astype(ml_dtypes.bfloat16)
    check_reference(model, [x], kernels=kernels, exec_modes=(exec_mode,))
    ex = rvm.compile(rvm.from_onnx(model), kernels=kernels)
    y, qt = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](x)
    assert y.dtype == ml_dtypes.bfloat16 and qt.dtype == ml_dtypes.int4
    np.testing.assert_array_equal(qt, packed.T)


def test_string_casts_are_refused():
    model, _ = single_op("Cast", {"x": X}, opset=19, to=TP.STRING)
    with pytest.raises(OnnxImportError, match="element type STRING, which rvm does not support"):
        rvm.from_onnx(model)
