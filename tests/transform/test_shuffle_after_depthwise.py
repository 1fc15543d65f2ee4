"""shuffle_after_depthwise: a channel shuffle read only by a strided depthwise convolution
runs after it; anything else stays."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.interp import interpret
from rvm.ir import Builder, Call, Var, const, tensor, verify
from rvm.transform.shuffle_after_depthwise import shuffle_after_depthwise

F32 = "float32"
RNG = np.random.default_rng(0)


def _module(stride=2, multiplier=1, axes=(0, 2, 1, 3, 4), shuffle_uses=1):
    """main(x): shufflenet's channel shuffle of 12 channels in 3 groups -> a 3x3 depthwise
    convolution (``stride``, ``multiplier`` outputs a channel) -> bias -> relu;
    ``shuffle_uses`` 2 also returns the shuffle."""
    x = Var("x", tensor((1, 12, 9, 8), F32))
    bb = Builder()
    with bb.function("main", [x]):
        s = bb.emit(op.reshape(x, (1, 3, 4, 9, 8)))
        s = bb.emit(op.transpose(s, axes))
        s = bb.emit(op.reshape(s, (1, 12, 9, 8)))
        w = const(RNG.standard_normal((12 * multiplier, 1, 3, 3)).astype(F32))
        y = bb.emit(op.conv2d(s, w, strides=stride, padding=1, groups=12))
        y = bb.emit(op.add(y, const(RNG.standard_normal((12 * multiplier, 1, 1)).astype(F32))))
        z = bb.emit(op.relu(y))
        bb.emit_output(rvm.ir.Tuple((z, s)) if shuffle_uses == 2 else z)
    return bb.get()


def _ops(mod) -> list[str]:
    return [
        b.value.callee.name
        for b in mod["main"].body.bindings
        if isinstance(b.value, Call) and hasattr(b.value.callee, "name")
    ]


def _x() -> np.ndarray:
    return RNG.standard_normal((1, 12, 9, 8)).astype(F32)


def test_the_shuffle_runs_after_the_convolution() -> None:
    mod = _module()
    moved = shuffle_after_depthwise(mod)
    verify(moved)
    assert _ops(moved) == ["conv2d", "reshape", "transpose", "reshape", "add", "relu"]
    x = _x()
    want = interpret(mod, "main", x)
    np.testing.assert_allclose(interpret(moved, "main", x), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "case",
    [
        dict(stride=1),  # as many positions: nothing gained
        dict(multiplier=2),  # not one output a channel
        dict(axes=(0, 1, 2, 4, 3)),  # not a channel shuffle
        dict(shuffle_uses=2),
    ],
)
def test_what_does_not_move_stays(case) -> None:
    mod = _module(**case)
    assert shuffle_after_depthwise(mod) is mod


def test_compiled_model_matches_the_reference(exec_mode) -> None:
    """Through rvm.compile (the pass runs in the default pipeline): same results."""
    mod = _module()
    ex = rvm.compile(mod, kernels="numpy", exec_mode=exec_mode)
    x = _x()
    got = rvm.VirtualMachine(ex)["main"](x)
    np.testing.assert_allclose(got, interpret(mod, "main", x), rtol=1e-5, atol=1e-5)
