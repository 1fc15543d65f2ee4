"""pool_after_projection: an average pool that keeps the map's size, then a 1x1 convolution to
fewer channels, becomes the convolution, then the pool; anything else stays."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.interp import interpret
from rvm.ir import Builder, Call, Var, const, tensor, verify
from rvm.transform.pool_after_projection import pool_after_projection

F32 = "float32"
RNG = np.random.default_rng(0)


def _module(out=3, stride=1, include_pad=False, kernel=1, groups=1, pool_uses=1, is_max=False):
    """main(x): a 3x3 pool (padded by 1) of 8 channels -> conv2d to ``out`` channels (kernel
    ``kernel``, ``groups``) -> per-channel bias -> relu; ``pool_uses`` 2 also returns the
    pool."""
    x = Var("x", tensor(("n", 8, 7, 6), F32))
    bb = Builder()
    with bb.function("main", [x]):
        if is_max:
            p = bb.emit(op.max_pool2d(x, 3, strides=stride, padding=1))
        else:
            p = bb.emit(op.avg_pool2d(x, 3, stride, 1, count_include_pad=include_pad))
        w = const(RNG.standard_normal((out, 8 // groups, kernel, kernel)).astype(F32))
        y = bb.emit(op.conv2d(p, w, padding=kernel // 2, groups=groups))
        y = bb.emit(op.add(y, const(RNG.standard_normal((out, 1, 1)).astype(F32))))
        z = bb.emit(op.relu(y))
        bb.emit_output(rvm.ir.Tuple((z, p)) if pool_uses == 2 else z)
    return bb.get()


def _ops(mod) -> list[str]:
    return [
        b.value.callee.name
        for b in mod["main"].body.bindings
        if isinstance(b.value, Call) and hasattr(b.value.callee, "name")
    ]


def _x() -> np.ndarray:
    return RNG.standard_normal((2, 8, 7, 6)).astype(F32)


@pytest.mark.parametrize("include_pad", [False, True])
def test_the_pool_runs_after_the_projection(include_pad) -> None:
    mod = _module(include_pad=include_pad)
    moved = pool_after_projection(mod)
    verify(moved)
    assert _ops(moved) == ["conv2d", "avg_pool2d", "add", "relu"]
    x = _x()
    want = interpret(mod, "main", x)
    np.testing.assert_allclose(interpret(moved, "main", x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "case",
    [
        dict(out=8),  # as many channels: the pool would not shrink
        dict(stride=2),  # the pool shrinks the map: the projection would run on 4x the positions
        dict(kernel=3),  # not a 1x1 projection
        dict(out=4, groups=2),
        dict(pool_uses=2),
        dict(is_max=True),  # a maximum does not commute with a projection
    ],
)
def test_what_does_not_move_stays(case) -> None:
    mod = _module(**case)
    assert pool_after_projection(mod) is mod


def test_compiled_model_matches_the_reference(exec_mode) -> None:
    """Through rvm.compile (the pass runs in the default pipeline): same results."""
    mod = _module()
    ex = rvm.compile(mod, kernels="numpy", exec_mode=exec_mode)
    x = _x()
    got = rvm.VirtualMachine(ex)["main"](x)
    np.testing.assert_allclose(got, interpret(mod, "main", x), rtol=1e-5, atol=1e-5)
