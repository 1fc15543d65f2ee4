from __future__ import annotations

import numpy as np
import pytest
from op_testing import check, rand, var

from rvm import op
from rvm.errors import IRError
from rvm.ir import AnyType, Var, infer_type, tensor


def test_matmul_shapes_and_values():
    a, b = var("a", (2, 3, 4)), var("b", (4, 5))
    av, bv = rand((2, 3, 4)), rand((4, 5))
    out = check(op.matmul(a, b), {a: av, b: bv}, tensor((2, 3, 5), "float32"))
    np.testing.assert_allclose(out, av @ bv, rtol=1e-5)
    v = var("v", (4,))
    check(op.matmul(a, v), {a: av, v: rand((4,))}, tensor((2, 3), "float32"))
    check(op.matmul(v, b), {v: rand((4,)), b: bv}, tensor((5,), "float32"))
    check(op.matmul(v, v), {v: rand((4,))}, tensor((), "float32"))


def test_matmul_symbolic():
    x, w = var("x", ("n", "k")), var("w", ("k", "m"))
    assert infer_type(op.matmul(x, w)) == tensor(("n", "m"), "float32")
    x = var("x", ("b", 1, "n", 8))
    w = var("w", (3, 8, 16))
    assert infer_type(x @ w) == tensor(("b", 3, "n", 16), "float32")


def test_matmul_errors():
    with pytest.raises(IRError, match=r"matmul: inner dimensions differ: \(2, 3\) @ \(4, 5\)"):
        infer_type(op.matmul(var("a", (2, 3)), var("b", (4, 5))))
    with pytest.raises(IRError, match=r"matmul: cannot broadcast shapes \(2,\) and \(3,\)"):
        infer_type(op.matmul(var("a", (2, 4, 4)), var("b", (3, 4, 4))))
    with pytest.raises(IRError, match="matmul: operands must have rank >= 1"):
        infer_type(op.matmul(var("a", ()), var("b", (3,))))


def test_dense():
    x, w = var("x", ("n", 8)), var("w", (16, 8))
    assert infer_type(op.dense(x, w)) == tensor(("n", 16), "float32")
    x = var("x", (3, 8))
    xv, wv = rand((3, 8)), rand((16, 8))
    out = check(op.dense(x, w), {x: xv, w: wv}, tensor((3, 16), "float32"))
    np.testing.assert_allclose(out, xv @ wv.T, rtol=1e-5)
    with pytest.raises(IRError, match=r"dense: input \(3, 8\) has 8 features, weight \(4, 7\)"):
        infer_type(op.dense(x, var("w2", (4, 7))))


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_and_log_softmax(axis):
    x = var("x", (3, 4))
    a = rand((3, 4), low=-10, high=10)
    e = np.exp(a.astype("f8") - a.max(axis=axis, keepdims=True))
    ref = e / e.sum(axis=axis, keepdims=True)
    out = check(op.softmax(x, axis=axis), {x: a}, tensor((3, 4), "float32"))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-7)
    out = check(op.log_softmax(x, axis=axis), {x: a}, tensor((3, 4), "float32"))
    np.testing.assert_allclose(out, np.log(ref), rtol=1e-5, atol=1e-5)
    with pytest.raises(IRError, match="softmax: axis 2 is out of range"):
        infer_type(op.softmax(x, axis=2))


def test_layer_norm():
    x, g, b = var("x", (2, 3, 4)), var("g", (4,)), var("b", (4,))
    xv, gv, bv = rand((2, 3, 4)), rand((4,)), rand((4,))
    out = check(op.layer_norm(x, g, b), {x: xv, g: gv, b: bv}, tensor((2, 3, 4), "float32"))
    m = xv.mean(-1, keepdims=True)
    v = ((xv - m) ** 2).mean(-1, keepdims=True)
    np.testing.assert_allclose(out, (xv - m) / np.sqrt(v + 1e-5) * gv + bv, rtol=1e-4, atol=1e-5)
    g2, b2 = var("g2", (3, 4)), var("b2", (3, 4))
    gv2, bv2 = rand((3, 4)), rand((3, 4))
    out = check(op.layer_norm(x, g2, b2, axes=[1, 2], epsilon=1e-3), {x: xv, g2: gv2, b2: bv2})
    m = xv.mean((1, 2), keepdims=True)
    v = xv.var((1, 2), keepdims=True)
    np.testing.assert_allclose(out, (xv - m) / np.sqrt(v + 1e-3) * gv2 + bv2, rtol=1e-4, atol=1e-5)
    assert op.layer_norm(x, g, b).attrs == {"axes": (-1,), "epsilon": 1e-5}
    with pytest.raises(IRError, match=r"layer_norm: gamma has shape \(3,\), expected \(4,\)"):
        infer_type(op.layer_norm(x, var("g3", (3,)), b))
    sym = var("s", ("n", "t", 4))
    assert infer_type(op.layer_norm(sym, g, b)) == tensor(("n", "t", 4), "float32")


def test_batch_norm():
    x = var("x", (2, 3, 4, 4))
    params = [var(n, (3,)) for n in ("g", "b", "m", "v")]
    xv = rand((2, 3, 4, 4))
    gv, bv, mv = rand((3,)), rand((3,)), rand((3,))
    vv = rand((3,), low=0.5, high=2)
    env = {x: xv, **dict(zip(params, (gv, bv, mv, vv)))}
    out = check(op.batch_norm(x, *params, epsilon=1e-3), env, tensor((2, 3, 4, 4), "float32"))
    c = (slice(None), None, None)
    ref = (xv - mv[c]) / np.sqrt(vv[c] + 1e-3) * gv[c] + bv[c]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    with pytest.raises(IRError, match=r"batch_norm: mean has shape \(4,\), expected \(3,\)"):
        infer_type(op.batch_norm(x, params[0], params[1], var("m4", (4,)), params[3]))


def test_lrn_matches_a_direct_loop():
    x = var("x", (2, 7, 3, 3))
    a = rand((2, 7, 3, 3))
    size, alpha, beta, bias = 3, 1e-2, 0.75, 2.0
    out = check(
        op.lrn(x, size=size, alpha=alpha, beta=beta, bias=bias),
        {x: a},
        tensor((2, 7, 3, 3), "float32"),
    )
    ref = np.empty_like(a, dtype="f8")
    for c in range(7):
        lo, hi = max(0, c - (size - 1) // 2), min(6, c + size // 2)
        s = (a[:, lo : hi + 1].astype("f8") ** 2).sum(1)
        ref[:, c] = a[:, c] / (bias + alpha / size * s) ** beta
    np.testing.assert_allclose(out, ref, rtol=1e-5)


def test_float_only():
    with pytest.raises(IRError, match="softmax: expects a float tensor, got int32"):
        infer_type(op.softmax(var("i", (2,), "int32")))
    assert infer_type(op.softmax(Var("u"))) == AnyType()  # no error: u is not typed yet
