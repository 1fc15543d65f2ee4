"""commute_pool_projection: an average pool and a 1x1 convolution next to each other run in
the cheaper order; anything else stays."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.interp import interpret
from rvm.ir import Builder, Call, Var, const, tensor, verify
from rvm.transform.commute_pool_projection import commute_pool_projection

F32 = "float32"
RNG = np.random.default_rng(0)


def _module(
    out=3, stride=1, include_pad=False, kernel=1, groups=1, first_uses=1, is_max=False,
    conv_first=False, window=3,
):  # fmt: skip
    """main(x): a pool (``window`` wide, padded by 1 when 3) of 8 channels and a conv2d to
    ``out`` channels (kernel ``kernel``, ``groups``), the pool first unless ``conv_first``,
    then a per-channel bias and a relu; ``first_uses`` 2 also returns the first of the two."""
    x = Var("x", tensor(("n", 8, 7, 6), F32))
    bb = Builder()
    with bb.function("main", [x]):
        w = const(RNG.standard_normal((out, 8 // groups, kernel, kernel)).astype(F32))
        pad = 1 if window == 3 else 0

        def pool(v):  # type: ignore[no-untyped-def]
            if is_max:
                return bb.emit(op.max_pool2d(v, window, strides=stride, padding=pad))
            return bb.emit(op.avg_pool2d(v, window, stride, pad, count_include_pad=include_pad))

        def conv(v):  # type: ignore[no-untyped-def]
            return bb.emit(op.conv2d(v, w, padding=kernel // 2, groups=groups))

        first = conv(x) if conv_first else pool(x)
        y = pool(first) if conv_first else conv(first)
        y = bb.emit(op.add(y, const(RNG.standard_normal((out, 1, 1)).astype(F32))))
        z = bb.emit(op.relu(y))
        bb.emit_output(rvm.ir.Tuple((z, first)) if first_uses == 2 else z)
    return bb.get()


def _ops(mod) -> list[str]:
    return [
        b.value.callee.name
        for b in mod["main"].body.bindings
        if isinstance(b.value, Call) and hasattr(b.value.callee, "name")
    ]


def _x() -> np.ndarray:
    return RNG.standard_normal((2, 8, 7, 6)).astype(F32)


@pytest.mark.parametrize(
    ("case", "order"),
    [
        (dict(), ["conv2d", "avg_pool2d"]),  # to 3 of 8 channels: pool the 3
        (dict(include_pad=True), ["conv2d", "avg_pool2d"]),
        (dict(conv_first=True, out=6, stride=2, window=2), ["avg_pool2d", "conv2d"]),  # densenet
    ],
)
def test_the_cheaper_order_runs(case, order) -> None:
    mod = _module(**case)
    moved = commute_pool_projection(mod)
    verify(moved)
    assert _ops(moved) == [*order, "add", "relu"]
    x = _x()
    want = interpret(mod, "main", x)
    np.testing.assert_allclose(interpret(moved, "main", x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "case",
    [
        dict(out=8),  # as many channels: no cheaper
        dict(stride=2),  # the pool shrinks the map: the projection would run on 4x the positions
        dict(conv_first=True),  # a pool keeping the map, of fewer channels than its input's
        dict(kernel=3),  # not a 1x1 projection
        dict(out=4, groups=2),
        dict(first_uses=2),
        dict(is_max=True),  # a maximum does not commute with a projection
    ],
)
def test_what_does_not_move_stays(case) -> None:
    mod = _module(**case)
    assert commute_pool_projection(mod) is mod


def test_compiled_model_matches_the_reference(exec_mode) -> None:
    """Through rvm.compile (the pass runs in the default pipeline): same results."""
    mod = _module()
    ex = rvm.compile(mod, kernels="numpy", exec_mode=exec_mode)
    x = _x()
    got = rvm.VirtualMachine(ex)["main"](x)
    np.testing.assert_allclose(got, interpret(mod, "main", x), rtol=1e-5, atol=1e-5)
