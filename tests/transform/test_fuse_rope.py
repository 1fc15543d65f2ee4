"""fuse_rope: the rotary embedding written as halves, negation, concat and products becomes
rope (one kernel), equal in every mode; a slice at another point keeps the chain."""

from __future__ import annotations

import numpy as np
import pytest
from fusion_helpers import build, check_numbers, op_names, run

import rvm
from rvm import op
from rvm.ir import Var, assert_structural_equal, const, tensor
from rvm.transform.fuse_rope import fuse_rope

F32 = "float32"


def _rope(split: int = 8, swap: bool = False, by_minus_one: bool = False):
    x = Var("x", tensor(("b", 4, "s", 16), F32))
    cos = Var("cos", tensor(("b", 1, "s", 16), F32))
    sin = Var("sin", tensor(("b", 1, "s", 16), F32))

    def body(emit):
        x1 = emit(op.strided_slice(x, [0], [split], axes=[3]))
        x2 = emit(op.strided_slice(x, [split], [2**62], axes=[-1]))
        neg = emit(op.multiply(x2, const(np.float32(-1)))) if by_minus_one else emit(-x2)
        rot = emit(op.concat([neg, x1], axis=-1))
        a, b = emit(op.multiply(cos, x)), emit(op.multiply(rot, sin))
        return emit(op.add(b, a) if swap else op.add(a, b))

    return build([x, cos, sin], body), (x, cos, sin)


@pytest.mark.parametrize("swap, by_minus_one", [(False, False), (True, True)])
def test_rope_chain_becomes_rope(exec_mode: str, swap: bool, by_minus_one: bool) -> None:
    mod, (x, cos, sin) = _rope(swap=swap, by_minus_one=by_minus_one)
    expected = build([x, cos, sin], lambda emit: emit(op.rope(x, cos, sin)))
    assert_structural_equal(run(mod, fuse_rope), run(expected, lambda m: m))
    assert list(rvm.compile(mod).kernels) == ["fused_rope"]
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(F32) for s in [(2, 4, 3, 16), (2, 1, 3, 16)] * 1]
    args.append(rng.standard_normal((2, 1, 3, 16)).astype(F32))
    check_numbers(mod, args, exec_mode)


def test_halves_at_another_point_keep_the_chain() -> None:
    before = run(_rope(split=6)[0], lambda m: m)
    assert op_names(fuse_rope(before)) == op_names(before)
