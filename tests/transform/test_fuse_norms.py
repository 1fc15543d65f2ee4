"""fuse_norms: RMSNorm and LayerNorm written as arithmetic become rms_norm and layer_norm,
equal in every mode; a gamma of another shape keeps the chain."""

from __future__ import annotations

import numpy as np
import pytest
from fusion_helpers import build, check_numbers, op_names, run

from rvm import op
from rvm.ir import Var, assert_structural_equal, const, tensor
from rvm.transform.fuse_norms import fuse_norms

F32 = "float32"
RNG = np.random.default_rng(1)
GAMMA = RNG.standard_normal(16).astype(F32)
BETA = RNG.standard_normal(16).astype(F32)


def _rms(spelling: str, gamma: np.ndarray = GAMMA):
    x = Var("x", tensor(("n", "s", 16), F32))

    def body(emit):
        sq = emit(op.power(x, const(np.float32(2.0)))) if spelling == "pow" else emit(x * x)
        v = emit(op.add(emit(op.mean(sq, axis=-1, keepdims=True)), const(np.float32(1e-6))))
        if spelling == "rsqrt":
            y = emit(op.multiply(x, emit(op.rsqrt(v))))
        elif spelling == "reciprocal":
            y = emit(op.multiply(x, emit(op.divide(const(np.float32(1.0)), emit(op.sqrt(v))))))
        else:
            y = emit(op.divide(x, emit(op.sqrt(v))))
        return emit(op.multiply(const(gamma), y))

    return build([x], body)


def _layer_norm():
    x = Var("x", tensor(("n", 16), F32))

    def body(emit):
        d = emit(op.subtract(x, emit(op.mean(x, axis=1, keepdims=True))))
        v = emit(op.mean(emit(op.power(d, const(np.float32(2.0)))), axis=-1, keepdims=True))
        y = emit(op.divide(d, emit(op.sqrt(emit(op.add(v, const(np.float32(1e-5))))))))
        return emit(op.add(emit(op.multiply(y, const(GAMMA))), const(BETA)))

    return build([x], body)


@pytest.mark.parametrize("spelling", ["pow", "square", "rsqrt", "reciprocal"])
def test_rms_norm_spellings(spelling: str, exec_mode: str) -> None:
    fused = run(_rms(spelling), fuse_norms)
    assert op_names(fused) == ["rms_norm"]
    assert fused["main"].body.blocks[0].bindings[0].value.attrs["epsilon"] == pytest.approx(1e-6)
    check_numbers(_rms(spelling), [RNG.standard_normal((2, 3, 16)).astype(F32)], exec_mode)


def test_rms_norm_structure() -> None:
    x = Var("x", tensor(("n", "s", 16), F32))
    gamma = const(GAMMA)
    eps = float(np.float32(1e-6))
    expected = build([x], lambda emit: emit(op.rms_norm(x, gamma, epsilon=eps)))
    before = _rms("pow")
    fused = run(before, fuse_norms)
    got_gamma = fused["main"].body.blocks[0].bindings[0].value.args[1]
    expected = build([x], lambda emit: emit(op.rms_norm(x, got_gamma, epsilon=eps)))
    assert_structural_equal(fused, run(expected, lambda m: m))


def test_layer_norm_spelled_out(exec_mode: str) -> None:
    fused = run(_layer_norm(), fuse_norms)
    assert op_names(fused) == ["layer_norm"]
    check_numbers(_layer_norm(), [RNG.standard_normal((4, 16)).astype(F32)], exec_mode)


def test_a_gamma_of_another_shape_keeps_the_chain() -> None:
    before = run(_rms("pow", np.ones((1, 16), F32)), lambda m: m)
    assert_structural_equal(fuse_norms(before), before)
