"""rvm.op.dynamic: reshape, expand, full, arange and tile to shapes read at run time."""

from __future__ import annotations

import numpy as np
import pytest
from op_testing import check, evaluate, rand, var

from rvm import op
from rvm.errors import IRError
from rvm.ir import infer_type, tensor

I64 = "int64"


def test_dynamic_reshape():
    x, s = var("x", (2, 3, 4)), var("s", (3,), I64)
    call = op.dynamic_reshape(x, s, (2, None, None))
    a = rand((2, 3, 4))
    out = check(call, {x: a, s: np.array([0, -1, 2])}, tensor((2, None, None), "float32"))
    np.testing.assert_array_equal(out, a.reshape(2, 6, 2))  # 0 keeps x's dim, -1 is inferred
    assert out.flags.c_contiguous
    empty = op.dynamic_reshape(var("e", (0, 3)), var("t", (2,), I64), (None, None), True)
    assert evaluate(empty, {empty.args[0]: np.zeros((0, 3)), empty.args[1]: [3, 0]}).shape == (3, 0)
    with pytest.raises(ValueError, match=r"cannot reshape a tensor of shape \(2, 3, 4\) to"):
        evaluate(call, {x: a, s: np.array([5, -1, 7])})
    with pytest.raises(ValueError, match=r"computed at run time, \(4, 3, 2\), contradicts"):
        evaluate(call, {x: a, s: np.array([4, 3, 2])})
    with pytest.raises(IRError, match="the shape must be a 1-d tensor of 3 dims"):
        infer_type(op.dynamic_reshape(x, var("s2", (2,), I64), (2, None, None)))
    with pytest.raises(IRError, match="the shape must be an integer tensor"):
        infer_type(op.dynamic_reshape(x, var("f", (3,)), (2, None, None)))


def test_dynamic_expand():
    x, s = var("x", (1, 3, 1)), var("s", (4,), I64)
    call = op.dynamic_expand(x, s, (2, None, 3, None))
    a = rand((1, 3, 1))
    out = check(call, {x: a, s: np.array([2, 1, 1, 5])}, tensor((2, None, 3, None), "float32"))
    np.testing.assert_array_equal(out, np.broadcast_to(a, (2, 1, 3, 5)))  # both ways
    assert out.flags.c_contiguous
    with pytest.raises(ValueError, match=r"cannot expand a tensor of shape \(1, 3, 1\) to"):
        evaluate(call, {x: a, s: np.array([2, 1, 4, 5])})
    with pytest.raises(IRError, match="cannot expand rank 3"):
        infer_type(op.dynamic_expand(x, var("s2", (2,), I64), ("n", 3)))


def test_dynamic_full_and_tile():
    s = var("s", (2,), I64)
    out = check(
        op.dynamic_full(s, 7, I64, (None, 3)), {s: np.array([2, 3])}, tensor((None, 3), I64)
    )
    np.testing.assert_array_equal(out, np.full((2, 3), 7))
    with pytest.raises(ValueError, match="negative dimension"):
        evaluate(op.dynamic_full(s, 0.0, "float32", (None, None)), {s: np.array([2, -1])})
    x, r = var("x", (2, 3)), var("r", (2,), I64)
    a = rand((2, 3))
    out = check(op.dynamic_tile(x, r, (None, 6)), {x: a, r: np.array([3, 2])})
    np.testing.assert_array_equal(out, np.tile(a, (3, 2)))
    with pytest.raises(ValueError, match="bad repeats"):
        evaluate(op.dynamic_tile(x, r, (None, None)), {x: a, r: np.array([1, -1])})


def test_dynamic_arange():
    a, b, d = var("a", (), I64), var("b", (), I64), var("d", (), I64)
    call = op.dynamic_arange(a, b, d, I64, "n")
    assert infer_type(call) == tensor(("n",), I64)
    env = {a: np.array(2), b: np.array(11), d: np.array(3)}
    np.testing.assert_array_equal(evaluate(op.dynamic_arange(a, b, d, I64), env), [2, 5, 8])
    env[d] = np.array(-1)
    assert evaluate(op.dynamic_arange(a, b, d, I64), env).shape == (0,)
    env[d] = np.array(0)
    with pytest.raises(ValueError, match="step must not be 0"):
        evaluate(op.dynamic_arange(a, b, d, I64), env)
    f = var("f", (), "float32")
    out = evaluate(op.dynamic_arange(f, f, f, "float32"), {f: np.float32(1.0)})
    assert out.dtype == np.float32 and out.shape == (0,)
    with pytest.raises(IRError, match="start must be 0-d"):
        infer_type(op.dynamic_arange(var("v", (1,), I64), b, d, I64))


def test_dynamic_reduce():
    x, axes = var("x", (2, 1, 4)), var("axes", (2,), I64)
    a = rand((2, 1, 4))
    env = {x: a, axes: np.array([-1, 0])}
    out = check(op.dynamic_reduce(x, axes, "sum"), env, tensor((None, 1, None), "float32"))
    np.testing.assert_allclose(out, a.sum(axis=(0, 2), keepdims=True), rtol=1e-6)
    out = check(op.dynamic_reduce(x, axes, "max", keepdims=False), env, tensor((None,), "float32"))
    np.testing.assert_array_equal(out, a.max(axis=(0, 2)))
    none = var("none", (0,), I64)
    env[none] = np.zeros(0, np.int64)
    out = check(op.dynamic_reduce(x, none, "mean", keepdims=False), env, tensor((), "float32"))
    np.testing.assert_allclose(out, a.mean(), rtol=1e-6)
    out = check(op.dynamic_reduce(x, none, "min", noop_with_empty_axes=True), env)
    np.testing.assert_array_equal(out, a)
    b = var("b", (3,), "bool")
    assert infer_type(op.dynamic_reduce(b, var("one", (1,), I64), "sum")) == tensor((None,), I64)
    with pytest.raises(ValueError, match=r"bad axes \[0, -3\] for a tensor of rank 3"):
        evaluate(op.dynamic_reduce(x, axes, "prod"), {x: a, axes: np.array([0, -3])})
    with pytest.raises(IRError, match="reducer must be one of"):
        op.dynamic_reduce(x, axes, "median")
    with pytest.raises(IRError, match="2 axes for a tensor of rank 1"):
        infer_type(op.dynamic_reduce(var("v", (3,)), axes, "sum"))


def test_dynamic_trilu_scan_topk():
    x, k = var("x", (3, 4)), var("k", (1,), I64)
    a = rand((3, 4))
    out = check(op.dynamic_trilu(x, k, upper=False), {x: a, k: np.array([1])}, x.type)
    np.testing.assert_array_equal(out, np.tril(a, 1))
    with pytest.raises(IRError, match="k must hold one value"):
        infer_type(op.dynamic_trilu(x, var("k2", (2,), I64)))
    b = var("b", (3, 4), "bool")
    scan = op.dynamic_scan(b, k, "sum", exclusive=True, reverse=True)
    assert infer_type(scan) == tensor((3, 4), I64)
    bits = rand((3, 4)) > 0
    expected = np.flip(np.cumsum(np.flip(bits, 1), 1) - np.flip(bits, 1), 1)
    np.testing.assert_array_equal(evaluate(scan, {b: bits, k: np.array([1])}), expected)
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        evaluate(scan, {b: bits, k: np.array([2])})
    pair = op.dynamic_topk(x, k, axis=0, largest=False)
    values, indices = check(pair, {x: a, k: np.array([2])})
    np.testing.assert_array_equal(indices, np.argsort(a, axis=0, kind="stable")[:2])
    np.testing.assert_array_equal(values, np.sort(a, axis=0)[:2])
    with pytest.raises(ValueError, match="k=5 is out of range"):
        evaluate(pair, {x: a, k: np.array([5])})


def test_dynamic_pad():
    x, pads, v = var("x", (2, 3)), var("pads", (4,), I64), var("v", (), "float32")
    a = rand((2, 3))
    call = op.dynamic_pad(x, pads, v)
    env = {x: a, pads: np.array([1, -1, 0, 2]), v: np.float32(7.0)}
    out = check(call, env, tensor((None, None), "float32"))
    np.testing.assert_array_equal(out, np.pad(a[:, 1:], [(1, 0), (0, 2)], constant_values=7.0))
    edge = op.dynamic_pad(x, var("p2", (2,), I64), 0.0, axes=(-1,), mode="reflect")
    assert infer_type(edge) == tensor((2, None), "float32")
    out = evaluate(edge, {x: a, edge.args[1]: np.array([2, 1])})
    np.testing.assert_array_equal(out, np.pad(a, [(0, 0), (2, 1)], mode="reflect"))
    with pytest.raises(ValueError, match="4 pads for 1 axes"):
        evaluate(edge, {x: a, edge.args[1]: np.array([1, 1, 1, 1])})
    with pytest.raises(IRError, match="unknown mode 'mirror'"):
        op.dynamic_pad(x, pads, 0.0, mode="mirror")


def test_dynamic_resize():
    x = var("x", (1, 1, 2, 4))
    roi, scales, sizes = var("roi", (0,)), var("scales", (None,)), var("sizes", (None,), I64)
    a = rand((1, 1, 2, 4))
    call = op.dynamic_resize(x, roi, scales, sizes, axes=(2, 3), mode="nearest")
    assert infer_type(call) == tensor((1, 1, None, None), "float32")
    empty_f, empty_i = np.zeros(0, np.float32), np.zeros(0, np.int64)
    env = {x: a, roi: empty_f, scales: np.array([2.0, 0.5], np.float32), sizes: empty_i}
    static = op.resize(x, (1, 1, 4, 2), (1.0, 1.0, 2.0, 0.5), mode="nearest")
    np.testing.assert_array_equal(evaluate(call, env), evaluate(static, {x: a}))
    env[scales], env[sizes] = empty_f, np.array([3, 8])  # not_larger keeps the aspect ratio
    fit = op.dynamic_resize(
        x, roi, scales, sizes, axes=(2, 3), keep_aspect_ratio_policy="not_larger"
    )
    static = op.resize(x, (1, 1, 3, 6), (1.0, 1.0, 1.5, 1.5))
    np.testing.assert_array_equal(evaluate(fit, env), evaluate(static, {x: a}))
    env[sizes] = empty_i
    with pytest.raises(ValueError, match="needs scales or sizes"):
        evaluate(call, env)
    with pytest.raises(IRError, match="keep_aspect_ratio_policy"):
        op.dynamic_resize(x, roi, scales, sizes, keep_aspect_ratio_policy="fit")


def test_dynamic_squeeze_unsqueeze_split():
    x, axes = var("x", (1, 3, 1)), var("axes", (2,), I64)
    a = rand((1, 3, 1))
    out = check(
        op.dynamic_squeeze(x, axes), {x: a, axes: np.array([0, -1])}, tensor((None,), "float32")
    )
    np.testing.assert_array_equal(out, a.reshape(3))
    with pytest.raises(ValueError, match=r"axes \[0, 1\] of shape \(1, 3, 1\) are not all 1"):
        evaluate(op.dynamic_squeeze(x, axes), {x: a, axes: np.array([0, 1])})
    out = check(op.dynamic_unsqueeze(x, axes), {x: a, axes: np.array([-1, 1])})
    assert out.shape == (1, 1, 3, 1, 1)
    with pytest.raises(ValueError, match="bad axes"):
        evaluate(op.dynamic_unsqueeze(x, axes), {x: a, axes: np.array([1, 1])})
    y, sizes = var("y", (2, 5)), var("sizes", (2,), I64)
    b = rand((2, 5))
    first, second = check(
        op.dynamic_split(y, sizes, axis=1, count=2), {y: b, sizes: np.array([2, 3])}
    )
    np.testing.assert_array_equal(first, b[:, :2])
    np.testing.assert_array_equal(second, b[:, 2:])
    with pytest.raises(ValueError, match="adding up to 5"):
        evaluate(op.dynamic_split(y, sizes, axis=1, count=2), {y: b, sizes: np.array([2, 2])})
    with pytest.raises(IRError, match="count must be a positive int"):
        op.dynamic_split(y, sizes, axis=1, count=0)
