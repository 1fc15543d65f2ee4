"""fuse_activations: GELU (erf and tanh forms, the 0.5 in each place) and SiLU written as
arithmetic become gelu and silu, equal in every mode; other constants keep the chain."""

from __future__ import annotations

import numpy as np
import pytest
from fusion_helpers import build, check_numbers, op_names, run

from rvm import op
from rvm.ir import Var, assert_structural_equal, const, tensor
from rvm.transform.fuse_activations import fuse_activations

F32 = "float32"


def c(value: float):
    return const(np.float32(value))


def _gelu(form: str, sqrt2: float = float(np.sqrt(2.0))):
    x = Var("x", tensor(("n", 8), F32))

    def body(emit):
        if form == "tanh":
            cube = emit(op.multiply(emit(op.power(x, c(3.0))), c(0.044715)))
            inner = emit(op.multiply(emit(op.add(x, cube)), c(np.sqrt(2 / np.pi))))
            phi = emit(op.add(emit(op.tanh(inner)), c(1.0)))
            return emit(op.multiply(emit(op.multiply(x, c(0.5))), phi))
        if form == "erf_mul":
            arg = emit(op.multiply(x, c(1 / sqrt2)))
        else:
            arg = emit(op.divide(x, c(sqrt2)))
        phi = emit(op.add(emit(op.erf(arg)), c(1.0)))
        if form == "half_last":
            return emit(op.multiply(emit(op.multiply(x, phi)), c(0.5)))
        if form == "half_inner":
            return emit(op.multiply(x, emit(op.multiply(phi, c(0.5)))))
        return emit(op.multiply(emit(op.multiply(x, c(0.5))), phi))

    return build([x], body)


def _silu():
    x = Var("x", tensor(("n", 8), F32))
    return build([x], lambda emit: emit(op.multiply(emit(op.sigmoid(x)), x)))


@pytest.mark.parametrize("form", ["erf", "erf_mul", "half_last", "half_inner", "tanh"])
def test_gelu_forms(form: str, exec_mode: str) -> None:
    fused = run(_gelu(form), fuse_activations)
    assert op_names(fused) == ["gelu"]
    call = fused["main"].body.blocks[0].bindings[0].value
    assert call.attrs["approximate"] == ("tanh" if form == "tanh" else "none")
    x = np.linspace(-4, 4, 24, dtype=F32).reshape(3, 8)
    check_numbers(_gelu(form), [x], exec_mode)


def test_silu(exec_mode: str) -> None:
    x = Var("x", tensor(("n", 8), F32))
    expected = build([x], lambda emit: emit(op.silu(x)))
    assert_structural_equal(run(_silu(), fuse_activations), run(expected, lambda m: m))
    check_numbers(_silu(), [np.linspace(-4, 4, 16, dtype=F32).reshape(2, 8)], exec_mode)


def test_another_constant_keeps_the_chain() -> None:
    before = run(_gelu("erf", sqrt2=1.5), lambda m: m)
    assert_structural_equal(fuse_activations(before), before)
