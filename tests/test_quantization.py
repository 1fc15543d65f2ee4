"""rvm.quantize: a float module's convolutions and dense products become int8 kernels that
agree with the float module (and with their NumPy reference) in every exec mode."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.ir import Builder, TensorType, Var

RNG = np.random.default_rng(0)
W1 = RNG.normal(0, 0.2, (16, 3, 3, 3)).astype(np.float32)
B1 = RNG.normal(0, 0.1, (1, 16, 1, 1)).astype(np.float32)
W2 = RNG.normal(0, 0.2, (8, 16, 1, 1)).astype(np.float32)
W3 = RNG.normal(0, 0.05, (8 * 6 * 6, 10)).astype(np.float32)
B3 = RNG.normal(0, 0.1, (10,)).astype(np.float32)


def _float_module() -> rvm.IRModule:
    """conv (bias, relu) -> max pool -> 1x1 conv (relu) -> flatten -> matmul (bias)."""
    x = Var("x", TensorType((1, 3, 12, 12), "float32"))
    b = Builder()
    with b.function("main", [x]):
        h = b.emit(op.conv2d(x, rvm.const(W1), padding=1))
        h = b.emit(op.relu(b.emit(op.add(h, rvm.const(B1)))))
        h = b.emit(op.max_pool2d(h, pool_size=(2, 2), strides=(2, 2)))
        h = b.emit(op.relu(b.emit(op.conv2d(h, rvm.const(W2)))))
        h = b.emit(op.reshape(h, (1, 8 * 6 * 6)))
        y = b.emit(op.add(b.emit(op.matmul(h, rvm.const(W3))), rvm.const(B3)))
        b.emit_output(y)
    return b.get()


def _inputs(seed: int, count: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.normal(size=(1, 3, 12, 12)).astype(np.float32)] for _ in range(count)]


def _ops(mod: rvm.IRModule) -> list[str]:
    from rvm.ir import expr as E

    body = mod["main"].body
    return [
        b.value.callee.name
        for block in body.blocks
        for b in block.bindings
        if isinstance(b.value, E.Call) and isinstance(b.value.callee, E.Op)
    ]


@pytest.fixture(scope="module")
def float_mod():
    return _float_module()


@pytest.fixture(scope="module")
def quantized(float_mod):
    """``quantized(method, kernels)``: the quantized module and the float and int8
    executables, built once per method and backend and shared by the exec modes."""
    built: dict[tuple[str, str], tuple[rvm.IRModule, rvm.Executable, rvm.Executable]] = {}

    def build(method: str, kernels: str):
        if (method, kernels) not in built:
            qmod = rvm.quantize(float_mod, _inputs(1, 8), method=method)
            f32, int8 = (rvm.compile(m, kernels=kernels) for m in (float_mod, qmod))
            built[method, kernels] = qmod, f32, int8
        return built[method, kernels]

    return build


@pytest.mark.parametrize(  # the percentile's jit kernels under -m slow (its own compile)
    ("method", "kernels"),
    [("minmax", "numpy"), ("minmax", "jit"), ("percentile", "numpy"),
     pytest.param("percentile", "jit", marks=pytest.mark.slow)],
)  # fmt: skip
def test_quantize_agrees_with_float(quantized, method, exec_mode, kernels):
    """Per-channel int8 weights and uint8 activations: logits within 10% of the largest float
    logit (8-bit steps over three layers, and inputs beyond the calibrated range clip), the
    same top-1 on at least 9 of 10 inputs; the integer kernels equal the module's reference
    interpretation."""
    qmod, f32_ex, int8_ex = quantized(method, kernels)
    ops = _ops(qmod)
    assert ops.count("qconv2d") == 2 and ops.count("qdense") == 1, ops
    assert "conv2d" not in ops and "matmul" not in ops
    f32 = rvm.VirtualMachine(f32_ex, exec_mode=exec_mode)
    int8 = rvm.VirtualMachine(int8_ex, exec_mode=exec_mode)
    agree = 0
    for (x,) in _inputs(2, 10):
        expected, got = f32["main"](x), int8["main"](x)
        assert got.dtype == np.float32 and got.shape == expected.shape
        assert np.abs(got - expected).max() <= 0.1 * np.abs(expected).max()
        agree += int(np.argmax(got) == np.argmax(expected))
        np.testing.assert_allclose(got, rvm.interpret(qmod, "main", x), rtol=0, atol=1e-6)
    assert agree >= 9


def test_quantize_refuses_bad_arguments(float_mod):
    with pytest.raises(rvm.RVMError, match="scheme must be one of"):
        rvm.quantize(float_mod, _inputs(1, 1), scheme="dynamic")
    with pytest.raises(rvm.RVMError, match="method must be one of"):
        rvm.quantize(float_mod, _inputs(1, 1), method="entropy")
    with pytest.raises(rvm.RVMError, match="calibration needs at least one input"):
        rvm.quantize(float_mod, [])
    with pytest.raises(rvm.RVMError, match=r"percentile must be in \(50, 100\]"):
        rvm.quantize(float_mod, _inputs(1, 1), method="percentile", percentile=10)


def test_quantized_executable_saves_and_loads(float_mod, tmp_path):
    qmod = rvm.quantize(float_mod, _inputs(1, 4))
    ex = rvm.compile(qmod)
    path = tmp_path / "int8.rvmx"
    ex.save(path)
    (x,) = _inputs(3, 1)[0]
    expected = rvm.VirtualMachine(ex, exec_mode="native")["main"](x)
    loaded = rvm.load_executable(path)
    for mode in ("bytecode", "compiled", "native"):
        np.testing.assert_array_equal(
            rvm.VirtualMachine(loaded, exec_mode=mode)["main"](x), expected
        )
