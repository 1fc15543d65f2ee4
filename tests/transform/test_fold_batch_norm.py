"""fold_batch_norm: conv (+ per-channel bias) + batch norm becomes conv with scaled weights +
a bias add; anything else stays."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.interp import interpret
from rvm.ir import Builder, Call, Var, const, tensor, verify
from rvm.transform.fold_batch_norm import fold_batch_norm

F32 = "float32"
RNG = np.random.default_rng(0)


def _stats(c: int) -> list:
    gamma, beta, mean = (RNG.standard_normal(c).astype(F32) for _ in range(3))
    var = RNG.random(c).astype(F32) + 0.5
    return [const(a) for a in (gamma, beta, mean, var)]


def _module(bias: str | None, relu: bool = True, conv_uses: int = 1, const_stats: bool = True):
    """main(x): conv2d (3 -> 6 channels, stride 2, groups 1) [+ bias] -> batch norm [-> relu];
    ``conv_uses`` 2 also returns the convolution; without ``const_stats`` gamma is a
    parameter."""
    x = Var("x", tensor(("n", 3, 9, 8), F32))
    g = Var("g", tensor((6,), F32))
    params = [x] if const_stats else [x, g]
    bb = Builder()
    with bb.function("main", params):
        w = const(RNG.standard_normal((6, 3, 3, 3)).astype(F32))
        y = conv = bb.emit(op.conv2d(x, w, strides=2, padding=(1, 0, 1, 1)))
        if bias == "channel":
            y = bb.emit(op.add(y, const(RNG.standard_normal((6, 1, 1)).astype(F32))))
        elif bias == "spatial":  # varies along width: not a per-channel bias
            y = bb.emit(op.add(y, const(RNG.standard_normal((6, 1, 4)).astype(F32))))
        stats = _stats(6)
        if not const_stats:
            stats[0] = g
        z = bb.emit(op.batch_norm(y, *stats, epsilon=1e-3))
        if relu:
            z = bb.emit(op.relu(z))
        bb.emit_output(rvm.ir.Tuple((z, conv)) if conv_uses == 2 else z)
    return bb.get()


def _ops(mod) -> list[str]:
    return [
        b.value.callee.name
        for b in mod["main"].body.bindings
        if isinstance(b.value, Call) and hasattr(b.value.callee, "name")
    ]


def _inputs(const_stats: bool = True) -> list[np.ndarray]:
    x = RNG.standard_normal((2, 3, 9, 8)).astype(F32)
    return [x] if const_stats else [x, RNG.standard_normal(6).astype(F32)]


def _assert_folds_to_conv_add_relu(mod) -> None:
    """The pass leaves one convolution, its one bias add and the relu, with the same results."""
    folded = fold_batch_norm(mod)
    verify(folded)
    assert _ops(folded) == ["conv2d", "add", "relu"]
    x = _inputs()
    want = interpret(mod, "main", *x)
    np.testing.assert_allclose(interpret(folded, "main", *x), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bias", [None, "channel"])
def test_conv_batch_norm_folds(bias) -> None:
    mod = _module(bias)
    _assert_folds_to_conv_add_relu(mod)


@pytest.mark.parametrize(
    "case", [dict(bias="spatial"), dict(bias=None, conv_uses=2), dict(bias=None, const_stats=0)]
)
def test_what_does_not_fold_stays(case) -> None:
    mod = _module(**case)
    assert fold_batch_norm(mod) is mod


def test_compiled_model_matches_the_reference(exec_mode, kernels) -> None:
    """Through rvm.compile (the pass runs in the default pipeline): same results."""
    mod = _module("channel")
    ex = rvm.compile(mod, kernels=kernels, exec_mode=exec_mode)
    assert not any("batch_norm" in name for name in ex.kernels)
    x = _inputs()
    got = rvm.VirtualMachine(ex)["main"](*x)
    np.testing.assert_allclose(got, interpret(mod, "main", *x), rtol=1e-4, atol=1e-4)


def _arith_module(bias: bool, shift: bool, scale_uses: int = 1):
    """main(x): conv2d [+ per-channel bias] * per-channel scale [+ per-channel shift] -> relu:
    a batch norm written as Mul and Add (as ONNX exports of inception_v2 have it);
    ``scale_uses`` 2 also returns the scaled value."""
    x = Var("x", tensor(("n", 3, 9, 8), F32))
    bb = Builder()
    with bb.function("main", [x]):
        w = const(RNG.standard_normal((6, 3, 3, 3)).astype(F32))
        y = bb.emit(op.conv2d(x, w, strides=2, padding=(1, 0, 1, 1)))
        if bias:
            y = bb.emit(op.add(y, const(RNG.standard_normal((6, 1, 1)).astype(F32))))
        scale = const(RNG.standard_normal((1, 6, 1, 1)).astype(F32))
        scaled = y = bb.emit(op.multiply(scale, y))
        if shift:
            y = bb.emit(op.add(y, const(RNG.standard_normal((6, 1, 1)).astype(F32))))
        z = bb.emit(op.relu(y))
        bb.emit_output(rvm.ir.Tuple((z, scaled)) if scale_uses == 2 else z)
    return bb.get()


@pytest.mark.parametrize(("bias", "shift"), [(False, False), (True, False), (True, True)])
def test_conv_scale_and_shift_fold(bias, shift) -> None:
    mod = _arith_module(bias, shift)
    _assert_folds_to_conv_add_relu(mod)


def test_a_scaled_value_used_twice_folds_but_ends_the_chain() -> None:
    mod = _arith_module(bias=True, shift=False, scale_uses=2)
    folded = fold_batch_norm(mod)
    verify(folded)
    assert "multiply" not in _ops(folded)
    x = _inputs()
    for got, want in zip(interpret(folded, "main", *x), interpret(mod, "main", *x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_scale_and_shift_after_a_batch_norm_fold_too() -> None:
    """conv -> batch_norm -> multiply -> add -> relu (inception_v2's ONNX export)."""
    x = Var("x", tensor(("n", 3, 9, 8), F32))
    bb = Builder()
    with bb.function("main", [x]):
        w = const(RNG.standard_normal((6, 3, 3, 3)).astype(F32))
        y = bb.emit(op.conv2d(x, w, strides=2, padding=(1, 0, 1, 1)))
        y = bb.emit(op.batch_norm(y, *_stats(6), epsilon=1e-3))
        y = bb.emit(op.multiply(y, const(RNG.standard_normal((6, 1, 1)).astype(F32))))
        y = bb.emit(op.add(y, const(RNG.standard_normal((6, 1, 1)).astype(F32))))
        bb.emit_output(bb.emit(op.relu(y)))
    mod = bb.get()
    _assert_folds_to_conv_add_relu(mod)
